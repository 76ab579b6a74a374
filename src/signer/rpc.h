/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_SIGNER_RPC_H
#define TKBOX_SIGNER_RPC_H

#include "buf.h"
#include "json.h"
#include "rpcmsg.h"

/*
 * The signer's RPC: NDJSON over a Unix stream socket. One request object per
 * line ({"method": "...", ...fields}), one answer per line, answered in
 * order. A success is the result object; a failure is
 * {"error":{"code":"<rpc_err name>","message":"..."}}.
 *
 * Everything here is pure (no I/O, no logging): the line framer over a
 * struct buf and the request parser (strict JSON, known method, the method's
 * closed set of fields, request_id syntax).
 */

#define RPC_PROTO_VERSION 1
#define RPC_MAX_FRAME ((size_t)1 << 20) /* bytes of one request line, newline excluded */
#define RPC_MAX_DEPTH 32

enum rpc_method {
	RPC_HELLO = 0,
	RPC_REGISTER_RUN,
	RPC_DECIDE,
	RPC_COMPLETE,
	RPC_OBSERVE,
	RPC_APPROVAL_REQUEST,
	RPC_APPROVAL_WAIT,
	RPC_APPROVAL_DECIDE,
	RPC_APPROVAL_LIST,
	RPC_CLOSE_RUN,
	RPC_EXPORT,
	RPC_CHECKPOINT_NUDGE,
	RPC_STATUS,
	RPC_METHOD_MAX,
};

enum rpc_err {
	RPC_ERR_INVALID_REQUEST = 0,
	RPC_ERR_UNAUTHENTICATED,
	RPC_ERR_FORBIDDEN,
	RPC_ERR_QUOTA_EXCEEDED,
	RPC_ERR_UNAVAILABLE,
	RPC_ERR_RUN_TOKEN_INVALID,
	RPC_ERR_UNKNOWN_RUN,
	RPC_ERR_RUN_EXISTS,
	RPC_ERR_RUN_CLOSED,
	RPC_ERR_CONFLICT,
	RPC_ERR_UNKNOWN_DECISION,
	RPC_ERR_ARGS_MISMATCH,
	RPC_ERR_UNKNOWN_APPROVAL,
	RPC_ERR_APPROVAL_NOT_PENDING,
	RPC_ERR_VERSION_MISMATCH,
	RPC_ERR_INTERNAL,
	RPC_ERR_MAX,
};

const char *rpc_method_name(enum rpc_method m);
const char *rpc_err_name(enum rpc_err e);

/* Line framer: bytes in, complete lines out. */
struct rpc_framer {
	struct buf in;
	size_t scanned; /* bytes of `in` already known to hold no newline */
};

_wur_ int rpc_framer_init(struct rpc_framer *f);
void rpc_framer_release(struct rpc_framer *f);
/* Append received bytes. -E2BIG when more than RPC_MAX_FRAME + 1 bytes would sit without a newline. */
_wur_ int rpc_framer_feed(struct rpc_framer *f, const void *p, size_t n);
/*
 * The next complete line (without its '\n') in ret_p/ret_n: 1 when there is
 * one (pass the length to rpc_framer_consume when done), 0 when more bytes
 * are needed, -E2BIG when the pending line is already longer than
 * RPC_MAX_FRAME (the stream is then unusable: the caller answers
 * quota_exceeded and closes).
 */
_wur_ int rpc_framer_next(struct rpc_framer *f, const uint8_t **ret_p, size_t *ret_n);
void rpc_framer_consume(struct rpc_framer *f, size_t line_len);

struct rpc_request {
	enum rpc_method method;
	json_t *obj; /* owned */
	const char *request_id; /* points into obj, NULL when absent */
};

/*
 * Parse one line. On failure returns -EBADMSG (or -E2BIG) and sets *ret_err
 * and a message in msg; nothing is allocated.
 */
_wur_ int rpc_request_parse(const void *p, size_t n, struct rpc_request *ret, enum rpc_err *ret_err, char *msg,
			    size_t msg_size);
void rpc_request_release(struct rpc_request *r);

/* {"error":{"code","message"}} as a new object. */
json_t *rpc_error_new(enum rpc_err e, const char *message);

#endif
