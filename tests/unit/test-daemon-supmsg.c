/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "daemon/supmsg.h"
#include "json.h"

static char *argv1[] = { "true", NULL };
static char *env1[] = { "A=1", NULL };

/* Encode m as ipc_send would write it: compact JSON. */
static char *wire(const struct supmsg *m)
{
	json_t *v = NULL;
	char *s;

	assert_int_equal(supmsg_encode(m, &v), 0);
	s = json_dumps(v, JSON_COMPACT);
	assert_non_null(s);
	json_decref(v);
	return s;
}

static int decode(enum supmsg_dir dir, const char *s, struct supmsg *m)
{
	return supmsg_decode(dir, (const uint8_t *)s, strlen(s), m);
}

/* What the daemon's reader thread does with each supervisor message (supmon_receive). */
static int receive(struct supmon *mon, const char *s, const char **why)
{
	struct supmsg m;
	int r = supmon_receive(mon, (const uint8_t *)s, strlen(s), &m, why);

	if (r >= 0) {
		supmsg_release(&m);
	}
	return r;
}

/* The daemon sends m (its side of the monitor). */
static int send(struct supmon *mon, const struct supmsg *m)
{
	return supmon_apply(mon, SUPMSG_TO_SUPERVISOR, m, NULL);
}

static const struct supmsg boot_msg = { .op = SUPMSG_BOOT,
					.box_id = "b1",
					.rootfs = "/r.ext4",
					.state_dir = "/s",
					.guest = "/g",
					.accel = "auto",
					.vcpus = 1,
					.mem_mib = 256,
					.env = env1,
					.envc = 1,
					.lifetime_s = 60 };

static struct supmsg exec_msg(int64_t n)
{
	return (struct supmsg){ .op = SUPMSG_EXEC,
				.exec = n,
				.argv = argv1,
				.argc = 1,
				.env = env1,
				.envc = 1,
				.cwd = "/",
				.stdin_mode = SUPMSG_STDIN_STREAM,
				.timeout_s = 30 };
}

#define READY "{\"op\":\"ready\",\"accel\":\"tcg\",\"isolation\":\"emulated\",\"ready_ms\":5}"
#define DONE(n) "{\"op\":\"done\",\"exec\":" #n ",\"status\":\"ok\",\"exit_code\":0}"

static void test_roundtrip(void **state)
{
	struct supmsg e = exec_msg(7), d, rel = { .op = SUPMSG_RELEASE, .exec = 7 }, stop = { .op = SUPMSG_STOP };
	struct supmsg done = { .op = SUPMSG_DONE,
			       .exec = 7,
			       .has_exit = true,
			       .exit = { .kind = EXIT_KIND_SIGNALED, .value = 9 },
			       .error = "killed",
			       .stdin_sha256 = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03",
			       .stdin_bytes = 6 };
	struct supmsg ev = { .op = SUPMSG_EVENT, .event = "box.lifetime", .detail = "x" };
	char *s;
	(void)state;

	s = wire(&boot_msg);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), 0);
	assert_int_equal(d.op, SUPMSG_BOOT);
	assert_string_equal(d.rootfs, "/r.ext4");
	assert_string_equal(d.env[0], "A=1");
	assert_null(d.workspace);
	supmsg_release(&d);
	/* Each operation goes one way: a boot is not a supervisor's word. */
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), -EPROTO);
	free(s);
	s = wire(&e);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), 0);
	assert_int_equal(d.exec, 7);
	assert_int_equal(d.stdin_mode, SUPMSG_STDIN_STREAM);
	assert_int_equal(supmsg_fds(&d), 1);
	assert_string_equal(d.argv[0], "true");
	supmsg_release(&d);
	free(s);
	s = wire(&done);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), 0);
	assert_true(d.has_exit);
	assert_false(d.ok);
	assert_int_equal(d.exit.kind, EXIT_KIND_SIGNALED);
	assert_int_equal(d.exit.value, 9);
	assert_int_equal(d.stdin_bytes, 6);
	supmsg_release(&d);
	free(s);
	s = wire(&rel);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), 0);
	supmsg_release(&d);
	free(s);
	s = wire(&stop);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), 0);
	supmsg_release(&d);
	free(s);
	s = wire(&ev);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), 0);
	assert_string_equal(d.event, "box.lifetime");
	supmsg_release(&d);
	free(s);
}

