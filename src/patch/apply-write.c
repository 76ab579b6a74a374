/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "banned.h"
#include "buf.h"
#include "crypto.h"
#include "io.h"
#include "log.h"
#include "path.h"
#include "patch/apply-write.h"

/* ---------------------------------------------------------------- the writer (child side) */

struct wctx {
	int out_fd;
	const struct apply_file *f;
};

/* The git mode of what st describes: 120000, 100755 (the owner may execute), 100644; 0 for anything else. */
static uint32_t git_mode(const struct stat *st)
{
	if (S_ISLNK(st->st_mode)) {
		return PATCH_MODE_LINK;
	}
	if (S_ISREG(st->st_mode)) {
		return st->st_mode & S_IXUSR ? PATCH_MODE_EXEC : PATCH_MODE_FILE;
	}
	return 0;
}

static const char *kind_of(const struct stat *st)
{
	return S_ISDIR(st->st_mode)   ? "a directory"
	       : S_ISLNK(st->st_mode) ? "a symlink"
	       : S_ISREG(st->st_mode) ? "a regular file"
				      : "a special file";
}

static int emit(int out_fd, const struct apply_line *l)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r = buf_new(APPLY_LINE_MAX, 0, &b);

	if (r >= 0) {
		r = apply_line_encode(l, b);
	}
	return r < 0 ? r : io_write_all(out_fd, buf_ptr(b), buf_len(b));
}

/*
 * The file's error line: "<path>: <what>; nothing more was written (rule R)"
 * with the path quoted. Returns 1 (stopped), or -errno when the line could
 * not be written.
 */
_printf_(3, 4) static int wfail(const struct wctx *c, const char *rule, const char *fmt, ...)
{
	char q[LOG_QUOTE_BUFSIZE], what[APPLY_MAX_ERROR], msg[APPLY_MAX_ERROR + 1];
	struct apply_line l = { .kind = APPLY_LINE_ERROR, .rule = (char *)rule };
	va_list ap;
	int r;

	va_start(ap, fmt);
	(void)vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	(void)snprintf(msg, sizeof(msg), "%s: %s; nothing more was written (rule %s)",
		       log_quote(c->f->path, strlen(c->f->path), q), what, rule);
	l.path = c->f->path;
	l.error = apply_text_clean(msg, APPLY_MAX_ERROR);
	if (!l.error) {
		return -ENOMEM;
	}
	r = emit(c->out_fd, &l);
	free(l.error);
	return r < 0 ? r : 1;
}

/* An open file's bytes (at most max: -E2BIG past it) into a new buffer. */
static int read_fd(int fd, size_t max, struct buf **ret)
{
	return io_read_all_new(fd, max, 0, ret);
}

/* A link target beneath dirfd into a new buffer (no NUL counted). -errno (EINVAL: not a symlink). */
static int read_link(int dirfd, const char *name, struct buf **ret)
{
	char t[PATH_MAX + 1];
	ssize_t n = readlinkat(dirfd, name, t, sizeof(t));
	struct buf *b = NULL;
	int r;

	if (n < 0) {
		return negative_errno();
	}
	if ((size_t)n >= sizeof(t)) {
		return -ENAMETOOLONG;
	}
	if ((r = buf_new(PATH_MAX + 1, 0, &b)) < 0 || (r = buf_put(b, t, (size_t)n)) < 0) {
		buf_free(b);
		return r;
	}
	*ret = b;
	return 0;
}

/*
 * What an entry holds now (never following it): its git mode and the sha256
 * of its bytes or link target. -ENOENT when absent; -EMEDIUMTYPE for a
 * directory or a special file (ret_mode 0, *ret_st filled); -E2BIG for a
 * file over PATCH_MAX_FILE_BYTES; other -errno. ret_data (may be NULL)
 * gets the bytes.
 */
