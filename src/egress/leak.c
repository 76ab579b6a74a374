/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "egress/leak.h"
#include "hex.h"
#include "secmem.h"

/*
 * How it works. Each target is a string of "target characters" (the raw
 * bytes with letters folded to lower case, lower-case hex, or the base64
 * characters the value alone determines). In the bytes scanned, each target
 * character is one token: the byte itself, %XX, or a JSON escape. A scan
 * walks the positions left to right; at most positions one lookup of the
 * two bytes there in a bitmap of the targets' first two characters (and of
 * every pair with an escape byte) shows no target can start there. Where one can, the targets whose first character
 * accepts the position's first logical byte are tried, and the longest match
 * wins (leftmost, then longest, then the lowest target index).
 *
 * A target that holds '%' or '\' itself (only a raw one can) is ambiguous:
 * at such a character a literal and an escape can both start, e.g. "%25".
 * Those targets are matched by an NFA over (target index) sets with a ring of
 * bitsets (polynomial, never backtracking); every other target has at most
 * one reading per position and is matched directly.
 *
 * Why a rescan of redacted output finds nothing (F4): a match is a local
 * property of the bytes it covers. The marker is in no target and is not
 * '%', '\', 'u' or a hex digit, so no token (and no match) can contain one;
 * a match in the output therefore lies wholly inside a span the redaction
 * left unchanged, between two matches, and would have been found there (it
 * starts before the next match), which the leftmost rule rules out.
 *
 * Everything derived from the values (the targets and the lookup tables,
 * which give bigrams away) lives in one secmem mapping, wiped on free.
 */

#define LEAK_FORMS_PER_SIDE 8 /* raw, hex, 3 base64, 3 base64url */
#define LEAK_TARGETS_MAX (EGRESS_SECRET_MAX * 2 * LEAK_FORMS_PER_SIDE)
#define LEAK_MASK_WORDS (LEAK_TARGETS_MAX / 64)
#define LEAK_TOKEN_MAX 6 /* the longest form of one target character: \u00XX */
#define LEAK_RING (LEAK_TOKEN_MAX + 1)
#define LEAK_NFA_WORDS ((EGRESS_SECRET_VALUE_MAX + 1 + 63) / 64)
#define LEAK_CHUNK ((size_t)256 * 1024) /* bytes a stream takes in per scan */

enum leak_form {
	LEAK_RAW,
	LEAK_HEX,
	LEAK_B64,
	LEAK_B64URL,
};
static const char *const leak_form_names[] = { "raw", "hex", "base64", "base64url" };

struct leak_target {
	const uint8_t *chars; /* in the set's arena */
	size_t len;
	size_t secret;
	bool placeholder;
	bool fold; /* ASCII letters in any case (chars hold them in lower case) */
	bool ambiguous; /* holds '%' or '\' */
	uint8_t form;
};

struct egress_leak_set {
	size_t map_size; /* what secmem_alloc was asked for */
	size_t n_targets;
	size_t holdback;
	uint8_t marker;
	uint64_t mask[4][LEAK_MASK_WORDS]; /* by what: the targets of that kind */
	uint64_t first[256][LEAK_MASK_WORDS]; /* targets whose first character accepts logical byte b */
	uint64_t pair[4][1024]; /* by what: literal byte pairs (b0 << 8 | b1) that can start a target */
	struct leak_target t[LEAK_TARGETS_MAX];
	size_t arena_used, arena_size;
	uint8_t arena[];
};

static inline bool leak_is_esc(uint8_t c)
{
	return c == '%' || c == '\\';
}

static inline uint8_t leak_lower(uint8_t c)
{
	return c >= 'A' && c <= 'Z' ? (uint8_t)(c + 32) : c;
}

