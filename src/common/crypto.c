/* SPDX-License-Identifier: Apache-2.0 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "banned.h"
#include "crypto.h"

int crypto_ossl_error(char *msg, size_t msg_size)
{
	unsigned long e, first = 0;
	int sys;

	/* The first error is the root cause; the rest are the call chain above it. */
	while ((e = ERR_get_error()) != 0) {
		if (first == 0) {
			first = e;
		}
	}
	if (msg && msg_size > 0) {
		const char *reason = first ? ERR_reason_error_string(first) : "unknown libcrypto error";
		if (reason) {
			(void)snprintf(msg, msg_size, "%s", reason);
		} else {
			ERR_error_string_n(first, msg, msg_size);
		}
	}
	if (first == 0) {
		return -EIO;
	}
	if (ERR_SYSTEM_ERROR(first)) {
		sys = ERR_GET_REASON(first);
		return sys > 0 && sys < 4096 ? -sys : -EIO;
	}
	switch (ERR_GET_REASON(first)) {
	case ERR_R_MALLOC_FAILURE:
		return -ENOMEM;
	case ERR_R_PASSED_NULL_PARAMETER:
	case ERR_R_PASSED_INVALID_ARGUMENT:
		return -EINVAL;
	default:
		return -EIO;
	}
}

/* ---- SHA-256 ---- */

int sha256(const void *p, size_t n, uint8_t ret[SHA256_LEN])
{
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned len = 0;

	if (!p && n > 0) {
		return -EINVAL;
	}
	if (EVP_Digest(p ? p : "", n, md, &len, EVP_sha256(), NULL) != 1) {
		return crypto_ossl_error(NULL, 0);
	}
	if (len != SHA256_LEN) {
		return -EIO;
	}
	memcpy(ret, md, SHA256_LEN);
	return 0;
}

struct sha256_ctx {
	EVP_MD_CTX *md;
	bool done; /* after final: EVP needs a re-init we do not offer */
};

int sha256_new(struct sha256_ctx **ret)
{
	struct sha256_ctx *c = calloc(1, sizeof(*c));
	int r;

	if (!c) {
		return -ENOMEM;
	}
	c->md = EVP_MD_CTX_new();
	if (!c->md) {
		r = crypto_ossl_error(NULL, 0);
		free(c);
		return r;
	}
	if (EVP_DigestInit_ex(c->md, EVP_sha256(), NULL) != 1) {
		r = crypto_ossl_error(NULL, 0);
		sha256_free(c);
		return r;
	}
	*ret = c;
	return 0;
}

int sha256_update(struct sha256_ctx *c, const void *p, size_t n)
{
	if (!c || c->done || (!p && n > 0)) {
		return -EINVAL;
	}
	if (n == 0) {
		return 0;
	}
	if (EVP_DigestUpdate(c->md, p, n) != 1) {
		return crypto_ossl_error(NULL, 0);
	}
	return 0;
}

int sha256_final(struct sha256_ctx *c, uint8_t ret[SHA256_LEN])
{
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned len = 0;

	if (!c || c->done) {
		return -EINVAL;
	}
	c->done = true;
	if (EVP_DigestFinal_ex(c->md, md, &len) != 1) {
		return crypto_ossl_error(NULL, 0);
	}
	if (len != SHA256_LEN) {
		return -EIO;
	}
	memcpy(ret, md, SHA256_LEN);
	return 0;
}

void sha256_free(struct sha256_ctx *c)
{
	if (!c) {
		return;
	}
	EVP_MD_CTX_free(c->md);
	free(c);
}

/* ---- HMAC-SHA256 ---- */

