/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "path.h"
#include "image/image-answer.h"
#include "image/ref.h"
#include "json.h"
#include "log.h"
/* BOOT_MAX_ENV, BOOT_MAX_STRING: the env of an answer ends up in the box's boot config, so it has the same limits */
#include "vmm/boot-proto.h"

#define PFX "image answer: "

/* Every key, in JCS order; all are required. */
static const char *const answer_keys[] = { "config",   "env",	 "ext4", "from_cache",	"image_json",
					   "manifest", "schema", "user", "working_dir", NULL };

static int check_path(const char *key, const char *s, struct image_diag *diag)
{
	if (!s) {
		image_diag_set(diag, PFX "\"%s\" is missing", key);
		return -EBADMSG;
	}
	if (strlen(s) > IMAGE_ANSWER_MAX_PATH) {
		image_diag_set(diag, PFX "\"%s\" is %zu bytes, more than IMAGE_ANSWER_MAX_PATH (%d)", key, strlen(s),
			       IMAGE_ANSWER_MAX_PATH);
		return -E2BIG;
	}
	if (!path_is_normal_abs(s)) {
		image_diag_set(diag,
			       PFX "\"%s\" is not an absolute path without \".\" or \"..\" segments and control "
				   "characters",
			       key);
		return -EBADMSG;
	}
	return 0;
}

/* The rules the decoder applies to a decoded answer and the encoder to what it is asked to write. */
static int check_fields(const struct image_result *r, struct image_diag *diag)
{
	int ret;

	if (!r->config_digest || !image_digest_valid(r->config_digest)) {
		image_diag_set(diag, PFX "\"config\" is not a sha256:<64 lowercase hex> digest");
		return -EBADMSG;
	}
	if (r->manifest_digest && !image_digest_valid(r->manifest_digest)) {
		image_diag_set(diag, PFX "\"manifest\" is neither null nor a sha256:<64 lowercase hex> digest");
		return -EBADMSG;
	}
	if ((ret = check_path("ext4", r->ext4_path, diag)) < 0 ||
	    (ret = check_path("image_json", r->json_path, diag)) < 0) {
		return ret;
	}
	if (r->working_dir) {
		/* an image's WorkingDir need not be in normal form ("/app/"), but it must be absolute */
		if (strlen(r->working_dir) > IMAGE_ANSWER_MAX_PATH) {
			image_diag_set(diag,
				       PFX "\"working_dir\" (the image's WorkingDir) is %zu bytes, more than "
					   "IMAGE_ANSWER_MAX_PATH (%d)",
				       strlen(r->working_dir), IMAGE_ANSWER_MAX_PATH);
			return -E2BIG;
		}
		if (r->working_dir[0] != '/') {
			image_diag_set(diag, PFX "\"working_dir\" (the image's WorkingDir) is not an absolute path");
			return -EBADMSG;
		}
	}
	if (r->user) {
		size_t n = strlen(r->user);
		if (n > IMAGE_ANSWER_MAX_USER) {
			image_diag_set(diag,
				       PFX "\"user\" (the image's User) is %zu bytes, more than IMAGE_ANSWER_MAX_USER "
					   "(%d)",
				       n, IMAGE_ANSWER_MAX_USER);
			return -E2BIG;
		}
		if (n == 0) {
			image_diag_set(diag, PFX "\"user\" is empty (an unset User is null)");
			return -EBADMSG;
		}
	}
	if (r->n_env > BOOT_MAX_ENV) {
		image_diag_set(diag,
			       PFX "\"env\" has %zu entries, more than BOOT_MAX_ENV (%d), the most a box's boot "
				   "config holds; drop Env entries from the image",
			       r->n_env, BOOT_MAX_ENV);
		return -E2BIG;
	}
	for (size_t i = 0; i < r->n_env; i++) {
		const char *e = r->env ? r->env[i] : NULL;
		if (!e) {
			image_diag_set(diag, PFX "\"env\"[%zu] is missing", i);
			return -EBADMSG;
		}
		if (strlen(e) > BOOT_MAX_STRING) {
			image_diag_set(diag, PFX "\"env\"[%zu] is %zu bytes, more than BOOT_MAX_STRING (%u)", i,
				       strlen(e), BOOT_MAX_STRING);
			return -E2BIG;
		}
		if (e[0] == '=' || !strchr(e, '=')) {
			image_diag_set(diag, PFX "\"env\"[%zu] is not NAME=value with a non-empty NAME", i);
			return -EBADMSG;
		}
	}
	return 0;
}

