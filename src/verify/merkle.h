/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VERIFY_MERKLE_H
#define TKBOX_VERIFY_MERKLE_H

#include "macro.h"

/*
 * RFC 6962 / RFC 9162 Merkle tree hashing, as Tracekit format v2 uses it
 * (docs/format-v2.md section 5):
 *
 *   leaf hash  = SHA-256(0x00 || data)
 *   node hash  = SHA-256(0x01 || left || right)
 *   empty tree = SHA-256("")
 *
 * For the record log, a record's leaf DATA is the 32 raw bytes of its
 * "hash" (sha256 of JCS(event)), so its leaf hash is
 * merkle_leaf_hash(record_hash, 32). tkbox-signer and the verifier both go
 * through this file.
 *
 * API contract
 *   - Pure: no I/O, no logging, no globals. Return 0 / -errno.
 *   - Indices and sizes are uint64_t. A proof holds at most MERKLE_MAX_PROOF
 *     hashes (enough for any tree of fewer than 2^64 leaves); anything longer
 *     is refused with -E2BIG.
 *   - merkle_*_verify return 0 when the proof is valid and -EBADMSG when it is
 *     not (including index >= size, wrong length, m > n); never another
 *     success value.
 *   - struct merkle_tree is an append-only in-memory tree of LEAF HASHES that
 *     keeps every complete aligned subtree, so a root or a proof for any size
 *     <= count costs O(log n) hash lookups plus O(log n) hashing. It holds at
 *     most MERKLE_MAX_LEAVES leaves (-E2BIG past it). Memory: ~64 bytes per
 *     leaf.
 */

#define MERKLE_HASH_LEN 32
#define MERKLE_MAX_PROOF 64
#define MERKLE_MAX_LEAVES ((uint64_t)1 << 32)

struct merkle_proof {
	size_t len;
	uint8_t hash[MERKLE_MAX_PROOF][MERKLE_HASH_LEN];
};

_wur_ int merkle_leaf_hash(const void *data, size_t n, uint8_t ret[MERKLE_HASH_LEN]);
_wur_ int merkle_node_hash(const uint8_t left[MERKLE_HASH_LEN], const uint8_t right[MERKLE_HASH_LEN],
			   uint8_t ret[MERKLE_HASH_LEN]);
/* Root over n leaf hashes laid out contiguously (leaves + 32*i). n == 0 gives SHA-256(""). */
_wur_ int merkle_root(const uint8_t *leaves, uint64_t n, uint8_t ret[MERKLE_HASH_LEN]);

/* RFC 9162 section 2.1.3.2: verify that leaf (a leaf HASH) sits at index in a tree of size with root. */
_wur_ int merkle_inclusion_verify(uint64_t index, uint64_t size, const uint8_t leaf[MERKLE_HASH_LEN],
				  const struct merkle_proof *proof, const uint8_t root[MERKLE_HASH_LEN]);
/* RFC 9162 section 2.1.4.2: verify that the tree of size m (old_root) is a prefix of size n (new_root). */
_wur_ int merkle_consistency_verify(uint64_t m, uint64_t n, const uint8_t old_root[MERKLE_HASH_LEN],
				    const uint8_t new_root[MERKLE_HASH_LEN], const struct merkle_proof *proof);

struct merkle_tree;
_wur_ int merkle_tree_new(struct merkle_tree **ret);
void merkle_tree_free(struct merkle_tree *t);
static inline void merkle_tree_freep(struct merkle_tree **t)
{
	merkle_tree_free(*t);
}
#define _cleanup_merkle_tree_ _cleanup_(merkle_tree_freep)
/* Append a LEAF HASH (already merkle_leaf_hash'ed). */
_wur_ int merkle_tree_append(struct merkle_tree *t, const uint8_t leaf[MERKLE_HASH_LEN]);
uint64_t merkle_tree_size(const struct merkle_tree *t);
/* Root of the first size leaves (size <= merkle_tree_size, else -EINVAL). */
_wur_ int merkle_tree_root(const struct merkle_tree *t, uint64_t size, uint8_t ret[MERKLE_HASH_LEN]);
/* Inclusion proof of leaf index in the tree of the first size leaves (index < size <= count, else -EINVAL). */
_wur_ int merkle_tree_inclusion(const struct merkle_tree *t, uint64_t index, uint64_t size, struct merkle_proof *ret);
/* Lower the leaf cap of one tree (max <= MERKLE_MAX_LEAVES), so tests can go one past it. */
void merkle_tree_set_max_leaves(struct merkle_tree *t, uint64_t max);
/* Consistency proof from size m to size n (0 < m <= n <= count, else -EINVAL; m == n gives an empty proof). */
_wur_ int merkle_tree_consistency(const struct merkle_tree *t, uint64_t m, uint64_t n, struct merkle_proof *ret);

#endif
