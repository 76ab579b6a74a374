/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <cmocka.h>

#include "banned.h"
#include "json.h"
#include "path.h"
#include "patch/apply-answer.h"

/*
 * The apply children's messages (src/patch/apply-answer.h): the plan, the
 * write order and the progress lines. Round trips, the exact wire form,
 * every key of every closed set (missing and extra), each cap at it and one
 * past it, and the rules between fields.
 */

#define H0 "0000000000000000000000000000000000000000000000000000000000000000"
#define H1 "1111111111111111111111111111111111111111111111111111111111111111"
#define H2 "2222222222222222222222222222222222222222222222222222222222222222"
#define H3 "3333333333333333333333333333333333333333333333333333333333333333"

#define ABSENT "{\"mode\":null,\"sha256\":null,\"type\":\"absent\"}"
/* The plan as the prepare child prints it: every form of FILE once. */
#define PLAN                                                                                                           \
	"{\"checkout\":\"/home/u/repo\",\"files\":["                                                                   \
	"{\"binary\":false,\"mode\":\"100755\",\"op\":\"create\",\"path\":\"bin/run\",\"pre\":" ABSENT                 \
	",\"sensitive\":null,\"sha256\":\"" H1 "\",\"size\":12},"                                                      \
	"{\"binary\":false,\"mode\":\"100644\",\"op\":\"modify\",\"path\":\".github/workflows/ci.yml\",\"pre\":"       \
	"{\"mode\":\"100644\",\"sha256\":\"" H2 "\",\"type\":\"file\"},\"sensitive\":\"CI and automation\","           \
	"\"sha256\":\"" H3 "\",\"size\":40},"                                                                          \
	"{\"binary\":false,\"mode\":\"120000\",\"op\":\"create\",\"path\":\"link\",\"pre\":" ABSENT                    \
	",\"sensitive\":null,\"sha256\":\"" H1 "\",\"size\":7},"                                                       \
	"{\"binary\":false,\"mode\":null,\"op\":\"delete\",\"path\":\"old\",\"pre\":"                                  \
	"{\"mode\":\"120000\",\"sha256\":\"" H2 "\",\"type\":\"symlink\"},\"sensitive\":null,\"sha256\":null,"         \
	"\"size\":0},"                                                                                                 \
	"{\"binary\":true,\"mode\":\"100644\",\"op\":\"modify\",\"path\":\"img.png\",\"pre\":"                         \
	"{\"mode\":\"100755\",\"sha256\":\"" H2 "\",\"type\":\"file\"},\"sensitive\":null,\"sha256\":\"" H3 "\","      \
	"\"size\":16777216}"                                                                                           \
	"],\"notices\":[[\"build/x.o\",\"ignored by the checkout: left out\"]],\"patch_sha256\":\"" H0 "\","           \
	"\"schema\":\"tkbox.apply-plan.v1\",\"scratch\":\"/s/boxes/b/apply.1\"}\n"
#define REFUSED                                                                                                        \
	"{\"error\":\"a.txt: the checkout ignores it\",\"notices\":[],\"path\":\"a.txt\",\"rule\":\"ignored\","        \
	"\"schema\":\"tkbox.apply-plan.v1\"}\n"
#define REFUSED_NULLS                                                                                                  \
	"{\"error\":\"git cannot say where the git dir is\",\"notices\":[[\"n\",\"w\"]],\"path\":null,\"rule\":null,"  \
	"\"schema\":\"tkbox.apply-plan.v1\"}\n"
#define ORDER                                                                                                          \
	"{\"checkout\":\"/home/u/repo\",\"files\":["                                                                   \
	"{\"binary\":false,\"mode\":\"100755\",\"op\":\"create\",\"path\":\"bin/run\",\"pre\":" ABSENT                 \
	",\"sensitive\":null,\"sha256\":\"" H1 "\",\"size\":12}"                                                       \
	"],\"schema\":\"tkbox.apply-write.v1\",\"scratch\":\"/s/boxes/b/apply.1\"}\n"

static const char *const lines[] = {
	"{\"written\":\"bin/run\"}\n",
	"{\"error\":\"bin/run: changed since the plan\",\"path\":\"bin/run\",\"rule\":\"checkout-changed\"}\n",
	"{\"error\":\"out of memory\",\"path\":null,\"rule\":null}\n",
	"{\"done\":3}\n",
	"{\"done\":0}\n",
};

enum kind { PLAN_K, ORDER_K, LINE_K };

static int decode_any(enum kind k, const char *s, size_t n, char *diag, size_t dsz)
{
	struct apply_plan p = { 0 };
	struct apply_line l = { 0 };
	int r;

	switch (k) {
	case PLAN_K:
		r = apply_plan_decode((const uint8_t *)s, n, &p, diag, dsz);
		break;
	case ORDER_K:
		r = apply_order_decode((const uint8_t *)s, n, &p, diag, dsz);
		break;
	default:
		r = apply_line_decode((const uint8_t *)s, n, &l, diag, dsz);
		break;
	}
	if (r < 0) {
		/* a refusal writes nothing into *ret and always says why */
		assert_null(p.files);
		assert_null(p.error);
		assert_null(l.path);
		assert_true(diag[0] != '\0');
	}
	apply_plan_release(&p);
	apply_line_release(&l);
	return r;
}

