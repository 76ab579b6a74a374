/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "hmap.h"

#include "banned.h"

static size_t hash_str(const char *s)
{
	/* FNV-1a: keys are ids the signer mostly chose itself; a flood is bounded by the frame and run caps. */
	size_t h = 1469598103934665603ULL;
	for (; *s; s++) {
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	}
	return h;
}

static int grow(struct hmap *m)
{
	size_t ncap = m->cap ? m->cap * 2 : 64;
	const char **nk = calloc(ncap, sizeof(*nk));
	void **nv = calloc(ncap, sizeof(*nv));

	if (!nk || !nv) {
		free(nk);
		free(nv);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++) {
		if (m->keys[i]) {
			size_t j = hash_str(m->keys[i]) & (ncap - 1);
			while (nk[j]) {
				j = (j + 1) & (ncap - 1);
			}
			nk[j] = m->keys[i];
			nv[j] = m->vals[i];
		}
	}
	free(m->keys);
	free(m->vals);
	m->keys = nk;
	m->vals = nv;
	m->cap = ncap;
	return 0;
}

int hmap_put(struct hmap *m, const char *key, void *val)
{
	size_t j;
	int r;

	if ((m->n + 1) * 2 > m->cap) {
		r = grow(m);
		if (r < 0) {
			return r;
		}
	}
	j = hash_str(key) & (m->cap - 1);
	while (m->keys[j]) {
		if (strcmp(m->keys[j], key) == 0) {
			return -EEXIST;
		}
		j = (j + 1) & (m->cap - 1);
	}
	m->keys[j] = key;
	m->vals[j] = val;
	m->n++;
	return 0;
}

void *hmap_get(const struct hmap *m, const char *key)
{
	size_t j;

	if (m->cap == 0) {
		return NULL;
	}
	j = hash_str(key) & (m->cap - 1);
	while (m->keys[j]) {
		if (strcmp(m->keys[j], key) == 0) {
			return m->vals[j];
		}
		j = (j + 1) & (m->cap - 1);
	}
	return NULL;
}

void hmap_clear(struct hmap *m)
{
	free(m->keys);
	free(m->vals);
	*m = (struct hmap){ 0 };
}
