/* SPDX-License-Identifier: Apache-2.0 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "banned.h"
#include "crypto.h"
#include "json.h"
#include "log.h"
#include "verify/bundle.h"
#include "verify/merkle.h"
#include "verify/note.h"
#include "verify/record.h"
#include "verify/schema.h"
#include "verify/trust.h"
#include "verify/verify.h"

#define MAX_KEYS 64
/* Distinct policies one run may cite (tkbox-signer keeps at most 16 per run). */
#define MAX_POLICIES 64
#define MAX_DETAIL 600

static const uint8_t ZERO_HASH[SHA256_LEN] = { 0 };

struct key_state {
	uint8_t pub[ED25519_PUB_LEN];
	char kid[RECORD_HASH_STRLEN + 1];
	int64_t from_seq;
	int64_t last_seq; /* -1: not retired */
};

struct vstate {
	struct verify_report *rep;
	struct trust trust;
	struct bundle *b;
	json_t *files; /* manifest "files" (borrowed from manifest) */
	json_t *manifest;
	json_t *inclusion; /* proofs "inclusion" (borrowed from proofs) */
	json_t *proofs;
	int64_t tree_size;
	bool cp_ok;
	struct checkpoint cp;
	struct note_opened opened;
	struct key_state keys[MAX_KEYS];
	size_t n_keys;
	char *log_id;
	const struct bundle_entry *run_entry;
	const struct bundle_entry *keys_entry;
	const struct bundle_entry *proofs_entry;
	struct record *run;
	size_t n_run;
	bool have_final;
	bool self_approval;
	bool oom;
};

/*
 * An untrusted string for a detail: as is when it is short printable ASCII
 * without spaces or quotes, else quoted, escaped and capped by log_quote.
 */
static const char *safe_str(const char *s, char out[LOG_QUOTE_BUFSIZE])
{
	size_t n = strlen(s);
	bool plain = n > 0 && n <= 200;

	for (size_t i = 0; plain && i < n; i++) {
		plain = s[i] > 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\';
	}
	return plain ? s : log_quote(s, n, out);
}
#define Q(s) safe_str((s), (char[LOG_QUOTE_BUFSIZE]){ 0 })

static void add_check(struct vstate *st, const char *name, enum check_status status, const char *fmt, ...)
	_printf_(4, 5);

static void add_check(struct vstate *st, const char *name, enum check_status status, const char *fmt, ...)
{
	struct verify_report *rep = st->rep;
	char detail[MAX_DETAIL];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	if (status == CHECK_FAIL) {
		rep->failures++;
	} else if (status == CHECK_WARN) {
		rep->warnings++;
	}
	if (rep->n_checks >= VERIFY_MAX_CHECKS) {
		/* The list of lines is closed and short; running out means a bug, but fail rather than drop a FAIL. */
		rep->checks[VERIFY_MAX_CHECKS - 1].status = CHECK_FAIL;
		return;
	}
	rep->checks[rep->n_checks].name = name;
	rep->checks[rep->n_checks].status = status;
	rep->checks[rep->n_checks].detail = strdup(detail);
	if (!rep->checks[rep->n_checks].detail) {
		st->oom = true;
	}
	rep->n_checks++;
}

static void set_str(struct vstate *st, char **dst, const char *fmt, ...) _printf_(3, 4);

static void set_str(struct vstate *st, char **dst, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0) {
		s = NULL;
		st->oom = true;
	}
	va_end(ap);
	free(*dst);
	*dst = s;
}

static bool is_hex(const char *s, size_t want)
{
	size_t n = strlen(s);

	if (n != want) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) {
			return false;
		}
	}
	return true;
}

static bool is_digits(const char *s, size_t n)
{
	if (n == 0 || n > 18 || (n > 1 && s[0] == '0')) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9') {
			return false;
		}
	}
	return true;
}

/* name == prefix + <digits> + suffix */
static bool name_digits(const char *name, const char *prefix, const char *suffix, uint64_t *ret)
{
	size_t pl = strlen(prefix), sl = strlen(suffix), n = strlen(name);

	if (n <= pl + sl || strncmp(name, prefix, pl) != 0 || strcmp(name + n - sl, suffix) != 0 ||
	    !is_digits(name + pl, n - pl - sl)) {
		return false;
	}
	if (ret) {
		*ret = strtoull(name + pl, NULL, 10);
	}
	return true;
}

static bool name_hex(const char *name, const char *prefix, const char *suffix, size_t hexlen)
{
	size_t pl = strlen(prefix), sl = strlen(suffix), n = strlen(name);
	char tmp[80];

	if (n != pl + hexlen + sl || hexlen >= sizeof(tmp) || strncmp(name, prefix, pl) != 0 ||
	    strcmp(name + n - sl, suffix) != 0) {
		return false;
	}
	memcpy(tmp, name + pl, hexlen);
	tmp[hexlen] = '\0';
	return is_hex(tmp, hexlen);
}

/* ---- manifest ---------------------------------------------------------------------------------------------------- */

static int parse_version(const char *s, unsigned v[3])
{
	const char *p = s;

	for (size_t i = 0; i < 3; i++) {
		const char *start = p;
		unsigned long x = 0;

		while (*p >= '0' && *p <= '9' && p - start < 6) {
			x = x * 10 + (unsigned long)(*p - '0');
			p++;
		}
		if (p == start || (p - start > 1 && *start == '0')) {
			return -EBADMSG;
		}
		v[i] = (unsigned)x;
		if (i < 2) {
			if (*p != '.') {
				return -EBADMSG;
			}
			p++;
		}
	}
	return *p == '\0' ? 0 : -EBADMSG;
}

