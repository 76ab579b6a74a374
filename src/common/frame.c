/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "banned.h"
#include "frame.h"

int frame_decoder_init(struct frame_decoder *d, size_t max_payload)
{
	int r;

	if (max_payload == 0 || max_payload > FRAME_MAX_PAYLOAD) {
		return -EINVAL;
	}
	*d = (struct frame_decoder){ .max_payload = max_payload };
	r = buf_init(&d->payload, max_payload, 0);
	return r;
}

void frame_decoder_release(struct frame_decoder *d)
{
	buf_release(&d->payload);
	d->hdr_have = 0;
	d->done = false;
}

bool frame_decoder_idle(const struct frame_decoder *d)
{
	return !d->failed && !d->done && d->hdr_have == 0;
}

int frame_decoder_feed(struct frame_decoder *d, const void *p, size_t n, size_t *ret_used)
{
	const uint8_t *in = p;
	size_t used = 0;
	int r;

	if (d->failed) {
		return -EPROTO;
	}
	if (d->done) {
		*ret_used = 0;
		return 1;
	}
	while (d->hdr_have < FRAME_HEADER_SIZE && used < n) {
		d->hdr[d->hdr_have++] = in[used++];
		if (d->hdr_have == FRAME_HEADER_SIZE) {
			d->type = d->hdr[0];
			d->want = ((uint32_t)d->hdr[1] << 24) | ((uint32_t)d->hdr[2] << 16) |
				  ((uint32_t)d->hdr[3] << 8) | d->hdr[4];
			if (d->want > d->max_payload) {
				d->failed = true;
				*ret_used = used;
				return -E2BIG;
			}
		}
	}
	if (d->hdr_have == FRAME_HEADER_SIZE) {
		size_t missing = d->want - buf_len(&d->payload);
		size_t take = MIN(missing, n - used);
		if (take > 0) {
			r = buf_put(&d->payload, in + used, take);
			if (r < 0) {
				d->failed = true;
				return r;
			}
			used += take;
		}
		if (buf_len(&d->payload) == d->want) {
			d->done = true;
		}
	}
	*ret_used = used;
	return d->done ? 1 : 0;
}

int frame_decoder_take(struct frame_decoder *d, uint8_t *ret_type, struct buf *out)
{
	int r;

	if (!d->done) {
		return -EAGAIN;
	}
	r = buf_put(out, buf_ptr(&d->payload), buf_len(&d->payload));
	if (r < 0) {
		return r;
	}
	*ret_type = d->type;
	buf_reset(&d->payload);
	d->hdr_have = 0;
	d->want = 0;
	d->done = false;
	return 0;
}

int frame_encode(struct buf *out, uint8_t type, const void *p, size_t n)
{
	size_t total;
	int r;

	if (n > FRAME_MAX_PAYLOAD) {
		return -E2BIG;
	}
	if (size_add(n, FRAME_HEADER_SIZE, &total) < 0 || total > buf_avail(out)) {
		return (out->flags & BUF_READONLY) ? -EROFS : -E2BIG;
	}
	r = buf_put_u8(out, type);
	if (r >= 0) {
		r = buf_put_u32(out, (uint32_t)n);
	}
	if (r >= 0) {
		r = buf_put(out, p, n);
	}
	return r;
}

int frame_decode_one(const void *p, size_t n, size_t max_payload, uint8_t *ret_type, const uint8_t **ret_payload,
		     size_t *ret_len)
{
	const uint8_t *in = p;
	uint32_t len;

	if (n < FRAME_HEADER_SIZE) {
		return -ENODATA;
	}
	len = ((uint32_t)in[1] << 24) | ((uint32_t)in[2] << 16) | ((uint32_t)in[3] << 8) | in[4];
	if (len > max_payload || len > FRAME_MAX_PAYLOAD) {
		return -E2BIG;
	}
	if (n - FRAME_HEADER_SIZE < len) {
		return -ENODATA;
	}
	if (n - FRAME_HEADER_SIZE > len) {
		return -EBADMSG;
	}
	*ret_type = in[0];
	*ret_payload = in + FRAME_HEADER_SIZE;
	*ret_len = len;
	return 0;
}
