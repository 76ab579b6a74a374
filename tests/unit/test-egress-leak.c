/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "banned.h"
#include "crypto.h"
#include "egress/leak.h"
#include "secmem.h"

/*
 * The leak scanner and the redactor (src/egress/leak.c). The encodings here
 * are built independently of leak.c: hex and base64 by crypto.c, escapes by
 * the helpers below, so a form leak.c forgets fails here.
 */

#define BODY_MAX (1u << 16)
#define PH_GH "tkbox_GH_0123456789abcdef0123456789abcdef"
#define PH_NPM "tkbox_NPM_fedcba9876543210fedcba9876543210"

static uint64_t rng_state;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void secret_make(struct egress_secret *s, const char *name, const void *value, size_t n, const char *ph)
{
	memset(s, 0, sizeof(*s));
	(void)snprintf(s->name, sizeof(s->name), "%s", name);
	(void)snprintf(s->placeholder, sizeof(s->placeholder), "%s", ph);
	s->value = secmem_dup(value, n);
	assert_non_null(s->value);
	s->value_len = n;
}

static void secrets_free(struct egress_secret *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		secmem_free(s[i].value, s[i].value_len);
	}
}

/* A growing text for building bodies. */
struct text {
	uint8_t p[BODY_MAX];
	size_t n;
};

static void text_put(struct text *t, const void *p, size_t n)
{
	assert_true(t->n + n <= sizeof(t->p));
	memcpy(t->p + t->n, p, n);
	t->n += n;
}

static void text_puts(struct text *t, const char *s)
{
	text_put(t, s, strlen(s));
}

enum esc {
	ESC_NONE,
	ESC_PCT_LOWER,
	ESC_PCT_UPPER,
	ESC_JSON_LOWER,
	ESC_JSON_UPPER,
	ESC_MIXED,
};

/* c escaped one way: percent or \u00XX (JSON only below 0x80), short JSON escapes in the mixed mode. */
static void put_char(struct text *t, uint8_t c, enum esc e)
{
	char tmp[8];

	if (e == ESC_MIXED) {
		static const char shorts[] = "\"\\/\b\f\n\r\t";
		const char *sh = c ? strchr(shorts, c) : NULL;
		unsigned k = (unsigned)(rng() % 6);

		if (sh && k == 5) {
			static const char letters[] = "\"\\/bfnrt";
			tmp[0] = '\\';
			tmp[1] = letters[sh - shorts];
			text_put(t, tmp, 2);
			return;
		}
		e = (enum esc)(k % 5);
	}
	if (c >= 0x80 && (e == ESC_JSON_LOWER || e == ESC_JSON_UPPER)) {
		e = ESC_PCT_UPPER;
	}
	switch (e) {
	case ESC_NONE:
		text_put(t, &c, 1);
		return;
	case ESC_PCT_LOWER:
		(void)snprintf(tmp, sizeof(tmp), "%%%02x", c);
		break;
	case ESC_PCT_UPPER:
		(void)snprintf(tmp, sizeof(tmp), "%%%02X", c);
		break;
	case ESC_JSON_LOWER:
		(void)snprintf(tmp, sizeof(tmp), "\\u%04x", c);
		break;
	case ESC_JSON_UPPER:
		(void)snprintf(tmp, sizeof(tmp), "\\u%04X", c);
		break;
	case ESC_MIXED:
	default:
		fail();
	}
	text_puts(t, tmp);
}

static void put_escaped(struct text *t, const void *p, size_t n, enum esc e)
{
	for (size_t i = 0; i < n; i++) {
		put_char(t, ((const uint8_t *)p)[i], e);
	}
}

/* The whole of v hex-encoded (upper or lower case), then escaped. */
static void put_hex(struct text *t, const void *v, size_t n, bool upper, enum esc e)
{
	struct buf b;

	assert_int_equal(buf_init(&b, 3 * n + 16, 0), 0);
	assert_int_equal(hex_encode(v, n, &b), 0);
	for (size_t i = 0; upper && i < buf_len(&b); i++) {
		if (b.data[i] >= 'a' && b.data[i] <= 'f') {
			b.data[i] = (uint8_t)(b.data[i] - 32);
		}
	}
	put_escaped(t, buf_ptr(&b), buf_len(&b), e);
	buf_release(&b);
}

/* v inside a longer base64 text at byte alignment k (k random bytes before it, 2 after), then escaped. */
static void put_b64(struct text *t, const void *v, size_t n, size_t k, enum b64_variant var, enum esc e)
{
	uint8_t raw[5000];
	struct buf b;

	assert_true(n + k + 2 <= sizeof(raw));
	for (size_t i = 0; i < k; i++) {
		raw[i] = (uint8_t)rng();
	}
	memcpy(raw + k, v, n);
	raw[k + n] = (uint8_t)rng();
	raw[k + n + 1] = (uint8_t)rng();
	assert_int_equal(buf_init(&b, 2 * n + 64, 0), 0);
	assert_int_equal(b64_encode(raw, k + n + 2, var, &b), 0);
	put_escaped(t, buf_ptr(&b), buf_len(&b), e);
	buf_release(&b);
}

