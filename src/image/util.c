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

static int drain(int fd, struct buf *b, bool *open)
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
	return buf_put(b, tmp, (size_t)n);
}

int image_run_timed(char *const argv[], char *const envp[], const char *cwd, struct buf *out, struct buf *err,
		    unsigned timeout_s)
{
	return image_run_keep_fd(argv, envp, cwd, out, err, timeout_s, -1);
}

int image_run_keep_fd(char *const argv[], char *const envp[], const char *cwd, struct buf *out, struct buf *err,
		      unsigned timeout_s, int keep_fd)
{
	int po[2] = { -1, -1 }, pe[2] = { -1, -1 };
	int r = 0, status = 0;
	bool oo, eo, reaped = false;
	int64_t deadline;
	pid_t pid, parent = getpid();

	if (timeout_s == 0 || (keep_fd >= 0 && keep_fd <= 2)) {
		return -EINVAL;
	}
	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
		r = negative_errno();
		goto out_close;
	}
	deadline = (int64_t)clock_mono_ms() + (int64_t)timeout_s * 1000;
	pid = fork();
	if (pid < 0) {
		r = negative_errno();
		goto out_close;
	}
	if (pid == 0) {
		int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
		/* killed with us: a tool never outlives the deadline of the process that ran it */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent) {
			_exit(127);
		}
		if (nul < 0 || dup2(nul, 0) < 0 || dup2(out ? po[1] : nul, 1) < 0 || dup2(err ? pe[1] : nul, 2) < 0) {
			_exit(127);
		}
		if (cwd && chdir(cwd) < 0) {
			_exit(127);
		}
		/* the one fd the tool is given (close-on-exec in the parent, so no other child gets it) */
		if (keep_fd >= 0 && fcntl(keep_fd, F_SETFD, 0) < 0) {
			_exit(127);
		}
		execve(argv[0], argv, envp);
		_exit(127);
	}
	(void)close(po[1]);
	(void)close(pe[1]);
	po[1] = pe[1] = -1;
	oo = out != NULL;
	eo = err != NULL;
	while (oo || eo || !reaped) {
		struct pollfd pf[2] = { { .fd = oo ? po[0] : -1, .events = POLLIN },
					{ .fd = eo ? pe[0] : -1, .events = POLLIN } };
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
		if (oo && (pf[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			r = drain(po[0], out, &oo);
			if (r < 0) {
				break;
			}
		}
		if (eo && (pf[1].revents & (POLLIN | POLLHUP | POLLERR))) {
			r = drain(pe[0], err, &eo);
			if (r < 0) {
				break;
			}
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
	if (r >= 0) {
		r = WIFEXITED(status) ? WEXITSTATUS(status) : -ECHILD;
	}
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
