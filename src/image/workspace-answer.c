/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "image/workspace-answer.h"
#include "json.h"
#include "log.h"
#include "path.h"

#define PFX "workspace answer: "

/* Every key of each form, in JCS order; all are required. */
static const char *const built_keys[] = { "bytes",  "credentials", "ext4",     "files", "left_out",
					  "schema", "skipped",	   "symlinks", NULL };
static const char *const refused_keys[] = { "error", "left_out", "rule", "schema", NULL };

void workspace_answer_release(struct workspace_answer *a)
{
	if (!a) {
		return;
	}
	free(a->error);
	free(a->rule);
	free(a->ext4);
	for (size_t i = 0; i < a->n_left_out; i++) {
		free(a->left_out[i].path);
		free(a->left_out[i].why);
	}
	free(a->left_out);
	*a = (struct workspace_answer){ 0 };
}

static bool rule_name_ok(const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      strchr("_.+ -", c))) {
			return false;
		}
	}
	return true;
}

/* A bounded string without control characters: -E2BIG past max, -EBADMSG when empty or with a control. */
static int check_text(const char *key, const char *s, size_t max, struct image_diag *diag)
{
	size_t n = s ? strlen(s) : 0;

	if (n > max) {
		image_diag_set(diag, PFX "\"%s\" is %zu bytes, more than %zu", key, n, max);
		return -E2BIG;
	}
	if (n == 0 || str_has_ctl(s)) {
		image_diag_set(diag, PFX "\"%s\" is empty or has a control character", key);
		return -EBADMSG;
	}
	return 0;
}

/* The rules the decoder applies to a decoded answer and the encoder to what it is asked to write. */
static int check_fields(const struct workspace_answer *a, struct image_diag *diag)
{
	int r;

	if (a->n_left_out > WORKSPACE_ANSWER_MAX_LEFT_OUT) {
		image_diag_set(diag, PFX "\"left_out\" has %zu entries, more than WORKSPACE_ANSWER_MAX_LEFT_OUT (%d)",
			       a->n_left_out, WORKSPACE_ANSWER_MAX_LEFT_OUT);
		return -E2BIG;
	}
	for (size_t i = 0; i < a->n_left_out; i++) {
		if ((r = check_text("left_out path", a->left_out[i].path, PATH_MAX_LEN, diag)) < 0 ||
		    (r = check_text("left_out why", a->left_out[i].why, WORKSPACE_ANSWER_MAX_WHY, diag)) < 0) {
			return r;
		}
	}
	if (a->error) {
		if (a->ext4) {
			image_diag_set(diag, PFX "a refusal names no ext4 file");
			return -EBADMSG;
		}
		if ((r = check_text("error", a->error, WORKSPACE_ANSWER_MAX_ERROR, diag)) < 0) {
			return r;
		}
		if (a->rule && ((r = check_text("rule", a->rule, WORKSPACE_ANSWER_MAX_RULE, diag)) < 0 ||
				!rule_name_ok(a->rule))) {
			if (r >= 0) {
				image_diag_set(diag, PFX "\"rule\" has a character outside [A-Za-z0-9_.+ -]");
			}
			return r < 0 ? r : -EBADMSG;
		}
		return 0;
	}
	if (a->rule) {
		image_diag_set(diag, PFX "a built answer names no rule");
		return -EBADMSG;
	}
	if (!a->ext4 || strlen(a->ext4) > PATH_MAX_LEN || !path_is_normal_abs(a->ext4)) {
		image_diag_set(diag, PFX "\"ext4\" is not an absolute path of at most PATH_MAX_LEN bytes without \".\" "
					 "or \"..\" segments and control characters");
		return -EBADMSG;
	}
	if (a->stats.files > (uint64_t)JSON_MAX_SAFE_INT || a->stats.symlinks > (uint64_t)JSON_MAX_SAFE_INT ||
	    a->stats.bytes > (uint64_t)JSON_MAX_SAFE_INT || a->stats.credentials > (uint64_t)JSON_MAX_SAFE_INT ||
	    a->stats.skipped > (uint64_t)JSON_MAX_SAFE_INT) {
		image_diag_set(diag, PFX "a count is beyond 2^53-1");
		return -E2BIG;
	}
	return 0;
}

/* ---- decoder ---- */

static int get_count(const json_t *o, const char *key, uint64_t *ret, struct image_diag *diag)
{
	int64_t v;

	if (json_get_int(o, key, &v) < 0 || v < 0) {
		image_diag_set(diag, PFX "\"%s\" is not an integer in 0..2^53-1", key);
		return -EBADMSG;
	}
	*ret = (uint64_t)v;
	return 0;
}

