/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_IMAGE_MANIFEST_H
#define TKBOX_IMAGE_MANIFEST_H

#include "image/ref.h"
#include "image/util.h"
#include "vmm/boot-proto.h"

/*
 * OCI / docker v2 image indexes, manifests and configs: pure parsers over
 * json_parse_strict (no I/O, no logging). Errors: -EBADMSG malformed or an
 * unknown schema, -E2BIG past a cap, -EPROTONOSUPPORT a media type tkbox does
 * not handle (schema 1, foreign layers), -ENOMEM.
 */

#define IMAGE_MAX_MANIFEST_BYTES ((size_t)4 << 20) /* an index or manifest document */
#define IMAGE_MAX_CONFIG_BYTES ((size_t)8 << 20) /* an image config (history can be long) */
#define IMAGE_MAX_LAYERS 256 /* layers in one manifest */
#define IMAGE_MAX_INDEX_ENTRIES 1024 /* manifests in one index */
/*
 * Env entries in a config. A box boots with at most BOOT_MAX_ENV entries
 * (src/vmm/agent-proto.h), the image's first and then the daemon's defaults
 * and `tkbox run --env` (DOOR_MAX_ENV, 256): half of the boot budget goes to
 * the image, so an image that pulls always boots. Checked at pull time.
 */
#define IMAGE_MAX_ENV (BOOT_MAX_ENV / 2)
#define IMAGE_MAX_ENV_ENTRY 65536 /* bytes in one Env entry */
#define IMAGE_MAX_CONFIG_STRING 4096 /* bytes in WorkingDir or User */
#define IMAGE_MAX_BLOB_SIZE ((int64_t)16 << 30) /* one layer blob as the manifest declares it */
#define IMAGE_MAX_JSON_DEPTH 32

#define MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"

struct image_descriptor {
	char *media_type;
	char digest[IMAGE_DIGEST_LEN + 1];
	int64_t size;
	char *os; /* index entries: platform, or NULL */
	char *arch;
	char *variant;
	char *ref_name; /* OCI layout index: org.opencontainers.image.ref.name */
};

enum image_manifest_kind {
	IMAGE_MANIFEST_INDEX = 0,
	IMAGE_MANIFEST_IMAGE = 1,
};

struct image_manifest {
	enum image_manifest_kind kind;
	struct image_descriptor config; /* IMAGE */
	struct image_descriptor *layers; /* IMAGE */
	size_t n_layers;
	struct image_descriptor *manifests; /* INDEX */
	size_t n_manifests;
};

/*
 * content_type: the HTTP Content-Type when known, used when the document has
 * no mediaType; may be NULL. diag (may be NULL) gets the reason, naming the
 * member ("layers[2].size ...").
 */
_wur_ int image_manifest_parse(const void *p, size_t n, const char *content_type, struct image_manifest *ret,
			       struct image_diag *diag);
void image_manifest_release(struct image_manifest *m);

/*
 * Pick the entry of an index for os/arch (variant may be NULL: any; for
 * arm64 an entry without variant or with "v8" matches). -ENOENT when none.
 */
_wur_ int image_index_select(const struct image_manifest *idx, const char *os, const char *arch, const char *variant,
			     size_t *ret_i);

struct image_config {
	char **env;
	size_t n_env;
	char *working_dir; /* NULL when unset */
	char *user; /* NULL when unset */
	char *os;
	char *arch;
	char (*diff_ids)[IMAGE_DIGEST_LEN + 1]; /* rootfs.diff_ids: each layer's uncompressed digest, in order */
	size_t n_diff_ids;
};

/*
 * Refused with a reason naming the field in diag (may be NULL): a WorkingDir
 * that is not absolute or holds "." or "..", control characters in
 * WorkingDir, User or an Env entry, an Env entry that is not NAME=value, more
 * than IMAGE_MAX_ENV entries, a diff_id that is not a sha256 digest.
 */
_wur_ int image_config_parse(const void *p, size_t n, struct image_config *ret, struct image_diag *diag);
void image_config_release(struct image_config *c);

/* "linux/amd64", "linux/arm64", "linux/arm64/v8" -> parts (new strings). -EINVAL otherwise. */
_wur_ int image_platform_parse(const char *s, char **ret_os, char **ret_arch, char **ret_variant);

#endif
