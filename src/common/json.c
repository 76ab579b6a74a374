/* SPDX-License-Identifier: Apache-2.0 */
#include <assert.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "hex.h"
#include "json.h"

/*
 * Longest integer literal (in digits, sign not counted) the strict reader
 * accepts: Tracekit's loads_strict refuses integers "longer than 16 digits".
 */
#define JSON_MAX_INT_DIGITS 16

/* 2^53 and 1e21 as doubles: see json_real_ok(). Both are exact. */
#define JSON_TWO_POW_53 9007199254740992.0
#define JSON_ONE_E21 1e21

/* ------------------------------------------------------------------------ */
/* Pre-scan: bytes only, before jansson sees anything.                      */

static int hex4(const uint8_t *p, size_t n, size_t i, unsigned *ret)
{
	unsigned v = 0;

	if (n < 4 || i > n - 4) {
		return -EBADMSG;
	}
	for (size_t j = 0; j < 4; j++) {
		int d = hex_digit_value(p[i + j]);

		if (d < 0) {
			return -EBADMSG;
		}
		v = (v << 4) | (unsigned)d;
	}
	*ret = v;
	return 0;
}

/*
 * One pass over the raw bytes, tracking whether we are inside a string:
 *   - nesting depth of [ and { outside strings (-E2BIG past max_depth);
 *   - \uXXXX escapes: a high surrogate must be followed at once by an
 *     escaped low surrogate, and a low surrogate may not stand alone;
 *   - integer literals (no fraction, no exponent) longer than
 *     JSON_MAX_INT_DIGITS digits.
 * It does not validate the grammar: jansson does that afterwards. jansson
 * 2.14 refuses lone surrogates itself; this scan keeps the guarantee if a
 * different jansson does not, and the digit rule is not jansson's at all.
 */
