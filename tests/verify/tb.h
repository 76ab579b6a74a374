/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_TESTS_VERIFY_TB_H
#define TKBOX_TESTS_VERIFY_TB_H

/*
 * Test-only bundle builder: a tiny ZIP writer that can also write the
 * malformed archives the reader must refuse, and a generator of valid
 * Tracekit v2 bundles signed with test keys (record key + log key), so the
 * verifier is tested independently of tkbox-signer's exporter.
 */

#include <jansson.h>

#include "buf.h"
#include "crypto.h"

/* ---- ZIP ---- */
struct zb_opts {
	bool stored; /* method 0 instead of deflate */
	uint32_t unix_mode; /* 0: none (made by MS-DOS); else high 16 bits of the external attributes, made by Unix */
	int32_t usize_delta; /* lie about the uncompressed size */
	bool bad_crc;
};

struct zb {
	struct buf out;
	struct buf cd;
	size_t n;
};

int zb_init(struct zb *z);
void zb_release(struct zb *z);
int zb_add(struct zb *z, const char *name, const void *p, size_t n, const struct zb_opts *o);
/* Appends the central directory and end record; the archive is z->out. */
int zb_finish(struct zb *z);

/* ---- bundles ---- */
#define TB_MAX_MEMBERS 128
#define TB_MAX_RECORDS 4096

struct tb_member {
	char name[160];
	char *data;
	size_t size;
};

struct tb {
	uint8_t log_priv[ED25519_PRIV_LEN], log_pub[ED25519_PUB_LEN];
	uint8_t rec_priv[ED25519_PRIV_LEN], rec_pub[ED25519_PUB_LEN];
	char origin[128];
	char log_id[33];
	char *trust; /* trust.json pinning the log key */
	/* The run's record lines (no newline), editable by tests before tb_zip. */
	char *run[TB_MAX_RECORDS];
	size_t n_run;
	struct tb_member m[TB_MAX_MEMBERS]; /* members other than manifest.json */
	size_t n_m;
};

/*
 * A closed run of n_calls decisions (n_calls + 4 records: run.registered, decisions,
 * run.closing, run.final), with the signer.epoch at seq 0 and another run's
 * record interleaved, a checkpoint over the whole log, proofs and a policy
 * snapshot. closed=false leaves out run.closing/run.final.
 */
int tb_build(struct tb *t, size_t n_calls, bool closed);
/* The same, deterministic: keys, log id and event ids derived from seed. */
int tb_build_seeded(struct tb *t, size_t n_calls, bool closed, const uint8_t seed[32]);
/* With extra_epochs more signer.epoch records (16 keys each) after the first, all in keys/records.jsonl. */
int tb_build_ex(struct tb *t, size_t n_calls, bool closed, const uint8_t seed[32], size_t extra_epochs);
/*
 * One decision, then events [{type, data, source? (default "signer"), top? (more event fields)}] in the
 * run, each signed and chained like any record, then run.closing/run.final when closed.
 */
int tb_build_events(struct tb *t, const json_t *events, bool closed, const uint8_t seed[32]);
void tb_release(struct tb *t);
/* Load an existing bundle (e.g. tkbox-signer's export) for tampering; keys stay zero. */
int tb_load(struct tb *t, const void *zip, size_t n, const char *trust);
/* Set (replace or add) a member. */
int tb_set(struct tb *t, const char *name, const void *p, size_t n);
struct tb_member *tb_get(struct tb *t, const char *name);
int tb_del(struct tb *t, const char *name);
/* Rewrite the runs/ member from t->run[]. */
int tb_write_run(struct tb *t);
/* The ZIP, with a manifest computed over the current members (what an attacker can always redo). */
int tb_zip(const struct tb *t, struct buf *out);
/* As tb_zip, but the manifest leaves out member omit, or is replaced by the given text. */
int tb_zip2(const struct tb *t, const char *omit, const char *manifest, struct buf *out);
/* Name of the run file. */
const char *tb_run_name(const struct tb *t);
/* Sign an event with the record key (or another key) into a record line. */
char *tb_sign(const json_t *event, const uint8_t priv[ED25519_PRIV_LEN], const uint8_t pub[ED25519_PUB_LEN]);

#endif
