/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test tool: apply one tampering to a bundle (for instance tkbox-signer's
 * real export) and write the result. The manifest is recomputed over the
 * tampered members (an attacker can always do that) unless the operation is
 * about the manifest itself.
 *
 * usage: tkb-tamper IN.tkb TRUST.json OUT.tkb OP [ARG]
 *   records (prints the run's record count) |
 *   edit N | delete N | swap N | append-forged | rechain N | truncate-tail K |
 *   replace-keys | policy-drop-deny | policy-rename | add-unlisted | add-listed | edit-manifest |
 *   truncate-zip BYTES | flip-byte OFFSET | other-run-name
 */
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "json.h"
#include "tb.h"
#include "verify/record.h"

static char *slurp(const char *path, size_t *ret_n)
{
	FILE *f = fopen(path, "re");
	char *p = NULL;
	size_t cap = 0, n = 0;

	if (!f) {
		return NULL;
	}
	for (;;) {
		if (n + 65536 > cap) {
			char *q = realloc(p, cap = cap * 2 + 65536);

			if (!q) {
				free(p);
				fclose(f);
				return NULL;
			}
			p = q;
		}
		size_t k = fread(p + n, 1, cap - n - 1, f);

		n += k;
		if (k == 0) {
			break;
		}
	}
	fclose(f);
	p[n] = '\0';
	*ret_n = n;
	return p;
}

static int spit(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "we");

	if (!f || fwrite(p, 1, n, f) != n) {
		if (f) {
			fclose(f);
		}
		return -1;
	}
	return fclose(f) == 0 ? 0 : -1;
}

static json_t *parse(const char *s)
{
	struct json_opts o = JSON_OPTS_DEFAULT;
	json_t *v = NULL;

	o.max_bytes = (size_t)64 << 20;
	return json_parse_strict(s, strlen(s), &o, &v) < 0 ? NULL : v;
}

static int set_line(char **slot, json_t *rec)
{
	char *s = json_dumps(rec, JSON_COMPACT);

	if (!s) {
		return -ENOMEM;
	}
	free(*slot);
	*slot = s;
	return 0;
}

/* Edit record i's event (ts changed); rehash: recompute its hash field. */
static int edit(struct tb *t, size_t i, bool rehash)
{
	json_t *rec = parse(t->run[i]), *ev;
	int r;

	if (!rec) {
		return -EBADMSG;
	}
	ev = json_object_get(rec, "event");
	json_object_set_new(ev, "ts", json_string("2001-01-01T00:00:00.000000Z"));
	if (rehash) {
		uint8_t h[32];
		char hs[RECORD_HASH_STRLEN + 1];

		if (record_event_hash(ev, h) < 0) {
			json_decref(rec);
			return -EBADMSG;
		}
		record_hash_format(h, hs);
		json_object_set_new(rec, "hash", json_string(hs));
	}
	r = set_line(&t->run[i], rec);
	json_decref(rec);
	return r;
}

static int relink(struct tb *t, size_t i)
{
	struct record prev = { 0 };
	char hs[RECORD_HASH_STRLEN + 1];
	json_t *rec;
	uint8_t h[32];
	int r;

	if (record_parse(t->run[i - 1], strlen(t->run[i - 1]), &prev) < 0) {
		return -EBADMSG;
	}
	record_hash_format(prev.hash, hs);
	record_release(&prev);
	rec = parse(t->run[i]);
	if (!rec) {
		return -EBADMSG;
	}
	json_object_set_new(json_object_get(rec, "event"), "run_prev_hash", json_string(hs));
	if (record_event_hash(json_object_get(rec, "event"), h) < 0) {
		json_decref(rec);
		return -EBADMSG;
	}
	record_hash_format(h, hs);
	json_object_set_new(rec, "hash", json_string(hs));
	r = set_line(&t->run[i], rec);
	json_decref(rec);
	return r;
}

/* A record after the last one, signed by (priv, pub). */
static int append(struct tb *t, const uint8_t priv[32], const uint8_t pub[32])
{
	struct record last = { 0 };
	char hs[RECORD_HASH_STRLEN + 1], *line;
	json_t *ev;

	if (t->n_run >= TB_MAX_RECORDS || record_parse(t->run[t->n_run - 1], strlen(t->run[t->n_run - 1]), &last) < 0) {
		return -EBADMSG;
	}
	ev = json_deep_copy(last.event);
	record_hash_format(last.hash, hs);
	json_object_set_new(ev, "seq", json_integer(last.seq + 1));
	json_object_set_new(ev, "run_seq", json_integer(last.run_seq + 1));
	json_object_set_new(ev, "prev_hash", json_string(hs));
	json_object_set_new(ev, "run_prev_hash", json_string(hs));
	json_object_set_new(ev, "type", json_string("review"));
	json_object_set_new(ev, "source", json_string("sdk"));
	json_object_set_new(ev, "data", json_pack("{s:s,s:{}}", "reviewer", "forged", "verdict"));
	line = tb_sign(ev, priv, pub);
	json_decref(ev);
	record_release(&last);
	if (!line) {
		return -EINVAL;
	}
	t->run[t->n_run++] = line;
	return 0;
}