/* Raw bytes with ASCII letters in random case. */
static void put_anycase(struct text *t, const void *v, size_t n, enum esc e)
{
	for (size_t i = 0; i < n; i++) {
		uint8_t c = ((const uint8_t *)v)[i];

		if (((c | 32) >= 'a' && (c | 32) <= 'z') && (rng() & 1)) {
			c ^= 32;
		}
		put_char(t, c, e);
	}
}

static struct egress_leak_set *set_of(const struct egress_secret *s, size_t n)
{
	struct egress_leak_set *set = NULL;

	assert_int_equal(egress_leak_set_new(s, n, &set), 0);
	assert_non_null(set);
	return set;
}

/* A run of 3 or more bytes of v in p[0..n)? */
static bool has_run(const void *p, size_t n, const uint8_t *v, size_t vn)
{
	for (size_t i = 0; i + 3 <= n; i++) {
		for (size_t j = 0; j + 3 <= vn; j++) {
			if (memcmp((const uint8_t *)p + i, v + j, 3) == 0) {
				return true;
			}
		}
	}
	return false;
}

/*
 * Redact t in place and check the rules: same length, the count, nothing
 * found again (F4), one-shot equal to the streams (1 byte at a time and
 * random splits).
 */
static size_t redact_checked(const struct egress_leak_set *set, const uint8_t *body, size_t n, uint8_t *ret)
{
	struct egress_leak_match m;
	struct egress_leak_stream st;
	struct buf out;
	size_t count;

	memcpy(ret, body, n);
	count = egress_leak_redact(set, ret, n);
	assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, ret, n, &m), 0);

	for (int mode = 0; mode < 3; mode++) {
		size_t off = 0;

		assert_int_equal(egress_leak_stream_init(&st, set, EGRESS_LEAK_VALUES, true), 0);
		assert_int_equal(buf_init(&out, n + 1, 0), 0);
		while (off < n) {
			size_t take = mode == 0 ? 1 : mode == 1 ? 1 + rng() % 97 : 1 + rng() % 4000;

			take = MIN(take, n - off);
			assert_int_equal(egress_leak_stream_feed(&st, body + off, take, &out, &m), 0);
			off += take;
		}
		assert_int_equal(egress_leak_stream_end(&st, &out, &m), 0);
		assert_int_equal(buf_len(&out), n);
		assert_memory_equal(buf_ptr(&out), ret, n);
		buf_release(&out);
		egress_leak_stream_release(&st);
	}
	return count;
}

/* Scan with streams in three split patterns: same verdict as the one-shot find, nothing of the match appended. */
static int scan_checked(const struct egress_leak_set *set, unsigned what, const uint8_t *body, size_t n,
			struct egress_leak_match *ret)
{
	struct egress_leak_match m, sm;
	struct egress_leak_stream st;
	struct buf out;
	int found = egress_leak_find(set, what, body, n, &m);

	for (int mode = 0; mode < 3; mode++) {
		size_t off = 0;
		int r = 0;

		assert_int_equal(egress_leak_stream_init(&st, set, what, false), 0);
		assert_int_equal(buf_init(&out, n + 1, 0), 0);
		while (off < n && r == 0) {
			size_t take = mode == 0 ? 1 : mode == 1 ? 1 + rng() % 97 : 1 + rng() % 4000;

			take = MIN(take, n - off);
			r = egress_leak_stream_feed(&st, body + off, take, &out, &sm);
			off += take;
		}
		if (r == 0) {
			r = egress_leak_stream_end(&st, &out, &sm);
		}
		assert_int_equal(r, found);
		if (found) {
			assert_int_equal(sm.secret, m.secret);
			assert_int_equal(sm.placeholder, m.placeholder);
			assert_string_equal(sm.form, m.form);
			assert_int_equal(sm.escaped, m.escaped);
			assert_int_equal(buf_len(&out), m.off);
			/* a dead stream keeps answering with the match */
			assert_int_equal(egress_leak_stream_feed(&st, (const uint8_t *)"x", 1, &out, &sm), 1);
			assert_int_equal(sm.secret, m.secret);
		} else {
			assert_int_equal(buf_len(&out), n);
		}
		assert_memory_equal(buf_ptr(&out), body, buf_len(&out));
		buf_release(&out);
		egress_leak_stream_release(&st);
	}
	if (found) {
		*ret = m;
	}
	return found;
}

static const char VALUE[] = "ghp_Zq8~xR?>/9kLm2Tw";

