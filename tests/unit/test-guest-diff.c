/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The guest's patch producer (src/guest/diff.c) on real overlay layers made
 * in temporary directories (as root: whiteouts are 0:0 devices, opaque
 * directories carry trusted.overlay.opaque). Each patch must be accepted by
 * the strict parser (src/patch/patch.h), and git apply of it onto a copy of
 * the lower layer must give exactly the merged view: the kernel's own
 * overlay of the same layers where it can be mounted, else the view the
 * case states. Random trees (seeded) do the same ~100 times.
 */
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cmocka.h>

#include "guest/diff.h"
#include "io.h"
#include "patch/patch.h"
#include "vmm/agent-proto.h"

struct fx {
	char root[64];
	char lower[96], upper[96], work[96], merged[96], apply[96];
	struct guest_diff d;
	struct buf patch;
	char diag[512];
};

static void sh(const char *fmt, ...) _printf_(1, 2);
static void sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	assert_int_equal(system(cmd), 0);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	memcpy(f->root, "/tmp/tk-gdiff-XXXXXX", 21);
	assert_non_null(mkdtemp(f->root));
	(void)snprintf(f->lower, sizeof(f->lower), "%s/lower", f->root);
	(void)snprintf(f->upper, sizeof(f->upper), "%s/upper", f->root);
	(void)snprintf(f->work, sizeof(f->work), "%s/work", f->root);
	(void)snprintf(f->merged, sizeof(f->merged), "%s/merged", f->root);
	(void)snprintf(f->apply, sizeof(f->apply), "%s/apply", f->root);
	sh("mkdir -p %s %s %s %s %s/home", f->lower, f->upper, f->work, f->merged, f->root);
	assert_int_equal(buf_init(&f->patch, PATCH_MAX_BYTES, 0), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	(void)umount2(f->merged, MNT_DETACH);
	guest_diff_release(&f->d);
	buf_release(&f->patch);
	sh("rm -rf %s", f->root);
	free(f);
	return 0;
}

/* ---- building layers ---- */

