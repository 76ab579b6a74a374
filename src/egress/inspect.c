/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "banned.h"
#include "clock.h"
#include "egress/inspect.h"
#include "egress/proxy-head.h"
#include "hex.h"

/*
 * The inspector's steps: each step appends at most STEP_ROOM bytes to out
 * (a head with values swapped in, one slice of body with the scan's
 * holdback and framing, one inflated block re-encoded), so a call stops
 * when out has less room than that or the call's EGRESS_INSP_OUT_MAX would
 * be passed.
 */
#define STEP_ROOM ((size_t)128 << 10)
#define SLICE ((size_t)16 << 10) /* body bytes per step */
#define HEAD_OUT_MAX ((size_t)2 * EGRESS_HEAD_MAX) /* a request head with values swapped in */
#define INSP_TMP_MAX ((size_t)256 << 10)
#define ZIN_MAX ((size_t)64 << 10) /* coded response bytes not yet inflated */
#define EV_MAX 48
#define EV_HOLD 24 /* the origin is not read while this many events wait */
#define CT_MAX 128

_Static_assert(STEP_ROOM * 2 <= EGRESS_INSP_OUT_MAX, "a call makes progress within its budget");
_Static_assert(EGRESS_SECRET_MAX <= 32, "bound and swapped secrets are bits of a uint32_t");

/* ---- body framing: Content-Length, chunked (data spans and the trailer section) or close-delimited ---- */

enum fr_state {
	FR_DONE = 0,
	FR_LENGTH,
	FR_CLOSE,
	FR_SIZE,
	FR_EXT,
	FR_SIZE_LF,
	FR_DATA,
	FR_DATA_CR,
	FR_DATA_LF,
	FR_TRAILER,
};

struct frame {
	enum fr_state st;
	bool chunked;
	unsigned digits;
	uint64_t left;
	size_t line;
	struct buf trailer; /* the trailer section with its last CRLF ("\r\n" when there is none) */
};

static void frame_start(struct frame *f, bool chunked, bool has_length, uint64_t length)
{
	buf_reset(&f->trailer);
	f->chunked = chunked;
	f->digits = 0;
	f->left = 0;
	f->line = 0;
	f->st = chunked ? FR_SIZE : has_length ? (length ? FR_LENGTH : FR_DONE) : FR_CLOSE;
	if (f->st == FR_LENGTH) {
		f->left = length;
	}
}

#define CHUNK_BAD "a malformed chunked body (RFC 9112 section 7.1)"

/* One byte of chunk framing: 0, 1 the body ended, -errno with *why. */
static int frame_byte(struct frame *f, uint8_t c, const char **why)
{
	if ((f->st == FR_SIZE || f->st == FR_EXT) && ++f->line > EGRESS_CHUNK_LINE_MAX) {
		*why = "a chunk-size line longer than 4 KiB (EGRESS_CHUNK_LINE_MAX)";
		return -E2BIG;
	}
	switch (f->st) {
	case FR_SIZE:
		if (hex_digit_value(c) >= 0) {
			if (++f->digits > 15) {
				*why = "a chunk size of more than 15 hex digits";
				return -E2BIG;
			}
			f->left = f->left << 4 | (uint64_t)hex_digit_value(c);
			return 0;
		}
		if (f->digits == 0 || (c != ';' && c != ' ' && c != '\t' && c != '\r')) {
			break;
		}
		f->st = c == '\r' ? FR_SIZE_LF : FR_EXT;
		return 0;
	case FR_EXT:
		if (c == '\r') {
			f->st = FR_SIZE_LF;
			return 0;
		}
		if (c != '\t' && (c < 0x20 || c == 0x7f)) {
			break;
		}
		return 0;
	case FR_SIZE_LF:
		if (c != '\n') {
			break;
		}
		f->st = f->left ? FR_DATA : FR_TRAILER;
		return 0;
	case FR_DATA_CR:
		if (c != '\r') {
			break;
		}
		f->st = FR_DATA_LF;
		return 0;
	case FR_DATA_LF:
		if (c != '\n') {
			break;
		}
		f->st = FR_SIZE;
		f->digits = 0;
		f->left = 0;
		f->line = 0;
		return 0;
	case FR_TRAILER: {
		size_t n = buf_len(&f->trailer);
		const uint8_t *t = buf_ptr(&f->trailer);
		if (c == '\n' && (n == 0 || t[n - 1] != '\r')) {
			*why = "a bare LF in a trailer section";
			return -EBADMSG;
		}
		if (n + 1 > EGRESS_TRAILER_MAX || buf_put_u8(&f->trailer, c) < 0) {
			*why = "a trailer section larger than 32 KiB (EGRESS_TRAILER_MAX)";
			return -E2BIG;
		}
		t = buf_ptr(&f->trailer);
		n++;
		if (c == '\n' && (n == 2 || (n >= 4 && memcmp(t + n - 4, "\r\n\r\n", 4) == 0))) {
			f->st = FR_DONE;
			return 1;
		}
		return 0;
	}
	default:
		break;
	}
	*why = CHUNK_BAD;
	return -EBADMSG;
}

/*
 * Feed p[0..n): *used taken; at most one data span (*dp, *dn, at most SLICE
 * bytes) per call. 1 when the body ended (with the last span, if any), 0,
 * or -errno with *why.
 */
static int frame_feed(struct frame *f, const uint8_t *p, size_t n, size_t *used, const uint8_t **dp, size_t *dn,
		      const char **why)
{
	size_t i = 0, k;
	int r;

	*dp = NULL;
	*dn = 0;
	while (i < n && f->st != FR_DONE) {
		switch (f->st) {
		case FR_LENGTH:
		case FR_DATA:
			k = (size_t)MIN((uint64_t)(n - i), f->left);
			k = MIN(k, SLICE);
			*dp = p + i;
			*dn = k;
			i += k;
			f->left -= k;
			if (f->left == 0) {
				f->st = f->st == FR_LENGTH ? FR_DONE : FR_DATA_CR;
			}
			*used = i;
			return f->st == FR_DONE;
		case FR_CLOSE:
			k = MIN(n - i, SLICE);
			*dp = p + i;
			*dn = k;
			*used = i + k;
			return 0;
		default:
			r = frame_byte(f, p[i++], why);
			if (r < 0) {
				*used = i;
				return r;
			}
			break;
		}
	}
	*used = i;
	return f->st == FR_DONE;
}

/* ---- the inspector ---- */

enum rq_state {
	RQ_HEAD = 0,
	RQ_BODY,
	RQ_DONE, /* absolute form after its body, or a "Connection: close" request sent: the rest is dropped */
};

enum rs_state {
	RS_HEAD = 0,
	RS_BODY,
	RS_DONE, /* the exchange is over: the origin's bytes are dropped */
};

enum coding {
	CODING_IDENTITY = 0,
	CODING_GZIP,
	CODING_DEFLATE,
};

enum out_mode {
	OUT_SAME = 0, /* the origin's framing (chunked re-encoded, Content-Length and close kept) */
	OUT_CHUNKED, /* a coded body, re-encoded and sent chunked */
	OUT_CLOSE, /* a coded body of an HTTP/1.0 or close-delimited response: sent close-delimited */
};

struct pend {
	char method[16];
	char path[EGRESS_INSP_PATH_MAX + 1];
	bool head, close;
	uint64_t t0, up;
};

struct egress_insp {
	struct egress_insp_config cfg;
	char host[EGRESS_HOST_TEXT_MAX];
	uint32_t bound; /* the secrets bound to this host */
	bool refused, rs_failed, done;
	struct egress_insp_refusal refusal;

	/* requests */
	enum rq_state rq;
	struct buf rq_head; /* a head being gathered */
	size_t rq_scanned;
	uint64_t rq_t0;
	struct buf held; /* a head with values swapped in, waiting for egress_insp_use_done */
	unsigned uses_waiting;
	bool use_refused;
	size_t use_secret; /* the secret a refused use names */
	uint8_t use_order[EGRESS_SECRET_MAX]; /* the USE events waiting, in order */
	size_t use_next;
	struct frame rq_fr;
	struct egress_leak_stream rq_scan;
	bool rq_scan_live;
	struct pend pend[EGRESS_INSP_PIPELINE_MAX];
	size_t pend_first, n_pend;

