/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "banned.h"
#include "json.h"
#include "log.h"
#include "path.h"
#include "patch/apply-answer.h"

/*
 * The apply children's messages (apply-answer.h). Pure: no I/O, no logging,
 * no globals. Each decoder reads with the strict JSON reader, checks the
 * closed key set of each object, reads the fields into the struct, applies
 * the same rules the encoder applies, and finally requires the bytes to be
 * the canonical (JCS) form, so there is exactly one way to write each
 * message and nothing else for a reader to look at.
 */

#define PLAN_PFX "apply plan: "
#define ORDER_PFX "apply write order: "
#define LINE_PFX "apply progress line: "

/* Every key of each object, in JCS order; all are required. */
static const char *const planned_keys[] = { "checkout", "files", "notices", "patch_sha256", "schema", "scratch", NULL };
static const char *const refused_keys[] = { "error", "notices", "path", "rule", "schema", NULL };
static const char *const order_keys[] = { "checkout", "files", "schema", "scratch", NULL };
static const char *const file_keys[] = { "binary", "mode", "op", "path", "pre", "sensitive", "sha256", "size", NULL };
static const char *const pre_keys[] = { "mode", "sha256", "type", NULL };
static const char *const written_keys[] = { "written", NULL };
static const char *const error_keys[] = { "error", "path", "rule", NULL };
static const char *const done_keys[] = { "done", NULL };

_printf_(3, 4) static void diag_set(char *diag, size_t size, const char *fmt, ...)
{
	va_list ap;

	if (!diag || size == 0) {
		return;
	}
	va_start(ap, fmt);
	(void)vsnprintf(diag, size, fmt, ap);
	va_end(ap);
}

/* ---- names ---- */

const char *apply_op_name(enum patch_op op)
{
	switch (op) {
	case PATCH_MODIFY:
		return "modify";
	case PATCH_CREATE:
		return "create";
	case PATCH_DELETE:
		return "delete";
	default:
		return NULL;
	}
}

int apply_op_from_name(const char *s, enum patch_op *ret)
{
	static const enum patch_op ops[] = { PATCH_MODIFY, PATCH_CREATE, PATCH_DELETE };

	for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
		if (strcmp(s, apply_op_name(ops[i])) == 0) {
			*ret = ops[i];
			return 0;
		}
	}
	return -EINVAL;
}

int apply_mode_from_name(const char *s, uint32_t *ret)
{
	static const uint32_t modes[] = { PATCH_MODE_FILE, PATCH_MODE_EXEC, PATCH_MODE_LINK };

	for (size_t i = 0; i < ARRAY_SIZE(modes); i++) {
		if (strcmp(s, patch_mode_name(modes[i])) == 0) {
			*ret = modes[i];
			return 0;
		}
	}
	return -EINVAL;
}

static const char *pre_type_name(enum apply_pre_type t)
{
	switch (t) {
	case APPLY_PRE_ABSENT:
		return "absent";
	case APPLY_PRE_FILE:
		return "file";
	case APPLY_PRE_SYMLINK:
		return "symlink";
	default:
		return NULL;
	}
}

/* ---- field rules (shared by encoders and decoders) ---- */

bool apply_rule_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > APPLY_MAX_RULE) {
		return false;
	}
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      strchr("_.+ -", c))) {
			return false;
		}
	}
	return true;
}

static bool sha256_hex_ok(const char *s)
{
	size_t n = 0;

	for (; s[n]; n++) {
		if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) {
			return false;
		}
	}
	return n == 64;
}

/* A ".git" segment in any case (git's own dir: never in a plan). */
static bool has_git_segment(const char *p)
{
	for (;;) {
		const char *e = strchr(p, '/');
		size_t k = e ? (size_t)(e - p) : strlen(p);
		if (k == 4 && strncasecmp(p, ".git", 4) == 0) {
			return true;
		}
		if (!e) {
			return false;
		}
		p = e + 1;
	}
}

/* A bounded text without control characters: -E2BIG past max, -EBADMSG when empty or with a control. */
static int check_text(const char *pfx, const char *what, const char *s, size_t max, char *diag, size_t dsz)
{
	size_t n = s ? strlen(s) : 0;

	if (n > max) {
		diag_set(diag, dsz, "%s%s is %zu bytes, more than %zu", pfx, what, n, max);
		return -E2BIG;
	}
	if (n == 0 || str_has_ctl(s)) {
		diag_set(diag, dsz, "%s%s is empty or has a control character", pfx, what);
		return -EBADMSG;
	}
	return 0;
}

