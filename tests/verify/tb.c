/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "banned.h"
#include "json.h"
#include "tb.h"
#include "verify/bundle.h"
#include "verify/merkle.h"
#include "verify/note.h"
#include "verify/record.h"

/* ---- ZIP ---------------------------------------------------------------------------------------------------------- */

static int put16(struct buf *b, uint16_t v)
{
	uint8_t x[2] = { (uint8_t)v, (uint8_t)(v >> 8) };

	return buf_put(b, x, 2);
}

static int put32(struct buf *b, uint32_t v)
{
	uint8_t x[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };

	return buf_put(b, x, 4);
}

int zb_init(struct zb *z)
{
	int r;

	*z = (struct zb){ 0 };
	r = buf_init(&z->out, (size_t)700 << 20, 0);
	if (r < 0) {
		return r;
	}
	return buf_init(&z->cd, (size_t)64 << 20, 0);
}

void zb_release(struct zb *z)
{
	buf_release(&z->out);
	buf_release(&z->cd);
}

static int deflate_raw(const void *p, size_t n, uint8_t **ret, size_t *ret_n)
{
	z_stream s = { 0 };
	size_t cap = deflateBound(&s, (uLong)n) + 64;
	uint8_t *out;

	if (deflateInit2(&s, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
		return -ENOMEM;
	}
	cap = deflateBound(&s, (uLong)n) + 64;
	out = malloc(cap);
	if (!out) {
		deflateEnd(&s);
		return -ENOMEM;
	}
	s.next_in = (Bytef *)(uintptr_t)p;
	s.avail_in = (uInt)n;
	s.next_out = out;
	s.avail_out = (uInt)cap;
	if (deflate(&s, Z_FINISH) != Z_STREAM_END) {
		deflateEnd(&s);
		free(out);
		return -EIO;
	}
	*ret_n = s.total_out;
	deflateEnd(&s);
	*ret = out;
	return 0;
}

int zb_add(struct zb *z, const char *name, const void *p, size_t n, const struct zb_opts *o)
{
	static const struct zb_opts none = { 0 };
	uint32_t crc = (uint32_t)crc32(0L, p, (uInt)n), off = (uint32_t)buf_len(&z->out), usize;
	uint8_t *comp = NULL;
	size_t clen = n;
	uint16_t nl = (uint16_t)strlen(name), method;
	int r = 0;

	if (!o) {
		o = &none;
	}
	method = o->stored ? 0 : 8;
	if (!o->stored) {
		r = deflate_raw(p, n, &comp, &clen);
		if (r < 0) {
			return r;
		}
	}
	if (o->bad_crc) {
		crc ^= 1;
	}
	usize = (uint32_t)((int64_t)n + o->usize_delta);
	r = put32(&z->out, 0x04034b50);
	r = r < 0 ? r : put16(&z->out, 20);
	r = r < 0 ? r : put16(&z->out, 0);
	r = r < 0 ? r : put16(&z->out, method);
	r = r < 0 ? r : put16(&z->out, 0);
	r = r < 0 ? r : put16(&z->out, 0x21);
	r = r < 0 ? r : put32(&z->out, crc);
	r = r < 0 ? r : put32(&z->out, (uint32_t)clen);
	r = r < 0 ? r : put32(&z->out, usize);
	r = r < 0 ? r : put16(&z->out, nl);
	r = r < 0 ? r : put16(&z->out, 0);
	r = r < 0 ? r : buf_put(&z->out, name, nl);
	r = r < 0 ? r : buf_put(&z->out, o->stored ? p : comp, clen);

	r = r < 0 ? r : put32(&z->cd, 0x02014b50);
	r = r < 0 ? r : put16(&z->cd, o->unix_mode ? (3 << 8 | 20) : 20);
	r = r < 0 ? r : put16(&z->cd, 20);
	r = r < 0 ? r : put16(&z->cd, 0);
	r = r < 0 ? r : put16(&z->cd, method);
	r = r < 0 ? r : put16(&z->cd, 0);
	r = r < 0 ? r : put16(&z->cd, 0x21);
	r = r < 0 ? r : put32(&z->cd, crc);
	r = r < 0 ? r : put32(&z->cd, (uint32_t)clen);
	r = r < 0 ? r : put32(&z->cd, usize);
	r = r < 0 ? r : put16(&z->cd, nl);
	r = r < 0 ? r : put16(&z->cd, 0);
	r = r < 0 ? r : put16(&z->cd, 0);
	r = r < 0 ? r : put16(&z->cd, 0);
	r = r < 0 ? r : put16(&z->cd, 0);
	r = r < 0 ? r : put32(&z->cd, o->unix_mode << 16);
	r = r < 0 ? r : put32(&z->cd, off);
	r = r < 0 ? r : buf_put(&z->cd, name, nl);
	free(comp);
	z->n++;
	return r;
}

int zb_finish(struct zb *z)
{
	uint32_t cd_off = (uint32_t)buf_len(&z->out);
	int r;

	r = buf_put(&z->out, buf_ptr(&z->cd), buf_len(&z->cd));
	r = r < 0 ? r : put32(&z->out, 0x06054b50);
	r = r < 0 ? r : put16(&z->out, 0);
	r = r < 0 ? r : put16(&z->out, 0);
	r = r < 0 ? r : put16(&z->out, (uint16_t)z->n);
	r = r < 0 ? r : put16(&z->out, (uint16_t)z->n);
	r = r < 0 ? r : put32(&z->out, (uint32_t)buf_len(&z->cd));
	r = r < 0 ? r : put32(&z->out, cd_off);
	r = r < 0 ? r : put16(&z->out, 0);
	return r;
}

/* ---- bundles ------------------------------------------------------------------------------------------------------ */

char *tb_sign(const json_t *event, const uint8_t priv[ED25519_PRIV_LEN], const uint8_t pub[ED25519_PUB_LEN])
{
	char *line = NULL;

	if (record_build(event, priv, pub, &line, NULL) < 0) {
		return NULL;
	}
	return line;
}

struct tb_member *tb_get(struct tb *t, const char *name)
{
	for (size_t i = 0; i < t->n_m; i++) {
		if (strcmp(t->m[i].name, name) == 0) {
			return &t->m[i];
		}
	}
	return NULL;
}

int tb_set(struct tb *t, const char *name, const void *p, size_t n)
{
	struct tb_member *m = tb_get(t, name);

	if (!m) {
		if (t->n_m >= TB_MAX_MEMBERS || strlen(name) >= sizeof(m->name)) {
			return -E2BIG;
		}
		m = &t->m[t->n_m++];
		snprintf(m->name, sizeof(m->name), "%s", name);
		m->data = NULL;
	}
	free(m->data);
	m->data = malloc(n + 1);
	if (!m->data) {
		return -ENOMEM;
	}
	memcpy(m->data, p, n);
	m->data[n] = '\0';
	m->size = n;
	return 0;
}

int tb_del(struct tb *t, const char *name)
{
	for (size_t i = 0; i < t->n_m; i++) {
		if (strcmp(t->m[i].name, name) == 0) {
			free(t->m[i].data);
			memmove(&t->m[i], &t->m[i + 1], (t->n_m - i - 1) * sizeof(t->m[0]));
			t->n_m--;
			return 0;
		}
	}
	return -ENOENT;
}

const char *tb_run_name(const struct tb *t)
{
	for (size_t i = 0; i < t->n_m; i++) {
		if (strncmp(t->m[i].name, "runs/", 5) == 0) {
			return t->m[i].name;
		}
	}
	return NULL;
}

int tb_write_run(struct tb *t)
{
	struct buf b = { 0 };
	char name[160];
	int r;

	snprintf(name, sizeof(name), "%s", tb_run_name(t));
	r = buf_init(&b, (size_t)64 << 20, 0);
	for (size_t i = 0; r >= 0 && i < t->n_run; i++) {
		r = buf_putf(&b, "%s\n", t->run[i]);
	}
	r = r < 0 ? r : tb_set(t, name, buf_ptr(&b), buf_len(&b));
	buf_release(&b);
	return r;
}

void tb_release(struct tb *t)
{
	for (size_t i = 0; i < t->n_run; i++) {
		free(t->run[i]);
	}
	for (size_t i = 0; i < t->n_m; i++) {
		free(t->m[i].data);
	}
	free(t->trust);
	*t = (struct tb){ 0 };
}

static void hexs(const uint8_t *p, size_t n, char *out)
{
	static const char d[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = d[p[i] >> 4];
		out[2 * i + 1] = d[p[i] & 15];
	}
	out[2 * n] = '\0';
}

static int b64s(const uint8_t *p, size_t n, char **ret)
{
	struct buf b = { 0 };
	int r = buf_init(&b, 256, 0);

	r = r < 0 ? r : b64_encode(p, n, B64_STD, &b);
	r = r < 0 ? r : buf_dup_cstring(&b, ret);
	buf_release(&b);
	return r;
}

struct logrec {
	char *line;
	uint8_t hash[SHA256_LEN];
	bool ours; /* in the run under test */
};

int tb_build(struct tb *t, size_t n_calls, bool closed)
{
	uint8_t seed[32];
	int r = crypto_random(seed, sizeof(seed));

	return r < 0 ? r : tb_build_seeded(t, n_calls, closed, seed);
}

/* A key, an id or a log id derived from the seed and a label. */
static int derive(const uint8_t seed[32], const char *label, uint8_t out[32])
{
	uint8_t m[64];
	size_t n = strlen(label);

	memcpy(m, label, n);
	memcpy(m + n, seed, 32);
	return sha256(m, n + 32, out);
}

int tb_build_seeded(struct tb *t, size_t n_calls, bool closed, const uint8_t seed[32])
{
	return tb_build_ex(t, n_calls, closed, seed, 0);
}

/* Events tb_build_events puts in the run after the decisions: [{type, data, source?, top?}]. */
static const json_t *inject;

int tb_build_events(struct tb *t, const json_t *events, bool closed, const uint8_t seed[32])
{
	int r;

	inject = events;
	r = tb_build_ex(t, 1, closed, seed, 0);
	inject = NULL;
	return r;
}

int tb_build_ex(struct tb *t, size_t n_calls, bool closed, const uint8_t seed[32], size_t extra_epochs)
{
	static const char policy[] =
		"{\"deny\":[{\"id\":\"TK-D007\",\"pattern\":\"pkill tkbox-signer\",\"reason\":\"touching "
		"the signer\",\"tool\":\"Bash\"}],\"version\":2}";
	struct logrec log[TB_MAX_RECORDS + 8];
	size_t n_log = 0;
	uint8_t prev[SHA256_LEN] = { 0 }, run_prev[SHA256_LEN] = { 0 }, leaf[MERKLE_HASH_LEN], root[MERKLE_HASH_LEN],
		ph[SHA256_LEN];
	char hex[65], kid[RECORD_HASH_STRLEN + 1], *spki = NULL, *vkey = NULL, *text = NULL, *note = NULL, name[160],
						   policy_hash[80];
	struct merkle_tree *tree = NULL;
	json_t *incl = NULL, *proofs = NULL;
	char *s = NULL;
	int64_t run_seq = 0;
	int r;

	size_t n_inj = inject ? json_array_size(inject) : 0, k_inj;

	*t = (struct tb){ 0 };
	if (n_calls + n_inj + 4 > TB_MAX_RECORDS) {
		return -E2BIG;
	}
	r = derive(seed, "log", t->log_priv);
	r = r < 0 ? r : ed25519_public_from_private(t->log_priv, t->log_pub);
	r = r < 0 ? r : derive(seed, "rec", t->rec_priv);
	r = r < 0 ? r : ed25519_public_from_private(t->rec_priv, t->rec_pub);
	r = r < 0 ? r : derive(seed, "log_id", ph);
	if (r < 0) {
		return r;
	}
	hexs(ph, 16, t->log_id);
	snprintf(t->origin, sizeof(t->origin), "tkbox.test/%s", t->log_id);
	r = note_vkey_encode(t->origin, NOTE_SIG_ED25519, t->log_pub, &vkey);
	if (r < 0) {
		return r;
	}
	if (asprintf(&t->trust, "{\"logs\":[\"%s\"],\"algs\":[\"ed25519\"]}", vkey) < 0) {
		free(vkey);
		return -ENOMEM;
	}
	free(vkey);
	r = record_kid(t->rec_pub, kid);
	r = r < 0 ? r : record_spki_b64(t->rec_pub, &spki);
	if (r < 0) {
		return r;
	}
	r = sha256(policy, strlen(policy), ph);
	if (r < 0) {
		return r;
	}
	hexs(ph, SHA256_LEN, hex);
	snprintf(policy_hash, sizeof(policy_hash), "sha256:%s", hex);

	/* The log: seq 0 signer.epoch, then our run with another run's record interleaved at seq 2. */
	for (size_t i = 0;; i++) {
		const char *type, *tenant = "acme", *run_id = "run-1", *source = "signer";
		char prev_s[RECORD_HASH_STRLEN + 1], run_prev_s[RECORD_HASH_STRLEN + 1], id[33];
		uint8_t idb[16];
		json_t *data, *ev, *extra = NULL;
		size_t call;
		bool ours = true;

		size_t li = i > extra_epochs ? i - extra_epochs : i;

		if (i > 0 && i <= extra_epochs) {
			/* Another signer.epoch declaring 16 fresh keys (the schema's maximum per record). */
			json_t *arr = json_array();

			type = "signer.epoch";
			tenant = "tracekit";
			run_id = "tracekit/signer";
			ours = false;
			for (size_t k = 0; k < 16; k++) {
				uint8_t kpriv[32], kpub[32];
				char kkid[RECORD_HASH_STRLEN + 1], *kspki = NULL;

				r = ed25519_keygen(kpriv, kpub);
				r = r < 0 ? r : record_kid(kpub, kkid);
				r = r < 0 ? r : record_spki_b64(kpub, &kspki);
				if (r < 0) {
					return r;
				}
				json_array_append_new(
					arr, json_pack("{s:s,s:s,s:s}", "kid", kkid, "alg", "ed25519", "spki", kspki));
				free(kspki);
			}
			data = json_pack("{s:o}", "keys", arr);
		} else if (li == 0) {
			type = "signer.epoch";
			tenant = "tracekit";
			run_id = "tracekit/signer";
			ours = false;
			data = json_pack("{s:[{s:s,s:s,s:s}]}", "keys", "kid", kid, "alg", "ed25519", "spki", spki);
		} else if (li == 1) {
			type = "run.registered";
			data = json_pack("{s:{s:s},s:{s:s,s:s,s:b},s:s,s:{s:s}}", "agent", "name", "test", "identity",
					 "scheme", "uid", "subject", "1000", "attested", 1, "signer_isolation",
					 "same-user", "fail_modes", "default", "closed");
		} else if (li == 2) {
			type = "run.registered";
			run_id = "run-2";
			ours = false;
			data = json_pack("{s:{s:s},s:{s:s,s:s,s:b}}", "agent", "name", "other", "identity", "scheme",
					 "uid", "subject", "1001", "attested", 1);
		} else if ((call = li - 3) < n_calls) {
			type = "policy.decision";
			data = json_pack("{s:s,s:s,s:[],s:s,s:s,s:s}", "tool_use_id", "c", "decision",
					 call == 0 ? "deny" : "allow", "rule_ids", "policy_hash", policy_hash, "tool",
					 "Bash", "decision_id", "d");
			extra = json_pack("{s:s,s:s,s:s}", "tier", "T2", "args_source", "raw", "tool_call_id", "c");
		} else if ((k_inj = li - 3 - n_calls) < n_inj) {
			const json_t *e = json_array_get(inject, k_inj), *top = json_object_get(e, "top");

			type = json_string_value(json_object_get(e, "type"));
			if (json_is_string(json_object_get(e, "source"))) {
				source = json_string_value(json_object_get(e, "source"));
			}
			data = json_deep_copy(json_object_get(e, "data"));
			extra = top ? json_deep_copy(top) : NULL;
			if (!type) {
				return -EINVAL;
			}
		} else if (closed && li == 3 + n_calls + n_inj) {
			type = "run.closing";
			data = json_pack("{s:s}", "reason", "close_run");
		} else if (closed && li == 4 + n_calls + n_inj) {
			char hh[RECORD_HASH_STRLEN + 1];

			record_hash_format(run_prev, hh);
			type = "run.final";
			data = json_pack("{s:I,s:s}", "head_run_seq", (json_int_t)(run_seq - 1), "head_hash", hh);
		} else {
			break;
		}
		if (!data) {
			return -ENOMEM;
		}
		{
			uint8_t full[32];
			char label[32];

			snprintf(label, sizeof(label), "event %zu", i);
			r = derive(seed, label, full);
			if (r < 0) {
				return r;
			}
			memcpy(idb, full, sizeof(idb));
		}
		hexs(idb, sizeof(idb), id);
		record_hash_format(prev, prev_s);
		record_hash_format(ours ? run_prev : (const uint8_t[SHA256_LEN]){ 0 }, run_prev_s);
		ev = json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:s,s:n,s:s,s:s,s:o,s:s,s:s,s:I,s:s}", "schema_version",
			       "tracekit.event.v2", "id", id, "seq", (json_int_t)i, "prev_hash", prev_s, "ts",
			       "2026-11-29T08:00:00.000000Z", "run_id", run_id, "agent_id", "main", "parent_id",
			       "source", source, "type", type, "data", data, "log_id", t->log_id, "tenant", tenant,
			       "run_seq", (json_int_t)(ours ? run_seq : 0), "run_prev_hash", run_prev_s);
		if (!ev) {
			return -ENOMEM;
		}
		if (extra) {
			json_object_update(ev, extra);
			json_decref(extra);
		}
		r = record_build(ev, t->rec_priv, t->rec_pub, &log[n_log].line, log[n_log].hash);
		json_decref(ev);
		if (r < 0) {
			return r;
		}
		log[n_log].ours = ours;
		memcpy(prev, log[n_log].hash, SHA256_LEN);
		if (ours) {
			memcpy(run_prev, log[n_log].hash, SHA256_LEN);
			run_seq++;
		}
		n_log++;
	}
	free(spki);

	r = merkle_tree_new(&tree);
	for (size_t i = 0; r >= 0 && i < n_log; i++) {
		r = merkle_leaf_hash(log[i].hash, SHA256_LEN, leaf);
		r = r < 0 ? r : merkle_tree_append(tree, leaf);
	}
	r = r < 0 ? r : merkle_tree_root(tree, n_log, root);
	r = r < 0 ? r : checkpoint_format(t->origin, n_log, root, &text);
	r = r < 0 ? r : note_sign(text, strlen(text), t->origin, t->log_priv, &note);
	if (r < 0) {
		goto out;
	}
	snprintf(name, sizeof(name), "checkpoints/%zu.note", n_log);
	r = tb_set(t, name, note, strlen(note));

	/* Proofs: the key record (seq 0), the run's first (seq 1) and last records. */
	incl = json_object();
	for (size_t k = 0; r >= 0 && k < 3 + extra_epochs; k++) {
		uint64_t seq = k < 1 + extra_epochs ? k : k == 1 + extra_epochs ? 1 + extra_epochs : n_log - 1;
		struct merkle_proof pr;
		json_t *arr = json_array();
		char key[24];

		r = merkle_tree_inclusion(tree, seq, n_log, &pr);
		for (size_t j = 0; r >= 0 && j < pr.len; j++) {
			r = b64s(pr.hash[j], MERKLE_HASH_LEN, &s);
			if (r >= 0) {
				json_array_append_new(arr, json_string(s));
				free(s);
			}
		}
		snprintf(key, sizeof(key), "%llu", (unsigned long long)seq);
		json_object_set_new(incl, key, arr);
	}
	proofs = json_pack("{s:s,s:I,s:O}", "checkpoint", name, "tree_size", (json_int_t)n_log, "inclusion", incl);
	r = r < 0 ? r : json_jcs_string(proofs, (size_t)1 << 20, &s);
	if (r >= 0) {
		r = tb_set(t, "proofs/records.json", s, strlen(s));
		free(s);
	}
	/* Keys. */
	if (r >= 0) {
		char *kl = NULL;

		struct buf kb = { 0 };

		r = buf_init(&kb, (size_t)16 << 20, 0);
		for (size_t k = 0; r >= 0 && k <= extra_epochs; k++) {
			r = buf_putf(&kb, "%s\n", log[k].line);
		}
		r = r < 0 ? r : buf_dup_cstring(&kb, &kl);
		r = r < 0 ? r : tb_set(t, "keys/records.jsonl", kl, strlen(kl));
		buf_release(&kb);
		free(kl);
	}
	/* The run. */
	for (size_t i = 0; r >= 0 && i < n_log; i++) {
		if (log[i].ours) {
			t->run[t->n_run++] = log[i].line;
			log[i].line = NULL;
		}
	}
	if (r >= 0) {
		char rk[64];

		r = sha256("acme/run-1", 10, ph);
		hexs(ph, SHA256_LEN, hex);
		snprintf(rk, sizeof(rk), "runs/%.32s.jsonl", hex);
		r = r < 0 ? r : tb_set(t, rk, "", 0);
		r = r < 0 ? r : tb_write_run(t);
	}
	/* The policy snapshot, named by its SHA-256 (the hash its decisions cite). */
	if (r >= 0) {
		snprintf(name, sizeof(name), "policies/%s.json", policy_hash + 7);
		r = tb_set(t, name, policy, strlen(policy));
	}
