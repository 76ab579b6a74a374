#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The patch door end to end (issue 14; meson test patch-e2e, suite e2e): a real box (busybox image) with
# --workspace on a git checkout this script makes. Through tkbox exec the agent edits a text file and one
# without a final newline, creates a file in a new directory, deletes a file, makes a script executable, makes a
# symlink and retargets another, writes a new binary file and rewrites an old one (NUL bytes), and unpacks a
# `git init` into /workspace/.git. Then: tkbox diff shows each change (and leaves .git out with a notice), host git
# reads that patch as the box's tree, apply on the running box is refused, tkbox stop saves the patch, apply
# --dry-run writes nothing, apply writes exactly the box's changes (content, modes, symlinks, deletions; git
# status names exactly those paths), a second apply is refused (the run is closed), and the exported bundle
# VERIFIES with one Write decision per file whose content_sha256 is the written file's (seen through the test
# policy's flag rules, one per expected content) and a completion naming it in written_paths.
#   tests/patch/patch-e2e.sh BUILD_DIR
set -u
BUILD=${1:?usage: patch-e2e.sh BUILD_DIR}
source "$(dirname "$0")/lib.sh"
trap pt_cleanup EXIT
T0=$(t)

CO=$WORK/checkout
EXP=$WORK/expected
pt_checkout "$CO" || pt_bail "git: the checkout"
CO=$(realpath "$CO")

# The agent's changes, made first on a copy of the checkout: that copy is the tree the box must end with, and the
# flag rules name each changed file's expected content.
AGENT='set -e
sed -i "s/^line 10\$/line ten, edited in the box/" README.md
echo "line 21, added in the box" >>README.md
mkdir -p new/dir
echo "created in a new directory" >new/dir/file.txt
rm old.txt
chmod +x tools/build.sh
ln -s ../README.md docs/readme-link
ln -sfn src/other.c link
printf "a\nb\nc" >src/nonl.txt'
{ printf 'BLOB\0\0\1\2\3\0'; head -c 4000 /dev/urandom; printf '\0tail'; } >"$WORK/blob.bin"
{ printf 'LOGO\0\1\2\3\0\377\376 second version\n'; head -c 300 /dev/urandom; } >"$WORK/logo.bin"
cp -a "$CO" "$EXP" && (cd "$EXP" && sh -c "$AGENT" && cp "$WORK/blob.bin" data/blob.bin &&
	cp "$WORK/logo.bin" data/logo.bin) || pt_bail "the expected tree"
CHANGED="README.md data/blob.bin data/logo.bin docs/readme-link link new/dir/file.txt old.txt src/nonl.txt tools/build.sh"
DELETED="old.txt"
NFILES=$(wc -w <<<"$CHANGED")

signer_init || pt_bail "no signer"
rules=
i=0
for p in $CHANGED; do
	i=$((i + 1))
	[ -e "$EXP/$p" ] || [ -L "$EXP/$p" ] || continue
	rules+=$(pt_flag "PT-C$i" content_sha256 "^$(pt_sha256 "$EXP/$p")\$")$'\n'
done
rules+=$(pt_flag PT-M644 mode '^100644$')$'\n'$(pt_flag PT-M755 mode '^100755$')$'\n'
rules+=$(pt_flag PT-M120 mode '^120000$')$'\n'$(pt_flag PT-DEL op '^delete$')$'\n'
rules+=$(pt_flag PT-FP path "^${CO//./\\.}/[^/]")
pt_policy "$rules"
pt_start
echo "# checkout, image, signer and daemon ready in $(elapsed "$T0") s"

t0=$(t)
if pt_box p1 "$CO"; then ok "run a box with --workspace on a git checkout ($(elapsed "$t0") s)"; else
	notok "run a box with --workspace" "$(cat "$WORK/run-p1.err")"
	pt_bail "no box"
fi

