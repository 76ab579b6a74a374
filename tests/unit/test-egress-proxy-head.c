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
#include "egress/proxy-head.h"

static const char *reason;

static int parse(const char *s, struct egress_head *h)
{
	reason = NULL;
	return egress_head_parse((const uint8_t *)s, strlen(s), h, &reason);
}

static void test_connect(void **state)
{
	struct egress_head h;
	const char *s =
		"CONNECT Example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nUser-Agent: curl\r\n\r\n\x16\x03\x01";
	(void)state;

	assert_int_equal(parse(s, &h), 1);
	assert_int_equal(h.kind, EGRESS_REQ_CONNECT);
	assert_int_equal(h.method, EGRESS_METHOD_CONNECT);
	assert_string_equal(h.host.name, "example.com");
	assert_int_equal(h.port, 443);
	assert_int_equal(h.head_len, strlen(s) - 3);
	assert_int_equal(parse("CONNECT [2001:db8::1]:22 HTTP/1.1\r\n\r\n", &h), 1);
	assert_int_equal(h.host.kind, EGRESS_HOST_ADDR);
	assert_int_equal(h.port, 22);
	assert_int_equal(parse("CONNECT 0x7f.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n", &h), 1);
	assert_string_equal(h.host.name, "127.0.0.1"); /* classified later as the address it is */
	assert_false(h.http10);
}

/* python3.11's urllib and pip send "CONNECT host:443 HTTP/1.0" with no Host: accepted, as CONNECT only. */
static void test_connect_http10(void **state)
{
	struct egress_head h;
	const char *s = "CONNECT deb.example:443 HTTP/1.0\r\n\r\n";
	(void)state;

	assert_int_equal(parse(s, &h), 1);
	assert_true(h.http10);
	assert_int_equal(h.kind, EGRESS_REQ_CONNECT);
	assert_string_equal(h.host.name, "deb.example");
	assert_int_equal(h.port, 443);
	assert_int_equal(h.head_len, strlen(s));
	assert_int_equal(parse("CONNECT deb.example:443 HTTP/1.0\r\nHost: deb.example:443\r\n\r\n", &h), 1);
	assert_true(h.http10);
	assert_int_equal(parse("CONNECT deb.example:443 HTTP/1.0\r\n", &h), 0);
	assert_int_equal(parse("GET http://deb.example/ HTTP/1.0\r\nHost: deb.example\r\n\r\n", &h), -EPROTONOSUPPORT);
}

static void test_absolute(void **state)
{
	struct egress_head h;
	const char *s = "POST http://deb.example:8080/a/b?c=d HTTP/1.1\r\nHost: DEB.example:8080\r\n"
			"Transfer-Encoding: Chunked\r\n\r\n";
	(void)state;

	assert_int_equal(parse(s, &h), 1);
	assert_int_equal(h.kind, EGRESS_REQ_ABSOLUTE);
	assert_int_equal(h.method, EGRESS_METHOD_POST);
	assert_int_equal(h.port, 8080);
	assert_true(h.chunked);
	assert_int_equal(h.path_len, 8);
	assert_memory_equal(s + h.path_off, "/a/b?c=d", 8);
	assert_int_equal(
		parse("GET http://example.com HTTP/1.1\r\nHost: example.com:80\r\nContent-Length: 0\r\n\r\n", &h), 1);
	assert_int_equal(h.path_len, 0);
	assert_true(h.has_length);
}

static void test_incomplete(void **state)
{
	struct egress_head h;
	(void)state;

	assert_int_equal(parse("", &h), 0);
	assert_int_equal(parse("CONNECT example.com:443 HTTP/1.1\r\n", &h), 0);
	assert_int_equal(parse("CONNECT example.com:443 HTTP/1.1\r\n\r", &h), 0);
}

