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
#include "image/workspace.h"
#include "log.h"

static void test_credentials(void **state)
{
	static const char *const yes[] = {
		".env",
		".env.local",
		".env.production",
		"sub/dir/.env",
		".ENV",
		".envrc",
		"secrets.pem",
		"certs/server.key",
		"a/b/KEY.PEM",
		"store.p12",
		"x.pfx",
		"keystore.jks",
		"app.keystore",
		"putty.ppk",
		"vault.kdbx",
		".netrc",
		"_netrc",
		".npmrc",
		"pkg/.npmrc",
		".pypirc",
		".git-credentials",
		".htpasswd",
		".pgpass",
		".my.cnf",
		".boto",
		".s3cfg",
		".dockercfg",
		".vault-token",
		".yarnrc",
		"id_rsa",
		"id_ed25519",
		"keys/id_ecdsa",
		"id_ed25519_sk",
		"id_rsa.old",
		"id_rsa-work",
		"identity",
		".ssh/config",
		"home/.ssh/known_hosts",
		".aws/credentials",
		".aws/config",
		".azure/msal_token_cache.json",
		".gnupg/pubring.kbx",
		".password-store/x.gpg",
		".docker/config.json",
		"home/.kube/config",
		".config/gcloud/credentials.db",
		"application_default_credentials.json",
		"gcp-credentials.json",
		"my_service_account.json",
		"client_secret_123.json",
		"service-account-prod.json",
		"terraform.tfstate",
		"terraform.tfstate.backup",
		"prod.tfvars",
		"x.tfvars.json",
		"kubeconfig",
		"cluster.kubeconfig",
		".cargo/credentials",
		".cargo/credentials.toml",
		".gem/credentials",
	};
	static const char *const no[] = {
		".env.example",	   ".env.sample",
		".env.template",   "sub/.env.dist",
		".env.defaults",   "README.md",
		"id_ed25519.pub",  "id_rsa.pub",
		"identity.pub",	   "id_utils.py",
		"identifier.c",	   "src/keyboard.c",
		"keys.txt",	   "docs/pem-format.md",
		"key.c",	   "config.json",
		".kube/cache/x",   "docker/config.json",
		"envoy.yaml",	   "environment.py",
		".config/other/x", "credentials.md",
		"package.json",	   "netrc.c",
		"a.pemx",	   "monkey",
		".gcloudignore",   ".configx/gcloud/x",
	};
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		if (!workspace_credential_rule(yes[i])) {
			fail_msg("%s should be left out as a credential file", yes[i]);
		}
	}
	for (size_t i = 0; i < ARRAY_SIZE(no); i++) {
		const char *r = workspace_credential_rule(no[i]);
		if (r) {
			fail_msg("%s should be copied, but matched %s", no[i], r);
		}
	}
	assert_null(workspace_credential_rule(""));
}

/*
 * Issue 9, section 6: one test per credential entry added, each with the
 * file where real checkouts hold it and a near miss that stays.
 */
struct rule_case {
	const char *rule;
	const char *yes[3];
	const char *no[3];
};

static const struct rule_case new_rules[] = {
	{ ".git-credentials", { ".git-credentials", "home/.git-credentials" }, { "git-credentials.md" } },
	{ ".docker/config.json", { ".docker/config.json", "ci/.docker/config.json" }, { "docker/config.json" } },
	{ ".kube/config", { ".kube/config", "ops/.kube/config" }, { ".kube/config.d", "kube/config" } },
	{ ".pypirc", { ".pypirc", "pkg/.pypirc" }, { "pypirc.txt" } },
	{ ".config/gh/hosts.yml",
	  { ".config/gh/hosts.yml", "home/.config/gh/hosts.yml" },
	  { ".config/gh/config.yml", "gh/hosts.yml" } },
	{ "auth.json", { "auth.json", "php/auth.json", ".config/containers/auth.json" }, { "oauth.json", "auth.js" } },
	{ ".m2/settings.xml",
	  { ".m2/settings.xml", ".m2/settings-security.xml" },
	  { "settings.xml", "m2/settings.xml" } },
	{ ".gradle/gradle.properties",
	  { ".gradle/gradle.properties", "home/.gradle/gradle.properties" },
	  { "gradle.properties", "app/gradle.properties" } },
	{ ".terraformrc", { ".terraformrc", "terraform.rc" }, { "terraformrc.md", "main.tf" } },
	{ "*.tfstate", { "terraform.tfstate", "envs/prod/x.tfstate" }, { "tfstate.go", "x.tfstate.md" } },
	{ "rclone.conf", { "rclone.conf", ".config/rclone/rclone.conf" }, { "rclone.conf.md", "rclone.go" } },
	{ "*.p12 *.pfx", { "client.p12", "certs/site.PFX" }, { "p12.txt" } },
	{ "*.jks *.keystore", { "trust.jks", "android/release.keystore" }, { "keystore.md", "jks.go" } },
	{ ".bash_history", { ".bash_history", "home/.bash_history" }, { "bash_history.c", "history" } },
	{ ".zsh_history .psql_history .mysql_history",
	  { ".zsh_history", ".psql_history", ".mysql_history" },
	  { "zsh_history.md" } },
	{ "credentials",
	  { "credentials", ".aws/credentials", "config/credentials/prod.yml" },
	  { "credentials.md", "src/credentials.py", "credentials_test.go" } },
};

