#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Image and workspace end-to-end test against REAL registries on loopback:
# Debian's docker-registry with TLS (a test CA made here) -- one anonymous,
# one with htpasswd (bcrypt) auth -- fed by skopeo from OCI layouts that
# mkoci.py builds (busybox-static based). Checks the ext4 with debugfs and
# e2fsck (no mounting), stops the registries and resolves again from the
# cache, reads docker-archive:/oci:/oci-archive: offline, refuses hostile
# layers, and checks the workspace snapshot of a checkout with secrets.
# usage: e2e-image.sh TKBOX_IMAGE_CLI   (a binary that runs `images` and `workspace`)
# Exit 77 (skipped) when a needed program is missing.
set -u
CLI=$1
HERE=$(cd "$(dirname "$0")" && pwd)
for p in docker-registry skopeo htpasswd openssl debugfs e2fsck python3 zstd git busybox setpriv; do
	if ! command -v "$p" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$p" ] && [ ! -x "/sbin/$p" ]; then
		echo "SKIP: $p not installed"
		exit 77
	fi
done
BUSYBOX=$(command -v busybox)
W=$(mktemp -d /tmp/tkbox-e2e-image.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	rm -rf "$W"
}
trap cleanup EXIT
PASS=0 FAIL=0
ok() { echo "ok   - $*"; PASS=$((PASS + 1)); }
bad() { echo "FAIL - $*"; FAIL=$((FAIL + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
PATH=/usr/sbin:/sbin:$PATH
dls() { debugfs -R "ls -l $2" "$1" 2>/dev/null; }
dcat() { debugfs -R "cat $2" "$1" 2>/dev/null; }
has() { dls "$1" "$2" | awk '{print $NF}' | grep -qx -- "$3"; }
lacks() { [ -f "$1" ] && dls "$1" / | grep -q ' \.$' && ! dls "$1" "$2" | awk '{print $NF}' | grep -qx -- "$3"; }
mode_of() { dls "$1" "$2" | awk -v n="$3" '$NF == n {print $2, $4, $5}'; }
# 0 when an HTTPS server that the test CA vouches for answers on the port (any HTTP status)
probe() { python3 - "$1" "$W/ca.pem" <<'PY' 2>/dev/null
import http.client, ssl, sys
c = http.client.HTTPSConnection("localhost", int(sys.argv[1]), context=ssl.create_default_context(cafile=sys.argv[2]), timeout=2)
c.request("GET", "/v2/")
c.getresponse()
PY
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---- a test CA and a server certificate for localhost / 127.0.0.1 ----
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=tkbox-test-ca \
	-keyout "$W/ca.key" -out "$W/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
	-keyout "$W/srv.key" -out "$W/srv.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$W/ext"
openssl x509 -req -in "$W/srv.csr" -CA "$W/ca.pem" -CAkey "$W/ca.key" -CAcreateserial -days 2 \
	-extfile "$W/ext" -out "$W/srv.pem" 2>/dev/null
mkdir -p "$W/certs"
cp "$W/ca.pem" "$W/certs/ca.crt"
htpasswd -Bbn tester s3cret-pass >"$W/htpasswd" 2>/dev/null

start_registry() { # name port [auth]
	local name=$1 port=$2 auth=${3:-}
	mkdir -p "$W/$name"
	{
		echo "version: 0.1"
		echo "log: {level: error}"
		echo "storage: {filesystem: {rootdirectory: $W/$name}}"
		echo "http: {addr: 127.0.0.1:$port, tls: {certificate: $W/srv.pem, key: $W/srv.key}}"
		case "$auth" in
		"") ;;
		auth) echo "auth: {htpasswd: {realm: tkbox-test, path: $W/htpasswd}}" ;;
		*) echo "auth: {$auth}" ;;
		esac
	} >"$W/$name.yml"
	docker-registry serve "$W/$name.yml" >"$W/$name.log" 2>&1 &
	PIDS+=($!)
	eval "${name}_pid=$!"
	for _ in $(seq 1 100); do
		probe "$port" && return 0
		sleep 0.1
	done
	echo "registry $name did not start:"; cat "$W/$name.log"; return 1
}
PUB=$(free_port)
PRIV=$(free_port)
TOK=$(free_port)
TOKSRV=$(free_port)
start_registry pub "$PUB" || exit 1
start_registry priv "$PRIV" auth || exit 1
# a registry with Docker-style token auth (Bearer challenge), like Docker Hub and GHCR
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=tkbox-token-signer \
	-keyout "$W/sign.key" -out "$W/sign.pem" 2>/dev/null
TOKEN_LOG=$W/token.log python3 "$HERE/token-server.py" "$TOKSRV" "$W/srv.pem" "$W/srv.key" "$W/sign.pem" "$W/sign.key" \
	tkbox-test-issuer tkbox-test-registry tester:s3cret-pass 2>"$W/token-server.log" &
PIDS+=($!)
start_registry tok "$TOK" "token: {realm: https://localhost:$TOKSRV/token, service: tkbox-test-registry, issuer: tkbox-test-issuer, rootcertbundle: $W/sign.pem}" || exit 1

# ---- test images: OCI layouts pushed with skopeo ----
python3 "$HERE/mkoci.py" "$W/img" "$BUSYBOX" >"$W/digests.json" || { bad "mkoci.py"; exit 1; }
push() { # layout-name dest [extra skopeo args]
	local name=$1 dest=$2; shift 2
	skopeo copy -q --dest-cert-dir "$W/certs" "$@" "oci:$W/img/layout:$name" "docker://$dest" >"$W/skopeo.log" 2>&1 ||
		{ cat "$W/skopeo.log"; return 1; }
}
check "push test image" push test "localhost:$PUB/test:1"
check "push multi-platform index" push multi "localhost:$PUB/multi:1" --all
for e in evil-dotdot evil-abs evil-symlink evil-hardlink evil-size; do
	check "push hostile $e" push "$e" "localhost:$PUB/$e:1"
done
check "push private image (auth)" push test "localhost:$PRIV/private/secret:1" --dest-creds tester:s3cret-pass
check "push to the token registry: public image" push test "localhost:$TOK/pub/test:1" --dest-creds tester:s3cret-pass
check "push to the token registry: private image" push test "localhost:$TOK/private/test:1" --dest-creds tester:s3cret-pass

S=$W/state
T="$CLI images --state $S --registry-ca $W/ca.pem"

# ---- pull from the registry, check the ext4 ----
out=$($T resolve "localhost:$PUB/test:1" 2>"$W/err") || { cat "$W/err"; }
EXT4=$(echo "$out" | awk '$1 == "ext4" {print $2}')
check "pull localhost:$PUB/test:1 -> ext4" test -f "$EXT4"
check "first resolve was not from the cache" grep -qx "from_cache no" <<<"$out"
check "config defaults: WorkingDir /app" grep -qx "working_dir /app" <<<"$out"
check "config defaults: User 1000:1000" grep -qx "user 1000:1000" <<<"$out"
check "config defaults: Env" grep -qx 'env "GREETING=hello world"' <<<"$out"
check "image.json beside the ext4" test -f "$(dirname "$EXT4")/image.json"
check "e2fsck: the ext4 is clean" e2fsck -fn "$EXT4" >/dev/null 2>&1
check "busybox in /bin" has "$EXT4" /bin busybox
check "layer 2 file (zstd layer)" test "$(dcat "$EXT4" /etc/hello)" = "hello from layer 2"
check "whiteout removed /etc/removed" lacks "$EXT4" /etc "removed"
check "whiteout removed the /etc/gone dir" lacks "$EXT4" /etc "gone"
check "opaque dir hides opt/opq/old" lacks "$EXT4" /opt/opq "old"
check "opaque dir keeps its own opt/opq/new" has "$EXT4" /opt/opq new
check "no whiteout markers in the image" bash -c "! debugfs -R 'ls -R /' '$EXT4' 2>/dev/null | grep -q '\\.wh\\.'"
check "owner and mode kept (app/owned 100640 1000 1000)" test "$(mode_of "$EXT4" /app owned)" = "100640 1000 1000"
check "setuid kept (app/suid 104755)" test "$(mode_of "$EXT4" /app suid)" = "104755 0 0"
check "dir owner kept (app 40750 1000 1000)" test "$(mode_of "$EXT4" / app)" = "40750 1000 1000"
check "sticky /tmp (41777)" test "$(mode_of "$EXT4" / tmp)" = "41777 0 0"
ino_pw=$(dls "$EXT4" /etc | awk '$NF == "passwd" {print $1}')
ino_hard=$(dls "$EXT4" /app | awk '$NF == "hard" {print $1}')
check "hardlink shares the inode" test -n "$ino_pw" -a "$ino_pw" = "$ino_hard"
check "symlink kept as a link" test "$(mode_of "$EXT4" /app link | cut -d' ' -f1)" = "120777"
check "device node dropped" lacks "$EXT4" /app "null"
check "no partial blob or temp file left" test -z "$(ls -A "$S/images/tmp")"

# ---- multi-platform index ----
out=$($T resolve "localhost:$PUB/multi:1" 2>"$W/err") || cat "$W/err"
A=$(echo "$out" | awk '$1 == "ext4" {print $2}')
check "index: linux/amd64 picked" test "$(dcat "$A" /arch)" = "amd64"
out=$($T --platform linux/arm64 resolve "localhost:$PUB/multi:1" 2>"$W/err") || cat "$W/err"
A=$(echo "$out" | awk '$1 == "ext4" {print $2}')
check "index: linux/arm64 picked with --platform" test "$(dcat "$A" /arch)" = "arm64"

# ---- by digest ----
MD=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["test"])' "$W/digests.json")
out=$($T resolve "localhost:$PUB/test@$MD" 2>"$W/err") || cat "$W/err"
check "pull by digest" grep -qx "manifest $MD" <<<"$out"

