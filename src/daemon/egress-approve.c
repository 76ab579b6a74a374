/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "banned.h"
#include "clock.h"
#include "crypto.h"
#include "daemon/egress-approve.h"
#include "log.h"

#define TARGET_MAX 300 /* "[" host "]:" port: a host is at most 253 bytes (the door checked it) */

enum ap_state {
	AP_PENDING = 0,
	AP_ANSWERING, /* a person answered; the answer is being recorded (the waiters still wait) */
	AP_APPROVED,
	AP_NOT_RECORDED, /* approved, but tkbox.approval could not be kept: nothing passes */
	AP_REJECTED,
	AP_EXPIRED,
	AP_CANCELLED, /* the box is stopping */
};

static const char *const state_names[] = { "pending",  "answering", "approved", "not_recorded",
					   "rejected", "expired",   "cancelled" };

struct ap_box;

struct ap {
	char id[EGRESS_APPROVAL_ID_MAX];
	struct ap_box *bx;
	char *host, *url;
	uint16_t port;
	char target[TARGET_MAX];
	uint64_t created_ms, expires_ms, ended_ms; /* CLOCK_MONOTONIC */
	enum ap_state state;
	/* The asking crossing's box: valid while waiters > 0 (its asker waits until the answer is recorded). */
	const struct crossing_host_ops *ops;
	void *hbox;
	unsigned waiters;
	struct ap *next;
};

struct ap_target {
	char *host;
	uint16_t port;
};

struct ap_box {
	char name[64];
	bool stopping;
	bool forgotten; /* the box was removed: out of T.boxes, freed with its last approval */
	unsigned refs; /* approvals in T.aps that point here */
	unsigned n_pending;
	uint64_t made[EGRESS_APPROVAL_MAX_PER_MIN]; /* when the last new approvals were made (a ring) */
	size_t n_made, made_at;
	struct ap_target *approved;
	size_t n_approved;
	struct ap_box *next;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* any change of an approval's state (CLOCK_MONOTONIC) */
	pthread_once_t once;
	struct ap *aps;
	struct ap_box *boxes;
} T = { .lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT };

static void table_init(void)
{
	pthread_condattr_t a;

	(void)pthread_condattr_init(&a);
	(void)pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	(void)pthread_cond_init(&T.cond, &a);
	(void)pthread_condattr_destroy(&a);
}

static void lock(void)
{
	(void)pthread_once(&T.once, table_init);
	pthread_mutex_lock(&T.lock);
}

static void unlock(void)
{
	pthread_mutex_unlock(&T.lock);
}

static struct ap_box *box_get(const char *name, bool create)
{
	struct ap_box *bx;

	for (bx = T.boxes; bx; bx = bx->next) {
		if (strcmp(bx->name, name) == 0) {
			return bx;
		}
	}
	if (!create || strlen(name) >= sizeof(bx->name) || !(bx = calloc(1, sizeof(*bx)))) {
		return NULL;
	}
	memcpy(bx->name, name, strlen(name) + 1);
	bx->next = T.boxes;
	T.boxes = bx;
	return bx;
}

static bool box_approved(const struct ap_box *bx, const char *host, uint16_t port)
{
	for (size_t i = 0; i < bx->n_approved; i++) {
		if (bx->approved[i].port == port && strcasecmp(bx->approved[i].host, host) == 0) {
			return true;
		}
	}
	return false;
}

static int box_approve(struct ap_box *bx, const char *host, uint16_t port)
{
	struct ap_target *v;
	char *h;

	if (box_approved(bx, host, port)) {
		return 0;
	}
	if (bx->n_approved >= EGRESS_APPROVAL_MAX_APPROVED) {
		return -E2BIG;
	}
	v = realloc(bx->approved, (bx->n_approved + 1) * sizeof(*v));
	if (!v) {
		return -ENOMEM;
	}
	bx->approved = v;
	h = strdup(host);
	if (!h) {
		return -ENOMEM;
	}
	v[bx->n_approved++] = (struct ap_target){ .host = h, .port = port };
	return 0;
}

static void box_free(struct ap_box *bx)
{
	for (size_t i = 0; i < bx->n_approved; i++) {
		free(bx->approved[i].host);
	}
	free(bx->approved);
	free(bx);
}

static void ap_free(struct ap *a)
{
	if (a) {
		free(a->host);
		free(a->url);
		free(a);
	}
}

