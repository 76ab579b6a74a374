/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "crypto.h"
#include "daemon/api-proto.h"
#include "daemon/daemon.h"
#include "daemon/door.h"
#include "egress/preset.h"
#include "json.h"
#include "log.h"
#include "path.h"
#include "secmem.h"
#include "strv.h"

const struct api_route api_routes[] = {
	{ HTTP_GET, "/v1/info", API_OP_INFO },
	{ HTTP_GET, "/v1/boxes", API_OP_LIST },
	{ HTTP_POST, "/v1/boxes", API_OP_CREATE },
	{ HTTP_GET, "/v1/boxes/{box}", API_OP_SHOW },
	{ HTTP_DELETE, "/v1/boxes/{box}", API_OP_RM },
	{ HTTP_POST, "/v1/boxes/{box}/exec", API_OP_EXEC },
	{ HTTP_POST, "/v1/boxes/{box}/stop", API_OP_STOP },
	{ HTTP_POST, "/v1/boxes/{box}/export", API_OP_EXPORT },
	{ HTTP_GET, "/v1/boxes/{box}/diff", API_OP_DIFF },
	{ HTTP_POST, "/v1/boxes/{box}/apply", API_OP_APPLY },
	{ HTTP_GET, "/v1/approvals", API_OP_APPROVALS },
	{ HTTP_POST, "/v1/approvals/{id}/approve", API_OP_APPROVE },
	{ HTTP_POST, "/v1/approvals/{id}/reject", API_OP_REJECT },
	{ HTTP_GET, NULL, API_OP_COUNT },
};

int api_refuse(struct api_error *e, int status, const char *code, const char *fmt, ...)
{
	va_list ap;

	e->status = status;
	e->code = code;
	va_start(ap, fmt);
	(void)vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return status == 403 ? -EPERM : status == 413 ? -E2BIG : status == 404 ? -ENOENT : -EBADMSG;
}

/* ---------------------------------------------------------------- routes */

/* Copy a variable segment of sn bytes into out (size n), cut to fit; *ret_too_long when it had to be. */
static void take_segment(const char *seg, size_t sn, char *out, size_t n, bool *ret_too_long)
{
	if (sn >= n) {
		*ret_too_long = true;
		sn = n - 1;
	}
	memcpy(out, seg, sn);
	out[sn] = '\0';
}

/* An {id} segment: [a-z0-9-] only (the daemon's ids are "ap-" and lower-case hex). */
static bool id_ok(const char *id)
{
	return id[0] && strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789-") == strlen(id);
}

/*
 * Does path match pattern? Segments compare literally, except "{box}" and
 * "{id}", which take any one non-empty segment (copied to m->box or m->id;
 * checked by the caller).
 */
static bool pattern_match(const char *pattern, const char *path, struct api_match *m, bool *ret_too_long)
{
	while (*pattern && *path) {
		size_t pn, sn;
		if (*pattern != '/' || *path != '/') {
			return false;
		}
		pattern++, path++;
		pn = strcspn(pattern, "/");
		sn = strcspn(path, "/");
		if ((pn == 5 && strncmp(pattern, "{box}", 5) == 0) || (pn == 4 && strncmp(pattern, "{id}", 4) == 0)) {
			if (sn == 0) {
				return false;
			}
			if (pn == 5) {
				take_segment(path, sn, m->box, sizeof(m->box), ret_too_long);
			} else {
				take_segment(path, sn, m->id, sizeof(m->id), ret_too_long);
			}
		} else if (pn != sn || strncmp(pattern, path, pn) != 0) {
			return false;
		}
		pattern += pn;
		path += strcspn(path, "/");
	}
	return !*pattern && !*path;
}