# ---- private registry: refused without credentials, pulled with them ----
if $T resolve "localhost:$PRIV/private/secret:1" >/dev/null 2>"$W/err"; then
	bad "private image refused without --registry-auth"
else
	check "private image refused without --registry-auth" grep -q "requires authentication" "$W/err"
fi
printf '{"auths":{"localhost:%s":{"auth":"%s"}}}' "$PRIV" "$(printf tester:wrong | base64)" >"$W/badauth.json"
check "private image refused with a wrong password" bash -c "! $T --registry-auth $W/badauth.json resolve localhost:$PRIV/private/secret:1 >/dev/null 2>&1"
printf '{"auths":{"https://localhost:%s":{"auth":"%s"}}}' "$PRIV" "$(printf tester:s3cret-pass | base64)" >"$W/auth.json"
out=$($T --registry-auth "$W/auth.json" resolve "localhost:$PRIV/private/secret:1" 2>"$W/err") || cat "$W/err"
check "private image pulled with --registry-auth (basic)" grep -q "^ext4 " <<<"$out"
check "credentials never printed" bash -c "! grep -q s3cret <<<'$out' && ! grep -q s3cret '$W/err'"
# ---- Bearer tokens: anonymous for public, with the auth file for private ----
: >"$W/token.log"
out=$($T resolve "localhost:$TOK/pub/test:1" 2>"$W/err") || cat "$W/err"
check "bearer: anonymous token for a public image" grep -q "^ext4 " <<<"$out"
check "bearer: the token was fetched anonymously" grep -q "^anonymous repository:pub/test:pull" "$W/token.log"
if $T resolve "localhost:$TOK/private/test:1" >/dev/null 2>"$W/err"; then
	bad "bearer: private image refused without credentials"