int hmac_sha256(const void *key, size_t keylen, const void *p, size_t n, uint8_t ret[SHA256_LEN])
{
	uint8_t mac[EVP_MAX_MD_SIZE];
	size_t len = 0;

	if ((!key && keylen > 0) || (!p && n > 0)) {
		return -EINVAL;
	}
	/* A NULL key would mean "keep the previous key" to EVP_MAC_init: pass "" for the empty key. */
	if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, key ? key : "", keylen, p ? p : (const void *)"", n, mac,
		       sizeof(mac), &len)) {
		OPENSSL_cleanse(mac, sizeof(mac));
		return crypto_ossl_error(NULL, 0);
	}
	if (len != SHA256_LEN) {
		OPENSSL_cleanse(mac, sizeof(mac));
		return -EIO;
	}
	memcpy(ret, mac, SHA256_LEN);
	OPENSSL_cleanse(mac, sizeof(mac));
	return 0;
}

bool crypto_equal(const void *a, const void *b, size_t n)
{
	if (n == 0) {
		return true;
	}
	return CRYPTO_memcmp(a, b, n) == 0;
}

/* ---- Encodings ----
 *
 * Hand-written rather than EVP_EncodeBlock/EVP_DecodeBlock: EVP_DecodeBlock
 * trims whitespace, returns a length that counts the bytes the padding stands
 * for (the caller must re-parse the padding to learn the real length), never
 * checks the unused bits of the last character, and knows only the standard
 * alphabet. Re-checking all of that around it would be longer than this codec
 * (the fuzz target still compares the two on canonical input).
 *
 * Keys (seeds, HMAC keys) pass through these codecs, so characters are mapped
 * with the masks below instead of tables or branches (after libsodium's
 * codecs): code branches only on lengths and on the final valid/invalid verdict.
 * The ct_* helpers take values 0..255 and return 0xff for true, 0 for false.
 */

static unsigned ct_eq(unsigned x, unsigned y)
{
	return (((0U - (x ^ y)) >> 8) & 0xff) ^ 0xff;
}

static unsigned ct_gt(unsigned x, unsigned y)
{
	return ((y - x) >> 8) & 0xff;
}

static unsigned ct_ge(unsigned x, unsigned y)
{
	return ct_gt(y, x) ^ 0xff;
}

static unsigned ct_lt(unsigned x, unsigned y)
{
	return ct_gt(y, x);
}

static unsigned ct_le(unsigned x, unsigned y)
{
	return ct_ge(y, x);
}

/* Reserve n bytes at the end of out; n == 0 touches nothing (mirrors buf_put). */
static int reserve_out(struct buf *out, size_t n, uint8_t **ret)
{
	if (n == 0) {
		*ret = NULL;
		return (out->flags & BUF_READONLY) ? -EROFS : 0;
	}
	return buf_reserve(out, n, ret);
}

static uint8_t hex_char(unsigned x)
{
	return (uint8_t)((ct_lt(x, 10) & (x + '0')) | (ct_ge(x, 10) & (x + 'a' - 10)));
}

/* 0..15, or 0xff when c is not a hex digit. */
static unsigned hex_value(unsigned c)
{
	unsigned x = (ct_ge(c, '0') & ct_le(c, '9') & (c - '0')) | (ct_ge(c, 'a') & ct_le(c, 'f') & (c - 'a' + 10)) |
		     (ct_ge(c, 'A') & ct_le(c, 'F') & (c - 'A' + 10));
	return x | (ct_eq(x, 0) & (ct_eq(c, '0') ^ 0xff));
}

int hex_encode(const void *p, size_t n, struct buf *out)
{
	const uint8_t *in = p;
	uint8_t *dst;
	size_t outlen;
	int r;

	if (!p && n > 0) {
		return -EINVAL;
	}
	if (size_mul(n, 2, &outlen) < 0) {
		return -E2BIG;
	}
	r = reserve_out(out, outlen, &dst);
	if (r < 0) {
		return r;
	}
	for (size_t i = 0; i < n; i++) {
		dst[2 * i] = hex_char(in[i] >> 4);
		dst[2 * i + 1] = hex_char(in[i] & 0x0f);
	}
	return 0;
}

