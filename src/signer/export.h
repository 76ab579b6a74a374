/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_SIGNER_EXPORT_H
#define TKBOX_SIGNER_EXPORT_H

#include "buf.h"
#include "store.h"
#include "verify/merkle.h"

/*
 * Build a Tracekit format v2 bundle (.tkb, a ZIP) for one run:
 *   manifest.json, runs/<32 hex of sha256("tenant/run_id")>.jsonl,
 *   keys/records.jsonl, proofs/records.json, checkpoints/<size>.note,
 *   policies/<sha256>.json
 * The checkpoint must cover the run's last record and the key records.
 */

#define EXPORT_MAX_POLICIES 16
#define EXPORT_MAX_KEY_RECORDS 16
#define EXPORT_VERIFIER_MIN_VERSION "0.4.0"

struct export_input {
	const char *run_key; /* "tenant/run_id" */
	uint64_t first_seq; /* the run's first and last record */
	uint64_t last_seq;
	const uint64_t *key_seqs; /* signer.epoch / key.retire records */
	size_t n_key_seqs;
	const char *checkpoint_note;
	uint64_t checkpoint_size;
	const struct merkle_tree *tree;
	/* policy snapshots: JCS bytes, named by their sha256 */
	const char *const *policies;
	const size_t *policy_lens;
	size_t n_policies;
};

_wur_ int export_bundle(struct store *reader, const struct export_input *in, struct buf *out, char *err,
			size_t err_size);

#endif
