#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# egress-clients (issue 12): real clients in the real Debian image go out through the network door to real
# origins (tests/egress/lib.sh: nginx in a network namespace, names from dnsmasq), with the box's own proxy
# settings (HTTP_PROXY & co. in its env, apt's proxy file):
#   box c1 --allow origin.test.example: curl https (200, body), python3 urllib https, git clone over HTTPS
#   (dumb HTTP protocol), curl http:// (absolute form through the proxy, Host kept); the host resolved the
#   allowlisted name (dnsmasq's log) and dialled the origin from its own address (nginx's log); the exported
#   bundle verifies and holds a WebFetch decision for each connection with its completion (bytes, duration).
#   box c2 --allow debian: `apt-get update && apt-get install -y jq` against the mirror the image's apt sources
#   name: the only case that leaves this machine, SKIPped (and said so) when that mirror is unreachable.
#   tests/egress/egress-clients.sh BUILD_DIR       (root; about 2-3 minutes under TCG)
set -u
BUILD=${1:?usage: egress-clients.sh BUILD_DIR}
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

T0=$(t)
eg_up
eg_image
signer_init && signer_start || eg_die "no signer"
eg_daemon_start || eg_die "no daemon"
echo "# harness, image and daemon ready in $(elapsed "$T0") s"

if eg_box c1 --allow origin.test.example --allow origin.test.example:7001; then ok "run c1 --allow origin.test.example"; else
	notok "run c1 --allow origin.test.example" "$(cat "$WORK/run-c1.err" "$WORK/ca-c1.err" 2>/dev/null)"
	echo "1..$((pass + fail))"
	exit 1
fi

out=$(inbox c1 30 sh -c 'echo "$HTTPS_PROXY|$https_proxy|$HTTP_PROXY|$http_proxy|$NO_PROXY"')
check "the box's env names its proxy ($out)" \
	test "$out" = "http://127.0.0.1:3128|http://127.0.0.1:3128|http://127.0.0.1:3128|http://127.0.0.1:3128|localhost,127.0.0.1,::1"

