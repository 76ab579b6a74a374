/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The strict patch parser (src/patch/patch.c) and the git cross-check
 * (src/patch/patch-git.c): every refusal in patch.h with a vector, the
 * accepted forms from real `git diff --binary --full-index --no-renames`
 * output made here with git, the caps one past, and the comparator fed a
 * real git apply output against a parse result altered in each field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "banned.h"
#include "buf.h"
#include "image/util.h"
#include "io.h"
#include "path.h"
#include "patch/patch-git.h"
#include "patch/patch.h"

static char diag[1024];

static int parse_str(const char *s, struct patch *p)
{
	return patch_parse((const uint8_t *)s, strlen(s), p, diag, sizeof(diag));
}

/* s is refused with rc and the message contains want (the rule) and, when given, the path. */
static void refused_n(const char *s, size_t n, int rc, const char *want, const char *path)
{
	struct patch p = { 0 };
	int r = patch_parse((const uint8_t *)s, n, &p, diag, sizeof(diag));
	if (r != rc || !strstr(diag, want) || (path && !strstr(diag, path))) {
		fprintf(stderr, "vector:\n%s\ngot %d (want %d): %s\nwanted: %s / %s\n", s, r, rc, diag, want,
			path ? path : "");
	}
	assert_int_equal(r, rc);
	assert_non_null(strstr(diag, want));
	if (path) {
		assert_non_null(strstr(diag, path));
	}
	assert_null(p.files);
}

static void refused(const char *s, int rc, const char *want, const char *path)
{
	refused_n(s, strlen(s), rc, want, path);
}

#define CREATE_X                                                                                                       \
	"diff --git a/x b/x\nnew file mode 100644\nindex 0000000..7898192\n--- /dev/null\n+++ b/x\n@@ -0,0 +1 "        \
	"@@\n+a\n"
#define CREATE_X_IN_D                                                                                                  \
	"diff --git a/d/x b/d/x\nnew file mode 100644\nindex 0000000..7898192\n--- /dev/null\n+++ b/d/x\n@@ -0,0 +1 "  \
	"@@\n+a\n"
#define MODIFY_X "diff --git a/x b/x\nindex 7898192..6178079 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
#define BIN_IDX "index 88768efdf77ec78c9a995f94881793be6a41752b..f68ed8037341be54a4bad1485a8deb1be7188467 100644\n"
/* "\0\2bin2" (6 bytes) and "\0\1bin" (5 bytes), as git writes them */
#define BIN_FWD "literal 6\nNcmZQzO3KVL0ssTy0d4>Q\n\n"
#define BIN_REV "literal 5\nMcmZQzOv=my00M6TI{*Lx\n\n"