/* The escape starting at p[0] (p[0..n), n >= 1): its length (0: none) and its logical byte. */
static inline size_t leak_escape_at(const uint8_t *p, size_t n, uint8_t *ret)
{
	int h, l;

	if (p[0] == '%') {
		if (n >= 3 && (h = hex_digit_value(p[1])) >= 0 && (l = hex_digit_value(p[2])) >= 0) {
			*ret = (uint8_t)(h << 4 | l);
			return 3;
		}
		return 0;
	}
	if (p[0] != '\\' || n < 2) {
		return 0;
	}
	switch (p[1]) {
	case '"':
	case '\\':
	case '/':
		*ret = p[1];
		return 2;
	case 'b':
		*ret = '\b';
		return 2;
	case 'f':
		*ret = '\f';
		return 2;
	case 'n':
		*ret = '\n';
		return 2;
	case 'r':
		*ret = '\r';
		return 2;
	case 't':
		*ret = '\t';
		return 2;
	case 'u':
		/* \u00XX below U+0080 only: a value byte >= 0x80 is not a code point */
		if (n >= 6 && p[2] == '0' && p[3] == '0' && (h = hex_digit_value(p[4])) >= 0 && h < 8 &&
		    (l = hex_digit_value(p[5])) >= 0) {
			*ret = (uint8_t)(h << 4 | l);
			return 6;
		}
		return 0;
	default:
		return 0;
	}
}

static inline bool leak_accept(const struct leak_target *t, size_t j, uint8_t d)
{
	return (t->fold ? leak_lower(d) : d) == t->chars[j];
}

/* A target without '%' or '\': one reading per position. The match's length, 0 none. */
static size_t leak_match_direct(const struct leak_target *t, const uint8_t *p, size_t n)
{
	size_t i = 0;

	for (size_t j = 0; j < t->len; j++) {
		uint8_t d;
		size_t k;

		if (i >= n) {
			return 0;
		}
		if (leak_is_esc(p[i])) {
			k = leak_escape_at(p + i, n - i, &d);
			if (k == 0) {
				return 0;
			}
		} else {
			d = p[i];
			k = 1;
		}
		if (!leak_accept(t, j, d)) {
			return 0;
		}
		i += k;
	}
	return i;
}

/* An ambiguous target: every reading at once; the longest match's length, 0 none. */
static size_t leak_match_nfa(const struct leak_target *t, const uint8_t *p, size_t n)
{
	uint64_t ring[LEAK_RING][LEAK_NFA_WORDS];
	size_t words = (t->len + 1 + 63) / 64, best = 0, horizon = 0;

	for (size_t r = 0; r < LEAK_RING; r++) {
		memset(ring[r], 0, words * sizeof(uint64_t));
	}
	ring[0][0] = 1;
	for (size_t off = 0; off <= horizon; off++) {
		uint64_t *cur = ring[off % LEAK_RING];

		for (size_t w = 0; w < words; w++) {
			uint64_t bits = cur[w];

			cur[w] = 0;
			while (bits) {
				size_t j = w * 64 + (size_t)__builtin_ctzll(bits);
				uint8_t d;
				size_t k;

				bits &= bits - 1;
				if (j == t->len) {
					best = off;
					continue;
				}
				if (off >= n) {
					continue;
				}
				if (leak_accept(t, j, p[off])) {
					ring[(off + 1) % LEAK_RING][(j + 1) / 64] |= 1ull << ((j + 1) % 64);
					horizon = MAX(horizon, off + 1);
				}
				k = leak_escape_at(p + off, n - off, &d);
				if (k && leak_accept(t, j, d)) {
					ring[(off + k) % LEAK_RING][(j + 1) / 64] |= 1ull << ((j + 1) % 64);
					horizon = MAX(horizon, off + k);
				}
			}
		}
	}
	return best;
}

/* The longest match starting at p[0] (n >= 1) among the targets in mask. */
static bool leak_match_at(const struct egress_leak_set *set, const uint64_t *mask, const uint8_t *p, size_t n,
			  struct egress_leak_match *ret)
{
	uint64_t cand[LEAK_MASK_WORDS];
	size_t best = 0, best_t = 0;
	uint8_t d;

