/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "banned.h"
#include "cli/commands.h"
#include "cli/child-confine.h"
#include "clock.h"
#include "image/workspace-answer.h"
#include "image/workspace.h"
#include "io.h"
#include "log.h"
#include "secmem.h"

/*
 * tkbox workspace build DIR -o FILE [--uid N] [--gid N] [--quiet] [--json]:
 * the /workspace lower image, for tests and inspection, and the daemon's
 * workspace builder child (--json: the answer of src/image/workspace-answer.h
 * on stdout, exit 0 built, 1 refused). Before it reads DIR it confines itself
 * (SANDBOX_WORKSPACE): no network or AF_UNIX socket, no privilege gain, and
 * writes only in FILE's directory.
 *
 * --secrets-fd N --secret NAME:LEN ... (the daemon, for a box with secrets):
 * fd N is a sealed memfd holding the values back to back in the order of the
 * --secret flags, LEN bytes each. They are read into secmem before the
 * builder confines itself (which closes every other fd), and the build is
 * refused when the workspace holds one (workspace.h: the workspace check).
 */

#define WS_SECRETS_MAX 16 /* EGRESS_SECRET_MAX */
#define WS_SECRET_NAME_MAX 64 /* EGRESS_SECRET_NAME_MAX */
#define WS_SECRET_LEN_MAX 4096 /* EGRESS_SECRET_VALUE_MAX */

struct ws_secrets {
	struct workspace_secret v[WS_SECRETS_MAX];
	char names[WS_SECRETS_MAX][WS_SECRET_NAME_MAX + 1];
	size_t n;
	int fd;
	uint8_t *mem; /* secmem, total bytes */
	size_t total;
};

/* One --secret NAME:LEN. */
static int ws_secret_arg(struct ws_secrets *w, const char *arg)
{
	const char *colon = strrchr(arg, ':');
	size_t nl = colon ? (size_t)(colon - arg) : 0;
	char *end = NULL;
	unsigned long len;

	if (!colon || nl == 0 || nl > WS_SECRET_NAME_MAX || w->n >= WS_SECRETS_MAX ||
	    strspn(arg, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != nl) {
		return -EINVAL;
	}
	errno = 0;
	len = strtoul(colon + 1, &end, 10);
	if (errno || !end || *end || end == colon + 1 || len < 1 || len > WS_SECRET_LEN_MAX) {
		return -EINVAL;
	}
	memcpy(w->names[w->n], arg, nl);
	w->names[w->n][nl] = '\0';
	w->v[w->n].name = w->names[w->n];
	w->v[w->n].len = len;
	w->total += len;
	w->n++;
	return 0;
}

/* The values from the memfd: exactly the bytes the --secret lengths add up to. */
static int ws_secrets_read(struct ws_secrets *w)
{
	struct stat st;
	size_t off = 0;
	int r;

	if (w->n == 0 || w->fd < 0) {
		return w->n == 0 && w->fd < 0 ? 0 : -EINVAL;
	}
	if (fstat(w->fd, &st) < 0) {
		return negative_errno();
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != (uint64_t)w->total) {
		return -EBADMSG;
	}
	w->mem = secmem_alloc(w->total);
	if (!w->mem) {
		return -ENOMEM;
	}
	r = io_pread_all(w->fd, w->mem, w->total, 0);
	if (r < 0) {
		return r == -EIO ? -EBADMSG : r; /* the memfd is shorter than the lengths named */
	}
	for (size_t i = 0; i < w->n; i++) {
		w->v[i].value = w->mem + off;
		off += w->v[i].len;
	}
	(void)close(w->fd);
	w->fd = -1;
	return 0;
}

static void ws_secrets_release(struct ws_secrets *w)
{
	if (w->mem) {
		secmem_free(w->mem, w->total);
	}
	w->mem = NULL;
}

#define WS_PROGRESS_MS 100 /* the progress line is redrawn at most this often */

struct ws_ctx {
	bool quiet;
	bool progress; /* stderr is a terminal: draw a progress line there */
	bool drawn;
	uint64_t last_ms;
	struct workspace_answer *answer; /* --json: left-out paths go here */
	int err; /* first -ENOMEM adding to answer */
};

static void ws_notice(void *ud, const char *rel, const char *why)
{
	struct ws_ctx *x = ud;
	char q[LOG_QUOTE_BUFSIZE];

	if (x->answer) {
		int r = workspace_answer_add_left_out(x->answer, rel, why);
		x->err = x->err < 0 ? x->err : r;
		return;
	}
	if (x->quiet) {
		return;
	}
	if (x->drawn) {
		fprintf(stderr, "\r\033[K");
		x->drawn = false;
	}
	fprintf(stderr, "left out %s: %s\n", log_quote(rel, strlen(rel), q), why);
}

/* The progress line (stderr is a terminal): files and MiB copied, then the ext4 build. */
static void ws_progress(void *ud, const char *phase, uint64_t files, uint64_t bytes)
{
	struct ws_ctx *x = ud;
	uint64_t now = clock_mono_ms();
	bool ext4 = strcmp(phase, "ext4") == 0;

	if (!x->progress || (!ext4 && x->drawn && now - x->last_ms < WS_PROGRESS_MS)) {
		return;
	}
	x->last_ms = now;
	x->drawn = true;
	fprintf(stderr, "\r\033[K%s %llu files (%.1f MiB)", ext4 ? "building ext4 from" : "copying",
		(unsigned long long)files, (double)bytes / 1048576.0);
}

/* Clear the progress line, so that what follows starts on a clean line. */
static void ws_progress_end(struct ws_ctx *x)
{
	if (x->drawn) {
		fprintf(stderr, "\r\033[K");
		x->drawn = false;
	}
}

static int parse_id(const char *s, uint32_t *ret)
{
	char *end = NULL;
	unsigned long v;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || !end || *end || end == s || v > UINT32_MAX - 1) {
		return -EINVAL;
	}
	*ret = (uint32_t)v;
	return 0;
}

