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

static struct supmsg egress_open_msg(int64_t conn)
{
	return (struct supmsg){
		.op = SUPMSG_EGRESS_OPEN, .conn = conn, .form_connect = true, .host = "example.com", .port = 443
	};
}

static const struct supmsg dial_msg = {
	.op = SUPMSG_EGRESS_DIAL, .conn = 1, .url = "https://example.com:443", .plain = false
};

/* Each egress operation round-trips with its members, in its direction only. */
static void test_egress_roundtrip(void **state)
{
	struct supmsg open = egress_open_msg(9), dial = dial_msg, d;
	struct supmsg refuse = { .op = SUPMSG_EGRESS_REFUSE,
				 .conn = 9,
				 .status = 403,
				 .rule = "not-allowlisted",
				 .message = "a person can approve it with `tkbox approve a1`" };
	struct supmsg done = { .op = SUPMSG_EGRESS_DONE,
			       .conn = 9,
			       .bytes_up = 517,
			       .bytes_down = (INT64_C(1) << 53) - 1,
			       .duration_ms = 12,
			       .error = "sni",
			       .rule = "sni-mismatch" };
	struct supmsg refused = { .op = SUPMSG_EGRESS_REFUSED,
				  .rule = "connect-port-80",
				  .message = "CONNECT to port 80 is refused",
				  .host = "::1",
				  .port = 80 };
	char *s;
	(void)state;

	open.form_connect = false;
	s = wire(&open);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), 0);
	assert_int_equal(d.op, SUPMSG_EGRESS_OPEN);
	assert_int_equal(d.conn, 9);
	assert_false(d.form_connect);
	assert_string_equal(d.host, "example.com");
	assert_int_equal(d.port, 443);
	supmsg_release(&d);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), -EPROTO);
	free(s);
	dial.plain = true;
	s = wire(&dial);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), 0);
	assert_string_equal(d.url, "https://example.com:443");
	assert_true(d.plain);
	assert_int_equal(supmsg_fds(&d), 1);
	supmsg_release(&d);
	free(s);
	s = wire(&refuse);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), 0);
	assert_int_equal(d.status, 403);
	assert_string_equal(d.rule, "not-allowlisted");
	assert_int_equal(supmsg_fds(&d), 0);
	supmsg_release(&d);
	free(s);
	s = wire(&done);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), 0);
	assert_int_equal(d.bytes_up, 517);
	assert_int_equal(d.bytes_down, (INT64_C(1) << 53) - 1);
	assert_string_equal(d.rule, "sni-mismatch");
	supmsg_release(&d);
	free(s);
	s = wire(&refused);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), 0);
	assert_string_equal(d.host, "::1");
	assert_int_equal(d.port, 80);
	supmsg_release(&d);
	free(s);
	refused.host = NULL;
	refused.port = 0;
	s = wire(&refused);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), 0);
	assert_null(d.host);
	supmsg_release(&d);
	free(s);
}

/* Closed key sets and ranges: each member one past its rule. */
static void test_egress_closed(void **state)
{
	static const char *const to_daemon[] = {
		"{\"op\":\"egress_open\",\"conn\":1,\"form\":\"connect\",\"host\":\"a\",\"port\":1,\"x\":1}",
		"{\"op\":\"egress_open\",\"conn\":0,\"form\":\"connect\",\"host\":\"a\",\"port\":1}",
		"{\"op\":\"egress_open\",\"conn\":9007199254740993,\"form\":\"connect\",\"host\":\"a\",\"port\":1}",
		"{\"op\":\"egress_open\",\"conn\":1,\"form\":\"origin\",\"host\":\"a\",\"port\":1}",
		"{\"op\":\"egress_open\",\"conn\":1,\"form\":\"connect\",\"host\":\"a b\",\"port\":1}",
		"{\"op\":\"egress_open\",\"conn\":1,\"form\":\"connect\",\"host\":\"\",\"port\":1}",
		"{\"op\":\"egress_open\",\"conn\":1,\"form\":\"connect\",\"host\":\"a\",\"port\":0}",
		"{\"op\":\"egress_open\",\"conn\":1,\"form\":\"connect\",\"host\":\"a\",\"port\":65536}",
		"{\"op\":\"egress_open\",\"conn\":1,\"form\":\"connect\",\"host\":\"a\"}",
		"{\"op\":\"egress_done\",\"conn\":1,\"bytes_up\":-1,\"bytes_down\":0,\"duration_ms\":0}",
		"{\"op\":\"egress_done\",\"conn\":1,\"bytes_up\":9007199254740993,\"bytes_down\":0,\"duration_ms\":0}",
		"{\"op\":\"egress_done\",\"conn\":1,\"bytes_up\":0,\"bytes_down\":0,\"duration_ms\":0,\"rule\":\"x\"}",
		"{\"op\":\"egress_done\",\"conn\":1,\"bytes_up\":0,\"bytes_down\":0,\"duration_ms\":0,\"error\":\"\"}",
		"{\"op\":\"egress_done\",\"conn\":1,\"bytes_up\":0,\"bytes_down\":0,\"duration_ms\":0,\"rule\":\"S\"}",
		"{\"op\":\"egress_refused\",\"rule\":\"a\",\"message\":\"m\",\"port\":80}",
		"{\"op\":\"egress_refused\",\"rule\":\"a\",\"message\":\"\"}",
		"{\"op\":\"egress_refused\",\"rule\":\"a b\",\"message\":\"m\"}",
	};
	static const char *const to_sup[] = {
		"{\"op\":\"egress_dial\",\"conn\":1,\"url\":\"https://a:443\"}",
		"{\"op\":\"egress_dial\",\"conn\":1,\"url\":\"https://a:443\",\"plain\":1}",
		"{\"op\":\"egress_dial\",\"conn\":1,\"url\":\"https://a :443\",\"plain\":false}",
		"{\"op\":\"egress_refuse\",\"conn\":1,\"status\":401,\"rule\":\"r\",\"message\":\"m\"}",
		"{\"op\":\"egress_refuse\",\"conn\":1,\"status\":200,\"rule\":\"r\",\"message\":\"m\"}",
		"{\"op\":\"egress_refuse\",\"conn\":1,\"status\":403,\"rule\":\"\",\"message\":\"m\"}",
		"{\"op\":\"egress_refuse\",\"conn\":1,\"status\":403,\"rule\":\"r\",\"message\":\"m\",\"host\":\"a\"}",
	};
	char big[SUPMSG_MAX_URL + 128], rule[SUPMSG_MAX_RULE + 2];
	struct supmsg d, m = dial_msg;
	json_t *v = NULL;
	(void)state;

	for (size_t i = 0; i < ARRAY_SIZE(to_daemon); i++) {
		assert_int_not_equal(decode(SUPMSG_TO_DAEMON, to_daemon[i], &d), 0);
	}
	for (size_t i = 0; i < ARRAY_SIZE(to_sup); i++) {
		assert_int_not_equal(decode(SUPMSG_TO_SUPERVISOR, to_sup[i], &d), 0);
	}
	/* The url: SUPMSG_MAX_URL bytes pass, one more does not. */
	for (int extra = 0; extra < 2; extra++) {
		char url[SUPMSG_MAX_URL + 2];
		memset(url, 'a', sizeof(url));
		url[SUPMSG_MAX_URL + (size_t)extra] = '\0';
		(void)snprintf(big, sizeof(big),
			       "{\"op\":\"egress_dial\",\"conn\":1,\"url\":\"%s\",\"plain\":false,\"inspect\":false,"
			       "\"model\":false}",
			       url);
		assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, big, &d), extra ? -E2BIG : 0);
		if (!extra) {
			supmsg_release(&d);
		}
	}
	/* The rule: SUPMSG_MAX_RULE bytes pass, one more does not; status 400 passes. */
	for (int extra = 0; extra < 2; extra++) {
		memset(rule, 'r', sizeof(rule));
		rule[SUPMSG_MAX_RULE + (size_t)extra] = '\0';
		(void)snprintf(big, sizeof(big),
			       "{\"op\":\"egress_refuse\",\"conn\":1,\"status\":400,\"rule\":\"%s\",\"message\":\"m\"}",
			       rule);
		assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, big, &d), extra ? -E2BIG : 0);
		if (!extra) {
			supmsg_release(&d);
		}
	}
	m.url = "tcp://a b:22";
	assert_int_equal(supmsg_encode(&m, &v), -EINVAL);
	assert_null(v);
}

