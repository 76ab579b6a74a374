/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "image/manifest.h"
#include "json.h"
#include "log.h"

static void descriptor_release(struct image_descriptor *d)
{
	free(d->media_type);
	free(d->os);
	free(d->arch);
	free(d->variant);
	free(d->ref_name);
	*d = (struct image_descriptor){ 0 };
}

void image_manifest_release(struct image_manifest *m)
{
	if (!m) {
		return;
	}
	descriptor_release(&m->config);
	for (size_t i = 0; i < m->n_layers; i++) {
		descriptor_release(&m->layers[i]);
	}
	for (size_t i = 0; i < m->n_manifests; i++) {
		descriptor_release(&m->manifests[i]);
	}
	free(m->layers);
	free(m->manifests);
	*m = (struct image_manifest){ 0 };
}

static int dup_opt_string(const json_t *o, const char *key, char **ret)
{
	const char *s;
	int r = json_get_string(o, key, &s);
	if (r == -ENOENT) {
		*ret = NULL;
		return 0;
	}
	if (r < 0) {
		return r;
	}
	if (strlen(s) > 4096) {
		return -E2BIG;
	}
	*ret = strdup(s);
	return *ret ? 0 : -ENOMEM;
}

/* what: "config", "layers[3]", "manifests[0]": named in every refusal. */
static int parse_descriptor(const json_t *o, bool want_platform, const char *what, struct image_descriptor *ret,
			    struct image_diag *diag)
{
	struct image_descriptor d = { 0 };
	const char *digest;
	json_t *platform, *ann;
	int r;

	if (!json_is_object(o)) {
		image_diag_set(diag, "%s is not an object", what);
		return -EBADMSG;
	}
	r = json_get_string(o, "digest", &digest);
	if (r < 0 || !image_digest_valid(digest)) {
		/* only sha256 is accepted: a sha512 digest would be valid OCI but tkbox does not verify it */
		image_diag_set(diag, "%s.digest is missing or not a sha256 digest", what);
		return r < 0 && r != -ENOENT && r != -EBADMSG ? r : -EBADMSG;
	}
	memcpy(d.digest, digest, IMAGE_DIGEST_LEN + 1);
	r = json_get_int(o, "size", &d.size);
	if (r < 0 || d.size < 0) {
		image_diag_set(diag, "%s.size is missing or not a non-negative integer", what);
		return r < 0 && r != -ENOENT && r != -EBADMSG ? r : -EBADMSG;
	}
	if (d.size > IMAGE_MAX_BLOB_SIZE) {
		image_diag_set(diag, "%s.size %lld is above %lld bytes (IMAGE_MAX_BLOB_SIZE)", what, (long long)d.size,
			       (long long)IMAGE_MAX_BLOB_SIZE);
		return -E2BIG;
	}
	r = dup_opt_string(o, "mediaType", &d.media_type);
	if (r < 0) {
		image_diag_set(diag, "%s.mediaType is not a short string", what);
		goto fail;
	}
	if (want_platform) {
		r = json_get_object(o, "platform", &platform);
		if (r == 0) {
			if ((r = dup_opt_string(platform, "os", &d.os)) < 0 ||
			    (r = dup_opt_string(platform, "architecture", &d.arch)) < 0 ||
			    (r = dup_opt_string(platform, "variant", &d.variant)) < 0) {
				image_diag_set(diag, "%s.platform holds a malformed os, architecture or variant", what);
				goto fail;
			}
		} else if (r != -ENOENT) {
			image_diag_set(diag, "%s.platform is not an object", what);
			goto fail;
		}
		r = json_get_object(o, "annotations", &ann);
		if (r == 0) {
			r = dup_opt_string(ann, "org.opencontainers.image.ref.name", &d.ref_name);
			if (r < 0) {
				image_diag_set(diag, "%s.annotations: malformed ref.name", what);
				goto fail;
			}
		} else if (r != -ENOENT) {
			image_diag_set(diag, "%s.annotations is not an object", what);
			goto fail;
		}
	}
	*ret = d;
	return 0;
fail:
	descriptor_release(&d);
	return r;
}