	for (size_t w = 0; w < LEAK_MASK_WORDS; w++) {
		cand[w] = set->first[p[0]][w];
	}
	if (leak_is_esc(p[0]) && leak_escape_at(p, n, &d)) {
		for (size_t w = 0; w < LEAK_MASK_WORDS; w++) {
			cand[w] |= set->first[d][w];
		}
	}
	for (size_t w = 0; w < LEAK_MASK_WORDS; w++) {
		uint64_t bits = cand[w] & mask[w];

		while (bits) {
			size_t i = w * 64 + (size_t)__builtin_ctzll(bits);
			const struct leak_target *t = &set->t[i];
			size_t len;

			bits &= bits - 1;
			len = t->ambiguous ? leak_match_nfa(t, p, n) : leak_match_direct(t, p, n);
			if (len > best) {
				best = len;
				best_t = i;
			}
		}
	}
	if (best == 0) {
		return false;
	}
	*ret = (struct egress_leak_match){
		.secret = set->t[best_t].secret,
		.placeholder = set->t[best_t].placeholder,
		.form = leak_form_names[set->t[best_t].form],
		.escaped = best != set->t[best_t].len,
		.off = 0,
		.len = best,
	};
	return true;
}

static unsigned leak_what(unsigned what)
{
	return what & (EGRESS_LEAK_VALUES | EGRESS_LEAK_PLACEHOLDERS);
}

/*
 * The first match starting in [from, limit) of p[0..n); its offset, or n
 * when there is none. ret->off/len are filled (off relative to p).
 */
static size_t leak_scan(const struct egress_leak_set *set, unsigned what, const uint8_t *p, size_t n, size_t from,
			size_t limit, struct egress_leak_match *ret)
{
	const uint64_t *pair = set->pair[what], *mask = set->mask[what];
	size_t fast_end;

	if (what == 0 || set->n_targets == 0) {
		return n;
	}
	/* positions with a byte after them: one bitmap lookup each (escape bytes are always in it) */
	fast_end = n > 0 ? MIN(limit, n - 1) : 0;
	for (size_t q = from; q < limit; q++) {
		while (q < fast_end) {
			unsigned v = (unsigned)p[q] << 8 | p[q + 1];

			if (pair[v >> 6] >> (v & 63) & 1) {
				break;
			}
			q++;
		}
		if (q >= limit) {
			break;
		}
		if (leak_match_at(set, mask, p + q, n - q, ret)) {
			ret->off = q;
			return q;
		}
	}
	return n;
}

/* ---- building the set ---- */

static uint8_t *leak_arena_take(struct egress_leak_set *set, size_t n)
{
	uint8_t *p = set->arena + set->arena_used;

	/* sized by leak_arena_need: running out is a programmer error */
	if (n > set->arena_size - set->arena_used) {
		abort();
	}
	set->arena_used += n;
	return p;
}

static void leak_add(struct egress_leak_set *set, size_t secret, bool placeholder, enum leak_form form,
		     const uint8_t *chars, size_t len)
{
	struct leak_target *t;

	if (len < 2) {
		return; /* cannot happen for values of EGRESS_SECRET_VALUE_MIN bytes or more */
	}
	/* base64url is often the same text as base64: keep one */
	for (size_t i = 0; i < set->n_targets; i++) {
		if (set->t[i].secret == secret && set->t[i].placeholder == placeholder && set->t[i].len == len &&
		    set->t[i].form == LEAK_B64 && form == LEAK_B64URL && memcmp(set->t[i].chars, chars, len) == 0) {
			return;
		}
	}
	t = &set->t[set->n_targets++];
	*t = (struct leak_target){
		.chars = chars,
		.len = len,
		.secret = secret,
		.placeholder = placeholder,
		.fold = form == LEAK_RAW || form == LEAK_HEX,
		.ambiguous = memchr(chars, '%', len) || memchr(chars, '\\', len),
		.form = (uint8_t)form,
	};
}

static size_t leak_b64_first(size_t k)
{
	return (8 * k + 5) / 6; /* the first character whose bits all lie in the value */
}

static size_t leak_arena_need(size_t n)
{
	/* raw n, hex 2n, and six base64 texts of at most 4n/3 + 1 characters */
	return n + 2 * n + 6 * (4 * n / 3 + 2);
}

