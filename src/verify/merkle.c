/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "banned.h"
#include "crypto.h"
#include "verify/merkle.h"

/* Levels 0..63 of complete subtrees; a tree of fewer than 2^64 leaves never needs more. */
#define MERKLE_LEVELS 64

struct merkle_level {
	uint8_t *h; /* n hashes of 32 bytes */
	uint64_t n;
	uint64_t alloc;
};

struct merkle_tree {
	uint64_t count;
	uint64_t max_leaves;
	struct merkle_level level[MERKLE_LEVELS];
};

int merkle_leaf_hash(const void *data, size_t n, uint8_t ret[MERKLE_HASH_LEN])
{
	struct sha256_ctx *c = NULL;
	uint8_t prefix = 0x00;
	int r;

	r = sha256_new(&c);
	if (r < 0) {
		return r;
	}
	r = sha256_update(c, &prefix, 1);
	if (r >= 0) {
		r = sha256_update(c, data, n);
	}
	if (r >= 0) {
		r = sha256_final(c, ret);
	}
	sha256_free(c);
	return r < 0 ? r : 0;
}

int merkle_node_hash(const uint8_t left[MERKLE_HASH_LEN], const uint8_t right[MERKLE_HASH_LEN],
		     uint8_t ret[MERKLE_HASH_LEN])
{
	uint8_t m[1 + 2 * MERKLE_HASH_LEN];

	m[0] = 0x01;
	memcpy(m + 1, left, MERKLE_HASH_LEN);
	memcpy(m + 1 + MERKLE_HASH_LEN, right, MERKLE_HASH_LEN);
	return sha256(m, sizeof(m), ret) < 0 ? -EIO : 0;
}

/* Largest power of two strictly below n (n >= 2), the RFC 6962 split point. */
static uint64_t split_point(uint64_t n)
{
	uint64_t k = 1;

	while (k < n - k) {
		k <<= 1;
	}
	return k;
}

/* MTH over leaves[0..n) (n >= 1), recursively; depth is bounded by 64. */
static int root_of(const uint8_t *leaves, uint64_t n, uint8_t ret[MERKLE_HASH_LEN])
{
	uint8_t l[MERKLE_HASH_LEN], r[MERKLE_HASH_LEN];
	uint64_t k;
	int e;

	if (n == 1) {
		memcpy(ret, leaves, MERKLE_HASH_LEN);
		return 0;
	}
	k = split_point(n);
	e = root_of(leaves, k, l);
	if (e < 0) {
		return e;
	}
	e = root_of(leaves + k * MERKLE_HASH_LEN, n - k, r);
	if (e < 0) {
		return e;
	}
	return merkle_node_hash(l, r, ret);
}

int merkle_root(const uint8_t *leaves, uint64_t n, uint8_t ret[MERKLE_HASH_LEN])
{
	if (n == 0) {
		return sha256("", 0, ret) < 0 ? -EIO : 0;
	}
	if (!leaves || n > SIZE_MAX / MERKLE_HASH_LEN) {
		return -EINVAL;
	}
	return root_of(leaves, n, ret);
}

int merkle_inclusion_verify(uint64_t index, uint64_t size, const uint8_t leaf[MERKLE_HASH_LEN],
			    const struct merkle_proof *proof, const uint8_t root[MERKLE_HASH_LEN])
{
	uint8_t r[MERKLE_HASH_LEN];
	uint64_t fn, sn;

	if (!proof || proof->len > MERKLE_MAX_PROOF || index >= size) {
		return -EBADMSG;
	}
	fn = index;
	sn = size - 1;
	memcpy(r, leaf, MERKLE_HASH_LEN);
	for (size_t i = 0; i < proof->len; i++) {
		if (sn == 0) {
			return -EBADMSG;
		}
		if ((fn & 1) || fn == sn) {
			if (merkle_node_hash(proof->hash[i], r, r) < 0) {
				return -EIO;
			}
			if (!(fn & 1)) {
				while (fn != 0 && !(fn & 1)) {
					fn >>= 1;
					sn >>= 1;
				}
			}
		} else {
			if (merkle_node_hash(r, proof->hash[i], r) < 0) {
				return -EIO;
			}
		}
		fn >>= 1;
		sn >>= 1;
	}
	if (sn != 0 || !crypto_equal(r, root, MERKLE_HASH_LEN)) {
		return -EBADMSG;
	}
	return 0;
}

