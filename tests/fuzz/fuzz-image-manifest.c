/* SPDX-License-Identifier: Apache-2.0 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "buf.h"
#include "image/manifest.h"
#include "image/ref.h"
#include "image/registry.h"

/*
 * The image parsers of registry and archive bytes: manifests and indexes
 * (with index platform selection), image configs, WWW-Authenticate
 * challenges, token answers, docker config.json auth entries and image
 * references. The first byte picks the content type hint.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const types[] = { NULL, MT_OCI_INDEX, MT_OCI_MANIFEST, MT_DOCKER_LIST, MT_DOCKER_MANIFEST };
	struct image_manifest m;
	struct image_config c;
	struct registry_challenge ch;
	struct image_diag diag = { .msg = "" };
	struct image_ref ref;
	struct buf *cred = NULL;
	char *s, *tok = NULL;
	size_t i;

	if (size == 0) {
		return 0;
	}
	if (image_manifest_parse(data + 1, size - 1, types[data[0] % ARRAY_SIZE(types)], &m, &diag) == 0) {
		if (m.kind == IMAGE_MANIFEST_INDEX) {
			(void)image_index_select(&m, "linux", "amd64", NULL, &i);
			(void)image_index_select(&m, "linux", "arm64", "v8", &i);
		}
		image_manifest_release(&m);
	}
	if (image_config_parse(data, size, &c, &diag) == 0) {
		image_config_release(&c);
	}
	if (registry_token_parse(data, size, &tok) == 0) {
		free(tok);
	}
	if (registry_auth_lookup(data, size, "localhost:5000", &cred) == 0) {
		buf_free(cred);
	}
	s = malloc(size + 1);
	if (!s) {
		return 0;
	}
	memcpy(s, data, size);
	s[size] = '\0';
	if (registry_challenge_parse(s, &ch) == 0) {
		registry_challenge_release(&ch);
	}
	if (image_ref_parse(s, &ref) == 0) {
		char *canon = NULL;
		if (image_ref_canonical(&ref, &canon) == 0) {
			free(canon);
		}
		image_ref_release(&ref);
	}
	free(s);
	return 0;
}
