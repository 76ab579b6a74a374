/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "egress/addr.h"
#include "hex.h"

/*
 * One inet_aton part at s[*i]: decimal, octal after a leading 0, hex after
 * 0x. Any number of leading zeros, as inet_aton takes them; a value past
 * 32 bits is refused as it grows, so the digit count needs no cap.
 */
static int v4_part(const char *s, size_t n, size_t *i, uint64_t *ret)
{
	unsigned base = 10;
	bool digit = false;
	uint64_t v = 0;
	size_t k = *i;

	if (k >= n || s[k] < '0' || s[k] > '9') {
		return -EBADMSG;
	}
	if (s[k] == '0') {
		k++;
		if (k < n && (s[k] == 'x' || s[k] == 'X')) {
			base = 16;
			k++;
		} else {
			base = 8;
			digit = true;
		}
	}
	for (; k < n; k++) {
		int d = hex_digit_value(s[k]);

		if (d < 0 || (base == 10 && d > 9) || (base == 8 && d > 7)) {
			if (base == 8 && (s[k] == '8' || s[k] == '9')) {
				return -EBADMSG;
			}
			break;
		}
		v = v * base + (uint64_t)d;
		if (v > 0xffffffffu) {
			return -EBADMSG;
		}
		digit = true;
	}
	if (!digit) {
		return -EBADMSG;
	}
	*i = k;
	*ret = v;
	return 0;
}

/* IPv4 as inet_aton reads it, exactly n bytes (no trailing junk, no whitespace). */
static int parse_v4(const char *s, size_t n, struct egress_addr *ret)
{
	uint64_t part[4], v;
	size_t np = 0, i = 0;
	int r;

	for (;;) {
		r = v4_part(s, n, &i, &part[np]);
		if (r < 0) {
			return r;
		}
		np++;
		if (i == n) {
			break;
		}
		if (s[i] != '.' || np == 4 || part[np - 1] > 0xff) {
			return -EBADMSG;
		}
		i++;
	}
	v = part[np - 1];
	if (v > (0xffffffffu >> (8 * (np - 1)))) {
		return -EBADMSG; /* the last part fills the bytes the others left */
	}
	for (size_t k = 0; k + 1 < np; k++) {
		v |= part[k] << (24 - 8 * k);
	}
	*ret = (struct egress_addr){ .family = 4 };
	ret->b[0] = (uint8_t)(v >> 24);
	ret->b[1] = (uint8_t)(v >> 16);
	ret->b[2] = (uint8_t)(v >> 8);
	ret->b[3] = (uint8_t)v;
	return 0;
}

static int parse_v6(const char *s, size_t n, struct egress_addr *ret)
{
	char tmp[EGRESS_ADDR_TEXT_MAX];
	struct egress_addr a = { .family = 6 };

	if (n == 0 || n >= sizeof(tmp)) {
		return -EBADMSG;
	}
	if (memchr(s, '%', n)) {
		return -EINVAL; /* a zone id names an interface of this host */
	}
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	if (inet_pton(AF_INET6, tmp, a.b) != 1) {
		return -EBADMSG;
	}
	*ret = a;
	return 0;
}

int egress_addr_parse(const char *s, size_t n, struct egress_addr *ret)
{
	if (!s || n == 0 || n > EGRESS_MAX_LITERAL || memchr(s, '\0', n)) {
		return -EBADMSG;
	}
	if (s[0] == '[') {
		if (n < 3 || s[n - 1] != ']') {
			return -EBADMSG;
		}
		return parse_v6(s + 1, n - 2, ret);
	}
	if (memchr(s, ':', n)) {
		return parse_v6(s, n, ret);
	}
	if (n > 1 && s[n - 1] == '.') {
		n--; /* "127.0.0.1." reaches the same address through a resolver */
	}
	return parse_v4(s, n, ret);
}

int egress_addr_parse_canonical(const char *s, size_t n, struct egress_addr *ret)
{
	struct egress_addr a = { .family = 4 };
	size_t i = 0;

	for (int p = 0; p < 4; p++) {
		unsigned v = 0, digits = 0;

		if (p > 0) {
			if (i >= n || s[i] != '.') {
				return -EBADMSG;
			}
			i++;
		}
		while (i < n && s[i] >= '0' && s[i] <= '9' && digits < 4) {
			v = v * 10 + (unsigned)(s[i] - '0');
			i++;
			digits++;
		}
		if (digits == 0 || digits > 3 || v > 255 || (digits > 1 && s[i - digits] == '0')) {
			return -EBADMSG;
		}
		a.b[p] = (uint8_t)v;
	}
	if (i != n) {
		return -EBADMSG;
	}
	*ret = a;
	return 0;
}

