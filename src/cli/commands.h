/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_CLI_COMMANDS_H
#define TKBOX_CLI_COMMANDS_H

/*
 * tkbox subcommands: one file each (src/cli/cmd-NAME.c). Each returns the
 * process exit status documented in docs/cli.md; argv[0] is the subcommand.
 */
int cmd_version(int argc, char **argv);
/* src/verify (TKBOX_HAVE_VERIFY) */
int cmd_verify(int argc, char **argv);
/* src/daemon (TKBOX_HAVE_DAEMON) */
int cmd_daemon(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_exec(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_stop(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_approvals(int argc, char **argv);
int cmd_approve(int argc, char **argv);
int cmd_reject(int argc, char **argv);
/* src/image (TKBOX_HAVE_IMAGES) */
int cmd_images(int argc, char **argv);
int cmd_workspace(int argc, char **argv);

#endif
