#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tkbox.yaml end to end (suite e2e, one box): `tkbox run` from a directory holding a tkbox.yaml, with two flags
# that override it (--cpus, and --allow, which replaces the file's list), boots a real box. The box has the file's
# env; the exported bundle verifies, its every event is valid under Tracekit's event schema, and its tkbox.box
# holds the resolved settings (name, image, workspace relative to the file, env, limits, inspect, the allowlist
# from the flag, the secret's name/hosts/header) and config {file, sha256 of its bytes, overridden: the two flags}.
# The secret's value (read from env: as the file names it) appears nowhere in the bundle.
#   tests/cli/config-e2e.sh BUILD_DIR
set -u
BUILD=${1:?usage: config-e2e.sh BUILD_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../daemon/lib.sh"
trap lib_cleanup EXIT
SCHEMA=$HERE/../verify/vectors/tracekit.event.v2.json

IMG=$(image_path) || { echo "Bail out! no image"; exit 1; }
signer_init || { echo "Bail out! no signer"; exit 1; }
signer_start || { echo "Bail out! no signer"; exit 1; }
daemon_start || { echo "Bail out! no daemon"; exit 1; }

P=$WORK/proj
mkdir -p "$P/ws"
(cd "$P/ws" && git init -q && echo "from the checkout" >README && git add README &&
	git -c user.name=t -c user.email=t@example.invalid commit -qm init) || { echo "Bail out! git"; exit 1; }
ln -s "$IMG" "$P/rootfs.ext4"
cat >"$P/tkbox.yaml" <<'YAML'
# the e2e test's settings
version: 1
image: rootfs.ext4          # relative: against this file's directory
name: cfg1
workspace: ws
inspect: all
allow: [example.com, "*.example.org:8443"]
secrets:
  TOK: {source: env:CFG_TOK, hosts: [api.example.com], header: X-Token}
env:
  GREETING: hello-from-yaml
  MODE: "2"
limits: {memory: 256M, cpus: 2, disk: 128M, timeout: 10m, exec_timeout: 2m}
YAML
SHA=$(sha256sum "$P/tkbox.yaml" | cut -d' ' -f1)
VALUE=cfg-secret-value-5b1e0c
T0=$(t)
(cd "$P" && CFG_TOK=$VALUE "$TKBOX" run --cpus 1 --allow example.net >"$WORK/run.out" 2>"$WORK/run.err")
rc=$?
check "tkbox run from a directory with tkbox.yaml starts box cfg1 (exit $rc, $(elapsed "$T0") s)" \
	test "$rc" -eq 0 -a "$(cat "$WORK/run.out")" = cfg1
[ "$rc" -eq 0 ] || { cat "$WORK/run.err"; tail -20 "$WORK/daemon.log"; }
check "it says where the settings came from" grep -q "settings from $P/tkbox.yaml" "$WORK/run.err"
out=$("$TKBOX" exec cfg1 -- sh -c 'echo "$GREETING/$MODE"; cat /workspace/README; nproc' 2>&1 | tr '\n' ' ')
check "the box has the file's env, its workspace and the flag's cpus ($out)" \
	test "$out" = "hello-from-yaml/2 from the checkout 1 "
"$TKBOX" stop cfg1 >/dev/null 2>&1
"$TKBOX" export cfg1 -o "$WORK/cfg1.tkb" >/dev/null 2>"$WORK/export.err"
"$TKBOX" verify "$WORK/cfg1.tkb" --trust "$WORK/cfg1.trust.json" >"$WORK/verify.out" 2>&1
check "the bundle verifies" grep -q 'Integrity: VERIFIED' "$WORK/verify.out"
python3 "$HERE/../verify/schema-check.py" "$SCHEMA" "$WORK/cfg1.tkb" >"$WORK/schema.out" 2>&1
rc=$?
check "every event is valid under Tracekit's event schema v2 ($(tail -1 "$WORK/schema.out"))" test "$rc" -eq 0
[ "$rc" -eq 0 ] || head -5 "$WORK/schema.out"

python3 - "$WORK/cfg1.tkb" "$P" "$SHA" "$VALUE" >"$WORK/box.out" 2>&1 <<'PY'
import json, sys, zipfile
tkb, proj, sha, value = sys.argv[1:5]
z = zipfile.ZipFile(tkb)
box = None
for n in z.namelist():
    if value.encode() in z.read(n):
        print("the secret's value is in", n)
        sys.exit(1)
    if n.startswith("runs/"):
        for line in z.read(n).decode().splitlines():
            e = json.loads(line)["event"]
            if e.get("type") == "review" and e.get("data", {}).get("reviewer") == "tkbox.box":
                box = e["data"]["verdict"]
print(json.dumps(box, sort_keys=True)[:3000])
want = {
    "box": box["box"] == "cfg1",
    "image": box["image"] == proj + "/rootfs.ext4",
    "workspace": box["workspace"] == proj + "/ws",
    "env": "GREETING=hello-from-yaml" in box["env"] and "MODE=2" in box["env"],
    "limits": box["limits"] == {"vcpus": 1, "memory_mib": 256, "disk_mib": 128, "lifetime_s": 600,
                                "exec_timeout_s": 120},
    # the flag's list replaced the file's; the secret's bound host joins it
    "egress from --allow": box["egress"]["allow"] == ["example.net", "api.example.com"],
    "inspect all": box["egress"]["inspect"] == "all",
    "secret": [(s["name"], s["hosts"], s["header"]) for s in box["secrets"]] == [("TOK", ["api.example.com"], "X-Token")],
    "config": box.get("config") == {"file": proj + "/tkbox.yaml", "sha256": sha, "overridden": ["--allow", "--cpus"]},
}
bad = [k for k, v in want.items() if not v]
print("mismatch:", bad if bad else "none")
sys.exit(1 if bad else 0)
PY
rc=$?
check "tkbox.box holds the resolved settings and config {file, sha256, overridden} ($(tail -1 "$WORK/box.out"))" \
	test "$rc" -eq 0
[ "$rc" -eq 0 ] || cat "$WORK/box.out"
"$TKBOX" rm cfg1 >/dev/null 2>&1
echo "# $pass passed, $fail failed ($(elapsed "$T0") s after the daemon was up)"
[ "$fail" -eq 0 ]
