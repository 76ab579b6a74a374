#!/bin/sh
# kill -9 of the signer loses no acknowledged record: a client decides in a
# loop and logs every acknowledged decision id; the signer is SIGKILLed
# mid-stream, restarted, and every logged id must be in the store, with no
# hole in the log, and the run must still take decisions.
. "$(dirname "$0")/lib.sh"
"$SIGNER" init --dev >/dev/null || fail "init"
for round in 1 2 3; do
	"$SIGNER" up --wait >/dev/null || fail "up (round $round)"
	pid=$(cat "$TKBOX_SIGNER_DIR/signer.pid")
	"$CLIENT" durable "$TKBOX_SIGNER_SOCKET" "$WORK/acked" 1000000 &
	cpid=$!
	sleep 1.5
	kill -9 "$pid"
	wait "$cpid" || true
	while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	"$SIGNER" up --wait >/dev/null || fail "restart after kill -9 (round $round)"
	"$CLIENT" check "$TKBOX_SIGNER_SOCKET" "$TKBOX_SIGNER_DIR/store.db" "$WORK/acked" || fail "acknowledged records lost (round $round)"
	"$SIGNER" down >/dev/null
done
check_log
echo "PASS: kill -9"
