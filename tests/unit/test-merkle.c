/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RFC 6962 / 9162 Merkle tree. Vectors: the certificate-transparency 8-leaf
 * reference tree (leaves "", 00, 10, 2021, 3031, 40414243, 5051525354555657,
 * 606162636465666768696a6b6c6d6e6f), as published in CT's merkle_tree_test and
 * transparency-dev/merkle testonly/constants.go.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "crypto.h"
#include "verify/merkle.h"

static const char *const ct_leaves[8] = {
	"", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f",
};

static const char *const ct_roots[9] = {
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	"6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
	"fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
	"aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
	"d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
	"4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
	"76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
	"ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
	"5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
};

struct proof_vector {
	uint64_t a, b; /* index,size or m,n */
	size_t len;
	const char *h[3];
};

static const struct proof_vector ct_inclusion[] = {
	{ 0,
	  8,
	  3,
	  { "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
	    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
	    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4" } },
	{ 5,
	  8,
	  3,
	  { "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
	    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
	    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7" } },
	{ 0, 1, 0, { NULL } },
};

static const struct proof_vector ct_consistency[] = {
	{ 2,
	  8,
	  2,
	  { "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
	    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4" } },
	{ 6,
	  8,
	  3,
	  { "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
	    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
	    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7" } },
	{ 2,
	  5,
	  2,
	  { "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
	    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b" } },
};

static void unhex(const char *s, uint8_t *out, size_t want)
{
	struct buf b = { 0 };

	assert_int_equal(buf_init(&b, 4096, 0), 0);
	assert_int_equal(hex_decode(s, strlen(s), &b), 0);
	assert_int_equal(buf_len(&b), want);
	if (want) {
		memcpy(out, buf_ptr(&b), want);
	}
	buf_release(&b);
}

static void ct_leaf_hashes(uint8_t leaves[8][MERKLE_HASH_LEN])
{
	for (size_t i = 0; i < 8; i++) {
		uint8_t data[16];
		size_t n = strlen(ct_leaves[i]) / 2;

		unhex(ct_leaves[i], data, n);
		assert_int_equal(merkle_leaf_hash(data, n, leaves[i]), 0);
	}
}

static void test_roots(void **state)
{
	uint8_t leaves[8][MERKLE_HASH_LEN], root[MERKLE_HASH_LEN], want[MERKLE_HASH_LEN];
	struct merkle_tree *t = NULL;

	(void)state;
	ct_leaf_hashes(leaves);
	assert_int_equal(merkle_tree_new(&t), 0);
	for (size_t n = 0; n <= 8; n++) {
		unhex(ct_roots[n], want, MERKLE_HASH_LEN);
		assert_int_equal(merkle_root(&leaves[0][0], n, root), 0);
		assert_memory_equal(root, want, MERKLE_HASH_LEN);
		if (n > 0) {
			assert_int_equal(merkle_tree_append(t, leaves[n - 1]), 0);
		}
		assert_int_equal(merkle_tree_size(t), n);
		assert_int_equal(merkle_tree_root(t, n, root), 0);
		assert_memory_equal(root, want, MERKLE_HASH_LEN);
	}
	/* Every smaller size is still answerable from the full tree. */
	for (size_t n = 0; n <= 8; n++) {
		unhex(ct_roots[n], want, MERKLE_HASH_LEN);
		assert_int_equal(merkle_tree_root(t, n, root), 0);
		assert_memory_equal(root, want, MERKLE_HASH_LEN);
	}
	assert_int_equal(merkle_tree_root(t, 9, root), -EINVAL);
	merkle_tree_free(t);
}

static void test_node_hash(void **state)
{
	uint8_t leaves[8][MERKLE_HASH_LEN], h[MERKLE_HASH_LEN], want[MERKLE_HASH_LEN];

	(void)state;
	ct_leaf_hashes(leaves);
	assert_int_equal(merkle_node_hash(leaves[0], leaves[1], h), 0);
	unhex(ct_roots[2], want, MERKLE_HASH_LEN);
	assert_memory_equal(h, want, MERKLE_HASH_LEN);
	assert_int_equal(merkle_node_hash(leaves[1], leaves[0], h), 0);
	assert_memory_not_equal(h, want, MERKLE_HASH_LEN);
}

static void test_ct_inclusion(void **state)
{
	uint8_t leaves[8][MERKLE_HASH_LEN], root[MERKLE_HASH_LEN];
	struct merkle_tree *t = NULL;

	(void)state;
	ct_leaf_hashes(leaves);
	assert_int_equal(merkle_tree_new(&t), 0);
	for (size_t i = 0; i < 8; i++) {
		assert_int_equal(merkle_tree_append(t, leaves[i]), 0);
	}
	for (size_t v = 0; v < ARRAY_SIZE(ct_inclusion); v++) {
		const struct proof_vector *pv = &ct_inclusion[v];
		struct merkle_proof want = { .len = pv->len }, got;

		for (size_t i = 0; i < pv->len; i++) {
			unhex(pv->h[i], want.hash[i], MERKLE_HASH_LEN);
		}
		assert_int_equal(merkle_tree_inclusion(t, pv->a, pv->b, &got), 0);
		assert_int_equal(got.len, want.len);
		if (want.len > 0) {
			assert_memory_equal(got.hash, want.hash, want.len * MERKLE_HASH_LEN);
		}
		unhex(ct_roots[pv->b], root, MERKLE_HASH_LEN);
		assert_int_equal(merkle_inclusion_verify(pv->a, pv->b, leaves[pv->a], &want, root), 0);
	}
	merkle_tree_free(t);
}

static void test_ct_consistency(void **state)
{
	uint8_t leaves[8][MERKLE_HASH_LEN], r1[MERKLE_HASH_LEN], r2[MERKLE_HASH_LEN];
	struct merkle_tree *t = NULL;

	(void)state;
	ct_leaf_hashes(leaves);
	assert_int_equal(merkle_tree_new(&t), 0);
	for (size_t i = 0; i < 8; i++) {
		assert_int_equal(merkle_tree_append(t, leaves[i]), 0);
	}
	for (size_t v = 0; v < ARRAY_SIZE(ct_consistency); v++) {
		const struct proof_vector *pv = &ct_consistency[v];
		struct merkle_proof want = { .len = pv->len }, got;

		for (size_t i = 0; i < pv->len; i++) {
			unhex(pv->h[i], want.hash[i], MERKLE_HASH_LEN);
		}
		assert_int_equal(merkle_tree_consistency(t, pv->a, pv->b, &got), 0);
		assert_int_equal(got.len, want.len);
		assert_memory_equal(got.hash, want.hash, want.len * MERKLE_HASH_LEN);
		unhex(ct_roots[pv->a], r1, MERKLE_HASH_LEN);
		unhex(ct_roots[pv->b], r2, MERKLE_HASH_LEN);
		assert_int_equal(merkle_consistency_verify(pv->a, pv->b, r1, r2, &want), 0);
		/* Swapped roots fail. */
		assert_int_equal(merkle_consistency_verify(pv->a, pv->b, r2, r1, &want), -EBADMSG);
	}
	merkle_tree_free(t);
}

#define N_PROP 70

/* Every proof of every size verifies; every mangled one fails. */
static void test_properties(void **state)
{
	static uint8_t leaves[N_PROP][MERKLE_HASH_LEN], roots[N_PROP + 1][MERKLE_HASH_LEN];
	struct merkle_tree *t = NULL;

	(void)state;
	assert_int_equal(merkle_tree_new(&t), 0);
	for (size_t i = 0; i < N_PROP; i++) {
		uint8_t d[2] = { (uint8_t)i, (uint8_t)(i * 7) };

		assert_int_equal(merkle_leaf_hash(d, sizeof(d), leaves[i]), 0);
		assert_int_equal(merkle_tree_append(t, leaves[i]), 0);
	}
	for (uint64_t n = 0; n <= N_PROP; n++) {
		uint8_t check[MERKLE_HASH_LEN];

		assert_int_equal(merkle_tree_root(t, n, roots[n]), 0);
		assert_int_equal(merkle_root(&leaves[0][0], n, check), 0);
		assert_memory_equal(check, roots[n], MERKLE_HASH_LEN);
	}
	for (uint64_t n = 1; n <= N_PROP; n++) {
		for (uint64_t i = 0; i < n; i++) {
			struct merkle_proof p, bad;

			assert_int_equal(merkle_tree_inclusion(t, i, n, &p), 0);
			assert_int_equal(merkle_inclusion_verify(i, n, leaves[i], &p, roots[n]), 0);
			/*
			 * Wrong index, leaf, root. (Not a wrong size: a proof for (i, n) can also
			 * hold for (i, n') of the same shape; the checkpoint is what binds the size.)
			 */
			assert_int_not_equal(merkle_inclusion_verify(i + 1, n, leaves[i], &p, roots[n]), 0);
			if (n > 1) {
				assert_int_not_equal(merkle_inclusion_verify(i, n, leaves[(i + 1) % n], &p, roots[n]),
						     0);
				assert_int_not_equal(merkle_inclusion_verify(i, n, leaves[i], &p, roots[n - 1]), 0);
			}
			if (p.len > 0) {
				bad = p;
				bad.hash[bad.len - 1][7] ^= 1;
				assert_int_equal(merkle_inclusion_verify(i, n, leaves[i], &bad, roots[n]), -EBADMSG);
				bad = p;
				bad.len--;
				assert_int_equal(merkle_inclusion_verify(i, n, leaves[i], &bad, roots[n]), -EBADMSG);
			}
			bad = p;
			memset(bad.hash[bad.len], 0xab, MERKLE_HASH_LEN);
			bad.len++;
			assert_int_equal(merkle_inclusion_verify(i, n, leaves[i], &bad, roots[n]), -EBADMSG);
		}
		for (uint64_t m = 1; m <= n; m++) {
			struct merkle_proof p, bad;

			assert_int_equal(merkle_tree_consistency(t, m, n, &p), 0);
			assert_int_equal(merkle_consistency_verify(m, n, roots[m], roots[n], &p), 0);
			if (m < n) {
				assert_int_not_equal(merkle_consistency_verify(m, n, roots[m - 1], roots[n], &p), 0);
				assert_int_not_equal(merkle_consistency_verify(m, n, roots[m], roots[n - 1], &p), 0);
				bad = p;
				bad.hash[0][3] ^= 0x80;
				assert_int_equal(merkle_consistency_verify(m, n, roots[m], roots[n], &bad), -EBADMSG);
				bad = p;
				bad.len--;
				assert_int_equal(merkle_consistency_verify(m, n, roots[m], roots[n], &bad), -EBADMSG);
				bad = p;
				memset(bad.hash[bad.len], 0xcd, MERKLE_HASH_LEN);
				bad.len++;
				assert_int_equal(merkle_consistency_verify(m, n, roots[m], roots[n], &bad), -EBADMSG);
			} else {
				assert_int_equal(p.len, 0);
			}
		}
	}
	merkle_tree_free(t);
}

static void test_edges(void **state)
{
	uint8_t leaf[MERKLE_HASH_LEN] = { 0 }, root[MERKLE_HASH_LEN], empty[MERKLE_HASH_LEN];
	struct merkle_proof p = { .len = 0 };
	struct merkle_tree *t = NULL;

	(void)state;
	unhex(ct_roots[0], empty, MERKLE_HASH_LEN);
	/* index >= size, size 0. */
	assert_int_equal(merkle_inclusion_verify(0, 0, leaf, &p, empty), -EBADMSG);
	assert_int_equal(merkle_inclusion_verify(3, 3, leaf, &p, empty), -EBADMSG);
	/* A single leaf is its own root with an empty proof. */
	assert_int_equal(merkle_inclusion_verify(0, 1, leaf, &p, leaf), 0);
	/* m > n. */
	assert_int_equal(merkle_consistency_verify(5, 4, empty, empty, &p), -EBADMSG);
	/* From the empty tree: only the empty proof with the empty root. */
	assert_int_equal(merkle_consistency_verify(0, 8, empty, leaf, &p), 0);
	assert_int_equal(merkle_consistency_verify(0, 8, leaf, leaf, &p), -EBADMSG);
	p.len = 1;
	assert_int_equal(merkle_consistency_verify(0, 8, empty, leaf, &p), -EBADMSG);
	/* m == n: empty proof and equal roots only. */
	assert_int_equal(merkle_consistency_verify(4, 4, leaf, leaf, &p), -EBADMSG);
	p.len = 0;
	assert_int_equal(merkle_consistency_verify(4, 4, leaf, leaf, &p), 0);
	assert_int_equal(merkle_consistency_verify(4, 4, leaf, empty, &p), -EBADMSG);
	/* m < n with an empty proof. */
	assert_int_equal(merkle_consistency_verify(3, 4, leaf, empty, &p), -EBADMSG);
	/* A proof one past MERKLE_MAX_PROOF is refused before it is read. */
	p.len = MERKLE_MAX_PROOF + 1;
	assert_int_equal(merkle_inclusion_verify(0, 2, leaf, &p, root), -EBADMSG);
	assert_int_equal(merkle_consistency_verify(1, 2, leaf, root, &p), -EBADMSG);

	/* Generator argument checks. */
	assert_int_equal(merkle_tree_new(&t), 0);
	assert_int_equal(merkle_tree_append(t, leaf), 0);
	assert_int_equal(merkle_tree_inclusion(t, 1, 1, &p), -EINVAL);
	assert_int_equal(merkle_tree_inclusion(t, 0, 2, &p), -EINVAL);
	assert_int_equal(merkle_tree_consistency(t, 0, 1, &p), -EINVAL);
	assert_int_equal(merkle_tree_consistency(t, 1, 2, &p), -EINVAL);
	merkle_tree_free(t);
	merkle_tree_free(NULL);
}

/* MERKLE_MAX_LEAVES, lowered through the test hook: the leaf one past the cap is refused and changes nothing. */
static void test_max_leaves(void **state)
{
	uint8_t leaf[MERKLE_HASH_LEN] = { 1 }, before[MERKLE_HASH_LEN], after[MERKLE_HASH_LEN];
	struct merkle_tree *t = NULL;

	(void)state;
	assert_int_equal(merkle_tree_new(&t), 0);
	merkle_tree_set_max_leaves(t, 5);
	for (size_t i = 0; i < 5; i++) {
		assert_int_equal(merkle_tree_append(t, leaf), 0);
	}
	assert_int_equal(merkle_tree_root(t, 5, before), 0);
	assert_int_equal(merkle_tree_append(t, leaf), -E2BIG);
	assert_int_equal(merkle_tree_size(t), 5);
	assert_int_equal(merkle_tree_root(t, 5, after), 0);
	assert_memory_equal(before, after, MERKLE_HASH_LEN);
	merkle_tree_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roots),	     cmocka_unit_test(test_node_hash),
		cmocka_unit_test(test_ct_inclusion), cmocka_unit_test(test_ct_consistency),
		cmocka_unit_test(test_properties),   cmocka_unit_test(test_edges),
		cmocka_unit_test(test_max_leaves),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