static struct tb_member *policy_member(struct tb *t)
{
	for (size_t i = 0; i < t->n_m; i++) {
		if (strncmp(t->m[i].name, "policies/", 9) == 0) {
			return &t->m[i];
		}
	}
	return NULL;
}

/* Replace keys/records.jsonl by a signer.epoch of an attacker key, signed by it, at the same position. */
static int replace_keys(struct tb *t)
{
	struct tb_member *k = tb_get(t, "keys/records.jsonl");
	uint8_t priv[32], pub[32];
	char kid[RECORD_HASH_STRLEN + 1], *spki = NULL, *line, *nl;
	json_t *rec, *ev;
	int r;

	if (!k || !(nl = strchr(k->data, '\n'))) {
		return -EBADMSG;
	}
	*nl = '\0';
	rec = parse(k->data);
	if (!rec || ed25519_keygen(priv, pub) < 0 || record_kid(pub, kid) < 0 || record_spki_b64(pub, &spki) < 0) {
		return -EBADMSG;
	}
	ev = json_object_get(rec, "event");
	json_object_set_new(ev, "data",
			    json_pack("{s:[{s:s,s:s,s:s}]}", "keys", "kid", kid, "alg", "ed25519", "spki", spki));
	line = tb_sign(ev, priv, pub);
	json_decref(rec);
	free(spki);
	if (!line) {
		return -EINVAL;
	}
	r = tb_set(t, "keys/records.jsonl", line, strlen(line));
	if (r >= 0) {
		struct tb_member *m = tb_get(t, "keys/records.jsonl");
		char *d = realloc(m->data, m->size + 2);

		if (!d) {
			r = -ENOMEM;
		} else {
			d[m->size++] = '\n';
			d[m->size] = '\0';
			m->data = d;
		}
	}
	free(line);
	return r;
}

static int policy_edit(struct tb *t, bool rename)
{
	struct tb_member *p = policy_member(t);
	json_t *doc, *deny;
	char *jcs = NULL, name[160];
	int r;

	if (!p || !(doc = parse(p->data))) {
		return -ENOENT;
	}
	deny = json_object_get(doc, "deny");
	if (json_is_array(deny) && json_array_size(deny) > 0) {
		json_array_remove(deny, 0);
	} else {
		json_object_set_new(doc, "deny", json_array());
	}
	r = json_jcs_string(doc, (size_t)64 << 20, &jcs);
	json_decref(doc);
	if (r < 0) {
		return r;
	}
	snprintf(name, sizeof(name), "%s", p->name);
	if (rename) {
		uint8_t h[32];
		static const char d[] = "0123456789abcdef";
		char hex[65];

		if (sha256(jcs, strlen(jcs), h) < 0) {
			free(jcs);
			return -EIO;
		}
		for (size_t i = 0; i < 32; i++) {
			hex[2 * i] = d[h[i] >> 4];
			hex[2 * i + 1] = d[h[i] & 15];
		}
		hex[64] = '\0';
		(void)tb_del(t, name);
		snprintf(name, sizeof(name), "policies/%s.json", hex);
	}
	r = tb_set(t, name, jcs, strlen(jcs));
	free(jcs);
	return r;
}