static int parse_descriptor_array(const json_t *a, const char *name, size_t max, bool want_platform,
				  struct image_descriptor **ret, size_t *ret_n, struct image_diag *diag)
{
	size_t n = json_array_size(a), i;
	struct image_descriptor *v;
	int r;

	if (!json_is_array(a)) {
		image_diag_set(diag, "%s is not a list", name);
		return -EBADMSG;
	}
	if (n > max) {
		image_diag_set(diag, "%s has %zu entries, more than %zu (%s)", name, n, max,
			       max == IMAGE_MAX_LAYERS ? "IMAGE_MAX_LAYERS" : "IMAGE_MAX_INDEX_ENTRIES");
		return -E2BIG;
	}
	v = calloc(n ? n : 1, sizeof(*v));
	if (!v) {
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		char what[48];
		(void)snprintf(what, sizeof(what), "%s[%zu]", name, i);
		r = parse_descriptor(json_array_get(a, i), want_platform, what, &v[i], diag);
		if (r < 0) {
			for (size_t j = 0; j < i; j++) {
				descriptor_release(&v[j]);
			}
			free(v);
			return r;
		}
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

static bool layer_type_ok(const char *mt)
{
	static const char *const ok[] = {
		"application/vnd.oci.image.layer.v1.tar",	"application/vnd.oci.image.layer.v1.tar+gzip",
		"application/vnd.oci.image.layer.v1.tar+zstd",	"application/vnd.docker.image.rootfs.diff.tar.gzip",
		"application/vnd.docker.image.rootfs.diff.tar",
	};
	if (!mt) {
		return false;
	}
	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		if (strcmp(mt, ok[i]) == 0) {
			return true;
		}
	}
	return false;
}

int image_manifest_parse(const void *p, size_t n, const char *content_type, struct image_manifest *ret,
			 struct image_diag *diag)
{
	const struct json_opts jo = { .max_bytes = IMAGE_MAX_MANIFEST_BYTES,
				      .max_depth = IMAGE_MAX_JSON_DEPTH,
				      .want_top = JSON_OBJECT };
	_cleanup_json_ json_t *root = NULL;
	struct image_manifest m = { 0 };
	const char *mt = NULL;
	json_t *a, *cfg;
	int64_t schema;
	int r;

	r = json_parse_strict(p, n, &jo, &root);
	if (r < 0) {
		image_diag_set(diag, "%s",
			       r == -E2BIG ? "larger or deeper than the caps (IMAGE_MAX_MANIFEST_BYTES)"
					   : "not strict JSON");
		return r;
	}
	r = json_get_int(root, "schemaVersion", &schema);
	if (r < 0) {
		image_diag_set(diag, "schemaVersion is missing or not an integer");
		return r == -ENOENT ? -EBADMSG : r;
	}
	if (schema != 2) {
		image_diag_set(diag, "schemaVersion %lld is not supported (only 2)", (long long)schema);
		return -EPROTONOSUPPORT;
	}
	r = json_get_string(root, "mediaType", &mt);
	if (r == -ENOENT) {
		mt = content_type;
	} else if (r < 0) {
		image_diag_set(diag, "mediaType is not a string");
		return r;
	}
	if (mt && (strcmp(mt, MT_OCI_INDEX) == 0 || strcmp(mt, MT_DOCKER_LIST) == 0)) {
		m.kind = IMAGE_MANIFEST_INDEX;
	} else if (mt && (strcmp(mt, MT_OCI_MANIFEST) == 0 || strcmp(mt, MT_DOCKER_MANIFEST) == 0)) {
		m.kind = IMAGE_MANIFEST_IMAGE;
	} else if (!mt || strcmp(mt, "application/json") == 0 || strcmp(mt, "application/octet-stream") == 0) {
		/* an OCI document may omit mediaType: tell by its members, and refuse one with both */
		bool has_m = json_object_get(root, "manifests") != NULL,
		     has_l = json_object_get(root, "layers") != NULL;
		if (has_m == has_l) {
			image_diag_set(diag, "no mediaType, and not exactly one of manifests and layers");
			return -EBADMSG;
		}
		m.kind = has_m ? IMAGE_MANIFEST_INDEX : IMAGE_MANIFEST_IMAGE;
	} else {
		char q[LOG_QUOTE_BUFSIZE];
		image_diag_set(diag, "mediaType %s is not a manifest or index tkbox reads",
			       log_quote(mt, strlen(mt), q));
		return -EPROTONOSUPPORT;
	}

