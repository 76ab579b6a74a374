/* SPDX-License-Identifier: Apache-2.0 */
/*
 * C2SP signed notes and checkpoints. The vector is Tracekit's
 * tests/vectors/c2sp_checkpoint.json (Cygnux-Labs/Tracekit, MIT; its log
 * signature is also what golang.org/x/mod/sumdb/note produces).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "crypto.h"
#include "verify/note.h"

#define LOG_NAME "tracekit.example.org/log/0190f3a0-test"
static const char log_skey_b64[] = "AYNv8YTntBseE8tf2J+h3pjburmenSkYkT/0O4alx8IT";
static const char log_vkey[] = LOG_NAME "+070965d6+AZsfhHkc/HZjBFhU04netcqVRJ2HXydqg4QLBgqznPxx";
static const char wit_vkey[] = "witness.example.org/w1+257cc7f1+BGG3op9v3HIXXDPBmFc/0CioJHhGCXc+pyvvFPlBZdYO";
static const char text[] = LOG_NAME "\n13\nMi7CJiZLruMIePTlzHPx4mYt0B1o8dZ+0VjPECnCnOY=\n";
static const char log_line[] =
	"\xe2\x80\x94 " LOG_NAME
	" Bwll1vSm1GBu/u3FzyhOMXK1fwzvztQj15+2YVxT2JheD9i+UdVmejDz2e+M4AtxUuJpen36NSGqXemdYiILAxETUQU=\n";
static const char wit_line[] =
	"\xe2\x80\x94 witness.example.org/w1 "
	"JXzH8QAAAABo53gAZglDLueWaKJVPcnyj3WBkywAF6aWpFAGHa4yMEkQYe/u9Gvb6/T13SPTtayVz0RIPUTq64LAPxavF/"
	"mraKi2Cg==\n";

struct keys {
	struct note_vkey k[2];
};

static int setup_keys(void **state)
{
	struct keys *ks = calloc(1, sizeof(*ks));

	assert_non_null(ks);
	assert_int_equal(note_vkey_parse(log_vkey, strlen(log_vkey), &ks->k[0]), 0);
	assert_int_equal(note_vkey_parse(wit_vkey, strlen(wit_vkey), &ks->k[1]), 0);
	*state = ks;
	return 0;
}

static int teardown_keys(void **state)
{
	struct keys *ks = *state;

	note_vkey_release(&ks->k[0]);
	note_vkey_release(&ks->k[1]);
	free(ks);
	return 0;
}

/* text "\n" lines..., as a malloc'ed string. */
static char *make_note(const char *t, const char *l1, const char *l2)
{
	struct buf b = { 0 };
	char *s = NULL;

	assert_int_equal(buf_init(&b, NOTE_MAX_BYTES * 2, 0), 0);
	assert_int_equal(buf_putf(&b, "%s\n%s%s", t, l1 ? l1 : "", l2 ? l2 : ""), 0);
	assert_int_equal(buf_dup_cstring(&b, &s), 0);
	buf_release(&b);
	return s;
}

static void log_seed(uint8_t seed[ED25519_PRIV_LEN])
{
	struct buf b = { 0 };

	assert_int_equal(buf_init(&b, 64, 0), 0);
	assert_int_equal(b64_decode(log_skey_b64, strlen(log_skey_b64), B64_STD, &b), 0);
	assert_int_equal(buf_len(&b), 1 + ED25519_PRIV_LEN);
	assert_int_equal(buf_ptr(&b)[0], 0x01);
	memcpy(seed, buf_ptr(&b) + 1, ED25519_PRIV_LEN);
	buf_release(&b);
}

static void test_vkey_vector(void **state)
{
	struct keys *ks = *state;
	char *enc = NULL;

	assert_string_equal(ks->k[0].name, LOG_NAME);
	assert_int_equal(ks->k[0].type, NOTE_SIG_ED25519);
	assert_memory_equal(ks->k[0].key_id, "\x07\x09\x65\xd6", 4);
	assert_int_equal(ks->k[1].type, NOTE_SIG_COSIGNATURE);
	assert_memory_equal(ks->k[1].key_id, "\x25\x7c\xc7\xf1", 4);
	assert_int_equal(note_vkey_encode(ks->k[0].name, ks->k[0].type, ks->k[0].pub, &enc), 0);
	assert_string_equal(enc, log_vkey);
	free(enc);
	assert_int_equal(note_vkey_encode(ks->k[1].name, ks->k[1].type, ks->k[1].pub, &enc), 0);
	assert_string_equal(enc, wit_vkey);
	free(enc);
}

