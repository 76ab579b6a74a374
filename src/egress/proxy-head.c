/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>
#include <strings.h>

#include "banned.h"
#include "egress/proxy-head.h"
#include "hex.h"

/* tchar of RFC 9110 section 5.6.2. */
static bool tchar(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != '\0' && strchr("!#$%&'*+-.^_`|~", c));
}

/* The head's length with its blank line: 1, 0 for more bytes; a bare CR or LF is refused at once. */
static int scan_head(const uint8_t *p, size_t n, size_t *ret_len, const char **reason)
{
	size_t lim = MIN(n, (size_t)EGRESS_HEAD_MAX);

	for (size_t i = 0; i < lim; i++) {
		if (p[i] == '\n' && (i == 0 || p[i - 1] != '\r')) {
			*reason = "a bare LF in the request head (lines end in CRLF)";
			return -EBADMSG;
		}
		if (p[i] == '\r' && i + 1 < n && p[i + 1] != '\n') {
			*reason = "a bare CR in the request head (lines end in CRLF)";
			return -EBADMSG;
		}
		if (i >= 3 && p[i] == '\n' && p[i - 1] == '\r' && p[i - 2] == '\n' && p[i - 3] == '\r') {
			*ret_len = i + 1;
			return 1;
		}
	}
	if (n >= EGRESS_HEAD_MAX) {
		*reason = "the request head is larger than 32 KiB (EGRESS_HEAD_MAX)";
		return -E2BIG;
	}
	return 0;
}

static const char *const methods[] = {
	[EGRESS_METHOD_CONNECT] = "CONNECT", [EGRESS_METHOD_GET] = "GET",	  [EGRESS_METHOD_HEAD] = "HEAD",
	[EGRESS_METHOD_POST] = "POST",	     [EGRESS_METHOD_PUT] = "PUT",	  [EGRESS_METHOD_DELETE] = "DELETE",
	[EGRESS_METHOD_PATCH] = "PATCH",     [EGRESS_METHOD_OPTIONS] = "OPTIONS",
};

static int parse_method(const uint8_t *l, size_t n, enum egress_method *ret)
{
	for (size_t i = 0; i < ARRAY_SIZE(methods); i++) {
		if (strlen(methods[i]) == n && memcmp(l, methods[i], n) == 0) {
			*ret = (enum egress_method)i;
			return 0;
		}
	}
	return -EOPNOTSUPP;
}

/* The reason for a host that did not parse: the cap or rule that refused it. */
static const char *host_reason(int r, const char *fallback)
{
	switch (r) {
	case -ENAMETOOLONG:
		return "the host name is longer than 253 bytes or has a label longer than 63 "
		       "(EGRESS_NAME_MAX, EGRESS_LABEL_MAX)";
	case -EINVAL:
		return "an IPv6 zone id (%...) names an interface of this host and is refused";
	default:
		return fallback;
	}
}

static int parse_target(const char *t, size_t n, struct egress_head *h, const char **reason)
{
	size_t off;
	int r;

	if (h->method == EGRESS_METHOD_CONNECT) {
		h->kind = EGRESS_REQ_CONNECT;
		r = egress_authority_parse(t, n, &h->host, &h->port);
		if (r < 0) {
			*reason = host_reason(r, "the CONNECT target is not host:port with a valid host name (ASCII or "
						 "punycode) or IP literal");
			return -EBADMSG;
		}
		if (h->port == 80) {
			*reason = "CONNECT to port 80 is refused: send plain HTTP as an absolute-form request "
				  "(set http_proxy so the client sends GET http://host/...)";
			return -EACCES;
		}
		return 0;
	}
	h->kind = EGRESS_REQ_ABSOLUTE;
	r = egress_url_parse(t, n, &h->host, &h->port, &off);
	if (r == -EPROTONOSUPPORT) {
		*reason =
			"an https:// target in absolute form: the client must send CONNECT host:443 (set https_proxy)";
		return -EBADMSG;
	}
	if (r < 0) {
		*reason = n > 0 && t[0] == '/'
				  ? "an origin-form target: a proxy request names http://host/path"
				  : host_reason(r, "the target is not http://host[:port]/path with a "
						   "valid host (ASCII or punycode), no userinfo, no fragment");
		return -EBADMSG;
	}
	h->path_off = off;
	h->path_len = n - off;
	return 0;
}