static void leak_add_all(struct egress_leak_set *set, size_t secret, bool placeholder, const uint8_t *v, size_t n)
{
	static const char hexd[] = "0123456789abcdef";
	static const char b64[2][65] = {
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
	};
	uint8_t *p;

	p = leak_arena_take(set, n);
	for (size_t i = 0; i < n; i++) {
		p[i] = leak_lower(v[i]);
	}
	leak_add(set, secret, placeholder, LEAK_RAW, p, n);

	p = leak_arena_take(set, 2 * n);
	for (size_t i = 0; i < n; i++) {
		p[2 * i] = (uint8_t)hexd[v[i] >> 4];
		p[2 * i + 1] = (uint8_t)hexd[v[i] & 15];
	}
	leak_add(set, secret, placeholder, LEAK_HEX, p, 2 * n);

	/*
	 * The value at byte offset k (mod 3) of a longer base64 text: character c
	 * of that text covers bits 6c..6c+5, the value bits 8k..8(k+n)-1; only the
	 * characters wholly inside are the value's alone.
	 */
	for (int a = 0; a < 2; a++) {
		for (size_t k = 0; k < 3; k++) {
			size_t c0 = leak_b64_first(k), c_end = (8 * (k + n) - 6) / 6 + 1, len = c_end - c0;

			p = leak_arena_take(set, len);
			for (size_t c = c0; c < c_end; c++) {
				size_t bit = 6 * c - 8 * k, b = bit / 8, sh = bit % 8;
				unsigned w = (unsigned)v[b] << 8 | (b + 1 < n ? v[b + 1] : 0);

				p[c - c0] = (uint8_t)b64[a][(w >> (10 - sh)) & 63];
			}
			leak_add(set, secret, placeholder, a ? LEAK_B64URL : LEAK_B64, p, len);
		}
	}
}

static bool leak_in_any(const struct egress_secret *s, size_t n, uint8_t c)
{
	for (size_t i = 0; i < n; i++) {
		const uint8_t *ph = (const uint8_t *)s[i].placeholder;

		for (size_t j = 0; j < s[i].value_len; j++) {
			if (leak_lower(s[i].value[j]) == leak_lower(c)) {
				return true;
			}
		}
		for (size_t j = 0; ph[j]; j++) {
			if (leak_lower(ph[j]) == leak_lower(c)) {
				return true;
			}
		}
	}
	return false;
}

/*
 * The marker: the first of "*#~!^|" in no value or placeholder; should a
 * value hold them all, other bytes that are no target or escape character.
 */
static int leak_pick_marker(const struct egress_secret *s, size_t n, uint8_t *ret)
{
	static const char preferred[] = "*#~!^|$&'(),.:;<=>?@[]`{} ";

	for (size_t i = 0; preferred[i]; i++) {
		if (!leak_in_any(s, n, (uint8_t)preferred[i])) {
			*ret = (uint8_t)preferred[i];
			return 0;
		}
	}
	for (unsigned c = 1; c < 256; c++) {
		if ((c < 0x20 || c >= 0x7f) && !leak_in_any(s, n, (uint8_t)c)) {
			*ret = (uint8_t)c;
			return 0;
		}
	}
	return -EINVAL;
}

static void leak_set_bit(uint64_t *m, size_t i)
{
	m[i / 64] |= 1ull << (i % 64);
}

