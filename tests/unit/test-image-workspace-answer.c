/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "image/workspace-answer.h"

/* The workspace builder's answer (src/image/workspace-answer.h): both forms, the caps one past, strictness. */

#define BUILT                                                                                                          \
	"{\"bytes\":3,\"credentials\":2,\"ext4\":\"/s/boxes/b/workspace.build/workspace.ext4\",\"files\":1,"           \
	"\"left_out\":[[\".env\",\".env*\"]],\"schema\":\"tkbox.workspace-answer.v1\",\"skipped\":1,\"symlinks\":0}\n"
#define REFUSED                                                                                                        \
	"{\"error\":\"workspace has more than WORKSPACE_MAX_FILES (200000) files\",\"left_out\":[],\"rule\":"          \
	"\"WORKSPACE_MAX_FILES\",\"schema\":\"tkbox.workspace-answer.v1\"}\n"

static int decode(const char *s, struct workspace_answer *a, struct image_diag *d)
{
	return workspace_answer_decode(s, strlen(s), a, d);
}

static void roundtrip(const char *s)
{
	struct workspace_answer a = { 0 };
	struct image_diag d = { .msg = "" };
	struct buf *b = NULL;

	assert_int_equal(decode(s, &a, &d), 0);
	assert_int_equal(buf_new(WORKSPACE_ANSWER_MAX_BYTES, 0, &b), 0);
	assert_int_equal(workspace_answer_encode(&a, b, &d), 0);
	assert_int_equal(buf_len(b), strlen(s));
	assert_memory_equal(buf_ptr(b), s, strlen(s));
	buf_free(b);
	workspace_answer_release(&a);
}

/* The buffer's bytes as a string (a struct buf holds no terminating NUL). */
static void roundtrip_buf(const struct buf *b)
{
	char *s = strndup((const char *)buf_ptr(b), buf_len(b));

	assert_non_null(s);
	roundtrip(s);
	free(s);
}

static void test_forms(void **state)
{
	struct workspace_answer a = { 0 };
	struct image_diag d = { .msg = "" };

	(void)state;
	roundtrip(BUILT);
	roundtrip(REFUSED);
	assert_int_equal(decode(BUILT, &a, &d), 0);
	assert_null(a.error);
	assert_string_equal(a.ext4, "/s/boxes/b/workspace.build/workspace.ext4");
	assert_int_equal(a.stats.credentials, 2);
	assert_int_equal(a.n_left_out, 1);
	assert_string_equal(a.left_out[0].why, ".env*");
	workspace_answer_release(&a);
	assert_int_equal(decode(REFUSED, &a, &d), 0);
	assert_string_equal(a.rule, "WORKSPACE_MAX_FILES");
	assert_null(a.ext4);
	workspace_answer_release(&a);
}

static void refuse(const char *s, int want, const char *in_msg)
{
	struct workspace_answer a = { 0 };
	struct image_diag d = { .msg = "" };

	assert_int_equal(decode(s, &a, &d), want);
	assert_null(a.ext4);
	assert_non_null(strstr(d.msg, in_msg));
}

static void test_strict(void **state)
{
	(void)state;
	/* the keys of one form with the other's */
	refuse("{\"error\":\"x\",\"ext4\":\"/"
	       "a\",\"left_out\":[],\"rule\":null,\"schema\":\"tkbox.workspace-answer.v1\"}\n",
	       -EBADMSG, "unknown key");
	refuse("{\"error\":\"x\",\"left_out\":[],\"schema\":\"tkbox.workspace-answer.v1\"}\n", -EBADMSG, "\"rule\"");
	refuse("{\"error\":\"x\",\"left_out\":[],\"rule\":null,\"schema\":\"tkbox.workspace-answer.v2\"}\n", -EBADMSG,
	       "schema");
	/* not canonical: a space */
	refuse("{\"error\":\"x\", \"left_out\":[],\"rule\":null,\"schema\":\"tkbox.workspace-answer.v1\"}\n", -EBADMSG,
	       "canonical");
	/* no newline, trailing bytes, a duplicate */
	refuse("{\"error\":\"x\",\"left_out\":[],\"rule\":null,\"schema\":\"tkbox.workspace-answer.v1\"}", -EBADMSG,
	       "newline");
	refuse("{\"error\":\"x\",\"left_out\":[],\"rule\":null,\"schema\":\"tkbox.workspace-answer.v1\"}{}\n", -EBADMSG,
	       "strict");
	refuse("{\"error\":\"x\",\"error\":\"y\",\"left_out\":[],\"rule\":null,\"schema\":\"tkbox.workspace-answer."
	       "v1\"}\n",
	       -EBADMSG, "strict");
	/* a path that climbs, a relative one, a control character, a negative or real count */
	refuse("{\"bytes\":1,\"credentials\":0,\"ext4\":\"/a/../etc/shadow\",\"files\":1,\"left_out\":[],\"schema\":"
	       "\"tkbox.workspace-answer.v1\",\"skipped\":0,\"symlinks\":0}\n",
	       -EBADMSG, "\"ext4\"");
	refuse("{\"bytes\":1,\"credentials\":0,\"ext4\":\"a\",\"files\":1,\"left_out\":[],\"schema\":"
	       "\"tkbox.workspace-answer.v1\",\"skipped\":0,\"symlinks\":0}\n",
	       -EBADMSG, "\"ext4\"");
	refuse("{\"error\":\"a\\nb\",\"left_out\":[],\"rule\":null,\"schema\":\"tkbox.workspace-answer.v1\"}\n",
	       -EBADMSG, "control");
	refuse("{\"bytes\":-1,\"credentials\":0,\"ext4\":\"/a\",\"files\":1,\"left_out\":[],\"schema\":"
	       "\"tkbox.workspace-answer.v1\",\"skipped\":0,\"symlinks\":0}\n",
	       -EBADMSG, "\"bytes\"");
	refuse("{\"bytes\":1.0,\"credentials\":0,\"ext4\":\"/a\",\"files\":1,\"left_out\":[],\"schema\":"
	       "\"tkbox.workspace-answer.v1\",\"skipped\":0,\"symlinks\":0}\n",
	       -EBADMSG, "\"bytes\"");
	refuse("{\"error\":\"x\",\"left_out\":[[\"a\"]],\"rule\":null,\"schema\":\"tkbox.workspace-answer.v1\"}\n",
	       -EBADMSG, "left_out");
	refuse("{\"error\":\"x\",\"left_out\":[],\"rule\":\"a;b\",\"schema\":\"tkbox.workspace-answer.v1\"}\n",
	       -EBADMSG, "rule");
}

