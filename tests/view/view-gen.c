/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test tool of tkbox view: a scripted client of a real tkbox-signer that
 * records the crossings of a box the way the daemon does (the same RPCs and
 * record shapes as docs/integration.md "What is signed where"), without a VM,
 * and exports the run.
 *   view-gen SOCKET OUT.tkb demo      the demo's run: apt-get through the door, a held host approved, the
 *                                     metadata address refused, a secret swapped in and a leak blocked, a
 *                                     model call, a command denied, the patch and its file written
 *   view-gen SOCKET OUT.tkb hostile   the same crossings with HTML and script payloads in every string the
 *                                     bundle carries (and in the command lines, which it does not carry)
 * OUT.trust.json is written next to the bundle.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "crypto.h"
#include "json.h"
#include "signer/client.h"
#include "verify/record.h"

#include "banned.h"
#include "io.h"

/* The payloads: each would change document.title if it ran (tests/view/view-chromium.sh looks). */
#define P1 "<script>document.title='PWNED1'</script>"
#define P2 "\"><img src=x onerror=\"document.title='PWNED2'\">"
#define P3 "</pre></details></li></ol><svg onload=\"document.title='PWNED3'\"></svg>"

struct gen {
	struct signer_client *c;
	const char *sock;
	json_t *run;
	bool hostile;
	bool approver; /* the call goes on the approver connection: no run token */
	int n;
};

static _noreturn_ void die(const char *what)
{
	fprintf(stderr, "view-gen: %s\n", what);
	exit(1);
}

/* A string of the run: as given, or with a payload in it when hostile. */
static const char *h(const struct gen *g, const char *s, int which)
{
	static char buf[8][512];
	static int slot;
	char *b = buf[slot++ % 8];

	if (!g->hostile) {
		return s;
	}
	(void)snprintf(b, sizeof(buf[0]), "%s%s", s, which == 1 ? P1 : which == 2 ? P2 : P3);
	return b;
}

static json_t *call(struct gen *g, json_t *req)
{
	json_t *rep = NULL;
	char rid[32];

	if (!req) {
		die("out of memory");
	}
	(void)snprintf(rid, sizeof(rid), "vg-%d-%d", (int)getpid(), g->n++);
	if (!json_object_get(req, "request_id")) {
		(void)json_object_set_new(req, "request_id", json_string(rid));
	}
	if (g->run && !g->approver && !json_object_get(req, "run_id")) {
		(void)json_object_set_new(req, "run_id", json_incref(json_object_get(g->run, "run_id")));
		(void)json_object_set_new(req, "run_token", json_incref(json_object_get(g->run, "run_token")));
	}
	if (signer_client_call(g->c, req, -1, &rep) < 0 || signer_reply_error(rep, NULL)) {
		_cleanup_free_ char *s = json_dumps(req, JSON_COMPACT);
		_cleanup_free_ char *t = rep ? json_dumps(rep, JSON_COMPACT) : NULL;
		fprintf(stderr, "view-gen: %s -> %s\n", s ? s : "?", t ? t : "no reply");
		die("a call failed");
	}
	json_decref(req);
	return rep;
}

static void observe(struct gen *g, const char *kind, json_t *data)
{
	json_decref(call(g, json_pack("{s:s,s:s,s:o}", "method", "observe", "kind", kind, "data", data)));
}

struct crossing {
	const char *tool;
	json_t *args;
	json_t *decision;
};

static void decide(struct gen *g, struct crossing *x, const char *tool, json_t *args)
{
	char tcid[32];

	(void)snprintf(tcid, sizeof(tcid), "call-%d", g->n);
	x->tool = tool;
	x->args = args;
	x->decision = call(g, json_pack("{s:s,s:s,s:s,s:O}", "method", "decide", "tool_call_id", tcid, "tool", tool,
					"args", args));
}

/* Complete x with extra fields (status etc.) given as a JSON object. */
static void complete(struct gen *g, struct crossing *x, json_t *fields)
{
	_cleanup_json_ json_t *o = json_pack("{s:s,s:O}", "tool", x->tool, "args", x->args);
	_cleanup_free_ char *s = NULL;
	char digest[RECORD_HASH_STRLEN + 1];
	uint8_t hash[SHA256_LEN];
	json_t *req;

	if (!o || json_jcs_string(o, 1 << 20, &s) < 0 || sha256(s, strlen(s), hash) < 0) {
		die("args digest");
	}
	record_hash_format(hash, digest);
	req = json_pack("{s:s,s:O,s:s}", "method", "complete", "decision_id",
			json_object_get(x->decision, "decision_id"), "args_digest", digest);
	if (!req || json_object_update(req, fields) < 0) {
		die("out of memory");
	}
	json_decref(fields);
	json_decref(call(g, req));
	json_decref(x->args);
	json_decref(x->decision);
}

