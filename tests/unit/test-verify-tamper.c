/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The verifier end to end, and the tamper campaign (Tracekit's E4 list and
 * more) over bundles made by the test generator (tests/verify/tb.c): each
 * tampering must give a non-zero exit and the expected first failing line,
 * and none may crash the verifier.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "json.h"
#include "tb.h"
#include "verify/note.h"
#include "verify/record.h"
#include "verify/verify.h"

static struct verify_report run_verify(const struct tb *t, const struct buf *zip, bool strict)
{
	struct verify_opts o = { .strict = strict };
	struct verify_report rep;

	assert_int_equal(verify_bundle(buf_ptr(zip), buf_len(zip), t->trust, strlen(t->trust), &o, &rep), 0);
	return rep;
}

static const char *first_failure(const struct verify_report *r)
{
	for (size_t i = 0; i < r->n_checks; i++) {
		if (r->checks[i].status == CHECK_FAIL) {
			return r->checks[i].name;
		}
	}
	return NULL;
}

static void dump(const struct verify_report *r)
{
	struct buf b = { 0 };

	assert_int_equal(buf_init(&b, 1 << 20, 0), 0);
	assert_int_equal(verify_report_text(r, &b), 0);
	fprintf(stderr, "%.*s", (int)buf_len(&b), (const char *)buf_ptr(&b));
	buf_release(&b);
}

/* Zip t, verify, and check the exit code and first failing line. */
static void expect(const struct tb *t, int exit_code, const char *first)
{
	struct buf zip = { 0 };
	struct verify_report rep;
	const char *ff;

	assert_int_equal(buf_init(&zip, (size_t)64 << 20, 0), 0);
	assert_int_equal(tb_zip(t, &zip), 0);
	rep = run_verify(t, &zip, false);
	ff = first_failure(&rep);
	if (rep.exit_code != exit_code || (first && (!ff || strcmp(ff, first) != 0)) || (!first && ff)) {
		dump(&rep);
		fail_msg("want exit %d first failure %s; got %d, %s", exit_code, first ? first : "(none)",
			 rep.exit_code, ff ? ff : "(none)");
	}
	verify_report_release(&rep);
	buf_release(&zip);
}

static struct tb *fresh(size_t calls, bool closed)
{
	struct tb *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	assert_int_equal(tb_build(t, calls, closed), 0);
	return t;
}

static void done(struct tb *t)
{
	tb_release(t);
	free(t);
}

static void test_valid_closed(void **state)
{
	struct tb *t = fresh(3, true);
	struct buf zip = { 0 }, text = { 0 };
	struct verify_report rep;
	json_t *j = NULL;

	(void)state;
	assert_int_equal(buf_init(&zip, (size_t)64 << 20, 0), 0);
	assert_int_equal(tb_zip(t, &zip), 0);
	rep = run_verify(t, &zip, false);
	assert_int_equal(rep.exit_code, 0);
	assert_null(first_failure(&rep));
	assert_string_equal(rep.integrity, "VERIFIED");
	assert_non_null(rep.assurance);
	assert_int_equal(strncmp(rep.assurance, "dev; records ed25519; checkpoint Ed25519 only (tkbox.test/", 58), 0);
	assert_string_equal(rep.isolation, "same-user");
	assert_int_equal(rep.failures, 0);
	assert_int_equal(rep.warnings, 1); /* keys: retirements not proven complete */
	assert_int_equal(buf_init(&text, 1 << 20, 0), 0);
	assert_int_equal(verify_report_text(&rep, &text), 0);
	assert_non_null(strstr((const char *)buf_ptr(&text), "[PASS] manifest \xe2\x80\x94 "));
	assert_non_null(strstr((const char *)buf_ptr(&text), "[PASS] run chain \xe2\x80\x94 "));
	assert_non_null(strstr((const char *)buf_ptr(&text), "[PASS] policy snapshot \xe2\x80\x94 "));
	assert_non_null(strstr((const char *)buf_ptr(&text), "\nIntegrity: VERIFIED.\nAssurance: dev; "));
	assert_int_equal(verify_report_json(&rep, &j), 0);
	assert_int_equal(json_integer_value(json_object_get(j, "exit_code")), 0);
	assert_string_equal(json_string_value(json_object_get(j, "integrity")), "VERIFIED");
	assert_int_equal(json_array_size(json_object_get(j, "checks")), rep.n_checks);
	assert_int_equal(json_array_size(json_object_get(j, "warnings")), 1);
	json_decref(j);
	verify_report_release(&rep);

	/* --strict turns the warning into exit 3. */
	rep = run_verify(t, &zip, true);
	assert_int_equal(rep.exit_code, 3);
	verify_report_release(&rep);
	buf_release(&text);
	buf_release(&zip);
	done(t);
}

static void test_valid_open(void **state)
{
	struct tb *t = fresh(2, false);
	struct buf zip = { 0 };
	struct verify_report rep;

	(void)state;
	assert_int_equal(buf_init(&zip, (size_t)64 << 20, 0), 0);
	assert_int_equal(tb_zip(t, &zip), 0);
	rep = run_verify(t, &zip, false);
	assert_int_equal(rep.exit_code, 0);
	assert_string_equal(rep.integrity, "VERIFIED TO HEAD 2 (open)");
	verify_report_release(&rep);
	buf_release(&zip);
	done(t);
}

/* Replace record i's event field with a new value and re-serialise the line (signature untouched). */
static void edit_record(struct tb *t, size_t i, const char *field, json_t *value, bool rehash)
{
	struct json_opts o = JSON_OPTS_DEFAULT;
	json_t *rec = NULL, *ev;
	char *s;

	assert_int_equal(json_parse_strict(t->run[i], strlen(t->run[i]), &o, &rec), 0);
	ev = json_object_get(rec, "event");
	assert_int_equal(json_object_set_new(ev, field, value), 0);
	if (rehash) {
		uint8_t h[32];
		char hs[RECORD_HASH_STRLEN + 1];

		assert_int_equal(record_event_hash(ev, h), 0);
		record_hash_format(h, hs);
		assert_int_equal(json_object_set_new(rec, "hash", json_string(hs)), 0);
	}
	s = json_dumps(rec, JSON_COMPACT);
	assert_non_null(s);
	free(t->run[i]);
	t->run[i] = s;
	json_decref(rec);
}

static void test_edit(void **state)
{
	struct tb *t = fresh(3, true);

	(void)state;
	edit_record(t, 2, "ts", json_string("2026-11-29T09:00:00.000000Z"), false);
	assert_int_equal(tb_write_run(t), 0);
	expect(t, 1, "signatures");
	done(t);
}

static void test_delete(void **state)
{
	struct tb *t = fresh(3, true);

	(void)state;
	free(t->run[2]);
	memmove(&t->run[2], &t->run[3], (t->n_run - 3) * sizeof(char *));
	t->n_run--;
	assert_int_equal(tb_write_run(t), 0);
	expect(t, 1, "run chain");
	done(t);
}