out:
	for (size_t i = 0; i < n_log; i++) {
		free(log[i].line);
	}
	merkle_tree_free(tree);
	json_decref(incl);
	json_decref(proofs);
	free(text);
	free(note);
	return r;
}

int tb_zip(const struct tb *t, struct buf *out)
{
	return tb_zip2(t, NULL, NULL, out);
}

int tb_zip2(const struct tb *t, const char *omit, const char *manifest, struct buf *out)
{
	json_t *files = json_object(), *man;
	struct zb z;
	char *ms = NULL;
	int r;

	for (size_t i = 0; i < t->n_m; i++) {
		uint8_t h[SHA256_LEN];
		char hex[65];

		if (omit && strcmp(omit, t->m[i].name) == 0) {
			continue;
		}
		if (sha256(t->m[i].data, t->m[i].size, h) < 0) {
			return -EIO;
		}
		hexs(h, SHA256_LEN, hex);
		json_object_set_new(files, t->m[i].name, json_string(hex));
	}
	man = json_pack("{s:s,s:s,s:o}", "format", "tracekit.bundle.v2", "verifier_min_version", "0.4.0", "files",
			files);
	r = manifest ? ((ms = strdup(manifest)) ? 0 : -ENOMEM) : json_jcs_string(man, (size_t)16 << 20, &ms);
	json_decref(man);
	if (r < 0) {
		return r;
	}
	r = zb_init(&z);
	r = r < 0 ? r : zb_add(&z, "manifest.json", ms, strlen(ms), NULL);
	for (size_t i = 0; r >= 0 && i < t->n_m; i++) {
		r = zb_add(&z, t->m[i].name, t->m[i].data, t->m[i].size, NULL);
	}
	r = r < 0 ? r : zb_finish(&z);
	r = r < 0 ? r : buf_put(out, buf_ptr(&z.out), buf_len(&z.out));
	zb_release(&z);
	free(ms);
	return r;
}

