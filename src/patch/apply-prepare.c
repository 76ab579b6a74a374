/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "banned.h"
#include "buf.h"
#include "crypto.h"
#include "image/util.h"
#include "io.h"
#include "log.h"
#include "path.h"
#include "patch/apply-prepare.h"
#include "patch/patch-git.h"
#include "patch/sensitive.h"
#include "strv.h"

/* What one prepare holds; see apply-prepare.h for the steps. */
struct prep {
	const struct apply_prepare_opts *o;
	struct apply_plan *plan;
	struct patch_git_env env;
	bool have_env;
	struct patch p;
	bool have_patch;
	bool *keep; /* per section: written (false: left out with a notice) */
	size_t n_keep;
	char *co; /* realpath of the checkout */
	int cofd;
	int treefd;
	char *top, *gitdir, *commondir;
	char *cfg[2 * APPLY_PREPARE_MAX_CONFIG]; /* "-c", "name=value" pairs passed back */
	size_t n_cfg;
	char **hooks; /* every hooks path, absolute and lexically normal */
	size_t n_hooks;
};

#define GIT_OUT_MAX ((size_t)1 << 20) /* stdout of one rev-parse / config / check-ignore */
#define COPY_CHUNK ((size_t)64 << 10)

static const char *scratch_path(const struct prep *s, const char *name, char **store)
{
	if (asprintf(store, "%s/%s", s->o->scratch, name) < 0) {
		*store = NULL;
	}
	return *store;
}

/*
 * Make the plan a refusal. The message is built from fmt; the caller quotes
 * the path in it. Returns 1 (stop here) or -ENOMEM.
 */
_printf_(4, 5) static int refuse(struct prep *s, const char *rule, const char *path, const char *fmt, ...)
{
	_cleanup_free_ char *msg = NULL;
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&msg, fmt, ap);
	va_end(ap);
	if (r < 0) {
		return -ENOMEM;
	}
	r = apply_plan_set_error(s->plan, msg, rule, path);
	return r < 0 ? r : 1;
}

/* ---- paths ---- */

/* An absolute path with "." and ".." segments and repeated slashes removed, lexically. */
static char *lexical_normal(const char *p)
{
	size_t n = strlen(p);
	char *out = malloc(n + 2);
	size_t k = 0;

	if (!out || p[0] != '/') {
		free(out);
		return NULL;
	}
	for (const char *q = p; *q;) {
		const char *e;
		size_t sn;
		while (*q == '/') {
			q++;
		}
		e = strchr(q, '/');
		sn = e ? (size_t)(e - q) : strlen(q);
		if (sn == 0) {
			break;
		}
		if (sn == 1 && q[0] == '.') {
			/* nothing */
		} else if (sn == 2 && q[0] == '.' && q[1] == '.') {
			while (k > 0 && out[k - 1] != '/') {
				k--;
			}
			if (k > 0) {
				k--;
			}
		} else {
			out[k++] = '/';
			memcpy(out + k, q, sn);
			k += sn;
		}
		q += sn;
	}
	if (k == 0) {
		out[k++] = '/';
	}
	out[k] = '\0';
	return out;
}

/*
 * The canonical form of an absolute path that may not exist: realpath of the
 * longest existing prefix, the rest appended. Input lexically normal.
 */
static char *canonical(const char *p)
{
	_cleanup_free_ char *head = strdup(p);
	char *real, *slash, *out = NULL;

	if (!head) {
		return NULL;
	}
	real = realpath(head, NULL);
	if (real) {
		return real;
	}
	slash = strrchr(head, '/');
	if (!slash || slash == head) {
		return strdup(p);
	}
	*slash = '\0';
	real = canonical(head);
	if (real && asprintf(&out, "%s/%s", strcmp(real, "/") == 0 ? "" : real, slash + 1) < 0) {
		out = NULL;
	}
	free(real);
	return out;
}

/* a is b, or one of them is beneath the other. */
static bool path_related(const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b), n = MIN(na, nb);

	if (strncmp(a, b, n) != 0) {
		return false;
	}
	if (na == nb) {
		return true;
	}
	/* the shorter one must end at a segment boundary of the longer one ("/" is the root) */
	return (na < nb ? b[n] : a[n]) == '/' || (n == 1 && (na < nb ? a : b)[0] == '/');
}

/*
 * Open rel's parent beneath rootfd without following any symlink; *base is
 * rel's last segment. -ELOOP: a symlinked parent; -ENOENT, -ENOTDIR.
 */
static int open_parent(int rootfd, const char *rel, const char **base)
{
	const char *slash = strrchr(rel, '/');
	_cleanup_free_ char *parent = NULL;

	*base = slash ? slash + 1 : rel;
	if (!slash) {
		int fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
		return fd < 0 ? negative_errno() : fd;
	}
	parent = strndup(rel, (size_t)(slash - rel));
	if (!parent) {
		return -ENOMEM;
	}
	return safe_openat(rootfd, parent, O_RDONLY | O_DIRECTORY, 0);
}

static const char *q(const char *s, char buf[LOG_QUOTE_BUFSIZE])
{
	return log_quote(s, strlen(s), buf);
}

/* ---- git ---- */

/* args: NULL-terminated; the -c pairs passed back go first. */
static int git_run(struct prep *s, const char *cwd, const char *const *args, const char *const *extra_env, int stdin_fd,
		   struct buf *out, struct buf *err)
{
	const char *argv[PATCH_GIT_MAX_ARGS + 1];
	struct patch_git_run_opts ro = {
		.cwd = cwd, .stdin_fd = stdin_fd, .extra_env = extra_env, .out = out, .err = err
	};
	size_t k = 0;

	for (size_t i = 0; i < s->n_cfg; i++) {
		argv[k++] = s->cfg[i];
	}
	for (size_t i = 0; args[i]; i++) {
		if (k >= PATCH_GIT_MAX_ARGS) {
			return -E2BIG;
		}
		argv[k++] = args[i];
	}
	argv[k] = NULL;
	if (out) {
		buf_reset(out);
	}
	if (err) {
		buf_reset(err);
	}
	return patch_git_run(&s->env, argv, &ro);
}