static int get_left_out(const json_t *o, struct workspace_answer *a, struct image_diag *diag)
{
	const json_t *arr = json_object_get(o, "left_out");
	size_t n;

	if (!json_is_array(arr)) {
		image_diag_set(diag, PFX "\"left_out\" is not an array");
		return -EBADMSG;
	}
	n = json_array_size(arr);
	if (n > WORKSPACE_ANSWER_MAX_LEFT_OUT) {
		image_diag_set(diag, PFX "\"left_out\" has %zu entries, more than WORKSPACE_ANSWER_MAX_LEFT_OUT (%d)",
			       n, WORKSPACE_ANSWER_MAX_LEFT_OUT);
		return -E2BIG;
	}
	a->left_out = calloc(n ? n : 1, sizeof(*a->left_out));
	if (!a->left_out) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const json_t *e = json_array_get(arr, i), *p = json_array_get(e, 0), *w = json_array_get(e, 1);
		if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_string(p) || !json_is_string(w) ||
		    strlen(json_string_value(p)) != json_string_length(p) ||
		    strlen(json_string_value(w)) != json_string_length(w)) {
			image_diag_set(diag, PFX "\"left_out\"[%zu] is not a pair of strings [path, why]", i);
			return -EBADMSG;
		}
		a->left_out[i].path = strdup(json_string_value(p));
		a->left_out[i].why = strdup(json_string_value(w));
		a->n_left_out = i + 1;
		if (!a->left_out[i].path || !a->left_out[i].why) {
			return -ENOMEM;
		}
	}
	return 0;
}

/* The fields of whichever form o has; its key set was checked. */
static int get_fields(const json_t *o, bool refused, struct workspace_answer *a, struct image_diag *diag)
{
	int r;

	if ((r = get_left_out(o, a, diag)) < 0) {
		return r;
	}
	if (refused) {
		if ((r = image_answer_get_str(o, "error", false, PFX, &a->error, diag)) < 0 ||
		    (r = image_answer_get_str(o, "rule", true, PFX, &a->rule, diag)) < 0) {
			return r;
		}
		return 0;
	}
	if ((r = image_answer_get_str(o, "ext4", false, PFX, &a->ext4, diag)) < 0 ||
	    (r = get_count(o, "files", &a->stats.files, diag)) < 0 ||
	    (r = get_count(o, "symlinks", &a->stats.symlinks, diag)) < 0 ||
	    (r = get_count(o, "bytes", &a->stats.bytes, diag)) < 0 ||
	    (r = get_count(o, "credentials", &a->stats.credentials, diag)) < 0 ||
	    (r = get_count(o, "skipped", &a->stats.skipped, diag)) < 0) {
		return r;
	}
	return 0;
}

int workspace_answer_decode(const void *p, size_t n, struct workspace_answer *ret, struct image_diag *diag)
{
	const struct json_opts jo = { .max_bytes = WORKSPACE_ANSWER_MAX_BYTES,
				      .max_depth = 3,
				      .want_top = JSON_OBJECT };
	_cleanup_json_ json_t *o = NULL;
	struct workspace_answer a = { 0 };
	const char *schema;
	bool refused;
	int r;

	if (n > WORKSPACE_ANSWER_MAX_BYTES) {
		image_diag_set(diag, PFX "%zu bytes, more than WORKSPACE_ANSWER_MAX_BYTES (%zu)", n,
			       WORKSPACE_ANSWER_MAX_BYTES);
		return -E2BIG;
	}
	if (n == 0 || ((const char *)p)[n - 1] != '\n') {
		image_diag_set(diag, PFX "%s", n == 0 ? "empty" : "does not end with a newline (cut short?)");
		return -EBADMSG;
	}
	n--;
	r = json_parse_strict(p, n, &jo, &o);
	if (r < 0) {
		image_diag_set(diag, PFX "not one JSON object the strict reader accepts (%s)", tk_strerror(r));
		return r == -ENOMEM || r == -E2BIG ? r : -EBADMSG;
	}
	refused = json_object_get(o, "error") != NULL;
	if ((r = image_answer_check_keys(o, refused ? refused_keys : built_keys, PFX, diag)) < 0) {
		return r;
	}
	if (json_get_string(o, "schema", &schema) < 0 || strcmp(schema, WORKSPACE_ANSWER_SCHEMA) != 0) {
		image_diag_set(diag,
			       PFX "\"schema\" is not \"" WORKSPACE_ANSWER_SCHEMA "\" (a tkbox of another version?)");
		return -EBADMSG;
	}
	if ((r = get_fields(o, refused, &a, diag)) < 0 || (r = check_fields(&a, diag)) < 0) {
		goto fail;
	}
	/* exactly what workspace_answer_encode writes: one canonical form, nothing else to look at */
	r = image_answer_canonical(o, p, n, WORKSPACE_ANSWER_MAX_BYTES, PFX, diag);
	if (r < 0) {
		goto fail;
	}
	*ret = a;
	return 0;
fail:
	if (r == -ENOMEM) {
		image_diag_set(diag, PFX "out of memory");
	}
	workspace_answer_release(&a);
	return r;
}

