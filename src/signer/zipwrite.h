/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_SIGNER_ZIPWRITE_H
#define TKBOX_SIGNER_ZIPWRITE_H

#include "buf.h"

/*
 * A small ZIP writer for evidence bundles: DEFLATE entries (zlib, raw), no
 * ZIP64, no extra fields, a fixed DOS time (1980-01-01) so that the same
 * members always give the same bytes. The whole archive is built in a caller
 * struct buf, whose max_size bounds it.
 *
 * Names follow the bundle rules of Tracekit format v2 (the reader refuses
 * anything else): [A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9._-]+)*, no segment made
 * only of dots, no duplicates.
 */

#define ZIPWRITE_MAX_ENTRIES 10000
#define ZIPWRITE_MAX_ENTRY_SIZE ((size_t)64 << 20) /* 64 MiB */
#define ZIPWRITE_MAX_NAME 255

struct zipwrite {
	struct buf *out; /* the archive; not owned */
	struct buf cd; /* central directory, appended at finish */
	char **names;
	size_t n_entries;
	bool finished;
};

/* Start an archive in out (appended to). */
_wur_ int zipwrite_init(struct zipwrite *z, struct buf *out);
void zipwrite_release(struct zipwrite *z);

/* True when name is a valid bundle member name (pure). */
bool zipwrite_name_ok(const char *name);

/*
 * Add one member. -EINVAL for a bad name, -EEXIST for a duplicate, -E2BIG past
 * ZIPWRITE_MAX_ENTRIES / ZIPWRITE_MAX_ENTRY_SIZE / the output's max_size.
 */
_wur_ int zipwrite_add(struct zipwrite *z, const char *name, const void *p, size_t n);

/* Append the central directory and the end record. No member may be added after. */
_wur_ int zipwrite_finish(struct zipwrite *z);

#endif
