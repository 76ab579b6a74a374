/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tracekit v2 record lines. Vectors: tests/verify/vectors/sig_v2.jsonl (from
 * Tracekit's tests/vectors/sig_v2.jsonl), signed by RFC 8032 test key 1.
 * argv[1] is the vector file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "crypto.h"
#include "json.h"
#include "verify/merkle.h"
#include "verify/record.h"

static const char *vectors_path;

/* RFC 8032 section 7.1, TEST 1. */
static const char rfc8032_seed_hex[] = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
static const char rfc8032_pub_hex[] = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

static void unhex(const char *s, uint8_t *out, size_t want)
{
	struct buf b = { 0 };

	assert_int_equal(buf_init(&b, 4096, 0), 0);
	assert_int_equal(hex_decode(s, strlen(s), &b), 0);
	assert_int_equal(buf_len(&b), want);
	memcpy(out, buf_ptr(&b), want);
	buf_release(&b);
}

static void test_key(uint8_t priv[ED25519_PRIV_LEN], uint8_t pub[ED25519_PUB_LEN])
{
	uint8_t derived[ED25519_PUB_LEN];

	unhex(rfc8032_seed_hex, priv, ED25519_PRIV_LEN);
	unhex(rfc8032_pub_hex, pub, ED25519_PUB_LEN);
	assert_int_equal(ed25519_public_from_private(priv, derived), 0);
	assert_memory_equal(derived, pub, ED25519_PUB_LEN);
}

/* Read the vector lines (at most 8). */
static size_t load_vectors(json_t *out[8])
{
	char *line = NULL;
	size_t cap = 0, n = 0;
	ssize_t len;
	FILE *f;

	assert_non_null(vectors_path);
	f = fopen(vectors_path, "re");
	assert_non_null(f);
	while ((len = getline(&line, &cap, f)) > 0 && n < 8) {
		struct json_opts o = JSON_OPTS_DEFAULT;

		assert_int_equal(line[len - 1], '\n');
		assert_int_equal(json_parse_strict(line, (size_t)len - 1, &o, &out[n]), 0);
		n++;
	}
	free(line);
	fclose(f);
	assert_int_equal(n, 3);
	return n;
}

static char *dump(const json_t *v)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);

	assert_non_null(s);
	return s;
}

static void test_vectors(void **state)
{
	uint8_t priv[ED25519_PRIV_LEN], pub[ED25519_PUB_LEN], h[SHA256_LEN], leaf[MERKLE_HASH_LEN];
	char kid[RECORD_HASH_STRLEN + 1], *spki = NULL;
	json_t *v[8];
	size_t n;

	(void)state;
	test_key(priv, pub);
	assert_int_equal(record_kid(pub, kid), 0);
	assert_string_equal(kid, "sha256:06e3fd8fda29bb60ab59557de61edb0aecdb231134be30e75b455f8e1b792fa9");
	assert_int_equal(record_spki_b64(pub, &spki), 0);
	assert_string_equal(spki, "MCowBQYDK2VwAyEA11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=");
	{
		uint8_t back[ED25519_PUB_LEN];

		assert_int_equal(record_spki_b64_decode(spki, strlen(spki), back), 0);
		assert_memory_equal(back, pub, ED25519_PUB_LEN);
		/* An SPKI of another algorithm (X25519, OID 1.3.101.110) is refused. */
		assert_int_equal(record_spki_b64_decode(
					 "MCowBQYDK2VuAyEA11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=", 60, back),
				 -EBADMSG);
	}
	free(spki);

	n = load_vectors(v);
	for (size_t i = 0; i < n; i++) {
		json_t *event = json_object_get(v[i], "event"), *rec = json_object_get(v[i], "record");
		const char *msg = json_string_value(json_object_get(v[i], "message"));
		const char *want_sig = json_string_value(json_object_get(rec, "sig"));
		const char *want_hash = json_string_value(json_object_get(rec, "hash"));
		struct record r = { 0 }, built = { 0 };
		struct buf m = { 0 };
		char *line = NULL, *vline;

		assert_non_null(event);
		assert_non_null(msg);
		/* The signature message. */
		assert_int_equal(buf_init(&m, 8192, 0), 0);
		assert_int_equal(record_sigmsg(event, kid, want_hash, &m), 0);
		assert_int_equal(buf_len(&m), strlen(msg));
		assert_memory_equal(buf_ptr(&m), msg, strlen(msg));
		buf_release(&m);

		/* The vector's own line (not JCS: key order as written) parses and verifies. */
		vline = dump(rec);
		assert_int_equal(record_parse(vline, strlen(vline), &r), 0);
		assert_int_equal(record_check_hash(&r), 0);
		assert_int_equal(record_verify_sig(&r, pub), 0);
		assert_int_equal(r.seq, (int64_t)i);
		assert_string_equal(r.tenant, "acme");
		assert_string_equal(r.run_id, "run-1");
		assert_string_equal(r.log_id, "0123456789abcdef0123456789abcdef");
		assert_non_null(r.type);

		/* Ed25519 is deterministic: building the record again gives the same hash and signature. */
		assert_int_equal(record_build(event, priv, pub, &line, h), 0);
		assert_null(strchr(line, '\n'));
		assert_int_equal(record_parse(line, strlen(line), &built), 0);
		assert_memory_equal(built.hash, r.hash, SHA256_LEN);
		assert_memory_equal(h, r.hash, SHA256_LEN);
		assert_memory_equal(built.sig, r.sig, ED25519_SIG_LEN);
		assert_non_null(strstr(line, want_sig));
		assert_int_equal(record_verify_sig(&built, pub), 0);
		record_release(&built);
		record_release(&r);
		free(line);
		free(vline);
	}
	/* format-v2.md section 5: the leaf hash of record-signer-epoch. */
	{
		struct record r = { 0 };
		char *vline = dump(json_object_get(v[0], "record"));
		uint8_t want[MERKLE_HASH_LEN];

		assert_int_equal(record_parse(vline, strlen(vline), &r), 0);
		assert_int_equal(merkle_leaf_hash(r.hash, SHA256_LEN, leaf), 0);
		unhex("252e000747132185f241d03274ef087f1eccb5d708dc18b49c9d990f21059060", want, sizeof(want));
		assert_memory_equal(leaf, want, sizeof(want));
		record_release(&r);
		free(vline);
	}
	for (size_t i = 0; i < n; i++) {
		json_decref(v[i]);
	}
}

