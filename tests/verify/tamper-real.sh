#!/bin/sh
# The tamper campaign on a real bundle: tkbox-signer (dev, private dir and
# socket) runs the scripted acceptance client and exports a run; each
# tampering (tkb-tamper) must make `tkbox verify` exit non-zero, and no input
# may crash it (exit codes above 3 mean a signal).
# usage: tamper-real.sh TKBOX-SIGNER SIGNER-CLIENT TKBOX TKB-TAMPER
set -eu
SIGNER=$1 CLIENT=$2 TKBOX=$3 TAMPER=$4
WORK=$(mktemp -d /tmp/tkv-e2e.XXXXXX)
export TKBOX_SIGNER_SOCKET="$WORK/run/signer.sock"
export TKBOX_SIGNER_DIR="$WORK/state"
cleanup() {
	"$SIGNER" down --dir "$TKBOX_SIGNER_DIR" >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$SIGNER" init --dev >/dev/null || fail "signer init"
"$SIGNER" up --wait >/dev/null || fail "signer up"
"$CLIENT" accept "$TKBOX_SIGNER_SOCKET" "$WORK/run.tkb" >/dev/null || fail "scripted client"
"$SIGNER" down >/dev/null || true
B=$WORK/run.tkb T=$WORK/run.trust.json

out=$("$TKBOX" verify "$B" --trust "$T") || { echo "$out"; fail "the untampered bundle does not verify"; }
echo "$out" | grep -q '^Integrity: VERIFIED\.$' || fail "untampered: not VERIFIED"
records=$("$TAMPER" "$B" "$T" "$WORK/t.tkb" records)
echo "untampered: VERIFIED ($(wc -c <"$B") bytes, $records records in the run)"

# verify FILE LABEL: must exit 1 or 2 (a failure), never 0 or a crash.
expect_fail() {
	set +e
	res=$("$TKBOX" verify "$1" --trust "$T" 2>&1)
	code=$?
	set -e
	first=$(echo "$res" | grep -m1 '^\[FAIL\]' || true)
	case $code in
	1 | 2) echo "detected ($code): $2: $first" ;;
	*) echo "$res"; fail "$2: exit $code" ;;
	esac
}

[ "$records" -ge 4 ] || fail "the exported run has only $records records"
last=$((records - 1))
for op in "edit 1" "edit $last" "delete 1" "swap 1" "append-forged" "rechain 1" \
	"truncate-tail 1" "truncate-tail 2" "replace-keys" "policy-drop-deny" "policy-rename" "add-unlisted" \
	"add-listed" "edit-manifest" "other-run-name"; do
	# shellcheck disable=SC2086
	if "$TAMPER" "$B" "$T" "$WORK/t.tkb" $op 2>/dev/null; then
		expect_fail "$WORK/t.tkb" "$op"
	else
		echo "skipped: $op (not applicable to this bundle)"
	fi
done

# Truncate the zip at many positions: every 13th byte and the last 64.
size=$(wc -c <"$B")
count=0
i=0
while [ "$i" -lt "$size" ]; do
	"$TAMPER" "$B" "$T" "$WORK/t.tkb" truncate-zip "$i"
	set +e
	"$TKBOX" verify "$WORK/t.tkb" --trust "$T" >/dev/null 2>&1
	code=$?
	set -e
	[ "$code" -eq 2 ] || fail "truncated at $i: exit $code"
	count=$((count + 1))
	if [ "$i" -ge $((size - 64)) ]; then i=$((i + 1)); else i=$((i + 13)); fi
done
echo "truncated at $count positions: all refused (exit 2)"
echo "PASS: tamper campaign on a real export"
