/* SPDX-License-Identifier: Apache-2.0 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "banned.h"
#include "buf.h"
#include "path.h"
#include "patch/apply-answer.h"

/*
 * The apply children's messages as the daemon and the writer decode them
 * (apply_plan_decode, apply_order_decode, apply_line_decode). The first byte
 * picks the decoder (0: plan, 1: write order, 2: progress line), the rest is
 * the message. Whatever decodes is exactly what the encoder writes back (one
 * canonical form) and holds what the writer relies on: relative verified
 * paths without a ".git" segment, unique; a create with nothing before it,
 * a modify or delete with something; results within PATCH_MAX_FILE_BYTES.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_rel(const char *p, bool no_git)
{
	if (!p || path_verify(p, strlen(p)) < 0) {
		abort();
	}
	for (const char *s = p; no_git && s;) {
		if (strncasecmp(s, ".git", 4) == 0 && (s[4] == '/' || s[4] == '\0')) {
			abort();
		}
		s = strchr(s, '/');
		s = s ? s + 1 : NULL;
	}
}

static void check_plan(const struct apply_plan *p, bool order)
{
	if (p->error) {
		if (order || p->n_files || p->checkout || !p->error[0] || str_has_ctl(p->error)) {
			abort();
		}
		return;
	}
	if (!p->checkout || !p->scratch || !path_is_normal_abs(p->checkout) || !path_is_normal_abs(p->scratch) ||
	    p->n_files > PATCH_MAX_FILES || p->n_notices > APPLY_MAX_NOTICES || (order && p->n_notices)) {
		abort();
	}
	for (size_t i = 0; i < p->n_files; i++) {
		const struct apply_file *f = &p->files[i];
		check_rel(f->path, true);
		if ((f->op == PATCH_CREATE) != (f->pre_type == APPLY_PRE_ABSENT) || f->size > PATCH_MAX_FILE_BYTES ||
		    (f->op == PATCH_DELETE) != (f->mode == 0) || (f->op == PATCH_DELETE) != (f->sha256[0] == '\0')) {
			abort();
		}
		for (size_t j = 0; j < i; j++) {
			if (strcmp(p->files[j].path, f->path) == 0) {
				abort();
			}
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct apply_plan p = { 0 };
	struct apply_line l = { 0 };
	char diag[256] = "";
	struct buf *b = NULL;
	unsigned which;
	int r;

	if (size < 1) {
		return 0;
	}
	which = data[0] % 3;
	data++;
	size--;
	r = which == 0	 ? apply_plan_decode(data, size, &p, diag, sizeof(diag))
	    : which == 1 ? apply_order_decode(data, size, &p, diag, sizeof(diag))
			 : apply_line_decode(data, size, &l, diag, sizeof(diag));
	if (r < 0) {
		if (p.files || p.error || p.notices || l.path || l.error || !diag[0]) {
			abort(); /* a refusal writes nothing and always says why */
		}
		return 0;
	}
	if (buf_new(APPLY_PLAN_MAX_BYTES, 0, &b) < 0) {
		abort();
	}
	if (which == 2) {
		if ((l.kind == APPLY_LINE_WRITTEN && (check_rel(l.path, true), l.error)) ||
		    (l.kind == APPLY_LINE_ERROR && (!l.error || str_has_ctl(l.error))) ||
		    (l.kind == APPLY_LINE_DONE && l.done > PATCH_MAX_FILES)) {
			abort();
		}
		r = apply_line_encode(&l, b);
	} else {
		check_plan(&p, which == 1);
		r = which == 0 ? apply_plan_encode(&p, b) : apply_order_encode(&p, b);
	}
	if (r < 0 || buf_len(b) != size || memcmp(buf_ptr(b), data, size) != 0) {
		abort(); /* decode then encode gives back the same bytes */
	}
	buf_free(b);
	apply_plan_release(&p);
	apply_line_release(&l);
	return 0;
}