	/* responses */
	enum rs_state rs;
	struct buf rs_head;
	size_t rs_scanned;
	bool rs_started, rs_close, rs_ended;
	int status;
	enum coding coding;
	enum out_mode mode;
	bool out_chunked;
	struct frame rs_fr;
	struct egress_leak_stream rs_red;
	bool rs_red_live;
	z_stream zi, zo;
	bool zi_live, zo_live, zi_probe, zi_full, z_end, zo_dirty;
	uint64_t z_total;
	struct buf zin;
	uint64_t down;
	char ctype[CT_MAX];
	struct buf model;

	struct buf tmp; /* one step's scanned or redacted bytes */
	struct buf zout;
	uint8_t dec[SLICE]; /* one inflated block, before redaction */

	struct egress_insp_event ev[EV_MAX];
	size_t ev_first, n_ev;
};

/* zlib's state holds decoded bytes before redaction: wiped when freed. */
#define ZHDR 16
static voidpf z_alloc(voidpf opaque, uInt items, uInt size)
{
	size_t n;
	uint8_t *p;

	(void)opaque;
	if (size_mul(items, size, &n) < 0 || size_add(n, ZHDR, &n) < 0) {
		return NULL;
	}
	p = calloc(1, n);
	if (!p) {
		return NULL;
	}
	memcpy(p, &n, sizeof(n));
	return p + ZHDR;
}

static void z_free(voidpf opaque, voidpf a)
{
	uint8_t *p;
	size_t n;

	(void)opaque;
	if (!a) {
		return;
	}
	p = (uint8_t *)a - ZHDR;
	memcpy(&n, p, sizeof(n));
	explicit_bzero(p, n);
	free(p);
}

static uint64_t now_ms(const struct egress_insp *h)
{
	return h->cfg.now_ms ? h->cfg.now_ms() : clock_mono_ms();
}

static bool can_step(const struct buf *out, size_t start)
{
	return buf_avail(out) >= STEP_ROOM && buf_len(out) - start + STEP_ROOM <= EGRESS_INSP_OUT_MAX;
}

static void push_event(struct egress_insp *h, const struct egress_insp_event *e)
{
	/* The caller drains events after each call; requests and responses wait while EV_HOLD are queued. */
	if (h->n_ev == EV_MAX) {
		return;
	}
	h->ev[(h->ev_first + h->n_ev) % EV_MAX] = *e;
	h->n_ev++;
}

int egress_insp_event(struct egress_insp *h, struct egress_insp_event *ret)
{
	if (h->n_ev == 0) {
		return 0;
	}
	*ret = h->ev[h->ev_first];
	explicit_bzero(&h->ev[h->ev_first], sizeof(h->ev[0]));
	h->ev_first = (h->ev_first + 1) % EV_MAX;
	h->n_ev--;
	return 1;
}

/* ---- refusals ---- */

static int refuse(struct egress_insp *h, int status, const char *rule, const char *fmt, ...) _printf_(4, 5);
static int refuse(struct egress_insp *h, int status, const char *rule, const char *fmt, ...)
{
	va_list ap;

	h->refused = true;
	h->refusal.status = status;
	h->refusal.rule = rule;
	va_start(ap, fmt);
	(void)vsnprintf(h->refusal.message, sizeof(h->refusal.message), fmt, ap);
	va_end(ap);
	return -EACCES;
}

static int refuse_malformed(struct egress_insp *h, const char *why)
{
	return refuse(h, 400, "malformed-request",
		      "tkbox egress: refused (rule malformed-request): the request to %s is not well-formed HTTP/1.1: "
		      "%s. Send a well-formed HTTP/1.1 request.",
		      h->host, why);
}

static int bad_response(struct egress_insp *h, const char *why)
{
	h->rs_failed = true;
	h->refusal.status = 502;
	h->refusal.rule = "bad-response";
	(void)snprintf(h->refusal.message, sizeof(h->refusal.message),
		       "tkbox egress: the origin %s broke HTTP/1.1 (%s); its response was not relayed (rule "
		       "bad-response). Retry, or report it to the origin's operator.",
		       h->host, why);
	return -EPROTO;
}

static void hosts_text(const struct egress_secret *s, char *out, size_t n)
{
	size_t at = 0;

	out[0] = '\0';
	for (size_t i = 0; i < s->n_hosts && at < n; i++) {
		int k = snprintf(out + at, n - at, "%s%s", i ? ", " : "", s->hosts[i]);
		if (k < 0) {
			break;
		}
		at += (size_t)k;
	}
}

/* A leak: the event, and the refusal that says which rule and what a person can do. */
static int refuse_leak(struct egress_insp *h, const struct egress_leak_match *m, const char *where)
{
	const struct egress_secret *s = &h->cfg.secrets[m->secret];
	struct egress_insp_event e = { .type = EGRESS_INSP_LEAK, .secret = m->secret };
	char what[160], hosts[256];

	egress_leak_describe(h->cfg.leak, h->cfg.secrets, m, what, sizeof(what)); /* s indexed by m->secret (leak.c) */
	hosts_text(s, hosts, sizeof(hosts));
	(void)snprintf(e.reason, sizeof(e.reason), "%s: %s", where, what);
	push_event(h, &e);
	if (!(h->bound & (1u << m->secret))) {
		return refuse(
			h, 403, "secret-leak",
			"tkbox egress: refused (rule secret-leak): the request to %s carried %s in %s; secrets go "
			"only to their bound hosts (%s) in header %s. To send it elsewhere, bind it: tkbox run "
			"--secret %s=...@%s",
			h->host, what, where, hosts, s->header, s->name, h->host);
	}
	if (!h->cfg.tunnel) {
		return refuse(h, 403, "secret-leak",
			      "tkbox egress: refused (rule secret-leak): the request to %s carried %s in %s over plain "
			      "HTTP; the proxy swaps %s in only over HTTPS, in header %s. Use https://%s/.",
			      h->host, what, where, s->name, s->header, h->host);
	}
	return refuse(h, 403, "secret-leak",
		      "tkbox egress: refused (rule secret-leak): the request to %s carried %s in %s; the proxy swaps "
		      "%s in only in header %s of requests to %s. Put the placeholder $%s only in header %s.",
		      h->host, what, where, s->name, s->header, hosts, s->name, s->header);
}

/* ---- creation ---- */

int egress_insp_new(const struct egress_insp_config *cfg, struct egress_insp **ret)
{
	struct egress_insp *h;
	size_t hn;
	int r;

	if (!cfg || !cfg->host || cfg->n_secrets > EGRESS_SECRET_MAX ||
	    (cfg->n_secrets && (!cfg->secrets || !cfg->leak))) {
		return -EINVAL;
	}
	hn = strlen(cfg->host);
	if (hn == 0 || hn >= EGRESS_HOST_TEXT_MAX) {
		return -EINVAL;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		return -ENOMEM;
	}
	h->cfg = *cfg;
	memcpy(h->host, cfg->host, hn + 1);
	h->cfg.host = h->host;
	if (!cfg->n_secrets) {
		h->cfg.leak = NULL;
	}
	for (size_t i = 0; i < cfg->n_secrets; i++) {
		if (egress_secret_bound(&cfg->secrets[i], h->host)) {
			h->bound |= 1u << i;
		}
	}
	if ((r = buf_init(&h->rq_head, EGRESS_HEAD_MAX, BUF_SECRET)) < 0 ||
	    (r = buf_init(&h->held, HEAD_OUT_MAX, BUF_SECRET)) < 0 ||
	    (r = buf_init(&h->rq_fr.trailer, EGRESS_TRAILER_MAX, BUF_SECRET)) < 0 ||
	    (r = buf_init(&h->rs_head, EGRESS_HEAD_MAX, BUF_SECRET)) < 0 ||
	    (r = buf_init(&h->rs_fr.trailer, EGRESS_TRAILER_MAX, BUF_SECRET)) < 0 ||
	    (r = buf_init(&h->zin, ZIN_MAX, BUF_SECRET)) < 0 ||
	    (r = buf_init(&h->model, EGRESS_MODEL_BODY_MAX, BUF_SECRET)) < 0 ||
	    (r = buf_init(&h->tmp, INSP_TMP_MAX, BUF_SECRET)) < 0 ||
	    (r = buf_init(&h->zout, INSP_TMP_MAX, BUF_SECRET)) < 0) {
		egress_insp_free(h);
		return r;
	}
	*ret = h;
	return 0;
}

static void zlib_end(struct egress_insp *h)
{
	if (h->zi_live) {
		(void)inflateEnd(&h->zi);
		h->zi_live = false;
	}
	if (h->zo_live) {
		(void)deflateEnd(&h->zo);
		h->zo_live = false;
	}
}

