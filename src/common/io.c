/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "banned.h"
#include "io.h"

int io_write_all(int fd, const void *p, size_t n)
{
	const uint8_t *q = p;

	while (n > 0) {
		/* On a socket, a peer that went away is an error here, never a SIGPIPE. */
		ssize_t k = RETRY_EINTR(send(fd, q, n, MSG_NOSIGNAL));
		if (k < 0 && errno == ENOTSOCK) {
			k = RETRY_EINTR(write(fd, q, n));
		}
		if (k < 0) {
			return negative_errno();
		}
		q += k;
		n -= (size_t)k;
	}
	return 0;
}

int io_read_all(int fd, struct buf *out)
{
	uint8_t tmp[16384];
	int r = 0;

	for (;;) {
		ssize_t n = RETRY_EINTR(read(fd, tmp, sizeof(tmp)));
		if (n < 0) {
			r = negative_errno();
			break;
		}
		if (n == 0) {
			break;
		}
		r = buf_put(out, tmp, (size_t)n);
		if (r < 0) {
			break;
		}
	}
	if (out->flags & BUF_SECRET) {
		explicit_bzero(tmp, sizeof(tmp));
	}
	return r;
}

int io_write_file_atomic(const char *path, const void *p, size_t n, mode_t mode)
{
	_cleanup_free_ char *tmp = NULL;
	_cleanup_close_ int fd = -1;
	int r;

	if (asprintf(&tmp, "%s.tmp", path) < 0) {
		return -ENOMEM;
	}
	/* A temporary file left by a crash is ours to replace; O_EXCL then refuses anything racing us. */
	(void)unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0) {
		return negative_errno();
	}
	r = io_write_all(fd, p, n);
	if (r >= 0 && fsync(fd) < 0) {
		r = negative_errno();
	}
	if (r >= 0 && rename(tmp, path) < 0) {
		r = negative_errno();
	}
	if (r < 0) {
		(void)unlink(tmp);
	}
	return r;
}
