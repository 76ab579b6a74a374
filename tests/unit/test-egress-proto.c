/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "frame.h"
#include "vmm/egress-proto.h"

#define G EGRESS_FROM_GUEST
#define H EGRESS_FROM_HOST

static uint8_t big[EGRESS_MAX_DATA + 1];

/* Encode f, take the frame apart, decode it in direction dir: the same frame and the same bytes come back. */
static void roundtrip(enum egress_dir dir, const struct egress_frame *f, size_t want_payload)
{
	struct buf b, again;
	struct egress_frame g;
	const uint8_t *p;
	size_t n;
	uint8_t type;

	assert_int_equal(buf_init(&b, EGRESS_MAX_FRAME + FRAME_HEADER_SIZE, 0), 0);
	assert_int_equal(buf_init(&again, EGRESS_MAX_FRAME + FRAME_HEADER_SIZE, 0), 0);
	assert_int_equal(egress_encode(f, &b), 0);
	assert_int_equal(buf_len(&b), FRAME_HEADER_SIZE + want_payload);
	assert_int_equal(frame_decode_one(buf_ptr(&b), buf_len(&b), EGRESS_MAX_FRAME, &type, &p, &n), 0);
	assert_int_equal(type, f->type);
	assert_int_equal(n, want_payload);
	assert_int_equal(egress_decode(dir, type, p, n, &g), 0);
	assert_int_equal(g.id, f->id);
	assert_int_equal(g.len, f->len);
	if (f->len) {
		assert_memory_equal(g.data, f->data, f->len);
	}
	assert_int_equal(g.credit, f->credit);
	assert_int_equal(g.reason, f->reason);
	assert_int_equal(egress_encode(&g, &again), 0);
	assert_int_equal(buf_len(&again), buf_len(&b));
	assert_memory_equal(buf_ptr(&again), buf_ptr(&b), buf_len(&b));
	/* The other direction refuses the one-way types. */
	if (f->type == EGRESS_OPEN || f->type == EGRESS_OPEN_OK || f->type == EGRESS_OPEN_REFUSED) {
		assert_int_equal(egress_decode(dir == G ? H : G, type, p, n, &g), -EPROTO);
	}
	buf_release(&again);
	buf_release(&b);
}

static void test_roundtrip(void **state)
{
	(void)state;
	memset(big, 'x', sizeof(big));
	roundtrip(G, &(struct egress_frame){ .type = EGRESS_OPEN, .id = 1 }, 4);
	roundtrip(G, &(struct egress_frame){ .type = EGRESS_OPEN, .id = 0xffffffffu }, 4);
	roundtrip(H, &(struct egress_frame){ .type = EGRESS_OPEN_OK, .id = 7 }, 4);
	roundtrip(
		H,
		&(struct egress_frame){ .type = EGRESS_OPEN_REFUSED, .id = 7, .data = (const uint8_t *)"no", .len = 2 },
		6);
	roundtrip(H,
		  &(struct egress_frame){ .type = EGRESS_OPEN_REFUSED, .id = 7, .data = big, .len = EGRESS_MAX_REASON },
		  4 + EGRESS_MAX_REASON);
	for (int d = G; d <= H; d++) {
		roundtrip(d, &(struct egress_frame){ .type = EGRESS_DATA, .id = 3, .data = big, .len = 1 }, 5);
		roundtrip(d,
			  &(struct egress_frame){ .type = EGRESS_DATA, .id = 3, .data = big, .len = EGRESS_MAX_DATA },
			  4 + EGRESS_MAX_DATA);
		roundtrip(d, &(struct egress_frame){ .type = EGRESS_WINDOW, .id = 3, .credit = 1 }, 8);
		roundtrip(d, &(struct egress_frame){ .type = EGRESS_WINDOW, .id = 3, .credit = EGRESS_MAX_WINDOW }, 8);
		roundtrip(d, &(struct egress_frame){ .type = EGRESS_FIN, .id = 3 }, 4);
		for (uint8_t r = 0; r <= EGRESS_CLOSE_MAX; r++) {
			roundtrip(d, &(struct egress_frame){ .type = EGRESS_CLOSE, .id = 3, .reason = r }, 5);
		}
	}
}