static void test_new_rule(void **state)
{
	const struct rule_case *c = *state;
	for (size_t i = 0; i < ARRAY_SIZE(c->yes) && c->yes[i]; i++) {
		if (!workspace_credential_rule(c->yes[i])) {
			fail_msg("rule %s: %s should be left out", c->rule, c->yes[i]);
		}
	}
	for (size_t i = 0; i < ARRAY_SIZE(c->no) && c->no[i]; i++) {
		const char *r = workspace_credential_rule(c->no[i]);
		if (r) {
			fail_msg("rule %s: %s should be copied, but matched %s", c->rule, c->no[i], r);
		}
	}
}

static void test_link_rule(void **state)
{
	static const struct {
		const char *rel, *target;
		const char *why; /* a word of the reason, or NULL: kept */
	} cases[] = {
		{ "l", "/etc/passwd", "absolute" },
		{ "sub/l", "/home/alice/src/x", "absolute" },
		{ "l", "../outside", "leaves the checkout" },
		{ "sub/l", "../../outside", "leaves the checkout" },
		{ "a/b/l", "../../../x", "leaves the checkout" },
		{ "a/l", "x/../../../y", "leaves the checkout" },
		{ "l", "a/b/../../..", "leaves the checkout" },
		{ "l", "a", NULL },
		{ "sub/l", "../a", NULL },
		{ "a/b/l", "../../c/./d", NULL },
		{ "a/l", "x/../../y", NULL },
		{ "sub/l", "..", NULL },
		{ "l", ".", NULL },
		{ "l", "dir/", NULL },
		{ "l", ".git/config", ".git" },
		{ "sub/l", "../.git", ".git" },
		{ "l", "vendor/x/.git/HEAD", ".git" },
		{ "l", ".env", "credential" },
		{ "sub/l", "../keys/id_ed25519", "credential" },
		{ "l", ".ssh", "credential" },
		{ "l", "home/.aws/", "credential" },
		{ "l", "config/credentials", "credential" },
		{ "l", "a\\nb", NULL },
		{ "l", "a\nb", "control character" },
		{ "l", "", "empty" },
	};
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		const char *why = workspace_link_rule(cases[i].rel, cases[i].target);
		if (cases[i].why ? !why || !strstr(why, cases[i].why) : why != NULL) {
			fail_msg("%s -> %s: got \"%s\", want %s", cases[i].rel, cases[i].target, why ? why : "kept",
				 cases[i].why ? cases[i].why : "kept");
		}
	}
	assert_ptr_equal(workspace_link_rule("l", ".env"), workspace_link_to_credential);
}

static int sh(const char *cmd)
{
	int r = system(cmd);
	return r;
}

/* A checkout of three tracked files (1 + 2 + 3 bytes) and one credential file. */
static void make_repo(const char *dir)
{
	char *cmd = NULL;
	assert_true(asprintf(&cmd,
			     "set -e; cd %s; git init -q .; printf 1 > a; printf 22 > b; printf 333 > c; "
			     "printf k > .env; git add -f a b c .env; "
			     "git -c user.email=t@t -c user.name=t commit -q -m i",
			     dir) > 0);
	assert_int_equal(sh(cmd), 0);
	free(cmd);
}

static int build(const char *dir, const char *out, uint64_t max_files, uint64_t max_bytes, struct workspace_stats *st,
		 struct image_diag *d)
{
	struct workspace_opts o = { .dir = dir, .out = out, .max_files = max_files, .max_bytes = max_bytes, .diag = d };
	(void)unlink(out);
	d->msg[0] = '\0';
	return workspace_build(&o, st);
}

/* Notices a build gave, one "rel: why" per line. */
struct notices {
	char text[16384];
	size_t n;
};

static void collect(void *ud, const char *rel, const char *why)
{
	struct notices *ns = ud;
	int k = snprintf(ns->text + ns->n, sizeof(ns->text) - ns->n, "%s: %s\n", rel, why);
	if (k > 0 && (size_t)k < sizeof(ns->text) - ns->n) {
		ns->n += (size_t)k;
	}
}