	if (m.kind == IMAGE_MANIFEST_INDEX) {
		r = json_get_array(root, "manifests", &a);
		if (r < 0) {
			image_diag_set(diag, "manifests is missing or not a list");
			return r == -ENOENT ? -EBADMSG : r;
		}
		r = parse_descriptor_array(a, "manifests", IMAGE_MAX_INDEX_ENTRIES, true, &m.manifests, &m.n_manifests,
					   diag);
		if (r < 0) {
			return r;
		}
		*ret = m;
		return 0;
	}

	r = json_get_object(root, "config", &cfg);
	if (r < 0) {
		image_diag_set(diag, "config is missing or not an object");
		return r == -ENOENT ? -EBADMSG : r;
	}
	r = parse_descriptor(cfg, false, "config", &m.config, diag);
	if (r < 0) {
		return r;
	}
	if (m.config.size > (int64_t)IMAGE_MAX_CONFIG_BYTES) {
		image_diag_set(diag, "config.size %lld is above %zu bytes (IMAGE_MAX_CONFIG_BYTES)",
			       (long long)m.config.size, (size_t)IMAGE_MAX_CONFIG_BYTES);
		image_manifest_release(&m);
		return -E2BIG;
	}
	r = json_get_array(root, "layers", &a);
	if (r < 0) {
		image_diag_set(diag, "layers is missing or not a list");
		image_manifest_release(&m);
		return r == -ENOENT ? -EBADMSG : r;
	}
	r = parse_descriptor_array(a, "layers", IMAGE_MAX_LAYERS, false, &m.layers, &m.n_layers, diag);
	if (r < 0) {
		image_manifest_release(&m);
		return r;
	}
	for (size_t i = 0; i < m.n_layers; i++) {
		if (!layer_type_ok(m.layers[i].media_type)) {
			char q[LOG_QUOTE_BUFSIZE];
			const char *t = m.layers[i].media_type ? m.layers[i].media_type : "";
			image_diag_set(diag,
				       "layers[%zu].mediaType %s is not a layer tkbox reads (tar, tar+gzip, tar+zstd; "
				       "foreign layers are refused)",
				       i, log_quote(t, strlen(t), q));
			image_manifest_release(&m);
			return -EPROTONOSUPPORT;
		}
	}
	*ret = m;
	return 0;
}

int image_index_select(const struct image_manifest *idx, const char *os, const char *arch, const char *variant,
		       size_t *ret_i)
{
	if (idx->kind != IMAGE_MANIFEST_INDEX) {
		return -EINVAL;
	}
	for (size_t i = 0; i < idx->n_manifests; i++) {
		const struct image_descriptor *d = &idx->manifests[i];
		if (!d->os || !d->arch || strcmp(d->os, os) != 0 || strcmp(d->arch, arch) != 0) {
			continue;
		}
		if (variant && d->variant && strcmp(variant, d->variant) != 0) {
			continue;
		}
		if (!variant && d->variant && strcmp(arch, "arm64") == 0 && strcmp(d->variant, "v8") != 0) {
			continue;
		}
		/* attestation manifests ("unknown/unknown") never match a real platform, so no extra check */
		*ret_i = i;
		return 0;
	}
	return -ENOENT;
}

void image_config_release(struct image_config *c)
{
	if (!c) {
		return;
	}
	for (size_t i = 0; i < c->n_env; i++) {
		free(c->env[i]);
	}
	free(c->env);
	free(c->working_dir);
	free(c->user);
	free(c->os);
	free(c->arch);
	free(c->diff_ids);
	*c = (struct image_config){ 0 };
}

/* A config string the box uses (WorkingDir, User, Env): no control characters (a newline forges a line). */
static bool has_control(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) {
			return true;
		}
	}
	return false;
}

