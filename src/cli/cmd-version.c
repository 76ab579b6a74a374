/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tkbox version [--json]: the release and the commit the binary was built
 * from (meson's vcs_tag in the root meson.build: HEAD's 12-digit abbreviation
 * and "-dirty" for uncommitted changes, "unknown" without .git). Nothing is probed: `tkbox
 * doctor` says what this host can run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "cli/commands.h"
#include "json.h"
#include "tkbox-commit.h"

#define DIRTY_SUFFIX "-dirty"

int cmd_version(int argc, char **argv)
{
	const char *commit = TKBOX_COMMIT;
	size_t n = strlen(commit), k = strlen(DIRTY_SUFFIX);
	bool dirty = n > k && strcmp(commit + n - k, DIRTY_SUFFIX) == 0;
	bool as_json = argc == 2 && strcmp(argv[1], "--json") == 0;

	if (argc > 2 || (argc == 2 && !as_json)) {
		fprintf(stderr, "usage: tkbox version [--json]\n");
		return 2;
	}
	if (dirty) {
		n -= k;
	}
	if (as_json) {
		/* {version, commit, dirty}: commit is hex or "unknown"; dirty: built with uncommitted changes */
		_cleanup_json_ json_t *v =
			json_pack("{s:s,s:s%,s:b}", "version", TKBOX_VERSION, "commit", commit, n, "dirty", dirty);
		char *s = v ? json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
		if (!s) {
			fprintf(stderr, "tkbox version: out of memory\n");
			return 1;
		}
		printf("%s\n", s);
		free(s);
		return 0;
	}
	printf("tkbox %s (commit %s)\n", TKBOX_VERSION, commit);
	return 0;
}
