/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Scripted client of tkbox-signer for the end-to-end tests:
 *   signer-client accept  SOCKET BUNDLE     the acceptance flow, then export BUNDLE (+ .trust.json)
 *   signer-client durable SOCKET ACKED N    register a run and decide N times; after each acknowledged
 *                                           decision append "<run_id> <run_token> <decision_id>" to ACKED
 *                                           (fsync'd); stops quietly when the signer dies
 *   signer-client check   SOCKET DB ACKED   every decision id in ACKED is in the store DB, the log has no
 *                                           hole, and the run still takes decisions through SOCKET
 *   signer-client fill    SOCKET            decide with 16 KiB arguments until the signer refuses; prints
 *                                           the refusal and exits 0 only if it failed closed (never an
 *                                           allow after a refusal, error code "unavailable")
 *   signer-client decide  SOCKET            register a run and decide once ("echo hi"); exit 0 on allow
 *   signer-client limits  SOCKET            a frame one byte over RPC_MAX_FRAME gets quota_exceeded and the
 *                                           connection is closed (a malformed frame keeps it open);
 *                                           SERVER_MAX_CONNS connections are served, one more is closed
 *   signer-client ask     SOCKET EXPECT     decide an unparseable command (ask), request an approval,
 *                                           print "approval <id>", long-poll approval_wait until a person
 *                                           decides (tkbox-signer approvals approve|reject), and check the
 *                                           outcome is EXPECT (approved|rejected) and what complete then says
 *   signer-client flows   SOCKET DIR        every flow, each in its own run exported to DIR/<flow>.tkb (+ .trust.json):
 *                                           allow (exit 0 and 1, deny), approved (then killed by SIGKILL), rejected,
 *                                           expired (needs config approval_ttl_s 1), observe (every kind, gaps),
 *                                           close-default (no reason), open (not closed)
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include "crypto.h"
#include "json.h"
#include "signer/client.h"
#include "signer/config.h"
#include "signer/rpc.h"
#include "signer/server.h"
#include "signer/store.h"
#include "verify/record.h"

#include "banned.h"
#include "io.h"

static int failures;

#define CHECK(cond, ...)                                                                                               \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "FAIL: " __VA_ARGS__);                                                         \
			fputc('\n', stderr);                                                                           \
			failures++;                                                                                    \
		}                                                                                                      \
	} while (0)

static json_t *call(struct signer_client *c, json_t *req)
{
	json_t *rep = NULL;
	int r;

	if (!req) {
		fprintf(stderr, "out of memory\n");
		exit(2);
	}
	r = signer_client_call(c, req, -1, &rep);
	json_decref(req);
	if (r < 0) {
		return NULL;
	}
	return rep;
}

static const char *str(const json_t *o, const char *k)
{
	const char *v = json_string_value(json_object_get(o, k));
	return v ? v : "";
}

static struct signer_client *open_or_die(const char *sock)
{
	struct signer_client *c = NULL;
	char err[256];

	if (signer_client_open(sock, &c, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		exit(2);
	}
	return c;
}

static int args_digest(const char *tool, json_t *args, char out[RECORD_HASH_STRLEN + 1])
{
	_cleanup_json_ json_t *o = json_pack("{s:s,s:O}", "tool", tool, "args", args);
	_cleanup_free_ char *s = NULL;
	uint8_t h[SHA256_LEN];
	int r;

	if (!o || (r = json_jcs_string(o, 1 << 20, &s)) < 0 || (r = sha256(s, strlen(s), h)) < 0) {
		return -ENOMEM;
	}
	record_hash_format(h, out);
	return 0;
}

static json_t *register_run(struct signer_client *c, const char *rid)
{
	json_t *rep = call(c, json_pack("{s:s,s:s,s:{s:s,s:s}}", "method", "register_run", "request_id", rid, "agent",
					"name", "signer-client", "version", "1"));
	CHECK(rep && !signer_reply_error(rep, NULL), "register_run failed");
	return rep;
}

static json_t *decide(struct signer_client *c, const json_t *run, const char *rid, const char *tcid, const char *cmd)
{
	return call(c, json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:{s:s}}", "method", "decide", "request_id", rid, "run_id",
				 str(run, "run_id"), "run_token", str(run, "run_token"), "tool_call_id", tcid, "tool",
				 "Bash", "args", "command", cmd));
}

