/* SPDX-License-Identifier: Apache-2.0 */
/* Run tokens (src/signer/token.c): bound to run, uid and time, unforgeable without the key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "signer/token.h"

#include "banned.h"

static const uint8_t key[32] = { 1, 2, 3 };
static const uint8_t other_key[32] = { 9 };

static void test_token(void **state)
{
	char *t = NULL;
	time_t now = 1700000000;

	assert_int_equal(token_mint(key, "run-1", 1000, now, &t), 0);
	assert_int_equal(token_check(key, t, "run-1", 1000, now), 0);
	assert_int_equal(token_check(key, t, "run-1", 1000, now + TOKEN_LIFETIME_S - 1), 0);
	assert_int_equal(token_check(key, t, "run-1", 1000, now + TOKEN_LIFETIME_S), -EACCES);
	assert_int_equal(token_check(key, t, "run-2", 1000, now), -EACCES);
	assert_int_equal(token_check(key, t, "run-1", 1001, now), -EACCES);
	assert_int_equal(token_check(other_key, t, "run-1", 1000, now), -EACCES);
	/* Flip one character of the payload, then of the MAC. */
	t[3] = t[3] == 'A' ? 'B' : 'A';
	assert_int_equal(token_check(key, t, "run-1", 1000, now), -EACCES);
	t[3] = t[3] == 'A' ? 'B' : 'A';
	t[strlen(t) - 2] = t[strlen(t) - 2] == 'A' ? 'B' : 'A';
	assert_int_equal(token_check(key, t, "run-1", 1000, now), -EACCES);
	free(t);
	assert_int_equal(token_check(key, "", "run-1", 1000, now), -EACCES);
	assert_int_equal(token_check(key, "nodot", "run-1", 1000, now), -EACCES);
}

static void test_token_max(void **state)
{
	char *t = malloc(TOKEN_MAX_LEN + 2);
	assert_non_null(t);
	memset(t, 'A', TOKEN_MAX_LEN + 1);
	t[10] = '.';
	t[TOKEN_MAX_LEN + 1] = '\0';
	assert_int_equal(token_check(key, t, "run-1", 1000, 0), -EACCES);
	free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_token),
		cmocka_unit_test(test_token_max),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
