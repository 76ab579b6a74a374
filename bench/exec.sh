#!/bin/bash
# Exec round trip of a decided `true` (tkbox exec: CLI -> daemon -> signer decide
# -> supervisor -> guest agent -> fork/exec -> exit -> signer complete) against
# an in-guest fork/exec of /bin/true, as a ratio. Prints figures; asserts nothing. The line before the last
# says where the time goes: the CLI's process start, the signer's connect + hello / decide / complete, and
# the CPU each process spends per decided exec.
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

# CPU time (user + system, clock ticks) of running processes: the daemon, the signer, and the daemon's
# descendants (each box's supervisor and its QEMU).
ticks() {
	local t=0 p
	for p in "$@"; do
		[ -r "/proc/$p/stat" ] && t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0)))
	done
	echo "$t"
}
descendants() {
	ps -e -o pid=,ppid= | awk -v root="$1" '{ parent[$1] = $2 } END {
		for (p in parent) { q = parent[p]; while (q > 1) { if (q == root) { print p; break } q = parent[q] } } }'
}
# Decided execs, one at a time, each timed by the host.
"$TKBOX" exec bench -- true # warm up
SUPS=$(descendants "$DAEMON_PID" | tr '\n' ' ')
d0=$(ticks "$DAEMON_PID") s0=$(ticks "$SIGNER_PID") q0=$(ticks $SUPS)
for _ in $(seq "$N"); do
	s=$(date +%s%N)
	"$TKBOX" exec bench -- true
	e=$(date +%s%N)
	echo $((e - s))
done >"$WORK/decided.unsorted"
d1=$(ticks "$DAEMON_PID") s1=$(ticks "$SIGNER_PID") q1=$(ticks $SUPS)
sort -n "$WORK/decided.unsorted" >"$WORK/decided.ns"
decided=$(awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }' "$WORK/decided.ns")

# Process start alone: the CLI with no API call.
for _ in $(seq "$N"); do
	s=$(date +%s%N)
	"$TKBOX" --version >/dev/null
	e=$(date +%s%N)
	echo $((e - s))
done | sort -n >"$WORK/start.ns"
start=$(awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }' "$WORK/start.ns")

# The signer's side, from a client in one process: connect + hello, then a decide and a complete (each waits
# for its group commit), on one long-lived connection as the daemon's link keeps them; medians in ms.
signer=$(python3 - "$TKBOX_SIGNER_SOCKET" "$N" <<'PY'
import hashlib, json, os, socket, statistics, sys, time
path, n = sys.argv[1], int(sys.argv[2])
def call(f, s, obj):
    s.sendall(json.dumps(obj).encode() + b"\n")
    return json.loads(f.readline())
def open_():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    f = s.makefile("rb")
    call(f, s, {"method": "hello", "proto": 1, "role": "runtime"})
    return s, f
s, f = open_()
run = call(f, s, {"method": "register_run", "request_id": "bench-%d" % os.getpid(), "agent": {"name": "bench"}})
ids = {"run_id": run["run_id"], "run_token": run["run_token"]}
args = {"command": "true"}
digest = "sha256:" + hashlib.sha256(json.dumps({"args": args, "tool": "Bash"}, separators=(",", ":"),
                                               sort_keys=True).encode()).hexdigest()
t = {"connect_hello": [], "decide": [], "complete": []}
for i in range(n):
    a = time.perf_counter()
    c = open_()
    b = time.perf_counter()
    c[0].close()
    d = call(f, s, dict(method="decide", request_id="bd%d" % i, tool_call_id="b%d" % i, tool="Bash", args=args, **ids))
    e = time.perf_counter()
    r = call(f, s, dict(method="complete", request_id="bc%d" % i, decision_id=d["decision_id"], args_digest=digest,
                        status="ok", exit_code=0, **ids))
    g = time.perf_counter()
    if "error" in r:
        sys.exit("complete: %s" % r)
    t["connect_hello"].append(b - a); t["decide"].append(e - b); t["complete"].append(g - e)
print(" ".join("signer_%s_ms=%.2f" % (k, statistics.median(v) * 1000) for k, v in t.items()))
PY
)

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
# Where the time goes (a line before the last, which stays as it is): medians in ms, and CPU ms per decided exec
# of the daemon, the signer and the box (its supervisor and QEMU).
awk -v st="$start" -v hz="$(getconf CLK_TCK)" -v n="$N" -v d=$((d1 - d0)) -v s=$((s1 - s0)) \
	-v q=$((q1 - q0)) -v sig="$signer" -v load="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN {
	k = 1000 / hz / n
	printf "where: load=%s cli_start_median_ms=%.2f %s cpu_ms_per_exec: daemon=%.2f signer=%.2f supervisor_qemu=%.2f\n",
		load, st / 1e6, sig, d * k, s * k, q * k
}'
awk -v d="$decided" -v g="$inguest" -v n="$N" -v a="$accel" -v l="$api" 'BEGIN {
	printf "accel=%s runs=%d decided_exec_median_ms=%.2f in_guest_fork_exec_ms=%.3f ratio=%.1f cli_api_roundtrip_median_ms=%.2f\n",
		a, n, d / 1e6, g / 1e6, d / g, l / 1e6
}'
