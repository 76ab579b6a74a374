#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Boot the real Debian image (tests/egress/debian-image.sh) in a box through the daemon and check the
# tools the egress tests will use are there: python3's urllib, curl, git, and the apt sources the image
# carries (the `debian` preset will read them). No network from the box: only programs start.
#   tests/egress/debian-image-smoke.sh BUILD_DIR
# Needs root (the image build). Downloads on its first run (the image), so it is not in meson/make test.
set -u
BUILD=${1:?usage: debian-image-smoke.sh BUILD_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../daemon/lib.sh"
trap lib_cleanup EXIT

T0=$(t)
LAYOUT=$("$HERE/debian-image.sh" | tail -n 1) && [ -s "$LAYOUT/index.json" ] ||
	{ echo "Bail out! debian-image.sh did not give an OCI layout"; exit 1; }
echo "# image: $LAYOUT ($(du -sm "$LAYOUT" | cut -f1) MiB), ready in $(elapsed "$T0") s"

signer_init || { echo "Bail out! no signer"; exit 1; }
signer_start || { echo "Bail out! no signer"; exit 1; }
daemon_start || { echo "Bail out! no daemon"; exit 1; }

BOX=deb-smoke
T1=$(t)
timeout --kill-after=10 900 "$TKBOX" run --image "oci:$LAYOUT:latest" --name "$BOX" --memory 512M --disk 512M \
	</dev/null >"$WORK/run.out" 2>"$WORK/run.err"
rc=$?
if [ $rc -eq 0 ]; then
	ok "run --image oci:<debian layout>:latest ($(elapsed "$T1") s)"
else
	notok "run --image oci:<debian layout>:latest" "rc=$rc" "$(cat "$WORK/run.err")"
	echo "1..$((pass + fail))"
	exit 1
fi

inbox() { # LABEL EXPECTED-REGEX COMMAND...: run in the box, show the output, match it
	local label=$1 want=$2 out rc
	shift 2
	out=$(timeout --kill-after=10 300 "$TKBOX" exec "$BOX" -- "$@" </dev/null 2>&1)
	rc=$?
	sed 's/^/#   | /' <<<"$out"
	if [ $rc -eq 0 ] && grep -Eq -- "$want" <<<"$out"; then ok "$label"; else notok "$label" "rc=$rc" "wanted /$want/"; fi
}

inbox "the box runs Debian 12" '^VERSION_ID="12"$' cat /etc/os-release
inbox "python3 imports urllib.request" '^urllib-ok$' python3 -c 'import urllib.request; print("urllib-ok")'
inbox "curl --version (speaks https)" '^Protocols: .* https ' curl --version
inbox "git --version" '^git version [0-9]' git --version
inbox "CA bundle present" '^ca-bundle-ok$' sh -c 'test -s /etc/ssl/certs/ca-certificates.crt && echo ca-bundle-ok'
# What `cat /etc/apt/sources.list*` shows, without tripping on the sources.list.d directory; the keyring the
# entries' signed-by names must be in the image too.
inbox "apt sources name bookworm" '^deb .* bookworm main' sh -c \
	'for f in /etc/apt/sources.list /etc/apt/sources.list.d/*; do [ ! -f "$f" ] || cat "$f"; done'
inbox "signed-by keyrings present" '^keyrings-ok$' sh -c 'for k in $(sed -n "s/.*signed-by=\([^] ]*\).*/\1/p" \
	/etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null); do test -s "$k" || exit 1; done; echo keyrings-ok'

"$TKBOX" stop "$BOX" >"$WORK/stop.out" 2>&1
check "stop the box" test $? -eq 0
"$TKBOX" rm "$BOX" >/dev/null 2>&1
echo "1..$((pass + fail))"
[ $fail -eq 0 ]
