/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "banned.h"
#include "frame.h"
#include "vmm/egress-proto.h"

bool egress_type_allowed(enum egress_dir dir, uint8_t type)
{
	switch (type) {
	case EGRESS_OPEN:
		return dir == EGRESS_FROM_GUEST;
	case EGRESS_OPEN_OK:
	case EGRESS_OPEN_REFUSED:
		return dir == EGRESS_FROM_HOST;
	case EGRESS_DATA:
	case EGRESS_WINDOW:
	case EGRESS_FIN:
	case EGRESS_CLOSE:
		return dir == EGRESS_FROM_GUEST || dir == EGRESS_FROM_HOST;
	default:
		return false;
	}
}

static uint32_t get_u32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static bool printable(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] < 0x20 || p[i] > 0x7e) {
			return false;
		}
	}
	return true;
}

/* The value rules of each type: the decoder and the encoder both apply them. */
static int check(const struct egress_frame *f)
{
	if (f->id == 0) {
		return -EBADMSG;
	}
	switch (f->type) {
	case EGRESS_OPEN:
	case EGRESS_OPEN_OK:
	case EGRESS_FIN:
		return f->len == 0 ? 0 : -EBADMSG;
	case EGRESS_OPEN_REFUSED:
		if (f->len > EGRESS_MAX_REASON) {
			return -E2BIG;
		}
		return f->len >= 1 && printable(f->data, f->len) ? 0 : -EBADMSG;
	case EGRESS_DATA:
		if (f->len > EGRESS_MAX_DATA) {
			return -E2BIG;
		}
		return f->len >= 1 ? 0 : -EBADMSG;
	case EGRESS_WINDOW:
		if (f->len != 0) {
			return -EBADMSG;
		}
		if (f->credit > EGRESS_MAX_WINDOW) {
			return -E2BIG;
		}
		return f->credit >= 1 ? 0 : -EBADMSG;
	case EGRESS_CLOSE:
		return f->len == 0 && f->reason <= EGRESS_CLOSE_MAX ? 0 : -EBADMSG;
	default:
		return -EPROTO;
	}
}

int egress_decode(enum egress_dir dir, uint8_t type, const uint8_t *p, size_t n, struct egress_frame *ret)
{
	struct egress_frame f = { .type = type };
	int r;

	if (!egress_type_allowed(dir, type)) {
		return -EPROTO;
	}
	if (n < 4) {
		return -EBADMSG;
	}
	f.id = get_u32(p);
	p += 4;
	n -= 4;
	switch (type) {
	case EGRESS_WINDOW:
		if (n != 4) {
			return -EBADMSG;
		}
		f.credit = get_u32(p);
		break;
	case EGRESS_CLOSE:
		if (n != 1) {
			return -EBADMSG;
		}
		f.reason = p[0];
		break;
	case EGRESS_OPEN_REFUSED:
	case EGRESS_DATA:
		f.data = n > 0 ? p : NULL;
		f.len = n;
		break;
	default:
		/* OPEN, OPEN_OK, FIN: the id alone; check() refuses a longer payload. */
		f.len = n;
		break;
	}
	r = check(&f);
	if (r < 0) {
		return r;
	}
	*ret = f;
	return 0;
}

int egress_encode(const struct egress_frame *f, struct buf *out)
{
	size_t plen = 4, total;
	int r = check(f);

	if (r < 0) {
		return r == -EPROTO ? -EPROTO : -EINVAL;
	}
	switch (f->type) {
	case EGRESS_WINDOW:
		plen += 4;
		break;
	case EGRESS_CLOSE:
		plen += 1;
		break;
	case EGRESS_OPEN_REFUSED:
	case EGRESS_DATA:
		plen += f->len;
		break;
	default:
		break;
	}
	/*
	 * frame.h's layout, written in place: frame_encode takes one contiguous
	 * payload, and DATA would need a 64 KiB copy to put the id before it.
	 */
	if (size_add(plen, FRAME_HEADER_SIZE, &total) < 0 || total > buf_avail(out)) {
		return (out->flags & BUF_READONLY) ? -EROFS : -E2BIG;
	}
	r = buf_put_u8(out, f->type);
	if (r >= 0) {
		r = buf_put_u32(out, (uint32_t)plen);
	}
	if (r >= 0) {
		r = buf_put_u32(out, f->id);
	}
	if (r >= 0 && f->type == EGRESS_WINDOW) {
		r = buf_put_u32(out, f->credit);
	} else if (r >= 0 && f->type == EGRESS_CLOSE) {
		r = buf_put_u8(out, f->reason);
	} else if (r >= 0 && f->len > 0) {
		r = buf_put(out, f->data, f->len);
	}
	return r;
}

