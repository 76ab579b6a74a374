/* SPDX-License-Identifier: Apache-2.0 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "egress/proxy-head.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * The proxy request head over any bytes. Properties: an accepted head lies
 * within the input and the caps, frames its body one way only (never
 * Content-Length with chunked), never CONNECTs to port 80, and parses the
 * same from the head alone; one byte less is incomplete, never accepted;
 * its version is HTTP/1.1, or HTTP/1.0 for a CONNECT only (read from the
 * request line's last 8 bytes, independently of the parser);
 * the target host re-parses to itself; every refusal carries a reason; a
 * refusal by a rule of the door names its target; the body after an accepted
 * head (body_check).
 */
/*
 * The body after the head: fed whole and byte by byte, the same end and the
 * same verdict; the end lies within the bytes; a Content-Length body is
 * exactly its length; a refusal carries a reason and sticks.
 */
static void body_check(const struct egress_head *h, const uint8_t *p, size_t n)
{
	struct egress_body a, b;
	const char *why = NULL;
	size_t used = 0, u = 0, total = 0;
	int r, r1 = 0;

	egress_body_init(&a, h);
	r = egress_body_feed(&a, p, n, &used, &why);
	if ((r < 0 && !why) || (r >= 0 && used > n) || (r == 0 && used != n)) {
		abort();
	}
	if (r == 1 && !h->chunked && used != (h->has_length ? h->content_length : 0)) {
		abort();
	}
	egress_body_init(&b, h);
	for (size_t i = 0; i < n && r1 == 0; i++) {
		r1 = egress_body_feed(&b, p + i, 1, &u, NULL);
		total += r1 >= 0 ? u : 0;
	}
	if (n == 0) {
		r1 = egress_body_feed(&b, p, 0, &u, NULL);
	}
	if (r1 != r || (r == 1 && total != used)) {
		abort();
	}
	if (r < 0 && (egress_body_feed(&a, p, n, &u, &why) != r || u != 0)) {
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct egress_head h, again;
	struct egress_host host;
	const char *reason = NULL;
	int r;

	r = egress_head_parse(data, size, &h, &reason);
	if (r < 0 && !reason) {
		abort();
	}
	/* A rule of the door names the target it refused. */
	if (r == -EACCES && (h.port == 0 || !h.host.name[0])) {
		abort();
	}
	if (r != 1) {
		return 0;
	}
	body_check(&h, data + h.head_len, size - h.head_len);
	if (h.head_len > size || h.head_len > EGRESS_HEAD_MAX || (h.has_length && h.chunked) ||
	    (h.kind == EGRESS_REQ_CONNECT && (h.port == 80 || h.chunked || h.content_length != 0)) || h.port == 0 ||
	    h.path_off + h.path_len > h.head_len || h.path_len > EGRESS_TARGET_MAX) {
		abort();
	}
	const uint8_t *eol = memchr(data, '\r', h.head_len);
	size_t ln = eol ? (size_t)(eol - data) : 0;
	bool v10 = ln >= 8 && memcmp(eol - 8, "HTTP/1.0", 8) == 0;
	if (ln < 8 || (!v10 && memcmp(eol - 8, "HTTP/1.1", 8) != 0) || v10 != h.http10 ||
	    (v10 && h.kind != EGRESS_REQ_CONNECT)) {
		abort();
	}
	if (egress_head_parse(data, h.head_len, &again, &reason) != 1 || memcmp(&again, &h, sizeof(h)) != 0) {
		abort();
	}
	if (egress_head_parse(data, h.head_len - 1, &again, &reason) != 0) {
		abort();
	}
	if (egress_host_parse(h.host.name, strlen(h.host.name), &host) != 0 || strcmp(host.name, h.host.name) != 0) {
		abort();
	}
	return 0;
}
