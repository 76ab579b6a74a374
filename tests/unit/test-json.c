/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "banned.h"
#include "json.h"

#define ANY ((json_type)-1)

/* Parse a literal (sizeof-1, so embedded bytes count) with any top-level type. */
#define PARSE(lit, top, retp)                                                                                          \
	json_parse_strict((lit), sizeof(lit) - 1, &(struct json_opts){ .want_top = (top) }, (retp))

/* Parse and drop the result: the return code only. */
static int parse_rc(const char *s, size_t n, const struct json_opts *o)
{
	json_t *v = (json_t *)(uintptr_t)0x1; /* sentinel: must stay untouched on failure */
	int r = json_parse_strict(s, n, o, &v);

	if (r < 0) {
		assert_ptr_equal(v, (json_t *)(uintptr_t)0x1);
	} else {
		assert_non_null(v);
		json_decref(v);
	}
	return r;
}
#define RC(lit) parse_rc((lit), sizeof(lit) - 1, &(struct json_opts){ .want_top = ANY })

/* JCS of v as a new string (test helper; fails the test on error). */
static char *jcs(const json_t *v)
{
	char *s = NULL;
	assert_int_equal(json_jcs_string(v, 1 << 20, &s), 0);
	return s;
}

/*
 * Parse in (any top), check its JCS is exactly want, then check that the JCS
 * text parses again and canonicalises to the same bytes.
 */
static void check_jcs(const char *in, size_t n, const char *want)
{
	json_t *v = NULL, *v2 = NULL;
	char *s, *s2;

	assert_int_equal(json_parse_strict(in, n, &(struct json_opts){ .want_top = ANY }, &v), 0);
	s = jcs(v);
	assert_string_equal(s, want);
	assert_int_equal(json_parse_strict(s, strlen(s), &(struct json_opts){ .want_top = ANY }, &v2), 0);
	s2 = jcs(v2);
	assert_string_equal(s2, s);
	free(s);
	free(s2);
	json_decref(v);
	json_decref(v2);
}
#define CHECK_JCS(lit, want) check_jcs((lit), sizeof(lit) - 1, (want))

static double from_bits(uint64_t u)
{
	double d;
	memcpy(&d, &u, sizeof(d));
	return d;
}

/* JCS of a single real. */
static int real_jcs(double d, char **ret)
{
	json_t *v = json_real(d);
	int r;

	assert_non_null(v);
	r = json_jcs_string(v, 64, ret);
	json_decref(v);
	return r;
}

/* ------------------------------------------------------------------ */
/* RFC 8785                                                            */

/* RFC 8785 Appendix B: IEEE-754 bit patterns and their JCS text. */
static void test_rfc8785_appendix_b(void **state)
{
	static const struct {
		uint64_t bits;
		const char *want;
	} t[] = {
		{ 0x0000000000000000ULL, "0" },
		{ 0x8000000000000000ULL, "0" },
		{ 0x0000000000000001ULL, "5e-324" },
		{ 0x8000000000000001ULL, "-5e-324" },
		{ 0x7fefffffffffffffULL, "1.7976931348623157e+308" },
		{ 0xffefffffffffffffULL, "-1.7976931348623157e+308" },
		{ 0x4340000000000000ULL, "9007199254740992" },
		{ 0xc340000000000000ULL, "-9007199254740992" },
		{ 0x4430000000000000ULL, "295147905179352830000" },
		{ 0x44b52d02c7e14af5ULL, "9.999999999999997e+22" },
		{ 0x44b52d02c7e14af6ULL, "1e+23" },
		{ 0x44b52d02c7e14af7ULL, "1.0000000000000001e+23" },
		{ 0x444b1ae4d6e2ef4eULL, "999999999999999700000" },
		{ 0x444b1ae4d6e2ef4fULL, "999999999999999900000" },
		{ 0x444b1ae4d6e2ef50ULL, "1e+21" },
		{ 0x3eb0c6f7a0b5ed8cULL, "9.999999999999997e-7" },
		{ 0x3eb0c6f7a0b5ed8dULL, "0.000001" },
		{ 0x41b3de4355555553ULL, "333333333.3333332" },
		{ 0x41b3de4355555554ULL, "333333333.33333325" },
		{ 0x41b3de4355555555ULL, "333333333.3333333" },
		{ 0x41b3de4355555556ULL, "333333333.3333334" },
		{ 0x41b3de4355555557ULL, "333333333.33333343" },
		{ 0xbecbf647612f3696ULL, "-0.0000033333333333333333" },
		{ 0x43143ff3c1cb0959ULL, "1424953923781206.2" },
	};
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(t); i++) {
		char *s = NULL;
		assert_int_equal(real_jcs(from_bits(t[i].bits), &s), 0);
		assert_string_equal(s, t[i].want);
		free(s);
	}
}

/*
 * Appendix B's NaN and Infinity rows (and -Infinity) have no JSON form. jansson
 * will not hold one in a tree (json_real() and json_real_set() refuse them),
 * and the reader refuses their spellings and overflowing literals, so none
 * can reach the writer; its -EDOM branch is defence in depth.
 */
