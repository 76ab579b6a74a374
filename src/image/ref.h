/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_IMAGE_REF_H
#define TKBOX_IMAGE_REF_H

#include "macro.h"

/*
 * Image references as docker users write them, plus local sources. Pure
 * parser: no I/O, no logging.
 *
 *   python:3.12-slim            -> docker.io / library/python : 3.12-slim
 *   ghcr.io/owner/name:tag      -> ghcr.io / owner/name : tag
 *   localhost:5000/x@sha256:... -> localhost:5000 / x @ sha256:...
 *   name                        -> docker.io / library/name : latest
 *   oci:DIR[:NAME]              an OCI image layout directory (NAME: org.opencontainers.image.ref.name)
 *   oci-archive:FILE[:NAME]     a tar of an OCI image layout
 *   docker-archive:FILE         a tar as `docker save` writes it
 *
 * For local sources the optional ":NAME" is split off at the last ':' only
 * when what follows is a valid tag (no '/'); a path that itself ends in
 * ":word" must be written as "./path:word:NAME" or renamed.
 */

#define IMAGE_REF_MAX_LEN 1024 /* whole reference string */
#define IMAGE_REF_MAX_NAME 255 /* registry + repository, as docker */
#define IMAGE_REF_MAX_TAG 128
#define IMAGE_DIGEST_LEN 71 /* "sha256:" + 64 hex */

enum image_ref_kind {
	IMAGE_REF_REGISTRY = 0,
	IMAGE_REF_OCI_DIR = 1,
	IMAGE_REF_OCI_ARCHIVE = 2,
	IMAGE_REF_DOCKER_ARCHIVE = 3,
};

struct image_ref {
	enum image_ref_kind kind;
	char *registry; /* "docker.io", "ghcr.io", "localhost:5000" (registry kind) */
	char *repository; /* "library/python" */
	char *tag; /* NULL when the reference names only a digest */
	char *digest; /* "sha256:<64 lowercase hex>" or NULL */
	char *path; /* local kinds: the directory or file */
	char *name; /* local kinds: optional ref name, else NULL */
};

/* -EINVAL for a malformed reference, -ENAMETOOLONG past a length cap, -ENOMEM. */
_wur_ int image_ref_parse(const char *s, struct image_ref *ret);
void image_ref_release(struct image_ref *r);

/* "docker.io/library/python:3.12-slim", "...@sha256:..", "oci:/dir:name". New string. */
_wur_ int image_ref_canonical(const struct image_ref *r, char **ret);

/* The host[:port] to speak HTTPS to: docker.io is served by registry-1.docker.io. */
const char *image_ref_api_host(const struct image_ref *r);

/* True for "sha256:" followed by exactly 64 lowercase hex digits. */
bool image_digest_valid(const char *s);

#endif