/* A record line of vector 2 (tool.call) with one change applied by fn. */
static char *mutated(json_t *rec, void (*fn)(json_t *))
{
	json_t *c = json_deep_copy(rec);
	char *s;

	assert_non_null(c);
	fn(c);
	s = dump(c);
	json_decref(c);
	return s;
}

static void edit_ts(json_t *r)
{
	assert_int_equal(
		json_object_set_new(json_object_get(r, "event"), "ts", json_string("2026-10-09T12:00:01.000000Z")), 0);
}

static void edit_ts_rehash(json_t *r)
{
	uint8_t h[SHA256_LEN];
	char s[RECORD_HASH_STRLEN + 1];

	edit_ts(r);
	assert_int_equal(record_event_hash(json_object_get(r, "event"), h), 0);
	record_hash_format(h, s);
	assert_int_equal(json_object_set_new(r, "hash", json_string(s)), 0);
}

static void flip_sig(json_t *r)
{
	char *s = strdup(json_string_value(json_object_get(r, "sig")));

	assert_non_null(s);
	s[5] = s[5] == 'A' ? 'B' : 'A';
	assert_int_equal(json_object_set_new(r, "sig", json_string(s)), 0);
	free(s);
}

static void other_kid(json_t *r)
{
	assert_int_equal(
		json_object_set_new(
			r, "kid",
			json_string("sha256:16e3fd8fda29bb60ab59557de61edb0aecdb231134be30e75b455f8e1b792fa9")),
		0);
}

static void alg_ed448(json_t *r)
{
	assert_int_equal(json_object_set_new(r, "alg", json_string("ed448")), 0);
}
static void v1(json_t *r)
{
	assert_int_equal(json_object_set_new(r, "v", json_integer(1)), 0);
}
static void v_real(json_t *r)
{
	assert_int_equal(json_object_set_new(r, "v", json_real(2.0)), 0);
}
static void extra_key(json_t *r)
{
	assert_int_equal(json_object_set_new(r, "x", json_true()), 0);
}
static void no_sig(json_t *r)
{
	assert_int_equal(json_object_del(r, "sig"), 0);
}
static void upper_hash(json_t *r)
{
	assert_int_equal(
		json_object_set_new(
			r, "hash",
			json_string("sha256:C817212E4BE95EF7179D61B6D44BB58937C445963E78BB703E881ACE543D04FC")),
		0);
}
static void short_sig(json_t *r)
{
	/* 63 bytes. */
	assert_int_equal(json_object_set_new(r, "sig",
					     json_string("dbgA93SErkTdmfX/zi0Y2UXdP6n/up/"
							 "8AtBwxl5elV2sm4SuoED9NzLR8xlAoYEQ++NL1L3BEaJBjNfbgqcM")),
			 0);
}
static void no_run_seq(json_t *r)
{
	assert_int_equal(json_object_del(json_object_get(r, "event"), "run_seq"), 0);
}
static void neg_seq(json_t *r)
{
	assert_int_equal(json_object_set_new(json_object_get(r, "event"), "seq", json_integer(-1)), 0);
}
static void real_seq(json_t *r)
{
	assert_int_equal(json_object_set_new(json_object_get(r, "event"), "seq", json_real(2.0)), 0);
}
static void bad_prev(json_t *r)
{
	assert_int_equal(json_object_set_new(json_object_get(r, "event"), "prev_hash", json_string("sha256:00")), 0);
}
static void event_array(json_t *r)
{
	assert_int_equal(json_object_set_new(r, "event", json_array()), 0);
}

