/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_PATCH_APPLY_ANSWER_H
#define TKBOX_PATCH_APPLY_ANSWER_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "macro.h"
#include "patch/patch.h"

/*
 * What the two apply children say to the daemon, and what the daemon tells
 * the writer. One file: the encoders, the decoders (pure, closed key sets,
 * every refusal names the key or limit) and fuzz-apply-answer.
 *
 * 1. The plan: `tkbox-host apply prepare` prints one JCS object + "\n" on
 *    stdout (at most APPLY_PLAN_MAX_BYTES):
 *      planned: {"schema":"tkbox.apply-plan.v1","patch_sha256":H,"checkout":"/abs",
 *                "scratch":"/abs","files":[FILE...],"notices":[["path","why"]...]}
 *      refused: {"schema":"tkbox.apply-plan.v1","error":"message","rule":"NAME"|null,
 *                "path":"rel"|null,"notices":[...]}
 *    FILE: {"path":"rel","op":"create"|"modify"|"delete","mode":"100644"|"100755"|"120000"|null,
 *           "sha256":H|null,"size":N,"binary":B,"sensitive":"kind"|null,
 *           "pre":{"type":"absent"|"file"|"symlink","sha256":H|null,"mode":"100644"|...|null}}
 *    mode/sha256/size: the result (null, null, 0 for a delete); sha256 of the
 *    file's bytes (a symlink: of its target string); pre: what the checkout
 *    held at plan time (sha256 of its bytes or its link target).
 *    Paths unique, path_verify'd, no ".git" segment; at most PATCH_MAX_FILES
 *    files and APPLY_MAX_NOTICES notices.
 *    The result of FILE is the scratch file <scratch>/tree/<path> (absent for a delete).
 *
 * 2. The write order: the daemon writes one JCS object + "\n" to the writer's
 *    stdin: {"schema":"tkbox.apply-write.v1","checkout":"/abs","scratch":"/abs","files":[FILE...]}
 *    (the decided files, in the order to write; same FILE form).
 *
 * 3. The writer's progress: one JCS object per line on stdout, in order:
 *      {"written":"rel"}                      the file is in place (renamed, or removed) and synced
 *      {"error":"message","path":"rel"|null,"rule":"NAME"|null}  it stopped here: nothing more is written
 *      {"done":N}                             every file written (N of them)
 *    Lines at most APPLY_LINE_MAX bytes.
 */

#define APPLY_PLAN_SCHEMA "tkbox.apply-plan.v1"
#define APPLY_WRITE_SCHEMA "tkbox.apply-write.v1"
#define APPLY_PLAN_MAX_BYTES ((size_t)8 << 20)
#define APPLY_LINE_MAX ((size_t)16 << 10)
#define APPLY_MAX_NOTICES 256
#define APPLY_MAX_ERROR 2048
#define APPLY_MAX_RULE 64
#define APPLY_MAX_WHY 512 /* bytes of a notice's reason (helper D: added) */
#define APPLY_MAX_KIND 64 /* bytes of a FILE's "sensitive" kind (helper D: added) */

enum apply_pre_type {
	APPLY_PRE_ABSENT = 0,
	APPLY_PRE_FILE,
	APPLY_PRE_SYMLINK,
};

struct apply_file {
	char *path;
	enum patch_op op;
	uint32_t mode; /* 0 for a delete */
	char sha256[65]; /* "" for a delete */
	uint64_t size;
	bool binary;
	char *sensitive; /* the kind, or NULL */
	enum apply_pre_type pre_type;
	char pre_sha256[65]; /* "" when absent */
	uint32_t pre_mode; /* 0 when absent */
};

struct apply_notice {
	char *path;
	char *why;
};

struct apply_plan {
	char *error; /* NULL: planned */
	char *rule, *path; /* refused: may be NULL */
	char patch_sha256[65];
	char *checkout, *scratch;
	struct apply_file *files;
	size_t n_files;
	struct apply_notice *notices;
	size_t n_notices;
};

void apply_plan_release(struct apply_plan *p);

/* Encode/decode the plan (1). Decoding: -E2BIG over a cap, -EBADMSG malformed; diag says what. */
_wur_ int apply_plan_encode(const struct apply_plan *p, struct buf *out);
_wur_ int apply_plan_decode(const uint8_t *p, size_t n, struct apply_plan *ret, char *diag, size_t diag_size);