static void test_swap(void **state)
{
	struct tb *t = fresh(3, true);
	char *x;

	(void)state;
	x = t->run[2];
	t->run[2] = t->run[3];
	t->run[3] = x;
	assert_int_equal(tb_write_run(t), 0);
	expect(t, 1, "run chain");
	done(t);
}

/* A record built from the last one's event with new position fields, signed by (priv, pub). */
static char *forge_after_last(struct tb *t, const uint8_t priv[32], const uint8_t pub[32], const char *type)
{
	struct json_opts o = JSON_OPTS_DEFAULT;
	struct record last = { 0 };
	json_t *ev;
	char hs[RECORD_HASH_STRLEN + 1], *line;

	assert_int_equal(record_parse(t->run[t->n_run - 1], strlen(t->run[t->n_run - 1]), &last), 0);
	ev = json_deep_copy(last.event);
	record_hash_format(last.hash, hs);
	json_object_set_new(ev, "seq", json_integer(last.seq + 1));
	json_object_set_new(ev, "run_seq", json_integer(last.run_seq + 1));
	json_object_set_new(ev, "prev_hash", json_string(hs));
	json_object_set_new(ev, "run_prev_hash", json_string(hs));
	json_object_set_new(ev, "type", json_string(type));
	json_object_set_new(ev, "data", json_pack("{s:s,s:{}}", "reviewer", "forged", "verdict"));
	line = tb_sign(ev, priv, pub);
	assert_non_null(line);
	json_decref(ev);
	record_release(&last);
	(void)o;
	return line;
}

static void test_append_forged(void **state)
{
	uint8_t priv[32], pub[32];
	struct tb *t;

	(void)state;
	/* Signed by an attacker's key, on an open run: the key was never declared. */
	t = fresh(3, false);
	assert_int_equal(ed25519_keygen(priv, pub), 0);
	t->run[t->n_run++] = forge_after_last(t, priv, pub, "review");
	assert_int_equal(tb_write_run(t), 0);
	expect(t, 1, "signatures");
	done(t);
	/* Even with the real key, a record after run.final breaks the run chain. */
	t = fresh(3, true);
	t->run[t->n_run++] = forge_after_last(t, t->rec_priv, t->rec_pub, "review");
	assert_int_equal(tb_write_run(t), 0);
	expect(t, 1, "run chain");
	done(t);
	/* With the real key on an open run, the new last record is not in the checkpointed tree. */
	t = fresh(3, false);
	t->run[t->n_run++] = forge_after_last(t, t->rec_priv, t->rec_pub, "review");
	assert_int_equal(tb_write_run(t), 0);
	expect(t, 1, "inclusion");
	done(t);
}

static void test_edit_rechain(void **state)
{
	struct tb *t = fresh(4, true);

	(void)state;
	/* Edit record 2, recompute its hash, and re-link every later record; no key, so old signatures stay. */
	edit_record(t, 2, "ts", json_string("2026-11-29T09:00:00.000000Z"), true);
	for (size_t i = 3; i < t->n_run; i++) {
		struct record prev = { 0 };
		char hs[RECORD_HASH_STRLEN + 1];

		assert_int_equal(record_parse(t->run[i - 1], strlen(t->run[i - 1]), &prev), 0);
		record_hash_format(prev.hash, hs);
		record_release(&prev);
		edit_record(t, i, "run_prev_hash", json_string(hs), true);
	}
	assert_int_equal(tb_write_run(t), 0);
	expect(t, 1, "signatures");
	done(t);
}

static void test_truncate_tail(void **state)
{
	struct tb *t = fresh(3, true);

	(void)state;
	for (size_t k = 0; k < 2; k++) {
		free(t->run[--t->n_run]);
	}
	assert_int_equal(tb_write_run(t), 0);
	expect(t, 1, "inclusion");
	done(t);
}

static void test_replace_keys(void **state)
{
	struct tb *t = fresh(3, true), *other = fresh(3, true);
	struct tb_member *k = tb_get(other, "keys/records.jsonl");

	(void)state;
	/* Another signer's key file: not in this checkpoint's tree, and of another log. */
	assert_int_equal(tb_set(t, "keys/records.jsonl", k->data, k->size), 0);
	expect(t, 1, "keys");
	/* A whole bundle from another log (its own key, its own checkpoint) under our trust. */
	free(other->trust);
	other->trust = strdup(t->trust);
	expect(other, 1, "checkpoint");
	/* The key file emptied. */
	assert_int_equal(tb_set(t, "keys/records.jsonl", "", 0), 0);
	expect(t, 1, "keys");
	done(t);
	done(other);
}

static void test_policy(void **state)
{
	struct tb *t = fresh(3, true);
	struct tb_member *p = NULL;
	char name[160], *edited;

	(void)state;
	for (size_t i = 0; i < t->n_m; i++) {
		if (strncmp(t->m[i].name, "policies/", 9) == 0) {
			p = &t->m[i];
		}
	}
	assert_non_null(p);
	snprintf(name, sizeof(name), "%s", p->name);
	/* Remove the deny rule, keep the name. */
	edited = strdup("{\"deny\":[],\"version\":2}");
	assert_int_equal(tb_set(t, name, edited, strlen(edited)), 0);
	expect(t, 1, "policy snapshot");
	/* ... and rename it after its new hash: the run still cites the old one. */
	{
		uint8_t h[32];
		char hex[65], nn[160];
		static const char d[] = "0123456789abcdef";

		assert_int_equal(sha256(edited, strlen(edited), h), 0);
		for (size_t i = 0; i < 32; i++) {
			hex[2 * i] = d[h[i] >> 4];
			hex[2 * i + 1] = d[h[i] & 15];
		}
		hex[64] = '\0';
		snprintf(nn, sizeof(nn), "policies/%s.json", hex);
		assert_int_equal(tb_del(t, name), 0);
		assert_int_equal(tb_set(t, nn, edited, strlen(edited)), 0);
		expect(t, 1, "policy snapshot");
		/* ... or drop it. */
		assert_int_equal(tb_del(t, nn), 0);
		expect(t, 1, "policy snapshot");
	}
	free(edited);
	done(t);
}

static enum check_status line_status(const struct verify_report *r, const char *name)
{
	for (size_t i = 0; i < r->n_checks; i++) {
		if (strcmp(r->checks[i].name, name) == 0) {
			return r->checks[i].status;
		}
	}
	fail_msg("no %s line", name);
	return CHECK_FAIL;
}

