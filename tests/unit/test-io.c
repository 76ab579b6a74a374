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
#include <sys/stat.h>
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

/* Write n patterned bytes to dir/name. */
static void write_n(const char *dir, const char *name, size_t n)
{
	char path[128];
	uint8_t *data = malloc(n ? n : 1);

	assert_non_null(data);
	for (size_t i = 0; i < n; i++) {
		data[i] = (uint8_t)('a' + i % 26);
	}
	(void)snprintf(path, sizeof(path), "%s/%s", dir, name);
	assert_int_equal(io_write_file_atomic(path, data, n, 0600), 0);
	free(data);
}

static void test_read_file(void **state)
{
	char dir[] = "/tmp/tkbox-test-io-XXXXXX", path[128];
	char *p = NULL;
	size_t n = 0;
	int dfd;
	(void)state;

	assert_non_null(mkdtemp(dir));
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	write_n(dir, "cap", 100000);
	write_n(dir, "over", 100001);
	write_n(dir, "empty", 0);
	/* Exactly the cap: read whole and NUL-terminated, whatever the growth steps. */
	assert_int_equal(io_read_file(dfd, "cap", 100000, 0, &p, &n), 0);
	assert_int_equal(n, 100000);
	assert_int_equal(p[99999], 'a' + 99999 % 26);
	assert_int_equal(p[n], '\0');
	free(p);
	p = NULL;
	/* One past the cap: refused, nothing returned. */
	assert_int_equal(io_read_file(dfd, "over", 100000, 0, &p, &n), -E2BIG);
	assert_null(p);
	/* ... unless the caller wants a prefix: cut at the cap. */
	assert_int_equal(io_read_file(dfd, "over", 100000, IO_READ_PREFIX, &p, &n), 0);
	assert_int_equal(n, 100000);
	free(p);
	p = NULL;
	assert_int_equal(io_read_file(dfd, "empty", 0, IO_READ_REGULAR, &p, NULL), 0);
	assert_string_equal(p, "");
	free(p);
	p = NULL;
	/* A file that says 0 bytes and has more (a /proc file) is read to its end, one past the cap refused. */
	assert_int_equal(io_read_file(AT_FDCWD, "/proc/self/status", 1 << 20, IO_READ_REGULAR, &p, &n), 0);
	assert_true(n > 0 && strstr(p, "Pid:") != NULL);
	free(p);
	p = NULL;
	assert_int_equal(io_read_file(AT_FDCWD, "/proc/self/status", 10, 0, &p, &n), -E2BIG);
	assert_int_equal(io_read_file(AT_FDCWD, "/proc/self/status", 10, IO_READ_PREFIX, &p, &n), 0);
	assert_int_equal(n, 10);
	assert_int_equal(strlen(p), 10);
	free(p);
	p = NULL;
	/* The fd form into a new bounded buffer: the cap, then one past it. */
	{
		struct buf *b = NULL;
		int fd = openat(dfd, "over", O_RDONLY | O_CLOEXEC);
		assert_true(fd >= 0);
		assert_int_equal(io_read_all_new(fd, 100001, BUF_SECRET, &b), 0);
		assert_int_equal(buf_len(b), 100001);
		buf_free(b);
		b = NULL;
		assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
		assert_int_equal(io_read_all_new(fd, 100000, 0, &b), -E2BIG);
		assert_null(b);
		close(fd);
	}
	/* Not a regular file; a symlink with NOFOLLOW; a missing file. */
	assert_int_equal(io_read_file(AT_FDCWD, dir, 10, IO_READ_REGULAR, &p, &n), -EINVAL);
	assert_int_equal(symlinkat("cap", dfd, "link"), 0);
	assert_int_equal(io_read_file(dfd, "link", 100000, IO_READ_NOFOLLOW, &p, &n), -ELOOP);
	assert_int_equal(io_read_file(dfd, "link", 100000, 0, &p, &n), 0);
	free(p);
	p = NULL;
	assert_int_equal(io_read_file(dfd, "missing", 10, 0, &p, &n), -ENOENT);
	assert_null(p);
	(void)snprintf(path, sizeof(path), "rm -rf %s", dir);
	assert_int_equal(system(path), 0);
	close(dfd);
}

static void test_mkdir_p(void **state)
{
	char dir[] = "/tmp/tkbox-test-io-XXXXXX", path[160];
	struct stat st;
	int dfd;
	(void)state;

	assert_non_null(mkdtemp(dir));
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	/* Absolute, with every parent missing, a doubled and a trailing slash. */
	(void)snprintf(path, sizeof(path), "%s/a//b/c/", dir);
	assert_int_equal(io_mkdir_p(AT_FDCWD, path, 0700), 0);
	(void)snprintf(path, sizeof(path), "%s/a/b/c", dir);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0700 & ~0022 & 0777);
	/* Again: everything exists, fine. Relative to a directory fd. */
	assert_int_equal(io_mkdir_p(AT_FDCWD, path, 0700), 0);
	assert_int_equal(io_mkdir_p(dfd, "x/y", 0755), 0);
	assert_int_equal(fstatat(dfd, "x/y", &st, 0), 0);
	assert_true(S_ISDIR(st.st_mode));
	/* A file in the way: its errno, nothing beyond it. */
	write_n(dir, "file", 1);
	assert_int_equal(io_mkdir_p(dfd, "file/z", 0755), -ENOTDIR);
	assert_int_equal(io_mkdir_p(dfd, "file", 0755), 0); /* exists: left as it is, as documented */
	(void)snprintf(path, sizeof(path), "rm -rf %s", dir);
	assert_int_equal(system(path), 0);
	close(dfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_all_caps),	  cmocka_unit_test(test_write_all_closed_socket),
		cmocka_unit_test(test_write_file_atomic), cmocka_unit_test(test_read_file),
		cmocka_unit_test(test_mkdir_p),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
