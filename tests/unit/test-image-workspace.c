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
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_credentials),
		cmocka_unit_test(test_caps),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
