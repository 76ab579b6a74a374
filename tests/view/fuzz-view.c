/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target of tkbox view's renderer (src/cli/view-html.c).
 * Byte 0 picks the entry: bit 0 clear, the rest is a bundle (view_render);
 * set, the rest is a run file (view_render_lines). Properties:
 *   - it never crashes, and every '<' on the page opens one of the template's
 *     own tags;
 *   - no bundle string reaches the page unescaped: a run file is rendered a
 *     second time with the marker "<zQ&zQ>" appended to every string and key
 *     of each event (but the record's position fields, and "type" unless
 *     byte 0 bit 1 is set), and to a check's detail; the page must not hold
 *     "<zQ" or "&zQ".
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "cli/view-html.h"
#include "json.h"

#define MARK "<zQ&zQ>"

static const char *const tags[] = { "!DOCTYPE", "html", "head",	 "meta", "title", "style", "body",    "main",
				    "section",	"div",	"p",	 "b",	 "ul",	  "li",	   "details", "summary",
				    "h1",	"h2",	"table", "tr",	 "th",	  "td",	   "input",   "nav",
				    "label",	"ol",	"span",	 "pre",	 "code",  "footer" };

static void check_tags(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t j = i + 1, k;
		bool ok = false;

		if (p[i] != '<') {
			continue;
		}
		if (j < n && p[j] == '/') {
			j++;
		}
		for (k = 0; k < sizeof(tags) / sizeof(tags[0]) && !ok; k++) {
			size_t l = strlen(tags[k]);
			ok = j + l < n && memcmp(p + j, tags[k], l) == 0 && (p[j + l] == ' ' || p[j + l] == '>');
		}
		if (!ok) {
			abort();
		}
	}
}

static bool position_field(const char *k)
{
	static const char *const keys[] = {
		"log_id", "tenant", "run_id", "prev_hash", "run_prev_hash", "seq", "run_seq"
	};

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		if (strcmp(k, keys[i]) == 0) {
			return true;
		}
	}
	return false;
}

/* A copy of v with MARK appended to every string (and key, when keys is true). */
static json_t *mark(const json_t *v, bool keys, int depth)
{
	if (depth > 70) {
		return json_null();
	}
	if (json_is_string(v)) {
		size_t n = json_string_length(v);
		char *s = malloc(n + sizeof(MARK));
		json_t *r;
		if (!s) {
			return NULL;
		}
		memcpy(s, json_string_value(v), n);
		memcpy(s + n, MARK, sizeof(MARK));
		r = json_stringn(s, n + sizeof(MARK) - 1);
		free(s);
		return r;
	}
	if (json_is_array(v)) {
		json_t *a = json_array(), *e;
		size_t i;
		json_array_foreach((json_t *)v, i, e) {
			(void)json_array_append_new(a, mark(e, true, depth + 1));
		}
		return a;
	}
	if (json_is_object(v)) {
		json_t *o = json_object(), *e;
		const char *k;
		json_object_foreach((json_t *)v, k, e) {
			char key[4096];
			if (keys) {
				(void)snprintf(key, sizeof(key), "%s%s", k, MARK);
			} else {
				(void)snprintf(key, sizeof(key), "%s", k);
			}
			(void)json_object_set_new(o, key, mark(e, true, depth + 1));
		}
		return o;
	}
	return json_deep_copy(v);
}

/* The event with every string marked but the position fields (and type unless mark_type). */
static void mark_event(json_t *ev, bool mark_type)
{
	const char *k;
	json_t *e;
	void *tmp;

	json_object_foreach_safe(ev, tmp, k, e) {
		if (position_field(k) || (strcmp(k, "type") == 0 && !mark_type)) {
			continue;
		}
		(void)json_object_set_new(ev, k, mark(e, true, 0));
	}
}

static void render(const uint8_t *p, size_t n, bool lines, const struct verify_report *rep, bool marked)
{
	struct view_page page = { .title = marked ? "t" MARK : "t", .report = rep };
	struct buf out = { 0 };

	if (buf_init(&out, VIEW_MAX_PAGE, 0) < 0) {
		return;
	}
	if ((lines ? view_render_lines(p, n, &page, &out) : view_render(p, n, &page, &out)) >= 0) {
		check_tags(buf_ptr(&out), buf_len(&out));
		if (marked && (memmem(buf_ptr(&out), buf_len(&out), "<zQ", 3) ||
			       memmem(buf_ptr(&out), buf_len(&out), "&zQ", 3))) {
			abort();
		}
	}
	buf_release(&out);
}

static void render_marked(const uint8_t *p, size_t n, bool mark_type, const struct verify_report *rep)
{
	struct buf in = { 0 };
	size_t start = 0;

	if (buf_init(&in, (size_t)8 << 20, 0) < 0) {
		return;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *line = NULL, *ev;
		char *s = NULL;

		if (p[i] != '\n') {
			continue;
		}
		if (json_parse_strict(p + start, i - start, &JSON_OPTS_DEFAULT, &line) >= 0) {
			ev = json_object_get(line, "event");
			if (json_is_object(ev)) {
				mark_event(ev, mark_type);
			}
			s = json_dumps(line, JSON_COMPACT);
		}
		if (s) {
			(void)buf_put(&in, s, strlen(s));
			(void)buf_put(&in, "\n", 1);
		} else {
			(void)buf_put(&in, p + start, i + 1 - start);
		}
		free(s);
		json_decref(line);
		start = i + 1;
	}
	render(buf_ptr(&in), buf_len(&in), true, rep, true);
	buf_release(&in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct verify_report rep = { 0 };
	char detail[64];

	if (size < 1) {
		return 0;
	}
	rep.n_checks = 1;
	rep.checks[0] = (struct verify_check){ .name = "signatures", .status = CHECK_FAIL, .detail = detail };
	rep.exit_code = 1;
	rep.integrity = (char *)"FAILED";
	(void)snprintf(detail, sizeof(detail), "%.*s" MARK, (int)(size - 1 < 40 ? size - 1 : 40), data + 1);
	if (!(data[0] & 1)) {
		render(data + 1, size - 1, false, NULL, false);
		return 0;
	}
	render(data + 1, size - 1, true, NULL, false);
	render_marked(data + 1, size - 1, data[0] & 2, data[0] & 4 ? &rep : NULL);
	return 0;
}
