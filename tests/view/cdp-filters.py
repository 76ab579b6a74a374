#!/usr/bin/env python3
"""Open a tkbox view page in headless Chromium over the DevTools protocol (--remote-debugging-pipe: NUL-terminated
JSON on fds 3 and 4), click each door filter's label, and print what is visible as JSON:
{"title", "scripts", "handlers", "visible": {"all": n, "cmd": n, ...}, "back": n}.
The page itself runs no script; the test's probe is evaluated by DevTools, outside the page's CSP.
usage: cdp-filters.py PAGE.html"""
import json, os, signal, subprocess, sys, tempfile

PROBE = r"""(() => {
  const vis = () => [...document.querySelectorAll('li.r')].filter(e => e.getClientRects().length > 0).length;
  const out = {title: document.title, visible: {all: vis()},
    scripts: document.querySelectorAll('script,img,svg,iframe,object,embed').length,
    handlers: [...document.querySelectorAll('*')].filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).length};
  for (const id of ['cmd','net','files','appr','sec','model','gap','run','other','refused']) {
    const l = document.querySelector('label[for=f-' + id + ']');
    if (l) { l.click(); out.visible[id] = vis(); }
  }
  document.querySelector('label[for=f-all]').click();
  out.back = vis();
  return out;
})()"""


def main():
    page = os.path.abspath(sys.argv[1])
    udd = tempfile.mkdtemp()
    to_r, to_w = os.pipe()      # our commands -> chromium's fd 3
    from_r, from_w = os.pipe()  # chromium's fd 4 -> us

    def child():
        # The pipes may already be fds 3..6 and close-on-exec: copy them above, then into place (inheritable).
        a, b = os.dup(to_r), os.dup(from_w)
        os.dup2(a, 3)
        os.dup2(b, 4)

    proc = subprocess.Popen(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--user-data-dir=" + udd, "--remote-debugging-pipe", "about:blank"],
        preexec_fn=child, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        close_fds=False)
    os.close(to_r)
    os.close(from_w)
    wf = os.fdopen(to_w, "wb", buffering=0)
    rf = os.fdopen(from_r, "rb", buffering=0)
    pending = b""
    next_id = [0]

    def read_msg():
        nonlocal pending
        while b"\0" not in pending:
            chunk = rf.read(65536)
            if not chunk:
                raise SystemExit("chromium closed the DevTools pipe")
            pending += chunk
        msg, pending = pending.split(b"\0", 1)
        return json.loads(msg)

    def send(method, params=None, session=None, wait_event=None):
        next_id[0] += 1
        m = {"id": next_id[0], "method": method, "params": params or {}}
        if session:
            m["sessionId"] = session
        wf.write(json.dumps(m).encode() + b"\0")
        result, seen = None, wait_event is None
        while result is None or not seen:
            r = read_msg()
            if r.get("id") == next_id[0]:
                if "error" in r:
                    raise SystemExit("%s: %s" % (method, r["error"]))
                result = r["result"]
            elif wait_event and r.get("method") == wait_event and r.get("sessionId") == session:
                seen = True
        return result

    def too_long(signum, frame):
        raise SystemExit("chromium did not answer over the DevTools pipe within 60 s")

    signal.signal(signal.SIGALRM, too_long)
    signal.alarm(60)
    try:
        target = send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        send("Page.enable", session=session)
        send("Page.navigate", {"url": "file://" + page}, session=session, wait_event="Page.loadEventFired")
        res = send("Runtime.evaluate", {"expression": PROBE, "returnByValue": True}, session=session)
        print(json.dumps(res["result"]["value"]))
        try:
            send("Browser.close")
        except SystemExit:
            pass
    finally:
        signal.alarm(0)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        subprocess.run(["rm", "-rf", udd])


main()