void egress_insp_free(struct egress_insp *h)
{
	if (!h) {
		return;
	}
	zlib_end(h);
	if (h->rq_scan_live) {
		egress_leak_stream_release(&h->rq_scan);
	}
	if (h->rs_red_live) {
		egress_leak_stream_release(&h->rs_red);
	}
	buf_release(&h->rq_head);
	buf_release(&h->held);
	buf_release(&h->rq_fr.trailer);
	buf_release(&h->rs_head);
	buf_release(&h->rs_fr.trailer);
	buf_release(&h->zin);
	buf_release(&h->model);
	buf_release(&h->tmp);
	buf_release(&h->zout);
	explicit_bzero(h, sizeof(*h));
	free(h);
}

const struct egress_insp_refusal *egress_insp_refusal(const struct egress_insp *h)
{
	return &h->refusal;
}

bool egress_insp_done(const struct egress_insp *h)
{
	return h->done;
}

bool egress_insp_waiting(const struct egress_insp *h)
{
	return h->uses_waiting > 0;
}

bool egress_insp_response_started(const struct egress_insp *h)
{
	return h->rs_started;
}

void egress_insp_use_done(struct egress_insp *h, bool ok)
{
	if (h->uses_waiting == 0) {
		return;
	}
	if (!ok) {
		/* Final: the request is refused whatever the other uses would say. */
		h->use_refused = true;
		h->use_secret = h->use_order[h->use_next];
		h->uses_waiting = 0;
		buf_reset(&h->held);
		return;
	}
	h->uses_waiting--;
	h->use_next++;
}

/* ---- small text helpers over a head's bytes ---- */

static bool name_is(const uint8_t *l, size_t n, const char *name)
{
	return strlen(name) == n && strncasecmp((const char *)l, name, n) == 0;
}

/* Does the comma-separated list v[0..n) hold token tok (any case)? */
static bool list_has(const uint8_t *v, size_t n, const char *tok)
{
	size_t i = 0, tn = strlen(tok);

	while (i < n) {
		size_t s, e;
		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) {
			i++;
		}
		s = i;
		while (i < n && v[i] != ',') {
			i++;
		}
		for (e = i; e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'); e--) {
		}
		if (e - s == tn && strncasecmp((const char *)v + s, tok, tn) == 0) {
			return true;
		}
	}
	return false;
}

/* A field line l[0..n) already checked by egress_head_fields: its name and its value without OWS. */
static void field_split(const uint8_t *l, size_t n, size_t *name_n, size_t *vs, size_t *ve)
{
	const uint8_t *c = memchr(l, ':', n);
	size_t i = c ? (size_t)(c - l) : n, s = MIN(i + 1, n), e = n;

	while (s < e && (l[s] == ' ' || l[s] == '\t')) {
		s++;
	}
	while (e > s && (l[e - 1] == ' ' || l[e - 1] == '\t')) {
		e--;
	}
	*name_n = i;
	*vs = s;
	*ve = e;
}

/* The line at pos in p[0..len): its end (the CR). */
static size_t line_end(const uint8_t *p, size_t len, size_t pos)
{
	while (pos + 1 < len && !(p[pos] == '\r' && p[pos + 1] == '\n')) {
		pos++;
	}
	return pos;
}

static int put_chunk(struct buf *out, const uint8_t *p, size_t n)
{
	int r;

	if (n == 0) {
		return 0;
	}
	r = buf_putf(out, "%zx\r\n", n);
	if (r >= 0) {
		r = buf_put(out, p, n);
	}
	if (r >= 0) {
		r = buf_put(out, "\r\n", 2);
	}
	return r;
}

/* ---- requests ---- */

/* The secrets whose placeholder is swapped in a header of this name here: bound to this host, tunnel only. */
static uint32_t swap_set(const struct egress_insp *h, const uint8_t *name, size_t n)
{
	uint32_t set = 0;

	if (!h->cfg.tunnel) {
		return 0;
	}
	for (size_t i = 0; i < h->cfg.n_secrets; i++) {
		if ((h->bound & (1u << i)) && name_is(name, n, h->cfg.secrets[i].header)) {
			set |= 1u << i;
		}
	}
	return set;
}

/*
 * The placeholders of set in v[0..n), exactly as the box holds them: each
 * occurrence is masked in mask (the leak scan's copy, when not NULL) and
 * written to out as the value (when out is not NULL); *ret_swapped gets the
 * secrets found.
 */
static int swap_value(const struct egress_insp *h, uint32_t set, const uint8_t *v, size_t n, uint8_t *mask,
		      struct buf *out, uint32_t *ret_swapped)
{
	size_t i = 0, from = 0;
	int r;

	while (i < n) {
		size_t hit = SIZE_MAX;
		for (size_t s = 0; s < h->cfg.n_secrets && hit == SIZE_MAX; s++) {
			const char *ph = h->cfg.secrets[s].placeholder;
			size_t pn = strlen(ph);
			if ((set & (1u << s)) && pn && n - i >= pn && memcmp(v + i, ph, pn) == 0) {
				hit = s;
			}
		}
		if (hit == SIZE_MAX) {
			i++;
			continue;
		}
		const struct egress_secret *s = &h->cfg.secrets[hit];
		size_t pn = strlen(s->placeholder);
		if (mask) {
			memset(mask + i, egress_leak_marker(h->cfg.leak), pn);
		}
		if (out &&
		    ((r = buf_put(out, v + from, i - from)) < 0 || (r = buf_put(out, s->value, s->value_len)) < 0)) {
			return r;
		}
		*ret_swapped |= 1u << hit;
		i += pn;
		from = i;
	}
	if (out && (r = buf_put(out, v + from, n - from)) < 0) {
		return r;
	}
	return 0;
}

/*
 * The leak check of a whole head before any of it goes: the request line
 * and every field, each swapped placeholder masked. 0, or the refusal.
 */
static int head_leak_check(struct egress_insp *h, const uint8_t *p, size_t len, uint32_t *ret_swapped)
{
	struct egress_leak_match m;
	uint8_t *copy;
	size_t pos, eol, name_n, vs, ve, mline = 0;
	char where[96];
	int r = 0;

	*ret_swapped = 0;
	if (!h->cfg.leak) {
		return 0;
	}
	copy = malloc(len);
	if (!copy) {
		return -ENOMEM;
	}
	memcpy(copy, p, len);
	for (pos = line_end(p, len, 0) + 2; pos < len; pos = eol + 2) {
		eol = line_end(p, len, pos);
		if (eol == pos) {
			break;
		}
		field_split(p + pos, eol - pos, &name_n, &vs, &ve);
		uint32_t set = swap_set(h, p + pos, name_n);
		if (set) {
			r = swap_value(h, set, p + pos + vs, ve - vs, copy + pos + vs, NULL, ret_swapped);
		}
	}
	if (r == 0 &&
	    egress_leak_find(h->cfg.leak, EGRESS_LEAK_VALUES | EGRESS_LEAK_PLACEHOLDERS, copy, len, &m) == 1) {
		for (pos = 0; pos < len; pos = eol + 2) {
			eol = line_end(p, len, pos);
			if (m.off < eol + 2) {
				mline = pos;
				break;
			}
		}
		if (mline == 0) {
			(void)snprintf(where, sizeof(where), "the request line");
		} else {
			eol = line_end(p, len, mline);
			field_split(p + mline, eol - mline, &name_n, &vs, &ve);
			if (m.off < mline + name_n + 1 || name_n > 64) {
				(void)snprintf(where, sizeof(where), "a header name");
			} else {
				(void)snprintf(where, sizeof(where), "header %.*s", (int)name_n,
					       (const char *)p + mline);
			}
		}
		r = refuse_leak(h, &m, where);
	}
	explicit_bzero(copy, len);
	free(copy);
	return r;
}

struct req_line {
	const uint8_t *method;
	size_t method_n;
	const uint8_t *target; /* the path and query as they go to the origin */
	size_t target_n;
};

static bool tchar(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != '\0' && strchr("!#$%&'*+-.^_`|~", c));
}