void sha256_digest_hex(const uint8_t md[SHA256_LEN], char ret[SHA256_HEX_LEN + 1])
{
	for (size_t i = 0; i < SHA256_LEN; i++) {
		ret[2 * i] = (char)hex_char(md[i] >> 4);
		ret[2 * i + 1] = (char)hex_char(md[i] & 0x0f);
	}
	ret[SHA256_HEX_LEN] = '\0';
}

int sha256_hex(const void *p, size_t n, char ret[SHA256_HEX_LEN + 1])
{
	uint8_t md[SHA256_LEN];
	int r = sha256(p, n, md);

	if (r < 0) {
		return r;
	}
	sha256_digest_hex(md, ret);
	return 0;
}

/* Decode n (even) hex characters; writes n/2 bytes to dst when dst != NULL. Returns false on a non-hex character. */
static bool hex_decode_into(const char *s, size_t n, uint8_t *dst)
{
	unsigned bad = 0;

	for (size_t i = 0; i < n; i += 2) {
		unsigned hi = hex_value((unsigned char)s[i]);
		unsigned lo = hex_value((unsigned char)s[i + 1]);
		bad |= ct_eq(hi, 0xff) | ct_eq(lo, 0xff);
		if (dst) {
			dst[i / 2] = (uint8_t)(((hi & 0x0f) << 4) | (lo & 0x0f));
		}
	}
	return bad == 0;
}

int hex_decode(const char *s, size_t n, struct buf *out)
{
	uint8_t *dst;
	int r;

	if (!s && n > 0) {
		return -EINVAL;
	}
	if (n % 2 != 0) {
		return -EBADMSG;
	}
	/* Validate first, then reserve: out stays unchanged on failure. */
	if (!hex_decode_into(s, n, NULL)) {
		return -EBADMSG;
	}
	r = reserve_out(out, n / 2, &dst);
	if (r < 0) {
		return r;
	}
	if (dst) {
		(void)hex_decode_into(s, n, dst);
	}
	return 0;
}

/* The two characters that differ between the alphabets (RFC 4648 sections 4 and 5). */
static int b64_alphabet(enum b64_variant v, unsigned *ret_c62, unsigned *ret_c63)
{
	switch (v) {
	case B64_STD:
		*ret_c62 = '+';
		*ret_c63 = '/';
		return 0;
	case B64_URL:
		*ret_c62 = '-';
		*ret_c63 = '_';
		return 0;
	default:
		return -EINVAL;
	}
}

static uint8_t b64_char(unsigned x, unsigned c62, unsigned c63)
{
	return (uint8_t)((ct_lt(x, 26) & (x + 'A')) | (ct_ge(x, 26) & ct_lt(x, 52) & (x + 'a' - 26)) |
			 (ct_ge(x, 52) & ct_lt(x, 62) & (x + '0' - 52)) | (ct_eq(x, 62) & c62) | (ct_eq(x, 63) & c63));
}

/* 0..63, or 0xff when c is outside the alphabet ('=' included). */
static unsigned b64_value(unsigned c, unsigned c62, unsigned c63)
{
	unsigned x = (ct_ge(c, 'A') & ct_le(c, 'Z') & (c - 'A')) | (ct_ge(c, 'a') & ct_le(c, 'z') & (c - 'a' + 26)) |
		     (ct_ge(c, '0') & ct_le(c, '9') & (c - '0' + 52)) | (ct_eq(c, c62) & 62) | (ct_eq(c, c63) & 63);
	return x | (ct_eq(x, 0) & (ct_eq(c, 'A') ^ 0xff));
}

