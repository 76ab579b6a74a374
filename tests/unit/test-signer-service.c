/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The signer's verbs and state (src/signer/service.c) without a socket: a
 * fresh state dir, the default policy, a real SQLite store. The test plays
 * the commit thread itself (take pending, commit, report durable).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "crypto.h"
#include "signer/config.h"
#include "signer/policy.h"
#include "signer/service.h"
#include "signer/store.h"
#include "verify/bundle.h"
#include "verify/record.h"
#include "verify/schema.h"
#include "verify/verify.h"

#include "banned.h"

struct fixture {
	char dir[64];
	struct signer_config cfg;
	struct signer_keys keys;
	struct policy *policy;
	struct store *store;
	struct service *svc;
	struct caller me;
	struct caller person; /* the same uid on an approver connection (tkbox-signer approvals) */
	int n;
};

static void commit(struct fixture *f)
{
	struct store_item *items;
	char err[256];
	size_t n;

	service_take_pending(f->svc, &items, &n);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(service_sign_item(&f->keys, &items[i]), 0);
	}
	assert_int_equal(store_commit(f->store, items, n, err, sizeof(err)), 0);
	for (size_t i = 0; i < n; i++) {
		store_item_release(&items[i]);
	}
	free(items);
	service_durable(f->svc, service_assigned_count(f->svc), 0);
}

/* Send one request (JSON text) as caller c; returns the reply body (commits first, as the server would). */
static json_t *rpc_as(struct fixture *f, const struct caller *c, const char *text)
{
	struct rpc_request req = { 0 };
	struct service_reply rep = { 0 };
	enum rpc_err e;
	char msg[256];
	json_t *body;

	if (rpc_request_parse(text, strlen(text), &req, &e, msg, sizeof(msg)) < 0) {
		return rpc_error_new(e, msg);
	}
	service_handle(f->svc, c, &req, -1, &rep);
	rpc_request_release(&req);
	assert_true(rep.need <= service_assigned_count(f->svc));
	commit(f);
	assert_true(rep.need <= service_durable_count(f->svc));
	body = rep.body;
	rep.body = NULL;
	service_reply_release(&rep);
	assert_non_null(body);
	return body;
}

/* A request as caller c, its text formatted from fmt. */
static json_t *vrpc(struct fixture *f, const struct caller *c, const char *fmt, va_list ap) _printf_(3, 0);
static json_t *vrpc(struct fixture *f, const struct caller *c, const char *fmt, va_list ap)
{
	char *text = NULL;
	json_t *r;

	assert_true(vasprintf(&text, fmt, ap) > 0);
	r = rpc_as(f, c, text);
	free(text);
	return r;
}

static json_t *rpc(struct fixture *f, const char *fmt, ...) _printf_(2, 3);
static json_t *rpc(struct fixture *f, const char *fmt, ...)
{
	json_t *r;
	va_list ap;

	va_start(ap, fmt);
	r = vrpc(f, &f->me, fmt, ap);
	va_end(ap);
	return r;
}

/* A request on the person's (approver) connection. */
static json_t *rpc_person(struct fixture *f, const char *fmt, ...) _printf_(2, 3);
static json_t *rpc_person(struct fixture *f, const char *fmt, ...)
{
	json_t *r;
	va_list ap;

	va_start(ap, fmt);
	r = vrpc(f, &f->person, fmt, ap);
	va_end(ap);
	return r;
}

static const char *err_code(const json_t *r)
{
	json_t *e = json_object_get(r, "error");
	return e ? json_string_value(json_object_get(e, "code")) : NULL;
}

static const char *s(const json_t *o, const char *k)
{
	const char *v = json_string_value(json_object_get(o, k));
	return v ? v : "";
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char err[512], *path = NULL;

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/tks-unit.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_int_equal(signer_init_dir(f->dir, SIGNER_MODE_DEV, NULL, err, sizeof(err)), 0);
	/* init refuses to run twice on one dir. */
	assert_int_equal(signer_init_dir(f->dir, SIGNER_MODE_DEV, NULL, err, sizeof(err)), -EEXIST);
	assert_int_equal(signer_config_load(f->dir, "/tmp/unused.sock", &f->cfg, err, sizeof(err)), 0);
	assert_int_equal(signer_keys_load(f->dir, &f->keys), 0);
	assert_int_equal(
		policy_load(policy_default_yaml(), strlen(policy_default_yaml()), &f->policy, err, sizeof(err)), 0);
	assert_true(asprintf(&path, "%s/store.db", f->dir) > 0);
	assert_int_equal(store_open(path, true, &f->store, err, sizeof(err)), 0);
	free(path);
	assert_int_equal(service_new(&f->cfg, &f->keys, f->policy, f->store, &f->svc, err, sizeof(err)), 0);
	commit(f); /* the signer.epoch of a fresh log */
	assert_int_equal(service_durable_count(f->svc), 1);
	f->me = (struct caller){ .uid = getuid(), .gid = getgid(), .pid = getpid() };
	f->person = f->me;
	f->person.role = SIGNER_ROLE_APPROVER;
	f->person.role_declared = true;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char *cmd = NULL;

	service_free(f->svc);
	store_close(f->store);
	policy_free(f->policy);
	signer_keys_wipe(&f->keys);
	signer_config_release(&f->cfg);
	assert_true(asprintf(&cmd, "rm -rf '%s'", f->dir) > 0);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	free(f);
	return 0;
}

static json_t *reg(struct fixture *f, const char *rid)
{
	json_t *r = rpc(f, "{\"method\":\"register_run\",\"request_id\":\"%s\",\"agent\":{\"name\":\"t\"}}", rid);
	assert_null(err_code(r));
	return r;
}

static json_t *decide(struct fixture *f, const json_t *run, const char *rid, const char *cmd)
{
	return rpc(f,
		   "{\"method\":\"decide\",\"request_id\":\"%s\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		   "\"tool_call_id\":\"c-%s\",\"tool\":\"Bash\",\"args\":{\"command\":\"%s\"}}",
		   rid, s(run, "run_id"), s(run, "run_token"), rid, cmd);
}

static void digest_of(const char *cmd, char out[RECORD_HASH_STRLEN + 1])
{
	json_t *o = json_pack("{s:s,s:{s:s}}", "tool", "Bash", "args", "command", cmd);
	char *jcs = NULL;
	uint8_t h[32];

	assert_int_equal(json_jcs_string(o, 1 << 20, &jcs), 0);
	assert_int_equal(sha256(jcs, strlen(jcs), h), 0);
	record_hash_format(h, out);
	free(jcs);
	json_decref(o);
}

static json_t *complete(struct fixture *f, const json_t *run, const char *rid, const char *did, const char *digest)
{
	return rpc(f,
		   "{\"method\":\"complete\",\"request_id\":\"%s\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		   "\"decision_id\":\"%s\",\"args_digest\":\"%s\",\"status\":\"ok\",\"exit_code\":0}",
		   rid, s(run, "run_id"), s(run, "run_token"), did, digest);
}

