#!/bin/sh
# ask -> approval_request -> a long-polling approval_wait, answered when a
# person runs `tkbox-signer approvals approve|reject ID` on the host.
. "$(dirname "$0")/lib.sh"
"$SIGNER" init --dev >/dev/null || fail "init"
"$SIGNER" up --wait >/dev/null || fail "up"
for verdict in approve reject; do
	expect=approved; [ "$verdict" = reject ] && expect=rejected
	"$CLIENT" ask "$TKBOX_SIGNER_SOCKET" "$expect" >"$WORK/ask.out" 2>&1 &
	cpid=$!
	id=
	for i in $(seq 1 100); do
		id=$(sed -n 's/^approval \(a[0-9a-f]*\)$/\1/p' "$WORK/ask.out")
		[ -n "$id" ] && break
		sleep 0.1
	done
	[ -n "$id" ] || fail "no approval id"
	"$SIGNER" approvals list | grep -q "^$id " || fail "approvals list does not show $id"
	# A runtime connection (no role, or role runtime, as the daemon's) cannot answer its own ask.
	printf '%s\n' '{"method":"hello","proto":1}' \
		"{\"method\":\"approval_decide\",\"request_id\":\"self-$verdict\",\"approval_id\":\"$id\",\"decision\":\"approve\"}" \
		'{"method":"hello","proto":1,"role":"runtime"}' \
		"{\"method\":\"approval_decide\",\"request_id\":\"self2-$verdict\",\"approval_id\":\"$id\",\"decision\":\"approve\"}" \
		'{"method":"hello","proto":1,"role":"approver"}' \
		| "$SIGNER" rpc >"$WORK/self.out" 2>&1
	[ "$(grep -c '"code":"forbidden".*approval_decide needs the approver role' "$WORK/self.out")" = 2 ] ||
		{ cat "$WORK/self.out"; fail "a runtime connection's approval_decide was not refused"; }
	# ... nor switch to the approver role once it declared runtime.
	grep -q '"code":"forbidden".*already holds the runtime role' "$WORK/self.out" ||
		{ cat "$WORK/self.out"; fail "a runtime connection switched to the approver role"; }
	"$SIGNER" approvals list | grep -q "^$id " || fail "$id is no longer pending after a refused approval_decide"
	"$SIGNER" approvals "$verdict" "$id" || fail "approvals $verdict"
	wait "$cpid" || { cat "$WORK/ask.out"; fail "client ($verdict)"; }
	grep -q "^approval $expect\$" "$WORK/ask.out" || fail "waiter did not see $expect"
	"$SIGNER" approvals "$verdict" "$id" 2>/dev/null && fail "decided twice"
done
"$SIGNER" approvals list | grep -q "no pending approvals" || fail "approvals left pending"
"$SIGNER" down >/dev/null
check_log
echo "PASS: approvals"