/* Every form, for the value and the placeholder, in every escape style. */
static void test_every_form(void **state)
{
	static uint8_t red[BODY_MAX];
	struct egress_secret s[2];
	struct egress_leak_set *set;
	(void)state;

	rng_state = 0x1234567;
	secret_make(&s[0], "NPM", "npm_abcdefghijklmnop", 20, PH_NPM);
	secret_make(&s[1], "GH", VALUE, strlen(VALUE), PH_GH);
	set = set_of(s, 2);
	for (int ph = 0; ph < 2; ph++) {
		const char *v = ph ? PH_GH : VALUE;
		size_t vn = strlen(v);

		for (int form = 0; form < 8; form++) {
			for (int e = ESC_NONE; e <= ESC_MIXED; e++) {
				static struct text t;
				struct egress_leak_match m;
				char want[16];

				t.n = 0;
				text_puts(&t, "POST /x?a=1 HTTP/1.1\r\nX: {\"k\": \"");
				switch (form) {
				case 0:
					put_anycase(&t, v, vn, (enum esc)e);
					(void)snprintf(want, sizeof(want), "raw");
					break;
				case 1:
					put_hex(&t, v, vn, rng() & 1, (enum esc)e);
					(void)snprintf(want, sizeof(want), "hex");
					break;
				default:
					put_b64(&t, v, vn, (size_t)(form - 2) % 3, form < 5 ? B64_STD : B64_URL,
						(enum esc)e);
					(void)snprintf(want, sizeof(want), "base64");
					break;
				}
				text_puts(&t, "\"}\r\n\r\n");
				assert_int_equal(
					scan_checked(set, EGRESS_LEAK_VALUES | EGRESS_LEAK_PLACEHOLDERS, t.p, t.n, &m),
					1);
				assert_int_equal(m.secret, 1);
				assert_int_equal(m.placeholder, ph);
				assert_memory_equal(m.form, want, strlen(want));
				assert_int_equal(m.escaped, e != ESC_NONE);
				/* only the kind asked for */
				assert_int_equal(egress_leak_find(set,
								  ph ? EGRESS_LEAK_VALUES : EGRESS_LEAK_PLACEHOLDERS,
								  t.p, t.n, &m),
						 0);
				assert_int_equal(egress_leak_find(set, 0, t.p, t.n, &m), 0);
				/* redaction: values only, same length */
				assert_int_equal(redact_checked(set, t.p, t.n, red), ph ? 0 : 1);
				if (ph) {
					assert_memory_equal(red, t.p, t.n);
				}
			}
		}
	}
	egress_leak_set_free(set);
	secrets_free(s, 2);
}

/* base64 at each alignment, both alphabets, named by the alphabet; case matters there. */
static void test_base64_alphabets(void **state)
{
	static const char v[] = "~~~~~~~~~~~~~~~~~~"; /* every alignment holds '+' or '-' */
	struct egress_secret s;
	struct egress_leak_set *set;
	static struct text t;
	struct egress_leak_match m;
	(void)state;

	rng_state = 99;
	secret_make(&s, "TILDE", v, strlen(v), PH_GH);
	set = set_of(&s, 1);
	for (size_t k = 0; k < 3; k++) {
		for (int url = 0; url < 2; url++) {
			t.n = 0;
			text_puts(&t, "eyJhIjoiYiJ9");
			put_b64(&t, v, strlen(v), k, url ? B64_URL : B64_STD, ESC_NONE);
			assert_int_equal(scan_checked(set, EGRESS_LEAK_VALUES, t.p, t.n, &m), 1);
			assert_string_equal(m.form, url ? "base64url" : "base64");
			assert_false(m.escaped);
			/* case-sensitive: the same text with letters swapped is not the value */
			for (size_t i = 0; i < t.n; i++) {
				if ((t.p[i] | 32) >= 'a' && (t.p[i] | 32) <= 'z') {
					t.p[i] ^= 32;
				}
			}
			assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, t.p, t.n, &m), 0);
		}
	}
	egress_leak_set_free(set);
	secrets_free(&s, 1);
}

/* Any case for raw, hex and the percent and \u escapes' hex digits. */
static void test_any_case(void **state)
{
	struct egress_secret s;
	struct egress_leak_set *set;
	struct egress_leak_match m;
	static const char *const yes[] = {
		"xx SeCrEtToKeN42 xx",
		"%53%65%43%72%65%54%74%6f%4B%65%6e%34%32",
		"\\u0053\\u0065\\u0043\\u0072\\u0065\\u0054\\u0074\\u006f\\u004B\\u0065\\u006E\\u0034\\u0032",
		"%53e\\u0063R\\u0065%54tOk%45n42",
		"%%53ecrettoken42x",
		"736563726574546f6b656e3432",
		"736563726574546F6B656E3432",
		"7365637265745%346F6B656E3432",
		"7\\u003365637265745\\u00346F6B656E3432",
	};
	static const char *const no[] = {
		"secrettoken4",
		"secret token42",
		"%3765637265745%346F6B656E343",
		"\\U0053ecrettoken42", /* \U is no JSON escape */
		"%5 3ecrettoken42",
		"\\u00e9secrettoken4",
		"sec%2retToken42",
		"73 6563726574546f6b656e3432",
	};
	(void)state;

	secret_make(&s, "T", "secretToken42", 13, PH_GH);
	set = set_of(&s, 1);
	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, (const uint8_t *)yes[i], strlen(yes[i]), &m),
				 1);
	}
	for (size_t i = 0; i < ARRAY_SIZE(no); i++) {
		assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, (const uint8_t *)no[i], strlen(no[i]), &m),
				 0);
	}
	/* where: offsets and lengths of a one-shot match */
	assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, (const uint8_t *)yes[0], strlen(yes[0]), &m), 1);
	assert_int_equal(m.off, 3);
	assert_int_equal(m.len, 13);
	assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, (const uint8_t *)yes[3], strlen(yes[3]), &m), 1);
	assert_int_equal(m.off, 0);
	assert_int_equal(m.len, strlen(yes[3]));
	assert_true(m.escaped);
	egress_leak_set_free(set);
	secrets_free(&s, 1);
}