static void test_decide_complete(void **state)
{
	struct fixture *f = *state;
	char dg[RECORD_HASH_STRLEN + 1];
	json_t *run = reg(f, "r1"), *d1, *d2, *r;

	d1 = decide(f, run, "d1", "pkill tkbox-signer");
	assert_string_equal(s(d1, "decision"), "deny");
	assert_string_equal(json_string_value(json_array_get(json_object_get(d1, "rule_ids"), 0)), "TK-D007");
	d2 = decide(f, run, "d2", "echo hi");
	assert_string_equal(s(d2, "decision"), "allow");

	/* A denied call cannot be completed; a wrong digest is args_mismatch; then once only. */
	digest_of("echo hi", dg);
	r = complete(f, run, "c0", s(d1, "decision_id"), dg);
	assert_string_equal(err_code(r), "forbidden");
	json_decref(r);
	digest_of("echo HI", dg);
	r = complete(f, run, "c1", s(d2, "decision_id"), dg);
	assert_string_equal(err_code(r), "args_mismatch");
	json_decref(r);
	digest_of("echo hi", dg);
	r = complete(f, run, "c2", s(d2, "decision_id"), dg);
	assert_null(err_code(r));
	json_decref(r);
	r = complete(f, run, "c3", s(d2, "decision_id"), dg);
	assert_string_equal(err_code(r), "conflict");
	json_decref(r);
	r = complete(f, run, "c4", "dnope", dg);
	assert_string_equal(err_code(r), "unknown_decision");
	json_decref(r);
	/* Raw arguments: a JSON text in a string, parsed strictly; unparseable ones are denied. */
	r = rpc(f,
		"{\"method\":\"decide\",\"request_id\":\"raw1\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		"\"tool_call_id\":\"c\",\"tool\":\"Bash\",\"args\":\"{\\\"command\\\":\\\"echo hi\\\"}\"}",
		s(run, "run_id"), s(run, "run_token"));
	assert_string_equal(s(r, "decision"), "allow");
	json_decref(r);
	r = rpc(f,
		"{\"method\":\"decide\",\"request_id\":\"raw2\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		"\"tool_call_id\":\"c\",\"tool\":\"Bash\",\"args\":\"{\\\"command\\\":1,\\\"command\\\":2}\"}",
		s(run, "run_id"), s(run, "run_token"));
	assert_string_equal(s(r, "decision"), "deny");
	assert_string_equal(json_string_value(json_array_get(json_object_get(r, "rule_ids"), 0)), "TK-ARGS-INVALID");
	json_decref(r);
	json_decref(d1);
	json_decref(d2);
	json_decref(run);
}

static void test_idempotent(void **state)
{
	struct fixture *f = *state;
	json_t *run = reg(f, "r1"), *again = reg(f, "r1"), *d1, *d1b, *d1c;
	char err[256];

	assert_string_equal(s(run, "run_id"), s(again, "run_id"));
	d1 = decide(f, run, "d1", "echo hi");
	d1b = decide(f, run, "d1", "echo hi");
	assert_string_equal(s(d1, "decision_id"), s(d1b, "decision_id"));
	json_decref(d1b);
	d1b = decide(f, run, "d1", "echo other");
	assert_string_equal(err_code(d1b), "conflict");
	json_decref(d1b);
	/* Replies survive a restart (they are in the store, committed with their records). */
	assert_int_equal(service_reload(f->svc, err, sizeof(err)), 0);
	d1c = decide(f, run, "d1", "echo hi");
	assert_string_equal(s(d1, "decision_id"), s(d1c, "decision_id"));
	json_decref(d1);
	json_decref(d1c);
	json_decref(again);
	json_decref(run);
}

static void test_tokens(void **state)
{
	struct fixture *f = *state;
	json_t *run = reg(f, "r1"), *r;
	struct caller other = f->me;

	r = rpc(f,
		"{\"method\":\"decide\",\"request_id\":\"x\",\"run_id\":\"%s\",\"run_token\":\"bogus.token\","
		"\"tool_call_id\":\"c\",\"tool\":\"Bash\",\"args\":{\"command\":\"echo\"}}",
		s(run, "run_id"));
	assert_string_equal(err_code(r), "run_token_invalid");
	json_decref(r);
	r = rpc(f,
		"{\"method\":\"decide\",\"request_id\":\"x\",\"run_id\":\"nope\",\"run_token\":\"%s\","
		"\"tool_call_id\":\"c\",\"tool\":\"Bash\",\"args\":{\"command\":\"echo\"}}",
		s(run, "run_token"));
	assert_string_equal(err_code(r), "unknown_run");
	json_decref(r);
	/* The token is bound to the caller's uid: another uid, authorized too, cannot use it. */
	other.uid = f->me.uid + 1;
	f->cfg.authorize[f->cfg.n_authorize] = other.uid;
	f->cfg.authorize_roles[f->cfg.n_authorize++] = SIGNER_ROLES_ALL;
	{
		char *text = NULL;
		assert_true(
			asprintf(&text,
				 "{\"method\":\"decide\",\"request_id\":\"y\",\"run_id\":\"%s\",\"run_token\":\"%s\","
				 "\"tool_call_id\":\"c\",\"tool\":\"Bash\",\"args\":{\"command\":\"echo\"}}",
				 s(run, "run_id"), s(run, "run_token")) > 0);
		r = rpc_as(f, &other, text);
		free(text);
	}
	assert_string_equal(err_code(r), "run_token_invalid");
	json_decref(r);
	json_decref(run);
}

/*
 * The approver role: a runtime connection (the daemon's, or one that never
 * declared a role) cannot decide or list approvals; an approver connection
 * can, and cannot decide a command. A role must be granted to the uid.
 */
