/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for src/cli/mcp.c: each input is a session, lines split at '\n', handled in turn by one
 * server (so the lifecycle's states are reached). Properties: no crash or leak; every reply is a JSON-RPC 2.0
 * object with a result or an error, which serializes to one line without a newline inside.
 */
#include <string.h>

#include "cli/mcp.h"
#include "json.h"

static const struct mcp_tool tools[] = {
	{ "t", "T", "a tool",
	  "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{\"s\":{\"type\":\"string\","
	  "\"maxLength\":16},\"i\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},\"a\":{\"type\":\"array\","
	  "\"maxItems\":3,\"items\":{\"type\":\"string\"}},\"o\":{\"type\":\"object\",\"additionalProperties\":{"
	  "\"type\":\"string\"}}}}" },
};

static int call(void *ctx, const struct mcp_tool *tool, json_t *args, json_t **ret)
{
	(void)ctx;
	(void)tool;
	(void)args;
	*ret = mcp_tool_result("ok", false, json_object());
	return *ret ? 0 : -ENOMEM;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mcp_server s = { .call = call };
	size_t off = 0;

	if (mcp_server_init(&s, tools, 1, 4096) < 0) {
		__builtin_trap();
	}
	while (off < size) {
		const uint8_t *nl = memchr(data + off, '\n', size - off);
		size_t n = nl ? (size_t)(nl - (data + off)) : size - off;
		json_t *reply = NULL;
		if (mcp_handle(&s, data + off, n, &reply) < 0) {
			break;
		}
		if (reply) {
			char *line = json_dumps(reply, JSON_COMPACT);
			if (!json_is_object(reply) ||
			    strcmp(json_string_value(json_object_get(reply, "jsonrpc")) ?: "", "2.0") != 0 ||
			    (!json_object_get(reply, "result") == !json_object_get(reply, "error")) || !line ||
			    strchr(line, '\n')) {
				__builtin_trap();
			}
			free(line);
			json_decref(reply);
		}
		off += n + 1;
	}
	mcp_server_release(&s);
	return 0;
}
