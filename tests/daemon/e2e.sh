#!/bin/bash
# End-to-end checks of the daemon and the command door (suite e2e). Boots two
# real micro-VMs (QEMU, TCG where KVM is unusable) and shares them across the
# checks: b1 for the command door, stop, export and verify; b2 for SIGTERM.
#   tests/daemon/e2e.sh BUILD_DIR
set -u
BUILD=${1:?usage: e2e.sh BUILD_DIR}
source "$(dirname "$0")/lib.sh"
trap lib_cleanup EXIT


IMG=$(image_path) || { echo "Bail out! no image"; exit 1; }
signer_init || { echo "Bail out! no signer"; exit 1; }
# One ask rule, so that the approval path runs: a command line holding "ask-me" waits for a person.
sed -i "s/^ask: \[\]$/ask:\n  - id: E2E-A001\n    tool: Bash\n    field: line\n    pattern: 'ask-me'\n    reason: 'e2e: a person decides'/" \
	"$WORK/signer/policy.yaml"
signer_start || { echo "Bail out! no signer"; exit 1; }

# Fail closed at start: no signer answering, no daemon.
"$TKBOX" daemon --signer "$WORK/nobody.sock" ${TKBOX_E2E_GUEST:+--guest "$TKBOX_E2E_GUEST"} >"$WORK/nosigner.log" 2>&1
rc=$?
check "daemon-refuses-without-signer (exit $rc)" test "$rc" -ne 0
check "daemon-refusal-says-what-to-do" grep -q "no signer answers" "$WORK/nosigner.log"

daemon_start || { echo "Bail out! no daemon"; exit 1; }

# A checkout for b1's /workspace: a tracked file, a tracked credential file, the git dir; the credential
# files real checkouts hold (issue 9), all tracked; a PGP private and a public key; symbolic links to an
# absolute path, out of the checkout, to a credential file, into .git, and one that stays inside.
WS_CREDS=".git-credentials .docker/config.json .kube/config .pypirc .config/gh/hosts.yml auth.json
.m2/settings.xml .gradle/gradle.properties .terraformrc prod.tfstate rclone.conf client.p12 site.pfx trust.jks
release.keystore .bash_history credentials .aws/credentials config/credentials/prod.yml priv.asc"
mkdir -p "$WORK/repo"
(cd "$WORK/repo" && git init -q && echo 'print(1+1)' >app.py && echo 'TOKEN=x' >.env &&
	for f in $WS_CREDS; do mkdir -p "$(dirname "$f")" && echo "secret-$f" >"$f"; done &&
	printf -- '-----BEGIN PGP PRIVATE KEY BLOCK-----\nx\n' >priv.asc &&
	printf -- '-----BEGIN PGP PUBLIC KEY BLOCK-----\nx\n' >KEYS.asc &&
	mkdir lib && ln -s ../app.py lib/inside && ln -s "$WORK/repo/app.py" abs-link && ln -s ../../outside lib/out &&
	ln -s .env cfg-link && ln -s .git/config git-link && git add -f . &&
	git -c user.email=e2e@tkbox -c user.name=e2e commit -qm init) || { echo "Bail out! git"; exit 1; }

t0=$(t)
"$TKBOX" run --image "$IMG" --name b1 --workspace "$WORK/repo" --memory 512M --disk 256M >"$WORK/run1.out" 2>"$WORK/run1.err" &
r1=$!
"$TKBOX" run --image "$IMG" --name b2 --memory 512M --disk 256M >"$WORK/run2.out" 2>"$WORK/run2.err" &
r2=$!
"$TKBOX" run --image "$IMG" --name b3 --memory 256M --disk 128M >"$WORK/run3.out" 2>"$WORK/run3.err" &
r3=$!
wait $r1
rc1=$?
wait $r2
rc2=$?
wait $r3
rc3=$?
if [ $rc1 -ne 0 ] || [ $rc2 -ne 0 ] || [ $rc3 -ne 0 ]; then
	notok "run three boxes" "$(cat "$WORK/run1.err" "$WORK/run2.err" "$WORK/run3.err")"
	echo "Bail out!"
	exit 1