static void test_roles(void **state)
{
	struct fixture *f = *state;
	json_t *run = reg(f, "r1"), *d, *a, *r;
	struct caller runtime = f->me;
	const char *msg;

	d = decide(f, run, "d1", "echo \\\"unterminated");
	assert_string_equal(s(d, "decision"), "ask");
	a = rpc(f,
		"{\"method\":\"approval_request\",\"request_id\":\"a1\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		"\"decision_id\":\"%s\"}",
		s(run, "run_id"), s(run, "run_token"), s(d, "decision_id"));
	assert_null(err_code(a));
	/* The runtime connection asks for its own approval: refused, and the message says how to answer. */
	r = rpc(f,
		"{\"method\":\"approval_decide\",\"request_id\":\"self\",\"approval_id\":\"%s\",\"decision\":"
		"\"approve\"}",
		s(a, "approval_id"));
	assert_string_equal(err_code(r), "forbidden");
	msg = json_string_value(json_object_get(json_object_get(r, "error"), "message"));
	assert_non_null(msg);
	assert_non_null(strstr(msg, "approval_decide needs the approver role"));
	assert_non_null(strstr(msg, "tkbox-signer approvals approve|reject ID"));
	json_decref(r);
	r = rpc(f, "{\"method\":\"approval_list\"}");
	assert_string_equal(err_code(r), "forbidden");
	json_decref(r);
	/* Declaring runtime explicitly changes nothing. */
	r = rpc(f, "{\"method\":\"hello\",\"proto\":1,\"role\":\"runtime\"}");
	assert_string_equal(s(r, "role"), "runtime");
	json_decref(r);
	/* The refused attempt decided nothing: the approval is still pending. */
	r = rpc(f, "{\"method\":\"approval_wait\",\"approval_id\":\"%s\",\"timeout_ms\":0}", s(a, "approval_id"));
	assert_string_equal(s(r, "state"), "pending");
	json_decref(r);
	/* An approver connection may not decide, complete or register. */
	r = rpc_person(f,
		       "{\"method\":\"decide\",\"request_id\":\"pd\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		       "\"tool_call_id\":\"c\",\"tool\":\"Bash\",\"args\":{\"command\":\"echo\"}}",
		       s(run, "run_id"), s(run, "run_token"));
	assert_string_equal(err_code(r), "forbidden");
	json_decref(r);
	/* hello with a role: granted (a bare uid in authorize grants every role), answered with the role. */
	{
		struct rpc_request req = { 0 };
		struct service_reply rep = { 0 };
		const char *text = "{\"method\":\"hello\",\"proto\":1,\"role\":\"approver\"}";
		enum rpc_err e;
		char m[256];

		assert_int_equal(rpc_request_parse(text, strlen(text), &req, &e, m, sizeof(m)), 0);
		service_handle(f->svc, &runtime, &req, -1, &rep);
		assert_null(err_code(rep.body));
		assert_true(rep.set_role);
		assert_int_equal(rep.role, SIGNER_ROLE_APPROVER);
		service_reply_release(&rep);
		/* A first hello without a role fixes the runtime role: it cannot switch to approver later. */
		{
			struct rpc_request plain = { 0 };
			const char *t = "{\"method\":\"hello\",\"proto\":1}";
			assert_int_equal(rpc_request_parse(t, strlen(t), &plain, &e, m, sizeof(m)), 0);
			service_handle(f->svc, &runtime, &plain, -1, &rep);
			assert_null(err_code(rep.body));
			assert_true(rep.set_role);
			assert_int_equal(rep.role, SIGNER_ROLE_RUNTIME);
			service_reply_release(&rep);
			rpc_request_release(&plain);
		}
		runtime.role_declared = true;
		service_handle(f->svc, &runtime, &req, -1, &rep);
		assert_string_equal(err_code(rep.body), "forbidden");
		assert_false(rep.set_role);
		service_reply_release(&rep);
		rpc_request_release(&req);
	}
	r = rpc(f, "{\"method\":\"hello\",\"proto\":1,\"role\":\"boss\"}");
	assert_string_equal(err_code(r), "invalid_request");
	json_decref(r);
	/* The uid holds only the runtime role now: hello as approver and the approver's calls are refused. */
	assert_int_equal(f->cfg.n_authorize, 1);
	f->cfg.authorize_roles[0] = 1u << SIGNER_ROLE_RUNTIME;
	r = rpc(f, "{\"method\":\"hello\",\"proto\":1,\"role\":\"approver\"}");
	assert_string_equal(err_code(r), "forbidden");
	json_decref(r);
	r = rpc_person(f,
		       "{\"method\":\"approval_decide\",\"request_id\":\"p1\",\"approval_id\":\"%s\",\"decision\":"
		       "\"approve\"}",
		       s(a, "approval_id"));
	assert_string_equal(err_code(r), "forbidden");
	json_decref(r);
	/* Granted again, the person's answer goes through. */
	f->cfg.authorize_roles[0] = SIGNER_ROLES_ALL;
	r = rpc_person(f,
		       "{\"method\":\"approval_decide\",\"request_id\":\"p2\",\"approval_id\":\"%s\",\"decision\":"
		       "\"approve\"}",
		       s(a, "approval_id"));
	assert_string_equal(s(r, "state"), "approved");
	json_decref(r);
	json_decref(a);
	json_decref(d);
	json_decref(run);
}

/* authorize grants: a bare uid every role, {"uid","roles"} the listed ones; malformed grants refused. */
static void test_role_grants(void **state)
{
	static const char *const bad[] = {
		"{\"uid\":5}",
		"{\"uid\":5,\"roles\":[]}",
		"{\"uid\":5,\"roles\":[\"boss\"]}",
		"{\"uid\":5,\"roles\":[\"approver\"],\"x\":1}",
		"{\"uid\":-1,\"roles\":[\"runtime\"]}",
		"\"5\"",
	};
	struct signer_config c = { 0 };
	char text[512], err[256];
	enum signer_role role;
	(void)state;

	(void)snprintf(text, sizeof(text),
		       "{\"version\":1,\"mode\":\"system\",\"log_id\":\"00112233445566778899aabbccddeeff\","
		       "\"origin\":\"o/x\",\"tenant\":\"default\",\"authorize\":[7,{\"uid\":8,\"roles\":[\"runtime\"]},"
		       "{\"uid\":9,\"roles\":[\"approver\"]},{\"uid\":8,\"roles\":[\"approver\"]}]}");
	assert_int_equal(signer_config_parse("/d", text, strlen(text), &c, err, sizeof(err)), 0);
	assert_int_equal(signer_config_roles(&c, 7), SIGNER_ROLES_ALL);
	assert_int_equal(signer_config_roles(&c, 8), SIGNER_ROLES_ALL); /* listed twice: the union */
	assert_int_equal(signer_config_roles(&c, 9), 1u << SIGNER_ROLE_APPROVER);
	assert_int_equal(signer_config_roles(&c, 10), 0);
	assert_true(signer_config_authorized(&c, 9));
	assert_false(signer_config_authorized(&c, 10));
	signer_config_release(&c);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		(void)snprintf(text, sizeof(text),
			       "{\"version\":1,\"mode\":\"system\",\"log_id\":\"00112233445566778899aabbccddeeff\","
			       "\"origin\":\"o/x\",\"tenant\":\"default\",\"authorize\":[%s]}",
			       bad[i]);
		err[0] = '\0';
		assert_int_equal(signer_config_parse("/d", text, strlen(text), &c, err, sizeof(err)), -EBADMSG);
		assert_non_null(strstr(err, "authorize"));
	}
	assert_int_equal(signer_role_parse("approver", &role), 0);
	assert_int_equal(role, SIGNER_ROLE_APPROVER);
	assert_int_equal(signer_role_parse("Approver", &role), -EINVAL);
}

