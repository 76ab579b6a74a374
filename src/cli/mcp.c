/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "cli/mcp.h"
#include "json.h"

const char *const mcp_versions[] = { MCP_PROTOCOL_LATEST, "2025-06-18", "2025-03-26", "2024-11-05", NULL };

_printf_(3, 0) static json_t *vreply_error(const json_t *id, int code, const char *fmt, va_list ap)
{
	char msg[512];

	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	(void)json_utf8_clip(msg);
	return json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", id ? (json_t *)id : json_null(), "error",
			 "code", code, "message", msg);
}

json_t *mcp_error_reply(const json_t *id, int code, const char *fmt, ...)
{
	va_list ap;
	json_t *r;

	va_start(ap, fmt);
	r = vreply_error(id, code, fmt, ap);
	va_end(ap);
	return r;
}

json_t *mcp_oversize_reply(size_t max_message)
{
	return mcp_error_reply(NULL, MCP_INVALID_REQUEST,
			       "message larger than %zu bytes (the limit mcp.max_message_bytes in the server's "
			       "--config raises it)",
			       max_message);
}

static json_t *reply_result(const json_t *id, json_t *result)
{
	return result ? json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", (json_t *)id, "result", result) : NULL;
}

json_t *mcp_tool_result(const char *text, bool is_error, json_t *structured)
{
	json_t *r = json_pack("{s:[{s:s,s:s}],s:b}", "content", "type", "text", "text", text, "isError", is_error);

	if (r && structured && json_object_set_new(r, "structuredContent", structured) < 0) {
		json_decref(r);
		return NULL;
	}
	if (!r) {
		json_decref(structured);
	}
	return r;
}

json_t *mcp_tool_errorf(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	(void)json_utf8_clip(msg);
	return mcp_tool_result(msg, true, NULL);
}

/* ---------------------------------------------------------------- schema subset */

static bool type_is(const char *t, const json_t *v)
{
	if (strcmp(t, "object") == 0) {
		return json_is_object(v);
	}
	if (strcmp(t, "string") == 0) {
		return json_is_string(v);
	}
	if (strcmp(t, "integer") == 0) {
		return json_is_integer(v);
	}
	if (strcmp(t, "boolean") == 0) {
		return json_is_boolean(v);
	}
	if (strcmp(t, "array") == 0) {
		return json_is_array(v);
	}
	return false;
}

static int check_type(const json_t *type, const json_t *v, const char *at, char *err, size_t n)
{
	size_t i;
	json_t *t;

	if (!type) {
		return 0;
	}
	if (json_is_string(type)) {
		if (type_is(json_string_value(type), v)) {
			return 0;
		}
		(void)snprintf(err, n, "%s: must be %s %s", at,
			       strchr("aeiou", json_string_value(type)[0]) ? "an" : "a", json_string_value(type));
		return -EINVAL;
	}
	json_array_foreach(type, i, t) {
		if (json_is_string(t) && type_is(json_string_value(t), v)) {
			return 0;
		}
	}
	(void)snprintf(err, n, "%s: has the wrong type", at);
	return -EINVAL;
}

static int check_at(const json_t *schema, const json_t *v, const char *at, unsigned depth, char *err, size_t n);

static int check_object(const json_t *schema, const json_t *v, const char *at, unsigned depth, char *err, size_t n)
{
	const json_t *props = json_object_get(schema, "properties"),
		     *addl = json_object_get(schema, "additionalProperties");
	const json_t *req = json_object_get(schema, "required"), *rv;
	const char *key;
	json_t *val;
	char sub[256];
	size_t i;
	int r;

	json_array_foreach(req, i, rv) {
		if (json_is_string(rv) && !json_object_get(v, json_string_value(rv))) {
			(void)snprintf(err, n, "%s: %s is required", at, json_string_value(rv));
			return -EINVAL;
		}
	}
	json_object_foreach((json_t *)v, key, val) {
		const json_t *ps = json_object_get(props, key);
		(void)snprintf(sub, sizeof(sub), "%s.%.*s", at, 64, key);
		(void)json_utf8_clip(sub);
		if (!ps && json_is_false(addl)) {
			(void)snprintf(err, n, "%s: unknown member (the tool's inputSchema lists the members)", sub);
			return -EINVAL;
		}
		if (!ps) {
			ps = json_is_object(addl) ? addl : NULL;
		}
		if (ps) {
			r = check_at(ps, val, sub, depth + 1, err, n);
			if (r < 0) {
				return r;
			}
		}
	}
	return 0;
}

