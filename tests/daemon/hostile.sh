#!/bin/bash
# A hostile guest agent (issue 10; suite e2e). One daemon boots tests/e2e/hostile-guest in place of tkbox-guest
# for every box: without TKBOX_HOSTILE in the box env it is tkbox-guest (the neighbour), with it it passes the boot
# handshake and then misbehaves by mode. For each mode, with the neighbour running in the same daemon:
# - the hostile box leaves `running` within an outer bound (a protocol violation, or its exec timeouts ignored);
# - a violation's reason, naming the frame, is in the box's events and in its stop reason;
# - the neighbour still answers an exec;
# - the daemon's and the hostile box's supervisor's peak RSS stay under 64 MiB (outside ASan);
# - once cut off, the box refuses execs before any decision, and its exported bundle verifies with a capture.gap
#   holding the reason and a run.end `failure: REASON`; its console log stays until `tkbox rm`;
# - ignore-kills / hang: each exec ends at its deadline + 10 s, recorded as timed out, the third stops the box,
#   and the supervisor does not spin meanwhile (CPU time, generous bound);
# - hijack: root in a normal box that takes PID 1's agent channel (pidfd_getfd) is cut off the same way;
# - stalled: 64 clients that do not read stay within the per-box output cap.
# It measures, never asserts, the latency of an exec on the neighbour (and the box itself) beside a flood.
# Never a timing assertion: the bounds (timeout) are outer ones.
#   tests/daemon/hostile.sh BUILD_DIR [MODE...]
set -u
BUILD=${1:?usage: hostile.sh BUILD_DIR [MODE...]}
shift
source "$(dirname "$0")/lib.sh"
trap lib_cleanup EXIT
HOSTILE=$BUILD/tests/e2e/hostile-guest
MODES=${*:-bigframe garbage badtype unknown-exec flood-pong ignore-kills hang flood-egress hijack stalled}
BOUND=180 # seconds: a hostile box must have left `running` by then (TCG on a loaded host)
RSS_MAX_KIB=$((64 * 1024))

state_of() { "$TKBOX" ls 2>/dev/null | awk -v n="$1" '$1 == n { print $2 }'; }
sup_of() { pgrep -P "$DAEMON_PID" -f -- "--supervise $1\$" | head -1; }
# Peak RSS (VmHWM, KiB) of a live process; 0 once it is gone.
hwm() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
# The neighbour answers; prints the exec's wall time in seconds.
neighbour_exec() {
	local t0 out
	t0=$(t)
	out=$(timeout -k 5 $BOUND "$TKBOX" exec nb -- echo alive 2>&1)
	[ "$out" = alive ] || { echo "fail: $out"; return 1; }
	elapsed "$t0"
}

# The box went running before (or without) any event that cut it off: the agent was alive when run said so.
running_before_cut() {
	awk '/"event":"box.running"/ && !r { r = NR } /"event":"box.(agent_lost|protocol_violation|kills_ignored)"/ && !c { c = NR }
		END { exit !(r && (!c || r < c)) }' "$1"
}

# "gap REASON" for each capture.gap and "end REASON" for run.end in a bundle.
bundle_cut() {
	python3 - "$1" <<'PY'
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in z.namelist():
    if not n.startswith("runs/"):
        continue
    for line in z.read(n).decode().splitlines():
        e = json.loads(line)["event"]
        if e.get("type") == "capture.gap":
            print("gap", e["data"].get("reason", ""))
        elif e.get("type") == "run.end":
            print("end", e["data"].get("reason", ""))
        elif e.get("type") == "tool.result":
            v = e.get("data", {}).get("output", {}).get("value", {})
            print("result", v.get("status", ""), v.get("error", ""))
PY
}
# CPU time (s) a live process has used.
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat" 2>/dev/null || echo 0; }

[ -x "$HOSTILE" ] || { echo "Bail out! no $HOSTILE (built with -Dguest=true only)"; exit 1; }
if grep -q 'address_sanitizer\|AddressSanitizer' "$TKBOX" 2>/dev/null; then RSS_MEANINGFUL=0; else RSS_MEANINGFUL=1; fi
IMG=$(image_path) || { echo "Bail out! no image"; exit 1; }
signer_init || { echo "Bail out! no signer"; exit 1; }
signer_start || { echo "Bail out! no signer"; exit 1; }
TKBOX_E2E_GUEST=$HOSTILE daemon_start || { echo "Bail out! no daemon"; exit 1; }

