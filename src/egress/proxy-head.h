/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_EGRESS_PROXY_HEAD_H
#define TKBOX_EGRESS_PROXY_HEAD_H

#include "egress/host.h"

/*
 * The request head a client in the box sends to the proxy, parsed strictly
 * (RFC 9112) from the bytes received so far. Pure: no I/O, no allocation.
 *
 * Accepted: "CONNECT host:port HTTP/1.1" (or HTTP/1.0, as python's
 * http.client sends it; Host is optional for CONNECT in either version) and
 * "METHOD http://host[:port]/path HTTP/1.1" (GET, HEAD, POST, PUT, DELETE,
 * PATCH, OPTIONS), then header lines "name: value" CRLF and a blank line.
 * Every other rule is the same for a 1.0 CONNECT (no body, not port 80). Refused, each with a reason a 400 or
 * 403 body can show: bare LF or CR, NUL and other control bytes, obs-fold,
 * a header name that is not a token, Content-Length with Transfer-Encoding, a
 * second Content-Length or Transfer-Encoding, a Transfer-Encoding other than
 * "chunked", a CONNECT with a body, a second Host, a Host that names another
 * host or port than the target, CONNECT to port 80, an origin-form target,
 * https:// in absolute form, a version other than HTTP/1.1 (HTTP/1.0 in
 * absolute form, HTTP/0.9, HTTP/2), any other method. Caps: the head (EGRESS_HEAD_MAX), header lines
 * (EGRESS_HEAD_MAX_HEADERS), the target (EGRESS_TARGET_MAX).
 *
 * The src/daemon/http.c helpers are not reused: they are static to the API's
 * origin-form subset, which refuses every Transfer-Encoding; the proxy must
 * take chunked bodies and absolute-form targets.
 */

#define EGRESS_HEAD_MAX 32768
#define EGRESS_HEAD_MAX_HEADERS 100
#define EGRESS_TARGET_MAX 8192

enum egress_method {
	EGRESS_METHOD_CONNECT = 0,
	EGRESS_METHOD_GET,
	EGRESS_METHOD_HEAD,
	EGRESS_METHOD_POST,
	EGRESS_METHOD_PUT,
	EGRESS_METHOD_DELETE,
	EGRESS_METHOD_PATCH,
	EGRESS_METHOD_OPTIONS,
};

struct egress_head {
	enum egress_req_kind kind;
	enum egress_method method;
	struct egress_host host;
	uint16_t port;
	size_t path_off, path_len; /* absolute-form: the path and query in the parsed bytes (len 0: "/") */
	bool has_length;
	uint64_t content_length;
	bool chunked;
	bool http10; /* an HTTP/1.0 CONNECT */
	size_t head_len; /* bytes of the head, blank line included */
};

/*
 * Parse the head at p[0..n). Returns 1 with *ret filled when the head is
 * complete, 0 when more bytes are needed (n < EGRESS_HEAD_MAX), or a
 * negative errno with *ret_reason set to static text naming the rule:
 * -EBADMSG malformed, -E2BIG past a cap, -EPROTONOSUPPORT version,
 * -EOPNOTSUPP method, -ENOTSUP Transfer-Encoding, -EACCES a rule of the door
 * (CONNECT :80, Host differs: *ret is filled then, its kind, host and port
 * naming the target refused).
 */
_wur_ int egress_head_parse(const uint8_t *p, size_t n, struct egress_head *ret, const char **ret_reason);

/*
 * The field lines of any HTTP/1.1 head at p[0..n) (a request or a response:
 * the first line is not read) by the rules above: the head's CRLF, its caps,
 * NUL, obs-fold, token names, control bytes, Content-Length digits, a second
 * Content-Length, Transfer-Encoding or Host, a Transfer-Encoding other than
 * chunked, both together. Returns 1 with *ret's has_length,
 * content_length, chunked and head_len filled and the Host value at
 * *ret_host (NULL when none), 0 for more bytes, or a negative errno with
 * *ret_reason (as egress_head_parse). For the inspector (inspect.c), whose
 * origin-form requests and responses the proxy head's parse refuses.
 */
_wur_ int egress_head_fields(const uint8_t *p, size_t n, struct egress_head *ret, const uint8_t **ret_host,
			     size_t *ret_host_len, const char **ret_reason);

/*
 * The request's body after an accepted absolute-form head, framed as the head
 * says (RFC 9112 section 6.3): Content-Length bytes, or chunked (hex sizes of
 * at most 15 digits, extensions after ";", CRLF after each line and chunk,
 * the last chunk "0", trailer field lines, the empty line), or no body at
 * all. The proxy forwards exactly this and nothing after it, so a second
 * request pipelined behind it never reaches the origin. Incremental, any
 * split; pure, fixed size.
 */
#define EGRESS_CHUNK_LINE_MAX 4096 /* a chunk-size line with its extensions, or one trailer line */
#define EGRESS_TRAILER_MAX 32768 /* the trailer section */

struct egress_body {
	uint8_t state;
	uint8_t digits;
	uint64_t left; /* Content-Length or chunk-data bytes still to come */
	size_t line; /* bytes of the current line */
	size_t trailer; /* bytes of the trailer section */
	int err; /* the sticky error */
	const char *reason;
};

void egress_body_init(struct egress_body *b, const struct egress_head *h);

/*
 * Feed p[0..n). 0: all n bytes are the body's and more is to come; 1: the
 * body ended after *ret_used bytes of p (the rest is not this request's);
 * -EBADMSG (a malformed chunk framing) or -E2BIG (past a cap) with
 * *ret_reason. After 1 or an error each call returns the same, *ret_used 0.
 */
_wur_ int egress_body_feed(struct egress_body *b, const uint8_t *p, size_t n, size_t *ret_used,
			   const char **ret_reason);

#endif