/* Record i of the run cites policy text number k, whose snapshot is added to the bundle. */
static void cite_policy(struct tb *t, size_t i, size_t k)
{
	struct json_opts o = JSON_OPTS_DEFAULT;
	char text[64], hex[65], name[128], ph[80];
	static const char d[] = "0123456789abcdef";
	json_t *rec = NULL;
	uint8_t h[32];
	char *line;

	snprintf(text, sizeof(text), "{\"deny\":[],\"n\":%zu}", k);
	assert_int_equal(sha256(text, strlen(text), h), 0);
	for (size_t j = 0; j < 32; j++) {
		hex[2 * j] = d[h[j] >> 4];
		hex[2 * j + 1] = d[h[j] & 15];
	}
	hex[64] = '\0';
	snprintf(name, sizeof(name), "policies/%s.json", hex);
	assert_int_equal(tb_set(t, name, text, strlen(text)), 0);
	snprintf(ph, sizeof(ph), "sha256:%s", hex);
	assert_int_equal(json_parse_strict(t->run[i], strlen(t->run[i]), &o, &rec), 0);
	assert_int_equal(json_object_set_new(json_object_get(json_object_get(rec, "event"), "data"), "policy_hash",
					     json_string(ph)),
			 0);
	line = json_dumps(rec, JSON_COMPACT);
	assert_non_null(line);
	free(t->run[i]);
	t->run[i] = line;
	json_decref(rec);
}

/* The cap on distinct policies a run may cite (64): at the cap the line passes, one past it fails. */
static void test_policy_cap(void **state)
{
	struct tb *t = fresh(65, true);
	struct buf zip = { 0 };
	struct verify_report rep;

	(void)state;
	/* Run records 1..65 are the decisions: 64 distinct policies, the 65th decision repeats the first. */
	for (size_t i = 0; i < 64; i++) {
		cite_policy(t, 1 + i, i);
	}
	cite_policy(t, 65, 0);
	assert_int_equal(tb_write_run(t), 0);
	assert_int_equal(buf_init(&zip, (size_t)64 << 20, 0), 0);
	assert_int_equal(tb_zip(t, &zip), 0);
	rep = run_verify(t, &zip, false);
	assert_int_equal(rep.exit_code, 1); /* the edits break the signatures, */
	assert_int_equal(line_status(&rep, "policy snapshot"), CHECK_PASS); /* but the cap is not hit */
	verify_report_release(&rep);
	cite_policy(t, 65, 64);
	assert_int_equal(tb_write_run(t), 0);
	buf_reset(&zip);
	assert_int_equal(tb_zip(t, &zip), 0);
	rep = run_verify(t, &zip, false);
	assert_int_equal(line_status(&rep, "policy snapshot"), CHECK_FAIL);
	verify_report_release(&rep);
	buf_release(&zip);
	done(t);
}

/* MAX_KEYS (64) record keys: 1 + 3 x 16 + 15 would fit; 1 + 4 x 16 = 65 is one past. */
static void test_key_cap(void **state)
{
	struct buf zip = { 0 };
	struct verify_report rep;
	uint8_t seed[32] = { 7 };
	struct tb t;

	(void)state;
	assert_int_equal(buf_init(&zip, (size_t)64 << 20, 0), 0);
	assert_int_equal(tb_build_ex(&t, 1, true, seed, 3), 0); /* 49 keys */
	assert_int_equal(tb_zip(&t, &zip), 0);
	rep = run_verify(&t, &zip, false);
	if (rep.exit_code != 0) {
		dump(&rep);
	}
	assert_int_equal(rep.exit_code, 0);
	verify_report_release(&rep);
	tb_release(&t);
	buf_reset(&zip);
	assert_int_equal(tb_build_ex(&t, 1, true, seed, 4), 0); /* 65 keys */
	assert_int_equal(tb_zip(&t, &zip), 0);
	rep = run_verify(&t, &zip, false);
	assert_int_equal(rep.exit_code, 1);
	assert_string_equal(first_failure(&rep), "keys");
	for (size_t i = 0; i < rep.n_checks; i++) {
		if (rep.checks[i].status == CHECK_FAIL) {
			assert_non_null(strstr(rep.checks[i].detail, "more than 64 record keys"));
			break;
		}
	}
	verify_report_release(&rep);
	tb_release(&t);
	buf_release(&zip);
}

/* Add a witness cosignature to the bundle's checkpoint and pin the witness (class, required) in the trust file. */
static void witness(struct tb *t, const char *cls, int required, bool cosign)
{
	uint8_t wpriv[32], wpub[32];
	struct tb_member *note = NULL;
	struct buf b = { 0 };
	char *wv = NULL, *tr = NULL, *sep;

	for (size_t i = 0; i < t->n_m; i++) {
		if (strncmp(t->m[i].name, "checkpoints/", 12) == 0) {
			note = &t->m[i];
		}
	}
	assert_non_null(note);
	assert_int_equal(ed25519_keygen(wpriv, wpub), 0);
	assert_int_equal(note_vkey_encode("witness.test/w1", NOTE_SIG_COSIGNATURE, wpub, &wv), 0);
	sep = strstr(note->data, "\n\n");
	assert_non_null(sep);
	assert_int_equal(buf_init(&b, 1 << 20, 0), 0);
	assert_int_equal(buf_put(&b, note->data, note->size), 0);
	if (cosign) {
		assert_int_equal(note_append_signature(note->data, (size_t)(sep - note->data) + 1, "witness.test/w1",
						       NOTE_SIG_COSIGNATURE, wpriv, 1764403200, &b),
				 0);
	}
	assert_int_equal(tb_set(t, note->name, buf_ptr(&b), buf_len(&b)), 0);
	assert_true(asprintf(&tr, "%.*s,\"witnesses\":[{\"vkey\":\"%s\",\"class\":\"%s\"}],\"witnesses_required\":%d}",
			     (int)strlen(t->trust) - 1, t->trust, wv, cls, required) > 0);
	free(t->trust);
	t->trust = tr;
	free(wv);
	buf_release(&b);
}

static void test_witnesses(void **state)
{
	struct buf zip = { 0 };
	struct verify_report rep;
	struct tb *t;

	(void)state;
	assert_int_equal(buf_init(&zip, (size_t)64 << 20, 0), 0);
	/* A public witness cosigned, one required: witnessed, with its time. */
	t = fresh(1, true);
	witness(t, "public", 1, true);
	assert_int_equal(tb_zip(t, &zip), 0);
	rep = run_verify(t, &zip, false);
	assert_int_equal(rep.exit_code, 0);
	assert_int_equal(strncmp(rep.assurance, "witnessed; ", 11), 0);
	assert_non_null(strstr(rep.assurance, "cosigned ed25519 by witness.test/w1 (public) at 2025-11-29T08:00:00Z; "
					      "earliest independent anchor 2025-11-29T08:00:00Z"));
	verify_report_release(&rep);
	done(t);
	/* Only an operator-class witness: local. */
	t = fresh(1, true);
	witness(t, "operator", 0, true);
	buf_reset(&zip);
	assert_int_equal(tb_zip(t, &zip), 0);
	rep = run_verify(t, &zip, false);
	assert_int_equal(rep.exit_code, 0);
	assert_int_equal(strncmp(rep.assurance, "local; ", 7), 0);
	verify_report_release(&rep);
	done(t);
	/* One required, none cosigned: the witness quorum fails. */
	t = fresh(1, true);
	witness(t, "public", 1, false);
	buf_reset(&zip);
	assert_int_equal(tb_zip(t, &zip), 0);
	rep = run_verify(t, &zip, false);
	assert_int_equal(rep.exit_code, 1);
	assert_string_equal(first_failure(&rep), "witness quorum");
	verify_report_release(&rep);
	done(t);
	buf_release(&zip);
}

