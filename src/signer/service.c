/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "crypto.h"
#include "export.h"
#include "hmap.h"
#include "json.h"
#include "service.h"
#include "token.h"
#include "verify/merkle.h"
#include "verify/note.h"
#include "verify/record.h"
#include "verify/schema.h"

#include "banned.h"
#include "io.h"

#define ZERO_HASH "sha256:0000000000000000000000000000000000000000000000000000000000000000"
#define SIGNER_TENANT "tracekit"
#define SIGNER_RUN_ID "tracekit/signer"
#define RUN_MAX_POLICIES 8
#define COMMITMENT_STRLEN (12 + 64)

enum approval_state {
	APPROVAL_NONE = 0,
	APPROVAL_PENDING,
	APPROVAL_APPROVED,
	APPROVAL_REJECTED,
	APPROVAL_EXPIRED,
};

struct run {
	char *run_id;
	char *key; /* tenant/run_id */
	char *tenant;
	uid_t uid;
	bool closed;
	uint64_t next_run_seq;
	uint8_t head[SHA256_LEN];
	uint64_t first_seq;
	uint64_t last_seq;
	uint64_t n_decisions;
	char *policies[RUN_MAX_POLICIES]; /* policy hashes its decisions used */
	size_t n_policies;
	char *token_ok; /* the last token that verified for this run (a cache: HMAC + parse per call is costly) */
	time_t token_ok_exp; /* and how long that check holds */
};

struct decision {
	char *decision_id;
	char *approval_id;
	struct run *run;
	char *tool;
	char *tool_call_id;
	char *verdict; /* as recorded: allow, deny, ask, flag */
	char *reason;
	char *args_source; /* raw, parsed or coerced, as recorded */
	char *policy_hash; /* of the policy that decided */
	int64_t attempt;
	json_t *rule_ids;
	char commitment[COMMITMENT_STRLEN + 1]; /* "" when none */
	bool completed;
	enum approval_state approval;
	int64_t approval_expires_s;
};

struct req {
	char *key;
	uint8_t digest[SHA256_LEN];
	char *response;
	uint64_t need;
};

struct service {
	const struct signer_config *cfg;
	const struct signer_keys *keys;
	const struct policy *policy;
	struct store *reader;
	char kid[RECORD_HASH_STRLEN + 1];
	char policy_hash[POLICY_HASH_STRLEN + 1];
	char *policy_jcs;
	size_t policy_jcs_len;

	uint64_t next_seq;
	uint8_t head[SHA256_LEN];
	uint64_t durable;
	struct merkle_tree *tree;
	struct hmap runs; /* key "tenant/run_id" */
	struct hmap run_ids; /* run_id (tenant is fixed per signer) */
	struct hmap decisions; /* decision_id */
	struct hmap approvals; /* approval_id -> decision */
	struct hmap requests; /* "uid:request_id" */
	struct run **run_list;
	size_t n_runs;
	size_t n_open;
	struct decision **dec_list;
	size_t n_decs;
	struct req **req_list; /* oldest first */
	size_t n_reqs;
	bool reqs_dropped; /* some replies are in the store only (reqs_trim) */
	uint64_t key_seqs[EXPORT_MAX_KEY_RECORDS];
	size_t n_key_seqs;

	/* checkpoints */
	char *cp_note;
	uint64_t cp_size;
	uint64_t cp_want; /* sign once durable >= cp_want (0: nothing wanted) */
	int64_t cp_last_ms;

	struct store_item *pending;
	size_t n_pending;
	size_t cap_pending;
	time_t started;
};

int64_t service_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void format_ts(time_t sec, long usec, char out[32])
{
	struct tm tm;
	gmtime_r(&sec, &tm);
	snprintf(out, 32, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
		 tm.tm_hour, tm.tm_min, tm.tm_sec, usec);
}

static void now_ts(char out[32])
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	format_ts(ts.tv_sec, ts.tv_nsec / 1000, out);
}

static int hex_string(const void *p, size_t n, char *out, size_t out_size)
{
	struct buf b = { 0 };
	int r;

	if (out_size < 2 * n + 1) {
		return -E2BIG;
	}
	if ((r = buf_init(&b, 2 * n, 0)) < 0) {
		return r;
	}
	r = hex_encode(p, n, &b);
	if (r >= 0) {
		memcpy(out, buf_ptr(&b), 2 * n);
		out[2 * n] = '\0';
	}
	buf_release(&b);
	return r;
}

/*
 * Ids (event ids, decision ids, generated run ids) are unpredictable but not
 * secret: draw them from a pool refilled from the CSPRNG 4 KiB at a time
 * instead of one RAND_bytes call per id. Single-threaded (the event loop).
 */
static uint8_t id_pool[4096];
static size_t id_pool_left;

static int random_hex(size_t nbytes, char *out, size_t out_size)
{
	int r;

	if (nbytes > 32) {
		return -EINVAL;
	}
	if (id_pool_left < nbytes) {
		if ((r = crypto_random(id_pool, sizeof(id_pool))) < 0) {
			return r;
		}
		id_pool_left = sizeof(id_pool);
	}
	r = hex_string(id_pool + sizeof(id_pool) - id_pool_left, nbytes, out, out_size);
	explicit_bzero(id_pool + sizeof(id_pool) - id_pool_left, nbytes);
	id_pool_left -= nbytes;
	return r;
}

static void run_free(struct run *r)
{
	if (!r) {
		return;
	}
	free(r->run_id);
	free(r->key);
	free(r->tenant);
	for (size_t i = 0; i < r->n_policies; i++) {
		free(r->policies[i]);
	}
	free(r->token_ok);
	free(r);
}

static void decision_free(struct decision *d)
{
	if (!d) {
		return;
	}
	free(d->decision_id);
	free(d->approval_id);
	free(d->tool);
	free(d->tool_call_id);
	free(d->verdict);
	free(d->reason);
	free(d->args_source);
	free(d->policy_hash);
	if (d->rule_ids) {
		json_decref(d->rule_ids);
	}
	free(d);
}

static void req_free(struct req *q)
{
	if (!q) {
		return;
	}
	free(q->key);
	free(q->response);
	free(q);
}

/*
 * Bounds the replies kept in memory: at twice SERVICE_MAX_REQUESTS_KEPT, the
 * oldest durable ones beyond the newest SERVICE_MAX_REQUESTS_KEPT are dropped
 * (they stay in the store, where a retry finds them) and the map is rebuilt.
 * Amortised O(1) per request; a reply not yet durable is never dropped.
 */
static void reqs_trim(struct service *s)
{
	size_t j = 0;

	if (s->n_reqs < 2 * SERVICE_MAX_REQUESTS_KEPT) {
		return;
	}
	hmap_clear(&s->requests);
	for (size_t i = 0; i < s->n_reqs; i++) {
		struct req *q = s->req_list[i];

		if (i < s->n_reqs - SERVICE_MAX_REQUESTS_KEPT && q->need <= s->durable) {
			req_free(q);
			s->reqs_dropped = true;
			continue;
		}
		s->req_list[j++] = q;
		/* A put can fail only for memory: the reply is then found in the store once durable. */
		(void)hmap_put(&s->requests, q->key, q);
	}
	s->n_reqs = j;
}

static void clear_state(struct service *s)
{
	for (size_t i = 0; i < s->n_runs; i++) {
		run_free(s->run_list[i]);
	}
	for (size_t i = 0; i < s->n_decs; i++) {
		decision_free(s->dec_list[i]);
	}
	for (size_t i = 0; i < s->n_reqs; i++) {
		req_free(s->req_list[i]);
	}
	free(s->run_list);
	free(s->dec_list);
	free(s->req_list);
	s->run_list = NULL;
	s->dec_list = NULL;
	s->req_list = NULL;
	s->reqs_dropped = false;
	s->n_runs = s->n_decs = s->n_reqs = s->n_open = 0;
	hmap_clear(&s->runs);
	hmap_clear(&s->run_ids);
	hmap_clear(&s->decisions);
	hmap_clear(&s->approvals);
	hmap_clear(&s->requests);
	merkle_tree_free(s->tree);
	s->tree = NULL;
	for (size_t i = 0; i < s->n_pending; i++) {
		store_item_release(&s->pending[i]);
	}
	s->n_pending = 0;
	s->next_seq = 0;
	s->n_key_seqs = 0;
	memset(s->head, 0, sizeof(s->head));
	free(s->cp_note);
	s->cp_note = NULL;
	s->cp_size = 0;
	s->cp_want = 0;
}

static int list_push(void ***list, size_t *n, void *v)
{
	void **nl = realloc(*list, (*n + 1) * sizeof(void *));
	if (!nl) {
		return -ENOMEM;
	}
	nl[(*n)++] = v;
	*list = nl;
	return 0;
}

static int push_item(struct service *s, struct store_item *it)
{
	if (s->n_pending == s->cap_pending) {
		size_t ncap = s->cap_pending ? s->cap_pending * 2 : 256;
		struct store_item *np = realloc(s->pending, ncap * sizeof(*np));
		if (!np) {
			return -ENOMEM;
		}
		s->pending = np;
		s->cap_pending = ncap;
	}
	s->pending[s->n_pending++] = *it;
	*it = (struct store_item){ 0 };
	return 0;
}

/* ---- applying records to the state (live and replay) ---- */

static const char *jstr(const json_t *o, const char *k)
{
	const char *v = NULL;
	if (json_get_string(o, k, &v) < 0) {
		return NULL;
	}
	return v;
}

static int run_add_policy(struct run *r, const char *hash)
{
	char *d;
	for (size_t i = 0; i < r->n_policies; i++) {
		if (strcmp(r->policies[i], hash) == 0) {
			return 0;
		}
	}
	if (r->n_policies == RUN_MAX_POLICIES) {
		return 0; /* cap: extra snapshots are simply not exported */
	}
	d = strdup(hash);
	if (!d) {
		return -ENOMEM;
	}
	r->policies[r->n_policies++] = d;
	return 0;
}

