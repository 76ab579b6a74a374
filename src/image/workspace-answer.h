/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_IMAGE_WORKSPACE_ANSWER_H
#define TKBOX_IMAGE_WORKSPACE_ANSWER_H

#include "buf.h"
#include "image/workspace.h"

/*
 * The answer of the workspace builder child: what `tkbox workspace build DIR
 * -o FILE --json` prints on stdout and what the daemon reads back
 * (workspace_answer_exec). The child runs git, reads its listing, copies the
 * checkout and runs mkfs.ext4 and debugfs, confined (SANDBOX_WORKSPACE); the
 * daemon reads nothing from it but this one message and the ext4 file.
 *
 * Wire form: one JSON object in JCS canonical form (RFC 8785) followed by
 * one "\n", at most WORKSPACE_ANSWER_MAX_BYTES in all. Two closed key sets,
 * every key required:
 *   built:   {"bytes":N,"credentials":N,"ext4":"/abs/path","files":N,
 *             "left_out":[["rel/path","why"],...],"schema":S,"skipped":N,"symlinks":N}
 *   refused: {"error":"message","left_out":[...],"rule":"NAME"|null,"schema":S}
 * S is WORKSPACE_ANSWER_SCHEMA; N a JSON integer in 0..2^53-1; ext4 an
 * absolute path with no "." or ".." segment and no control character;
 * left_out the first WORKSPACE_ANSWER_MAX_LEFT_OUT paths left out (path
 * 1..PATH_MAX_LEN bytes, why 1..WORKSPACE_ANSWER_MAX_WHY bytes, neither with
 * a control character); error 1..WORKSPACE_ANSWER_MAX_ERROR bytes with no
 * control character; rule the limit or rule that refused
 * ([A-Za-z0-9_.+ -], 1..WORKSPACE_ANSWER_MAX_RULE bytes) or null.
 *
 * The decoder is pure (no I/O, no logging, no globals). Every refusal sets a
 * message in diag that names the key or the limit.
 */

#define WORKSPACE_ANSWER_SCHEMA "tkbox.workspace-answer.v1"
#define WORKSPACE_ANSWER_MAX_BYTES ((size_t)256 << 10) /* the whole answer */
#define WORKSPACE_ANSWER_MAX_LEFT_OUT 32 /* paths left out named in an answer (the rest only counted) */
#define WORKSPACE_ANSWER_MAX_WHY 256 /* bytes of one reason a path was left out */
#define WORKSPACE_ANSWER_MAX_ERROR (IMAGE_DIAG_MAX - 1) /* bytes of a refusal's message */
#define WORKSPACE_ANSWER_MAX_RULE 64 /* bytes of a refusal's rule name */
/* Wall-clock deadline of the whole builder child (git, copy, mkfs.ext4, debugfs). */
#define WORKSPACE_BUILD_TIMEOUT_S 1800

struct workspace_left_out {
	char *path;
	char *why;
};

struct workspace_answer {
	char *error; /* NULL: built; else the refusal's message */
	char *rule; /* refused: the limit or rule that refused, or NULL */
	char *ext4; /* built: the file written */
	struct workspace_stats stats; /* built */
	struct workspace_left_out *left_out;
	size_t n_left_out;
};

void workspace_answer_release(struct workspace_answer *a);

/*
 * Decode one answer from p[0..n) into *ret (written only on success; release
 * it with workspace_answer_release). -E2BIG for an answer over
 * WORKSPACE_ANSWER_MAX_BYTES or a field over its cap, -EBADMSG for anything
 * that is not exactly an answer as workspace_answer_encode writes it,
 * -ENOMEM.
 */
_wur_ int workspace_answer_decode(const void *p, size_t n, struct workspace_answer *ret, struct image_diag *diag);

/*
 * Append the answer for a to out: JCS object and "\n", all or nothing. The
 * decoder's rules are checked first (-E2BIG / -EBADMSG, message in diag).
 */
_wur_ int workspace_answer_encode(const struct workspace_answer *a, struct buf *out, struct image_diag *diag);

/*
 * Add one path left out to a (the first WORKSPACE_ANSWER_MAX_LEFT_OUT only;
 * a control character becomes '?', an over-long reason is cut). -ENOMEM.
 */
_wur_ int workspace_answer_add_left_out(struct workspace_answer *a, const char *rel, const char *why);

/*
 * Make a a refusal: msg (controls and, when it is not UTF-8, non-ASCII bytes
 * become '?'; cut at WORKSPACE_ANSWER_MAX_ERROR) and rule when it is a valid
 * rule name (else null). -ENOMEM.
 */
_wur_ int workspace_answer_set_error(struct workspace_answer *a, const char *msg, const char *rule);

/*
 * The workspace builder in a child process, for the daemon: runs `EXE
 * workspace build --json --quiet DIR -o OUT` with a minimal environment and
 * a deadline of WORKSPACE_BUILD_TIMEOUT_S, reads at most
 * WORKSPACE_ANSWER_MAX_BYTES of its stdout and decodes them. OUT must not
 * exist; the child may write only in OUT's directory (SANDBOX_WORKSPACE).
 * Returns 0 with *ret filled when the child answered (built or refused:
 * ret->error says which), -errno with a message in diag when it did not
 * answer or its answer was refused, or named another file than OUT.
 */
_wur_ int workspace_answer_exec(const char *exe, const char *dir, const char *out, struct workspace_answer *ret,
				struct image_diag *diag);

/*
 * workspace_answer_exec with extra arguments before "--" (NULL-terminated,
 * may be NULL; at most 40) and one fd the child keeps (-1: none): the
 * workspace check's `--secrets-fd N --secret NAME:LEN ...` (workspace.h).
 */
_wur_ int workspace_answer_exec_args(const char *exe, const char *dir, const char *out, char *const *extra, int keep_fd,
				     struct workspace_answer *ret, struct image_diag *diag);

#endif