static void test_minimal_forms(void **state)
{
	struct patch p = { 0 };
	(void)state;

	assert_int_equal(patch_parse((const uint8_t *)"", 0, &p, diag, sizeof(diag)), 0);
	assert_int_equal(p.n_files, 0);
	patch_release(&p);

	assert_int_equal(parse_str(CREATE_X, &p), 0);
	assert_int_equal(p.n_files, 1);
	assert_string_equal(p.files[0].path, "x");
	assert_int_equal(p.files[0].op, PATCH_CREATE);
	assert_int_equal(p.files[0].new_mode, PATCH_MODE_FILE);
	assert_int_equal(p.files[0].old_mode, 0);
	assert_int_equal(p.files[0].added, 1);
	assert_int_equal(p.files[0].off, 0);
	assert_int_equal(p.files[0].len, strlen(CREATE_X));
	patch_release(&p);

	assert_int_equal(parse_str(MODIFY_X "diff --git a/y b/y\nold mode 100644\nnew mode 100755\n", &p), 0);
	assert_int_equal(p.n_files, 2);
	assert_int_equal(p.files[0].op, PATCH_MODIFY);
	assert_int_equal(p.files[0].old_mode, PATCH_MODE_FILE);
	assert_int_equal(p.files[0].new_mode, PATCH_MODE_FILE);
	assert_int_equal(p.files[0].added, 1);
	assert_int_equal(p.files[0].deleted, 1);
	assert_true(p.files[1].mode_only);
	assert_int_equal(p.files[1].new_mode, PATCH_MODE_EXEC);
	assert_int_equal(p.files[1].off, strlen(MODIFY_X));
	patch_release(&p);

	assert_int_equal(parse_str("diff --git a/b b/b\n" BIN_IDX "GIT binary patch\n" BIN_FWD BIN_REV, &p), 0);
	assert_true(p.files[0].binary);
	assert_int_equal(p.files[0].added, 0);
	assert_string_equal(p.files[0].new_oid, "f68ed8037341be54a4bad1485a8deb1be7188467");
	patch_release(&p);

	/* a symlink deleted and a directory of the same name created */
	assert_int_equal(parse_str("diff --git a/d b/d\ndeleted file mode 120000\nindex 1de5659..0000000\n--- a/d\n+++ "
				   "/dev/null\n@@ -1 +0,0 @@\n-/etc\n\\ No newline at end of file\n" CREATE_X_IN_D,
				   &p),
			 0);
	assert_int_equal(p.n_files, 2);
	patch_release(&p);

	/* a quoted name, "\ No newline" on both sides */
	assert_int_equal(parse_str("diff --git \"a/t\\tq\\\"\\303\\251\" \"b/t\\tq\\\"\\303\\251\"\n"
				   "index e25f181..46819b3 100644\n--- \"a/t\\tq\\\"\\303\\251\"\n+++ "
				   "\"b/t\\tq\\\"\\303\\251\"\n@@ -1 +1 @@\n-y\n\\ No newline at end of file\n+yy\n"
				   "\\ No newline at end of file\n",
				   &p),
			 0);
	assert_string_equal(p.files[0].path, "t\tq\"\xc3\xa9");
	patch_release(&p);

	/* a name with a space: a TAB after it on ---/+++ as git writes it */
	assert_int_equal(parse_str("diff --git a/a b b/a b\nindex 587be6b..23a2420 100644\n--- a/a b\t\n+++ b/a b\t\n"
				   "@@ -1 +1,2 @@\n x\n+x2\n",
				   &p),
			 0);
	assert_string_equal(p.files[0].path, "a b");
	patch_release(&p);
}

