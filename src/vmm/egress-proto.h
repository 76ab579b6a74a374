/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VMM_EGRESS_PROTO_H
#define TKBOX_VMM_EGRESS_PROTO_H

#include "buf.h"
#include "frame.h"

/*
 * The egress mux spoken over the tkbox.egress port (virtio-serial) between the
 * guest's forwarder (127.0.0.1:3128 in the box) and the host's supervisor.
 * Every TCP connection a box makes to its proxy is one stream. This file
 * holds the one encoder and decoder of its frames and the state tracker both
 * ends run; it is pure (no I/O, no logging, no allocation) and needs only
 * buf and frame, so the static guest can link it (no libcrypto).
 *
 * Frames are frame.h's [type u8][len u32 BE][payload]; every payload starts
 * with the stream id (u32 BE). All integers are big-endian. The layout is
 * closed: a payload of any other size, an unknown type, or a type sent the
 * wrong way is refused.
 *
 *   type            dir    payload                              size (bytes)
 *   OPEN     0x01   g->h   id                                   4
 *   OPEN_OK  0x81   h->g   id                                   4
 *   OPEN_REFUSED    h->g   id, reason text (printable ASCII)    5..4+EGRESS_MAX_REASON
 *            0x82
 *   DATA     0x10   both   id, bytes                            5..4+EGRESS_MAX_DATA
 *   WINDOW   0x11   both   id, credit u32 (1..EGRESS_MAX_WINDOW) 8
 *   FIN      0x12   both   id                                   4
 *   CLOSE    0x13   both   id, reason u8 (enum egress_close)    5
 *
 * Stream ids are chosen by the guest (only the guest opens streams): any
 * value but 0, unique among the streams not yet closed by both sides. OPEN
 * carries no request bytes: the proxy request head travels as the stream's
 * first DATA, read by the host's proxy-head parser like any other byte, so
 * the forwarder parses nothing and the head's cap lives in one place
 * (EGRESS_HEAD_MAX).
 *
 * A stream's life:
 *   - OPEN (guest). Until the host answers, the guest sends nothing else on it.
 *   - OPEN_OK (host): established; each side may send EGRESS_INITIAL_WINDOW
 *     bytes of DATA, and more as the receiver grants it with WINDOW. The sum
 *     of credit not yet used is at most EGRESS_MAX_WINDOW.
 *     OPEN_REFUSED (host): the stream is gone at once (the id is free again).
 *     It is the mux's own refusal (stream cap, egress closed while the box
 *     stops); a policy refusal is an HTTP 403 the proxy writes as DATA.
 *   - FIN: the sender sends no more DATA (TCP half-close; a client that
 *     shuts down its write side and waits for the answer needs it). It may
 *     still send WINDOW, and receive.
 *   - CLOSE: the sender sends nothing more on the stream, and drops what
 *     arrives for it. A side that receives CLOSE answers with CLOSE (unless
 *     it sent one already) and sends nothing else on the stream before it.
 *     The id is free once each side has sent CLOSE (as SSH channels), so a
 *     DATA or WINDOW that crossed a CLOSE is never a protocol error.
 *
 * Each end runs one struct egress_mux and passes every frame it sends (before
 * it goes) and every frame it receives through egress_mux_apply, with the
 * direction the frame travelled. The tracker knows which end it serves, so
 * it can tell a frame that crossed a CLOSE (received: accepted and dropped)
 * from one sent after a CLOSE was seen (refused). A refusal breaks the protocol: the channel is dead (the
 * host stops the box's egress; the guest closes its listener's streams).
 */

enum egress_type {
	/* guest -> host */
	EGRESS_OPEN = 0x01,
	/* host -> guest */
	EGRESS_OPEN_OK = 0x81,
	EGRESS_OPEN_REFUSED = 0x82,
	/* both ways */
	EGRESS_DATA = 0x10,
	EGRESS_WINDOW = 0x11,
	EGRESS_FIN = 0x12,
	EGRESS_CLOSE = 0x13,
};

/* CLOSE reasons (a closed set). */
enum egress_close {
	EGRESS_CLOSE_DONE = 0, /* both ends finished normally */
	EGRESS_CLOSE_RESET = 1, /* the sender's socket was reset or failed */
	EGRESS_CLOSE_REFUSED = 2, /* the door refused the connection (after the 403 went as DATA) */
	EGRESS_CLOSE_STOPPING = 3, /* the box is stopping: egress is closed */
	EGRESS_CLOSE_PROTOCOL = 4, /* the sender's tracker refused a frame on this stream */
};
#define EGRESS_CLOSE_MAX EGRESS_CLOSE_PROTOCOL

enum egress_dir {
	EGRESS_FROM_GUEST = 0,
	EGRESS_FROM_HOST = 1,
};

