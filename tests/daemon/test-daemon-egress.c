/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "banned.h"
#include "daemon/egress-approve.h"
#include "daemon/egress-door.h"
#include "daemon/signer-link.h"
#include "json.h"

/*
 * The daemon's side of the network door (egress-door.c) against a real dev
 * signer (tests/daemon/egress-door.sh starts it and passes its socket). The
 * box is a probe: it keeps what the door sends the supervisor (refusals,
 * dials) and its events in memory, sends the door's tkbox.egress records and
 * must-keep observations to the signer, and plays the supervisor's
 * egress_done. Whether the signer decided anything is read from the run's
 * sequence numbers: a marker observation before and after a connection.
 * Traffic goes to loopback only: names map to addresses with --resolve
 * entries (the config), never the host's resolver.
 */

static char *run_id, *run_token;

struct probe {
	unsigned refusals, records, dials, lost;
	int status;
	char rule[SUPMSG_MAX_RULE];
	char message[SUPMSG_MAX_TEXT];
	char url[EGRESS_URL_MAX];
	bool plain;
	bool inspect, model; /* what the last egress_dial said */
	char events[4096];
	json_t *last_record;
	bool stopping;
	bool has_abandon; /* abandon_fd hangs up when the box's egress closes (else none) */
	int abandon_fd;
	char abandoned[256]; /* the detail of egress.abandoned */
};

static int64_t observe_seq(const char *kind, json_t *data)
{
	json_t *reply = NULL;
	char err[512] = "";
	int64_t seq = -1;
	int r = signer_link_once(
		signer_link_request_id(json_pack("{s:s,s:s,s:s,s:s,s:o}", "method", "observe", "run_id", run_id,
						 "run_token", run_token, "kind", kind, "data", data)),
		&reply, err, sizeof(err));

	if (r < 0) {
		fail_msg("observe %s: %s", kind, err);
	}
	assert_int_equal(json_get_int(reply, "run_seq", &seq), 0);
	json_decref(reply);
	return seq;
}

/* The run's sequence now (one record: the marker itself). */
static int64_t marker(void)
{
	return observe_seq("tkbox.egress", json_pack("{s:s}", "marker", "test"));
}

static void op_record(void *box, json_t *data)
{
	struct probe *p = box;

	p->records++;
	json_decref(p->last_record);
	p->last_record = json_incref(data);
	(void)observe_seq("tkbox.egress", data);
}

static void op_event(void *box, const char *event, json_t *extra)
{
	struct probe *p = box;
	size_t n = strlen(p->events);

	(void)snprintf(p->events + n, sizeof(p->events) - n, "%s ", event);
	if (strcmp(event, "egress.abandoned") == 0) {
		const char *d = json_string_value(json_object_get(extra, "detail"));
		(void)snprintf(p->abandoned, sizeof(p->abandoned), "%s", d ? d : "");
	}
	json_decref(extra);
}

static void op_refuse(void *box, int64_t conn, int status, const char *rule, const char *message)
{
	struct probe *p = box;

	(void)conn;
	p->refusals++;
	p->status = status;
	(void)snprintf(p->rule, sizeof(p->rule), "%s", rule);
	(void)snprintf(p->message, sizeof(p->message), "%s", message);
}

static int op_dial(void *box, int64_t conn, const char *url, bool plain, bool inspect, bool model, int fd,
		   void **ret_wait)
{
	struct probe *p = box;

	(void)conn;
	p->dials++;
	(void)snprintf(p->url, sizeof(p->url), "%s", url);
	p->plain = plain;
	p->inspect = inspect;
	p->model = model;
	(void)close(fd);
	*ret_wait = p;
	return 0;
}

/* The supervisor's egress_done: what the relay moved (wait: the handle op_dial gave, else -ESHUTDOWN). */
static int op_wait_done(void *box, void *wait, struct egress_done_info *ret)
{
	if (wait != box) {
		return -ESHUTDOWN;
	}
	*ret = (struct egress_done_info){ .bytes_up = 517, .bytes_down = 4096, .duration_ms = 12 };
	return 0;
}

static bool op_stopping(void *box)
{
	return ((struct probe *)box)->stopping;
}

static int op_abandon_fd(void *box)
{
	struct probe *p = box;

	return p->has_abandon ? p->abandon_fd : -1;
}

static const struct egress_box_ops probe_ops = {
	.record = op_record,
	.event = op_event,
	.refuse = op_refuse,
	.dial = op_dial,
	.wait_done = op_wait_done,
	.stopping = op_stopping,
	.abandon_fd = op_abandon_fd,
};

static void host_event(void *box, bool problem, const char *event, json_t *extra)
{
	(void)problem;
	op_event(box, event, extra);
}

static void host_signer_back(void *box)
{
	(void)box;
}

static void host_complete_lost(void *box, int r)
{
	(void)r;
	((struct probe *)box)->lost++;
}

static int host_observe_keep(void *box, const char *kind, json_t *data, char *err, size_t err_size)
{
	(void)box;
	return signer_link_once(
		signer_link_request_id(json_pack("{s:s,s:s,s:s,s:s,s:o}", "method", "observe", "run_id", run_id,
						 "run_token", run_token, "kind", kind, "data", data)),
		NULL, err, err_size);
}

static const struct crossing_host_ops probe_host = {
	.event = host_event,
	.signer_back = host_signer_back,
	.complete_lost = host_complete_lost,
	.observe_keep = host_observe_keep,
};