static void test_refusals(void **state)
{
	(void)state;
	/* copies, renames, similarity */
	refused("diff --git a/x b/y\nsimilarity index 90%\nrename from x\nrename to y\n", -EBADMSG, "rename rule",
		NULL);
	refused("diff --git a/x b/x\nrename from x\nrename to x\n", -EBADMSG, "rename rule", "(x)");
	refused("diff --git a/x b/x\ncopy from x\ncopy to x\n", -EBADMSG, "copy rule", "(x)");
	refused("diff --git a/x b/x\nsimilarity index 100%\n", -EBADMSG, "similarity rule", "(x)");
	refused("diff --git a/x b/x\ndissimilarity index 90%\n" MODIFY_X, -EBADMSG, "similarity rule", "(x)");
	refused("diff --git a/x b/x\nindex 7898192..6178079 100644\n--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n", -EBADMSG,
		"rename rule", "(x)");
	/* a second section for one path */
	refused(MODIFY_X MODIFY_X, -EBADMSG, "duplicate rule", "section 2 (x)");
	/* .., absolute, .git in any case */
	refused("diff --git a/../x b/../x\nnew file mode 100644\n", -EBADMSG, ".. segment", "../x");
	refused("diff --git a/d/../../x b/d/../../x\nold mode 100644\nnew mode 100755\n", -EBADMSG, ".. segment", NULL);
	refused("diff --git a//etc/x b//etc/x\nold mode 100644\nnew mode 100755\n", -EBADMSG, "absolute", NULL);
	refused("diff --git a/.git/hooks/x b/.git/hooks/x\nold mode 100644\nnew mode 100755\n", -EBADMSG,
		".git segment", ".git/hooks/x");
	refused("diff --git a/s/.GIT/config b/s/.GIT/config\nold mode 100644\nnew mode 100755\n", -EBADMSG,
		".git segment", NULL);
	refused("diff --git a/.Git./x b/.Git./x\nold mode 100644\nnew mode 100755\n", -EBADMSG, ".git segment", NULL);
	/* git's verify_path names for .git: an NTFS stream after it, the 8.3 name, HFS+-ignorable code points inside. */
	refused("diff --git a/.git::$INDEX_ALLOCATION/hooks/x b/.git::$INDEX_ALLOCATION/hooks/x\nold mode 100644\nnew "
		"mode "
		"100755\n",
		-EBADMSG, ".git segment", NULL);
	refused("diff --git a/GIT~1/config b/GIT~1/config\nold mode 100644\nnew mode 100755\n", -EBADMSG,
		".git segment", NULL);
	refused("diff --git \"a/.g\\342\\200\\214it/x\" \"b/.g\\342\\200\\214it/x\"\nold mode 100644\nnew mode "
		"100755\n",
		-EBADMSG, ".git segment", NULL);
	refused("diff --git \"a/.git\\357\\273\\277/x\" \"b/.git\\357\\273\\277/x\"\nold mode 100644\nnew mode "
		"100755\n",
		-EBADMSG, ".git segment", NULL);
	refused("diff --git \"a/\\001/.git\" \"b/\\001/.git\"\nold mode 100644\nnew mode 100755\n", -EBADMSG,
		".git segment", "(\\x01/.git)");
	refused("diff --git a/a//b b/a//b\nold mode 100644\nnew mode 100755\n", -EBADMSG, "path rule", NULL);
	refused("diff --git \"a/x\\000y\" \"b/x\\000y\"\nold mode 100644\nnew mode 100755\n", -EBADMSG, "format rule",
		NULL);
	/* a path through a symlink another section writes */
	refused("diff --git a/d b/d\nnew file mode 120000\nindex 0000000..1de5659\n--- /dev/null\n+++ b/d\n"
		"@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n"
		"diff --git a/d/x b/d/x\nnew file mode 100644\nindex 0000000..7898192\n--- /dev/null\n+++ b/d/x\n"
		"@@ -0,0 +1 @@\n+a\n",
		-EBADMSG, "symlink rule", "(d/x)");
	/* F1: /dev/null without the new/deleted file mode line */
	refused("diff --git a/x b/x\n--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+a\n", -EBADMSG, "dev-null rule", "(x)");
	refused("diff --git a/x b/x\nindex 7898192..0000000\n--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n", -EBADMSG,
		"format rule", "(x)");
	refused("diff --git a/x b/x\n--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n", -EBADMSG, "dev-null rule", "(x)");
	refused("diff --git a/x b/x\nnew file mode 100644\nindex 0000000..7898192\n--- a/x\n+++ b/x\n@@ -0,0 +1 "
		"@@\n+a\n",
		-EBADMSG, "dev-null rule", "(x)");
	/* modes, gitlinks */
	refused("diff --git a/x b/x\nnew file mode 100664\n", -EBADMSG, "mode rule", "(x)");
	refused("diff --git a/x b/x\nold mode 100644\nnew mode 040000\n", -EBADMSG, "mode rule", "(x)");
	refused("diff --git a/x b/x\nold mode 100644\nnew mode 100644\n", -EBADMSG, "mode rule", "(x)");
	refused("diff --git a/x b/x\nnew file mode 160000\nindex 0000000..7898192\n", -EBADMSG, "gitlink", "(x)");
	refused("diff --git a/x b/x\nnew file mode 100644 \n", -EBADMSG, "mode rule", "(x)");
	refused("diff --git a/x b/x\nold mode 100644\nnew mode 120000\n", -EBADMSG, "between a symlink and a file",
		"(x)");
	refused("diff --git a/x b/x\nold mode 120000\nnew mode 100755\n", -EBADMSG, "between a symlink and a file",
		"(x)");
	refused("diff --git a/b b/b\nindex "
		"88768efdf77ec78c9a995f94881793be6a41752b..f68ed8037341be54a4bad1485a8deb1be7188467 "
		"120000\nGIT binary patch\n" BIN_FWD,
		-EBADMSG, "binary patch of a symlink", "(b)");
	/* binary */
	refused("diff --git a/b b/b\nindex 88768ef..f68ed80 100644\nBinary files a/b and b/b differ\n", -EBADMSG,
		"binary rule", "(b)");
	refused("diff --git a/b b/b\nindex 88768ef..f68ed80 100644\nGIT binary patch\n" BIN_FWD, -EBADMSG,
		"full (40 hex) index", "(b)");
	refused("diff --git a/b b/b\nGIT binary patch\n" BIN_FWD, -EBADMSG, "full (40 hex) index", "(b)");
	refused("diff --git a/b b/b\n" BIN_IDX "GIT binary patch\nliteral 7\nNcmZQzO3KVL0ssTy0d4>Q\n\n", -EBADMSG,
		"corrupt binary", "(b)");
	refused("diff --git a/b b/b\n" BIN_IDX "GIT binary patch\nliteral 6\nNcmZQzP3KVL0ssTy0d4>Q\n\n", -EBADMSG,
		"corrupt binary", "(b)");
	refused("diff --git a/b b/b\n" BIN_IDX "GIT binary patch\nliteral 6\nNcmZQzO3KVL0ssTy0d4>Q\n", -EBADMSG,
		"truncated", "(b)");
	refused("diff --git a/b b/b\n" BIN_IDX "GIT binary patch\nliteral 6\n\n", -EBADMSG, "corrupt binary", "(b)");
	refused("diff --git a/b b/b\n" BIN_IDX "GIT binary patch\n" BIN_FWD BIN_REV "junk\n", -EBADMSG, "binary rule",
		"(b)");
	/* truncated or miscounted hunks */
	refused("diff --git a/x b/x\nindex 7898192..6178079 100644\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n",
		-EBADMSG, "truncated", "(x)");
	refused("diff --git a/x b/x\nindex 7898192..6178079 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+c\n",
		-EBADMSG, "after the last hunk", "(x)");
	refused("diff --git a/x b/x\nindex 7898192..6178079 100644\n--- a/x\n+++ b/x\n@@ -1,2 +1 @@\n-a\n+b\n+c\n",
		-EBADMSG, "miscounted", "(x)");
	refused("diff --git a/x b/x\nindex 7898192..6178079 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b", -EBADMSG,
		"truncated", "(x)");
	refused("diff --git a/x b/x\nindex 7898192..6178079 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\nXb\n", -EBADMSG,
		"hunk rule", "(x)");
	refused("diff --git a/x b/x\nindex 7898192..6178079 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n a\n", -EBADMSG,
		"adds and deletes nothing", "(x)");
	refused("diff --git a/x b/x\nindex 7898192..6178079 100644\n--- a/x\n+++ b/x\n", -EBADMSG, "without hunks",
		"(x)");
	refused("diff --git a/x b/x\nindex 7898192..6178079 100644\n@@ -1 +1 @@\n-a\n+b\n", -EBADMSG, "without ---/+++",
		"(x)");
	refused("diff --git a/x b/x\nnew file mode 100644\nindex 0000000..7898192\n--- /dev/null\n+++ b/x\n"
		"@@ -1 +1 @@\n-a\n+b\n",
		-EBADMSG, "creation's hunk", "(x)");
	refused("diff --git a/x b/x\nindex 7898192..6178079 100644\n--- a/x\n+++ b/x\n@@ -5 +5 @@\n-a\n+b\n"
		"@@ -1 +1 @@\n-a\n+b\n",
		-EBADMSG, "out of order", "(x)");
	refused("diff --git a/x b/x\nindex 7898192..6178079 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
		"\\ No newline\n",
		-EBADMSG, "No newline", "(x)");
	/* CR LF headers, NUL, text outside sections */
	refused("diff --git a/x b/x\r\nold mode 100644\nnew mode 100755\n", -EBADMSG, "CR LF", NULL);
	refused("diff --git a/x b/x\nold mode 100644\r\nnew mode 100755\n", -EBADMSG, "CR LF", "(x)");
	{
		static const char v[] = "diff --git a/x b/x\nold mode 100644\nnew mode 100755\0\n";
		refused_n(v, sizeof(v) - 1, -EBADMSG, "NUL", "(x)");
	}
	refused("From: someone\n\n" MODIFY_X, -EBADMSG, "before the first", NULL);
	refused(MODIFY_X "garbage\n", -EBADMSG, "after the last hunk", "(x)");
	refused("diff --git a/x b/x\nold mode 100644\nnew mode 100755\nfoo\n", -EBADMSG, "unknown line", "(x)");
	refused("diff --git a/x b/x\nindex 7898192..6178079 100644\n", -EBADMSG, "mode change alone", "(x)");
	refused("diff --git a/x b/x\nnew file mode 100644\nindex 0000000..7898192\n", -EBADMSG, "empty file", "(x)");
	refused("diff --git a/x b/x\n", -EBADMSG, "mode change alone", "(x)");
	refused("diff --git a/x b/x", -EBADMSG, "truncated", NULL);
	/* git's traditional header hidden between sections (git would read a second section) */
	refused(MODIFY_X "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-b\n+c\n", -EBADMSG, "after the last hunk", "(x)");
}

