# SPDX-License-Identifier: Apache-2.0
"""The Python SDK's pure parts, no daemon: frames, response heads, error mapping, secrets kept out of text, and the
client against a scripted fake daemon on a Unix socket (interim 102, hostile frames, digests that do not match)."""

import base64
import hashlib
import json
import os
import socket
import struct
import tempfile
import threading

import pytest

import tkbox
from tkbox import _wire
from tkbox.errors import error_from_reply


def frame(t, payload=b""):
    return struct.pack(">BI", t, len(payload)) + payload


# ---------------------------------------------------------------- frames


def test_decode_every_row():
    r = _wire.FrameReader()
    r.feed(
        frame(0x81)
        + frame(0x82, b"out")
        + frame(0x83, b"err")
        + frame(0x86, struct.pack(">I", 262144))
        + frame(0x85, "cut at the time limit é".encode())
        + frame(0x84, b"\x00\x00\x00\x00\x07")
    )
    got = r.frames()
    assert got == [
        (0x81, None),
        (0x82, b"out"),
        (0x83, b"err"),
        (0x86, 262144),
        (0x85, "cut at the time limit é"),
        (0x84, ("exited", 7)),
    ]
    assert _wire.decode_frame(0x84, b"\x01\x00\x00\x00\x09") == (0x84, ("signaled", 9))


def test_frames_split_across_reads():
    data = frame(0x82, b"x" * 70000 if False else b"y" * 65536) + frame(0x84, b"\x00\x00\x00\x00\x00")
    r = _wire.FrameReader()
    out = []
    for i in range(0, len(data), 7):
        r.feed(data[i : i + 7])
        out += r.frames()
    assert out == [(0x82, b"y" * 65536), (0x84, ("exited", 0))]


@pytest.mark.parametrize(
    "raw, why",
    [
        (frame(0x42, b"x"), "type 0x42"),  # not in the table
        (frame(0x01, b"x"), "type 0x01"),  # a client's type coming from the box
        (struct.pack(">BI", 0x82, 65537), "65537 bytes"),  # refused from the header, before any payload
        (struct.pack(">BI", 0x82, 0xFFFFFFFF), "bytes"),
        (frame(0x82), "empty"),
        (frame(0x81, b"x"), "bytes"),
        (frame(0x84, b"\x00\x00\x00\x01\x00"), "kind 0 and value 256"),
        (frame(0x84, b"\x01\x00\x00\x00\x00"), "kind 1 and value 0"),
        (frame(0x84, b"\x01\x00\x00\x00\x41"), "kind 1 and value 65"),
        (frame(0x84, b"\x02\x00\x00\x00\x01"), "kind 2"),
        (frame(0x84, b"\x00\x00\x00\x00"), "5 bytes"),
        (frame(0x85, b"a\x00b"), "without NUL"),
        (frame(0x85, b"e" * 4097), "4097 bytes"),
        (frame(0x86, struct.pack(">I", 0)), "CREDIT frame of 0"),
        (frame(0x86, struct.pack(">I", 262145)), "262145"),
    ],
)
def test_frame_outside_the_table_is_a_protocol_error(raw, why):
    r = _wire.FrameReader()
    r.feed(raw)
    with pytest.raises(tkbox.ProtocolError) as e:
        r.frames()
    assert why in str(e.value)


def test_encode_client_frames():
    assert _wire.encode_frame(_wire.STDIN, b"abc") == b"\x01\x00\x00\x00\x03abc"
    assert _wire.encode_frame(_wire.STDIN_EOF) == b"\x02\x00\x00\x00\x00"
    assert _wire.encode_frame(_wire.SIGNAL, bytes([15])) == b"\x03\x00\x00\x00\x01\x0f"
    for bad in ((_wire.STDIN, b""), (_wire.STDIN, b"x" * 65537), (_wire.SIGNAL, bytes([11])), (0x82, b"x")):
        with pytest.raises(ValueError):
            _wire.encode_frame(*bad)


# ---------------------------------------------------------------- response heads


def test_parse_head():
    r = _wire.parse_head(
        b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\ntkbox-bundle-sha256: " + b"a" * 64 + b"\r\nX-Other: y\r\n\r\n"
    )
    assert r.status == 200 and r.content_length == 12 and r.headers["tkbox-bundle-sha256"] == "a" * 64
    r = _wire.parse_head(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: tkbox-exec/1\r\nConnection: Upgrade\r\n\r\n")
    assert r.status == 101 and r.upgrade_exec


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.0 200 OK\r\n\r\n",
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"HTTP/1.1 099 Low\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\x01b\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTkbox-Trust: " + b"x" * 4097 + b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTkbox-Trust: a\r\nTkbox-Trust: b\r\n\r\n",
        b"HTTP/1.1 200 \xff\r\n\r\n",
    ],
)
def test_malformed_heads(raw):
    with pytest.raises(tkbox.ProtocolError):
        _wire.parse_head(raw)