/* A value holding '%' and '\': literal and escaped readings of the same bytes. */
static void test_value_with_escape_chars(void **state)
{
	static const char v[] = "p%25a\\b\\\\x\"/%";
	static uint8_t red[BODY_MAX];
	struct egress_secret s;
	struct egress_leak_set *set;
	struct egress_leak_match m;
	(void)state;

	rng_state = 7;
	secret_make(&s, "ODD", v, strlen(v), PH_GH);
	set = set_of(&s, 1);
	for (int e = ESC_NONE; e <= ESC_MIXED; e++) {
		for (int rep = 0; rep < 20; rep++) {
			static struct text t;

			t.n = 0;
			text_puts(&t, "%%\\\\%25");
			put_escaped(&t, v, strlen(v), (enum esc)e);
			text_puts(&t, "\\%");
			assert_int_equal(scan_checked(set, EGRESS_LEAK_VALUES, t.p, t.n, &m), 1);
			assert_string_equal(m.form, "raw");
			assert_int_equal(redact_checked(set, t.p, t.n, red), 1);
		}
	}
	/* a long run of backslashes without the value's last byte is no match (and no backtracking blow-up) */
	{
		char bs[48];
		struct egress_secret b;
		struct egress_leak_set *bset;
		static struct text t;

		memset(bs, '\\', 46);
		bs[46] = 'x';
		bs[47] = '\0';
		secret_make(&b, "BS", bs, strlen(bs), PH_GH);
		bset = set_of(&b, 1);
		t.n = 0;
		for (int i = 0; i < 2000; i++) {
			text_puts(&t, "\\\\");
		}
		text_puts(&t, "y");
		assert_int_equal(scan_checked(bset, EGRESS_LEAK_VALUES, t.p, t.n, &m), 0);
		t.n = 0;
		put_escaped(&t, bs, strlen(bs), ESC_MIXED);
		assert_int_equal(scan_checked(bset, EGRESS_LEAK_VALUES, t.p, t.n, &m), 1);
		egress_leak_set_free(bset);
		secrets_free(&b, 1);
	}
	egress_leak_set_free(set);
	secrets_free(&s, 1);
}

/* A body of many forms and fragments, split at every boundary, streams equal to one-shot. */
static void build_mixture(struct text *t, const struct egress_secret *s, size_t n, size_t pieces)
{
	t->n = 0;
	for (size_t i = 0; i < pieces; i++) {
		const struct egress_secret *x = &s[rng() % n];
		bool ph = rng() % 3 == 0;
		const void *v = ph ? (const void *)x->placeholder : (const void *)x->value;
		size_t vn = ph ? strlen(x->placeholder) : x->value_len;
		enum esc e = (enum esc)(rng() % 6);
		size_t cut = rng() % vn;

		switch (rng() % 8) {
		case 0:
			put_anycase(t, v, vn, e);
			break;
		case 1:
			put_hex(t, v, vn, rng() & 1, e);
			break;
		case 2:
			put_b64(t, v, vn, rng() % 3, rng() & 1 ? B64_URL : B64_STD, e);
			break;
		case 3: /* a fragment: must not match alone */
			put_escaped(t, v, cut, e);
			break;
		case 4: /* a fragment's tail */
			put_escaped(t, (const uint8_t *)v + cut + 1, vn - cut - 1, e);
			break;
		case 5:
			text_put(t, "%\\u00\\%2", 1 + rng() % 8);
			break;
		default:
			for (size_t k = rng() % 40; k > 0; k--) {
				uint8_t c = (uint8_t)("abcdef0123456789+/=-_%\\u\"* \r\n"[rng() % 30]);
				text_put(t, &c, 1);
			}
			break;
		}
	}
}