/* The monitor's conn rows: each refusal names its rule. */
static void test_egress_monitor(void **state)
{
	struct supmon mon;
	struct supmsg open = egress_open_msg(1), dial = dial_msg, stop = { .op = SUPMSG_STOP };
	struct supmsg done = { .op = SUPMSG_EGRESS_DONE, .conn = 1 };
	struct supmsg refuse = { .op = SUPMSG_EGRESS_REFUSE, .conn = 2, .status = 503, .rule = "r", .message = "m" };
	const char *why = NULL;
	(void)state;

	supmon_init(&mon);
	/* Before the box is up the supervisor asks nothing. */
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_DAEMON, &open, &why), -EPROTO);
	assert_int_equal(send(&mon, &boot_msg), 0);
	assert_int_equal(receive(&mon, READY, &why), 0);
	/* A dial for an unknown conn; an end before the dial. */
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &dial, &why), -EPROTO);
	assert_non_null(strstr(why, "not waiting"));
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_DAEMON, &open, &why), 0);
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_DAEMON, &open, &why), -EPROTO); /* conn 1 again */
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_DAEMON, &done, &why), -EPROTO);
	assert_non_null(strstr(why, "never dialled"));
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &dial, &why), 0);
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &dial, &why), -EPROTO); /* dialled twice */
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_DAEMON, &done, &why), 0);
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_DAEMON, &done, &why), -EPROTO); /* ended twice */
	assert_int_equal(mon.nc, 0);
	/* SUPMON_MAX_CONNS asked, then one more is refused. */
	for (int64_t i = 2; i < 2 + SUPMON_MAX_CONNS; i++) {
		open = egress_open_msg(i);
		assert_int_equal(supmon_apply(&mon, SUPMSG_TO_DAEMON, &open, &why), 0);
	}
	open = egress_open_msg(2 + SUPMON_MAX_CONNS);
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_DAEMON, &open, &why), -EPROTO);
	assert_non_null(strstr(why, "SUPMON_MAX_CONNS"));
	/*
	 * Stopping: no dial, but an asked conn may still be refused, and ends
	 * still come. An open the proxy sent before it read the stop is no
	 * breach (the daemon answers it 503): it passes, and only a refusal
	 * may answer it.
	 */
	assert_int_equal(send(&mon, &stop), 0);
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &refuse, &why), 0);
	open = egress_open_msg(5000);
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_DAEMON, &open, &why), 0);
	dial.conn = 5000;
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &dial, &why), -EPROTO);
	assert_non_null(strstr(why, "state"));
	dial.conn = 3;
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &dial, &why), -EPROTO);
	assert_non_null(strstr(why, "state"));
	refuse.conn = 5000;
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &refuse, &why), 0);
	/* The cap still holds while stopping. */
	for (int64_t i = 6000; mon.nc < SUPMON_MAX_CONNS; i++) {
		open = egress_open_msg(i);
		assert_int_equal(supmon_apply(&mon, SUPMSG_TO_DAEMON, &open, &why), 0);
	}
	open = egress_open_msg(9999);
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_DAEMON, &open, &why), -EPROTO);
	assert_non_null(strstr(why, "SUPMON_MAX_CONNS"));
	/* A stop the supervisor began itself is told before stopped. */
	assert_int_equal(receive(&mon,
				 "{\"op\":\"event\",\"event\":\"box.stopping\",\"detail\":\"the box reached its "
				 "lifetime limit\"}",
				 &why),
			 0);
	assert_int_equal(receive(&mon, "{\"op\":\"egress_refused\",\"rule\":\"a\",\"message\":\"m\"}", &why), 0);
}

/* ---- issue 13: secrets, inspection, model calls, the self-test ---- */

#define PH_GH "tkbox_GH_0123456789abcdef0123456789abcdef"
#define PH_OA "tkbox_OPENAI_KEY_fedcba9876543210fedcba9876543210"
#define CERT "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
#define KEY "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n"
/* The same inside a JSON text. */
#define CERT_J "-----BEGIN CERTIFICATE-----\\nMIIB\\n-----END CERTIFICATE-----\\n"
#define KEY_J "-----BEGIN PRIVATE KEY-----\\nMIGH\\n-----END PRIVATE KEY-----\\n"
#define SECRET_USE(c) "{\"op\":\"secret_use\",\"conn\":" #c ",\"secret\":\"GH\",\"host\":\"api.github.com\"}"
#define MODEL_CALL(c)                                                                                                  \
	"{\"op\":\"model_call\",\"conn\":" #c ",\"host\":\"api.anthropic.com\",\"method\":\"POST\",\"path\":\"/v1/"    \
	"messages\",\"status\":200,\"bytes_up\":1,\"bytes_down\":2,\"duration_ms\":3}"
#define SELFTEST "{\"op\":\"selftest\",\"ran\":[\"curl\"],\"trusted\":[\"curl\"],\"clock_offset_ms\":0}"

static char *gh_hosts[] = { "api.github.com", "uploads.github.com", NULL };
static char *oa_hosts[] = { "api.openai.com", NULL };
static struct supmsg_secret two_secrets[] = {
	{ .name = "GH", .placeholder = PH_GH, .header = "Authorization", .hosts = gh_hosts, .n_hosts = 2, .len = 40 },
	{ .name = "OPENAI_KEY",
	  .placeholder = PH_OA,
	  .header = "x-api-key",
	  .hosts = oa_hosts,
	  .n_hosts = 1,
	  .len = 6 },
};

