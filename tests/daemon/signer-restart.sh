#!/bin/bash
# The daemon's long-lived signer connections survive a signer restart (issue 11; suite e2e). Boots one real
# micro-VM (QEMU, TCG where KVM is unusable):
# - an exec after kill -9 and a restart of the signer is decided and runs: the daemon's idle connections to
#   the dead signer are replaced, not used;
# - a decide sent to a stopped signer that is then killed (-9) and restarted is sent again with the same
#   request_id on a new connection (daemon log), and the command runs once;
# - the run's bundle exports and verifies, with one decision and one result per exec (nothing twice).
# Never a timing assertion: the outer bounds (timeout) are generous.
#   tests/daemon/signer-restart.sh BUILD_DIR
set -u
BUILD=${1:?usage: signer-restart.sh BUILD_DIR}
source "$(dirname "$0")/lib.sh"
cleanup() {
	[ -n "$SIGNER_PID" ] && kill -CONT "$SIGNER_PID" 2>/dev/null
	lib_cleanup
}
trap cleanup EXIT
bounded_exec() { timeout -k 5 120 "$TKBOX" exec "$@"; }
restart_signer() {
	kill -9 "$SIGNER_PID"
	wait "$SIGNER_PID" 2>/dev/null
	signer_start
}

IMG=$(image_path) || { echo "Bail out! no image"; exit 1; }
signer_init && signer_start || { echo "Bail out! no signer"; exit 1; }
daemon_start --signer-timeout 60s || { echo "Bail out! no daemon"; exit 1; }
"$TKBOX" run --image "$IMG" --name rs --memory 256M --disk 128M >/dev/null 2>"$WORK/run.err" ||
	{ echo "Bail out! run: $(cat "$WORK/run.err")"; exit 1; }
bounded_exec rs -- true 2>"$WORK/err"
check "exec before the restart" test $? -eq 0

restart_signer || { echo "Bail out! signer restart"; exit 1; }
out=$(bounded_exec rs -- echo after-restart 2>"$WORK/err")
rc=$?
if [ $rc -eq 0 ] && [ "$out" = after-restart ]; then ok "exec after kill -9 and a restart of the signer"; else
	notok "exec after a signer restart" "rc=$rc out=$out" "$(cat "$WORK/err")"; fi

# A decide in flight when the signer dies: stop it, let the daemon send the decide on its pooled connection,
# kill it (a stopped process dies too) and start a new one: the daemon sends the decide again.
kill -STOP "$SIGNER_PID"
bounded_exec rs -- sh -c 'echo once >>/tmp/resent; cat /tmp/resent' >"$WORK/resent.out" 2>"$WORK/resent.err" &
ex=$!
# Sent: bytes wait unread on one of the stopped signer's connections (ss: Recv-Q of a socket at its path).
sent() { ss -xn | awk -v p="$TKBOX_SIGNER_SOCKET" '$5 == p && $3 > 0 { f = 1 } END { exit !f }'; }
for _ in $(seq 600); do sent && break; sleep 0.1; done
check "the decide reached the stopped signer" sent
restart_signer || { echo "Bail out! signer restart"; exit 1; }
wait $ex
rc=$?
if [ $rc -eq 0 ] && [ "$(cat "$WORK/resent.out")" = once ]; then ok "a decide in flight across a restart runs once"; else
	notok "a decide in flight across a restart" "rc=$rc" "$(cat "$WORK/resent.out" "$WORK/resent.err")"; fi
check "the daemon sent it again with the same request_id" grep -q "sending it again, same request_id" "$WORK/daemon.log"

"$TKBOX" stop rs 2>"$WORK/err"
check "stop" test $? -eq 0
"$TKBOX" export rs -o "$WORK/rs.tkb" 2>"$WORK/err"
check "export" test -s "$WORK/rs.tkb"
"$TKBOX" verify "$WORK/rs.tkb" --trust "$WORK/rs.trust.json" >"$WORK/verify.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q 'Integrity: VERIFIED' "$WORK/verify.out"; then ok "verify: VERIFIED"; else
	notok "verify" "$(tail -5 "$WORK/verify.out")"; fi
# Three execs: three decisions and three results, none twice.
read -r dec res _ <<<"$(bundle_counts "$WORK/rs.tkb")"
check "one decision and one result per exec (decisions=$dec results=$res)" test "$dec" = 3 -a "$res" = 3

echo "1..$((pass + fail))"
[ "$fail" -eq 0 ]
