/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "log.h"

static void test_quote_escapes(void **state)
{
	char out[LOG_QUOTE_BUFSIZE];
	(void)state;
	assert_string_equal(log_quote("ab\"c\\\n\x01\xff", 8, out), "\"ab\\\"c\\\\\\x0a\\x01\\xff\"");
	assert_string_equal(log_quote("", 0, out), "\"\"");
}

static void test_quote_cap(void **state)
{
	char in[LOG_QUOTE_MAX + 1], out[LOG_QUOTE_BUFSIZE];
	(void)state;
	memset(in, 'a', sizeof(in));
	/* Exactly at the cap: no marker. One past: cut with "...". */
	log_quote(in, LOG_QUOTE_MAX, out);
	assert_int_equal(strlen(out), LOG_QUOTE_MAX + 2);
	log_quote(in, LOG_QUOTE_MAX + 1, out);
	assert_int_equal(strlen(out), LOG_QUOTE_MAX + 5);
	assert_string_equal(out + LOG_QUOTE_MAX + 2, "...");
	/* The worst case (every byte escaped) fits the buffer. */
	memset(in, 0x01, sizeof(in));
	log_quote(in, sizeof(in), out);
	assert_true(strlen(out) < LOG_QUOTE_BUFSIZE);
}

static void test_ratelimit(void **state)
{
	struct log_ratelimit rl = LOG_RATELIMIT_INIT(1000, 3);
	unsigned sup = 99;
	(void)state;
	assert_true(log_ratelimit_ok(&rl, 5000, &sup));
	assert_int_equal(sup, 0);
	assert_true(log_ratelimit_ok(&rl, 5001, &sup));
	assert_true(log_ratelimit_ok(&rl, 5002, &sup));
	/* burst + 1 in the same window is suppressed */
	assert_false(log_ratelimit_ok(&rl, 5003, &sup));
	assert_false(log_ratelimit_ok(&rl, 5999, &sup));
	/* next window reports how many were dropped */
	assert_true(log_ratelimit_ok(&rl, 6000, &sup));
	assert_int_equal(sup, 2);
}

static void test_emit_levels(void **state)
{
	int fds[2];
	char got[512] = { 0 };
	ssize_t n;
	(void)state;
	assert_int_equal(pipe(fds), 0);
	log_set_fd(fds[1]);
	log_set_ident("t");
	log_set_level(LOG_LVL_WARN);
	log_info("hidden %d", 1);
	log_warn("shown %d", 2);
	assert_int_equal(log_error_errno(-EBADMSG, "parse %s", "x"), -EBADMSG);
	close(fds[1]);
	n = read(fds[0], got, sizeof(got) - 1);
	assert_true(n > 0);
	assert_string_equal(got, "t: warning: shown 2\nt: error: parse x: malformed input\n");
	close(fds[0]);
	log_set_fd(STDERR_FILENO);
}

static void test_emit_long_line_cut(void **state)
{
	int fds[2];
	char *big, got[4096] = { 0 };
	ssize_t n;
	(void)state;
	big = malloc(10000);
	assert_non_null(big);
	memset(big, 'z', 9999);
	big[9999] = 0;
	assert_int_equal(pipe(fds), 0);
	log_set_fd(fds[1]);
	log_set_level(LOG_LVL_INFO);
	log_info("%s", big);
	close(fds[1]);
	n = read(fds[0], got, sizeof(got));
	assert_true(n > 0 && n <= 2048);
	assert_int_equal(got[n - 1], '\n');
	close(fds[0]);
	free(big);
	log_set_fd(STDERR_FILENO);
}

static void test_strerror(void **state)
{
	(void)state;
	assert_string_equal(tk_strerror(-E2BIG), "input exceeds a size limit");
	assert_string_equal(tk_strerror(-ENOENT), "No such file or directory");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quote_escapes),	   cmocka_unit_test(test_quote_cap),
		cmocka_unit_test(test_ratelimit),	   cmocka_unit_test(test_emit_levels),
		cmocka_unit_test(test_emit_long_line_cut), cmocka_unit_test(test_strerror),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