/* Each new operation and member round-trips, in its direction only, with the fds it carries. */
static void test_secrets_roundtrip(void **state)
{
	struct supmsg boot = boot_msg, dial = dial_msg, d;
	struct supmsg secrets = { .op = SUPMSG_SECRETS, .secrets = two_secrets, .n_secrets = 2 };
	struct supmsg use = { .op = SUPMSG_SECRET_USE, .conn = 7, .secret = "GH", .host = "api.github.com" };
	struct supmsg ok = { .op = SUPMSG_SECRET_OK, .conn = 7, .ok = false, .message = "the signer is down" };
	struct supmsg leak = { .op = SUPMSG_SECRET_LEAK,
			       .conn = 0,
			       .secret = "GH",
			       .host = "evil.example",
			       .reason = "header Authorization (raw)" };
	struct supmsg call = { .op = SUPMSG_MODEL_CALL,
			       .conn = 8,
			       .host = "api.anthropic.com",
			       .method = "POST",
			       .path = "/v1/messages",
			       .status = 200,
			       .bytes_up = 310,
			       .bytes_down = 912,
			       .duration_ms = 840,
			       .model = "claude-sonnet-4-5",
			       .input_tokens = 12,
			       .output_tokens = 0 };
	char *ran[] = { "curl", "python3", "git", NULL }, *trusted[] = { "python3", NULL };
	struct supmsg self = { .op = SUPMSG_SELFTEST,
			       .ran = ran,
			       .n_ran = 3,
			       .trusted = trusted,
			       .n_trusted = 1,
			       .clock_offset_ms = -(INT64_C(1) << 53) + 1 };
	char *s;
	(void)state;

	boot.ca_cert = CERT;
	boot.ca_key = KEY;
	boot.upstream_ca = "/etc/tkbox/extra.pem";
	s = wire(&boot);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), 0);
	assert_string_equal(d.ca_cert, CERT);
	assert_string_equal(d.ca_key, KEY);
	assert_string_equal(d.upstream_ca, "/etc/tkbox/extra.pem");
	supmsg_release(&d);
	free(s);
	/* Without them: absent. */
	s = wire(&boot_msg);
	assert_null(strstr(s, "ca_"));
	assert_null(strstr(s, "upstream_ca"));
	free(s);

	dial.inspect = true;
	dial.model_host = true;
	s = wire(&dial);
	assert_non_null(strstr(s, "\"model\":true"));
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), 0);
	assert_true(d.inspect);
	assert_true(d.model_host);
	supmsg_release(&d);
	free(s);

	s = wire(&secrets);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), 0);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &(struct supmsg){ 0 }), -EPROTO);
	assert_int_equal(supmsg_fds(&d), 1);
	assert_int_equal(d.n_secrets, 2);
	assert_string_equal(d.secrets[0].name, "GH");
	assert_string_equal(d.secrets[0].placeholder, PH_GH);
	assert_string_equal(d.secrets[0].header, "Authorization");
	assert_int_equal(d.secrets[0].n_hosts, 2);
	assert_string_equal(d.secrets[0].hosts[1], "uploads.github.com");
	assert_null(d.secrets[0].hosts[2]);
	assert_int_equal(d.secrets[0].len, 40);
	assert_string_equal(d.secrets[1].header, "x-api-key");
	assert_int_equal(d.secrets[1].len, 6);
	supmsg_release(&d);
	free(s);
	/* A box with a CA and no secret still gets the message (empty). */
	secrets.n_secrets = 0;
	secrets.secrets = NULL;
	s = wire(&secrets);
	assert_string_equal(s, "{\"op\":\"secrets\",\"secrets\":[]}");
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), 0);
	assert_int_equal(d.n_secrets, 0);
	supmsg_release(&d);
	free(s);

	s = wire(&use);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), 0);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &(struct supmsg){ 0 }), -EPROTO);
	assert_int_equal(d.conn, 7);
	assert_string_equal(d.secret, "GH");
	assert_string_equal(d.host, "api.github.com");
	assert_int_equal(supmsg_fds(&d), 0);
	supmsg_release(&d);
	free(s);

	s = wire(&ok);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), 0);
	assert_false(d.ok);
	assert_string_equal(d.message, "the signer is down");
	supmsg_release(&d);
	free(s);
	ok.ok = true;
	ok.message = NULL;
	s = wire(&ok);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), 0);
	assert_true(d.ok);
	assert_null(d.message);
	supmsg_release(&d);
	free(s);

	s = wire(&leak);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), 0);
	assert_int_equal(d.conn, 0);
	assert_string_equal(d.reason, "header Authorization (raw)");
	supmsg_release(&d);
	free(s);

	s = wire(&call);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), 0);
	assert_string_equal(d.method, "POST");
	assert_string_equal(d.path, "/v1/messages");
	assert_int_equal(d.status, 200);
	assert_int_equal(d.bytes_down, 912);
	assert_string_equal(d.model, "claude-sonnet-4-5");
	assert_int_equal(d.input_tokens, 12);
	assert_int_equal(d.output_tokens, 0);
	supmsg_release(&d);
	free(s);
	/* Without the provider's words: absent, and -1 after decoding. */
	call.model = NULL;
	call.input_tokens = -1;
	call.output_tokens = -1;
	s = wire(&call);
	assert_null(strstr(s, "tokens"));
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), 0);
	assert_null(d.model);
	assert_int_equal(d.input_tokens, -1);
	assert_int_equal(d.output_tokens, -1);
	supmsg_release(&d);
	free(s);

	s = wire(&self);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), 0);
	assert_int_equal(d.n_ran, 3);
	assert_string_equal(d.ran[2], "git");
	assert_int_equal(d.n_trusted, 1);
	assert_string_equal(d.trusted[0], "python3");
	assert_int_equal(d.clock_offset_ms, -(INT64_C(1) << 53) + 1);
	supmsg_release(&d);
	free(s);
}