static struct egress_door_config cfg;

static void policy_of(struct egress_policy *pol, struct egress_allow *allow, const char *const *entries,
		      bool inspect_all)
{
	size_t n = 0;

	for (; entries && entries[n]; n++) {
		assert_int_equal(egress_allow_parse(entries[n], &allow[n]), 0);
	}
	*pol = (struct egress_policy){ .allow = allow, .n_allow = n, .inspect_all = inspect_all };
}

static struct egress_conn conn_of(struct probe *p, const struct egress_policy *pol, const char *host, int64_t port,
				  bool connect)
{
	static int64_t conn;

	return (struct egress_conn){ .cfg = &cfg,
				     .policy = pol,
				     .box_name = "test-box",
				     .ops = &probe_ops,
				     .host = &probe_host,
				     .box = p,
				     .run_id = run_id,
				     .run_token = run_token,
				     .approval_wait_ms = 300,
				     .conn = ++conn,
				     .form_connect = connect,
				     .host_text = host,
				     .port = port };
}

/*
 * Every textual form of a refused address, and the metadata and localhost
 * names, are refused before any decision, even when the allowlist names
 * them: 403, the rule, one tkbox.egress record, nothing dialled, and the
 * signer's run holds no record but that one (no WebFetch decision).
 */
static void test_refused_before_decide(void **state)
{
	static const struct {
		const char *host;
		const char *rule;
		const char *why;
	} cases[] = {
		{ "127.0.0.1", "blocked-address", "127.0.0.1 is loopback" },
		{ "2130706433", "blocked-address", "127.0.0.1 is loopback" },
		{ "0x7f.1", "blocked-address", "127.0.0.1 is loopback" },
		{ "0177.0.0.1", "blocked-address", "127.0.0.1 is loopback" },
		{ "::ffff:127.0.0.1", "blocked-address", "loopback" },
		{ "[::1]", "blocked-address", "loopback" },
		{ "10.0.0.1", "blocked-address", "private" },
		{ "100.64.0.1", "blocked-address", "shared" },
		{ "169.254.169.254", "blocked-address", "metadata" },
		{ "fd00:ec2::254", "blocked-address", "metadata" },
		{ "64:ff9b::a9fe:a9fe", "blocked-address", "metadata" },
		{ "metadata.google.internal", "blocked-name", "metadata" },
		{ "localhost", "blocked-name", "loopback" },
		{ "api.localhost", "blocked-name", "loopback" },
		{ "198.51.100.7", "blocked-address", "--egress-block" }, /* the block list (set below) */
		{ "bad_host.example", "bad-host", "not a DNS name" },
	};
	struct egress_allow allow[4];
	struct egress_policy pol;
	static const char *const entries[] = { "10.0.0.1", "localhost", "metadata.google.internal", NULL };

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	assert_int_equal(egress_block_parse("198.51.100.0/24", &cfg.block), 0);
	policy_of(&pol, allow, entries, false);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct probe p = { 0 };
		struct egress_conn c = conn_of(&p, &pol, cases[i].host, 443, true);
		int64_t before = marker(), after;

		assert_int_equal(egress_door_run(&c), -EPERM);
		after = marker();
		if (p.status != (strcmp(cases[i].rule, "bad-host") == 0 ? 400 : 403) ||
		    strcmp(p.rule, cases[i].rule) != 0 || !strstr(p.message, cases[i].why)) {
			fail_msg("%s: %d %s %s", cases[i].host, p.status, p.rule, p.message);
		}
		assert_int_equal(p.refusals, 1);
		assert_int_equal(p.dials, 0);
		assert_int_equal(p.records, 1);
		assert_false(c.decided);
		assert_null(strstr(p.events, "egress.decided"));
		assert_non_null(strstr(p.events, "egress.refused"));
		/* The run holds the two markers and the one tkbox.egress record: no decision in between. */
		assert_int_equal(after - before, 2);
		assert_string_equal(json_string_value(json_object_get(p.last_record, "decision")), "refused");
		assert_string_equal(json_string_value(json_object_get(p.last_record, "rule")), cases[i].rule);
		json_decref(p.last_record);
	}
}

/* An allowlisted name is resolved once, every address checked: one refused address refuses, with no decision. */
static void test_allowlisted_resolves_private(void **state)
{
	static const char *const entries[] = { "internal.test", "mixed.test", "mapped.test", NULL };
	struct egress_allow allow[4];
	struct egress_policy pol;
	char err[256];
	static const struct {
		const char *host, *why;
	} cases[] = {
		{ "internal.test", "internal.test resolves to an address that is refused: 10.1.2.3 is a private" },
		{ "mixed.test", "mixed.test resolves to an address that is refused: fd00::1 is a private" },
		{ "mapped.test", "mapped.test resolves to an address that is refused: ::ffff:127.0.0.1 is loopback" },
	};

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	assert_int_equal(egress_resolve_parse("internal.test=10.1.2.3", &cfg, err, sizeof(err)), 0);
	assert_int_equal(egress_resolve_parse("mixed.test=192.0.2.10", &cfg, err, sizeof(err)), 0);
	assert_int_equal(egress_resolve_parse("mixed.test=fd00::1", &cfg, err, sizeof(err)), 0);
	assert_int_equal(egress_resolve_parse("mapped.test=::ffff:127.0.0.1", &cfg, err, sizeof(err)), 0);
	policy_of(&pol, allow, entries, false);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct probe p = { 0 };
		struct egress_conn c = conn_of(&p, &pol, cases[i].host, 443, true);
		int64_t before = marker();

		assert_int_equal(egress_door_run(&c), -EPERM);
		assert_int_equal(marker() - before, 2);
		assert_true(c.resolved);
		assert_false(c.decided);
		assert_int_equal(p.status, 403);
		assert_string_equal(p.rule, "resolved-address");
		if (!strstr(p.message, cases[i].why) || !strstr(p.message, "nothing can allow them")) {
			fail_msg("%s: %s", cases[i].host, p.message);
		}
		assert_int_equal(p.dials, 0);
		json_decref(p.last_record);
	}
}