int main(int argc, char **argv)
{
	const char *op;
	unsigned long arg;
	char *zip, *trust;
	size_t n, tn;
	struct tb t;
	struct buf out = { 0 };
	int r = 0;

	if (argc < 5) {
		fprintf(stderr, "usage: tkb-tamper IN.tkb TRUST.json OUT.tkb OP [ARG]\n");
		return 2;
	}
	op = argv[4];
	arg = argc > 5 ? strtoul(argv[5], NULL, 10) : 0;
	zip = slurp(argv[1], &n);
	trust = slurp(argv[2], &tn);
	if (!zip || !trust) {
		perror("tkb-tamper");
		return 2;
	}
	if (strcmp(op, "truncate-zip") == 0 || strcmp(op, "flip-byte") == 0) {
		if (arg >= n) {
			return 2;
		}
		if (op[0] == 'f') {
			zip[arg] ^= 0x01;
		}
		r = spit(argv[3], zip, op[0] == 't' ? arg : n);
		free(zip);
		free(trust);
		return r < 0 ? 1 : 0;
	}
	if (tb_load(&t, zip, n, trust) < 0 || buf_init(&out, (size_t)700 << 20, 0) < 0) {
		fprintf(stderr, "tkb-tamper: cannot load the bundle\n");
		return 2;
	}
	if (strcmp(op, "records") == 0) {
		printf("%zu\n", t.n_run);
		tb_release(&t);
		free(zip);
		free(trust);
		return 0;
	}
	if (strcmp(op, "edit") == 0 && arg < t.n_run) {
		r = edit(&t, arg, false);
	} else if (strcmp(op, "delete") == 0 && arg < t.n_run) {
		free(t.run[arg]);
		memmove(&t.run[arg], &t.run[arg + 1], (t.n_run - arg - 1) * sizeof(char *));
		t.n_run--;
	} else if (strcmp(op, "swap") == 0 && arg + 1 < t.n_run) {
		char *x = t.run[arg];

		t.run[arg] = t.run[arg + 1];
		t.run[arg + 1] = x;
	} else if (strcmp(op, "append-forged") == 0) {
		uint8_t priv[32], pub[32];

		r = ed25519_keygen(priv, pub);
		r = r < 0 ? r : append(&t, priv, pub);
	} else if (strcmp(op, "rechain") == 0 && arg < t.n_run) {
		r = edit(&t, arg, true);
		for (size_t i = arg + 1; r >= 0 && i < t.n_run; i++) {
			r = relink(&t, i);
		}
	} else if (strcmp(op, "truncate-tail") == 0 && arg < t.n_run) {
		while (arg-- > 0) {
			free(t.run[--t.n_run]);
		}
	} else if (strcmp(op, "replace-keys") == 0) {
		r = replace_keys(&t);
	} else if (strcmp(op, "policy-drop-deny") == 0) {
		r = policy_edit(&t, false);
	} else if (strcmp(op, "policy-rename") == 0) {
		r = policy_edit(&t, true);
	} else if (strcmp(op, "add-listed") == 0) {
		r = tb_set(&t, "notes.txt", "added\n", 6);
	} else if (strcmp(op, "add-unlisted") == 0) {
		r = tb_set(&t, "policies/unlisted.json", "{}", 2);
	} else if (strcmp(op, "edit-manifest") == 0 || strcmp(op, "other-run-name") == 0) {
		/* handled below */
	} else {
		fprintf(stderr, "tkb-tamper: unknown operation or argument out of range\n");
		return 2;
	}
	if (r >= 0 && strncmp(op, "policy", 6) != 0 && strcmp(op, "replace-keys") != 0 && strncmp(op, "add-", 4) != 0) {
		r = tb_write_run(&t);
	}
	if (r >= 0 && strcmp(op, "other-run-name") == 0) {
		struct tb_member *m = tb_get(&t, tb_run_name(&t));

		snprintf(m->name, sizeof(m->name), "runs/0123456789abcdef0123456789abcdef.jsonl");
	}
	if (r >= 0) {
		if (strcmp(op, "add-unlisted") == 0) {
			r = tb_zip2(&t, "policies/unlisted.json", NULL, &out);
		} else if (strcmp(op, "edit-manifest") == 0) {
			struct buf z = { 0 };
			json_t *files = json_object(), *man;
			char *ms = NULL;

			/* The members' hashes, with one digit of the first changed. */
			r = buf_init(&z, (size_t)700 << 20, 0);
			r = r < 0 ? r : tb_zip(&t, &z);
			buf_release(&z);
			for (size_t i = 0; r >= 0 && i < t.n_m; i++) {
				uint8_t h[32];
				char hex[65];
				static const char d[] = "0123456789abcdef";

				r = sha256(t.m[i].data, t.m[i].size, h);
				for (size_t j = 0; j < 32; j++) {
					hex[2 * j] = d[h[j] >> 4];
					hex[2 * j + 1] = d[h[j] & 15];
				}
				hex[64] = '\0';
				if (i == 0) {
					hex[0] = hex[0] == '0' ? '1' : '0';
				}
				json_object_set_new(files, t.m[i].name, json_string(hex));
			}
			man = json_pack("{s:s,s:s,s:o}", "format", "tracekit.bundle.v2", "verifier_min_version",
					"0.4.0", "files", files);
			r = r < 0 ? r : json_jcs_string(man, (size_t)16 << 20, &ms);
			json_decref(man);
			r = r < 0 ? r : tb_zip2(&t, NULL, ms, &out);
			free(ms);
		} else {
			r = tb_zip(&t, &out);
		}
	}
	if (r < 0 || spit(argv[3], buf_ptr(&out), buf_len(&out)) < 0) {
		fprintf(stderr, "tkb-tamper: %s failed (%d)\n", op, r);
		return 1;
	}
	buf_release(&out);
	tb_release(&t);
	free(zip);
	free(trust);
	return 0;
}