static void put(const char *dir, const char *path, const void *p, size_t n, mode_t mode)
{
	char full[512];
	int fd;

	(void)snprintf(full, sizeof(full), "%s/%s", dir, path);
	(void)unlink(full);
	fd = open(full, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	assert_true(fd >= 0);
	assert_int_equal(io_write_all(fd, p, n), 0);
	assert_int_equal(fchmod(fd, mode), 0);
	(void)close(fd);
}

static void puts_(const char *dir, const char *path, const char *s, mode_t mode)
{
	put(dir, path, s, strlen(s), mode);
}

static void mkd(const char *dir, const char *path)
{
	char full[512];

	(void)snprintf(full, sizeof(full), "%s/%s", dir, path);
	assert_int_equal(mkdir(full, 0755), 0);
}

static void lnk(const char *dir, const char *path, const char *target)
{
	char full[512];

	(void)snprintf(full, sizeof(full), "%s/%s", dir, path);
	(void)unlink(full);
	assert_int_equal(symlink(target, full), 0);
}

static void whiteout(const char *dir, const char *path)
{
	char full[512];

	(void)snprintf(full, sizeof(full), "%s/%s", dir, path);
	assert_int_equal(mknod(full, S_IFCHR | 0600, makedev(0, 0)), 0);
}

static void opaque(const char *dir, const char *path)
{
	char full[512];

	(void)snprintf(full, sizeof(full), "%s/%s", dir, path);
	assert_int_equal(setxattr(full, "trusted.overlay.opaque", "y", 1, 0), 0);
}

/* ---- running the producer and checking its patch ---- */

static int produce(struct fx *f)
{
	int lo = open(f->lower, O_PATH | O_DIRECTORY | O_CLOEXEC),
	    up = open(f->upper, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int r;

	assert_true(lo >= 0 && up >= 0);
	guest_diff_release(&f->d);
	buf_reset(&f->patch);
	r = guest_diff_make(lo, up, &f->d, f->diag, sizeof(f->diag));
	if (r >= 0) {
		assert_int_equal(guest_diff_concat(&f->d, &f->patch), 0);
	}
	(void)close(lo);
	(void)close(up);
	return r;
}

static void parse_ok(struct fx *f)
{
	struct patch p;
	char diag[512] = "";
	int r = patch_parse(buf_ptr(&f->patch), buf_len(&f->patch), &p, diag, sizeof(diag));

	if (r < 0) {
		fprintf(stderr, "patch_parse: %s\n--- patch:\n%.*s\n", diag, (int)MIN(buf_len(&f->patch), 4000),
			(const char *)buf_ptr(&f->patch));
	}
	assert_int_equal(r, 0);
	assert_int_equal(p.n_files, f->d.n_sec);
	patch_release(&p);
}

/* git apply of the patch onto a copy of lower, in an empty repository, with no config of the host's. */
static void git_apply(struct fx *f)
{
	char pf[128];

	(void)snprintf(pf, sizeof(pf), "%s/patch.diff", f->root);
	(void)unlink(pf);
	{
		int fd = open(pf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		assert_true(fd >= 0);
		assert_int_equal(io_write_all(fd, buf_ptr(&f->patch), buf_len(&f->patch)), 0);
		(void)close(fd);
	}
	sh("rm -rf %s && cp -a %s %s && cd %s && git init -q . && { [ ! -s %s ] || git apply --whitespace=nowarn %s; }",
	   f->apply, f->lower, f->apply, f->apply, pf, pf);
	sh("rm -rf %s/.git", f->apply);
}

/* Every non-directory entry under dir (git tracks no empty directory): "path type mode sha" lines, sorted. */
static void listing(const char *dir, const char *skip, char *out, size_t n)
{
	char cmd[1024];
	FILE *p;
	size_t len;

	(void)snprintf(cmd, sizeof(cmd),
		       "cd %s && find . ! -type d %s -printf '%%p %%y %%M ' -exec sh -c "
		       "'if [ -L \"$1\" ]; then readlink \"$1\"; else sha1sum < \"$1\"; fi' _ {} \\; | "
		       "sed 's/ [-a-z][-a-z][-a-z]\\([-a-zA-Z]\\)[^ ]* / \\1 /' | LC_ALL=C sort",
		       dir, skip ? skip : "");
	p = popen(cmd, "r");
	assert_non_null(p);
	len = fread(out, 1, n - 1, p);
	out[len] = '\0';
	assert_int_equal(pclose(p), 0);
	assert_true(len < n - 1);
}

static bool mount_merged(struct fx *f)
{
	char opts[512];

	(void)snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=off,metacopy=off,index=off",
		       f->lower, f->upper, f->work);
	return mount("overlay", f->merged, "overlay", 0, opts) == 0;
}

/* The applied tree equals the kernel's merged view (left-out paths excluded by skip, a find expression). */
static void check_merged(struct fx *f, const char *skip)
{
	static char want[1 << 20], got[1 << 20];

	git_apply(f);
	if (!mount_merged(f)) {
		skip();
	}
	listing(f->merged, skip, want, sizeof(want));
	(void)umount2(f->merged, MNT_DETACH);
	listing(f->apply, skip, got, sizeof(got));
	if (strcmp(want, got) != 0) {
		fprintf(stderr, "merged:\n%s\napplied:\n%s\npatch:\n%.*s\n", want, got,
			(int)MIN(buf_len(&f->patch), 8000), (const char *)buf_ptr(&f->patch));
	}
	assert_string_equal(want, got);
}

static bool patch_has(struct fx *f, const char *s)
{
	return memmem(buf_ptr(&f->patch), buf_len(&f->patch), s, strlen(s)) != NULL;
}

static bool notice_has(struct fx *f, const char *path, const char *why_part)
{
	for (size_t i = 0; i < f->d.n_notices; i++) {
		if (strcmp(f->d.notices[i].path, path) == 0 && strstr(f->d.notices[i].why, why_part)) {
			return true;
		}
	}
	return false;
}

/* ---- cases ---- */

/* Modify, create, delete, chmod, symlinks, no newline at the end, a new directory: byte for byte git's own diff. */
static void test_basic_equals_git(void **state)
{
	struct fx *f = *state;
	char cmd[2048], *want = NULL;
	size_t wn = 0;

	puts_(f->lower, "a.txt", "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n", 0644);
	puts_(f->lower, "gone.txt", "bye\n", 0644);
	puts_(f->lower, "run.sh", "#!/bin/sh\necho hi\n", 0644);
	lnk(f->lower, "l", "a.txt");
	mkd(f->lower, "d");
	puts_(f->lower, "d/x", "x\n", 0644);
	puts_(f->upper, "a.txt", "one\ntwo\nTHREE\nfour\nfive\nsix\nseven\neight\nnine\nten\neleven", 0644);
	whiteout(f->upper, "gone.txt");
	puts_(f->upper, "run.sh", "#!/bin/sh\necho hi\n", 0755);
	lnk(f->upper, "l", "d/x");
	lnk(f->upper, "new-link", "nowhere");
	mkd(f->upper, "n");
	mkd(f->upper, "n/m");
	puts_(f->upper, "n/m/new.c", "int main(void)\n{\n\treturn 0;\n}\n", 0644);
	put(f->upper, "empty", "", 0, 0644);
	/* Hunks 6 lines apart share one, 7 apart do not; the funcname is the line above, trailing blanks cut. */
	{
		char lo[2048], up[2048];
		size_t kl = 0, ku = 0;
		kl += (size_t)snprintf(lo, sizeof(lo), "int f(void)  \n{\n");
		ku += (size_t)snprintf(up, sizeof(up), "int f(void)  \n{\n");
		for (int i = 3; i <= 40; i++) {
			kl += (size_t)snprintf(lo + kl, sizeof(lo) - kl, "\tx%d;\n", i);
			ku += (size_t)snprintf(up + ku, sizeof(up) - ku,
					       i == 15 || i == 22 || i == 30 ? "\ty%d;\n" : "\tx%d;\n", i);
		}
		put(f->lower, "f.c", lo, kl, 0644);
		put(f->upper, "f.c", up, ku, 0644);
	}
	assert_int_equal(produce(f), 0);
	assert_true(patch_has(f, "@@ -12,14 +12,14 @@ int f(void)\n"));
	assert_true(patch_has(f, "@@ -27,7 +27,7 @@ int f(void)\n"));
	assert_int_equal(f->d.n_sec, 8);
	parse_ok(f);
	check_merged(f, NULL);
	/* git's diff of the same two trees. */
	(void)snprintf(
		cmd, sizeof(cmd),
		"cd %s && rm -rf g && cp -a lower g && cd g && git init -q . && git add -A && "
		"git -c user.name=t -c user.email=t@t commit -qm l && rm -rf ./* && cp -a ../merged/. . 2>/dev/null; "
		"true",
		f->root);
	assert_true(mount_merged(f));
	sh("%s", cmd);
	(void)umount2(f->merged, MNT_DETACH);
	sh("cd %s/g && git add -A && git diff --cached --binary --full-index --no-renames > ../git.diff", f->root);
	(void)snprintf(cmd, sizeof(cmd), "%s/git.diff", f->root);
	assert_int_equal(io_read_file(AT_FDCWD, cmd, PATCH_MAX_BYTES, 0, &want, &wn), 0);
	if (wn != buf_len(&f->patch) || memcmp(want, buf_ptr(&f->patch), wn) != 0) {
		fprintf(stderr, "git:\n%s\nours:\n%.*s\n", want, (int)buf_len(&f->patch),
			(const char *)buf_ptr(&f->patch));
	}
	assert_int_equal(wn, buf_len(&f->patch));
	assert_memory_equal(want, buf_ptr(&f->patch), wn);
	free(want);
}

/* Binary files: created, changed, deleted; a full index line and a literal hunk git applies. */
static void test_binary(void **state)
{
	struct fx *f = *state;
	uint8_t blob[3000];

	for (size_t i = 0; i < sizeof(blob); i++) {
		blob[i] = (uint8_t)(i * 7);
	}
	put(f->lower, "b.bin", blob, sizeof(blob), 0644);
	put(f->lower, "old.bin", blob, 100, 0644);
	blob[5] ^= 0xff;
	put(f->upper, "b.bin", blob, sizeof(blob), 0755);
	put(f->upper, "new.bin", blob, 1, 0644);
	whiteout(f->upper, "old.bin");
	assert_int_equal(produce(f), 0);
	assert_true(patch_has(f, "GIT binary patch\nliteral 3000\n"));
	assert_true(patch_has(f, "deleted file mode 100644\nindex "));
	parse_ok(f);
	check_merged(f, NULL);
}

/* A whiteout over a directory deletes every file under it; an opaque directory hides the lower one. */
static void test_whiteout_dir_and_opaque(void **state)
{
	struct fx *f = *state;

	mkd(f->lower, "w");
	mkd(f->lower, "w/sub");
	puts_(f->lower, "w/sub/a", "a\n", 0644);
	puts_(f->lower, "w/b", "b\n", 0644);
	mkd(f->lower, "o");
	puts_(f->lower, "o/keep", "old\n", 0644);
	puts_(f->lower, "o/drop", "drop\n", 0644);
	puts_(f->lower, "z", "z\n", 0644);
	puts_(f->lower, "untouched", "u\n", 0644);
	/* What the kernel marks a directory holding xattr whiteouts with: not opaque. */
	assert_int_equal(setxattr(f->upper, "trusted.overlay.opaque", "x", 1, 0), 0);
	whiteout(f->upper, "w");
	mkd(f->upper, "o");
	opaque(f->upper, "o");
	puts_(f->upper, "o/keep", "new\n", 0644);
	/* The xattr form of a whiteout. */
	put(f->upper, "z", "", 0, 0644);
	{
		char full[256];
		(void)snprintf(full, sizeof(full), "%s/z", f->upper);
		assert_int_equal(setxattr(full, "trusted.overlay.whiteout", "y", 1, 0), 0);
	}
	assert_int_equal(produce(f), 0);
	assert_int_equal(f->d.n_sec, 5);
	assert_true(patch_has(f, "diff --git a/o/drop b/o/drop\ndeleted file mode"));
	assert_true(patch_has(f, "diff --git a/w/sub/a b/w/sub/a\ndeleted file mode"));
	assert_true(patch_has(f, "diff --git a/z b/z\ndeleted file mode"));
	parse_ok(f);
	check_merged(f, NULL);
}

/* Names git quotes, and a name with a space (TAB after it on ---/+++). */
static void test_quoting(void **state)
{
	struct fx *f = *state;

	puts_(f->upper, "sp ace", "x\n", 0644);
	puts_(f->upper, "q\"uote", "x\n", 0644);
	puts_(f->upper, "t\tab", "x\n", 0644);
	puts_(f->upper, "caf\xc3\xa9", "x\n", 0644);
	assert_int_equal(produce(f), 0);
	assert_true(patch_has(f, "diff --git a/sp ace b/sp ace\n"));
	assert_true(patch_has(f, "+++ b/sp ace\t\n"));
	assert_true(patch_has(f, "diff --git \"a/q\\\"uote\" \"b/q\\\"uote\"\n"));
	assert_true(patch_has(f, "\"b/t\\tab\"\n"));
	assert_true(patch_has(f, "\"a/caf\\303\\251\""));
	parse_ok(f);
	check_merged(f, NULL);
}

/* Left out with notices: .git (any case), a fifo, a type change, a file over PATCH_MAX_FILE_BYTES. */
static void test_left_out(void **state)
{
	struct fx *f = *state;
	char full[256];
	int fd;

	puts_(f->lower, "t", "file\n", 0644);
	mkd(f->upper, ".git");
	puts_(f->upper, ".git/config", "[core]\n", 0644);
	mkd(f->upper, "sub");
	puts_(f->upper, "sub/.GiT", "x\n", 0644);
	(void)snprintf(full, sizeof(full), "%s/fifo", f->upper);
	assert_int_equal(mkfifo(full, 0644), 0);
	lnk(f->upper, "t", "elsewhere");
	(void)snprintf(full, sizeof(full), "%s/big", f->upper);
	fd = open(full, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)PATCH_MAX_FILE_BYTES + 1), 0);
	(void)close(fd);
	puts_(f->upper, "kept", "kept\n", 0644);
	assert_int_equal(produce(f), 0);
	assert_int_equal(f->d.n_sec, 1);
	assert_true(notice_has(f, ".git", ".git segment"));
	assert_true(notice_has(f, "sub/.GiT", ".git segment"));
	assert_true(notice_has(f, "fifo", "special file"));
	assert_true(notice_has(f, "t", "type change"));
	assert_true(notice_has(f, "big", "PATCH_MAX_FILE_BYTES"));
	parse_ok(f);
}