static void test_rfc8785_non_finite(void **state)
{
	static const uint64_t bad[] = { 0x7fffffffffffffffULL, 0x7ff0000000000000ULL, 0xfff0000000000000ULL,
					0x7ff8000000000000ULL };
	json_t *r = json_real(1.0);
	(void)state;
	assert_non_null(r);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_null(json_real(from_bits(bad[i])));
		assert_int_equal(json_real_set(r, from_bits(bad[i])), -1);
	}
	json_decref(r);
	assert_int_equal(RC("[NaN]"), -EBADMSG);
	assert_int_equal(RC("[Infinity]"), -EBADMSG);
	assert_int_equal(RC("[-Infinity]"), -EBADMSG);
	assert_int_equal(RC("[1e309]"), -EBADMSG);
}

/* ECMA-262 7.1.12.1 layout boundaries: exponent below 1e-6 and from 1e21. */
static void test_number_layout(void **state)
{
	static const struct {
		double d;
		const char *want;
	} t[] = {
		{ 1e21, "1e+21" },
		{ 1e20, "100000000000000000000" },
		{ 0.000001, "0.000001" },
		{ 1e-7, "1e-7" },
		{ 1.5, "1.5" },
		{ -1.5, "-1.5" },
		{ 1e3, "1000" },
		{ 1.0, "1" },
		{ 0.1, "0.1" },
		{ 123e-20, "1.23e-18" },
		{ 1.25e300, "1.25e+300" },
		{ 4.5, "4.5" },
		{ 0.002, "0.002" },
		{ 1e-27, "1e-27" },
		{ 1e30, "1e+30" },
		{ 2.2250738585072014e-308, "2.2250738585072014e-308" },
	};
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(t); i++) {
		char *s = NULL;
		assert_int_equal(real_jcs(t[i].d, &s), 0);
		assert_string_equal(s, t[i].want);
		free(s);
	}
}

/* RFC 8785 3.2.3: property names sort by UTF-16 code units. */
static void test_rfc8785_sorting(void **state)
{
	static const char in[] = "{\n"
				 "  \"\\u20ac\": \"Euro Sign\",\n"
				 "  \"\\r\": \"Carriage Return\",\n"
				 "  \"\\ufb33\": \"Hebrew Letter Dalet With Dagesh\",\n"
				 "  \"1\": \"One\",\n"
				 "  \"\\ud83d\\ude00\": \"Emoji: Grinning Face\",\n"
				 "  \"\\u0080\": \"Control\",\n"
				 "  \"\\u00f6\": \"Latin Small Letter O With Diaeresis\"\n"
				 "}";
	/* The RFC's resulting order; U+0080 is written raw (C2 80). */
	static const char want[] = "{\"\\r\":\"Carriage Return\","
				   "\"1\":\"One\","
				   "\"\xc2\x80\":\"Control\","
				   "\"\xc3\xb6\":\"Latin Small Letter O With Diaeresis\","
				   "\"\xe2\x82\xac\":\"Euro Sign\","
				   "\"\xf0\x9f\x98\x80\":\"Emoji: Grinning Face\","
				   "\"\xef\xac\xb3\":\"Hebrew Letter Dalet With Dagesh\"}";
	(void)state;
	CHECK_JCS(in, want);
}

/* U+1F600 (D83D DE00) sorts before U+E000 in UTF-16, after it in UTF-8 bytes. */
static void test_sort_utf16_not_bytes(void **state)
{
	(void)state;
	CHECK_JCS("{\"\\ue000\":1,\"\\ud83d\\ude00\":2,\"\\ud7ff\":3}",
		  "{\"\xed\x9f\xbf\":3,\"\xf0\x9f\x98\x80\":2,\"\xee\x80\x80\":1}");
	/* A prefix sorts first; order is by code unit, not length. */
	CHECK_JCS("{\"ab\":1,\"a\":2,\"b\":3,\"\":4}", "{\"\":4,\"a\":2,\"ab\":1,\"b\":3}");
}

/* RFC 8785 3.2.2's example (its output, UTF-8, as the RFC shows in hex). */
static void test_rfc8785_main_example(void **state)
{
	static const char in[] = "{\n"
				 "  \"numbers\": [333333333.33333329, 1E30, 4.50,\n"
				 "              2e-3, 0.000000000000000000000000001],\n"
				 "  \"string\": \"\\u20ac$\\u000F\\u000aA'\\u0042\\u0022\\u005c\\\\\\\"\\/\",\n"
				 "  \"literals\": [null, true, false]\n"
				 "}";
	static const char want[] = "{\"literals\":[null,true,false],"
				   "\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],"
				   "\"string\":\"\xe2\x82\xac$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
	(void)state;
	CHECK_JCS(in, want);
}

