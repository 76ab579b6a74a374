/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the signer RPC's typed crossing messages
 * (src/signer/rpcmsg.c). The input is one request line; once parsed as the
 * signer parses it (rpc_request_parse), it goes through the typed decoder of
 * its method. A refusal must say why; an accepted message must encode back
 * to exactly the object it came from (the key sets are closed, so nothing is
 * dropped or added), and a decide's arguments must have an args_digest.
 */
#include <string.h>

#include "signer/rpc.h"
#include "signer/rpcmsg.h"

#include "banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same_object(const json_t *a, json_t *b)
{
	if (!b) {
		return; /* out of memory */
	}
	if (!json_equal((json_t *)a, b)) {
		__builtin_trap(); /* encode(decode(x)) != x */
	}
	json_decref(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rpc_request req = { 0 };
	enum rpc_err e;
	char msg[256] = "", digest[RPC_DIGEST_STRLEN + 1];
	int r = -EBADMSG;

	if (rpc_request_parse(data, size, &req, &e, msg, sizeof(msg)) < 0) {
		return 0;
	}
	msg[0] = '\0';
	switch (req.method) {
	case RPC_DECIDE: {
		struct rpc_decide m;
		r = rpc_decide_decode(req.obj, &m, msg, sizeof(msg));
		if (r == 0) {
			same_object(req.obj, rpc_decide_encode(&m));
			if (rpc_args_digest(m.tool, m.args, digest) == 0 &&
			    (strlen(digest) != RPC_DIGEST_STRLEN || strncmp(digest, "sha256:", 7) != 0)) {
				__builtin_trap();
			}
		}
		break;
	}
	case RPC_COMPLETE: {
		struct rpc_complete m;
		r = rpc_complete_decode(req.obj, &m, msg, sizeof(msg));
		if (r == 0) {
			if (m.exit_code >= 0 && m.signal > 0) {
				__builtin_trap(); /* exit_code and signal exclude each other */
			}
			/* A connection's counts: in range, and bytes_up only with bytes_down (and back). */
			if ((m.has_bytes && (m.bytes_up < 0 || m.bytes_up > COMPLETE_MAX_COUNT || m.bytes_down < 0 ||
					     m.bytes_down > COMPLETE_MAX_COUNT)) ||
			    (m.has_bytes != (json_object_get(req.obj, "bytes_down") != NULL)) ||
			    (m.has_duration && (m.duration_ms < 0 || m.duration_ms > COMPLETE_MAX_COUNT))) {
				__builtin_trap();
			}
			same_object(req.obj, rpc_complete_encode(&m));
		}
		break;
	}
	case RPC_OBSERVE: {
		struct rpc_observe m;
		r = rpc_observe_decode(req.obj, &m, msg, sizeof(msg));
		if (r == 0) {
			same_object(req.obj, rpc_observe_encode(&m));
		}
		break;
	}
	default:
		r = 0;
		break;
	}
	if (r < 0 && (r != -EBADMSG || strlen(msg) == 0)) {
		__builtin_trap(); /* every refusal is -EBADMSG and says why */
	}
	rpc_request_release(&req);
	return 0;
}
