#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# The secrets tests' origin (tests/secrets/lib.sh starts it in the test's network namespace): HTTPS on :443 and
# plain HTTP on :80, every name on one certificate from the test CA, served by Host. It stands in for the bound
# hosts (api.github.com, api.anthropic.com), an inspected host that no secret is bound to (origin.test.example)
# and a host that must never get a secret (evil.example).
#
# It ASSERTS what it receives. For each secret it knows the value (--secret NAME:VALUE_FILE:HOST[,HOST]:HEADER)
# and looks for it in every request (request line, each header, body), in every form the proxy must catch (raw
# in any case, hex in any case, base64 and base64url at the 3 alignments, each after percent- and JSON-unescaping).
# The one place a value may arrive: the secret's header, on TLS, with SNI and Host both one of its hosts. Every
# request is a line of DIR/requests.jsonl ({n, tls, sni, host, method, path, found: [{secret, where, form}],
# placeholders: [where], accept_encoding, ok}); DIR/verdict.json is rewritten after each one:
#   {"requests": N, "swapped": {NAME: count of requests whose value arrived where it may}, "violations": [...],
#    "placeholders": [...]}     (a violation or a placeholder names the request, never the value)
# Neither file ever holds a value: the test greps them like every other file.
#
# What it answers (paths on any host):
#   /echo/KIND        the value the request's bound header carried ("Bearer " taken off), back in a form, so
#                     the proxy must redact it: raw hex HEX b64 b64url b64off1 b64off2 pct json header
#                     (X-Echo and Set-Cookie) chunked (split into 3-byte chunks) trailer (chunked, X-Echo trailer)
#                     gzip deflate (the body "all", compressed) all (every form in one body). The identity bodies'
#                     lengths are in requests.jsonl ("sent") so the test can check the box got the same length.
#   /user             GitHub's shape: {"login": "tkbox-demo"} when the real value arrived where it may, else 401
#   /status/NNN       a raw status line "HTTP/1.1 NNN X" (F2: a status below 100 must become a 502)
#   /v1/messages      POST: the Messages API's JSON ({"model", "usage": {input_tokens, output_tokens}}), or with
#                     "stream": true in the request, its SSE stream (message_start ... message_delta usage)
#   /big/N            N bytes (bench: the same bytes on an inspected and a plain path)
#   /repo.git/...     the files of a bare repository (git's dumb HTTP protocol), from --repo
#   anything else     "tkbox-secrets-origin <host> <path>"
import argparse
import base64
import gzip
import json
import os
import re
import socketserver
import ssl
import threading
import urllib.parse
import zlib
from http.server import BaseHTTPRequestHandler

PLACEHOLDER_RE = re.compile(rb"tkbox_[A-Z0-9_]+_[0-9a-fA-F]{32}", re.I)
LOCK = threading.Lock()
STATE = {"requests": 0, "swapped": {}, "violations": [], "placeholders": []}
ARGS = None
SECRETS = []  # [{name, value (bytes), hosts [..], header (lower)}]


def b64_targets(v):
    """The base64 text the value alone determines, at each of the 3 alignments, both alphabets."""
    out = []
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + v)
        skip = (k * 4 + 2) // 3  # characters that depend on the prefix bytes
        tail = (len(b"\0" * k + v)) % 3
        end = len(enc) - (0 if tail == 0 else 4)  # the last quantum depends on what follows
        core = enc[skip:end]
        if len(core) >= 8:
            out.append(core)
            out.append(core.replace(b"+", b"-").replace(b"/", b"_"))
    return out


def unescape(data):
    """Percent- and JSON-unescaped copies of data (each alone and both), plus data itself."""
    outs = [data]
    try:
        pct = urllib.parse.unquote_to_bytes(data)
        outs.append(pct)
    except Exception:
        pct = data
    def json_unescape(b):
        def rep(m):
            try:
                return chr(int(m.group(1), 16)).encode("utf-8", "surrogatepass")
            except Exception:
                return m.group(0)
        b = re.sub(rb"\\u([0-9a-fA-F]{4})", rep, b)
        for a, c in ((rb"\"", b'"'), (rb"\\", b"\\"), (rb"\/", b"/"), (rb"\n", b"\n"), (rb"\t", b"\t")):
            b = b.replace(a, c)
        return b
    outs.append(json_unescape(data))
    outs.append(json_unescape(pct))
    outs.append(urllib.parse.unquote_to_bytes(json_unescape(data)))
    return outs


