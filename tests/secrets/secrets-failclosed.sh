#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# secrets-failclosed (issue 13): a swap whose record cannot be kept is never sent. Box f1 --secret
# GH=env:GH@api.github.com: a client in the box opens its tunnel to api.github.com (decided, dialled, TLS up
# while the signer answers) and waits; the test stops the signer (SIGSTOP), lets the client send a request
# with "Authorization: Bearer $GH" (the swap now waits for tkbox.secret.use), then kills the signer (SIGKILL)
# with that record pending. The request must be refused (503 swap-refused, or the connection ends without an
# answer from the origin), the origin must not get the value (nor that request at all), and the box must be
# stopped. The daemon's log and state hold no value. How the signer is stopped and killed follows
# tests/daemon/e2e.sh ("Kill the signer mid-run"). A full must-keep queue is forced in secrets-queuefull.sh
# (tkbox daemon --observe-queue 2).
#   tests/secrets/secrets-failclosed.sh BUILD_DIR      (root; about a minute under TCG)
set -u
BUILD=${1:?usage: secrets-failclosed.sh BUILD_DIR}
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

sc_start f1 --secret GH=env:GH@api.github.com
# A control first: with the signer up, the same request is swapped and answered.
out=$(inbox f1 120 sh -c 'curl -sS --max-time 90 -H "Authorization: Bearer $GH" https://api.github.com/control')
check "with the signer up the swap works ($out)" test "$out" = "tkbox-secrets-origin api.github.com /control"

# `tkbox exec -i` streams stdin only past 1 MiB: a filler line first, then "go" when the test says so.
fifo=$WORK/fc.fifo
mkfifo "$fifo"
timeout --kill-after=5 300 "$TKBOX" exec -i f1 -- python3 /tmp/sc.py failclosed https://api.github.com/ \
	<"$fifo" >"$WORK/fc.out" 2>"$WORK/fc.err" &
client=$!
exec {w}>"$fifo"
head -c $((1048576 + 16)) /dev/zero | tr '\0' 'x' >&"$w"
echo >&"$w"
for _ in $(seq 600); do
	grep -q '"ready"' "$WORK/fc.out" 2>/dev/null && break
	kill -0 "$client" 2>/dev/null || break
	sleep 0.2
done
check "the client's tunnel to api.github.com is up ($(head -c 200 "$WORK/fc.out"))" \
	eval "grep -q '\"tls\": \"ok\"' '$WORK/fc.out'"
kill -STOP "$SIGNER_PID"
echo go >&"$w"
# The request is read by the proxy and its swap waits on tkbox.secret.use; give it time to get there.
sleep 3
{
	kill -KILL "$SIGNER_PID"
	kill -CONT "$SIGNER_PID"
	wait "$SIGNER_PID"
} 2>/dev/null
SIGNER_PID=
wait "$client"
exec {w}>&-
res=$(grep '"case": "failclosed"' "$WORK/fc.out" | tail -n 1)
st=$(jq -r '.status // "none"' <<<"$res" 2>/dev/null)
rule=$(jq -r '.rule // ""' <<<"$res" 2>/dev/null)
if [ -n "$res" ]; then
	echo "# the box got: $(jq -c '{status, rule, error, body: (.body // "" | .[0:200])}' <<<"$res" 2>/dev/null)"
else
	echo "# the box got nothing: the exec ended with the box ($(head -c 200 "$WORK/fc.err"))"
fi
check "the pending swap is refused: 503 swap-refused, or no answer at all (${st:-none} $rule)" \
	eval "[ '$st' = 503 ] && [ '$rule' = swap-refused ] || [ '${st:-none}' = none ]"
check "the origin never got the request" test -z "$(sc_reqs 'select(.path == "/failclosed")')"
check "the origin's verdict: no value misplaced, one swap (the control)" \
	test "$(sc_verdict '"\(.violations | length) \(.swapped.GH)"')" = '"0 1"'
stopped=
for _ in $(seq 150); do
	state=$("$TKBOX" ls --json 2>/dev/null | jq -r '(if type == "array" then . else (.boxes // []) end)[] | select(.name == "f1") | .state')
	case $state in stopped | failed | lost) stopped=$state && break ;; esac
	sleep 0.2
done
check "the box is stopped (state ${stopped:-running})" test -n "$stopped"
signer_start || eg_die "the signer did not restart"
"$TKBOX" exec f1 -- true >"$WORK/after.out" 2>&1
check "f1 takes no more commands" test $? -ne 0
held=$(sc_seen_in "$TKBOX_STATE_DIR" "$WORK/daemon.log" "$WORK/signer.log" "$WORK/signer" "$WORK/fc.out" "$WORK/fc.err")
check "no value, nor its first 6 bytes, in the state dir, the logs or the box's output ${held:+(in: $held)}" test -z "$held"

echo "# total $(elapsed "$T0") s"
echo "1..$((pass + fail))"
[ $fail -eq 0 ]