/* Returns 0 to go on, 2 for an unusable or unverifiable bundle (the verdict is set). */
static int read_manifest(struct vstate *st)
{
	static const char *const keys[] = { "format", "verifier_min_version", "files", NULL };
	struct json_opts opts = { .max_bytes = BUNDLE_MAX_ENTRY_SIZE, .max_depth = 0, .want_top = JSON_OBJECT };
	const struct bundle_entry *m = bundle_find(st->b, "manifest.json");
	const char *format, *ver, *name;
	unsigned have[3], want[3];
	json_t *v;

	if (!m) {
		add_check(st, "bundle readable", CHECK_FAIL, "no manifest.json in the bundle");
		set_str(st, &st->rep->integrity, "UNUSABLE BUNDLE");
		return 2;
	}
	if (json_parse_strict(m->data, m->size, &opts, &st->manifest) < 0) {
		add_check(st, "bundle readable", CHECK_FAIL, "manifest.json is not one strict JSON object");
		set_str(st, &st->rep->integrity, "UNUSABLE BUNDLE");
		return 2;
	}
	if (json_only_keys(st->manifest, keys) < 0 || json_get_string(st->manifest, "format", &format) < 0 ||
	    json_get_string(st->manifest, "verifier_min_version", &ver) < 0 ||
	    json_get_object(st->manifest, "files", &st->files) < 0) {
		add_check(st, "bundle readable", CHECK_FAIL,
			  "manifest.json is not {format, verifier_min_version, files}");
		set_str(st, &st->rep->integrity, "UNUSABLE BUNDLE");
		return 2;
	}
	if (strcmp(format, "tracekit.bundle.v2") != 0) {
		add_check(st, "bundle readable", CHECK_FAIL, "format is %s, not tracekit.bundle.v2", Q(format));
		set_str(st, &st->rep->integrity, "UNUSABLE BUNDLE");
		return 2;
	}
	if (parse_version(ver, want) < 0 || parse_version(VERIFY_COMPAT_VERSION, have) < 0) {
		add_check(st, "bundle readable", CHECK_FAIL, "verifier_min_version %s is not a version number", Q(ver));
		set_str(st, &st->rep->integrity, "UNUSABLE BUNDLE");
		return 2;
	}
	if (want[0] > have[0] ||
	    (want[0] == have[0] && (want[1] > have[1] || (want[1] == have[1] && want[2] > have[2])))) {
		add_check(st, "bundle readable", CHECK_FAIL, "the bundle needs verifier %u.%u.%u; this one follows %s",
			  want[0], want[1], want[2], VERIFY_COMPAT_VERSION);
		if (want[2] == 0) {
			set_str(st, &st->rep->integrity, "UNVERIFIABLE (needs tracekit >= %u.%u)", want[0], want[1]);
		} else {
			set_str(st, &st->rep->integrity, "UNVERIFIABLE (needs tracekit >= %u.%u.%u)", want[0], want[1],
				want[2]);
		}
		return 2;
	}
	json_object_foreach(st->files, name, v) {
		if (!json_is_string(v) || !is_hex(json_string_value(v), 2 * SHA256_LEN)) {
			add_check(st, "bundle readable", CHECK_FAIL,
				  "manifest.json files must map names to SHA-256 hex");
			set_str(st, &st->rep->integrity, "UNUSABLE BUNDLE");
			return 2;
		}
	}
	return 0;
}

static void check_manifest(struct vstate *st)
{
	size_t listed = json_object_size(st->files), present = 0, problems = 0;
	char first[MAX_DETAIL] = "";

	for (size_t i = 0; i < st->b->n; i++) {
		const struct bundle_entry *e = &st->b->e[i];
		char hex[2 * SHA256_LEN + 1];
		json_t *v;

		if (strcmp(e->name, "manifest.json") == 0) {
			continue;
		}
		present++;
		v = json_object_get(st->files, e->name);
		if (!v) {
			if (problems++ == 0) {
				snprintf(first, sizeof(first), "%s is in the bundle but not in the manifest", e->name);
			}
			continue;
		}
		/* A hash that cannot be computed counts as a mismatch: fail closed. */
		if ((sha256_hex(e->data, e->size, hex) < 0 || strcmp(hex, json_string_value(v)) != 0) &&
		    problems++ == 0) {
			snprintf(first, sizeof(first), "%s does not hash as the manifest lists it", e->name);
		}
	}
	if (json_object_get(st->files, "manifest.json") && problems++ == 0) {
		snprintf(first, sizeof(first), "the manifest lists itself");
	}
	if (listed != present + (json_object_get(st->files, "manifest.json") ? 1 : 0) && problems++ == 0) {
		snprintf(first, sizeof(first), "the manifest lists %zu file(s) the bundle does not hold",
			 listed - MIN(listed, present));
	}
	if (problems) {
		add_check(st, "manifest", CHECK_FAIL, "%s%s", first, problems > 1 ? " (and more)" : "");
	} else {
		add_check(st, "manifest", CHECK_PASS,
			  "every file is listed with its SHA-256 and nothing else is in the bundle");
	}
}

/* ---- layout and proofs --------------------------------------------------------------------------------------------- */

/* Returns false when the bundle's shape does not allow the run checks. */
static bool check_layout(struct vstate *st)
{
	size_t runs = 0;
	bool runset = false;

	for (size_t i = 0; i < st->b->n; i++) {
		const char *n = st->b->e[i].name;

		if (strcmp(n, "manifest.json") == 0 || strcmp(n, "keys/records.jsonl") == 0 ||
		    strcmp(n, "proofs/records.json") == 0 || name_digits(n, "checkpoints/", ".note", NULL) ||
		    name_digits(n, "rekor/", ".json", NULL) || name_digits(n, "tsa/", ".tsr", NULL) ||
		    (strncmp(n, "policies/", 9) == 0 && strchr(n + 9, '/') == NULL && strlen(n) > 14 &&
		     strcmp(n + strlen(n) - 5, ".json") == 0)) {
			continue;
		}
		if (name_hex(n, "runs/", ".jsonl", 32)) {
			runs++;
			st->run_entry = &st->b->e[i];
			continue;
		}
		if (strncmp(n, "registry/", 9) == 0 || name_digits(n, "checkpoints/registry-", ".note", NULL)) {
			runset = true;
			continue;
		}
		add_check(st, "bundle structure", CHECK_FAIL, "unexpected member %s", n);
		return false;
	}
	if (runset) {
		add_check(st, "run-set", CHECK_FAIL, "run-set bundles are not supported by tkbox verify");
		return false;
	}
	if (runs != 1) {
		add_check(st, "bundle structure", CHECK_FAIL,
			  "%zu run files in a bundle without a run-set (exactly one needed)", runs);
		st->run_entry = NULL;
		return false;
	}
	st->keys_entry = bundle_find(st->b, "keys/records.jsonl");
	st->proofs_entry = bundle_find(st->b, "proofs/records.json");
	if (!st->keys_entry || !st->proofs_entry) {
		add_check(st, "bundle structure", CHECK_FAIL, "%s is missing",
			  st->keys_entry ? "proofs/records.json" : "keys/records.jsonl");
		return false;
	}
	return true;
}

static bool read_proofs(struct vstate *st)
{
	static const char *const keys[] = { "checkpoint", "tree_size", "inclusion", NULL };
	struct json_opts opts = { .max_bytes = BUNDLE_MAX_ENTRY_SIZE, .max_depth = 0, .want_top = JSON_OBJECT };
	const char *seq;
	json_t *v;

	if (json_parse_strict(st->proofs_entry->data, st->proofs_entry->size, &opts, &st->proofs) < 0 ||
	    json_only_keys(st->proofs, keys) < 0 || json_get_int(st->proofs, "tree_size", &st->tree_size) < 0 ||
	    st->tree_size < 0 || json_get_object(st->proofs, "inclusion", &st->inclusion) < 0 ||
	    !json_is_string(json_object_get(st->proofs, "checkpoint"))) {
		add_check(st, "bundle structure", CHECK_FAIL,
			  "proofs/records.json is not {checkpoint, tree_size, inclusion} in strict JSON");
		return false;
	}
	json_object_foreach(st->inclusion, seq, v) {
		json_t *h;
		size_t i;

		if (!is_digits(seq, strlen(seq)) || !json_is_array(v) || json_array_size(v) > MERKLE_MAX_PROOF) {
			add_check(st, "bundle structure", CHECK_FAIL,
				  "proofs/records.json has a malformed inclusion proof");
			return false;
		}
		json_array_foreach(v, i, h) {
			if (!json_is_string(h) || json_string_length(h) != 44) {
				add_check(st, "bundle structure", CHECK_FAIL,
					  "proofs/records.json has a malformed inclusion proof");
				return false;
			}
		}
	}
	return true;
}

