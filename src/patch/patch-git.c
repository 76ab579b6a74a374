/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one place the patch door runs git (patch-git.h): the environment, a
 * runner with capped output and a deadline, and the cross-check of the
 * strict parser against git apply's own reading of a patch.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "banned.h"
#include "image/util.h"
#include "log.h"
#include "patch/patch-git.h"

static const char *const fixed_env[] = {
	"PATH=/usr/bin:/bin",  "LC_ALL=C",	"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
	"GIT_ATTR_NOSYSTEM=1", "GIT_PAGER=cat", "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0",
};

static const char *const fixed_args[] = {
	"-c", "core.fsmonitor=false",	   "-c",	 "core.pager=cat", "-c", "diff.external=",
	"-c", "core.untrackedCache=false", "--no-pager",
};

void patch_git_env_release(struct patch_git_env *e)
{
	if (!e) {
		return;
	}
	free(e->git);
	free(e->home);
	free(e->env_home);
	free(e->env_xdg);
	memset(e, 0, sizeof(*e));
}

static int dir_is_empty(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int r = 0;

	if (!d) {
		return negative_errno();
	}
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
			r = -ENOTEMPTY;
			break;
		}
	}
	closedir(d);
	return r;
}

int patch_git_env(const char *home, struct patch_git_env *ret)
{
	struct patch_git_env e = { 0 };
	struct stat st;
	int r;

	if (!home || home[0] != '/' || !ret) {
		return -EINVAL;
	}
	if (mkdir(home, 0700) < 0) {
		if (errno != EEXIST) {
			return negative_errno();
		}
		if (lstat(home, &st) < 0) {
			return negative_errno();
		}
		if (!S_ISDIR(st.st_mode)) {
			return -ENOTDIR;
		}
		r = dir_is_empty(home);
		if (r < 0) {
			return r;
		}
	}
	r = image_find_program("git", &e.git);
	if (r < 0) {
		return r;
	}
	e.home = strdup(home);
	if (!e.home || asprintf(&e.env_home, "HOME=%s", home) < 0 ||
	    asprintf(&e.env_xdg, "XDG_CONFIG_HOME=%s", home) < 0) {
		patch_git_env_release(&e);
		return -ENOMEM;
	}
	*ret = e;
	return 0;
}

int patch_git_envp(const struct patch_git_env *e, const char *const *extra, const char **out, size_t n)
{
	size_t k = 0;

	if (!e || !e->env_home || n < PATCH_GIT_ENVP_SIZE) {
		return -EINVAL;
	}
	for (size_t i = 0; i < ARRAY_SIZE(fixed_env); i++) {
		out[k++] = fixed_env[i];
	}
	out[k++] = e->env_home;
	out[k++] = e->env_xdg;
	for (size_t i = 0; extra && extra[i]; i++) {
		if (i >= PATCH_GIT_MAX_EXTRA_ENV || !strchr(extra[i], '=')) {
			return -E2BIG;
		}
		out[k++] = extra[i];
	}
	out[k] = NULL;
	return 0;
}

int patch_git_run(const struct patch_git_env *e, const char *const args[], const struct patch_git_run_opts *o)
{
	const char *argv[1 + ARRAY_SIZE(fixed_args) + PATCH_GIT_MAX_ARGS + 1];
	const char *envp[PATCH_GIT_ENVP_SIZE];
	struct image_run_opts ro;
	size_t k = 0;
	int r;

	if (!e || !e->git || !args || !o) {
		return -EINVAL;
	}
	argv[k++] = e->git;
	for (size_t i = 0; i < ARRAY_SIZE(fixed_args); i++) {
		argv[k++] = fixed_args[i];
	}
	for (size_t i = 0; args[i]; i++) {
		if (i >= PATCH_GIT_MAX_ARGS) {
			return -E2BIG;
		}
		argv[k++] = args[i];
	}
	argv[k] = NULL;
	r = patch_git_envp(e, o->extra_env, envp, ARRAY_SIZE(envp));
	if (r < 0) {
		return r;
	}
	/* git gets 0, 1 and 2 only; its stderr is kept up to the buffer's cap, never an error */
	ro = (struct image_run_opts){ .cwd = o->cwd,
				      .out = o->out,
				      .err = o->err,
				      .err_truncate = true,
				      .timeout_s = o->timeout_s ? o->timeout_s : PATCH_GIT_TIMEOUT_S,
				      .keep_fd = -1,
				      .stdin_fd = o->stdin_fd };
	return image_run_opts((char *const *)argv, (char *const *)envp, &ro);
}

