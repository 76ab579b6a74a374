/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "banned.h"
#include "crypto.h"
#include "io.h"
#include "patch/apply-write.h"

/*
 * The apply writer (src/patch/apply-write.h) against real directories: a
 * checkout, and a scratch whose tree/ holds the decided results. The order is
 * made from what is on disk (as the prepare child makes the plan), then the
 * test changes what the writer will find, and checks the progress lines and
 * the checkout byte for byte. The rules run in this process
 * (apply_write_files); the runner and the child (`tkbox-host apply-write`,
 * confined) run through apply_write_start with the binary in TKBOX_HOST.
 */

static char root[128], checkout[192], scratch[192], tree[224], outside[192];

/* ---- files ---- */

static void put(const char *dir, const char *rel, const char *bytes, mode_t mode)
{
	char p[512];
	int fd;

	(void)snprintf(p, sizeof(p), "%s/%s", dir, rel);
	{
		/* parents */
		char *s = strdup(p);
		for (char *q = s + strlen(dir) + 1; (q = strchr(q, '/')); q++) {
			*q = '\0';
			(void)mkdir(s, 0755);
			*q = '/';
		}
		free(s);
	}
	(void)unlink(p);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(io_write_all(fd, bytes, strlen(bytes)), 0);
	assert_int_equal(fchmod(fd, mode), 0);
	assert_int_equal(close(fd), 0);
}

static void put_link(const char *dir, const char *rel, const char *target)
{
	char p[512];

	(void)snprintf(p, sizeof(p), "%s/%s", dir, rel);
	for (char *q = p + strlen(dir) + 1; (q = strchr(q, '/')); q++) {
		*q = '\0';
		(void)mkdir(p, 0755);
		*q = '/';
	}
	(void)unlink(p);
	assert_int_equal(symlink(target, p), 0);
}

/* The file's bytes (NUL-terminated), or NULL when it is not a regular file. */
static char *get(const char *dir, const char *rel, mode_t *ret_mode)
{
	char p[512], *s = NULL;
	size_t n = 0;
	struct stat st;

	(void)snprintf(p, sizeof(p), "%s/%s", dir, rel);
	if (lstat(p, &st) < 0 || !S_ISREG(st.st_mode) || io_read_file(AT_FDCWD, p, 1 << 20, 0, &s, &n) < 0) {
		return NULL;
	}
	if (ret_mode) {
		*ret_mode = st.st_mode & 07777;
	}
	return s;
}

static void assert_file(const char *dir, const char *rel, const char *bytes, mode_t mode)
{
	mode_t m = 0;
	char *s = get(dir, rel, &m);

	if (!s || strcmp(s, bytes) != 0 || m != mode) {
		print_error("%s/%s: %s (mode %o), want %s (mode %o)\n", dir, rel, s ? s : "(not a file)", m, bytes,
			    mode);
	}
	assert_non_null(s);
	assert_string_equal(s, bytes);
	assert_int_equal(m, mode);
	free(s);
}

static void assert_link(const char *dir, const char *rel, const char *target)
{
	char p[512], t[512];
	ssize_t n;

	(void)snprintf(p, sizeof(p), "%s/%s", dir, rel);
	n = readlink(p, t, sizeof(t) - 1);
	assert_true(n >= 0);
	t[n] = '\0';
	assert_string_equal(t, target);
}

static void assert_absent(const char *dir, const char *rel)
{
	char p[512];
	struct stat st;

	(void)snprintf(p, sizeof(p), "%s/%s", dir, rel);
	assert_int_equal(lstat(p, &st), -1);
}

/* No temp file of the writer anywhere beneath dir. */
static void assert_no_temp(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	assert_non_null(d);
	while ((e = readdir(d))) {
		char p[512];
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
			continue;
		}
		if (strncmp(e->d_name, APPLY_WRITE_TEMP_PREFIX, strlen(APPLY_WRITE_TEMP_PREFIX)) == 0) {
			print_error("a temp file was left: %s/%s\n", dir, e->d_name);
			fail();
		}
		(void)snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (e->d_type == DT_DIR) {
			assert_no_temp(p);
		}
	}
	(void)closedir(d);
}

