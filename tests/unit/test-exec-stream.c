/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "exec-stream.h"

static int dec(enum exs_dir dir, uint8_t type, const void *p, size_t n, struct exs_frame *f)
{
	return exs_decode(dir, type, p, n, f);
}

/* Encode f, take the frame apart, decode it: the same frame comes back. */
static void roundtrip(enum exs_dir dir, const struct exs_frame *f)
{
	struct buf b;
	struct exs_frame g;
	const uint8_t *p;
	size_t n;
	uint8_t type;

	assert_int_equal(buf_init(&b, EXS_MAX_FRAME + FRAME_HEADER_SIZE, 0), 0);
	assert_int_equal(exs_encode(f, &b), 0);
	assert_int_equal(frame_decode_one(buf_ptr(&b), buf_len(&b), EXS_MAX_FRAME, &type, &p, &n), 0);
	assert_int_equal(type, f->type);
	assert_int_equal(dec(dir, type, p, n, &g), 0);
	assert_int_equal(g.len, f->len);
	if (f->len) {
		assert_memory_equal(g.data, f->data, f->len);
	}
	assert_int_equal(g.signal, f->signal);
	assert_int_equal(g.exit.kind, f->exit.kind);
	assert_int_equal(g.exit.value, f->exit.value);
	assert_int_equal(g.credit, f->credit);
	buf_release(&b);
}

static void test_roundtrip(void **state)
{
	static uint8_t data[EXS_MAX_DATA];
	(void)state;

	roundtrip(EXS_FROM_CLIENT, &(struct exs_frame){ .type = EXS_STDIN, .data = data, .len = EXS_MAX_DATA });
	roundtrip(EXS_FROM_CLIENT, &(struct exs_frame){ .type = EXS_STDIN_EOF });
	roundtrip(EXS_FROM_CLIENT, &(struct exs_frame){ .type = EXS_SIGNAL, .signal = SIGINT });
	roundtrip(EXS_FROM_SUPERVISOR, &(struct exs_frame){ .type = EXS_STARTED });
	roundtrip(EXS_FROM_SUPERVISOR, &(struct exs_frame){ .type = EXS_STDOUT, .data = data, .len = 1 });
	roundtrip(EXS_FROM_SUPERVISOR, &(struct exs_frame){ .type = EXS_STDERR, .data = data, .len = 7 });
	roundtrip(EXS_FROM_SUPERVISOR,
		  &(struct exs_frame){ .type = EXS_EXIT, .exit = { .kind = EXIT_KIND_EXITED, .value = 255 } });
	roundtrip(EXS_FROM_SUPERVISOR,
		  &(struct exs_frame){ .type = EXS_EXIT, .exit = { .kind = EXIT_KIND_SIGNALED, .value = SIGKILL } });
	roundtrip(EXS_FROM_SUPERVISOR,
		  &(struct exs_frame){ .type = EXS_ERROR, .data = (const uint8_t *)"x", .len = 1 });
	roundtrip(EXS_FROM_SUPERVISOR, &(struct exs_frame){ .type = EXS_CREDIT, .credit = EXS_STDIN_WINDOW });
}