static void test_approvals(void **state)
{
	struct fixture *f = *state;
	char dg[RECORD_HASH_STRLEN + 1];
	json_t *run = reg(f, "r1"), *d, *a, *r, *l;
	const char *cmd = "echo \\\"unterminated";

	d = decide(f, run, "d1", cmd);
	assert_string_equal(s(d, "decision"), "ask");
	digest_of("echo \"unterminated", dg);
	r = complete(f, run, "c0", s(d, "decision_id"), dg);
	assert_string_equal(err_code(r), "forbidden");
	json_decref(r);
	a = rpc(f,
		"{\"method\":\"approval_request\",\"request_id\":\"a1\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		"\"decision_id\":\"%s\"}",
		s(run, "run_id"), s(run, "run_token"), s(d, "decision_id"));
	assert_null(err_code(a));
	l = rpc_person(f, "{\"method\":\"approval_list\"}");
	assert_int_equal(json_array_size(json_object_get(l, "approvals")), 1);
	json_decref(l);
	r = rpc(f, "{\"method\":\"approval_wait\",\"approval_id\":\"%s\",\"timeout_ms\":0}", s(a, "approval_id"));
	assert_string_equal(s(r, "state"), "pending");
	json_decref(r);
	r = rpc_person(f,
		       "{\"method\":\"approval_decide\",\"request_id\":\"ad\",\"approval_id\":\"%s\",\"decision\":"
		       "\"approve\"}",
		       s(a, "approval_id"));
	assert_string_equal(s(r, "state"), "approved");
	json_decref(r);
	r = rpc_person(f,
		       "{\"method\":\"approval_decide\",\"request_id\":\"ad2\",\"approval_id\":\"%s\",\"decision\":"
		       "\"reject\"}",
		       s(a, "approval_id"));
	assert_string_equal(err_code(r), "approval_not_pending");
	json_decref(r);
	r = rpc(f, "{\"method\":\"approval_wait\",\"approval_id\":\"%s\",\"timeout_ms\":1000}", s(a, "approval_id"));
	assert_string_equal(s(r, "state"), "approved");
	json_decref(r);
	r = complete(f, run, "c1", s(d, "decision_id"), dg);
	assert_null(err_code(r));
	json_decref(r);
	r = rpc(f, "{\"method\":\"approval_wait\",\"approval_id\":\"anope\",\"timeout_ms\":0}");
	assert_string_equal(err_code(r), "unknown_approval");
	json_decref(r);
	json_decref(a);
	json_decref(d);
	json_decref(run);
}

static void test_unsigned_never_stored(void **state)
{
	struct fixture *f = *state;
	json_t *run = reg(f, "r1");
	struct rpc_request req = { 0 };
	struct service_reply rep = { 0 };
	struct store_item *items;
	char text[512], err[256], msg[256];
	enum rpc_err e;
	size_t n;

	snprintf(text, sizeof(text),
		 "{\"method\":\"close_run\",\"request_id\":\"c\",\"run_id\":\"%s\",\"run_token\":\"%s\"}",
		 s(run, "run_id"), s(run, "run_token"));
	assert_int_equal(rpc_request_parse(text, strlen(text), &req, &e, msg, sizeof(msg)), 0);
	service_handle(f->svc, &f->me, &req, -1, &rep);
	rpc_request_release(&req);
	service_reply_release(&rep);
	service_take_pending(f->svc, &items, &n);
	assert_true(n >= 3);
	/* The store refuses a record that was chained but not signed. */
	assert_true(store_commit(f->store, items, n, err, sizeof(err)) < 0);
	/*
	 * A record whose event changed after it was hashed is never signed: the bytes the line embeds (the event's
	 * JCS kept from chaining) must still hash to the chained hash, and without them the event is serialised
	 * again and checked the same way.
	 */
	assert_non_null(items[0].ev_jcs);
	items[0].ev_jcs[items[0].ev_jcs_len / 2] ^= 1;
	assert_int_equal(service_sign_item(&f->keys, &items[0]), -EBADMSG);
	free(items[0].ev_jcs);
	items[0].ev_jcs = NULL;
	assert_int_equal(json_object_set_new(items[0].event, "ts", json_string("2000-01-01T00:00:00.000000Z")), 0);
	assert_int_equal(service_sign_item(&f->keys, &items[0]), -EBADMSG);
	for (size_t i = 0; i < n; i++) {
		store_item_release(&items[i]);
	}
	free(items);
	assert_int_equal(service_reload(f->svc, err, sizeof(err)), 0);
	json_decref(run);
}

static void test_reload_drops_uncommitted(void **state)
{
	struct fixture *f = *state;
	json_t *run = reg(f, "r1"), *d;
	struct rpc_request req = { 0 };
	struct service_reply rep = { 0 };
	uint64_t durable = service_durable_count(f->svc);
	char text[1024], err[256], msg[256];
	enum rpc_err e;

	/* A decision whose commit "fails": it is never acknowledged and the log forgets it. */
	snprintf(text, sizeof(text),
		 "{\"method\":\"decide\",\"request_id\":\"lost\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		 "\"tool_call_id\":\"c\",\"tool\":\"Bash\",\"args\":{\"command\":\"echo\"}}",
		 s(run, "run_id"), s(run, "run_token"));
	assert_int_equal(rpc_request_parse(text, strlen(text), &req, &e, msg, sizeof(msg)), 0);
	service_handle(f->svc, &f->me, &req, -1, &rep);
	rpc_request_release(&req);
	assert_true(rep.need > durable);
	service_reply_release(&rep);
	{
		struct store_item *items;
		size_t n;
		service_take_pending(f->svc, &items, &n);
		for (size_t i = 0; i < n; i++) {
			store_item_release(&items[i]);
		}
		free(items);
	}
	assert_int_equal(service_reload(f->svc, err, sizeof(err)), 0);
	assert_int_equal(service_assigned_count(f->svc), durable);
	/* The same request id is not replayed (it was never recorded): it is decided anew, at the next seq. */
	d = decide(f, run, "lost", "echo");
	assert_null(err_code(d));
	assert_int_equal(service_durable_count(f->svc), durable + 1);
	json_decref(d);
	json_decref(run);
}

