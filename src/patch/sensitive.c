/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>
#include <strings.h>

#include "banned.h"
#include "image/workspace.h"
#include "patch/sensitive.h"
#include "path.h"

/*
 * Table 6. A pattern is a run of path segments, matched case-insensitively at
 * any depth, not only at the checkout's top: a nested project's CI file, hook
 * manager or tool config is read by whoever works in that directory (and a
 * monorepo's CI includes files from anywhere), so a name that steers
 * something counts wherever it is. Costs a --allow-sensitive too many, never
 * one too few.
 *
 * A pattern marked under names a directory: any path strictly
 * below it matches. Otherwise the pattern is the path's last segments.
 */

static const char kind_ci[] = "CI and automation";
static const char kind_git[] = "git behaviour";
static const char kind_next[] = "the next run";
static const char kind_cred[] = "credentials";

#define SENS_SEGS_MAX 2

struct sens_rule {
	const char *seg[SENS_SEGS_MAX]; /* the second NULL for a one-segment pattern */
	bool under; /* "dir/...": anything below dir */
	const char *kind;
};

static const struct sens_rule sens_rules[] = {
	{ { ".github", "workflows" }, true, kind_ci },
	{ { ".github", "actions" }, true, kind_ci },
	{ { ".github", "dependabot.yml" }, false, kind_ci },
	{ { ".gitlab-ci.yml", NULL }, false, kind_ci },
	{ { ".circleci", NULL }, true, kind_ci },
	{ { ".husky", NULL }, true, kind_ci },
	{ { "lefthook.yml", NULL }, false, kind_ci },
	{ { "lefthook.yaml", NULL }, false, kind_ci },
	{ { ".pre-commit-config.yaml", NULL }, false, kind_ci },
	{ { "Jenkinsfile", NULL }, false, kind_ci },
	{ { ".travis.yml", NULL }, false, kind_ci },
	{ { "azure-pipelines.yml", NULL }, false, kind_ci },
	{ { ".buildkite", NULL }, true, kind_ci },
	{ { ".drone.yml", NULL }, false, kind_ci },
	{ { ".gitignore", NULL }, false, kind_git },
	{ { ".gitattributes", NULL }, false, kind_git },
	{ { ".gitmodules", NULL }, false, kind_git },
	{ { ".mailmap", NULL }, false, kind_git },
	{ { "tkbox.yaml", NULL }, false, kind_next },
	{ { "tkbox.yml", NULL }, false, kind_next },
	{ { ".envrc", NULL }, false, kind_next },
	{ { ".devcontainer", NULL }, true, kind_next },
	{ { ".vscode", "tasks.json" }, false, kind_next },
	{ { ".vscode", "settings.json" }, false, kind_next },
	{ { ".vscode", "launch.json" }, false, kind_next },
	{ { ".cargo", "config.toml" }, false, kind_next },
	{ { ".cargo", "config" }, false, kind_next },
	{ { ".yarnrc.yml", NULL }, false, kind_next },
	{ { ".yarnrc", NULL }, false, kind_next },
	{ { ".npmrc", NULL }, false, kind_next },
	{ { ".pypirc", NULL }, false, kind_next },
	{ { ".tool-versions", NULL }, false, kind_next },
	{ { ".nvmrc", NULL }, false, kind_next },
};

struct seg {
	const char *p;
	size_t n;
};

static bool seg_is(const struct seg *s, const char *name)
{
	return strlen(name) == s->n && strncasecmp(s->p, name, s->n) == 0;
}

/* The pattern's segments equal segs[at..at+k). */
static bool run_at(const struct sens_rule *r, const struct seg *segs, size_t at, size_t k)
{
	for (size_t j = 0; j < k; j++) {
		if (!seg_is(&segs[at + j], r->seg[j])) {
			return false;
		}
	}
	return true;
}

static bool rule_matches(const struct sens_rule *r, const struct seg *segs, size_t ns)
{
	size_t k = r->seg[1] ? 2 : 1;

	if (ns < k) {
		return false;
	}
	if (!r->under) {
		return run_at(r, segs, ns - k, k);
	}
	/* a directory: something strictly below it */
	for (size_t at = 0; at + k < ns; at++) {
		if (run_at(r, segs, at, k)) {
			return true;
		}
	}
	return false;
}

const char *patch_sensitive_kind(const char *rel)
{
	struct seg segs[PATH_MAX_DEPTH + 1];
	size_t ns = 0;

	if (!rel || !rel[0]) {
		return NULL;
	}
	for (const char *p = rel; *p;) {
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (ns > PATH_MAX_DEPTH) {
			/* deeper than any path a patch may carry: path_verify refuses it first; fail safe here */
			return kind_next;
		}
		segs[ns].p = p;
		segs[ns++].n = n;
		p = e ? e + 1 : p + n;
	}
	for (size_t i = 0; i < ARRAY_SIZE(sens_rules); i++) {
		if (rule_matches(&sens_rules[i], segs, ns)) {
			return sens_rules[i].kind;
		}
	}
	if (workspace_credential_rule(rel)) {
		return kind_cred;
	}
	return NULL;
}
