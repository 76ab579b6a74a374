/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "cli/apiclient.h"
#include "cli/commands.h"
#include "cli/patchview.h"
#include "daemon/door.h"
#include "json.h"
#include "log.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tkbox apply BOX [--checkout DIR] [--allow-sensitive] [--dry-run] [--json] [--state-dir D]\n"
		"  --checkout DIR      where to write (default: the box's --workspace source)\n"
		"  --allow-sensitive   let files of Table 6 (CI, git behaviour, the next run, credentials) be written\n"
		"  --dry-run           show what would be written; nothing is decided or written\n"
		"  --json              print the daemon's answer as JSON\n");
}

static void on_approval(const char *id)
{
	char q[LOG_QUOTE_BUFSIZE];
	fprintf(stderr, "tkbox apply: held for a person's approval %s: tkbox-signer approvals approve %s (or reject)\n",
		log_quote(id, strlen(id), q), log_quote(id, strlen(id), q));
}

/* One line per string of a JSON array: "tkbox apply: PREFIX PATH". */
static void print_paths(const char *prefix, const json_t *a)
{
	for (size_t i = 0; i < json_array_size(a); i++) {
		const char *s = json_string_value(json_array_get(a, i));
		_cleanup_free_ char *t = s ? patchview_text(s) : NULL;

		if (t) {
			fprintf(stdout, "tkbox apply: %s %s\n", prefix, t);
		}
	}
}

/* The dry run's files: what would be written, with mode, size and the Table 6 kind. */
static void print_plan(const json_t *files)
{
	for (size_t i = 0; i < json_array_size(files); i++) {
		const json_t *f = json_array_get(files, i);
		const char *path = json_string_value(json_object_get(f, "path"));
		const char *op = json_string_value(json_object_get(f, "op"));
		const char *mode = json_string_value(json_object_get(f, "mode"));
		const char *kind = json_string_value(json_object_get(f, "sensitive"));
		_cleanup_free_ char *t = path ? patchview_text(path) : NULL, *k = kind ? patchview_text(kind) : NULL;

		if (!t || !op) {
			continue;
		}
		fprintf(stdout, "tkbox apply: would %s %s", op, t);
		if (mode) {
			fprintf(stdout, " (%s, %lld bytes)", mode,
				(long long)json_integer_value(json_object_get(f, "size")));
		}
		if (k) {
			fprintf(stdout, " [sensitive: %s]", k);
		}
		fputc('\n', stdout);
	}
}

/* A refusal: the message, its rule and path, what was written before it, what to do. */
static void print_refusal(int status, const json_t *reply)
{
	const json_t *e = json_object_get(reply, "error");
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *rule = json_string_value(json_object_get(e, "rule"));
	const char *path = json_string_value(json_object_get(e, "path"));
	const json_t *written = json_object_get(e, "written_paths");
	_cleanup_free_ char *r = rule ? patchview_text(rule) : NULL, *p = path ? patchview_text(path) : NULL;

	apiclient_print_error("apply", status, reply);
	if (r || p) {
		fprintf(stderr, "tkbox apply:   rule %s, path %s\n", r ? r : "-", p ? p : "-");
	}
	if (json_array_size(written) > 0) {
		fprintf(stderr, "tkbox apply: written before it stopped (not rolled back):\n");
		for (size_t i = 0; i < json_array_size(written); i++) {
			const char *s = json_string_value(json_array_get(written, i));
			_cleanup_free_ char *t = s ? patchview_text(s) : NULL;
			if (t) {
				fprintf(stderr, "tkbox apply:   %s\n", t);
			}
		}
	} else if (code && strcmp(code, "apply_partial") == 0) {
		fprintf(stderr, "tkbox apply: nothing was written\n");
	}
	patchview_notices(stderr, "apply", json_object_get(e, "notices"));
	if (code && strcmp(code, "apply_refused") == 0 && rule && strcmp(rule, "sensitive") == 0) {
		fprintf(stderr, "tkbox apply: check the file, then run tkbox apply again with --allow-sensitive\n");
	}
}

