#!/bin/sh
# tkbox-signer benchmark (issue 3): decisions per second with durable append
# (WAL + synchronous=FULL, group commit), one client and 8 concurrent clients,
# p50/p99 latency from send to the durable answer; then `tkbox verify` time
# for bundles of 1k / 10k / 100k records. It prints figures and asserts nothing.
#   bench/signer.sh [BUILD_DIR] [--quick]
# Issue 16: the last lines are key=value headlines (fsync_floor_ms, signer_p99_ms for 1 client x 1 in flight,
# signer_ratio = 8x16 decisions/s / (cores x single-core Ed25519 sign/s), verify_ratio = records/s of
# `tkbox verify` on the largest bundle / (cores x single-core Ed25519 verify/s)); the Ed25519 rates come from
# `openssl speed ed25519` in the same run.
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
fsync_floor_ms=$(awk -v ns=$((t1 - t0)) 'BEGIN { printf "%.3f", ns / 200 / 1e6 }')
cores=$(nproc)
# Single-core Ed25519 rates (openssl speed is one process): its line "... Ed25519) Ts Ts SIGN/s VERIFY/s".
if [ "$QUICK" = "--quick" ]; then secs=1; else secs=3; fi
ed=$(openssl speed -seconds "$secs" ed25519 2>/dev/null | awk '/Ed25519\)/ && NF >= 2 { print $(NF - 1), $NF }' | tail -n 1)
ed_sign=${ed% *} ed_verify=${ed#* }
[ -n "$ed" ] || { ed_sign=0 ed_verify=0; }
echo "single-core Ed25519 (openssl speed): sign ${ed_sign}/s verify ${ed_verify}/s; machine limit: $cores cores"
rm -f "$WORK/fsync.probe"

"$SIGNER" init --dev >/dev/null
"$SIGNER" up --wait >/dev/null

echo "== decide throughput and latency (Bash \"echo hi\", default policy, durable before answer)"
if [ "$QUICK" = "--quick" ]; then N1=500 N8=200; else N1=5000 N8=2000; fi
"$BENCH" "$TKBOX_SIGNER_SOCKET" 1 "$N1" 1 | tee "$WORK/one.txt"
"$BENCH" "$TKBOX_SIGNER_SOCKET" 1 "$((N1 * 4))" 64
"$BENCH" "$TKBOX_SIGNER_SOCKET" 8 "$N8" 1
"$BENCH" "$TKBOX_SIGNER_SOCKET" 8 "$((N8 * 2))" 16 | tee "$WORK/eight.txt"
signer_p99_ms=$(tr ' ' '\n' <"$WORK/one.txt" | sed -n 's/^p99=\([0-9.]*\)ms$/\1/p' | tail -n 1)
rate8=$(tr ' ' '\n' <"$WORK/eight.txt" | sed -n 's/^rate=\([0-9.]*\)\/s$/\1/p' | tail -n 1)

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
	vrate=$(awk -v r=$((n + 4)) -v ns=$((t1 - t0)) 'BEGIN { printf "%.0f", r / (ns / 1e9) }')
	vrecords=$((n + 4))
done

echo "== ratios (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
ratio() { awk -v a="$1" -v c="$cores" -v r="$2" 'BEGIN { if (a == "" || r + 0 <= 0) print "nan"; else printf "%.2f", a / (c * r) }'; }
echo "signer 8x16: ${rate8:-?} decisions/s vs $cores x ${ed_sign} signs/s"
echo "verify ${vrecords:-?} records: ${vrate:-?} records/s vs $cores x ${ed_verify} verifies/s"
echo "load_avg=$(cut -d' ' -f1 /proc/loadavg)"
echo "fsync_floor_ms=$fsync_floor_ms"
echo "signer_p99_ms=${signer_p99_ms:-nan}"
echo "signer_ratio=$(ratio "${rate8:-}" "$ed_sign")"
echo "verify_ratio=$(ratio "${vrate:-}" "$ed_verify")"