"$TKBOX" run --image "$IMG" --name nb --memory 256M --disk 128M >/dev/null 2>"$WORK/run-nb.err"
check "neighbour nb boots (the hostile-guest binary without TKBOX_HOSTILE is tkbox-guest)" test $? -eq 0
lat=$(neighbour_exec)
check "neighbour answers before any hostile box ($lat s)" test $? -eq 0

# 64 clients (as many as one box takes) that never read their output, on the neighbour (issue 10 section 5):
# the box's supervisor holds at most SUPERVISOR_BOX_OUT_MAX (32 MiB) of queued output for them all, not 64 x 8 MiB.
stalled_clients() {
	local sup pids= hw=0 h n killed
	sup=$(sup_of nb)
	for _ in $(seq 64); do
		setsid bash -c '"$0" exec nb -- yes stalled-client-stalled-client 2>/dev/null | sleep 900' "$TKBOX" \
			</dev/null &
		pids="$pids $!"
	done
	# Until every stalled command has been killed (each by the box cap or its own 8 MiB cap), or the outer bound.
	for _ in $(seq $BOUND); do
		h=$(hwm "${sup:-0}")
		[ "${h:-0}" -gt "$hw" ] && hw=$h
		n=$(grep '"exec.done"' "$TKBOX_STATE_DIR/boxes/nb/events.jsonl" | grep -c 'did not read the output')
		[ "$n" -ge 64 ] && break
		sleep 1
	done
	killed=$(grep '"exec.done"' "$TKBOX_STATE_DIR/boxes/nb/events.jsonl" | grep -c "the box's 32 MiB of output")
	lat=$(neighbour_exec)
	check "stalled: the neighbour answers after 64 stalled clients ($lat s)" test $? -eq 0
	for p in $pids; do kill -- -"$p" 2>/dev/null; done
	# shellcheck disable=SC2086 # one pid a word
	wait $pids 2>/dev/null
	echo "# stalled: 64 clients that do not read; supervisor peak RSS ${hw} KiB; $n commands killed for unread" \
		"output, $killed of them by the box cap"
	check "stalled: every stalled command was killed for its unread output ($n of 64)" test "$n" -ge 64
	check "stalled: the box cap killed some ($killed)" test "$killed" -gt 0
	if [ "$RSS_MEANINGFUL" = 1 ]; then
		check "stalled: supervisor peak RSS ${hw} KiB < 128 MiB (64 x 8 MiB = 512 MiB without the box cap)" \
			test "$hw" -lt $((128 * 1024))
	fi
}