static void test_refused(void **state)
{
	static const struct {
		const char *s;
		int want;
		const char *why;
	} cases[] = {
		{ "POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\nTransfer-Encoding: "
		  "chunked\r\n\r\n",
		  -EBADMSG, "Content-Length and Transfer-Encoding together" },
		{ "POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\nContent-Length: "
		  "5\r\n\r\n",
		  -EBADMSG, "a second Content-Length header" },
		{ "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nX-A: 1\r\n  folded\r\n\r\n", -EBADMSG,
		  "obs-fold (a header line that starts with a space or tab)" },
		{ "GET http://a.example/ HTTP/1.1\nHost: a.example\r\n\r\n", -EBADMSG,
		  "a bare LF in the request head (lines end in CRLF)" },
		{ "GET http://a.example/ HTTP/1.1\r\nHost: a.example\rX: y\r\n\r\n", -EBADMSG,
		  "a bare CR in the request head (lines end in CRLF)" },
		{ "CONNECT a.example:80 HTTP/1.1\r\n\r\n", -EACCES, NULL },
		{ "GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n", -EACCES,
		  "the Host header names another host or port than the request target" },
		{ "GET http://a.example/ HTTP/1.1\r\nHost: a.example:8080\r\n\r\n", -EACCES, NULL },
		{ "GET http://a.example:8080/ HTTP/1.1\r\nHost: a.example\r\n\r\n", -EACCES, NULL },
		{ "CONNECT a.example:443 HTTP/1.1\r\nHost: 169.254.169.254:443\r\n\r\n", -EACCES, NULL },
		{ "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\n\r\n", -EBADMSG, NULL },
		{ "GET http://a.example/ HTTP/1.1\r\n\r\n", -EBADMSG, "an HTTP/1.1 request without a Host header" },
		{ "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", -EBADMSG, NULL },
		{ "GET https://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", -EBADMSG, NULL },
		{ "GET http://a.example/ HTTP/1.0\r\nHost: a.example\r\n\r\n", -EPROTONOSUPPORT,
		  "an HTTP/1.0 request in absolute form: the proxy takes HTTP/1.0 only for CONNECT; send HTTP/1.1" },
		{ "POST http://a.example/ HTTP/1.0\r\nHost: a.example\r\nContent-Length: 0\r\n\r\n", -EPROTONOSUPPORT,
		  NULL },
		{ "CONNECT a.example:443 HTTP/0.9\r\n\r\n", -EPROTONOSUPPORT, NULL },
		{ "CONNECT a.example:443 HTTP/2\r\n\r\n", -EPROTONOSUPPORT, NULL },
		{ "CONNECT a.example:443 HTTP/2.0\r\n\r\n", -EPROTONOSUPPORT, NULL },
		{ "CONNECT a.example:443 HTTP/1.2\r\n\r\n", -EPROTONOSUPPORT, NULL },
		{ "CONNECT a.example:443 http/1.0\r\n\r\n", -EPROTONOSUPPORT, NULL },
		{ "CONNECT a.example:80 HTTP/1.0\r\n\r\n", -EACCES, NULL },
		{ "CONNECT a.example:443 HTTP/1.0\r\nContent-Length: 3\r\n\r\n", -EBADMSG, NULL },
		{ "CONNECT a.example:443 HTTP/1.0\r\nHost: b.example:443\r\n\r\n", -EACCES, NULL },
		{ "GET http://a.example/ HTTP/2\r\nHost: a.example\r\n\r\n", -EPROTONOSUPPORT, NULL },
		{ "TRACE http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", -EOPNOTSUPP, NULL },
		{ "get http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", -EOPNOTSUPP, NULL },
		{ "POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		  -ENOTSUP, NULL },
		{ "POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n"
		  "Transfer-Encoding: chunked\r\n\r\n",
		  -EBADMSG, NULL },
		{ "POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1a\r\n\r\n", -EBADMSG, NULL },
		{ "POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: +1\r\n\r\n", -EBADMSG, NULL },
		{ "CONNECT a.example:443 HTTP/1.1\r\nContent-Length: 3\r\n\r\n", -EBADMSG, NULL },
		{ "CONNECT a.example:443 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", -EBADMSG, NULL },
		{ "GET http://a.example/ HTTP/1.1\r\nHost : a.example\r\n\r\n", -EBADMSG, NULL },
		{ "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nX: a\x01z\r\n\r\n", -EBADMSG, NULL },
		{ "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nX: a\x7fz\r\n\r\n", -EBADMSG, NULL },
		{ "GET  http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", -EBADMSG, NULL },
		{ "GET http://a.example/\x80 HTTP/1.1\r\nHost: a.example\r\n\r\n", -EBADMSG, NULL },
		{ "GET http://user@a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", -EBADMSG, NULL },
		{ "\r\n\r\n", -EBADMSG, NULL },
		{ "CONNECT a.example HTTP/1.1\r\n\r\n", -EBADMSG, NULL },
		{ "CONNECT a..example:443 HTTP/1.1\r\n\r\n", -EBADMSG, NULL },
	};
	struct egress_head h;
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int r = parse(cases[i].s, &h);

		if (r != cases[i].want) {
			fail_msg("case %zu: %d, want %d (%s)", i, r, cases[i].want, reason ? reason : "-");
		}
		assert_non_null(reason);
		if (cases[i].why) {
			assert_string_equal(reason, cases[i].why);
		}
	}
	memset(&h, 0, sizeof(h));
	assert_int_equal(parse("CONNECT a.example:80 HTTP/1.1\r\n\r\n", &h), -EACCES);
	assert_non_null(strstr(reason, "CONNECT to port 80 is refused"));
	/* A rule of the door names the target it refused. */
	assert_int_equal(h.kind, EGRESS_REQ_CONNECT);
	assert_string_equal(h.host.name, "a.example");
	assert_int_equal(h.port, 80);
	memset(&h, 0, sizeof(h));
	assert_int_equal(parse("GET http://a.example:8080/ HTTP/1.1\r\nHost: b.example\r\n\r\n", &h), -EACCES);
	assert_int_equal(h.kind, EGRESS_REQ_ABSOLUTE);
	assert_string_equal(h.host.name, "a.example");
	assert_int_equal(h.port, 8080);
	char longname[400];
	int k = snprintf(longname, sizeof(longname), "CONNECT ");
	for (int i = 0; i < 127; i++) {
		k += snprintf(longname + k, sizeof(longname) - (size_t)k, "a.");
	}
	(void)snprintf(longname + k, sizeof(longname) - (size_t)k, "ab:443 HTTP/1.1\r\n\r\n"); /* 256 bytes */
	assert_int_equal(parse(longname, &h), -EBADMSG);
	assert_non_null(strstr(reason, "EGRESS_NAME_MAX"));
	assert_int_equal(parse("CONNECT [fe80::1%eth0]:443 HTTP/1.1\r\n\r\n", &h), -EBADMSG);
	assert_non_null(strstr(reason, "zone id"));
	/* a NUL: the head is found, the line with it refused */
	const char nul[] = "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nX: a\0b\r\n\r\n";
	assert_int_equal(egress_head_parse((const uint8_t *)nul, sizeof(nul) - 1, &h, &reason), -EBADMSG);
}