/* 0: included; -ENOENT: no proof; -EBADMSG: the proof does not hold. */
static int included(struct vstate *st, int64_t seq, const uint8_t hash[SHA256_LEN])
{
	struct merkle_proof proof = { .len = 0 };
	uint8_t leaf[MERKLE_HASH_LEN];
	char key[24];
	json_t *arr, *h;
	size_t i;

	if (!st->cp_ok) {
		return -EBADMSG;
	}
	snprintf(key, sizeof(key), "%" PRId64, seq);
	arr = json_object_get(st->inclusion, key);
	if (!arr) {
		return -ENOENT;
	}
	json_array_foreach(arr, i, h) {
		struct buf raw = { 0 };
		int r = buf_init(&raw, 64, 0);

		if (r >= 0) {
			r = b64_decode(json_string_value(h), json_string_length(h), B64_STD, &raw);
		}
		if (r < 0 || buf_len(&raw) != MERKLE_HASH_LEN) {
			buf_release(&raw);
			return -EBADMSG;
		}
		memcpy(proof.hash[proof.len++], buf_ptr(&raw), MERKLE_HASH_LEN);
		buf_release(&raw);
	}
	if (merkle_leaf_hash(hash, SHA256_LEN, leaf) < 0) {
		return -EBADMSG;
	}
	return merkle_inclusion_verify((uint64_t)seq, (uint64_t)st->tree_size, leaf, &proof, st->cp.root);
}

static void fmt_time(uint64_t t, char out[32])
{
	struct tm tm;
	time_t tt = (time_t)MIN(t, (uint64_t)INT32_MAX * 64);

	if (!gmtime_r(&tt, &tm) || strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) {
		snprintf(out, 32, "%" PRIu64, t);
	}
}

static void check_checkpoint(struct vstate *st)
{
	const char *cname = json_string_value(json_object_get(st->proofs, "checkpoint"));
	const struct bundle_entry *note;
	size_t nk = st->trust.n_logs + st->trust.n_witnesses, wit = 0;
	uint64_t name_size = 0;
	int r;

	if (!name_digits(cname, "checkpoints/", ".note", &name_size) || !(note = bundle_find(st->b, cname))) {
		add_check(st, "checkpoint", CHECK_FAIL, "proofs/records.json names no checkpoint note in the bundle");
		return;
	}
	r = checkpoint_open(note->data, note->size, st->trust.keys, nk, &st->cp, &st->opened);
	if (r < 0) {
		switch (r) {
		case -EKEYREJECTED:
			add_check(
				st, "checkpoint", CHECK_FAIL,
				"%s is not signed by a pinned log key named after its origin, or a pinned signature is "
				"bad",
				cname);
			break;
		case -ENOKEY:
			add_check(st, "checkpoint", CHECK_FAIL, "no pinned key signed %s", cname);
			break;
		default:
			add_check(st, "checkpoint", CHECK_FAIL, "%s is not a well-formed checkpoint note", cname);
			break;
		}
	} else if (st->cp.size != (uint64_t)st->tree_size || name_size != st->cp.size) {
		add_check(st, "checkpoint", CHECK_FAIL,
			  "the note is of tree size %" PRIu64 ", proofs/records.json says %" PRId64, st->cp.size,
			  st->tree_size);
	} else {
		st->cp_ok = true;
		add_check(st, "checkpoint", CHECK_PASS, "%s at tree size %" PRIu64 ", signed by its pinned log key",
			  Q(st->cp.origin), st->cp.size);
	}
	for (size_t i = 0; st->cp_ok && i < st->trust.n_witnesses; i++) {
		wit += st->opened.verified[st->trust.n_logs + i];
	}
	if ((int64_t)wit >= st->trust.witnesses_required && (st->cp_ok || st->trust.witnesses_required == 0)) {
		add_check(st, "witness quorum", CHECK_PASS, "%zu pinned cosignature(s), %" PRId64 " required", wit,
			  st->trust.witnesses_required);
	} else {
		add_check(st, "witness quorum", CHECK_FAIL, "%zu pinned cosignature(s), %" PRId64 " required", wit,
			  st->trust.witnesses_required);
	}
	if (st->trust.has_rekor && st->cp_ok) {
		char rname[48];

		snprintf(rname, sizeof(rname), "rekor/%" PRIu64 ".json", st->cp.size);
		if (bundle_find(st->b, rname)) {
			add_check(st, "rekor anchor", CHECK_WARN,
				  "%s is present but tkbox verify does not check Rekor anchors; not counted", rname);
		}
	}
}

/*
 * The event against Tracekit's event schema v2 (schema.c: the top level and
 * the data of every type, one table), then what the schema says in words
 * about approval.request's binding_digest. false with the first problem in
 * why.
 */
static bool event_valid(const json_t *ev, char why[EVENT_SCHEMA_WHY_MAX])
{
	int r = event_schema_check(ev, why, EVENT_SCHEMA_WHY_MAX);

	if (r >= 0) {
		r = event_binding_check(ev, why, EVENT_SCHEMA_WHY_MAX);
	}
	if (r == -ENOMEM) {
		snprintf(why, EVENT_SCHEMA_WHY_MAX, "out of memory checking the event");
	}
	return r >= 0;
}

/* ---- keys ---------------------------------------------------------------------------------------------------------- */

static struct key_state *key_find(struct vstate *st, const char *kid)
{
	for (size_t i = 0; i < st->n_keys; i++) {
		if (strcmp(st->keys[i].kid, kid) == 0) {
			return &st->keys[i];
		}
	}
	return NULL;
}

/* 0, or a static reason why no key valid at seq signed the record. */
static const char *verify_under_keys(struct vstate *st, const struct record *r)
{
	struct key_state *k = key_find(st, r->kid_str);

	if (!k) {
		return "signed by a key no signer.epoch declared";
	}
	if (r->seq < k->from_seq) {
		return "signed by a key before its signer.epoch";
	}
	if (k->last_seq >= 0 && r->seq > k->last_seq) {
		return "signed by a key after its key.retire";
	}
	if (record_verify_sig(r, k->pub) < 0) {
		return "bad signature";
	}
	return NULL;
}

static void free_records(struct record *recs, size_t n);

/*
 * fn(ctx, i) for every i < n, on workers (one per online CPU, the calling
 * thread one of them) that take chunks from a shared counter. fn writes only
 * slot i of its own output, so callers read the results in order afterwards
 * and report exactly what a sequential loop would. Workers only read shared
 * state: jansson (atomic refcounts) and OpenSSL's EVP calls are thread-safe
 * for that.
 */
#define PAR_CHUNK 8
#define PAR_MAX_THREADS 64
#define PAR_MIN_PARALLEL 2

struct par_work {
	void (*fn)(void *ctx, size_t i);
	void *ctx;
	size_t n;
	size_t next; /* atomic */
};

static void *par_worker(void *arg)
{
	struct par_work *w = arg;

	for (;;) {
		size_t i0 = __atomic_fetch_add(&w->next, PAR_CHUNK, __ATOMIC_RELAXED);

		if (i0 >= w->n) {
			return NULL;
		}
		for (size_t i = i0; i < i0 + PAR_CHUNK && i < w->n; i++) {
			w->fn(w->ctx, i);
		}
	}
}