/* One past PATCH_MAX_FILES: the whole diff fails and says which limit. */
static void test_max_files(void **state)
{
	struct fx *f = *state;

	for (int i = 0; i <= PATCH_MAX_FILES; i++) {
		char name[32];
		(void)snprintf(name, sizeof(name), "f%05d", i);
		puts_(f->upper, name, "x\n", 0644);
	}
	assert_int_equal(produce(f), -E2BIG);
	assert_non_null(strstr(f->diag, "PATCH_MAX_FILES"));
	/* Exactly at the cap it is made. */
	sh("rm %s/f00000", f->upper);
	assert_int_equal(produce(f), 0);
	assert_int_equal(f->d.n_sec, PATCH_MAX_FILES);
}

/* Past PATCH_MAX_BYTES (incompressible files): the whole diff fails and says which limit. */
static void test_max_bytes(void **state)
{
	struct fx *f = *state;

	for (int i = 0; i < 3; i++) {
		sh("head -c %zu /dev/urandom > %s/r%d", (size_t)12 << 20, f->upper, i);
	}
	assert_int_equal(produce(f), -E2BIG);
	assert_non_null(strstr(f->diag, "PATCH_MAX_BYTES"));
}

/* Many scattered edits: past the Myers cost cap the middle is one replacement, still exact for git. */
static void test_myers_cap(void **state)
{
	struct fx *f = *state;
	struct buf a, b;

	assert_int_equal(buf_init(&a, 1 << 24, 0), 0);
	assert_int_equal(buf_init(&b, 1 << 24, 0), 0);
	for (int i = 0; i < 5000; i++) {
		assert_int_equal(buf_putf(&a, "line %d\n", i), 0);
		assert_int_equal(buf_putf(&b, i % 3 ? "line %d\n" : "LINE %d\n", i), 0);
	}
	put(f->lower, "big.txt", buf_ptr(&a), buf_len(&a), 0644);
	put(f->upper, "big.txt", buf_ptr(&b), buf_len(&b), 0644);
	put(f->lower, "few.txt", buf_ptr(&a), buf_len(&a), 0644);
	assert_int_equal(buf_putf(&a, "tail\n"), 0);
	put(f->upper, "few.txt", buf_ptr(&a), buf_len(&a), 0644);
	buf_release(&a);
	buf_release(&b);
	assert_int_equal(produce(f), 0);
	assert_true(patch_has(f, "@@ -4998,3 +4998,4 @@ line 4996\n"));
	parse_ok(f);
	check_merged(f, NULL);
}

