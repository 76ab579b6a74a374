/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "banned.h"
#include "daemon/image-files.h"

/*
 * The allow presets' image reader on real ext4 files: a tree built with
 * mkfs.ext4 -d, read back through the confined debugfs child, then expanded.
 */

static char tmp[] = "/tmp/tkbox-image-files-XXXXXX";

static void put(const char *rel, const char *text)
{
	char path[512], dir[512];
	char *slash;
	FILE *f;

	(void)snprintf(path, sizeof(path), "%s/%s", tmp, rel);
	(void)snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	*slash = '\0';
	for (char *p = dir + strlen(tmp) + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		(void)mkdir(dir, 0755);
		*p = '/';
	}
	(void)mkdir(dir, 0755);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

static void run(const char *cmd)
{
	int st = system(cmd);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* A shell command with every %s replaced by the temp directory. */
static void run_in_tmp(const char *fmt)
{
	char cmd[1024];
	size_t k = 0;

	for (const char *p = fmt; *p && k + strlen(tmp) + 1 < sizeof(cmd); p++) {
		if (p[0] == '%' && p[1] == 's') {
			memcpy(cmd + k, tmp, strlen(tmp));
			k += strlen(tmp);
			p++;
		} else {
			cmd[k++] = *p;
		}
	}
	cmd[k] = '\0';
	run(cmd);
}

/* mkfs.ext4 -d of tmp/tree into tmp/NAME.ext4. */
static void mkimage(const char *name)
{
	char cmd[1024];

	(void)snprintf(cmd, sizeof(cmd), "mkfs.ext4 -q -F -E root_owner=0:0 -O ^has_journal -d %s/tree %s/%s.ext4 16M",
		       tmp, tmp, name);
	run(cmd);
	(void)snprintf(cmd, sizeof(cmd), "rm -rf %s/tree", tmp);
	run(cmd);
}

static int read_image(const char *name, unsigned needs, struct image_files *f, char *err, size_t n)
{
	char path[512];

	(void)snprintf(path, sizeof(path), "%s/%s.ext4", tmp, name);
	return image_files_read(path, needs, tmp, f, err, n);
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[256];
	(void)state;
	(void)snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_debian_and_npm(void **state)
{
	struct image_files f;
	struct egress_policy p;
	char err[512] = "", text[EGRESS_ENTRY_TEXT_MAX], all[2048] = "";
	(void)state;

	put("tree/etc/apt/sources.list", "deb http://main.example.org/debian bookworm main\n");
	put("tree/etc/apt/sources.list.d/b.sources",
	    "Types: deb\nURIs: https://b.example.org/debian\nSuites: bookworm\n\nTypes: deb\nURIs: "
	    "http://off.example.org/\nEnabled: no\n");
	put("tree/etc/apt/sources.list.d/a.list", "deb [arch=amd64] http://a.example.org:8080/x stable main\n");
	put("tree/etc/apt/sources.list.d/ignored.txt", "deb http://txt.example.org/ x main\n");
	put("tree/etc/apt/elsewhere.list", "deb http://link.example.org/ x main\n");
	run_in_tmp("ln -s ../elsewhere.list %s/tree/etc/apt/sources.list.d/c.list");
	put("tree/root/.npmrc", "@corp:registry=https://npm.corp.example.com/\n");
	put("tree/usr/local/lib/node_modules/npm/node_modules/@npmcli/config/lib/definitions/definitions.js",
	    "  registry: new Definition('registry', {\n    default: 'https://npm-default.example.org/',\n");
	mkimage("full");

	assert_int_equal(read_image("full", EGRESS_NEED_APT | EGRESS_NEED_NPM, &f, err, sizeof(err)), 0);
	/* sources.list first, then sources.list.d by name; the .txt and the symlink are not read */
	assert_int_equal(f.f.n_apt, 3);
	assert_string_equal(f.f.apt_sources[0], "deb http://main.example.org/debian bookworm main\n");
	assert_non_null(strstr(f.f.apt_sources[1], "a.example.org:8080"));
	assert_non_null(strstr(f.f.apt_sources[2], "b.example.org"));
	assert_int_equal(f.f.n_npmrc, 1);
	assert_string_equal(f.f.npm_default_registry, "https://npm-default.example.org/");

	assert_int_equal(egress_policy_build((char *const *)(const char *[]){ "debian", "npm", NULL }, false, &f.f, &p,
					     err, sizeof(err)),
			 0);
	for (size_t i = 0; i < p.n_allow; i++) {
		egress_allow_format(&p.allow[i], text);
		(void)snprintf(all + strlen(all), sizeof(all) - strlen(all), "%s%s", i ? " " : "", text);
	}
	assert_string_equal(all, "main.example.org a.example.org:8080 b.example.org npm.corp.example.com "
				 "npm-default.example.org");
	egress_policy_release(&p);
	image_files_release(&f);

	/* nothing needed: no child, nothing read */
	assert_int_equal(read_image("full", 0, &f, err, sizeof(err)), 0);
	assert_int_equal(f.f.n_apt + f.f.n_npmrc, 0);
	/* the scratch directory is gone */
	char scratch[512];
	(void)snprintf(scratch, sizeof(scratch), "%s/image-files", tmp);
	assert_int_equal(access(scratch, F_OK), -1);
}

static void test_no_sources(void **state)
{
	struct image_files f;
	struct egress_policy p;
	char err[512] = "";
	(void)state;

	put("tree/etc/hostname", "x\n");
	mkimage("bare");
	assert_int_equal(read_image("bare", EGRESS_NEED_APT | EGRESS_NEED_NPM, &f, err, sizeof(err)), 0);
	assert_int_equal(f.f.n_apt, 0);
	assert_null(f.f.npm_default_registry);
	assert_int_equal(egress_policy_build((char *const *)(const char *[]){ "debian", NULL }, false, &f.f, &p, err,
					     sizeof(err)),
			 -ENOENT);
	assert_non_null(strstr(err, "name no http or https mirror"));
	assert_int_equal(
		egress_policy_build((char *const *)(const char *[]){ "npm", NULL }, false, &f.f, &p, err, sizeof(err)),
		-ENOENT);
	image_files_release(&f);
}

static void test_caps(void **state)
{
	static char big[IMAGE_FILES_FILE_MAX + 2];
	struct image_files f;
	char err[512] = "", name[64];
	(void)state;

	/* one byte past the file cap */
	memset(big, '#', IMAGE_FILES_FILE_MAX + 1);
	big[IMAGE_FILES_FILE_MAX + 1] = '\0';
	put("tree/etc/apt/sources.list", big);
	mkimage("big");
	assert_int_equal(read_image("big", EGRESS_NEED_APT, &f, err, sizeof(err)), -EFBIG);
	assert_non_null(strstr(err, "IMAGE_FILES_FILE_MAX"));
	/* exactly the cap is read */
	big[IMAGE_FILES_FILE_MAX] = '\0';
	put("tree/etc/apt/sources.list", big);
	mkimage("atcap");
	assert_int_equal(read_image("atcap", EGRESS_NEED_APT, &f, err, sizeof(err)), 0);
	assert_int_equal(strlen(f.f.apt_sources[0]), IMAGE_FILES_FILE_MAX);
	image_files_release(&f);

	/* sources.list and 15 more: the cap; one more is refused */
	put("tree/etc/apt/sources.list", "deb http://m.example.org/ x main\n");
	for (int i = 0; i < EGRESS_IMAGE_APT_MAX - 1; i++) {
		(void)snprintf(name, sizeof(name), "tree/etc/apt/sources.list.d/s%02d.list", i);
		put(name, "deb http://n.example.org/ x main\n");
	}
	run_in_tmp("cp -a %s/tree %s/tree.keep");
	mkimage("sixteen");
	assert_int_equal(read_image("sixteen", EGRESS_NEED_APT, &f, err, sizeof(err)), 0);
	assert_int_equal(f.f.n_apt, EGRESS_IMAGE_APT_MAX);
	image_files_release(&f);
	run_in_tmp("mv %s/tree.keep %s/tree");
	put("tree/etc/apt/sources.list.d/zz.sources", "Types: deb\nURIs: http://z.example.org/\n");
	mkimage("seventeen");
	assert_int_equal(read_image("seventeen", EGRESS_NEED_APT, &f, err, sizeof(err)), -E2BIG);
	assert_non_null(strstr(err, "more than 16 apt source files (EGRESS_IMAGE_APT_MAX)"));
}

static void test_pip_and_go(void **state)
{
	struct image_files f;
	struct egress_policy p;
	char err[512] = "", text[EGRESS_ENTRY_TEXT_MAX], all[2048] = "";
	(void)state;

	/* pip.conf (an extra index), and pip's models/index.py under a python3.N found by listing /usr/lib:
	 * the higher version's is read; an older one and a symlinked pip.conf are not */
	put("tree/etc/pip.conf", "[global]\nextra-index-url = https://extra.test.example/simple\n");
	put("tree/etc/xdg/pip/elsewhere.conf", "[global]\nindex-url = https://link.test.example/\n");
	run_in_tmp("ln -s elsewhere.conf %s/tree/etc/xdg/pip/pip.conf");
	put("tree/usr/lib/python3.12/site-packages/pip/_internal/models/index.py",
	    "class PackageIndex:\n    pass\n\n\n"
	    "PyPI = PackageIndex(\"https://index.test.example/\", file_storage_domain=\"files.test.example\")\n");
	put("tree/usr/lib/python3.9/site-packages/pip/_internal/models/index.py",
	    "PyPI = PackageIndex(\"https://old.test.example/\", file_storage_domain=\"oldfiles.test.example\")\n");
	/* Go: GOROOT/go.env under a go-V found by listing /usr/lib, and the user's go env file over it */
	put("tree/usr/lib/go-1.22/go.env", "# defaults\nGOPROXY=https://proxy.test.example,direct\n"
					   "GOSUMDB=sum.test.example\n");
	put("tree/root/.config/go/env", "GOSUMDB=sum2.test.example+key\n");
	mkimage("pipgo");

	assert_int_equal(read_image("pipgo", EGRESS_NEED_PIP | EGRESS_NEED_GO, &f, err, sizeof(err)), 0);
	assert_int_equal(f.f.n_pip_conf, 1);
	assert_true(f.f.pip_found);
	assert_string_equal(f.f.pip_default_index, "https://index.test.example/");
	assert_string_equal(f.f.pip_default_files, "files.test.example");
	assert_true(f.f.go_found);
	assert_int_equal(f.f.n_go_env, 2);
	assert_non_null(strstr(f.f.go_env[0], "GOPROXY=https://proxy.test.example,direct"));

	assert_int_equal(egress_policy_build((char *const *)(const char *[]){ "pypi", "go-proxy", NULL }, false, &f.f,
					     &p, err, sizeof(err)),
			 0);
	for (size_t i = 0; i < p.n_allow; i++) {
		egress_allow_format(&p.allow[i], text);
		(void)snprintf(all + strlen(all), sizeof(all) - strlen(all), "%s%s", i ? " " : "", text);
	}
	assert_string_equal(all, "extra.test.example index.test.example files.test.example proxy.test.example "
				 "sum2.test.example");
	assert_true(p.go_direct);
	egress_policy_release(&p);
	image_files_release(&f);

	/* only go asked for: pip's files are not read */
	assert_int_equal(read_image("pipgo", EGRESS_NEED_GO, &f, err, sizeof(err)), 0);
	assert_false(f.f.pip_found);
	assert_int_equal(f.f.n_pip_conf, 0);
	assert_int_equal(f.f.n_go_env, 2);
	image_files_release(&f);
}

static void test_no_pip_no_go(void **state)
{
	struct image_files f;
	struct egress_policy p;
	char err[512] = "", name[64];
	(void)state;

	put("tree/etc/hostname", "x\n");
	put("tree/usr/local/lib/python3.11/site-packages/other/x.py", "\n");
	mkimage("nopipgo");
	assert_int_equal(read_image("nopipgo", EGRESS_NEED_PIP | EGRESS_NEED_GO, &f, err, sizeof(err)), 0);
	assert_false(f.f.pip_found);
	assert_false(f.f.go_found);
	assert_int_equal(
		egress_policy_build((char *const *)(const char *[]){ "pypi", NULL }, false, &f.f, &p, err, sizeof(err)),
		-ENOENT);
	assert_non_null(strstr(err, "the image has no pip"));
	assert_int_equal(egress_policy_build((char *const *)(const char *[]){ "go-proxy", NULL }, false, &f.f, &p, err,
					     sizeof(err)),
			 -ENOENT);
	assert_non_null(strstr(err, "the image has no Go"));
	image_files_release(&f);

	/* IMAGE_FILES_VERSIONS_MAX python3.N directories are listed, one more is refused */
	for (int i = 0; i < IMAGE_FILES_VERSIONS_MAX; i++) {
		(void)snprintf(name, sizeof(name), "tree/usr/lib/python3.%d/x", i);
		put(name, "\n");
	}
	run_in_tmp("cp -a %s/tree %s/tree.keep");
	mkimage("eightpy");
	assert_int_equal(read_image("eightpy", EGRESS_NEED_PIP, &f, err, sizeof(err)), 0);
	image_files_release(&f);
	run_in_tmp("mv %s/tree.keep %s/tree");
	put("tree/usr/lib/python3.99/x", "\n");
	mkimage("ninepy");
	assert_int_equal(read_image("ninepy", EGRESS_NEED_PIP, &f, err, sizeof(err)), -E2BIG);
	assert_non_null(strstr(err, "more than 8 python3.VERSION directories in /usr/lib (IMAGE_FILES_VERSIONS_MAX)"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_debian_and_npm), cmocka_unit_test(test_no_sources),   cmocka_unit_test(test_caps),
		cmocka_unit_test(test_pip_and_go),     cmocka_unit_test(test_no_pip_no_go),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