static void test_close_and_export(void **state)
{
	struct fixture *f = *state;
	json_t *run = reg(f, "r1"), *r, *d;

	r = rpc(f,
		"{\"method\":\"observe\",\"request_id\":\"o1\",\"run_id\":\"%s\",\"run_token\":\"%s\",\"kind\":\"tkbox."
		"egress\","
		"\"data\":{\"host\":\"example.org\"}}",
		s(run, "run_id"), s(run, "run_token"));
	assert_null(err_code(r));
	json_decref(r);
	r = rpc(f,
		"{\"method\":\"observe\",\"request_id\":\"o2\",\"run_id\":\"%s\",\"run_token\":\"%s\",\"kind\":\"tkbox."
		"nope\","
		"\"data\":{}}",
		s(run, "run_id"), s(run, "run_token"));
	assert_string_equal(err_code(r), "invalid_request");
	json_decref(r);
	r = rpc(f, "{\"method\":\"close_run\",\"request_id\":\"cl\",\"run_id\":\"%s\",\"run_token\":\"%s\"}",
		s(run, "run_id"), s(run, "run_token"));
	assert_string_equal(s(r, "state"), "closed");
	json_decref(r);
	d = decide(f, run, "d-after", "echo hi");
	assert_string_equal(err_code(d), "run_closed");
	json_decref(d);
	/* A checkpoint follows run.final once durable. */
	r = rpc(f, "{\"method\":\"status\"}");
	assert_int_equal(json_integer_value(json_object_get(r, "checkpoint_size")),
			 json_integer_value(json_object_get(r, "durable")));
	json_decref(r);
	r = rpc(f, "{\"method\":\"export\",\"run_id\":\"%s\",\"inline\":true}", s(run, "run_id"));
	assert_null(err_code(r));
	assert_true(strncmp(s(r, "bundle_b64"), "UEsDB", 5) == 0); /* "PK\3\4" */
	assert_non_null(strstr(s(r, "trust"), "\"logs\""));
	json_decref(r);
	r = rpc(f, "{\"method\":\"export\",\"run_id\":\"%s\"}", s(run, "run_id"));
	assert_string_equal(err_code(r), "invalid_request"); /* neither an fd nor inline */
	json_decref(r);
	json_decref(run);
}

static void test_limits(void **state)
{
	struct fixture *f = *state;
	json_t *run = reg(f, "r1"), *r;
	size_t max = SERVICE_MAX_OBSERVE_DATA;
	char *big = malloc(max + 64), *text = NULL;

	/* {"s":"xxx"} of exactly SERVICE_MAX_OBSERVE_DATA bytes of JCS passes; one byte more is refused. */
	for (int pass = 0; pass < 2; pass++) {
		size_t fill = max - strlen("{\"s\":\"\"}") + (size_t)pass;
		memset(big, 'x', fill);
		big[fill] = '\0';
		assert_true(asprintf(&text,
				     "{\"method\":\"observe\",\"request_id\":\"big%d\",\"run_id\":\"%s\",\"run_token\":"
				     "\"%s\","
				     "\"kind\":\"tkbox.box\",\"data\":{\"s\":\"%s\"}}",
				     pass, s(run, "run_id"), s(run, "run_token"), big) > 0);
		r = rpc_as(f, &f->me, text);
		free(text);
		if (pass == 0) {
			assert_null(err_code(r));
		} else {
			assert_string_equal(err_code(r), "quota_exceeded");
		}
		json_decref(r);
	}
	free(big);
	r = rpc(f, "{\"method\":\"hello\",\"proto\":2}");
	assert_string_equal(err_code(r), "version_mismatch");
	json_decref(r);
	/* approval_wait: SERVICE_MAX_WAIT_MS is accepted (an unknown id then), one more is refused. */
	r = rpc(f, "{\"method\":\"approval_wait\",\"approval_id\":\"anope\",\"timeout_ms\":%d}", SERVICE_MAX_WAIT_MS);
	assert_string_equal(err_code(r), "unknown_approval");
	json_decref(r);
	r = rpc(f, "{\"method\":\"approval_wait\",\"approval_id\":\"anope\",\"timeout_ms\":%d}",
		SERVICE_MAX_WAIT_MS + 1);
	assert_string_equal(err_code(r), "invalid_request");
	json_decref(r);
	json_decref(run);
}

static void test_max_open_runs(void **state)
{
	struct fixture *f = *state;
	char text[256], msg[256];
	enum rpc_err e;

	/* A fresh fixture has no open run: open exactly SERVICE_MAX_RUNS_OPEN, then one more. */
	for (int i = 0; i <= SERVICE_MAX_RUNS_OPEN; i++) {
		struct rpc_request req = { 0 };
		struct service_reply rep = { 0 };
		snprintf(text, sizeof(text),
			 "{\"method\":\"register_run\",\"request_id\":\"r%d\",\"agent\":{\"name\":\"t\"}}", i);
		assert_int_equal(rpc_request_parse(text, strlen(text), &req, &e, msg, sizeof(msg)), 0);
		service_handle(f->svc, &f->me, &req, -1, &rep);
		rpc_request_release(&req);
		if (i < SERVICE_MAX_RUNS_OPEN) {
			assert_null(err_code(rep.body));
		} else {
			assert_string_equal(err_code(rep.body), "quota_exceeded");
		}
		service_reply_release(&rep);
	}
}

/* ---- every flow's bundle against the event schema and the verifier ---- */

struct seen {
	char types[40][32];
	size_t n;
};

static void seen_add(struct seen *sn, const char *type)
{
	for (size_t i = 0; i < sn->n; i++) {
		if (strcmp(sn->types[i], type) == 0) {
			return;
		}
	}
	assert_true(sn->n < 40);
	snprintf(sn->types[sn->n++], sizeof(sn->types[0]), "%s", type);
}

static bool seen_has(const struct seen *sn, const char *type)
{
	for (size_t i = 0; i < sn->n; i++) {
		if (strcmp(sn->types[i], type) == 0) {
			return true;
		}
	}
	return false;
}

/*
 * Export the run inline; every event of its run file and key file must be
 * valid under the event schema (per type) and the bundle must verify with
 * integrity want (a prefix) and, when want_self, "approvals: self". Returns
 * the run's events (a JSON array) for checks of particular fields.
 */