static void test_tamper(void **state)
{
	uint8_t priv[ED25519_PRIV_LEN], pub[ED25519_PUB_LEN], opriv[ED25519_PRIV_LEN], opub[ED25519_PUB_LEN];
	struct record r = { 0 };
	json_t *v[8], *rec;
	char *s;

	(void)state;
	test_key(priv, pub);
	assert_int_equal(ed25519_keygen(opriv, opub), 0);
	load_vectors(v);
	rec = json_object_get(v[2], "record");

	/* Edited event: the hash no longer matches; re-hashed: the signature no longer holds. */
	s = mutated(rec, edit_ts);
	assert_int_equal(record_parse(s, strlen(s), &r), 0);
	assert_int_equal(record_check_hash(&r), -EBADMSG);
	record_release(&r);
	free(s);
	s = mutated(rec, edit_ts_rehash);
	assert_int_equal(record_parse(s, strlen(s), &r), 0);
	assert_int_equal(record_check_hash(&r), 0);
	assert_int_equal(record_verify_sig(&r, pub), -EBADMSG);
	record_release(&r);
	free(s);
	/* Flipped signature. */
	s = mutated(rec, flip_sig);
	assert_int_equal(record_parse(s, strlen(s), &r), 0);
	assert_int_equal(record_verify_sig(&r, pub), -EBADMSG);
	record_release(&r);
	free(s);
	/* Another kid: the key does not match it. */
	s = mutated(rec, other_kid);
	assert_int_equal(record_parse(s, strlen(s), &r), 0);
	assert_int_equal(record_verify_sig(&r, pub), -EBADMSG);
	record_release(&r);
	free(s);
	/* The right line under another key. */
	s = dump(rec);
	assert_int_equal(record_parse(s, strlen(s), &r), 0);
	assert_int_equal(record_verify_sig(&r, opub), -EBADMSG);
	assert_int_equal(record_verify_sig(&r, pub), 0);
	record_release(&r);
	free(s);

	/* Structural refusals. */
	{
		static const struct {
			void (*fn)(json_t *);
			int want;
		} cases[] = {
			{ alg_ed448, -EPROTONOSUPPORT }, { v1, -EBADMSG },	   { v_real, -EBADMSG },
			{ extra_key, -EBADMSG },	 { no_sig, -EBADMSG },	   { upper_hash, -EBADMSG },
			{ short_sig, -EBADMSG },	 { no_run_seq, -EBADMSG }, { neg_seq, -EBADMSG },
			{ real_seq, -EBADMSG },		 { bad_prev, -EBADMSG },   { event_array, -EBADMSG },
		};
		for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
			s = mutated(rec, cases[i].fn);
			assert_int_equal(record_parse(s, strlen(s), &r), cases[i].want);
			assert_null(r.event);
			free(s);
		}
	}
	/* Duplicate keys, trailing garbage, a trailing newline are refused by the strict parser. */
	s = dump(rec);
	{
		size_t n = strlen(s);
		char *dup = malloc(n + 32);

		assert_non_null(dup);
		memcpy(dup, "{\"v\":2,", 7);
		memcpy(dup + 7, s + 1, n);
		assert_int_equal(record_parse(dup, strlen(dup), &r), -EBADMSG);
		memcpy(dup, s, n);
		memcpy(dup + n, "\n", 2);
		assert_int_equal(record_parse(dup, n + 1, &r), 0); /* JSON whitespace after the value is allowed */
		record_release(&r);
		memcpy(dup + n, "x", 2);
		assert_int_equal(record_parse(dup, n + 1, &r), -EBADMSG);
		free(dup);
	}
	free(s);
	/* RECORD_MAX_LINE: one past is refused before parsing. */
	s = malloc(RECORD_MAX_LINE + 1);
	assert_non_null(s);
	memset(s, ' ', RECORD_MAX_LINE + 1);
	assert_int_equal(record_parse(s, RECORD_MAX_LINE + 1, &r), -E2BIG);
	free(s);
	for (size_t i = 0; i < 3; i++) {
		json_decref(v[i]);
	}
}

