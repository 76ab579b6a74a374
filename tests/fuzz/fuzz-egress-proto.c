/* SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "frame.h"
#include "vmm/egress-proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct egress_mux mux, before;

/* What must hold after every frame, accepted or not. */
static void check_invariants(const struct egress_mux *m)
{
	if (m->n > EGRESS_MAX_STREAMS) {
		abort();
	}
	for (size_t i = 0; i < m->n; i++) {
		const struct egress_stream *s = &m->s[i];

		if (s->id == 0 || s->credit[0] > EGRESS_MAX_WINDOW || s->credit[1] > EGRESS_MAX_WINDOW) {
			abort();
		}
		if (!(s->flags & EGRESS_S_ESTABLISHED) && (s->flags || s->credit[0] || s->credit[1])) {
			abort();
		}
		for (size_t j = i + 1; j < m->n; j++) {
			if (m->s[j].id == s->id) {
				abort();
			}
		}
	}
}

static void apply_one(enum egress_dir dir, const struct egress_frame *f)
{
	const struct egress_stream *s = egress_mux_find(&mux, f->id);
	uint32_t credit_before = s ? s->credit[dir] : 0;
	const char *why = NULL;
	int r;

	before = mux;
	r = egress_mux_apply(&mux, dir, f, &why);
	if (r < 0) {
		if (r != -EPROTO || !why || memcmp(&before, &mux, sizeof(mux)) != 0) {
			abort();
		}
	} else if (f->type == EGRESS_DATA) {
		s = egress_mux_find(&mux, f->id);
		if (!s || credit_before < f->len || s->credit[dir] != credit_before - f->len) {
			abort();
		}
	}
	check_invariants(&mux);
}

/*
 * The mux as one end reads it. The first byte picks the end the tracker
 * serves (bit 0). Then, repeatedly: one byte whose bit 0 is the direction
 * of the next frame and whose bits 1..7 say how many more times the tracker
 * sees that frame (so a short input can spend a 256 KiB window), and the
 * frame's bytes fed to the frame decoder with the mux's cap. Properties:
 *   - a frame that decodes re-encodes to the very bytes it came from;
 *   - the tracker never lets credit go negative: an accepted DATA had at
 *     least its length in credit and leaves exactly the rest; unused credit
 *     never passes EGRESS_MAX_WINDOW; a refused frame changes nothing.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct frame_decoder d;
	struct buf payload, enc;
	size_t off = 1;

	if (size < 1) {
		return 0;
	}
	egress_mux_init(&mux, data[0] & 1 ? EGRESS_FROM_HOST : EGRESS_FROM_GUEST);
	if (frame_decoder_init(&d, EGRESS_MAX_FRAME) < 0 || buf_init(&payload, EGRESS_MAX_FRAME, 0) < 0 ||
	    buf_init(&enc, EGRESS_MAX_FRAME + FRAME_HEADER_SIZE, 0) < 0) {
		abort();
	}
	while (off < size) {
		enum egress_dir dir = data[off] & 1 ? EGRESS_FROM_HOST : EGRESS_FROM_GUEST;
		unsigned times = 1u + (data[off++] >> 1);
		struct egress_frame f;
		uint8_t type;
		int r = 0;

		while (off < size) {
			size_t used = 0;

			r = frame_decoder_feed(&d, data + off, size - off, &used);
			off += used;
			if (r != 0) {
				break;
			}
		}
		if (r <= 0) {
			break;
		}
		buf_reset(&payload);
		if (frame_decoder_take(&d, &type, &payload) < 0) {
			abort();
		}
		if (egress_decode(dir, type, buf_ptr(&payload), buf_len(&payload), &f) < 0) {
			continue;
		}
		buf_reset(&enc);
		if (egress_encode(&f, &enc) < 0 || buf_len(&enc) != FRAME_HEADER_SIZE + buf_len(&payload) ||
		    buf_ptr(&enc)[0] != type ||
		    memcmp(buf_ptr(&enc) + FRAME_HEADER_SIZE, buf_ptr(&payload), buf_len(&payload)) != 0) {
			abort();
		}
		while (times-- > 0) {
			apply_one(dir, &f);
		}
	}
	buf_release(&enc);
	buf_release(&payload);
	frame_decoder_release(&d);
	return 0;
}
