/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "egress/addr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * FuzzAddrForms (paper Table 14): any textual form of a blocked address is
 * refused wherever the proxy parses a host; metadata addresses are refused
 * even under AllowPrivate; block prefixes hold in every form.
 *
 * 1. Our IPv4 reading is inet_aton's and our IPv6 reading inet_pton's, for
 *    every text both can be asked about (so no form a resolver reads escapes).
 * 2. An IPv4 address is refused exactly when an independent integer check of
 *    the fixed ranges says so; a metadata address stays refused with
 *    EGRESS_ALLOW_PRIVATE.
 * 3. Every other textual form of that address (decimal, hex, octal, short,
 *    trailing dot, IPv4-mapped, -compatible, NAT64, 6to4) parses to a
 *    refused address when, and only when, the address is refused; with a
 *    --egress-block prefix built from the input, every form of an address
 *    inside it is refused.
 */

struct ref {
	uint32_t net, mask;
	bool metadata;
};

static const struct ref refs[] = {
	{ 0xa9fea9fe, 0xffffffff, true },  { 0xa9feaa02, 0xffffffff, true },  { 0x646464c8, 0xffffffff, true },
	{ 0xc00000c0, 0xffffffff, true },  { 0xa83f8110, 0xffffffff, true },  { 0xa9feaa17, 0xffffffff, true },
	{ 0xa9fe0017, 0xffffffff, true },  { 0x7f000000, 0xff000000, false }, { 0x00000000, 0xff000000, false },
	{ 0x0a000000, 0xff000000, false }, { 0xac100000, 0xfff00000, false }, { 0xc0a80000, 0xffff0000, false },
	{ 0x64400000, 0xffc00000, false }, { 0xa9fe0000, 0xffff0000, false }, { 0xe0000000, 0xf0000000, false },
	{ 0xf0000000, 0xf0000000, false },
};

static int ref_class(uint32_t v)
{
	for (size_t i = 0; i < sizeof(refs) / sizeof(refs[0]); i++) {
		if ((v & refs[i].mask) == refs[i].net) {
			return refs[i].metadata ? 2 : 1;
		}
	}
	return 0;
}

static void check_differential(const char *text, size_t n, int r, const struct egress_addr *a)
{
	bool plain = n > 0 && text[n - 1] != '.' && !strpbrk(text, " \t\n\v\f\r[%");
	struct in_addr ia;
	uint8_t six[16];

	if (!plain) {
		return;
	}
	if (!strchr(text, ':')) {
		int l = inet_aton(text, &ia);

		if ((r == 0) != (l == 1) || (r == 0 && (a->family != 4 || memcmp(a->b, &ia.s_addr, 4) != 0))) {
			abort();
		}
	} else {
		int l = inet_pton(AF_INET6, text, six);

		if ((r == 0) != (l == 1) || (r == 0 && (a->family != 6 || memcmp(a->b, six, 16) != 0))) {
			abort();
		}
	}
}

