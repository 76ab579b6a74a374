/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "banned.h"
#include "daemon/crossing.h"
#include "daemon/signer-link.h"
#include "json.h"

/*
 * The crossing engine against a real dev signer (tests/daemon/crossing.sh
 * starts it and passes its socket and pid). The door is a probe whose act
 * counts how often it ran; the box records its events in memory. Each test
 * is one row of the fail-closed table (docs/architecture.md).
 */

static const char *sock;
static pid_t signer_pid;
static char *run_id, *run_token;

struct probe_box {
	unsigned acts, afters, signer_back, lost;
	int lost_r;
	char events[2048]; /* the event names, space-separated */
	bool kill_signer_in_act;
};

static void box_event(void *box, bool problem, const char *event, json_t *extra)
{
	struct probe_box *b = box;
	size_t n = strlen(b->events);

	(void)problem;
	(void)snprintf(b->events + n, sizeof(b->events) - n, "%s ", event);
	json_decref(extra);
}

static void box_signer_back(void *box)
{
	((struct probe_box *)box)->signer_back++;
}

static void box_complete_lost(void *box, int r)
{
	struct probe_box *b = box;

	b->lost++;
	b->lost_r = r;
}

/* The must-keep observation, sent to the signer on the test's run. */
static int box_observe_keep(void *box, const char *kind, json_t *data, char *err, size_t err_size)
{
	(void)box;
	return signer_link_once(
		signer_link_request_id(json_pack("{s:s,s:s,s:s,s:s,s:o}", "method", "observe", "run_id", run_id,
						 "run_token", run_token, "kind", kind, "data", data)),
		NULL, err, err_size);
}

static const struct crossing_host_ops probe_host = {
	.event = box_event,
	.signer_back = box_signer_back,
	.complete_lost = box_complete_lost,
	.observe_keep = box_observe_keep,
};

/* The signer is not our child (crossing.sh's): wait until it is a zombie or gone, its sockets closed. */
static void signer_wait_dead(void)
{
	char path[64];

	(void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)signer_pid);
	for (;;) {
		char buf[512] = "";
		FILE *f = fopen(path, "r");
		const char *close_paren;
		if (!f) {
			return;
		}
		(void)!fread(buf, 1, sizeof(buf) - 1, f);
		(void)fclose(f);
		close_paren = strrchr(buf, ')');
		if (!close_paren || close_paren[1] == '\0' || close_paren[2] == 'Z' || close_paren[2] == 'X') {
			return;
		}
		(void)usleep(10000);
	}
}

static int probe_act(struct crossing *x, struct crossing_result *ret)
{
	struct probe_box *b = x->box;

	b->acts++;
	if (b->kill_signer_in_act) {
		/* The signer goes away while the act runs: its completion cannot be recorded. */
		assert_int_equal(kill(signer_pid, SIGKILL), 0);
		signer_wait_dead();
	}
	*ret = (struct crossing_result){ .ok = true, .has_exit = true, .exit = { EXIT_KIND_EXITED, 0 } };
	return 0;
}

static void probe_after(struct crossing *x, const struct crossing_result *res)
{
	(void)res;
	((struct probe_box *)x->box)->afters++;
}

static const struct crossing_door probe_door = {
	.name = "probe",
	.tool = "Bash",
	.act = probe_act,
	.after = probe_after,
};

/* A door whose crossings are observed, not decided. */
static int observe_cross(struct probe_box *b, const char *kind, struct crossing *x)
{
	const struct crossing_door door = {
		.name = "seen", .tool = "WebFetch", .observe_kind = kind, .act = probe_act, .after = probe_after
	};
	json_t *args = json_pack("{s:s,s:i,s:s,s:s}", "host", "169.254.169.254", "port", 80, "decision", "deny",
				 "reason", "metadata address");
	int r;

	assert_non_null(args);
	*x = (struct crossing){ .door = &door,
				.host = &probe_host,
				.box = b,
				.args = args,
				.seq = 1,
				.run_id = run_id,
				.run_token = run_token,
				.client_fd = -1 };
	r = crossing_run(x);
	x->door = NULL;
	json_decref(args);
	return r;
}

