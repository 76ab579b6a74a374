#!/bin/sh
# `tkbox verify` as a command: report lines, exit codes 0/1/2/3, --json, --strict, bad flags.
# usage: cli.sh TKBOX TKB-GEN TKB-TAMPER
set -eu
TKBOX=$1 GEN=$2 TAMPER=$3
WORK=$(mktemp -d /tmp/tkv-cli.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
code() { set +e; "$@" >"$WORK/out" 2>"$WORK/err"; c=$?; set -e; echo "$c"; }

"$GEN" "$WORK/b.tkb" "$WORK/trust.json" 3 closed
[ "$(code "$TKBOX" verify "$WORK/b.tkb" --trust "$WORK/trust.json")" = 0 ] || fail "valid bundle"
grep -q '^\[PASS\] manifest — ' "$WORK/out" || fail "no manifest line"
grep -q '^\[PASS\] isolation — same-user' "$WORK/out" || fail "no isolation line"
grep -q '^Integrity: VERIFIED\.$' "$WORK/out" || fail "no Integrity line"
grep -q '^Assurance: dev; ' "$WORK/out" || fail "no Assurance line"
[ "$(code "$TKBOX" verify "$WORK/b.tkb" --trust="$WORK/trust.json" --strict)" = 3 ] || fail "--strict with a warning"
[ "$(code "$TKBOX" verify --json "$WORK/b.tkb" --trust "$WORK/trust.json")" = 0 ] || fail "--json"
grep -q '"integrity": "VERIFIED"' "$WORK/out" || fail "--json integrity"
grep -q '"exit_code": 0' "$WORK/out" || fail "--json exit_code"

"$GEN" "$WORK/o.tkb" "$WORK/o.json" 2 open
[ "$(code "$TKBOX" verify "$WORK/o.tkb" --trust "$WORK/o.json")" = 0 ] || fail "open run"
grep -q '^Integrity: VERIFIED TO HEAD 2 (open)\.$' "$WORK/out" || fail "open verdict"

"$TAMPER" "$WORK/b.tkb" "$WORK/trust.json" "$WORK/t.tkb" edit 2
[ "$(code "$TKBOX" verify "$WORK/t.tkb" --trust "$WORK/trust.json")" = 1 ] || fail "edited record"
grep -q '^\[FAIL\] signatures — ' "$WORK/out" || fail "edited: no signatures failure"
grep -q '^Integrity: FAILED\.$' "$WORK/out" || fail "edited: verdict"
[ "$(code "$TKBOX" verify "$WORK/b.tkb" --trust "$WORK/o.json")" = 1 ] || fail "another log's trust"

"$TAMPER" "$WORK/b.tkb" "$WORK/trust.json" "$WORK/t.tkb" truncate-zip 100
[ "$(code "$TKBOX" verify "$WORK/t.tkb" --trust "$WORK/trust.json")" = 2 ] || fail "truncated zip"
grep -q '^Integrity: UNUSABLE BUNDLE\.$' "$WORK/out" || fail "truncated: verdict"
[ "$(code "$TKBOX" verify "$WORK/none.tkb" --trust "$WORK/trust.json")" = 2 ] || fail "missing bundle"
[ "$(code "$TKBOX" verify "$WORK/b.tkb" --trust "$WORK/none.json")" = 2 ] || fail "missing trust"
[ "$(code "$TKBOX" verify "$WORK/b.tkb" --trust "$WORK/b.tkb")" = 2 ] || fail "a zip as trust file"
[ "$(code "$TKBOX" verify "$WORK/b.tkb")" = 2 ] || fail "no --trust"
[ "$(code "$TKBOX" verify "$WORK/b.tkb" --trust "$WORK/trust.json" --bogus)" = 2 ] || fail "unknown flag"
[ "$(code "$TKBOX" verify "$WORK/b.tkb" "$WORK/b.tkb" --trust "$WORK/trust.json")" = 2 ] || fail "two bundles"
[ "$(code "$TKBOX" verify --help)" = 0 ] || fail "--help"
echo "PASS: tkbox verify command"