/* ---- random trees ---- */

static const char *const rnd_names[] = { "a", "b", "c.txt", "d d", "e.bin", "f-g" };

static void rnd_content(unsigned *seed, char *out, size_t *n)
{
	size_t lines = (size_t)(rand_r(seed) % 12), k = 0;
	bool bin = rand_r(seed) % 6 == 0;

	for (size_t i = 0; i < lines; i++) {
		k += (size_t)snprintf(out + k, 64, "%s %d\n", rand_r(seed) % 3 ? "same" : "word", rand_r(seed) % 5);
	}
	if (rand_r(seed) % 4 == 0 && k > 0) {
		k--; /* no newline at the end */
	}
	if (bin) {
		out[k++] = '\0';
		out[k++] = (char)(rand_r(seed) & 0xff);
	}
	*n = k;
}

static void rnd_lower(unsigned *seed, const char *dir, int depth)
{
	for (size_t i = 0; i < ARRAY_SIZE(rnd_names); i++) {
		char path[512], data[1024];
		size_t n;
		int what = rand_r(seed) % 6;
		(void)snprintf(path, sizeof(path), "%s/%s", dir, rnd_names[i]);
		if (what <= 1) {
			continue;
		}
		if (what == 2 && depth < 3) {
			assert_int_equal(mkdir(path, 0755), 0);
			rnd_lower(seed, path, depth + 1);
		} else if (what == 3) {
			assert_int_equal(symlink(rnd_names[rand_r(seed) % ARRAY_SIZE(rnd_names)], path), 0);
		} else {
			rnd_content(seed, data, &n);
			put("", path, data, n, rand_r(seed) % 3 ? 0644 : 0755);
		}
	}
}