static void test_sizes(void **state)
{
	static uint8_t big[EXS_MAX_DATA + 1];
	static const uint8_t exit_ok[5] = { 0, 0, 0, 0, 3 };
	static const uint8_t exit_sig[5] = { 1, 0, 0, 0, 9 };
	struct exs_frame f;
	uint8_t b[8] = { 0 };
	(void)state;

	/* EXIT: exactly 5 bytes, a kind of 0 or 1, a code 0..255 or a signal 1..64. */
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_EXIT, exit_ok, 5, &f), 0);
	assert_int_equal(f.exit.kind, EXIT_KIND_EXITED);
	assert_int_equal(f.exit.value, 3);
	assert_int_equal(exit_status_shell(&f.exit), 3);
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_EXIT, exit_sig, 5, &f), 0);
	assert_int_equal(exit_status_shell(&f.exit), 137);
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_EXIT, exit_ok, 4, &f), -EBADMSG);
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_EXIT, b, 6, &f), -EBADMSG);
	memcpy(b, exit_ok, 5);
	b[0] = 2;
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_EXIT, b, 5, &f), -EBADMSG);
	memcpy(b, (const uint8_t[]){ 0, 0, 0, 1, 0 }, 5); /* exit 256 */
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_EXIT, b, 5, &f), -EBADMSG);
	memcpy(b, (const uint8_t[]){ 1, 0, 0, 0, 0 }, 5); /* signal 0 */
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_EXIT, b, 5, &f), -EBADMSG);
	memcpy(b, (const uint8_t[]){ 1, 0, 0, 0, 65 }, 5); /* signal 65 */
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_EXIT, b, 5, &f), -EBADMSG);
	/* SIGNAL: 1 byte from the allowed set. */
	b[0] = SIGTERM;
	assert_int_equal(dec(EXS_FROM_CLIENT, EXS_SIGNAL, b, 1, &f), 0);
	assert_int_equal(f.signal, SIGTERM);
	b[0] = SIGSTOP;
	assert_int_equal(dec(EXS_FROM_CLIENT, EXS_SIGNAL, b, 1, &f), -EBADMSG);
	b[0] = SIGINT;
	assert_int_equal(dec(EXS_FROM_CLIENT, EXS_SIGNAL, b, 2, &f), -EBADMSG);
	assert_int_equal(dec(EXS_FROM_CLIENT, EXS_SIGNAL, b, 0, &f), -EBADMSG);
	/* CREDIT: 4 bytes, 1..EXS_STDIN_WINDOW. */
	memcpy(b, (const uint8_t[]){ 0, 4, 0, 0 }, 4);
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_CREDIT, b, 4, &f), 0);
	assert_int_equal(f.credit, EXS_STDIN_WINDOW);
	memcpy(b, (const uint8_t[]){ 0, 4, 0, 1 }, 4);
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_CREDIT, b, 4, &f), -EBADMSG);
	memset(b, 0, 4);
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_CREDIT, b, 4, &f), -EBADMSG);
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_CREDIT, b, 3, &f), -EBADMSG);
	/* Data: 1..EXS_MAX_DATA; the empty ones are empty. */
	assert_int_equal(dec(EXS_FROM_CLIENT, EXS_STDIN, big, EXS_MAX_DATA, &f), 0);
	assert_int_equal(dec(EXS_FROM_CLIENT, EXS_STDIN, big, EXS_MAX_DATA + 1, &f), -E2BIG);
	assert_int_equal(dec(EXS_FROM_CLIENT, EXS_STDIN, big, 0, &f), -EBADMSG);
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_STDOUT, big, EXS_MAX_DATA + 1, &f), -E2BIG);
	assert_int_equal(dec(EXS_FROM_CLIENT, EXS_STDIN_EOF, big, 1, &f), -EBADMSG);
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_STARTED, big, 1, &f), -EBADMSG);
	/* ERROR: 1..EXS_MAX_ERROR bytes, no NUL. */
	memset(big, 'e', sizeof(big));
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_ERROR, big, EXS_MAX_ERROR, &f), 0);
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_ERROR, big, EXS_MAX_ERROR + 1, &f), -E2BIG);
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_ERROR, (const uint8_t *)"a\0b", 3, &f), -EBADMSG);
	/* Each type goes one way only; unknown types go nowhere. */
	assert_int_equal(dec(EXS_FROM_CLIENT, EXS_STDOUT, big, 1, &f), -EPROTO);
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, EXS_STDIN, big, 1, &f), -EPROTO);
	assert_int_equal(dec(EXS_FROM_SUPERVISOR, 0x87, big, 1, &f), -EPROTO);
	assert_int_equal(dec(EXS_FROM_CLIENT, 0x00, big, 0, &f), -EPROTO);
}

/* The encoder refuses what the decoder would refuse. */
static void test_encoder_refuses(void **state)
{
	struct buf b;
	(void)state;

	assert_int_equal(buf_init(&b, 1024, 0), 0);
	assert_int_equal(exs_encode_exit(&b, &(struct exit_status){ .kind = EXIT_KIND_EXITED, .value = 256 }), -EINVAL);
	assert_int_equal(exs_encode_exit(&b, &(struct exit_status){ .kind = EXIT_KIND_SIGNALED, .value = 0 }), -EINVAL);
	assert_int_equal(exs_encode_signal(&b, SIGSTOP), -EINVAL);
	assert_int_equal(exs_encode_credit(&b, 0), -EINVAL);
	assert_int_equal(exs_encode_bytes(&b, EXS_STDOUT, "", 0), -EINVAL);
	assert_int_equal(exs_encode_bytes(&b, EXS_EXIT, "12345", 5), -EINVAL);
	assert_int_equal(buf_len(&b), 0);
	assert_int_equal(exs_encode_signal(&b, SIGKILL), 0);
	assert_int_equal(buf_len(&b), FRAME_HEADER_SIZE + 1);
	buf_release(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_encoder_refuses),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
