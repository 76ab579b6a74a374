#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# secrets-queuefull (issue 13): a swap whose tkbox.secret.use cannot even be queued is never sent. The daemon
# runs with --observe-queue 2 and --signer-timeout 2m (so the signer's deadline cannot be what refuses here).
# Box q1 --secret GH=env:GH@api.github.com opens three tunnels to api.github.com while the signer answers; the
# test stops the signer (SIGSTOP) and the box sends one request with "Authorization: Bearer $GH" on each at
# once. Each swap asks the daemon to keep a tkbox.secret.use: the first is being sent to the stalled signer, the
# second waits in the queue, the third finds the queue full. That must stop the box: every request is refused
# (503 swap-refused) or ends without an answer, the origin gets none of them (nor the value), the box's events
# say the queue was full, and once the signer runs again (SIGCONT) the run holds the loss as a tkbox.gap (kind
# observe; a capture.gap in the bundle) and its bundle verifies.
#   tests/secrets/secrets-queuefull.sh BUILD_DIR      (root; about 25 s under TCG)
# QF_OBSERVE_QUEUE=default runs the daemon without --observe-queue: the queue then has room, the swaps wait
# for the signer and go through after SIGCONT, and this test fails (how to see that it tests the cap).
set -u
BUILD=${1:?usage: secrets-queuefull.sh BUILD_DIR}
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

QF_N=3
cap=(--observe-queue "${QF_OBSERVE_QUEUE:-2}")
[ "${QF_OBSERVE_QUEUE:-}" = default ] && cap=()

T0=$(t)
sc_up
eg_image
signer_init && signer_start || eg_die "no signer"
sc_daemon_start --signer-timeout 2m "${cap[@]}" || eg_die "no daemon"
echo "# harness, image and daemon ready in $(elapsed "$T0") s (${cap[*]:-default queue})"

if sc_box q1 --secret GH=env:GH@api.github.com; then ok "run q1 --secret GH=env:GH@api.github.com"; else
	notok "run q1" "$(cat "$WORK/run-q1.err" "$WORK/sc-q1.err" 2>/dev/null)" "$(tail -5 "$WORK/daemon.log")"
	echo "1..$((pass + fail))"
	exit 1
fi
# A control first: with the signer up, the same request is swapped and answered.
out=$(inbox q1 120 sh -c 'curl -sS --max-time 90 -H "Authorization: Bearer $GH" https://api.github.com/control')
check "with the signer up the swap works ($out)" test "$out" = "tkbox-secrets-origin api.github.com /control"

# N tunnels up, then (on "go") one swapped request on each at once; one JSON line per answer.
"$TKBOX" exec -i q1 -- sh -c 'cat > /tmp/qf.py' >/dev/null 2>"$WORK/qf-install.err" <<'PY'
import json, os, socket, ssl, sys, threading
n, host = int(sys.argv[1]), "api.github.com"
sys.stdin.buffer.readline()  # the filler that makes `tkbox exec -i` stream
conns = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=150)
    s.sendall(b"CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        c = s.recv(4096)
        if not c:
            break
        head += c
    if not head.startswith(b"HTTP/1.1 200"):
        print(json.dumps({"error": "CONNECT: " + head[:200].decode("latin-1")}), flush=True)
        sys.exit(1)
    conns.append(ssl.create_default_context().wrap_socket(s, server_hostname=host))
print(json.dumps({"ready": n}), flush=True)
sys.stdin.buffer.readline()  # go

def one(i, s):
    r = {"case": "queuefull", "i": i}
    req = "GET /queuefull%d HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n"
    data = b""
    try:
        s.sendall((req % (i, host, os.environ["GH"])).encode())
        while True:
            c = s.recv(65536)
            if not c:
                break
            data += c
    except (OSError, ssl.SSLError) as e:
        r["error"] = "%s: %s" % (type(e).__name__, e)
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    if head[0].startswith("HTTP/1."):
        r["status"] = int(head[0].split(" ")[1])
        r["rule"] = next((l.split(":", 1)[1].strip() for l in head[1:] if l.lower().startswith("tkbox-rule:")), "")
        r["body"] = data.split(b"\r\n\r\n", 1)[-1][:300].decode("latin-1")
    print(json.dumps(r), flush=True)

ts = [threading.Thread(target=one, args=(i, s)) for i, s in enumerate(conns)]
for th in ts:
    th.start()
for th in ts:
    th.join()
PY
fifo=$WORK/qf.fifo
mkfifo "$fifo"
timeout --kill-after=5 300 "$TKBOX" exec -i q1 -- python3 /tmp/qf.py "$QF_N" <"$fifo" >"$WORK/qf.out" 2>"$WORK/qf.err" &
client=$!
exec {w}>"$fifo"
head -c $((1048576 + 16)) /dev/zero | tr '\0' 'x' >&"$w"
echo >&"$w"
for _ in $(seq 600); do
	grep -q '"ready"' "$WORK/qf.out" 2>/dev/null && break
	kill -0 "$client" 2>/dev/null || break
	sleep 0.2
done
check "the box's $QF_N tunnels to api.github.com are up ($(head -c 200 "$WORK/qf.out"))" \
	grep -q "\"ready\": $QF_N" "$WORK/qf.out"
kill -STOP "$SIGNER_PID"
echo go >&"$w"
# The queue is full once the third swap asks: the box stops without the signer. Wait for that, at most 20 s
# (inside --signer-timeout, and inside origin.py's 30 s read timeout: without the cap nothing stops the box,
# and once the signer runs again the swaps go through to the origin).
stopped=
for _ in $(seq 100); do
	state=$("$TKBOX" ls --json 2>/dev/null | jq -r '(if type == "array" then . else (.boxes // []) end)[] | select(.name == "q1") | .state')
	case $state in stopped | failed | lost) stopped=$state && break ;; esac
	sleep 0.2