/* An ask: the approval requested, and a person's answer on an approver connection (tkbox-signer approvals). */
static void approve(struct gen *g, struct crossing *x)
{
	struct signer_client *p = NULL;
	struct signer_client *me = g->c;
	json_t *a;
	char err[256];

	a = call(g, json_pack("{s:s,s:O}", "method", "approval_request", "decision_id",
			      json_object_get(x->decision, "decision_id")));
	if (signer_client_open_as(g->sock, "approver", &p, err, sizeof(err)) < 0) {
		die(err);
	}
	g->c = p;
	g->approver = true;
	json_decref(call(g, json_pack("{s:s,s:O,s:s}", "method", "approval_decide", "approval_id",
				      json_object_get(a, "approval_id"), "decision", "approve")));
	g->c = me;
	g->approver = false;
	signer_client_free(p);
	json_decref(a);
}

static void bash(struct gen *g, const char *cmd, int exit_code)
{
	struct crossing x;

	decide(g, &x, "Bash",
	       json_pack("{s:s,s:s,s:s}", "command", h(g, cmd, 1), "cwd", "/workspace", "stdin", "none"));
	if (strcmp(json_string_value(json_object_get(x.decision, "decision")), "deny") == 0) {
		json_decref(x.args);
		json_decref(x.decision);
		return;
	}
	if (strcmp(json_string_value(json_object_get(x.decision, "decision")), "ask") == 0) {
		approve(g, &x);
	}
	complete(g, &x, json_pack("{s:s,s:i}", "status", exit_code ? "error" : "ok", "exit_code", exit_code));
}

static void fetch(struct gen *g, const char *url, int up, int down, int ms)
{
	struct crossing x;

	decide(g, &x, "WebFetch", json_pack("{s:s}", "url", url));
	complete(g, &x,
		 json_pack("{s:s,s:i,s:i,s:i}", "status", "ok", "bytes_up", up, "bytes_down", down, "duration_ms", ms));
}

static void box_record(struct gen *g)
{
	observe(g, "tkbox.box",
		json_pack("{s:s,s:s,s:s,s:s,s:[s],s:{s:i,s:i,s:i,s:i,s:i},s:s,s:s,s:s,s:{s:[s,s,s],s:[s],s:s,s:[]},"
			  "s:[{s:s,s:s,s:[s],s:s}],s:{s:s,s:{s:b,s:b}},s:i}",
			  "box", h(g, "demo", 1), "image", h(g, "debian:bookworm", 2), "image_digest",
			  "sha256:4c7b0a3e2f1d9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b", "workspace",
			  h(g, "/home/dev/project", 3), "env", h(g, "LANG=C.UTF-8", 1), "limits", "vcpus", 2,
			  "memory_mib", 1024, "disk_mib", 4096, "lifetime_s", 3600, "exec_timeout_s", 600, "accel",
			  "tcg", "isolation", "emulated", "network", "none", "egress", "allow",
			  h(g, "deb.debian.org", 2), "security.debian.org", "api.github.com", "presets", "debian",
			  "inspect", "bound", "resolve", "secrets", "name", h(g, "GITHUB_TOKEN", 1), "placeholder",
			  "tkbox-secret-GITHUB_TOKEN-7f3a", "hosts", h(g, "api.github.com", 3), "header",
			  "Authorization", "tls", "ca_sha256",
			  "9b1e5c0f6a2d4e8b7c3f1a0d9e8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c", "selftest", "ran", 1,
			  "trusted", 1, "clock_offset_ms", 3));
}

static void held_host(struct gen *g)
{
	observe(g, "tkbox.egress",
		json_pack("{s:s,s:i,s:s,s:s,s:s}", "host", h(g, "169.254.169.254", 1), "port", 80, "decision",
			  "refused", "rule", h(g, "blocked-address", 2), "reason",
			  h(g, "the cloud metadata address", 3)));
	observe(g, "tkbox.approval",
		json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "approval_id", "ap-3f2a9c1b7d20", "box", h(g, "demo", 2),
			  "target", h(g, "evil.example:443", 1), "url", h(g, "https://evil.example", 2), "decision",
			  "approved", "approver", h(g, "uid:0", 3)));
	fetch(g, "https://evil.example:443", 517, 3512, 412);
}

