/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the signer's RPC input path, bytes as they arrive on the
 * socket. Feeds the input to the NDJSON line framer in pieces whose sizes
 * come from the input, and parses every complete line as a request.
 */
#include <string.h>

#include "signer/rpc.h"

#include "banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rpc_framer fr;
	size_t off = 0;

	if (rpc_framer_init(&fr) < 0) {
		return 0;
	}
	while (off < size) {
		/* The first byte of each piece chooses the piece length (1..256). */
		size_t piece = (size_t)data[off] + 1;
		const uint8_t *line;
		size_t len;
		int r;

		off++;
		piece = MIN(piece, size - off);
		if (rpc_framer_feed(&fr, data + off, piece) < 0) {
			break;
		}
		off += piece;
		while ((r = rpc_framer_next(&fr, &line, &len)) == 1) {
			struct rpc_request req = { 0 };
			enum rpc_err e;
			char msg[256];
			if (rpc_request_parse(line, len, &req, &e, msg, sizeof(msg)) == 0) {
				rpc_request_release(&req);
			} else if (strlen(msg) == 0 || (unsigned)e >= RPC_ERR_MAX) {
				__builtin_trap(); /* every refusal names a typed error and says why */
			}
			rpc_framer_consume(&fr, len);
		}
		if (r < 0) {
			break;
		}
	}
	rpc_framer_release(&fr);
	return 0;
}
