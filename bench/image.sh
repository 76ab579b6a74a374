#!/bin/sh
# Image-build benchmark (issue 9): how fast an OCI layout becomes a cached ext4 root, and how much memory
# the build takes. For layers of 10k / 50k / 100k small files (1,000 per directory) and one of 256 MiB in
# 64 files, it times `tkbox images resolve oci:...` into an empty cache (flatten with the diff_id check,
# mkfs.ext4 -d, debugfs fix-ups) and prints entries/s, MiB/s and the peak RSS of the build (GNU time's %M:
# the largest of tkbox and the tools it waited for). Then a hostile layer of issue 9: time and peak RSS until
# a 1,000,000-file flat directory is refused. It prints figures and asserts nothing.
#   bench/image.sh [BUILD_DIR]
set -eu
B=${1:-build}
CLI=$B/tkbox
[ -x "$CLI" ] || CLI=$B/tests/image/tkbox-image-cli
[ -x "$CLI" ] || { echo "missing $B/tkbox: build first (ninja -C $B)" >&2; exit 2; }
for p in python3 /usr/bin/time; do
	command -v "$p" >/dev/null 2>&1 || { echo "missing $p" >&2; exit 2; }
done
WORK=$(mktemp -d /tmp/tkbox-image-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

echo "== machine"
echo "cpus: $(nproc)  load average: $(cut -d' ' -f1-3 /proc/loadavg)  uid: $(id -u) (as non-root every inode gets a debugfs fix-up)"

python3 - "$WORK/layout" <<'PY'
import gzip, hashlib, io, json, os, sys, tarfile, zlib
out = sys.argv[1]
blobs = os.path.join(out, "blobs", "sha256")
os.makedirs(blobs)
def put(b):
    d = hashlib.sha256(b).hexdigest()
    open(os.path.join(blobs, d), "wb").write(b)
    return "sha256:" + d, len(b)
def ustar(name, size=0, typeflag=b"0", mode=b"0000644"):
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = mode + b"\0"; h[108:116] = b"0000000\0"; h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size; h[136:148] = b"14540000000\0"; h[148:156] = b"        "
    h[156:157] = typeflag; h[257:263] = b"ustar\0"; h[263:265] = b"00"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)
def layer(entries):
    sha, z, parts = hashlib.sha256(), zlib.compressobj(1, zlib.DEFLATED, 31), []
    for b in entries:
        sha.update(b); parts.append(z.compress(b))
    end = b"\0" * 1024
    sha.update(end); parts.append(z.compress(end)); parts.append(z.flush())
    return "sha256:" + sha.hexdigest(), b"".join(parts)
def small_files(n, per_dir=1000, size=100):
    data = b"x" * size + b"\0" * (512 - size)
    for d in range((n + per_dir - 1) // per_dir):
        yield ustar(b"d%04d/" % d, typeflag=b"5", mode=b"0000755")
        for i in range(min(per_dir, n - d * per_dir)):
            yield ustar(b"d%04d/f%05d" % (d, i), size) + data
def big_files(n, size):
    chunk = os.urandom(1 << 20)
    for i in range(n):
        yield ustar(b"big%02d" % i, size)
        for _ in range(size >> 20):
            yield chunk
index = []
for name, gen in (("n10k", small_files(10000)), ("n50k", small_files(50000)), ("n100k", small_files(100000)),
                  ("bytes256m", big_files(64, 4 << 20)), ("flat1m", (ustar(b"f%07d" % i) for i in range(1000000)))):
    diff, blob = layer(gen)
    cd, cs = put(json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                             "rootfs": {"type": "layers", "diff_ids": [diff]}}).encode())
    ld, ls = put(blob)
    md, ms = put(json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": ld, "size": ls}]}).encode())
    index.append({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms,
                  "annotations": {"org.opencontainers.image.ref.name": name}})
json.dump({"schemaVersion": 2, "manifests": index}, open(os.path.join(out, "index.json"), "w"))
PY

# build NAME ENTRIES BYTES: one resolve into an empty cache
build() {
	S=$WORK/state-$1
	t0=$(date +%s%N)
	if /usr/bin/time -o "$WORK/time" -f "%M" "$CLI" images --state "$S" resolve "oci:$WORK/layout:$1" >"$WORK/out" 2>"$WORK/err"; then rc=0; else rc=$?; fi
	t1=$(date +%s%N)
	ms=$(( (t1 - t0) / 1000000 ))
	rss=$(tail -n 1 "$WORK/time")
	if [ "$rc" = 0 ]; then
		ext4=$(awk '$1 == "ext4" {print $2}' "$WORK/out")
		echo "$1: $2 entries, $(($3 >> 10)) KiB of file data in $ms ms: $(( $2 * 1000 / (ms + 1) )) entries/s, $(( ($3 >> 10) * 1000 / (ms + 1) )) KiB/s; peak RSS $rss KiB (largest process of the build); ext4 $(( $(stat -c %s "$ext4") >> 20 )) MiB (sparse)"
	else
		echo "$1: refused after $ms ms, peak RSS $rss KiB: $(cut -c1-160 "$WORK/err")"
	fi
	rm -rf "$S"
}
echo "== builds into an empty cache (flatten + diff_id check + mkfs.ext4 -d + debugfs)"
build n10k 10000 $((10000 * 100))
build n50k 50000 $((50000 * 100))
build n100k 100000 $((100000 * 100))
build bytes256m 64 $((256 << 20))
echo "== a hostile layer: 1,000,000 files in one directory (refused at FLATTEN_MAX_DIR_ENTRIES)"
build flat1m 1000000 0