static int json_prescan(const uint8_t *p, size_t n, unsigned max_depth)
{
	unsigned depth = 0;
	bool in_string = false;
	size_t i = 0;

	while (i < n) {
		uint8_t c = p[i];

		if (in_string) {
			if (c == '"') {
				in_string = false;
				i++;
			} else if (c == '\\') {
				unsigned u, lo;

				if (i + 1 >= n) {
					return -EBADMSG;
				}
				if (p[i + 1] != 'u') {
					i += 2;
					continue;
				}
				if (hex4(p, n, i + 2, &u) < 0) {
					return -EBADMSG;
				}
				i += 6;
				if (u >= 0xdc00 && u <= 0xdfff) {
					return -EBADMSG; /* low surrogate alone */
				}
				if (u >= 0xd800 && u <= 0xdbff) {
					if (i + 1 >= n || p[i] != '\\' || p[i + 1] != 'u' ||
					    hex4(p, n, i + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff) {
						return -EBADMSG; /* high surrogate not followed by a low one */
					}
					i += 6;
				}
			} else {
				i++;
			}
			continue;
		}

		switch (c) {
		case '"':
			in_string = true;
			i++;
			break;
		case '[':
		case '{':
			if (depth >= max_depth) {
				return -E2BIG;
			}
			depth++;
			i++;
			break;
		case ']':
		case '}':
			/* An unbalanced close is jansson's to refuse. */
			if (depth > 0) {
				depth--;
			}
			i++;
			break;
		case '-':
		case '0':
		case '1':
		case '2':
		case '3':
		case '4':
		case '5':
		case '6':
		case '7':
		case '8':
		case '9': {
			size_t digits = 0;

			if (c == '-') {
				i++;
			}
			while (i < n && p[i] >= '0' && p[i] <= '9') {
				digits++;
				i++;
			}
			if (i < n && (p[i] == '.' || p[i] == 'e' || p[i] == 'E')) {
				/* A real: skip the rest of the token. */
				while (i < n && ((p[i] >= '0' && p[i] <= '9') || p[i] == '.' || p[i] == 'e' ||
						 p[i] == 'E' || p[i] == '+' || p[i] == '-')) {
					i++;
				}
			} else if (digits > JSON_MAX_INT_DIGITS) {
				return -EBADMSG;
			}
			break;
		}
		default:
			i++;
			break;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Post-parse walk.                                                         */

/*
 * Reals are accepted (1.5, 1e3, -0.0: valid JSON, and JCS defines their
 * form), except in [2^53, 1e21) in magnitude: every double there is an
 * integer, and ECMAScript writes it without exponent, so its canonical form
 * would be an integer literal above 2^53-1 that this reader (and Tracekit's)
 * refuses. Refusing them here keeps JCS output re-readable.
 */
static bool json_real_ok(double d)
{
	double a = fabs(d);

	if (!isfinite(d)) {
		return false;
	}
	return a < JSON_TWO_POW_53 || a >= JSON_ONE_E21;
}

static bool json_int_ok(json_int_t v)
{
	return v >= -JSON_MAX_SAFE_INT && v <= JSON_MAX_SAFE_INT;
}

static int json_check_tree(const json_t *v, unsigned depth)
{
	/* jansson's own parser depth cap bounds this recursion. */
	if (depth > JSON_PARSER_MAX_DEPTH) {
		return -E2BIG;
	}
	switch (json_typeof(v)) {
	case JSON_OBJECT: {
		const char *key;
		json_t *m;

		json_object_foreach((json_t *)v, key, m) {
			int r = json_check_tree(m, depth + 1);
			if (r < 0) {
				return r;
			}
		}
		return 0;
	}
	case JSON_ARRAY: {
		size_t idx;
		json_t *m;

		json_array_foreach(v, idx, m) {
			int r = json_check_tree(m, depth + 1);
			if (r < 0) {
				return r;
			}
		}
		return 0;
	}
	case JSON_INTEGER:
		return json_int_ok(json_integer_value(v)) ? 0 : -EBADMSG;
	case JSON_REAL:
		return json_real_ok(json_real_value(v)) ? 0 : -EBADMSG;
	case JSON_STRING:
	case JSON_TRUE:
	case JSON_FALSE:
	case JSON_NULL:
		return 0;
	default:
		return -EBADMSG;
	}
}

static bool json_type_valid(json_type t)
{
	switch (t) {
	case JSON_OBJECT:
	case JSON_ARRAY:
	case JSON_STRING:
	case JSON_INTEGER:
	case JSON_REAL:
	case JSON_TRUE:
	case JSON_FALSE:
	case JSON_NULL:
		return true;
	default:
		return false;
	}
}

int json_parse_strict(const void *p, size_t n, const struct json_opts *opts, json_t **ret)
{
	struct json_opts o = opts ? *opts : JSON_OPTS_DEFAULT;
	json_error_t err;
	json_t *v;
	int r;

	assert(ret);
	if (o.max_bytes == 0) {
		o.max_bytes = JSON_DEFAULT_MAX_BYTES;
	}
	if (o.max_depth == 0) {
		o.max_depth = JSON_DEFAULT_MAX_DEPTH;
	}
	if (o.want_top != (json_type)-1 && !json_type_valid(o.want_top)) {
		return -EINVAL;
	}
	if (!p && n > 0) {
		return -EINVAL;
	}
	if (n > o.max_bytes) {
		return -E2BIG;
	}
	if (n == 0) {
		return -EBADMSG;
	}

	r = json_prescan(p, n, o.max_depth);
	if (r < 0) {
		return r;
	}

	/*
	 * JSON_DECODE_ANY: the top-level type is checked below against
	 * want_top. No JSON_DISABLE_EOF_CHECK (trailing bytes are refused), no
	 * JSON_ALLOW_NUL (\u0000 is refused), no JSON_DECODE_INT_AS_REAL.
	 */
	v = json_loadb(p, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
	if (!v) {
		switch (json_error_code(&err)) {
		case json_error_out_of_memory:
			return -ENOMEM;
		case json_error_stack_overflow:
			return -E2BIG;
		default:
			return -EBADMSG;
		}
	}

	r = json_check_tree(v, 0);
	if (r >= 0 && o.want_top != (json_type)-1 && json_typeof(v) != o.want_top) {
		r = -EBADMSG;
	}
	if (r < 0) {
		json_decref(v);
		return r;
	}
	*ret = v;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* UTF-8 helpers for the writer.                                            */

/*
 * Decode one scalar value from s[0..n) (n >= 1). Strict: no overlong forms,
 * no surrogates, nothing above U+10FFFF. Returns the sequence length (1..4)
 * or -EDOM.
 */
static int utf8_decode(const uint8_t *s, size_t n, uint32_t *ret)
{
	uint8_t c = s[0];
	uint32_t cp, min;
	size_t len;

	if (c < 0x80) {
		*ret = c;
		return 1;
	} else if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
		cp = c & 0x1f;
		min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		cp = c & 0x0f;
		min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		cp = c & 0x07;
		min = 0x10000;
	} else {
		return -EDOM;
	}
	if (n < len) {
		return -EDOM;
	}
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80) {
			return -EDOM;
		}
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
		return -EDOM;
	}
	*ret = cp;
	return (int)len;
}

static bool utf8_valid(const uint8_t *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		uint32_t cp;
		int l = utf8_decode(s + i, n - i, &cp);
		if (l < 0) {
			return false;
		}
		i += (size_t)l;
	}
	return true;
}

size_t json_utf8_clip(char *s)
{
	size_t i = 0, n = s ? strlen(s) : 0;

	while (i < n) {
		uint32_t cp;
		int l = utf8_decode((const uint8_t *)s + i, n - i, &cp);
		if (l < 0) {
			s[i] = '\0';
			break;
		}
		i += (size_t)l;
	}
	return i;
}

/* A reader of UTF-16 code units over valid UTF-8. */
struct u16_iter {
	const uint8_t *s;
	size_t n, i;
	uint16_t pending; /* low surrogate still to yield, or 0 */
};

/* Next code unit; false at the end. The input was validated beforehand. */
static bool u16_next(struct u16_iter *it, uint16_t *ret)
{
	uint32_t cp;
	int l;

	if (it->pending) {
		*ret = it->pending;
		it->pending = 0;
		return true;
	}
	if (it->i >= it->n) {
		return false;
	}
	l = utf8_decode(it->s + it->i, it->n - it->i, &cp);
	if (l < 0) {
		/* Unreachable after validation; keep the order total anyway. */
		cp = it->s[it->i];
		l = 1;
	}
	it->i += (size_t)l;
	if (cp >= 0x10000) {
		cp -= 0x10000;
		*ret = (uint16_t)(0xd800 + (cp >> 10));
		it->pending = (uint16_t)(0xdc00 + (cp & 0x3ff));
	} else {
		*ret = (uint16_t)cp;
	}
	return true;
}

struct jcs_member {
	const char *key;
	size_t key_len;
	const json_t *value;
};

/* RFC 8785 3.2.3: compare property names as arrays of UTF-16 code units. */
static int jcs_member_cmp(const void *a, const void *b)
{
	const struct jcs_member *x = a, *y = b;
	struct u16_iter ix = { .s = (const uint8_t *)x->key, .n = x->key_len };
	struct u16_iter iy = { .s = (const uint8_t *)y->key, .n = y->key_len };

	for (;;) {
		uint16_t ux, uy;
		bool hx = u16_next(&ix, &ux);
		bool hy = u16_next(&iy, &uy);

		if (!hx || !hy) {
			return (int)hx - (int)hy;
		}
		if (ux != uy) {
			return ux < uy ? -1 : 1;
		}
	}
}

/* ------------------------------------------------------------------------ */
/* Numbers.                                                                 */

/* Longest output of jcs_format_double: "-0.00000" + 17 digits, or "-d.dddde-324". */
#define JCS_NUMBER_MAX 40

/*
 * The decimal digits (no leading/trailing zeros) and exponent of the
 * shortest decimal that reads back as a (finite, > 0). Returns the digit
 * count; *ret_point is n in ECMA-262 7.1.12.1: a = 0.digits * 10^n.
 */
static int shortest_digits(double a, char digits[static 18], int *ret_point)
{
	char tmp[JCS_NUMBER_MAX];
	int exp10 = 0, k = 0;

	for (int prec = 1; prec <= 17; prec++) {
		int w = snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, a);
		if (w < 0 || (size_t)w >= sizeof(tmp)) {
			return -EDOM;
		}
		if (strtod(tmp, NULL) == a) {
			break;
		}
	}
	/* tmp is d[.ddd]e(+|-)XX; 17 significant digits always round-trip. */
	for (const char *c = tmp; *c && *c != 'e'; c++) {
		if (*c >= '0' && *c <= '9') {
			digits[k++] = *c;
		}
	}
	{
		const char *e = strchr(tmp, 'e');
		if (!e) {
			return -EDOM;
		}
		exp10 = (int)strtol(e + 1, NULL, 10);
	}
	while (k > 1 && digits[k - 1] == '0') {
		k--;
	}
	digits[k] = '\0';
	*ret_point = exp10 + 1;
	return k;
}

/*
 * ECMAScript Number::toString (ECMA-262 7.1.12.1) for a finite double, as
 * RFC 8785 3.2.2.3 requires. -0 prints as 0. Returns the length written to
 * out (NUL-terminated) or -EDOM.
 */
static int jcs_format_double(double d, char out[static JCS_NUMBER_MAX])
{
	char digits[18];
	int k, n, o = 0;

	if (!isfinite(d)) {
		return -EDOM;
	}
	if (d == 0) {
		out[0] = '0';
		out[1] = '\0';
		return 1;
	}
	if (d < 0) {
		out[o++] = '-';
		d = -d;
	}
	k = shortest_digits(d, digits, &n);
	if (k < 0) {
		return k;
	}
	if (k <= n && n <= 21) {
		/* Integer: digits then n-k zeros. */
		memcpy(out + o, digits, (size_t)k);
		o += k;
		for (int i = 0; i < n - k; i++) {
			out[o++] = '0';
		}
	} else if (0 < n && n <= 21) {
		/* Point inside the digits. */
		memcpy(out + o, digits, (size_t)n);
		o += n;
		out[o++] = '.';
		memcpy(out + o, digits + n, (size_t)(k - n));
		o += k - n;
	} else if (-6 < n && n <= 0) {
		/* 0.000ddd */
		out[o++] = '0';
		out[o++] = '.';
		for (int i = 0; i < -n; i++) {
			out[o++] = '0';
		}
		memcpy(out + o, digits, (size_t)k);
		o += k;
	} else {
		int e = n - 1;
		int w;

		out[o++] = digits[0];
		if (k > 1) {
			out[o++] = '.';
			memcpy(out + o, digits + 1, (size_t)(k - 1));
			o += k - 1;
		}
		w = snprintf(out + o, (size_t)(JCS_NUMBER_MAX - o), "e%c%d", e < 0 ? '-' : '+', e < 0 ? -e : e);
		if (w < 0 || w >= JCS_NUMBER_MAX - o) {
			return -EDOM;
		}
		o += w;
	}
	out[o] = '\0';
	return o;
}

/* ------------------------------------------------------------------------ */
/* The JCS writer.                                                          */

static int jcs_put_string(struct buf *out, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const uint8_t *u = (const uint8_t *)s;
	size_t run = 0; /* start of the pending raw run */
	int r;

	if (!utf8_valid(u, n)) {
		return -EDOM;
	}
	r = buf_put_u8(out, '"');
	if (r < 0) {
		return r;
	}
	for (size_t i = 0; i < n; i++) {
		uint8_t c = u[i];
		char esc[6];
		size_t elen = 2;

		if (c >= 0x20 && c != '"' && c != '\\') {
			continue;
		}
		r = buf_put(out, u + run, i - run);
		if (r < 0) {
			return r;
		}
		run = i + 1;
		esc[0] = '\\';
		switch (c) {
		case '"':
			esc[1] = '"';
			break;
		case '\\':
			esc[1] = '\\';
			break;
		case '\b':
			esc[1] = 'b';
			break;
		case '\t':
			esc[1] = 't';
			break;
		case '\n':
			esc[1] = 'n';
			break;
		case '\f':
			esc[1] = 'f';
			break;
		case '\r':
			esc[1] = 'r';
			break;
		default:
			esc[1] = 'u';
			esc[2] = '0';
			esc[3] = '0';
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 0xf];
			elen = 6;
			break;
		}
		r = buf_put(out, esc, elen);
		if (r < 0) {
			return r;
		}
	}
	r = buf_put(out, u + run, n - run);
	if (r < 0) {
		return r;
	}
	return buf_put_u8(out, '"');
}