static void par_for(size_t n, void (*fn)(void *ctx, size_t i), void *ctx)
{
	struct par_work w = { .fn = fn, .ctx = ctx, .n = n, .next = 0 };
	pthread_t tids[PAR_MAX_THREADS];
	size_t started = 0, want = 1;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

	if (ncpu > 1 && n >= PAR_MIN_PARALLEL) {
		want = ncpu > PAR_MAX_THREADS ? PAR_MAX_THREADS : (size_t)ncpu;
	}
	/* A thread that cannot start leaves its share to the others. */
	for (size_t t = 1; t < want; t++) {
		if (pthread_create(&tids[started], NULL, par_worker, &w) != 0) {
			break;
		}
		started++;
	}
	par_worker(&w);
	for (size_t t = 0; t < started; t++) {
		pthread_join(tids[t], NULL);
	}
}

/* Each line's record parsed in its own slot (lines and rcs are the slots' inputs and results). */
struct parse_work {
	const struct bundle_line *lines;
	struct record *recs;
	int *rcs;
};

static void parse_one(void *ctx, size_t i)
{
	struct parse_work *w = ctx;

	w->rcs[i] = record_parse(w->lines[i].p, w->lines[i].n, &w->recs[i]);
}

static int parse_lines(struct vstate *st, const struct bundle_entry *e, struct record **ret, size_t *ret_n,
		       const char **why, size_t *bad_line)
{
	struct bundle_line *lines = NULL;
	struct record *recs;
	size_t n = 0;
	int *rcs, r;

	r = bundle_lines(e->data, e->size, &lines, &n, why);
	if (r < 0) {
		*bad_line = 0;
		return r;
	}
	recs = calloc(n ? n : 1, sizeof(*recs));
	rcs = calloc(n ? n : 1, sizeof(*rcs));
	if (!recs || !rcs) {
		free(recs);
		free(rcs);
		free(lines);
		st->oom = true;
		return -ENOMEM;
	}
	par_for(n, parse_one, &(struct parse_work){ .lines = lines, .recs = recs, .rcs = rcs });
	/* The first bad line in order, as a sequential parse would stop at. */
	for (size_t i = 0; i < n; i++) {
		if (rcs[i] < 0) {
			r = rcs[i];
			free_records(recs, n);
			free(rcs);
			free(lines);
			*bad_line = i + 1;
			*why = r == -EPROTONOSUPPORT ? "alg is not ed25519" : "not a strict v2 record line";
			return r;
		}
	}
	free(rcs);
	free(lines);
	*ret = recs;
	*ret_n = n;
	return 0;
}

static void free_records(struct record *recs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		record_release(&recs[i]);
	}
	free(recs);
}

static bool check_keys(struct vstate *st)
{
	struct record *recs = NULL;
	size_t n = 0, bad = 0;
	const char *why = NULL;
	char problem[MAX_DETAIL] = "";
	int r;

	r = parse_lines(st, st->keys_entry, &recs, &n, &why, &bad);
	if (r < 0) {
		if (r == -EPROTONOSUPPORT) {
			add_check(st, "keys", CHECK_FAIL, "keys/records.jsonl line %zu: %s (algorithm confusion)", bad,
				  why);
		} else {
			add_check(st, "bundle structure", CHECK_FAIL, "keys/records.jsonl line %zu: %s", bad,
				  why ? why : "unreadable");
		}
		return false;
	}
	if (n == 0) {
		add_check(st, "keys", CHECK_FAIL, "keys/records.jsonl holds no key record");
		free_records(recs, n);
		return false;
	}
	for (size_t i = 0; i < n && !problem[0]; i++) {
		struct record *k = &recs[i];
		json_t *data = json_object_get(k->event, "data"), *arr, *item;
		const char *fail;
		size_t j;

		if (!k->type || (strcmp(k->type, "signer.epoch") != 0 && strcmp(k->type, "key.retire") != 0)) {
			snprintf(problem, sizeof(problem),
				 "key record at seq %" PRId64 " is not a signer.epoch or key.retire", k->seq);
			break;
		}
		if (i > 0 && k->seq <= recs[i - 1].seq) {
			snprintf(problem, sizeof(problem), "key records are not in increasing seq (seq %" PRId64 ")",
				 k->seq);
			break;
		}
		if (!st->log_id) {
			st->log_id = strdup(k->log_id);
			if (!st->log_id) {
				st->oom = true;
				break;
			}
		} else if (strcmp(st->log_id, k->log_id) != 0) {
			snprintf(problem, sizeof(problem), "key record at seq %" PRId64 " is of another log", k->seq);
			break;
		}
		if (record_check_hash(k) < 0) {
			snprintf(problem, sizeof(problem),
				 "key record at seq %" PRId64 ": hash does not match its event", k->seq);
			break;
		}
		if (k->seq >= st->tree_size || included(st, k->seq, k->hash) < 0) {
			snprintf(problem, sizeof(problem),
				 "key record at seq %" PRId64 " is not proven in the checkpointed tree", k->seq);
			break;
		}
		if (!json_is_object(data)) {
			snprintf(problem, sizeof(problem), "key record at seq %" PRId64 " has no data", k->seq);
			break;
		}
		{
			char ewhy[EVENT_SCHEMA_WHY_MAX] = "";

			if (!event_valid(k->event, ewhy)) {
				snprintf(problem, sizeof(problem),
					 "key record at seq %" PRId64 ": event is not a valid tracekit.event.v2 (%s)",
					 k->seq, ewhy);
				break;
			}
		}
		if (strcmp(k->type, "signer.epoch") == 0) {
			if (json_get_array(data, "keys", &arr) < 0 || json_array_size(arr) == 0 ||
			    json_array_size(arr) > 16) {
				snprintf(problem, sizeof(problem), "signer.epoch at seq %" PRId64 " declares no keys",
					 k->seq);
				break;
			}
			json_array_foreach(arr, j, item) {
				static const char *const ikeys[] = { "kid", "alg", "spki", NULL };
				const char *kid, *alg, *spki;
				struct key_state ks = { .from_seq = k->seq, .last_seq = -1 };

				if (!json_is_object(item) || json_only_keys(item, ikeys) < 0 ||
				    json_get_string(item, "kid", &kid) < 0 || json_get_string(item, "alg", &alg) < 0 ||
				    json_get_string(item, "spki", &spki) < 0) {
					snprintf(problem, sizeof(problem),
						 "signer.epoch at seq %" PRId64
						 ": a key is not {kid, alg, spki} (certified keys are "
						 "not supported)",
						 k->seq);
					break;
				}
				if (strcmp(alg, "ed25519") != 0 ||
				    record_spki_b64_decode(spki, strlen(spki), ks.pub) < 0) {
					snprintf(problem, sizeof(problem),
						 "signer.epoch at seq %" PRId64 ": alg %s does not match its SPKI",
						 k->seq, Q(alg));
					break;
				}
				if (record_kid(ks.pub, ks.kid) < 0 || strcmp(ks.kid, kid) != 0) {
					snprintf(problem, sizeof(problem),
						 "signer.epoch at seq %" PRId64 ": kid does not match its SPKI",
						 k->seq);
					break;
				}
				if (key_find(st, kid)) {
					snprintf(problem, sizeof(problem),
						 "signer.epoch at seq %" PRId64 " declares a key twice", k->seq);
					break;
				}
				if (st->n_keys >= MAX_KEYS) {
					snprintf(problem, sizeof(problem), "more than %d record keys", MAX_KEYS);
					break;
				}
				st->keys[st->n_keys++] = ks;
			}
			if (problem[0]) {
				break;
			}
			fail = verify_under_keys(st, k);
			if (fail) {
				snprintf(problem, sizeof(problem), "signer.epoch at seq %" PRId64 ": %s", k->seq, fail);
			}
		} else {
			const char *kid;
			int64_t last;
			struct key_state *ks;

			if (json_get_string(data, "kid", &kid) < 0 || json_get_int(data, "last_seq", &last) < 0 ||
			    last < 0) {
				snprintf(problem, sizeof(problem),
					 "key.retire at seq %" PRId64 " is not {kid, last_seq}", k->seq);
				break;
			}
			fail = verify_under_keys(st, k);
			if (fail) {
				snprintf(problem, sizeof(problem), "key.retire at seq %" PRId64 ": %s", k->seq, fail);
				break;
			}
			ks = key_find(st, kid);
			if (!ks) {
				snprintf(problem, sizeof(problem),
					 "key.retire at seq %" PRId64 " retires an unknown key", k->seq);
				break;
			}
			ks->last_seq = ks->last_seq >= 0 ? MIN(ks->last_seq, last) : last;
		}
	}
	if (problem[0]) {
		add_check(st, "keys", CHECK_FAIL, "%s", problem);
	} else {
		add_check(st, "keys", CHECK_PASS,
			  "%zu key record(s) in the checkpointed tree, %zu key(s) declared, each "
			  "matching its SPKI",
			  n, st->n_keys);
		add_check(st, "keys", CHECK_WARN,
			  "retirements not proven complete: no run-set from registry size 0 covers the bundle");
	}
	free_records(recs, n);
	return !problem[0];
}