int api_route(enum http_method method, const char *target, struct api_match *ret, struct api_error *ret_err)
{
	const char *path = target;
	bool path_known = false;

	if (strncmp(path, "/v1/", 4) != 0) {
		return api_refuse(ret_err, 404, "not_found", "no such API path (this daemon speaks /v1)");
	}
	for (const struct api_route *r = api_routes; r->pattern; r++) {
		struct api_match m = { .op = r->op };
		bool too_long = false;
		if (!pattern_match(r->pattern, path, &m, &too_long)) {
			continue;
		}
		if (m.box[0] && (too_long || !door_box_name_ok(m.box))) {
			return api_refuse(ret_err, 400, "bad_request", "not a box name");
		}
		if (m.id[0] && (too_long || !id_ok(m.id))) {
			return api_refuse(ret_err, 400, "bad_request",
					  "not an approval id (ap- and 12 hex digits: tkbox approvals lists them)");
		}
		path_known = true;
		if (r->method == method) {
			*ret = m;
			return 0;
		}
	}
	return api_refuse(ret_err, 404, "not_found",
			  path_known ? "no such method for this API path" : "no such API path");
}

/* ---------------------------------------------------------------- shared field rules */

/*
 * A create body's secret values are wiped in the parsed tree the moment they are copied out, and on every way
 * out: root never holds a value once a decoder returns (jansson's own parse buffers are freed unwiped).
 */
static void wipe_secret_values(json_t *root)
{
	json_t *a = json_is_object(root) ? json_object_get(root, "secrets") : NULL;
	size_t i;
	json_t *o;

	if (!json_is_array(a)) {
		return;
	}
	json_array_foreach(a, i, o) {
		json_t *v = json_is_object(o) ? json_object_get(o, "value") : NULL;
		if (json_is_string(v) && json_string_length(v)) {
			explicit_bzero((char *)json_string_value(v), json_string_length(v));
		}
	}
}

/* The body as a JSON object ({} when empty), with only the allowed keys. */
static int parse_object(const void *body, size_t n, const char *const *allowed, json_t **ret, struct api_error *e)
{
	struct json_opts o = { .max_bytes = HTTP_MAX_BODY, .max_depth = API_MAX_BODY_DEPTH, .want_top = JSON_OBJECT };
	json_t *v = NULL;
	const char *key;
	json_t *val;

	if (n == 0) {
		v = json_object();
	} else if (json_parse_strict(body, n, &o, &v) < 0) {
		v = NULL;
	}
	if (!v) {
		return api_refuse(e, 400, "bad_request", "the request body must be a JSON object of known fields");
	}
	json_object_foreach(v, key, val) {
		bool ok = false;
		for (size_t i = 0; allowed[i] && !ok; i++) {
			ok = strcmp(key, allowed[i]) == 0;
		}
		if (!ok) {
			char q[LOG_QUOTE_BUFSIZE];
			/* The key belongs to v: quoted before v goes. */
			(void)api_refuse(e, 400, "bad_request",
					 "the request body must be a JSON object of known fields: unknown field %s",
					 log_quote(key, strlen(key), q));
			wipe_secret_values(v);
			json_decref(v);
			return -EBADMSG;
		}
	}
	*ret = v;
	return 0;
}

/* A list of strings from a JSON array member (absent: empty): -EBADMSG not strings, -E2BIG past max or a word. */
static int get_strv(const json_t *o, const char *key, size_t max, char ***ret)
{
	json_t *a = json_object_get(o, key);
	char **v;
	size_t n;

	if (!a) {
		*ret = calloc(1, sizeof(char *));
		return *ret ? 0 : -ENOMEM;
	}
	if (!json_is_array(a)) {
		return -EBADMSG;
	}
	n = json_array_size(a);
	if (n > max) {
		return -E2BIG;
	}
	v = calloc(n + 1, sizeof(*v));
	if (!v) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const json_t *s = json_array_get(a, i);
		const char *t = json_string_value(s);
		if (!t || strlen(t) != json_string_length(s) || strlen(t) > DOOR_MAX_WORD || !(v[i] = strdup(t))) {
			strv_free(v);
			return t ? -E2BIG : -EBADMSG;
		}
	}
	*ret = v;
	return 0;
}

/* An unsigned in [min, max] (absent: def). */
static int get_uint(const json_t *o, const char *key, unsigned min, unsigned max, unsigned def, unsigned *ret)
{
	int64_t v;
	int r = json_get_int(o, key, &v);

	if (r == -ENOENT) {
		*ret = def;
		return 0;
	}
	if (r < 0 || v < min || v > max) {
		return -ERANGE;
	}
	*ret = (unsigned)v;
	return 0;
}

