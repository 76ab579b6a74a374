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
#include "egress/clienthello.h"

#include "clienthello-vector.h"

static struct egress_ch_reader rd;
static uint8_t msg[EGRESS_CH_MAX + 16], stream[EGRESS_CH_MAX + 1024], exts[EGRESS_CH_MAX];
static const char *reason;

static size_t put16(uint8_t *p, size_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
	return 2;
}

/* An extension: type, u16 length, data. */
static size_t ext(uint8_t *p, unsigned type, const void *data, size_t n)
{
	put16(p, type);
	put16(p + 2, n);
	if (n) {
		memcpy(p + 4, data, n);
	}
	return 4 + n;
}

/* server_name with the given host_names in one list. */
static size_t ext_sni(uint8_t *p, const char *const *names, size_t count)
{
	uint8_t list[1024];
	size_t n = 2;

	for (size_t i = 0; i < count; i++) {
		list[n++] = 0;
		n += put16(list + n, strlen(names[i]));
		memcpy(list + n, names[i], strlen(names[i]));
		n += strlen(names[i]);
	}
	put16(list, n - 2);
	return ext(p, 0, list, n);
}

/* A ClientHello handshake message with the given extension block. */
static size_t build_ch(const uint8_t *e, size_t en)
{
	size_t n = 4;

	msg[0] = 1;
	n += put16(msg + n, 0x0303);
	memset(msg + n, 0xab, 32);
	n += 32;
	msg[n++] = 0; /* session id */
	n += put16(msg + n, 2);
	n += put16(msg + n, 0x1301);
	msg[n++] = 1;
	msg[n++] = 0;
	n += put16(msg + n, en);
	memcpy(msg + n, e, en);
	n += en;
	msg[1] = (uint8_t)((n - 4) >> 16);
	msg[2] = (uint8_t)((n - 4) >> 8);
	msg[3] = (uint8_t)(n - 4);
	return n;
}

/* Wrap m[0..n) in handshake records of at most rec bytes each. */
static size_t records(const uint8_t *m, size_t n, size_t rec)
{
	size_t out = 0;

	for (size_t i = 0; i < n; i += rec) {
		size_t k = n - i < rec ? n - i : rec;

		stream[out] = 22;
		stream[out + 1] = 3;
		stream[out + 2] = 1;
		put16(stream + out + 3, k);
		memcpy(stream + out + 5, m + i, k);
		out += 5 + k;
	}
	return out;
}

/* Feed p[0..n) in pieces of step bytes; returns the final result. */
static int feed(const uint8_t *p, size_t n, size_t step, struct egress_ch_info *info, size_t *used_total)
{
	size_t i = 0, used;
	int r = 0;

	egress_ch_init(&rd);
	reason = NULL;
	*used_total = 0;
	while (i < n) {
		size_t k = n - i < step ? n - i : step;

		r = egress_ch_feed(&rd, p + i, k, &used, info, &reason);
		if (r != 0) {
			*used_total += r == 1 ? used : 0;
			return r;
		}
		*used_total += used;
		i += k;
	}
	return r;
}

static int feed_exts(size_t en, size_t rec, struct egress_ch_info *info)
{
	size_t used, n = records(msg, build_ch(exts, en), rec);

	return feed(stream, n, n, info, &used);
}

