/* SPDX-License-Identifier: Apache-2.0 */
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "banned.h"
#include "path.h"

int path_verify(const char *p, size_t n)
{
	size_t seg_start = 0, depth = 0;

	if (n == 0) {
		return -EINVAL;
	}
	if (n > PATH_MAX_LEN) {
		return -ENAMETOOLONG;
	}
	if (memchr(p, 0, n)) {
		return -EINVAL;
	}
	if (p[0] == '/') {
		return -EINVAL;
	}
	for (size_t i = 0; i <= n; i++) {
		size_t len;

		if (i < n && p[i] != '/') {
			continue;
		}
		len = i - seg_start;
		if (len == 0) {
			return -EINVAL; /* "a//b" or a trailing '/' */
		}
		if (len > PATH_MAX_SEGMENT) {
			return -ENAMETOOLONG;
		}
		if ((len == 1 && p[seg_start] == '.') || (len == 2 && p[seg_start] == '.' && p[seg_start + 1] == '.')) {
			return -EINVAL;
		}
		if (++depth > PATH_MAX_DEPTH) {
			return -ELOOP;
		}
		seg_start = i + 1;
	}
	return 0;
}

static bool force_fallback;

void safe_openat_force_fallback(bool on)
{
	force_fallback = on;
}

static int openat2_in_root(int rootfd, const char *rel, int flags, mode_t mode)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC),
		.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
	if (fd < 0) {
		return negative_errno();
	}
	return (int)fd;
}

/*
 * The walk for kernels without openat2 (< 5.6) or where seccomp hides it:
 * every intermediate component is opened O_PATH|O_DIRECTORY|O_NOFOLLOW
 * relative to the previous one, so no symlink is ever followed and, since
 * path_verify refused "..", the walk cannot climb out of rootfd.
 */
static int walk_in_root(int rootfd, const char *rel, int flags, mode_t mode)
{
	_cleanup_free_ char *copy = strdup(rel);
	_cleanup_close_ int dirfd = -1;
	char *seg, *slash;
	int cur = rootfd, fd;

	if (!copy) {
		return -ENOMEM;
	}
	seg = copy;
	while ((slash = strchr(seg, '/'))) {
		*slash = 0;
		fd = openat(cur, seg, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			int r = negative_errno();
			/* O_NOFOLLOW|O_DIRECTORY on a symlink yields ENOTDIR: say what it is. */
			if (r == -ENOTDIR) {
				struct stat st;
				if (fstatat(cur, seg, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
					return -ELOOP;
				}
			}
			return r;
		}
		closep(&dirfd);
		dirfd = fd;
		cur = dirfd;
		seg = slash + 1;
	}
	fd = openat(cur, seg, flags | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0) {
		return negative_errno();
	}
	return fd;
}

int safe_openat(int rootfd, const char *rel, int flags, mode_t mode)
{
	int r = path_verify(rel, strlen(rel));

	if (r < 0) {
		return r;
	}
	if (!force_fallback) {
		r = openat2_in_root(rootfd, rel, flags, mode);
		if (r != -ENOSYS && r != -EPERM) {
			/* openat2 says EXDEV when RESOLVE_NO_SYMLINKS meets a link under RESOLVE_IN_ROOT in some cases. */
			return r == -EXDEV ? -ELOOP : r;
		}
	}
	return walk_in_root(rootfd, rel, flags, mode);
}

bool str_has_ctl(const char *s)
{
	for (; *s; s++) {
		if ((unsigned char)*s < 0x20 || *s == 0x7f) {
			return true;
		}
	}
	return false;
}

bool path_is_normal_abs(const char *s)
{
	if (s[0] != '/' || str_has_ctl(s)) {
		return false;
	}
	for (const char *p = s + 1;;) {
		const char *e = strchr(p, '/');
		size_t k = e ? (size_t)(e - p) : strlen(p);
		if ((k == 1 && p[0] == '.') || (k == 2 && p[0] == '.' && p[1] == '.')) {
			return false;
		}
		if (!e) {
			return true;
		}
		p = e + 1;
	}
}
