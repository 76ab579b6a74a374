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
 * The leak scanner (paper Table 14 "leak scanner"). Input: up to 3 secrets
 * (a length byte, then the value), an injection recipe, then the body.
 * Properties:
 *   - a stream fed at any split gives the one-shot verdict, the same match,
 *     and appends exactly the bytes before the match;
 *   - a match is local: its bytes alone match again, with the same length;
 *   - a value or placeholder put into the body in any claimed form (raw in
 *     any case, hex, base64 at any alignment in either alphabet, each
 *     character plain, percent- or JSON-escaped) is found, starting no later
 *     than inside it;
 *   - the reason text never holds three bytes in a row of the value.
 * The encodings are built here with crypto.c, not with leak.c.
 */

#define BODY_MAX 8192

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
	uint8_t p[BODY_MAX * 8];
	size_t n;
};

static void out_put(struct out *o, const void *p, size_t n)
{
	if (o->n + n > sizeof(o->p)) {
		abort(); /* sized for the largest body and injection */
	}
	memcpy(o->p + o->n, p, n);
	o->n += n;
}

/* One character of a target, as the recipe's style says: plain, %XX or \u00XX (any case), a short escape. */
static void put_char(struct out *o, uint8_t c, uint8_t style)
{
	static const char shorts[] = "\"\\/\b\f\n\r\t", letters[] = "\"\\/bfnrt";
	const char *sh = c ? memchr(shorts, c, 8) : NULL;
	char tmp[8];

	switch (c >= 0x80 && (style % 6 == 3 || style % 6 == 4) ? 1 : style % 6) {
	case 0:
		out_put(o, &c, 1);
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
			out_put(o, tmp, 2);
			return;
		}
		out_put(o, &c, 1);
		return;
	}
	out_put(o, tmp, strlen(tmp));
}

/*
 * The target text of v in form (0 raw, 1 hex, 2..4 base64 at alignment 0..2,
 * 5..7 base64url), written with per-character styles from seed.
 */
static void put_form(struct out *o, const uint8_t *v, size_t n, unsigned form, uint32_t seed)
{
	uint8_t raw[64 + 4];
	struct buf b;
	const uint8_t *t = v;
	size_t tn = n;

	if (buf_init(&b, 4 * sizeof(raw), 0) < 0) {
		abort();
	}
	if (form == 1) {
		if (hex_encode(v, n, &b) < 0) {
			abort();
		}
		t = buf_ptr(&b);
		tn = buf_len(&b);
	} else if (form >= 2) {
		size_t k = (form - 2) % 3;

		memset(raw, (int)(seed & 0xff), k);
		memcpy(raw + k, v, n);
		raw[k + n] = (uint8_t)(seed >> 8);
		raw[k + n + 1] = (uint8_t)(seed >> 16);
		if (b64_encode(raw, k + n + 2, form >= 5 ? B64_URL : B64_STD, &b) < 0) {
			abort();
		}
		t = buf_ptr(&b);
		tn = buf_len(&b);
	}
	for (size_t i = 0; i < tn; i++) {
		uint8_t c = t[i];

		seed = seed * 1103515245u + 12345u;
		/* raw and hex: any case */
		if (form <= 1 && (c | 32) >= 'a' && (c | 32) <= 'z' && (seed >> 20 & 1)) {
			c ^= 32;
		}
		put_char(o, c, (uint8_t)(seed >> 24));
	}
	buf_release(&b);
}

static bool has_run(const char *text, const uint8_t *v, size_t n)
{
	size_t tl = strlen(text);

	for (size_t i = 0; i + 3 <= tl; i++) {
		for (size_t j = 0; j + 3 <= n; j++) {
			if (memcmp(text + i, v + j, 3) == 0) {
				return true;
			}
		}
	}
	return false;
}