static void test_real_clienthello(void **state)
{
	struct egress_ch_info info;
	size_t used;
	(void)state;

	for (size_t step = 1; step <= sizeof(openssl_ch); step = step * 2 + 1) {
		memset(&info, 0, sizeof(info));
		assert_int_equal(feed(openssl_ch, sizeof(openssl_ch), step, &info, &used), 1);
		assert_true(info.has_sni);
		assert_string_equal(info.sni, "example.com");
		assert_int_equal(info.raw_len, sizeof(openssl_ch));
		assert_int_equal(used, sizeof(openssl_ch));
	}
	/* bytes after the ClientHello (a change_cipher_spec record) are left to the caller */
	memcpy(stream, openssl_ch, sizeof(openssl_ch));
	memcpy(stream + sizeof(openssl_ch), "\x14\x03\x03\x00\x01\x01", 6);
	assert_int_equal(feed(stream, sizeof(openssl_ch) + 6, 4096, &info, &used), 1);
	assert_int_equal(used, sizeof(openssl_ch));
	assert_int_equal(egress_ch_feed(&rd, stream, 1, &used, &info, &reason), -EALREADY);

	/* the same message split across records of 7 bytes */
	size_t n = records(openssl_ch + 5, sizeof(openssl_ch) - 5, 7);
	assert_int_equal(feed(stream, n, 3, &info, &used), 1);
	assert_string_equal(info.sni, "example.com");
	assert_int_equal(info.raw_len, n);
}

static void test_sni_rules(void **state)
{
	struct egress_ch_info info = { 0 };
	struct egress_host h;
	static const char *const one[] = { "a.example" }, *const two[] = { "a.example", "b.example" };
	static const char *const lit[] = { "127.0.0.1" }, *const dot[] = { "a.example." };
	size_t en;
	(void)state;

	en = ext_sni(exts, one, 1);
	assert_int_equal(feed_exts(en, 16384, &info), 1);
	assert_int_equal(egress_host_parse("A.example", 9, &h), 0);
	assert_int_equal(egress_ch_check_sni(&info, &h, &reason), 0);
	assert_int_equal(egress_host_parse("b.example", 9, &h), 0);
	assert_int_equal(egress_ch_check_sni(&info, &h, &reason), -EACCES);
	assert_string_equal(reason, "the ClientHello's server name (SNI) differs from the CONNECT host");
	assert_int_equal(egress_host_parse("192.0.2.1", 9, &h), 0);
	assert_int_equal(egress_ch_check_sni(&info, &h, &reason), -EACCES);

	en = ext_sni(exts, two, 2);
	assert_int_equal(feed_exts(en, 16384, &info), -EACCES);
	assert_string_equal(reason, "the ClientHello names two servers (SNI must name exactly one host)");

	en = ext_sni(exts, one, 1);
	en += ext_sni(exts + en, one, 1);
	assert_int_equal(feed_exts(en, 16384, &info), -EBADMSG); /* the extension twice */

	assert_int_equal(feed_exts(ext_sni(exts, lit, 1), 16384, &info), -EBADMSG);
	assert_int_equal(feed_exts(ext_sni(exts, dot, 1), 16384, &info), -EBADMSG);
	assert_int_equal(feed_exts(ext_sni(exts, one, 0), 16384, &info), -EBADMSG);

	/* no server name: fine for an IP literal, refused for a name */
	en = ext(exts, 0x002b, "\x02\x03\x04", 3);
	memset(&info, 0, sizeof(info));
	assert_int_equal(feed_exts(en, 16384, &info), 1);
	assert_false(info.has_sni);
	assert_int_equal(egress_host_parse("192.0.2.1", 9, &h), 0);
	assert_int_equal(egress_ch_check_sni(&info, &h, &reason), 0);
	assert_int_equal(egress_host_parse("a.example", 9, &h), 0);
	assert_int_equal(egress_ch_check_sni(&info, &h, &reason), -EACCES);
}