static json_t *check_export(struct fixture *f, const json_t *run, const char *want, bool want_self, struct seen *sn)
{
	json_t *r = rpc(f, "{\"method\":\"export\",\"run_id\":\"%s\",\"inline\":true}", s(run, "run_id"));
	struct verify_report rep = { 0 };
	struct bundle *b = NULL;
	struct buf raw = { 0 };
	const char *why = NULL, *b64 = s(r, "bundle_b64"), *trust = s(r, "trust");
	json_t *events = json_array();
	size_t n_checked = 0;

	assert_null(err_code(r));
	assert_int_equal(buf_init(&raw, SERVICE_MAX_INLINE_EXPORT, 0), 0);
	assert_int_equal(b64_decode(b64, strlen(b64), B64_STD, &raw), 0);
	assert_int_equal(verify_bundle(buf_ptr(&raw), buf_len(&raw), trust, strlen(trust), NULL, &rep), 0);
	if (strncmp(rep.integrity, want, strlen(want)) != 0 || rep.exit_code != 0) {
		struct buf txt = { 0 };
		assert_int_equal(buf_init(&txt, 1 << 20, 0), 0);
		assert_int_equal(verify_report_text(&rep, &txt), 0);
		fprintf(stderr, "%.*s", (int)buf_len(&txt), (const char *)buf_ptr(&txt));
		buf_release(&txt);
		fail_msg("integrity %s, expected %s", rep.integrity, want);
	}
	assert_non_null(rep.assurance);
	assert_true(strncmp(rep.assurance, "dev;", 4) == 0);
	assert_int_equal(strstr(rep.assurance, "; approvals: self") != NULL, want_self);
	verify_report_release(&rep);

	assert_int_equal(bundle_read(buf_ptr(&raw), buf_len(&raw), &b, &why), 0);
	for (size_t i = 0; i < b->n; i++) {
		struct bundle_line *lines = NULL;
		size_t nl = 0;

		if (strncmp(b->e[i].name, "runs/", 5) != 0 && strcmp(b->e[i].name, "keys/records.jsonl") != 0) {
			continue;
		}
		assert_int_equal(bundle_lines(b->e[i].data, b->e[i].size, &lines, &nl, &why), 0);
		for (size_t k = 0; k < nl; k++) {
			struct record rec = { 0 };
			char ewhy[EVENT_SCHEMA_WHY_MAX] = "";

			assert_int_equal(record_parse((const char *)lines[k].p, lines[k].n, &rec), 0);
			if (event_schema_check(rec.event, ewhy, sizeof(ewhy)) < 0 ||
			    event_binding_check(rec.event, ewhy, sizeof(ewhy)) < 0) {
				fail_msg("%s line %zu (%s): %s", b->e[i].name, k, rec.type, ewhy);
			}
			seen_add(sn, rec.type);
			if (strncmp(b->e[i].name, "runs/", 5) == 0) {
				assert_int_equal(json_array_append(events, rec.event), 0);
			}
			n_checked++;
			record_release(&rec);
		}
		free(lines);
	}
	assert_true(n_checked >= 2);
	bundle_free(b);
	buf_release(&raw);
	json_decref(r);
	return events;
}

/* The first event of type in events (borrowed), or NULL. */
static json_t *event_of(json_t *events, const char *type, size_t nth)
{
	size_t i;
	json_t *ev;

	json_array_foreach(events, i, ev) {
		if (strcmp(s(ev, "type"), type) == 0 && nth-- == 0) {
			return ev;
		}
	}
	return NULL;
}

static void close_run_with(struct fixture *f, const json_t *run, const char *rid, const char *reason)
{
	json_t *r;

	if (reason) {
		r = rpc(f,
			"{\"method\":\"close_run\",\"request_id\":\"%s\",\"run_id\":\"%s\",\"run_token\":\"%s\","
			"\"reason\":\"%s\"}",
			rid, s(run, "run_id"), s(run, "run_token"), reason);
	} else {
		r = rpc(f, "{\"method\":\"close_run\",\"request_id\":\"%s\",\"run_id\":\"%s\",\"run_token\":\"%s\"}",
			rid, s(run, "run_id"), s(run, "run_token"));
	}
	assert_string_equal(s(r, "state"), "closed");
	json_decref(r);
}

static json_t *ask_and_request(struct fixture *f, const json_t *run, const char *tag, json_t **ret_d)
{
	char rid[32];
	json_t *d, *a;

	snprintf(rid, sizeof(rid), "%s-d", tag);
	d = decide(f, run, rid, "echo \\\"unterminated");
	assert_string_equal(s(d, "decision"), "ask");
	a = rpc(f,
		"{\"method\":\"approval_request\",\"request_id\":\"%s-a\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		"\"decision_id\":\"%s\"}",
		tag, s(run, "run_id"), s(run, "run_token"), s(d, "decision_id"));
	assert_null(err_code(a));
	*ret_d = d;
	return a;
}

