/* SPDX-License-Identifier: Apache-2.0 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "buf.h"
#include "image/workspace-answer.h"

/*
 * The workspace builder child's answer as the daemon decodes it
 * (workspace_answer_decode). Whatever decodes is exactly what the encoder
 * writes back (one canonical form), and holds what the daemon relies on: an
 * absolute ext4 path for a built answer, a message for a refusal, at most
 * WORKSPACE_ANSWER_MAX_LEFT_OUT named paths without control characters.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_text(const char *s)
{
	if (!s || !s[0]) {
		abort();
	}
	for (; *s; s++) {
		if ((unsigned char)*s < 0x20 || *s == 0x7f) {
			abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct workspace_answer a = { 0 };
	struct image_diag d = { .msg = "" };
	struct buf *b = NULL;

	if (workspace_answer_decode(data, size, &a, &d) < 0) {
		if (a.ext4 || a.error || a.left_out || !d.msg[0]) {
			abort(); /* a refusal writes nothing and always says why */
		}
		return 0;
	}
	if ((a.error == NULL) == (a.ext4 == NULL) || (a.ext4 && (a.ext4[0] != '/' || strstr(a.ext4, "/../"))) ||
	    (a.rule && !a.error) || a.n_left_out > WORKSPACE_ANSWER_MAX_LEFT_OUT) {
		abort();
	}
	if (a.error) {
		check_text(a.error);
	}
	for (size_t i = 0; i < a.n_left_out; i++) {
		check_text(a.left_out[i].path);
		check_text(a.left_out[i].why);
	}
	if (buf_new(WORKSPACE_ANSWER_MAX_BYTES, 0, &b) < 0) {
		abort();
	}
	if (workspace_answer_encode(&a, b, &d) < 0 || buf_len(b) != size || memcmp(buf_ptr(b), data, size) != 0) {
		abort(); /* decode then encode gives back the same bytes */
	}
	buf_free(b);
	workspace_answer_release(&a);
	return 0;
}