static int do_accept(const char *sock, const char *bundle)
{
	struct signer_client *c = open_or_die(sock);
	_cleanup_free_ char *trust_path = NULL;
	char digest[RECORD_HASH_STRLEN + 1];
	json_t *run, *d1, *d2, *rep, *args;
	const char *code;
	int fd;

	/* A mismatched protocol version is refused with a clear error, and the connection survives. */
	rep = call(c, json_pack("{s:s,s:i}", "method", "hello", "proto", 999));
	CHECK(rep && (code = signer_reply_error(rep, NULL)) && strcmp(code, "version_mismatch") == 0,
	      "hello 999 not refused");
	json_decref(rep);

	run = register_run(c, "acc-reg-1");
	d1 = decide(c, run, "acc-d-1", "call-1", "pkill tkbox-signer");
	CHECK(d1 && strcmp(str(d1, "decision"), "deny") == 0, "pkill tkbox-signer not denied");
	CHECK(d1 && json_array_size(json_object_get(d1, "rule_ids")) >= 1 &&
		      strcmp(json_string_value(json_array_get(json_object_get(d1, "rule_ids"), 0)), "TK-D007") == 0,
	      "deny without TK-D007");
	printf("decide pkill tkbox-signer -> %s %s\n", str(d1, "decision"),
	       json_string_value(json_array_get(json_object_get(d1, "rule_ids"), 0)));

	d2 = decide(c, run, "acc-d-2", "call-2", "echo hi");
	CHECK(d2 && strcmp(str(d2, "decision"), "allow") == 0, "echo hi not allowed");
	printf("decide echo hi -> %s\n", str(d2, "decision"));

	/* A retry with the same request id replays the same decision. */
	rep = decide(c, run, "acc-d-2", "call-2", "echo hi");
	CHECK(rep && strcmp(str(rep, "decision_id"), str(d2, "decision_id")) == 0, "retry did not replay");
	json_decref(rep);

	args = json_pack("{s:s}", "command", "echo hi");
	if (!args || args_digest("Bash", args, digest) < 0) {
		return 2;
	}
	json_decref(args);
	rep = call(c, json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:i}", "method", "complete", "request_id", "acc-c-1",
				"run_id", str(run, "run_id"), "run_token", str(run, "run_token"), "tool_call_id",
				"call-2", "decision_id", str(d2, "decision_id"), "args_digest", digest, "status", "ok",
				"exit_code", 0));
	CHECK(rep && !signer_reply_error(rep, NULL), "complete failed");
	json_decref(rep);

	rep = call(c, json_pack("{s:s,s:s,s:s,s:s,s:s,s:{s:s,s:s}}", "method", "observe", "request_id", "acc-o-1",
				"run_id", str(run, "run_id"), "run_token", str(run, "run_token"), "kind", "tkbox.box",
				"data", "event", "started", "isolation", "emulated"));
	CHECK(rep && !signer_reply_error(rep, NULL), "observe failed");
	json_decref(rep);

	rep = call(c, json_pack("{s:s,s:s,s:s,s:s,s:s}", "method", "close_run", "request_id", "acc-close", "run_id",
				str(run, "run_id"), "run_token", str(run, "run_token"), "reason", "acceptance done"));
	CHECK(rep && strcmp(str(rep, "state"), "closed") == 0, "close_run failed");
	json_decref(rep);

	/* Export through an fd we pass: the signer never opens our path. */
	fd = open(bundle, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		perror(bundle);
		return 2;
	}
	rep = NULL;
	args = json_pack("{s:s,s:s}", "method", "export", "run_id", str(run, "run_id"));
	if (!args || signer_client_call(c, args, fd, &rep) < 0 || signer_reply_error(rep, NULL)) {
		CHECK(0, "export failed");
	} else {
		size_t n = strlen(bundle);
		if (n > 4 && strcmp(bundle + n - 4, ".tkb") == 0) {
			if (asprintf(&trust_path, "%.*s.trust.json", (int)(n - 4), bundle) < 0) {
				return 2;
			}
		} else if (asprintf(&trust_path, "%s.trust.json", bundle) < 0) {
			return 2;
		}
		CHECK(io_write_file_atomic(trust_path, str(rep, "trust"), strlen(str(rep, "trust")), 0644) == 0,
		      "writing trust");
		printf("exported %s (%lld bytes) and %s\n", bundle,
		       (long long)json_integer_value(json_object_get(rep, "size")), trust_path);
	}
	close(fd);
	json_decref(args);
	json_decref(rep);
	json_decref(run);
	json_decref(d1);
	json_decref(d2);
	signer_client_free(c);
	return failures ? 1 : 0;
}

