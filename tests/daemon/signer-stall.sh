#!/bin/bash
# A stalled signer (kill -STOP) cannot hang the command door (issue 9 section 2; suite e2e). Boots one real
# micro-VM (QEMU, TCG where KVM is unusable) behind a daemon whose signer deadline is STALL_TIMEOUT seconds:
# - a daemon does not start against a stopped signer, even one whose listen backlog is full (connect is bounded);
# - `tkbox run` is refused at register_run before any VM boots; SIGTERM ends an exec held for an approval;
# - a command already running when the signer stops ends; its completion, past the deadline, is counted as a gap;
# - every exec while the signer is stopped is refused at the deadline with the message, exit 126, and nothing ran;
# - SIGTERM (and SIGINT) end a `tkbox exec` that waits for the stopped signer, long before the deadline;
# - after SIGCONT the next exec is decided and runs, the gap is recorded, and the bundle verifies;
# - a command killed by a signal is completed with `signal`, one that exits 137 with `exit_code`.
# Never a timing assertion: the outer bounds (timeout) are the deadline plus a generous margin.
#   tests/daemon/signer-stall.sh BUILD_DIR
set -u
BUILD=${1:?usage: signer-stall.sh BUILD_DIR}
source "$(dirname "$0")/lib.sh"
STALL_TIMEOUT=${STALL_TIMEOUT:-20}
MARGIN=60
holder=
cleanup() {
	# A stopped signer would not see lib_cleanup's SIGTERM.
	[ -n "$SIGNER_PID" ] && kill -CONT "$SIGNER_PID" 2>/dev/null
	[ -n "$holder" ] && kill "$holder" 2>/dev/null
	lib_cleanup
}
trap cleanup EXIT

EVENTS=$TKBOX_STATE_DIR/boxes/stall/events.jsonl
stop_signer() { kill -STOP "$SIGNER_PID"; }
cont_signer() { kill -CONT "$SIGNER_PID"; }
# An exec bounded from outside: a client that hangs ends as 124 (timeout's own status) and fails its check.
bounded_exec() { timeout -k 5 $((STALL_TIMEOUT + MARGIN)) "$TKBOX" exec "$@"; }

IMG=$(image_path) || { echo "Bail out! no image"; exit 1; }
signer_init || { echo "Bail out! no signer"; exit 1; }
# One ask rule: a command line holding "ask-me" waits for a person.
sed -i "s/^ask: \[\]$/ask:\n  - id: STALL-A001\n    tool: Bash\n    field: line\n    pattern: 'ask-me'\n    reason: 'a person decides'/" \
	"$WORK/signer/policy.yaml"
signer_start || { echo "Bail out! no signer"; exit 1; }

# A daemon started against a stopped signer does not wait for it: its first call (status) has the deadline too.
stop_signer
timeout -k 5 $((2 + MARGIN)) "$TKBOX" daemon --signer-timeout 2s --state-dir "$WORK/state-nostart" \
	${TKBOX_E2E_GUEST:+--guest "$TKBOX_E2E_GUEST"} >"$WORK/nostart.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "did not answer within 2 s (status)" "$WORK/nostart.log"; then
	ok "daemon start against a stopped signer: refused at the deadline"
else
	notok "daemon start against a stopped signer" "rc=$rc (124: it hung)" "$(cat "$WORK/nostart.log")"
fi
# The same with the signer's listen backlog full (a stopped signer accepts nothing): connect itself would block.
python3 - "$TKBOX_SIGNER_SOCKET" >"$WORK/backlog.out" 2>&1 <<'PY' &
import socket, sys, time
held = []
for i in range(4096):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(sys.argv[1])
    except BlockingIOError:
        print("backlog full after", i, flush=True)
        break
    held.append(s)
time.sleep(600)
PY
holder=$!
for _ in $(seq 100); do grep -q "backlog full" "$WORK/backlog.out" && break; sleep 0.1; done
timeout -k 5 $((2 + MARGIN)) "$TKBOX" daemon --signer-timeout 2s --state-dir "$WORK/state-nostart" \
	${TKBOX_E2E_GUEST:+--guest "$TKBOX_E2E_GUEST"} >"$WORK/nostart2.log" 2>&1
rc=$?
if grep -q "backlog full" "$WORK/backlog.out" && [ $rc -ne 0 ] && [ $rc -ne 124 ] &&
	grep -q "did not answer within 2 s (status)" "$WORK/nostart2.log"; then
	ok "daemon start against a stopped signer with a full backlog: refused at the deadline"
