/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_IO_H
#define TKBOX_IO_H

#include <sys/types.h>

#include "buf.h"

/*
 * The one place for whole reads and writes on file descriptors. Both retry on
 * EINTR; neither logs.
 */

/* Write all n bytes (a short write is continued; a socket never raises SIGPIPE). -errno on failure. */
_wur_ int io_write_all(int fd, const void *p, size_t n);

/*
 * Read fd until end of file, appending to out. -E2BIG as soon as the data
 * would pass out's max_size (what was read stays in out, bounded). Bounce
 * bytes are wiped when out is BUF_SECRET.
 */
_wur_ int io_read_all(int fd, struct buf *out);

/*
 * Replace path atomically with p[0..n): write "<path>.tmp" (O_EXCL, O_NOFOLLOW,
 * mode), fsync, rename over path. On failure the temporary file is removed and
 * path is untouched.
 */
_wur_ int io_write_file_atomic(const char *path, const void *p, size_t n, mode_t mode);

#endif
