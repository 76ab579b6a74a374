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
#include "image/workspace-answer.h"
#include "image/workspace.h"
#include "log.h"

/*
 * tkbox workspace build DIR -o FILE [--uid N] [--gid N] [--quiet] [--json]:
 * the /workspace lower image, for tests and inspection, and the daemon's
 * workspace builder child (--json: the answer of src/image/workspace-answer.h
 * on stdout, exit 0 built, 1 refused). Before it reads DIR it confines itself
 * (SANDBOX_WORKSPACE): no network or AF_UNIX socket, no privilege gain, and
 * writes only in FILE's directory.
 */

struct ws_ctx {
	bool quiet;
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
	fprintf(stderr, "left out %s: %s\n", log_quote(rel, strlen(rel), q), why);
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
		"usage: tkbox workspace build DIR -o FILE [--uid N] [--gid N] [--quiet] [--json | --subprocess]\n");
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
		{ NULL, 0, NULL, 0 },
	};
	struct image_diag diag = { .msg = "" };
	struct workspace_answer a = { 0 };
	struct ws_ctx x = { 0 };
	const char *rule = NULL;
	struct workspace_opts o = { .diag = &diag, .notice = ws_notice, .userdata = &x, .ret_rule = &rule };
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
	r = ws_confine(o.dir, o.out, &diag);
	if (r < 0) {
		rule = "SANDBOX_WORKSPACE";
	} else {
		r = workspace_build(&o, &st);
	}
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
