/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "crypto.h"
#include "export.h"
#include "json.h"
#include "zipwrite.h"

#include "banned.h"

#define EXPORT_MAX_MEMBERS (8 + EXPORT_MAX_POLICIES)

struct member {
	char *name;
	struct buf data;
};

struct lines_ctx {
	struct buf *out;
	uint64_t first;
	uint64_t last;
	uint64_t count;
};

static int append_line_cb(uint64_t seq, const char *run_key, uint64_t run_seq, const uint8_t hash[32], const char *line,
			  size_t line_len, void *userdata)
{
	struct lines_ctx *c = userdata;
	int r;

	if (c->count == 0) {
		c->first = seq;
	}
	c->last = seq;
	c->count++;
	if ((r = buf_put(c->out, line, line_len)) < 0 || (r = buf_put_u8(c->out, '\n')) < 0) {
		return r;
	}
	return 0;
}

static int hex_of(const void *p, size_t n, char *out)
{
	struct buf b = { 0 };
	int r;

	if ((r = buf_init(&b, 2 * n, 0)) < 0) {
		return r;
	}
	if ((r = hex_encode(p, n, &b)) >= 0) {
		memcpy(out, buf_ptr(&b), 2 * n);
		out[2 * n] = '\0';
	}
	buf_release(&b);
	return r;
}

static int add_proof(json_t *incl, const struct merkle_tree *tree, uint64_t seq, uint64_t size)
{
	struct merkle_proof proof;
	json_t *arr;
	char key[24];
	int r;

	snprintf(key, sizeof(key), "%llu", (unsigned long long)seq);
	if (json_object_get(incl, key)) {
		return 0;
	}
	r = merkle_tree_inclusion(tree, seq, size, &proof);
	if (r < 0) {
		return r;
	}
	arr = json_array();
	if (!arr) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < proof.len; i++) {
		struct buf b = { 0 };
		char *s = NULL;
		if ((r = buf_init(&b, 64, 0)) < 0 ||
		    (r = b64_encode(proof.hash[i], MERKLE_HASH_LEN, B64_STD, &b)) < 0 ||
		    (r = buf_dup_cstring(&b, &s)) < 0) {
			buf_release(&b);
			json_decref(arr);
			return r;
		}
		buf_release(&b);
		r = json_array_append_new(arr, json_string(s));
		free(s);
		if (r < 0) {
			json_decref(arr);
			return -ENOMEM;
		}
	}
	return json_object_set_new(incl, key, arr) < 0 ? -ENOMEM : 0;
}

static int member_new(struct member *m, size_t *n, const char *name, size_t max, struct buf **ret)
{
	if (*n >= EXPORT_MAX_MEMBERS) {
		return -E2BIG;
	}
	m[*n].name = strdup(name);
	if (!m[*n].name) {
		return -ENOMEM;
	}
	if (buf_init(&m[*n].data, max, 0) < 0) {
		free(m[*n].name);
		m[*n].name = NULL;
		return -ENOMEM;
	}
	*ret = &m[(*n)++].data;
	return 0;
}