/* Closed key sets, shapes and ranges of the new operations: each member one past its rule. */
static void test_secrets_closed(void **state)
{
	static const char *const to_daemon[] = {
		/* secret_use */
		"{\"op\":\"secret_use\",\"conn\":1,\"secret\":\"GH\",\"host\":\"a\",\"x\":1}",
		"{\"op\":\"secret_use\",\"conn\":0,\"secret\":\"GH\",\"host\":\"a\"}",
		"{\"op\":\"secret_use\",\"conn\":1,\"secret\":\"gh\",\"host\":\"a\"}",
		"{\"op\":\"secret_use\",\"conn\":1,\"secret\":\"1GH\",\"host\":\"a\"}",
		"{\"op\":\"secret_use\",\"conn\":1,\"secret\":\"\",\"host\":\"a\"}",
		"{\"op\":\"secret_use\",\"conn\":1,\"secret\":\"GH\",\"host\":\"a b\"}",
		"{\"op\":\"secret_use\",\"conn\":1,\"secret\":\"GH\"}",
		"{\"op\":\"secret_use\",\"conn\":1,\"secret\":\"GH\",\"host\":\"a\",\"reason\":\"r\"}",
		/* secret_leak */
		"{\"op\":\"secret_leak\",\"conn\":-1,\"secret\":\"GH\",\"host\":\"a\",\"reason\":\"r\"}",
		"{\"op\":\"secret_leak\",\"conn\":0,\"secret\":\"GH\",\"host\":\"a\"}",
		"{\"op\":\"secret_leak\",\"conn\":0,\"secret\":\"GH\",\"host\":\"a\",\"reason\":\"\"}",
		"{\"op\":\"secret_leak\",\"conn\":0,\"secret\":\"GH\",\"host\":\"a\",\"reason\":\"a\\nb\"}",
		"{\"op\":\"secret_leak\",\"conn\":0,\"secret\":\"GH\",\"host\":\"a\",\"reason\":\"r\",\"value\":\"v\"}",
		/* model_call */
		"{\"op\":\"model_call\",\"conn\":1,\"host\":\"a\",\"method\":\"POST\",\"path\":\"/\",\"status\":99,"
		"\"bytes_up\":0,\"bytes_down\":0,\"duration_ms\":0}",
		"{\"op\":\"model_call\",\"conn\":1,\"host\":\"a\",\"method\":\"POST\",\"path\":\"/\",\"status\":600,"
		"\"bytes_up\":0,\"bytes_down\":0,\"duration_ms\":0}",
		"{\"op\":\"model_call\",\"conn\":1,\"host\":\"a\",\"method\":\"PO ST\",\"path\":\"/\",\"status\":200,"
		"\"bytes_up\":0,\"bytes_down\":0,\"duration_ms\":0}",
		"{\"op\":\"model_call\",\"conn\":1,\"host\":\"a\",\"method\":\"POST\",\"path\":\"v1\",\"status\":200,"
		"\"bytes_up\":0,\"bytes_down\":0,\"duration_ms\":0}",
		"{\"op\":\"model_call\",\"conn\":1,\"host\":\"a\",\"method\":\"POST\",\"path\":\"/\\r\",\"status\":200,"
		"\"bytes_up\":0,\"bytes_down\":0,\"duration_ms\":0}",
		"{\"op\":\"model_call\",\"conn\":1,\"host\":\"a\",\"method\":\"POST\",\"path\":\"/\",\"status\":200,"
		"\"bytes_up\":-1,\"bytes_down\":0,\"duration_ms\":0}",
		"{\"op\":\"model_call\",\"conn\":1,\"host\":\"a\",\"method\":\"POST\",\"path\":\"/\",\"status\":200,"
		"\"bytes_up\":0,\"bytes_down\":0,\"duration_ms\":0,\"input_tokens\":-1}",
		"{\"op\":\"model_call\",\"conn\":1,\"host\":\"a\",\"method\":\"POST\",\"path\":\"/\",\"status\":200,"
		"\"bytes_up\":0,\"bytes_down\":0,\"duration_ms\":0,\"model\":\"\"}",
		"{\"op\":\"model_call\",\"conn\":1,\"host\":\"a\",\"method\":\"POST\",\"path\":\"/\",\"status\":200,"
		"\"bytes_up\":0,\"bytes_down\":0,\"duration_ms\":0,\"prompt\":\"p\"}",
		"{\"op\":\"model_call\",\"conn\":0,\"host\":\"a\",\"method\":\"POST\",\"path\":\"/\",\"status\":200,"
		"\"bytes_up\":0,\"bytes_down\":0,\"duration_ms\":0}",
		"{\"op\":\"model_call\",\"conn\":1,\"host\":\"a\",\"method\":\"POST\",\"path\":\"/\",\"status\":200,"
		"\"bytes_up\":0,\"bytes_down\":0}",
		/* selftest */
		"{\"op\":\"selftest\",\"ran\":[\"Curl\"],\"trusted\":[],\"clock_offset_ms\":0}",
		"{\"op\":\"selftest\",\"ran\":[\"\"],\"trusted\":[],\"clock_offset_ms\":0}",
		"{\"op\":\"selftest\",\"ran\":[\"abcdefghijklmnopq\"],\"trusted\":[],\"clock_offset_ms\":0}",
		"{\"op\":\"selftest\",\"ran\":[\"curl\",\"curl\"],\"trusted\":[],\"clock_offset_ms\":0}",
		"{\"op\":\"selftest\",\"ran\":[],\"trusted\":[\"cu rl\"],\"clock_offset_ms\":0}",
		"{\"op\":\"selftest\",\"ran\":[],\"trusted\":[]}",
		"{\"op\":\"selftest\",\"ran\":[],\"trusted\":[],\"clock_offset_ms\":0.5}",
		"{\"op\":\"selftest\",\"ran\":[],\"clock_offset_ms\":0}",
		"{\"op\":\"selftest\",\"ran\":[],\"trusted\":[],\"clock_offset_ms\":0,\"x\":1}",
	};
	static const char *const to_sup[] = {
		/* egress_dial: the new members are required, and an inspected tunnel is TLS */
		"{\"op\":\"egress_dial\",\"conn\":1,\"url\":\"https://a:443\",\"plain\":false}",
		"{\"op\":\"egress_dial\",\"conn\":1,\"url\":\"https://a:443\",\"plain\":false,\"inspect\":false}",
		"{\"op\":\"egress_dial\",\"conn\":1,\"url\":\"https://"
		"a:443\",\"plain\":false,\"inspect\":1,\"model\":false}",
		"{\"op\":\"egress_dial\",\"conn\":1,\"url\":\"http://"
		"a:80\",\"plain\":false,\"inspect\":true,\"model\":false}",
		"{\"op\":\"egress_dial\",\"conn\":1,\"url\":\"https://"
		"a:443\",\"plain\":true,\"inspect\":true,\"model\":false}",
		/* secret_ok */
		"{\"op\":\"secret_ok\",\"conn\":1,\"ok\":\"yes\"}",
		"{\"op\":\"secret_ok\",\"conn\":1}",
		"{\"op\":\"secret_ok\",\"conn\":0,\"ok\":true}",
		"{\"op\":\"secret_ok\",\"conn\":1,\"ok\":false,\"message\":\"\"}",
		"{\"op\":\"secret_ok\",\"conn\":1,\"ok\":true,\"secret\":\"GH\"}",
		/* secrets: the entry's shape */
		"{\"op\":\"secrets\"}",
		"{\"op\":\"secrets\",\"secrets\":{}}",
		"{\"op\":\"secrets\",\"secrets\":[],\"x\":1}",
		"{\"op\":\"secrets\",\"secrets\":[{\"name\":\"GH\",\"placeholder\":\"" PH_GH "\",\"header\":\"A\","
		"\"hosts\":[\"a\"],\"len\":6,\"value\":\"abcdef\"}]}",
		"{\"op\":\"secrets\",\"secrets\":[{\"name\":\"GH\",\"placeholder\":\"" PH_GH "\",\"header\":\"A\","
		"\"hosts\":[\"a\"],\"len\":5}]}",
		"{\"op\":\"secrets\",\"secrets\":[{\"name\":\"GH\",\"placeholder\":\"" PH_GH "\",\"header\":\"A\","
		"\"hosts\":[\"a\"],\"len\":4097}]}",
		"{\"op\":\"secrets\",\"secrets\":[{\"name\":\"GH\",\"placeholder\":\"" PH_GH "\",\"header\":\"A\","
		"\"hosts\":[],\"len\":6}]}",
		"{\"op\":\"secrets\",\"secrets\":[{\"name\":\"GH\",\"placeholder\":\"" PH_GH "\",\"header\":\"A\","
		"\"hosts\":[\"a\",\"a\"],\"len\":6}]}",
		"{\"op\":\"secrets\",\"secrets\":[{\"name\":\"GH\",\"placeholder\":\"" PH_GH "\",\"header\":\"A:\","
		"\"hosts\":[\"a\"],\"len\":6}]}",
		"{\"op\":\"secrets\",\"secrets\":[{\"name\":\"GH\",\"placeholder\":\"" PH_OA "\",\"header\":\"A\","
		"\"hosts\":[\"a\"],\"len\":6}]}",
		"{\"op\":\"secrets\",\"secrets\":[{\"name\":\"GH\",\"placeholder\":\"tkbox_GH_0123\",\"header\":\"A\","
		"\"hosts\":[\"a\"],\"len\":6}]}",
		"{\"op\":\"secrets\",\"secrets\":[{\"name\":\"GH\",\"placeholder\":\"tkbox_GH_"
		"0123456789ABCDEF0123456789abcdef"
		"\",\"header\":\"A\",\"hosts\":[\"a\"],\"len\":6}]}",
		"{\"op\":\"secrets\",\"secrets\":[{\"name\":\"GH\",\"placeholder\":\"" PH_GH "\",\"header\":\"A\","
		"\"hosts\":[\"a\"],\"len\":6},{\"name\":\"GH\",\"placeholder\":\"" PH_GH "\",\"header\":\"A\","
		"\"hosts\":[\"b\"],\"len\":6}]}",
		/* boot: the CA's two halves together, each a PEM block; the trust file absolute */
		"{\"op\":\"boot\",\"box_id\":\"b1\",\"rootfs\":\"/r\",\"state_dir\":\"/s\",\"guest\":\"/"
		"g\",\"accel\":\"auto\","
		"\"vcpus\":1,\"mem_mib\":1,\"scratch_mib\":0,\"env\":[],\"lifetime_s\":0,\"ca_cert\":\"" CERT_J "\"}",
		"{\"op\":\"boot\",\"box_id\":\"b1\",\"rootfs\":\"/r\",\"state_dir\":\"/s\",\"guest\":\"/"
		"g\",\"accel\":\"auto\","
		"\"vcpus\":1,\"mem_mib\":1,\"scratch_mib\":0,\"env\":[],\"lifetime_s\":0,\"ca_key\":\"" KEY_J "\"}",
		"{\"op\":\"boot\",\"box_id\":\"b1\",\"rootfs\":\"/r\",\"state_dir\":\"/s\",\"guest\":\"/"
		"g\",\"accel\":\"auto\","
		"\"vcpus\":1,\"mem_mib\":1,\"scratch_mib\":0,\"env\":[],\"lifetime_s\":0,\"ca_cert\":\"" KEY_J
		"\",\"ca_key\":\"" KEY_J "\"}",
		"{\"op\":\"boot\",\"box_id\":\"b1\",\"rootfs\":\"/r\",\"state_dir\":\"/s\",\"guest\":\"/"
		"g\",\"accel\":\"auto\","
		"\"vcpus\":1,\"mem_mib\":1,\"scratch_mib\":0,\"env\":[],\"lifetime_s\":0,\"ca_cert\":\"" CERT_J
		"\",\"ca_key\":\"" CERT_J "\"}",
		"{\"op\":\"boot\",\"box_id\":\"b1\",\"rootfs\":\"/r\",\"state_dir\":\"/s\",\"guest\":\"/"
		"g\",\"accel\":\"auto\","
		"\"vcpus\":1,\"mem_mib\":1,\"scratch_mib\":0,\"env\":[],\"lifetime_s\":0,\"upstream_ca\":\"ca.pem\"}",
	};
	/* The lists above are each one change away from these, which pass. */
	static const char *const good_daemon[] = {
		SECRET_USE(1),
		"{\"op\":\"secret_leak\",\"conn\":0,\"secret\":\"GH\",\"host\":\"a\",\"reason\":\"r\"}",
		"{\"op\":\"model_call\",\"conn\":1,\"host\":\"a\",\"method\":\"POST\",\"path\":\"/\",\"status\":200,"
		"\"bytes_up\":0,\"bytes_down\":0,\"duration_ms\":0,\"input_tokens\":0,\"model\":\"m\"}",
		"{\"op\":\"selftest\",\"ran\":[\"curl\",\"abcdefghijklmnop\"],\"trusted\":[\"curl\"],"
		"\"clock_offset_ms\":-5}",
	};
	static const char *const good_sup[] = {
		"{\"op\":\"egress_dial\",\"conn\":1,\"url\":\"https://"
		"a:443\",\"plain\":false,\"inspect\":true,\"model\":false}",
		"{\"op\":\"secret_ok\",\"conn\":1,\"ok\":false,\"message\":\"m\"}",
		"{\"op\":\"secrets\",\"secrets\":[{\"name\":\"GH\",\"placeholder\":\"" PH_GH "\",\"header\":\"A\","
		"\"hosts\":[\"a\",\"b\"],\"len\":6},{\"name\":\"G\",\"placeholder\":\"tkbox_G_"
		"0123456789abcdef0123456789abcdef\",\"header\":\"A\",\"hosts\":[\"b\"],\"len\":4096}]}",
		"{\"op\":\"boot\",\"box_id\":\"b1\",\"rootfs\":\"/r\",\"state_dir\":\"/s\",\"guest\":\"/"
		"g\",\"accel\":\"auto\","
		"\"vcpus\":1,\"mem_mib\":1,\"scratch_mib\":0,\"env\":[],\"lifetime_s\":0,\"ca_cert\":\"" CERT_J
		"\",\"ca_key\":\"" KEY_J "\",\"upstream_ca\":\"/ca.pem\"}",
	};
	char *big = malloc(SUPMSG_MAX_PEM * 2 + 4096), *pem = malloc(SUPMSG_MAX_PEM + 2);
	char text[SUPMSG_MAX_HTTP_PATH + 2];
	struct supmsg d, m;
	json_t *v = NULL;
	size_t off;
	(void)state;

	assert_non_null(big);
	assert_non_null(pem);
	for (size_t i = 0; i < ARRAY_SIZE(good_daemon); i++) {
		assert_int_equal(decode(SUPMSG_TO_DAEMON, good_daemon[i], &d), 0);
		supmsg_release(&d);
	}
	for (size_t i = 0; i < ARRAY_SIZE(good_sup); i++) {
		assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, good_sup[i], &d), 0);
		supmsg_release(&d);
	}
	for (size_t i = 0; i < ARRAY_SIZE(to_daemon); i++) {
		assert_int_not_equal(decode(SUPMSG_TO_DAEMON, to_daemon[i], &d), 0);
	}
	for (size_t i = 0; i < ARRAY_SIZE(to_sup); i++) {
		assert_int_not_equal(decode(SUPMSG_TO_SUPERVISOR, to_sup[i], &d), 0);
	}
	/* ca_cert: SUPMSG_MAX_PEM bytes pass, one more is past the cap. */
	for (int extra = 0; extra < 2; extra++) {
		off = (size_t)snprintf(pem, SUPMSG_MAX_PEM + 2, "-----BEGIN CERTIFICATE-----");
		memset(pem + off, 'A', SUPMSG_MAX_PEM + 1 - off);
		pem[SUPMSG_MAX_PEM + (size_t)extra] = '\0';
		(void)snprintf(
			big, SUPMSG_MAX_PEM * 2 + 4096,
			"{\"op\":\"boot\",\"box_id\":\"b1\",\"rootfs\":\"/r\",\"state_dir\":\"/s\",\"guest\":\"/g\","
			"\"accel\":\"auto\",\"vcpus\":1,\"mem_mib\":1,\"scratch_mib\":0,\"env\":[],"
			"\"lifetime_s\":0,\"ca_cert\":\"%s\",\"ca_key\":\"%s\"}",
			pem, KEY_J);
		assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, big, &d), extra ? -E2BIG : 0);
		if (!extra) {
			supmsg_release(&d);
		}
	}
	/* secrets: SUPMSG_MAX_SECRETS entries pass, one more is past the cap; hosts the same. */
	for (int extra = 0; extra < 2; extra++) {
		off = (size_t)snprintf(big, 8192, "{\"op\":\"secrets\",\"secrets\":[");
		for (int i = 0; i < SUPMSG_MAX_SECRETS + extra; i++) {
			off += (size_t)snprintf(big + off, 8192 - off,
						"%s{\"name\":\"S%02d\",\"placeholder\":\"tkbox_S%02d_"
						"0123456789abcdef0123456789abcdef\",\"header\":\"A\",\"hosts\":[\"a\"],"
						"\"len\":4096}",
						i ? "," : "", i, i);
		}
		(void)snprintf(big + off, 8192 - off, "]}");
		assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, big, &d), extra ? -E2BIG : 0);
		if (!extra) {
			assert_int_equal(d.n_secrets, SUPMSG_MAX_SECRETS);
			supmsg_release(&d);
		}
		off = (size_t)snprintf(big, 8192,
				       "{\"op\":\"secrets\",\"secrets\":[{\"name\":\"GH\",\"placeholder\":\"" PH_GH
				       "\",\"header\":\"A\",\"len\":6,\"hosts\":[");
		for (int i = 0; i < SUPMSG_MAX_SECRET_HOSTS + extra; i++) {
			off += (size_t)snprintf(big + off, 8192 - off, "%s\"h%d.example\"", i ? "," : "", i);
		}
		(void)snprintf(big + off, 8192 - off, "]}]}");
		assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, big, &d), extra ? -E2BIG : 0);
		if (!extra) {
			supmsg_release(&d);
		}
	}
	/* model_call's path and model, selftest's lists: at the cap and one past it. */
	for (int extra = 0; extra < 2; extra++) {
		text[0] = '/';
		memset(text + 1, 'p', sizeof(text) - 1);
		text[SUPMSG_MAX_HTTP_PATH + (size_t)extra] = '\0';
		(void)snprintf(big, 8192,
			       "{\"op\":\"model_call\",\"conn\":1,\"host\":\"a\",\"method\":\"POST\",\"path\":\"%s\","
			       "\"status\":200,\"bytes_up\":0,\"bytes_down\":0,\"duration_ms\":0}",
			       text);
		assert_int_equal(decode(SUPMSG_TO_DAEMON, big, &d), extra ? -E2BIG : 0);
		if (!extra) {
			supmsg_release(&d);
		}
		memset(text, 'm', sizeof(text));
		text[SUPMSG_MAX_MODEL + (size_t)extra] = '\0';
		(void)snprintf(big, 8192,
			       "{\"op\":\"model_call\",\"conn\":1,\"host\":\"a\",\"method\":\"POST\",\"path\":\"/\","
			       "\"status\":200,\"bytes_up\":0,\"bytes_down\":0,\"duration_ms\":0,\"model\":\"%s\"}",
			       text);
		assert_int_equal(decode(SUPMSG_TO_DAEMON, big, &d), extra ? -E2BIG : 0);
		if (!extra) {
			supmsg_release(&d);
		}
		off = (size_t)snprintf(big, 8192,
				       "{\"op\":\"selftest\",\"trusted\":[],\"clock_offset_ms\":0,\"ran\":[");
		for (int i = 0; i < SUPMSG_MAX_SELFTEST + extra; i++) {
			off += (size_t)snprintf(big + off, 8192 - off, "%s\"c%d\"", i ? "," : "", i);
		}
		(void)snprintf(big + off, 8192 - off, "]}");
		assert_int_equal(decode(SUPMSG_TO_DAEMON, big, &d), extra ? -E2BIG : 0);
		if (!extra) {
			supmsg_release(&d);
		}
	}
	/* The encoder refuses what the decoder would. */
	m = (struct supmsg){ .op = SUPMSG_SECRET_USE, .conn = 1, .secret = "gh", .host = "a" };
	assert_int_equal(supmsg_encode(&m, &v), -EINVAL);
	m = dial_msg;
	m.inspect = true;
	m.plain = true;
	assert_int_equal(supmsg_encode(&m, &v), -EINVAL);
	assert_null(v);
	free(big);
	free(pem);
}

