#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# action/run.sh's resume on the exit paths a box cannot easily show: the step's process group gets SIGTERM, SIGINT
# or SIGHUP while the "agent" runs, and the agent dies of it (the default action), so bash itself runs its trap.
# No VM: TKA_BIN_DIR points at stubs whose `tkbox exec` prints workflow commands and sleeps. Each case: the step
# ends with 128+N, the last line of its log is `::TOKEN::` for the token it stopped with, and
# tests/action/runner-sim.py finds none of the agent's commands in effect. Control: without the trap's line
# (the log cut before it), the emulator ends stopped.
# usage: tests/action/action-trap.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
WORK=$(mktemp -d /tmp/tkbox-action-trap.XXXXXX)
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill -KILL -- -"$p" 2>/dev/null; done
	rm -rf "$WORK"
}
trap cleanup EXIT
pass=0 fail=0
check() {
	local name=$1
	shift
	if "$@"; then
		echo "ok - $name"
		pass=$((pass + 1))
	else
		echo "not ok - $name"
		fail=$((fail + 1))
	fi
}

mkdir -p "$WORK/bin" "$WORK/checkout"
for b in tkbox-host tkbox-signer tkbox-guest-linux-amd64; do printf '#!/bin/sh\nexit 0\n' >"$WORK/bin/$b"; done
cat >"$WORK/bin/tkbox" <<'EOF'
#!/bin/sh
case "$1" in
run) echo "stub: box running" ;;
ls) echo '[]' ;;
exec)
	echo "::error::trap-pwned"
	echo "::add-mask::trap-secret"
	echo "AGENT-WAITING"
	printf 'no newline at the end'
	exec sleep 120
	;;
esac
exit 0
EOF
chmod +x "$WORK/bin"/*

DFL='import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])'
for sig in TERM INT HUP; do
	case $sig in TERM) want=143 ;; INT) want=130 ;; HUP) want=129 ;; esac
	export RUNNER_TEMP=$WORK/rt-$sig GITHUB_WORKSPACE=$WORK/checkout GITHUB_OUTPUT=$WORK/out-$sig
	export TKA_BIN_DIR=$WORK/bin TKA_COMMAND='agent' TKA_IMAGE=stub
	: >"$GITHUB_OUTPUT"
	bash "$SRC/action/run.sh" install >/dev/null 2>&1 || { echo "Bail out! install with stubs"; exit 1; }
	log=$WORK/run-$sig.log
	# A background job of a script starts with SIGINT ignored; a runner's step does not: reset it.
	setsid /usr/bin/python3 -c "$DFL" bash "$SRC/action/run.sh" run >"$log" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	for _ in $(seq 100); do grep -q AGENT-WAITING "$log" && break; sleep 0.05; done
	kill -"$sig" -- -"$pid"
	for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
	kill -KILL -- -"$pid" 2>/dev/null # still there after 10 s: the check below fails
	wait "$pid"
	rc=$?
	token=$(sed -n 's/^::stop-commands::\([0-9a-f]\{32\}\)$/\1/p' "$log" | head -1)
	check "SIG$sig: the step ends with $want (got $rc)" test "$rc" = "$want"
	check "SIG$sig: the last line of its log is the resume ::TOKEN::" \
		test -n "$token" -a "$(grep -v '^$' "$log" | tail -1)" = "::$token::"
	eff=$(/usr/bin/python3 "$HERE/runner-sim.py" "$log")
	check "SIG$sig: the emulator: resumed, no annotation, mask or output of the agent's" test "$(jq \
		'(.resumes | length) == 1 and (.stopped_at_end | not) and (.annotations | length) == 0 and (.masks | length) == 0 and (.outputs | length) == 0' \
		<<<"$eff")" = true
	head -n -1 "$log" >"$log.cut"
	check "SIG$sig: control: the log without that line ends stopped" \
		test "$(/usr/bin/python3 "$HERE/runner-sim.py" "$log.cut" | jq .stopped_at_end)" = true
done
echo "1..$((pass + fail))"
[ "$fail" = 0 ]