static int apply_registered(struct service *s, const json_t *ev, const char *tenant, const char *run_id, uint64_t seq)
{
	struct run *r;
	json_t *data, *ident;
	const char *subject;
	int64_t uid = -1;
	int rc;

	r = calloc(1, sizeof(*r));
	if (!r) {
		return -ENOMEM;
	}
	r->run_id = strdup(run_id);
	r->tenant = strdup(tenant);
	if (asprintf(&r->key, "%s/%s", tenant, run_id) < 0) {
		r->key = NULL;
	}
	if (!r->run_id || !r->tenant || !r->key) {
		run_free(r);
		return -ENOMEM;
	}
	data = json_object_get(ev, "data");
	ident = data ? json_object_get(data, "identity") : NULL;
	subject = ident ? jstr(ident, "subject") : NULL;
	if (subject) {
		char *end;
		unsigned long v = strtoul(subject, &end, 10);
		if (*end == '\0' && end != subject) {
			uid = (int64_t)v;
		}
	}
	r->uid = uid < 0 ? (uid_t)-1 : (uid_t)uid;
	r->first_seq = seq;
	if ((rc = hmap_put(&s->runs, r->key, r)) < 0) {
		run_free(r);
		return rc;
	}
	if (strcmp(tenant, s->cfg->tenant) == 0 && (rc = hmap_put(&s->run_ids, r->run_id, r)) < 0) {
		return rc;
	}
	if ((rc = list_push((void ***)&s->run_list, &s->n_runs, r)) < 0) {
		return rc;
	}
	s->n_open++;
	return 0;
}

static int apply_decision(struct service *s, struct run *run, const json_t *ev)
{
	json_t *data = json_object_get(ev, "data");
	const char *did, *verdict, *tool, *tcid, *ph, *commit, *src;
	int64_t attempt = 0;
	json_t *reasons, *rules;
	struct decision *d;
	int rc;

	did = data ? jstr(data, "decision_id") : NULL;
	verdict = data ? jstr(data, "decision") : NULL;
	if (!did || !verdict) {
		return 0;
	}
	tool = jstr(data, "tool");
	tcid = jstr(data, "tool_use_id");
	ph = jstr(data, "policy_hash");
	commit = jstr(ev, "args_commitment");
	src = jstr(ev, "args_source");
	if (json_get_int(ev, "attempt", &attempt) < 0 || attempt < 0) {
		attempt = 0;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		return -ENOMEM;
	}
	d->decision_id = strdup(did);
	d->verdict = strdup(verdict);
	d->tool = strdup(tool ? tool : "");
	d->tool_call_id = strdup(tcid ? tcid : "");
	d->args_source = strdup(src ? src : "parsed");
	d->policy_hash = strdup(ph ? ph : "");
	d->attempt = attempt;
	if (asprintf(&d->approval_id, "a%s", did + 1) < 0) {
		d->approval_id = NULL;
	}
	if (!d->decision_id || !d->verdict || !d->tool || !d->tool_call_id || !d->approval_id || !d->args_source ||
	    !d->policy_hash) {
		decision_free(d);
		return -ENOMEM;
	}
	rules = json_object_get(data, "rule_ids");
	d->rule_ids = rules ? json_incref(rules) : json_array();
	reasons = json_object_get(data, "reasons");
	if (reasons && json_array_size(reasons) > 0 && json_is_string(json_array_get(reasons, 0))) {
		d->reason = strdup(json_string_value(json_array_get(reasons, 0)));
	}
	if (commit && strlen(commit) == COMMITMENT_STRLEN) {
		memcpy(d->commitment, commit, COMMITMENT_STRLEN + 1);
	}
	d->run = run;
	run->n_decisions++;
	if (ph && (rc = run_add_policy(run, ph)) < 0) {
		decision_free(d);
		return rc;
	}
	if ((rc = hmap_put(&s->decisions, d->decision_id, d)) < 0) {
		decision_free(d);
		return rc;
	}
	if ((rc = hmap_put(&s->approvals, d->approval_id, d)) < 0) {
		return rc;
	}
	return list_push((void ***)&s->dec_list, &s->n_decs, d);
}

static int64_t parse_ts_seconds(const char *ts)
{
	struct tm tm = { 0 };
	if (!ts || !strptime(ts, "%Y-%m-%dT%H:%M:%S", &tm)) {
		return 0;
	}
	return (int64_t)timegm(&tm);
}

/* Apply one record (already hashed) to the state: position bookkeeping, then what its type means. */
static int apply_record(struct service *s, const json_t *ev, uint64_t seq, const uint8_t hash[SHA256_LEN])
{
	const char *type = jstr(ev, "type"), *tenant = jstr(ev, "tenant"), *run_id = jstr(ev, "run_id");
	json_t *data = json_object_get(ev, "data");
	uint8_t leaf[MERKLE_HASH_LEN];
	_cleanup_free_ char *key = NULL;
	struct run *run;
	int rc;

	if (!type || !tenant || !run_id || seq != s->next_seq) {
		return -EBADMSG;
	}
	if (asprintf(&key, "%s/%s", tenant, run_id) < 0) {
		return -ENOMEM;
	}
	run = hmap_get(&s->runs, key);
	if (!run) {
		/* The first record of a stream opens it: run.registered, or signer.epoch for the signer's own. */
		rc = apply_registered(s, ev, tenant, run_id, seq);
		if (rc < 0) {
			return rc;
		}
		run = hmap_get(&s->runs, key);
		if (strcmp(type, "run.registered") != 0) {
			run->closed = true; /* a signer-level stream, never "open" */
			s->n_open--;
		}
	}
	if ((rc = merkle_leaf_hash(hash, SHA256_LEN, leaf)) < 0 || (rc = merkle_tree_append(s->tree, leaf)) < 0) {
		return rc;
	}
	s->next_seq = seq + 1;
	memcpy(s->head, hash, SHA256_LEN);
	run->next_run_seq++;
	memcpy(run->head, hash, SHA256_LEN);
	run->last_seq = seq;

	if (strcmp(type, "signer.epoch") == 0 || strcmp(type, "key.retire") == 0) {
		if (s->n_key_seqs < EXPORT_MAX_KEY_RECORDS) {
			s->key_seqs[s->n_key_seqs++] = seq;
		}
	} else if (strcmp(type, "policy.decision") == 0) {
		return apply_decision(s, run, ev);
	} else if (strcmp(type, "tool.result") == 0) {
		const char *did = data ? jstr(data, "decision_id") : NULL;
		struct decision *d = did ? hmap_get(&s->decisions, did) : NULL;
		if (d) {
			d->completed = true;
		}
	} else if (strcmp(type, "approval.request") == 0) {
		const char *aid = data ? jstr(data, "approval_id") : NULL;
		struct decision *d = aid ? hmap_get(&s->approvals, aid) : NULL;
		if (d) {
			d->approval = APPROVAL_PENDING;
			d->approval_expires_s = parse_ts_seconds(jstr(data, "expires_at"));
		}
	} else if (strcmp(type, "approval") == 0) {
		/* Records before issue 9 named the approval in tool_use_id; since then, approval_id does. */
		const char *aid = data ? jstr(data, "approval_id") : NULL;
		if (!aid && data) {
			aid = jstr(data, "tool_use_id");
		}
		const char *verdict = data ? jstr(data, "decision") : NULL;
		struct decision *d = aid ? hmap_get(&s->approvals, aid) : NULL;
		if (d && verdict) {
			d->approval = strcmp(verdict, "approve") == 0	? APPROVAL_APPROVED
				      : strcmp(verdict, "timeout") == 0 ? APPROVAL_EXPIRED
									: APPROVAL_REJECTED;
		}
	} else if (strcmp(type, "run.closing") == 0) {
		if (!run->closed) {
			run->closed = true;
			s->n_open--;
		}
	}
	return 0;
}

/* ---- appending records ---- */

/* append_record's answer for an event the event schema v2 refuses (nothing else returns it). */
#define APPEND_ERR_SCHEMA (-ENOTRECOVERABLE)

static const char *append_strerror(int r)
{
	if (r == APPEND_ERR_SCHEMA) {
		return "the record would not be valid under Tracekit's event schema v2, so it was not signed (a "
		       "signer bug: report it); nothing was recorded";
	}
	return strerror(-r);
}

/*
 * Build, sign and apply one record of `type` in the stream (tenant, run_id).
 * data and extra (event-level fields, may be NULL) are consumed.
 */
static int append_record(struct service *s, const char *tenant, const char *run_id, const char *type,
			 const char *source, json_t *data, json_t *extra, uint64_t *ret_run_seq)
{
	_cleanup_json_ json_t *ev = NULL;
	_cleanup_free_ char *key = NULL;
	struct store_item it = { 0 };
	struct buf jcs = { 0 };
	char ts[32], id[33], prev[RECORD_HASH_STRLEN + 1], run_prev[RECORD_HASH_STRLEN + 1];
	uint8_t hash[SHA256_LEN];
	struct run *run;
	uint64_t run_seq;
	int r;

	if (!data) {
		if (extra) {
			json_decref(extra);
		}
		return -ENOMEM;
	}
	if (asprintf(&key, "%s/%s", tenant, run_id) < 0) {
		json_decref(data);
		if (extra) {
			json_decref(extra);
		}
		return -ENOMEM;
	}
	run = hmap_get(&s->runs, key);
	run_seq = run ? run->next_run_seq : 0;
	if (s->next_seq == 0) {
		memcpy(prev, ZERO_HASH, sizeof(prev));
	} else {
		record_hash_format(s->head, prev);
	}
	if (run) {
		record_hash_format(run->head, run_prev);
	} else {
		memcpy(run_prev, ZERO_HASH, sizeof(run_prev));
	}
	now_ts(ts);
	if ((r = random_hex(16, id, sizeof(id))) < 0) {
		json_decref(data);
		if (extra) {
			json_decref(extra);
		}
		return r;
	}
	ev = json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:s,s:n,s:s,s:s,s:o,s:s,s:s,s:I,s:s}", "schema_version",
		       "tracekit.event.v2", "id", id, "seq", (json_int_t)s->next_seq, "prev_hash", prev, "ts", ts,
		       "run_id", run_id, "agent_id", "main", "parent_id", "source", source, "type", type, "data", data,
		       "log_id", s->cfg->log_id, "tenant", tenant, "run_seq", (json_int_t)run_seq, "run_prev_hash",
		       run_prev);
	if (!ev) {
		if (extra) {
			json_decref(extra);
		}
		return -ENOMEM;
	}
	if (extra) {
		r = json_object_update(ev, extra);
		json_decref(extra);
		if (r < 0) {
			return -ENOMEM;
		}
	}
	/*
	 * Never sign an event Tracekit's verifier would refuse: every record is
	 * checked against the event schema v2 (verify/schema.c) first. A failure
	 * is a bug in the record's builder; the call is refused.
	 */
	if (event_schema_check(ev, NULL, 0) < 0 || event_binding_check(ev, NULL, 0) < 0) {
		return APPEND_ERR_SCHEMA;
	}
	/*
	 * Only the hash is computed here (the next record chains on it); the
	 * signature is made by the commit stage, in parallel, before the record
	 * is written (server.c). Nothing is acknowledged before both.
	 */
	r = buf_init(&jcs, RECORD_MAX_EVENT_JCS, 0);
	if (r >= 0) {
		r = record_event_jcs(ev, &jcs, hash);
	}
	if (r >= 0) {
		/* The signing stage embeds these bytes in the line instead of serialising the event again. */
		it.ev_jcs_len = buf_len(&jcs);
		r = buf_dup_cstring(&jcs, &it.ev_jcs);
	}
	buf_release(&jcs);
	if (r < 0) {
		return r;
	}
	it.kind = STORE_ITEM_RECORD;
	it.seq = s->next_seq;
	it.run_seq = run_seq;
	memcpy(it.hash, hash, SHA256_LEN);
	it.key = steal_ptr(key);
	it.event = json_incref(ev);
	r = apply_record(s, ev, s->next_seq, hash);
	if (r < 0) {
		store_item_release(&it);
		return r;
	}
	r = push_item(s, &it);
	if (r < 0) {
		store_item_release(&it);
		return r;
	}
	if (ret_run_seq) {
		*ret_run_seq = run_seq;
	}
	return 0;
}