else
	notok "daemon start against a full backlog" "rc=$rc (124: it hung)" "$(cat "$WORK/backlog.out" "$WORK/nostart2.log")"
fi
kill $holder 2>/dev/null
wait $holder 2>/dev/null
holder=
cont_signer

daemon_start --signer-timeout "${STALL_TIMEOUT}s" || { echo "Bail out! no daemon"; exit 1; }

# No box boots unrecorded: register_run past the deadline refuses `tkbox run` before the VM starts.
stop_signer
timeout -k 5 $((STALL_TIMEOUT + MARGIN)) "$TKBOX" run --image "$IMG" --name never --memory 256M --disk 128M \
	>/dev/null 2>"$WORK/never.err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "did not answer within $STALL_TIMEOUT s (register_run)" "$WORK/never.err"; then
	ok "tkbox run with a stopped signer: refused at the deadline"
else
	notok "tkbox run with a stopped signer" "rc=$rc (124: it hung)" "$(cat "$WORK/never.err")"
fi
cont_signer
"$TKBOX" run --image "$IMG" --name stall --memory 256M --disk 128M >/dev/null 2>"$WORK/run.err" ||
	{ notok "run" "$(cat "$WORK/run.err")"; echo "Bail out!"; exit 1; }
bounded_exec stall -- true 2>"$WORK/err"
check "exec with the signer up" test $? -eq 0

# SIGTERM ends a client held for a person's approval (the signer is up): the daemon drops the request.
timeout --preserve-status -k $((STALL_TIMEOUT + MARGIN)) -s TERM 5 "$TKBOX" exec stall -- sh -c 'echo ask-me > /tmp/marker-ask' \
	2>"$WORK/ask.err"
rc=$?
if [ $rc -eq 143 ] && grep -q "held for a person's approval" "$WORK/ask.err" &&
	grep -q "SIGTERM while waiting" "$WORK/ask.err"; then
	ok "SIGTERM ends an exec held for an approval (exit $rc)"
else
	notok "SIGTERM ends an exec held for an approval" "rc=$rc" "$(cat "$WORK/ask.err")"
fi
abandoned_ask() { grep '"event":"exec.abandoned"' "$EVENTS" | grep -q '"approval_id"'; }
for _ in $(seq 100); do
	abandoned_ask && break
	sleep 0.1
done
check "the daemon dropped the abandoned approval wait (exec.abandoned)" abandoned_ask

# A command decided before the signer stops: it runs to its end, and its exit status reaches the client once
# the completion is recorded or, past the deadline, counted as a gap (the command did run).
bounded_exec stall -- sh -c 'sleep 8; exit 7' 2>"$WORK/long.err" &
long=$!
decided_long() { grep '"event":"exec.decided"' "$EVENTS" 2>/dev/null | grep -q 'sleep 8; exit 7'; }
for _ in $(seq 300); do
	decided_long && break
	sleep 0.1
done
if decided_long; then
	stop_signer
else
	notok "the long command was decided" "$(cat "$WORK/long.err")"
	stop_signer
fi

# Every exec while the signer is stopped: refused at the deadline, with the message, and nothing runs.
for n in 1 2; do
	t0=$(t)
	bounded_exec stall -- sh -c "echo ran > /tmp/marker$n" 2>"$WORK/stall$n.err"
	rc=$?
	if [ $rc -eq 126 ] && grep -q "the signer did not answer within $STALL_TIMEOUT s" "$WORK/stall$n.err" &&
		grep -q "nothing ran" "$WORK/stall$n.err"; then
		ok "stalled signer: exec $n refused ($(elapsed "$t0") s, deadline $STALL_TIMEOUT s)"
	else
		notok "stalled signer: exec $n refused" "rc=$rc (124: it hung past the deadline + $MARGIN s)" \
			"$(cat "$WORK/stall$n.err")"
	fi
done

# SIGTERM and SIGINT end a client that waits for the stopped signer: it exits by the signal (128 + N) with a
# line that says so, long before the deadline would have refused it (126).
for sig in TERM INT; do
	t0=$(t)
	timeout --preserve-status -k $((STALL_TIMEOUT + MARGIN)) -s $sig 3 \
		"$TKBOX" exec stall -- sh -c "echo ran > /tmp/marker-$sig" 2>"$WORK/sig-$sig.err"
	rc=$?
	want=$((128 + $(kill -l $sig)))
	if [ $rc -eq $want ] && grep -q "SIG$sig while waiting for the signer" "$WORK/sig-$sig.err"; then
		ok "SIG$sig ends a waiting exec (exit $rc, $(elapsed "$t0") s)"
	else
		notok "SIG$sig ends a waiting exec" "rc=$rc, want $want (126: only the deadline ended it)" \
			"$(cat "$WORK/sig-$sig.err")"
	fi
