/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "buf.h"

int buf_init(struct buf *b, size_t max_size, unsigned flags)
{
	if (max_size == 0 || max_size > BUF_SIZE_CEILING || (flags & BUF_READONLY)) {
		return -EINVAL;
	}
	*b = (struct buf){ .max_size = max_size, .flags = flags };
	return 0;
}

void buf_release(struct buf *b)
{
	if (!b) {
		return;
	}
	if (!(b->flags & BUF_READONLY)) {
		if (b->data && (b->flags & BUF_SECRET)) {
			explicit_bzero(b->data, b->alloc);
		}
		free(b->data);
	}
	b->data = NULL;
	b->off = b->len = b->alloc = 0;
}

int buf_new(size_t max_size, unsigned flags, struct buf **ret)
{
	struct buf *b = calloc(1, sizeof(*b));
	int r;

	if (!b) {
		return -ENOMEM;
	}
	r = buf_init(b, max_size, flags);
	if (r < 0) {
		free(b);
		return r;
	}
	*ret = b;
	return 0;
}

void buf_free(struct buf *b)
{
	if (!b) {
		return;
	}
	buf_release(b);
	free(b);
}

void buf_view(struct buf *ret, const void *p, size_t n)
{
	*ret = (struct buf){
		.data = (uint8_t *)(uintptr_t)p,
		.len = n,
		.alloc = n,
		.max_size = n,
		.flags = BUF_READONLY,
	};
}

size_t buf_avail(const struct buf *b)
{
	if (b->flags & BUF_READONLY) {
		return 0;
	}
	return b->max_size - buf_len(b);
}

void buf_reset(struct buf *b)
{
	if (b->flags & BUF_READONLY) {
		b->off = b->len;
		return;
	}
	if (b->data && (b->flags & BUF_SECRET)) {
		explicit_bzero(b->data, b->alloc);
	}
	b->off = b->len = 0;
}

/* Make room for n more bytes at the end, compacting or growing within max_size. */
static int buf_make_room(struct buf *b, size_t n)
{
	size_t need, newalloc;
	uint8_t *p;

	if (b->flags & BUF_READONLY) {
		return -EROFS;
	}
	if (size_add(buf_len(b), n, &need) < 0 || need > b->max_size) {
		return -E2BIG;
	}
	if (b->len + n <= b->alloc) {
		return 0;
	}
	/* Compact first: consumed bytes at the front are reusable. */
	if (b->off > 0) {
		size_t live = buf_len(b);
		memmove(b->data, b->data + b->off, live);
		if (b->flags & BUF_SECRET) {
			explicit_bzero(b->data + live, b->alloc - live);
		}
		b->off = 0;
		b->len = live;
		if (need <= b->alloc) {
			return 0;
		}
	}
	newalloc = b->alloc ? b->alloc : 256;
	while (newalloc < need) {
		newalloc = newalloc > b->max_size / 2 ? b->max_size : newalloc * 2;
	}
	if (newalloc > b->max_size) {
		newalloc = b->max_size;
	}
	if (b->flags & BUF_SECRET) {
		/* realloc could leave a copy behind: allocate, copy, wipe. */
		p = malloc(newalloc);
		if (!p) {
			return -ENOMEM;
		}
		if (b->data) {
			memcpy(p, b->data, b->len);
			explicit_bzero(b->data, b->alloc);
			free(b->data);
		}
	} else {
		p = realloc(b->data, newalloc);
		if (!p) {
			return -ENOMEM;
		}
	}
	b->data = p;
	b->alloc = newalloc;
	return 0;
}

int buf_reserve(struct buf *b, size_t n, uint8_t **ret)
{
	int r;

	if (n == 0) {
		/* No room needed; avoid NULL + 0 on a buffer without storage. */
		if (b->flags & BUF_READONLY) {
			return -EROFS;
		}
		*ret = b->data ? b->data + b->len : NULL;
		return 0;
	}
	r = buf_make_room(b, n);
	if (r < 0) {
		return r;
	}
	*ret = b->data + b->len;
	b->len += n;
	return 0;
}

int buf_put(struct buf *b, const void *p, size_t n)
{
	uint8_t *dst;
	int r;

	if (n == 0) {
		return b->flags & BUF_READONLY ? -EROFS : 0;
	}
	r = buf_reserve(b, n, &dst);
	if (r < 0) {
		return r;
	}
	memcpy(dst, p, n);
	return 0;
}

int buf_put_u8(struct buf *b, uint8_t v)
{
	return buf_put(b, &v, 1);
}

int buf_put_u16(struct buf *b, uint16_t v)
{
	uint8_t x[2] = { (uint8_t)(v >> 8), (uint8_t)v };
	return buf_put(b, x, sizeof(x));
}