/* One line of output (up to '\n'), NUL-free, as a new string; NULL when empty or out of memory. */
static char *take_line(const uint8_t **p, const uint8_t *end)
{
	const uint8_t *nl = memchr(*p, '\n', (size_t)(end - *p));
	const uint8_t *e = nl ? nl : end;
	char *r = NULL;

	if (e > *p && !memchr(*p, '\0', (size_t)(e - *p))) {
		r = strndup((const char *)*p, (size_t)(e - *p));
	}
	*p = nl ? nl + 1 : end;
	return r;
}

/* "~/x" against the user's HOME (git expands it against the HOME it runs with, which is empty here). */
static char *expand_home(const struct prep *s, const char *v)
{
	char *out = NULL;

	if (v[0] != '~') {
		return strdup(v);
	}
	if (v[1] == '/' || v[1] == '\0') {
		const char *h = s->o->user_home && s->o->user_home[0] == '/' ? s->o->user_home : NULL;
		if (!h || asprintf(&out, "%s%s", h, v + 1) < 0) {
			return NULL;
		}
		return out;
	}
	{
		/* ~user/... */
		const char *slash = strchr(v, '/');
		_cleanup_free_ char *name = strndup(v + 1, slash ? (size_t)(slash - v - 1) : strlen(v + 1));
		struct passwd *pw = name ? getpwnam(name) : NULL;
		if (!pw || !pw->pw_dir || asprintf(&out, "%s%s", pw->pw_dir, slash ? slash : "") < 0) {
			return NULL;
		}
		return out;
	}
}

static int add_cfg(struct prep *s, const char *name, const char *value)
{
	char *kv = NULL;

	for (size_t i = 1; i < s->n_cfg; i += 2) {
		size_t nl = strlen(name);
		if (strncmp(s->cfg[i], name, nl) == 0 && s->cfg[i][nl] == '=' &&
		    strcmp(s->cfg[i] + nl + 1, value) == 0) {
			return 0; /* the same value twice counts once; the order of the rest is kept */
		}
	}
	if (s->n_cfg + 2 > ARRAY_SIZE(s->cfg)) {
		return refuse(s, "git-dir-unknown", NULL,
			      "apply refused: your system and global git config hold more than %d values of "
			      "core.excludesFile, core.hooksPath and safe.directory (APPLY_PREPARE_MAX_CONFIG), which "
			      "tkbox passes back to git one by one; remove duplicates from your ~/.gitconfig",
			      APPLY_PREPARE_MAX_CONFIG);
	}
	if (asprintf(&kv, "%s=%s", name, value) < 0) {
		return -ENOMEM;
	}
	s->cfg[s->n_cfg++] = strdup("-c");
	s->cfg[s->n_cfg++] = kv;
	return s->cfg[s->n_cfg - 2] ? 0 : -ENOMEM;
}

/*
 * The three values from one config file (system or global), in file order.
 * git config reads the file and its includes and runs nothing. A missing
 * file holds nothing.
 */
static int read_config_file(struct prep *s, const char *file, bool *ret_excludes)
{
	static const char *const names[] = { "core.excludesFile", "core.hooksPath", "safe.directory" };
	_cleanup_buf_ struct buf *out = NULL, *err = NULL;
	struct stat st;
	int r;

	if (stat(file, &st) < 0 && errno == ENOENT) {
		return 0;
	}
	if ((r = buf_new(GIT_OUT_MAX, 0, &out)) < 0 || (r = buf_new(PATCH_GIT_ERR_MAX, 0, &err)) < 0) {
		return r;
	}
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		const char *args[] = { "config", "--file", file, "--includes", "--get-all", names[i], NULL };
		char line[PATCH_GIT_LINE_BUFSIZE], fq[LOG_QUOTE_BUFSIZE];
		const uint8_t *p, *end;

		/*
		 * in the checkout, so that git evaluates includeIf "gitdir:..." and "onbranch:..." for it as it
		 * does when you run git there (a gitdir pattern starting with ~ is matched against git's empty
		 * HOME, so it does not match); --file lists only that file's values, not the -c ones, which
		 * carry the safe.directory values read so far
		 */
		r = git_run(s, s->co, args, NULL, -1, out, err);
		if (r == 1) {
			continue; /* no value */
		}
		if (r != 0) {
			return refuse(s, "git-dir-unknown", NULL,
				      "apply refused: git config could not read %s (%s: %s); tkbox must know your "
				      "core.hooksPath, core.excludesFile and safe.directory before it plans anything: "
				      "fix or remove that file",
				      q(file, fq), r < 0 ? tk_strerror(r) : "git failed",
				      patch_git_first_line(err, line));
		}
		p = buf_ptr(out);
		end = p + buf_len(out);
		while (p < end) {
			_cleanup_free_ char *v = take_line(&p, end), *x = NULL;
			if (!v) {
				continue;
			}
			x = strcmp(names[i], "safe.directory") == 0 && strcmp(v, "*") == 0 ? strdup(v)
											   : expand_home(s, v);
			if (!x) {
				return refuse(
					s, "git-dir-unknown", NULL,
					"apply refused: %s in %s is %s, which cannot be expanded (no such user or "
					"no HOME); fix that value",
					names[i], q(file, fq), q(v, line));
			}
			if (i == 0) {
				*ret_excludes = true;
			}
			if ((r = add_cfg(s, names[i], x)) != 0) {
				return r;
			}
		}
	}
	return 0;
}

