# SPDX-License-Identifier: Apache-2.0
# A real OCI registry on loopback for end-to-end tests: Debian's
# docker-registry with TLS from a test CA made here, fed by skopeo. The same
# setup as tests/image/e2e-image.sh, as functions other tests can source
# (tests/daemon/e2e-image-run.sh does).
#   REG_DIR=/some/tmp/dir; source tests/image/registry-lib.sh
#   reg_ca                      -> $REG_DIR/ca.pem, srv.pem/srv.key, certs/ca.crt
#   reg_start NAME PORT [auth]  -> a registry serving https://localhost:PORT (pid in REG_PID_<NAME>);
#                                  with "auth": htpasswd (bcrypt) Basic auth, user tester / REG_PASSWORD
#   reg_stop NAME               -> stops it and waits until the port no longer answers
#   reg_push OCI_REF DEST       -> skopeo copy OCI_REF docker://DEST
#   reg_free_port               -> a free TCP port on 127.0.0.1
# reg_missing prints the first program these need that is not installed.

: "${REG_DIR:?REG_DIR must name a scratch directory}"

reg_missing() {
	local p
	for p in docker-registry skopeo openssl python3 htpasswd; do
		if ! command -v "$p" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$p" ] && [ ! -x "/sbin/$p" ]; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

reg_free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# 0 when an HTTPS server that the test CA vouches for answers on the port (any HTTP status).
reg_probe() {
	python3 - "$1" "$REG_DIR/ca.pem" <<'PY' 2>/dev/null
import http.client, ssl, sys
c = http.client.HTTPSConnection("localhost", int(sys.argv[1]), context=ssl.create_default_context(cafile=sys.argv[2]), timeout=2)
c.request("GET", "/v2/")
c.getresponse()
PY
}

reg_ca() {
	mkdir -p "$REG_DIR/certs"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=tkbox-test-ca \
		-keyout "$REG_DIR/ca.key" -out "$REG_DIR/ca.pem" 2>/dev/null || return 1
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
		-keyout "$REG_DIR/srv.key" -out "$REG_DIR/srv.csr" 2>/dev/null || return 1
	printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$REG_DIR/ext"
	openssl x509 -req -in "$REG_DIR/srv.csr" -CA "$REG_DIR/ca.pem" -CAkey "$REG_DIR/ca.key" -CAcreateserial \
		-days 2 -extfile "$REG_DIR/ext" -out "$REG_DIR/srv.pem" 2>/dev/null || return 1
	cp "$REG_DIR/ca.pem" "$REG_DIR/certs/ca.crt"
}

REG_PASSWORD=s3cret-pass

reg_start() { # NAME PORT [auth]
	local name=$1 port=$2 auth=${3:-} pid
	mkdir -p "$REG_DIR/$name"
	if [ -n "$auth" ] && [ ! -s "$REG_DIR/htpasswd" ]; then
		htpasswd -Bbn tester "$REG_PASSWORD" >"$REG_DIR/htpasswd" 2>/dev/null || return 1
	fi
	{
		echo "version: 0.1"
		echo "log: {level: error}"
		echo "storage: {filesystem: {rootdirectory: $REG_DIR/$name}}"
		echo "http: {addr: 127.0.0.1:$port, tls: {certificate: $REG_DIR/srv.pem, key: $REG_DIR/srv.key}}"
		[ -n "$auth" ] && echo "auth: {htpasswd: {realm: tkbox-test, path: $REG_DIR/htpasswd}}"
	} >"$REG_DIR/$name.yml"
	PATH=/usr/sbin:/sbin:$PATH docker-registry serve "$REG_DIR/$name.yml" >"$REG_DIR/$name.log" 2>&1 &
	pid=$!
	eval "REG_PID_${name}=$pid"
	for _ in $(seq 1 100); do
		reg_probe "$port" && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	echo "registry $name did not start:" >&2
	cat "$REG_DIR/$name.log" >&2
	return 1
}

reg_stop() { # NAME PORT
	local name=$1 port=$2 pid
	eval "pid=\${REG_PID_${name}:-}"
	[ -n "$pid" ] || return 0
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	eval "REG_PID_${name}="
	for _ in $(seq 1 50); do
		reg_probe "$port" || return 0
		sleep 0.1
	done
	return 1
}

reg_push() { # OCI_REF DEST [skopeo args]
	local src=$1 dest=$2
	shift 2
	skopeo copy -q --dest-cert-dir "$REG_DIR/certs" "$@" "$src" "docker://$dest" >"$REG_DIR/skopeo.log" 2>&1 ||
		{ cat "$REG_DIR/skopeo.log" >&2; return 1; }
}