static void test_splits(void **state)
{
	static uint8_t red[BODY_MAX];
	static struct text t;
	struct egress_secret s[3];
	struct egress_leak_set *set;
	struct egress_leak_match m;
	size_t total = 0;
	(void)state;

	rng_state = 0xfeedface;
	secret_make(&s[0], "GH", VALUE, strlen(VALUE), PH_GH);
	secret_make(&s[1], "NPM", "npm_0123456789ABCDEFxyz", 23, PH_NPM);
	secret_make(&s[2], "UTF", "p\xc3\xa4ss\xe2\x82\xacword", 12, "tkbox_UTF_00000000000000000000000000000000");
	set = set_of(s, 3);
	for (int round = 0; round < 60; round++) {
		build_mixture(&t, s, 3, 1 + rng() % 12);
		total += redact_checked(set, t.p, t.n, red);
		(void)scan_checked(set, EGRESS_LEAK_VALUES | EGRESS_LEAK_PLACEHOLDERS, t.p, t.n, &m);
		(void)scan_checked(set, EGRESS_LEAK_PLACEHOLDERS, t.p, t.n, &m);
		/* the redacted body holds no value in any form */
		assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, red, t.n, &m), 0);
	}
	assert_true(total > 30);
	egress_leak_set_free(set);
	secrets_free(s, 3);
}

/* Every JSON short escape stands for its byte (values with control bytes are refused earlier; leak.c takes any). */
static void test_short_escapes(void **state)
{
	static const char v[] = "a\tb\nc\rd\be\ff\"g\\h/i";
	static const char *const yes[] = {
		"a\\tb\\nc\\rd\\be\\ff\\\"g\\\\h\\/i",
		"a\tb\\nc\rd\\be\ff\"g\\\\h/i",
	};
	static const char *const no[] = {
		"a\\Tb\\nc\\rd\\be\\ff\\\"g\\\\h\\/i",
		"a\\tb\\nc\\rd\\be\\ff\\\"g\\h\\/j",
	};
	struct egress_secret s;
	struct egress_leak_set *set;
	struct egress_leak_match m;
	(void)state;

	secret_make(&s, "CTL", v, strlen(v), PH_GH);
	set = set_of(&s, 1);
	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, (const uint8_t *)yes[i], strlen(yes[i]), &m),
				 1);
		assert_int_equal(m.len, strlen(yes[i]));
	}
	for (size_t i = 0; i < ARRAY_SIZE(no); i++) {
		assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, (const uint8_t *)no[i], strlen(no[i]), &m),
				 0);
	}
	egress_leak_set_free(set);
	secrets_free(&s, 1);
}

/* A value byte >= 0x80 matches raw or percent-encoded, never as a \u code point. */
static void test_non_ascii(void **state)
{
	struct egress_secret s;
	struct egress_leak_set *set;
	struct egress_leak_match m;
	static const char *const yes[] = { "p\xc3\xa4ss\xe2\x82\xacword", "p%C3%A4ss%e2%82%acword",
					   "%70%c3%a4\\u0073s%E2%82%ACword" };
	static const char *const no[] = { "p\\u00c3\\u00a4ss\\u00e2\\u0082\\u00acword", "p\\u00e4ss\\u20acword" };
	(void)state;

	secret_make(&s, "UTF", "p\xc3\xa4ss\xe2\x82\xacword", 12, PH_GH);
	set = set_of(&s, 1);
	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, (const uint8_t *)yes[i], strlen(yes[i]), &m),
				 1);
	}
	for (size_t i = 0; i < ARRAY_SIZE(no); i++) {
		assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, (const uint8_t *)no[i], strlen(no[i]), &m),
				 0);
	}
	egress_leak_set_free(set);
	secrets_free(&s, 1);
}

/*
 * F4: a marker beside bytes that would complete a value cannot rebuild one.
 * The value overlaps itself, so a redaction leaves its neighbours in place:
 * the output scanned again holds no value, and the marker is in no value.
 */