int tb_load(struct tb *t, const void *zip, size_t n, const char *trust)
{
	struct bundle *b = NULL;
	const char *why = NULL;
	int r;

	*t = (struct tb){ 0 };
	r = bundle_read(zip, n, &b, &why);
	if (r < 0) {
		return r;
	}
	for (size_t i = 0; r >= 0 && i < b->n; i++) {
		const struct bundle_entry *e = &b->e[i];

		if (strcmp(e->name, "manifest.json") == 0) {
			continue;
		}
		r = tb_set(t, e->name, e->data, e->size);
		if (r >= 0 && strncmp(e->name, "runs/", 5) == 0) {
			const char *p = (const char *)e->data, *end = p + e->size;

			while (p < end && t->n_run < TB_MAX_RECORDS) {
				const char *nl = memchr(p, '\n', (size_t)(end - p));

				if (!nl) {
					r = -EBADMSG;
					break;
				}
				t->run[t->n_run] = strndup(p, (size_t)(nl - p));
				if (!t->run[t->n_run]) {
					r = -ENOMEM;
					break;
				}
				t->n_run++;
				p = nl + 1;
			}
			if (p < end) {
				r = r < 0 ? r : -E2BIG;
			}
		}
	}
	bundle_free(b);
	if (r >= 0) {
		t->trust = strdup(trust);
		r = t->trust ? 0 : -ENOMEM;
	}
	if (r < 0) {
		tb_release(t);
	}
	return r;
}