void egress_addr_format(const struct egress_addr *a, char out[EGRESS_ADDR_TEXT_MAX])
{
	if (!inet_ntop(a->family == 4 ? AF_INET : AF_INET6, a->b, out, EGRESS_ADDR_TEXT_MAX)) {
		(void)snprintf(out, EGRESS_ADDR_TEXT_MAX, "?");
	}
}

bool egress_addr_equal(const struct egress_addr *a, const struct egress_addr *b)
{
	return a->family == b->family && memcmp(a->b, b->b, sizeof(a->b)) == 0;
}

bool egress_cidr_contains(const struct egress_cidr *c, const struct egress_addr *a)
{
	unsigned full = c->prefix / 8, rest = c->prefix % 8;

	if (a->family != c->addr.family) {
		return false;
	}
	if (memcmp(a->b, c->addr.b, full) != 0) {
		return false;
	}
	if (rest == 0) {
		return true;
	}
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (a->b[full] & mask) == (c->addr.b[full] & mask);
}

static struct egress_addr v4_of(uint8_t a, uint8_t b, uint8_t c, uint8_t d)
{
	return (struct egress_addr){ .family = 4, .b = { a, b, c, d } };
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i]) {
			return false;
		}
	}
	return true;
}

size_t egress_addr_embedded_v4(const struct egress_addr *a, struct egress_addr ret[3])
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };
	static const uint8_t nat64l[6] = { 0, 0x64, 0xff, 0x9b, 0, 1 };
	const uint8_t *b = a->b;
	size_t n = 0;

	if (a->family != 6) {
		return 0;
	}
	if (memcmp(b, mapped, 12) == 0 || memcmp(b, nat64, 12) == 0 ||
	    (all_zero(b, 12) && !(all_zero(b + 12, 3) && b[15] <= 1))) {
		/* ::ffff:a.b.c.d, 64:ff9b::a.b.c.d, ::a.b.c.d (but not :: or ::1, which are IPv6's own) */
		ret[n++] = v4_of(b[12], b[13], b[14], b[15]);
	} else if (memcmp(b, nat64l, 6) == 0) {
		/* RFC 6052 /48 puts the address around the u octet (b[8]); a /96 puts it at the end */
		if (!all_zero(b + 6, 5) || all_zero(b + 11, 5)) {
			ret[n++] = v4_of(b[6], b[7], b[9], b[10]);
		}
		if (!all_zero(b + 11, 5) || all_zero(b + 6, 5)) {
			ret[n++] = v4_of(b[12], b[13], b[14], b[15]);
		}
	} else if (b[0] == 0x20 && b[1] == 0x02) {
		ret[n++] = v4_of(b[2], b[3], b[4], b[5]); /* 6to4 */
	} else if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0) {
		ret[n++] = v4_of(b[4], b[5], b[6], b[7]); /* Teredo server */
		ret[n++] = v4_of((uint8_t)~b[12], (uint8_t)~b[13], (uint8_t)~b[14], (uint8_t)~b[15]); /* client */
	}
	return n;
}

struct range {
	uint8_t family, prefix;
	uint8_t b[16];
	enum egress_addr_class cls;
};

