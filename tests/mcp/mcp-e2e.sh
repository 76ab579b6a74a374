#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tkbox mcp end to end (issue 15; meson test mcp-e2e, suite e2e): clients nobody here wrote drive the server
# against a real dev signer, daemon and busybox box (TCG where KVM is unusable):
#   - the official MCP TypeScript SDK's Client + StdioClientTransport (client.mjs): initialize, tools/list,
#     narrowing refusals, tkbox_run, the box limit, tkbox_exec with stdin_data, a workspace change and
#     tkbox_diff, tkbox_ls, a second session refused the first one's box, a denied command, tkbox_stop,
#     tkbox_export, and tkbox exec --json on the same box; then a session whose server is killed (SIGKILL) with
#     its box running, and the box is stopped by the session's guardian;
#   - the MCP Inspector's CLI mode: tools/list and a tools/call.
# The npm packages (package-lock.json) are installed with `npm ci` into BUILD/tests/mcp/npm; when npm cannot
# reach its registry the test says SKIP and why, and exits 77.
#   tests/mcp/mcp-e2e.sh BUILD_DIR
set -u
BUILD=${1:?usage: mcp-e2e.sh BUILD_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "$BUILD" && pwd)

# The client packages first: without them there is nothing to test.
NPMDIR=$BUILD/tests/mcp/npm
mkdir -p "$NPMDIR"
want=$(cat "$HERE/package.json" "$HERE/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$NPMDIR/.installed" 2>/dev/null)" != "$want" ]; then
	if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
		echo "Bail out! node and npm are needed (make deps installs nodejs; Debian's own nodejs wants apt-get install npm too)"
		exit 1
	fi
	cp "$HERE/package.json" "$HERE/package-lock.json" "$NPMDIR/"
	if ! (cd "$NPMDIR" && npm ci --no-audit --no-fund --cache "$NPMDIR/.cache" >"$NPMDIR/ci.log" 2>&1); then
		if grep -qiE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ECONNRESET|network|proxy' "$NPMDIR/ci.log"; then
			echo "SKIP: npm registry unreachable ($(grep -m1 -iE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ECONNRESET|network|proxy' "$NPMDIR/ci.log"))"
			exit 77
		fi
		echo "Bail out! npm ci failed:"
		sed 's/^/# /' "$NPMDIR/ci.log" | tail -20
		exit 1
	fi
	echo "$want" >"$NPMDIR/.installed"
fi

# shellcheck source=../daemon/lib.sh
source "$HERE/../daemon/lib.sh"
# The daemon and the signer; the sessions' guardians exit once their stop requests are answered or refused.
trap lib_cleanup EXIT
T0=$(t)

IMG=$(image_path) || { echo "Bail out! no image"; exit 1; }
signer_init || { echo "Bail out! no signer"; exit 1; }
sed -i "s/^deny:$/deny:\n  - id: MCP-D001\n    tool: Bash\n    field: line\n    pattern: 'mcp-denied-marker'\n    reason: 'mcp e2e: a command the policy denies'/" \
	"$WORK/signer/policy.yaml"
signer_start || { echo "Bail out! no signer"; exit 1; }
daemon_start || { echo "Bail out! no daemon"; exit 1; }
echo "# signer, daemon and image ready in $(elapsed "$T0") s"

# The operator's setup: what a client may narrow.
mkdir -p "$WORK/exports"
cat >"$WORK/mcp.yaml" <<EOF
version: 1
image: $IMG
allow: [example.com, example.org]
secrets:
  MCP_TOKEN: {source: env:MCP_TEST_TOKEN, hosts: [example.com]}
limits: {memory: 512M, disk: 256M, exec_timeout: 5m}
mcp: {max_boxes: 1, max_message_bytes: 2M}
EOF
export MCP_TEST_TOKEN=mcp-e2e-token-value-0123456789
export TKBOX=$BUILD/tkbox MCP_CONFIG=$WORK/mcp.yaml MCP_STATE_DIR=$TKBOX_STATE_DIR MCP_EXPORT_DIR=$WORK/exports
export MCP_RESULT=$WORK/boxes.txt

