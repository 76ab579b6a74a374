#!/bin/sh
# tkbox-signer benchmark (issue 3): decisions per second with durable append
# (WAL + synchronous=FULL, group commit), one client and 8 concurrent clients,
# p50/p99 latency from send to the durable answer; then `tkbox verify` time
# for bundles of 1k / 10k / 100k records. It prints figures and asserts nothing.
#   bench/signer.sh [BUILD_DIR] [--quick]
# Targets (issue 3): >= 10,000 decisions/s and p99 <= 2 ms; 100k-record verify < 1 s.
set -eu
B=${1:-build}
QUICK=${2:-}
SIGNER=$B/tkbox-signer
BENCH=$B/tests/signer/signer-bench
TKBOX=$B/tkbox
for f in "$SIGNER" "$BENCH" "$TKBOX"; do
	[ -x "$f" ] || { echo "missing $f: build first (ninja -C $B)" >&2; exit 2; }
done
WORK=$(mktemp -d /tmp/tks-bench.XXXXXX)
export TKBOX_SIGNER_SOCKET="$WORK/s.sock"
export TKBOX_SIGNER_DIR="$WORK/state"
trap '"$SIGNER" down >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT

echo "== machine"
echo "cpus: $(nproc)  load average: $(cut -d' ' -f1-3 /proc/loadavg)  (figures below are only comparable at low load)"
# One fsync'd 4 KiB write, 200 times, in the directory the store uses: the floor of a durable answer.
t0=$(date +%s%N)
dd if=/dev/zero of="$WORK/fsync.probe" bs=4k count=200 oflag=dsync 2>/dev/null
t1=$(date +%s%N)
echo "durable write latency (dd oflag=dsync, 4 KiB): $(( (t1 - t0) / 200000 )) us"
rm -f "$WORK/fsync.probe"

"$SIGNER" init --dev >/dev/null
"$SIGNER" up --wait >/dev/null

echo "== decide throughput and latency (Bash \"echo hi\", default policy, durable before answer)"
if [ "$QUICK" = "--quick" ]; then N1=500 N8=200; else N1=5000 N8=2000; fi
"$BENCH" "$TKBOX_SIGNER_SOCKET" 1 "$N1" 1
"$BENCH" "$TKBOX_SIGNER_SOCKET" 1 "$((N1 * 4))" 64
"$BENCH" "$TKBOX_SIGNER_SOCKET" 8 "$N8" 1
"$BENCH" "$TKBOX_SIGNER_SOCKET" 8 "$((N8 * 2))" 16

echo "== verify time (tkbox verify on an exported closed run)"
# A decide record is ~1.1 KiB, so one run's file reaches the format's 64 MiB member
# limit near 55k records: the largest single-run bundle measured here is 40k decisions.
if [ "$QUICK" = "--quick" ]; then SIZES="1000"; else SIZES="1000 10000 40000"; fi
for n in $SIZES; do
	run=$(SIGNER_BENCH_CLOSE=1 "$BENCH" "$TKBOX_SIGNER_SOCKET" 1 "$n" 256 | sed -n 's/^run_id=//p')
	[ -n "$run" ] || { echo "no run for $n"; continue; }
	"$SIGNER" export --run "$run" --out "$WORK/b$n.tkb" >/dev/null
	t0=$(date +%s%N)
	if "$TKBOX" verify "$WORK/b$n.tkb" --trust "$WORK/b$n.trust.json" >"$WORK/v$n.txt" 2>&1; then rc=0; else rc=$?; fi
	t1=$(date +%s%N)
	echo "records=$((n + 4)) bundle=$(stat -c %s "$WORK/b$n.tkb")B verify=$(( (t1 - t0) / 1000000 ))ms exit=$rc $(grep '^Integrity' "$WORK/v$n.txt" || true)"
done
