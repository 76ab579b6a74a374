/* SPDX-License-Identifier: Apache-2.0 */
/* trust.json: the strict parser, every refusal and every cap one past. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "crypto.h"
#include "verify/note.h"
#include "verify/trust.h"

static char *vkey(const char *name, uint8_t type)
{
	uint8_t priv[32], pub[32];
	char *s = NULL;

	assert_int_equal(ed25519_keygen(priv, pub), 0);
	assert_int_equal(note_vkey_encode(name, type, pub, &s), 0);
	return s;
}

static int parse(const char *s, struct trust *t)
{
	const char *why = NULL;
	int r = trust_parse(s, strlen(s), t, &why);

	if (r < 0) {
		assert_non_null(why);
	}
	return r;
}

/* {"logs":[n log vkeys],"algs":[n_algs],"witnesses":[n_w]} */
static char *make(size_t n_logs, size_t n_algs, size_t n_w, const char *extra)
{
	struct buf b = { 0 };
	char *s = NULL;

	assert_int_equal(buf_init(&b, 1 << 20, 0), 0);
	assert_int_equal(buf_putf(&b, "{\"logs\":["), 0);
	for (size_t i = 0; i < n_logs; i++) {
		char name[32], *v;

		snprintf(name, sizeof(name), "log%zu.example", i);
		v = vkey(name, NOTE_SIG_ED25519);
		assert_int_equal(buf_putf(&b, "%s\"%s\"", i ? "," : "", v), 0);
		free(v);
	}
	assert_int_equal(buf_putf(&b, "],\"algs\":["), 0);
	for (size_t i = 0; i < n_algs; i++) {
		assert_int_equal(buf_putf(&b, "%s\"%s\"", i ? "," : "", i == 0 ? "ed25519" : "other"), 0);
	}
	assert_int_equal(buf_putf(&b, "],\"witnesses\":["), 0);
	for (size_t i = 0; i < n_w; i++) {
		char name[32], *v;

		snprintf(name, sizeof(name), "w%zu.example", i);
		v = vkey(name, NOTE_SIG_COSIGNATURE);
		assert_int_equal(buf_putf(&b, "%s{\"vkey\":\"%s\",\"class\":\"%s\"}", i ? "," : "", v,
					  i % 2 ? "operator" : "public"),
				 0);
		free(v);
	}
	assert_int_equal(buf_putf(&b, "]%s}", extra ? extra : ""), 0);
	assert_int_equal(buf_dup_cstring(&b, &s), 0);
	buf_release(&b);
	return s;
}

static void test_good(void **state)
{
	struct trust t = { 0 };
	char *s = make(1, 1, 2, ",\"witnesses_required\":1");

	(void)state;
	assert_int_equal(parse(s, &t), 0);
	assert_int_equal(t.n_logs, 1);
	assert_int_equal(t.n_witnesses, 2);
	assert_true(t.alg_ed25519);
	assert_int_equal(t.witnesses_required, 1);
	assert_int_equal(t.wclass[0], WITNESS_PUBLIC);
	assert_int_equal(t.wclass[1], WITNESS_OPERATOR);
	assert_string_equal(t.keys[1].name, "w0.example");
	trust_release(&t);
	free(s);
	/* Tracekit's golden trust.json shape (rekor and monitors accepted, not checked). */
	s = make(1, 1, 0,
		 ",\"rekor\":{\"trusted_root\":{},\"publishing_key\":\"AA==\",\"class\":\"public\"},\"monitors\":[{"
		 "\"vkey\":"
		 "\"m\",\"class\":\"public\",\"max_age_s\":60}]");
	assert_int_equal(parse(s, &t), 0);
	assert_true(t.has_rekor);
	assert_true(t.has_monitors);
	trust_release(&t);
	free(s);
}

static void test_caps(void **state)
{
	struct trust t = { 0 };
	char *s;

	(void)state;
	s = make(TRUST_MAX_LOGS, 1, 0, NULL);
	assert_int_equal(parse(s, &t), 0);
	trust_release(&t);
	free(s);
	s = make(TRUST_MAX_LOGS + 1, 1, 0, NULL);
	assert_int_equal(parse(s, &t), -E2BIG);
	free(s);
	s = make(1, TRUST_MAX_ALGS, 0, NULL);
	assert_int_equal(parse(s, &t), 0);
	trust_release(&t);
	free(s);
	s = make(1, TRUST_MAX_ALGS + 1, 0, NULL);
	assert_int_equal(parse(s, &t), -E2BIG);
	free(s);
	s = make(1, 1, TRUST_MAX_WITNESSES, ",\"witnesses_required\":32");
	assert_int_equal(parse(s, &t), 0);
	trust_release(&t);
	free(s);
	s = make(1, 1, TRUST_MAX_WITNESSES + 1, NULL);
	assert_int_equal(parse(s, &t), -E2BIG);
	free(s);
	s = make(1, 1, 0, ",\"witnesses_required\":33");
	assert_int_equal(parse(s, &t), -EBADMSG);
	free(s);
	/* TRUST_MAX_BYTES: one past is refused before parsing. */
	s = malloc(TRUST_MAX_BYTES + 2);
	assert_non_null(s);
	memset(s, ' ', TRUST_MAX_BYTES + 1);
	s[TRUST_MAX_BYTES + 1] = '\0';
	assert_int_equal(trust_parse(s, TRUST_MAX_BYTES + 1, &t, NULL), -E2BIG);
	free(s);
}

