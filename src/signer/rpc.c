/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "rpc.h"

#include "banned.h"

static const char *const method_names[RPC_METHOD_MAX] = {
	[RPC_HELLO] = "hello",
	[RPC_REGISTER_RUN] = "register_run",
	[RPC_DECIDE] = "decide",
	[RPC_COMPLETE] = "complete",
	[RPC_OBSERVE] = "observe",
	[RPC_APPROVAL_REQUEST] = "approval_request",
	[RPC_APPROVAL_WAIT] = "approval_wait",
	[RPC_APPROVAL_DECIDE] = "approval_decide",
	[RPC_APPROVAL_LIST] = "approval_list",
	[RPC_CLOSE_RUN] = "close_run",
	[RPC_EXPORT] = "export",
	[RPC_CHECKPOINT_NUDGE] = "checkpoint_nudge",
	[RPC_STATUS] = "status",
};

static const char *const err_names[RPC_ERR_MAX] = {
	[RPC_ERR_INVALID_REQUEST] = "invalid_request",
	[RPC_ERR_UNAUTHENTICATED] = "unauthenticated",
	[RPC_ERR_FORBIDDEN] = "forbidden",
	[RPC_ERR_QUOTA_EXCEEDED] = "quota_exceeded",
	[RPC_ERR_UNAVAILABLE] = "unavailable",
	[RPC_ERR_RUN_TOKEN_INVALID] = "run_token_invalid",
	[RPC_ERR_UNKNOWN_RUN] = "unknown_run",
	[RPC_ERR_RUN_EXISTS] = "run_exists",
	[RPC_ERR_RUN_CLOSED] = "run_closed",
	[RPC_ERR_CONFLICT] = "conflict",
	[RPC_ERR_UNKNOWN_DECISION] = "unknown_decision",
	[RPC_ERR_ARGS_MISMATCH] = "args_mismatch",
	[RPC_ERR_UNKNOWN_APPROVAL] = "unknown_approval",
	[RPC_ERR_APPROVAL_NOT_PENDING] = "approval_not_pending",
	[RPC_ERR_VERSION_MISMATCH] = "version_mismatch",
	[RPC_ERR_INTERNAL] = "internal",
};

/*
 * Each method's closed field set; a leading '*' marks a required field.
 * State-changing methods require request_id (idempotent retries).
 */
static const char *const method_fields[RPC_METHOD_MAX][20] = {
	[RPC_HELLO] = { "*proto", "client", "role" },
	[RPC_REGISTER_RUN] = { "*request_id", "*agent", "run_id" },
	[RPC_DECIDE] = { "*request_id", "*run_id", "*run_token", "*tool_call_id", "*tool", "*args", "args_source",
			 "attempt" },
	[RPC_COMPLETE] = { "*request_id", "*run_id", "*run_token", "tool_call_id", "*decision_id", "*args_digest",
			   "*status", "exit_code", "signal", "error", "stdin_sha256", "stdin_bytes", "bytes_up",
			   "bytes_down", "duration_ms", "written_paths" },
	[RPC_OBSERVE] = { "*request_id", "*run_id", "*run_token", "*kind", "*data" },
	[RPC_APPROVAL_REQUEST] = { "*request_id", "*run_id", "*run_token", "*decision_id" },
	[RPC_APPROVAL_WAIT] = { "*approval_id", "timeout_ms" },
	[RPC_APPROVAL_DECIDE] = { "*request_id", "*approval_id", "*decision", "reason" },
	[RPC_APPROVAL_LIST] = { NULL },
	[RPC_CLOSE_RUN] = { "*request_id", "*run_id", "*run_token", "reason" },
	[RPC_EXPORT] = { "*run_id", "inline" },
	[RPC_CHECKPOINT_NUDGE] = { NULL },
	[RPC_STATUS] = { NULL },
};

const char *rpc_method_name(enum rpc_method m)
{
	return (unsigned)m < RPC_METHOD_MAX ? method_names[m] : "unknown";
}

const char *rpc_err_name(enum rpc_err e)
{
	return (unsigned)e < RPC_ERR_MAX ? err_names[e] : "internal";
}

int rpc_framer_init(struct rpc_framer *f)
{
	*f = (struct rpc_framer){ 0 };
	return buf_init(&f->in, RPC_MAX_FRAME + 1, 0);
}

void rpc_framer_release(struct rpc_framer *f)
{
	if (!f) {
		return;
	}
	buf_release(&f->in);
	f->scanned = 0;
}

int rpc_framer_feed(struct rpc_framer *f, const void *p, size_t n)
{
	return buf_put(&f->in, p, n);
}

