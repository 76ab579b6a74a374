/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_HTTP_H
#define TKBOX_DAEMON_HTTP_H

#include "buf.h"

/*
 * The daemon API's HTTP/1.1 subset (one request per connection), parsed
 * strictly from the bytes a local client sends, and the response head the
 * CLI reads back. Pure: no I/O, no logging.
 *
 * A request head is: METHOD SP origin-form SP HTTP/1.1 CRLF, header lines
 * "name: value" CRLF, then CRLF. Refused (-EBADMSG): bare LF, obs-fold,
 * control bytes, a header name that is not a token, a target that does not
 * start with '/', holds bytes outside printable ASCII or is longer than
 * HTTP_MAX_TARGET, a second Content-Length, any Transfer-Encoding (-ENOTSUP),
 * a version other than HTTP/1.1 or HTTP/1.0 (-EPROTONOSUPPORT), a method
 * other than GET, POST, DELETE (-EOPNOTSUPP). Caps (-E2BIG): the head
 * (HTTP_MAX_HEAD), header count (HTTP_MAX_HEADERS), Content-Length above
 * HTTP_MAX_BODY.
 */

#define HTTP_MAX_HEAD 16384
#define HTTP_MAX_HEADERS 64
#define HTTP_MAX_TARGET 1024
#define HTTP_MAX_BODY ((size_t)2 << 20)
#define HTTP_MAX_RESPONSE_HEAD 16384
#define HTTP_MAX_HEADER_VALUE 4096 /* a response header value the client keeps */

/* The Upgrade token of an exec stream (after a 101 the connection carries exec frames, common/exec-stream.h). */
#define HTTP_EXEC_UPGRADE "tkbox-exec/1"

enum http_method {
	HTTP_GET = 0,
	HTTP_POST,
	HTTP_DELETE,
};

struct http_request {
	enum http_method method;
	char *target; /* owned */
	uint64_t content_length;
	bool upgrade_exec; /* Upgrade: tkbox-exec/1 */
};

void http_request_release(struct http_request *r);

/*
 * Parse a request head from the first n bytes received. Returns 0 when the
 * head is not complete yet (and n < HTTP_MAX_HEAD), 1 when it is: *ret is
 * filled and *ret_head_len is the head's length including the blank line.
 */
_wur_ int http_request_parse(const uint8_t *p, size_t n, struct http_request *ret, size_t *ret_head_len);

struct http_response {
	int status;
	uint64_t content_length;
	bool has_length;
	bool upgrade_exec;
	char *approval; /* Tkbox-Approval (a 102 interim response), owned */
	char *trust; /* Tkbox-Trust, owned */
	char *bundle_sha256; /* Tkbox-Bundle-Sha256, owned */
	char *patch_sha256; /* Tkbox-Patch-Sha256 (tkbox diff), owned */
	char *patch_summary; /* Tkbox-Patch-Summary (tkbox diff: base64url JSON), owned */
};

void http_response_release(struct http_response *r);

/* As http_request_parse, for a response head (status 100..599). */
_wur_ int http_response_parse(const uint8_t *p, size_t n, struct http_response *ret, size_t *ret_head_len);

/* Split "/v1/boxes/NAME/VERB" into at most 4 segments (pointers into a copy in *ret_copy). */
#define HTTP_MAX_SEGMENTS 4
_wur_ int http_split_path(const char *target, char **ret_copy, const char *ret_seg[HTTP_MAX_SEGMENTS], size_t *ret_n);

const char *http_reason(int status);

#endif
