/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_FRAME_H
#define TKBOX_FRAME_H

#include "buf.h"

/*
 * The agent channel's frame: [type u8][len u32 BE][payload, len bytes].
 * The decoder is incremental over a byte stream and never holds more than
 * one payload, bounded by max_payload (at most FRAME_MAX_PAYLOAD). Memory is
 * committed as bytes arrive, not when a length is announced.
 */

#define FRAME_HEADER_SIZE 5
#define FRAME_MAX_PAYLOAD ((size_t)1 << 20) /* 1 MiB */

struct frame_decoder {
	uint8_t hdr[FRAME_HEADER_SIZE];
	size_t hdr_have;
	uint8_t type;
	uint32_t want; /* payload length announced by the header */
	bool done; /* a whole frame is ready for frame_decoder_take */
	bool failed; /* a protocol error happened: the stream is dead */
	size_t max_payload;
	struct buf payload;
};

_wur_ int frame_decoder_init(struct frame_decoder *d, size_t max_payload);
void frame_decoder_release(struct frame_decoder *d);

/*
 * Feed n bytes. Consumes as many bytes as belong to the current frame and
 * stores that count in *ret_used. Returns 1 when a frame is complete (call
 * frame_decoder_take before feeding more), 0 when more bytes are needed, and
 * -E2BIG when the header announces a payload over max_payload (the decoder
 * is then failed and refuses further input with -EPROTO).
 */
_wur_ int frame_decoder_feed(struct frame_decoder *d, const void *p, size_t n, size_t *ret_used);

/*
 * Move the completed frame out: *ret_type and the payload appended to out
 * (whose max_size must allow it). Resets the decoder for the next frame.
 * -EAGAIN when no frame is complete.
 */
_wur_ int frame_decoder_take(struct frame_decoder *d, uint8_t *ret_type, struct buf *out);

/* True when the decoder sits between frames (no partial frame buffered). */
bool frame_decoder_idle(const struct frame_decoder *d);

/* Append one encoded frame to out. -E2BIG when n > FRAME_MAX_PAYLOAD or out is full. */
_wur_ int frame_encode(struct buf *out, uint8_t type, const void *p, size_t n);

/* Decode exactly one whole frame from a complete message (pure; refuses trailing bytes). */
_wur_ int frame_decode_one(const void *p, size_t n, size_t max_payload, uint8_t *ret_type, const uint8_t **ret_payload,
			   size_t *ret_len);

#endif
