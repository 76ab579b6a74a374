#!/bin/sh
# The built guest kernel (issue 16, docs/vm.md "Built kernel"):
#   kernel-built.sh TKBOX_VM VMTEST GUEST ROOTFS WORKSPACE STATE
# 1. `tkbox-vm assets --build-kernel --state STATE` builds it from Debian's linux-source tarball (minutes; STATE
#    is kept in the build tree, so a later run finds it cached and says so) and the cache names it `built`;
# 2. TKBOX_KERNEL=cloud with no cloud kernel in STATE and no fetching is refused (the choice is honoured);
# 3. a box boots on it and the kernel has no module support at all (no /proc/modules);
# 4. vmtest's whole TAP suite (exec, stdin, signals, the overlay root, the workspace disk, the console, diff...)
#    runs on it, as vm-box runs it on Debian's cloud kernel.
# Skips (77) when no linux-source tarball is installed (apt-get install linux-source-6.1 flex bison bc libelf-dev).
set -eu
vm=$1 vmtest=$2 guest=$3 rootfs=$4 workspace=$5 state=$6
if ! ls /usr/src/linux-source-*.tar.xz >/dev/null 2>&1; then
	echo "SKIP: no /usr/src/linux-source-*.tar.xz (apt-get install linux-source-6.1)"
	exit 77
fi
mkdir -p "$state"
chmod 0700 "$state"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail() { echo "FAIL: $*"; cat "$log"; exit 1; }

t0=$(date +%s)
"$vm" assets --build-kernel --no-fetch --state "$state" >"$log" 2>&1 || fail "the kernel build failed"
echo "ok 1 - kernel built or found cached in $(($(date +%s) - t0)) s: $(sed -n 's/^package //p' "$log")"
grep -q '^package built from linux-source' "$log" || fail "tkbox-vm assets does not report the built kernel"
grep -q '^modules *$' "$log" || fail "the built kernel's manifest lists modules"
[ -s "$state/images/assets/built" ] || fail "no built pointer in the cache"

if TKBOX_KERNEL=cloud "$vm" assets --no-fetch --state "$state" >"$log" 2>&1; then
	fail "TKBOX_KERNEL=cloud used a kernel although the cache holds no cloud kernel"
fi
grep -q 'no guest kernel' "$log" || fail "TKBOX_KERNEL=cloud: no message saying the cloud kernel is missing"
if TKBOX_KERNEL=Cloud "$vm" assets --no-fetch --state "$state" >"$log" 2>&1; then
	fail "TKBOX_KERNEL=Cloud accepted"
fi
grep -q 'is `built` or `cloud`' "$log" || fail "a wrong TKBOX_KERNEL is not explained"
echo "ok 2 - TKBOX_KERNEL is honoured and checked"

out=$(TKBOX_KERNEL=built "$vm" run --no-fetch --state "$state" --guest "$guest" --accel tcg --rootfs "$rootfs" \
	-- sh -c 'test ! -e /proc/modules && echo nomodules; uname -r; grep -c " overlay " /proc/mounts' 2>"$log") ||
	fail "a box on the built kernel failed"
echo "$out" | grep -qx nomodules || fail "the built kernel has module support: $out"
grep -q 'ready in' "$log" || fail "no ready line"
echo "ok 3 - a box boots on the built kernel ($(grep -o 'ready in [0-9.]* s' "$log")), no module support"

TKBOX_KERNEL=built "$vmtest" --guest "$guest" --rootfs "$rootfs" --workspace "$workspace" --state "$state" \
	--accel tcg >"$log" 2>&1 || fail "vmtest on the built kernel"
grep -c '^ok' "$log" | sed 's/^/ok 4 - vmtest on the built kernel: /; s/$/ checks passed/'
echo "1..4"