/* --resolve NAME=ADDR: both sides validated, several addresses per name, at most 64, the box record's form. */
static void test_resolve_entries(void **state)
{
	static const char *const bad[] = { "",
					   "name",
					   "=192.0.2.1",
					   "name=",
					   "1.2.3.4=192.0.2.1",
					   "bad_name=192.0.2.1",
					   "a.test=0x7f.1",
					   "a.test=127.1",
					   "a.test=192.0.2.01",
					   "a.test=[2001:db8::1]",
					   "a.test=fe80::1%eth0",
					   "a.test=example.com",
					   "a.test=192.0.2.1=x" };
	struct egress_addr a[4];
	char err[256], text[EGRESS_ADDR_TEXT_MAX];
	json_t *v;

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		err[0] = '\0';
		if (egress_resolve_parse(bad[i], &cfg, err, sizeof(err)) != -EINVAL || !strstr(err, "--resolve")) {
			fail_msg("--resolve %s was taken (%s)", bad[i], err);
		}
	}
	assert_int_equal(cfg.n_resolve, 0);
	assert_int_equal(egress_resolve_parse("Mirror.Test.=192.0.2.10", &cfg, err, sizeof(err)), 0);
	assert_int_equal(egress_resolve_parse("mirror.test=2001:db8::10", &cfg, err, sizeof(err)), 0);
	assert_int_equal(egress_resolve_lookup(&cfg, "mirror.test", a, 4), 2);
	egress_addr_format(&a[0], text);
	assert_string_equal(text, "192.0.2.10");
	egress_addr_format(&a[1], text);
	assert_string_equal(text, "2001:db8::10");
	assert_int_equal(egress_resolve_lookup(&cfg, "other.test", a, 4), 0);
	v = egress_resolve_json(&cfg);
	assert_string_equal(json_string_value(json_array_get(v, 0)), "mirror.test=192.0.2.10");
	assert_string_equal(json_string_value(json_array_get(v, 1)), "mirror.test=2001:db8::10");
	json_decref(v);
	for (size_t i = 2; i < EGRESS_MAX_RESOLVE; i++) {
		char e[64];
		(void)snprintf(e, sizeof(e), "n%zu.test=192.0.2.%zu", i, i);
		assert_int_equal(egress_resolve_parse(e, &cfg, err, sizeof(err)), 0);
	}
	assert_int_equal(egress_resolve_parse("one-more.test=192.0.2.99", &cfg, err, sizeof(err)), -E2BIG);
	assert_non_null(strstr(err, "at most 64"));
	assert_int_equal(cfg.n_resolve, EGRESS_MAX_RESOLVE);
}

/*
 * The url the signer decides, per form, and what the checks find before any
 * decision: an off-list name is not resolved, a literal is its own address,
 * this host's own addresses are refused.
 */
