#!/bin/sh
# The network door (egress-door.c) against a real dev signer: init and serve one in a
# temporary directory, then run the door's test with its socket.
# usage: egress-door.sh BUILD_DIR
set -eu
build=$1
work=$(mktemp -d)
pid=
trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || :; fi; rm -rf "$work"' EXIT
"$build/tkbox-signer" init --dev --dir "$work/signer" >/dev/null
# One rule of the test's own: the signer denies WebFetch to denied.test (the door's signer-deny refusal).
sed -i "/^deny:\$/a\\
  - id: TEST-WEB-DENY\\
    tool: WebFetch\\
    field: host\\
    pattern: '^denied\\\\.test\$'\\
    reason: 'test: a host the signer denies'" "$work/signer/policy.yaml"
# A deny whose reason is long and not ASCII (x and 330 euro signs, 991 bytes): the refusal is cut on a character.
long=x
i=0
while [ "$i" -lt 330 ]; do
	long="$long$(printf '\342\202\254')"
	i=$((i + 1))
done
sed -i "/^deny:\$/a\\
  - id: TEST-WEB-LONG\\
    tool: WebFetch\\
    field: host\\
    pattern: '^long\\\\.test\$'\\
    reason: '$long'" "$work/signer/policy.yaml"
# The signer asks a person for asked.test (a stop must end that wait at once).
sed -i "s/^ask: \[\]\$/ask:/" "$work/signer/policy.yaml"
sed -i "/^ask:\$/a\\
  - id: TEST-WEB-ASK\\
    tool: WebFetch\\
    field: host\\
    pattern: '^asked\\\\.test\$'\\
    reason: 'test: a person decides'" "$work/signer/policy.yaml"
"$build/tkbox-signer" serve --dir "$work/signer" --socket "$work/signer.sock" >"$work/signer.log" 2>&1 &
pid=$!
i=0
until [ -S "$work/signer.sock" ] && "$build/tkbox-signer" status --dir "$work/signer" --socket "$work/signer.sock" \
	>/dev/null 2>&1; do
	i=$((i + 1))
	if [ "$i" -gt 100 ]; then
		echo "the signer did not start:" >&2
		cat "$work/signer.log" >&2
		exit 1
	fi
	sleep 0.1
done
"$build/tests/daemon/test-daemon-egress" "$work/signer.sock"

# The daemon's flags: every invalid value stops it (exit 2) with a message naming the flag, before it starts.
refuse() {
	flag=$1
	shift
	rc=0
	"$build/tkbox-host" daemon --state-dir "$work/state" "$@" >"$work/out" 2>"$work/err" || rc=$?
	if [ "$rc" -ne 2 ] || ! grep -q -- "$flag" "$work/err"; then
		echo "tkbox daemon $*: exit $rc, expected 2 and a message naming $flag:" >&2
		cat "$work/err" >&2
		exit 1
	fi
}
refuse --egress-block --egress-block 127.1
refuse --egress-block --egress-block 203.0.113.1/24
refuse --egress-block --egress-block 192.0.2.0/33
refuse --egress-block --egress-block 192.0.2.1,
refuse --resolve --resolve mirror.test
refuse --resolve --resolve 192.0.2.1=192.0.2.1
refuse --resolve --resolve mirror.test=0x7f.1
refuse --resolve --resolve mirror.test=fe80::1%eth0
set --
i=0
while [ "$i" -le 64 ]; do
	set -- "$@" --resolve "n$i.test=192.0.2.1"
	i=$((i + 1))
done
refuse "at most 64" "$@"
# --egress-ca (issue 13): a readable PEM file whose every block is a certificate, at least one.
: >"$work/ca-empty.pem"
printf 'not a certificate\n' >"$work/ca-text.pem"
refuse --egress-ca --egress-ca "$work/no-such.pem"
refuse --egress-ca --egress-ca "$work/ca-empty.pem"
refuse --egress-ca --egress-ca "$work/ca-text.pem"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/ca.key" -subj /CN=tkbox-test \
	-days 1 -out "$work/ca.pem" >/dev/null 2>&1 || { echo "openssl could not make a test certificate" >&2; exit 1; }
{ cat "$work/ca.pem"; printf -- '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n'; } >"$work/ca-bad.pem"
refuse --egress-ca --egress-ca "$work/ca-bad.pem"
[ ! -e "$work/state" ] || { echo "a refused flag left a state directory" >&2; exit 1; }
# A good file passes the check: the daemon goes on to its signer (none here) and says nothing of --egress-ca.
rc=0
timeout 60 "$build/tkbox-host" daemon --state-dir "$work/state2" --signer "$work/none.sock" --egress-ca "$work/ca.pem" \
	>"$work/out" 2>"$work/err" || rc=$?
if [ "$rc" -eq 0 ] || grep -q -- --egress-ca "$work/err"; then
	echo "tkbox daemon --egress-ca with a good file: exit $rc:" >&2
	cat "$work/err" >&2
	exit 1
fi
echo "daemon flags: every invalid value refused"