# The agent at work.
"$TKBOX" exec p1 -- sh -c "cd /workspace && $AGENT" >"$WORK/agent.out" 2>&1
rc=$?
"$TKBOX" exec -i p1 -- sh -c 'cat >/workspace/data/blob.bin' <"$WORK/blob.bin" >>"$WORK/agent.out" 2>&1
rc=$((rc + $?))
"$TKBOX" exec -i p1 -- sh -c 'cat >/workspace/data/logo.bin' <"$WORK/logo.bin" >>"$WORK/agent.out" 2>&1
rc=$((rc + $?))
# `git init` as the agent would run it (the busybox image has no git: the host makes it, the box unpacks it).
mkdir -p "$WORK/agentgit" && pt_git init -q "$WORK/agentgit" &&
	tar -C "$WORK/agentgit" -cf - .git | "$TKBOX" exec -i p1 -- tar -C /workspace -xf - >>"$WORK/agent.out" 2>&1
rc=$((rc + $?))
check "the agent's edits ran in the box" test "$rc" -eq 0
"$TKBOX" exec p1 -- test -f /workspace/.git/HEAD
check "the box's /workspace has a .git of its own" test $? -eq 0

# tkbox diff on the running box.
"$TKBOX" diff p1 >"$WORK/diff.out" 2>"$WORK/diff.err"
rc=$?
check "diff: exit 0 (exit $rc; $(head -c 300 "$WORK/diff.err"))" test "$rc" -eq 0
sections=$(grep -c '^diff --git ' "$WORK/diff.out")
check "diff: one section per changed file ($sections of $NFILES)" test "$sections" -eq "$NFILES"
for p in $CHANGED; do
	check "diff: a section for $p" grep -qxF "diff --git a/$p b/$p" "$WORK/diff.out"
done
sect() { awk -v h="diff --git a/$1 b/$1" '/^diff --git /{on = ($0 == h)} on' "$WORK/diff.out"; }
check "diff: README.md's edit as a hunk" grep -qx '+line ten, edited in the box' <(sect README.md)
check "diff: new/dir/file.txt a creation (new file mode 100644)" grep -qx 'new file mode 100644' <(sect new/dir/file.txt)
check "diff: old.txt a deletion (deleted file mode 100644)" grep -qx 'deleted file mode 100644' <(sect old.txt)
check "diff: tools/build.sh old mode 100644" grep -qx 'old mode 100644' <(sect tools/build.sh)
check "diff: tools/build.sh new mode 100755" grep -qx 'new mode 100755' <(sect tools/build.sh)
check "diff: docs/readme-link a symlink creation (new file mode 120000)" grep -qx 'new file mode 120000' <(sect docs/readme-link)
check "diff: link retargeted (+src/other.c)" grep -qx '+src/other.c' <(sect link)
check "diff: src/nonl.txt keeps its missing final newline" grep -qx '\\ No newline at end of file' <(sect src/nonl.txt)
check "diff: data/blob.bin a git binary patch" grep -qx 'GIT binary patch' <(sect data/blob.bin)
check "diff: data/logo.bin a git binary patch" grep -qx 'GIT binary patch' <(sect data/logo.bin)
check "diff: data/blob.bin has a full index line" grep -qE '^index 0{40}\.\.[0-9a-f]{40}$' <(sect data/blob.bin)
gitpaths=$(grep -aiE '^(diff --git|---|\+\+\+) .*(^|/)\.git(/| |$)' "$WORK/diff.out" | head -3)
check "diff: nothing of the agent's .git in the patch (${gitpaths:-none})" test -z "$gitpaths"
check "diff: the agent's .git left out with a notice on stderr" grep -q '\.git' "$WORK/diff.err"
# Host git reads the box's patch as the box's tree: applied to a clone of the checkout it gives the expected tree.
pt_git clone -q "$CO" "$WORK/gitclone" 2>/dev/null &&
	pt_git -C "$WORK/gitclone" apply --whitespace=nowarn "$WORK/diff.out" 2>"$WORK/gitapply.err"
rc=$?
check "diff: host git applies the patch (exit $rc; $(head -c 200 "$WORK/gitapply.err"))" test "$rc" -eq 0
check "diff: host git's result is the expected tree" cmp -s <(pt_manifest "$WORK/gitclone") <(pt_manifest "$EXP")
# --stat and --json (a per-file summary) when this build has them.
if "$TKBOX" diff p1 --stat >"$WORK/stat.out" 2>"$WORK/stat.err"; then
	miss=
	for p in $CHANGED; do grep -qF -- "$p" "$WORK/stat.out" || miss+=" $p"; done
	check "diff --stat names every changed file (missing:${miss:- none})" test -z "$miss"