static void rm_rf(const char *p)
{
	char cmd[600];

	(void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", p);
	assert_int_equal(system(cmd), 0);
}

/* ---- the order, from disk ---- */

/* Git mode and sha256 of the entry at dir/rel (0 when absent). */
static uint32_t state(const char *dir, const char *rel, char hex[65], uint64_t *size)
{
	char p[512], t[512];
	struct stat st;

	(void)snprintf(p, sizeof(p), "%s/%s", dir, rel);
	if (lstat(p, &st) < 0) {
		hex[0] = '\0';
		return 0;
	}
	if (S_ISLNK(st.st_mode)) {
		ssize_t n = readlink(p, t, sizeof(t));
		assert_true(n >= 0);
		assert_int_equal(sha256_hex(t, (size_t)n, hex), 0);
		*size = (uint64_t)n;
		return PATCH_MODE_LINK;
	}
	{
		char *s = NULL;
		size_t n = 0;
		assert_int_equal(io_read_file(AT_FDCWD, p, 1 << 20, 0, &s, &n), 0);
		assert_int_equal(sha256_hex(s, n, hex), 0);
		free(s);
		*size = n;
	}
	return st.st_mode & S_IXUSR ? PATCH_MODE_EXEC : PATCH_MODE_FILE;
}

static void order_init(struct apply_plan *p)
{
	*p = (struct apply_plan){ .checkout = strdup(checkout), .scratch = strdup(scratch) };
	p->files = calloc(64, sizeof(*p->files));
	assert_non_null(p->files);
}

/* One file of the order: the result as tree/ holds it now, the pre state as the checkout holds it now. */
static void order_add(struct apply_plan *p, const char *rel)
{
	struct apply_file *f = &p->files[p->n_files++];
	uint64_t size = 0, pre_size = 0;

	f->path = strdup(rel);
	f->mode = state(tree, rel, f->sha256, &size);
	f->size = f->mode ? size : 0;
	f->pre_mode = state(checkout, rel, f->pre_sha256, &pre_size);
	f->pre_type = f->pre_mode == 0		       ? APPLY_PRE_ABSENT
		      : f->pre_mode == PATCH_MODE_LINK ? APPLY_PRE_SYMLINK
						       : APPLY_PRE_FILE;
	f->op = f->mode == 0 ? PATCH_DELETE : f->pre_mode == 0 ? PATCH_CREATE : PATCH_MODIFY;
}

/* ---- running it ---- */

struct outcome {
	size_t n;
	struct apply_line lines[64];
	int r;
};

static void outcome_release(struct outcome *o)
{
	for (size_t i = 0; i < o->n; i++) {
		apply_line_release(&o->lines[i]);
	}
}

/* Decode every line of out[0..n). */
static void parse_lines(const char *out, size_t n, struct outcome *o)
{
	char diag[256];

	for (size_t i = 0; i < n;) {
		const char *nl = memchr(out + i, '\n', n - i);
		assert_non_null(nl);
		assert_true(o->n < 64);
		assert_int_equal(apply_line_decode((const uint8_t *)out + i, (size_t)(nl - out - i) + 1,
						   &o->lines[o->n++], diag, sizeof(diag)),
				 0);
		i = (size_t)(nl - out) + 1;
	}
}

/* The rules, in this process: apply_write_files with the order, lines captured. */
static void write_here(struct apply_plan *p, struct outcome *o)
{
	char diag[256] = "";
	int pfd[2] = { -1, -1 }, cfd, tfd;
	struct buf *b = NULL, *out = NULL;
	struct apply_plan back = { 0 };

	/* what the child would get: the order through its encoder and decoder */
	assert_int_equal(buf_new(APPLY_PLAN_MAX_BYTES, 0, &b), 0);
	assert_int_equal(apply_order_encode(p, b), 0);
	assert_int_equal(apply_order_decode(buf_ptr(b), buf_len(b), &back, diag, sizeof(diag)), 0);
	buf_free(b);
	cfd = open(checkout, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	tfd = open(tree, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	/* a pipe, not a file: the lines are not subject to RLIMIT_FSIZE (test_write_fails) */
	assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
	assert_true(cfd >= 0 && tfd >= 0);
	*o = (struct outcome){ 0 };
	o->r = apply_write_files(&back, cfd, tfd, pfd[1], 0);
	(void)close(pfd[1]);
	assert_int_equal(io_read_all_new(pfd[0], 60000, 0, &out), 0);
	parse_lines((const char *)buf_ptr(out), buf_len(out), o);
	buf_free(out);
	(void)close(pfd[0]);
	(void)close(cfd);
	(void)close(tfd);
	apply_plan_release(&back);
}

static void assert_written(const struct outcome *o, size_t i, const char *path)
{
	assert_true(i < o->n);
	assert_int_equal(o->lines[i].kind, APPLY_LINE_WRITTEN);
	assert_string_equal(o->lines[i].path, path);
}

/* The last line is an error for path with rule; before it exactly n_written written lines. */
static void assert_stopped(const struct outcome *o, size_t n_written, const char *path, const char *rule)
{
	const struct apply_line *l = &o->lines[o->n - 1];

	assert_int_equal(o->r, 1);
	assert_int_equal(o->n, n_written + 1);
	if (l->kind != APPLY_LINE_ERROR || strcmp(l->rule, rule) != 0) {
		print_error("want rule %s, got: %s (%s)\n", rule, l->error ? l->error : "(no error)",
			    l->rule ? l->rule : "no rule");
	}
	assert_int_equal(l->kind, APPLY_LINE_ERROR);
	assert_string_equal(l->rule, rule);
	assert_string_equal(l->path, path);
	assert_non_null(strstr(l->error, "nothing more was written"));
	for (size_t i = 0; i < n_written; i++) {
		assert_int_equal(o->lines[i].kind, APPLY_LINE_WRITTEN);
	}
}

static int setup(void **state)
{
	(void)state;
	(void)snprintf(root, sizeof(root), "/tmp/tkbox-apply-write-XXXXXX");
	if (!mkdtemp(root)) {
		return -1;
	}
	(void)snprintf(checkout, sizeof(checkout), "%s/checkout", root);
	(void)snprintf(scratch, sizeof(scratch), "%s/scratch", root);
	(void)snprintf(tree, sizeof(tree), "%s/tree", scratch);
	(void)snprintf(outside, sizeof(outside), "%s/outside", root);
	umask(022);
	return mkdir(checkout, 0755) == 0 && mkdir(scratch, 0755) == 0 && mkdir(tree, 0755) == 0 &&
			       mkdir(outside, 0755) == 0
		       ? 0
		       : -1;
}

static int teardown(void **state)
{
	(void)state;
	rm_rf(root);
	return 0;
}

/* Every test starts from an empty checkout, tree and outside. */
static int fresh(void **state)
{
	(void)state;
	rm_rf(checkout);
	rm_rf(tree);
	rm_rf(outside);
	return mkdir(checkout, 0755) == 0 && mkdir(tree, 0755) == 0 && mkdir(outside, 0755) == 0 ? 0 : -1;
}

/* A plain run: every kind of change, the checkout then holds exactly the results; no temp file is left. */
static void test_plain(void **state)
{
	struct apply_plan p;
	struct outcome o;
	const char *bin = "bin\001\002ary";

	(void)state;
	put(checkout, "a.txt", "old a\n", 0644);
	put(checkout, "gone.txt", "bye\n", 0644);
	put_link(checkout, "gone-link", "a.txt");
	put(checkout, "run.sh", "#!/bin/sh\n", 0644);
	put(checkout, "dir/keep.txt", "keep\n", 0644);
	put(checkout, "ro.txt", "was exec\n", 0755);
	/* results */
	put(tree, "a.txt", "new a\n", 0644);
	put(tree, "run.sh", "#!/bin/sh\n", 0755);
	put(tree, "ro.txt", "was exec\n", 0644);
	put(tree, "new/deep/b.bin", bin, 0644);
	put(tree, "tool", "#!/bin/sh\necho hi\n", 0755);
	put_link(tree, "ln", "dir/keep.txt");
	put_link(tree, "dir/dangling", "../nowhere");
	order_init(&p);
	order_add(&p, "a.txt");
	order_add(&p, "dir/dangling");
	order_add(&p, "gone-link");
	order_add(&p, "gone.txt");
	order_add(&p, "ln");
	order_add(&p, "new/deep/b.bin");
	order_add(&p, "ro.txt");
	order_add(&p, "run.sh");
	order_add(&p, "tool");
	assert_int_equal(p.files[3].op, PATCH_DELETE);
	assert_int_equal(p.files[2].pre_type, APPLY_PRE_SYMLINK);
	write_here(&p, &o);
	assert_int_equal(o.r, 0);
	assert_int_equal(o.n, p.n_files + 1);
	for (size_t i = 0; i < p.n_files; i++) {
		assert_written(&o, i, p.files[i].path);
	}
	assert_int_equal(o.lines[p.n_files].kind, APPLY_LINE_DONE);
	assert_int_equal(o.lines[p.n_files].done, p.n_files);
	assert_file(checkout, "a.txt", "new a\n", 0644);
	assert_file(checkout, "run.sh", "#!/bin/sh\n", 0755);
	assert_file(checkout, "ro.txt", "was exec\n", 0644);
	assert_file(checkout, "new/deep/b.bin", bin, 0644);
	assert_file(checkout, "tool", "#!/bin/sh\necho hi\n", 0755);
	assert_file(checkout, "dir/keep.txt", "keep\n", 0644);
	assert_link(checkout, "ln", "dir/keep.txt");
	assert_link(checkout, "dir/dangling", "../nowhere");
	assert_absent(checkout, "gone.txt");
	assert_absent(checkout, "gone-link");
	assert_absent(outside, "nowhere");
	{
		struct stat st;
		char d[256];
		(void)snprintf(d, sizeof(d), "%s/new/deep", checkout);
		assert_int_equal(lstat(d, &st), 0);
		assert_true(S_ISDIR(st.st_mode));
		assert_int_equal(st.st_mode & 0777, 0755);
	}
	assert_no_temp(checkout);
	outcome_release(&o);
	apply_plan_release(&p);
}

/* A parent swapped for a symlink after the plan: refused, nothing written through it (nor for a creation). */
static void test_symlink_parent(void **state)
{
	struct apply_plan p;
	struct outcome o;
	char a[256], b[256];

	(void)state;
	put(checkout, "first.txt", "1\n", 0644);
	put(tree, "first.txt", "one\n", 0644);
	put(checkout, "d/x", "x\n", 0644);
	put(tree, "d/x", "X!\n", 0644);
	order_init(&p);
	order_add(&p, "first.txt");
	order_add(&p, "d/x");
	/* d becomes a symlink to a directory with the same x: following it would pass the pre check */
	put(outside, "x", "x\n", 0644);
	(void)snprintf(a, sizeof(a), "%s/d", checkout);
	(void)snprintf(b, sizeof(b), "%s/d.real", checkout);
	assert_int_equal(rename(a, b), 0);
	assert_int_equal(symlink(outside, a), 0);
	write_here(&p, &o);
	assert_stopped(&o, 1, "d/x", "symlink-parent");
	assert_written(&o, 0, "first.txt");
	assert_file(checkout, "first.txt", "one\n", 0644);
	assert_file(outside, "x", "x\n", 0644);
	assert_file(checkout, "d.real/x", "x\n", 0644);
	outcome_release(&o);
	apply_plan_release(&p);

	/* a creation below it, and below a symlink deeper down */
	put(tree, "d/new.txt", "n\n", 0644);
	put(tree, "e/f/g.txt", "g\n", 0644);
	put(checkout, "e/real/.keep", "", 0644);
	(void)snprintf(a, sizeof(a), "%s/e/f", checkout);
	assert_int_equal(symlink(outside, a), 0);
	for (int k = 0; k < 2; k++) {
		const char *rel = k == 0 ? "d/new.txt" : "e/f/g.txt";
		order_init(&p);
		order_add(&p, rel);
		assert_int_equal(p.files[0].op, PATCH_CREATE);
		write_here(&p, &o);
		assert_stopped(&o, 0, rel, "symlink-parent");
		assert_absent(outside, k == 0 ? "new.txt" : "g.txt");
		outcome_release(&o);
		apply_plan_release(&p);
	}
	assert_no_temp(checkout);
	assert_no_temp(outside);
}

/* The checkout changed between the plan (the decision) and the write: content, mode, type, a new file. */
static void test_pre_changed(void **state)
{
	struct apply_plan p;
	struct outcome o;

	(void)state;
	put(checkout, "a.txt", "a\n", 0644);
	put(tree, "a.txt", "A\n", 0644);
	put(tree, "new.txt", "N\n", 0644);
	put(checkout, "gone.txt", "g\n", 0644);
	put(tree, "gone.txt", "G\n", 0644);
	for (int k = 0; k < 5; k++) {
		const char *rel = k == 3 ? "new.txt" : k == 4 ? "gone.txt" : "a.txt";
		order_init(&p);
		order_add(&p, rel);
		switch (k) {
		case 0:
			put(checkout, "a.txt", "a, edited by a person\n", 0644);
			break;
		case 1:
			put(checkout, "a.txt", "a\n", 0755); /* the same bytes, now executable */
			break;
		case 2:
			put_link(checkout, "a.txt", "gone.txt"); /* a symlink whose target has other bytes */
			break;
		case 3:
			put(checkout, "new.txt", "made meanwhile\n", 0644);
			break;
		default: {
			char g[256];
			(void)snprintf(g, sizeof(g), "%s/gone.txt", checkout);
			assert_int_equal(unlink(g), 0);
		} break;
		}
		write_here(&p, &o);
		assert_stopped(&o, 0, rel, "checkout-changed");
		outcome_release(&o);
		apply_plan_release(&p);
		put(checkout, "a.txt", "a\n", 0644);
	}
	assert_file(checkout, "new.txt", "made meanwhile\n", 0644);
	assert_absent(checkout, "gone.txt"); /* not recreated */
	assert_no_temp(checkout);
}

/* The scratch result changed after the plan (after the decision): refused, the checkout untouched. */
static void test_result_tampered(void **state)
{
	struct apply_plan p;
	struct outcome o;

	(void)state;
	put(checkout, "a.txt", "a\n", 0644);
	put(tree, "a.txt", "decided\n", 0644);
	for (int k = 0; k < 4; k++) {
		order_init(&p);
		order_add(&p, "a.txt");
		switch (k) {
		case 0:
			put(tree, "a.txt", "tampered\n", 0644);
			break;
		case 1:
			put(tree, "a.txt", "decided\n", 0755);
			break;
		case 2:
			/* a symlink to a file with exactly the decided bytes: never followed */
			put(outside, "same", "decided\n", 0644);
			{
				char t[256];
				(void)snprintf(t, sizeof(t), "%s/same", outside);
				put_link(tree, "a.txt", t);
			}
			break;
		default:
			put(tree, "a.txt", "decided\nand more\n", 0644);
			break;
		}
		write_here(&p, &o);
		assert_stopped(&o, 0, "a.txt", "result-mismatch");
		assert_file(checkout, "a.txt", "a\n", 0644);
		outcome_release(&o);
		apply_plan_release(&p);
		put(tree, "a.txt", "decided\n", 0644);
	}
	/* a creation whose result does not match makes no directory for it */
	put(tree, "newdir/x", "x\n", 0644);
	order_init(&p);
	order_add(&p, "newdir/x");
	put(tree, "newdir/x", "y\n", 0644);
	write_here(&p, &o);
	assert_stopped(&o, 0, "newdir/x", "result-mismatch");
	assert_absent(checkout, "newdir");
	outcome_release(&o);
	apply_plan_release(&p);
	assert_no_temp(checkout);
}

/* A delete finds a directory where the file was: refused, the directory and what is in it stay. */
static void test_delete_directory(void **state)
{
	struct apply_plan p;
	struct outcome o;
	char a[256];

	(void)state;
	put(checkout, "x", "x\n", 0644);
	order_init(&p);
	order_add(&p, "x");
	assert_int_equal(p.files[0].op, PATCH_DELETE);
	(void)snprintf(a, sizeof(a), "%s/x", checkout);
	assert_int_equal(unlink(a), 0);
	put(checkout, "x/inner", "i\n", 0644);
	write_here(&p, &o);
	assert_stopped(&o, 0, "x", "checkout-changed");
	assert_non_null(strstr(o.lines[0].error, "a directory"));
	assert_file(checkout, "x/inner", "i\n", 0644);
	outcome_release(&o);
	apply_plan_release(&p);
	/* and a file replaced by an empty directory: not removed either */
	put(checkout, "y", "y\n", 0644);
	order_init(&p);
	order_add(&p, "y");
	(void)snprintf(a, sizeof(a), "%s/y", checkout);
	assert_int_equal(unlink(a), 0);
	assert_int_equal(mkdir(a, 0755), 0);
	write_here(&p, &o);
	assert_stopped(&o, 0, "y", "checkout-changed");
	{
		struct stat st;
		assert_int_equal(lstat(a, &st), 0);
		assert_true(S_ISDIR(st.st_mode));
	}
	outcome_release(&o);
	apply_plan_release(&p);
}

/* A write that fails part way (the file system refuses the bytes): the earlier file stays, the temp file goes. */
static void test_write_fails(void **state)
{
	struct apply_plan p;
	struct outcome o;
	struct rlimit old, small;
	char *big = malloc(4097);

	(void)state;
	assert_non_null(big);
	memset(big, 'x', 4096);
	big[4096] = '\0';
	put(checkout, "a.txt", "a\n", 0644);
	put(tree, "a.txt", big, 0644);
	put(tree, "0.txt", "zero\n", 0644);
	order_init(&p);
	order_add(&p, "0.txt");
	order_add(&p, "a.txt");
	/* files past 1 KiB cannot be written by this process: EFBIG (SIGXFSZ ignored) */
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	small = (struct rlimit){ .rlim_cur = 1024, .rlim_max = old.rlim_max };
	assert_true(signal(SIGXFSZ, SIG_IGN) != SIG_ERR);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
	write_here(&p, &o);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	assert_stopped(&o, 1, "a.txt", "write-failed");
	assert_written(&o, 0, "0.txt");
	assert_file(checkout, "0.txt", "zero\n", 0644);
	assert_file(checkout, "a.txt", "a\n", 0644);
	assert_no_temp(checkout);
	outcome_release(&o);
	apply_plan_release(&p);
	free(big);
}

/* ---- through the child and the runner ---- */

static const char *host_exe(void)
{
	const char *exe = getenv("TKBOX_HOST");

	if (!exe) {
		print_message("TKBOX_HOST unset (a sanitizer build): the child is not run\n");
		skip();
	}
	if (access(exe, X_OK) < 0) {
		print_error("TKBOX_HOST must name the tkbox-host binary (meson sets it)\n");
		fail();
	}
	return exe;
}

/* Run the child with the order (child_env may be NULL); lines until it ends; its wait status. */
static int write_child(struct apply_plan *p, char *const *child_env, struct outcome *o, int *ret_status)
{
	struct apply_writer *w = NULL;
	char diag[512] = "";
	int r;

	*o = (struct outcome){ 0 };
	r = apply_write_start(host_exe(), p, child_env, &w, diag, sizeof(diag));
	if (r < 0) {
		print_error("start: %s\n", diag);
	}
	assert_int_equal(r, 0);
	for (;;) {
		struct pollfd pf = { .fd = apply_write_fd(w), .events = POLLIN };
		r = apply_write_read(w, &o->lines[o->n], diag, sizeof(diag));
		if (r == 0) {
			assert_true(poll(&pf, 1, 60000) >= 0);
			continue;
		}
		if (r < 0) {
			break;
		}
		o->n++;
		assert_true(o->n < 64);
	}
	assert_int_equal(apply_write_end(w, ret_status), 0);
	return r;
}

/*
 * A failure part way (the third file changed in the checkout): the files
 * before it are written and reported, exactly them; the rest is not touched.
 * Through the confined child.
 */
static void test_partway_child(void **state)
{
	struct apply_plan p;
	struct outcome o;
	int status = 0;

	(void)state;
	(void)host_exe(); /* skips before anything is allocated */
	put(checkout, "1.txt", "1\n", 0644);
	put(checkout, "3.txt", "3\n", 0644);
	put(checkout, "4.txt", "4\n", 0644);
	put(tree, "1.txt", "one\n", 0644);
	put(tree, "2/two.txt", "two\n", 0755);
	put(tree, "3.txt", "three\n", 0644);
	put(tree, "4.txt", "four\n", 0644);
	order_init(&p);
	order_add(&p, "1.txt");
	order_add(&p, "2/two.txt");
	order_add(&p, "3.txt");
	order_add(&p, "4.txt");
	put(checkout, "3.txt", "3, edited\n", 0644);
	assert_int_equal(write_child(&p, NULL, &o, &status), -EPIPE);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 1);
	o.r = 1;
	assert_stopped(&o, 2, "3.txt", "checkout-changed");
	assert_written(&o, 0, "1.txt");
	assert_written(&o, 1, "2/two.txt");
	assert_file(checkout, "1.txt", "one\n", 0644);
	assert_file(checkout, "2/two.txt", "two\n", 0755);
	assert_file(checkout, "3.txt", "3, edited\n", 0644);
	assert_file(checkout, "4.txt", "4\n", 0644);
	assert_no_temp(checkout);
	outcome_release(&o);

	/* the same order once the checkout is back: all written, done 4 */
	put(checkout, "3.txt", "3\n", 0644);
	for (size_t i = 0; i < 2; i++) {
		p.files[i].pre_type = APPLY_PRE_FILE;
		p.files[i].op = PATCH_MODIFY;
		p.files[i].pre_mode = p.files[i].mode;
		memcpy(p.files[i].pre_sha256, p.files[i].sha256, 65);
	}
	assert_int_equal(write_child(&p, NULL, &o, &status), -EPIPE);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(o.n, 5);
	assert_int_equal(o.lines[4].kind, APPLY_LINE_DONE);
	assert_int_equal(o.lines[4].done, 4);
	assert_file(checkout, "3.txt", "three\n", 0644);
	assert_file(checkout, "4.txt", "four\n", 0644);
	outcome_release(&o);
	apply_plan_release(&p);
}

/* The test hook: stopped right after its first written line; killed there, only that file is written. */
static void test_stop_after(void **state)
{
	struct apply_plan p;
	struct apply_writer *w = NULL;
	struct apply_line l = { 0 };
	char *env[] = { "HOME=/nonexistent", APPLY_WRITE_STOP_ENV "=1", NULL };
	char diag[256] = "";
	int r, status = 0;

	(void)state;
	(void)host_exe(); /* skips before anything is allocated */
	put(tree, "1.txt", "one\n", 0644);
	put(tree, "2.txt", "two\n", 0644);
	order_init(&p);
	order_add(&p, "1.txt");
	order_add(&p, "2.txt");
	assert_int_equal(apply_write_start(host_exe(), &p, env, &w, diag, sizeof(diag)), 0);
	for (;;) {
		struct pollfd pf = { .fd = apply_write_fd(w), .events = POLLIN };
		r = apply_write_read(w, &l, diag, sizeof(diag));
		if (r != 0) {
			break;
		}
		assert_true(poll(&pf, 1, 60000) >= 0);
	}
	assert_int_equal(r, 1);
	assert_int_equal(l.kind, APPLY_LINE_WRITTEN);
	assert_string_equal(l.path, "1.txt");
	apply_line_release(&l);
	assert_int_equal(waitpid(apply_write_pid(w), &status, WUNTRACED), apply_write_pid(w));
	assert_true(WIFSTOPPED(status));
	assert_int_equal(kill(apply_write_pid(w), SIGKILL), 0);
	/* its stdout closes when it dies */
	while ((r = apply_write_read(w, &l, diag, sizeof(diag))) == 0) {
		struct pollfd pf = { .fd = apply_write_fd(w), .events = POLLIN };
		assert_true(poll(&pf, 1, 60000) >= 0);
	}
	assert_int_equal(r, -EPIPE);
	assert_int_equal(apply_write_end(w, &status), 0);
	assert_true(WIFSIGNALED(status));
	assert_file(checkout, "1.txt", "one\n", 0644);
	assert_absent(checkout, "2.txt");
	assert_no_temp(checkout);
	apply_plan_release(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_plain, fresh),
		cmocka_unit_test_setup(test_symlink_parent, fresh),
		cmocka_unit_test_setup(test_pre_changed, fresh),
		cmocka_unit_test_setup(test_result_tampered, fresh),
		cmocka_unit_test_setup(test_delete_directory, fresh),
		cmocka_unit_test_setup(test_write_fails, fresh),
		cmocka_unit_test_setup(test_partway_child, fresh),
		cmocka_unit_test_setup(test_stop_after, fresh),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
