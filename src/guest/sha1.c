/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A hand-written SHA-1 for the guest agent. The guest is a static binary that
 * links no libcrypto by design (src/guest/meson.build: common's guest subset,
 * jansson and zlib only), and it needs SHA-1 for one thing: git blob ids in
 * the patch's index lines. tests/unit/test-guest-sha1.c checks it against
 * OpenSSL's SHA1 on many lengths (block and padding boundaries).
 */
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "guest/sha1.h"

static uint32_t rol(uint32_t x, unsigned n)
{
	return (x << n) | (x >> (32 - n));
}

static uint32_t load_be32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void sha1_block(uint32_t h[5], const uint8_t *p)
{
	uint32_t w[80], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];

	for (int i = 0; i < 16; i++) {
		w[i] = load_be32(p + 4 * i);
	}
	for (int i = 16; i < 80; i++) {
		w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
	}
	for (int i = 0; i < 80; i++) {
		uint32_t f, k, t;
		if (i < 20) {
			f = (b & c) | (~b & d);
			k = 0x5a827999u;
		} else if (i < 40) {
			f = b ^ c ^ d;
			k = 0x6ed9eba1u;
		} else if (i < 60) {
			f = (b & c) | (b & d) | (c & d);
			k = 0x8f1bbcdcu;
		} else {
			f = b ^ c ^ d;
			k = 0xca62c1d6u;
		}
		t = rol(a, 5) + f + e + k + w[i];
		e = d;
		d = c;
		c = rol(b, 30);
		b = a;
		a = t;
	}
	h[0] += a;
	h[1] += b;
	h[2] += c;
	h[3] += d;
	h[4] += e;
}

void sha1_init(struct sha1_ctx *c)
{
	*c = (struct sha1_ctx){ .h = { 0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u, 0xc3d2e1f0u } };
}

void sha1_update(struct sha1_ctx *c, const void *p, size_t n)
{
	const uint8_t *s = p;

	c->len += n;
	while (n > 0) {
		size_t take = sizeof(c->block) - c->fill;
		if (take > n) {
			take = n;
		}
		memcpy(c->block + c->fill, s, take);
		c->fill += take;
		s += take;
		n -= take;
		if (c->fill == sizeof(c->block)) {
			sha1_block(c->h, c->block);
			c->fill = 0;
		}
	}
}

void sha1_final(struct sha1_ctx *c, uint8_t ret[SHA1_DIGEST_SIZE])
{
	uint64_t bits = c->len * 8;
	uint8_t pad = 0x80, zero = 0, lenbe[8];

	sha1_update(c, &pad, 1);
	while (c->fill != 56) {
		sha1_update(c, &zero, 1);
	}
	for (int i = 0; i < 8; i++) {
		lenbe[i] = (uint8_t)(bits >> (56 - 8 * i));
	}
	sha1_update(c, lenbe, sizeof(lenbe));
	for (int i = 0; i < 5; i++) {
		ret[4 * i] = (uint8_t)(c->h[i] >> 24);
		ret[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
		ret[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
		ret[4 * i + 3] = (uint8_t)c->h[i];
	}
	explicit_bzero(c, sizeof(*c));
}

void sha1_git_blob_hex(const void *p, size_t n, char ret[41])
{
	static const char hex[] = "0123456789abcdef";
	struct sha1_ctx c;
	uint8_t md[SHA1_DIGEST_SIZE];
	char head[32];
	int hl = snprintf(head, sizeof(head), "blob %zu", n);

	sha1_init(&c);
	sha1_update(&c, head, (size_t)hl + 1); /* the NUL is part of git's header */
	sha1_update(&c, p, n);
	sha1_final(&c, md);
	for (size_t i = 0; i < SHA1_DIGEST_SIZE; i++) {
		ret[2 * i] = hex[md[i] >> 4];
		ret[2 * i + 1] = hex[md[i] & 15];
	}
	ret[40] = '\0';
}
