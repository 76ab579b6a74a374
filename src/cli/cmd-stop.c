/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "cli/commands.h"
#include "cli/apiclient.h"
#include "cli/patchview.h"
#include "daemon/door.h"
#include "json.h"

/* The patch saved at the stop (issue 14): its summary, or why none was saved. */
static void print_patch(const char *box, const json_t *patch)
{
	const char *err = json_string_value(json_object_get(patch, "error"));
	const char *sha = json_string_value(json_object_get(patch, "sha256"));
	_cleanup_free_ char *why = err ? patchview_text(err) : NULL;

	if (!patch) {
		return; /* a daemon that keeps no patch */
	}
	if (err) {
		fprintf(stderr, "tkbox stop: no patch was saved: %s\n", why ? why : "?");
		return;
	}
	if (!sha) {
		fprintf(stderr, "tkbox stop: the daemon's answer names no saved patch\n");
		return;
	}
	fprintf(stderr,
		"tkbox stop: saved the box's patch: %lld file%s, %lld bytes, sha256 %.64s (tkbox diff %s shows it, "
		"tkbox apply %s writes it)\n",
		(long long)json_integer_value(json_object_get(patch, "files")),
		json_integer_value(json_object_get(patch, "files")) == 1 ? "" : "s",
		(long long)json_integer_value(json_object_get(patch, "bytes")), sha, box, box);
	patchview_notices(stderr, "stop", json_object_get(patch, "notices"));
}

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
	fprintf(stderr, "tkbox stop: box %s %s (its run stays open until apply, export or rm)\n", argv[optind],
		json_string_value(json_object_get(reply, "state")));
	print_patch(argv[optind], json_object_get(reply, "patch"));
	return 0;
}
