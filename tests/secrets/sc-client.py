#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# What a box sends for tests/secrets/*.sh and bench/egress.sh (installed in each box as /tmp/sc.py): exact
# requests through the box's proxy (127.0.0.1:3128), https by CONNECT and TLS (the box's own trust: the per-box
# CA the guest installed; SC_EXTRA_CA names one more file), http in absolute form. Every case prints one JSON
# line. Header values and bodies have $NAME expanded from the box's env, so a placeholder is written "$GH".
#   fetch CASE URL [HEADER: VALUE]...   one request (Connection: close); "raw": base64 of every byte that came
#                                       back after the CONNECT (the test decodes it on the host), "status", "rule".
#                                       Pseudo-headers: X-SC-Method, X-SC-Body, X-SC-Target (the request target
#                                       as sent), X-SC-Host (the Host field as sent)
#   leaks URL SPEC...                   one connection per SPEC "case=where:form:what[:split]":
#       where  query | auth (Authorization: Bearer ..) | xheader (X-Data) | body | chunked (split across chunks)
#       form   raw upper lower hex HEX b64 b64url b64off1 b64off2 pct pcthex json jsonb64
#       what   ph:NAME (the placeholder in $NAME) | val:HEX (a value, each byte +1, so that no command line
#              holds it) | ctl (a random token that is no secret, ctl_<32 hex>: must pass)
#       split  N: the request written N bytes at a time (TCP_NODELAY, a pause between writes)
#   failclosed URL                      reads a line (the filler that makes `tkbox exec -i` stream), opens the
#                                       tunnel and TLS, prints {"ready": true}, reads another line, then sends a
#                                       request with Authorization: Bearer $GH and prints what came back
#   keepalive URL N [HEADER: VALUE]...  one tunnel, N requests one after another: p50/p99 ms (bench)
#   big URL [HEADER: VALUE]...          one request with a large body: bytes and MiB/s (bench)
import base64
import json
import os
import random
import socket
import ssl
import sys
import time

PROXY = ("127.0.0.1", 3128)


def out(obj):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def split_url(url):
    scheme, _, rest = url.partition("://")
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    return scheme, host, int(port or (443 if scheme == "https" else 80)), "/" + path


def read_head(s):
    data = b""
    while b"\r\n\r\n" not in data:
        c = s.recv(65536)
        if not c:
            break
        data += c
    return data


def status_rule(data):
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    st, rule = None, None
    if head and head[0].startswith("HTTP/1."):
        p = head[0].split(" ")
        st = int(p[1]) if len(p) > 1 and p[1].isdigit() else None
    for ln in head[1:]:
        k, _, v = ln.partition(":")
        if k.strip().lower() == "tkbox-rule":
            rule = v.strip()
    return st, rule


def ssl_ctx():
    ctx = ssl.create_default_context()
    extra = os.environ.get("SC_EXTRA_CA")
    if extra:
        ctx.load_verify_locations(extra)
    return ctx


def open_conn(url, timeout=60):
    """A socket to write the request to: (sock, info). For https: CONNECT + TLS; info has connect status/rule."""
    scheme, host, port, _ = split_url(url)
    s = socket.create_connection(PROXY, timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    info = {}
    if scheme == "https":
        auth = "%s:%d" % (host, port)
        s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (auth, auth)).encode())
        head = read_head(s)
        info["connect_status"], info["connect_rule"] = status_rule(head)
        if info["connect_status"] != 200:
            info["connect_body"] = head.decode("utf-8", "replace")[:400]
            return None, info
        s = ssl_ctx().wrap_socket(s, server_hostname=host)
        s.settimeout(timeout)
        info["tls"] = "ok"
    return s, info


def request_bytes(url, method, hdrs, body=b"", chunks=None, target=None):
    scheme, host, port, path = split_url(url)
    if target is None:
        target = path if scheme == "https" else url
    hostv = host if port in (80, 443) else "%s:%d" % (host, port)
    lines = ["%s %s HTTP/1.1" % (method, target), "Host: " + hostv, "Connection: close"]
    lines += hdrs
    if chunks is not None:
        lines.append("Transfer-Encoding: chunked")
        b = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    else:
        if body or method in ("POST", "PUT"):
            lines.append("Content-Length: %d" % len(body))
        b = body
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape") + b