static void check_stream(const struct egress_leak_set *set, unsigned what, const uint8_t *p, size_t n, uint32_t seed)
{
	struct egress_leak_match m, sm;
	struct egress_leak_stream st;
	struct buf out;
	int found = egress_leak_find(set, what, p, n, &m), r = 0;
	size_t off = 0;

	if (egress_leak_stream_init(&st, set, what, false) < 0 || buf_init(&out, n + 1, 0) < 0) {
		abort();
	}
	while (off < n && r == 0) {
		size_t take;

		seed = seed * 1103515245u + 12345u;
		take = MIN((size_t)1 + (seed >> 16) % 300, n - off);
		if ((seed >> 8 & 3) == 0) {
			take = 1;
		}
		r = egress_leak_stream_feed(&st, p + off, take, &out, &sm);
		off += take;
	}
	if (r == 0) {
		r = egress_leak_stream_end(&st, &out, &sm);
	}
	if (r != found) {
		abort();
	}
	if (found) {
		struct egress_leak_match again;

		if (sm.secret != m.secret || sm.placeholder != m.placeholder || strcmp(sm.form, m.form) != 0 ||
		    sm.escaped != m.escaped || buf_len(&out) != m.off || m.len == 0 || m.off + m.len > n) {
			abort();
		}
		/* local: the match's bytes alone */
		if (egress_leak_find(set, what, p + m.off, m.len, &again) != 1 || again.off != 0 ||
		    again.len != m.len) {
			abort();
		}
	} else if (buf_len(&out) != n) {
		abort();
	}
	if (memcmp(buf_ptr(&out), p, buf_len(&out)) != 0) {
		abort();
	}
	buf_release(&out);
	egress_leak_stream_release(&st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct out body;
	struct egress_secret s[3];
	struct egress_leak_set *set = NULL;
	struct egress_leak_match m;
	struct rd r = { data, size };
	size_t nsec = 1 + rd_u8(&r) % 3, at;
	unsigned which, form;
	uint32_t seed;
	char reason[200];

	memset(s, 0, sizeof(s));
	for (size_t i = 0; i < nsec; i++) {
		uint8_t v[40];
		size_t vn = EGRESS_SECRET_VALUE_MIN + rd_u8(&r) % 30;

		for (size_t j = 0; j < vn; j++) {
			v[j] = rd_u8(&r);
		}
		(void)snprintf(s[i].name, sizeof(s[i].name), "S%zu", i);
		(void)snprintf(s[i].placeholder, sizeof(s[i].placeholder), "tkbox_S%zu_%02x%030x", i, v[0],
			       (unsigned)vn);
		s[i].value = secmem_dup(v, vn);
		if (!s[i].value) {
			abort();
		}
		s[i].value_len = vn;
	}
	which = rd_u8(&r);
	form = rd_u8(&r) % 8;
	seed = (uint32_t)rd_u8(&r) << 16 | (uint32_t)rd_u8(&r) << 8 | rd_u8(&r);
	if (r.n > BODY_MAX) {
		r.n = BODY_MAX;
	}
	if (egress_leak_set_new(s, nsec, &set) < 0) {
		abort(); /* valid lengths: only -ENOMEM, which a fuzz run does not see */
	}

	/* the body as given */
	check_stream(set, EGRESS_LEAK_VALUES | EGRESS_LEAK_PLACEHOLDERS, r.p, r.n, seed);
	check_stream(set, EGRESS_LEAK_VALUES, r.p, r.n, seed ^ 0x5555);
	if (egress_leak_find(set, EGRESS_LEAK_VALUES | EGRESS_LEAK_PLACEHOLDERS, r.p, r.n, &m) == 1) {
		egress_leak_describe(set, s, &m, reason, sizeof(reason));
		if (has_run(reason, s[m.secret].value, s[m.secret].value_len)) {
			abort();
		}
	}

	/* a claimed form put in at a point of the body is found, starting no later than inside it */
	{
		const struct egress_secret *x = &s[which % nsec];
		bool ph = which & 0x80;
		const uint8_t *v = ph ? (const uint8_t *)x->placeholder : x->value;
		size_t vn = ph ? strlen(x->placeholder) : x->value_len;

		size_t end;

		at = r.n ? (seed % (r.n + 1)) : 0;
		body.n = 0;
		out_put(&body, r.p, at);
		put_form(&body, v, vn, form, seed);
		end = body.n;
		out_put(&body, r.p + at, r.n - at);
		if (egress_leak_find(set, ph ? EGRESS_LEAK_PLACEHOLDERS : EGRESS_LEAK_VALUES, body.p, body.n, &m) !=
			    1 ||
		    m.off >= end) {
			abort();
		}
		check_stream(set, EGRESS_LEAK_VALUES | EGRESS_LEAK_PLACEHOLDERS, body.p, body.n, seed >> 3);
		egress_leak_describe(set, s, &m, reason, sizeof(reason));
		if (has_run(reason, s[m.secret].value, s[m.secret].value_len)) {
			abort();
		}
	}

	egress_leak_set_free(set);
	for (size_t i = 0; i < nsec; i++) {
		secmem_free(s[i].value, s[i].value_len);
	}
	return 0;
}