static void test_f4_marker(void **state)
{
	static const char *const bodies[] = {
		"abcabcabcXabcabcabcabcX",	  "abcabcabcabcabcabcabcabcabc", "abcabcabc%61bcabcabcabcX",
		"616263616263616263616263616263", "YWJjYWJjYWJjYWJjYWJjYWJj",
	};
	static uint8_t red[BODY_MAX];
	struct egress_secret s;
	struct egress_leak_set *set;
	struct egress_leak_match m;
	uint8_t mk;
	(void)state;

	rng_state = 5;
	secret_make(&s, "REP", "abcabcabcabc", 12, PH_GH);
	set = set_of(&s, 1);
	mk = egress_leak_marker(set);
	assert_int_equal(mk, '*');
	for (size_t i = 0; i < ARRAY_SIZE(bodies); i++) {
		size_t n = strlen(bodies[i]);

		assert_true(redact_checked(set, (const uint8_t *)bodies[i], n, red) >= 1);
		assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, red, n, &m), 0);
		/* redacted text beside redacted text: markers take no part in a match */
		{
			static uint8_t two[2 * BODY_MAX];

			memcpy(two, red, n);
			memcpy(two + n, red, n);
			if (egress_leak_find(set, EGRESS_LEAK_VALUES, two, 2 * n, &m) == 1) {
				assert_null(memchr(two + m.off, mk, m.len));
			}
		}
	}
	egress_leak_set_free(set);
	secrets_free(&s, 1);

	/* a value made of marker candidates: the marker is none of them, and a value of '*' is redacted */
	secret_make(&s, "STARS", "a*#~!^|b*", 9, PH_GH);
	set = set_of(&s, 1);
	mk = egress_leak_marker(set);
	assert_null(memchr(s.value, mk, s.value_len));
	assert_null(memchr("*#~!^|%\\\"/0123456789abcdefABCDEF+-_u", mk, 35));
	{
		static const char b[] = "xa*#~!^|b*a*#~!^|b*#~!^|b*";
		size_t n = strlen(b);

		assert_int_equal(redact_checked(set, (const uint8_t *)b, n, red), 2);
		assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, red, n, &m), 0);
	}
	egress_leak_set_free(set);
	secrets_free(&s, 1);

	secret_make(&s, "STAR", "ab*cdefg", 8, PH_GH);
	set = set_of(&s, 1);
	assert_int_equal(egress_leak_marker(set), '#');
	egress_leak_set_free(set);
	secrets_free(&s, 1);
}

/* describe(): the name, the form, never three bytes in a row of the value. */
static void test_describe(void **state)
{
	static const char *const values[] = { VALUE, "the value of GH (raw)", "GH_TOKEN_abc", "secret 1 (hex)" };
	(void)state;

	rng_state = 11;
	for (size_t i = 0; i < ARRAY_SIZE(values); i++) {
		struct egress_secret s;
		struct egress_leak_set *set;
		struct egress_leak_match m;
		static struct text t;
		char out[256];

		secret_make(&s, i == 2 ? "GH_TOKEN" : "GH", values[i], strlen(values[i]), PH_GH);
		set = set_of(&s, 1);
		for (int form = 0; form < 3; form++) {
			t.n = 0;
			if (form == 0) {
				put_escaped(&t, values[i], strlen(values[i]), ESC_PCT_LOWER);
			} else if (form == 1) {
				put_hex(&t, values[i], strlen(values[i]), false, ESC_NONE);
			} else {
				put_b64(&t, values[i], strlen(values[i]), 1, B64_STD, ESC_NONE);
			}
			assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, t.p, t.n, &m), 1);
			egress_leak_describe(set, &s, &m, out, sizeof(out));
			assert_false(has_run(out, strlen(out), s.value, s.value_len));
			if (i == 0) {
				char want[64];

				(void)snprintf(want, sizeof(want), "the value of GH (%s%s)", m.form,
					       form == 0 ? ", escaped" : "");
				assert_string_equal(out, want);
			}
			/* short output: cut, NUL-terminated */
			memset(out, 'Z', sizeof(out));
			egress_leak_describe(set, &s, &m, out, 5);
			assert_true(strlen(out) <= 4);
		}
		egress_leak_set_free(set);
		secrets_free(&s, 1);
	}
}

/* Random bytes and random base64 text hold no target. */
static void test_no_false_positive(void **state)
{
	static uint8_t body[1u << 20];
	static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/%\\";
	struct egress_secret s[4];
	struct egress_leak_set *set;
	struct egress_leak_match m;
	(void)state;

	rng_state = 0xabcdef12345ull;
	secret_make(&s[0], "A", "sk-ant-api03-Xy7Qp2LmN8vR4tK9wB3cD6fH1jZ5", 41, PH_GH);
	secret_make(&s[1], "B", "ghp_16C7e42F292c6912E7710c838347Ae178B4a", 40, PH_NPM);
	secret_make(&s[2], "C", "AKIAIOSFODNN7EXAMPLE", 20, "tkbox_C_00000000000000000000000000000000");
	secret_make(&s[3], "D", "x0x0x0", 6, "tkbox_D_11111111111111111111111111111111");
	set = set_of(s, 4);
	for (size_t i = 0; i < sizeof(body); i++) {
		body[i] = (uint8_t)rng();
	}
	assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES | EGRESS_LEAK_PLACEHOLDERS, body, sizeof(body), &m),
			 0);
	for (size_t i = 0; i < sizeof(body); i++) {
		body[i] = (uint8_t)alnum[rng() % (sizeof(alnum) - 1)];
	}
	assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES | EGRESS_LEAK_PLACEHOLDERS, body, sizeof(body), &m),
			 0);
	egress_leak_set_free(set);
	secrets_free(s, 4);
}

