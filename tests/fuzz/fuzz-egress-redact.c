/* SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "crypto.h"
#include "egress/leak.h"
#include "secmem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * FuzzRedactReader (paper Table 14): a body carrying secret values in any
 * claimed form, split at any read boundary, comes out the same length and
 * with none of them. (gzip and deflate bodies are inflated before they get
 * here: that is the inspector's part, fuzz-egress-forward.)
 *
 * Input: up to 3 secrets (a length byte, then the value), then a program:
 * op 0 copies fuzzer bytes, op 1 puts a value in a form (raw in any case,
 * hex, base64 at an alignment in either alphabet; every character plain,
 * percent- or JSON-escaped), op 2 a fragment of a value. Properties:
 *   - the stream, fed at splits from the input (1 byte at a time too), gives
 *     exactly the one-shot redaction, of the same length, and only markers
 *     replace bytes;
 *   - leak.c's own scan finds no value in the output (F4: the markers never
 *     rebuild one);
 *   - an oracle independent of leak.c's matcher: the output with every
 *     escape decoded left to right holds no value's raw text (any case), hex
 *     (any case) or base64 characters at any alignment (raw text only for
 *     values without '%' and '\': for those, one decoding is not the only one).
 */

#define BODY_MAX 16384

struct rd {
	const uint8_t *p;
	size_t n;
};

static uint8_t rd_u8(struct rd *r)
{
	uint8_t c = 0;

	if (r->n > 0) {
		c = *r->p++;
		r->n--;
	}
	return c;
}

struct out {
	uint8_t p[BODY_MAX];
	size_t n;
};

static bool out_put(struct out *o, const void *p, size_t n)
{
	if (o->n + n > BODY_MAX) {
		return false;
	}
	memcpy(o->p + o->n, p, n);
	o->n += n;
	return true;
}

static void put_char(struct out *o, uint8_t c, uint8_t style)
{
	static const char shorts[] = "\"\\/\b\f\n\r\t", letters[] = "\"\\/bfnrt";
	const char *sh = c ? memchr(shorts, c, 8) : NULL;
	char tmp[8];

	switch (c >= 0x80 && (style % 6 == 3 || style % 6 == 4) ? 1 : style % 6) {
	case 0:
		(void)out_put(o, &c, 1);
		return;
	case 1:
		(void)snprintf(tmp, sizeof(tmp), "%%%02x", c);
		break;
	case 2:
		(void)snprintf(tmp, sizeof(tmp), "%%%02X", c);
		break;
	case 3:
		(void)snprintf(tmp, sizeof(tmp), "\\u%04x", c);
		break;
	case 4:
		(void)snprintf(tmp, sizeof(tmp), "\\u%04X", c);
		break;
	default:
		if (sh) {
			tmp[0] = '\\';
			tmp[1] = letters[sh - shorts];
			(void)out_put(o, tmp, 2);
			return;
		}
		(void)out_put(o, &c, 1);
		return;
	}
	(void)out_put(o, tmp, strlen(tmp));
}

/* The encoded text of v (form 0 raw, 1 hex, 2..4 base64 at alignment 0..2, 5..7 base64url) into b. */
static void encode(const uint8_t *v, size_t n, unsigned form, uint8_t fill, struct buf *b)
{
	uint8_t raw[64];
	size_t k = form >= 2 ? (form - 2) % 3 : 0;

	if (form == 0) {
		if (buf_put(b, v, n) < 0) {
			abort();
		}
		return;
	}
	if (form == 1) {
		if (hex_encode(v, n, b) < 0) {
			abort();
		}
		return;
	}
	memset(raw, fill, sizeof(raw));
	memcpy(raw + k, v, n);
	if (b64_encode(raw, k + n + 2, form >= 5 ? B64_URL : B64_STD, b) < 0) {
		abort();
	}
}