/* ---- events -------------------------------------------------------------------------------------------------------- */

static bool id_ok(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n == 0 || n > max) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f) {
			return false;
		}
	}
	return true;
}

/* ---- the run ------------------------------------------------------------------------------------------------------- */

static bool read_run(struct vstate *st)
{
	const char *why = NULL;
	size_t bad = 0;
	int r;

	r = parse_lines(st, st->run_entry, &st->run, &st->n_run, &why, &bad);
	if (r == -EPROTONOSUPPORT) {
		add_check(st, "signatures", CHECK_FAIL, "%s line %zu: %s (algorithm confusion)", st->run_entry->name,
			  bad, why);
		return false;
	}
	if (r < 0) {
		add_check(st, "bundle structure", CHECK_FAIL, "%s line %zu: %s", st->run_entry->name, bad,
			  why ? why : "unreadable");
		return false;
	}
	if (st->n_run == 0) {
		add_check(st, "bundle structure", CHECK_FAIL, "%s is empty", st->run_entry->name);
		return false;
	}
	return true;
}

/* One record's signature check, as check_signatures reports it. */
struct sig_result {
	const char *fail; /* static reason, or NULL */
	char *why; /* the schema's words when fail needs them (malloc'd), or NULL */
	bool field; /* fail needs why (recomputed in order if why could not be kept) */
};

static const char *check_one(const struct vstate *st, const struct record *r, char why[EVENT_SCHEMA_WHY_MAX],
			     bool *field)
{
	*field = false;
	if (record_check_hash(r) < 0) {
		return "hash does not match its event";
	}
	if (!event_valid(r->event, why)) {
		*field = true;
		return "event is not a valid tracekit.event.v2";
	}
	if (!st->trust.alg_ed25519) {
		return "alg ed25519 is not pinned in the trust config's algs";
	}
	if (!st->log_id || strcmp(st->log_id, r->log_id) != 0) {
		return "record of another log than the key records";
	}
	return verify_under_keys((struct vstate *)st, r);
}

/* The records are independent of one another here: par_for checks them on every CPU, each into its own slot. */
struct sig_work {
	const struct vstate *st;
	struct sig_result *res;
};

static void sig_one(void *ctx, size_t i)
{
	struct sig_work *w = ctx;
	char why[EVENT_SCHEMA_WHY_MAX] = "";
	struct sig_result *res = &w->res[i];

	res->fail = check_one(w->st, &w->st->run[i], why, &res->field);
	if (res->field) {
		res->why = strdup(why);
	}
}

static void check_signatures(struct vstate *st)
{
	size_t problems = 0;
	char first[MAX_DETAIL] = "";
	struct sig_result *res = calloc(st->n_run ? st->n_run : 1, sizeof(*res));

	if (!res) {
		st->oom = true;
		return;
	}
	par_for(st->n_run, sig_one, &(struct sig_work){ .st = st, .res = res });
	for (size_t i = 0; i < st->n_run; i++) {
		const struct record *r = &st->run[i];
		const char *fail = res[i].fail, *field = NULL;
		char why[EVENT_SCHEMA_WHY_MAX] = "";

		if (fail && problems++ == 0) {
			if (res[i].field) {
				if (res[i].why) {
					field = res[i].why;
				} else {
					/* strdup failed in the worker: the same check again, here. */
					(void)event_valid(r->event, why);
					field = why;
				}
			}
			snprintf(first, sizeof(first), "record %zu of the run (seq %" PRId64 "): %s%s%s%s", i, r->seq,
				 fail, field ? " (" : "", field ? field : "", field ? ")" : "");
		}
		free(res[i].why);
	}
	free(res);
	if (problems) {
		add_check(st, "signatures", CHECK_FAIL, "%s%s", first, problems > 1 ? " (and more)" : "");
	} else {
		add_check(st, "signatures", CHECK_PASS, "%zu record(s) verify under keys valid at their seq",
			  st->n_run);
	}
}

