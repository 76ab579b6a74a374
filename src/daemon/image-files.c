/* SPDX-License-Identifier: Apache-2.0 */
#include <assert.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "banned.h"
#include "clock.h"
#include "daemon/image-files.h"
#include "daemon/sandbox.h"
#include "log.h"

void image_files_release(struct image_files *f)
{
	if (f) {
		for (size_t i = 0; i < f->n_texts; i++) {
			free(f->texts[i]);
		}
		*f = (struct image_files){ 0 };
	}
}

static const char *const apt_dirs[] = { "/etc/apt", "/etc/apt/sources.list.d" };

/* npm's builtin npmrc, the global npmrc files, the user's: lowest precedence first. */
static const char *const npmrc_paths[] = {
	"/usr/local/lib/node_modules/npm/npmrc",
	"/usr/lib/node_modules/npm/npmrc",
	"/usr/share/nodejs/npm/npmrc",
	"/usr/etc/npmrc",
	"/usr/local/etc/npmrc",
	"/etc/npmrc",
	"/root/.npmrc",
};

/* Where npm keeps its config definitions (npm 9+, npm 7-8, npm 6), for npm installed by node's
 * installers (/usr/local), by distribution packages (/usr/lib) and by Debian's npm (/usr/share/nodejs). */
static const char *const npm_defs_paths[] = {
	"/usr/local/lib/node_modules/npm/node_modules/@npmcli/config/lib/definitions/definitions.js",
	"/usr/local/lib/node_modules/npm/lib/utils/config/definitions.js",
	"/usr/local/lib/node_modules/npm/lib/config/defaults.js",
	"/usr/lib/node_modules/npm/node_modules/@npmcli/config/lib/definitions/definitions.js",
	"/usr/lib/node_modules/npm/lib/utils/config/definitions.js",
	"/usr/lib/node_modules/npm/lib/config/defaults.js",
	"/usr/share/nodejs/@npmcli/config/lib/definitions/definitions.js",
	"/usr/share/nodejs/npm/node_modules/@npmcli/config/lib/definitions/definitions.js",
	"/usr/share/nodejs/npm/lib/utils/config/definitions.js",
};

/* pip's configuration files, lowest precedence first: the site ones (XDG's, then /etc), the user's (legacy, then XDG's). */
static const char *const pip_conf_paths[] = {
	"/etc/xdg/pip/pip.conf",
	"/etc/pip.conf",
	"/root/.pip/pip.conf",
	"/root/.config/pip/pip.conf",
};

/* Where python3.N directories are looked for, /usr/local first (a python3 there comes first on PATH). */
static const char *const python_lib_dirs[] = { "/usr/local/lib", "/usr/lib" };
#define PIP_MODELS "pip/_internal/models"

/* Go: the GOROOTs at fixed places, then the directories holding go-VERSION ones; the user's go env file. */
static const char *const goroot_fixed[] = { "/usr/local/go", "/usr/lib/go" };
static const char *const goroot_version_dirs[] = { "/usr/lib", "/usr/share" };
#define GO_USER_ENV "/root/.config/go/env"

static const char *find_debugfs(void)
{
	static const char *const paths[] = { "/usr/sbin/debugfs", "/sbin/debugfs", "/usr/bin/debugfs" };

	for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
		if (access(paths[i], X_OK) == 0) {
			return paths[i];
		}
	}
	return NULL;
}

struct runner {
	struct sandbox_prepared sp;
	const char *debugfs;
	const char *ext4;
};

/* The pipes and /dev/null a debugfs child uses; -1 where closed. */
struct debugfs_fds {
	int out[2];
	int in[2];
	int nul;
};

static void debugfs_fds_close(struct debugfs_fds *f)
{
	for (size_t i = 0; i < 2; i++) {
		if (f->out[i] >= 0) {
			(void)close(f->out[i]);
		}
		if (f->in[i] >= 0) {
			(void)close(f->in[i]);
		}
	}
	if (f->nul >= 0) {
		(void)close(f->nul);
	}
}

