/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "buf.h"
#include "cli/child-confine.h"
#include "cli/commands.h"
#include "log.h"
#include "patch/apply-prepare.h"

/*
 * tkbox-host apply-prepare --patch FILE --checkout DIR --scratch DIR
 *                         [--allow-sensitive] [--json]
 * The prepare child of tkbox apply (src/patch/apply-prepare.h): it confines
 * itself first (SANDBOX_APPLY_PREPARE: reads, writes only under --scratch,
 * no sockets, may run git), then plans. --json: the plan of apply-answer.h
 * on stdout (the daemon reads it); else a summary for a person. Exit 0
 * planned, 1 refused, 2 usage. --subprocess (tests): plan as the daemon
 * does, through apply_prepare_exec on this same program, and print the
 * decoded plan as --json would.
 */

static void usage(void)
{
	fprintf(stderr, "usage: tkbox-host apply-prepare --patch FILE --checkout DIR --scratch DIR "
			"[--allow-sensitive] [--json | --subprocess]\n");
}

static int print_json(const struct apply_plan *plan)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r = buf_new(APPLY_PLAN_MAX_BYTES, 0, &b);

	if (r >= 0) {
		r = apply_plan_encode(plan, b);
	}
	if (r >= 0 && (fwrite(buf_ptr(b), 1, buf_len(b), stdout) != buf_len(b) || fflush(stdout) != 0)) {
		r = -EIO;
	}
	if (r < 0) {
		fprintf(stderr, "tkbox-host apply-prepare: the plan cannot be written: %s\n", tk_strerror(r));
	}
	return r;
}

static void print_human(const struct apply_plan *plan)
{
	char q[LOG_QUOTE_BUFSIZE];

	for (size_t i = 0; i < plan->n_notices; i++) {
		const struct apply_notice *n = &plan->notices[i];
		fprintf(stderr, "notice: %s: %s\n", log_quote(n->path, strlen(n->path), q), n->why);
	}
	if (plan->error) {
		fprintf(stderr, "tkbox-host apply-prepare: %s (rule %s)\n", plan->error,
			plan->rule ? plan->rule : "none");
		return;
	}
	printf("patch %s: %zu file%s planned\n", plan->patch_sha256, plan->n_files, plan->n_files == 1 ? "" : "s");
	for (size_t i = 0; i < plan->n_files; i++) {
		const struct apply_file *f = &plan->files[i];
		printf("  %-6s %s", apply_op_name(f->op), log_quote(f->path, strlen(f->path), q));
		if (f->op != PATCH_DELETE) {
			printf(" %s %llu bytes sha256 %s", patch_mode_name(f->mode), (unsigned long long)f->size,
			       f->sha256);
		}
		if (f->sensitive) {
			printf(" (sensitive: %s)", f->sensitive);
		}
		printf("\n");
	}
}

/* --subprocess: the daemon's way (unconfined here: the child confines itself). */
static int run_subprocess(const struct apply_prepare_opts *o)
{
	_cleanup_free_ char *self = realpath("/proc/self/exe", NULL);
	struct apply_plan plan = { 0 };
	char diag[1024] = "";
	int r;

	if (!self) {
		fprintf(stderr, "tkbox-host apply-prepare: /proc/self/exe: %s\n", tk_strerror(negative_errno()));
		return 1;
	}
	r = apply_prepare_exec(self, o->patch_file, o->checkout, o->scratch, o->allow_sensitive, &plan, diag,
			       sizeof(diag));
	if (r < 0) {
		fprintf(stderr, "tkbox-host apply-prepare: %s\n", diag[0] ? diag : tk_strerror(r));
		return 1;
	}
	r = print_json(&plan);
	r = r < 0 || plan.error ? 1 : 0;
	apply_plan_release(&plan);
	return r;
}

int cmd_apply_prepare(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "patch", required_argument, NULL, 'p' },   { "checkout", required_argument, NULL, 'c' },
		{ "scratch", required_argument, NULL, 's' }, { "allow-sensitive", no_argument, NULL, 'a' },
		{ "json", no_argument, NULL, 'j' },	     { "subprocess", no_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },	     { NULL, 0, NULL, 0 },
	};
	struct apply_prepare_opts o = { 0 };
	struct apply_plan plan = { 0 };
	struct sandbox_report rep = { 0 };
	bool json = false, sub = false;
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			o.patch_file = optarg;
			break;
		case 'c':
			o.checkout = optarg;
			break;
		case 's':
			o.scratch = optarg;
			break;
		case 'a':
			o.allow_sensitive = true;
			break;
		case 'j':
			json = true;
			break;
		case 'S':
			sub = true;
			break;
		case 'h':
			usage();
			return 0;
		default:
			usage();
			return 2;
		}
	}
	if (optind != argc || !o.patch_file || !o.checkout || !o.scratch || o.scratch[0] != '/') {
		usage();
		return 2;
	}
	if (sub) {
		return run_subprocess(&o);
	}
	/* where the user's global git config is (the three values read from it); nothing else of the env */
	o.user_home = getenv("HOME");
	o.user_xdg = getenv("XDG_CONFIG_HOME");

	r = child_confine(SANDBOX_APPLY_PREPARE, o.scratch, NULL, &rep);
	if (r < 0) {
		char msg[512];
		(void)snprintf(msg, sizeof(msg),
			       "apply refused: the prepare step could not confine itself (SANDBOX_APPLY_PREPARE: %s; "
			       "seccomp %s, no_new_privs %s); tkbox plans no apply unconfined",
			       tk_strerror(r), rep.seccomp ? "on" : "off", rep.nnp ? "on" : "off");
		plan.checkout = strdup(o.checkout);
		plan.scratch = strdup(o.scratch);
		r = apply_plan_set_error(&plan, msg, "SANDBOX_APPLY_PREPARE", NULL);
		if (r < 0 || !plan.checkout || !plan.scratch) {
			fprintf(stderr, "tkbox-host apply-prepare: %s\n", msg);
			apply_plan_release(&plan);
			return 1;
		}
	} else {
		r = apply_prepare(&o, &plan);
		if (r < 0) {
			fprintf(stderr, "tkbox-host apply-prepare: %s\n", tk_strerror(r));
			return 1;
		}
	}
	if (json) {
		r = print_json(&plan);
	} else {
		print_human(&plan);
		r = 0;
	}
	c = r < 0 || plan.error ? 1 : 0;
	apply_plan_release(&plan);
	return c;
}