static void put_form(struct out *o, const uint8_t *v, size_t n, unsigned form, uint32_t seed, size_t cut)
{
	struct buf b;

	if (buf_init(&b, 256, 0) < 0) {
		abort();
	}
	encode(v, n, form, (uint8_t)seed, &b);
	for (size_t i = 0; i < buf_len(&b) && i < cut; i++) {
		uint8_t c = buf_ptr(&b)[i];

		seed = seed * 1103515245u + 12345u;
		if (form <= 1 && (c | 32) >= 'a' && (c | 32) <= 'z' && (seed >> 20 & 1)) {
			c ^= 32;
		}
		put_char(o, c, (uint8_t)(seed >> 24));
	}
	buf_release(&b);
}

static int hexv(uint8_t c)
{
	if (c >= '0' && c <= '9') {
		return c - '0';
	}
	if ((c | 32) >= 'a' && (c | 32) <= 'f') {
		return (c | 32) - 'a' + 10;
	}
	return -1;
}

/* Every escape decoded, left to right (the oracle's own decoder). */
static size_t decode_all(const uint8_t *p, size_t n, uint8_t *ret)
{
	size_t o = 0;

	for (size_t i = 0; i < n;) {
		static const char sl[] = "\"\\/bfnrt", sv[] = "\"\\/\b\f\n\r\t";
		const char *x;

		if (p[i] == '%' && i + 2 < n && hexv(p[i + 1]) >= 0 && hexv(p[i + 2]) >= 0) {
			ret[o++] = (uint8_t)(hexv(p[i + 1]) * 16 + hexv(p[i + 2]));
			i += 3;
		} else if (p[i] == '\\' && i + 1 < n && p[i + 1] && (x = memchr(sl, p[i + 1], 8)) != NULL) {
			ret[o++] = (uint8_t)sv[x - sl];
			i += 2;
		} else if (p[i] == '\\' && i + 5 < n && p[i + 1] == 'u' && p[i + 2] == '0' && p[i + 3] == '0' &&
			   hexv(p[i + 4]) >= 0 && hexv(p[i + 4]) < 8 && hexv(p[i + 5]) >= 0) {
			ret[o++] = (uint8_t)(hexv(p[i + 4]) * 16 + hexv(p[i + 5]));
			i += 6;
		} else {
			ret[o++] = p[i++];
		}
	}
	return o;
}

static bool contains(const uint8_t *hay, size_t hn, const uint8_t *nd, size_t nn, bool fold)
{
	for (size_t i = 0; nn > 0 && i + nn <= hn; i++) {
		size_t j = 0;

		while (j < nn && (fold ? ((hay[i + j] >= 'A' && hay[i + j] <= 'Z' ? hay[i + j] | 32 : hay[i + j]) ==
					  (nd[j] >= 'A' && nd[j] <= 'Z' ? nd[j] | 32 : nd[j]))
				       : hay[i + j] == nd[j])) {
			j++;
		}
		if (j == nn) {
			return true;
		}
	}
	return false;
}