static void test_url_forms(void **state)
{
	static const struct {
		const char *entry, *host;
		int port;
		bool connect;
		const char *url;
		bool plain;
		enum egress_match match;
	} cases[] = {
		{ "a.example.com", "a.example.com", 443, true, "https://a.example.com:443", false, EGRESS_MATCH_HOST },
		{ "a.example.com:443", "a.example.com", 443, true, "tcp://a.example.com:443", true, EGRESS_MATCH_PORT },
		{ "a.example.com", "A.Example.COM.", 80, false, "http://a.example.com:80", false, EGRESS_MATCH_HOST },
		{ "a.example.com:8080", "a.example.com", 8080, false, "http://a.example.com:8080", true,
		  EGRESS_MATCH_PORT },
		{ "a.example.com:22", "a.example.com", 22, true, "tcp://a.example.com:22", true, EGRESS_MATCH_PORT },
		{ "*.example.com", "deep.a.example.com", 443, true, "https://deep.a.example.com:443", false,
		  EGRESS_MATCH_HOST },
		{ "a.example.com", "a.example.com", 22, true, "tcp://a.example.com:22", false, EGRESS_MATCH_NONE },
		{ "a.example.com", "offlist.test", 443, true, "https://offlist.test:443", false, EGRESS_MATCH_NONE },
		{ "a.example.com", "2001:db8::5", 443, true, "https://[2001:db8::5]:443", false, EGRESS_MATCH_NONE },
		{ "a.example.com", "203.0.113.9", 8443, true, "tcp://203.0.113.9:8443", false, EGRESS_MATCH_NONE },
	};
	struct egress_host_addrs own = { .n = 1 };
	char err[256];

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	assert_int_equal(egress_resolve_parse("a.example.com=192.0.2.10", &cfg, err, sizeof(err)), 0);
	assert_int_equal(egress_resolve_parse("deep.a.example.com=192.0.2.11", &cfg, err, sizeof(err)), 0);
	assert_int_equal(egress_resolve_parse("offlist.test=192.0.2.12", &cfg, err, sizeof(err)), 0);
	assert_int_equal(egress_addr_parse_canonical("192.0.2.55", 10, &own.a[0]), 0);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct egress_allow allow[1];
		struct egress_policy pol;
		const char *entries[] = { cases[i].entry, NULL };
		struct probe p = { 0 };
		struct egress_conn c;

		policy_of(&pol, allow, entries, false);
		c = conn_of(&p, &pol, cases[i].host, cases[i].port, cases[i].connect);
		assert_int_equal(egress_door_check(&c, &own), 0);
		if (strcmp(c.url, cases[i].url) != 0 || c.plain != cases[i].plain || c.match != cases[i].match) {
			fail_msg("%s %s:%d: %s plain %d match %d", cases[i].entry, cases[i].host, cases[i].port, c.url,
				 c.plain, c.match);
		}
		/* Only a name on the list is resolved before a decision. */
		if (c.h.kind == EGRESS_HOST_NAME) {
			assert_int_equal(c.resolved, cases[i].match != EGRESS_MATCH_NONE);
			assert_int_equal(c.n_addrs, cases[i].match != EGRESS_MATCH_NONE ? 1 : 0);
		} else {
			assert_false(c.resolved);
			assert_int_equal(c.n_addrs, 1);
		}
		assert_int_equal(p.refusals + p.records + p.dials, 0); /* the checks send and record nothing */
	}
	/* This host's own address, in another form. */
	{
		struct egress_allow allow[1];
		struct egress_policy pol;
		const char *entries[] = { "a.example.com", NULL };
		struct probe p = { 0 };
		struct egress_conn c;
		policy_of(&pol, allow, entries, false);
		c = conn_of(&p, &pol, "3221226039", 443, true); /* 192.0.2.55 */
		assert_int_equal(egress_door_check(&c, &own), -EPERM);
		assert_string_equal(c.refusal.rule, "blocked-address");
		assert_non_null(strstr(c.refusal.message, "192.0.2.55"));
		/* CONNECT to 80 and a port out of range, though the supervisor refuses them first. */
		c = conn_of(&p, &pol, "a.example.com", 80, true);
		assert_int_equal(egress_door_check(&c, &own), -EPERM);
		assert_string_equal(c.refusal.rule, "connect-80");
		c = conn_of(&p, &pol, "a.example.com", 65536, true);
		assert_int_equal(egress_door_check(&c, &own), -EPERM);
		assert_int_equal(c.refusal.status, 400);
	}
}

/* tkbox.egress: 20 in a second pass, the 21st is counted, one summary once that second has ended. */
static void test_rate(void **state)
{
	struct egress_rate r = { 0 };
	int64_t second = -1;

	(void)state;
	for (int i = 0; i < EGRESS_RECORD_RATE; i++) {
		assert_true(egress_rate_admit(&r, 5000 + i));
	}
	assert_false(egress_rate_admit(&r, 5500));
	assert_false(egress_rate_admit(&r, 5999));
	assert_int_equal(egress_rate_summary(&r, 5999, &second), 0); /* the second has not ended */
	assert_int_equal(egress_rate_summary(&r, 6000, &second), 2);
	assert_int_equal(second, 5);
	assert_int_equal(egress_rate_summary(&r, 6001, &second), 0); /* one summary */
	/* The next second starts afresh. */
	for (int i = 0; i < EGRESS_RECORD_RATE; i++) {
		assert_true(egress_rate_admit(&r, 6001 + i));
	}
	assert_false(egress_rate_admit(&r, 6100));
	assert_int_equal(egress_rate_summary(&r, 7000, &second), 1);
	assert_int_equal(second, 6);
	/* Nothing suppressed: no summary. */
	assert_true(egress_rate_admit(&r, 9000));
	assert_int_equal(egress_rate_summary(&r, 12000, &second), 0);
}

/* egress_door_run on a thread with the daemon's stack for a connection (EGRESS_THREAD_STACK). */
static void *run_thread(void *arg)
{
	return (void *)(intptr_t)egress_door_run(arg);
}

static int run_small_stack(struct egress_conn *c)
{
	pthread_attr_t attr;
	pthread_t t;
	void *res = NULL;

	assert_int_equal(pthread_attr_init(&attr), 0);
	assert_int_equal(pthread_attr_setstacksize(&attr, EGRESS_THREAD_STACK), 0);
	assert_int_equal(pthread_create(&t, &attr, run_thread, c), 0);
	assert_int_equal(pthread_join(t, &res), 0);
	(void)pthread_attr_destroy(&attr);
	return (int)(intptr_t)res;
}

/* A listener on loopback: the origin (reached with --egress-allow-private only). */
static int listen_loopback(uint16_t *ret_port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	*ret_port = ntohs(sa.sin_port);
	return fd;
}

/*
 * An allowlisted name: decided (WebFetch, the signer's record), dialled to
 * the address checked, handed over, and completed with bytes each way and
 * the duration. Then an address that refuses the connection: 502.
 */
