/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>
#include <strings.h>

#include "banned.h"
#include "daemon/http.h"

/* tchar of RFC 9110 section 5.6.2. */
static bool tchar(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       strchr("!#$%&'*+-.^_`|~", c);
}

/*
 * Find the end of the head: 1 and its length with the blank line, 0 when
 * more bytes are needed, -E2BIG past max.
 */
static int find_head(const uint8_t *p, size_t n, size_t max, size_t *ret_len)
{
	size_t lim = MIN(n, max);

	for (size_t i = 0; i + 3 < lim; i++) {
		if (p[i] == '\r' && p[i + 1] == '\n' && p[i + 2] == '\r' && p[i + 3] == '\n') {
			*ret_len = i + 4;
			return 1;
		}
	}
	return n >= max ? -E2BIG : 0;
}

/* The next CRLF-terminated line in [*pos, end): refuses a bare CR or LF and NUL. */
static int next_line(const uint8_t *p, size_t end, size_t *pos, const uint8_t **ret_l, size_t *ret_n)
{
	size_t i = *pos;

	for (; i + 1 < end; i++) {
		if (p[i] == '\r') {
			if (p[i + 1] != '\n') {
				return -EBADMSG;
			}
			*ret_l = p + *pos;
			*ret_n = i - *pos;
			*pos = i + 2;
			return 0;
		}
		if (p[i] == '\n' || p[i] == '\0') {
			return -EBADMSG;
		}
	}
	return -EBADMSG;
}

struct header {
	const uint8_t *name;
	size_t name_len;
	const uint8_t *value; /* OWS trimmed */
	size_t value_len;
};

static int parse_header(const uint8_t *l, size_t n, struct header *h)
{
	size_t i = 0, vs, ve;

	if (n == 0 || l[0] == ' ' || l[0] == '\t') {
		return -EBADMSG; /* obs-fold */
	}
	while (i < n && l[i] != ':') {
		if (!tchar(l[i])) {
			return -EBADMSG;
		}
		i++;
	}
	if (i == 0 || i == n) {
		return -EBADMSG;
	}
	h->name = l;
	h->name_len = i;
	vs = i + 1;
	while (vs < n && (l[vs] == ' ' || l[vs] == '\t')) {
		vs++;
	}
	ve = n;
	while (ve > vs && (l[ve - 1] == ' ' || l[ve - 1] == '\t')) {
		ve--;
	}
	for (size_t k = vs; k < ve; k++) {
		if ((l[k] < 0x20 && l[k] != '\t') || l[k] == 0x7f) {
			return -EBADMSG;
		}
	}
	h->value = l + vs;
	h->value_len = ve - vs;
	return 0;
}

static bool name_is(const struct header *h, const char *name)
{
	return strlen(name) == h->name_len && strncasecmp((const char *)h->name, name, h->name_len) == 0;
}

static bool value_is(const struct header *h, const char *v)
{
	return strlen(v) == h->value_len && strncasecmp((const char *)h->value, v, h->value_len) == 0;
}

/* 1*DIGIT, at most 19 digits, then checked against max. */
static int parse_length(const struct header *h, uint64_t max, uint64_t *ret)
{
	uint64_t v = 0;

	if (h->value_len == 0 || h->value_len > 19) {
		return h->value_len > 19 ? -E2BIG : -EBADMSG;
	}
	for (size_t i = 0; i < h->value_len; i++) {
		if (h->value[i] < '0' || h->value[i] > '9') {
			return -EBADMSG;
		}
		v = v * 10 + (uint64_t)(h->value[i] - '0');
	}
	if (v > max) {
		return -E2BIG;
	}
	*ret = v;
	return 0;
}

static int version_ok(const uint8_t *p, size_t n)
{
	if (n == 8 && (memcmp(p, "HTTP/1.1", 8) == 0 || memcmp(p, "HTTP/1.0", 8) == 0)) {
		return 0;
	}
	return n >= 5 && memcmp(p, "HTTP/", 5) == 0 ? -EPROTONOSUPPORT : -EBADMSG;
}

