/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VERIFY_RECORD_H
#define TKBOX_VERIFY_RECORD_H

#include <jansson.h>

#include "buf.h"
#include "crypto.h"
#include "macro.h"

/*
 * Tracekit format v2 record lines (docs/format-v2.md section 4):
 *
 *   {"v":2,"event":{...},"hash":"sha256:<hex>","alg":"ed25519","kid":"sha256:<hex>","sig":"<base64>"}
 *
 *   hash = "sha256:" + hex(SHA-256(JCS(event)))
 *   kid  = "sha256:" + hex(SHA-256(DER SPKI)), SPKI = 302a300506032b6570032100 || pub
 *   sig  = base64(Ed25519(JCS({alg, kid, log_id, seq, prev_hash, tenant, run_id,
 *                              run_seq, run_prev_hash, hash, "t":"tracekit.record.v2"})))
 *
 * The Merkle leaf DATA of a record is the 32 raw bytes of its hash
 * (merkle_leaf_hash(rec.hash, 32)); see merkle.h.
 *
 * API contract
 *   - Pure: no I/O, no logging, no globals. 0 / -errno.
 *   - record_build needs the event to carry the position fields: log_id,
 *     tenant, run_id, prev_hash, run_prev_hash (strings) and seq, run_seq
 *     (integers 0..2^53-1); else -EINVAL. The line is JCS of the record
 *     object, NUL-terminated, WITHOUT a trailing newline.
 *   - record_parse is strict: the line (no trailing newline; at most
 *     RECORD_MAX_LINE bytes, -E2BIG) goes through json_parse_strict; exactly
 *     the six keys; v is the integer 2; alg is "ed25519" (-EPROTONOSUPPORT for
 *     any other string, so a verifier can name algorithm confusion);
 *     hash/kid are "sha256:" + 64 lower-case hex; sig is canonical base64 of
 *     64 bytes; the event is an object with the position fields typed as
 *     above (prev hashes in the same "sha256:"+hex form). Anything else:
 *     -EBADMSG. It does NOT check that hash matches the event (use
 *     record_check_hash) nor the signature (record_verify_sig), so that a
 *     verifier can say which check failed.
 *   - record_verify_sig returns 0 or -EBADMSG (strict Ed25519, crypto.h).
 *   - struct record owns a reference to the event; pointers to strings point
 *     into it and live as long as the record.
 */

#define RECORD_MAX_LINE ((size_t)1 << 20)
#define RECORD_MAX_EVENT_JCS ((size_t)1 << 20)
/* "sha256:" + 64 hex */
#define RECORD_HASH_STRLEN 71
#define RECORD_SPKI_LEN 44
#define RECORD_SIG_DOMAIN "tracekit.record.v2"

/* DER SubjectPublicKeyInfo of an Ed25519 public key. */
void record_spki(const uint8_t pub[ED25519_PUB_LEN], uint8_t ret[RECORD_SPKI_LEN]);
/* base64(SPKI) as signer.epoch carries it, and its inverse (refuses anything but an Ed25519 SPKI: -EBADMSG). */
_wur_ int record_spki_b64(const uint8_t pub[ED25519_PUB_LEN], char **ret);
_wur_ int record_spki_b64_decode(const char *s, size_t n, uint8_t ret_pub[ED25519_PUB_LEN]);
/* kid string "sha256:<hex>" of an Ed25519 key (NUL-terminated in ret). */
_wur_ int record_kid(const uint8_t pub[ED25519_PUB_LEN], char ret[RECORD_HASH_STRLEN + 1]);

/* "sha256:<hex>" formatting and parsing of a 32-byte hash (parse: lower-case only, -EBADMSG). */
void record_hash_format(const uint8_t h[SHA256_LEN], char ret[RECORD_HASH_STRLEN + 1]);
_wur_ int record_hash_parse(const char *s, uint8_t ret[SHA256_LEN]);

/* SHA-256(JCS(event)). */
_wur_ int record_event_hash(const json_t *event, uint8_t ret[SHA256_LEN]);

/* Append the JCS signature message of a record (fields from event, plus kid and hash strings) to out. */
_wur_ int record_sigmsg(const json_t *event, const char *kid, const char *hash, struct buf *out);

/*
 * Build a signed record line for event with the key (priv, pub). ret_hash
 * (may be NULL) gets the event hash, which is the next record's prev_hash /
 * run_prev_hash and the record's Merkle leaf data.
 */
_wur_ int record_build(const json_t *event, const uint8_t priv[ED25519_PRIV_LEN], const uint8_t pub[ED25519_PUB_LEN],
		       char **ret_line, uint8_t ret_hash[SHA256_LEN]);

/*
 * record_build for a caller that already holds JCS(event) (ev_jcs, ev_len: exactly json_write_jcs's output for
 * event, e.g. from record_event_jcs): the same line, without serialising the event again.
 */
_wur_ int record_build_jcs(const json_t *event, const char *ev_jcs, size_t ev_len, const uint8_t priv[ED25519_PRIV_LEN],
			   const uint8_t pub[ED25519_PUB_LEN], char **ret_line, uint8_t ret_hash[SHA256_LEN]);

/* JCS(event) into out (cleared first) and its SHA-256: record_event_hash that keeps the bytes. */
_wur_ int record_event_jcs(const json_t *event, struct buf *out, uint8_t ret[SHA256_LEN]);

struct record {
	json_t *event; /* owned reference */
	uint8_t hash[SHA256_LEN]; /* as claimed by the line */
	uint8_t kid[SHA256_LEN];
	char kid_str[RECORD_HASH_STRLEN + 1];
	uint8_t sig[ED25519_SIG_LEN];
	/* Position fields, from the event. */
	const char *log_id;
	const char *tenant;
	const char *run_id;
	const char *type; /* event "type", NULL when absent or not a string */
	int64_t seq;
	int64_t run_seq;
	uint8_t prev_hash[SHA256_LEN];
	uint8_t run_prev_hash[SHA256_LEN];
};

_wur_ int record_parse(const void *line, size_t n, struct record *ret);
void record_release(struct record *r);
/* 0 when hash == SHA-256(JCS(event)), -EBADMSG otherwise. */
_wur_ int record_check_hash(const struct record *r);
/* 0 when sig verifies under pub (and kid matches pub), -EBADMSG otherwise. */
_wur_ int record_verify_sig(const struct record *r, const uint8_t pub[ED25519_PUB_LEN]);

#endif
