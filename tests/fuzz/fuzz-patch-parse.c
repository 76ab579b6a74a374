/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target of the strict patch parser (src/patch/patch.c). Property:
 * no crash, no leak, no undefined behaviour on any input; an accepted patch
 * has sections that tile the input exactly, each path passes path_verify and
 * is free of .git segments, and each section re-parsed alone gives the same
 * reading (so no section's meaning depends on its neighbours). That git reads
 * what the parser accepts the same way is checked with real git by
 * tests/patch/parse-vs-git.sh over this corpus.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "banned.h"
#include "path.h"
#include "patch/patch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct patch p = { 0 };
	char diag[512];
	size_t at = 0;

	if (patch_parse(data, size, &p, diag, sizeof(diag)) < 0) {
		/* the message is a C string with no control character (the path is escaped) */
		for (const char *s = diag; *s; s++) {
			if ((unsigned char)*s < 0x20 || *s == 0x7f) {
				abort();
			}
		}
		return 0;
	}
	for (size_t i = 0; i < p.n_files; i++) {
		const struct patch_file *f = &p.files[i];
		struct patch one = { 0 };

		if (f->off != at || f->len == 0 || path_verify(f->path, strlen(f->path)) < 0) {
			abort();
		}
		at += f->len;
		for (const char *s = f->path; s; s = strchr(s, '/') ? strchr(s, '/') + 1 : NULL) {
			if (strncasecmp(s, ".git", 4) == 0 && (s[4] == '/' || s[4] == '\0')) {
				abort();
			}
		}
		if (patch_parse(data + f->off, f->len, &one, diag, sizeof(diag)) < 0 || one.n_files != 1 ||
		    strcmp(one.files[0].path, f->path) != 0 || one.files[0].op != f->op ||
		    one.files[0].old_mode != f->old_mode || one.files[0].new_mode != f->new_mode ||
		    one.files[0].binary != f->binary || one.files[0].added != f->added ||
		    one.files[0].deleted != f->deleted) {
			abort();
		}
		patch_release(&one);
	}
	if (at != size) {
		abort();
	}
	patch_release(&p);
	return 0;
}