static int entry_state(int dirfd, const char *name, struct stat *ret_st, uint32_t *ret_mode, char hex[65],
		       struct buf **ret_data)
{
	_cleanup_buf_ struct buf *data = NULL;
	_cleanup_close_ int fd = -1;
	struct stat st;
	int r;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		return negative_errno();
	}
	*ret_st = st;
	*ret_mode = git_mode(&st);
	if (S_ISLNK(st.st_mode)) {
		r = read_link(dirfd, name, &data);
	} else if (S_ISREG(st.st_mode)) {
		/* O_NONBLOCK: a fifo swapped in after the fstatat is not waited on; it is refused below */
		fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) < 0) {
			return negative_errno();
		}
		if (!S_ISREG(st.st_mode)) {
			*ret_st = st;
			*ret_mode = 0;
			return -EMEDIUMTYPE;
		}
		*ret_st = st;
		*ret_mode = git_mode(&st);
		r = read_fd(fd, PATCH_MAX_FILE_BYTES, &data);
	} else {
		return -EMEDIUMTYPE;
	}
	if (r < 0) {
		return r;
	}
	r = sha256_hex(buf_ptr(data), buf_len(data), hex);
	if (r < 0) {
		return r;
	}
	if (ret_data) {
		*ret_data = steal_ptr(data);
	}
	return 0;
}

/* The decided result from the scratch tree, checked against the decision: 0 and *ret_data, 1 refused. */
static int read_result(const struct wctx *c, int tree_fd, struct buf **ret_data)
{
	const struct apply_file *f = c->f;
	_cleanup_buf_ struct buf *data = NULL;
	_cleanup_close_ int fd = -1;
	const char *slash = strrchr(f->path, '/');
	uint32_t mode;
	char hex[65];
	struct stat st;
	int r;

	if (f->mode == PATCH_MODE_LINK) {
		_cleanup_free_ char *dir = slash ? strndup(f->path, (size_t)(slash - f->path)) : NULL;
		if (slash && !dir) {
			return -ENOMEM;
		}
		fd = dir ? safe_openat(tree_fd, dir, O_RDONLY | O_DIRECTORY, 0) : fcntl(tree_fd, F_DUPFD_CLOEXEC, 3);
		r = fd < 0 ? fd : read_link(fd, slash ? slash + 1 : f->path, &data);
		if (r < 0) {
			return wfail(c, "result-mismatch",
				     "the decided result is not a symlink in the scratch tree (%s)", tk_strerror(r));
		}
		mode = PATCH_MODE_LINK;
	} else {
		fd = safe_openat(tree_fd, f->path, O_RDONLY | O_NONBLOCK, 0);
		if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
			return wfail(c, "result-mismatch",
				     "the decided result is not a regular file in the scratch tree (%s)",
				     fd < 0 ? tk_strerror(fd) : "another type");
		}
		mode = git_mode(&st);
		r = read_fd(fd, PATCH_MAX_FILE_BYTES, &data);
		if (r == -E2BIG) {
			return wfail(
				c, "result-mismatch",
				"the result in the scratch tree is larger than PATCH_MAX_FILE_BYTES (%zu), not the "
				"%llu bytes decided",
				PATCH_MAX_FILE_BYTES, (unsigned long long)f->size);
		}
		if (r < 0) {
			return wfail(c, "write-failed", "the result could not be read from the scratch tree: %s",
				     tk_strerror(r));
		}
	}
	r = sha256_hex(buf_ptr(data), buf_len(data), hex);
	if (r < 0) {
		return r;
	}
	if (mode != f->mode || buf_len(data) != f->size || strcmp(hex, f->sha256) != 0) {
		return wfail(c, "result-mismatch",
			     "the result in the scratch tree (mode %s, %zu bytes, sha256 %.12s...) is not what was "
			     "decided (mode %s, %llu bytes, sha256 %.12s...)",
			     patch_mode_name(mode) ? patch_mode_name(mode) : "?", buf_len(data), hex,
			     patch_mode_name(f->mode), (unsigned long long)f->size, f->sha256);
	}
	*ret_data = steal_ptr(data);
	return 0;
}