const char *patch_git_first_line(const struct buf *err, char out[PATCH_GIT_LINE_BUFSIZE])
{
	const uint8_t *p = err ? buf_ptr(err) : NULL;
	size_t n = err ? buf_len(err) : 0;
	const uint8_t *nl = n ? memchr(p, '\n', n) : NULL;

	_Static_assert(PATCH_GIT_LINE_BUFSIZE >= LOG_QUOTE_BUFSIZE, "room for log_quote");
	if (nl) {
		n = (size_t)(nl - p);
	}
	if (n == 0) {
		snprintf(out, PATCH_GIT_LINE_BUFSIZE, "(no message)");
		return out;
	}
	return log_quote(p, n, out);
}

_printf_(3, 4) static int set_diag(char *diag, size_t size, const char *fmt, ...)
{
	va_list ap;

	if (diag && size) {
		va_start(ap, fmt);
		(void)vsnprintf(diag, size, fmt, ap);
		va_end(ap);
	}
	return -EBADMSG;
}

/* A path for a message: quoted and escaped (log_quote). */
static const char *qp(const char *s, size_t n, char out[LOG_QUOTE_BUFSIZE])
{
	return log_quote(s, n, out);
}

/* The --summary line git prints for f, or "" (git's summary_patch_list, show_file_mode_name, show_mode_change). */
static int summary_line(const struct patch_file *f, char **ret)
{
	int k;

	switch (f->op) {
	case PATCH_CREATE:
		k = asprintf(ret, " create mode %06o %s\n", f->new_mode, f->path);
		break;
	case PATCH_DELETE:
		k = asprintf(ret, " delete mode %06o %s\n", f->old_mode, f->path);
		break;
	case PATCH_MODIFY:
		if (f->old_mode && f->new_mode && f->old_mode != f->new_mode) {
			k = asprintf(ret, " mode change %06o => %06o %s\n", f->old_mode, f->new_mode, f->path);
		} else {
			k = asprintf(ret, "%s", "");
		}
		break;
	default:
		return -EINVAL;
	}
	return k < 0 ? -ENOMEM : 0;
}

static const char *summary_field(const char *line)
{
	if (strncmp(line, " create", 7) == 0) {
		return "a creation";
	}
	if (strncmp(line, " delete", 7) == 0) {
		return "a deletion";
	}
	if (strncmp(line, " mode change", 12) == 0) {
		return "a mode change";
	}
	if (strncmp(line, " rename", 7) == 0 || strncmp(line, " copy", 5) == 0) {
		return "a rename or copy";
	}
	if (strncmp(line, " rewrite", 8) == 0) {
		return "a rewrite";
	}
	return "something else";
}