/* "METHOD SP origin-form SP HTTP/1.1" inside a tunnel (F3: no other target form). */
static int parse_origin_line(struct egress_insp *h, const uint8_t *l, size_t n, struct req_line *rl)
{
	const uint8_t *sp1 = memchr(l, ' ', n), *sp2;
	size_t tn;

	sp2 = sp1 ? memchr(sp1 + 1, ' ', n - (size_t)(sp1 - l) - 1) : NULL;
	if (!sp1 || !sp2 || sp2 == sp1 + 1 || memchr(sp2 + 1, ' ', (size_t)(l + n - sp2 - 1))) {
		return refuse_malformed(h, "the request line is not METHOD SP target SP HTTP/1.1");
	}
	if ((size_t)(l + n - sp2 - 1) != 8 || memcmp(sp2 + 1, "HTTP/1.1", 8) != 0) {
		return refuse_malformed(h, "the request is not HTTP/1.1 (HTTP/1.0, HTTP/2 and others are not read "
					   "on an inspected connection)");
	}
	rl->method = l;
	rl->method_n = (size_t)(sp1 - l);
	if (rl->method_n >= sizeof(((struct pend *)NULL)->method)) {
		return refuse_malformed(h, "a method longer than 15 bytes");
	}
	for (size_t i = 0; i < rl->method_n; i++) {
		if (!tchar(l[i])) {
			return refuse_malformed(h, "a method that is not a token");
		}
	}
	rl->target = sp1 + 1;
	rl->target_n = tn = (size_t)(sp2 - sp1 - 1);
	if (tn > EGRESS_TARGET_MAX) {
		return refuse_malformed(h, "the request target is longer than 8 KiB (EGRESS_TARGET_MAX)");
	}
	for (size_t i = 0; i < tn; i++) {
		if (rl->target[i] <= 0x20 || rl->target[i] >= 0x7f) {
			return refuse_malformed(h, "the request target holds a byte outside printable ASCII");
		}
	}
	if (!(rl->target[0] == '/' || (tn == 1 && rl->target[0] == '*' && name_is(l, rl->method_n, "OPTIONS")))) {
		return refuse(
			h, 403, "request-target",
			"tkbox egress: refused (rule request-target): inside the HTTPS tunnel to %s a request must "
			"name only a path (origin form, /path?query); an absolute or authority target could carry "
			"a secret to another host. Send the path only, with Host: %s.",
			h->host, h->host);
	}
	return 0;
}

/* The tunnel's Host: present, the tunnel's host, and its port when it names one. */
static int check_tunnel_host(struct egress_insp *h, const uint8_t *v, size_t n)
{
	struct egress_host hh;
	uint16_t port;

	if (!v) {
		return refuse_malformed(h, "an HTTP/1.1 request without a Host header");
	}
	if (egress_hostport_parse((const char *)v, n, &hh, &port) < 0 || strcmp(hh.name, h->host) != 0 ||
	    (port != 0 && port != h->cfg.port)) {
		return refuse(
			h, 403, "host-mismatch",
			"tkbox egress: refused (rule host-mismatch): the request's Host header names another host "
			"or port than this tunnel's, %s:%u; on an inspected connection every request must name the "
			"tunnel's host. Open a connection to the other host (CONNECT) instead.",
			h->host, (unsigned)h->cfg.port);
	}
	return 0;
}

/* Accept-Encoding: only the codings the proxy can read (gzip, x-gzip, deflate, identity). */
static int put_accept_encoding(struct buf *o, const uint8_t *v, size_t n)
{
	static const char *const ok[] = { "gzip", "x-gzip", "deflate", "identity" };
	size_t i = 0, kept = 0;
	int r = buf_put(o, "Accept-Encoding: ", 17);

	while (r >= 0 && i < n) {
		size_t s, e, c;
		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) {
			i++;
		}
		s = i;
		while (i < n && v[i] != ',') {
			i++;
		}
		for (e = i; e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'); e--) {
		}
		for (c = s; c < e && v[c] != ';' && v[c] != ' ' && v[c] != '\t'; c++) {
		}
		for (size_t k = 0; k < ARRAY_SIZE(ok); k++) {
			if (name_is(v + s, c - s, ok[k])) {
				if (kept++ && (r = buf_put(o, ", ", 2)) < 0) {
					break;
				}
				r = buf_put(o, v + s, e - s);
				break;
			}
		}
	}
	if (r >= 0 && kept == 0) {
		r = buf_put(o, "identity", 8);
	}
	return r < 0 ? r : buf_put(o, "\r\n", 2);
}

static void path_of(const uint8_t *t, size_t n, char *out)
{
	const uint8_t *q = memchr(t, '?', n);
	size_t k = MIN(q ? (size_t)(q - t) : n, (size_t)EGRESS_INSP_PATH_MAX);

	/* The target is printable ASCII: cutting anywhere cuts at a character. */
	memcpy(out, t, k);
	out[k] = '\0';
}

static void after_request(struct egress_insp *h, bool close)
{
	h->rq = !h->cfg.tunnel || close ? RQ_DONE : RQ_HEAD;
}

/* Rewrite the head's fields into o: 0, or the refusal. *ret_close for "Connection: close". */
static int rewrite_fields(struct egress_insp *h, const uint8_t *p, size_t len, bool body, struct buf *o,
			  uint32_t *swapped, bool *ret_close)
{
	bool saw_ae = false, close = false;
	size_t pos, eol, name_n, vs, ve;
	int r = 0;

	for (pos = line_end(p, len, 0) + 2; pos < len && r >= 0; pos = eol + 2) {
		const uint8_t *l = p + pos;
		eol = line_end(p, len, pos);
		if (eol == pos) {
			break;
		}
		field_split(l, eol - pos, &name_n, &vs, &ve);
		if (name_is(l, name_n, "upgrade") ||
		    (name_is(l, name_n, "connection") && list_has(l + vs, ve - vs, "upgrade"))) {
			return refuse(
				h, 403, "upgrade",
				"tkbox egress: refused (rule upgrade): a protocol upgrade (WebSocket, h2c) cannot be "
				"read on a connection the proxy inspects for secrets (%s); send plain HTTP/1.1 "
				"requests there, or use a host that has no bound secret and is not under --inspect "
				"all.",
				h->host);
		}
		if (name_is(l, name_n, "connection") && list_has(l + vs, ve - vs, "close")) {
			close = true;
		}
		if (body && name_is(l, name_n, "content-encoding") && !name_is(l + vs, ve - vs, "identity") &&
		    ve > vs) {
			return refuse(h, 403, "request-encoding",
				      "tkbox egress: refused (rule request-encoding): the request body to %s has a "
				      "Content-Encoding; the proxy must read request bodies on this connection to keep "
				      "secrets in. Send the body unencoded.",
				      h->host);
		}
		if (!h->cfg.tunnel && (name_is(l, name_n, "connection") || name_is(l, name_n, "keep-alive") ||
				       name_is(l, name_n, "proxy-connection") ||
				       name_is(l, name_n, "proxy-authorization") || name_is(l, name_n, "te"))) {
			continue; /* hop-by-hop: the origin gets "Connection: close" */
		}
		if (name_is(l, name_n, "accept-encoding")) {
			saw_ae = true;
			r = h->bound ? buf_put(o, "Accept-Encoding: identity\r\n", 27)
				     : put_accept_encoding(o, l + vs, ve - vs);
			continue;
		}
		uint32_t set = swap_set(h, l, name_n);
		if (set) {
			if ((r = buf_put(o, l, name_n)) < 0 || (r = buf_put(o, ": ", 2)) < 0 ||
			    (r = swap_value(h, set, l + vs, ve - vs, NULL, o, swapped)) < 0) {
				break;
			}
			r = buf_put(o, "\r\n", 2);
			continue;
		}
		r = buf_put(o, l, eol - pos + 2);
	}
	if (r >= 0 && !saw_ae && h->bound) {
		r = buf_put(o, "Accept-Encoding: identity\r\n", 27);
	}
	if (r >= 0 && !h->cfg.tunnel) {
		r = buf_put(o, "Connection: close\r\n", 19);
	}
	if (r >= 0) {
		r = buf_put(o, "\r\n", 2);
	}
	if (r == -E2BIG) {
		return refuse_malformed(h, "the request head with the secrets swapped in is larger than 64 KiB");
	}
	*ret_close = close;
	return r;
}

