/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "banned.h"
#include "egress/host.h"

static bool is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static bool is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* WHATWG's "ends in a number": the last label is all digits or 0x-hex, so a resolver may read an IPv4 address. */
static bool ends_in_number(const char *s, size_t n)
{
	size_t start = n;
	bool digits = true, hex = true;

	while (start > 0 && s[start - 1] != '.') {
		start--;
	}
	if (n - start >= 2 && s[start] == '0' && (s[start + 1] == 'x' || s[start + 1] == 'X')) {
		for (size_t i = start + 2; i < n; i++) {
			hex = hex && is_hex(s[i]);
		}
		return hex;
	}
	for (size_t i = start; i < n; i++) {
		digits = digits && s[i] >= '0' && s[i] <= '9';
	}
	return digits;
}

/* s[0..n) without its trailing dot: labels of letters, digits, '-'. */
static int check_name(const char *s, size_t n)
{
	size_t label = 0;

	if (n == 0) {
		return -EBADMSG;
	}
	if (n > EGRESS_NAME_MAX) {
		return -ENAMETOOLONG;
	}
	for (size_t i = 0; i <= n; i++) {
		if (i == n || s[i] == '.') {
			if (label == 0 || s[i - 1] == '-') {
				return -EBADMSG;
			}
			label = 0;
			continue;
		}
		if (!is_alnum(s[i]) && !(s[i] == '-' && label > 0)) {
			return -EBADMSG; /* non-ASCII included: the punycode form is the one to send */
		}
		if (++label > EGRESS_LABEL_MAX) {
			return -ENAMETOOLONG;
		}
	}
	return ends_in_number(s, n) ? -EBADMSG : 0;
}

int egress_host_parse(const char *s, size_t n, struct egress_host *ret)
{
	struct egress_host h = { .kind = EGRESS_HOST_ADDR };
	int r;

	if (!s || n == 0 || memchr(s, '\0', n)) {
		return -EBADMSG;
	}
	if (n >= EGRESS_HOST_TEXT_MAX) {
		return -ENAMETOOLONG;
	}
	r = egress_addr_parse(s, n, &h.addr);
	if (r == 0) {
		egress_addr_format(&h.addr, h.name);
		*ret = h;
		return 0;
	}
	if (s[0] == '[' || memchr(s, ':', n)) {
		return r; /* IPv6 syntax that is not an address is not a name either */
	}
	if (n > 1 && s[n - 1] == '.') {
		n--;
	}
	r = check_name(s, n);
	if (r < 0) {
		return r;
	}
	h.kind = EGRESS_HOST_NAME;
	for (size_t i = 0; i < n; i++) {
		h.name[i] = (s[i] >= 'A' && s[i] <= 'Z') ? (char)(s[i] - 'A' + 'a') : s[i];
	}
	h.name[n] = '\0';
	*ret = h;
	return 0;
}

/* 1..65535, decimal, no leading zero. */
static int parse_port(const char *s, size_t n, uint16_t *ret)
{
	unsigned v = 0;

	if (n == 0 || n > 5 || s[0] == '0') {
		return -EBADMSG;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9') {
			return -EBADMSG;
		}
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v > 65535) {
		return -EBADMSG;
	}
	*ret = (uint16_t)v;
	return 0;
}

/* Split "host:port" / "[v6]:port" at its port colon; *ret_colon = n when there is no port. */
static int split_port(const char *s, size_t n, size_t *ret_colon)
{
	const char *c;

	if (n > 0 && s[0] == '[') {
		c = memchr(s, ']', n);
		if (!c) {
			return -EBADMSG;
		}
		size_t end = (size_t)(c - s) + 1;
		if (end != n && s[end] != ':') {
			return -EBADMSG;
		}
		*ret_colon = end;
		return 0;
	}
	c = memchr(s, ':', n);
	if (c && memchr(c + 1, ':', n - (size_t)(c - s) - 1)) {
		return -EBADMSG; /* a bare IPv6 literal needs brackets before a port */
	}
	*ret_colon = c ? (size_t)(c - s) : n;
	return 0;
}

int egress_authority_parse(const char *s, size_t n, struct egress_host *ret_host, uint16_t *ret_port)
{
	struct egress_host h;
	size_t colon;
	uint16_t port;
	int r;

	r = split_port(s, n, &colon);
	if (r < 0 || colon == n) {
		return -EBADMSG;
	}
	r = parse_port(s + colon + 1, n - colon - 1, &port);
	if (r < 0) {
		return r;
	}
	r = egress_host_parse(s, colon, &h);
	if (r < 0) {
		return r;
	}
	*ret_host = h;
	*ret_port = port;
	return 0;
}

int egress_hostport_parse(const char *s, size_t n, struct egress_host *ret_host, uint16_t *ret_port)
{
	struct egress_host h;
	size_t colon;
	uint16_t port = 0;
	int r;

	r = split_port(s, n, &colon);
	if (r < 0) {
		return r;
	}
	if (colon != n) {
		r = parse_port(s + colon + 1, n - colon - 1, &port);
		if (r < 0) {
			return r;
		}
	}
	r = egress_host_parse(s, colon, &h);
	if (r < 0) {
		return r;
	}
	*ret_host = h;
	*ret_port = port;
	return 0;
}