static void test_dial_and_complete(void **state)
{
	struct egress_allow allow[1];
	struct egress_policy pol;
	char entry[64], want[128], err[256];
	const char *entries[] = { entry, NULL };
	uint16_t port;
	int lfd = listen_loopback(&port), afd;
	struct probe p = { 0 };
	struct egress_conn c;
	int64_t before;

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	cfg.flags = EGRESS_ALLOW_PRIVATE;
	assert_int_equal(egress_resolve_parse("origin.test=127.0.0.1", &cfg, err, sizeof(err)), 0);
	(void)snprintf(entry, sizeof(entry), "origin.test:%u", port);
	policy_of(&pol, allow, entries, false);
	c = conn_of(&p, &pol, "origin.test", port, true);
	before = marker();
	assert_int_equal(run_small_stack(&c), 0);
	/* decide (tool.call) and complete (tool.result) between the markers; no tkbox.egress. */
	assert_int_equal(marker() - before, 3);
	assert_int_equal(p.lost, 0);
	assert_int_equal(p.refusals, 0);
	assert_int_equal(p.dials, 1);
	(void)snprintf(want, sizeof(want), "tcp://origin.test:%u", port);
	assert_string_equal(p.url, want);
	assert_true(p.plain);
	assert_true(c.decided);
	assert_true(c.dialled);
	assert_false(p.inspect); /* no inspection configured (c.insp NULL) */
	assert_false(p.model);
	assert_non_null(strstr(p.events, "egress.decided egress.done"));
	afd = accept(lfd, NULL, NULL); /* the door's connection reached the origin */
	assert_true(afd >= 0);
	(void)close(afd);
	(void)close(lfd);

	/* Nothing listens there now: the dial fails, the box hears 502, the completion says why. */
	p = (struct probe){ 0 };
	c = conn_of(&p, &pol, "origin.test", port, true);
	before = marker();
	assert_int_equal(egress_door_run(&c), -EPERM);
	assert_int_equal(marker() - before, 3);
	assert_int_equal(p.status, 502);
	assert_string_equal(p.rule, "dial-failed");
	assert_non_null(strstr(p.message, "127.0.0.1"));
	assert_int_equal(p.dials, 0);
	assert_int_equal(p.records, 0);
	assert_true(c.decided);
}

/*
 * The signer denies (egress-door.sh adds TEST-WEB-DENY for denied.test): 403 naming the rule and the
 * decision, nothing dialled, no tkbox.egress record (the signer's decision is the record).
 */
static void test_signer_deny(void **state)
{
	struct egress_allow allow[1];
	struct egress_policy pol;
	char entry[64], err[256];
	const char *entries[] = { entry, NULL };
	uint16_t port;
	int lfd = listen_loopback(&port);
	struct probe p = { 0 };
	struct egress_conn c;
	int64_t before;

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	cfg.flags = EGRESS_ALLOW_PRIVATE; /* loopback only, even if the deny were missed */
	assert_int_equal(egress_resolve_parse("denied.test=127.0.0.1", &cfg, err, sizeof(err)), 0);
	(void)snprintf(entry, sizeof(entry), "denied.test:%u", port);
	policy_of(&pol, allow, entries, false);
	c = conn_of(&p, &pol, "denied.test", port, true);
	before = marker();
	assert_int_equal(egress_door_run(&c), -EPERM);
	assert_int_equal(marker() - before, 2); /* the denied decision only */
	assert_int_equal(p.status, 403);
	assert_string_equal(p.rule, "signer-deny");
	if (!strstr(p.message, "TEST-WEB-DENY") || !strstr(p.message, "denied.test:")) {
		fail_msg("%s", p.message);
	}
	assert_int_equal(p.dials, 0);
	assert_int_equal(p.records, 0);
	assert_non_null(strstr(p.events, "egress.denied"));
	assert_null(strstr(p.events, "egress.decided"));
	(void)close(lfd);
}

/* A stop began after the decision: nothing is dialled, 503. */
static void test_stopping(void **state)
{
	struct egress_allow allow[1];
	struct egress_policy pol;
	char entry[64], err[256];
	const char *entries[] = { entry, NULL };
	uint16_t port;
	int lfd = listen_loopback(&port);
	struct probe p = { .stopping = true };
	struct egress_conn c;

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	cfg.flags = EGRESS_ALLOW_PRIVATE;
	assert_int_equal(egress_resolve_parse("origin.test=127.0.0.1", &cfg, err, sizeof(err)), 0);
	(void)snprintf(entry, sizeof(entry), "origin.test:%u", port);
	policy_of(&pol, allow, entries, false);
	c = conn_of(&p, &pol, "origin.test", port, true);
	assert_int_equal(egress_door_run(&c), -EPERM);
	assert_int_equal(p.status, 503);
	assert_string_equal(p.rule, "box-stopping");
	assert_int_equal(p.dials, 0);
	(void)close(lfd);
}

/*
 * An off-list name: the signer decides it first, then --inspect all refuses
 * it at once, or it waits for a person and expires; it is never resolved.
 */