/* Limits: 16 secrets, values 6..4096 bytes; an empty set passes everything through. */
static void test_limits(void **state)
{
	static struct egress_secret s[EGRESS_SECRET_MAX + 1];
	static uint8_t big[EGRESS_SECRET_VALUE_MAX + 1];
	struct egress_leak_set *set = NULL;
	struct egress_leak_stream st;
	struct egress_leak_match m;
	struct buf out;
	static struct text t;
	(void)state;

	for (size_t i = 0; i < EGRESS_SECRET_MAX + 1; i++) {
		char v[32], ph[64];

		(void)snprintf(v, sizeof(v), "value-%02zu-xyz", i);
		(void)snprintf(ph, sizeof(ph), "tkbox_S%zu_%032zx", i, i);
		secret_make(&s[i], "S", v, strlen(v), ph);
	}
	assert_int_equal(egress_leak_set_new(s, EGRESS_SECRET_MAX + 1, &set), -E2BIG);
	set = set_of(s, EGRESS_SECRET_MAX);
	t.n = 0;
	text_puts(&t, "....");
	put_b64(&t, s[15].value, s[15].value_len, 2, B64_URL, ESC_JSON_UPPER);
	assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, t.p, t.n, &m), 1);
	assert_int_equal(m.secret, 15);
	t.n = 0;
	put_hex(&t, s[9].placeholder, strlen(s[9].placeholder), true, ESC_NONE);
	assert_int_equal(egress_leak_find(set, EGRESS_LEAK_PLACEHOLDERS, t.p, t.n, &m), 1);
	assert_int_equal(m.secret, 9);
	assert_true(m.placeholder);
	egress_leak_set_free(set);
	secrets_free(s, EGRESS_SECRET_MAX + 1);

	/* value lengths */
	secret_make(&s[0], "S", "12345", 5, PH_GH);
	assert_int_equal(egress_leak_set_new(s, 1, &set), -EINVAL);
	secrets_free(s, 1);
	for (size_t i = 0; i < sizeof(big); i++) {
		big[i] = (uint8_t)('!' + i % 90);
	}
	secret_make(&s[0], "S", big, EGRESS_SECRET_VALUE_MAX + 1, PH_GH);
	assert_int_equal(egress_leak_set_new(s, 1, &set), -EINVAL);
	secrets_free(s, 1);
	secret_make(&s[0], "S", big, EGRESS_SECRET_VALUE_MAX, PH_GH);
	set = set_of(s, 1);
	assert_int_equal(egress_leak_holdback(set), 2 * EGRESS_SECRET_VALUE_MAX * 6);
	t.n = 0;
	text_puts(&t, "x");
	put_hex(&t, big, EGRESS_SECRET_VALUE_MAX, false, ESC_PCT_UPPER);
	assert_int_equal(scan_checked(set, EGRESS_LEAK_VALUES, t.p, t.n, &m), 1);
	assert_int_equal(m.off, 1);
	assert_int_equal(m.len, t.n - 1);
	egress_leak_set_free(set);
	secrets_free(s, 1);

	/* no secrets */
	assert_int_equal(egress_leak_set_new(NULL, 0, &set), 0);
	assert_int_equal(egress_leak_holdback(set), 1);
	assert_int_equal(egress_leak_find(set, EGRESS_LEAK_VALUES, (const uint8_t *)"abc", 3, &m), 0);
	assert_int_equal(egress_leak_stream_init(&st, set, EGRESS_LEAK_VALUES, false), 0);
	assert_int_equal(buf_init(&out, 16, 0), 0);
	assert_int_equal(egress_leak_stream_feed(&st, (const uint8_t *)"hello", 5, &out, &m), 0);
	assert_int_equal(buf_len(&out), 5);
	/* out full */
	assert_int_equal(egress_leak_stream_feed(&st, (const uint8_t *)"0123456789abcdef", 16, &out, &m), -E2BIG);
	assert_int_equal(egress_leak_stream_end(&st, &out, &m), -E2BIG);
	buf_release(&out);
	egress_leak_stream_release(&st);
	egress_leak_set_free(set);
}

/* A stream holds back holdback-1 bytes, in a BUF_SECRET buffer; nothing more. */
static void test_stream_holdback(void **state)
{
	static uint8_t body[200000];
	struct egress_secret s;
	struct egress_leak_set *set;
	struct egress_leak_stream st;
	struct egress_leak_match m;
	struct buf out;
	size_t hb;
	(void)state;

	secret_make(&s, "GH", VALUE, strlen(VALUE), PH_GH);
	set = set_of(&s, 1);
	hb = egress_leak_holdback(set);
	assert_int_equal(hb, 6 * 2 * strlen(PH_GH));
	memset(body, 'z', sizeof(body));
	for (int redact = 0; redact < 2; redact++) {
		assert_int_equal(egress_leak_stream_init(&st, set, EGRESS_LEAK_VALUES, redact), 0);
		assert_true(st.hold.flags & BUF_SECRET);
		assert_int_equal(buf_init(&out, sizeof(body), 0), 0);
		assert_int_equal(egress_leak_stream_feed(&st, body, sizeof(body), &out, &m), 0);
		assert_int_equal(buf_len(&out), sizeof(body) - (hb - 1));
		assert_int_equal(egress_leak_stream_end(&st, &out, &m), 0);
		assert_int_equal(buf_len(&out), sizeof(body));
		buf_release(&out);
		egress_leak_stream_release(&st);
	}
	egress_leak_set_free(set);
	secrets_free(&s, 1);
}