/* The monitor's issue-13 rows: each refusal names its rule. */
static void test_secrets_monitor(void **state)
{
	struct supmon mon;
	struct supmsg dial = dial_msg, stop = { .op = SUPMSG_STOP };
	struct supmsg secrets = { .op = SUPMSG_SECRETS, .secrets = two_secrets, .n_secrets = 2 };
	struct supmsg ok = { .op = SUPMSG_SECRET_OK, .conn = 1, .ok = true };
	const char *why = NULL;
	(void)state;

	supmon_init(&mon);
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &secrets, &why), -EPROTO); /* before boot */
	assert_non_null(strstr(why, "state"));
	assert_int_equal(send(&mon, &boot_msg), 0);
	assert_int_equal(receive(&mon, SELFTEST, &why), -EPROTO); /* booting */
	assert_int_equal(receive(&mon, READY, &why), 0);
	assert_int_equal(receive(&mon,
				 "{\"op\":\"egress_open\",\"conn\":1,\"form\":\"connect\",\"host\":\"a\","
				 "\"port\":443}",
				 &why),
			 0);
	/* An inspected dial before the secrets: the supervisor would inspect without them. */
	dial.inspect = true;
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &dial, &why), -EPROTO);
	assert_non_null(strstr(why, "before the secrets"));
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &secrets, &why), 0);
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &secrets, &why), -EPROTO);
	assert_non_null(strstr(why, "second secrets"));
	/* A use before the dial; a model call before the dial. */
	assert_int_equal(receive(&mon, SECRET_USE(1), &why), -EPROTO);
	assert_non_null(strstr(why, "not dialled"));
	assert_int_equal(receive(&mon, MODEL_CALL(1), &why), -EPROTO);
	assert_non_null(strstr(why, "not dialled"));
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &dial, &why), 0);
	/* An answer with nothing pending. */
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &ok, &why), -EPROTO);
	assert_non_null(strstr(why, "no secret_use pending"));
	assert_int_equal(receive(&mon, SECRET_USE(1), &why), 0);
	assert_int_equal(receive(&mon, SECRET_USE(1), &why), -EPROTO);
	assert_non_null(strstr(why, "second secret_use"));
	/* The conn's end waits for the answer (else the answer would cross a forgotten conn). */
	assert_int_equal(receive(&mon,
				 "{\"op\":\"egress_done\",\"conn\":1,\"bytes_up\":0,\"bytes_down\":0,"
				 "\"duration_ms\":0}",
				 &why),
			 -EPROTO);
	assert_non_null(strstr(why, "secret_ok"));
	assert_int_equal(receive(&mon, MODEL_CALL(1), &why), 0);
	assert_int_equal(receive(&mon, MODEL_CALL(2), &why), -EPROTO); /* never asked */
	assert_int_equal(receive(&mon,
				 "{\"op\":\"secret_leak\",\"conn\":0,\"secret\":\"GH\",\"host\":\"e\","
				 "\"reason\":\"r\"}",
				 &why),
			 0);
	assert_int_equal(receive(&mon, SELFTEST, &why), 0);
	assert_int_equal(receive(&mon, SELFTEST, &why), -EPROTO);
	assert_non_null(strstr(why, "second selftest"));
	/* Stopping: the pending answer still goes, leaks and model calls still come, no new use. */
	assert_int_equal(send(&mon, &stop), 0);
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &ok, &why), 0);
	assert_int_equal(receive(&mon, SECRET_USE(1), &why), -EPROTO);
	assert_non_null(strstr(why, "state"));
	assert_int_equal(receive(&mon, MODEL_CALL(1), &why), 0);
	assert_int_equal(receive(&mon,
				 "{\"op\":\"egress_done\",\"conn\":1,\"bytes_up\":0,\"bytes_down\":0,"
				 "\"duration_ms\":0}",
				 &why),
			 0);
	assert_int_equal(receive(&mon, MODEL_CALL(1), &why), -EPROTO); /* the conn ended */
	assert_int_equal(receive(&mon, "{\"op\":\"stopped\",\"reason\":\"stop\"}", &why), 0);
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &ok, &why), -EPROTO); /* over */
}