static void test_diag_escapes(void **state)
{
	struct patch p = { 0 };
	(void)state;
	assert_int_equal(parse_str("diff --git \"a/.git/\\033[31m\" \"b/.git/\\033[31m\"\nnew file mode 100644\n", &p),
			 -EBADMSG);
	assert_null(strchr(diag, '\033'));
	assert_non_null(strstr(diag, "\\x1b[31m"));
}

static void test_caps(void **state)
{
	struct patch p = { 0 };
	struct buf b = { 0 };
	(void)state;

	/* PATCH_MAX_BYTES + 1 */
	{
		uint8_t *big = calloc(1, PATCH_MAX_BYTES + 1);
		assert_non_null(big);
		assert_int_equal(patch_parse(big, PATCH_MAX_BYTES + 1, &p, diag, sizeof(diag)), -E2BIG);
		assert_non_null(strstr(diag, "PATCH_MAX_BYTES"));
		free(big);
	}
	/* PATCH_MAX_FILES sections pass, one more is refused */
	assert_int_equal(buf_init(&b, PATCH_MAX_BYTES, 0), 0);
	for (int i = 0; i < PATCH_MAX_FILES; i++) {
		assert_int_equal(buf_putf(&b, "diff --git a/f%d b/f%d\nold mode 100644\nnew mode 100755\n", i, i), 0);
	}
	assert_int_equal(patch_parse(buf_ptr(&b), buf_len(&b), &p, diag, sizeof(diag)), 0);
	assert_int_equal(p.n_files, PATCH_MAX_FILES);
	patch_release(&p);
	assert_int_equal(buf_putf(&b, "diff --git a/g b/g\nold mode 100644\nnew mode 100755\n"), 0);
	assert_int_equal(patch_parse(buf_ptr(&b), buf_len(&b), &p, diag, sizeof(diag)), -E2BIG);
	assert_non_null(strstr(diag, "PATCH_MAX_FILES"));
	buf_release(&b);

	/* a file's text: PATCH_MAX_FILE_BYTES is fine, one byte more is not */
	for (int extra = 0; extra < 2; extra++) {
		size_t lines = PATCH_MAX_FILE_BYTES / 64;
		assert_int_equal(buf_init(&b, PATCH_MAX_BYTES, 0), 0);
		assert_int_equal(buf_putf(&b,
					  "diff --git a/x b/x\nnew file mode 100644\nindex 0000000..7898192\n--- "
					  "/dev/null\n+++ b/x\n@@ -0,0 +1,%zu @@\n",
					  lines + (size_t)extra),
				 0);
		for (size_t i = 0; i < lines; i++) {
			assert_int_equal(buf_putf(&b, "+%063d\n", 0), 0);
		}
		if (extra) {
			assert_int_equal(buf_putf(&b, "+\n"), 0);
		}
		assert_int_equal(patch_parse(buf_ptr(&b), buf_len(&b), &p, diag, sizeof(diag)), extra ? -E2BIG : 0);
		if (extra) {
			assert_non_null(strstr(diag, "PATCH_MAX_FILE_BYTES"));
		}
		patch_release(&p);
		buf_release(&b);
	}
	/* a binary hunk declaring more than PATCH_MAX_FILE_BYTES is refused before any inflating */
	{
		char v[512];
		snprintf(v, sizeof(v),
			 "diff --git a/b b/b\n" BIN_IDX "GIT binary patch\nliteral %zu\nNcmZQzO3KVL0ssTy0d4>Q\n\n",
			 PATCH_MAX_FILE_BYTES + 1);
		refused(v, -E2BIG, "PATCH_MAX_FILE_BYTES", "(b)");
	}
	/* a path one past PATH_MAX_LEN */
	{
		size_t n = PATH_MAX_LEN + 1, k = 0;
		char *v = malloc(3 * n + 200);
		assert_non_null(v);
		k += (size_t)snprintf(v, 3 * n + 200, "diff --git a/");
		for (size_t i = 0; i < n; i++) {
			v[k++] = (i % 200 == 199) ? '/' : 'a';
		}
		k += (size_t)snprintf(v + k, 3 * n + 200 - k, " b/");
		for (size_t i = 0; i < n; i++) {
			v[k++] = (i % 200 == 199) ? '/' : 'a';
		}
		snprintf(v + k, 3 * n + 200 - k, "\nold mode 100644\nnew mode 100755\n");
		refused(v, -E2BIG, "PATH_MAX_LEN", NULL);
		free(v);
	}
}