else
	ok "bearer: private image refused without credentials: $(cut -c1-120 "$W/err")"
fi
printf '{"auths":{"localhost:%s":{"username":"tester","password":"s3cret-pass"}}}' "$TOK" >"$W/tokauth.json"
out=$($T --registry-auth "$W/tokauth.json" resolve "localhost:$TOK/private/test:1" 2>"$W/err") || cat "$W/err"
check "bearer: private image pulled with a token got with the auth file" grep -q "^ext4 " <<<"$out"
check "bearer: that token was fetched with basic credentials" grep -q "^basic repository:private/test:pull" "$W/token.log"
check "TLS: unknown CA refused" bash -c "! $CLI images --state $S pull localhost:$PUB/test:1 >/dev/null 2>&1"

# ---- hostile layers ----
refuse() { # name expected-words
	if $T resolve "localhost:$PUB/$1:1" >/dev/null 2>"$W/err"; then
		bad "hostile $1 refused"
	elif grep -q "$2" "$W/err"; then
		ok "hostile $1 refused: $(cut -c1-150 "$W/err")"
	else
		bad "hostile $1 refused with the expected reason ($2): $(cat "$W/err")"
	fi
}
refuse evil-dotdot 'path escapes the root'
refuse evil-abs 'absolute path'
refuse evil-symlink 'through a symbolic link'
refuse evil-hardlink 'path escapes the root'
refuse evil-size 'per-file cap'
check "nothing escaped (no /tmp/pwned, no ../escape)" bash -c "[ ! -e /tmp/pwned ] && [ ! -e '$S/images/tmp/escape' ] && [ ! -e '$S/images/escape' ]"
check "no temp dirs left after refusals" test -z "$(ls -A "$S/images/tmp")"