# ---------------------------------------------------------------- errors


CODES = {
    # every code of docs/integration.md's error table, and the ones the daemon adds (apply, approvals)
    (400, "bad_request"): tkbox.BadRequest,
    (400, "no_checkout"): tkbox.BadRequest,
    (413, "bad_request"): tkbox.BadRequest,
    (403, "forbidden"): tkbox.Forbidden,
    (403, "denied"): tkbox.Denied,
    (403, "not_approved"): tkbox.NotApproved,
    (403, "env_refused"): tkbox.Forbidden,
    (403, "refused"): tkbox.Forbidden,
    (404, "no_such_box"): tkbox.NotFound,
    (404, "not_found"): tkbox.NotFound,
    (404, "no_such_approval"): tkbox.NotFound,
    (409, "exists"): tkbox.Conflict,
    (409, "box_not_running"): tkbox.Conflict,
    (409, "box_running"): tkbox.Conflict,
    (409, "box_creating"): tkbox.Conflict,
    (409, "run_open"): tkbox.Conflict,
    (409, "unrecorded"): tkbox.Conflict,
    (409, "box_busy"): tkbox.Conflict,
    (409, "run_closed"): tkbox.Conflict,
    (409, "no_patch"): tkbox.Conflict,
    (409, "apply_busy"): tkbox.Conflict,
    (409, "already_answered"): tkbox.Conflict,
    (422, "apply_refused"): tkbox.ApplyRefused,
    (429, "too_many_boxes"): tkbox.TooMany,
    (429, "too_many_execs"): tkbox.TooMany,
    (503, "signer_unreachable"): tkbox.SignerUnreachable,
    (503, "create_failed"): tkbox.Unavailable,
    (503, "not_recorded"): tkbox.Unavailable,
    (503, "export_failed"): tkbox.Unavailable,
    (503, "shutting_down"): tkbox.Unavailable,
    (503, "box_lost"): tkbox.Unavailable,
    (503, "busy"): tkbox.Unavailable,
    (500, "internal"): tkbox.InternalError,
    (500, "apply_partial"): tkbox.InternalError,
}


@pytest.mark.parametrize("status, code", sorted(CODES))
def test_error_mapping(status, code):
    e = error_from_reply(status, {"error": {"code": code, "message": "why"}})
    assert type(e) is CODES[(status, code)]
    assert isinstance(e, tkbox.TkboxError)
    assert (e.status, e.code, e.message) == (status, code, "why")


def test_every_documented_code_is_mapped():
    doc = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "integration.md")
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    table = text[text.index("### Errors") :]
    table = table[: table.index("\n## ")]
    import re

    codes = set(re.findall(r"`([a-z_]+)`", table))
    assert "denied" in codes and "signer_unreachable" in codes
    for code in codes:
        e = error_from_reply(400, {"error": {"code": code, "message": "m"}})
        assert type(e) is not tkbox.TkboxError, code


def test_error_details_and_fallbacks():
    err = {"code": "denied", "message": "m", "rule_ids": ["TK-D007"], "decision_id": "d1"}
    e = error_from_reply(403, {"error": err})
    assert e.rule_ids == ["TK-D007"] and e.decision_id == "d1"
    e = error_from_reply(403, {"error": {"code": "denied", "message": "m", "rule": "TK-W001", "path": ".env"}})
    assert e.rule_ids == ["TK-W001"] and e.path == ".env" and e.decision_id is None
    e = error_from_reply(403, {"error": {"code": "not_approved", "message": "m", "approval_id": "a1"}})
    assert e.approval_id == "a1"
    assert type(error_from_reply(404, {"error": {"code": "new_code", "message": "m"}})) is tkbox.NotFound
    e = error_from_reply(418, None)
    assert type(e) is tkbox.TkboxError and e.status == 418 and "418" in e.message
    e = error_from_reply(400, {"error": {"code": "bad_request", "message": "a\x1b[31mb\nc"}})
    assert "\x1b" not in str(e) and "\n" not in str(e)


