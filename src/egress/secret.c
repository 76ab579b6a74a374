/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "banned.h"
#include "egress/secret.h"
#include "utf8.h"

bool egress_secret_name_ok(const char *name)
{
	size_t n;

	if (!name || !name[0] || (name[0] >= '0' && name[0] <= '9')) {
		return false;
	}
	n = strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
	return n == strlen(name) && n <= EGRESS_SECRET_NAME_MAX;
}

int egress_secret_value_check(const uint8_t *v, size_t n, const char **ret_why)
{
	if (n < EGRESS_SECRET_VALUE_MIN) {
		*ret_why =
			"the value is shorter than 6 bytes (EGRESS_SECRET_VALUE_MIN): too short to find reliably; use "
			"a longer secret";
		return -EINVAL;
	}
	if (n > EGRESS_SECRET_VALUE_MAX) {
		*ret_why = "the value is longer than 4096 bytes (EGRESS_SECRET_VALUE_MAX)";
		return -E2BIG;
	}
	if (v[0] == ' ' || v[n - 1] == ' ') {
		*ret_why = "the value starts or ends with a space (it goes into a header field); remove the space";
		return -EINVAL;
	}
	for (size_t i = 0; i < n;) {
		if (v[i] < 0x80) {
			if (v[i] < 0x20 || v[i] == 0x7f) {
				*ret_why =
					"the value holds a control byte (a newline, tab, NUL or DEL); it goes into a "
					"header field: a file or stdin source may end in one newline, no more";
				return -EINVAL;
			}
			i++;
			continue;
		}
		size_t k = utf8_decode(v + i, n - i, NULL);
		if (k == 0) {
			*ret_why = "the value is neither visible ASCII nor UTF-8";
			return -EINVAL;
		}
		i += k;
	}
	return 0;
}

