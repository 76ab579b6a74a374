#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# egress-attacks (issue 12): what a hostile agent sends to its proxy, each refused and recorded as the
# reference says, through the real daemon, supervisor and guest (tests/egress/lib.sh's origins and dnsmasq).
#   box a1 (--allow origin/private/meta/loop.test.example): loopback, private, shared, link-local,
#     multicast, reserved, metadata and this host's own addresses (its veth address and its other addresses)
#     in many textual forms, metadata and localhost names, allowlisted names that resolve to 10.0.0.1,
#     169.254.169.254 and 127.0.0.1, a --egress-block address, then framing: CONNECT :80, an absolute-form
#     request whose Host differs, CL+TE, a duplicate Content-Length, obs-fold, a bare LF. Each gets a 4xx with
#     Tkbox-Rule and a body naming the refusal; none reaches nginx; a1's bundle verifies, holds a tkbox.egress
#     record per refusal and no WebFetch decision at all (refused before deciding); the names that must never
#     be looked up never reach dnsmasq.
#   box a2 (--allow origin.test.example --allow other.test.example:7000 --allow pinned.test.example): a TLS
#     tunnel whose SNI names another host (cut, its completion says so) beside one that matches; bytes that
#     are not TLS on 443 (no port entry: cut, nothing forwarded) and on other:7000 (its port entry: echoed);
#     `tkbox daemon --resolve` (pinned.test.example served without DNS); the 257th connection (refused, and
#     one more after a close passes); an off-list name held, not looked up, rejected, still not looked up;
#     the 17th pending approval refused at once; a stop while a download is in its tunnel (cut, stop ends).
# ECH GREASE, two SNIs and an HRR with a changed SNI: no client in the image can send them (curl 7.88 and
# OpenSSL 3.0 have no ECH; python's ssl one SNI); tests/unit (egress-clienthello) covers those bytes.
#   tests/egress/egress-attacks.sh BUILD_DIR      (root; about 3 minutes under TCG)
set -u
BUILD=${1:?usage: egress-attacks.sh BUILD_DIR}
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

T0=$(t)
eg_up
eg_image
signer_init && signer_start || eg_die "no signer"
eg_daemon_start --egress-block "$EG_HELD_IP" --resolve "pinned.test.example=$EG_ORIGIN_IP" || eg_die "no daemon"
echo "# harness, image and daemon ready in $(elapsed "$T0") s"

hex() { printf '%b' "$1" | od -An -v -tx1 | tr -d ' \n'; }
ip2dec() { awk -F. '{ printf "%u", (($1 * 256 + $2) * 256 + $3) * 256 + $4 }' <<<"$1"; }
# A 4xx from the proxy with Tkbox-Rule and a body that says what refused it: "tkbox egress: ... refused ...".
refused() { # FILE CASE
	local st rule body
	st=$(jf "$1" "$2" .status)
	rule=$(jf "$1" "$2" '.rule // ""')
	body=$(jf "$1" "$2" '.body // ""')
	[[ $st =~ ^4[0-9][0-9]$ ]] && [ -n "$rule" ] && [[ $body == "tkbox egress:"*refused* ]]
}
show() { jq -c --arg c "$2" 'select(.case == $c) | {status, rule, body: (.body // "" | .[0:160]), error, closed}' "$1" 2>/dev/null; }

# ---- a1: addresses, names and framing ------------------------------------------------------------------
if eg_box a1 --allow origin.test.example,private.test.example,meta.test.example,loop.test.example; then
	ok "run a1"
else
	notok "run a1" "$(cat "$WORK/run-a1.err" "$WORK/ca-a1.err" 2>/dev/null)"
	echo "1..$((pass + fail))"
	exit 1