/*
 * The parent directory of the file, opened from the checkout root one
 * component at a time without following anything; a creation's missing
 * parents made. 0 and *ret_fd, 1 refused.
 */
static int open_parent(const struct wctx *c, int root_fd, int *ret_fd)
{
	_cleanup_free_ char *path = strdup(c->f->path);
	_cleanup_close_ int cur = -1;
	char *comp, *next;

	if (!path) {
		return -ENOMEM;
	}
	cur = fcntl(root_fd, F_DUPFD_CLOEXEC, 3);
	if (cur < 0) {
		return negative_errno();
	}
	for (comp = path; (next = strchr(comp, '/')); comp = next + 1) {
		int fd;
		*next = '\0';
		fd = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT && c->f->op == PATCH_CREATE) {
			if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST) {
				return wfail(c, "write-failed", "its directory %s could not be made: %s", path,
					     tk_strerror(negative_errno()));
			}
			fd = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		if (fd < 0) {
			int e = negative_errno();
			struct stat st;
			if (fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
				return wfail(
					c, "symlink-parent",
					"its parent %s in the checkout is a symlink; Box writes through no symlink",
					path);
			}
			if (e == -ENOENT || e == -ENOTDIR || e == -ELOOP) {
				return wfail(c, "checkout-changed", "its parent %s in the checkout %s since the plan",
					     path, e == -ENOENT ? "is gone" : "is no longer a directory");
			}
			return wfail(c, "write-failed", "its parent %s could not be opened: %s", path, tk_strerror(e));
		}
		(void)close(cur);
		cur = fd;
		*next = '/';
	}
	*ret_fd = steal_fd(cur);
	return 0;
}

static const char *pre_name(enum apply_pre_type t)
{
	return t == APPLY_PRE_FILE ? "a regular file" : t == APPLY_PRE_SYMLINK ? "a symlink" : "absent";
}

/* The checkout's entry against the plan's pre state: 0 unchanged, 1 refused. */
static int check_pre(const struct wctx *c, int dirfd, const char *name)
{
	const struct apply_file *f = c->f;
	struct stat st = { 0 };
	uint32_t mode = 0;
	char hex[65] = "";
	int r = entry_state(dirfd, name, &st, &mode, hex, NULL);

	if (r == -ENOENT) {
		return f->pre_type == APPLY_PRE_ABSENT
			       ? 0
			       : wfail(c, "checkout-changed", "it is gone from the checkout since the plan (it was %s)",
				       pre_name(f->pre_type));
	}
	if (r == -EMEDIUMTYPE || (r >= 0 && f->pre_type == APPLY_PRE_ABSENT)) {
		return wfail(c, "checkout-changed", "the checkout has %s there now; at the plan it was %s",
			     kind_of(&st), pre_name(f->pre_type));
	}
	if (r == -E2BIG) {
		return wfail(
			c, "checkout-changed",
			"it is larger than PATCH_MAX_FILE_BYTES (%zu) in the checkout now, so not what it was at the "
			"plan",
			PATCH_MAX_FILE_BYTES);
	}
	if (r < 0) {
		return wfail(c, "write-failed", "it could not be read in the checkout: %s", tk_strerror(r));
	}
	if (mode != f->pre_mode) {
		return wfail(c, "checkout-changed",
			     "its type or mode in the checkout changed since the plan (%s, was %s)",
			     patch_mode_name(mode), patch_mode_name(f->pre_mode));
	}
	if (strcmp(hex, f->pre_sha256) != 0) {
		return wfail(c, "checkout-changed", "its content in the checkout changed since the plan");
	}
	return 0;
}

static int temp_name(char ret[sizeof(APPLY_WRITE_TEMP_PREFIX) + 16])
{
	static const char digits[] = "0123456789abcdef";
	uint8_t rnd[8];
	size_t k = sizeof(APPLY_WRITE_TEMP_PREFIX) - 1;

	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		return -EIO;
	}
	memcpy(ret, APPLY_WRITE_TEMP_PREFIX, k);
	for (size_t i = 0; i < sizeof(rnd); i++) {
		ret[k++] = digits[rnd[i] >> 4];
		ret[k++] = digits[rnd[i] & 15];
	}
	ret[k] = '\0';
	return 0;
}