/* A whole request head in h->rq_head: check, rewrite, and send or hold it. */
static int rq_head_done(struct egress_insp *h, struct buf *out)
{
	const uint8_t *p = buf_ptr(&h->rq_head), *hostv = NULL;
	size_t len = buf_len(&h->rq_head), l0 = line_end(p, len, 0), hostn = 0;
	struct egress_head fh, ah;
	struct req_line rl = { 0 };
	const char *why = "malformed request head";
	uint32_t masked = 0, swapped = 0;
	struct buf o;
	struct pend *pd;
	bool body, close = false;
	int r;

	r = head_leak_check(h, p, len, &masked);
	if (r < 0) {
		return r;
	}
	if (l0 == 0 || memchr(p, '\0', l0)) {
		return refuse_malformed(h, "an empty request line or a NUL byte in it");
	}
	r = egress_head_fields(p, len, &fh, &hostv, &hostn, &why);
	if (r != 1) {
		return refuse_malformed(h, why);
	}
	if (h->cfg.tunnel) {
		r = parse_origin_line(h, p, l0, &rl);
		if (r == 0) {
			r = check_tunnel_host(h, hostv, hostn);
		}
	} else {
		r = egress_head_parse(p, len, &ah, &why);
		if (r == 1 &&
		    (ah.kind != EGRESS_REQ_ABSOLUTE || strcmp(ah.host.name, h->host) != 0 || ah.port != h->cfg.port)) {
			r = -EACCES;
		}
		if (r == -EACCES) {
			r = refuse(h, 403, "host-mismatch",
				   "tkbox egress: refused (rule host-mismatch): the request does not name %s:%u, the "
				   "host this connection was opened for. Send one request per connection.",
				   h->host, (unsigned)h->cfg.port);
		} else if (r != 1) {
			r = refuse_malformed(h, why);
		} else {
			rl.method = p;
			rl.method_n = (size_t)((const uint8_t *)memchr(p, ' ', l0) - p);
			rl.target = p + ah.path_off;
			rl.target_n = ah.path_len;
			r = 0;
		}
	}
	if (r < 0) {
		return r;
	}
	body = fh.chunked || (fh.has_length && fh.content_length > 0);
	r = buf_init(&o, HEAD_OUT_MAX, BUF_SECRET);
	if (r < 0) {
		return r;
	}
	/* The request line: as checked (tunnel), or in origin form (absolute). */
	if (h->cfg.tunnel) {
		r = buf_put(&o, p, l0 + 2);
	} else {
		bool slash = rl.target_n > 0 && rl.target[0] == '/';
		r = buf_putf(&o, "%.*s %s%.*s HTTP/1.1\r\n", (int)rl.method_n, (const char *)rl.method,
			     slash ? "" : "/", (int)rl.target_n, (const char *)rl.target);
	}
	if (r >= 0) {
		r = rewrite_fields(h, p, len, body, &o, &swapped, &close);
	}
	if (r < 0) {
		buf_release(&o);
		return r;
	}
	/* The placeholders masked for the scan are exactly the ones swapped in. */
	if (swapped != masked) {
		buf_release(&o);
		return refuse_malformed(h, "the bound header could not be rewritten");
	}
	if (swapped) {
		buf_reset(&h->held);
		h->use_next = 0;
		r = buf_put(&h->held, buf_ptr(&o), buf_len(&o));
		for (size_t i = 0; r >= 0 && i < h->cfg.n_secrets; i++) {
			if (swapped & (1u << i)) {
				struct egress_insp_event e = { .type = EGRESS_INSP_USE, .secret = i };
				push_event(h, &e);
				h->use_order[h->uses_waiting++] = (uint8_t)i;
			}
		}
	} else {
		r = buf_put(out, buf_ptr(&o), buf_len(&o));
	}
	buf_release(&o);
	if (r < 0) {
		return r;
	}
	pd = &h->pend[(h->pend_first + h->n_pend) % EGRESS_INSP_PIPELINE_MAX];
	*pd = (struct pend){ .t0 = h->rq_t0, .head = name_is(rl.method, rl.method_n, "HEAD"), .close = close };
	memcpy(pd->method, rl.method, MIN(rl.method_n, sizeof(pd->method) - 1));
	if (rl.target_n == 0) {
		pd->path[0] = '/';
	} else {
		path_of(rl.target, rl.target_n, pd->path);
	}
	h->n_pend++;
	if (!body) {
		after_request(h, close);
		return 0;
	}
	frame_start(&h->rq_fr, fh.chunked, fh.has_length, fh.content_length);
	if (h->cfg.leak) {
		r = egress_leak_stream_init(&h->rq_scan, h->cfg.leak, EGRESS_LEAK_VALUES | EGRESS_LEAK_PLACEHOLDERS,
					    false);
		if (r < 0) {
			return r;
		}
		h->rq_scan_live = true;
	}
	h->rq = RQ_BODY;
	return 0;
}

/*
 * Gather bytes of a request or response head into *head, EGRESS_HEAD_MAX in
 * all; *k: bytes of p taken. *scanned is how far earlier calls looked for the
 * blank line: the search restarts 3 bytes before it, as a CRLFCRLF may straddle
 * two calls. Returns 1 when *head holds one whole head (trimmed to it: the bytes
 * after it are left untaken, and *scanned is back to 0), 0 when the head goes on
 * (the caller refuses one that has reached EGRESS_HEAD_MAX), or a -errno.
 */
static int head_gather(struct buf *head, size_t *scanned, const uint8_t *p, size_t n, size_t *k)
{
	size_t have = buf_len(head), take = MIN(n, EGRESS_HEAD_MAX - have), from, len, head_len;
	const uint8_t *b, *end;
	int r;

	r = buf_put(head, p, take);
	if (r < 0) {
		return r;
	}
	b = buf_ptr(head);
	len = have + take;
	from = *scanned > 3 ? *scanned - 3 : 0;
	end = memmem(b + from, len - from, "\r\n\r\n", 4);
	if (!end) {
		*k = take;
		*scanned = len;
		return 0;
	}
	head_len = (size_t)(end - b) + 4;
	*k = take - (len - head_len);
	head->len -= len - head_len;
	*scanned = 0;
	return 1;
}

/* Gather head bytes: *k taken; a whole head is handled at once. */
static int rq_head_feed(struct egress_insp *h, const uint8_t *p, size_t n, size_t *k, struct buf *out)
{
	int r;

	if (buf_len(&h->rq_head) == 0 && n > 0) {
		h->rq_t0 = now_ms(h);
	}
	r = head_gather(&h->rq_head, &h->rq_scanned, p, n, k);
	if (r < 0) {
		return r;
	}
	if (r == 0) {
		return buf_len(&h->rq_head) >= EGRESS_HEAD_MAX
			       ? refuse_malformed(h, "the request head is larger than 32 KiB (EGRESS_HEAD_MAX)")
			       : 0;
	}
	r = rq_head_done(h, out);
	buf_reset(&h->rq_head);
	return r;
}

/* A trailer section t[0..tn) (its last CRLF included) by the head's field rules. */
static bool trailer_ok(const uint8_t *t, size_t tn, const char **why)
{
	uint8_t fake[3 + EGRESS_TRAILER_MAX];
	struct egress_head th;
	const uint8_t *hv;
	size_t hn;
	int r;

	if (tn > EGRESS_TRAILER_MAX) {
		*why = "a trailer section larger than 32 KiB (EGRESS_TRAILER_MAX)";
		return false;
	}
	memcpy(fake, "T\r\n", 3);
	memcpy(fake + 3, t, tn);
	r = egress_head_fields(fake, 3 + tn, &th, &hv, &hn, why);
	explicit_bzero(fake, 3 + tn);
	return r == 1;
}

/* The scanned bytes in h->tmp go, in the request's framing. */
static int rq_emit(struct egress_insp *h, struct buf *out)
{
	int r = h->rq_fr.chunked ? put_chunk(out, buf_ptr(&h->tmp), buf_len(&h->tmp))
				 : buf_put(out, buf_ptr(&h->tmp), buf_len(&h->tmp));
	buf_reset(&h->tmp);
	return r;
}

static int rq_body_end(struct egress_insp *h, struct buf *out)
{
	struct egress_leak_match m;
	int r = 0;

	if (h->rq_scan_live) {
		r = egress_leak_stream_end(&h->rq_scan, &h->tmp, &m);
		if (r == 1) {
			return refuse_leak(h, &m, "the body");
		}
		if (r < 0) {
			return r;
		}
		egress_leak_stream_release(&h->rq_scan);
		h->rq_scan_live = false;
	}
	r = rq_emit(h, out);
	if (r >= 0 && h->rq_fr.chunked) {
		const uint8_t *t = buf_ptr(&h->rq_fr.trailer);
		size_t tn = buf_len(&h->rq_fr.trailer);
		const char *why = "a malformed trailer section";

		if (!trailer_ok(t, tn, &why)) {
			return refuse_malformed(h, why);
		}
		if (h->cfg.leak &&
		    egress_leak_find(h->cfg.leak, EGRESS_LEAK_VALUES | EGRESS_LEAK_PLACEHOLDERS, t, tn, &m) == 1) {
			return refuse_leak(h, &m, "a trailer");
		}
		r = buf_put(out, "0\r\n", 3);
		if (r >= 0) {
			r = buf_put(out, t, tn);
		}
		buf_reset(&h->rq_fr.trailer);
	}
	if (r < 0) {
		return r;
	}
	after_request(h, h->pend[(h->pend_first + h->n_pend - 1) % EGRESS_INSP_PIPELINE_MAX].close);
	return 0;
}

