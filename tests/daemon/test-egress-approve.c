/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "banned.h"
#include "daemon/egress-approve.h"

/*
 * The approvals table (src/daemon/egress-approve.c) driven through its API by
 * threads that ask and a main thread that answers, as the door and the API
 * socket do. The box is a unit seam: its observe_keep counts the records it
 * is given and can be told to refuse them (the daemon's real must-keep path
 * is exercised end to end by tests/egress). No test depends on how long
 * anything takes, except that 30 asks of 1 ms fit in a minute.
 */

struct fake_box {
	pthread_mutex_t lock;
	unsigned observes;
	bool fail;
	char decisions[256]; /* the recorded decisions, space-separated */
	char approver[32];
	char events[4096]; /* the event names, space-separated */
	unsigned hold_ms; /* observe_keep holds the record this long before it looks whether an asker returned */
	unsigned returned; /* asks that returned */
	unsigned returned_during_record; /* ... while a record was still being kept: must stay 0 */
};

static void fake_event(void *box, bool problem, const char *event, json_t *extra)
{
	struct fake_box *b = box;
	size_t n;

	(void)problem;
	pthread_mutex_lock(&b->lock);
	n = strlen(b->events);
	(void)snprintf(b->events + n, sizeof(b->events) - n, "%s ", event);
	pthread_mutex_unlock(&b->lock);
	json_decref(extra);
}

static void fake_signer_back(void *box)
{
	(void)box;
}

static void fake_complete_lost(void *box, int r)
{
	(void)box;
	(void)r;
}

static int fake_observe_keep(void *box, const char *kind, json_t *data, char *err, size_t err_size)
{
	struct fake_box *b = box;
	const char *d = json_string_value(json_object_get(data, "decision"));
	const char *who = json_string_value(json_object_get(data, "approver"));
	size_t n;
	int r = 0;

	assert_string_equal(kind, "tkbox.approval");
	assert_non_null(json_string_value(json_object_get(data, "approval_id")));
	assert_non_null(json_string_value(json_object_get(data, "target")));
	assert_non_null(json_string_value(json_object_get(data, "url")));
	assert_non_null(json_string_value(json_object_get(data, "box")));
	/* Correct code holds its askers until this returns, however long it takes; a slow record shows it. */
	if (b->hold_ms) {
		unsigned before;
		pthread_mutex_lock(&b->lock);
		before = b->returned;
		pthread_mutex_unlock(&b->lock);
		(void)usleep(b->hold_ms * 1000);
		pthread_mutex_lock(&b->lock);
		b->returned_during_record += b->returned - before;
		pthread_mutex_unlock(&b->lock);
	}
	pthread_mutex_lock(&b->lock);
	n = strlen(b->decisions);
	(void)snprintf(b->decisions + n, sizeof(b->decisions) - n, "%s ", d ? d : "?");
	(void)snprintf(b->approver, sizeof(b->approver), "%s", who ? who : "?");
	if (b->fail) {
		(void)snprintf(err, err_size, "the signer refused it (test)");
		r = -EIO;
	} else {
		b->observes++;
	}
	pthread_mutex_unlock(&b->lock);
	json_decref(data);
	return r;
}

static const struct crossing_host_ops fake_ops = {
	.event = fake_event,
	.signer_back = fake_signer_back,
	.complete_lost = fake_complete_lost,
	.observe_keep = fake_observe_keep,
};

static unsigned observes(struct fake_box *b)
{
	unsigned n;

	pthread_mutex_lock(&b->lock);
	n = b->observes;
	pthread_mutex_unlock(&b->lock);
	return n;
}

struct asker {
	struct fake_box *fb;
	const char *box, *host;
	uint16_t port;
	int64_t wait_ms;
	pthread_t t;
	int r;
	char id[EGRESS_APPROVAL_ID_MAX];
	char why[1024];
	const char *rule;
	unsigned observes_at_return; /* the records kept when the ask returned */
};