/* ---- the patch door (issue 14) ---- */

#define SHA "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
#define DIFF_OK(n)                                                                                                     \
	"{\"op\":\"diff_done\",\"diff\":" #n ",\"ok\":true,\"sha256\":\"" SHA "\",\"bytes\":10,\"files\":1,"           \
	"\"notices\":[]}"
#define DIFF_ERR(n) "{\"op\":\"diff_done\",\"diff\":" #n ",\"ok\":false,\"error\":\"no\"}"

static void test_diff_roundtrip(void **state)
{
	struct supmsg_notice nt[2] = { { "a/.git/config", "a .git segment is left out" },
				       { "fifo", "a special file is left out" } };
	struct supmsg diff = { .op = SUPMSG_DIFF, .diff = 3 }, d;
	struct supmsg ok = { .op = SUPMSG_DIFF_DONE,
			     .diff = 3,
			     .ok = true,
			     .sha256 = SHA,
			     .patch_bytes = 123,
			     .files = 2,
			     .notices = nt,
			     .n_notices = 2 };
	struct supmsg bad = { .op = SUPMSG_DIFF_DONE, .diff = 3, .error = "the guest could not make the patch: x" };
	char *s;
	(void)state;

	s = wire(&diff);
	assert_string_equal(s, "{\"op\":\"diff\",\"diff\":3}");
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), 0);
	assert_int_equal(d.op, SUPMSG_DIFF);
	assert_int_equal(d.diff, 3);
	assert_int_equal(supmsg_fds(&d), 0);
	supmsg_release(&d);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), -EPROTO); /* a diff is the daemon's word */
	free(s);
	s = wire(&ok);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), 0);
	assert_true(d.ok);
	assert_int_equal(d.diff, 3);
	assert_string_equal(d.sha256, SHA);
	assert_int_equal(d.patch_bytes, 123);
	assert_int_equal(d.files, 2);
	assert_int_equal(d.n_notices, 2);
	assert_string_equal(d.notices[0].path, "a/.git/config");
	assert_string_equal(d.notices[1].why, "a special file is left out");
	assert_null(d.error);
	assert_int_equal(supmsg_fds(&d), 1); /* the patch's memfd */
	supmsg_release(&d);
	assert_int_equal(decode(SUPMSG_TO_SUPERVISOR, s, &d), -EPROTO);
	free(s);
	s = wire(&bad);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), 0);
	assert_false(d.ok);
	assert_string_equal(d.error, "the guest could not make the patch: x");
	assert_null(d.sha256);
	assert_int_equal(supmsg_fds(&d), 0); /* no patch, no fd */
	supmsg_release(&d);
	free(s);
}