/* Export run_id through an fd to path, and its trust file next to it (X.tkb -> X.trust.json). */
static void export_to(struct signer_client *c, const char *run_id, const char *bundle)
{
	_cleanup_free_ char *trust_path = NULL;
	json_t *rep = NULL, *args;
	size_t n = strlen(bundle);
	int fd;

	fd = open(bundle, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		perror(bundle);
		exit(2);
	}
	args = json_pack("{s:s,s:s}", "method", "export", "run_id", run_id);
	if (!args || signer_client_call(c, args, fd, &rep) < 0 || signer_reply_error(rep, NULL)) {
		CHECK(0, "export of %s failed", run_id);
	} else {
		if (n > 4 && strcmp(bundle + n - 4, ".tkb") == 0) {
			if (asprintf(&trust_path, "%.*s.trust.json", (int)(n - 4), bundle) < 0) {
				exit(2);
			}
		} else if (asprintf(&trust_path, "%s.trust.json", bundle) < 0) {
			exit(2);
		}
		CHECK(io_write_file_atomic(trust_path, str(rep, "trust"), strlen(str(rep, "trust")), 0644) == 0,
		      "writing trust");
	}
	close(fd);
	json_decref(args);
	json_decref(rep);
}

static json_t *complete_with(struct signer_client *c, const json_t *run, const char *rid, const json_t *d,
			     const char *cmd, const char *status, const char *how, int value)
{
	char digest[RECORD_HASH_STRLEN + 1];
	json_t *args = json_pack("{s:s}", "command", cmd), *req;

	if (!args || args_digest("Bash", args, digest) < 0) {
		exit(2);
	}
	json_decref(args);
	req = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "method", "complete", "request_id", rid, "run_id",
			str(run, "run_id"), "run_token", str(run, "run_token"), "decision_id", str(d, "decision_id"),
			"args_digest", digest, "status", status);
	if (req && how) {
		json_object_set_new(req, how, json_integer(value));
	}
	return call(c, req);
}

static void close_with(struct signer_client *c, const json_t *run, const char *rid, const char *reason)
{
	json_t *req = json_pack("{s:s,s:s,s:s,s:s}", "method", "close_run", "request_id", rid, "run_id",
				str(run, "run_id"), "run_token", str(run, "run_token"));
	json_t *rep;

	if (req && reason) {
		json_object_set_new(req, "reason", json_string(reason));
	}
	rep = call(c, req);
	CHECK(rep && strcmp(str(rep, "state"), "closed") == 0, "close_run (%s) failed", reason ? reason : "default");
	json_decref(rep);
}

static void observe_one(struct signer_client *c, const json_t *run, const char *rid, const char *kind, json_t *data)
{
	json_t *rep =
		call(c, json_pack("{s:s,s:s,s:s,s:s,s:s,s:o}", "method", "observe", "request_id", rid, "run_id",
				  str(run, "run_id"), "run_token", str(run, "run_token"), "kind", kind, "data", data));
	CHECK(rep && !signer_reply_error(rep, NULL), "observe %s failed", kind);
	json_decref(rep);
}