else
	notok "diff --stat" "$(head -c 300 "$WORK/stat.err")"
fi
if "$TKBOX" diff p1 --json >"$WORK/json.out" 2>"$WORK/json.err"; then
	jpaths=$(jq -r '.files[].path' "$WORK/json.out" 2>/dev/null | sort | tr '\n' ' ')
	check "diff --json lists exactly the changed files ($jpaths)" test "$jpaths" = "$(tr ' ' '\n' <<<"$CHANGED" | sort | tr '\n' ' ')"
	check "diff --json: old.txt op delete" test "$(jq -r '.files[] | select(.path == "old.txt") | .op' "$WORK/json.out")" = delete
	check "diff --json: tools/build.sh new_mode 100755" \
		test "$(jq -r '.files[] | select(.path == "tools/build.sh") | .new_mode' "$WORK/json.out")" = 100755
	check "diff --json: data/blob.bin binary" \
		test "$(jq -r '.files[] | select(.path == "data/blob.bin") | .binary' "$WORK/json.out")" = true
	check "diff --json: a notice for .git" \
		test "$(jq '[.notices[]? | .[0] | test("(^|/)\\.git(/|$)")] | any' "$WORK/json.out")" = true
	check "diff --json: sha256 is the patch's" test "$(jq -r .sha256 "$WORK/json.out")" = "$(sha256sum <"$WORK/diff.out" | cut -d' ' -f1)"
else
	notok "diff --json" "$(head -c 300 "$WORK/json.err")"
fi

# The merged tree, read out of the box before it stops.
pt_box_tree p1 "$WORK/boxtree"
check "the box's /workspace read out (tar through exec)" test $? -eq 0
check "the box's tree (without .git) is the expected tree" cmp -s <(pt_manifest "$WORK/boxtree") <(pt_manifest "$EXP")

# apply on a running box is refused, and writes nothing.
pt_snapshot "$CO" >"$WORK/snap0"
"$TKBOX" apply p1 >"$WORK/apply-running.out" 2>&1
rc=$?
check "apply on a running box: refused (exit $rc)" test "$rc" -ne 0 -a "$rc" -ne 125
check "apply on a running box: the message says to stop first ($(head -c 200 "$WORK/apply-running.out"))" \
	grep -q 'tkbox stop p1' "$WORK/apply-running.out"
check "apply on a running box: nothing written" cmp -s "$WORK/snap0" <(pt_snapshot "$CO")

# stop saves the patch.
"$TKBOX" stop p1 >"$WORK/stop.out" 2>&1
rc=$?
check "stop: exit 0 (exit $rc)" test "$rc" -eq 0
check "stop: reports the saved patch of $NFILES files ($(tr '\n' ' ' <"$WORK/stop.out" | head -c 300))" \
	grep -q "saved the box's patch: $NFILES files" "$WORK/stop.out"
BOXDIR=$TKBOX_STATE_DIR/boxes/p1
check "stop: <box>/patch.diff is the patch tkbox diff showed" cmp -s "$BOXDIR/patch.diff" "$WORK/diff.out"
check "stop: patch.diff mode 0600" test "$(stat -c %a "$BOXDIR/patch.diff" 2>/dev/null)" = 600
psha=$(sha256sum <"$BOXDIR/patch.diff" | cut -d' ' -f1)
check "stop: the report's sha256 is patch.diff's" grep -q "sha256 $psha" "$WORK/stop.out"
check "stop: patch.json's sha256 is patch.diff's" test "$(jq -r .sha256 "$BOXDIR/patch.json" 2>/dev/null)" = "$psha"
check "stop: patch.json counts $NFILES files" test "$(jq -r .files "$BOXDIR/patch.json" 2>/dev/null)" = "$NFILES"
check "stop: patch.json's notices name the agent's .git" \
	test "$(jq '[.notices[]? | .[0] | test("(^|/)\\.git(/|$)")] | any' "$BOXDIR/patch.json" 2>/dev/null)" = true