fi
ok "run three boxes ($(elapsed "$t0") s)"

# A supervisor that dies (it parses guest bytes: a crash there is expected to happen some day): the box stops,
# the loss is recorded in the run, the run is closed as a failure, the other boxes go on.
sup=$(pgrep -P "$DAEMON_PID" -f -- '--supervise b3$')
kids=$(pgrep -P "${sup:-0}" | tr '\n' ' ')
if [ -n "$sup" ] && kill -9 "$sup"; then
	for _ in $(seq 100); do
		"$TKBOX" ls | grep -q '^b3 *failed' && break
		sleep 0.1
	done
	"$TKBOX" ls | grep -q '^b3 *failed'
	check "supervisor-death: box failed" test $? -eq 0
	for _ in $(seq 100); do
		grep -q '"event":"run.closed"' "$TKBOX_STATE_DIR/boxes/b3/events.jsonl" && break
		sleep 0.1
	done
	"$TKBOX" export b3 -o "$WORK/b3.tkb" 2>"$WORK/err" &&
		"$TKBOX" verify "$WORK/b3.tkb" --trust "$WORK/b3.trust.json" >"$WORK/verify3.out" 2>&1
	check "supervisor-death: bundle verifies" grep -q 'Integrity: VERIFIED' "$WORK/verify3.out"
	read -r dec res obs gaps reason kinds < <(bundle_counts "$WORK/b3.tkb")
	check "supervisor-death: loss recorded as tkbox.gap ($gaps) and run closed as failure ($reason)" \
		test "$gaps" -eq 1 -a "${reason%%:*}" = failure
	left=
	for _ in $(seq 50); do
		left=
		for k in $kids; do kill -0 "$k" 2>/dev/null && left="$left $k"; done
		[ -z "$left" ] && break
		sleep 0.1
	done
	check "supervisor-death: its QEMU and helpers are gone (were: $kids)" test -n "$kids" -a -z "$left"
else
	notok "supervisor-death" "no supervisor process for b3 under the daemon $DAEMON_PID"
fi

# exec: decided by the signer, then run through the guest agent.
t0=$(t)
out=$("$TKBOX" exec b1 -- sh -c 'echo hello-from-box; exit 3' 2>"$WORK/err")
rc=$?
if [ "$out" = hello-from-box ] && [ $rc -eq 3 ]; then ok "exec ($(elapsed "$t0") s)"; else notok exec "out=$out rc=$rc" "$(cat "$WORK/err")"; fi
grep '"event":"exec.decided"' "$TKBOX_STATE_DIR/boxes/b1/events.jsonl" | grep -q '"command":"sh -c '\''echo hello-from-box; exit 3'\''".*"decision":"allow"'
check "exec-decided-recorded-in-events" test $? -eq 0

# workspace-excludes-ignored: the checkout's .env and .git are not in /workspace; its tracked files are.
ws=$("$TKBOX" exec b1 -- ls -a /workspace | tr '\n' ' ')
case "$ws" in
*app.py*) case "$ws" in *.env* | *.git*) notok "workspace-excludes-ignored" "/workspace: $ws" ;; *) ok "workspace-excludes-ignored" ;; esac ;;
*) notok "workspace-excludes-ignored" "/workspace: $ws" ;;
esac

# workspace-no-outside-symlink / workspace-no-new-credentials: every path in /workspace and every link
# target, as the box sees them.
listing=$("$TKBOX" exec b1 -- sh -c 'cd /workspace && find . && for l in $(find . -type l); do echo "LINK $l -> $(readlink "$l")"; done' 2>&1)
links=$(grep '^LINK ' <<<"$listing")
if [ "$links" = "LINK ./lib/inside -> ../app.py" ]; then
	ok "workspace-no-outside-symlink"
