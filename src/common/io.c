/* SPDX-License-Identifier: Apache-2.0 */
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