static void test_manifest(void **state)
{
	struct tb *t = fresh(3, true);
	struct buf zip = { 0 };
	struct verify_report rep;
	struct tb_member *m;

	(void)state;
	assert_int_equal(buf_init(&zip, (size_t)64 << 20, 0), 0);
	/* An unlisted file. */
	assert_int_equal(tb_set(t, "policies/extra.json", "{}", 2), 0);
	assert_int_equal(tb_zip2(t, "policies/extra.json", NULL, &zip), 0);
	rep = run_verify(t, &zip, false);
	assert_int_equal(rep.exit_code, 1);
	assert_string_equal(first_failure(&rep), "manifest");
	verify_report_release(&rep);
	assert_int_equal(tb_del(t, "policies/extra.json"), 0);
	/* An edited manifest (one hash changed), a listed file missing. */
	m = &t->m[0];
	{
		char *man = NULL;

		assert_true(asprintf(&man,
				     "{\"files\":{\"%s\":\"%064d\"},\"format\":\"tracekit.bundle.v2\",\"verifier_min_"
				     "version\":\"0.4.0\"}",
				     m->name, 0) > 0);
		buf_reset(&zip);
		assert_int_equal(tb_zip2(t, NULL, man, &zip), 0);
		rep = run_verify(t, &zip, false);
		assert_int_equal(rep.exit_code, 1);
		assert_string_equal(first_failure(&rep), "manifest");
		verify_report_release(&rep);
		free(man);
	}
	/* Not v2 / too new / duplicate key: unusable (exit 2). */
	{
		static const struct {
			const char *man, *integrity;
		} cases[] = {
			{ "{\"files\":{},\"format\":\"tracekit.bundle.v1\",\"verifier_min_version\":\"0.4.0\"}",
			  "UNUSABLE BUNDLE" },
			{ "{\"files\":{},\"format\":\"tracekit.bundle.v2\",\"verifier_min_version\":\"99.0.0\"}",
			  "UNVERIFIABLE (needs tracekit >= 99.0)" },
			{ "{\"files\":{},\"format\":\"tracekit.bundle.v2\",\"format\":\"tracekit.bundle.v2\","
			  "\"verifier_min_version\":\"0.4.0\"}",
			  "UNUSABLE BUNDLE" },
			{ "{\"files\":{},\"format\":\"tracekit.bundle.v2\",\"verifier_min_version\":\"1.0\"}",
			  "UNUSABLE BUNDLE" },
		};
		for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
			buf_reset(&zip);
			assert_int_equal(tb_zip2(t, NULL, cases[i].man, &zip), 0);
			rep = run_verify(t, &zip, false);
			assert_int_equal(rep.exit_code, 2);
			assert_string_equal(rep.integrity, cases[i].integrity);
			assert_string_equal(first_failure(&rep), "bundle readable");
			verify_report_release(&rep);
		}
	}
	buf_release(&zip);
	done(t);
}

static void test_structure(void **state)
{
	struct tb *t = fresh(3, true);
	const char *rn = tb_run_name(t);
	struct tb_member *run;
	char *dup;

	(void)state;
	/* An unexpected member, even listed. */
	assert_int_equal(tb_set(t, "notes.txt", "hi", 2), 0);
	expect(t, 1, "bundle structure");
	assert_int_equal(tb_del(t, "notes.txt"), 0);
	/* A second run file. */
	assert_int_equal(tb_set(t, "runs/00000000000000000000000000000000.jsonl", "", 0), 0);
	expect(t, 1, "bundle structure");
	assert_int_equal(tb_del(t, "runs/00000000000000000000000000000000.jsonl"), 0);
	/* A record line with a duplicate key; a run file without its final newline; an empty run file. */
	run = tb_get(t, rn);
	assert_true(asprintf(&dup, "{\"v\":2,%s\n", run->data + 1) > 0);
	assert_int_equal(tb_set(t, rn, dup, strlen(dup)), 0);
	expect(t, 1, "bundle structure");
	free(dup);
	assert_int_equal(tb_write_run(t), 0);
	run = tb_get(t, rn);
	run->size--;
	expect(t, 1, "bundle structure");
	assert_int_equal(tb_set(t, rn, "", 0), 0);
	expect(t, 1, "bundle structure");
	/* The run under another run's file name. */
	assert_int_equal(tb_write_run(t), 0);
	run = tb_get(t, rn);
	{
		char *data = strndup(run->data, run->size);

		assert_int_equal(tb_del(t, rn), 0);
		assert_int_equal(tb_set(t, "runs/0123456789abcdef0123456789abcdef.jsonl", data, strlen(data)), 0);
		free(data);
	}
	expect(t, 1, "run chain");
	done(t);
}

static void test_checkpoint(void **state)
{
	struct tb *t = fresh(3, true), *other = fresh(1, true);
	struct tb_member *note = NULL;

	(void)state;
	/* Another log key pinned. */
	free(t->trust);
	t->trust = strdup(other->trust);
	expect(t, 1, "checkpoint");
	done(t);
	/* The note body edited (size), the signature kept. */
	t = fresh(3, true);
	for (size_t i = 0; i < t->n_m; i++) {
		if (strncmp(t->m[i].name, "checkpoints/", 12) == 0) {
			note = &t->m[i];
		}
	}
	assert_non_null(note);
	{
		char *nl = strchr(note->data, '\n');

		assert_non_null(nl);
		nl[1] = nl[1] == '9' ? '8' : (char)(nl[1] + 1);
	}
	expect(t, 1, "checkpoint");
	done(t);
	/* Trust files that are not usable: exit 2. */
	t = fresh(1, true);
	{
		static const char *const bad[] = {
			"{}",
			"{\"logs\":[],\"algs\":[\"ed25519\"]}",
			"{\"logs\":[\"x+00000000+AAAA\"],\"algs\":[\"ed25519\"]}",
			"{\"algs\":[\"ed25519\"]}",
			"not json",
		};
		struct buf zip = { 0 };

		assert_int_equal(buf_init(&zip, (size_t)64 << 20, 0), 0);
		assert_int_equal(tb_zip(t, &zip), 0);
		for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
			struct verify_opts o = { 0 };
			struct verify_report rep;

			assert_int_equal(verify_bundle(buf_ptr(&zip), buf_len(&zip), bad[i], strlen(bad[i]), &o, &rep),
					 0);
			assert_int_equal(rep.exit_code, 2);
			assert_string_equal(first_failure(&rep), "trust config");
			verify_report_release(&rep);
		}
		/* An unknown key in an otherwise good trust file. */
		{
			char *tr = NULL;
			struct verify_opts o = { 0 };
			struct verify_report rep;

			assert_true(asprintf(&tr, "%.*s,\"extra\":1}", (int)strlen(t->trust) - 1, t->trust) > 0);
			assert_int_equal(verify_bundle(buf_ptr(&zip), buf_len(&zip), tr, strlen(tr), &o, &rep), 0);
			assert_int_equal(rep.exit_code, 2);
			verify_report_release(&rep);
			free(tr);
		}
		buf_release(&zip);
	}
	done(t);
	done(other);
}