static bool noticed(const struct notices *ns, const char *rel, const char *why)
{
	char line[512];
	(void)snprintf(line, sizeof(line), "%s: ", rel);
	for (const char *p = ns->text; (p = strstr(p, line)); p++) {
		if (p == ns->text || p[-1] == '\n') {
			const char *nl = strchr(p, '\n');
			return memmem(p, (size_t)(nl - p), why, strlen(why)) != NULL;
		}
	}
	return false;
}

/* debugfs sees path in the image (as a file, a directory or a link). */
static bool in_image(const char *img, const char *path)
{
	char *cmd = NULL;
	int r;
	assert_true(asprintf(&cmd, "/sbin/debugfs -R 'stat \"%s\"' %s 2>/dev/null | grep -q '^Inode:'", path, img) > 0);
	r = system(cmd);
	free(cmd);
	return r == 0;
}

/* The link's target as the image holds it. */
static bool image_link_is(const char *img, const char *path, const char *target)
{
	char *cmd = NULL;
	int r;
	assert_true(asprintf(&cmd, "/sbin/debugfs -R 'stat \"%s\"' %s 2>/dev/null | grep -q 'Fast link dest: \"%s\"'",
			     path, img, target) > 0);
	r = system(cmd);
	free(cmd);
	return r == 0;
}

/*
 * A checkout with the new credential files, PGP key files and symbolic links
 * of every kind, all tracked: what the image holds and what the notices say.
 */
static void test_build_leaves_out(void **state)
{
	static const char *const creds[] = {
		".git-credentials",
		".docker/config.json",
		".kube/config",
		".pypirc",
		".config/gh/hosts.yml",
		"auth.json",
		".m2/settings.xml",
		".gradle/gradle.properties",
		".terraformrc",
		"prod.tfstate",
		"rclone.conf",
		"client.p12",
		"site.pfx",
		"trust.jks",
		"release.keystore",
		".bash_history",
		"credentials",
		".aws/credentials",
		"config/credentials/prod.yml",
	};
	static const char *const kept[] = { "a", "gradle.properties", "settings.xml", "KEYS.asc", "notes.txt" };
	char dir[] = "/tmp/test-ws-links-XXXXXX";
	char *out = NULL, *cmd = NULL;
	struct notices ns = { .n = 0 };
	struct workspace_stats st;
	struct image_diag d = { .msg = "" };
	struct workspace_opts o = { .dir = dir, .diag = &d, .notice = collect, .userdata = &ns };
	(void)state;
	if (access("/usr/bin/git", X_OK) != 0 || access("/sbin/mkfs.ext4", X_OK) != 0 ||
	    access("/sbin/debugfs", X_OK) != 0) {
		skip();
	}
	assert_non_null(mkdtemp(dir));
	assert_true(asprintf(&out, "%s.ext4", dir) > 0);
	o.out = out;
	assert_true(
		asprintf(&cmd,
			 "set -e; cd %s; git init -q .; printf 1 > a; mkdir -p sub; printf t > .env; "
			 "for f in .git-credentials .docker/config.json .kube/config .pypirc .config/gh/hosts.yml "
			 "auth.json .m2/settings.xml .gradle/gradle.properties .terraformrc prod.tfstate rclone.conf "
			 "client.p12 site.pfx trust.jks release.keystore .bash_history credentials .aws/credentials "
			 "config/credentials/prod.yml gradle.properties settings.xml; do "
			 "mkdir -p \"$(dirname $f)\"; printf s > $f; done; "
			 "printf -- '-----BEGIN PGP PUBLIC KEY BLOCK-----\\nx\\n' > KEYS.asc; "
			 "printf -- 'x\\n-----BEGIN PGP PRIVATE KEY BLOCK-----\\nx\\n' > priv.asc; "
			 "printf -- '-----BEGIN PGP SECRET KEY BLOCK-----\\n' > old.ASC; "
			 /* the mark across the copy loop's 64 KiB read boundary */
			 "head -c 65526 /dev/zero > straddle.asc; "
			 "printf -- '-----BEGIN PGP PRIVATE KEY BLOCK-----\\n' >> straddle.asc; "
			 "printf -- '-----BEGIN PGP PRIVATE KEY BLOCK-----\\n' > notes.txt; "
			 "ln -s /etc/passwd abs; ln -s ../../outside sub/out; ln -s ../a sub/in; ln -s sub insdir; "
			 "ln -s .env cfg; ln -s .git/config gitlink; ln -s .aws awslink; "
			 "git add -f .; git -c user.email=t@t -c user.name=t commit -q -m i",
			 dir) > 0);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	(void)unlink(out);
	if (workspace_build(&o, &st) != 0) {
		fail_msg("build: %s", d.msg);
	}
	for (size_t i = 0; i < ARRAY_SIZE(creds); i++) {
		char p[256];
		(void)snprintf(p, sizeof(p), "/%s", creds[i]);
		if (in_image(out, p) || !noticed(&ns, creds[i], "")) {
			fail_msg("%s should be left out with a notice; notices:\n%s", creds[i], ns.text);
		}
	}
	for (size_t i = 0; i < ARRAY_SIZE(kept); i++) {
		char p[256];
		(void)snprintf(p, sizeof(p), "/%s", kept[i]);
		if (!in_image(out, p)) {
			fail_msg("%s should be in the image", kept[i]);
		}
	}
	/* private keys in .asc files, public ones stay */
	assert_false(in_image(out, "/priv.asc"));
	assert_true(noticed(&ns, "priv.asc", "PGP private key block"));
	assert_false(in_image(out, "/old.ASC"));
	assert_false(in_image(out, "/straddle.asc"));
	assert_true(noticed(&ns, "straddle.asc", "PGP private key block"));
	/* links: only those that stay inside the checkout, to what is in the image */
	assert_true(image_link_is(out, "/sub/in", "../a"));
	assert_true(image_link_is(out, "/insdir", "sub"));
	assert_false(in_image(out, "/abs"));
	assert_true(noticed(&ns, "abs", "absolute path"));
	assert_false(in_image(out, "/sub/out"));
	assert_true(noticed(&ns, "sub/out", "leaves the checkout"));
	assert_false(in_image(out, "/cfg"));
	assert_true(noticed(&ns, "cfg", "credential"));
	assert_false(in_image(out, "/gitlink"));
	assert_true(noticed(&ns, "gitlink", ".git"));
	assert_false(in_image(out, "/awslink"));
	assert_true(noticed(&ns, "awslink", "credential"));
	assert_int_equal(st.symlinks, 2);
	/* creds, .env, 3 private .asc files, the links to .env and .aws */
	assert_int_equal(st.credentials, ARRAY_SIZE(creds) + 1 + 3 + 2);
	/* the bytes of the .asc files left out are not counted */
	assert_int_equal(st.bytes, 1 + 1 + 1 + 39 + 38);
	assert_true(asprintf(&cmd, "rm -rf %s %s", dir, out) > 0);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	free(out);
}

