# SPDX-License-Identifier: Apache-2.0
"""The Python SDK against a real signer, daemon and box (run by sdk-e2e.sh, which sets TKBOX_SDK_*).

One box for the whole module (tests run in file order): create, exec (output, exit code, signals both ways,
stdin up front and streamed, callbacks), a denied command, NotFound, Conflict, BadRequest, the network door's
approvals (reject, approve), diff after a /workspace change, stop, apply (dry run), export + `tkbox verify`, rm.
"""

import hashlib
import io
import os
import signal
import subprocess
import time

import pytest

import tkbox

IMAGE = os.environ.get("TKBOX_SDK_IMAGE")
TKBOX = os.environ.get("TKBOX_SDK_TKBOX")
WORK = os.environ.get("TKBOX_SDK_WORK")
SIGNER = os.environ.get("TKBOX_SDK_SIGNER")
SIGNER_DIR = os.environ.get("TKBOX_SDK_SIGNER_DIR")
BOX = "sdk1"

pytestmark = pytest.mark.skipif(not IMAGE, reason="run by tests/sdk/sdk-e2e.sh (a real daemon)")


@pytest.fixture(scope="module")
def client():
    return tkbox.Client(timeout=300)


@pytest.fixture(scope="module")
def checkout():
    d = os.path.join(WORK, "repo")
    os.makedirs(d)
    with open(os.path.join(d, "README"), "w") as f:
        f.write("hello from the checkout\n")
    git = ["git", "-C", d, "-c", "user.email=sdk@tkbox", "-c", "user.name=sdk"]
    subprocess.run(["git", "init", "-q", d], check=True)
    subprocess.run(git + ["add", "README"], check=True)
    subprocess.run(git + ["commit", "-qm", "init"], check=True)
    return d


@pytest.fixture(scope="module")
def box(client, checkout):
    b = client.create_box(IMAGE, name=BOX, workspace=checkout, memory_mib=256, disk_mib=128)
    yield b
    try:
        client.stop(BOX)
    except tkbox.TkboxError:
        pass


def test_create_and_list(client, box):
    assert box["name"] == BOX and box["state"] == "running"
    assert BOX in [b["name"] for b in client.ls()]
    assert client.get(BOX)["state"] == "running"
    info = client.info()
    assert info["boxes"] >= 1 and info["unrecorded"] is False


def test_exec_output_and_exit_code(client, box):
    r = client.exec(BOX, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r.stdout, r.stderr, r.exit_code, r.signal, r.ok) == (b"out\n", b"err\n", 3, None, False)
    assert r.stdout_text == "out\n" and r.stderr_text == "err\n"
    r = client.exec(BOX, ["pwd"], cwd="/tmp", env={"SDK_VAR": "v1"})
    assert r.ok and r.stdout_text == "/tmp\n"
    r = client.exec(BOX, ["sh", "-c", 'printf "%s" "$SDK_VAR"'], env=["SDK_VAR=v2"])
    assert r.stdout_text == "v2"


def test_exec_killed_by_a_signal(client, box):
    r = client.exec(BOX, ["sh", "-c", "kill -KILL $$"])
    assert (r.exit_code, r.signal, r.ok, r.status) == (None, 9, False, 137)


def test_exec_signal_sent_and_streaming_iterator(client, box):
    with client.exec_start(BOX, ["sh", "-c", "echo ready; sleep 60; echo never"]) as ex:
        seen = b""
        for kind, data in ex:
            if kind == "stdout":
                seen += data
                if b"ready\n" in seen:
                    ex.signal(signal.SIGTERM)
        r = ex.result
    assert r.signal == signal.SIGTERM and b"never" not in r.stdout


def test_exec_stdin_up_front(client, box):
    r = client.exec(BOX, ["cat"], stdin="héllo\n")
    assert r.ok and r.stdout_text == "héllo\n"
    data = os.urandom(700 * 1024)
    r = client.exec(BOX, ["sha256sum"], stdin=data)
    assert r.ok and r.stdout_text.split()[0] == hashlib.sha256(data).hexdigest()


def test_exec_stdin_streamed(client, box):
    data = os.urandom(3 << 20)  # past the 1 MiB up-front cap and many credit windows
    r = client.exec(BOX, ["sha256sum"], stdin=io.BytesIO(data))
    assert r.ok and r.stdout_text.split()[0] == hashlib.sha256(data).hexdigest()
    chunks = (("line %d\n" % i) for i in range(5000))
    r = client.exec(BOX, ["wc", "-l"], stdin=chunks)
    assert r.ok and r.stdout_text.strip() == "5000"


def test_exec_callbacks(client, box):
    outs, errs = [], []
    r = client.exec(
        BOX,
        ["sh", "-c", "for i in 1 2 3; do echo o$i; echo e$i >&2; done; head -c 200000 /dev/zero"],
        on_stdout=outs.append,
        on_stderr=errs.append,
    )
    assert r.ok
    assert b"".join(outs) == r.stdout == b"o1\no2\no3\n" + bytes(200000)
    assert b"".join(errs) == r.stderr == b"e1\ne2\ne3\n"
    assert max(len(c) for c in outs) <= 65536 and len(outs) >= 4


def test_denied(client, box):
    with pytest.raises(tkbox.Denied) as e:
        client.exec(BOX, ["pkill", "tkbox-signer"])
    assert e.value.status == 403 and e.value.code == "denied"
    assert "TK-D007" in e.value.rule_ids
    assert e.value.decision_id