/* Metadata first: an exact metadata address wins over the range around it. */
static const struct range ranges[] = {
	{ 4, 32, { 169, 254, 169, 254 }, EGRESS_ADDR_METADATA }, /* AWS, GCP, Azure, OCI, DigitalOcean, ... */
	{ 4, 32, { 169, 254, 170, 2 }, EGRESS_ADDR_METADATA }, /* AWS ECS task metadata */
	{ 4, 32, { 169, 254, 170, 23 }, EGRESS_ADDR_METADATA }, /* AWS EKS Pod Identity agent */
	{ 4, 32, { 169, 254, 0, 23 }, EGRESS_ADDR_METADATA }, /* Tencent Cloud */
	{ 4, 32, { 100, 100, 100, 200 }, EGRESS_ADDR_METADATA }, /* Alibaba Cloud */
	{ 4, 32, { 192, 0, 0, 192 }, EGRESS_ADDR_METADATA }, /* Oracle Cloud */
	{ 4, 32, { 168, 63, 129, 16 }, EGRESS_ADDR_METADATA }, /* Azure WireServer */
	{ 6, 128, { 0xfd, 0, 0x0e, 0xc2, [14] = 0x02, [15] = 0x54 }, EGRESS_ADDR_METADATA }, /* AWS fd00:ec2::254 */
	{ 6, 128, { 0xfd, 0, 0x0e, 0xc2, [15] = 0x23 }, EGRESS_ADDR_METADATA }, /* AWS EKS Pod Identity fd00:ec2::23 */
	{ 6, 128, { 0xfd, 0x20, 0, 0xce, [14] = 0x02, [15] = 0x54 }, EGRESS_ADDR_METADATA }, /* GCP fd20:ce::254 */
	{ 4, 8, { 127 }, EGRESS_ADDR_LOOPBACK },
	{ 6, 128, { [15] = 1 }, EGRESS_ADDR_LOOPBACK },
	{ 4, 8, { 0 }, EGRESS_ADDR_UNSPECIFIED },
	{ 6, 128, { 0 }, EGRESS_ADDR_UNSPECIFIED },
	{ 4, 8, { 10 }, EGRESS_ADDR_PRIVATE },
	{ 4, 12, { 172, 16 }, EGRESS_ADDR_PRIVATE },
	{ 4, 16, { 192, 168 }, EGRESS_ADDR_PRIVATE },
	{ 6, 7, { 0xfc }, EGRESS_ADDR_PRIVATE },
	{ 6, 10, { 0xfe, 0xc0 }, EGRESS_ADDR_PRIVATE }, /* deprecated site-local, still private in effect */
	{ 4, 10, { 100, 64 }, EGRESS_ADDR_SHARED },
	{ 4, 16, { 169, 254 }, EGRESS_ADDR_LINK_LOCAL },
	{ 6, 10, { 0xfe, 0x80 }, EGRESS_ADDR_LINK_LOCAL },
	{ 4, 4, { 224 }, EGRESS_ADDR_MULTICAST },
	{ 6, 8, { 0xff }, EGRESS_ADDR_MULTICAST },
	{ 4, 32, { 255, 255, 255, 255 }, EGRESS_ADDR_BROADCAST },
	{ 4, 4, { 240 }, EGRESS_ADDR_RESERVED },
};

static bool passes_private(enum egress_addr_class c)
{
	return c == EGRESS_ADDR_LOOPBACK || c == EGRESS_ADDR_PRIVATE || c == EGRESS_ADDR_SHARED ||
	       c == EGRESS_ADDR_LINK_LOCAL || c == EGRESS_ADDR_HOST;
}

static enum egress_addr_class classify_one(const struct egress_addr *a, const struct egress_block *block,
					   const struct egress_host_addrs *own)
{
	for (size_t i = 0; i < ARRAY_SIZE(ranges); i++) {
		struct egress_cidr c = { .addr = { .family = ranges[i].family }, .prefix = ranges[i].prefix };

		memcpy(c.addr.b, ranges[i].b, sizeof(c.addr.b));
		if (egress_cidr_contains(&c, a)) {
			return ranges[i].cls;
		}
	}
	for (size_t i = 0; own && i < own->n && i < EGRESS_MAX_HOST_ADDRS; i++) {
		if (egress_addr_equal(&own->a[i], a)) {
			return EGRESS_ADDR_HOST;
		}
	}
	for (size_t i = 0; block && i < block->n && i < EGRESS_MAX_BLOCK; i++) {
		if (egress_cidr_contains(&block->e[i], a)) {
			return EGRESS_ADDR_BLOCKED;
		}
	}
	return EGRESS_ADDR_OK;
}

enum egress_addr_class egress_addr_classify(const struct egress_addr *a, const struct egress_block *block,
					    const struct egress_host_addrs *own, unsigned flags)
{
	struct egress_addr emb[3];
	size_t ne = egress_addr_embedded_v4(a, emb);
	enum egress_addr_class worst = EGRESS_ADDR_OK;

	if (a->family != 4 && a->family != 6) {
		return EGRESS_ADDR_RESERVED;
	}
	for (size_t i = 0; i <= ne; i++) {
		enum egress_addr_class c = classify_one(i < ne ? &emb[i] : a, block, own);

		if (c == EGRESS_ADDR_OK || ((flags & EGRESS_ALLOW_PRIVATE) && passes_private(c))) {
			continue;
		}
		if (c == EGRESS_ADDR_METADATA) {
			return c;
		}
		if (worst == EGRESS_ADDR_OK) {
			worst = c;
		}
	}
	return worst;
}

int egress_host_addrs_add(struct egress_host_addrs *t, const struct egress_addr *a)
{
	/* The fixed ranges refuse it with or without the table (EGRESS_ALLOW_PRIVATE lets own addresses pass too). */
	if (egress_addr_classify(a, NULL, NULL, 0) != EGRESS_ADDR_OK) {
		return 0;
	}
	for (size_t i = 0; i < t->n && i < EGRESS_MAX_HOST_ADDRS; i++) {
		if (egress_addr_equal(&t->a[i], a)) {
			return 0;
		}
	}
	if (t->n >= EGRESS_MAX_HOST_ADDRS) {
		return -E2BIG;
	}
	t->a[t->n++] = *a;
	return 1;
}

