/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_PATCH_PATCH_GIT_H
#define TKBOX_PATCH_PATCH_GIT_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "macro.h"
#include "patch/patch.h"

/*
 * The one place the patch door runs git (not pure: forks, execs, writes
 * under the caller's scratch directory). Every git the door runs gets the
 * same environment and the same fixed options:
 *
 *   env:  PATH=/usr/bin:/bin, LC_ALL=C, HOME=<empty dir>,
 *         XDG_CONFIG_HOME=<empty dir>, GIT_CONFIG_NOSYSTEM=1,
 *         GIT_CONFIG_GLOBAL=/dev/null, GIT_ATTR_NOSYSTEM=1, GIT_PAGER=cat,
 *         GIT_TERMINAL_PROMPT=0, GIT_OPTIONAL_LOCKS=0, then the caller's
 *         extra entries (GIT_DIR=..., GIT_WORK_TREE=...), nothing else;
 *   argv: <git> -c core.fsmonitor=false -c core.pager=cat -c diff.external=
 *         -c core.untrackedCache=false --no-pager <the caller's args...>
 *
 * so no system, global or user config, no attributes file, no pager, no
 * fsmonitor and no external diff reach it (an empty diff.external makes a
 * `git diff` fail rather than run a program a repository names: the door
 * runs no git diff). Every fd but 0, 1 and 2 is closed in git. A caller that must pass a value
 * back (core.hooksPath, core.excludesFile, safe.directory) puts "-c",
 * "name=value" first in its own args.
 */

#define PATCH_GIT_TIMEOUT_S 120 /* default deadline of one git run */
#define PATCH_GIT_MAX_ARGS 64 /* caller args of one run */
#define PATCH_GIT_MAX_EXTRA_ENV 8 /* caller env entries of one run */
#define PATCH_GIT_ERR_MAX ((size_t)16 << 10) /* stderr kept for a message; the rest is dropped */
#define PATCH_GIT_NUMSTAT_MAX ((size_t)8 << 20) /* git apply --numstat --summary output the cross-check reads */

struct patch_git_env {
	char *git; /* absolute path of the git binary */
	char *home; /* the empty HOME / XDG_CONFIG_HOME directory */
	char *env_home, *env_xdg; /* "HOME=...", "XDG_CONFIG_HOME=..." (storage for envp) */
};

/*
 * Find git (/usr/sbin, /sbin, /usr/bin, /bin; -ENOENT when absent) and make
 * home (mkdir 0700; an existing directory is accepted only when empty:
 * -ENOTEMPTY otherwise). home must be absolute (-EINVAL). *ret is written
 * only on success; release it with patch_git_env_release.
 */
_wur_ int patch_git_env(const char *home, struct patch_git_env *ret);
void patch_git_env_release(struct patch_git_env *e);

/*
 * The environment a run gets: the fixed entries above plus extra (may be
 * NULL; at most PATCH_GIT_MAX_EXTRA_ENV), NULL-terminated, into out[n]
 * (n >= 11 + PATCH_GIT_MAX_EXTRA_ENV + 1). Pointers borrow from e and extra.
 */
#define PATCH_GIT_ENVP_SIZE (11 + PATCH_GIT_MAX_EXTRA_ENV + 1)
_wur_ int patch_git_envp(const struct patch_git_env *e, const char *const *extra, const char **out, size_t n);

struct patch_git_run_opts {
	const char *cwd; /* NULL: inherit */
	int stdin_fd; /* -1: /dev/null; else dup'ed to the child's stdin (the caller keeps it) */
	const char *const *extra_env; /* NULL-terminated "NAME=value" entries, or NULL */
	struct buf *out; /* stdout; past its max_size the child is killed and -E2BIG returned; NULL: /dev/null */
	struct buf *err; /* stderr, kept up to its max_size, the rest dropped (never an error); NULL: /dev/null */
	unsigned timeout_s; /* 0: PATCH_GIT_TIMEOUT_S */
};

/*
 * Run git with args (NULL-terminated, at most PATCH_GIT_MAX_ARGS, without
 * "git" itself: { "apply", "--numstat", NULL }) as described above. The
 * child dies with the caller (PR_SET_PDEATHSIG) and is killed at the
 * deadline. Returns git's exit status (0..255), -ETIME past the deadline,
 * -E2BIG when stdout passed its cap, -ECHILD when git died by a signal,
 * or another -errno.
 */
_wur_ int patch_git_run(const struct patch_git_env *e, const char *const args[], const struct patch_git_run_opts *o);

/*
 * The first line of a git stderr buffer, escaped for a message (log_quote
 * form: quoted, control characters and bytes >= 0x80 as \xNN, capped), into
 * out. "(no message)" when empty. Returns out.
 */
#define PATCH_GIT_LINE_BUFSIZE 820
const char *patch_git_first_line(const struct buf *err, char out[PATCH_GIT_LINE_BUFSIZE]);

/*
 * The cross-check (issue 14: "git itself must read the same paths, binary
 * flags, creations, deletions and modes"). Makes tmpdir/home and an empty
 * repository tmpdir/repo (git init -q; tmpdir must exist and hold neither),
 * runs `git apply --numstat --summary` there on patch_file (given on stdin)
 * and compares what git read with p, which patch_parse made from the same
 * bytes: the set of paths, each path's binary flag, added/deleted counts,
 * creation, deletion, and modes (created, deleted, changed).
 * -EBADMSG with diag naming the path and the field ("git reads a.txt as a
 * creation, the parser does not") on any difference, or with git's first
 * stderr line when git could not read the patch; -ETIME/-E2BIG/-errno with
 * diag set otherwise.
 */
_wur_ int patch_git_crosscheck(const char *patch_file, const struct patch *p, const char *tmpdir, char *diag,
			       size_t diag_size);

/*
 * The comparator alone (pure; what patch_git_crosscheck uses, exposed for
 * tests): out[0..n) is git's output of `git apply --numstat --summary`
 * (without -z: git terminates --summary lines with '\n' whatever -z says,
 * so both parts are read in their '\n' form, C-quoted names unquoted).
 * 0 when it says the same as p, -EBADMSG with diag otherwise.
 */
_wur_ int patch_git_compare(const uint8_t *out, size_t n, const struct patch *p, char *diag, size_t diag_size);

#endif
