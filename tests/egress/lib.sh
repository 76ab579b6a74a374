# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# The network door's test harness (issue 12): real origins and a real resolver on this machine only.
# Source it with BUILD set (it sources tests/daemon/lib.sh for the signer, the daemon and the TAP helpers).
# Needs root and bash. Everything it starts is stopped and everything it makes is removed on exit, even on
# failure (one EXIT trap: eg_cleanup, then lib_cleanup).
#
#   eg_up               the whole harness: network namespace + veth, test CA and certificates, nginx, socat,
#                       dnsmasq (each step below can run alone, in this order)
#   eg_daemon_start ... tests/daemon/lib.sh's daemon_start, in a private mount namespace whose /etc/resolv.conf
#                       names only our dnsmasq (DAEMON_WRAP hook)
#   eg_image            the cached Debian test image (tests/egress/debian-image.sh) -> $EG_LAYOUT
#   eg_box NAME ARGS... tkbox run the Debian image with ARGS (--allow ...), then trust the test CA in it
#   dns_was_queried N   0 when dnsmasq logged a query for name N (any type)
#
# The network (ARCHITECTURE.md "Test networks"): one /27 of 198.51.100.0/24 per run, chosen free under a lock
# (concurrent runs get different slots). Host side .1 of the slot (EG_HOST_IP: one of this host's own
# addresses, so the door refuses it); the namespace holds the origins at .10 (EG_ORIGIN_IP) and .11
# (EG_OTHER_IP), .12 (EG_HELD_IP, the names the approval tests hold). No route to anything else exists in the
# namespace: it has only the veth. dnsmasq listens on 127.0.77.<slot+1>:53 and forwards every other name to the
# servers this machine's /etc/resolv.conf names, so the daemon's own other lookups still work.
#
# Origins (nginx-light, its own prefix, config, pid and logs in $EG_DIR; never /etc/nginx):
#   :80 plain HTTP, :443 and :8443 HTTPS (certificate for origin/other.test.example, *.test.example,
#   *.held.test.example and the origin addresses, signed by the test CA $EG_CA)
#   /index.txt   "tkbox-origin-ok <EG_NONCE>"     /host        "host=<Host header>"
#   /big.bin     EG_BIG_MIB MiB of random bytes    /slow/1.bin  8 MiB at 64 KiB/s (a tunnel that stays open)
#   /repo.git    a bare git repository over git's dumb HTTP protocol (one commit, file README = EG_NONCE)
#   :7000 (socat) a plain TCP banner + echo: "tkbox-echo <EG_NONCE>" then every line back
#   :7001 (socat) speaks first and closes: "tkbox-banner <EG_NONCE>", EOF
# DNS names (dnsmasq --address, subdomains included):
#   origin.test.example -> .10   other.test.example -> .11   held.test.example (and *.held...) -> .12
#   private.test.example -> 10.0.0.1   meta.test.example -> 169.254.169.254   loop.test.example -> 127.0.0.1

: "${BUILD:?BUILD must name the build directory}"
EG_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../daemon/lib.sh
source "$EG_HERE/../daemon/lib.sh"

EG_DIR=$WORK/egress
EG_NS=
EG_VETH_H=
EG_NGINX_PID=
EG_SOCAT_PID=
EG_SOCAT2_PID=
EG_DNS_PID=
EG_LOCK=/run/lock/tkbox-egress-net.lock
EG_NONCE=nonce-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
EG_BIG_MIB=${EG_BIG_MIB:-16}