/* Decode s, encode what was decoded: the same bytes. */
static void roundtrip(enum kind k, const char *s)
{
	char diag[512] = "";
	struct apply_plan p = { 0 };
	struct apply_line l = { 0 };
	struct buf *b = NULL;
	size_t n = strlen(s);

	assert_int_equal(buf_new(APPLY_PLAN_MAX_BYTES, 0, &b), 0);
	switch (k) {
	case PLAN_K:
		assert_int_equal(apply_plan_decode((const uint8_t *)s, n, &p, diag, sizeof(diag)), 0);
		assert_int_equal(apply_plan_encode(&p, b), 0);
		break;
	case ORDER_K:
		assert_int_equal(apply_order_decode((const uint8_t *)s, n, &p, diag, sizeof(diag)), 0);
		assert_int_equal(apply_order_encode(&p, b), 0);
		break;
	default:
		assert_int_equal(apply_line_decode((const uint8_t *)s, n, &l, diag, sizeof(diag)), 0);
		assert_int_equal(apply_line_encode(&l, b), 0);
		break;
	}
	assert_int_equal(buf_len(b), n);
	assert_memory_equal(buf_ptr(b), s, n);
	apply_plan_release(&p);
	apply_line_release(&l);
	buf_free(b);
}

static void refuse(enum kind k, const char *s, int want, const char *in_msg)
{
	char diag[512] = "";
	int r = decode_any(k, s, strlen(s), diag, sizeof(diag));

	if (r != want || !strstr(diag, in_msg)) {
		print_error("decoding %.300s\ngave %d (%s), want %d with \"%s\"\n", s, r, diag, want, in_msg);
	}
	assert_int_equal(r, want);
	assert_non_null(strstr(diag, in_msg));
}

/* s with its first occurrence of old replaced by new (old must be there). */
static char *subst(const char *s, const char *old, const char *new)
{
	const char *at = strstr(s, old);
	size_t a, n;
	char *out;

	assert_non_null(at);
	a = (size_t)(at - s);
	n = strlen(s) - strlen(old) + strlen(new);
	out = malloc(n + 1);
	assert_non_null(out);
	memcpy(out, s, a);
	memcpy(out + a, new, strlen(new));
	memcpy(out + a + strlen(new), at + strlen(old), strlen(at + strlen(old)) + 1);
	return out;
}

static void refuse_subst(enum kind k, const char *s, const char *old, const char *new, int want, const char *in_msg)
{
	char *t = subst(s, old, new);

	refuse(k, t, want, in_msg);
	free(t);
}

/* The JCS form of v and "\n" (a document this test changed as a tree). */
static char *jcs_line(const json_t *v)
{
	char *s = NULL, *line;

	assert_int_equal(json_jcs_string(v, APPLY_PLAN_MAX_BYTES * 2, &s), 0);
	line = malloc(strlen(s) + 2);
	assert_non_null(line);
	memcpy(line, s, strlen(s));
	memcpy(line + strlen(s), "\n", 2);
	free(s);
	return line;
}

static json_t *parse(const char *s)
{
	const struct json_opts jo = { .max_bytes = APPLY_PLAN_MAX_BYTES * 2, .max_depth = 8, .want_top = JSON_OBJECT };
	json_t *o = NULL;

	assert_int_equal(json_parse_strict(s, strlen(s) - 1, &jo, &o), 0);
	return o;
}

/* For the object sub (inside the tree of s): drop each key in turn, and add one more; each is refused. */
static void every_key(enum kind k, const char *s, json_t *(*pick)(json_t *top))
{
	json_t *top = parse(s);
	const char *key;
	json_t *m;
	size_t n = 0;

	json_object_foreach(pick(top), key, m) {
		json_t *copy = json_deep_copy(top);
		char *t;
		assert_int_equal(json_object_del(pick(copy), key), 0);
		t = jcs_line(copy);
		/* a form with that key missing: refused, the message names the key (or, for the keys that pick the form, the set) */
		{
			char diag[512] = "";
			assert_true(decode_any(k, t, strlen(t), diag, sizeof(diag)) < 0);
			if (!strstr(diag, key) && !strstr(diag, "closed set") && !strstr(diag, "none of the keys")) {
				print_error("dropping %s: %s\n", key, diag);
				fail();
			}
		}
		free(t);
		json_decref(copy);
		n++;
	}
	assert_true(n > 0);
	{
		json_t *copy = json_deep_copy(top);
		char *t;
		assert_int_equal(json_object_set_new(pick(copy), "zz_extra", json_null()), 0);
		t = jcs_line(copy);
		refuse(k, t, -EBADMSG, "closed set");
		free(t);
		json_decref(copy);
	}
	json_decref(top);
}

