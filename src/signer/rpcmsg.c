/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "crypto.h"
#include "rpcmsg.h"

#include "banned.h"

const char *const rpc_observe_kinds[] = { "tkbox.box",	      "tkbox.egress",	   "tkbox.approval",
					  "tkbox.secret.use", "tkbox.secret.leak", "tkbox.model.call",
					  "tkbox.gap",	      "tkbox.patch",	   NULL };

/* Each message's closed key set ("method" included). */
static const char *const decide_keys[] = { "method", "request_id", "run_id",	  "run_token", "tool_call_id",
					   "tool",   "args",	   "args_source", "attempt",   NULL };
static const char *const complete_keys[] = { "method",	    "request_id",    "run_id",	    "run_token", "tool_call_id",
					     "decision_id", "args_digest",   "status",	    "exit_code", "signal",
					     "error",	    "stdin_sha256",  "stdin_bytes", "bytes_up",	 "bytes_down",
					     "duration_ms", "written_paths", NULL };
static const char *const observe_keys[] = { "method", "request_id", "run_id", "run_token", "kind", "data", NULL };

bool rpc_id_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > RPC_MAX_ID_LEN) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == ':' || c == '-')) {
			return false;
		}
	}
	return true;
}

/* Arguments of up to 1 MiB (a request line) take at most twice that in JCS (escapes). */
#define ARGS_DIGEST_MAX_JCS ((size_t)2 << 20)

int rpc_args_digest(const char *tool, const json_t *args, char ret[RPC_DIGEST_STRLEN + 1])
{
	_cleanup_json_ json_t *o = json_pack("{s:s,s:O}", "tool", tool, "args", (json_t *)args);
	_cleanup_free_ char *s = NULL;
	int r;

	if (!o) {
		return -ENOMEM;
	}
	r = json_jcs_string(o, ARGS_DIGEST_MAX_JCS, &s);
	if (r < 0) {
		return r;
	}
	memcpy(ret, "sha256:", 7);
	return sha256_hex(s, strlen(s), ret + 7);
}

static int bad(char *msg, size_t msg_size, const char *text)
{
	(void)snprintf(msg, msg_size, "%s", text);
	return -EBADMSG;
}

/* The fields every per-run message has: request_id (an id), run_id, run_token. */
static int run_fields(const json_t *obj, const char **rid, const char **run_id, const char **token, char *msg,
		      size_t msg_size)
{
	if (json_get_string(obj, "request_id", rid) < 0 || !rpc_id_ok(*rid)) {
		return bad(msg, msg_size, "request_id must match [A-Za-z0-9._:-]{1,128}");
	}
	if (json_get_string(obj, "run_id", run_id) < 0 || json_get_string(obj, "run_token", token) < 0) {
		return bad(msg, msg_size, "run_id and run_token must be strings");
	}
	return 0;
}

static int closed(const json_t *obj, const char *const *keys, const char *method, char *msg, size_t msg_size)
{
	const char *m;

	if (json_only_keys(obj, keys) < 0) {
		return bad(msg, msg_size, "unknown field in the request");
	}
	if (json_get_string(obj, "method", &m) < 0 || strcmp(m, method) != 0) {
		return bad(msg, msg_size, "not this method's request");
	}
	return 0;
}

int rpc_decide_decode(const json_t *obj, struct rpc_decide *ret, char *msg, size_t msg_size)
{
	struct rpc_decide m = { .attempt = -1 };
	int r;

	if ((r = closed(obj, decide_keys, "decide", msg, msg_size)) < 0 ||
	    (r = run_fields(obj, &m.request_id, &m.run_id, &m.run_token, msg, msg_size)) < 0) {
		return r;
	}
	if (json_get_string(obj, "tool", &m.tool) < 0 || m.tool[0] == '\0' || strlen(m.tool) > RPC_MAX_TOOL_LEN ||
	    json_get_string(obj, "tool_call_id", &m.tool_call_id) < 0 || !rpc_id_ok(m.tool_call_id)) {
		return bad(msg, msg_size, "tool (1..256 chars) and tool_call_id (an id) are required");
	}
	r = json_get_string(obj, "args_source", &m.args_source);
	if (r == -ENOENT) {
		m.args_source = NULL;
	} else if (r < 0 || (strcmp(m.args_source, "raw") != 0 && strcmp(m.args_source, "parsed") != 0 &&
			     strcmp(m.args_source, "coerced") != 0)) {
		return bad(msg, msg_size, "args_source must be raw, parsed or coerced");
	}
	r = json_get_int(obj, "attempt", &m.attempt);
	if (r == -ENOENT) {
		m.attempt = -1;
	} else if (r < 0 || m.attempt < 0) {
		return bad(msg, msg_size, "attempt must be a non-negative integer");
	}
	/* Any JSON value: what is not an object is the policy's to refuse (TK-ARGS-INVALID), and recorded. */
	m.args = json_object_get(obj, "args");
	if (!m.args) {
		return bad(msg, msg_size, "missing field args");
	}
	*ret = m;
	return 0;
}

