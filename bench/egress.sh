#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The network door's speed (issue 12). Prints figures and ratios measured in one run; asserts nothing.
# Root (the origins run in a network namespace: tests/egress/lib.sh).
#   1. The supervisor's proxy (egress-sup.c, driven by tests/egress/proxy-bench.c) against a socat relay on
#      the same loopback path: BENCH_MIB MiB from a source on 127.0.0.1, the same C reader, medians of 3.
#   2. A box's tunnel against the box's raw channel, same box, same bytes, timed inside the box from the first
#      byte to the end: down, a tunnel (CONNECT to origin:7101, not TLS, through the guest forwarder, the
#      tkbox.egress mux, the supervisor's proxy and the daemon's dialled socket) against `tkbox exec -i` stdin
#      (the agent's virtio-serial port: the nearest raw host->guest channel that exists; tkbox.egress itself has
#      no other user to time); up, a tunnel to origin:7102 against `tkbox exec` stdout (host side timed).
#      The down tunnel's client sends one line first ("go"): a tunnel whose client has sent nothing yet gets the
#      origin's bytes but not its EOF (found by egress-clients' server-first case), which would hang the timing.
#   3. New connections through the door: N CONNECTs to origin.test.example:443 (decide WebFetch, resolve, dial,
#      established) one at a time and PAR at a time, per second, with p50/p99 from CONNECT to "200"; the added
#      latency is that minus the host's own TCP connect to the origin (p50/p99 of N).
#   4. The secrets door's read path (issue 13) against the plain tunnel, same box, same nginx, same 10 MiB body,
#      timed inside the box by the same python client (tests/secrets/sc-client.py), 3 rounds alternating,
#      medians: plain = TLS from the box to nginx through a tunnel the proxy only relays
#      (https://origin.test.example/ten.bin); read = the proxy terminates the box's TLS with the box's CA,
#      dials nginx over TLS, swaps the placeholder into Authorization (recording tkbox.secret.use), scans the
#      request for leaks and redacts the response (https://bound.test.example/ten.bin, bound by --secret);
#      then small requests: N GETs of /index.txt one after another on one connection of each kind, p50/p99.
#      The last line is key=value pairs.
#   bench/egress.sh [BUILD_DIR] [N] [PAR]          BENCH_MIB (default 64); BENCH_PARTS (default 1,2,3,4)
set -u
BUILD=${1:-build}
N=${2:-100}
PAR=${3:-8}
MIB=${BENCH_MIB:-64}
source "$(cd "$(dirname "$0")" && pwd)/../tests/egress/lib.sh"

BYTES=$((MIB * 1048576))
part() { [[ ",${BENCH_PARTS:-1,2,3,4}," == *",$1,"* ]]; }
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR ? a[int((NR + 1) / 2)] : "nan") }'; }
eg_up >/dev/null
head -c $((10 * 1048576)) /dev/urandom >"$EG_DIR/www/ten.bin"
eg_in_ns socat TCP-LISTEN:7101,reuseaddr,fork SYSTEM:"head -c $BYTES /dev/zero" >/dev/null 2>&1 &
eg_in_ns socat TCP-LISTEN:7102,reuseaddr,fork SYSTEM:"cat >/dev/null" >/dev/null 2>&1 &
eg_image
signer_init && signer_start || eg_die "no signer"
# --egress-ca: the proxy verifies nginx (test CA) on the connections it reads (part 4).
eg_daemon_start --egress-ca "$EG_CA" --resolve "bound.test.example=$EG_ORIGIN_IP" || eg_die "no daemon"
sleep 0.5
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs, ${MIB} MiB per transfer"