/* An optional string (absent: NULL). */
static int get_opt_string(const json_t *o, const char *key, const char **ret)
{
	int r = json_get_string(o, key, ret);

	if (r == -ENOENT) {
		*ret = NULL;
		return 0;
	}
	return r < 0 ? -EBADMSG : 0;
}

/* A platform (linux/amd64|linux/arm64) or an absolute path of at most DAEMON_MAX_OPT_PATH (absent: NULL). */
static int get_opt_text(const json_t *o, const char *key, bool is_path, const char **ret)
{
	const char *s;

	if (get_opt_string(o, key, &s) < 0) {
		return -EBADMSG;
	}
	if (s && (is_path ? (s[0] != '/' || strlen(s) > DAEMON_MAX_OPT_PATH)
			  : (strcmp(s, "linux/amd64") != 0 && strcmp(s, "linux/arm64") != 0))) {
		return -EINVAL;
	}
	*ret = s;
	return 0;
}

/* ---------------------------------------------------------------- create */

void api_create_req_release(struct api_create_req *r)
{
	for (size_t i = 0; r->secrets && i < r->n_secrets; i++) {
		if (r->secrets[i].value) {
			secmem_free(r->secrets[i].value, r->secrets[i].value_len);
		}
	}
	if (r->secrets) {
		explicit_bzero(r->secrets, r->n_secrets * sizeof(*r->secrets));
	}
	free(r->secrets);
	wipe_secret_values(r->root);
	json_decref(r->root);
	strv_free(r->env);
	strv_free(r->allow);
	*r = (struct api_create_req){ 0 };
}

/* The box's env: NAME=VALUE syntax only (its owner sets it; it is recorded in tkbox.box). */
static int create_env(struct api_create_req *r, struct api_error *e)
{
	int k = get_strv(r->root, "env", DAEMON_MAX_BOX_ENV, &r->env);

	for (char **p = r->env; k >= 0 && p && *p; p++) {
		const char *why;
		k = door_env_check(*p, &why);
		if (k == -EPERM) {
			k = 0;
		}
	}
	if (k < 0) {
		return api_refuse(e, 400, "bad_request", "--env takes NAME=VALUE entries (at most %d)",
				  DAEMON_MAX_BOX_ENV);
	}
	return 0;
}

static int create_limits(struct api_create_req *r, struct api_error *e)
{
	const json_t *o = r->root;

	if (get_uint(o, "cpus", 1, 64, DAEMON_DEFAULT_VCPUS, &r->cpus) < 0 ||
	    get_uint(o, "memory_mib", 128, 256 * 1024, DAEMON_DEFAULT_MEM_MIB, &r->memory_mib) < 0 ||
	    get_uint(o, "disk_mib", 64, DAEMON_MAX_DISK_MIB, DAEMON_DEFAULT_DISK_MIB, &r->disk_mib) < 0 ||
	    get_uint(o, "timeout_s", 1, DAEMON_MAX_LIFETIME_S, DAEMON_DEFAULT_LIFETIME_S, &r->timeout_s) < 0 ||
	    get_uint(o, "exec_timeout_s", 1, DAEMON_MAX_LIFETIME_S, DAEMON_DEFAULT_EXEC_TIMEOUT_S, &r->exec_timeout_s) <
		    0) {
		return api_refuse(
			e, 400, "bad_request",
			"out of range: --cpus 1..64, --memory 128 MiB..256 GiB, --disk 64 MiB..1 TiB, --timeout 1 "
			"s..7 days");
	}
	return 0;
}

static int create_fields(struct api_create_req *r, struct api_error *e)
{
	const json_t *o = r->root;

	if (json_get_string(o, "image", &r->image) < 0 || !*r->image) {
		return api_refuse(e, 400, "bad_request", "--image is required");
	}
	if (get_opt_string(o, "name", &r->name) < 0 || (r->name && !door_box_name_ok(r->name))) {
		return api_refuse(e, 400, "bad_request",
				  "a box name is 1-63 of [A-Za-z0-9._-], starting with a letter or digit");
	}
	if (get_opt_string(o, "workspace", &r->workspace) < 0 || (r->workspace && r->workspace[0] != '/')) {
		return api_refuse(
			e, 400, "bad_request",
			"--workspace takes an absolute path to a directory, a git checkout or an ext4 image (the "
			"daemon resolves nothing against its own working directory)");
	}
	/* Image resolution options: the files are read by the `tkbox images` child, as absolute paths. */
	if (get_opt_text(o, "platform", false, &r->platform) < 0 ||
	    get_opt_text(o, "registry_auth", true, &r->registry_auth) < 0 ||
	    get_opt_text(o, "registry_ca", true, &r->registry_ca) < 0) {
		return api_refuse(e, 400, "bad_request",
				  "--platform is linux/amd64 or linux/arm64; --registry-auth and --registry-ca take "
				  "absolute paths");
	}
	return 0;
}