# ---- two pulls of the same image at once (fresh cache) ----
S2=$W/state2
$CLI images --state "$S2" --registry-ca "$W/ca.pem" resolve "localhost:$PUB/test:1" >"$W/p1" 2>&1 &
p1=$!
$CLI images --state "$S2" --registry-ca "$W/ca.pem" resolve "localhost:$PUB/test:1" >"$W/p2" 2>&1
r2=$?
wait $p1
r1=$?
check "two concurrent pulls both succeed" test "$r1" = 0 -a "$r2" = 0
check "two concurrent pulls give the same ext4" test "$(grep ^ext4 "$W/p1")" = "$(grep ^ext4 "$W/p2")"
check "one of them came from the cache (per-image lock)" bash -c "cat '$W/p1' '$W/p2' | grep -qx 'from_cache yes'"

# ---- registries stopped: resolve again from the cache ----
kill "$pub_pid" "$priv_pid" "$tok_pid"
wait "$pub_pid" "$priv_pid" "$tok_pid" 2>/dev/null
down() { ! probe "$1"; }
check "registry is down" down "$PUB"
out=$($T resolve "localhost:$PUB/test:1" 2>"$W/err") || cat "$W/err"
check "second resolve with the registry stopped: from the cache" grep -qx "from_cache yes" <<<"$out"
check "second resolve: the same ext4" grep -qx "ext4 $EXT4" <<<"$out"
check "images pull (refresh) needs the registry" bash -c "! $T pull localhost:$PUB/test:1 >/dev/null 2>&1"
out=$($T --subprocess resolve "localhost:$PUB/test:1" 2>"$W/err") || cat "$W/err"
check "resolve in a child process (image_answer_exec): from the cache" grep -qx "ext4 $EXT4" <<<"$out"
if $T --subprocess resolve "oci:$W/img/layout:evil-abs" >/dev/null 2>"$W/err"; then
	bad "image_answer_exec: a hostile layer is refused"
else
	check "image_answer_exec: the child's reason comes back" grep -q "absolute path" "$W/err"
fi

# ---- local sources, offline ----
out=$($T resolve "docker-archive:$W/img/docker.tar" 2>"$W/err") || cat "$W/err"
D=$(echo "$out" | awk '$1 == "ext4" {print $2}')
check "docker-archive: ext4 built offline" test -f "$D"
check "docker-archive: whiteouts applied" lacks "$D" /etc "removed"
# a root is keyed by the blobs it was built from: docker save's uncompressed layers are other blobs than the
# registry's gzip/zstd ones (another root), but the diff_ids match, so the files are the same
check "docker-archive: other layer blobs -> its own root" test -n "$D" -a "$D" != "$EXT4"
check "docker-archive: the same files as the registry image" test "$(dcat "$D" /etc/hello)" = "hello from layer 2"
out=$($T resolve "docker-archive:$W/img/docker-oci.tar" 2>"$W/err") || cat "$W/err"
check "docker-archive (Docker 25+ form, layer.tar symlinks): the same blobs -> the same ext4" grep -qx "ext4 $D" <<<"$out"
out=$($T resolve "oci:$W/img/layout:test" 2>"$W/err") || cat "$W/err"
check "oci:DIR offline" grep -q "^ext4 " <<<"$out"
out=$($T resolve "oci-archive:$W/img/oci.tar:multi" 2>"$W/err") || cat "$W/err"
O=$(echo "$out" | awk '$1 == "ext4" {print $2}')
check "oci-archive:FILE offline (index -> amd64)" test "$(dcat "$O" /arch)" = "amd64"

