#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Issue 6's acceptance through the daemon (suite e2e): `tkbox run --image
# localhost:PORT/test:1` pulls from a real registry on loopback (TLS, test CA),
# a second box of the same reference starts from the cache with the registry
# stopped, `docker-archive:FILE` and `oci:DIR` (given relative) boot offline, a
# private registry (htpasswd) needs `--registry-auth FILE`,
# and the image config's Env and WorkingDir are the box's defaults while its
# User is recorded in tkbox.box (not applied: the guest runs commands as root).
#   tests/daemon/e2e-image-run.sh BUILD_DIR
# Exit 77 (skipped) when docker-registry, skopeo, openssl, htpasswd or busybox is missing.
set -u
BUILD=${1:?usage: e2e-image-run.sh BUILD_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
BUSYBOX=${BUSYBOX:-$(command -v busybox || echo /bin/busybox)}
source "$HERE/lib.sh"
REG_DIR=$WORK/registry
mkdir -p "$REG_DIR"
source "$HERE/../image/registry-lib.sh"
if missing=$(reg_missing) || ! "$BUSYBOX" true 2>/dev/null; then
	echo "SKIP: ${missing:-busybox-static} not installed"
	lib_cleanup
	exit 77
fi
cleanup() {
	reg_stop pub "${PORT:-0}" >/dev/null 2>&1
	reg_stop priv "${PRIV:-0}" >/dev/null 2>&1
	lib_cleanup
}
trap cleanup EXIT

events() { cat "$TKBOX_STATE_DIR/boxes/$1/events.jsonl" 2>/dev/null; }
# The box.creating line of a box (what the daemon resolved the image to).
creating() { events "$1" | grep '"event":"box.creating"'; }
run_box() { # NAME IMAGE [run args...]
	local name=$1 image=$2
	shift 2
	"$TKBOX" run --image "$image" --name "$name" --memory 256M --disk 128M "$@" >"$WORK/run-$name.out" \
		2>"$WORK/run-$name.err"
}
gone() { # NAME: stop and remove a box (frees its QEMU)
	"$TKBOX" stop "$1" >/dev/null 2>&1
	"$TKBOX" rm "$1" >/dev/null 2>&1
}

# ---- the image: a busybox-static root as an OCI layout, then pushed and saved by skopeo ----
python3 "$HERE/mkoci-rootfs.py" "$WORK/oci" "$BUSYBOX" --name 1 --user 1000:1000 --workdir /app \
	--env PATH=/usr/sbin:/usr/bin:/sbin:/bin --env GREETING=hello-from-the-image >"$WORK/manifest" ||
	{ echo "Bail out! mkoci-rootfs.py"; exit 1; }
MANIFEST=$(cat "$WORK/manifest")
reg_ca || { echo "Bail out! test CA"; exit 1; }
PORT=$(reg_free_port)
reg_start pub "$PORT" || { echo "Bail out! registry"; exit 1; }
check "push the image to localhost:$PORT/test:1" reg_push "oci:$WORK/oci:1" "localhost:$PORT/test:1"
skopeo copy -q "oci:$WORK/oci:1" "docker-archive:$WORK/docker.tar:test:1" >"$WORK/skopeo-save.log" 2>&1
check "save the image as a docker-archive" test -s "$WORK/docker.tar"

signer_init || { echo "Bail out! no signer"; exit 1; }
signer_start || { echo "Bail out! no signer"; exit 1; }
daemon_start || { echo "Bail out! no daemon"; exit 1; }

# ---- refused options (nothing boots) ----
"$TKBOX" run --image "localhost:$PORT/test:1" --registry-ca "$WORK/no-such-ca.pem" 2>"$WORK/err"
check "--registry-ca that does not exist refused (exit 2)" test $? -eq 2
"$TKBOX" run --image "localhost:$PORT/test:1" --platform linux/s390x 2>"$WORK/err"
check "--platform outside linux/amd64|linux/arm64 refused (exit 2)" test $? -eq 2
run_box r0 "localhost:$PORT/test:1"
rc=$?
if [ $rc -ne 0 ] && grep -qi "certificate\|TLS\|SSL" "$WORK/run-r0.err"; then
	ok "registry with an unknown CA refused without --registry-ca: $(cut -c1-120 "$WORK/run-r0.err")"
else
	notok "registry with an unknown CA refused without --registry-ca" "rc=$rc" "$(cat "$WORK/run-r0.err")"
fi
gone r0

# ---- first box: pulled from the registry ----
run_box r1 "localhost:$PORT/test:1" --registry-ca "$REG_DIR/ca.pem" --platform linux/amd64
rc=$?
if [ $rc -eq 0 ]; then ok "run --image localhost:$PORT/test:1 (pulled)"; else notok "run r1" "$(cat "$WORK/run-r1.err")"; fi
check "r1: pulled, not from the cache" grep -q '"image_from_cache":false' <<<"$(creating r1)"
check "r1: image digest is the manifest's ($MANIFEST)" grep -q "\"image_digest\":\"$MANIFEST\"" <<<"$(creating r1)"
check "r1: runs the image's root" test "$("$TKBOX" exec r1 -- cat /etc/tkbox-image 2>&1)" = \
	"built by tests/daemon/mkoci-rootfs.py"
check "r1: the image's Env is the box's" test "$("$TKBOX" exec r1 -- sh -c 'echo $GREETING' 2>&1)" = \
	"hello-from-the-image"
check "r1: the image's WorkingDir is the default cwd" test "$("$TKBOX" exec r1 -- pwd 2>&1)" = /app
check "r1: --cwd still wins over WorkingDir" test "$("$TKBOX" exec r1 --cwd /tmp -- pwd 2>&1)" = /tmp
check "r1: the image's User recorded (box.creating)" grep -q '"image_user":"1000:1000"' <<<"$(creating r1)"

# ---- the registry goes away: a second box of the same reference comes from the cache ----
check "registry stopped" reg_stop pub "$PORT"
check "registry no longer answers" bash -c "! python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", $PORT), 1)' 2>/dev/null"
run_box r2 "localhost:$PORT/test:1" --registry-ca "$REG_DIR/ca.pem"
rc=$?
if [ $rc -eq 0 ]; then ok "run r2 with the registry stopped"; else notok "run r2 with the registry stopped" "$(cat "$WORK/run-r2.err")"; fi
check "r2: from the cache" grep -q '"image_from_cache":true' <<<"$(creating r2)"
check "r2: same manifest digest" grep -q "\"image_digest\":\"$MANIFEST\"" <<<"$(creating r2)"
check "r2: runs" test "$("$TKBOX" exec r2 -- cat /etc/tkbox-image 2>&1)" = "built by tests/daemon/mkoci-rootfs.py"
gone r2

