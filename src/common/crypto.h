/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_CRYPTO_H
#define TKBOX_CRYPTO_H

#include "buf.h"

/*
 * Helpers over OpenSSL 3: the one place that calls libcrypto for hashing,
 * MACs, encodings and Ed25519. OpenSSL's error queue is drained here and
 * turned into -errno (crypto_ossl_error); callers never see it.
 */

#define SHA256_LEN 32
#define ED25519_PUB_LEN 32
#define ED25519_PRIV_LEN 32 /* the seed */
#define ED25519_SIG_LEN 64

/*
 * Drain OpenSSL's error queue (copying the first reason into msg when msg !=
 * NULL and msg_size > 0; always NUL-terminated) and return the first error as
 * -errno: -ENOMEM for an allocation failure, the errno of a system error,
 * -EINVAL for an invalid argument, -EIO for everything else, including an
 * empty queue. Never returns >= 0.
 */
int crypto_ossl_error(char *msg, size_t msg_size);

_wur_ int sha256(const void *p, size_t n, uint8_t ret[SHA256_LEN]);
#define SHA256_HEX_LEN (2 * SHA256_LEN)
/* A digest as lower-case hex, NUL-terminated. */
void sha256_digest_hex(const uint8_t md[SHA256_LEN], char ret[SHA256_HEX_LEN + 1]);
/* SHA-256 of p[0..n) as lower-case hex, NUL-terminated; ret is written only on success. */
_wur_ int sha256_hex(const void *p, size_t n, char ret[SHA256_HEX_LEN + 1]);
/*
 * Incremental SHA-256. After sha256_final the context is spent: further
 * update/final calls return -EINVAL; free it with sha256_free (accepts NULL).
 */
struct sha256_ctx;
_wur_ int sha256_new(struct sha256_ctx **ret);
_wur_ int sha256_update(struct sha256_ctx *c, const void *p, size_t n);
_wur_ int sha256_final(struct sha256_ctx *c, uint8_t ret[SHA256_LEN]);
void sha256_free(struct sha256_ctx *c);

/* keylen may be 0 (key may then be NULL). */
_wur_ int hmac_sha256(const void *key, size_t keylen, const void *p, size_t n, uint8_t ret[SHA256_LEN]);

/* Constant-time compare: true when equal. */
bool crypto_equal(const void *a, const void *b, size_t n);

/*
 * Encoders and decoders append to out, all-or-nothing: on failure out is
 * unchanged. -E2BIG when the result does not fit in out's max_size, -EROFS
 * for a view. Character classification runs without secret-dependent branches
 * or table lookups, so keys may pass through them.
 *
 * Lower-case hex. hex_decode accepts lower- and upper-case, refuses odd length and non-hex (-EBADMSG).
 */
_wur_ int hex_encode(const void *p, size_t n, struct buf *out);
_wur_ int hex_decode(const char *s, size_t n, struct buf *out);

enum b64_variant {
	B64_STD = 0, /* RFC 4648 section 4, with '=' padding */
	B64_URL = 1, /* RFC 4648 section 5, no padding */
};
/*
 * base64. Decoding is canonical only: refuses whitespace, wrong or missing
 * padding (STD), padding (URL), characters outside the alphabet, and
 * non-zero unused bits in the last character, and data after padding
 * (-EBADMSG); so decode-then-encode gives back the input byte for byte.
 * -EINVAL for an unknown variant.
 */
_wur_ int b64_encode(const void *p, size_t n, enum b64_variant v, struct buf *out);
_wur_ int b64_decode(const char *s, size_t n, enum b64_variant v, struct buf *out);

/* Ed25519 (RFC 8032). Keys are raw 32-byte seeds / public keys. */
_wur_ int ed25519_keygen(uint8_t ret_priv[ED25519_PRIV_LEN], uint8_t ret_pub[ED25519_PUB_LEN]);
_wur_ int ed25519_public_from_private(const uint8_t priv[ED25519_PRIV_LEN], uint8_t ret_pub[ED25519_PUB_LEN]);
_wur_ int ed25519_sign(const uint8_t priv[ED25519_PRIV_LEN], const void *msg, size_t n,
		       uint8_t ret_sig[ED25519_SIG_LEN]);
/*
 * 0 when the public key is acceptable to ed25519_verify: its y coordinate is
 * canonical (y < 2^255-19) and it is not one of the 8 points of small order
 * (with either sign bit); -EBADMSG otherwise. For refusing weak keys when a
 * trust file or vkey is loaded, before any signature is checked.
 */
_wur_ int ed25519_check_public(const uint8_t pub[ED25519_PUB_LEN]);
/*
 * 0 when the signature is valid; -EBADMSG when it is not. Strict, as Tracekit
 * v2 requires: S < L, ed25519_check_public(pub), cofactorless equation.
 * Other -errno values report a libcrypto failure (no verdict).
 */
_wur_ int ed25519_verify(const uint8_t pub[ED25519_PUB_LEN], const void *msg, size_t n,
			 const uint8_t sig[ED25519_SIG_LEN]);

/* Fill with cryptographically secure random bytes. */
_wur_ int crypto_random(void *p, size_t n);

#define CRYPTO_RANDOM_HEX_MAX 32 /* bytes crypto_random_hex draws at most */

/* nbytes (<= CRYPTO_RANDOM_HEX_MAX) random bytes as lower-case hex in out (2 * nbytes + 1 bytes, NUL-terminated). */
_wur_ int crypto_random_hex(size_t nbytes, char *out);

#endif
