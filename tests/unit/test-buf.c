/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "buf.h"

static void test_init_caps(void **state)
{
	struct buf b;
	(void)state;
	assert_int_equal(buf_init(&b, 0, 0), -EINVAL);
	assert_int_equal(buf_init(&b, BUF_SIZE_CEILING + 1, 0), -EINVAL);
	assert_int_equal(buf_init(&b, BUF_SIZE_CEILING, 0), 0);
	buf_release(&b);
	assert_int_equal(buf_init(&b, 16, BUF_READONLY), -EINVAL);
}

static void test_put_one_past_max(void **state)
{
	struct buf b;
	uint8_t x[17] = { 0 };
	(void)state;
	assert_int_equal(buf_init(&b, 16, 0), 0);
	assert_int_equal(buf_put(&b, x, 16), 0);
	assert_int_equal(buf_len(&b), 16);
	assert_int_equal(buf_put_u8(&b, 1), -E2BIG);
	assert_int_equal(buf_len(&b), 16);
	buf_reset(&b);
	assert_int_equal(buf_put(&b, x, 17), -E2BIG);
	assert_int_equal(buf_len(&b), 0);
	buf_release(&b);
}

static void test_consume_frees_room(void **state)
{
	struct buf b;
	uint8_t x[16] = { 0 }, y[8];
	(void)state;
	assert_int_equal(buf_init(&b, 16, 0), 0);
	assert_int_equal(buf_put(&b, x, 16), 0);
	assert_int_equal(buf_get_bytes(&b, y, 8), 0);
	/* The cap is on unread bytes: 8 consumed means 8 more fit. */
	assert_int_equal(buf_put(&b, x, 8), 0);
	assert_int_equal(buf_len(&b), 16);
	assert_int_equal(buf_put_u8(&b, 0), -E2BIG);
	buf_release(&b);
}

static void test_ints_roundtrip(void **state)
{
	struct buf b;
	uint8_t u8;
	uint16_t u16;
	uint32_t u32;
	uint64_t u64;
	static const uint8_t want[] = { 0xab, 0x12, 0x34, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8 };
	(void)state;
	assert_int_equal(buf_init(&b, 64, 0), 0);
	assert_int_equal(buf_put_u8(&b, 0xab), 0);
	assert_int_equal(buf_put_u16(&b, 0x1234), 0);
	assert_int_equal(buf_put_u32(&b, 0xdeadbeef), 0);
	assert_int_equal(buf_put_u64(&b, 0x0102030405060708ULL), 0);
	assert_int_equal(buf_len(&b), sizeof(want));
	assert_memory_equal(buf_ptr(&b), want, sizeof(want));
	assert_int_equal(buf_get_u8(&b, &u8), 0);
	assert_int_equal(buf_get_u16(&b, &u16), 0);
	assert_int_equal(buf_get_u32(&b, &u32), 0);
	assert_int_equal(buf_get_u64(&b, &u64), 0);
	assert_int_equal(u8, 0xab);
	assert_int_equal(u16, 0x1234);
	assert_int_equal(u32, 0xdeadbeef);
	assert_true(u64 == 0x0102030405060708ULL);
	assert_int_equal(buf_get_u8(&b, &u8), -ENODATA);
	buf_release(&b);
}

static void test_short_read_consumes_nothing(void **state)
{
	struct buf b;
	uint32_t v = 7;
	static const uint8_t three[] = { 1, 2, 3 };
	(void)state;
	buf_view(&b, three, sizeof(three));
	assert_int_equal(buf_get_u32(&b, &v), -ENODATA);
	assert_int_equal(v, 7);
	assert_int_equal(buf_len(&b), 3);
}

static void test_view_readonly(void **state)
{
	struct buf b;
	static const uint8_t x[] = { 0, 0, 0, 1, 'a' };
	(void)state;
	buf_view(&b, x, sizeof(x));
	assert_int_equal(buf_put_u8(&b, 1), -EROFS);
	assert_int_equal(buf_put(&b, x, 0), -EROFS);
	assert_int_equal(buf_put_string(&b, "a", 1), -EROFS);
	assert_int_equal(buf_avail(&b), 0);
	buf_release(&b); /* must not free caller memory */
}