static void test_closed(void **state)
{
	struct supmsg d, bad;
	json_t *v = NULL;
	char *s;
	(void)state;

	/* An unknown key, an event outside the set, "ok" that is not exit 0, a kernel without modules. */
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, "{\"op\":\"stop\",\"now\":true}", &d), -EBADMSG);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, "{\"op\":\"event\",\"event\":\"box.anything\"}", &d), -EBADMSG);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, "{\"op\":\"done\",\"exec\":1,\"status\":\"ok\",\"signal\":9}", &d),
			 -EBADMSG);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, "{\"op\":\"done\",\"exec\":1,\"status\":\"ok\",\"exit_code\":1}", &d),
			 -EBADMSG);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, "{\"op\":\"done\",\"exec\":1,\"status\":\"ok\"}", &d), -EBADMSG);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, "{\"op\":\"release\",\"exec\":0}", &d), -EBADMSG);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR,
				"{\"op\":\"exec\",\"exec\":1,\"argv\":[],\"env\":[],"
				"\"stdin\":\"none\",\"timeout_s\":1}",
				&d),
			 -EBADMSG);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR,
				"{\"op\":\"exec\",\"exec\":1,\"argv\":[\"a\"],\"env\":[],"
				"\"stdin\":\"later\",\"timeout_s\":1}",
				&d),
			 -EBADMSG);
	bad = boot_msg;
	bad.kernel = "/k";
	assert_int_equal(supmsg_encode(&bad, &v), -EINVAL);
	bad = boot_msg;
	bad.box_id = "a/b";
	assert_int_equal(supmsg_encode(&bad, &v), -EINVAL);
	assert_null(v);
	/* SUPMSG_MAX_ARGS argv entries decode; one more does not. */
	for (int extra = 0; extra < 2; extra++) {
		size_t n = SUPMSG_MAX_ARGS + (size_t)extra, off = 0, cap = n * 4 + 128;
		s = malloc(cap);
		assert_non_null(s);
		off += (size_t)snprintf(s + off, cap - off, "{\"op\":\"exec\",\"exec\":1,\"argv\":[");
		for (size_t i = 0; i < n; i++) {
			off += (size_t)snprintf(s + off, cap - off, "%s\"a\"", i ? "," : "");
		}
		(void)snprintf(s + off, cap - off, "],\"env\":[],\"stdin\":\"none\",\"timeout_s\":1}");
		assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), extra ? -E2BIG : 0);
		if (!extra) {
			assert_int_equal(d.argc, SUPMSG_MAX_ARGS);
			supmsg_release(&d);
		}
		free(s);
	}
}

/* A whole box's life through the daemon's monitor: every step allowed. */
static void test_monitor_life(void **state)
{
	struct supmon mon;
	struct supmsg e1 = exec_msg(1), e2 = exec_msg(2);
	struct supmsg r1 = { .op = SUPMSG_RELEASE, .exec = 1 }, r2 = { .op = SUPMSG_RELEASE, .exec = 2 };
	struct supmsg stop = { .op = SUPMSG_STOP };
	const char *why = NULL;
	(void)state;

	supmon_init(&mon);
	assert_int_equal(send(&mon, &boot_msg), 0);
	assert_int_equal(receive(&mon, "{\"op\":\"event\",\"event\":\"box.boot_retry\"}", &why), 0);
	assert_int_equal(receive(&mon, READY, &why), 0);
	assert_int_equal(mon.state, SUPMON_UP);
	/* Execs go in the order their decisions end: 2 before 1. */
	assert_int_equal(send(&mon, &e2), 0);
	assert_int_equal(send(&mon, &e1), 0);
	assert_int_equal(receive(&mon, DONE(2), &why), 0);
	assert_int_equal(send(&mon, &r2), 0);
	assert_int_equal(send(&mon, &stop), 0);
	/* Stopping: the running command still reports, and its release may follow. */
	assert_int_equal(receive(&mon, "{\"op\":\"done\",\"exec\":1,\"status\":\"error\",\"error\":\"stopped\"}", &why),
			 0);
	assert_int_equal(receive(&mon, "{\"op\":\"stopped\",\"reason\":\"stop\"}", &why), 0);
	assert_int_equal(send(&mon, &r1), 0);
	assert_int_equal(mon.state, SUPMON_OVER);
	assert_int_equal(mon.n, 0);
}