int cmd_apply(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "checkout", required_argument, NULL, 'c' },
		{ "allow-sensitive", no_argument, NULL, 'S' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'j' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *body = NULL, *reply = NULL;
	_cleanup_free_ char *checkout = NULL;
	struct apiclient *c = NULL;
	const char *state_dir = NULL, *box = NULL, *dir = NULL;
	bool allow_sensitive = false, dry_run = false, as_json = false;
	char path[128];
	int ch, r, ret = PATCHVIEW_EXIT_TKBOX;

	optind = 1;
	for (;;) {
		ch = getopt_long(argc, argv, "+", longopts, NULL);
		if (ch == -1) {
			if (!box && optind < argc) {
				box = argv[optind++];
				continue;
			}
			break;
		}
		switch (ch) {
		case 'c':
			dir = optarg;
			break;
		case 'S':
			allow_sensitive = true;
			break;
		case 'n':
			dry_run = true;
			break;
		case 'j':
			as_json = true;
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
	if (!box || optind != argc || !door_box_name_ok(box)) {
		usage(stderr);
		return 2;
	}
	if (dir) {
		/* The daemon takes an absolute path: the one this directory is now, symlinks resolved here. */
		checkout = realpath(dir, NULL);
		if (!checkout) {
			fprintf(stderr, "tkbox apply: the checkout %s: %s; nothing was written\n", dir,
				tk_strerror(negative_errno()));
			return PATCHVIEW_EXIT_REFUSED;
		}
	}
	body = json_pack("{s:s*,s:b,s:b}", "checkout", checkout, "allow_sensitive", allow_sensitive, "dry_run",
			 dry_run);
	if (!body) {
		fprintf(stderr, "tkbox apply: the checkout's path is not valid UTF-8; nothing was written\n");
		return PATCHVIEW_EXIT_REFUSED;
	}
	(void)snprintf(path, sizeof(path), "/v1/boxes/%s/apply", box);
	r = apiclient_connect(state_dir, &c);
	if (r < 0) {
		return PATCHVIEW_EXIT_TKBOX;
	}
	r = apiclient_request(c, "POST", path, body, false, on_approval);
	if (r >= 0) {
		r = apiclient_read_json(c, &reply);
	}
	if (r < 0) {
		/* The daemon may have written some files: its records (tkbox export) say which. */
		fprintf(stderr,
			"tkbox apply: the daemon's answer was cut or malformed (%s): check the checkout; the box's "
			"records name every file written\n",
			tk_strerror(r));
		goto out;
	}
	ret = patchview_apply_status(c->resp.status, reply);
	if (as_json) {
		if (json_dumpf(reply, stdout, JSON_COMPACT) < 0) {
			ret = PATCHVIEW_EXIT_TKBOX;
		}
		fputc('\n', stdout);
		goto out;
	}
	if (c->resp.status != 200) {
		print_refusal(c->resp.status, reply);
		goto out;
	}
	if (json_is_true(json_object_get(reply, "dry_run"))) {
		print_plan(json_object_get(reply, "files"));
		(void)fflush(stdout); /* before the lines on stderr */
		patchview_notices(stderr, "apply", json_object_get(reply, "notices"));
		fprintf(stderr, "tkbox apply: dry run: %zu file%s would be written; nothing was decided or written\n",
			json_array_size(json_object_get(reply, "files")),
			json_array_size(json_object_get(reply, "files")) == 1 ? "" : "s");
	} else {
		print_paths("wrote", json_object_get(reply, "written"));
		(void)fflush(stdout); /* before the lines on stderr */
		patchview_notices(stderr, "apply", json_object_get(reply, "notices"));
		fprintf(stderr, "tkbox apply: %zu file%s written; the box's run is closed (tkbox export %s)\n",
			json_array_size(json_object_get(reply, "written")),
			json_array_size(json_object_get(reply, "written")) == 1 ? "" : "s", box);
	}
	if (fflush(stdout) != 0) {
		ret = PATCHVIEW_EXIT_TKBOX;
	}
out:
	apiclient_free(c);
	return ret;
}