/*
 * The box's allowlist: --allow values, each an entry or a preset name (checked here: a 400 names the value and the
 * forms); the presets that read the image are expanded when the box is made. --inspect all or none.
 */
static int create_egress(struct api_create_req *r, struct api_error *e)
{
	char why[API_MAX_MESSAGE];
	const char *inspect;
	int k = get_strv(r->root, "allow", EGRESS_MAX_ALLOW, &r->allow);

	if (k < 0) {
		return api_refuse(e, 400, "bad_request",
				  "allow is a list of at most %d strings (EGRESS_MAX_ALLOW): --allow host, host:port, "
				  "*.example.com[:port] or a preset",
				  EGRESS_MAX_ALLOW);
	}
	k = egress_policy_check(r->allow, why, sizeof(why));
	if (k < 0) {
		return api_refuse(e, 400, "bad_request", "%s", why);
	}
	if (get_opt_string(r->root, "inspect", &inspect) < 0 ||
	    (inspect && strcmp(inspect, "all") != 0 && strcmp(inspect, "none") != 0)) {
		return api_refuse(e, 400, "bad_request", "--inspect is all or none");
	}
	r->inspect_all = inspect && strcmp(inspect, "all") == 0;
	return 0;
}

/*
 * One secret {name, value, hosts, header?}: secret.h's rules (the binding through egress_secret_binding_parse, so
 * the flag and the API agree). Messages name the secret (a valid name) or its index, never the value.
 */
static int create_secret(const json_t *o, size_t idx, struct egress_secret *out, struct api_error *e)
{
	static const char *const keys[] = { "name", "value", "hosts", "header", NULL };
	char binding[EGRESS_SECRET_HOSTS_MAX * EGRESS_HOST_TEXT_MAX + EGRESS_SECRET_HEADER_MAX + 2];
	char why[API_MAX_MESSAGE - 128];
	const char *name, *header = NULL, *vwhy;
	const json_t *hosts, *v, *h;
	size_t off = 0, i;

	if (!json_is_object(o) || json_only_keys(o, keys) < 0) {
		return api_refuse(e, 400, "bad_request", "secrets[%zu] is an object of name, value, hosts and header",
				  idx);
	}
	if (json_get_string(o, "name", &name) < 0 || !egress_secret_name_ok(name)) {
		return api_refuse(e, 400, "bad_request",
				  "secrets[%zu]: a secret's name is 1..%d of [A-Z0-9_], not starting with a digit", idx,
				  EGRESS_SECRET_NAME_MAX);
	}
	(void)snprintf(out->name, sizeof(out->name), "%s", name);
	v = json_object_get(o, "value");
	if (!json_is_string(v)) {
		return api_refuse(e, 400, "bad_request", "secret %s: the value is a JSON string", name);
	}
	if (egress_secret_value_check((const uint8_t *)json_string_value(v), json_string_length(v), &vwhy) < 0) {
		return api_refuse(e, 400, "bad_request", "secret %s: %s", name, vwhy);
	}
	if (json_object_get(o, "header") && (get_opt_string(o, "header", &header) < 0 || !header)) {
		return api_refuse(e, 400, "bad_request", "secret %s: header is a string", name);
	}
	hosts = json_object_get(o, "hosts");
	if (!json_is_array(hosts) || json_array_size(hosts) == 0 || json_array_size(hosts) > EGRESS_SECRET_HOSTS_MAX) {
		return api_refuse(e, 400, "bad_request",
				  "secret %s: hosts is a list of 1..%d exact host names (EGRESS_SECRET_HOSTS_MAX)",
				  name, EGRESS_SECRET_HOSTS_MAX);
	}
	json_array_foreach(hosts, i, h) {
		const char *t = json_string_value(h);
		size_t tl = t ? strlen(t) : 0;
		if (!t || tl != json_string_length(h) || tl == 0 || tl >= EGRESS_HOST_TEXT_MAX || strpbrk(t, ",:")) {
			return api_refuse(
				e, 400, "bad_request",
				"secret %s: hosts[%zu] is not a host name (exact names: no port, no wildcard)", name,
				i);
		}
		(void)snprintf(binding + off, sizeof(binding) - off, "%s%s", i ? "," : "", t);
		off += tl + (i ? 1 : 0);
	}
	if (header) {
		if (strlen(header) > EGRESS_SECRET_HEADER_MAX) {
			return api_refuse(
				e, 400, "bad_request",
				"secret %s: the header name is longer than %d bytes (EGRESS_SECRET_HEADER_MAX)", name,
				EGRESS_SECRET_HEADER_MAX);
		}
		(void)snprintf(binding + off, sizeof(binding) - off, ":%s", header);
	}
	if (egress_secret_binding_parse(binding, out, why, sizeof(why)) < 0) {
		return api_refuse(e, 400, "bad_request", "secret %s: %s", name, why);
	}
	out->value = secmem_dup(json_string_value(v), json_string_length(v));
	if (!out->value) {
		return api_refuse(e, 500, "internal", "no secure memory for secret %s (secmem)", name);
	}
	out->value_len = json_string_length(v);
	explicit_bzero((char *)json_string_value(v), json_string_length(v));
	return 0;
}