/* The per-type encoders write what egress_encode writes. */
static void test_encoders(void **state)
{
	struct buf b;
	struct egress_frame f;
	const uint8_t *p;
	size_t n;
	uint8_t type;

	(void)state;
	assert_int_equal(buf_init(&b, 64, 0), 0);
	assert_int_equal(egress_encode_open_refused(&b, 9, "stream cap"), 0);
	assert_int_equal(frame_decode_one(buf_ptr(&b), buf_len(&b), EGRESS_MAX_FRAME, &type, &p, &n), 0);
	assert_int_equal(egress_decode(H, type, p, n, &f), 0);
	assert_int_equal(f.id, 9);
	assert_int_equal(f.len, 10);
	assert_memory_equal(f.data, "stream cap", 10);
	buf_reset(&b);
	assert_int_equal(egress_encode_window(&b, 5, 4096), 0);
	assert_int_equal(buf_len(&b), 13);
	assert_memory_equal(buf_ptr(&b), "\x11\0\0\0\x08\0\0\0\x05\0\0\x10\0", 13);
	buf_reset(&b);
	assert_int_equal(egress_encode_close(&b, 5, EGRESS_CLOSE_STOPPING), 0);
	assert_memory_equal(buf_ptr(&b), "\x13\0\0\0\x05\0\0\0\x05\x03", 10);
	buf_reset(&b);
	assert_int_equal(egress_encode_open(&b, 2), 0);
	assert_int_equal(egress_encode_open_ok(&b, 2), 0);
	assert_int_equal(egress_encode_fin(&b, 2), 0);
	assert_int_equal(egress_encode_data(&b, 2, "ab", 2), 0);
	assert_int_equal(buf_len(&b), 9 * 3 + 11);
	/* Values the decoder would refuse are refused by the encoders. */
	buf_reset(&b);
	assert_int_equal(egress_encode_open(&b, 0), -EINVAL);
	assert_int_equal(egress_encode_window(&b, 1, 0), -EINVAL);
	assert_int_equal(egress_encode_window(&b, 1, EGRESS_MAX_WINDOW + 1), -EINVAL);
	assert_int_equal(egress_encode_data(&b, 1, "", 0), -EINVAL);
	assert_int_equal(egress_encode_close(&b, 1, (enum egress_close)(EGRESS_CLOSE_MAX + 1)), -EINVAL);
	assert_int_equal(egress_encode_open_refused(&b, 1, ""), -EINVAL);
	assert_int_equal(egress_encode_open_refused(&b, 1, "line\r\nbreak"), -EINVAL);
	assert_int_equal(egress_encode_open_refused(&b, 1, NULL), -EINVAL);
	assert_int_equal(buf_len(&b), 0);
	/* All or nothing: a frame that does not fit leaves the buffer as it was. */
	assert_int_equal(egress_encode_data(&b, 1, big, 60), -E2BIG);
	assert_int_equal(buf_len(&b), 0);
	buf_release(&b);
}

static int dec(enum egress_dir dir, uint8_t type, const void *p, size_t n)
{
	struct egress_frame f;

	return egress_decode(dir, type, p, n, &f);
}