/* The forked child: confine itself, then exec debugfs. */
static _noreturn_ void debugfs_child(const struct runner *rn, const char *request, const struct debugfs_fds *f,
				     pid_t parent)
{
	char *argv[] = { (char *)rn->debugfs, request ? "-R" : "-f", request ? (char *)request : "-", (char *)rn->ext4,
			 NULL };
	char *envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", NULL };
	struct sandbox_report rep;

	/* between fork and exec in a threaded daemon: async-signal-safe calls only */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent || dup2(f->in[0], 0) < 0 ||
	    dup2(f->out[1], 1) < 0 || dup2(f->nul, 2) < 0 || close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0 ||
	    sandbox_enter(&rn->sp, &rep) < 0) {
		_exit(126);
	}
	execve(argv[0], argv, envp);
	_exit(127);
}

/* Opens f, puts the script on the child's stdin and starts the child; the parent keeps f->out[0]. */
static int debugfs_start(const struct runner *rn, const char *request, const char *script, struct debugfs_fds *f,
			 pid_t *ret_pid)
{
	pid_t pid, parent = getpid();

	if (pipe2(f->out, O_CLOEXEC) < 0 || pipe2(f->in, O_CLOEXEC) < 0 ||
	    (f->nul = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) {
		return negative_errno();
	}
	/* the script is a few hundred bytes: it fits in the pipe before the child starts */
	if (script && write(f->in[1], script, strlen(script)) != (ssize_t)strlen(script)) {
		return -EIO;
	}
	(void)close(f->in[1]);
	f->in[1] = -1;
	pid = fork();
	if (pid < 0) {
		return negative_errno();
	}
	if (pid == 0) {
		debugfs_child(rn, request, f, parent);
	}
	(void)close(f->out[1]);
	f->out[1] = -1;
	*ret_pid = pid;
	return 0;
}

/* A growing NUL-terminable buffer: n bytes used of size (one kept for the NUL). */
struct debugfs_out {
	char *b;
	size_t n;
	size_t size;
};

/* Reads fd to its end into o, at most cap bytes (-EFBIG past it), until deadline (-ETIME). */
static int debugfs_read(int fd, int64_t deadline, size_t cap, struct debugfs_out *o)
{
	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		int64_t left = deadline - (int64_t)clock_mono_ms();
		ssize_t k;

		if (left <= 0) {
			return -ETIME;
		}
		if (RETRY_EINTR(poll(&pf, 1, (int)left)) < 0) {
			return negative_errno();
		}
		if (o->n + 1 == o->size) {
			char *nb = o->size > cap ? NULL : realloc(o->b, o->size * 2);
			if (!nb) {
				return o->size > cap ? -EFBIG : -ENOMEM;
			}
			o->b = nb;
			o->size *= 2;
		}
		k = RETRY_EINTR(read(fd, o->b + o->n, o->size - o->n - 1));
		if (k < 0) {
			return negative_errno();
		}
		if (k == 0) {
			return 0;
		}
		o->n += (size_t)k;
		if (o->n > cap) {
			return -EFBIG;
		}
	}
}

/* Reaps the child (killed first if r says reading failed); a non-zero exit is -EIO. */
static int debugfs_reap(pid_t pid, int r)
{
	int status = 0;

	if (r < 0) {
		(void)kill(pid, SIGKILL);
	}
	if (RETRY_EINTR(waitpid(pid, &status, 0)) < 0 && r >= 0) {
		r = negative_errno();
	}
	if (r >= 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
		r = -EIO;
	}
	return r;
}

/*
 * debugfs (read-only) on the image in a confined child: with request (-R)
 * or with script on its stdin (-f -). Its stdout, at most cap bytes
 * (-EFBIG past it), NUL-terminated, into *ret.
 */
static int run_debugfs(const struct runner *rn, const char *request, const char *script, size_t cap, char **ret,
		       size_t *ret_n)
{
	struct debugfs_fds f = { .out = { -1, -1 }, .in = { -1, -1 }, .nul = -1 };
	int64_t deadline = (int64_t)clock_mono_ms() + IMAGE_FILES_TIMEOUT_S * 1000;
	struct debugfs_out o = { .size = 4096 };
	pid_t pid;
	int r;

	o.b = malloc(o.size);
	if (!o.b) {
		return -ENOMEM;
	}
	r = debugfs_start(rn, request, script, &f, &pid);
	if (r >= 0) {
		r = debugfs_read(f.out[0], deadline, cap, &o);
		r = debugfs_reap(pid, r);
	}
	debugfs_fds_close(&f);
	if (r < 0) {
		free(o.b);
		return r;
	}
	o.b[o.n] = '\0';
	*ret = o.b;
	*ret_n = o.n;
	return 0;
}