static void leak_index(struct egress_leak_set *set)
{
	for (size_t i = 0; i < set->n_targets; i++) {
		const struct leak_target *t = &set->t[i];
		unsigned kind = t->placeholder ? EGRESS_LEAK_PLACEHOLDERS : EGRESS_LEAK_VALUES;
		uint8_t c0[2] = { t->chars[0], t->chars[0] }, c1[2] = { t->chars[1], t->chars[1] };

		if (t->fold && c0[0] >= 'a' && c0[0] <= 'z') {
			c0[1] = (uint8_t)(c0[0] - 32);
		}
		if (t->fold && c1[0] >= 'a' && c1[0] <= 'z') {
			c1[1] = (uint8_t)(c1[0] - 32);
		}
		for (unsigned w = 1; w < 4; w++) {
			if (w & kind) {
				leak_set_bit(set->mask[w], i);
			}
		}
		for (size_t a = 0; a < 2; a++) {
			leak_set_bit(set->first[c0[a]], i);
			for (size_t b = 0; b < 2; b++) {
				unsigned v = (unsigned)c0[a] << 8 | c1[b];

				for (unsigned w = 1; w < 4; w++) {
					if (w & kind) {
						leak_set_bit(set->pair[w], v);
					}
				}
			}
		}
		set->holdback = MAX(set->holdback, t->len * LEAK_TOKEN_MAX);
	}
	/* a pair with an escape byte in it is decided by leak_match_at */
	for (unsigned x = 0; x < 256; x++) {
		for (unsigned w = 1; w < 4; w++) {
			leak_set_bit(set->pair[w], '%' << 8 | x);
			leak_set_bit(set->pair[w], '\\' << 8 | x);
			leak_set_bit(set->pair[w], x << 8 | '%');
			leak_set_bit(set->pair[w], x << 8 | '\\');
		}
	}
}

int egress_leak_set_new(const struct egress_secret *s, size_t n, struct egress_leak_set **ret)
{
	struct egress_leak_set *set;
	size_t arena = 0, total;
	uint8_t marker = '*';
	int r;

	if (n > EGRESS_SECRET_MAX) {
		return -E2BIG;
	}
	for (size_t i = 0; i < n; i++) {
		size_t pl = strnlen(s[i].placeholder, sizeof(s[i].placeholder));

		if (!s[i].value || s[i].value_len < EGRESS_SECRET_VALUE_MIN ||
		    s[i].value_len > EGRESS_SECRET_VALUE_MAX || pl == sizeof(s[i].placeholder) ||
		    (pl > 0 && pl < EGRESS_SECRET_VALUE_MIN)) {
			return -EINVAL;
		}
		arena += leak_arena_need(s[i].value_len) + leak_arena_need(pl);
	}
	r = leak_pick_marker(s, n, &marker);
	if (r < 0) {
		return r;
	}
	total = sizeof(*set) + arena + 1;
	set = secmem_alloc(total);
	if (!set) {
		return -ENOMEM;
	}
	memset(set, 0, sizeof(*set));
	set->map_size = total;
	set->arena_size = arena + 1;
	set->marker = marker;
	for (size_t i = 0; i < n; i++) {
		size_t pl = strlen(s[i].placeholder);

		leak_add_all(set, i, false, s[i].value, s[i].value_len);
		if (pl > 0) {
			leak_add_all(set, i, true, (const uint8_t *)s[i].placeholder, pl);
		}
	}
	leak_index(set);
	if (set->holdback == 0) {
		set->holdback = 1; /* an empty set holds nothing back */
	}
	*ret = set;
	return 0;
}

void egress_leak_set_free(struct egress_leak_set *set)
{
	if (set) {
		secmem_free(set, set->map_size);
	}
}

size_t egress_leak_holdback(const struct egress_leak_set *set)
{
	return set->holdback;
}

uint8_t egress_leak_marker(const struct egress_leak_set *set)
{
	return set->marker;
}

/* ---- describing a match ---- */

/* Does text hold a run of 3 or more bytes of v[0..n)? */
static bool leak_holds_run(const char *text, const uint8_t *v, size_t n)
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