/* ---- with real git ---- */

static char tmpdir[64];

static int sh(const char *fmt, ...) _printf_(1, 2);
static int sh(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

static int setup_git(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test-patch-parse.XXXXXX");
	if (!mkdtemp(tmpdir)) {
		return -1;
	}
	/* a tree with every kind of change the producer writes; git config of the test's own, not the user's */
	return sh("set -e; cd %s; export HOME=%s GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null LC_ALL=C;"
		  "git init -q r; cd r; git config user.email t@t; git config user.name t;"
		  "printf 'x\\n' > 'a b'; printf 'y' > \"$(printf 'tab\\t\\042q\\042.txt')\"; printf '\\000\\001bin' > "
		  "bin;"
		  "ln -s target lnk; printf 'z\\n' > del; mkdir d; seq 1 100 > d/long; printf '\\000gone' > delbin;"
		  "printf 'm\\n' > mode;"
		  "git add -A; git commit -qm i;"
		  "printf 'x2\\n' >> 'a b'; printf 'yy' > \"$(printf 'tab\\t\\042q\\042.txt')\"; printf "
		  "'\\000\\002bin2' > bin;"
		  "rm del delbin; printf 'new\\n' > 'new f'; : > empty; chmod +x 'a b' mode; printf '\\000' > newbin;"
		  "ln -sf other lnk; ln -s d/long newlink; seq 1 100 | sed 's/^5$/five/; s/^50$/fifty/' > d/long;"
		  "printf 'caf\\303\\251\\n' > \"$(printf 'caf\\303\\251')\";"
		  "git add -A; git diff --cached --binary --full-index --no-renames > ../p.diff;"
		  "git apply --numstat --summary -z < ../p.diff > ../numstat.z",
		  tmpdir, tmpdir);
}

static int teardown_git(void **state)
{
	(void)state;
	return sh("rm -rf %s", tmpdir);
}

static void read_file(const char *name, char **ret, size_t *n)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	assert_int_equal(io_read_file(AT_FDCWD, path, PATCH_MAX_BYTES, 0, ret, n), 0);
}