static void expect_vkey_refused(const char *s, int want)
{
	struct note_vkey k = { 0 };

	assert_int_equal(note_vkey_parse(s, strlen(s), &k), want);
	assert_null(k.name);
}

static void test_vkey_refusals(void **state)
{
	char long_name[NOTE_MAX_NAME + 2];
	uint8_t pub[ED25519_PUB_LEN] = { 9 };
	char *enc = NULL;

	(void)state;
	expect_vkey_refused("", -EBADMSG);
	expect_vkey_refused("noplus", -EBADMSG);
	expect_vkey_refused("+070965d6+AZsfhHkc/HZjBFhU04netcqVRJ2HXydqg4QLBgqznPxx", -EBADMSG);
	expect_vkey_refused(LOG_NAME "+070965d7+AZsfhHkc/HZjBFhU04netcqVRJ2HXydqg4QLBgqznPxx", -EBADMSG);
	expect_vkey_refused(LOG_NAME "+070965D6+AZsfhHkc/HZjBFhU04netcqVRJ2HXydqg4QLBgqznPxx", -EBADMSG);
	expect_vkey_refused(LOG_NAME "+070965d+AZsfhHkc/HZjBFhU04netcqVRJ2HXydqg4QLBgqznPxx", -EBADMSG);
	expect_vkey_refused(LOG_NAME "+070965d6+AZsfhHkc/HZjBFhU04netcqVRJ2HXydqg4QLBgqznPx", -EBADMSG);
	expect_vkey_refused(LOG_NAME "+070965d6+AZsfhHkc/HZjBFhU04netcqVRJ2HXydqg4QLBgqznPxx=", -EBADMSG);
	expect_vkey_refused(LOG_NAME "+070965d6+AZsfhHkc/HZjBFhU04netcqVRJ2HXydqg4QLBgqznPxy", -EBADMSG);
	expect_vkey_refused("bad name+070965d6+AZsfhHkc/HZjBFhU04netcqVRJ2HXydqg4QLBgqznPxx", -EBADMSG);
	/* A well-formed vkey of an unknown type (0x02). */
	expect_vkey_refused(LOG_NAME "+070965d6+Apsfhhkc/HZjBFhU04netcqVRJ2HXydqg4QLBgqznPxx", -EPROTONOSUPPORT);
	/* Names: one past NOTE_MAX_NAME, '+', whitespace. */
	memset(long_name, 'a', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	assert_int_equal(note_vkey_encode(long_name, NOTE_SIG_ED25519, pub, &enc), -EINVAL);
	long_name[NOTE_MAX_NAME] = '\0';
	assert_int_equal(note_vkey_encode(long_name, NOTE_SIG_ED25519, pub, &enc), 0);
	{
		struct note_vkey k = { 0 };

		assert_int_equal(note_vkey_parse(enc, strlen(enc), &k), 0);
		assert_string_equal(k.name, long_name);
		note_vkey_release(&k);
	}
	free(enc);
	assert_int_equal(note_vkey_encode("a+b", NOTE_SIG_ED25519, pub, &enc), -EINVAL);
	assert_int_equal(note_vkey_encode("a b", NOTE_SIG_ED25519, pub, &enc), -EINVAL);
	assert_int_equal(note_vkey_encode("", NOTE_SIG_ED25519, pub, &enc), -EINVAL);
}

static void test_open_vector(void **state)
{
	struct keys *ks = *state;
	struct note_opened o = { 0 };
	struct checkpoint c = { 0 };
	char *note = make_note(text, log_line, wit_line);

	assert_int_equal(note_open(note, strlen(note), ks->k, 2, &o), 0);
	assert_true(o.verified[0]);
	assert_true(o.verified[1]);
	assert_int_equal(o.n_sigs, 2);
	assert_int_equal(o.n_unknown, 0);
	assert_int_equal(o.timestamp[1], 0x68e77800);
	assert_int_equal(o.text_len, strlen(text));
	assert_string_equal(o.text, text);
	note_opened_release(&o);

	/* Only the log key pinned: the witness line is ignored and counted. */
	assert_int_equal(checkpoint_open(note, strlen(note), ks->k, 1, &c, &o), 0);
	assert_string_equal(c.origin, LOG_NAME);
	assert_int_equal(c.size, 13);
	assert_int_equal(o.n_unknown, 1);
	assert_int_equal(c.n_extensions, 0);
	checkpoint_release(&c);
	note_opened_release(&o);

	/* Only the witness pinned: it verifies, but no log key named after the origin signed. */
	assert_int_equal(note_open(note, strlen(note), &ks->k[1], 1, &o), 0);
	note_opened_release(&o);
	assert_int_equal(checkpoint_open(note, strlen(note), &ks->k[1], 1, &c, NULL), -EKEYREJECTED);
	assert_null(c.origin);
	free(note);
}

static void test_sign_matches_vector(void **state)
{
	struct keys *ks = *state;
	uint8_t seed[ED25519_PRIV_LEN], wpriv[ED25519_PRIV_LEN], wpub[ED25519_PUB_LEN];
	struct note_vkey keys[2] = { ks->k[0], { 0 } };
	struct note_opened o = { 0 };
	struct buf b = { 0 };
	char *note = NULL, *want = make_note(text, log_line, NULL), *wv = NULL;

	log_seed(seed);
	/* Ed25519 is deterministic: our signature line is byte for byte the vector's. */
	assert_int_equal(note_sign(text, strlen(text), LOG_NAME, seed, &note), 0);
	assert_string_equal(note, want);

	/* A cosignature we add verifies under its vkey, with its time. */
	assert_int_equal(ed25519_keygen(wpriv, wpub), 0);
	assert_int_equal(note_vkey_encode("w.example/x", NOTE_SIG_COSIGNATURE, wpub, &wv), 0);
	assert_int_equal(note_vkey_parse(wv, strlen(wv), &keys[1]), 0);
	assert_int_equal(buf_init(&b, NOTE_MAX_BYTES, 0), 0);
	assert_int_equal(buf_put(&b, note, strlen(note)), 0);
	assert_int_equal(
		note_append_signature(text, strlen(text), "w.example/x", NOTE_SIG_COSIGNATURE, wpriv, 1760000123, &b),
		0);
	assert_int_equal(note_open(buf_ptr(&b), buf_len(&b), keys, 2, &o), 0);
	assert_true(o.verified[0]);
	assert_true(o.verified[1]);
	assert_int_equal(o.timestamp[1], 1760000123);
	note_opened_release(&o);
	/* The text must be a note text. */
	assert_int_equal(note_sign("no newline", 10, LOG_NAME, seed, &note), -EINVAL);
	assert_int_equal(note_sign("a\n\nb\n", 5, LOG_NAME, seed, &note), -EINVAL);

	buf_release(&b);
	note_vkey_release(&keys[1]);
	free(wv);
	free(want);
	free(note);
}

static void expect_open(const struct keys *ks, size_t nk, const char *note, size_t n, int want)
{
	struct note_opened o = { 0 };

	assert_int_equal(note_open(note, n, ks->k, nk, &o), want);
	if (want == 0) {
		note_opened_release(&o);
	} else {
		assert_null(o.text);
	}
}

static void test_open_refusals(void **state)
{
	struct keys *ks = *state;
	char *n;

	/* Structure. */
	n = make_note(text, log_line, NULL);
	expect_open(ks, 2, n, strlen(n), 0);
	expect_open(ks, 2, n, strlen(n) - 1, -EBADMSG); /* no final newline */
	expect_open(ks, 2, n, strlen(text), -EBADMSG); /* no signatures */
	expect_open(ks, 2, n, strlen(text) + 1, -EBADMSG);
	free(n);
	n = make_note(text, "\n", log_line); /* an empty signature line */
	expect_open(ks, 2, n, strlen(n), -EBADMSG);
	free(n);
	n = make_note(text,
		      "- " LOG_NAME
		      " Bwll1vSm1GBu/u3FzyhOMXK1fwzvztQj15+2YVxT2JheD9i+UdVmejDz2e+M4AtxUuJpen36NSGqXemdYiILAxETUQU=\n",
		      NULL); /* ASCII dash */
	expect_open(ks, 2, n, strlen(n), -EBADMSG);
	free(n);
	n = make_note(text, "\xe2\x80\x94 " LOG_NAME " Bwll\n", NULL); /* too short to hold a key id */
	expect_open(ks, 2, n, strlen(n), -EBADMSG);
	free(n);
	n = make_note(text, "\xe2\x80\x94 " LOG_NAME " Bwll1vSm\n", NULL); /* the pinned key id, a short signature */
	expect_open(ks, 2, n, strlen(n), -EKEYREJECTED);
	free(n);
	n = make_note(text,
		      "\xe2\x80\x94 " LOG_NAME
		      " Bwll1vSm1GBu/u3FzyhOMXK1fwzvztQj15+2YVxT2JheD9i+UdVmejDz2e+M4AtxUuJpen36NSGqXemdYiILAxETUQV=\n",
		      NULL); /* non-canonical base64 (unused bits set) */
	expect_open(ks, 2, n, strlen(n), -EBADMSG);
	free(n);
	n = make_note(LOG_NAME "\r\n13\nMi7CJiZLruMIePTlzHPx4mYt0B1o8dZ+0VjPECnCnOY=\n", log_line, NULL); /* CR */
	expect_open(ks, 2, n, strlen(n), -EBADMSG);
	free(n);
	n = make_note(text, log_line, NULL);
	n[3] = '\0'; /* an embedded NUL */
	expect_open(ks, 2, n, strlen(text) + 1 + strlen(log_line), -EBADMSG);
	free(n);

	/* A pinned key's bad signature rejects the note. */
	n = make_note(text, log_line, NULL);
	n[strlen(n) - 10] ^= 0x01;
	expect_open(ks, 2, n, strlen(n), -EKEYREJECTED);
	free(n);
	/* An edited text: the pinned signature no longer holds. */
	n = make_note(text, log_line, NULL);
	n[strlen(LOG_NAME) + 2] = '4'; /* size 13 -> 14 */
	expect_open(ks, 2, n, strlen(n), -EKEYREJECTED);
	free(n);
	/* One key signing twice. */
	n = make_note(text, log_line, log_line);
	expect_open(ks, 2, n, strlen(n), -EKEYREJECTED);
	free(n);
	/* No pinned key signed. */
	n = make_note(text, wit_line, NULL);
	expect_open(ks, 1, n, strlen(n), -ENOKEY);
	expect_open(ks, 0, n, strlen(n), -ENOKEY);
	free(n);
}

static void test_caps(void **state)
{
	struct keys *ks = *state;
	struct note_vkey many[NOTE_MAX_KEYS + 1];
	struct buf b = { 0 };
	char *n;

	/* NOTE_MAX_SIGS lines pass; one more is refused. 63 unknown lines + the log line = 64. */
	assert_int_equal(buf_init(&b, NOTE_MAX_BYTES * 2, 0), 0);
	assert_int_equal(buf_putf(&b, "%s\n%s", text, log_line), 0);
	for (size_t i = 0; i < NOTE_MAX_SIGS - 1; i++) {
		assert_int_equal(buf_putf(&b, "\xe2\x80\x94 other%zu AAAAAAAA\n", i), 0);
	}
	expect_open(ks, 2, (const char *)buf_ptr(&b), buf_len(&b), 0);
	assert_int_equal(buf_putf(&b, "\xe2\x80\x94 other AAAAAAAA\n"), 0);
	expect_open(ks, 2, (const char *)buf_ptr(&b), buf_len(&b), -E2BIG);
	buf_release(&b);

	/* NOTE_MAX_BYTES: exactly at the cap is parsed (and fails for other reasons), one past is refused. */
	n = calloc(1, NOTE_MAX_BYTES + 2);
	assert_non_null(n);
	memset(n, 'a', NOTE_MAX_BYTES + 1);
	expect_open(ks, 2, n, NOTE_MAX_BYTES + 1, -E2BIG);
	expect_open(ks, 2, n, NOTE_MAX_BYTES, -EBADMSG);
	free(n);

	/* NOTE_MAX_KEYS pinned keys. */
	for (size_t i = 0; i <= NOTE_MAX_KEYS; i++) {
		many[i] = ks->k[0];
	}
	n = make_note(text, log_line, NULL);
	{
		struct note_opened o = { 0 };

		assert_int_equal(note_open(n, strlen(n), many, NOTE_MAX_KEYS + 1, &o), -E2BIG);
		/* The same key pinned twice under two indexes: both see the one line? No: the first match takes it. */
		assert_int_equal(note_open(n, strlen(n), many, NOTE_MAX_KEYS, &o), 0);
		assert_true(o.verified[0]);
		note_opened_release(&o);
	}
	free(n);
}

static void expect_cp(const char *t, int want)
{
	struct checkpoint c = { 0 };

	assert_int_equal(checkpoint_parse(t, strlen(t), &c), want);
	if (want == 0) {
		checkpoint_release(&c);
	} else {
		assert_null(c.origin);
	}
}

static void test_checkpoint_parse(void **state)
{
	uint8_t root[SHA256_LEN] = { 1, 2, 3 };
	struct checkpoint c = { 0 };
	struct buf b = { 0 };
	char *t = NULL;

	(void)state;
	assert_int_equal(checkpoint_format("example.org/log", 0, root, &t), 0);
	assert_int_equal(checkpoint_parse(t, strlen(t), &c), 0);
	assert_string_equal(c.origin, "example.org/log");
	assert_int_equal(c.size, 0);
	assert_memory_equal(c.root, root, SHA256_LEN);
	checkpoint_release(&c);
	free(t);
	assert_int_equal(checkpoint_format("a\nb", 1, root, &t), -EINVAL);
	assert_int_equal(checkpoint_format("", 1, root, &t), -EINVAL);

	expect_cp("o\n13\nMi7CJiZLruMIePTlzHPx4mYt0B1o8dZ+0VjPECnCnOY=\n", 0);
	expect_cp("o\n013\nMi7CJiZLruMIePTlzHPx4mYt0B1o8dZ+0VjPECnCnOY=\n", -EBADMSG);
	expect_cp("o\n-1\nMi7CJiZLruMIePTlzHPx4mYt0B1o8dZ+0VjPECnCnOY=\n", -EBADMSG);
	expect_cp("o\n+1\nMi7CJiZLruMIePTlzHPx4mYt0B1o8dZ+0VjPECnCnOY=\n", -EBADMSG);
	expect_cp("o\n\nMi7CJiZLruMIePTlzHPx4mYt0B1o8dZ+0VjPECnCnOY=\n", -EBADMSG);
	expect_cp("o\n9223372036854775807\nMi7CJiZLruMIePTlzHPx4mYt0B1o8dZ+0VjPECnCnOY=\n", 0);
	expect_cp("o\n9223372036854775808\nMi7CJiZLruMIePTlzHPx4mYt0B1o8dZ+0VjPECnCnOY=\n", -EBADMSG);
	expect_cp("o\n99999999999999999999\nMi7CJiZLruMIePTlzHPx4mYt0B1o8dZ+0VjPECnCnOY=\n", -EBADMSG);
	expect_cp("o\n13\nMi7CJiZLruMIePTlzHPx4mYt0B1o8dZ+0VjPECnCnOY\n", -EBADMSG);
	expect_cp("o\n13\nMi7CJiZLruMIePTlzHPx4mYt0B1o8dZ+0VjPECnCnOZ=\n", -EBADMSG);
	expect_cp("o\n13\nMi7CJiZLruMIePTlzHPx4mYt0B1o8dZ+0VjPECnCnOYA\n", -EBADMSG);
	expect_cp("o\n13\n", -EBADMSG);
	expect_cp("o\n13\nMi7CJiZLruMIePTlzHPx4mYt0B1o8dZ+0VjPECnCnOY=", -EBADMSG);
	/* CHECKPOINT_MAX_EXTENSIONS extension lines pass; one more is refused. */
	assert_int_equal(buf_init(&b, 4096, 0), 0);
	assert_int_equal(buf_putf(&b, "o\n13\nMi7CJiZLruMIePTlzHPx4mYt0B1o8dZ+0VjPECnCnOY=\n"), 0);
	for (size_t i = 0; i < CHECKPOINT_MAX_EXTENSIONS; i++) {
		assert_int_equal(buf_putf(&b, "ext %zu\n", i), 0);
	}
	assert_int_equal(checkpoint_parse((const char *)buf_ptr(&b), buf_len(&b), &c), 0);
	assert_int_equal(c.n_extensions, CHECKPOINT_MAX_EXTENSIONS);
	assert_string_equal(c.extensions[0], "ext 0");
	checkpoint_release(&c);
	assert_int_equal(buf_putf(&b, "one more\n"), 0);
	assert_int_equal(checkpoint_parse((const char *)buf_ptr(&b), buf_len(&b), &c), -E2BIG);
	buf_release(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_vkey_vector, setup_keys, teardown_keys),
		cmocka_unit_test(test_vkey_refusals),
		cmocka_unit_test_setup_teardown(test_open_vector, setup_keys, teardown_keys),
		cmocka_unit_test_setup_teardown(test_sign_matches_vector, setup_keys, teardown_keys),
		cmocka_unit_test_setup_teardown(test_open_refusals, setup_keys, teardown_keys),
		cmocka_unit_test_setup_teardown(test_caps, setup_keys, teardown_keys),
		cmocka_unit_test(test_checkpoint_parse),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
