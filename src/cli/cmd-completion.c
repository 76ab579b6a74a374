/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tkbox completion bash: the completion script, contrib/completion/tkbox.bash as it was when this binary was
 * built (embedded by the root meson.build), so the file in the tree is its one source.
 */
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "cli/commands.h"
#include "tkbox-completion.h"

int cmd_completion(int argc, char **argv)
{
	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		printf("usage: tkbox completion bash\n"
		       "Prints the bash completion script. Load it with: source <(tkbox completion bash)\n");
		return 0;
	}
	if (argc != 2 || strcmp(argv[1], "bash") != 0) {
		fprintf(stderr, "usage: tkbox completion bash (bash is the one shell with a script so far)\n");
		return 2;
	}
	if (fwrite(tkbox_completion_bash, 1, sizeof(tkbox_completion_bash) - 1, stdout) !=
		    sizeof(tkbox_completion_bash) - 1 ||
	    fflush(stdout) != 0) {
		return 1;
	}
	return 0;
}