/* Every layout rule and each cap one past. */
static void test_decode_refusals(void **state)
{
	static uint8_t p[4 + EGRESS_MAX_DATA + 1];

	(void)state;
	memset(p, 'a', sizeof(p));
	p[0] = 0, p[1] = 0, p[2] = 0, p[3] = 1; /* id 1 */
	/* Short payloads: no id. */
	assert_int_equal(dec(G, EGRESS_OPEN, p, 3), -EBADMSG);
	assert_int_equal(dec(G, EGRESS_DATA, p, 0), -EBADMSG);
	/* Exact sizes. */
	assert_int_equal(dec(G, EGRESS_OPEN, p, 5), -EBADMSG);
	assert_int_equal(dec(H, EGRESS_OPEN_OK, p, 5), -EBADMSG);
	assert_int_equal(dec(G, EGRESS_FIN, p, 5), -EBADMSG);
	assert_int_equal(dec(G, EGRESS_WINDOW, p, 7), -EBADMSG);
	assert_int_equal(dec(G, EGRESS_WINDOW, p, 9), -EBADMSG);
	assert_int_equal(dec(G, EGRESS_CLOSE, p, 4), -EBADMSG);
	assert_int_equal(dec(G, EGRESS_CLOSE, p, 6), -EBADMSG);
	/* Empty DATA and an empty reason. */
	assert_int_equal(dec(G, EGRESS_DATA, p, 4), -EBADMSG);
	assert_int_equal(dec(H, EGRESS_OPEN_REFUSED, p, 4), -EBADMSG);
	/* DATA: 64 KiB passes, one more byte does not. */
	assert_int_equal(dec(G, EGRESS_DATA, p, 4 + EGRESS_MAX_DATA), 0);
	assert_int_equal(dec(H, EGRESS_DATA, p, 4 + EGRESS_MAX_DATA + 1), -E2BIG);
	/* Reason: 256 bytes pass, 257 do not; control bytes and 0x7f are refused. */
	assert_int_equal(dec(H, EGRESS_OPEN_REFUSED, p, 4 + EGRESS_MAX_REASON), 0);
	assert_int_equal(dec(H, EGRESS_OPEN_REFUSED, p, 4 + EGRESS_MAX_REASON + 1), -E2BIG);
	p[6] = '\n';
	assert_int_equal(dec(H, EGRESS_OPEN_REFUSED, p, 8), -EBADMSG);
	p[6] = 0x7f;
	assert_int_equal(dec(H, EGRESS_OPEN_REFUSED, p, 8), -EBADMSG);
	p[6] = 0;
	assert_int_equal(dec(H, EGRESS_OPEN_REFUSED, p, 8), -EBADMSG);
	p[6] = 0x80;
	assert_int_equal(dec(H, EGRESS_OPEN_REFUSED, p, 8), -EBADMSG);
	p[6] = 'a';
	/* WINDOW credit: 0 refused, 16 MiB passes, one more refused. */
	memcpy(p + 4, "\0\0\0\0", 4);
	assert_int_equal(dec(G, EGRESS_WINDOW, p, 8), -EBADMSG);
	memcpy(p + 4, "\x01\0\0\0", 4);
	assert_int_equal(dec(G, EGRESS_WINDOW, p, 8), 0);
	memcpy(p + 4, "\x01\0\0\x01", 4);
	assert_int_equal(dec(G, EGRESS_WINDOW, p, 8), -E2BIG);
	memcpy(p + 4, "\xff\xff\xff\xff", 4);
	assert_int_equal(dec(H, EGRESS_WINDOW, p, 8), -E2BIG);
	/* CLOSE reasons are a closed set. */
	p[4] = EGRESS_CLOSE_MAX;
	assert_int_equal(dec(G, EGRESS_CLOSE, p, 5), 0);
	p[4] = EGRESS_CLOSE_MAX + 1;
	assert_int_equal(dec(G, EGRESS_CLOSE, p, 5), -EBADMSG);
	/* Stream id 0. */
	memcpy(p, "\0\0\0\0", 4);
	assert_int_equal(dec(G, EGRESS_OPEN, p, 4), -EBADMSG);
	assert_int_equal(dec(G, EGRESS_FIN, p, 4), -EBADMSG);
	/* Direction and unknown types. */
	p[3] = 1;
	assert_int_equal(dec(H, EGRESS_OPEN, p, 4), -EPROTO);
	assert_int_equal(dec(G, EGRESS_OPEN_OK, p, 4), -EPROTO);
	assert_int_equal(dec(G, EGRESS_OPEN_REFUSED, p, 6), -EPROTO);
	assert_int_equal(dec(G, 0x00, p, 4), -EPROTO);
	assert_int_equal(dec(H, 0x14, p, 4), -EPROTO);
	assert_int_equal(dec(G, 0xff, p, 4), -EPROTO);
}

/* ---- tracker ---- */

static struct egress_frame fr(uint8_t type, uint32_t id)
{
	return (struct egress_frame){ .type = type, .id = id };
}