static void *asker_main(void *arg)
{
	struct asker *a = arg;
	struct crossing x = { .host = &fake_ops, .box = a->fb };
	char url[300];

	(void)snprintf(url, sizeof(url), "tcp://%s:%u", a->host, (unsigned)a->port);
	a->r = egress_approve_ask_rule(&x, a->box, a->host, a->port, url, a->wait_ms, a->id, a->why, sizeof(a->why),
				       &a->rule);
	pthread_mutex_lock(&a->fb->lock);
	a->observes_at_return = a->fb->observes;
	a->fb->returned++;
	pthread_mutex_unlock(&a->fb->lock);
	return NULL;
}

static void ask_start(struct asker *a, struct fake_box *fb, const char *box, const char *host, uint16_t port,
		      int64_t wait_ms)
{
	*a = (struct asker){ .fb = fb, .box = box, .host = host, .port = port, .wait_ms = wait_ms, .r = 1 };
	assert_int_equal(pthread_create(&a->t, NULL, asker_main, a), 0);
}

static void ask_join(struct asker *a)
{
	assert_int_equal(pthread_join(a->t, NULL), 0);
}

/* Ask in this thread. */
static int ask_now(struct fake_box *fb, const char *box, const char *host, uint16_t port, int64_t wait_ms,
		   struct asker *a)
{
	*a = (struct asker){ .fb = fb, .box = box, .host = host, .port = port, .wait_ms = wait_ms };
	(void)asker_main(a);
	return a->r;
}

/* The pending approvals of box in GET /v1/approvals (for target, if given; with want_waiting waiters, if > 0). */
static size_t pending_waiting(const char *box, const char *target, int64_t want_waiting,
			      char ret_id[EGRESS_APPROVAL_ID_MAX])
{
	json_t *v = egress_approve_list();
	json_t *arr = json_object_get(v, "approvals"), *e;
	size_t n = 0, i;

	assert_non_null(v);
	assert_true(json_is_array(arr));
	json_array_foreach(arr, i, e) {
		const char *b = json_string_value(json_object_get(e, "box"));
		const char *t = json_string_value(json_object_get(e, "target"));
		assert_non_null(b);
		assert_non_null(t);
		assert_non_null(json_string_value(json_object_get(e, "id")));
		assert_non_null(json_string_value(json_object_get(e, "url")));
		assert_true(json_is_integer(json_object_get(e, "age_s")));
		assert_true(json_is_integer(json_object_get(e, "expires_in_s")));
		assert_true(json_integer_value(json_object_get(e, "waiting")) >= 1);
		if (strcmp(b, box) == 0 && (!target || strcmp(t, target) == 0) &&
		    (want_waiting <= 0 || json_integer_value(json_object_get(e, "waiting")) == want_waiting)) {
			n++;
			if (ret_id) {
				(void)snprintf(ret_id, EGRESS_APPROVAL_ID_MAX, "%s",
					       json_string_value(json_object_get(e, "id")));
			}
		}
	}
	json_decref(v);
	return n;
}

static size_t pending_of(const char *box, const char *target, char ret_id[EGRESS_APPROVAL_ID_MAX])
{
	return pending_waiting(box, target, 0, ret_id);
}

/* Wait until box has want pending approvals (for target, if given); a guard against a hang, not a timing. */
static void await_pending(const char *box, const char *target, size_t want, char ret_id[EGRESS_APPROVAL_ID_MAX])
{
	for (int i = 0; i < 600000; i++) {
		if (pending_of(box, target, ret_id) == want) {
			return;
		}
		(void)usleep(100);
	}
	fail_msg("box %s never had %zu pending approvals", box, want);
}

static struct fake_box *fake_new(void)
{
	struct fake_box *b = calloc(1, sizeof(*b));

	assert_non_null(b);
	assert_int_equal(pthread_mutex_init(&b->lock, NULL), 0);
	return b;
}