/* Every key of both messages: the closed key set, each range and cap one past it, the ok/not-ok shapes. */
static void test_diff_closed(void **state)
{
	static const char *const refused[] = {
		/* diff */
		"{\"op\":\"diff\"}",
		"{\"op\":\"diff\",\"diff\":0}",
		"{\"op\":\"diff\",\"diff\":9007199254740992}",
		"{\"op\":\"diff\",\"diff\":\"1\"}",
		"{\"op\":\"diff\",\"diff\":1,\"x\":1}",
		/* diff_done: numbers */
		"{\"op\":\"diff_done\",\"ok\":false,\"error\":\"no\"}",
		"{\"op\":\"diff_done\",\"diff\":0,\"ok\":false,\"error\":\"no\"}",
		"{\"op\":\"diff_done\",\"diff\":1,\"error\":\"no\"}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":1,\"error\":\"no\"}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":false,\"error\":\"no\",\"y\":1}",
		/* not ok: an error and nothing else */
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":false}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":false,\"error\":\"\"}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":false,\"error\":\"no\",\"sha256\":\"" SHA "\"}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":false,\"error\":\"no\",\"bytes\":1}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":false,\"error\":\"no\",\"files\":1}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":false,\"error\":\"no\",\"notices\":[]}",
		/* ok: digest, bytes, files and notices, no error */
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"bytes\":1,\"files\":1,\"notices\":[]}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA "\",\"files\":1,\"notices\":[]}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA "\",\"bytes\":1,\"notices\":[]}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA "\",\"bytes\":1,\"files\":1}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA "\",\"bytes\":1,\"files\":1,"
		"\"notices\":[],\"error\":\"x\"}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":"
		"\"5891B5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d0"
		"8286a2e846f6be03\",\"bytes\":1,\"files\":1,\"notices\":[]}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"5891b5b5\",\"bytes\":1,\"files\":1,"
		"\"notices\":[]}",
		/* bytes one past PATCH_MAX_BYTES (32 MiB), files one past PATCH_MAX_FILES, negative */
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA "\",\"bytes\":33554433,\"files\":1,"
		"\"notices\":[]}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA "\",\"bytes\":-1,\"files\":1,"
		"\"notices\":[]}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA "\",\"bytes\":1,\"files\":4097,"
		"\"notices\":[]}",
		/* notices: pairs of non-empty strings without control bytes */
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA "\",\"bytes\":1,\"files\":1,"
		"\"notices\":[[\"a\"]]}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA "\",\"bytes\":1,\"files\":1,"
		"\"notices\":[[\"a\",\"b\",\"c\"]]}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA "\",\"bytes\":1,\"files\":1,"
		"\"notices\":[[\"\",\"b\"]]}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA "\",\"bytes\":1,\"files\":1,"
		"\"notices\":[[\"a\",1]]}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA "\",\"bytes\":1,\"files\":1,"
		"\"notices\":[[\"a\\u001b[31m\",\"b\"]]}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA "\",\"bytes\":1,\"files\":1,"
		"\"notices\":[[\"a\\u0000b\",\"b\"]]}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA "\",\"bytes\":1,\"files\":1,"
		"\"notices\":{}}",
		"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA "\",\"bytes\":1,\"files\":1,"
		"\"notices\":[\"a\"]}",
	};
	struct supmsg d;
	char *s;
	json_t *a, *o, *v = NULL;
	char *big;
	(void)state;

	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		int r = decode(strstr(refused[i], "diff_done") ? SUPMSG_TO_DAEMON : SUPMSG_TO_SUPERVISOR, refused[i],
			       &d);
		if (r != -EBADMSG && r != -E2BIG) {
			fail_msg("accepted (%d): %s", r, refused[i]);
		}
	}
	/* The edges that pass: 0 bytes and files (an empty patch), the caps themselves. */
	assert_int_equal(decode(SUPMSG_TO_DAEMON,
				"{\"op\":\"diff_done\",\"diff\":9007199254740991,\"ok\":true,\"sha256\":\"" SHA
				"\",\"bytes\":0,\"files\":0,\"notices\":[]}",
				&d),
			 0);
	supmsg_release(&d);
	assert_int_equal(decode(SUPMSG_TO_DAEMON,
				"{\"op\":\"diff_done\",\"diff\":1,\"ok\":true,\"sha256\":\"" SHA
				"\",\"bytes\":33554432,\"files\":4096,\"notices\":[]}",
				&d),
			 0);
	supmsg_release(&d);

	/* PATCH_MAX_NOTICES (64) notices pass, 65 are past the cap. */
	o = json_pack("{s:s,s:i,s:b,s:s,s:i,s:i}", "op", "diff_done", "diff", 1, "ok", 1, "sha256", SHA, "bytes", 1,
		      "files", 1);
	a = json_array();
	assert_non_null(o);
	assert_non_null(a);
	for (int i = 0; i < 64; i++) {
		assert_int_equal(json_array_append_new(a, json_pack("[ss]", "p", "w")), 0);
	}
	assert_int_equal(json_object_set(o, "notices", a), 0);
	s = json_dumps(o, JSON_COMPACT);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), 0);
	assert_int_equal(d.n_notices, 64);
	supmsg_release(&d);
	free(s);
	assert_int_equal(json_array_append_new(a, json_pack("[ss]", "p", "w")), 0);
	s = json_dumps(o, JSON_COMPACT);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), -E2BIG);
	free(s);
	/* A notice string of PATCH_MAX_NOTICE (512) bytes passes, 513 is past the cap. */
	big = malloc(514);
	assert_non_null(big);
	memset(big, 'x', 513);
	big[512] = '\0';
	assert_int_equal(json_array_clear(a), 0);
	assert_int_equal(json_array_append_new(a, json_pack("[ss]", big, "w")), 0);
	s = json_dumps(o, JSON_COMPACT);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), 0);
	supmsg_release(&d);
	free(s);
	big[512] = 'x';
	big[513] = '\0';
	assert_int_equal(json_array_clear(a), 0);
	assert_int_equal(json_array_append_new(a, json_pack("[ss]", "p", big)), 0);
	s = json_dumps(o, JSON_COMPACT);
	assert_int_equal(decode(SUPMSG_TO_DAEMON, s, &d), -E2BIG);
	free(s);
	json_decref(a);
	json_decref(o);
	/* The encoder refuses what the decoder would: an ok without a digest, a not-ok without its error. */
	{
		struct supmsg m = { .op = SUPMSG_DIFF_DONE, .diff = 1, .ok = true, .patch_bytes = 1, .files = 1 };
		assert_int_equal(supmsg_encode(&m, &v), -EINVAL);
		m = (struct supmsg){ .op = SUPMSG_DIFF_DONE, .diff = 1 };
		assert_int_equal(supmsg_encode(&m, &v), -EINVAL);
		m = (struct supmsg){ .op = SUPMSG_DIFF, .diff = 0 };
		assert_int_equal(supmsg_encode(&m, &v), -EINVAL);
		/* An error of SUPMSG_MAX_TEXT + 1 bytes. */
		free(big);
		big = malloc(SUPMSG_MAX_TEXT + 2);
		assert_non_null(big);
		memset(big, 'e', SUPMSG_MAX_TEXT + 1);
		big[SUPMSG_MAX_TEXT + 1] = '\0';
		m = (struct supmsg){ .op = SUPMSG_DIFF_DONE, .diff = 1, .error = big };
		assert_int_equal(supmsg_encode(&m, &v), -EINVAL);
		big[SUPMSG_MAX_TEXT] = '\0';
		assert_int_equal(supmsg_encode(&m, &v), 0);
		json_decref(v);
		v = NULL;
	}
	free(big);
	assert_null(v);
}

