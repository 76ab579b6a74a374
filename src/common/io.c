/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

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

int io_pread_all(int fd, void *p, size_t n, off_t off)
{
	uint8_t *q = p;

	while (n > 0) {
		ssize_t k = RETRY_EINTR(pread(fd, q, n, off));
		if (k <= 0) {
			return k < 0 ? negative_errno() : -EIO;
		}
		q += k;
		n -= (size_t)k;
		off += k;
	}
	return 0;
}

int io_memfd_sealed(const char *name, const struct iovec *iov, size_t n)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int r = 0;

	if (fd < 0) {
		return negative_errno();
	}
	for (size_t i = 0; i < n && r >= 0; i++) {
		r = io_write_all(fd, iov[i].iov_base, iov[i].iov_len);
	}
	if (r >= 0 && (lseek(fd, 0, SEEK_SET) < 0 ||
		       fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)) {
		r = negative_errno();
	}
	if (r < 0) {
		(void)close(fd);
		return r;
	}
	return fd;
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

int io_read_all_new(int fd, size_t max, unsigned buf_flags, struct buf **ret)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r = buf_new(max, buf_flags, &b);

	if (r < 0) {
		return r;
	}
	r = io_read_all(fd, b);
	if (r < 0) {
		return r;
	}
	*ret = steal_ptr(b);
	return 0;
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

int io_read_file(int dirfd, const char *path, size_t max, unsigned flags, char **ret, size_t *ret_n)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *p = NULL;
	size_t len = 0, cap, limit;
	struct stat st;

	if (max > SIZE_MAX / 2) {
		return -EINVAL;
	}
	/* How much we read at most: one byte past the cap tells a longer file. */
	limit = (flags & IO_READ_PREFIX) ? max : max + 1;
	fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY | ((flags & IO_READ_NOFOLLOW) ? O_NOFOLLOW : 0));
	if (fd < 0) {
		return negative_errno();
	}
	if (fstat(fd, &st) < 0) {
		return negative_errno();
	}
	if ((flags & IO_READ_REGULAR) && !S_ISREG(st.st_mode)) {
		return -EINVAL;
	}
	if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > max && !(flags & IO_READ_PREFIX)) {
		return -E2BIG;
	}
	/* Start at the size seen (plus the probe byte; /proc files say 0) and grow as the data comes. */
	cap = MIN(limit, S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size + 1 : (size_t)4096);
	p = malloc(cap + 1);
	if (!p) {
		return -ENOMEM;
	}
	for (;;) {
		ssize_t k;
		if (len == cap) {
			char *q;
			if (cap == limit) {
				break;
			}
			cap = MIN(limit, cap * 2);
			q = realloc(p, cap + 1);
			if (!q) {
				return -ENOMEM;
			}
			p = q;
		}
		k = RETRY_EINTR(read(fd, p + len, cap - len));
		if (k < 0) {
			return negative_errno();
		}
		if (k == 0) {
			break;
		}
		len += (size_t)k;
	}
	if (len > max) {
		return -E2BIG;
	}
	p[len] = '\0';
	*ret = steal_ptr(p);
	if (ret_n) {
		*ret_n = len;
	}
	return 0;
}

int io_mkdir_p(int dirfd, const char *path, mode_t mode)
{
	_cleanup_free_ char *p = strdup(path);

	if (!p) {
		return -ENOMEM;
	}
	/* Each prefix that ends before a '/' (the root and empty segments are skipped), then the whole path. */
	for (char *s = p + 1; *s; s++) {
		if (*s == '/' && s[-1] != '/') {
			*s = '\0';
			if (mkdirat(dirfd, p, mode) < 0 && errno != EEXIST) {
				return negative_errno();
			}
			*s = '/';
		}
	}
	if (p[0] && mkdirat(dirfd, p, mode) < 0 && errno != EEXIST) {
		return negative_errno();
	}
	return 0;
}

DIR *io_opendir_dup(int dirfd)
{
	int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
	DIR *d;

	if (fd < 0) {
		return NULL;
	}
	d = fdopendir(fd);
	if (!d) {
		int e = errno;
		(void)close(fd);
		errno = e;
	}
	return d;
}
