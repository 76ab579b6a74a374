#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Build the hostile and edge-case images tests/image/e2e-image-bounds.sh pulls.

usage: mkevil.py OUTDIR

Writes OUTDIR/layout (an OCI image layout; images named by
org.opencontainers.image.ref.name), OUTDIR/bad-layout (an index naming a
manifest whose bytes were altered), OUTDIR/junk.tar and OUTDIR/junk-huge.tar
(oci-archives laden with members no index reaches), and prints a JSON map of
the manifest digests. Images:
  victim      one layer: /etc/owner "victim"
  attacker    the victim's config bytes (same config digest) with its own layer:
              /etc/owner "attacker" (its diff_id is not the config's)
  flat        1,000,000 empty files in one directory (a ~7 MB gzip layer)
  hugepath    100,000 files with 4 KB paths, 1,000 per directory
  longname    one file whose name quoted for debugfs is longer than its line buffer
  dotslash    an entry named ".//etc/x"
  workdir     WorkingDir "/tmp\\nfrom_cache yes"
  manyenv     513 Env entries (one past IMAGE_MAX_ENV)
  nested      an index whose entry is another index
Only the Python standard library is used.
"""
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import zlib

OUT = sys.argv[1]
GZ = "application/vnd.oci.image.layer.v1.tar+gzip"
MT_MAN = "application/vnd.oci.image.manifest.v1+json"
MT_IDX = "application/vnd.oci.image.index.v1+json"


class Layout:
    def __init__(self, path):
        self.path = path
        self.blobs = os.path.join(path, "blobs", "sha256")
        os.makedirs(self.blobs, exist_ok=True)
        self.index = []

    def put(self, data):
        d = hashlib.sha256(data).hexdigest()
        with open(os.path.join(self.blobs, d), "wb") as f:
            f.write(data)
        return "sha256:" + d, len(data)

    def write_index(self):
        with open(os.path.join(self.path, "index.json"), "w") as f:
            json.dump({"schemaVersion": 2, "manifests": self.index}, f)
        with open(os.path.join(self.path, "oci-layout"), "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)


def config_bytes(diff_ids, env=None, workdir="/", user="0:0"):
    cfg = {"architecture": "amd64", "os": "linux",
           "config": {"Env": env or ["PATH=/bin"], "WorkingDir": workdir, "User": user},
           "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    return json.dumps(cfg).encode()


def manifest(lay, cfgb, layers):
    """layers: list of compressed blobs. Returns (descriptor, manifest bytes)."""
    cd, cs = lay.put(cfgb)
    ld = []
    for data in layers:
        d, s = lay.put(data)
        ld.append({"mediaType": GZ, "digest": d, "size": s})
    man = json.dumps({"schemaVersion": 2, "mediaType": MT_MAN,
                      "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
                      "layers": ld}).encode()
    md, ms = lay.put(man)
    return {"mediaType": MT_MAN, "digest": md, "size": ms, "platform": {"architecture": "amd64", "os": "linux"}}


def named(desc, name):
    d = dict(desc)
    d["annotations"] = {"org.opencontainers.image.ref.name": name}
    return d


def tar_of(files):
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in files:
            t = tarfile.TarInfo(name)
            t.mtime = 1700000000
            if data is None:
                t.type = tarfile.DIRTYPE
                t.mode = 0o755
                tf.addfile(t)
            else:
                t.size = len(data)
                t.mode = 0o644
                tf.addfile(t, io.BytesIO(data))
    return bio.getvalue()


def simple(lay, name, files, **cfg):
    raw = tar_of(files)
    desc = manifest(lay, config_bytes(["sha256:" + hashlib.sha256(raw).hexdigest()], **cfg), [gzip.compress(raw, mtime=0)])
    lay.index.append(named(desc, name))
    return desc


def ustar(name, size=0, typeflag=b"0", mode=b"0000644"):
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = mode + b"\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"14540000000\0"
    h[148:156] = b"        "
    h[156:157] = typeflag
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def pad(n):
    return b"\0" * ((512 - n % 512) % 512)


class Stream:
    """A layer written as it is generated: sha256 of the tar (the diff_id) and a gzip of it."""

    def __init__(self):
        self.sha = hashlib.sha256()
        self.z = zlib.compressobj(6, zlib.DEFLATED, 31)
        self.out = []

    def write(self, b):
        self.sha.update(b)
        self.out.append(self.z.compress(b))

    def finish(self):
        self.write(b"\0" * 1024)
        self.out.append(self.z.flush())
        return "sha256:" + self.sha.hexdigest(), b"".join(self.out)


def flat_layer(n):
    s = Stream()
    s.write(ustar(b"d/", typeflag=b"5", mode=b"0000755"))
    batch = []
    for i in range(n):
        batch.append(ustar(b"d/f%07d" % i))
        if len(batch) == 4096:
            s.write(b"".join(batch))
            batch = []
    s.write(b"".join(batch))
    return s.finish()


def pax_entry(path):
    rec = b" path=" + path + b"\n"
    n = len(rec) + 1
    while len(b"%d" % n) + len(rec) != n:
        n = len(b"%d" % n) + len(rec)
    body = b"%d" % n + rec
    return ustar(b"PaxHeader", len(body), b"x") + body + pad(len(body)) + ustar(path[-99:])


def hugepath_layer(dirs, per_dir):
    s = Stream()
    prefix = b"/".join([b"p" * 250] * 14)
    for d in range(dirs):
        dname = prefix + b"/" + (b"%03d" % d) * 80
        s.write(pax_entry(dname + b"/")[:-512] + ustar((dname + b"/")[-99:], typeflag=b"5", mode=b"0000755"))
        batch = []
        for i in range(per_dir):
            batch.append(pax_entry(dname + b"/" + (b"%05d" % i) * 50))
        s.write(b"".join(batch))
    return s.finish()


lay = Layout(os.path.join(OUT, "layout"))
digests = {}

# ---- section 3: the poisoning pair ----
victim_raw = tar_of([("etc", None), ("etc/owner", b"victim\n")])
attacker_raw = tar_of([("etc", None), ("etc/owner", b"attacker\n")])
victim_cfg = config_bytes(["sha256:" + hashlib.sha256(victim_raw).hexdigest()])
v = manifest(lay, victim_cfg, [gzip.compress(victim_raw, mtime=0)])
a = manifest(lay, victim_cfg, [gzip.compress(attacker_raw, mtime=0)])
lay.index += [named(v, "victim"), named(a, "attacker")]
digests["victim"], digests["attacker"] = v["digest"], a["digest"]

# ---- section 4: bounded builds ----
fd, fz = flat_layer(1000000)
desc = manifest(lay, config_bytes([fd]), [fz])
lay.index.append(named(desc, "flat"))
hd, hz = hugepath_layer(100, 1000)
desc = manifest(lay, config_bytes([hd]), [hz])
lay.index.append(named(desc, "hugepath"))
quoted = b"/".join([b'"' * 255] * 16)
s = Stream()
s.write(pax_entry(quoted))
ld, lz = s.finish()
lay.index.append(named(manifest(lay, config_bytes([ld]), [lz]), "longname"))
s = Stream()
s.write(ustar(b".//etc/x", 2) + b"x\n" + pad(2))
dd, dz = s.finish()
lay.index.append(named(manifest(lay, config_bytes([dd]), [dz]), "dotslash"))

# ---- section 5: config strings, Env cap, a nested index ----
simple(lay, "workdir", [("etc/x", b"x\n")], workdir="/tmp\nfrom_cache yes")
simple(lay, "manyenv", [("etc/x", b"x\n")], env=["V%d=1" % i for i in range(513)])
inner = {"schemaVersion": 2, "mediaType": MT_IDX, "manifests": [v]}
idd, ids = lay.put(json.dumps(inner).encode())
outer = {"schemaVersion": 2, "mediaType": MT_IDX,
         "manifests": [{"mediaType": MT_IDX, "digest": idd, "size": ids,
                        "platform": {"architecture": "amd64", "os": "linux"}}]}
od, os_ = lay.put(json.dumps(outer).encode())
lay.index.append({"mediaType": MT_IDX, "digest": od, "size": os_,
                  "annotations": {"org.opencontainers.image.ref.name": "nested"}})
digests["nested"] = od
lay.write_index()

# ---- a local layout whose manifest bytes were changed after the index named them ----
bad = Layout(os.path.join(OUT, "bad-layout"))
bd = manifest(bad, victim_cfg, [gzip.compress(victim_raw, mtime=0)])
bad.index.append(named(bd, "victim"))
with open(os.path.join(bad.blobs, bd["digest"][7:]), "ab") as f:
    f.write(b" ")
bad.write_index()


# ---- oci-archives laden with junk no index reaches ----
def junk_archive(path, index_entries, extra_blobs):
    with tarfile.open(path, "w") as tf:
        def add(name, data):
            t = tarfile.TarInfo(name)
            t.size = len(data)
            t.mtime = 1700000000
            tf.addfile(t, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", json.dumps({"schemaVersion": 2, "manifests": index_entries}).encode())
        for name, data in extra_blobs:
            add(name, data)
        # junk: 64 x 4 MiB members named like blobs, and a 256 MiB one
        for i in range(64):
            j = (b"junk %d " % i) * (4 << 20 >> 8)
            j = j[: 4 << 20]
            add("blobs/sha256/" + hashlib.sha256(j).hexdigest(), j)
        big = bytes(256 << 20)
        add("blobs/sha256/" + hashlib.sha256(big).hexdigest(), big)


def blobs_of(layout, digests_):
    return [("blobs/sha256/" + d[7:], open(os.path.join(layout.blobs, d[7:]), "rb").read()) for d in digests_]


vm = json.load(open(os.path.join(lay.blobs, v["digest"][7:])))
junk_archive(os.path.join(OUT, "junk.tar"), [named(v, "victim")],
             blobs_of(lay, [v["digest"], vm["config"]["digest"]] + [l["digest"] for l in vm["layers"]]))
# an index that reaches a manifest declaring 3 x 12 GiB of layers: refused before any layer is read
hm = json.dumps({"schemaVersion": 2, "mediaType": MT_MAN,
                 "config": vm["config"],
                 "layers": [{"mediaType": GZ, "digest": "sha256:" + c * 64, "size": 12 << 30} for c in "abc"]}).encode()
hmd = "sha256:" + hashlib.sha256(hm).hexdigest()
junk_archive(os.path.join(OUT, "junk-huge.tar"),
             [{"mediaType": MT_MAN, "digest": hmd, "size": len(hm),
               "annotations": {"org.opencontainers.image.ref.name": "huge"}}],
             [("blobs/sha256/" + hmd[7:], hm)] + blobs_of(lay, [vm["config"]["digest"]]))
print(json.dumps(digests))
