/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_IMAGE_EXT4_H
#define TKBOX_IMAGE_EXT4_H

#include "image/flatten.h"

/*
 * Build an ext4 image from a directory tree without root:
 *   1. `mkfs.ext4 -d TREE` copies the tree (contents, hardlinks, symlinks,
 *      modes and owners as they are on disk, mtimes);
 *   2. `debugfs -w -f SCRIPT` then sets uid, gid and mode on every inode
 *      where the wanted value (from meta) differs from the tree's (for a
 *      root-owned tree built as root this is only setuid/setgid/sticky
 *      bits and modes the builder widened; as non-root, every owner).
 * Paths go to debugfs double-quoted (a '"' doubled); names with control
 * characters, and names too long for one debugfs script line
 * (EXT4_DEBUGFS_MAX_LINE), are refused because debugfs reads its script line
 * by line. Each tool runs under a deadline (EXT4_TOOL_TIMEOUT_S).
 * The file system has no journal (it is mounted read-only) and no reserved
 * blocks; its size is the tree's plus a margin (EXT4_MIN_BYTES at least).
 */

#define EXT4_MIN_BYTES ((uint64_t)16 << 20)
#define EXT4_MAX_BYTES ((uint64_t)64 << 30)
/* Wall-clock deadline of each of mkfs.ext4 and debugfs; past it the tool is killed and the build refused. */
#define EXT4_TOOL_TIMEOUT_S 600
/*
 * debugfs reads its script with fgets into a char[BUFSIZ] (8192 with glibc):
 * a longer line is cut and its rest run as a second command. A line is
 * "sif " + the quoted path + " mode 0100644\n" (the reserve), so a name
 * whose quoted form does not leave room for it is refused.
 */
#define EXT4_DEBUGFS_MAX_LINE 8191
#define EXT4_DEBUGFS_CMD_RESERVE 32

/* Returns true and fills *ret when rel ("" root, "usr/bin/x") has a wanted owner/mode. */
typedef bool (*ext4_meta_fn)(void *userdata, const char *rel, struct flatten_meta *ret);

struct ext4_stats {
	uint64_t inodes;
	uint64_t bytes;
	uint64_t fixups;
	uint64_t image_bytes;
};

/* out must not exist; it is created, and removed again on failure. */
_wur_ int ext4_build(const char *tree, const char *out, const char *label, ext4_meta_fn meta, void *userdata,
		     struct ext4_stats *ret_stats, struct image_diag *diag);

#endif
