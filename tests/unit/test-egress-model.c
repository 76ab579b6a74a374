/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "egress/model.h"

/* Model names and token counts from provider responses (src/egress/model.c). */

static struct egress_model_info parse(const char *ct, const char *body)
{
	struct egress_model_info i;

	memset(&i, 0x55, sizeof(i));
	egress_model_parse(ct, (const uint8_t *)body, body ? strlen(body) : 0, &i);
	return i;
}

static void test_anthropic_json(void **state)
{
	struct egress_model_info i;
	(void)state;

	i = parse("application/json",
		  "{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5-"
		  "20250929\","
		  "\"content\":[{\"type\":\"text\",\"text\":\"Hi\"}],\"stop_reason\":\"end_turn\",\"usage\":{"
		  "\"input_tokens\":2095,\"cache_read_input_tokens\":0,\"output_tokens\":503}}");
	assert_string_equal(i.model, "claude-sonnet-4-5-20250929");
	assert_int_equal(i.input_tokens, 2095);
	assert_int_equal(i.output_tokens, 503);
}

static void test_anthropic_sse(void **state)
{
	struct egress_model_info i;
	(void)state;

	i = parse("text/event-stream",
		  "event: message_start\r\n"
		  "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude-opus-4-1\","
		  "\"usage\":{\"input_tokens\":472,\"output_tokens\":2}}}\r\n\r\n"
		  "event: ping\r\ndata: {\"type\": \"ping\"}\r\n\r\n"
		  "event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
		  "\"delta\":{\"type\":\"text_delta\",\"text\":\"model output_tokens 99\"}}\r\n\r\n"
		  "event: message_delta\r\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},"
		  "\"usage\":{\"output_tokens\":15}}\r\n\r\n"
		  "event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n");
	assert_string_equal(i.model, "claude-opus-4-1");
	assert_int_equal(i.input_tokens, 472);
	assert_int_equal(i.output_tokens, 15);
	/* Sniffed without a Content-Type. */
	i = parse(NULL, "data: {\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":1}}}\n\n");
	assert_string_equal(i.model, "m");
	assert_int_equal(i.input_tokens, 1);
	assert_int_equal(i.output_tokens, -1);
}

static void test_openai(void **state)
{
	struct egress_model_info i;
	(void)state;

	i = parse(
		"application/json; charset=utf-8",
		"{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"model\":\"gpt-4o-2024-08-06\",\"choices\":[],"
		"\"usage\":{\"prompt_tokens\":19,\"completion_tokens\":10,\"total_tokens\":29}}");
	assert_string_equal(i.model, "gpt-4o-2024-08-06");
	assert_int_equal(i.input_tokens, 19);
	assert_int_equal(i.output_tokens, 10);
	i = parse("text/event-stream",
		  "data: {\"id\":\"c\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"delta\":{\"content\":\"a\"}}],"
		  "\"usage\":null}\n\n"
		  "data: {\"id\":\"c\",\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":8,"
		  "\"completion_tokens\":3}}\n\n"
		  "data: [DONE]\n\n");
	assert_string_equal(i.model, "gpt-4o-mini");
	assert_int_equal(i.input_tokens, 8);
	assert_int_equal(i.output_tokens, 3);
}

/* Anything it cannot read leaves the fields unknown. */
static void test_unknown(void **state)
{
	struct egress_model_info i;
	char big[200];
	(void)state;

	i = parse("application/json", "{\"model\":\"x\",\"usage\":{\"input_tokens\":");
	assert_string_equal(i.model, "");
	assert_int_equal(i.input_tokens, -1);
	assert_int_equal(i.output_tokens, -1);
	i = parse("application/json", NULL);
	assert_string_equal(i.model, "");
	i = parse("application/json",
		  "{\"model\":\"bad\\u0001name\",\"usage\":{\"input_tokens\":-4,\"output_tokens\":1.5}}");
	assert_string_equal(i.model, "");
	assert_int_equal(i.input_tokens, -1);
	assert_int_equal(i.output_tokens, -1);
	i = parse("application/json", "{\"model\":7,\"usage\":[1]}");
	assert_string_equal(i.model, "");
	/* One past the name cap. */
	memset(big, 'a', sizeof(big));
	(void)snprintf(big, sizeof(big), "{\"model\":\"%0*d\"}", EGRESS_MODEL_NAME_MAX + 1, 0);
	i = parse("application/json", big);
	assert_string_equal(i.model, "");
	(void)snprintf(big, sizeof(big), "{\"model\":\"%0*d\"}", EGRESS_MODEL_NAME_MAX, 0);
	i = parse("application/json", big);
	assert_int_equal(strlen(i.model), EGRESS_MODEL_NAME_MAX);
	/* A stream cut in the middle of a line keeps what came before. */
	i = parse("text/event-stream", "data: {\"model\":\"a\"}\ndata: {\"model\":\"b\",\"usa");
	assert_string_equal(i.model, "a");
}

/* Only the first EGRESS_MODEL_BODY_MAX bytes are read. */
static void test_body_max(void **state)
{
	size_t n = EGRESS_MODEL_BODY_MAX + 64;
	char *b = malloc(n);
	struct egress_model_info i;
	static const char tail[] = "data: {\"model\":\"late\"}\n";
	static const char head[] = "data: {\"model\":\"early\"}\n";
	(void)state;

	assert_non_null(b);
	memset(b, '\n', n);
	memcpy(b, head, strlen(head));
	memcpy(b + n - strlen(tail), tail, strlen(tail));
	egress_model_parse("text/event-stream", (const uint8_t *)b, n, &i);
	assert_string_equal(i.model, "early");
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_anthropic_json), cmocka_unit_test(test_anthropic_sse),
		cmocka_unit_test(test_openai),	       cmocka_unit_test(test_unknown),
		cmocka_unit_test(test_body_max),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
