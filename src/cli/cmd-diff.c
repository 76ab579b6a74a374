/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "banned.h"
#include "cli/apiclient.h"
#include "cli/commands.h"
#include "cli/patchview.h"
#include "crypto.h"
#include "daemon/door.h"
#include "io.h"
#include "json.h"
#include "log.h"

#define DIFF_EXIT_REFUSED 1
#define DIFF_EXIT_TKBOX 125

static void usage(FILE *f)
{
	fprintf(f, "usage: tkbox diff BOX [--stat] [--json] [-o FILE] [--state-dir D]\n"
		   "  --stat      a line per file instead of the patch\n"
		   "  --json      the summary as JSON instead of the patch\n"
		   "  -o FILE     write the patch to FILE (byte for byte)\n");
}

int cmd_diff(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "stat", no_argument, NULL, 's' },	    { "json", no_argument, NULL, 'j' },
		{ "output", required_argument, NULL, 'o' }, { "state-dir", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },	    { NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *summary = NULL, *out_json = NULL;
	struct apiclient *c = NULL;
	struct patch p = { 0 };
	struct buf body = { 0 };
	const char *state_dir = NULL, *out = NULL, *box = NULL;
	bool stat = false, as_json = false, saved;
	char path[128], hex[SHA256_HEX_LEN + 1], diag[512] = "";
	json_t *notices;
	int ch, r, ret = DIFF_EXIT_TKBOX;

	optind = 1;
	for (;;) {
		ch = getopt_long(argc, argv, "+o:", longopts, NULL);
		if (ch == -1) {
			if (!box && optind < argc) {
				box = argv[optind++];
				continue;
			}
			break;
		}
		switch (ch) {
		case 's':
			stat = true;
			break;
		case 'j':
			as_json = true;
			break;
		case 'o':
			out = optarg;
			break;
		case 'd':
			state_dir = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!box || optind != argc || !door_box_name_ok(box) || (stat && as_json)) {
		usage(stderr);
		return 2;
	}
	(void)snprintf(path, sizeof(path), "/v1/boxes/%s/diff", box);
	r = apiclient_connect(state_dir, &c);
	if (r < 0) {
		return DIFF_EXIT_TKBOX;
	}
	r = apiclient_request(c, "GET", path, NULL, false, NULL);
	if (r < 0) {
		fprintf(stderr, "tkbox diff: the daemon's answer was cut or malformed: %s\n", tk_strerror(r));
		goto out;
	}
	if (c->resp.status != 200) {
		apiclient_print_refusal(c, "diff");
		ret = c->resp.status >= 400 && c->resp.status < 500 ? DIFF_EXIT_REFUSED : DIFF_EXIT_TKBOX;
		goto out;
	}
	r = apiclient_read_body(c, PATCH_MAX_BYTES, &body);
	if (r < 0) {
		fprintf(stderr, "tkbox diff: receiving the patch: %s\n", tk_strerror(r));
		goto out;
	}
	/* What is shown is what the daemon keeps: its digest, and the strict parser's reading. */
	r = sha256_hex(buf_ptr(&body), buf_len(&body), hex);
	if (r < 0 || !c->resp.patch_sha256 || strcmp(hex, c->resp.patch_sha256) != 0) {
		fprintf(stderr, "tkbox diff: the patch received does not match the digest the daemon gave; nothing "
				"shown\n");
		goto out;
	}
	r = patch_parse(buf_ptr(&body), buf_len(&body), &p, diag, sizeof(diag));
	if (r < 0) {
		_cleanup_free_ char *d = patchview_text(diag[0] ? diag : tk_strerror(r));
		fprintf(stderr, "tkbox diff: the patch received does not parse: %s\n", d ? d : "?");
		goto out;
	}
	summary = patchview_summary_decode(c->resp.patch_summary);
	notices = json_object_get(summary, "notices");
	saved = json_is_true(json_object_get(summary, "saved"));
	if (out) {
		r = io_write_file_atomic(out, buf_ptr(&body), buf_len(&body), 0600);
		if (r < 0) {
			fprintf(stderr, "tkbox diff: writing %s: %s\n", out, tk_strerror(r));
			goto out;
		}
	}
	if (as_json) {
		json_int_t total = json_integer_value(json_object_get(summary, "notices_total"));
		out_json = patchview_json(&p, hex, buf_len(&body), saved, notices,
					  total > 0 ? (int64_t)total : (int64_t)json_array_size(notices));
		if (!out_json || json_dumpf(out_json, stdout, JSON_COMPACT) < 0) {
			fprintf(stderr, "tkbox diff: out of memory\n");
			goto out;
		}
		fputc('\n', stdout);
	} else if (stat) {
		patchview_stat(stdout, &p);
	} else if (!out) {
		/* The agent's text: on a terminal, no control sequence of it is ever acted on. */
		if (isatty(STDOUT_FILENO)) {
			patchview_write_safe(stdout, buf_ptr(&body), buf_len(&body));
		} else {
			(void)fwrite(buf_ptr(&body), 1, buf_len(&body), stdout);
		}
	}
	/* What went to stdout comes before the lines on stderr when both reach one terminal. */
	(void)fflush(stdout);
	if (!as_json) {
		json_int_t total = json_integer_value(json_object_get(summary, "notices_total"));

		patchview_notices(stderr, "diff", notices);
		if (total > (json_int_t)json_array_size(notices)) {
			fprintf(stderr,
				"tkbox diff: %lld more files were left out (their notices did not fit in the daemon's "
				"answer; a saved patch's patch.json in the box's state lists them all)\n",
				(long long)(total - (json_int_t)json_array_size(notices)));
		}
		if (out) {
			fprintf(stderr, "tkbox diff: wrote %s (%zu bytes, %zu file%s, sha256 %s)%s\n", out,
				buf_len(&body), p.n_files, p.n_files == 1 ? "" : "s", hex,
				saved ? " (the patch saved at stop)" : "");
		}
	}
	if (fflush(stdout) != 0) {
		fprintf(stderr, "tkbox diff: writing the output: %s\n", tk_strerror(negative_errno()));
		goto out;
	}
	ret = 0;
out:
	patch_release(&p);
	buf_release(&body);
	apiclient_free(c);
	return ret;
}
