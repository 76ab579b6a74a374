/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of tkbox view's renderer (src/cli/view-html.c): escaping, counts, verdicts, caps. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "cli/view-html.h"
#include "json.h"

#define HOSTILE "<script>document.title='PWNED'</script>\"><img src=x onerror=alert(1)>&amp;"

static char *escaped(const char *s, size_t n, size_t max)
{
	struct buf b = { 0 };
	char *ret = NULL;

	assert_int_equal(buf_init(&b, 1 << 20, 0), 0);
	assert_int_equal(view_escape(&b, s, n, max), 0);
	assert_int_equal(buf_dup_cstring(&b, &ret), 0);
	buf_release(&b);
	return ret;
}

static void test_escape(void **state)
{
	char *s;

	(void)state;
	s = escaped("a<b>&\"'c", 8, 100);
	assert_string_equal(s, "a&lt;b&gt;&amp;&quot;&#39;c");
	free(s);
	/* Control bytes, DEL, a NUL, a byte that is not UTF-8, an overlong form and a surrogate, shown not passed. */
	s = escaped("\x01\n\x7f\0\xff\xc0\xaf\xed\xa0\x80z", 11, 100);
	assert_string_equal(s, "\\x01\\x0a\\x7f\\x00\\xff\\xc0\\xaf\\xed\\xa0\\x80z");
	free(s);
	/* Bidi overrides, zero-width and C1 controls are made visible; other characters pass. */
	s = escaped("\xe2\x80\xae"
		    "cba\xe2\x80\x8b\xc2\x85\xc3\xa9\xf0\x9f\x93\xa6",
		    17, 100);
	assert_string_equal(s, "\\u{202E}cba\\u{200B}\\u{0085}\xc3\xa9\xf0\x9f\x93\xa6");
	free(s);
	/* The cap: on a character boundary, with what was left out. */
	s = escaped("ab\xc3\xa9"
		    "cd",
		    6, 3);
	assert_string_equal(s, "ab\xe2\x80\xa6 (4 more bytes)");
	free(s);
	s = escaped("abcd", 4, 4);
	assert_string_equal(s, "abcd");
	free(s);
	s = escaped("abcde", 5, 4);
	assert_string_equal(s, "abcd\xe2\x80\xa6 (1 more bytes)");
	free(s);
}

static int line_no;

/* A record line record_parse accepts (the renderer does not check hashes or signatures: the verifier does). */
static void add_line(struct buf *b, const char *type, json_t *data)
{
	_cleanup_free_ char *s = NULL;
	char hex[65];
	json_t *ev;
	json_t *rec;

	memset(hex, 'a', 64);
	hex[64] = '\0';
	ev = json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:s,s:s,s:s,s:o}", "log_id", "0123456789abcdef0123456789abcdef",
		       "tenant", "default", "run_id", "run-1", "type", type, "seq", (json_int_t)line_no, "run_seq",
		       (json_int_t)line_no, "prev_hash",
		       "sha256:0000000000000000000000000000000000000000000000000000000000000000", "run_prev_hash",
		       "sha256:0000000000000000000000000000000000000000000000000000000000000000", "ts",
		       "2026-12-02T16:00:00.000000Z", "data", data);
	rec = json_pack("{s:i,s:o,s:s+,s:s,s:s+,s:s}", "v", 2, "event", ev, "hash", "sha256:", hex, "alg", "ed25519",
			"kid", "sha256:", hex, "sig",
			"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==");
	assert_non_null(rec);
	s = json_dumps(rec, JSON_COMPACT);
	json_decref(rec);
	assert_non_null(s);
	assert_int_equal(buf_put(b, s, strlen(s)), 0);
	assert_int_equal(buf_put(b, "\n", 1), 0);
	line_no++;
}

static json_t *review(const char *reviewer, json_t *verdict)
{
	return json_pack("{s:s,s:o}", "reviewer", reviewer, "verdict", verdict);
}

