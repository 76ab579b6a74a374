/* SPDX-License-Identifier: Apache-2.0 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "banned.h"
#include "egress/inspect.h"
#include "egress/proxy-head.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * Table 14 "FuzzForward" over the inspector (src/egress/inspect.c): the box's
 * bytes and an origin's bytes, fed in pieces of a size the input picks.
 * Properties:
 *   - the upstream gets the request line that was checked: the k-th head the
 *     origin gets has the k-th request line the box sent (tunnel), or its
 *     origin form (absolute); its Host is the tunnel's; no whole placeholder
 *     ever reaches the origin;
 *   - the guest never sees the value a bound host echoed: in no form (raw in
 *     any case, hex, percent, JSON-escaped, base64) in the bytes for the box,
 *     nor in a coded body once decoded.
 *
 * Input: byte 0 flags (tunnel, model, uses ok, response mode 2 bits, split
 * 3 bits), then the box's bytes, 0xff 0xfe, then the origin's. In the box's
 * bytes 0x01 stands for the placeholder; in the origin's 0x01..0x05 stand for
 * the value raw, hex, base64, percent and JSON-escaped. Response modes 1-3
 * wrap the origin's bytes as a body: gzip with Content-Length, deflate
 * chunked, identity chunked with a trailer echoing the value.
 */

#define VALUE "ghp_S3cretValue1234567890abcdef"
#define PH "tkbox_GH_0123456789abcdef0123456789abcdef"
#define HOST "api.github.com"
#define MAXN ((size_t)1 << 16)

static struct egress_secret secret;
static struct egress_leak_set *leak;
static char f_hex[128], f_pct[128], f_json[256], f_b64[64], f_b64_full[64];

static void init_once(void)
{
	static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const uint8_t *u = (const uint8_t *)VALUE;
	size_t n = strlen(VALUE), o = 0;

	if (leak) {
		return;
	}
	(void)snprintf(secret.name, sizeof(secret.name), "GH");
	(void)snprintf(secret.placeholder, sizeof(secret.placeholder), PH);
	(void)snprintf(secret.header, sizeof(secret.header), "Authorization");
	(void)snprintf(secret.hosts[0], sizeof(secret.hosts[0]), HOST);
	secret.n_hosts = 1;
	secret.value = (uint8_t *)VALUE;
	secret.value_len = n;
	if (egress_leak_set_new(&secret, 1, &leak) < 0) {
		abort();
	}
	for (size_t i = 0; i < n; i++) {
		(void)snprintf(f_hex + 2 * i, 3, "%02x", u[i]);
		(void)snprintf(f_pct + 3 * i, 4, "%%%02X", u[i]);
		(void)snprintf(f_json + 6 * i, 7, "\\u%04x", u[i]);
	}
	for (size_t i = 0; i < n; i += 3) {
		uint32_t x =
			(uint32_t)u[i] << 16 | (i + 1 < n ? (uint32_t)u[i + 1] << 8 : 0) | (i + 2 < n ? u[i + 2] : 0);
		f_b64[o++] = a[x >> 18 & 63];
		f_b64[o++] = a[x >> 12 & 63];
		f_b64[o++] = i + 1 < n ? a[x >> 6 & 63] : '=';
		f_b64[o++] = i + 2 < n ? a[x & 63] : '=';
	}
	memcpy(f_b64_full, f_b64, o);
	f_b64[(n * 8) / 6] = '\0'; /* the characters the value alone fixes, at alignment 0 */
}

static bool has_ci(const uint8_t *p, size_t n, const char *s)
{
	size_t k = strlen(s);

	for (size_t i = 0; i + k <= n; i++) {
		if (strncasecmp((const char *)p + i, s, k) == 0) {
			return true;
		}
	}
	return false;
}

static void no_value(const uint8_t *p, size_t n)
{
	if (has_ci(p, n, VALUE) || has_ci(p, n, f_hex) || has_ci(p, n, f_pct) || has_ci(p, n, f_json) ||
	    memmem(p, n, f_b64, strlen(f_b64))) {
		abort();
	}
}

/* Expand the stand-in bytes into b (capped). */
static void expand(struct buf *b, const uint8_t *p, size_t n, bool origin)
{
	for (size_t i = 0; i < n; i++) {
		const char *s = NULL;
		int r;
		if (!origin && p[i] == 0x01) {
			s = PH;
		} else if (origin && p[i] >= 0x01 && p[i] <= 0x05) {
			s = p[i] == 1 ? VALUE : p[i] == 2 ? f_hex : p[i] == 3 ? f_b64_full : p[i] == 4 ? f_pct : f_json;
		}
		r = s ? buf_put(b, s, strlen(s)) : buf_put(b, p + i, 1);
		if (r < 0) {
			return;
		}
	}
}