/* Take *p (an approval nobody waits for) out of T.aps and free it, and its box once forgotten and unused. */
static void ap_drop(struct ap **p)
{
	struct ap *a = *p;
	struct ap_box *bx = a->bx;

	*p = a->next;
	ap_free(a);
	if (--bx->refs == 0 && bx->forgotten) {
		box_free(bx);
	}
}

/* Drop answered approvals nobody waits for, once they are older than EGRESS_APPROVAL_KEEP_MS. */
static void prune(uint64_t now)
{
	for (struct ap **p = &T.aps; *p;) {
		struct ap *a = *p;
		if (a->state > AP_ANSWERING && a->waiters == 0 && a->ended_ms + EGRESS_APPROVAL_KEEP_MS <= now) {
			ap_drop(p);
		} else {
			p = &a->next;
		}
	}
}

static struct ap *find_id(const char *id)
{
	for (struct ap *a = T.aps; a; a = a->next) {
		if (strcmp(a->id, id) == 0) {
			return a;
		}
	}
	return NULL;
}

/* An approval of this box for this target that is still open (pending or being answered). */
static struct ap *find_open(const struct ap_box *bx, const char *host, uint16_t port)
{
	for (struct ap *a = T.aps; a; a = a->next) {
		if (a->bx == bx && a->state <= AP_ANSWERING && a->port == port && strcasecmp(a->host, host) == 0) {
			return a;
		}
	}
	return NULL;
}

/* A new id, "ap-" and 12 lower-case hex digits, unused in the table. */
static int new_id(char out[EGRESS_APPROVAL_ID_MAX])
{
	for (int tries = 0; tries < 8; tries++) {
		char hex[2 * 6 + 1];
		int r = crypto_random_hex(6, hex);
		if (r < 0) {
			return r;
		}
		(void)snprintf(out, EGRESS_APPROVAL_ID_MAX, "ap-%s", hex);
		if (!find_id(out)) {
			return 0;
		}
	}
	return -EEXIST;
}

/* The sliding window: may the box make a new approval now? */
static bool rate_ok(const struct ap_box *bx, uint64_t now)
{
	/* made[made_at] is the oldest of the last EGRESS_APPROVAL_MAX_PER_MIN once the ring is full. */
	return bx->n_made < EGRESS_APPROVAL_MAX_PER_MIN || now - bx->made[bx->made_at] >= 60000;
}

static void rate_take(struct ap_box *bx, uint64_t now)
{
	bx->made[bx->made_at] = now;
	bx->made_at = (bx->made_at + 1) % EGRESS_APPROVAL_MAX_PER_MIN;
	if (bx->n_made < EGRESS_APPROVAL_MAX_PER_MIN) {
		bx->n_made++;
	}
}

static void format_target(const char *host, uint16_t port, char out[TARGET_MAX])
{
	(void)snprintf(out, TARGET_MAX, strchr(host, ':') ? "[%.253s]:%u" : "%.253s:%u", host, (unsigned)port);
}

static void deadline(uint64_t ms, struct timespec *ts)
{
	ts->tv_sec = (time_t)(ms / 1000);
	ts->tv_nsec = (long)(ms % 1000) * 1000000;
}

static int refuse(const char **ret_rule, const char *rule, int r)
{
	if (ret_rule) {
		*ret_rule = rule;
	}
	return r;
}