static void test_string_claimed_length(void **state)
{
	struct buf b;
	const uint8_t *p;
	size_t n;
	char *s = NULL;
	/* Claims 0xffffffff bytes but has 2: refused without allocating. */
	static const uint8_t huge[] = { 0xff, 0xff, 0xff, 0xff, 'a', 'b' };
	static const uint8_t cut[] = { 0, 0, 0, 3, 'a', 'b' };
	static const uint8_t nul[] = { 0, 0, 0, 3, 'a', 0, 'b' };
	static const uint8_t ok[] = { 0, 0, 0, 3, 'a', 'b', 'c' };
	(void)state;
	buf_view(&b, huge, sizeof(huge));
	assert_int_equal(buf_get_string_view(&b, 1024, &p, &n), -E2BIG);
	assert_int_equal(buf_get_cstring(&b, 1024, &s), -E2BIG);
	assert_int_equal(buf_len(&b), sizeof(huge));
	buf_view(&b, cut, sizeof(cut));
	assert_int_equal(buf_get_string_view(&b, 1024, &p, &n), -ENODATA);
	buf_view(&b, nul, sizeof(nul));
	assert_int_equal(buf_get_cstring(&b, 1024, &s), -EBADMSG);
	assert_null(s);
	assert_int_equal(buf_len(&b), sizeof(nul));
	/* max == length accepted, max one below refused */
	buf_view(&b, ok, sizeof(ok));
	assert_int_equal(buf_get_cstring(&b, 2, &s), -E2BIG);
	assert_int_equal(buf_get_cstring(&b, 3, &s), 0);
	assert_string_equal(s, "abc");
	assert_int_equal(buf_len(&b), 0);
	free(s);
}

static void test_put_string_all_or_nothing(void **state)
{
	struct buf b;
	(void)state;
	assert_int_equal(buf_init(&b, 6, 0), 0);
	assert_int_equal(buf_put_string(&b, "abc", 3), -E2BIG);
	assert_int_equal(buf_len(&b), 0);
	assert_int_equal(buf_put_string(&b, "ab", 2), 0);
	assert_int_equal(buf_len(&b), 6);
	buf_release(&b);
}

static void test_putf(void **state)
{
	struct buf b;
	(void)state;
	assert_int_equal(buf_init(&b, 8, 0), 0);
	assert_int_equal(buf_putf(&b, "%d-%s", 42, "ab"), 0);
	assert_int_equal(buf_len(&b), 5);
	assert_memory_equal(buf_ptr(&b), "42-ab", 5);
	/* 3 more fit (8 - 5) but putf needs room for its NUL: "xyz" refused, "xy" fits */
	assert_int_equal(buf_putf(&b, "%s", "xyz"), -E2BIG);
	assert_int_equal(buf_putf(&b, "%s", "xy"), 0);
	assert_int_equal(buf_len(&b), 7);
	buf_release(&b);
}

static void test_dup_cstring(void **state)
{
	struct buf b;
	char *s;
	(void)state;
	buf_view(&b, "a\0b", 3);
	assert_int_equal(buf_dup_cstring(&b, &s), -EBADMSG);
	buf_view(&b, "abc", 3);
	assert_int_equal(buf_dup_cstring(&b, &s), 0);
	assert_string_equal(s, "abc");
	free(s);
}

static void test_secret_grows(void **state)
{
	struct buf *b = NULL;
	uint8_t x[300];
	(void)state;
	memset(x, 0x5a, sizeof(x));
	assert_int_equal(buf_new(4096, BUF_SECRET, &b), 0);
	for (int i = 0; i < 10; i++) {
		assert_int_equal(buf_put(b, x, sizeof(x)), 0);
	}
	assert_int_equal(buf_len(b), 3000);
	assert_int_equal(buf_consume(b, 2000), 0);
	assert_int_equal(buf_put(b, x, sizeof(x)), 0);
	assert_int_equal(buf_len(b), 1300);
	for (size_t i = 0; i < buf_len(b); i++) {
		assert_int_equal(buf_ptr(b)[i], 0x5a);
	}
	buf_free(b);
	buf_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init_caps),
		cmocka_unit_test(test_put_one_past_max),
		cmocka_unit_test(test_consume_frees_room),
		cmocka_unit_test(test_ints_roundtrip),
		cmocka_unit_test(test_short_read_consumes_nothing),
		cmocka_unit_test(test_view_readonly),
		cmocka_unit_test(test_string_claimed_length),
		cmocka_unit_test(test_put_string_all_or_nothing),
		cmocka_unit_test(test_putf),
		cmocka_unit_test(test_dup_cstring),
		cmocka_unit_test(test_secret_grows),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
