#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# patch-prepare: the apply prepare child (`tkbox-host apply-prepare`) on real
# git checkouts with real patches (git diff --binary --full-index), no VM.
# Each case checks one step's rule, and every case checks that the checkout
# (its .git included) is byte for byte what it was before.
#
# usage: prepare.sh BUILD_ROOT
set -euo pipefail

build=${1:?usage: prepare.sh BUILD_ROOT}
host=$(cd "$build" && pwd)/tkbox-host
[ -x "$host" ] || { echo "no $host" >&2; exit 1; }
if ! command -v git >/dev/null || ! command -v jq >/dev/null; then
	echo "needs git and jq" >&2
	exit 77
fi

work=$(mktemp -d /tmp/tkbox-prepare.XXXXXX)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
# git for the test's own setup: no user config of whoever runs the test
export HOME="$work/home" GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.invalid \
	GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.invalid
unset XDG_CONFIG_HOME GIT_DIR GIT_WORK_TREE
mkdir -p "$HOME"
git config --global init.defaultBranch main
git config --global core.autocrlf false
empty_home="$work/empty-home"
mkdir -p "$empty_home"

fails=0
n=0
fail() {
	echo "FAIL: $*" >&2
	fails=$((fails + 1))
}
ok() { echo "ok: $*"; }

# Every entry of a tree (.git included): path, type, mode, size, mtime, and each file's sha256 / link target.
snapshot() {
	(cd "$1" && find . -printf '%p %y %m %s %T@\n' | LC_ALL=C sort &&
		find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum &&
		find . -type l -printf '%p -> %l\n' | LC_ALL=C sort)
}

# A base checkout: text, an executable, a binary file, a symlink, a file to delete.
make_base() {
	local d=$1
	mkdir -p "$d"
	git -C "$d" init -q
	printf 'line 1\nline 2\nline 3\nline 4\nline 5\n' >"$d/a.txt"
	printf '#!/bin/sh\necho hi\n' >"$d/s.sh"
	printf 'gone\n' >"$d/c.txt"
	printf '\x00\x01\x02binary\xff\n' >"$d/bin.dat"
	mkdir -p "$d/lib"
	printf 'lib\n' >"$d/lib/x.c"
	ln -s a.txt "$d/link"
	git -C "$d" add -A
	git -C "$d" commit -q -m base
}

# A patch from a copy of $1 changed by the function $2 (run in the copy): git diff --binary --full-index.
make_patch() {
	local src=$1 fn=$2 out=$3 mk
	mk=$(mktemp -d "$work/mk.XXXXXX")
	git clone -q "$src" "$mk/r"
	(cd "$mk/r" && "$fn")
	git -C "$mk/r" add -A
	git -C "$mk/r" diff --cached --binary --full-index --no-renames >"$out"
	rm -rf "$mk"
}

# prepare NAME CHECKOUT PATCH [args...]: runs the child; sets $plan (file), $rc; checks the checkout unchanged.
prepare() {
	local name=$1 co=$2 patch=$3 scratch before after
	shift 3
	n=$((n + 1))
	scratch=$(mktemp -d "$work/scratch.XXXXXX")
	plan="$work/plan.$n.json"
	before=$(snapshot "$co")
	set +e
	HOME=${CHILD_HOME:-$empty_home} "$host" apply-prepare "${PREPARE_MODE:---json}" --patch "$patch" --checkout "$co" \
		--scratch "$scratch" "$@" >"$plan" 2>"$work/err.$n"
	rc=$?
	set -e
	after=$(snapshot "$co")
	if [ "$before" != "$after" ]; then
		fail "$name: the checkout changed"
		diff <(echo "$before") <(echo "$after") >&2 || true
	fi
}

expect_refused() {
	local name=$1 rule=$2 path=${3:-}
	if [ "$rc" != 1 ]; then
		fail "$name: exit $rc, want 1 (refused)"
		cat "$plan" "$work/err.$n" >&2
		return
	fi
	if [ "$(jq -r .rule "$plan")" != "$rule" ]; then
		fail "$name: rule $(jq -r .rule "$plan"), want $rule: $(jq -r .error "$plan")"
		return
	fi
	if [ -n "$path" ] && [ "$(jq -r .path "$plan")" != "$path" ]; then
		fail "$name: path $(jq -r .path "$plan"), want $path"
		return
	fi
	ok "$name: refused ($rule): $(jq -r .error "$plan")"
}

expect_planned() {
	local name=$1
	if [ "$rc" != 0 ] || [ "$(jq -r '.error // empty' "$plan")" != "" ]; then
		fail "$name: exit $rc, not planned: $(cat "$plan" "$work/err.$n")"
		return 1
	fi
	ok "$name: planned $(jq '.files | length' "$plan") files"
}

