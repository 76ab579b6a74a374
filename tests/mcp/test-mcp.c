/* SPDX-License-Identifier: Apache-2.0 */
/* src/cli/mcp.c: JSON-RPC 2.0 validation, the MCP lifecycle, version negotiation, tools, the schema subset. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cli/execclient.h"
#include "cli/mcp.h"
#include "json.h"

static const struct mcp_tool test_tools[] = {
	{ "echo", "Echo", "returns its text",
	  "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"text\"],\"properties\":{"
	  "\"text\":{\"type\":\"string\",\"maxLength\":8},\"n\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":3},"
	  "\"list\":{\"type\":\"array\",\"maxItems\":2,\"items\":{\"type\":\"string\"}},"
	  "\"env\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}}}" },
};

static int calls;

static int echo_call(void *ctx, const struct mcp_tool *tool, json_t *args, json_t **ret)
{
	(void)ctx;
	(void)tool;
	calls++;
	*ret = mcp_tool_result(json_string_value(json_object_get(args, "text")), false, NULL);
	return *ret ? 0 : -ENOMEM;
}

static void server(struct mcp_server *s, size_t max)
{
	*s = (struct mcp_server){ .call = echo_call, .server_name = "t", .server_version = "1" };
	assert_int_equal(mcp_server_init(s, test_tools, 1, max), 0);
	calls = 0;
}

/* Handle a line; return the reply (or NULL). */
static json_t *send_line(struct mcp_server *s, const char *line)
{
	json_t *reply = (json_t *)1;

	assert_int_equal(mcp_handle(s, line, strlen(line), &reply), 0);
	return reply;
}

static int error_code(const json_t *reply)
{
	return (int)json_integer_value(json_object_get(json_object_get(reply, "error"), "code"));
}

static void expect_error(struct mcp_server *s, const char *line, int code)
{
	json_t *r = send_line(s, line);
	assert_non_null(r);
	assert_int_equal(error_code(r), code);
	json_decref(r);
}

#define INIT_V(v)                                                                                                      \
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"" v                 \
	"\",\"capabilities\":{},\"clientInfo\":{\"name\":\"c\",\"version\":\"1\"}}}"

static void initialized(struct mcp_server *s)
{
	json_t *r = send_line(s, INIT_V(MCP_PROTOCOL_LATEST));
	assert_non_null(json_object_get(r, "result"));
	json_decref(r);
	assert_null(send_line(s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}"));
	assert_int_equal(s->state, MCP_STATE_READY);
}

static void test_negotiation(void **state)
{
	struct mcp_server s;
	json_t *r;

	(void)state;
	for (size_t i = 0; mcp_versions[i]; i++) {
		char line[512];
		server(&s, 4096);
		(void)snprintf(
			line, sizeof(line),
			"{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
			"\"%s\",\"capabilities\":{},\"clientInfo\":{\"name\":\"c\",\"version\":\"1\"}}}",
			mcp_versions[i]);
		r = send_line(&s, line);
		assert_string_equal(json_string_value(json_object_get(json_object_get(r, "result"), "protocolVersion")),
				    mcp_versions[i]);
		assert_string_equal(json_string_value(json_object_get(r, "id")), "x");
		json_decref(r);
		mcp_server_release(&s);
	}
	/* an unknown revision: we answer with ours */
	server(&s, 4096);
	r = send_line(&s, INIT_V("1999-01-01"));
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "result"), "protocolVersion")),
			    MCP_PROTOCOL_LATEST);
	json_decref(r);
	/* a second initialize */
	expect_error(&s, INIT_V(MCP_PROTOCOL_LATEST), MCP_INVALID_REQUEST);
	mcp_server_release(&s);
	/* initialize without its params */
	server(&s, 4096);
	expect_error(&s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{}}", MCP_INVALID_PARAMS);
	assert_int_equal(s.state, MCP_STATE_NEW);
	mcp_server_release(&s);
}