/* ---- encoder ---- */

/* A copy that the encoder takes: controls become '?', and so do all non-ASCII bytes when it is not UTF-8. */
static char *sanitized(const char *s, size_t max)
{
	char *p = strndup(s, max);
	json_t *probe;

	if (!p) {
		return NULL;
	}
	for (char *c = p; *c; c++) {
		*c = (unsigned char)*c < 0x20 || *c == 0x7f ? '?' : *c;
	}
	probe = json_string(p);
	if (!probe) {
		for (char *c = p; *c; c++) {
			*c = (unsigned char)*c >= 0x80 ? '?' : *c;
		}
	}
	json_decref(probe);
	return p;
}

int workspace_answer_add_left_out(struct workspace_answer *a, const char *rel, const char *why)
{
	struct workspace_left_out *v;
	char *p, *w;

	if (a->n_left_out >= WORKSPACE_ANSWER_MAX_LEFT_OUT || !rel[0] || !why[0]) {
		return 0; /* counted in the stats, not named */
	}
	v = reallocarray(a->left_out, a->n_left_out + 1, sizeof(*v));
	if (!v) {
		return -ENOMEM;
	}
	a->left_out = v;
	p = sanitized(rel, PATH_MAX_LEN);
	w = sanitized(why, WORKSPACE_ANSWER_MAX_WHY);
	if (!p || !w) {
		free(p);
		free(w);
		return -ENOMEM;
	}
	v[a->n_left_out++] = (struct workspace_left_out){ .path = p, .why = w };
	return 0;
}

int workspace_answer_set_error(struct workspace_answer *a, const char *msg, const char *rule)
{
	bool want;

	free(a->error);
	free(a->rule);
	free(a->ext4);
	a->ext4 = NULL;
	a->error =
		sanitized(msg[0] ? msg : "the workspace builder failed and said nothing", WORKSPACE_ANSWER_MAX_ERROR);
	want = rule && rule[0] && strlen(rule) <= WORKSPACE_ANSWER_MAX_RULE && rule_name_ok(rule);
	a->rule = want ? strdup(rule) : NULL;
	return a->error && (a->rule || !want) ? 0 : -ENOMEM;
}

static json_t *counts_and_path(const struct workspace_answer *a, json_t *left)
{
	return json_pack("{s:I,s:I,s:s,s:I,s:O,s:s,s:I,s:I}", "bytes", (json_int_t)a->stats.bytes, "credentials",
			 (json_int_t)a->stats.credentials, "ext4", a->ext4, "files", (json_int_t)a->stats.files,
			 "left_out", left, "schema", WORKSPACE_ANSWER_SCHEMA, "skipped", (json_int_t)a->stats.skipped,
			 "symlinks", (json_int_t)a->stats.symlinks);
}

int workspace_answer_encode(const struct workspace_answer *a, struct buf *out, struct image_diag *diag)
{
	_cleanup_json_ json_t *o = NULL, *left = NULL;
	_cleanup_free_ char *s = NULL;
	size_t n;
	int r;

	r = check_fields(a, diag);
	if (r < 0) {
		return r;
	}
	left = json_array();
	for (size_t i = 0; left && i < a->n_left_out; i++) {
		json_t *e = json_pack("[s,s]", a->left_out[i].path, a->left_out[i].why);
		if (!e || json_array_append_new(left, e) < 0) {
			/* json_pack refuses what is not UTF-8 */
			image_diag_set(diag, PFX "\"left_out\"[%zu] is not UTF-8", i);
			return -EBADMSG;
		}
	}
	if (!left) {
		return -ENOMEM;
	}
	o = a->error ? json_pack("{s:s,s:O,s:o,s:s}", "error", a->error, "left_out", left, "rule",
				 a->rule ? json_string(a->rule) : json_null(), "schema", WORKSPACE_ANSWER_SCHEMA)
		     : counts_and_path(a, left);
	if (!o) {
		image_diag_set(diag, PFX "a string is not UTF-8 (the message or the ext4 path)");
		return -EBADMSG;
	}
	r = json_jcs_string(o, WORKSPACE_ANSWER_MAX_BYTES - 1, &s);
	if (r < 0) {
		image_diag_set(diag, PFX "cannot be written: %s", tk_strerror(r));
		return r;
	}
	n = strlen(s);
	if (buf_avail(out) < n + 1) {
		return -ENOBUFS;
	}
	if ((r = buf_put(out, s, n)) < 0 || (r = buf_put(out, "\n", 1)) < 0) {
		return r;
	}
	return 0;
}

