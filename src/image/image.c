/* SPDX-License-Identifier: Apache-2.0 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "banned.h"
#include "io.h"
#include "image/cache.h"
#include "image/ext4.h"
#include "image/image.h"
#include "image/manifest.h"
#include "image/registry.h"
#include "json.h"
#include "log.h"
#include "path.h"

void image_result_release(struct image_result *r)
{
	if (!r) {
		return;
	}
	free(r->ext4_path);
	free(r->json_path);
	free(r->config_digest);
	free(r->manifest_digest);
	for (size_t i = 0; i < r->n_env; i++) {
		free(r->env[i]);
	}
	free(r->env);
	free(r->working_dir);
	free(r->user);
	*r = (struct image_result){ 0 };
}

static int dup_str_member(const json_t *o, const char *k, char **ret)
{
	const char *s;
	int r = json_get_string(o, k, &s);
	if (r == -ENOENT || (r == -EBADMSG && json_is_null(json_object_get(o, k)))) {
		*ret = NULL;
		return 0;
	}
	if (r < 0) {
		return r;
	}
	*ret = strdup(s);
	return *ret ? 0 : -ENOMEM;
}

int image_result_load(const char *json_path, struct image_result *ret)
{
	const struct json_opts jo = { .max_bytes = IMAGE_MAX_IMAGE_JSON, .max_depth = 8, .want_top = JSON_OBJECT };
	_cleanup_close_ int fd = open(json_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_buf_ struct buf *b = NULL;
	_cleanup_json_ json_t *root = NULL;
	struct image_result res = { 0 };
	const char *schema, *rootfs;
	json_t *env;
	char *slash;
	int r;

	if (fd < 0) {
		return negative_errno();
	}
	if ((r = io_read_all_new(fd, IMAGE_MAX_IMAGE_JSON, 0, &b)) < 0 ||
	    (r = json_parse_strict(buf_ptr(b), buf_len(b), &jo, &root)) < 0) {
		return r;
	}
	if (json_get_string(root, "schema", &schema) < 0 || strcmp(schema, IMAGE_JSON_SCHEMA) != 0 ||
	    json_get_string(root, "rootfs", &rootfs) < 0 || strcmp(rootfs, "rootfs.ext4") != 0 ||
	    json_get_array(root, "env", &env) < 0) {
		return -EBADMSG;
	}
	if ((r = dup_str_member(root, "config", &res.config_digest)) < 0 ||
	    (r = dup_str_member(root, "manifest", &res.manifest_digest)) < 0 ||
	    (r = dup_str_member(root, "working_dir", &res.working_dir)) < 0 ||
	    (r = dup_str_member(root, "user", &res.user)) < 0) {
		goto fail;
	}
	if (!res.config_digest || !image_digest_valid(res.config_digest)) {
		r = -EBADMSG;
		goto fail;
	}
	res.env = calloc(json_array_size(env) + 1, sizeof(char *));
	if (!res.env) {
		r = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < json_array_size(env); i++) {
		const char *s = json_string_value(json_array_get(env, i));
		if (!s) {
			r = -EBADMSG;
			goto fail;
		}
		res.env[i] = strdup(s);
		if (!res.env[i]) {
			r = -ENOMEM;
			goto fail;
		}
		res.n_env = i + 1;
	}
	res.json_path = strdup(json_path);
	if (!res.json_path) {
		r = -ENOMEM;
		goto fail;
	}
	slash = strrchr(json_path, '/');
	if (asprintf(&res.ext4_path, "%.*srootfs.ext4", slash ? (int)(slash - json_path + 1) : 0, json_path) < 0) {
		res.ext4_path = NULL;
		r = -ENOMEM;
		goto fail;
	}
	*ret = res;
	return 0;
fail:
	image_result_release(&res);
	return r;
}

/* ---- building a root ---- */

struct build {
	struct image_cache *cache;
	const struct image_opts *o;
	const char *canonical;
	const char *platform;
	char manifest_digest[IMAGE_DIGEST_LEN + 1];
	char root_key[IMAGE_DIGEST_LEN + 1]; /* what the root is built from: image_cache_root_key */
	char (*added)[IMAGE_DIGEST_LEN + 1]; /* blobs a local source added (removed again on failure) */
	size_t n_added;
	uint64_t imported; /* bytes imported from a local source */
	struct image_manifest m; /* kind IMAGE */
	struct image_config cfg;
	bool fetched;
};

static bool meta_cb(void *ud, const char *rel, struct flatten_meta *ret)
{
	return flatten_meta_get(ud, rel, ret);
}

/* key: a root key ("sha256:<hex>" from image_cache_root_key), never a config digest alone. */
static int root_relpath(const char *key, const char *file, char **ret)
{
	if (!image_digest_valid(key)) {
		return -EINVAL;
	}
	if (asprintf(ret, IMAGE_CACHE_ROOTS "/%s%s%s", key + 7, file ? "/" : "", file ? file : "") < 0) {
		return -ENOMEM;
	}
	return 0;
}

static bool root_exists(struct image_cache *c, const char *key)
{
	_cleanup_free_ char *rel = NULL;
	struct stat st;
	return root_relpath(key, "image.json", &rel) == 0 && fstatat(c->dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       S_ISREG(st.st_mode);
}

/* b->root_key from b->m: the config and every layer blob, in order. */
static int set_root_key(struct build *b)
{
	const char *layers[IMAGE_MAX_LAYERS];
	if (b->m.n_layers > IMAGE_MAX_LAYERS) {
		return -E2BIG;
	}
	for (size_t i = 0; i < b->m.n_layers; i++) {
		layers[i] = b->m.layers[i].digest;
	}
	return image_cache_root_key(b->m.config.digest, layers, b->m.n_layers, b->root_key);
}

/* The blobs of one image, as its manifest declares them: at most IMAGE_MAX_IMAGE_BYTES in all. */
static int check_total_size(struct build *b)
{
	uint64_t total = b->m.config.size > 0 ? (uint64_t)b->m.config.size : 0;
	for (size_t i = 0; i < b->m.n_layers; i++) {
		total += b->m.layers[i].size > 0 ? (uint64_t)b->m.layers[i].size : 0;
	}
	if (total > IMAGE_MAX_IMAGE_BYTES) {
		image_diag_set(b->o->diag,
			       "the image's blobs total %llu bytes, more than %llu (IMAGE_MAX_IMAGE_BYTES); nothing "
			       "was imported",
			       (unsigned long long)total, (unsigned long long)IMAGE_MAX_IMAGE_BYTES);
		return -EFBIG;
	}
	return 0;
}

static int write_image_json(struct build *b, int dirfd, uint64_t rootfs_bytes)
{
	_cleanup_json_ json_t *o = NULL, *layers = json_array(), *env = json_array();
	_cleanup_free_ char *text = NULL;
	_cleanup_close_ int fd = -1;
	size_t n;
	int r;

	if (!layers || !env) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < b->m.n_layers; i++) {
		if (json_array_append_new(layers, json_string(b->m.layers[i].digest)) < 0) {
			return -ENOMEM;
		}
	}
	for (size_t i = 0; i < b->cfg.n_env; i++) {
		json_t *s = json_string(b->cfg.env[i]);
		if (!s || json_array_append_new(env, s) < 0) {
			return -EBADMSG; /* not UTF-8: jansson refuses it */
		}
	}
	o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:O, s:O, s:s?, s:s?, s:s, s:I}", "schema", IMAGE_JSON_SCHEMA,
		      "ref", b->canonical, "platform", b->platform, "manifest", b->manifest_digest, "config",
		      b->m.config.digest, "root", b->root_key, "layers", layers, "env", env, "working_dir",
		      b->cfg.working_dir, "user", b->cfg.user, "rootfs", "rootfs.ext4", "rootfs_bytes",
		      (json_int_t)rootfs_bytes);
	if (!o) {
		return -EBADMSG;
	}
	r = json_jcs_string(o, IMAGE_MAX_IMAGE_JSON, &text);
	if (r < 0) {
		return r;
	}
	fd = openat(dirfd, "image.json", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		return negative_errno();
	}
	n = strlen(text);
	if (write(fd, text, n) != (ssize_t)n || fsync(fd) < 0) {
		return -EIO;
	}
	return 0;
}