# The clients below get the same settings explicitly, so that each check shows one thing (the env above is
# checked on its own; apt reads its own proxy file).
PXENV=(env HTTP_PROXY=http://127.0.0.1:3128 HTTPS_PROXY=http://127.0.0.1:3128 http_proxy=http://127.0.0.1:3128
	https_proxy=http://127.0.0.1:3128)
check "origin.test.example not looked up before the box asked" eval '! dns_was_queried origin.test.example'
out=$(inbox c1 120 "${PXENV[@]}" curl -sS --max-time 90 -w '%{http_code}' https://origin.test.example/)
if [ "$out" = "tkbox-origin-ok $EG_NONCE"$'\n'200 ]; then ok "curl https://origin.test.example/: 200 and the body"; else
	notok "curl https://origin.test.example/" "got: $out" "$(tail -5 "$WORK/daemon.log")"
fi
check "the host resolved the allowlisted name (dnsmasq log)" dns_was_queried origin.test.example

out=$(inbox c1 120 "${PXENV[@]}" python3 -c 'import urllib.request as u
try:
    r = u.urlopen("https://origin.test.example/", timeout=90)
    print(r.status, r.read().decode().strip())
except Exception as e:
    print("error:", e)')
check "python3 urllib https: 200 and the body ($out)" test "$out" = "200 tkbox-origin-ok $EG_NONCE"

out=$(inbox c1 180 "${PXENV[@]}" sh -c 'git clone -q https://origin.test.example/repo.git /tmp/repo && cat /tmp/repo/README')
check "git clone over HTTPS (dumb HTTP protocol) ($out)" test "$out" = "$EG_NONCE"

out=$(inbox c1 120 "${PXENV[@]}" curl -sS --max-time 90 -w '%{http_code}' http://origin.test.example/host)
check "curl http:// (absolute form through the proxy) ($out)" test "$out" = $'host=origin.test.example\n200'

# A tunnel that is not TLS (its port entry) to a server that speaks first and closes: the box reads the banner
# and then the end of the stream, without having sent a byte (a download-only tunnel, an SSH or SMTP banner).
r=$(eg_py c1 120 sink origin.test.example:7001)
if [ "$(jq -r .bytes <<<"$r")" = $((${#EG_NONCE} + 14)) ] && [ "$(jq -r '.stalled // ""' <<<"$r")" = "" ]; then
	ok "a server-first tunnel (origin.test.example:7001): the banner, then EOF"
else
	notok "a server-first tunnel (origin.test.example:7001): the banner, then EOF" "$r"
fi

# The origin saw the host's own veth address: the daemon dialled it, nothing came from elsewhere.
check "nginx saw every request from the host's address $EG_HOST_IP" \
	eval "[ -s '$EG_DIR/nginx/logs/access.log' ] && ! grep -v '^$EG_HOST_IP ' '$EG_DIR/nginx/logs/access.log' | grep -q ."
n_conns=$(grep -c '^' "$EG_DIR/nginx/logs/access.log")
echo "# nginx access log: $n_conns requests"

# --- apt through the debian preset, against the mirror the image's sources name -------------------------
apt_uris=$(inbox c1 30 sh -c 'for f in /etc/apt/sources.list /etc/apt/sources.list.d/*; do [ ! -f "$f" ] || cat "$f"; done' |
	awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:\/\//) { print $i; break } }' | sort -u)
reach=
for u in $apt_uris; do
	code=$(curl -sS --head -o /dev/null --max-time 10 -w '%{http_code}' "${u%/}/dists/bookworm/Release" 2>/dev/null)
	[ "$code" = 200 ] && reach="$reach $u"
done

"$TKBOX" stop c1 >/dev/null 2>"$WORK/stop-c1.err"
check "stop c1" test $? -eq 0

if [ -z "$reach" ]; then
	echo "# SKIP apt-get through the debian preset: the image's mirror(s) (${apt_uris:-none}) are not reachable from this machine"
	ok "apt-get install jq through --allow debian # SKIP mirror unreachable from this machine"
else
	T1=$(t)
	if eg_box c2 --allow debian; then
		ok "run c2 --allow debian"
		allow=$("$TKBOX" ls --json 2>/dev/null | jq -c '[.[] | select(.name == "c2") | .egress.allow[]?] // []' 2>/dev/null)
		host1=$(sed -E 's,^https?://([^/:]+).*,\1,' <<<"${reach# }" | head -n 1)
		check "tkbox ls --json shows the debian preset expanded ($host1 in $allow)" grep -qF "$host1" <<<"$allow"
		out=$(inbox c2 420 sh -c 'apt-get update -q 2>&1 | tail -n 3 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q jq >/tmp/apt.log 2>&1; tail -n 2 /tmp/apt.log; jq --version')
		sed 's/^/#   | /' <<<"$out"
		check "apt-get update && apt-get install -y jq through the proxy ($(elapsed "$T1") s)" grep -q '^jq-1\.' <<<"$out"
	else
		notok "run c2 --allow debian" "$(cat "$WORK/run-c2.err" 2>/dev/null)"
	fi
	"$TKBOX" stop c2 >/dev/null 2>&1
fi

# --- the record -------------------------------------------------------------------------------------------
if eg_export_verify c1; then ok "c1's bundle verifies"; else notok "c1's bundle verifies" "$(tail -3 "$WORK/verify-c1.out" 2>/dev/null)"; fi
bundle_egress "$WORK/c1.tkb" >"$WORK/c1.egress.jsonl" 2>"$WORK/c1.egress.err"
read -r n_dec n_done <<<"$(python3 - "$WORK/c1.egress.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
dec = {r["tool_use_id"] for r in recs if r["type"] == "decision" and r["tool"] == "WebFetch" and r["decision"] in ("allow", "flag")}
done = 0
for r in recs:
    if r["type"] == "result" and r["tool_use_id"] in dec:
        v = r["value"]
        if isinstance(v.get("bytes_up"), int) and isinstance(v.get("bytes_down"), int) and \
                isinstance(r.get("duration_ms"), int):
            done += 1
print(len(dec), done)
PY
)"
# curl https, urllib, git (one or more connections: it asks info/refs, then objects), curl http: at least 4.
check "WebFetch decisions in the bundle: $n_dec (at least 4)" test "${n_dec:-0}" -ge 4
check "each has its completion with bytes and duration ($n_done of $n_dec)" \
	eval "[ '${n_dec:-0}' -gt 0 ] && [ '${n_done:-0}' -eq '${n_dec:-0}' ]"
check "events: WebFetch decided for https://origin.test.example:443 and http://origin.test.example:80" eval \
	"box_events c1 | grep -q 'https://origin.test.example:443' && box_events c1 | grep -q 'http://origin.test.example:80'"

echo "# total $(elapsed "$T0") s"
echo "1..$((pass + fail))"
[ $fail -eq 0 ]