static struct egress_frame data(uint32_t id, size_t n)
{
	return (struct egress_frame){ .type = EGRESS_DATA, .id = id, .data = big, .len = n };
}

static struct egress_frame window(uint32_t id, uint32_t c)
{
	return (struct egress_frame){ .type = EGRESS_WINDOW, .id = id, .credit = c };
}

static struct egress_frame closef(uint32_t id)
{
	return (struct egress_frame){ .type = EGRESS_CLOSE, .id = id, .reason = EGRESS_CLOSE_DONE };
}

static void ok(struct egress_mux *m, enum egress_dir dir, struct egress_frame f)
{
	const char *why = NULL;
	int r = egress_mux_apply(m, dir, &f, &why);

	if (r < 0) {
		fail_msg("refused: %s", why);
	}
}

/* A refused frame: -EPROTO, the reason contains want, and the tracker is unchanged. */
static void refused(struct egress_mux *m, enum egress_dir dir, struct egress_frame f, const char *want)
{
	static struct egress_mux before;
	const char *why = NULL;

	before = *m;
	assert_int_equal(egress_mux_apply(m, dir, &f, &why), -EPROTO);
	assert_non_null(why);
	if (!strstr(why, want)) {
		fail_msg("reason \"%s\" lacks \"%s\"", why, want);
	}
	assert_memory_equal(&before, m, sizeof(before));
}

static void establish(struct egress_mux *m, uint32_t id)
{
	ok(m, G, fr(EGRESS_OPEN, id));
	ok(m, H, fr(EGRESS_OPEN_OK, id));
}

/* 256 open streams pass, the 257th is refused, and closing one (both sides) makes room. */
static void test_stream_cap(void **state)
{
	static struct egress_mux m;

	(void)state;
	for (int self = G; self <= H; self++) {
		egress_mux_init(&m, self);
		for (uint32_t id = 1; id <= EGRESS_MAX_STREAMS; id++) {
			ok(&m, G, fr(EGRESS_OPEN, id));
		}
		assert_int_equal(m.n, EGRESS_MAX_STREAMS);
		refused(&m, G, fr(EGRESS_OPEN, EGRESS_MAX_STREAMS + 1), "EGRESS_MAX_STREAMS");
		/* A refusal by the host frees its id at once. */
		ok(&m, H, (struct egress_frame){ .type = EGRESS_OPEN_REFUSED, .id = 5, .data = big, .len = 1 });
		ok(&m, G, fr(EGRESS_OPEN, EGRESS_MAX_STREAMS + 1));
		refused(&m, G, fr(EGRESS_OPEN, EGRESS_MAX_STREAMS + 2), "EGRESS_MAX_STREAMS");
		/* One CLOSE does not free a slot; the second does. */
		ok(&m, H, fr(EGRESS_OPEN_OK, 9));
		ok(&m, G, closef(9));
		refused(&m, G, fr(EGRESS_OPEN, EGRESS_MAX_STREAMS + 2), "EGRESS_MAX_STREAMS");
		ok(&m, H, closef(9));
		ok(&m, G, fr(EGRESS_OPEN, EGRESS_MAX_STREAMS + 2));
		assert_int_equal(m.n, EGRESS_MAX_STREAMS);
	}
}

/* An id is reused only after both CLOSEs. */
static void test_id_reuse(void **state)
{
	static struct egress_mux m;

	(void)state;
	egress_mux_init(&m, H);
	ok(&m, G, fr(EGRESS_OPEN, 42));
	refused(&m, G, fr(EGRESS_OPEN, 42), "not closed by both sides");
	ok(&m, H, fr(EGRESS_OPEN_OK, 42));
	refused(&m, G, fr(EGRESS_OPEN, 42), "not closed by both sides");
	ok(&m, H, closef(42));
	refused(&m, G, fr(EGRESS_OPEN, 42), "not closed by both sides");
	ok(&m, G, closef(42));
	assert_null(egress_mux_find(&m, 42));
	ok(&m, G, fr(EGRESS_OPEN, 42));
	assert_non_null(egress_mux_find(&m, 42));
	/* Answers only to a pending OPEN. */
	ok(&m, H, fr(EGRESS_OPEN_OK, 42));
	refused(&m, H, fr(EGRESS_OPEN_OK, 42), "answered already");
	refused(&m, H, (struct egress_frame){ .type = EGRESS_OPEN_REFUSED, .id = 42, .data = big, .len = 1 },
		"answered already");
	refused(&m, H, fr(EGRESS_OPEN_OK, 43), "was not sent");
	/* Direction rules hold in the tracker too. */
	refused(&m, H, fr(EGRESS_OPEN, 44), "does not go this way");
	refused(&m, G, fr(EGRESS_OPEN_OK, 42), "does not go this way");
	refused(&m, G, fr(EGRESS_OPEN, 0), "id 0");
}