/* The bytes in a temp file (or a symlink) in dirfd, then renamed over name. 0 written, 1 refused. */
static int put_entry(const struct wctx *c, int dirfd, const char *name, const struct buf *data)
{
	const struct apply_file *f = c->f;
	char tmp[sizeof(APPLY_WRITE_TEMP_PREFIX) + 16];
	int r = -EEXIST, fd = -1;

	for (int tries = 0; tries < 8 && r == -EEXIST; tries++) {
		if ((r = temp_name(tmp)) < 0) {
			break;
		}
		if (f->mode == PATCH_MODE_LINK) {
			_cleanup_free_ char *target = strndup((const char *)buf_ptr(data), buf_len(data));
			r = !target ? -ENOMEM : symlinkat(target, dirfd, tmp) < 0 ? negative_errno() : 0;
		} else {
			fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
			r = fd < 0 ? negative_errno() : 0;
		}
	}
	if (r < 0) {
		return wfail(c, "write-failed", "a temp file could not be made next to it: %s", tk_strerror(r));
	}
	if (fd >= 0) {
		if (fchmod(fd, f->mode == PATCH_MODE_EXEC ? 0755 : 0644) < 0 ||
		    io_write_all(fd, buf_ptr(data), buf_len(data)) < 0 || fsync(fd) < 0) {
			r = negative_errno();
		}
		if (close(fd) < 0 && r >= 0) {
			r = negative_errno();
		}
	}
	if (r >= 0 && renameat(dirfd, tmp, dirfd, name) < 0) {
		r = negative_errno();
	}
	if (r < 0) {
		(void)unlinkat(dirfd, tmp, 0);
		if (r == -EISDIR || r == -ENOTEMPTY || r == -ENOTDIR) {
			return wfail(c, "checkout-changed", "a directory is in its place now: %s", tk_strerror(r));
		}
		return wfail(c, "write-failed", "it could not be written: %s", tk_strerror(r));
	}
	return 0;
}

/* A delete: only a regular file or a symlink is removed. 0 removed, 1 refused. */
static int remove_entry(const struct wctx *c, int dirfd, const char *name)
{
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		return wfail(c, "checkout-changed", "it is gone from the checkout since the plan: %s",
			     tk_strerror(negative_errno()));
	}
	if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
		return wfail(c, "delete-not-file", "it is %s; a deletion removes only a regular file or a symlink",
			     kind_of(&st));
	}
	if (unlinkat(dirfd, name, 0) < 0) {
		return wfail(c, "write-failed", "it could not be removed: %s", tk_strerror(negative_errno()));
	}
	return 0;
}

/* What is at name now against the decision (what was written is checked against what was decided). */
static int check_written(const struct wctx *c, int dirfd, const char *name)
{
	const struct apply_file *f = c->f;
	struct stat st = { 0 };
	uint32_t mode = 0;
	char hex[65] = "";
	int r = entry_state(dirfd, name, &st, &mode, hex, NULL);

	if (f->op == PATCH_DELETE) {
		return r == -ENOENT
			       ? 0
			       : wfail(c, "written-mismatch", "it was removed but something is in its place again");
	}
	if (r < 0 || mode != f->mode || strcmp(hex, f->sha256) != 0) {
		return wfail(c, "written-mismatch",
			     "it was written but does not read back as decided (%s); it may be in place, check it",
			     r < 0 ? tk_strerror(r) : "mode or content differ");
	}
	return 0;
}