#define WS_GITFILE_MAX 4096 /* bytes read of a ".git" file ("gitdir: PATH") */

/*
 * What git reads besides the checkout: when DIR is inside a repository, its
 * top (the nearest directory up with a ".git"), and when that ".git" is a
 * file (a linked worktree, a submodule), the git dir it names and, for a
 * worktree, the repository's own git dir. Found by lstat and one bounded
 * read of that one-line file; nothing else of the checkout is read
 * unconfined. ret[] gets up to 3 new strings.
 */
static int ws_git_paths(const char *src, char *ret[3])
{
	_cleanup_free_ char *top = strdup(src), *gitfile = NULL, *line = NULL;
	struct stat st;
	size_t n = 0;
	ssize_t k;
	int fd;

	if (!top) {
		return -ENOMEM;
	}
	for (;;) {
		_cleanup_free_ char *g = NULL;
		char *slash;
		if (asprintf(&g, "%s/.git", top[1] ? top : "") < 0) {
			return -ENOMEM;
		}
		if (lstat(g, &st) == 0) {
			gitfile = steal_ptr(g);
			break;
		}
		slash = strrchr(top, '/');
		if (!slash || slash == top) {
			return 0; /* not in a repository: git says so */
		}
		*slash = '\0';
	}
	/* never "/" itself: a /.git would open the whole file system to the builder */
	if (strcmp(top, src) != 0 && top[1]) {
		ret[n++] = steal_ptr(top);
	}
	line = malloc(WS_GITFILE_MAX + 1);
	if (!line) {
		return -ENOMEM;
	}
	if (!S_ISREG(st.st_mode)) {
		return 0;
	}
	fd = open(gitfile, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	k = fd >= 0 ? read(fd, line, WS_GITFILE_MAX) : -1;
	if (fd >= 0) {
		(void)close(fd);
	}
	if (k < 9 || strncmp(line, "gitdir: ", 8) != 0) {
		return 0;
	}
	line[k] = '\0';
	line[strcspn(line, "\n")] = '\0';
	{
		const char *gd = line + 8;
		_cleanup_free_ char *joined = NULL;
		char *real, *wt;
		if (gd[0] != '/') {
			char *slash = strrchr(gitfile, '/');
			*slash = '\0';
			if (asprintf(&joined, "%s/%s", gitfile, gd) < 0) {
				return -ENOMEM;
			}
			gd = joined;
		}
		real = realpath(gd, NULL);
		if (!real) {
			return 0;
		}
		ret[n++] = real;
		wt = strstr(real, "/worktrees/");
		if (wt && (ret[n] = strndup(real, (size_t)(wt - real)))) {
			n++;
		}
	}
	return 0;
}

/*
 * Confine this process before it reads the checkout: writes in the output's
 * directory only, the checkout readable. A confinement that does not hold is
 * a refusal (the caller's message names SANDBOX_WORKSPACE).
 */
static int ws_confine(const char *dir, const char *out, struct image_diag *diag)
{
	_cleanup_free_ char *outdir = NULL, *realout = NULL, *src = NULL;
	struct sandbox_report rep = { 0 };
	const char *slash = strrchr(out, '/');
	char *git[3] = { NULL, NULL, NULL };
	const char *ro[5] = { NULL };
	int r;

	outdir = slash ? strndup(out, (size_t)(slash - out) + 1) : strdup(".");
	if (!outdir) {
		return -ENOMEM;
	}
	realout = realpath(outdir, NULL);
	src = realpath(dir, NULL);
	if (!realout || !src) {
		r = negative_errno();
		image_diag_set(diag, "%s: %s", !realout ? "the output's directory" : "workspace directory",
			       tk_strerror(r));
		return r;
	}
	ro[0] = src;
	r = ws_git_paths(src, git);
	for (size_t i = 0; i < 3; i++) {
		ro[i + 1] = git[i];
	}
	if (r >= 0) {
		r = child_confine(SANDBOX_WORKSPACE, realout, ro, &rep);
	}
	for (size_t i = 0; i < 3; i++) {
		free(git[i]);
	}
	if (r < 0) {
		image_diag_set(diag,
			       "the workspace builder could not confine itself (SANDBOX_WORKSPACE: %s; seccomp %s, "
			       "no_new_privs %s); tkbox builds no workspace unconfined",
			       tk_strerror(r), rep.seccomp ? "on" : "off", rep.nnp ? "on" : "off");
	}
	return r;
}

/* --json: the answer on stdout; 0 when it was written. */
static int ws_answer(struct workspace_answer *a, struct image_diag *diag)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r = buf_new(WORKSPACE_ANSWER_MAX_BYTES, 0, &b);

	if (r >= 0) {
		r = workspace_answer_encode(a, b, diag);
	}
	if (r >= 0 && (fwrite(buf_ptr(b), 1, buf_len(b), stdout) != buf_len(b) || fflush(stdout) != 0)) {
		r = -EIO;
	}
	return r;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: tkbox workspace build DIR -o FILE [--uid N] [--gid N] [--quiet] [--json | --subprocess]\n"
		"                             [--secrets-fd N --secret NAME:LEN...]\n");
}