static void fake_free(struct fake_box *b)
{
	(void)pthread_mutex_destroy(&b->lock);
	free(b);
}

/* Approve: the waiter wakes with 0, and tkbox.approval was kept before it returned. */
static void test_approve(void **state)
{
	struct fake_box *fb = fake_new();
	struct asker a;
	char id[EGRESS_APPROVAL_ID_MAX], st[32];

	(void)state;
	fb->hold_ms = 50;
	ask_start(&a, fb, "bx-approve", "example.org", 443, 60000);
	await_pending("bx-approve", "example.org:443", 1, id);
	assert_int_equal(strncmp(id, "ap-", 3), 0);
	assert_int_equal(strlen(id), 15);
	assert_int_equal(observes(fb), 0);
	assert_int_equal(egress_approve_answer(id, true, "uid:1000", st, sizeof(st)), 0);
	assert_string_equal(st, "approved");
	ask_join(&a);
	assert_int_equal(a.r, 0);
	assert_string_equal(a.rule, "");
	assert_string_equal(a.id, id);
	assert_int_equal(a.observes_at_return, 1);
	assert_int_equal(fb->returned_during_record, 0);
	assert_string_equal(fb->decisions, "approved ");
	assert_string_equal(fb->approver, "uid:1000");
	assert_non_null(strstr(fb->events, "egress.approval_pending"));
	assert_non_null(strstr(fb->events, "egress.approved"));
	/* It is no longer pending, and a second answer is told it was answered. */
	assert_int_equal(pending_of("bx-approve", NULL, NULL), 0);
	assert_int_equal(egress_approve_answer(id, false, "uid:1000", st, sizeof(st)), -EALREADY);
	assert_string_equal(st, "approved");

	/* The approved set: the same host:port (any case) passes at once, with no new approval or record. */
	assert_int_equal(ask_now(fb, "bx-approve", "EXAMPLE.org", 443, 1, &a), 0);
	assert_string_equal(a.id, "");
	assert_int_equal(observes(fb), 1);
	/* Another port of the host, or the host for another box, is a new approval. */
	assert_int_equal(ask_now(fb, "bx-approve", "example.org", 8443, 1, &a), -EPERM);
	assert_string_equal(a.rule, "approval-expired");
	assert_int_equal(ask_now(fb, "bx-approve-2", "example.org", 443, 1, &a), -EPERM);
	assert_string_equal(a.rule, "approval-expired");
	assert_int_equal(observes(fb), 1);

	/* Removed: the approved set goes with the box; a new box of the same name asks again. */
	egress_approve_box_forget("bx-approve");
	assert_int_equal(ask_now(fb, "bx-approve", "example.org", 443, 1, &a), -EPERM);
	egress_approve_box_forget("bx-approve");
	egress_approve_box_forget("bx-approve-2");
	fake_free(fb);
}

/* Two asks for the same target while it is pending share one approval and one record. */
static void test_join(void **state)
{
	struct fake_box *fb = fake_new();
	struct asker a, b;
	char id[EGRESS_APPROVAL_ID_MAX], st[32];

	(void)state;
	ask_start(&a, fb, "bx-join", "2001:db8::1", 443, 60000);
	await_pending("bx-join", "[2001:db8::1]:443", 1, id);
	ask_start(&b, fb, "bx-join", "2001:db8::1", 443, 60000);
	/* b joins the same approval: one pending, two waiting for it. */
	for (int i = 0; pending_waiting("bx-join", "[2001:db8::1]:443", 2, NULL) != 1; i++) {
		assert_true(i < 600000);
		(void)usleep(100);
	}
	assert_int_equal(pending_of("bx-join", NULL, NULL), 1);
	assert_int_equal(egress_approve_answer(id, true, "uid:0", st, sizeof(st)), 0);
	ask_join(&a);
	ask_join(&b);
	assert_int_equal(a.r, 0);
	assert_int_equal(b.r, 0);
	assert_int_equal(observes(fb), 1);
	assert_int_equal(a.observes_at_return, 1);
	assert_int_equal(b.observes_at_return, 1);
	egress_approve_box_forget("bx-join");
	fake_free(fb);
}

