#!/bin/sh
# Boot benchmark of a box (issue 4). Prints figures; asserts nothing.
#   bench/boot.sh [BUILD_DIR] [RUNS] [SOAK_BOOTS]
# - box ready (QEMU start -> the agent answers ping) against a bare boot of the
#   same kernel, same QEMU flags, to a trivial init that prints READY
#   (tkbox-guest's probe mode), RUNS of each, interleaved; medians and ratio
# - exec round trip of `true` (median of 20 per box) and QEMU's peak RSS
# - SOAK_BOOTS consecutive boots while two busy loops load both CPUs: hangs counted
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
"$vm" assets >/dev/null

median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) {print "nan"} else if (NR%2) {print a[(NR+1)/2]} else {printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}}'; }
field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }

echo "host: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), accel $accel, $runs runs each"
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
	"ready times: $(grep -o 'ready in [0-9.]*' "$work/soak.log" | awk '{print $3}' | median) s median"
