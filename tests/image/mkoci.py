#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Build the OCI layouts and archives the image e2e test pushes and reads.

usage: mkoci.py OUTDIR BUSYBOX

Writes, under OUTDIR:
  layout/            one OCI image layout holding every test image, named by
                     org.opencontainers.image.ref.name:
                       test        busybox base + a layer (zstd) with whiteouts,
                                   an opaque dir, hardlink, owners, setuid, device
                       multi       an index: linux/amd64 and linux/arm64
                       evil-dotdot, evil-abs, evil-symlink, evil-size, evil-hardlink
  docker.tar         the "test" image as `docker save` writes it (legacy layout)
  docker-oci.tar     the same as Docker 25+ writes it (blobs/ and layer.tar symlinks)
  oci.tar            layout/ as an oci-archive
Only the Python standard library and the zstd program are used.
"""
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile

OUT, BUSYBOX = sys.argv[1], sys.argv[2]
LAYOUT = os.path.join(OUT, "layout")
BLOBS = os.path.join(LAYOUT, "blobs", "sha256")
os.makedirs(BLOBS, exist_ok=True)


def put_blob(data):
    d = hashlib.sha256(data).hexdigest()
    with open(os.path.join(BLOBS, d), "wb") as f:
        f.write(data)
    return "sha256:" + d, len(data)


def ti(name, kind=tarfile.REGTYPE, mode=0o644, uid=0, gid=0, size=0, linkname=""):
    t = tarfile.TarInfo(name)
    t.type, t.mode, t.uid, t.gid, t.size, t.linkname = kind, mode, uid, gid, size, linkname
    t.mtime = 1700000000
    return t


def mktar(entries):
    """entries: list of (TarInfo, bytes or None)."""
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for t, data in entries:
            if data is not None:
                t.size = len(data)
                tf.addfile(t, io.BytesIO(data))
            else:
                tf.addfile(t)
    return bio.getvalue()


def gz(data):
    return gzip.compress(data, mtime=0)


def zst(data):
    return subprocess.run(["zstd", "-q", "-c"], input=data, stdout=subprocess.PIPE, check=True).stdout


def dir_entry(name, mode=0o755, uid=0, gid=0):
    return (ti(name, tarfile.DIRTYPE, mode, uid, gid), None)


def file_entry(name, data, mode=0o644, uid=0, gid=0):
    return (ti(name, tarfile.REGTYPE, mode, uid, gid), data)


def base_layer(arch="amd64"):
    bb = open(BUSYBOX, "rb").read()
    e = [dir_entry("bin"), dir_entry("etc"), dir_entry("tmp", 0o1777), dir_entry("opt"), dir_entry("opt/opq"),
         file_entry("bin/busybox", bb, 0o755),
         (ti("bin/sh", tarfile.SYMTYPE, 0o777, linkname="busybox"), None),
         file_entry("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/app:/bin/sh\n"),
         file_entry("etc/removed", b"this file is whited out by layer 2\n"),
         dir_entry("etc/gone"), file_entry("etc/gone/inner", b"below a whited-out dir\n"),
         file_entry("opt/opq/old", b"hidden by the opaque dir\n"),
         file_entry("arch", arch.encode() + b"\n")]
    return mktar(e)


def top_layer():
    e = [dir_entry("app", 0o750, 1000, 1000),
         file_entry("app/owned", b"owned by 1000:1000 mode 0640\n", 0o640, 1000, 1000),
         file_entry("app/suid", b"#!/bin/sh\n", 0o4755),
         (ti("app/hard", tarfile.LNKTYPE, 0o644, linkname="etc/passwd"), None),
         (ti("app/link", tarfile.SYMTYPE, 0o777, linkname="/etc/passwd"), None),
         (ti("app/null", tarfile.CHRTYPE, 0o666), None),
         (ti(".wh.nothing-here", tarfile.REGTYPE), b""),
         (ti("etc/.wh.removed", tarfile.REGTYPE), b""),
         (ti("etc/.wh.gone", tarfile.REGTYPE), b""),
         dir_entry("opt/opq"),
         (ti("opt/opq/.wh..wh..opq", tarfile.REGTYPE), b""),
         file_entry("opt/opq/new", b"after the opaque dir\n"),
         file_entry("etc/hello", b"hello from layer 2\n")]
    return mktar(e)


def image(layers, arch="amd64", env=None, workdir="/app", user="1000:1000"):
    """layers: list of (media_type, compressed bytes, uncompressed bytes). Returns manifest descriptor."""
    cfg = {"architecture": arch, "os": "linux",
           "config": {"Env": env or ["PATH=/bin", "GREETING=hello world"], "WorkingDir": workdir, "User": user},
           "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(u).hexdigest() for _, _, u in layers]}}
    cd, cs = put_blob(json.dumps(cfg).encode())
    ldesc = []
    for mt, data, _ in layers:
        d, s = put_blob(data)
        ldesc.append({"mediaType": mt, "digest": d, "size": s})
    man = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
           "layers": ldesc}
    md, ms = put_blob(json.dumps(man).encode())
    return {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms,
            "platform": {"architecture": arch, "os": "linux"}}, cfg


GZ = "application/vnd.oci.image.layer.v1.tar+gzip"
ZST = "application/vnd.oci.image.layer.v1.tar+zstd"
TAR = "application/vnd.oci.image.layer.v1.tar"


def named(desc, name):
    d = dict(desc)
    d["annotations"] = {"org.opencontainers.image.ref.name": name}
    return d


index = []
b, t = base_layer(), top_layer()
test_desc, test_cfg = image([(GZ, gz(b), b), (ZST, zst(t), t)])
index.append(named(test_desc, "test"))

# multi-platform: an index blob with two manifests
amd, _ = image([(GZ, gz(base_layer("amd64")), base_layer("amd64"))], "amd64")
arm, _ = image([(GZ, gz(base_layer("arm64")), base_layer("arm64"))], "arm64")
idx = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [amd, arm]}
idd, ids = put_blob(json.dumps(idx).encode())
index.append({"mediaType": "application/vnd.oci.image.index.v1+json", "digest": idd, "size": ids,
              "annotations": {"org.opencontainers.image.ref.name": "multi"}})


def raw_header(name, size_field, typeflag=b"0"):
    """A ustar header whose 12-byte size field is given raw (for base-256 sizes)."""
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = size_field
    h[136:148] = b"14540000000\0"
    h[156:157] = typeflag
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[148:156] = b"        "
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


evil = {
    "evil-dotdot": mktar([file_entry("../escape", b"x")]),
    "evil-abs": mktar([file_entry("/etc/evil", b"x")]),
    "evil-symlink": None,
    "evil-hardlink": mktar([(ti("pw", tarfile.LNKTYPE, linkname="../../etc/passwd"), None)]),
    # a 1 TiB file claimed in base-256: refused from the header, before any data is read
    "evil-size": raw_header(b"huge", b"\x80" + (1 << 40).to_bytes(11, "big")) + bytes(1024),
}
for name, tar in evil.items():
    if name == "evil-symlink":
        l1 = mktar([(ti("escape", tarfile.SYMTYPE, 0o777, linkname="/tmp"), None)])
        l2 = mktar([file_entry("escape/pwned", b"x")])
        desc, _ = image([(GZ, gz(l1), l1), (GZ, gz(l2), l2)])
    else:
        desc, _ = image([(GZ, gz(tar), tar)])
    index.append(named(desc, name))

with open(os.path.join(LAYOUT, "index.json"), "w") as f:
    json.dump({"schemaVersion": 2, "manifests": index}, f)
with open(os.path.join(LAYOUT, "oci-layout"), "w") as f:
    json.dump({"imageLayoutVersion": "1.0.0"}, f)

# oci-archive: the layout as a tar
with tarfile.open(os.path.join(OUT, "oci.tar"), "w") as tf:
    for n in ("oci-layout", "index.json"):
        tf.add(os.path.join(LAYOUT, n), n)
    for n in sorted(os.listdir(BLOBS)):
        tf.add(os.path.join(BLOBS, n), "blobs/sha256/" + n)

# docker save (legacy): <config hex>.json, <id>/layer.tar (uncompressed), manifest.json
with tarfile.open(os.path.join(OUT, "docker.tar"), "w") as tf:
    cfgb = json.dumps(test_cfg).encode()
    ch = hashlib.sha256(cfgb).hexdigest()
    layers = []
    for i, data in enumerate((b, t)):
        lid = hashlib.sha256(b"layer%d" % i).hexdigest()
        tf.addfile(ti(lid, tarfile.DIRTYPE, 0o755), None)
        tf.addfile(ti(lid + "/layer.tar", size=len(data)), io.BytesIO(data))
        layers.append(lid + "/layer.tar")
    tf.addfile(ti(ch + ".json", size=len(cfgb)), io.BytesIO(cfgb))
    m = json.dumps([{"Config": ch + ".json", "RepoTags": ["test:1"], "Layers": layers}]).encode()
    tf.addfile(ti("manifest.json", size=len(m)), io.BytesIO(m))
# docker save (Docker 25+): blobs/sha256/<hex> plus legacy <id>/layer.tar symlinks into blobs/
with tarfile.open(os.path.join(OUT, "docker-oci.tar"), "w") as tf:
    cfgb = json.dumps(test_cfg).encode()
    ch = hashlib.sha256(cfgb).hexdigest()
    layers = []
    for i, data in enumerate((b, t)):
        h = hashlib.sha256(data).hexdigest()
        tf.addfile(ti("blobs/sha256/" + h, size=len(data)), io.BytesIO(data))
        lid = hashlib.sha256(b"layer%d" % i).hexdigest()
        tf.addfile(ti(lid, tarfile.DIRTYPE, 0o755), None)
        tf.addfile(ti(lid + "/layer.tar", tarfile.SYMTYPE, 0o777, linkname="../blobs/sha256/" + h), None)
        layers.append(lid + "/layer.tar")
    tf.addfile(ti("blobs/sha256/" + ch, size=len(cfgb)), io.BytesIO(cfgb))
    m = json.dumps([{"Config": "blobs/sha256/" + ch, "RepoTags": ["test:1"], "Layers": layers}]).encode()
    tf.addfile(ti("manifest.json", size=len(m)), io.BytesIO(m))
print(json.dumps({"test": test_desc["digest"], "multi": idd}))