t0=$(t)
(cd "$NPMDIR" && cp "$HERE/client.mjs" . && node client.mjs) 2>"$WORK/client.err"
rc=$?
echo "# the SDK client's session in $(elapsed "$t0") s"
check "the SDK client's checks pass (exit $rc)" test "$rc" -eq 0
[ "$rc" -eq 0 ] || sed 's/^/#   /' "$WORK/client.err" | tail -30
box=$(head -1 "$MCP_RESULT" 2>/dev/null)
if [ -n "$box" ]; then
	"$TKBOX" verify "$WORK/exports/$box.tkb" --trust "$WORK/exports/$box.trust.json" >"$WORK/verify.out" 2>&1
	check "the exported bundle verifies" grep -q VERIFIED "$WORK/verify.out"
	# The box's record names the operator's file and what the call narrowed (allow, memory).
	python3 - "$WORK/exports/$box.tkb" "$MCP_CONFIG" >"$WORK/config-record.out" 2>&1 <<'PY'
import hashlib, json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
def find(o):
    if isinstance(o, dict):
        if "overridden" in o:
            return o
        for v in o.values():
            r = find(v)
            if r:
                return r
    elif isinstance(o, list):
        for v in o:
            r = find(v)
            if r:
                return r
    return None
for n in z.namelist():
    if n.startswith("runs/"):
        for line in z.read(n).decode().splitlines():
            e = json.loads(line)["event"]
            c = find(e.get("data", {})) if "tkbox.box" in json.dumps(e.get("data", {}).get("reviewer", "")) else None
            if c:
                print(json.dumps(c, sort_keys=True))
                want = hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest()
                sys.exit(0 if c["sha256"] == want and sorted(c["overridden"]) == ["--allow", "--memory"] else 1)
sys.exit(1)
PY
	check "the box's record names the operator's config and the call's narrowing ($(cat "$WORK/config-record.out"))" \
		test $? -eq 0
	# No secret value in anything the server wrote or the bundle holds.
	check "no secret value in the server's log or the bundle" \
		bash -c "! grep -qa '$MCP_TEST_TOKEN' '$WORK/client.err' '$WORK/exports/$box.tkb'"
fi

# A session that ends while its box runs, its server killed with SIGKILL: its guardian stops the box.
t0=$(t)
(cd "$NPMDIR" && node --input-type=module -e "
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport, getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';
import { writeFileSync } from 'node:fs';
const e = process.env;
const t = new StdioClientTransport({ command: e.TKBOX, args: ['mcp', '--config', e.MCP_CONFIG, '--state-dir',
  e.MCP_STATE_DIR], env: { ...getDefaultEnvironment(), MCP_TEST_TOKEN: e.MCP_TEST_TOKEN }, stderr: 'inherit' });
const c = new Client({ name: 'tkbox-e2e-c', version: '1' });
await c.connect(t);
const r = await c.callTool({ name: 'tkbox_run', arguments: {} }, undefined, { timeout: 300000 });
if (r.isError) { console.error(JSON.stringify(r)); process.exit(1); }
writeFileSync(e.MCP_RESULT, r.structuredContent.box + '\n');
// The worst end: the server killed outright (an MCP client that gives up on close sends SIGKILL).
process.kill(t.pid, 'SIGKILL');
await c.close();
") 2>>"$WORK/client.err"
rc=$?
box2=$(head -1 "$MCP_RESULT")
check "a second session runs a box and closes (exit $rc)" test "$rc" -eq 0 -a -n "$box2" -a "$box2" != "$box"
state=
end=$((SECONDS + 60)) # a deadline for a stop that never comes, not a timing assertion
while [ "$SECONDS" -lt "$end" ]; do
	state=$("$TKBOX" ls --json 2>/dev/null | python3 -c "
import json, sys
print(next((b['state'] for b in json.load(sys.stdin) if b['name'] == sys.argv[1]), 'gone'))" "$box2")
	case $state in running | creating | stopping) ;; *) break ;; esac
	sleep 0.2
