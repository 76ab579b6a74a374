/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test tool: read one JSON event per line on stdin and print, per line,
 * "ok" or "bad <first problem>" as verify/schema.c's event_schema_check
 * judges it (the per-type rules of tkbox verify), so that a general JSON
 * Schema implementation can be compared with it (tests/verify/schema-diff.py).
 * Lines that are not strict JSON print "unparsed".
 */
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "json.h"
#include "verify/schema.h"

int main(void)
{
	static char line[1 << 20];

	while (fgets(line, sizeof(line), stdin)) {
		size_t n = strlen(line);
		char why[EVENT_SCHEMA_WHY_MAX];
		json_t *ev = NULL;

		if (n > 0 && line[n - 1] == '\n') {
			line[--n] = '\0';
		}
		if (json_parse_strict(line, n, &JSON_OPTS_DEFAULT, &ev) < 0) {
			printf("unparsed\n");
			continue;
		}
		if (event_schema_check(ev, why, sizeof(why)) == 0) {
			printf("ok\n");
		} else {
			printf("bad %s\n", why);
		}
		json_decref(ev);
	}
	return 0;
}
