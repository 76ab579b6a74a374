/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_SIGNER_STORE_H
#define TKBOX_SIGNER_STORE_H

#include <jansson.h>

#include "buf.h"

/*
 * The record store: SQLite in WAL mode with synchronous=FULL, so a committed
 * transaction is on disk before store_commit returns (an acknowledged record
 * survives kill -9 and power loss). Tables are append-only: triggers refuse
 * UPDATE and DELETE.
 *
 *   records(seq PK, run_key, run_seq, hash, line)  one signed record line per row
 *   requests(key PK, digest, response)             idempotent replies by (uid, request_id)
 *   checkpoints(size PK, note)                     signed checkpoint notes
 *
 * One struct store is one connection, used by one thread at a time. The
 * signer opens a writer (the commit thread) and a reader (the event loop).
 */

#define STORE_MAX_LINE ((size_t)1 << 20)

struct store;

enum store_item_kind {
	STORE_ITEM_RECORD = 0,
	STORE_ITEM_REQUEST = 1,
	STORE_ITEM_CHECKPOINT = 2,
};

struct store_item {
	enum store_item_kind kind;
	uint64_t seq; /* record: seq; checkpoint: tree size */
	uint64_t run_seq;
	uint8_t hash[32];
	char *key; /* record: run key "tenant/run_id"; request: "uid:request_id" */
	char *text; /* record: the line; request: the response; checkpoint: the note */
	json_t *event; /* record not yet signed: its event (text is NULL until signed; see server.c) */
	char *ev_jcs; /* record not yet signed: JCS(event), whose SHA-256 is hash (NULL: serialise event) */
	size_t ev_jcs_len;
	uint8_t digest[32];
};

void store_item_release(struct store_item *it);

_wur_ int store_open(const char *path, bool create, struct store **ret, char *err, size_t err_size);
void store_close(struct store *s);

/*
 * Write items in one transaction and commit it durably. On failure nothing
 * is written (the transaction is rolled back) and err names the cause (e.g.
 * "database or disk is full").
 */
_wur_ int store_commit(struct store *s, const struct store_item *items, size_t n, char *err, size_t err_size);

typedef int (*store_record_cb)(uint64_t seq, const char *run_key, uint64_t run_seq, const uint8_t hash[32],
			       const char *line, size_t line_len, void *userdata);
/* Every record with seq >= from, in seq order. A callback's negative return stops and is returned. */
_wur_ int store_foreach_record(struct store *s, uint64_t from, store_record_cb cb, void *userdata);
/* One run's records in run_seq order, limited to seq < below. */
_wur_ int store_foreach_run_record(struct store *s, const char *run_key, uint64_t below, store_record_cb cb,
				   void *userdata);
/* One record by seq (-ENOENT). */
_wur_ int store_get_record(struct store *s, uint64_t seq, char **ret_line);

typedef int (*store_request_cb)(const char *key, const uint8_t digest[32], const char *response, void *userdata);
/* The newest `newest` requests (0: all), oldest first. */
_wur_ int store_foreach_request(struct store *s, size_t newest, store_request_cb cb, void *userdata);
/* One request's payload digest and reply by its key "uid:request_id" (-ENOENT). */
_wur_ int store_get_request(struct store *s, const char *key, uint8_t ret_digest[32], char **ret_response);

/* The largest checkpoint (by size) with size >= min_size (-ENOENT when none). */
_wur_ int store_checkpoint_at_least(struct store *s, uint64_t min_size, uint64_t *ret_size, char **ret_note);

#endif
