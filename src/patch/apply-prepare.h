/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_PATCH_APPLY_PREPARE_H
#define TKBOX_PATCH_APPLY_PREPARE_H

#include <stdbool.h>
#include <stddef.h>

#include "macro.h"
#include "patch/apply-answer.h"

/*
 * The prepare step of tkbox apply (issue 14; the reference's "Change your
 * repository behind your back" row): from a saved patch and a checkout, the
 * plan the signer decides file by file. Nothing is ever written into the
 * checkout: everything is built under the scratch directory, the one place
 * the child (`tkbox-host apply-prepare`, SANDBOX_APPLY_PREPARE) may write.
 *
 *   1. the patch (at most PATCH_MAX_BYTES) is copied to <scratch>/patch.diff,
 *      hashed, parsed (patch_parse) and cross-checked with git
 *      (patch_git_crosscheck in <scratch>/xcheck);
 *   2. the values of core.excludesFile, core.hooksPath and safe.directory in
 *      the user's system and global config files are read with `git config
 *      --file F --includes --get-all` (git config runs nothing) and passed back
 *      with -c to the git commands run in the checkout, which otherwise read
 *      no system or global config (patch-git.h); `git rev-parse` names the
 *      top, the git dir and the common dir, `git config --get-all
 *      core.hooksPath` every hooks path (relative ones against the top);
 *      rev-parse failing refuses the whole apply (rule git-dir-unknown);
 *   3. per path: under (or above) the git dir, the common dir or a hooks path
 *      (git-dir, hooks-path); a symlinked parent in the checkout, or the
 *      path itself a directory (symlink-parent); a special file
 *      (special-file); Table 6 without allow_sensitive (sensitive); then
 *      `git check-ignore -z --stdin` in the checkout: an ignored creation is
 *      left out with a notice, an ignored modify or delete refused (ignored);
 *   4. <scratch>/tree gets a copy of each kept path's checkout entry (bytes
 *      and git mode, or a symlink as a symlink; read beneath the checkout
 *      with safe_openat, never following a link), hashed in the same pass
 *      (the plan's pre state); <scratch>/git an empty bare repository with no
 *      templates; `git apply --whitespace=nowarn` of the kept sections with
 *      GIT_DIR and GIT_WORK_TREE there (git-apply when it fails: usually the
 *      checkout changed since the box was created);
 *   5. each result read back from <scratch>/tree (sha256 of its bytes or
 *      link target, git mode, size at most PATCH_MAX_FILE_BYTES: rule
 *      PATCH_MAX_FILE_BYTES), its type and mode checked against the patch.
 * Every refusal names its rule, the path (escaped) and what a person can do.
 */

#define APPLY_PREPARE_TIMEOUT_S 300 /* the whole prepare child, as the daemon runs it */
#define APPLY_PREPARE_MAX_CONFIG 24 /* values passed back with -c (system + global, all three names) */

struct apply_prepare_opts {
	const char *patch_file; /* the saved patch */
	const char *checkout; /* absolute directory; echoed in the plan */
	const char *scratch; /* absolute, existing, empty directory; echoed in the plan */
	bool allow_sensitive;
	const char *user_home; /* HOME whose global git config is read (NULL or relative: none) */
	const char *user_xdg; /* XDG_CONFIG_HOME (NULL or relative: HOME/.config) */
	const char *system_config; /* NULL: /etc/gitconfig; "" none (tests) */
};

/*
 * Build the plan into *ret: planned (ret->error NULL) or refused (error,
 * rule, path set). Returns 0 either way; -ENOMEM (or another -errno the
 * plan could not even say) otherwise, *ret then released.
 */
_wur_ int apply_prepare(const struct apply_prepare_opts *o, struct apply_plan *ret);

/*
 * The daemon's side: run `EXE apply-prepare --json --patch P --checkout C
 * --scratch S [--allow-sensitive]` with the environment PATH, LC_ALL=C and
 * the daemon's own HOME and XDG_CONFIG_HOME (where the user's global git
 * config is; nothing else), a deadline of APPLY_PREPARE_TIMEOUT_S, stdout
 * capped at APPLY_PLAN_MAX_BYTES and decoded with apply_plan_decode. The
 * child confines itself (SANDBOX_APPLY_PREPARE: writes only under S).
 * S must exist and be empty. Returns 0 with *ret filled when the child
 * answered (planned or refused: ret->error says which), -errno with a
 * message in diag when it did not, its answer was refused, its exit status
 * and answer disagree, or the plan names another checkout or scratch.
 */
_wur_ int apply_prepare_exec(const char *exe, const char *patch_file, const char *checkout, const char *scratch,
			     bool allow_sensitive, struct apply_plan *ret, char *diag, size_t diag_size);

#endif
