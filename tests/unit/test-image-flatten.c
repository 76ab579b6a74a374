/* SPDX-License-Identifier: Apache-2.0 */
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "banned.h"
#include "crypto.h"
#include "image/flatten.h"

/* ---- a tiny tar writer over libarchive, for building layers in memory ---- */

struct tw {
	struct archive *a;
	uint8_t *mem;
	size_t cap;
	size_t used;
};

static void tw_open(struct tw *t, const char *filter)
{
	t->cap = 4 << 20;
	t->mem = malloc(t->cap);
	assert_non_null(t->mem);
	t->a = archive_write_new();
	assert_int_equal(archive_write_set_format_pax_restricted(t->a), ARCHIVE_OK);
	if (filter && strcmp(filter, "gzip") == 0) {
		assert_int_equal(archive_write_add_filter_gzip(t->a), ARCHIVE_OK);
	} else if (filter && strcmp(filter, "zstd") == 0) {
		assert_int_equal(archive_write_add_filter_zstd(t->a), ARCHIVE_OK);
	}
	assert_int_equal(archive_write_open_memory(t->a, t->mem, t->cap, &t->used), ARCHIVE_OK);
}

static void tw_add(struct tw *t, const char *name, mode_t type, mode_t perm, const char *data, const char *link,
		   int64_t uid)
{
	struct archive_entry *e = archive_entry_new();
	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, type);
	archive_entry_set_perm(e, perm);
	archive_entry_set_uid(e, uid);
	archive_entry_set_gid(e, uid);
	if (type == AE_IFLNK) {
		archive_entry_set_symlink(e, link);
	}
	if (type == AE_IFREG && link) {
		archive_entry_set_hardlink(e, link);
	}
	archive_entry_set_size(e, data ? (int64_t)strlen(data) : 0);
	assert_int_equal(archive_write_header(t->a, e), ARCHIVE_OK);
	if (data && *data) {
		assert_int_equal(archive_write_data(t->a, data, strlen(data)), (la_ssize_t)strlen(data));
	}
	archive_entry_free(e);
}

#define FILE_(t, n, d) tw_add((t), (n), AE_IFREG, 0644, (d), NULL, 0)
#define DIR_(t, n) tw_add((t), (n), AE_IFDIR, 0755, NULL, NULL, 0)
#define LINK_(t, n, target) tw_add((t), (n), AE_IFLNK, 0777, NULL, (target), 0)
#define HARD_(t, n, target) tw_add((t), (n), AE_IFREG, 0644, NULL, (target), 0)

static void tw_close(struct tw *t)
{
	assert_int_equal(archive_write_close(t->a), ARCHIVE_OK);
	archive_write_free(t->a);
}

/* ---- fixture: a fresh root directory per test ---- */

struct fx {
	char dir[64];
	int rootfd;
	struct flatten *f;
	struct image_diag diag;
};

static int rm_rf(const char *p)
{
	int fd = open("/", O_RDONLY | O_DIRECTORY);
	int r = image_rm_rf_at(fd, p + 1);
	(void)close(fd);
	return r;
}

static int setup(void **state)
{
	struct fx *x = calloc(1, sizeof(*x));
	if (!x) {
		return -1;
	}
	memcpy(x->dir, "/tmp/test-flatten-XXXXXX", 25);
	if (!mkdtemp(x->dir)) {
		return -1;
	}
	x->rootfd = open(x->dir, O_RDONLY | O_DIRECTORY);
	if (x->rootfd < 0 || flatten_new(x->rootfd, NULL, &x->f) < 0) {
		return -1;
	}
	*state = x;
	return 0;
}

static int teardown(void **state)
{
	struct fx *x = *state;
	flatten_free(x->f);
	(void)close(x->rootfd);
	(void)rm_rf(x->dir);
	free(x);
	return 0;
}

static int apply(struct fx *x, struct tw *t)
{
	x->diag.msg[0] = '\0';
	return flatten_layer_mem(x->f, t->mem, t->used, NULL, &x->diag);
}