/* Only " \ and controls are escaped; short forms where they exist. */
static void test_string_escapes(void **state)
{
	json_t *v;
	char *s;
	char raw[0x20 + 1];
	(void)state;

	for (int c = 1; c < 0x20; c++) {
		raw[c - 1] = (char)c;
	}
	raw[0x1f] = '\0';
	v = json_string(raw);
	assert_non_null(v);
	s = jcs(v);
	assert_string_equal(s, "\"\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r"
			       "\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018"
			       "\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\"");
	free(s);
	json_decref(v);

	/* \u0000 in a programmatic string (the reader refuses it). */
	v = json_stringn("a\0b", 3);
	assert_non_null(v);
	s = jcs(v);
	assert_string_equal(s, "\"a\\u0000b\"");
	free(s);
	json_decref(v);

	/* DEL, '/', U+2028, U+2029 and non-ASCII stay raw. */
	CHECK_JCS("[\"\x7f/\\/\\u2028\\u2029\xc3\xa9\\\"\\\\\"]",
		  "[\"\x7f//\xe2\x80\xa8\xe2\x80\xa9\xc3\xa9\\\"\\\\\"]");
}

static void test_jcs_literals_ints(void **state)
{
	(void)state;
	CHECK_JCS("[null,true,false,0,-0,1,-1,9007199254740991,-9007199254740991,{},[]]",
		  "[null,true,false,0,0,1,-1,9007199254740991,-9007199254740991,{},[]]");
	CHECK_JCS(" { \"b\" : [ 1 , { \"z\" : null , \"a\" : \"x\" } ] , \"a\" : { } } ",
		  "{\"a\":{},\"b\":[1,{\"a\":\"x\",\"z\":null}]}");
	/* Reals: -0.0 is 0; 1.0 is 1, and reads back as an integer with the same JCS. */
	CHECK_JCS("[-0.0,1.0,1.5,1e3,1E+2,0.1,1e-400]", "[0,1,1.5,1000,100,0.1,0]");
	CHECK_JCS("\"top\"", "\"top\"");
	CHECK_JCS("42", "42");
}

/* A programmatic tree JCS cannot represent exactly. */
static void test_jcs_refuses(void **state)
{
	json_t *v;
	char *s = NULL;
	(void)state;

	v = json_integer(JSON_MAX_SAFE_INT + 1);
	assert_int_equal(json_jcs_string(v, 64, &s), -EDOM);
	json_decref(v);
	v = json_integer(-JSON_MAX_SAFE_INT - 1);
	assert_int_equal(json_jcs_string(v, 64, &s), -EDOM);
	json_decref(v);
	v = json_integer(JSON_MAX_SAFE_INT);
	assert_int_equal(json_jcs_string(v, 64, &s), 0);
	assert_string_equal(s, "9007199254740991");
	free(s);
	json_decref(v);

	/* Invalid UTF-8 in a value or a key. */
	v = json_string_nocheck("\xff");
	assert_non_null(v);
	assert_int_equal(json_jcs_string(v, 64, &s), -EDOM);
	json_decref(v);
	v = json_string_nocheck("\xed\xa0\x80"); /* an encoded surrogate */
	assert_int_equal(json_jcs_string(v, 64, &s), -EDOM);
	json_decref(v);
	v = json_object();
	assert_int_equal(json_object_set_new_nocheck(v, "\xc0\xaf", json_null()), 0);
	assert_int_equal(json_jcs_string(v, 64, &s), -EDOM);
	json_decref(v);
}

/* Output bounds: exact fit succeeds, one byte less is -E2BIG. */
static void test_jcs_buffer_caps(void **state)
{
	json_t *v = NULL;
	struct buf b;
	char *s = NULL;
	static const char want[] = "{\"a\":[1,2],\"b\":\"xyz\"}";
	const size_t len = sizeof(want) - 1;
	(void)state;

	assert_int_equal(PARSE("{\"b\":\"xyz\",\"a\":[1,2]}", JSON_OBJECT, &v), 0);
	assert_int_equal(buf_init(&b, len, 0), 0);
	assert_int_equal(json_write_jcs(v, &b), 0);
	assert_int_equal(buf_len(&b), len);
	assert_memory_equal(buf_ptr(&b), want, len);
	buf_release(&b);
	assert_int_equal(buf_init(&b, len - 1, 0), 0);
	assert_int_equal(json_write_jcs(v, &b), -E2BIG);
	assert_true(buf_len(&b) <= len - 1);
	buf_release(&b);

	assert_int_equal(json_jcs_string(v, len, &s), 0);
	assert_string_equal(s, want);
	free(s);
	s = (char *)(uintptr_t)0x1;
	assert_int_equal(json_jcs_string(v, len - 1, &s), -E2BIG);
	assert_ptr_equal(s, (char *)(uintptr_t)0x1);
	assert_int_equal(json_jcs_string(v, 0, &s), -EINVAL);
	json_decref(v);

	/* Appends after what is already there. */
	assert_int_equal(buf_init(&b, 64, 0), 0);
	assert_int_equal(buf_put(&b, "x=", 2), 0);
	assert_int_equal(json_write_jcs(json_true(), &b), 0);
	assert_int_equal(buf_len(&b), 6);
	assert_memory_equal(buf_ptr(&b), "x=true", 6);
	buf_release(&b);
}

