/* SPDX-License-Identifier: Apache-2.0 */
/* Placeholder registered in meson.build by the lead (issue 15); its owner replaces it. */
#include <stdio.h>
#include "cli/commands.h"
int cmd_mcp(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "tkbox mcp: not built yet\n");
	return 2;
}