/*
 * One entry of the listing: in directory dir, a regular file name. The
 * listing is debugfs's echo of each command ("debugfs: ls -p DIR", which a
 * file name cannot forge: names hold no '/') and its `ls -p` lines
 * "/INODE/MODE/UID/GID/NAME/SIZE/".
 */
struct listed {
	const char *name; /* into the listing, not NUL-terminated */
	size_t name_len;
	unsigned long long size;
};

/* The section of the listing for dir: [*ret_s, *ret_e). false when dir was not listed (or is empty). */
static bool listing_section(const char *listing, const char *dir, const char **ret_s, const char **ret_e)
{
	char head[300];
	const char *s, *e;

	(void)snprintf(head, sizeof(head), "debugfs: ls -p %s\n", dir);
	for (s = listing; (s = strstr(s, head)); s++) {
		if (s == listing || s[-1] == '\n') {
			break;
		}
	}
	if (!s) {
		return false;
	}
	s += strlen(head);
	/* an empty section (a directory that is not there) is followed at once by the next echo */
	e = strncmp(s, "debugfs: ", 9) == 0 ? s - 1 : strstr(s, "\ndebugfs: ");
	*ret_s = s;
	*ret_e = e ? e + 1 : s + strlen(s);
	return true;
}

/* The next regular file (or, with dirs, directory) of a section from *p; false at its end. */
static bool listing_next_kind(const char **p, const char *end, bool dirs, struct listed *ret)
{
	while (*p < end) {
		const char *line = *p, *le = memchr(line, '\n', (size_t)(end - line));
		const char *f[8];
		size_t nf = 0;

		le = le ? le : end;
		*p = le < end ? le + 1 : end;
		for (const char *q = line; q < le && nf < 8; q++) {
			if (*q == '/') {
				f[nf++] = q;
			}
		}
		/* exactly 7 slashes: "/ino/mode/uid/gid/name/size/" with the last one at the end of the line */
		if (nf != 7 || line[0] != '/' || f[6] != le - 1 || memchr(f[6] + 1, '/', (size_t)(le - f[6] - 1))) {
			continue;
		}
		if (f[2] - f[1] != 7 || strncmp(f[1] + 1, dirs ? "040" : "100", 3) != 0) {
			continue; /* not a regular file (a symlink is 120777: not followed), or not a directory */
		}
		ret->name = f[4] + 1;
		ret->name_len = (size_t)(f[5] - f[4] - 1);
		ret->size = 0;
		for (const char *q = f[5] + 1; q < f[6]; q++) {
			if (*q < '0' || *q > '9' || ret->size > (1ULL << 50)) {
				ret->name_len = 0;
				break;
			}
			ret->size = ret->size * 10 + (unsigned long long)(*q - '0');
		}
		if (ret->name_len > 0) {
			return true;
		}
	}
	return false;
}

static bool listing_next(const char **p, const char *end, struct listed *ret)
{
	return listing_next_kind(p, end, false, ret);
}

/* Is path a regular file in the listing? Its size in *ret_size. */
static bool listing_has(const char *listing, const char *path, unsigned long long *ret_size)
{
	const char *slash = strrchr(path, '/'), *s, *e;
	char dir[256];
	struct listed l;

	(void)snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path), path);
	if (!listing_section(listing, dir, &s, &e)) {
		return false;
	}
	while (listing_next(&s, e, &l)) {
		if (l.name_len == strlen(slash + 1) && memcmp(l.name, slash + 1, l.name_len) == 0) {
			*ret_size = l.size;
			return true;
		}
	}
	return false;
}

static int read_file(const struct runner *rn, const char *path, unsigned long long size, size_t cap, char **ret,
		     char *err, size_t err_size)
{
	char req[300];
	size_t n;
	int r;

	if (size > cap) {
		(void)snprintf(err, err_size, "the image's %s is %llu bytes, more than the %zu a preset reads (%s)",
			       path, size, cap,
			       cap == IMAGE_FILES_FILE_MAX ? "IMAGE_FILES_FILE_MAX" : "IMAGE_FILES_NPM_DEFS_MAX");
		return -EFBIG;
	}
	(void)snprintf(req, sizeof(req), "cat %s", path);
	r = run_debugfs(rn, req, NULL, cap, ret, &n);
	if (r < 0) {
		(void)snprintf(err, err_size, "reading %s from the image with debugfs: %s", path,
			       r == -EFBIG ? "more bytes than its cap" : tk_strerror(r));
	}
	return r;
}