static json_t *nested_arrays(unsigned n)
{
	json_t *top = json_array(), *cur = top;

	for (unsigned i = 1; i < n; i++) {
		json_t *a = json_array();
		assert_int_equal(json_array_append_new(cur, a), 0);
		cur = a;
	}
	return top;
}

/* JSON_JCS_MAX_DEPTH containers are written, one more is -E2BIG; a cycle stops. */
static void test_jcs_depth_cap(void **state)
{
	json_t *v, *a, *b;
	char *s = NULL;
	(void)state;

	v = nested_arrays(JSON_JCS_MAX_DEPTH);
	assert_int_equal(json_jcs_string(v, 1 << 20, &s), 0);
	assert_int_equal(strlen(s), 2 * JSON_JCS_MAX_DEPTH);
	free(s);
	json_decref(v);
	v = nested_arrays(JSON_JCS_MAX_DEPTH + 1);
	assert_int_equal(json_jcs_string(v, 1 << 20, &s), -E2BIG);
	json_decref(v);

	a = json_array();
	b = json_array();
	assert_int_equal(json_array_append(a, b), 0);
	assert_int_equal(json_array_append(b, a), 0);
	assert_int_equal(json_jcs_string(a, 1 << 20, &s), -E2BIG);
	json_array_clear(b); /* break the cycle so both are freed */
	json_decref(a);
	json_decref(b);
}

/* ------------------------------------------------------------------ */
/* The strict reader: one test per refusal.                            */

static void test_refuse_duplicate_key(void **state)
{
	(void)state;
	assert_int_equal(RC("{\"a\":1,\"a\":1}"), -EBADMSG);
	assert_int_equal(RC("{\"a\":1,\"b\":{\"c\":1,\"c\":2}}"), -EBADMSG);
	/* Same key spelled two ways is still a duplicate. */
	assert_int_equal(RC("{\"a\":1,\"\\u0061\":2}"), -EBADMSG);
	assert_int_equal(RC("{\"a\":1,\"b\":1}"), 0);
}

static void test_refuse_invalid_utf8(void **state)
{
	(void)state;
	assert_int_equal(RC("[\"\xff\"]"), -EBADMSG);
	assert_int_equal(RC("[\"\x80\"]"), -EBADMSG); /* lone continuation byte */
	assert_int_equal(RC("[\"\xc3\"]"), -EBADMSG); /* truncated sequence */
	assert_int_equal(RC("[\"\xf4\x90\x80\x80\"]"), -EBADMSG); /* above U+10FFFF */
	assert_int_equal(RC("[\"\xed\xa0\x80\"]"), -EBADMSG); /* a surrogate encoded in UTF-8 */
	assert_int_equal(RC("{\"\xff\":1}"), -EBADMSG); /* in a key */
	assert_int_equal(RC("[\"\xc3\xa9\"]"), 0);
}

static void test_refuse_overlong_utf8(void **state)
{
	(void)state;
	assert_int_equal(RC("[\"\xc0\xaf\"]"), -EBADMSG); /* '/' in two bytes */
	assert_int_equal(RC("[\"\xe0\x80\xaf\"]"), -EBADMSG); /* '/' in three */
	assert_int_equal(RC("[\"\xf0\x80\x80\xaf\"]"), -EBADMSG); /* '/' in four */
	assert_int_equal(RC("[\"\xc1\xbf\"]"), -EBADMSG);
}

static void test_refuse_lone_high_surrogate(void **state)
{
	(void)state;
	assert_int_equal(RC("[\"\\ud800\"]"), -EBADMSG);
	assert_int_equal(RC("[\"\\udbff x\"]"), -EBADMSG);
	assert_int_equal(RC("[\"\\ud800\\u0041\"]"), -EBADMSG);
	assert_int_equal(RC("[\"\\ud800\\ud800\"]"), -EBADMSG);
	assert_int_equal(RC("[\"\\ud800\\n\"]"), -EBADMSG);
	assert_int_equal(RC("{\"\\ud83d\":1}"), -EBADMSG); /* in a key */
	assert_int_equal(RC("[\"\\ud83d\\ude00\"]"), 0);
	assert_int_equal(RC("[\"\\uD83D\\uDE00\"]"), 0);
}

static void test_refuse_lone_low_surrogate(void **state)
{
	(void)state;
	assert_int_equal(RC("[\"\\udc00\"]"), -EBADMSG);
	assert_int_equal(RC("[\"\\udfff\"]"), -EBADMSG);
	assert_int_equal(RC("[\"\\ude00\\ud83d\"]"), -EBADMSG); /* pair in the wrong order */
	/* An escaped backslash followed by "udc00" is just text. */
	assert_int_equal(RC("[\"\\\\udc00\"]"), 0);
}