/* ask (an unparseable command), then approval_request: returns its reply (approval_id), the decision in *ret_d. */
static json_t *ask_request(struct signer_client *c, const json_t *run, const char *tag, json_t **ret_d)
{
	char rid[64];
	json_t *d, *a;

	snprintf(rid, sizeof(rid), "%s-d", tag);
	d = decide(c, run, rid, "ask-call", "echo \"unterminated");
	CHECK(d && strcmp(str(d, "decision"), "ask") == 0, "%s: not ask", tag);
	snprintf(rid, sizeof(rid), "%s-a", tag);
	a = call(c, json_pack("{s:s,s:s,s:s,s:s,s:s}", "method", "approval_request", "request_id", rid, "run_id",
			      str(run, "run_id"), "run_token", str(run, "run_token"), "decision_id",
			      str(d, "decision_id")));
	CHECK(a && !signer_reply_error(a, NULL), "%s: approval_request failed", tag);
	*ret_d = d;
	return a;
}

/* A person's answer, on an approver connection of its own (as `tkbox-signer approvals approve|reject` sends it). */
static void answer(const char *sock, const char *rid, const json_t *a, const char *verdict)
{
	struct signer_client *p = NULL;
	json_t *rep;
	char err[256];

	if (signer_client_open_as(sock, "approver", &p, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		exit(2);
	}
	rep = call(p, json_pack("{s:s,s:s,s:s,s:s}", "method", "approval_decide", "request_id", rid, "approval_id",
				str(a, "approval_id"), "decision", verdict));

	CHECK(rep && !signer_reply_error(rep, NULL), "approval_decide %s failed", verdict);
	json_decref(rep);
	signer_client_free(p);
}

static int do_flows(const char *sock, const char *dir)
{
	static const char *const kinds[] = { "tkbox.box",	 "tkbox.egress",      "tkbox.approval",
					     "tkbox.secret.use", "tkbox.secret.leak", "tkbox.model.call" };
	static const char *const gap_kinds[] = { "complete", "observe", "supervisor" };
	struct signer_client *c = open_or_die(sock);
	char path[512], rid[64];
	json_t *run, *d, *a, *rep;

	/* allow: ran and exited 0; ran and exited 1; deny. */
	run = register_run(c, "fl-allow");
	d = decide(c, run, "fl-allow-d1", "call-1", "echo hi");
	CHECK(d && strcmp(str(d, "decision"), "allow") == 0, "echo hi not allowed");
	rep = complete_with(c, run, "fl-allow-c1", d, "echo hi", "ok", "exit_code", 0);
	CHECK(rep && !signer_reply_error(rep, NULL), "complete exit 0 failed");
	json_decref(rep);
	json_decref(d);
	d = decide(c, run, "fl-allow-d2", "call-2", "false");
	rep = complete_with(c, run, "fl-allow-c2", d, "false", "error", "exit_code", 1);
	CHECK(rep && !signer_reply_error(rep, NULL), "complete exit 1 failed");
	json_decref(rep);
	json_decref(d);
	d = decide(c, run, "fl-allow-d3", "call-3", "pkill tkbox-signer");
	CHECK(d && strcmp(str(d, "decision"), "deny") == 0, "pkill tkbox-signer not denied");
	json_decref(d);
	close_with(c, run, "fl-allow-close", "removed");
	snprintf(path, sizeof(path), "%s/allow.tkb", dir);
	export_to(c, str(run, "run_id"), path);
	json_decref(run);

	/* ask approved, then the command was killed by SIGKILL (a signal, not exit 137). */
	run = register_run(c, "fl-approved");
	a = ask_request(c, run, "fl-approved", &d);
	answer(sock, "fl-approved-ans", a, "approve");
	rep = complete_with(c, run, "fl-approved-c", d, "echo \"unterminated", "error", "signal", 9);
	CHECK(rep && !signer_reply_error(rep, NULL), "complete (killed) after approval refused");
	json_decref(rep);
	close_with(c, run, "fl-approved-close", "exported");
	snprintf(path, sizeof(path), "%s/approved.tkb", dir);
	export_to(c, str(run, "run_id"), path);
	json_decref(a);
	json_decref(d);
	json_decref(run);

	/* ask rejected. */
	run = register_run(c, "fl-rejected");
	a = ask_request(c, run, "fl-rejected", &d);
	answer(sock, "fl-rejected-ans", a, "reject");
	close_with(c, run, "fl-rejected-close", "failure: the box did not start");
	snprintf(path, sizeof(path), "%s/rejected.tkb", dir);
	export_to(c, str(run, "run_id"), path);
	json_decref(a);
	json_decref(d);
	json_decref(run);

	/* ask expired: nobody answers within the configured approval_ttl_s. */
	run = register_run(c, "fl-expired");
	a = ask_request(c, run, "fl-expired", &d);
	rep = call(c, json_pack("{s:s,s:s,s:i}", "method", "approval_wait", "approval_id", str(a, "approval_id"),
				"timeout_ms", 60000));
	CHECK(rep && strcmp(str(rep, "state"), "expired") == 0, "approval did not expire (state %s)",
	      rep ? str(rep, "state") : "?");
	json_decref(rep);
	close_with(c, run, "fl-expired-close", "daemon shutdown");
	snprintf(path, sizeof(path), "%s/expired.tkb", dir);
	export_to(c, str(run, "run_id"), path);
	json_decref(a);
	json_decref(d);
	json_decref(run);

	/* Observations of every kind and a gap of each daemon kind. */
	run = register_run(c, "fl-observe");
	for (size_t i = 0; i < ARRAY_SIZE(kinds); i++) {
		snprintf(rid, sizeof(rid), "fl-observe-%zu", i);
		observe_one(c, run, rid, kinds[i], json_pack("{s:s,s:I}", "what", kinds[i], "n", (json_int_t)i));
	}
	for (size_t i = 0; i < ARRAY_SIZE(gap_kinds); i++) {
		snprintf(rid, sizeof(rid), "fl-gap-%zu", i);
		observe_one(c, run, rid, "tkbox.gap",
			    json_pack("{s:s,s:s,s:I}", "reason", "records could not be kept", "kind", gap_kinds[i],
				      "count", (json_int_t)(i + 1)));
	}
	close_with(c, run, "fl-observe-close", "failure: the box's supervisor exited");
	snprintf(path, sizeof(path), "%s/observe.tkb", dir);
	export_to(c, str(run, "run_id"), path);
	json_decref(run);

	/* Closed without a reason (the signer's default). */
	run = register_run(c, "fl-close-default");
	close_with(c, run, "fl-close-default-close", NULL);
	snprintf(path, sizeof(path), "%s/close-default.tkb", dir);
	export_to(c, str(run, "run_id"), path);
	json_decref(run);

	/* An open run, exported up to the latest checkpoint. */
	run = register_run(c, "fl-open");
	d = decide(c, run, "fl-open-d", "call-1", "echo open");
	json_decref(d);
	rep = call(c, json_pack("{s:s}", "method", "checkpoint_nudge"));
	json_decref(rep);
	snprintf(path, sizeof(path), "%s/open.tkb", dir);
	export_to(c, str(run, "run_id"), path);
	json_decref(run);

	signer_client_free(c);
	printf("flows exported to %s\n", dir);
	return failures ? 1 : 0;
}

static int do_durable(const char *sock, const char *acked, long n)
{
	struct signer_client *c = open_or_die(sock);
	char rid[64], tcid[64];
	json_t *run;
	FILE *f;

	/* Request ids unique per process: a second round must not replay the first one's answers. */
	snprintf(rid, sizeof(rid), "dur-reg-%d", (int)getpid());
	run = register_run(c, rid);
	f = fopen(acked, "ae");

	if (!f || !run || signer_reply_error(run, NULL)) {
		return 2;
	}
	for (long i = 0; i < n; i++) {
		json_t *d;
		snprintf(rid, sizeof(rid), "dur-%d-%ld", (int)getpid(), i);
		snprintf(tcid, sizeof(tcid), "call-%ld", i);
		d = decide(c, run, rid, tcid, "echo durable");
		if (!d) {
			break; /* the signer died: everything acknowledged so far is in ACKED */
		}
		if (signer_reply_error(d, NULL)) {
			json_decref(d);
			break;
		}
		/* Written and flushed to disk only after the signer acknowledged it. */
		fprintf(f, "%s %s %s\n", str(run, "run_id"), str(run, "run_token"), str(d, "decision_id"));
		fflush(f);
		(void)fsync(fileno(f));
		json_decref(d);
	}
	fclose(f);
	json_decref(run);
	signer_client_free(c);
	return 0;
}

struct scan {
	char *text; /* all record lines concatenated */
	size_t len;
	size_t cap;
	uint64_t next_seq;
	bool hole;
};

static int scan_cb(uint64_t seq, const char *run_key, uint64_t run_seq, const uint8_t hash[32], const char *line,
		   size_t line_len, void *userdata)
{
	struct scan *s = userdata;
	struct record rec = { 0 };

	if (seq != s->next_seq) {
		s->hole = true;
	}
	s->next_seq = seq + 1;
	if (record_parse(line, line_len, &rec) < 0 || record_check_hash(&rec) < 0 || memcmp(rec.hash, hash, 32) != 0) {
		s->hole = true;
	}
	record_release(&rec);
	if (s->len + line_len + 2 > s->cap) {
		size_t ncap = (s->cap + line_len + 2) * 2;
		char *nt = realloc(s->text, ncap);
		if (!nt) {
			return -ENOMEM;
		}
		s->text = nt;
		s->cap = ncap;
	}
	memcpy(s->text + s->len, line, line_len);
	s->len += line_len;
	s->text[s->len++] = '\n';
	s->text[s->len] = '\0';
	return 0;
}

static int do_check(const char *sock, const char *db, const char *acked)
{
	struct store *st = NULL;
	struct scan sc = { 0 };
	char err[256], line[1024], run_id[256] = "", token[1024] = "", did[128];
	long n_acked = 0, n_found = 0;
	FILE *f;

	if (store_open(db, false, &st, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		return 2;
	}
	if (store_foreach_record(st, 0, scan_cb, &sc) < 0) {
		fprintf(stderr, "reading the store failed\n");
		return 2;
	}
	store_close(st);
	CHECK(!sc.hole, "the log has a hole or a bad record");
	f = fopen(acked, "re");
	if (!f) {
		perror(acked);
		return 2;
	}
	while (fgets(line, sizeof(line), f)) {
		char pat[160];
		if (sscanf(line, "%255s %1023s %127s", run_id, token, did) != 3) {
			continue;
		}
		n_acked++;
		snprintf(pat, sizeof(pat), "\"decision_id\":\"%s\"", did);
		if (sc.text && strstr(sc.text, pat)) {
			n_found++;
		} else {
			CHECK(0, "acknowledged decision %s is not in the store", did);
		}
	}
	fclose(f);
	printf("acknowledged %ld, found in the store %ld, log records %llu\n", n_acked, n_found,
	       (unsigned long long)sc.next_seq);
	CHECK(n_acked > 0, "nothing was acknowledged before the kill");
	if (n_acked > 0) {
		/* The restarted signer knows the run: a new decision on it is signed. */
		struct signer_client *c = open_or_die(sock);
		json_t *run = json_pack("{s:s,s:s}", "run_id", run_id, "run_token", token);
		char rid[64];
		json_t *d;
		snprintf(rid, sizeof(rid), "after-restart-%d", (int)getpid());
		d = decide(c, run, rid, "call-after", "echo again");
		CHECK(d && strcmp(str(d, "decision"), "allow") == 0, "the run does not take decisions after restart");
		json_decref(d);
		json_decref(run);
		signer_client_free(c);
	}
	free(sc.text);
	return failures ? 1 : 0;
}

static int do_fill(const char *sock)
{
	struct signer_client *c = open_or_die(sock);
	json_t *run = register_run(c, "fill-reg");
	char rid[64], *big;
	bool refused = false;
	long i;

	big = malloc(16 * 1024 + 1);
	if (!big || !run) {
		return 2;
	}
	memset(big, 'x', 16 * 1024);
	memcpy(big, "echo ", 5);
	big[16 * 1024] = '\0';
	for (i = 0; i < 100000 && !refused; i++) {
		const char *code, *msg = "";
		json_t *d;
		snprintf(rid, sizeof(rid), "fill-%ld", i);
		d = decide(c, run, rid, rid, big);
		if (!d) {
			CHECK(0, "connection lost at decision %ld", i);
			break;
		}
		code = signer_reply_error(d, &msg);
		if (code) {
			printf("decision %ld refused: %s: %s\n", i, code, msg);
			CHECK(strcmp(code, "unavailable") == 0, "refusal is not 'unavailable'");
			CHECK(strstr(msg, "full") != NULL, "refusal does not say the disk is full");
			refused = true;
		}
		json_decref(d);
	}
	CHECK(refused, "the signer never refused (disk never filled?)");
	/* Still full: every further attempt is refused too, never allowed. */
	for (int k = 0; refused && k < 5; k++) {
		json_t *d;
		snprintf(rid, sizeof(rid), "fill-again-%d", k);
		d = decide(c, run, rid, rid, big);
		CHECK(d && signer_reply_error(d, NULL), "a decision was acknowledged while the disk is full");
		json_decref(d);
	}
	free(big);
	json_decref(run);
	signer_client_free(c);
	return failures ? 1 : 0;
}

static int do_decide(const char *sock)
{
	struct signer_client *c = open_or_die(sock);
	json_t *run = register_run(c, "one-reg");
	json_t *d = run ? decide(c, run, "one-d", "one-call", "echo hi") : NULL;
	int rc = d && strcmp(str(d, "decision"), "allow") == 0 ? 0 : 1;

	if (d) {
		const char *msg = "";
		const char *code = signer_reply_error(d, &msg);
		printf("%s%s%s\n", code ? code : str(d, "decision"), code ? ": " : "", code ? msg : "");
	}
	json_decref(d);
	json_decref(run);
	signer_client_free(c);
	return rc;
}

static int do_ask(const char *sock, const char *expect)
{
	struct signer_client *c = open_or_die(sock);
	char rid[64], digest[RECORD_HASH_STRLEN + 1];
	json_t *run, *d, *a, *w, *done, *args;
	const char *cmd = "echo \"unterminated";

	snprintf(rid, sizeof(rid), "ask-reg-%d", (int)getpid());
	run = register_run(c, rid);
	snprintf(rid, sizeof(rid), "ask-d-%d", (int)getpid());
	d = decide(c, run, rid, "ask-call", cmd);
	CHECK(d && strcmp(str(d, "decision"), "ask") == 0, "an unparseable command is not ask");
	snprintf(rid, sizeof(rid), "ask-a-%d", (int)getpid());
	a = call(c, json_pack("{s:s,s:s,s:s,s:s,s:s}", "method", "approval_request", "request_id", rid, "run_id",
			      str(run, "run_id"), "run_token", str(run, "run_token"), "decision_id",
			      str(d, "decision_id")));
	CHECK(a && !signer_reply_error(a, NULL), "approval_request failed");
	printf("approval %s\n", str(a, "approval_id"));
	fflush(stdout);
	/* A long poll: the answer comes when a person decides on another connection. */
	w = call(c, json_pack("{s:s,s:s,s:i}", "method", "approval_wait", "approval_id", str(a, "approval_id"),
			      "timeout_ms", 60000));
	CHECK(w && strcmp(str(w, "state"), expect) == 0, "approval ended %s, expected %s", w ? str(w, "state") : "?",
	      expect);
	printf("approval %s\n", str(w, "state"));
	args = json_pack("{s:s}", "command", cmd);
	if (!args || args_digest("Bash", args, digest) < 0) {
		return 2;
	}
	json_decref(args);
	snprintf(rid, sizeof(rid), "ask-c-%d", (int)getpid());
	done = call(c, json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:i}", "method", "complete", "request_id", rid, "run_id",
				 str(run, "run_id"), "run_token", str(run, "run_token"), "decision_id",
				 str(d, "decision_id"), "args_digest", digest, "status", "ok", "exit_code", 0));
	if (strcmp(expect, "approved") == 0) {
		CHECK(done && !signer_reply_error(done, NULL), "complete after approval refused");
	} else {
		CHECK(done && signer_reply_error(done, NULL), "complete after rejection accepted");
	}
	json_decref(done);
	json_decref(w);
	json_decref(a);
	json_decref(d);
	json_decref(run);
	signer_client_free(c);
	return failures ? 1 : 0;
}