static int parse_request_line(const uint8_t *l, size_t n, struct egress_head *h, const char **reason)
{
	const uint8_t *sp1 = memchr(l, ' ', n), *sp2;
	size_t tn;
	int r;

	sp2 = sp1 ? memchr(sp1 + 1, ' ', n - (size_t)(sp1 - l) - 1) : NULL;
	if (!sp1 || !sp2 || sp2 == sp1 + 1 || memchr(sp2 + 1, ' ', (size_t)(l + n - sp2 - 1))) {
		*reason = "the request line is not METHOD SP target SP HTTP/1.1";
		return -EBADMSG;
	}
	if ((size_t)(l + n - sp2 - 1) != 8 ||
	    (memcmp(sp2 + 1, "HTTP/1.1", 8) != 0 && memcmp(sp2 + 1, "HTTP/1.0", 8) != 0)) {
		*reason = "the request is not HTTP/1.1 (or HTTP/1.0 for CONNECT)";
		return -EPROTONOSUPPORT;
	}
	r = parse_method(l, (size_t)(sp1 - l), &h->method);
	if (r < 0) {
		*reason = "the method is not one of CONNECT, GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS";
		return r;
	}
	/* HTTP/1.0 only for CONNECT (python's http.client sends it): a 1.0 request in absolute form is refused. */
	h->http10 = sp2[8] == '0';
	if (h->http10 && h->method != EGRESS_METHOD_CONNECT) {
		*reason = "an HTTP/1.0 request in absolute form: the proxy takes HTTP/1.0 only for CONNECT; send "
			  "HTTP/1.1";
		return -EPROTONOSUPPORT;
	}
	tn = (size_t)(sp2 - sp1 - 1);
	if (tn > EGRESS_TARGET_MAX) {
		*reason = "the request target is longer than 8 KiB (EGRESS_TARGET_MAX)";
		return -E2BIG;
	}
	for (size_t i = 0; i < tn; i++) {
		if (sp1[1 + i] <= 0x20 || sp1[1 + i] >= 0x7f) {
			*reason = "the request target holds a byte outside printable ASCII";
			return -EBADMSG;
		}
	}
	r = parse_target((const char *)sp1 + 1, tn, h, reason);
	if (r == 0 && h->kind == EGRESS_REQ_ABSOLUTE) {
		h->path_off += (size_t)(sp1 + 1 - l);
	}
	return r;
}

struct hdr_state {
	unsigned n_cl, n_te, n_host, count;
	const uint8_t *host;
	size_t host_len;
};

/* One "name: value" line: obs-fold, a non-token name and control bytes in the value are refused. */
static int parse_header(const uint8_t *l, size_t n, struct egress_head *h, struct hdr_state *st, const char **reason)
{
	size_t i = 0, vs, ve;

	if (n > 0 && (l[0] == ' ' || l[0] == '\t')) {
		*reason = "obs-fold (a header line that starts with a space or tab)";
		return -EBADMSG;
	}
	while (i < n && tchar(l[i])) {
		i++;
	}
	if (i == 0 || i == n || l[i] != ':') {
		*reason = "a header line that is not name: value (a name is a token, with no space before the colon)";
		return -EBADMSG;
	}
	for (vs = i + 1; vs < n && (l[vs] == ' ' || l[vs] == '\t'); vs++) {
	}
	for (ve = n; ve > vs && (l[ve - 1] == ' ' || l[ve - 1] == '\t'); ve--) {
	}
	for (size_t k = vs; k < ve; k++) {
		if ((l[k] < 0x20 && l[k] != '\t') || l[k] == 0x7f) {
			*reason = "a control byte in a header value";
			return -EBADMSG;
		}
	}
	if (i == 14 && strncasecmp((const char *)l, "content-length", 14) == 0) {
		st->n_cl++;
		h->has_length = true;
		h->content_length = 0;
		if (ve - vs == 0 || ve - vs > 19) {
			*reason = "a Content-Length that is not 1 to 19 digits";
			return -EBADMSG;
		}
		for (size_t k = vs; k < ve; k++) {
			if (l[k] < '0' || l[k] > '9') {
				*reason = "a Content-Length that is not 1 to 19 digits";
				return -EBADMSG;
			}
			h->content_length = h->content_length * 10 + (uint64_t)(l[k] - '0');
		}
	} else if (i == 17 && strncasecmp((const char *)l, "transfer-encoding", 17) == 0) {
		st->n_te++;
		h->chunked = ve - vs == 7 && strncasecmp((const char *)l + vs, "chunked", 7) == 0;
		if (!h->chunked) {
			*reason = "a Transfer-Encoding other than chunked";
			return -ENOTSUP;
		}
	} else if (i == 4 && strncasecmp((const char *)l, "host", 4) == 0) {
		st->n_host++;
		st->host = l + vs;
		st->host_len = ve - vs;
	}
	return 0;
}

