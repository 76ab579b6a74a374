/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_IMAGE_REGISTRY_H
#define TKBOX_IMAGE_REGISTRY_H

#include "buf.h"
#include "image/cache.h"
#include "image/manifest.h"
#include "image/util.h"

/*
 * An OCI distribution client (pull only) on libcurl. HTTPS only; redirects
 * only to HTTPS (blob storage), where curl never forwards the Authorization
 * header to another host. Auth: anonymous, then what a 401 asks for: a
 * Bearer token from the challenge's realm (with the user's credentials when
 * an auth file names this registry) or Basic. Transient failures (connect,
 * timeout, 429, 5xx) are retried with exponential backoff.
 */

#define REGISTRY_RETRIES 4 /* attempts after the first */
#define REGISTRY_BACKOFF_MS 500 /* first wait, doubled each time */
#define REGISTRY_MAX_TOKEN_BYTES ((size_t)1 << 20) /* a token endpoint's JSON answer */
#define REGISTRY_MAX_AUTH_FILE ((size_t)1 << 20) /* --registry-auth FILE */
#define REGISTRY_MAX_CHALLENGE 4096 /* a WWW-Authenticate value */
#define REGISTRY_MAX_ERROR_BODY 4096 /* kept from an error answer for the message */

struct registry_opts {
	const char *auth_file; /* docker-style config.json, or NULL */
	const char *ca_file; /* PEM bundle that replaces the system CAs, or NULL */
	int progress_fd; /* >= 0: draw a progress line there */
	unsigned retries;
};

struct registry;

_wur_ int registry_new(const struct image_ref *ref, const struct registry_opts *o, struct registry **ret,
		       struct image_diag *diag);
void registry_free(struct registry *r);

/*
 * GET a manifest or index by tag or digest, at most IMAGE_MAX_MANIFEST_BYTES.
 * When reference is a digest the body must hash to it (-EBADMSG). ret_digest
 * receives the body's sha256 digest.
 */
_wur_ int registry_get_manifest(struct registry *r, const char *reference, struct buf **ret_body,
				char **ret_content_type, char ret_digest[IMAGE_DIGEST_LEN + 1],
				struct image_diag *diag);

/* Download a blob into the cache, verified against d->digest and d->size while it streams. */
_wur_ int registry_get_blob(struct registry *r, const struct image_descriptor *d, struct image_cache *c,
			    struct image_diag *diag);

/* For the progress line: which layer of how many is being fetched. */
void registry_set_progress_label(struct registry *r, unsigned layer, unsigned n_layers);

/* Pure parsers, exposed for tests and fuzzing. */
enum registry_scheme {
	REGISTRY_AUTH_BASIC = 1,
	REGISTRY_AUTH_BEARER = 2,
};
struct registry_challenge {
	enum registry_scheme scheme;
	char *realm;
	char *service;
	char *scope;
};
/* -EBADMSG malformed, -EPROTONOSUPPORT another scheme, -E2BIG past REGISTRY_MAX_CHALLENGE. */
_wur_ int registry_challenge_parse(const char *s, struct registry_challenge *ret);
void registry_challenge_release(struct registry_challenge *c);

/*
 * Find "user:password" for registry (host[:port] as in the reference) in a
 * docker config.json ("auths": {KEY: {"auth": base64} or {"username",
 * "password"}}). KEY may be the host, "https://host", "https://host/v1/" or
 * "https://host/v2/"; docker.io also matches "https://index.docker.io/v1/".
 * Credential helpers (credsStore, credHelpers) are not run. ret is a
 * BUF_SECRET buffer the caller frees. -ENOENT when no entry matches.
 */
_wur_ int registry_auth_lookup(const void *json, size_t n, const char *registry, struct buf **ret);

/* The token out of a token endpoint's answer ("token" or "access_token"). New string. */
_wur_ int registry_token_parse(const void *json, size_t n, char **ret);

#endif
