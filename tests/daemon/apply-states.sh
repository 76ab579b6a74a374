#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The daemon's side of the patch door without a VM (issue 14): boxes a previous daemon left stopped, with a patch
# saved the way tkbox stop saves it (<box>/patch.diff + patch.json, made here with real git), loaded by a real
# daemon. A recorded daemon (dev signer) refuses apply for a box that ran unrecorded, a closed run and a run left
# open by a daemon that ended, each with its code's message, and tkbox diff shows a stopped box's saved patch (or
# says none was saved). An --unrecorded daemon then applies one (dry run first: nothing written), refuses a box
# without --workspace (no_checkout), a patch.json that says why none was saved, and a patch.diff changed since
# stop (its sha256 is checked). The VM paths are in tests/patch (patch-e2e, patch-crash, patch-hostile).
# usage: apply-states.sh BUILD_DIR
BUILD=${1:?usage: apply-states.sh BUILD_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"
trap lib_cleanup EXIT
echo "TAP version 13"

git_() { GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git -c user.name=t -c user.email=t@test.example \
	-c init.defaultBranch=main -c core.hooksPath=/dev/null "$@"; }

# A checkout, and the patch of an edit, a creation, a deletion and a chmod as git writes it.
CO=$WORK/checkout
mkdir -p "$CO" && (
	cd "$CO" && git_ init -q . && printf 'one\ntwo\n' >a.txt && echo gone >old.txt && printf '#!/bin/sh\n' >run.sh &&
		git_ add -A && git_ commit -qm init
) || { echo "Bail out! no checkout"; exit 1; }
cp -a "$CO" "$WORK/edited"
(cd "$WORK/edited" && printf 'one\nTWO\n' >a.txt && rm old.txt && mkdir -p new && echo hi >new/x.txt &&
	chmod +x run.sh && git_ add -A && git_ diff --cached --binary --full-index --no-renames) >"$WORK/p.diff"
SHA=$(sha256sum <"$WORK/p.diff" | cut -d' ' -f1)
BYTES=$(stat -c %s "$WORK/p.diff")

# box NAME JSON-MEMBERS [patch|error:WHY|tamper]: a stopped box as a previous daemon left it.
box() {
	local d=$TKBOX_STATE_DIR/boxes/$1
	mkdir -p -m 0700 "$d"
	printf '{"name":"%s","state":"stopped","created":1,"accel":"tcg","isolation":"emulated"%s}' "$1" "$2" >"$d/box.json"
	case "${3:-}" in
	patch | tamper)
		cp "$WORK/p.diff" "$d/patch.diff"
		printf '{"sha256":"%s","bytes":%s,"files":4,"notices":[]}' "$SHA" "$BYTES" >"$d/patch.json"
		[ "$3" = tamper ] && sed -i 's/TWO/TW0/' "$d/patch.diff"
		;;
	error:*) printf '{"error":"%s"}' "${3#error:}" >"$d/patch.json" ;;
	esac
}
# apply_rc BOX ARGS...: exit status, output in $WORK/BOX.out
apply_rc() {
	local b=$1
	shift
	timeout -k 5 120 "$TKBOX" apply "$b" "$@" >"$WORK/$b.out" 2>&1
}

mkdir -m 0700 "$TKBOX_STATE_DIR" && mkdir -m 0700 "$TKBOX_STATE_DIR/boxes"
box s-unrec ",\"run_closed\":false,\"workspace\":\"$CO\"" patch
box s-closed ",\"run_id\":\"r-closed\",\"run_closed\":true,\"close_reason\":\"exported\",\"workspace\":\"$CO\"" patch
box s-open ",\"run_id\":\"r-open\",\"run_closed\":false,\"workspace\":\"$CO\"" patch
box s-nopatch ",\"run_closed\":false,\"workspace\":\"$CO\""
cp -a "$CO" "$WORK/snap"

signer_init && signer_start || { echo "Bail out! no signer"; exit 1; }
daemon_start --guest "$BUILD/tkbox-guest-linux-amd64" || { echo "Bail out! no daemon"; exit 1; }
apply_rc s-unrec
rc=$?
check "recorded daemon, a box that ran unrecorded: refused (rc=$rc)" test $rc -eq 1
check "... unrecorded: says so ($(head -c 200 "$WORK/s-unrec.out"))" grep -q 'ran unrecorded' "$WORK/s-unrec.out"
apply_rc s-closed
check "a closed run: refused, names its close reason ($(head -c 200 "$WORK/s-closed.out"))" \
	grep -q "run is closed (exported)" "$WORK/s-closed.out"