static int check_rel(const char *pfx, const char *what, const char *s, bool no_git, char *diag, size_t dsz)
{
	int r = s ? path_verify(s, strlen(s)) : -EINVAL;

	if (r == -ENAMETOOLONG || r == -ELOOP) {
		diag_set(diag, dsz,
			 "%s%s is longer or deeper than PATH_MAX_LEN (%d) / PATH_MAX_SEGMENT (%d) / "
			 "PATH_MAX_DEPTH (%d)",
			 pfx, what, PATH_MAX_LEN, PATH_MAX_SEGMENT, PATH_MAX_DEPTH);
		return -E2BIG;
	}
	if (r < 0) {
		diag_set(diag, dsz, "%s%s is not a relative path without empty, \".\" or \"..\" segments", pfx, what);
		return -EBADMSG;
	}
	if (no_git && has_git_segment(s)) {
		diag_set(diag, dsz, "%s%s has a \".git\" segment", pfx, what);
		return -EBADMSG;
	}
	return 0;
}

static int check_abs(const char *pfx, const char *what, const char *s, char *diag, size_t dsz)
{
	if (!s || strlen(s) > PATH_MAX_LEN || !path_is_normal_abs(s)) {
		diag_set(diag, dsz,
			 "%s\"%s\" is not an absolute path of at most PATH_MAX_LEN (%d) bytes without \".\" or \"..\" "
			 "segments and control characters",
			 pfx, what, PATH_MAX_LEN);
		return -EBADMSG;
	}
	return 0;
}

static int check_error_rule_path(const char *pfx, const char *error, const char *rule, const char *path, char *diag,
				 size_t dsz)
{
	int r;

	if ((r = check_text(pfx, "\"error\"", error, APPLY_MAX_ERROR, diag, dsz)) < 0) {
		return r;
	}
	if (rule && !apply_rule_ok(rule)) {
		bool long_rule = strlen(rule) > APPLY_MAX_RULE;
		diag_set(diag, dsz, "%s\"rule\" is %s", pfx,
			 long_rule ? "longer than APPLY_MAX_RULE (64) bytes"
				   : "empty or has a character outside [A-Za-z0-9_.+ -]");
		return long_rule ? -E2BIG : -EBADMSG;
	}
	if (path && (r = check_rel(pfx, "\"path\"", path, false, diag, dsz)) < 0) {
		return r;
	}
	return 0;
}

static int check_file(const char *pfx, const struct apply_file *f, size_t i, char *diag, size_t dsz)
{
	char what[48];
	int r;

	(void)snprintf(what, sizeof(what), "\"files\"[%zu].path", i);
	if ((r = check_rel(pfx, what, f->path, true, diag, dsz)) < 0) {
		return r;
	}
	if (!apply_op_name(f->op)) {
		diag_set(diag, dsz, "%s\"files\"[%zu].op is not create, modify or delete", pfx, i);
		return -EBADMSG;
	}
	if (f->op == PATCH_DELETE) {
		if (f->mode != 0 || f->sha256[0] || f->size != 0) {
			diag_set(diag, dsz, "%s\"files\"[%zu] is a delete: mode and sha256 must be null, size 0", pfx,
				 i);
			return -EBADMSG;
		}
	} else {
		if (!patch_mode_name(f->mode)) {
			diag_set(diag, dsz, "%s\"files\"[%zu].mode is not 100644, 100755 or 120000", pfx, i);
			return -EBADMSG;
		}
		if (!sha256_hex_ok(f->sha256)) {
			diag_set(diag, dsz, "%s\"files\"[%zu].sha256 is not 64 lowercase hex digits", pfx, i);
			return -EBADMSG;
		}
		if (f->size > PATCH_MAX_FILE_BYTES) {
			diag_set(diag, dsz, "%s\"files\"[%zu].size is more than PATCH_MAX_FILE_BYTES (%zu)", pfx, i,
				 PATCH_MAX_FILE_BYTES);
			return -E2BIG;
		}
	}
	if (f->sensitive) {
		(void)snprintf(what, sizeof(what), "\"files\"[%zu].sensitive", i);
		if ((r = check_text(pfx, what, f->sensitive, APPLY_MAX_KIND, diag, dsz)) < 0) {
			return r;
		}
	}
	switch (f->pre_type) {
	case APPLY_PRE_ABSENT:
		if (f->pre_mode != 0 || f->pre_sha256[0]) {
			diag_set(diag, dsz, "%s\"files\"[%zu].pre is absent: its mode and sha256 must be null", pfx, i);
			return -EBADMSG;
		}
		break;
	case APPLY_PRE_FILE:
	case APPLY_PRE_SYMLINK:
		if (f->pre_type == APPLY_PRE_FILE ? f->pre_mode != PATCH_MODE_FILE && f->pre_mode != PATCH_MODE_EXEC
						  : f->pre_mode != PATCH_MODE_LINK) {
			diag_set(diag, dsz, "%s\"files\"[%zu].pre.mode does not match its type (%s)", pfx, i,
				 pre_type_name(f->pre_type));
			return -EBADMSG;
		}
		if (!sha256_hex_ok(f->pre_sha256)) {
			diag_set(diag, dsz, "%s\"files\"[%zu].pre.sha256 is not 64 lowercase hex digits", pfx, i);
			return -EBADMSG;
		}
		break;
	default:
		diag_set(diag, dsz, "%s\"files\"[%zu].pre.type is not absent, file or symlink", pfx, i);
		return -EBADMSG;
	}
	if ((f->op == PATCH_CREATE) != (f->pre_type == APPLY_PRE_ABSENT)) {
		diag_set(diag, dsz, "%s\"files\"[%zu]: a %s needs pre.type %s", pfx, i, apply_op_name(f->op),
			 f->op == PATCH_CREATE ? "absent" : "file or symlink");
		return -EBADMSG;
	}
	return 0;
}