static void test_offlist(void **state)
{
	static const char *const entries[] = { "a.example.com", NULL };
	struct egress_allow allow[1];
	struct egress_policy pol;
	struct probe p = { 0 };
	struct egress_conn c;
	char err[256];
	int64_t before;

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	/* Mapped, so that even a wrong lookup would stay off the host's resolver. */
	assert_int_equal(egress_resolve_parse("offlist.test=192.0.2.12", &cfg, err, sizeof(err)), 0);
	policy_of(&pol, allow, entries, true);
	c = conn_of(&p, &pol, "offlist.test", 443, true);
	before = marker();
	assert_int_equal(egress_door_run(&c), -EPERM);
	/* tool.call, tkbox.egress, tool.result (the error completion) */
	assert_int_equal(marker() - before, 4);
	assert_true(c.decided);
	assert_false(c.resolved);
	assert_int_equal(p.status, 403);
	assert_string_equal(p.rule, "not-allowlisted");
	assert_non_null(strstr(p.message, "offlist.test:443 refused"));
	assert_non_null(strstr(p.message, "add `--allow offlist.test` to `tkbox run`"));
	assert_int_equal(p.dials, 0);
	json_decref(p.last_record);

	/* Without --inspect all a person is asked; no one answers within the wait: refused, still not resolved. */
	p = (struct probe){ 0 };
	policy_of(&pol, allow, entries, false);
	c = conn_of(&p, &pol, "offlist.test", 8443, true);
	assert_int_equal(egress_door_run(&c), -EPERM);
	assert_true(c.decided);
	assert_false(c.resolved);
	assert_int_equal(p.status, 403);
	if (strncmp(p.rule, "approval-", 9) != 0 || !strstr(p.message, "add `--allow offlist.test:8443`")) {
		fail_msg("%s: %s", p.rule, p.message);
	}
	assert_int_equal(p.dials, 0);
	json_decref(p.last_record);
}

/* A person approves while the door waits: only then is the name resolved, and the connection dialled. */
static void *approver(void *arg)
{
	(void)arg;
	for (int i = 0; i < 500; i++) {
		json_t *l = egress_approve_list();
		json_t *a = json_array_get(json_object_get(l, "approvals"), 0);
		const char *id = json_string_value(json_object_get(a, "id"));
		if (id) {
			char state[32];
			int r = egress_approve_answer(id, true, "uid:0", state, sizeof(state));
			json_decref(l);
			return (void *)(intptr_t)(r == 0 ? 1 : 2);
		}
		json_decref(l);
		(void)usleep(10000);
	}
	return NULL;
}

static void test_offlist_approved(void **state)
{
	static const char *const entries[] = { "a.example.com", NULL };
	struct egress_allow allow[1];
	struct egress_policy pol;
	struct probe p = { 0 };
	struct egress_conn c;
	char err[256];
	uint16_t port;
	int lfd = listen_loopback(&port);
	pthread_t t;
	void *res = NULL;

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	cfg.flags = EGRESS_ALLOW_PRIVATE;
	assert_int_equal(egress_resolve_parse("held.test=127.0.0.1", &cfg, err, sizeof(err)), 0);
	policy_of(&pol, allow, entries, false);
	c = conn_of(&p, &pol, "held.test", port, true);
	c.approval_wait_ms = 20000;
	assert_int_equal(pthread_create(&t, NULL, approver, NULL), 0);
	assert_int_equal(run_small_stack(&c), 0);
	assert_int_equal(pthread_join(t, &res), 0);
	assert_int_equal((intptr_t)res, 1);
	assert_true(c.resolved);
	assert_int_equal(p.dials, 1);
	assert_false(p.plain); /* approved, not an entry naming the port */
	(void)close(lfd);
}

/*
 * A signer reason longer than the refusal's text, of 3-byte characters
 * (egress-door.sh adds TEST-WEB-LONG for long.test): the refusal is cut on a
 * character, so it is valid UTF-8 (the supervisor message takes it), and it
 * still names the rule and the decision.
 */
static void test_signer_deny_long_reason(void **state)
{
	struct egress_allow allow[1];
	struct egress_policy pol;
	char entry[64], err[256];
	const char *entries[] = { entry, NULL };
	uint16_t port;
	int lfd = listen_loopback(&port);
	struct probe p = { 0 };
	struct egress_conn c;
	json_t *j;

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	cfg.flags = EGRESS_ALLOW_PRIVATE;
	assert_int_equal(egress_resolve_parse("long.test=127.0.0.1", &cfg, err, sizeof(err)), 0);
	(void)snprintf(entry, sizeof(entry), "long.test:%u", port);
	policy_of(&pol, allow, entries, false);
	c = conn_of(&p, &pol, "long.test", port, true);
	assert_int_equal(egress_door_run(&c), -EPERM);
	assert_int_equal(p.refusals, 1);
	assert_int_equal(p.status, 403);
	assert_string_equal(p.rule, "signer-deny");
	assert_non_null(strstr(p.message, "\xe2\x82\xac"));
	j = json_string(p.message); /* NULL for text that is not valid UTF-8 */
	if (!j || !strstr(p.message, "TEST-WEB-LONG") || !strstr(p.message, "(tkbox-signer policy)")) {
		fail_msg("not valid UTF-8, or the rule or how-to cut off: %s", p.message);
	}
	json_decref(j);
	assert_int_equal(p.dials, 0);
	(void)close(lfd);
}

/*
 * The signer asks (egress-door.sh adds TEST-WEB-ASK for asked.test): the
 * crossing waits for a person at the signer. The box's egress closes: the
 * wait ends at once as abandoned, 503 box-stopping, nothing dialled. Without
 * an abandon fd the crossing would wait the whole approval wait (60 s here)
 * and end not approved (403).
 *
 * The daemon's abandon fd is a pipe's read end whose write end egress_close
 * closes; here it is one end of a socketpair, so the test reads the
 * crossing's "102 Tkbox-Approval" (written to its client just before the
 * approval wait) and knows the wait has begun. Both hang up (POLLHUP) when
 * the other end is closed: checked for the pipe first.
 */
