/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How tkbox diff, apply and stop show a box's patch (src/cli/patchview.c):
 * the terminal-safe printing of the agent's text, --stat and --json from a
 * patch the strict parser read, and apply's exit status for each answer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "cli/patchview.h"
#include "json.h"

/* What patchview_write_safe writes for p[0..n), as a new string. */
static char *shown(const void *p, size_t n)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	assert_non_null(f);
	patchview_write_safe(f, p, n);
	assert_int_equal(fclose(f), 0);
	return out;
}

static void test_write_safe(void **state)
{
	/* An ANSI sequence, a title-setting OSC, CR, BS, DEL and NUL in an added line: none reaches the terminal. */
	static const char in[] = "+ok\t\x1b[2J\x1b]0;pwned\x07\r\b\x7f\0end\n";
	char *s;
	(void)state;

	s = shown(in, sizeof(in) - 1);
	assert_string_equal(s, "+ok\t\\x1b[2J\\x1b]0;pwned\\x07\\x0d\\x08\\x7f\\x00end\n");
	for (const char *q = s; *q; q++) {
		assert_true((unsigned char)*q >= 0x20 || *q == '\n' || *q == '\t');
	}
	free(s);
	/* UTF-8 text passes; C1 controls (U+009B is CSI on some terminals), overlong forms, lone bytes do not. */
	s = shown("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n", 15);
	assert_string_equal(s, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n");
	free(s);
	{
		static const char bad[] = "\xc2\x9b"
					  "31m \xc0\xaf \xe0\x80\xaf \xed\xa0\x80 \xff \xc3";
		s = shown(bad, sizeof(bad) - 1);
	}
	assert_string_equal(s, "\\xc2\\x9b31m \\xc0\\xaf \\xe0\\x80\\xaf \\xed\\xa0\\x80 \\xff \\xc3");
	free(s);
	/* A backslash in the patch stays one (code is full of them). */
	s = shown("+a\\nb\n", 6);
	assert_string_equal(s, "+a\\nb\n");
	free(s);
}

/* Long input crosses the writer's chunks: a multi-byte character is never cut in two. */
static void test_write_safe_chunks(void **state)
{
	size_t n = 3 * 40000;
	char *in = malloc(n + 1), *s;
	(void)state;

	assert_non_null(in);
	for (size_t i = 0; i < n; i += 3) {
		memcpy(in + i, "\xe2\x82\xac", 3); /* no newline anywhere */
	}
	s = shown(in, n);
	assert_int_equal(strlen(s), n);
	assert_memory_equal(s, in, n);
	free(s);
	free(in);
}

static void test_text(void **state)
{
	char *t;
	(void)state;

	t = patchview_text("dir/a\nb\tc\\x1b\x1b[0m");
	assert_string_equal(t, "dir/a\\x0ab\\x09c\\x5cx1b\\x1b[0m");
	free(t);
	t = patchview_text("\xff\xfe.txt");
	assert_string_equal(t, "\\xff\\xfe.txt");
	{
		json_t *js = json_string(t); /* valid UTF-8: a JSON string */
		assert_non_null(js);
		json_decref(js);
	}
	free(t);
}

/* A real git patch (a text change, a binary creation, a mode change, a deletion) through the strict parser. */
static const char PATCH[] =
	"diff --git a/a.txt b/a.txt\n"
	"index 257cc5642cb1a054f08cc83f2d943e56fd3ebe99..3bd1f0e29744a1f32b08d5650e62e2e62afb177c 100644\n"
	"--- a/a.txt\n"
	"+++ b/a.txt\n"
	"@@ -1 +1,2 @@\n"
	" foo\n"
	"+bar\n"
	"diff --git a/gone b/gone\n"
	"deleted file mode 100644\n"
	"index 257cc5642cb1a054f08cc83f2d943e56fd3ebe99..0000000000000000000000000000000000000000\n"
	"--- a/gone\n"
	"+++ /dev/null\n"
	"@@ -1 +0,0 @@\n"
	"-foo\n"
	"diff --git a/run.sh b/run.sh\n"
	"old mode 100644\n"
	"new mode 100755\n";

static void test_stat_json(void **state)
{
	struct patch p;
	char diag[256] = "", *out = NULL;
	size_t len = 0;
	FILE *f;
	json_t *v, *notices, *files;
	(void)state;

	if (patch_parse((const uint8_t *)PATCH, sizeof(PATCH) - 1, &p, diag, sizeof(diag)) < 0) {
		fail_msg("the parser refused the test patch: %s", diag);
	}
	assert_int_equal(p.n_files, 3);
	f = open_memstream(&out, &len);
	assert_non_null(f);
	patchview_stat(f, &p);
	assert_int_equal(fclose(f), 0);
	assert_non_null(strstr(out, " modify 100644 a.txt | +1 -0\n"));
	assert_non_null(strstr(out, " delete 100644 gone | +0 -1\n"));
	assert_non_null(strstr(out, " modify 100644->100755 run.sh | mode only\n"));
	assert_non_null(strstr(out, " 3 files changed, 1 insertion(+), 1 deletion(-)\n"));
	free(out);

	notices = json_pack("[[s,s],[s,s],[s],[s,s]]", ".git/config", "a .git path is left out", "evil\x1b[2J",
			    "a fifo is left out", "malformed", "run/s", "left out: a socket");
	v = patchview_json(&p, "ab", sizeof(PATCH) - 1, true, notices, 5);
	assert_non_null(v);
	files = json_object_get(v, "files");
	assert_int_equal(json_array_size(files), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(files, 0), "path")), "a.txt");
	assert_string_equal(json_string_value(json_object_get(json_array_get(files, 1), "op")), "delete");
	assert_true(json_is_null(json_object_get(json_array_get(files, 1), "new_mode")) ||
		    !json_object_get(json_array_get(files, 1), "new_mode"));
	assert_string_equal(json_string_value(json_object_get(json_array_get(files, 2), "new_mode")), "100755");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(files, 0), "added")), 1);
	/* The malformed notice is not shown; the other's path is escaped; the total is the daemon's. */
	assert_int_equal(json_array_size(json_object_get(v, "notices")), 3);
	assert_string_equal(json_string_value(json_array_get(json_array_get(json_object_get(v, "notices"), 1), 0)),
			    "evil\\x1b[2J");
	assert_int_equal(json_integer_value(json_object_get(v, "notices_total")), 5);
	assert_true(json_is_true(json_object_get(v, "saved")));

	out = NULL;
	f = open_memstream(&out, &len);
	assert_non_null(f);
	patchview_notices(f, "diff", notices);
	assert_int_equal(fclose(f), 0);
	assert_string_equal(out, "tkbox diff: left out: .git/config: a .git path is left out\n"
				 "tkbox diff: left out: evil\\x1b[2J: a fifo is left out\n"
				 "tkbox diff: run/s: left out: a socket\n");
	free(out);
	json_decref(v);
	json_decref(notices);
	patch_release(&p);
}

