# Shared by tests/daemon/e2e.sh, tests/demo.sh and bench/exec.sh: a dev signer
# and a daemon in a temporary state directory, and a cached busybox image.
# Source it with BUILD set to the build directory. Needs bash.

: "${BUILD:?BUILD must name the build directory}"
BUILD=$(cd "$BUILD" && pwd)
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TKBOX=$BUILD/tkbox
SIGNER=$BUILD/tkbox-signer
CACHE=${TKBOX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tkbox}
# The guest kernel cache is shared with the default state dir, so it is fetched once.
ASSETS=${TKBOX_ASSETS_DIR:-${HOME}/.local/state/tkbox/images/assets}
# So is the accelerator probe's verdict (a probe boot under a broken nested KVM costs up to 20 s).
PROBE=$(dirname "$(dirname "$ASSETS")")/accel-probe

WORK=$(mktemp -d /tmp/tkbox-e2e.XXXXXX)
export TKBOX_STATE_DIR=$WORK/state
export TKBOX_SIGNER_SOCKET=$WORK/signer.sock
unset TKBOX_SOCKET
SIGNER_PID=
DAEMON_PID=

lib_cleanup() {
	[ -n "$DAEMON_PID" ] && kill -TERM "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
	[ -n "$SIGNER_PID" ] && kill -TERM "$SIGNER_PID" 2>/dev/null && wait "$SIGNER_PID" 2>/dev/null
	[ -s "$TKBOX_STATE_DIR/accel-probe" ] && cp "$TKBOX_STATE_DIR/accel-probe" "$PROBE" 2>/dev/null
	if [ -z "${KEEP_WORK:-}" ]; then
		rm -rf "$WORK"
	else
		echo "kept $WORK" >&2
	fi
}

# TAP-style checks for the e2e scripts: ok/notok count into pass/fail, check runs a condition command.
pass=0
fail=0
ok() { echo "ok - $1"; pass=$((pass + 1)); }
notok() {
	echo "not ok - $1"
	shift
	for l in "$@"; do echo "#   $l"; done
	fail=$((fail + 1))
}
check() { # NAME CONDITION-COMMAND...
	local name=$1
	shift
	if "$@"; then ok "$name"; else notok "$name" "failed: $*"; fi
}
# Wall-clock time now, and the seconds since T0 (for figures in test output, never for assertions).
t() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(t)" 'BEGIN { printf "%.2f", b - a }'; }

# A small root file system from Debian's busybox-static, built once and cached.
image_path() {
	local img=$CACHE/busybox-rootfs.ext4
	if [ ! -s "$img" ]; then
		mkdir -p "$CACHE"
		sh "$SRC/tests/e2e/mkimage.sh" rootfs "$img.tmp" >/dev/null && mv "$img.tmp" "$img"
	fi
	echo "$img"
}

# The same busybox-static root as an OCI image layout (tests/daemon/mkoci-rootfs.py), built once and
# cached: `tkbox run --image oci:DIR:latest` reads it through src/image (flattened, cached ext4).
oci_image_dir() {
	local dir=$CACHE/busybox-oci
	if [ ! -s "$dir/index.json" ]; then
		mkdir -p "$CACHE"
		rm -rf "$dir.tmp"
		python3 "$SRC/tests/daemon/mkoci-rootfs.py" "$dir.tmp" "${BUSYBOX:-/bin/busybox}" --workdir /root \
			>/dev/null && rm -rf "$dir" && mv "$dir.tmp" "$dir" || return 1
	fi
	echo "$dir"
}

signer_init() {
	"$SIGNER" init --dev --dir "$WORK/signer" >/dev/null
}

signer_start() {
	"$SIGNER" serve --dir "$WORK/signer" --socket "$TKBOX_SIGNER_SOCKET" >>"$WORK/signer.log" 2>&1 &
	SIGNER_PID=$!
	for _ in $(seq 100); do
		[ -S "$TKBOX_SIGNER_SOCKET" ] && "$SIGNER" status --dir "$WORK/signer" --socket "$TKBOX_SIGNER_SOCKET" \
			>/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "the signer did not start; see $WORK/signer.log" >&2
	return 1
}

daemon_start() {
	# The daemon wants a state directory only its uid can enter (it never chmods an existing one).
	[ -d "$TKBOX_STATE_DIR" ] || mkdir -m 0700 "$TKBOX_STATE_DIR"
	mkdir -p "$TKBOX_STATE_DIR/images" "$ASSETS"
	[ -e "$TKBOX_STATE_DIR/images/assets" ] || ln -s "$ASSETS" "$TKBOX_STATE_DIR/images/assets"
	[ -s "$PROBE" ] && [ ! -e "$TKBOX_STATE_DIR/accel-probe" ] && cp "$PROBE" "$TKBOX_STATE_DIR/accel-probe"
	# TKBOX_E2E_GUEST: a guest agent from another build (a sanitizer build has none of its own).
	# DAEMON_WRAP (an array, may be unset): a command that execs the rest (tests/egress/lib.sh: a private
	# mount namespace whose /etc/resolv.conf names the test resolver).
	${DAEMON_WRAP[@]+"${DAEMON_WRAP[@]}"} "$TKBOX" daemon --accel "${TKBOX_ACCEL:-auto}" ${TKBOX_E2E_GUEST:+--guest "$TKBOX_E2E_GUEST"} "$@" \
		>>"$WORK/daemon.log" 2>&1 &
	DAEMON_PID=$!
	for _ in $(seq 100); do
		"$TKBOX" ls >/dev/null 2>&1 && return 0
		kill -0 "$DAEMON_PID" 2>/dev/null || break
		sleep 0.1
	done
	echo "the daemon did not start; see $WORK/daemon.log:" >&2
	cat "$WORK/daemon.log" >&2
	return 1
}

# Record counts of a bundle's run: "decisions results observations gaps end_reason".
bundle_counts() {
	python3 - "$1" <<'PY'
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
dec = res = obs = gap = 0
reason = "-"
kinds = {}
for n in z.namelist():
    if not n.startswith("runs/"):
        continue
    for line in z.read(n).decode().splitlines():
        e = json.loads(line)["event"]
        t = e.get("type")
        d = e.get("data", {})
        if t == "policy.decision":
            dec += 1
        elif t == "tool.result":
            res += 1
        elif t == "review":
            obs += 1
            kinds[d.get("reviewer")] = kinds.get(d.get("reviewer"), 0) + 1
        elif t == "capture.gap":
            gap += 1
        elif t == "run.end":
            reason = d.get("reason", "-").replace(" ", "_")
print(dec, res, obs, gap, reason, ",".join("%s=%d" % kv for kv in sorted(kinds.items())) or "-")
PY
}

# "bytes:sha256" of every tool.result whose output carries a streamed stdin, one per line.
bundle_stdin_results() {
	python3 - "$1" <<'PY'
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in z.namelist():
    if not n.startswith("runs/"):
        continue
    for line in z.read(n).decode().splitlines():
        e = json.loads(line)["event"]
        if e.get("type") != "tool.result":
            continue
        v = e.get("data", {}).get("output", {}).get("value", {})
        if "stdin_sha256" in v:
            print("%d:%s" % (v["stdin_bytes"], v["stdin_sha256"]))
PY
}
