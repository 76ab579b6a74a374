/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tkbox view BUNDLE [--trust TRUST] -o FILE
 *
 * Reads the bundle (and the trust file) under their caps, verifies with the
 * pure verifier of src/verify when a trust file is given, renders the page
 * (view-html.c) and writes it atomically (a temporary file, then rename).
 * Exit status as tkbox verify's: 0 verified (or not verified: no trust
 * file), 1 a check failed, 2 unusable bundle/trust or bad flags, 3 never
 * (view has no --strict); 2 also for bytes that are not a bundle, without
 * --trust too. The page is written in every case but bad flags, a file that
 * cannot be read and a failed write.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "cli/commands.h"
#include "cli/view-html.h"
#include "io.h"
#include "log.h"
#include "verify/bundle.h"
#include "verify/trust.h"
#include "verify/verify.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: tkbox view BUNDLE [--trust TRUST] -o FILE\n"
		   "\n"
		   "Write a self-contained HTML page of a bundle's run: the verification verdict (with --trust),\n"
		   "the crossings by door, and each record's seq and hash. Without --trust the page says\n"
		   "\"not verified\". Exit status: 0 written (verified, or no trust file given), 1 written but a\n"
		   "check failed, 2 unusable bundle or trust file (the page says why), bad flags, or the page\n"
		   "could not be written.\n");
}

struct view_args {
	const char *bundle;
	const char *trust;
	const char *out;
};

/* 0, 1 for --help, or -EINVAL (usage printed). */
static int parse_args(int argc, char **argv, struct view_args *a)
{
	char q[LOG_QUOTE_BUFSIZE];

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--trust") == 0 && i + 1 < argc) {
			a->trust = argv[++i];
		} else if (strncmp(argv[i], "--trust=", 8) == 0) {
			a->trust = argv[i] + 8;
		} else if ((strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) && i + 1 < argc) {
			a->out = argv[++i];
		} else if (strncmp(argv[i], "--output=", 9) == 0) {
			a->out = argv[i] + 9;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 1;
		} else if (argv[i][0] != '-' && !a->bundle) {
			a->bundle = argv[i];
		} else {
			fprintf(stderr, "tkbox view: unexpected argument %s\n", log_quote(argv[i], strlen(argv[i]), q));
			usage(stderr);
			return -EINVAL;
		}
	}
	if (!a->bundle || !a->out || !a->out[0]) {
		fprintf(stderr, "tkbox view: %s\n",
			!a->bundle ? "which bundle? (tkbox view BUNDLE -o FILE)"
				   : "where to? (-o FILE names the page to write)");
		usage(stderr);
		return -EINVAL;
	}
	return 0;
}

/* The name shown on the page: the bundle's last path component. */
static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s && s[1] ? s + 1 : path;
}

static int render_and_write(const struct view_args *a, const char *bundle, size_t n, const struct verify_report *rep)
{
	struct view_page page = { .title = base_name(a->bundle), .report = rep };
	struct buf out = { 0 };
	char q[LOG_QUOTE_BUFSIZE];
	bool unreadable;
	int r;

	r = buf_init(&out, VIEW_MAX_PAGE, 0);
	if (r >= 0) {
		r = view_render(bundle, n, &page, &out);
	}
	if (r < 0) {
		fprintf(stderr, "tkbox view: could not render the page: %s\n", tk_strerror(r));
		buf_release(&out);
		return r;
	}
	unreadable = r == VIEW_UNREADABLE;
	r = io_write_file_atomic(a->out, buf_ptr(&out), buf_len(&out), 0644);
	if (r < 0) {
		fprintf(stderr, "tkbox view: cannot write %s: %s\n", log_quote(a->out, strlen(a->out), q),
			tk_strerror(r));
	}
	buf_release(&out);
	return r < 0 ? r : unreadable ? VIEW_UNREADABLE : 0;
}

int cmd_view(int argc, char **argv)
{
	struct view_args a = { 0 };
	struct verify_opts opts = { .strict = false };
	struct verify_report rep = { 0 };
	_cleanup_free_ char *bundle = NULL, *trust = NULL;
	size_t bundle_n = 0, trust_n = 0;
	char q[LOG_QUOTE_BUFSIZE];
	int r, code = 0;

	r = parse_args(argc, argv, &a);
	if (r != 0) {
		return r > 0 ? 0 : 2;
	}
	if (a.trust) {
		r = io_read_file(AT_FDCWD, a.trust, TRUST_MAX_BYTES, IO_READ_REGULAR, &trust, &trust_n);
		if (r < 0) {
			fprintf(stderr, "tkbox view: cannot read the trust file %s: %s\n",
				log_quote(a.trust, strlen(a.trust), q), tk_strerror(r));
			return 2;
		}
	}
	r = io_read_file(AT_FDCWD, a.bundle, BUNDLE_MAX_FILE, IO_READ_REGULAR, &bundle, &bundle_n);
	if (r < 0) {
		fprintf(stderr, "tkbox view: cannot read the bundle %s: %s\n", log_quote(a.bundle, strlen(a.bundle), q),
			tk_strerror(r));
		return 2;
	}
	if (a.trust) {
		r = verify_bundle(bundle, bundle_n, trust, trust_n, &opts, &rep);
		if (r < 0) {
			fprintf(stderr, "tkbox view: %s\n", tk_strerror(r));
			return 2;
		}
		code = rep.exit_code;
	}
	r = render_and_write(&a, bundle, bundle_n, a.trust ? &rep : NULL);
	if (a.trust) {
		if (r >= 0) {
			fprintf(stderr, "tkbox view: %s: %s\n", log_quote(a.out, strlen(a.out), q),
				rep.integrity ? rep.integrity : "UNKNOWN");
		}
		verify_report_release(&rep);
	} else if (r == VIEW_UNREADABLE) {
		fprintf(stderr, "tkbox view: %s: the bundle could not be read (the page says why)\n",
			log_quote(a.out, strlen(a.out), q));
	} else if (r >= 0) {
		fprintf(stderr, "tkbox view: %s: not verified: no trust file given\n",
			log_quote(a.out, strlen(a.out), q));
	}
	/* A file that is not a bundle is unusable with or without a trust file (verify says 2 too). */
	return r < 0 || r == VIEW_UNREADABLE ? 2 : code;
}
