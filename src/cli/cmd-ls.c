/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "cli/commands.h"
#include "cli/apiclient.h"
#include "json.h"

static const char *str(const json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "-";
}

int cmd_ls(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *reply = NULL;
	const char *state_dir = NULL;
	bool as_json = false;
	int ch, status = 0;
	json_t *boxes, *b;
	size_t i;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'j':
			as_json = true;
			break;
		case 'd':
			state_dir = optarg;
			break;
		default:
			fprintf(stderr, "usage: tkbox ls [--json] [--state-dir D]\n");
			return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "usage: tkbox ls [--json] [--state-dir D]\n");
		return 2;
	}
	if (apiclient_call(state_dir, "GET", "/v1/boxes", NULL, &status, &reply) < 0) {
		return 125;
	}
	if (status != 200) {
		apiclient_print_error("ls", status, reply);
		return 125;
	}
	boxes = json_object_get(reply, "boxes");
	if (as_json) {
		char *s = json_dumps(boxes, JSON_INDENT(2) | JSON_SORT_KEYS);
		if (s) {
			printf("%s\n", s);
			free(s);
		}
		return 0;
	}
	printf("%-20s %-9s %-5s %-9s %-6s %-34s %s\n", "NAME", "STATE", "ACCEL", "ISOLATION", "EXECS", "RUN", "IMAGE");
	json_array_foreach(boxes, i, b) {
		printf("%-20s %-9s %-5s %-9s %-6lld %-34s %s\n", str(b, "name"), str(b, "state"), str(b, "accel"),
		       str(b, "isolation"), (long long)json_integer_value(json_object_get(b, "execs")),
		       str(b, "run_id"), str(b, "image"));
	}
	return 0;
}
