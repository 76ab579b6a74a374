/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_SIGNER_RPCMSG_H
#define TKBOX_SIGNER_RPCMSG_H

#include <stdbool.h>
#include <stdint.h>

#include "json.h"

/*
 * The signer RPC's crossing messages, typed: decide, complete and observe,
 * each with its encoder (the daemon's side) and its decoder (the signer's
 * side) in this one file, and the one args_digest both sides compute. Pure:
 * no I/O, no logging, no globals. It is part of the signer's client library,
 * so the daemon links it without any signer internals.
 *
 * A decoder reads an already parsed request object (rpc_request_parse: strict
 * JSON, known method) and checks its closed key set, the required fields,
 * each field's type, range and form. Strings in the struct point into the
 * object (borrowed). On failure: -EBADMSG and a message for the caller in msg
 * (the signer answers invalid_request with it).
 */

#define RPC_MAX_ID_LEN 128 /* request_id, tool_call_id, run_id */
#define RPC_MAX_TOOL_LEN 256 /* bytes of a decide's tool name */
#define RPC_MAX_ERROR_LEN 4096 /* bytes of a completion's error text */
/* stdin_bytes in a completion: JSON's exact integer range (I-JSON), so every verifier reads it alike. */
#define COMPLETE_MAX_STDIN_BYTES ((INT64_C(1) << 53))
/* bytes_up, bytes_down (a connection's bytes each way) and duration_ms in a completion: 0..2^53 too. */
#define COMPLETE_MAX_COUNT ((INT64_C(1) << 53))
/* Linux signal numbers, real-time ones included. */
#define COMPLETE_MAX_SIGNAL 64
/* written_paths in a completion (the patch door's Write): 0..COMPLETE_MAX_WRITTEN strings (= PATCH_MAX_FILES), each
 * 1..COMPLETE_MAX_WRITTEN_PATH bytes without NUL. The daemon sends at most one, the file the decision wrote. */
#define COMPLETE_MAX_WRITTEN 4096
#define COMPLETE_MAX_WRITTEN_PATH 4096
/* "sha256:" and 64 lowercase hex digits. */
#define RPC_DIGEST_STRLEN (7 + 64)

/* True when s is a valid id ([A-Za-z0-9._:-]{1,128}). */
bool rpc_id_ok(const char *s);

/*
 * The digest a completion carries of what ran: "sha256:" + hex SHA-256 of the
 * JCS form of {"tool": tool, "args": args}. The daemon computes it of what it
 * ran, the signer of what it decided; the two must be this one function.
 */
_wur_ int rpc_args_digest(const char *tool, const json_t *args, char ret[RPC_DIGEST_STRLEN + 1]);

struct rpc_decide {
	const char *request_id;
	const char *run_id;
	const char *run_token;
	const char *tool_call_id;
	const char *tool; /* 1..RPC_MAX_TOOL_LEN bytes */
	const json_t *args; /* an object, or a JSON text in a string (raw arguments) */
	const char *args_source; /* raw, parsed or coerced; NULL: not given */
	int64_t attempt; /* >= 0; -1: not given */
};

enum rpc_status {
	RPC_STATUS_OK = 0,
	RPC_STATUS_ERROR,
};

struct rpc_complete {
	const char *request_id;
	const char *run_id;
	const char *run_token;
	const char *tool_call_id; /* NULL: not given */
	const char *decision_id;
	const char *args_digest;
	enum rpc_status status;
	int exit_code; /* 0..255; -1: not known (never both exit_code and signal) */
	int signal; /* 1..COMPLETE_MAX_SIGNAL; 0: not killed */
	const char *error; /* NULL: none */
	const char *stdin_sha256; /* 64 lowercase hex, with stdin_bytes; NULL: no stdin streamed */
	int64_t stdin_bytes;
	/* A connection's transfer (the network door), each 0..COMPLETE_MAX_COUNT when given. */
	bool has_bytes; /* bytes_up and bytes_down: both or neither */
	int64_t bytes_up, bytes_down;
	bool has_duration;
	int64_t duration_ms;
	/* The files a Write completion wrote (an array of strings, borrowed); NULL: not given. */
	const json_t *written_paths;
};

struct rpc_observe {
	const char *request_id;
	const char *run_id;
	const char *run_token;
	const char *kind; /* one of rpc_observe_kinds */
	const json_t *data; /* an object */
};

/* The closed list of observation kinds, NULL-terminated. */
extern const char *const rpc_observe_kinds[];

/* A new request object ({"method": ..., fields}), or NULL when out of memory. The struct is not taken. */
json_t *rpc_decide_encode(const struct rpc_decide *m);
json_t *rpc_complete_encode(const struct rpc_complete *m);
json_t *rpc_observe_encode(const struct rpc_observe *m);

_wur_ int rpc_decide_decode(const json_t *obj, struct rpc_decide *ret, char *msg, size_t msg_size);
_wur_ int rpc_complete_decode(const json_t *obj, struct rpc_complete *ret, char *msg, size_t msg_size);
_wur_ int rpc_observe_decode(const json_t *obj, struct rpc_observe *ret, char *msg, size_t msg_size);

#endif
