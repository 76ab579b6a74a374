/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tkbox-host patch check FILE [--git] [--json]
 *
 * The patch door's reading of a patch file, for people and tests: the strict
 * parser (patch_parse) and, with --git, the cross-check against git apply's
 * own reading (patch_git_crosscheck, in a temporary directory removed
 * afterwards). Prints the files, or the refusal on stderr. Exit status: 0
 * accepted, 1 refused, 2 bad usage or the file could not be read.
 */
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "cli/commands.h"
#include "image/util.h"
#include "io.h"
#include "log.h"
#include "patch/patch-git.h"
#include "patch/patch.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: tkbox-host patch check FILE [--git] [--json]\n"
		   "\n"
		   "Read a git-format patch the way the patch door does (the strict parser) and, with --git,\n"
		   "check that git apply reads the same paths, binary flags, creations, deletions, modes and\n"
		   "line counts from it. Exit status: 0 accepted, 1 refused, 2 bad usage or unreadable file.\n");
}

static int print_json(const struct patch *p)
{
	json_t *root = json_object(), *files = json_array();
	char *s = NULL;
	int r = -ENOMEM;

	if (!root || !files || json_object_set_new(root, "files", files) < 0) {
		json_decref(files);
		goto out;
	}
	for (size_t i = 0; i < p->n_files; i++) {
		const struct patch_file *f = &p->files[i];
		const char *om = patch_mode_name(f->old_mode), *nm = patch_mode_name(f->new_mode);
		json_t *path = json_stringn(f->path, strlen(f->path));
		json_t *o = json_object();
		if (!path) {
			/* JSON strings are UTF-8: such a path is shown by the text form */
			json_decref(o);
			fprintf(stderr,
				"tkbox: patch check: a path is not UTF-8; use the text form (without --json)\n");
			r = -EINVAL;
			goto out;
		}
		if (!o || json_object_set_new(o, "path", path) < 0 ||
		    json_object_set_new(o, "op", json_string(patch_op_name(f->op))) < 0 ||
		    json_object_set_new(o, "old_mode", om ? json_string(om) : json_null()) < 0 ||
		    json_object_set_new(o, "new_mode", nm ? json_string(nm) : json_null()) < 0 ||
		    json_object_set_new(o, "binary", json_boolean(f->binary)) < 0 ||
		    json_object_set_new(o, "added", json_integer((json_int_t)f->added)) < 0 ||
		    json_object_set_new(o, "deleted", json_integer((json_int_t)f->deleted)) < 0 ||
		    json_array_append_new(files, o) < 0) {
			json_decref(o);
			goto out;
		}
	}
	s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!s) {
		goto out;
	}
	printf("%s\n", s);
	r = 0;
out:
	free(s);
	json_decref(root);
	return r;
}

static void print_text(const struct patch *p)
{
	char q[LOG_QUOTE_BUFSIZE];

	for (size_t i = 0; i < p->n_files; i++) {
		const struct patch_file *f = &p->files[i];
		const char *om = patch_mode_name(f->old_mode), *nm = patch_mode_name(f->new_mode);
		char counts[64];

		if (f->binary) {
			snprintf(counts, sizeof(counts), "binary");
		} else {
			snprintf(counts, sizeof(counts), "+%llu -%llu", (unsigned long long)f->added,
				 (unsigned long long)f->deleted);
		}
		printf("%-6s %s %s -> %s %s\n", patch_op_name(f->op), log_quote(f->path, strlen(f->path), q),
		       om ? om : "-", nm ? nm : "-", counts);
	}
	printf("%zu file(s), %llu bytes\n", p->n_files, (unsigned long long)p->bytes);
}

int cmd_patch(int argc, char **argv)
{
	const char *file = NULL;
	bool git = false, json = false;
	_cleanup_free_ char *data = NULL;
	struct patch p = { 0 };
	char diag[1024], q[LOG_QUOTE_BUFSIZE];
	size_t n = 0;
	int r;

	if (argc < 2 || strcmp(argv[1], "check") != 0) {
		usage(argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) ? stdout : stderr);
		return argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) ? 0 : 2;
	}
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--git") == 0) {
			git = true;
		} else if (strcmp(argv[i], "--json") == 0) {
			json = true;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		} else if (argv[i][0] == '-' && argv[i][1] != '\0') {
			fprintf(stderr, "tkbox: patch check: unknown option %s\n",
				log_quote(argv[i], strlen(argv[i]), q));
			usage(stderr);
			return 2;
		} else if (!file) {
			file = argv[i];
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (!file) {
		usage(stderr);
		return 2;
	}
	r = io_read_file(AT_FDCWD, file, PATCH_MAX_BYTES, IO_READ_REGULAR, &data, &n);
	if (r == -E2BIG) {
		fprintf(stderr,
			"tkbox: patch check: refused: the patch is larger than PATCH_MAX_BYTES (%zu bytes); split the "
			"change\n",
			PATCH_MAX_BYTES);
		return 1;
	}
	if (r < 0) {
		fprintf(stderr, "tkbox: patch check: cannot read %s: %s\n", log_quote(file, strlen(file), q),
			tk_strerror(r));
		return 2;
	}
	r = patch_parse((const uint8_t *)data, n, &p, diag, sizeof(diag));
	if (r < 0) {
		fprintf(stderr, "tkbox: patch check: refused: %s\n", diag[0] ? diag : tk_strerror(r));
		return r == -ENOMEM ? 2 : 1;
	}
	if (git) {
		char tmpl[] = "/tmp/tkbox-patch-check.XXXXXX";
		const char *tmp = mkdtemp(tmpl);
		_cleanup_free_ char *abs = NULL;
		if (!tmp) {
			r = negative_errno();
			fprintf(stderr, "tkbox: patch check: cannot make a temporary directory: %s\n", tk_strerror(r));
			patch_release(&p);
			return 2;
		}
		abs = realpath(file, NULL);
		if (!abs) {
			r = negative_errno();
		} else {
			diag[0] = '\0';
			r = patch_git_crosscheck(abs, &p, tmp, diag, sizeof(diag));
		}
		{
			int r2 = image_rm_rf_at(AT_FDCWD, tmp);
			if (r2 < 0) {
				fprintf(stderr, "tkbox: patch check: cannot remove %s: %s\n", tmp, tk_strerror(r2));
			}
		}
		if (r < 0) {
			fprintf(stderr, "tkbox: patch check: refused: %s\n", diag[0] ? diag : tk_strerror(r));
			patch_release(&p);
			return r == -EBADMSG ? 1 : 2;
		}
	}
	if (json) {
		r = print_json(&p);
	} else {
		print_text(&p);
		r = 0;
	}
	patch_release(&p);
	return r < 0 ? 2 : 0;
}