/* Out of state: each is refused, and says which rule. */
static void test_monitor_refuses(void **state)
{
	struct supmon mon;
	struct supmsg e1 = exec_msg(1), again = exec_msg(1), r1 = { .op = SUPMSG_RELEASE, .exec = 1 };
	const char *why = NULL;
	(void)state;

	supmon_init(&mon);
	/* Before boot the supervisor has nothing to say. */
	assert_int_equal(receive(&mon, READY, &why), -EPROTO);
	assert_non_null(why);
	assert_int_equal(receive(&mon, "{\"op\":\"event\",\"event\":\"box.lifetime\"}", &why), -EPROTO);
	/* An exec before the box is up. */
	assert_int_equal(send(&mon, &boot_msg), 0);
	assert_int_equal(send(&mon, &e1), -EPROTO);
	assert_int_equal(send(&mon, &boot_msg), -EPROTO); /* boot once */
	assert_int_equal(receive(&mon, DONE(1), &why), -EPROTO); /* done for an exec never started */
	assert_int_equal(receive(&mon, READY, &why), 0);
	assert_int_equal(receive(&mon, READY, &why), -EPROTO); /* a second ready */
	assert_non_null(strstr(why, "state"));
	assert_int_equal(receive(&mon, "{\"op\":\"failed\",\"message\":\"x\"}", &why),
			 -EPROTO); /* failed after ready */
	assert_int_equal(receive(&mon, DONE(1), &why), -EPROTO); /* still never started */
	assert_non_null(strstr(why, "not running"));
	assert_int_equal(send(&mon, &e1), 0);
	assert_int_equal(send(&mon, &again), -EPROTO); /* an exec number open already */
	assert_int_equal(send(&mon, &r1), -EPROTO); /* release before done */
	assert_int_equal(receive(&mon, DONE(1), &why), 0);
	assert_int_equal(receive(&mon, DONE(1), &why), -EPROTO); /* done twice */
	assert_int_equal(send(&mon, &r1), 0);
	assert_int_equal(send(&mon, &r1), -EPROTO); /* released twice */
	/* A daemon's word from the supervisor, and garbage. */
	assert_int_equal(receive(&mon, "{\"op\":\"stop\"}", &why), -EPROTO);
	assert_int_equal(receive(&mon, "{\"op\":\"ready\"", &why), -EBADMSG);
	/* Over: nothing more. */
	assert_int_equal(receive(&mon, "{\"op\":\"stopped\",\"reason\":\"lifetime\"}", &why), 0);
	assert_int_equal(receive(&mon, "{\"op\":\"event\",\"event\":\"box.lifetime\"}", &why), -EPROTO);
	assert_int_equal(receive(&mon, "{\"op\":\"stopped\",\"reason\":\"again\"}", &why), -EPROTO);
}

/* SUPMON_MAX_EXECS open execs, then one more is refused. */
static void test_monitor_cap(void **state)
{
	struct supmon mon;
	struct supmsg e;
	const char *why = NULL;
	(void)state;

	supmon_init(&mon);
	assert_int_equal(send(&mon, &boot_msg), 0);
	assert_int_equal(receive(&mon, READY, &why), 0);
	for (int64_t i = 1; i <= SUPMON_MAX_EXECS; i++) {
		e = exec_msg(i);
		assert_int_equal(send(&mon, &e), 0);
	}
	e = exec_msg(SUPMON_MAX_EXECS + 1);
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &e, &why), -EPROTO);
	assert_non_null(strstr(why, "SUPMON_MAX_EXECS"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),    cmocka_unit_test(test_closed),
		cmocka_unit_test(test_monitor_life), cmocka_unit_test(test_monitor_refuses),
		cmocka_unit_test(test_monitor_cap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
