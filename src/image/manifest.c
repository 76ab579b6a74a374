/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "image/manifest.h"
#include "json.h"

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

static int parse_descriptor(const json_t *o, bool want_platform, struct image_descriptor *ret)
{
	struct image_descriptor d = { 0 };
	const char *digest;
	json_t *platform, *ann;
	int r;

	if (!json_is_object(o)) {
		return -EBADMSG;
	}
	r = json_get_string(o, "digest", &digest);
	if (r < 0) {
		return r == -ENOENT ? -EBADMSG : r;
	}
	if (!image_digest_valid(digest)) {
		/* only sha256 is accepted: a sha512 digest would be valid OCI but tkbox does not verify it */
		return -EBADMSG;
	}
	memcpy(d.digest, digest, IMAGE_DIGEST_LEN + 1);
	r = json_get_int(o, "size", &d.size);
	if (r < 0) {
		return r == -ENOENT ? -EBADMSG : r;
	}
	if (d.size < 0) {
		return -EBADMSG;
	}
	if (d.size > IMAGE_MAX_BLOB_SIZE) {
		return -E2BIG;
	}
	r = dup_opt_string(o, "mediaType", &d.media_type);
	if (r < 0) {
		goto fail;
	}
	if (want_platform) {
		r = json_get_object(o, "platform", &platform);
		if (r == 0) {
			if ((r = dup_opt_string(platform, "os", &d.os)) < 0 ||
			    (r = dup_opt_string(platform, "architecture", &d.arch)) < 0 ||
			    (r = dup_opt_string(platform, "variant", &d.variant)) < 0) {
				goto fail;
			}
		} else if (r != -ENOENT) {
			goto fail;
		}
		r = json_get_object(o, "annotations", &ann);
		if (r == 0) {
			r = dup_opt_string(ann, "org.opencontainers.image.ref.name", &d.ref_name);
			if (r < 0) {
				goto fail;
			}
		} else if (r != -ENOENT) {
			goto fail;
		}
	}
	*ret = d;
	return 0;
fail:
	descriptor_release(&d);
	return r;
}