static bool apt_name_ok(const char *name, size_t n)
{
	static const char ok[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-";
	size_t k = 0;

	while (k < n && strchr(ok, name[k])) {
		k++;
	}
	if (k != n) {
		return false;
	}
	return (n > 5 && memcmp(name + n - 5, ".list", 5) == 0) || (n > 8 && memcmp(name + n - 8, ".sources", 8) == 0);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

enum text_kind { TEXT_APT, TEXT_NPMRC, TEXT_PIP, TEXT_GO };

static int add_text(struct image_files *f, char *text, enum text_kind kind)
{
	/* the readers read at most each array's size: a full array here is a programmer error */
	bool full = f->n_texts >= ARRAY_SIZE(f->texts) ||
		    (kind == TEXT_APT && f->f.n_apt >= ARRAY_SIZE(f->f.apt_sources)) ||
		    (kind == TEXT_NPMRC && f->f.n_npmrc >= ARRAY_SIZE(f->f.npmrc)) ||
		    (kind == TEXT_PIP && f->f.n_pip_conf >= ARRAY_SIZE(f->f.pip_conf)) ||
		    (kind == TEXT_GO && f->f.n_go_env >= ARRAY_SIZE(f->f.go_env));

	if (full) {
		free(text);
		return -E2BIG;
	}
	f->texts[f->n_texts++] = text;
	switch (kind) {
	case TEXT_APT:
		f->f.apt_sources[f->f.n_apt++] = text;
		break;
	case TEXT_NPMRC:
		f->f.npmrc[f->f.n_npmrc++] = text;
		break;
	case TEXT_PIP:
		f->f.pip_conf[f->f.n_pip_conf++] = text;
		break;
	case TEXT_GO:
	default:
		f->f.go_env[f->f.n_go_env++] = text;
		break;
	}
	return 0;
}

static int read_apt(const struct runner *rn, const char *listing, struct image_files *f, char *err, size_t err_size)
{
	char *names[EGRESS_IMAGE_APT_MAX];
	size_t nn = 0;
	unsigned long long size;
	const char *s, *e;
	struct listed l;
	int r = 0;

	bool main_list = listing_has(listing, "/etc/apt/sources.list", &size);

	if (main_list) {
		names[nn] = strdup("/etc/apt/sources.list");
		if (!names[nn++]) {
			return -ENOMEM;
		}
	}
	if (listing_section(listing, "/etc/apt/sources.list.d", &s, &e)) {
		while (r >= 0 && listing_next(&s, e, &l)) {
			if (!apt_name_ok(l.name, l.name_len)) {
				continue;
			}
			if (nn == EGRESS_IMAGE_APT_MAX) {
				(void)snprintf(err, err_size,
					       "the image has more than %d apt source files (EGRESS_IMAGE_APT_MAX); "
					       "name its mirrors with --allow HOST instead of the preset",
					       EGRESS_IMAGE_APT_MAX);
				r = -E2BIG;
			} else if (asprintf(&names[nn], "/etc/apt/sources.list.d/%.*s", (int)l.name_len, l.name) < 0) {
				r = -ENOMEM;
			} else {
				nn++;
			}
		}
	}
	/* apt reads sources.list, then sources.list.d in name order */
	if (r >= 0 && nn > (main_list ? 1u : 0u)) {
		qsort(names + (main_list ? 1 : 0), nn - (main_list ? 1 : 0), sizeof(char *), cmp_str);
	}
	for (size_t i = 0; r >= 0 && i < nn; i++) {
		char *text = NULL;
		if (!listing_has(listing, names[i], &size)) {
			continue;
		}
		r = read_file(rn, names[i], size, IMAGE_FILES_FILE_MAX, &text, err, err_size);
		if (r >= 0) {
			r = add_text(f, text, TEXT_APT);
		}
	}
	for (size_t i = 0; i < nn; i++) {
		free(names[i]);
	}
	return r;
}

static int read_npm(const struct runner *rn, const char *listing, struct image_files *f, char *err, size_t err_size)
{
	unsigned long long size;
	int r = 0;

	for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(npmrc_paths); i++) {
		char *text = NULL;
		if (listing_has(listing, npmrc_paths[i], &size)) {
			r = read_file(rn, npmrc_paths[i], size, IMAGE_FILES_FILE_MAX, &text, err, err_size);
			if (r >= 0) {
				r = add_text(f, text, TEXT_NPMRC);
			}
		}
	}
	for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(npm_defs_paths); i++) {
		char *js = NULL;
		if (!listing_has(listing, npm_defs_paths[i], &size)) {
			continue;
		}
		r = read_file(rn, npm_defs_paths[i], size, IMAGE_FILES_NPM_DEFS_MAX, &js, err, err_size);
		if (r >= 0 && egress_npm_default_find(js, strlen(js), f->npm_default, sizeof(f->npm_default)) == 0) {
			f->f.npm_default_registry = f->npm_default;
		}
		free(js);
		break; /* the first npm found is the image's */
	}
	return r;
}