# ---- 1. the supervisor's proxy against socat, same loopback path ------------------------------------------
if part 1; then
# A source on 127.0.0.1 sends BYTES and closes. Read straight, through a socat relay, and through egress_sup
# (tests/egress/proxy-bench.c: the real proxy code and its poll loop, a socketpair for the tkbox.egress port,
# a thread as the guest forwarder with its 1 MiB window). The same C reader times each, first byte to EOF;
# three rounds alternating, medians.
PB=$BUILD/tests/egress/egress-proxy-bench
src_port=$((20000 + RANDOM % 20000))
relay_port=$((src_port + 1))
socat "TCP-LISTEN:$src_port,bind=127.0.0.1,reuseaddr,fork" SYSTEM:"head -c $BYTES /dev/zero" >/dev/null 2>&1 &
src_pid=$!
socat "TCP-LISTEN:$relay_port,bind=127.0.0.1,reuseaddr,fork" "TCP:127.0.0.1:$src_port" >/dev/null 2>&1 &
relay_pid=$!
sleep 0.3
: >"$WORK/pb-proxy" && : >"$WORK/pb-socat" && : >"$WORK/pb-direct"
for _ in 1 2 3; do
	"$PB" "$src_port" 2>>"$WORK/pb.err" | cut -d' ' -f1 >>"$WORK/pb-proxy"
	"$PB" --raw "$relay_port" 2>>"$WORK/pb.err" | cut -d' ' -f1 >>"$WORK/pb-socat"
	"$PB" --raw "$src_port" 2>>"$WORK/pb.err" | cut -d' ' -f1 >>"$WORK/pb-direct"
done
kill "$src_pid" "$relay_pid" 2>/dev/null
wait "$src_pid" "$relay_pid" 2>/dev/null
px=$(median <"$WORK/pb-proxy") sx=$(median <"$WORK/pb-socat") dx=$(median <"$WORK/pb-direct")
echo "host loopback, $MIB MiB, medians of 3: direct $dx MiB/s, socat relay $sx MiB/s, supervisor proxy $px MiB/s $(tr '\n' ' ' <"$WORK/pb.err")"
awk -v a="$px" -v b="$sx" 'BEGIN { printf "ratio proxy/socat: %.2f (target >= 0.9)\n", a / b }'

fi

# ---- 2. a box's tunnel against its raw channel ----------------------------------------------------------
GH=ghp_bench$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n') eg_box bench \
	--allow origin.test.example,origin.test.example:7101,origin.test.example:7102 --secret GH=env:GH@bound.test.example ||
	eg_die "tkbox run: $(cat "$WORK/run-bench.err")"
acc=$("$TKBOX" ls --json | jq -r '.[] | select(.name == "bench") | .accel')
if part 2; then
tun_down=$(eg_py bench 600 sink origin.test.example:7101 go | jq -r '.mib_s')
raw_down=$(head -c "$BYTES" /dev/zero | timeout 600 "$TKBOX" exec -i bench -- python3 /tmp/eg.py stdin-sink |
	jq -r '.mib_s')
