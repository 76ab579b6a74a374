// SPDX-License-Identifier: Apache-2.0
// tkbox mcp driven by the official MCP TypeScript SDK's Client over its StdioClientTransport (tests/mcp/mcp-e2e.sh
// runs it against a real signer, daemon and box). Prints TAP lines; exits 1 when a check failed.
//   node client.mjs   (env: TKBOX, MCP_CONFIG, MCP_STATE_DIR, MCP_EXPORT_DIR, MCP_RESULT: a file for the box names)
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport, getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';

const env = process.env;
let failed = 0;
let n = 0;
function check(name, cond, detail) {
  n++;
  if (cond) {
    console.log(`ok ${n} - ${name}`);
  } else {
    failed++;
    console.log(`not ok ${n} - ${name}`);
    if (detail !== undefined) console.log(`#   ${JSON.stringify(detail).slice(0, 2000)}`);
  }
}

function session(name) {
  const transport = new StdioClientTransport({
    command: env.TKBOX,
    args: ['mcp', '--config', env.MCP_CONFIG, '--state-dir', env.MCP_STATE_DIR, '--export-dir', env.MCP_EXPORT_DIR],
    // the operator's environment holds the secret's source (env:MCP_TEST_TOKEN); the SDK passes only a few names
    env: { ...getDefaultEnvironment(), MCP_TEST_TOKEN: env.MCP_TEST_TOKEN },
    stderr: 'inherit',
  });
  const client = new Client({ name, version: '1.0.0' });
  return { client, transport };
}

const LONG = { timeout: 300000 }; // a box boots under TCG here
const text = (r) => (r.content && r.content[0] && r.content[0].text) || '';
const call = (c, name, args) => c.callTool({ name, arguments: args }, undefined, LONG);

const a = session('tkbox-e2e-a');
// The SDK's Client hands the negotiated revision to a transport that takes it (the stdio one does not): catch it.
let negotiated;
a.transport.setProtocolVersion = (v) => { negotiated = v; };
await a.client.connect(a.transport);
check('initialize: serverInfo names tkbox', a.client.getServerVersion()?.name === 'tkbox', a.client.getServerVersion());
check(`initialize negotiated the SDK's LATEST_PROTOCOL_VERSION ${LATEST_PROTOCOL_VERSION}`,
  negotiated === LATEST_PROTOCOL_VERSION, negotiated);

const tools = await a.client.listTools();
const names = tools.tools.map((t) => t.name).sort();
check('tools/list names the six tools', JSON.stringify(names) ===
  JSON.stringify(['tkbox_diff', 'tkbox_exec', 'tkbox_export', 'tkbox_ls', 'tkbox_run', 'tkbox_stop']), names);
check('every tool has an object inputSchema', tools.tools.every((t) => t.inputSchema && t.inputSchema.type === 'object'));
const execTool = tools.tools.find((t) => t.name === 'tkbox_exec');
check('tkbox_exec takes stdin_data of at most 1 MiB', execTool.inputSchema.properties.stdin_data.maxLength === 1048576);

// Narrowing: an allow entry beyond the operator's, an unknown secret, a higher limit, another image.
let r = await call(a.client, 'tkbox_run', { allow: ['evil.example'] });
check('tkbox_run refuses an allow entry the operator did not give', r.isError && /evil\.example/.test(text(r)), r);
r = await call(a.client, 'tkbox_run', { secrets: ['NOT_THERE'] });
check('tkbox_run refuses a secret the operator did not give', r.isError && /NOT_THERE/.test(text(r)), r);
r = await call(a.client, 'tkbox_run', { memory_mib: 4096 });
check('tkbox_run refuses a limit above the operator\'s', r.isError && /limits\.memory/.test(text(r)), r);
r = await call(a.client, 'tkbox_run', { image: 'debian:stable' });
check('tkbox_run refuses another image', r.isError && /image/.test(text(r)), r);

// One box, narrowed: a subset of the allow list and a lower limit.
r = await call(a.client, 'tkbox_run', { allow: ['example.com'], memory_mib: 256 });
const box = r.structuredContent && r.structuredContent.box;
check('tkbox_run starts a box', !r.isError && typeof box === 'string' && box.startsWith('mcp-'), r);
writeFileSync(env.MCP_RESULT, `${box}\n`);
console.log(`# box ${box}: accel ${r.structuredContent?.accel}, isolation ${r.structuredContent?.isolation}`);

r = await call(a.client, 'tkbox_run', {});
check('a second box is refused by mcp.max_boxes, naming the key', r.isError && /mcp\.max_boxes/.test(text(r)), r);

