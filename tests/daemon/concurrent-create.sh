#!/bin/bash
# Concurrent creates (suite e2e): each client gets its own box's reply. The defect this guards: a fd the daemon
# closed twice (closep without resetting the variable, in the helper-program runner image_run_opts that a create's
# thread uses for the workspace builder and the image child) closed another thread's fd: an API connection
# accept4 had just given that number. Its client got a reset; the next connection given the number got the first
# create's reply (one client handed another's box).
# - Burst rounds, no VM: CC_CLIENTS creates at once, each with a workspace of its own that the workspace check
#   refuses (it holds the value of the box's --secret), while `tkbox ls --json` clients connect all the time:
#   every create must fail with the refusal naming its own workspace, every ls must answer a JSON list.
# - Boot round: CC_BOXES boxes created at once with workspaces: each client's "box NAME running" names its own box,
#   and each box's /workspace holds its own marker; then exec, ls and stop on all of them at once.
#   tests/daemon/concurrent-create.sh BUILD_DIR
set -u
BUILD=${1:?usage: concurrent-create.sh BUILD_DIR}
source "$(dirname "$0")/lib.sh"
CC_ROUNDS=${CC_ROUNDS:-4}
CC_CLIENTS=${CC_CLIENTS:-8}
CC_BOXES=${CC_BOXES:-3}
LS_PIDS=()
cc_cleanup() {
	touch "$WORK/ls.stop"
	for p in ${LS_PIDS[@]+"${LS_PIDS[@]}"}; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	lib_cleanup
}
trap cc_cleanup EXIT

IMG=$(image_path) || { echo "Bail out! no image"; exit 1; }
signer_init && signer_start || { echo "Bail out! no signer"; exit 1; }
daemon_start || { echo "Bail out! no daemon"; exit 1; }

# A client that asks `tkbox ls --json` until told to stop: each answer must be a JSON list (never a create's reply).
ls_loop() { # ID
	local i=0
	while [ ! -e "$WORK/ls.stop" ]; do
		i=$((i + 1))
		if ! timeout 30 "$TKBOX" ls --json >"$WORK/ls.$1.out" 2>"$WORK/ls.$1.err" ||
			! python3 -c 'import json,sys; assert isinstance(json.load(open(sys.argv[1])), list)' \
				"$WORK/ls.$1.out" 2>/dev/null; then
			{ echo "ls $1 #$i: $(head -c 300 "$WORK/ls.$1.out") $(head -c 300 "$WORK/ls.$1.err")"; } \
				>>"$WORK/ls.bad"
		fi
	done
}

# A workspace: a git checkout (the builder lists it with git ls-files) with FILE holding TEXT.
make_ws() { # DIR FILE TEXT
	mkdir -p "$1" && printf '%s\n' "$3" >"$1/$2" &&
		git -C "$1" init -q && git -C "$1" add "$2" &&
		git -C "$1" -c user.name=t -c user.email=t@t commit -qm ws
}

# Burst rounds: the workspace builder runs in a child of the daemon for each create, then refuses it.
export CC_TOKEN=cc-secret-value-0123456789abcdef
t0=$(t)
for k in 1 2 3 4; do ls_loop "$k" & LS_PIDS+=($!); done
bad=0
for r in $(seq "$CC_ROUNDS"); do
	pids=()
	for i in $(seq "$CC_CLIENTS"); do
		ws=$WORK/ws-$r-$i
		make_ws "$ws" leak.txt "token=$CC_TOKEN" || { echo "Bail out! no workspace"; exit 1; }
		timeout 60 "$TKBOX" run --image "$IMG" --name "cc$r-$i" --workspace "$ws" --memory 256M --disk 128M \
			--secret CC_TOKEN=env:CC_TOKEN@example.com >"$WORK/burst.$r.$i.out" 2>"$WORK/burst.$r.$i.err" &
		pids+=($!)
	done
	for i in $(seq "$CC_CLIENTS"); do
		rc=0
		wait "${pids[$((i - 1))]}" || rc=$?
		err=$WORK/burst.$r.$i.err
		# Its own refusal: the workspace check names this client's workspace, and no other client's.
		if [ "$rc" = 0 ] || ! grep -qF -- "$WORK/ws-$r-$i:" "$err" ||
			grep -v -F -- "$WORK/ws-$r-$i:" "$err" | grep -qF -- "$WORK/ws-" ||
			grep -qiE "cut or malformed|reset" "$err"; then
			bad=$((bad + 1))
			echo "# round $r client $i (exit $rc): $(head -c 400 "$err")"
		fi
	done