static int rq_body_feed(struct egress_insp *h, const uint8_t *p, size_t n, size_t *k, struct buf *out)
{
	struct egress_leak_match m;
	const uint8_t *dp;
	const char *why = CHUNK_BAD;
	size_t dn;
	int r, fr;

	fr = frame_feed(&h->rq_fr, p, n, k, &dp, &dn, &why);
	if (fr < 0) {
		return refuse_malformed(h, why);
	}
	if (dn) {
		h->pend[(h->pend_first + h->n_pend - 1) % EGRESS_INSP_PIPELINE_MAX].up += dn;
		if (h->rq_scan_live) {
			r = egress_leak_stream_feed(&h->rq_scan, dp, dn, &h->tmp, &m);
			if (r == 1) {
				return refuse_leak(h, &m, "the body");
			}
		} else {
			r = buf_put(&h->tmp, dp, dn);
		}
		if (r < 0 || (r = rq_emit(h, out)) < 0) {
			return r;
		}
	}
	return fr == 1 ? rq_body_end(h, out) : 0;
}

int egress_insp_request(struct egress_insp *h, const uint8_t *p, size_t n, size_t *used, struct buf *out)
{
	size_t i = 0, start = buf_len(out);
	int r = 0;

	*used = 0;
	if (h->refused) {
		return -EACCES;
	}
	if (h->use_refused) {
		const struct egress_secret *s = &h->cfg.secrets[h->use_secret];
		return refuse(h, 503, "swap-refused",
			      "tkbox egress: refused (rule swap-refused): the use of secret %s could not be recorded, "
			      "so it was not sent; the box is being stopped.",
			      s->name);
	}
	if (h->uses_waiting) {
		return 0;
	}
	if (buf_len(&h->held)) {
		if (buf_avail(out) < buf_len(&h->held)) {
			return 0; /* out is drained first */
		}
		r = buf_put(out, buf_ptr(&h->held), buf_len(&h->held));
		if (r < 0) {
			return r;
		}
		buf_reset(&h->held);
	}
	while (i < n && can_step(out, start) && h->n_ev < EV_HOLD) {
		size_t k = 0;
		if (h->rq == RQ_DONE) {
			i = n; /* nothing goes after the exchange's last request */
			break;
		}
		if (h->rq == RQ_HEAD) {
			if (h->n_pend >= EGRESS_INSP_PIPELINE_MAX) {
				break;
			}
			r = rq_head_feed(h, p + i, n - i, &k, out);
		} else {
			r = rq_body_feed(h, p + i, n - i, &k, out);
		}
		if (r < 0) {
			break;
		}
		i += k;
		if (h->uses_waiting || k == 0) {
			break;
		}
	}
	*used = i;
	return r < 0 ? r : 0;
}

int egress_insp_request_eof(struct egress_insp *h)
{
	if (h->refused) {
		return -EACCES;
	}
	if (h->rq == RQ_DONE || (h->rq == RQ_HEAD && buf_len(&h->rq_head) == 0)) {
		return 0;
	}
	return refuse_malformed(h, "the box closed its side inside a request");
}

/* ---- responses ---- */

static struct pend *pend_front(struct egress_insp *h)
{
	return &h->pend[h->pend_first];
}

/* The decoded, redacted bytes in h->tmp: kept for the model, then encoded and framed into out. */
static int rs_emit(struct egress_insp *h, struct buf *out)
{
	const uint8_t *t = buf_ptr(&h->tmp);
	size_t tn = buf_len(&h->tmp);
	int r = 0;

	if (h->cfg.model && tn) {
		r = buf_put(&h->model, t, MIN(tn, buf_avail(&h->model)));
	}
	if (r >= 0 && h->zo_live && tn) {
		h->zo.next_in = (Bytef *)(uintptr_t)t;
		h->zo.avail_in = (uInt)tn;
		while (r >= 0 && h->zo.avail_in > 0) {
			uint8_t *w;
			size_t room = buf_avail(&h->zout);
			if (room == 0 || (r = buf_reserve(&h->zout, room, &w)) < 0) {
				r = r < 0 ? r : -E2BIG;
				break;
			}
			h->zo.next_out = w;
			h->zo.avail_out = (uInt)room;
			if (deflate(&h->zo, Z_NO_FLUSH) == Z_STREAM_ERROR) {
				r = -EIO;
			}
			h->zout.len -= h->zo.avail_out;
		}
		h->zo_dirty = true;
		t = buf_ptr(&h->zout);
		tn = buf_len(&h->zout);
	}
	if (r >= 0 && tn) {
		r = h->out_chunked ? put_chunk(out, t, tn) : buf_put(out, t, tn);
	}
	buf_reset(&h->tmp);
	buf_reset(&h->zout);
	return r;
}

/* The encoder's flush (Z_SYNC_FLUSH) or end (Z_FINISH), framed into out. */
static int rs_deflate_flush(struct egress_insp *h, int mode, struct buf *out)
{
	int zr = Z_OK, r = 0;

	h->zo.next_in = NULL;
	h->zo.avail_in = 0;
	do {
		uint8_t *w;
		size_t room = buf_avail(&h->zout);
		if (room == 0) {
			if ((r = h->out_chunked ? put_chunk(out, buf_ptr(&h->zout), buf_len(&h->zout))
						: buf_put(out, buf_ptr(&h->zout), buf_len(&h->zout))) < 0) {
				return r;
			}
			buf_reset(&h->zout);
			room = buf_avail(&h->zout);
		}
		if ((r = buf_reserve(&h->zout, room, &w)) < 0) {
			return r;
		}
		h->zo.next_out = w;
		h->zo.avail_out = (uInt)room;
		zr = deflate(&h->zo, mode);
		h->zout.len -= h->zo.avail_out;
	} while (h->zo.avail_out == 0 || (mode == Z_FINISH && zr == Z_OK));
	if (zr == Z_STREAM_ERROR) {
		return -EIO;
	}
	r = h->out_chunked ? put_chunk(out, buf_ptr(&h->zout), buf_len(&h->zout))
			   : buf_put(out, buf_ptr(&h->zout), buf_len(&h->zout));
	buf_reset(&h->zout);
	h->zo_dirty = false;
	return r;
}

/* Decoded body bytes: redacted (same length), then emitted. */
static int rs_decoded(struct egress_insp *h, const uint8_t *p, size_t n, struct buf *out)
{
	struct egress_leak_match m;
	int r;

	h->down += n;
	r = h->rs_red_live ? egress_leak_stream_feed(&h->rs_red, p, n, &h->tmp, &m) : buf_put(&h->tmp, p, n);
	if (r < 0) {
		return r;
	}
	return rs_emit(h, out);
}

static int zi_start(struct egress_insp *h)
{
	const uint8_t *b = buf_ptr(&h->zin);
	int bits = 16 + MAX_WBITS;

	if (h->coding == CODING_DEFLATE) {
		/* zlib-wrapped as RFC 9110 says, or raw deflate as some servers send (browsers take both). */
		bool zlib = buf_len(&h->zin) >= 2 && (b[0] & 0x0f) == 8 && (b[0] >> 4) <= 7 &&
			    ((unsigned)b[0] << 8 | b[1]) % 31 == 0;
		bits = zlib ? MAX_WBITS : -MAX_WBITS;
	}
	h->zi = (z_stream){ .zalloc = z_alloc, .zfree = z_free };
	if (inflateInit2(&h->zi, bits) != Z_OK) {
		return -ENOMEM;
	}
	h->zi_live = true;
	h->zi_probe = false;
	return 0;
}