/* Cut the zip at every byte (small bundle) and flip bytes: always refused, never a crash. */
static void test_truncate_and_flip(void **state)
{
	struct tb *t = fresh(2, true);
	struct buf zip = { 0 };
	struct verify_opts o = { 0 };
	size_t n, verified_flips = 0;
	uint8_t *p;

	(void)state;
	assert_int_equal(buf_init(&zip, (size_t)64 << 20, 0), 0);
	assert_int_equal(tb_zip(t, &zip), 0);
	n = buf_len(&zip);
	p = malloc(n);
	assert_non_null(p);
	memcpy(p, buf_ptr(&zip), n);
	for (size_t k = 0; k < n; k++) {
		struct verify_report rep;

		assert_int_equal(verify_bundle(p, k, t->trust, strlen(t->trust), &o, &rep), 0);
		assert_int_equal(rep.exit_code, 2);
		assert_string_equal(first_failure(&rep), "bundle readable");
		verify_report_release(&rep);
	}
	/* Flipping one bit anywhere: never a crash; where it verifies, the byte was outside any hashed content. */
	for (size_t k = 0; k < n; k++) {
		struct verify_report rep;

		p[k] ^= 0x10;
		assert_int_equal(verify_bundle(p, n, t->trust, strlen(t->trust), &o, &rep), 0);
		verified_flips += rep.exit_code == 0;
		verify_report_release(&rep);
		p[k] ^= 0x10;
	}
	fprintf(stderr, "# %zu truncations refused; %zu of %zu one-bit flips still verify (zip metadata only)\n", n,
		verified_flips, n);
	assert_true(verified_flips < n / 10);
	free(p);
	buf_release(&zip);
	done(t);
}

/* ---- the data of each event type (verify/schema.c) ---- */

static const uint8_t data_seed[32] = { 9, 9, 9 };

/*
 * Valid events of every type tkbox-signer writes and of types it does not
 * (Tracekit's, which tkbox verify must accept all the same: among them a
 * policy.external of source import with a span_id, as Tracekit's
 * decision_import writes it, a model.exchange of source gateway and a
 * decision_mismatch gap), with the optional fields the schema allows. @PH@
 * is the generator's policy hash.
 */