"$TKBOX" diff p1 >"$WORK/diff-stopped.out" 2>/dev/null
check "diff on the stopped box: the saved patch" cmp -s "$WORK/diff-stopped.out" "$WORK/diff.out"

# apply --dry-run: the plan, nothing written.
"$TKBOX" apply p1 --dry-run >"$WORK/dry.out" 2>&1
rc=$?
check "apply --dry-run: exit 0 (exit $rc; $(grep -v '^tkbox apply: would' "$WORK/dry.out" | tr '\n' ' ' | head -c 300))" \
	test "$rc" -eq 0
would=$(sed -n 's/^tkbox apply: would [a-z]* \([^ ]*\).*$/\1/p' "$WORK/dry.out" | sort | tr '\n' ' ')
check "apply --dry-run names exactly the files ($would)" test "$would" = "$(tr ' ' '\n' <<<"$CHANGED" | sort | tr '\n' ' ')"
check "apply --dry-run: old.txt a delete" grep -qx 'tkbox apply: would delete old.txt' "$WORK/dry.out"
check "apply --dry-run: tools/build.sh 100755" grep -q '^tkbox apply: would modify tools/build.sh (100755' "$WORK/dry.out"
check "apply --dry-run: the checkout byte-identical (.git included)" cmp -s "$WORK/snap0" <(pt_snapshot "$CO")

# apply: exactly the box's changes.
t0=$(t)
"$TKBOX" apply p1 >"$WORK/apply.out" 2>"$WORK/apply.err"
rc=$?
check "apply: exit 0 (exit $rc; $(elapsed "$t0") s; $(head -c 300 "$WORK/apply.err"))" test "$rc" -eq 0
wrote=$(sed -n 's/^tkbox apply: wrote //p' "$WORK/apply.out" | sort | tr '\n' ' ')
check "apply: prints exactly the written files ($wrote)" test "$wrote" = "$(tr ' ' '\n' <<<"$CHANGED" | sort | tr '\n' ' ')"
check "apply: the checkout (without .git) is the box's tree: content, modes, symlinks, deletions" \
	cmp -s <(pt_manifest "$CO") <(pt_manifest "$WORK/boxtree")
if ! cmp -s <(pt_manifest "$CO") <(pt_manifest "$WORK/boxtree"); then
	diff <(pt_manifest "$CO") <(pt_manifest "$WORK/boxtree") | head -20 | sed 's/^/#   /'
fi
status=$(pt_git -C "$CO" status --porcelain -uall | cut -c4- | sort | tr '\n' ' ')
check "apply: git status names exactly the changed paths ($status)" \
	test "$status" = "$(tr ' ' '\n' <<<"$CHANGED" | sort | tr '\n' ' ')"
check "apply: old.txt deleted (git status D)" grep -qx ' D old.txt' <(pt_git -C "$CO" status --porcelain)
check "apply: tools/build.sh mode 0755" test "$(stat -c %a "$CO/tools/build.sh")" = 755
check "apply: link is a symlink to src/other.c" test "$(readlink "$CO/link")" = src/other.c
check "apply: docs/readme-link is a symlink to ../README.md" test "$(readlink "$CO/docs/readme-link")" = ../README.md
check "apply: data/blob.bin byte for byte" cmp -s "$CO/data/blob.bin" "$WORK/blob.bin"
check "apply: data/logo.bin byte for byte" cmp -s "$CO/data/logo.bin" "$WORK/logo.bin"
left=$(find "$CO" -name '.tkbox-apply-*' | head -3)
check "apply: no temp file left (${left:-none})" test -z "$left"
check "apply: the checkout's .git untouched" cmp -s <(grep '"path": "\.git' "$WORK/snap0") \
	<(pt_snapshot "$CO" | grep '"path": "\.git')
pt_snapshot "$CO" >"$WORK/snap1"

