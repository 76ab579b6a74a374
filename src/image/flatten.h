/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_IMAGE_FLATTEN_H
#define TKBOX_IMAGE_FLATTEN_H

#include <sys/types.h>

#include "image/ref.h"
#include "image/util.h"

/*
 * Apply OCI layers (tar, gzip or zstd; libarchive reads them) in order into a
 * directory, with whiteouts (.wh.NAME) and opaque directories (.wh..wh..opq).
 * The tree on disk is only a staging copy: files get safe modes (no setuid,
 * always owner-writable) and the caller's owner; the owner, group and mode
 * the layer asked for are kept in a side table (flatten_meta_get) that the
 * ext4 builder applies, so no root is needed at build time.
 *
 * Refused, with a message in diag: paths that are absolute (also "./" then
 * "/", as in ".//etc/x"), hold "..", cross a symlink (the layer's own or a
 * lower layer's), control characters in a name, hardlinks to outside or to a
 * directory, entries claiming more than max_entry_size, more than
 * max_entries entries, more than max_total_bytes, more than max_dir_entries
 * names created in one directory, a side table past max_path_bytes, and a
 * layer whose uncompressed stream does not hash to the diff_id given.
 * Device nodes, FIFOs and sockets are dropped. Extended attributes are not
 * copied.
 */

#define FLATTEN_MAX_ENTRIES 1000000 /* entries in all layers of one image */
#define FLATTEN_MAX_ENTRY_SIZE ((uint64_t)8 << 30) /* one file */
#define FLATTEN_MAX_TOTAL_BYTES ((uint64_t)32 << 30) /* file bytes written for one image */
/*
 * Names created in one directory. mkfs.ext4 -d takes time quadratic in the
 * size of one directory (measured: 4,096 files 1.5 s, 16,384 14 s, 65,536
 * 251 s; 1,000,000 would take hours); real images stay far below (a large
 * /usr/lib holds a few thousand).
 */
#define FLATTEN_MAX_DIR_ENTRIES 16384
/* Memory of the owner/mode side table: path bytes plus a fixed cost per node (64 bytes). */
#define FLATTEN_MAX_PATH_BYTES ((uint64_t)128 << 20)
/* Tar headers, padding and trailer allowed in one layer's uncompressed stream beyond the file bytes. */
#define FLATTEN_MAX_TAR_OVERHEAD ((uint64_t)1 << 30)

struct flatten_limits {
	uint64_t max_entries;
	uint64_t max_entry_size;
	uint64_t max_total_bytes;
	uint64_t max_dir_entries; /* 0: FLATTEN_MAX_DIR_ENTRIES */
	uint64_t max_path_bytes; /* 0: FLATTEN_MAX_PATH_BYTES */
};
#define FLATTEN_LIMITS_DEFAULT                                                                                         \
	((struct flatten_limits){ .max_entries = FLATTEN_MAX_ENTRIES,                                                  \
				  .max_entry_size = FLATTEN_MAX_ENTRY_SIZE,                                            \
				  .max_total_bytes = FLATTEN_MAX_TOTAL_BYTES,                                          \
				  .max_dir_entries = FLATTEN_MAX_DIR_ENTRIES,                                          \
				  .max_path_bytes = FLATTEN_MAX_PATH_BYTES })

struct flatten_meta {
	uint32_t uid;
	uint32_t gid;
	uint32_t mode; /* with the file type bits */
};

struct flatten;

/* rootfd: an empty directory (the fd is borrowed). lim NULL: defaults. */
_wur_ int flatten_new(int rootfd, const struct flatten_limits *lim, struct flatten **ret);
void flatten_free(struct flatten *f);

/*
 * Apply one layer read from fd (seekable: whiteouts are applied in a first
 * pass) or from memory. diff_id ("sha256:...", the image config's
 * rootfs.diff_ids entry) is checked against the uncompressed stream as it is
 * read, in the first pass before any entry of the layer is written and
 * again in the second; -EBADMSG on a mismatch. NULL: not checked (tests and
 * fuzzing only; image.c always passes one).
 */
_wur_ int flatten_layer_fd(struct flatten *f, int fd, const char *diff_id, struct image_diag *diag);
_wur_ int flatten_layer_mem(struct flatten *f, const void *p, size_t n, const char *diff_id, struct image_diag *diag);
/* The uncompressed digest of the last layer applied ("" before one). */
const char *flatten_last_diff_id(const struct flatten *f);

/* The owner and mode a layer asked for at rel ("" is the root). False when the path never appeared. */
bool flatten_meta_get(struct flatten *f, const char *rel, struct flatten_meta *ret);

/* Counters, for progress and tests. */
uint64_t flatten_entries(const struct flatten *f);
uint64_t flatten_bytes(const struct flatten *f);

#endif