static void test_refuse_nul(void **state)
{
	(void)state;
	assert_int_equal(RC("[\"\\u0000\"]"), -EBADMSG);
	assert_int_equal(RC("{\"a\\u0000b\":1}"), -EBADMSG);
	assert_int_equal(RC("[\"a\0\"]"), -EBADMSG); /* a raw NUL */
	assert_int_equal(RC("[1]\0"), -EBADMSG); /* a raw NUL after the value */
	assert_int_equal(RC("[\"\\u0001\"]"), 0);
}

static void test_refuse_raw_control(void **state)
{
	(void)state;
	assert_int_equal(RC("[\"a\nb\"]"), -EBADMSG);
	assert_int_equal(RC("[\"\x1f\"]"), -EBADMSG);
}

static void test_refuse_nan(void **state)
{
	(void)state;
	assert_int_equal(RC("[NaN]"), -EBADMSG);
	assert_int_equal(RC("[nan]"), -EBADMSG);
	assert_int_equal(RC("{\"a\":-NaN}"), -EBADMSG);
}

static void test_refuse_infinity(void **state)
{
	(void)state;
	assert_int_equal(RC("[Infinity]"), -EBADMSG);
	assert_int_equal(RC("[-Infinity]"), -EBADMSG);
	assert_int_equal(RC("[inf]"), -EBADMSG);
}

static void test_int_safe_range(void **state)
{
	json_t *v = NULL;
	(void)state;
	assert_int_equal(RC("[9007199254740992]"), -EBADMSG); /* 2^53 */
	assert_int_equal(RC("[-9007199254740992]"), -EBADMSG); /* -2^53 */
	assert_int_equal(RC("[9223372036854775807]"), -EBADMSG);
	assert_int_equal(RC("[9223372036854775808]"), -EBADMSG);
	assert_int_equal(PARSE("[9007199254740991]", ANY, &v), 0); /* 2^53-1 */
	assert_int_equal(json_integer_value(json_array_get(v, 0)), JSON_MAX_SAFE_INT);
	json_decref(v);
	assert_int_equal(PARSE("[-9007199254740991]", ANY, &v), 0);
	assert_int_equal(json_integer_value(json_array_get(v, 0)), -JSON_MAX_SAFE_INT);
	json_decref(v);
}

/*
 * More than 16 digits. JSON forbids leading zeros, so every 17-digit
 * integer is also >= 1e16 > 2^53-1: the digit rule and the range rule agree
 * on every valid document; both are kept (Tracekit states both).
 */
static void test_int_digit_count(void **state)
{
	char big[512];
	(void)state;
	assert_int_equal(RC("[10000000000000000]"), -EBADMSG); /* 17 digits */
	assert_int_equal(RC("[-10000000000000000]"), -EBADMSG);
	assert_int_equal(RC("{\"a\":12345678901234567}"), -EBADMSG);
	assert_int_equal(RC("[1000000000000000]"), 0); /* 16 digits, in range */
	assert_int_equal(RC("[-1000000000000000]"), 0);
	assert_int_equal(RC("[00000000000000001]"), -EBADMSG);
	/* A 500-digit integer is refused, not handed to strtoll. */
	big[0] = '[';
	memset(big + 1, '7', 500);
	big[501] = ']';
	assert_int_equal(parse_rc(big, 502, &(struct json_opts){ .want_top = ANY }), -EBADMSG);
	/* Digits inside strings are text. */
	assert_int_equal(RC("[\"123456789012345678901234567890\"]"), 0);
	/* Long mantissas of reals are reals, not integers. */
	assert_int_equal(RC("[333333333.33333329]"), 0);
	assert_int_equal(RC("[0.000000000000000000000000001]"), 0);
}

static void test_refuse_real_overflow(void **state)
{
	(void)state;
	assert_int_equal(RC("[1e400]"), -EBADMSG);
	assert_int_equal(RC("[-1e400]"), -EBADMSG);
	assert_int_equal(RC("[1.8e308]"), -EBADMSG);
	assert_int_equal(RC("[1.7976931348623157e308]"), 0);
	assert_int_equal(RC("[1e-400]"), 0); /* underflow reads as 0, as in ECMAScript */
}

/* Reals whose JCS would be an out-of-range integer literal. */
static void test_refuse_big_integral_real(void **state)
{
	(void)state;
	assert_int_equal(RC("[1e20]"), -EBADMSG);
	assert_int_equal(RC("[9007199254740992.0]"), -EBADMSG);
	assert_int_equal(RC("[-9.007199254740992e15]"), -EBADMSG);
	assert_int_equal(RC("[9.99999999999999e20]"), -EBADMSG);
	assert_int_equal(RC("[1e21]"), 0);
	assert_int_equal(RC("[-1e21]"), 0);
	assert_int_equal(RC("[9007199254740991.0]"), 0);
	assert_int_equal(RC("[1e15]"), 0);
}

static void test_refuse_trailing_garbage(void **state)
{
	(void)state;
	assert_int_equal(RC("{} x"), -EBADMSG);
	assert_int_equal(RC("{}{}"), -EBADMSG);
	assert_int_equal(RC("[1],"), -EBADMSG);
	assert_int_equal(RC("1 2"), -EBADMSG);
	assert_int_equal(RC("x{}"), -EBADMSG);
	assert_int_equal(RC("\xef\xbb\xbf{}"), -EBADMSG); /* a BOM */
}

