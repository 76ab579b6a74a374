/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_IMAGE_WORKSPACE_H
#define TKBOX_IMAGE_WORKSPACE_H

#include "image/util.h"

/*
 * The workspace image: a snapshot of a git checkout as an ext4 file system
 * (the read-only lower layer of /workspace in the guest).
 *
 * What goes in: `git ls-files -z --cached --others --exclude-standard` run in
 * DIR (tracked files plus untracked files git does not ignore), minus:
 *   - anything with a ".git" path segment (the git dir, gitlinks' .git files)
 *   - credential files, even when tracked (workspace_credential_rule)
 *   - directories (submodules, nested repositories), device files, FIFOs
 *   - names with control characters
 *   - *.asc files that hold a PGP private key block (found while copying)
 *   - symbolic links whose target is absolute, leaves the checkout, leads
 *     into .git or to a credential file (workspace_link_rule)
 * Regular files are copied (mode 0644, or 0755 when the owner may execute);
 * the other symlinks are copied as links with their target unchanged, never
 * followed. Each path left out goes to opts.notice with the reason.
 *
 * git runs with an explicit environment: GIT_CONFIG_NOSYSTEM=1,
 * GIT_CONFIG_GLOBAL=/dev/null, HOME and XDG_CONFIG_HOME an empty directory
 * made beside out (the one directory a confined builder writes),
 * no pager, no terminal prompt, and -c core.fsmonitor=false
 * -c core.hooksPath=/dev/null -c core.untrackedCache=false
 * -c safe.directory=DIR, so no config names a program it would run.
 */

#define WORKSPACE_MAX_FILES 200000 /* entries git lists */
#define WORKSPACE_MAX_BYTES ((uint64_t)4 << 30) /* file bytes copied */
#define WORKSPACE_MAX_LISTING ((size_t)64 << 20) /* git's output */

/*
 * The workspace check (issue 13): a secret's value must not reach the box
 * through the workspace. Every listed path (before anything about it is said),
 * every copied file's content (streamed: a value split across reads is found)
 * and every symlink target is searched for each value as raw bytes; a match
 * refuses the whole build (-EACCES, rule "secret-in-workspace") with
 * "workspace file <path> holds the value of secret NAME" or, when the path
 * itself holds it, "a workspace path holds the value of secret NAME". Never
 * the value. Encoded forms are not looked for (docs/secrets.md).
 */
#define WORKSPACE_SECRET_RULE "secret-in-workspace"
struct workspace_secret {
	const char *name;
	const uint8_t *value; /* len bytes (6..4096) */
	size_t len;
};

struct workspace_opts {
	const char *dir; /* the checkout */
	const char *out; /* the ext4 to create (must not exist) */
	uint32_t uid, gid; /* owner of every file in the image */
	uint64_t max_files; /* 0: WORKSPACE_MAX_FILES */
	uint64_t max_bytes; /* 0: WORKSPACE_MAX_BYTES */
	/* told about each path left out and why (may be NULL) */
	void (*notice)(void *userdata, const char *rel, const char *why);
	/* told after each file copied ("copy") and once before the ext4 build ("ext4"), with the counts so far
	 * (may be NULL; tkbox workspace build draws a progress line from it when stderr is a terminal) */
	void (*progress)(void *userdata, const char *phase, uint64_t files, uint64_t bytes);
	void *userdata;
	struct image_diag *diag;
	/* when a limit or rule refused the build, its name ("WORKSPACE_MAX_FILES") goes here (may be NULL) */
	const char **ret_rule;
	const struct workspace_secret *secrets; /* n_secrets values the workspace must not hold (may be NULL) */
	size_t n_secrets;
};

struct workspace_stats {
	uint64_t files;
	uint64_t symlinks;
	uint64_t bytes;
	uint64_t credentials; /* left out as credential files */
	uint64_t skipped; /* left out for another reason */
};

_wur_ int workspace_build(const struct workspace_opts *o, struct workspace_stats *ret);

/*
 * The credential-file rule that matches a relative path ("a/b/.env"), or
 * NULL. Pure. The list is in docs/limits.md; matching is on path segments
 * and is case-insensitive.
 */
const char *workspace_credential_rule(const char *rel);

/*
 * Why a symbolic link at rel (relative to the checkout) with this target is
 * left out, or NULL when it is copied. Pure. The target is resolved
 * lexically against rel's directory (".." pops a segment, "." and empty
 * segments are dropped, links on the way are not followed): a target that is
 * absolute, climbs above the checkout, has a .git segment, or names a
 * credential file or directory (workspace_credential_rule) is left out, so
 * no link in the box shows a host path or points at what was left out.
 * Returns workspace_link_to_credential for the last case.
 */
const char *workspace_link_rule(const char *rel, const char *target);
extern const char workspace_link_to_credential[];

#endif
