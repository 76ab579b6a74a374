/* SPDX-License-Identifier: Apache-2.0 */
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
#include "path.h"

#define PV(s) path_verify((s), sizeof(s) - 1)

static void test_verify_forms(void **state)
{
	(void)state;
	assert_int_equal(PV("a"), 0);
	assert_int_equal(PV("a/b/c.txt"), 0);
	assert_int_equal(PV(".hidden/..x/x.."), 0);
	assert_int_equal(path_verify("", 0), -EINVAL);
	assert_int_equal(PV("/etc/passwd"), -EINVAL);
	assert_int_equal(PV(".."), -EINVAL);
	assert_int_equal(PV("a/../b"), -EINVAL);
	assert_int_equal(PV("a/.."), -EINVAL);
	assert_int_equal(PV("."), -EINVAL);
	assert_int_equal(PV("a/./b"), -EINVAL);
	assert_int_equal(PV("a//b"), -EINVAL);
	assert_int_equal(PV("a/"), -EINVAL);
	assert_int_equal(PV("a\0b"), -EINVAL);
}

static void test_verify_caps(void **state)
{
	char p[PATH_MAX_LEN + 2];
	(void)state;

	/* Total length: PATH_MAX_LEN accepted, one more refused. */
	for (size_t i = 0; i < sizeof(p); i++) {
		p[i] = (i % 200 == 199) ? '/' : 'x';
	}
	p[PATH_MAX_LEN - 1] = 'x';
	assert_int_equal(path_verify(p, PATH_MAX_LEN), 0);
	p[PATH_MAX_LEN] = 'x';
	assert_int_equal(path_verify(p, PATH_MAX_LEN + 1), -ENAMETOOLONG);

	/* Segment length: PATH_MAX_SEGMENT accepted, one more refused. */
	memset(p, 'y', PATH_MAX_SEGMENT + 1);
	assert_int_equal(path_verify(p, PATH_MAX_SEGMENT), 0);
	assert_int_equal(path_verify(p, PATH_MAX_SEGMENT + 1), -ENAMETOOLONG);

	/* Depth: PATH_MAX_DEPTH segments accepted, one more refused. */
	for (size_t i = 0; i < 2 * (PATH_MAX_DEPTH + 1); i += 2) {
		p[i] = 'd';
		p[i + 1] = '/';
	}
	assert_int_equal(path_verify(p, 2 * PATH_MAX_DEPTH - 1), 0);
	assert_int_equal(path_verify(p, 2 * (PATH_MAX_DEPTH + 1) - 1), -ELOOP);
}

static char tmpdir[] = "/tmp/tkbox-test-path-XXXXXX";

static int setup(void **state)
{
	char p[256];
	(void)state;
	if (!mkdtemp(tmpdir)) {
		return -1;
	}
	snprintf(p, sizeof(p), "%s/d", tmpdir);
	if (mkdir(p, 0700) < 0) {
		return -1;
	}
	snprintf(p, sizeof(p), "%s/d/f", tmpdir);
	FILE *f = fopen(p, "w");
	if (!f) {
		return -1;
	}
	fputs("data", f);
	fclose(f);
	snprintf(p, sizeof(p), "%s/link-out", tmpdir);
	if (symlink("/etc", p) < 0) {
		return -1;
	}
	snprintf(p, sizeof(p), "%s/d/link-file", tmpdir);
	if (symlink("f", p) < 0) {
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	char cmd[300];
	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static void check_safe_open(bool fallback)
{
	_cleanup_close_ int root = open(tmpdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int fd;
	char data[8] = { 0 };

	assert_true(root >= 0);
	safe_openat_force_fallback(fallback);

	fd = safe_openat(root, "d/f", O_RDONLY, 0);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, data, sizeof(data)), 4);
	assert_memory_equal(data, "data", 4);
	close(fd);

	/* A symlinked directory in the middle, a symlink as the last component. */
	assert_int_equal(safe_openat(root, "link-out/passwd", O_RDONLY, 0), -ELOOP);
	assert_int_equal(safe_openat(root, "d/link-file", O_RDONLY, 0), -ELOOP);
	/* Forms refused before any syscall. */
	assert_int_equal(safe_openat(root, "../etc/passwd", O_RDONLY, 0), -EINVAL);
	assert_int_equal(safe_openat(root, "/etc/passwd", O_RDONLY, 0), -EINVAL);
	assert_int_equal(safe_openat(root, "d/missing", O_RDONLY, 0), -ENOENT);

	/* Create the last component only. */
	fd = safe_openat(root, fallback ? "d/new-fb" : "d/new", O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(safe_openat(root, "nodir/new", O_WRONLY | O_CREAT, 0600), -ENOENT);
	safe_openat_force_fallback(false);
}

static void test_normal_abs(void **state)
{
	(void)state;
	assert_true(path_is_normal_abs("/"));
	assert_true(path_is_normal_abs("/var/lib/tkbox//images/x"));
	assert_true(path_is_normal_abs("/a/.b/..c"));
	assert_false(path_is_normal_abs("a/b"));
	assert_false(path_is_normal_abs(""));
	assert_false(path_is_normal_abs("/a/./b"));
	assert_false(path_is_normal_abs("/a/../b"));
	assert_false(path_is_normal_abs("/a/.."));
	assert_false(path_is_normal_abs("/a/b\n"));
	assert_false(path_is_normal_abs("/a\x7f"));
	assert_true(str_has_ctl("x\ty"));
	assert_false(str_has_ctl("plain text ~"));
}

static void test_safe_openat2(void **state)
{
	(void)state;
	check_safe_open(false);
}

static void test_safe_open_fallback(void **state)
{
	(void)state;
	check_safe_open(true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_verify_forms),	   cmocka_unit_test(test_verify_caps),
		cmocka_unit_test(test_normal_abs),	   cmocka_unit_test(test_safe_openat2),
		cmocka_unit_test(test_safe_open_fallback),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