done
kill -CONT "$SIGNER_PID"
wait "$client"
exec {w}>&-
check "the box is stopped while the signer is stalled (state ${stopped:-running})" test -n "$stopped"
grep '"case": "queuefull"' "$WORK/qf.out" | while read -r l; do
	echo "# the box got: $(jq -c '{i, status, rule, error, body: (.body // "" | .[0:160])}' <<<"$l")"
done
bad=$(grep '"case": "queuefull"' "$WORK/qf.out" | jq -c 'select(.status != null and (.status != 503 or .rule != "swap-refused"))')
check "every swapped request is refused (503 swap-refused) or unanswered ${bad:+(got: $bad)}" test -z "$bad"
check "the origin got none of them" test -z "$(sc_reqs 'select(.path | startswith("/queuefull"))')"
check "the origin's verdict: no value misplaced, one swap (the control)" \
	test "$(sc_verdict '"\(.violations | length) \(.swapped.GH)"')" = '"0 1"'
ev=$TKBOX_STATE_DIR/boxes/q1/events.jsonl
full=$(jq -c 'select(.event == "observe.queue_full") | {kind, max}' "$ev" 2>/dev/null | head -n 1)
check "the box's events say the queue was full (${full:-none})" \
	test "$(jq -r '"\(.kind) \(.max)"' <<<"${full:-{\}}")" = "tkbox.secret.use ${QF_OBSERVE_QUEUE:-2}"
"$TKBOX" exec q1 -- true >"$WORK/after.out" 2>&1
check "q1 takes no more commands" test $? -ne 0

# The loss is recorded in the run once the signer answers. The gap event is written before the record is
# sent, so wait for the record itself in the signer's store (read-only) before the export closes the run.
run_id=$(jq -r '.run_id // empty' "$TKBOX_STATE_DIR/boxes/q1/box.json" 2>/dev/null)
in_store=0
for _ in $(seq 100); do
	in_store=$(python3 - "$WORK/signer/store.db" "$run_id" <<'PY' 2>/dev/null
import sqlite3, sys
db = sqlite3.connect("file:%s?mode=ro" % sys.argv[1], uri=True)
print(db.execute("select count(*) from records where run_key like ? and line like '%capture.gap%'",
                 ("%/" + sys.argv[2],)).fetchone()[0])
PY
	)
	[ "${in_store:-0}" -gt 0 ] && break
	grep -q '"signer.gap_failed"\|"signer.gap_after_close"' "$ev" && break
	sleep 0.2
done
echo "# run $run_id: capture.gap records in the signer's store: ${in_store:-?}"
if eg_export_verify q1; then ok "q1's bundle verifies"; else
	notok "q1's bundle verifies" "$(cat "$WORK/export-q1.err") $(tail -3 "$WORK/verify-q1.out" 2>/dev/null)"
fi
gaps=$(python3 - "$WORK/q1.tkb" <<'PY' 2>/dev/null
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in z.namelist():
    if n.startswith("runs/"):
        for line in z.read(n).decode().splitlines():
            e = json.loads(line)["event"]
            d = e.get("data", {})
            if e.get("type") == "capture.gap":
                print(json.dumps(d, sort_keys=True))
PY
)
echo "# capture.gap records: ${gaps:-none}"
[ -n "$gaps" ] || jq -c 'select(.event | test("gap|signer|run|observe|stop"))' "$ev" | sed 's/^/#   event /'
check "the run holds the loss: a capture.gap (from tkbox.gap kind observe) of at least one record" \
	test -n "$(jq -c 'select((.reason | startswith("observe: ")) and .missed_events >= 1)' <<<"$gaps" 2>/dev/null)"
held=$(sc_seen_in "$TKBOX_STATE_DIR" "$WORK/daemon.log" "$WORK/signer.log" "$WORK/signer" "$WORK/qf.out" "$WORK/qf.err")
check "no value, nor its first 6 bytes, in the state dir, the logs or the box's output ${held:+(in: $held)}" test -z "$held"

echo "# total $(elapsed "$T0") s"
echo "1..$((pass + fail))"
[ $fail -eq 0 ]