/* One crossing of command line through the probe door. */
static int cross(struct probe_box *b, const char *line, bool unrecorded, bool with_run, struct crossing *x)
{
	static int64_t seq;
	json_t *args = json_pack("{s:s,s:s,s:s}", "command", line, "cwd", "/", "stdin", "none");
	int r;

	assert_non_null(args);
	*x = (struct crossing){ .door = &probe_door,
				.host = &probe_host,
				.box = b,
				.args = args,
				.seq = ++seq,
				.unrecorded = unrecorded,
				.run_id = with_run ? run_id : NULL,
				.run_token = with_run ? run_token : NULL,
				.client_fd = -1,
				.approval_wait_ms = 1000 };
	r = crossing_run(x);
	json_decref(args);
	return r;
}

static void test_allow(void **state)
{
	struct probe_box b = { 0 };
	struct crossing x;

	(void)state;
	assert_int_equal(cross(&b, "echo hello", false, true, &x), 0);
	assert_int_equal(b.acts, 1);
	assert_int_equal(b.afters, 1);
	assert_int_equal(b.lost, 0);
	assert_int_equal(b.signer_back, 1);
	assert_true(x.decided);
	assert_string_equal(x.decision, "allow");
	assert_non_null(strstr(b.events, "probe.decided probe.done"));
	assert_int_equal(strncmp(x.args_digest, "sha256:", 7), 0);
	crossing_release(&x);
}

/* deny: the act never runs; the client hears the rule. */
static void test_deny(void **state)
{
	struct probe_box b = { 0 };
	struct crossing x;

	(void)state;
	assert_int_equal(cross(&b, "pkill tkbox-signer", false, true, &x), -EPERM);
	assert_int_equal(b.acts, 0);
	assert_int_equal(x.refusal.status, 403);
	assert_string_equal(x.refusal.code, "denied");
	assert_non_null(json_object_get(x.refusal.extra, "rule_ids"));
	assert_non_null(strstr(b.events, "probe.denied"));
	assert_null(strstr(b.events, "probe.decided"));
	crossing_release(&x);
}

/* A recorded box without a run is refused, never let through undecided. */
static void test_no_run(void **state)
{
	struct probe_box b = { 0 };
	struct crossing x;

	(void)state;
	assert_true(cross(&b, "echo hello", false, false, &x) < 0);
	assert_int_equal(b.acts, 0);
	assert_int_equal(x.refusal.status, 503);
	crossing_release(&x);
}

/* An observed crossing acts once its observation is kept; one the signer does not keep refuses the act. */
static void test_observe(void **state)
{
	struct probe_box b = { 0 };
	struct crossing x;

	(void)state;
	assert_int_equal(observe_cross(&b, "tkbox.egress", &x), 0);
	assert_int_equal(b.acts, 1);
	assert_false(x.decided);
	assert_null(strstr(b.events, "decided"));
	crossing_release(&x);

	b = (struct probe_box){ 0 };
	assert_int_equal(observe_cross(&b, "tkbox.not-a-kind", &x), -EIO);
	assert_int_equal(b.acts, 0);
	assert_int_equal(x.refusal.status, 503);
	assert_string_equal(x.refusal.code, "not_recorded");
	crossing_release(&x);
}

/* The patch door's shape: a Write crossing decided now, finished later. */
static const struct crossing_door write_door = {
	.name = "apply",
	.tool = "Write",
	.act = probe_act,
	.after = probe_after,
};

static int gate_write(struct probe_box *b, const char *file_path, int64_t seq, struct crossing *x, json_t **args)
{
	*args = json_pack("{s:s,s:s}", "file_path", file_path, "op", "modify");
	assert_non_null(*args);
	*x = (struct crossing){ .door = &write_door,
				.host = &probe_host,
				.box = b,
				.args = *args,
				.seq = seq,
				.run_id = run_id,
				.run_token = run_token,
				.client_fd = -1,
				.approval_wait_ms = 1000 };
	return crossing_gate_only(x);
}

/* A completion with written_paths: w NULL-terminated, copied into res (owned). */
static void finish_write(struct crossing *x, bool ok, const char *const *w)
{
	struct crossing_result res = { .started = true, .ok = ok, .error = ok ? NULL : strdup("not written") };
	size_t n = 0;

	while (w[n]) {
		n++;
	}
	res.written_paths = calloc(n + 1, sizeof(char *));
	assert_non_null(res.written_paths);
	for (size_t i = 0; i < n; i++) {
		res.written_paths[i] = strdup(w[i]);
	}
	crossing_finish(x, &res);
	crossing_result_release(&res);
}

/*
 * Decide N first, complete each later (crossing_gate_only + crossing_finish):
 * nothing acts at the decision, a deny refuses only its own crossing, each
 * completion carries written_paths (the signer takes [path] and [], refuses
 * an empty path), and a decision is completed once.
 */