eg_cleanup() {
	local p
	# The daemon first (it stops its boxes), then what runs in the namespace, then the namespace itself.
	[ -n "$DAEMON_PID" ] && kill -TERM "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
	DAEMON_PID=
	for p in $EG_NGINX_PID $EG_SOCAT_PID $EG_SOCAT2_PID $EG_DNS_PID; do
		kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null
	done
	if [ -n "$EG_NS" ]; then
		# Anything else still in our namespace is ours (socat's forked children).
		for p in $(ip netns pids "$EG_NS" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		ip netns del "$EG_NS" 2>/dev/null # removes the veth pair with it
	fi
	[ -n "$EG_VETH_H" ] && ip link del "$EG_VETH_H" 2>/dev/null
	EG_NS=
	EG_VETH_H=
}
eg_exit() {
	local rc=$?
	eg_cleanup
	lib_cleanup
	exit $rc
}
trap eg_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

eg_die() {
	echo "Bail out! $*"
	exit 1
}

# The network namespace, its veth pair and the slot's addresses.
eg_net_up() {
	local k base
	mkdir -p "$EG_DIR" /run/lock
	EG_NS=tkeg-$$-$RANDOM
	EG_VETH_H=tkegh$$
	exec {lockfd}>"$EG_LOCK"
	flock -w 30 "$lockfd" || eg_die "could not take $EG_LOCK"
	EG_SLOT=
	for k in 1 2 3 4 5 6 7; do
		base=$((32 * k))
		ip -4 -o addr show | grep -q " 198\.51\.100\.$((base + 1))/" && continue
		ss -Hlun "src 127.0.77.$((k + 1))" 2>/dev/null | grep -q . && continue
		EG_SLOT=$k
		break
	done
	[ -n "$EG_SLOT" ] || { flock -u "$lockfd"; eg_die "no free 198.51.100.0/27 slot (other egress test runs?)"; }
	base=$((32 * EG_SLOT))
	EG_HOST_IP=198.51.100.$((base + 1))
	EG_ORIGIN_IP=198.51.100.$((base + 10))
	EG_OTHER_IP=198.51.100.$((base + 11))
	EG_HELD_IP=198.51.100.$((base + 12))
	EG_DNS_IP=127.0.77.$((EG_SLOT + 1))
	ip netns add "$EG_NS" &&
		ip link add "$EG_VETH_H" type veth peer name tkegn$$ netns "$EG_NS" &&
		ip addr add "$EG_HOST_IP/27" dev "$EG_VETH_H" &&
		ip link set "$EG_VETH_H" up &&
		ip -n "$EG_NS" link set lo up &&
		ip -n "$EG_NS" addr add "$EG_ORIGIN_IP/27" dev tkegn$$ &&
		ip -n "$EG_NS" addr add "$EG_OTHER_IP/27" dev tkegn$$ &&
		ip -n "$EG_NS" addr add "$EG_HELD_IP/27" dev tkegn$$ &&
		ip -n "$EG_NS" link set tkegn$$ up
	local rc=$?
	flock -u "$lockfd"
	exec {lockfd}>&-
	[ $rc -eq 0 ] || eg_die "could not make the network namespace $EG_NS"
	# No default route in the namespace: its servers answer only the slot.
	echo "# network: netns $EG_NS, host $EG_HOST_IP, origins $EG_ORIGIN_IP $EG_OTHER_IP $EG_HELD_IP"
}

eg_in_ns() { ip netns exec "$EG_NS" "$@"; }

# The test CA and one server certificate for every test name and origin address.
eg_certs() {
	local d=$EG_DIR/pki
	mkdir -p "$d"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-subj "/CN=tkbox egress test CA $EG_NONCE" -keyout "$d/ca.key" -out "$d/ca.pem" \
		-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
		>/dev/null 2>&1 || eg_die "openssl: test CA"
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=origin.test.example" \
		-keyout "$d/server.key" -out "$d/server.csr" >/dev/null 2>&1 || eg_die "openssl: server key"
	printf '%s\n' "subjectAltName=DNS:origin.test.example,DNS:other.test.example,DNS:*.test.example,DNS:*.held.test.example,IP:$EG_ORIGIN_IP,IP:$EG_OTHER_IP,IP:$EG_HELD_IP" \
		"extendedKeyUsage=serverAuth" "basicConstraints=CA:FALSE" >"$d/ext.cnf"
	openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
		-extfile "$d/ext.cnf" -out "$d/server.pem" >/dev/null 2>&1 || eg_die "openssl: server certificate"
	EG_CA=$d/ca.pem
}

# What nginx serves: the pages, a big file, a slow one, a bare repository for git's dumb HTTP protocol.
eg_content() {
	local w=$EG_DIR/www g=$EG_DIR/git-src
	mkdir -p "$w/slow"
	echo "tkbox-origin-ok $EG_NONCE" >"$w/index.txt"
	head -c $((EG_BIG_MIB * 1048576)) /dev/urandom >"$w/big.bin"
	head -c $((8 * 1048576)) /dev/urandom >"$w/slow/1.bin"
	EG_BIG_SHA=$(sha256sum "$w/big.bin" | cut -d' ' -f1)
	mkdir -p "$g"
	(
		cd "$g" && git init -q -b main . && echo "$EG_NONCE" >README &&
			git add README && git -c user.name=t -c user.email=t@test.example commit -qm init &&
			git clone -q --bare . "$w/repo.git" && cd "$w/repo.git" && git update-server-info
	) || eg_die "git: the test repository"
}

eg_nginx_up() {
	local d=$EG_DIR/nginx
	mkdir -p "$d/tmp" "$d/logs"
	cat >"$d/nginx.conf" <<EOF
master_process off;
daemon off;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/logs/error.log warn;
events { worker_connections 2048; }
http {
	access_log $d/logs/access.log;
	client_body_temp_path $d/tmp/body;
	proxy_temp_path $d/tmp/proxy;
	fastcgi_temp_path $d/tmp/fastcgi;
	uwsgi_temp_path $d/tmp/uwsgi;
	scgi_temp_path $d/tmp/scgi;
	types { text/plain txt; application/octet-stream bin; }
	default_type application/octet-stream;
	keepalive_timeout 30;
	server {
		listen 80 default_server;
		listen 443 ssl default_server;
		listen 8443 ssl default_server;
		server_name _;
		ssl_certificate $EG_DIR/pki/server.pem;
		ssl_certificate_key $EG_DIR/pki/server.key;
		root $EG_DIR/www;
		location = / { rewrite ^ /index.txt last; }
		location = /host { default_type text/plain; return 200 "host=\$host\n"; }
		location /slow/ { limit_rate 64k; }
	}
}
EOF
	eg_in_ns /usr/sbin/nginx -p "$d" -c "$d/nginx.conf" >>"$d/logs/stderr.log" 2>&1 &
	EG_NGINX_PID=$!
	# A plain TCP service for tunnels that are not TLS: a banner, then an echo.
	eg_in_ns socat TCP-LISTEN:7000,reuseaddr,fork \
		SYSTEM:"echo tkbox-echo $EG_NONCE; exec cat" >>"$EG_DIR/socat.log" 2>&1 &
	EG_SOCAT_PID=$!
	# A server that speaks first and closes (no byte from the client needed): a banner, then EOF.
	eg_in_ns socat TCP-LISTEN:7001,reuseaddr,fork SYSTEM:"echo tkbox-banner $EG_NONCE" >>"$EG_DIR/socat.log" 2>&1 &
	EG_SOCAT2_PID=$!
	for _ in $(seq 100); do
		eg_in_ns ss -Hltn 'sport = :443' | grep -q . && eg_in_ns ss -Hltn 'sport = :7000' | grep -q . && return 0
		kill -0 "$EG_NGINX_PID" 2>/dev/null || break
		sleep 0.1
	done
	cat "$d/logs/stderr.log" "$d/logs/error.log" 2>/dev/null
	eg_die "nginx or socat did not start in $EG_NS"
}

eg_dns_up() {
	local d=$EG_DIR/dns servers=() s
	mkdir -p "$d"
	# The machine's own resolvers, so every name outside test.example still resolves for the daemon.
	while read -r s; do
		case $s in 127.*|::1) ;; *) servers+=("--server=$s") ;; esac
	done < <(awk '$1 == "nameserver" { print $2 }' /etc/resolv.conf)
	: >"$d/queries.log"
	/usr/sbin/dnsmasq --keep-in-foreground --conf-file=/dev/null --no-hosts --no-resolv --bind-interfaces \
		--listen-address="$EG_DNS_IP" --port=53 --user=root --group=root --pid-file="$d/dnsmasq.pid" \
		--cache-size=0 --log-queries=extra --log-facility="$d/queries.log" "${servers[@]}" \
		--address="/origin.test.example/$EG_ORIGIN_IP" --address="/other.test.example/$EG_OTHER_IP" \
		--address="/held.test.example/$EG_HELD_IP" --address="/harness-ready.test.example/$EG_ORIGIN_IP" --address=/private.test.example/10.0.0.1 \
		--address=/meta.test.example/169.254.169.254 --address=/loop.test.example/127.0.0.1 \
		>>"$d/stderr.log" 2>&1 &
	EG_DNS_PID=$!
	for _ in $(seq 100); do
				python3 - "$EG_DNS_IP" "$EG_ORIGIN_IP" <<'PY' 2>/dev/null && break
