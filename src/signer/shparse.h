/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_SIGNER_SHPARSE_H
#define TKBOX_SIGNER_SHPARSE_H

#include <stddef.h>

#include "macro.h"

/*
 * A bounded, pure tokenizer of POSIX sh command lines, good enough for policy
 * matching (not a shell: nothing is expanded or executed). It splits a line on
 * ; && || | |& & and newlines into simple commands, resolves quotes and
 * escapes, recurses into $(...), `...`, <(...), >(...), ( subshells ), heredocs
 * and here-strings fed to a shell, `sh -c STRING` (any sh-like shell),
 * `eval ARGS`, `su -c STRING`, `env -S STRING`, `ssh HOST ARGS`, `watch ARGS`
 * and `find ... -exec ... ;`, and strips what only wraps the command that
 * runs: leading NAME=value assignments, reserved words (if, then, !, {, ...)
 * and wrappers (env, sudo, doas, nohup, time, exec, command, builtin, xargs,
 * nice, ionice, timeout N, stdbuf, setsid, busybox, chroot, unbuffer).
 *
 * The result gives policy rules two views:
 *   lines:    one normalised line per command list (the top level and each
 *             nested list): its simple commands, wrappers stripped, quotes
 *             resolved, argv[0] verbatim, words that hold a quoted blank or
 *             operator character re-quoted with '...' (inside which quoted
 *             | & ; < > ( ) ` and newlines print as '_'), redirections kept as
 *             " OP target", joined by " OP " (" | ", " && ", " ; " ...); a
 *             subshell appears inline as "( ... )".
 *   commands: every simple command (nested ones too): argv with argv[0]
 *             reduced to its basename (unless it holds a substitution), and
 *             the same words joined by single spaces (re-quoted as above,
 *             operator characters kept).
 * So `echo "curl x | sh"` normalises to the line `echo 'curl x _ sh'`: quoted
 * text never looks like a pipe.
 *
 * Parsing fails (with an sh_error saying why) on an unbalanced quote, an
 * unterminated $( ` ${ $(( or <(, an unclosed heredoc, a stray ')', a
 * redirection without a target, a NUL byte, and when a cap is exceeded.
 */

#define SH_MAX_INPUT ((size_t)16 << 10) /* bytes of one command line */
#define SH_MAX_DEPTH 8 /* nesting of substitutions, subshells, sh -c, eval */
#define SH_MAX_WORDS 4096 /* words over the whole parse, nested ones included */
#define SH_MAX_COMMANDS 512 /* simple commands over the whole parse */
#define SH_MAX_OUTPUT ((size_t)256 << 10) /* bytes of all normalised text produced */
#define SH_MAX_HEREDOCS 16 /* pending heredocs on one line */

enum sh_error {
	SH_OK = 0,
	SH_ERR_SQUOTE, /* unbalanced single quote */
	SH_ERR_DQUOTE, /* unbalanced double quote */
	SH_ERR_SUBST, /* unterminated $( ... ), <( ... ), ( ... ) or $(( ... )) */
	SH_ERR_BACKTICK, /* unterminated ` ... ` */
	SH_ERR_PARAM, /* unterminated ${ ... } */
	SH_ERR_HEREDOC, /* heredoc not closed by its delimiter */
	SH_ERR_SYNTAX, /* stray ')', redirection without target, ... */
	SH_ERR_NUL, /* a NUL byte in the line */
	SH_ERR_TOO_LONG, /* SH_MAX_INPUT or SH_MAX_OUTPUT */
	SH_ERR_TOO_DEEP, /* SH_MAX_DEPTH */
	SH_ERR_TOO_MANY_WORDS, /* SH_MAX_WORDS */
	SH_ERR_TOO_MANY_COMMANDS, /* SH_MAX_COMMANDS */
	SH_ERR_TOO_MANY_HEREDOCS, /* SH_MAX_HEREDOCS */
	_SH_ERR_MAX,
};

/* A static one-line description ("unbalanced single quote", ...). */
const char *sh_error_str(enum sh_error e);

struct sh_command {
	char **argv; /* NULL-terminated; argv[0] a basename (unless it holds a substitution) */
	size_t argc; /* >= 1 */
	char *joined; /* argv joined by single spaces, words re-quoted where needed */
};

struct sh_parse {
	struct sh_command *commands;
	size_t n_commands;
	char **lines; /* normalised command lists, see above */
	size_t n_lines;
};

/*
 * Parse s[0..n). Returns 0 and a new *ret (free with sh_parse_free) on
 * success. Returns -EBADMSG for a line that cannot be parsed and -E2BIG for a
 * cap exceeded, and then writes the reason to *err when err is non-NULL (on
 * success *err is SH_OK); -ENOMEM. Pure: no I/O, no logging, no globals.
 */
_wur_ int sh_parse(const char *s, size_t n, enum sh_error *err, struct sh_parse **ret);

void sh_parse_free(struct sh_parse *p);

#endif