/* Compare two versions ("12", "1.22.4") number by number: > 0 when a is the higher. */
static int version_cmp(const char *a, const char *b)
{
	while (*a || *b) {
		unsigned long long x = 0, y = 0;
		for (; *a >= '0' && *a <= '9'; a++) {
			x = x * 10 + (unsigned long long)(*a - '0');
		}
		for (; *b >= '0' && *b <= '9'; b++) {
			y = y * 10 + (unsigned long long)(*b - '0');
		}
		if (x != y) {
			return x > y ? 1 : -1;
		}
		a += *a == '.';
		b += *b == '.';
	}
	return 0;
}

#define VERSION_TEXT_MAX 16

/*
 * The directories in dir named prefix + VERSION (VERSION: digits, and dots
 * when dots is set; at most VERSION_TEXT_MAX), their VERSIONs highest first.
 * More than IMAGE_FILES_VERSIONS_MAX: -E2BIG.
 */
static int list_versions(const char *listing, const char *dir, const char *prefix, bool dots,
			 char ret[IMAGE_FILES_VERSIONS_MAX][VERSION_TEXT_MAX + 1], size_t *ret_n, char *err,
			 size_t err_size)
{
	size_t n = 0, pl = strlen(prefix);
	const char *s, *e;
	struct listed l;

	*ret_n = 0;
	if (!listing_section(listing, dir, &s, &e)) {
		return 0;
	}
	while (listing_next_kind(&s, e, true, &l)) {
		size_t vl = l.name_len - pl, k = 0;
		const char *v = l.name + pl;

		if (l.name_len <= pl || vl > VERSION_TEXT_MAX || memcmp(l.name, prefix, pl) != 0 || *v < '0' ||
		    *v > '9') {
			continue;
		}
		while (k < vl && ((v[k] >= '0' && v[k] <= '9') || (dots && v[k] == '.'))) {
			k++;
		}
		if (k != vl) {
			continue;
		}
		if (n == IMAGE_FILES_VERSIONS_MAX) {
			(void)snprintf(
				err, err_size,
				"the image has more than %d %sVERSION directories in %s "
				"(IMAGE_FILES_VERSIONS_MAX); name the hosts with --allow HOST instead of the preset",
				IMAGE_FILES_VERSIONS_MAX, prefix, dir);
			return -E2BIG;
		}
		memcpy(ret[n], v, vl);
		ret[n][vl] = '\0';
		/* insertion, highest first */
		for (size_t i = n++; i > 0 && version_cmp(ret[i], ret[i - 1]) > 0; i--) {
			char t[VERSION_TEXT_MAX + 1];
			memcpy(t, ret[i], sizeof(t));
			memcpy(ret[i], ret[i - 1], sizeof(t));
			memcpy(ret[i - 1], t, sizeof(t));
		}
	}
	*ret_n = n;
	return 0;
}

/* The directories where pip's models or a GOROOT may be, in the order they are tried. */
struct candidates {
	char *pip[2 * IMAGE_FILES_VERSIONS_MAX * 2 + 1];
	size_t n_pip;
	char *go[ARRAY_SIZE(goroot_fixed) + 2 * IMAGE_FILES_VERSIONS_MAX];
	size_t n_go;
};

static void candidates_release(struct candidates *c)
{
	for (size_t i = 0; i < c->n_pip; i++) {
		free(c->pip[i]);
	}
	for (size_t i = 0; i < c->n_go; i++) {
		free(c->go[i]);
	}
	*c = (struct candidates){ 0 };
}

