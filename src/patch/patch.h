/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_PATCH_PATCH_H
#define TKBOX_PATCH_PATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

/*
 * The strict patch parser: a box's changes to /workspace, in git's patch
 * format ("diff --git" sections, as `git diff --binary --full-index` writes
 * them), read the way git apply reads them and refused where git would
 * read something other than what it seems to say. Pure: no I/O, no logging,
 * no globals. Used by the supervisor (on the guest's bytes), the apply
 * child (again, on the saved patch) and fuzz-patch-parse.
 *
 * Accepted, per section:
 *   - a "diff --git a/P b/P" line whose two names are the same path (C-quoted
 *     names as git writes them: "\"a/x\\ty\" \"b/x\\ty\"");
 *   - extended headers: "old mode M", "new mode M", "new file mode M",
 *     "deleted file mode M", "index H..H[ M]" (M one of 100644, 100755,
 *     120000; H 7..40 lowercase hex, the same length), "similarity index"/"dissimilarity index"
 *     refused like copies and renames;
 *   - a text body: "--- a/P" or "--- /dev/null" (only with "new file mode"),
 *     "+++ b/P" or "+++ /dev/null" (only with "deleted file mode"), then
 *     hunks "@@ -a[,b] +c[,d] @@..." whose line counts are consumed exactly
 *     as git does (' ', '+', '-' lines; "\ No newline at end of file" after
 *     a line); the names on ---/+++ must be the section's path;
 *   - a binary body: "GIT binary patch" then a forward hunk "literal N" or
 *     "delta N" (base85 lines, zlib-deflated, inflated size checked == N)
 *     and an optional reverse hunk; binary needs a full 40-hex index line
 *     (git refuses a binary patch without one); "Binary files ... differ"
 *     (no data) is refused.
 * Refused (each with a message naming the section's path and the rule):
 *   copy, rename, similarity sections; a second section for the same path;
 *   a path that fails path_verify, is absolute, has a ".." segment or a
 *   ".git" segment (any case), or goes through a symlink another section
 *   creates; /dev/null on ---/+++ without the matching "new file mode" /
 *   "deleted file mode" line (reference finding F1: git reads that as a file
 *   named dev/null); a creation or deletion with hunks that do not start at
 *   0,0 or end the file; modes other than the three; a gitlink (160000);
 *   text before the first section (the producer never writes any; no mail
 *   header either); bytes after the last hunk that are not a new section;
 *   CR before LF in headers; NUL in a header; any cap below.
 * Also refused, being forms git diff never writes: names not written
 * exactly as git writes them (quoting, the TAB after a name with a space,
 * a/ and b/ prefixes); index lines of more than 40 hex digits (the
 * cross-check's and the apply child's repositories are SHA-1); a mode
 * change between 120000 and a file mode (git would turn a link into a file
 * holding its target, or a file into a link); a binary patch of a symlink;
 * a binary creation that is a delta; hunks out of order; a creation or
 * deletion without a body that is not the empty file (e69de29...); a
 * section that changes nothing.
 */

#define PATCH_MAX_BYTES ((size_t)32 << 20) /* the whole patch */
#define PATCH_MAX_FILES 4096 /* sections */
#define PATCH_MAX_FILE_BYTES ((size_t)16 << 20) /* a file's content before or after (binary: inflated) */
#define PATCH_MAX_NOTICES 64 /* notices the guest sends with a patch (files it left out) */
#define PATCH_MAX_NOTICE 512 /* bytes of one notice */

#define PATCH_MODE_FILE 0100644u
#define PATCH_MODE_EXEC 0100755u
#define PATCH_MODE_LINK 0120000u

enum patch_op {
	PATCH_MODIFY = 0, /* content and/or mode of an existing path */
	PATCH_CREATE,
	PATCH_DELETE,
};

struct patch_file {
	char *path; /* relative, path_verify'd, unquoted */
	enum patch_op op;
	uint32_t old_mode; /* 0 for a creation, or when a modify section names no mode */
	uint32_t new_mode; /* 0 for a deletion, or when a modify section names no mode */
	/* (a modify's "index H..H MODE" line names both sides' mode: old_mode == new_mode == MODE) */
	bool binary;
	bool mode_only; /* a modify with no body */
	char old_oid[65], new_oid[65]; /* from the index line ("" when none) */
	uint64_t added, deleted; /* text lines '+' and '-' as git apply --numstat counts them; binary: 0 */
	size_t off, len; /* the section's bytes in the patch */
};

struct patch {
	struct patch_file *files;
	size_t n_files;
	uint64_t bytes;
};

void patch_release(struct patch *p);

/*
 * Parse p[0..n) into *ret (written only on success). -E2BIG for a cap,
 * -EBADMSG for anything refused; diag (NUL-terminated, may be NULL) says
 * which path and which rule, as a user reads it, e.g. "patch: section 3
 * (.git/hooks/x): a path with a .git segment is refused (PATCH path rule)".
 * Every path in diag is escaped (no control character).
 */
_wur_ int patch_parse(const uint8_t *p, size_t n, struct patch *ret, char *diag, size_t diag_size);

/* "create", "modify", "delete". */
const char *patch_op_name(enum patch_op op);

/* "100644", "100755", "120000", or NULL for 0. */
const char *patch_mode_name(uint32_t mode);

#endif