void http_request_release(struct http_request *r)
{
	if (r) {
		free(r->target);
		*r = (struct http_request){ 0 };
	}
}

int http_request_parse(const uint8_t *p, size_t n, struct http_request *ret, size_t *ret_head_len)
{
	struct http_request req = { 0 };
	const uint8_t *l, *sp1, *sp2;
	size_t head, pos = 0, ln, nheaders = 0;
	bool seen_length = false;
	int r;

	r = find_head(p, n, HTTP_MAX_HEAD, &head);
	if (r <= 0) {
		return r;
	}
	r = next_line(p, head, &pos, &l, &ln);
	if (r < 0) {
		return r;
	}
	sp1 = memchr(l, ' ', ln);
	sp2 = sp1 ? memchr(sp1 + 1, ' ', ln - (size_t)(sp1 + 1 - l)) : NULL;
	if (!sp1 || !sp2) {
		return -EBADMSG;
	}
	if (sp1 - l == 3 && memcmp(l, "GET", 3) == 0) {
		req.method = HTTP_GET;
	} else if (sp1 - l == 4 && memcmp(l, "POST", 4) == 0) {
		req.method = HTTP_POST;
	} else if (sp1 - l == 6 && memcmp(l, "DELETE", 6) == 0) {
		req.method = HTTP_DELETE;
	} else {
		for (const uint8_t *q = l; q < sp1; q++) {
			if (!tchar(*q)) {
				return -EBADMSG;
			}
		}
		return sp1 == l ? -EBADMSG : -EOPNOTSUPP;
	}
	{
		const uint8_t *t = sp1 + 1;
		size_t tn = (size_t)(sp2 - t);
		if (tn == 0 || t[0] != '/') {
			return -EBADMSG;
		}
		if (tn > HTTP_MAX_TARGET) {
			return -E2BIG;
		}
		for (size_t i = 0; i < tn; i++) {
			if (t[i] <= 0x20 || t[i] >= 0x7f) {
				return -EBADMSG;
			}
		}
		r = version_ok(sp2 + 1, ln - (size_t)(sp2 + 1 - l));
		if (r < 0) {
			return r;
		}
		req.target = strndup((const char *)t, tn);
		if (!req.target) {
			return -ENOMEM;
		}
	}
	/* Header lines up to the blank line that ends the head. */
	while (pos < head - 2) {
		struct header h;
		r = next_line(p, head, &pos, &l, &ln);
		if (r >= 0) {
			r = parse_header(l, ln, &h);
		}
		if (r >= 0 && ++nheaders > HTTP_MAX_HEADERS) {
			r = -E2BIG;
		}
		if (r >= 0 && name_is(&h, "Content-Length")) {
			r = seen_length ? -EBADMSG : parse_length(&h, HTTP_MAX_BODY, &req.content_length);
			seen_length = true;
		} else if (r >= 0 && name_is(&h, "Transfer-Encoding")) {
			r = -ENOTSUP;
		} else if (r >= 0 && name_is(&h, "Upgrade")) {
			req.upgrade_exec = value_is(&h, HTTP_EXEC_UPGRADE);
		}
		if (r < 0) {
			http_request_release(&req);
			return r;
		}
	}
	*ret = req;
	*ret_head_len = head;
	return 1;
}

void http_response_release(struct http_response *r)
{
	if (r) {
		free(r->approval);
		free(r->trust);
		free(r->bundle_sha256);
		free(r->patch_sha256);
		free(r->patch_summary);
		*r = (struct http_response){ 0 };
	}
}

static int keep_value(const struct header *h, char **dst)
{
	if (*dst) {
		return -EBADMSG;
	}
	if (h->value_len > HTTP_MAX_HEADER_VALUE) {
		return -E2BIG;
	}
	*dst = strndup((const char *)h->value, h->value_len);
	return *dst ? 0 : -ENOMEM;
}