/* Inflate what waits in zin, one block per step, while out has room. */
static int rs_pump(struct egress_insp *h, struct buf *out, size_t start)
{
	int r;

	if (h->zi_probe && (buf_len(&h->zin) >= 2 || (h->rs_ended && buf_len(&h->zin) > 0))) {
		if ((r = zi_start(h)) < 0) {
			return r;
		}
	}
	while (h->zi_live && !h->z_end && (buf_len(&h->zin) > 0 || h->zi_full) && can_step(out, start)) {
		size_t in = buf_len(&h->zin), produced, consumed;
		int zr;

		h->zi.next_in = (Bytef *)(uintptr_t)buf_ptr(&h->zin);
		h->zi.avail_in = (uInt)in;
		h->zi.next_out = h->dec;
		h->zi.avail_out = sizeof(h->dec);
		zr = inflate(&h->zi, Z_NO_FLUSH);
		consumed = in - h->zi.avail_in;
		produced = sizeof(h->dec) - h->zi.avail_out;
		h->zi_full = h->zi.avail_out == 0;
		if (buf_consume(&h->zin, consumed) < 0) {
			return -EIO;
		}
		if (zr == Z_STREAM_END) {
			/* One stream per body: bytes after its end are dropped, never relayed undecoded. */
			h->z_end = true;
			h->zi_full = false;
			buf_reset(&h->zin);
		} else if (zr != Z_OK && zr != Z_BUF_ERROR) {
			explicit_bzero(h->dec, sizeof(h->dec));
			return bad_response(h, "its gzip or deflate body does not decode");
		}
		if (produced) {
			r = rs_decoded(h, h->dec, produced, out);
			explicit_bzero(h->dec, produced);
			if (r < 0) {
				return r;
			}
		}
		if (!produced && !consumed) {
			h->zi_full = false;
			break;
		}
	}
	if (h->z_end) {
		buf_reset(&h->zin); /* drop what follows the stream */
	}
	return 0;
}

static void rs_reset(struct egress_insp *h)
{
	zlib_end(h);
	if (h->rs_red_live) {
		egress_leak_stream_release(&h->rs_red);
		h->rs_red_live = false;
	}
	buf_reset(&h->zin);
	buf_reset(&h->model);
	buf_reset(&h->tmp);
	buf_reset(&h->zout);
	buf_reset(&h->rs_fr.trailer);
	h->rs_started = h->rs_close = h->rs_ended = false;
	h->zi_probe = h->zi_full = h->z_end = h->zo_dirty = false;
	h->coding = CODING_IDENTITY;
	h->mode = OUT_SAME;
	h->out_chunked = false;
	h->z_total = 0;
	h->down = 0;
	h->ctype[0] = '\0';
	h->rs = RS_HEAD;
}

/* A response ended: the model call, the next exchange or the end. */
static void rs_finish(struct egress_insp *h)
{
	struct pend *pd = pend_front(h);

	if (h->cfg.model) {
		struct egress_insp_event e = { .type = EGRESS_INSP_MODEL_CALL, .status = h->status };
		uint64_t now = now_ms(h);
		memcpy(e.method, pd->method, sizeof(e.method));
		memcpy(e.path, pd->path, sizeof(e.path));
		e.bytes_up = pd->up;
		e.bytes_down = h->down;
		e.duration_ms = now > pd->t0 ? now - pd->t0 : 0;
		egress_model_parse(h->ctype, buf_ptr(&h->model), buf_len(&h->model), &e.info);
		push_event(h, &e);
	}
	bool close = h->rs_close || pd->close || !h->cfg.tunnel;
	h->pend_first = (h->pend_first + 1) % EGRESS_INSP_PIPELINE_MAX;
	h->n_pend--;
	rs_reset(h);
	if (close) {
		h->done = true;
		h->rs = RS_DONE;
		h->rq = RQ_DONE;
	}
}

/* The body ended (and zin is drained): the redactor's held bytes, the encoder's end, the last chunk. */
static int rs_body_end(struct egress_insp *h, struct buf *out)
{
	struct egress_leak_match m;
	int r = 0;

	if (h->zi_live && !h->z_end) {
		return bad_response(h, "its gzip or deflate body ended before its stream did");
	}
	if (h->rs_red_live && (r = egress_leak_stream_end(&h->rs_red, &h->tmp, &m)) < 0) {
		return r;
	}
	if ((r = rs_emit(h, out)) < 0) {
		return r;
	}
	if (h->zo_live && (r = rs_deflate_flush(h, Z_FINISH, out)) < 0) {
		return r;
	}
	if (h->out_chunked) {
		uint8_t *t = h->rs_fr.trailer.data ? h->rs_fr.trailer.data + h->rs_fr.trailer.off : NULL;
		size_t tn = buf_len(&h->rs_fr.trailer);

		const char *why = "a malformed trailer section";

		if (h->cfg.leak && tn) {
			(void)egress_leak_redact(h->cfg.leak, t, tn);
		}
		if (tn && !trailer_ok(t, tn, &why)) {
			return bad_response(h, why);
		}
		r = buf_put(out, "0\r\n", 3);
		if (r >= 0) {
			r = tn ? buf_put(out, t, tn) : buf_put(out, "\r\n", 2);
		}
		if (r < 0) {
			return r;
		}
	}
	rs_finish(h);
	return 0;
}

/* The body advances: at the end, when everything decoded went, it is finished. */
static int rs_progress(struct egress_insp *h, struct buf *out, size_t start)
{
	int r = 0;

	if (h->rs != RS_BODY) {
		return 0;
	}
	if (h->zi_probe || h->zi_live) {
		r = rs_pump(h, out, start);
		if (r < 0) {
			return r;
		}
	}
	if (h->rs_ended && buf_len(&h->zin) == 0 && !h->zi_full && !h->zi_probe && can_step(out, start)) {
		return rs_body_end(h, out);
	}
	return 0;
}

static int rs_body_feed(struct egress_insp *h, const uint8_t *p, size_t n, size_t *k, struct buf *out, size_t start)
{
	const uint8_t *dp;
	const char *why = CHUNK_BAD;
	size_t dn;
	int fr, r;

	if (h->coding != CODING_IDENTITY) {
		n = MIN(n, buf_avail(&h->zin));
	}
	fr = frame_feed(&h->rs_fr, p, n, k, &dp, &dn, &why);
	if (fr < 0) {
		return bad_response(h, why);
	}
	if (dn) {
		if (h->coding != CODING_IDENTITY) {
			h->z_total += dn;
			if (!h->z_end && (r = buf_put(&h->zin, dp, dn)) < 0) {
				return r;
			}
		} else if ((r = rs_decoded(h, dp, dn, out)) < 0) {
			return r;
		}
	}
	if (fr == 1) {
		h->rs_ended = true;
		if (h->coding != CODING_IDENTITY && h->z_total == 0) {
			/* An empty coded body: nothing to decode, an empty body goes. */
			zlib_end(h);
			h->zi_probe = false;
		}
	}
	return rs_progress(h, out, start);
}

/* The trimmed value of the first field named name in a head, or NULL. */
static const uint8_t *field_value(const uint8_t *p, size_t len, const char *name, size_t *ret_n)
{
	size_t pos, eol, name_n, vs, ve;

	for (pos = line_end(p, len, 0) + 2; pos < len; pos = eol + 2) {
		eol = line_end(p, len, pos);
		if (eol == pos) {
			break;
		}
		field_split(p + pos, eol - pos, &name_n, &vs, &ve);
		if (name_is(p + pos, name_n, name)) {
			*ret_n = ve - vs;
			return p + pos + vs;
		}
	}
	return NULL;
}

/* Does any Connection field hold tok? */
static bool connection_has(const uint8_t *p, size_t len, const char *tok)
{
	size_t pos, eol, name_n, vs, ve;

	for (pos = line_end(p, len, 0) + 2; pos < len; pos = eol + 2) {
		eol = line_end(p, len, pos);
		if (eol == pos) {
			break;
		}
		field_split(p + pos, eol - pos, &name_n, &vs, &ve);
		if (name_is(p + pos, name_n, "connection") && list_has(p + pos + vs, ve - vs, tok)) {
			return true;
		}
	}
	return false;
}

/* The head of a coded response: framing fields replaced (chunked, or close-delimited). */
static int put_coded_head(struct egress_insp *h, const uint8_t *p, size_t len, struct buf *out)
{
	size_t pos, eol, name_n, vs, ve, l0 = line_end(p, len, 0);
	int r = buf_put(out, p, l0 + 2);

	for (pos = l0 + 2; pos < len && r >= 0; pos = eol + 2) {
		eol = line_end(p, len, pos);
		if (eol == pos) {
			break;
		}
		field_split(p + pos, eol - pos, &name_n, &vs, &ve);
		if (name_is(p + pos, name_n, "content-length") || name_is(p + pos, name_n, "transfer-encoding") ||
		    (h->mode == OUT_CLOSE &&
		     (name_is(p + pos, name_n, "connection") || name_is(p + pos, name_n, "keep-alive")))) {
			continue;
		}
		r = buf_put(out, p + pos, eol - pos + 2);
	}
	if (r >= 0) {
		r = h->mode == OUT_CLOSE ? buf_put(out, "Connection: close\r\n\r\n", 21)
					 : buf_put(out, "Transfer-Encoding: chunked\r\n\r\n", 30);
	}
	return r;
}

