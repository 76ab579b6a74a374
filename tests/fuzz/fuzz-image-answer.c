/* SPDX-License-Identifier: Apache-2.0 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "buf.h"
#include "image/image-answer.h"

/*
 * The image child's answer as the daemon decodes it (image_answer_decode).
 * Whatever decodes is exactly what the encoder writes back (one canonical
 * form), and holds what the daemon relies on: absolute cache paths, an
 * absolute WorkingDir, NAME=value env entries within the boot config's caps.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct image_result res = { 0 };
	struct image_diag d = { .msg = "" };
	struct buf *b = NULL;

	if (image_answer_decode(data, size, &res, &d) < 0) {
		if (res.ext4_path || res.env || !d.msg[0]) {
			abort(); /* a refusal writes nothing and always says why */
		}
		return 0;
	}
	if (res.ext4_path[0] != '/' || res.json_path[0] != '/' || strstr(res.ext4_path, "/../") ||
	    (res.working_dir && res.working_dir[0] != '/') || (res.user && !res.user[0]) || !res.env ||
	    res.env[res.n_env]) {
		abort();
	}
	for (size_t i = 0; i < res.n_env; i++) {
		if (res.env[i][0] == '=' || !strchr(res.env[i], '=')) {
			abort();
		}
	}
	if (buf_new(IMAGE_ANSWER_MAX_BYTES, 0, &b) < 0) {
		abort();
	}
	if (image_answer_encode(&res, b, &d) < 0 || buf_len(b) != size || memcmp(buf_ptr(b), data, size) != 0) {
		abort(); /* decode then encode gives back the same bytes */
	}
	buf_free(b);
	image_result_release(&res);
	return 0;
}
