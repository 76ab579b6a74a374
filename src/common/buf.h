/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_BUF_H
#define TKBOX_BUF_H

#include "macro.h"

/*
 * struct buf: the one bounded byte buffer (after OpenSSH's sshbuf and s2n's
 * stuffer). Every buffer has a mandatory max_size; there is no unlimited
 * constructor. Data is appended at the end and consumed from the front.
 *
 * Errors (all negative errno):
 *   -E2BIG     the operation would take the buffer past max_size, or a
 *              length read from the data is larger than the caller's cap
 *   -ENODATA   fewer bytes are present than the getter needs (nothing consumed)
 *   -EBADMSG   malformed content (an embedded NUL in a cstring)
 *   -EROFS     write to a view
 *   -ENOMEM    allocation failed
 *
 * A getter that fails consumes nothing and writes no output parameter.
 */

/* The absolute ceiling of any buffer: 1 GiB. */
#define BUF_SIZE_CEILING ((size_t)1 << 30)

enum buf_flags {
	BUF_SECRET = 1 << 0, /* wipe contents on every free/realloc/reset */
	BUF_READONLY = 1 << 1, /* a view over caller memory; never written, never freed */
};

struct buf {
	uint8_t *data;
	size_t off; /* read position */
	size_t len; /* end of data */
	size_t alloc; /* bytes allocated */
	size_t max_size; /* cap on len - off + unread; checked on every append */
	unsigned flags;
};

/* Initialise caller storage. max_size must be 1..BUF_SIZE_CEILING. */
_wur_ int buf_init(struct buf *b, size_t max_size, unsigned flags);
/* Free the storage (wiping it first when BUF_SECRET). Accepts a zeroed struct. */
void buf_release(struct buf *b);
_wur_ int buf_new(size_t max_size, unsigned flags, struct buf **ret);
void buf_free(struct buf *b);
static inline void buf_freep(struct buf **b)
{
	buf_free(*b);
}
#define _cleanup_buf_ _cleanup_(buf_freep)

/* A read-only view over p[0..n): getters work, putters return -EROFS. */
void buf_view(struct buf *ret, const void *p, size_t n);

/* Unread bytes and a pointer to them. */
static inline size_t buf_len(const struct buf *b)
{
	return b->len - b->off;
}
static inline const uint8_t *buf_ptr(const struct buf *b)
{
	return b->data ? b->data + b->off : (const uint8_t *)"";
}
/* Room left before max_size. */
size_t buf_avail(const struct buf *b);

/* Drop all content (wiping when secret); keeps the allocation. */
void buf_reset(struct buf *b);

/* Append. All-or-nothing. */
_wur_ int buf_put(struct buf *b, const void *p, size_t n);
_wur_ int buf_put_u8(struct buf *b, uint8_t v);
_wur_ int buf_put_u16(struct buf *b, uint16_t v);
_wur_ int buf_put_u32(struct buf *b, uint32_t v);
_wur_ int buf_put_u64(struct buf *b, uint64_t v);
/* A u32 big-endian length followed by the bytes. */
_wur_ int buf_put_string(struct buf *b, const void *p, size_t n);
_wur_ int buf_put_cstring(struct buf *b, const char *s);
_wur_ int buf_putf(struct buf *b, const char *fmt, ...) _printf_(2, 3);
/* Reserve n writable bytes at the end and return a pointer to them. */
_wur_ int buf_reserve(struct buf *b, size_t n, uint8_t **ret);

/* Consume. */
_wur_ int buf_get_u8(struct buf *b, uint8_t *ret);
_wur_ int buf_get_u16(struct buf *b, uint16_t *ret);
_wur_ int buf_get_u32(struct buf *b, uint32_t *ret);
_wur_ int buf_get_u64(struct buf *b, uint64_t *ret);
/* Copy exactly n bytes out (dst may be NULL to skip them). */
_wur_ int buf_get_bytes(struct buf *b, void *dst, size_t n);
_wur_ int buf_consume(struct buf *b, size_t n);
/*
 * A u32-length-prefixed string: checks the claimed length against max and
 * against the bytes present before anything is allocated. buf_get_string_view
 * returns a pointer into the buffer, valid until the next write.
 */
_wur_ int buf_get_string_view(struct buf *b, size_t max, const uint8_t **ret_p, size_t *ret_n);
/* As above, but copies into a new NUL-terminated string and refuses embedded NULs. */
_wur_ int buf_get_cstring(struct buf *b, size_t max, char **ret);

/* Copy the unread bytes into a new NUL-terminated string; refuses embedded NULs. */
_wur_ int buf_dup_cstring(const struct buf *b, char **ret);

#endif