/* Step 2a: the user's system and global values, in git's order (system, XDG, ~/.gitconfig). */
static int read_user_config(struct prep *s)
{
	const char *home = s->o->user_home && s->o->user_home[0] == '/' ? s->o->user_home : NULL;
	const char *xdg = s->o->user_xdg && s->o->user_xdg[0] == '/' ? s->o->user_xdg : NULL;
	const char *sys = s->o->system_config ? s->o->system_config : "/etc/gitconfig";
	_cleanup_free_ char *xdg_cfg = NULL, *home_cfg = NULL, *ignore = NULL;
	bool excludes = false;
	int r;

	if (sys[0] && (r = read_config_file(s, sys, &excludes)) != 0) {
		return r;
	}
	if (xdg) {
		if (asprintf(&xdg_cfg, "%s/git/config", xdg) < 0 || asprintf(&ignore, "%s/git/ignore", xdg) < 0) {
			return -ENOMEM;
		}
	} else if (home) {
		if (asprintf(&xdg_cfg, "%s/.config/git/config", home) < 0 ||
		    asprintf(&ignore, "%s/.config/git/ignore", home) < 0) {
			return -ENOMEM;
		}
	}
	if (xdg_cfg && (r = read_config_file(s, xdg_cfg, &excludes)) != 0) {
		return r;
	}
	if (home) {
		if (asprintf(&home_cfg, "%s/.gitconfig", home) < 0) {
			return -ENOMEM;
		}
		if ((r = read_config_file(s, home_cfg, &excludes)) != 0) {
			return r;
		}
	}
	/* git's default excludes file, which it would find through the HOME it no longer has */
	if (!excludes && ignore && access(ignore, F_OK) == 0) {
		return add_cfg(s, "core.excludesFile", ignore);
	}
	return 0;
}

static int add_hooks(struct prep *s, const char *v)
{
	_cleanup_free_ char *x = expand_home(s, v), *abs = NULL;
	char **n;
	char *lex, *canon;

	if (!x) {
		char vq[LOG_QUOTE_BUFSIZE];
		return refuse(s, "git-dir-unknown", NULL,
			      "apply refused: the checkout's core.hooksPath %s cannot be expanded, so tkbox cannot say "
			      "where its hooks are; fix that value",
			      q(v, vq));
	}
	if (x[0] != '/' && asprintf(&abs, "%s/%s", s->top, x) < 0) {
		return -ENOMEM;
	}
	lex = lexical_normal(abs ? abs : x);
	canon = lex ? canonical(lex) : NULL;
	n = reallocarray(s->hooks, s->n_hooks + 2, sizeof(*n));
	if (!lex || !canon || !n) {
		free(lex);
		free(canon);
		free(n == s->hooks ? NULL : n);
		return -ENOMEM;
	}
	s->hooks = n;
	s->hooks[s->n_hooks++] = lex;
	s->hooks[s->n_hooks++] = canon;
	return 0;
}

/* Step 2b: where the checkout's git dir, common dir and hooks are. */
static int locate_git(struct prep *s)
{
	_cleanup_buf_ struct buf *out = NULL, *err = NULL;
	const char *rp[] = { "rev-parse",	   "--path-format=absolute", "--show-toplevel",
			     "--absolute-git-dir", "--git-common-dir",	     NULL };
	const char *hp[] = { "config", "--includes", "--get-all", "core.hooksPath", NULL };
	char line[PATCH_GIT_LINE_BUFSIZE], cq[LOG_QUOTE_BUFSIZE];
	char *got[3] = { NULL, NULL, NULL };
	const uint8_t *p, *end;
	int r;

	if ((r = buf_new(GIT_OUT_MAX, 0, &out)) < 0 || (r = buf_new(PATCH_GIT_ERR_MAX, 0, &err)) < 0) {
		return r;
	}
	r = git_run(s, s->co, rp, NULL, -1, out, err);
	if (r != 0) {
		return refuse(s, "git-dir-unknown", NULL,
			      "apply refused: git cannot say where the checkout %s keeps its git dir and hooks (git "
			      "rev-parse: %s), so nothing is applied; give a git checkout with --checkout, and when "
			      "another user owns it, list it in safe.directory in your global git config",
			      q(s->o->checkout, cq), r < 0 ? tk_strerror(r) : patch_git_first_line(err, line));
	}
	p = buf_ptr(out);
	end = p + buf_len(out);
	for (size_t i = 0; i < 3; i++) {
		_cleanup_free_ char *v = take_line(&p, end);
		got[i] = v && v[0] == '/' ? lexical_normal(v) : NULL;
		if (!got[i]) {
			for (size_t k = 0; k < i; k++) {
				free(got[k]);
			}
			return refuse(
				s, "git-dir-unknown", NULL,
				"apply refused: git rev-parse in the checkout %s did not name its top, git dir and "
				"common dir; nothing is applied (is it a bare repository?)",
				q(s->o->checkout, cq));
		}
	}
	s->top = got[0];
	s->gitdir = canonical(got[1]);
	s->commondir = canonical(got[2]);
	free(got[1]);
	free(got[2]);
	if (!s->gitdir || !s->commondir) {
		return -ENOMEM;
	}
	/* every hooks path git may use: the default and each value, from every scope (-c ones included) */
	{
		_cleanup_free_ char *def = NULL;
		if (asprintf(&def, "%s/hooks", s->commondir) < 0) {
			return -ENOMEM;
		}
		if ((r = add_hooks(s, def)) != 0) {
			return r;
		}
	}
	r = git_run(s, s->co, hp, NULL, -1, out, err);
	if (r != 0 && r != 1) {
		return refuse(s, "git-dir-unknown", NULL,
			      "apply refused: git config cannot list the checkout's core.hooksPath (%s); nothing is "
			      "applied; fix the repository's config",
			      r < 0 ? tk_strerror(r) : patch_git_first_line(err, line));
	}
	p = buf_ptr(out);
	end = p + (r == 0 ? buf_len(out) : 0);
	while (p < end) {
		_cleanup_free_ char *v = take_line(&p, end);
		if (v && (r = add_hooks(s, v)) != 0) {
			return r;
		}
	}
	return 0;
}

/* ---- step 3: per path ---- */