/* The write order (2): a plan without error or notices, schema APPLY_WRITE_SCHEMA. */
_wur_ int apply_order_encode(const struct apply_plan *p, struct buf *out);
_wur_ int apply_order_decode(const uint8_t *p, size_t n, struct apply_plan *ret, char *diag, size_t diag_size);

/* The writer's progress lines (3). */
enum apply_line_kind {
	APPLY_LINE_WRITTEN = 0,
	APPLY_LINE_ERROR,
	APPLY_LINE_DONE,
};

struct apply_line {
	enum apply_line_kind kind;
	char *path; /* written; error (may be NULL) */
	char *error, *rule; /* error (rule may be NULL) */
	uint64_t done;
};

void apply_line_release(struct apply_line *l);
_wur_ int apply_line_encode(const struct apply_line *l, struct buf *out);
_wur_ int apply_line_decode(const uint8_t *p, size_t n, struct apply_line *ret, char *diag, size_t diag_size);

/*
 * Helper D's additions (compatible): the exact rules both sides apply, and
 * builders for the children.
 *   - "checkout"/"scratch": absolute, no "." or ".." segment, no control
 *     character, at most PATH_MAX_LEN bytes.
 *   - FILE "path": path_verify'd, no ".git" segment in any case, unique in
 *     the plan; a create has pre "absent", a modify or delete has not; a
 *     create or modify has mode, sha256 (64 lowercase hex) and size
 *     (0..PATCH_MAX_FILE_BYTES), a delete null, null and 0; pre "file" has
 *     mode 100644 or 100755, "symlink" 120000, both a sha256; "absent" null,
 *     null. "sensitive": 1..APPLY_MAX_KIND bytes, no control character.
 *   - notices: path path_verify'd, why 1..APPLY_MAX_WHY bytes, no control.
 *   - refused plan: error 1..APPLY_MAX_ERROR bytes, no control; rule
 *     [A-Za-z0-9_.+ -]{1,APPLY_MAX_RULE} or null; path path_verify'd or null.
 *   - progress lines: the same rules for their path, error and rule; done
 *     0..PATCH_MAX_FILES. apply_line_decode takes one whole line, its "\n"
 *     included (at most APPLY_LINE_MAX bytes), apply_line_encode appends it.
 * Decoders refuse anything that is not byte for byte what the encoder writes.
 * Encoders check the same rules first (-E2BIG / -EBADMSG, diag may be NULL
 * there: they write nothing on failure), -ENOBUFS when out has no room.
 */

/*
 * A copy of s for an error or a reason: control characters become '?', cut
 * at max bytes on a UTF-8 boundary, non-ASCII bytes become '?' when s is not
 * UTF-8; an empty s becomes "?". NULL only when out of memory.
 */
char *apply_text_clean(const char *s, size_t max);

/* A rule name the codec accepts ([A-Za-z0-9_.+ -]{1,APPLY_MAX_RULE}). */
bool apply_rule_ok(const char *rule);

/*
 * Add a notice to p (path must pass path_verify, else -EINVAL; why is
 * cleaned with apply_text_clean). Past APPLY_MAX_NOTICES it is not added and
 * 1 is returned (the caller may say so elsewhere); 0 when added, -ENOMEM.
 */
_wur_ int apply_plan_add_notice(struct apply_plan *p, const char *path, const char *why);

/*
 * Make p a refusal: msg cleaned (apply_text_clean, APPLY_MAX_ERROR), rule kept
 * when apply_rule_ok (else null), path kept when it passes path_verify (else
 * null); the files are released, the notices kept. -ENOMEM.
 */
_wur_ int apply_plan_set_error(struct apply_plan *p, const char *msg, const char *rule, const char *path);

/* Release one FILE's strings (apply_plan_release does it for every file). */
void apply_file_release(struct apply_file *f);

/* "create"/"modify"/"delete" and back (-EINVAL); "100644"/"100755"/"120000" (patch_mode_name) back (-EINVAL). */
const char *apply_op_name(enum patch_op op);
_wur_ int apply_op_from_name(const char *s, enum patch_op *ret);

_wur_ int apply_mode_from_name(const char *s, uint32_t *ret);

#endif
