#!/bin/sh
# A full disk makes decide fail closed with a clear error: the state dir is a
# small tmpfs (root is needed to mount it); the client decides with 16 KiB
# arguments until the store refuses, then checks that every refusal is
# "unavailable ... full" and nothing is acknowledged while full; after space
# is freed the signer decides again.
. "$(dirname "$0")/lib.sh"
if [ "$(id -u)" != 0 ]; then echo "SKIP: needs root to mount a tmpfs"; exit 77; fi
mkdir -p "$TKBOX_SIGNER_DIR"
mount -t tmpfs -o size=3m,mode=0700 tkbox-signer-test "$TKBOX_SIGNER_DIR" || { echo "SKIP: cannot mount tmpfs"; exit 77; }
MOUNTED=$TKBOX_SIGNER_DIR
"$SIGNER" init --dev >/dev/null || fail "init"
"$SIGNER" up --wait >/dev/null || fail "up"
"$CLIENT" fill "$TKBOX_SIGNER_SOCKET" || fail "did not fail closed on a full disk"
"$SIGNER" status >/dev/null || fail "signer died on a full disk"
# More space (grow the tmpfs): the same signer, without a restart, decides again.
mount -o remount,size=16m "$MOUNTED" || fail "remount"
"$CLIENT" decide "$TKBOX_SIGNER_SOCKET" || fail "no decision after space was freed"
"$SIGNER" down >/dev/null
check_log
echo "PASS: full disk"