/* The Host header, when present, names the target's host, and its port when it gives one. */
static int check_host(const struct egress_head *h, const struct hdr_state *st, const char **reason)
{
	struct egress_host hh;
	uint16_t port;

	if (st->n_host == 0) {
		if (h->kind == EGRESS_REQ_ABSOLUTE) {
			*reason = "an HTTP/1.1 request without a Host header";
			return -EBADMSG;
		}
		return 0;
	}
	if (egress_hostport_parse((const char *)st->host, st->host_len, &hh, &port) < 0 || hh.kind != h->host.kind ||
	    strcmp(hh.name, h->host.name) != 0 || (port == 0 && h->kind == EGRESS_REQ_ABSOLUTE && h->port != 80) ||
	    (port != 0 && port != h->port)) {
		*reason = "the Host header names another host or port than the request target";
		return -EACCES;
	}
	return 0;
}

/* The framing fields alone: one Content-Length, one Transfer-Encoding, not both, one Host. */
static int check_fields(const struct hdr_state *st, const char **reason)
{
	if (st->n_host > 1) {
		*reason = "a second Host header";
		return -EBADMSG;
	}
	if (st->n_cl > 1) {
		*reason = "a second Content-Length header";
		return -EBADMSG;
	}
	if (st->n_te > 1) {
		*reason = "a second Transfer-Encoding header";
		return -EBADMSG;
	}
	if (st->n_cl && st->n_te) {
		*reason = "Content-Length and Transfer-Encoding together";
		return -EBADMSG;
	}
	return 0;
}

static int check_framing(const struct egress_head *h, const struct hdr_state *st, const char **reason)
{
	int r = check_fields(st, reason);

	if (r < 0) {
		return r;
	}
	if (h->kind == EGRESS_REQ_CONNECT && (st->n_te || (h->has_length && h->content_length != 0))) {
		*reason = "a CONNECT request with a body";
		return -EBADMSG;
	}
	return check_host(h, st, reason);
}

/* One field line after the first: the line cap, then parse_header. */
static int field_line(const uint8_t *l, size_t n, struct egress_head *h, struct hdr_state *st, const char **reason)
{
	if (++st->count > EGRESS_HEAD_MAX_HEADERS) {
		*reason = "more than 100 header lines (EGRESS_HEAD_MAX_HEADERS)";
		return -E2BIG;
	}
	return parse_header(l, n, h, st, reason);
}

int egress_head_fields(const uint8_t *p, size_t n, struct egress_head *ret, const uint8_t **ret_host,
		       size_t *ret_host_len, const char **ret_reason)
{
	struct egress_head h = { 0 };
	struct hdr_state st = { 0 };
	const char *reason = "malformed head";
	size_t len = 0, pos, eol;
	int r;

	r = scan_head(p, n, &len, &reason);
	if (r <= 0) {
		goto out;
	}
	for (eol = 0; !(p[eol] == '\r' && p[eol + 1] == '\n'); eol++) {
	}
	for (pos = eol + 2;; pos = eol + 2) {
		for (eol = pos; !(p[eol] == '\r' && p[eol + 1] == '\n'); eol++) {
		}
		if (eol == pos) {
			break;
		}
		if (memchr(p + pos, '\0', eol - pos)) {
			reason = "a NUL byte in the head";
			r = -EBADMSG;
			goto out;
		}
		r = field_line(p + pos, eol - pos, &h, &st, &reason);
		if (r < 0) {
			goto out;
		}
	}
	r = check_fields(&st, &reason);
	if (r < 0) {
		goto out;
	}
	h.head_len = len;
	*ret = h;
	*ret_host = st.host;
	*ret_host_len = st.host_len;
	return 1;
out:
	if (ret_reason) {
		*ret_reason = reason;
	}
	return r;
}