int rpc_framer_next(struct rpc_framer *f, const uint8_t **ret_p, size_t *ret_n)
{
	const uint8_t *p = buf_ptr(&f->in);
	size_t len = buf_len(&f->in);
	const uint8_t *nl;

	if (f->scanned > len) {
		f->scanned = 0;
	}
	nl = memchr(p + f->scanned, '\n', len - f->scanned);
	if (!nl) {
		f->scanned = len;
		return len > RPC_MAX_FRAME ? -E2BIG : 0;
	}
	if ((size_t)(nl - p) > RPC_MAX_FRAME) {
		return -E2BIG;
	}
	*ret_p = p;
	*ret_n = (size_t)(nl - p);
	return 1;
}

void rpc_framer_consume(struct rpc_framer *f, size_t line_len)
{
	(void)buf_consume(&f->in, line_len + 1);
	f->scanned = 0;
	/* Keep the buffer from creeping: buf moves data only when asked, so compact when drained. */
	if (buf_len(&f->in) == 0) {
		buf_reset(&f->in);
	}
}

static int fail(enum rpc_err e, enum rpc_err *ret_err, char *msg, size_t msg_size, int r, const char *prefix,
		const char *arg)
{
	*ret_err = e;
	snprintf(msg, msg_size, "%s%.64s", prefix, arg);
	return r;
}

int rpc_request_parse(const void *p, size_t n, struct rpc_request *ret, enum rpc_err *ret_err, char *msg,
		      size_t msg_size)
{
	_cleanup_json_ json_t *obj = NULL;
	const char *method, *key, *rid = NULL;
	enum rpc_method m;
	json_t *v;
	int r;

	if (n > RPC_MAX_FRAME) {
		return fail(RPC_ERR_QUOTA_EXCEEDED, ret_err, msg, msg_size, -E2BIG, "frame larger than 1 MiB", "");
	}
	r = json_parse_strict(
		p, n,
		&(struct json_opts){ .max_bytes = RPC_MAX_FRAME, .max_depth = RPC_MAX_DEPTH, .want_top = JSON_OBJECT },
		&obj);
	if (r < 0) {
		return fail(RPC_ERR_INVALID_REQUEST, ret_err, msg, msg_size, -EBADMSG,
			    "frame is not one strict JSON object (duplicate keys, bad UTF-8, big integers and "
			    "non-objects are refused)",
			    "");
	}
	if (json_get_string(obj, "method", &method) < 0) {
		return fail(RPC_ERR_INVALID_REQUEST, ret_err, msg, msg_size, -EBADMSG,
			    "missing or non-string \"method\"", "");
	}
	for (m = 0; m < RPC_METHOD_MAX; m++) {
		if (strcmp(method, method_names[m]) == 0) {
			break;
		}
	}
	if (m == RPC_METHOD_MAX) {
		return fail(RPC_ERR_INVALID_REQUEST, ret_err, msg, msg_size, -EBADMSG, "unknown method ", method);
	}
	json_object_foreach(obj, key, v) {
		bool known = strcmp(key, "method") == 0;
		for (size_t i = 0; !known && i < ARRAY_SIZE(method_fields[m]) && method_fields[m][i]; i++) {
			const char *f = method_fields[m][i];
			known = strcmp(f[0] == '*' ? f + 1 : f, key) == 0;
		}
		if (!known) {
			return fail(RPC_ERR_INVALID_REQUEST, ret_err, msg, msg_size, -EBADMSG, "unknown field ", key);
		}
	}
	for (size_t i = 0; i < ARRAY_SIZE(method_fields[m]) && method_fields[m][i]; i++) {
		const char *f = method_fields[m][i];
		if (f[0] == '*' && !json_object_get(obj, f + 1)) {
			return fail(RPC_ERR_INVALID_REQUEST, ret_err, msg, msg_size, -EBADMSG, "missing field ", f + 1);
		}
	}
	r = json_get_string(obj, "request_id", &rid);
	if (r == -ENOENT) {
		rid = NULL;
	} else if (r < 0 || !rpc_id_ok(rid)) {
		return fail(RPC_ERR_INVALID_REQUEST, ret_err, msg, msg_size, -EBADMSG,
			    "request_id must match [A-Za-z0-9._:-]{1,128}", "");
	}
	ret->method = m;
	ret->request_id = rid;
	ret->obj = steal_ptr(obj);
	return 0;
}

void rpc_request_release(struct rpc_request *r)
{
	if (!r) {
		return;
	}
	if (r->obj) {
		json_decref(r->obj);
	}
	*r = (struct rpc_request){ 0 };
}

json_t *rpc_error_new(enum rpc_err e, const char *message)
{
	return json_pack("{s:{s:s,s:s}}", "error", "code", rpc_err_name(e), "message", message ? message : "");
}