static int check_bounds(const json_t *schema, const json_t *v, const char *at, char *err, size_t n)
{
	const json_t *lo = json_object_get(schema, "minimum"), *hi = json_object_get(schema, "maximum");
	const json_t *minl = json_object_get(schema, "minLength"), *maxl = json_object_get(schema, "maxLength");
	const json_t *maxi = json_object_get(schema, "maxItems");

	if (json_is_integer(v) && lo && json_integer_value(v) < json_integer_value(lo)) {
		(void)snprintf(err, n, "%s: below its minimum %lld", at, (long long)json_integer_value(lo));
		return -EINVAL;
	}
	if (json_is_integer(v) && hi && json_integer_value(v) > json_integer_value(hi)) {
		(void)snprintf(err, n, "%s: above its maximum %lld", at, (long long)json_integer_value(hi));
		return -EINVAL;
	}
	if (json_is_string(v) && minl && json_string_length(v) < (size_t)json_integer_value(minl)) {
		(void)snprintf(err, n, "%s: shorter than %lld bytes", at, (long long)json_integer_value(minl));
		return -EINVAL;
	}
	if (json_is_string(v) && maxl && json_string_length(v) > (size_t)json_integer_value(maxl)) {
		(void)snprintf(err, n, "%s: longer than %lld bytes", at, (long long)json_integer_value(maxl));
		return -EINVAL;
	}
	if (json_is_array(v) && maxi && json_array_size(v) > (size_t)json_integer_value(maxi)) {
		(void)snprintf(err, n, "%s: more than %lld items", at, (long long)json_integer_value(maxi));
		return -EINVAL;
	}
	return 0;
}

static int schema_keywords_ok(const json_t *schema)
{
	static const char *const known[] = { "type",	"properties", "required",    "additionalProperties",
					     "items",	"maxItems",   "minLength",   "maxLength",
					     "minimum", "maximum",    "description", "title",
					     "$schema", NULL };
	return json_only_keys(schema, known);
}

static int check_at(const json_t *schema, const json_t *v, const char *at, unsigned depth, char *err, size_t n)
{
	size_t i;
	json_t *item;
	char sub[256];
	int r;

	if (depth > MCP_MAX_DEPTH || !json_is_object(schema) || schema_keywords_ok(schema) < 0) {
		(void)snprintf(err, n, "%s: the schema uses a keyword outside the supported subset", at);
		return -EBADMSG;
	}
	r = check_type(json_object_get(schema, "type"), v, at, err, n);
	if (r >= 0) {
		r = check_bounds(schema, v, at, err, n);
	}
	if (r >= 0 && json_is_object(v)) {
		r = check_object(schema, v, at, depth, err, n);
	}
	if (r >= 0 && json_is_array(v) && json_object_get(schema, "items")) {
		json_array_foreach(v, i, item) {
			(void)snprintf(sub, sizeof(sub), "%s[%zu]", at, i);
			r = check_at(json_object_get(schema, "items"), item, sub, depth + 1, err, n);
			if (r < 0) {
				break;
			}
		}
	}
	return r;
}

int mcp_schema_check(const json_t *schema, const json_t *v, char *err, size_t err_size)
{
	return check_at(schema, v, "arguments", 0, err, err_size);
}

/* ---------------------------------------------------------------- server */

int mcp_server_init(struct mcp_server *s, const struct mcp_tool *tools, size_t n_tools, size_t max_message)
{
	struct json_opts o = { .max_bytes = 64 * 1024, .max_depth = MCP_MAX_DEPTH, .want_top = JSON_OBJECT };

	if (n_tools > MCP_MAX_TOOLS || max_message == 0) {
		return -EINVAL;
	}
	s->schemas = json_array();
	if (!s->schemas) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n_tools; i++) {
		json_t *sc = NULL;
		int r = json_parse_strict(tools[i].input_schema, strlen(tools[i].input_schema), &o, &sc);
		if (r < 0 || json_array_append_new(s->schemas, sc) < 0) {
			mcp_server_release(s);
			return r < 0 ? -EINVAL : -ENOMEM;
		}
	}
	s->state = MCP_STATE_NEW;
	s->version[0] = '\0';
	s->tools = tools;
	s->n_tools = n_tools;
	s->max_message = max_message;
	return 0;
}

