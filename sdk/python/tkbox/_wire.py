# SPDX-License-Identifier: Apache-2.0
"""The daemon's wire: HTTP/1.1 over a Unix socket, one request per connection, and the exec stream's frames.

Everything read here is bounded before it is kept: a response head at most 16 KiB (HTTP_MAX_RESPONSE_HEAD), a
header value the client keeps at most 4096 bytes, a JSON body at most 8 MiB (APICLIENT_MAX_JSON), a frame's
payload within its type's row (src/common/exec-stream.h). Anything else is a ProtocolError.
"""

import os
import socket
import struct

from .errors import ConnectError, ProtocolError

MAX_RESPONSE_HEAD = 16384
MAX_HEADERS = 64
MAX_HEADER_VALUE = 4096
MAX_JSON = 8 << 20
MAX_REQUEST_BODY = 2 << 20
EXEC_UPGRADE = "tkbox-exec/1"

# The exec stream (src/common/exec-stream.h).
STDIN = 0x01
STDIN_EOF = 0x02
SIGNAL = 0x03
STARTED = 0x81
STDOUT = 0x82
STDERR = 0x83
EXIT = 0x84
ERROR = 0x85
CREDIT = 0x86
FRAME_HEADER = 5
MAX_DATA = 64 * 1024
MAX_ERROR = 4096
STDIN_WINDOW = 256 * 1024
MAX_EXIT_CODE = 255
MAX_SIGNAL = 64
# The signals a client may send a running command (exit_signal_forwardable): HUP, INT, QUIT, KILL, TERM.
FORWARDABLE_SIGNALS = frozenset((1, 2, 3, 9, 15))

# Keep these header values (their names compared without case).
_KEPT = (
    "tkbox-approval",
    "tkbox-trust",
    "tkbox-bundle-sha256",
    "tkbox-run",
    "tkbox-patch-sha256",
    "tkbox-patch-summary",
)
_TCHAR = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def default_state_dir():
    """The CLI's rules (src/daemon/state-path.c): $TKBOX_STATE_DIR if absolute, ~/.local/state/tkbox, /var/lib/tkbox."""
    e = os.environ.get("TKBOX_STATE_DIR", "")
    if e.startswith("/"):
        return e
    home = os.environ.get("HOME", "")
    if home.startswith("/"):
        return home + "/.local/state/tkbox"
    return "/var/lib/tkbox"


def socket_path(state_dir=None):
    """$TKBOX_SOCKET if absolute, else <state dir>/api/tkbox.sock."""
    e = os.environ.get("TKBOX_SOCKET", "")
    if e.startswith("/"):
        return e
    return os.path.join(state_dir or default_state_dir(), "api", "tkbox.sock")


class Response(object):
    """A response head: status, the headers tkbox defines, Content-Length (or None), upgrade."""

    def __init__(self, status):
        self.status = status
        self.headers = {}
        self.content_length = None
        self.upgrade_exec = False


