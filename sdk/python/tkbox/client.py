# SPDX-License-Identifier: Apache-2.0
"""The tkbox daemon's API as Python calls (docs/integration.md)."""

import base64
import binascii
import hashlib
import json
import os
import re
import socket
import tempfile
import threading

from . import _wire
from .errors import ProtocolError, error_from_reply

__all__ = ["Client", "Secret", "ExecResult", "Execution", "Diff"]

MAX_UPFRONT_STDIN = 1 << 20  # DOOR_MAX_STDIN: more is streamed
MAX_PATCH = 32 << 20  # PATCH_MAX_BYTES
MAX_BUNDLE = 512 << 20  # tkbox export's EXPORT_MAX_BUNDLE
MAX_SUMMARY = 4096  # Tkbox-Patch-Summary (a header value)

_BOX_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
_APPROVAL_ID = re.compile(r"\A[a-z0-9-]{1,31}\Z")
_HEX64 = re.compile(r"\A[0-9a-f]{64}\Z")


def _box(name):
    if not isinstance(name, str) or not _BOX_NAME.match(name):
        raise ValueError("a box name is 1-63 of [A-Za-z0-9._-], starting with a letter or digit")
    return name


def _approval(aid):
    if not isinstance(aid, str) or not _APPROVAL_ID.match(aid):
        raise ValueError("an approval id is ap- and 12 hex digits, as approvals() lists it")
    return aid


def _env_list(env):
    """env as ["K=V", ...] from a mapping or a list of "K=V" strings."""
    if env is None:
        return None
    if isinstance(env, dict):
        return ["%s=%s" % (k, v) for k, v in env.items()]
    return [str(e) for e in env]


class Secret(object):
    """A secret for create_box: its value (read by the caller), the exact hosts it may go to, the header.

    The value never appears in repr() or str(), nor in any error this package raises.
    """

    __slots__ = ("_value", "hosts", "header")

    def __init__(self, value, hosts, header=None):
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        if not isinstance(value, str):
            raise TypeError("a secret's value is a str")
        if isinstance(hosts, str):
            hosts = [hosts]
        self._value = value
        self.hosts = list(hosts)
        self.header = header

    def __repr__(self):
        return "Secret(value=<hidden, %d chars>, hosts=%r, header=%r)" % (len(self._value), self.hosts, self.header)

    __str__ = __repr__

    def _json(self, name):
        d = {"name": name, "value": self._value, "hosts": self.hosts}
        if self.header is not None:
            d["header"] = self.header
        return d


class ExecResult(object):
    """What a command gave: stdout and stderr (bytes), its exit code or the signal that ended it."""

    def __init__(self, stdout, stderr, exit_code, signal, errors, truncated):
        self.stdout = stdout
        self.stderr = stderr
        self.exit_code = exit_code
        self.signal = signal
        self.errors = errors  # the ERROR frames' texts: why it did not start or was cut
        self.truncated = truncated  # True when output past max_output was passed on but not kept here

    @property
    def stdout_text(self):
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self):
        return self.stderr.decode("utf-8", "replace")

    @property
    def ok(self):
        return self.exit_code == 0

    @property
    def status(self):
        """As a shell shows it: the code, or 128 + the signal."""
        return self.exit_code if self.signal is None else 128 + self.signal

    def __repr__(self):
        how = "exit_code=%r" % self.exit_code if self.signal is None else "signal=%r" % self.signal
        return "ExecResult(%s, stdout=%d bytes, stderr=%d bytes)" % (how, len(self.stdout), len(self.stderr))