static int append_epoch(struct service *s)
{
	_cleanup_free_ char *spki = NULL;
	json_t *data;
	int r;

	r = record_spki_b64(s->keys->rec_pub, &spki);
	if (r < 0) {
		return r;
	}
	data = json_pack("{s:[{s:s,s:s,s:s}]}", "keys", "kid", s->kid, "alg", "ed25519", "spki", spki);
	return append_record(s, SIGNER_TENANT, SIGNER_RUN_ID, "signer.epoch", "signer", data, NULL, NULL);
}

/* ---- replay ---- */

static int replay_record_cb(uint64_t seq, const char *run_key, uint64_t run_seq, const uint8_t hash[32],
			    const char *line, size_t line_len, void *userdata)
{
	struct service *s = userdata;
	struct record rec = { 0 };
	int r;

	r = record_parse(line, line_len, &rec);
	if (r < 0) {
		return r;
	}
	if (memcmp(rec.hash, hash, SHA256_LEN) != 0 || (uint64_t)rec.seq != seq || (uint64_t)rec.run_seq != run_seq) {
		record_release(&rec);
		return -EBADMSG;
	}
	r = apply_record(s, rec.event, seq, hash);
	record_release(&rec);
	return r;
}

static int replay_request_cb(const char *key, const uint8_t digest[32], const char *response, void *userdata)
{
	struct service *s = userdata;
	struct req *q = calloc(1, sizeof(*q));
	int r;

	if (!q) {
		return -ENOMEM;
	}
	q->key = strdup(key);
	q->response = strdup(response);
	memcpy(q->digest, digest, SHA256_LEN);
	if (!q->key || !q->response) {
		req_free(q);
		return -ENOMEM;
	}
	if ((r = hmap_put(&s->requests, q->key, q)) < 0) {
		req_free(q);
		return r == -EEXIST ? 0 : r;
	}
	if ((r = list_push((void ***)&s->req_list, &s->n_reqs, q)) < 0) {
		return r;
	}
	reqs_trim(s);
	return 0;
}

static int load_state(struct service *s, char *err, size_t err_size)
{
	int r;

	r = merkle_tree_new(&s->tree);
	if (r < 0) {
		return r;
	}
	r = store_foreach_record(s->reader, 0, replay_record_cb, s);
	if (r < 0) {
		snprintf(err, err_size, "replaying the record store failed at seq %llu: %s",
			 (unsigned long long)s->next_seq, strerror(-r));
		return r;
	}
	/* Only the newest replies are loaded; a retry of an older request finds its reply in the store. */
	r = store_foreach_request(s->reader, SERVICE_MAX_REQUESTS_KEPT, replay_request_cb, s);
	if (r < 0) {
		snprintf(err, err_size, "loading idempotent replies failed: %s", strerror(-r));
		return r;
	}
	s->reqs_dropped = s->reqs_dropped || s->n_reqs >= SERVICE_MAX_REQUESTS_KEPT;
	s->durable = s->next_seq;
	if (store_checkpoint_at_least(s->reader, 0, &s->cp_size, &s->cp_note) < 0) {
		s->cp_note = NULL;
		s->cp_size = 0;
	}
	if (s->next_seq == 0) {
		r = append_epoch(s);
		if (r < 0) {
			snprintf(err, err_size, "writing signer.epoch failed: %s", append_strerror(r));
			return r;
		}
	}
	return 0;
}

static int save_policy_snapshot(struct service *s)
{
	_cleanup_free_ char *dir = NULL, *path = NULL;
	struct stat st;

	if (asprintf(&dir, "%s/policies", s->cfg->dir) < 0) {
		return -ENOMEM;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		return negative_errno();
	}
	/* Snapshots are kept forever: a run's bundle carries the policy its decisions name. */
	if (asprintf(&path, "%s/%s.json", dir, s->policy_hash + 7) < 0) {
		return -ENOMEM;
	}
	if (stat(path, &st) == 0) {
		return 0;
	}
	return io_write_file_atomic(path, s->policy_jcs, s->policy_jcs_len, 0600);
}

int service_new(const struct signer_config *cfg, const struct signer_keys *keys, const struct policy *policy,
		struct store *reader, struct service **ret, char *err, size_t err_size)
{
	_cleanup_json_ json_t *snap = NULL;
	struct service *s;
	int r;

	s = calloc(1, sizeof(*s));
	if (!s) {
		return -ENOMEM;
	}
	s->cfg = cfg;
	s->keys = keys;
	s->policy = policy;
	s->reader = reader;
	s->started = time(NULL);
	s->cp_last_ms = service_now_ms();
	if ((r = record_kid(keys->rec_pub, s->kid)) < 0 || (r = policy_hash(policy, s->policy_hash)) < 0 ||
	    (r = policy_snapshot(policy, &snap)) < 0 ||
	    (r = json_jcs_string(snap, (size_t)4 << 20, &s->policy_jcs)) < 0) {
		snprintf(err, err_size, "preparing keys and policy snapshot: %s", strerror(-r));
		service_free(s);
		return r;
	}
	s->policy_jcs_len = strlen(s->policy_jcs);
	if ((r = save_policy_snapshot(s)) < 0) {
		snprintf(err, err_size, "saving the policy snapshot: %s", strerror(-r));
		service_free(s);
		return r;
	}
	r = load_state(s, err, err_size);
	if (r < 0) {
		service_free(s);
		return r;
	}
	*ret = s;
	return 0;
}

void service_free(struct service *s)
{
	if (!s) {
		return;
	}
	clear_state(s);
	free(s->pending);
	free(s->policy_jcs);
	free(s);
}

int service_sign_item(const struct signer_keys *keys, struct store_item *it)
{
	uint8_t hash[SHA256_LEN];
	char *line = NULL;
	int r;

	if (it->kind != STORE_ITEM_RECORD || it->text || !it->event) {
		return 0;
	}
	r = it->ev_jcs ? record_build_jcs(it->event, it->ev_jcs, it->ev_jcs_len, keys->rec_priv, keys->rec_pub, &line,
					  hash)
		       : record_build(it->event, keys->rec_priv, keys->rec_pub, &line, hash);
	if (r < 0) {
		return r;
	}
	if (memcmp(hash, it->hash, SHA256_LEN) != 0) {
		free(line);
		return -EBADMSG; /* the event changed after it was chained: never sign that */
	}
	it->text = line;
	json_decref(it->event);
	it->event = NULL;
	free(it->ev_jcs);
	it->ev_jcs = NULL;
	return 0;
}

void service_take_pending(struct service *s, struct store_item **ret_items, size_t *ret_n)
{
	*ret_items = s->pending;
	*ret_n = s->n_pending;
	s->pending = NULL;
	s->n_pending = 0;
	s->cap_pending = 0;
}

uint64_t service_durable_count(const struct service *s)
{
	return s->durable;
}

uint64_t service_assigned_count(const struct service *s)
{
	return s->next_seq;
}

int service_reload(struct service *s, char *err, size_t err_size)
{
	clear_state(s);
	return load_state(s, err, err_size);
}

/* ---- checkpoints ---- */

static int sign_checkpoint(struct service *s, uint64_t size)
{
	_cleanup_free_ char *text = NULL, *note = NULL;
	struct store_item it = { 0 };
	uint8_t root[MERKLE_HASH_LEN];
	int r;

	if (size == 0 || (s->cp_note && s->cp_size >= size)) {
		return 0;
	}
	if ((r = merkle_tree_root(s->tree, size, root)) < 0 ||
	    (r = checkpoint_format(s->cfg->origin, size, root, &text)) < 0 ||
	    (r = note_sign(text, strlen(text), s->cfg->origin, s->keys->log_priv, &note)) < 0) {
		return r;
	}
	it.kind = STORE_ITEM_CHECKPOINT;
	it.seq = size;
	it.text = strdup(note);
	if (!it.text) {
		return -ENOMEM;
	}
	r = push_item(s, &it);
	if (r < 0) {
		store_item_release(&it);
		return r;
	}
	free(s->cp_note);
	s->cp_note = steal_ptr(note);
	s->cp_size = size;
	s->cp_last_ms = service_now_ms();
	return 0;
}

void service_durable(struct service *s, uint64_t count, int64_t now_ms)
{
	if (count > s->durable) {
		s->durable = count;
	}
	if (s->cp_want && s->durable >= s->cp_want) {
		s->cp_want = 0;
		(void)sign_checkpoint(s, s->durable);
	}
}

void service_checkpoint_now(struct service *s)
{
	(void)sign_checkpoint(s, s->durable);
}

