#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Issue 9, sections 3-5, end to end against a real docker-registry on loopback (TLS, a test CA made here),
# fed byte for byte by regpush.py from the layouts mkevil.py builds:
#   - cache poisoning: an image reusing the victim's config bytes with its own layer is refused (diff_ids), the
#     victim still builds its own root, a pull by digest yields exactly its content, and a root cached by the
#     old layout (config digest alone) is never used;
#   - bounded builds: a 1,000,000-file flat directory, 100,000 4 KB paths, junk-laden oci-archives, a name too
#     long for one debugfs line, ".//etc/x": each refused with its message, peak RSS and wall time printed;
#   - parse-time config checks: a WorkingDir with a newline (the forged "from_cache yes"), 513 Env entries, a
#     nested index from a registry, a local manifest whose bytes do not match the index.
# Timings are printed, never asserted; `timeout` only guards against a hang.
# usage: e2e-image-bounds.sh TKBOX_IMAGE_CLI   (a binary that runs `images`)
# Exit 77 (skipped) when a needed program is missing.
set -u
CLI=$1
HERE=$(cd "$(dirname "$0")" && pwd)
PATH=/usr/sbin:/sbin:$PATH
for p in docker-registry openssl python3 debugfs mkfs.ext4 /usr/bin/time timeout; do
	if ! command -v "$p" >/dev/null 2>&1; then
		echo "SKIP: $p not installed"
		exit 77
	fi