static int parse_descriptor_array(const json_t *a, size_t max, bool want_platform, struct image_descriptor **ret,
				  size_t *ret_n)
{
	size_t n = json_array_size(a), i;
	struct image_descriptor *v;
	int r;

	if (!json_is_array(a)) {
		return -EBADMSG;
	}
	if (n > max) {
		return -E2BIG;
	}
	v = calloc(n ? n : 1, sizeof(*v));
	if (!v) {
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		r = parse_descriptor(json_array_get(a, i), want_platform, &v[i]);
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

int image_manifest_parse(const void *p, size_t n, const char *content_type, struct image_manifest *ret)
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
		return r;
	}
	r = json_get_int(root, "schemaVersion", &schema);
	if (r < 0) {
		return r == -ENOENT ? -EBADMSG : r;
	}
	if (schema != 2) {
		return -EPROTONOSUPPORT;
	}
	r = json_get_string(root, "mediaType", &mt);
	if (r == -ENOENT) {
		mt = content_type;
	} else if (r < 0) {
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
			return -EBADMSG;
		}
		m.kind = has_m ? IMAGE_MANIFEST_INDEX : IMAGE_MANIFEST_IMAGE;
	} else {
		return -EPROTONOSUPPORT;
	}

	if (m.kind == IMAGE_MANIFEST_INDEX) {
		r = json_get_array(root, "manifests", &a);
		if (r < 0) {
			return r == -ENOENT ? -EBADMSG : r;
		}
		r = parse_descriptor_array(a, IMAGE_MAX_INDEX_ENTRIES, true, &m.manifests, &m.n_manifests);
		if (r < 0) {
			return r;
		}
		*ret = m;
		return 0;
	}

	r = json_get_object(root, "config", &cfg);
	if (r < 0) {
		return r == -ENOENT ? -EBADMSG : r;
	}
	r = parse_descriptor(cfg, false, &m.config);
	if (r < 0) {
		return r;
	}
	if (m.config.size > (int64_t)IMAGE_MAX_CONFIG_BYTES) {
		image_manifest_release(&m);
		return -E2BIG;
	}
	r = json_get_array(root, "layers", &a);
	if (r < 0) {
		image_manifest_release(&m);
		return r == -ENOENT ? -EBADMSG : r;
	}
	r = parse_descriptor_array(a, IMAGE_MAX_LAYERS, false, &m.layers, &m.n_layers);
	if (r < 0) {
		image_manifest_release(&m);
		return r;
	}
	for (size_t i = 0; i < m.n_layers; i++) {
		if (!layer_type_ok(m.layers[i].media_type)) {
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
	*c = (struct image_config){ 0 };
}

static int dup_nonempty(const json_t *o, const char *key, char **ret)
{
	int r = dup_opt_string(o, key, ret);
	if (r == 0 && *ret && (*ret)[0] == '\0') {
		free(*ret);
		*ret = NULL;
	}
	return r;
}

int image_config_parse(const void *p, size_t n, struct image_config *ret)
{
	const struct json_opts jo = { .max_bytes = IMAGE_MAX_CONFIG_BYTES,
				      .max_depth = IMAGE_MAX_JSON_DEPTH,
				      .want_top = JSON_OBJECT };
	_cleanup_json_ json_t *root = NULL;
	struct image_config c = { 0 };
	json_t *cfg = NULL, *env = NULL, *rootfs = NULL, *ids = NULL;
	int r;

	r = json_parse_strict(p, n, &jo, &root);
	if (r < 0) {
		return r;
	}
	if ((r = dup_opt_string(root, "os", &c.os)) < 0 || (r = dup_opt_string(root, "architecture", &c.arch)) < 0) {
		goto fail;
	}
	r = json_get_object(root, "rootfs", &rootfs);
	if (r == 0) {
		r = json_get_array(rootfs, "diff_ids", &ids);
		if (r == 0) {
			c.n_diff_ids = json_array_size(ids);
		} else if (r != -ENOENT) {
			goto fail;
		}
	} else if (r != -ENOENT) {
		goto fail;
	}
	r = json_get_object(root, "config", &cfg);
	if (r == -ENOENT || (r == -EBADMSG && json_is_null(json_object_get(root, "config")))) {
		*ret = c;
		return 0;
	}
	if (r < 0) {
		goto fail;
	}
	if ((r = dup_nonempty(cfg, "WorkingDir", &c.working_dir)) < 0 || (r = dup_nonempty(cfg, "User", &c.user)) < 0) {
		goto fail;
	}
	r = json_get_array(cfg, "Env", &env);
	if (r == 0) {
		size_t ne = json_array_size(env);
		if (ne > IMAGE_MAX_ENV) {
			r = -E2BIG;
			goto fail;
		}
		c.env = calloc(ne ? ne : 1, sizeof(char *));
		if (!c.env) {
			r = -ENOMEM;
			goto fail;
		}
		for (size_t i = 0; i < ne; i++) {
			const char *s = json_string_value(json_array_get(env, i));
			size_t sl;
			if (!s) {
				r = -EBADMSG;
				goto fail;
			}
			sl = strlen(s);
			if (sl > IMAGE_MAX_ENV_ENTRY) {
				r = -E2BIG;
				goto fail;
			}
			/* NAME=value with a non-empty name: anything else is not an environment entry */
			if (sl != json_string_length(json_array_get(env, i)) || !strchr(s, '=') || s[0] == '=') {
				r = -EBADMSG;
				goto fail;
			}
			c.env[i] = strdup(s);
			if (!c.env[i]) {
				r = -ENOMEM;
				goto fail;
			}
			c.n_env = i + 1;
		}
	} else if (r != -ENOENT && !(r == -EBADMSG && json_is_null(json_object_get(cfg, "Env")))) {
		goto fail;
	}
	if (c.working_dir && c.working_dir[0] != '/') {
		r = -EBADMSG;
		goto fail;
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