static json_t *pick_top(json_t *top)
{
	return top;
}

static json_t *pick_file(json_t *top)
{
	json_t *files = json_object_get(top, "files");

	return json_array_get(files, json_array_size(files) > 1 ? 1 : 0);
}

static json_t *pick_pre(json_t *top)
{
	return json_object_get(pick_file(top), "pre");
}

static void test_roundtrips(void **state)
{
	(void)state;
	roundtrip(PLAN_K, PLAN);
	roundtrip(PLAN_K, REFUSED);
	roundtrip(PLAN_K, REFUSED_NULLS);
	roundtrip(ORDER_K, ORDER);
	for (size_t i = 0; i < ARRAY_SIZE(lines); i++) {
		roundtrip(LINE_K, lines[i]);
	}
}

/* The decoded fields are the ones on the wire. */
static void test_fields(void **state)
{
	struct apply_plan p = { 0 };
	struct apply_line l = { 0 };
	char diag[256] = "";

	(void)state;
	assert_int_equal(apply_plan_decode((const uint8_t *)PLAN, strlen(PLAN), &p, diag, sizeof(diag)), 0);
	assert_null(p.error);
	assert_string_equal(p.checkout, "/home/u/repo");
	assert_string_equal(p.scratch, "/s/boxes/b/apply.1");
	assert_string_equal(p.patch_sha256, H0);
	assert_int_equal(p.n_files, 5);
	assert_int_equal(p.files[0].op, PATCH_CREATE);
	assert_int_equal(p.files[0].mode, PATCH_MODE_EXEC);
	assert_int_equal(p.files[0].pre_type, APPLY_PRE_ABSENT);
	assert_int_equal(p.files[0].size, 12);
	assert_string_equal(p.files[0].sha256, H1);
	assert_string_equal(p.files[1].sensitive, "CI and automation");
	assert_int_equal(p.files[1].pre_type, APPLY_PRE_FILE);
	assert_int_equal(p.files[1].pre_mode, PATCH_MODE_FILE);
	assert_string_equal(p.files[1].pre_sha256, H2);
	assert_int_equal(p.files[2].mode, PATCH_MODE_LINK);
	assert_int_equal(p.files[3].op, PATCH_DELETE);
	assert_int_equal(p.files[3].mode, 0);
	assert_string_equal(p.files[3].sha256, "");
	assert_int_equal(p.files[3].pre_type, APPLY_PRE_SYMLINK);
	assert_true(p.files[4].binary);
	assert_int_equal(p.files[4].size, PATCH_MAX_FILE_BYTES);
	assert_int_equal(p.n_notices, 1);
	assert_string_equal(p.notices[0].path, "build/x.o");
	apply_plan_release(&p);

	assert_int_equal(apply_plan_decode((const uint8_t *)REFUSED, strlen(REFUSED), &p, diag, sizeof(diag)), 0);
	assert_string_equal(p.error, "a.txt: the checkout ignores it");
	assert_string_equal(p.rule, "ignored");
	assert_string_equal(p.path, "a.txt");
	assert_null(p.checkout);
	apply_plan_release(&p);

	assert_int_equal(apply_line_decode((const uint8_t *)lines[1], strlen(lines[1]), &l, diag, sizeof(diag)), 0);
	assert_int_equal(l.kind, APPLY_LINE_ERROR);
	assert_string_equal(l.path, "bin/run");
	assert_string_equal(l.rule, "checkout-changed");
	apply_line_release(&l);
	assert_int_equal(apply_line_decode((const uint8_t *)lines[3], strlen(lines[3]), &l, diag, sizeof(diag)), 0);
	assert_int_equal(l.kind, APPLY_LINE_DONE);
	assert_int_equal(l.done, 3);
	apply_line_release(&l);
}

static void test_every_key(void **state)
{
	(void)state;
	every_key(PLAN_K, PLAN, pick_top);
	every_key(PLAN_K, PLAN, pick_file);
	every_key(PLAN_K, PLAN, pick_pre);
	every_key(PLAN_K, REFUSED, pick_top);
	every_key(ORDER_K, ORDER, pick_top);
	every_key(ORDER_K, ORDER, pick_file);
	for (size_t i = 0; i < ARRAY_SIZE(lines); i++) {
		every_key(LINE_K, lines[i], pick_top);
	}
	/* a key of the other form */
	refuse_subst(PLAN_K, REFUSED, "\"notices\"", "\"checkout\":\"/a\",\"notices\"", -EBADMSG, "closed set");
	refuse_subst(ORDER_K, ORDER, "\"files\"", "\"error\":\"x\",\"files\"", -EBADMSG, "closed set");
	refuse_subst(ORDER_K, ORDER, "\"schema\"", "\"notices\":[],\"schema\"", -EBADMSG, "closed set");
	refuse(LINE_K, "{\"done\":1,\"written\":\"a\"}\n", -EBADMSG, "closed set");
}