static int cand_add(char **v, size_t *n, size_t cap, const char *path)
{
	assert(*n < cap);
	if (!(v[*n] = strdup(path))) {
		return -ENOMEM;
	}
	(*n)++;
	return 0;
}

static int candidates_find(const char *listing, unsigned needs, struct candidates *c, char *err, size_t err_size)
{
	char ver[IMAGE_FILES_VERSIONS_MAX][VERSION_TEXT_MAX + 1], path[200];
	size_t nv;
	int r = 0;

	for (size_t d = 0; (needs & EGRESS_NEED_PIP) && r >= 0 && d < ARRAY_SIZE(python_lib_dirs); d++) {
		const char *dir = python_lib_dirs[d];
		bool local = strcmp(dir, "/usr/local/lib") == 0;
		r = list_versions(listing, dir, "python3.", false, ver, &nv, err, err_size);
		if (r >= 0 && !local) {
			/* Debian's python3 packages: one dist-packages for every version */
			(void)snprintf(path, sizeof(path), "%s/python3/dist-packages/" PIP_MODELS, dir);
			r = cand_add(c->pip, &c->n_pip, ARRAY_SIZE(c->pip), path);
		}
		for (size_t i = 0; r >= 0 && i < nv; i++) {
			(void)snprintf(path, sizeof(path), "%s/python3.%s/site-packages/" PIP_MODELS, dir, ver[i]);
			r = cand_add(c->pip, &c->n_pip, ARRAY_SIZE(c->pip), path);
			if (r >= 0 && local) {
				(void)snprintf(path, sizeof(path), "%s/python3.%s/dist-packages/" PIP_MODELS, dir,
					       ver[i]);
				r = cand_add(c->pip, &c->n_pip, ARRAY_SIZE(c->pip), path);
			}
		}
	}
	for (size_t d = 0; (needs & EGRESS_NEED_GO) && r >= 0 && d < ARRAY_SIZE(goroot_fixed); d++) {
		r = cand_add(c->go, &c->n_go, ARRAY_SIZE(c->go), goroot_fixed[d]);
	}
	for (size_t d = 0; (needs & EGRESS_NEED_GO) && r >= 0 && d < ARRAY_SIZE(goroot_version_dirs); d++) {
		r = list_versions(listing, goroot_version_dirs[d], "go-", true, ver, &nv, err, err_size);
		for (size_t i = 0; r >= 0 && i < nv; i++) {
			(void)snprintf(path, sizeof(path), "%s/go-%s", goroot_version_dirs[d], ver[i]);
			r = cand_add(c->go, &c->n_go, ARRAY_SIZE(c->go), path);
		}
	}
	return r;
}

/* The script listing every candidate directory; NULL (and 0) when there is none. */
static int candidates_script(const struct candidates *c, char **ret)
{
	char *s = NULL;
	size_t n = 0;
	FILE *m;

	*ret = NULL;
	if (c->n_pip + c->n_go == 0) {
		return 0;
	}
	m = open_memstream(&s, &n);
	if (!m) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < c->n_pip; i++) {
		fprintf(m, "ls -p %s\n", c->pip[i]);
	}
	for (size_t i = 0; i < c->n_go; i++) {
		fprintf(m, "ls -p %s\n", c->go[i]);
	}
	if (fclose(m) != 0) {
		free(s);
		return -ENOMEM;
	}
	*ret = s;
	return 0;
}

static int read_pip(const struct runner *rn, const char *listing, const char *listing2, const struct candidates *c,
		    struct image_files *f, char *err, size_t err_size)
{
	unsigned long long size;
	char path[300];
	int r = 0;

	for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(pip_conf_paths); i++) {
		char *text = NULL;
		if (listing_has(listing, pip_conf_paths[i], &size)) {
			r = read_file(rn, pip_conf_paths[i], size, IMAGE_FILES_FILE_MAX, &text, err, err_size);
			if (r >= 0) {
				r = add_text(f, text, TEXT_PIP);
			}
		}
	}
	for (size_t i = 0; r >= 0 && listing2 && i < c->n_pip; i++) {
		char *py = NULL;
		(void)snprintf(path, sizeof(path), "%s/index.py", c->pip[i]);
		if (!listing_has(listing2, path, &size)) {
			continue;
		}
		r = read_file(rn, path, size, IMAGE_FILES_FILE_MAX, &py, err, err_size);
		if (r >= 0) {
			f->f.pip_found = true;
			if (egress_pip_default_find(py, strlen(py), f->pip_index, sizeof(f->pip_index), f->pip_files,
						    sizeof(f->pip_files)) == 0) {
				f->f.pip_default_index = f->pip_index;
				f->f.pip_default_files = f->pip_files;
			}
		}
		free(py);
		break; /* the first pip found is the image's */
	}
	return r;
}

