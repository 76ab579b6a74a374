/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "banned.h"
#include "crypto.h"
#include "daemon/apply.h"
#include "daemon/http.h"
#include "io.h"
#include "json.h"
#include "log.h"
#include "patch/apply-answer.h"
#include "patch/apply-prepare.h"
#include "patch/apply-write.h"
#include "patch/patch.h"
#include "strv.h"
#include "vmm/assets.h"

/* ---------------------------------------------------------------- replies */

static void reply_raw(int fd, int status, const char *ctype, const void *body, size_t n, const char *headers)
{
	char head[8192];
	int k = snprintf(head, sizeof(head),
			 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
			 status, http_reason(status), ctype, n, headers ? headers : "");

	if (fd >= 0 && k > 0 && (size_t)k < sizeof(head) && io_write_all(fd, head, (size_t)k) >= 0 && n > 0) {
		(void)io_write_all(fd, body, n);
	}
}

/* Takes v. */
static void reply_json(int fd, int status, json_t *v)
{
	char *s = v ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	static const char oom[] = "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}";

	if (s) {
		reply_raw(fd, status, "application/json", s, strlen(s), NULL);
	} else {
		reply_raw(fd, 500, "application/json", oom, sizeof(oom) - 1, NULL);
	}
	free(s);
	json_decref(v);
}

/* {"error":{code, message, ...extra}}; takes extra. */
static void reply_error(int fd, int status, const char *code, json_t *extra, const char *fmt, ...) _printf_(5, 6);
static void reply_error(int fd, int status, const char *code, json_t *extra, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	json_t *e = extra ? extra : json_object();

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (e) {
		(void)json_object_set_new(e, "code", json_string(code));
		(void)json_object_set_new(e, "message", json_string(msg));
	}
	reply_json(fd, status, json_pack("{s:o}", "error", e));
}

/* ---------------------------------------------------------------- the saved patch */

void box_patch_release(struct box_patch *p)
{
	free(p->error);
	if (p->fd >= 0) {
		(void)close(p->fd);
	}
	json_decref(p->notices);
	*p = (struct box_patch){ .fd = -1 };
}