void mcp_server_release(struct mcp_server *s)
{
	json_decref(s->schemas);
	s->schemas = NULL;
}

static const char *pick_version(const char *asked)
{
	for (size_t i = 0; mcp_versions[i]; i++) {
		if (strcmp(asked, mcp_versions[i]) == 0) {
			return mcp_versions[i];
		}
	}
	/* Not one we speak: we answer with ours, and the client decides whether to go on (the spec's rule). */
	return MCP_PROTOCOL_LATEST;
}

static json_t *on_initialize(struct mcp_server *s, const json_t *id, const json_t *params)
{
	const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
	const json_t *caps = json_object_get(params, "capabilities"), *info = json_object_get(params, "clientInfo");
	const char *v;
	json_t *result;

	if (s->state != MCP_STATE_NEW) {
		return mcp_error_reply(id, MCP_INVALID_REQUEST, "initialize was already answered in this session");
	}
	if (!asked || !json_is_object(caps) || !json_is_object(info) ||
	    !json_is_string(json_object_get(info, "name"))) {
		return mcp_error_reply(id, MCP_INVALID_PARAMS,
				       "initialize takes protocolVersion (a string), capabilities (an object) and "
				       "clientInfo (an object with a name)");
	}
	v = pick_version(asked);
	result = json_pack("{s:s,s:{s:{s:b}},s:{s:s,s:s}}", "protocolVersion", v, "capabilities", "tools",
			   "listChanged", false, "serverInfo", "name", s->server_name ? s->server_name : "tkbox",
			   "version", s->server_version ? s->server_version : "0");
	if (result && s->instructions) {
		(void)json_object_set_new(result, "instructions", json_string(s->instructions));
	}
	if (!result) {
		return NULL;
	}
	(void)snprintf(s->version, sizeof(s->version), "%s", v);
	s->state = MCP_STATE_INITIALIZED;
	return reply_result(id, result);
}

static json_t *on_tools_list(struct mcp_server *s, const json_t *id, const json_t *params)
{
	json_t *list = json_array();

	/* One page holds every tool: a cursor is not ours, so it is invalid. */
	if (json_object_get(params, "cursor")) {
		json_decref(list);
		return mcp_error_reply(id, MCP_INVALID_PARAMS, "no such cursor: tools/list has one page");
	}
	for (size_t i = 0; list && i < s->n_tools; i++) {
		json_t *t =
			json_pack("{s:s,s:s,s:s,s:O}", "name", s->tools[i].name, "title", s->tools[i].title,
				  "description", s->tools[i].description, "inputSchema", json_array_get(s->schemas, i));
		if (!t || json_array_append_new(list, t) < 0) {
			json_decref(list);
			return NULL;
		}
	}
	return list ? reply_result(id, json_pack("{s:o}", "tools", list)) : NULL;
}

static json_t *on_tools_call(struct mcp_server *s, const json_t *id, const json_t *params)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	json_t *args = json_object_get(params, "arguments"), *result = NULL;
	_cleanup_json_ json_t *empty = NULL;
	char why[512];

	if (!name) {
		return mcp_error_reply(id, MCP_INVALID_PARAMS, "tools/call takes name (a string) and arguments");
	}
	for (size_t i = 0; i < s->n_tools; i++) {
		if (strcmp(name, s->tools[i].name) != 0) {
			continue;
		}
		if (!args) {
			args = empty = json_object();
		}
		if (!args) {
			return NULL;
		}
		/* Invalid arguments are a tool error the model can read and correct (revision 2025-11-25). */
		if (mcp_schema_check(json_array_get(s->schemas, i), args, why, sizeof(why)) < 0) {
			(void)json_utf8_clip(why);
			return reply_result(id, mcp_tool_errorf("%s: invalid arguments: %s", s->tools[i].name, why));
		}
		if (s->call(s->ctx, &s->tools[i], args, &result) < 0 || !result) {
			return mcp_error_reply(id, MCP_INTERNAL_ERROR, "%s failed inside the server", s->tools[i].name);
		}
		return reply_result(id, result);
	}
	return mcp_error_reply(id, MCP_INVALID_PARAMS, "unknown tool (tools/list names them)");
}