/* The oracle: no target of v in the decoded output. base64: the characters equal for two different fills. */
static void oracle(const uint8_t *dec, size_t dn, const uint8_t *v, size_t n)
{
	/* a raw value holding '%' or '\' has more than one reading; hex and base64 never hold them */
	bool raw_ok = !memchr(v, '%', n) && !memchr(v, '\\', n);

	for (unsigned form = raw_ok ? 0 : 1; form < 8; form++) {
		struct buf a, b;
		size_t first = SIZE_MAX, last = 0;

		if (buf_init(&a, 256, 0) < 0 || buf_init(&b, 256, 0) < 0) {
			abort();
		}
		encode(v, n, form, 0x00, &a);
		encode(v, n, form, 0xff, &b);
		for (size_t i = 0; i < buf_len(&a); i++) {
			if (buf_ptr(&a)[i] == buf_ptr(&b)[i]) {
				first = MIN(first, i);
				last = i + 1;
			} else if (first != SIZE_MAX && form >= 2) {
				break;
			}
		}
		if (first != SIZE_MAX && contains(dec, dn, buf_ptr(&a) + first, last - first, form <= 1)) {
			abort();
		}
		buf_release(&a);
		buf_release(&b);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct out body;
	static uint8_t red[BODY_MAX], dec[BODY_MAX];
	struct egress_secret s[3];
	struct egress_leak_set *set = NULL;
	struct egress_leak_stream st;
	struct egress_leak_match m;
	struct rd r = { data, size };
	size_t nsec = 1 + rd_u8(&r) % 3, off = 0, dn;
	uint32_t seed = 1;
	struct buf out;
	uint8_t mk;

	memset(s, 0, sizeof(s));
	for (size_t i = 0; i < nsec; i++) {
		uint8_t v[40];
		size_t vn = EGRESS_SECRET_VALUE_MIN + rd_u8(&r) % 30;

		for (size_t j = 0; j < vn; j++) {
			v[j] = rd_u8(&r);
		}
		(void)snprintf(s[i].name, sizeof(s[i].name), "S%zu", i);
		(void)snprintf(s[i].placeholder, sizeof(s[i].placeholder), "tkbox_S%zu_%032zx", i, vn);
		s[i].value = secmem_dup(v, vn);
		if (!s[i].value) {
			abort();
		}
		s[i].value_len = vn;
	}
	if (egress_leak_set_new(s, nsec, &set) < 0) {
		abort();
	}
	mk = egress_leak_marker(set);

	/* the body program */
	body.n = 0;
	while (r.n > 0 && body.n < BODY_MAX) {
		uint8_t op = rd_u8(&r);
		const struct egress_secret *x = &s[(op >> 2) % nsec];

		seed = seed * 1103515245u + op;
		switch (op & 3) {
		case 0: {
			size_t k = MIN((size_t)(op >> 2) + 1, r.n);

			(void)out_put(&body, r.p, k);
			r.p += k;
			r.n -= k;
			break;
		}
		case 1:
			put_form(&body, x->value, x->value_len, rd_u8(&r) % 8, seed, SIZE_MAX);
			break;
		case 2:
			put_form(&body, x->value, x->value_len, rd_u8(&r) % 8, seed, rd_u8(&r) % 64);
			break;
		default:
			put_form(&body, (const uint8_t *)x->placeholder, strlen(x->placeholder), rd_u8(&r) % 8, seed,
				 SIZE_MAX);
			break;
		}
	}

	/* one-shot */
	memcpy(red, body.p, body.n);
	(void)egress_leak_redact(set, red, body.n);
	for (size_t i = 0; i < body.n; i++) {
		if (red[i] != body.p[i] && red[i] != mk) {
			abort();
		}
	}
	if (egress_leak_find(set, EGRESS_LEAK_VALUES, red, body.n, &m) != 0) {
		abort();
	}
	dn = decode_all(red, body.n, dec);
	for (size_t i = 0; i < nsec; i++) {
		oracle(dec, dn, s[i].value, s[i].value_len);
	}

	/* the stream, at splits (one byte at a time only for short bodies: it is slow and finds the same) */
	for (int pass = body.n <= 2048 ? 0 : 1; pass < 2; pass++) {
		off = 0;
		if (egress_leak_stream_init(&st, set, EGRESS_LEAK_PLACEHOLDERS, true) < 0 ||
		    buf_init(&out, body.n + 1, 0) < 0) {
			abort();
		}
		while (off < body.n) {
			size_t take = 1;

			if (pass == 1) {
				seed = seed * 1103515245u + 12345u;
				take = MIN((size_t)1 + (seed >> 16) % 700, body.n - off);
			}
			if (egress_leak_stream_feed(&st, body.p + off, take, &out, &m) != 0) {
				abort();
			}
			off += take;
		}
		if (egress_leak_stream_end(&st, &out, &m) != 0 || buf_len(&out) != body.n ||
		    memcmp(buf_ptr(&out), red, body.n) != 0) {
			abort();
		}
		buf_release(&out);
		egress_leak_stream_release(&st);
	}

	egress_leak_set_free(set);
	for (size_t i = 0; i < nsec; i++) {
		secmem_free(s[i].value, s[i].value_len);
	}
	return 0;
}