/* Reject: -EPERM naming the id and the rule, recorded as rejected. */
static void test_reject(void **state)
{
	struct fake_box *fb = fake_new();
	struct asker a;
	char id[EGRESS_APPROVAL_ID_MAX], st[32];

	(void)state;
	ask_start(&a, fb, "bx-reject", "198.51.100.7", 22, 60000);
	await_pending("bx-reject", "198.51.100.7:22", 1, id);
	assert_int_equal(egress_approve_answer(id, false, "uid:1000", st, sizeof(st)), 0);
	assert_string_equal(st, "rejected");
	ask_join(&a);
	assert_int_equal(a.r, -EPERM);
	assert_string_equal(a.rule, "approval-rejected");
	assert_non_null(strstr(a.why, id));
	assert_non_null(strstr(a.why, "rejected"));
	assert_string_equal(fb->decisions, "rejected ");
	assert_non_null(strstr(fb->events, "egress.rejected"));
	/* A rejection is not remembered as approved: the next ask waits for a person again. */
	assert_int_equal(ask_now(fb, "bx-reject", "198.51.100.7", 22, 1, &a), -EPERM);
	assert_string_equal(a.rule, "approval-expired");
	assert_int_equal(egress_approve_answer(id, true, "uid:1000", st, sizeof(st)), -EALREADY);
	assert_string_equal(st, "rejected");
	egress_approve_box_forget("bx-reject");
	fake_free(fb);
}

/*
 * A name reused: a box that stopped before it ever asked (one whose boot
 * failed) still refuses every later ask; a new box of the name starts with
 * no stop mark and no approved target of the old one (egress_approve_box_start
 * when it is created, egress_approve_box_forget when the old one goes).
 */
static void test_name_reused(void **state)
{
	struct fake_box *fb = fake_new();
	struct asker a;
	char id[EGRESS_APPROVAL_ID_MAX], st[32];

	(void)state;
	egress_approve_box_stop("bx-reuse");
	assert_int_equal(ask_now(fb, "bx-reuse", "example.org", 443, 1, &a), -ECANCELED);
	assert_string_equal(a.rule, "box-stopping");
	/* The failed box is forgotten: the next box of the name asks a person. */
	egress_approve_box_forget("bx-reuse");
	assert_int_equal(ask_now(fb, "bx-reuse", "example.org", 443, 1, &a), -EPERM);
	assert_string_equal(a.rule, "approval-expired");

	/* Stopped and never forgotten: a new box of the name starts clean all the same. */
	egress_approve_box_stop("bx-reuse");
	egress_approve_box_start("bx-reuse");
	assert_int_equal(ask_now(fb, "bx-reuse", "example.org", 443, 1, &a), -EPERM);
	assert_string_equal(a.rule, "approval-expired");

	/* An approved target of the old box does not pass for the new one. */
	ask_start(&a, fb, "bx-reuse", "example.org", 8443, 60000);
	await_pending("bx-reuse", "example.org:8443", 1, id);
	assert_int_equal(egress_approve_answer(id, true, "uid:1000", st, sizeof(st)), 0);
	ask_join(&a);
	assert_int_equal(a.r, 0);
	assert_int_equal(ask_now(fb, "bx-reuse", "example.org", 8443, 1, &a), 0);
	egress_approve_box_stop("bx-reuse");
	egress_approve_box_start("bx-reuse");
	assert_int_equal(ask_now(fb, "bx-reuse", "example.org", 8443, 1, &a), -EPERM);
	assert_string_equal(a.rule, "approval-expired");
	egress_approve_box_forget("bx-reuse");
	fake_free(fb);
}