static void test_lifecycle(void **state)
{
	struct mcp_server s;
	json_t *r;

	(void)state;
	server(&s, 4096);
	/* before initialize: only ping */
	expect_error(&s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}", MCP_INVALID_REQUEST);
	r = send_line(&s, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}");
	assert_true(json_is_object(json_object_get(r, "result")));
	json_decref(r);
	initialized(&s);
	r = send_line(&s, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\"}");
	assert_int_equal(json_array_size(json_object_get(json_object_get(r, "result"), "tools")), 1);
	assert_string_equal(
		json_string_value(json_object_get(
			json_object_get(json_array_get(json_object_get(json_object_get(r, "result"), "tools"), 0),
					"inputSchema"),
			"type")),
		"object");
	json_decref(r);
	expect_error(&s, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"resources/list\"}", MCP_METHOD_NOT_FOUND);
	expect_error(&s, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\",\"params\":{\"cursor\":\"x\"}}",
		     MCP_INVALID_PARAMS);
	/* notifications and a client's responses get no answer */
	assert_null(send_line(&s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{}}"));
	assert_null(send_line(&s, "{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{}}"));
	assert_null(send_line(&s, "{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":[1]}"));
	mcp_server_release(&s);
}

static void test_jsonrpc(void **state)
{
	struct mcp_server s;
	json_t *r;

	(void)state;
	server(&s, 4096);
	initialized(&s);
	expect_error(&s, "{", MCP_PARSE_ERROR);
	expect_error(&s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"ping\"}", MCP_PARSE_ERROR);
	expect_error(&s, "\"\xff\"", MCP_PARSE_ERROR);
	expect_error(&s, "{} x", MCP_PARSE_ERROR);
	expect_error(&s, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", MCP_INVALID_REQUEST);
	expect_error(&s, "42", MCP_INVALID_REQUEST);
	expect_error(&s, "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", MCP_INVALID_REQUEST);
	expect_error(&s, "{\"id\":1,\"method\":\"ping\"}", MCP_INVALID_REQUEST);
	expect_error(&s, "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", MCP_INVALID_REQUEST);
	expect_error(&s, "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", MCP_INVALID_REQUEST);
	expect_error(&s, "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}", MCP_INVALID_REQUEST);
	expect_error(&s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}", MCP_INVALID_REQUEST);
	expect_error(&s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"extra\":1}", MCP_INVALID_REQUEST);
	expect_error(&s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":[]}", MCP_INVALID_PARAMS);
	/* the id of an invalid request is echoed when it is a valid id, else null */
	r = send_line(&s, "{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"ping\",\"params\":3}");
	assert_string_equal(json_string_value(json_object_get(r, "id")), "abc");
	json_decref(r);
	r = send_line(&s, "{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"ping\"}");
	assert_true(json_is_null(json_object_get(r, "id")));
	json_decref(r);
	mcp_server_release(&s);
}

static void test_size_limit(void **state)
{
	struct mcp_server s;
	char line[400];
	json_t *r;
	int n;

	(void)state;
	server(&s, 256);
	initialized(&s);
	/* exactly the limit passes, one past it is refused naming the config key */
	n = snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"a\":\"");
	while (n < 256 - 3) {
		line[n++] = 'x';
	}
	memcpy(line + n, "\"}}", 4);
	assert_int_equal(strlen(line), 256);
	r = send_line(&s, line);
	assert_non_null(json_object_get(r, "result"));
	json_decref(r);
	memmove(line + 60, line + 59, strlen(line + 59) + 1);
	assert_int_equal(strlen(line), 257);
	r = send_line(&s, line);
	assert_int_equal(error_code(r), MCP_INVALID_REQUEST);
	assert_non_null(strstr(json_string_value(json_object_get(json_object_get(r, "error"), "message")),
			       "mcp.max_message_bytes"));
	json_decref(r);
	mcp_server_release(&s);
}

static void test_tools_call(void **state)
{
	struct mcp_server s;
	json_t *r, *res;

	(void)state;
	server(&s, 4096);
	initialized(&s);
	r = send_line(&s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
			  "\"arguments\":{\"text\":\"hi\",\"n\":2,\"list\":[\"a\"],\"env\":{\"K\":\"V\"}}}}");
	res = json_object_get(r, "result");
	assert_false(json_is_true(json_object_get(res, "isError")));
	assert_string_equal(
		json_string_value(json_object_get(json_array_get(json_object_get(res, "content"), 0), "text")), "hi");
	json_decref(r);
	assert_int_equal(calls, 1);
	/* an unknown tool is a protocol error; bad arguments are a tool error, and the tool is not called */
	expect_error(&s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"nope\"}}",
		     MCP_INVALID_PARAMS);
	expect_error(&s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{}}", MCP_INVALID_PARAMS);
	static const char *const bad[] = {
		"{}",
		"{\"text\":5}",
		"{\"text\":\"123456789\"}",
		"{\"text\":\"a\",\"n\":0}",
		"{\"text\":\"a\",\"n\":4}",
		"{\"text\":\"a\",\"n\":\"1\"}",
		"{\"text\":\"a\",\"list\":[\"a\",\"b\",\"c\"]}",
		"{\"text\":\"a\",\"list\":[1]}",
		"{\"text\":\"a\",\"env\":{\"K\":1}}",
		"{\"text\":\"a\",\"other\":true}",
		"[]",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char line[512];
		(void)snprintf(line, sizeof(line),
			       "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
			       "\"arguments\":%s}}",
			       bad[i]);
		r = send_line(&s, line);
		res = json_object_get(r, "result");
		assert_true(json_is_true(json_object_get(res, "isError")));
		assert_non_null(strstr(
			json_string_value(json_object_get(json_array_get(json_object_get(res, "content"), 0), "text")),
			"invalid arguments"));
		json_decref(r);
	}
	assert_int_equal(calls, 1);
	mcp_server_release(&s);
}

/* tkbox exec --json and tkbox_exec: text when UTF-8 without NUL, else base64; totals and the truncation flag. */
static void test_exec_output_json(void **state)
{
	static const struct {
		const char *bytes;
		size_t n;
		uint64_t total;
		const char *text, *b64;
	} cases[] = {
		{ "out\n", 4, 4, "out\n", NULL },
		{ "", 0, 0, "", NULL },
		{ "a\0b", 3, 3, NULL, "YQBi" },
		{ "\xff\xfe", 2, 2, NULL, "//4=" },
		{ "\xed\xa0\x80", 3, 3, NULL, "7aCA" }, /* an encoded surrogate is not UTF-8 */
		{ "caf\xc3\xa9", 5, 9, "caf\xc3\xa9", NULL },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *o = json_object();
		struct buf b;
		assert_int_equal(buf_init(&b, 64, 0), 0);
		assert_int_equal(buf_put(&b, cases[i].bytes, cases[i].n), 0);
		assert_int_equal(execclient_output_json(o, "stdout", &b, cases[i].total), 0);
		if (cases[i].text) {
			assert_string_equal(json_string_value(json_object_get(o, "stdout")), cases[i].text);
			assert_null(json_object_get(o, "stdout_base64"));
		} else {
			assert_string_equal(json_string_value(json_object_get(o, "stdout_base64")), cases[i].b64);
			assert_null(json_object_get(o, "stdout"));
		}
		assert_int_equal(json_integer_value(json_object_get(o, "stdout_bytes")), (json_int_t)cases[i].total);
		assert_int_equal(json_is_true(json_object_get(o, "stdout_truncated")), cases[i].total > cases[i].n);
		buf_release(&b);
		json_decref(o);
	}
	{
		json_t *o = json_object();
		struct exit_status ex = { .kind = EXIT_KIND_SIGNALED, .value = 9 };
		assert_int_equal(execclient_exit_json(o, &ex), 0);
		assert_int_equal(json_integer_value(json_object_get(o, "signal")), 9);
		assert_string_equal(json_string_value(json_object_get(o, "signal_name")), "KILL");
		assert_null(json_object_get(o, "exit_code"));
		json_decref(o);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_negotiation), cmocka_unit_test(test_lifecycle),
		cmocka_unit_test(test_jsonrpc),	    cmocka_unit_test(test_size_limit),
		cmocka_unit_test(test_tools_call),  cmocka_unit_test(test_exec_output_json),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