fi
own=$(ip -4 -o addr show scope global | awk '{ split($4, a, "/"); print a[1] }' | grep -vxF "$EG_HOST_IP" | head -n 1)
set -f # the bracketed IPv6 literals below are not globs
cases=(
	lo-dotted=127.0.0.1:443 lo-short=127.1:443 lo-decimal=2130706433:443 lo-hex=0x7f.0.0.1:443
	lo-octal=0177.0.0.1:443 lo-hex-one=0x7f000001:443 lo-trailing-dot=127.0.0.1.:443 lo-v6=[::1]:443
	lo-mapped=[::ffff:127.0.0.1]:443 lo-mapped-hex=[::ffff:7f00:1]:443 lo-6to4=[2002:7f00:1::]:443
	unspecified=0.0.0.0:443 unspecified-short=0:443 "unspecified-v6=[::]:443"
	private-10=10.0.0.1:443 private-10-short=10.1:443 private-172=172.16.0.1:443 private-192=192.168.0.1:443
	private-octal=012.0.0.1:443 shared-100-64=100.64.0.1:443 ula=[fd00::1]:443 linklocal=169.254.1.1:443
	linklocal-v6=[fe80::1]:443 multicast=224.0.0.1:443 broadcast=255.255.255.255:443 reserved=240.0.0.1:443
	metadata=169.254.169.254:443 metadata-decimal=2852039166:443 metadata-hex=0xa9fea9fe:443
	metadata-short=169.254.43518:443 metadata-mapped=[::ffff:169.254.169.254]:443
	metadata-nat64=[64:ff9b::a9fe:a9fe]:443 metadata-v6=[fd00:ec2::254]:443 metadata-ecs=169.254.170.2:443
	metadata-alibaba=100.100.100.200:443 metadata-port80-connect=169.254.169.254:8080
	own-veth="$EG_HOST_IP:443" own-veth-decimal="$(ip2dec "$EG_HOST_IP"):443" own-veth-mapped="[::ffff:$EG_HOST_IP]:443"
	egress-block="$EG_HELD_IP:443"
	name-metadata=metadata.google.internal:443 name-metadata-azure=metadata.azure.internal:443
	name-localhost=localhost:443 name-sub-localhost=a.localhost:443
	resolved-private=private.test.example:443 resolved-metadata=meta.test.example:443
	resolved-loopback=loop.test.example:443
)
[ -n "$own" ] && cases+=("own-host=$own:443" "own-host-decimal=$(ip2dec "$own"):443")
abs=(abs-loopback=http://127.1/ abs-metadata=http://169.254.169.254/latest/meta-data/
	abs-metadata-decimal=http://2852039166/latest/meta-data/ abs-own-veth="http://$EG_HOST_IP/"
	abs-resolved-private=http://private.test.example/)
set +f
eg_py a1 300 connect "${cases[@]}" >"$WORK/a1-connect.jsonl"
eg_py a1 120 absolute "${abs[@]}" >"$WORK/a1-abs.jsonl"
n_bad=0
for c in "${cases[@]}" "${abs[@]}"; do
	name=${c%%=*}
	f=$WORK/a1-connect.jsonl
	[[ $name == abs-* ]] && f=$WORK/a1-abs.jsonl
	if refused "$f" "$name"; then ok "refused: $name (${c#*=}) [$(jf "$f" "$name" .rule)]"; else
		notok "refused: $name (${c#*=})" "$(show "$f" "$name")"
		n_bad=$((n_bad + 1))
	fi
done
echo "# a1 sample refusal: $(show "$WORK/a1-connect.jsonl" metadata)"

for n in metadata.google.internal metadata.azure.internal localhost a.localhost; do
	check "never looked up: $n" eval "! dns_was_queried $n"
done

frames=(
	connect-80="$(hex 'CONNECT origin.test.example:80 HTTP/1.1\r\nHost: origin.test.example:80\r\n\r\n')"
	host-differs="$(hex 'GET http://origin.test.example/host?case=hostdiff HTTP/1.1\r\nHost: other.test.example\r\n\r\n')"
	cl-te="$(hex 'POST http://origin.test.example/?case=clte HTTP/1.1\r\nHost: origin.test.example\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n')"
	duplicate-cl="$(hex 'POST http://origin.test.example/?case=dupcl HTTP/1.1\r\nHost: origin.test.example\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello')"
	obs-fold="$(hex 'GET http://origin.test.example/?case=obsfold HTTP/1.1\r\nHost: origin.test.example\r\nX-A: a\r\n b\r\n\r\n')"
	bare-lf="$(hex 'GET http://origin.test.example/?case=barelf HTTP/1.1\nHost: origin.test.example\n\n')"
)
eg_py a1 120 raw "${frames[@]}" >"$WORK/a1-raw.jsonl"
for c in "${frames[@]}"; do
	name=${c%%=*}
	st=$(jf "$WORK/a1-raw.jsonl" "$name" .status)
	rule=$(jf "$WORK/a1-raw.jsonl" "$name" '.rule // ""')
	if [[ $st =~ ^4[0-9][0-9]$ ]] && [ -n "$rule" ]; then ok "refused: $name [$st $rule]"; else
		notok "refused: $name" "$(show "$WORK/a1-raw.jsonl" "$name")"
	fi
done
check "nothing of a1 reached an origin (nginx saw no request)" eval "! grep -q . '$EG_DIR/nginx/logs/access.log'"
check "dnsmasq was asked for the allowlisted private.test.example (resolved, then refused)" \
	dns_was_queried private.test.example

"$TKBOX" stop a1 >/dev/null 2>&1
if eg_export_verify a1; then ok "a1's bundle verifies"; else notok "a1's bundle verifies" "$(tail -3 "$WORK/verify-a1.out" 2>/dev/null)"; fi
bundle_egress "$WORK/a1.tkb" >"$WORK/a1.egress.jsonl" 2>/dev/null
n_wf=$(jq -s '[.[] | select(.type == "decision" and .tool == "WebFetch")] | length' "$WORK/a1.egress.jsonl")
n_eg=$(jq -s '[.[] | select(.type == "observe" and .kind == "tkbox.egress")] | length' "$WORK/a1.egress.jsonl")
n_cases=$((${#cases[@]} + ${#abs[@]} + ${#frames[@]}))
check "a1: no WebFetch decision was asked (got $n_wf)" test "${n_wf:-1}" -eq 0
# One record per refusal, or a summary with the count past 20/s: at least one record, and together they count all.
n_counted=$(jq -s '[.[] | select(.type == "observe" and .kind == "tkbox.egress") | .data | (.count // .suppressed // 1)] | add // 0' "$WORK/a1.egress.jsonl")
check "a1: tkbox.egress records for the $n_cases refusals ($n_eg records counting $n_counted)" \
	test "${n_counted:-0}" -ge "$n_cases"
echo "# a1 sample tkbox.egress: $(jq -c 'select(.type == "observe" and .kind == "tkbox.egress") | .data' "$WORK/a1.egress.jsonl" | head -n 1)"

# ---- a2: tunnels, caps, approvals, stop ----------------------------------------------------------------
if eg_box a2 --allow origin.test.example --allow other.test.example:7000 --allow pinned.test.example; then
	ok "run a2"
else
	notok "run a2" "$(cat "$WORK/run-a2.err" "$WORK/ca-a2.err" 2>/dev/null)"
	echo "1..$((pass + fail))"
	exit 1
fi
f=$WORK/a2.jsonl
eg_py a2 120 tls sni-match origin.test.example:443 origin.test.example /index.txt >>"$f"
eg_py a2 120 tls sni-mismatch origin.test.example:443 other.test.example /index.txt >>"$f"
check "TLS with the matching SNI: 200 and the body" \
	test "$(jf "$f" sni-match .http_body)" = "tkbox-origin-ok $EG_NONCE"
if [ "$(jf "$f" sni-mismatch .status)" = 200 ] && [ "$(jf "$f" sni-mismatch .tls)" != ok ]; then
	ok "TLS naming other.test.example through a CONNECT to origin.test.example: cut ($(jf "$f" sni-mismatch .tls | cut -c1-80))"
else
	notok "SNI mismatch cut" "$(jq -c 'select(.case == "sni-mismatch")' "$f")"
fi

eg_py a2 60 plain not-tls-443 origin.test.example:443 >>"$f"
eg_py a2 60 plain tcp-port-entry other.test.example:7000 >>"$f"
if [ "$(jf "$f" not-tls-443 .status)" = 200 ] && [ -z "$(jf "$f" not-tls-443 '.tunnel // ""')" ]; then
	ok "bytes that are not TLS to :443 without a port entry: cut, nothing came back"
else
	notok "not TLS to :443 cut" "$(jq -c 'select(.case == "not-tls-443")' "$f")"
fi
check "a tunnel that is not TLS to other.test.example:7000 (its port entry): banner and echo" eval \
	"jf '$f' tcp-port-entry .tunnel | grep -q 'tkbox-echo $EG_NONCE' && jf '$f' tcp-port-entry .tunnel | grep -q ping-through-tunnel"

out=$(inbox a2 120 curl -sS --max-time 90 --proxy http://127.0.0.1:3128 https://pinned.test.example/)
check "--resolve pinned.test.example=$EG_ORIGIN_IP: served ($out)" test "$out" = "tkbox-origin-ok $EG_NONCE"
check "--resolve: pinned.test.example never asked of DNS" eval '! dns_was_queried pinned.test.example'

eg_py a2 120 streams 256 origin.test.example:443 >>"$f"
st=$(jf "$f" stream-257 .status)
if [ "$st" != 200 ] && [ "$(jf "$f" stream-257 .held)" = 256 ]; then
	ok "the 257th connection is refused ($(show "$f" stream-257))"
else
	notok "the 257th connection is refused" "$(show "$f" stream-257)"
fi
check "after one of the 256 closes, a new connection passes" test "$(jf "$f" stream-after-close .status)" = 200

# An off-list name: held for a person, never looked up, rejected, still not looked up.
held=h1-$EG_NONCE.held.test.example
eg_py a2 200 connect "held=$held:443" >"$WORK/a2-held.jsonl" &
bg=$!
id=
for _ in $(seq 120); do
	id=$(approvals_json | jq -r --arg t "$held:443" '.[] | select(.target == $t) | .id' | head -n 1)
	[ -n "$id" ] && break
	sleep 0.5
done
check "off-list $held:443 is held for approval (id ${id:-none})" test -n "$id"
check "held: the name was not looked up" eval "! dns_was_queried '$held'"
"$TKBOX" reject "$id" >"$WORK/reject.out" 2>&1
check "tkbox reject $id" test $? -eq 0
wait "$bg"
if refused "$WORK/a2-held.jsonl" held; then ok "rejected: 403 [$(jf "$WORK/a2-held.jsonl" held .rule)]"; else
	notok "rejected: 403" "$(show "$WORK/a2-held.jsonl" held)"
fi
check "rejected: still not looked up" eval "! dns_was_queried '$held'"

# 17 off-list hosts at once: 16 pending, the 17th refused at once.
par=()
for i in $(seq 17); do par+=("p$i=p$i-$EG_NONCE.held.test.example:443"); done
eg_py a2 240 parallel "${par[@]}" >"$WORK/a2-pending.jsonl" &
bg=$!
n_pend=0
for _ in $(seq 120); do
	n_pend=$(approvals_json | jq '[.[] | select(.box == "a2")] | length')
	[ "${n_pend:-0}" -ge 16 ] && [ "$(grep -c . "$WORK/a2-pending.jsonl")" -ge 1 ] && break
	sleep 0.5
done
sleep 1
n_pend=$(approvals_json | jq '[.[] | select(.box == "a2")] | length')
early=$(jq -c '{case, status, rule, body: (.body // "" | .[0:140])}' "$WORK/a2-pending.jsonl" 2>/dev/null)
check "16 approvals pending for a2 (got $n_pend)" test "${n_pend:-0}" -eq 16
if [ "$(grep -c . <<<"$early")" -eq 1 ] && [ "$(jq -r .status <<<"$early")" = 403 ] && [ -n "$(jq -r '.rule // ""' <<<"$early")" ]; then
	ok "the 17th pending approval is refused at once: $early"
else
	notok "the 17th pending approval is refused at once" "answered so far: $early"
fi
for id in $(approvals_json | jq -r '.[] | select(.box == "a2") | .id'); do
	"$TKBOX" reject "$id" >/dev/null 2>&1
done
wait "$bg"
check "every one of the 17 refused in the end" test "$(jq -s '[.[] | select(.status == 403)] | length' "$WORK/a2-pending.jsonl")" -eq 17
queried=0
for i in $(seq 17); do dns_was_queried "p$i-$EG_NONCE.held.test.example" && queried=$((queried + 1)); done
check "none of the 17 off-list names was looked up ($queried were)" test $queried -eq 0

# A stop while a tunnel carries a download (8 MiB at 64 KiB/s: two minutes unless cut).
tunnels() { eg_in_ns ss -Htn state established '( sport = :443 )' | grep -c .; }
inbox a2 200 curl -sS --proxy http://127.0.0.1:3128 -o /dev/null -w '%{size_download}\n' \
	https://origin.test.example/slow/1.bin >"$WORK/slow.out" 2>&1 &
bg=$!
for _ in $(seq 120); do
	[ "$(tunnels)" -ge 1 ] && break
	sleep 0.5
done
sleep 2
check "the slow download's tunnel is open" test "$(tunnels)" -ge 1
T1=$(t)
timeout --kill-after=5 90 "$TKBOX" stop a2 >"$WORK/stop-a2.out" 2>&1
rc=$?
check "tkbox stop a2 with a tunnel open completes (rc=$rc, $(elapsed "$T1") s)" test $rc -eq 0
for _ in $(seq 20); do
	[ "$(tunnels)" -eq 0 ] && break
	sleep 0.5
done
check "the origin's side of the tunnel is gone" test "$(tunnels)" -eq 0
wait "$bg"
echo "# the download got $(head -c 40 "$WORK/slow.out" | tr '\n' ' ') before the stop"

if eg_export_verify a2; then ok "a2's bundle verifies"; else notok "a2's bundle verifies" "$(tail -3 "$WORK/verify-a2.out" 2>/dev/null)"; fi
bundle_egress "$WORK/a2.tkb" >"$WORK/a2.egress.jsonl" 2>/dev/null
check "a2: the SNI mismatch's completion says why (sni)" \
	eval "jq -c 'select(.type == \"result\")' '$WORK/a2.egress.jsonl' | grep -qi 'sni\\|server.name'"
check "a2: the cut download's completion says the box stopped" \
	eval "jq -c 'select(.type == \"result\")' '$WORK/a2.egress.jsonl' | grep -qi 'stop'"
rules=$(jq -r 'select(.type == "observe" and .kind == "tkbox.egress") | .data.rule // empty' "$WORK/a2.egress.jsonl" | sort -u | tr '\n' ' ')
echo "# a2 tkbox.egress rules: $rules"
for r in stream-limit not-tls sni-mismatch approval-pending-limit; do
	check "a2: a tkbox.egress record of rule $r" eval "grep -qw -- '$r' <<<'$rules'"
done
check "a2: events name the rejected approvals" eval "box_events a2 | grep -q 'egress.rejected'"

echo "# total $(elapsed "$T0") s"
echo "1..$((pass + fail))"
[ $fail -eq 0 ]
