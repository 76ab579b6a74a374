#!/bin/bash
# Exec round trip of a decided `true` (tkbox exec: CLI -> daemon -> signer decide
# -> supervisor -> guest agent -> fork/exec -> exit -> signer complete) against
# an in-guest fork/exec of /bin/true, as a ratio. Prints figures; asserts nothing.
#   bench/exec.sh [BUILD_DIR] [N]
set -u
BUILD=${1:-build}
N=${2:-50}
source "$(dirname "$0")/../tests/daemon/lib.sh"
trap lib_cleanup EXIT

IMG=$(image_path) || exit 1
signer_init && signer_start && daemon_start || exit 1
"$TKBOX" run --image "$IMG" --name bench --memory 512M --disk 256M >/dev/null || exit 1
accel=$("$TKBOX" ls --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["accel"])')

# Decided execs, one at a time, each timed by the host.
"$TKBOX" exec bench -- true # warm up
for _ in $(seq "$N"); do
	s=$(date +%s%N)
	"$TKBOX" exec bench -- true
	e=$(date +%s%N)
	echo $((e - s))
done | sort -n >"$WORK/decided.ns"
decided=$(awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }' "$WORK/decided.ns")

# The CLI and API alone (no signer, no guest): tkbox ls.
for _ in $(seq "$N"); do
	s=$(date +%s%N)
	"$TKBOX" ls >/dev/null
	e=$(date +%s%N)
	echo $((e - s))
done | sort -n >"$WORK/ls.ns"
api=$(awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }' "$WORK/ls.ns")

# In the guest: M fork/execs of /bin/true, timed by the guest's /proc/uptime (10 ms resolution, so M is large).
M=$((N * 20))
inguest=$("$TKBOX" exec bench -- sh -c "read a _ </proc/uptime; i=0; while [ \$i -lt $M ]; do /bin/true; i=\$((i + 1)); \
done; read b _ </proc/uptime; echo \$a \$b" | awk -v m="$M" '{ printf "%.0f", ($2 - $1) * 1e9 / m }')

"$TKBOX" stop bench >/dev/null 2>&1
awk -v d="$decided" -v g="$inguest" -v n="$N" -v a="$accel" -v l="$api" 'BEGIN {
	printf "accel=%s runs=%d decided_exec_median_ms=%.2f in_guest_fork_exec_ms=%.3f ratio=%.1f cli_api_roundtrip_median_ms=%.2f\n",
		a, n, d / 1e6, g / 1e6, d / g, l / 1e6
}'
