/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "banned.h"
#include "clock.h"
#include "image/util.h"
#include "json.h"
#include "log.h"

void image_diag_set(struct image_diag *d, const char *fmt, ...)
{
	va_list ap;
	if (!d) {
		return;
	}
	va_start(ap, fmt);
	(void)vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
	va_end(ap);
}

int image_find_program(const char *name, char **ret)
{
	static const char *const dirs[] = { "/usr/sbin", "/sbin", "/usr/bin", "/bin" };
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		char *p = NULL;
		if (asprintf(&p, "%s/%s", dirs[i], name) < 0) {
			return -ENOMEM;
		}
		if (access(p, X_OK) == 0) {
			*ret = p;
			return 0;
		}
		free(p);
	}
	return -ENOENT;
}

/* Read what is there; *open false at EOF. Past b's max_size: -E2BIG, or the rest dropped when truncate. */
static int drain(int fd, struct buf *b, bool truncate, bool *open)
{
	uint8_t tmp[16384];
	ssize_t n = RETRY_EINTR(read(fd, tmp, sizeof(tmp)));
	if (n < 0) {
		return negative_errno();
	}
	if (n == 0) {
		*open = false;
		return 0;
	}
	if (truncate && (size_t)n > buf_avail(b)) {
		n = (ssize_t)buf_avail(b);
	}
	return n > 0 ? buf_put(b, tmp, (size_t)n) : 0;
}

int image_run_timed(char *const argv[], char *const envp[], const char *cwd, struct buf *out, struct buf *err,
		    unsigned timeout_s)
{
	return image_run_keep_fd(argv, envp, cwd, out, err, timeout_s, -1);
}

int image_run_keep_fd(char *const argv[], char *const envp[], const char *cwd, struct buf *out, struct buf *err,
		      unsigned timeout_s, int keep_fd)
{
	struct image_run_opts o = {
		.cwd = cwd, .out = out, .err = err, .timeout_s = timeout_s, .keep_fd = keep_fd, .stdin_fd = -1
	};
	return image_run_opts(argv, envp, &o);
}

/* The child's side: its fds, its directory, then the program. Never returns. */
_noreturn_ static void run_child(char *const argv[], char *const envp[], const struct image_run_opts *o, int out_w,
				 int err_w, pid_t parent)
{
	int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	/* killed with us: a tool never outlives the deadline of the process that ran it */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent || nul < 0) {
		_exit(127);
	}
	if (dup2(o->stdin_fd >= 0 ? o->stdin_fd : nul, 0) < 0 || dup2(o->out ? out_w : nul, 1) < 0 ||
	    dup2(o->err ? err_w : nul, 2) < 0) {
		_exit(127);
	}
	if (o->cwd && chdir(o->cwd) < 0) {
		_exit(127);
	}
	/* 0, 1, 2 and the one fd the tool is given, whatever else the caller left open without O_CLOEXEC */
	if (close_range(3, ~0u, CLOSE_RANGE_CLOEXEC) < 0 || (o->keep_fd >= 0 && fcntl(o->keep_fd, F_SETFD, 0) < 0)) {
		_exit(127);
	}
	execve(argv[0], argv, envp);
	_exit(127);
}

/* Read the child's output until both pipes end and it is reaped, or the deadline. */
static int run_wait(pid_t pid, int out_r, int err_r, const struct image_run_opts *o, int64_t deadline)
{
	bool oo = o->out != NULL, eo = o->err != NULL, reaped = false;
	int r = 0, status = 0;

	while (oo || eo || !reaped) {
		struct pollfd pf[2] = { { .fd = oo ? out_r : -1, .events = POLLIN },
					{ .fd = eo ? err_r : -1, .events = POLLIN } };
		int64_t left = deadline - (int64_t)clock_mono_ms();
		int pr;
		if (left <= 0) {
			r = -ETIME;
			break;
		}
		/* the pipes say when output ends; the exit itself is looked for every 50 ms */
		pr = RETRY_EINTR(poll(pf, 2, (int)MIN(left, (oo || eo) && reaped ? left : 50)));
		if (pr < 0) {
			r = negative_errno();
			break;
		}
		if (oo && (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) &&
		    (r = drain(out_r, o->out, false, &oo)) < 0) {
			break;
		}
		if (eo && (pf[1].revents & (POLLIN | POLLHUP | POLLERR)) &&
		    (r = drain(err_r, o->err, o->err_truncate, &eo)) < 0) {
			break;
		}
		if (!reaped) {
			pid_t w = RETRY_EINTR(waitpid(pid, &status, WNOHANG));
			if (w < 0) {
				r = negative_errno();
				reaped = true; /* nothing left to wait for */
				break;
			}
			reaped = w == pid;
		}
	}
	if (!reaped) {
		if (r < 0) {
			(void)kill(pid, SIGKILL);
		}
		if (RETRY_EINTR(waitpid(pid, &status, 0)) < 0 && r >= 0) {
			r = negative_errno();
		}
	}
	return r < 0 ? r : WIFEXITED(status) ? WEXITSTATUS(status) : -ECHILD;
}