/* An upper layer over the lower dir lo (NULL: none at this level): changes, whiteouts, opaque and new dirs. */
static void rnd_upper(unsigned *seed, const char *lo, const char *up, int depth)
{
	for (size_t i = 0; i < ARRAY_SIZE(rnd_names); i++) {
		char lpath[512], upath[512], data[1024];
		struct stat st;
		size_t n;
		int what = rand_r(seed) % 8;
		bool in_lower;
		(void)snprintf(lpath, sizeof(lpath), "%s/%s", lo ? lo : "/nonexistent", rnd_names[i]);
		(void)snprintf(upath, sizeof(upath), "%s/%s", up, rnd_names[i]);
		in_lower = lo && lstat(lpath, &st) == 0;
		if (what <= 2) {
			continue; /* as in lower */
		}
		if (what == 3 && in_lower) {
			assert_int_equal(mknod(upath, S_IFCHR | 0600, makedev(0, 0)), 0);
		} else if (what == 4 && depth < 3) {
			assert_int_equal(mkdir(upath, 0755), 0);
			if (in_lower && S_ISDIR(st.st_mode) && rand_r(seed) % 3) {
				rnd_upper(seed, lpath, upath, depth + 1);
			} else {
				if (in_lower && S_ISDIR(st.st_mode)) {
					assert_int_equal(setxattr(upath, "trusted.overlay.opaque", "y", 1, 0), 0);
				}
				rnd_upper(seed, NULL, upath, depth + 1);
			}
		} else if (what == 5 && !(in_lower && S_ISREG(st.st_mode))) {
			assert_int_equal(symlink(rnd_names[rand_r(seed) % ARRAY_SIZE(rnd_names)], upath), 0);
		} else if (!(in_lower && S_ISLNK(st.st_mode))) {
			rnd_content(seed, data, &n);
			put("", upath, data, n, rand_r(seed) % 3 ? 0644 : 0755);
		}
	}
}