static json_t *on_request(struct mcp_server *s, const json_t *id, const char *method, const json_t *params)
{
	if (strcmp(method, "ping") == 0) {
		return reply_result(id, json_object());
	}
	if (strcmp(method, "initialize") == 0) {
		return on_initialize(s, id, params);
	}
	if (s->state == MCP_STATE_NEW) {
		return mcp_error_reply(id, MCP_INVALID_REQUEST,
				       "the session is not initialized: send initialize first");
	}
	if (strcmp(method, "tools/list") == 0) {
		return on_tools_list(s, id, params);
	}
	if (strcmp(method, "tools/call") == 0) {
		return on_tools_call(s, id, params);
	}
	return mcp_error_reply(id, MCP_METHOD_NOT_FOUND, "method not found (this server has tools only)");
}

static void on_notification(struct mcp_server *s, const char *method)
{
	if (strcmp(method, "notifications/initialized") == 0 && s->state == MCP_STATE_INITIALIZED) {
		s->state = MCP_STATE_READY;
	}
	/* notifications/cancelled and the rest: nothing to do (calls are answered in order, one at a time). */
}

static bool id_ok(const json_t *id)
{
	if (json_is_string(id)) {
		return json_string_length(id) <= MCP_MAX_ID_STRING;
	}
	/* MCP: a string or an integer, never null */
	return json_is_integer(id);
}

/* A message from the client that is a response (it has result or error, no method): we never asked. */
static bool is_response(const json_t *m)
{
	return !json_object_get(m, "method") && (json_object_get(m, "result") || json_object_get(m, "error"));
}

static json_t *on_message(struct mcp_server *s, const json_t *m)
{
	static const char *const request_keys[] = { "jsonrpc", "id", "method", "params", NULL };
	const json_t *id = json_object_get(m, "id"), *params = json_object_get(m, "params");
	const char *method = json_string_value(json_object_get(m, "method"));
	const json_t *idv = id_ok(id) ? id : NULL;

	if (!json_is_string(json_object_get(m, "jsonrpc")) ||
	    strcmp(json_string_value(json_object_get(m, "jsonrpc")), "2.0") != 0) {
		return mcp_error_reply(idv, MCP_INVALID_REQUEST, "not JSON-RPC 2.0 (\"jsonrpc\": \"2.0\")");
	}
	if (is_response(m)) {
		return NULL;
	}
	if ((id && !idv) || !method || json_string_length(json_object_get(m, "method")) > MCP_MAX_METHOD ||
	    json_only_keys(m, request_keys) < 0) {
		return mcp_error_reply(idv, MCP_INVALID_REQUEST,
				       "a request is {jsonrpc, id (a string or an integer), method, params?}");
	}
	if (params && !json_is_object(params)) {
		return id ? mcp_error_reply(idv, MCP_INVALID_PARAMS, "params must be an object") : NULL;
	}
	if (!id) {
		on_notification(s, method);
		return NULL;
	}
	return on_request(s, id, method, params);
}

int mcp_handle(struct mcp_server *s, const void *line, size_t n, json_t **ret_reply)
{
	struct json_opts o = { .max_bytes = s->max_message, .max_depth = MCP_MAX_DEPTH, .want_top = (json_type)-1 };
	_cleanup_json_ json_t *m = NULL;
	json_t *reply;
	int r;

	if (n > s->max_message) {
		reply = mcp_oversize_reply(s->max_message);
	} else {
		r = json_parse_strict(line, n, &o, &m);
		if (r == -ENOMEM) {
			return r;
		}
		if (r < 0) {
			reply = r == -E2BIG ? mcp_error_reply(NULL, MCP_PARSE_ERROR,
							      "parse error: nested deeper than %d", MCP_MAX_DEPTH)
					    : mcp_error_reply(NULL, MCP_PARSE_ERROR,
							      "parse error: not one strict JSON value (UTF-8, no "
							      "duplicate keys, integers within 2^53)");
		} else if (json_is_array(m)) {
			reply = mcp_error_reply(NULL, MCP_INVALID_REQUEST,
						"batches are not supported (MCP removed them in 2025-06-18)");
		} else if (!json_is_object(m)) {
			reply = mcp_error_reply(NULL, MCP_INVALID_REQUEST, "a message is a JSON object");
		} else {
			reply = on_message(s, m);
			if (!reply && !is_response(m) && json_object_get(m, "id") && id_ok(json_object_get(m, "id"))) {
				return -ENOMEM; /* a request always gets an answer */
			}
		}
	}
	*ret_reply = reply;
	return 0;
}