for mode in $MODES; do
	if [ "$mode" = stalled ]; then
		stalled_clients
		continue
	fi
	name=h-$mode
	EV=$TKBOX_STATE_DIR/boxes/$name/events.jsonl
	t0=$(t)
	if [ "$mode" = hijack ]; then
		# A normal box whose /workspace holds the test agent: root in it takes PID 1's channel (pidfd_getfd).
		rm -rf "$WORK/hijack-repo" && mkdir "$WORK/hijack-repo" && cp "$HOSTILE" "$WORK/hijack-repo/hijack" &&
			(cd "$WORK/hijack-repo" && git init -q && git add hijack &&
				git -c user.email=e2e@tkbox -c user.name=e2e commit -qm hijack) ||
			{ notok "hijack: a checkout with the test agent" "git failed"; continue; }
		timeout -k 5 $BOUND "$TKBOX" run --image "$IMG" --name "$name" --memory 256M --disk 128M \
			--workspace "$WORK/hijack-repo" >/dev/null 2>"$WORK/run-$name.err"
	else
		timeout -k 5 $BOUND "$TKBOX" run --image "$IMG" --name "$name" --memory 256M --disk 128M \
			--env TKBOX_HOSTILE="$mode" >/dev/null 2>"$WORK/run-$name.err"
	fi
	run_rc=$?
	# tkbox run never reports a box running whose agent is gone: either it said running while the agent was alive
	# (box.running comes before the cut-off in the events), or it refused the box with the reason.
	if [ "$mode" != flood-egress ]; then
		if [ $run_rc -eq 0 ]; then
			check "$mode: tkbox run reported running only while the agent was alive" running_before_cut "$EV"
		else
			check "$mode: tkbox run refused a box cut off right after boot, with the reason" \
				grep -q "stopped right after boot: " "$WORK/run-$name.err"
		fi
	fi
	sup=$(sup_of "$name")
	sup_hwm=0
	[ -n "$sup" ] && sup_hwm=$(hwm "$sup")
	extra=
	case $mode in
	ignore-kills | hang)
		# The guest never ends a command: the host ends it at its deadline plus the grace, three times, then stops
		# the box.
		c0=$(cpu_s "${sup:-0}")
		w0=$(t)
		for i in 1 2 3; do
			timeout -k 5 $BOUND "$TKBOX" exec --timeout 2s "$name" -- sleep 100 >"$WORK/$name.x$i.out" 2>&1
			rc=$?
			check "$mode: exec $i ends at its deadline, not at the outer bound (rc=$rc)" \
				test $rc -ne 0 -a $rc -ne 124 -a $rc -ne 137
			check "$mode: exec $i says the box did not stop the command" \
				grep -q 'did not stop the command' "$WORK/$name.x$i.out"
			[ -n "$sup" ] && sup_hwm=$(hwm "$sup")
		done
		# Past a deadline nothing spins: the supervisor sleeps until the grace ends (it spun at ~90% before).
		c1=$(cpu_s "${sup:-0}")
		w1=$(elapsed "$w0")
		extra="supervisor CPU ${c1}-${c0} s over ${w1} s of ignored kills"
		check "$mode: the supervisor did not spin past the deadlines (CPU $c0 -> $c1 s in $w1 s)" \
			awk -v a="$c0" -v b="$c1" -v w="$w1" 'BEGIN { exit !(b - a < w / 4) }'
		;;
	hijack)
		out=$(timeout -k 5 $BOUND "$TKBOX" exec "$name" -- /workspace/hijack --hijack 2>&1)
		echo "# hijack: $(echo "$out" | head -3 | tr '\n' ' ')"
		;;
	flood-egress)
		# A guest that writes its egress port without pause still serves execs; measure beside it, and beside a
		# command that floods its own stdout (valid frames, all credit used).
		[ -n "$sup" ] && sleep 5
		t1=$(t)
		out=$(timeout -k 5 $BOUND "$TKBOX" exec "$name" -- echo self 2>&1)
		self=$(elapsed "$t1")
		check "$mode: the box itself answers ($self s)" test "$out" = self
		timeout -k 5 $BOUND "$TKBOX" exec "$name" -- yes flood-flood-flood >/dev/null 2>&1 &
		yes_pid=$!
		sleep 3
		t1=$(t)
		out=$(timeout -k 5 $BOUND "$TKBOX" exec "$name" -- echo self 2>&1)
		selfy=$(elapsed "$t1")
		check "$mode: the box answers beside its own stdout flood ($selfy s)" test "$out" = self
		extra="exec on the box itself: ${self} s; beside its own stdout flood (yes): ${selfy} s"
		lat=$(neighbour_exec)
		check "$mode: the neighbour answers beside the egress + stdout flood ($lat s)" test $? -eq 0
		[ -n "$sup" ] && sup_hwm=$(hwm "$sup")
		kill "$yes_pid" 2>/dev/null
		wait "$yes_pid" 2>/dev/null
		"$TKBOX" stop "$name" >/dev/null 2>&1
		;;
	*) ;;
	esac
	# The hostile box leaves `running` within the bound.
	st=$(state_of "$name")
	while [ "$st" = running ] || [ "$st" = creating ] || [ "$st" = stopping ]; do
		[ -n "$sup" ] && h=$(hwm "$sup") && [ "${h:-0}" -gt "$sup_hwm" ] && sup_hwm=$h
		awk -v a="$t0" -v b="$(t)" -v m=$BOUND 'BEGIN { exit !(b - a > m) }' && break
		sleep 0.5
		st=$(state_of "$name")
	done
	took=$(elapsed "$t0")
	check "$mode: the hostile box left running (state ${st:-none}, ${took} s after run)" \
		test -n "$st" -a "$st" != running -a "$st" != creating -a "$st" != stopping
	case $mode in
	bigframe | garbage | badtype | unknown-exec | flood-pong | hijack)
		want=$(case $mode in
			bigframe) echo 'announces 4294967295 bytes' ;;
			badtype | hijack) echo 'frame type 0x42' ;;
			unknown-exec) echo 'frame type 0x83 (about an exec the host never started' ;;
			flood-pong) echo 'frame type 0x81 (a pong without an outstanding ping)' ;;
			*) echo 'protocol violation: ' ;;
			esac)
		check "$mode: the violation is in the events, naming the frame" \
			grep -qF "\"event\":\"box.protocol_violation\"" "$EV"
		check "$mode: ... with the reason ($want)" grep -qF "$want" "$EV"
		check "$mode: the box's stop reason is the violation" \
			grep -q '"event":"box.stopped".*protocol violation' "$EV"
		;;
	*) ;;
	esac
	if [ "$mode" != flood-egress ]; then
		# Cut off by the host: later execs are refused before any decision, and the verified record says why.
		ndec=$(grep -c '"event":"exec.decided"' "$EV")
		timeout -k 5 $BOUND "$TKBOX" exec "$name" -- true >/dev/null 2>"$WORK/$name.after.err"
		rc=$?
		check "$mode: an exec after the cut-off is refused, naming why (rc=$rc)" \
			grep -q 'was stopped by the host: .*nothing ran' "$WORK/$name.after.err"
		check "$mode: ... and nothing was decided for it" test "$(grep -c '"event":"exec.decided"' "$EV")" -eq "$ndec"
		timeout -k 5 $BOUND "$TKBOX" export "$name" -o "$WORK/$name.tkb" >/dev/null 2>"$WORK/$name.export.err"
		timeout -k 5 $BOUND "$TKBOX" verify "$WORK/$name.tkb" --trust "$WORK/$name.trust.json" \
			>"$WORK/$name.verify" 2>&1
		check "$mode: the bundle verifies" grep -q 'Integrity: VERIFIED' "$WORK/$name.verify"
		bundle_cut "$WORK/$name.tkb" >"$WORK/$name.cut"
		why=$(grep -o '"detail":"[^"]*"' "$EV" | grep -m1 -E 'protocol violation|agent connection lost|did not stop' |
			sed 's/^"detail":"//; s/"$//')
		check "$mode: the bundle has a gap with the reason (${why:-none})" \
			grep -qF "gap agent: $why" "$WORK/$name.cut"
		check "$mode: the run closed with the reason" grep -qF "end failure: $why" "$WORK/$name.cut"
		case $mode in
		ignore-kills | hang)
			check "$mode: the 3 commands are recorded as timed out, not stopped by the box" \
				test "$(grep -c '^result error .*the box did not stop the command' "$WORK/$name.cut")" -eq 3
			;;
		*) ;;
		esac
	fi
	lat=$(neighbour_exec)
	check "$mode: the neighbour still answers ($lat s)" test $? -eq 0
	dh=$(hwm "$DAEMON_PID")
	echo "# $mode: hostile box out after ${took} s; neighbour exec ${lat} s; peak RSS: daemon ${dh} KiB," \
		"hostile supervisor ${sup_hwm} KiB${extra:+; $extra}"
	if [ "$RSS_MEANINGFUL" = 1 ]; then
		check "$mode: daemon peak RSS ${dh} KiB < $RSS_MAX_KIB" test "$dh" -lt $RSS_MAX_KIB
		check "$mode: hostile supervisor peak RSS ${sup_hwm} KiB < $RSS_MAX_KIB" test "$sup_hwm" -lt $RSS_MAX_KIB
	fi
	# What the stopped box printed stays in its state until tkbox rm (it was deleted with the VM's temporary dir).
	if [ "$mode" = hijack ]; then
		check "$mode: the stopped box's console log is kept" test -s "$TKBOX_STATE_DIR/boxes/$name/console.log"
	else
		check "$mode: the stopped box's console log is kept" grep -q 'HOSTILE-GUEST booted' \
			"$TKBOX_STATE_DIR/boxes/$name/console.log"
	fi
	"$TKBOX" rm "$name" >/dev/null 2>&1
	check "$mode: tkbox rm removes it" test ! -e "$TKBOX_STATE_DIR/boxes/$name/console.log"
done

"$TKBOX" stop nb >/dev/null 2>&1
check "no QEMU left behind" test -z "$(pgrep -f "qemu-system.*$(basename "$WORK")" || true)"
echo "1..$((pass + fail))"
echo "# $pass passed, $fail failed"
[ $fail -eq 0 ]
