/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>
#include <strings.h>

#include "banned.h"
#include "egress/model.h"
#include "json.h"

/* A model name is kept only when it is printable ASCII that fits. */
static void take_model(const json_t *obj, struct egress_model_info *ret)
{
	const char *s;
	size_t n;

	if (json_get_string(obj, "model", &s) < 0) {
		return;
	}
	n = strlen(s);
	if (n == 0 || n > EGRESS_MODEL_NAME_MAX) {
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] < 0x20 || s[i] > 0x7e) {
			return;
		}
	}
	memcpy(ret->model, s, n + 1);
}

static void take_count(const json_t *usage, const char *key, int64_t *ret)
{
	int64_t v;

	if (json_get_int(usage, key, &v) == 0 && v >= 0) {
		*ret = v;
	}
}

/*
 * One JSON object: Anthropic's message (or message_start's "message"), a
 * message_delta, an OpenAI completion or chunk. Counts found later win, so a
 * stream's last message_delta gives the output count.
 */
static void take_object(const json_t *obj, struct egress_model_info *ret)
{
	json_t *msg = NULL, *usage = NULL;

	if (json_get_object(obj, "message", &msg) == 0) {
		take_object(msg, ret);
	}
	take_model(obj, ret);
	if (json_get_object(obj, "usage", &usage) < 0) {
		return;
	}
	take_count(usage, "input_tokens", &ret->input_tokens);
	take_count(usage, "output_tokens", &ret->output_tokens);
	take_count(usage, "prompt_tokens", &ret->input_tokens);
	take_count(usage, "completion_tokens", &ret->output_tokens);
}

static void take_json(const uint8_t *p, size_t n, struct egress_model_info *ret)
{
	struct json_opts opts = { .max_bytes = EGRESS_MODEL_BODY_MAX, .max_depth = 0, .want_top = JSON_OBJECT };
	json_t *v = NULL;

	if (n == 0 || json_parse_strict(p, n, &opts, &v) < 0) {
		return;
	}
	take_object(v, ret);
	json_decref(v);
}

/* text/event-stream: every "data:" line that holds a JSON object. */
static void take_sse(const uint8_t *p, size_t n, struct egress_model_info *ret)
{
	size_t pos = 0;

	while (pos < n) {
		const uint8_t *nl = memchr(p + pos, '\n', n - pos);
		size_t end = nl ? (size_t)(nl - p) : n, e = end;

		if (!nl) {
			break; /* a line cut at the end of what was kept */
		}
		if (e > pos && p[e - 1] == '\r') {
			e--;
		}
		if (e - pos >= 5 && memcmp(p + pos, "data:", 5) == 0) {
			size_t s = pos + 5;
			if (s < e && p[s] == ' ') {
				s++;
			}
			if (s < e && p[s] == '{') {
				take_json(p + s, e - s, ret);
			}
		}
		pos = end + 1;
	}
}

static bool is_sse(const char *content_type, const uint8_t *p, size_t n)
{
	static const char sse[] = "text/event-stream";

	if (content_type && content_type[0]) {
		size_t k = strlen(sse);
		return strncasecmp(content_type, sse, k) == 0 &&
		       (content_type[k] == '\0' || content_type[k] == ';' || content_type[k] == ' ');
	}
	return (n >= 6 && memcmp(p, "event:", 6) == 0) || (n >= 5 && memcmp(p, "data:", 5) == 0);
}

void egress_model_parse(const char *content_type, const uint8_t *body, size_t n, struct egress_model_info *ret)
{
	*ret = (struct egress_model_info){ .input_tokens = -1, .output_tokens = -1 };
	if (!body || n == 0) {
		return;
	}
	n = MIN(n, EGRESS_MODEL_BODY_MAX);
	if (is_sse(content_type, body, n)) {
		take_sse(body, n, ret);
	} else {
		take_json(body, n, ret);
	}
}