/* ---- the daemon's side: run the child and read its answer ---- */

/* What the child wrote on stderr when it could not answer: its last line, plain or quoted. */
static void diag_from_stderr(const struct buf *err, int r, struct image_diag *diag)
{
	const char *p = (const char *)buf_ptr(err);
	size_t n = buf_len(err);
	char q[LOG_QUOTE_BUFSIZE];

	while (n > 0 && p[n - 1] == '\n') {
		n--;
	}
	if (n == 0) {
		image_diag_set(diag, "the workspace builder failed (%s) and said nothing",
			       r < 0 ? tk_strerror(r) : "non-zero exit");
		return;
	}
	image_diag_set(diag, "the workspace builder failed: %s", log_quote(p, n, q));
}

#define WS_EXTRA_MAX 40 /* extra arguments: --secrets-fd N and 16 --secret NAME:LEN */

static int run_child(const char *exe, const char *dir, const char *out, char *const *extra, int keep_fd, struct buf *so,
		     struct buf *se, struct image_diag *diag)
{
	char *argv[9 + WS_EXTRA_MAX + 1] = {
		(char *)exe, "workspace", "build", "--json", "--quiet", "-o", (char *)out
	};
	char *envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL };
	size_t k = 7;
	int r;

	for (size_t i = 0; extra && extra[i]; i++) {
		if (i >= WS_EXTRA_MAX) {
			return -E2BIG;
		}
		argv[k++] = extra[i];
	}
	argv[k++] = "--";
	argv[k++] = (char *)dir;
	argv[k] = NULL;
	r = image_run_keep_fd(argv, envp, NULL, so, se, WORKSPACE_BUILD_TIMEOUT_S, keep_fd);

	if (r == -ETIME) {
		/* the message docs/limits.md gives for WORKSPACE_BUILD_TIMEOUT_S */
		image_diag_set(diag,
			       "the workspace builder did not finish within %d s (WORKSPACE_BUILD_TIMEOUT_S); it was "
			       "killed (make the checkout smaller)",
			       WORKSPACE_BUILD_TIMEOUT_S);
	} else if (r == -E2BIG) {
		image_diag_set(diag,
			       "the workspace builder's answer or error is larger than WORKSPACE_ANSWER_MAX_BYTES "
			       "(%zu bytes); it was killed",
			       WORKSPACE_ANSWER_MAX_BYTES);
	} else if ((r != 0 && r != 1) || (r == 1 && buf_len(so) == 0)) {
		/* 0: built, 1: refused with an answer; anything else is a child that could not answer */
		diag_from_stderr(se, r, diag);
		r = r < 0 ? r : -EIO;
	}
	return r;
}

int workspace_answer_exec(const char *exe, const char *dir, const char *out, struct workspace_answer *ret,
			  struct image_diag *diag)
{
	return workspace_answer_exec_args(exe, dir, out, NULL, -1, ret, diag);
}

int workspace_answer_exec_args(const char *exe, const char *dir, const char *out, char *const *extra, int keep_fd,
			       struct workspace_answer *ret, struct image_diag *diag)
{
	_cleanup_buf_ struct buf *so = NULL, *se = NULL;
	struct workspace_answer a = { 0 };
	int r;

	if (!exe || !dir || !out || out[0] != '/') {
		return -EINVAL;
	}
	if ((r = buf_new(WORKSPACE_ANSWER_MAX_BYTES, 0, &so)) < 0 || (r = buf_new(IMAGE_DIAG_MAX * 4, 0, &se)) < 0) {
		return r;
	}
	r = run_child(exe, dir, out, extra, keep_fd, so, se, diag);
	if (r < 0) {
		return r;
	}
	{
		bool built = r == 0;
		r = workspace_answer_decode(buf_ptr(so), buf_len(so), &a, diag);
		if (r < 0) {
			return r;
		}
		if (built != !a.error) {
			image_diag_set(diag, PFX "the exit status (%d) and the answer (%s) disagree", built ? 0 : 1,
				       a.error ? "refused" : "built");
			workspace_answer_release(&a);
			return -EPROTO;
		}
	}
	/* the child writes only the file it was asked for */
	if (!a.error && strcmp(a.ext4, out) != 0) {
		image_diag_set(diag, PFX "\"ext4\" is not the file the builder was asked to write");
		workspace_answer_release(&a);
		return -EPROTO;
	}
	*ret = a;
	return 0;
}
