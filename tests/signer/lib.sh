# Shared helpers of the signer end-to-end tests (sourced).
# Each test gets a private state dir and socket: never the user's real signer.
set -eu
SIGNER=$1 CLIENT=$2 TKBOX=$3
WORK=$(mktemp -d /tmp/tks-e2e.XXXXXX)
export TKBOX_SIGNER_SOCKET="$WORK/run/signer.sock"
export TKBOX_SIGNER_DIR="$WORK/state"
cleanup() {
	"$SIGNER" down --dir "$TKBOX_SIGNER_DIR" >/dev/null 2>&1 || true
	if [ -n "${MOUNTED:-}" ]; then umount "$MOUNTED" 2>/dev/null || true; fi
	rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; if [ -f "$TKBOX_SIGNER_DIR/signer.log" ]; then tail -20 "$TKBOX_SIGNER_DIR/signer.log" >&2; fi; exit 1; }
# After `down`: a sanitizer report in the signer's log fails the test (ASan builds).
check_log() {
	if grep -q "Sanitizer\|runtime error" "$TKBOX_SIGNER_DIR/signer.log" 2>/dev/null; then
		cat "$TKBOX_SIGNER_DIR/signer.log" >&2
		fail "sanitizer report in the signer's log"
	fi
}