static void test_build_refusals(void **state)
{
	uint8_t priv[ED25519_PRIV_LEN], pub[ED25519_PUB_LEN];
	json_t *ev = json_pack("{s:s, s:s, s:s, s:I, s:s, s:I, s:s}", "log_id", "00", "tenant", "t", "run_id", "r",
			       "seq", (json_int_t)0, "prev_hash", "p", "run_seq", (json_int_t)0, "run_prev_hash", "q");
	char *line = NULL;

	(void)state;
	test_key(priv, pub);
	assert_non_null(ev);
	assert_int_equal(record_build(ev, priv, pub, &line, NULL), 0);
	free(line);
	line = NULL;
	assert_int_equal(json_object_del(ev, "tenant"), 0);
	assert_int_equal(record_build(ev, priv, pub, &line, NULL), -EINVAL);
	assert_null(line);
	assert_int_equal(json_object_set_new(ev, "tenant", json_string("t")), 0);
	assert_int_equal(json_object_set_new(ev, "seq", json_integer(JSON_MAX_SAFE_INT + 1)), 0);
	assert_int_equal(record_build(ev, priv, pub, &line, NULL), -EINVAL);
	json_decref(ev);
	assert_int_equal(record_hash_parse("sha256:", (uint8_t[32]){ 0 }), -EBADMSG);
}

/* JCS of the whole record object, as the line was built before record_line concatenated it. */
static char *jcs_line_of(const char *line)
{
	struct json_opts opts = { .max_bytes = RECORD_MAX_LINE, .max_depth = 0, .want_top = JSON_OBJECT };
	json_t *doc = NULL;
	char *out = NULL;

	assert_int_equal(json_parse_strict(line, strlen(line), &opts, &doc), 0);
	assert_int_equal(json_jcs_string(doc, RECORD_MAX_LINE, &out), 0);
	json_decref(doc);
	return out;
}

/*
 * The line record_build concatenates is byte for byte the JCS of the record object, for the vectors' events and for
 * events whose strings need escaping (quotes, backslashes, controls, non-ASCII, '/'); record_build_jcs given the
 * event's JCS gives the same line.
 */
static void test_line_is_jcs(void **state)
{
	uint8_t priv[ED25519_PRIV_LEN], pub[ED25519_PUB_LEN], h1[SHA256_LEN], h2[SHA256_LEN];
	json_t *v[8], *events[12];
	size_t n, ne = 0;

	(void)state;
	test_key(priv, pub);
	n = load_vectors(v);
	for (size_t i = 0; i < n; i++) {
		events[ne++] = json_incref(json_object_get(v[i], "event"));
	}
	events[ne++] = json_pack("{s:s, s:s, s:s, s:I, s:s, s:I, s:s, s:{s:s, s:[i, b, n]}, s:s}", "log_id", "l/x",
				 "tenant", "t\"q\\", "run_id", "r\u00e9\u2028", "seq", (json_int_t)7, "prev_hash",
				 "sha256:00", "run_seq", (json_int_t)3, "run_prev_hash", "sha256:11", "data", "k\"/",
				 "\x01\x1f<>&", "z", 5, 1, "type", "\xf0\x9f\x98\x80");
	for (size_t i = 0; i < ne; i++) {
		struct buf jcs = { 0 };
		char *line = NULL, *line2 = NULL, *want;

		assert_non_null(events[i]);
		assert_int_equal(record_build(events[i], priv, pub, &line, h1), 0);
		want = jcs_line_of(line);
		assert_string_equal(line, want);
		assert_int_equal(buf_init(&jcs, RECORD_MAX_EVENT_JCS, 0), 0);
		assert_int_equal(record_event_jcs(events[i], &jcs, h2), 0);
		assert_memory_equal(h1, h2, SHA256_LEN);
		assert_int_equal(
			record_build_jcs(events[i], (const char *)buf_ptr(&jcs), buf_len(&jcs), priv, pub, &line2, h2),
			0);
		assert_string_equal(line2, line);
		assert_memory_equal(h1, h2, SHA256_LEN);
		buf_release(&jcs);
		free(want);
		free(line);
		free(line2);
		json_decref(events[i]);
	}
	for (size_t i = 0; i < n; i++) {
		json_decref(v[i]);
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vectors),
		cmocka_unit_test(test_tamper),
		cmocka_unit_test(test_build_refusals),
		cmocka_unit_test(test_line_is_jcs),
	};

	vectors_path = argc > 1 ? argv[1] : NULL;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