static int check_path(struct prep *s, const struct patch_file *f)
{
	_cleanup_free_ char *abs = NULL, *canon = NULL;
	_cleanup_close_ int pfd = -1;
	char pq[LOG_QUOTE_BUFSIZE], xq[LOG_QUOTE_BUFSIZE];
	const char *base, *kind;
	struct stat st;

	q(f->path, pq);
	if (asprintf(&abs, "%s/%s", s->co, f->path) < 0) {
		return -ENOMEM;
	}
	/*
	 * the parent resolved, the name itself not: the writer replaces a symlink, never follows it, so a link
	 * at the path that points into the git dir is not a write there (a link on the way is refused below)
	 */
	{
		char *slash = strrchr(abs, '/');
		_cleanup_free_ char *parent = NULL;
		*slash = '\0';
		parent = canonical(abs);
		*slash = '/';
		if (!parent || asprintf(&canon, "%s%s", strcmp(parent, "/") == 0 ? "" : parent, slash) < 0) {
			canon = NULL;
			return -ENOMEM;
		}
	}
	{
		const char *dirs[] = { s->gitdir, s->commondir };
		for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
			if (path_related(abs, dirs[i]) || path_related(canon, dirs[i])) {
				return refuse(s, "git-dir", f->path,
					      "apply refused: %s is in the checkout's git dir (%s); tkbox apply never "
					      "writes there: leave that file out of the patch",
					      pq, q(dirs[i], xq));
			}
		}
	}
	for (size_t i = 0; i < s->n_hooks; i++) {
		if (path_related(abs, s->hooks[i]) || path_related(canon, s->hooks[i])) {
			return refuse(
				s, "hooks-path", f->path,
				"apply refused: %s is in (or above) the checkout's hooks directory %s "
				"(core.hooksPath); tkbox apply never writes hooks: leave that file out of the patch",
				pq, q(s->hooks[i], xq));
		}
	}
	pfd = open_parent(s->cofd, f->path, &base);
	if (pfd == -ELOOP) {
		return refuse(s, "symlink-parent", f->path,
			      "apply refused: a parent directory of %s in the checkout is a symbolic link; tkbox apply "
			      "never writes through one (make it a real directory, or apply into another checkout)",
			      pq);
	}
	if (pfd == -ENOTDIR) {
		return refuse(s, "parent-not-directory", f->path,
			      "apply refused: a parent of %s in the checkout is not a directory; the checkout changed "
			      "since the box was created (move that file away, or apply into another checkout)",
			      pq);
	}
	if (pfd >= 0 && fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(st.st_mode)) {
			return refuse(s, "symlink-parent", f->path,
				      "apply refused: %s is a directory in the checkout, and the patch treats it as a "
				      "file; nothing is applied (move that directory away, or apply into another "
				      "checkout)",
				      pq);
		}
		if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
			return refuse(s, "special-file", f->path,
				      "apply refused: %s in the checkout is neither a file nor a symbolic link; tkbox "
				      "apply changes only those (remove it, or apply into another checkout)",
				      pq);
		}
	}
	kind = patch_sensitive_kind(f->path);
	if (kind && !s->o->allow_sensitive) {
		return refuse(s, "sensitive", f->path,
			      "apply refused: %s steers the next run or host automation and needs --allow-sensitive "
			      "(Table 6: %s); review the patch (tkbox diff), then run tkbox apply --allow-sensitive",
			      pq, kind);
	}
	return 0;
}

/* Ignored paths: a creation is left out with a notice, a modify or delete refused. */
static int check_ignored(struct prep *s)
{
	_cleanup_buf_ struct buf *list = NULL, *out = NULL, *err = NULL;
	_cleanup_free_ char *lp = NULL;
	_cleanup_close_ int fd = -1;
	const char *args[] = { "check-ignore", "-z", "--stdin", NULL };
	char line[PATCH_GIT_LINE_BUFSIZE];
	const uint8_t *p, *end;
	int r;

	if (s->p.n_files == 0) {
		return 0;
	}
	if ((r = buf_new(PATCH_MAX_FILES * (size_t)(PATH_MAX_LEN + 1), 0, &list)) < 0 ||
	    (r = buf_new(PATCH_MAX_FILES * (size_t)(PATH_MAX_LEN + 1), 0, &out)) < 0 ||
	    (r = buf_new(PATCH_GIT_ERR_MAX, 0, &err)) < 0) {
		return r;
	}
	for (size_t i = 0; i < s->p.n_files; i++) {
		/*
		 * "./" first: check-ignore reads its input as pathspecs, and a leading ':' would be read as
		 * pathspec magic (":x" checks "x"); it names each path back as given
		 */
		if ((r = buf_put(list, "./", 2)) < 0 ||
		    (r = buf_put(list, s->p.files[i].path, strlen(s->p.files[i].path) + 1)) < 0) {
			return r;
		}
	}
	if (!scratch_path(s, "paths", &lp)) {
		return -ENOMEM;
	}
	fd = open(lp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		return negative_errno();
	}
	if ((r = io_write_all(fd, buf_ptr(list), buf_len(list))) < 0 || lseek(fd, 0, SEEK_SET) < 0) {
		return r < 0 ? r : negative_errno();
	}
	r = git_run(s, s->co, args, NULL, fd, out, err);
	if (r != 0 && r != 1) {
		return refuse(s, "ignored", NULL,
			      "apply refused: git check-ignore could not say which of the patch's paths the checkout "
			      "ignores (%s); nothing is applied (a path inside a submodule is one cause)",
			      r < 0 ? tk_strerror(r) : patch_git_first_line(err, line));
	}
	p = buf_ptr(out);
	end = p + (r == 0 ? buf_len(out) : 0);
	while (p < end) {
		const uint8_t *z = memchr(p, '\0', (size_t)(end - p));
		size_t n = z ? (size_t)(z - p) : (size_t)(end - p);
		const uint8_t *name = p + 2;
		bool found = false;

		if (n < 2 || memcmp(p, "./", 2) != 0) {
			return refuse(
				s, "ignored", NULL,
				"apply refused: git check-ignore named a path the patch does not have; nothing is "
				"applied");
		}
		for (size_t i = 0; i < s->p.n_files; i++) {
			const struct patch_file *f = &s->p.files[i];
			char pq[LOG_QUOTE_BUFSIZE];
			if (strlen(f->path) != n - 2 || memcmp(f->path, name, n - 2) != 0) {
				continue;
			}
			found = true;
			if (f->op != PATCH_CREATE) {
				return refuse(
					s, "ignored", f->path,
					"apply refused: the checkout ignores %s (.gitignore, .git/info/exclude or "
					"core.excludesFile) and the patch changes it; tkbox apply never changes an "
					"ignored file (stop ignoring it, or make the change by hand)",
					q(f->path, pq));
			}
			if (s->keep[i]) {
				s->keep[i] = false;
				r = apply_plan_add_notice(s->plan, f->path,
							  "left out: the checkout ignores this path, and a new ignored "
							  "file is not written (rule ignored)");
				if (r < 0) {
					return r;
				}
			}
		}
		if (!found) {
			return refuse(
				s, "ignored", NULL,
				"apply refused: git check-ignore named a path the patch does not have; nothing is "
				"applied");
		}
		p += n + (z ? 1 : 0);
	}
	return 0;
}