done
check "no tkbox exec left waiting" test -z "$(pgrep -f "tkbox exec stall -- sh -c echo ran" || true)"
abandoned_decides() { grep '"event":"exec.abandoned"' "$EVENTS" | grep -c 'while the signer decided'; }
for _ in $(seq 100); do
	[ "$(abandoned_decides)" -ge 2 ] && break
	sleep 0.1
done
check "the daemon dropped both abandoned decides (exec.abandoned: $(abandoned_decides))" \
	test "$(abandoned_decides)" -ge 2

wait $long
rc=$?
check "the command decided before the stall ran to its end (exit $rc)" test $rc -eq 7
check "its completion was not taken: signer.complete_failed in the events" \
	grep -q '"event":"signer.complete_failed"' "$EVENTS"

# The signer answers again: the next exec is decided and runs; nothing of the refused ones ran.
cont_signer
bounded_exec stall -- sh -c 'for f in /tmp/marker*; do test -e "$f" && echo "$f"; done; true' \
	>"$WORK/markers" 2>"$WORK/err"
rc=$?
check "after SIGCONT the next exec is decided and runs (rc=$rc)" test $rc -eq 0
check "nothing ran while the signer was stopped (found: $(tr '\n' ' ' <"$WORK/markers"))" test ! -s "$WORK/markers"

# Signal or exit code: killed by SIGKILL is not exit 137.
bounded_exec stall -- sh -c 'kill -9 $$' 2>/dev/null
check "a command killed by SIGKILL: the client exits 137" test $? -eq 137
bounded_exec stall -- sh -c 'exit 137' 2>/dev/null
check "a command that exits 137: the client exits 137" test $? -eq 137
grep '"event":"exec.done"' "$EVENTS" | tail -2 >"$WORK/done"
check "events: the killed one has signal 9" grep -q '"signal":9' <(head -1 "$WORK/done")
check "events: the one that exited 137 has no signal" bash -c '! grep -q "\"signal\"" <<<"$1"' - "$(tail -1 "$WORK/done")"

"$TKBOX" stop stall 2>"$WORK/err"
check "stop" test $? -eq 0
"$TKBOX" export stall -o "$WORK/stall.tkb" 2>"$WORK/err"
check "export" test $? -eq 0 -a -s "$WORK/stall.tkb"
"$TKBOX" verify "$WORK/stall.tkb" --trust "$WORK/stall.trust.json" >"$WORK/verify.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q 'Integrity: VERIFIED' "$WORK/verify.out"; then ok "bundle verifies"; else notok "bundle verifies" "$(tail -5 "$WORK/verify.out")"; fi
read -r dec res obs gaps reason kinds < <(bundle_counts "$WORK/stall.tkb")
echo "# bundle: decisions=$dec results=$res observations=$obs ($kinds) gaps=$gaps end=$reason"
check "the completion past the deadline is a tkbox.gap in the bundle ($gaps)" test "$gaps" -ge 1
python3 - "$WORK/stall.tkb" >"$WORK/gaps" <<'PY'
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in sorted(z.namelist()):
    if n.startswith("runs/"):
        for line in z.read(n).decode().splitlines():
            e = json.loads(line)["event"]
            if e.get("type") == "capture.gap":
                print(json.dumps(e.get("data", {}), sort_keys=True))
PY
check "bundle: the gap recorded once the signer answered again" \
	grep -q "completions of commands that ran could not be recorded" "$WORK/gaps"
# What the signed completions say: a signal apart from an exit code.
python3 - "$WORK/stall.tkb" >"$WORK/results" <<'PY'
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in sorted(z.namelist()):
    if n.startswith("runs/"):
        for line in z.read(n).decode().splitlines():
            e = json.loads(line)["event"]
            if e.get("type") == "tool.result":
                print(json.dumps(e.get("data", {}), sort_keys=True))
PY
echo "# signed results:"
sed 's/^/#   /' "$WORK/results"
check "bundle: a result with signal 9 (SIGKILL)" grep -q '"signal": 9' "$WORK/results"
check "bundle: a result with exit_code 137" grep -q '"exit_code": 137' "$WORK/results"
check "bundle: no result carries exit_status" bash -c '! grep -q "\"exit_status\"" "$1"' - "$WORK/results"

echo "# $pass passed, $fail failed"
[ $fail -eq 0 ]