void service_tick(struct service *s, int64_t now_ms)
{
	if (now_ms - s->cp_last_ms >= SERVICE_CHECKPOINT_INTERVAL_MS) {
		s->cp_last_ms = now_ms;
		if (s->durable > s->cp_size) {
			(void)sign_checkpoint(s, s->durable);
		}
	}
}

/* ---- replies ---- */

void service_reply_release(struct service_reply *r)
{
	if (!r) {
		return;
	}
	if (r->body) {
		json_decref(r->body);
	}
	free(r->wait_approval);
	*r = (struct service_reply){ 0 };
}

static void reply_error(struct service_reply *ret, enum rpc_err e, const char *fmt, ...) _printf_(3, 4);
static void reply_error(struct service_reply *ret, enum rpc_err e, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ret->body = rpc_error_new(e, msg);
}

static int commitment(const uint8_t salt_key[32], const char *label, const char *digest,
		      char out[COMMITMENT_STRLEN + 1])
{
	uint8_t salt[SHA256_LEN], mac[SHA256_LEN];
	int r;

	if ((r = hmac_sha256(salt_key, 32, label, strlen(label), salt)) < 0 ||
	    (r = hmac_sha256(salt, sizeof(salt), digest, strlen(digest), mac)) < 0) {
		return r;
	}
	memcpy(out, "hmac-sha256:", 12);
	r = hex_string(mac, sizeof(mac), out + 12, COMMITMENT_STRLEN + 1 - 12);
	explicit_bzero(salt, sizeof(salt));
	return r;
}

/* Resolve and authenticate a per-run call. */
static struct run *run_auth(struct service *s, const struct caller *c, const json_t *obj, bool must_be_open,
			    struct service_reply *ret)
{
	const char *run_id, *token;
	struct run *run;

	if (json_get_string(obj, "run_id", &run_id) < 0 || json_get_string(obj, "run_token", &token) < 0) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "run_id and run_token must be strings");
		return NULL;
	}
	run = hmap_get(&s->run_ids, run_id);
	if (!run) {
		reply_error(ret, RPC_ERR_UNKNOWN_RUN, "no run with this id");
		return NULL;
	}
	if (run->uid != c->uid) {
		reply_error(ret, RPC_ERR_RUN_TOKEN_INVALID, "run token invalid, expired or not issued to this caller");
		return NULL;
	}
	/* The same token string as last time for this run (and uid, checked above) needs no new check until it expires. */
	if (!run->token_ok || strcmp(run->token_ok, token) != 0 || time(NULL) >= run->token_ok_exp) {
		if (token_check(s->keys->token_key, token, run_id, c->uid, time(NULL)) < 0) {
			reply_error(ret, RPC_ERR_RUN_TOKEN_INVALID,
				    "run token invalid, expired or not issued to this caller");
			return NULL;
		}
		free(run->token_ok);
		run->token_ok = strdup(token);
		/* Tokens live TOKEN_LIFETIME_S; re-check at least every minute so expiry is honoured closely. */
		run->token_ok_exp = time(NULL) + 60;
	}
	if (must_be_open && run->closed) {
		reply_error(ret, RPC_ERR_RUN_CLOSED, "run is closed");
		return NULL;
	}
	return run;
}

static void do_hello(struct service *s, const struct caller *c, const struct rpc_request *req,
		     struct service_reply *ret)
{
	enum signer_role role = c->role;
	const char *name = NULL;
	int64_t proto;

	if (json_get_int(req->obj, "proto", &proto) < 0) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "proto must be an integer");
		return;
	}
	if (proto != RPC_PROTO_VERSION) {
		reply_error(ret, RPC_ERR_VERSION_MISMATCH,
			    "protocol version mismatch: client speaks %lld, this signer speaks exactly %d",
			    (long long)proto, RPC_PROTO_VERSION);
		return;
	}
	if (json_object_get(req->obj, "role")) {
		if (json_get_string(req->obj, "role", &name) < 0 || signer_role_parse(name, &role) < 0) {
			reply_error(ret, RPC_ERR_INVALID_REQUEST, "role must be \"runtime\" or \"approver\"");
			return;
		}
		if (!(signer_config_roles(s->cfg, c->uid) & (1u << role))) {
			reply_error(ret, RPC_ERR_FORBIDDEN,
				    "uid %u is not granted the %s role: list it in authorize in %s/config.json "
				    "(a bare uid grants every role; {\"uid\":%u,\"roles\":[\"%s\"]} this one) "
				    "and restart the signer",
				    (unsigned)c->uid, signer_role_name(role), s->cfg->dir, (unsigned)c->uid,
				    signer_role_name(role));
			return;
		}
		/* A connection holds one role for its life: a person's answer never shares the runtime's connection. */
		if (c->role_declared && role != c->role) {
			reply_error(ret, RPC_ERR_FORBIDDEN,
				    "this connection already holds the %s role; open a new connection for the %s role",
				    signer_role_name(c->role), signer_role_name(role));
			return;
		}
	}
	/* The first hello fixes the connection's role, declared or not. */
	ret->set_role = !c->role_declared;
	ret->role = role;
	ret->body = json_pack("{s:[i,i],s:s,s:I,s:s,s:s}", "proto", RPC_PROTO_VERSION, RPC_PROTO_VERSION, "version",
			      TKBOX_VERSION, "pid", (json_int_t)getpid(), "log_id", s->cfg->log_id, "role",
			      signer_role_name(role));
}

/* The roles that may call each method (bits 1 << signer_role). */
static unsigned method_roles(enum rpc_method m)
{
	switch (m) {
	case RPC_REGISTER_RUN:
	case RPC_DECIDE:
	case RPC_COMPLETE:
	case RPC_OBSERVE:
	case RPC_APPROVAL_REQUEST:
	case RPC_CLOSE_RUN:
		return 1u << SIGNER_ROLE_RUNTIME;
	case RPC_APPROVAL_DECIDE:
	case RPC_APPROVAL_LIST:
		return 1u << SIGNER_ROLE_APPROVER;
	case RPC_HELLO:
	case RPC_APPROVAL_WAIT:
	case RPC_EXPORT:
	case RPC_CHECKPOINT_NUDGE:
	case RPC_STATUS:
	case RPC_METHOD_MAX:
	default:
		return SIGNER_ROLES_ALL;
	}
}

/* Refuse a method the connection's role may not call, or a role the uid no longer holds. Returns false when refused. */
static bool role_allows(const struct service *s, const struct caller *c, enum rpc_method m, struct service_reply *ret)
{
	const char *method = rpc_method_name(m);

	if (m == RPC_HELLO) {
		return true;
	}
	if (!(method_roles(m) & (1u << c->role))) {
		if (m == RPC_APPROVAL_DECIDE || m == RPC_APPROVAL_LIST) {
			reply_error(ret, RPC_ERR_FORBIDDEN,
				    "%s needs the approver role and this is a %s connection: a person answers with "
				    "`tkbox-signer approvals approve|reject ID` (or a connection whose hello says "
				    "\"role\":\"approver\", from a uid granted it in authorize)",
				    method, signer_role_name(c->role));
		} else {
			reply_error(ret, RPC_ERR_FORBIDDEN,
				    "%s needs the runtime role and this is a %s connection: open a connection "
				    "without a role (or with \"role\":\"runtime\") from a uid granted it in authorize",
				    method, signer_role_name(c->role));
		}
		return false;
	}
	if (!(signer_config_roles(s->cfg, c->uid) & (1u << c->role))) {
		reply_error(ret, RPC_ERR_FORBIDDEN,
			    "uid %u is not granted the %s role that %s needs: list it in authorize in %s/config.json "
			    "(a bare uid grants every role) and restart the signer",
			    (unsigned)c->uid, signer_role_name(c->role), method, s->cfg->dir);
		return false;
	}
	return true;
}

/* s as a JSON string of at most max code points, cut at a UTF-8 character boundary. */
static json_t *json_string_capped(const char *s, size_t max)
{
	size_t n = 0, cp = 0;

	while (s[n] && (cp < max || ((unsigned char)s[n] & 0xc0) == 0x80)) {
		cp += ((unsigned char)s[n] & 0xc0) != 0x80;
		n++;
	}
	return json_stringn(s, n);
}

static const char *isolation_of(const struct service *s, const struct caller *c)
{
	/* Measured, never claimed: the dev signer runs as its caller by design. */
	if (s->cfg->mode == SIGNER_MODE_DEV || c->uid == geteuid()) {
		return "same-user";
	}
	return "separate-user";
}

static void do_register(struct service *s, const struct caller *c, const struct rpc_request *req,
			struct service_reply *ret)
{
	_cleanup_free_ char *token = NULL;
	json_t *agent, *data, *extra;
	const char *name, *version = NULL, *run_id = NULL;
	char gen[40], subject[24];
	uint64_t run_seq;
	int r;

	if (json_get_object(req->obj, "agent", &agent) < 0 || json_get_string(agent, "name", &name) < 0 ||
	    name[0] == '\0' || strlen(name) > 128 ||
	    json_only_keys(agent, (const char *const[]){ "name", "version", NULL }) < 0) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "agent must be {name (1..128 chars), version?}");
		return;
	}
	r = json_get_string(agent, "version", &version);
	if ((r < 0 && r != -ENOENT) || (version && strlen(version) > 64)) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "agent.version must be a string of at most 64 chars");
		return;
	}
	r = json_get_string(req->obj, "run_id", &run_id);
	if (r == -ENOENT) {
		if (random_hex(12, gen + 4, sizeof(gen) - 4) < 0) {
			reply_error(ret, RPC_ERR_INTERNAL, "no randomness");
			return;
		}
		memcpy(gen, "run-", 4);
		run_id = gen;
	} else if (r < 0 || !rpc_id_ok(run_id) || strcmp(run_id, SIGNER_RUN_ID) == 0) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "run_id must match [A-Za-z0-9._:-]{1,128}");
		return;
	}
	if (hmap_get(&s->run_ids, run_id)) {
		reply_error(ret, RPC_ERR_RUN_EXISTS, "a run with this id exists");
		return;
	}
	if (s->n_open >= SERVICE_MAX_RUNS_OPEN) {
		reply_error(ret, RPC_ERR_QUOTA_EXCEEDED, "too many open runs (SERVICE_MAX_RUNS_OPEN)");
		return;
	}
	snprintf(subject, sizeof(subject), "%u", (unsigned)c->uid);
	data = json_pack("{s:{s:s},s:{s:s,s:s,s:b},s:s}", "agent", "name", name, "identity", "scheme", "uid", "subject",
			 subject, "attested", 1, "signer_isolation", isolation_of(s, c));
	if (data && version) {
		(void)json_object_set_new(json_object_get(data, "agent"), "version", json_string(version));
	}
	extra = json_pack("{s:b,s:s,s:b,s:s}", "tenant_attested", 0, "principal", subject, "principal_attested", 1,
			  "request_id", req->request_id);
	r = append_record(s, s->cfg->tenant, run_id, "run.registered", "signer", data, extra, &run_seq);
	if (r < 0) {
		reply_error(ret, RPC_ERR_INTERNAL, "could not sign run.registered: %s", append_strerror(r));
		return;
	}
	if (token_mint(s->keys->token_key, run_id, c->uid, time(NULL), &token) < 0) {
		reply_error(ret, RPC_ERR_INTERNAL, "could not mint a run token");
		return;
	}
	ret->body = json_pack("{s:s,s:s,s:s,s:b,s:b,s:s,s:I,s:[s]}", "run_id", run_id, "run_token", token, "tenant",
			      s->cfg->tenant, "tenant_attested", 0, "principal_attested", 1, "signer_isolation",
			      isolation_of(s, c), "run_seq", (json_int_t)run_seq, "fail_modes", "closed");
}