/* Exactly one wire form, and the rules between fields. */
static void test_strict(void **state)
{
	(void)state;
	refuse_subst(PLAN_K, PLAN, "{\"checkout\"", "{ \"checkout\"", -EBADMSG, "canonical");
	refuse_subst(PLAN_K, PLAN, "\n", "", -EBADMSG, "newline");
	refuse_subst(PLAN_K, PLAN, "\n", "\n\n", -EBADMSG, "canonical");
	refuse_subst(PLAN_K, PLAN, "\n", "{}\n", -EBADMSG, "strict");
	refuse_subst(PLAN_K, PLAN, "tkbox.apply-plan.v1", "tkbox.apply-plan.v2", -EBADMSG, "\"schema\"");
	refuse_subst(ORDER_K, ORDER, "tkbox.apply-write.v1", "tkbox.apply-plan.v1", -EBADMSG, "\"schema\"");
	refuse_subst(PLAN_K, PLAN, "\"scratch\":\"/s/", "\"scratch\":\"s/", -EBADMSG, "scratch");
	refuse_subst(PLAN_K, PLAN, "/home/u/repo", "/home/u/../repo", -EBADMSG, "checkout");
	refuse_subst(PLAN_K, PLAN, "\"bin/run\"", "\"../run\"", -EBADMSG, "\"files\"[0].path");
	refuse_subst(PLAN_K, PLAN, "\"bin/run\"", "\"/bin/run\"", -EBADMSG, "\"files\"[0].path");
	refuse_subst(PLAN_K, PLAN, "\"bin/run\"", "\"bin/.GiT/hooks\"", -EBADMSG, ".git");
	refuse_subst(PLAN_K, PLAN, "\"bin/run\"", "\"old\"", -EBADMSG, "twice");
	refuse_subst(PLAN_K, PLAN, "\"op\":\"create\"", "\"op\":\"rename\"", -EBADMSG, "\"op\"");
	refuse_subst(PLAN_K, PLAN, "\"mode\":\"100755\"", "\"mode\":\"100777\"", -EBADMSG, "\"mode\"");
	refuse_subst(PLAN_K, PLAN, "\"mode\":\"100755\"", "\"mode\":\"160000\"", -EBADMSG, "\"mode\"");
	refuse_subst(PLAN_K, PLAN, "\"mode\":\"100755\"", "\"mode\":null", -EBADMSG, "mode");
	refuse_subst(PLAN_K, PLAN, "\"sha256\":\"" H1,
		     "\"sha256\":\"A111111111111111111111111111111111111111111111111111111111111111", -EBADMSG, "hex");
	refuse_subst(PLAN_K, PLAN, "\"sha256\":\"" H1, "\"sha256\":\"" H1 "1", -EBADMSG, "sha256");
	refuse_subst(PLAN_K, PLAN, "\"size\":12", "\"size\":-1", -EBADMSG, "\"size\"");
	refuse_subst(PLAN_K, PLAN, "\"size\":12", "\"size\":12.5", -EBADMSG, "\"size\"");
	refuse_subst(PLAN_K, PLAN, "\"binary\":false", "\"binary\":0", -EBADMSG, "\"binary\"");
	refuse_subst(PLAN_K, PLAN, "\"sensitive\":null", "\"sensitive\":\"\"", -EBADMSG, "sensitive");
	refuse_subst(PLAN_K, PLAN, "\"sensitive\":null", "\"sensitive\":\"a\\u001bb\"", -EBADMSG, "control");
	/* a delete has no result; a create has nothing before it; a modify has something */
	refuse_subst(PLAN_K, PLAN, "\"mode\":null,\"op\":\"delete\"", "\"mode\":\"100644\",\"op\":\"delete\"", -EBADMSG,
		     "delete");
	refuse_subst(PLAN_K, PLAN, "\"size\":0}", "\"size\":1}", -EBADMSG, "delete");
	refuse_subst(PLAN_K, PLAN, "\"op\":\"create\",\"path\":\"bin/run\",\"pre\":" ABSENT,
		     "\"op\":\"create\",\"path\":\"bin/run\",\"pre\":{\"mode\":\"100644\",\"sha256\":\"" H1
		     "\",\"type\":\"file\"}",
		     -EBADMSG, "absent");
	refuse_subst(ORDER_K, ORDER, "\"op\":\"create\"", "\"op\":\"modify\"", -EBADMSG, "file or symlink");
	/* pre's fields agree with its type */
	refuse_subst(PLAN_K, PLAN, "{\"mode\":\"100644\",\"sha256\":\"" H2 "\",\"type\":\"file\"}",
		     "{\"mode\":\"120000\",\"sha256\":\"" H2 "\",\"type\":\"file\"}", -EBADMSG, "pre.mode");
	refuse_subst(PLAN_K, PLAN, "\"type\":\"symlink\"", "\"type\":\"file\"", -EBADMSG, "pre.mode");
	refuse_subst(PLAN_K, PLAN, "\"type\":\"symlink\"", "\"type\":\"dir\"", -EBADMSG, "\"type\"");
	refuse_subst(PLAN_K, PLAN, "\"sha256\":\"" H2 "\",\"type\":\"symlink\"", "\"sha256\":null,\"type\":\"symlink\"",
		     -EBADMSG, "pre.sha256");
	refuse_subst(PLAN_K, PLAN, "\"mode\":null,\"sha256\":null,\"type\":\"absent\"",
		     "\"mode\":null,\"sha256\":\"" H1 "\",\"type\":\"absent\"", -EBADMSG, "absent");
	/* notices and the refusal */
	refuse_subst(PLAN_K, PLAN, "[\"build/x.o\",", "[\"build/x.o\",\"y\",", -EBADMSG, "pair");
	refuse_subst(PLAN_K, PLAN, "[\"build/x.o\",", "[\"build//x.o\",", -EBADMSG, "\"notices\"[0] path");
	refuse_subst(PLAN_K, PLAN, "left out\"", "left\\nout\"", -EBADMSG, "control");
	refuse_subst(PLAN_K, REFUSED, "\"rule\":\"ignored\"", "\"rule\":\"ign;ored\"", -EBADMSG, "\"rule\"");
	refuse_subst(PLAN_K, REFUSED, "\"rule\":\"ignored\"", "\"rule\":\"\"", -EBADMSG, "\"rule\"");
	refuse_subst(PLAN_K, REFUSED, "\"error\":\"a.txt", "\"error\":\"\\ta.txt", -EBADMSG, "control");
	refuse_subst(PLAN_K, REFUSED, "\"error\":\"a.txt: the checkout ignores it\"", "\"error\":\"\"", -EBADMSG,
		     "\"error\"");
	refuse_subst(PLAN_K, REFUSED, "\"path\":\"a.txt\"", "\"path\":\"../a.txt\"", -EBADMSG, "\"path\"");
	refuse_subst(PLAN_K, REFUSED, "\"path\":\"a.txt\"", "\"path\":1", -EBADMSG, "\"path\"");
	/* lines */
	refuse(LINE_K, "{\"written\":\"a/../b\"}\n", -EBADMSG, "\"written\"");
	refuse(LINE_K, "{\"written\":\".git/config\"}\n", -EBADMSG, ".git");
	refuse(LINE_K, "{\"written\":null}\n", -EBADMSG, "\"written\"");
	refuse(LINE_K, "{\"done\":-1}\n", -EBADMSG, "\"done\"");
	refuse(LINE_K, "{\"done\":\"1\"}\n", -EBADMSG, "\"done\"");
	refuse(LINE_K, "{\"error\":\"x\",\"path\":\"/etc\",\"rule\":null}\n", -EBADMSG, "\"path\"");
	refuse(LINE_K, "{\"other\":1}\n", -EBADMSG, "none of the keys");
	refuse(LINE_K, "[1]\n", -EBADMSG, "strict");
	refuse(LINE_K, "{\"written\":\"a\"}", -EBADMSG, "newline");
	refuse(LINE_K, "", -EBADMSG, "empty");
	refuse(LINE_K, "{\"written\":\"a\"}\r\n", -EBADMSG, "canonical");
}

