/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_IO_H
#define TKBOX_IO_H

#include <dirent.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "buf.h"

/*
 * The one place for whole reads and writes on file descriptors. Both retry on
 * EINTR; neither logs.
 */

/* Write all n bytes (a short write is continued; a socket never raises SIGPIPE). -errno on failure. */
_wur_ int io_write_all(int fd, const void *p, size_t n);

/* Read exactly n bytes at offset off (pread, EINTR retried). 0, -EIO when the file ends first, or -errno. */
_wur_ int io_pread_all(int fd, void *p, size_t n, off_t off);

/*
 * A memfd (close-on-exec) holding iov[0..n)'s bytes back to back, offset 0,
 * sealed against writing, shrinking, growing and further seals: what goes
 * to another process that must read exactly these bytes. The fd, or -errno.
 */
_wur_ int io_memfd_sealed(const char *name, const struct iovec *iov, size_t n);

/*
 * Read fd until end of file, appending to out. -E2BIG as soon as the data
 * would pass out's max_size (what was read stays in out, bounded). Bounce
 * bytes are wiped when out is BUF_SECRET.
 */
_wur_ int io_read_all(int fd, struct buf *out);
/* The same into a new buffer of at most max bytes (buf_flags: BUF_SECRET for secrets), freed by the caller. */
_wur_ int io_read_all_new(int fd, size_t max, unsigned buf_flags, struct buf **ret);

/*
 * Replace path atomically with p[0..n): write "<path>.tmp" (O_EXCL, O_NOFOLLOW,
 * mode), fsync, rename over path. On failure the temporary file is removed and
 * path is untouched.
 */
_wur_ int io_write_file_atomic(const char *path, const void *p, size_t n, mode_t mode);

/* io_read_file flags. */
#define IO_READ_REGULAR (1u << 0) /* anything but a regular file is -EINVAL */
#define IO_READ_NOFOLLOW (1u << 1) /* a symlink as the last component is -ELOOP */
#define IO_READ_PREFIX (1u << 2) /* a longer file is cut at max bytes (for /proc and logs) instead of -E2BIG */

/*
 * The one capped whole-file read: path (relative to dirfd, or AT_FDCWD) into
 * a new NUL-terminated string of *ret_n <= max bytes (ret_n may be NULL).
 * A file of more than max bytes is -E2BIG (read one byte past the cap, so a
 * file that grows while read is refused, never cut), unless IO_READ_PREFIX.
 * Memory grows with what is read, never to max up front. -errno otherwise.
 */
_wur_ int io_read_file(int dirfd, const char *path, size_t max, unsigned flags, char **ret, size_t *ret_n);

/*
 * The one mkdir -p: create path (relative to dirfd, or AT_FDCWD) and each
 * missing parent with mode; existing ones are left as they are (not chmod'ed,
 * not checked). -errno of the first mkdirat that fails otherwise.
 */
_wur_ int io_mkdir_p(int dirfd, const char *path, mode_t mode);

/*
 * A directory stream over a close-on-exec copy of dirfd (dirfd stays open and the caller's); NULL with errno set
 * on failure, and then no copy is left open. closedir() closes the copy.
 */
_wur_ DIR *io_opendir_dup(int dirfd);

#endif
