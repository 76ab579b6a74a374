#!/bin/bash
# Density benchmark (issue 16). Prints figures; asserts nothing.
#   bench/density.sh [BUILD_DIR] [BOXES] [EXECS_PER_BOX]
# - BOXES (default 8) boxes created at once through the daemon (a dev signer and a daemon in a temporary
#   state dir, tests/daemon/lib.sh; the cached busybox image): time until every `tkbox run` has returned
#   (each returns when its box is ready)
# - host memory: the sum of the boxes' QEMU VmRSS (idle a few seconds), MemAvailable before and after
# - BOXES x EXECS_PER_BOX (default 32) concurrent `tkbox exec BOX -- true`, as execs per second
# The last lines are key=value: load_avg, accel, density_all_ready_s, density_rss_total_mib, density_execs_per_s.
# Everything it starts (daemon, signer, boxes) is stopped on exit, even on failure.
set -u
BUILD=${1:-build} # read by tests/daemon/lib.sh
BOXES=${2:-8}
PER=${3:-32}
source "$(dirname "$0")/../tests/daemon/lib.sh"
density_cleanup() {
	local i
	local stops=()
	for i in $(seq "$BOXES"); do
		"$TKBOX" stop "d$i" >/dev/null 2>&1 &
		stops+=($!)
	done
	for i in "${stops[@]}"; do wait "$i"; done
	lib_cleanup
}
trap density_cleanup EXIT
trap 'exit 130' INT TERM

load0=$(cut -d' ' -f1 /proc/loadavg)
IMG=$(image_path) || exit 1
signer_init && signer_start && daemon_start || exit 1
memavail() { awk '/^MemAvailable:/ { printf "%.0f", $2 / 1024 }' /proc/meminfo; }
echo "host: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), MemTotal $(awk '/^MemTotal:/ { printf "%.0f", $2 / 1024 }' /proc/meminfo) MiB"

avail0=$(memavail)
t0=$(t)
runs=()
for i in $(seq "$BOXES"); do
	"$TKBOX" run --image "$IMG" --name "d$i" --memory 256M --disk 128M >"$WORK/run$i.log" 2>&1 &
	runs+=($!)
done
nfail=0
for p in "${runs[@]}"; do wait "$p" || nfail=$((nfail + 1)); done
all_ready=$(elapsed "$t0")
accel=$("$TKBOX" ls --json 2>/dev/null | python3 -c 'import json,sys; l=json.load(sys.stdin); print(l[0]["accel"] if l else "?")')
echo "$BOXES boxes created at once: all ready in ${all_ready} s, $nfail failed (accel $accel)"
[ "$nfail" -eq 0 ] || { tail -n 3 "$WORK"/run*.log; }

sleep 3
rss_total=$(ps -e -o pid=,comm= | awk '$2 ~ /^qemu/ { print $1 }' | while read -r q; do
	# only QEMUs under this daemon
	p=$q
	while [ "$p" -gt 1 ]; do
		[ "$p" = "$DAEMON_PID" ] && { awk '/^VmRSS:/ { print $2 }' "/proc/$q/status" 2>/dev/null; break; }
		p=$(awk '{ print $4 }' "/proc/$p/stat" 2>/dev/null || echo 1)
	done
done | awk '{ s += $1; n++ } END { printf "%.1f %d", s / 1024, n }')
avail1=$(memavail)
echo "QEMU RSS total ${rss_total% *} MiB over ${rss_total#* } QEMU(s); MemAvailable ${avail0} -> ${avail1} MiB ($((avail0 - avail1)) MiB used)"

: >"$WORK/exec.rc"
t1=$(t)
runs=()
for i in $(seq "$BOXES"); do
	for _ in $(seq "$PER"); do
		{ "$TKBOX" exec "d$i" -- true >/dev/null 2>>"$WORK/exec.err"; echo $? >>"$WORK/exec.rc"; } &
		runs+=($!)
	done
done
for p in "${runs[@]}"; do wait "$p"; done
secs=$(elapsed "$t1")
ok=$(grep -c '^0$' "$WORK/exec.rc")
total=$((BOXES * PER))
eps=$(awk -v n="$ok" -v s="$secs" 'BEGIN { printf "%.1f", (s > 0 ? n / s : 0) }')
echo "$BOXES x $PER concurrent execs of true: $ok of $total ok in ${secs} s: ${eps} execs/s"
[ "$ok" -eq "$total" ] || sort "$WORK/exec.err" | uniq -c | head -n 3

echo "load_avg=$load0"
echo "accel=$accel"
echo "density_all_ready_s=$all_ready"
echo "density_rss_total_mib=${rss_total% *}"
echo "density_execs_per_s=$eps"