/* secrets: at most EGRESS_SECRET_MAX, names unique; each value moves into secmem. */
static int create_secrets(struct api_create_req *r, struct api_error *e)
{
	const json_t *a = json_object_get(r->root, "secrets");
	size_t n;
	int k;

	if (!a) {
		return 0;
	}
	if (!json_is_array(a)) {
		return api_refuse(e, 400, "bad_request", "secrets is a list of {name, value, hosts, header}");
	}
	n = json_array_size(a);
	if (n > EGRESS_SECRET_MAX) {
		return api_refuse(e, 400, "bad_request",
				  "%zu secrets; a box takes at most %d (EGRESS_SECRET_MAX): bind fewer --secret values",
				  n, EGRESS_SECRET_MAX);
	}
	if (n == 0) {
		return 0;
	}
	r->secrets = calloc(n, sizeof(*r->secrets));
	if (!r->secrets) {
		return api_refuse(e, 500, "internal", "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		k = create_secret(json_array_get(a, i), i, &r->secrets[i], e);
		r->n_secrets = r->secrets[i].value ? i + 1 : i;
		if (k < 0) {
			return k;
		}
		for (size_t j = 0; j < i; j++) {
			if (strcmp(r->secrets[j].name, r->secrets[i].name) == 0) {
				return api_refuse(e, 400, "bad_request",
						  "secret %s is named twice; each --secret NAME once",
						  r->secrets[i].name);
			}
		}
	}
	return 0;
}

/* One flag name of config.overridden: "--" and 1..30 of [a-z-]. */
static bool flag_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n < 3 || n > 32 || strncmp(s, "--", 2) != 0) {
		return false;
	}
	return strspn(s + 2, "abcdefghijklmnopqrstuvwxyz-") == n - 2;
}

/*
 * config (optional): the tkbox.yaml the CLI read, {file, sha256, overridden}: an absolute path, the file's SHA-256
 * (64 lower-case hex) and the flags that overrode it (at most API_MAX_CONFIG_FLAGS names). Recorded in tkbox.box.
 */