def test_secret_value_never_in_text():
    s = tkbox.Secret("hunter2-VALUE", ["api.example.com"], "Authorization")
    assert "hunter2" not in repr(s) and "hunter2" not in str(s)
    assert "hunter2" not in repr({"S": s})


# ---------------------------------------------------------------- socket path


def test_socket_path_rules(monkeypatch):
    monkeypatch.delenv("TKBOX_SOCKET", raising=False)
    monkeypatch.setenv("TKBOX_STATE_DIR", "/x/state")
    assert tkbox.Client().socket_path == "/x/state/api/tkbox.sock"
    assert tkbox.Client(state_dir="/y").socket_path == "/y/api/tkbox.sock"
    monkeypatch.setenv("TKBOX_STATE_DIR", "relative")
    monkeypatch.setenv("HOME", "/home/u")
    assert tkbox.Client().socket_path == "/home/u/.local/state/tkbox/api/tkbox.sock"
    monkeypatch.setenv("HOME", "")
    assert tkbox.Client().socket_path == "/var/lib/tkbox/api/tkbox.sock"
    monkeypatch.setenv("TKBOX_SOCKET", "/run/t.sock")
    assert tkbox.Client(state_dir="/y").socket_path == "/run/t.sock"
    assert tkbox.Client(socket="/z.sock").socket_path == "/z.sock"


# ---------------------------------------------------------------- a scripted fake daemon


class FakeDaemon(object):
    """Answers each connection with the next scripted bytes (after reading the request head and body)."""

    def __init__(self, answers):
        self.dir = tempfile.mkdtemp(prefix="tkbox-sdk-unit-")
        self.path = os.path.join(self.dir, "d.sock")
        self.answers = list(answers)
        self.requests = []
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(4)
        self.t = threading.Thread(target=self.serve, daemon=True)
        self.t.start()

    def serve(self):
        for ans in self.answers:
            c, _ = self.srv.accept()
            data = b""
            while b"\r\n\r\n" not in data:
                data += c.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            n = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    n = int(line.split(b":")[1])
            while len(body) < n:
                body += c.recv(65536)
            self.requests.append((head.decode(), body))
            try:
                if callable(ans):
                    ans(c)
                else:
                    c.sendall(ans)
            except OSError:
                pass
            c.close()

    def close(self):
        self.srv.close()
        for f in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, f))
        os.rmdir(self.dir)


def json_answer(status, obj, extra=b""):
    body = json.dumps(obj).encode()
    return b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n" % (
        status,
        len(body),
        extra,
    ) + body


UPGRADE = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tkbox-exec/1\r\n\r\n"


@pytest.fixture
def fake():
    made = []

    def make(*answers):
        d = FakeDaemon(answers)
        made.append(d)
        return tkbox.Client(socket=d.path, timeout=10), d

    yield make
    for d in made:
        d.close()


def test_exec_with_interim_approval_and_output(fake):
    seen = []
    c, d = fake(
        b"HTTP/1.1 102 Processing\r\nTkbox-Approval: ap-0123456789ab\r\n\r\n"
        + UPGRADE
        + frame(0x81)
        + frame(0x82, b"hello ")
        + frame(0x83, b"warn")
        + frame(0x82, b"world")
        + frame(0x84, b"\x00\x00\x00\x00\x03")
    )
    outs = []
    r = c.exec("b1", ["echo", "hi"], stdin="in", on_approval=seen.append, on_stdout=outs.append)
    assert seen == ["ap-0123456789ab"]
    assert outs == [b"hello ", b"world"]
    assert (r.stdout, r.stderr, r.exit_code, r.signal, r.ok, r.status) == (b"hello world", b"warn", 3, None, False, 3)
    head, body = d.requests[0]
    assert head.startswith("POST /v1/boxes/b1/exec HTTP/1.1") and "Upgrade: tkbox-exec/1" in head
    req = json.loads(body)
    assert req["argv"] == ["echo", "hi"]
    assert req["stdin"] == {"mode": "upfront", "data": base64.b64encode(b"in").decode()}


def test_exec_hostile_frame_ends_with_protocol_error(fake):
    c, _ = fake(UPGRADE + frame(0x81) + frame(0x82, b"a") + frame(0x42, b"zz"))
    with pytest.raises(tkbox.ProtocolError) as e:
        c.exec("b1", ["true"])
    assert "0x42" in str(e.value)


def test_exec_oversized_frame_refused_from_its_header(fake):
    # Only the header is sent: the client must refuse without waiting for 16 MiB of payload.
    c, _ = fake(UPGRADE + struct.pack(">BI", 0x82, 16 << 20))
    with pytest.raises(tkbox.ProtocolError):
        c.exec("b1", ["true"])


