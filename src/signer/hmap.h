/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_SIGNER_HMAP_H
#define TKBOX_SIGNER_HMAP_H

#include "macro.h"

/*
 * A string-keyed hash map of pointers (open addressing, linear probing,
 * grows at 50% load). Keys are not copied: each key must live as long as its
 * entry (the signer uses a string inside the value). No deletion: the
 * signer's state only grows until a reload clears it all.
 */

struct hmap {
	const char **keys;
	void **vals;
	size_t cap; /* power of two, or 0 */
	size_t n;
};

_wur_ int hmap_put(struct hmap *m, const char *key, void *val); /* -EEXIST when present */
void *hmap_get(const struct hmap *m, const char *key);
/* Drop the table (values untouched). */
void hmap_clear(struct hmap *m);
/* Iterate: for (size_t i = 0; i < m->cap; i++) if (m->keys[i]) ... */

#endif
