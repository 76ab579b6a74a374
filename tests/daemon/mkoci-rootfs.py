#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Build a bootable busybox-static root as an OCI image layout (one gzip layer).

usage: mkoci-rootfs.py OUTDIR BUSYBOX [--user U] [--workdir D] [--env K=V]... [--name NAME]

OUTDIR becomes an OCI image layout (oci-layout, index.json, blobs/sha256/) whose
image NAME (default "latest", as org.opencontainers.image.ref.name) holds what
tests/e2e/mkimage.sh puts in its ext4: busybox, its applet links and the mount
points the guest agent uses. `tkbox run --image oci:OUTDIR` reads it through
src/image (cache, flattening, ext4); skopeo can push it or turn it into a
docker-archive. The output is byte-for-byte reproducible for the same busybox
and options (fixed mtimes, gzip without a timestamp), so the config digest and
the cached ext4 are reused across runs. Only the Python standard library.
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile

MTIME = 1700000000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("busybox")
    ap.add_argument("--user", default="")
    ap.add_argument("--workdir", default="")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--name", default="latest")
    a = ap.parse_args()

    bb = open(a.busybox, "rb").read()
    applets = subprocess.run([a.busybox, "--list-full"], stdout=subprocess.PIPE, check=True).stdout.decode().split()

    entries = []
    seen = set()

    def add_dir(name, mode=0o755, uid=0, gid=0):
        if name in seen:
            return
        seen.add(name)
        t = tarfile.TarInfo(name)
        t.type, t.mode, t.uid, t.gid, t.mtime = tarfile.DIRTYPE, mode, uid, gid, MTIME
        entries.append((t, None))

    def add_file(name, data, mode=0o644):
        t = tarfile.TarInfo(name)
        t.mode, t.size, t.mtime = mode, len(data), MTIME
        entries.append((t, data))

    def add_link(name, target):
        t = tarfile.TarInfo(name)
        t.type, t.mode, t.linkname, t.mtime = tarfile.SYMTYPE, 0o777, target, MTIME
        entries.append((t, None))

    for d in ["bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "root", "proc", "sys", "dev", "run", "workspace",
              "var"]:
        add_dir(d)
    add_dir("tmp", 0o1777)
    add_dir("var/tmp", 0o1777)
    if a.workdir and a.workdir != "/":
        parts = a.workdir.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            add_dir("/".join(parts[:i]))
    add_file("bin/busybox", bb, 0o755)
    for applet in sorted(set(applets)):
        if applet == "bin/busybox":
            continue
        parent = os.path.dirname(applet)
        if parent:
            add_dir(parent)
        add_link(applet, "/bin/busybox")
    add_file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/app:/bin/sh\n"
             b"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
    add_file("etc/group", b"root:x:0:\napp:x:1000:\nnogroup:x:65534:\n")
    add_file("etc/hosts", b"127.0.0.1 localhost box\n")
    add_file("etc/tkbox-image", b"built by tests/daemon/mkoci-rootfs.py\n")

    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for t, data in entries:
            tf.addfile(t, io.BytesIO(data) if data is not None else None)
    layer = bio.getvalue()
    layer_gz = gzip.compress(layer, mtime=0)

    blobs = os.path.join(a.out, "blobs", "sha256")
    os.makedirs(blobs, exist_ok=True)

    def put(data):
        d = hashlib.sha256(data).hexdigest()
        with open(os.path.join(blobs, d), "wb") as f:
            f.write(data)
        return "sha256:" + d, len(data)

    config = {"Env": a.env or ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]}
    if a.workdir:
        config["WorkingDir"] = a.workdir
    if a.user:
        config["User"] = a.user
    cfg = {"architecture": "amd64", "os": "linux", "config": config,
           "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}}
    cd, cs = put(json.dumps(cfg, sort_keys=True).encode())
    ld, ls = put(layer_gz)
    man = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": ld, "size": ls}]}
    md, ms = put(json.dumps(man, sort_keys=True).encode())
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms,
                            "annotations": {"org.opencontainers.image.ref.name": a.name}}]}
    with open(os.path.join(a.out, "index.json"), "w") as f:
        json.dump(index, f, sort_keys=True)
    with open(os.path.join(a.out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    print(md)


if __name__ == "__main__":
    main()