int buf_put_u32(struct buf *b, uint32_t v)
{
	uint8_t x[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };
	return buf_put(b, x, sizeof(x));
}

int buf_put_u64(struct buf *b, uint64_t v)
{
	uint8_t x[8];
	for (int i = 0; i < 8; i++) {
		x[i] = (uint8_t)(v >> (56 - 8 * i));
	}
	return buf_put(b, x, sizeof(x));
}

int buf_put_string(struct buf *b, const void *p, size_t n)
{
	size_t total;
	int r;

	if (n > UINT32_MAX) {
		return -E2BIG;
	}
	/* All-or-nothing: check the whole size before writing the length. */
	if (size_add(n, 4, &total) < 0 || total > buf_avail(b)) {
		return b->flags & BUF_READONLY ? -EROFS : -E2BIG;
	}
	r = buf_put_u32(b, (uint32_t)n);
	if (r < 0) {
		return r;
	}
	return buf_put(b, p, n);
}

int buf_put_cstring(struct buf *b, const char *s)
{
	return buf_put_string(b, s, strlen(s));
}

int buf_putf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	uint8_t *dst;
	int n, r;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		return -EINVAL;
	}
	/* vsnprintf writes a NUL: reserve it, then drop it from len. */
	r = buf_reserve(b, (size_t)n + 1, &dst);
	if (r < 0) {
		return r;
	}
	va_start(ap, fmt);
	(void)vsnprintf((char *)dst, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len--;
	return 0;
}

int buf_get_bytes(struct buf *b, void *dst, size_t n)
{
	if (buf_len(b) < n) {
		return -ENODATA;
	}
	if (dst && n) {
		memcpy(dst, b->data + b->off, n);
	}
	b->off += n;
	return 0;
}

int buf_consume(struct buf *b, size_t n)
{
	return buf_get_bytes(b, NULL, n);
}

int buf_get_u8(struct buf *b, uint8_t *ret)
{
	return buf_get_bytes(b, ret, 1);
}

int buf_get_u16(struct buf *b, uint16_t *ret)
{
	uint8_t x[2];
	int r = buf_get_bytes(b, x, 2);
	if (r < 0) {
		return r;
	}
	*ret = (uint16_t)((x[0] << 8) | x[1]);
	return 0;
}

int buf_get_u32(struct buf *b, uint32_t *ret)
{
	uint8_t x[4];
	int r = buf_get_bytes(b, x, 4);
	if (r < 0) {
		return r;
	}
	*ret = ((uint32_t)x[0] << 24) | ((uint32_t)x[1] << 16) | ((uint32_t)x[2] << 8) | x[3];
	return 0;
}

int buf_get_u64(struct buf *b, uint64_t *ret)
{
	uint8_t x[8];
	uint64_t v = 0;
	int r = buf_get_bytes(b, x, 8);
	if (r < 0) {
		return r;
	}
	for (int i = 0; i < 8; i++) {
		v = (v << 8) | x[i];
	}
	*ret = v;
	return 0;
}

int buf_get_string_view(struct buf *b, size_t max, const uint8_t **ret_p, size_t *ret_n)
{
	const uint8_t *p = buf_ptr(b);
	uint32_t n;

	if (buf_len(b) < 4) {
		return -ENODATA;
	}
	n = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
	if (n > max) {
		return -E2BIG;
	}
	if (buf_len(b) - 4 < n) {
		return -ENODATA;
	}
	*ret_p = p + 4;
	*ret_n = n;
	b->off += 4 + (size_t)n;
	return 0;
}

int buf_get_cstring(struct buf *b, size_t max, char **ret)
{
	const uint8_t *p;
	size_t n, saved_off = b->off;
	char *s;
	int r;

	r = buf_get_string_view(b, max, &p, &n);
	if (r < 0) {
		return r;
	}
	if (memchr(p, 0, n)) {
		b->off = saved_off;
		return -EBADMSG;
	}
	s = malloc(n + 1);
	if (!s) {
		b->off = saved_off;
		return -ENOMEM;
	}
	memcpy(s, p, n);
	s[n] = 0;
	*ret = s;
	return 0;
}

int buf_dup_cstring(const struct buf *b, char **ret)
{
	size_t n = buf_len(b);
	char *s;

	if (memchr(buf_ptr(b), 0, n)) {
		return -EBADMSG;
	}
	s = malloc(n + 1);
	if (!s) {
		return -ENOMEM;
	}
	memcpy(s, buf_ptr(b), n);
	s[n] = 0;
	*ret = s;
	return 0;
}