/* A run with a record of every door, every string hostile. */
static void hostile_run(struct buf *b)
{
	line_no = 0;
	add_line(b, "run.registered",
		 json_pack("{s:{s:s,s:s},s:s}", "agent", "name", HOSTILE, "version", "1", "signer_isolation", HOSTILE));
	add_line(
		b, "review",
		review("tkbox.box", json_pack("{s:s,s:s,s:[s],s:{s:[s]},s:[{s:s}]}", "box", HOSTILE, "image", HOSTILE,
					      "env", HOSTILE, "egress", "allow", HOSTILE, "secrets", "name", HOSTILE)));
	add_line(b, "policy.decision",
		 json_pack("{s:s,s:s,s:s,s:[s],s:[s]}", "tool", "Bash", "decision", "deny", "decision_id", "d1",
			   "rule_ids", HOSTILE, "reasons", HOSTILE));
	add_line(b, "policy.decision",
		 json_pack("{s:s,s:s,s:s,s:[]}", "tool", "Bash", "decision", "allow", "decision_id", "d2", "rule_ids"));
	add_line(b, "tool.result",
		 json_pack("{s:s,s:{s:{s:s,s:i,s:s}}}", "decision_id", "d2", "output", "value", "status", "error",
			   "exit_code", 1, "error", HOSTILE));
	add_line(b, "policy.decision",
		 json_pack("{s:s,s:s,s:s,s:[]}", "tool", "WebFetch", "decision", "flag", "decision_id", "d3",
			   "rule_ids"));
	add_line(b, "review",
		 review("tkbox.egress", json_pack("{s:s,s:i,s:s,s:s,s:s}", "host", HOSTILE, "port", 443, "decision",
						  "refused", "rule", HOSTILE, "reason", HOSTILE)));
	add_line(b, "review",
		 review("tkbox.approval", json_pack("{s:s,s:s,s:s,s:s}", "target", HOSTILE, "url", HOSTILE, "decision",
						    "rejected", "approver", HOSTILE)));
	add_line(b, "review", review("tkbox.secret.use", json_pack("{s:s,s:s}", "name", HOSTILE, "host", HOSTILE)));
	add_line(b, "review",
		 review("tkbox.secret.leak",
			json_pack("{s:s,s:s,s:s}", "name", HOSTILE, "host", HOSTILE, "reason", HOSTILE)));
	add_line(b, "review",
		 review("tkbox.model.call",
			json_pack("{s:s,s:s,s:s}", "host", HOSTILE, "path", HOSTILE, "model", HOSTILE)));
	add_line(
		b, "policy.decision",
		json_pack("{s:s,s:s,s:s,s:[]}", "tool", "Write", "decision", "allow", "decision_id", "d4", "rule_ids"));
	add_line(b, "tool.result",
		 json_pack("{s:s,s:{s:{s:s,s:[s]}}}", "decision_id", "d4", "output", "value", "status", "ok",
			   "written_paths", HOSTILE));
	add_line(b, "review",
		 review("tkbox.patch", json_pack("{s:s,s:[[s,s]]}", "status", "saved", "notices", HOSTILE, HOSTILE)));
	add_line(b, "capture.gap", json_pack("{s:s,s:s}", "kind", HOSTILE, "reason", HOSTILE));
	add_line(b, "review", review(HOSTILE, json_pack("{s:s}", HOSTILE, HOSTILE)));
	add_line(b, HOSTILE, json_pack("{s:s}", "x", HOSTILE));
	add_line(b, "run.end", json_pack("{s:s}", "reason", HOSTILE));
}

static char *render_lines(const struct buf *in, const struct verify_report *rep, const char *title)
{
	struct view_page page = { .title = title, .report = rep };
	struct buf out = { 0 };
	char *s = NULL;

	assert_int_equal(buf_init(&out, VIEW_MAX_PAGE, 0), 0);
	assert_int_equal(view_render_lines(buf_ptr(in), buf_len(in), &page, &out), 0);
	assert_int_equal(buf_dup_cstring(&out, &s), 0);
	buf_release(&out);
	return s;
}

