/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_PATH_H
#define TKBOX_PATH_H

#include <fcntl.h>

#include "macro.h"

/*
 * The one check for relative paths that come from an untrusted source (a
 * patch, an image layer, the guest, a bundle). path_verify accepts
 * "a/b/c"-style paths only:
 *   - not empty, not absolute, no NUL inside the given length
 *   - no empty segment ("a//b", trailing '/'), no "." or ".." segment
 *   - at most PATH_MAX_LEN bytes, each segment at most PATH_MAX_SEGMENT bytes,
 *     at most PATH_MAX_DEPTH segments
 * Errors: -EINVAL (form), -ENAMETOOLONG (a length cap), -ELOOP (depth cap).
 */

#define PATH_MAX_LEN 4095
#define PATH_MAX_SEGMENT 255
#define PATH_MAX_DEPTH 128

_wur_ int path_verify(const char *p, size_t n);

/*
 * Open rel (which must pass path_verify) beneath the directory rootfd without
 * following any symlink and without leaving the root: openat2 with
 * RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS where the kernel
 * has it, else a walk one component at a time with O_NOFOLLOW. O_CLOEXEC is
 * always added. Returns the fd, or -ELOOP when a component is a symlink.
 * flags/mode as for openat; O_CREAT creates only the last component.
 */
/* A control character (below 0x20, or 0x7f) anywhere in s. */
bool str_has_ctl(const char *s);

/*
 * An absolute path with no "." or ".." segment and no control character, so a
 * prefix check says where it is. Empty segments are allowed ("/a//b").
 */
bool path_is_normal_abs(const char *s);

_wur_ int safe_openat(int rootfd, const char *rel, int flags, mode_t mode);

/* Test hook: force the O_NOFOLLOW walk even where openat2 exists. */
void safe_openat_force_fallback(bool on);

#endif
