/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "cli/commands.h"
#include "image/workspace.h"
#include "log.h"

/* tkbox workspace build DIR -o FILE [--uid N] [--gid N] [--quiet]: the /workspace lower image, for tests and inspection. */

static void ws_notice(void *ud, const char *rel, const char *why)
{
	char q[LOG_QUOTE_BUFSIZE];
	if (*(bool *)ud) {
		return;
	}
	fprintf(stderr, "left out %s: %s\n", log_quote(rel, strlen(rel), q), why);
}

static int parse_id(const char *s, uint32_t *ret)
{
	char *end = NULL;
	unsigned long v;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || !end || *end || end == s || v > UINT32_MAX - 1) {
		return -EINVAL;
	}
	*ret = (uint32_t)v;
	return 0;
}

int cmd_workspace(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "uid", required_argument, NULL, 'u' },
		{ "gid", required_argument, NULL, 'g' },
		{ "quiet", no_argument, NULL, 'q' },
		{ NULL, 0, NULL, 0 },
	};
	struct image_diag diag = { .msg = "" };
	struct workspace_opts o = { .diag = &diag, .notice = ws_notice };
	struct workspace_stats st;
	bool quiet = false;
	int c, r;

	o.userdata = &quiet;
	optind = 1;
	while ((c = getopt_long(argc, argv, "o:q", longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			o.out = optarg;
			break;
		case 'u':
			if (parse_id(optarg, &o.uid) < 0) {
				fprintf(stderr, "tkbox workspace: bad --uid\n");
				return 2;
			}
			break;
		case 'g':
			if (parse_id(optarg, &o.gid) < 0) {
				fprintf(stderr, "tkbox workspace: bad --gid\n");
				return 2;
			}
			break;
		case 'q':
			quiet = true;
			break;
		default:
			fprintf(stderr, "usage: tkbox workspace build DIR -o FILE [--uid N] [--gid N] [--quiet]\n");
			return 2;
		}
	}
	if (optind + 2 != argc || strcmp(argv[optind], "build") != 0 || !o.out) {
		fprintf(stderr, "usage: tkbox workspace build DIR -o FILE [--uid N] [--gid N] [--quiet]\n");
		return 2;
	}
	o.dir = argv[optind + 1];
	r = workspace_build(&o, &st);
	if (r < 0) {
		fprintf(stderr, "tkbox workspace build: %s\n", diag.msg[0] ? diag.msg : tk_strerror(r));
		return 1;
	}
	printf("files %llu symlinks %llu bytes %llu credentials_left_out %llu other_left_out %llu\n",
	       (unsigned long long)st.files, (unsigned long long)st.symlinks, (unsigned long long)st.bytes,
	       (unsigned long long)st.credentials, (unsigned long long)st.skipped);
	return 0;
}
