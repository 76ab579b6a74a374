#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# egress-approve (issue 12): a person answers for an off-list host, from another terminal.
#   box p1 --allow origin.test.example: curl to an off-list name waits; `tkbox approvals` lists it (ID, box,
#   target); the name is not looked up while it waits; `tkbox approve ID` from a background job lets that same
#   curl finish (200, the body); only then is the name looked up; a second connection to the same host:port
#   passes with no new approval; p1's bundle verifies and holds one tkbox.approval (approved, target, box,
#   approver) and a WebFetch decision with its completion for both connections; the events file has
#   egress.approval_pending and egress.approved.
#   box p2 --allow origin.test.example --inspect all: an off-list host is refused at once (403, the rule, how
#   to allow it), nothing is pending, the name is not looked up.
#   tests/egress/egress-approve.sh BUILD_DIR      (root; about 2 minutes under TCG)
set -u
BUILD=${1:?usage: egress-approve.sh BUILD_DIR}
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

T0=$(t)
eg_up
eg_image
signer_init && signer_start || eg_die "no signer"
eg_daemon_start || eg_die "no daemon"
echo "# harness, image and daemon ready in $(elapsed "$T0") s"

if eg_box p1 --allow origin.test.example; then ok "run p1 --allow origin.test.example"; else
	notok "run p1" "$(cat "$WORK/run-p1.err" "$WORK/ca-p1.err" 2>/dev/null)"
	echo "1..$((pass + fail))"
	exit 1
fi

held=h1-$EG_NONCE.held.test.example
# The proxy named explicitly: egress-clients checks the box's own settings.
PX=(--proxy http://127.0.0.1:3128)
inbox p1 200 curl -sS "${PX[@]}" --max-time 180 -w '%{http_code}' "https://$held/" >"$WORK/held.out" 2>&1 &
bg=$!
line=
for _ in $(seq 120); do
	line=$("$TKBOX" approvals 2>/dev/null | grep -F " $held:443")
	[ -n "$line" ] && break
	sleep 0.5
done
"$TKBOX" approvals >"$WORK/approvals.txt" 2>&1
sed 's/^/#   | /' "$WORK/approvals.txt"
id=$(awk '{ print $1 }' <<<"$line")
check "tkbox approvals lists the held connection: ID BOX TARGET ($line)" \
	eval "[ -n '$id' ] && awk '{ print \$2, \$3 }' <<<'$line' | grep -qxF 'p1 $held:443'"
check "tkbox approvals has the header ID BOX TARGET AGE" eval "head -n 1 '$WORK/approvals.txt' | grep -Eq '^ID +BOX +TARGET +AGE'"
check "tkbox approvals --json agrees" eval "approvals_json | jq -e --arg i '$id' '.[] | select(.id == \$i and .box == \"p1\" and .target == \"$held:443\")' >/dev/null"
check "held: the off-list name was not looked up" eval "! dns_was_queried '$held'"
check "held: the curl is still waiting" kill -0 "$bg"

# "Another terminal": a separate job answers while the curl waits.
("$TKBOX" approve "$id" >"$WORK/approve.out" 2>&1; echo "rc=$?" >>"$WORK/approve.out") &
wait $!
check "tkbox approve $id ($(tr '\n' ' ' <"$WORK/approve.out"))" grep -q 'rc=0' "$WORK/approve.out"
wait "$bg"
out=$(cat "$WORK/held.out")
check "the same curl completes after the approval: 200 and the body" test "$out" = "tkbox-origin-ok $EG_NONCE"$'\n'200
check "approved: now the name was looked up" dns_was_queried "$held"
check "nothing pending any more" test "$(approvals_json | jq 'length')" = 0

out=$(inbox p1 90 curl -sS "${PX[@]}" --max-time 60 -w '%{http_code}' "https://$held/host")
check "a second connection to $held:443 passes without a new approval" test "$out" = "host=$held"$'\n'200
check "still nothing pending" test "$(approvals_json | jq 'length')" = 0

"$TKBOX" stop p1 >/dev/null 2>&1
check "events: egress.approval_pending and egress.approved" \
	eval "box_events p1 | grep -q 'egress.approval_pending' && box_events p1 | grep -q 'egress.approved'"
if eg_export_verify p1; then ok "p1's bundle verifies"; else notok "p1's bundle verifies" "$(tail -3 "$WORK/verify-p1.out" 2>/dev/null)"; fi
bundle_egress "$WORK/p1.tkb" >"$WORK/p1.egress.jsonl" 2>/dev/null
appr=$(jq -c 'select(.type == "observe" and .kind == "tkbox.approval") | .data' "$WORK/p1.egress.jsonl")
echo "# tkbox.approval: $appr"
check "exactly one tkbox.approval in the bundle" test "$(grep -c . <<<"$appr")" -eq 1
check "tkbox.approval: approved, box p1, target $held:443, approver uid:$(id -u), id $id" eval \
	"[ -n \"\$appr\" ] && jq -e --arg i '$id' '.decision == \"approved\" and .box == \"p1\" and .target == \"$held:443\" and .approver == \"uid:$(id -u)\" and .approval_id == \$i' <<<\"\$appr\" >/dev/null"
n_wf=$(jq -s '[.[] | select(.type == "decision" and .tool == "WebFetch")] | length' "$WORK/p1.egress.jsonl")
n_res=$(jq -s '[.[] | select(.type == "decision" and .tool == "WebFetch") | .tool_use_id] as $d | [.[] | select(.type == "result" and (.tool_use_id as $u | $d | index($u)))] | length' "$WORK/p1.egress.jsonl")
check "two WebFetch decisions, each completed ($n_wf decided, $n_res completed)" eval "[ '$n_wf' = 2 ] && [ '$n_res' = 2 ]"

# --inspect all: refused at once, nothing held.
if eg_box p2 --allow origin.test.example --inspect all; then ok "run p2 --inspect all"; else
	notok "run p2 --inspect all" "$(cat "$WORK/run-p2.err" 2>/dev/null)"
fi
check "tkbox ls --json shows inspect all for p2" eval \
	"\"$TKBOX\" ls --json | jq -e '.[] | select(.name == \"p2\") | .egress.inspect == \"all\"' >/dev/null"
held2=h2-$EG_NONCE.held.test.example
eg_py p2 60 connect "inspect=$held2:443" >"$WORK/p2.jsonl"
st=$(jf "$WORK/p2.jsonl" inspect .status)
body=$(jf "$WORK/p2.jsonl" inspect '.body // ""')
ms=$(jf "$WORK/p2.jsonl" inspect .ms)
echo "# --inspect all refusal after $ms ms: $body"
rule=$(jf "$WORK/p2.jsonl" inspect '.rule // ""')
if [ "$st" = 403 ] && [ -n "$rule" ] && [[ $body == "tkbox egress: $held2:443 refused"* ]] &&
	grep -Eq -- '--allow|--inspect' <<<"$body"; then
	ok "--inspect all: 403 [$rule], the body says how to allow it"
else
	notok "--inspect all: 403 with the rule and how to allow it" "status=$st rule=$rule" "$body"
fi
check "--inspect all: nothing pending" test "$(approvals_json | jq 'length')" = 0
check "--inspect all: the name was not looked up" eval "! dns_was_queried '$held2'"
"$TKBOX" stop p2 >/dev/null 2>&1

echo "# total $(elapsed "$T0") s"
echo "1..$((pass + fail))"
[ $fail -eq 0 ]