static void test_ech_refused(void **state)
{
	static const char *const one[] = { "a.example" };
	struct egress_ch_info info;
	uint8_t grease[200];
	size_t en;
	(void)state;

	/* GREASE ECH as Chrome sends it: an outer ECH with a random config id and payload, beside a real SNI */
	for (size_t i = 0; i < sizeof(grease); i++) {
		grease[i] = (uint8_t)(i * 37 + 11);
	}
	grease[0] = 0; /* outer */
	en = ext_sni(exts, one, 1);
	en += ext(exts + en, 0xfe0d, grease, sizeof(grease));
	assert_int_equal(feed_exts(en, 16384, &info), -EACCES);
	assert_non_null(strstr(reason, "encrypted ClientHello"));
	en = ext(exts, 0xfd00, "\x02\x00\x00", 3);
	assert_int_equal(feed_exts(en, 16384, &info), -EACCES);
	/* the same ECH split across records still refused */
	en = ext_sni(exts, one, 1);
	en += ext(exts + en, 0xfe0d, grease, sizeof(grease));
	assert_int_equal(feed_exts(en, 13, &info), -EACCES);
	/* ESNI and the ECH drafts' codepoints hide the name as well; their neighbours do not. */
	static const uint16_t old[] = { 0xffce, 0xfe08, 0xfe09, 0xfe0a, 0xfe0b, 0xfe0c, 0xff02, 0xff03, 0xff04 };
	for (size_t i = 0; i < ARRAY_SIZE(old); i++) {
		en = ext_sni(exts, one, 1);
		en += ext(exts + en, old[i], grease, 40);
		if (feed_exts(en, 16384, &info) != -EACCES) {
			fail_msg("extension 0x%04x passed", old[i]);
		}
		assert_non_null(strstr(reason, "encrypted ClientHello"));
	}
	static const uint16_t fine[] = { 0xfe07, 0xfe0e, 0xff01, 0xff05, 0xffcd, 0xffcf };
	for (size_t i = 0; i < ARRAY_SIZE(fine); i++) {
		en = ext_sni(exts, one, 1);
		en += ext(exts + en, fine[i], i == 2 ? "\x00" : "", i == 2 ? 1 : 0);
		if (feed_exts(en, 16384, &info) != 1) {
			fail_msg("extension 0x%04x refused: %s", fine[i], reason);
		}
	}
}

static void test_not_tls_and_malformed(void **state)
{
	struct egress_ch_info info;
	size_t used, n;
	(void)state;

	egress_ch_init(&rd);
	assert_int_equal(egress_ch_feed(&rd, (const uint8_t *)"G", 1, &used, &info, &reason), -EPROTONOSUPPORT);
	assert_int_equal(egress_ch_feed(&rd, openssl_ch, sizeof(openssl_ch), &used, &info, &reason), -EPROTONOSUPPORT);
	assert_int_equal(feed((const uint8_t *)"\x16\x04\x01", 3, 1, &info, &used), -EPROTONOSUPPORT);
	assert_int_equal(feed((const uint8_t *)"SSH-2.0-x\r\n", 11, 11, &info, &used), -EPROTONOSUPPORT);
	assert_int_equal(feed((const uint8_t *)"\x16\x03\x01\x00\x00", 5, 5, &info, &used), -EBADMSG);
	assert_int_equal(feed((const uint8_t *)"\x16\x03\x01\x40\x01", 5, 5, &info, &used), -EBADMSG);
	assert_int_equal(feed((const uint8_t *)"\x16\x03\x01\x00\x04\x02\x00\x00\x00", 9, 9, &info, &used), -EBADMSG);

	/* an alert record between two parts of the ClientHello */
	n = records(openssl_ch + 5, sizeof(openssl_ch) - 5, 100);
	stream[105] = 21;
	assert_int_equal(feed(stream, n, n, &info, &used), -EBADMSG);

	/* a second handshake message in the ClientHello's last record */
	memcpy(stream, openssl_ch, sizeof(openssl_ch));
	memcpy(stream + sizeof(openssl_ch), "\x0b\x00\x00\x00", 4);
	put16(stream + 3, sizeof(openssl_ch) - 5 + 4);
	assert_int_equal(feed(stream, sizeof(openssl_ch) + 4, 4096, &info, &used), -EBADMSG);

	/* trailing bytes inside the ClientHello body */
	memcpy(msg, openssl_ch + 5, sizeof(openssl_ch) - 5);
	msg[sizeof(openssl_ch) - 5] = 0;
	msg[3]++;
	n = records(msg, sizeof(openssl_ch) - 4, 16384);
	assert_int_equal(feed(stream, n, n, &info, &used), -EBADMSG);
}