/* ---- decoder ---- */

/* jansson's message, with anything but printable ASCII replaced: it may quote bytes of the input. */
static void diag_json_error(struct image_diag *diag, const char *what, const json_error_t *e)
{
	char text[JSON_ERROR_TEXT_LENGTH];
	size_t i;

	for (i = 0; i + 1 < sizeof(text) && e->text[i]; i++) {
		unsigned char c = (unsigned char)e->text[i];
		text[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	text[i] = '\0';
	image_diag_set(diag, PFX "%s: %s (byte %d)", what, text, e->position);
}

/*
 * Say why json_parse_strict refused p. The verdict is json_parse_strict's;
 * jansson is asked again only for where and why, so the message can say
 * "trailing bytes" or name a duplicate key.
 */
static void diag_parse(const void *p, size_t n, int r, struct image_diag *diag)
{
	json_error_t e;
	json_t *v;

	if (r == -E2BIG) {
		image_diag_set(diag, PFX "nested deeper than an answer is (an object of strings and one array)");
		return;
	}
	if (r == -ENOMEM) {
		image_diag_set(diag, PFX "out of memory");
		return;
	}
	v = json_loadb(p, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &e);
	if (v) {
		image_diag_set(diag, PFX "not a JSON object, or a form the strict JSON reader refuses "
					 "(lone surrogate, over-long number)");
		json_decref(v);
		return;
	}
	v = json_loadb(p, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK, &e);
	if (v) {
		json_decref(v);
		image_diag_set(diag, PFX "trailing bytes after the JSON object (from byte %d of %zu)", e.position, n);
		return;
	}
	diag_json_error(diag, "not valid JSON", &e);
}

static int get_env(const json_t *o, struct image_result *res, struct image_diag *diag)
{
	const json_t *a = json_object_get(o, "env");
	size_t n;

	if (!json_is_array(a)) {
		image_diag_set(diag, PFX "\"env\" is not an array");
		return -EBADMSG;
	}
	n = json_array_size(a);
	if (n > BOOT_MAX_ENV) {
		image_diag_set(diag,
			       PFX "\"env\" has %zu entries, more than BOOT_MAX_ENV (%d), the most a box's boot "
				   "config holds; drop Env entries from the image",
			       n, BOOT_MAX_ENV);
		return -E2BIG;
	}
	res->env = calloc(n + 1, sizeof(char *));
	if (!res->env) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const json_t *s = json_array_get(a, i);
		if (!json_is_string(s)) {
			image_diag_set(diag, PFX "\"env\"[%zu] is not a string", i);
			return -EBADMSG;
		}
		res->env[i] = strndup(json_string_value(s), json_string_length(s));
		if (!res->env[i]) {
			return -ENOMEM;
		}
		res->n_env = i + 1;
	}
	return 0;
}

int image_answer_decode(const void *p, size_t n, struct image_result *ret, struct image_diag *diag)
{
	const struct json_opts jo = { .max_bytes = IMAGE_ANSWER_MAX_BYTES, .max_depth = 2, .want_top = JSON_OBJECT };
	_cleanup_json_ json_t *o = NULL;
	_cleanup_free_ char *schema = NULL;
	struct image_result res = { 0 };
	int r;

	if (n > IMAGE_ANSWER_MAX_BYTES) {
		image_diag_set(diag, PFX "%zu bytes, more than IMAGE_ANSWER_MAX_BYTES (%zu)", n,
			       IMAGE_ANSWER_MAX_BYTES);
		return -E2BIG;
	}
	if (n == 0 || ((const char *)p)[n - 1] != '\n') {
		image_diag_set(diag, PFX "%s", n == 0 ? "empty" : "does not end with a newline (cut short?)");
		return -EBADMSG;
	}
	n--;
	r = json_parse_strict(p, n, &jo, &o);
	if (r < 0) {
		diag_parse(p, n, r, diag);
		return r;
	}
	r = image_answer_check_keys(o, answer_keys, PFX, diag);
	if (r < 0) {
		return r;
	}
	if ((r = image_answer_get_str(o, "schema", false, PFX, &schema, diag)) < 0) {
		return r;
	}
	if (strcmp(schema, IMAGE_ANSWER_SCHEMA) != 0) {
		image_diag_set(diag, PFX "\"schema\" is not \"" IMAGE_ANSWER_SCHEMA "\" (a tkbox of another version?)");
		return -EBADMSG;
	}
	if (!json_is_boolean(json_object_get(o, "from_cache"))) {
		image_diag_set(diag, PFX "\"from_cache\" is not true or false");
		return -EBADMSG;
	}
	res.from_cache = json_is_true(json_object_get(o, "from_cache"));
	if ((r = image_answer_get_str(o, "config", false, PFX, &res.config_digest, diag)) < 0 ||
	    (r = image_answer_get_str(o, "manifest", true, PFX, &res.manifest_digest, diag)) < 0 ||
	    (r = image_answer_get_str(o, "ext4", false, PFX, &res.ext4_path, diag)) < 0 ||
	    (r = image_answer_get_str(o, "image_json", false, PFX, &res.json_path, diag)) < 0 ||
	    (r = image_answer_get_str(o, "working_dir", true, PFX, &res.working_dir, diag)) < 0 ||
	    (r = image_answer_get_str(o, "user", true, PFX, &res.user, diag)) < 0 || (r = get_env(o, &res, diag)) < 0 ||
	    (r = check_fields(&res, diag)) < 0) {
		goto fail;
	}
	/* exactly what image_answer_encode writes: one canonical form, nothing else to look at */
	r = image_answer_canonical(o, p, n, IMAGE_ANSWER_MAX_BYTES, PFX, diag);
	if (r < 0) {
		goto fail;
	}
	*ret = res;
	return 0;
fail:
	if (r == -ENOMEM) {
		image_diag_set(diag, PFX "out of memory");
	}
	image_result_release(&res);
	return r;
}

/* ---- encoder ---- */

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

int image_answer_encode(const struct image_result *res, struct buf *out, struct image_diag *diag)
{
	_cleanup_json_ json_t *o = NULL, *env = NULL;
	_cleanup_free_ char *s = NULL;
	size_t n;
	int r;

	r = check_fields(res, diag);
	if (r < 0) {
		return r;
	}
	env = json_array();
	if (!env) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < res->n_env; i++) {
		if (json_array_append_new(env, json_string(res->env[i])) < 0) {
			/* json_string refuses what is not UTF-8 */
			image_diag_set(diag, PFX "\"env\"[%zu] is not UTF-8", i);
			return -EBADMSG;
		}
	}
	o = json_pack("{s:s,s:O,s:s,s:b,s:s,s:o,s:s,s:o,s:o}", "config", res->config_digest, "env", env, "ext4",
		      res->ext4_path, "from_cache", res->from_cache, "image_json", res->json_path, "manifest",
		      str_or_null(res->manifest_digest), "schema", IMAGE_ANSWER_SCHEMA, "user", str_or_null(res->user),
		      "working_dir", str_or_null(res->working_dir));
	if (!o || (res->user && json_is_null(json_object_get(o, "user"))) ||
	    (res->working_dir && json_is_null(json_object_get(o, "working_dir")))) {
		image_diag_set(diag, PFX "a string is not UTF-8 (WorkingDir, User or a path)");
		return -EBADMSG;
	}
	r = json_jcs_string(o, IMAGE_ANSWER_MAX_BYTES - 1, &s);
	if (r == -E2BIG) {
		image_diag_set(diag,
			       PFX "more than IMAGE_ANSWER_MAX_BYTES (%zu bytes) with its newline; the image's Env "
				   "is too large for a box's boot config",
			       IMAGE_ANSWER_MAX_BYTES);
		return r;
	}
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

int image_answer_exec(const char *exe, const struct image_opts *o, const char *ref, struct image_result *ret)
{
	static const char *const pass[] = { "HOME",	   "SSL_CERT_FILE", "SSL_CERT_DIR", "https_proxy",
					    "HTTPS_PROXY", "no_proxy",	    "NO_PROXY" };
	_cleanup_buf_ struct buf *out = NULL, *err = NULL;
	_cleanup_free_ char *prefix = NULL;
	struct image_result res = { 0 };
	char *argv[17], *envp[ARRAY_SIZE(pass) + 3];
	char *envs[ARRAY_SIZE(pass)] = { 0 };
	struct image_diag scratch;
	struct image_diag *diag = o->diag ? o->diag : &scratch;
	size_t na = 0, ne = 0;
	int r;

	if (!exe || !o->state_dir || !ref) {
		return -EINVAL;
	}
	argv[na++] = (char *)exe;
	argv[na++] = "images";
	argv[na++] = "--json";
	argv[na++] = "--state";
	argv[na++] = (char *)o->state_dir;
	if (o->platform) {
		argv[na++] = "--platform";
		argv[na++] = (char *)o->platform;
	}
	if (o->auth_file) {
		argv[na++] = "--registry-auth";
		argv[na++] = (char *)o->auth_file;
	}
	if (o->ca_file) {
		argv[na++] = "--registry-ca";
		argv[na++] = (char *)o->ca_file;
	}
	argv[na++] = "--";
	argv[na++] = o->refresh ? "pull" : "resolve";
	argv[na++] = (char *)ref;
	argv[na] = NULL;
	envp[ne++] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
	envp[ne++] = "LC_ALL=C";
	for (size_t i = 0; i < ARRAY_SIZE(pass); i++) {
		const char *v = getenv(pass[i]);
		if (v && asprintf(&envs[i], "%s=%s", pass[i], v) >= 0) {
			envp[ne++] = envs[i];
		}
	}
	envp[ne] = NULL;
	if ((r = buf_new(IMAGE_ANSWER_MAX_BYTES, 0, &out)) < 0 || (r = buf_new(IMAGE_DIAG_MAX * 4, 0, &err)) < 0) {
		goto out;
	}
	r = image_run_timed(argv, envp, NULL, out, err, IMAGE_RESOLVE_TIMEOUT_S);
	if (r == -ETIME) {
		/* the message docs/limits.md gives for IMAGE_RESOLVE_TIMEOUT_S */
		image_diag_set(diag, "the image resolver did not finish within %d s (IMAGE_RESOLVE_TIMEOUT_S)",
			       IMAGE_RESOLVE_TIMEOUT_S);
		goto out;
	}
	if (r == -E2BIG) {
		/* image_run stops at the first read that does not fit: a child that answers writes no error */
		if (buf_len(out) > 0 || buf_len(err) == 0) {
			image_diag_set(diag,
				       "the image child's answer is larger than IMAGE_ANSWER_MAX_BYTES (%zu bytes); it "
				       "was killed",
				       IMAGE_ANSWER_MAX_BYTES);
		} else {
			image_diag_set(diag, "the image child's error message is longer than %d bytes; it was killed",
				       IMAGE_DIAG_MAX * 4);
		}
		goto out;
	}
	if (r != 0) {
		/* the child printed "tkbox images VERB \"REF\": reason" (quoted and capped); keep the reason */
		const char *p = (const char *)buf_ptr(err), *m = p;
		size_t n = buf_len(err);
		while (n > 0 && p[n - 1] == '\n') {
			n--;
		}
		while ((m = memmem(m, (size_t)(p + n - m), "\": ", 3)) && m > p && m[-1] == '\\') {
			m++;
		}
		if (m && n > 13 && strncmp(p, "tkbox images ", 13) == 0) {
			n -= (size_t)(m + 3 - p);
			p = m + 3;
		}
		if (n > 0) {
			char q[LOG_QUOTE_BUFSIZE];
			/* quoted only when it holds what a terminal would act on */
			bool plain = true;
			for (size_t i = 0; i < n; i++) {
				plain = plain && (unsigned char)p[i] >= 0x20 && p[i] != 0x7f;
			}
			if (plain) {
				image_diag_set(diag, "%.*s", (int)MIN(n, (size_t)IMAGE_DIAG_MAX - 1), p);
			} else {
				image_diag_set(diag, "%s", log_quote(p, n, q));
			}
		} else {
			image_diag_set(diag, "the image child failed (%s) and said nothing",
				       r < 0 ? tk_strerror(r) : "non-zero exit");
		}
		r = r < 0 ? r : -EIO;
		goto out;
	}
	r = image_answer_decode(buf_ptr(out), buf_len(out), &res, diag);
	if (r < 0) {
		goto out;
	}
	/* the child writes the cache only: a path elsewhere is not one it built */
	if (asprintf(&prefix, "%s/images/", o->state_dir) < 0) {
		prefix = NULL;
		r = -ENOMEM;
		goto out;
	}
	if (strncmp(res.ext4_path, prefix, strlen(prefix)) != 0 ||
	    strncmp(res.json_path, prefix, strlen(prefix)) != 0) {
		image_diag_set(diag, PFX "\"ext4\" or \"image_json\" is not under the image cache %s", prefix);
		r = -EPROTO;
		goto out;
	}
	*ret = res;
	res = (struct image_result){ 0 };
out:
	image_result_release(&res);
	for (size_t i = 0; i < ARRAY_SIZE(envs); i++) {
		free(envs[i]);
	}
	return r;
}
