#!/bin/bash
# tkbox view over the bundle of a real box (busybox image, QEMU under KVM or TCG, a dev signer and the daemon from
# tests/daemon/lib.sh): commands run, one denied by the signer, one failing, the cloud metadata address refused by
# the network door, a host off the allowlist held and approved with tkbox approve, a file written in /workspace, the patch saved at stop and applied into a copy of the checkout,
# then export. The page must say VERIFIED with the box's isolation, and its per-door counts must equal the bundle's.
# VIEW_SCREENSHOT=FILE keeps a screenshot of the page.
# usage: view-realbox.sh BUILD_DIR
BUILD=${1:?usage: view-realbox.sh BUILD_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../daemon/lib.sh
source "$HERE/../daemon/lib.sh"
trap lib_cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	tail -20 "$WORK/daemon.log" >&2
	exit 1
}
command -v chromium >/dev/null || fail "chromium is not installed (make deps installs Debian's chromium)"
IMG=$(image_path) || fail "no busybox image"
signer_init && signer_start || fail "signer"
daemon_start || fail "daemon"
git_() { GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git -c user.name=t -c user.email=t@test.example \
	-c init.defaultBranch=main -c core.hooksPath=/dev/null "$@"; }
CO=$WORK/project
mkdir -p "$CO" && (cd "$CO" && git_ init -q . && echo "# project" >README.md && git_ add -A && git_ commit -qm init) ||
	fail "checkout"
timeout 120 "$TKBOX" run --image "$IMG" --name demo --workspace "$CO" --memory 256M --disk 128M >/dev/null ||
	fail "tkbox run"
x() { timeout 60 "$TKBOX" exec demo -- "$@" >/dev/null 2>&1; echo $?; }
[ "$(x uname -a)" = 0 ] || fail "uname"
[ "$(x sh -c 'echo hello >/workspace/x.txt')" = 0 ] || fail "write x.txt"
[ "$(x pkill tkbox-signer)" = 126 ] || fail "pkill tkbox-signer was not denied"
[ "$(x sh -c 'grep -q TODO /workspace/x.txt')" = 1 ] || fail "grep"
timeout 60 "$TKBOX" exec demo -- sh -c 'printf "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\nConnection: close\r\n\r\n" | nc 127.0.0.1 3128' >"$WORK/meta.out" 2>&1
grep -q "^HTTP/1.1 403" "$WORK/meta.out" || fail "the metadata address was not refused: $(head -c 300 "$WORK/meta.out")"
# A host off the allowlist is held until a person approves it from the host (the name then does not resolve here).
timeout 60 "$TKBOX" exec demo -- sh -c 'printf "GET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n" | nc 127.0.0.1 3128' >"$WORK/held.out" 2>&1 &
held=$!
id=
for _ in $(seq 150); do
	id=$("$TKBOX" approvals 2>/dev/null | grep -o 'ap-[0-9a-f]\{12\}' | head -1)
	[ -n "$id" ] && break
	sleep 0.2
done
[ -n "$id" ] || fail "no pending approval for evil.example"
"$TKBOX" approve "$id" >/dev/null || fail "tkbox approve $id"
wait "$held"
timeout 120 "$TKBOX" stop demo >/dev/null 2>&1 || fail "tkbox stop"
cp -a "$CO" "$WORK/copy"
timeout 120 "$TKBOX" apply demo --checkout "$WORK/copy" >/dev/null 2>&1 || fail "tkbox apply"
[ "$(cat "$WORK/copy/x.txt")" = hello ] || fail "x.txt not applied"
# The apply's end reaches the daemon just after the command returns: an export at once may be told to wait.
for _ in $(seq 40); do
	timeout 300 "$TKBOX" export demo -o "$WORK/demo.tkb" >/dev/null 2>"$WORK/export.err" && break
	grep -q "being applied" "$WORK/export.err" || fail "tkbox export: $(cat "$WORK/export.err")"
	sleep 0.25
done
[ -s "$WORK/demo.tkb" ] || fail "tkbox export: $(cat "$WORK/export.err")"
"$TKBOX" view "$WORK/demo.tkb" --trust "$WORK/demo.trust.json" -o "$WORK/demo.html" 2>/dev/null || fail "tkbox view"
udd=$(mktemp -d "$WORK/udd.XXXXXX")
timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
	--disable-component-update --disable-sync --user-data-dir="$udd" --dump-dom "file://$WORK/demo.html" \
	>"$WORK/demo.dom" 2>/dev/null || fail "chromium"
if [ -n "${VIEW_SCREENSHOT:-}" ]; then
	timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
		--disable-background-networking --disable-component-update --disable-sync --user-data-dir="$udd" \
		--screenshot="$VIEW_SCREENSHOT" --window-size=1280,1700 "file://$WORK/demo.html" >/dev/null 2>&1 ||
		fail "screenshot"
fi
python3 - "$WORK/demo.tkb" "$WORK/demo.dom" "$HERE" <<'PY' || fail "the page"
import re, sys
sys.path.insert(0, sys.argv[3])
from doors import counts
want = counts(sys.argv[1])
dom = open(sys.argv[2], encoding="utf-8").read()
ids = {k: int(v) for k, v in re.findall(r'id="n-([a-z]+)">(\d+)<', dom)}
assert re.search(r'id="verdict"><div class="big">VERIFIED</div>', dom), "no VERIFIED verdict"
assert re.search(r"<b>Isolation:</b> signer [a-z-]+; box (emulated|kvm|[a-z-]+) \(accel (tcg|kvm)\)", dom), "no isolation"
assert ids == want, "page %s, bundle %s" % (ids, want)
# uname, echo, grep, the metadata and the held requests: decided and completed; pkill: denied. The Write and its
# result, the patch. The metadata address refused; the held host approved, its connection decided, refused (.example
# names never resolve: resolve-failed) and ended.
assert (want["cmd"], want["files"], want["appr"], want["net"], want["refused"]) == (11, 3, 1, 4, 3), want
print("real box: the page's counts equal the bundle's: %s" % want)
PY
echo "PASS: tkbox view over a real box's bundle"