static json_t *str_array(char **v, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++) {
		if (json_array_append_new(a, json_string(v[i])) < 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

static void do_decide(struct service *s, const struct caller *c, const struct rpc_request *req,
		      struct service_reply *ret)
{
	struct policy_decision pd = { 0 };
	_cleanup_json_ json_t *parsed = NULL;
	const char *tool, *tcid, *args_source, *recorded;
	char digest[RPC_DIGEST_STRLEN + 1], commit[COMMITMENT_STRLEN + 1], did[40], msg[256];
	json_t *args, *data, *extra, *rules;
	struct rpc_decide m;
	uint64_t run_seq;
	struct run *run;
	int64_t attempt;
	bool src_given;
	int r;

	run = run_auth(s, c, req->obj, true, ret);
	if (!run) {
		return;
	}
	if (rpc_decide_decode(req->obj, &m, msg, sizeof(msg)) < 0) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "%s", msg);
		return;
	}
	tool = m.tool;
	tcid = m.tool_call_id;
	attempt = m.attempt;
	src_given = m.args_source != NULL;
	args_source = src_given ? m.args_source : "parsed";
	if (run->n_decisions >= SERVICE_MAX_DECISIONS_PER_RUN) {
		reply_error(ret, RPC_ERR_QUOTA_EXCEEDED,
			    "too many decisions in this run (SERVICE_MAX_DECISIONS_PER_RUN)");
		return;
	}
	args = (json_t *)m.args;
	if (json_is_string(args)) {
		/*
		 * Raw arguments (a JSON text in a string) are parsed strictly; what
		 * fails stays a string, which the policy denies as TK-ARGS-INVALID.
		 */
		const char *raw = json_string_value(args);
		if (json_parse_strict(raw, json_string_length(args), &JSON_OPTS_DEFAULT, &parsed) >= 0) {
			args = parsed;
		}
		if (!src_given) {
			args_source = "raw";
		}
	}
	/* Fail closed: an engine error is a deny, never an allow. */
	r = policy_decide(s->policy, tool, args, &pd);
	if (r < 0) {
		reply_error(ret, RPC_ERR_UNAVAILABLE, "policy engine failed (%s): treat as deny", strerror(-r));
		return;
	}
	memcpy(did, "d", 2);
	if ((r = random_hex(16, did + 1, sizeof(did) - 1)) < 0 || (r = rpc_args_digest(tool, args, digest)) < 0 ||
	    (r = commitment(s->keys->salt_key, did, digest, commit)) < 0) {
		policy_decision_release(&pd);
		reply_error(ret, RPC_ERR_INTERNAL, "could not commit to the arguments");
		return;
	}
	recorded = policy_verdict_name(pd.verdict);
	if (pd.verdict == POLICY_ALLOW && pd.n_flag_ids > 0) {
		recorded = "flag";
	}
	rules = str_array(pd.rule_ids, pd.n_rule_ids);
	if (rules) {
		for (size_t i = 0; i < pd.n_flag_ids; i++) {
			(void)json_array_append_new(rules, json_string(pd.flag_ids[i]));
		}
	}
	/* args_commitment and engine are event-level fields: not repeated in data (records stay small). */
	data = json_pack("{s:s,s:s,s:o,s:s,s:s,s:s}", "tool_use_id", tcid, "decision", recorded, "rule_ids", rules,
			 "policy_hash", s->policy_hash, "tool", tool, "decision_id", did);
	if (data && pd.reason) {
		/* The schema bounds a reason at 4096 code points; a policy's may be longer. */
		(void)json_object_set_new(data, "reasons", json_pack("[o]", json_string_capped(pd.reason, 4096)));
	}
	extra = json_pack("{s:s,s:s,s:s,s:s,s:s}", "request_id", req->request_id, "tool_call_id", tcid,
			  "args_commitment", commit, "args_source", args_source, "engine", SERVICE_ENGINE);
	if (extra && attempt >= 0) {
		(void)json_object_set_new(extra, "attempt", json_integer(attempt));
	}
	r = append_record(s, run->tenant, run->run_id, "policy.decision", "hook", data, extra, &run_seq);
	if (r < 0) {
		policy_decision_release(&pd);
		reply_error(ret, RPC_ERR_UNAVAILABLE, "could not sign the decision (%s): treat as deny",
			    append_strerror(r));
		return;
	}
	ret->body = json_pack("{s:s,s:s,s:o,s:o,s:I}", "decision", policy_verdict_name(pd.verdict), "decision_id", did,
			      "rule_ids", str_array(pd.rule_ids, pd.n_rule_ids), "flag_ids",
			      str_array(pd.flag_ids, pd.n_flag_ids), "run_seq", (json_int_t)run_seq);
	if (ret->body && pd.reason) {
		(void)json_object_set_new(ret->body, "reason", json_string(pd.reason));
	}
	policy_decision_release(&pd);
}

/* "SIGKILL" for 9: this libc's abbreviation, or "SIGRTMIN+n" for a real-time signal; false when it has none. */
static bool signal_name(int sig, char *out, size_t out_size)
{
	const char *abbrev = sigabbrev_np(sig);

	if (abbrev) {
		snprintf(out, out_size, "SIG%s", abbrev);
		return true;
	}
	if (sig >= SIGRTMIN && sig <= SIGRTMAX) {
		snprintf(out, out_size, "SIGRTMIN+%d", sig - SIGRTMIN);
		return true;
	}
	return false;
}

static void do_complete(struct service *s, const struct caller *c, const struct rpc_request *req,
			struct service_reply *ret)
{
	const char *did, *digest, *status, *errmsg, *stdin_sha256;
	char check[COMMITMENT_STRLEN + 1], label[64], rcommit[COMMITMENT_STRLEN + 1], msg[256];
	json_t *data, *extra, *value;
	struct rpc_complete m;
	struct decision *d;
	struct run *run;
	int64_t exit_code, sig, stdin_bytes;
	uint64_t run_seq;
	int r;

	run = run_auth(s, c, req->obj, true, ret);
	if (!run) {
		return;
	}
	/*
	 * How the command ended: an exit status, or the signal that killed it
	 * (killed by SIGKILL is not exit 137), never both. Neither: not known
	 * (it never started, or the box went away). The decoder checks it all.
	 */
	if (rpc_complete_decode(req->obj, &m, msg, sizeof(msg)) < 0) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "%s", msg);
		return;
	}
	did = m.decision_id;
	digest = m.args_digest;
	status = m.status == RPC_STATUS_OK ? "ok" : "error";
	exit_code = m.exit_code;
	sig = m.signal > 0 ? m.signal : -1;
	errmsg = m.error;
	stdin_sha256 = m.stdin_sha256;
	stdin_bytes = m.stdin_bytes;
	d = hmap_get(&s->decisions, did);
	if (!d || d->run != run) {
		reply_error(ret, RPC_ERR_UNKNOWN_DECISION, "no such decision in this run");
		return;
	}
	if (d->completed) {
		reply_error(ret, RPC_ERR_CONFLICT, "this decision was already completed");
		return;
	}
	if (strcmp(d->verdict, "deny") == 0) {
		reply_error(ret, RPC_ERR_FORBIDDEN, "the decision was deny: nothing may have run");
		return;
	}
	if (strcmp(d->verdict, "ask") == 0 && d->approval != APPROVAL_APPROVED) {
		reply_error(ret, RPC_ERR_FORBIDDEN, "the decision was ask and has no approval");
		return;
	}
	if (strlen(digest) != RECORD_HASH_STRLEN || commitment(s->keys->salt_key, did, digest, check) < 0 ||
	    !crypto_equal(check, d->commitment, COMMITMENT_STRLEN)) {
		reply_error(ret, RPC_ERR_ARGS_MISMATCH, "args_digest is not the digest of the decided arguments");
		return;
	}
	snprintf(label, sizeof(label), "result:%s", did);
	if (commitment(s->keys->salt_key, label, digest, rcommit) < 0) {
		reply_error(ret, RPC_ERR_INTERNAL, "could not commit");
		return;
	}
	value = json_pack("{s:s}", "status", status);
	if (value && exit_code >= 0) {
		(void)json_object_set_new(value, "exit_code", json_integer(exit_code));
	}
	if (value && sig > 0) {
		char name[32];
		(void)json_object_set_new(value, "signal", json_integer(sig));
		if (signal_name((int)sig, name, sizeof(name))) {
			(void)json_object_set_new(value, "signal_name", json_string(name));
		}
	}
	if (value && errmsg) {
		(void)json_object_set_new(value, "error", json_string(errmsg));
	}
	if (value && stdin_sha256) {
		(void)json_object_set_new(value, "stdin_sha256", json_string(stdin_sha256));
		(void)json_object_set_new(value, "stdin_bytes", json_integer(stdin_bytes));
	}
	/* A connection (the network door): its bytes each way in the output, its duration in the tool.result. */
	if (value && m.has_bytes) {
		(void)json_object_set_new(value, "bytes_up", json_integer(m.bytes_up));
		(void)json_object_set_new(value, "bytes_down", json_integer(m.bytes_down));
	}
	/* A Write of the patch door: the files it wrote ([] when it wrote none). */
	if (value && m.written_paths) {
		(void)json_object_set_new(value, "written_paths", json_deep_copy(m.written_paths));
	}
	data = json_pack("{s:s,s:b,s:{s:o,s:b},s:s}", "tool_use_id", d->tool_call_id, "ok", strcmp(status, "ok") == 0,
			 "output", "value", value, "redacted", 0, "decision_id", did);
	if (data && m.has_duration) {
		(void)json_object_set_new(data, "duration_ms", json_integer(m.duration_ms));
	}
	extra = json_pack("{s:s,s:s,s:s}", "request_id", req->request_id, "tool_call_id", d->tool_call_id,
			  "args_commitment", rcommit);
	r = append_record(s, run->tenant, run->run_id, "tool.result", "hook", data, extra, &run_seq);
	if (r < 0) {
		reply_error(ret, RPC_ERR_UNAVAILABLE, "could not sign the result: %s", append_strerror(r));
		return;
	}
	ret->body = json_pack("{s:I}", "run_seq", (json_int_t)run_seq);
}