int json_write_jcs_string(const char *s, size_t n, struct buf *out)
{
	return jcs_put_string(out, s, n);
}

static int jcs_write(const json_t *v, struct buf *out, unsigned depth);

static int jcs_write_object(const json_t *v, struct buf *out, unsigned depth)
{
	_cleanup_free_ struct jcs_member *m = NULL;
	size_t count = json_object_size(v), i = 0, bytes;
	void *it;
	int r;

	if (count == 0) {
		return buf_put(out, "{}", 2);
	}
	if (size_mul(count, sizeof(*m), &bytes) < 0) {
		return -ENOMEM;
	}
	m = malloc(bytes);
	if (!m) {
		return -ENOMEM;
	}
	for (it = json_object_iter((json_t *)v); it && i < count; it = json_object_iter_next((json_t *)v, it)) {
		m[i].key = json_object_iter_key(it);
		m[i].key_len = json_object_iter_key_len(it);
		m[i].value = json_object_iter_value(it);
		if (!utf8_valid((const uint8_t *)m[i].key, m[i].key_len)) {
			return -EDOM;
		}
		i++;
	}
	if (i != count || it) {
		return -EINVAL; /* modified under us */
	}
	qsort(m, count, sizeof(*m), jcs_member_cmp);

	r = buf_put_u8(out, '{');
	if (r < 0) {
		return r;
	}
	for (i = 0; i < count; i++) {
		if (i > 0) {
			r = buf_put_u8(out, ',');
			if (r < 0) {
				return r;
			}
		}
		r = jcs_put_string(out, m[i].key, m[i].key_len);
		if (r < 0) {
			return r;
		}
		r = buf_put_u8(out, ':');
		if (r < 0) {
			return r;
		}
		r = jcs_write(m[i].value, out, depth + 1);
		if (r < 0) {
			return r;
		}
	}
	return buf_put_u8(out, '}');
}