/* Unanswered: refused at the wait's end with the how-to; too late to approve. */
static void test_expire(void **state)
{
	struct fake_box *fb = fake_new();
	struct asker a;
	char st[32];

	(void)state;
	assert_int_equal(ask_now(fb, "bx-expire", "example.net", 443, 20, &a), -EPERM);
	assert_string_equal(a.rule, "approval-expired");
	assert_int_equal(strncmp(a.id, "ap-", 3), 0);
	assert_non_null(strstr(a.why, "not approved within 2 minutes (EGRESS_APPROVAL_WAIT_MS), approval "));
	assert_non_null(strstr(a.why, "tkbox approvals"));
	assert_non_null(strstr(a.why, "tkbox approve"));
	assert_non_null(strstr(a.why, a.id));
	assert_non_null(strstr(fb->events, "egress.approval_expired"));
	assert_int_equal(observes(fb), 0);
	assert_int_equal(pending_of("bx-expire", NULL, NULL), 0);
	assert_int_equal(egress_approve_answer(a.id, true, "uid:1000", st, sizeof(st)), -EALREADY);
	assert_string_equal(st, "expired");
	assert_int_equal(observes(fb), 0);
	egress_approve_box_forget("bx-expire");
	fake_free(fb);
}

/* 16 pending per box; the 17th is refused at once naming the limit; a stop cancels the 16. */
static void test_pending_limit_and_stop(void **state)
{
	struct fake_box *fb = fake_new();
	struct asker a[EGRESS_APPROVAL_MAX_PENDING], extra;

	(void)state;
	for (int i = 0; i < EGRESS_APPROVAL_MAX_PENDING; i++) {
		ask_start(&a[i], fb, "bx-limit", "example.com", (uint16_t)(1000 + i), 600000);
	}
	await_pending("bx-limit", NULL, EGRESS_APPROVAL_MAX_PENDING, NULL);
	assert_int_equal(ask_now(fb, "bx-limit", "example.com", 2000, 1, &extra), -EPERM);
	assert_string_equal(extra.rule, "approval-pending-limit");
	assert_string_equal(extra.id, "");
	assert_non_null(strstr(extra.why, "at most 16 per box"));
	assert_non_null(strstr(extra.why, "EGRESS_APPROVAL_MAX_PENDING"));
	assert_non_null(strstr(extra.why, "tkbox approve"));
	/* Another box is not held back by this one's. */
	assert_int_equal(ask_now(fb, "bx-limit-other", "example.com", 2000, 1, &extra), -EPERM);
	assert_string_equal(extra.rule, "approval-expired");

	egress_approve_box_stop("bx-limit");
	for (int i = 0; i < EGRESS_APPROVAL_MAX_PENDING; i++) {
		ask_join(&a[i]);
		assert_int_equal(a[i].r, -ECANCELED);
		assert_string_equal(a[i].rule, "box-stopping");
	}
	assert_int_equal(pending_of("bx-limit", NULL, NULL), 0);
	/* A stopping box asks no more. */
	assert_int_equal(ask_now(fb, "bx-limit", "example.com", 3000, 1, &extra), -ECANCELED);
	assert_int_equal(observes(fb), 0);
	egress_approve_box_forget("bx-limit");
	egress_approve_box_forget("bx-limit-other");
	fake_free(fb);
}

/* 30 new approvals per box in a minute; the 31st is refused naming the limit. */
static void test_rate_limit(void **state)
{
	struct fake_box *fb = fake_new();
	struct asker a;

	(void)state;
	for (int i = 0; i < EGRESS_APPROVAL_MAX_PER_MIN; i++) {
		assert_int_equal(ask_now(fb, "bx-rate", "example.com", (uint16_t)(100 + i), 1, &a), -EPERM);
		assert_string_equal(a.rule, "approval-expired");
	}
	assert_int_equal(ask_now(fb, "bx-rate", "example.com", 200, 1, &a), -EPERM);
	assert_string_equal(a.rule, "approval-rate-limit");
	assert_non_null(strstr(a.why, "at most 30 per box per minute"));
	assert_non_null(strstr(a.why, "EGRESS_APPROVAL_MAX_PER_MIN"));
	assert_non_null(strstr(a.why, "--allow"));
	/* Another box has its own window. */
	assert_int_equal(ask_now(fb, "bx-rate-other", "example.com", 200, 1, &a), -EPERM);
	assert_string_equal(a.rule, "approval-expired");
	egress_approve_box_forget("bx-rate");
	egress_approve_box_forget("bx-rate-other");
	fake_free(fb);
}