def test_exec_cut_before_exit(fake):
    c, _ = fake(UPGRADE + frame(0x81) + frame(0x85, b"box stopping"))
    with pytest.raises(tkbox.ProtocolError) as e:
        c.exec("b1", ["true"])
    assert "box stopping" in str(e.value)


def test_exec_streamed_stdin_waits_for_credit(fake):
    got = {}

    def box(conn):
        # Grant 100 bytes, read them, then grant the rest, read to STDIN_EOF, echo the total back.
        buf = b""

        def take_frames():
            nonlocal buf
            out = []
            while len(buf) >= 5:
                t, n = struct.unpack(">BI", buf[:5])
                if len(buf) < 5 + n:
                    break
                out.append((t, buf[5 : 5 + n]))
                buf = buf[5 + n :]
            return out

        conn.sendall(UPGRADE + frame(0x81) + frame(0x86, struct.pack(">I", 100)))
        data = b""
        frames = []
        while sum(len(p) for t, p in frames if t == 1) < 100:
            buf += conn.recv(65536)
            frames += take_frames()
        got["first"] = sum(len(p) for t, p in frames if t == 1)
        conn.sendall(frame(0x86, struct.pack(">I", 262144)))
        while not any(t == 2 for t, _ in frames):
            chunk = conn.recv(65536)
            if not chunk:
                break
            buf += chunk
            frames += take_frames()
        data = b"".join(p for t, p in frames if t == 1)
        got["max_frame"] = max(len(p) for t, p in frames if t == 1)
        conn.sendall(frame(0x82, hashlib.sha256(data).hexdigest().encode()) + frame(0x84, b"\x00\x00\x00\x00\x00"))

    c, d = fake(box)
    payload = os.urandom(200000)
    src = (payload[i : i + 30000] for i in range(0, len(payload), 30000))
    r = c.exec("b1", ["sha256sum"], stdin=src)
    assert r.ok and r.stdout.decode() == hashlib.sha256(payload).hexdigest()
    assert got["first"] == 100 and got["max_frame"] <= 65536
    assert json.loads(d.requests[0][1])["stdin"] == {"mode": "stream"}


def test_refusal_is_typed(fake):
    c, _ = fake(json_answer(403, {"error": {"code": "denied", "message": "no", "rule_ids": ["TK-D007"]}}))
    with pytest.raises(tkbox.Denied) as e:
        c.exec("b1", ["pkill", "x"])
    assert e.value.rule_ids == ["TK-D007"] and e.value.status == 403


def test_json_cap_and_cut(fake):
    c, _ = fake(
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % ((8 << 20) + 1),
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]",
        b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"p" * 17000 + b"\r\n\r\n",
    )
    for _ in range(4):
        with pytest.raises(tkbox.ProtocolError):
            c.info()


def test_export_checks_the_digest_before_writing(fake, tmp_path):
    bundle = b"PK\x03\x04 not really a zip"
    trust = base64.urlsafe_b64encode(b'{"keys": []}').rstrip(b"=")

    def answer(digest):
        return (
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nTkbox-Bundle-Sha256: %s\r\n"
            b"Tkbox-Trust: %s\r\nTkbox-Run: r1\r\n\r\n"
            % (len(bundle), digest.encode(), trust)
            + bundle
        )

    c, _ = fake(answer("0" * 64), answer(hashlib.sha256(bundle).hexdigest()))
    out = tmp_path / "run.tkb"
    with pytest.raises(tkbox.ProtocolError):
        c.export("b1", out)
    assert sorted(os.listdir(tmp_path)) == []
    info = c.export("b1", out)
    assert out.read_bytes() == bundle and (tmp_path / "run.trust.json").read_bytes() == b'{"keys": []}'
    assert info["sha256"] == hashlib.sha256(bundle).hexdigest() and info["run"] == "r1"


def test_diff_checks_the_digest(fake):
    patch = b"diff --git a/x.txt b/x.txt\nnew file mode 100644\n"
    summ = base64.urlsafe_b64encode(json.dumps({"saved": False, "notices": []}).encode()).rstrip(b"=")
    good = hashlib.sha256(patch).hexdigest().encode()
    c, _ = fake(
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nTkbox-Patch-Sha256: %s\r\nTkbox-Patch-Summary: %s\r\n\r\n"
        % (len(patch), b"1" * 64, summ)
        + patch,
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nTkbox-Patch-Sha256: %s\r\nTkbox-Patch-Summary: %s\r\n\r\n"
        % (len(patch), good, summ)
        + patch,
    )
    with pytest.raises(tkbox.ProtocolError):
        c.diff("b1")
    d = c.diff("b1")
    assert d.files == ["x.txt"] and d.saved is False and d.patch == patch


