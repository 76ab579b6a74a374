/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_EGRESS_SECRET_H
#define TKBOX_EGRESS_SECRET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egress/host.h"
#include "macro.h"

/*
 * A secret bound to hosts (docs/secrets.md): `tkbox run --secret
 * NAME=SOURCE@host[,host...][:Header]`. The box holds only the placeholder
 * "tkbox_NAME_<32 hex>"; the supervisor's proxy swaps it for the value in
 * the bound header of requests to the bound hosts, in TLS it terminates.
 * The value lives in memory from secmem_alloc (excluded from core dumps,
 * wiped on free) and is never logged, printed, recorded or quoted.
 *
 * The validators are pure; none of them ever copies the value into an error.
 */

#define EGRESS_SECRET_MAX 16 /* secrets per box */
#define EGRESS_SECRET_NAME_MAX 64 /* [A-Z_][A-Z0-9_]* */
#define EGRESS_SECRET_VALUE_MIN 6 /* shorter values are refused: too short to find reliably */
#define EGRESS_SECRET_VALUE_MAX 4096
#define EGRESS_SECRET_HOSTS_MAX 8 /* bound hosts per secret */
#define EGRESS_SECRET_HEADER_MAX 64 /* the bound header's name */
#define EGRESS_SECRET_RANDOM_HEX 32 /* hex digits after "tkbox_NAME_" */
#define EGRESS_PLACEHOLDER_MAX (6 + EGRESS_SECRET_NAME_MAX + 1 + EGRESS_SECRET_RANDOM_HEX)
#define EGRESS_SECRET_DEFAULT_HEADER "Authorization"

struct egress_secret {
	char name[EGRESS_SECRET_NAME_MAX + 1];
	char placeholder[EGRESS_PLACEHOLDER_MAX + 1];
	char header[EGRESS_SECRET_HEADER_MAX + 1]; /* as given; matched case-insensitively */
	char hosts[EGRESS_SECRET_HOSTS_MAX][EGRESS_HOST_TEXT_MAX]; /* exact names, lower case, no trailing dot */
	size_t n_hosts;
	uint8_t *value; /* secmem_alloc'd, value_len bytes, not NUL-terminated */
	size_t value_len;
};

/* NAME: 1..EGRESS_SECRET_NAME_MAX bytes of [A-Z0-9_], not starting with a digit. */
bool egress_secret_name_ok(const char *name);

/*
 * A value: EGRESS_SECRET_VALUE_MIN..EGRESS_SECRET_VALUE_MAX bytes of visible
 * ASCII or UTF-8 (no control byte, no DEL, no space at either end: it goes
 * into a header field). -E2BIG / -EINVAL with *ret_why static text that
 * never quotes the value ("the value is 4 bytes; at least 6 are needed").
 */
_wur_ int egress_secret_value_check(const uint8_t *v, size_t n, const char **ret_why);

/*
 * A bound header name: an RFC 9110 token of at most EGRESS_SECRET_HEADER_MAX
 * bytes that is not a framing or routing header (Host, Content-Length,
 * Transfer-Encoding, Connection, Upgrade, TE, Trailer, Proxy-*, Keep-Alive,
 * Expect, Content-Encoding).
 */
_wur_ int egress_secret_header_check(const char *name, const char **ret_why);

/*
 * The --secret flag's text after NAME=SOURCE: "host[,host...][:Header]".
 * Hosts are exact DNS names (host.h's rules; no wildcard, no IP literal, no
 * port), at most EGRESS_SECRET_HOSTS_MAX, duplicates refused. Fills
 * s->hosts, s->n_hosts and s->header (EGRESS_SECRET_DEFAULT_HEADER when none
 * is named). -EINVAL with err naming the part refused.
 */
_wur_ int egress_secret_binding_parse(const char *text, struct egress_secret *s, char *err, size_t err_size);

/* Is host (canonical) one of s's bound hosts? */
bool egress_secret_bound(const struct egress_secret *s, const char *host);

/* Does p[0..n) hold s's value as raw bytes (the exec and workspace checks)? */
bool egress_secret_in(const struct egress_secret *s, const void *p, size_t n);

#endif