/* ---- step 4: the scratch ---- */

static uint32_t git_mode_of(mode_t m)
{
	return S_ISLNK(m) ? PATCH_MODE_LINK : (m & S_IXUSR) ? PATCH_MODE_EXEC : PATCH_MODE_FILE;
}

/* Copy f's checkout entry into the tree (never following a link) and record its pre state in af. */
static int copy_entry(struct prep *s, const struct patch_file *f, struct apply_file *af)
{
	_cleanup_close_ int pfd = -1, in = -1, outfd = -1;
	struct sha256_ctx *c = NULL;
	uint8_t md[SHA256_LEN];
	char pq[LOG_QUOTE_BUFSIZE];
	const char *base;
	struct stat st, st2;
	uint64_t total = 0;
	int r;

	q(f->path, pq);
	af->pre_type = APPLY_PRE_ABSENT;
	pfd = open_parent(s->cofd, f->path, &base);
	if (pfd == -ENOENT) {
		return 0;
	}
	if (pfd < 0) {
		return refuse(s, pfd == -ELOOP ? "symlink-parent" : "parent-not-directory", f->path,
			      "apply refused: the parent directory of %s in the checkout changed while the plan was "
			      "made (%s); nothing is applied: try again",
			      pq, tk_strerror(pfd));
	}
	if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		return errno == ENOENT ? 0 : negative_errno();
	}
	{
		/* the tree's parents are the scratch's own directories */
		const char *slash = strrchr(f->path, '/');
		if (slash) {
			_cleanup_free_ char *parent = strndup(f->path, (size_t)(slash - f->path));
			if (!parent) {
				return -ENOMEM;
			}
			if ((r = io_mkdir_p(s->treefd, parent, 0755)) < 0) {
				return r;
			}
		}
	}
	if (S_ISLNK(st.st_mode)) {
		char target[PATH_MAX_LEN + 1];
		ssize_t n = readlinkat(pfd, base, target, sizeof(target));
		if (n < 0 || (size_t)n >= sizeof(target)) {
			return refuse(
				s, "special-file", f->path,
				"apply refused: the symbolic link %s in the checkout cannot be read or its target "
				"is over %d bytes; remove it, or apply into another checkout",
				pq, PATH_MAX_LEN);
		}
		target[n] = '\0';
		if ((r = sha256_hex(target, (size_t)n, af->pre_sha256)) < 0) {
			return r;
		}
		if (symlinkat(target, s->treefd, f->path) < 0) {
			return negative_errno();
		}
		af->pre_type = APPLY_PRE_SYMLINK;
		af->pre_mode = PATCH_MODE_LINK;
		return 0;
	}
	if (!S_ISREG(st.st_mode)) {
		return refuse(s, S_ISDIR(st.st_mode) ? "symlink-parent" : "special-file", f->path,
			      "apply refused: %s in the checkout is not a file or a symbolic link (it changed while "
			      "the plan was made); nothing is applied",
			      pq);
	}
	in = openat(pfd, base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (in < 0 || fstat(in, &st2) < 0 || !S_ISREG(st2.st_mode) || st2.st_ino != st.st_ino ||
	    st2.st_dev != st.st_dev) {
		return refuse(s, "checkout-changed", f->path,
			      "apply refused: %s in the checkout changed while the plan was made; nothing is applied: "
			      "try again",
			      pq);
	}
	af->pre_mode = git_mode_of(st2.st_mode);
	outfd = safe_openat(s->treefd, f->path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW,
			    af->pre_mode == PATCH_MODE_EXEC ? 0755 : 0644);
	if (outfd < 0) {
		return outfd;
	}
	if (fchmod(outfd, af->pre_mode == PATCH_MODE_EXEC ? 0755 : 0644) < 0) {
		return negative_errno();
	}
	if ((r = sha256_new(&c)) < 0) {
		return r;
	}
	{
		_cleanup_free_ uint8_t *chunk = malloc(COPY_CHUNK);
		if (!chunk) {
			sha256_free(c);
			return -ENOMEM;
		}
		for (;;) {
			ssize_t n = read(in, chunk, COPY_CHUNK);
			if (n < 0 && errno == EINTR) {
				continue;
			}
			if (n < 0) {
				r = negative_errno();
				break;
			}
			if (n == 0) {
				r = 0;
				break;
			}
			total += (uint64_t)n;
			if (total > PATCH_MAX_FILE_BYTES) {
				sha256_free(c);
				return refuse(
					s, "PATCH_MAX_FILE_BYTES", f->path,
					"apply refused: %s in the checkout is over PATCH_MAX_FILE_BYTES (%zu bytes); "
					"tkbox apply changes files up to that size only (make that change by hand)",
					pq, PATCH_MAX_FILE_BYTES);
			}
			if ((r = sha256_update(c, chunk, (size_t)n)) < 0 ||
			    (r = io_write_all(outfd, chunk, (size_t)n)) < 0) {
				break;
			}
		}
	}
	if (r >= 0) {
		r = sha256_final(c, md);
	}
	sha256_free(c);
	if (r < 0) {
		return r;
	}
	sha256_digest_hex(md, af->pre_sha256);
	af->pre_type = APPLY_PRE_FILE;
	return 0;
}