import socket, struct, sys
q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"\x0dharness-ready\x04test\x07example\x00" + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1); s.sendto(q, (sys.argv[1], 53))
r = s.recv(512)
sys.exit(0 if socket.inet_aton(sys.argv[2]) in r[len(q):] else 1)
PY
		kill -0 "$EG_DNS_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$EG_DNS_PID" 2>/dev/null || { cat "$d/stderr.log"; eg_die "dnsmasq did not start on $EG_DNS_IP"; }
	printf 'nameserver %s\noptions timeout:2 attempts:2\n' "$EG_DNS_IP" >"$d/resolv.conf"
	EG_RESOLV=$d/resolv.conf
	EG_DNS_LOG=$d/queries.log
}

eg_up() {
	eg_net_up
	eg_certs
	eg_content
	eg_nginx_up
	eg_dns_up
}

# 0 when dnsmasq logged a query for NAME (any record type), case-insensitive, exact name.
dns_was_queried() {
	grep -qiE "query\[[A-Z0-9]+\] ${1//./\\.} from " "$EG_DNS_LOG"
}

# The daemon in its own mount namespace, with our resolv.conf over /etc/resolv.conf (and nothing else changed).
eg_daemon_start() {
	# shellcheck disable=SC2016
	DAEMON_WRAP=(unshare --mount --propagation private -- sh -c 'mount --bind "$0" /etc/resolv.conf && exec "$@"'
		"$EG_RESOLV")
	daemon_start "$@"
}

