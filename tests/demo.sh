#!/bin/bash
# make demo: a dev signer and the daemon in a temporary state dir, a box from a
# Debian 12 image built once with mmdebstrap from this machine's own apt
# configuration (cached; the box's root comes through src/image's cache:
# `--image oci:DIR:latest`, flattened into a cached ext4), commands decided by
# the signer (one it denies), then the network door: an allowed install from the
# mirror the image's apt sources name (the debian preset), a test origin in a
# network namespace this script makes, a host held until a person approves it
# (from "another terminal": a background job here), a refused metadata address;
# stop, export and an offline verify of the bundle with its network records.
# usage: tests/demo.sh BUILD_DIR
set -uo pipefail
BUILD=${1:-build}
# tests/egress/lib.sh brings tests/daemon/lib.sh (signer, daemon) and the test network; its EXIT trap cleans up.
source "$(dirname "$0")/egress/lib.sh"
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

say "A Debian 12 image (mmdebstrap from this machine's apt sources; built once, cached in $CACHE)"
show "tests/egress/debian-image.sh"
eg_image
IMG=oci:$EG_LAYOUT:latest
echo "$IMG"

say "A test origin: nginx (HTTPS, a test CA) and dnsmasq in a network namespace this script made"
eg_up

say "A same-user dev signer (its key and log in $WORK/signer)"
step "$SIGNER" init --dev --dir "$WORK/signer" || exit 1
signer_start || exit 1
echo "signer serving $TKBOX_SIGNER_SOCKET"

say "The daemon (exits at once when no signer answers; the first start fetches the guest kernel with apt-get)"
show "tkbox daemon > $WORK/daemon.log 2>&1 &    # its resolver: the test dnsmasq, which forwards other names"
eg_daemon_start || exit 1
sed 's/^/  /' "$WORK/daemon.log"

say "Run a box: no network card, its own kernel; the allowlist is the debian preset (the hosts of the image's apt sources) and the test origin"
show "$TKBOX run --image $IMG --name demo --allow debian --allow origin.test.example --memory 512M --disk 512M"
eg_box demo --allow debian --allow origin.test.example || {
	cat "$WORK/run-demo.err"
	sed 's/^/  /' "$WORK/daemon.log"
	exit 1
}
echo "(the test CA appended to the box's CA bundle)"
step "$TKBOX" images ls
show "$TKBOX ls --json | jq '.[0].egress'"
"$TKBOX" ls --json | jq '(if type == "array" then .[0] else (.boxes // [])[0] end).egress'

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

say "The network door: every connection goes through the host proxy and is decided before it is dialled"
step "$TKBOX" exec demo -- sh -c 'env | grep -i _proxy | sort'
say "An allowed install: apt through the proxy to the mirror the image's sources name (the debian preset)"
step "$TKBOX" exec --timeout 15m demo -- sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >/dev/null && jq --version'
say "An allowlisted origin over HTTPS"
step "$TKBOX" exec demo -- curl -sS https://origin.test.example/index.txt
say "A host off the allowlist is held until a person on the host approves it; its name is not even looked up before"
show "$TKBOX exec demo -- curl -sS https://held.test.example/index.txt &"
"$TKBOX" exec demo -- curl -sS https://held.test.example/index.txt >"$WORK/held.out" 2>&1 &
held=$!
id=
for _ in $(seq 120); do
	id=$(approvals_json | jq -r '.[0].id // empty')
	[ -n "$id" ] && break
	sleep 0.5
done
dns_was_queried held.test.example && echo "(unexpected: held.test.example was looked up before the approval)" ||
	echo "(dnsmasq's log: held.test.example not looked up while it waits)"
echo "# in another terminal:"
step "$TKBOX" approvals
[ -n "$id" ] && step "$TKBOX" approve "$id"
wait "$held"
printf '(the held curl, now approved: exit %d)\n' $?
cat "$WORK/held.out"
say "Cloud metadata is refused before any decision, whatever the allowlist says"
step_rc "$TKBOX" exec demo -- curl -sS -i http://169.254.169.254/latest/meta-data/

say "Stop, export the run, verify the bundle offline"
step "$TKBOX" stop demo
step "$TKBOX" export demo -o "$WORK/demo.tkb"
step "$TKBOX" verify "$WORK/demo.tkb" --trust "$WORK/demo.trust.json"
rc=$?
if command -v python3 >/dev/null; then
	read -r dec res obs gaps reason kinds < <(bundle_counts "$WORK/demo.tkb")
	echo "records in the run: $dec decisions, $res results, $obs observations ($kinds), $gaps gaps; closed: $reason"
	echo "the network door's records:"
	bundle_egress "$WORK/demo.tkb" | jq -r 'if .type == "decision" then select(.tool == "WebFetch") | "  WebFetch decision: \(.decision) (rules \(.rule_ids | join(",")))"
		elif .type == "result" then select(.value.bytes_up != null) | "    its result: ok=\(.ok), \(.value.bytes_up) bytes up, \(.value.bytes_down) down"
		else "  \(.kind) \(.data | tostring | .[0:150])" end'
fi
say "The box's events file"
sed 's/^/  /' "$TKBOX_STATE_DIR/boxes/demo/events.jsonl" | cut -c1-200
printf '\ndemo finished in %.1f s\n' "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')"
exit $rc