static void test_caps(void **state)
{
	char dir[] = "/tmp/test-ws-XXXXXX";
	char *out = NULL;
	struct workspace_stats st;
	struct image_diag d;
	(void)state;
	if (access("/usr/bin/git", X_OK) != 0 || access("/sbin/mkfs.ext4", X_OK) != 0) {
		skip();
	}
	assert_non_null(mkdtemp(dir));
	make_repo(dir);
	assert_true(asprintf(&out, "%s.ext4", dir) > 0);
	/* git lists 4 paths (.env included: it is left out after listing) */
	assert_int_equal(build(dir, out, 4, 6, &st, &d), 0);
	assert_int_equal(st.files, 3);
	assert_int_equal(st.bytes, 6);
	assert_int_equal(st.credentials, 1);
	/* one file past the listing cap */
	assert_int_equal(build(dir, out, 3, 0, &st, &d), -E2BIG);
	assert_non_null(strstr(d.msg, "WORKSPACE_MAX_FILES"));
	/* one byte past the size cap */
	assert_int_equal(build(dir, out, 0, 5, &st, &d), -EFBIG);
	assert_non_null(strstr(d.msg, "WORKSPACE_MAX_BYTES"));
	assert_int_equal(access(out, F_OK), -1);
	/* not a git checkout */
	{
		char plain[] = "/tmp/test-ws-plain-XXXXXX";
		assert_non_null(mkdtemp(plain));
		assert_int_equal(build(plain, out, 0, 0, &st, &d), -EIO);
		assert_non_null(strstr(d.msg, "git ls-files failed"));
		(void)rmdir(plain);
	}
	{
		char *cmd = NULL;
		assert_true(asprintf(&cmd, "rm -rf %s %s", dir, out) > 0);
		assert_int_equal(sh(cmd), 0);
		free(cmd);
	}
	free(out);
}

int main(void)
{
	struct CMUnitTest tests[4 + ARRAY_SIZE(new_rules)] = {
		cmocka_unit_test(test_credentials),
		cmocka_unit_test(test_link_rule),
		cmocka_unit_test(test_build_leaves_out),
		cmocka_unit_test(test_caps),
	};
	char names[ARRAY_SIZE(new_rules)][80];
	for (size_t i = 0; i < ARRAY_SIZE(new_rules); i++) {
		(void)snprintf(names[i], sizeof(names[i]), "credential rule %s", new_rules[i].rule);
		tests[4 + i] = (struct CMUnitTest){ .name = names[i],
						    .test_func = test_new_rule,
						    .initial_state = (void *)&new_rules[i] };
	}
	return _cmocka_run_group_tests("test-image-workspace", tests, ARRAY_SIZE(tests), NULL, NULL);
}