/* The kept sections, back to back, when some were left out; else the patch itself. */
static int kept_patch(struct prep *s, const uint8_t *patch, size_t n, const char *all, char **ret)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *path = NULL;
	bool every = true;
	int r;

	for (size_t i = 0; i < s->p.n_files; i++) {
		every = every && s->keep[i];
	}
	if (every) {
		*ret = strdup(all);
		return *ret ? 0 : -ENOMEM;
	}
	if (!scratch_path(s, "kept.diff", &path)) {
		return -ENOMEM;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		return negative_errno();
	}
	for (size_t i = 0; i < s->p.n_files; i++) {
		const struct patch_file *f = &s->p.files[i];
		if (!s->keep[i]) {
			continue;
		}
		if (f->off > n || f->len > n - f->off) {
			return -EINVAL;
		}
		if ((r = io_write_all(fd, patch + f->off, f->len)) < 0) {
			return r;
		}
	}
	*ret = steal_ptr(path);
	return 0;
}

static int build_result(struct prep *s, const char *patch_path)
{
	_cleanup_buf_ struct buf *err = NULL;
	_cleanup_free_ char *gitdir = NULL, *tree = NULL, *env_dir = NULL, *env_tree = NULL;
	const char *init[] = { "init", "-q", "--bare", "--template=", NULL, NULL };
	const char *apply[] = { "apply", "--whitespace=nowarn", "--", patch_path, NULL };
	const char *env[3] = { NULL, NULL, NULL };
	char line[PATCH_GIT_LINE_BUFSIZE];
	size_t saved = s->n_cfg;
	int r;

	if (!scratch_path(s, "git", &gitdir) || !scratch_path(s, "tree", &tree) ||
	    asprintf(&env_dir, "GIT_DIR=%s", gitdir) < 0 || asprintf(&env_tree, "GIT_WORK_TREE=%s", tree) < 0) {
		return -ENOMEM;
	}
	if ((r = buf_new(PATCH_GIT_ERR_MAX, 0, &err)) < 0) {
		return r;
	}
	init[4] = gitdir;
	/* none of the user's values reach the scratch: it has no hooks, excludes or owner to check */
	s->n_cfg = 0;
	r = git_run(s, s->env.home, init, NULL, -1, NULL, err);
	if (r == 0) {
		env[0] = env_dir;
		env[1] = env_tree;
		r = git_run(s, tree, apply, env, -1, NULL, err);
		s->n_cfg = saved;
		if (r != 0) {
			return refuse(s, "git-apply", NULL,
				      "apply refused: the patch does not apply to the checkout (git apply in a scratch "
				      "copy: %s); usually the checkout changed since the box was created: apply into a "
				      "checkout at the box's starting point, or make the change by hand",
				      r < 0 ? tk_strerror(r) : patch_git_first_line(err, line));
		}
		return 0;
	}
	s->n_cfg = saved;
	return refuse(s, "git-apply", NULL, "apply refused: git init of the scratch repository failed (%s)",
		      r < 0 ? tk_strerror(r) : patch_git_first_line(err, line));
}

/* ---- step 5: the results ---- */

static int read_result(struct prep *s, const struct patch_file *f, struct apply_file *af)
{
	_cleanup_close_ int pfd = -1;
	_cleanup_free_ char *bytes = NULL;
	char pq[LOG_QUOTE_BUFSIZE];
	uint32_t want = f->new_mode ? f->new_mode : af->pre_mode;
	const char *base;
	struct stat st;
	size_t n = 0;
	int r;

	q(f->path, pq);
	pfd = open_parent(s->treefd, f->path, &base);
	if (pfd >= 0 && fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno != ENOENT) {
			return negative_errno();
		}
		st.st_mode = 0;
	} else if (pfd < 0) {
		st.st_mode = 0;
	}
	if (f->op == PATCH_DELETE) {
		if (st.st_mode != 0) {
			return refuse(
				s, "git-apply", f->path,
				"apply refused: git apply left %s in place though the patch deletes it; nothing is "
				"applied",
				pq);
		}
		return 0;
	}
	if (S_ISLNK(st.st_mode)) {
		char target[PATH_MAX_LEN + 1];
		ssize_t k = readlinkat(pfd, base, target, sizeof(target));
		if (k < 0 || (size_t)k >= sizeof(target)) {
			return refuse(
				s, "git-apply", f->path,
				"apply refused: the result of %s is a symbolic link whose target is over %d bytes", pq,
				PATH_MAX_LEN);
		}
		if ((r = sha256_hex(target, (size_t)k, af->sha256)) < 0) {
			return r;
		}
		af->size = (uint64_t)k;
		af->mode = PATCH_MODE_LINK;
	} else if (S_ISREG(st.st_mode)) {
		r = io_read_file(pfd, base, PATCH_MAX_FILE_BYTES, IO_READ_REGULAR | IO_READ_NOFOLLOW, &bytes, &n);
		if (r == -E2BIG) {
			return refuse(s, "PATCH_MAX_FILE_BYTES", f->path,
				      "apply refused: the result of %s is over PATCH_MAX_FILE_BYTES (%zu bytes); tkbox "
				      "apply writes files up to that size only (make that change by hand)",
				      pq, PATCH_MAX_FILE_BYTES);
		}
		if (r < 0) {
			return r;
		}
		if ((r = sha256_hex(bytes, n, af->sha256)) < 0) {
			return r;
		}
		af->size = n;
		af->mode = git_mode_of(st.st_mode);
	} else {
		return refuse(s, "git-apply", f->path,
			      "apply refused: git apply made no file or symbolic link at %s; nothing is applied", pq);
	}
	if (want && af->mode != want) {
		return refuse(s, "git-apply", f->path,
			      "apply refused: git apply made %s with mode %s where the patch says %s; nothing is "
			      "applied",
			      pq, patch_mode_name(af->mode), patch_mode_name(want) ? patch_mode_name(want) : "?");
	}
	return 0;
}

/* ---- the steps in order ---- */