int egress_encode_open(struct buf *out, uint32_t id)
{
	struct egress_frame f = { .type = EGRESS_OPEN, .id = id };

	return egress_encode(&f, out);
}

int egress_encode_open_ok(struct buf *out, uint32_t id)
{
	struct egress_frame f = { .type = EGRESS_OPEN_OK, .id = id };

	return egress_encode(&f, out);
}

int egress_encode_open_refused(struct buf *out, uint32_t id, const char *reason)
{
	struct egress_frame f = { .type = EGRESS_OPEN_REFUSED, .id = id };

	if (!reason) {
		return -EINVAL;
	}
	f.len = strnlen(reason, EGRESS_MAX_REASON + 1);
	f.data = (const uint8_t *)reason;
	return egress_encode(&f, out);
}

int egress_encode_data(struct buf *out, uint32_t id, const void *p, size_t n)
{
	struct egress_frame f = { .type = EGRESS_DATA, .id = id, .data = p, .len = n };

	return egress_encode(&f, out);
}

int egress_encode_window(struct buf *out, uint32_t id, uint32_t credit)
{
	struct egress_frame f = { .type = EGRESS_WINDOW, .id = id, .credit = credit };

	return egress_encode(&f, out);
}

int egress_encode_fin(struct buf *out, uint32_t id)
{
	struct egress_frame f = { .type = EGRESS_FIN, .id = id };

	return egress_encode(&f, out);
}

int egress_encode_close(struct buf *out, uint32_t id, enum egress_close reason)
{
	struct egress_frame f = { .type = EGRESS_CLOSE, .id = id };

	if ((unsigned)reason > EGRESS_CLOSE_MAX) {
		return -EINVAL;
	}
	f.reason = (uint8_t)reason;
	return egress_encode(&f, out);
}

/* ---- the tracker ---- */

void egress_mux_init(struct egress_mux *mux, enum egress_dir self)
{
	memset(mux, 0, sizeof(*mux));
	mux->self = self;
}

static ssize_t find(const struct egress_mux *mux, uint32_t id)
{
	for (size_t i = 0; i < mux->n; i++) {
		if (mux->s[i].id == id) {
			return (ssize_t)i;
		}
	}
	return -1;
}

const struct egress_stream *egress_mux_find(const struct egress_mux *mux, uint32_t id)
{
	ssize_t i = find(mux, id);

	return i < 0 ? NULL : &mux->s[i];
}

static uint8_t fin_flag(enum egress_dir d)
{
	return d == EGRESS_FROM_GUEST ? EGRESS_S_FIN_GUEST : EGRESS_S_FIN_HOST;
}

static uint8_t close_flag(enum egress_dir d)
{
	return d == EGRESS_FROM_GUEST ? EGRESS_S_CLOSE_GUEST : EGRESS_S_CLOSE_HOST;
}

static enum egress_dir other(enum egress_dir d)
{
	return d == EGRESS_FROM_GUEST ? EGRESS_FROM_HOST : EGRESS_FROM_GUEST;
}

/* The rules of a frame on an established stream (DATA, WINDOW, FIN, CLOSE). */
static const char *check_live(const struct egress_mux *mux, enum egress_dir dir, const struct egress_stream *s,
			      const struct egress_frame *f)
{
	enum egress_dir peer = other(dir);

	if (!(s->flags & EGRESS_S_ESTABLISHED)) {
		return "a frame on a stream the host has not answered yet (wait for OPEN_OK)";
	}
	if (s->flags & close_flag(dir)) {
		return "a frame on a stream its sender has closed already (nothing follows CLOSE)";
	}
	/* Sending after the peer's CLOSE arrived: only the answering CLOSE may go. */
	if (dir == mux->self && (s->flags & close_flag(peer)) && f->type != EGRESS_CLOSE) {
		return "a frame other than CLOSE after the peer's CLOSE (answer CLOSE)";
	}
	switch (f->type) {
	case EGRESS_DATA:
		if (s->flags & fin_flag(dir)) {
			return "DATA after its sender's FIN";
		}
		if (f->len > s->credit[dir]) {
			return "DATA beyond the credit the receiver granted (EGRESS_INITIAL_WINDOW plus WINDOW grants)";
		}
		return NULL;
	case EGRESS_WINDOW:
		if (f->credit > EGRESS_MAX_WINDOW - s->credit[peer]) {
			return "a WINDOW that would raise the unused credit above EGRESS_MAX_WINDOW (16 MiB)";
		}
		return NULL;
	case EGRESS_FIN:
		return (s->flags & fin_flag(dir)) ? "a second FIN on one stream" : NULL;
	case EGRESS_CLOSE:
		return NULL;
	default:
		return "a frame type the tracker does not know";
	}
}