# ---- local sources, offline (the registry is still stopped) ----
run_box r3 "docker-archive:$WORK/docker.tar"
rc=$?
if [ $rc -eq 0 ]; then ok "run --image docker-archive:FILE"; else notok "run --image docker-archive:FILE" "$(cat "$WORK/run-r3.err")"; fi
check "r3: runs the archive's root" test "$("$TKBOX" exec r3 -- sh -c 'cat /etc/tkbox-image; echo $GREETING' 2>&1 | tr '\n' ' ')" = \
	"built by tests/daemon/mkoci-rootfs.py hello-from-the-image "
gone r3
# Relative on purpose: the CLI makes it absolute for the daemon.
(cd "$WORK" && "$TKBOX" run --image oci:oci:1 --name r4 --memory 256M --disk 128M >"$WORK/run-r4.out" 2>"$WORK/run-r4.err")
rc=$?
if [ $rc -eq 0 ]; then ok "run --image oci:DIR:NAME (relative DIR)"; else notok "run --image oci:DIR:NAME" "$(cat "$WORK/run-r4.err")"; fi
check "r4: runs the layout's root" test "$("$TKBOX" exec r4 -- pwd 2>&1)" = /app
check "r4: the oci: source named absolutely in the box" grep -q "\"image\":\"oci:$WORK/oci:1\"" <<<"$(creating r4)"
gone r4

# ---- a private registry: refused without --registry-auth, pulled with it; the password never shows ----
PRIV=$(reg_free_port)
reg_start priv "$PRIV" auth || { echo "Bail out! private registry"; exit 1; }
check "push the image to the private registry" reg_push "oci:$WORK/oci:1" "localhost:$PRIV/private/test:1" \
	--dest-creds "tester:$REG_PASSWORD"
run_box r5 "localhost:$PRIV/private/test:1" --registry-ca "$REG_DIR/ca.pem"
rc=$?
if [ $rc -ne 0 ] && grep -q "authentication" "$WORK/run-r5.err"; then
	ok "private image refused without --registry-auth: $(cut -c1-120 "$WORK/run-r5.err")"
else
	notok "private image refused without --registry-auth" "rc=$rc" "$(cat "$WORK/run-r5.err")"
fi
gone r5
printf '{"auths":{"localhost:%s":{"auth":"%s"}}}' "$PRIV" "$(printf "tester:%s" "$REG_PASSWORD" | base64)" \
	>"$WORK/auth.json"
(cd "$WORK" && "$TKBOX" run --image "localhost:$PRIV/private/test:1" --name r6 --memory 256M --disk 128M \
	--registry-ca "$REG_DIR/ca.pem" --registry-auth auth.json >"$WORK/run-r6.out" 2>"$WORK/run-r6.err")
rc=$?
if [ $rc -eq 0 ]; then ok "private image pulled with --registry-auth (relative path)"; else notok "run r6 --registry-auth" "$(cat "$WORK/run-r6.err")"; fi
check "r6: runs" test "$("$TKBOX" exec r6 -- cat /etc/tkbox-image 2>&1)" = "built by tests/daemon/mkoci-rootfs.py"
check "the password is in no log, event or box file" \
	bash -c "! grep -rqs '$REG_PASSWORD' '$WORK/daemon.log' '$WORK'/run-r*.err '$TKBOX_STATE_DIR/boxes'"
gone r6
reg_stop priv "$PRIV"

# ---- the signed record: tkbox.box names the image digest and its User, not applied ----
"$TKBOX" stop r1 2>/dev/null
"$TKBOX" export r1 -o "$WORK/r1.tkb" 2>"$WORK/err"
check "r1 exports" test -s "$WORK/r1.tkb"
"$TKBOX" verify "$WORK/r1.tkb" --trust "$WORK/r1.trust.json" >"$WORK/verify.out" 2>&1
check "r1 bundle verifies" grep -q 'Integrity: VERIFIED' "$WORK/verify.out"
box_rec=$(python3 - "$WORK/r1.tkb" <<'PY'
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in z.namelist():
    if n.startswith("runs/"):
        for line in z.read(n).decode().splitlines():
            e = json.loads(line)["event"]
            if e.get("type") == "review" and e.get("data", {}).get("reviewer") == "tkbox.box":
                print(json.dumps(e["data"]["verdict"], sort_keys=True))
PY
)
check "r1 tkbox.box records the manifest digest" grep -q "\"image_digest\": \"$MANIFEST\"" <<<"$box_rec"
check "r1 tkbox.box records the image's User as not applied" \
	grep -q '"image_user": {"applied": false, "user": "1000:1000"}' <<<"$box_rec"
gone r1

echo "# $pass passed, $fail failed"
[ "$fail" -eq 0 ]
