/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_GUEST_SHA1_H
#define TKBOX_GUEST_SHA1_H

#include <stddef.h>
#include <stdint.h>

/*
 * SHA-1 (FIPS 180-4), for git blob ids in the guest's patch (guest/diff.h)
 * and nothing else: git names a blob by SHA-1("blob <len>\0" + bytes), and
 * the patch's index lines must carry those names. Not used for any security
 * decision: the host recomputes what it trusts with its own sha256.
 */

#define SHA1_DIGEST_SIZE 20

struct sha1_ctx {
	uint32_t h[5];
	uint64_t len; /* bytes fed */
	uint8_t block[64];
	size_t fill;
};

void sha1_init(struct sha1_ctx *c);
void sha1_update(struct sha1_ctx *c, const void *p, size_t n);
void sha1_final(struct sha1_ctx *c, uint8_t ret[SHA1_DIGEST_SIZE]);

/* git's blob id of p[0..n) as 40 lowercase hex digits and a NUL. */
void sha1_git_blob_hex(const void *p, size_t n, char ret[41]);

#endif