# ---- non-root build keeps owners (debugfs fix-ups) ----
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	S3=$W/state3
	mkdir -p "$S3"
	chown 65534:65534 "$S3"
	chmod -R a+rX "$W/img"
	chmod a+x "$W"
	out=$(setpriv --reuid=65534 --regid=65534 --clear-groups $CLI images --state "$S3" resolve "oci:$W/img/layout:test" 2>"$W/err") || cat "$W/err"
	N=$(echo "$out" | awk '$1 == "ext4" {print $2}')
	check "non-root build: ext4 built" test -f "$N"
	check "non-root build: owner 1000 and mode 0640 kept" test "$(mode_of "$N" /app owned)" = "100640 1000 1000"
	check "non-root build: root-owned setuid file" test "$(mode_of "$N" /app suid)" = "104755 0 0"
	check "non-root build: e2fsck clean" e2fsck -fn "$N" >/dev/null 2>&1
fi

# ---- ls / rm / prune ----
check "images ls lists the pulled image" bash -c "$T ls | grep -q 'localhost:$PUB/test:1'"
check "images rm" $T rm "localhost:$PUB/multi:1"
check "images ls no longer lists it" bash -c "! $T ls | grep -q 'localhost:$PUB/multi:1 .*linux/amd64'"
check "images prune" bash -c "$T prune | grep -q removed"

# ---- the workspace ----
R=$W/repo
mkdir -p "$R/src" "$R/build" "$R/.ssh" "$R/config"
git -C "$R" init -q
printf 'build/\n' >"$R/.gitignore"
echo 'print("hi")' >"$R/app.py"
echo 'int main(void) { return 0; }' >"$R/src/main.c"
printf '#!/bin/sh\necho run\n' >"$R/run.sh"
chmod 755 "$R/run.sh"
echo 'API_KEY=sk-live-not-for-the-box' >"$R/.env"
echo 'API_KEY=changeme' >"$R/.env.example"
echo '-----BEGIN OPENSSH PRIVATE KEY-----' >"$R/id_ed25519"
echo 'ssh-ed25519 AAAA test' >"$R/id_ed25519.pub"
echo '-----BEGIN PRIVATE KEY-----' >"$R/secrets.pem"
echo 'machine x login y password z' >"$R/.netrc"
echo 'key' >"$R/.ssh/config"
echo '{"type": "service_account"}' >"$R/config/gcp-credentials.json"
echo 'object' >"$R/build/out.o"
ln -s app.py "$R/link-in"
ln -s /etc/shadow "$R/link-out"
git -C "$R" -c user.email=t@t -c user.name=t add -f .env id_ed25519 secrets.pem .netrc .ssh/config app.py src/main.c \
	run.sh .gitignore .env.example id_ed25519.pub config/gcp-credentials.json link-in link-out
git -C "$R" -c user.email=t@t -c user.name=t commit -q -m init
echo 'untracked, not ignored' >"$R/notes.txt"
echo 'ignored' >"$R/build/ignored.txt"
# a repository config that names a program: git must not run it
git -C "$R" config core.fsmonitor "touch $W/fsmonitor-ran; false"
git -C "$R" config core.pager "touch $W/pager-ran; cat"
WS=$W/ws.ext4
out=$($CLI workspace build "$R" -o "$WS" 2>"$W/ws.err") || cat "$W/ws.err"
check "workspace image built" test -f "$WS"
check "workspace: e2fsck clean" e2fsck -fn "$WS" >/dev/null 2>&1
for f in app.py run.sh .gitignore .env.example id_ed25519.pub notes.txt link-in; do
	check "workspace has $f" has "$WS" / "$f"
done
check "workspace has src/main.c" has "$WS" /src main.c
for f in .env id_ed25519 secrets.pem .netrc .git build .ssh; do
	check "workspace lacks $f" lacks "$WS" / "$f"
done
check "workspace lacks config/gcp-credentials.json (and so the config dir)" lacks "$WS" / config
check "workspace: run.sh keeps its exec bit (100755)" test "$(mode_of "$WS" / run.sh | cut -d' ' -f1)" = "100755"
# issue 6: a link whose target is absolute (or leaves the checkout) would show a host path: left out
check "workspace: link-out (to /etc/shadow) left out" lacks "$WS" / link-out
check "workspace: link-in kept as a link" test "$(mode_of "$WS" / link-in | cut -d' ' -f1)" = "120777"
check "workspace: files owned by 0:0" test "$(mode_of "$WS" / app.py | cut -d' ' -f2-)" = "0 0"
check "workspace: git ran no fsmonitor or pager from the repo config" test ! -e "$W/fsmonitor-ran" -a ! -e "$W/pager-ran"
check "workspace: the left-out credentials are reported" grep -q '"secrets.pem"' "$W/ws.err"
check "workspace: the secret value is not printed" bash -c "! grep -q sk-live '$W/ws.err'"
WS2=$W/ws2.ext4
$CLI workspace build "$R" -o "$WS2" --uid 1000 --gid 1000 >/dev/null 2>&1
check "workspace --uid/--gid 1000" test "$(mode_of "$WS2" / app.py | cut -d' ' -f2-)" = "1000 1000"