/*
 * The daemon's gap kinds and the capture.gap kind of the schema that fits:
 * a completion or a must-keep observation that could not be recorded was
 * lost because the signer could not take it. Others get no kind.
 */
static const struct {
	const char *daemon;
	const char *schema;
} gap_kinds[] = {
	{ "complete", "signer_unavailable" },
	{ "observe", "signer_unavailable" },
};

/* capture.gap data from a tkbox.gap observation: {reason, kind?, missed_events?}; the daemon's kind leads the reason. */
static json_t *gap_record(const char *reason, const char *kind, int64_t count, const char **ret_kind)
{
	_cleanup_free_ char *text = NULL;
	const char *schema = NULL;
	json_t *rec;

	for (size_t i = 0; kind && i < ARRAY_SIZE(gap_kinds); i++) {
		if (strcmp(kind, gap_kinds[i].daemon) == 0) {
			schema = gap_kinds[i].schema;
		}
	}
	if (asprintf(&text, "%s%s%s", kind ? kind : "", kind ? ": " : "", reason ? reason : "tkbox.gap") < 0) {
		return NULL;
	}
	rec = json_pack("{s:o}", "reason", json_string_capped(text, 4096));
	if (rec && schema) {
		(void)json_object_set_new(rec, "kind", json_string(schema));
	}
	if (rec && count >= 0) {
		(void)json_object_set_new(rec, "missed_events", json_integer(count));
	}
	*ret_kind = schema;
	return rec;
}

static void do_observe(struct service *s, const struct caller *c, const struct rpc_request *req,
		       struct service_reply *ret)
{
	const char *kind, *reason = NULL;
	json_t *data, *rec, *extra;
	_cleanup_free_ char *jcs = NULL;
	struct rpc_observe m;
	char msg[256];
	uint64_t run_seq;
	struct run *run;
	int r;

	run = run_auth(s, c, req->obj, true, ret);
	if (!run) {
		return;
	}
	if (rpc_observe_decode(req->obj, &m, msg, sizeof(msg)) < 0) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "%s", msg);
		return;
	}
	kind = m.kind;
	data = (json_t *)m.data;
	if (json_jcs_string(data, SERVICE_MAX_OBSERVE_DATA, &jcs) < 0) {
		reply_error(ret, RPC_ERR_QUOTA_EXCEEDED, "observation data over 64 KiB (SERVICE_MAX_OBSERVE_DATA)");
		return;
	}
	/*
	 * The event schema's type list is closed and has no observation type:
	 * a gap is a capture.gap; the others ride in `review` (whose data is
	 * open), with the kind as reviewer and the client's object as verdict.
	 */
	if (strcmp(kind, "tkbox.gap") == 0) {
		const char *gkind = NULL, *skind;
		int64_t count = -1;

		if (json_only_keys(data, (const char *const[]){ "reason", "kind", "count", NULL }) < 0 ||
		    (json_object_get(data, "reason") && json_get_string(data, "reason", &reason) < 0) ||
		    (json_object_get(data, "kind") && json_get_string(data, "kind", &gkind) < 0) ||
		    (json_object_get(data, "count") && (json_get_int(data, "count", &count) < 0 || count < 0))) {
			reply_error(ret, RPC_ERR_INVALID_REQUEST,
				    "tkbox.gap data is {reason (string), kind (string), count (integer >= 0)}");
			return;
		}
		rec = gap_record(reason, gkind, count, &skind);
	} else {
		rec = json_pack("{s:s,s:O}", "reviewer", kind, "verdict", data);
	}
	extra = json_pack("{s:s}", "request_id", req->request_id);
	r = append_record(s, run->tenant, run->run_id, strcmp(kind, "tkbox.gap") == 0 ? "capture.gap" : "review",
			  strcmp(kind, "tkbox.gap") == 0 ? "signer" : "sdk", rec, extra, &run_seq);
	if (r < 0) {
		reply_error(ret, RPC_ERR_UNAVAILABLE, "could not sign the observation: %s", append_strerror(r));
		return;
	}
	ret->body = json_pack("{s:I}", "run_seq", (json_int_t)run_seq);
}

static void approval_expires(struct decision *d, char out[32])
{
	format_ts((time_t)d->approval_expires_s, 0, out);
}

static const char *approval_state_name(enum approval_state a)
{
	switch (a) {
	case APPROVAL_PENDING:
		return "pending";
	case APPROVAL_APPROVED:
		return "approved";
	case APPROVAL_REJECTED:
		return "rejected";
	case APPROVAL_EXPIRED:
		return "expired";
	case APPROVAL_NONE:
	default:
		return "none";
	}
}

/* Write the `approval` record for a decision on an approval. */
static int approval_record(struct service *s, struct decision *d, const char *verdict, const char *approver,
			   int64_t approver_uid, const char *reason, const char *request_id, uint64_t *ret_run_seq)
{
	json_t *data, *extra;
	bool self = false;

	data = json_pack("{s:s,s:s,s:s,s:s,s:s}", "tool_use_id", d->tool_call_id, "approval_id", d->approval_id,
			 "decision", verdict, "approver", approver, "channel", "tkbox-signer");
	if (data && approver_uid >= 0) {
		char subject[24];

		/*
		 * Self-approval as Tracekit's verifier reads it: the approver is the
		 * requester, i.e. the uid the run belongs to (the daemon's). Such an
		 * approval caps a bundle's assurance at dev ("approvals: self").
		 */
		self = (uid_t)approver_uid == d->run->uid;
		snprintf(subject, sizeof(subject), "%lld", (long long)approver_uid);
		(void)json_object_set_new(data, "approver_uid", json_integer(approver_uid));
		(void)json_object_set_new(data, "same_user", json_boolean(self));
		(void)json_object_set_new(
			data, "approver_identity",
			json_pack("{s:s,s:s,s:b}", "scheme", "uid", "subject", subject, "attested", 1));
	}
	if (data) {
		(void)json_object_set_new(data, "self_approved", json_boolean(self));
	}
	if (data && reason) {
		(void)json_object_set_new(data, "reason", json_string_capped(reason, 1024));
	}
	extra = json_pack("{s:s}", "tool_call_id", d->tool_call_id);
	if (extra && request_id) {
		(void)json_object_set_new(extra, "request_id", json_string(request_id));
	}
	return append_record(s, d->run->tenant, d->run->run_id, "approval", "signer", data, extra, ret_run_seq);
}

/* Lazily expire a pending approval past its time. */
static void approval_check_expiry(struct service *s, struct decision *d)
{
	if (d->approval == APPROVAL_PENDING && time(NULL) >= d->approval_expires_s && !d->run->closed) {
		(void)approval_record(s, d, "timeout", "tkbox-signer", -1, NULL, NULL, NULL);
	}
}

static void do_approval_request(struct service *s, const struct caller *c, const struct rpc_request *req,
				struct service_reply *ret)
{
	char expires[32], requester[32], nonce[33], bdigest[RECORD_HASH_STRLEN + 1];
	_cleanup_free_ char *bjcs = NULL;
	uint8_t bh[SHA256_LEN];
	struct decision *d;
	const char *did;
	json_t *data, *rules, *extra, *binding;
	struct run *run;
	uint64_t run_seq;
	time_t exp;
	int r;

