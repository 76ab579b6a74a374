/* SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * Feed arbitrary bytes to the incremental decoder in chunks whose sizes come
 * from the input itself; every completed frame is re-encoded and must decode
 * back to the same type and payload, and the whole-message decoder must agree.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct frame_decoder d;
	struct buf payload, enc;
	size_t off = 0, max = 4096;
	uint8_t type;

	if (size < 1) {
		return 0;
	}
	/* A small cap keeps the fuzzer exploring the over-limit path. */
	max = (size_t)(data[0] % 64) * 64 + 1;
	data++;
	size--;
	if (frame_decoder_init(&d, max) < 0 || buf_init(&payload, max, 0) < 0 || buf_init(&enc, max + 5, 0) < 0) {
		abort();
	}
	while (off < size) {
		size_t used = 0, chunk = (data[off] % 17) + 1;
		int r;

		chunk = MIN(chunk, size - off);
		r = frame_decoder_feed(&d, data + off, chunk, &used);
		if (r < 0) {
			if (r != -E2BIG && r != -EPROTO) {
				abort();
			}
			break;
		}
		if (used > chunk) {
			abort();
		}
		off += used;
		if (r == 1) {
			const uint8_t *p;
			size_t n;
			uint8_t t2;
			buf_reset(&payload);
			buf_reset(&enc);
			if (frame_decoder_take(&d, &type, &payload) < 0) {
				abort();
			}
			if (buf_len(&payload) > max ||
			    frame_encode(&enc, type, buf_ptr(&payload), buf_len(&payload)) < 0) {
				abort();
			}
			if (frame_decode_one(buf_ptr(&enc), buf_len(&enc), max, &t2, &p, &n) < 0 || t2 != type ||
			    n != buf_len(&payload) || memcmp(p, buf_ptr(&payload), n) != 0) {
				abort();
			}
		} else if (used == 0) {
			abort(); /* no progress without a frame: a stuck decoder */
		}
	}
	frame_decoder_release(&d);
	buf_release(&payload);
	buf_release(&enc);
	return 0;
}
