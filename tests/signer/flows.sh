#!/bin/sh
# Issue 9: a bundle from every flow of a real tkbox-signer (allow, deny, ask approved / rejected / expired,
# observations of every kind and gaps, each close reason the daemon sends, an open run), each checked three ways:
# `tkbox verify` (which checks every event's data by type, src/verify/schema.c), the expected verdict and assurance
# (a self-approval says "approvals: self"), and python3-jsonschema against Tracekit's event schema v2
# (tests/verify/vectors/tracekit.event.v2.json, commit 687a96c).
# Then the differential test: tkb-schema (src/verify/schema.c) and python3-jsonschema must agree on ~30,000 mutations
# of these events and of events of the types tkbox-signer does not write.
# usage: flows.sh TKBOX-SIGNER SIGNER-CLIENT TKBOX TKB-SCHEMA
. "$(dirname "$0")/lib.sh"
TKB_SCHEMA=$4
HERE=$(cd "$(dirname "$0")" && pwd)
SCHEMA=$HERE/../verify/vectors/tracekit.event.v2.json
"$SIGNER" init --dev >/dev/null || fail "init"
# Approvals expire after 1 s here, so the expired flow needs no long wait.
python3 - "$TKBOX_SIGNER_DIR/config.json" <<'PY' || fail "setting approval_ttl_s"
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["approval_ttl_s"] = 1
open(p, "w").write(json.dumps(c))
PY
"$SIGNER" up --wait >/dev/null || fail "up"
mkdir "$WORK/flows"
"$CLIENT" flows "$TKBOX_SIGNER_SOCKET" "$WORK/flows" || fail "scripted flows"
"$SIGNER" down >/dev/null || fail "down"
check_log

# verify FLOW INTEGRITY SELF: tkbox verify exits 0 with that verdict; SELF=yes wants "approvals: self".
verify() {
	B=$WORK/flows/$1.tkb
	out=$("$TKBOX" verify "$B" --trust "$WORK/flows/$1.trust.json" 2>&1) || { echo "$out"; fail "$1: tkbox verify exit $?"; }
	echo "$out" | grep -q "^Integrity: $2\\." || { echo "$out"; fail "$1: not $2"; }
	if [ "$3" = yes ]; then
		echo "$out" | grep -q '^Assurance: dev;.*; approvals: self' || { echo "$out"; fail "$1: no approvals: self"; }
	else
		echo "$out" | grep -q 'approvals: self' && { echo "$out"; fail "$1: approvals: self without a self-approval"; }
	fi
	echo "$1: $(echo "$out" | grep '^Integrity')"
}
verify allow VERIFIED no
verify approved VERIFIED yes
verify rejected VERIFIED yes
verify expired VERIFIED no
verify observe VERIFIED no
verify close-default VERIFIED no
verify open "VERIFIED TO HEAD [0-9]* (open)" no

python3 "$HERE/../verify/schema-check.py" "$SCHEMA" "$WORK"/flows/*.tkb || fail "an event is not valid under the schema"
# The schema check is not vacuous: the approval.request of before issue 9 (no decision_id, binding,
# binding_digest) and a tool.result with the old exit_status beside output are refused.
python3 - "$WORK/flows/approved.tkb" "$WORK/old.tkb" <<'PY' || fail "making the old-style bundle"
import json, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
    for name in z.namelist():
        data = z.read(name)
        if name.startswith("runs/"):
            lines = []
            for line in data.decode().splitlines():
                r = json.loads(line)
                d = r["event"]["data"]
                if r["event"]["type"] == "approval.request":
                    for k in ("decision_id", "binding", "binding_digest"):
                        d.pop(k)
                if r["event"]["type"] == "tool.result":
                    d["exit_status"] = 137
                lines.append(json.dumps(r))
            data = ("\n".join(lines) + "\n").encode()
        out.writestr(name, data)
PY
set +e
old=$(python3 "$HERE/../verify/schema-check.py" "$SCHEMA" "$WORK/old.tkb" 2>&1)
code=$?
set -e
[ "$code" -eq 1 ] || { echo "$old"; fail "schema-check accepted the old approval.request (exit $code)"; }
echo "$old" | grep -q "approval.request.*'binding' is a required property" || { echo "$old"; fail "no binding error"; }
echo "$old" | grep -q "tool.result.*exit_status" || { echo "$old"; fail "no exit_status error"; }
echo "old-style records refused by the schema check, as Tracekit's verifier refuses them"
python3 "$HERE/../verify/schema-diff.py" "$SCHEMA" "$TKB_SCHEMA" "$WORK"/flows/*.tkb ||
	fail "tkbox's per-type rules and the JSON schema disagree"
echo "PASS: flows"
