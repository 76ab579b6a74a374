#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A real Debian 12 (bookworm) root for the egress tests and the demo (issue 12), as an OCI image layout:
# mmdebstrap (variant apt) with python3, curl, ca-certificates and git, from the suites, components and
# mirror this machine's own apt configuration names (/etc/apt/sources.list, sources.list.d/*.list and
# deb822 *.sources); nothing here names a mirror. mmdebstrap's tar output becomes the single gzip layer
# of an OCI layout in the same form tests/daemon/mkoci-rootfs.py writes (oci-layout, index.json named
# "latest", blobs/sha256/), for `tkbox run --image oci:DIR:latest`.
#   tests/egress/debian-image.sh          prints the layout's path as its last stdout line
# Cached under the e2e cache root (tests/daemon/lib.sh's CACHE) in a directory keyed by a digest of the
# package list, the apt sources used and this script, so a second run is instant. Runs unattended as
# root (no stdin); every network step has a timeout (TKBOX_DEBIAN_IMAGE_TIMEOUT seconds, default 1200).
# Downloads: not part of `make test` / meson test yet.
set -euo pipefail

SUITE=bookworm
PACKAGES="python3 curl ca-certificates git debian-archive-keyring"
CACHE=${TKBOX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tkbox}
APT_ETC=${TKBOX_APT_ETC:-/etc/apt}
TIMEOUT=${TKBOX_DEBIAN_IMAGE_TIMEOUT:-1200}
SELF=$(readlink -f "${BASH_SOURCE[0]}")

die() {
	echo "debian-image.sh: $*" >&2
	exit 1
}