int patch_git_compare(const uint8_t *out, size_t n, const struct patch *p, char *diag, size_t diag_size)
{
	char q1[LOG_QUOTE_BUFSIZE], q2[LOG_QUOTE_BUFSIZE];
	size_t pos = 0, i;
	int r;

	/* --numstat -z: "ADDED\tDELETED\tNAME\0" per section (binary: "-\t-"), names raw, in the patch's order */
	for (i = 0; pos < n && (out[pos] == '-' || (out[pos] >= '0' && out[pos] <= '9')); i++) {
		const uint8_t *rec = out + pos, *z = memchr(rec, 0, n - pos), *t1, *t2;
		const struct patch_file *f;
		char want[64];
		size_t namelen;

		if (!z) {
			return set_diag(diag, diag_size, "git apply --numstat: a record without its NUL");
		}
		t1 = memchr(rec, '\t', (size_t)(z - rec));
		t2 = t1 ? memchr(t1 + 1, '\t', (size_t)(z - t1 - 1)) : NULL;
		if (!t2) {
			return set_diag(diag, diag_size, "git apply --numstat: a record that is not A\\tD\\tNAME");
		}
		namelen = (size_t)(z - t2 - 1);
		if (i >= p->n_files) {
			return set_diag(diag, diag_size,
					"git reads a section for %s that the parser does not (git cross-check: path)",
					qp((const char *)t2 + 1, namelen, q1));
		}
		f = &p->files[i];
		if (namelen != strlen(f->path) || memcmp(t2 + 1, f->path, namelen) != 0) {
			return set_diag(diag, diag_size,
					"git reads section %zu as %s, the parser as %s (git cross-check: path)", i + 1,
					qp((const char *)t2 + 1, namelen, q1), qp(f->path, strlen(f->path), q2));
		}
		{
			bool gbin = (size_t)(t1 - rec) == 1 && rec[0] == '-';
			if (gbin != f->binary) {
				return set_diag(diag, diag_size,
						"git reads %s as %s, the parser %s (git cross-check: binary)",
						qp(f->path, strlen(f->path), q1), gbin ? "binary" : "text",
						f->binary ? "as binary" : "as text");
			}
		}
		if (f->binary) {
			snprintf(want, sizeof(want), "-\t-\t");
		} else {
			snprintf(want, sizeof(want), "%llu\t%llu\t", (unsigned long long)f->added,
				 (unsigned long long)f->deleted);
		}
		if ((size_t)(t2 + 1 - rec) != strlen(want) || memcmp(rec, want, strlen(want)) != 0) {
			return set_diag(diag, diag_size,
					"git counts %s's lines as %s, the parser +%llu -%llu (git cross-check: added/"
					"deleted)",
					qp(f->path, strlen(f->path), q1), qp((const char *)rec, (size_t)(t2 - rec), q2),
					(unsigned long long)f->added, (unsigned long long)f->deleted);
		}
		pos = (size_t)(z - out) + 1;
	}
	if (i < p->n_files) {
		return set_diag(diag, diag_size, "git does not read a section for %s (git cross-check: path)",
				qp(p->files[i].path, strlen(p->files[i].path), q1));
	}
	/*
	 * --summary: git ends these lines with '\n' whatever -z says and does not
	 * quote the names, so the text is compared with what git prints for the
	 * parser's reading, line by line in the patch's order.
	 */
	for (i = 0; i < p->n_files; i++) {
		const struct patch_file *f = &p->files[i];
		_cleanup_free_ char *want = NULL;
		size_t wl, gl;
		const uint8_t *gnl;

		r = summary_line(f, &want);
		if (r < 0) {
			return r;
		}
		wl = strlen(want);
		gnl = pos < n ? memchr(out + pos, '\n', n - pos) : NULL;
		gl = gnl ? (size_t)(gnl - out - pos) + 1 : n - pos;
		if (wl > 0) {
			if (n - pos >= wl && memcmp(out + pos, want, wl) == 0) {
				pos += wl;
				continue;
			}
			if (gl > 0 && gl <= n - pos) {
				return set_diag(
					diag, diag_size,
					"git reads %s differently: git's summary says %s, the parser's reading is %s "
					"(git cross-check: %s)",
					qp(f->path, strlen(f->path), q1), qp((const char *)out + pos, gl, q2),
					summary_field(want), summary_field(want) + 2);
			}
			return set_diag(diag, diag_size,
					"git does not read %s as %s, the parser does (git cross-check: %s)",
					qp(f->path, strlen(f->path), q1), summary_field(want), summary_field(want) + 2);
		}
		/* nothing expected for f: a git line naming f here is a reading the parser does not have */
		if (gl > strlen(f->path) + 1 && out[pos + gl - 1] == '\n' &&
		    memcmp(out + pos + gl - 1 - strlen(f->path), f->path, strlen(f->path)) == 0 &&
		    out[pos + gl - 2 - strlen(f->path)] == ' ') {
			bool later = false;
			for (size_t j = i + 1; j < p->n_files && !later; j++) {
				_cleanup_free_ char *w2 = NULL;
				r = summary_line(&p->files[j], &w2);
				if (r < 0) {
					return r;
				}
				later = strlen(w2) == gl && memcmp(w2, out + pos, gl) == 0;
			}
			if (!later) {
				char line[LOG_QUOTE_BUFSIZE];
				return set_diag(diag, diag_size,
						"git reads %s as %s (%s), the parser does not (git cross-check: %s)",
						qp(f->path, strlen(f->path), q1),
						summary_field((const char *)out + pos),
						qp((const char *)out + pos, gl, line),
						summary_field((const char *)out + pos) + 2);
			}
		}
	}
	if (pos < n) {
		const uint8_t *gnl = memchr(out + pos, '\n', n - pos);
		size_t gl = gnl ? (size_t)(gnl - out - pos) : n - pos;
		return set_diag(diag, diag_size, "git reads %s, the parser does not (git cross-check: %s)",
				qp((const char *)out + pos, gl, q1), summary_field((const char *)out + pos) + 2);
	}
	return 0;
}

