/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_HEX_H
#define TKBOX_HEX_H

/*
 * The value of one hex digit, either case: 0..15, or -1 when c is not a hex
 * digit (any value outside '0'-'9', 'a'-'f', 'A'-'F', including a negative
 * plain char). Branches on c, so it is not for secret bytes: crypto.c keeps its
 * own constant-time decoder. Header-only so the guest subset can use it too.
 */
static inline int hex_digit_value(int c)
{
	if (c >= '0' && c <= '9') {
		return c - '0';
	}
	if (c >= 'a' && c <= 'f') {
		return c - 'a' + 10;
	}
	if (c >= 'A' && c <= 'F') {
		return c - 'A' + 10;
	}
	return -1;
}

#endif
