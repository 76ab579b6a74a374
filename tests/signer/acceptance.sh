#!/bin/sh
# Issue 3 acceptance: init --dev, up --wait, a scripted client (deny TK-D007 for
# `pkill tkbox-signer`, allow `echo hi`, complete, observe, close), export, and
# `tkbox verify` says Integrity: VERIFIED. and Assurance: dev.
. "$(dirname "$0")/lib.sh"
"$SIGNER" init --dev || fail "init"
"$SIGNER" up --wait || fail "up --wait"
"$SIGNER" status | grep -q '^mode: dev$' || fail "status"
"$CLIENT" accept "$TKBOX_SIGNER_SOCKET" "$WORK/run.tkb" || fail "scripted client"
"$CLIENT" limits "$TKBOX_SIGNER_SOCKET" || fail "frame and connection limits"
[ -s "$WORK/run.tkb" ] && [ -s "$WORK/run.trust.json" ] || fail "no bundle or trust file"
"$SIGNER" down || fail "down"
"$SIGNER" status >/dev/null 2>&1 && fail "still running after down"
check_log
out=$("$TKBOX" verify "$WORK/run.tkb" --trust "$WORK/run.trust.json" 2>&1) || { echo "$out"; fail "tkbox verify exit $?"; }
echo "$out"
echo "$out" | grep -q '^Integrity: VERIFIED\.' || fail "not VERIFIED"
echo "$out" | grep -q '^Assurance: dev' || fail "assurance is not dev"
echo "PASS: acceptance"