def test_create_secret_value_only_in_the_body(fake):
    msg = "secret API_KEY: hosts[0] is not a host"
    c, d = fake(json_answer(400, {"error": {"code": "bad_request", "message": msg}}))
    with pytest.raises(tkbox.BadRequest) as e:
        c.create_box("img", name="b1", secrets={"API_KEY": tkbox.Secret("s3cr3t-value", ["bad:host"])})
    assert "s3cr3t" not in str(e.value) and "s3cr3t" not in repr(e.value)
    body = json.loads(d.requests[0][1])
    assert body["secrets"] == [{"name": "API_KEY", "value": "s3cr3t-value", "hosts": ["bad:host"]}]


def test_names_checked_before_any_request():
    c = tkbox.Client(socket="/nonexistent/d.sock")
    for bad in ("", "../x", "a/b", "-x", "x" * 64):
        with pytest.raises(ValueError):
            c.get(bad)
    with pytest.raises(ValueError):
        c.approve("AP-1/../x")
    with pytest.raises(tkbox.ConnectError):
        c.info()


def test_sources_parse_as_python_3_9():
    """Python >= 3.9: no 3.10+ syntax (match, parenthesized context managers...) in the package."""
    import ast

    pkg = os.path.dirname(tkbox.__file__)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            with open(os.path.join(pkg, name), encoding="utf-8") as f:
                ast.parse(f.read(), name, feature_version=(3, 9))
            assert " | None" not in open(os.path.join(pkg, name), encoding="utf-8").read()


def test_file_like_stdin_is_read_in_frame_sized_pieces():
    import io

    from tkbox.client import _read_chunks

    class Rec(io.BytesIO):
        sizes = []

        def read(self, n=-1):
            self.sizes.append(n)
            return super().read(n)

    f = Rec(b"z" * 200000)
    assert b"".join(_read_chunks(f)) == b"z" * 200000
    assert Rec.sizes and all(0 < n <= 65536 for n in Rec.sizes)
    assert "".join(_read_chunks(io.StringIO("é" * 70000))) == "é" * 70000


def test_protocol_error_text():
    e = tkbox.ProtocolError("cut")
    assert str(e) == "cut" and e.status is None and e.code == "protocol"
    assert str(error_from_reply(409, {"error": {"code": "exists", "message": "a box named b1 exists"}})) == (
        "a box named b1 exists (HTTP 409 exists)"
    )


def test_exec_stdin_source_failure_kills_the_command_and_is_raised(fake):
    got = {}

    def box(conn):
        conn.sendall(UPGRADE + frame(0x81) + frame(0x86, struct.pack(">I", 262144)))
        buf = b""
        while b"\x03\x00\x00\x00\x01\x09" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                break
            buf += chunk
        got["killed"] = b"\x03\x00\x00\x00\x01\x09" in buf
        conn.sendall(frame(0x84, b"\x01\x00\x00\x00\x09"))

    def source():
        yield b"first"
        raise OSError(5, "the source broke")

    c, _ = fake(box)
    with pytest.raises(OSError) as e:
        c.exec("b1", ["cat"], stdin=source())
    assert "the source broke" in str(e.value) and got["killed"]


def test_random_bytes_only_ever_raise_protocol_error():
    """A small deterministic fuzz: the frame reader and the head parser fail only with ProtocolError."""
    import random

    rnd = random.Random(15)
    types = [0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x01, 0x42, 0xFF]
    for _ in range(3000):
        if rnd.random() < 0.5:
            blob = bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(0, 40)))
        else:
            n = rnd.choice([0, 1, 4, 5, 6, 4096, 4097, 65536, 65537])
            body = bytes(rnd.getrandbits(8) for _ in range(min(n, 64)))
            blob = struct.pack(">BI", rnd.choice(types), n) + body
        r = _wire.FrameReader()
        r.feed(blob)
        try:
            r.frames()
        except tkbox.ProtocolError:
            pass
        head = b"HTTP/1.1 " + bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(0, 30))) + b"\r\n\r\n"
        try:
            _wire.parse_head(head)
        except tkbox.ProtocolError:
            pass