# ---- the children, confined (issue 11) ----
# The workspace builder as the daemon runs it: a child `workspace build --json` (SANDBOX_WORKSPACE), whose
# one answer is decoded (workspace_answer_exec); what it left out and its refusals come back in that answer.
mkdir -p "$W/ws-child"
WSC=$W/ws-child/ws.ext4
$CLI workspace build --subprocess "$R" -o "$WSC" >"$W/wsc.out" 2>"$W/wsc.err" || cat "$W/wsc.err"
check "workspace (child): image built" has "$WSC" / app.py
check "workspace (child): credentials left out" lacks "$WSC" / secrets.pem
check "workspace (child): the left-out credentials come back in its answer" grep -q '"secrets.pem"' "$W/wsc.err"
check "workspace (child): the link out of the checkout comes back too" grep -q '"link-out": symbolic link to an absolute path' "$W/wsc.err"
check "workspace (child): nothing left beside the image" test "$(ls -A "$W/ws-child")" = ws.ext4
# git reads the repository's top for a subdirectory, and the main git dir for a linked worktree: both readable
$CLI workspace build --subprocess --quiet "$R/src" -o "$W/ws-child/sub.ext4" >/dev/null 2>"$W/wsc.err" || cat "$W/wsc.err"
check "workspace (child): a subdirectory of a checkout" has "$W/ws-child/sub.ext4" / main.c
git -C "$R" worktree add -q "$W/wt" 2>/dev/null
$CLI workspace build --subprocess --quiet "$W/wt" -o "$W/ws-child/wt.ext4" >/dev/null 2>"$W/wsc.err" || cat "$W/wsc.err"
check "workspace (child): a linked worktree" has "$W/ws-child/wt.ext4" / app.py
rm -f "$W/ws-child/sub.ext4" "$W/ws-child/wt.ext4"
mkdir -p "$W/not-a-checkout"
if $CLI workspace build --subprocess "$W/not-a-checkout" -o "$W/ws-child/no.ext4" >/dev/null 2>"$W/wsc.err"; then
	bad "workspace (child): a directory that is not a git checkout is refused"
else
	check "workspace (child): git's refusal comes back with its rule" grep -q "git ls-files failed.*(rule: git ls-files)" "$W/wsc.err"
fi
# A running image child is confined: a docker-archive that is a FIFO holds it in open() (after it confined
# itself, before it reads a byte) while /proc/<child>/status is read; then the FIFO is closed empty.
mkfifo "$W/held.tar"
$T --subprocess resolve "docker-archive:$W/held.tar" >/dev/null 2>"$W/held.err" &
held=$!
child=
for _ in $(seq 1 300); do
	child=$(pgrep -P "$held" | head -n1)
	if [ -n "$child" ] && grep -q '^Seccomp:[[:space:]]*2$' "/proc/$child/status" 2>/dev/null; then
		break
	fi
	sleep 0.1
done
status=$(cat "/proc/${child:-none}/status" 2>/dev/null)
check "image child (pid ${child:-none}): NoNewPrivs 1" grep -q '^NoNewPrivs:[[:space:]]*1$' <<<"$status"
check "image child (pid ${child:-none}): Seccomp 2 (filter)" grep -q '^Seccomp:[[:space:]]*2$' <<<"$status"
check "image child (pid ${child:-none}): no capability left (CapBnd 0)" grep -q '^CapBnd:[[:space:]]*0*$' <<<"$status"
# open the FIFO for writing and close it: the child reads EOF and fails (bounded: a child gone has no reader)
timeout 10 sh -c ': >"$1"' sh "$W/held.tar"
wait "$held" 2>/dev/null
check "image child: an empty archive is refused" grep -q "archive" "$W/held.err"

echo "image e2e: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
