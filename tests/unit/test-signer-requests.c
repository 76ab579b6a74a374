/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The signer's idempotent replies past the bound kept in memory
 * (SERVICE_MAX_REQUESTS_KEPT, built as 2 here): a retry of a request whose
 * reply was dropped from memory, or never loaded after a restart, gets the
 * first reply from the store, never a second record; another payload under
 * the same id is a conflict. Like test-signer-service, it plays the commit
 * thread itself.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "signer/config.h"
#include "signer/policy.h"
#include "signer/service.h"
#include "signer/store.h"

#include "banned.h"

_Static_assert(SERVICE_MAX_REQUESTS_KEPT == 2, "build this test with -DSERVICE_MAX_REQUESTS_KEPT=2");

struct fixture {
	char dir[64];
	struct signer_config cfg;
	struct signer_keys keys;
	struct policy *policy;
	struct store *store;
	struct service *svc;
	struct caller me;
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

static json_t *rpc(struct fixture *f, const char *fmt, ...) _printf_(2, 3);
static json_t *rpc(struct fixture *f, const char *fmt, ...)
{
	struct rpc_request req = { 0 };
	struct service_reply rep = { 0 };
	enum rpc_err e;
	char msg[256], *text = NULL;
	json_t *body;
	va_list ap;

	va_start(ap, fmt);
	assert_true(vasprintf(&text, fmt, ap) > 0);
	va_end(ap);
	assert_int_equal(rpc_request_parse(text, strlen(text), &req, &e, msg, sizeof(msg)), 0);
	free(text);
	service_handle(f->svc, &f->me, &req, -1, &rep);
	rpc_request_release(&req);
	commit(f);
	body = rep.body;
	rep.body = NULL;
	service_reply_release(&rep);
	assert_non_null(body);
	return body;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char err[512], *path = NULL;

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/tks-unit.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_int_equal(signer_init_dir(f->dir, SIGNER_MODE_DEV, NULL, err, sizeof(err)), 0);
	assert_int_equal(signer_config_load(f->dir, "/tmp/unused.sock", &f->cfg, err, sizeof(err)), 0);
	assert_int_equal(signer_keys_load(f->dir, &f->keys), 0);
	assert_int_equal(
		policy_load(policy_default_yaml(), strlen(policy_default_yaml()), &f->policy, err, sizeof(err)), 0);
	assert_true(asprintf(&path, "%s/store.db", f->dir) > 0);
	assert_int_equal(store_open(path, true, &f->store, err, sizeof(err)), 0);
	free(path);
	assert_int_equal(service_new(&f->cfg, &f->keys, f->policy, f->store, &f->svc, err, sizeof(err)), 0);
	commit(f);
	f->me = (struct caller){ .uid = getuid(), .gid = getgid(), .pid = getpid() };
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

static json_t *observe(struct fixture *f, const json_t *run, const char *rid, const char *state)
{
	return rpc(f,
		   "{\"method\":\"observe\",\"request_id\":\"%s\",\"run_id\":\"%s\",\"run_token\":\"%s\","
		   "\"kind\":\"tkbox.box\",\"data\":{\"state\":\"%s\"}}",
		   rid, json_string_value(json_object_get(run, "run_id")),
		   json_string_value(json_object_get(run, "run_token")), state);
}

static json_int_t run_seq(const json_t *r)
{
	json_t *v = json_object_get(r, "run_seq");
	assert_true(json_is_integer(v));
	return json_integer_value(v);
}

static const char *err_code(const json_t *r)
{
	json_t *e = json_object_get(r, "error");
	return e ? json_string_value(json_object_get(e, "code")) : NULL;
}

static void retry_is_first_answer(struct fixture *f, const json_t *run, json_int_t first_seq, uint64_t records)
{
	json_t *r = observe(f, run, "o0", "s0");

	assert_null(err_code(r));
	assert_int_equal(run_seq(r), first_seq);
	json_decref(r);
	assert_int_equal(service_assigned_count(f->svc), records); /* no new record */
	r = observe(f, run, "o0", "another");
	assert_string_equal(err_code(r), "conflict");
	json_decref(r);
	assert_int_equal(service_assigned_count(f->svc), records);
}

static void test_dropped_replies_come_from_the_store(void **state)
{
	struct fixture *f = *state;
	json_t *run, *first;
	char err[256], rid[16];
	json_int_t first_seq;
	uint64_t records;

	run = rpc(f, "{\"method\":\"register_run\",\"request_id\":\"reg\",\"agent\":{\"name\":\"t\"}}");
	assert_null(err_code(run));
	first = observe(f, run, "o0", "s0");
	first_seq = run_seq(first);
	json_decref(first);
	/* Enough newer requests that o0's reply is dropped from memory (kept: the newest 2 .. 4). */
	for (int i = 1; i < 8; i++) {
		snprintf(rid, sizeof(rid), "o%d", i);
		json_decref(observe(f, run, rid, "s"));
	}
	records = service_assigned_count(f->svc);
	retry_is_first_answer(f, run, first_seq, records);
	/* After a restart only the newest 2 are loaded: o0 is in the store only. */
	assert_int_equal(service_reload(f->svc, err, sizeof(err)), 0);
	retry_is_first_answer(f, run, first_seq, records);
	json_decref(run);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_dropped_replies_come_from_the_store, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