/* Caps (each has a unit test one past it). */
#define EGRESS_MAX_STREAMS 256 /* streams not yet closed by both sides (the box's connection limit) */
#define EGRESS_MAX_DATA ((size_t)64 * 1024) /* bytes in one DATA frame */
#define EGRESS_MAX_REASON ((size_t)256) /* OPEN_REFUSED text */
#define EGRESS_MAX_FRAME (4 + EGRESS_MAX_DATA) /* the frame decoder's payload cap on both ends */
#define EGRESS_INITIAL_WINDOW ((uint32_t)256 * 1024) /* credit each way when a stream is established */
#define EGRESS_MAX_WINDOW ((uint32_t)16 * 1024 * 1024) /* unused credit per stream and direction */

/* One decoded frame. data points into the caller's payload (DATA, OPEN_REFUSED's reason). */
struct egress_frame {
	uint8_t type;
	uint32_t id;
	const uint8_t *data;
	size_t len;
	uint32_t credit; /* WINDOW */
	uint8_t reason; /* CLOSE: enum egress_close */
};

/* True when type may travel in direction dir. */
bool egress_type_allowed(enum egress_dir dir, uint8_t type);

/*
 * Decode one frame's payload that travelled in direction dir: -EPROTO for a
 * type that does not go that way (or is unknown), -EBADMSG for a payload that
 * breaks its type's layout or value rule, -E2BIG past a cap. On success *ret
 * is written; its data points into p.
 */
_wur_ int egress_decode(enum egress_dir dir, uint8_t type, const uint8_t *p, size_t n, struct egress_frame *ret);

/* Append f as one frame to out (all or nothing); -EINVAL when f breaks a rule egress_decode checks. */
_wur_ int egress_encode(const struct egress_frame *f, struct buf *out);

/* Encoders per frame type (all or nothing; -EINVAL for a value the decoder would refuse). */
_wur_ int egress_encode_open(struct buf *out, uint32_t id);
_wur_ int egress_encode_open_ok(struct buf *out, uint32_t id);
_wur_ int egress_encode_open_refused(struct buf *out, uint32_t id, const char *reason);
_wur_ int egress_encode_data(struct buf *out, uint32_t id, const void *p, size_t n);
_wur_ int egress_encode_window(struct buf *out, uint32_t id, uint32_t credit);
_wur_ int egress_encode_fin(struct buf *out, uint32_t id);
_wur_ int egress_encode_close(struct buf *out, uint32_t id, enum egress_close reason);

/* ---- the tracker ---- */

enum egress_stream_flags {
	EGRESS_S_ESTABLISHED = 1 << 0, /* OPEN_OK seen */
	EGRESS_S_FIN_GUEST = 1 << 1, /* the guest sent FIN */
	EGRESS_S_FIN_HOST = 1 << 2,
	EGRESS_S_CLOSE_GUEST = 1 << 3, /* the guest sent CLOSE */
	EGRESS_S_CLOSE_HOST = 1 << 4,
};

struct egress_stream {
	uint32_t id;
	uint8_t flags; /* enum egress_stream_flags */
	uint32_t credit[2]; /* DATA bytes the side (enum egress_dir) may still send */
};

/* Fixed size (about 3 KiB): callers keep it inline, nothing is allocated. */
struct egress_mux {
	enum egress_dir self; /* the end that runs it: frames with dir == self are sent, the others received */
	size_t n;
	struct egress_stream s[EGRESS_MAX_STREAMS];
};

/* self: EGRESS_FROM_GUEST in the guest's forwarder, EGRESS_FROM_HOST in the supervisor. */
void egress_mux_init(struct egress_mux *mux, enum egress_dir self);

/*
 * May f, travelling in direction dir, go now? 0, or -EPROTO with *ret_why
 * naming the rule that refused it (a static string an agent or a person can
 * read). Checks the stream rules only: decode (or build) f with the codec first.
 */
_wur_ int egress_mux_check(const struct egress_mux *mux, enum egress_dir dir, const struct egress_frame *f,
			   const char **ret_why);

/* egress_mux_check, then the state change f makes. A refused frame changes nothing. */
_wur_ int egress_mux_apply(struct egress_mux *mux, enum egress_dir dir, const struct egress_frame *f,
			   const char **ret_why);

/*
 * Decode a frame payload that arrived from dir and apply it: what each end's
 * reader calls. -EPROTO/-EBADMSG/-E2BIG: the peer broke the protocol (*ret_why
 * says how).
 */
_wur_ int egress_mux_receive(struct egress_mux *mux, enum egress_dir dir, uint8_t type, const uint8_t *p, size_t n,
			     struct egress_frame *ret, const char **ret_why);

/* The stream with this id that is not yet closed by both sides, or NULL. */
const struct egress_stream *egress_mux_find(const struct egress_mux *mux, uint32_t id);

#endif