/* DATA, WINDOW, FIN and CLOSE on a stream never opened, not yet answered, or closed. */
static void test_unknown_streams(void **state)
{
	static struct egress_mux m;

	(void)state;
	for (int self = G; self <= H; self++) {
		egress_mux_init(&m, self);
		for (int d = G; d <= H; d++) {
			refused(&m, d, data(1, 1), "never opened");
			refused(&m, d, window(1, 1), "never opened");
			refused(&m, d, fr(EGRESS_FIN, 1), "never opened");
			refused(&m, d, closef(1), "never opened");
		}
		ok(&m, G, fr(EGRESS_OPEN, 1));
		for (int d = G; d <= H; d++) {
			refused(&m, d, data(1, 1), "not answered yet");
			refused(&m, d, window(1, 1), "not answered yet");
			refused(&m, d, fr(EGRESS_FIN, 1), "not answered yet");
			refused(&m, d, closef(1), "not answered yet");
		}
		ok(&m, H, fr(EGRESS_OPEN_OK, 1));
		ok(&m, G, closef(1));
		ok(&m, H, closef(1));
		for (int d = G; d <= H; d++) {
			refused(&m, d, data(1, 1), "never opened or is closed");
			refused(&m, d, window(1, 1), "never opened or is closed");
		}
	}
}

/* DATA beyond the granted credit is refused; WINDOW grants more; credit overflow is refused. */
static void test_credit(void **state)
{
	static struct egress_mux m;

	(void)state;
	for (int self = G; self <= H; self++) {
		for (int d = G; d <= H; d++) {
			int peer = d == G ? H : G;

			egress_mux_init(&m, self);
			establish(&m, 3);
			for (uint32_t sent = 0; sent < EGRESS_INITIAL_WINDOW; sent += EGRESS_MAX_DATA) {
				ok(&m, d, data(3, EGRESS_MAX_DATA));
			}
			assert_int_equal(egress_mux_find(&m, 3)->credit[d], 0);
			refused(&m, d, data(3, 1), "beyond the credit");
			ok(&m, peer, window(3, 10));
			refused(&m, d, data(3, 11), "beyond the credit");
			ok(&m, d, data(3, 10));
			/* The unused credit may reach EGRESS_MAX_WINDOW and not one byte more. */
			ok(&m, peer, window(3, EGRESS_MAX_WINDOW - 1));
			ok(&m, peer, window(3, 1));
			refused(&m, peer, window(3, 1), "EGRESS_MAX_WINDOW");
			ok(&m, d, data(3, 1));
			ok(&m, peer, window(3, 1));
			refused(&m, peer, window(3, 1), "EGRESS_MAX_WINDOW");
			/* The other direction's credit is its own. */
			assert_int_equal(egress_mux_find(&m, 3)->credit[peer], EGRESS_INITIAL_WINDOW);
		}
	}
}

/* FIN: no DATA after it, no second FIN; the FIN sender still grants credit and receives. */
static void test_fin(void **state)
{
	static struct egress_mux m;

	(void)state;
	for (int self = G; self <= H; self++) {
		egress_mux_init(&m, self);
		establish(&m, 8);
		ok(&m, G, fr(EGRESS_FIN, 8));
		refused(&m, G, data(8, 1), "after its sender's FIN");
		refused(&m, G, fr(EGRESS_FIN, 8), "second FIN");
		ok(&m, G, window(8, 100));
		ok(&m, H, data(8, 100));
		ok(&m, H, fr(EGRESS_FIN, 8));
		ok(&m, H, closef(8));
		ok(&m, G, closef(8));
		assert_int_equal(m.n, 0);
	}
}