/* The string member key of cfg for the box: empty and null mean unset; named in every refusal. */
static int box_string(const json_t *cfg, const char *key, char **ret, struct image_diag *diag)
{
	const json_t *v = json_object_get(cfg, key);
	char q[LOG_QUOTE_BUFSIZE];
	const char *s;
	size_t n;

	*ret = NULL;
	if (!v || json_is_null(v)) {
		return 0;
	}
	if (!json_is_string(v)) {
		image_diag_set(diag, "image config: %s is not a string", key);
		return -EBADMSG;
	}
	s = json_string_value(v);
	n = json_string_length(v);
	if (n == 0) {
		return 0;
	}
	if (n > IMAGE_MAX_CONFIG_STRING) {
		image_diag_set(diag, "image config: %s is longer than %zu bytes (IMAGE_MAX_CONFIG_STRING)", key,
			       (size_t)IMAGE_MAX_CONFIG_STRING);
		return -E2BIG;
	}
	if (strlen(s) != n || has_control(s, n)) {
		image_diag_set(diag, "image config: %s %s holds a control character", key, log_quote(s, n, q));
		return -EBADMSG;
	}
	*ret = strdup(s);
	return *ret ? 0 : -ENOMEM;
}

static bool working_dir_ok(const char *s)
{
	/* absolute, and no "." or ".." segment: the guest resolves it as the default cwd of every exec */
	if (s[0] != '/') {
		return false;
	}
	for (const char *p = s; *p;) {
		size_t n;
		while (*p == '/') {
			p++;
		}
		n = strcspn(p, "/");
		if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) {
			return false;
		}
		p += n;
	}
	return true;
}

static int parse_env(const json_t *env, struct image_config *c, struct image_diag *diag)
{
	size_t ne = json_array_size(env);
	char q[LOG_QUOTE_BUFSIZE];

	if (ne > IMAGE_MAX_ENV) {
		image_diag_set(diag,
			       "image config: Env has %zu entries; a box boots with at most %d from its image "
			       "(IMAGE_MAX_ENV)",
			       ne, IMAGE_MAX_ENV);
		return -E2BIG;
	}
	c->env = calloc(ne ? ne : 1, sizeof(char *));
	if (!c->env) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < ne; i++) {
		const json_t *v = json_array_get(env, i);
		const char *s = json_string_value(v);
		size_t sl;
		if (!s) {
			image_diag_set(diag, "image config: Env[%zu] is not a string", i);
			return -EBADMSG;
		}
		sl = json_string_length(v);
		if (sl > IMAGE_MAX_ENV_ENTRY) {
			image_diag_set(diag, "image config: Env[%zu] is longer than %d bytes (IMAGE_MAX_ENV_ENTRY)", i,
				       IMAGE_MAX_ENV_ENTRY);
			return -E2BIG;
		}
		if (strlen(s) != sl || has_control(s, sl)) {
			image_diag_set(diag, "image config: Env[%zu] %s holds a control character", i,
				       log_quote(s, sl, q));
			return -EBADMSG;
		}
		/* NAME=value with a non-empty name: anything else is not an environment entry */
		if (!strchr(s, '=') || s[0] == '=') {
			image_diag_set(diag, "image config: Env[%zu] %s is not NAME=value", i, log_quote(s, sl, q));
			return -EBADMSG;
		}
		c->env[i] = strdup(s);
		if (!c->env[i]) {
			return -ENOMEM;
		}
		c->n_env = i + 1;
	}
	return 0;
}