tun_up=$(eg_py bench 600 source origin.test.example:7102 "$BYTES" | jq -r '.mib_s')
raw_up=$(timeout 600 "$TKBOX" exec bench -- python3 -c "import sys
b = bytes(1 << 20)
for _ in range($MIB): sys.stdout.buffer.write(b)" | python3 -c 'import sys, time
n, t0 = 0, None
while True:
    c = sys.stdin.buffer.raw.read(1 << 20)
    if not c:
        break
    if t0 is None:
        t0 = time.monotonic()
    n += len(c)
print("%.2f" % (n / 1048576 / (time.monotonic() - t0)))')
echo "box ($acc): down tunnel $tun_down MiB/s, raw (exec stdin) $raw_down MiB/s; up tunnel $tun_up MiB/s, raw (exec stdout) $raw_up MiB/s"
awk -v a="$tun_down" -v b="$raw_down" -v c="$tun_up" -v d="$raw_up" \
	'BEGIN { printf "ratio tunnel/raw: down %.2f, up %.2f (target >= 0.8)\n", a / b, c / d }'

fi

# ---- 3. new connections ---------------------------------------------------------------------------------
if part 3; then
direct=$(python3 - "$EG_ORIGIN_IP" "$N" <<'PY'
import socket, sys, time
ms = []
for _ in range(int(sys.argv[2])):
    t0 = time.monotonic()
    s = socket.create_connection((sys.argv[1], 443))
    ms.append((time.monotonic() - t0) * 1000)
    s.close()
ms.sort()
print("%.3f %.3f" % (ms[len(ms) // 2], ms[min(len(ms) - 1, int(0.99 * len(ms)))]))
PY
)
read -r d50 d99 <<<"$direct"
for p in 1 "$PAR"; do
	r=$(eg_py bench 900 conns "$N" origin.test.example:443 "$p")
	read -r per_s p50 p99 nok nfail <<<"$(jq -r '"\(.per_s) \(.p50_ms) \(.p99_ms) \(.n) \(.failed)"' <<<"$r")"
	echo "conns ($p at a time): $nok established, $nfail refused, $per_s/s; CONNECT->200 p50 $p50 ms, p99 $p99 ms"
	awk -v a="$p50" -v b="$p99" -v c="$d50" -v d="$d99" \
		'BEGIN { printf "added latency per connection (%s at a time): p50 %.1f ms, p99 %.1f ms (host direct connect p50 %.3f ms, p99 %.3f ms)\n", "'"$p"'", a - c, b - d, c, d }'
done
fi

# ---- 4. the secrets door's read path against the plain tunnel ---------------------------------------------
if part 4; then
	"$TKBOX" exec -i bench -- sh -c 'cat > /tmp/sc.py' <"$SRC/tests/secrets/sc-client.py" >/dev/null 2>&1
	"$TKBOX" exec -i bench -- sh -c 'cat > /tmp/testca.pem' <"$EG_CA" >/dev/null 2>&1
	sc() { timeout --kill-after=5 900 "$TKBOX" exec bench --env SC_EXTRA_CA=/tmp/testca.pem -- python3 /tmp/sc.py "$@" </dev/null 2>&1; }
	: >"$WORK/i-plain" && : >"$WORK/i-read"
	for _ in 1 2 3; do
		sc big https://origin.test.example/ten.bin | jq -r '.mib_s // empty' >>"$WORK/i-plain"
		sc big https://bound.test.example/ten.bin 'Authorization: Bearer $GH' | tee "$WORK/i-read.json" |
			jq -r 'select(.status == 200) | .mib_s // empty' >>"$WORK/i-read"
	done
	ip_=$(median <"$WORK/i-plain") ir=$(median <"$WORK/i-read")
	echo "box ($acc), 10 MiB over TLS, medians of 3: plain tunnel $ip_ MiB/s, read path (terminate + swap + leak scan + redaction) $ir MiB/s ($(tr '\n' ' ' <"$WORK/i-read"); last: $(head -c 160 "$WORK/i-read.json"))"
	ratio=$(awk -v a="$ir" -v b="$ip_" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "nan" }')
	echo "ratio read/plain, 10 MiB: $ratio (target >= 0.5)"
	kp=$(sc keepalive https://origin.test.example/index.txt "$N")
	kr=$(sc keepalive https://bound.test.example/index.txt "$N" 'Authorization: Bearer $GH')
	read -r p50p p99p <<<"$(jq -r '"\(.p50_ms) \(.p99_ms)"' <<<"$kp" 2>/dev/null)"
	read -r p50r p99r <<<"$(jq -r '"\(.p50_ms) \(.p99_ms)"' <<<"$kr" 2>/dev/null)"
	echo "small requests ($N on one connection): plain p50 $p50p ms p99 $p99p ms; read path (each a swap recorded) p50 $p50r ms p99 $p99r ms"
	sratio=$(awk -v a="$p50r" -v b="$p50p" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "nan" }')
	echo "ratio read/plain small-request p50: $sratio (a peer measured 25x)"
fi
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$TKBOX" stop bench >/dev/null 2>&1
part 4 && echo "inspect_ratio_10mib=${ratio:-nan} plain_mib_s=${ip_:-nan} read_mib_s=${ir:-nan} small_p50_plain_ms=${p50p:-nan} small_p50_read_ms=${p50r:-nan} small_ratio=${sratio:-nan}"