int export_bundle(struct store *reader, const struct export_input *in, struct buf *out, char *err, size_t err_size)
{
	struct member m[EXPORT_MAX_MEMBERS] = { 0 };
	size_t n = 0;
	struct buf *b;
	struct lines_ctx lc = { 0 };
	_cleanup_json_ json_t *proofs = NULL, *incl = NULL, *manifest = NULL, *files = NULL;
	uint8_t h[SHA256_LEN];
	char hex[65], name[128];
	struct zipwrite z = { 0 };
	int r;

	if (in->checkpoint_size <= in->last_seq || !in->checkpoint_note) {
		snprintf(err, err_size, "no checkpoint covers the run");
		return -EINVAL;
	}
	/* runs/<first 32 hex of sha256("tenant/run_id")>.jsonl */
	if ((r = sha256(in->run_key, strlen(in->run_key), h)) < 0 || (r = hex_of(h, 16, hex)) < 0) {
		return r;
	}
	snprintf(name, sizeof(name), "runs/%s.jsonl", hex);
	if ((r = member_new(m, &n, name, ZIPWRITE_MAX_ENTRY_SIZE, &b)) < 0) {
		goto out;
	}
	lc.out = b;
	r = store_foreach_run_record(reader, in->run_key, in->checkpoint_size, append_line_cb, &lc);
	if (r < 0 || lc.count == 0) {
		if (r == -E2BIG) {
			snprintf(err, err_size,
				 "the run's records exceed the bundle format's 64 MiB member limit "
				 "(ZIPWRITE_MAX_ENTRY_SIZE)");
		} else {
			snprintf(err, err_size, "reading the run's records: %s", r < 0 ? strerror(-r) : "none");
		}
		r = r < 0 ? r : -ENOENT;
		goto out;
	}

	/* keys/records.jsonl */
	if ((r = member_new(m, &n, "keys/records.jsonl", ZIPWRITE_MAX_ENTRY_SIZE, &b)) < 0) {
		goto out;
	}
	for (size_t i = 0; i < in->n_key_seqs; i++) {
		_cleanup_free_ char *line = NULL;
		if (in->key_seqs[i] >= in->checkpoint_size) {
			continue;
		}
		if ((r = store_get_record(reader, in->key_seqs[i], &line)) < 0 ||
		    (r = buf_put(b, line, strlen(line))) < 0 || (r = buf_put_u8(b, '\n')) < 0) {
			snprintf(err, err_size, "reading key record %llu", (unsigned long long)in->key_seqs[i]);
			goto out;
		}
	}

	/* proofs/records.json: the run's first and last record and every key record. */
	incl = json_object();
	if (!incl) {
		r = -ENOMEM;
		goto out;
	}
	if ((r = add_proof(incl, in->tree, lc.first, in->checkpoint_size)) < 0 ||
	    (r = add_proof(incl, in->tree, lc.last, in->checkpoint_size)) < 0) {
		snprintf(err, err_size, "inclusion proof: %s", strerror(-r));
		goto out;
	}
	for (size_t i = 0; i < in->n_key_seqs; i++) {
		if (in->key_seqs[i] < in->checkpoint_size &&
		    (r = add_proof(incl, in->tree, in->key_seqs[i], in->checkpoint_size)) < 0) {
			snprintf(err, err_size, "inclusion proof: %s", strerror(-r));
			goto out;
		}
	}
	snprintf(name, sizeof(name), "checkpoints/%llu.note", (unsigned long long)in->checkpoint_size);
	proofs = json_pack("{s:s,s:I,s:O}", "checkpoint", name, "tree_size", (json_int_t)in->checkpoint_size,
			   "inclusion", incl);
	if (!proofs) {
		r = -ENOMEM;
		goto out;
	}
	if ((r = member_new(m, &n, "proofs/records.json", ZIPWRITE_MAX_ENTRY_SIZE, &b)) < 0 ||
	    (r = json_write_jcs(proofs, b)) < 0) {
		goto out;
	}

	/* checkpoints/<size>.note */
	if ((r = member_new(m, &n, name, ZIPWRITE_MAX_ENTRY_SIZE, &b)) < 0 ||
	    (r = buf_put(b, in->checkpoint_note, strlen(in->checkpoint_note))) < 0) {
		goto out;
	}

	/* policies/<sha256 of bytes>.json */
	for (size_t i = 0; i < in->n_policies; i++) {
		if ((r = sha256(in->policies[i], in->policy_lens[i], h)) < 0 || (r = hex_of(h, 32, hex)) < 0) {
			goto out;
		}
		snprintf(name, sizeof(name), "policies/%s.json", hex);
		if ((r = member_new(m, &n, name, ZIPWRITE_MAX_ENTRY_SIZE, &b)) < 0 ||
		    (r = buf_put(b, in->policies[i], in->policy_lens[i])) < 0) {
			goto out;
		}
	}

	/* manifest.json: every other member's SHA-256 (it is an index, never trusted by a verifier). */
	files = json_object();
	if (!files) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if ((r = sha256(buf_ptr(&m[i].data), buf_len(&m[i].data), h)) < 0 || (r = hex_of(h, 32, hex)) < 0) {
			goto out;
		}
		if (json_object_set_new(files, m[i].name, json_string(hex)) < 0) {
			r = -ENOMEM;
			goto out;
		}
	}
	manifest = json_pack("{s:s,s:s,s:O}", "format", "tracekit.bundle.v2", "verifier_min_version",
			     EXPORT_VERIFIER_MIN_VERSION, "files", files);
	if (!manifest) {
		r = -ENOMEM;
		goto out;
	}
	if ((r = zipwrite_init(&z, out)) < 0) {
		goto out;
	}
	{
		struct buf mb = { 0 };
		if ((r = buf_init(&mb, (size_t)1 << 20, 0)) < 0) {
			goto out;
		}
		r = json_write_jcs(manifest, &mb);
		if (r >= 0) {
			r = zipwrite_add(&z, "manifest.json", buf_ptr(&mb), buf_len(&mb));
		}
		buf_release(&mb);
		if (r < 0) {
			goto out;
		}
	}
	for (size_t i = 0; i < n; i++) {
		r = zipwrite_add(&z, m[i].name, buf_ptr(&m[i].data), buf_len(&m[i].data));
		if (r < 0) {
			snprintf(err, err_size, "zip member %s: %s", m[i].name, strerror(-r));
			goto out;
		}
	}
	r = zipwrite_finish(&z);
out:
	zipwrite_release(&z);
	for (size_t i = 0; i < n; i++) {
		free(m[i].name);
		buf_release(&m[i].data);
	}
	return r;
}
