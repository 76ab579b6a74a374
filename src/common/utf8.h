/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_COMMON_UTF8_H
#define TKBOX_COMMON_UTF8_H

#include <stddef.h>
#include <stdint.h>

/*
 * The one UTF-8 sequence reader for code that checks or escapes text byte by
 * byte (the JSON reader has its own, inside its strict string rules): the
 * length (1..4) of the well-formed sequence at p[0..n) and, when ret is not
 * NULL, its code point; 0 for a bad lead byte, a cut or bad continuation, an
 * overlong form, a surrogate or a code point above U+10FFFF. n >= 1.
 */
static inline size_t utf8_decode(const uint8_t *p, size_t n, uint32_t *ret)
{
	size_t len;
	uint32_t c, min;

	if (p[0] < 0x80) {
		len = 1, c = p[0], min = 0;
	} else if ((p[0] & 0xe0) == 0xc0) {
		len = 2, c = p[0] & 0x1f, min = 0x80;
	} else if ((p[0] & 0xf0) == 0xe0) {
		len = 3, c = p[0] & 0x0f, min = 0x800;
	} else if ((p[0] & 0xf8) == 0xf0) {
		len = 4, c = p[0] & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (len > n) {
		return 0;
	}
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80) {
			return 0;
		}
		c = (c << 6) | (p[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
		return 0;
	}
	if (ret) {
		*ret = c;
	}
	return len;
}

#endif