static void test_caps(void **state)
{
	static char big[EGRESS_HEAD_MAX + 64];
	struct egress_head h;
	size_t n;
	(void)state;

	/* 100 header lines pass, 101 do not */
	n = (size_t)snprintf(big, sizeof(big), "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n");
	for (int i = 1; i < EGRESS_HEAD_MAX_HEADERS; i++) {
		n += (size_t)snprintf(big + n, sizeof(big) - n, "X-%d: v\r\n", i);
	}
	memcpy(big + n, "\r\n", 3);
	assert_int_equal(parse(big, &h), 1);
	memcpy(big + n, "Y: z\r\n\r\n", 9);
	assert_int_equal(parse(big, &h), -E2BIG);

	/* a head of exactly EGRESS_HEAD_MAX bytes passes; one byte more does not */
	const char *pre = "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nX: ";
	n = strlen(pre);
	memcpy(big, pre, n);
	memset(big + n, 'a', EGRESS_HEAD_MAX - n - 4);
	memcpy(big + EGRESS_HEAD_MAX - 4, "\r\n\r\n", 5);
	assert_int_equal(parse(big, &h), 1);
	assert_int_equal(h.head_len, EGRESS_HEAD_MAX);
	memset(big + n, 'a', EGRESS_HEAD_MAX - n - 3);
	memcpy(big + EGRESS_HEAD_MAX - 3, "\r\n\r\n", 5);
	assert_int_equal(parse(big, &h), -E2BIG);

	/* a target of EGRESS_TARGET_MAX bytes passes, one more does not */
	const char *t = "http://a.example/";
	static const char tail[] = " HTTP/1.1\r\nHost: a.example\r\n\r\n";
	n = (size_t)snprintf(big, sizeof(big), "GET %s", t);
	memset(big + n, 'p', EGRESS_TARGET_MAX - strlen(t));
	n += EGRESS_TARGET_MAX - strlen(t);
	memcpy(big + n, tail, sizeof(tail));
	assert_int_equal(parse(big, &h), 1);
	n = (size_t)snprintf(big, sizeof(big), "GET %s", t);
	memset(big + n, 'p', EGRESS_TARGET_MAX - strlen(t) + 1);
	n += EGRESS_TARGET_MAX - strlen(t) + 1;
	memcpy(big + n, tail, sizeof(tail));
	assert_int_equal(parse(big, &h), -E2BIG);
}

