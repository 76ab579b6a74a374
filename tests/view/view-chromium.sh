#!/bin/sh
# tkbox view in headless Chromium (Debian's chromium), over bundles a real tkbox-signer wrote (view-gen drives it
# the way the daemon does: the demo's crossings, and the same with HTML/script payloads in every string the bundle
# carries). Checks: the verdict at the top (verified, not verified without --trust, failed on a tampered bundle with
# the reason, unusable); the per-door counts against an independent count of the bundle's records (doors.py) and the
# demo's known numbers; each CSS filter shows exactly its door's records (clicked over the DevTools pipe); no
# payload ran (the title is unchanged, no script/img/svg element, no on* attribute) with and without the page's CSP,
# and the same payloads do run in a control page where the renderer's escaping is undone (so this test can fail);
# a screenshot is made (VIEW_SCREENSHOT=FILE keeps it, e.g. docs/view.png).
# usage: view-chromium.sh TKBOX-SIGNER VIEW-GEN TKBOX
set -eu
SIGNER=$1 GEN=$2 TKBOX=$3
HERE=$(cd "$(dirname "$0")" && pwd)
command -v chromium >/dev/null || { echo "FAIL: chromium is not installed (make deps installs Debian's chromium)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/tkview.XXXXXX)
export TKBOX_SIGNER_SOCKET="$WORK/run/signer.sock" TKBOX_SIGNER_DIR="$WORK/state"
cleanup() {
	"$SIGNER" down --dir "$TKBOX_SIGNER_DIR" >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
fail() { echo "FAIL: $*" >&2; exit 1; }
chrome() {
	udd=$(mktemp -d "$WORK/udd.XXXXXX")
	set +e
	timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
		--disable-background-networking --disable-component-update --disable-sync --user-data-dir="$udd" "$@" 2>/dev/null
	rc=$?
	set -e
	rm -rf "$udd"
	return $rc
}
# view ARGS... EXPECTED-EXIT: run tkbox view, check its exit status
view() {
	want=$1
	shift
	set +e
	"$TKBOX" view "$@" 2>"$WORK/view.err"
	got=$?
	set -e
	[ "$got" -eq "$want" ] || { cat "$WORK/view.err" >&2; fail "tkbox view $*: exit $got, want $want"; }
}

"$SIGNER" init --dev >/dev/null || fail "signer init"
"$SIGNER" up --wait >/dev/null || fail "signer up"
"$GEN" "$TKBOX_SIGNER_SOCKET" "$WORK/demo.tkb" demo || fail "view-gen demo"
"$GEN" "$TKBOX_SIGNER_SOCKET" "$WORK/hostile.tkb" hostile || fail "view-gen hostile"
"$SIGNER" down >/dev/null || fail "signer down"
cd "$WORK"

# The command: verdicts and exit statuses.
view 0 demo.tkb --trust demo.trust.json -o demo.html
grep -q '"demo.html": VERIFIED$' view.err || fail "no VERIFIED on stderr: $(cat view.err)"
view 0 hostile.tkb --trust hostile.trust.json -o hostile.html
view 0 hostile.tkb -o hostile-nt.html
grep -q 'not verified: no trust file given' view.err || fail "no 'not verified' on stderr"
python3 - demo.tkb tampered.tkb <<'PY' || fail "making the tampered bundle"
import sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
    for n in z.namelist():
        d = z.read(n)
        if n.startswith("runs/"):
            d = d.replace(b'"host":"169.254.169.254"', b'"host":"169.254.169.253"', 1)
        out.writestr(n, d)
PY
view 1 tampered.tkb --trust demo.trust.json -o tampered.html
echo '{}' >bad.trust.json
view 2 demo.tkb --trust bad.trust.json -o unusable.html
printf 'PK\003\004 not a bundle' >garbage.tkb
view 2 garbage.tkb -o garbage.html
grep -q 'The bundle could not be read (' garbage.html || fail "the page of a file that is not a bundle does not say so"
view 2
view 2 demo.tkb
view 2 demo.tkb -o demo2.html --bogus
view 2 missing.tkb -o missing.html
[ ! -e missing.html ] || fail "a page was written for a bundle that could not be read"
view 2 demo.tkb -o "$WORK/no/such/dir/x.html"
# An existing page is replaced whole (a temporary file renamed over it), and nothing is left beside it.
cp hostile.html again.html
view 0 demo.tkb --trust demo.trust.json -o again.html
cmp -s again.html demo.html || fail "the page was not replaced"
[ "$(ls -a | grep -c '^\.again\|again.html.')" -eq 0 ] || fail "a temporary file was left: $(ls -a)"

# Pages as Chromium sees them.
for p in demo hostile hostile-nt tampered unusable; do
	chrome --dump-dom "file://$WORK/$p.html" >"$p.dom" || fail "chromium --dump-dom $p.html"
	[ -s "$p.dom" ] || fail "empty DOM for $p.html"
done
for p in demo hostile; do
	python3 "$HERE/cdp-filters.py" "$WORK/$p.html" >"$p.cdp" || fail "chromium over the DevTools pipe on $p.html"
done
# Control pages: the hostile page without its CSP (escaping alone), and with its escaping undone (what a page
# that did not escape would be): there the payloads must run, with and without the CSP.
python3 - hostile.html <<'PY' || fail "making the control pages"
import html, re, sys
page = open(sys.argv[1], encoding="utf-8").read()
csp = re.compile(r'<meta http-equiv="Content-Security-Policy"[^>]*>')
assert csp.search(page)
open("nocsp.html", "w").write(csp.sub("", page))
head, body = page.split("<body>", 1)
open("unescaped.html", "w").write(csp.sub("", head) + "<body>" + html.unescape(body))
open("unescaped-csp.html", "w").write(head + "<body>" + html.unescape(body))
PY
for p in nocsp unescaped unescaped-csp; do
	chrome --dump-dom "file://$WORK/$p.html" >"$p.dom" || fail "chromium --dump-dom $p.html"
done
chrome --screenshot="$WORK/demo.png" --window-size=1280,1700 "file://$WORK/demo.html" >/dev/null || fail "screenshot"
python3 - "$WORK" "$HERE" <<'PY' || fail "the pages"
import html.parser, json, sys
W = sys.argv[1] + "/"

class Dom(html.parser.HTMLParser):
    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.tags, self.ids, self.text, self.title, self.stack, self.cur = [], {}, [], "", [], None
        self.feed(text)
    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self.stack.append(tag)
        self.cur = dict(attrs).get("id") or self.cur
    def handle_endtag(self, tag):
        self.stack.append("/" + tag)
        if tag in ("section", "td"):
            self.cur = None
    def handle_data(self, d):
        self.text.append(d)
        if self.stack and self.stack[-1] == "title":
            self.title += d
        if self.cur:
            self.ids[self.cur] = self.ids.get(self.cur, "") + d

def dom(name):
    return Dom(open(W + name + ".dom", encoding="utf-8").read())

sys.path.insert(0, sys.argv[2])
from doors import counts

def check(cond, what):
    if not cond:
        raise SystemExit("FAIL: " + what)

PAYLOADS = ["<script>document.title='PWNED1'</script>", "\"><img src=x onerror=\"document.title='PWNED2'\">",
            "</pre></details></li></ol><svg onload=\"document.title='PWNED3'\"></svg>"]
for page, bundle, verdict in [("demo", "demo.tkb", "VERIFIED"), ("hostile", "hostile.tkb", "VERIFIED"),
                              ("hostile-nt", "hostile.tkb", "NOT VERIFIED"), ("tampered", "demo.tkb", "FAILED")]:
    d = dom(page)
    want = counts(W + bundle)
    text = "".join(d.text)
    check(d.title == "tkbox view: " + bundle.replace("demo.tkb", "tampered.tkb" if page == "tampered" else "demo.tkb"),
          "%s: title %r" % (page, d.title))
    check(d.ids.get("verdict", "").strip().startswith(verdict), "%s: verdict %r" % (page, d.ids.get("verdict", "")[:80]))
    for k, v in want.items():
        check(d.ids.get("n-" + k) == str(v), "%s: count %s is %r, the bundle has %d" % (page, k, d.ids.get("n-" + k), v))
    check(not [t for t, a in d.tags if t in ("script", "img", "svg", "iframe", "object", "embed")], page + ": active element")
    check(not [t for t, a in d.tags if any(k.startswith("on") for k in a)], page + ": an on* attribute")
    if not page in ("demo", "hostile"):
        print("%s: %s, %d records, counts match the bundle, nothing ran" % (page, verdict, want["all"]))
        continue
    cdp = json.load(open(W + page + ".cdp"))
    check(cdp["title"] == d.title and cdp["scripts"] == 0 and cdp["handlers"] == 0, page + ": DevTools saw " + str(cdp))
    check(cdp["visible"]["all"] == want["all"] == cdp["back"], page + ": visible records " + str(cdp))
    for k, v in cdp["visible"].items():
        check(v == want[k], "%s: filter %s shows %d records, the bundle has %d" % (page, k, v, want[k]))
    check(len(cdp["visible"]) >= 6, page + ": too few filters " + str(cdp["visible"]))
    if page.startswith("hostile"):
        for p in PAYLOADS:
            check(p in text, "%s: payload %r not shown as text" % (page, p))
    print("%s: %s, %d records, counts and filters match the bundle, nothing ran" % (page, verdict, want["all"]))

demo = counts(W + "demo.tkb")
check([demo[k] for k in ["cmd", "net", "files", "appr", "sec", "model", "run", "refused", "all"]] ==
      [9, 7, 3, 1, 2, 1, 5, 3, 28], "the demo run's counts are not the expected ones: " + str(demo))
hostile = counts(W + "hostile.tkb")
check(hostile["appr"] >= 3, "the hostile run has no signer approvals: " + str(hostile))
t = "".join(dom("tampered").text)
check("Verification failed" in t and "[FAIL]" in t and "Do not rely on them" in t, "tampered: no failure shown")
u = dom("unusable")
check(u.ids.get("verdict", "").startswith("UNUSABLE BUNDLE") and "trust config" in u.ids["verdict"], "unusable: " + u.ids.get("verdict", "")[:200])
# Escaping alone (no CSP) holds; undone, the payloads run, with the CSP they do not.
check(dom("nocsp").title == "tkbox view: hostile.tkb", "without the CSP a payload ran: " + dom("nocsp").title)
check("PWNED" in dom("unescaped").title, "control: the payloads did not run in the unescaped page (title %r): this test could not fail" % dom("unescaped").title)
check(dom("unescaped-csp").title == "tkbox view: hostile.tkb", "control: the CSP did not stop the payloads: " + dom("unescaped-csp").title)
print("control: unescaped, the payloads run (title %r); with the page's CSP they do not" % dom("unescaped").title)
png = open(W + "demo.png", "rb").read()
check(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000, "no screenshot")
PY
if [ -n "${VIEW_SCREENSHOT:-}" ]; then
	cp demo.png "$VIEW_SCREENSHOT"
	echo "screenshot: $VIEW_SCREENSHOT"
fi
echo "PASS: tkbox view in Chromium"