static const char accept_events[] =
	"["
	"{\"type\":\"approval.request\",\"top\":{\"request_id\":\"r-1\",\"tool_call_id\":\"c\"},\"data\":{"
	"\"approval_id\":\"a1\",\"policy_hash\":\"@PH@\",\"rule_ids\":[\"TK-SHELL-PARSE\"],"
	"\"expires_at\":\"2026-11-29T08:10:00.000000Z\",\"requester\":\"@LONG@\",\"decision_id\":\"d\","
	"\"salt_id\":\"s1\",\"executor\":\"t1\",\"binding_digest\":\"\",\"binding\":{\"v\":1,\"approval_id\":\"a1\","
	"\"tenant\":\"acme\",\"run_id\":\"run-1\",\"tool_call_id\":\"c\",\"attempt\":0,\"tool\":\"Bash\","
	"\"args_commitment\":\"hmac-sha256:0000000000000000000000000000000000000000000000000000000000000000\","
	"\"args_source\":\"raw\",\"policy_hash\":\"@PH@\",\"nonce\":\"0123456789abcdef0123456789abcdef\","
	"\"expires_at\":\"2026-11-29T08:10:00.000000Z\"}}},"
	"{\"type\":\"approval\",\"data\":{\"tool_use_id\":\"c\",\"approval_id\":\"a1\",\"decision\":\"approve\","
	"\"approver\":\"uid:1001\",\"channel\":\"rpc\",\"approver_uid\":1001,\"wait_ms\":null,\"same_user\":false,"
	"\"self_approved\":false,\"reason\":\"ok\",\"break_glass\":false,"
	"\"approver_identity\":{\"scheme\":\"uid\",\"subject\":\"1001\",\"attested\":true}}},"
	"{\"type\":\"approval.consumed\",\"data\":{\"approval_id\":\"a1\"}},"
	"{\"type\":\"tool.result\",\"source\":\"hook\",\"top\":{\"tool_call_id\":\"c\",\"attempt\":0},\"data\":{"
	"\"tool_use_id\":\"c\",\"ok\":false,\"decision_id\":\"d\",\"duration_ms\":null,"
	"\"output\":{\"value\":{\"status\":\"error\",\"signal\":9,\"signal_name\":\"SIGKILL\"},\"redacted\":false},"
	"\"redaction\":{\"rules\":[],\"count\":0,\"client_claimed\":true,\"client\":{\"rules\":[\"x\"],\"count\":1},"
	"\"client_redaction_incomplete\":true}}},"
	"{\"type\":\"tool.result\",\"source\":\"sdk\",\"data\":{\"tool_use_id\":\"c2\",\"ok\":true,"
	"\"output\":{\"hash\":\"hmac-sha256:1111111111111111111111111111111111111111111111111111111111111111\","
	"\"size\":3,\"redacted\":false}}},"
	"{\"type\":\"approval.refused\",\"data\":{\"tool_use_id\":\"c\",\"approval_id\":\"a1\",\"rule_ids\":[\"TK-"
	"APPROVAL-REQUIRED\"],\"reason\":\"no\"}},"
	"{\"type\":\"approval.binding_mismatch\",\"data\":{\"approval_id\":\"a1\",\"tool_use_id\":\"c\",\"salt_id\":"
	"\"s2\",\"decision_id\":\"d\",\"approved_commitment\":\"hmac-sha256:"
	"2222222222222222222222222222222222222222222222222222222222222222\",\"args_commitment\":\"hmac-sha256:"
	"3333333333333333333333333333333333333333333333333333333333333333\"}},"
	"{\"type\":\"approval.abandoned\",\"data\":{\"approval_id\":\"a2\",\"reason\":\"gone\"}},"
	"{\"type\":\"approval.expired\",\"data\":{\"approval_id\":\"a3\"}},"
	"{\"type\":\"state.write\",\"source\":\"sdk\",\"data\":{\"store\":\"default\",\"key\":\"k\",\"prev_digest\":"
	"null,"
	"\"digest\":\"hmac-sha256:4444444444444444444444444444444444444444444444444444444444444444\"}},"
	"{\"type\":\"model.exchange\",\"source\":\"gateway\",\"top\":{\"tier\":\"T2\"},\"data\":{\"salt_id\":\"s4\","
	"\"exchange_id\":\"x\",\"phase\":\"response\","
	"\"streamed\":true,\"model\":null,\"status\":200,\"added_latency_ms\":1.5,\"attribution\":\"none\","
	"\"usage\":{\"input_tokens\":1,\"output_tokens\":2,\"reasoning_tokens\":null},"
	"\"tool_uses\":[{\"id\":\"u\",\"name\":\"Bash\",\"args_unparseable\":true,\"executed_by\":\"client\"}],"
	"\"response\":{\"value\":[1,2],\"redacted\":false}}},"
	"{\"type\":\"policy.external\",\"source\":\"import\",\"top\":{\"tier\":\"T3\",\"tool_call_id\":\"c\","
	"\"span_id\":\"00f067aa0ba902b7\"},\"data\":{\"system\":\"aws-agentcore-policy\",\"decision\":\"deny\","
	"\"tool_use_id\":\"c\",\"tool\":\"Bash\",\"rule_ids\":[\"refund-limit-1000\"],\"reason\":\"a forbid policy\","
	"\"signature\":\"unverified\",\"record\":{\"hash\":\"hmac-sha256:"
	"8888888888888888888888888888888888888888888888888888888888888888\",\"size\":12},\"identity\":{\"scheme\":"
	"\"mtls\",\"subject\":\"spiffe://acme/pdp\",\"attested\":true},\"salt_id\":\"s5\"}},"
	"{\"type\":\"capture.gap\",\"data\":{\"reason\":\"ran\",\"kind\":\"signer_unavailable\",\"missed_events\":3,"
	"\"from_ts\":null,\"tool_use_id\":null}},"
	"{\"type\":\"capture.gap\",\"top\":{\"tool_call_id\":\"c\"},\"data\":{\"reason\":\"aws-agentcore-policy "
	"decided "
	"deny; the signer decided allow\",\"kind\":\"decision_mismatch\",\"tenant_level\":false}},"
	"{\"type\":\"review\",\"source\":\"sdk\",\"data\":{\"reviewer\":\"tkbox.egress\",\"verdict\":{\"host\":\"e\"},"
	"\"open\":1}},"
	"{\"type\":\"error\",\"source\":\"sdk\",\"data\":{\"message\":\"m\",\"more\":[]}},"
	"{\"type\":\"tool.call\",\"source\":\"hook\",\"top\":{\"tier\":\"T1\",\"capture_layer\":\"L2\",\"stream\":"
	"\"s\","
	"\"client_seq\":4,\"step\":2,\"ts_signed\":\"2026-11-29T08:00:00.000001Z\",\"principal\":\"p\","
	"\"transcript\":{\"path\":\"/t\",\"length\":3,\"hash\":\"hmac-sha256:"
	"5555555555555555555555555555555555555555555555555555555555555555\",\"prefix_hash\":null}},"
	"\"data\":{\"tool_use_id\":\"c\",\"name\":\"Bash\",\"input\":{\"command\":{\"value\":\"ls\",\"redacted\":false}"
	"}}},"
	"{\"type\":\"user.prompt\",\"source\":\"hook\",\"data\":{\"content\":{\"value\":\"hi\",\"redacted\":true}}},"
	"{\"type\":\"model.message\",\"source\":\"transcript\",\"data\":{\"kind\":\"thinking\",\"message_id\":null,"
	"\"content\":{\"value\":\"t\",\"redacted\":false}}},"
	"{\"type\":\"trace.tamper\",\"data\":{\"path\":\"/t\",\"before\":{\"length\":3},\"after\":{\"hash\":null},"
	"\"kind\":\"truncated\"}},"
	"{\"type\":\"reconcile.args_mismatch\",\"data\":{\"layers\":[\"L1\",\"L3\"],\"detail\":\"d\"}},"
	"{\"type\":\"refusal.summary\",\"data\":{\"code\":\"forbidden\",\"count\":2,\"from_ts\":"
	"\"2026-11-29T08:00:00.000000Z\",\"to_ts\":\"2026-11-29T08:00:01.000000Z\",\"identity\":\"uid:1\"}},"
	"{\"type\":\"checkpoint\",\"data\":{\"head_seq\":1,\"head_hash\":"
	"\"6666666666666666666666666666666666666666666666666666666666666666\",\"kid\":\"k\",\"witnesses\":[]}},"
	"{\"type\":\"run.start\",\"source\":\"sdk\",\"data\":{\"agent\":{\"name\":\"a\",\"extra\":1},\"host\":\"h\","
	"\"os_user\":\"u\",\"fail_mode\":\"closed\",\"policy\":{\"version\":\"2\",\"hash\":\"@PH@\"},"
	"\"capture_sources\":[\"hook\",\"sdk\"],\"sandbox\":\"unknown\",\"content_capture\":\"hashed\","
	"\"signer_isolation\":\"same-user\",\"cwd\":null}},"
	"{\"type\":\"run.end\",\"data\":{\"reason\":\"exported\"}},"
	"{\"type\":\"policy.decision\",\"source\":\"hook\",\"data\":{\"tool_use_id\":\"c9\",\"decision\":\"flag\","
	"\"rule_ids\":[],\"reasons\":[\"r\"],\"policy_hash\":\"@PH@\",\"tool\":\"Bash\",\"decision_id\":\"d9\","
	"\"engine\":\"tkbox-policy@0.1.0\",\"nonce\":\"0123456789abcdef0123456789abcdef\","
	"\"expires_at\":\"2026-11-29T08:05:00.000000Z\",\"nondeterministic\":false,\"args_commitment\":"
	"\"hmac-sha256:7777777777777777777777777777777777777777777777777777777777777777\"}}"
	"]";

static char *replace_all(const char *in, const char *what, const char *with)
{
	struct buf b = { 0 };
	const char *p = in, *q;
	char *out = NULL;

	assert_int_equal(buf_init(&b, 1 << 20, 0), 0);
	while ((q = strstr(p, what))) {
		assert_int_equal(buf_put(&b, p, (size_t)(q - p)), 0);
		assert_int_equal(buf_putf(&b, "%s", with), 0);
		p = q + strlen(what);
	}
	assert_int_equal(buf_putf(&b, "%s", p), 0);
	assert_int_equal(buf_dup_cstring(&b, &out), 0);
	buf_release(&b);
	return out;
}

