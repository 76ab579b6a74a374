/* SPDX-License-Identifier: Apache-2.0 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include "banned.h"
#include "crypto.h"

/*
 * Test vectors: FIPS 180-2 appendix B (SHA-256), RFC 4231 section 4
 * (HMAC-SHA256), RFC 4648 section 10 (base64), RFC 8032 section 7.1 (Ed25519).
 * Expected values are spelled in hex and decoded with unhex() below, which is
 * independent of the hex codec under test.
 */

static int nibble(char c)
{
	if (c >= '0' && c <= '9') {
		return c - '0';
	}
	if (c >= 'a' && c <= 'f') {
		return c - 'a' + 10;
	}
	return -1;
}

/* Decode lower-case hex into out (exactly strlen(hex)/2 bytes); fails the test on malformed input. */
static size_t unhex(const char *hex, uint8_t *out, size_t out_size)
{
	size_t n = strlen(hex);

	assert_int_equal(n % 2, 0);
	assert_true(n / 2 <= out_size);
	for (size_t i = 0; i < n; i += 2) {
		int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
		assert_true(hi >= 0 && lo >= 0);
		out[i / 2] = (uint8_t)(hi << 4 | lo);
	}
	return n / 2;
}

static void assert_buf_equal(const struct buf *b, const void *p, size_t n)
{
	assert_int_equal(buf_len(b), n);
	if (n > 0) {
		assert_memory_equal(buf_ptr(b), p, n);
	}
}

/* ---- crypto_ossl_error ---- */

static void test_ossl_error_mapping(void **state)
{
	char msg[128];

	/* Empty queue: still an error. */
	ERR_clear_error();
	assert_int_equal(crypto_ossl_error(msg, sizeof(msg)), -EIO);
	assert_string_equal(msg, "unknown libcrypto error");

	/* The first error decides; the whole queue is drained. */
	ERR_raise(ERR_LIB_EVP, ERR_R_MALLOC_FAILURE);
	ERR_raise(ERR_LIB_EVP, ERR_R_INTERNAL_ERROR);
	assert_int_equal(crypto_ossl_error(msg, sizeof(msg)), -ENOMEM);
	assert_non_null(strstr(msg, "malloc"));
	assert_int_equal(ERR_peek_error(), 0);

	ERR_raise(ERR_LIB_SYS, ENOENT);
	assert_int_equal(crypto_ossl_error(NULL, 0), -ENOENT);
	assert_int_equal(ERR_peek_error(), 0);

	ERR_raise(ERR_LIB_EVP, ERR_R_PASSED_INVALID_ARGUMENT);
	assert_int_equal(crypto_ossl_error(NULL, 0), -EINVAL);

	ERR_raise(ERR_LIB_EVP, EVP_R_BAD_DECRYPT);
	ERR_raise(ERR_LIB_EVP, ERR_R_MALLOC_FAILURE);
	assert_int_equal(crypto_ossl_error(msg, sizeof(msg)), -EIO);
	assert_int_equal(ERR_peek_error(), 0);

	/* msg is truncated and NUL-terminated. */
	ERR_raise(ERR_LIB_EVP, ERR_R_MALLOC_FAILURE);
	memset(msg, 'x', sizeof(msg));
	assert_int_equal(crypto_ossl_error(msg, 4), -ENOMEM);
	assert_int_equal(strlen(msg), 3);
}

/* ---- SHA-256 ---- */

static void check_sha256(const void *p, size_t n, const char *want_hex)
{
	uint8_t want[SHA256_LEN], got[SHA256_LEN];

	unhex(want_hex, want, sizeof(want));
	assert_int_equal(sha256(p, n, got), 0);
	assert_memory_equal(got, want, SHA256_LEN);
}

