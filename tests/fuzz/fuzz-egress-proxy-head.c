/* SPDX-License-Identifier: Apache-2.0 */
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
 * the target host re-parses to itself; every refusal carries a reason.
 */
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
	if (r != 1) {
		return 0;
	}
	if (h.head_len > size || h.head_len > EGRESS_HEAD_MAX || (h.has_length && h.chunked) ||
	    (h.kind == EGRESS_REQ_CONNECT && (h.port == 80 || h.chunked || h.content_length != 0)) || h.port == 0 ||
	    h.path_off + h.path_len > h.head_len || h.path_len > EGRESS_TARGET_MAX) {
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