def forms_found(value, data):
    """The forms of value found in data: [] or e.g. ["raw", "hex", "base64"]."""
    found = []
    for d in unescape(data):
        low = d.lower()
        if value.lower() in low and "raw" not in found:
            found.append("raw")
        if value.hex().encode() in low and "hex" not in found:
            found.append("hex")
        for t in b64_targets(value):
            if t in d and "base64" not in found:
                found.append("base64")
    return found


def check_request(rec, tls, sni, host, line, headers, body):
    """Fill rec's found/placeholders/ok; update STATE. headers: [(name, value bytes)]."""
    found, ph = [], []
    for s in SECRETS:
        bound_here = tls and host in s["hosts"] and sni in s["hosts"]
        places = [("request-line", line)] + [("header " + k, v) for k, v in headers] + [("body", body)]
        for where, data in places:
            for form in forms_found(s["value"], data):
                allowed = bound_here and where == "header " + s["header"] and form == "raw"
                found.append({"secret": s["name"], "where": where, "form": form, "allowed": allowed})
    for where, data in [("request-line", line)] + [("header " + k, v) for k, v in headers] + [("body", body)]:
        for d in unescape(data):
            if PLACEHOLDER_RE.search(d):
                ph.append(where)
                break
    rec["found"], rec["placeholders"] = found, ph
    rec["ok"] = all(f["allowed"] for f in found)
    with LOCK:
        STATE["requests"] += 1
        rec["n"] = STATE["requests"]
        for f in found:
            if f["allowed"]:
                STATE["swapped"][f["secret"]] = STATE["swapped"].get(f["secret"], 0) + 1
            else:
                STATE["violations"].append({"n": rec["n"], "host": host, "path": rec["path"], "secret": f["secret"],
                                            "where": f["where"], "form": f["form"], "tls": tls, "sni": sni})
        if ph:
            STATE["placeholders"].append({"n": rec["n"], "host": host, "path": rec["path"], "where": ph})


def save(rec):
    with LOCK:
        with open(os.path.join(ARGS.dir, "requests.jsonl"), "a") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
        tmp = os.path.join(ARGS.dir, "verdict.json.tmp")
        with open(tmp, "w") as f:
            json.dump(STATE, f, sort_keys=True)
        os.replace(tmp, os.path.join(ARGS.dir, "verdict.json"))


def pct_all(b):
    return "".join("%%%02X" % c for c in b).encode()