done
W=$(mktemp -d /tmp/tkbox-e2e-bounds.XXXXXX)
REG_DIR=$W/reg
mkdir -p "$REG_DIR"
# shellcheck source=registry-lib.sh
. "$HERE/registry-lib.sh"
PORT=
cleanup() {
	[ -n "$PORT" ] && reg_stop pub "$PORT" >/dev/null 2>&1
	rm -rf "$W"
}
trap cleanup EXIT
PASS=0 FAIL=0
ok() { echo "ok   - $*"; PASS=$((PASS + 1)); }
bad() { echo "FAIL - $*"; FAIL=$((FAIL + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
dcat() { debugfs -R "cat $2" "$1" 2>/dev/null; }
nblobs() { find "$1/images/blobs/sha256" -type f 2>/dev/null | wc -l; }
empty_dir() { [ -z "$(ls -A "$1" 2>/dev/null)" ]; }

reg_ca || { echo "cannot make the test CA"; exit 1; }
PORT=$(reg_free_port)
reg_start pub "$PORT" || exit 1
python3 "$HERE/mkevil.py" "$W/img" >"$W/digests.json" || { bad "mkevil.py"; exit 1; }
digest() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$W/digests.json" "$1"; }
for n in victim attacker flat hugepath longname dotslash workdir manyenv nested; do
	check "push $n" python3 "$HERE/regpush.py" "localhost:$PORT" "$REG_DIR/ca.pem" "$W/img/layout" "$n" "$n:1"
done
R=localhost:$PORT
VD=$(digest victim)

# run LABEL STATE ARGS...: the CLI under /usr/bin/time (peak RSS) and a 600 s hang guard
run() {
	local label=$1 state=$2
	shift 2
	timeout 600 /usr/bin/time -o "$W/time" -f "%M %e" "$CLI" images --state "$state" --registry-ca "$REG_DIR/ca.pem" \
		"$@" >"$W/out" 2>"$W/err"
	RC=$?
	read -r RSS SECS < <(tail -n 1 "$W/time" 2>/dev/null) || { RSS=?; SECS=?; }
	echo "figure: $label: exit $RC, peak RSS $RSS KiB, wall $SECS s"
}
refused() { # LABEL STATE WORDS ARGS...
	local label=$1 state=$2 words=$3
	shift 3
	run "$label" "$state" "$@"
	if [ "$RC" = 0 ]; then
		bad "$label refused"
	elif [ "$RC" = 124 ] || [ "$RC" = 137 ]; then
		bad "$label refused in time (the hang guard fired)"
	elif grep -qF -- "$words" "$W/err"; then
		ok "$label refused: $(cut -c1-220 "$W/err")"
	else
		bad "$label refused with \"$words\": $(cat "$W/err")"
	fi
}
ext4_of() { awk '$1 == "ext4" {print $2}' "$W/out"; }

# ---- 3. cache poisoning ----
S=$W/s-poison
refused "attacker (victim's config, its own layer)" "$S" "does not belong to this image" resolve "$R/attacker:1"
check "attacker: the message names the diff_id" grep -q "rootfs.diff_ids\[0\]" "$W/err"
check "attacker: no root was cached" empty_dir "$S/images/roots.v2"
check "attacker: no temp dir left" empty_dir "$S/images/tmp"
run "victim by digest after the attack" "$S" resolve "$R/victim@$VD"
check "victim by digest: built" test "$RC" = 0
check "victim by digest: its own /etc/owner" test "$(dcat "$(ext4_of)" /etc/owner)" = victim
S=$W/s-poison2
run "victim first" "$S" resolve "$R/victim:1"
V1=$(ext4_of)
check "victim first: its own /etc/owner" test "$(dcat "$V1" /etc/owner)" = victim
refused "attacker after the victim is cached" "$S" "does not belong to this image" resolve "$R/attacker:1"
run "victim by digest again" "$S" resolve "$R/victim@$VD"
check "victim by digest again: from the cache, the same root" test "$(ext4_of)" = "$V1"
check "victim by digest again: still the victim's file" test "$(dcat "$(ext4_of)" /etc/owner)" = victim
check "one root only (the attacker's was never stored)" test "$(ls "$S/images/roots.v2" | wc -l)" = 1

# a cache written by the old layout: roots/<config hex> holding the attacker's files, and a refs record (no
# root key) sending the victim's digest there. The new code must not use either.
S=$W/s-old
mkdir -p "$S/images/refs" "$W/evil-tree/etc"
echo attacker >"$W/evil-tree/etc/owner"
CFG=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["config"]["digest"])' \
	"$W/img/layout/blobs/sha256/${VD#sha256:}")
OLD=$S/images/roots/${CFG#sha256:}
mkdir -p "$OLD"
truncate -s 16M "$OLD/rootfs.ext4"
mkfs.ext4 -q -F -O ^has_journal -d "$W/evil-tree" "$OLD/rootfs.ext4" >/dev/null 2>&1
printf '{"config":"%s","env":[],"layers":[],"manifest":"%s","platform":"linux/amd64","ref":"%s","rootfs":"rootfs.ext4","rootfs_bytes":16777216,"schema":"tkbox.image.v1","user":null,"working_dir":null}' \
	"$CFG" "$VD" "$R/victim@$VD" >"$OLD/image.json"
KEY=$(printf '%s|linux/amd64' "$R/victim@$VD" | sha256sum | cut -d' ' -f1)
printf '{"config":"%s","manifest":"%s","platform":"linux/amd64","ref":"%s"}' "$CFG" "$VD" "$R/victim@$VD" \
	>"$S/images/refs/$KEY.json"
run "victim by digest over an old-layout cache" "$S" resolve "$R/victim@$VD"
check "old layout: not served from the old cache" grep -qx "from_cache no" "$W/out"
check "old layout: the victim's own file" test "$(dcat "$(ext4_of)" /etc/owner)" = victim
"$CLI" images --state "$S" prune >/dev/null 2>&1
check "prune removes the old layout's roots/" test ! -e "$S/images/roots"

# ---- 4. bounded builds ----
S=$W/s-bounds
refused "flat: 1,000,000 files in one directory" "$S" "FLATTEN_MAX_DIR_ENTRIES" resolve "$R/flat:1"
check "flat: nothing left in tmp/" empty_dir "$S/images/tmp"
refused "hugepath: 100,000 4 KB paths" "$S" "FLATTEN_MAX_PATH_BYTES" resolve "$R/hugepath:1"
refused "a name too long for one debugfs line" "$S" "EXT4_DEBUGFS_MAX_LINE" resolve "$R/longname:1"
refused ".//etc/x" "$S" "absolute path" resolve "$R/dotslash:1"
check "no root built by any of them" empty_dir "$S/images/roots.v2"

S=$W/s-junk
run "oci-archive laden with 320 MiB of junk" "$S" resolve "oci-archive:$W/img/junk.tar:victim"
check "junk archive: the image itself is read" test "$(dcat "$(ext4_of)" /etc/owner)" = victim
check "junk archive: only the 3 blobs the index reaches were imported" test "$(nblobs "$S")" = 3
S=$W/s-junk-huge
refused "oci-archive whose index reaches 36 GiB of layers" "$S" "IMAGE_MAX_IMAGE_BYTES" \
	resolve "oci-archive:$W/img/junk-huge.tar:huge"
check "junk-huge: nothing left behind in blobs/" test "$(nblobs "$S")" = 0
check "junk-huge: nothing left behind in tmp/" empty_dir "$S/images/tmp"

# ---- 5. parse-time config checks ----
S=$W/s-config
refused "WorkingDir \"/tmp\\nfrom_cache yes\"" "$S" 'WorkingDir "/tmp\x0afrom_cache yes" holds a control character' \
	resolve "$R/workdir:1"
refused "the same through the child resolver (--subprocess)" "$S" "WorkingDir" --subprocess resolve "$R/workdir:1"
check "forged WorkingDir: no from_cache line printed" bash -c "! grep -q from_cache '$W/out'"
refused "513 Env entries" "$S" "IMAGE_MAX_ENV" resolve "$R/manyenv:1"
refused "a nested index from a registry" "$S" "is itself an index" resolve "$R/nested:1"
refused "a local manifest that does not match the index's digest" "$S" "do not hash to the digest the index names" \
	resolve "oci:$W/img/bad-layout:victim"
check "no reference recorded for any refused image" empty_dir "$S/images/refs"

echo "image bounds e2e: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