def read_all(s):
    data = b""
    try:
        while True:
            c = s.recv(65536)
            if not c:
                break
            data += c
    except (socket.timeout, OSError, ssl.SSLError) as e:
        return data, "%s: %s" % (type(e).__name__, e)
    return data, None


def send_split(s, data, split):
    if not split:
        s.sendall(data)
        return
    for i in range(0, len(data), split):
        s.sendall(data[i:i + split])
        time.sleep(0.002)


def exchange(case, url, payload, split=0):
    r = {"case": case}
    try:
        s, info = open_conn(url)
        r.update(info)
        if s is None:
            r["status"], r["rule"] = info.get("connect_status"), info.get("connect_rule")
            r["raw"] = ""
            return r
        try:
            send_split(s, payload, split)
        except OSError as e:
            r["send_error"] = "%s: %s" % (type(e).__name__, e)
        data, err = read_all(s)
        s.close()
    except (OSError, ssl.SSLError) as e:
        r["error"] = "%s: %s" % (type(e).__name__, e)
        return r
    r["status"], r["rule"] = status_rule(data)
    r["raw"] = base64.b64encode(data).decode()
    r["body"] = data.split(b"\r\n\r\n", 1)[-1][:600].decode("utf-8", "replace")
    if err:
        r["error"] = err
    return r


def expand(text):
    return os.path.expandvars(text)


def mode_fetch(case, url, hdrs):
    hdrs = [expand(h) for h in hdrs]
    method = "GET"
    body = b""
    for h in list(hdrs):
        if h.lower().startswith("x-sc-method:"):
            method = h.split(":", 1)[1].strip()
            hdrs.remove(h)
        elif h.lower().startswith("x-sc-body:"):
            body = h.split(":", 1)[1].strip().encode()
            hdrs.remove(h)
    target, hostv = None, None
    for h in list(hdrs):
        if h.lower().startswith("x-sc-target:"):
            target = h.split(":", 1)[1].strip()
            hdrs.remove(h)
        elif h.lower().startswith("x-sc-host:"):
            hostv = h.split(":", 1)[1].strip()
            hdrs.remove(h)
    req = request_bytes(url, method, hdrs, body, target=target)
    if hostv is not None:
        head, sep, rest = req.partition(b"\r\n\r\n")
        lines = [b"Host: " + hostv.encode() if ln.lower().startswith(b"host:") else ln for ln in head.split(b"\r\n")]
        req = b"\r\n".join(lines) + sep + rest
    out(exchange(case, url, req))


def encode(form, tok):
    if form == "raw":
        return tok
    if form == "upper":
        return tok.upper()
    if form == "lower":
        return tok.lower()
    if form == "hex":
        return tok.hex().encode()
    if form == "HEX":
        return tok.hex().upper().encode()
    if form == "b64":
        return base64.b64encode(tok)
    if form == "b64url":
        return base64.urlsafe_b64encode(tok)
    if form == "b64off1":
        return base64.b64encode(b"x" + tok)
    if form == "b64off2":
        return base64.b64encode(b"xy" + tok)
    if form == "pct":
        return "".join("%%%02X" % c for c in tok).encode()
    if form == "pcthex":
        return "".join("%%%02x" % c for c in tok.hex().encode()).encode()
    if form == "json":
        return "".join("\\u%04x" % c for c in tok).encode()
    if form == "jsonb64":
        return "".join("\\u%04X" % c for c in base64.b64encode(tok)).encode()
    raise SystemExit("unknown form " + form)


def token(what):
    if what.startswith("ph:"):
        return os.environ.get(what[3:], "").encode()
    if what.startswith("val:"):
        return bytes((c - 1) % 256 for c in bytes.fromhex(what[4:]))
    return ("ctl_" + "".join(random.choice("0123456789abcdef") for _ in range(32))).encode()