/* Feed the body after head h: in one piece, and byte by byte; both must agree. Returns r, *used the body's bytes. */
static int body(const struct egress_head *h, const char *s, size_t *used)
{
	struct egress_body b;
	size_t n = strlen(s), u = 0, total = 0;
	int r, r1 = 0;

	reason = NULL;
	egress_body_init(&b, h);
	r = egress_body_feed(&b, (const uint8_t *)s, n, used, &reason);
	egress_body_init(&b, h);
	for (size_t i = 0; i < n && r1 == 0; i++) {
		r1 = egress_body_feed(&b, (const uint8_t *)s + i, 1, &u, NULL);
		total += r1 >= 0 ? u : 0;
	}
	if (n == 0) {
		r1 = egress_body_feed(&b, (const uint8_t *)"", 0, &u, NULL);
	}
	assert_int_equal(r1, r);
	if (r >= 0) {
		assert_int_equal(total, r == 1 ? *used : n);
	} else {
		assert_non_null(reason);
	}
	return r;
}

static void test_body(void **state)
{
	struct egress_head cl, ch, none;
	struct egress_body b;
	size_t used = 0;
	static char big[EGRESS_CHUNK_LINE_MAX + 16];
	static const char chunked[] = "4;name=\"v;x\"\r\nWiki\r\n5 ; a\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n"
				      "000;last\r\nX-Sum: 1\r\nY:\r\n\r\n";
	(void)state;

	assert_int_equal(parse("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 4\r\n\r\n", &cl),
			 1);
	assert_int_equal(
		parse("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n", &ch),
		1);
	assert_int_equal(parse("GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", &none), 1);

	/* Exactly the body; what follows it (a pipelined request) is not the body's. */
	assert_int_equal(body(&cl, "bodyGET http://b.example/ HTTP/1.1\r\n", &used), 1);
	assert_int_equal(used, 4);
	assert_int_equal(body(&cl, "bo", &used), 0);
	assert_int_equal(body(&none, "GET http://b.example/ HTTP/1.1\r\n", &used), 1);
	assert_int_equal(used, 0);
	assert_int_equal(body(&ch, chunked, &used), 1);
	assert_int_equal(used, strlen(chunked));
	{
		char two[512];
		(void)snprintf(two, sizeof(two), "%sGET http://b.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n",
			       chunked);
		assert_int_equal(body(&ch, two, &used), 1);
		assert_int_equal(used, strlen(chunked));
	}
	assert_int_equal(body(&ch, "0\r\n\r\n", &used), 1);
	assert_int_equal(used, 5);
	assert_int_equal(body(&ch, "a\r\n0123456789\r\n0\r\n", &used), 0); /* the empty line is still to come */
	assert_int_equal(body(&ch, "fffffffffffffff\r\nabc", &used), 0); /* 15 digits */

	/* Malformed framing: each refused, and the refusal sticks. */
	static const char *const bad[] = {
		"4\nWiki\r\n0\r\n\r\n", /* bare LF after the size */
		"\r\n", /* no size */
		";x\r\n", /* no size before the extension */
		"x\r\n", /* not hex */
		"-1\r\n", /* a sign */
		"0x4\r\nWiki\r\n", /* a prefix */
		"4 \r\nWiki\r\n", /* whitespace not followed by ; */
		"4;a\x01\r\nWiki\r\n", /* a control byte in an extension */
		"4;a\nWiki\r\n", /* bare LF in an extension */
		"4\r\nWikiX\r\n", /* chunk data longer than its size */
		"4\r\nWiki\n0\r\n\r\n", /* bare LF after the data */
		"4\r\nWiki\r\r\n", /* CR CR */
		"4\r\nWikiX\n0\r\n\r\n", /* a byte past the data, then LF */
		"0\r\nbad line\r\n\r\n", /* a trailer line that is not name: value */
		"0\r\n: v\r\n\r\n", /* an empty trailer name */
		"0\r\nX: a\x7f\r\n\r\n", /* a control byte in a trailer */
		"0\r\nX: a\n\r\n", /* bare LF in a trailer */
		"0\r\n\r\r", /* the end not CRLF */
		"0\r\n\n", /* bare LF at the end */
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		int r = body(&ch, bad[i], &used);
		if (r != -EBADMSG) {
			fail_msg("case %zu: %d", i, r);
		}
	}
	assert_int_equal(body(&ch, "1000000000000000\r\n", &used), -E2BIG); /* 16 digits */
	assert_non_null(strstr(reason, "15 hex digits"));
	memset(big, 'a', sizeof(big) - 1);
	big[0] = '1';
	big[1] = ';';
	assert_int_equal(body(&ch, big, &used), -E2BIG);
	assert_non_null(strstr(reason, "EGRESS_CHUNK_LINE_MAX"));
	egress_body_init(&b, &ch);
	assert_int_equal(egress_body_feed(&b, (const uint8_t *)"z", 1, &used, &reason), -EBADMSG);
	assert_int_equal(egress_body_feed(&b, (const uint8_t *)"0\r\n\r\n", 5, &used, &reason), -EBADMSG);
	assert_int_equal(used, 0);
	/* The trailer section is capped too. */
	{
		static char tr[EGRESS_TRAILER_MAX + 64];
		size_t n = (size_t)snprintf(tr, sizeof(tr), "0\r\n");
		while (n + 12 < sizeof(tr)) {
			n += (size_t)snprintf(tr + n, sizeof(tr) - n, "X: 01234\r\n");
		}
		assert_int_equal(body(&ch, tr, &used), -E2BIG);
		assert_non_null(strstr(reason, "EGRESS_TRAILER_MAX"));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_connect),	 cmocka_unit_test(test_connect_http10),
		cmocka_unit_test(test_absolute), cmocka_unit_test(test_incomplete),
		cmocka_unit_test(test_refused),	 cmocka_unit_test(test_caps),
		cmocka_unit_test(test_body),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