/* Every form of v must be refused exactly when want_refused (block may be NULL). */
static void check_forms(uint32_t v, const struct egress_block *block, bool want_refused)
{
	char f[12][80];
	unsigned a = v >> 24, b = (v >> 16) & 0xff, c = (v >> 8) & 0xff, d = v & 0xff;

	(void)snprintf(f[0], 80, "%u", v);
	(void)snprintf(f[1], 80, "0x%x", v);
	(void)snprintf(f[2], 80, "0%o.0%o.0%o.0%o", a, b, c, d);
	(void)snprintf(f[3], 80, "%u.%u", a, v & 0xffffff);
	(void)snprintf(f[4], 80, "0x%x.%u.0%o", a, b, v & 0xffff);
	(void)snprintf(f[5], 80, "%u.%u.%u.%u.", a, b, c, d);
	(void)snprintf(f[6], 80, "[::ffff:%u.%u.%u.%u]", a, b, c, d);
	(void)snprintf(f[7], 80, "::ffff:%x:%x", v >> 16, v & 0xffff);
	(void)snprintf(f[8], 80, "64:ff9b::%u.%u.%u.%u", a, b, c, d);
	(void)snprintf(f[9], 80, "2002:%x:%x::1", v >> 16, v & 0xffff);
	(void)snprintf(f[10], 80, "00000%o", v);
	(void)snprintf(f[11], 80, "[::%u.%u.%u.%u]", a, b, c, d);
	for (size_t i = 0; i < 12; i++) {
		struct egress_addr x;

		if (i == 11 && v <= 1) {
			continue; /* ::0.0.0.0 and ::0.0.0.1 are IPv6's own :: and ::1 (refused, for their own reason) */
		}
		if (egress_addr_parse(f[i], strlen(f[i]), &x) != 0) {
			abort();
		}
		if ((egress_addr_classify(&x, block, NULL, 0) != EGRESS_ADDR_OK) != want_refused) {
			abort();
		}
	}
}

static void check_block(const uint8_t *data, size_t size)
{
	static struct egress_block block;
	char text[40];
	uint32_t net, host, mask;
	unsigned prefix;

	if (size < 9) {
		return;
	}
	net = (uint32_t)data[0] << 24 | (uint32_t)data[1] << 16 | (uint32_t)data[2] << 8 | data[3];
	prefix = data[4] % 33;
	mask = prefix == 0 ? 0 : 0xffffffffu << (32 - prefix);
	net &= mask;
	host = (uint32_t)data[5] << 24 | (uint32_t)data[6] << 16 | (uint32_t)data[7] << 8 | data[8];
	(void)snprintf(text, sizeof(text), "%u.%u.%u.%u/%u", net >> 24, (net >> 16) & 0xff, (net >> 8) & 0xff,
		       net & 0xff, prefix);
	block.n = 0;
	if (egress_block_parse(text, &block) != 0) {
		abort();
	}
	check_forms(net | (host & ~mask), &block, true);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char text[EGRESS_MAX_LITERAL + 2];
	struct egress_addr a = { 0 };
	int r;

	check_block(data, size);
	if (size > EGRESS_MAX_LITERAL || memchr(data, '\0', size)) {
		return 0;
	}
	memcpy(text, data, size);
	text[size] = '\0';
	r = egress_addr_parse(text, size, &a);
	check_differential(text, size, r, &a);
	if (r != 0) {
		return 0;
	}
	if (a.family == 4) {
		uint32_t v = (uint32_t)a.b[0] << 24 | (uint32_t)a.b[1] << 16 | (uint32_t)a.b[2] << 8 | a.b[3];
		int want = ref_class(v);

		if (v == 0xffffffff) {
			want = 1;
		}
		if ((egress_addr_classify(&a, NULL, NULL, 0) != EGRESS_ADDR_OK) != (want != 0)) {
			abort();
		}
		if (want == 2 && egress_addr_classify(&a, NULL, NULL, EGRESS_ALLOW_PRIVATE) != EGRESS_ADDR_METADATA) {
			abort();
		}
		check_forms(v, NULL, want != 0);
	} else {
		struct egress_addr emb[3];
		size_t ne = egress_addr_embedded_v4(&a, emb);

		/* an IPv6 address embedding a refused IPv4 one is refused; a metadata one even with AllowPrivate */
		for (size_t i = 0; i < ne; i++) {
			enum egress_addr_class c = egress_addr_classify(&emb[i], NULL, NULL, 0);

			if (c != EGRESS_ADDR_OK && egress_addr_classify(&a, NULL, NULL, 0) == EGRESS_ADDR_OK) {
				abort();
			}
			if (c == EGRESS_ADDR_METADATA &&
			    egress_addr_classify(&a, NULL, NULL, EGRESS_ALLOW_PRIVATE) != EGRESS_ADDR_METADATA) {
				abort();
			}
		}
	}
	return 0;
}
