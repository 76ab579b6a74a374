#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A Docker-style token server for the image e2e test (stdlib + the openssl program).

usage: token-server.py PORT TLS_CERT TLS_KEY SIGN_CERT SIGN_KEY ISSUER SERVICE USER:PASSWORD

GET /token?service=S&scope=repository:NAME:pull answers {"token": JWT, ...}:
anonymous callers get pull on every repository except private/*; callers
with the right Basic credentials get pull and push everywhere; wrong
credentials get 401. The JWT is ES256 with the signing certificate in x5c, as
docker-registry's token auth (rootcertbundle) checks it.
"""
import base64
import http.server
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.parse

PORT, TLS_CERT, TLS_KEY, SIGN_CERT, SIGN_KEY, ISSUER, SERVICE, CREDS = sys.argv[1:9]


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def der_to_raw(sig):
    # ECDSA-Sig-Value ::= SEQUENCE { r INTEGER, s INTEGER } -> r||s, 32 bytes each
    assert sig[0] == 0x30
    i = 2 if sig[1] < 0x80 else 2 + (sig[1] & 0x7F)
    out = b""
    for _ in range(2):
        assert sig[i] == 0x02
        n = sig[i + 1]
        v = sig[i + 2:i + 2 + n].lstrip(b"\0")
        out += v.rjust(32, b"\0")
        i += 2 + n
    return out


cert_der = subprocess.run(["openssl", "x509", "-in", SIGN_CERT, "-outform", "DER"], stdout=subprocess.PIPE,
                          check=True).stdout


def jwt(access):
    now = int(time.time())
    header = {"typ": "JWT", "alg": "ES256", "x5c": [base64.b64encode(cert_der).decode()]}
    claims = {"iss": ISSUER, "sub": "", "aud": SERVICE, "exp": now + 300, "nbf": now - 10, "iat": now,
              "jti": b64u(os.urandom(12)), "access": access}
    signing_input = (b64u(json.dumps(header).encode()) + "." + b64u(json.dumps(claims).encode())).encode()
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", SIGN_KEY], input=signing_input,
                         stdout=subprocess.PIPE, check=True).stdout
    return signing_input.decode() + "." + b64u(der_to_raw(sig))


class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(u.query)
        authed = False
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            if base64.b64decode(auth[6:]).decode() != CREDS:
                self.send_response(401)
                self.end_headers()
                return
            authed = True
        access = []
        for scope in q.get("scope", []):
            parts = scope.split(":")
            if len(parts) != 3 or parts[0] != "repository":
                continue
            want = parts[2].split(",")
            if authed:
                acts = [a for a in want if a in ("pull", "push")]
            else:
                acts = ["pull"] if "pull" in want and not parts[1].startswith("private/") else []
            if acts:
                access.append({"type": "repository", "name": parts[1], "actions": acts})
        body = json.dumps({"token": jwt(access), "expires_in": 300}).encode()
        with open(os.environ.get("TOKEN_LOG", "/dev/null"), "a") as f:
            f.write("%s %s\n" % ("basic" if authed else "anonymous", ",".join(q.get("scope", []))))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


srv = http.server.HTTPServer(("127.0.0.1", int(PORT)), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(TLS_CERT, TLS_KEY)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