static const struct patch_file *find(const struct patch *p, const char *path)
{
	for (size_t i = 0; i < p->n_files; i++) {
		if (strcmp(p->files[i].path, path) == 0) {
			return &p->files[i];
		}
	}
	fail_msg("no section for %s", path);
	return NULL;
}

static void test_real_git(void **state)
{
	_cleanup_free_ char *data = NULL;
	size_t n;
	struct patch p = { 0 };
	const struct patch_file *f;
	(void)state;

	read_file("p.diff", &data, &n);
	assert_int_equal(patch_parse((const uint8_t *)data, n, &p, diag, sizeof(diag)), 0);
	assert_int_equal(p.n_files, 13);
	f = find(&p, "a b");
	assert_int_equal(f->op, PATCH_MODIFY);
	assert_int_equal(f->old_mode, PATCH_MODE_FILE);
	assert_int_equal(f->new_mode, PATCH_MODE_EXEC);
	assert_int_equal(f->added, 1);
	f = find(&p, "bin");
	assert_true(f->binary);
	f = find(&p, "del");
	assert_int_equal(f->op, PATCH_DELETE);
	assert_int_equal(f->deleted, 1);
	f = find(&p, "delbin");
	assert_int_equal(f->op, PATCH_DELETE);
	assert_true(f->binary);
	f = find(&p, "empty");
	assert_int_equal(f->op, PATCH_CREATE);
	f = find(&p, "newbin");
	assert_true(f->binary);
	assert_int_equal(f->op, PATCH_CREATE);
	f = find(&p, "newlink");
	assert_int_equal(f->new_mode, PATCH_MODE_LINK);
	f = find(&p, "lnk");
	assert_int_equal(f->old_mode, PATCH_MODE_LINK);
	f = find(&p, "mode");
	assert_true(f->mode_only);
	f = find(&p, "d/long");
	assert_int_equal(f->added, 2);
	assert_int_equal(f->deleted, 2);
	find(&p, "tab\t\"q\".txt");
	find(&p, "caf\xc3\xa9");
	find(&p, "new f");
	/* sections tile the patch */
	for (size_t i = 0, at = 0; i < p.n_files; i++) {
		assert_int_equal(p.files[i].off, at);
		at += p.files[i].len;
		if (i + 1 == p.n_files) {
			assert_int_equal(at, n);
		}
	}
	patch_release(&p);
}

