/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_IMAGE_CACHE_H
#define TKBOX_IMAGE_CACHE_H

#include "buf.h"
#include "image/ref.h"

/*
 * The content-addressed image cache, <state>/images:
 *
 *   lock                     flock: shared while resolving, exclusive for rm/prune
 *   locks/<hex>              flock: one puller per image key at a time
 *   tmp/                     temp files and build dirs (removed by prune)
 *   blobs/sha256/<hex>       manifests, configs and layers, verified before rename
 *   refs/<hex>.json          a reference + platform -> manifest, config digest and root key
 *   roots.v2/<keyhex>/       rootfs.ext4 and image.json, renamed into place whole
 *
 * A root key (image_cache_root_key) names what a root was built from: the
 * config digest and each layer blob digest in order. The old layout
 * (roots/<config hex>, a key that the layers did not enter) is never read;
 * prune removes it.
 *
 * Every file appears under its final name by rename(2) from tmp/ after it is
 * complete (and, for blobs, after its digest matched), so a crash mid-pull
 * never leaves a partial blob or ext4 where a reader would use it.
 */

#define IMAGE_CACHE_REF_MAX ((size_t)64 << 10) /* a refs/ record */
#define IMAGE_CACHE_ROOTS "roots.v2"

/*
 * "sha256:<hex>" of "tkbox.root.v2\nconfig <digest>\nlayer <digest>\n...":
 * the same blobs give the same key; a different config, layer, layer order
 * or count gives another. -EINVAL on an invalid digest.
 */
_wur_ int image_cache_root_key(const char *config, const char *const *layers, size_t n_layers,
			       char ret[IMAGE_DIGEST_LEN + 1]);

struct image_cache {
	int dirfd; /* <state>/images */
	char *root; /* its path */
	int lockfd; /* holds the shared or exclusive flock on "lock" */
};

_wur_ int image_cache_open(const char *state_dir, bool exclusive, struct image_cache **ret);
void image_cache_free(struct image_cache *c);

/* "blobs/sha256/<hex>" for a valid digest; new string. */
_wur_ int image_cache_blob_relpath(const char *digest, char **ret);
bool image_cache_has_blob(struct image_cache *c, const char *digest);
/* Open a blob read-only. */
_wur_ int image_cache_blob_open(struct image_cache *c, const char *digest);
/* Read a whole blob (at most max bytes, -E2BIG past it) and check it against its digest again (-EBADMSG). */
_wur_ int image_cache_read_blob(struct image_cache *c, const char *digest, size_t max, struct buf **ret);

/* Writes a blob into tmp/ while hashing it; commit renames it into blobs/ only when the digest matches. */
struct blob_writer {
	struct image_cache *cache;
	int fd;
	char *tmpname; /* relative to the cache dir */
	struct sha256_ctx *sha;
	uint64_t written;
	uint64_t max;
	char expect[IMAGE_DIGEST_LEN + 1]; /* empty: content-addressed by what was written */
	char digest[IMAGE_DIGEST_LEN + 1]; /* after commit */
	bool existed; /* after commit: the cache held this blob already */
};
/* expect may be NULL (the digest is whatever was written). max: -E2BIG when more is written. */
_wur_ int blob_writer_begin(struct blob_writer *w, struct image_cache *c, const char *expect, uint64_t max);
_wur_ int blob_writer_write(struct blob_writer *w, const void *p, size_t n);
/* -EBADMSG on a digest mismatch (the temp file is removed). Fills w->digest. */
_wur_ int blob_writer_commit(struct blob_writer *w);
/* Drop an unfinished blob; safe after commit and on a zeroed writer. */
void blob_writer_abort(struct blob_writer *w);

/* Exclusive flock on locks/<sha256(key)>; returns the fd holding it. */
_wur_ int image_cache_lock_key(struct image_cache *c, const char *key);

/* refs/: key is "<canonical ref>|<platform>". -ENOENT when not recorded. */
struct image_cache_ref {
	char manifest[IMAGE_DIGEST_LEN + 1];
	char config[IMAGE_DIGEST_LEN + 1];
	char root[IMAGE_DIGEST_LEN + 1]; /* the root key; a record without one (old layout) is -EBADMSG */
};
_wur_ int image_cache_ref_get(struct image_cache *c, const char *ref, const char *platform,
			      struct image_cache_ref *ret);
_wur_ int image_cache_ref_put(struct image_cache *c, const char *ref, const char *platform,
			      const struct image_cache_ref *v);

/* Write data to rel atomically (tmp/ then rename). */
_wur_ int image_cache_write_file(struct image_cache *c, const char *rel, const void *p, size_t n);
/* A fresh empty directory under tmp/; returns its relative path. */
_wur_ int image_cache_mkdtemp(struct image_cache *c, char **ret_rel);

#endif
