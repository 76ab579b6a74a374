/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_IMAGE_IMAGE_ANSWER_H
#define TKBOX_IMAGE_IMAGE_ANSWER_H

#include "buf.h"
#include "image/image.h"

/*
 * The answer of the image child: what `tkbox images --json resolve|pull REF`
 * prints on stdout and what the daemon reads back (image_answer_exec). The
 * child parses registry answers and layer bytes; the daemon holds keys and
 * secrets, so it reads nothing from the child but this one message. The
 * child confines itself before it reads any input (src/cli/child-confine.h:
 * SANDBOX_IMAGE_PULL for a registry reference, SANDBOX_IMAGE_LOCAL, without
 * network sockets, for a local source; writes under <state>/images only).
 *
 * Wire form: one JSON object in JCS canonical form (RFC 8785) followed by
 * one "\n", at most IMAGE_ANSWER_MAX_BYTES in all. The key set is closed and
 * every key is required:
 *   {"config":"sha256:<64 hex>",
 *    "env":["NAME=value",...],            at most BOOT_MAX_ENV entries of at most
 *                                         BOOT_MAX_STRING bytes, NAME non-empty
 *    "ext4":"/abs/path",                  absolute, no "." or ".." segment, no
 *    "from_cache":true|false,             control character, <= IMAGE_ANSWER_MAX_PATH
 *    "image_json":"/abs/path",            (same rule as ext4)
 *    "manifest":"sha256:<64 hex>"|null,
 *    "schema":"tkbox.image-answer.v1",
 *    "user":"..."|null,                   1..IMAGE_ANSWER_MAX_USER bytes
 *    "working_dir":"/..."|null}           absolute, at most IMAGE_ANSWER_MAX_PATH bytes
 * Strings are data: a WorkingDir that holds a newline stays one string and
 * cannot become another member.
 *
 * The decoder is pure (no I/O, no logging, no globals). Every refusal sets a
 * message in diag that names the key or the limit.
 */

#define IMAGE_ANSWER_SCHEMA "tkbox.image-answer.v1"
/* The whole answer; the boot config the env ends up in is capped at 1 MiB too (AGENT_MAX_JSON). */
#define IMAGE_ANSWER_MAX_BYTES ((size_t)1 << 20)
#define IMAGE_ANSWER_MAX_PATH 4096 /* ext4, image_json, working_dir: bytes (PATH_MAX) */
#define IMAGE_ANSWER_MAX_USER 256 /* user: bytes */

/*
 * Decode one answer from p[0..n) into *ret (written only on success; release
 * it with image_result_release). -E2BIG for an answer over
 * IMAGE_ANSWER_MAX_BYTES or a field over its cap, -EBADMSG for anything
 * else that is not exactly an answer as image_answer_encode writes it
 * (malformed JSON, trailing bytes, a duplicate, unknown or missing key, a
 * wrong type or format, a non-canonical form), -ENOMEM.
 */
_wur_ int image_answer_decode(const void *p, size_t n, struct image_result *ret, struct image_diag *diag);

/*
 * Append the answer for res to out: JCS object and "\n", all or nothing.
 * The fields are checked by the decoder's rules first, so that an image
 * whose answer the daemon would refuse fails in the child with the reason
 * (-E2BIG / -EBADMSG, message in diag).
 */
_wur_ int image_answer_encode(const struct image_result *res, struct buf *out, struct image_diag *diag);

/*
 * image_resolve in a child process, for callers that hold keys or secrets
 * (the daemon): runs `EXE images --json --state S [--platform P]
 * [--registry-auth F] [--registry-ca F] -- resolve|pull REF` with a minimal
 * environment and a deadline of IMAGE_RESOLVE_TIMEOUT_S, reads at most
 * IMAGE_ANSWER_MAX_BYTES of its stdout and decodes them; the ext4 and
 * image.json it names must lie under <state>/images/. The
 * child's error (or the decoder's) goes to o->diag. o->progress_fd and
 * o->limits are not passed on.
 */
_wur_ int image_answer_exec(const char *exe, const struct image_opts *o, const char *ref, struct image_result *ret);

#endif