static void test_crosscheck_real(void **state)
{
	_cleanup_free_ char *data = NULL, *pf = NULL, *xdir = NULL;
	size_t n;
	struct patch p = { 0 };
	(void)state;

	read_file("p.diff", &data, &n);
	assert_int_equal(patch_parse((const uint8_t *)data, n, &p, diag, sizeof(diag)), 0);
	assert_true(asprintf(&pf, "%s/p.diff", tmpdir) > 0);
	assert_true(asprintf(&xdir, "%s/x1", tmpdir) > 0);
	assert_int_equal(mkdir(xdir, 0700), 0);
	diag[0] = '\0';
	assert_int_equal(patch_git_crosscheck(pf, &p, xdir, diag, sizeof(diag)), 0);
	/* git failing to read the patch: refused with git's first line */
	assert_int_equal(
		sh("printf 'diff --git a/x b/x\\n--- a/x\\n+++ b/x\\n@@ -1 +1 @@\\n-a\\n' > %s/bad.diff", tmpdir), 0);
	free(pf);
	assert_true(asprintf(&pf, "%s/bad.diff", tmpdir) > 0);
	free(xdir);
	assert_true(asprintf(&xdir, "%s/x2", tmpdir) > 0);
	assert_int_equal(mkdir(xdir, 0700), 0);
	assert_int_equal(patch_git_crosscheck(pf, &p, xdir, diag, sizeof(diag)), -EBADMSG);
	assert_non_null(strstr(diag, "git cannot read the patch"));
	patch_release(&p);
	/* the empty patch: no section for either reading (git apply itself refuses empty input) */
	assert_int_equal(sh("cd %s && : > empty.diff && mkdir x3", tmpdir), 0);
	assert_int_equal(patch_parse((const uint8_t *)"", 0, &p, diag, sizeof(diag)), 0);
	free(pf);
	free(xdir);
	assert_true(asprintf(&pf, "%s/empty.diff", tmpdir) > 0);
	assert_true(asprintf(&xdir, "%s/x3", tmpdir) > 0);
	assert_int_equal(patch_git_crosscheck(pf, &p, xdir, diag, sizeof(diag)), 0);
	/* and a non-empty file against an empty reading is a difference */
	free(pf);
	assert_true(asprintf(&pf, "%s/p.diff", tmpdir) > 0);
	assert_int_equal(sh("mkdir %s/x4", tmpdir), 0);
	free(xdir);
	assert_true(asprintf(&xdir, "%s/x4", tmpdir) > 0);
	assert_int_equal(patch_git_crosscheck(pf, &p, xdir, diag, sizeof(diag)), -EBADMSG);
	assert_non_null(strstr(diag, "cross-check: path"));
}

