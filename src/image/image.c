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

static int read_fd_all(int fd, size_t max, struct buf **ret)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r = buf_new(max, 0, &b);
	if (r < 0) {
		return r;
	}
	r = io_read_all(fd, b);
	if (r < 0) {
		return r;
	}
	*ret = steal_ptr(b);
	return 0;
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
	if ((r = read_fd_all(fd, IMAGE_MAX_IMAGE_JSON, &b)) < 0 ||
	    (r = json_parse_strict(buf_ptr(b), buf_len(b), &jo, &root)) < 0) {
		return r;
	}
	if (json_get_string(root, "schema", &schema) < 0 || strcmp(schema, "tkbox.image.v1") != 0 ||
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
	struct image_manifest m; /* kind IMAGE */
	struct image_config cfg;
	bool fetched;
};

static bool meta_cb(void *ud, const char *rel, struct flatten_meta *ret)
{
	return flatten_meta_get(ud, rel, ret);
}

static int root_relpath(const char *config, const char *file, char **ret)
{
	if (asprintf(ret, "roots/%s%s%s", config + 7, file ? "/" : "", file ? file : "") < 0) {
		return -ENOMEM;
	}
	return 0;
}

static bool root_exists(struct image_cache *c, const char *config)
{
	_cleanup_free_ char *rel = NULL;
	struct stat st;
	return root_relpath(config, "image.json", &rel) == 0 && fstatat(c->dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       S_ISREG(st.st_mode);
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
	o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:O, s:O, s:s?, s:s?, s:s, s:I}", "schema", "tkbox.image.v1", "ref",
		      b->canonical, "platform", b->platform, "manifest", b->manifest_digest, "config",
		      b->m.config.digest, "layers", layers, "env", env, "working_dir", b->cfg.working_dir, "user",
		      b->cfg.user, "rootfs", "rootfs.ext4", "rootfs_bytes", (json_int_t)rootfs_bytes);
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
		r = flatten_layer_fd(f, lfd, diag);
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
	r = root_relpath(b->m.config.digest, NULL, &finalrel);
	if (r < 0) {
		goto out;
	}
	if (renameat(b->cache->dirfd, tmprel, b->cache->dirfd, finalrel) < 0) {
		r = negative_errno();
		if (r == -EEXIST || r == -ENOTEMPTY) {
			r = 0; /* another builder finished the same config first: theirs is identical */
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

	if (!root_exists(b->cache, b->m.config.digest)) {
		r = image_cache_read_blob(b->cache, b->m.config.digest, IMAGE_MAX_CONFIG_BYTES, &cb);
		if (r < 0) {
			image_diag_set(diag, "image config %s: %s", b->m.config.digest, tk_strerror(r));
			return r;
		}
		r = image_config_parse(buf_ptr(cb), buf_len(cb), &b->cfg);
		if (r < 0) {
			image_diag_set(diag, "image config %s: %s", b->m.config.digest, tk_strerror(r));
			return r;
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
	r = image_cache_ref_put(b->cache, b->canonical, b->platform, &rec);
	if (r < 0) {
		return r;
	}
	if (root_relpath(b->m.config.digest, "image.json", &json_rel) < 0 ||
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
	r = image_manifest_parse(buf_ptr(body), buf_len(body), ctype, &top);
	if (r < 0) {
		image_diag_set(diag, "manifest of %s: %s", b->canonical, tk_strerror(r));
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
		r = image_manifest_parse(buf_ptr(body), buf_len(body), ctype, &b->m);
		if (r >= 0 && b->m.kind != IMAGE_MANIFEST_IMAGE) {
			r = -EBADMSG; /* an index inside an index from a registry: not followed */
		}
		if (r < 0) {
			image_diag_set(diag, "manifest %s: %s", sub, tk_strerror(r));
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
	if (!root_exists(b->cache, b->m.config.digest)) {
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

static int import_fd(struct image_cache *c, int fd, const char *expect, uint64_t max, char ret[IMAGE_DIGEST_LEN + 1])
{
	struct blob_writer w;
	int r = blob_writer_begin(&w, c, expect, max);
	if (r < 0) {
		return r;
	}
	for (;;) {
		uint8_t tmp[65536];
		ssize_t n = RETRY_EINTR(read(fd, tmp, sizeof(tmp)));
		if (n < 0) {
			r = negative_errno();
			break;
		}
		if (n == 0) {
			r = blob_writer_commit(&w);
			break;
		}
		r = blob_writer_write(&w, tmp, (size_t)n);
		if (r < 0) {
			break;
		}
	}
	if (r >= 0 && ret) {
		memcpy(ret, w.digest, IMAGE_DIGEST_LEN + 1);
	}
	blob_writer_abort(&w);
	return r;
}

static int import_archive_entry(struct image_cache *c, struct archive *a, const char *expect, uint64_t max,
				char ret[IMAGE_DIGEST_LEN + 1])
{
	struct blob_writer w;
	int r = blob_writer_begin(&w, c, expect, max);
	if (r < 0) {
		return r;
	}
	for (;;) {
		uint8_t tmp[65536];
		la_ssize_t n = archive_read_data(a, tmp, sizeof(tmp));
		if (n < 0) {
			r = -EBADMSG;
			break;
		}
		if (n == 0) {
			r = blob_writer_commit(&w);
			break;
		}
		r = blob_writer_write(&w, tmp, (size_t)n);
		if (r < 0) {
			break;
		}
	}
	if (r >= 0) {
		memcpy(ret, w.digest, IMAGE_DIGEST_LEN + 1);
	}
	blob_writer_abort(&w);
	return r;
}

/* A name -> digest table of what a local archive held (small: one image). */
struct arc_file {
	char *name;
	char *link; /* symlink target resolved to an archive path, or NULL */
	char digest[IMAGE_DIGEST_LEN + 1];
};
struct arc {
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

static const char *arc_lookup(const struct arc *x, const char *name)
{
	for (unsigned hops = 0; hops < 8; hops++) {
		const struct arc_file *f = NULL;
		for (size_t i = 0; i < x->n; i++) {
			if (strcmp(x->v[i].name, name) == 0) {
				f = &x->v[i];
			}
		}
		if (!f) {
			return NULL;
		}
		if (!f->link) {
			return f->digest;
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

static int read_archive(struct image_cache *c, const char *path, struct arc *x, struct image_diag *diag)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	int r = 0;

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
	for (;;) {
		int ar = archive_read_next_header(a, &e);
		_cleanup_free_ char *name = NULL;
		struct arc_file *nv;
		if (ar == ARCHIVE_EOF) {
			break;
		}
		if (ar != ARCHIVE_OK && ar != ARCHIVE_WARN) {
			image_diag_set(diag, "unreadable archive: %s",
				       archive_error_string(a) ? archive_error_string(a) : "?");
			r = -EBADMSG;
			break;
		}
		name = strip_dot(archive_entry_pathname(e) ? archive_entry_pathname(e) : "");
		if (!name) {
			r = -ENOMEM;
			break;
		}
		if (archive_entry_filetype(e) != AE_IFREG && archive_entry_filetype(e) != AE_IFLNK) {
			continue;
		}
		if (x->n >= IMAGE_MAX_ARCHIVE_FILES) {
			image_diag_set(diag, "archive holds more than %d files", IMAGE_MAX_ARCHIVE_FILES);
			r = -E2BIG;
			break;
		}
		if (archive_entry_filetype(e) == AE_IFREG &&
		    (strcmp(name, "index.json") == 0 || strcmp(name, "manifest.json") == 0)) {
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
		x->v[x->n] = (struct arc_file){ 0 };
		if (archive_entry_filetype(e) == AE_IFLNK) {
			x->v[x->n].link = resolve_link(name, archive_entry_symlink(e) ? archive_entry_symlink(e) : "/");
			if (!x->v[x->n].link) {
				continue; /* a link out of the archive: never used */
			}
		} else {
			/* blobs/sha256/<hex> must hash to <hex>; other files are content-addressed as read */
			char expect[IMAGE_DIGEST_LEN + 8];
			bool named = strncmp(name, "blobs/sha256/", 13) == 0;
			(void)snprintf(expect, sizeof(expect), "sha256:%s", named ? name + 13 : "");
			if (named && !image_digest_valid(expect)) {
				named = false;
			}
			r = import_archive_entry(c, a, named ? expect : NULL, (uint64_t)IMAGE_MAX_BLOB_SIZE,
						 x->v[x->n].digest);
			if (r < 0) {
				char q[LOG_QUOTE_BUFSIZE];
				image_diag_set(diag, "archive member %s: %s", log_quote(name, strlen(name), q),
					       r == -EBADMSG ? "does not match its digest" : tk_strerror(r));
				break;
			}
		}
		x->v[x->n].name = steal_ptr(name);
		x->n++;
	}
	archive_read_free(a);
	return r;
}

/* Pick a manifest from an OCI layout index (following nested indexes) and load it into b->m. */
static int select_from_index(struct build *b, const struct buf *index, const char *name, int layoutfd)
{
	struct image_diag *diag = b->o->diag;
	_cleanup_free_ char *os = NULL, *arch = NULL, *variant = NULL;
	struct image_manifest idx = { 0 };
	_cleanup_buf_ struct buf *doc = NULL;
	char digest[IMAGE_DIGEST_LEN + 1];
	size_t pick = 0;
	int r;

	r = image_platform_parse(b->platform, &os, &arch, &variant);
	if (r < 0) {
		return r;
	}
	r = image_manifest_parse(buf_ptr(index), buf_len(index), MT_OCI_INDEX, &idx);
	if (r < 0 || idx.kind != IMAGE_MANIFEST_INDEX) {
		image_diag_set(diag, "index.json: %s", tk_strerror(r < 0 ? r : -EBADMSG));
		image_manifest_release(&idx);
		return r < 0 ? r : -EBADMSG;
	}
	for (unsigned depth = 0;; depth++) {
		bool found = false;
		if (depth > 4 || idx.n_manifests == 0) {
			image_diag_set(diag, "no usable manifest in the OCI layout");
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
				image_diag_set(diag, "no image named %s in the OCI layout", name);
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
		if (layoutfd >= 0 && !image_cache_has_blob(b->cache, digest)) {
			_cleanup_free_ char *rel = NULL;
			_cleanup_close_ int fd = -1;
			if ((r = image_cache_blob_relpath(digest, &rel)) < 0) {
				break;
			}
			fd = openat(layoutfd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
			r = fd < 0 ? negative_errno() : import_fd(b->cache, fd, digest, IMAGE_MAX_MANIFEST_BYTES, NULL);
			if (r < 0) {
				image_diag_set(diag, "manifest %s: %s", digest, tk_strerror(r));
				break;
			}
		}
		buf_free(doc);
		doc = NULL;
		r = image_cache_read_blob(b->cache, digest, IMAGE_MAX_MANIFEST_BYTES, &doc);
		if (r < 0) {
			image_diag_set(diag, "manifest %s: %s", digest, r == -ENOENT ? "missing" : tk_strerror(r));
			break;
		}
		image_manifest_release(&idx);
		r = image_manifest_parse(buf_ptr(doc), buf_len(doc), NULL, &idx);
		if (r < 0) {
			image_diag_set(diag, "manifest %s: %s", digest, tk_strerror(r));
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
	all[n++] = &b->m.config;
	for (size_t i = 0; i < b->m.n_layers; i++) {
		all[n++] = &b->m.layers[i];
	}
	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ char *rel = NULL;
		_cleanup_close_ int fd = -1;
		int r;
		if (image_cache_has_blob(b->cache, all[i]->digest)) {
			continue;
		}
		if ((r = image_cache_blob_relpath(all[i]->digest, &rel)) < 0) {
			return r;
		}
		fd = openat(layoutfd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		r = fd < 0 ? negative_errno() : import_fd(b->cache, fd, all[i]->digest, (uint64_t)all[i]->size, NULL);
		if (r < 0) {
			image_diag_set(b->o->diag, "blob %s: %s", all[i]->digest,
				       r == -EBADMSG ? "does not match its digest" : tk_strerror(r));
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
	r = read_fd_all(ifd, IMAGE_MAX_LOCAL_META, &index);
	if (r < 0) {
		return r;
	}
	r = select_from_index(b, index, ref->name, dfd);
	if (r < 0) {
		return r;
	}
	return import_layout_blobs(b, dfd);
}

static int check_local_blobs(struct build *b)
{
	if (!image_cache_has_blob(b->cache, b->m.config.digest)) {
		image_diag_set(b->o->diag, "the archive lacks the config blob %s", b->m.config.digest);
		return -ENOENT;
	}
	for (size_t i = 0; i < b->m.n_layers; i++) {
		if (!image_cache_has_blob(b->cache, b->m.layers[i].digest)) {
			image_diag_set(b->o->diag, "the archive lacks layer %s", b->m.layers[i].digest);
			return -ENOENT;
		}
	}
	return 0;
}

static int resolve_oci_archive(struct build *b, const struct image_ref *ref)
{
	struct arc x = { 0 };
	int r = read_archive(b->cache, ref->path, &x, b->o->diag);
	if (r >= 0 && !x.index_json) {
		image_diag_set(b->o->diag, "oci-archive: no index.json in the archive");
		r = -ENOENT;
	}
	if (r >= 0) {
		r = select_from_index(b, x.index_json, ref->name, -1);
	}
	if (r >= 0) {
		r = check_local_blobs(b);
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
	json_t *img, *layers;
	const char *cfgname, *d;
	int r = read_archive(b->cache, ref->path, &x, diag);

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
	d = arc_lookup(&x, cfgname);
	if (!d) {
		image_diag_set(diag, "docker-archive: config file missing from the archive");
		r = -ENOENT;
		goto out;
	}
	b->m.kind = IMAGE_MANIFEST_IMAGE;
	memcpy(b->m.config.digest, d, IMAGE_DIGEST_LEN + 1);
	b->m.layers = calloc(json_array_size(layers) + 1, sizeof(*b->m.layers));
	if (!b->m.layers) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < json_array_size(layers); i++) {
		const char *ln = json_string_value(json_array_get(layers, i));
		const char *ld = ln ? arc_lookup(&x, ln) : NULL;
		if (!ld) {
			image_diag_set(diag, "docker-archive: layer %zu missing from the archive", i + 1);
			r = -ENOENT;
			goto out;
		}
		memcpy(b->m.layers[i].digest, ld, IMAGE_DIGEST_LEN + 1);
		b->m.n_layers = i + 1;
	}
	/* no registry manifest exists: the config digest identifies the image */
	memcpy(b->manifest_digest, b->m.config.digest, IMAGE_DIGEST_LEN + 1);
	r = check_local_blobs(b);
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
		if (image_cache_ref_get(cache, canonical, b.platform, &rec) == 0 && root_exists(cache, rec.config)) {
			_cleanup_free_ char *rel = NULL, *path = NULL;
			if (root_relpath(rec.config, "image.json", &rel) < 0 ||
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
out:
	image_manifest_release(&b.m);
	image_config_release(&b.cfg);
	image_cache_free(cache);
	image_ref_release(&ref);
	return r;
}

#define IMAGE_EXEC_MAX_OUTPUT ((size_t)1 << 20)

int image_resolve_exec(const char *exe, const struct image_opts *o, const char *ref, struct image_result *ret)
{
	static const char *const pass[] = { "HOME",	   "SSL_CERT_FILE", "SSL_CERT_DIR", "https_proxy",
					    "HTTPS_PROXY", "no_proxy",	    "NO_PROXY" };
	_cleanup_buf_ struct buf *out = NULL, *err = NULL;
	_cleanup_free_ char *json = NULL;
	char *argv[16], *envp[ARRAY_SIZE(pass) + 3];
	char *envs[ARRAY_SIZE(pass)] = { 0 };
	size_t na = 0, ne = 0;
	bool from_cache = false;
	int r;

	if (!exe || !o->state_dir || !ref) {
		return -EINVAL;
	}
	argv[na++] = (char *)exe;
	argv[na++] = "images";
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
	if ((r = buf_new(IMAGE_EXEC_MAX_OUTPUT, 0, &out)) < 0 || (r = buf_new(IMAGE_DIAG_MAX * 4, 0, &err)) < 0) {
		goto out;
	}
	r = image_run(argv, envp, NULL, out, err);
	if (r != 0) {
		/* the child printed "tkbox images resolve REF: reason" (already quoted and capped) */
		size_t n = buf_len(err);
		while (n > 0 && buf_ptr(err)[n - 1] == '\n') {
			n--;
		}
		{
			/* keep the reason: drop the child's "tkbox images VERB \"REF\": " prefix */
			const char *p = (const char *)buf_ptr(err), *m = p;
			while ((m = memmem(m, (size_t)(p + n - m), "\": ", 3)) && m > p && m[-1] == '\\') {
				m++;
			}
			if (m && n > 13 && strncmp(p, "tkbox images ", 13) == 0) {
				n -= (size_t)(m + 3 - p);
				p = m + 3;
			}
			image_diag_set(o->diag, "%.*s", (int)MIN(n, (size_t)IMAGE_DIAG_MAX - 1), p);
		}
		r = r < 0 ? r : -EIO;
		goto out;
	}
	for (const char *p = (const char *)buf_ptr(out), *end = p + buf_len(out); p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (n > 11 && strncmp(p, "image_json ", 11) == 0 && !json) {
			json = strndup(p + 11, n - 11);
		} else if (n == 14 && strncmp(p, "from_cache yes", 14) == 0) {
			from_cache = true;
		}
		p += n + 1;
	}
	if (!json) {
		image_diag_set(o->diag, "the image resolver named no image.json");
		r = -EPROTO;
		goto out;
	}
	r = image_result_load(json, ret);
	if (r >= 0) {
		ret->from_cache = from_cache;
	}
out:
	for (size_t i = 0; i < ARRAY_SIZE(envs); i++) {
		free(envs[i]);
	}
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
	r = read_fd_all(fd, IMAGE_CACHE_REF_MAX, &b);
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
	d = fdopendir(fcntl(rfd, F_DUPFD_CLOEXEC, 3));
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
	const char *ref, *plat, *cfg;
	struct image_entry *nv, e = { 0 };
	_cleanup_free_ char *rel = NULL;
	struct stat st;
	(void)file;
	if (json_get_string(j, "ref", &ref) < 0 || json_get_string(j, "platform", &plat) < 0 ||
	    json_get_string(j, "config", &cfg) < 0 || !image_digest_valid(cfg)) {
		return 0;
	}
	if (root_relpath(cfg, "rootfs.ext4", &rel) == 0 && fstatat(l->c->dirfd, rel, &st, 0) == 0) {
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
	const char *config;
	uint64_t n;
};

static int rm_ref_of_config(void *ud, const char *file, json_t *j)
{
	struct rm_ctx *x = ud;
	const char *cfg;
	_cleanup_free_ char *rel = NULL;
	if (json_get_string(j, "config", &cfg) < 0) {
		return 0;
	}
	if (x->config ? strcmp(cfg, x->config) == 0 : !root_exists(x->c, cfg)) {
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
	r = root_relpath(rec.config, NULL, &rel);
	if (r < 0) {
		goto out;
	}
	r = image_rm_rf_at(c->dirfd, rel);
	if (r < 0) {
		goto out;
	}
	x.c = c;
	x.config = rec.config;
	r = for_each_ref(c, rm_ref_of_config, &x);
out:
	image_cache_free(c);
	return r;
}

static int collect_used(struct image_cache *c, json_t *used)
{
	_cleanup_close_ int rfd = openat(c->dirfd, "roots", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d;
	struct dirent *de;
	if (rfd < 0) {
		return negative_errno();
	}
	d = fdopendir(fcntl(rfd, F_DUPFD_CLOEXEC, 3));
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
			if (fd < 0 || read_fd_all(fd, IMAGE_MAX_IMAGE_JSON, &b) < 0 ||
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
		d = tfd >= 0 ? fdopendir(fcntl(tfd, F_DUPFD_CLOEXEC, 3)) : NULL;
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
	x.c = c;
	r = for_each_ref(c, rm_ref_of_config, &x);
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
		d = bfd >= 0 ? fdopendir(fcntl(bfd, F_DUPFD_CLOEXEC, 3)) : NULL;
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
