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

static void test_roundtrip_bytewise(void **state)
{
	struct buf enc, out;
	struct frame_decoder d;
	uint8_t type = 0;
	size_t used;
	int r = 0;
	(void)state;

	assert_int_equal(buf_init(&enc, 4096, 0), 0);
	assert_int_equal(buf_init(&out, 4096, 0), 0);
	assert_int_equal(frame_encode(&enc, 7, "hello", 5), 0);
	assert_int_equal(frame_encode(&enc, 9, "", 0), 0);
	assert_int_equal(buf_len(&enc), 2 * FRAME_HEADER_SIZE + 5);
	assert_int_equal(frame_decoder_init(&d, FRAME_MAX_PAYLOAD), 0);

	/* Feed one byte at a time: the first frame completes exactly at its last byte. */
	size_t i = 0;
	for (; i < FRAME_HEADER_SIZE + 5; i++) {
		r = frame_decoder_feed(&d, buf_ptr(&enc) + i, 1, &used);
		assert_int_equal(used, 1);
		assert_int_equal(r, i == FRAME_HEADER_SIZE + 4 ? 1 : 0);
	}
	assert_int_equal(frame_decoder_take(&d, &type, &out), 0);
	assert_int_equal(type, 7);
	assert_int_equal(buf_len(&out), 5);
	assert_memory_equal(buf_ptr(&out), "hello", 5);
	assert_true(frame_decoder_idle(&d));
	buf_reset(&out);

	/* The empty frame completes on its header. */
	r = frame_decoder_feed(&d, buf_ptr(&enc) + i, buf_len(&enc) - i, &used);
	assert_int_equal(r, 1);
	assert_int_equal(used, FRAME_HEADER_SIZE);
	assert_int_equal(frame_decoder_take(&d, &type, &out), 0);
	assert_int_equal(type, 9);
	assert_int_equal(buf_len(&out), 0);
	assert_int_equal(frame_decoder_take(&d, &type, &out), -EAGAIN);

	frame_decoder_release(&d);
	buf_release(&enc);
	buf_release(&out);
}

static void test_two_frames_one_feed(void **state)
{
	struct buf enc, out;
	struct frame_decoder d;
	uint8_t type;
	size_t used, off = 0;
	(void)state;

	assert_int_equal(buf_init(&enc, 4096, 0), 0);
	assert_int_equal(buf_init(&out, 4096, 0), 0);
	assert_int_equal(frame_encode(&enc, 1, "ab", 2), 0);
	assert_int_equal(frame_encode(&enc, 2, "cde", 3), 0);
	assert_int_equal(frame_decoder_init(&d, 16), 0);
	assert_int_equal(frame_decoder_feed(&d, buf_ptr(&enc), buf_len(&enc), &used), 1);
	assert_int_equal(used, FRAME_HEADER_SIZE + 2);
	off += used;
	/* Feeding again before take consumes nothing. */
	assert_int_equal(frame_decoder_feed(&d, buf_ptr(&enc) + off, buf_len(&enc) - off, &used), 1);
	assert_int_equal(used, 0);
	assert_int_equal(frame_decoder_take(&d, &type, &out), 0);
	assert_int_equal(type, 1);
	assert_int_equal(frame_decoder_feed(&d, buf_ptr(&enc) + off, buf_len(&enc) - off, &used), 1);
	assert_int_equal(used, FRAME_HEADER_SIZE + 3);
	buf_reset(&out);
	assert_int_equal(frame_decoder_take(&d, &type, &out), 0);
	assert_int_equal(type, 2);
	assert_memory_equal(buf_ptr(&out), "cde", 3);
	frame_decoder_release(&d);
	buf_release(&enc);
	buf_release(&out);
}

static void test_oversized_header_refused(void **state)
{
	struct frame_decoder d;
	size_t used;
	/* 1 MiB + 1 announced */
	static const uint8_t hdr[] = { 1, 0x00, 0x10, 0x00, 0x01 };
	static const uint8_t hdr_max[] = { 1, 0x00, 0x10, 0x00, 0x00 };
	(void)state;

	assert_int_equal(frame_decoder_init(&d, FRAME_MAX_PAYLOAD), 0);
	assert_int_equal(frame_decoder_feed(&d, hdr_max, sizeof(hdr_max), &used), 0);
	assert_int_equal(used, 5);
	/* Announcing 1 MiB commits no memory until bytes arrive. */
	assert_true(d.payload.alloc == 0);
	frame_decoder_release(&d);

	assert_int_equal(frame_decoder_init(&d, FRAME_MAX_PAYLOAD), 0);
	assert_int_equal(frame_decoder_feed(&d, hdr, sizeof(hdr), &used), -E2BIG);
	assert_int_equal(frame_decoder_feed(&d, hdr, 1, &used), -EPROTO);
	assert_false(frame_decoder_idle(&d));
	frame_decoder_release(&d);

	/* A smaller per-channel cap works the same way: one past it is refused. */
	static const uint8_t hdr17[] = { 1, 0, 0, 0, 17 };
	static const uint8_t hdr16[] = { 1, 0, 0, 0, 16 };
	assert_int_equal(frame_decoder_init(&d, 16), 0);
	assert_int_equal(frame_decoder_feed(&d, hdr16, 5, &used), 0);
	frame_decoder_release(&d);
	assert_int_equal(frame_decoder_init(&d, 16), 0);
	assert_int_equal(frame_decoder_feed(&d, hdr17, 5, &used), -E2BIG);
	frame_decoder_release(&d);

	assert_int_equal(frame_decoder_init(&d, FRAME_MAX_PAYLOAD + 1), -EINVAL);
	assert_int_equal(frame_decoder_init(&d, 0), -EINVAL);
}