int b64_encode(const void *p, size_t n, enum b64_variant v, struct buf *out)
{
	const uint8_t *in = p;
	unsigned c62, c63;
	size_t full = n / 3, rem = n % 3, tail, outlen, o = 0, i;
	uint8_t *dst;
	int r;

	if (!p && n > 0) {
		return -EINVAL;
	}
	r = b64_alphabet(v, &c62, &c63);
	if (r < 0) {
		return r;
	}
	/* A partial group: 2 or 3 characters, padded to 4 in STD. */
	tail = rem == 0 ? 0 : v == B64_STD ? 4 : rem + 1;
	if (size_mul(full, 4, &outlen) < 0 || size_add(outlen, tail, &outlen) < 0) {
		return -E2BIG;
	}
	r = reserve_out(out, outlen, &dst);
	if (r < 0) {
		return r;
	}
	for (i = 0; i < full * 3; i += 3) {
		uint32_t w = ((uint32_t)in[i] << 16) | ((uint32_t)in[i + 1] << 8) | in[i + 2];
		dst[o++] = b64_char(w >> 18, c62, c63);
		dst[o++] = b64_char((w >> 12) & 0x3f, c62, c63);
		dst[o++] = b64_char((w >> 6) & 0x3f, c62, c63);
		dst[o++] = b64_char(w & 0x3f, c62, c63);
	}
	if (rem > 0) {
		uint32_t w = ((uint32_t)in[i] << 16) | (rem == 2 ? (uint32_t)in[i + 1] << 8 : 0);
		dst[o++] = b64_char(w >> 18, c62, c63);
		dst[o++] = b64_char((w >> 12) & 0x3f, c62, c63);
		if (rem == 2) {
			dst[o++] = b64_char((w >> 6) & 0x3f, c62, c63);
		}
		if (v == B64_STD) {
			while (o < outlen) {
				dst[o++] = '=';
			}
		}
	}
	return 0;
}

/*
 * Decode `chars` alphabet characters (padding already removed, chars % 4 !=
 * 1); writes to dst when dst != NULL. False when a character is outside the
 * alphabet or the bits of the last character that fall beyond the last byte
 * are not zero ("QR==" would otherwise decode like "QQ==").
 */
static bool b64_decode_into(const char *s, size_t chars, unsigned c62, unsigned c63, uint8_t *dst)
{
	unsigned bad = 0, bits = 0;
	uint32_t acc = 0;
	size_t o = 0;

	for (size_t i = 0; i < chars; i++) {
		unsigned x = b64_value((unsigned char)s[i], c62, c63);
		bad |= ct_eq(x, 0xff);
		acc = (acc << 6) | (x & 0x3f);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (dst) {
				dst[o] = (uint8_t)(acc >> bits);
			}
			o++;
			acc &= (1U << bits) - 1;
		}
	}
	return (bad | acc) == 0;
}

int b64_decode(const char *s, size_t n, enum b64_variant v, struct buf *out)
{
	unsigned c62, c63;
	size_t chars = n, outlen;
	uint8_t *dst;
	int r;

	if (!s && n > 0) {
		return -EINVAL;
	}
	r = b64_alphabet(v, &c62, &c63);
	if (r < 0) {
		return r;
	}
	if (v == B64_STD) {
		/* Whole quanta only; at most two '=' and only at the end (any other '=' is outside the alphabet). */
		if (n % 4 != 0) {
			return -EBADMSG;
		}
		if (n > 0 && s[n - 1] == '=') {
			chars--;
			if (s[n - 2] == '=') {
				chars--;
			}
		}
	}
	/* One character carries 6 bits: less than a byte. */
	if (chars % 4 == 1) {
		return -EBADMSG;
	}
	outlen = chars / 4 * 3 + (chars % 4 ? chars % 4 - 1 : 0);
	if (!b64_decode_into(s, chars, c62, c63, NULL)) {
		return -EBADMSG;
	}
	r = reserve_out(out, outlen, &dst);
	if (r < 0) {
		return r;
	}
	if (dst) {
		(void)b64_decode_into(s, chars, c62, c63, dst);
	}
	return 0;
}

/* ---- Ed25519 ---- */

/* p = 2^255 - 19 and L = 2^252 + 27742317777372353535851937790883648493, little-endian. */
static const uint8_t ed25519_p[32] = {
	0xed, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
};
static const uint8_t ed25519_l[32] = {
	0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10,
};

