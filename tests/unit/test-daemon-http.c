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
#include "daemon/http.h"
#include "daemon/supmsg.h"

static int parse(const char *s, struct http_request *req, size_t *head)
{
	return http_request_parse((const uint8_t *)s, strlen(s), req, head);
}

static void test_request_ok(void **state)
{
	struct http_request req;
	size_t head = 0;
	const char *s = "POST /v1/boxes/demo/exec HTTP/1.1\r\nHost: tkbox\r\nContent-Length: 12\r\n"
			"Upgrade:  tkbox-exec/1 \r\nConnection: Upgrade\r\n\r\n{\"argv\":[1]}";
	(void)state;

	assert_int_equal(parse(s, &req, &head), 1);
	assert_int_equal(req.method, HTTP_POST);
	assert_string_equal(req.target, "/v1/boxes/demo/exec");
	assert_int_equal(req.content_length, 12);
	assert_true(req.upgrade_exec);
	assert_int_equal(head, strlen(s) - 12);
	http_request_release(&req);

	assert_int_equal(parse("GET /v1/boxes HTTP/1.0\r\n\r\n", &req, &head), 1);
	assert_int_equal(req.method, HTTP_GET);
	assert_int_equal(req.content_length, 0);
	assert_false(req.upgrade_exec);
	http_request_release(&req);
}

static void test_request_incomplete(void **state)
{
	struct http_request req;
	size_t head;
	(void)state;

	assert_int_equal(parse("", &req, &head), 0);
	assert_int_equal(parse("GET / HTTP/1.1\r\n", &req, &head), 0);
	assert_int_equal(parse("GET / HTTP/1.1\r\nHost: x\r\n\r", &req, &head), 0);
}

static void test_request_refused(void **state)
{
	static const struct {
		const char *s;
		int want;
	} cases[] = {
		{ "GET / HTTP/1.1\nHost: x\r\n\r\n", -EBADMSG }, /* bare LF */
		{ "GET / HTTP/1.1\r\nHost: x\n\r\n\r\n", -EBADMSG }, /* bare LF in a header */
		{ "GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", -EBADMSG }, /* obs-fold */
		{ "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", -EBADMSG },
		{ "GET / HTTP/1.1\r\n: x\r\n\r\n", -EBADMSG },
		{ "GET / HTTP/1.1\r\nNoColon\r\n\r\n", -EBADMSG },
		{ "GET / HTTP/1.1\r\nX: a\x01z\r\n\r\n", -EBADMSG },
		{ "GET x HTTP/1.1\r\n\r\n", -EBADMSG }, /* not origin-form */
		{ "GET /a\x7f HTTP/1.1\r\n\r\n", -EBADMSG },
		{ "GET  / HTTP/1.1\r\n\r\n", -EBADMSG },
		{ "GET / HTTP/2.0\r\n\r\n", -EPROTONOSUPPORT },
		{ "GET / FTP/1.0\r\n\r\n", -EBADMSG },
		{ "PUT / HTTP/1.1\r\n\r\n", -EOPNOTSUPP },
		{ "G(T / HTTP/1.1\r\n\r\n", -EBADMSG },
		{ "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", -EBADMSG },
		{ "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", -EBADMSG },
		{ "POST / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n", -EBADMSG },
		{ "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", -E2BIG },
		{ "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", -ENOTSUP },
		{ "GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", -EBADMSG },
	};
	struct http_request req;
	size_t head;
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		/* The NUL case needs its real length. */
		size_t n = strlen(cases[i].s);
		if (i == sizeof(cases) / sizeof(cases[0]) - 1) {
			n = sizeof("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n") - 1;
		}
		int r = http_request_parse((const uint8_t *)cases[i].s, n, &req, &head);
		if (r != cases[i].want) {
			fail_msg("case %zu: got %d want %d", i, r, cases[i].want);
		}
	}
}

