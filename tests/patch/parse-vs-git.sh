#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# meson test patch-parse-vs-git: the strict parser against git itself.
#
#   parse-vs-git.sh BUILD_ROOT CORPUS_DIR
#
# 1. Random small trees (text, binary, modes, symlinks, deletions, creations,
#    names with spaces, tabs, quotes, backslashes, newlines, UTF-8 and
#    non-UTF-8 bytes): real `git diff --binary --full-index --no-renames` of a
#    change; `tkbox-host patch check` must accept it (it is git's own form),
#    and `patch check --git` must accept it too (git reads the same paths,
#    binary flags, creations, deletions, modes and counts).
# 2. Every file of the fuzz corpus: whatever `patch check` accepts,
#    `patch check --git` accepts too.
#
# PATCH_VS_GIT_ROUNDS (default 8) and PATCH_VS_GIT_SEED choose the trees; a
# failure prints the seed and keeps the patch.
set -euo pipefail

build=${1:?usage: parse-vs-git.sh BUILD_ROOT CORPUS_DIR}
corpus=${2:?usage: parse-vs-git.sh BUILD_ROOT CORPUS_DIR}
tkbox="$build/tkbox-host"
rounds=${PATCH_VS_GIT_ROUNDS:-8}
seed=${PATCH_VS_GIT_SEED:-$(( $(date +%s) % 100000 ))}
RANDOM=$seed

command -v git >/dev/null || { echo "git not found: skipped"; exit 77; }
[ -x "$tkbox" ] || { echo "no $tkbox" >&2; exit 1; }

work=$(mktemp -d /tmp/patch-vs-git.XXXXXX)
keep=0
cleanup() { if [ "$keep" = 0 ]; then rm -rf "$work"; else echo "kept: $work" >&2; fi; }
trap cleanup EXIT

# The test's own git: no config of the user's or the system's.
export HOME="$work/home" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null LC_ALL=C
mkdir -p "$HOME"

names=(
	"a.txt" "sp ace.txt" $'t\tab' 'q"uote' $'caf\xc3\xa9.md' "dir/sub/x.c" "dir/y z" $'\xff\xfe.bin'
	"-dash" 'back\slash' $'nl\nname' "deep/a/b/c/d.txt" "x" "dir/sub/z" $'\x01ctl' "tail " "UPPER/F"
	"sp/ace dir/f g"
)

rnd() { echo $(( RANDOM % $1 )); }

write_content() { # path kind
	local f=$1 kind=$2
	mkdir -p "$(dirname -- "$f")"
	case $kind in
	text)
		local n i
		n=$(( $(rnd 40) + 1 ))
		: >"$f"
		for ((i = 0; i < n; i++)); do
			if [ "$(rnd 5)" = 0 ]; then echo "line $i $RANDOM" >>"$f"; else echo "line $i" >>"$f"; fi
		done
		# sometimes no final newline, sometimes a CR
		case $(rnd 6) in
		0) printf 'last %d' "$RANDOM" >>"$f" ;;
		1) printf 'crlf %d\r\n' "$RANDOM" >>"$f" ;;
		*) ;;
		esac
		;;
	empty) : >"$f" ;;
	binary)
		{ printf '\000'; head -c $(( $(rnd 3000) + 1 )) /dev/urandom; } >"$f"
		;;
	*) echo "bad kind $kind" >&2; exit 1 ;;
	esac
}

fail() {
	echo "FAIL (seed $seed): $*" >&2
	keep=1
	exit 1
}

check_pair() { # patch label must_accept
	local p=$1 label=$2 must=$3 out rc=0
	out=$("$tkbox" patch check "$p" 2>&1) || rc=$?
	if [ $rc -ne 0 ]; then
		[ "$must" = 1 ] && fail "$label: patch check refused git's own output: $out ($p)"
		[ $rc -eq 1 ] || fail "$label: patch check exit $rc: $out ($p)"
		return 1
	fi
	rc=0
	out=$("$tkbox" patch check --git "$p" 2>&1) || rc=$?
	[ $rc -eq 0 ] || fail "$label: patch check accepts it but patch check --git refuses it: $out ($p)"
	return 0
}

accepted=0
for ((round = 0; round < rounds; round++)); do
	r="$work/r$round"
	git init -q "$r"
	git -C "$r" config user.email t@t
	git -C "$r" config user.name t
	declare -A kind=()
	# the base tree
	for n in "${names[@]}"; do
		[ "$(rnd 2)" = 0 ] || continue
		# a name may not be both a file and a directory in one tree
		skip=0
		for k in "${!kind[@]}"; do
			case "$k/" in "$n/"*) skip=1 ;; esac
			case "$n/" in "$k/"*) skip=1 ;; esac
		done
		[ $skip = 0 ] || continue
		case $(rnd 6) in
		0) kind[$n]=link; mkdir -p "$(dirname -- "$r/$n")"; ln -s "target-$RANDOM" "$r/$n" ;;
		1) kind[$n]=binary; write_content "$r/$n" binary ;;
		2) kind[$n]=empty; write_content "$r/$n" empty ;;
		*) kind[$n]=text; write_content "$r/$n" text ;;
		esac
		[ "${kind[$n]}" != link ] && [ "$(rnd 4)" = 0 ] && chmod +x "$r/$n"
	done
	git -C "$r" add -A
	git -C "$r" commit -qm base --allow-empty
	# the change: modify, chmod, delete, create (never a type change: the producer leaves those out)
	for n in "${!kind[@]}"; do
		case $(rnd 8) in
		0 | 1)
			if [ "${kind[$n]}" = link ]; then ln -sfn "moved-$RANDOM" "$r/$n"; else write_content "$r/$n" "${kind[$n]/empty/text}"; fi
			;;
		2) rm -f "$r/$n" ;;
		3) [ "${kind[$n]}" != link ] && chmod a-x,u+x "$r/$n" ;;
		4) [ "${kind[$n]}" != link ] && { chmod -x "$r/$n"; write_content "$r/$n" "${kind[$n]}"; } ;;
		*) ;;
		esac
	done
	for n in "${names[@]}"; do
		[ -z "${kind[$n]+x}" ] || continue
		[ "$(rnd 4)" = 0 ] || continue
		skip=0
		for k in "${!kind[@]}"; do
			case "$k/" in "$n/"*) skip=1 ;; esac
			case "$n/" in "$k/"*) skip=1 ;; esac
		done
		[ $skip = 0 ] || continue
		kind[$n]=new
		case $(rnd 5) in
		0) mkdir -p "$(dirname -- "$r/$n")"; ln -s "new-$RANDOM" "$r/$n" ;;
		1) write_content "$r/$n" binary ;;
		2) write_content "$r/$n" empty ;;
		*) write_content "$r/$n" text ;;
		esac
	done
	unset kind
	git -C "$r" add -A
	p="$work/p$round.diff"
	git -C "$r" diff --cached --binary --full-index --no-renames >"$p"
	check_pair "$p" "round $round" 1
	accepted=$((accepted + 1))
	rm -rf "$r"
done

corpus_n=0
corpus_ok=0
for f in "$corpus"/*; do
	[ -f "$f" ] || continue
	corpus_n=$((corpus_n + 1))
	if check_pair "$f" "corpus $(basename -- "$f")" 0; then
		corpus_ok=$((corpus_ok + 1))
	fi
done
[ $corpus_n -gt 0 ] || fail "no corpus files in $corpus"
echo "ok: $accepted git patches (seed $seed) and $corpus_ok of $corpus_n corpus files accepted by both readings"
