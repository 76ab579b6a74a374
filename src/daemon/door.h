/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_DOOR_H
#define TKBOX_DAEMON_DOOR_H

#include <jansson.h>

#include "buf.h"

/*
 * The command door's pure parts: what the signer is asked about a
 * `tkbox exec` before anything runs.
 *
 *   - door_command_line: the argv (and the per-exec env, written as a leading
 *     `env K=V ...`) as one shell-quoted line, so that a shell parser on the
 *     signer's side finds exactly the program that the guest agent execs.
 *   - door_env_check: a per-exec env entry "K=V" whose name changes what runs
 *     (the loader's LD_*, interpreter and build-tool hooks, PATH, HOME, ...) is
 *     refused; the full list is door_env_refused_* below and docs/cli.md.
 *   - door_stdin_args: the up-front stdin's sha256, size and (UTF-8, <= 4 KiB,
 *     no NUL) text.
 *
 * No I/O, no logging. Errors: -EINVAL malformed input, -EPERM a refused name
 * or program word, -E2BIG a cap.
 */

#define DOOR_MAX_ARGS 4096 /* argv entries (= AGENT_MAX_ARGS) */
#define DOOR_MAX_ENV 256 /* per-exec env entries */
#define DOOR_MAX_ENV_NAME 256 /* bytes of one env name */
#define DOOR_MAX_WORD (128u * 1024) /* one argv word or env entry (= AGENT_MAX_STRING) */
#define DOOR_MAX_LINE ((size_t)256 << 10) /* the quoted command line */
#define DOOR_MAX_CWD 4096
#define DOOR_MAX_STDIN ((size_t)1 << 20) /* stdin known up front */
#define DOOR_MAX_STDIN_TEXT 4096 /* ... recorded as text when UTF-8 and at most this */

/* Append s quoted for a POSIX shell: bare when every byte is safe, else in single quotes. */
_wur_ int door_quote_word(const char *s, struct buf *out);

/*
 * The decided command line for argv (NULL-terminated, at least one word) and
 * env (NULL-terminated "K=V" entries, or NULL). The program word is quoted
 * when it holds '=' or is a shell reserved word; a program word starting with
 * '%' (a job spec to bash/zsh) is refused; with a per-exec env, a program word
 * holding '=' or starting with '-' is refused (env(1) would read it as an
 * assignment or option, so the line would not name what runs). *ret is a new
 * string.
 */
_wur_ int door_command_line(char *const *argv, char *const *env, char **ret);

/*
 * Check one per-exec env entry "K=V": -EINVAL when malformed (no '=', empty
 * or invalid name, longer than the caps), -EPERM when the name is refused
 * (*ret_why then says which rule, a static string).
 */
_wur_ int door_env_check(const char *entry, const char **ret_why);

/* True when this env name may not be set per exec (why: a static string). */
bool door_env_name_refused(const char *name, size_t n, const char **ret_why);

/*
 * Add stdin_sha256 (64 hex), stdin_bytes and, when the bytes are UTF-8 without
 * NUL and at most DOOR_MAX_STDIN_TEXT, stdin_text to args. -E2BIG above
 * DOOR_MAX_STDIN.
 */
_wur_ int door_stdin_args(const void *p, size_t n, json_t *args);

/* True for a box name: [A-Za-z0-9][A-Za-z0-9._-]{0,62}. */
bool door_box_name_ok(const char *s);

#endif
