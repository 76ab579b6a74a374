/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "cli/commands.h"
#include "log.h"

/*
 * The e2e tests' entry to `tkbox images` and `tkbox workspace`: the same
 * command functions as tkbox, without the daemon, the signer client or the
 * VMM linked in, so the image tests build and run in any configuration.
 */

int main(int argc, char **argv)
{
	log_set_ident("tkbox");
	if (argc >= 2 && strcmp(argv[1], "images") == 0) {
		return cmd_images(argc - 1, argv + 1);
	}
	if (argc >= 2 && strcmp(argv[1], "workspace") == 0) {
		return cmd_workspace(argc - 1, argv + 1);
	}
	fprintf(stderr, "usage: tkbox-image-cli images|workspace ...\n");
	return 2;
}