else
	notok "workspace-no-outside-symlink" "links in /workspace: $links"
fi
leaked=""
for f in $WS_CREDS cfg-link git-link abs-link lib/out; do
	grep -qx "./$f" <<<"$listing" && leaked="$leaked $f"
done
check "workspace-no-new-credentials (leaked:${leaked:- none})" test -z "$leaked"
check "workspace-keeps-public-asc" grep -qx "./KEYS.asc" <<<"$listing"
grep -q "$WORK" <<<"$listing" && notok "workspace-shows-no-host-path" "$listing" || ok "workspace-shows-no-host-path"
inside=$("$TKBOX" exec b1 -- cat /workspace/lib/inside 2>&1)
check "workspace-inside-symlink-works ($inside)" test "$inside" = "print(1+1)"

# no-network-card: /proc/net/dev lists no interface but lo.
ifaces=$("$TKBOX" exec b1 -- cat /proc/net/dev | awk -F: 'NR > 2 { gsub(/ /, "", $1); print $1 }' | tr '\n' ' ')
check "no-network-card (interfaces: $ifaces)" test "$ifaces" = "lo "

# signer-deny: pkill tkbox-signer is denied before it starts: exit 126, rule TK-D007.
t0=$(t)
"$TKBOX" exec b1 -- pkill tkbox-signer 2>"$WORK/err"
rc=$?
if [ $rc -eq 126 ] && grep -q TK-D007 "$WORK/err"; then ok "signer-deny ($(elapsed "$t0") s)"; else notok signer-deny "rc=$rc" "$(cat "$WORK/err")"; fi
check "signer still up after signer-deny" kill -0 "$SIGNER_PID"

# A refused per-exec env name: nothing is asked, nothing runs.
"$TKBOX" exec b1 --env LD_PRELOAD=/tmp/x.so -- true 2>"$WORK/err"
rc=$?
if [ $rc -eq 126 ] && grep -q 'LD_PRELOAD.*refused' "$WORK/err"; then ok "env-name-refused"; else notok env-name-refused "rc=$rc" "$(cat "$WORK/err")"; fi
"$TKBOX" exec b1 --env PYTHONUNBUFFERED=1 --env GIT_AUTHOR_NAME=x -- sh -c 'test "$PYTHONUNBUFFERED" = 1' 2>"$WORK/err"
check "env-name-allowed (PYTHONUNBUFFERED, GIT_AUTHOR_NAME)" test $? -eq 0

# Stdin known up front: exactly these bytes are the stdin, decided with their digest.
printf 'stdin-up-front-%s\n' 42 >"$WORK/in.txt"
want=$(sha256sum "$WORK/in.txt" | cut -d' ' -f1)
out=$("$TKBOX" exec -i b1 -- sha256sum <"$WORK/in.txt" | cut -d' ' -f1)
check "stdin-up-front reaches the command" test "$out" = "$want"
check "stdin-up-front decided by digest" grep -q "\"stdin\":\"upfront\".*\"stdin_sha256\":\"$want\"" \
	"$TKBOX_STATE_DIR/boxes/b1/events.jsonl"

# Streamed stdin (more than 1 MiB): its digest and size come with the completion.
head -c 3000000 /dev/urandom >"$WORK/big.bin"
want=$(sha256sum "$WORK/big.bin" | cut -d' ' -f1)
out=$("$TKBOX" exec -i b1 -- sha256sum <"$WORK/big.bin" | cut -d' ' -f1)
check "stdin-streamed reaches the command" test "$out" = "$want"
check "stdin-streamed digest with the completion" grep -q "\"stdin_bytes\":3000000,\"stdin_sha256\":\"$want\"" \
	"$TKBOX_STATE_DIR/boxes/b1/events.jsonl"
streamed_sha256=$want