/* The monitor's issue-14 rows: one diff at a time, each answered once, only the pending one, also while stopping. */
static void test_diff_monitor(void **state)
{
	struct supmon mon;
	struct supmsg diff1 = { .op = SUPMSG_DIFF, .diff = 1 }, diff2 = { .op = SUPMSG_DIFF, .diff = 2 };
	struct supmsg stop = { .op = SUPMSG_STOP };
	const char *why = NULL;
	(void)state;

	supmon_init(&mon);
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &diff1, &why), -EPROTO); /* before boot */
	assert_non_null(strstr(why, "state"));
	assert_int_equal(send(&mon, &boot_msg), 0);
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &diff1, &why), -EPROTO); /* booting */
	assert_int_equal(receive(&mon, READY, &why), 0);
	/* An answer nobody asked for. */
	assert_int_equal(receive(&mon, DIFF_OK(1), &why), -EPROTO);
	assert_non_null(strstr(why, "not pending"));
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &diff1, &why), 0);
	/* One at a time. */
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &diff2, &why), -EPROTO);
	assert_non_null(strstr(why, "one at a time"));
	/* The answer names the pending diff, and comes once. */
	assert_int_equal(receive(&mon, DIFF_OK(2), &why), -EPROTO);
	assert_non_null(strstr(why, "not pending"));
	assert_int_equal(receive(&mon, DIFF_OK(1), &why), 0);
	assert_int_equal(receive(&mon, DIFF_ERR(1), &why), -EPROTO);
	assert_non_null(strstr(why, "not pending"));
	/* The next diff; a stop does not end it: its answer still comes while stopping, not after. */
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &diff2, &why), 0);
	assert_int_equal(send(&mon, &stop), 0);
	assert_int_equal(supmon_apply(&mon, SUPMSG_TO_SUPERVISOR, &diff1, &why), -EPROTO); /* no new diff */
	assert_non_null(strstr(why, "state"));
	assert_int_equal(receive(&mon, DIFF_ERR(2), &why), 0);
	assert_int_equal(receive(&mon, "{\"op\":\"stopped\",\"reason\":\"stop\"}", &why), 0);
	assert_int_equal(receive(&mon, DIFF_ERR(2), &why), -EPROTO); /* over */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),	  cmocka_unit_test(test_closed),
		cmocka_unit_test(test_monitor_life),	  cmocka_unit_test(test_monitor_refuses),
		cmocka_unit_test(test_monitor_cap),	  cmocka_unit_test(test_egress_roundtrip),
		cmocka_unit_test(test_egress_closed),	  cmocka_unit_test(test_egress_monitor),
		cmocka_unit_test(test_secrets_roundtrip), cmocka_unit_test(test_secrets_closed),
		cmocka_unit_test(test_secrets_monitor),	  cmocka_unit_test(test_diff_roundtrip),
		cmocka_unit_test(test_diff_closed),	  cmocka_unit_test(test_diff_monitor),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