_printf_(3, 4) static int fail(char *diag, size_t size, const char *fmt, ...)
{
	va_list ap;

	if (diag && size) {
		va_start(ap, fmt);
		(void)vsnprintf(diag, size, fmt, ap);
		va_end(ap);
	}
	return 0;
}

int patch_git_crosscheck(const char *patch_file, const struct patch *p, const char *tmpdir, char *diag,
			 size_t diag_size)
{
	_cleanup_free_ char *home = NULL, *repo = NULL, *env_dir = NULL, *env_wt = NULL;
	_cleanup_buf_ struct buf *out = NULL, *err = NULL;
	_cleanup_close_ int fd = -1;
	struct patch_git_env e = { 0 };
	char line[PATCH_GIT_LINE_BUFSIZE];
	struct stat st;
	int r;

	if (!patch_file || !p || !tmpdir || tmpdir[0] != '/') {
		return -EINVAL;
	}
	if (p->n_files == 0 && stat(patch_file, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) {
		/*
		 * The parser reads no section only from an empty patch (anything else
		 * starts with one or is refused): there is nothing to compare, and git
		 * apply refuses empty input ("No valid patches in input").
		 */
		return 0;
	}
	if (asprintf(&home, "%s/home", tmpdir) < 0 || asprintf(&repo, "%s/repo", tmpdir) < 0 ||
	    asprintf(&env_dir, "GIT_DIR=%s/repo/.git", tmpdir) < 0 ||
	    asprintf(&env_wt, "GIT_WORK_TREE=%s/repo", tmpdir) < 0) {
		return -ENOMEM;
	}
	r = patch_git_env(home, &e);
	if (r < 0) {
		(void)fail(diag, diag_size, "git cross-check: cannot set up git (%s): %s", home, tk_strerror(r));
		return r;
	}
	if (mkdir(repo, 0700) < 0) {
		r = negative_errno();
		(void)fail(diag, diag_size, "git cross-check: cannot make %s: %s", repo, tk_strerror(r));
		goto out;
	}
	if ((r = buf_new(PATCH_GIT_NUMSTAT_MAX, 0, &out)) < 0 || (r = buf_new(PATCH_GIT_ERR_MAX, 0, &err)) < 0) {
		goto out;
	}
	{
		/* an empty repository: no templates (no sample hooks), nothing of the host's */
		const char *args[] = { "init", "-q", "--template=", repo, NULL };
		struct patch_git_run_opts o = { .cwd = tmpdir, .stdin_fd = -1, .err = err };
		r = patch_git_run(&e, args, &o);
		if (r != 0) {
			(void)fail(diag, diag_size, "git cross-check: git init failed (%d): %s", r,
				   patch_git_first_line(err, line));
			r = r < 0 ? r : -EIO;
			goto out;
		}
	}
	fd = open(patch_file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		r = negative_errno();
		(void)fail(diag, diag_size, "git cross-check: cannot open the patch: %s", tk_strerror(r));
		goto out;
	}
	buf_reset(err);
	{
		const char *args[] = { "apply", "--numstat", "--summary", "-z", NULL };
		const char *extra[] = { env_dir, env_wt, NULL };
		struct patch_git_run_opts o = {
			.cwd = repo, .stdin_fd = fd, .extra_env = extra, .out = out, .err = err
		};
		r = patch_git_run(&e, args, &o);
	}
	if (r == -ETIME) {
		(void)fail(diag, diag_size,
			   "git cross-check: git apply did not finish within %d s (PATCH_GIT_TIMEOUT_S); it was killed",
			   PATCH_GIT_TIMEOUT_S);
		goto out;
	}
	if (r == -E2BIG) {
		(void)fail(diag, diag_size,
			   "git cross-check: git apply's output is larger than PATCH_GIT_NUMSTAT_MAX (%zu bytes)",
			   PATCH_GIT_NUMSTAT_MAX);
		goto out;
	}
	if (r != 0) {
		(void)fail(diag, diag_size, "git cannot read the patch (git cross-check: git apply exit %d): %s", r,
			   patch_git_first_line(err, line));
		r = r < 0 ? r : -EBADMSG;
		goto out;
	}
	r = patch_git_compare(buf_ptr(out), buf_len(out), p, diag, diag_size);
out:
	patch_git_env_release(&e);
	return r;
}
