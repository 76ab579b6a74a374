/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_MACRO_H
#define TKBOX_MACRO_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

/* Every fallible function returns >= 0 on success and -errno on failure. */
#define _wur_ __attribute__((warn_unused_result))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _noreturn_ __attribute__((noreturn))

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* Cleanup helpers (systemd style). Destructors accept NULL / -1. */
static inline void freep(void *p)
{
	free(*(void **)p);
}
/*
 * Close *fd and set it to -1, so a second closep of the same variable is a
 * no-op. Without the reset, closep(&x) followed by a cleanup (or a second
 * closep) closed x's number again: in the threaded daemon that number may
 * meanwhile be another thread's fd (an API connection accept4 just got), and
 * that client then got another client's reply (tests/unit/test-image-run.c).
 */
static inline void closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		(void)close(*fd);
		*fd = -1;
		errno = saved;
	}
}
#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)

/* Move ownership out of a cleanup variable: ret = steal_ptr(p). */
#define steal_ptr(p)                                                                                                   \
	({                                                                                                             \
		__typeof__(p) _tmp_ = (p);                                                                             \
		(p) = NULL;                                                                                            \
		_tmp_;                                                                                                 \
	})
#define steal_fd(fd)                                                                                                   \
	({                                                                                                             \
		int _tmp_ = (fd);                                                                                      \
		(fd) = -1;                                                                                             \
		_tmp_;                                                                                                 \
	})

/* Overflow-checked size arithmetic (git's st_add): returns -EOVERFLOW. */
static inline _wur_ int size_add(size_t a, size_t b, size_t *ret)
{
	size_t r;
	if (__builtin_add_overflow(a, b, &r)) {
		return -EOVERFLOW;
	}
	*ret = r;
	return 0;
}
static inline _wur_ int size_mul(size_t a, size_t b, size_t *ret)
{
	size_t r;
	if (__builtin_mul_overflow(a, b, &r)) {
		return -EOVERFLOW;
	}
	*ret = r;
	return 0;
}

/* Retry a syscall on EINTR. */
#define RETRY_EINTR(expr)                                                                                              \
	({                                                                                                             \
		__typeof__(expr) _r_;                                                                                  \
		do {                                                                                                   \
			_r_ = (expr);                                                                                  \
		} while (_r_ == -1 && errno == EINTR);                                                                 \
		_r_;                                                                                                   \
	})

/* errno as a negative value, never 0 (a libc that forgot to set errno still fails). */
static inline int negative_errno(void)
{
	return errno > 0 ? -errno : -EIO;
}

#endif
