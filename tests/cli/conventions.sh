#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The conventions of issue 15 that need no daemon:
#   - tkbox version [--json]: the release and the commit of the source tree it was built from (meson vcs_tag);
#     tkbox and tkbox-host agree, --version is the same;
#   - tkbox images ls --json: a JSON array of what the cache holds (after a real pull of a local OCI layout);
#   - progress lines (a carriage return and an erase-line sequence) on tkbox images pull and tkbox workspace build
#     only when stderr is a terminal: under script(1) they are there, in a pipe there is not one byte of them.
# usage: conventions.sh BUILD_DIR
BUILD=${1:?usage: conventions.sh BUILD_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../daemon/lib.sh
source "$HERE/../daemon/lib.sh"
trap lib_cleanup EXIT
echo "TAP version 13"
HOST=$BUILD/tkbox-host
ESC=$(printf '\033')
# no_ctl FILE: no carriage return and no escape byte in FILE
no_ctl() { ! LC_ALL=C grep -q $'[\r\033]' "$1"; }

# ---- version
v=$("$TKBOX" version)
check "tkbox version: 'tkbox VERSION (commit C)'" bash -c "[[ '$v' =~ ^tkbox\ [0-9]+\.[0-9]+\.[0-9]+\ \(commit\ ([0-9a-f]{12}(-dirty)?|unknown)\)$ ]]"
check "tkbox-host version says the same" [ "$("$HOST" version)" = "$v" ]
check "tkbox --version says the same" [ "$("$TKBOX" --version)" = "$v" ]
"$TKBOX" version --json >"$WORK/v.json"
check "version --json: {version, commit, dirty}" python3 -c '
import json, re, sys
d = json.load(open(sys.argv[1]))
assert set(d) == {"version", "commit", "dirty"}, d
assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", d["version"]) and isinstance(d["dirty"], bool)
assert re.fullmatch(r"[0-9a-f]{12}|unknown", d["commit"]), d["commit"]
' "$WORK/v.json"
if [ -e "$SRC/.git" ] && head=$(git -C "$SRC" rev-parse HEAD 2>/dev/null); then
	commit=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["commit"])' "$WORK/v.json")
	# the dirty flag is left out: the tree may change between the build and this test
	check "the commit is the source tree's HEAD ($commit)" [ "${head:0:12}" = "$commit" ]
fi
"$TKBOX" version --bogus 2>/dev/null
check "version with another argument: usage, exit 2" [ $? = 2 ]

# ---- images: a real pull of a local OCI layout, with and without a terminal
OCI=$(oci_image_dir) || { echo "Bail out! no OCI layout"; exit 1; }
# Each pull into a fresh cache (a second pull of a local layout finds everything done and draws nothing).
STATE=$WORK/img-state
mkdir -p "$STATE" "$WORK/img-state2"
"$HOST" images pull --state "$WORK/img-state2" "oci:$OCI:latest" >"$WORK/pull.out" 2>"$WORK/pull.err"
check "images pull in a pipe: exit 0" [ $? = 0 ]
check "images pull in a pipe: no progress bytes on stderr" no_ctl "$WORK/pull.err"
script -qec "'$HOST' images pull --state '$STATE' 'oci:$OCI:latest' >/dev/null" /dev/null >"$WORK/pull.tty" 2>&1
check "images pull on a terminal: a progress line ('unpacking layer 1/1' after an erase-line)" \
	grep -q "$ESC\[Kunpacking layer 1/1" "$WORK/pull.tty"
"$HOST" images ls --state "$STATE" --json >"$WORK/ls.json"
check "images ls --json: [{ref, platform, config, rootfs_bytes}] with the pulled image" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert isinstance(d, list) and len(d) == 1, d
e = d[0]
assert set(e) == {"ref", "platform", "config", "rootfs_bytes"}, e
assert e["ref"].startswith("oci:") and e["platform"] == "linux/amd64", e
assert e["config"].startswith("sha256:") and e["rootfs_bytes"] > 0, e
' "$WORK/ls.json"
"$HOST" images ls --state "$WORK/empty-state" --json >"$WORK/ls0.json"
check "images ls --json of an empty cache: []" python3 -c 'import json,sys; assert json.load(open(sys.argv[1])) == []' "$WORK/ls0.json"
check "images ls (text) still has its header" bash -c "'$HOST' images ls --state '$STATE' | head -1 | grep -q '^REFERENCE'"

# ---- workspace build, with and without a terminal
CO=$WORK/checkout
mkdir -p "$CO/src" && for i in $(seq 1 40); do echo "file $i" >"$CO/src/f$i.txt"; done && mkdir -p "$CO/zz" && echo SECRET=x >"$CO/zz/.env"
(cd "$CO" && git init -q . && git add -A) || { echo "Bail out! no checkout"; exit 1; }
"$HOST" workspace build "$CO" -o "$WORK/ws1.ext4" >"$WORK/ws.out" 2>"$WORK/ws.err"
check "workspace build in a pipe: exit 0" [ $? = 0 ]
check "workspace build in a pipe: no progress bytes" no_ctl "$WORK/ws.err"
check "workspace build in a pipe: the left-out line" grep -q '^left out "zz/.env"' "$WORK/ws.err"
script -qec "'$HOST' workspace build '$CO' -o '$WORK/ws2.ext4' >/dev/null" /dev/null >"$WORK/ws.tty" 2>&1
check "workspace build on a terminal: 'copying N files' and 'building ext4 from 40 files'" \
	bash -c "grep -q 'copying [0-9]* files' '$WORK/ws.tty' && grep -q 'building ext4 from 40 files' '$WORK/ws.tty'"
check "workspace build on a terminal: the left-out line starts on a cleared line" \
	grep -q "$ESC\[Kleft out \"zz/.env\"" "$WORK/ws.tty"
script -qec "'$HOST' workspace build --quiet '$CO' -o '$WORK/ws3.ext4' >/dev/null" /dev/null >"$WORK/ws.quiet" 2>&1
check "workspace build --quiet on a terminal: no progress" bash -c "! grep -q 'copying' '$WORK/ws.quiet'"
script -qec "'$HOST' workspace build --json '$CO' -o '$WORK/ws4.ext4' 2>&1 >/dev/null" /dev/null >"$WORK/ws.json.tty" 2>&1
check "workspace build --json on a terminal: no progress (the daemon's child form)" bash -c "! grep -q 'copying' '$WORK/ws.json.tty'"

echo "1..$((pass + fail))"
echo "# $pass passed, $fail failed"
[ "$fail" -eq 0 ]