// stdin_data: exactly these bytes are the command's stdin.
const input = 'hello from the MCP client\nline two: ünïcödé\n';
const digest = createHash('sha256').update(input).digest('hex');
r = await call(a.client, 'tkbox_exec', { box, argv: ['sha256sum'], stdin_data: input });
check('tkbox_exec with stdin_data: the command read exactly those bytes',
  !r.isError && r.structuredContent.exit_code === 0 && r.structuredContent.stdout.startsWith(digest), r);

r = await call(a.client, 'tkbox_exec', { box, command: 'echo out; echo err >&2; exit 3' });
check('tkbox_exec: exit code, stdout and stderr', !r.isError && r.structuredContent.exit_code === 3 &&
  r.structuredContent.stdout === 'out\n' && r.structuredContent.stderr === 'err\n', r);

r = await call(a.client, 'tkbox_exec', { box, command: 'printf "made by mcp\\n" > /workspace/mcp.txt', cwd: '/' });
check('tkbox_exec: a workspace change', !r.isError && r.structuredContent.exit_code === 0, r);

// tkbox exec --json (the CLI, on the same box): one object; text output as text, bytes with a NUL as base64.
const cli = spawnSync(env.TKBOX, ['exec', box, '--json', '--state-dir', env.MCP_STATE_DIR, '--', 'sh', '-c',
  'printf "a\\000b"; echo err >&2; exit 2'], { encoding: 'utf8' });
let j = {};
try { j = JSON.parse(cli.stdout); } catch { /* checked below */ }
check('tkbox exec --json: exit_code, stdout_base64 for bytes with a NUL, stderr as text', cli.status === 2 &&
  j.exit_code === 2 && j.stdout_base64 === Buffer.from('a\0b').toString('base64') && j.stdout_bytes === 3 &&
  j.stdout_truncated === false && j.stderr === 'err\n' && !('stdout' in j), { status: cli.status, out: cli.stdout,
  err: cli.stderr });

r = await call(a.client, 'tkbox_diff', { box });
check('tkbox_diff shows the change', !r.isError && /\+made by mcp/.test(r.structuredContent.patch) &&
  r.structuredContent.files.some((f) => f.path === 'mcp.txt' && f.op === 'create'), r);

r = await call(a.client, 'tkbox_ls', {});
check('tkbox_ls shows only the session\'s box', !r.isError && r.structuredContent.boxes.length === 1 &&
  r.structuredContent.boxes[0].name === box && r.structuredContent.boxes[0].state === 'running', r);

// Another session cannot reach the first session's box.
const b = session('tkbox-e2e-b');
await b.client.connect(b.transport);
for (const [tool, args] of [['tkbox_exec', { box, argv: ['true'] }], ['tkbox_diff', { box }], ['tkbox_stop', { box }],
  ['tkbox_export', { box }]]) {
  r = await call(b.client, tool, args);
  check(`another session's ${tool} is refused: not a box of this session`, r.isError &&
    /not a box of this session/.test(text(r)), r);
}
r = await call(b.client, 'tkbox_ls', {});
check('another session\'s tkbox_ls shows none of it', !r.isError && r.structuredContent.boxes.length === 0, r);
await b.client.close();

// An exec the signer's policy refuses: a tool error, nothing ran.
r = await call(a.client, 'tkbox_exec', { box, command: 'echo mcp-denied-marker' });
check('a command the signer denies is a tool error', r.isError && /denied|MCP-D001/.test(text(r)), r);

r = await call(a.client, 'tkbox_stop', { box });
check('tkbox_stop stops the box and saves its patch', !r.isError && r.structuredContent.state === 'stopped' &&
  r.structuredContent.patch && r.structuredContent.patch.files === 1, r);

r = await call(a.client, 'tkbox_export', { box });
const bundle = r.structuredContent && r.structuredContent.bundle;
check('tkbox_export writes the bundle under the operator\'s export dir', !r.isError &&
  bundle === `${env.MCP_EXPORT_DIR}/${box}.tkb` && existsSync(bundle) &&
  createHash('sha256').update(readFileSync(bundle)).digest('hex') === r.structuredContent.sha256, r);
r = await call(a.client, 'tkbox_export', { box });
check('a second export never overwrites the bundle', r.isError, r);

// The protocol's own errors through the SDK: an unknown tool is a JSON-RPC error (-32602).
try {
  await a.client.callTool({ name: 'tkbox_nope', arguments: {} });
  check('an unknown tool is refused', false);
} catch (e) {
  check('an unknown tool is refused with -32602', e.code === -32602, String(e));
}
await a.client.close();
console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
