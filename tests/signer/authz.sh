#!/bin/sh
# Identity comes from SO_PEERCRED and the config's `authorize` list: in system
# mode (socket reachable by every uid) a uid that is not listed gets
# `unauthenticated` and is disconnected; a listed uid is served and measured as
# `same-user` when it is the signer's own uid.
. "$(dirname "$0")/lib.sh"
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then echo "SKIP: needs root and setpriv"; exit 77; fi
# The socket must be reachable by uid 65534: put it under /run (0755), not under a
# private temporary directory (whose parents may be 0700).
SOCKDIR=$(mktemp -d /run/tks-authz.XXXXXX)
chmod 0711 "$SOCKDIR"
export TKBOX_SIGNER_SOCKET="$SOCKDIR/run/signer.sock"
trap 'cleanup; rm -rf "$SOCKDIR"' EXIT
"$SIGNER" init --system >/dev/null || fail "init --system"
"$SIGNER" up --wait >/dev/null || fail "up"
[ "$(stat -c %a "$SOCKDIR/run")" = 711 ] || fail "system-mode socket dir is not 0711"
[ "$(stat -c %a "$TKBOX_SIGNER_SOCKET")" = 666 ] || fail "system-mode socket is not 0666"
"$CLIENT" decide "$TKBOX_SIGNER_SOCKET" | grep -q '^allow$' || fail "authorized uid not served"
if setpriv --reuid=65534 --regid=65534 --clear-groups "$CLIENT" decide "$TKBOX_SIGNER_SOCKET" >"$WORK/nobody.out" 2>&1; then
	fail "an unlisted uid was served"
fi
grep -q "unauthenticated" "$WORK/nobody.out" || { cat "$WORK/nobody.out"; fail "no unauthenticated error"; }
"$SIGNER" status | grep -q '^mode: system$' || fail "status after refusing a caller"
"$SIGNER" down >/dev/null
check_log
echo "PASS: authorize"
