/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "daemon/obsq.h"

static json_t *numbered(size_t i)
{
	json_t *v = json_pack("{s:I}", "n", (json_int_t)i);
	assert_non_null(v);
	return v;
}

static size_t number_of(const struct obsq_item *it)
{
	return (size_t)json_integer_value(json_object_get(it->data, "n"));
}

/* OBSQ_MAX entries fit; the one past it is refused with -ENOSPC and FIFO order survives. */
static void test_cap_one_past(void **state)
{
	struct obsq q;
	json_t *extra;

	(void)state;
	assert_int_equal(obsq_init(&q, OBSQ_MAX), 0);
	for (size_t i = 0; i < OBSQ_MAX; i++) {
		assert_int_equal(obsq_push(&q, "tkbox.egress", numbered(i)), 0);
	}
	assert_int_equal(obsq_len(&q), OBSQ_MAX);
	extra = numbered(OBSQ_MAX);
	json_incref(extra);
	assert_int_equal(obsq_push(&q, "tkbox.egress", extra), -ENOSPC);
	/* The queue dropped its reference to the refused entry: ours is the last one. */
	assert_int_equal(extra->refcount, 1);
	json_decref(extra);
	assert_int_equal(obsq_len(&q), OBSQ_MAX);
	for (size_t i = 0; i < OBSQ_MAX; i++) {
		const struct obsq_item *it = obsq_peek(&q);
		assert_non_null(it);
		assert_string_equal(it->kind, "tkbox.egress");
		assert_int_equal(number_of(it), i);
		obsq_pop(&q);
	}
	assert_null(obsq_peek(&q));
	assert_int_equal(obsq_len(&q), 0);
	obsq_release(&q);
}

/* A cap past OBSQ_MAX (or zero) is refused. */
static void test_init_caps(void **state)
{
	struct obsq q;

	(void)state;
	assert_int_equal(obsq_init(&q, OBSQ_MAX + 1), -EINVAL);
	assert_int_equal(obsq_init(&q, 0), -EINVAL);
	assert_int_equal(obsq_init(&q, 1), 0);
	obsq_release(&q);
}

/* Interleaved pushes and pops wrap around the ring and keep FIFO order. */
static void test_fifo_wraps(void **state)
{
	struct obsq q;
	size_t next_in = 0, next_out = 0;

	(void)state;
	assert_int_equal(obsq_init(&q, 3), 0);
	for (size_t round = 0; round < 10; round++) {
		while (obsq_len(&q) < 3) {
			assert_int_equal(obsq_push(&q, "tkbox.box", numbered(next_in++)), 0);
		}
		assert_int_equal(obsq_push(&q, "tkbox.box", numbered(999)), -ENOSPC);
		for (size_t k = 0; k < 2; k++) {
			assert_int_equal(number_of(obsq_peek(&q)), next_out++);
			obsq_pop(&q);
		}
	}
	assert_int_equal(obsq_clear(&q), 1);
	assert_null(obsq_peek(&q));
	obsq_pop(&q); /* no-op when empty */
	assert_int_equal(obsq_push(&q, "tkbox.box", numbered(7)), 0);
	assert_int_equal(number_of(obsq_peek(&q)), 7);
	obsq_release(&q); /* frees what is queued */
}

/* Bad arguments take the reference too (no leak for the caller), and a zeroed queue is full, not a crash. */
static void test_bad_args(void **state)
{
	struct obsq q = { 0 };

	(void)state;
	assert_int_equal(obsq_push(&q, "tkbox.box", numbered(1)), -ENOSPC);
	assert_int_equal(obsq_init(&q, 2), 0);
	assert_int_equal(obsq_push(&q, NULL, numbered(1)), -EINVAL);
	assert_int_equal(obsq_push(&q, "tkbox.box", NULL), -EINVAL);
	assert_int_equal(obsq_len(&q), 0);
	obsq_release(&q);
	obsq_release(&q); /* twice is fine */
	obsq_release(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cap_one_past),
		cmocka_unit_test(test_init_caps),
		cmocka_unit_test(test_fifo_wraps),
		cmocka_unit_test(test_bad_args),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
