#!/bin/bash
# The supervisor's confinement on a running box (issue 11; suite e2e). One box; the kernel's view of its
# supervisor (/proc/<pid>/status, the pid from the box JSON `supervisor_pid`):
# - Seccomp 2 (a filter), NoNewPrivs 1, no effective capability;
# - as root: its uid is its own (not 0, not the daemon's, in the box range 0x7b000000 + slot) and so is its
#   QEMU's; not as root: the daemon's, and the box record says "uid":"shared";
# - the box record's supervisor_isolation says the same, and Landlock "abi N" when this kernel has it;
# - the box still works under the allowlist (exec), and at stop the supervisor keeps the console log and removes
#   its directory under /tmp (what its Landlock rules and its own uid must still allow), killed by no filter.
#   tests/daemon/confine.sh BUILD_DIR
set -u
BUILD=${1:?usage: confine.sh BUILD_DIR}
source "$(dirname "$0")/lib.sh"
trap lib_cleanup EXIT

IMG=$(image_path) || { echo "Bail out! no image"; exit 1; }
signer_init && signer_start || { echo "Bail out! no signer"; exit 1; }
daemon_start || { echo "Bail out! no daemon"; exit 1; }

"$TKBOX" run --image "$IMG" --name c1 --memory 256M --disk 128M >/dev/null 2>"$WORK/run.err" ||
	{ echo "Bail out! no box: $(cat "$WORK/run.err")"; exit 1; }
"$TKBOX" ls --json >"$WORK/ls.json"
field() { # KEY [SUBKEY]: the box c1's field, "-" when absent
	python3 - "$WORK/ls.json" "$@" <<'PY'
import json, sys
b = [x for x in json.load(open(sys.argv[1])) if x["name"] == "c1"][0]
v = b.get(sys.argv[2], "-")
if len(sys.argv) > 3:
    v = v.get(sys.argv[3], "-") if isinstance(v, dict) else "-"
print(json.dumps(v) if isinstance(v, bool) else v)
PY
}
SUP=$(field supervisor_pid)
check "the box JSON names its supervisor (supervisor_pid $SUP)" \
	test "$SUP" = "$(pgrep -P "$DAEMON_PID" -f -- "--supervise c1\$" | head -1)"
ST=/proc/$SUP/status
status_of() { awk -v k="$1:" '$1 == k { print $2 }' "$ST"; }
check "Seccomp: 2 (a filter) ($(status_of Seccomp))" test "$(status_of Seccomp)" = 2
check "NoNewPrivs: 1 ($(status_of NoNewPrivs))" test "$(status_of NoNewPrivs)" = 1
check "no effective capability ($(status_of CapEff))" test "$(status_of CapEff)" = 0000000000000000
SUP_UID=$(status_of Uid)
QEMU=$(pgrep -P "$SUP" qemu-system | head -1)
QEMU_UID=$(awk '$1 == "Uid:" { print $2 }' "/proc/$QEMU/status" 2>/dev/null)
DAEMON_UID=$(awk '$1 == "Uid:" { print $2 }' "/proc/$DAEMON_PID/status")
if [ "$DAEMON_UID" = 0 ]; then
	check "as root: the supervisor's uid is its own ($SUP_UID, not 0)" test "$SUP_UID" != 0
	check "  from the box range 0x7b000000.. ($SUP_UID)" \
		test "$SUP_UID" -ge $((0x7b000000)) -a "$SUP_UID" -lt $((0x7b000000 + 65536))
	check "  and its QEMU's ($QEMU_UID)" test "$QEMU_UID" = "$SUP_UID"
	check "  the record says uid own ($(field supervisor_isolation uid))" \
		test "$(field supervisor_isolation uid)" = own
else
	check "not root: the supervisor shares the daemon's uid ($SUP_UID)" test "$SUP_UID" = "$DAEMON_UID"
	check "  and the record says uid shared ($(field supervisor_isolation uid))" \
		test "$(field supervisor_isolation uid)" = shared
fi
check "the record says seccomp allowlist ($(field supervisor_isolation seccomp))" \
	test "$(field supervisor_isolation seccomp)" = allowlist
check "the record says no_new_privs ($(field supervisor_isolation no_new_privs))" \
	test "$(field supervisor_isolation no_new_privs)" = true
LL_ABI=$(python3 -c 'import ctypes; print(max(0, ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1)))')
if [ "$LL_ABI" -gt 0 ]; then WANT_LL="abi $LL_ABI"; else WANT_LL=unsupported; fi
check "the record says landlock $WANT_LL ($(field supervisor_isolation landlock))" \
	test "$(field supervisor_isolation landlock)" = "$WANT_LL"

# The daemon's socket (the supervisor's fd 3) is not in QEMU: only the supervisor may speak to the daemon.
CTL=$(readlink "/proc/$SUP/fd/3" 2>/dev/null)
QEMU_HAS_CTL=$(ls -l "/proc/$QEMU/fd/" 2>/dev/null | grep -cF -- "$CTL")
check "the supervisor's daemon socket ($CTL) is not open in its QEMU ($QEMU_HAS_CTL fds)" \
	test -n "$CTL" -a -n "$QEMU" -a "$QEMU_HAS_CTL" = 0

# The allowlist does not kill a working box.
out=$("$TKBOX" exec c1 -- echo confined 2>&1)
check "exec under the allowlist ($out)" test "$out" = confined
BOXDIR=$(tr '\0' '\n' <"/proc/$QEMU/cmdline" 2>/dev/null | sed -n 's|.*path=\(/tmp/tkbox-[^/]*\)/agent.sock|\1|p')
"$TKBOX" stop c1 >/dev/null 2>&1
for _ in $(seq 100); do kill -0 "$SUP" 2>/dev/null || break; sleep 0.1; done
check "stopped: the console log is kept" test -s "$TKBOX_STATE_DIR/boxes/c1/console.log"
check "stopped: its directory under /tmp is removed (${BOXDIR:-none found})" test -n "$BOXDIR" -a ! -e "$BOXDIR"
# The daemon records the supervisor's wait status: 0 is a clean exit (SIGSYS from the filter would be 31 or 159).
STOPPED=$(grep '"event":"box.stopped"' "$TKBOX_STATE_DIR/boxes/c1/events.jsonl" | tail -1)
check "the supervisor exited cleanly, killed by no filter ($STOPPED)" \
	grep -q '"status":0[,}]' <<<"$STOPPED"

echo "1..$((pass + fail))"
[ "$fail" -eq 0 ]