def mode_leaks(url, specs):
    for spec in specs:
        case, _, rest = spec.partition("=")
        parts = rest.split(":")
        where, form = parts[0], parts[1]
        what = ":".join(parts[2:4]) if parts[2] in ("ph", "val") else parts[2]
        split = int(parts[4]) if parts[2] in ("ph", "val") and len(parts) > 4 else \
            (int(parts[3]) if parts[2] == "ctl" and len(parts) > 3 else 0)
        enc = encode(form, token(what))
        u = url.rstrip("/") + "/leak/" + case
        hdrs, body, chunks = [], b"", None
        if where == "query":
            u += "?t=" + enc.decode("latin-1")
        elif where == "auth":
            hdrs.append("Authorization: Bearer " + enc.decode("latin-1"))
        elif where == "xheader":
            hdrs.append("X-Data: " + enc.decode("latin-1"))
        elif where == "body":
            body = b'{"note": "' + enc + b'"}'
        elif where == "chunked":
            b = b"data=" + enc + b"&end=1"
            chunks = [b[i:i + 5] for i in range(0, len(b), 5)]
        method = "POST" if where in ("body", "chunked") else "GET"
        r = exchange(case, u, request_bytes(u, method, hdrs, body, chunks), split)
        r.pop("raw", None)
        out(r)
        time.sleep(0.06)


def mode_failclosed(url):
    sys.stdin.buffer.readline()  # the filler
    r = {"case": "failclosed"}
    try:
        s, info = open_conn(url, timeout=120)
    except (OSError, ssl.SSLError) as e:
        out({"case": "failclosed", "error": "%s: %s" % (type(e).__name__, e)})
        return
    r.update(info)
    out({"ready": True, "info": info})
    if s is None:
        out(r)
        return
    sys.stdin.buffer.readline()
    try:
        s.sendall(request_bytes(url.rstrip("/") + "/failclosed", "GET", ["Authorization: Bearer " + expand("$GH")]))
        data, err = read_all(s)
    except (OSError, ssl.SSLError) as e:
        data, err = b"", "%s: %s" % (type(e).__name__, e)
    r["status"], r["rule"] = status_rule(data)
    r["body"] = data.split(b"\r\n\r\n", 1)[-1][:600].decode("utf-8", "replace")
    r["raw"] = base64.b64encode(data).decode()
    r["error"] = err
    out(r)


def read_response(f):
    """One Content-Length response from a buffered reader: (status, body length)."""
    line = f.readline()
    st = int(line.split()[1])
    n = 0
    while True:
        h = f.readline()
        if h in (b"\r\n", b""):
            break
        k, _, v = h.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v)
    left = n
    while left > 0:
        c = f.read(min(left, 1 << 20))
        if not c:
            raise OSError("short body")
        left -= len(c)
    return st, n


def mode_keepalive(url, n, hdrs):
    hdrs = [expand(h) for h in hdrs]
    s, info = open_conn(url)
    if s is None:
        out({"case": "keepalive", "error": "connect", "info": info})
        return
    f = s.makefile("rb")
    req = request_bytes(url, "GET", hdrs).replace(b"Connection: close\r\n", b"")
    ms = []
    for _ in range(n):
        t0 = time.monotonic()
        s.sendall(req)
        st, _ = read_response(f)
        ms.append((time.monotonic() - t0) * 1000)
        if st != 200:
            out({"case": "keepalive", "error": "status %d" % st})
            return
    ms.sort()
    out({"case": "keepalive", "n": n, "p50_ms": round(ms[len(ms) // 2], 3),
         "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 3)})


def mode_big(url, hdrs):
    hdrs = [expand(h) for h in hdrs]
    s, info = open_conn(url, timeout=600)
    if s is None:
        out({"case": "big", "error": "connect", "info": info})
        return
    f = s.makefile("rb")
    t0 = time.monotonic()
    s.sendall(request_bytes(url, "GET", hdrs))
    st, n = read_response(f)
    secs = time.monotonic() - t0
    out({"case": "big", "status": st, "bytes": n, "seconds": round(secs, 4),
         "mib_s": round(n / 1048576 / secs, 2) if secs > 0 else None})


def main():
    m, a = sys.argv[1], sys.argv[2:]
    if m == "fetch":
        mode_fetch(a[0], a[1], a[2:])
    elif m == "leaks":
        mode_leaks(a[0], a[1:])
    elif m == "failclosed":
        mode_failclosed(a[0])
    elif m == "keepalive":
        mode_keepalive(a[0], int(a[1]), a[2:])
    elif m == "big":
        mode_big(a[0], a[1:])
    else:
        sys.exit("unknown mode " + m)


main()