static int write_one(const struct wctx *c, int root_fd, int tree_fd)
{
	const struct apply_file *f = c->f;
	_cleanup_buf_ struct buf *data = NULL;
	_cleanup_close_ int dirfd = -1;
	const char *slash = strrchr(f->path, '/'), *name = slash ? slash + 1 : f->path;
	int r;

	/* the result first: no directory is made for a file whose result is not the decided one */
	if (f->op != PATCH_DELETE && (r = read_result(c, tree_fd, &data)) != 0) {
		return r;
	}
	if ((r = open_parent(c, root_fd, &dirfd)) != 0 || (r = check_pre(c, dirfd, name)) != 0) {
		return r;
	}
	r = f->op == PATCH_DELETE ? remove_entry(c, dirfd, name) : put_entry(c, dirfd, name, data);
	if (r != 0) {
		return r;
	}
	if (fsync(dirfd) < 0) {
		return wfail(c, "write-failed", "its directory could not be synced: %s", tk_strerror(negative_errno()));
	}
	return check_written(c, dirfd, name);
}

int apply_write_files(const struct apply_plan *order, int checkout_fd, int tree_fd, int out_fd, unsigned stop_after)
{
	struct apply_line done = { .kind = APPLY_LINE_DONE, .done = order->n_files };

	for (size_t i = 0; i < order->n_files; i++) {
		struct wctx c = { .out_fd = out_fd, .f = &order->files[i] };
		struct apply_line l = { .kind = APPLY_LINE_WRITTEN, .path = order->files[i].path };
		int r = write_one(&c, checkout_fd, tree_fd);
		if (r != 0) {
			return r;
		}
		r = emit(out_fd, &l);
		if (r < 0) {
			return r;
		}
		if (stop_after > 0 && i + 1 == stop_after) {
			(void)raise(SIGSTOP); /* the test hook: the daemon's kill -9 lands between two files */
		}
	}
	return emit(out_fd, &done);
}

/* ---------------------------------------------------------------- the daemon's side */

struct apply_writer {
	pid_t pid;
	int out_fd; /* the child's stdout, non-blocking */
	struct buf *pending; /* bytes read, not yet a whole line */
	bool eof;
};

int apply_write_fd(const struct apply_writer *w)
{
	return w ? w->out_fd : -1;
}

pid_t apply_write_pid(const struct apply_writer *w)
{
	return w ? w->pid : -1;
}

_printf_(3, 4) static void diag_set(char *diag, size_t size, const char *fmt, ...)
{
	va_list ap;

	if (!diag || size == 0) {
		return;
	}
	va_start(ap, fmt);
	(void)vsnprintf(diag, size, fmt, ap);
	va_end(ap);
}