# ask: the command waits for a person; approved it runs, rejected it does not (exit 126).
approval() { # STDERR-FILE -> the approval id the CLI printed
	for _ in $(seq 100); do
		id=$(sed -n 's/.*approvals approve "\([^"]*\)".*/\1/p' "$1" | head -1)
		[ -n "$id" ] && { echo "$id"; return 0; }
		sleep 0.1
	done
	return 1
}
for verdict in approve reject; do
	: >"$WORK/ask.err"
	"$TKBOX" exec b1 -- echo "ask-me-$verdict" >"$WORK/ask.out" 2>"$WORK/ask.err" &
	pid=$!
	if id=$(approval "$WORK/ask.err"); then
		# Both option orders work: approve with the options after the positional words, reject before them.
		if [ $verdict = approve ]; then
			"$SIGNER" approvals approve "$id" --dir "$WORK/signer" --socket "$TKBOX_SIGNER_SOCKET" >/dev/null 2>&1
		else
			"$SIGNER" approvals --dir "$WORK/signer" --socket "$TKBOX_SIGNER_SOCKET" reject "$id" >/dev/null 2>&1
		fi
		wait $pid
		rc=$?
		if [ $verdict = approve ]; then
			check "ask-approved runs (rc=$rc)" test $rc -eq 0 -a "$(cat "$WORK/ask.out")" = ask-me-approve
		else
			check "ask-rejected refused (rc=$rc)" test $rc -eq 126 -a ! -s "$WORK/ask.out"
		fi
	else
		notok "ask-$verdict" "no approval id printed" "$(cat "$WORK/ask.err")"
		kill $pid
	fi
done

# Each command's time limit: killed at it, with a line that says so.
t0=$(t)
"$TKBOX" exec --timeout 1s b1 -- sleep 30 2>"$WORK/err"
rc=$?
if [ $rc -eq 137 ] && grep -q 'time limit' "$WORK/err"; then ok "exec-timeout ($(elapsed "$t0") s)"; else notok exec-timeout "rc=$rc" "$(cat "$WORK/err")"; fi

running() { "$TKBOX" exec b1 -- sh -c 'ps | grep -c "[s]leep 600"'; }
wait_running() {
	for _ in $(seq 100); do
		[ "$(running)" = 1 ] && return 0
		sleep 0.2
	done
	return 1
}

# unread-stdin-interrupt: 2 MB of stdin never read; Ctrl-C still stops the command.
t0=$(t)
head -c 2000000 /dev/zero | "$TKBOX" exec -i b1 -- sleep 600 2>"$WORK/err" &
pid=$!
if wait_running; then
	kill -INT $pid
	for _ in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
	if kill -0 $pid 2>/dev/null; then
		notok "unread-stdin-interrupt" "tkbox exec still running 10 s after SIGINT"
		kill -9 $pid
	else
		wait $pid
		rc=$?
		if [ $rc -eq 130 ] && [ "$(running)" = 0 ]; then ok "unread-stdin-interrupt ($(elapsed "$t0") s)"; else notok unread-stdin-interrupt "rc=$rc" "$(cat "$WORK/err")"; fi
	fi
else
	notok "unread-stdin-interrupt" "the command was never seen running"
	kill -9 $pid
fi

# unread-stdin-kill: the client is killed outright; the command must not outlive it.
t0=$(t)
head -c 2000000 /dev/zero | "$TKBOX" exec -i b1 -- sleep 600 2>/dev/null &
pid=$!
if wait_running; then
	kill -9 $pid
	wait $pid 2>/dev/null
	gone=no
	for _ in $(seq 50); do
		if [ "$(running)" = 0 ]; then gone=yes; break; fi
		sleep 0.2
	done
	check "unread-stdin-kill ($(elapsed "$t0") s)" test $gone = yes
else
	notok "unread-stdin-kill" "the command was never seen running"
	kill -9 $pid
fi