done
check "a session whose server was killed (SIGKILL) had its box stopped (state $state)" test "$state" = stopped
echo "# the closing session and its box's stop in $(elapsed "$t0") s"

# SIGTERM ends a session (exit 143) after it answered what came before.
coproc MCPSRV { exec "$TKBOX" mcp --config "$MCP_CONFIG" --state-dir "$MCP_STATE_DIR" 2>"$WORK/sigterm.err"; }
srv=$MCPSRV_PID
echo '{"jsonrpc":"2.0","id":1,"method":"ping"}' >&"${MCPSRV[1]}"
line=
read -r -t 30 line <&"${MCPSRV[0]}"
kill -TERM "$srv"
wait "$srv"
rc=$?
check "a session answers ping, then ends on SIGTERM (exit $rc): $line" \
	test "$rc" -eq 143 -a "$line" = '{"jsonrpc":"2.0","id":1,"result":{}}'
check "its log says why it ended" grep -q "SIGTERM: ending the session" "$WORK/sigterm.err"

# The MCP Inspector's CLI mode (a second client nobody here wrote).
INSPECT=("$NPMDIR/node_modules/.bin/mcp-inspector" --cli -- "$TKBOX" mcp --config "$MCP_CONFIG" --state-dir "$MCP_STATE_DIR")
"${INSPECT[@]}" --method tools/list >"$WORK/inspect-list.out" 2>"$WORK/inspect.err"
check "inspector --cli tools/list names tkbox_exec" grep -q '"tkbox_exec"' "$WORK/inspect-list.out"
"${INSPECT[@]}" --method tools/call --tool-name tkbox_run --tool-arg 'allow=["evil.example"]' \
	>"$WORK/inspect-call.out" 2>>"$WORK/inspect.err"
check "inspector --cli tools/call: tkbox_run refuses an allow entry beyond the operator's" \
	grep -q 'not in the operator' "$WORK/inspect-call.out"
"${INSPECT[@]}" --method tools/call --tool-name tkbox_ls >"$WORK/inspect-ls.out" 2>>"$WORK/inspect.err"
check "inspector --cli tools/call: tkbox_ls of a new session lists no box" \
	grep -q '\\"boxes\\":\[\]' "$WORK/inspect-ls.out"
# Each Inspector CLI call is a session of its own: the box it runs is stopped when that call's session ends.
"${INSPECT[@]}" --method tools/call --tool-name tkbox_run >"$WORK/inspect-run.out" 2>>"$WORK/inspect.err"
ibox=$(grep -o 'mcp-[0-9a-f]\{8\}-[0-9]*' "$WORK/inspect-run.out" | head -1)
check "inspector --cli tools/call: tkbox_run boots a box (${ibox:-none})" test -n "$ibox"
istate=
end=$((SECONDS + 60)) # a deadline for a stop that never comes, not a timing assertion
while [ -n "$ibox" ] && [ "$SECONDS" -lt "$end" ]; do
	istate=$("$TKBOX" ls --json 2>/dev/null | python3 -c "
import json, sys
print(next((b['state'] for b in json.load(sys.stdin) if b['name'] == sys.argv[1]), 'gone'))" "$ibox")
	case $istate in running | creating | stopping) ;; *) break ;; esac
	sleep 0.2
done
check "the Inspector's session ended and its box was stopped (state ${istate:-none})" test "$istate" = stopped
[ "$fail" -eq 0 ] || { sed 's/^/#   /' "$WORK/inspect.err" | tail -10; cat "$WORK"/inspect-*.out | sed 's/^/#   /' | head -20; }

echo "# total $(elapsed "$T0") s"
echo "1..$((pass + fail))"
[ "$fail" -eq 0 ]