def _answer_signer(verdict, seen):
    """An on_approval callback that answers the signer's approval as a person would, from the same program."""

    def cb(approval_id):
        seen.append(approval_id)
        subprocess.run(
            [SIGNER, "approvals", verdict, approval_id, "--dir", SIGNER_DIR]
            + ["--socket", os.environ["TKBOX_SIGNER_SOCKET"]],
            check=True,
            stdout=subprocess.DEVNULL,
        )

    return cb


def test_signer_ask_approved_and_rejected(client, box):
    seen = []
    r = client.exec(BOX, ["echo", "ask-me-approve"], on_approval=_answer_signer("approve", seen))
    assert r.ok and r.stdout_text == "ask-me-approve\n" and len(seen) == 1
    with pytest.raises(tkbox.NotApproved) as e:
        client.exec(BOX, ["echo", "ask-me-reject"], on_approval=_answer_signer("reject", seen))
    assert e.value.status == 403 and e.value.approval_id == seen[1]


def test_not_found(client, box):
    with pytest.raises(tkbox.NotFound) as e:
        client.get("no-such-box")
    assert (e.value.status, e.value.code) == (404, "no_such_box")
    with pytest.raises(tkbox.NotFound):
        client.exec("no-such-box", ["true"])
    with pytest.raises(tkbox.NotFound) as e:
        client.approve("ap-000000000000")
    assert e.value.code == "no_such_approval"


def test_conflict_and_bad_request(client, box):
    with pytest.raises(tkbox.Conflict) as e:
        client.create_box(IMAGE, name=BOX)
    assert (e.value.status, e.value.code) == (409, "exists")
    with pytest.raises(tkbox.Conflict) as e:
        client.rm(BOX)
    assert e.value.code == "box_running"
    with pytest.raises(tkbox.BadRequest) as e:
        client.exec(BOX, ["true"], cwd="relative/dir")
    assert e.value.status == 400 and "--cwd" in e.value.message


def _held(client, target):
    for _ in range(240):
        for a in client.approvals():
            if a.get("box") == BOX and a.get("target") == target:
                return a
        time.sleep(0.25)
    raise AssertionError("no pending approval for %s" % target)


@pytest.mark.parametrize("answer", ["reject", "approve"])
def test_network_door_approvals(client, box, answer):
    host = "%s.sdk.invalid" % answer  # approve.sdk.invalid: the daemon's --resolve maps it to 10.255.255.1
    cmd = "http_proxy=http://127.0.0.1:3128 wget -q -O - http://%s/ 2>&1; echo rc=$?" % host
    with client.exec_start(BOX, ["sh", "-c", cmd]) as ex:
        a = _held(client, host + ":80")
        assert a["id"].startswith("ap-")
        got = getattr(client, answer)(a["id"])
        assert got == {"id": a["id"], "state": "rejected" if answer == "reject" else "approved"}
        r = ex.wait()
    # Rejected: the proxy answered 403. Approved: resolved only then, to a private address the door refuses.
    assert r.ok and "rc=0" not in r.stdout_text and "403" in r.stdout_text, r.stdout_text
    assert all(x.get("target") != host + ":80" for x in client.approvals())
    with pytest.raises(tkbox.Conflict) as e:
        client.reject(a["id"]) if answer == "approve" else client.approve(a["id"])
    assert e.value.code == "already_answered"


def test_diff_after_a_workspace_change(client, box):
    r = client.exec(BOX, ["sh", "-c", "echo from the box > /workspace/x.txt && echo more >> /workspace/README"])
    assert r.ok, r.stderr_text
    d = client.diff(BOX)
    assert sorted(d.files) == ["README", "x.txt"]
    assert d.sha256 == hashlib.sha256(d.patch).hexdigest() and not d.saved
    assert "+from the box" in d.text


def test_stop_then_apply_dry_run(client, box, checkout):
    b = client.stop(BOX)
    assert b["state"] == "stopped"
    d = client.diff(BOX)
    assert d.saved and sorted(d.files) == ["README", "x.txt"]
    with pytest.raises(tkbox.Conflict) as e:
        client.exec(BOX, ["true"])
    assert e.value.code == "box_not_running"
    plan = client.apply(BOX, checkout=checkout, dry_run=True)
    assert plan["dry_run"] is True
    assert sorted(f["path"] for f in plan["files"]) == ["README", "x.txt"]
    assert not os.path.exists(os.path.join(checkout, "x.txt"))


def test_export_and_verify(client, box, tmp_path_factory):
    out = os.path.join(str(tmp_path_factory.mktemp("export")), "sdk1.tkb")
    # Known daemon defect (daemon.c api_apply): the apply's reply is sent before the box's `applying` mark is
    # cleared, so an export right after a dry run can get 409 apply_busy for a moment. Bounded retry until fixed.
    for _ in range(50):
        try:
            info = client.export(BOX, out)
            break
        except tkbox.Conflict as e:
            if e.code != "apply_busy":
                raise
            time.sleep(0.1)
    else:
        raise AssertionError("export: apply_busy for 5 s after a dry run")
    trust = os.path.join(os.path.dirname(out), "sdk1.trust.json")
    assert info["path"] == out and info["trust_path"] == trust
    with open(out, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == info["sha256"]
    v = subprocess.run([TKBOX, "verify", out, "--trust", trust], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    text = v.stdout.decode("utf-8", "replace")
    assert v.returncode == 0 and "Integrity: VERIFIED" in text, text
    # The run is closed by the export: applying now is a state conflict.
    with pytest.raises(tkbox.Conflict) as e:
        client.apply(BOX, dry_run=True)
    assert e.value.code == "run_closed"


def test_rm(client, box):
    assert client.rm(BOX)["removed"] is True
    with pytest.raises(tkbox.NotFound):
        client.get(BOX)
