#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tkbox doctor (issue 15) against real components, each run in a private mount namespace whose /etc/resolv.conf
# names a resolver of the test's own (dnsmasq on a loopback address, answering NXDOMAIN for .invalid), so the
# resolver check is the same on every machine:
#   1. nothing running, a resolver address nobody serves, the state dir on a 64 MiB tmpfs: exit 1, and daemon,
#      signer, resolver and disk fail, each with its fix (text and --json);
#   2. a dev signer and a daemon up (tests/daemon/lib.sh): exit 0, --json shape, the signer's isolation as the
#      signer measured it (same-user: a warning), the resolver asked by name (its log), the kvm check reporting the
#      daemon's own cached accelerator verdict (flipped, then restored), the state dir's mode as the daemon checks it;
#   3. the signer, then the daemon stopped (SIGSTOP): the check fails after its timeout instead of hanging;
#   4. completion against that daemon: box names from the real `tkbox ls --json`, approval ids from the real
#      `tkbox approvals --json` (none pending); tkbox-signer status/approvals list --json.
# No box boots (doctor boots a probe VM only when a guest kernel is cached and no accelerator verdict is).
# usage: doctor.sh BUILD_DIR
BUILD=${1:?usage: doctor.sh BUILD_DIR}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a private mount namespace for resolv.conf and a tmpfs)"; exit 77; }
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../daemon/lib.sh
source "$HERE/../daemon/lib.sh"
DNS_PID=
cleanup() {
	# the accelerator verdict this test flipped goes back before lib_cleanup shares it with the other tests
	[ -s "$WORK/accel-probe.orig" ] && cp "$WORK/accel-probe.orig" "$TKBOX_STATE_DIR/accel-probe"
	[ -n "$SIGNER_PID" ] && kill -CONT "$SIGNER_PID" 2>/dev/null
	[ -n "$DNS_PID" ] && kill "$DNS_PID" 2>/dev/null && wait "$DNS_PID" 2>/dev/null
	lib_cleanup
}
trap cleanup EXIT
echo "TAP version 13"

DNS_IP=127.0.79.$(($$ % 250 + 2))
NODNS_IP=127.0.80.$(($$ % 250 + 2))
printf 'nameserver %s\noptions timeout:1 attempts:1\n' "$DNS_IP" >"$WORK/resolv.ok"
printf 'nameserver %s\noptions timeout:1 attempts:1\n' "$NODNS_IP" >"$WORK/resolv.none"
/usr/sbin/dnsmasq --keep-in-foreground --conf-file=/dev/null --no-hosts --no-resolv --bind-interfaces \
	--listen-address="$DNS_IP" --port=53 --address=/invalid/ --log-queries --log-facility="$WORK/dns.log" \
	--user=root --group=root --pid-file="$WORK/dns.pid" 2>"$WORK/dns.err" &
DNS_PID=$!

# doctor RESOLV [ENV=V...] -- ARGS...: tkbox doctor in a private mount namespace with that resolv.conf (and, with
# SMALL=1, a 64 MiB tmpfs at $WORK/small); stdout to $WORK/out, the exit status to $WORK/rc.
doctor() {
	local resolv=$1
	shift
	unshare -m bash -c 'mount --bind "$1" /etc/resolv.conf || exit 99
		if [ -n "${SMALL:-}" ]; then mkdir -p "$2/small" && mount -t tmpfs -o size=64m tmpfs "$2/small" || exit 99; fi
		shift 2; exec "$@"' doctor "$resolv" "$WORK" "$TKBOX" doctor "$@" >"$WORK/out" 2>"$WORK/err"
	echo $? >"$WORK/rc"
}
has() { grep -qF -- "$1" "$WORK/out"; }
# json_check PYTHON-CONDITION: the --json output as `d`, checks by name as `c`.
json_check() {
	python3 - "$WORK/out" "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert set(d) == {"ok", "state_dir", "checks"}, d.keys()
assert isinstance(d["ok"], bool) and isinstance(d["checks"], list)
c = {}
for x in d["checks"]:
    assert set(x) == {"name", "status", "finding", "fix"}, x
    assert x["status"] in ("ok", "warn", "fail") and x["finding"], x
    # a fix for every check that is not ok, none for one that is
    assert (x["fix"] is None) == (x["status"] == "ok") and (x["fix"] is None or x["fix"]), x
    c[x["name"]] = x
assert d["ok"] == all(x["status"] != "fail" for x in d["checks"])
assert {"daemon", "signer", "isolation", "qemu", "guest", "kernel", "kvm", "resolver", "state", "disk"} <= set(c), set(c)
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}
status_of() { awk -v n="$1" '$2 == n { print $1; exit }' "$WORK/out"; }