static int create_config(struct api_create_req *r, struct api_error *e)
{
	static const char *const keys[] = { "file", "sha256", "overridden", NULL };
	const json_t *o = json_object_get(r->root, "config"), *over, *f;
	const char *file, *sha;
	size_t i;

	if (!o) {
		return 0;
	}
	over = json_object_get(o, "overridden");
	if (!json_is_object(o) || json_only_keys(o, keys) < 0 || json_get_string(o, "file", &file) < 0 ||
	    file[0] != '/' || strlen(file) > DAEMON_MAX_OPT_PATH || json_get_string(o, "sha256", &sha) < 0 ||
	    strlen(sha) != 64 || strspn(sha, "0123456789abcdef") != 64 || !json_is_array(over) ||
	    json_array_size(over) > API_MAX_CONFIG_FLAGS) {
		return api_refuse(e, 400, "bad_request",
				  "config is {file: an absolute path, sha256: 64 hex digits, overridden: at most %d "
				  "flag names}",
				  API_MAX_CONFIG_FLAGS);
	}
	json_array_foreach(over, i, f) {
		if (!json_is_string(f) || strlen(json_string_value(f)) != json_string_length(f) ||
		    !flag_name_ok(json_string_value(f))) {
			return api_refuse(e, 400, "bad_request", "config.overridden[%zu] is not a flag name (--word)",
					  i);
		}
	}
	r->config = o;
	return 0;
}

int api_decode_create(const void *body, size_t n, struct api_create_req *ret, struct api_error *ret_err)
{
	static const char *const keys[] = { "image",	     "name",	    "workspace",      "env",	  "memory_mib",
					    "cpus",	     "timeout_s",   "exec_timeout_s", "disk_mib", "platform",
					    "registry_auth", "registry_ca", "allow",	      "inspect",  "secrets",
					    "config",	     NULL };
	struct api_create_req r = { 0 };
	int k = parse_object(body, n, keys, &r.root, ret_err);

	/* The values leave the tree first, whatever else the body holds. */
	if (k >= 0) {
		k = create_secrets(&r, ret_err);
		wipe_secret_values(r.root);
	}
	if (k >= 0) {
		k = create_fields(&r, ret_err);
	}
	if (k >= 0) {
		k = create_env(&r, ret_err);
	}
	if (k >= 0) {
		k = create_limits(&r, ret_err);
	}
	if (k >= 0) {
		k = create_egress(&r, ret_err);
	}
	if (k >= 0) {
		k = create_config(&r, ret_err);
	}
	if (k < 0) {
		api_create_req_release(&r);
		return k;
	}
	*ret = r;
	return 0;
}

/* ---------------------------------------------------------------- exec */

void api_exec_req_release(struct api_exec_req *r)
{
	json_decref(r->root);
	strv_free(r->argv);
	strv_free(r->env);
	buf_release(&r->stdin_data);
	*r = (struct api_exec_req){ 0 };
}

static int exec_words(struct api_exec_req *r, struct api_error *e)
{
	int k = get_strv(r->root, "argv", DOOR_MAX_ARGS, &r->argv);

	if (k >= 0 && !r->argv[0]) {
		k = -EINVAL;
	}
	if (k >= 0) {
		k = get_strv(r->root, "env", DOOR_MAX_ENV, &r->env);
	}
	if (k < 0) {
		return api_refuse(e, 400, "bad_request", "argv (at least one word) and env must be lists of strings");
	}
	for (char **p = r->env; *p; p++) {
		const char *why = "";
		char q[LOG_QUOTE_BUFSIZE];
		const char *eq = strchr(*p, '=');
		k = door_env_check(*p, &why);
		if (k < 0) {
			return api_refuse(
				e, k == -EPERM ? 403 : 400, k == -EPERM ? "env_refused" : "bad_request",
				"--env %s refused: %s (set it in the box with tkbox run --env, or not at all)",
				log_quote(*p, eq ? (size_t)(eq - *p) : strlen(*p), q), why);
		}
	}
	return 0;
}

static int exec_stdin(struct api_exec_req *r, struct api_error *e)
{
	static const char *const keys[] = { "mode", "data", NULL };
	const json_t *s = json_object_get(r->root, "stdin");
	const char *mode = "none", *b64 = NULL;
	int k;

	r->stdin_mode = API_STDIN_NONE;
	r->stdin_mode_name = "none";
	if (!s) {
		return 0;
	}
	if (!json_is_object(s) || json_get_string(s, "mode", &mode) < 0 || json_only_keys(s, keys) < 0) {
		mode = "";
	}
	if (strcmp(mode, "upfront") == 0) {
		r->stdin_mode = API_STDIN_UPFRONT;
		r->stdin_mode_name = "upfront";
	} else if (strcmp(mode, "stream") == 0) {
		r->stdin_mode = API_STDIN_STREAM;
		r->stdin_mode_name = "stream";
	} else if (strcmp(mode, "none") != 0) {
		return api_refuse(e, 400, "bad_request", "stdin.mode is none, upfront or stream");
	}
	if (r->stdin_mode != API_STDIN_UPFRONT) {
		return 0;
	}
	k = json_get_string(s, "data", &b64);
	if (k >= 0) {
		k = buf_init(&r->stdin_data, DOOR_MAX_STDIN, 0);
	}
	if (k >= 0) {
		k = b64_decode(b64, strlen(b64), B64_STD, &r->stdin_data);
	}
	if (k < 0) {
		return api_refuse(e, k == -E2BIG ? 413 : 400, "bad_request",
				  "stdin.data must be base64 of at most 1 MiB (more is streamed)");
	}
	return 0;
}