static void test_trailing_whitespace_accepted(void **state)
{
	(void)state;
	assert_int_equal(RC("{} \t\r\n"), 0);
	assert_int_equal(RC(" \t\r\n{}"), 0);
	assert_int_equal(RC("{}\v"), -EBADMSG); /* not JSON whitespace */
	assert_int_equal(RC("{}\f"), -EBADMSG);
}

static void test_refuse_bad_syntax(void **state)
{
	(void)state;
	assert_int_equal(RC("[01]"), -EBADMSG);
	assert_int_equal(RC("[+1]"), -EBADMSG);
	assert_int_equal(RC("[1.]"), -EBADMSG);
	assert_int_equal(RC("[.5]"), -EBADMSG);
	assert_int_equal(RC("[1,]"), -EBADMSG);
	assert_int_equal(RC("{\"a\"}"), -EBADMSG);
	assert_int_equal(RC("{'a':1}"), -EBADMSG);
	assert_int_equal(RC("[\"\\x41\"]"), -EBADMSG);
	assert_int_equal(RC("[\"\\u12\"]"), -EBADMSG);
	assert_int_equal(RC("[\"abc"), -EBADMSG);
	assert_int_equal(RC("]"), -EBADMSG);
	assert_int_equal(RC("[1]]"), -EBADMSG);
}

static void depth_doc(char *p, unsigned depth, size_t *ret_n)
{
	size_t n = 0;

	for (unsigned i = 0; i < depth; i++) {
		p[n++] = i % 2 ? '[' : '{';
		if (i % 2 == 0) {
			memcpy(p + n, "\"k\":", 4);
			n += 4;
		}
	}
	p[n++] = '1';
	for (unsigned i = depth; i-- > 0;) {
		p[n++] = i % 2 ? ']' : '}';
	}
	*ret_n = n;
}

static void test_depth_cap(void **state)
{
	char doc[8 * 70];
	size_t n;
	(void)state;

	/* An explicit cap: exactly max_depth accepted, one more refused. */
	depth_doc(doc, 5, &n);
	assert_int_equal(parse_rc(doc, n, &(struct json_opts){ .max_depth = 5, .want_top = ANY }), 0);
	depth_doc(doc, 6, &n);
	assert_int_equal(parse_rc(doc, n, &(struct json_opts){ .max_depth = 5, .want_top = ANY }), -E2BIG);

	/* The default, JSON_DEFAULT_MAX_DEPTH. */
	depth_doc(doc, JSON_DEFAULT_MAX_DEPTH, &n);
	assert_int_equal(parse_rc(doc, n, NULL), 0);
	depth_doc(doc, JSON_DEFAULT_MAX_DEPTH + 1, &n);
	assert_int_equal(parse_rc(doc, n, NULL), -E2BIG);

	/* Brackets inside strings do not count; escaped quotes do not end them. */
	assert_int_equal(parse_rc("[\"[[{{\\\"[[\"]", 12, &(struct json_opts){ .max_depth = 1, .want_top = ANY }), 0);
	/* Siblings do not add up. */
	assert_int_equal(parse_rc("[[],[],{}]", 10, &(struct json_opts){ .max_depth = 2, .want_top = ANY }), 0);
	assert_int_equal(parse_rc("[[[]]]", 6, &(struct json_opts){ .max_depth = 2, .want_top = ANY }), -E2BIG);
}

static void test_size_cap(void **state)
{
	const size_t max = JSON_DEFAULT_MAX_BYTES;
	char *doc = malloc(max + 1);
	(void)state;

	assert_non_null(doc);
	/* {"a":"xxxx...."} exactly max bytes. */
	memcpy(doc, "{\"a\":\"", 6);
	memset(doc + 6, 'x', max - 8);
	memcpy(doc + max - 2, "\"}", 2);
	assert_int_equal(parse_rc(doc, max, NULL), 0);
	/* The same document with one byte of trailing whitespace: max + 1. */
	doc[max] = ' ';
	assert_int_equal(parse_rc(doc, max + 1, NULL), -E2BIG);
	free(doc);

	/* An explicit cap. */
	assert_int_equal(parse_rc("{\"a\":1}", 7, &(struct json_opts){ .max_bytes = 7 }), 0);
	assert_int_equal(parse_rc("{\"a\":1}", 7, &(struct json_opts){ .max_bytes = 6 }), -E2BIG);
}

static void test_want_top(void **state)
{
	json_t *v = NULL;
	(void)state;

	assert_int_equal(parse_rc("[1]", 3, NULL), -EBADMSG); /* default wants an object */
	assert_int_equal(parse_rc("\"s\"", 3, NULL), -EBADMSG);
	assert_int_equal(parse_rc("{}", 2, NULL), 0);
	assert_int_equal(PARSE("{}", JSON_ARRAY, &v), -EBADMSG);
	assert_int_equal(PARSE("[]", JSON_ARRAY, &v), 0);
	json_decref(v);
	assert_int_equal(PARSE("1", JSON_INTEGER, &v), 0);
	json_decref(v);
	assert_int_equal(PARSE("1.5", JSON_INTEGER, &v), -EBADMSG);
	assert_int_equal(PARSE("null", ANY, &v), 0);
	assert_true(json_is_null(v));
	assert_int_equal(PARSE("{}", (json_type)42, &v), -EINVAL);
}

