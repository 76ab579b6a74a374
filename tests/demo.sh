#!/bin/bash
# make demo: a dev signer and the daemon in a temporary state dir, a box from a
# small OCI image built locally from Debian's busybox-static (the layout is
# cached after the first run; the box's root comes through src/image's cache:
# `--image oci:DIR:latest`, flattened into a cached ext4), a few commands
# decided by the signer (one it denies), stop, export and an offline verify of
# the bundle.
# usage: tests/demo.sh BUILD_DIR
set -uo pipefail
BUILD=${1:-build}
source "$(dirname "$0")/daemon/lib.sh"
trap lib_cleanup EXIT
start=$(date +%s.%N)

say() { printf '\n\033[1m# %s\033[0m\n' "$*"; }
show() { printf '\033[1m$ %s\033[0m\n' "$*"; }
step() { show "$*"; "$@"; }
# A step that may fail on purpose: print its exit status.
step_rc() {
	show "$*"
	"$@"
	printf '(exit %d)\n' $?
}

for bin in "$TKBOX" "$BUILD/tkbox-host" "$SIGNER" "$BUILD/tkbox-guest-linux-amd64"; do
	if [ ! -x "$bin" ]; then
		echo "demo: $bin is missing: run make build first" >&2
		exit 1
	fi
done
step "$TKBOX" version

say "A small OCI image from Debian's busybox-static (layout built once, cached in $CACHE)"
OCI=$(oci_image_dir) || { echo "demo: building the OCI layout failed (python3 and busybox-static needed)" >&2; exit 1; }
IMG=oci:$OCI:latest
step cat "$OCI/index.json"
echo

say "A same-user dev signer (its key and log in $WORK/signer)"
step "$SIGNER" init --dev --dir "$WORK/signer" || exit 1
signer_start || exit 1
echo "signer serving $TKBOX_SIGNER_SOCKET"

say "The daemon (exits at once when no signer answers; the first start fetches the guest kernel with apt-get)"
show "tkbox daemon > $WORK/daemon.log 2>&1 &"
daemon_start || exit 1
sed 's/^/  /' "$WORK/daemon.log"

say "Run a box: no network card, its own kernel; the image is flattened into a cached ext4 root"
step "$TKBOX" run --image "$IMG" --name demo --memory 512M --disk 512M || {
	sed 's/^/  /' "$WORK/daemon.log"
	exit 1
}
step "$TKBOX" images ls

say "Commands: each one is decided by the signer before it starts"
step "$TKBOX" exec demo -- uname -sr
step "$TKBOX" exec demo -- sh -c 'echo "hello from $(hostname)"; ls /'
step "$TKBOX" exec demo -- cat /proc/net/dev
show "echo 'print me' | tkbox exec -i demo -- cat"
echo 'print me' | "$TKBOX" exec -i demo -- cat
step_rc "$TKBOX" exec demo -- sh -c 'exit 3'

say "A command the policy denies: it never starts (exit 126, the rule on stderr)"
step_rc "$TKBOX" exec demo -- pkill tkbox-signer

say "A per-exec env name that changes what runs is refused before anyone is asked"
step_rc "$TKBOX" exec demo --env LD_PRELOAD=/tmp/evil.so -- true

step "$TKBOX" ls

say "Stop, export the run, verify the bundle offline"
step "$TKBOX" stop demo
step "$TKBOX" export demo -o "$WORK/demo.tkb"
step "$TKBOX" verify "$WORK/demo.tkb" --trust "$WORK/demo.trust.json"
rc=$?
if command -v python3 >/dev/null; then
	read -r dec res obs gaps reason kinds < <(bundle_counts "$WORK/demo.tkb")
	echo "records in the run: $dec decisions, $res results, $obs observations ($kinds), $gaps gaps; closed: $reason"
fi
say "The box's events file"
sed 's/^/  /' "$TKBOX_STATE_DIR/boxes/demo/events.jsonl" | cut -c1-200
printf '\ndemo finished in %.1f s\n' "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')"
exit $rc