/* Make a new pending approval (T.lock held); NULL with why filled when a limit refuses it. */
static struct ap *ap_make(struct crossing *x, struct ap_box *bx, const char *host, uint16_t port, const char *url,
			  int64_t wait_ms, uint64_t now, char *why, size_t why_size, const char **ret_rule, int *ret_r)
{
	struct ap *a;
	int r;

	if (bx->n_pending >= EGRESS_APPROVAL_MAX_PENDING) {
		(void)snprintf(why, why_size,
			       "box %s already has %d approvals pending (at most %d per box, "
			       "EGRESS_APPROVAL_MAX_PENDING); a person on the host can answer them with `tkbox approve "
			       "ID` or `tkbox reject ID` (see `tkbox approvals`), or they expire after 2 minutes",
			       bx->name, EGRESS_APPROVAL_MAX_PENDING, EGRESS_APPROVAL_MAX_PENDING);
		*ret_r = refuse(ret_rule, "approval-pending-limit", -EPERM);
		return NULL;
	}
	if (!rate_ok(bx, now)) {
		(void)snprintf(why, why_size,
			       "box %s asked for %d new approvals within a minute (at most %d per box per minute, "
			       "EGRESS_APPROVAL_MAX_PER_MIN); retry after a minute, or allow the host for the box "
			       "with `tkbox run --allow`",
			       bx->name, EGRESS_APPROVAL_MAX_PER_MIN, EGRESS_APPROVAL_MAX_PER_MIN);
		*ret_r = refuse(ret_rule, "approval-rate-limit", -EPERM);
		return NULL;
	}
	if (bx->n_approved >= EGRESS_APPROVAL_MAX_APPROVED) {
		(void)snprintf(why, why_size,
			       "box %s already holds %d approved targets (at most %d per box, "
			       "EGRESS_APPROVAL_MAX_APPROVED); start a new box whose `tkbox run --allow` names the "
			       "hosts it needs",
			       bx->name, EGRESS_APPROVAL_MAX_APPROVED, EGRESS_APPROVAL_MAX_APPROVED);
		*ret_r = refuse(ret_rule, "approval-approved-limit", -EPERM);
		return NULL;
	}
	a = calloc(1, sizeof(*a));
	r = !a || !(a->host = strdup(host)) || !(a->url = strdup(url)) ? -ENOMEM : new_id(a->id);
	if (r < 0) {
		ap_free(a);
		(void)snprintf(why, why_size, "the approval could not be made: %s", tk_strerror(r));
		*ret_r = refuse(ret_rule, "approval-not-recorded", r);
		return NULL;
	}
	a->bx = bx;
	a->port = port;
	format_target(host, port, a->target);
	a->created_ms = now;
	a->expires_ms = now + (uint64_t)wait_ms;
	a->ops = x->host;
	a->hbox = x->box;
	a->next = T.aps;
	T.aps = a;
	bx->refs++;
	bx->n_pending++;
	rate_take(bx, now);
	return a;
}

/* What a waiter returns once a has ended (T.lock held). */
static int ap_outcome(const struct ap *a, char *why, size_t why_size, const char **ret_rule)
{
	switch (a->state) {
	case AP_APPROVED:
		return refuse(ret_rule, "", 0);
	case AP_NOT_RECORDED:
		(void)snprintf(
			why, why_size,
			"approval %s was given but could not be recorded (tkbox.approval), so nothing passes; the "
			"box is stopped (see its events)",
			a->id);
		return refuse(ret_rule, "approval-not-recorded", -EIO);
	case AP_REJECTED:
		(void)snprintf(why, why_size,
			       "a person on the host rejected approval %s; when the agent retries, a new approval "
			       "appears in `tkbox approvals`",
			       a->id);
		return refuse(ret_rule, "approval-rejected", -EPERM);
	case AP_EXPIRED:
		(void)snprintf(why, why_size,
			       "not approved within 2 minutes (EGRESS_APPROVAL_WAIT_MS), approval %s; a person on the "
			       "host can watch `tkbox approvals` and approve it with `tkbox approve ID` when the agent "
			       "retries",
			       a->id);
		return refuse(ret_rule, "approval-expired", -EPERM);
	case AP_CANCELLED:
		(void)snprintf(why, why_size, "the box is stopping (approval %s was cancelled)", a->id);
		return refuse(ret_rule, "box-stopping", -ECANCELED);
	case AP_PENDING:
	case AP_ANSWERING:
	default:
		(void)snprintf(why, why_size, "internal: approval %s left while open", a->id);
		return refuse(ret_rule, "approval-expired", -EPERM);
	}
}

static void ap_end(struct ap *a, enum ap_state s)
{
	a->state = s;
	a->ended_ms = clock_mono_ms();
	if (a->bx->n_pending > 0) {
		a->bx->n_pending--;
	}
	(void)pthread_cond_broadcast(&T.cond);
}

/*
 * Wait (T.lock held) until a is answered and recorded, expires, or is
 * cancelled; a joiner also leaves at its own deadline (until), the asker
 * stays to the end. Returns true when this call expired it.
 */
static bool ap_wait(struct ap *a, uint64_t until)
{
	for (;;) {
		uint64_t now = clock_mono_ms();
		struct timespec ts;
		if (a->state == AP_PENDING && now >= a->expires_ms) {
			ap_end(a, AP_EXPIRED);
			return true;
		}
		if (a->state > AP_ANSWERING || (a->state == AP_PENDING && now >= until)) {
			return false;
		}
		if (a->state == AP_ANSWERING) {
			/* The answer's record is bounded by the signer's deadline: wait for it, whatever the time. */
			(void)pthread_cond_wait(&T.cond, &T.lock);
			continue;
		}
		deadline(until < a->expires_ms ? until : a->expires_ms, &ts);
		(void)pthread_cond_timedwait(&T.cond, &T.lock, &ts);
	}
}