static bool exists(struct fx *x, const char *rel)
{
	struct stat st;
	return fstatat(x->rootfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static void test_basic(void **state)
{
	struct fx *x = *state;
	struct tw t = { 0 };
	struct flatten_meta m;
	struct stat st;
	char buf[64];
	ssize_t n;

	tw_open(&t, "gzip");
	DIR_(&t, "./etc/");
	FILE_(&t, "./etc/passwd", "root:x:0:0\n");
	tw_add(&t, "etc/shadow", AE_IFREG, 0640, "s", NULL, 42);
	tw_add(&t, "usr/bin/su", AE_IFREG, 04755, "x", NULL, 0); /* parents created implicitly */
	LINK_(&t, "etc/link", "/etc/passwd");
	HARD_(&t, "etc/hard", "etc/passwd");
	tw_add(&t, "dev/null", AE_IFCHR, 0666, NULL, NULL, 0);
	tw_add(&t, "fifo", AE_IFIFO, 0644, NULL, NULL, 0);
	tw_close(&t);
	assert_int_equal(apply(x, &t), 0);
	free(t.mem);

	assert_true(exists(x, "etc/passwd"));
	assert_true(flatten_meta_get(x->f, "etc/shadow", &m));
	assert_int_equal(m.uid, 42);
	assert_int_equal(m.mode, S_IFREG | 0640);
	assert_true(flatten_meta_get(x->f, "usr/bin/su", &m));
	assert_int_equal(m.mode, S_IFREG | 04755);
	/* on disk: never setuid */
	assert_int_equal(fstatat(x->rootfd, "usr/bin/su", &st, 0), 0);
	assert_int_equal(st.st_mode & 07000, 0);
	assert_true(flatten_meta_get(x->f, "usr", &m));
	assert_int_equal(m.mode, S_IFDIR | 0755);
	n = readlinkat(x->rootfd, "etc/link", buf, sizeof(buf));
	assert_int_equal(n, 11);
	assert_memory_equal(buf, "/etc/passwd", 11);
	{
		struct stat a, b;
		assert_int_equal(fstatat(x->rootfd, "etc/passwd", &a, 0), 0);
		assert_int_equal(fstatat(x->rootfd, "etc/hard", &b, 0), 0);
		assert_int_equal(a.st_ino, b.st_ino);
	}
	assert_false(exists(x, "dev/null"));
	assert_false(exists(x, "fifo"));
	assert_int_equal(flatten_entries(x->f), 8);
}

static void test_whiteouts(void **state)
{
	struct fx *x = *state;
	struct tw t = { 0 };

	tw_open(&t, "zstd");
	FILE_(&t, "a/keep", "1");
	FILE_(&t, "a/gone", "1");
	FILE_(&t, "b/x/deep", "1");
	FILE_(&t, "o/old1", "1");
	FILE_(&t, "o/sub/old2", "1");
	tw_close(&t);
	assert_int_equal(apply(x, &t), 0);
	free(t.mem);

	tw_open(&t, NULL);
	/* the new file comes BEFORE the opaque marker: it must survive (whiteouts apply to lower layers only) */
	FILE_(&t, "o/new", "2");
	FILE_(&t, "o/.wh..wh..opq", "");
	FILE_(&t, "a/.wh.gone", "");
	FILE_(&t, ".wh.b", "");
	FILE_(&t, "missing/.wh.x", "");
	tw_close(&t);
	assert_int_equal(apply(x, &t), 0);
	free(t.mem);

	assert_true(exists(x, "a/keep"));
	assert_false(exists(x, "a/gone"));
	assert_false(exists(x, "b"));
	assert_false(exists(x, "o/old1"));
	assert_false(exists(x, "o/sub"));
	assert_true(exists(x, "o/new"));
	assert_false(exists(x, "o/.wh..wh..opq"));
	assert_false(exists(x, "a/.wh.gone"));
	assert_false(exists(x, "missing"));
}

static void test_replace(void **state)
{
	struct fx *x = *state;
	struct tw t = { 0 };
	struct stat st;

	tw_open(&t, NULL);
	FILE_(&t, "p", "file");
	DIR_(&t, "d");
	FILE_(&t, "d/f", "1");
	tw_close(&t);
	assert_int_equal(apply(x, &t), 0);
	free(t.mem);
	/* a directory replaces a file, a file replaces a directory */
	tw_open(&t, NULL);
	DIR_(&t, "p");
	FILE_(&t, "p/inner", "1");
	FILE_(&t, "d", "now a file");
	tw_close(&t);
	assert_int_equal(apply(x, &t), 0);
	free(t.mem);
	assert_int_equal(fstatat(x->rootfd, "p", &st, AT_SYMLINK_NOFOLLOW), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(fstatat(x->rootfd, "d", &st, AT_SYMLINK_NOFOLLOW), 0);
	assert_true(S_ISREG(st.st_mode));
}

static void expect_refused(struct fx *x, struct tw *t, int want, const char *words)
{
	int r = apply(x, t);
	free(t->mem);
	assert_int_equal(r, want);
	if (!strstr(x->diag.msg, words)) {
		fail_msg("diag \"%s\" lacks \"%s\"", x->diag.msg, words);
	}
}

static void test_hostile(void **state)
{
	struct fx *x = *state;
	struct tw t = { 0 };

	tw_open(&t, NULL);
	FILE_(&t, "../escape", "x");
	tw_close(&t);
	expect_refused(x, &t, -EINVAL, "escapes the root");

	tw_open(&t, NULL);
	FILE_(&t, "a/../../escape", "x");
	tw_close(&t);
	expect_refused(x, &t, -EINVAL, "escapes the root");

	tw_open(&t, NULL);
	FILE_(&t, "/etc/passwd", "x");
	tw_close(&t);
	expect_refused(x, &t, -EINVAL, "absolute path");

	/* "./" then "/": an absolute name behind a dot, refused like one (it used to land at etc/x) */
	tw_open(&t, NULL);
	FILE_(&t, ".//etc/x", "x");
	tw_close(&t);
	expect_refused(x, &t, -EINVAL, "absolute path");
	tw_open(&t, NULL);
	FILE_(&t, "././/etc/x", "x");
	tw_close(&t);
	expect_refused(x, &t, -EINVAL, "absolute path");
	assert_false(exists(x, "etc/x"));

	/* through a symlink of a lower layer */
	tw_open(&t, NULL);
	LINK_(&t, "lnk", "/tmp");
	tw_close(&t);
	assert_int_equal(apply(x, &t), 0);
	free(t.mem);
	tw_open(&t, NULL);
	FILE_(&t, "lnk/pwned", "x");
	tw_close(&t);
	expect_refused(x, &t, -ELOOP, "symbolic link");
	assert_int_equal(access("/tmp/pwned", F_OK), -1);

	/* a whiteout through a symlink */
	tw_open(&t, NULL);
	FILE_(&t, "lnk/.wh.x", "");
	tw_close(&t);
	expect_refused(x, &t, -ELOOP, "symbolic link");

	/* through a symlink of the same layer */
	tw_open(&t, NULL);
	LINK_(&t, "l2", "..");
	FILE_(&t, "l2/x", "x");
	tw_close(&t);
	expect_refused(x, &t, -ELOOP, "symbolic link");

	/* hardlinks out, to nothing, to a directory */
	tw_open(&t, NULL);
	HARD_(&t, "h", "../../etc/passwd");
	tw_close(&t);
	expect_refused(x, &t, -EINVAL, "escapes the root");
	tw_open(&t, NULL);
	HARD_(&t, "h", "/etc/passwd");
	tw_close(&t);
	expect_refused(x, &t, -EINVAL, "absolute");
	tw_open(&t, NULL);
	DIR_(&t, "dd");
	HARD_(&t, "h", "dd");
	tw_close(&t);
	expect_refused(x, &t, -EINVAL, "directory");
	tw_open(&t, NULL);
	HARD_(&t, "h2", "lnk/passwd");
	tw_close(&t);
	expect_refused(x, &t, -ELOOP, "symbolic link");

	/* control characters: debugfs reads its script by lines */
	tw_open(&t, NULL);
	FILE_(&t, "a\nsif / uid 0", "x");
	tw_close(&t);
	expect_refused(x, &t, -EINVAL, "control character");

	/* an empty symlink target */
	tw_open(&t, NULL);
	tw_add(&t, "empty", AE_IFLNK, 0777, NULL, "", 0);
	tw_close(&t);
	expect_refused(x, &t, -EINVAL, "target");

	/* not an archive at all */
	x->diag.msg[0] = '\0';
	assert_int_equal(flatten_layer_mem(x->f, "garbage garbage garbage garbage", 31, NULL, &x->diag), -EBADMSG);
}

static void test_caps(void **state)
{
	struct fx *x = *state;
	struct flatten_limits lim = { .max_entries = 3, .max_entry_size = 4, .max_total_bytes = 6 };
	struct flatten *f = NULL;
	struct tw t = { 0 };
	struct image_diag d = { .msg = "" };

	flatten_free(x->f);
	assert_int_equal(flatten_new(x->rootfd, &lim, &f), 0);
	x->f = f;
	/* exactly at the caps: 3 entries, a 4-byte file, 6 bytes in all */
	tw_open(&t, NULL);
	FILE_(&t, "a", "1234");
	FILE_(&t, "b", "12");
	DIR_(&t, "c");
	tw_close(&t);
	assert_int_equal(flatten_layer_mem(f, t.mem, t.used, NULL, &d), 0);
	free(t.mem);
	/* one entry more */
	tw_open(&t, NULL);
	DIR_(&t, "d");
	tw_close(&t);
	expect_refused(x, &t, -E2BIG, "too many entries");

	flatten_free(x->f);
	lim.max_entries = 100;
	assert_int_equal(flatten_new(x->rootfd, &lim, &x->f), 0);
	/* one byte past the per-file cap (refused from the header) */
	tw_open(&t, NULL);
	FILE_(&t, "big", "12345");
	tw_close(&t);
	expect_refused(x, &t, -EFBIG, "per-file cap");
	/* one byte past the total */
	tw_open(&t, NULL);
	FILE_(&t, "t1", "1234");
	FILE_(&t, "t2", "123");
	tw_close(&t);
	expect_refused(x, &t, -EFBIG, "total cap");
}

static void diff_id_of(const void *p, size_t n, char ret[IMAGE_DIGEST_LEN + 1])
{
	uint8_t md[SHA256_LEN];
	assert_int_equal(sha256(p, n, md), 0);
	memcpy(ret, "sha256:", 7);
	sha256_digest_hex(md, ret + 7);
}

static void test_diff_id(void **state)
{
	struct fx *x = *state;
	struct tw t = { 0 }, z = { 0 };
	char good[IMAGE_DIGEST_LEN + 1], other[IMAGE_DIGEST_LEN + 1];
	uint8_t *junk;

	tw_open(&t, NULL);
	FILE_(&t, "etc/owner", "victim\n");
	tw_close(&t);
	diff_id_of(t.mem, t.used, good);
	diff_id_of("x", 1, other);
	/* the wrong diff_id: refused in the first pass, before any entry of the layer is written */
	x->diag.msg[0] = '\0';
	assert_int_equal(flatten_layer_mem(x->f, t.mem, t.used, other, &x->diag), -EBADMSG);
	assert_non_null(strstr(x->diag.msg, "rootfs.diff_ids[0]"));
	assert_non_null(strstr(x->diag.msg, good));
	assert_non_null(strstr(x->diag.msg, other));
	assert_false(exists(x, "etc/owner"));
	assert_false(exists(x, "etc"));
	/* the right one: applied, and reported */
	assert_int_equal(flatten_layer_mem(x->f, t.mem, t.used, good, &x->diag), 0);
	assert_true(exists(x, "etc/owner"));
	assert_string_equal(flatten_last_diff_id(x->f), good);
	/* the same tar gzip- or zstd-compressed: the diff_id is of the uncompressed stream */
	for (int i = 0; i < 2; i++) {
		tw_open(&z, i ? "zstd" : "gzip");
		FILE_(&z, "etc/owner", "victim\n");
		tw_close(&z);
		assert_int_equal(flatten_layer_mem(x->f, z.mem, z.used, good, &x->diag), 0);
		free(z.mem);
	}
	/* bytes after the tar's end blocks are part of the stream: they change the digest */
	junk = malloc(t.used + 512);
	assert_non_null(junk);
	memcpy(junk, t.mem, t.used);
	memset(junk + t.used, 'J', 512);
	x->diag.msg[0] = '\0';
	assert_int_equal(flatten_layer_mem(x->f, junk, t.used + 512, good, &x->diag), -EBADMSG);
	assert_non_null(strstr(x->diag.msg, "does not belong"));
	free(junk);
	free(t.mem);
}

static void test_dir_and_table_caps(void **state)
{
	struct fx *x = *state;
	struct flatten_limits lim = FLATTEN_LIMITS_DEFAULT;
	struct tw t = { 0 };

	lim.max_dir_entries = 3;
	flatten_free(x->f);
	assert_int_equal(flatten_new(x->rootfd, &lim, &x->f), 0);
	/* exactly 3 names in d (and d itself is one of the root's) */
	tw_open(&t, NULL);
	DIR_(&t, "d");
	FILE_(&t, "d/a", "1");
	FILE_(&t, "d/b", "1");
	FILE_(&t, "d/c", "1");
	FILE_(&t, "d/c", "2"); /* a replacement is not a new name */
	tw_close(&t);
	assert_int_equal(apply(x, &t), 0);
	free(t.mem);
	/* a fourth */
	tw_open(&t, NULL);
	FILE_(&t, "d/e", "1");
	tw_close(&t);
	expect_refused(x, &t, -E2BIG, "FLATTEN_MAX_DIR_ENTRIES");
	/* a whiteout frees a name */
	tw_open(&t, NULL);
	FILE_(&t, "d/.wh.a", "");
	FILE_(&t, "d/e", "1");
	tw_close(&t);
	assert_int_equal(apply(x, &t), 0);
	free(t.mem);
	/* intermediate directories count too: x/y/z makes a name in the root */
	tw_open(&t, NULL);
	FILE_(&t, "p/q", "1");
	FILE_(&t, "r/s", "1");
	FILE_(&t, "u/v", "1");
	tw_close(&t);
	expect_refused(x, &t, -E2BIG, "in one directory");

	/* the side table: the root's node, then room for two one-byte paths */
	lim = FLATTEN_LIMITS_DEFAULT;
	lim.max_path_bytes = (1 + 64) + 2 * (2 + 64);
	flatten_free(x->f);
	assert_int_equal(flatten_new(x->rootfd, &lim, &x->f), 0);
	tw_open(&t, NULL);
	FILE_(&t, "f", "1");
	FILE_(&t, "g", "1");
	tw_close(&t);
	assert_int_equal(apply(x, &t), 0);
	free(t.mem);
	tw_open(&t, NULL);
	FILE_(&t, "h", "1");
	tw_close(&t);
	expect_refused(x, &t, -E2BIG, "FLATTEN_MAX_PATH_BYTES");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_basic, setup, teardown),
		cmocka_unit_test_setup_teardown(test_whiteouts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replace, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile, setup, teardown),
		cmocka_unit_test_setup_teardown(test_caps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_diff_id, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_and_table_caps, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