static void secrets_and_model(struct gen *g)
{
	observe(g, "tkbox.secret.use",
		json_pack("{s:s,s:s}", "name", h(g, "GITHUB_TOKEN", 1), "host", h(g, "api.github.com", 2)));
	fetch(g, "https://api.github.com:443", 880, 2310, 390);
	observe(g, "tkbox.secret.leak",
		json_pack("{s:s,s:s,s:s}", "name", h(g, "GITHUB_TOKEN", 2), "host", h(g, "example.org", 1), "reason",
			  h(g, "the placeholder in plain HTTP to a host it is not bound to", 3)));
	observe(g, "tkbox.model.call",
		json_pack("{s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:s,s:i,s:i}", "host", h(g, "api.anthropic.com", 1),
			  "method", "POST", "path", h(g, "/v1/messages", 2), "status", 200, "bytes_up", 1834,
			  "bytes_down", 5120, "bytes", 6954, "duration_ms", 2140, "model", h(g, "claude-sonnet-4-5", 3),
			  "input_tokens", 412, "output_tokens", 96));
}

static void patch_and_write(struct gen *g)
{
	struct crossing x;

	observe(g, "tkbox.patch",
		json_pack("{s:s,s:i,s:i,s:[[s,s]],s:s}", "sha256",
			  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "bytes", 180, "files", 1,
			  "notices", h(g, ".env", 1), h(g, "sensitive: not applied without --allow-sensitive", 2),
			  "status", "saved"));
	decide(g, &x, "Write",
	       json_pack("{s:s,s:s,s:s,s:s,s:s,s:i,s:b,s:b,s:s,s:n}", "file_path", h(g, "/home/dev/project/x.txt", 1),
			 "path", h(g, "x.txt", 2), "op", "create", "mode", "0644", "content_sha256",
			 "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03", "size", 6, "binary", 0,
			 "sensitive", 0, "patch_sha256",
			 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "pre_sha256"));
	complete(g, &x, json_pack("{s:s,s:[s]}", "status", "ok", "written_paths", h(g, "x.txt", 3)));
}

static void export_run(struct gen *g, const char *bundle)
{
	_cleanup_free_ char *trust = NULL;
	size_t n = strlen(bundle);
	json_t *rep = NULL, *req;
	int fd = open(bundle, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0 || n < 5 || strcmp(bundle + n - 4, ".tkb") != 0) {
		die("cannot write the bundle (OUT must end in .tkb)");
	}
	req = json_pack("{s:s,s:O}", "method", "export", "run_id", json_object_get(g->run, "run_id"));
	if (!req || signer_client_call(g->c, req, fd, &rep) < 0 || signer_reply_error(rep, NULL)) {
		die("export failed");
	}
	if (asprintf(&trust, "%.*s.trust.json", (int)(n - 4), bundle) < 0 ||
	    io_write_file_atomic(trust, json_string_value(json_object_get(rep, "trust")),
				 strlen(json_string_value(json_object_get(rep, "trust"))), 0644) < 0) {
		die("cannot write the trust file");
	}
	close(fd);
	json_decref(req);
	json_decref(rep);
}

int main(int argc, char **argv)
{
	struct gen g = { 0 };
	char err[256];

	if (argc != 4 || (strcmp(argv[3], "demo") != 0 && strcmp(argv[3], "hostile") != 0)) {
		fprintf(stderr, "usage: view-gen SOCKET OUT.tkb demo|hostile\n");
		return 2;
	}
	g.hostile = strcmp(argv[3], "hostile") == 0;
	g.sock = argv[1];
	if (signer_client_open(argv[1], &g.c, err, sizeof(err)) < 0) {
		die(err);
	}
	g.run = call(&g, json_pack("{s:s,s:{s:s,s:s}}", "method", "register_run", "agent", "name", "tkbox", "version",
				   "0.1.0"));
	box_record(&g);
	bash(&g, "python3 -c 'print(1+1)'", 0);
	bash(&g, "apt-get install -y jq", 0);
	fetch(&g, "http://deb.debian.org:80", 1204, 1318230, 5210);
	held_host(&g);
	secrets_and_model(&g);
	bash(&g, "echo hello > x.txt", 0);
	bash(&g, "rm -rf /", 0);
	bash(&g, "grep -q TODO x.txt", 1);
	patch_and_write(&g);
	json_decref(call(&g, json_pack("{s:s,s:s}", "method", "close_run", "reason", "exported")));
	export_run(&g, argv[2]);
	json_decref(g.run);
	signer_client_free(g.c);
	return 0;
}