static int cmp_str_ptr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int check_files(const char *pfx, const struct apply_file *files, size_t n, char *diag, size_t dsz)
{
	_cleanup_free_ const char **sorted = NULL;
	int r;

	if (n > PATCH_MAX_FILES) {
		diag_set(diag, dsz, "%s\"files\" has %zu entries, more than PATCH_MAX_FILES (%d)", pfx, n,
			 PATCH_MAX_FILES);
		return -E2BIG;
	}
	for (size_t i = 0; i < n; i++) {
		if ((r = check_file(pfx, &files[i], i, diag, dsz)) < 0) {
			return r;
		}
	}
	if (n < 2) {
		return 0;
	}
	sorted = calloc(n, sizeof(*sorted));
	if (!sorted) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		sorted[i] = files[i].path;
	}
	qsort(sorted, n, sizeof(*sorted), cmp_str_ptr);
	for (size_t i = 1; i < n; i++) {
		if (strcmp(sorted[i - 1], sorted[i]) == 0) {
			diag_set(diag, dsz, "%s\"files\" names one path twice", pfx);
			return -EBADMSG;
		}
	}
	return 0;
}

static int check_notices(const char *pfx, const struct apply_notice *v, size_t n, char *diag, size_t dsz)
{
	char what[48];
	int r;

	if (n > APPLY_MAX_NOTICES) {
		diag_set(diag, dsz, "%s\"notices\" has %zu entries, more than APPLY_MAX_NOTICES (%d)", pfx, n,
			 APPLY_MAX_NOTICES);
		return -E2BIG;
	}
	for (size_t i = 0; i < n; i++) {
		(void)snprintf(what, sizeof(what), "\"notices\"[%zu] path", i);
		if ((r = check_rel(pfx, what, v[i].path, false, diag, dsz)) < 0) {
			return r;
		}
		(void)snprintf(what, sizeof(what), "\"notices\"[%zu] why", i);
		if ((r = check_text(pfx, what, v[i].why, APPLY_MAX_WHY, diag, dsz)) < 0) {
			return r;
		}
	}
	return 0;
}

/* The rules for a plan (order: a write order, which has no error, notices or patch digest). */
static int check_plan(const char *pfx, const struct apply_plan *p, bool order, char *diag, size_t dsz)
{
	int r;

	if (order) {
		if (p->error || p->n_notices) {
			diag_set(diag, dsz, "%sa write order has no error and no notices", pfx);
			return -EBADMSG;
		}
	} else if ((r = check_notices(pfx, p->notices, p->n_notices, diag, dsz)) < 0) {
		return r;
	}
	if (p->error) {
		if (p->checkout || p->scratch || p->n_files) {
			diag_set(diag, dsz, "%sa refusal has no checkout, scratch or files", pfx);
			return -EBADMSG;
		}
		return check_error_rule_path(pfx, p->error, p->rule, p->path, diag, dsz);
	}
	if (p->rule || p->path) {
		diag_set(diag, dsz, "%sonly a refusal names a rule or a path", pfx);
		return -EBADMSG;
	}
	if (!order && !sha256_hex_ok(p->patch_sha256)) {
		diag_set(diag, dsz, "%s\"patch_sha256\" is not 64 lowercase hex digits", pfx);
		return -EBADMSG;
	}
	if ((r = check_abs(pfx, "checkout", p->checkout, diag, dsz)) < 0 ||
	    (r = check_abs(pfx, "scratch", p->scratch, diag, dsz)) < 0) {
		return r;
	}
	return check_files(pfx, p->files, p->n_files, diag, dsz);
}

static int check_line(const struct apply_line *l, char *diag, size_t dsz)
{
	switch (l->kind) {
	case APPLY_LINE_WRITTEN:
		if (l->error || l->rule) {
			diag_set(diag, dsz, LINE_PFX "a written line has no error or rule");
			return -EBADMSG;
		}
		return check_rel(LINE_PFX, "\"written\"", l->path, true, diag, dsz);
	case APPLY_LINE_ERROR:
		return check_error_rule_path(LINE_PFX, l->error, l->rule, l->path, diag, dsz);
	case APPLY_LINE_DONE:
		if (l->path || l->error || l->rule) {
			diag_set(diag, dsz, LINE_PFX "a done line has no path, error or rule");
			return -EBADMSG;
		}
		if (l->done > PATCH_MAX_FILES) {
			diag_set(diag, dsz, LINE_PFX "\"done\" is more than PATCH_MAX_FILES (%d)", PATCH_MAX_FILES);
			return -E2BIG;
		}
		return 0;
	default:
		diag_set(diag, dsz, LINE_PFX "not a written, error or done line");
		return -EBADMSG;
	}
}