static void print_stats(const struct workspace_stats *st)
{
	printf("files %llu symlinks %llu bytes %llu credentials_left_out %llu other_left_out %llu\n",
	       (unsigned long long)st->files, (unsigned long long)st->symlinks, (unsigned long long)st->bytes,
	       (unsigned long long)st->credentials, (unsigned long long)st->skipped);
}

/* --subprocess: as the daemon builds (workspace_answer_exec), to test that path; FILE must be absolute. */
static int ws_subprocess(const char *dir, const char *out, bool quiet)
{
	struct image_diag diag = { .msg = "" };
	struct workspace_answer a = { 0 };
	int r = workspace_answer_exec("/proc/self/exe", dir, out, &a, &diag);

	if (r < 0) {
		fprintf(stderr, "tkbox workspace build: %s\n", diag.msg[0] ? diag.msg : tk_strerror(r));
		return 1;
	}
	for (size_t i = 0; i < a.n_left_out && !quiet; i++) {
		char q[LOG_QUOTE_BUFSIZE];
		fprintf(stderr, "left out %s: %s\n", log_quote(a.left_out[i].path, strlen(a.left_out[i].path), q),
			a.left_out[i].why);
	}
	if (a.error) {
		fprintf(stderr, "tkbox workspace build: %s (rule: %s)\n", a.error, a.rule ? a.rule : "none");
		workspace_answer_release(&a);
		return 1;
	}
	print_stats(&a.stats);
	workspace_answer_release(&a);
	return 0;
}