static bool is_tchar(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

int egress_secret_header_check(const char *name, const char **ret_why)
{
	static const char *const refused[] = {
		"Host",	      "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "TE", "Trailer",
		"Keep-Alive", "Expect",		"Content-Encoding",  NULL
	};
	size_t n = name ? strlen(name) : 0;

	if (n == 0) {
		*ret_why = "the header name is empty";
		return -EINVAL;
	}
	if (n > EGRESS_SECRET_HEADER_MAX) {
		*ret_why = "the header name is longer than 64 bytes (EGRESS_SECRET_HEADER_MAX)";
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		if (!is_tchar(name[i])) {
			*ret_why = "the header name is not an HTTP token (letters, digits and !#$%&'*+-.^_`|~)";
			return -EINVAL;
		}
	}
	if (strspn(name, "0123456789") == n) {
		*ret_why = "the header name is all digits (a port? secret hosts take no port)";
		return -EINVAL;
	}
	for (size_t i = 0; refused[i]; i++) {
		if (strcasecmp(name, refused[i]) == 0) {
			*ret_why = "the header frames or routes the request (Host, Content-Length, Transfer-Encoding, "
				   "Connection, Upgrade, TE, Trailer, Keep-Alive, Expect, Content-Encoding, Proxy-*); "
				   "bind another header";
			return -EINVAL;
		}
	}
	if (strncasecmp(name, "Proxy-", 6) == 0) {
		*ret_why = "a Proxy-* header is the proxy's own; bind another header";
		return -EINVAL;
	}
	return 0;
}

/* One bound host, s[0..n): an exact DNS name. */
static int binding_host(const char *s, size_t n, struct egress_secret *out, char *err, size_t err_size)
{
	struct egress_host h;
	int r;

	if (n == 0) {
		(void)snprintf(err, err_size, "an empty host in the binding (write host[,host...][:Header])");
		return -EINVAL;
	}
	if (memchr(s, '*', n)) {
		(void)snprintf(err, err_size, "host %.*s: wildcards are refused: secret hosts are exact names",
			       (int)MIN(n, (size_t)EGRESS_NAME_MAX), s);
		return -EINVAL;
	}
	if (memchr(s, '[', n) || memchr(s, ']', n)) {
		(void)snprintf(err, err_size, "an IP literal is refused: secret hosts are exact DNS names");
		return -EINVAL;
	}
	r = egress_host_parse(s, n, &h);
	if (r < 0) {
		(void)snprintf(err, err_size,
			       "host %.*s is not a DNS name (letters, digits, '-', dots; punycode for "
			       "non-ASCII)",
			       (int)MIN(n, (size_t)EGRESS_NAME_MAX), s);
		return -EINVAL;
	}
	if (h.kind != EGRESS_HOST_NAME) {
		(void)snprintf(err, err_size, "host %s: an IP literal is refused: secret hosts are exact DNS names",
			       h.name);
		return -EINVAL;
	}
	for (size_t i = 0; i < out->n_hosts; i++) {
		if (strcmp(out->hosts[i], h.name) == 0) {
			(void)snprintf(err, err_size, "host %s is named twice", h.name);
			return -EINVAL;
		}
	}
	if (out->n_hosts >= EGRESS_SECRET_HOSTS_MAX) {
		(void)snprintf(err, err_size, "more than %d hosts (EGRESS_SECRET_HOSTS_MAX)", EGRESS_SECRET_HOSTS_MAX);
		return -EINVAL;
	}
	(void)snprintf(out->hosts[out->n_hosts++], EGRESS_HOST_TEXT_MAX, "%s", h.name);
	return 0;
}

int egress_secret_binding_parse(const char *text, struct egress_secret *s, char *err, size_t err_size)
{
	struct egress_secret t = { 0 };
	const char *colon, *hosts_end, *p;
	const char *why;
	int r;

	if (!text || !text[0]) {
		(void)snprintf(err, err_size, "no host: write host[,host...][:Header]");
		return -EINVAL;
	}
	/* Hosts hold no ':' (no port, no IPv6 literal): the first one starts the header. */
	colon = strchr(text, ':');
	hosts_end = colon ? colon : text + strlen(text);
	if (memchr(text, '[', (size_t)(hosts_end - text))) {
		(void)snprintf(err, err_size, "an IP literal is refused: secret hosts are exact DNS names");
		return -EINVAL;
	}
	p = text;
	for (;;) {
		const char *comma = memchr(p, ',', (size_t)(hosts_end - p));
		const char *end = comma ? comma : hosts_end;
		r = binding_host(p, (size_t)(end - p), &t, err, err_size);
		if (r < 0) {
			return r;
		}
		if (!comma) {
			break;
		}
		p = comma + 1;
	}
	if (colon) {
		if (strspn(colon + 1, "0123456789") == strlen(colon + 1) && colon[1]) {
			(void)snprintf(err, err_size,
				       "a port is refused: secret hosts are exact names, inspected on 443 (after ':' "
				       "comes a header name)");
			return -EINVAL;
		}
		r = egress_secret_header_check(colon + 1, &why);
		if (r < 0) {
			(void)snprintf(err, err_size, "header: %s", why);
			return -EINVAL;
		}
		(void)snprintf(t.header, sizeof(t.header), "%s", colon + 1);
	} else {
		(void)snprintf(t.header, sizeof(t.header), "%s", EGRESS_SECRET_DEFAULT_HEADER);
	}
	memcpy(s->hosts, t.hosts, sizeof(t.hosts));
	s->n_hosts = t.n_hosts;
	memcpy(s->header, t.header, sizeof(t.header));
	return 0;
}

bool egress_secret_bound(const struct egress_secret *s, const char *host)
{
	for (size_t i = 0; host && i < s->n_hosts; i++) {
		if (strcmp(s->hosts[i], host) == 0) {
			return true;
		}
	}
	return false;
}

bool egress_secret_in(const struct egress_secret *s, const void *p, size_t n)
{
	if (!s->value || s->value_len == 0 || !p || n < s->value_len) {
		return false;
	}
	return memmem(p, n, s->value, s->value_len) != NULL;
}
