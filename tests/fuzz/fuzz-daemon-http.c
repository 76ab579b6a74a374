/* SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "daemon/http.h"
#include "daemon/supmsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * The daemon's API parser over bytes a local client sends, and the CLI's
 * response parser and the supervisor message parser over the same bytes.
 * Properties: no crash or leak; an accepted head lies within the input and
 * the caps; a request parses identically from its head alone and with any
 * body after it; a target that parses splits into at most 4 segments.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_request req, again;
	struct http_response resp;
	struct supmsg m;
	size_t head = 0, head2 = 0;
	int r;

	r = http_request_parse(data, size, &req, &head);
	if (r == 1) {
		if (head > size || head > HTTP_MAX_HEAD || req.content_length > HTTP_MAX_BODY || req.target[0] != '/' ||
		    strlen(req.target) > HTTP_MAX_TARGET) {
			abort();
		}
		if (http_request_parse(data, head, &again, &head2) != 1 || head2 != head ||
		    strcmp(again.target, req.target) != 0 || again.method != req.method ||
		    again.content_length != req.content_length || again.upgrade_exec != req.upgrade_exec) {
			abort();
		}
		http_request_release(&again);
		{
			const char *seg[HTTP_MAX_SEGMENTS];
			char *copy = NULL;
			size_t n = 0;
			if (http_split_path(req.target, &copy, seg, &n) == 0) {
				if (n > HTTP_MAX_SEGMENTS) {
					abort();
				}
				free(copy);
			}
		}
		http_request_release(&req);
	} else if (r == 0 && size >= HTTP_MAX_HEAD) {
		abort(); /* "need more" past the cap would let a client hold memory forever */
	}
	r = http_response_parse(data, size, &resp, &head);
	if (r == 1) {
		if (head > size || resp.status < 100 || resp.status > 999) {
			abort();
		}
		http_response_release(&resp);
	}
	if (supmsg_parse(data, size, &m) == 0) {
		supmsg_release(&m);
	}
	return 0;
}