/*
 * CLOSE crossing: a frame the peer sent before it saw our CLOSE is accepted
 * (and dropped by the caller); after the peer's CLOSE arrived, we may send
 * only CLOSE; nothing follows a side's own CLOSE.
 */
static void test_close_crossing(void **state)
{
	static struct egress_mux m;

	(void)state;
	/* The host closes; the guest's DATA and WINDOW cross it. */
	egress_mux_init(&m, H);
	establish(&m, 4);
	ok(&m, H, closef(4));
	ok(&m, G, data(4, 100));
	ok(&m, G, window(4, 100));
	ok(&m, G, fr(EGRESS_FIN, 4));
	refused(&m, G, data(4, 1), "after its sender's FIN");
	refused(&m, H, data(4, 1), "closed already");
	refused(&m, H, window(4, 1), "closed already");
	refused(&m, H, closef(4), "closed already");
	ok(&m, G, closef(4));
	assert_null(egress_mux_find(&m, 4));

	/* The guest's view of the same: after the host's CLOSE it may only answer CLOSE. */
	egress_mux_init(&m, G);
	establish(&m, 4);
	ok(&m, H, closef(4));
	refused(&m, G, data(4, 1), "after the peer's CLOSE");
	refused(&m, G, window(4, 1), "after the peer's CLOSE");
	refused(&m, G, fr(EGRESS_FIN, 4), "after the peer's CLOSE");
	refused(&m, H, data(4, 1), "closed already");
	ok(&m, G, closef(4));
	assert_null(egress_mux_find(&m, 4));

	/* Credit still holds for frames that cross a CLOSE. */
	egress_mux_init(&m, G);
	establish(&m, 6);
	ok(&m, G, closef(6));
	ok(&m, H, data(6, EGRESS_MAX_DATA));
	ok(&m, H, data(6, EGRESS_MAX_DATA));
	ok(&m, H, data(6, EGRESS_MAX_DATA));
	ok(&m, H, data(6, EGRESS_MAX_DATA));
	refused(&m, H, data(6, 1), "beyond the credit");
}

/* The reader's path: decode, then apply; a frame in the end's own direction is refused. */
static void test_receive(void **state)
{
	static struct egress_mux m;
	struct buf b;
	struct egress_frame f;
	const char *why = NULL;
	const uint8_t *p;
	size_t n;
	uint8_t type;

	(void)state;
	egress_mux_init(&m, H);
	assert_int_equal(buf_init(&b, 64, 0), 0);
	assert_int_equal(egress_encode_open(&b, 11), 0);
	assert_int_equal(frame_decode_one(buf_ptr(&b), buf_len(&b), EGRESS_MAX_FRAME, &type, &p, &n), 0);
	assert_int_equal(egress_mux_receive(&m, H, type, p, n, &f, &why), -EPROTO);
	assert_non_null(strstr(why, "direction this end sends"));
	assert_int_equal(egress_mux_receive(&m, G, type, p, n, &f, &why), 0);
	assert_int_equal(f.id, 11);
	assert_int_equal(egress_mux_receive(&m, G, type, p, n, &f, &why), -EPROTO);
	assert_non_null(strstr(why, "not closed by both sides"));
	assert_int_equal(egress_mux_receive(&m, G, type, p, n - 1, &f, &why), -EBADMSG);
	assert_non_null(strstr(why, "layout"));
	assert_int_equal(egress_mux_receive(&m, G, EGRESS_OPEN_OK, p, n, &f, &why), -EPROTO);
	buf_release(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),	cmocka_unit_test(test_encoders),
		cmocka_unit_test(test_decode_refusals), cmocka_unit_test(test_stream_cap),
		cmocka_unit_test(test_id_reuse),	cmocka_unit_test(test_unknown_streams),
		cmocka_unit_test(test_credit),		cmocka_unit_test(test_fin),
		cmocka_unit_test(test_close_crossing),	cmocka_unit_test(test_receive),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
