/* SPDX-License-Identifier: Apache-2.0 */
/* The signer's RPC framing and request parsing (src/signer/rpc.c), its typed messages (src/signer/rpcmsg.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "signer/rpc.h"
#include "crypto.h"
#include "signer/rpcmsg.h"

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

/* Decode text as the signer does (parse, then the typed decoder of its method): 0 or -EBADMSG, msg filled. */
static int decode(const char *text, char *msg, size_t msg_size, json_t **ret_reencoded)
{
	struct rpc_request req = { 0 };
	enum rpc_err e;
	int r;

	if (rpc_request_parse(text, strlen(text), &req, &e, msg, msg_size) < 0) {
		return -EINVAL;
	}
	if (req.method == RPC_DECIDE) {
		struct rpc_decide m;
		r = rpc_decide_decode(req.obj, &m, msg, msg_size);
		*ret_reencoded = r == 0 ? rpc_decide_encode(&m) : NULL;
	} else if (req.method == RPC_COMPLETE) {
		struct rpc_complete m;
		r = rpc_complete_decode(req.obj, &m, msg, msg_size);
		*ret_reencoded = r == 0 ? rpc_complete_encode(&m) : NULL;
	} else {
		struct rpc_observe m;
		assert_int_equal(req.method, RPC_OBSERVE);
		r = rpc_observe_decode(req.obj, &m, msg, msg_size);
		*ret_reencoded = r == 0 ? rpc_observe_encode(&m) : NULL;
	}
	if (r == 0) {
		/* The key sets are closed: what was decoded encodes back to the same object. */
		assert_true(json_equal(req.obj, *ret_reencoded));
	}
	rpc_request_release(&req);
	return r;
}

#define RUN "\"request_id\":\"r\",\"run_id\":\"run-1\",\"run_token\":\"t\""
#define COMPLETE                                                                                                       \
	"{\"method\":\"complete\"," RUN ",\"decision_id\":\"d1\",\"args_digest\":\"sha256:0\",\"status\":\"ok\""

/* Each field of the typed messages one past its limit, and the limit itself. */
static void test_typed_limits(void **state)
{
	char line[8192], msg[256], big[4200];
	json_t *o = NULL;

	assert_int_equal(decode(COMPLETE ",\"exit_code\":255}", msg, sizeof(msg), &o), 0);
	json_decref(o);
	assert_int_equal(decode(COMPLETE ",\"exit_code\":256}", msg, sizeof(msg), &o), -EBADMSG);
	assert_string_equal(msg, "exit_code must be an integer 0..255");
	assert_int_equal(decode(COMPLETE ",\"signal\":64}", msg, sizeof(msg), &o), 0);
	json_decref(o);
	assert_int_equal(decode(COMPLETE ",\"signal\":65}", msg, sizeof(msg), &o), -EBADMSG);
	assert_string_equal(msg, "signal must be an integer 1..64");
	assert_int_equal(decode(COMPLETE ",\"signal\":9,\"exit_code\":0}", msg, sizeof(msg), &o), -EBADMSG);
	assert_int_equal(decode(COMPLETE ",\"stdin_bytes\":9007199254740991,\"stdin_sha256\":\""
					 "0000000000000000000000000000000000000000000000000000000000000000\"}",
				msg, sizeof(msg), &o),
			 0);
	json_decref(o);
	assert_int_equal(decode(COMPLETE ",\"stdin_bytes\":1}", msg, sizeof(msg), &o), -EBADMSG);
	memset(big, 'e', RPC_MAX_ERROR_LEN);
	big[RPC_MAX_ERROR_LEN] = '\0';
	snprintf(line, sizeof(line), COMPLETE ",\"error\":\"%s\"}", big);
	assert_int_equal(decode(line, msg, sizeof(msg), &o), 0);
	json_decref(o);
	big[RPC_MAX_ERROR_LEN] = 'e';
	big[RPC_MAX_ERROR_LEN + 1] = '\0';
	snprintf(line, sizeof(line), COMPLETE ",\"error\":\"%s\"}", big);
	assert_int_equal(decode(line, msg, sizeof(msg), &o), -EBADMSG);
	assert_string_equal(msg, "error must be a string of at most 4096 bytes");
	memset(big, 'T', RPC_MAX_TOOL_LEN);
	big[RPC_MAX_TOOL_LEN] = '\0';
	snprintf(line, sizeof(line),
		 "{\"method\":\"decide\"," RUN ",\"tool_call_id\":\"c\",\"tool\":\"%s\",\"args\":{},\"attempt\":0}",
		 big);
	assert_int_equal(decode(line, msg, sizeof(msg), &o), 0);
	json_decref(o);
	big[RPC_MAX_TOOL_LEN] = 'T';
	big[RPC_MAX_TOOL_LEN + 1] = '\0';
	snprintf(line, sizeof(line),
		 "{\"method\":\"decide\"," RUN ",\"tool_call_id\":\"c\",\"tool\":\"%s\",\"args\":{}}", big);
	assert_int_equal(decode(line, msg, sizeof(msg), &o), -EBADMSG);
	assert_int_equal(decode("{\"method\":\"decide\"," RUN ",\"tool_call_id\":\"c\",\"tool\":\"B\",\"args\":{},"
				"\"attempt\":-1}",
				msg, sizeof(msg), &o),
			 -EBADMSG);
	assert_int_equal(
		decode("{\"method\":\"observe\"," RUN ",\"kind\":\"tkbox.gap\",\"data\":{}}", msg, sizeof(msg), &o), 0);
	json_decref(o);
	assert_int_equal(
		decode("{\"method\":\"observe\"," RUN ",\"kind\":\"tkbox.other\",\"data\":{}}", msg, sizeof(msg), &o),
		-EBADMSG);
	assert_string_equal(msg, "unknown observation kind tkbox.other");
}

/* The one args_digest: sha256 of the JCS of {"tool","args"} (keys sorted, no spaces). */
static void test_args_digest(void **state)
{
	char d[RPC_DIGEST_STRLEN + 1], want[SHA256_HEX_LEN + 1];
	const char jcs[] = "{\"args\":{\"a\":1,\"b\":[\"x\"]},\"tool\":\"Bash\"}";
	json_t *args = json_pack("{s:[s],s:i}", "b", "x", "a", 1);

	assert_int_equal(rpc_args_digest("Bash", args, d), 0);
	assert_int_equal(sha256_hex(jcs, strlen(jcs), want), 0);
	assert_int_equal(strlen(d), RPC_DIGEST_STRLEN);
	assert_memory_equal(d, "sha256:", 7);
	assert_string_equal(d + 7, want);
	json_decref(args);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_framer_lines),   cmocka_unit_test(test_framer_max),
		cmocka_unit_test(test_parse_ok),       cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_request_id_max), cmocka_unit_test(test_depth_max),
		cmocka_unit_test(test_error_json),     cmocka_unit_test(test_typed_limits),
		cmocka_unit_test(test_args_digest),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