static void test_split(void **state)
{
	struct probe_box b = { 0 };
	struct crossing x[4];
	json_t *args[4];

	(void)state;
	assert_int_equal(gate_write(&b, "/c/a.txt", 1, &x[0], &args[0]), 0);
	assert_int_equal(gate_write(&b, "/c/b.txt", 2, &x[1], &args[1]), 0);
	assert_int_equal(gate_write(&b, "/c/c.txt", 3, &x[2], &args[2]), 0);
	assert_int_equal(gate_write(&b, "/c/signer.sock", 4, &x[3], &args[3]), -EPERM);
	assert_true(x[0].decided && x[1].decided && x[2].decided);
	assert_false(x[3].decided);
	assert_string_equal(x[3].refusal.code, "denied");
	assert_int_equal(b.acts, 0);
	assert_non_null(strstr(b.events, "apply.decided apply.decided apply.decided apply.denied"));
	assert_null(strstr(b.events, "apply.done"));

	finish_write(&x[0], true, (const char *const[]){ "a.txt", NULL });
	finish_write(&x[1], false, (const char *const[]){ NULL });
	assert_int_equal(b.lost, 0);
	assert_int_equal(b.afters, 2);
	assert_non_null(strstr(b.events, "apply.done apply.done"));
	/* The signer reads written_paths: an empty path is refused, so that completion is counted as lost. */
	finish_write(&x[2], true, (const char *const[]){ "", NULL });
	assert_int_equal(b.lost, 1);
	/* Completed once: a second completion of x[0] is refused and counted. */
	finish_write(&x[0], true, (const char *const[]){ "a.txt", NULL });
	assert_int_equal(b.lost, 2);
	for (int i = 0; i < 4; i++) {
		crossing_release(&x[i]);
		json_decref(args[i]);
	}
}

/*
 * The signer dies during the act: the completion is counted as lost (never
 * dropped); the next decide fails and refuses its act; an unrecorded daemon
 * still acts.
 */
static void test_signer_gone(void **state)
{
	struct probe_box b = { .kill_signer_in_act = true };
	struct crossing x;

	(void)state;
	assert_int_equal(cross(&b, "echo before", false, true, &x), 0);
	crossing_release(&x);
	assert_int_equal(b.acts, 1);
	assert_int_equal(b.lost, 1);
	assert_true(b.lost_r < 0);
	assert_int_equal(b.afters, 1); /* the client hears the end once the loss is counted */
	assert_non_null(strstr(b.events, "signer.complete_failed"));

	b = (struct probe_box){ 0 };
	assert_int_equal(cross(&b, "echo after", false, true, &x), -EIO);
	assert_int_equal(b.acts, 0);
	assert_int_equal(x.refusal.status, 503);
	assert_string_equal(x.refusal.code, "signer_unreachable");
	assert_non_null(strstr(x.refusal.message, "nothing ran"));
	assert_non_null(strstr(b.events, "signer.decide_failed"));
	crossing_release(&x);

	b = (struct probe_box){ 0 };
	assert_int_equal(cross(&b, "echo unrecorded", true, true, &x), 0);
	assert_int_equal(b.acts, 1);
	assert_false(x.decided);
	assert_int_equal(b.lost, 0);
	crossing_release(&x);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_allow),  cmocka_unit_test(test_deny),
		cmocka_unit_test(test_no_run), cmocka_unit_test(test_observe),
		cmocka_unit_test(test_split),  cmocka_unit_test(test_signer_gone), /* last: it kills the signer */
	};
	json_t *reply = NULL;
	const char *s;
	char err[512];

	if (argc != 3) {
		fprintf(stderr, "usage: test-daemon-crossing SIGNER_SOCKET SIGNER_PID\n");
		return 2;
	}
	sock = argv[1];
	signer_pid = (pid_t)strtol(argv[2], NULL, 10);
	if (signer_link_init(sock, 5) < 0 ||
	    signer_link_once(
		    signer_link_request_id(json_pack("{s:s,s:{s:s,s:s},s:s}", "method", "register_run", "agent", "name",
						     "tkbox", "version", "test", "run_id", "test-crossing-run")),
		    &reply, err, sizeof(err)) < 0) {
		fprintf(stderr, "register_run: %s\n", err);
		return 1;
	}
	if (json_get_string(reply, "run_id", &s) < 0 || !(run_id = strdup(s)) ||
	    json_get_string(reply, "run_token", &s) < 0 || !(run_token = strdup(s))) {
		return 1;
	}
	json_decref(reply);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
