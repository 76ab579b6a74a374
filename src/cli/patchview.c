/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "buf.h"
#include "cli/patchview.h"
#include "crypto.h"
#include "daemon/http.h"
#include "json.h"

/* The length of the valid UTF-8 sequence at p[0..n) that shows as a character (U+00A0 up), else 0. */
static size_t utf8_printable(const uint8_t *p, size_t n)
{
	uint32_t cp;
	size_t len, i;

	if (p[0] < 0xc2 || p[0] > 0xf4) {
		return 0; /* ASCII (handled by the caller), a continuation byte, an overlong lead, or past U+10FFFF */
	}
	len = p[0] < 0xe0 ? 2 : p[0] < 0xf0 ? 3 : 4;
	if (len > n) {
		return 0;
	}
	cp = p[0] & (len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07);
	for (i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80) {
			return 0;
		}
		cp = (cp << 6) | (p[i] & 0x3f);
	}
	/* Overlong forms, surrogates, past U+10FFFF, and the C1 controls (a terminal may act on U+009B). */
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp < 0xa0) {
		return 0;
	}
	return len;
}

/* Append p[0..n) made safe to out; keep_lines: "\n" and "\t" pass. */
static int safe_put(struct buf *out, const uint8_t *p, size_t n, bool keep_lines)
{
	static const char hex[] = "0123456789abcdef";
	int r = 0;

	for (size_t i = 0; i < n && r >= 0;) {
		uint8_t c = p[i];
		size_t k;

		if ((c >= 0x20 && c < 0x7f && (keep_lines || c != '\\')) || (keep_lines && (c == '\n' || c == '\t'))) {
			r = buf_put(out, &c, 1);
			i++;
			continue;
		}
		k = c >= 0x80 ? utf8_printable(p + i, n - i) : 0;
		if (k > 0) {
			r = buf_put(out, p + i, k);
			i += k;
			continue;
		}
		{
			char e[4] = { '\\', 'x', hex[c >> 4], hex[c & 15] };
			r = buf_put(out, e, sizeof(e));
		}
		i++;
	}
	return r;
}

void patchview_write_safe(FILE *f, const uint8_t *p, size_t n)
{
	const size_t chunk = 16384;

	for (size_t off = 0; off < n;) {
		/* A chunk ends on a line end when it can. */
		size_t k = MIN(chunk, n - off);
		struct buf b;
		const uint8_t *nl;

		if (off + k < n && (nl = memrchr(p + off, '\n', k)) != NULL) {
			k = (size_t)(nl - (p + off)) + 1;
		}
		/* No line end: the chunk ends before a character's continuation bytes, never among them. */
		for (int back = 0; off + k < n && back < 3 && k > 1 && (p[off + k] & 0xc0) == 0x80; back++) {
			k--;
		}
		if (buf_init(&b, 4 * k + 1, 0) < 0) {
			return;
		}
		if (safe_put(&b, p + off, k, true) >= 0) {
			(void)fwrite(buf_ptr(&b), 1, buf_len(&b), f);
		}
		buf_release(&b);
		off += k;
	}
}

char *patchview_text(const char *s)
{
	size_t n = strlen(s);
	struct buf b;
	char *ret = NULL;

	if (buf_init(&b, 4 * n + 1, 0) < 0) {
		return NULL;
	}
	if (safe_put(&b, (const uint8_t *)s, n, false) < 0 || buf_dup_cstring(&b, &ret) < 0) {
		ret = NULL;
	}
	buf_release(&b);
	return ret;
}

static const char *mode_text(uint32_t mode)
{
	const char *m = patch_mode_name(mode);

	return m ? m : "-";
}

void patchview_stat(FILE *f, const struct patch *p)
{
	uint64_t added = 0, deleted = 0;

	for (size_t i = 0; i < p->n_files; i++) {
		const struct patch_file *pf = &p->files[i];
		_cleanup_free_ char *path = patchview_text(pf->path);
		uint32_t mode = pf->op == PATCH_DELETE ? pf->old_mode : pf->new_mode;

		if (pf->op == PATCH_MODIFY && pf->old_mode != pf->new_mode && pf->old_mode && pf->new_mode) {
			fprintf(f, " %-6s %s->%s %s |", patch_op_name(pf->op), mode_text(pf->old_mode),
				mode_text(pf->new_mode), path ? path : "?");
		} else {
			fprintf(f, " %-6s %s %s |", patch_op_name(pf->op), mode_text(mode), path ? path : "?");
		}
		if (pf->binary) {
			fprintf(f, " binary\n");
		} else if (pf->mode_only) {
			fprintf(f, " mode only\n");
		} else {
			fprintf(f, " +%llu -%llu\n", (unsigned long long)pf->added, (unsigned long long)pf->deleted);
		}
		added += pf->added;
		deleted += pf->deleted;
	}
	fprintf(f, " %zu file%s changed, %llu insertion%s(+), %llu deletion%s(-)\n", p->n_files,
		p->n_files == 1 ? "" : "s", (unsigned long long)added, added == 1 ? "" : "s",
		(unsigned long long)deleted, deleted == 1 ? "" : "s");
}

