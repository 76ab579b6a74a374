/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "cli/commands.h"
#include "cli/apiclient.h"
#include "daemon/door.h"
#include "json.h"

int cmd_stop(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "state-dir", required_argument, NULL, 'd' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *reply = NULL;
	const char *state_dir = NULL;
	char path[128];
	int ch, status = 0;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (ch != 'd') {
			fprintf(stderr, "usage: tkbox stop BOX [--state-dir D]\n");
			return 2;
		}
		state_dir = optarg;
	}
	if (optind + 1 != argc || !door_box_name_ok(argv[optind])) {
		fprintf(stderr, "usage: tkbox stop BOX [--state-dir D]\n");
		return 2;
	}
	(void)snprintf(path, sizeof(path), "/v1/boxes/%s/stop", argv[optind]);
	if (apiclient_call(state_dir, "POST", path, NULL, &status, &reply) < 0) {
		return 125;
	}
	if (status != 200) {
		apiclient_print_error("stop", status, reply);
		return status == 404 ? 1 : 125;
	}
	fprintf(stderr, "tkbox stop: box %s %s (its run stays open until export or rm)\n", argv[optind],
		json_string_value(json_object_get(reply, "state")));
	return 0;
}