class Execution(object):
    """A running command's exec stream (Client.exec_start).

    Iterate over it for its output as it comes: ("stdout", bytes), ("stderr", bytes), ("error", str). Then
    .result (or .wait()) holds the ExecResult. .signal(signum) sends SIGINT, SIGTERM, SIGHUP, SIGQUIT or SIGKILL to
    the command's process group. Leaving a with-block (or .close()) before the end kills the command: the daemon
    kills a command whose client went away.
    """

    def __init__(self, conn, stdin_source, max_output):
        self._conn = conn
        self._reader = _wire.FrameReader()
        self._reader.feed(bytes(conn.buf))
        conn.buf = bytearray()
        self._send_lock = threading.Lock()
        self._cv = threading.Condition()
        self._credit = 0
        self._ended = False
        self._max_output = max_output
        self._out = [bytearray(), bytearray()]
        self._errors = []
        self._truncated = False
        self._exit = None
        self.started = False
        self.result = None
        self._stdin_error = None
        self._writer = None
        if stdin_source is not None:
            self._writer = threading.Thread(target=self._pump_stdin, args=(stdin_source,), daemon=True)
            self._writer.start()

    # -- stdin, streamed within the credit the box grants
    def _send(self, data):
        with self._send_lock:
            self._conn.sock.sendall(data)

    def _take_credit(self, want):
        with self._cv:
            while self._credit == 0 and not self._ended:
                self._cv.wait()
            if self._ended:
                return 0
            n = min(want, self._credit, _wire.MAX_DATA)
            self._credit -= n
            return n

    def _pump_stdin(self, source):
        pending = b""
        try:
            chunks = _read_chunks(source) if hasattr(source, "read") else iter(source)
        except Exception as e:
            return self._stdin_failed(e)
        while True:
            if not pending:
                try:
                    chunk = next(chunks, None)
                    if isinstance(chunk, str):
                        chunk = chunk.encode("utf-8")
                    chunk = None if chunk is None else bytes(chunk)
                except Exception as e:  # the caller's source failed
                    return self._stdin_failed(e)
                if chunk is None:
                    break
                pending = chunk
                continue
            n = self._take_credit(len(pending))
            if n == 0:
                return
            try:
                self._send(_wire.encode_frame(_wire.STDIN, pending[:n]))
            except OSError:
                return  # the command ended without reading all of it, or the stream closed
            pending = pending[n:]
        try:
            self._send(_wire.encode_frame(_wire.STDIN_EOF))
        except OSError:
            pass

    def _stdin_failed(self, e):
        """The command must not wait for stdin forever: kill it; the error is raised when its exit is read."""
        self._stdin_error = e
        try:
            self._send(_wire.encode_frame(_wire.SIGNAL, bytes([9])))
        except OSError:
            pass

    def signal(self, signum):
        """Send a signal to the command's process group (SIGHUP, SIGINT, SIGQUIT, SIGKILL or SIGTERM)."""
        self._send(_wire.encode_frame(_wire.SIGNAL, bytes([int(signum) & 0xFF])))

    # -- output
    def _keep(self, i, data):
        room = self._max_output - len(self._out[i])
        if room < len(data):
            self._truncated = True
        if room > 0:
            self._out[i] += data[:room]

    def _end(self):
        with self._cv:
            self._ended = True
            self._cv.notify_all()

    def __iter__(self):
        try:
            while self._exit is None:
                for ftype, value in self._reader.frames():
                    if ftype == _wire.STARTED:
                        self.started = True
                    elif ftype == _wire.STDOUT:
                        self._keep(0, value)
                        yield ("stdout", value)
                    elif ftype == _wire.STDERR:
                        self._keep(1, value)
                        yield ("stderr", value)
                    elif ftype == _wire.ERROR:
                        if len(self._errors) < 64:
                            self._errors.append(value)
                        yield ("error", value)
                    elif ftype == _wire.CREDIT:
                        with self._cv:
                            self._credit += value
                            self._cv.notify_all()
                    elif ftype == _wire.EXIT:
                        self._exit = value
                        break  # the last frame
                if self._exit is not None:
                    break
                if not self._conn._fill(65536):
                    why = ": " + "; ".join(self._errors) if self._errors else ""
                    raise ProtocolError("the exec stream ended before the command's exit status" + why)
                self._reader.feed(bytes(self._conn.buf))
                self._conn.buf = bytearray()
        finally:
            self._end()
            if self._exit is None:
                self.close()
        kind, value = self._exit
        self.result = ExecResult(
            bytes(self._out[0]),
            bytes(self._out[1]),
            value if kind == "exited" else None,
            value if kind == "signaled" else None,
            list(self._errors),
            self._truncated,
        )
        self.close()
        if self._writer is not None:
            self._writer.join(5)
        if self._stdin_error is not None:
            raise self._stdin_error

    def wait(self):
        """Read the stream to its end (output kept in the result) and return the ExecResult."""
        if self.result is None:
            for _ in self:
                pass
        return self.result

    def close(self):
        self._end()
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Diff(object):
    """A box's patch (tkbox diff): the bytes the daemon keeps, their sha256 (checked) and its summary."""

    def __init__(self, patch, sha256, summary):
        self.patch = patch
        self.sha256 = sha256
        self.summary = summary
        self.saved = summary.get("saved") is True
        self.notices = summary.get("notices") if isinstance(summary.get("notices"), list) else []

    @property
    def text(self):
        return self.patch.decode("utf-8", "replace")

    @property
    def files(self):
        """The paths the patch touches (from its diff --git lines)."""
        out = []
        for line in self.text.splitlines():
            if line.startswith("diff --git a/"):
                rest = line[len("diff --git a/") :]
                mid = rest.find(" b/")
                out.append(rest[:mid] if mid >= 0 else rest)
        return out

    def __repr__(self):
        n = (len(self.patch), len(self.files), self.sha256, self.saved)
        return "Diff(%d bytes, %d files, sha256=%s, saved=%r)" % n