/* A plan of n files named f/<i> (creations of empty files). */
static void fill_files(struct apply_plan *p, size_t n)
{
	p->files = calloc(n, sizeof(*p->files));
	assert_non_null(p->files);
	for (size_t i = 0; i < n; i++) {
		char name[32];
		(void)snprintf(name, sizeof(name), "f/%zu", i);
		p->files[i] = (struct apply_file){ .path = strdup(name), .op = PATCH_CREATE, .mode = PATCH_MODE_FILE };
		memcpy(p->files[i].sha256, H1, 65);
		assert_non_null(p->files[i].path);
	}
	p->n_files = n;
}

static void base_plan(struct apply_plan *p)
{
	*p = (struct apply_plan){ .checkout = strdup("/c"), .scratch = strdup("/s") };
	memcpy(p->patch_sha256, H0, 65);
	assert_non_null(p->checkout);
	assert_non_null(p->scratch);
}

/* Encode p, then decode the bytes (want: the decoder's result); the encoder refuses what the decoder does. */
static void encode_then_decode(struct apply_plan *p, int want, const char *in_msg)
{
	struct buf *b = NULL;
	char *s, diag[512] = "";
	int r;

	assert_int_equal(buf_new(APPLY_PLAN_MAX_BYTES * 2, 0, &b), 0);
	r = apply_plan_encode(p, b);
	if (want == 0) {
		assert_int_equal(r, 0);
		s = strndup((const char *)buf_ptr(b), buf_len(b));
		roundtrip(PLAN_K, s);
		free(s);
	} else {
		json_t *o;
		assert_int_equal(r, want);
		assert_int_equal(buf_len(b), 0);
		/* the same plan written without the encoder's checks: the decoder refuses it too */
		o = NULL;
		{
			json_t *files = json_array(), *notices = json_array();
			for (size_t i = 0; i < p->n_files; i++) {
				const struct apply_file *f = &p->files[i];
				json_t *pre = json_pack("{s:n,s:n,s:s}", "mode", "sha256", "type", "absent");
				json_array_append_new(files,
						      json_pack("{s:b,s:s,s:s,s:s,s:o,s:o,s:s,s:I}", "binary", 0,
								"mode", "100644", "op", "create", "path", f->path,
								"pre", pre, "sensitive",
								f->sensitive ? json_string(f->sensitive) : json_null(),
								"sha256", H1, "size", (json_int_t)f->size));
			}
			for (size_t i = 0; i < p->n_notices; i++) {
				json_array_append_new(notices,
						      json_pack("[s,s]", p->notices[i].path, p->notices[i].why));
			}
			if (p->error) {
				o = json_pack("{s:s,s:o,s:n,s:o,s:s}", "error", p->error, "notices", notices, "path",
					      "rule", p->rule ? json_string(p->rule) : json_null(), "schema",
					      APPLY_PLAN_SCHEMA);
				json_decref(files);
			} else {
				o = json_pack("{s:s,s:o,s:o,s:s,s:s,s:s}", "checkout", p->checkout, "files", files,
					      "notices", notices, "patch_sha256", p->patch_sha256, "schema",
					      APPLY_PLAN_SCHEMA, "scratch", p->scratch);
			}
		}
		assert_non_null(o);
		s = jcs_line(o);
		json_decref(o);
		r = decode_any(PLAN_K, s, strlen(s), diag, sizeof(diag));
		if (r != want || !strstr(diag, in_msg)) {
			print_error("gave %d (%s), want %d with %s\n", r, diag, want, in_msg);
		}
		assert_int_equal(r, want);
		assert_non_null(strstr(diag, in_msg));
		free(s);
	}
	buf_free(b);
}

