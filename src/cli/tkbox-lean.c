/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tkbox: the client commands, in a binary that links libc, jansson,
 * libcrypto and zlib only, so that `tkbox exec` starts fast. Every other
 * command (daemon and its --supervise re-exec, images, workspace, --help,
 * an unknown word) belongs to tkbox-host (src/cli/tkbox.c, which also has
 * every client command): it runs with the same argv from the directory this
 * binary is in, never from $PATH, so a tkbox always runs its own tkbox-host.
 * tests/daemon/no-signer-internals.sh checks that no libcurl or libarchive
 * creeps back in here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "banned.h"
#include "cli/commands.h"
#include "log.h"

#define TKBOX_HOST "tkbox-host"

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
};

/* The same names and functions as tkbox-host's table (src/cli/tkbox.c). */
static const struct command client_commands[] = {
#ifdef TKBOX_HAVE_DAEMON
	{ "run", cmd_run },	    { "exec", cmd_exec },	  { "ls", cmd_ls },
	{ "stop", cmd_stop },	    { "diff", cmd_diff },	  { "apply", cmd_apply },
	{ "rm", cmd_rm },	    { "export", cmd_export },	  { "approvals", cmd_approvals },
	{ "approve", cmd_approve }, { "reject", cmd_reject },	  { "mcp", cmd_mcp },
#endif
#ifdef TKBOX_HAVE_VERIFY
	{ "verify", cmd_verify },   { "view", cmd_view },
#endif
	{ "version", cmd_version }, { "--version", cmd_version },
};

/* Run tkbox-host from this binary's directory with argv as it is; returns only on failure. */
static int exec_host(char **argv)
{
	_cleanup_free_ char *self = realpath("/proc/self/exe", NULL);
	_cleanup_free_ char *host = NULL;
	const char *slash;
	int r;

	if (!self) {
		r = -errno;
		fprintf(stderr, "tkbox: cannot find its own binary through /proc/self/exe (%s): is /proc mounted?\n",
			tk_strerror(r));
		return 125;
	}
	slash = strrchr(self, '/');
	if (asprintf(&host, "%.*s/%s", (int)(slash - self), self, TKBOX_HOST) < 0) {
		host = NULL;
		fprintf(stderr, "tkbox: out of memory\n");
		return 125;
	}
	(void)execv(host, argv);
	r = -errno;
	if (r == -ENOENT) {
		fprintf(stderr, "tkbox: " TKBOX_HOST " is missing next to %s: reinstall tkbox\n", self);
	} else {
		fprintf(stderr, "tkbox: cannot run %s (%s): reinstall tkbox\n", host, tk_strerror(r));
	}
	return 125;
}

int main(int argc, char **argv)
{
	log_set_ident("tkbox");
	if (argc >= 2) {
		for (size_t i = 0; i < ARRAY_SIZE(client_commands); i++) {
			if (strcmp(argv[1], client_commands[i].name) == 0) {
				return client_commands[i].fn(argc - 1, argv + 1);
			}
		}
	}
	return exec_host(argv);
}