static int jcs_write(const json_t *v, struct buf *out, unsigned depth)
{
	char num[JCS_NUMBER_MAX];
	int r, len;

	if (!v) {
		return -EINVAL;
	}
	/*
	 * depth counts the containers around v. Capping it is also the guard
	 * against a (programmatically built) cyclic tree.
	 */
	if ((json_is_object(v) || json_is_array(v)) && depth >= JSON_JCS_MAX_DEPTH) {
		return -E2BIG;
	}
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return jcs_write_object(v, out, depth);
	case JSON_ARRAY: {
		size_t n = json_array_size(v);

		r = buf_put_u8(out, '[');
		if (r < 0) {
			return r;
		}
		for (size_t i = 0; i < n; i++) {
			if (i > 0) {
				r = buf_put_u8(out, ',');
				if (r < 0) {
					return r;
				}
			}
			r = jcs_write(json_array_get(v, i), out, depth + 1);
			if (r < 0) {
				return r;
			}
		}
		return buf_put_u8(out, ']');
	}
	case JSON_STRING:
		return jcs_put_string(out, json_string_value(v), json_string_length(v));
	case JSON_INTEGER: {
		json_int_t i = json_integer_value(v);

		/* Beyond 2^53-1 an integer has no exact IEEE-754 double. */
		if (!json_int_ok(i)) {
			return -EDOM;
		}
		len = snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, i);
		if (len < 0 || (size_t)len >= sizeof(num)) {
			return -EDOM;
		}
		return buf_put(out, num, (size_t)len);
	}
	case JSON_REAL:
		len = jcs_format_double(json_real_value(v), num);
		if (len < 0) {
			return len;
		}
		return buf_put(out, num, (size_t)len);
	case JSON_TRUE:
		return buf_put(out, "true", 4);
	case JSON_FALSE:
		return buf_put(out, "false", 5);
	case JSON_NULL:
		return buf_put(out, "null", 4);
	default:
		return -EINVAL;
	}
}