int egress_head_parse(const uint8_t *p, size_t n, struct egress_head *ret, const char **ret_reason)
{
	struct egress_head h = { 0 };
	struct hdr_state st = { 0 };
	const char *reason = "malformed request head";
	size_t len = 0, pos, eol;
	int r;

	r = scan_head(p, n, &len, &reason);
	if (r <= 0) {
		goto out;
	}
	for (pos = 0;; pos = eol + 2) {
		for (eol = pos; !(p[eol] == '\r' && p[eol + 1] == '\n'); eol++) {
		}
		if (eol == pos && pos == 0) {
			reason = "an empty request line";
			r = -EBADMSG;
			goto out;
		}
		if (eol == pos) {
			break; /* the blank line */
		}
		if (memchr(p + pos, '\0', eol - pos)) {
			reason = "a NUL byte in the request head";
			r = -EBADMSG;
			goto out;
		}
		r = pos == 0 ? parse_request_line(p, eol, &h, &reason)
			     : field_line(p + pos, eol - pos, &h, &st, &reason);
		if (r < 0) {
			goto out;
		}
	}
	r = check_framing(&h, &st, &reason);
	if (r < 0) {
		goto out;
	}
	h.head_len = len;
	*ret = h;
	return 1;
out:
	if (r == -EACCES) {
		/* A rule of the door refused a parsed target: the caller can say which host and port. */
		h.head_len = len;
		*ret = h;
	}
	if (r < 0 && ret_reason) {
		*ret_reason = reason;
	}
	return r;
}

/* ---- the body ---- */

enum body_state {
	BD_DONE = 0,
	BD_LENGTH, /* Content-Length bytes */
	BD_SIZE, /* chunk-size hex digits */
	BD_EXT_WS, /* whitespace after the size: only ";" may follow */
	BD_EXT, /* chunk extensions, to the CR */
	BD_SIZE_LF,
	BD_DATA,
	BD_DATA_CR,
	BD_DATA_LF,
	BD_TRAILER, /* the start of a trailer line, or the empty line */
	BD_TRAILER_NAME,
	BD_TRAILER_VALUE,
	BD_TRAILER_LF,
	BD_END_LF,
	BD_FAILED,
};

void egress_body_init(struct egress_body *b, const struct egress_head *h)
{
	*b = (struct egress_body){ .state = BD_DONE };
	if (h->chunked) {
		b->state = BD_SIZE;
	} else if (h->has_length && h->content_length > 0) {
		b->state = BD_LENGTH;
		b->left = h->content_length;
	}
}

static int body_fail(struct egress_body *b, int err, const char *reason)
{
	b->state = BD_FAILED;
	b->err = err;
	b->reason = reason;
	return err;
}