/* An approval whose record cannot be kept lets nothing through and is not remembered. */
static void test_record_fails(void **state)
{
	struct fake_box *fb = fake_new();
	struct asker a;
	char id[EGRESS_APPROVAL_ID_MAX], st[32];

	(void)state;
	fb->fail = true;
	ask_start(&a, fb, "bx-fail", "example.org", 443, 60000);
	await_pending("bx-fail", NULL, 1, id);
	assert_int_equal(egress_approve_answer(id, true, "uid:1000", st, sizeof(st)), -EIO);
	assert_string_equal(st, "not_recorded");
	ask_join(&a);
	assert_int_equal(a.r, -EIO);
	assert_string_equal(a.rule, "approval-not-recorded");
	assert_non_null(strstr(a.why, "could not be recorded"));
	assert_string_equal(fb->decisions, "approved ");
	assert_non_null(strstr(fb->events, "egress.approval_not_recorded"));
	/* Not in the approved set: the next ask waits for a person again. */
	fb->fail = false;
	assert_int_equal(ask_now(fb, "bx-fail", "example.org", 443, 1, &a), -EPERM);
	assert_string_equal(a.rule, "approval-expired");
	egress_approve_box_forget("bx-fail");
	fake_free(fb);
}

/* A box removed while an ask waits: the ask is cancelled, and a new box of the same name starts afresh. */
static void test_forget_while_waiting(void **state)
{
	struct fake_box *fb = fake_new();
	struct asker a, b;
	char id[EGRESS_APPROVAL_ID_MAX], st[32];

	(void)state;
	ask_start(&a, fb, "bx-forget", "example.org", 443, 600000);
	await_pending("bx-forget", NULL, 1, id);
	egress_approve_box_forget("bx-forget");
	ask_join(&a);
	assert_int_equal(a.r, -ECANCELED);
	assert_int_equal(egress_approve_answer(id, true, "uid:1000", st, sizeof(st)), -EALREADY);
	assert_string_equal(st, "cancelled");
	/* The new box is not stopping, and asks a person again. */
	ask_start(&b, fb, "bx-forget", "example.org", 443, 600000);
	await_pending("bx-forget", NULL, 1, id);
	assert_int_equal(egress_approve_answer(id, true, "uid:1000", st, sizeof(st)), 0);
	ask_join(&b);
	assert_int_equal(b.r, 0);
	assert_int_equal(observes(fb), 1);
	egress_approve_box_forget("bx-forget");
	fake_free(fb);
}

static void test_unknown_id(void **state)
{
	char st[32] = "x";

	(void)state;
	assert_int_equal(egress_approve_answer("ap-000000000000", true, "uid:1000", st, sizeof(st)), -ENOENT);
	assert_int_equal(egress_approve_answer("ap-000000000000", false, "uid:1000", st, sizeof(st)), -ENOENT);
	assert_string_equal(st, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_approve),
		cmocka_unit_test(test_join),
		cmocka_unit_test(test_reject),
		cmocka_unit_test(test_expire),
		cmocka_unit_test(test_pending_limit_and_stop),
		cmocka_unit_test(test_rate_limit),
		cmocka_unit_test(test_record_fails),
		cmocka_unit_test(test_forget_while_waiting),
		cmocka_unit_test(test_unknown_id),
		cmocka_unit_test(test_name_reused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