def parse_head(raw):
    """Parse one response head (bytes up to and including the blank line), strictly."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ProtocolError("the daemon's response head is not ASCII")
    if not text.endswith("\r\n\r\n"):
        raise ProtocolError("the daemon's response head does not end with a blank line")
    lines = text[:-4].split("\r\n")
    status_line = lines[0]
    if len(status_line) < 12 or not status_line.startswith("HTTP/1.1 ") or (
        len(status_line) > 12 and status_line[12] != " "
    ):
        raise ProtocolError("the daemon's status line is malformed")
    code = status_line[9:12]
    if not code.isdigit() or not code.isascii() or int(code) < 100:
        raise ProtocolError("the daemon's status code is malformed")
    resp = Response(int(code))
    if len(lines) - 1 > MAX_HEADERS:
        raise ProtocolError("the daemon's answer has more than %d headers" % MAX_HEADERS)
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or any(ord(c) not in _TCHAR for c in name):
            raise ProtocolError("a header line of the daemon's answer is malformed")
        if "\n" in value or "\r" in value or any(ord(c) < 0x20 and c != "\t" for c in value):
            raise ProtocolError("a header value of the daemon's answer has control characters")
        value = value.strip(" \t")
        low = name.lower()
        if low == "content-length":
            if resp.content_length is not None or not value.isdigit() or len(value) > 15:
                raise ProtocolError("the daemon's Content-Length is malformed or repeated")
            resp.content_length = int(value)
        elif low == "transfer-encoding":
            raise ProtocolError("the daemon's answer has a Transfer-Encoding (never sent by tkbox)")
        elif low == "upgrade":
            resp.upgrade_exec = value.lower() == EXEC_UPGRADE
        elif low in _KEPT:
            if low in resp.headers:
                raise ProtocolError("the daemon's answer repeats %s" % name)
            if len(value) > MAX_HEADER_VALUE:
                raise ProtocolError("the daemon's %s is longer than %d bytes" % (name, MAX_HEADER_VALUE))
            resp.headers[low] = value
    return resp


class Connection(object):
    """One connection, one request (the daemon closes it after the answer)."""

    def __init__(self, path, timeout):
        self.path = path
        self.buf = bytearray()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except OSError as e:
            self.sock.close()
            raise ConnectError(
                "no daemon answers at %s (%s): start one with 'tkbox daemon' (or set TKBOX_STATE_DIR / "
                "TKBOX_SOCKET)" % (path, e.strerror or e)
            )

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_request(self, method, target, body=None, upgrade=False):
        """Send the request; body is bytes (JSON) or None. A send error is kept: an early answer may explain it."""
        body = body or b""
        if len(body) > MAX_REQUEST_BODY:
            raise ValueError("the request body is over the daemon's 2 MiB cap")
        head = "%s %s HTTP/1.1\r\nHost: tkbox\r\nContent-Length: %d\r\n" % (method, target, len(body))
        if body:
            head += "Content-Type: application/json\r\n"
        if upgrade:
            head += "Connection: Upgrade\r\nUpgrade: %s\r\n" % EXEC_UPGRADE
        head += "\r\n"
        try:
            self.sock.sendall(head.encode("ascii") + bytes(body))
            return None
        except OSError as e:
            return e

    def _fill(self, want=65536):
        try:
            b = self.sock.recv(want)
        except socket.timeout:
            raise ProtocolError("the daemon did not answer within the client's timeout")
        except OSError as e:
            raise ProtocolError("reading the daemon's answer: %s" % (e.strerror or e))
        if not b:
            return False
        self.buf += b
        return True

    def read_head(self, on_interim=None):
        """The final response head; each interim 1xx (not 101) with Tkbox-Approval goes to on_interim(id)."""
        while True:
            end = self.buf.find(b"\r\n\r\n")
            while end < 0:
                if len(self.buf) > MAX_RESPONSE_HEAD:
                    raise ProtocolError("the daemon's response head is over %d bytes" % MAX_RESPONSE_HEAD)
                if not self._fill():
                    raise ProtocolError("the daemon closed the connection before a complete answer")
                end = self.buf.find(b"\r\n\r\n")
            if end + 4 > MAX_RESPONSE_HEAD:
                raise ProtocolError("the daemon's response head is over %d bytes" % MAX_RESPONSE_HEAD)
            resp = parse_head(bytes(self.buf[: end + 4]))
            del self.buf[: end + 4]
            if 100 <= resp.status < 200 and resp.status != 101:
                ap = resp.headers.get("tkbox-approval")
                if on_interim is not None and ap is not None:
                    on_interim(ap)
                continue
            return resp

    def read_body(self, resp, cap):
        """The body (Content-Length, at most cap bytes)."""
        if resp.content_length is None:
            raise ProtocolError("the daemon's answer has no Content-Length")
        if resp.content_length > cap:
            raise ProtocolError(
                "the daemon's answer is %d bytes, over the client's cap of %d" % (resp.content_length, cap)
            )
        while len(self.buf) < resp.content_length:
            if not self._fill(min(1 << 20, resp.content_length - len(self.buf))):
                raise ProtocolError(
                    "the daemon's answer was cut (%d of %d bytes)" % (len(self.buf), resp.content_length)
                )
        body = bytes(self.buf[: resp.content_length])
        del self.buf[: resp.content_length]
        return body


# ---------------------------------------------------------------- exec stream frames


def encode_frame(ftype, payload=b""):
    """One client frame: STDIN (1..64 KiB), STDIN_EOF (empty) or SIGNAL (one forwardable signal)."""
    payload = bytes(payload)
    if ftype == STDIN:
        if not 1 <= len(payload) <= MAX_DATA:
            raise ValueError("a STDIN frame carries 1..65536 bytes")
    elif ftype == STDIN_EOF:
        if payload:
            raise ValueError("STDIN_EOF is empty")
    elif ftype == SIGNAL:
        if len(payload) != 1 or payload[0] not in FORWARDABLE_SIGNALS:
            raise ValueError("a signal for the command is SIGHUP, SIGINT, SIGQUIT, SIGKILL or SIGTERM")
    else:
        raise ValueError("not a frame type a client sends: 0x%02x" % ftype)
    return struct.pack(">BI", ftype, len(payload)) + payload


def _max_payload(ftype):
    """The largest payload of a frame the box may send, or None for a type it may not send."""
    return {STARTED: 0, STDOUT: MAX_DATA, STDERR: MAX_DATA, EXIT: 5, ERROR: MAX_ERROR, CREDIT: 4}.get(ftype)


def check_frame_header(header):
    """(type, length) of a frame header from the box, refused before its payload is read when outside the table."""
    ftype, n = struct.unpack(">BI", header)
    cap = _max_payload(ftype)
    if cap is None:
        raise ProtocolError("the exec stream sent a frame of type 0x%02x (not a type the box sends)" % ftype)
    if n > cap:
        raise ProtocolError("the exec stream sent a frame of type 0x%02x of %d bytes (at most %d)" % (ftype, n, cap))
    return ftype, n


def decode_frame(ftype, payload):
    """Check a frame from the box against its row; returns (type, value): bytes, str, int or (kind, value)."""
    n = len(payload)
    if _max_payload(ftype) is None or n > _max_payload(ftype):
        raise ProtocolError("the exec stream sent a frame of type 0x%02x of %d bytes" % (ftype, n))
    if ftype == STARTED:
        if n != 0:
            raise ProtocolError("a STARTED frame is empty")
        return ftype, None
    if ftype in (STDOUT, STDERR):
        if n < 1:
            raise ProtocolError("an empty STDOUT/STDERR frame")
        return ftype, bytes(payload)
    if ftype == EXIT:
        if n != 5:
            raise ProtocolError("an EXIT frame is 5 bytes")
        kind, value = struct.unpack(">BI", payload)
        if kind == 0 and value <= MAX_EXIT_CODE:
            return ftype, ("exited", value)
        if kind == 1 and 1 <= value <= MAX_SIGNAL:
            return ftype, ("signaled", value)
        raise ProtocolError("an EXIT frame with kind %d and value %d" % (kind, value))
    if ftype == ERROR:
        if n < 1 or b"\0" in payload:
            raise ProtocolError("an ERROR frame is 1..4096 bytes of text without NUL")
        return ftype, bytes(payload).decode("utf-8", "replace")
    if ftype == CREDIT:
        if n != 4:
            raise ProtocolError("a CREDIT frame is 4 bytes")
        (credit,) = struct.unpack(">I", payload)
        if not 1 <= credit <= STDIN_WINDOW:
            raise ProtocolError("a CREDIT frame of %d (1..%d)" % (credit, STDIN_WINDOW))
        return ftype, credit
    raise ProtocolError("the exec stream sent a frame of type 0x%02x" % ftype)


class FrameReader(object):
    """Incremental decoder: feed bytes, take checked frames. The buffer never holds more than one frame past a read."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, data):
        self.buf += data

    def frames(self):
        out = []
        while len(self.buf) >= FRAME_HEADER:
            ftype, n = check_frame_header(bytes(self.buf[:FRAME_HEADER]))
            if len(self.buf) < FRAME_HEADER + n:
                break
            payload = bytes(self.buf[FRAME_HEADER : FRAME_HEADER + n])
            del self.buf[: FRAME_HEADER + n]
            out.append(decode_frame(ftype, payload))
        return out
