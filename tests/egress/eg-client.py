#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Raw requests to the box's proxy (127.0.0.1:3128) from inside a box, for tests/egress/*.sh and
# bench/egress.sh: exact bytes a stock client would not send (literal forms, bad framing, a wrong SNI), many
# sockets at once, timings. Each case prints one JSON line:
#   {"case", "status" (int or null), "rule" (Tkbox-Rule), "approval" (Tkbox-Approval), "body", "closed",
#    "error", ...}
# Modes:
#   connect CASE=AUTHORITY...          one CONNECT each (a 60 ms gap: under the door's record rate)
#   absolute CASE=URL...               one GET in absolute form each (Host from the URL)
#   raw CASE=HEX...                    these bytes each, then read the answer
#   tls CASE AUTHORITY SNI PATH        CONNECT, then TLS with this server name (system CAs), GET PATH
#   plain CASE AUTHORITY               CONNECT, then a line that is not TLS, then read what comes back
#   streams N AUTHORITY                hold N idle connections, then CONNECT on one more; close one, retry
#   parallel CASE=AUTHORITY...         all CONNECTs at once; one line each as it ends (up to 200 s)
#   conns N AUTHORITY [PAR]            N CONNECT + close, PAR at a time: per-connection ms, total s
#   sink AUTHORITY [LINE]              CONNECT, [send LINE,] read to the end: bytes and seconds from the first byte (bench)
#   source AUTHORITY BYTES             CONNECT, send BYTES, half-close, wait for the end: seconds (bench)
#   stdin-sink                         read stdin to the end: bytes and seconds from the first byte (bench)
import json
import socket
import ssl
import sys
import threading
import time

PROXY = ("127.0.0.1", 3128)  # the box's proxy
STALL_S = 30  # sink: a tunnel that sends nothing this long has stalled


def out(obj):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def read_response(s, timeout=60.0):
    """One HTTP response head and its Content-Length body, or what came before the close."""
    s.settimeout(timeout)
    data, res = b"", {"status": None, "rule": None, "approval": None, "body": "", "closed": False, "error": None}
    try:
        while b"\r\n\r\n" not in data:
            c = s.recv(65536)
            if not c:
                res["closed"] = True
                break
            data += c
        head, sep, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        if lines and lines[0].startswith("HTTP/1."):
            parts = lines[0].split(" ", 2)
            res["status"] = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
        hdrs = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        res["rule"], res["approval"] = hdrs.get("tkbox-rule"), hdrs.get("tkbox-approval")
        n = int(hdrs.get("content-length", "0") or 0) if sep else 0
        while sep and len(body) < n and res["status"] != 200:
            c = s.recv(65536)
            if not c:
                res["closed"] = True
                break
            body += c
        res["body"] = body.decode("utf-8", "replace")
        res["rest"] = body if res["status"] == 200 else b""
    except socket.timeout:
        res["error"] = "timeout"
    except OSError as e:
        res["error"] = "%s: %s" % (type(e).__name__, e)
        res["closed"] = True
    if not data and res["error"] is None:
        res["closed"] = True
    return res


def send_read(case, payload, timeout=60.0, keep=False):
    t0 = time.monotonic()
    try:
        s = socket.create_connection(PROXY, timeout=10)
        s.sendall(payload)
    except OSError as e:
        r = {"case": case, "status": None, "rule": None, "approval": None, "body": "", "closed": True,
             "error": "%s: %s" % (type(e).__name__, e), "ms": round((time.monotonic() - t0) * 1000, 2)}
        return (r, socket.socket()) if keep else (r, None)
    r = read_response(s, timeout)
    r["case"], r["ms"] = case, round((time.monotonic() - t0) * 1000, 2)
    if keep:
        return r, s
    s.close()
    r.pop("rest", None)
    return r, None


def connect_bytes(auth):
    return ("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (auth, auth)).encode()


def mode_connect(args):
    for a in args:
        case, _, auth = a.partition("=")
        out(send_read(case, connect_bytes(auth))[0])
        time.sleep(0.06)


def mode_absolute(args):
    for a in args:
        case, _, url = a.partition("=")
        host = url.split("/")[2]
        req = "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (url, host)
        out(send_read(case, req.encode())[0])
        time.sleep(0.06)


def mode_raw(args):
    for a in args:
        case, _, hx = a.partition("=")
        out(send_read(case, bytes.fromhex(hx))[0])
        time.sleep(0.06)


def mode_tls(case, auth, sni, path):
    r, s = send_read(case, connect_bytes(auth), keep=True)
    if r["status"] != 200:
        r.pop("rest", None)
        out(r)
        return
    r.pop("rest", None)
    try:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False  # the point is the SNI sent, not the name checked
        t = ctx.wrap_socket(s, server_hostname=sni)
        r["tls"] = "ok"
        t.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, auth.rsplit(":", 1)[0])).encode())
        data = b""
        while True:
            c = t.recv(65536)
            if not c:
                break
            data += c
        head, _, body = data.partition(b"\r\n\r\n")
        r["http_status"] = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.") else None
        r["http_body"] = body.decode("utf-8", "replace")
    except (OSError, ssl.SSLError) as e:
        r["tls"] = "%s: %s" % (type(e).__name__, e)
    s.close()
    out(r)


