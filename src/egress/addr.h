/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_EGRESS_ADDR_H
#define TKBOX_EGRESS_ADDR_H

#include "macro.h"

/*
 * IP literals as the egress proxy reads them, and the one address classifier.
 * Pure: no I/O, no allocation, no globals.
 *
 * egress_addr_parse() reads a host text as an IP literal in every form a
 * client's resolver would: IPv4 as inet_aton(3) reads it (1 to 4 parts, each
 * decimal, octal with a leading 0, or hex with 0x; "127.1" is 127.0.0.1,
 * "2130706433" and "0x7f.1" too), one trailing dot allowed; IPv6 bare or in
 * brackets (zone ids "%eth0" refused, -EINVAL). Anything else is -EBADMSG
 * (not a literal: the caller may treat the text as a name, see host.h).
 *
 * egress_addr_classify() says why an address is refused, or EGRESS_ADDR_OK.
 * An IPv6 address that embeds an IPv4 one (IPv4-mapped ::ffff:a.b.c.d,
 * IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::/96 and the local-use
 * 64:ff9b:1::/48, 6to4 2002::/16, Teredo 2001::/32) is refused when the
 * embedded IPv4 address is, with that address's reason.
 */

#define EGRESS_ADDR_TEXT_MAX 64 /* longest text a struct egress_addr is formatted to, with its NUL */
#define EGRESS_MAX_BLOCK 256 /* --egress-block entries */
#define EGRESS_MAX_HOST_ADDRS 256 /* this host's own addresses */
#define EGRESS_MAX_LITERAL 255 /* longest host text read as a literal */

struct egress_addr {
	uint8_t family; /* 4 or 6 */
	uint8_t b[16]; /* IPv4 in b[0..3], the rest zero */
};

enum egress_addr_class {
	EGRESS_ADDR_OK = 0,
	EGRESS_ADDR_METADATA, /* a cloud metadata service: never allowed, not even with allow_private */
	EGRESS_ADDR_LOOPBACK,
	EGRESS_ADDR_UNSPECIFIED, /* 0.0.0.0/8, :: */
	EGRESS_ADDR_PRIVATE, /* RFC 1918, fc00::/7, fec0::/10 */
	EGRESS_ADDR_SHARED, /* 100.64.0.0/10 */
	EGRESS_ADDR_LINK_LOCAL, /* 169.254.0.0/16, fe80::/10 */
	EGRESS_ADDR_MULTICAST, /* 224.0.0.0/4, ff00::/8 */
	EGRESS_ADDR_BROADCAST, /* 255.255.255.255 */
	EGRESS_ADDR_RESERVED, /* 240.0.0.0/4 */
	EGRESS_ADDR_HOST, /* one of this host's own addresses */
	EGRESS_ADDR_BLOCKED, /* named by --egress-block */
};

struct egress_cidr {
	struct egress_addr addr; /* host bits zero */
	uint8_t prefix; /* 0..32 or 0..128 */
};

struct egress_block {
	struct egress_cidr e[EGRESS_MAX_BLOCK];
	size_t n;
};

struct egress_host_addrs {
	struct egress_addr a[EGRESS_MAX_HOST_ADDRS];
	size_t n;
};

enum egress_classify_flags {
	EGRESS_ALLOW_PRIVATE = 1 << 0, /* --egress-allow-private: loopback, private, shared, link-local, own */
};

/* Parse s[0..n) (no NUL needed; an embedded NUL is -EBADMSG). */
_wur_ int egress_addr_parse(const char *s, size_t n, struct egress_addr *ret);

/* Parse one strict dotted quad (four decimal parts, no leading zeros): the canonical form. */
_wur_ int egress_addr_parse_canonical(const char *s, size_t n, struct egress_addr *ret);

/* Canonical text (dotted quad, or RFC 5952 IPv6) into out[EGRESS_ADDR_TEXT_MAX]. */
void egress_addr_format(const struct egress_addr *a, char out[EGRESS_ADDR_TEXT_MAX]);

bool egress_addr_equal(const struct egress_addr *a, const struct egress_addr *b);
bool egress_cidr_contains(const struct egress_cidr *c, const struct egress_addr *a);

/*
 * The IPv4 addresses an IPv6 address embeds (mapped, compatible, NAT64,
 * 6to4, Teredo server and client): up to 3 into ret[], count returned.
 */
size_t egress_addr_embedded_v4(const struct egress_addr *a, struct egress_addr ret[3]);

/*
 * Why a is refused (or EGRESS_ADDR_OK). block and own may be NULL. The order
 * is: metadata, the fixed ranges, this host's addresses, the block list; for
 * an IPv6 address the embedded IPv4 addresses are checked first. With
 * EGRESS_ALLOW_PRIVATE, loopback, private, shared, link-local and own
 * addresses pass; metadata, unspecified, multicast, broadcast, reserved and
 * blocked addresses never do.
 */
enum egress_addr_class egress_addr_classify(const struct egress_addr *a, const struct egress_block *block,
					    const struct egress_host_addrs *own, unsigned flags);

/*
 * Add one of this host's own addresses to t, unless the fixed ranges refuse
 * it already (loopback, private, link-local, ...: the table need not hold
 * it, with or without EGRESS_ALLOW_PRIVATE) or t holds it. 1 added, 0 not
 * needed, -E2BIG t is full (EGRESS_MAX_HOST_ADDRS): the caller says so.
 */
_wur_ int egress_host_addrs_add(struct egress_host_addrs *t, const struct egress_addr *a);

/* "loopback (always refused)", ... (static text). */
const char *egress_addr_class_str(enum egress_addr_class c);

/* "127.0.0.1 is loopback (always refused)" into out[n]; returns the length (truncated when n is short). */
size_t egress_addr_explain(const struct egress_addr *a, enum egress_addr_class c, char *out, size_t n);

/*
 * One --egress-block value: comma-separated CIDRs or bare addresses
 * ("203.0.113.7", "198.51.100.0/24", "2001:db8::/32"), appended to *block.
 * IPv4 in canonical dotted quads only; an IPv4-mapped IPv6 entry is stored
 * as the IPv4 one. Refused: host bits set (-EINVAL), a prefix past the
 * family's width or with a leading zero (-EINVAL), an empty item, anything
 * else (-EBADMSG), more than EGRESS_MAX_BLOCK entries (-E2BIG). On failure
 * *block is unchanged.
 */
_wur_ int egress_block_parse(const char *value, struct egress_block *block);

#endif