sha_of() { # the sha256 of a file's bytes or a link's target
	if [ -L "$1" ]; then printf '%s' "$(readlink "$1")" | sha256sum | cut -d' ' -f1; else sha256sum <"$1" | cut -d' ' -f1; fi
}
mode_of() {
	if [ -L "$1" ]; then echo 120000; elif [ -x "$1" ]; then echo 100755; else echo 100644; fi
}

# ---- 1. a plain patch: the plan's results are what git apply gives in a real clone ----
base="$work/base"
make_base "$base"
change_plain() {
	printf 'line 1\nline TWO\nline 3\nline 4\nline 5\nline 6\n' >a.txt
	chmod +x a.txt
	rm c.txt
	mkdir -p new/dir
	printf 'new file\n' >new/dir/b.txt
	printf '\x00\x01\x02BINARY\xfe\x00\n' >bin.dat
	rm link
	ln -s lib/x.c link
	ln -s s.sh link2
	printf 'echo more\n' >>s.sh
}
make_patch "$base" change_plain "$work/plain.diff"
prepare plain "$base" "$work/plain.diff"
if expect_planned plain; then
	clone="$work/clone"
	git clone -q "$base" "$clone"
	git -C "$clone" apply "$work/plain.diff"
	want_paths=$(printf '%s\n' a.txt bin.dat c.txt link link2 new/dir/b.txt s.sh)
	got_paths=$(jq -r '.files[].path' "$plan" | LC_ALL=C sort)
	[ "$got_paths" = "$want_paths" ] || fail "plain: paths $got_paths"
	for p in $want_paths; do
		f=$(jq -c --arg p "$p" '.files[] | select(.path == $p)' "$plan")
		if [ -e "$clone/$p" ] || [ -L "$clone/$p" ]; then
			[ "$(jq -r .sha256 <<<"$f")" = "$(sha_of "$clone/$p")" ] || fail "plain: $p sha256 differs from git apply's"
			[ "$(jq -r .mode <<<"$f")" = "$(mode_of "$clone/$p")" ] || fail "plain: $p mode $(jq -r .mode <<<"$f")"
			if [ ! -L "$clone/$p" ]; then
				[ "$(jq -r .size <<<"$f")" = "$(stat -c %s "$clone/$p")" ] || fail "plain: $p size"
			fi
		else
			[ "$(jq -r '.op + " " + (.sha256 // "null")' <<<"$f")" = "delete null" ] || fail "plain: $p not a delete"
		fi
		# the pre state is the checkout's entry now
		if [ -e "$base/$p" ] || [ -L "$base/$p" ]; then
			[ "$(jq -r .pre.sha256 <<<"$f")" = "$(sha_of "$base/$p")" ] || fail "plain: $p pre sha256"
			[ "$(jq -r .pre.mode <<<"$f")" = "$(mode_of "$base/$p")" ] || fail "plain: $p pre mode"
		else
			[ "$(jq -r .pre.type <<<"$f")" = absent ] || fail "plain: $p pre not absent"
		fi
	done
	[ "$(jq -r '.files[] | select(.path == "bin.dat") | .binary' "$plan")" = true ] || fail "plain: bin.dat not binary"
	[ "$(jq -r .patch_sha256 "$plan")" = "$(sha256sum <"$work/plain.diff" | cut -d' ' -f1)" ] ||
		fail "plain: patch_sha256"
	[ "$(jq -r .checkout "$plan")" = "$base" ] || fail "plain: checkout"
	ok "plain: every result and pre state equals git apply's in a clone and the checkout's"
fi
# the human form says the same
HOME=$empty_home "$host" apply-prepare --patch "$work/plain.diff" --checkout "$base" \
	--scratch "$(mktemp -d "$work/scratch.XXXXXX")" | grep -q '7 files planned' || fail "plain: human summary"

# ---- 2. the checkout changed since the patch was made ----
changed="$work/changed"
git clone -q "$base" "$changed"
printf 'line 1\nline 2 edited by the user\nline 3\nline 4\nline 5\n' >"$changed/a.txt"
prepare changed "$changed" "$work/plain.diff"
expect_refused changed git-apply

# ---- 3. not a git checkout ----
plain_dir="$work/not-git"
mkdir -p "$plain_dir"
cp "$base/a.txt" "$plain_dir/"
prepare not-git "$plain_dir" "$work/plain.diff"
expect_refused not-git git-dir-unknown

