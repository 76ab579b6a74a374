#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The egress test harness alone (tests/egress/lib.sh), no box: the origins answer from their network namespace
# over the veth with the test CA, dnsmasq answers a test name and logs the query (and only the queries it got),
# another name still resolves through the machine's resolvers, and a daemon started by eg_daemon_start reads our
# resolv.conf while the host's stays untouched; after the run nothing of it is left (run with CHECK_CLEAN=1 from
# another script to see that). Root.
#   tests/egress/harness.sh BUILD_DIR
set -u
BUILD=${1:?usage: harness.sh BUILD_DIR}
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

eg_up
ok "harness up (netns $EG_NS, dnsmasq $EG_DNS_IP)"

c() { curl -sS --max-time 10 --cacert "$EG_CA" "$@" 2>&1; }
out=$(c --resolve "origin.test.example:443:$EG_ORIGIN_IP" https://origin.test.example/)
check "https://origin.test.example/ over the veth with the test CA" test "$out" = "tkbox-origin-ok $EG_NONCE"
out=$(c --resolve "other.test.example:8443:$EG_OTHER_IP" https://other.test.example:8443/host)
check "https on 8443 (other.test.example)" test "$out" = "host=other.test.example"
out=$(c "http://$EG_ORIGIN_IP/host" -H 'Host: origin.test.example')
check "plain http on 80" test "$out" = "host=origin.test.example"
sum=$(curl -sS --max-time 30 --cacert "$EG_CA" --resolve "origin.test.example:443:$EG_ORIGIN_IP" \
	https://origin.test.example/big.bin | sha256sum | cut -d' ' -f1)
check "big.bin ($EG_BIG_MIB MiB) intact" test "$sum" = "$EG_BIG_SHA"
out=$(curl -sS --max-time 10 https://origin.test.example/ --resolve "origin.test.example:443:$EG_ORIGIN_IP" 2>&1)
check "without the test CA the certificate is not trusted" grep -qi 'certificate' <<<"$out"
out=$(GIT_SSL_CAINFO="$EG_CA" git -c "http.curloptResolve=origin.test.example:443:$EG_ORIGIN_IP" \
	ls-remote https://origin.test.example/repo.git 2>&1)
check "git's dumb HTTP protocol serves the bare repository" grep -q 'refs/heads/main' <<<"$out"
out=$(printf 'ping\n' | timeout 5 socat - "TCP:$EG_ORIGIN_IP:7000" 2>&1 | tr '\n' ' ')
check "plain TCP banner and echo on 7000" test "$out" = "tkbox-echo $EG_NONCE ping "

resolve() { python3 -c 'import socket,sys; print(socket.gethostbyname(sys.argv[1]))' "$1" 2>&1; }
# The test resolver through a process that reads our resolv.conf (as the daemon will).
in_mnt() {
	unshare --mount --propagation private -- sh -c 'mount --bind "$0" /etc/resolv.conf && exec "$@"' \
		"$EG_RESOLV" "$@"
}
check "origin.test.example not queried before" eval '! dns_was_queried origin.test.example'
out=$(in_mnt python3 -c 'import socket; print(socket.gethostbyname("origin.test.example"))' 2>&1)
check "dnsmasq answers origin.test.example = $EG_ORIGIN_IP" test "$out" = "$EG_ORIGIN_IP"
check "dnsmasq logged the query" dns_was_queried origin.test.example
out=$(in_mnt python3 -c 'import socket; print(socket.gethostbyname("private.test.example"))' 2>&1)
check "private.test.example = 10.0.0.1" test "$out" = 10.0.0.1
check "a name never asked is not in the log" eval '! dns_was_queried never-asked.test.example'
check "the host's own resolv.conf is untouched" eval '! grep -q "$EG_DNS_IP" /etc/resolv.conf'
# A name outside test.example goes on to the machine's resolvers (the daemon resolves more than test names).
out=$(in_mnt python3 -c 'import socket; socket.getaddrinfo("tkbox-harness-unknown.invalid", 443)' 2>&1)
check "a name outside test.example is forwarded to the machine's resolvers" \
	grep -q 'forwarded tkbox-harness-unknown\.invalid to ' "$EG_DNS_LOG"

signer_init && signer_start || eg_die "no signer"
eg_daemon_start || eg_die "no daemon"
out=$(cat "/proc/$DAEMON_PID/root/etc/resolv.conf" 2>&1)
check "the daemon reads the test resolver" grep -q "nameserver $EG_DNS_IP" <<<"$out"
check "the daemon is tkbox itself (the wrapper exec'd)" grep -q 'tkbox' "/proc/$DAEMON_PID/cmdline"

echo "1..$((pass + fail))"
[ $fail -eq 0 ]
