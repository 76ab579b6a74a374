/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "cli/commands.h"
#include "cli/apiclient.h"
#include "daemon/door.h"
#include "json.h"

int cmd_rm(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "force", no_argument, NULL, 'f' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *reply = NULL;
	const char *state_dir = NULL;
	bool force = false;
	char path[128];
	int ch, status = 0;

	while ((ch = getopt_long(argc, argv, "f", longopts, NULL)) != -1) {
		switch (ch) {
		case 'f':
			force = true;
			break;
		case 'd':
			state_dir = optarg;
			break;
		default:
			fprintf(stderr, "usage: tkbox rm [-f] BOX [--state-dir D]\n");
			return 2;
		}
	}
	if (optind + 1 != argc || !door_box_name_ok(argv[optind])) {
		fprintf(stderr, "usage: tkbox rm [-f] BOX [--state-dir D]\n");
		return 2;
	}
	if (force) {
		json_t *r2 = NULL;
		(void)snprintf(path, sizeof(path), "/v1/boxes/%s/stop", argv[optind]);
		if (apiclient_call(state_dir, "POST", path, NULL, &status, &r2) < 0) {
			return 125;
		}
		json_decref(r2);
	}
	(void)snprintf(path, sizeof(path), "/v1/boxes/%s", argv[optind]);
	if (apiclient_call(state_dir, "DELETE", path, NULL, &status, &reply) < 0) {
		return 125;
	}
	if (status != 200) {
		apiclient_print_error("rm", status, reply);
		return status == 404 ? 1 : 125;
	}
	fprintf(stderr, "tkbox rm: box %s removed (its run is closed)\n", argv[optind]);
	return 0;
}
