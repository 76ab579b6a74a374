/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_EGRESS_HOST_H
#define TKBOX_EGRESS_HOST_H

#include "egress/addr.h"

/*
 * Host text as the proxy reads it (a CONNECT authority, an absolute-form
 * URL's host, an allow entry), allowlist matching, and the door's url. Pure.
 *
 * A host is an IP literal (addr.h: every form inet_aton or inet_pton reads,
 * IPv6 in brackets in an authority) or a DNS name: ASCII letters, digits and
 * '-', labels of 1..63 bytes not starting or ending with '-', at most 253
 * bytes without the one trailing dot allowed (dropped); lower-cased. Refused
 * (-EBADMSG): any other byte (non-ASCII: send the punycode "xn--" form), an
 * empty label, a name whose last label is all digits or 0x-hex (a resolver
 * could read it as an IPv4 address), a name too long (-ENAMETOOLONG).
 */

#define EGRESS_NAME_MAX 253
#define EGRESS_LABEL_MAX 63
#define EGRESS_HOST_TEXT_MAX 256 /* a host as text with its NUL: a name, or an IPv6 literal in brackets */
#define EGRESS_MAX_ALLOW 512 /* allow entries per box, presets expanded */
#define EGRESS_URL_MAX 280 /* "https://" + host + ":65535" + NUL */

enum egress_host_kind {
	EGRESS_HOST_NAME = 0,
	EGRESS_HOST_ADDR,
};

struct egress_host {
	enum egress_host_kind kind;
	char name[EGRESS_HOST_TEXT_MAX]; /* the name, lower case, no trailing dot; or the literal's canonical text */
	struct egress_addr addr; /* EGRESS_HOST_ADDR only */
};

/* Parse host text s[0..n) (bare; an IPv6 literal with or without brackets). */
_wur_ int egress_host_parse(const char *s, size_t n, struct egress_host *ret);

/*
 * "host:port" (a CONNECT target): port 1..65535 in decimal, no leading zero,
 * always present; an IPv6 host in brackets. -EBADMSG otherwise.
 */
_wur_ int egress_authority_parse(const char *s, size_t n, struct egress_host *ret_host, uint16_t *ret_port);

/* "host" or "host:port" (an allow entry, a Host header): *ret_port is 0 when no port is given. */
_wur_ int egress_hostport_parse(const char *s, size_t n, struct egress_host *ret_host, uint16_t *ret_port);

/*
 * "http://host[:port]/path?query" (an absolute-form target): scheme http
 * (any case), no userinfo, default port 80. *ret_path_off is where the path
 * starts in s (n when there is none: the path is "/"). https:// is refused
 * with -EPROTONOSUPPORT (clients send CONNECT for it), any other scheme and
 * a fragment with -EBADMSG.
 */
_wur_ int egress_url_parse(const char *s, size_t n, struct egress_host *ret_host, uint16_t *ret_port,
			   size_t *ret_path_off);

/*
 * A name that must never be looked up: cloud metadata names
 * (metadata.google.internal, metadata, instance-data, ...) give
 * EGRESS_ADDR_METADATA, "localhost" and "*.localhost" EGRESS_ADDR_LOOPBACK.
 * A literal is classified as its address (egress_addr_classify).
 */
enum egress_addr_class egress_host_classify(const struct egress_host *h, const struct egress_block *block,
					    const struct egress_host_addrs *own, unsigned flags);

/*
 * One allow entry: "host", "host:port" or "*.example.com[:port]". A wildcard
 * matches names under the suffix at any depth, not the suffix itself, and
 * needs at least two labels after "*." ("*.com" is refused). An entry
 * without a port covers 443 (CONNECT) and 80 (absolute-form http); an entry
 * with a port covers that port only, with any protocol.
 */
struct egress_allow {
	struct egress_host host; /* for a wildcard, the suffix after "*." */
	bool wildcard;
	uint16_t port; /* 0: no port named */
};

_wur_ int egress_allow_parse(const char *s, struct egress_allow *ret);

enum egress_match {
	EGRESS_MATCH_NONE = 0,
	EGRESS_MATCH_HOST, /* an entry without a port, and port is 80 or 443 */
	EGRESS_MATCH_PORT, /* an entry that names this port: a tunnel may carry any protocol */
};

/* The best match of host:port in list[0..n): PORT over HOST over NONE. */
enum egress_match egress_allow_match(const struct egress_allow *list, size_t n, const struct egress_host *h,
				     uint16_t port);

enum egress_req_kind {
	EGRESS_REQ_CONNECT = 0,
	EGRESS_REQ_ABSOLUTE,
};

/*
 * The url the signer decides (WebFetch): http://host:port for an
 * absolute-form request; https://host:443 for a CONNECT to 443 unless the
 * match is an entry that names 443; tcp://host:port for any other CONNECT.
 * IPv6 hosts in brackets. Returns the length, or -ENOBUFS when n is short.
 */
_wur_ int egress_door_url(enum egress_req_kind kind, const struct egress_host *h, uint16_t port, enum egress_match m,
			  char *out, size_t n);

#endif