# A second apply: the run is closed.
"$TKBOX" apply p1 >"$WORK/apply2.out" 2>&1
rc=$?
check "second apply: refused (exit $rc)" test "$rc" -eq 1
check "second apply: the message says the run is closed ($(head -c 200 "$WORK/apply2.out"))" \
	grep -qiE 'closed|applied' "$WORK/apply2.out"
check "second apply: nothing written" cmp -s "$WORK/snap1" <(pt_snapshot "$CO")

# The records: export, verify, one Write decision per file with its content hash, completions with written_paths.
"$TKBOX" export p1 -o "$WORK/p1.tkb" >"$WORK/export.out" 2>&1
check "export: exit 0 ($(head -c 200 "$WORK/export.out"))" test $? -eq 0
"$TKBOX" verify "$WORK/p1.tkb" --trust "$WORK/p1.trust.json" >"$WORK/verify.out" 2>&1
check "verify: VERIFIED" grep -q 'Integrity: VERIFIED' "$WORK/verify.out"
pt_bundle_writes "$WORK/p1.tkb" >"$WORK/writes.jsonl"
n=$(grep -c . "$WORK/writes.jsonl")
check "bundle: one Write decision per file ($n of $NFILES)" test "$n" -eq "$NFILES"
wp=$(jq -r '.result.written_paths[]?' "$WORK/writes.jsonl" | sort | tr '\n' ' ')
check "bundle: the completions' written_paths are exactly the files ($wp)" \
	test "$wp" = "$(tr ' ' '\n' <<<"$CHANGED" | sort | tr '\n' ' ')"
bad=$(jq -c 'select(.result.ok != true or (.result.written_paths | length) != 1 or .decision != "flag")' "$WORK/writes.jsonl" | head -2)
check "bundle: every Write decided (flag) and completed ok with one written path (${bad:-all})" test -z "$bad"
i=0
for p in $CHANGED; do
	i=$((i + 1))
	rules=$(jq -r --arg p "$p" 'select(.result.written_paths == [$p]) | .rule_ids | join(" ")' "$WORK/writes.jsonl")
	want="PT-FP"
	if [[ " $DELETED " == *" $p "* ]]; then
		want+=" PT-DEL"
	else
		sha=$(pt_sha256 "$CO/$p")
		# The rule PT-C<i> names the expected content; it must be the written file's too.
		[ "$sha" = "$(pt_sha256 "$EXP/$p")" ] && want+=" PT-C$i"
		case $(pt_manifest "$CO" | jq -r --arg p "$p" 'select(.path == $p) | .mode') in
		100644) want+=" PT-M644" ;;
		100755) want+=" PT-M755" ;;
		120000) want+=" PT-M120" ;;
		esac
	fi
	got=$(tr ' ' '\n' <<<"$rules" | grep '^PT-' | sort | tr '\n' ' ')
	want=$(tr ' ' '\n' <<<"$want" | sort | tr '\n' ' ')
	check "bundle: $p's Write decision: file_path, content_sha256 = sha256sum of the written file, mode ($got)" \
		test "$got" = "$want"
done
pt_bundle_events "$WORK/p1.tkb" | jq -c 'select(.type == "review" and .data.reviewer == "tkbox.patch") | .data.verdict' \
	>"$WORK/patch-obs.jsonl"
check "bundle: the tkbox.patch record names the saved patch (sha256, $NFILES files, status saved)" \
	test "$(jq -r '"\(.sha256) \(.files) \(.status)"' "$WORK/patch-obs.jsonl")" = "$psha $NFILES saved"
read -r dec res obs gaps reason kinds < <(bundle_counts "$WORK/p1.tkb")
check "bundle: the run closed as applied ($reason)" grep -q applied <<<"$reason"
check "bundle: a tkbox.patch observation (${kinds})" grep -q 'tkbox.patch=1' <<<"$kinds"
echo "# $dec decisions, $res results, $obs observations ($kinds), $gaps gaps, closed: $reason"
check "events: apply.written once per file" \
	test "$(grep -c '"event":"apply.written"' "$BOXDIR/events.jsonl" 2>/dev/null)" -eq "$NFILES"

echo "# patch-e2e in $(elapsed "$T0") s"
echo "1..$((pass + fail))"
[ "$fail" -eq 0 ]
