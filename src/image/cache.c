/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "banned.h"
#include "io.h"
#include "crypto.h"
#include "image/cache.h"
#include "json.h"

int image_cache_open(const char *state_dir, bool exclusive, struct image_cache **ret)
{
	struct image_cache *c;
	int sfd, r;
	static const char *const dirs[] = { "blobs/sha256", "refs", IMAGE_CACHE_ROOTS, "tmp", "locks" };

	if (!state_dir || !*state_dir) {
		return -EINVAL;
	}
	if (mkdir(state_dir, 0700) < 0 && errno != EEXIST) {
		return negative_errno();
	}
	/* O_PATH: a confined image child (SANDBOX_IMAGE_*) may not read the state directory, only images/ */
	sfd = open(state_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0) {
		return negative_errno();
	}
	if (mkdirat(sfd, "images", 0700) < 0 && errno != EEXIST) {
		r = negative_errno();
		(void)close(sfd);
		return r;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		(void)close(sfd);
		return -ENOMEM;
	}
	c->lockfd = -1;
	c->dirfd = openat(sfd, "images", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	(void)close(sfd);
	if (c->dirfd < 0) {
		r = negative_errno();
		goto fail;
	}
	if (asprintf(&c->root, "%s/images", state_dir) < 0) {
		c->root = NULL;
		r = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		r = io_mkdir_p(c->dirfd, dirs[i], 0700);
		if (r < 0) {
			goto fail;
		}
	}
	c->lockfd = openat(c->dirfd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (c->lockfd < 0) {
		r = negative_errno();
		goto fail;
	}
	if (RETRY_EINTR(flock(c->lockfd, exclusive ? LOCK_EX : LOCK_SH)) < 0) {
		r = negative_errno();
		goto fail;
	}
	*ret = c;
	return 0;
fail:
	image_cache_free(c);
	return r;
}

void image_cache_free(struct image_cache *c)
{
	if (!c) {
		return;
	}
	closep(&c->lockfd);
	closep(&c->dirfd);
	free(c->root);
	free(c);
}

int image_cache_blob_relpath(const char *digest, char **ret)
{
	if (!image_digest_valid(digest)) {
		return -EINVAL;
	}
	if (asprintf(ret, "blobs/sha256/%s", digest + 7) < 0) {
		return -ENOMEM;
	}
	return 0;
}

bool image_cache_has_blob(struct image_cache *c, const char *digest)
{
	_cleanup_free_ char *rel = NULL;
	struct stat st;
	if (image_cache_blob_relpath(digest, &rel) < 0) {
		return false;
	}
	return fstatat(c->dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

int image_cache_blob_open(struct image_cache *c, const char *digest)
{
	_cleanup_free_ char *rel = NULL;
	int r = image_cache_blob_relpath(digest, &rel), fd;
	if (r < 0) {
		return r;
	}
	fd = openat(c->dirfd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? negative_errno() : fd;
}

static int digest_string(const uint8_t md[SHA256_LEN], char out[IMAGE_DIGEST_LEN + 1])
{
	memcpy(out, "sha256:", 7);
	sha256_digest_hex(md, out + 7);
	return 0;
}

int image_cache_read_blob(struct image_cache *c, const char *digest, size_t max, struct buf **ret)
{
	_cleanup_close_ int fd = image_cache_blob_open(c, digest);
	_cleanup_buf_ struct buf *b = NULL;
	uint8_t md[SHA256_LEN];
	char got[IMAGE_DIGEST_LEN + 1];
	int r;

	if (fd < 0) {
		return fd;
	}
	r = io_read_all_new(fd, max, 0, &b);
	if (r < 0) {
		return r;
	}
	r = sha256(buf_ptr(b), buf_len(b), md);
	if (r < 0) {
		return r;
	}
	r = digest_string(md, got);
	if (r < 0) {
		return r;
	}
	if (strcmp(got, digest) != 0) {
		return -EBADMSG;
	}
	*ret = steal_ptr(b);
	return 0;
}

static int tmp_name(const char *prefix, char **ret)
{
	uint8_t rnd[12];
	struct buf b;
	int r = crypto_random(rnd, sizeof(rnd));
	if (r < 0) {
		return r;
	}
	r = buf_init(&b, 64, 0);
	if (r < 0) {
		return r;
	}
	r = hex_encode(rnd, sizeof(rnd), &b);
	if (r >= 0 && asprintf(ret, "tmp/%s-%.*s", prefix, (int)buf_len(&b), (const char *)buf_ptr(&b)) < 0) {
		r = -ENOMEM;
	}
	buf_release(&b);
	return r < 0 ? r : 0;
}

int blob_writer_begin(struct blob_writer *w, struct image_cache *c, const char *expect, uint64_t max)
{
	int r;
	*w = (struct blob_writer){ .cache = c, .fd = -1, .max = max };
	if (expect) {
		if (!image_digest_valid(expect)) {
			return -EINVAL;
		}
		memcpy(w->expect, expect, IMAGE_DIGEST_LEN + 1);
	}
	r = sha256_new(&w->sha);
	if (r < 0) {
		return r;
	}
	r = tmp_name("blob", &w->tmpname);
	if (r < 0) {
		blob_writer_abort(w);
		return r;
	}
	w->fd = openat(c->dirfd, w->tmpname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (w->fd < 0) {
		r = negative_errno();
		free(w->tmpname);
		w->tmpname = NULL;
		blob_writer_abort(w);
		return r;
	}
	return 0;
}

int blob_writer_write(struct blob_writer *w, const void *p, size_t n)
{
	const uint8_t *q = p;
	int r;
	if (n > w->max || w->written > w->max - n) {
		return -E2BIG;
	}
	r = sha256_update(w->sha, p, n);
	if (r < 0) {
		return r;
	}
	while (n > 0) {
		ssize_t k = RETRY_EINTR(write(w->fd, q, n));
		if (k < 0) {
			return negative_errno();
		}
		q += k;
		n -= (size_t)k;
		w->written += (uint64_t)k;
	}
	return 0;
}

int blob_writer_commit(struct blob_writer *w)
{
	uint8_t md[SHA256_LEN];
	_cleanup_free_ char *rel = NULL;
	int r = sha256_final(w->sha, md);
	if (r < 0) {
		goto fail;
	}
	r = digest_string(md, w->digest);
	if (r < 0) {
		goto fail;
	}
	if (w->expect[0] && strcmp(w->expect, w->digest) != 0) {
		r = -EBADMSG;
		goto fail;
	}
	if (fsync(w->fd) < 0) {
		r = negative_errno();
		goto fail;
	}
	r = image_cache_blob_relpath(w->digest, &rel);
	if (r < 0) {
		goto fail;
	}
	{
		struct stat st;
		w->existed = fstatat(w->cache->dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0;
	}
	/* same digest, same bytes: replacing a blob another puller just wrote is harmless */
	if (renameat(w->cache->dirfd, w->tmpname, w->cache->dirfd, rel) < 0) {
		r = negative_errno();
		goto fail;
	}
	free(w->tmpname);
	w->tmpname = NULL;
	closep(&w->fd);
	w->fd = -1;
	sha256_free(w->sha);
	w->sha = NULL;
	return 0;
fail:
	w->digest[0] = '\0';
	blob_writer_abort(w);
	return r;
}

void blob_writer_abort(struct blob_writer *w)
{
	if (w->fd >= 0) {
		(void)close(w->fd);
		w->fd = -1;
	}
	if (w->tmpname && w->cache) {
		(void)unlinkat(w->cache->dirfd, w->tmpname, 0);
	}
	free(w->tmpname);
	w->tmpname = NULL;
	sha256_free(w->sha);
	w->sha = NULL;
}

static int key_hex(const char *a, const char *b, char out[2 * SHA256_LEN + 1])
{
	_cleanup_free_ char *k = NULL;
	uint8_t md[SHA256_LEN];
	char d[IMAGE_DIGEST_LEN + 1];
	int r;
	if (asprintf(&k, "%s|%s", a, b ? b : "") < 0) {
		return -ENOMEM;
	}
	r = sha256(k, strlen(k), md);
	if (r < 0) {
		return r;
	}
	r = digest_string(md, d);
	if (r < 0) {
		return r;
	}
	memcpy(out, d + 7, 2 * SHA256_LEN + 1);
	return 0;
}

int image_cache_lock_key(struct image_cache *c, const char *key)
{
	char hex[2 * SHA256_LEN + 1];
	_cleanup_free_ char *rel = NULL;
	int fd, r = key_hex(key, NULL, hex);
	if (r < 0) {
		return r;
	}
	if (asprintf(&rel, "locks/%s", hex) < 0) {
		return -ENOMEM;
	}
	fd = openat(c->dirfd, rel, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		return negative_errno();
	}
	if (RETRY_EINTR(flock(fd, LOCK_EX)) < 0) {
		r = negative_errno();
		(void)close(fd);
		return r;
	}
	return fd;
}

int image_cache_write_file(struct image_cache *c, const char *rel, const void *p, size_t n)
{
	_cleanup_free_ char *tmp = NULL;
	_cleanup_close_ int fd = -1;
	const uint8_t *q = p;
	int r = tmp_name("file", &tmp);
	if (r < 0) {
		return r;
	}
	fd = openat(c->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		return negative_errno();
	}
	while (n > 0) {
		ssize_t k = RETRY_EINTR(write(fd, q, n));
		if (k < 0) {
			r = negative_errno();
			(void)unlinkat(c->dirfd, tmp, 0);
			return r;
		}
		q += k;
		n -= (size_t)k;
	}
	if (fsync(fd) < 0 || renameat(c->dirfd, tmp, c->dirfd, rel) < 0) {
		r = negative_errno();
		(void)unlinkat(c->dirfd, tmp, 0);
		return r;
	}
	return 0;
}

int image_cache_mkdtemp(struct image_cache *c, char **ret_rel)
{
	char *rel = NULL;
	int r = tmp_name("dir", &rel);
	if (r < 0) {
		return r;
	}
	if (mkdirat(c->dirfd, rel, 0700) < 0) {
		r = negative_errno();
		free(rel);
		return r;
	}
	*ret_rel = rel;
	return 0;
}

int image_cache_ref_get(struct image_cache *c, const char *ref, const char *platform, struct image_cache_ref *ret)
{
	char hex[2 * SHA256_LEN + 1];
	_cleanup_free_ char *rel = NULL;
	_cleanup_close_ int fd = -1;
	_cleanup_json_ json_t *root = NULL;
	const struct json_opts jo = { .max_bytes = IMAGE_CACHE_REF_MAX, .max_depth = 4, .want_top = JSON_OBJECT };
	uint8_t data[IMAGE_CACHE_REF_MAX];
	size_t n = 0;
	const char *m, *cfg, *rr, *pp, *rootkey;
	struct image_cache_ref v;
	int r = key_hex(ref, platform, hex);

	if (r < 0) {
		return r;
	}
	if (asprintf(&rel, "refs/%s.json", hex) < 0) {
		return -ENOMEM;
	}
	fd = openat(c->dirfd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		return negative_errno();
	}
	for (;;) {
		ssize_t k = RETRY_EINTR(read(fd, data + n, sizeof(data) - n));
		if (k < 0) {
			return negative_errno();
		}
		if (k == 0) {
			break;
		}
		n += (size_t)k;
		if (n == sizeof(data)) {
			return -E2BIG;
		}
	}
	r = json_parse_strict(data, n, &jo, &root);
	if (r < 0) {
		return r;
	}
	if ((r = json_get_string(root, "manifest", &m)) < 0 || (r = json_get_string(root, "config", &cfg)) < 0 ||
	    (r = json_get_string(root, "ref", &rr)) < 0 || (r = json_get_string(root, "platform", &pp)) < 0 ||
	    (r = json_get_string(root, "root", &rootkey)) < 0) {
		return r == -ENOENT ? -EBADMSG : r;
	}
	if (!image_digest_valid(m) || !image_digest_valid(cfg) || !image_digest_valid(rootkey) ||
	    strcmp(rr, ref) != 0 || strcmp(pp, platform ? platform : "") != 0) {
		return -EBADMSG;
	}
	memcpy(v.manifest, m, sizeof(v.manifest));
	memcpy(v.config, cfg, sizeof(v.config));
	memcpy(v.root, rootkey, sizeof(v.root));
	*ret = v;
	return 0;
}

int image_cache_ref_put(struct image_cache *c, const char *ref, const char *platform, const struct image_cache_ref *v)
{
	char hex[2 * SHA256_LEN + 1];
	_cleanup_free_ char *rel = NULL, *text = NULL;
	_cleanup_json_ json_t *o = NULL;
	int r = key_hex(ref, platform, hex);
	if (r < 0) {
		return r;
	}
	if (asprintf(&rel, "refs/%s.json", hex) < 0) {
		return -ENOMEM;
	}
	if (!image_digest_valid(v->root)) {
		return -EINVAL;
	}
	o = json_pack("{s:s, s:s, s:s, s:s, s:s}", "ref", ref, "platform", platform ? platform : "", "manifest",
		      v->manifest, "config", v->config, "root", v->root);
	if (!o) {
		return -ENOMEM;
	}
	r = json_jcs_string(o, IMAGE_CACHE_REF_MAX, &text);
	if (r < 0) {
		return r;
	}
	return image_cache_write_file(c, rel, text, strlen(text));
}

int image_cache_root_key(const char *config, const char *const *layers, size_t n_layers, char ret[IMAGE_DIGEST_LEN + 1])
{
	struct sha256_ctx *sha = NULL;
	uint8_t md[SHA256_LEN];
	int r;

	if (!image_digest_valid(config)) {
		return -EINVAL;
	}
	for (size_t i = 0; i < n_layers; i++) {
		if (!image_digest_valid(layers[i])) {
			return -EINVAL;
		}
	}
	r = sha256_new(&sha);
	if (r < 0) {
		return r;
	}
	/* fixed-length digests, one per line: the encoding is unambiguous */
	r = sha256_update(sha, "tkbox.root.v2\nconfig ", 21);
	if (r >= 0) {
		r = sha256_update(sha, config, IMAGE_DIGEST_LEN);
	}
	for (size_t i = 0; r >= 0 && i < n_layers; i++) {
		r = sha256_update(sha, "\nlayer ", 7);
		if (r >= 0) {
			r = sha256_update(sha, layers[i], IMAGE_DIGEST_LEN);
		}
	}
	if (r >= 0) {
		r = sha256_update(sha, "\n", 1);
	}
	if (r >= 0) {
		r = sha256_final(sha, md);
	}
	sha256_free(sha);
	if (r < 0) {
		return r;
	}
	memcpy(ret, "sha256:", 7);
	sha256_digest_hex(md, ret + 7);
	return 0;
}
