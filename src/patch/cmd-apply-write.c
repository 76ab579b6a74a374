/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "banned.h"
#include "buf.h"
#include "cli/child-confine.h"
#include "cli/commands.h"
#include "crypto.h"
#include "io.h"
#include "log.h"
#include "path.h"
#include "patch/apply-write.h"

/*
 * tkbox-host apply-write --checkout DIR --scratch DIR
 * The writer child of tkbox apply (src/patch/apply-write.h). It confines
 * itself first (SANDBOX_APPLY_WRITE: writes only beneath --checkout, reads
 * only --scratch, runs no program, opens no socket), then reads the write
 * order on stdin (it must name the same two directories) and writes the
 * files, one progress line each on stdout. Exit 0 all written, 1 stopped
 * (an error line says where and why), 2 usage.
 */

static void usage(void)
{
	fprintf(stderr, "usage: tkbox-host apply-write --checkout DIR --scratch DIR < ORDER\n");
}

/* An error line for the whole run (no file named): what the daemon reads when the writer cannot start. */
static int refuse(const char *rule, const char *msg)
{
	struct apply_line l = { .kind = APPLY_LINE_ERROR, .rule = (char *)rule };
	_cleanup_buf_ struct buf *b = NULL;
	int r;

	l.error = apply_text_clean(msg, APPLY_MAX_ERROR);
	r = l.error ? buf_new(APPLY_LINE_MAX, 0, &b) : -ENOMEM;
	if (r >= 0) {
		r = apply_line_encode(&l, b);
	}
	if (r >= 0) {
		r = io_write_all(STDOUT_FILENO, buf_ptr(b), buf_len(b));
	}
	if (r < 0) {
		fprintf(stderr, "tkbox-host apply-write: %s\n", msg);
	}
	free(l.error);
	return 1;
}

/* TKBOX_TEST_APPLY_STOP_AFTER=N (1..PATCH_MAX_FILES), else 0. */
static unsigned stop_after_from_env(void)
{
	const char *v = getenv(APPLY_WRITE_STOP_ENV);
	unsigned long n = 0;
	char *end = NULL;

	if (!v || !v[0]) {
		return 0;
	}
	errno = 0;
	n = strtoul(v, &end, 10);
	return errno == 0 && end && !*end && n <= PATCH_MAX_FILES ? (unsigned)n : 0;
}

int cmd_apply_write(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "checkout", required_argument, NULL, 'c' },
		{ "scratch", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *checkout = NULL, *scratch = NULL;
	_cleanup_buf_ struct buf *in = NULL;
	_cleanup_close_ int root = -1, sfd = -1, tree = -1;
	struct apply_plan order = { 0 };
	struct sandbox_report rep;
	unsigned stop_after;
	char diag[1024] = "", msg[APPLY_MAX_ERROR];
	uint8_t warm[32];
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			checkout = optarg;
			break;
		case 's':
			scratch = optarg;
			break;
		case 'h':
			usage();
			return 0;
		default:
			usage();
			return 2;
		}
	}
	if (optind != argc || !checkout || !scratch || !path_is_normal_abs(checkout) || !path_is_normal_abs(scratch)) {
		usage();
		return 2;
	}
	stop_after = stop_after_from_env();
	/* libcrypto loads what SHA-256 needs now: once confined the writer reads nothing but its two directories */
	if (sha256("", 0, warm) < 0) {
		return refuse("write-failed", "the writer cannot compute SHA-256; nothing was written");
	}
	{
		const char *ro[] = { scratch, NULL };
		r = child_confine(SANDBOX_APPLY_WRITE, checkout, ro, &rep);
	}
	if (r < 0) {
		(void)snprintf(msg, sizeof(msg),
			       "the writer could not confine itself (SANDBOX_APPLY_WRITE: %s; seccomp %s, no_new_privs "
			       "%s); tkbox writes nothing unconfined",
			       tk_strerror(r), rep.seccomp ? "on" : "off", rep.nnp ? "on" : "off");
		return refuse("SANDBOX_APPLY_WRITE", msg);
	}
	r = io_read_all_new(STDIN_FILENO, APPLY_PLAN_MAX_BYTES, 0, &in);
	if (r < 0) {
		(void)snprintf(
			msg, sizeof(msg),
			r == -E2BIG ? "the write order is larger than APPLY_PLAN_MAX_BYTES (%zu bytes); nothing was "
				      "written"
				    : "the write order could not be read (%zu bytes at most): %s; nothing was written",
			APPLY_PLAN_MAX_BYTES, tk_strerror(r));
		return refuse(r == -E2BIG ? "APPLY_PLAN_MAX_BYTES" : "order", msg);
	}
	r = apply_order_decode(buf_ptr(in), buf_len(in), &order, diag, sizeof(diag));
	if (r < 0) {
		(void)snprintf(msg, sizeof(msg), "the write order was refused: %s; nothing was written", diag);
		return refuse(r == -E2BIG ? "APPLY_PLAN_MAX_BYTES" : "order", msg);
	}
	if (strcmp(order.checkout, checkout) != 0 || strcmp(order.scratch, scratch) != 0) {
		apply_plan_release(&order);
		return refuse("order", "the write order names another checkout or scratch than the writer was confined "
				       "to; nothing was written");
	}
	root = open(checkout, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	sfd = root < 0 ? -1 : open(scratch, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	tree = sfd < 0 ? -1 : openat(sfd, "tree", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (tree < 0) {
		(void)snprintf(msg, sizeof(msg), "the %s could not be opened: %s; nothing was written",
			       root < 0 ? "checkout" : "scratch tree", tk_strerror(negative_errno()));
		apply_plan_release(&order);
		return refuse("write-failed", msg);
	}
	r = apply_write_files(&order, root, tree, STDOUT_FILENO, stop_after);
	apply_plan_release(&order);
	if (r < 0) {
		fprintf(stderr, "tkbox-host apply-write: its progress could not be written: %s\n", tk_strerror(r));
	}
	return r == 0 ? 0 : 1;
}