apply_rc s-open
check "a run left open by a daemon that ended: refused ($(head -c 200 "$WORK/s-open.out"))" \
	grep -q "left open by a daemon that ended" "$WORK/s-open.out"
check "nothing written by any of them" diff -r "$WORK/snap" "$CO"
"$TKBOX" diff s-unrec >"$WORK/diff.out" 2>"$WORK/diff.err"
check "diff of a stopped box: the saved patch, byte for byte" cmp -s "$WORK/p.diff" "$WORK/diff.out"
"$TKBOX" diff s-unrec --json >"$WORK/diff.json" 2>&1
check "diff --json: its sha256 and 4 files" \
	test "$(jq -r '.sha256' "$WORK/diff.json") $(jq -r '.files | length' "$WORK/diff.json")" = "$SHA 4"
"$TKBOX" diff s-nopatch >"$WORK/diff2.out" 2>&1
rc=$?
check "diff of a box stopped without a patch: refused (rc=$rc): none was saved" \
	grep -q 'none was saved' "$WORK/diff2.out"
kill "$DAEMON_PID" && wait "$DAEMON_PID"

box u-apply ",\"run_closed\":false,\"workspace\":\"$CO\"" patch
box u-nows ",\"run_closed\":false" patch
box u-err ",\"run_closed\":false,\"workspace\":\"$CO\"" "error:the guest could not make the patch: over PATCH_MAX_FILES"
box u-tamper ",\"run_closed\":false,\"workspace\":\"$CO\"" tamper
daemon_start --unrecorded --guest "$BUILD/tkbox-guest-linux-amd64" || { echo "Bail out! no daemon"; exit 1; }
apply_rc u-nows
check "no --workspace and no --checkout: refused (no_checkout) ($(head -c 200 "$WORK/u-nows.out"))" \
	grep -q 'has no --workspace to apply to' "$WORK/u-nows.out"
apply_rc u-err
check "patch.json says why none was saved: refused with that reason ($(head -c 200 "$WORK/u-err.out"))" \
	grep -q 'has no patch: the guest could not make the patch: over PATCH_MAX_FILES' "$WORK/u-err.out"
apply_rc u-tamper
rc=$?
check "patch.diff changed since stop: refused (rc=$rc) ($(head -c 200 "$WORK/u-tamper.out"))" \
	grep -q 'is not the one tkbox stop recorded' "$WORK/u-tamper.out"
check "nothing written so far" diff -r "$WORK/snap" "$CO"
apply_rc u-apply --dry-run
rc=$?
check "dry run: exit 0 (rc=$rc), nothing written" test $rc -eq 0 -a -z "$(diff -r "$WORK/snap" "$CO")"
apply_rc u-apply
rc=$?
check "apply: exit 0 (rc=$rc; $(head -c 200 "$WORK/u-apply.out"))" test $rc -eq 0
check "apply: the checkout is the edited tree (content, deletion, creation, mode)" \
	diff -r --exclude=.git "$WORK/edited" "$CO"
check "apply: run.sh executable" test -x "$CO/run.sh"
check "apply: no scratch left in the box's state" test -z "$(ls -d "$TKBOX_STATE_DIR"/boxes/u-apply/apply.* 2>/dev/null)"
check "events: apply.started, apply.written x4, apply.done" \
	test "$(grep -c '"event":"apply.written"' "$TKBOX_STATE_DIR/boxes/u-apply/events.jsonl") $(grep -c '"event":"apply.started"' "$TKBOX_STATE_DIR/boxes/u-apply/events.jsonl")" = "4 2"
mkdir -p "$TKBOX_STATE_DIR/boxes/u-apply/apply.7/tree/d" && echo x >"$TKBOX_STATE_DIR/boxes/u-apply/apply.7/tree/d/f"
"$TKBOX" rm u-apply >"$WORK/rm.out" 2>&1
check "rm: the box's state goes, a scratch a daemon that ended mid-apply left included" \
	test ! -e "$TKBOX_STATE_DIR/boxes/u-apply"
echo "1..$((pass + fail))"
[ "$fail" -eq 0 ]