int apply_write_start(const char *exe, const struct apply_plan *order, char *const *child_env,
		      struct apply_writer **ret, char *diag, size_t dsz)
{
	static const char stop_key[] = APPLY_WRITE_STOP_ENV "=";
	char *envp[4] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL, NULL };
	char *argv[] = { (char *)exe,  "apply-write",
			 "--checkout", order ? order->checkout : NULL,
			 "--scratch",  order ? order->scratch : NULL,
			 NULL };
	_cleanup_buf_ struct buf *b = NULL;
	_cleanup_close_ int in = -1, nul = -1;
	int po[2] = { -1, -1 };
	struct apply_writer *w;
	struct iovec iov;
	pid_t pid, parent = getpid();
	int r;

	if (!exe || !order || order->error || !order->checkout || !order->scratch) {
		diag_set(diag, dsz, "apply writer: no write order to give it");
		return -EINVAL;
	}
	for (size_t i = 0; child_env && child_env[i]; i++) {
		if (strncmp(child_env[i], stop_key, sizeof(stop_key) - 1) == 0) {
			envp[2] = child_env[i];
		}
	}
	if ((r = buf_new(APPLY_PLAN_MAX_BYTES, 0, &b)) < 0 || (r = apply_order_encode(order, b)) < 0) {
		diag_set(diag, dsz,
			 "apply writer: the write order cannot be written (%s; at most APPLY_PLAN_MAX_BYTES, "
			 "%zu bytes)",
			 tk_strerror(r), APPLY_PLAN_MAX_BYTES);
		return r;
	}
	iov = (struct iovec){ .iov_base = (void *)buf_ptr(b), .iov_len = buf_len(b) };
	in = io_memfd_sealed("tkbox-apply-order", &iov, 1);
	nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (in < 0 || nul < 0 || pipe2(po, O_CLOEXEC) < 0) {
		r = in < 0 ? in : negative_errno();
		diag_set(diag, dsz, "apply writer: cannot set up its input and output: %s", tk_strerror(r));
		closep(&po[0]);
		closep(&po[1]);
		return r;
	}
	w = calloc(1, sizeof(*w));
	if (!w || (r = buf_new(APPLY_LINE_MAX, 0, &w->pending)) < 0) {
		free(w);
		closep(&po[0]);
		closep(&po[1]);
		diag_set(diag, dsz, "apply writer: out of memory");
		return -ENOMEM;
	}
	pid = fork();
	if (pid == 0) {
		/* async-signal-safe only from here: the daemon has threads */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent) {
			_exit(127);
		}
		if (dup2(in, 0) < 0 || dup2(po[1], 1) < 0 || dup2(nul, 2) < 0) {
			_exit(127);
		}
		execve(exe, argv, envp);
		_exit(127);
	}
	r = pid < 0 ? negative_errno() : 0;
	closep(&po[1]);
	if (r >= 0 && fcntl(po[0], F_SETFL, O_NONBLOCK) < 0) {
		r = negative_errno();
		(void)kill(pid, SIGKILL);
		(void)waitpid(pid, NULL, 0);
	}
	if (r < 0) {
		closep(&po[0]);
		buf_free(w->pending);
		free(w);
		diag_set(diag, dsz, "apply writer: cannot start it: %s", tk_strerror(r));
		return r;
	}
	w->pid = pid;
	w->out_fd = po[0];
	*ret = w;
	return 0;
}

int apply_write_read(struct apply_writer *w, struct apply_line *ret, char *diag, size_t dsz)
{
	for (;;) {
		const uint8_t *p = buf_ptr(w->pending);
		const uint8_t *nl = memchr(p, '\n', buf_len(w->pending));
		uint8_t tmp[4096];
		ssize_t n;
		int r;

		if (nl) {
			size_t len = (size_t)(nl - p) + 1;
			r = apply_line_decode(p, len, ret, diag, dsz);
			if (r < 0) {
				return r;
			}
			if ((r = buf_consume(w->pending, len)) < 0) {
				apply_line_release(ret);
				return r;
			}
			return 1;
		}
		if (w->eof) {
			if (buf_len(w->pending) > 0) {
				diag_set(diag, dsz, "apply writer: its output ended in the middle of a line");
				return -EBADMSG;
			}
			return -EPIPE;
		}
		/* never more than a line's cap waiting: what does not fit is not a line */
		if (buf_avail(w->pending) == 0) {
			diag_set(diag, dsz, "apply writer: a progress line longer than APPLY_LINE_MAX (%zu bytes)",
				 APPLY_LINE_MAX);
			return -E2BIG;
		}
		n = RETRY_EINTR(read(w->out_fd, tmp, MIN(sizeof(tmp), buf_avail(w->pending))));
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			return 0;
		}
		if (n < 0) {
			r = negative_errno();
			diag_set(diag, dsz, "apply writer: its output could not be read: %s", tk_strerror(r));
			return r;
		}
		if (n == 0) {
			w->eof = true;
			continue;
		}
		if ((r = buf_put(w->pending, tmp, (size_t)n)) < 0) {
			return r;
		}
	}
}

int apply_write_end(struct apply_writer *w, int *ret_status)
{
	int status = 0, r = 0;

	if (!w) {
		return 0;
	}
	closep(&w->out_fd);
	if (RETRY_EINTR(waitpid(w->pid, &status, 0)) < 0) {
		r = negative_errno();
	}
	buf_free(w->pending);
	free(w);
	if (r >= 0 && ret_status) {
		*ret_status = status;
	}
	return r;
}