static bool digit(uint8_t c)
{
	return c >= '0' && c <= '9';
}

static int rs_head_done(struct egress_insp *h, struct buf *out)
{
	uint8_t *p = h->rs_head.data + h->rs_head.off;
	size_t len = buf_len(&h->rs_head), l0, vn = 0;
	const uint8_t *v, *hv;
	const char *why = "a malformed response head";
	struct egress_head fh;
	struct pend *pd = pend_front(h);
	bool http10, body;
	size_t hn;
	int r;

	/* Redacted first, so the head read is the head the box gets. */
	if (h->cfg.leak) {
		(void)egress_leak_redact(h->cfg.leak, p, len);
	}
	l0 = line_end(p, len, 0);
	if (l0 < 12 || memchr(p, '\0', l0) || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') ||
	    p[8] != ' ' || !digit(p[9]) || !digit(p[10]) || !digit(p[11]) || (l0 > 12 && p[12] != ' ')) {
		return bad_response(h, "a status line that is not HTTP/1.x SP 3DIGIT SP reason");
	}
	for (size_t i = 13; i < l0; i++) {
		if (p[i] != '\t' && (p[i] < 0x20 || p[i] == 0x7f)) {
			return bad_response(h, "a control byte in the status line");
		}
	}
	http10 = p[7] == '0';
	h->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
	if (h->status < 100) {
		/* F2: never relay such a response. */
		return bad_response(h, "a status below 100");
	}
	r = egress_head_fields(p, len, &fh, &hv, &hn, &why);
	if (r != 1) {
		return bad_response(h, why);
	}
	if (h->status < 200) {
		if (h->status != 100 && h->status != 103) {
			return bad_response(h, "an interim status other than 100 and 103 (no upgrade was asked)");
		}
		r = buf_put(out, p, len);
		h->rs_started = true;
		return r;
	}
	body = !(pd->head || h->status == 204 || h->status == 304);
	v = field_value(p, len, "content-encoding", &vn);
	if (body && v && vn && !name_is(v, vn, "identity")) {
		if (name_is(v, vn, "gzip") || name_is(v, vn, "x-gzip")) {
			h->coding = CODING_GZIP;
		} else if (name_is(v, vn, "deflate")) {
			h->coding = CODING_DEFLATE;
		} else {
			h->rs_failed = true;
			h->refusal.status = 502;
			h->refusal.rule = "response-encoding";
			(void)snprintf(
				h->refusal.message, sizeof(h->refusal.message),
				"tkbox egress: the origin %s answered with a Content-Encoding the proxy cannot "
				"read to redact secrets (rule response-encoding); it reads only gzip, x-gzip and "
				"deflate, which is all the request may ask for. Ask without Accept-Encoding, or "
				"report the origin.",
				h->host);
			return -EPROTO;
		}
	}
	v = field_value(p, len, "content-type", &vn);
	if (v) {
		size_t k = MIN(vn, sizeof(h->ctype) - 1);
		memcpy(h->ctype, v, k);
		h->ctype[k] = '\0';
	}
	h->rs_close = connection_has(p, len, "close") || (http10 && !connection_has(p, len, "keep-alive"));
	if (body) {
		frame_start(&h->rs_fr, fh.chunked, fh.has_length, fh.content_length);
	} else {
		frame_start(&h->rs_fr, false, true, 0);
	}
	if (h->rs_fr.st == FR_CLOSE) {
		h->rs_close = true;
	}
	if (h->rs_fr.st == FR_DONE) {
		h->coding = CODING_IDENTITY; /* no body: nothing to decode */
	}
	if (h->coding != CODING_IDENTITY) {
		h->mode = http10 || h->rs_fr.st == FR_CLOSE ? OUT_CLOSE : OUT_CHUNKED;
		h->rs_close = h->rs_close || h->mode == OUT_CLOSE;
		h->out_chunked = h->mode == OUT_CHUNKED;
		r = put_coded_head(h, p, len, out);
		h->zo = (z_stream){ .zalloc = z_alloc, .zfree = z_free };
		if (r >= 0 && deflateInit2(&h->zo, 1, Z_DEFLATED, h->coding == CODING_GZIP ? 16 + MAX_WBITS : MAX_WBITS,
					   8, Z_DEFAULT_STRATEGY) != Z_OK) {
			r = -ENOMEM;
		}
		h->zo_live = r >= 0;
		h->zi_probe = true;
	} else {
		h->mode = OUT_SAME;
		h->out_chunked = h->rs_fr.chunked;
		r = buf_put(out, p, len);
	}
	if (r < 0) {
		return r;
	}
	h->rs_started = true;
	if (body && h->cfg.leak && h->rs_fr.st != FR_DONE) {
		r = egress_leak_stream_init(&h->rs_red, h->cfg.leak, EGRESS_LEAK_VALUES, true);
		if (r < 0) {
			return r;
		}
		h->rs_red_live = true;
	}
	h->rs = RS_BODY;
	if (h->rs_fr.st == FR_DONE) {
		h->rs_ended = true;
	}
	return 0;
}

static int rs_head_feed(struct egress_insp *h, const uint8_t *p, size_t n, size_t *k, struct buf *out)
{
	int r;

	r = head_gather(&h->rs_head, &h->rs_scanned, p, n, k);
	if (r < 0) {
		return r;
	}
	if (r == 0) {
		return buf_len(&h->rs_head) >= EGRESS_HEAD_MAX
			       ? bad_response(h, "a response head larger than 32 KiB (EGRESS_HEAD_MAX)")
			       : 0;
	}
	r = rs_head_done(h, out);
	buf_reset(&h->rs_head);
	return r;
}

int egress_insp_response(struct egress_insp *h, const uint8_t *p, size_t n, size_t *used, struct buf *out)
{
	size_t i = 0, start = buf_len(out);
	int r;

	*used = 0;
	if (h->rs_failed) {
		return -EPROTO;
	}
	if (h->refused) {
		*used = n; /* the request was refused: nothing more goes to the box but that answer */
		return 0;
	}
	r = rs_progress(h, out, start);
	while (r >= 0 && i < n && can_step(out, start) && h->n_ev < EV_HOLD) {
		size_t k = 0;
		if (h->rs == RS_DONE) {
			i = n;
			break;
		}
		if (h->rs == RS_HEAD) {
			/* A request held for its swap has not gone: no answer can be its. */
			if (h->n_pend - (h->uses_waiting || buf_len(&h->held) ? 1 : 0) == 0) {
				r = bad_response(h, "bytes from the origin with no request waiting for them");
				break;
			}
			r = rs_head_feed(h, p + i, n - i, &k, out);
			if (r >= 0) {
				r = rs_progress(h, out, start);
			}
		} else {
			r = rs_body_feed(h, p + i, n - i, &k, out, start);
		}
		i += k;
		if (r < 0 || (k == 0 && h->rs != RS_HEAD)) {
			break;
		}
	}
	if (r >= 0 && h->zo_live && h->zo_dirty && h->rs == RS_BODY) {
		/* What was decoded so far reaches the box now (a stream of events must not stall). */
		r = rs_deflate_flush(h, Z_SYNC_FLUSH, out);
	}
	*used = i;
	return r;
}

int egress_insp_response_eof(struct egress_insp *h, struct buf *out)
{
	int r;

	if (h->rs_failed) {
		return -EPROTO;
	}
	if (h->refused || h->rs == RS_DONE) {
		return 0;
	}
	if (h->rs == RS_HEAD) {
		if (buf_len(&h->rs_head) == 0 && h->n_pend == 0) {
			return 0;
		}
		return bad_response(h, h->n_pend ? "it closed the connection before its answer ended"
						 : "it closed the connection inside a response head");
	}
	if (h->rs_fr.st != FR_CLOSE) {
		return bad_response(h, "it closed the connection inside a response body");
	}
	h->rs_fr.st = FR_DONE;
	h->rs_ended = true;
	/* Drain everything: the caller's out must take it (-E2BIG otherwise). */
	while (h->rs == RS_BODY) {
		size_t before = buf_len(out) + buf_len(&h->zin);
		r = rs_progress(h, out, buf_len(out));
		if (r < 0) {
			return r;
		}
		if (h->rs == RS_BODY && buf_len(out) + buf_len(&h->zin) == before && !h->zi_full) {
			return buf_avail(out) < STEP_ROOM ? -E2BIG : bad_response(h, "its body could not be decoded");
		}
	}
	h->done = true;
	return 0;
}