# ---- 1. nothing up
"$SIGNER" status --json --dir "$WORK/nosigner" --socket "$WORK/none.sock" >"$WORK/st0.json" 2>"$WORK/st0.err"
check "tkbox-signer status --json with no signer: exit 3, nothing on stdout, the reason on stderr" \
	bash -c "[ $? = 3 ] && [ ! -s '$WORK/st0.json' ] && grep -q 'not running' '$WORK/st0.err'"
SMALL=1 TKBOX_STATE_DIR=$WORK/small/state doctor "$WORK/resolv.none"
check "nothing up: exit 1" [ "$(cat "$WORK/rc")" = 1 ]
check "nothing up: daemon fails with how to start it" has "fix: start it: tkbox daemon"
check "nothing up: the daemon line names the socket" has "no daemon answers at $WORK/small/state/api/tkbox.sock"
check "nothing up: signer fails with how to start one" has "fix: start one: tkbox-signer up --wait"
check "nothing up: signer names TKBOX_SIGNER_SOCKET's socket" has "no signer answers at $TKBOX_SIGNER_SOCKET"
check "nothing up: resolver fails (nothing serves $NODNS_IP)" [ "$(status_of resolver)" = fail ]
check "nothing up: resolver's fix names resolv.conf and --resolve" has "--resolve NAME=ADDR"
check "nothing up: a 64 MiB state file system fails the disk check" has "MiB free, below 1024 MiB"
check "nothing up: qemu ok" [ "$(status_of qemu)" = ok ]
check "nothing up: the guest agent is found next to tkbox-host" [ "$(status_of guest)" = ok ]
check "nothing up: no library log line on stderr" [ ! -s "$WORK/err" ]
sed 's/^/# /' "$WORK/out"
cp "$WORK/out" "$WORK/out.1"
SMALL=1 TKBOX_STATE_DIR=$WORK/small/state doctor "$WORK/resolv.none" --json
check "nothing up --json: exit 1, shape, the four failures" json_check \
	'not d["ok"] and all(c[n]["status"] == "fail" for n in ("daemon", "signer", "resolver", "disk")) and c["qemu"]["status"] == "ok"'
check "nothing up --json: isolation unknown is a warning, not a second failure" json_check \
	'c["isolation"]["status"] == "warn" and "unknown" in c["isolation"]["finding"]'

mkdir -m 0777 "$WORK/loose" && chmod 0777 "$WORK/loose"
TKBOX_STATE_DIR=$WORK/loose doctor "$WORK/resolv.none"
check "a state dir others may write: the state check fails as the daemon would refuse it" \
	bash -c "[ '$(status_of state)' = fail ] && grep -q 'writable by group or others (mode 0777)' '$WORK/out'"
check "nothing up: a state dir that does not exist yet is fine (the daemon creates it)" \
	grep -q '^ok    state       state dir .* does not exist yet' "$WORK/out.1"

# ---- 2. a signer and a daemon
for n in cbox1 cbox2; do # stopped boxes a previous daemon left (tests/daemon/apply-states.sh does the same)
	mkdir -p -m 0700 "$TKBOX_STATE_DIR/boxes/$n"
	printf '{"name":"%s","state":"stopped","created":1,"accel":"tcg","isolation":"emulated"}' "$n" \
		>"$TKBOX_STATE_DIR/boxes/$n/box.json"
done
chmod 0700 "$TKBOX_STATE_DIR" "$TKBOX_STATE_DIR/boxes"
signer_init && signer_start && daemon_start || { echo "Bail out! no signer or daemon"; exit 1; }
t0=$(t)
doctor "$WORK/resolv.ok"
echo "# doctor with everything up took $(elapsed "$t0") s"
sed 's/^/# /' "$WORK/out"
check "up: exit 0" [ "$(cat "$WORK/rc")" = 0 ]
check "up: daemon ok, with its box count" has "boxes"
check "up: signer ok" [ "$(status_of signer)" = ok ]
check "up: the dev signer's isolation is same-user, a warning with the system-mode fix" \
	bash -c "[ '$(status_of isolation)' = warn ] && grep -q 'same-user: the signer runs as this user' '$WORK/out' && grep -q 'System mode' '$WORK/out'"
check "up: resolver ok" [ "$(status_of resolver)" = ok ]
check "up: the test's resolver was asked for the probe name" grep -q 'query\[A*\] tkbox-doctor.invalid' "$WORK/dns.log"
check "up: disk ok" [ "$(status_of disk)" = ok ]
doctor "$WORK/resolv.ok" --json
check "up --json: ok true, each check ok except isolation/kernel/kvm (which may warn)" json_check \
	'd["ok"] and all(c[n]["status"] == "ok" for n in ("daemon", "signer", "qemu", "guest", "resolver", "state", "disk")) and c["isolation"]["status"] == "warn"'