	run = run_auth(s, c, req->obj, true, ret);
	if (!run) {
		return;
	}
	if (json_get_string(req->obj, "decision_id", &did) < 0) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "decision_id must be a string");
		return;
	}
	d = hmap_get(&s->decisions, did);
	if (!d || d->run != run) {
		reply_error(ret, RPC_ERR_UNKNOWN_DECISION, "no such decision in this run");
		return;
	}
	if (strcmp(d->verdict, "ask") != 0) {
		reply_error(ret, RPC_ERR_CONFLICT, "only an ask decision can be put to a person");
		return;
	}
	if (d->approval != APPROVAL_NONE) {
		reply_error(ret, RPC_ERR_CONFLICT, "an approval was already requested for this decision");
		return;
	}
	if (strlen(d->commitment) != COMMITMENT_STRLEN || !d->policy_hash[0]) {
		reply_error(ret, RPC_ERR_CONFLICT, "this decision has no argument commitment to bind an approval to");
		return;
	}
	exp = time(NULL) + s->cfg->approval_ttl_s;
	format_ts(exp, 0, expires);
	snprintf(requester, sizeof(requester), "uid:%u", (unsigned)c->uid);
	rules = json_array();
	for (size_t i = 0; rules && i < json_array_size(d->rule_ids) && i < 32; i++) {
		const char *id = json_string_value(json_array_get(d->rule_ids, i));
		if (id && strlen(id) <= 64) {
			(void)json_array_append_new(rules, json_string(id));
		}
	}
	/*
	 * What the approval is bound to (schema approval_request.binding):
	 * the call, its arguments through the decision's own commitment (same
	 * salt, label = decision_id: the signer keeps no arguments, so it can
	 * only re-publish that commitment), the policy that asked, a fresh
	 * nonce and the expiry. binding_digest = sha256(JCS(binding)).
	 */
	if ((r = random_hex(16, nonce, sizeof(nonce))) < 0) {
		json_decref(rules);
		reply_error(ret, RPC_ERR_INTERNAL, "no randomness");
		return;
	}
	binding = json_pack("{s:i,s:s,s:s,s:s,s:s,s:I,s:s,s:s,s:s,s:s,s:s,s:s}", "v", 1, "approval_id", d->approval_id,
			    "tenant", run->tenant, "run_id", run->run_id, "tool_call_id", d->tool_call_id, "attempt",
			    (json_int_t)d->attempt, "tool", d->tool, "args_commitment", d->commitment, "args_source",
			    d->args_source, "policy_hash", d->policy_hash, "nonce", nonce, "expires_at", expires);
	if (!binding || (r = json_jcs_string(binding, (size_t)64 << 10, &bjcs)) < 0 ||
	    (r = sha256(bjcs, strlen(bjcs), bh)) < 0) {
		json_decref(binding);
		json_decref(rules);
		reply_error(ret, RPC_ERR_INTERNAL, "could not build the approval's binding");
		return;
	}
	record_hash_format(bh, bdigest);
	data = json_pack("{s:s,s:s,s:o,s:s,s:s,s:s,s:o,s:s}", "approval_id", d->approval_id, "policy_hash",
			 d->policy_hash, "rule_ids", rules, "expires_at", expires, "requester", requester,
			 "decision_id", d->decision_id, "binding", binding, "binding_digest", bdigest);
	extra = json_pack("{s:s,s:s}", "request_id", req->request_id, "tool_call_id", d->tool_call_id);
	if (extra && d->attempt > 0) {
		(void)json_object_set_new(extra, "attempt", json_integer(d->attempt));
	}
	r = append_record(s, run->tenant, run->run_id, "approval.request", "signer", data, extra, &run_seq);
	if (r < 0) {
		reply_error(ret, RPC_ERR_UNAVAILABLE, "could not sign the approval request: %s", append_strerror(r));
		return;
	}
	ret->body = json_pack("{s:s,s:s,s:I}", "approval_id", d->approval_id, "expires_at", expires, "run_seq",
			      (json_int_t)run_seq);
}

static json_t *approval_json(struct decision *d)
{
	char expires[32];
	json_t *o;

	approval_expires(d, expires);
	o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:O,s:s}", "approval_id", d->approval_id, "state",
		      approval_state_name(d->approval), "run_id", d->run->run_id, "tool", d->tool, "decision_id",
		      d->decision_id, "rule_ids", d->rule_ids, "expires_at", expires);
	if (o && d->reason) {
		(void)json_object_set_new(o, "reason", json_string(d->reason));
	}
	return o;
}

json_t *service_wait_poll(struct service *s, const char *approval_id, bool deadline_passed)
{
	struct decision *d = hmap_get(&s->approvals, approval_id);

	if (!d || d->approval == APPROVAL_NONE) {
		return rpc_error_new(RPC_ERR_UNKNOWN_APPROVAL, "no such approval");
	}
	approval_check_expiry(s, d);
	if (d->approval == APPROVAL_PENDING && !deadline_passed) {
		return NULL;
	}
	return approval_json(d);
}

static void do_approval_wait(struct service *s, const struct rpc_request *req, struct service_reply *ret)
{
	const char *aid;
	int64_t timeout = 30000;
	int r;

	if (json_get_string(req->obj, "approval_id", &aid) < 0) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "approval_id must be a string");
		return;
	}
	r = json_get_int(req->obj, "timeout_ms", &timeout);
	if ((r < 0 && r != -ENOENT) || timeout < 0 || timeout > SERVICE_MAX_WAIT_MS) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "timeout_ms must be 0..%d", SERVICE_MAX_WAIT_MS);
		return;
	}
	ret->body = service_wait_poll(s, aid, timeout == 0);
	if (!ret->body) {
		ret->wait_approval = strdup(aid);
		ret->wait_deadline_ms = service_now_ms() + timeout;
		if (!ret->wait_approval) {
			reply_error(ret, RPC_ERR_INTERNAL, "out of memory");
		}
	}
}

static void do_approval_decide(struct service *s, const struct caller *c, const struct rpc_request *req,
			       struct service_reply *ret)
{
	const char *aid, *verdict, *reason = NULL;
	char approver[32];
	struct decision *d;
	uint64_t run_seq;
	int r;

	if (json_get_string(req->obj, "approval_id", &aid) < 0 || json_get_string(req->obj, "decision", &verdict) < 0 ||
	    (strcmp(verdict, "approve") != 0 && strcmp(verdict, "reject") != 0)) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "approval_id and decision (approve|reject) are required");
		return;
	}
	r = json_get_string(req->obj, "reason", &reason);
	if ((r < 0 && r != -ENOENT) || (reason && strlen(reason) > 1024)) {
		reply_error(
			ret, RPC_ERR_INVALID_REQUEST,
			"reason must be a string of at most 1024 bytes (the schema's bound on an approval's reason)");
		return;
	}
	d = hmap_get(&s->approvals, aid);
	if (!d || d->approval == APPROVAL_NONE) {
		reply_error(ret, RPC_ERR_UNKNOWN_APPROVAL, "no such approval");
		return;
	}
	approval_check_expiry(s, d);
	if (d->approval != APPROVAL_PENDING) {
		reply_error(ret, RPC_ERR_APPROVAL_NOT_PENDING, "approval is %s", approval_state_name(d->approval));
		return;
	}
	if (d->run->closed) {
		reply_error(ret, RPC_ERR_RUN_CLOSED, "run is closed");
		return;
	}
	snprintf(approver, sizeof(approver), "uid:%u", (unsigned)c->uid);
	r = approval_record(s, d, verdict, approver, (int64_t)c->uid, reason, req->request_id, &run_seq);
	if (r < 0) {
		reply_error(ret, RPC_ERR_UNAVAILABLE, "could not sign the approval: %s", append_strerror(r));
		return;
	}
	ret->body = json_pack("{s:s,s:s,s:I,s:b,s:b}", "approval_id", aid, "state", approval_state_name(d->approval),
			      "run_seq", (json_int_t)run_seq, "same_user", c->uid == d->run->uid, "self_approved",
			      c->uid == d->run->uid);
}

static void do_approval_list(struct service *s, struct service_reply *ret)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < s->n_decs; i++) {
		struct decision *d = s->dec_list[i];
		if (d->approval == APPROVAL_PENDING) {
			approval_check_expiry(s, d);
		}
		if (d->approval == APPROVAL_PENDING) {
			(void)json_array_append_new(a, approval_json(d));
		}
	}
	ret->body = json_pack("{s:o}", "approvals", a);
}

static void do_close(struct service *s, const struct caller *c, const struct rpc_request *req,
		     struct service_reply *ret)
{
	const char *reason = "close_run";
	char head[RECORD_HASH_STRLEN + 1];
	uint64_t run_seq, closing_seq;
	struct run *run;
	int r;

	run = run_auth(s, c, req->obj, true, ret);
	if (!run) {
		return;
	}
	r = json_get_string(req->obj, "reason", &reason);
	if ((r < 0 && r != -ENOENT) || strlen(reason) > 4096) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "reason must be a string of at most 4096 bytes");
		return;
	}
	if (r == -ENOENT) {
		reason = "close_run";
	}
	/* The caller's reason in run.end (free text); run.closing's reason is the schema's enum. */
	r = append_record(s, run->tenant, run->run_id, "run.end", "signer", json_pack("{s:s}", "reason", reason),
			  json_pack("{s:s}", "request_id", req->request_id), NULL);
	if (r >= 0) {
		r = append_record(s, run->tenant, run->run_id, "run.closing", "signer",
				  json_pack("{s:s}", "reason", "close_run"), NULL, &closing_seq);
	}
	if (r >= 0) {
		record_hash_format(run->head, head);
		r = append_record(s, run->tenant, run->run_id, "run.final", "signer",
				  json_pack("{s:I,s:s}", "head_run_seq", (json_int_t)closing_seq, "head_hash", head),
				  NULL, &run_seq);
	}
	if (r < 0) {
		reply_error(ret, RPC_ERR_UNAVAILABLE, "could not close the run: %s", append_strerror(r));
		return;
	}
	/* A checkpoint after each run.final, once it is durable. */
	s->cp_want = s->next_seq;
	ret->body = json_pack("{s:s,s:I,s:I}", "state", "closed", "run_seq", (json_int_t)run_seq, "final_seq",
			      (json_int_t)run->last_seq);
}