/* The approval.request's binding_digest: sha256(JCS(binding)). */
static void fix_binding(json_t *evs)
{
	size_t i;
	json_t *e;

	json_array_foreach(evs, i, e) {
		json_t *data = json_object_get(e, "data"), *b = json_object_get(data, "binding");
		char *jcs = NULL, hs[RECORD_HASH_STRLEN + 1];
		uint8_t h[SHA256_LEN];

		if (!b) {
			continue;
		}
		assert_int_equal(json_jcs_string(b, 1 << 20, &jcs), 0);
		assert_int_equal(sha256(jcs, strlen(jcs), h), 0);
		record_hash_format(h, hs);
		json_object_set_new(data, "binding_digest", json_string(hs));
		free(jcs);
	}
}

static json_t *accept_set(void)
{
	struct tb plain = { 0 };
	char ph[80] = "", long_req[2 * 256 + 1] = "", *text, *text2;
	json_t *evs;

	/* The policy hash every decision of the generator cites: its snapshot's name. */
	assert_int_equal(tb_build_seeded(&plain, 1, true, data_seed), 0);
	for (size_t i = 0; i < plain.n_m; i++) {
		if (strncmp(plain.m[i].name, "policies/", 9) == 0) {
			snprintf(ph, sizeof(ph), "sha256:%.64s", plain.m[i].name + 9);
		}
	}
	tb_release(&plain);
	assert_int_equal(strlen(ph), 71);
	/* 256 code points in 512 bytes: within the schema's maxLength 256, which counts code points. */
	for (size_t i = 0; i < 256; i++) {
		memcpy(long_req + 2 * i, "\xc3\xa9", 2);
	}
	text = replace_all(accept_events, "@PH@", ph);
	text2 = replace_all(text, "@LONG@", long_req);
	evs = json_loads(text2, JSON_REJECT_DUPLICATES, NULL);
	assert_non_null(evs);
	free(text);
	free(text2);
	fix_binding(evs);
	return evs;
}

/* Set (v non-NULL, stolen) or delete the field at a dotted path in the first event spec of type. */
static void set_path(json_t *evs, const char *type, const char *path, json_t *v)
{
	char buf[128], *dot, *key;
	json_t *o = NULL, *e;
	size_t i;

	json_array_foreach(evs, i, e) {
		if (strcmp(json_string_value(json_object_get(e, "type")), type) == 0) {
			o = e;
			break;
		}
	}
	assert_non_null(o);
	snprintf(buf, sizeof(buf), "%s", path);
	key = buf;
	while ((dot = strchr(key, '.'))) {
		*dot = '\0';
		if (!json_object_get(o, key)) {
			json_object_set_new(o, key, json_object());
		}
		o = json_object_get(o, key);
		key = dot + 1;
	}
	if (v) {
		json_object_set_new(o, key, v);
	} else {
		assert_int_equal(json_object_del(o, key), 0);
	}
}

static json_t *str_repeat(char c, size_t n)
{
	char *p = malloc(n + 1);
	json_t *j;

	assert_non_null(p);
	memset(p, c, n);
	p[n] = '\0';
	j = json_string(p);
	free(p);
	return j;
}

static json_t *many_ids(size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++) {
		json_array_append_new(a, json_string("TK-X"));
	}
	return a;
}

static const struct verify_check *find_check(const struct verify_report *rep, const char *name)
{
	for (size_t i = 0; i < rep->n_checks; i++) {
		if (strcmp(rep->checks[i].name, name) == 0) {
			return &rep->checks[i];
		}
	}
	return NULL;
}