static void test_flow_bundles(void **state)
{
	struct fixture *f = *state;
	char dg[RECORD_HASH_STRLEN + 1];
	struct seen sn = { 0 };
	json_t *run, *d, *a, *r, *events, *ev, *v;

	digest_of("echo \"unterminated", dg);

	/* allow (completed, exit 0), deny; closed with the daemon's default reason. */
	run = reg(f, "flow-allow");
	d = decide(f, run, "fa-d1", "echo hi");
	assert_string_equal(s(d, "decision"), "allow");
	{
		char dh[RECORD_HASH_STRLEN + 1];
		digest_of("echo hi", dh);
		r = complete(f, run, "fa-c1", s(d, "decision_id"), dh);
		assert_null(err_code(r));
		json_decref(r);
	}
	json_decref(d);
	d = decide(f, run, "fa-d2", "pkill tkbox-signer");
	assert_string_equal(s(d, "decision"), "deny");
	json_decref(d);
	close_run_with(f, run, "fa-close", NULL);
	events = check_export(f, run, "VERIFIED", false, &sn);
	ev = event_of(events, "tool.result", 0);
	assert_non_null(ev);
	v = json_object_get(json_object_get(json_object_get(ev, "data"), "output"), "value");
	assert_int_equal(json_integer_value(json_object_get(v, "exit_code")), 0);
	assert_null(json_object_get(v, "signal"));
	json_decref(events);
	json_decref(run);

	/* ask approved, then the command was killed by SIGKILL: a signal, not exit 137. */
	run = reg(f, "flow-approved");
	a = ask_and_request(f, run, "fap", &d);
	r = rpc_person(f,
		       "{\"method\":\"approval_decide\",\"request_id\":\"fap-ad\",\"approval_id\":\"%s\",\"decision\":"
		       "\"approve\",\"reason\":\"looked at it\"}",
		       s(a, "approval_id"));
	assert_string_equal(s(r, "state"), "approved");
	json_decref(r);
	/* Both an exit code and a signal: refused. */
	r = rpc(f,
		"{\"method\":\"complete\",\"request_id\":\"fap-c0\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		"\"decision_id\":\"%s\",\"args_digest\":\"%s\",\"status\":\"error\",\"exit_code\":137,\"signal\":9}",
		s(run, "run_id"), s(run, "run_token"), s(d, "decision_id"), dg);
	assert_string_equal(err_code(r), "invalid_request");
	json_decref(r);
	r = rpc(f,
		"{\"method\":\"complete\",\"request_id\":\"fap-c1\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		"\"decision_id\":\"%s\",\"args_digest\":\"%s\",\"status\":\"error\",\"signal\":9}",
		s(run, "run_id"), s(run, "run_token"), s(d, "decision_id"), dg);
	assert_null(err_code(r));
	json_decref(r);
	close_run_with(f, run, "fap-close", "removed");
	events = check_export(f, run, "VERIFIED", true, &sn);
	ev = event_of(events, "tool.result", 0);
	v = json_object_get(json_object_get(json_object_get(ev, "data"), "output"), "value");
	assert_int_equal(json_integer_value(json_object_get(v, "signal")), 9);
	assert_string_equal(s(v, "signal_name"), "SIGKILL");
	assert_null(json_object_get(v, "exit_code"));
	ev = event_of(events, "approval.request", 0);
	assert_non_null(ev);
	assert_string_equal(s(json_object_get(ev, "data"), "decision_id"), s(d, "decision_id"));
	assert_string_equal(s(json_object_get(json_object_get(ev, "data"), "binding"), "run_id"), s(run, "run_id"));
	ev = event_of(events, "approval", 0);
	assert_true(json_is_true(json_object_get(json_object_get(ev, "data"), "self_approved")));
	assert_string_equal(s(json_object_get(ev, "data"), "approval_id"), s(a, "approval_id"));
	json_decref(events);
	json_decref(a);
	json_decref(d);
	json_decref(run);

	/* ask rejected: nothing may complete. */
	run = reg(f, "flow-rejected");
	a = ask_and_request(f, run, "frj", &d);
	r = rpc_person(f,
		       "{\"method\":\"approval_decide\",\"request_id\":\"frj-ad\",\"approval_id\":\"%s\",\"decision\":"
		       "\"reject\"}",
		       s(a, "approval_id"));
	assert_string_equal(s(r, "state"), "rejected");
	json_decref(r);
	close_run_with(f, run, "frj-close", "failure: the box did not start");
	events = check_export(f, run, "VERIFIED", true, &sn);
	json_decref(events);
	json_decref(a);
	json_decref(d);
	json_decref(run);

	/* ask expired: a 1 s approval time-to-live, then polled until the signer records the timeout. */
	f->cfg.approval_ttl_s = 1;
	run = reg(f, "flow-expired");
	a = ask_and_request(f, run, "fex", &d);
	for (int i = 0; i < 100; i++) {
		r = rpc(f, "{\"method\":\"approval_wait\",\"approval_id\":\"%s\",\"timeout_ms\":0}",
			s(a, "approval_id"));
		if (strcmp(s(r, "state"), "expired") == 0) {
			json_decref(r);
			break;
		}
		json_decref(r);
		(void)usleep(100 * 1000);
	}
	f->cfg.approval_ttl_s = SIGNER_DEFAULT_APPROVAL_TTL_S;
	close_run_with(f, run, "fex-close", "daemon shutdown");
	events = check_export(f, run, "VERIFIED", false, &sn);
	ev = event_of(events, "approval", 0);
	assert_non_null(ev);
	assert_string_equal(s(json_object_get(ev, "data"), "decision"), "timeout");
	json_decref(events);
	json_decref(a);
	json_decref(d);
	json_decref(run);

	/* Observations of every kind, gaps of each daemon kind; closed "exported"; then another with a long reason. */
	run = reg(f, "flow-observe");
	{
		static const char *const kinds[] = { "tkbox.box",	 "tkbox.egress",      "tkbox.approval",
						     "tkbox.secret.use", "tkbox.secret.leak", "tkbox.model.call",
						     "tkbox.patch" };
		static const char *const gaps[] = { "complete", "observe", "supervisor" };

		for (size_t i = 0; i < ARRAY_SIZE(kinds); i++) {
			r = rpc(f,
				"{\"method\":\"observe\",\"request_id\":\"fo-%zu\",\"run_id\":\"%s\",\"run_token\":\"%"
				"s\","
				"\"kind\":\"%s\",\"data\":{\"n\":%zu,\"what\":\"x\"}}",
				i, s(run, "run_id"), s(run, "run_token"), kinds[i], i);
			assert_null(err_code(r));
			json_decref(r);
		}
		for (size_t i = 0; i < ARRAY_SIZE(gaps); i++) {
			r = rpc(f,
				"{\"method\":\"observe\",\"request_id\":\"fg-%zu\",\"run_id\":\"%s\",\"run_token\":\"%"
				"s\","
				"\"kind\":\"tkbox.gap\",\"data\":{\"kind\":\"%s\",\"reason\":\"lost\",\"count\":%zu}}",
				i, s(run, "run_id"), s(run, "run_token"), gaps[i], i + 1);
			assert_null(err_code(r));
			json_decref(r);
		}
		/* A gap with a key outside its closed set is refused, not silently trimmed. */
		r = rpc(f,
			"{\"method\":\"observe\",\"request_id\":\"fg-x\",\"run_id\":\"%s\",\"run_token\":\"%s\","
			"\"kind\":\"tkbox.gap\",\"data\":{\"reason\":\"x\",\"secret\":\"y\"}}",
			s(run, "run_id"), s(run, "run_token"));
		assert_string_equal(err_code(r), "invalid_request");
		json_decref(r);
	}
	close_run_with(f, run, "fo-close", "exported");
	events = check_export(f, run, "VERIFIED", false, &sn);
	ev = event_of(events, "capture.gap", 0);
	assert_string_equal(s(json_object_get(ev, "data"), "kind"), "signer_unavailable");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(ev, "data"), "missed_events")), 1);
	ev = event_of(events, "capture.gap", 2);
	assert_null(json_object_get(json_object_get(ev, "data"), "kind"));
	json_decref(events);
	json_decref(run);

	run = reg(f, "flow-close-failure");
	close_run_with(f, run, "fcf-close", "failure: the box's supervisor exited");
	events = check_export(f, run, "VERIFIED", false, &sn);
	json_decref(events);
	json_decref(run);

	/* An open run: verified to its head. */
	run = reg(f, "flow-open");
	d = decide(f, run, "fop-d", "echo open");
	json_decref(d);
	r = rpc(f, "{\"method\":\"checkpoint_nudge\"}");
	json_decref(r);
	events = check_export(f, run, "VERIFIED TO HEAD", false, &sn);
	json_decref(events);
	json_decref(run);

	/* Every record type the signer writes was among the checked events. */
	for (const char *const *t = (const char *const[]){ "signer.epoch", "run.registered", "policy.decision",
							   "tool.result", "approval.request", "approval", "review",
							   "capture.gap", "run.end", "run.closing", "run.final", NULL };
	     *t; t++) {
		if (!seen_has(&sn, *t)) {
			fail_msg("no %s record in any flow's bundle", *t);
		}
	}
}