static void test_signer_ask_abandoned(void **state)
{
	struct egress_allow allow[1];
	struct egress_policy pol;
	char entry[64], err[256], head[512];
	const char *entries[] = { entry, NULL };
	uint16_t port;
	int lfd = listen_loopback(&port), hup[2], sp[2];
	struct probe p = { 0 };
	struct egress_conn c;
	struct pollfd pfd;
	pthread_t t;
	void *res = NULL;
	bool joined = false;
	size_t k = 0;

	(void)state;
	head[0] = '\0';
	/* The daemon's mechanism: a pipe's read end hangs up once its write end is closed. */
	assert_int_equal(pipe2(hup, O_CLOEXEC), 0);
	pfd = (struct pollfd){ .fd = hup[0], .events = 0 };
	assert_int_equal(poll(&pfd, 1, 0), 0);
	(void)close(hup[1]);
	assert_int_equal(poll(&pfd, 1, 0), 1);
	assert_true(pfd.revents & POLLHUP);
	(void)close(hup[0]);

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	p.has_abandon = true;
	p.abandon_fd = sp[0];
	memset(&cfg, 0, sizeof(cfg));
	cfg.flags = EGRESS_ALLOW_PRIVATE;
	assert_int_equal(egress_resolve_parse("asked.test=127.0.0.1", &cfg, err, sizeof(err)), 0);
	(void)snprintf(entry, sizeof(entry), "asked.test:%u", port);
	policy_of(&pol, allow, entries, false);
	c = conn_of(&p, &pol, "asked.test", port, true);
	c.approval_wait_ms = 60000;
	assert_int_equal(pthread_create(&t, NULL, run_thread, &c), 0);
	/* The signer's approval was requested and the crossing waits for it (or the crossing ended first). */
	while (!joined && k + 1 < sizeof(head) && !strstr(head, "\r\n\r\n")) {
		struct pollfd rp = { .fd = sp[1], .events = POLLIN };
		ssize_t n;
		if (poll(&rp, 1, 100) == 0) {
			joined = pthread_tryjoin_np(t, &res) == 0;
			continue;
		}
		n = read(sp[1], head + k, sizeof(head) - 1 - k);
		if (n <= 0) {
			break;
		}
		k += (size_t)n;
		head[k] = '\0';
	}
	head[k] = '\0';
	if (joined || !strstr(head, "Tkbox-Approval: ")) {
		fail_msg("the crossing did not wait for an approval (%d %s: %s)", p.status, p.rule, head);
	}
	(void)close(sp[1]); /* egress_close */
	assert_int_equal(pthread_join(t, &res), 0);
	assert_int_equal((int)(intptr_t)res, -EPERM);
	assert_int_equal(p.refusals, 1);
	assert_int_equal(p.status, 503);
	assert_string_equal(p.rule, "box-stopping");
	assert_int_equal(p.dials, 0);
	assert_non_null(strstr(p.abandoned, "waited for the approval"));
	assert_null(strstr(p.events, "egress.decided"));
	(void)close(sp[0]);
	(void)close(lfd);
}

static bool strv_has(char *const *v, const char *s)
{
	for (; v && *v; v++) {
		if (strcmp(*v, s) == 0) {
			return true;
		}
	}
	return false;
}

static size_t strv_count(char *const *v)
{
	size_t n = 0;

	while (v && v[n]) {
		n++;
	}
	return n;
}

static void strv_drop(char **v)
{
	for (size_t i = 0; v && v[i]; i++) {
		free(v[i]);
	}
	free(v);
}

/*
 * Model hosts (issue 13): the hosts the anthropic, openai and claude-code
 * presets name, when the box's values use the preset or an allow entry
 * that matches such a host; nothing else is one.
 */
static void test_model_hosts(void **state)
{
	char *anthropic[] = { "anthropic", NULL }, *claude[] = { "claude-code", "github", NULL };
	char *entry[] = { "api.openai.com", "example.com", NULL }, *wild[] = { "*.anthropic.com", NULL };
	char *none[] = { "github", "api.github.com", "example.com:443", NULL };
	char **v = NULL;

	(void)state;
	assert_int_equal(egress_model_hosts(anthropic, &v), 0);
	assert_int_equal(strv_count(v), 1);
	assert_true(strv_has(v, "api.anthropic.com"));
	strv_drop(v);
	assert_int_equal(egress_model_hosts(claude, &v), 0);
	assert_int_equal(strv_count(v), 2);
	assert_true(strv_has(v, "api.anthropic.com"));
	assert_true(strv_has(v, "statsig.anthropic.com"));
	strv_drop(v);
	/* An allow entry naming a host a model preset names. */
	assert_int_equal(egress_model_hosts(entry, &v), 0);
	assert_int_equal(strv_count(v), 1);
	assert_true(strv_has(v, "api.openai.com"));
	strv_drop(v);
	assert_int_equal(egress_model_hosts(wild, &v), 0);
	assert_int_equal(strv_count(v), 2);
	strv_drop(v);
	/* Other presets and entries: none (an empty array, not NULL). */
	assert_int_equal(egress_model_hosts(none, &v), 0);
	assert_non_null(v);
	assert_int_equal(strv_count(v), 0);
	strv_drop(v);
	assert_int_equal(egress_model_hosts(NULL, &v), 0);
	assert_int_equal(strv_count(v), 0);
	strv_drop(v);
}

