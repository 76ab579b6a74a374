#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A crash mid-apply (issue 14; meson test patch-crash, suite e2e): the daemon runs with
# TKBOX_TEST_APPLY_STOP_AFTER=1 in its environment, which it passes to the writer child, and the writer stops
# itself (SIGSTOP) right after it has written its first file. A box changes a.txt, b.txt and c.txt; after stop,
# tkbox apply runs in the background; once the writer (`tkbox-host apply write`, a child of this test's daemon)
# is stopped, the test kills it with -9. Then: the CLI's error names exactly a.txt as written (exit 3, partly
# written), the checkout has exactly a.txt changed, the bundle VERIFIES and holds three Write decisions whose
# completions are one written_paths ["a.txt"] and two errors naming a.txt as written before them; the run is
# closed, so a second apply is refused.
#   tests/patch/patch-crash.sh BUILD_DIR
set -u
BUILD=${1:?usage: patch-crash.sh BUILD_DIR}
source "$(dirname "$0")/lib.sh"
trap pt_cleanup EXIT
T0=$(t)

CO=$WORK/checkout
mkdir -p "$CO" && (cd "$CO" && pt_git init -q . && for f in a b c; do echo "$f: first version" >"$f.txt"; done &&
	echo "untouched" >d.txt && pt_git add -A && pt_git commit -qm init) || pt_bail "git: the checkout"
CO=$(realpath "$CO")

signer_init || pt_bail "no signer"
pt_policy ""
export TKBOX_TEST_APPLY_STOP_AFTER=1
pt_start
unset TKBOX_TEST_APPLY_STOP_AFTER
echo "# checkout, image, signer and daemon ready in $(elapsed "$T0") s"

t0=$(t)
if pt_box c1 "$CO"; then ok "run a box with --workspace ($(elapsed "$t0") s)"; else
	notok "run a box with --workspace" "$(cat "$WORK/run-c1.err")"
	pt_bail "no box"
fi
"$TKBOX" exec c1 -- sh -c 'cd /workspace && for f in a b c; do echo "$f: changed in the box" >"$f.txt"; done'
check "the agent changed a.txt, b.txt, c.txt" test $? -eq 0
"$TKBOX" stop c1 >"$WORK/stop.out" 2>&1
check "stop: exit 0 ($(tr '\n' ' ' <"$WORK/stop.out" | head -c 200))" test $? -eq 0
pt_snapshot "$CO" >"$WORK/snap0"
pt_manifest "$CO" >"$WORK/man0"

# apply in the background; the writer stops itself after its first file.
"$TKBOX" apply c1 >"$WORK/apply.out" 2>"$WORK/apply.err" &
apid=$!
wpid=
state=
for _ in $(seq 3000); do
	[ -z "$wpid" ] && wpid=$(pt_writer_pid)
	if [ -n "$wpid" ]; then
		state=$(pt_proc_state "$wpid")
		[ "$state" = T ] && break
	fi
	kill -0 "$apid" 2>/dev/null || break
	sleep 0.2
done
if [ -n "$wpid" ] && [ "$state" = T ]; then
	PT_KILL+=("$wpid")
	ok "the writer (pid $wpid: $(tr '\0' ' ' <"/proc/$wpid/cmdline" | head -c 80)) stopped itself after its first file"
	# What is written at this moment: exactly the first file.
	now=$(diff <(pt_manifest "$CO") "$WORK/man0" | sed -n 's/^< //p' | jq -r '.path' | tr '\n' ' ')
	check "while the writer is stopped: exactly a.txt written ($now)" test "$now" = "a.txt "
	kill -9 "$wpid"
else
	notok "the writer stopped itself after its first file" "writer pid '${wpid}' state '${state}'" \
		"$(head -c 300 "$WORK/apply.err")" "$(tail -5 "$WORK/daemon.log")"
	kill -0 "$apid" 2>/dev/null && [ -n "$wpid" ] && kill -9 "$wpid" 2>/dev/null
fi
wait "$apid"
rc=$?
out=$(cat "$WORK/apply.out" "$WORK/apply.err")
check "apply: exit 3, partly written (exit $rc)" test "$rc" -eq 3
written=$(sed -n '/written before it stopped/,$p' "$WORK/apply.err" | sed -n 's/^tkbox apply:   //p' | tr '\n' ' ')
check "apply: the error names exactly a.txt as written ($written)" test "$written" = "a.txt "
sed 's/^/#   /' "$WORK/apply.err"
changed=$(pt_git -C "$CO" status --porcelain -uall | cut -c4- | tr '\n' ' ')
check "the checkout: exactly a.txt changed ($changed)" test "$changed" = "a.txt "
check "the checkout: a.txt holds the box's version" grep -qx 'a: changed in the box' "$CO/a.txt"
left=$(find "$CO" -name '.tkbox-apply-*' | head -3)
check "no temp file left (${left:-none})" test -z "$left"

# The records.
"$TKBOX" export c1 -o "$WORK/c1.tkb" >"$WORK/export.out" 2>&1
check "export: exit 0 ($(head -c 200 "$WORK/export.out"))" test $? -eq 0
"$TKBOX" verify "$WORK/c1.tkb" --trust "$WORK/c1.trust.json" >"$WORK/verify.out" 2>&1
check "verify: VERIFIED" grep -q 'Integrity: VERIFIED' "$WORK/verify.out"
pt_bundle_writes "$WORK/c1.tkb" >"$WORK/writes.jsonl"
n=$(grep -c . "$WORK/writes.jsonl")
check "bundle: three Write decisions ($n)" test "$n" -eq 3
wp=$(jq -r '.result.written_paths[]?' "$WORK/writes.jsonl" | tr '\n' ' ')
check "bundle: exactly one written_paths entry, a.txt ($wp)" test "$wp" = "a.txt "
nok=$(jq -c 'select(.result.ok == true)' "$WORK/writes.jsonl" | grep -c .)
check "bundle: one completion ok ($nok)" test "$nok" -eq 1
errs=$(jq -c 'select(.result.ok == false and (.result.error // "" | test("a\\.txt")) and
	(.result.written_paths // [] | length) == 0)' "$WORK/writes.jsonl" | grep -c .)
check "bundle: the other two completions are errors naming a.txt as written ($errs)" test "$errs" -eq 2
jq -r 'select(.result.ok == false) | "#   " + .result.error' "$WORK/writes.jsonl"
read -r dec res obs gaps reason kinds < <(bundle_counts "$WORK/c1.tkb")
check "bundle: the run closed as an apply failure ($reason)" grep -qi 'apply' <<<"$reason"
"$TKBOX" apply c1 >"$WORK/apply2.out" 2>&1
rc=$?
check "a second apply: refused (exit $rc; $(head -c 200 "$WORK/apply2.out"))" test "$rc" -eq 1
check "a second apply: nothing more written" test "$(pt_git -C "$CO" status --porcelain -uall | cut -c4- | tr '\n' ' ')" = "a.txt "

echo "# patch-crash in $(elapsed "$T0") s"
echo "1..$((pass + fail))"
[ "$fail" -eq 0 ]