static int build_root(struct build *b)
{
	struct image_diag *diag = b->o->diag;
	_cleanup_free_ char *tmprel = NULL, *treepath = NULL, *ext4path = NULL, *finalrel = NULL;
	_cleanup_close_ int tmpfd = -1, treefd = -1;
	struct flatten *f = NULL;
	struct ext4_stats st;
	int r;

	r = image_cache_mkdtemp(b->cache, &tmprel);
	if (r < 0) {
		return r;
	}
	tmpfd = openat(b->cache->dirfd, tmprel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (tmpfd < 0 || mkdirat(tmpfd, "tree", 0755) < 0) {
		r = negative_errno();
		goto out;
	}
	treefd = openat(tmpfd, "tree", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (treefd < 0) {
		r = negative_errno();
		goto out;
	}
	r = flatten_new(treefd, b->o->limits, &f);
	if (r < 0) {
		goto out;
	}
	for (size_t i = 0; i < b->m.n_layers; i++) {
		_cleanup_close_ int lfd = image_cache_blob_open(b->cache, b->m.layers[i].digest);
		if (lfd < 0) {
			r = lfd;
			image_diag_set(diag, "layer %zu (%s) is not in the cache", i + 1, b->m.layers[i].digest);
			goto out;
		}
		if (b->o->progress_fd >= 0) {
			dprintf(b->o->progress_fd, "\r\033[Kunpacking layer %zu/%zu", i + 1, b->m.n_layers);
		}
		/* the layer must be the one the config names: poisoning the cache needs a layer that is not */
		r = flatten_layer_fd(f, lfd, b->cfg.diff_ids[i], diag);
		if (r < 0) {
			goto out;
		}
	}
	if (asprintf(&treepath, "%s/%s/tree", b->cache->root, tmprel) < 0 ||
	    asprintf(&ext4path, "%s/%s/rootfs.ext4", b->cache->root, tmprel) < 0) {
		r = -ENOMEM;
		goto out;
	}
	if (b->o->progress_fd >= 0) {
		dprintf(b->o->progress_fd, "\r\033[Kbuilding ext4 (%llu entries)",
			(unsigned long long)flatten_entries(f));
	}
	r = ext4_build(treepath, ext4path, "tkbox-root", meta_cb, f, &st, diag);
	if (b->o->progress_fd >= 0) {
		dprintf(b->o->progress_fd, "\r\033[K");
	}
	if (r < 0) {
		goto out;
	}
	/* the staging tree is not kept: the ext4 is what boxes use, and keeping both doubles the disk */
	r = image_rm_rf_at(tmpfd, "tree");
	if (r < 0) {
		goto out;
	}
	r = write_image_json(b, tmpfd, st.image_bytes);
	if (r < 0) {
		image_diag_set(diag, "cannot write image.json: %s", tk_strerror(r));
		goto out;
	}
	r = root_relpath(b->root_key, NULL, &finalrel);
	if (r < 0) {
		goto out;
	}
	if (renameat(b->cache->dirfd, tmprel, b->cache->dirfd, finalrel) < 0) {
		r = negative_errno();
		if (r == -EEXIST || r == -ENOTEMPTY) {
			r = 0; /* another builder finished the same blobs first: theirs is identical */
		}
		goto out;
	}
	free(tmprel);
	tmprel = NULL;
	r = 0;
out:
	flatten_free(f);
	if (tmprel) {
		(void)image_rm_rf_at(b->cache->dirfd, tmprel);
	}
	return r;
}

static int platform_matches(const struct image_config *cfg, const char *platform)
{
	_cleanup_free_ char *os = NULL, *arch = NULL, *variant = NULL;
	int r = image_platform_parse(platform, &os, &arch, &variant);
	if (r < 0) {
		return r;
	}
	if ((cfg->os && strcmp(cfg->os, os) != 0) || (cfg->arch && strcmp(cfg->arch, arch) != 0)) {
		return -ENOEXEC;
	}
	return 0;
}

/* With b->m filled and every blob in the cache: parse the config, build the root if needed, record the ref. */
static int finish(struct build *b, struct image_result *ret)
{
	struct image_diag *diag = b->o->diag;
	_cleanup_buf_ struct buf *cb = NULL;
	_cleanup_free_ char *json_rel = NULL, *json_path = NULL;
	struct image_cache_ref rec;
	int r;

	r = set_root_key(b);
	if (r < 0) {
		return r;
	}
	if (!root_exists(b->cache, b->root_key)) {
		r = image_cache_read_blob(b->cache, b->m.config.digest, IMAGE_MAX_CONFIG_BYTES, &cb);
		if (r < 0) {
			image_diag_set(diag, "image config %s: %s", b->m.config.digest, tk_strerror(r));
			return r;
		}
		r = image_config_parse(buf_ptr(cb), buf_len(cb), &b->cfg, diag);
		if (r < 0) {
			if (diag && !diag->msg[0]) {
				image_diag_set(diag, "image config %s: %s", b->m.config.digest, tk_strerror(r));
			}
			return r;
		}
		if (b->cfg.n_diff_ids != b->m.n_layers) {
			image_diag_set(
				diag,
				"the manifest lists %zu layers but the image config's rootfs.diff_ids lists %zu: "
				"the config does not describe these layers",
				b->m.n_layers, b->cfg.n_diff_ids);
			return -EBADMSG;
		}
		r = platform_matches(&b->cfg, b->platform);
		if (r < 0) {
			image_diag_set(diag, "the image is %s/%s, not %s", b->cfg.os ? b->cfg.os : "?",
				       b->cfg.arch ? b->cfg.arch : "?", b->platform);
			return r;
		}
		r = build_root(b);
		if (r < 0) {
			return r;
		}
		b->fetched = true;
	}
	memcpy(rec.manifest, b->manifest_digest, sizeof(rec.manifest));
	memcpy(rec.config, b->m.config.digest, sizeof(rec.config));
	memcpy(rec.root, b->root_key, sizeof(rec.root));
	r = image_cache_ref_put(b->cache, b->canonical, b->platform, &rec);
	if (r < 0) {
		return r;
	}
	if (root_relpath(b->root_key, "image.json", &json_rel) < 0 ||
	    asprintf(&json_path, "%s/%s", b->cache->root, json_rel) < 0) {
		return -ENOMEM;
	}
	r = image_result_load(json_path, ret);
	if (r >= 0) {
		ret->from_cache = !b->fetched;
	}
	return r;
}

static int store_bytes(struct image_cache *c, const struct buf *b, const char *expect)
{
	struct blob_writer w;
	int r = blob_writer_begin(&w, c, expect, buf_len(b));
	if (r < 0) {
		return r;
	}
	r = blob_writer_write(&w, buf_ptr(b), buf_len(b));
	if (r >= 0) {
		r = blob_writer_commit(&w);
	}
	blob_writer_abort(&w);
	return r;
}

static int resolve_registry(struct build *b, const struct image_ref *ref)
{
	struct image_diag *diag = b->o->diag;
	struct registry_opts ro = { .auth_file = b->o->auth_file,
				    .ca_file = b->o->ca_file,
				    .progress_fd = b->o->progress_fd,
				    .retries = REGISTRY_RETRIES };
	struct registry *reg = NULL;
	_cleanup_buf_ struct buf *body = NULL;
	_cleanup_free_ char *ctype = NULL;
	_cleanup_free_ char *os = NULL, *arch = NULL, *variant = NULL;
	struct image_manifest top = { 0 };
	struct image_diag why = { .msg = "" };
	char digest[IMAGE_DIGEST_LEN + 1];
	int r;

	r = image_platform_parse(b->platform, &os, &arch, &variant);
	if (r < 0) {
		image_diag_set(diag, "unsupported platform (linux/amd64 or linux/arm64)");
		return r;
	}
	r = registry_new(ref, &ro, &reg, diag);
	if (r < 0) {
		return r;
	}
	r = registry_get_manifest(reg, ref->digest ? ref->digest : ref->tag, &body, &ctype, digest, diag);
	if (r < 0) {
		goto out;
	}
	r = image_manifest_parse(buf_ptr(body), buf_len(body), ctype, &top, &why);
	if (r < 0) {
		image_diag_set(diag, "manifest of %s: %s", b->canonical, why.msg[0] ? why.msg : tk_strerror(r));
		goto out;
	}
	r = store_bytes(b->cache, body, digest);
	if (r < 0) {
		goto out;
	}
	if (top.kind == IMAGE_MANIFEST_INDEX) {
		size_t i;
		char sub[IMAGE_DIGEST_LEN + 1];
		r = image_index_select(&top, os, arch, variant, &i);
		if (r < 0) {
			image_diag_set(diag, "%s has no manifest for %s", b->canonical, b->platform);
			goto out;
		}
		memcpy(sub, top.manifests[i].digest, sizeof(sub));
		buf_free(body);
		body = NULL;
		free(ctype);
		ctype = NULL;
		r = registry_get_manifest(reg, sub, &body, &ctype, digest, diag);
		if (r < 0) {
			goto out;
		}
		r = image_manifest_parse(buf_ptr(body), buf_len(body), ctype, &b->m, &why);
		if (r >= 0 && b->m.kind != IMAGE_MANIFEST_IMAGE) {
			/* an index inside an index from a registry: not followed */
			image_diag_set(diag,
				       "%s: the index entry for %s (%s) is itself an index; tkbox follows one level "
				       "from a registry (pull the platform's manifest by digest)",
				       b->canonical, b->platform, sub);
			r = -EPROTONOSUPPORT;
			goto out;
		}
		if (r < 0) {
			image_diag_set(diag, "manifest %s: %s", sub, why.msg[0] ? why.msg : tk_strerror(r));
			goto out;
		}
		r = store_bytes(b->cache, body, digest);
		if (r < 0) {
			goto out;
		}
	} else {
		b->m = top;
		top = (struct image_manifest){ 0 };
	}
	memcpy(b->manifest_digest, digest, sizeof(digest));
	r = check_total_size(b);
	if (r < 0) {
		goto out;
	}
	r = set_root_key(b);
	if (r < 0) {
		goto out;
	}
	if (!root_exists(b->cache, b->root_key)) {
		r = registry_get_blob(reg, &b->m.config, b->cache, diag);
		for (size_t i = 0; r >= 0 && i < b->m.n_layers; i++) {
			registry_set_progress_label(reg, (unsigned)i + 1, (unsigned)b->m.n_layers);
			r = registry_get_blob(reg, &b->m.layers[i], b->cache, diag);
		}
		if (r < 0) {
			goto out;
		}
	}
	r = 0;
out:
	image_manifest_release(&top);
	registry_free(reg);
	return r;
}

/* ---- local sources ---- */

/*
 * Blobs a local source added to the cache during this resolve: removed again
 * when it fails, so a refused archive leaves nothing behind.
 */
static int note_added(struct build *b, const char *digest)
{
	char(*nv)[IMAGE_DIGEST_LEN + 1];
	if (b->n_added >= IMAGE_MAX_LAYERS + 16) {
		return -E2BIG;
	}
	nv = realloc(b->added, (b->n_added + 1) * sizeof(*nv));
	if (!nv) {
		return -ENOMEM;
	}
	b->added = nv;
	memcpy(b->added[b->n_added++], digest, IMAGE_DIGEST_LEN + 1);
	return 0;
}

static void drop_added(struct build *b)
{
	for (size_t i = 0; i < b->n_added; i++) {
		_cleanup_free_ char *rel = NULL;
		if (image_cache_blob_relpath(b->added[i], &rel) == 0) {
			(void)unlinkat(b->cache->dirfd, rel, 0);
		}
	}
	b->n_added = 0;
}

/* Count bytes imported from a local source against IMAGE_MAX_IMAGE_BYTES. */
static int charge_import(struct build *b, uint64_t n)
{
	b->imported += n;
	if (b->imported > IMAGE_MAX_IMAGE_BYTES) {
		image_diag_set(b->o->diag,
			       "the image's blobs in the local source exceed %llu bytes (IMAGE_MAX_IMAGE_BYTES); "
			       "nothing was kept",
			       (unsigned long long)IMAGE_MAX_IMAGE_BYTES);
		return -EFBIG;
	}
	return 0;
}

/* Read from fd or an archive member into a blob (expect NULL: content-addressed). */
static int import_stream(struct build *b, int fd, struct archive *a, const char *expect, uint64_t max,
			 char ret[IMAGE_DIGEST_LEN + 1])
{
	struct blob_writer w;
	int r = blob_writer_begin(&w, b->cache, expect, max);
	if (r < 0) {
		return r;
	}
	for (;;) {
		uint8_t tmp[65536];
		ssize_t n;
		if (a) {
			la_ssize_t k = archive_read_data(a, tmp, sizeof(tmp));
			n = k < 0 ? -1 : (ssize_t)k;
			if (k < 0) {
				r = -EBADMSG;
				break;
			}
		} else {
			n = RETRY_EINTR(read(fd, tmp, sizeof(tmp)));
			if (n < 0) {
				r = negative_errno();
				break;
			}
		}
		if (n == 0) {
			r = blob_writer_commit(&w);
			break;
		}
		r = charge_import(b, (uint64_t)n);
		if (r >= 0) {
			r = blob_writer_write(&w, tmp, (size_t)n);
		}
		if (r < 0) {
			break;
		}
	}
	if (r >= 0 && !w.existed) {
		r = note_added(b, w.digest);
	}
	if (r >= 0 && ret) {
		memcpy(ret, w.digest, IMAGE_DIGEST_LEN + 1);
	}
	blob_writer_abort(&w);
	return r;
}

/*
 * What a local archive holds: its members' names, links and sizes, read in a
 * first pass that imports nothing. Blobs are then imported by arc_import,
 * only those the index (or manifest.json) reaches.
 */
struct arc_file {
	char *name;
	char *link; /* symlink target resolved to an archive path, or NULL */
	uint64_t size;
	size_t ord; /* position among the archive's headers */
	bool want; /* import it in the next arc_import pass */
	char expect[IMAGE_DIGEST_LEN + 1]; /* "": content-addressed */
	char digest[IMAGE_DIGEST_LEN + 1]; /* "" until imported */
};
struct arc {
	const char *path;
	struct arc_file *v;
	size_t n;
	struct buf *index_json;
	struct buf *manifest_json;
};
#define IMAGE_MAX_ARCHIVE_FILES 4096

static void arc_release(struct arc *x)
{
	for (size_t i = 0; i < x->n; i++) {
		free(x->v[i].name);
		free(x->v[i].link);
	}
	free(x->v);
	buf_free(x->index_json);
	buf_free(x->manifest_json);
	*x = (struct arc){ 0 };
}

/* The regular member a name (or a chain of at most 8 links) leads to; the last of equal names wins. */
static struct arc_file *arc_find(struct arc *x, const char *name)
{
	for (unsigned hops = 0; hops < 8; hops++) {
		struct arc_file *f = NULL;
		for (size_t i = 0; i < x->n; i++) {
			if (strcmp(x->v[i].name, name) == 0) {
				f = &x->v[i];
			}
		}
		if (!f || !f->link) {
			return f;
		}
		name = f->link;
	}
	return NULL;
}

static char *strip_dot(const char *s)
{
	while (s[0] == '.' && s[1] == '/') {
		s += 2;
	}
	return strdup(s);
}

/* Resolve a symlink target inside an archive to a plain archive path ("a/../blobs/x" -> "blobs/x"). */
static char *resolve_link(const char *name, const char *target)
{
	_cleanup_free_ char *joined = NULL;
	char *out, *save = NULL, *seg;
	size_t on = 0;
	const char *slash = strrchr(name, '/');
	if (target[0] == '/' || asprintf(&joined, "%.*s%s", slash ? (int)(slash - name + 1) : 0, name, target) < 0) {
		return NULL;
	}
	out = calloc(strlen(joined) + 1, 1);
	if (!out) {
		return NULL;
	}
	for (seg = strtok_r(joined, "/", &save); seg; seg = strtok_r(NULL, "/", &save)) {
		if (strcmp(seg, ".") == 0) {
			continue;
		}
		if (strcmp(seg, "..") == 0) {
			char *p = on ? memrchr(out, '/', on) : NULL;
			if (on == 0) {
				free(out);
				return NULL;
			}
			on = p ? (size_t)(p - out) : 0;
			out[on] = '\0';
			continue;
		}
		if (on) {
			out[on++] = '/';
		}
		memcpy(out + on, seg, strlen(seg));
		on += strlen(seg);
		out[on] = '\0';
	}
	return out;
}

static int arc_open(const char *path, struct archive **ret, struct image_diag *diag)
{
	struct archive *a = archive_read_new();
	if (!a) {
		return -ENOMEM;
	}
	(void)archive_read_support_filter_gzip(a);
	(void)archive_read_support_format_tar(a);
	if (archive_read_open_filename(a, path, 65536) != ARCHIVE_OK) {
		image_diag_set(diag, "cannot open archive: %s",
			       archive_error_string(a) ? archive_error_string(a) : "?");
		archive_read_free(a);
		return -ENOENT;
	}
	*ret = a;
	return 0;
}

static int arc_next(struct archive *a, struct archive_entry **e, struct image_diag *diag)
{
	int ar = archive_read_next_header(a, e);
	if (ar == ARCHIVE_EOF) {
		return 0;
	}
	if (ar != ARCHIVE_OK && ar != ARCHIVE_WARN) {
		image_diag_set(diag, "unreadable archive: %s", archive_error_string(a) ? archive_error_string(a) : "?");
		return -EBADMSG;
	}
	return 1;
}

/* Pass 1: the member table, index.json and manifest.json; nothing is imported. */
static int arc_scan(const char *path, struct arc *x, struct image_diag *diag)
{
	struct archive *a = NULL;
	struct archive_entry *e;
	int r = arc_open(path, &a, diag);
	if (r < 0) {
		return r;
	}
	x->path = path;
	for (size_t ord = 0;; ord++) {
		_cleanup_free_ char *name = NULL;
		struct arc_file *nv;
		mode_t type;
		r = arc_next(a, &e, diag);
		if (r <= 0) {
			break;
		}
		type = archive_entry_filetype(e);
		if (type != AE_IFREG && type != AE_IFLNK) {
			continue;
		}
		name = strip_dot(archive_entry_pathname(e) ? archive_entry_pathname(e) : "");
		if (!name) {
			r = -ENOMEM;
			break;
		}
		if (x->n >= IMAGE_MAX_ARCHIVE_FILES) {
			image_diag_set(diag, "archive holds more than %d files (IMAGE_MAX_ARCHIVE_FILES)",
				       IMAGE_MAX_ARCHIVE_FILES);
			r = -E2BIG;
			break;
		}
		if (type == AE_IFREG && (strcmp(name, "index.json") == 0 || strcmp(name, "manifest.json") == 0)) {
			struct buf **slot = name[0] == 'i' ? &x->index_json : &x->manifest_json;
			uint8_t tmp[65536];
			la_ssize_t n;
			buf_free(*slot);
			*slot = NULL;
			r = buf_new(IMAGE_MAX_LOCAL_META, 0, slot);
			while (r >= 0 && (n = archive_read_data(a, tmp, sizeof(tmp))) > 0) {
				r = buf_put(*slot, tmp, (size_t)n);
			}
			if (r < 0) {
				image_diag_set(diag, "%s in the archive: %s", name, tk_strerror(r));
				break;
			}
			continue;
		}
		nv = realloc(x->v, (x->n + 1) * sizeof(*x->v));
		if (!nv) {
			r = -ENOMEM;
			break;
		}
		x->v = nv;
		x->v[x->n] = (struct arc_file){ .ord = ord };
		if (type == AE_IFLNK) {
			x->v[x->n].link = resolve_link(name, archive_entry_symlink(e) ? archive_entry_symlink(e) : "/");
			if (!x->v[x->n].link) {
				continue; /* a link out of the archive: never used */
			}
		} else {
			x->v[x->n].size = archive_entry_size_is_set(e) && archive_entry_size(e) > 0
						  ? (uint64_t)archive_entry_size(e)
						  : 0;
		}
		x->v[x->n].name = steal_ptr(name);
		x->n++;
	}
	archive_read_free(a);
	return r;
}

/* Mark the member name leads to for import; expect NULL: content-addressed. */
static struct arc_file *arc_want(struct arc *x, const char *name, const char *expect)
{
	struct arc_file *f = arc_find(x, name);
	if (!f) {
		return NULL;
	}
	f->want = true;
	if (expect) {
		memcpy(f->expect, expect, IMAGE_DIGEST_LEN + 1);
	}
	return f;
}

/* One pass: import every wanted member not yet imported, and nothing else. */
static int arc_import(struct build *b, struct arc *x)
{
	struct image_diag *diag = b->o->diag;
	struct archive *a = NULL;
	struct archive_entry *e;
	size_t pending = 0;
	int r;

	for (size_t i = 0; i < x->n; i++) {
		pending += x->v[i].want && !x->v[i].digest[0];
	}
	if (pending == 0) {
		return 0;
	}
	r = arc_open(x->path, &a, diag);
	if (r < 0) {
		return r;
	}
	for (size_t ord = 0; pending > 0; ord++) {
		struct arc_file *f = NULL;
		r = arc_next(a, &e, diag);
		if (r <= 0) {
			break;
		}
		for (size_t i = 0; i < x->n; i++) {
			if (x->v[i].ord == ord && x->v[i].want && !x->v[i].digest[0] && !x->v[i].link) {
				f = &x->v[i];
			}
		}
		if (!f) {
			continue;
		}
		r = import_stream(b, -1, a, f->expect[0] ? f->expect : NULL, f->size, f->digest);
		if (r < 0) {
			char q[LOG_QUOTE_BUFSIZE];
			if (diag && !diag->msg[0]) {
				image_diag_set(diag, "archive member %s: %s", log_quote(f->name, strlen(f->name), q),
					       r == -EBADMSG ? "does not match its digest" : tk_strerror(r));
			}
			break;
		}
		pending--;
	}
	archive_read_free(a);
	if (r >= 0 && pending > 0) {
		image_diag_set(diag, "the archive changed while it was read");
		r = -EBADMSG;
	}
	return r < 0 ? r : 0;
}

/* How select_from_index gets a manifest blob that is not in the cache yet. */
typedef int (*fetch_fn)(struct build *b, void *ud, const char *digest, uint64_t max);

static int fetch_from_layout(struct build *b, void *ud, const char *digest, uint64_t max)
{
	int layoutfd = *(int *)ud;
	_cleanup_free_ char *rel = NULL;
	_cleanup_close_ int fd = -1;
	int r = image_cache_blob_relpath(digest, &rel);
	if (r < 0) {
		return r;
	}
	fd = openat(layoutfd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		return negative_errno();
	}
	return import_stream(b, fd, NULL, digest, max, NULL);
}

static int fetch_from_archive(struct build *b, void *ud, const char *digest, uint64_t max)
{
	struct arc *x = ud;
	_cleanup_free_ char *rel = NULL;
	struct arc_file *f;
	int r = image_cache_blob_relpath(digest, &rel);
	if (r < 0) {
		return r;
	}
	f = arc_want(x, rel, digest);
	if (!f) {
		return -ENOENT;
	}
	if (f->size > max) {
		return -E2BIG;
	}
	return arc_import(b, x);
}

/* Pick a manifest from an OCI layout index (following nested indexes) and load it into b->m. */
static int select_from_index(struct build *b, const struct buf *index, const char *name, fetch_fn fetch, void *ud)
{
	struct image_diag *diag = b->o->diag;
	_cleanup_free_ char *os = NULL, *arch = NULL, *variant = NULL;
	struct image_manifest idx = { 0 };
	struct image_diag why = { .msg = "" };
	_cleanup_buf_ struct buf *doc = NULL;
	char digest[IMAGE_DIGEST_LEN + 1];
	size_t pick = 0;
	int r;

	r = image_platform_parse(b->platform, &os, &arch, &variant);
	if (r < 0) {
		return r;
	}
	r = image_manifest_parse(buf_ptr(index), buf_len(index), MT_OCI_INDEX, &idx, &why);
	if (r < 0 || idx.kind != IMAGE_MANIFEST_INDEX) {
		image_diag_set(diag, "index.json: %s",
			       r < 0 ? (why.msg[0] ? why.msg : tk_strerror(r))
				     : "an image manifest where the layout's index belongs");
		image_manifest_release(&idx);
		return r < 0 ? r : -EBADMSG;
	}
	for (unsigned depth = 0;; depth++) {
		bool found = false;
		if (depth > 4 || idx.n_manifests == 0) {
			image_diag_set(diag, depth > 4 ? "indexes nested deeper than 4 levels in the OCI layout"
						       : "no usable manifest in the OCI layout");
			r = -ENOENT;
			break;
		}
		if (name && depth == 0) {
			for (size_t i = 0; i < idx.n_manifests; i++) {
				if (idx.manifests[i].ref_name && strcmp(idx.manifests[i].ref_name, name) == 0) {
					pick = i;
					found = true;
				}
			}
			if (!found) {
				char q[LOG_QUOTE_BUFSIZE];
				image_diag_set(diag, "no image named %s in the OCI layout",
					       log_quote(name, strlen(name), q));
				r = -ENOENT;
				break;
			}
		} else if (image_index_select(&idx, os, arch, variant, &pick) < 0) {
			if (idx.n_manifests != 1) {
				image_diag_set(diag,
					       "the OCI layout has no single manifest for %s (name one: oci:DIR:NAME)",
					       b->platform);
				r = -ENOENT;
				break;
			}
			pick = 0;
		}
		memcpy(digest, idx.manifests[pick].digest, sizeof(digest));
		if (!image_cache_has_blob(b->cache, digest)) {
			r = fetch(b, ud, digest, IMAGE_MAX_MANIFEST_BYTES);
			if (r < 0) {
				if (diag && !diag->msg[0]) {
					image_diag_set(diag, "manifest %s: %s", digest,
						       r == -EBADMSG  ? "its bytes do not hash to the digest the index "
									"names (the layout is corrupt or was altered)"
						       : r == -ENOENT ? "missing from the layout"
								      : tk_strerror(r));
				}
				break;
			}
		}
		buf_free(doc);
		doc = NULL;
		r = image_cache_read_blob(b->cache, digest, IMAGE_MAX_MANIFEST_BYTES, &doc);
		if (r < 0) {
			image_diag_set(diag, "manifest %s: %s", digest,
				       r == -ENOENT    ? "missing"
				       : r == -EBADMSG ? "its bytes do not hash to the digest the index names"
						       : tk_strerror(r));
			break;
		}
		image_manifest_release(&idx);
		r = image_manifest_parse(buf_ptr(doc), buf_len(doc), NULL, &idx, &why);
		if (r < 0) {
			image_diag_set(diag, "manifest %s: %s", digest, why.msg[0] ? why.msg : tk_strerror(r));
			break;
		}
		if (idx.kind == IMAGE_MANIFEST_IMAGE) {
			b->m = idx;
			idx = (struct image_manifest){ 0 };
			memcpy(b->manifest_digest, digest, sizeof(digest));
			r = 0;
			break;
		}
	}
	image_manifest_release(&idx);
	return r;
}

static int import_layout_blobs(struct build *b, int layoutfd)
{
	const struct image_descriptor *all[IMAGE_MAX_LAYERS + 1];
	size_t n = 0;
	int r = check_total_size(b);
	if (r < 0) {
		return r;
	}
	all[n++] = &b->m.config;
	for (size_t i = 0; i < b->m.n_layers; i++) {
		all[n++] = &b->m.layers[i];
	}
	for (size_t i = 0; i < n; i++) {
		if (image_cache_has_blob(b->cache, all[i]->digest)) {
			continue;
		}
		r = fetch_from_layout(b, &layoutfd, all[i]->digest, (uint64_t)all[i]->size);
		if (r < 0) {
			if (!b->o->diag || !b->o->diag->msg[0]) {
				image_diag_set(b->o->diag, "blob %s: %s", all[i]->digest,
					       r == -EBADMSG ? "does not match its digest" : tk_strerror(r));
			}
			return r;
		}
	}
	return 0;
}

static int resolve_oci_dir(struct build *b, const struct image_ref *ref)
{
	_cleanup_close_ int dfd = open(ref->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_close_ int ifd = -1;
	_cleanup_buf_ struct buf *index = NULL;
	int r;
	if (dfd < 0) {
		r = negative_errno();
		image_diag_set(b->o->diag, "oci: cannot open the layout directory: %s", tk_strerror(r));
		return r;
	}
	ifd = openat(dfd, "index.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (ifd < 0) {
		image_diag_set(b->o->diag, "oci: no index.json in the layout directory");
		return negative_errno();
	}
	r = io_read_all_new(ifd, IMAGE_MAX_LOCAL_META, 0, &index);
	if (r < 0) {
		return r;
	}
	r = select_from_index(b, index, ref->name, fetch_from_layout, &dfd);
	if (r < 0) {
		return r;
	}
	if (set_root_key(b) == 0 && root_exists(b->cache, b->root_key)) {
		return 0; /* built from these very blobs before: nothing to import */
	}
	return import_layout_blobs(b, dfd);
}

static int resolve_oci_archive(struct build *b, const struct image_ref *ref)
{
	struct image_diag *diag = b->o->diag;
	struct arc x = { 0 };
	int r = arc_scan(ref->path, &x, diag);
	if (r >= 0 && !x.index_json) {
		image_diag_set(diag, "oci-archive: no index.json in the archive");
		r = -ENOENT;
	}
	if (r >= 0) {
		r = select_from_index(b, x.index_json, ref->name, fetch_from_archive, &x);
	}
	if (r >= 0) {
		r = check_total_size(b);
	}
	if (r >= 0 && set_root_key(b) == 0 && root_exists(b->cache, b->root_key)) {
		arc_release(&x);
		return 0; /* built from these very blobs before: nothing to import */
	}
	/* the config and the layers the chosen manifest names, in one more pass; nothing else */
	for (size_t i = 0; r >= 0 && i <= b->m.n_layers; i++) {
		const struct image_descriptor *d = i == 0 ? &b->m.config : &b->m.layers[i - 1];
		_cleanup_free_ char *rel = NULL;
		struct arc_file *f;
		if (image_cache_has_blob(b->cache, d->digest)) {
			continue;
		}
		r = image_cache_blob_relpath(d->digest, &rel);
		if (r < 0) {
			break;
		}
		f = arc_want(&x, rel, d->digest);
		if (!f) {
			image_diag_set(diag, "oci-archive: the archive lacks %s %s", i == 0 ? "the config" : "layer",
				       d->digest);
			r = -ENOENT;
			break;
		}
		if (f->size != (uint64_t)d->size) {
			image_diag_set(diag, "oci-archive: blob %s is %llu bytes, the manifest says %lld", d->digest,
				       (unsigned long long)f->size, (long long)d->size);
			r = -EBADMSG;
			break;
		}
	}
	if (r >= 0) {
		r = arc_import(b, &x);
	}
	arc_release(&x);
	return r;
}

/* docker save: manifest.json = [{"Config": "x.json", "RepoTags": [..], "Layers": ["y/layer.tar", ..]}] */
static int resolve_docker_archive(struct build *b, const struct image_ref *ref)
{
	const struct json_opts jo = { .max_bytes = IMAGE_MAX_LOCAL_META, .max_depth = 8, .want_top = JSON_ARRAY };
	_cleanup_json_ json_t *root = NULL;
	struct image_diag *diag = b->o->diag;
	struct arc x = { 0 };
	struct arc_file *cf, *lf[IMAGE_MAX_LAYERS];
	json_t *img, *layers;
	const char *cfgname;
	size_t nl;
	int r = arc_scan(ref->path, &x, diag);

	if (r < 0) {
		goto out;
	}
	if (!x.manifest_json) {
		image_diag_set(diag, "docker-archive: no manifest.json in the archive");
		r = -ENOENT;
		goto out;
	}
	r = json_parse_strict(buf_ptr(x.manifest_json), buf_len(x.manifest_json), &jo, &root);
	if (r < 0 || json_array_size(root) == 0) {
		image_diag_set(diag, "docker-archive: malformed manifest.json");
		r = r < 0 ? r : -EBADMSG;
		goto out;
	}
	if (json_array_size(root) > 1) {
		image_diag_set(diag, "docker-archive: the archive holds %zu images; tkbox reads archives of one",
			       json_array_size(root));
		r = -EINVAL;
		goto out;
	}
	img = json_array_get(root, 0);
	if (json_get_string(img, "Config", &cfgname) < 0 || json_get_array(img, "Layers", &layers) < 0 ||
	    json_array_size(layers) > IMAGE_MAX_LAYERS) {
		image_diag_set(diag, "docker-archive: malformed manifest.json entry");
		r = -EBADMSG;
		goto out;
	}
	nl = json_array_size(layers);
	/* blobs/sha256/<hex> must hash to <hex>; the legacy names are content-addressed as read */
	cf = arc_want(&x, cfgname, NULL);
	if (!cf) {
		image_diag_set(diag, "docker-archive: config file missing from the archive");
		r = -ENOENT;
		goto out;
	}
	for (size_t i = 0; i < nl; i++) {
		const char *ln = json_string_value(json_array_get(layers, i));
		lf[i] = ln ? arc_want(&x, ln, NULL) : NULL;
		if (!lf[i]) {
			image_diag_set(diag, "docker-archive: layer %zu missing from the archive", i + 1);
			r = -ENOENT;
			goto out;
		}
	}
	for (size_t i = 0; i < x.n; i++) {
		char expect[IMAGE_DIGEST_LEN + 8];
		if (!x.v[i].want || strncmp(x.v[i].name, "blobs/sha256/", 13) != 0) {
			continue;
		}
		(void)snprintf(expect, sizeof(expect), "sha256:%s", x.v[i].name + 13);
		if (image_digest_valid(expect)) {
			memcpy(x.v[i].expect, expect, IMAGE_DIGEST_LEN + 1);
		}
	}
	r = arc_import(b, &x);
	if (r < 0) {
		goto out;
	}
	b->m.kind = IMAGE_MANIFEST_IMAGE;
	memcpy(b->m.config.digest, cf->digest, IMAGE_DIGEST_LEN + 1);
	b->m.config.size = (int64_t)cf->size;
	b->m.layers = calloc(nl + 1, sizeof(*b->m.layers));
	if (!b->m.layers) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < nl; i++) {
		memcpy(b->m.layers[i].digest, lf[i]->digest, IMAGE_DIGEST_LEN + 1);
		b->m.layers[i].size = (int64_t)lf[i]->size;
		b->m.n_layers = i + 1;
	}
	/* no registry manifest exists: the config digest identifies the image */
	memcpy(b->manifest_digest, b->m.config.digest, IMAGE_DIGEST_LEN + 1);
	r = 0;
out:
	arc_release(&x);
	return r;
}

int image_resolve(const struct image_opts *o, const char *refstr, struct image_result *ret)
{
	struct image_diag *diag = o->diag;
	struct image_ref ref = { 0 };
	struct image_cache *cache = NULL;
	struct build b = { .o = o };
	_cleanup_free_ char *canonical = NULL, *abspath = NULL;
	_cleanup_close_ int lockfd = -1;
	struct image_cache_ref rec;
	int r;

	if (diag) {
		diag->msg[0] = '\0';
	}
	b.platform = o->platform ? o->platform : IMAGE_DEFAULT_PLATFORM;
	{
		_cleanup_free_ char *os = NULL, *arch = NULL, *variant = NULL;
		r = image_platform_parse(b.platform, &os, &arch, &variant);
		if (r < 0) {
			image_diag_set(diag, "unsupported platform (use linux/amd64 or linux/arm64)");
			return r;
		}
	}
	r = image_ref_parse(refstr, &ref);
	if (r < 0) {
		image_diag_set(diag, "invalid image reference");
		return r;
	}
	if (ref.kind != IMAGE_REF_REGISTRY) {
		/* local sources are recorded under their absolute path */
		abspath = realpath(ref.path, NULL);
		if (!abspath) {
			r = negative_errno();
			char q[LOG_QUOTE_BUFSIZE];
			image_diag_set(diag, "%s: %s", log_quote(ref.path, strlen(ref.path), q), tk_strerror(r));
			goto out;
		}
		free(ref.path);
		ref.path = steal_ptr(abspath);
	}
	r = image_ref_canonical(&ref, &canonical);
	if (r < 0) {
		goto out;
	}
	b.canonical = canonical;
	r = image_cache_open(o->state_dir, false, &cache);
	if (r < 0) {
		image_diag_set(diag, "cannot open the image cache: %s", tk_strerror(r));
		goto out;
	}
	b.cache = cache;
	for (int pass = 0; pass < 2 && ref.kind == IMAGE_REF_REGISTRY && !o->refresh; pass++) {
		/* the second look is after taking the per-image lock: another puller may have finished */
		if (pass == 1) {
			lockfd = image_cache_lock_key(cache, canonical);
			if (lockfd < 0) {
				r = lockfd;
				goto out;
			}
		}
		if (image_cache_ref_get(cache, canonical, b.platform, &rec) == 0 && root_exists(cache, rec.root)) {
			_cleanup_free_ char *rel = NULL, *path = NULL;
			if (root_relpath(rec.root, "image.json", &rel) < 0 ||
			    asprintf(&path, "%s/%s", cache->root, rel) < 0) {
				r = -ENOMEM;
				goto out;
			}
			r = image_result_load(path, ret);
			if (r >= 0) {
				ret->from_cache = true;
				goto out;
			}
		}
	}
	if (lockfd < 0) {
		lockfd = image_cache_lock_key(cache, canonical);
		if (lockfd < 0) {
			r = lockfd;
			goto out;
		}
	}
	switch (ref.kind) {
	case IMAGE_REF_REGISTRY:
		r = resolve_registry(&b, &ref);
		break;
	case IMAGE_REF_OCI_DIR:
		r = resolve_oci_dir(&b, &ref);
		break;
	case IMAGE_REF_OCI_ARCHIVE:
		r = resolve_oci_archive(&b, &ref);
		break;
	case IMAGE_REF_DOCKER_ARCHIVE:
		r = resolve_docker_archive(&b, &ref);
		break;
	default:
		r = -EINVAL;
		break;
	}
	if (r >= 0) {
		r = finish(&b, ret);
	}
	if (r < 0 && diag && !diag->msg[0]) {
		image_diag_set(diag, "%s", tk_strerror(r));
	}
	if (r < 0) {
		drop_added(&b); /* a refused local source leaves no blob behind */
	}
out:
	free(b.added);
	image_manifest_release(&b.m);
	image_config_release(&b.cfg);
	image_cache_free(cache);
	image_ref_release(&ref);
	return r;
}

/* ---- ls / rm / prune ---- */

void image_list_free(struct image_entry *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++) {
		free(v[i].ref);
		free(v[i].platform);
		free(v[i].config);
	}
	free(v);
}

static int load_ref_file(int dirfd, const char *name, json_t **ret)
{
	const struct json_opts jo = { .max_bytes = IMAGE_CACHE_REF_MAX, .max_depth = 4, .want_top = JSON_OBJECT };
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_buf_ struct buf *b = NULL;
	int r;
	if (fd < 0) {
		return negative_errno();
	}
	r = io_read_all_new(fd, IMAGE_CACHE_REF_MAX, 0, &b);
	if (r < 0) {
		return r;
	}
	return json_parse_strict(buf_ptr(b), buf_len(b), &jo, ret);
}

/* Calls fn for each refs/ record; stops on a negative return. */
static int for_each_ref(struct image_cache *c, int (*fn)(void *, const char *file, json_t *), void *ud)
{
	_cleanup_close_ int rfd = openat(c->dirfd, "refs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d;
	struct dirent *de;
	int r = 0;
	if (rfd < 0) {
		return negative_errno();
	}
	d = io_opendir_dup(rfd);
	if (!d) {
		return negative_errno();
	}
	while ((de = readdir(d))) {
		json_t *j = NULL;
		size_t nl = strlen(de->d_name);
		if (nl < 6 || strcmp(de->d_name + nl - 5, ".json") != 0) {
			continue;
		}
		if (load_ref_file(rfd, de->d_name, &j) < 0) {
			continue;
		}
		r = fn(ud, de->d_name, j);
		json_decref(j);
		if (r < 0) {
			break;
		}
	}
	(void)closedir(d);
	return r;
}

struct list_ctx {
	struct image_cache *c;
	struct image_entry *v;
	size_t n;
};

static int list_one(void *ud, const char *file, json_t *j)
{
	struct list_ctx *l = ud;
	const char *ref, *plat, *cfg, *root;
	struct image_entry *nv, e = { 0 };
	_cleanup_free_ char *rel = NULL;
	struct stat st;
	(void)file;
	if (json_get_string(j, "ref", &ref) < 0 || json_get_string(j, "platform", &plat) < 0 ||
	    json_get_string(j, "config", &cfg) < 0 || !image_digest_valid(cfg) ||
	    json_get_string(j, "root", &root) < 0) {
		return 0; /* a record of the old layout (no "root"): its root is never used */
	}
	if (root_relpath(root, "rootfs.ext4", &rel) == 0 && fstatat(l->c->dirfd, rel, &st, 0) == 0) {
		e.rootfs_bytes = (uint64_t)st.st_blocks * 512;
	}
	e.ref = strdup(ref);
	e.platform = strdup(plat);
	e.config = strdup(cfg);
	nv = realloc(l->v, (l->n + 1) * sizeof(*nv));
	if (!e.ref || !e.platform || !e.config || !nv) {
		free(e.ref);
		free(e.platform);
		free(e.config);
		if (nv) {
			l->v = nv;
		}
		return -ENOMEM;
	}
	l->v = nv;
	l->v[l->n++] = e;
	return 0;
}

int image_list(const char *state_dir, struct image_entry **ret, size_t *ret_n)
{
	struct list_ctx l = { 0 };
	int r = image_cache_open(state_dir, false, &l.c);
	if (r < 0) {
		return r;
	}
	r = for_each_ref(l.c, list_one, &l);
	image_cache_free(l.c);
	if (r < 0) {
		image_list_free(l.v, l.n);
		return r;
	}
	*ret = l.v;
	*ret_n = l.n;
	return 0;
}

struct rm_ctx {
	struct image_cache *c;
	const char *root;
	uint64_t n;
};

/* Remove refs to x->root, or (x->root NULL) refs whose root is gone, old-layout records included. */
static int rm_ref_of_root(void *ud, const char *file, json_t *j)
{
	struct rm_ctx *x = ud;
	const char *root;
	_cleanup_free_ char *rel = NULL;
	if (json_get_string(j, "root", &root) < 0) {
		root = NULL;
	}
	if (x->root ? root && strcmp(root, x->root) == 0 : !root || !root_exists(x->c, root)) {
		if (asprintf(&rel, "refs/%s", file) < 0) {
			return -ENOMEM;
		}
		if (unlinkat(x->c->dirfd, rel, 0) == 0) {
			x->n++;
		}
	}
	return 0;
}

int image_remove(const char *state_dir, const char *refstr, const char *platform, struct image_diag *diag)
{
	struct image_ref ref = { 0 };
	struct image_cache *c = NULL;
	struct image_cache_ref rec;
	_cleanup_free_ char *canonical = NULL, *rel = NULL;
	struct rm_ctx x = { 0 };
	int r = image_ref_parse(refstr, &ref);

	if (r < 0) {
		image_diag_set(diag, "invalid image reference");
		return r;
	}
	if (ref.kind != IMAGE_REF_REGISTRY) {
		char *abs = realpath(ref.path, NULL);
		if (abs) {
			free(ref.path);
			ref.path = abs;
		}
	}
	r = image_ref_canonical(&ref, &canonical);
	image_ref_release(&ref);
	if (r < 0) {
		return r;
	}
	r = image_cache_open(state_dir, true, &c);
	if (r < 0) {
		return r;
	}
	r = image_cache_ref_get(c, canonical, platform ? platform : IMAGE_DEFAULT_PLATFORM, &rec);
	if (r < 0) {
		image_diag_set(diag, "not in the cache");
		goto out;
	}
	r = root_relpath(rec.root, NULL, &rel);
	if (r < 0) {
		goto out;
	}
	r = image_rm_rf_at(c->dirfd, rel);
	if (r < 0) {
		goto out;
	}
	x.c = c;
	x.root = rec.root;
	r = for_each_ref(c, rm_ref_of_root, &x);
out:
	image_cache_free(c);
	return r;
}

static int collect_used(struct image_cache *c, json_t *used)
{
	_cleanup_close_ int rfd = openat(c->dirfd, IMAGE_CACHE_ROOTS, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d;
	struct dirent *de;
	if (rfd < 0) {
		return negative_errno();
	}
	d = io_opendir_dup(rfd);
	if (!d) {
		return negative_errno();
	}
	while ((de = readdir(d))) {
		_cleanup_free_ char *path = NULL;
		json_t *j = NULL, *layers;
		const char *s;
		if (de->d_name[0] == '.') {
			continue;
		}
		if (asprintf(&path, "%s/image.json", de->d_name) < 0) {
			(void)closedir(d);
			return -ENOMEM;
		}
		{
			const struct json_opts jo = { .max_bytes = IMAGE_MAX_IMAGE_JSON,
						      .max_depth = 8,
						      .want_top = JSON_OBJECT };
			_cleanup_close_ int fd = openat(rfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
			_cleanup_buf_ struct buf *b = NULL;
			if (fd < 0 || io_read_all_new(fd, IMAGE_MAX_IMAGE_JSON, 0, &b) < 0 ||
			    json_parse_strict(buf_ptr(b), buf_len(b), &jo, &j) < 0) {
				continue;
			}
		}
		if (json_get_string(j, "manifest", &s) == 0) {
			(void)json_object_set_new(used, s, json_true());
		}
		if (json_get_string(j, "config", &s) == 0) {
			(void)json_object_set_new(used, s, json_true());
		}
		if (json_get_array(j, "layers", &layers) == 0) {
			for (size_t i = 0; i < json_array_size(layers); i++) {
				if ((s = json_string_value(json_array_get(layers, i)))) {
					(void)json_object_set_new(used, s, json_true());
				}
			}
		}
		json_decref(j);
	}
	(void)closedir(d);
	return 0;
}

int image_prune(const char *state_dir, struct image_prune_stats *ret)
{
	struct image_cache *c = NULL;
	struct image_prune_stats st = { 0 };
	_cleanup_json_ json_t *used = json_object();
	struct rm_ctx x = { 0 };
	int r;
	DIR *d;
	struct dirent *de;

	if (!used) {
		return -ENOMEM;
	}
	r = image_cache_open(state_dir, true, &c);
	if (r < 0) {
		return r;
	}
	/* exclusive lock: no pull is running, so everything in tmp/ is a leftover of a crash */
	{
		_cleanup_close_ int tfd = openat(c->dirfd, "tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		d = tfd >= 0 ? io_opendir_dup(tfd) : NULL;
		while (d && (de = readdir(d))) {
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
			    image_rm_rf_at(tfd, de->d_name) == 0) {
				st.tmp++;
			}
		}
		if (d) {
			(void)closedir(d);
		}
	}
	/* roots of the old layout (keyed by config digest alone, built without the diff_id check): never trusted */
	(void)image_rm_rf_at(c->dirfd, "roots");
	x.c = c;
	r = for_each_ref(c, rm_ref_of_root, &x);
	if (r < 0) {
		goto out;
	}
	st.refs = x.n;
	r = collect_used(c, used);
	if (r < 0) {
		goto out;
	}
	{
		_cleanup_close_ int bfd =
			openat(c->dirfd, "blobs/sha256", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		d = bfd >= 0 ? io_opendir_dup(bfd) : NULL;
		while (d && (de = readdir(d))) {
			char dg[IMAGE_DIGEST_LEN + 8];
			struct stat sst;
			if (de->d_name[0] == '.') {
				continue;
			}
			(void)snprintf(dg, sizeof(dg), "sha256:%s", de->d_name);
			if (json_object_get(used, dg)) {
				continue;
			}
			if (fstatat(bfd, de->d_name, &sst, AT_SYMLINK_NOFOLLOW) == 0 &&
			    unlinkat(bfd, de->d_name, 0) == 0) {
				st.blobs++;
				st.bytes += (uint64_t)sst.st_size;
			}
		}
		if (d) {
			(void)closedir(d);
		}
	}
	r = 0;
	*ret = st;
out:
	image_cache_free(c);
	return r;
}