# A second uid is refused: by the 0700 directory, and by SO_PEERCRED on the socket itself (a process of uid 65534
# given CAP_DAC_OVERRIDE gets past the file modes, so only the daemon's uid check is left to refuse it).
if [ "$(id -u)" = 0 ]; then
	if setpriv --reuid 65534 --regid 65534 --clear-groups "$TKBOX" ls >"$WORK/out" 2>&1; then
		notok "second-uid-refused (directory)" "$(cat "$WORK/out")"
	else
		ok "second-uid-refused (directory)"
	fi
	setpriv --reuid 65534 --regid 65534 --clear-groups --inh-caps +dac_override --ambient-caps +dac_override \
		"$TKBOX" ls >"$WORK/out" 2>&1
	rc=$?
	if [ $rc -ne 0 ] && grep -q 'uid 65534 may not use this daemon' "$WORK/out"; then
		ok "second-uid-refused (SO_PEERCRED)"
	else
		notok "second-uid-refused (SO_PEERCRED)" "rc=$rc" "$(cat "$WORK/out")"
	fi
else
	ok "second-uid-refused # SKIP needs root to switch uid"
fi

# Kill the signer mid-run: the next exec is refused and nothing runs. A command already running goes on; its
# completion cannot be recorded, so it is counted in tkbox.gap (kind complete) once the signer answers again.
"$TKBOX" exec b1 -- sh -c 'touch /tmp/long-started; sleep 3' 2>"$WORK/long.err" &
long=$!
for _ in $(seq 100); do
	"$TKBOX" exec b1 -- test -e /tmp/long-started 2>/dev/null && break
	sleep 0.1
done
{
	kill -9 "$SIGNER_PID"
	wait "$SIGNER_PID"
} 2>/dev/null
SIGNER_PID=
"$TKBOX" exec b1 -- touch /tmp/ran-without-signer 2>"$WORK/err"
rc=$?
if [ $rc -eq 126 ] && grep -q 'signer' "$WORK/err"; then ok "signer-killed: exec refused"; else notok "signer-killed: exec refused" "rc=$rc" "$(cat "$WORK/err")"; fi
wait $long
check "signer-killed: the running command finished (rc=$?)" test $? -eq 0
signer_start
"$TKBOX" exec b1 -- test ! -e /tmp/ran-without-signer
check "signer-killed: nothing ran" test $? -eq 0

# stop -> export -> verify, with the expected record counts.
"$TKBOX" stop b1 2>"$WORK/err"
check "stop" test $? -eq 0
"$TKBOX" exec b1 -- true 2>/dev/null
check "exec on a stopped box refused" test $? -ne 0
"$TKBOX" export b1 -o "$WORK/b1.tkb" 2>"$WORK/err"
check "export writes the bundle and its trust file" test -s "$WORK/b1.tkb" -a -s "$WORK/b1.trust.json"
"$TKBOX" verify "$WORK/b1.tkb" --trust "$WORK/b1.trust.json" >"$WORK/verify.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q 'Integrity: VERIFIED' "$WORK/verify.out"; then ok "verify b1: VERIFIED"; else notok "verify b1" "$(tail -5 "$WORK/verify.out")"; fi
# Decided execs on b1: exec, cat /proc/net/dev, pkill (deny), env-allowed, 2 stdin, 2x(sleep + ps polls...), touch
# (after restart), test. Count what the events file says was decided and compare with the bundle.
decided=$(grep -c '"event":"exec.decided"' "$TKBOX_STATE_DIR/boxes/b1/events.jsonl")
denied=$(grep -c '"event":"exec.denied"' "$TKBOX_STATE_DIR/boxes/b1/events.jsonl")
notappr=$(grep -c '"event":"exec.not_approved"' "$TKBOX_STATE_DIR/boxes/b1/events.jsonl")
read -r dec res obs gaps reason kinds < <(bundle_counts "$WORK/b1.tkb")
echo "# b1 bundle: decisions=$dec results=$res observations=$obs ($kinds) gaps=$gaps end=$reason; events: decided=$decided denied=$denied not-approved=$notappr"
check "b1 decisions = decided + denied + not approved ($dec = $decided + $denied + $notappr)" \
	test "$dec" -eq $((decided + denied + notappr))