# The host's "deb" sources for SUITE and its -updates/-security suites, one-line form
# "deb [signed-by=K] URI SUITE COMPONENTS...", sorted. deb822 stanzas and one-line entries alike;
# Enabled: no, deb-src and other releases (third-party "nodistro" etc.) are left out.
host_sources() {
	local files=() f
	[ -f "$APT_ETC/sources.list" ] && files+=("$APT_ETC/sources.list")
	for f in "$APT_ETC"/sources.list.d/*.list "$APT_ETC"/sources.list.d/*.sources; do
		[ -f "$f" ] && files+=("$f")
	done
	[ ${#files[@]} -gt 0 ] || return 0
	python3 - "$SUITE" "${files[@]}" <<'PY'
import re, sys
suite, out = sys.argv[1], set()
ok = lambda s: s == suite or s.startswith(suite + "-")
def emit(uri, s, comps, key):
    if ok(s) and comps and re.match(r"^https?://[^\s\[\]]+$", uri):
        out.add("deb %s%s %s %s" % ("[signed-by=%s] " % key if key else "", uri, s, " ".join(comps)))
for path in sys.argv[2:]:
    text = open(path, encoding="utf-8", errors="replace").read()
    if path.endswith(".sources"):
        for stanza in re.split(r"\n\s*\n", text):
            f, last = {}, None
            for line in stanza.splitlines():
                if line.startswith("#") or not line.strip():
                    continue
                if line[0] in " \t" and last:
                    f[last] += " " + line.strip()
                elif ":" in line:
                    last, v = line.split(":", 1)
                    last = last.strip().lower()
                    f[last] = v.strip()
            if "deb" not in f.get("types", "").split() or f.get("enabled", "yes").lower() == "no":
                continue
            key = f.get("signed-by", "")
            key = key if key.startswith("/") and " " not in key else ""
            for uri in f.get("uris", "").split():
                for s in f.get("suites", "").split():
                    emit(uri.rstrip("/"), s, f.get("components", "").split(), key)
    else:
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            m = re.match(r"^deb\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)\s+(.*)$", line)
            if not m:
                continue
            opts = dict(o.split("=", 1) for o in (m.group(1) or "").split() if "=" in o)
            emit(m.group(2).rstrip("/"), m.group(3), m.group(4).split(), opts.get("signed-by", ""))
for l in sorted(out):
    print(l)
PY
}

[ "$(id -u)" -eq 0 ] || die "needs root (mmdebstrap's root mode builds device nodes and owners); run it with sudo"
command -v python3 >/dev/null || die "python3 is missing: apt-get install python3"
command -v mmdebstrap >/dev/null || die "mmdebstrap is missing: apt-get install mmdebstrap (make deps installs it)"
mapfile -t SOURCES < <(host_sources)
[ ${#SOURCES[@]} -gt 0 ] || die "no \"deb\" source for $SUITE (or $SUITE-updates/-security) in $APT_ETC/sources.list," \
	"$APT_ETC/sources.list.d/*.list or *.sources; add the Debian $SUITE mirror this machine should use to its apt" \
	"configuration (this script never picks a mirror itself)"
printf '%s\n' "${SOURCES[@]}" | grep -q " $SUITE [a-z]" ||
	die "the apt configuration names $SUITE's update suites but no plain \"$SUITE\" source to build from; add one"

KEY=$( { echo "$PACKAGES"; printf '%s\n' "${SOURCES[@]}"; cat "$SELF"; } | sha256sum | cut -c1-16)
OUT=$CACHE/debian-$SUITE-oci-$KEY
if [ -s "$OUT/index.json" ]; then
	echo "debian-image.sh: cached ($KEY)" >&2
	echo "$OUT"
	exit 0
fi

mkdir -p "$CACHE"
TMP=$(mktemp -d "$CACHE/.debian-image.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
echo "debian-image.sh: building $SUITE ($PACKAGES) from ${#SOURCES[@]} host apt source(s) into $OUT" >&2
start=$(date +%s)
# Network steps: apt's own per-connection timeout and retries, and a wall clock on the whole build.
timeout --kill-after=30 "$TIMEOUT" mmdebstrap --mode=root --variant=apt --format=tar \
	--include="${PACKAGES// /,}" \
	--aptopt='Acquire::http::Timeout "30"' --aptopt='Acquire::https::Timeout "30"' \
	--aptopt='Acquire::Retries "3"' \
	--customize-hook='mkdir -p "$1/workspace"' \
	--customize-hook='rm -f "$1"/var/cache/apt/*.bin' \
	"$SUITE" "$TMP/rootfs.tar" "${SOURCES[@]}" </dev/null >"$TMP/mmdebstrap.log" 2>&1 || {
	rc=$?
	tail -n 30 "$TMP/mmdebstrap.log" >&2
	[ $rc -eq 124 ] || [ $rc -eq 137 ] && die "mmdebstrap did not finish within $TIMEOUT s" \
		"(TKBOX_DEBIAN_IMAGE_TIMEOUT) and was killed; check the mirror in the apt configuration answers"
	die "mmdebstrap failed (exit $rc); its log's last lines are above"
}

# One gzip layer (gzip -n: no name or time in the header), config, manifest, index: the shape
# tests/daemon/mkoci-rootfs.py writes, with the layer from a file rather than built in memory.
python3 - "$TMP/rootfs.tar" "$TMP/oci" <<'PY'
import hashlib, json, os, shutil, subprocess, sys
tar, out = sys.argv[1], sys.argv[2]
blobs = os.path.join(out, "blobs", "sha256")
os.makedirs(blobs)
def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
def put(data):
    d = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, d), "wb") as f:
        f.write(data)
    return "sha256:" + d, len(data)
gz = os.path.join(out, "layer.gz")
with open(gz, "wb") as f:
    subprocess.run(["gzip", "-n", "-6", "-c", tar], stdout=f, check=True)
ld = digest(gz)
ls = os.path.getsize(gz)
os.rename(gz, os.path.join(blobs, ld))
cfg = {"architecture": "amd64", "os": "linux",
       "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"],
                  "WorkingDir": "/root"},
       "rootfs": {"type": "layers", "diff_ids": ["sha256:" + digest(tar)]}}
cd, cs = put(json.dumps(cfg, sort_keys=True).encode())
man = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
       "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
       "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "sha256:" + ld, "size": ls}]}
md, ms = put(json.dumps(man, sort_keys=True).encode())
index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
         "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms,
                        "annotations": {"org.opencontainers.image.ref.name": "latest"}}]}
with open(os.path.join(out, "index.json"), "w") as f:
    json.dump(index, f, sort_keys=True)
with open(os.path.join(out, "oci-layout"), "w") as f:
    json.dump({"imageLayoutVersion": "1.0.0"}, f)
PY
rm -rf "$OUT"
mv "$TMP/oci" "$OUT"
echo "debian-image.sh: built in $(($(date +%s) - start)) s; tar $(du -sm "$TMP/rootfs.tar" | cut -f1) MiB," \
	"layout $(du -sm "$OUT" | cut -f1) MiB" >&2
echo "$OUT"