/*
 * The y coordinates (sign bit cleared) of the 8 points of order dividing 8:
 * the identity (0, 1); (0, -1) of order 2; (+-sqrt(-1), 0) of order 4; and
 * the four points of order 8, whose doubles are the order-4 points, so that
 * x^2 = -y^2 and d*y^4 + 2*y^2 - 1 = 0. The last two are the non-canonical
 * encodings p and p + 1 of y = 0 and y = 1 (the y < p check refuses them
 * too; they stay here so that this list alone is complete). Comparing with
 * the sign bit cleared also catches x = 0 with the sign bit set. The unit
 * test proves each entry is of small order by forging a signature that
 * OpenSSL's own verifier accepts.
 */
static const uint8_t ed25519_small_order_y[][32] = {
	{ 0 }, /* y = 0: order 4 */
	{ 1 }, /* y = 1: the identity */
	{
		/* y = p - 1: order 2 */
		0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
	},
	{
		/* order 8 */
		0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0,
		0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05,
	},
	{
		/* order 8 */
		0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67, 0x0f,
		0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a,
	},
	{
		/* y = p, non-canonical 0: order 4 */
		0xed, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
	},
	{
		/* y = p + 1, non-canonical 1: the identity */
		0xee, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
	},
};

/* a < b for 32-byte little-endian numbers. Variable time: only public values (keys, signatures) come here. */
static bool le256_lt(const uint8_t a[32], const uint8_t b[32])
{
	for (size_t i = 32; i-- > 0;) {
		if (a[i] != b[i]) {
			return a[i] < b[i];
		}
	}
	return false;
}

int ed25519_check_public(const uint8_t pub[ED25519_PUB_LEN])
{
	uint8_t y[32];

	memcpy(y, pub, sizeof(y));
	y[31] &= 0x7f;
	if (!le256_lt(y, ed25519_p)) {
		return -EBADMSG;
	}
	for (size_t i = 0; i < ARRAY_SIZE(ed25519_small_order_y); i++) {
		if (memcmp(y, ed25519_small_order_y[i], sizeof(y)) == 0) {
			return -EBADMSG;
		}
	}
	return 0;
}

static int ed25519_pkey_private(const uint8_t priv[ED25519_PRIV_LEN], EVP_PKEY **ret)
{
	EVP_PKEY *pkey = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, priv, ED25519_PRIV_LEN);
	if (!pkey) {
		return crypto_ossl_error(NULL, 0);
	}
	*ret = pkey;
	return 0;
}

int ed25519_public_from_private(const uint8_t priv[ED25519_PRIV_LEN], uint8_t ret_pub[ED25519_PUB_LEN])
{
	EVP_PKEY *pkey = NULL;
	uint8_t pub[ED25519_PUB_LEN];
	size_t len = sizeof(pub);
	int r;

	r = ed25519_pkey_private(priv, &pkey);
	if (r < 0) {
		return r;
	}
	if (EVP_PKEY_get_raw_public_key(pkey, pub, &len) != 1) {
		r = crypto_ossl_error(NULL, 0);
	} else if (len != ED25519_PUB_LEN) {
		r = -EIO;
	} else {
		memcpy(ret_pub, pub, ED25519_PUB_LEN);
	}
	EVP_PKEY_free(pkey);
	return r;
}

int ed25519_keygen(uint8_t ret_priv[ED25519_PRIV_LEN], uint8_t ret_pub[ED25519_PUB_LEN])
{
	uint8_t priv[ED25519_PRIV_LEN], pub[ED25519_PUB_LEN];
	int r;

	r = crypto_random(priv, sizeof(priv));
	if (r >= 0) {
		r = ed25519_public_from_private(priv, pub);
	}
	if (r >= 0) {
		memcpy(ret_priv, priv, sizeof(priv));
		memcpy(ret_pub, pub, sizeof(pub));
	}
	OPENSSL_cleanse(priv, sizeof(priv));
	return r;
}

