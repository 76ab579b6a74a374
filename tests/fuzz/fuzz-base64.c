/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the encoders in crypto.c (base64 both variants, and
 * hex, the other decoder of untrusted text there). Properties, any failure
 * aborts:
 *  - decoding is canonical: whatever decodes re-encodes to the identical
 *    input (hex: to the input lower-cased);
 *  - decode(encode(x)) == x, and encode's length is the documented one;
 *  - a refused input leaves the output buffer untouched and fails -EBADMSG;
 *  - on canonical input the standard variant agrees with OpenSSL's
 *    EVP_EncodeBlock / EVP_DecodeBlock (which are laxer, so only one way).
 */
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "banned.h"
#include "crypto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                       \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

static size_t b64_len(size_t n, enum b64_variant v)
{
	if (v == B64_STD) {
		return (n + 2) / 3 * 4;
	}
	return n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
}

static void check_std_against_openssl(const uint8_t *data, size_t size, const struct buf *dec, const struct buf *enc)
{
	uint8_t *ref;
	size_t pad = 0;
	int r;

	/* Our accepted input: OpenSSL must decode it to our bytes plus one zero byte per '='. */
	if (dec) {
		ref = malloc(size / 4 * 3 + 1);
		CHECK(ref);
		r = EVP_DecodeBlock(ref, data, (int)size);
		if (size > 0 && data[size - 1] == '=') {
			pad = size > 1 && data[size - 2] == '=' ? 2 : 1;
		}
		CHECK(r >= 0 && (size_t)r == buf_len(dec) + pad);
		CHECK(buf_len(dec) == 0 || memcmp(ref, buf_ptr(dec), buf_len(dec)) == 0);
		for (size_t i = 0; i < pad; i++) {
			CHECK(ref[buf_len(dec) + i] == 0);
		}
		free(ref);
	}
	/* Our encoding of data: byte-identical to OpenSSL's. */
	if (enc) {
		ref = malloc(b64_len(size, B64_STD) + 1);
		CHECK(ref);
		r = EVP_EncodeBlock(ref, data, (int)size);
		CHECK(r >= 0 && (size_t)r == buf_len(enc));
		CHECK(r == 0 || memcmp(ref, buf_ptr(enc), (size_t)r) == 0);
		free(ref);
	}
}

/* Decode s; on success the re-encoding must be s itself; on failure out is untouched. */
static void check_decode(const uint8_t *s, size_t n, enum b64_variant v)
{
	struct buf dec, enc;
	int r;

	CHECK(buf_init(&dec, n + 1, 0) == 0);
	CHECK(buf_init(&enc, n + 1, 0) == 0);
	r = b64_decode((const char *)s, n, v, &dec);
	if (r == 0) {
		CHECK(b64_encode(buf_ptr(&dec), buf_len(&dec), v, &enc) == 0);
		CHECK(buf_len(&enc) == n);
		CHECK(n == 0 || memcmp(buf_ptr(&enc), s, n) == 0);
		if (v == B64_STD) {
			check_std_against_openssl(s, n, &dec, NULL);
		}
	} else {
		CHECK(r == -EBADMSG);
		CHECK(buf_len(&dec) == 0);
	}
	buf_release(&dec);
	buf_release(&enc);
}

static void fuzz_b64(const uint8_t *data, size_t size, enum b64_variant v)
{
	/* The variant's alphabet plus '=': mapping the input onto it reaches the accepting paths far more often. */
	static const char std65[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=";
	static const char url65[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=";
	const char *alphabet = v == B64_STD ? std65 : url65;
	struct buf enc, back;
	uint8_t *mapped;

	check_decode(data, size, v);

	mapped = malloc(size + 1);
	CHECK(mapped);
	for (size_t i = 0; i < size; i++) {
		mapped[i] = (uint8_t)alphabet[data[i] % 65];
	}
	check_decode(mapped, size, v);
	free(mapped);

	CHECK(buf_init(&enc, b64_len(size, B64_STD) + 1, 0) == 0);
	CHECK(buf_init(&back, size + 1, 0) == 0);
	CHECK(b64_encode(data, size, v, &enc) == 0);
	CHECK(buf_len(&enc) == b64_len(size, v));
	CHECK(b64_decode((const char *)buf_ptr(&enc), buf_len(&enc), v, &back) == 0);
	CHECK(buf_len(&back) == size);
	CHECK(size == 0 || memcmp(buf_ptr(&back), data, size) == 0);
	if (v == B64_STD) {
		check_std_against_openssl(data, size, NULL, &enc);
	}
	buf_release(&enc);
	buf_release(&back);
}

static void fuzz_hex(const uint8_t *data, size_t size)
{
	struct buf dec, enc, back;
	int r;

	CHECK(buf_init(&dec, size + 1, 0) == 0);
	CHECK(buf_init(&enc, 2 * size + 1, 0) == 0);
	CHECK(buf_init(&back, size + 1, 0) == 0);

	r = hex_decode((const char *)data, size, &dec);
	if (r == 0) {
		CHECK(hex_encode(buf_ptr(&dec), buf_len(&dec), &enc) == 0);
		CHECK(buf_len(&enc) == size);
		for (size_t i = 0; i < size; i++) {
			uint8_t c = data[i] >= 'A' && data[i] <= 'F' ? (uint8_t)(data[i] + 32) : data[i];
			CHECK(buf_ptr(&enc)[i] == c);
		}
	} else {
		CHECK(r == -EBADMSG);
		CHECK(buf_len(&dec) == 0);
	}

	buf_reset(&enc);
	CHECK(hex_encode(data, size, &enc) == 0);
	CHECK(buf_len(&enc) == 2 * size);
	CHECK(hex_decode((const char *)buf_ptr(&enc), buf_len(&enc), &back) == 0);
	CHECK(buf_len(&back) == size);
	CHECK(size == 0 || memcmp(buf_ptr(&back), data, size) == 0);

	buf_release(&dec);
	buf_release(&enc);
	buf_release(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* EVP_*Block take an int length; libFuzzer inputs stay far below it. */
	if (size > (1 << 20)) {
		return 0;
	}
	fuzz_b64(data, size, B64_STD);
	fuzz_b64(data, size, B64_URL);
	fuzz_hex(data, size);
	return 0;
}