/* ---- release and builders ---- */

void apply_file_release(struct apply_file *f)
{
	if (!f) {
		return;
	}
	free(f->path);
	free(f->sensitive);
	*f = (struct apply_file){ 0 };
}

void apply_plan_release(struct apply_plan *p)
{
	if (!p) {
		return;
	}
	free(p->error);
	free(p->rule);
	free(p->path);
	free(p->checkout);
	free(p->scratch);
	for (size_t i = 0; i < p->n_files; i++) {
		apply_file_release(&p->files[i]);
	}
	free(p->files);
	for (size_t i = 0; i < p->n_notices; i++) {
		free(p->notices[i].path);
		free(p->notices[i].why);
	}
	free(p->notices);
	*p = (struct apply_plan){ 0 };
}

void apply_line_release(struct apply_line *l)
{
	if (!l) {
		return;
	}
	free(l->path);
	free(l->error);
	free(l->rule);
	*l = (struct apply_line){ 0 };
}

char *apply_text_clean(const char *s, size_t max)
{
	char *p = strndup(s && s[0] ? s : "?", max);
	json_t *probe;

	if (!p) {
		return NULL;
	}
	for (char *c = p; *c; c++) {
		*c = (unsigned char)*c < 0x20 || *c == 0x7f ? '?' : *c;
	}
	/* a cut inside a character: drop its start; then anything still not UTF-8 loses its high bytes */
	if (strlen(s && s[0] ? s : "?") > max) {
		(void)json_utf8_clip(p);
	}
	probe = json_string(p);
	if (!probe) {
		for (char *c = p; *c; c++) {
			*c = (unsigned char)*c >= 0x80 ? '?' : *c;
		}
	}
	json_decref(probe);
	if (!p[0]) {
		free(p);
		return strdup("?");
	}
	return p;
}

int apply_plan_add_notice(struct apply_plan *p, const char *path, const char *why)
{
	struct apply_notice *v;
	char *a, *w;

	if (!path || path_verify(path, strlen(path)) < 0) {
		return -EINVAL;
	}
	if (p->n_notices >= APPLY_MAX_NOTICES) {
		return 1;
	}
	v = reallocarray(p->notices, p->n_notices + 1, sizeof(*v));
	if (!v) {
		return -ENOMEM;
	}
	p->notices = v;
	a = strdup(path);
	w = apply_text_clean(why, APPLY_MAX_WHY);
	if (!a || !w) {
		free(a);
		free(w);
		return -ENOMEM;
	}
	v[p->n_notices++] = (struct apply_notice){ .path = a, .why = w };
	return 0;
}

int apply_plan_set_error(struct apply_plan *p, const char *msg, const char *rule, const char *path)
{
	bool want_rule = apply_rule_ok(rule), want_path = path && path_verify(path, strlen(path)) == 0;

	free(p->error);
	free(p->rule);
	free(p->path);
	free(p->checkout);
	free(p->scratch);
	p->checkout = p->scratch = NULL;
	for (size_t i = 0; i < p->n_files; i++) {
		apply_file_release(&p->files[i]);
	}
	free(p->files);
	p->files = NULL;
	p->n_files = 0;
	p->patch_sha256[0] = '\0';
	p->error = apply_text_clean(msg, APPLY_MAX_ERROR);
	p->rule = want_rule ? strdup(rule) : NULL;
	p->path = want_path ? strdup(path) : NULL;
	return p->error && (p->rule || !want_rule) && (p->path || !want_path) ? 0 : -ENOMEM;
}

/* ---- decoders ---- */

static int check_keys(const char *pfx, const char *where, const json_t *o, const char *const *keys, char *diag,
		      size_t dsz)
{
	const char *key;
	json_t *m;

	if (!json_is_object(o)) {
		diag_set(diag, dsz, "%s%s is not an object", pfx, where);
		return -EBADMSG;
	}
	json_object_foreach((json_t *)o, key, m) {
		bool known = false;
		(void)m;
		for (size_t i = 0; keys[i]; i++) {
			known = known || strcmp(key, keys[i]) == 0;
		}
		if (!known) {
			diag_set(diag, dsz, "%s%s has a key outside its closed set (%.32s)", pfx, where, key);
			return -EBADMSG;
		}
	}
	for (size_t i = 0; keys[i]; i++) {
		if (!json_object_get(o, keys[i])) {
			diag_set(diag, dsz, "%s%s lacks the key \"%s\"", pfx, where, keys[i]);
			return -EBADMSG;
		}
	}
	return 0;
}

/* A string member (the strict reader refused \u0000: it holds no NUL); nullable: null gives NULL. */
static int get_str(const char *pfx, const json_t *o, const char *key, const char *where, bool nullable, char **ret,
		   char *diag, size_t dsz)
{
	const json_t *v = json_object_get(o, key);

	if (nullable && json_is_null(v)) {
		*ret = NULL;
		return 0;
	}
	if (!json_is_string(v)) {
		diag_set(diag, dsz, "%s%s\"%s\" is not a string%s", pfx, where, key, nullable ? " or null" : "");
		return -EBADMSG;
	}
	*ret = strdup(json_string_value(v));
	return *ret ? 0 : -ENOMEM;
}