static void assert_count(const char *html, const char *id, size_t n)
{
	char want[64];

	snprintf(want, sizeof(want), "id=\"n-%s\">%zu<", id, n);
	if (!strstr(html, want)) {
		fail_msg("no %s in the page", want);
	}
}

static void test_hostile(void **state)
{
	struct buf in = { 0 };
	char *html;

	(void)state;
	assert_int_equal(buf_init(&in, 1 << 20, 0), 0);
	hostile_run(&in);
	html = render_lines(&in, NULL, HOSTILE);
	/* Nothing of the payload is markup: the page's own template has no script, img or event handler. */
	assert_null(strstr(html, "<script"));
	assert_null(strstr(html, "<img"));
	assert_non_null(strstr(html, "&lt;script&gt;document.title=&#39;PWNED&#39;&lt;/script&gt;&quot;&gt;&lt;img"));
	/* The title too, and the Content-Security-Policy. */
	assert_non_null(strstr(html, "<title>tkbox view: &lt;script&gt;"));
	assert_non_null(strstr(html, "content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\""));
	assert_non_null(strstr(html, "NOT VERIFIED"));
	assert_non_null(strstr(html, "not verified: no trust file given"));
	assert_count(html, "cmd", 3);
	assert_count(html, "net", 2);
	assert_count(html, "appr", 1);
	assert_count(html, "sec", 2);
	assert_count(html, "model", 1);
	assert_count(html, "files", 3);
	assert_count(html, "gap", 1);
	assert_count(html, "run", 3);
	assert_count(html, "other", 2);
	assert_count(html, "refused", 4);
	assert_count(html, "all", 18);
	assert_null(strstr(html, "not-shown"));
	free(html);
	buf_release(&in);
}

static void test_verdicts(void **state)
{
	struct verify_report rep = { 0 };
	struct buf in = { 0 };
	char *html;

	(void)state;
	assert_int_equal(buf_init(&in, 1 << 20, 0), 0);
	line_no = 0;
	add_line(&in, "run.end", json_pack("{s:s}", "reason", "exported"));
	rep.n_checks = 2;
	rep.checks[0] = (struct verify_check){ .name = "signatures", .status = CHECK_FAIL, .detail = HOSTILE };
	rep.checks[1] = (struct verify_check){ .name = "isolation", .status = CHECK_PASS, .detail = "same-user" };
	rep.exit_code = 1;
	rep.failures = 1;
	rep.integrity = (char *)"FAILED";
	html = render_lines(&in, &rep, "run.tkb");
	assert_non_null(strstr(html, "class=\"verdict fail\""));
	assert_non_null(strstr(html, "<div class=\"big\">FAILED</div>"));
	assert_non_null(strstr(html, "Verification failed"));
	assert_non_null(strstr(html, "<b>signatures</b> \xe2\x80\x94 &lt;script&gt;"));
	assert_non_null(strstr(html, "none (integrity not established)"));
	assert_null(strstr(html, "<script"));
	free(html);
	rep.checks[0].status = CHECK_PASS;
	rep.exit_code = 0;
	rep.failures = 0;
	rep.integrity = (char *)"VERIFIED";
	rep.assurance = (char *)"dev; records ed25519";
	rep.isolation = (char *)"separate-user";
	html = render_lines(&in, &rep, "run.tkb");
	assert_non_null(strstr(html, "class=\"verdict ok\""));
	assert_non_null(strstr(html, "<div class=\"big\">VERIFIED</div>"));
	assert_non_null(strstr(html, "<b>Assurance:</b> dev; records ed25519"));
	assert_non_null(strstr(html, "<b>Isolation:</b> signer separate-user"));
	assert_null(strstr(html, "Verification failed"));
	free(html);
	buf_release(&in);
}