done
touch "$WORK/ls.stop"
for p in "${LS_PIDS[@]}"; do wait "$p"; done
LS_PIDS=()
check "burst: $CC_ROUNDS rounds of $CC_CLIENTS concurrent creates each got its own workspace's refusal ($bad wrong)" \
	test "$bad" = 0
touch "$WORK/ls.bad"
check "burst: every concurrent ls answered a JSON list ($(wc -l <"$WORK/ls.bad") wrong)" \
	test ! -s "$WORK/ls.bad"
[ -s "$WORK/ls.bad" ] && head -5 "$WORK/ls.bad" | sed 's/^/#   /'
n_dirs=$(ls -d "$TKBOX_STATE_DIR"/boxes/cc* 2>/dev/null | wc -l)
check "burst: the daemon still answers, and every refused box left its directory ($n_dirs of $((CC_ROUNDS * CC_CLIENTS)))" \
	test "$n_dirs" = $((CC_ROUNDS * CC_CLIENTS))
echo "# burst: $((CC_ROUNDS * CC_CLIENTS)) creates in $(elapsed "$t0") s"

# Boot round: real boxes, each with a workspace of its own, created at once.
t0=$(t)
pids=()
for i in $(seq "$CC_BOXES"); do
	make_ws "$WORK/wb-$i" marker "marker-$i" || { echo "Bail out! no workspace"; exit 1; }
	timeout 80 "$TKBOX" run --image "$IMG" --name "cb$i" --workspace "$WORK/wb-$i" --memory 256M --disk 128M \
		>"$WORK/boot.$i.out" 2>"$WORK/boot.$i.err" &
	pids+=($!)
done
for i in $(seq "$CC_BOXES"); do
	rc=0
	wait "${pids[$((i - 1))]}" || rc=$?
	line=$(grep -o "box [a-z0-9-]* running" "$WORK/boot.$i.err" | head -1)
	check "boot: client $i got its own box's reply ($line; exit $rc)" test "$rc" = 0 -a "$line" = "box cb$i running"
	[ "$rc" = 0 ] || echo "#   $(head -c 400 "$WORK/boot.$i.err")"
done
echo "# boot: $CC_BOXES boxes at once in $(elapsed "$t0") s"

# Exec, ls and stop on all of them at once: each answer is its own box's.
pids=()
for i in $(seq "$CC_BOXES"); do
	timeout 60 "$TKBOX" exec "cb$i" -- cat /workspace/marker >"$WORK/exec.$i.out" 2>"$WORK/exec.$i.err" &
	pids+=($!)
	timeout 60 "$TKBOX" ls --json >"$WORK/ls2.$i.out" 2>&1 &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for i in $(seq "$CC_BOXES"); do
	check "exec at once: cb$i's /workspace/marker is its own ($(head -c 80 "$WORK/exec.$i.out"))" \
		test "$(cat "$WORK/exec.$i.out")" = "marker-$i"
	names=$(python3 -c 'import json,sys; print(" ".join(sorted(b["name"] for b in json.load(open(sys.argv[1])) if b["name"].startswith("cb"))))' \
		"$WORK/ls2.$i.out" 2>/dev/null)
	check "ls at once #$i lists the boot round's boxes ($names)" \
		test "$names" = "$(seq -f 'cb%g' -s ' ' "$CC_BOXES")"
done
pids=()
for i in $(seq "$CC_BOXES"); do
	timeout 60 "$TKBOX" stop "cb$i" >"$WORK/stop.$i.out" 2>"$WORK/stop.$i.err" &
	pids+=($!)
done
for i in $(seq "$CC_BOXES"); do
	rc=0
	wait "${pids[$((i - 1))]}" || rc=$?
	check "stop at once: cb$i stopped (exit $rc)" test "$rc" = 0
	[ "$rc" = 0 ] || echo "#   $(head -c 400 "$WORK/stop.$i.err")"
done
"$TKBOX" ls --json >"$WORK/ls3.out" 2>&1
states=$(python3 -c 'import json,sys; print(" ".join(b["name"] + "=" + b["state"] for b in sorted(json.load(open(sys.argv[1])), key=lambda b: b["name"]) if b["name"].startswith("cb")))' \
	"$WORK/ls3.out" 2>/dev/null)
check "after the stops every box of the boot round is stopped ($states)" \
	test "$states" = "$(for i in $(seq "$CC_BOXES"); do printf 'cb%d=stopped ' "$i"; done | sed 's/ $//')"

echo "1..$((pass + fail))"
echo "# passed $pass, failed $fail"
[ "$fail" = 0 ]