eg_image() {
	EG_LAYOUT=$("$EG_HERE/debian-image.sh" | tail -n 1) && [ -s "$EG_LAYOUT/index.json" ] ||
		eg_die "tests/egress/debian-image.sh did not give an OCI layout"
}

# tkbox run the Debian image as NAME with more run arguments, then append the test CA to its bundle (the one
# curl, python3's ssl and git read) and install tests/egress/eg-client.py as /tmp/eg.py. 0 when both worked; the run's stderr is in $WORK/run-NAME.err.
eg_box() {
	local name=$1
	shift
	timeout --kill-after=10 900 "$TKBOX" run --image "oci:$EG_LAYOUT:latest" --name "$name" --memory 512M \
		--disk 512M "$@" </dev/null >"$WORK/run-$name.out" 2>"$WORK/run-$name.err" || return 1
	"$TKBOX" exec -i "$name" -- sh -c 'cat >> /etc/ssl/certs/ca-certificates.crt' <"$EG_CA" \
		>/dev/null 2>"$WORK/ca-$name.err" &&
		"$TKBOX" exec -i "$name" -- sh -c 'cat > /tmp/eg.py' <"$EG_HERE/eg-client.py" >/dev/null 2>&1
}

# tests/egress/eg-client.py in a box (installed by eg_box): BOX SECONDS MODE ARGS...; JSON lines on stdout.
eg_py() {
	local box=$1 secs=$2
	shift 2
	timeout --kill-after=5 "$secs" "$TKBOX" exec "$box" -- python3 /tmp/eg.py "$@" </dev/null 2>&1
}

# A field of the (first) JSON line of CASE in FILE (jq path, e.g. .status): "null" when absent.
jf() { jq -rs --arg c "$2" "[.[] | select(.case == \$c)][0] | $3" "$1" 2>/dev/null; }

# The pending approvals as a JSON array (`tkbox approvals --json`: {approvals: [...]}; a bare array is taken too).
approvals_json() { "$TKBOX" approvals --json 2>/dev/null | jq -c 'if type == "array" then . else (.approvals // []) end'; }

# Run a command in a box with a time limit: its stdout and stderr together on stdout, its status returned.
inbox() { # BOX SECONDS COMMAND...
	local box=$1 secs=$2
	shift 2
	timeout --kill-after=5 "$secs" "$TKBOX" exec "$box" -- "$@" </dev/null 2>&1
}

# The events file of a box.
box_events() { cat "$TKBOX_STATE_DIR/boxes/$1/events.jsonl" 2>/dev/null; }

# Export a box's bundle to $WORK/NAME.tkb and verify it: 0 when `tkbox verify` says VERIFIED.
eg_export_verify() {
	"$TKBOX" export "$1" -o "$WORK/$1.tkb" >/dev/null 2>"$WORK/export-$1.err" &&
		"$TKBOX" verify "$WORK/$1.tkb" --trust "$WORK/$1.trust.json" >"$WORK/verify-$1.out" 2>&1 &&
		grep -q 'Integrity: VERIFIED' "$WORK/verify-$1.out"
}

# The egress records of a bundle, one JSON object a line:
#   {"type":"decision","tool":...,"tool_use_id":...,"decision":...,"args":...}   (policy.decision, any tool)
#   {"type":"result","tool_use_id":...,"ok":...,"value":{...},"duration_ms":N}  (tool.result)
#   {"type":"observe","kind":"tkbox.egress"|"tkbox.approval",...,"data":{...}}  (review records)
bundle_egress() {
	python3 - "$1" <<'PY'
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in sorted(z.namelist()):
    if not n.startswith("runs/"):
        continue
    for line in z.read(n).decode().splitlines():
        ev = json.loads(line)["event"]
        t, d = ev.get("type"), ev.get("data", {})
        if t == "policy.decision":
            print(json.dumps({"type": "decision", "tool": d.get("tool"), "tool_use_id": d.get("tool_use_id"),
                              "decision": d.get("decision"), "rule_ids": d.get("rule_ids"), "event": ev}))
        elif t == "tool.result":
            print(json.dumps({"type": "result", "tool_use_id": d.get("tool_use_id"), "ok": d.get("ok"),
                              "value": d.get("output", {}).get("value", {}), "duration_ms": d.get("duration_ms")}))
        elif t == "review" and str(d.get("reviewer", "")).startswith("tkbox."):
            print(json.dumps({"type": "observe", "kind": d.get("reviewer"), "data": d.get("verdict")}))
PY
}
