#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tkbox completion bash (issue 15): the script tkbox-host prints is contrib/completion/tkbox.bash byte for byte, and
# it cannot drift from the code: every command of `tkbox-host --help`, every long option of a command's source
# (src/cli/cmd-*.c, src/patch/cmd-patch-check.c) and every --allow preset (src/egress/preset.c) is in it. Then
# bash itself completes: the script is sourced, COMP_WORDS/COMP_CWORD set, _tkbox called, COMPREPLY checked
# (commands, flags, option values, verbs, box names and approval ids from a stand-in tkbox that answers --json
# as the real one prints it; tests/cli/doctor.sh does box names against a real daemon).
# usage: completion.sh TKBOX_HOST SOURCE_DIR
HOST=${1:?usage: completion.sh TKBOX_HOST SOURCE_DIR}
SRC=${2:?usage: completion.sh TKBOX_HOST SOURCE_DIR}
WORK=$(mktemp -d /tmp/tkbox-completion.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
echo "TAP version 13"
pass=0
fail=0
ok() { echo "ok - $1"; pass=$((pass + 1)); }
notok() {
	echo "not ok - $1"
	shift
	for l in "$@"; do echo "#   $l"; done
	fail=$((fail + 1))
}

# ---- the embedded script is the file
if "$HOST" completion bash >"$WORK/printed.bash" && cmp -s "$WORK/printed.bash" "$SRC/contrib/completion/tkbox.bash"; then
	ok "tkbox completion bash prints contrib/completion/tkbox.bash"
else
	notok "tkbox completion bash prints contrib/completion/tkbox.bash" "$(diff "$WORK/printed.bash" "$SRC/contrib/completion/tkbox.bash" | head -5)"
fi
"$HOST" completion zsh >/dev/null 2>"$WORK/err"
rc=$?
if [ $rc = 2 ] && grep -q 'usage: tkbox completion bash' "$WORK/err"; then ok "another shell: usage, exit 2"; else notok "another shell: usage, exit 2" "rc $rc"; fi
bash -n "$WORK/printed.bash" && ok "the script parses (bash -n)" || notok "the script parses (bash -n)"

# shellcheck disable=SC1090
source "$WORK/printed.bash"

# ---- drift: commands
# Internal commands (the daemon's children) are not for people: never completed.
internal=" apply-prepare apply-write "
missing=""
for c in $("$HOST" --help | awk '/^commands:/ { on = 1; next } on && NF { print $1 }'); do
	[[ $internal == *" $c "* ]] && continue
	[[ " $_tkbox_commands " == *" $c "* ]] || missing="$missing $c"
done
[ -z "$missing" ] && ok "every command of tkbox-host --help is completed" ||
	notok "every command of tkbox-host --help is completed" "missing from contrib/completion/tkbox.bash:$missing"
extra=""
help_cmds=" $("$HOST" --help | awk '/^commands:/ { on = 1; next } on && NF { print $1 }' | tr '\n' ' ') "
for c in $_tkbox_commands; do
	[[ $help_cmds == *" $c "* ]] || extra="$extra $c"
done
[ -z "$extra" ] && ok "no completed command is unknown to tkbox-host" || notok "no completed command is unknown to tkbox-host" "not in --help:$extra"

# ---- drift: each command's long options, read from its getopt table
# Options only the daemon passes to its children are not completed.
hidden=" subprocess secrets-fd "
missing=""
for f in "$SRC"/src/cli/cmd-*.c "$SRC"/src/patch/cmd-patch-check.c; do
	base=$(basename "$f" .c)
	cmd=${base#cmd-}
	case $cmd in
	patch-check) cmd="patch" ;;
	esac
	[[ " $_tkbox_commands " == *" $cmd "* ]] || continue
	flags=" $(_tkbox_flags "$cmd") "
	while read -r name arg; do
		[[ $hidden == *" $name "* ]] && continue
		[ "$cmd" = workspace ] && [ "$name" = secret ] && continue # with --secrets-fd: the daemon's
		want="--$name"
		[ "$arg" = required_argument ] && want="--$name="
		[[ $flags == *" $want "* ]] || missing="$missing $cmd:$want"
	done < <(grep -o '{ "[a-z][a-z0-9-]*", *[a-z_]*_argument' "$f" | sed 's/{ "\([a-z0-9-]*\)", *\([a-z_]*\)/\1 \2/')
done
# The hand-parsed ones (verify, view, patch check): each strcmp(argv[i], "--NAME"); a value when the source also
# reads "--NAME=".
for f in "$SRC"/src/cli/cmd-*.c "$SRC"/src/patch/cmd-patch-check.c; do
	cmd=$(basename "$f" .c)
	cmd=${cmd#cmd-}
	[ "$cmd" = patch-check ] && cmd="patch"
	[[ " $_tkbox_commands " == *" $cmd "* ]] || continue
	flags=" $(_tkbox_flags "$cmd") "
	for name in $(grep -o 'strcmp(argv\[[a-z]*\], "--[a-z0-9-]*")' "$f" | sed 's/.*"--\(.*\)")/\1/' | sort -u); do
		want="--$name"
		grep -q "\"--$name=\"" "$f" && want="--$name="
		[[ $flags == *" $want "* ]] || missing="$missing $cmd:$want"
	done
done
[ -z "$missing" ] && ok "every long option in a command's source is completed" ||
	notok "every long option in a command's source is completed" "missing:$missing"

# ---- drift: presets
presets=$(sed -n '/^static const struct preset presets\[\] = {/,/^};/p' "$SRC/src/egress/preset.c" |
	grep -o '^	{ "[a-z0-9-]*"' | sed 's/.*"\(.*\)"/\1/' | tr '\n' ' ')
missing=""
for p in $presets; do [[ " $_tkbox_presets " == *" $p "* ]] || missing="$missing $p"; done
[ -n "$presets" ] && [ -z "$missing" ] && ok "every --allow preset is completed ($presets)" ||
	notok "every --allow preset is completed" "presets: '$presets' missing:$missing"

# ---- bash completes
# complete WORDS...: COMP_WORDS as typed (the last word is the one completed); prints COMPREPLY sorted, one line.
complete_words() {
	COMP_WORDS=("$@")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMPREPLY=()
	_tkbox
	printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' ' | sed 's/ $//'
}
expect() { # NAME WANT WORDS...
	local name=$1 want=$2 got
	shift 2
	got=$(complete_words "$@")
	[ "$got" = "$want" ] && ok "$name" || notok "$name" "words: $*" "want: '$want'" "got:  '$got'"
}
expect_has() { # NAME WORD WORDS...: COMPREPLY holds WORD
	local name=$1 want=$2 got
	shift 2
	got=" $(complete_words "$@") "
	[[ $got == *" $want "* ]] && ok "$name" || notok "$name" "words: $*" "want $want in:$got"
}

expect_has "tkbox <TAB> offers run" run tkbox ""
expect_has "tkbox <TAB> offers doctor" doctor tkbox ""
expect "tkbox ru<TAB>" "run" tkbox ru
expect "tkbox ap<TAB>" "apply approvals approve" tkbox ap
expect "tkbox run --im<TAB>" "--image" tkbox run --im
expect "tkbox run --image x --ins<TAB>" "--inspect" tkbox run --image x --ins
expect "tkbox run --inspect <TAB>" "all none" tkbox run --inspect ""
expect "tkbox daemon --accel <TAB>" "auto kvm tcg" tkbox daemon --accel ""
expect "tkbox daemon --accel=<TAB> (split at =)" "auto kvm tcg" tkbox daemon --accel = ""
expect "tkbox daemon --accel=t<TAB>" "tcg" tkbox daemon --accel = t
expect "tkbox run --allow deb<TAB>" "debian" tkbox run --allow deb
expect "tkbox run --allow github,op<TAB>" "github,openai" tkbox run --allow github,op
expect "tkbox images <TAB>" "ls prune pull resolve rm" tkbox images ""
expect "tkbox images --json l<TAB>" "ls" tkbox images --json l
expect "tkbox completion <TAB>" "bash" tkbox completion ""
expect "tkbox version --<TAB>" "--json" tkbox version --
expect "tkbox doctor --<TAB>" "--guest --help --json --signer --state-dir" tkbox doctor --
expect "tkbox ls --<TAB>" "--json --state-dir" tkbox ls --
mkdir -p "$WORK/d/sub" && touch "$WORK/d/a.tkb" "$WORK/d/b.txt"
expect "tkbox verify <TAB> offers bundles and directories" "$WORK/d/a.tkb $WORK/d/sub" tkbox verify "$WORK/d/"
expect "tkbox run --workspace <TAB> offers directories" "$WORK/d/sub" tkbox run --workspace "$WORK/d/s"

# Box names and approval ids from a stand-in tkbox whose --json is what cmd-ls.c and cmd-approvals.c print
# (jansson, JSON_INDENT(2) | JSON_SORT_KEYS; python's indent=2, sort_keys=True writes the same text).
cat >"$WORK/tkbox" <<EOF
#!/bin/sh
case "\$1 \$2" in
"ls --json") python3 -c 'import json; print(json.dumps([{"name": "alpha", "state": "running", "env": [{"name": "NOTABOX"}]}, {"name": "beta", "state": "stopped"}], indent=2, sort_keys=True))' ;;
"approvals --json") python3 -c 'import json; print(json.dumps({"approvals": [{"id": "ap-0123456789ab", "box": "alpha", "target": "x.example:443"}, {"id": "ap-ba9876543210", "box": "beta", "target": "y.example:443"}]}, indent=2, sort_keys=True))' ;;
*) exit 2 ;;
esac
EOF
chmod +x "$WORK/tkbox"
expect "tkbox exec <TAB> offers the boxes (not a nested name)" "alpha beta" "$WORK/tkbox" exec ""
expect "tkbox stop b<TAB>" "beta" "$WORK/tkbox" stop b
expect "tkbox exec alpha <TAB> offers no box again" "" "$WORK/tkbox" exec alpha ""
expect "tkbox export --output f.tkb <TAB> skips the option's value" "alpha beta" "$WORK/tkbox" export --output f.tkb ""
expect "tkbox approve <TAB> offers the pending ids" "ap-0123456789ab ap-ba9876543210" "$WORK/tkbox" approve ""
expect "tkbox reject ap-b<TAB>" "ap-ba9876543210" "$WORK/tkbox" reject ap-b
expect "no daemon: no box names, no error" "" /nonexistent/tkbox exec ""

echo "1..$((pass + fail))"
echo "# $pass passed, $fail failed"
[ "$fail" -eq 0 ]
