#!/bin/sh
# Boot benchmark of a box (issue 4). Prints figures; asserts nothing.
#   bench/boot.sh [BUILD_DIR] [RUNS] [SOAK_BOOTS]
# - box ready (QEMU start -> the agent answers ping) against a bare boot of the
#   same kernel, same QEMU flags, to a trivial init that prints READY
#   (tkbox-guest's probe mode), RUNS of each, interleaved; medians and ratio
# - exec round trip of `true` (median of 20 per box) and QEMU's peak RSS
# - SOAK_BOOTS consecutive boots while two busy loops load both CPUs: hangs counted
# - QEMU's RSS of an idle box (VmRSS from /proc/PID/status, ready and idle IDLE_S seconds, default 4)
# Issue 16: the last lines are key=value headlines: bare_boot_median_s, box_ready_median_s, qemu_rss_mib
# (idle), accel, kernel (built or cloud; TKBOX_KERNEL=built|cloud picks one). Set SOAK_BOOTS (3rd argument) to 0 to skip the soak.
# Accelerator: $ACCEL (default tcg, as in CI). Kernel from the asset cache
# ($TKBOX_STATE_DIR or ~/.local/state/tkbox; fetched on first use).
set -eu
build=${1:-build}
runs=${2:-10}
soak=${3:-30}
accel=${ACCEL:-tcg}
here=$(cd "$(dirname "$0")/.." && pwd)
vm="$build/src/vmm/tkbox-vm"
guest="$build/tkbox-guest-linux-amd64"
[ -x "$vm" ] && [ -x "$guest" ] || { echo "boot.sh: build $build first (ninja -C $build)" >&2; exit 2; }
work=$(mktemp -d)
loads=""
cleanup() {
	for p in $loads; do kill "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT INT TERM
img="$build/tests/e2e/e2e-rootfs.ext4"
if [ ! -f "$img" ]; then
	img="$work/rootfs.ext4"
	"$here/tests/e2e/mkimage.sh" rootfs "$img" >/dev/null
fi
# The kernel: the built one when cached (tkbox-vm assets --build-kernel), else Debian's cloud kernel;
# TKBOX_KERNEL=built|cloud forces one (docs/vm.md).
kpkg=$("$vm" assets | sed -n 's/^package //p')
case $kpkg in built*) kernel=built ;; *) kernel=cloud ;; esac

median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) {print "nan"} else if (NR%2) {print a[(NR+1)/2]} else {printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}}'; }
field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }

load0=$(cut -d' ' -f1 /proc/loadavg)
echo "host: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), accel $accel, $runs runs each"
echo "kernel: $kernel ($kpkg)"
: >"$work/bare" ; : >"$work/ready" ; : >"$work/exec" ; : >"$work/rss"
i=0
while [ "$i" -lt "$runs" ]; do
	i=$((i + 1))
	b=$("$vm" bare --guest "$guest" --accel "$accel" | field bare_ready_s)
	line=$("$vm" bench --guest "$guest" --accel "$accel" --rootfs "$img" --execs 20)
	r=$(echo "$line" | field ready_s)
	echo "$b" >>"$work/bare"
	echo "$r" >>"$work/ready"
	echo "$line" | field exec_true_median_ms >>"$work/exec"
	echo "$line" | field qemu_peak_rss_mib >>"$work/rss"
	echo "run $i: bare ${b}s box ${r}s"
done
mb=$(median <"$work/bare")
mr=$(median <"$work/ready")
echo "bare boot to READY, median of $runs: ${mb} s"
echo "box ready (QEMU start -> ping), median of $runs: ${mr} s"
echo "ratio box/bare: $(awk -v a="$mr" -v b="$mb" 'BEGIN {printf "%.2f", a / b}')"
echo "exec round trip of true, median: $(median <"$work/exec") ms"
echo "QEMU peak RSS per box, median: $(median <"$work/rss") MiB"

# An idle box: tkbox-vm run of a long sleep; once it says ready, wait, then read its QEMU's VmRSS.
idle_s=${IDLE_S:-4}
"$vm" run --guest "$guest" --accel "$accel" --rootfs "$img" -- sleep $((idle_s + 30)) 2>"$work/idle.log" &
idle_pid=$!
loads="$loads $idle_pid"
rss_idle=nan
i=0
while [ "$i" -lt 600 ] && ! grep -q 'ready in' "$work/idle.log" && kill -0 "$idle_pid" 2>/dev/null; do
	sleep 0.1
	i=$((i + 1))
done
if grep -q 'ready in' "$work/idle.log"; then
	sleep "$idle_s"
	for q in $(ps -e -o pid=,ppid=,comm= | awk -v p="$idle_pid" '$2 == p && $3 ~ /^qemu/ { print $1 }'); do
		rss_idle=$(awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$q/status" 2>/dev/null || echo nan)
	done
fi
kill "$idle_pid" 2>/dev/null || true
wait "$idle_pid" 2>/dev/null || true
echo "QEMU RSS of an idle box (ready + ${idle_s}s, accel $accel): ${rss_idle} MiB"

if [ "$soak" -gt 0 ]; then
	echo "soak: $soak consecutive boots with both CPUs loaded"
	sh -c 'while :; do :; done' & loads="$loads $!"
	sh -c 'while :; do :; done' & loads="$loads $!"
	ok=0 hung=0 failed=0 n=0
	while [ "$n" -lt "$soak" ]; do
		n=$((n + 1))
		set +e
		timeout 180 "$vm" run --guest "$guest" --accel "$accel" --rootfs "$img" -- true 2>>"$work/soak.log"
		rc=$?
		set -e
		case $rc in
		0) ok=$((ok + 1)) ;;
		124) hung=$((hung + 1)); echo "boot $n: hung (no answer in 180 s)" ;;
		*) failed=$((failed + 1)); echo "boot $n: failed (status $rc)" ;;
		esac
	done
	retried=$(grep -c 'no contact from the guest' "$work/soak.log" || true)
	echo "soak: $ok ok, $hung hung, $failed failed of $soak; $retried boot(s) restarted by the watchdog (guest never reached init);" \
		"ready times: $(grep -o 'ready in [0-9.]*' "$work/soak.log" 2>/dev/null | awk '{print $3}' | median) s median"
fi

echo "load_avg=$load0"
echo "accel=$accel"
echo "kernel=$kernel"
echo "bare_boot_median_s=$mb"
echo "box_ready_median_s=$mr"
echo "qemu_rss_mib=$rss_idle"