int egress_approve_ask_rule(struct crossing *x, const char *box, const char *host, uint16_t port, const char *url,
			    int64_t wait_ms, char ret_id[EGRESS_APPROVAL_ID_MAX], char *why, size_t why_size,
			    const char **ret_rule)
{
	char q[LOG_QUOTE_BUFSIZE], target[TARGET_MAX];
	uint64_t now = clock_mono_ms();
	struct ap_box *bx;
	bool expired, made = false;
	struct ap *a;
	int r = 0;

	ret_id[0] = '\0';
	if (why_size) {
		why[0] = '\0';
	}
	if (!x || !x->host || !box || !host || !*host || strlen(host) > 253 || !url || wait_ms <= 0) {
		(void)snprintf(why, why_size, "internal: a bad approval request");
		return refuse(ret_rule, "approval-not-recorded", -EINVAL);
	}
	lock();
	prune(now);
	bx = box_get(box, true);
	if (!bx) {
		unlock();
		(void)snprintf(why, why_size, "out of memory");
		return refuse(ret_rule, "approval-not-recorded", -ENOMEM);
	}
	if (bx->stopping) {
		unlock();
		(void)snprintf(why, why_size, "the box is stopping");
		return refuse(ret_rule, "box-stopping", -ECANCELED);
	}
	if (box_approved(bx, host, port)) {
		unlock();
		return refuse(ret_rule, "", 0);
	}
	a = find_open(bx, host, port);
	if (!a) {
		a = ap_make(x, bx, host, port, url, wait_ms, now, why, why_size, ret_rule, &r);
		if (!a) {
			unlock();
			return r;
		}
		made = true;
	}
	a->waiters++;
	memcpy(ret_id, a->id, sizeof(a->id));
	memcpy(target, a->target, sizeof(target));
	if (made) {
		/* Outside the table's lock: the host's callbacks take the daemon's. */
		unlock();
		x->host->event(x->box, true, "egress.approval_pending",
			       json_pack("{s:s,s:s}", "approval_id", ret_id, "target", target));
		log_info("approval %s: box %s wants %s: tkbox approve %s (or tkbox reject %s)", ret_id, box,
			 log_quote(target, strlen(target), q), ret_id, ret_id);
		lock();
	}
	/* The asker waits to the end; one who joined an open approval leaves at its own deadline too. */
	expired = ap_wait(a, made ? a->expires_ms : now + (uint64_t)wait_ms);
	if (a->state <= AP_ANSWERING) {
		r = refuse(ret_rule, "approval-expired", -EPERM);
		(void)snprintf(why, why_size,
			       "not approved within %lld ms (approval %s); a person on the host can watch `tkbox "
			       "approvals` and approve it with `tkbox approve ID` when the agent retries",
			       (long long)wait_ms, a->id);
	} else {
		r = ap_outcome(a, why, why_size, ret_rule);
	}
	a->waiters--;
	unlock();
	if (expired) {
		x->host->event(x->box, true, "egress.approval_expired",
			       json_pack("{s:s,s:s}", "approval_id", ret_id, "target", target));
	}
	return r;
}

int egress_approve_ask(struct crossing *x, const char *box, const char *host, uint16_t port, const char *url,
		       int64_t wait_ms, char ret_id[EGRESS_APPROVAL_ID_MAX], char *why, size_t why_size)
{
	return egress_approve_ask_rule(x, box, host, port, url, wait_ms, ret_id, why, why_size, NULL);
}

void egress_approve_box_stop(const char *box)
{
	struct ap_box *bx;

	lock();
	bx = box_get(box, true);
	if (bx) {
		bx->stopping = true;
	}
	for (struct ap *a = T.aps; a; a = a->next) {
		/* One being answered finishes its record first: its waiters hear the outcome. */
		if (a->state == AP_PENDING && a->bx == bx) {
			ap_end(a, AP_CANCELLED);
		}
	}
	unlock();
}

