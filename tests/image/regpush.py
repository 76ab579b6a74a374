#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Push one image (or index) of an OCI layout to a registry byte for byte.

usage: regpush.py HOST:PORT CA_PEM LAYOUT REFNAME REPO:TAG

Unlike skopeo it never rewrites anything: blobs and manifests go up exactly as
the layout holds them, indexes nested in indexes included (the e2e tests need
hostile images a well-behaved client would refuse to build). Loopback only:
HOST must be localhost or 127.0.0.1.
"""
import http.client
import json
import os
import ssl
import sys
import urllib.parse

HOSTPORT, CA, LAYOUT, REFNAME, DEST = sys.argv[1:6]
host, port = HOSTPORT.rsplit(":", 1)
if host not in ("localhost", "127.0.0.1"):
    sys.exit("regpush.py: loopback registries only")
REPO, TAG = DEST.rsplit(":", 1)
CTX = ssl.create_default_context(cafile=CA)


def req(method, path, body=None, headers=None):
    c = http.client.HTTPSConnection(host, int(port), context=CTX, timeout=120)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.getheader("Location"), data


def blob(digest):
    with open(os.path.join(LAYOUT, "blobs", "sha256", digest[7:]), "rb") as f:
        return f.read()


def push_blob(digest):
    st, _, _ = req("HEAD", "/v2/%s/blobs/%s" % (REPO, digest))
    if st == 200:
        return
    st, loc, data = req("POST", "/v2/%s/blobs/uploads/" % REPO)
    if st != 202:
        sys.exit("upload start: %d %s" % (st, data[:200]))
    u = urllib.parse.urlparse(urllib.parse.urljoin("https://%s/" % HOSTPORT, loc))
    q = u.query + ("&" if u.query else "") + "digest=" + urllib.parse.quote(digest)
    st, _, data = req("PUT", u.path + "?" + q, blob(digest), {"Content-Type": "application/octet-stream"})
    if st != 201:
        sys.exit("upload %s: %d %s" % (digest, st, data[:200]))


def push_manifest(desc, ref):
    body = blob(desc["digest"])
    doc = json.loads(body)
    if "manifests" in doc:
        for m in doc["manifests"]:
            push_manifest(m, m["digest"])
    else:
        push_blob(doc["config"]["digest"])
        for layer in doc["layers"]:
            push_blob(layer["digest"])
    mt = doc.get("mediaType") or desc["mediaType"]
    st, _, data = req("PUT", "/v2/%s/manifests/%s" % (REPO, ref), body, {"Content-Type": mt})
    if st != 201:
        sys.exit("manifest %s: %d %s" % (ref, st, data[:300]))


index = json.load(open(os.path.join(LAYOUT, "index.json")))
for d in index["manifests"]:
    if d.get("annotations", {}).get("org.opencontainers.image.ref.name") == REFNAME:
        push_manifest(d, TAG)
        break
else:
    sys.exit("no image named %s" % REFNAME)
