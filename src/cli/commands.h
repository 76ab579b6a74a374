/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_CLI_COMMANDS_H
#define TKBOX_CLI_COMMANDS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "macro.h"

/*
 * tkbox subcommands: one file each (src/cli/cmd-NAME.c). Each returns the
 * process exit status documented in docs/cli.md; argv[0] is the subcommand.
 */
int cmd_version(int argc, char **argv);
/* src/verify (TKBOX_HAVE_VERIFY) */
int cmd_verify(int argc, char **argv);
/* issue 15: `tkbox view BUNDLE [--trust T] -o report.html` (cmd-view.c, view-html.c; with verify) */
int cmd_view(int argc, char **argv);
/* src/daemon (TKBOX_HAVE_DAEMON) */
int cmd_daemon(int argc, char **argv);
int cmd_run(int argc, char **argv);
/*
 * One `tkbox run --secret NAME=SOURCE@HOST[,HOST...][:Header]` (cmd-run.c): the source (env:VAR, file:PATH,
 * stdin read from stdin_fd, at most once: *stdin_used) is checked before anything else and no error ever quotes
 * the text after '='; the value is read into secmem (one trailing "\n" or "\r\n" of a file or stdin dropped) and
 * checked (secret.h). *ret's value is the caller's (secmem_free(value, value_len)). -errno with err set.
 */
struct egress_secret;
_wur_ int run_secret_parse(const char *arg, int stdin_fd, bool *stdin_used, struct egress_secret *ret, char *err,
			   size_t err_size);
/* A secret as the create request carries it: {name, value, hosts, header} (NULL when out of memory). */
json_t *run_secret_json(const struct egress_secret *s);
/* The create body's secret values, wiped in the tree (jansson copied them) once the request is sent. */
void run_secrets_wipe(json_t *body);
int cmd_exec(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_stop(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_export(int argc, char **argv);
/* The patch door (issue 14): a box's patch shown, and written into a checkout file by file. */
int cmd_diff(int argc, char **argv);
int cmd_apply(int argc, char **argv);
int cmd_approvals(int argc, char **argv);
/* issue 15: the MCP server over stdio (cmd-mcp.c, mcp.c) */
int cmd_mcp(int argc, char **argv);
/* issue 15 (tkbox-host only): `tkbox doctor [--json]` and `tkbox completion bash` */
int cmd_doctor(int argc, char **argv);
int cmd_completion(int argc, char **argv);
int cmd_approve(int argc, char **argv);
int cmd_reject(int argc, char **argv);
/* src/image (TKBOX_HAVE_IMAGES) */
int cmd_images(int argc, char **argv);
int cmd_workspace(int argc, char **argv);
/* src/patch: the apply prepare child (cmd-apply-prepare.c) */
int cmd_apply_prepare(int argc, char **argv);
/* src/patch: the apply writer child (cmd-apply-write.c) */
int cmd_apply_write(int argc, char **argv);
/* src/patch (tkbox-host only): `tkbox-host patch check FILE [--git] [--json]` */
int cmd_patch(int argc, char **argv);

#endif