/* A string of at most cap bytes (a hex digest, a mode) copied into fixed storage; null gives "". */
static int get_small(const char *pfx, const json_t *o, const char *key, const char *where, char *dst, size_t cap,
		     char *diag, size_t dsz)
{
	const json_t *v = json_object_get(o, key);

	if (json_is_null(v)) {
		dst[0] = '\0';
		return 0;
	}
	if (!json_is_string(v) || json_string_length(v) >= cap) {
		diag_set(diag, dsz, "%s%s\"%s\" is not a string of its form or null", pfx, where, key);
		return -EBADMSG;
	}
	memcpy(dst, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static int get_mode(const char *pfx, const json_t *o, const char *where, uint32_t *ret, char *diag, size_t dsz)
{
	char m[8];
	int r = get_small(pfx, o, "mode", where, m, sizeof(m), diag, dsz);

	if (r < 0) {
		return r;
	}
	if (!m[0]) {
		*ret = 0;
		return 0;
	}
	if (apply_mode_from_name(m, ret) < 0) {
		diag_set(diag, dsz, "%s%s\"mode\" is not \"100644\", \"100755\", \"120000\" or null", pfx, where);
		return -EBADMSG;
	}
	return 0;
}

static int get_u64(const char *pfx, const json_t *o, const char *key, const char *where, uint64_t *ret, char *diag,
		   size_t dsz)
{
	int64_t v;

	if (json_get_int(o, key, &v) < 0 || v < 0) {
		diag_set(diag, dsz, "%s%s\"%s\" is not an integer in 0..2^53-1", pfx, where, key);
		return -EBADMSG;
	}
	*ret = (uint64_t)v;
	return 0;
}

static int get_file(const char *pfx, const json_t *o, size_t i, struct apply_file *f, char *diag, size_t dsz)
{
	char where[40], op[8], type[8];
	const json_t *pre;
	int r;

	(void)snprintf(where, sizeof(where), "\"files\"[%zu]", i);
	if ((r = check_keys(pfx, where, o, file_keys, diag, dsz)) < 0) {
		return r;
	}
	(void)snprintf(where, sizeof(where), "\"files\"[%zu].", i);
	if ((r = get_str(pfx, o, "path", where, false, &f->path, diag, dsz)) < 0 ||
	    (r = get_str(pfx, o, "sensitive", where, true, &f->sensitive, diag, dsz)) < 0 ||
	    (r = get_small(pfx, o, "op", where, op, sizeof(op), diag, dsz)) < 0 ||
	    (r = get_mode(pfx, o, where, &f->mode, diag, dsz)) < 0 ||
	    (r = get_small(pfx, o, "sha256", where, f->sha256, sizeof(f->sha256), diag, dsz)) < 0 ||
	    (r = get_u64(pfx, o, "size", where, &f->size, diag, dsz)) < 0) {
		return r;
	}
	if (apply_op_from_name(op, &f->op) < 0) {
		diag_set(diag, dsz, "%s%s\"op\" is not \"create\", \"modify\" or \"delete\"", pfx, where);
		return -EBADMSG;
	}
	if (!json_is_boolean(json_object_get(o, "binary"))) {
		diag_set(diag, dsz, "%s%s\"binary\" is not true or false", pfx, where);
		return -EBADMSG;
	}
	f->binary = json_is_true(json_object_get(o, "binary"));
	pre = json_object_get(o, "pre");
	(void)snprintf(where, sizeof(where), "\"files\"[%zu].pre", i);
	if ((r = check_keys(pfx, where, pre, pre_keys, diag, dsz)) < 0) {
		return r;
	}
	(void)snprintf(where, sizeof(where), "\"files\"[%zu].pre.", i);
	if ((r = get_small(pfx, pre, "type", where, type, sizeof(type), diag, dsz)) < 0 ||
	    (r = get_mode(pfx, pre, where, &f->pre_mode, diag, dsz)) < 0 ||
	    (r = get_small(pfx, pre, "sha256", where, f->pre_sha256, sizeof(f->pre_sha256), diag, dsz)) < 0) {
		return r;
	}
	if (strcmp(type, "absent") == 0) {
		f->pre_type = APPLY_PRE_ABSENT;
	} else if (strcmp(type, "file") == 0) {
		f->pre_type = APPLY_PRE_FILE;
	} else if (strcmp(type, "symlink") == 0) {
		f->pre_type = APPLY_PRE_SYMLINK;
	} else {
		diag_set(diag, dsz, "%s%s\"type\" is not \"absent\", \"file\" or \"symlink\"", pfx, where);
		return -EBADMSG;
	}
	return 0;
}

static int get_files(const char *pfx, const json_t *o, struct apply_plan *p, char *diag, size_t dsz)
{
	const json_t *arr = json_object_get(o, "files");
	size_t n;
	int r;

	if (!json_is_array(arr)) {
		diag_set(diag, dsz, "%s\"files\" is not an array", pfx);
		return -EBADMSG;
	}
	n = json_array_size(arr);
	if (n > PATCH_MAX_FILES) {
		diag_set(diag, dsz, "%s\"files\" has %zu entries, more than PATCH_MAX_FILES (%d)", pfx, n,
			 PATCH_MAX_FILES);
		return -E2BIG;
	}
	p->files = calloc(n ? n : 1, sizeof(*p->files));
	if (!p->files) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		p->n_files = i + 1;
		if ((r = get_file(pfx, json_array_get(arr, i), i, &p->files[i], diag, dsz)) < 0) {
			return r;
		}
	}
	return 0;
}

static int get_notices(const char *pfx, const json_t *o, struct apply_plan *p, char *diag, size_t dsz)
{
	const json_t *arr = json_object_get(o, "notices");
	size_t n;

	if (!json_is_array(arr)) {
		diag_set(diag, dsz, "%s\"notices\" is not an array", pfx);
		return -EBADMSG;
	}
	n = json_array_size(arr);
	if (n > APPLY_MAX_NOTICES) {
		diag_set(diag, dsz, "%s\"notices\" has %zu entries, more than APPLY_MAX_NOTICES (%d)", pfx, n,
			 APPLY_MAX_NOTICES);
		return -E2BIG;
	}
	p->notices = calloc(n ? n : 1, sizeof(*p->notices));
	if (!p->notices) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const json_t *e = json_array_get(arr, i), *a = json_array_get(e, 0), *w = json_array_get(e, 1);
		if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_string(a) || !json_is_string(w)) {
			diag_set(diag, dsz, "%s\"notices\"[%zu] is not a pair of strings [path, why]", pfx, i);
			return -EBADMSG;
		}
		p->notices[i].path = strdup(json_string_value(a));
		p->notices[i].why = strdup(json_string_value(w));
		p->n_notices = i + 1;
		if (!p->notices[i].path || !p->notices[i].why) {
			return -ENOMEM;
		}
	}
	return 0;
}