static char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);

	assert_non_null(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

static void test_caps(void **state)
{
	struct apply_plan p;

	(void)state;
	/* files: PATCH_MAX_FILES, then one more */
	base_plan(&p);
	fill_files(&p, PATCH_MAX_FILES + 1);
	p.n_files = PATCH_MAX_FILES;
	encode_then_decode(&p, 0, "");
	p.n_files = PATCH_MAX_FILES + 1;
	encode_then_decode(&p, -E2BIG, "PATCH_MAX_FILES");
	apply_plan_release(&p);

	/* notices: APPLY_MAX_NOTICES through the builder, which refuses one more (1); then one more anyway */
	base_plan(&p);
	for (int i = 0; i < APPLY_MAX_NOTICES; i++) {
		assert_int_equal(apply_plan_add_notice(&p, "n", "why"), 0);
	}
	assert_int_equal(apply_plan_add_notice(&p, "n", "why"), 1);
	assert_int_equal(p.n_notices, APPLY_MAX_NOTICES);
	encode_then_decode(&p, 0, "");
	p.notices = realloc(p.notices, (APPLY_MAX_NOTICES + 1) * sizeof(*p.notices));
	p.notices[p.n_notices].path = strdup("n");
	p.notices[p.n_notices++].why = strdup("w");
	encode_then_decode(&p, -E2BIG, "APPLY_MAX_NOTICES");
	apply_plan_release(&p);

	/* a notice's why: APPLY_MAX_WHY, one past */
	base_plan(&p);
	assert_int_equal(apply_plan_add_notice(&p, "n", "x"), 0);
	free(p.notices[0].why);
	p.notices[0].why = repeat('w', APPLY_MAX_WHY);
	encode_then_decode(&p, 0, "");
	free(p.notices[0].why);
	p.notices[0].why = repeat('w', APPLY_MAX_WHY + 1);
	encode_then_decode(&p, -E2BIG, "why");
	apply_plan_release(&p);

	/* a FILE's size and sensitive kind */
	base_plan(&p);
	fill_files(&p, 1);
	p.files[0].size = PATCH_MAX_FILE_BYTES;
	p.files[0].sensitive = repeat('k', APPLY_MAX_KIND);
	encode_then_decode(&p, 0, "");
	p.files[0].size = PATCH_MAX_FILE_BYTES + 1;
	encode_then_decode(&p, -E2BIG, "PATCH_MAX_FILE_BYTES");
	p.files[0].size = 0;
	free(p.files[0].sensitive);
	p.files[0].sensitive = repeat('k', APPLY_MAX_KIND + 1);
	encode_then_decode(&p, -E2BIG, "sensitive");
	apply_plan_release(&p);

	/* a path: PATH_MAX_LEN bytes, one past */
	base_plan(&p);
	fill_files(&p, 1);
	free(p.files[0].path);
	p.files[0].path = repeat('p', PATH_MAX_LEN);
	for (size_t i = 200; i < PATH_MAX_LEN; i += 201) {
		p.files[0].path[i] = '/';
	}
	encode_then_decode(&p, 0, "");
	{
		char *longer = malloc(PATH_MAX_LEN + 2);
		memcpy(longer, p.files[0].path, PATH_MAX_LEN);
		memcpy(longer + PATH_MAX_LEN, "p", 2);
		free(p.files[0].path);
		p.files[0].path = longer;
	}
	encode_then_decode(&p, -E2BIG, "PATH_MAX_LEN");
	apply_plan_release(&p);

	/* a refusal's message and rule */
	base_plan(&p);
	{
		char *e = repeat('e', APPLY_MAX_ERROR + 1), *rule = repeat('R', APPLY_MAX_RULE + 1);
		assert_int_equal(apply_plan_set_error(&p, e, rule, "a"), 0);
		assert_int_equal(strlen(p.error), APPLY_MAX_ERROR); /* the builder cuts */
		assert_null(p.rule); /* and drops a rule it cannot send */
		rule[APPLY_MAX_RULE] = '\0';
		free(p.rule);
		p.rule = strdup(rule);
		encode_then_decode(&p, 0, "");
		free(p.error);
		p.error = e;
		encode_then_decode(&p, -E2BIG, "\"error\"");
		free(p.error);
		p.error = strdup("x");
		rule[APPLY_MAX_RULE] = 'R';
		free(p.rule);
		p.rule = rule;
		encode_then_decode(&p, -E2BIG, "APPLY_MAX_RULE");
	}
	apply_plan_release(&p);
}

/* The plan's bytes for p (which the encoder must take). */
static size_t encoded_len(struct apply_plan *p, struct buf *b)
{
	size_t n;

	buf_reset(b);
	assert_int_equal(apply_plan_encode(p, b), 0);
	n = buf_len(b);
	buf_reset(b);
	return n;
}

/* A valid path of n bytes: segments of 200, a unique tail. */
static char *long_path(size_t n, size_t i)
{
	char *path = repeat('q', n);

	for (size_t k = 200; k < n; k += 201) {
		path[k] = '/';
	}
	if (n >= 12) {
		char tail[16];
		(void)snprintf(tail, sizeof(tail), "%08zu", i);
		memcpy(path + n - 8, tail, 8);
		path[n - 9] = 'q';
	}
	if (path[n - 1] == '/') {
		path[n - 1] = 'q';
	}
	return path;
}

/* The whole plan: APPLY_PLAN_MAX_BYTES bytes decodes, one more is refused before it is parsed. */
static void test_plan_bytes(void **state)
{
	const size_t L = 3800;
	struct apply_plan p;
	struct buf *b = NULL;
	size_t base_zero, per_file, full, n_full, total, k;
	char *s, diag[256] = "";

	(void)state;
	assert_int_equal(buf_new(APPLY_PLAN_MAX_BYTES * 2, 0, &b), 0);
	base_plan(&p);
	base_zero = encoded_len(&p, b);
	fill_files(&p, 1);
	free(p.files[0].path);
	p.files[0].path = strdup("x");
	per_file = encoded_len(&p, b) - base_zero; /* one FILE with a 1-byte path */
	apply_plan_release(&p);

	/* n_full files with L-byte paths, then one whose path makes the plan exactly APPLY_PLAN_MAX_BYTES */
	full = per_file - 1 + L + 1; /* with its comma */
	n_full = (APPLY_PLAN_MAX_BYTES - base_zero) / full;
	total = base_zero + n_full * full - 1;
	k = APPLY_PLAN_MAX_BYTES - total - 1 - (per_file - 1);
	if ((ssize_t)k < 1 || k > APPLY_PLAN_MAX_BYTES) {
		n_full--;
		total -= full;
		k += full;
	}
	assert_true(k >= 1 && k <= PATH_MAX_LEN - 1);
	base_plan(&p);
	fill_files(&p, n_full + 1);
	for (size_t i = 0; i < n_full + 1; i++) {
		free(p.files[i].path);
		p.files[i].path = long_path(i < n_full ? L : k, i);
	}
	assert_int_equal(encoded_len(&p, b), APPLY_PLAN_MAX_BYTES);
	assert_int_equal(apply_plan_encode(&p, b), 0);
	s = strndup((const char *)buf_ptr(b), buf_len(b));
	assert_non_null(s);
	roundtrip(PLAN_K, s);
	free(s);
	/* one byte more in the last path */
	free(p.files[n_full].path);
	p.files[n_full].path = long_path(k + 1, n_full);
	buf_reset(b);
	assert_int_equal(apply_plan_encode(&p, b), -E2BIG);
	assert_int_equal(buf_len(b), 0);
	/* bytes past the cap are refused by their size alone */
	s = malloc(APPLY_PLAN_MAX_BYTES + 2);
	assert_non_null(s);
	memset(s, ' ', APPLY_PLAN_MAX_BYTES + 1);
	s[APPLY_PLAN_MAX_BYTES] = '\n';
	s[APPLY_PLAN_MAX_BYTES + 1] = '\0';
	assert_int_equal(decode_any(PLAN_K, s, APPLY_PLAN_MAX_BYTES + 1, diag, sizeof(diag)), -E2BIG);
	assert_non_null(strstr(diag, "APPLY_PLAN_MAX_BYTES"));
	assert_int_equal(decode_any(ORDER_K, s, APPLY_PLAN_MAX_BYTES + 1, diag, sizeof(diag)), -E2BIG);
	free(s);
	buf_free(b);
	apply_plan_release(&p);
}

static void test_line_caps(void **state)
{
	struct apply_line l = { .kind = APPLY_LINE_DONE, .done = PATCH_MAX_FILES };
	struct buf *b = NULL;
	char *s, diag[256] = "";

	(void)state;
	assert_int_equal(buf_new(APPLY_LINE_MAX, 0, &b), 0);
	assert_int_equal(apply_line_encode(&l, b), 0);
	l.done = PATCH_MAX_FILES + 1;
	assert_int_equal(apply_line_encode(&l, b), -E2BIG);
	refuse(LINE_K, "{\"done\":4097}\n", -E2BIG, "PATCH_MAX_FILES");
	roundtrip(LINE_K, "{\"done\":4096}\n");
	/* an error line at its field caps */
	{
		char *e = repeat('e', APPLY_MAX_ERROR), *path = repeat('p', PATH_MAX_LEN);
		for (size_t i = 200; i < PATH_MAX_LEN; i += 201) {
			path[i] = '/';
		}
		l = (struct apply_line){ .kind = APPLY_LINE_ERROR, .error = e, .path = path, .rule = repeat('r', 64) };
		buf_reset(b);
		assert_int_equal(apply_line_encode(&l, b), 0);
		s = strndup((const char *)buf_ptr(b), buf_len(b));
		roundtrip(LINE_K, s);
		free(s);
		free(l.error);
		l.error = repeat('e', APPLY_MAX_ERROR + 1);
		buf_reset(b);
		assert_int_equal(apply_line_encode(&l, b), -E2BIG);
		assert_int_equal(buf_len(b), 0);
		apply_line_release(&l);
	}
	/* the line: at APPLY_LINE_MAX bytes it is read (and refused as not canonical), one more is not read */
	s = repeat(' ', APPLY_LINE_MAX + 1);
	memcpy(s, "{\"done\":1}", 10);
	s[APPLY_LINE_MAX - 1] = '\n';
	assert_int_equal(decode_any(LINE_K, s, APPLY_LINE_MAX, diag, sizeof(diag)), -EBADMSG);
	assert_non_null(strstr(diag, "canonical"));
	s[APPLY_LINE_MAX - 1] = ' ';
	s[APPLY_LINE_MAX] = '\n';
	assert_int_equal(decode_any(LINE_K, s, APPLY_LINE_MAX + 1, diag, sizeof(diag)), -E2BIG);
	assert_non_null(strstr(diag, "APPLY_LINE_MAX"));
	free(s);
	buf_free(b);
}

/* The builders: what a child cannot say cleanly still makes a message the daemon takes. */
static void test_builders(void **state)
{
	struct apply_plan p;
	struct buf *b = NULL;
	char *s;

	(void)state;
	base_plan(&p);
	fill_files(&p, 2);
	assert_int_equal(apply_plan_add_notice(&p, "../x", "why"), -EINVAL);
	assert_int_equal(apply_plan_add_notice(&p, "a\tb", "bad \x1b[31m\xff"), 0);
	assert_string_equal(p.notices[0].why, "bad ?[31m?");
	assert_int_equal(apply_plan_set_error(&p, "git said\n\x1b[2J", "git-apply", "/abs"), 0);
	assert_string_equal(p.error, "git said??[2J");
	assert_string_equal(p.rule, "git-apply");
	assert_null(p.path); /* not a relative path */
	assert_int_equal(p.n_files, 0);
	assert_int_equal(buf_new(APPLY_PLAN_MAX_BYTES, 0, &b), 0);
	assert_int_equal(apply_plan_encode(&p, b), 0);
	s = strndup((const char *)buf_ptr(b), buf_len(b));
	roundtrip(PLAN_K, s);
	free(s);
	/* an order carries no notices or error */
	buf_reset(b);
	assert_int_equal(apply_order_encode(&p, b), -EBADMSG);
	apply_plan_release(&p);
	/* a cut inside a UTF-8 character drops the character */
	s = apply_text_clean("ab\xc3\xa9", 3);
	assert_string_equal(s, "ab");
	free(s);
	s = apply_text_clean("", 10);
	assert_string_equal(s, "?");
	free(s);
	/* a path git would write with a tab is a path: it travels escaped */
	base_plan(&p);
	fill_files(&p, 1);
	free(p.files[0].path);
	p.files[0].path = strdup("a\tb");
	buf_reset(b);
	assert_int_equal(apply_order_encode(&p, b), 0);
	assert_non_null(memmem(buf_ptr(b), buf_len(b), "\"a\\tb\"", 6));
	apply_plan_release(&p);
	buf_free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrips), cmocka_unit_test(test_fields),   cmocka_unit_test(test_every_key),
		cmocka_unit_test(test_strict),	   cmocka_unit_test(test_caps),	    cmocka_unit_test(test_plan_bytes),
		cmocka_unit_test(test_line_caps),  cmocka_unit_test(test_builders),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