/*
 * Building an EVP_PKEY from an Ed25519 seed derives the public key, a scalar
 * multiplication as costly as the signature itself; building one from a
 * public key costs a provider look-up. A signer signs every record with the
 * same key and a verifier checks runs of records under one key, so each
 * thread keeps the private key it signed with last and the public key it
 * verified with last (the seed compared in constant time; freed, and the
 * seed wiped, at thread exit).
 */
struct pkey_cache {
	uint8_t seed[ED25519_PRIV_LEN];
	EVP_PKEY *priv;
	uint8_t pub[ED25519_PUB_LEN];
	EVP_PKEY *verify;
};

static pthread_key_t pkey_cache_key;
static pthread_once_t pkey_cache_once = PTHREAD_ONCE_INIT;
static bool pkey_cache_ok;

static void pkey_cache_free(void *p)
{
	struct pkey_cache *c = p;

	if (c) {
		EVP_PKEY_free(c->priv);
		EVP_PKEY_free(c->verify);
		OPENSSL_cleanse(c, sizeof(*c));
		free(c);
	}
}

static void pkey_cache_init(void)
{
	pkey_cache_ok = pthread_key_create(&pkey_cache_key, pkey_cache_free) == 0;
}

/* This thread's cache, made on first use; NULL when there is none (then nothing is cached). */
static struct pkey_cache *pkey_cache_get(void)
{
	struct pkey_cache *c;

	(void)pthread_once(&pkey_cache_once, pkey_cache_init);
	if (!pkey_cache_ok) {
		return NULL;
	}
	c = pthread_getspecific(pkey_cache_key);
	if (!c) {
		c = calloc(1, sizeof(*c));
		if (c && pthread_setspecific(pkey_cache_key, c) != 0) {
			free(c);
			c = NULL;
		}
	}
	return c;
}

/* Keep a reference to pkey in *slot (the previous one is released); without a reference nothing is kept. */
static bool pkey_cache_keep(EVP_PKEY **slot, EVP_PKEY *pkey)
{
	if (EVP_PKEY_up_ref(pkey) != 1) {
		return false;
	}
	EVP_PKEY_free(*slot);
	*slot = pkey;
	return true;
}

/* A new reference to the EVP_PKEY for priv: from this thread's cache when it holds that key. */
static int ed25519_pkey_private_cached(const uint8_t priv[ED25519_PRIV_LEN], EVP_PKEY **ret)
{
	struct pkey_cache *c = pkey_cache_get();
	EVP_PKEY *pkey;
	int r;

	if (c && c->priv && CRYPTO_memcmp(c->seed, priv, ED25519_PRIV_LEN) == 0) {
		if (EVP_PKEY_up_ref(c->priv) != 1) {
			return crypto_ossl_error(NULL, 0);
		}
		*ret = c->priv;
		return 0;
	}
	r = ed25519_pkey_private(priv, &pkey);
	if (r < 0) {
		return r;
	}
	if (c && pkey_cache_keep(&c->priv, pkey)) {
		memcpy(c->seed, priv, ED25519_PRIV_LEN);
	}
	*ret = pkey;
	return 0;
}

/* A new reference to the EVP_PKEY for pub (checked by the caller): from this thread's cache when it holds it. */
static int ed25519_pkey_public_cached(const uint8_t pub[ED25519_PUB_LEN], EVP_PKEY **ret)
{
	struct pkey_cache *c = pkey_cache_get();
	EVP_PKEY *pkey;

	if (c && c->verify && memcmp(c->pub, pub, ED25519_PUB_LEN) == 0) {
		if (EVP_PKEY_up_ref(c->verify) != 1) {
			return crypto_ossl_error(NULL, 0);
		}
		*ret = c->verify;
		return 0;
	}
	pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, ED25519_PUB_LEN);
	if (!pkey) {
		return crypto_ossl_error(NULL, 0);
	}
	if (c && pkey_cache_keep(&c->verify, pkey)) {
		memcpy(c->pub, pub, ED25519_PUB_LEN);
	}
	*ret = pkey;
	return 0;
}