int http_response_parse(const uint8_t *p, size_t n, struct http_response *ret, size_t *ret_head_len)
{
	struct http_response resp = { 0 };
	const uint8_t *l;
	size_t head, pos = 0, ln, nheaders = 0;
	int r;

	r = find_head(p, n, HTTP_MAX_RESPONSE_HEAD, &head);
	if (r <= 0) {
		return r;
	}
	r = next_line(p, head, &pos, &l, &ln);
	if (r < 0) {
		return r;
	}
	if (ln < 12 || l[8] != ' ' || (ln > 12 && l[12] != ' ')) {
		return -EBADMSG;
	}
	r = version_ok(l, 8);
	if (r < 0) {
		return r;
	}
	for (size_t i = 9; i < 12; i++) {
		if (l[i] < '0' || l[i] > '9') {
			return -EBADMSG;
		}
		resp.status = resp.status * 10 + (l[i] - '0');
	}
	if (resp.status < 100) {
		return -EBADMSG;
	}
	while (pos < head - 2) {
		struct header h;
		r = next_line(p, head, &pos, &l, &ln);
		if (r >= 0) {
			r = parse_header(l, ln, &h);
		}
		if (r >= 0 && ++nheaders > HTTP_MAX_HEADERS) {
			r = -E2BIG;
		}
		if (r >= 0 && name_is(&h, "Content-Length")) {
			r = resp.has_length ? -EBADMSG : parse_length(&h, (uint64_t)1 << 40, &resp.content_length);
			resp.has_length = true;
		} else if (r >= 0 && name_is(&h, "Transfer-Encoding")) {
			r = -ENOTSUP;
		} else if (r >= 0 && name_is(&h, "Upgrade")) {
			resp.upgrade_exec = value_is(&h, HTTP_EXEC_UPGRADE);
		} else if (r >= 0 && name_is(&h, "Tkbox-Approval")) {
			r = keep_value(&h, &resp.approval);
		} else if (r >= 0 && name_is(&h, "Tkbox-Trust")) {
			r = keep_value(&h, &resp.trust);
		} else if (r >= 0 && name_is(&h, "Tkbox-Bundle-Sha256")) {
			r = keep_value(&h, &resp.bundle_sha256);
		} else if (r >= 0 && name_is(&h, "Tkbox-Patch-Sha256")) {
			r = keep_value(&h, &resp.patch_sha256);
		} else if (r >= 0 && name_is(&h, "Tkbox-Patch-Summary")) {
			r = keep_value(&h, &resp.patch_summary);
		}
		if (r < 0) {
			http_response_release(&resp);
			return r;
		}
	}
	*ret = resp;
	*ret_head_len = head;
	return 1;
}

int http_split_path(const char *target, char **ret_copy, const char *ret_seg[HTTP_MAX_SEGMENTS], size_t *ret_n)
{
	char *copy, *q, *save = NULL;
	size_t n = 0;

	if (target[0] != '/' || strchr(target, '?') || strchr(target, '%') || strstr(target, "//")) {
		return -EINVAL;
	}
	copy = strdup(target + 1);
	if (!copy) {
		return -ENOMEM;
	}
	for (q = strtok_r(copy, "/", &save); q; q = strtok_r(NULL, "/", &save)) {
		if (n == HTTP_MAX_SEGMENTS) {
			free(copy);
			return -E2BIG;
		}
		ret_seg[n++] = q;
	}
	*ret_copy = copy;
	*ret_n = n;
	return 0;
}

const char *http_reason(int status)
{
	switch (status) {
	case 101:
		return "Switching Protocols";
	case 102:
		return "Processing";
	case 200:
		return "OK";
	case 201:
		return "Created";
	case 400:
		return "Bad Request";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 409:
		return "Conflict";
	case 413:
		return "Content Too Large";
	case 429:
		return "Too Many Requests";
	case 500:
		return "Internal Server Error";
	case 503:
		return "Service Unavailable";
	default:
		return "Status";
	}
}