void egress_leak_describe(const struct egress_leak_set *set, const struct egress_secret *s,
			  const struct egress_leak_match *m, char *out, size_t out_size)
{
	const struct egress_secret *sec = &s[m->secret];
	const char *what = m->placeholder ? "placeholder" : "value";
	const char *form = m->form ? m->form : "raw";
	const char *esc = m->escaped ? ", escaped" : "";

	(void)set;
	if (out_size == 0) {
		return;
	}
	/*
	 * Only fixed words and the secret's name. A value that happens to share
	 * three bytes with that text gets a text without the name, and then none:
	 * a reason must never look like it quotes the value.
	 */
	(void)snprintf(out, out_size, "the %s of %s (%s%s)", what, sec->name, form, esc);
	if (!leak_holds_run(out, sec->value, sec->value_len)) {
		return;
	}
	(void)snprintf(out, out_size, "the %s of secret %zu (%s%s)", what, m->secret + 1, form, esc);
	if (!leak_holds_run(out, sec->value, sec->value_len)) {
		return;
	}
	(void)snprintf(out, out_size, "-");
}

/* ---- one-shot ---- */

int egress_leak_find(const struct egress_leak_set *set, unsigned what, const uint8_t *p, size_t n,
		     struct egress_leak_match *ret)
{
	struct egress_leak_match m;

	if (leak_scan(set, leak_what(what), p, n, 0, n, &m) == n) {
		return 0;
	}
	*ret = m;
	return 1;
}

size_t egress_leak_redact(const struct egress_leak_set *set, uint8_t *p, size_t n)
{
	struct egress_leak_match m;
	size_t q = 0, count = 0;

	while (q < n && (q = leak_scan(set, EGRESS_LEAK_VALUES, p, n, q, n, &m)) < n) {
		memset(p + q, set->marker, m.len);
		q += m.len;
		count++;
	}
	return count;
}

/* ---- streams ---- */

int egress_leak_stream_init(struct egress_leak_stream *s, const struct egress_leak_set *set, unsigned what, bool redact)
{
	*s = (struct egress_leak_stream){
		.set = set,
		.what = redact ? EGRESS_LEAK_VALUES : leak_what(what),
		.redact = redact,
	};
	return buf_init(&s->hold, set->holdback - 1 + LEAK_CHUNK, BUF_SECRET);
}

void egress_leak_stream_release(struct egress_leak_stream *s)
{
	buf_release(&s->hold);
}

/*
 * Scan what is held: positions with holdback bytes after them are decided
 * (no match is longer); at the end every position is. Decided bytes go to
 * out. After an error of out the stream is not usable again.
 */
static int leak_stream_run(struct egress_leak_stream *s, bool end, struct buf *out, struct egress_leak_match *ret)
{
	size_t n = buf_len(&s->hold), keep = s->set->holdback - 1, limit, q = 0;
	uint8_t *d = s->hold.data ? s->hold.data + s->hold.off : NULL;
	struct egress_leak_match m;
	int r;

	if (n == 0) {
		return 0;
	}
	limit = end ? n : (n > keep ? n - keep : 0);
	while (q < limit) {
		size_t at = leak_scan(s->set, s->what, d, n, q, limit, &m);

		if (at == n) {
			q = limit;
			break;
		}
		if (!s->redact) {
			r = buf_put(out, d, at);
			if (r < 0) {
				return r;
			}
			buf_reset(&s->hold);
			m.off = m.len = 0;
			s->m = m;
			s->dead = true;
			*ret = m;
			return 1;
		}
		memset(d + at, s->set->marker, m.len);
		q = at + m.len;
	}
	r = buf_put(out, d, q);
	if (r < 0) {
		return r;
	}
	return buf_consume(&s->hold, q);
}

int egress_leak_stream_feed(struct egress_leak_stream *s, const uint8_t *p, size_t n, struct buf *out,
			    struct egress_leak_match *ret)
{
	int r;

	if (s->dead) {
		*ret = s->m;
		return 1;
	}
	while (n > 0) {
		size_t take = MIN(n, LEAK_CHUNK);

		r = buf_put(&s->hold, p, take);
		if (r < 0) {
			return r;
		}
		p += take;
		n -= take;
		r = leak_stream_run(s, false, out, ret);
		if (r != 0) {
			return r;
		}
	}
	return 0;
}

int egress_leak_stream_end(struct egress_leak_stream *s, struct buf *out, struct egress_leak_match *ret)
{
	if (s->dead) {
		*ret = s->m;
		return 1;
	}
	return leak_stream_run(s, true, out, ret);
}