/* exit_code or signal (never both), or neither (not known). */
static int complete_end(const json_t *obj, struct rpc_complete *m, char *msg, size_t msg_size)
{
	int64_t code = -1, sig = -1;
	int r = json_get_int(obj, "exit_code", &code), r2 = json_get_int(obj, "signal", &sig);

	if ((r < 0 && r != -ENOENT) || (r == 0 && (code < 0 || code > 255))) {
		return bad(msg, msg_size, "exit_code must be an integer 0..255");
	}
	if ((r2 < 0 && r2 != -ENOENT) || (r2 == 0 && (sig < 1 || sig > COMPLETE_MAX_SIGNAL))) {
		(void)snprintf(msg, msg_size, "signal must be an integer 1..%d", COMPLETE_MAX_SIGNAL);
		return -EBADMSG;
	}
	if (r == 0 && r2 == 0) {
		return bad(msg, msg_size,
			   "exit_code and signal exclude each other: a command either exited or was killed");
	}
	m->exit_code = r == 0 ? (int)code : -1;
	m->signal = r2 == 0 ? (int)sig : 0;
	return 0;
}

/* One optional count of a connection's completion: 0 given, -ENOENT absent, -EBADMSG malformed or out of range. */
static int complete_count(const json_t *obj, const char *key, int64_t *v)
{
	int r = json_get_int(obj, key, v);

	if (r == -ENOENT) {
		*v = 0;
		return r;
	}
	return r < 0 || *v < 0 || *v > COMPLETE_MAX_COUNT ? -EBADMSG : 0;
}

/* A connection's transfer: bytes_up and bytes_down (both or neither) and duration_ms, each 0..2^53. */
static int complete_transfer(const json_t *obj, struct rpc_complete *m, char *msg, size_t msg_size)
{
	int up = complete_count(obj, "bytes_up", &m->bytes_up),
	    down = complete_count(obj, "bytes_down", &m->bytes_down);
	int dur = complete_count(obj, "duration_ms", &m->duration_ms);

	if (up == -EBADMSG || down == -EBADMSG || up != down) {
		return bad(msg, msg_size, "bytes_up and bytes_down (integers 0..2^53) go together");
	}
	if (dur == -EBADMSG) {
		return bad(msg, msg_size, "duration_ms must be an integer 0..2^53");
	}
	m->has_bytes = up == 0;
	m->has_duration = dur == 0;
	return 0;
}

/* written_paths: absent, or 0..COMPLETE_MAX_WRITTEN strings of 1..COMPLETE_MAX_WRITTEN_PATH bytes without NUL. */
static int complete_written(const json_t *obj, struct rpc_complete *m, char *msg, size_t msg_size)
{
	const json_t *a = json_object_get(obj, "written_paths"), *v;
	size_t i;

	m->written_paths = NULL;
	if (!a) {
		return 0;
	}
	if (!json_is_array(a) || json_array_size(a) > COMPLETE_MAX_WRITTEN) {
		return bad(msg, msg_size, "written_paths must be an array of at most 4096 paths");
	}
	json_array_foreach(a, i, v) {
		size_t n = json_is_string(v) ? json_string_length(v) : 0;
		if (n == 0 || n > COMPLETE_MAX_WRITTEN_PATH || strlen(json_string_value(v)) != n) {
			return bad(msg, msg_size, "each of written_paths must be a path of 1..4096 bytes without NUL");
		}
	}
	m->written_paths = a;
	return 0;
}

int rpc_complete_decode(const json_t *obj, struct rpc_complete *ret, char *msg, size_t msg_size)
{
	struct rpc_complete m = { .exit_code = -1 };
	const char *status;
	int r, r2;

	if ((r = closed(obj, complete_keys, "complete", msg, msg_size)) < 0 ||
	    (r = run_fields(obj, &m.request_id, &m.run_id, &m.run_token, msg, msg_size)) < 0) {
		return r;
	}
	if (json_get_string(obj, "decision_id", &m.decision_id) < 0 ||
	    json_get_string(obj, "args_digest", &m.args_digest) < 0 || json_get_string(obj, "status", &status) < 0 ||
	    (strcmp(status, "ok") != 0 && strcmp(status, "error") != 0)) {
		return bad(msg, msg_size, "decision_id, args_digest and status (ok|error) are required");
	}
	m.status = strcmp(status, "ok") == 0 ? RPC_STATUS_OK : RPC_STATUS_ERROR;
	r = json_get_string(obj, "tool_call_id", &m.tool_call_id);
	if (r == -ENOENT) {
		m.tool_call_id = NULL;
	} else if (r < 0) {
		return bad(msg, msg_size, "tool_call_id must be a string");
	}
	if ((r = complete_end(obj, &m, msg, msg_size)) < 0) {
		return r;
	}
	r = json_get_string(obj, "error", &m.error);
	if (r == -ENOENT) {
		m.error = NULL;
	} else if (r < 0 || strlen(m.error) > RPC_MAX_ERROR_LEN) {
		return bad(msg, msg_size, "error must be a string of at most 4096 bytes");
	}
	/* A stdin streamed to the command: same form as the door's decided stdin_sha256; both or neither. */
	r = json_get_string(obj, "stdin_sha256", &m.stdin_sha256);
	r2 = json_get_int(obj, "stdin_bytes", &m.stdin_bytes);
	if ((r < 0 && r != -ENOENT) || (r2 < 0 && r2 != -ENOENT) || (r == 0) != (r2 == 0) ||
	    (r == 0 && (strlen(m.stdin_sha256) != 64 || strspn(m.stdin_sha256, "0123456789abcdef") != 64)) ||
	    (r2 == 0 && (m.stdin_bytes < 0 || m.stdin_bytes > COMPLETE_MAX_STDIN_BYTES))) {
		return bad(msg, msg_size,
			   "stdin_sha256 (64 lowercase hex) and stdin_bytes (integer 0..2^53) go together");
	}
	if (r != 0) {
		m.stdin_sha256 = NULL;
		m.stdin_bytes = 0;
	}
	if ((r = complete_transfer(obj, &m, msg, msg_size)) < 0 || (r = complete_written(obj, &m, msg, msg_size)) < 0) {
		return r;
	}
	*ret = m;
	return 0;
}