static int canonical(const char *pfx, const json_t *o, const uint8_t *p, size_t n, size_t max, char *diag, size_t dsz)
{
	_cleanup_free_ char *canon = NULL;
	int r = json_jcs_string(o, max, &canon);

	if (r < 0) {
		diag_set(diag, dsz, "%scannot be written back in canonical form: %s", pfx, tk_strerror(r));
		return r == -ENOMEM ? r : -EBADMSG;
	}
	if (strlen(canon) != n || memcmp(canon, p, n) != 0) {
		diag_set(diag, dsz, "%snot in canonical (JCS) form: whitespace, key order or escapes differ", pfx);
		return -EBADMSG;
	}
	return 0;
}

/* One JCS object and "\n" in p[0..n), at most max bytes: parsed into *ret. */
static int parse_line(const char *pfx, const char *cap_name, const uint8_t *p, size_t n, size_t max, unsigned depth,
		      json_t **ret, char *diag, size_t dsz)
{
	const struct json_opts jo = { .max_bytes = max, .max_depth = depth, .want_top = JSON_OBJECT };
	int r;

	if (n > max) {
		diag_set(diag, dsz, "%s%zu bytes, more than %s (%zu)", pfx, n, cap_name, max);
		return -E2BIG;
	}
	if (n == 0 || p[n - 1] != '\n') {
		diag_set(diag, dsz, "%s%s", pfx, n == 0 ? "empty" : "does not end with a newline (cut short?)");
		return -EBADMSG;
	}
	r = json_parse_strict(p, n - 1, &jo, ret);
	if (r < 0) {
		diag_set(diag, dsz, "%snot one JSON object the strict reader accepts (%s)", pfx, tk_strerror(r));
		return r == -ENOMEM || r == -E2BIG ? r : -EBADMSG;
	}
	return 0;
}

static int get_schema(const char *pfx, const json_t *o, const char *want, char *diag, size_t dsz)
{
	const char *s;

	if (json_get_string(o, "schema", &s) < 0 || strcmp(s, want) != 0) {
		diag_set(diag, dsz, "%s\"schema\" is not \"%s\" (a tkbox of another version?)", pfx, want);
		return -EBADMSG;
	}
	return 0;
}

