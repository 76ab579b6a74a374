/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "banned.h"
#include "io.h"

/* Write n bytes into a pipe and read them back with io_read_all into a buffer of max bytes. */
static int roundtrip(size_t n, size_t max, unsigned flags, size_t *ret_len)
{
	int fds[2];
	struct buf b;
	uint8_t *data = malloc(n ? n : 1);
	int r;

	assert_non_null(data);
	for (size_t i = 0; i < n; i++) {
		data[i] = (uint8_t)(i * 7);
	}
	assert_int_equal(pipe(fds), 0);
	if (fork() == 0) {
		close(fds[0]);
		_exit(io_write_all(fds[1], data, n) == 0 ? 0 : 1);
	}
	close(fds[1]);
	assert_int_equal(buf_init(&b, max, flags), 0);
	r = io_read_all(fds[0], &b);
	close(fds[0]);
	(void)wait(NULL);
	if (r == 0) {
		assert_int_equal(buf_len(&b), n);
		assert_memory_equal(buf_ptr(&b), data, n);
	}
	*ret_len = buf_len(&b);
	buf_release(&b);
	free(data);
	return r;
}

static void test_read_all_caps(void **state)
{
	size_t len;
	(void)state;
	assert_int_equal(roundtrip(0, 16, 0, &len), 0);
	assert_int_equal(roundtrip(100000, 100000, 0, &len), 0);
	assert_int_equal(roundtrip(100000, 100000, BUF_SECRET, &len), 0);
	/* One past the buffer's cap: refused, and never more than the cap is held. */
	assert_int_equal(roundtrip(100001, 100000, 0, &len), -E2BIG);
	assert_true(len <= 100000);
}

static void test_write_all_closed_socket(void **state)
{
	int sv[2];
	char x[4096] = { 0 };
	(void)state;
	/* A peer that went away: an error, not a SIGPIPE that kills the process. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	close(sv[1]);
	assert_int_equal(io_write_all(sv[0], x, sizeof(x)), -EPIPE);
	close(sv[0]);
	assert_int_equal(io_write_all(-1, x, 1), -EBADF);
}

static void test_write_file_atomic(void **state)
{
	char dir[] = "/tmp/tkbox-test-io-XXXXXX", path[64], tmp[80];
	struct buf b;
	int fd;
	(void)state;

	assert_non_null(mkdtemp(dir));
	(void)snprintf(path, sizeof(path), "%s/f", dir);
	(void)snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	assert_int_equal(io_write_file_atomic(path, "one", 3, 0600), 0);
	/* A stale temporary file (here a symlink) is replaced, never followed. */
	assert_int_equal(symlink("/etc/passwd", tmp), 0);
	assert_int_equal(io_write_file_atomic(path, "two!", 4, 0600), 0);
	assert_int_equal(access(tmp, F_OK), -1);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(buf_init(&b, 16, 0), 0);
	assert_int_equal(io_read_all(fd, &b), 0);
	close(fd);
	assert_int_equal(buf_len(&b), 4);
	assert_memory_equal(buf_ptr(&b), "two!", 4);
	buf_release(&b);
	/* A directory that does not exist: an error, nothing written. */
	(void)snprintf(path, sizeof(path), "%s/missing/f", dir);
	assert_int_equal(io_write_file_atomic(path, "x", 1, 0600), -ENOENT);
	(void)snprintf(path, sizeof(path), "%s/f", dir);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_all_caps),
		cmocka_unit_test(test_write_all_closed_socket),
		cmocka_unit_test(test_write_file_atomic),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