static void test_refuse_empty(void **state)
{
	json_t *v = NULL;
	(void)state;
	assert_int_equal(parse_rc("", 0, &(struct json_opts){ .want_top = ANY }), -EBADMSG);
	assert_int_equal(json_parse_strict(NULL, 0, NULL, &v), -EBADMSG);
	assert_null(v);
	assert_int_equal(parse_rc(" \n", 2, &(struct json_opts){ .want_top = ANY }), -EBADMSG);
}

/* ------------------------------------------------------------------ */
/* Getters                                                             */

static void test_getters(void **state)
{
	json_t *v = NULL, *o, *a;
	const char *s;
	int64_t i = 7;
	bool b = false;
	(void)state;

	assert_int_equal(PARSE("{\"s\":\"str\",\"i\":-42,\"big\":9007199254740991,\"r\":1.0,\"t\":true,\"f\":false,"
			       "\"o\":{\"x\":1},\"a\":[1,2],\"n\":null}",
			       JSON_OBJECT, &v),
			 0);

	assert_int_equal(json_get_string(v, "s", &s), 0);
	assert_string_equal(s, "str");
	assert_int_equal(json_get_string(v, "i", &s), -EBADMSG);
	assert_int_equal(json_get_string(v, "n", &s), -EBADMSG);
	assert_int_equal(json_get_string(v, "nope", &s), -ENOENT);

	assert_int_equal(json_get_int(v, "i", &i), 0);
	assert_int_equal(i, -42);
	assert_int_equal(json_get_int(v, "big", &i), 0);
	assert_int_equal(i, JSON_MAX_SAFE_INT);
	i = 7;
	assert_int_equal(json_get_int(v, "r", &i), -EBADMSG); /* a real, even integral */
	assert_int_equal(json_get_int(v, "s", &i), -EBADMSG);
	assert_int_equal(json_get_int(v, "nope", &i), -ENOENT);
	assert_int_equal(i, 7); /* untouched on failure */

	assert_int_equal(json_get_bool(v, "t", &b), 0);
	assert_true(b);
	assert_int_equal(json_get_bool(v, "f", &b), 0);
	assert_false(b);
	assert_int_equal(json_get_bool(v, "n", &b), -EBADMSG);
	assert_int_equal(json_get_bool(v, "i", &b), -EBADMSG);
	assert_int_equal(json_get_bool(v, "nope", &b), -ENOENT);

	assert_int_equal(json_get_object(v, "o", &o), 0);
	assert_int_equal(json_get_int(o, "x", &i), 0);
	assert_int_equal(i, 1);
	assert_int_equal(json_get_object(v, "a", &o), -EBADMSG);
	assert_int_equal(json_get_object(v, "nope", &o), -ENOENT);

	assert_int_equal(json_get_array(v, "a", &a), 0);
	assert_int_equal(json_array_size(a), 2);
	assert_int_equal(json_get_array(v, "o", &a), -EBADMSG);
	assert_int_equal(json_get_array(v, "nope", &a), -ENOENT);

	/* Getters on something that is not an object. */
	assert_int_equal(json_get_array(v, "a", &a), 0);
	assert_int_equal(json_get_int(a, "x", &i), -EBADMSG);
	assert_int_equal(json_get_string(NULL, "x", &s), -EBADMSG);
	json_decref(v);
}

/* Programmatic trees can hold what the reader never yields. */
static void test_getters_programmatic(void **state)
{
	json_t *v = json_object();
	const char *s = NULL;
	int64_t i = 0;
	(void)state;

	assert_int_equal(json_object_set_new(v, "big", json_integer(JSON_MAX_SAFE_INT + 1)), 0);
	assert_int_equal(json_object_set_new(v, "neg", json_integer(-JSON_MAX_SAFE_INT - 1)), 0);
	assert_int_equal(json_object_set_new(v, "nul", json_stringn("a\0b", 3)), 0);
	assert_int_equal(json_get_int(v, "big", &i), -EBADMSG);
	assert_int_equal(json_get_int(v, "neg", &i), -EBADMSG);
	assert_int_equal(json_get_string(v, "nul", &s), -EBADMSG);
	assert_null(s);
	json_decref(v);
}

