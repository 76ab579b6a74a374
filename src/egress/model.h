/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_EGRESS_MODEL_H
#define TKBOX_EGRESS_MODEL_H

#include <stddef.h>
#include <stdint.h>

/*
 * What a model provider's response says about the call (tkbox.model.call):
 * the model's name and token counts. Pure. Reads a JSON body (Anthropic
 * Messages: "model", "usage": {"input_tokens", "output_tokens"}; OpenAI:
 * "model", "usage": {"prompt_tokens", "completion_tokens"}) or a
 * text/event-stream body (each "data:" line a JSON object: Anthropic's
 * message_start {"message": {"model", "usage"}} and message_delta
 * {"usage": {"output_tokens"}}, the last count winning; OpenAI's chunks with
 * "model" and a final "usage"). Anything it cannot read leaves the fields
 * unknown; it never fails. The body given is at most EGRESS_MODEL_BODY_MAX.
 */

#define EGRESS_MODEL_BODY_MAX ((size_t)1 << 20) /* response bytes kept to read the counts from */
#define EGRESS_MODEL_NAME_MAX 128

struct egress_model_info {
	char model[EGRESS_MODEL_NAME_MAX + 1]; /* "" unknown; printable ASCII only, else unknown */
	int64_t input_tokens; /* -1 unknown */
	int64_t output_tokens; /* -1 unknown */
};

void egress_model_parse(const char *content_type, const uint8_t *body, size_t n, struct egress_model_info *ret);

#endif