static void test_request_caps(void **state)
{
	struct http_request req;
	size_t head;
	char *s = malloc(HTTP_MAX_HEAD + 64);
	char target[HTTP_MAX_TARGET + 2];
	char line[64];
	(void)state;

	/* Content-Length at the cap, then one past. */
	(void)snprintf(line, sizeof(line), "POST / HTTP/1.1\r\nContent-Length: %zu\r\n\r\n", HTTP_MAX_BODY);
	assert_int_equal(parse(line, &req, &head), 1);
	http_request_release(&req);
	(void)snprintf(line, sizeof(line), "POST / HTTP/1.1\r\nContent-Length: %zu\r\n\r\n", HTTP_MAX_BODY + 1);
	assert_int_equal(parse(line, &req, &head), -E2BIG);

	/* Target at the cap, then one past. */
	target[0] = '/';
	memset(target + 1, 'a', HTTP_MAX_TARGET - 1);
	target[HTTP_MAX_TARGET] = '\0';
	(void)snprintf(s, HTTP_MAX_HEAD, "GET %s HTTP/1.1\r\n\r\n", target);
	assert_int_equal(parse(s, &req, &head), 1);
	http_request_release(&req);
	target[HTTP_MAX_TARGET] = 'a';
	target[HTTP_MAX_TARGET + 1] = '\0';
	(void)snprintf(s, HTTP_MAX_HEAD, "GET %s HTTP/1.1\r\n\r\n", target);
	assert_int_equal(parse(s, &req, &head), -E2BIG);

	/* Header count at the cap, then one past. */
	{
		size_t off = (size_t)snprintf(s, HTTP_MAX_HEAD, "GET / HTTP/1.1\r\n");
		for (int i = 0; i < HTTP_MAX_HEADERS; i++) {
			off += (size_t)snprintf(s + off, HTTP_MAX_HEAD - off, "X%d: y\r\n", i);
		}
		(void)snprintf(s + off, HTTP_MAX_HEAD - off, "\r\n");
		assert_int_equal(parse(s, &req, &head), 1);
		http_request_release(&req);
		off += (size_t)snprintf(s + off, HTTP_MAX_HEAD - off, "Z: y\r\n\r\n");
		assert_int_equal(parse(s, &req, &head), -E2BIG);
	}

	/* A head of exactly HTTP_MAX_HEAD bytes parses; without its end within the cap it is refused. */
	{
		const char *pre = "GET / HTTP/1.1\r\nX: ";
		size_t fill = HTTP_MAX_HEAD - strlen(pre) - 4;
		memcpy(s, pre, strlen(pre));
		memset(s + strlen(pre), 'v', fill);
		memcpy(s + strlen(pre) + fill, "\r\n\r\n", 4);
		assert_int_equal(http_request_parse((const uint8_t *)s, HTTP_MAX_HEAD, &req, &head), 1);
		assert_int_equal(head, HTTP_MAX_HEAD);
		http_request_release(&req);
		memset(s + strlen(pre), 'v', fill + 1);
		memcpy(s + strlen(pre) + fill + 1, "\r\n\r\n", 4);
		assert_int_equal(http_request_parse((const uint8_t *)s, HTTP_MAX_HEAD + 1, &req, &head), -E2BIG);
	}
	free(s);
}

static void test_response(void **state)
{
	struct http_response resp;
	size_t head;
	const char *s = "HTTP/1.1 102 Processing\r\nTkbox-Approval: ap-1\r\n\r\n";
	(void)state;

	assert_int_equal(http_response_parse((const uint8_t *)s, strlen(s), &resp, &head), 1);
	assert_int_equal(resp.status, 102);
	assert_string_equal(resp.approval, "ap-1");
	http_response_release(&resp);
	s = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTkbox-Trust: e30\r\nTkbox-Bundle-Sha256: ab\r\n\r\nhello";
	assert_int_equal(http_response_parse((const uint8_t *)s, strlen(s), &resp, &head), 1);
	assert_int_equal(resp.content_length, 5);
	assert_string_equal(resp.trust, "e30");
	assert_string_equal(resp.bundle_sha256, "ab");
	http_response_release(&resp);
	s = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: tkbox-exec/1\r\n\r\n";
	assert_int_equal(http_response_parse((const uint8_t *)s, strlen(s), &resp, &head), 1);
	assert_true(resp.upgrade_exec);
	http_response_release(&resp);
	s = "HTTP/1.1 20 OK\r\n\r\n";
	assert_int_equal(http_response_parse((const uint8_t *)s, strlen(s), &resp, &head), -EBADMSG);
	s = "HTTP/1.1 200 OK\r\nTkbox-Trust: a\r\nTkbox-Trust: b\r\n\r\n";
	assert_int_equal(http_response_parse((const uint8_t *)s, strlen(s), &resp, &head), -EBADMSG);
	/* tkbox diff's headers (issue 14): kept, once each. */
	s = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nTkbox-Patch-Sha256: cd\r\nTkbox-Patch-Summary: e30\r\n\r\n";
	assert_int_equal(http_response_parse((const uint8_t *)s, strlen(s), &resp, &head), 1);
	assert_string_equal(resp.patch_sha256, "cd");
	assert_string_equal(resp.patch_summary, "e30");
	http_response_release(&resp);
	s = "HTTP/1.1 200 OK\r\nTkbox-Patch-Summary: a\r\nTkbox-Patch-Summary: b\r\n\r\n";
	assert_int_equal(http_response_parse((const uint8_t *)s, strlen(s), &resp, &head), -EBADMSG);
}