def json_all(b):
    return json.dumps({"token": "".join("\\u%04x" % c for c in b)}).encode().replace(b"\\\\", b"\\")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "tkbox-secrets-origin"

    def log_message(self, fmt, *args):  # the request log is requests.jsonl
        pass

    def read_body(self):
        """The body (Content-Length or chunked); what came before a close when it was cut."""
        body = b""
        try:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                while True:
                    ln = self.rfile.readline(65537)
                    if not ln:
                        break
                    size = int(ln.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                            pass
                        break
                    chunk = self.rfile.read(size + 2)
                    body += chunk[:size]
                    if len(chunk) < size + 2:
                        break
            else:
                n = int(self.headers.get("Content-Length", "0") or 0)
                while len(body) < n:
                    c = self.rfile.read(n - len(body))
                    if not c:
                        break
                    body += c
        except (OSError, ValueError):
            pass
        return body

    def send_raw(self, data):
        self.wfile.write(data)
        self.wfile.flush()

    def respond(self, status, body, ctype="text/plain", extra=()):
        hs = ["HTTP/1.1 %d %s" % (status, "OK" if status == 200 else "X"), "Content-Type: " + ctype,
              "Content-Length: %d" % len(body)] + list(extra)
        self.send_raw(("\r\n".join(hs) + "\r\n\r\n").encode() + (body if self.command != "HEAD" else b""))

    def handle_one(self):
        tls = isinstance(self.connection, ssl.SSLSocket)
        sni = getattr(self.server, "sni", {}).get(id(self.connection)) if tls else None
        host = (self.headers.get("Host") or "").split(":")[0].lower()
        body = self.read_body()
        headers = [(k.lower(), v.encode("utf-8", "surrogateescape")) for k, v in self.headers.items()]
        path = self.path
        rec = {"tls": tls, "sni": sni, "host": host, "method": self.command, "path": path.split("?")[0],
               "query": "?" in path, "accept_encoding": self.headers.get("Accept-Encoding"), "body_len": len(body)}
        check_request(rec, tls, sni, host, self.raw_requestline, headers, body)
        # The value this request carried in a secret's header (for the echo paths): the raw value when it arrived
        # where it may, else whatever the header held (a placeholder: echoing it shows the swap did not happen).
        carried = b""
        for s in SECRETS:
            v = self.headers.get(s["header"])
            if v is not None:
                v = v.encode("utf-8", "surrogateescape")
                carried = v[7:] if v.lower().startswith(b"bearer ") else v
                break
        try:
            self.answer(path, carried, body, rec)
        finally:
            save(rec)

    def answer(self, path, v, body, rec):
        p = path.split("?")[0]
        if p.startswith("/echo/"):
            kind = p[6:]
            forms = {
                "raw": b"before " + v + b" after\n",
                "hex": v.hex().encode() + b"\n",
                "HEX": v.hex().upper().encode() + b"\n",
                "b64": base64.b64encode(v) + b"\n",
                "b64url": base64.urlsafe_b64encode(v) + b"\n",
                "b64off1": base64.b64encode(b"x" + v) + b"\n",
                "b64off2": base64.b64encode(b"xy" + v) + b"\n",
                "pct": b"token=" + pct_all(v) + b"\n",
                "json": json_all(v) + b"\n",
            }
            allb = b"".join(b"[" + k.encode() + b"]" + forms[k] for k in sorted(forms))
            if kind in forms or kind == "all":
                out = forms.get(kind, allb)
                rec["sent"] = len(out)
                self.respond(200, out)
            elif kind == "header":
                rec["sent"] = 3
                self.respond(200, b"ok\n", extra=["X-Echo: " + v.decode("latin-1"),
                                                  "Set-Cookie: t=" + v.decode("latin-1") + "; Path=/"])
            elif kind in ("gzip", "deflate"):
                rec["sent"] = len(allb)
                enc = gzip.compress(allb) if kind == "gzip" else zlib.compress(allb)
                self.respond(200, enc, extra=["Content-Encoding: " + kind])
            elif kind in ("chunked", "trailer"):
                data = b"chunked " + v + b" " + v.hex().encode() + b" end\n"
                rec["sent"] = len(data)
                hs = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
                if kind == "trailer":
                    hs += "Trailer: X-Echo\r\n"
                out = hs.encode() + b"\r\n"
                for i in range(0, len(data), 3):
                    c = data[i:i + 3]
                    out += b"%x\r\n" % len(c) + c + b"\r\n"
                out += b"0\r\n"
                if kind == "trailer":
                    out += b"X-Echo: " + v + b"\r\n"
                out += b"\r\n"
                self.send_raw(out)
            else:
                self.respond(404, b"no such echo\n")
        elif p == "/user":
            # Like GitHub's: the login when the token is the real one, else 401.
            real = any(f["allowed"] for f in rec["found"])
            out = json.dumps({"login": "tkbox-demo"} if real else {"message": "Bad credentials"}).encode() + b"\n"
            rec["sent"] = len(out)
            self.respond(200 if real else 401, out, ctype="application/json")
        elif p.startswith("/status/"):
            self.send_raw(("HTTP/1.1 %s X\r\nContent-Length: 6\r\n\r\nbroken" % p[8:11]).encode())
            self.close_connection = True
        elif p == "/v1/messages":
            try:
                req = json.loads(body or b"{}")
            except ValueError:
                req = {}
            model = req.get("model", "claude-test-1")
            if req.get("stream"):
                evs = [("message_start", {"type": "message_start", "message": {
                    "id": "msg_test", "type": "message", "role": "assistant", "model": model, "content": [],
                    "usage": {"input_tokens": 21, "output_tokens": 1}}}),
                       ("content_block_start", {"type": "content_block_start", "index": 0,
                                                "content_block": {"type": "text", "text": ""}}),
                       ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "text_delta", "text": "Hello"}}),
                       ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                       ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                          "usage": {"output_tokens": 9}}),
                       ("message_stop", {"type": "message_stop"})]
                out = b"".join(b"event: %s\ndata: %s\n\n" % (e.encode(), json.dumps(d).encode()) for e, d in evs)
                rec["sent"] = len(out)
                self.respond(200, out, ctype="text/event-stream")
            else:
                out = json.dumps({"id": "msg_test", "type": "message", "role": "assistant", "model": model,
                                  "content": [{"type": "text", "text": "Hello"}], "stop_reason": "end_turn",
                                  "usage": {"input_tokens": 12, "output_tokens": 7}}).encode()
                rec["sent"] = len(out)
                self.respond(200, out, ctype="application/json")
        elif p.startswith("/big/"):
            n = int(p[5:])
            rec["sent"] = n
            self.send_raw(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n" % n)
            chunk = bytes(range(256)) * 256
            left = n
            while left > 0 and self.command != "HEAD":
                k = min(left, len(chunk))
                self.wfile.write(chunk[:k])
                left -= k
            self.wfile.flush()
        elif p.startswith("/repo.git/") and ARGS.repo:
            rel = os.path.normpath(p[len("/repo.git/"):])
            f = os.path.join(ARGS.repo, rel)
            if rel.startswith("..") or not os.path.isfile(f):
                self.respond(404, b"not found\n")
            else:
                with open(f, "rb") as fh:
                    data = fh.read()
                rec["sent"] = len(data)
                self.respond(200, data, ctype="application/octet-stream")
        else:
            out = ("tkbox-secrets-origin %s %s\n" % (rec["host"], p)).encode()
            rec["sent"] = len(out)
            self.respond(200, out)

    def do_GET(self):
        self.handle_one()

    do_POST = do_PUT = do_HEAD = do_DELETE = do_OPTIONS = do_PATCH = do_GET


class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    allow_reuse_address = True
    daemon_threads = True


class TLSServer(Server):
    def __init__(self, addr, handler):
        self.sni = {}
        super().__init__(addr, handler)

    def finish_request(self, request, client_address):
        # The handshake in the connection's own thread: a client that never finishes it holds only its thread.
        request.settimeout(30)
        names = {}

        def on_sni(sslsock, name, ctx):
            names["sni"] = name

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(ARGS.cert, ARGS.key)
        ctx.set_alpn_protocols(["http/1.1"])
        ctx.sni_callback = on_sni
        try:
            t = ctx.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return
        self.sni[id(t)] = (names.get("sni") or "").lower() or None
        try:
            self.RequestHandlerClass(t, client_address, self)
        finally:
            self.sni.pop(id(t), None)
            try:
                t.close()
            except OSError:
                pass


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--secret", action="append", default=[], help="NAME:VALUE_FILE:HOST[,HOST]:HEADER")
    ap.add_argument("--https", type=int, default=443)
    ap.add_argument("--http", type=int, default=80)
    ap.add_argument("--bind", default="0.0.0.0")
    ap.add_argument("--repo")
    ARGS = ap.parse_args()
    for s in ARGS.secret:
        name, vf, hosts, header = s.split(":", 3)
        with open(vf, "rb") as f:
            SECRETS.append({"name": name, "value": f.read().rstrip(b"\r\n"), "hosts": hosts.lower().split(","),
                            "header": header.lower()})
        STATE["swapped"][name] = 0
    os.makedirs(ARGS.dir, exist_ok=True)
    with open(os.path.join(ARGS.dir, "verdict.json"), "w") as f:
        json.dump(STATE, f)
    servers = [TLSServer((ARGS.bind, ARGS.https), Handler), Server((ARGS.bind, ARGS.http), Handler)]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    with open(os.path.join(ARGS.dir, "ready"), "w") as f:
        f.write("ready\n")
    threading.Event().wait()


if __name__ == "__main__":
    main()