static const char *check_frame(const struct egress_mux *mux, enum egress_dir dir, const struct egress_frame *f)
{
	ssize_t i;

	if ((dir != EGRESS_FROM_GUEST && dir != EGRESS_FROM_HOST) || !egress_type_allowed(dir, f->type)) {
		return "a frame type that does not go this way";
	}
	if (f->id == 0) {
		return "stream id 0 (ids are 1..2^32-1)";
	}
	i = find(mux, f->id);
	switch (f->type) {
	case EGRESS_OPEN:
		if (i >= 0) {
			return "an OPEN with the id of a stream that is not closed by both sides yet (ids are reused "
			       "only after both CLOSEs)";
		}
		if (mux->n >= EGRESS_MAX_STREAMS) {
			return "more than EGRESS_MAX_STREAMS (256) open streams: the box's connection limit (close a "
			       "connection first)";
		}
		return NULL;
	case EGRESS_OPEN_OK:
	case EGRESS_OPEN_REFUSED:
		if (i < 0 || (mux->s[i].flags & EGRESS_S_ESTABLISHED)) {
			return "an answer to an OPEN that was not sent or was answered already";
		}
		return NULL;
	default:
		if (i < 0) {
			return "a frame on a stream that was never opened or is closed";
		}
		return check_live(mux, dir, &mux->s[i], f);
	}
}

int egress_mux_check(const struct egress_mux *mux, enum egress_dir dir, const struct egress_frame *f,
		     const char **ret_why)
{
	const char *why = check_frame(mux, dir, f);

	if (why) {
		if (ret_why) {
			*ret_why = why;
		}
		return -EPROTO;
	}
	return 0;
}

static void drop(struct egress_mux *mux, size_t i)
{
	mux->s[i] = mux->s[--mux->n];
	memset(&mux->s[mux->n], 0, sizeof(mux->s[mux->n]));
}

int egress_mux_apply(struct egress_mux *mux, enum egress_dir dir, const struct egress_frame *f, const char **ret_why)
{
	struct egress_stream *s;
	ssize_t i;
	int r = egress_mux_check(mux, dir, f, ret_why);

	if (r < 0) {
		return r;
	}
	if (f->type == EGRESS_OPEN) {
		mux->s[mux->n++] = (struct egress_stream){ .id = f->id };
		return 0;
	}
	i = find(mux, f->id);
	s = &mux->s[i];
	switch (f->type) {
	case EGRESS_OPEN_OK:
		s->flags |= EGRESS_S_ESTABLISHED;
		s->credit[EGRESS_FROM_GUEST] = EGRESS_INITIAL_WINDOW;
		s->credit[EGRESS_FROM_HOST] = EGRESS_INITIAL_WINDOW;
		break;
	case EGRESS_OPEN_REFUSED:
		drop(mux, (size_t)i);
		break;
	case EGRESS_DATA:
		s->credit[dir] -= (uint32_t)f->len;
		break;
	case EGRESS_WINDOW:
		s->credit[other(dir)] += f->credit;
		break;
	case EGRESS_FIN:
		s->flags |= fin_flag(dir);
		break;
	case EGRESS_CLOSE:
		s->flags |= close_flag(dir);
		if (s->flags & close_flag(other(dir))) {
			drop(mux, (size_t)i);
		}
		break;
	default:
		break;
	}
	return 0;
}

int egress_mux_receive(struct egress_mux *mux, enum egress_dir dir, uint8_t type, const uint8_t *p, size_t n,
		       struct egress_frame *ret, const char **ret_why)
{
	struct egress_frame f;
	int r;

	if (dir == mux->self) {
		if (ret_why) {
			*ret_why = "a received frame in the direction this end sends";
		}
		return -EPROTO;
	}
	r = egress_decode(dir, type, p, n, &f);
	if (r < 0) {
		if (ret_why) {
			*ret_why = r == -E2BIG ? "a frame past a cap (DATA over 64 KiB, reason over 256 bytes, credit "
						 "over 16 MiB)"
				   : r == -EPROTO ? "an unknown frame type, or one that goes the other way"
						  : "a frame whose payload breaks its type's layout";
		}
		return r;
	}
	r = egress_mux_apply(mux, dir, &f, ret_why);
	if (r < 0) {
		return r;
	}
	*ret = f;
	return 0;
}