const char *egress_addr_class_str(enum egress_addr_class c)
{
	switch (c) {
	case EGRESS_ADDR_OK:
		return "allowed";
	case EGRESS_ADDR_METADATA:
		return "a cloud metadata address (always refused, even with --egress-allow-private)";
	case EGRESS_ADDR_LOOPBACK:
		return "loopback (always refused)";
	case EGRESS_ADDR_UNSPECIFIED:
		return "an unspecified address, 0.0.0.0/8 or :: (always refused)";
	case EGRESS_ADDR_PRIVATE:
		return "a private address, RFC 1918 or fc00::/7 (always refused)";
	case EGRESS_ADDR_SHARED:
		return "a shared address, 100.64.0.0/10 (always refused)";
	case EGRESS_ADDR_LINK_LOCAL:
		return "link-local (always refused)";
	case EGRESS_ADDR_MULTICAST:
		return "multicast (always refused)";
	case EGRESS_ADDR_BROADCAST:
		return "broadcast (always refused)";
	case EGRESS_ADDR_RESERVED:
		return "reserved, 240.0.0.0/4 (always refused)";
	case EGRESS_ADDR_HOST:
		return "one of this host's own addresses (always refused)";
	case EGRESS_ADDR_BLOCKED:
		return "named by tkbox daemon --egress-block";
	default:
		return "refused";
	}
}

size_t egress_addr_explain(const struct egress_addr *a, enum egress_addr_class c, char *out, size_t n)
{
	char t[EGRESS_ADDR_TEXT_MAX];
	int r;

	if (n == 0) {
		return 0;
	}
	egress_addr_format(a, t);
	r = snprintf(out, n, "%s is %s", t, egress_addr_class_str(c));
	if (r < 0) {
		out[0] = '\0';
		return 0;
	}
	return MIN((size_t)r, n - 1);
}

/* A prefix length: 1..3 decimal digits, no leading zero, at most width. */
static int parse_prefix(const char *s, size_t n, unsigned width, uint8_t *ret)
{
	unsigned v = 0;

	if (n == 0 || n > 3 || (n > 1 && s[0] == '0')) {
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9') {
			return -EINVAL;
		}
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v > width) {
		return -EINVAL;
	}
	*ret = (uint8_t)v;
	return 0;
}

/* One item: an address (canonical IPv4 or any IPv6), optionally /prefix. */
static int parse_cidr(const char *s, size_t n, struct egress_cidr *ret)
{
	const char *slash = memchr(s, '/', n);
	size_t an = slash ? (size_t)(slash - s) : n;
	struct egress_cidr c = { 0 };
	struct egress_addr emb[3];
	int r;

	r = memchr(s, ':', an) ? parse_v6(s, an, &c.addr) : egress_addr_parse_canonical(s, an, &c.addr);
	if (r < 0) {
		return r;
	}
	c.prefix = c.addr.family == 4 ? 32 : 128;
	if (slash) {
		r = parse_prefix(slash + 1, n - an - 1, c.prefix, &c.prefix);
		if (r < 0) {
			return r;
		}
	}
	if (c.addr.family == 6 && c.addr.b[10] == 0xff && egress_addr_embedded_v4(&c.addr, emb) == 1 &&
	    all_zero(c.addr.b, 10) && c.prefix >= 96) {
		c.addr = emb[0]; /* ::ffff:a.b.c.d/N is a.b.c.d/(N-96): one entry holds in every form */
		c.prefix = (uint8_t)(c.prefix - 96);
	}
	for (unsigned bit = c.prefix; bit < (c.addr.family == 4 ? 32u : 128u); bit++) {
		if (c.addr.b[bit / 8] & (0x80 >> (bit % 8))) {
			return -EINVAL; /* host bits set: say the network, not an address in it */
		}
	}
	*ret = c;
	return 0;
}

int egress_block_parse(const char *value, struct egress_block *block)
{
	size_t n = value ? strlen(value) : 0, start = 0, added = 0;
	struct egress_cidr tmp[EGRESS_MAX_BLOCK];
	int r;

	if (n == 0) {
		return -EBADMSG;
	}
	for (size_t i = 0; i <= n; i++) {
		if (i < n && value[i] != ',') {
			continue;
		}
		if (i == start) {
			return -EBADMSG; /* an empty item */
		}
		if (block->n + added >= EGRESS_MAX_BLOCK) {
			return -E2BIG;
		}
		r = parse_cidr(value + start, i - start, &tmp[added]);
		if (r < 0) {
			return r;
		}
		added++;
		start = i + 1;
	}
	memcpy(&block->e[block->n], tmp, added * sizeof(tmp[0]));
	block->n += added;
	return 0;
}