static void test_random_trees(void **state)
{
	struct fx *f = *state;

	unsigned checked = 0;

	for (unsigned s = 1; s <= 100; s++) {
		unsigned seed = s;
		sh("rm -rf %s/lower %s/upper %s/work && mkdir %s/lower %s/upper %s/work", f->root, f->root, f->root,
		   f->root, f->root, f->root);
		rnd_lower(&seed, f->lower, 0);
		rnd_upper(&seed, f->lower, f->upper, 0);
		assert_int_equal(produce(f), 0);
		parse_ok(f);
		/* Type changes (a file over a lower dir and the like are fine; file <-> symlink is left out). */
		for (size_t i = 0; i < f->d.n_notices; i++) {
			assert_non_null(strstr(f->d.notices[i].why, "type change"));
		}
		if (f->d.n_notices > 0) {
			continue;
		}
		check_merged(f, NULL);
		checked++;
	}
	/* Most trees have no type change: they are compared with the kernel's merged view. */
	fprintf(stderr, "random trees compared with the merged view: %u of 100\n", checked);
	assert_true(checked >= 50);
}

/* The frames the agent forwards: DIFF_DATA chunks that add up to DIFF_END's bytes, which decode. */
static void test_frames(void **state)
{
	struct fx *f = *state;
	char *mem = NULL;
	size_t n = 0, off = 0, data = 0;
	int lo, up, fd;
	bool end = false;
	char path[128];

	for (int i = 0; i < 50; i++) {
		char name[32];
		(void)snprintf(name, sizeof(name), "r%d", i);
		sh("head -c 20000 /dev/urandom > %s/%s", f->upper, name);
	}
	mkd(f->upper, ".git");
	(void)snprintf(path, sizeof(path), "%s/frames", f->root);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	lo = open(f->lower, O_PATH | O_DIRECTORY | O_CLOEXEC);
	up = open(f->upper, O_PATH | O_DIRECTORY | O_CLOEXEC);
	assert_int_equal(guest_diff_write_frames(lo, up, 7, fd), 0);
	(void)close(fd);
	(void)close(lo);
	(void)close(up);
	assert_int_equal(io_read_file(AT_FDCWD, path, PATCH_MAX_BYTES * 2, 0, &mem, &n), 0);
	while (off < n) {
		struct agent_msg m;
		uint8_t type = (uint8_t)mem[off];
		size_t len = ((size_t)(uint8_t)mem[off + 1] << 24) | ((size_t)(uint8_t)mem[off + 2] << 16) |
			     ((size_t)(uint8_t)mem[off + 3] << 8) | (uint8_t)mem[off + 4];
		assert_false(end);
		assert_int_equal(agent_msg_decode(type, (uint8_t *)mem + off + 5, len, &m), 0);
		assert_int_equal(m.id, 7);
		if (type == AGENT_MSG_DIFF_DATA) {
			data += m.data_len;
		} else {
			assert_int_equal(type, AGENT_MSG_DIFF_END);
			assert_int_equal(m.bytes, (int64_t)data);
			assert_int_equal(m.n_notices, 1);
			assert_string_equal(m.notices[0], ".git");
			end = true;
		}
		agent_msg_release(&m);
		off += 5 + len;
	}
	assert_true(end);
	assert_true(data > AGENT_MAX_DATA);
	free(mem);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_basic_equals_git, setup, teardown),
		cmocka_unit_test_setup_teardown(test_binary, setup, teardown),
		cmocka_unit_test_setup_teardown(test_whiteout_dir_and_opaque, setup, teardown),
		cmocka_unit_test_setup_teardown(test_quoting, setup, teardown),
		cmocka_unit_test_setup_teardown(test_left_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_max_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_max_bytes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_myers_cap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_random_trees, setup, teardown),
		cmocka_unit_test_setup_teardown(test_frames, setup, teardown),
	};
	char home[] = "/tmp/tk-gdiff-home-XXXXXX";

	if (geteuid() != 0) {
		/* Whiteouts (mknod 0:0), trusted.* xattrs and the reference overlay mount need root. */
		fprintf(stderr, "test-guest-diff: needs root (whiteouts, trusted xattrs, overlay mounts); skipped\n");
		return 77;
	}
	/* git with no config of the host's or the user's. */
	assert_non_null(mkdtemp(home));
	setenv("HOME", home, 1);
	setenv("XDG_CONFIG_HOME", home, 1);
	setenv("GIT_CONFIG_NOSYSTEM", "1", 1);
	setenv("GIT_CONFIG_GLOBAL", "/dev/null", 1);
	setenv("LC_ALL", "C", 1);
	{
		int r = cmocka_run_group_tests(tests, NULL, NULL);
		(void)rmdir(home);
		return r;
	}
}