static void test_encode_caps(void **state)
{
	struct buf out;
	uint8_t *big;
	(void)state;

	big = calloc(1, FRAME_MAX_PAYLOAD + 1);
	assert_non_null(big);
	assert_int_equal(buf_init(&out, FRAME_MAX_PAYLOAD + FRAME_HEADER_SIZE + 1, 0), 0);
	assert_int_equal(frame_encode(&out, 1, big, FRAME_MAX_PAYLOAD + 1), -E2BIG);
	assert_int_equal(buf_len(&out), 0);
	assert_int_equal(frame_encode(&out, 1, big, FRAME_MAX_PAYLOAD), 0);
	assert_int_equal(buf_len(&out), FRAME_MAX_PAYLOAD + FRAME_HEADER_SIZE);
	/* The output buffer is full: nothing partial is written. */
	assert_int_equal(frame_encode(&out, 1, big, 1), -E2BIG);
	assert_int_equal(buf_len(&out), FRAME_MAX_PAYLOAD + FRAME_HEADER_SIZE);
	buf_release(&out);
	free(big);
}

static void test_decode_one(void **state)
{
	uint8_t type;
	const uint8_t *p;
	size_t n;
	static const uint8_t ok[] = { 3, 0, 0, 0, 2, 'h', 'i' };
	static const uint8_t trailing[] = { 3, 0, 0, 0, 1, 'h', 'i' };
	static const uint8_t short_[] = { 3, 0, 0, 0, 3, 'h', 'i' };
	(void)state;

	assert_int_equal(frame_decode_one(ok, sizeof(ok), 16, &type, &p, &n), 0);
	assert_int_equal(type, 3);
	assert_int_equal(n, 2);
	assert_memory_equal(p, "hi", 2);
	assert_int_equal(frame_decode_one(trailing, sizeof(trailing), 16, &type, &p, &n), -EBADMSG);
	assert_int_equal(frame_decode_one(short_, sizeof(short_), 16, &type, &p, &n), -ENODATA);
	assert_int_equal(frame_decode_one(ok, sizeof(ok), 1, &type, &p, &n), -E2BIG);
	assert_int_equal(frame_decode_one(ok, 4, 16, &type, &p, &n), -ENODATA);
}

static void test_large_roundtrip_random_splits(void **state)
{
	struct buf enc, out;
	struct frame_decoder d;
	uint8_t *payload, type;
	size_t off = 0, used;
	unsigned seed = 12345;
	int frames = 0;
	(void)state;

	payload = malloc(FRAME_MAX_PAYLOAD);
	assert_non_null(payload);
	for (size_t i = 0; i < FRAME_MAX_PAYLOAD; i++) {
		payload[i] = (uint8_t)(i * 31 + 7);
	}
	assert_int_equal(buf_init(&enc, 3 * (FRAME_MAX_PAYLOAD + FRAME_HEADER_SIZE), 0), 0);
	assert_int_equal(buf_init(&out, FRAME_MAX_PAYLOAD, 0), 0);
	assert_int_equal(frame_encode(&enc, 1, payload, FRAME_MAX_PAYLOAD), 0);
	assert_int_equal(frame_encode(&enc, 2, payload, 1000), 0);
	assert_int_equal(frame_encode(&enc, 3, payload, FRAME_MAX_PAYLOAD), 0);
	assert_int_equal(frame_decoder_init(&d, FRAME_MAX_PAYLOAD), 0);
	while (off < buf_len(&enc)) {
		size_t chunk;
		seed = seed * 1103515245u + 12345u;
		chunk = MIN((size_t)(seed % 70000) + 1, buf_len(&enc) - off);
		int r = frame_decoder_feed(&d, buf_ptr(&enc) + off, chunk, &used);
		assert_true(r >= 0);
		off += used;
		if (r == 1) {
			buf_reset(&out);
			assert_int_equal(frame_decoder_take(&d, &type, &out), 0);
			frames++;
			assert_int_equal(type, frames);
			assert_int_equal(buf_len(&out), frames == 2 ? 1000 : FRAME_MAX_PAYLOAD);
			assert_memory_equal(buf_ptr(&out), payload, buf_len(&out));
		}
	}
	assert_int_equal(frames, 3);
	assert_true(frame_decoder_idle(&d));
	frame_decoder_release(&d);
	buf_release(&enc);
	buf_release(&out);
	free(payload);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_bytewise),
		cmocka_unit_test(test_two_frames_one_feed),
		cmocka_unit_test(test_oversized_header_refused),
		cmocka_unit_test(test_encode_caps),
		cmocka_unit_test(test_decode_one),
		cmocka_unit_test(test_large_roundtrip_random_splits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