int cmd_workspace(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "uid", required_argument, NULL, 'u' },
		{ "gid", required_argument, NULL, 'g' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "json", no_argument, NULL, 'j' },
		{ "subprocess", no_argument, NULL, 'x' },
		{ "secrets-fd", required_argument, NULL, 'F' },
		{ "secret", required_argument, NULL, 'S' },
		{ NULL, 0, NULL, 0 },
	};
	struct ws_secrets sec = { .fd = -1 };
	struct image_diag diag = { .msg = "" };
	struct workspace_answer a = { 0 };
	struct ws_ctx x = { 0 };
	const char *rule = NULL;
	struct workspace_opts o = {
		.diag = &diag, .notice = ws_notice, .progress = ws_progress, .userdata = &x, .ret_rule = &rule
	};
	struct workspace_stats st;
	bool json = false, subprocess = false;
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "o:q", longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			o.out = optarg;
			break;
		case 'u':
		case 'g':
			if (parse_id(optarg, c == 'u' ? &o.uid : &o.gid) < 0) {
				fprintf(stderr, "tkbox workspace: bad --%s\n", c == 'u' ? "uid" : "gid");
				return 2;
			}
			break;
		case 'q':
			x.quiet = true;
			break;
		case 'j':
			json = true;
			break;
		case 'x':
			subprocess = true;
			break;
		case 'F': {
			uint32_t fd;
			if (parse_id(optarg, &fd) < 0 || fd < 3 || fd > INT32_MAX) {
				fprintf(stderr, "tkbox workspace: bad --secrets-fd\n");
				return 2;
			}
			sec.fd = (int)fd;
			break;
		}
		case 'S':
			if (ws_secret_arg(&sec, optarg) < 0) {
				fprintf(stderr, "tkbox workspace: --secret takes NAME:LEN (at most %d)\n",
					WS_SECRETS_MAX);
				return 2;
			}
			break;
		default:
			usage();
			return 2;
		}
	}
	if (optind + 2 != argc || strcmp(argv[optind], "build") != 0 || !o.out) {
		usage();
		return 2;
	}
	o.dir = argv[optind + 1];
	if (subprocess) {
		return ws_subprocess(o.dir, o.out, x.quiet);
	}
	x.answer = json ? &a : NULL;
	/* a person at a terminal sees it move; a pipe, a log or the daemon (--json) gets no progress bytes */
	x.progress = !json && !x.quiet && isatty(STDERR_FILENO);
	/* the values first: confining closes every fd but 0, 1 and 2 */
	r = ws_secrets_read(&sec);
	if (r < 0) {
		image_diag_set(&diag, "the secrets for the workspace check could not be read (--secrets-fd: %s)",
			       tk_strerror(r));
		rule = WORKSPACE_SECRET_RULE;
	} else {
		o.secrets = sec.v;
		o.n_secrets = sec.n;
		r = ws_confine(o.dir, o.out, &diag);
		if (r < 0) {
			rule = "SANDBOX_WORKSPACE";
		} else {
			r = workspace_build(&o, &st);
		}
	}
	ws_secrets_release(&sec);
	ws_progress_end(&x);
	if (r >= 0 && x.err < 0) {
		r = x.err;
	}
	if (!json) {
		if (r < 0) {
			fprintf(stderr, "tkbox workspace build: %s\n", diag.msg[0] ? diag.msg : tk_strerror(r));
			return 1;
		}
		print_stats(&st);
		return 0;
	}
	if (r < 0) {
		r = workspace_answer_set_error(&a, diag.msg[0] ? diag.msg : tk_strerror(r), rule);
		r = r < 0 ? r : 1;
	} else {
		a.stats = st;
		a.ext4 = strdup(o.out);
		r = a.ext4 ? 0 : -ENOMEM;
	}
	if (r >= 0) {
		int w = ws_answer(&a, &diag);
		if (w < 0) {
			fprintf(stderr, "tkbox workspace build: %s\n", diag.msg[0] ? diag.msg : tk_strerror(w));
			r = 2;
		}
	} else {
		fprintf(stderr, "tkbox workspace build: %s\n", tk_strerror(r));
		r = 2;
	}
	workspace_answer_release(&a);
	return r;
}