int merkle_consistency_verify(uint64_t m, uint64_t n, const uint8_t old_root[MERKLE_HASH_LEN],
			      const uint8_t new_root[MERKLE_HASH_LEN], const struct merkle_proof *proof)
{
	const uint8_t *path[MERKLE_MAX_PROOF + 1];
	uint8_t empty[MERKLE_HASH_LEN];
	uint8_t fr[MERKLE_HASH_LEN], sr[MERKLE_HASH_LEN];
	size_t np = 0;
	uint64_t fn, sn;

	if (!proof || proof->len > MERKLE_MAX_PROOF || m > n) {
		return -EBADMSG;
	}
	if (m == 0) {
		/* Every tree extends the empty one; the only valid proof is empty and old_root must be the empty root. */
		if (proof->len != 0 || sha256("", 0, empty) < 0 || !crypto_equal(empty, old_root, MERKLE_HASH_LEN)) {
			return -EBADMSG;
		}
		return 0;
	}
	if (m == n) {
		if (proof->len != 0 || !crypto_equal(old_root, new_root, MERKLE_HASH_LEN)) {
			return -EBADMSG;
		}
		return 0;
	}
	if (proof->len == 0) {
		return -EBADMSG;
	}
	/* RFC 9162 2.1.4.2 step 2: when m is a power of two the old root is the first node of the path. */
	if ((m & (m - 1)) == 0) {
		path[np++] = old_root;
	}
	for (size_t i = 0; i < proof->len; i++) {
		path[np++] = proof->hash[i];
	}
	fn = m - 1;
	sn = n - 1;
	while (fn & 1) {
		fn >>= 1;
		sn >>= 1;
	}
	memcpy(fr, path[0], MERKLE_HASH_LEN);
	memcpy(sr, path[0], MERKLE_HASH_LEN);
	for (size_t i = 1; i < np; i++) {
		if (sn == 0) {
			return -EBADMSG;
		}
		if ((fn & 1) || fn == sn) {
			if (merkle_node_hash(path[i], fr, fr) < 0 || merkle_node_hash(path[i], sr, sr) < 0) {
				return -EIO;
			}
			if (!(fn & 1)) {
				while (fn != 0 && !(fn & 1)) {
					fn >>= 1;
					sn >>= 1;
				}
			}
		} else {
			if (merkle_node_hash(sr, path[i], sr) < 0) {
				return -EIO;
			}
		}
		fn >>= 1;
		sn >>= 1;
	}
	if (sn != 0 || !crypto_equal(fr, old_root, MERKLE_HASH_LEN) || !crypto_equal(sr, new_root, MERKLE_HASH_LEN)) {
		return -EBADMSG;
	}
	return 0;
}

int merkle_tree_new(struct merkle_tree **ret)
{
	struct merkle_tree *t = calloc(1, sizeof(*t));

	if (!t) {
		return -ENOMEM;
	}
	t->max_leaves = MERKLE_MAX_LEAVES;
	*ret = t;
	return 0;
}

void merkle_tree_free(struct merkle_tree *t)
{
	if (!t) {
		return;
	}
	for (size_t i = 0; i < MERKLE_LEVELS; i++) {
		free(t->level[i].h);
	}
	free(t);
}

void merkle_tree_set_max_leaves(struct merkle_tree *t, uint64_t max)
{
	t->max_leaves = MIN(max, MERKLE_MAX_LEAVES);
}

uint64_t merkle_tree_size(const struct merkle_tree *t)
{
	return t->count;
}

static int level_push(struct merkle_level *l, const uint8_t h[MERKLE_HASH_LEN])
{
	if (l->n == l->alloc) {
		uint64_t na = l->alloc ? l->alloc * 2 : 64;
		size_t bytes;
		uint8_t *p;

		if (size_mul(na, MERKLE_HASH_LEN, &bytes) < 0) {
			return -E2BIG;
		}
		p = realloc(l->h, bytes);
		if (!p) {
			return -ENOMEM;
		}
		l->h = p;
		l->alloc = na;
	}
	memcpy(l->h + l->n * MERKLE_HASH_LEN, h, MERKLE_HASH_LEN);
	l->n++;
	return 0;
}

int merkle_tree_append(struct merkle_tree *t, const uint8_t leaf[MERKLE_HASH_LEN])
{
	uint8_t h[MERKLE_HASH_LEN];
	int r;

	if (t->count >= t->max_leaves) {
		return -E2BIG;
	}
	r = level_push(&t->level[0], leaf);
	if (r < 0) {
		return r;
	}
	/* Each time a level gets an even count, the last two nodes complete a subtree one level up. */
	for (size_t k = 0; k + 1 < MERKLE_LEVELS && t->level[k].n % 2 == 0; k++) {
		const uint8_t *last = t->level[k].h + (t->level[k].n - 2) * MERKLE_HASH_LEN;

		r = merkle_node_hash(last, last + MERKLE_HASH_LEN, h);
		if (r >= 0) {
			r = level_push(&t->level[k + 1], h);
		}
		if (r < 0) {
			/* Roll back so the tree stays consistent: drop the partial upper nodes and the leaf. */
			for (size_t j = 1; j <= k; j++) {
				t->level[j].n--;
			}
			t->level[0].n--;
			return r;
		}
	}
	t->count++;
	return 0;
}