/* A byte of a chunk extension or trailer value: HTAB, SP, VCHAR, obs-text; no other control byte. */
static bool text_byte(uint8_t c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

#define CHUNK_BAD "a malformed chunked request body (RFC 9112 section 7.1)"

/* BD_SIZE: a hex digit of the chunk size, or the byte that ends the size. */
static int chunk_size_byte(struct egress_body *b, uint8_t c)
{
	if (hex_digit_value(c) >= 0) {
		if (++b->digits > 15) {
			return body_fail(b, -E2BIG, "a chunk size of more than 15 hex digits");
		}
		b->left = b->left << 4 | (uint64_t)hex_digit_value(c);
		return 0;
	}
	if (b->digits == 0) {
		return body_fail(b, -EBADMSG, CHUNK_BAD);
	}
	b->state = c == ';' ? BD_EXT : c == ' ' || c == '\t' ? BD_EXT_WS : c == '\r' ? BD_SIZE_LF : BD_FAILED;
	return b->state == BD_FAILED ? body_fail(b, -EBADMSG, CHUNK_BAD) : 0;
}

/* BD_EXT_WS, BD_EXT, BD_SIZE_LF: the rest of a chunk-size line after the size. */
static int chunk_ext_byte(struct egress_body *b, uint8_t c)
{
	switch (b->state) {
	case BD_EXT_WS:
		if (c == ';') {
			b->state = BD_EXT;
		} else if (c != ' ' && c != '\t') {
			return body_fail(b, -EBADMSG, CHUNK_BAD);
		}
		return 0;
	case BD_EXT:
		if (c == '\r') {
			b->state = BD_SIZE_LF;
		} else if (!text_byte(c)) {
			return body_fail(b, -EBADMSG, CHUNK_BAD);
		}
		return 0;
	case BD_SIZE_LF:
		if (c != '\n') {
			return body_fail(b, -EBADMSG, CHUNK_BAD);
		}
		b->line = 0;
		b->state = b->left == 0 ? BD_TRAILER : BD_DATA;
		return 0;
	default:
		return body_fail(b, -EBADMSG, CHUNK_BAD);
	}
}

/* BD_DATA_CR, BD_DATA_LF: the CRLF after a chunk's data. */
static int chunk_data_end_byte(struct egress_body *b, uint8_t c)
{
	switch (b->state) {
	case BD_DATA_CR:
		b->state = c == '\r' ? BD_DATA_LF : BD_FAILED;
		return b->state == BD_FAILED ? body_fail(b, -EBADMSG, CHUNK_BAD) : 0;
	case BD_DATA_LF:
		if (c != '\n') {
			return body_fail(b, -EBADMSG, CHUNK_BAD);
		}
		*b = (struct egress_body){ .state = BD_SIZE };
		return 0;
	default:
		return body_fail(b, -EBADMSG, CHUNK_BAD);
	}
}

/* BD_TRAILER, BD_TRAILER_NAME, BD_TRAILER_VALUE: one trailer line up to its CR. */
static int chunk_trailer_byte(struct egress_body *b, uint8_t c)
{
	switch (b->state) {
	case BD_TRAILER:
		if (c == '\r') {
			b->state = BD_END_LF;
			return 0;
		}
		if (!tchar(c)) {
			return body_fail(b, -EBADMSG, "a trailer line that is not name: value");
		}
		b->state = BD_TRAILER_NAME;
		return 0;
	case BD_TRAILER_NAME:
		if (c == ':') {
			b->state = BD_TRAILER_VALUE;
		} else if (!tchar(c)) {
			return body_fail(b, -EBADMSG, "a trailer line that is not name: value");
		}
		return 0;
	case BD_TRAILER_VALUE:
		if (c == '\r') {
			b->state = BD_TRAILER_LF;
		} else if (!text_byte(c)) {
			return body_fail(b, -EBADMSG, "a control byte in a trailer line");
		}
		return 0;
	default:
		return body_fail(b, -EBADMSG, CHUNK_BAD);
	}
}

/* BD_TRAILER_LF, BD_END_LF: the LF that ends a trailer line, or the whole body (1). */
static int chunk_trailer_lf_byte(struct egress_body *b, uint8_t c)
{
	if (c != '\n') {
		return body_fail(b, -EBADMSG, CHUNK_BAD);
	}
	if (b->state == BD_END_LF) {
		b->state = BD_DONE;
		return 1;
	}
	b->line = 0;
	b->state = BD_TRAILER;
	return 0;
}

/* One byte of a chunked body's framing (not chunk data): 0, 1 at the end, or -errno. */
static int chunk_byte(struct egress_body *b, uint8_t c)
{
	bool in_line = b->state == BD_SIZE || b->state == BD_EXT_WS || b->state == BD_EXT;
	bool in_trailer = b->state >= BD_TRAILER && b->state <= BD_TRAILER_LF;

	if ((in_line || in_trailer) && ++b->line > EGRESS_CHUNK_LINE_MAX) {
		return body_fail(b, -E2BIG, "a chunk-size or trailer line longer than 4 KiB (EGRESS_CHUNK_LINE_MAX)");
	}
	if (in_trailer && ++b->trailer > EGRESS_TRAILER_MAX) {
		return body_fail(b, -E2BIG, "a chunked body's trailer section larger than 32 KiB (EGRESS_TRAILER_MAX)");
	}
	switch (b->state) {
	case BD_SIZE:
		return chunk_size_byte(b, c);
	case BD_EXT_WS:
	case BD_EXT:
	case BD_SIZE_LF:
		return chunk_ext_byte(b, c);
	case BD_DATA_CR:
	case BD_DATA_LF:
		return chunk_data_end_byte(b, c);
	case BD_TRAILER:
	case BD_TRAILER_NAME:
	case BD_TRAILER_VALUE:
		return chunk_trailer_byte(b, c);
	case BD_TRAILER_LF:
	case BD_END_LF:
		return chunk_trailer_lf_byte(b, c);
	default:
		return body_fail(b, -EBADMSG, CHUNK_BAD);
	}
}

int egress_body_feed(struct egress_body *b, const uint8_t *p, size_t n, size_t *ret_used, const char **ret_reason)
{
	size_t i = 0;
	int r = 0;

	*ret_used = 0;
	if (b->state == BD_FAILED) {
		if (ret_reason) {
			*ret_reason = b->reason;
		}
		return b->err;
	}
	if (b->state == BD_DONE) {
		return 1;
	}
	while (i < n && r == 0) {
		if (b->state == BD_LENGTH || b->state == BD_DATA) {
			size_t k = (size_t)MIN((uint64_t)(n - i), b->left);
			b->left -= k;
			i += k;
			if (b->left == 0) {
				b->state = b->state == BD_LENGTH ? BD_DONE : BD_DATA_CR;
				r = b->state == BD_DONE ? 1 : 0;
			}
			continue;
		}
		r = chunk_byte(b, p[i++]);
	}
	if (r < 0) {
		if (ret_reason) {
			*ret_reason = b->reason;
		}
		return r;
	}
	*ret_used = i;
	return r;
}