static void test_sha256_vectors(void **state)
{
	check_sha256("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	check_sha256("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	check_sha256(NULL, 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	check_sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
		     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_sha256_million_a(void **state)
{
	struct sha256_ctx *c = NULL;
	uint8_t chunk[1000], got[SHA256_LEN], want[SHA256_LEN];

	memset(chunk, 'a', sizeof(chunk));
	unhex("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", want, sizeof(want));
	assert_int_equal(sha256_new(&c), 0);
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(sha256_update(c, chunk, sizeof(chunk)), 0);
	}
	assert_int_equal(sha256_final(c, got), 0);
	assert_memory_equal(got, want, SHA256_LEN);
	sha256_free(c);
}

static void test_sha256_incremental_equals_oneshot(void **state)
{
	uint8_t data[300], one[SHA256_LEN], inc[SHA256_LEN];

	for (size_t i = 0; i < sizeof(data); i++) {
		data[i] = (uint8_t)(i * 7 + 3);
	}
	assert_int_equal(sha256(data, sizeof(data), one), 0);
	/* Every split point, with an empty update in the middle. */
	for (size_t split = 0; split <= sizeof(data); split++) {
		struct sha256_ctx *c = NULL;
		assert_int_equal(sha256_new(&c), 0);
		assert_int_equal(sha256_update(c, data, split), 0);
		assert_int_equal(sha256_update(c, NULL, 0), 0);
		assert_int_equal(sha256_update(c, data + split, sizeof(data) - split), 0);
		assert_int_equal(sha256_final(c, inc), 0);
		assert_memory_equal(inc, one, SHA256_LEN);
		sha256_free(c);
	}
}

static void test_sha256_spent_context(void **state)
{
	struct sha256_ctx *c = NULL;
	uint8_t got[SHA256_LEN], untouched[SHA256_LEN];

	assert_int_equal(sha256_new(&c), 0);
	assert_int_equal(sha256_update(c, "abc", 3), 0);
	assert_int_equal(sha256_final(c, got), 0);
	memset(untouched, 0x5a, sizeof(untouched));
	assert_int_equal(sha256_update(c, "abc", 3), -EINVAL);
	assert_int_equal(sha256_final(c, untouched), -EINVAL);
	for (size_t i = 0; i < sizeof(untouched); i++) {
		assert_int_equal(untouched[i], 0x5a);
	}
	sha256_free(c);
	sha256_free(NULL);
}

/* ---- HMAC-SHA256 (RFC 4231) ---- */

static void check_hmac(const void *key, size_t keylen, const void *p, size_t n, const char *want_hex)
{
	uint8_t want[SHA256_LEN], got[SHA256_LEN];

	unhex(want_hex, want, sizeof(want));
	assert_int_equal(hmac_sha256(key, keylen, p, n, got), 0);
	assert_memory_equal(got, want, SHA256_LEN);
}

static void test_hmac_rfc4231(void **state)
{
	uint8_t key[131], data[50];
	const char *t6 = "Test Using Larger Than Block-Size Key - Hash Key First";
	const char *t7 = "This is a test using a larger than block-size key and a larger than block-size data. The key "
			 "needs to be hashed before being used by the HMAC algorithm.";

	/* Test case 1 */
	memset(key, 0x0b, 20);
	check_hmac(key, 20, "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
	/* Test case 2: a key shorter than the output */
	check_hmac("Jefe", 4, "what do ya want for nothing?", 28,
		   "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	/* Test case 3 */
	memset(key, 0xaa, 20);
	memset(data, 0xdd, 50);
	check_hmac(key, 20, data, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
	/* Test case 4 */
	for (int i = 0; i < 25; i++) {
		key[i] = (uint8_t)(i + 1);
	}
	memset(data, 0xcd, 50);
	check_hmac(key, 25, data, 50, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
	/* Test case 6: a key longer than the block */
	memset(key, 0xaa, 131);
	check_hmac(key, 131, t6, strlen(t6), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
	/* Test case 7 */
	check_hmac(key, 131, t7, strlen(t7), "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

static void test_hmac_empty(void **state)
{
	/* Empty key and empty message (value from Python's hmac module). */
	check_hmac(NULL, 0, NULL, 0, "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
	check_hmac("", 0, "", 0, "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

/* ---- crypto_equal ---- */

static void test_crypto_equal(void **state)
{
	uint8_t a[33], b[33];

	for (size_t i = 0; i < sizeof(a); i++) {
		a[i] = b[i] = (uint8_t)i;
	}
	assert_true(crypto_equal(a, b, sizeof(a)));
	assert_true(crypto_equal(a, b, 0));
	b[0] ^= 1;
	assert_false(crypto_equal(a, b, sizeof(a)));
	b[0] ^= 1;
	b[32] ^= 0x80;
	assert_false(crypto_equal(a, b, sizeof(a)));
	assert_true(crypto_equal(a, b, 32));
}

/* ---- hex ---- */

static void test_hex_encode(void **state)
{
	static const uint8_t in[] = { 0x00, 0x01, 0x7f, 0x80, 0xab, 0xcd, 0xef, 0xff };
	struct buf b;

	assert_int_equal(buf_init(&b, 64, 0), 0);
	assert_int_equal(hex_encode(in, sizeof(in), &b), 0);
	assert_buf_equal(&b, "00017f80abcdefff", 16);
	/* Appends. */
	assert_int_equal(hex_encode("\x0a", 1, &b), 0);
	assert_buf_equal(&b, "00017f80abcdefff0a", 18);
	assert_int_equal(hex_encode(NULL, 0, &b), 0);
	assert_int_equal(buf_len(&b), 18);
	buf_release(&b);
}

static void test_hex_decode(void **state)
{
	static const uint8_t want[] = { 0x00, 0x01, 0xab, 0xcd, 0xef, 0xff, 0x9a };
	struct buf b;

	assert_int_equal(buf_init(&b, 64, 0), 0);
	assert_int_equal(hex_decode("0001abcdefff9a", 14, &b), 0);
	assert_buf_equal(&b, want, sizeof(want));
	buf_reset(&b);
	assert_int_equal(hex_decode("0001ABCDEFFF9A", 14, &b), 0);
	assert_buf_equal(&b, want, sizeof(want));
	buf_reset(&b);
	assert_int_equal(hex_decode("0001AbCdEfFf9a", 14, &b), 0);
	assert_buf_equal(&b, want, sizeof(want));
	buf_reset(&b);
	assert_int_equal(hex_decode("", 0, &b), 0);
	assert_int_equal(hex_decode(NULL, 0, &b), 0);
	assert_int_equal(buf_len(&b), 0);
	buf_release(&b);
}

static void test_hex_decode_refusals(void **state)
{
	/* Neighbours of every range boundary, whitespace, NUL, non-ASCII, a sign. */
	static const char *bad[] = { "0g", "g0", "0G", "/0", ":0", "@0", "0`", "0 ", " 0", "0\n", "+1", "0x" };
	struct buf b;

	assert_int_equal(buf_init(&b, 64, 0), 0);
	assert_int_equal(buf_put(&b, "keep", 4), 0);
	assert_int_equal(hex_decode("0", 1, &b), -EBADMSG);
	assert_int_equal(hex_decode("abc", 3, &b), -EBADMSG);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(hex_decode(bad[i], 2, &b), -EBADMSG);
	}
	assert_int_equal(hex_decode("0\0", 2, &b), -EBADMSG);
	assert_int_equal(hex_decode("\x80\x30", 2, &b), -EBADMSG);
	assert_int_equal(hex_decode("00ff\xff\x30", 6, &b), -EBADMSG);
	/* A bad character at the end, after valid ones: nothing appended. */
	assert_int_equal(hex_decode("00112z", 6, &b), -EBADMSG);
	assert_buf_equal(&b, "keep", 4);
	buf_release(&b);
}

/* Every byte value as the second character of a pair: accepted exactly when it is a hex digit. */
static void test_hex_decode_exhaustive(void **state)
{
	const char *digits = "0123456789abcdef";
	struct buf b;

	assert_int_equal(buf_init(&b, 16, 0), 0);
	for (unsigned c = 0; c < 256; c++) {
		char s[2] = { '7', (char)c };
		int want = -1;
		for (int i = 0; i < 16; i++) {
			if (c == (unsigned char)digits[i] ||
			    (i >= 10 && c == (unsigned)(unsigned char)digits[i] - 32)) {
				want = i;
			}
		}
		buf_reset(&b);
		if (want < 0) {
			assert_int_equal(hex_decode(s, 2, &b), -EBADMSG);
			assert_int_equal(buf_len(&b), 0);
		} else {
			assert_int_equal(hex_decode(s, 2, &b), 0);
			assert_int_equal(buf_len(&b), 1);
			assert_int_equal(buf_ptr(&b)[0], 0x70 | want);
		}
	}
	buf_release(&b);
}

static void test_hex_roundtrip_all_bytes(void **state)
{
	uint8_t all[256];
	struct buf enc, dec;

	for (int i = 0; i < 256; i++) {
		all[i] = (uint8_t)i;
	}
	assert_int_equal(buf_init(&enc, 512, 0), 0);
	assert_int_equal(buf_init(&dec, 256, BUF_SECRET), 0);
	assert_int_equal(hex_encode(all, sizeof(all), &enc), 0);
	assert_int_equal(buf_len(&enc), 512);
	for (int i = 0; i < 256; i++) {
		char want[3];
		(void)snprintf(want, sizeof(want), "%02x", i);
		assert_memory_equal(buf_ptr(&enc) + 2 * i, want, 2);
	}
	assert_int_equal(hex_decode((const char *)buf_ptr(&enc), buf_len(&enc), &dec), 0);
	assert_buf_equal(&dec, all, sizeof(all));
	buf_release(&enc);
	buf_release(&dec);
}

/* The output cap: exactly enough works, one byte less is -E2BIG and leaves out unchanged. */
static void test_hex_bounds(void **state)
{
	struct buf b, view;

	assert_int_equal(buf_init(&b, 8, 0), 0);
	assert_int_equal(hex_encode("\x01\x02\x03\x04", 4, &b), 0);
	assert_int_equal(buf_len(&b), 8);
	buf_release(&b);

	assert_int_equal(buf_init(&b, 7, 0), 0);
	assert_int_equal(hex_encode("\x01\x02\x03\x04", 4, &b), -E2BIG);
	assert_int_equal(buf_len(&b), 0);
	buf_release(&b);

	/* With content already present, the cap counts it. */
	assert_int_equal(buf_init(&b, 4, 0), 0);
	assert_int_equal(buf_put(&b, "x", 1), 0);
	assert_int_equal(hex_decode("010203", 6, &b), 0);
	assert_int_equal(hex_decode("01", 2, &b), -E2BIG);
	assert_buf_equal(&b, "x\x01\x02\x03", 4);
	buf_release(&b);

	assert_int_equal(buf_init(&b, 3, 0), 0);
	assert_int_equal(hex_decode("01020304", 8, &b), -E2BIG);
	assert_int_equal(buf_len(&b), 0);
	buf_release(&b);

	buf_view(&view, "abcd", 4);
	assert_int_equal(hex_encode("\x01", 1, &view), -EROFS);
	assert_int_equal(hex_decode("01", 2, &view), -EROFS);
	assert_int_equal(hex_decode("", 0, &view), -EROFS);
}

/* ---- base64 ---- */

struct b64_vector {
	const char *raw;
	const char *std;
	const char *url;
};

static const struct b64_vector rfc4648[] = {
	{ "", "", "" },
	{ "f", "Zg==", "Zg" },
	{ "fo", "Zm8=", "Zm8" },
	{ "foo", "Zm9v", "Zm9v" },
	{ "foob", "Zm9vYg==", "Zm9vYg" },
	{ "fooba", "Zm9vYmE=", "Zm9vYmE" },
	{ "foobar", "Zm9vYmFy", "Zm9vYmFy" },
};

static void check_b64_both_ways(const void *raw, size_t rawlen, const char *enc, enum b64_variant v)
{
	struct buf b;

	assert_int_equal(buf_init(&b, 256, 0), 0);
	assert_int_equal(b64_encode(raw, rawlen, v, &b), 0);
	assert_buf_equal(&b, enc, strlen(enc));
	buf_reset(&b);
	assert_int_equal(b64_decode(enc, strlen(enc), v, &b), 0);
	assert_buf_equal(&b, raw, rawlen);
	buf_release(&b);
}

static void test_b64_rfc4648(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(rfc4648); i++) {
		check_b64_both_ways(rfc4648[i].raw, strlen(rfc4648[i].raw), rfc4648[i].std, B64_STD);
		check_b64_both_ways(rfc4648[i].raw, strlen(rfc4648[i].raw), rfc4648[i].url, B64_URL);
	}
	/* The two characters where the alphabets differ (62 and 63). */
	check_b64_both_ways("\xfb\xff\xbf", 3, "+/+/", B64_STD);
	check_b64_both_ways("\xfb\xff\xbf", 3, "-_-_", B64_URL);
	check_b64_both_ways("\xfb\xef", 2, "++8=", B64_STD);
	check_b64_both_ways("\xfb\xef", 2, "--8", B64_URL);
	/* The minimum and maximum of each unused-bits case. */
	check_b64_both_ways("A", 1, "QQ==", B64_STD);
	check_b64_both_ways("AB", 2, "QUI=", B64_STD);
	check_b64_both_ways("\xff", 1, "/w==", B64_STD);
	check_b64_both_ways("\xff\xff", 2, "//8=", B64_STD);
	check_b64_both_ways("\xff", 1, "_w", B64_URL);
	check_b64_both_ways("\xff\xff", 2, "__8", B64_URL);
}

static void check_b64_refused(const char *s, size_t n, enum b64_variant v)
{
	struct buf b;

	assert_int_equal(buf_init(&b, 256, 0), 0);
	assert_int_equal(buf_put(&b, "keep", 4), 0);
	if (b64_decode(s, n, v, &b) != -EBADMSG) {
		fail_msg("accepted (variant %d): \"%.*s\"", (int)v, (int)n, s);
	}
	assert_buf_equal(&b, "keep", 4);
	buf_release(&b);
}

#define REFUSED(s, v) check_b64_refused(s, sizeof(s) - 1, v)

static void test_b64_refusals_std(void **state)
{
	/* Whitespace anywhere, including a trailing newline. */
	REFUSED("Zm9v\n", B64_STD);
	REFUSED("Zm9v\r\n", B64_STD);
	REFUSED(" Zm9v", B64_STD);
	REFUSED("Zm 9v", B64_STD);
	REFUSED("Zm9\tv", B64_STD);
	REFUSED("Zm9vYmFy\n   ", B64_STD);
	/* The URL alphabet's characters. */
	REFUSED("-_-_", B64_STD);
	REFUSED("Zm9-", B64_STD);
	REFUSED("Zm9_", B64_STD);
	/* Missing padding. */
	REFUSED("Zg", B64_STD);
	REFUSED("Zm8", B64_STD);
	REFUSED("Zm9vYg", B64_STD);
	/* Wrong padding. */
	REFUSED("Zg=", B64_STD);
	REFUSED("Zg===", B64_STD);
	REFUSED("Z===", B64_STD);
	REFUSED("====", B64_STD);
	REFUSED("=", B64_STD);
	REFUSED("==", B64_STD);
	REFUSED("Zm8==", B64_STD);
	REFUSED("=Zm8", B64_STD);
	REFUSED("Zm=8", B64_STD);
	REFUSED("Z=g=", B64_STD);
	REFUSED("Zm9v=", B64_STD);
	REFUSED("Zm9v====", B64_STD);
	/* Data after padding. */
	REFUSED("Zg==Zg==", B64_STD);
	REFUSED("Zm8=Zm8=", B64_STD);
	REFUSED("Zg==Zm9v", B64_STD);
	/* One character short of a byte. */
	REFUSED("Z", B64_STD);
	REFUSED("Zm9vY", B64_STD);
	/* Non-zero unused bits: "QQ==" is "A", "QR==" would decode to "A" as well. */
	REFUSED("QR==", B64_STD);
	REFUSED("QX==", B64_STD);
	REFUSED("Q/==", B64_STD);
	REFUSED("QUJ=", B64_STD);
	REFUSED("QUL=", B64_STD);
	REFUSED("//9=", B64_STD);
	/* NUL and non-ASCII. */
	REFUSED("Zm9\0", B64_STD);
	REFUSED("Zm9\x80", B64_STD);
	REFUSED("Zm9\xff", B64_STD);
	REFUSED("\xda\xa0==", B64_STD);
}

static void test_b64_refusals_url(void **state)
{
	REFUSED("Zm9v\n", B64_URL);
	REFUSED(" Zm9v", B64_URL);
	REFUSED("Zm 9v", B64_URL);
	/* The standard alphabet's characters. */
	REFUSED("+/+/", B64_URL);
	REFUSED("Zm9+", B64_URL);
	REFUSED("Zm9/", B64_URL);
	/* Any '='. */
	REFUSED("Zg==", B64_URL);
	REFUSED("Zm8=", B64_URL);
	REFUSED("Zg=", B64_URL);
	REFUSED("Zm9v=", B64_URL);
	REFUSED("=", B64_URL);
	REFUSED("Zm9vYmFy====", B64_URL);
	REFUSED("Z=g", B64_URL);
	/* Length % 4 == 1. */
	REFUSED("Z", B64_URL);
	REFUSED("Zm9vY", B64_URL);
	REFUSED("Zm9vYmFyZ", B64_URL);
	/* Non-zero unused bits. */
	REFUSED("QR", B64_URL);
	REFUSED("Q_", B64_URL);
	REFUSED("QUJ", B64_URL);
	REFUSED("__9", B64_URL);
	/* NUL and non-ASCII. */
	REFUSED("Zm9\0", B64_URL);
	REFUSED("Zm9\xc3", B64_URL);
}

#undef REFUSED

/*
 * Every byte value as the first character of a full quantum ("?AAA", where
 * '=' cannot be padding and all 6 bits are used): accepted exactly when it is
 * in the variant's alphabet, and decoded to its index.
 */
static void check_b64_alphabet(enum b64_variant v, const char *alphabet)
{
	struct buf b;

	assert_int_equal(strlen(alphabet), 64);
	assert_int_equal(buf_init(&b, 16, 0), 0);
	for (unsigned c = 0; c < 256; c++) {
		char s[4] = { (char)c, 'A', 'A', 'A' };
		const char *hit = c ? memchr(alphabet, (int)c, 64) : NULL;
		buf_reset(&b);
		if (!hit) {
			assert_int_equal(b64_decode(s, 4, v, &b), -EBADMSG);
		} else {
			assert_int_equal(b64_decode(s, 4, v, &b), 0);
			assert_int_equal(buf_len(&b), 3);
			assert_int_equal(buf_ptr(&b)[0], (hit - alphabet) << 2);
			assert_int_equal(buf_ptr(&b)[1], 0);
			assert_int_equal(buf_ptr(&b)[2], 0);
		}
	}
	/* And the encoder emits the same alphabet in order. */
	for (unsigned x = 0; x < 64; x++) {
		uint8_t in[3] = { 0, 0, (uint8_t)x };
		buf_reset(&b);
		assert_int_equal(b64_encode(in, 3, v, &b), 0);
		assert_int_equal(buf_len(&b), 4);
		assert_int_equal(buf_ptr(&b)[3], (uint8_t)alphabet[x]);
	}
	buf_release(&b);
}

static void test_b64_alphabets(void **state)
{
	check_b64_alphabet(B64_STD, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");
	check_b64_alphabet(B64_URL, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_");
}

static void test_b64_roundtrip_lengths(void **state)
{
	uint8_t data[200];
	struct buf enc, dec;

	for (size_t i = 0; i < sizeof(data); i++) {
		data[i] = (uint8_t)(i * 131 + 17);
	}
	assert_int_equal(buf_init(&enc, 1024, 0), 0);
	assert_int_equal(buf_init(&dec, 1024, 0), 0);
	for (int v = B64_STD; v <= B64_URL; v++) {
		for (size_t n = 0; n <= sizeof(data); n++) {
			size_t want = v == B64_STD ? (n + 2) / 3 * 4 : n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
			buf_reset(&enc);
			buf_reset(&dec);
			assert_int_equal(b64_encode(data, n, (enum b64_variant)v, &enc), 0);
			assert_int_equal(buf_len(&enc), want);
			assert_int_equal(
				b64_decode((const char *)buf_ptr(&enc), buf_len(&enc), (enum b64_variant)v, &dec), 0);
			assert_buf_equal(&dec, data, n);
		}
	}
	buf_release(&enc);
	buf_release(&dec);
}

static void test_b64_bounds(void **state)
{
	struct buf b, view;

	/* "foobar" -> 8 characters. */
	assert_int_equal(buf_init(&b, 8, 0), 0);
	assert_int_equal(b64_encode("foobar", 6, B64_STD, &b), 0);
	buf_release(&b);
	assert_int_equal(buf_init(&b, 7, 0), 0);
	assert_int_equal(b64_encode("foobar", 6, B64_STD, &b), -E2BIG);
	assert_int_equal(buf_len(&b), 0);
	buf_release(&b);

	/* "fo" -> "Zm8=" (4) in STD, "Zm8" (3) in URL. */
	assert_int_equal(buf_init(&b, 3, 0), 0);
	assert_int_equal(b64_encode("fo", 2, B64_STD, &b), -E2BIG);
	assert_int_equal(b64_encode("fo", 2, B64_URL, &b), 0);
	assert_buf_equal(&b, "Zm8", 3);
	buf_release(&b);

	/* "Zm9vYmE=" -> 5 bytes; the padding does not count. */
	assert_int_equal(buf_init(&b, 5, 0), 0);
	assert_int_equal(b64_decode("Zm9vYmE=", 8, B64_STD, &b), 0);
	buf_release(&b);
	assert_int_equal(buf_init(&b, 4, 0), 0);
	assert_int_equal(b64_decode("Zm9vYmE=", 8, B64_STD, &b), -E2BIG);
	assert_int_equal(b64_decode("Zm9vYmE", 7, B64_URL, &b), -E2BIG);
	assert_int_equal(buf_len(&b), 0);
	assert_int_equal(b64_decode("Zm9vYg", 6, B64_URL, &b), 0);
	assert_buf_equal(&b, "foob", 4);
	buf_release(&b);

	buf_view(&view, "abcd", 4);
	assert_int_equal(b64_encode("f", 1, B64_STD, &view), -EROFS);
	assert_int_equal(b64_decode("Zg==", 4, B64_STD, &view), -EROFS);
}

static void test_b64_bad_variant(void **state)
{
	struct buf b;

	assert_int_equal(buf_init(&b, 16, 0), 0);
	assert_int_equal(b64_encode("f", 1, (enum b64_variant)2, &b), -EINVAL);
	assert_int_equal(b64_decode("Zg==", 4, (enum b64_variant)2, &b), -EINVAL);
	assert_int_equal(buf_len(&b), 0);
	buf_release(&b);
}

/* ---- Ed25519 ---- */

struct ed25519_vector {
	const char *name;
	const char *priv;
	const char *pub;
	const char *msg;
	const char *sig;
};

/* RFC 8032 section 7.1. */
static const struct ed25519_vector rfc8032[] = {
	{
		"TEST 1",
		"9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
		"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
		"",
		"e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5"
		"f0595bbe24655141438e7a100b",
	},
	{
		"TEST 2",
		"4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
		"3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
		"72",
		"92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2e"
		"aeb4302aeeb00d291612bb0c00",
	},
	{
		"TEST 3",
		"c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
		"fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
		"af82",
		"6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15"
		"e9716ed28dc027beceea1ec40a",
	},
	{
		"TEST 1024",
		"f5e5767cf153319517630f226876b86c8160cc583bc013744c6bf255f5cc0ee5",
		"278117fc144c72340f67d0f2316e8386ceffbf2b2428c9c51fef7c597f1d426e",
		"08b8b2b733424243760fe426a4b54908632110a66c2f6591eabd3345e3e4eb98fa6e264bf09efe12ee50f8f54e9f77b1"
		"e355f6c50544e23fb1433ddf73be84d879de7c0046dc4996d9e773f4bc9efe5738829adb26c81b37c93a1b270b20329d"
		"658675fc6ea534e0810a4432826bf58c941efb65d57a338bbd2e26640f89ffbc1a858efcb8550ee3a5e1998bd177e93a"
		"7363c344fe6b199ee5d02e82d522c4feba15452f80288a821a579116ec6dad2b3b310da903401aa62100ab5d1a36553e"
		"06203b33890cc9b832f79ef80560ccb9a39ce767967ed628c6ad573cb116dbefefd75499da96bd68a8a97b928a8bbc10"
		"3b6621fcde2beca1231d206be6cd9ec7aff6f6c94fcd7204ed3455c68c83f4a41da4af2b74ef5c53f1d8ac70bdcb7ed1"
		"85ce81bd84359d44254d95629e9855a94a7c1958d1f8ada5d0532ed8a5aa3fb2d17ba70eb6248e594e1a2297acbbb39d"
		"502f1a8c6eb6f1ce22b3de1a1f40cc24554119a831a9aad6079cad88425de6bde1a9187ebb6092cf67bf2b13fd65f270"
		"88d78b7e883c8759d2c4f5c65adb7553878ad575f9fad878e80a0c9ba63bcbcc2732e69485bbc9c90bfbd62481d9089b"
		"eccf80cfe2df16a2cf65bd92dd597b0707e0917af48bbb75fed413d238f5555a7a569d80c3414a8d0859dc65a46128ba"
		"b27af87a71314f318c782b23ebfe808b82b0ce26401d2e22f04d83d1255dc51addd3b75a2b1ae0784504df543af8969b"
		"e3ea7082ff7fc9888c144da2af58429ec96031dbcad3dad9af0dcbaaaf268cb8fcffead94f3c7ca495e056a9b47acdb7"
		"51fb73e666c6c655ade8297297d07ad1ba5e43f1bca32301651339e22904cc8c42f58c30c04aafdb038dda0847dd988d"
		"cda6f3bfd15c4b4c4525004aa06eeff8ca61783aacec57fb3d1f92b0fe2fd1a85f6724517b65e614ad6808d6f6ee34df"
		"f7310fdc82aebfd904b01e1dc54b2927094b2db68d6f903b68401adebf5a7e08d78ff4ef5d63653a65040cf9bfd4aca7"
		"984a74d37145986780fc0b16ac451649de6188a7dbdf191f64b5fc5e2ab47b57f7f7276cd419c17a3ca8e1b939ae49e4"
		"88acba6b965610b5480109c8b17b80e1b7b750dfc7598d5d5011fd2dcc5600a32ef5b52a1ecc820e308aa342721aac09"
		"43bf6686b64b2579376504ccc493d97e6aed3fb0f9cd71a43dd497f01f17c0e2cb3797aa2a2f256656168e6c496afc5f"
		"b93246f6b1116398a346f1a641f3b041e989f7914f90cc2c7fff357876e506b50d334ba77c225bc307ba537152f3f161"
		"0e4eafe595f6d9d90d11faa933a15ef1369546868a7f3a45a96768d40fd9d03412c091c6315cf4fde7cb68606937380d"
		"b2eaaa707b4c4185c32eddcdd306705e4dc1ffc872eeee475a64dfac86aba41c0618983f8741c5ef68d3a101e8a3b8ca"
		"c60c905c15fc910840b94c00a0b9d0",
		"0aab4c900501b3e24d7cdf4663326a3a87df5e4843b2cbdb67cbf6e460fec350aa5371b1508f9f4528ecea23c436d94b5e8fcd"
		"4f681e30a6ac00a9704a188a03",
	},
	{
		"TEST SHA(abc)",
		"833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42",
		"ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
		/* SHA-512("abc") */
		"ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d44"
		"23643ce80e2a9ac94fa54ca49f",
		"dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b58909351fc9ac90b3ecfdfbc7c66431e0303dca17"
		"9c138ac17ad9bef1177331a704",
	},
};

static void test_ed25519_rfc8032(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(rfc8032); i++) {
		const struct ed25519_vector *t = &rfc8032[i];
		uint8_t priv[32], pub[32], got_pub[32], sig[64], got_sig[64], msg[1024];
		size_t n;

		unhex(t->priv, priv, sizeof(priv));
		unhex(t->pub, pub, sizeof(pub));
		unhex(t->sig, sig, sizeof(sig));
		n = unhex(t->msg, msg, sizeof(msg));
		if (i == 3) {
			assert_int_equal(n, 1023);
		}
		assert_int_equal(ed25519_public_from_private(priv, got_pub), 0);
		assert_memory_equal(got_pub, pub, 32);
		assert_int_equal(ed25519_check_public(pub), 0);
		/* Deterministic: the exact signature of the RFC. */
		assert_int_equal(ed25519_sign(priv, msg, n, got_sig), 0);
		assert_memory_equal(got_sig, sig, 64);
		if (ed25519_verify(pub, msg, n, sig) != 0) {
			fail_msg("%s does not verify", t->name);
		}
	}
}

/*
 * The signing key is cached per thread: alternating keys, repeating one, and
 * signing from a second thread must all give the RFC's exact signatures.
 */
static void sign_vector_check(size_t i)
{
	const struct ed25519_vector *t = &rfc8032[i];
	uint8_t priv[32], sig[64], got_sig[64], msg[1024];
	size_t n;

	unhex(t->priv, priv, sizeof(priv));
	unhex(t->sig, sig, sizeof(sig));
	n = unhex(t->msg, msg, sizeof(msg));
	assert_int_equal(ed25519_sign(priv, msg, n, got_sig), 0);
	assert_memory_equal(got_sig, sig, 64);
}

static void *sign_thread(void *arg)
{
	(void)arg;
	for (size_t k = 0; k < 3; k++) {
		sign_vector_check(k % ARRAY_SIZE(rfc8032));
	}
	return NULL;
}

static void test_ed25519_sign_key_cache(void **state)
{
	static const size_t order[] = { 0, 1, 0, 0, 2, 1, 1, 0 };
	pthread_t th;

	for (size_t k = 0; k < ARRAY_SIZE(order); k++) {
		sign_vector_check(order[k]);
	}
	assert_int_equal(pthread_create(&th, NULL, sign_thread, NULL), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	sign_vector_check(2);
}

static void load_vector(size_t i, uint8_t pub[32], uint8_t msg[1024], size_t *n, uint8_t sig[64])
{
	unhex(rfc8032[i].pub, pub, 32);
	unhex(rfc8032[i].sig, sig, 64);
	*n = unhex(rfc8032[i].msg, msg, 1024);
}

/*
 * The per-thread verify-key cache: keys alternating, and a signature checked
 * under the wrong key right after the right one (a hit must never answer for
 * another key), also in a fresh thread.
 */
static void *verify_cache_thread(void *arg)
{
	static const size_t order[] = { 0, 0, 1, 0, 2, 2, 1, 0 };
	uint8_t pub[32], other[32], msg[1024], sig[64];
	size_t n, m;

	(void)arg;
	for (size_t k = 0; k < ARRAY_SIZE(order); k++) {
		size_t i = order[k], j = (i + 1) % 3;

		load_vector(i, pub, msg, &n, sig);
		assert_int_equal(ed25519_verify(pub, msg, n, sig), 0);
		load_vector(j, other, msg + 512, &m, sig + 0);
		load_vector(i, pub, msg, &n, sig);
		assert_int_equal(ed25519_verify(other, msg, n, sig), -EBADMSG);
		assert_int_equal(ed25519_verify(pub, msg, n, sig), 0);
		sig[0] ^= 1;
		assert_int_equal(ed25519_verify(pub, msg, n, sig), -EBADMSG);
	}
	return NULL;
}

static void test_ed25519_verify_key_cache(void **state)
{
	pthread_t th;

	(void)state;
	assert_null(verify_cache_thread(NULL));
	assert_int_equal(pthread_create(&th, NULL, verify_cache_thread, NULL), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
}

static void test_ed25519_tampered(void **state)
{
	uint8_t pub[32], msg[1024], sig[64], other[32];
	size_t n;

	/* TEST 3: a 2-byte message. */
	load_vector(2, pub, msg, &n, sig);
	assert_int_equal(ed25519_verify(pub, msg, n, sig), 0);
	msg[0] ^= 0x01;
	assert_int_equal(ed25519_verify(pub, msg, n, sig), -EBADMSG);
	msg[0] ^= 0x01;
	assert_int_equal(ed25519_verify(pub, msg, n - 1, sig), -EBADMSG);
	msg[n] = 0;
	assert_int_equal(ed25519_verify(pub, msg, n + 1, sig), -EBADMSG);
	/* Every bit of the signature matters. */
	for (size_t bit = 0; bit < 512; bit++) {
		sig[bit / 8] ^= (uint8_t)(1 << (bit % 8));
		assert_int_equal(ed25519_verify(pub, msg, n, sig), -EBADMSG);
		sig[bit / 8] ^= (uint8_t)(1 << (bit % 8));
	}
	/* Another key. */
	unhex(rfc8032[0].pub, other, sizeof(other));
	assert_int_equal(ed25519_verify(other, msg, n, sig), -EBADMSG);
	/* A key whose y is canonical but names no curve point (y = 2). */
	memset(other, 0, sizeof(other));
	other[0] = 2;
	assert_int_equal(ed25519_check_public(other), 0);
	assert_int_equal(ed25519_verify(other, msg, n, sig), -EBADMSG);
	assert_int_equal(ed25519_verify(pub, msg, n, sig), 0);
}

/* S' = S + L: the same S modulo L, so a verifier that reduces S would accept it. */
static void test_ed25519_s_not_reduced(void **state)
{
	static const char *l_hex = "edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010";
	uint8_t pub[32], msg[1024], sig[64], l[32];
	unsigned carry = 0;
	size_t n;

	unhex(l_hex, l, sizeof(l));
	for (size_t i = 0; i < ARRAY_SIZE(rfc8032); i++) {
		load_vector(i, pub, msg, &n, sig);
		carry = 0;
		for (int j = 0; j < 32; j++) {
			unsigned s = sig[32 + j] + l[j] + carry;
			sig[32 + j] = (uint8_t)s;
			carry = s >> 8;
		}
		/* S < 2^253 and L < 2^253, so S + L still fits 256 bits. */
		assert_int_equal(carry, 0);
		assert_int_equal(ed25519_verify(pub, msg, n, sig), -EBADMSG);
	}
	/* S = L exactly. */
	load_vector(0, pub, msg, &n, sig);
	memcpy(sig + 32, l, 32);
	assert_int_equal(ed25519_verify(pub, msg, n, sig), -EBADMSG);
	/* S = 2^256 - 1. */
	memset(sig + 32, 0xff, 32);
	assert_int_equal(ed25519_verify(pub, msg, n, sig), -EBADMSG);
}

/*
 * OpenSSL's own Ed25519 verifier, called directly: the oracle that shows what
 * ed25519_verify adds on top of it. Test-only; src/ goes through crypto.c.
 */
static bool openssl_verify_raw(const uint8_t pub[32], const void *msg, size_t n, const uint8_t sig[64])
{
	EVP_PKEY *k = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, 32);
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	bool ok = k && c && EVP_DigestVerifyInit(c, NULL, NULL, NULL, k) == 1 &&
		  EVP_DigestVerify(c, sig, 64, msg, n) == 1;

	EVP_MD_CTX_free(c);
	EVP_PKEY_free(k);
	ERR_clear_error();
	return ok;
}

/*
 * With a public key A of small order and the signature (R = identity, S = 0),
 * the cofactorless equation [S]B = R + [k]A holds whenever [k]A is the
 * identity, i.e. for every message whose k = H(R || A || M) is a multiple of
 * A's order (1 in 8 messages at worst). Returns the number of the first 64
 * messages "m<i>" for which OpenSSL alone accepts the forgery, and checks that
 * ed25519_verify refuses all of them.
 */
static int forge_small_order(const uint8_t pub[32])
{
	uint8_t sig[64] = { 1 };
	int accepted = 0;

	for (int i = 0; i < 64; i++) {
		char m[8];
		int len = snprintf(m, sizeof(m), "m%d", i);
		if (openssl_verify_raw(pub, m, (size_t)len, sig)) {
			accepted++;
		}
		assert_int_equal(ed25519_verify(pub, m, (size_t)len, sig), -EBADMSG);
	}
	return accepted;
}

static const char *const small_order_canonical[] = {
	"0100000000000000000000000000000000000000000000000000000000000000", /* identity, order 1 */
	"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", /* (0, -1), order 2 */
	"0000000000000000000000000000000000000000000000000000000000000000", /* (sqrt(-1), 0), order 4 */
	"0000000000000000000000000000000000000000000000000000000000000080", /* (-sqrt(-1), 0), order 4 */
	"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", /* order 8 */
	"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85", /* order 8 */
	"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a", /* order 8 */
	"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa", /* order 8 */
};

/* Non-canonical encodings of the same points: x = 0 with the sign bit set; y = p, p + 1. */
static const char *const small_order_noncanonical[] = {
	"0100000000000000000000000000000000000000000000000000000000000080",
	"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
	"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
	"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
};

static void test_ed25519_small_order(void **state)
{
	uint8_t pub[32];

	/* Each canonical entry really is of small order: OpenSSL alone accepts a forgery. */
	for (size_t i = 0; i < ARRAY_SIZE(small_order_canonical); i++) {
		unhex(small_order_canonical[i], pub, sizeof(pub));
		assert_int_equal(ed25519_check_public(pub), -EBADMSG);
		if (forge_small_order(pub) == 0) {
			fail_msg("%s: no forgery found: not of small order?", small_order_canonical[i]);
		}
	}
	for (size_t i = 0; i < ARRAY_SIZE(small_order_noncanonical); i++) {
		unhex(small_order_noncanonical[i], pub, sizeof(pub));
		assert_int_equal(ed25519_check_public(pub), -EBADMSG);
		(void)forge_small_order(pub);
	}
}

/* y in [p, 2^255): non-canonical, whatever the sign bit; p - 2 is the largest canonical y not refused. */
static void test_ed25519_noncanonical(void **state)
{
	uint8_t pub[32];

	for (unsigned c = 0; c <= 18; c++) {
		for (unsigned sign = 0; sign <= 1; sign++) {
			memset(pub, 0xff, sizeof(pub));
			pub[0] = (uint8_t)(0xed + c);
			pub[31] = sign ? 0xff : 0x7f;
			if (ed25519_check_public(pub) != -EBADMSG) {
				fail_msg("y = p + %u (sign %u) accepted", c, sign);
			}
		}
	}
	/* One below: y = p - 2 is canonical (whether it is a curve point is the equation's business). */
	memset(pub, 0xff, sizeof(pub));
	pub[0] = 0xeb;
	pub[31] = 0x7f;
	assert_int_equal(ed25519_check_public(pub), 0);
	/* y = 2^255 - 1. */
	memset(pub, 0xff, sizeof(pub));
	assert_int_equal(ed25519_check_public(pub), -EBADMSG);
	/* y = p + 3 names a point of large order; its signatures must not count. */
	memset(pub, 0xff, sizeof(pub));
	pub[0] = 0xf0;
	pub[31] = 0x7f;
	{
		uint8_t sig[64] = { 1 };
		assert_int_equal(ed25519_verify(pub, "m", 1, sig), -EBADMSG);
	}
}

static void test_ed25519_keygen_sign_verify(void **state)
{
	uint8_t priv[32], pub[32], priv2[32], pub2[32], derived[32], sig[64];
	static const char msg[] = "tkbox keygen test";

	assert_int_equal(ed25519_keygen(priv, pub), 0);
	assert_int_equal(ed25519_keygen(priv2, pub2), 0);
	assert_memory_not_equal(priv, priv2, 32);
	assert_memory_not_equal(pub, pub2, 32);
	assert_int_equal(ed25519_public_from_private(priv, derived), 0);
	assert_memory_equal(derived, pub, 32);
	assert_int_equal(ed25519_check_public(pub), 0);

	assert_int_equal(ed25519_sign(priv, msg, sizeof(msg) - 1, sig), 0);
	assert_int_equal(ed25519_verify(pub, msg, sizeof(msg) - 1, sig), 0);
	assert_int_equal(ed25519_verify(pub2, msg, sizeof(msg) - 1, sig), -EBADMSG);

	/* Empty message, NULL pointer. */
	assert_int_equal(ed25519_sign(priv, NULL, 0, sig), 0);
	assert_int_equal(ed25519_verify(pub, "", 0, sig), 0);
	assert_int_equal(ed25519_verify(pub, NULL, 0, sig), 0);
	assert_int_equal(ed25519_sign(priv, NULL, 1, sig), -EINVAL);
	assert_int_equal(ed25519_verify(pub, NULL, 1, sig), -EINVAL);
}

/* ---- random ---- */

static void test_crypto_random(void **state)
{
	uint8_t a[32], b[32], zero[32] = { 0 };

	assert_int_equal(crypto_random(a, sizeof(a)), 0);
	assert_int_equal(crypto_random(b, sizeof(b)), 0);
	assert_memory_not_equal(a, b, sizeof(a));
	assert_memory_not_equal(a, zero, sizeof(a));
	assert_int_equal(crypto_random(NULL, 0), 0);
	assert_int_equal(crypto_random(NULL, 1), -EINVAL);
}

static void test_crypto_random_hex(void **state)
{
	char h[2 * CRYPTO_RANDOM_HEX_MAX + 2];

	memset(h, 'X', sizeof(h));
	assert_int_equal(crypto_random_hex(6, h), 0);
	assert_int_equal(strlen(h), 12);
	assert_int_equal(strspn(h, "0123456789abcdef"), 12);
	assert_int_equal(crypto_random_hex(CRYPTO_RANDOM_HEX_MAX, h), 0);
	assert_int_equal(strlen(h), 2 * CRYPTO_RANDOM_HEX_MAX);
	assert_int_equal(crypto_random_hex(CRYPTO_RANDOM_HEX_MAX + 1, h), -EINVAL);
	assert_int_equal(crypto_random_hex(0, h), 0);
	assert_string_equal(h, "");
}

static void test_sha256_hex(void **state)
{
	char hex[SHA256_HEX_LEN + 1];
	uint8_t md[SHA256_LEN];
	(void)state;
	assert_int_equal(sha256_hex("abc", 3, hex), 0);
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	assert_int_equal(sha256("", 0, md), 0);
	sha256_digest_hex(md, hex);
	assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ossl_error_mapping),
		cmocka_unit_test(test_sha256_vectors),
		cmocka_unit_test(test_sha256_million_a),
		cmocka_unit_test(test_sha256_incremental_equals_oneshot),
		cmocka_unit_test(test_sha256_spent_context),
		cmocka_unit_test(test_hmac_rfc4231),
		cmocka_unit_test(test_hmac_empty),
		cmocka_unit_test(test_crypto_equal),
		cmocka_unit_test(test_hex_encode),
		cmocka_unit_test(test_hex_decode),
		cmocka_unit_test(test_hex_decode_refusals),
		cmocka_unit_test(test_hex_decode_exhaustive),
		cmocka_unit_test(test_hex_roundtrip_all_bytes),
		cmocka_unit_test(test_hex_bounds),
		cmocka_unit_test(test_b64_rfc4648),
		cmocka_unit_test(test_b64_refusals_std),
		cmocka_unit_test(test_b64_refusals_url),
		cmocka_unit_test(test_b64_alphabets),
		cmocka_unit_test(test_b64_roundtrip_lengths),
		cmocka_unit_test(test_b64_bounds),
		cmocka_unit_test(test_b64_bad_variant),
		cmocka_unit_test(test_sha256_hex),
		cmocka_unit_test(test_ed25519_rfc8032),
		cmocka_unit_test(test_ed25519_sign_key_cache),
		cmocka_unit_test(test_ed25519_verify_key_cache),
		cmocka_unit_test(test_ed25519_tampered),
		cmocka_unit_test(test_ed25519_s_not_reduced),
		cmocka_unit_test(test_ed25519_small_order),
		cmocka_unit_test(test_ed25519_noncanonical),
		cmocka_unit_test(test_ed25519_keygen_sign_verify),
		cmocka_unit_test(test_crypto_random),
		cmocka_unit_test(test_crypto_random_hex),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