static int read_go(const struct runner *rn, const char *listing, const char *listing2, const struct candidates *c,
		   struct image_files *f, char *err, size_t err_size)
{
	unsigned long long size;
	char path[300];
	int r = 0;

	/* GOROOT/go.env first: the user's go env file overrides it */
	for (size_t i = 0; listing2 && i < c->n_go; i++) {
		char *text = NULL;
		(void)snprintf(path, sizeof(path), "%s/go.env", c->go[i]);
		if (!listing_has(listing2, path, &size)) {
			continue;
		}
		r = read_file(rn, path, size, IMAGE_FILES_FILE_MAX, &text, err, err_size);
		if (r >= 0) {
			f->f.go_found = true;
			r = add_text(f, text, TEXT_GO);
		}
		break; /* the first Go found is the image's */
	}
	if (r >= 0 && listing_has(listing, GO_USER_ENV, &size)) {
		char *text = NULL;
		r = read_file(rn, GO_USER_ENV, size, IMAGE_FILES_FILE_MAX, &text, err, err_size);
		if (r >= 0) {
			r = add_text(f, text, TEXT_GO);
		}
	}
	return r;
}

/* The listing script: `ls -p` of every directory a needed file is in. */
static int listing_script(unsigned needs, char **ret)
{
	char *s = NULL;
	size_t n = 0;
	FILE *m = open_memstream(&s, &n);

	if (!m) {
		return -ENOMEM;
	}
	for (size_t i = 0; (needs & EGRESS_NEED_APT) && i < ARRAY_SIZE(apt_dirs); i++) {
		fprintf(m, "ls -p %s\n", apt_dirs[i]);
	}
	for (size_t i = 0; (needs & EGRESS_NEED_NPM) && i < ARRAY_SIZE(npmrc_paths) + ARRAY_SIZE(npm_defs_paths); i++) {
		const char *p =
			i < ARRAY_SIZE(npmrc_paths) ? npmrc_paths[i] : npm_defs_paths[i - ARRAY_SIZE(npmrc_paths)];
		fprintf(m, "ls -p %.*s\n", (int)(strrchr(p, '/') - p), p);
	}
	for (size_t i = 0; (needs & EGRESS_NEED_PIP) && i < ARRAY_SIZE(pip_conf_paths); i++) {
		const char *p = pip_conf_paths[i];
		fprintf(m, "ls -p %.*s\n", (int)(strrchr(p, '/') - p), p);
	}
	for (size_t i = 0; (needs & EGRESS_NEED_PIP) && i < ARRAY_SIZE(python_lib_dirs); i++) {
		fprintf(m, "ls -p %s\n", python_lib_dirs[i]);
	}
	for (size_t i = 0; (needs & EGRESS_NEED_GO) && i < ARRAY_SIZE(goroot_version_dirs); i++) {
		/* /usr/lib may be listed for pip already: listing_section takes the first */
		if (!((needs & EGRESS_NEED_PIP) && strcmp(goroot_version_dirs[i], "/usr/lib") == 0)) {
			fprintf(m, "ls -p %s\n", goroot_version_dirs[i]);
		}
	}
	if (needs & EGRESS_NEED_GO) {
		fprintf(m, "ls -p %.*s\n", (int)(strrchr(GO_USER_ENV, '/') - GO_USER_ENV), GO_USER_ENV);
	}
	if (fclose(m) != 0) {
		free(s);
		return -ENOMEM;
	}
	*ret = s;
	return 0;
}

/* A fresh, empty scratch_dir/image-files for the confined reader. */
static int scratch_create(const char *scratch_dir, char **ret, char *err, size_t err_size)
{
	char *scratch = NULL;
	int r;

	if (asprintf(&scratch, "%s/image-files", scratch_dir) < 0) {
		return -ENOMEM;
	}
	(void)rmdir(scratch);
	if (mkdir(scratch, 0700) < 0) {
		r = negative_errno();
		(void)snprintf(err, err_size, "creating %s: %s", scratch, tk_strerror(r));
		free(scratch);
		return r;
	}
	*ret = scratch;
	return 0;
}