static int decode_plan(bool order, const uint8_t *p, size_t n, struct apply_plan *ret, char *diag, size_t dsz)
{
	const char *pfx = order ? ORDER_PFX : PLAN_PFX;
	_cleanup_json_ json_t *o = NULL;
	struct apply_plan a = { 0 };
	bool refused;
	int r;

	if (diag && dsz) {
		diag[0] = '\0';
	}
	/* top, files, one file, its pre: 4 deep; notices' pairs 3 */
	r = parse_line(pfx, "APPLY_PLAN_MAX_BYTES", p, n, APPLY_PLAN_MAX_BYTES, 4, &o, diag, dsz);
	if (r < 0) {
		return r;
	}
	refused = !order && json_object_get(o, "error") != NULL;
	if ((r = check_keys(pfx, "the object", o,
			    order     ? order_keys
			    : refused ? refused_keys
				      : planned_keys,
			    diag, dsz)) < 0 ||
	    (r = get_schema(pfx, o, order ? APPLY_WRITE_SCHEMA : APPLY_PLAN_SCHEMA, diag, dsz)) < 0) {
		return r;
	}
	if (!order && (r = get_notices(pfx, o, &a, diag, dsz)) < 0) {
		goto fail;
	}
	if (refused) {
		if ((r = get_str(pfx, o, "error", "", false, &a.error, diag, dsz)) < 0 ||
		    (r = get_str(pfx, o, "rule", "", true, &a.rule, diag, dsz)) < 0 ||
		    (r = get_str(pfx, o, "path", "", true, &a.path, diag, dsz)) < 0) {
			goto fail;
		}
	} else {
		if ((r = get_str(pfx, o, "checkout", "", false, &a.checkout, diag, dsz)) < 0 ||
		    (r = get_str(pfx, o, "scratch", "", false, &a.scratch, diag, dsz)) < 0 ||
		    (r = get_files(pfx, o, &a, diag, dsz)) < 0) {
			goto fail;
		}
		if (!order && (r = get_small(pfx, o, "patch_sha256", "", a.patch_sha256, sizeof(a.patch_sha256), diag,
					     dsz)) < 0) {
			goto fail;
		}
	}
	if ((r = check_plan(pfx, &a, order, diag, dsz)) < 0 ||
	    (r = canonical(pfx, o, p, n - 1, APPLY_PLAN_MAX_BYTES, diag, dsz)) < 0) {
		goto fail;
	}
	*ret = a;
	return 0;
fail:
	if (r == -ENOMEM) {
		diag_set(diag, dsz, "%sout of memory", pfx);
	}
	apply_plan_release(&a);
	return r;
}

int apply_plan_decode(const uint8_t *p, size_t n, struct apply_plan *ret, char *diag, size_t diag_size)
{
	return decode_plan(false, p, n, ret, diag, diag_size);
}

int apply_order_decode(const uint8_t *p, size_t n, struct apply_plan *ret, char *diag, size_t diag_size)
{
	return decode_plan(true, p, n, ret, diag, diag_size);
}

int apply_line_decode(const uint8_t *p, size_t n, struct apply_line *ret, char *diag, size_t dsz)
{
	_cleanup_json_ json_t *o = NULL;
	struct apply_line l = { 0 };
	int r;

	if (diag && dsz) {
		diag[0] = '\0';
	}
	r = parse_line(LINE_PFX, "APPLY_LINE_MAX", p, n, APPLY_LINE_MAX, 1, &o, diag, dsz);
	if (r < 0) {
		return r;
	}
	if (json_object_get(o, "written")) {
		l.kind = APPLY_LINE_WRITTEN;
		if ((r = check_keys(LINE_PFX, "a written line", o, written_keys, diag, dsz)) < 0 ||
		    (r = get_str(LINE_PFX, o, "written", "", false, &l.path, diag, dsz)) < 0) {
			goto fail;
		}
	} else if (json_object_get(o, "error")) {
		l.kind = APPLY_LINE_ERROR;
		if ((r = check_keys(LINE_PFX, "an error line", o, error_keys, diag, dsz)) < 0 ||
		    (r = get_str(LINE_PFX, o, "error", "", false, &l.error, diag, dsz)) < 0 ||
		    (r = get_str(LINE_PFX, o, "path", "", true, &l.path, diag, dsz)) < 0 ||
		    (r = get_str(LINE_PFX, o, "rule", "", true, &l.rule, diag, dsz)) < 0) {
			goto fail;
		}
	} else if (json_object_get(o, "done")) {
		l.kind = APPLY_LINE_DONE;
		if ((r = check_keys(LINE_PFX, "a done line", o, done_keys, diag, dsz)) < 0 ||
		    (r = get_u64(LINE_PFX, o, "done", "", &l.done, diag, dsz)) < 0) {
			goto fail;
		}
	} else {
		diag_set(diag, dsz, LINE_PFX "has none of the keys \"written\", \"error\", \"done\"");
		return -EBADMSG;
	}
	if ((r = check_line(&l, diag, dsz)) < 0) {
		goto fail;
	}
	if ((r = canonical(LINE_PFX, o, p, n - 1, APPLY_LINE_MAX, diag, dsz)) < 0) {
		goto fail;
	}
	*ret = l;
	return 0;
fail:
	if (r == -ENOMEM) {
		diag_set(diag, dsz, LINE_PFX "out of memory");
	}
	apply_line_release(&l);
	return r;
}

/* ---- encoders ---- */

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