static void test_split(void **state)
{
	const char *seg[HTTP_MAX_SEGMENTS];
	char *copy = NULL;
	size_t n = 0;
	(void)state;

	assert_int_equal(http_split_path("/v1/boxes/demo/exec", &copy, seg, &n), 0);
	assert_int_equal(n, 4);
	assert_string_equal(seg[2], "demo");
	free(copy);
	assert_int_equal(http_split_path("/v1/boxes/demo/exec/x", &copy, seg, &n), -E2BIG);
	assert_int_equal(http_split_path("/v1//boxes", &copy, seg, &n), -EINVAL);
	assert_int_equal(http_split_path("/v1/boxes?x=1", &copy, seg, &n), -EINVAL);
	assert_int_equal(http_split_path("/v1/box%2fes", &copy, seg, &n), -EINVAL);
}

static int sparse(const char *s, struct supmsg *m)
{
	return supmsg_parse((const uint8_t *)s, strlen(s), m);
}

static void test_supmsg(void **state)
{
	struct supmsg m;
	char *big;
	(void)state;

	assert_int_equal(
		sparse("{\"op\":\"ready\",\"accel\":\"tcg\",\"isolation\":\"emulated\",\"ready_ms\":1700}", &m), 0);
	assert_int_equal(m.op, SUPMSG_READY);
	assert_string_equal(m.isolation, "emulated");
	supmsg_release(&m);
	/* A supervisor may not claim an isolation it cannot have. */
	assert_int_equal(sparse("{\"op\":\"ready\",\"accel\":\"tcg\",\"isolation\":\"hardware\",\"ready_ms\":1}", &m),
			 -EBADMSG);
	assert_int_equal(sparse("{\"op\":\"done\",\"exec\":3,\"status\":\"ok\",\"exit_code\":0}", &m), 0);
	assert_int_equal(m.exec, 3);
	assert_true(m.has_exit);
	assert_int_equal(m.exit.kind, EXIT_KIND_EXITED);
	assert_int_equal(m.exit.value, 0);
	supmsg_release(&m);
	assert_int_equal(
		sparse("{\"op\":\"done\",\"exec\":3,\"status\":\"error\",\"signal\":9,\"stdin_sha256\":"
		       "\"5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03\",\"stdin_bytes\":6}",
		       &m),
		0);
	assert_int_equal(m.exit.kind, EXIT_KIND_SIGNALED);
	assert_int_equal(m.exit.value, 9);
	assert_int_equal(m.stdin_bytes, 6);
	supmsg_release(&m);
	/* Closed sets: unknown op, unknown key, both exit code and signal, a digest that is not one. */
	assert_int_equal(sparse("{\"op\":\"exec\"}", &m), -EPROTO);
	assert_int_equal(sparse("{\"op\":\"stopped\",\"reason\":\"x\",\"extra\":1}", &m), -EBADMSG);
	assert_int_equal(sparse("{\"op\":\"done\",\"exec\":1,\"status\":\"ok\",\"exit_code\":0,\"signal\":9}", &m),
			 -EBADMSG);
	assert_int_equal(sparse("{\"op\":\"done\",\"exec\":1,\"status\":\"ok\",\"exit_code\":256}", &m), -EBADMSG);
	assert_int_equal(sparse("{\"op\":\"done\",\"exec\":0,\"status\":\"ok\"}", &m), -EBADMSG);
	assert_int_equal(
		sparse("{\"op\":\"done\",\"exec\":1,\"status\":\"ok\",\"stdin_sha256\":\"zz\",\"stdin_bytes\":1}", &m),
		-EBADMSG);
	assert_int_equal(sparse("{\"op\":\"done\",\"exec\":1,\"status\":\"maybe\"}", &m), -EBADMSG);
	assert_int_equal(sparse("{\"op\":\"done\",\"exec\":1,\"status\":\"ok\"} x", &m), -EBADMSG);
	/* Text at SUPMSG_MAX_TEXT, then one past. */
	big = malloc(SUPMSG_MAX_TEXT + 64);
	memcpy(big, "{\"op\":\"failed\",\"message\":\"", 26);
	memset(big + 26, 'm', SUPMSG_MAX_TEXT);
	memcpy(big + 26 + SUPMSG_MAX_TEXT, "\"}", 3);
	assert_int_equal(sparse(big, &m), 0);
	supmsg_release(&m);
	memset(big + 26, 'm', SUPMSG_MAX_TEXT + 1);
	memcpy(big + 26 + SUPMSG_MAX_TEXT + 1, "\"}", 3);
	assert_int_equal(sparse(big, &m), -E2BIG);
	free(big);
	/* The message cap itself. */
	big = calloc(1, SUPMSG_MAX + 2);
	memset(big, ' ', SUPMSG_MAX + 1);
	assert_int_equal(supmsg_parse((const uint8_t *)big, SUPMSG_MAX + 1, &m), -E2BIG);
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_request_ok),	cmocka_unit_test(test_request_incomplete),
		cmocka_unit_test(test_request_refused), cmocka_unit_test(test_request_caps),
		cmocka_unit_test(test_response),	cmocka_unit_test(test_split),
		cmocka_unit_test(test_supmsg),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