static json_t *json_text(const char *s)
{
	_cleanup_free_ char *t = s ? patchview_text(s) : NULL;

	return t ? json_string(t) : NULL;
}

json_t *patchview_json(const struct patch *p, const char *sha256, uint64_t bytes, bool saved, const json_t *notices,
		       int64_t notices_total)
{
	json_t *v = json_pack("{s:s,s:I,s:b,s:[],s:[],s:I}", "sha256", sha256, "bytes", (json_int_t)bytes, "saved",
			      saved, "files", "notices", "notices_total", (json_int_t)notices_total);
	json_t *fa = json_object_get(v, "files"), *na = json_object_get(v, "notices");

	for (size_t i = 0; v && i < p->n_files; i++) {
		const struct patch_file *pf = &p->files[i];
		json_t *o = json_pack("{s:o?,s:s,s:s?,s:s?,s:b,s:I,s:I}", "path", json_text(pf->path), "op",
				      patch_op_name(pf->op), "old_mode", patch_mode_name(pf->old_mode), "new_mode",
				      patch_mode_name(pf->new_mode), "binary", pf->binary, "added",
				      (json_int_t)pf->added, "deleted", (json_int_t)pf->deleted);
		if (!o || !json_object_get(o, "path") || json_array_append_new(fa, o) < 0) {
			json_decref(o);
			json_decref(v);
			return NULL;
		}
	}
	for (size_t i = 0; v && i < json_array_size(notices); i++) {
		const json_t *e = json_array_get(notices, i);
		json_t *pair = json_pack("[o?,o?]", json_text(json_string_value(json_array_get(e, 0))),
					 json_text(json_string_value(json_array_get(e, 1))));
		if (!pair || json_array_size(pair) != 2 || json_is_null(json_array_get(pair, 0)) ||
		    json_is_null(json_array_get(pair, 1))) {
			json_decref(pair);
			continue; /* a notice that is not two strings: not shown */
		}
		if (json_array_append_new(na, pair) < 0) {
			json_decref(v);
			return NULL;
		}
	}
	return v;
}

void patchview_notices(FILE *f, const char *what, const json_t *notices)
{
	for (size_t i = 0; i < json_array_size(notices); i++) {
		const json_t *e = json_array_get(notices, i);
		const char *p = json_string_value(json_array_get(e, 0)), *w = json_string_value(json_array_get(e, 1));
		_cleanup_free_ char *ps = p ? patchview_text(p) : NULL, *ws = w ? patchview_text(w) : NULL;

		/* The guest's reason may say "left out" itself. */
		if (ps && ws) {
			fprintf(f, "tkbox %s: %s%s: %s\n", what,
				strncmp(ws, "left out", 8) == 0 ? "" : "left out: ", ps, ws);
		}
	}
}

int patchview_apply_status(int http_status, const json_t *reply)
{
	static const char *const refused[] = {
		"box_running", "run_closed",	"unrecorded", "no_patch",	    "no_checkout",
		"apply_busy",  "apply_refused", "denied",     "signer_unreachable", "not_found",
		"bad_request", "no_such_box",	"busy",	      "not_recorded",	    NULL,
	};
	const json_t *e = json_object_get(reply, "error");
	const char *code = json_string_value(json_object_get(e, "code"));
	const json_t *written = json_object_get(e, "written_paths");

	if (http_status == 200) {
		return e ? PATCHVIEW_EXIT_TKBOX : PATCHVIEW_EXIT_OK;
	}
	if (json_is_array(written) && json_array_size(written) > 0) {
		return PATCHVIEW_EXIT_PARTIAL;
	}
	if (!code) {
		return PATCHVIEW_EXIT_TKBOX;
	}
	/* apply_partial with nothing written (the first file failed): the checkout is as it was. */
	if (strcmp(code, "apply_partial") == 0) {
		return PATCHVIEW_EXIT_REFUSED;
	}
	for (size_t i = 0; refused[i]; i++) {
		if (strcmp(code, refused[i]) == 0) {
			return PATCHVIEW_EXIT_REFUSED;
		}
	}
	return http_status >= 400 && http_status < 500 ? PATCHVIEW_EXIT_REFUSED : PATCHVIEW_EXIT_TKBOX;
}

json_t *patchview_summary_decode(const char *v)
{
	struct json_opts o = { .max_bytes = HTTP_MAX_HEADER_VALUE, .max_depth = 8, .want_top = JSON_OBJECT };
	json_t *ret = NULL;
	struct buf b;

	if (!v || buf_init(&b, HTTP_MAX_HEADER_VALUE, 0) < 0) {
		return NULL;
	}
	if (b64_decode(v, strlen(v), B64_URL, &b) < 0 || json_parse_strict(buf_ptr(&b), buf_len(&b), &o, &ret) < 0) {
		ret = NULL;
	}
	buf_release(&b);
	return ret;
}