int json_write_jcs(const json_t *v, struct buf *out)
{
	assert(out);
	return jcs_write(v, out, 0);
}

int json_jcs_string(const json_t *v, size_t max, char **ret)
{
	struct buf b;
	char *s;
	int r;

	assert(ret);
	r = buf_init(&b, max, 0);
	if (r < 0) {
		return r;
	}
	r = json_write_jcs(v, &b);
	if (r < 0) {
		buf_release(&b);
		return r;
	}
	/* JCS output never holds a raw NUL (it is escaped as \u0000). */
	r = buf_dup_cstring(&b, &s);
	buf_release(&b);
	if (r < 0) {
		return r;
	}
	*ret = s;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Getters.                                                                 */

static int json_member(const json_t *obj, const char *key, json_t **ret)
{
	json_t *m;

	assert(key);
	if (!obj || !json_is_object(obj)) {
		return -EBADMSG;
	}
	m = json_object_get(obj, key);
	if (!m) {
		return -ENOENT;
	}
	*ret = m;
	return 0;
}

int json_get_string(const json_t *obj, const char *key, const char **ret)
{
	json_t *m;
	const char *s;
	int r;

	assert(ret);
	r = json_member(obj, key, &m);
	if (r < 0) {
		return r;
	}
	if (!json_is_string(m)) {
		return -EBADMSG;
	}
	s = json_string_value(m);
	/* A C string cannot carry an embedded NUL: refuse rather than truncate. */
	if (strlen(s) != json_string_length(m)) {
		return -EBADMSG;
	}
	*ret = s;
	return 0;
}

int json_get_int(const json_t *obj, const char *key, int64_t *ret)
{
	json_t *m;
	json_int_t i;
	int r;

	assert(ret);
	r = json_member(obj, key, &m);
	if (r < 0) {
		return r;
	}
	if (!json_is_integer(m)) {
		return -EBADMSG;
	}
	i = json_integer_value(m);
	if (!json_int_ok(i)) {
		return -EBADMSG;
	}
	*ret = (int64_t)i;
	return 0;
}

int json_get_bool(const json_t *obj, const char *key, bool *ret)
{
	json_t *m;
	int r;

	assert(ret);
	r = json_member(obj, key, &m);
	if (r < 0) {
		return r;
	}
	if (!json_is_boolean(m)) {
		return -EBADMSG;
	}
	*ret = json_is_true(m);
	return 0;
}

int json_get_object(const json_t *obj, const char *key, json_t **ret)
{
	json_t *m;
	int r;

	assert(ret);
	r = json_member(obj, key, &m);
	if (r < 0) {
		return r;
	}
	if (!json_is_object(m)) {
		return -EBADMSG;
	}
	*ret = m;
	return 0;
}

int json_get_array(const json_t *obj, const char *key, json_t **ret)
{
	json_t *m;
	int r;

	assert(ret);
	r = json_member(obj, key, &m);
	if (r < 0) {
		return r;
	}
	if (!json_is_array(m)) {
		return -EBADMSG;
	}
	*ret = m;
	return 0;
}

int json_only_keys(const json_t *obj, const char *const *allowed)
{
	const char *key;
	json_t *m;

	assert(allowed);
	if (!obj || !json_is_object(obj)) {
		return -EBADMSG;
	}
	json_object_foreach((json_t *)obj, key, m) {
		size_t klen = json_object_iter_key_len(json_object_key_to_iter(key));
		bool found = false;

		for (const char *const *a = allowed; *a; a++) {
			if (strlen(*a) == klen && memcmp(*a, key, klen) == 0) {
				found = true;
				break;
			}
		}
		if (!found) {
			return -EBADMSG;
		}
	}
	return 0;
}