static int read_patch(struct prep *s, uint8_t **ret, size_t *ret_n, char **ret_path)
{
	_cleanup_free_ char *bytes = NULL, *copy = NULL;
	char fq[LOG_QUOTE_BUFSIZE];
	size_t n = 0;
	int r;

	r = io_read_file(AT_FDCWD, s->o->patch_file, PATCH_MAX_BYTES, IO_READ_REGULAR, &bytes, &n);
	if (r == -E2BIG) {
		return refuse(s, "PATCH_MAX_BYTES", NULL,
			      "apply refused: the patch %s is over PATCH_MAX_BYTES (%zu bytes); nothing is applied",
			      q(s->o->patch_file, fq), PATCH_MAX_BYTES);
	}
	if (r < 0) {
		return refuse(s, "patch", NULL, "apply refused: the patch %s cannot be read (%s)",
			      q(s->o->patch_file, fq), tk_strerror(r));
	}
	/* git reads the same bytes as the parser: a copy in the scratch, not the file that may change */
	if (!scratch_path(s, "patch.diff", &copy)) {
		return -ENOMEM;
	}
	{
		_cleanup_close_ int fd = open(copy, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0) {
			return negative_errno();
		}
		if ((r = io_write_all(fd, bytes, n)) < 0) {
			return r;
		}
	}
	*ret = (uint8_t *)steal_ptr(bytes);
	*ret_n = n;
	*ret_path = steal_ptr(copy);
	return 0;
}

static int prepare(struct prep *s)
{
	_cleanup_free_ uint8_t *patch = NULL;
	_cleanup_free_ char *patch_path = NULL, *xcheck = NULL, *home = NULL, *tree = NULL, *kept = NULL;
	char diag[1024], cq[LOG_QUOTE_BUFSIZE];
	size_t n = 0, k = 0;
	struct stat st;
	int r;

	/* the checkout: absolute, a directory */
	q(s->o->checkout, cq);
	if (!path_is_normal_abs(s->o->checkout) || stat(s->o->checkout, &st) < 0 || !S_ISDIR(st.st_mode)) {
		return refuse(s, "checkout", NULL,
			      "apply refused: the checkout %s is not an absolute path to a directory; give one with "
			      "--checkout",
			      cq);
	}
	s->co = realpath(s->o->checkout, NULL);
	s->cofd = open(s->o->checkout, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!s->co || s->cofd < 0) {
		return refuse(s, "checkout", NULL, "apply refused: the checkout %s cannot be opened (%s)", cq,
			      tk_strerror(negative_errno()));
	}
	if (!scratch_path(s, "home", &home) || !scratch_path(s, "xcheck", &xcheck) || !scratch_path(s, "tree", &tree)) {
		return -ENOMEM;
	}
	if ((r = patch_git_env(home, &s->env)) < 0) {
		return refuse(s, "git", NULL, "apply refused: git cannot be run (%s); install git", tk_strerror(r));
	}
	s->have_env = true;

	/* 1. the patch */
	if ((r = read_patch(s, &patch, &n, &patch_path)) != 0) {
		return r;
	}
	if ((r = sha256_hex(patch, n, s->plan->patch_sha256)) < 0) {
		return r;
	}
	diag[0] = '\0';
	r = patch_parse(patch, n, &s->p, diag, sizeof(diag));
	if (r == -ENOMEM) {
		return r;
	}
	if (r < 0) {
		return refuse(s, r == -E2BIG ? "PATCH_MAX_FILES" : "patch", NULL,
			      "apply refused: the saved patch was refused by the strict parser: %s; nothing is applied",
			      diag[0] ? diag : tk_strerror(r));
	}
	s->have_patch = true;
	if (mkdir(xcheck, 0700) < 0) {
		return negative_errno();
	}
	diag[0] = '\0';
	r = patch_git_crosscheck(patch_path, &s->p, xcheck, diag, sizeof(diag));
	if (r == -ENOMEM) {
		return r;
	}
	if (r < 0) {
		return refuse(s, "git-crosscheck", NULL,
			      "apply refused: git reads the patch differently from tkbox's parser (%s); nothing is "
			      "applied",
			      diag[0] ? diag : tk_strerror(r));
	}
	s->keep = calloc(s->p.n_files ? s->p.n_files : 1, sizeof(*s->keep));
	if (!s->keep) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < s->p.n_files; i++) {
		s->keep[i] = true;
	}

	/* 2. where git keeps things for this checkout */
	if ((r = read_user_config(s)) != 0 || (r = locate_git(s)) != 0) {
		return r;
	}

	/* 3. each path */
	for (size_t i = 0; i < s->p.n_files; i++) {
		if ((r = check_path(s, &s->p.files[i])) != 0) {
			return r;
		}
	}
	if ((r = check_ignored(s)) != 0) {
		return r;
	}

	/* 4. the scratch copy, the pre state, git apply */
	if (mkdir(tree, 0700) < 0) {
		return negative_errno();
	}
	s->treefd = open(tree, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->treefd < 0) {
		return negative_errno();
	}
	s->plan->files = calloc(s->p.n_files ? s->p.n_files : 1, sizeof(*s->plan->files));
	if (!s->plan->files) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < s->p.n_files; i++) {
		const struct patch_file *f = &s->p.files[i];
		struct apply_file *af = &s->plan->files[k];
		const char *kind;
		if (!s->keep[i]) {
			continue;
		}
		memset(af, 0, sizeof(*af));
		kind = patch_sensitive_kind(f->path);
		af->path = strdup(f->path);
		af->sensitive = kind ? strdup(kind) : NULL;
		s->plan->n_files = ++k;
		if (!af->path || (kind && !af->sensitive)) {
			return -ENOMEM;
		}
		af->op = f->op;
		af->binary = f->binary;
		if ((r = copy_entry(s, f, af)) != 0) {
			return r;
		}
	}
	if (k > 0) {
		if ((r = kept_patch(s, patch, n, patch_path, &kept)) < 0) {
			return r;
		}
		if ((r = build_result(s, kept)) != 0) {
			return r;
		}
	}

	/* 5. the results */
	k = 0;
	for (size_t i = 0; i < s->p.n_files; i++) {
		if (!s->keep[i]) {
			continue;
		}
		if ((r = read_result(s, &s->p.files[i], &s->plan->files[k++])) != 0) {
			return r;
		}
	}
	return 0;
}