/* Runs a listing script; what names the directories listed in an error. */
static int run_listing(const struct runner *rn, const char *script, const char *what, char **ret, char *err,
		       size_t err_size)
{
	size_t n;
	int r = run_debugfs(rn, NULL, script, IMAGE_FILES_LIST_MAX, ret, &n);

	if (r < 0) {
		(void)snprintf(err, err_size, "listing the image's %s with debugfs: %s", what,
			       r == -EFBIG ? "more than IMAGE_FILES_LIST_MAX bytes" : tk_strerror(r));
	}
	return r;
}

/*
 * The python and Go candidates in the first listing, then the listing of
 * their directories into *ret (left NULL when there is no candidate).
 */
static int list_candidates(const struct runner *rn, const char *listing, unsigned needs, struct candidates *cand,
			   char **ret, char *err, size_t err_size)
{
	char *script = NULL;
	int r = candidates_find(listing, needs, cand, err, err_size);

	if (r >= 0) {
		r = candidates_script(cand, &script);
	}
	if (r >= 0 && script) {
		r = run_listing(rn, script, "python and Go directories", ret, err, err_size);
	}
	free(script);
	return r;
}

/* With the reader confined: list the image's directories, then read each needed preset's files into f. */
static int read_needed(const struct runner *rn, unsigned needs, struct image_files *f, char *err, size_t err_size)
{
	char *script = NULL, *listing = NULL, *listing2 = NULL;
	struct candidates cand = { 0 };
	int r = listing_script(needs, &script);

	if (r >= 0) {
		r = run_listing(rn, script, "directories", &listing, err, err_size);
	}
	if (r >= 0 && (needs & EGRESS_NEED_APT)) {
		r = read_apt(rn, listing, f, err, err_size);
	}
	if (r >= 0 && (needs & EGRESS_NEED_NPM)) {
		r = read_npm(rn, listing, f, err, err_size);
	}
	if (r >= 0 && (needs & (EGRESS_NEED_PIP | EGRESS_NEED_GO))) {
		r = list_candidates(rn, listing, needs, &cand, &listing2, err, err_size);
	}
	if (r >= 0 && (needs & EGRESS_NEED_PIP)) {
		r = read_pip(rn, listing, listing2, &cand, f, err, err_size);
	}
	if (r >= 0 && (needs & EGRESS_NEED_GO)) {
		r = read_go(rn, listing, listing2, &cand, f, err, err_size);
	}
	free(script);
	free(listing);
	free(listing2);
	candidates_release(&cand);
	return r;
}

int image_files_read(const char *ext4, unsigned needs, const char *scratch_dir, struct image_files *ret, char *err,
		     size_t err_size)
{
	struct runner rn = { .sp = { .ruleset_fd = -1 }, .ext4 = ext4 };
	struct image_files f = { 0 };
	const char *ro[] = { ext4, NULL };
	char *scratch = NULL;
	int r;

	if (needs == 0) {
		*ret = f;
		return 0;
	}
	rn.debugfs = find_debugfs();
	if (!rn.debugfs) {
		(void)snprintf(err, err_size, "the presets that read the image need debugfs (install e2fsprogs)");
		return -ENOENT;
	}
	r = scratch_create(scratch_dir, &scratch, err, err_size);
	if (r < 0) {
		return r;
	}
	r = sandbox_prepare(SANDBOX_IMAGE_LOCAL, scratch, ro, &rn.sp);
	if (r < 0) {
		(void)snprintf(err, err_size, "confining the image reader: %s", tk_strerror(r));
	}
	if (r >= 0) {
		r = read_needed(&rn, needs, &f, err, err_size);
	}
	if (r == -ENOMEM) {
		(void)snprintf(err, err_size, "out of memory");
	}
	sandbox_prepared_release(&rn.sp);
	(void)rmdir(scratch);
	free(scratch);
	if (r < 0) {
		image_files_release(&f);
		return r;
	}
	*ret = f;
	if (f.f.npm_default_registry) {
		ret->f.npm_default_registry = ret->npm_default;
	}
	if (f.f.pip_default_index) {
		ret->f.pip_default_index = ret->pip_index;
		ret->f.pip_default_files = ret->pip_files;
	}
	return 0;
}