check "up --json: state_dir is the daemon's" json_check "d['state_dir'] == '$TKBOX_STATE_DIR'"

# The kvm check is the daemon's own decision (vm_accel_resolve): with a cached verdict for this host and kernel, it
# is that verdict. Flipped to kvm (when /dev/kvm opens here), doctor says KVM works; the original goes back at once.
probe=$TKBOX_STATE_DIR/accel-probe
if [ -r /dev/kvm ] && [ -w /dev/kvm ] && [ -s "$probe" ] && [ "$(sed -n 2p "$probe")" = tcg ] &&
	json_check 'c["kernel"]["status"] == "ok"'; then
	cp "$probe" "$WORK/accel-probe.orig"
	sed -i '2s/^tcg$/kvm/' "$probe"
	doctor "$WORK/resolv.ok" --json
	cp "$WORK/accel-probe.orig" "$probe"
	check "kvm: the daemon's cached verdict is what doctor reports (flipped to kvm: ok)" json_check \
		'c["kvm"]["status"] == "ok" and "KVM works" in c["kvm"]["finding"]'
	doctor "$WORK/resolv.ok" --json
	check "kvm: and back to tcg: a warning naming TCG" json_check \
		'c["kvm"]["status"] == "warn" and "TCG" in c["kvm"]["finding"]'
else
	echo "# kvm verdict check skipped: no openable /dev/kvm, no cached verdict (tcg) or no cached kernel"
fi

# The signer's own listings take --json too.
"$SIGNER" status --json --dir "$WORK/signer" --socket "$TKBOX_SIGNER_SOCKET" >"$WORK/st.json"
check "tkbox-signer status --json: the status object (dev mode, same-user)" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["mode"] == "dev" and d["isolation"] == "same-user" and isinstance(d["records"], int), d
' "$WORK/st.json"
"$SIGNER" approvals list --json --dir "$WORK/signer" --socket "$TKBOX_SIGNER_SOCKET" >"$WORK/sap.json"
check "tkbox-signer approvals list --json: {approvals: []}" python3 -c \
	'import json,sys; assert json.load(open(sys.argv[1])) == {"approvals": []}' "$WORK/sap.json"

# ---- 3. a signer that does not answer
kill -STOP "$SIGNER_PID"
doctor "$WORK/resolv.ok" --json
kill -CONT "$SIGNER_PID"
python3 -c 'import json,sys; print("# signer stopped:", [c["finding"] for c in json.load(open(sys.argv[1]))["checks"] if c["name"] == "signer"][0])' "$WORK/out"
check "stopped signer: the signer check fails (no hang), the daemon still answers" json_check \
	'not d["ok"] and c["signer"]["status"] == "fail" and c["daemon"]["status"] == "ok"'

kill -STOP "$DAEMON_PID"
doctor "$WORK/resolv.ok" --json
kill -CONT "$DAEMON_PID"
python3 -c 'import json,sys; print("# daemon stopped:", [c["finding"] for c in json.load(open(sys.argv[1]))["checks"] if c["name"] == "daemon"][0])' "$WORK/out"
check "stopped daemon: the daemon check fails (no hang)" json_check \
	'not d["ok"] and c["daemon"]["status"] == "fail" and "no answer within" in c["daemon"]["finding"]'

# ---- 4. completion against the real daemon
# shellcheck disable=SC1090
source <("$BUILD/tkbox-host" completion bash)
complete_words() {
	COMP_WORDS=("$@")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMPREPLY=()
	_tkbox
	printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' ' | sed 's/ $//'
}
got=$(complete_words "$TKBOX" rm "")
[ "$got" = "cbox1 cbox2" ] && ok "completion: tkbox rm <TAB> offers the daemon's boxes" ||
	notok "completion: tkbox rm <TAB> offers the daemon's boxes" "got '$got'" "$("$TKBOX" ls --json 2>&1 | head -5)"
got=$(complete_words "$TKBOX" export cbox2 -o x.tkb --state-dir "$TKBOX_STATE_DIR" "")
[ "$got" = "" ] && ok "completion: no second box name" || notok "completion: no second box name" "got '$got'"
"$TKBOX" approvals --json >"$WORK/ap.json"
check "approvals --json: the API's object with an empty list" python3 -c \
	'import json,sys; d=json.load(open(sys.argv[1])); assert d["approvals"] == []' "$WORK/ap.json"
got=$(complete_words "$TKBOX" approve "")
[ "$got" = "" ] && ok "completion: no approval pending, no id offered" || notok "completion: no approval pending" "got '$got'"

echo "1..$((pass + fail))"
echo "# $pass passed, $fail failed"
[ "$fail" -eq 0 ]