/*
 * MTH of leaves [start, start+n). In the RFC 6962 recursion every left part is
 * a complete subtree aligned on its size, so it is a stored node.
 */
static int subtree(const struct merkle_tree *t, uint64_t start, uint64_t n, uint8_t ret[MERKLE_HASH_LEN])
{
	uint8_t l[MERKLE_HASH_LEN], r[MERKLE_HASH_LEN];
	uint64_t k;
	int e;

	if ((n & (n - 1)) == 0 && start % n == 0) {
		unsigned lvl = (unsigned)__builtin_ctzll(n);

		if (lvl < MERKLE_LEVELS && start / n < t->level[lvl].n) {
			memcpy(ret, t->level[lvl].h + (start / n) * MERKLE_HASH_LEN, MERKLE_HASH_LEN);
			return 0;
		}
		return -EINVAL;
	}
	k = split_point(n);
	e = subtree(t, start, k, l);
	if (e < 0) {
		return e;
	}
	e = subtree(t, start + k, n - k, r);
	if (e < 0) {
		return e;
	}
	return merkle_node_hash(l, r, ret);
}

int merkle_tree_root(const struct merkle_tree *t, uint64_t size, uint8_t ret[MERKLE_HASH_LEN])
{
	if (size > t->count) {
		return -EINVAL;
	}
	if (size == 0) {
		return sha256("", 0, ret) < 0 ? -EIO : 0;
	}
	return subtree(t, 0, size, ret);
}

static int proof_push(struct merkle_proof *p, const uint8_t h[MERKLE_HASH_LEN])
{
	if (p->len >= MERKLE_MAX_PROOF) {
		return -E2BIG;
	}
	memcpy(p->hash[p->len++], h, MERKLE_HASH_LEN);
	return 0;
}

/* RFC 9162 PATH(m, D[start:start+n]). */
static int path_of(const struct merkle_tree *t, uint64_t m, uint64_t start, uint64_t n, struct merkle_proof *p)
{
	uint8_t h[MERKLE_HASH_LEN];
	uint64_t k;
	int e;

	if (n <= 1) {
		return 0;
	}
	k = split_point(n);
	if (m < k) {
		e = path_of(t, m, start, k, p);
		if (e >= 0) {
			e = subtree(t, start + k, n - k, h);
		}
	} else {
		e = path_of(t, m - k, start + k, n - k, p);
		if (e >= 0) {
			e = subtree(t, start, k, h);
		}
	}
	return e < 0 ? e : proof_push(p, h);
}

int merkle_tree_inclusion(const struct merkle_tree *t, uint64_t index, uint64_t size, struct merkle_proof *ret)
{
	struct merkle_proof p = { .len = 0 };
	int r;

	if (index >= size || size > t->count) {
		return -EINVAL;
	}
	r = path_of(t, index, 0, size, &p);
	if (r < 0) {
		return r;
	}
	*ret = p;
	return 0;
}

/* RFC 9162 SUBPROOF(m, D[start:start+n], b). */
static int subproof(const struct merkle_tree *t, uint64_t m, uint64_t start, uint64_t n, bool b, struct merkle_proof *p)
{
	uint8_t h[MERKLE_HASH_LEN];
	uint64_t k;
	int e;

	if (m == n) {
		if (b) {
			return 0;
		}
		e = subtree(t, start, n, h);
		return e < 0 ? e : proof_push(p, h);
	}
	k = split_point(n);
	if (m <= k) {
		e = subproof(t, m, start, k, b, p);
		if (e >= 0) {
			e = subtree(t, start + k, n - k, h);
		}
	} else {
		e = subproof(t, m - k, start + k, n - k, false, p);
		if (e >= 0) {
			e = subtree(t, start, k, h);
		}
	}
	return e < 0 ? e : proof_push(p, h);
}

int merkle_tree_consistency(const struct merkle_tree *t, uint64_t m, uint64_t n, struct merkle_proof *ret)
{
	struct merkle_proof p = { .len = 0 };
	int r;

	if (m == 0 || m > n || n > t->count) {
		return -EINVAL;
	}
	r = subproof(t, m, 0, n, true, &p);
	if (r < 0) {
		return r;
	}
	*ret = p;
	return 0;
}