int rpc_observe_decode(const json_t *obj, struct rpc_observe *ret, char *msg, size_t msg_size)
{
	struct rpc_observe m = { 0 };
	json_t *data;
	bool known = false;
	int r;

	if ((r = closed(obj, observe_keys, "observe", msg, msg_size)) < 0 ||
	    (r = run_fields(obj, &m.request_id, &m.run_id, &m.run_token, msg, msg_size)) < 0) {
		return r;
	}
	if (json_get_string(obj, "kind", &m.kind) < 0 || json_get_object(obj, "data", &data) < 0) {
		return bad(msg, msg_size, "kind (string) and data (object) are required");
	}
	for (size_t i = 0; rpc_observe_kinds[i]; i++) {
		known = known || strcmp(m.kind, rpc_observe_kinds[i]) == 0;
	}
	if (!known) {
		(void)snprintf(msg, msg_size, "unknown observation kind %.64s", m.kind);
		return -EBADMSG;
	}
	m.data = data;
	*ret = m;
	return 0;
}

static int set_str(json_t *o, const char *key, const char *v)
{
	return v ? json_object_set_new(o, key, json_string(v)) : 0;
}

/* The per-run fields of a new request object. */
static json_t *run_request(const char *method, const char *rid, const char *run_id, const char *token)
{
	/* No request_id yet: the caller adds one (signer_link_request_id). */
	json_t *o = json_pack("{s:s,s:s,s:s}", "method", method, "run_id", run_id, "run_token", token);

	if (o && set_str(o, "request_id", rid) < 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

json_t *rpc_decide_encode(const struct rpc_decide *m)
{
	json_t *o = run_request("decide", m->request_id, m->run_id, m->run_token);

	if (!o || set_str(o, "tool_call_id", m->tool_call_id) < 0 || set_str(o, "tool", m->tool) < 0 ||
	    json_object_set(o, "args", (json_t *)m->args) < 0 || set_str(o, "args_source", m->args_source) < 0 ||
	    (m->attempt >= 0 && json_object_set_new(o, "attempt", json_integer(m->attempt)) < 0)) {
		json_decref(o);
		return NULL;
	}
	return o;
}

json_t *rpc_complete_encode(const struct rpc_complete *m)
{
	json_t *o = run_request("complete", m->request_id, m->run_id, m->run_token);

	if (!o || set_str(o, "tool_call_id", m->tool_call_id) < 0 || set_str(o, "decision_id", m->decision_id) < 0 ||
	    set_str(o, "args_digest", m->args_digest) < 0 ||
	    set_str(o, "status", m->status == RPC_STATUS_OK ? "ok" : "error") < 0 ||
	    (m->exit_code >= 0 && json_object_set_new(o, "exit_code", json_integer(m->exit_code)) < 0) ||
	    (m->signal > 0 && json_object_set_new(o, "signal", json_integer(m->signal)) < 0) ||
	    set_str(o, "error", m->error) < 0 ||
	    (m->stdin_sha256 && (set_str(o, "stdin_sha256", m->stdin_sha256) < 0 ||
				 json_object_set_new(o, "stdin_bytes", json_integer(m->stdin_bytes)) < 0)) ||
	    (m->has_bytes && (json_object_set_new(o, "bytes_up", json_integer(m->bytes_up)) < 0 ||
			      json_object_set_new(o, "bytes_down", json_integer(m->bytes_down)) < 0)) ||
	    (m->has_duration && json_object_set_new(o, "duration_ms", json_integer(m->duration_ms)) < 0) ||
	    (m->written_paths && json_object_set(o, "written_paths", (json_t *)m->written_paths) < 0)) {
		json_decref(o);
		return NULL;
	}
	return o;
}

json_t *rpc_observe_encode(const struct rpc_observe *m)
{
	json_t *o = run_request("observe", m->request_id, m->run_id, m->run_token);

	if (!o || set_str(o, "kind", m->kind) < 0 || json_object_set(o, "data", (json_t *)m->data) < 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}