int image_run_opts(char *const argv[], char *const envp[], const struct image_run_opts *o)
{
	int po[2] = { -1, -1 }, pe[2] = { -1, -1 };
	int r;
	int64_t deadline;
	pid_t pid, parent = getpid();

	if (!o || o->timeout_s == 0 || (o->keep_fd >= 0 && o->keep_fd <= 2)) {
		return -EINVAL;
	}
	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
		r = negative_errno();
		goto out_close;
	}
	deadline = (int64_t)clock_mono_ms() + (int64_t)o->timeout_s * 1000;
	pid = fork();
	if (pid < 0) {
		r = negative_errno();
		goto out_close;
	}
	if (pid == 0) {
		run_child(argv, envp, o, po[1], pe[1], parent);
	}
	closep(&po[1]);
	closep(&pe[1]);
	r = run_wait(pid, po[0], pe[0], o, deadline);
out_close:
	for (int i = 0; i < 2; i++) {
		closep(&po[i]);
		closep(&pe[i]);
	}
	return r;
}

int image_run(char *const argv[], char *const envp[], const char *cwd, struct buf *out, struct buf *err)
{
	return image_run_timed(argv, envp, cwd, out, err, IMAGE_RUN_TIMEOUT_S);
}

static int fd_of(DIR *d)
{
	return dirfd(d);
}

int image_rm_rf_at(int dirfd, const char *name)
{
	struct stat st;
	int fd, r = 0;
	DIR *d;
	struct dirent *de;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		return errno == ENOENT ? 0 : negative_errno();
	}
	if (!S_ISDIR(st.st_mode)) {
		if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT) {
			return negative_errno();
		}
		return 0;
	}
	fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		return negative_errno();
	}
	/* a directory we extracted may lack write/exec permission for us: fix that first */
	(void)fchmod(fd, 0700);
	d = fdopendir(fd);
	if (!d) {
		r = negative_errno();
		(void)close(fd);
		return r;
	}
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
			continue;
		}
		r = image_rm_rf_at(fd_of(d), de->d_name);
		if (r < 0) {
			break;
		}
	}
	(void)closedir(d);
	if (r < 0) {
		return r;
	}
	if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT) {
		return negative_errno();
	}
	return 0;
}

int image_answer_canonical(const json_t *o, const void *p, size_t n, size_t max, const char *pfx,
			   struct image_diag *diag)
{
	_cleanup_free_ char *canon = NULL;
	int r = json_jcs_string(o, max, &canon);

	if (r < 0) {
		image_diag_set(diag, "%scannot be written back in canonical form: %s", pfx, tk_strerror(r));
		return r == -ENOMEM ? r : -EBADMSG;
	}
	if (strlen(canon) != n || memcmp(canon, p, n) != 0) {
		image_diag_set(diag, "%snot in canonical (JCS) form: whitespace, key order or escapes differ", pfx);
		return -EBADMSG;
	}
	return 0;
}

int image_answer_get_str(const json_t *o, const char *key, bool nullable, const char *pfx, char **ret,
			 struct image_diag *diag)
{
	const char *s;

	if (nullable && json_is_null(json_object_get(o, key))) {
		*ret = NULL;
		return 0;
	}
	/* The strict reader already refused \u0000: a string here holds no NUL. */
	if (json_get_string(o, key, &s) < 0) {
		image_diag_set(diag, "%s\"%s\" is not a string%s", pfx, key, nullable ? " or null" : "");
		return -EBADMSG;
	}
	*ret = strdup(s);
	return *ret ? 0 : -ENOMEM;
}

int image_answer_check_keys(const json_t *o, const char *const *keys, const char *pfx, struct image_diag *diag)
{
	const char *key;
	json_t *m;

	json_object_foreach((json_t *)o, key, m) {
		size_t kl = json_object_iter_key_len(json_object_key_to_iter(key));
		bool known = false;
		for (const char *const *k = keys; *k && !known; k++) {
			known = strlen(*k) == kl && memcmp(*k, key, kl) == 0;
		}
		if (!known) {
			char q[LOG_QUOTE_BUFSIZE];
			image_diag_set(diag, "%sunknown key %s", pfx, log_quote(key, kl, q));
			return -EBADMSG;
		}
	}
	for (const char *const *k = keys; *k; k++) {
		if (!json_object_get(o, *k)) {
			image_diag_set(diag, "%skey \"%s\" is missing", pfx, *k);
			return -EBADMSG;
		}
	}
	return 0;
}