def mode_plain(case, auth):
    r, s = send_read(case, connect_bytes(auth), keep=True)
    data = r.pop("rest", b"")
    if r["status"] == 200:
        try:
            s.settimeout(15)
            s.sendall(b"ping-through-tunnel\n")
            while b"ping-through-tunnel" not in data:
                c = s.recv(4096)
                if not c:
                    r["tunnel_closed"] = True
                    break
                data += c
        except OSError as e:
            r["tunnel_error"] = "%s: %s" % (type(e).__name__, e)
        r["tunnel"] = data.decode("utf-8", "replace")
    s.close()
    out(r)


def mode_streams(n, auth):
    held = []
    for _ in range(n):
        held.append(socket.create_connection(PROXY, timeout=10))
    time.sleep(2)  # every OPEN answered before the next one
    r, _ = send_read("stream-%d" % (n + 1), connect_bytes(auth), timeout=30)
    r["held"] = len(held)
    out(r)
    held.pop().close()
    time.sleep(2)
    r, _ = send_read("stream-after-close", connect_bytes(auth), timeout=30)
    out(r)
    for s in held:
        s.close()


def mode_parallel(args):
    def one(case, auth):
        out(send_read(case, connect_bytes(auth), timeout=200)[0])

    ts = []
    for a in args:
        case, _, auth = a.partition("=")
        t = threading.Thread(target=one, args=(case, auth))
        t.start()
        ts.append(t)
        time.sleep(0.05)
    for t in ts:
        t.join()


def mode_conns(n, auth, par):
    ms, lock, fails = [], threading.Lock(), [0]

    def worker(k):
        for _ in range(k):
            r, _ = send_read("c", connect_bytes(auth), timeout=30)
            with lock:
                if r["status"] == 200:
                    ms.append(r["ms"])
                else:
                    fails[0] += 1

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(n // par,)) for _ in range(par)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    total = time.monotonic() - t0
    ms.sort()
    pick = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))] if ms else None
    out({"case": "conns", "n": len(ms), "failed": fails[0], "par": par, "seconds": round(total, 3),
         "per_s": round(len(ms) / total, 1) if total > 0 else None, "p50_ms": pick(0.5), "p99_ms": pick(0.99)})


def drain(read, first=b""):
    n, t0, stalled = len(first), time.monotonic() if first else None, None
    while True:
        try:
            c = read(1 << 20)
        except socket.timeout:
            stalled = "no byte for %s s after %d bytes" % (STALL_S, n)
            break
        if not c:
            break
        if t0 is None:
            t0 = time.monotonic()
        n += len(c)
    secs = time.monotonic() - t0 if t0 is not None else 0.0
    if stalled:
        return {"bytes": n, "stalled": stalled, "mib_s": None}
    return {"bytes": n, "seconds": round(secs, 4), "mib_s": round(n / 1048576 / secs, 2) if secs > 0 else None}


def mode_sink(auth, first=None):
    r, s = send_read("sink", connect_bytes(auth), keep=True)
    rest = r.pop("rest", b"")
    if r["status"] == 200:
        if first:
            s.sendall(first.encode() + b"\n")
        s.settimeout(STALL_S)
        r.update(drain(s.recv, rest))
    s.close()
    out(r)


def mode_source(auth, nbytes):
    r, s = send_read("source", connect_bytes(auth), keep=True)
    r.pop("rest", None)
    if r["status"] == 200:
        s.settimeout(300)
        buf, left, t0 = b"\0" * (1 << 20), nbytes, time.monotonic()
        while left > 0:
            k = s.send(buf[: min(left, len(buf))])
            left -= k
        s.shutdown(socket.SHUT_WR)
        while s.recv(65536):
            pass
        secs = time.monotonic() - t0
        r.update({"bytes": nbytes, "seconds": round(secs, 4), "mib_s": round(nbytes / 1048576 / secs, 2)})
    s.close()
    out(r)


def main():
    m, a = sys.argv[1], sys.argv[2:]
    if m == "connect":
        mode_connect(a)
    elif m == "absolute":
        mode_absolute(a)
    elif m == "raw":
        mode_raw(a)
    elif m == "tls":
        mode_tls(*a[:4])
    elif m == "plain":
        mode_plain(a[0], a[1])
    elif m == "streams":
        mode_streams(int(a[0]), a[1])
    elif m == "parallel":
        mode_parallel(a)
    elif m == "conns":
        mode_conns(int(a[0]), a[1], int(a[2]) if len(a) > 2 else 1)
    elif m == "sink":
        mode_sink(a[0], a[1] if len(a) > 1 else None)
    elif m == "source":
        mode_source(a[0], int(a[1]))
    elif m == "stdin-sink":
        r = drain(sys.stdin.buffer.raw.read)
        r["case"] = "stdin-sink"
        out(r)
    else:
        sys.exit("unknown mode " + m)


main()
