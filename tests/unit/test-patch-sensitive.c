/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "patch/sensitive.h"
#include "path.h"

struct vec {
	const char *path;
	const char *kind; /* NULL: not sensitive */
};

#define CI "CI and automation"
#define GIT "git behaviour"
#define NEXT "the next run"
#define CRED "credentials"

/* Table 6, each entry, at the top and deeper, in other cases; and near misses. */
static const struct vec vecs[] = {
	{ ".github/workflows/x.yml", CI },
	{ ".github/workflows/sub/x.yaml", CI },
	{ ".GitHub/Workflows/X.yml", CI },
	{ "pkg/.github/workflows/ci.yml", CI },
	{ ".github/actions/setup/action.yml", CI },
	{ ".github/dependabot.yml", CI },
	{ ".gitlab-ci.yml", CI },
	{ "sub/.gitlab-ci.yml", CI },
	{ ".circleci/config.yml", CI },
	{ ".husky/pre-commit", CI },
	{ ".husky/_/husky.sh", CI },
	{ "lefthook.yml", CI },
	{ "lefthook.yaml", CI },
	{ ".pre-commit-config.yaml", CI },
	{ "Jenkinsfile", CI },
	{ "jenkinsfile", CI },
	{ ".travis.yml", CI },
	{ "azure-pipelines.yml", CI },
	{ ".buildkite/pipeline.yml", CI },
	{ ".drone.yml", CI },
	{ ".gitignore", GIT },
	{ "a/b/.gitignore", GIT },
	{ ".gitattributes", GIT },
	{ "x/.GITATTRIBUTES", GIT },
	{ ".gitmodules", GIT },
	{ ".mailmap", GIT },
	{ "tkbox.yaml", NEXT },
	{ "tkbox.yml", NEXT },
	{ "svc/tkbox.yaml", NEXT },
	{ ".envrc", NEXT },
	{ "sub/.envrc", NEXT },
	{ ".devcontainer/devcontainer.json", NEXT },
	{ ".vscode/tasks.json", NEXT },
	{ ".vscode/settings.json", NEXT },
	{ ".vscode/launch.json", NEXT },
	{ ".cargo/config.toml", NEXT },
	{ ".cargo/config", NEXT },
	{ ".yarnrc.yml", NEXT },
	{ ".yarnrc", NEXT },
	{ ".npmrc", NEXT },
	{ ".pypirc", NEXT },
	{ ".tool-versions", NEXT },
	{ ".nvmrc", NEXT },
	/* the credential list is workspace_credential_rule's */
	{ ".env", CRED },
	{ "config/.env.local", CRED },
	{ "certs/server.key", CRED },
	{ ".ssh/config", CRED },
	{ "id_ed25519", CRED },
	{ ".aws/credentials", CRED },
	/* not sensitive */
	{ "README.md", NULL },
	{ "src/main.c", NULL },
	{ ".github/CODEOWNERS", NULL },
	{ ".github/workflows", NULL }, /* the directory itself is not a file in it */
	{ ".github", NULL },
	{ ".husky", NULL },
	{ "workflows/x.yml", NULL },
	{ "github/workflows/x.yml", NULL },
	{ ".github/workflowsx/x.yml", NULL },
	{ "x.gitignore", NULL },
	{ ".gitignore.bak", NULL },
	{ ".gitignorex", NULL },
	{ "tkbox.yaml.orig", NULL },
	{ "my.envrc", NULL },
	{ ".vscode/extensions.json", NULL },
	{ "vscode/settings.json", NULL },
	{ ".cargo/registry/x", NULL },
	{ "cargo/config.toml", NULL },
	{ "Jenkinsfile.old", NULL },
	{ ".env.example", NULL },
	{ "docs/settings.json", NULL },
};

static void test_table6(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(vecs) / sizeof(vecs[0]); i++) {
		const char *got = patch_sensitive_kind(vecs[i].path);
		if ((got == NULL) != (vecs[i].kind == NULL) || (got && strcmp(got, vecs[i].kind) != 0)) {
			fail_msg("%s: got %s, want %s", vecs[i].path, got ? got : "(none)",
				 vecs[i].kind ? vecs[i].kind : "(none)");
		}
	}
}

static void test_edges(void **state)
{
	(void)state;
	assert_null(patch_sensitive_kind(NULL));
	assert_null(patch_sensitive_kind(""));
	/* deeper than any path a patch may carry: never "not sensitive" */
	{
		size_t depth = PATH_MAX_DEPTH + 2, k = 0;
		char *p = malloc(depth * 2 + 1);
		assert_non_null(p);
		for (size_t i = 0; i < depth; i++) {
			p[k++] = 'a';
			p[k++] = '/';
		}
		p[k - 1] = '\0';
		assert_non_null(patch_sensitive_kind(p));
		free(p);
	}
	/* at the deepest a patch may carry, a plain name is not sensitive and a Table 6 name is */
	{
		char p[PATH_MAX_DEPTH * 2 + 32];
		size_t k = 0;
		for (size_t i = 0; i + 1 < PATH_MAX_DEPTH; i++) {
			p[k++] = 'a';
			p[k++] = '/';
		}
		memcpy(p + k, "b", 2);
		assert_null(patch_sensitive_kind(p));
		memcpy(p + k, ".envrc", 7);
		assert_string_equal(patch_sensitive_kind(p), NEXT);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table6),
		cmocka_unit_test(test_edges),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