int ed25519_sign(const uint8_t priv[ED25519_PRIV_LEN], const void *msg, size_t n, uint8_t ret_sig[ED25519_SIG_LEN])
{
	EVP_PKEY *pkey = NULL;
	EVP_MD_CTX *ctx = NULL;
	uint8_t sig[ED25519_SIG_LEN];
	size_t siglen = sizeof(sig);
	int r;

	if (!msg && n > 0) {
		return -EINVAL;
	}
	r = ed25519_pkey_private_cached(priv, &pkey);
	if (r < 0) {
		return r;
	}
	ctx = EVP_MD_CTX_new();
	if (!ctx || EVP_DigestSignInit(ctx, NULL, NULL, NULL, pkey) != 1 ||
	    EVP_DigestSign(ctx, sig, &siglen, msg ? msg : (const void *)"", n) != 1) {
		r = crypto_ossl_error(NULL, 0);
		goto out;
	}
	if (siglen != ED25519_SIG_LEN) {
		r = -EIO;
		goto out;
	}
	memcpy(ret_sig, sig, sizeof(sig));
	r = 0;
out:
	EVP_MD_CTX_free(ctx);
	EVP_PKEY_free(pkey);
	return r;
}

int ed25519_verify(const uint8_t pub[ED25519_PUB_LEN], const void *msg, size_t n, const uint8_t sig[ED25519_SIG_LEN])
{
	EVP_PKEY *pkey = NULL;
	EVP_MD_CTX *ctx = NULL;
	int r;

	if (!msg && n > 0) {
		return -EINVAL;
	}
	/*
	 * OpenSSL checks S < L and is cofactorless, but accepts small-order
	 * and non-canonical public keys, with which one signature can be made
	 * to verify for many messages. S < L is checked here as well so that
	 * strictness does not depend on the OpenSSL version.
	 */
	r = ed25519_check_public(pub);
	if (r < 0) {
		return r;
	}
	if (!le256_lt(sig + 32, ed25519_l)) {
		return -EBADMSG;
	}
	r = ed25519_pkey_public_cached(pub, &pkey);
	if (r < 0) {
		return r;
	}
	ctx = EVP_MD_CTX_new();
	if (!ctx || EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pkey) != 1) {
		r = crypto_ossl_error(NULL, 0);
		goto out;
	}
	r = EVP_DigestVerify(ctx, sig, ED25519_SIG_LEN, msg ? msg : (const void *)"", n);
	if (r == 1) {
		r = 0;
	} else if (r == 0) {
		/* A bad signature; but an allocation failure inside also returns 0. */
		r = crypto_ossl_error(NULL, 0);
		if (r != -ENOMEM) {
			r = -EBADMSG;
		}
	} else {
		r = crypto_ossl_error(NULL, 0);
	}
out:
	EVP_MD_CTX_free(ctx);
	EVP_PKEY_free(pkey);
	return r;
}

int crypto_random(void *p, size_t n)
{
	uint8_t *q = p;

	if (!p && n > 0) {
		return -EINVAL;
	}
	/* RAND_bytes takes an int. */
	while (n > 0) {
		int chunk = n > INT_MAX ? INT_MAX : (int)n;
		if (RAND_bytes(q, chunk) != 1) {
			return crypto_ossl_error(NULL, 0);
		}
		q += chunk;
		n -= (size_t)chunk;
	}
	return 0;
}

int crypto_random_hex(size_t nbytes, char *out)
{
	static const char digits[] = "0123456789abcdef";
	uint8_t b[CRYPTO_RANDOM_HEX_MAX];
	int r;

	if (nbytes > sizeof(b) || !out) {
		return -EINVAL;
	}
	r = crypto_random(b, nbytes);
	if (r < 0) {
		return r;
	}
	for (size_t i = 0; i < nbytes; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 0xf];
	}
	out[2 * nbytes] = '\0';
	return 0;
}