static void check_chain(struct vstate *st)
{
	const struct record *first = &st->run[0];
	char problem[MAX_DETAIL] = "";
	char expect[64], *key = NULL, hex[2 * SHA256_LEN + 1];

	for (size_t i = 0; i < st->n_run && !problem[0]; i++) {
		const struct record *r = &st->run[i];
		const uint8_t *prev = i == 0 ? ZERO_HASH : st->run[i - 1].hash;

		if (r->run_seq != (int64_t)i) {
			snprintf(problem, sizeof(problem),
				 "record %zu has run_seq %" PRId64 " (a record deleted or moved)", i, r->run_seq);
		} else if (!crypto_equal(r->run_prev_hash, prev, SHA256_LEN)) {
			snprintf(problem, sizeof(problem),
				 "record %zu: run_prev_hash does not link to the previous record", i);
		} else if (strcmp(r->tenant, first->tenant) != 0 || strcmp(r->run_id, first->run_id) != 0) {
			snprintf(problem, sizeof(problem), "record %zu belongs to another run", i);
		} else if (i > 0 && r->seq <= st->run[i - 1].seq) {
			snprintf(problem, sizeof(problem), "record %zu: seq does not increase", i);
		} else if (i > 0 && st->run[i - 1].type && strcmp(st->run[i - 1].type, "run.final") == 0) {
			snprintf(problem, sizeof(problem), "record %zu comes after run.final", i);
		} else if (r->type && strcmp(r->type, "run.final") == 0) {
			json_t *data = json_object_get(r->event, "data");
			int64_t head = -1;
			const char *hh = NULL;
			uint8_t h[SHA256_LEN];

			st->have_final = true;
			if (json_get_int(data, "head_run_seq", &head) < 0 ||
			    json_get_string(data, "head_hash", &hh) < 0 || record_hash_parse(hh, h) < 0 || head < 0 ||
			    (size_t)head >= i || !crypto_equal(h, st->run[head].hash, SHA256_LEN)) {
				snprintf(problem, sizeof(problem), "run.final does not name the run's head record");
			}
		}
	}
	/* The run file is named by the first 32 hex of SHA-256("<tenant>/<run_id>"). */
	if (!problem[0]) {
		if (asprintf(&key, "%s/%s", first->tenant, first->run_id) < 0) {
			key = NULL;
			st->oom = true;
			return;
		}
		if (sha256_hex(key, strlen(key), hex) < 0) {
			free(key);
			st->oom = true;
			return;
		}
		free(key);
		snprintf(expect, sizeof(expect), "runs/%.32s.jsonl", hex);
		if (strcmp(expect, st->run_entry->name) != 0) {
			snprintf(problem, sizeof(problem), "%s is not the file name of run %s", st->run_entry->name,
				 Q(first->run_id));
		}
	}
	if (problem[0]) {
		add_check(st, "run chain", CHECK_FAIL, "%s", problem);
	} else {
		add_check(st, "run chain", CHECK_PASS,
			  "%zu record(s), run_seq 0..%zu of run %s (tenant %s), contiguous%s", st->n_run, st->n_run - 1,
			  Q(first->run_id), Q(first->tenant), st->have_final ? ", ending in run.final" : ", open");
	}
}

static void check_inclusion(struct vstate *st)
{
	const struct record *a = &st->run[0], *z = &st->run[st->n_run - 1];
	int ra, rz;

	if (!st->cp_ok) {
		add_check(st, "inclusion", CHECK_FAIL, "no verified checkpoint to prove the run against");
		return;
	}
	ra = a->seq < st->tree_size ? included(st, a->seq, a->hash) : -ENOENT;
	rz = z->seq < st->tree_size ? included(st, z->seq, z->hash) : -ENOENT;
	if (ra < 0 || rz < 0) {
		const struct record *bad = ra < 0 ? a : z;

		add_check(st, "inclusion", CHECK_FAIL,
			  "the run's %s record (seq %" PRId64 ") is %s the tree of size %" PRId64,
			  ra < 0 ? "first" : "last", bad->seq,
			  (ra < 0 ? ra : rz) == -ENOENT ? "not proven in" : "not in", st->tree_size);
		return;
	}
	add_check(st, "inclusion", CHECK_PASS,
		  "first (seq %" PRId64 ") and last (seq %" PRId64 ") records are in the tree of size %" PRId64, a->seq,
		  z->seq, st->tree_size);
}

static void check_policies(struct vstate *st)
{
	uint8_t cited[MAX_POLICIES][SHA256_LEN];
	size_t count = 0, n_cited = 0;

	for (size_t i = 0; i < st->b->n; i++) {
		const struct bundle_entry *e = &st->b->e[i];
		struct json_opts opts = { .max_bytes = BUNDLE_MAX_ENTRY_SIZE, .max_depth = 0, .want_top = JSON_OBJECT };
		char hex[2 * SHA256_LEN + 1], want[128];
		json_t *doc = NULL;

		if (strncmp(e->name, "policies/", 9) != 0) {
			continue;
		}
		count++;
		if (sha256_hex(e->data, e->size, hex) < 0) {
			add_check(st, "policy snapshot", CHECK_FAIL, "%s could not be hashed", e->name);
			return;
		}
		snprintf(want, sizeof(want), "policies/%s.json", hex);
		if (strcmp(want, e->name) != 0) {
			add_check(st, "policy snapshot", CHECK_FAIL, "%s is not named by its SHA-256 (edited?)",
				  e->name);
			return;
		}
		if (json_parse_strict(e->data, e->size, &opts, &doc) < 0) {
			add_check(st, "policy snapshot", CHECK_FAIL, "%s is not strict JSON", e->name);
			return;
		}
		json_decref(doc);
	}
	/*
	 * tkbox addition: every policy_hash the run's records cite must have its
	 * snapshot in the bundle, so an edited snapshot cannot simply be renamed
	 * after its new hash (or dropped) without the report saying so.
	 */
	for (size_t i = 0; i < st->n_run; i++) {
		json_t *data = json_object_get(st->run[i].event, "data");
		uint8_t h[SHA256_LEN];
		const char *ph;
		char want[128];
		bool seen = false;

		if (json_get_string(data, "policy_hash", &ph) < 0) {
			continue;
		}
		if (record_hash_parse(ph, h) < 0) {
			add_check(st, "policy snapshot", CHECK_FAIL,
				  "record %zu of the run cites a malformed policy_hash", i);
			return;
		}
		/* Each distinct hash is looked up once: a run cites few policies, and the cap keeps this linear. */
		for (size_t k = 0; k < n_cited && !seen; k++) {
			seen = memcmp(cited[k], h, SHA256_LEN) == 0;
		}
		if (seen) {
			continue;
		}
		if (n_cited >= MAX_POLICIES) {
			add_check(st, "policy snapshot", CHECK_FAIL, "the run cites more than %d policies",
				  MAX_POLICIES);
			return;
		}
		memcpy(cited[n_cited++], h, SHA256_LEN);
		snprintf(want, sizeof(want), "policies/%s.json", ph + 7);
		if (!bundle_find(st->b, want)) {
			add_check(st, "policy snapshot", CHECK_FAIL,
				  "record %zu of the run cites policy %s and the bundle has no snapshot of it", i, ph);
			return;
		}
	}
	if (count) {
		add_check(st, "policy snapshot", CHECK_PASS, "%zu snapshot(s), each named by its SHA-256%s", count,
			  st->n_run ? " and covering every policy the run cites" : "");
	}
}

/* ---- informational lines ------------------------------------------------------------------------------------------- */

/* At most this many systems are named on the `external decisions` line; the rest are counted as "others". */
#define EXTERNAL_MAX_SYSTEMS 16