static size_t zcompress(const uint8_t *in, size_t n, int bits, uint8_t *out, size_t max)
{
	z_stream z = { 0 };

	if (deflateInit2(&z, 6, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
		abort();
	}
	z.next_in = (Bytef *)(uintptr_t)in;
	z.avail_in = (uInt)n;
	z.next_out = out;
	z.avail_out = (uInt)max;
	(void)deflate(&z, Z_FINISH);
	n = max - z.avail_out;
	(void)deflateEnd(&z);
	return n;
}

/* Heads in p[0..n), one after another with their bodies: *ret_lines their first lines. */
static size_t heads(const uint8_t *p, size_t n, const uint8_t **lines, size_t *lens, size_t max)
{
	size_t k = 0, at = 0;

	while (k < max && at < n) {
		struct egress_head h;
		struct egress_body b;
		const uint8_t *hv;
		size_t hn, used;
		const char *why;
		if (egress_head_fields(p + at, n - at, &h, &hv, &hn, &why) != 1) {
			break;
		}
		lines[k] = p + at;
		lens[k] = (size_t)((const uint8_t *)memmem(p + at, h.head_len, "\r\n", 2) - (p + at));
		k++;
		egress_body_init(&b, &h);
		if (egress_body_feed(&b, p + at + h.head_len, n - at - h.head_len, &used, &why) != 1) {
			break;
		}
		at += h.head_len + used;
	}
	return k;
}

static void check_upstream(bool tunnel, const struct buf *box, const struct buf *up)
{
	const uint8_t *bl[EGRESS_INSP_PIPELINE_MAX * 2], *ul[EGRESS_INSP_PIPELINE_MAX * 2];
	size_t bn[EGRESS_INSP_PIPELINE_MAX * 2], un[EGRESS_INSP_PIPELINE_MAX * 2];
	size_t nb = heads(buf_ptr(box), buf_len(box), bl, bn, ARRAY_SIZE(bl));
	size_t nu = heads(buf_ptr(up), buf_len(up), ul, un, ARRAY_SIZE(ul));

	if (has_ci(buf_ptr(up), buf_len(up), PH)) {
		abort();
	}
	if (nu > nb || (!tunnel && nu > 1)) {
		abort();
	}
	for (size_t i = 0; i < nu; i++) {
		if (tunnel) {
			if (un[i] != bn[i] || memcmp(ul[i], bl[i], un[i]) != 0 ||
			    !(ul[i][memchr(ul[i], ' ', un[i]) - (const void *)ul[i] + 1] == '/' ||
			      memmem(ul[i], un[i], "OPTIONS * ", 10))) {
				abort();
			}
			continue;
		}
		/* Absolute form: the same method, and the target's path and query. */
		struct egress_head h;
		const char *why;
		if (egress_head_parse(bl[i], buf_len(box) - (size_t)(bl[i] - buf_ptr(box)), &h, &why) != 1) {
			abort();
		}
		const uint8_t *sp = memchr(bl[i], ' ', bn[i]);
		size_t mn = (size_t)(sp - bl[i]), pn = h.path_len;
		const uint8_t *path = bl[i] + h.path_off;
		size_t want = mn + 1 + (pn == 0 || path[0] != '/' ? 1 : 0) + pn + 9;
		if (un[i] != want || memcmp(ul[i], bl[i], mn + 1) != 0 ||
		    memcmp(ul[i] + un[i] - pn - 9, path, pn) != 0 || memcmp(ul[i] + un[i] - 9, " HTTP/1.1", 9) != 0) {
			abort();
		}
	}
}

/* A coded body the box got, decoded (as far as it goes), has no value either. */
static void check_decoded(const struct buf *down)
{
	const uint8_t *p = buf_ptr(down), *b = memmem(p, buf_len(down), "\r\n\r\n", 4);
	uint8_t *raw, *dec;
	size_t n = 0, at, bn;
	z_stream z = { 0 };

	if (!b) {
		return;
	}
	b += 4;
	bn = buf_len(down) - (size_t)(b - p);
	raw = malloc(bn + 1);
	dec = malloc(MAXN * 8);
	if (!raw || !dec) {
		abort();
	}
	if (memmem(p, (size_t)(b - p), "Transfer-Encoding: chunked", 26)) {
		for (at = 0; at < bn;) {
			char *end;
			unsigned long k = strtoul((const char *)b + at, &end, 16);
			const uint8_t *nl = memmem(b + at, bn - at, "\r\n", 2);
			if (!nl || k == 0) {
				break;
			}
			at = (size_t)(nl - b) + 2;
			k = MIN(k, bn - at);
			memcpy(raw + n, b + at, k);
			n += k;
			at += k + 2;
		}
	} else {
		memcpy(raw, b, bn);
		n = bn;
	}
	if (inflateInit2(&z, 32 + MAX_WBITS) != Z_OK) {
		abort();
	}
	z.next_in = raw;
	z.avail_in = (uInt)n;
	z.next_out = dec;
	z.avail_out = (uInt)(MAXN * 8);
	(void)inflate(&z, Z_SYNC_FLUSH);
	no_value(dec, MAXN * 8 - z.avail_out);
	(void)inflateEnd(&z);
	free(raw);
	free(dec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct egress_insp_config cfg = { .host = HOST, .secrets = &secret, .n_secrets = 1 };
	struct egress_insp *h = NULL;
	struct egress_insp_event e;
	struct buf box, origin, up, down;
	const uint8_t *sep;
	uint8_t flags;
	size_t split, off, used;
	int mode, r = 0;

	init_once();
	if (size < 1 || size > MAXN) {
		return 0;
	}
	flags = data[0];
	cfg.tunnel = flags & 1;
	cfg.model = flags & 2;
	cfg.port = cfg.tunnel ? 443 : 80;
	cfg.leak = leak;
	mode = flags >> 3 & 3;
	split = (size_t[]){ 0, 1, 2, 3, 7, 64, 1000, 4096 }[flags >> 5];
	sep = memmem(data + 1, size - 1, "\xff\xfe", 2);
	if (buf_init(&box, MAXN * 4, 0) < 0 || buf_init(&origin, MAXN * 8, 0) < 0 ||
	    buf_init(&up, MAXN * 8, BUF_SECRET) < 0 || buf_init(&down, MAXN * 16, BUF_SECRET) < 0) {
		abort();
	}
	expand(&box, data + 1, sep ? (size_t)(sep - data - 1) : size - 1, false);
	if (sep) {
		struct buf body;
		const uint8_t *o = sep + 2;
		size_t on = size - (size_t)(o - data);
		if (buf_init(&body, MAXN * 8, 0) < 0) {
			abort();
		}
		expand(mode ? &body : &origin, o, on, true);
		if (mode) {
			uint8_t *z = malloc(MAXN * 8);
			size_t zn = buf_len(&body);
			const uint8_t *bp = buf_ptr(&body);
			if (!z) {
				abort();
			}
			if (mode != 3) {
				zn = zcompress(bp, zn, mode == 1 ? 16 + MAX_WBITS : MAX_WBITS, z, MAXN * 8);
				bp = z;
			}
			if (mode == 1) {
				(void)buf_putf(&origin,
					       "HTTP/1.1 200 OK\r\nX-V: " VALUE "\r\nContent-Encoding: gzip\r\n"
					       "Content-Length: %zu\r\n\r\n",
					       zn);
				(void)buf_put(&origin, bp, zn);
			} else {
				(void)buf_putf(&origin, "HTTP/1.1 200 OK\r\n%sTransfer-Encoding: chunked\r\n\r\n",
					       mode == 2 ? "Content-Encoding: deflate\r\n" : "");
				for (size_t i = 0; i < zn; i += 13) {
					(void)buf_putf(&origin, "%zx\r\n", MIN((size_t)13, zn - i));
					(void)buf_put(&origin, bp + i, MIN((size_t)13, zn - i));
					(void)buf_put(&origin, "\r\n", 2);
				}
				(void)buf_putf(&origin, "0\r\nX-Echo: %s\r\n\r\n", f_b64_full);
			}
			free(z);
		}
		buf_release(&body);
	}
	if (egress_insp_new(&cfg, &h) < 0) {
		abort();
	}
	/* The box's bytes; each use answered as the flags say. */
	for (off = 0, r = 0; r == 0;) {
		size_t k = split ? MIN(split, buf_len(&box) - off) : buf_len(&box) - off;
		r = egress_insp_request(h, buf_ptr(&box) + off, k, &used, &up);
		while (egress_insp_event(h, &e) == 1) {
			if (e.type == EGRESS_INSP_USE) {
				egress_insp_use_done(h, !(flags & 4));
			}
			if (e.type == EGRESS_INSP_LEAK && (strstr(e.reason, VALUE) || e.secret != 0)) {
				abort();
			}
		}
		off += used;
		if (used == 0 && !egress_insp_waiting(h) && (off == buf_len(&box) || k == 0)) {
			size_t u2;
			r = r ? r : egress_insp_request(h, NULL, 0, &u2, &up);
			break;
		}
		if (r == 0 && used == 0 && !egress_insp_waiting(h)) {
			/* The pipeline is full: the origin's answers come first. */
			break;
		}
	}
	if (r == -EACCES) {
		const struct egress_insp_refusal *f = egress_insp_refusal(h);
		if (!f->rule || strstr(f->message, VALUE)) {
			abort();
		}
	}
	/* The origin's bytes. */
	for (off = 0, r = 0; r == 0 && off < buf_len(&origin);) {
		size_t k = split ? MIN(split, buf_len(&origin) - off) : buf_len(&origin) - off;
		r = egress_insp_response(h, buf_ptr(&origin) + off, k, &used, &down);
		while (egress_insp_event(h, &e) == 1) {
		}
		off += used;
		if (used == 0) {
			break;
		}
	}
	if (r == 0) {
		(void)egress_insp_response_eof(h, &down);
	}
	while (egress_insp_event(h, &e) == 1) {
	}
	check_upstream(cfg.tunnel, &box, &up);
	no_value(buf_ptr(&down), buf_len(&down));
	if (mode == 1 || mode == 2) {
		check_decoded(&down);
	}
	egress_insp_free(h);
	buf_release(&box);
	buf_release(&origin);
	buf_release(&up);
	buf_release(&down);
	return 0;
}
