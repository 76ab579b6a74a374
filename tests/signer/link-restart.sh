#!/bin/sh
# The daemon's signer link across signer restarts: 8 threads decide and complete through the link's pooled
# connections (tests/signer/link-stress.c) while the signer is killed with kill -9 and restarted four times.
# Every call must succeed (a call whose connection broke is sent again, same request_id, on a new one), and
# the store must hold exactly one decision and one result per tool call: nothing twice, nothing lost.
#   link-restart.sh TKBOX_SIGNER SIGNER_CLIENT TKBOX LINK_STRESS
. "$(dirname "$0")/lib.sh"
STRESS=${4:?usage: link-restart.sh TKBOX_SIGNER SIGNER_CLIENT TKBOX LINK_STRESS}
command -v python3 >/dev/null || { echo "SKIP: needs python3 (sqlite3 module)"; exit 77; }
THREADS=8 N=20
"$SIGNER" init --dev >/dev/null || fail "init"
"$SIGNER" up --wait >/dev/null || fail "up"
"$STRESS" "$TKBOX_SIGNER_SOCKET" $THREADS $N "$WORK/stop" >"$WORK/stress.out" 2>"$WORK/stress.err" &
spid=$!
restarts=0
while [ $restarts -lt 4 ] && kill -0 $spid 2>/dev/null; do
	sleep 0.5
	pid=$(cat "$TKBOX_SIGNER_DIR/signer.pid")
	kill -9 "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	"$SIGNER" up --wait >/dev/null || fail "restart after kill -9"
	restarts=$((restarts + 1))
done
touch "$WORK/stop"
wait $spid || { cat "$WORK/stress.out" "$WORK/stress.err"; fail "calls failed across $restarts signer restarts"; }
run=$(head -n 1 "$WORK/stress.out")
"$SIGNER" down >/dev/null
calls=$(sed -n 's/^tool calls: //p' "$WORK/stress.out")
python3 - "$TKBOX_SIGNER_DIR/store.db" "$run" "$calls" <<'PY' || fail "the store does not hold one decision and one result per call"
import collections, json, sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
seen = {"policy.decision": collections.Counter(), "tool.result": collections.Counter()}
for (line,) in db.execute("SELECT line FROM records"):
    e = json.loads(line)["event"]
    if e.get("run_id") == sys.argv[2] and e["type"] in seen:
        seen[e["type"]][e["data"]["tool_use_id"]] += 1
want = int(sys.argv[3])
for t, c in seen.items():
    twice = [k for k, v in c.items() if v != 1]
    print("%s: %d tool calls, %d not exactly once" % (t, len(c), len(twice)))
    if len(c) != want or twice:
        sys.exit(1)
PY
[ "$restarts" = 4 ] || fail "the signer was restarted $restarts times, not 4"
# The link's log says when it sent a call again: with 8 threads calling without pause, calls are in flight
# at each kill, so some must have been sent again (or this test did not test the resend).
again=$(grep -c 'sending it again' "$WORK/stress.err")
[ "$again" -gt 0 ] || fail "no call was sent again across $restarts signer restarts"
echo "signer restarts: $restarts; tool calls: $calls; calls sent again: $again"
check_log
echo "PASS: link-restart"