/*
 * Not asserted: MB per CPU second of redacting and scanning 10 MiB with 4
 * secrets (TKBOX_LEAK_BENCH=1). CPU time, not wall time: the dev machine's
 * two cores are shared, and wall time then measures the neighbours.
 */
static double now_s(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void bench(void)
{
	static const char words[] = "{\"id\": 12345, \"name\": \"repo\", \"url\": \"https://api.example/x\\/y\", "
				    "\"sha\": \"3f786850e387550fdab836ed7e6dc881de23001b\", \"q\": \"a%20b\"}\n";
	const size_t n = 10u << 20;
	struct egress_secret s[4];
	struct egress_leak_set *set;
	struct egress_leak_stream st;
	struct egress_leak_match m;
	struct buf out;
	uint8_t *body = malloc(n);
	double t0, t1;
	size_t hits;

	assert_non_null(body);
	for (size_t i = 0; i < n; i++) {
		body[i] = (uint8_t)words[i % (sizeof(words) - 1)];
	}
	secret_make(&s[0], "A", "sk-ant-api03-Xy7Qp2LmN8vR4tK9wB3cD6fH1jZ5", 41, PH_GH);
	secret_make(&s[1], "B", "ghp_16C7e42F292c6912E7710c838347Ae178B4a", 40, PH_NPM);
	secret_make(&s[2], "C", "AKIAIOSFODNN7EXAMPLE", 20, "tkbox_C_00000000000000000000000000000000");
	secret_make(&s[3], "D", "hunter2hunter2", 14, "tkbox_D_11111111111111111111111111111111");
	set = set_of(s, 4);

	t0 = now_s();
	hits = egress_leak_redact(set, body, n);
	t1 = now_s();
	printf("bench: one-shot redact 10 MiB, 4 secrets: %.0f MB/s (%zu hits)\n", n / 1e6 / (t1 - t0), hits);

	assert_int_equal(buf_init(&out, 1u << 20, 0), 0);
	assert_int_equal(egress_leak_stream_init(&st, set, 0, true), 0);
	t0 = now_s();
	for (size_t off = 0; off < n; off += 16384) {
		assert_int_equal(egress_leak_stream_feed(&st, body + off, MIN(16384, n - off), &out, &m), 0);
		buf_reset(&out); /* as a proxy that wrote it out */
	}
	assert_int_equal(egress_leak_stream_end(&st, &out, &m), 0);
	t1 = now_s();
	printf("bench: stream redact 10 MiB in 16 KiB reads: %.0f MB/s\n", n / 1e6 / (t1 - t0));
	egress_leak_stream_release(&st);
	buf_reset(&out);

	assert_int_equal(egress_leak_stream_init(&st, set, EGRESS_LEAK_VALUES | EGRESS_LEAK_PLACEHOLDERS, false), 0);
	t0 = now_s();
	for (size_t off = 0; off < n; off += 16384) {
		assert_int_equal(egress_leak_stream_feed(&st, body + off, MIN(16384, n - off), &out, &m), 0);
		buf_reset(&out); /* as a proxy that wrote it out */
	}
	assert_int_equal(egress_leak_stream_end(&st, &out, &m), 0);
	t1 = now_s();
	printf("bench: stream scan 10 MiB in 16 KiB reads: %.0f MB/s\n", n / 1e6 / (t1 - t0));
	egress_leak_stream_release(&st);

	for (size_t i = 0; i < n; i++) {
		body[i] = (uint8_t)("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[rng() % 64]);
	}
	t0 = now_s();
	hits = egress_leak_redact(set, body, n);
	t1 = now_s();
	printf("bench: one-shot redact 10 MiB of random base64 text: %.0f MB/s (%zu hits)\n", n / 1e6 / (t1 - t0),
	       hits);
	buf_release(&out);
	egress_leak_set_free(set);
	secrets_free(s, 4);
	free(body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_form), cmocka_unit_test(test_base64_alphabets),
		cmocka_unit_test(test_any_case),   cmocka_unit_test(test_value_with_escape_chars),
		cmocka_unit_test(test_splits),	   cmocka_unit_test(test_short_escapes),
		cmocka_unit_test(test_non_ascii),  cmocka_unit_test(test_f4_marker),
		cmocka_unit_test(test_describe),   cmocka_unit_test(test_no_false_positive),
		cmocka_unit_test(test_limits),	   cmocka_unit_test(test_stream_holdback),
	};
	const char *b = getenv("TKBOX_LEAK_BENCH");

	if (b && strcmp(b, "1") == 0) {
		rng_state = 42;
		bench();
		return 0;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