static void test_refusals(void **state)
{
	char *lv = vkey("log.example", NOTE_SIG_ED25519), *wv = vkey("w.example", NOTE_SIG_COSIGNATURE);
	struct trust t = { 0 };
	char *cases[16];
	size_t n = 0;

	(void)state;
	assert_true(asprintf(&cases[n++], "{\"logs\":[\"%s\"]}", lv) > 0); /* no algs */
	assert_true(asprintf(&cases[n++], "{\"algs\":[\"ed25519\"]}") > 0); /* no logs */
	assert_true(asprintf(&cases[n++], "{\"logs\":[],\"algs\":[\"ed25519\"]}") > 0); /* empty logs */
	assert_true(asprintf(&cases[n++], "{\"logs\":[\"%s\"],\"algs\":[]}", lv) > 0); /* empty algs */
	assert_true(asprintf(&cases[n++], "{\"logs\":[\"%s\"],\"algs\":[1]}", lv) > 0); /* alg not a string */
	assert_true(asprintf(&cases[n++], "{\"logs\":[\"%s\"],\"algs\":[\"ed25519\"],\"x\":1}", lv) >
		    0); /* unknown key */
	assert_true(asprintf(&cases[n++], "{\"logs\":[\"%s\"],\"algs\":[\"ed25519\"]}", wv) >
		    0); /* a witness key as log */
	assert_true(asprintf(&cases[n++], "{\"logs\":[\"garbage\"],\"algs\":[\"ed25519\"]}") > 0);
	assert_true(asprintf(&cases[n++],
			     "{\"logs\":[\"%s\"],\"algs\":[\"ed25519\"],\"witnesses\":[{\"vkey\":\"%s\"}]}", lv,
			     wv) > 0); /* no class */
	assert_true(asprintf(&cases[n++],
			     "{\"logs\":[\"%s\"],\"algs\":[\"ed25519\"],\"witnesses\":[{\"vkey\":\"%s\",\"class\":"
			     "\"friend\"}]}",
			     lv, wv) > 0);
	assert_true(asprintf(&cases[n++], "{\"logs\":[\"%s\"],\"algs\":[\"ed25519\"],\"witnesses_required\":-1}", lv) >
		    0);
	assert_true(asprintf(&cases[n++], "{\"logs\":[\"%s\"],\"logs\":[\"%s\"],\"algs\":[\"ed25519\"]}", lv, lv) > 0);
	assert_true(asprintf(&cases[n++], "[\"%s\"]", lv) > 0);
	assert_true(asprintf(&cases[n++], "{\"logs\":[\"%s\"],\"algs\":[\"ed25519\"],\"rekor\":{}}", lv) > 0);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(parse(cases[i], &t), -EBADMSG);
		free(cases[i]);
	}
	/* A hybrid (type 0xff) log key cannot be checked: refused, not ignored. */
	{
		uint8_t raw[33] = { 0xff }, id[4];
		struct buf b = { 0 };
		char *s = NULL;

		assert_int_equal(note_key_id("log.example", 0xff, raw + 1, id), 0);
		assert_int_equal(buf_init(&b, 4096, 0), 0);
		assert_int_equal(buf_putf(&b, "{\"logs\":[\"log.example+%02x%02x%02x%02x+", id[0], id[1], id[2], id[3]),
				 0);
		assert_int_equal(b64_encode(raw, sizeof(raw), B64_STD, &b), 0);
		assert_int_equal(buf_putf(&b, "\"],\"algs\":[\"ed25519\"]}"), 0);
		assert_int_equal(buf_dup_cstring(&b, &s), 0);
		assert_int_equal(parse(s, &t), -EPROTONOSUPPORT);
		free(s);
		buf_release(&b);
	}
	free(lv);
	free(wv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good),
		cmocka_unit_test(test_caps),
		cmocka_unit_test(test_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
