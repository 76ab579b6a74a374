/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "daemon/api-proto.h"
#include "daemon/daemon.h"
#include "daemon/door.h"

/* Append to b (cap bytes) at at; returns the new end. */
static size_t put(char *b, size_t cap, size_t at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static size_t put(char *b, size_t cap, size_t at, const char *fmt, ...)
{
	va_list ap;
	int k;

	va_start(ap, fmt);
	k = vsnprintf(b + at, cap - at, fmt, ap);
	va_end(ap);
	assert_true(k >= 0 && (size_t)k < cap - at);
	return at + (size_t)k;
}

/* ---------------------------------------------------------------- routes */

static void expect_route(enum http_method m, const char *target, enum api_op op, const char *box)
{
	struct api_match got;
	struct api_error e;

	assert_int_equal(api_route(m, target, &got, &e), 0);
	assert_int_equal(got.op, op);
	assert_string_equal(got.box, box);
}

static void expect_id_route(enum http_method m, const char *target, enum api_op op, const char *id)
{
	struct api_match got;
	struct api_error e;

	assert_int_equal(api_route(m, target, &got, &e), 0);
	assert_int_equal(got.op, op);
	assert_string_equal(got.box, "");
	assert_string_equal(got.id, id);
}

static void expect_no_route(enum http_method m, const char *target, int status, const char *msg_part)
{
	struct api_match got;
	struct api_error e = { 0 };

	assert_true(api_route(m, target, &got, &e) < 0);
	assert_int_equal(e.status, status);
	assert_non_null(strstr(e.message, msg_part));
}

static void test_routes(void **state)
{
	(void)state;
	expect_route(HTTP_GET, "/v1/info", API_OP_INFO, "");
	expect_route(HTTP_GET, "/v1/boxes", API_OP_LIST, "");
	expect_route(HTTP_POST, "/v1/boxes", API_OP_CREATE, "");
	expect_route(HTTP_GET, "/v1/boxes/b1", API_OP_SHOW, "b1");
	expect_route(HTTP_DELETE, "/v1/boxes/b1", API_OP_RM, "b1");
	expect_route(HTTP_POST, "/v1/boxes/b-1.x/exec", API_OP_EXEC, "b-1.x");
	expect_route(HTTP_POST, "/v1/boxes/b1/stop", API_OP_STOP, "b1");
	expect_route(HTTP_POST, "/v1/boxes/b1/export", API_OP_EXPORT, "b1");
	expect_route(HTTP_GET, "/v1/boxes/b1/diff", API_OP_DIFF, "b1");
	expect_route(HTTP_POST, "/v1/boxes/b1/apply", API_OP_APPLY, "b1");
	/* Issue 12: box approvals, by their id segment. */
	expect_route(HTTP_GET, "/v1/approvals", API_OP_APPROVALS, "");
	expect_id_route(HTTP_POST, "/v1/approvals/ap-0123456789ab/approve", API_OP_APPROVE, "ap-0123456789ab");
	expect_id_route(HTTP_POST, "/v1/approvals/ap-0123456789ab/reject", API_OP_REJECT, "ap-0123456789ab");
	/* Every route of the table is reachable, and reaches its own operation. */
	for (const struct api_route *r = api_routes; r->pattern; r++) {
		char target[128];
		struct api_match got;
		struct api_error e;
		const char *brace = strstr(r->pattern, "{box}");
		const char *idb = strstr(r->pattern, "{id}");
		if (brace) {
			(void)snprintf(target, sizeof(target), "%.*sbx%s", (int)(brace - r->pattern), r->pattern,
				       brace + 5);
		} else if (idb) {
			(void)snprintf(target, sizeof(target), "%.*sap-1%s", (int)(idb - r->pattern), r->pattern,
				       idb + 4);
		} else {
			(void)snprintf(target, sizeof(target), "%s", r->pattern);
		}
		assert_int_equal(api_route(r->method, target, &got, &e), 0);
		assert_int_equal(got.op, r->op);
	}
}

static void test_routes_refused(void **state)
{
	char longname[80];

	(void)state;
	expect_no_route(HTTP_GET, "/v2/boxes", 404, "speaks /v1");
	expect_no_route(HTTP_GET, "/", 404, "speaks /v1");
	expect_no_route(HTTP_GET, "/v1", 404, "speaks /v1");
	expect_no_route(HTTP_GET, "/v1/nothing", 404, "no such API path");
	expect_no_route(HTTP_GET, "/v1/boxes/", 404, "no such API path");
	expect_no_route(HTTP_GET, "/v1/boxes/b1/", 404, "no such API path");
	expect_no_route(HTTP_GET, "/v1/boxes/b1/exec/more", 404, "no such API path");
	expect_no_route(HTTP_POST, "/v1/boxes/b1/run", 404, "no such API path");
	expect_no_route(HTTP_GET, "/v1/boxes?x=1", 404, "no such API path");
	/* A known path with the wrong method. */
	expect_no_route(HTTP_GET, "/v1/boxes/b1/exec", 404, "no such method");
	expect_no_route(HTTP_DELETE, "/v1/boxes", 404, "no such method");
	expect_no_route(HTTP_POST, "/v1/boxes/b1/diff", 404, "no such method");
	expect_no_route(HTTP_GET, "/v1/boxes/b1/apply", 404, "no such method");
	expect_no_route(HTTP_POST, "/v1/info", 404, "no such method");
	/* The {box} segment must be a box name: 63 bytes are, 64 are not. */
	expect_no_route(HTTP_GET, "/v1/boxes/.hidden", 400, "not a box name");
	expect_no_route(HTTP_POST, "/v1/boxes/a%20b/exec", 400, "not a box name");
	/* Approvals: the {id} segment is [a-z0-9-], 1..31 bytes; the verbs are approve and reject, by POST. */
	expect_no_route(HTTP_GET, "/v1/approvals/ap-0123456789ab/approve", 404, "no such method");
	expect_no_route(HTTP_POST, "/v1/approvals", 404, "no such method");
	expect_no_route(HTTP_POST, "/v1/approvals/ap-0123456789ab", 404, "no such API path");
	expect_no_route(HTTP_POST, "/v1/approvals/ap-0123456789ab/allow", 404, "no such API path");
	expect_no_route(HTTP_POST, "/v1/approvals//approve", 404, "no such API path");
	expect_no_route(HTTP_POST, "/v1/approvals/AP-0123/approve", 400, "not an approval id");
	expect_no_route(HTTP_POST, "/v1/approvals/ap%2F1/approve", 400, "not an approval id");
	expect_no_route(HTTP_POST, "/v1/approvals/ap-0123456789ab.x/reject", 400, "not an approval id");
	expect_id_route(HTTP_POST, "/v1/approvals/ap-0123456789abcdef0123456789ab/approve", API_OP_APPROVE,
			"ap-0123456789abcdef0123456789ab");
	expect_no_route(HTTP_POST, "/v1/approvals/ap-0123456789abcdef0123456789abc/approve", 400, "not an approval id");
	memset(longname, 'a', 63);
	longname[63] = '\0';
	{
		char t[128];
		(void)snprintf(t, sizeof(t), "/v1/boxes/%s", longname);
		expect_route(HTTP_GET, t, API_OP_SHOW, longname);
		(void)snprintf(t, sizeof(t), "/v1/boxes/%sa", longname);
		expect_no_route(HTTP_GET, t, 400, "not a box name");
	}
}

/* ---------------------------------------------------------------- create */

static void expect_create_fails(const char *body, int status, const char *msg_part)
{
	struct api_create_req q = { 0 };
	struct api_error e = { 0 };

	assert_true(api_decode_create(body, strlen(body), &q, &e) < 0);
	assert_int_equal(e.status, status);
	assert_string_equal(e.code, "bad_request");
	if (!strstr(e.message, msg_part)) {
		fail_msg("body %s: message \"%s\" lacks \"%s\"", body, e.message, msg_part);
	}
	assert_null(q.root);
}

static void test_create_defaults(void **state)
{
	static const char body[] = "{\"image\":\"alpine\"}";
	struct api_create_req q = { 0 };
	struct api_error e;

	(void)state;
	assert_int_equal(api_decode_create(body, strlen(body), &q, &e), 0);
	assert_string_equal(q.image, "alpine");
	assert_null(q.name);
	assert_null(q.workspace);
	assert_null(q.platform);
	assert_non_null(q.env);
	assert_null(q.env[0]);
	assert_int_equal(q.cpus, DAEMON_DEFAULT_VCPUS);
	assert_int_equal(q.memory_mib, DAEMON_DEFAULT_MEM_MIB);
	assert_int_equal(q.disk_mib, DAEMON_DEFAULT_DISK_MIB);
	assert_int_equal(q.timeout_s, DAEMON_DEFAULT_LIFETIME_S);
	assert_int_equal(q.exec_timeout_s, DAEMON_DEFAULT_EXEC_TIMEOUT_S);
	api_create_req_release(&q);
}

static void test_create_fields(void **state)
{
	static const char body[] = "{\"image\":\"/x.ext4\",\"name\":\"b1\",\"workspace\":\"/w\",\"env\":[\"A=1\","
				   "\"LD_PRELOAD=/x\"],\"cpus\":64,\"memory_mib\":128,\"disk_mib\":64,\"timeout_s\":1,"
				   "\"exec_timeout_s\":604800,\"platform\":\"linux/arm64\",\"registry_auth\":\"/a\","
				   "\"registry_ca\":\"/c\"}";
	struct api_create_req q = { 0 };
	struct api_error e;

	(void)state;
	assert_int_equal(api_decode_create(body, strlen(body), &q, &e), 0);
	assert_string_equal(q.name, "b1");
	assert_string_equal(q.workspace, "/w");
	/* The box's own env is its owner's: only the syntax is checked (LD_PRELOAD is refused per exec only). */
	assert_string_equal(q.env[1], "LD_PRELOAD=/x");
	assert_int_equal(q.cpus, 64);
	assert_int_equal(q.exec_timeout_s, DAEMON_MAX_LIFETIME_S);
	assert_string_equal(q.platform, "linux/arm64");
	assert_string_equal(q.registry_auth, "/a");
	api_create_req_release(&q);
}

static void test_create_refused(void **state)
{
	char *body;
	size_t n;

	(void)state;
	expect_create_fails("{\"image\":\"a\",\"memroy_mib\":1}", 400, "unknown field \"memroy_mib\"");
	expect_create_fails("[1]", 400, "JSON object");
	expect_create_fails("{\"image\":\"a\",\"image\":\"b\"}", 400, "JSON object");
	expect_create_fails("", 400, "--image is required");
	expect_create_fails("{\"image\":\"\"}", 400, "--image is required");
	expect_create_fails("{\"image\":1}", 400, "--image is required");
	expect_create_fails("{\"image\":\"a\",\"name\":\"-x\"}", 400, "a box name is");
	expect_create_fails("{\"image\":\"a\",\"name\":7}", 400, "a box name is");
	expect_create_fails("{\"image\":\"a\",\"workspace\":[]}", 400, "--workspace");
	expect_create_fails("{\"image\":\"a\",\"platform\":\"linux/s390x\"}", 400, "--platform is");
	expect_create_fails("{\"image\":\"a\",\"registry_ca\":\"rel/ca.pem\"}", 400, "absolute paths");
	expect_create_fails("{\"image\":\"a\",\"env\":[\"NOEQUALS\"]}", 400, "--env takes NAME=VALUE");
	expect_create_fails("{\"image\":\"a\",\"env\":\"A=1\"}", 400, "--env takes NAME=VALUE");
	/* Each limit, one past. */
	expect_create_fails("{\"image\":\"a\",\"cpus\":65}", 400, "--cpus 1..64");
	expect_create_fails("{\"image\":\"a\",\"cpus\":0}", 400, "--cpus 1..64");
	expect_create_fails("{\"image\":\"a\",\"memory_mib\":127}", 400, "out of range");
	expect_create_fails("{\"image\":\"a\",\"memory_mib\":262145}", 400, "out of range");
	expect_create_fails("{\"image\":\"a\",\"disk_mib\":63}", 400, "out of range");
	expect_create_fails("{\"image\":\"a\",\"disk_mib\":1048577}", 400, "out of range");
	expect_create_fails("{\"image\":\"a\",\"timeout_s\":604801}", 400, "out of range");
	expect_create_fails("{\"image\":\"a\",\"exec_timeout_s\":0}", 400, "out of range");
	expect_create_fails("{\"image\":\"a\",\"cpus\":2.0}", 400, "out of range");
	/* DAEMON_MAX_BOX_ENV entries are taken, one more is not. */
	for (int extra = 0; extra <= 1; extra++) {
		struct api_create_req q = { 0 };
		struct api_error e = { 0 };
		size_t cnt = DAEMON_MAX_BOX_ENV + (size_t)extra;
		body = malloc(64 + cnt * 12);
		assert_non_null(body);
		n = put(body, 64 + cnt * 12, 0, "{\"image\":\"a\",\"env\":[");
		for (size_t i = 0; i < cnt; i++) {
			n = put(body, 64 + cnt * 12, n, "%s\"E%zu=1\"", i ? "," : "", i);
		}
		n = put(body, 64 + cnt * 12, n, "]}");
		assert_int_equal(api_decode_create(body, n, &q, &e) < 0, extra == 1);
		api_create_req_release(&q);
		free(body);
	}
	/* A path of DAEMON_MAX_OPT_PATH bytes is taken, one more is not. */
	for (int extra = 0; extra <= 1; extra++) {
		struct api_create_req q = { 0 };
		struct api_error e = { 0 };
		size_t len = DAEMON_MAX_OPT_PATH + (size_t)extra;
		body = malloc(len + 64);
		assert_non_null(body);
		n = put(body, len + 64, 0, "{\"image\":\"a\",\"registry_auth\":\"/");
		memset(body + n, 'p', len - 1);
		n += len - 1;
		n = put(body, len + 64, n, "\"}");
		assert_int_equal(api_decode_create(body, n, &q, &e) < 0, extra == 1);
		api_create_req_release(&q);
		free(body);
	}
}

/* ---------------------------------------------------------------- exec */

static void expect_exec_fails(const char *body, int status, const char *code, const char *msg_part)
{
	struct api_exec_req q = { 0 };
	struct api_error e = { 0 };

	assert_true(api_decode_exec(body, strlen(body), &q, &e) < 0);
	if (e.status != status || strcmp(e.code, code) != 0 || !strstr(e.message, msg_part)) {
		fail_msg("body %.80s: %d %s \"%s\", want %d %s \"%s\"", body, e.status, e.code, e.message, status, code,
			 msg_part);
	}
	assert_null(q.root);
}

static void test_exec_ok(void **state)
{
	static const char body[] = "{\"argv\":[\"sh\",\"-c\",\"cat\"],\"env\":[\"PYTHONUNBUFFERED=1\"],\"cwd\":\"/w\","
				   "\"stdin\":{\"mode\":\"upfront\",\"data\":\"aGk=\"},\"timeout_s\":30}";
	struct api_exec_req q = { 0 };
	struct api_error e;

	(void)state;
	assert_int_equal(api_decode_exec(body, strlen(body), &q, &e), 0);
	assert_string_equal(q.argv[0], "sh");
	assert_string_equal(q.argv[2], "cat");
	assert_null(q.argv[3]);
	assert_string_equal(q.env[0], "PYTHONUNBUFFERED=1");
	assert_string_equal(q.cwd, "/w");
	assert_int_equal(q.stdin_mode, API_STDIN_UPFRONT);
	assert_string_equal(q.stdin_mode_name, "upfront");
	assert_int_equal(buf_len(&q.stdin_data), 2);
	assert_memory_equal(buf_ptr(&q.stdin_data), "hi", 2);
	assert_int_equal(q.timeout_s, 30);
	api_exec_req_release(&q);

	/* The least: argv alone. No cwd (the box's WorkingDir), no stdin, the box's timeout. */
	assert_int_equal(api_decode_exec("{\"argv\":[\"true\"]}", 17, &q, &e), 0);
	assert_null(q.cwd);
	assert_non_null(q.env);
	assert_null(q.env[0]);
	assert_int_equal(q.stdin_mode, API_STDIN_NONE);
	assert_string_equal(q.stdin_mode_name, "none");
	assert_int_equal(q.timeout_s, 0);
	api_exec_req_release(&q);
}

static void test_exec_refused(void **state)
{
	(void)state;
	expect_exec_fails("{\"argv\":[\"true\"],\"stdn\":{}}", 400, "bad_request", "unknown field \"stdn\"");
	expect_exec_fails("{\"argv\":[]}", 400, "bad_request", "argv (at least one word)");
	expect_exec_fails("{}", 400, "bad_request", "argv (at least one word)");
	expect_exec_fails("{\"argv\":[\"a\",1]}", 400, "bad_request", "lists of strings");
	expect_exec_fails("{\"argv\":[\"a\\u0000b\"]}", 400, "bad_request", "JSON object");
	expect_exec_fails("{\"argv\":[\"a\"],\"env\":{}}", 400, "bad_request", "lists of strings");
	expect_exec_fails("{\"argv\":[\"a\"],\"env\":[\"LD_PRELOAD=/x.so\"]}", 403, "env_refused",
			  "--env \"LD_PRELOAD\" refused");
	expect_exec_fails("{\"argv\":[\"a\"],\"env\":[\"=x\"]}", 400, "bad_request", "refused");
	expect_exec_fails("{\"argv\":[\"a\"],\"cwd\":\"rel\"}", 400, "bad_request", "--cwd must be an absolute path");
	expect_exec_fails("{\"argv\":[\"a\"],\"cwd\":null}", 400, "bad_request", "--cwd");
	expect_exec_fails("{\"argv\":[\"a\"],\"stdin\":{\"mode\":\"file\"}}", 400, "bad_request", "stdin.mode is");
	expect_exec_fails("{\"argv\":[\"a\"],\"stdin\":\"upfront\"}", 400, "bad_request", "stdin.mode is");
	expect_exec_fails("{\"argv\":[\"a\"],\"stdin\":{\"mode\":\"none\",\"x\":1}}", 400, "bad_request",
			  "stdin.mode is");
	expect_exec_fails("{\"argv\":[\"a\"],\"stdin\":{\"mode\":\"upfront\"}}", 400, "bad_request", "stdin.data");
	expect_exec_fails("{\"argv\":[\"a\"],\"stdin\":{\"mode\":\"upfront\",\"data\":\"!!\"}}", 400, "bad_request",
			  "stdin.data");
	expect_exec_fails("{\"argv\":[\"a\"],\"timeout_s\":0}", 400, "bad_request", "--timeout");
	expect_exec_fails("{\"argv\":[\"a\"],\"timeout_s\":604801}", 400, "bad_request", "--timeout");
	expect_exec_fails("{\"argv\":[\"a\"],\"timeout_s\":\"1\"}", 400, "bad_request", "--timeout");
}

/* Builds {"argv":["a", "w" * word_len] * ...}: n words of word_len bytes. */
static char *argv_body(size_t n, size_t word_len, size_t *ret_len)
{
	size_t cap = 64 + n * (word_len + 3);
	char *b = malloc(cap);
	size_t k;

	assert_non_null(b);
	k = (size_t)snprintf(b, cap, "{\"argv\":[");
	for (size_t i = 0; i < n; i++) {
		if (i) {
			b[k++] = ',';
		}
		b[k++] = '"';
		memset(b + k, 'w', word_len);
		k += word_len;
		b[k++] = '"';
	}
	k += (size_t)snprintf(b + k, cap - k, "]}");
	*ret_len = k;
	return b;
}

static void test_exec_limits(void **state)
{
	struct api_exec_req q = { 0 };
	struct api_error e = { 0 };
	size_t n;
	char *b;

	(void)state;
	/* DOOR_MAX_ARGS words are taken, one more is not. */
	for (size_t extra = 0; extra <= 1; extra++) {
		b = argv_body(DOOR_MAX_ARGS + extra, 1, &n);
		assert_int_equal(api_decode_exec(b, n, &q, &e) < 0, extra == 1);
		api_exec_req_release(&q);
		free(b);
	}
	/* A word of DOOR_MAX_WORD bytes is taken, one more is not. */
	for (size_t extra = 0; extra <= 1; extra++) {
		b = argv_body(1, DOOR_MAX_WORD + extra, &n);
		assert_int_equal(api_decode_exec(b, n, &q, &e) < 0, extra == 1);
		api_exec_req_release(&q);
		free(b);
	}
	/* A cwd of DOOR_MAX_CWD bytes is taken, one more is not. */
	for (size_t extra = 0; extra <= 1; extra++) {
		size_t len = DOOR_MAX_CWD + extra;
		b = malloc(len + 64);
		assert_non_null(b);
		n = put(b, len + 64, 0, "{\"argv\":[\"a\"],\"cwd\":\"/");
		memset(b + n, 'c', len - 1);
		n += len - 1;
		n = put(b, len + 64, n, "\"}");
		assert_int_equal(api_decode_exec(b, n, &q, &e) < 0, extra == 1);
		api_exec_req_release(&q);
		free(b);
	}
	/* Up-front stdin of DOOR_MAX_STDIN bytes is taken; one more is 413 (more is streamed). */
	for (size_t extra = 0; extra <= 3; extra += 3) {
		size_t raw = DOOR_MAX_STDIN + extra, b64 = (raw + 2) / 3 * 4;
		b = malloc(b64 + 128);
		assert_non_null(b);
		n = put(b, b64 + 128, 0, "{\"argv\":[\"a\"],\"stdin\":{\"mode\":\"upfront\",\"data\":\"");
		/* Zero bytes, in base64 with its padding. */
		memset(b + n, 'A', b64);
		if (raw % 3) {
			memset(b + n + b64 - (3 - raw % 3), '=', 3 - raw % 3);
		}
		n += b64;
		n = put(b, b64 + 128, n, "\"}}");
		if (extra == 0) {
			assert_int_equal(api_decode_exec(b, n, &q, &e), 0);
			assert_int_equal(buf_len(&q.stdin_data), DOOR_MAX_STDIN);
		} else {
			assert_true(api_decode_exec(b, n, &q, &e) < 0);
			assert_int_equal(e.status, 413);
		}
		api_exec_req_release(&q);
		free(b);
	}
}

/* Issue 12: --allow (entries and presets, checked before any box is made) and --inspect. */
static void test_create_allow(void **state)
{
	static const char body[] =
		"{\"image\":\"a\",\"allow\":[\"pypi\",\"debian\",\"example.com:8443\",\"*.example.org\"],"
		"\"inspect\":\"all\"}";
	struct api_create_req q = { 0 };
	struct api_error e;
	char *big;
	size_t k;

	(void)state;
	assert_int_equal(api_decode_create(body, strlen(body), &q, &e), 0);
	assert_string_equal(q.allow[1], "debian");
	assert_null(q.allow[4]);
	assert_true(q.inspect_all);
	api_create_req_release(&q);
	assert_int_equal(api_decode_create("{\"image\":\"a\"}", 13, &q, &e), 0);
	assert_non_null(q.allow);
	assert_null(q.allow[0]);
	assert_false(q.inspect_all);
	api_create_req_release(&q);

	expect_create_fails("{\"image\":\"a\",\"allow\":[\"pypi\",\"nosuch_preset\"]}", 400,
			    "--allow nosuch_preset: not a preset or an allow entry (the forms: host, host:port");
	expect_create_fails("{\"image\":\"a\",\"allow\":[\"*.com\"]}", 400, "--allow *.com: not a preset");
	expect_create_fails("{\"image\":\"a\",\"allow\":\"pypi\"}", 400, "allow is a list");
	expect_create_fails("{\"image\":\"a\",\"inspect\":\"some\"}", 400, "--inspect is all or none");
	/* 513 values: one past EGRESS_MAX_ALLOW */
	big = malloc(64 + 513 * 24);
	assert_non_null(big);
	k = (size_t)snprintf(big, 64, "{\"image\":\"a\",\"allow\":[");
	for (int i = 0; i < 513; i++) {
		k += (size_t)snprintf(big + k, 24, "%s\"h%d.example\"", i ? "," : "", i);
	}
	memcpy(big + k, "]}", 3);
	expect_create_fails(big, 400, "at most 512 strings (EGRESS_MAX_ALLOW)");
	/* 511 entries and a preset of two hosts: one past after expansion */
	k = (size_t)snprintf(big, 64, "{\"image\":\"a\",\"allow\":[\"claude-code\"");
	for (int i = 0; i < 511; i++) {
		k += (size_t)snprintf(big + k, 24, ",\"h%d.example\"", i);
	}
	memcpy(big + k, "]}", 3);
	expect_create_fails(big, 400, "more than 512 entries (EGRESS_MAX_ALLOW");
	free(big);
}

/* ---------------------------------------------------------------- apply */

static void expect_apply(const char *body, const char *checkout, bool allow_sensitive, bool dry_run)
{
	struct api_apply_req q = { 0 };
	struct api_error e = { 0 };

	assert_int_equal(api_decode_apply(body, strlen(body), &q, &e), 0);
	if (checkout) {
		assert_non_null(q.checkout);
		assert_string_equal(q.checkout, checkout);
	} else {
		assert_null(q.checkout);
	}
	assert_int_equal(q.allow_sensitive, allow_sensitive);
	assert_int_equal(q.dry_run, dry_run);
	api_apply_req_release(&q);
	assert_null(q.root);
}

static void expect_apply_fails(const char *body, size_t n, const char *msg_part)
{
	struct api_apply_req q = { 0 };
	struct api_error e = { 0 };

	assert_true(api_decode_apply(body, n, &q, &e) < 0);
	assert_int_equal(e.status, 400);
	assert_string_equal(e.code, "bad_request");
	assert_non_null(strstr(e.message, msg_part));
	assert_null(q.root);
	assert_null(q.checkout);
}

static void test_apply(void **state)
{
	static char longpath[4200];
	char *body;

	(void)state;
	expect_apply("", NULL, false, false);
	expect_apply("{}", NULL, false, false);
	expect_apply("{\"checkout\":\"/home/u/repo\",\"allow_sensitive\":true,\"dry_run\":false}", "/home/u/repo", true,
		     false);
	expect_apply("{\"dry_run\":true}", NULL, false, true);
	expect_apply("{\"checkout\":\"/\"}", "/", false, false);
	/* The closed key set, the types and the path's form. */
	expect_apply_fails("{\"force\":true}", 14, "unknown field \"force\"");
	expect_apply_fails("{\"checkout\":\"repo\"}", 19, "--checkout must be an absolute path");
	expect_apply_fails("{\"checkout\":\"/a/../etc\"}", 24, "--checkout must be an absolute path");
	expect_apply_fails("{\"checkout\":\"/a/./b\"}", 21, "--checkout must be an absolute path");
	expect_apply_fails("{\"checkout\":\"/a\\nb\"}", 20, "--checkout must be an absolute path");
	expect_apply_fails("{\"checkout\":1}", 14, "--checkout must be an absolute path");
	expect_apply_fails("{\"checkout\":null}", 17, "--checkout must be an absolute path");
	expect_apply_fails("{\"checkout\":\"/a\\u0000b\"}", 24, "JSON object");
	expect_apply_fails("{\"dry_run\":1}", 13, "allow_sensitive and dry_run must be true or false");
	expect_apply_fails("{\"allow_sensitive\":\"yes\"}", 25, "allow_sensitive and dry_run");
	expect_apply_fails("[]", 2, "JSON object");
	/* 4096 bytes of path are taken, 4097 are not. */
	longpath[0] = '/';
	memset(longpath + 1, 'a', 4095);
	longpath[4096] = '\0';
	assert_true(asprintf(&body, "{\"checkout\":\"%s\"}", longpath) > 0);
	expect_apply(body, longpath, false, false);
	free(body);
	longpath[4096] = 'a';
	longpath[4097] = '\0';
	assert_true(asprintf(&body, "{\"checkout\":\"%s\"}", longpath) > 0);
	expect_apply_fails(body, strlen(body), "at most 4096 bytes");
	free(body);
}

/* ---------------------------------------------------------------- no fields */

static void test_empty(void **state)
{
	struct api_error e = { 0 };

	(void)state;
	assert_int_equal(api_decode_empty("", 0, &e), 0);
	assert_int_equal(api_decode_empty("{}", 2, &e), 0);
	assert_true(api_decode_empty("{\"force\":true}", 14, &e) < 0);
	assert_int_equal(e.status, 400);
	assert_non_null(strstr(e.message, "unknown field \"force\""));
	assert_true(api_decode_empty("[]", 2, &e) < 0);
	assert_true(api_decode_empty("{", 1, &e) < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_routes),		cmocka_unit_test(test_routes_refused),
		cmocka_unit_test(test_create_defaults), cmocka_unit_test(test_create_fields),
		cmocka_unit_test(test_create_refused),	cmocka_unit_test(test_exec_ok),
		cmocka_unit_test(test_exec_refused),	cmocka_unit_test(test_exec_limits),
		cmocka_unit_test(test_empty),		cmocka_unit_test(test_create_allow),
		cmocka_unit_test(test_apply),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