/* A connection's completion (the network door): bytes each way in the output, duration_ms in the tool.result. */
static void test_complete_transfer(void **state)
{
	struct fixture *f = *state;
	char dg[RECORD_HASH_STRLEN + 1], *jcs = NULL;
	struct seen sn = { 0 };
	json_t *run = reg(f, "xfer"), *d, *r, *events, *ev, *v;
	json_t *o = json_pack("{s:s,s:{s:s}}", "tool", "WebFetch", "args", "url", "https://example.com:443");
	uint8_t h[32];
	static const char *const bad[] = {
		"\"bytes_up\":9007199254740993,\"bytes_down\":0", /* 2^53 + 1 */
		"\"bytes_up\":-1,\"bytes_down\":0",
		"\"bytes_up\":5", /* without bytes_down */
		"\"bytes_up\":1,\"bytes_down\":\"2\"",
		"\"duration_ms\":-1",
		"\"duration_ms\":9007199254740993",
		"\"duration_ms\":1.5",
	};

	assert_int_equal(json_jcs_string(o, 1 << 20, &jcs), 0);
	assert_int_equal(sha256(jcs, strlen(jcs), h), 0);
	record_hash_format(h, dg);
	free(jcs);
	json_decref(o);
	d = rpc(f,
		"{\"method\":\"decide\",\"request_id\":\"x-d\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		"\"tool_call_id\":\"egress-1\",\"tool\":\"WebFetch\",\"args\":{\"url\":\"https://example.com:443\"}}",
		s(run, "run_id"), s(run, "run_token"));
	assert_null(err_code(d));
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		r = rpc(f,
			"{\"method\":\"complete\",\"request_id\":\"x-bad%zu\",\"run_id\":\"%s\",\"run_token\":\"%s\","
			"\"decision_id\":\"%s\",\"args_digest\":\"%s\",\"status\":\"ok\",%s}",
			i, s(run, "run_id"), s(run, "run_token"), s(d, "decision_id"), dg, bad[i]);
		assert_string_equal(err_code(r), "invalid_request");
		json_decref(r);
	}
	/* The largest integer a strict frame carries (2^53 - 1) is taken. */
	r = rpc(f,
		"{\"method\":\"complete\",\"request_id\":\"x-c\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		"\"decision_id\":\"%s\",\"args_digest\":\"%s\",\"status\":\"ok\",\"bytes_up\":517,"
		"\"bytes_down\":9007199254740991,\"duration_ms\":42}",
		s(run, "run_id"), s(run, "run_token"), s(d, "decision_id"), dg);
	assert_null(err_code(r));
	json_decref(r);
	close_run_with(f, run, "x-close", NULL);
	events = check_export(f, run, "VERIFIED", false, &sn);
	ev = event_of(events, "tool.result", 0);
	assert_non_null(ev);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(ev, "data"), "duration_ms")), 42);
	v = json_object_get(json_object_get(json_object_get(ev, "data"), "output"), "value");
	assert_int_equal(json_integer_value(json_object_get(v, "bytes_up")), 517);
	assert_int_equal(json_integer_value(json_object_get(v, "bytes_down")), INT64_C(9007199254740991));
	assert_null(json_object_get(v, "exit_code"));
	json_decref(events);
	json_decref(d);
	json_decref(run);
}

/* A Write of the patch door: written_paths in the output (the file written, or [] when none was). */
static void test_complete_written(void **state)
{
	struct fixture *f = *state;
	char dg[RECORD_HASH_STRLEN + 1], *jcs = NULL;
	struct seen sn = { 0 };
	json_t *run = reg(f, "write"), *d[2], *r, *events, *ev, *v;
	json_t *o = json_pack("{s:s,s:{s:s}}", "tool", "Write", "args", "file_path", "/c/a.txt");
	uint8_t h[32];
	static const char *const bad[] = {
		"\"written_paths\":\"a.txt\"",	     "\"written_paths\":[\"\"]",    "\"written_paths\":[1]",
		"\"written_paths\":[\"a\\u0000b\"]", "\"written_paths\":[[\"a\"]]", "\"written_paths\":{}",
	};

	assert_int_equal(json_jcs_string(o, 1 << 20, &jcs), 0);
	assert_int_equal(sha256(jcs, strlen(jcs), h), 0);
	record_hash_format(h, dg);
	free(jcs);
	json_decref(o);
	for (int i = 0; i < 2; i++) {
		d[i] = rpc(f,
			   "{\"method\":\"decide\",\"request_id\":\"w-d%d\",\"run_id\":\"%s\",\"run_token\":\"%s\","
			   "\"tool_call_id\":\"apply-%d\",\"tool\":\"Write\",\"args\":{\"file_path\":\"/c/a.txt\"}}",
			   i, s(run, "run_id"), s(run, "run_token"), i);
		assert_null(err_code(d[i]));
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		r = rpc(f,
			"{\"method\":\"complete\",\"request_id\":\"w-bad%zu\",\"run_id\":\"%s\",\"run_token\":\"%s\","
			"\"decision_id\":\"%s\",\"args_digest\":\"%s\",\"status\":\"ok\",%s}",
			i, s(run, "run_id"), s(run, "run_token"), s(d[0], "decision_id"), dg, bad[i]);
		assert_string_equal(err_code(r), "invalid_request");
		json_decref(r);
	}
	r = rpc(f,
		"{\"method\":\"complete\",\"request_id\":\"w-c0\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		"\"decision_id\":\"%s\",\"args_digest\":\"%s\",\"status\":\"ok\",\"written_paths\":[\"a.txt\"]}",
		s(run, "run_id"), s(run, "run_token"), s(d[0], "decision_id"), dg);
	assert_null(err_code(r));
	json_decref(r);
	r = rpc(f,
		"{\"method\":\"complete\",\"request_id\":\"w-c1\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		"\"decision_id\":\"%s\",\"args_digest\":\"%s\",\"status\":\"error\",\"error\":\"not written\","
		"\"written_paths\":[]}",
		s(run, "run_id"), s(run, "run_token"), s(d[1], "decision_id"), dg);
	assert_null(err_code(r));
	json_decref(r);
	close_run_with(f, run, "w-close", NULL);
	events = check_export(f, run, "VERIFIED", false, &sn);
	ev = event_of(events, "tool.result", 0);
	assert_non_null(ev);
	v = json_object_get(json_object_get(json_object_get(ev, "data"), "output"), "value");
	assert_int_equal(json_array_size(json_object_get(v, "written_paths")), 1);
	assert_string_equal(json_string_value(json_array_get(json_object_get(v, "written_paths"), 0)), "a.txt");
	ev = event_of(events, "tool.result", 1);
	assert_non_null(ev);
	v = json_object_get(json_object_get(json_object_get(ev, "data"), "output"), "value");
	assert_true(json_is_array(json_object_get(v, "written_paths")));
	assert_int_equal(json_array_size(json_object_get(v, "written_paths")), 0);
	json_decref(events);
	json_decref(d[0]);
	json_decref(d[1]);
	json_decref(run);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_decide_complete, setup, teardown),
		cmocka_unit_test_setup_teardown(test_idempotent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tokens, setup, teardown),
		cmocka_unit_test_setup_teardown(test_approvals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_roles, setup, teardown),
		cmocka_unit_test(test_role_grants),
		cmocka_unit_test_setup_teardown(test_reload_drops_uncommitted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unsigned_never_stored, setup, teardown),
		cmocka_unit_test_setup_teardown(test_close_and_export, setup, teardown),
		cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_max_open_runs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flow_bundles, setup, teardown),
		cmocka_unit_test_setup_teardown(test_complete_transfer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_complete_written, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