/* The comparator against git's real output, with the parse result altered in one field at a time. */
static void test_comparator_fields(void **state)
{
	_cleanup_free_ char *data = NULL, *out = NULL;
	size_t n, on;
	struct patch p = { 0 };
	struct patch_file *f;
	(void)state;

	read_file("p.diff", &data, &n);
	read_file("numstat.z", &out, &on);
	assert_int_equal(patch_parse((const uint8_t *)data, n, &p, diag, sizeof(diag)), 0);
	assert_int_equal(patch_git_compare((const uint8_t *)out, on, &p, diag, sizeof(diag)), 0);

#define ALTERED(stmt, restore, want_field, want_path)                                                                  \
	do {                                                                                                           \
		stmt;                                                                                                  \
		diag[0] = '\0';                                                                                        \
		assert_int_equal(patch_git_compare((const uint8_t *)out, on, &p, diag, sizeof(diag)), -EBADMSG);       \
		if (!strstr(diag, want_field) || !strstr(diag, want_path)) {                                           \
			fail_msg("%s: %s", #stmt, diag);                                                               \
		}                                                                                                      \
		restore;                                                                                               \
		assert_int_equal(patch_git_compare((const uint8_t *)out, on, &p, diag, sizeof(diag)), 0);              \
	} while (0)

	f = (struct patch_file *)find(&p, "d/long");
	{
		char *saved = f->path;
		char other[] = "d/lonG";
		ALTERED(f->path = other, f->path = saved, "cross-check: path", "d/lonG");
	}
	ALTERED(f->added++, f->added--, "added/deleted", "d/long");
	ALTERED(f->deleted--, f->deleted++, "added/deleted", "d/long");
	ALTERED(f->binary = true, f->binary = false, "cross-check: binary", "d/long");
	ALTERED(f->new_mode = PATCH_MODE_EXEC, f->new_mode = PATCH_MODE_FILE, "cross-check: mode change", "d/long");
	ALTERED(f->op = PATCH_CREATE, f->op = PATCH_MODIFY, "cross-check: creation", "d/long");
	ALTERED(f->op = PATCH_DELETE, f->op = PATCH_MODIFY, "cross-check: deletion", "d/long");
	f = (struct patch_file *)find(&p, "bin");
	ALTERED(f->binary = false, f->binary = true, "cross-check: binary", "bin");
	f = (struct patch_file *)find(&p, "del");
	ALTERED(f->op = PATCH_MODIFY, f->op = PATCH_DELETE, "cross-check: deletion", "del");
	ALTERED(f->old_mode = PATCH_MODE_EXEC, f->old_mode = PATCH_MODE_FILE, "cross-check: deletion", "del");
	f = (struct patch_file *)find(&p, "new f");
	ALTERED(f->op = PATCH_MODIFY, f->op = PATCH_CREATE, "cross-check: creation", "new f");
	ALTERED(f->new_mode = PATCH_MODE_EXEC, f->new_mode = PATCH_MODE_FILE, "cross-check: creation", "new f");
	f = (struct patch_file *)find(&p, "mode");
	ALTERED(f->new_mode = PATCH_MODE_FILE, f->new_mode = PATCH_MODE_EXEC, "cross-check: mode change", "mode");
	ALTERED(f->old_mode = PATCH_MODE_LINK, f->old_mode = PATCH_MODE_FILE, "cross-check: mode change", "mode");
	/* a section git reads that the parser does not, and the other way round */
	ALTERED(p.n_files--, p.n_files++, "cross-check: path", "");
	patch_release(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_minimal_forms),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_diag_escapes),
		cmocka_unit_test(test_caps),
	};
	const struct CMUnitTest git_tests[] = {
		cmocka_unit_test(test_real_git),
		cmocka_unit_test(test_crosscheck_real),
		cmocka_unit_test(test_comparator_fields),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	char *git = NULL;
	if (image_find_program("git", &git) < 0) {
		fprintf(stderr, "git not found: the git tests are skipped\n");
		return r;
	}
	free(git);
	return r | cmocka_run_group_tests(git_tests, setup_git, teardown_git);
}