static void test_data_rules(void **state)
{
	struct {
		const char *type, *path;
		json_t *v; /* NULL: delete */
		bool keep_digest; /* the mutation is of the digest itself: do not recompute it */
		const char *want; /* in the signatures line */
	} cases[] = {
		{ "approval.request", "data.binding_digest", NULL, true, "missing required 'binding_digest'" },
		{ "approval.request", "data.decision_id", NULL, false, "missing required 'decision_id'" },
		{ "approval.request", "data.binding.nonce", NULL, false, "missing required 'nonce'" },
		{ "approval.request", "data.binding.extra", json_true(), false, "unexpected field 'extra'" },
		{ "approval.request", "data.binding.attempt", json_string("0"), false, "binding.attempt: wrong type" },
		{ "approval.request", "data.binding.attempt", json_integer(-1), false,
		  "binding.attempt: out of range" },
		{ "approval.request", "data.binding.nonce", json_string("0123456789ABCDEF0123456789ABCDEF"), false,
		  "binding.nonce: does not match" },
		{ "approval.request", "data.binding.v", json_integer(2), false, "binding.v: must be 1" },
		{ "approval.request", "data.binding.args_source", json_string("guessed"), false,
		  "not one of the allowed values" },
		{ "approval.request", "data.binding.tenant", json_string("other"), false,
		  "binding.tenant: not this record's tenant" },
		{ "approval.request", "data.binding_digest",
		  json_string("sha256:0000000000000000000000000000000000000000000000000000000000000000"), true,
		  "binding_digest: not sha256(JCS(binding))" },
		{ "approval.request", "data.rule_ids", many_ids(33), false, "more than 32 items" },
		{ "approval.request", "data.rule_ids", json_pack("[o]", str_repeat('R', 65)), false,
		  "rule_ids[0]: longer than 64" },
		{ "approval.request", "data.requester", str_repeat('u', 257), false, "requester: longer than 256" },
		{ "approval.request", "data.expires_at", json_string("2026-11-29T08:10:00Z"), false,
		  "expires_at: does not match" },
		{ "approval", "data.decision", json_string("maybe"), false, "decision: not one of" },
		{ "approval", "data.self_approved", json_string("yes"), false, "self_approved: wrong type" },
		{ "approval", "data.channel", NULL, false, "missing required 'channel'" },
		{ "approval", "data.approver_identity.extra", json_true(), false, "unexpected field 'extra'" },
		{ "tool.result", "data.output.hash",
		  json_string("hmac-sha256:1111111111111111111111111111111111111111111111111111111111111111"), false,
		  "output: must match exactly one alternative (matched 0)" },
		{ "tool.result", "data.exit_status", json_integer(137), false, "unexpected field 'exit_status'" },
		{ "tool.result", "data.redaction.client_redaction_incomplete", json_false(), false, "must be true" },
		{ "capture.gap", "data.kind", json_string("made_up"), false, "kind: not one of" },
		{ "capture.gap", "data.reason", str_repeat('r', 4097), false, "reason: longer than 4096" },
		{ "review", "data.verdict", NULL, false, "missing required 'verdict'" },
		{ "model.exchange", "data.usage.output_tokens", NULL, false, "missing required 'output_tokens'" },
		{ "model.exchange", "data.tool_uses", json_pack("[{s:s}]", "id", "u"), false,
		  "missing required 'name'" },
		{ "state.write", "data.prev_digest", json_string("sha256:x"), false, "must match exactly one" },
		{ "policy.decision", "data.engine", str_repeat('e', 65), false, "engine: longer than 64" },
		{ "policy.decision", "data.decision", json_string("ask-later"), false, "decision: not one of" },
		{ "run.start", "data.sandbox", NULL, false, "missing required 'sandbox'" },
		{ "reconcile.args_mismatch", "data.layers", json_pack("[s]", "L7"), false, "layers[0]: not one of" },
		{ "refusal.summary", "data.count", json_integer(0), false, "count: out of range" },
		{ "approval.expired", "data.approval_id", json_string("a b"), false,
		  "does not match ^[A-Za-z0-9._:-]+$" },
		/* policy.external (source import), and a model.exchange from the gateway: the schema's rules hold. */
		{ "policy.external", "data.identity", NULL, false, "missing required 'identity'" },
		{ "policy.external", "data.salt_id", NULL, false, "missing required 'salt_id'" },
		{ "policy.external", "data.record.size", NULL, false, "missing required 'size'" },
		{ "policy.external", "data.verdict", json_string("deny"), false, "unexpected field 'verdict'" },
		{ "policy.external", "data.record.salt", json_string("s"), false, "unexpected field 'salt'" },
		{ "policy.external", "data.decision", json_string("flag"), false, "decision: not one of" },
		{ "policy.external", "data.signature", json_string("trusted"), false, "signature: not one of" },
		{ "policy.external", "data.identity.scheme", json_string("password"), false, "scheme: not one of" },
		{ "policy.external", "data.system", json_string(""), false, "system: shorter than 1" },
		{ "policy.external", "top.span_id", json_string("00F067AA0BA902B7"), false,
		  "span_id: does not match ^[0-9a-f]{16}$" },
		{ "policy.external", "top.tier", json_string("T4"), false, "event.tier: not one of" },
		{ "policy.external", "source", json_string("imported"), false, "event.source: not one of" },
		{ "model.exchange", "source", json_string("Gateway"), false, "event.source: not one of" },
		{ "model.exchange", "data.phase", NULL, false, "missing required 'phase'" },
		{ "model.exchange", "data.gateway", json_string("g"), false, "unexpected field 'gateway'" },
		{ "model.exchange", "data.phase", json_string("stream"), false, "phase: not one of" },
		{ "approval.request", "top.request_id", json_string("r 1"), false, "request_id: does not match" },
	};
	struct buf zip = { 0 };
	struct verify_report rep;
	json_t *evs;
	struct tb t;

	(void)state;
	/* Every type the schema has, with optional fields, verifies: tkbox verify accepts what the schema allows. */
	evs = accept_set();
	assert_int_equal(tb_build_events(&t, evs, true, data_seed), 0);
	assert_int_equal(buf_init(&zip, (size_t)64 << 20, 0), 0);
	assert_int_equal(tb_zip(&t, &zip), 0);
	rep = run_verify(&t, &zip, false);
	if (rep.exit_code != 0) {
		dump(&rep);
	}
	assert_int_equal(rep.exit_code, 0);
	assert_string_equal(rep.integrity, "VERIFIED");
	assert_null(strstr(rep.assurance, "approvals: self"));
	/* The imported decision and the call it disagreed on, as Tracekit's verifier reports them: a warning. */
	{
		const struct verify_check *ext = find_check(&rep, "external decisions");
		assert_non_null(ext);
		assert_int_equal(ext->status, CHECK_WARN);
		assert_string_equal(ext->detail,
				    "1 imported: aws-agentcore-policy 1; signatures verified 0, unverified 1; "
				    "1 disagree with the signer");
	}
	verify_report_release(&rep);
	buf_release(&zip);
	tb_release(&t);

	/* A self-approval, as Tracekit's verifier reads it, caps assurance at dev and says so. */
	set_path(evs, "approval", "data.self_approved", json_true());
	assert_int_equal(tb_build_events(&t, evs, true, data_seed), 0);
	assert_int_equal(buf_init(&zip, (size_t)64 << 20, 0), 0);
	assert_int_equal(tb_zip(&t, &zip), 0);
	rep = run_verify(&t, &zip, false);
	assert_int_equal(rep.exit_code, 0);
	assert_true(strncmp(rep.assurance, "dev;", 4) == 0);
	assert_non_null(strstr(rep.assurance, "; approvals: self"));
	verify_report_release(&rep);
	buf_release(&zip);
	tb_release(&t);
	json_decref(evs);

	/*
	 * Each case breaks one data rule in an otherwise valid bundle: the record
	 * is signed by the real key, chained, in the checkpointed tree. Only the
	 * per-type rule can catch it.
	 */
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		const char *detail = NULL;

		evs = accept_set();
		set_path(evs, cases[i].type, cases[i].path, cases[i].v);
		if (!cases[i].keep_digest) {
			fix_binding(evs);
		}
		assert_int_equal(tb_build_events(&t, evs, true, data_seed), 0);
		assert_int_equal(buf_init(&zip, (size_t)64 << 20, 0), 0);
		assert_int_equal(tb_zip(&t, &zip), 0);
		rep = run_verify(&t, &zip, false);
		for (size_t k = 0; k < rep.n_checks; k++) {
			if (rep.checks[k].status == CHECK_FAIL) {
				detail = rep.checks[k].detail;
				assert_string_equal(rep.checks[k].name, "signatures");
				break;
			}
		}
		if (rep.exit_code != 1 || !detail || !strstr(detail, cases[i].want)) {
			dump(&rep);
			fail_msg("case %zu (%s %s): want FAILED with \"%s\"", i, cases[i].type, cases[i].path,
				 cases[i].want);
		}
		assert_string_equal(rep.integrity, "FAILED");
		verify_report_release(&rep);
		buf_release(&zip);
		tb_release(&t);
		json_decref(evs);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_closed),  cmocka_unit_test(test_valid_open),
		cmocka_unit_test(test_edit),	      cmocka_unit_test(test_delete),
		cmocka_unit_test(test_swap),	      cmocka_unit_test(test_append_forged),
		cmocka_unit_test(test_data_rules),    cmocka_unit_test(test_edit_rechain),
		cmocka_unit_test(test_truncate_tail), cmocka_unit_test(test_replace_keys),
		cmocka_unit_test(test_policy),	      cmocka_unit_test(test_witnesses),
		cmocka_unit_test(test_policy_cap),    cmocka_unit_test(test_key_cap),
		cmocka_unit_test(test_manifest),      cmocka_unit_test(test_structure),
		cmocka_unit_test(test_checkpoint),    cmocka_unit_test(test_truncate_and_flip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
