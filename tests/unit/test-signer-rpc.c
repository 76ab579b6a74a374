/* SPDX-License-Identifier: Apache-2.0 */
/* The signer's RPC framing and request parsing (src/signer/rpc.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "signer/rpc.h"

#include "banned.h"

static void test_framer_lines(void **state)
{
	struct rpc_framer f;
	const uint8_t *p;
	size_t n;

	assert_int_equal(rpc_framer_init(&f), 0);
	assert_int_equal(rpc_framer_next(&f, &p, &n), 0);
	assert_int_equal(rpc_framer_feed(&f, "{\"a\":1}\n{\"b\"", 12), 0);
	assert_int_equal(rpc_framer_next(&f, &p, &n), 1);
	assert_int_equal(n, 7);
	assert_memory_equal(p, "{\"a\":1}", 7);
	rpc_framer_consume(&f, n);
	assert_int_equal(rpc_framer_next(&f, &p, &n), 0);
	assert_int_equal(rpc_framer_feed(&f, ":2}\n\n", 5), 0);
	assert_int_equal(rpc_framer_next(&f, &p, &n), 1);
	assert_memory_equal(p, "{\"b\":2}", 7);
	rpc_framer_consume(&f, n);
	/* An empty line is a (malformed) frame of its own. */
	assert_int_equal(rpc_framer_next(&f, &p, &n), 1);
	assert_int_equal(n, 0);
	rpc_framer_consume(&f, n);
	assert_int_equal(rpc_framer_next(&f, &p, &n), 0);
	rpc_framer_release(&f);
}

static void test_framer_max(void **state)
{
	struct rpc_framer f;
	const uint8_t *p;
	size_t n;
	char *big = malloc(RPC_MAX_FRAME + 2);

	assert_non_null(big);
	memset(big, ' ', RPC_MAX_FRAME + 2);
	/* Exactly RPC_MAX_FRAME bytes then a newline: accepted. */
	assert_int_equal(rpc_framer_init(&f), 0);
	big[RPC_MAX_FRAME] = '\n';
	assert_int_equal(rpc_framer_feed(&f, big, RPC_MAX_FRAME + 1), 0);
	assert_int_equal(rpc_framer_next(&f, &p, &n), 1);
	assert_int_equal(n, RPC_MAX_FRAME);
	rpc_framer_release(&f);
	/* One past: RPC_MAX_FRAME + 1 bytes without a newline is refused. */
	assert_int_equal(rpc_framer_init(&f), 0);
	assert_int_equal(rpc_framer_feed(&f, big, RPC_MAX_FRAME), 0);
	assert_int_equal(rpc_framer_next(&f, &p, &n), 0);
	assert_int_equal(rpc_framer_feed(&f, " ", 1), 0);
	assert_int_equal(rpc_framer_next(&f, &p, &n), -E2BIG);
	rpc_framer_release(&f);
	/* One past with its newline: still refused. */
	assert_int_equal(rpc_framer_init(&f), 0);
	big[RPC_MAX_FRAME] = ' ';
	big[RPC_MAX_FRAME + 1] = '\n';
	assert_true(rpc_framer_feed(&f, big, RPC_MAX_FRAME + 2) < 0);
	rpc_framer_release(&f);
	free(big);
}

static int parse(const char *s, enum rpc_err *e, char *msg)
{
	struct rpc_request req = { 0 };
	int r = rpc_request_parse(s, strlen(s), &req, e, msg, 256);
	if (r == 0) {
		rpc_request_release(&req);
	}
	return r;
}

static void test_parse_ok(void **state)
{
	struct rpc_request req = { 0 };
	const char *s = "{\"method\":\"decide\",\"request_id\":\"r-1:x.y_z\",\"run_id\":\"run\",\"run_token\":\"t\","
			"\"tool_call_id\":\"c\",\"tool\":\"Bash\",\"args\":{\"command\":\"echo hi\"}}";
	enum rpc_err e;
	char msg[256];

	assert_int_equal(rpc_request_parse(s, strlen(s), &req, &e, msg, sizeof(msg)), 0);
	assert_int_equal(req.method, RPC_DECIDE);
	assert_string_equal(req.request_id, "r-1:x.y_z");
	rpc_request_release(&req);
	assert_int_equal(parse("{\"method\":\"status\"}", &e, msg), 0);
	assert_int_equal(parse("{\"method\":\"hello\",\"proto\":1}", &e, msg), 0);
}