static int cmp_key(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * Other systems' decisions the signer imported (policy.external), and the
 * calls on which they disagreed with it (capture.gap decision_mismatch), as
 * Tracekit's verifier reports them: a WARN when any disagree.
 */
static void check_external(struct vstate *st)
{
	_cleanup_json_ json_t *systems = json_object();
	size_t imported = 0, verified = 0, mismatched = 0, others = 0, n = 0;
	const char *keys[EXTERNAL_MAX_SYSTEMS], *k, *s;
	struct buf line = { 0 };
	json_t *v;

	for (size_t i = 0; systems && i < st->n_run; i++) {
		const struct record *r = &st->run[i];
		json_t *data = json_object_get(r->event, "data");

		if (r->type && strcmp(r->type, "capture.gap") == 0 && json_get_string(data, "kind", &s) == 0 &&
		    strcmp(s, "decision_mismatch") == 0) {
			mismatched++;
		}
		if (!r->type || strcmp(r->type, "policy.external") != 0 || json_get_string(data, "system", &s) < 0) {
			continue;
		}
		imported++;
		verified += json_get_string(data, "signature", &k) == 0 && strcmp(k, "verified") == 0;
		v = json_object_get(systems, s);
		if (v) {
			(void)json_integer_set(v, json_integer_value(v) + 1);
		} else if (json_object_size(systems) < EXTERNAL_MAX_SYSTEMS) {
			(void)json_object_set_new(systems, s, json_integer(1));
		} else {
			others++;
		}
	}
	if (!imported && !mismatched) {
		return;
	}
	json_object_foreach(systems, k, v) {
		keys[n++] = k;
	}
	qsort(keys, n, sizeof(keys[0]), cmp_key);
	if (buf_init(&line, MAX_DETAIL, 0) < 0) {
		return;
	}
	for (size_t i = 0; i < n; i++) {
		(void)buf_putf(&line, "%s%s %lld", i ? ", " : "", Q(keys[i]),
			       (long long)json_integer_value(json_object_get(systems, keys[i])));
	}
	if (others) {
		(void)buf_putf(&line, "%sothers %zu", n ? ", " : "", others);
	}
	add_check(st, "external decisions", mismatched ? CHECK_WARN : CHECK_PASS,
		  "%zu imported: %.*s; signatures verified %zu, unverified %zu; %zu disagree with the signer", imported,
		  buf_len(&line) ? (int)buf_len(&line) : 4, buf_len(&line) ? (const char *)buf_ptr(&line) : "none",
		  verified, imported - verified, mismatched);
	buf_release(&line);
}

static void check_info(struct vstate *st)
{
	size_t tiers[4] = { 0 }, srcs[3] = { 0 }, against = 0, break_glass = 0;
	const json_t *registered = NULL, *final = NULL;
	const char *iso = NULL;

	for (size_t i = 0; i < st->n_run; i++) {
		const struct record *r = &st->run[i];
		json_t *data = json_object_get(r->event, "data");
		const char *s;
		bool b;

		if (!r->type) {
			continue;
		}
		if (strcmp(r->type, "run.registered") == 0 && !registered) {
			registered = data;
		}
		if (strcmp(r->type, "run.final") == 0) {
			final = data;
		}
		if (strcmp(r->type, "tool.call") == 0 || strcmp(r->type, "policy.decision") == 0) {
			if (json_get_string(r->event, "tier", &s) == 0 && s[0] == 'T' && s[1] >= '1' && s[1] <= '3') {
				tiers[s[1] - '1']++;
			} else {
				tiers[3]++;
			}
		}
		if (json_get_string(r->event, "args_source", &s) == 0) {
			srcs[strcmp(s, "raw") == 0 ? 0 : strcmp(s, "parsed") == 0 ? 1 : 2]++;
		}
		if (strcmp(r->type, "capture.gap") == 0 && json_get_string(data, "kind", &s) == 0 &&
		    strcmp(s, "executed_against_policy") == 0) {
			against++;
		}
		/* As Tracekit's verifier reads them: an `approval` record with self_approved / break_glass true. */
		if (strcmp(r->type, "approval") == 0) {
			if (json_get_bool(data, "self_approved", &b) == 0 && b) {
				st->self_approval = true;
			}
			if (json_get_bool(data, "break_glass", &b) == 0 && b) {
				break_glass++;
			}
		}
	}
	if (against) {
		add_check(st, "policy", CHECK_WARN,
			  "%zu call(s) ran against the policy (capture.gap executed_against_policy)", against);
	}
	check_external(st);
	if (final) {
		json_t *cov = json_object_get(final, "coverage"), *un = json_object_get(cov, "unreconciled");
		const char *k;
		json_t *v;
		size_t n = 0;

		json_object_foreach(un, k, v) {
			n += json_is_integer(v) && json_integer_value(v) > 0 ? (size_t)json_integer_value(v) : 0;
		}
		if (n) {
			add_check(st, "coverage", CHECK_WARN, "%zu unreconciled call(s)", n);
		} else {
			add_check(st, "coverage", CHECK_PASS, "no unreconciled calls");
		}
	}
	if (tiers[0] + tiers[1] + tiers[2] + tiers[3]) {
		add_check(st, "tiers", CHECK_PASS, "T1 %zu, T2 %zu, T3 %zu, untiered %zu", tiers[0], tiers[1], tiers[2],
			  tiers[3]);
	} else {
		add_check(st, "tiers", CHECK_PASS, "no tool calls");
	}
	add_check(st, "args source", CHECK_PASS, "raw %zu, parsed %zu, coerced %zu", srcs[0], srcs[1], srcs[2]);
	if (registered && json_get_string(registered, "signer_isolation", &iso) == 0 && id_ok(iso, 32)) {
		set_str(st, &st->rep->isolation, "%s", iso);
		add_check(st, "isolation", CHECK_PASS, "%s (signer-reported, measured at register_run)", Q(iso));
	} else {
		add_check(st, "isolation", CHECK_PASS, "unknown (no run.registered with signer_isolation)");
	}
	{
		json_t *fm = registered ? json_object_get(registered, "fail_modes") : NULL;
		char *jcs = NULL;

		if (!fm) {
			add_check(st, "fail-open classes", CHECK_PASS, "none declared");
		} else if (json_is_string(fm)) {
			add_check(st, "fail-open classes", CHECK_PASS, "fail_modes %s", Q(json_string_value(fm)));
		} else if (json_jcs_string(fm, 4096, &jcs) == 0) {
			add_check(st, "fail-open classes", CHECK_PASS, "fail_modes %s", Q(jcs));
			free(jcs);
		} else {
			add_check(st, "fail-open classes", CHECK_PASS, "fail_modes present");
		}
	}
	add_check(st, "key assurance", CHECK_PASS,
		  "asserted: the log declares its own record keys; nothing attests them");
	if (break_glass) {
		add_check(st, "break-glass approvals", CHECK_WARN,
			  "%zu approval(s) answered under the break-glass role", break_glass);
	}
}

static void assurance(struct vstate *st)
{
	struct buf out = { 0 };
	size_t nonop = 0, op = 0;
	uint64_t earliest = UINT64_MAX;
	const char *level;
	char t[32];

	for (size_t i = 0; i < st->trust.n_witnesses; i++) {
		size_t k = st->trust.n_logs + i;

		if (!st->opened.verified[k]) {
			continue;
		}
		if (st->trust.wclass[i] == WITNESS_OPERATOR) {
			op++;
		} else {
			nonop++;
			earliest = MIN(earliest, st->opened.timestamp[k]);
		}
	}
	if (st->self_approval) {
		level = "dev";
	} else if ((int64_t)nonop >= MAX(1, st->trust.witnesses_required)) {
		level = "witnessed";
	} else if (op + nonop > 0) {
		level = "local";
	} else {
		level = "dev";
	}
	if (buf_init(&out, 8192, 0) < 0) {
		st->oom = true;
		return;
	}
	(void)buf_putf(&out, "%s; records ed25519; checkpoint Ed25519 only (%s)", level, Q(st->cp.origin));
	if (op + nonop == 0) {
		(void)buf_putf(&out, "; no witness cosignature");
	}
	for (size_t i = 0; i < st->trust.n_witnesses; i++) {
		size_t k = st->trust.n_logs + i;

		if (!st->opened.verified[k]) {
			continue;
		}
		fmt_time(st->opened.timestamp[k], t);
		(void)buf_putf(&out, "; cosigned ed25519 by %s (%s) at %s", Q(st->trust.keys[k].name),
			       witness_class_name(st->trust.wclass[i]), t);
	}
	if (nonop) {
		fmt_time(earliest, t);
		(void)buf_putf(&out, "; earliest independent anchor %s", t);
	}
	if (st->self_approval) {
		(void)buf_putf(&out, "; approvals: self");
	}
	(void)buf_putf(&out, "; key retirements not proven complete");
	if (buf_dup_cstring(&out, &st->rep->assurance) < 0) {
		st->oom = true;
	}
	buf_release(&out);
}

/* ---- entry point --------------------------------------------------------------------------------------------------- */

int verify_bundle(const void *bundle, size_t n, const void *trust, size_t trust_n, const struct verify_opts *opts,
		  struct verify_report *ret)
{
	struct verify_report rep = { 0 };
	struct vstate st = { .rep = &rep };
	const char *why = NULL;
	bool layout_ok;
	int r;

	r = trust_parse(trust, trust_n, &st.trust, &why);
	if (r < 0) {
		add_check(&st, "trust config", CHECK_FAIL, "%s", why ? why : tk_strerror(r));
		set_str(&st, &rep.integrity, "UNUSABLE BUNDLE");
		rep.exit_code = 2;
		goto out;
	}
	r = bundle_read(bundle, n, &st.b, &why);
	if (r < 0) {
		add_check(&st, "bundle readable", CHECK_FAIL, "%s", why ? why : tk_strerror(r));
		set_str(&st, &rep.integrity, "UNUSABLE BUNDLE");
		rep.exit_code = 2;
		goto out;
	}
	if (read_manifest(&st) != 0) {
		rep.exit_code = 2;
		goto out;
	}
	check_manifest(&st);
	layout_ok = check_layout(&st);
	if (layout_ok && read_proofs(&st)) {
		check_checkpoint(&st);
		if (check_keys(&st) || st.n_keys > 0) {
			if (read_run(&st)) {
				check_signatures(&st);
				check_chain(&st);
				check_inclusion(&st);
			}
		}
	} else if (layout_ok) {
		/* proofs/records.json unreadable: nothing can be proven against a checkpoint. */
	}
	check_policies(&st);
	if (rep.failures == 0 && st.n_run > 0) {
		check_info(&st);
	}
	if (rep.failures > 0) {
		set_str(&st, &rep.integrity, "FAILED");
		rep.exit_code = 1;
	} else {
		if (st.have_final) {
			set_str(&st, &rep.integrity, "VERIFIED");
		} else {
			set_str(&st, &rep.integrity, "VERIFIED TO HEAD %zu (open)", st.n_run - 1);
		}
		assurance(&st);
		rep.exit_code = opts && opts->strict && rep.warnings > 0 ? 3 : 0;
	}
out:
	trust_release(&st.trust);
	bundle_free(st.b);
	json_decref(st.manifest);
	json_decref(st.proofs);
	checkpoint_release(&st.cp);
	note_opened_release(&st.opened);
	free(st.log_id);
	free_records(st.run, st.n_run);
	if (st.oom || !rep.integrity) {
		verify_report_release(&rep);
		return -ENOMEM;
	}
	*ret = rep;
	return 0;
}

void verify_report_release(struct verify_report *r)
{
	if (!r) {
		return;
	}
	for (size_t i = 0; i < r->n_checks; i++) {
		free(r->checks[i].detail);
	}
	free(r->integrity);
	free(r->assurance);
	free(r->isolation);
	*r = (struct verify_report){ 0 };
}

static const char *status_word(enum check_status s, bool upper)
{
	switch (s) {
	case CHECK_PASS:
		return upper ? "PASS" : "pass";
	case CHECK_WARN:
		return upper ? "WARN" : "warn";
	case CHECK_FAIL:
		return upper ? "FAIL" : "fail";
	default:
		return upper ? "FAIL" : "fail";
	}
}

int verify_report_text(const struct verify_report *r, struct buf *out)
{
	int e = 0;

	for (size_t i = 0; i < r->n_checks && e >= 0; i++) {
		e = buf_putf(out, "[%s] %s \xe2\x80\x94 %s\n", status_word(r->checks[i].status, true),
			     r->checks[i].name, r->checks[i].detail ? r->checks[i].detail : "");
	}
	if (e >= 0) {
		e = buf_putf(out, "Integrity: %s.\n", r->integrity ? r->integrity : "FAILED");
	}
	if (e >= 0) {
		e = buf_putf(out, "Assurance: %s.\n", r->assurance ? r->assurance : "none (integrity not established)");
	}
	return e < 0 ? e : 0;
}

int verify_report_json(const struct verify_report *r, json_t **ret)
{
	json_t *o = json_object(), *checks = json_array(), *fails = json_array(), *warns = json_array(),
	       *notes = json_array();
	int e = 0;

	if (!o || !checks || !fails || !warns || !notes) {
		e = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < r->n_checks && e == 0; i++) {
		const struct verify_check *c = &r->checks[i];
		const char *d = c->detail ? c->detail : "";
		json_t *problems = json_array(), *item;
		char *line = NULL;

		if (!problems) {
			e = -ENOMEM;
			break;
		}
		if (c->status != CHECK_PASS && json_array_append_new(problems, json_string(d)) < 0) {
			e = -ENOMEM;
		}
		item = json_pack("{s:s, s:s, s:s, s:o}", "check", c->name, "status", status_word(c->status, false),
				 "detail", d, "problems", problems);
		if (!item || json_array_append_new(checks, item) < 0) {
			e = -ENOMEM;
			break;
		}
		if (c->status != CHECK_PASS) {
			if (asprintf(&line, "%s \xe2\x80\x94 %s", c->name, d) < 0 ||
			    json_array_append_new(c->status == CHECK_FAIL ? fails : warns, json_string(line)) < 0) {
				e = -ENOMEM;
			}
			free(line);
		}
	}
	if (e == 0 && r->isolation) {
		char *line = NULL;

		if (asprintf(&line, "isolation: %s", r->isolation) < 0 ||
		    json_array_append_new(notes, json_string(line)) < 0) {
			e = -ENOMEM;
		}
		free(line);
	}
	if (e == 0 &&
	    (json_object_set_new(o, "exit_code", json_integer(r->exit_code)) < 0 ||
	     json_object_set(o, "checks", checks) < 0 || json_object_set(o, "failures", fails) < 0 ||
	     json_object_set(o, "warnings", warns) < 0 ||
	     json_object_set_new(o, "integrity", json_string(r->integrity ? r->integrity : "FAILED")) < 0 ||
	     json_object_set_new(o, "assurance", r->assurance ? json_string(r->assurance) : json_null()) < 0 ||
	     json_object_set(o, "notes", notes) < 0)) {
		e = -ENOMEM;
	}
out:
	json_decref(checks);
	json_decref(fails);
	json_decref(warns);
	json_decref(notes);
	if (e < 0) {
		json_decref(o);
		return e;
	}
	*ret = o;
	return 0;
}
