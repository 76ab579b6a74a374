/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_CLI_MCP_H
#define TKBOX_CLI_MCP_H

#include <jansson.h>

#include "macro.h"

/*
 * The Model Context Protocol's message layer for tkbox mcp (cmd-mcp.c does
 * the I/O and the tools): JSON-RPC 2.0 messages, one per line over stdio
 * (MCP's stdio transport: UTF-8, newline-delimited, no embedded newline).
 * It is pure: no I/O, no logging, no globals. Every line comes from the MCP
 * client and is hostile until mcp_handle accepted it.
 *
 * Target revision MCP_PROTOCOL_LATEST; older revisions the official SDK
 * still speaks are accepted when the client asks for them (mcp_versions[]).
 * Batches (a JSON array at the top) were removed in 2025-06-18 and are
 * refused with -32600 whatever the revision.
 *
 * Lifecycle: before `initialize` only `initialize` and `ping` are answered
 * (anything else: -32600 "not initialized"); `initialize` once (a second:
 * -32600); `notifications/initialized` marks the session ready; `tools/list`
 * and `tools/call` once initialize was answered. Requests: `ping`,
 * `initialize`, `tools/list`, `tools/call`; others -32601. Notifications
 * are never answered; responses from the client (we send no requests) are
 * ignored.
 */

#define MCP_PROTOCOL_LATEST "2025-11-25"
/* The default and the bounds of one message (a line, its newline excluded); mcp.max_message_bytes sets it. */
#define MCP_DEFAULT_MAX_MESSAGE ((size_t)4 << 20)
#define MCP_MAX_DEPTH 32 /* JSON nesting of one message */
#define MCP_MAX_METHOD 128 /* bytes of a method name */
#define MCP_MAX_ID_STRING 256 /* bytes of a string id */
#define MCP_MAX_TOOLS 32

/* JSON-RPC error codes. */
#define MCP_PARSE_ERROR (-32700)
#define MCP_INVALID_REQUEST (-32600)
#define MCP_METHOD_NOT_FOUND (-32601)
#define MCP_INVALID_PARAMS (-32602)
#define MCP_INTERNAL_ERROR (-32603)

extern const char *const mcp_versions[]; /* NULL-terminated, newest first */

struct mcp_tool {
	const char *name;
	const char *title;
	const char *description;
	const char *input_schema; /* JSON text of the tool's inputSchema (parsed by mcp_server_init) */
};

enum mcp_state {
	MCP_STATE_NEW, /* nothing but initialize and ping */
	MCP_STATE_INITIALIZED, /* initialize answered */
	MCP_STATE_READY, /* notifications/initialized received */
};

struct mcp_server;

/*
 * A tools/call for a tool of the table whose arguments passed its
 * inputSchema (mcp_schema_check): put the CallToolResult in *ret (new
 * reference; mcp_tool_result builds one). A tool failure is a result with
 * isError (the model sees it); return < 0 only for an internal error
 * (answered -32603).
 */
typedef int (*mcp_call_fn)(void *ctx, const struct mcp_tool *tool, json_t *arguments, json_t **ret);

struct mcp_server {
	enum mcp_state state;
	char version[16]; /* the negotiated revision */
	size_t max_message; /* bytes of one line */
	const struct mcp_tool *tools;
	size_t n_tools;
	json_t *schemas; /* the tools' parsed inputSchemas, an array */
	mcp_call_fn call;
	void *ctx;
	const char *server_name;
	const char *server_version;
	const char *instructions; /* may be NULL */
};

/* Parse the tools' schemas (a malformed one is a programmer error: -EINVAL). */
_wur_ int mcp_server_init(struct mcp_server *s, const struct mcp_tool *tools, size_t n_tools, size_t max_message);
void mcp_server_release(struct mcp_server *s);

/*
 * Handle one message: line[0..n) without its newline. *ret_reply gets the
 * message to send back (new reference: a response or an error response), or
 * NULL when nothing is to be sent (a notification, a client's response).
 * Returns 0, or -ENOMEM.
 */
_wur_ int mcp_handle(struct mcp_server *s, const void *line, size_t n, json_t **ret_reply);

/* The error response for a line longer than max_message (its id is unknown: null). */
json_t *mcp_oversize_reply(size_t max_message);

/* {"jsonrpc":"2.0","id":id,"error":{"code","message"}}; id NULL means null. */
json_t *mcp_error_reply(const json_t *id, int code, const char *fmt, ...) _printf_(3, 4);

/*
 * A CallToolResult: content [{type: text, text}] and isError; structured
 * (stolen, may be NULL) becomes structuredContent.
 */
json_t *mcp_tool_result(const char *text, bool is_error, json_t *structured);
json_t *mcp_tool_errorf(const char *fmt, ...) _printf_(1, 2);

/*
 * Check v against the subset of JSON Schema the tools use: type (object,
 * string, integer, boolean, array; or an array of these), properties,
 * required, additionalProperties false (or a schema for the values),
 * items, maxItems, minLength, maxLength (UTF-8 bytes), minimum, maximum,
 * oneOf of required-lists is not supported. -EINVAL with why (which member,
 * which rule) in err when v does not match; -EBADMSG for a schema keyword
 * outside the subset.
 */
_wur_ int mcp_schema_check(const json_t *schema, const json_t *v, char *err, size_t err_size);

#endif