int apply_prepare(const struct apply_prepare_opts *o, struct apply_plan *ret)
{
	struct apply_plan plan = { 0 };
	struct prep s = { .o = o, .plan = &plan, .cofd = -1, .treefd = -1 };
	int r;

	if (!o || !o->patch_file || !o->checkout || !o->scratch || o->scratch[0] != '/') {
		return -EINVAL;
	}
	plan.checkout = strdup(o->checkout);
	plan.scratch = strdup(o->scratch);
	if (!plan.checkout || !plan.scratch) {
		apply_plan_release(&plan);
		return -ENOMEM;
	}
	r = prepare(&s);
	if (r < 0 && r != -ENOMEM) {
		/* a step that failed without a rule of its own still refuses, and says why */
		r = refuse(&s, "prepare", NULL,
			   "apply refused: the plan could not be made (%s); nothing is applied: check the scratch "
			   "directory and the checkout",
			   tk_strerror(r));
	}
	if (s.have_patch) {
		patch_release(&s.p);
	}
	if (s.have_env) {
		patch_git_env_release(&s.env);
	}
	free(s.keep);
	free(s.co);
	free(s.top);
	free(s.gitdir);
	free(s.commondir);
	for (size_t i = 0; i < s.n_cfg; i++) {
		free(s.cfg[i]);
	}
	for (size_t i = 0; i < s.n_hooks; i++) {
		free(s.hooks[i]);
	}
	free(s.hooks);
	if (s.cofd >= 0) {
		(void)close(s.cofd);
	}
	if (s.treefd >= 0) {
		(void)close(s.treefd);
	}
	if (r < 0) {
		apply_plan_release(&plan);
		return r;
	}
	*ret = plan;
	return 0;
}

/* ---- the daemon's side ---- */

static void diag_set(char *diag, size_t size, const char *fmt, ...) _printf_(3, 4);
static void diag_set(char *diag, size_t size, const char *fmt, ...)
{
	va_list ap;

	if (!diag || size == 0) {
		return;
	}
	va_start(ap, fmt);
	(void)vsnprintf(diag, size, fmt, ap);
	va_end(ap);
}

int apply_prepare_exec(const char *exe, const char *patch_file, const char *checkout, const char *scratch,
		       bool allow_sensitive, struct apply_plan *ret, char *diag, size_t diag_size)
{
	_cleanup_buf_ struct buf *so = NULL, *se = NULL;
	_cleanup_free_ char *env_home = NULL, *env_xdg = NULL;
	const char *home = getenv("HOME"), *xdg = getenv("XDG_CONFIG_HOME");
	char *argv[] = { (char *)exe,
			 "apply-prepare",
			 "--json",
			 "--patch",
			 (char *)patch_file,
			 "--checkout",
			 (char *)checkout,
			 "--scratch",
			 (char *)scratch,
			 allow_sensitive ? "--allow-sensitive" : NULL,
			 NULL };
	char *envp[5] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL, NULL, NULL };
	struct apply_plan a = { 0 };
	char sub[APPLY_MAX_ERROR];
	size_t ne = 2;
	int r;

	if (!exe || !patch_file || !checkout || !scratch || scratch[0] != '/' || checkout[0] != '/') {
		return -EINVAL;
	}
	/* the user's global git config is found through these two, and only those values are read */
	if (home && home[0] == '/') {
		if (asprintf(&env_home, "HOME=%s", home) < 0) {
			return -ENOMEM;
		}
		envp[ne++] = env_home;
	}
	if (xdg && xdg[0] == '/') {
		if (asprintf(&env_xdg, "XDG_CONFIG_HOME=%s", xdg) < 0) {
			return -ENOMEM;
		}
		envp[ne++] = env_xdg;
	}
	if ((r = buf_new(APPLY_PLAN_MAX_BYTES, 0, &so)) < 0 || (r = buf_new(64 << 10, 0, &se)) < 0) {
		return r;
	}
	r = image_run_timed(argv, envp, NULL, so, se, APPLY_PREPARE_TIMEOUT_S);
	if (r == -ETIME) {
		diag_set(diag, diag_size,
			 "the apply prepare step did not finish within %d s (APPLY_PREPARE_TIMEOUT_S); it was killed "
			 "and nothing was applied (a smaller patch or checkout helps)",
			 APPLY_PREPARE_TIMEOUT_S);
		return r;
	}
	if (r == -E2BIG) {
		diag_set(diag, diag_size,
			 "the apply prepare step's plan is larger than APPLY_PLAN_MAX_BYTES (%zu bytes); it was killed "
			 "and nothing was applied",
			 APPLY_PLAN_MAX_BYTES);
		return r;
	}
	if ((r != 0 && r != 1) || (r == 1 && buf_len(so) == 0)) {
		char lq[LOG_QUOTE_BUFSIZE];
		const char *p = (const char *)buf_ptr(se);
		size_t n = buf_len(se);
		while (n > 0 && p[n - 1] == '\n') {
			n--;
		}
		diag_set(diag, diag_size, "the apply prepare step failed (%s): %s", r < 0 ? tk_strerror(r) : "no plan",
			 n ? log_quote(p, n, lq) : "it said nothing");
		return r < 0 ? r : -EIO;
	}
	sub[0] = '\0';
	{
		bool planned = r == 0;
		r = apply_plan_decode(buf_ptr(so), buf_len(so), &a, sub, sizeof(sub));
		if (r < 0) {
			diag_set(diag, diag_size, "the apply prepare step's plan was refused: %s",
				 sub[0] ? sub : tk_strerror(r));
			return r;
		}
		if (planned != !a.error) {
			diag_set(diag, diag_size, "the apply prepare step's exit status (%d) and plan (%s) disagree",
				 planned ? 0 : 1, a.error ? "refused" : "planned");
			apply_plan_release(&a);
			return -EPROTO;
		}
	}
	if (!a.error &&
	    (!a.checkout || !a.scratch || strcmp(a.checkout, checkout) != 0 || strcmp(a.scratch, scratch) != 0)) {
		diag_set(diag, diag_size, "the apply prepare step's plan names another checkout or scratch directory");
		apply_plan_release(&a);
		return -EPROTO;
	}
	*ret = a;
	return 0;
}
