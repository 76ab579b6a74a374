/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_EGRESS_INSPECT_H
#define TKBOX_EGRESS_INSPECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "egress/leak.h"
#include "egress/model.h"
#include "egress/secret.h"
#include "macro.h"

/*
 * HTTP/1.1 on a connection the proxy reads (docs/secrets.md): the
 * plaintext of a TLS tunnel it terminates, or a plain absolute-form request.
 * Sans-I/O and pure: the caller feeds the box's bytes and the origin's
 * bytes, and takes the bytes for the other side and the events.
 *
 * Requests (box -> origin), each head parsed strictly (the proxy-head.c
 * rules for fields: no bare LF/CR, no obs-fold, tokens, CL+TE, duplicate CL
 * or TE, TE other than chunked; caps EGRESS_HEAD_MAX, EGRESS_HEAD_MAX_HEADERS):
 *   - tunnel: the target must be origin-form ("/..." or "*" for OPTIONS);
 *     absolute, authority and any other form is refused (F3); Host must name
 *     the tunnel's host (and its port, when given, must be the tunnel's);
 *     Upgrade and "Connection: upgrade" are refused; keep-alive and
 *     pipelining are served in order;
 *   - absolute (not tunnel): the first head is the proxy's absolute-form
 *     request; it goes in origin form with "Connection: close" and
 *     hop-by-hop headers dropped, and nothing after its body;
 *   - the bound header of each secret bound to this host (tunnel only): every
 *     occurrence of the placeholder in it is replaced by the value, and the
 *     request waits (EGRESS_INSP_USE, egress_insp_use_done) before any byte
 *     of it goes; a placeholder or value anywhere else (request line, other
 *     headers, body, trailers; another secret's placeholder in the bound
 *     header) is a leak: EGRESS_INSP_LEAK and the request is refused (403,
 *     rule "secret-leak") before the matching bytes go (the body is scanned
 *     with the stream's holdback: what went is a prefix of the body with no
 *     whole target in it);
 *   - Accept-Encoding: to a host a secret is bound to, replaced by
 *     "identity"; elsewhere only gzip, deflate and identity are kept;
 *   - a request body with a Content-Encoding other than identity is refused
 *     (403 "request-encoding"): the proxy must read it;
 *   - chunked bodies are decoded for the scan and sent chunked again.
 * Responses (origin -> box), matched to requests in order:
 *   - a status below 100, or a second status line that does not parse, is a
 *     protocol error (-EPROTO): the caller answers 502 (F2) when nothing of
 *     this response went yet, else resets; 1xx other than 100/103 is an error;
 *   - header values and trailers have every value redacted (same length);
 *   - bodies: Content-Length, chunked or close-delimited; HEAD, 1xx, 204 and
 *     304 have none; gzip, x-gzip and deflate bodies are decoded, redacted
 *     and encoded again (the same coding) and sent chunked (Content-Length
 *     dropped); any other Content-Encoding is a 502 (rule
 *     "response-encoding"); identity bodies keep their length and framing.
 *   - model hosts: EGRESS_INSP_MODEL_CALL when a response ends.
 */

#define EGRESS_INSP_PIPELINE_MAX 16 /* requests sent and not yet answered */
#define EGRESS_INSP_OUT_MAX ((size_t)1 << 20) /* bytes appended to out by one call, at most */

struct egress_insp;

struct egress_insp_config {
	const char *host; /* canonical: the tunnel's host, or the absolute-form request's */
	uint16_t port;
	bool tunnel; /* a TLS tunnel the proxy terminates; else one plain absolute-form request */
	bool model; /* a model host: each exchange ends in EGRESS_INSP_MODEL_CALL */
	const struct egress_secret *secrets; /* may be NULL with n_secrets 0 */
	size_t n_secrets;
	const struct egress_leak_set *leak; /* built from secrets; NULL when n_secrets is 0 */
	uint64_t (*now_ms)(void); /* NULL: clock_mono_ms */
};

enum egress_insp_ev_type {
	EGRESS_INSP_USE = 1, /* a swap waits: egress_insp_use_done */
	EGRESS_INSP_LEAK, /* a request was refused: a value or placeholder where it may not be */
	EGRESS_INSP_MODEL_CALL, /* a model host's exchange ended */
};

#define EGRESS_INSP_PATH_MAX 1024 /* the recorded path (no query), cut at a UTF-8 character */

struct egress_insp_event {
	enum egress_insp_ev_type type;
	size_t secret; /* USE, LEAK: index into secrets */
	char reason[160]; /* LEAK: where and which form, e.g. "header X-Token: the placeholder of GH (raw)" */
	/* MODEL_CALL */
	char method[16];
	char path[EGRESS_INSP_PATH_MAX + 1];
	int status;
	uint64_t bytes_up, bytes_down; /* body bytes, decoded */
	uint64_t duration_ms; /* request head's first byte to response end */
	struct egress_model_info info;
};

/* What the box is answered when the proxy refuses a request. */
struct egress_insp_refusal {
	int status; /* 400, 403, 502 */
	const char *rule; /* "secret-leak", "host-mismatch", "request-target", "malformed-request", "upgrade",
			     "request-encoding", "response-encoding", "bad-response", "swap-refused" */
	char message[512]; /* which rule and what a person can do; never any byte of a value */
};

_wur_ int egress_insp_new(const struct egress_insp_config *cfg, struct egress_insp **ret);
void egress_insp_free(struct egress_insp *h);

/*
 * The box's bytes p[0..n): *used of them taken (fewer while a swap waits
 * or out has no room), the origin's bytes appended to out (a BUF_SECRET
 * buffer: swapped heads hold a value). 0; -EACCES the request is refused
 * (egress_insp_refusal; nothing more goes either way but that answer);
 * -errno of out.
 */
_wur_ int egress_insp_request(struct egress_insp *h, const uint8_t *p, size_t n, size_t *used, struct buf *out);

/* The box closed its side: 0, or -EACCES when it ended inside a request (refusal filled). */
_wur_ int egress_insp_request_eof(struct egress_insp *h);

/*
 * The origin's bytes p[0..n): *used taken, the box's bytes appended to out.
 * 0; -EPROTO the origin broke HTTP (refusal filled: status 502 and whether
 * any of this response went, egress_insp_response_started); -errno of out.
 */
_wur_ int egress_insp_response(struct egress_insp *h, const uint8_t *p, size_t n, size_t *used, struct buf *out);

/* The origin closed: a close-delimited body ends (0); inside any other message -EPROTO. */
_wur_ int egress_insp_response_eof(struct egress_insp *h, struct buf *out);

/* Bytes of the current response already appended to out (a 502 can no longer replace it). */
bool egress_insp_response_started(const struct egress_insp *h);

/* The next event, 1 (*ret filled) or 0. */
int egress_insp_event(struct egress_insp *h, struct egress_insp_event *ret);

/* True while a swapped request waits for egress_insp_use_done. */
bool egress_insp_waiting(const struct egress_insp *h);

/* The use was recorded (ok) or not (refused: -EACCES from the next request call, rule "swap-refused"). */
void egress_insp_use_done(struct egress_insp *h, bool ok);

const struct egress_insp_refusal *egress_insp_refusal(const struct egress_insp *h);

/* The exchange is over: absolute form after its response, or a "Connection: close" answered. */
bool egress_insp_done(const struct egress_insp *h);

#endif