/* One past VIEW_MAX_RECORDS: counted, not shown, and the page says how many. */
static void test_cap(void **state)
{
	struct buf in = { 0 };
	char *html, want[64];

	(void)state;
	assert_int_equal(buf_init(&in, 64 << 20, 0), 0);
	line_no = 0;
	for (int i = 0; i < VIEW_MAX_RECORDS + 1; i++) {
		add_line(&in, "review",
			 review("tkbox.secret.use", json_pack("{s:s,s:s}", "name", "TOKEN", "host", "h")));
	}
	html = render_lines(&in, NULL, NULL);
	assert_count(html, "sec", VIEW_MAX_RECORDS + 1);
	assert_non_null(strstr(html, "id=\"not-shown\">1 records not shown"));
	snprintf(want, sizeof(want), "<span class=\"seq\">#%d<", VIEW_MAX_RECORDS - 1);
	assert_non_null(strstr(html, want));
	snprintf(want, sizeof(want), "<span class=\"seq\">#%d<", VIEW_MAX_RECORDS);
	assert_null(strstr(html, want));
	free(html);
	buf_release(&in);
}

/* A long string and a big data object are cut; a line that is not a record is a note; garbage is a bundle note. */
static void test_cuts_and_notes(void **state)
{
	struct view_page page = { .title = "x.tkb" };
	struct buf in = { 0 }, out = { 0 };
	char big[VIEW_MAX_DATA * 2];
	char *html;

	(void)state;
	memset(big, '<', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(buf_init(&in, 1 << 20, 0), 0);
	line_no = 0;
	add_line(&in, "review", review("tkbox.secret.use", json_pack("{s:s,s:s}", "name", big, "host", "h")));
	assert_int_equal(buf_put(&in, "{\"v\":1}\n", 8), 0);
	html = render_lines(&in, NULL, NULL);
	assert_non_null(strstr(html, "(3839 more bytes)")); /* 4095 bytes, 256 shown */
	assert_non_null(strstr(html, "1 lines of the run file are not record lines"));
	assert_count(html, "all", 1);
	free(html);
	assert_int_equal(buf_init(&out, VIEW_MAX_PAGE, 0), 0);
	assert_int_equal(view_render("PK\3\4garbage", 11, &page, &out), VIEW_UNREADABLE);
	assert_int_equal(buf_put(&out, "", 1), 0);
	assert_non_null(strstr((const char *)buf_ptr(&out), "The bundle could not be read ("));
	assert_non_null(strstr((const char *)buf_ptr(&out), "id=\"n-all\">0<"));
	buf_release(&out);
	buf_release(&in);
}

/* Records whose summaries are as big as allowed: the timeline stops at its size with VIEW_RECORD_RESERVE left. */
static void test_size_cap(void **state)
{
	static const char *const keys[] = { "box",   "image",	  "image_digest", "workspace",
					    "accel", "isolation", "network",	  "limits" };
	struct buf in = { 0 };
	char big[VIEW_MAX_STRING + 1], *html;
	size_t shown = 0;

	(void)state;
	memset(big, '<', VIEW_MAX_STRING);
	big[VIEW_MAX_STRING] = '\0';
	assert_int_equal(buf_init(&in, 64 << 20, 0), 0);
	line_no = 0;
	for (int i = 0; i < 800; i++) {
		json_t *v = json_object();

		for (size_t k = 0; k < ARRAY_SIZE(keys); k++) {
			json_t *a = json_array();
			for (int e = 0; e < VIEW_MAX_ITEMS + 1; e++) {
				json_array_append_new(a, json_string(big));
			}
			json_object_set_new(v, keys[k], a);
		}
		add_line(&in, "review", review("tkbox.box", v));
	}
	html = render_lines(&in, NULL, NULL);
	assert_count(html, "run", 800);
	assert_non_null(strstr(html, ", \xe2\x80\xa6 (1 more)"));
	for (const char *p = html; (p = strstr(p, "<li class=\"r ")); p++) {
		shown++;
	}
	assert_true(shown > 100 && shown < 800);
	assert_true(strlen(html) < VIEW_MAX_PAGE);
	assert_non_null(strstr(html, "id=\"not-shown\">"));
	free(html);
	buf_release(&in);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_escape), cmocka_unit_test(test_hostile),	      cmocka_unit_test(test_verdicts),
		cmocka_unit_test(test_cap),    cmocka_unit_test(test_cuts_and_notes), cmocka_unit_test(test_size_cap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