class Client(object):
    """A client of the tkbox daemon over its API socket.

    socket: the socket's path; else $TKBOX_SOCKET, else <state_dir>/api/tkbox.sock, with state_dir (else
    $TKBOX_STATE_DIR, ~/.local/state/tkbox, /var/lib/tkbox) as the CLI finds it. timeout: seconds any one
    wait for the daemon may take (connect, each read), except an exec's stream, which lasts as long as the
    command (the daemon ends it at the exec's time limit).
    """

    def __init__(self, socket=None, state_dir=None, timeout=600.0):
        self.socket_path = socket or _wire.socket_path(state_dir)
        self.timeout = timeout

    def __repr__(self):
        return "Client(socket=%r)" % self.socket_path

    # ---------------------------------------------------------------- plumbing
    def _open(self, timeout=False):
        """A connection; timeout False: the client's, None: no limit."""
        return _wire.Connection(self.socket_path, self.timeout if timeout is False else timeout)

    @staticmethod
    def _encode(body):
        if body is None:
            return None
        return bytearray(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))

    @staticmethod
    def _json(conn, resp):
        raw = conn.read_body(resp, _wire.MAX_JSON)
        try:
            v = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise ProtocolError("the daemon's answer (HTTP %d) is not JSON" % resp.status)
        if not isinstance(v, dict):
            raise ProtocolError("the daemon's answer (HTTP %d) is not a JSON object" % resp.status)
        return v

    def _refusal(self, conn, resp):
        try:
            reply = self._json(conn, resp)
        except ProtocolError:
            reply = None
        return error_from_reply(resp.status, reply)

    def _call(self, method, target, body=None, on_interim=None, ok=(200,)):
        data = self._encode(body)
        with self._open() as conn:
            try:
                conn.send_request(method, target, data)
            finally:
                if data is not None:
                    data[:] = bytes(len(data))  # a create body may hold secret values
            resp = conn.read_head(on_interim)
            if resp.status not in ok:
                raise self._refusal(conn, resp)
            return self._json(conn, resp)

    # ---------------------------------------------------------------- boxes
    def info(self):
        """{version, signer, unrecorded, boxes, max_boxes}"""
        return self._call("GET", "/v1/info")

    def ls(self):
        """The boxes, as a list of box objects."""
        v = self._call("GET", "/v1/boxes").get("boxes")
        if not isinstance(v, list):
            raise ProtocolError("the daemon's box list has no boxes array")
        return v

    def get(self, box):
        return self._call("GET", "/v1/boxes/" + _box(box))

    def create_box(
        self,
        image,
        name=None,
        allow=None,
        workspace=None,
        env=None,
        secrets=None,
        memory_mib=None,
        cpus=None,
        disk_mib=None,
        timeout_s=None,
        exec_timeout_s=None,
        platform=None,
        registry_auth=None,
        registry_ca=None,
        inspect=None,
    ):
        """Make a box and return its object once it answers (boot included).

        image: a registry reference, oci:/oci-archive:/docker-archive: source or an ext4 root. allow: allow
        entries and presets. workspace: a directory or git checkout (made absolute here). env: {"K": "V"} or
        ["K=V"]. secrets: {NAME: Secret(value, hosts, header)} (or a dict with value, hosts, header): the value
        goes to the daemon only. inspect: "all" or "none".
        """
        body = {"image": image}
        if name is not None:
            body["name"] = _box(name)
        if allow is not None:
            body["allow"] = [allow] if isinstance(allow, str) else list(allow)
        if workspace is not None:
            body["workspace"] = os.path.abspath(os.fspath(workspace))
        if env is not None:
            body["env"] = _env_list(env)
        for key, v in (
            ("memory_mib", memory_mib),
            ("cpus", cpus),
            ("disk_mib", disk_mib),
            ("timeout_s", timeout_s),
            ("exec_timeout_s", exec_timeout_s),
            ("platform", platform),
            ("inspect", inspect),
        ):
            if v is not None:
                body[key] = v
        for key, v in (("registry_auth", registry_auth), ("registry_ca", registry_ca)):
            if v is not None:
                body[key] = os.path.abspath(os.fspath(v))
        if secrets:
            lst = []
            for sname, s in secrets.items():
                if isinstance(s, dict):
                    s = Secret(s.get("value"), s.get("hosts", []), s.get("header"))
                if not isinstance(s, Secret):
                    raise TypeError("secret %s: give Secret(value, hosts, header)" % sname)
                lst.append(s._json(sname))
            body["secrets"] = lst
        try:
            return self._call("POST", "/v1/boxes", body, ok=(200, 201))
        finally:
            for s in body.get("secrets", ()):
                s["value"] = None

    def stop(self, box):
        """Stop a running box (its patch is saved and recorded first); the box object once QEMU is gone."""
        return self._call("POST", "/v1/boxes/%s/stop" % _box(box))

    def rm(self, box):
        """Remove a stopped box: {name, removed}."""
        return self._call("DELETE", "/v1/boxes/" + _box(box))

    # ---------------------------------------------------------------- exec
    def exec_start(
        self, box, argv, stdin=None, env=None, cwd=None, timeout=None, on_approval=None, max_output=16 << 20
    ):
        """Start a command and return its Execution (iterate it for output as it comes).

        stdin: None (no stdin); bytes or str of at most 1 MiB, decided with its digest and given up front; or a
        file-like (read(n)) or an iterator of bytes/str, streamed within the box's credit. timeout: the command's
        time limit in seconds (cut to the box's exec_timeout_s). on_approval(id): called while the signer holds
        the command for a person (approve with `tkbox-signer approvals approve ID`). Raises Denied, NotApproved,
        SignerUnreachable... when the command did not run.
        """
        if isinstance(argv, (str, bytes)) or not argv:
            raise ValueError("argv is a non-empty list of words")
        body = {"argv": [str(a) for a in argv]}
        if env is not None:
            body["env"] = _env_list(env)
        if cwd is not None:
            body["cwd"] = cwd
        if timeout is not None:
            body["timeout_s"] = max(1, int(timeout))
        source = None
        if isinstance(stdin, str):
            stdin = stdin.encode("utf-8")
        if isinstance(stdin, (bytes, bytearray, memoryview)):
            stdin = bytes(stdin)
            if len(stdin) <= MAX_UPFRONT_STDIN:
                body["stdin"] = {"mode": "upfront", "data": base64.b64encode(stdin).decode("ascii")}
            else:
                body["stdin"] = {"mode": "stream"}
                source = (stdin[i : i + _wire.MAX_DATA] for i in range(0, len(stdin), _wire.MAX_DATA))
        elif stdin is not None:
            body["stdin"] = {"mode": "stream"}
            source = stdin
        data = self._encode(body)
        if len(data) > _wire.MAX_REQUEST_BODY:
            raise ValueError("the exec request is over the daemon's 2 MiB cap")
        # The daemon bounds the wait itself (the signer's deadline, 2 minutes for an approval, the time limit).
        conn = self._open(timeout=None)
        try:
            sent = conn.send_request("POST", "/v1/boxes/%s/exec" % _box(box), data, upgrade=True)
            try:
                resp = conn.read_head(on_approval)
            except ProtocolError:
                if sent is not None:
                    raise ProtocolError("sending the exec request: %s" % sent)
                raise
            if resp.status != 101 or not resp.upgrade_exec:
                conn.sock.settimeout(self.timeout)
                raise self._refusal(conn, resp)
            return Execution(conn, source, max_output)
        except BaseException:
            conn.close()
            raise

    def exec(
        self,
        box,
        argv,
        stdin=None,
        env=None,
        cwd=None,
        timeout=None,
        on_stdout=None,
        on_stderr=None,
        on_approval=None,
        max_output=16 << 20,
    ):
        """Run a command in a box to its end and return its ExecResult (see exec_start).

        on_stdout(bytes) and on_stderr(bytes) get the output as it comes; the result keeps up to max_output
        bytes of each (result.truncated tells when more came).
        """
        with self.exec_start(box, argv, stdin, env, cwd, timeout, on_approval, max_output) as ex:
            for kind, data in ex:
                if kind == "stdout" and on_stdout is not None:
                    on_stdout(data)
                elif kind == "stderr" and on_stderr is not None:
                    on_stderr(data)
            return ex.result

    # ---------------------------------------------------------------- patch door
    def diff(self, box):
        """The box's patch (what changed in /workspace): a Diff whose sha256 was checked against the daemon's."""
        with self._open() as conn:
            conn.send_request("GET", "/v1/boxes/%s/diff" % _box(box))
            resp = conn.read_head()
            if resp.status != 200:
                raise self._refusal(conn, resp)
            patch = conn.read_body(resp, MAX_PATCH)
        want = resp.headers.get("tkbox-patch-sha256")
        if want is None or hashlib.sha256(patch).hexdigest() != want:
            raise ProtocolError("the patch received does not match the digest the daemon gave")
        summary = {}
        raw = resp.headers.get("tkbox-patch-summary")
        if raw is not None:
            try:
                summary = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode("utf-8"))
            except (binascii.Error, UnicodeDecodeError, ValueError):
                raise ProtocolError("the daemon's patch summary is malformed")
            if not isinstance(summary, dict):
                raise ProtocolError("the daemon's patch summary is not an object")
        return Diff(patch, want, summary)

    def apply(self, box, checkout=None, dry_run=False, allow_sensitive=False, on_approval=None):
        """Apply a stopped box's saved patch to checkout (each file decided by the signer first).

        Returns the daemon's answer: with dry_run {dry_run: true, files, notices}; else {written, notices, ...}.
        Raises ApplyRefused (a file refused; nothing written), Conflict (no_patch, box_running, ...), etc.
        """
        body = {"dry_run": bool(dry_run), "allow_sensitive": bool(allow_sensitive)}
        if checkout is not None:
            body["checkout"] = os.path.realpath(os.fspath(checkout))
        return self._call("POST", "/v1/boxes/%s/apply" % _box(box), body, on_interim=on_approval)

    # ---------------------------------------------------------------- export
    def export(self, box, path):
        """Export the box's run as a bundle at path (.tkb) and its trust file beside it (NAME.trust.json).

        The bundle's sha256 is checked against the Tkbox-Bundle-Sha256 the daemon sent before anything is
        written; both files are written atomically. Returns {path, trust_path, sha256, bytes, run}.
        """
        path = os.fspath(path)
        trust_path = (path[:-4] if path.endswith(".tkb") and len(path) > 4 else path) + ".trust.json"
        directory = os.path.dirname(os.path.abspath(path))
        with self._open() as conn:
            conn.send_request("POST", "/v1/boxes/%s/export" % _box(box))
            resp = conn.read_head()
            if resp.status != 200:
                raise self._refusal(conn, resp)
            want = resp.headers.get("tkbox-bundle-sha256")
            trust_b64 = resp.headers.get("tkbox-trust")
            if resp.content_length is None or want is None or trust_b64 is None or not _HEX64.match(want):
                raise ProtocolError("the daemon's answer lacks the bundle's length, digest or trust file")
            if resp.content_length > MAX_BUNDLE:
                raise ProtocolError("the bundle is over %d bytes" % MAX_BUNDLE)
            try:
                trust = base64.urlsafe_b64decode(trust_b64 + "=" * (-len(trust_b64) % 4))
                json.loads(trust.decode("utf-8"))
            except (binascii.Error, UnicodeDecodeError, ValueError):
                raise ProtocolError("the trust file in the daemon's answer is malformed")
            fd, tmp = tempfile.mkstemp(prefix=".tkbox-export-", dir=directory)
            try:
                h = hashlib.sha256()
                with os.fdopen(fd, "wb") as f:
                    left = resp.content_length
                    if conn.buf:
                        chunk = bytes(conn.buf[:left])
                        conn.buf = bytearray()
                        f.write(chunk)
                        h.update(chunk)
                        left -= len(chunk)
                    while left > 0:
                        try:
                            chunk = conn.sock.recv(min(left, 1 << 20))
                        except socket.timeout:
                            raise ProtocolError("the daemon stopped sending the bundle (client timeout)")
                        if not chunk:
                            raise ProtocolError("the bundle was cut (%d bytes missing)" % left)
                        f.write(chunk)
                        h.update(chunk)
                        left -= len(chunk)
                    f.flush()
                    os.fsync(f.fileno())
                got = h.hexdigest()
                if got != want:
                    raise ProtocolError(
                        "the bundle received does not match the digest the signer gave; nothing written"
                    )
                os.chmod(tmp, 0o644)
                _write_atomic(trust_path, trust)
                os.replace(tmp, path)
                tmp = None
            finally:
                if tmp is not None:
                    os.unlink(tmp)
        return {
            "path": path,
            "trust_path": trust_path,
            "sha256": want,
            "bytes": resp.content_length,
            "run": resp.headers.get("tkbox-run"),
        }

    # ---------------------------------------------------------------- approvals (the network door)
    def approvals(self):
        """Pending box approvals: [{id, box, target, url, age_s, expires_in_s, waiting}]."""
        v = self._call("GET", "/v1/approvals").get("approvals")
        if not isinstance(v, list):
            raise ProtocolError("the daemon's answer has no approvals list")
        return v

    def approve(self, approval_id):
        """Let a held connection pass (recorded as tkbox.approval first): {id, state}."""
        return self._call("POST", "/v1/approvals/%s/approve" % _approval(approval_id))

    def reject(self, approval_id):
        """Refuse a held connection: {id, state}."""
        return self._call("POST", "/v1/approvals/%s/reject" % _approval(approval_id))


def _read_chunks(f):
    """A file-like's contents in pieces of at most one frame (binary or text; text is sent as UTF-8)."""
    while True:
        chunk = f.read(_wire.MAX_DATA)
        if not chunk:
            return
        yield chunk


def _write_atomic(path, data):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tkbox-trust-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        tmp = None
    finally:
        if tmp is not None:
            os.unlink(tmp)
