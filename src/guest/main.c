/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "banned.h"

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--version") == 0) {
		printf("tkbox-guest %s\n", TKBOX_VERSION);
		return 0;
	}
	fprintf(stderr, "usage: tkbox-guest --version\n");
	return 2;
}