# ---- 4. the git dir (a separate git dir inside the checkout) ----
sep="$work/sep"
git init -q --separate-git-dir="$sep/co/gitstore" "$sep/co" >/dev/null
(cd "$sep/co" && printf 'x\n' >a.txt && git add a.txt && git commit -q -m x)
change_gitstore() {
	mkdir -p gitstore/info
	printf '* filter=evil\n' >gitstore/info/attributes
}
mkbase4="$work/mk4"
git init -q "$mkbase4" && (cd "$mkbase4" && printf 'x\n' >a.txt && git add a.txt && git commit -q -m x)
make_patch "$mkbase4" change_gitstore "$work/gitstore.diff"
prepare git-dir "$sep/co" "$work/gitstore.diff"
expect_refused git-dir git-dir gitstore/info/attributes

# ---- 5. a repo-local core.hooksPath inside the checkout ----
hk="$work/hk"
git clone -q "$base" "$hk"
git -C "$hk" config core.hooksPath myhooks
change_hooks() {
	mkdir -p myhooks
	printf '#!/bin/sh\n' >myhooks/pre-commit
}
make_patch "$base" change_hooks "$work/hooks.diff"
prepare hooks-local "$hk" "$work/hooks.diff"
expect_refused hooks-local hooks-path myhooks/pre-commit
# control: the same patch on a checkout without that setting is planned
git -C "$hk" config --unset core.hooksPath
prepare hooks-local-control "$hk" "$work/hooks.diff"
expect_planned hooks-local-control || true

# ---- 6. a global core.hooksPath inside the checkout (the child's HOME) ----
ghome="$work/ghome"
mkdir -p "$ghome"
printf '[core]\n\thooksPath = %s/myhooks\n' "$hk" >"$ghome/.gitconfig"
CHILD_HOME=$ghome prepare hooks-global "$hk" "$work/hooks.diff"
expect_refused hooks-global hooks-path myhooks/pre-commit
# ... through an include and a ~ path too
mkdir -p "$ghome/inc"
printf '[include]\n\tpath = inc/more\n' >"$ghome/.gitconfig"
printf '[core]\n\thooksPath = ~/../hk/myhooks\n' >"$ghome/inc/more"
CHILD_HOME=$ghome prepare hooks-global-include "$hk" "$work/hooks.diff"
expect_refused hooks-global-include hooks-path myhooks/pre-commit

# ... and through an includeIf for that checkout's git dir
printf '[includeIf "gitdir:%s/"]\n\tpath = inc/more\n' "$hk" >"$ghome/.gitconfig"
CHILD_HOME=$ghome prepare hooks-global-includeif "$hk" "$work/hooks.diff"
expect_refused hooks-global-includeif hooks-path myhooks/pre-commit

# ---- 6b. as the daemon runs it (apply_prepare_exec): the runner passes the daemon's HOME through ----
printf '[core]\n\thooksPath = %s/myhooks\n' "$hk" >"$ghome/.gitconfig"
CHILD_HOME=$ghome PREPARE_MODE=--subprocess prepare hooks-global-daemon "$hk" "$work/hooks.diff"
expect_refused hooks-global-daemon hooks-path myhooks/pre-commit
PREPARE_MODE=--subprocess prepare plain-daemon "$base" "$work/plain.diff"
if expect_planned plain-daemon; then
	[ "$(jq -c .files "$plan")" = "$(jq -c .files "$work/plan.1.json")" ] || fail "plain-daemon: another plan"
fi

# ---- 7. a symlinked parent ----
sl="$work/sl"
git clone -q "$base" "$sl"
change_in_lib() { printf 'lib changed\n' >lib/x.c; }
make_patch "$base" change_in_lib "$work/lib.diff"
mv "$sl/lib" "$sl/real-lib"
ln -s real-lib "$sl/lib"
prepare symlink-parent "$sl" "$work/lib.diff"
expect_refused symlink-parent symlink-parent lib/x.c
# the path itself a directory
dd="$work/dirpath"
git clone -q "$base" "$dd"
change_c() { printf 'changed\n' >c.txt; }
make_patch "$base" change_c "$work/c.diff"
rm "$dd/c.txt" && mkdir "$dd/c.txt"
prepare path-is-dir "$dd" "$work/c.diff"
expect_refused path-is-dir symlink-parent c.txt

# ---- 8. sensitive: refused without the flag, planned with it ----
change_ci() {
	mkdir -p .github/workflows
	printf 'on: push\n' >.github/workflows/x.yml
	printf 'ok\n' >>a.txt
}
make_patch "$base" change_ci "$work/ci.diff"
prepare sensitive "$base" "$work/ci.diff"
expect_refused sensitive sensitive .github/workflows/x.yml
jq -r .error "$plan" | grep -q -- '--allow-sensitive (Table 6: CI and automation)' || fail "sensitive: message"
prepare sensitive-allowed "$base" "$work/ci.diff" --allow-sensitive
if expect_planned sensitive-allowed; then
	[ "$(jq -r '.files[] | select(.path == ".github/workflows/x.yml") | .sensitive' "$plan")" = "CI and automation" ] ||
		fail "sensitive-allowed: kind"
	[ "$(jq -r '.files[] | select(.path == "a.txt") | .sensitive' "$plan")" = null ] || fail "sensitive-allowed: a.txt"
