/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "cli/commands.h"
#include "log.h"

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *help;
};

static const struct command commands[] = {
#ifdef TKBOX_HAVE_DAEMON
	{ "daemon", cmd_daemon, "run the tkbox daemon (needs a signer unless --unrecorded)" },
	{ "run", cmd_run, "create and start a box" },
	{ "exec", cmd_exec, "run a command in a box, decided by the signer first" },
	{ "ls", cmd_ls, "list boxes" },
	{ "stop", cmd_stop, "stop a box and save its patch" },
	{ "diff", cmd_diff, "show a box's changes to /workspace as a git patch" },
	{ "apply", cmd_apply, "write a stopped box's patch into a checkout, each file decided by the signer" },
	{ "rm", cmd_rm, "remove a stopped box" },
	{ "export", cmd_export, "export a box's run as a .tkb bundle and its trust file" },
	{ "approvals", cmd_approvals, "list the connections boxes wait to have approved" },
	{ "approve", cmd_approve, "let a box reach the host:port of a pending approval" },
	{ "reject", cmd_reject, "refuse a pending approval" },
	{ "mcp", cmd_mcp,
	  "serve the Model Context Protocol over stdio (an agent's tools: run, exec, diff, stop, export, ls)" },
	{ "doctor", cmd_doctor, "check this host: KVM, QEMU, the signer, the egress resolver, disk space" },
	{ "completion", cmd_completion, "print the bash completion script (tkbox completion bash)" },
#endif
#ifdef TKBOX_HAVE_IMAGES
	{ "images", cmd_images, "list, pull, remove and prune cached images" },
	{ "workspace", cmd_workspace, "build a workspace image from a git checkout" },
#endif
#ifdef TKBOX_HAVE_VERIFY
	{ "verify", cmd_verify, "verify a .tkb bundle offline against a pinned trust file" },
	{ "view", cmd_view, "write a bundle as one self-contained HTML report (view BUNDLE [--trust T] -o FILE)" },
#endif
	{ "patch", cmd_patch, "check a patch file as the patch door reads it (patch check FILE [--git] [--json])" },
	{ "apply-prepare", cmd_apply_prepare, "plan a saved patch against a checkout (the apply prepare child)" },
	{ "apply-write", cmd_apply_write, "write decided files into a checkout (the apply writer child)" },
	{ "version", cmd_version, "print the version" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: tkbox COMMAND [ARGS...]\n\ncommands:\n");
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
	}
}

int main(int argc, char **argv)
{
	log_set_ident("tkbox");
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--version") == 0) {
		return cmd_version(argc - 1, argv + 1);
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
		if (strcmp(argv[1], commands[i].name) == 0) {
			return commands[i].fn(argc - 1, argv + 1);
		}
	}
	fprintf(stderr, "tkbox: unknown command '%.64s' (see 'tkbox --help')\n", argv[1]);
	return 2;
}