static json_t *file_json(const struct apply_file *f)
{
	json_t *pre =
		json_pack("{s:o,s:o,s:s}", "mode", str_or_null(patch_mode_name(f->pre_mode)), "sha256",
			  str_or_null(f->pre_sha256[0] ? f->pre_sha256 : NULL), "type", pre_type_name(f->pre_type));

	if (!pre) {
		return NULL;
	}
	return json_pack("{s:b,s:o,s:s,s:s,s:o,s:o,s:o,s:I}", "binary", f->binary, "mode",
			 str_or_null(patch_mode_name(f->mode)), "op", apply_op_name(f->op), "path", f->path, "pre", pre,
			 "sensitive", str_or_null(f->sensitive), "sha256", str_or_null(f->sha256[0] ? f->sha256 : NULL),
			 "size", (json_int_t)f->size);
}

/* Append the JCS form of o and "\n" to out, all or nothing; max counts the "\n". */
static int put_line(const char *pfx, const json_t *o, size_t max, struct buf *out, char *diag, size_t dsz)
{
	_cleanup_free_ char *s = NULL;
	size_t n;
	int r;

	r = json_jcs_string(o, max - 1, &s);
	if (r < 0) {
		diag_set(diag, dsz, "%scannot be written: %s", pfx, r == -E2BIG ? "over its size cap" : tk_strerror(r));
		return r;
	}
	n = strlen(s);
	if (!out) {
		return 0;
	}
	if (buf_avail(out) < n + 1) {
		diag_set(diag, dsz, "%sno room in the output buffer", pfx);
		return -ENOBUFS;
	}
	if ((r = buf_put(out, s, n)) < 0 || (r = buf_put(out, "\n", 1)) < 0) {
		return r;
	}
	return 0;
}

static int encode_plan(bool order, const struct apply_plan *p, struct buf *out, char *diag, size_t dsz)
{
	const char *pfx = order ? ORDER_PFX : PLAN_PFX;
	_cleanup_json_ json_t *o = NULL, *files = NULL, *notices = NULL;
	int r;

	r = check_plan(pfx, p, order, diag, dsz);
	if (r < 0) {
		return r;
	}
	files = json_array();
	notices = json_array();
	if (!files || !notices) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < p->n_files; i++) {
		if (json_array_append_new(files, file_json(&p->files[i])) < 0) {
			/* json_pack refuses what is not UTF-8 */
			diag_set(diag, dsz, "%s\"files\"[%zu] has a string that is not UTF-8", pfx, i);
			return -EBADMSG;
		}
	}
	for (size_t i = 0; !order && i < p->n_notices; i++) {
		if (json_array_append_new(notices, json_pack("[s,s]", p->notices[i].path, p->notices[i].why)) < 0) {
			diag_set(diag, dsz, "%s\"notices\"[%zu] is not UTF-8", pfx, i);
			return -EBADMSG;
		}
	}
	if (order) {
		o = json_pack("{s:s,s:O,s:s,s:s}", "checkout", p->checkout, "files", files, "schema",
			      APPLY_WRITE_SCHEMA, "scratch", p->scratch);
	} else if (p->error) {
		o = json_pack("{s:s,s:O,s:o,s:o,s:s}", "error", p->error, "notices", notices, "path",
			      str_or_null(p->path), "rule", str_or_null(p->rule), "schema", APPLY_PLAN_SCHEMA);
	} else {
		o = json_pack("{s:s,s:O,s:O,s:s,s:s,s:s}", "checkout", p->checkout, "files", files, "notices", notices,
			      "patch_sha256", p->patch_sha256, "schema", APPLY_PLAN_SCHEMA, "scratch", p->scratch);
	}
	if (!o) {
		diag_set(diag, dsz, "%sa string is not UTF-8 (the message, a path or the checkout)", pfx);
		return -EBADMSG;
	}
	return put_line(pfx, o, APPLY_PLAN_MAX_BYTES, out, diag, dsz);
}

int apply_plan_encode(const struct apply_plan *p, struct buf *out)
{
	return encode_plan(false, p, out, NULL, 0);
}

int apply_order_encode(const struct apply_plan *p, struct buf *out)
{
	return encode_plan(true, p, out, NULL, 0);
}

int apply_line_encode(const struct apply_line *l, struct buf *out)
{
	_cleanup_json_ json_t *o = NULL;
	int r;

	r = check_line(l, NULL, 0);
	if (r < 0) {
		return r;
	}
	switch (l->kind) {
	case APPLY_LINE_WRITTEN:
		o = json_pack("{s:s}", "written", l->path);
		break;
	case APPLY_LINE_ERROR:
		o = json_pack("{s:s,s:o,s:o}", "error", l->error, "path", str_or_null(l->path), "rule",
			      str_or_null(l->rule));
		break;
	case APPLY_LINE_DONE:
		o = json_pack("{s:I}", "done", (json_int_t)l->done);
		break;
	default:
		return -EBADMSG;
	}
	if (!o) {
		return -EBADMSG; /* not UTF-8 */
	}
	return put_line(LINE_PFX, o, APPLY_LINE_MAX, out, NULL, 0);
}
