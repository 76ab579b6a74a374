/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>

#include "banned.h"
#include "cli/commands.h"

int cmd_version(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	printf("tkbox %s\n", TKBOX_VERSION);
	return 0;
}