static void do_export(struct service *s, const struct rpc_request *req, int fd, struct service_reply *ret)
{
	const char *run_id;
	struct run *run;
	_cleanup_free_ char *trust = NULL;
	char *pols[RUN_MAX_POLICIES] = { 0 };
	size_t pol_lens[RUN_MAX_POLICIES] = { 0 };
	size_t n_pols = 0;
	struct buf out = { 0 };
	uint8_t digest[SHA256_LEN];
	char hexd[65], err[256] = "";
	bool want_inline = false;
	int r;

	if (json_get_string(req->obj, "run_id", &run_id) < 0) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "run_id must be a string");
		return;
	}
	r = json_get_bool(req->obj, "inline", &want_inline);
	if (r < 0 && r != -ENOENT) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "inline must be a boolean");
		return;
	}
	run = hmap_get(&s->run_ids, run_id);
	if (!run) {
		reply_error(ret, RPC_ERR_UNKNOWN_RUN, "no run with this id");
		return;
	}
	if (fd >= 0) {
		struct stat st;
		/* A pipe or socket could block the signer's loop: only a regular file is written. */
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
			reply_error(ret, RPC_ERR_INVALID_REQUEST,
				    "the passed fd must be a regular file opened for writing");
			return;
		}
	}
	if (fd < 0 && !want_inline) {
		reply_error(ret, RPC_ERR_INVALID_REQUEST,
			    "pass an fd with the request (SCM_RIGHTS) or set inline:true");
		return;
	}
	if (run->last_seq >= s->durable) {
		reply_error(ret, RPC_ERR_UNAVAILABLE, "the run's last records are not durable yet; retry");
		return;
	}
	if (!s->cp_note || s->cp_size <= run->last_seq) {
		r = sign_checkpoint(s, s->durable);
		if (r < 0) {
			reply_error(ret, RPC_ERR_INTERNAL, "could not sign a checkpoint: %s", strerror(-r));
			return;
		}
	}
	/* The policy snapshots the run's decisions name; the current one when it made none. */
	for (size_t i = 0; i < run->n_policies || (i == 0 && run->n_policies == 0); i++) {
		_cleanup_free_ char *path = NULL;
		const char *h = run->n_policies ? run->policies[i] : s->policy_hash;
		if (asprintf(&path, "%s/policies/%s.json", s->cfg->dir, h + 7) < 0) {
			r = -ENOMEM;
			goto out;
		}
		r = io_read_file(AT_FDCWD, path, (size_t)4 << 20, IO_READ_NOFOLLOW, &pols[n_pols], &pol_lens[n_pols]);
		if (r < 0) {
			snprintf(err, sizeof(err), "policy snapshot %s missing: %s", h, strerror(-r));
			goto out;
		}
		n_pols++;
	}
	if ((r = buf_init(&out, SERVICE_MAX_BUNDLE, 0)) < 0) {
		goto out;
	}
	r = export_bundle(s->reader,
			  &(struct export_input){ .run_key = run->key,
						  .first_seq = run->first_seq,
						  .last_seq = run->last_seq,
						  .key_seqs = s->key_seqs,
						  .n_key_seqs = s->n_key_seqs,
						  .checkpoint_note = s->cp_note,
						  .checkpoint_size = s->cp_size,
						  .tree = s->tree,
						  .policies = (const char *const *)pols,
						  .policy_lens = pol_lens,
						  .n_policies = n_pols },
			  &out, err, sizeof(err));
	if (r < 0) {
		goto out;
	}
	if ((r = sha256(buf_ptr(&out), buf_len(&out), digest)) < 0 ||
	    (r = hex_string(digest, 32, hexd, sizeof(hexd))) < 0 ||
	    (r = signer_trust_json(s->cfg, s->keys, &trust)) < 0) {
		goto out;
	}
	ret->body =
		json_pack("{s:s,s:I,s:s,s:I,s:s,s:b}", "run_id", run_id, "size", (json_int_t)buf_len(&out), "sha256",
			  hexd, "tree_size", (json_int_t)s->cp_size, "trust", trust, "closed", run->closed);
	if (fd >= 0) {
		r = io_write_all(fd, buf_ptr(&out), buf_len(&out));
		if (r < 0) {
			snprintf(err, sizeof(err), "writing the bundle to the passed fd: %s", strerror(-r));
			goto out;
		}
	} else {
		struct buf b64 = { 0 };
		char *s64 = NULL;
		if (buf_len(&out) > SERVICE_MAX_INLINE_EXPORT) {
			r = -E2BIG;
			snprintf(err, sizeof(err), "bundle over 8 MiB: pass an fd instead of inline");
			goto out;
		}
		if ((r = buf_init(&b64, SERVICE_MAX_INLINE_EXPORT * 2, 0)) >= 0 &&
		    (r = b64_encode(buf_ptr(&out), buf_len(&out), B64_STD, &b64)) >= 0 &&
		    (r = buf_dup_cstring(&b64, &s64)) >= 0) {
			(void)json_object_set_new(ret->body, "bundle_b64", json_string(s64));
			free(s64);
		}
		buf_release(&b64);
		if (r < 0) {
			goto out;
		}
	}
	r = 0;
out:
	for (size_t i = 0; i < n_pols; i++) {
		free(pols[i]);
	}
	buf_release(&out);
	if (r < 0) {
		if (ret->body) {
			json_decref(ret->body);
			ret->body = NULL;
		}
		reply_error(ret, RPC_ERR_INTERNAL, "export failed: %s", err[0] ? err : strerror(-r));
	}
}

static void do_status(struct service *s, const struct caller *c, struct service_reply *ret)
{
	ret->body = json_pack("{s:s,s:i,s:I,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:s,s:I}", "version", TKBOX_VERSION, "proto",
			      RPC_PROTO_VERSION, "pid", (json_int_t)getpid(), "mode",
			      s->cfg->mode == SIGNER_MODE_DEV ? "dev" : "system", "log_id", s->cfg->log_id, "origin",
			      s->cfg->origin, "records", (json_int_t)s->next_seq, "durable", (json_int_t)s->durable,
			      "checkpoint_size", (json_int_t)s->cp_size, "runs_open", (json_int_t)s->n_open,
			      "isolation", isolation_of(s, c), "uptime_s", (json_int_t)(time(NULL) - s->started));
}

static void do_nudge(struct service *s, struct service_reply *ret)
{
	int r = sign_checkpoint(s, s->durable);
	if (r < 0) {
		reply_error(ret, RPC_ERR_INTERNAL, "could not sign a checkpoint: %s", strerror(-r));
		return;
	}
	ret->body = json_pack("{s:I}", "tree_size", (json_int_t)s->cp_size);
}

static int request_digest(const json_t *obj, uint8_t out[SHA256_LEN])
{
	struct buf b = { 0 };
	int r;

	if ((r = buf_init(&b, RPC_MAX_FRAME * 2, 0)) < 0) {
		return r;
	}
	if ((r = json_write_jcs(obj, &b)) >= 0) {
		r = sha256(buf_ptr(&b), buf_len(&b), out);
	}
	buf_release(&b);
	return r;
}

/*
 * A retry of a request whose reply is no longer in memory (reqs_trim): true
 * when the store has it, with *ret answered (the first reply, or a conflict).
 */
static bool replay_stored(struct service *s, const char *rkey, const uint8_t digest[SHA256_LEN],
			  struct service_reply *ret)
{
	_cleanup_free_ char *resp = NULL;
	uint8_t stored[SHA256_LEN];
	int r = store_get_request(s->reader, rkey, stored, &resp);

	if (r == -ENOENT) {
		return false;
	}
	if (r < 0) {
		reply_error(ret, RPC_ERR_UNAVAILABLE, "could not read the record store (%s): retry", strerror(-r));
		return true;
	}
	if (!crypto_equal(stored, digest, SHA256_LEN)) {
		reply_error(ret, RPC_ERR_CONFLICT, "request_id reused with a different payload");
		return true;
	}
	ret->body = json_loads(resp, 0, NULL);
	ret->need = s->next_seq;
	return true;
}

void service_handle(struct service *s, const struct caller *c, const struct rpc_request *req, int fd,
		    struct service_reply *ret)
{
	uint8_t digest[SHA256_LEN];
	_cleanup_free_ char *rkey = NULL;
	uint64_t before = s->next_seq;
	struct req *q = NULL;

	*ret = (struct service_reply){ 0 };
	if (!role_allows(s, c, req->method, ret)) {
		return;
	}
	if (req->request_id) {
		if (asprintf(&rkey, "%u:%s", (unsigned)c->uid, req->request_id) < 0 ||
		    request_digest(req->obj, digest) < 0) {
			reply_error(ret, RPC_ERR_INTERNAL, "out of memory");
			return;
		}
		q = hmap_get(&s->requests, rkey);
		if (q || (s->reqs_dropped && replay_stored(s, rkey, digest, ret))) {
			/* A retry: the same payload replays the original answer, a different one is a conflict. */
			if (q && !crypto_equal(q->digest, digest, SHA256_LEN)) {
				reply_error(ret, RPC_ERR_CONFLICT, "request_id reused with a different payload");
				return;
			}
			if (q) {
				ret->body = json_loads(q->response, 0, NULL);
				ret->need = MAX(q->need, s->next_seq);
			}
			if (!ret->body) {
				reply_error(ret, RPC_ERR_INTERNAL, "stored reply unreadable");
			}
			return;
		}
	}
	switch (req->method) {
	case RPC_HELLO:
		do_hello(s, c, req, ret);
		break;
	case RPC_REGISTER_RUN:
		do_register(s, c, req, ret);
		break;
	case RPC_DECIDE:
		do_decide(s, c, req, ret);
		break;
	case RPC_COMPLETE:
		do_complete(s, c, req, ret);
		break;
	case RPC_OBSERVE:
		do_observe(s, c, req, ret);
		break;
	case RPC_APPROVAL_REQUEST:
		do_approval_request(s, c, req, ret);
		break;
	case RPC_APPROVAL_WAIT:
		do_approval_wait(s, req, ret);
		break;
	case RPC_APPROVAL_DECIDE:
		do_approval_decide(s, c, req, ret);
		break;
	case RPC_APPROVAL_LIST:
		do_approval_list(s, ret);
		break;
	case RPC_CLOSE_RUN:
		do_close(s, c, req, ret);
		break;
	case RPC_EXPORT:
		do_export(s, req, fd, ret);
		break;
	case RPC_CHECKPOINT_NUDGE:
		do_nudge(s, ret);
		break;
	case RPC_STATUS:
		do_status(s, c, ret);
		break;
	case RPC_METHOD_MAX:
	default:
		reply_error(ret, RPC_ERR_INVALID_REQUEST, "unknown method");
		break;
	}
	if (!ret->body && !ret->wait_approval) {
		reply_error(ret, RPC_ERR_INTERNAL, "out of memory");
	}
	/*
	 * Every reply waits until everything assigned so far is durable, not only
	 * its own records: a reply must never reveal state (a run, an approval)
	 * that a crash could still take back.
	 */
	ret->need = s->next_seq;
	/* Remember a successful state-changing answer for retries, in the same commit as its records. */
	if (rkey && ret->body && !json_object_get(ret->body, "error") && s->next_seq != before) {
		struct store_item it = { .kind = STORE_ITEM_REQUEST };
		char *resp = NULL;
		q = calloc(1, sizeof(*q));
		if (json_jcs_string(ret->body, RPC_MAX_FRAME, &resp) < 0 || !q) {
			free(resp);
			free(q);
			return;
		}
		q->key = steal_ptr(rkey);
		memcpy(q->digest, digest, SHA256_LEN);
		q->response = resp;
		q->need = s->next_seq;
		it.key = strdup(q->key);
		it.text = strdup(resp);
		memcpy(it.digest, digest, SHA256_LEN);
		if (!it.key || !it.text || hmap_put(&s->requests, q->key, q) < 0) {
			store_item_release(&it);
			req_free(q);
			return;
		}
		if (list_push((void ***)&s->req_list, &s->n_reqs, q) < 0 || push_item(s, &it) < 0) {
			store_item_release(&it);
		}
		reqs_trim(s);
	}
}
