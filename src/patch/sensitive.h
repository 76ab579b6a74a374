/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_PATCH_SENSITIVE_H
#define TKBOX_PATCH_SENSITIVE_H

/*
 * Files a patch may change only with --allow-sensitive (the reference's
 * Table 6). Pure. Returns the kind ("CI and automation", "git behaviour",
 * "the next run", "credentials") when the relative path is sensitive, else
 * NULL. Case-insensitive on names. The credential kind reuses
 * workspace_credential_rule() (src/image/workspace.c), the one credential list.
 *
 *   CI and automation: .github/workflows/..., .github/actions/..., .gitlab-ci.yml,
 *     .circleci/..., .husky/..., lefthook.yml, lefthook.yaml, .pre-commit-config.yaml,
 *     .github/dependabot.yml, Jenkinsfile, .travis.yml, azure-pipelines.yml,
 *     .buildkite/..., .drone.yml
 *   git behaviour: .gitignore, .gitattributes, .gitmodules, .mailmap (in any directory)
 *   the next run: tkbox.yaml, tkbox.yml, .envrc, .devcontainer/..., .vscode/tasks.json,
 *     .vscode/settings.json, .vscode/launch.json, .cargo/config.toml, .cargo/config,
 *     .yarnrc.yml, .yarnrc, .npmrc, .pypirc, .tool-versions, .nvmrc
 *   credentials: workspace_credential_rule() != NULL
 * ("dir/..." is anything below dir. Every pattern matches at any depth, not only
 * at the top: a nested project's CI or tool config steers whoever works there.)
 */
const char *patch_sensitive_kind(const char *rel);

#endif