static void test_size_cap(void **state)
{
	struct egress_ch_info info;
	static const size_t fixed = 51; /* the message without the padding extension's data */
	size_t en;
	(void)state;

	en = ext(exts, 21, NULL, 0);
	memset(exts + 4, 0, EGRESS_CH_MAX - fixed);
	put16(exts + 2, EGRESS_CH_MAX - fixed);
	en = 4 + EGRESS_CH_MAX - fixed;
	assert_int_equal(build_ch(exts, en), EGRESS_CH_MAX);
	assert_int_equal(feed_exts(en, 16384, &info), 1);
	put16(exts + 2, EGRESS_CH_MAX - fixed + 1);
	assert_int_equal(feed_exts(en + 1, 16384, &info), -E2BIG);
	assert_string_equal(reason, "the ClientHello is larger than 64 KiB (EGRESS_CH_MAX)");
}

static void test_hello_retry(void **state)
{
	static const char *const a[] = { "a.example" }, *const b[] = { "b.example" };
	struct egress_ch_info first, second;
	uint8_t sh[64] = { 22, 3, 3, 0, 50, 2, 0, 0, 46, 3, 3 };
	static const uint8_t hrr[32] = { 0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c,
					 0x02, 0x1e, 0x65, 0xb8, 0x91, 0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb,
					 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c };
	(void)state;

	assert_int_equal(feed_exts(ext_sni(exts, a, 1), 16384, &first), 1);
	assert_int_equal(feed_exts(ext_sni(exts, a, 1), 16384, &second), 1);
	assert_int_equal(egress_ch_check_retry(&first, &second, &reason), 0);
	assert_int_equal(feed_exts(ext_sni(exts, b, 1), 16384, &second), 1);
	assert_int_equal(egress_ch_check_retry(&first, &second, &reason), -EACCES);
	assert_int_equal(feed_exts(ext(exts, 0x002b, "\x02\x03\x04", 3), 16384, &second), 1);
	assert_int_equal(egress_ch_check_retry(&first, &second, &reason), -EACCES);

	memcpy(sh + 11, hrr, 32);
	assert_int_equal(egress_tls_is_hrr(sh, sizeof(sh)), 1);
	assert_int_equal(egress_tls_is_hrr(sh, 42), -ENODATA);
	assert_int_equal(egress_tls_is_hrr(sh, 0), -ENODATA);
	/* The HRR split across records: its first record is too short to judge, refused (not taken for no HRR). */
	sh[4] = EGRESS_TLS_HRR_MIN - 1;
	assert_int_equal(egress_tls_is_hrr(sh, 5), -EBADMSG);
	assert_int_equal(egress_tls_is_hrr(sh, sizeof(sh)), -EBADMSG);
	sh[4] = EGRESS_TLS_HRR_MIN;
	assert_int_equal(egress_tls_is_hrr(sh, sizeof(sh)), 1);
	/* A first handshake message that is not a ServerHello; a record of another version. */
	sh[5] = 11;
	assert_int_equal(egress_tls_is_hrr(sh, 6), -EBADMSG);
	sh[5] = 2;
	sh[1] = 2;
	assert_int_equal(egress_tls_is_hrr(sh, sizeof(sh)), -EBADMSG);
	sh[1] = 3;
	/* An alert or bytes that are not TLS: decided at once, no HRR. */
	assert_int_equal(egress_tls_is_hrr((const uint8_t *)"\x15\x03\x03\x00\x02\x02\x28", 7), 0);
	assert_int_equal(egress_tls_is_hrr((const uint8_t *)"S", 1), 0);
	sh[20] ^= 1;
	assert_int_equal(egress_tls_is_hrr(sh, sizeof(sh)), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_real_clienthello), cmocka_unit_test(test_sni_rules),
		cmocka_unit_test(test_ech_refused),	 cmocka_unit_test(test_not_tls_and_malformed),
		cmocka_unit_test(test_size_cap),	 cmocka_unit_test(test_hello_retry),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