/*
 * The door's inspect and model answers (what egress_dial carries): inspect
 * only for https://host:443 in a box with a CA, and then only for a bound
 * host, --inspect all, or a model host; model for a model host in any form.
 * A secret's bound host alone is not a model host.
 */
static void test_inspect_decide(void **state)
{
	char *bound[] = { "api.github.com", "api.anthropic.com", NULL };
	char *models[] = { "api.openai.com", NULL };
	const struct egress_inspect_cfg with_ca = { .has_ca = true, .bound = bound, .model_hosts = models };
	const struct egress_inspect_cfg no_ca = { .has_ca = false, .bound = bound, .model_hosts = models };
	static const struct {
		const char *entry, *host;
		int port;
		bool connect, inspect_all, ca;
		bool inspect, model;
	} cases[] = {
		{ "api.github.com", "api.github.com", 443, true, false, true, true, false }, /* bound */
		{ "api.github.com", "API.GitHub.com.", 443, true, false, true, true, false }, /* canonical form */
		{ "api.github.com", "api.github.com", 80, false, false, true, false, false }, /* plain HTTP */
		{ "api.github.com:443", "api.github.com", 443, true, false, true, false, false }, /* tcp:// */
		{ "api.github.com", "api.github.com", 443, true, false, false, false, false }, /* no CA */
		{ "api.anthropic.com", "api.anthropic.com", 443, true, false, true, true,
		  false }, /* bound, no preset */
		{ "example.com", "example.com", 443, true, false, true, false, false }, /* on the list only */
		{ "example.com", "example.com", 443, true, true, true, true, false }, /* --inspect all */
		{ "example.com", "example.com", 8443, true, true, true, false, false }, /* not 443 */
		{ "api.openai.com", "api.openai.com", 443, true, false, true, true, true }, /* a model host */
		{ "api.openai.com", "api.openai.com", 80, false, false, true, false, true }, /* model, plain HTTP */
		{ "api.openai.com", "api.openai.com", 443, true, false, false, false, true }, /* model, no CA */
	};
	struct egress_host_addrs own = { .n = 1 };
	char err[256];
	bool model;

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	assert_int_equal(egress_resolve_parse("api.github.com=192.0.2.10", &cfg, err, sizeof(err)), 0);
	assert_int_equal(egress_resolve_parse("api.anthropic.com=192.0.2.11", &cfg, err, sizeof(err)), 0);
	assert_int_equal(egress_resolve_parse("api.openai.com=192.0.2.12", &cfg, err, sizeof(err)), 0);
	assert_int_equal(egress_resolve_parse("example.com=192.0.2.13", &cfg, err, sizeof(err)), 0);
	assert_int_equal(egress_addr_parse_canonical("192.0.2.55", 10, &own.a[0]), 0);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct egress_allow allow[1];
		struct egress_policy pol;
		const char *entries[] = { cases[i].entry, NULL };
		struct probe p = { 0 };
		struct egress_conn c;

		policy_of(&pol, allow, entries, cases[i].inspect_all);
		c = conn_of(&p, &pol, cases[i].host, cases[i].port, cases[i].connect);
		c.insp = cases[i].ca ? &with_ca : &no_ca;
		assert_int_equal(egress_door_check(&c, &own), 0);
		if (c.inspect != cases[i].inspect || c.model != cases[i].model) {
			fail_msg("case %zu %s %s:%d: inspect %d model %d", i, cases[i].entry, cases[i].host,
				 cases[i].port, c.inspect, c.model);
		}
	}
	/* No inspection configured: nothing is inspected, nothing is a model call. */
	assert_false(egress_inspect_decide(NULL, true, "https://api.openai.com:443", "api.openai.com", &model));
	assert_false(model);
	assert_true(egress_inspect_decide(&with_ca, false, "https://api.openai.com:443", "api.openai.com", &model));
	assert_true(model);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refused_before_decide),
		cmocka_unit_test(test_allowlisted_resolves_private),
		cmocka_unit_test(test_resolve_entries),
		cmocka_unit_test(test_url_forms),
		cmocka_unit_test(test_rate),
		cmocka_unit_test(test_dial_and_complete),
		cmocka_unit_test(test_signer_deny),
		cmocka_unit_test(test_stopping),
		cmocka_unit_test(test_offlist),
		cmocka_unit_test(test_offlist_approved),
		cmocka_unit_test(test_signer_deny_long_reason),
		cmocka_unit_test(test_signer_ask_abandoned),
		cmocka_unit_test(test_model_hosts),
		cmocka_unit_test(test_inspect_decide),
	};
	json_t *reply = NULL;
	const char *s;
	char err[512];

	if (argc != 2) {
		fprintf(stderr, "usage: test-daemon-egress SIGNER_SOCKET\n");
		return 2;
	}
	if (signer_link_init(argv[1], 5) < 0 ||
	    signer_link_once(
		    signer_link_request_id(json_pack("{s:s,s:{s:s,s:s},s:s}", "method", "register_run", "agent", "name",
						     "tkbox", "version", "test", "run_id", "test-egress-run")),
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