check "b1 has the rejected ask" test "$notappr" -eq 1
check "b1 results = decided - the one lost completion ($res = $decided - 1)" test "$res" -eq $((decided - 1))
check "b1 observations: one tkbox.box, one tkbox.patch (saved at stop)" test "$kinds" = "tkbox.box=1,tkbox.patch=1"
check "b1 the lost completion is one tkbox.gap" test "$gaps" -eq 1
check "b1 run closed as exported" test "$reason" = exported
# The streamed stdin's digest and size are in the signed tool.result (issue 5), not only in the events file.
check "b1 signed result carries the streamed stdin digest" grep -qx "3000000:$streamed_sha256" \
	<<<"$(bundle_stdin_results "$WORK/b1.tkb")"

# SIGTERM: every box stops, every run is closed; the closed run exports after a restart.
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID"
rc=$?
DAEMON_PID=
check "daemon SIGTERM exit 0" test $rc -eq 0
check "SIGTERM closed b2's run" grep -q '"event":"run.closed".*"reason":"daemon shutdown"' \
	"$TKBOX_STATE_DIR/boxes/b2/events.jsonl"
check "no QEMU left" test -z "$(pgrep -f "qemu-system.*$(basename "$WORK")" || true)"
daemon_start
"$TKBOX" ls | grep -q '^b2 *stopped'
check "b2 listed stopped after restart" test $? -eq 0
"$TKBOX" export b2 -o "$WORK/b2.tkb" 2>"$WORK/err" &&
	"$TKBOX" verify "$WORK/b2.tkb" --trust "$WORK/b2.trust.json" >"$WORK/verify2.out" 2>&1
check "b2 exports and verifies" grep -q 'Integrity: VERIFIED' "$WORK/verify2.out"
read -r dec res obs gaps reason kinds < <(bundle_counts "$WORK/b2.tkb")
check "b2 run closed as daemon shutdown ($reason)" test "$reason" = daemon_shutdown
# kill -9 of the daemon: each supervisor sees its socket close, stops its VM and exits; the run stays open, the
# next daemon lists the box as lost and refuses to export it.
"$TKBOX" run --image "$IMG" --name b4 --memory 256M --disk 128M >/dev/null 2>"$WORK/run4.err"
check "run b4" test $? -eq 0
sup=$(pgrep -P "$DAEMON_PID" -f -- '--supervise b4$')
kids=$(pgrep -P "${sup:-0}" | tr '\n' ' ')
{
	kill -9 "$DAEMON_PID"
	wait "$DAEMON_PID"
} 2>/dev/null
DAEMON_PID=
left=x
for _ in $(seq 200); do
	left=
	for k in $sup $kids; do kill -0 "$k" 2>/dev/null && left="$left $k"; done
	[ -z "$left" ] && break
	sleep 0.1
done
check "daemon kill -9: b4's supervisor and QEMU exit (were: $sup $kids)" test -n "$sup" -a -z "$left"
daemon_start
"$TKBOX" ls | grep -q '^b4 *lost'
check "daemon kill -9: b4 listed lost" test $? -eq 0
"$TKBOX" export b4 -o "$WORK/b4.tkb" 2>"$WORK/err"
rc=$?
check "daemon kill -9: b4's open run is not exported (rc=$rc)" grep -q 'still open' "$WORK/err"
"$TKBOX" rm b1 2>/dev/null && "$TKBOX" rm b2 2>/dev/null && "$TKBOX" rm b4 2>/dev/null
check "rm" test $? -eq 0
# b1 had a workspace: rm leaves nothing of it in the state (its workspace image included).
check "rm: nothing left of b1 (workspace box) in the state: $(ls -A "$TKBOX_STATE_DIR/boxes/b1" 2>/dev/null | tr '\n' ' ')" \
	test ! -e "$TKBOX_STATE_DIR/boxes/b1"

echo "# $pass passed, $fail failed"
[ $fail -eq 0 ]