static void test_only_keys(void **state)
{
	static const char *const allowed[] = { "a", "b", "ab", NULL };
	static const char *const none[] = { NULL };
	json_t *v = NULL;
	(void)state;

	assert_int_equal(PARSE("{\"a\":1,\"b\":2}", JSON_OBJECT, &v), 0);
	assert_int_equal(json_only_keys(v, allowed), 0);
	assert_int_equal(json_only_keys(v, none), -EBADMSG);
	json_decref(v);

	assert_int_equal(PARSE("{}", JSON_OBJECT, &v), 0);
	assert_int_equal(json_only_keys(v, allowed), 0);
	assert_int_equal(json_only_keys(v, none), 0);
	json_decref(v);

	assert_int_equal(PARSE("{\"a\":1,\"c\":2}", JSON_OBJECT, &v), 0);
	assert_int_equal(json_only_keys(v, allowed), -EBADMSG);
	json_decref(v);

	/* No prefix matching either way. */
	assert_int_equal(PARSE("{\"abc\":1}", JSON_OBJECT, &v), 0);
	assert_int_equal(json_only_keys(v, allowed), -EBADMSG);
	json_decref(v);
	assert_int_equal(PARSE("{\"A\":1}", JSON_OBJECT, &v), 0);
	assert_int_equal(json_only_keys(v, allowed), -EBADMSG);
	json_decref(v);
	assert_int_equal(PARSE("{\"a\":1}", JSON_OBJECT, &v), 0);
	assert_int_equal(json_only_keys(v, (const char *const[]){ "ab", NULL }), -EBADMSG);
	assert_int_equal(json_only_keys(v, (const char *const[]){ "ab", "a", NULL }), 0);
	json_decref(v);

	/* A key with an embedded NUL is not "a". */
	v = json_object();
	assert_int_equal(json_object_setn_new(v, "a\0x", 3, json_null()), 0);
	assert_int_equal(json_only_keys(v, allowed), -EBADMSG);
	json_decref(v);

	assert_int_equal(PARSE("[1]", JSON_ARRAY, &v), 0);
	assert_int_equal(json_only_keys(v, allowed), -EBADMSG);
	json_decref(v);
}

/* ------------------------------------------------------------------ */
/* Round trips                                                         */

static void test_round_trip(void **state)
{
	(void)state;
	CHECK_JCS("{\"v\":2,\"event\":{\"type\":\"tool.call\",\"seq\":17,\"data\":{\"args\":[\"ls\",\"-la\"],"
		  "\"ok\":true,\"ratio\":0.25}},\"alg\":\"ed25519\"}",
		  "{\"alg\":\"ed25519\",\"event\":{\"data\":{\"args\":[\"ls\",\"-la\"],\"ok\":true,\"ratio\":0.25},"
		  "\"seq\":17,\"type\":\"tool.call\"},\"v\":2}");
	CHECK_JCS("[{\"b\":[],\"a\":{\"d\":null,\"c\":[true,false]}},\"\\t\\u0007\",-5e-324,1e+21]",
		  "[{\"a\":{\"c\":[true,false],\"d\":null},\"b\":[]},\"\\t\\u0007\",-5e-324,1e+21]");
	CHECK_JCS("{\"\\u00e9\":\"caf\\u00e9\",\"e\":\"\xf0\x9f\x98\x80\"}",
		  "{\"e\":\"\xf0\x9f\x98\x80\",\"\xc3\xa9\":\"caf\xc3\xa9\"}");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rfc8785_appendix_b),
		cmocka_unit_test(test_rfc8785_non_finite),
		cmocka_unit_test(test_number_layout),
		cmocka_unit_test(test_rfc8785_sorting),
		cmocka_unit_test(test_sort_utf16_not_bytes),
		cmocka_unit_test(test_rfc8785_main_example),
		cmocka_unit_test(test_string_escapes),
		cmocka_unit_test(test_jcs_literals_ints),
		cmocka_unit_test(test_jcs_refuses),
		cmocka_unit_test(test_jcs_buffer_caps),
		cmocka_unit_test(test_jcs_depth_cap),
		cmocka_unit_test(test_refuse_duplicate_key),
		cmocka_unit_test(test_refuse_invalid_utf8),
		cmocka_unit_test(test_refuse_overlong_utf8),
		cmocka_unit_test(test_refuse_lone_high_surrogate),
		cmocka_unit_test(test_refuse_lone_low_surrogate),
		cmocka_unit_test(test_refuse_nul),
		cmocka_unit_test(test_refuse_raw_control),
		cmocka_unit_test(test_refuse_nan),
		cmocka_unit_test(test_refuse_infinity),
		cmocka_unit_test(test_int_safe_range),
		cmocka_unit_test(test_int_digit_count),
		cmocka_unit_test(test_refuse_real_overflow),
		cmocka_unit_test(test_refuse_big_integral_real),
		cmocka_unit_test(test_refuse_trailing_garbage),
		cmocka_unit_test(test_trailing_whitespace_accepted),
		cmocka_unit_test(test_refuse_bad_syntax),
		cmocka_unit_test(test_depth_cap),
		cmocka_unit_test(test_size_cap),
		cmocka_unit_test(test_want_top),
		cmocka_unit_test(test_refuse_empty),
		cmocka_unit_test(test_getters),
		cmocka_unit_test(test_getters_programmatic),
		cmocka_unit_test(test_only_keys),
		cmocka_unit_test(test_round_trip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