static char *dir_file(const char *dir, const char *name)
{
	char *p = NULL;

	return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

/* The whole patch of p->fd in memory (at most PATCH_MAX_BYTES). */
static int patch_bytes(const struct box_patch *p, struct buf *out)
{
	int r = buf_init(out, PATCH_MAX_BYTES, 0);

	if (r >= 0 && lseek(p->fd, 0, SEEK_SET) < 0) {
		r = negative_errno();
	}
	if (r >= 0) {
		r = io_read_all(p->fd, out);
	}
	if (r >= 0 && buf_len(out) != p->bytes) {
		r = -EBADMSG;
	}
	return r;
}

/* patch.diff (0600), then patch.json: the record of what stop saved. */
static int patch_write(const char *dir, const struct box_patch *p, json_t *meta)
{
	_cleanup_free_ char *diff = dir_file(dir, "patch.diff"), *js = dir_file(dir, "patch.json"), *s = NULL;
	struct buf b = { 0 };
	int r = diff && js ? 0 : -ENOMEM;

	if (r >= 0 && !p->error) {
		r = patch_bytes(p, &b);
		if (r >= 0) {
			r = io_write_file_atomic(diff, buf_ptr(&b), buf_len(&b), 0600);
		}
		buf_release(&b);
	} else if (r >= 0) {
		(void)unlink(diff);
	}
	s = r >= 0 ? json_dumps(meta, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	if (r >= 0) {
		r = s ? io_write_file_atomic(js, s, strlen(s), 0600) : -ENOMEM;
	}
	return r;
}

void apply_patch_save(const char *dir, const struct box_patch *p, json_t **ret_box, json_t **ret_observe)
{
	json_t *meta = p->error ? json_pack("{s:s}", "error", p->error)
				: json_pack("{s:s,s:I,s:I,s:O}", "sha256", p->sha256, "bytes", (json_int_t)p->bytes,
					    "files", (json_int_t)p->files, "notices", p->notices);
	char why[512] = "";
	int r = meta ? patch_write(dir, p, meta) : -ENOMEM;

	if (r < 0) {
		(void)snprintf(why, sizeof(why), "the patch could not be saved in the box's state (%s)",
			       tk_strerror(r));
		json_decref(meta);
		meta = json_pack("{s:s}", "error", why);
	}
	/* The record holds no path content beyond the file count and the notices' paths. */
	if (!p->error && r >= 0) {
		*ret_observe = json_pack("{s:s,s:I,s:I,s:O,s:s}", "sha256", p->sha256, "bytes", (json_int_t)p->bytes,
					 "files", (json_int_t)p->files, "notices", p->notices, "status", "saved");
	} else {
		*ret_observe = json_pack("{s:n,s:I,s:I,s:[],s:s,s:s}", "sha256", "bytes", (json_int_t)0, "files",
					 (json_int_t)0, "notices", "status", "none", "reason", why[0] ? why : p->error);
	}
	*ret_box = meta;
}

json_t *apply_patch_box_json(const char *dir)
{
	_cleanup_free_ char *js = dir_file(dir, "patch.json"), *text = NULL;
	json_t *v = NULL;
	size_t n = 0;

	if (js &&
	    io_read_file(AT_FDCWD, js, JSON_DEFAULT_MAX_BYTES, IO_READ_REGULAR | IO_READ_NOFOLLOW, &text, &n) >= 0 &&
	    json_parse_strict(text, n, NULL, &v) < 0) {
		v = NULL;
	}
	return v;
}

/* patch.json's fields into ret; the file itself is checked against them by the caller. */
static int patch_meta(const json_t *v, struct box_patch *ret)
{
	const char *s = NULL;
	int64_t bytes = -1, files = -1;

	if (json_get_string(v, "error", &s) >= 0) {
		ret->error = strdup(s);
		return ret->error ? 0 : -ENOMEM;
	}
	if (json_get_string(v, "sha256", &s) < 0 || strlen(s) != 64 || json_get_int(v, "bytes", &bytes) < 0 ||
	    bytes < 0 || (uint64_t)bytes > PATCH_MAX_BYTES || json_get_int(v, "files", &files) < 0 || files < 0 ||
	    files > PATCH_MAX_FILES || !json_is_array(json_object_get(v, "notices"))) {
		return -EBADMSG;
	}
	(void)snprintf(ret->sha256, sizeof(ret->sha256), "%s", s);
	ret->bytes = (uint64_t)bytes;
	ret->files = (uint64_t)files;
	ret->notices = json_incref(json_object_get(v, "notices"));
	return 0;
}

int apply_patch_load(const char *dir, struct box_patch *ret)
{
	_cleanup_json_ json_t *v = apply_patch_box_json(dir);
	_cleanup_free_ char *diff = dir_file(dir, "patch.diff");
	struct box_patch p = { .fd = -1 };
	struct buf b = { 0 };
	char hex[SHA256_HEX_LEN + 1];
	int r;

	if (!v || !diff) {
		return v || !diff ? -ENOMEM : -ENOENT;
	}
	r = patch_meta(v, &p);
	if (r >= 0 && !p.error) {
		p.fd = open(diff, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		r = p.fd < 0 ? negative_errno() : patch_bytes(&p, &b);
		/* The saved bytes are the ones stop recorded. */
		if (r >= 0 && (sha256_hex(buf_ptr(&b), buf_len(&b), hex) < 0 || strcmp(hex, p.sha256) != 0)) {
			r = -EBADMSG;
		}
		buf_release(&b);
	}
	if (r < 0) {
		box_patch_release(&p);
		return r == -ENOENT ? -EBADMSG : r;
	}
	*ret = p;
	return 0;
}

/* ---------------------------------------------------------------- tkbox diff */

/* One file of the summary: {path, op, old_mode, new_mode, binary, added, deleted}. */
static json_t *summary_file(const struct patch_file *f)
{
	return json_pack("{s:s,s:s,s:s?,s:s?,s:b,s:I,s:I}", "path", f->path, "op", patch_op_name(f->op), "old_mode",
			 patch_mode_name(f->old_mode), "new_mode", patch_mode_name(f->new_mode), "binary", f->binary,
			 "added", (json_int_t)f->added, "deleted", (json_int_t)f->deleted);
}

/* Does v, base64url'd, fit in a header value the client keeps? */
static bool summary_fits(const json_t *v)
{
	_cleanup_free_ char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);

	return s && (strlen(s) + 2) / 3 * 4 <= APPLY_SUMMARY_MAX;
}

/*
 * The summary JSON: {files, notices, saved, files_total, notices_total}. A
 * header value is small (HTTP_MAX_HEADER_VALUE), so files and notices go in
 * while they fit; the totals say how many there are.
 */
static json_t *summary_json(const struct patch *pp, const json_t *notices, bool saved)
{
	json_t *v = json_pack("{s:[],s:[],s:b,s:I,s:I}", "files", "notices", "saved", saved, "files_total",
			      (json_int_t)pp->n_files, "notices_total", (json_int_t)json_array_size(notices));
	json_t *fa = json_object_get(v, "files"), *na = json_object_get(v, "notices");
	bool fits = v != NULL;

	for (size_t i = 0; fits && i < pp->n_files; i++) {
		fits = json_array_append_new(fa, summary_file(&pp->files[i])) == 0 && summary_fits(v);
		if (!fits) {
			(void)json_array_remove(fa, json_array_size(fa) - 1);
		}
	}
	for (size_t i = 0; fits && i < json_array_size(notices); i++) {
		fits = json_array_append(na, json_array_get(notices, i)) == 0 && summary_fits(v);
		if (!fits) {
			(void)json_array_remove(na, json_array_size(na) - 1);
		}
	}
	return v;
}

static int summary_header(const struct patch *pp, const json_t *notices, bool saved, char **ret)
{
	_cleanup_json_ json_t *v = summary_json(pp, notices, saved);
	_cleanup_free_ char *s = v ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	struct buf b;
	int r = s ? buf_init(&b, APPLY_SUMMARY_MAX + 8, 0) : -ENOMEM;

	if (r >= 0) {
		r = b64_encode(s, strlen(s), B64_URL, &b);
		if (r >= 0) {
			r = buf_dup_cstring(&b, ret);
		}
		buf_release(&b);
	}
	return r;
}

void apply_diff_respond(int client_fd, const struct box_patch *p, bool saved)
{
	_cleanup_free_ char *sum = NULL, *headers = NULL;
	struct patch pp = { 0 };
	struct buf b = { 0 };
	char diag[512] = "";
	int r = patch_bytes(p, &b);

	/* The daemon reads the patch again for the summary: the same strict parser the supervisor ran. */
	if (r >= 0) {
		r = patch_parse(buf_ptr(&b), buf_len(&b), &pp, diag, sizeof(diag));
	}
	if (r >= 0) {
		r = summary_header(&pp, p->notices, saved, &sum);
	}
	if (r >= 0 && asprintf(&headers, "Tkbox-Patch-Sha256: %s\r\nTkbox-Patch-Summary: %s\r\n", p->sha256, sum) < 0) {
		r = -ENOMEM;
	}
	if (r < 0) {
		reply_error(client_fd, 500, "internal", NULL, "the box's patch could not be read back: %s",
			    diag[0] ? diag : tk_strerror(r));
	} else {
		reply_raw(client_fd, 200, "application/octet-stream", buf_ptr(&b), buf_len(&b), headers);
	}
	patch_release(&pp);
	buf_release(&b);
}

/* ---------------------------------------------------------------- tkbox apply */

/* One apply: its plan, a crossing per file, what the writer has written, and the reply once the run is closed. */
struct apply_ctx {
	const struct apply_box *ab;
	const struct api_apply_req *q;
	int fd; /* the client */
	struct box_patch patch;
	char *checkout, *scratch, *patch_file;
	struct apply_plan plan;
	struct crossing *x; /* plan.n_files of them */
	json_t **args;
	size_t n_decided; /* x[0..n_decided) were let through (a completion is owed when decided) */
	bool any_answered; /* the signer answered a decide: the run closes at the end (Figure 7) */
	bool denied;
	size_t n_written;
	int status; /* the reply, sent after the run is closed */
	json_t *reply;
};

static void apply_event(struct apply_ctx *a, bool problem, const char *event, json_t *extra)
{
	a->ab->host->event(a->ab->box, problem, event, extra);
}

/* The reply to send at the end: {"error":{code, message, ...extra}} (takes extra). Returns err. */
static int apply_fail(struct apply_ctx *a, int err, int status, const char *code, json_t *extra, const char *fmt, ...)
	_printf_(6, 7);
static int apply_fail(struct apply_ctx *a, int err, int status, const char *code, json_t *extra, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	json_t *e = extra ? extra : json_object();

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (e) {
		(void)json_object_set_new(e, "code", json_string(code));
		(void)json_object_set_new(e, "message", json_string(msg));
	}
	json_decref(a->reply);
	a->status = status;
	a->reply = json_pack("{s:o}", "error", e);
	return err;
}

/* The written paths so far as a JSON array. */
static json_t *written_json(const struct apply_ctx *a)
{
	json_t *w = json_array();

	for (size_t i = 0; w && i < a->n_written; i++) {
		(void)json_array_append_new(w, json_string(a->plan.files[i].path));
	}
	return w;
}

/* The plan's notices as [[path, why], ...]. */
static json_t *notices_json(const struct apply_plan *p)
{
	json_t *n = json_array();

	for (size_t i = 0; n && i < p->n_notices; i++) {
		(void)json_array_append_new(n, json_pack("[s,s]", p->notices[i].path, p->notices[i].why));
	}
	return n;
}

/* The patch saved at stop. */
static int apply_load(struct apply_ctx *a)
{
	int r = apply_patch_load(a->ab->dir, &a->patch);

	if (r == -ENOENT) {
		return apply_fail(a, r, 409, "no_patch", NULL,
				  "box %s has no saved patch: only tkbox stop of a running box saves one", a->ab->name);
	}
	if (r < 0) {
		return apply_fail(a, r, 409, "no_patch", NULL,
				  r == -EBADMSG
					  ? "box %s's saved patch (patch.diff) is not the one tkbox stop recorded: it "
					    "changed or went since; nothing was written"
					  : "box %s's saved patch cannot be read (%s); nothing was written",
				  a->ab->name, tk_strerror(r));
	}
	if (a->patch.error) {
		return apply_fail(a, -ENOENT, 409, "no_patch", NULL, "box %s has no patch: %s", a->ab->name,
				  a->patch.error);
	}
	return 0;
}

/* Where the patch and the checkout are, and a new empty scratch <box>/apply.<n>/ (0700). */
static int apply_paths(struct apply_ctx *a)
{
	const char *checkout = a->q->checkout ? a->q->checkout : a->ab->workspace;

	if (!checkout) {
		return apply_fail(a, -EINVAL, 400, "no_checkout", NULL,
				  "box %s has no --workspace to apply to: tkbox apply %s --checkout DIR", a->ab->name,
				  a->ab->name);
	}
	a->checkout = strdup(checkout);
	a->patch_file = dir_file(a->ab->dir, "patch.diff");
	for (unsigned n = 1; a->checkout && a->patch_file && !a->scratch && n < 1000; n++) {
		if (asprintf(&a->scratch, "%s/apply.%u", a->ab->dir, n) < 0) {
			a->scratch = NULL;
			break;
		}
		if (mkdir(a->scratch, 0700) < 0) {
			int e = errno;
			free(a->scratch);
			a->scratch = NULL;
			if (e != EEXIST) {
				break;
			}
		}
	}
	if (!a->scratch) {
		return apply_fail(a, -EIO, 500, "internal", NULL, "no scratch directory for the apply in %s",
				  a->ab->dir);
	}
	return 0;
}

/* prepare: the confined child plans the patch against the checkout. 0 planned. */
static int apply_prepare_step(struct apply_ctx *a)
{
	_cleanup_free_ char *self = realpath("/proc/self/exe", NULL);
	char diag[1024] = "";
	int r = self ? apply_prepare_exec(self, a->patch_file, a->checkout, a->scratch, a->q->allow_sensitive, &a->plan,
					  diag, sizeof(diag))
		     : negative_errno();

	if (r < 0) {
		apply_event(a, true, "apply.failed", json_pack("{s:s}", "message", diag[0] ? diag : tk_strerror(r)));
		return apply_fail(a, r, 500, "internal", NULL,
				  "the apply could not be prepared: %s; nothing was written",
				  diag[0] ? diag : tk_strerror(r));
	}
	if (a->plan.error) {
		apply_event(a, false, "apply.refused",
			    json_pack("{s:s?,s:s?,s:s}", "rule", a->plan.rule, "path", a->plan.path, "message",
				      a->plan.error));
		return apply_fail(a, -EPERM, 422, "apply_refused",
				  json_pack("{s:s?,s:s?,s:o}", "rule", a->plan.rule, "path", a->plan.path, "notices",
					    notices_json(&a->plan)),
				  "%s; nothing was decided or written", a->plan.error);
	}
	if (strcmp(a->plan.patch_sha256, a->patch.sha256) != 0) {
		return apply_fail(
			a, -EBADMSG, 500, "internal", NULL,
			"prepare read another patch than the one saved at stop (sha256 %s, saved %s); nothing "
			"was written",
			a->plan.patch_sha256, a->patch.sha256);
	}
	return 0;
}

/* The dry run: the plan, nothing decided or written. The FILE objects are the plan's own encoding. */
static int apply_dry_run(struct apply_ctx *a)
{
	struct buf b;
	json_t *v = NULL;
	int r = buf_init(&b, APPLY_PLAN_MAX_BYTES + 1, 0);

	if (r >= 0) {
		r = apply_plan_encode(&a->plan, &b);
	}
	if (r >= 0) {
		size_t n = buf_len(&b) - (buf_len(&b) && buf_ptr(&b)[buf_len(&b) - 1] == '\n'); /* one line */
		r = json_parse_strict(buf_ptr(&b), n, &(struct json_opts){ .max_bytes = APPLY_PLAN_MAX_BYTES }, &v);
	}
	buf_release(&b);
	if (r < 0) {
		return apply_fail(a, r, 500, "internal", NULL, "the plan could not be shown: %s", tk_strerror(r));
	}
	a->status = 200;
	a->reply = json_pack("{s:s,s:O,s:O,s:b}", "patch_sha256", a->plan.patch_sha256, "files",
			     json_object_get(v, "files"), "notices", json_object_get(v, "notices"), "dry_run", 1);
	json_decref(v);
	return 0;
}

/* ---------------------------------------------------------------- decide every file */

/* The act is the writer's, for every decided file at once: the engine never acts for this door (crossing_finish). */
static const struct crossing_door apply_door = {
	.name = "apply",
	.tool = "Write",
};

/* The Write the signer decides for one file. */
static json_t *write_args(const struct apply_ctx *a, const struct apply_file *f)
{
	_cleanup_free_ char *fp = NULL;
	bool gone = f->op == PATCH_DELETE;
	size_t n = strlen(a->checkout);

	if (asprintf(&fp, "%s%s%s", a->checkout, n && a->checkout[n - 1] == '/' ? "" : "/", f->path) < 0) {
		return NULL;
	}
	return json_pack("{s:s,s:s,s:s,s:s?,s:s?,s:I,s:b,s:s?,s:s,s:s?}", "file_path", fp, "path", f->path, "op",
			 apply_op_name(f->op), "mode", gone ? NULL : patch_mode_name(f->mode), "content_sha256",
			 gone ? NULL : f->sha256, "size", (json_int_t)f->size, "binary", f->binary, "sensitive",
			 f->sensitive, "patch_sha256", a->plan.patch_sha256, "pre_sha256",
			 f->pre_type == APPLY_PRE_ABSENT ? NULL : f->pre_sha256);
}

/* Complete x[from..n_decided) as not written, with error (written_paths []). */
static void finish_unwritten(struct apply_ctx *a, size_t from, const char *error)
{
	for (size_t i = from; i < a->n_decided; i++) {
		struct crossing_result res = { .started = true, .ok = false, .error = strdup(error) };
		res.written_paths = calloc(1, sizeof(char *));
		crossing_finish(&a->x[i], &res);
		crossing_result_release(&res);
	}
}

/* File i was refused (the signer, a person, or no answer): nothing is written; the allowed ones end as not written. */
static int apply_denied(struct apply_ctx *a, size_t i, int r)
{
	const struct crossing *x = &a->x[i];
	const json_t *rules = json_object_get(x->refusal.extra, "rule_ids");
	const char *rule = json_is_array(rules) && json_array_size(rules) ? json_string_value(json_array_get(rules, 0))
			   : x->refusal.code				  ? x->refusal.code
									  : "refused";
	const char *path = a->plan.files[i].path;
	char why[1024];

	(void)snprintf(why, sizeof(why), "not written: %s was refused (%s), so nothing was written", path, rule);
	finish_unwritten(a, 0, why);
	a->denied = r == -EPERM;
	apply_event(a, false, "apply.refused",
		    json_pack("{s:s,s:s,s:s}", "path", path, "rule", rule, "message", x->refusal.message));
	/* Refused by the signer or by a person: denied; the signer not answering: signer_unreachable (503). */
	return apply_fail(a, r, x->refusal.status ? x->refusal.status : 503,
			  x->refusal.status == 403 ? "denied"
			  : x->refusal.code	   ? x->refusal.code
						   : "signer_unreachable",
			  json_pack("{s:s,s:s,s:[],s:o,s:O?}", "path", path, "rule", rule, "written_paths", "notices",
				    notices_json(&a->plan), "decision_id",
				    json_object_get(x->refusal.extra, "decision_id")),
			  "%s: %s; nothing was written", path, x->refusal.message[0] ? x->refusal.message : "refused");
}

/* Every file decided before any is written. 0 when all may be written. */
static int apply_decide(struct apply_ctx *a)
{
	size_t n = a->plan.n_files;

	a->x = calloc(n ? n : 1, sizeof(*a->x));
	a->args = calloc(n ? n : 1, sizeof(*a->args));
	if (!a->x || !a->args) {
		return apply_fail(a, -ENOMEM, 500, "internal", NULL, "out of memory; nothing was decided or written");
	}
	for (size_t i = 0; i < n; i++) {
		int r;
		a->args[i] = write_args(a, &a->plan.files[i]);
		a->x[i] = (struct crossing){ .door = &apply_door,
					     .host = a->ab->host,
					     .box = a->ab->box,
					     .ctx = a,
					     .args = a->args[i],
					     .seq = (int64_t)i + 1,
					     .unrecorded = a->ab->unrecorded,
					     .run_id = a->ab->run_id,
					     .run_token = a->ab->run_token,
					     .client_fd = a->fd,
					     .approval_wait_ms = a->ab->approval_wait_ms };
		if (!a->args[i]) {
			finish_unwritten(a, 0, "not written: out of memory, so nothing was written");
			return apply_fail(a, -ENOMEM, 500, "internal", NULL, "out of memory; nothing was written");
		}
		r = crossing_gate_only(&a->x[i]);
		a->any_answered = a->any_answered || a->x[i].decision_id[0]; /* the signer answered: a record */
		if (r < 0) {
			return apply_denied(a, i, r);
		}
		a->n_decided = i + 1;
	}
	return 0;
}

/* ---------------------------------------------------------------- write, in order */

/* The writer's "written" line for the next file: its decision completed at once (ok, written_paths [path]). */
static void apply_written(struct apply_ctx *a)
{
	const char *path = a->plan.files[a->n_written].path;
	struct crossing_result res = { .started = true, .ok = true };

	res.written_paths = calloc(2, sizeof(char *));
	if (res.written_paths) {
		res.written_paths[0] = strdup(path);
	}
	crossing_finish(&a->x[a->n_written], &res);
	crossing_result_release(&res);
	a->n_written++;
	apply_event(a, false, "apply.written", json_pack("{s:s}", "path", path));
}

/* "a, b" of the files written so far (cut near max bytes), or "none". */
static char *written_list(const struct apply_ctx *a, size_t max)
{
	struct buf b;
	char *s = NULL;

	if (buf_init(&b, max + 64, 0) < 0) {
		return NULL;
	}
	for (size_t i = 0; i < a->n_written; i++) {
		const char *p = a->plan.files[i].path;
		if (buf_len(&b) + strlen(p) + 2 > max) {
			(void)buf_put(&b, ", ...", 5);
			break;
		}
		(void)buf_put(&b, i ? ", " : "", i ? 2 : 0);
		(void)buf_put(&b, p, strlen(p));
	}
	if (a->n_written == 0) {
		(void)buf_put(&b, "none", 4);
	}
	(void)buf_dup_cstring(&b, &s);
	buf_release(&b);
	return s;
}

/* The writer stopped at the next file (an error line, a bad line, its death): the rest end as not written. */
static int apply_stopped(struct apply_ctx *a, const char *why, const char *rule)
{
	const char *path = a->n_written < a->plan.n_files ? a->plan.files[a->n_written].path : "the end";
	_cleanup_free_ char *list = written_list(a, 3000), *err = NULL;

	if (asprintf(&err, "not written: apply stopped at %s: %s; written before it: %s", path, why,
		     list ? list : "?") < 0) {
		err = NULL;
	}
	finish_unwritten(a, a->n_written, err ? err : "not written: apply stopped");
	apply_event(a, true, "apply.failed",
		    json_pack("{s:s,s:s,s:s?,s:o}", "path", path, "message", why, "rule", rule, "written_paths",
			      written_json(a)));
	return apply_fail(a, -EIO, 500, "apply_partial",
			  json_pack("{s:s,s:s?,s:o,s:o}", "path", path, "rule", rule, "written_paths", written_json(a),
				    "notices", notices_json(&a->plan)),
			  "apply stopped at %s: %s; written before it (not rolled back): %s", path, why,
			  list ? list : "?");
}

/* One progress line: 1 more to come, 0 all written, < 0 stopped (the reply is set). */
static int apply_line(struct apply_ctx *a, const struct apply_line *l)
{
	if (l->kind == APPLY_LINE_WRITTEN && a->n_written < a->plan.n_files &&
	    strcmp(l->path, a->plan.files[a->n_written].path) == 0) {
		apply_written(a);
		return 1;
	}
	if (l->kind == APPLY_LINE_DONE && l->done == a->plan.n_files && a->n_written == a->plan.n_files) {
		return 0;
	}
	if (l->kind == APPLY_LINE_ERROR) {
		return apply_stopped(a, l->error, l->rule);
	}
	return apply_stopped(a, "the writer's progress is out of order (it was killed)", NULL);
}

/* The writer child with the decided files, in order; each "written" line completes that file's decision. */
static int apply_write_step(struct apply_ctx *a)
{
	struct apply_plan order = a->plan;
	_cleanup_free_ char *self = realpath("/proc/self/exe", NULL);
	struct apply_writer *w = NULL;
	char diag[1024] = "";
	int r, status = 0;

	order.n_notices = 0; /* the order is the plan's decided files, without its notices */
	r = self ? apply_write_start(self, &order, a->ab->child_env, &w, diag, sizeof(diag)) : negative_errno();
	if (r < 0) {
		return apply_stopped(a, diag[0] ? diag : tk_strerror(r), NULL);
	}
	for (r = 1; r > 0;) {
		struct apply_line l = { 0 };
		struct pollfd p = { .fd = apply_write_fd(w), .events = POLLIN };
		int k = apply_write_read(w, &l, diag, sizeof(diag));
		if (k == 0) {
			(void)poll(&p, 1, -1);
			continue;
		}
		r = k > 0 ? apply_line(a, &l)
			  : apply_stopped(a, k == -EPIPE ? "the writer ended before it said so" : diag, NULL);
		apply_line_release(&l);
	}
	if (r < 0) {
		(void)kill(apply_write_pid(w), SIGKILL); /* nothing more is written once the apply has stopped */
	}
	(void)apply_write_end(w, &status);
	return r;
}

/* ---------------------------------------------------------------- the whole apply */

static int apply_all(struct apply_ctx *a)
{
	int r = apply_decide(a);

	if (r >= 0) {
		r = apply_write_step(a);
	}
	if (r >= 0) {
		apply_event(a, false, "apply.finished",
			    json_pack("{s:o,s:s}", "written", written_json(a), "patch_sha256", a->plan.patch_sha256));
		a->status = 200;
		a->reply = json_pack("{s:s,s:o,s:o,s:b}", "patch_sha256", a->plan.patch_sha256, "written",
				     written_json(a), "notices", notices_json(&a->plan), "dry_run", 0);
	}
	return r;
}

static void apply_ctx_release(struct apply_ctx *a)
{
	for (size_t i = 0; a->x && i < a->plan.n_files; i++) {
		crossing_release(&a->x[i]);
		json_decref(a->args ? a->args[i] : NULL);
	}
	free(a->x);
	free(a->args);
	if (a->scratch && vm_rm_rf(a->scratch) < 0) {
		log_warn("box %s: the apply's scratch %s was not removed", a->ab->name, a->scratch);
	}
	apply_plan_release(&a->plan);
	box_patch_release(&a->patch);
	free(a->checkout);
	free(a->scratch);
	free(a->patch_file);
	json_decref(a->reply);
}

void apply_handle(int client_fd, const struct apply_box *ab, const struct api_apply_req *q)
{
	struct apply_ctx a = { .ab = ab, .q = q, .fd = client_fd, .patch = { .fd = -1 } };
	int r = apply_load(&a);

	if (r >= 0) {
		r = apply_paths(&a);
	}
	if (r >= 0) {
		apply_event(&a, false, "apply.started",
			    json_pack("{s:s,s:s,s:b,s:b}", "checkout", a.checkout, "patch_sha256", a.patch.sha256,
				      "dry_run", q->dry_run, "allow_sensitive", q->allow_sensitive));
		r = apply_prepare_step(&a);
	}
	if (r >= 0) {
		r = q->dry_run ? apply_dry_run(&a) : apply_all(&a);
	}
	/* Once the signer decided a Write the run ends here, after the completions (Figure 7); the reply after it. */
	if (a.any_answered) {
		ab->close_run(ab->box, r >= 0 ? "applied" : a.denied ? "apply denied" : "apply failed");
	}
	/* The scratch goes before the reply: a client that heard "applied" finds no apply.N/ left behind. */
	json_t *reply = steal_ptr(a.reply);
	int status = a.status;
	apply_ctx_release(&a);
	if (reply) {
		reply_json(client_fd, status, reply);
	}
}

void apply_remove_scratch(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		_cleanup_free_ char *p = NULL;
		if (strncmp(de->d_name, "apply.", 6) == 0 && (p = dir_file(dir, de->d_name)) && vm_rm_rf(p) < 0) {
			log_warn("%s was not removed", p);
		}
	}
	if (d) {
		(void)closedir(d);
	}
}