static int exec_place(struct api_exec_req *r, struct api_error *e)
{
	if (get_opt_string(r->root, "cwd", &r->cwd) < 0 ||
	    (r->cwd && (r->cwd[0] != '/' || strlen(r->cwd) > DOOR_MAX_CWD))) {
		return api_refuse(e, 400, "bad_request", "--cwd must be an absolute path");
	}
	if (get_uint(r->root, "timeout_s", 1, DAEMON_MAX_LIFETIME_S, 0, &r->timeout_s) < 0) {
		return api_refuse(e, 400, "bad_request",
				  "--timeout is 1 s..7 days (one longer than the box's --exec-timeout is cut to it)");
	}
	return 0;
}

int api_decode_exec(const void *body, size_t n, struct api_exec_req *ret, struct api_error *ret_err)
{
	static const char *const keys[] = { "argv", "env", "cwd", "stdin", "timeout_s", NULL };
	struct api_exec_req r = { 0 };
	int k = parse_object(body, n, keys, &r.root, ret_err);

	if (k >= 0) {
		k = exec_words(&r, ret_err);
	}
	if (k >= 0) {
		k = exec_place(&r, ret_err);
	}
	if (k >= 0) {
		k = exec_stdin(&r, ret_err);
	}
	if (k < 0) {
		api_exec_req_release(&r);
		return k;
	}
	*ret = r;
	return 0;
}

/* ---------------------------------------------------------------- apply */

void api_apply_req_release(struct api_apply_req *r)
{
	json_decref(r->root);
	*r = (struct api_apply_req){ 0 };
}

/* An optional boolean (absent: false). */
static int get_opt_bool(const json_t *o, const char *key, bool *ret)
{
	int r = json_get_bool(o, key, ret);

	if (r == -ENOENT) {
		*ret = false;
		return 0;
	}
	return r < 0 ? -EBADMSG : 0;
}

int api_decode_apply(const void *body, size_t n, struct api_apply_req *ret, struct api_error *ret_err)
{
	static const char *const keys[] = { "checkout", "allow_sensitive", "dry_run", NULL };
	struct api_apply_req r = { 0 };
	int k = parse_object(body, n, keys, &r.root, ret_err);

	if (k >= 0 && (get_opt_string(r.root, "checkout", &r.checkout) < 0 ||
		       (r.checkout && (strlen(r.checkout) > DAEMON_MAX_OPT_PATH || !path_is_normal_abs(r.checkout))))) {
		k = api_refuse(ret_err, 400, "bad_request",
			       "--checkout must be an absolute path of at most 4096 bytes without . or .. segments or "
			       "control characters (tkbox apply makes it absolute with realpath)");
	}
	if (k >= 0 && (get_opt_bool(r.root, "allow_sensitive", &r.allow_sensitive) < 0 ||
		       get_opt_bool(r.root, "dry_run", &r.dry_run) < 0)) {
		k = api_refuse(ret_err, 400, "bad_request", "allow_sensitive and dry_run must be true or false");
	}
	if (k < 0) {
		api_apply_req_release(&r);
		return k;
	}
	*ret = r;
	return 0;
}

/* ---------------------------------------------------------------- operations without fields */

int api_decode_empty(const void *body, size_t n, struct api_error *ret_err)
{
	static const char *const none[] = { NULL };
	json_t *v = NULL;
	int k = parse_object(body, n, none, &v, ret_err);

	json_decref(v);
	return k;
}
