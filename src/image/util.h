/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_IMAGE_UTIL_H
#define TKBOX_IMAGE_UTIL_H

#include <stdbool.h>
#include <sys/types.h>

#include "buf.h"

/*
 * Helpers shared by the image builder and the workspace builder: running a
 * host tool (mkfs.ext4, debugfs, git) with an explicit environment, removing
 * a tree without following symlinks, and the error detail callers show.
 */

/* A diagnostic the top layer prints: set by the library, never logged by it. */
#define IMAGE_DIAG_MAX 512
struct image_diag {
	char msg[IMAGE_DIAG_MAX];
};
void image_diag_set(struct image_diag *d, const char *fmt, ...) _printf_(2, 3);

/*
 * A child's answer o (parsed from p[0..n)) is exactly what its encoder
 * writes: its JCS form (at most max bytes) equals the bytes. -EBADMSG (or
 * -ENOMEM) with diag set, prefixed by pfx, otherwise.
 */
struct json_t;
_wur_ int image_answer_canonical(const struct json_t *o, const void *p, size_t n, size_t max, const char *pfx,
				 struct image_diag *diag);

/*
 * A child's answer has exactly the keys of the NULL-terminated list keys:
 * -EBADMSG with diag set (prefixed by pfx) naming an unknown or missing key.
 */
_wur_ int image_answer_check_keys(const struct json_t *o, const char *const *keys, const char *pfx,
				  struct image_diag *diag);

/*
 * A string member key of a child's answer, duplicated into *ret (nullable:
 * JSON null reads as NULL). -EBADMSG with diag set (prefixed by pfx) when it
 * is not a string; -ENOMEM.
 */
_wur_ int image_answer_get_str(const struct json_t *o, const char *key, bool nullable, const char *pfx, char **ret,
			       struct image_diag *diag);

/*
 * Run argv[0] (an absolute path) with exactly envp, stdin from /dev/null, in
 * cwd (NULL: inherit). stdout goes to out (NULL: /dev/null), stderr to err
 * (NULL: /dev/null); each is capped by its buffer's max_size (-E2BIG past
 * it, the child is killed). Returns the exit status (0..255) or -errno;
 * a child killed by a signal is -ECHILD.
 */
_wur_ int image_run(char *const argv[], char *const envp[], const char *cwd, struct buf *out, struct buf *err);

/*
 * image_run with a wall-clock deadline of timeout_s seconds (> 0): past it
 * the tool is killed (SIGKILL) and -ETIME is returned; the caller's message
 * names its limit. Every tool also dies with the process that ran it
 * (PR_SET_PDEATHSIG). image_run uses IMAGE_RUN_TIMEOUT_S.
 */
#define IMAGE_RUN_TIMEOUT_S 900
_wur_ int image_run_timed(char *const argv[], char *const envp[], const char *cwd, struct buf *out, struct buf *err,
			  unsigned timeout_s);

/* image_run_timed, and the child keeps keep_fd (> 2, else -EINVAL) open across its exec, at the same number. */
_wur_ int image_run_keep_fd(char *const argv[], char *const envp[], const char *cwd, struct buf *out, struct buf *err,
			    unsigned timeout_s, int keep_fd);

/* The one runner of a helper program (image_run* and the patch door's git are it with fewer options). */
struct image_run_opts {
	const char *cwd; /* NULL: inherit */
	struct buf *out; /* stdout (NULL: /dev/null); past its max_size -E2BIG, the child killed */
	struct buf *err; /* stderr (NULL: /dev/null); past its max_size as out, or the rest dropped (err_truncate) */
	bool err_truncate;
	unsigned timeout_s; /* > 0: past it SIGKILL and -ETIME */
	int keep_fd; /* -1, or an fd (> 2) the child keeps open at the same number */
	int stdin_fd; /* -1: /dev/null; else dup'ed to the child's stdin (the caller keeps it) */
};

/* Run argv[0] (an absolute path) with exactly envp as o says; image_run's return values. */
_wur_ int image_run_opts(char *const argv[], char *const envp[], const struct image_run_opts *o);

/* Remove name beneath dirfd and everything below it, never following a symlink. ENOENT is success. */
_wur_ int image_rm_rf_at(int dirfd, const char *name);

/* Find a program in /usr/sbin, /sbin, /usr/bin, /bin: new string, -ENOENT when absent. */
_wur_ int image_find_program(const char *name, char **ret);

#endif