static int status_of(int http, const char *reply)
{
	json_t *v = json_loads(reply, 0, NULL);
	int r;

	assert_non_null(v);
	r = patchview_apply_status(http, v);
	json_decref(v);
	return r;
}

/* docs/cli.md: 0 all written, 1 refused (nothing written), 3 partly written, 125 tkbox could not tell. */
static void test_apply_status(void **state)
{
	static const char *const refused[] = { "box_running",	     "run_closed", "unrecorded",    "no_patch",
					       "no_checkout",	     "apply_busy", "apply_refused", "denied",
					       "signer_unreachable", "no_such_box" };
	char json[256];
	(void)state;

	assert_int_equal(
		status_of(200, "{\"patch_sha256\":\"a\",\"written\":[\"x\"],\"notices\":[],\"dry_run\":false}"), 0);
	assert_int_equal(status_of(200, "{\"patch_sha256\":\"a\",\"files\":[],\"notices\":[],\"dry_run\":true}"), 0);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		(void)snprintf(json, sizeof(json), "{\"error\":{\"code\":\"%s\",\"message\":\"m\"}}", refused[i]);
		assert_int_equal(status_of(i == 8 ? 503 : 409, json), 1);
	}
	/* Part way: what was written is named, and the status says so. */
	assert_int_equal(status_of(500, "{\"error\":{\"code\":\"apply_partial\",\"message\":\"m\",\"written_paths\":"
					"[\"a\"]}}"),
			 3);
	/* The first file failed: nothing was written. */
	assert_int_equal(
		status_of(500, "{\"error\":{\"code\":\"apply_partial\",\"message\":\"m\",\"written_paths\":[]}}"), 1);
	/* An answer tkbox cannot read, an internal error: 125. */
	assert_int_equal(status_of(500, "{\"error\":{\"code\":\"internal\",\"message\":\"m\"}}"), 125);
	assert_int_equal(status_of(500, "{}"), 125);
	assert_int_equal(status_of(200, "{\"error\":{\"code\":\"x\"}}"), 125);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_safe),   cmocka_unit_test(test_write_safe_chunks),
		cmocka_unit_test(test_text),	     cmocka_unit_test(test_stat_json),
		cmocka_unit_test(test_apply_status),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