static void test_parse_errors(void **state)
{
	enum rpc_err e;
	char msg[256];

	assert_int_equal(parse("", &e, msg), -EBADMSG);
	assert_int_equal(e, RPC_ERR_INVALID_REQUEST);
	assert_int_equal(parse("[1]", &e, msg), -EBADMSG);
	assert_int_equal(parse("{\"method\":\"status\"} x", &e, msg), -EBADMSG);
	assert_int_equal(parse("{\"method\":\"status\",\"method\":\"status\"}", &e, msg), -EBADMSG);
	assert_int_equal(parse("{\"method\":1}", &e, msg), -EBADMSG);
	assert_int_equal(parse("{\"method\":\"nope\"}", &e, msg), -EBADMSG);
	assert_non_null(strstr(msg, "unknown method"));
	assert_int_equal(parse("{\"method\":\"status\",\"extra\":1}", &e, msg), -EBADMSG);
	assert_non_null(strstr(msg, "unknown field extra"));
	assert_int_equal(parse("{\"method\":\"hello\"}", &e, msg), -EBADMSG);
	assert_non_null(strstr(msg, "missing field proto"));
	assert_int_equal(parse("{\"method\":\"register_run\",\"request_id\":\"a b\",\"agent\":{}}", &e, msg), -EBADMSG);
	assert_int_equal(parse("{\"method\":\"hello\",\"proto\":12345678901234567}", &e, msg), -EBADMSG);
	assert_int_equal(parse("{\"method\":\"hello\",\"proto\":1,\"client\":\"\\ud800\"}", &e, msg), -EBADMSG);
}

static void test_request_id_max(void **state)
{
	char id[RPC_MAX_ID_LEN + 2], line[512];
	enum rpc_err e;
	char msg[256];

	memset(id, 'a', sizeof(id));
	id[RPC_MAX_ID_LEN] = '\0';
	assert_true(rpc_id_ok(id));
	snprintf(line, sizeof(line), "{\"method\":\"register_run\",\"request_id\":\"%s\",\"agent\":{\"name\":\"x\"}}",
		 id);
	assert_int_equal(parse(line, &e, msg), 0);
	id[RPC_MAX_ID_LEN] = 'a';
	id[RPC_MAX_ID_LEN + 1] = '\0';
	assert_false(rpc_id_ok(id));
	snprintf(line, sizeof(line), "{\"method\":\"register_run\",\"request_id\":\"%s\",\"agent\":{\"name\":\"x\"}}",
		 id);
	assert_int_equal(parse(line, &e, msg), -EBADMSG);
	assert_false(rpc_id_ok(""));
	assert_false(rpc_id_ok("a/b"));
}

static void nested(char *line, size_t size, int arrays)
{
	size_t n = (size_t)snprintf(line, size,
				    "{\"method\":\"observe\",\"request_id\":\"o\",\"run_id\":\"r\","
				    "\"run_token\":\"t\",\"kind\":\"k\",\"data\":");
	for (int i = 0; i < arrays; i++) {
		line[n++] = '[';
	}
	for (int i = 0; i < arrays; i++) {
		line[n++] = ']';
	}
	line[n++] = '}';
	line[n] = '\0';
}

static void test_depth_max(void **state)
{
	char line[512];
	enum rpc_err e;
	char msg[256];

	/* Depth RPC_MAX_DEPTH (the request object counts as 1) is fine, one more is refused. */
	nested(line, sizeof(line), RPC_MAX_DEPTH - 1);
	assert_int_equal(parse(line, &e, msg), 0);
	nested(line, sizeof(line), RPC_MAX_DEPTH);
	assert_int_equal(parse(line, &e, msg), -EBADMSG);
}

static void test_error_json(void **state)
{
	json_t *e = rpc_error_new(RPC_ERR_RUN_TOKEN_INVALID, "bad");
	assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "code")),
			    "run_token_invalid");
	json_decref(e);
	for (int i = 0; i < RPC_ERR_MAX; i++) {
		assert_string_not_equal(rpc_err_name(i), "");
	}
	for (int i = 0; i < RPC_METHOD_MAX; i++) {
		assert_string_not_equal(rpc_method_name(i), "unknown");
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_framer_lines),   cmocka_unit_test(test_framer_max),
		cmocka_unit_test(test_parse_ok),       cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_request_id_max), cmocka_unit_test(test_depth_max),
		cmocka_unit_test(test_error_json),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