static int do_limits(const char *sock)
{
	struct signer_client *c = open_or_die(sock), **many;
	json_t *rep = NULL, *req;
	const char *code;
	char *big = malloc(RPC_MAX_FRAME + 2);
	int r;

	if (!big) {
		return 2;
	}
	/* A malformed frame: typed error, the connection survives. */
	r = signer_client_send_raw(c, "{nope\n", 6);
	CHECK(r == 0 && signer_client_recv(c, &rep) == 0 && (code = signer_reply_error(rep, NULL)) &&
		      strcmp(code, "invalid_request") == 0,
	      "malformed frame not refused");
	json_decref(rep);
	rep = NULL;
	req = json_pack("{s:s}", "method", "status");
	CHECK(req && signer_client_call(c, req, -1, &rep) == 0 && !signer_reply_error(rep, NULL),
	      "connection did not survive a malformed frame");
	json_decref(req);
	json_decref(rep);
	rep = NULL;
	/* One byte over the frame cap. */
	memset(big, ' ', RPC_MAX_FRAME + 1);
	big[RPC_MAX_FRAME + 1] = '\n';
	(void)signer_client_send_raw(c, big, RPC_MAX_FRAME + 2);
	CHECK(signer_client_recv(c, &rep) == 0 && (code = signer_reply_error(rep, NULL)) &&
		      strcmp(code, "quota_exceeded") == 0,
	      "oversize frame not refused with quota_exceeded");
	json_decref(rep);
	rep = NULL;
	CHECK(signer_client_recv(c, &rep) < 0, "connection still open after an oversize frame");
	signer_client_free(c);
	free(big);

	many = calloc(SERVER_MAX_CONNS + 1, sizeof(*many));
	if (!many) {
		return 2;
	}
	for (int i = 0; i < SERVER_MAX_CONNS; i++) {
		char err[256];
		CHECK(signer_client_open(sock, &many[i], err, sizeof(err)) == 0, "connection %d refused: %s", i, err);
	}
	{
		char err[256];
		struct signer_client *extra = NULL;
		CHECK(signer_client_open(sock, &extra, err, sizeof(err)) < 0, "connection %d was served",
		      SERVER_MAX_CONNS);
		signer_client_free(extra);
	}
	for (int i = 0; i < SERVER_MAX_CONNS; i++) {
		signer_client_free(many[i]);
	}
	free(many);
	printf("limits ok\n");
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "limits") == 0) {
		return do_limits(argv[2]);
	}
	if (argc == 4 && strcmp(argv[1], "ask") == 0) {
		return do_ask(argv[2], argv[3]);
	}
	if (argc == 4 && strcmp(argv[1], "flows") == 0) {
		return do_flows(argv[2], argv[3]);
	}
	if (argc == 4 && strcmp(argv[1], "accept") == 0) {
		return do_accept(argv[2], argv[3]);
	}
	if (argc == 5 && strcmp(argv[1], "durable") == 0) {
		return do_durable(argv[2], argv[3], strtol(argv[4], NULL, 10));
	}
	if (argc == 5 && strcmp(argv[1], "check") == 0) {
		return do_check(argv[2], argv[3], argv[4]);
	}
	if (argc == 3 && strcmp(argv[1], "fill") == 0) {
		return do_fill(argv[2]);
	}
	if (argc == 3 && strcmp(argv[1], "decide") == 0) {
		return do_decide(argv[2]);
	}
	fprintf(stderr, "usage: signer-client accept|flows|durable|check|fill|decide|ask|limits SOCKET ...\n");
	return 2;
}