/* Each cap, at it and one past it. */
static void test_caps(void **state)
{
	struct workspace_answer a = { 0 };
	struct image_diag d = { .msg = "" };
	struct buf *b = NULL;
	char *big;

	(void)state;
	assert_int_equal(buf_new(WORKSPACE_ANSWER_MAX_BYTES, 0, &b), 0);
	for (int i = 0; i < WORKSPACE_ANSWER_MAX_LEFT_OUT + 1; i++) {
		assert_int_equal(workspace_answer_add_left_out(&a, "p", "why"), 0);
	}
	assert_int_equal(a.n_left_out, WORKSPACE_ANSWER_MAX_LEFT_OUT); /* the rest only counted */
	big = malloc(WORKSPACE_ANSWER_MAX_ERROR + 2);
	assert_non_null(big);
	memset(big, 'e', WORKSPACE_ANSWER_MAX_ERROR + 1);
	big[WORKSPACE_ANSWER_MAX_ERROR + 1] = '\0';
	assert_int_equal(workspace_answer_set_error(&a, big, "WORKSPACE_MAX_BYTES"), 0);
	assert_int_equal(strlen(a.error), WORKSPACE_ANSWER_MAX_ERROR); /* cut */
	assert_int_equal(workspace_answer_encode(&a, b, &d), 0);
	roundtrip_buf(b);
	/* one past: an error one byte longer, one left_out more */
	free(a.error);
	a.error = big;
	buf_reset(b);
	assert_int_equal(workspace_answer_encode(&a, b, &d), -E2BIG);
	assert_non_null(strstr(d.msg, "\"error\""));
	free(a.error);
	a.error = strdup("x");
	a.left_out = realloc(a.left_out, (WORKSPACE_ANSWER_MAX_LEFT_OUT + 1) * sizeof(*a.left_out));
	a.left_out[a.n_left_out].path = strdup("p");
	a.left_out[a.n_left_out++].why = strdup("w");
	assert_int_equal(workspace_answer_encode(&a, b, &d), -E2BIG);
	assert_non_null(strstr(d.msg, "WORKSPACE_ANSWER_MAX_LEFT_OUT"));
	workspace_answer_release(&a);
	/* the whole answer one past WORKSPACE_ANSWER_MAX_BYTES */
	big = malloc(WORKSPACE_ANSWER_MAX_BYTES + 2);
	assert_non_null(big);
	memset(big, ' ', WORKSPACE_ANSWER_MAX_BYTES + 1);
	big[WORKSPACE_ANSWER_MAX_BYTES] = '\n';
	big[WORKSPACE_ANSWER_MAX_BYTES + 1] = '\0';
	assert_int_equal(decode(big, &a, &d), -E2BIG);
	assert_non_null(strstr(d.msg, "WORKSPACE_ANSWER_MAX_BYTES"));
	free(big);
	buf_free(b);
}

/* What the child cannot name cleanly still makes an answer the daemon takes. */
static void test_sanitized(void **state)
{
	struct workspace_answer a = { 0 };
	struct image_diag d = { .msg = "" };
	struct buf *b = NULL;

	(void)state;
	assert_int_equal(workspace_answer_add_left_out(&a, "bad\nname\xff", "why"), 0);
	assert_string_equal(a.left_out[0].path, "bad?name?");
	assert_int_equal(workspace_answer_set_error(&a, "git said \x1b[31m", "git ls-files"), 0);
	assert_string_equal(a.error, "git said ?[31m");
	assert_int_equal(buf_new(WORKSPACE_ANSWER_MAX_BYTES, 0, &b), 0);
	assert_int_equal(workspace_answer_encode(&a, b, &d), 0);
	roundtrip_buf(b);
	buf_free(b);
	workspace_answer_release(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forms),
		cmocka_unit_test(test_strict),
		cmocka_unit_test(test_caps),
		cmocka_unit_test(test_sanitized),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