fi

# ---- 9. ignored: a new ignored file left out with a notice, a change to one refused ----
ig="$work/ig"
git clone -q "$base" "$ig"
printf '*.log\n' >"$ig/.git/info/exclude"
printf 'old\n' >"$ig/old.log"
change_newlog() {
	printf 'new log\n' >new.log
	printf 'more\n' >>a.txt
}
make_patch "$base" change_newlog "$work/newlog.diff"
prepare ignored-create "$ig" "$work/newlog.diff"
if expect_planned ignored-create; then
	[ "$(jq -r '.files[].path' "$plan")" = a.txt ] || fail "ignored-create: files $(jq -c '.files' "$plan")"
	[ "$(jq -r '.notices[0][0]' "$plan")" = new.log ] || fail "ignored-create: no notice for new.log"
	# the result of a.txt was built from the kept section alone
	clone="$work/clone-ig"
	git clone -q "$base" "$clone"
	printf 'more\n' >>"$clone/a.txt"
	[ "$(jq -r '.files[0].sha256' "$plan")" = "$(sha_of "$clone/a.txt")" ] || fail "ignored-create: a.txt result"
fi
mkold="$work/mkold"
git clone -q "$base" "$mkold"
printf 'old\n' >"$mkold/old.log"
git -C "$mkold" add -f old.log && git -C "$mkold" commit -q -m old
change_oldlog() { printf 'changed\n' >old.log; }
make_patch "$mkold" change_oldlog "$work/oldlog.diff"
prepare ignored-modify "$ig" "$work/oldlog.diff"
expect_refused ignored-modify ignored old.log
# a global core.excludesFile counts (passed back with -c)
ig2="$work/ig2"
git clone -q "$base" "$ig2"
printf 'old\n' >"$ig2/old.log"
printf '*.log\n' >"$work/global-ignore"
printf '[core]\n\texcludesFile = %s\n' "$work/global-ignore" >"$ghome/.gitconfig"
CHILD_HOME=$ghome prepare ignored-global "$ig2" "$work/oldlog.diff"
expect_refused ignored-global ignored old.log

# ---- 10. the repository's config names programs: none of them runs ----
pr="$work/pr"
git clone -q "$base" "$pr"
marker="$work/marker"
git -C "$pr" config core.fsmonitor "touch $marker.fsmonitor; false"
git -C "$pr" config core.pager "touch $marker.pager; cat"
git -C "$pr" config diff.external "touch $marker.diff"
git -C "$pr" config core.hooksPath "$work/hooks-that-run"
mkdir -p "$work/hooks-that-run"
for h in post-index-change reference-transaction post-checkout; do
	printf '#!/bin/sh\ntouch %s.hook\n' "$marker" >"$work/hooks-that-run/$h"
	chmod +x "$work/hooks-that-run/$h"
done
# control: the fsmonitor setting does run where git is not told otherwise
git -C "$pr" status >/dev/null 2>&1 || true
if [ -e "$marker.fsmonitor" ]; then
	ok "programs-control: git status ran the repository's fsmonitor"
else
	echo "note: git status did not run core.fsmonitor here; the check below still holds" >&2
fi
rm -f "$marker".*
prepare programs "$pr" "$work/plain.diff"
expect_planned programs || true
for m in "$marker".*; do
	[ -e "$m" ] && fail "programs: $m appeared: the repository's config ran a program"
done
ok "programs: no fsmonitor, pager, external diff or hook ran"

# ---- 11. a checkout another user owns: git refuses it unless the user's global safe.directory lists it ----
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
	own="$work/owned"
	git clone -q "$base" "$own"
	chown -R nobody "$own"
	prepare safe-directory-unlisted "$own" "$work/plain.diff"
	expect_refused safe-directory-unlisted git-dir-unknown
	printf '[safe]\n\tdirectory = %s\n' "$own" >"$ghome/.gitconfig"
	CHILD_HOME=$ghome prepare safe-directory-listed "$own" "$work/plain.diff"
	expect_planned safe-directory-listed || true
else
	echo "skip: safe.directory (needs root to give a checkout to another user)"
fi

echo "$n prepare runs, $fails failure(s)"
[ "$fails" = 0 ]
