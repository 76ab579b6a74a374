/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_GUEST_DIFF_H
#define TKBOX_GUEST_DIFF_H

#include <stdint.h>

#include "buf.h"
#include "macro.h"

/*
 * The box's patch: what `git diff --binary --full-index --no-renames` would
 * write between the workspace overlay's lower layer (the workspace disk, or
 * an empty directory) and the merged view, computed from the upper layer
 * alone (no git in the image). Sections are sorted by path, bytewise; paths
 * are C-quoted as git quotes them (core.quotePath=true).
 *
 * Read from the upper layer: regular files, symlinks and directories;
 * whiteouts (a 0:0 character device, or an empty file with the xattr
 * trusted.overlay.whiteout) delete the lower path (a lower directory: every
 * file under it); an opaque directory (trusted.overlay.opaque "y") hides the
 * lower one, so every lower file under it the upper lacks is deleted. Modes
 * are git's: 100755 when the owner may execute, else 100644; 120000 for a
 * symlink. Text hunks come from a bounded Myers (past GUEST_DIFF_MAX_COST
 * edits the changed middle becomes one replacement); a file with a NUL in
 * its first 8000 bytes (either side) is binary: a "GIT binary patch" with a
 * forward "literal" hunk (zlib, git's base85).
 *
 * Left out, each with a notice (path C-quoted, why names the rule): a path
 * with a .git segment (any case), a special file (fifo, socket, device), a
 * change between a file and a symlink, a file over PATCH_MAX_FILE_BYTES on
 * either side, a path past path_verify's caps (PATH_MAX_LEN, PATH_MAX_DEPTH).
 * At most PATCH_MAX_NOTICES notices: past that the last one counts the rest.
 * The whole diff fails (-E2BIG, diag names the limit) past PATCH_MAX_BYTES
 * or PATCH_MAX_FILES.
 */

#define GUEST_DIFF_MAX_COST 1000 /* Myers edit distance explored per file before the whole-middle fallback */
#define GUEST_DIFF_MAX_DIR_ENTRIES ((size_t)1 << 20) /* names read from one directory */

struct guest_diff_notice {
	char *path; /* C-quoted as in the patch, 1..PATCH_MAX_NOTICE bytes */
	char *why;
};

struct guest_diff_section {
	char *path; /* raw bytes, NUL-terminated */
	size_t path_len;
	size_t off, len; /* in guest_diff.body */
};

struct guest_diff {
	struct buf body; /* the sections in the order they were made */
	struct guest_diff_section *sec; /* sorted by path once guest_diff_make returns */
	size_t n_sec, cap_sec;
	struct guest_diff_notice *notices;
	size_t n_notices;
	size_t n_dropped; /* notices past PATCH_MAX_NOTICES */
};

void guest_diff_release(struct guest_diff *d);

/*
 * Make the patch of upper (the overlay's upper dir) against lower (its lower
 * dir); both are directory fds (O_PATH is fine) the walk only reads. On
 * success *ret owns the result; on failure diag says why (a cap names it).
 */
_wur_ int guest_diff_make(int lower_fd, int upper_fd, struct guest_diff *ret, char *diag, size_t diag_size);

/* The patch's bytes in order (the sorted sections) appended to out. */
_wur_ int guest_diff_concat(const struct guest_diff *d, struct buf *out);

/*
 * The forked producer's work: make the patch and write the agent frames for
 * request id to fd: DIFF_DATA frames then DIFF_END, or one ERROR (code
 * "diff") when the patch cannot be made. 0 when fd holds the frames.
 */
_wur_ int guest_diff_write_frames(int lower_fd, int upper_fd, uint32_t id, int fd);

#endif
