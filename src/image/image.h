/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_IMAGE_IMAGE_H
#define TKBOX_IMAGE_IMAGE_H

#include "image/flatten.h"
#include "image/ref.h"
#include "image/util.h"

/*
 * Images for boxes: resolve a reference to a cached, read-only ext4 root
 * file system and the defaults its config names (Env, WorkingDir, User).
 *
 * Cache policy (see docs/images.md): a registry reference (tag or digest)
 * that was resolved before for the same platform is served from the cache
 * without any network access: tags are pinned to the digest recorded at
 * the first pull until `tkbox images pull REF` (opts.refresh) looks again.
 * Local sources (oci:, oci-archive:, docker-archive:) are read again each
 * time (offline), but their ext4 is reused when the root key matches.
 *
 * A root is keyed by what it was built from (image_cache_root_key: the
 * config digest and every layer blob digest, in order), and every layer's
 * uncompressed digest is checked against the config's rootfs.diff_ids while
 * it is flattened: a root is only ever found under the key of the blobs
 * that made it. Each root directory roots.v2/<key hex>/ holds rootfs.ext4 and
 * image.json:
 *   {"schema":"tkbox.image.v2","ref":..,"platform":..,"manifest":"sha256:..",
 *    "config":"sha256:..","root":"sha256:<key>","layers":["sha256:..",..],"env":[..],
 *    "working_dir":"/..."|null,"user":".."|null,"rootfs":"rootfs.ext4","rootfs_bytes":N}
 */

#define IMAGE_JSON_SCHEMA "tkbox.image.v2"
/* The blobs of one image (config and layers, as declared or as imported from a local source). */
#define IMAGE_MAX_IMAGE_BYTES ((uint64_t)32 << 30)
/* Wall-clock deadline of the `tkbox images` child image_answer_exec runs (a whole pull and build). */
#define IMAGE_RESOLVE_TIMEOUT_S 3600

#define IMAGE_DEFAULT_PLATFORM "linux/amd64"
#define IMAGE_MAX_IMAGE_JSON ((size_t)4 << 20)
#define IMAGE_MAX_LOCAL_META ((size_t)4 << 20) /* index.json / manifest.json in a local source */

struct image_opts {
	const char *state_dir; /* the cache is <state_dir>/images */
	const char *platform; /* NULL: linux/amd64; or linux/arm64 */
	const char *auth_file; /* --registry-auth: docker config.json */
	const char *ca_file; /* --registry-ca: PEM bundle */
	bool refresh; /* ask the registry again for a cached tag */
	int progress_fd; /* >= 0: progress line there (pass it only for a terminal) */
	const struct flatten_limits *limits; /* NULL: defaults */
	struct image_diag *diag; /* receives the reason of a failure; may be NULL */
};

struct image_result {
	char *ext4_path; /* <state>/images/roots.v2/<key hex>/rootfs.ext4 */
	char *json_path; /* its image.json */
	char *config_digest;
	char *manifest_digest;
	char **env;
	size_t n_env;
	char *working_dir; /* NULL: "/" */
	char *user; /* NULL: root */
	bool from_cache; /* no blob was fetched and no ext4 built */
};

_wur_ int image_resolve(const struct image_opts *o, const char *ref, struct image_result *ret);
void image_result_release(struct image_result *r);

/* Read an image.json (as the daemon does) into a result. */
_wur_ int image_result_load(const char *json_path, struct image_result *ret);

struct image_entry {
	char *ref;
	char *platform;
	char *config;
	uint64_t rootfs_bytes; /* 0 when the root is missing */
};
_wur_ int image_list(const char *state_dir, struct image_entry **ret, size_t *ret_n);
void image_list_free(struct image_entry *v, size_t n);

/* Remove the root a reference resolves to (and every reference to it). -ENOENT when not cached. */
_wur_ int image_remove(const char *state_dir, const char *ref, const char *platform, struct image_diag *diag);

struct image_prune_stats {
	uint64_t blobs;
	uint64_t bytes;
	uint64_t tmp;
	uint64_t refs;
};
/* Remove unreferenced blobs, stale refs and leftovers in tmp/ (waits for running pulls). */
_wur_ int image_prune(const char *state_dir, struct image_prune_stats *ret);

#endif