void egress_approve_box_forget(const char *box)
{
	struct ap_box *bx = NULL;

	lock();
	for (struct ap_box **p = &T.boxes; *p; p = &(*p)->next) {
		if (strcmp((*p)->name, box) == 0) {
			bx = *p;
			*p = bx->next;
			break;
		}
	}
	if (!bx) {
		unlock();
		return;
	}
	/*
	 * Out of the table's boxes at once, so that a new box of the same name
	 * starts with nothing approved. Approvals still open (a box is removed
	 * after it stopped, so normally none) are cancelled; the ones nobody
	 * waits for go now, the others when their last waiter has left.
	 */
	bx->forgotten = true;
	bx->refs++;
	for (struct ap **p = &T.aps; *p;) {
		struct ap *a = *p;
		if (a->bx == bx && a->state == AP_PENDING) {
			ap_end(a, AP_CANCELLED);
		}
		if (a->bx == bx && a->state > AP_ANSWERING && a->waiters == 0) {
			ap_drop(p);
		} else {
			p = &a->next;
		}
	}
	if (--bx->refs == 0) {
		box_free(bx);
	}
	unlock();
}

void egress_approve_box_start(const char *box)
{
	/* Names are unique among the daemon's boxes: what the table holds of this one is an earlier box's. */
	egress_approve_box_forget(box);
}

json_t *egress_approve_list(void)
{
	uint64_t now = clock_mono_ms();
	json_t *v = json_array();

	lock();
	prune(now);
	for (struct ap *a = T.aps; v && a; a = a->next) {
		if (a->state != AP_PENDING) {
			continue;
		}
		json_int_t left = (json_int_t)(a->expires_ms > now ? (a->expires_ms - now + 999) / 1000 : 0);
		if (json_array_append_new(v, json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:I}", "id", a->id, "box", a->bx->name,
						       "target", a->target, "url", a->url, "age_s",
						       (json_int_t)((now - a->created_ms) / 1000), "expires_in_s", left,
						       "waiting", (json_int_t)a->waiters)) < 0) {
			json_decref(v);
			v = NULL;
		}
	}
	unlock();
	return v ? json_pack("{s:o}", "approvals", v) : NULL;
}

/* Record a's answer (T.lock not held; a is AP_ANSWERING, so its asker and a->hbox stay). */
static int answer_record(struct ap *a, bool approve, const char *approver, char *err, size_t err_size)
{
	json_t *data =
		json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "approval_id", a->id, "box", a->bx->name, "target", a->target,
			  "url", a->url, "decision", approve ? "approved" : "rejected", "approver", approver);
	int r;

	if (!data) {
		(void)snprintf(err, err_size, "out of memory");
		return -ENOMEM;
	}
	r = a->ops->observe_keep(a->hbox, "tkbox.approval", data, err, err_size);
	a->ops->event(a->hbox, true,
		      r < 0	? "egress.approval_not_recorded"
		      : approve ? "egress.approved"
				: "egress.rejected",
		      json_pack("{s:s,s:s,s:s}", "approval_id", a->id, "target", a->target, "approver", approver));
	return r;
}

int egress_approve_answer(const char *id, bool approve, const char *approver, char *state, size_t n)
{
	char q[LOG_QUOTE_BUFSIZE];
	char err[512] = "";
	struct ap *a;
	int r;

	if (n) {
		state[0] = '\0';
	}
	lock();
	prune(clock_mono_ms());
	a = id ? find_id(id) : NULL;
	if (!a) {
		unlock();
		return -ENOENT;
	}
	/* An approval past its time is expired even when its asker has not woken yet to say so. */
	if (a->state == AP_PENDING && clock_mono_ms() >= a->expires_ms) {
		ap_end(a, AP_EXPIRED);
	}
	if (a->state != AP_PENDING) {
		(void)snprintf(state, n, "%s", state_names[a->state]);
		unlock();
		return -EALREADY;
	}
	a->state = AP_ANSWERING;
	unlock();

	r = answer_record(a, approve, approver ? approver : "unknown", err, sizeof(err));
	if (r < 0) {
		log_error("approval %s: tkbox.approval could not be recorded (%s); %s", a->id, err,
			  approve ? "nothing passes, the box is stopped" : "it is rejected anyway");
	}

	lock();
	if (approve && r >= 0 && box_approve(a->bx, a->host, a->port) < 0) {
		/* The asker's connection still passes (it is recorded); a later one asks again. */
		log_warn("approval %s: the box's approved set is full (EGRESS_APPROVAL_MAX_APPROVED)", a->id);
	}
	ap_end(a, !approve ? AP_REJECTED : r < 0 ? AP_NOT_RECORDED : AP_APPROVED);
	(void)snprintf(state, n, "%s", state_names[a->state]);
	log_info("approval %s: %s by %s (box %s, %s)", a->id, state_names[a->state], approver ? approver : "unknown",
		 a->bx->name, log_quote(a->target, strlen(a->target), q));
	unlock();
	return approve && r < 0 ? -EIO : 0;
}
