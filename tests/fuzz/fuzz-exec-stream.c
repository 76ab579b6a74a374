/* SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "exec-stream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * The exec stream as either end reads it: the first byte picks the
 * direction (even: frames from the client, as the supervisor decodes them;
 * odd: frames from the supervisor, as the CLI does), the rest is fed to the
 * frame decoder with the stream's cap. Every frame that decodes must
 * re-encode to the very bytes it came from (one canonical form).
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct frame_decoder d;
	struct buf payload, enc;
	enum exs_dir dir;
	size_t off = 1;

	if (size < 1) {
		return 0;
	}
	dir = data[0] & 1 ? EXS_FROM_SUPERVISOR : EXS_FROM_CLIENT;
	if (frame_decoder_init(&d, EXS_MAX_FRAME) < 0 || buf_init(&payload, EXS_MAX_FRAME, 0) < 0 ||
	    buf_init(&enc, EXS_MAX_FRAME + FRAME_HEADER_SIZE, 0) < 0) {
		abort();
	}
	while (off < size) {
		size_t used = 0;
		uint8_t type;
		struct exs_frame f;
		int r = frame_decoder_feed(&d, data + off, size - off, &used);
		off += used;
		if (r < 0) {
			break;
		}
		if (r == 0) {
			continue;
		}
		buf_reset(&payload);
		if (frame_decoder_take(&d, &type, &payload) < 0) {
			abort();
		}
		if (exs_decode(dir, type, buf_ptr(&payload), buf_len(&payload), &f) < 0) {
			continue;
		}
		buf_reset(&enc);
		if (exs_encode(&f, &enc) < 0 || buf_len(&enc) != FRAME_HEADER_SIZE + buf_len(&payload) ||
		    buf_ptr(&enc)[0] != type ||
		    memcmp(buf_ptr(&enc) + FRAME_HEADER_SIZE, buf_ptr(&payload), buf_len(&payload)) != 0) {
			abort();
		}
	}
	buf_release(&enc);
	buf_release(&payload);
	frame_decoder_release(&d);
	return 0;
}