int egress_url_parse(const char *s, size_t n, struct egress_host *ret_host, uint16_t *ret_port, size_t *ret_path_off)
{
	struct egress_host h;
	size_t a = 7, end, colon;
	uint16_t port = 80;
	int r;

	if (n >= 8 && strncasecmp(s, "https://", 8) == 0) {
		return -EPROTONOSUPPORT;
	}
	if (n < 7 || strncasecmp(s, "http://", 7) != 0 || memchr(s, '#', n)) {
		return -EBADMSG;
	}
	for (end = a; end < n && s[end] != '/' && s[end] != '?'; end++) {
		if (s[end] == '@') {
			return -EBADMSG; /* userinfo: a second host-looking thing in the target */
		}
	}
	r = split_port(s + a, end - a, &colon);
	if (r < 0) {
		return r;
	}
	if (colon != end - a) {
		r = parse_port(s + a + colon + 1, end - a - colon - 1, &port);
		if (r < 0) {
			return r;
		}
	}
	r = egress_host_parse(s + a, colon, &h);
	if (r < 0) {
		return r;
	}
	*ret_host = h;
	*ret_port = port;
	*ret_path_off = end;
	return 0;
}

static const char *const metadata_names[] = {
	"metadata.google.internal",
	"metadata.goog",
	"metadata",
	"instance-data",
	"instance-data.ec2.internal",
	"metadata.tencentyun.com",
	"metadata.azure.internal",
};

static const char *const loopback_names[] = { "localhost", "ip6-localhost", "ip6-loopback" };

static bool has_suffix(const char *name, const char *suffix)
{
	size_t n = strlen(name), k = strlen(suffix);

	return n > k && name[n - k - 1] == '.' && strcmp(name + n - k, suffix) == 0;
}

enum egress_addr_class egress_host_classify(const struct egress_host *h, const struct egress_block *block,
					    const struct egress_host_addrs *own, unsigned flags)
{
	if (h->kind == EGRESS_HOST_ADDR) {
		return egress_addr_classify(&h->addr, block, own, flags);
	}
	for (size_t i = 0; i < ARRAY_SIZE(metadata_names); i++) {
		if (strcmp(h->name, metadata_names[i]) == 0) {
			return EGRESS_ADDR_METADATA;
		}
	}
	if (flags & EGRESS_ALLOW_PRIVATE) {
		return EGRESS_ADDR_OK;
	}
	for (size_t i = 0; i < ARRAY_SIZE(loopback_names); i++) {
		if (strcmp(h->name, loopback_names[i]) == 0 || has_suffix(h->name, loopback_names[i])) {
			return EGRESS_ADDR_LOOPBACK;
		}
	}
	return EGRESS_ADDR_OK;
}

int egress_allow_parse(const char *s, struct egress_allow *ret)
{
	struct egress_allow e = { 0 };
	size_t n = s ? strlen(s) : 0;
	int r;

	if (n >= 2 && s[0] == '*' && s[1] == '.') {
		e.wildcard = true;
		s += 2;
		n -= 2;
	}
	r = egress_hostport_parse(s, n, &e.host, &e.port);
	if (r < 0) {
		return r;
	}
	if (e.wildcard && (e.host.kind != EGRESS_HOST_NAME || !strchr(e.host.name, '.'))) {
		return -EBADMSG; /* "*.com" or "*.1.2.3.4" would cover far more than one site */
	}
	*ret = e;
	return 0;
}

static bool host_matches(const struct egress_allow *e, const struct egress_host *h)
{
	if (e->host.kind != h->kind) {
		return false;
	}
	if (h->kind == EGRESS_HOST_ADDR) {
		return !e->wildcard && egress_addr_equal(&e->host.addr, &h->addr);
	}
	return e->wildcard ? has_suffix(h->name, e->host.name) : strcmp(e->host.name, h->name) == 0;
}

enum egress_match egress_allow_match(const struct egress_allow *list, size_t n, const struct egress_host *h,
				     uint16_t port)
{
	enum egress_match best = EGRESS_MATCH_NONE;

	for (size_t i = 0; i < n; i++) {
		if (!host_matches(&list[i], h)) {
			continue;
		}
		if (list[i].port != 0 && list[i].port == port) {
			return EGRESS_MATCH_PORT;
		}
		if (list[i].port == 0 && (port == 80 || port == 443)) {
			best = EGRESS_MATCH_HOST;
		}
	}
	return best;
}

int egress_door_url(enum egress_req_kind kind, const struct egress_host *h, uint16_t port, enum egress_match m,
		    char *out, size_t n)
{
	const char *scheme = "tcp";
	bool v6 = h->kind == EGRESS_HOST_ADDR && h->addr.family == 6;
	int r;

	if (kind == EGRESS_REQ_ABSOLUTE) {
		scheme = "http";
	} else if (port == 443 && m != EGRESS_MATCH_PORT) {
		scheme = "https";
	}
	r = snprintf(out, n, "%s://%s%s%s:%u", scheme, v6 ? "[" : "", h->name, v6 ? "]" : "", (unsigned)port);
	if (r < 0 || (size_t)r >= n) {
		return -ENOBUFS;
	}
	return r;
}