static int parse_diff_ids(const json_t *root, struct image_config *c, struct image_diag *diag)
{
	const json_t *rootfs = json_object_get(root, "rootfs"), *ids;
	size_t n;

	if (!rootfs) {
		return 0; /* no layers listed: the caller refuses an image with layers */
	}
	ids = json_object_get(rootfs, "diff_ids");
	if (!json_is_object(rootfs) || (ids && !json_is_array(ids))) {
		image_diag_set(diag, "image config: rootfs.diff_ids is not a list");
		return -EBADMSG;
	}
	n = json_array_size(ids);
	if (n > IMAGE_MAX_LAYERS) {
		image_diag_set(diag, "image config: rootfs.diff_ids has %zu entries, more than %d (IMAGE_MAX_LAYERS)",
			       n, IMAGE_MAX_LAYERS);
		return -E2BIG;
	}
	c->diff_ids = calloc(n ? n : 1, sizeof(*c->diff_ids));
	if (!c->diff_ids) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const char *s = json_string_value(json_array_get(ids, i));
		if (!s || !image_digest_valid(s)) {
			image_diag_set(diag, "image config: rootfs.diff_ids[%zu] is not a sha256 digest", i);
			return -EBADMSG;
		}
		memcpy(c->diff_ids[i], s, IMAGE_DIGEST_LEN + 1);
		c->n_diff_ids = i + 1;
	}
	return 0;
}

int image_config_parse(const void *p, size_t n, struct image_config *ret, struct image_diag *diag)
{
	const struct json_opts jo = { .max_bytes = IMAGE_MAX_CONFIG_BYTES,
				      .max_depth = IMAGE_MAX_JSON_DEPTH,
				      .want_top = JSON_OBJECT };
	_cleanup_json_ json_t *root = NULL;
	struct image_config c = { 0 };
	const json_t *cfg, *env;
	char q[LOG_QUOTE_BUFSIZE];
	int r;

	r = json_parse_strict(p, n, &jo, &root);
	if (r < 0) {
		image_diag_set(diag, "image config: %s", r == -E2BIG ? "larger or deeper than the caps" : "not JSON");
		return r;
	}
	if ((r = dup_opt_string(root, "os", &c.os)) < 0 || (r = dup_opt_string(root, "architecture", &c.arch)) < 0) {
		image_diag_set(diag, "image config: os or architecture is not a short string");
		goto fail;
	}
	r = parse_diff_ids(root, &c, diag);
	if (r < 0) {
		goto fail;
	}
	cfg = json_object_get(root, "config");
	if (!cfg || json_is_null(cfg)) {
		*ret = c;
		return 0;
	}
	if (!json_is_object(cfg)) {
		image_diag_set(diag, "image config: config is not an object");
		r = -EBADMSG;
		goto fail;
	}
	if ((r = box_string(cfg, "WorkingDir", &c.working_dir, diag)) < 0 ||
	    (r = box_string(cfg, "User", &c.user, diag)) < 0) {
		goto fail;
	}
	if (c.working_dir && !working_dir_ok(c.working_dir)) {
		image_diag_set(diag, "image config: WorkingDir %s is not an absolute path without . or ..",
			       log_quote(c.working_dir, strlen(c.working_dir), q));
		r = -EBADMSG;
		goto fail;
	}
	env = json_object_get(cfg, "Env");
	if (env && !json_is_null(env)) {
		if (!json_is_array(env)) {
			image_diag_set(diag, "image config: Env is not a list");
			r = -EBADMSG;
			goto fail;
		}
		r = parse_env(env, &c, diag);
		if (r < 0) {
			goto fail;
		}
	}
	*ret = c;
	return 0;
fail:
	image_config_release(&c);
	return r;
}

int image_platform_parse(const char *s, char **ret_os, char **ret_arch, char **ret_variant)
{
	static const char *const known[] = { "linux/amd64", "linux/arm64", "linux/arm64/v8" };
	const char *arch, *var;
	char *o = NULL, *a = NULL, *v = NULL;
	bool ok = false;

	for (size_t i = 0; s && i < ARRAY_SIZE(known); i++) {
		ok = ok || strcmp(s, known[i]) == 0;
	}
	if (!ok) {
		return -EINVAL;
	}
	arch = strchr(s, '/') + 1;
	var = strchr(arch, '/');
	o = strndup(s, (size_t)(arch - 1 - s));
	a = var ? strndup(arch, (size_t)(var - arch)) : strdup(arch);
	if (var) {
		v = strdup(var + 1);
	}
	if (!o || !a || (var && !v)) {
		free(o);
		free(a);
		free(v);
		return -ENOMEM;
	}
	*ret_os = o;
	*ret_arch = a;
	*ret_variant = v;
	return 0;
}
