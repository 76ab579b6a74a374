/* SPDX-License-Identifier: Apache-2.0 */
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "store.h"

#include "banned.h"

struct store {
	sqlite3 *db;
	sqlite3_stmt *ins_record;
	sqlite3_stmt *ins_request;
	sqlite3_stmt *ins_checkpoint;
};

static const char schema_sql[] =
	"CREATE TABLE IF NOT EXISTS records(seq INTEGER PRIMARY KEY, run_key TEXT NOT NULL,"
	" run_seq INTEGER NOT NULL, hash BLOB NOT NULL, line TEXT NOT NULL);"
	"CREATE INDEX IF NOT EXISTS records_run ON records(run_key, run_seq);"
	"CREATE TABLE IF NOT EXISTS requests(key TEXT PRIMARY KEY, digest BLOB NOT NULL, response TEXT NOT NULL);"
	"CREATE TABLE IF NOT EXISTS checkpoints(size INTEGER PRIMARY KEY, note TEXT NOT NULL);"
	/* Append-only: the log never changes a row it has written. */
	"CREATE TRIGGER IF NOT EXISTS records_no_update BEFORE UPDATE ON records"
	" BEGIN SELECT RAISE(ABORT, 'records are append-only'); END;"
	"CREATE TRIGGER IF NOT EXISTS records_no_delete BEFORE DELETE ON records"
	" BEGIN SELECT RAISE(ABORT, 'records are append-only'); END;"
	"CREATE TRIGGER IF NOT EXISTS requests_no_update BEFORE UPDATE ON requests"
	" BEGIN SELECT RAISE(ABORT, 'requests are append-only'); END;"
	"CREATE TRIGGER IF NOT EXISTS requests_no_delete BEFORE DELETE ON requests"
	" BEGIN SELECT RAISE(ABORT, 'requests are append-only'); END;"
	"CREATE TRIGGER IF NOT EXISTS checkpoints_no_update BEFORE UPDATE ON checkpoints"
	" BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only'); END;"
	"CREATE TRIGGER IF NOT EXISTS checkpoints_no_delete BEFORE DELETE ON checkpoints"
	" BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only'); END;";

void store_item_release(struct store_item *it)
{
	if (!it) {
		return;
	}
	free(it->key);
	free(it->text);
	free(it->ev_jcs);
	if (it->event) {
		json_decref(it->event);
	}
	*it = (struct store_item){ 0 };
}

static int sqlite_to_errno(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_IOERR:
		return -EIO;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_READONLY:
	case SQLITE_PERM:
	case SQLITE_AUTH:
		return -EACCES;
	case SQLITE_CONSTRAINT:
		return -EEXIST;
	case SQLITE_CANTOPEN:
		return -ENOENT;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		return -EBADMSG;
	default:
		return -EIO;
	}
}

static int fail(struct store *s, int rc, char *err, size_t err_size, const char *what)
{
	snprintf(err, err_size, "%s: %s", what, s && s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
	return sqlite_to_errno(rc);
}

void store_close(struct store *s)
{
	if (!s) {
		return;
	}
	sqlite3_finalize(s->ins_record);
	sqlite3_finalize(s->ins_request);
	sqlite3_finalize(s->ins_checkpoint);
	sqlite3_close(s->db);
	free(s);
}

int store_open(const char *path, bool create, struct store **ret, char *err, size_t err_size)
{
	struct store *s;
	int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
	int rc;

	s = calloc(1, sizeof(*s));
	if (!s) {
		return -ENOMEM;
	}
	rc = sqlite3_open_v2(path, &s->db, flags, NULL);
	if (rc != SQLITE_OK) {
		rc = fail(s, rc, err, err_size, "open store");
		store_close(s);
		return rc;
	}
	sqlite3_extended_result_codes(s->db, 1);
	(void)sqlite3_busy_timeout(s->db, 5000);
	/*
	 * WAL + synchronous=FULL: each COMMIT fsyncs the WAL, so a commit that
	 * returned is durable. Group commit (many records per transaction) is
	 * what keeps that affordable.
	 */
	rc = sqlite3_exec(s->db,
			  "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;"
			  "PRAGMA wal_autocheckpoint=4000;",
			  NULL, NULL, NULL);
	if (rc == SQLITE_OK && create) {
		rc = sqlite3_exec(s->db, schema_sql, NULL, NULL, NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_prepare_v2(s->db,
					"INSERT INTO records(seq, run_key, run_seq, hash, line) VALUES (?,?,?,?,?)", -1,
					&s->ins_record, NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_prepare_v2(s->db, "INSERT INTO requests(key, digest, response) VALUES (?,?,?)", -1,
					&s->ins_request, NULL);
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_prepare_v2(s->db, "INSERT OR IGNORE INTO checkpoints(size, note) VALUES (?,?)", -1,
					&s->ins_checkpoint, NULL);
	}
	if (rc != SQLITE_OK) {
		rc = fail(s, rc, err, err_size, "prepare store");
		store_close(s);
		return rc;
	}
	*ret = s;
	return 0;
}

static int insert_item(struct store *s, const struct store_item *it)
{
	sqlite3_stmt *st;
	int rc;

	switch (it->kind) {
	case STORE_ITEM_RECORD:
		if (!it->text) {
			return SQLITE_MISUSE; /* never store an unsigned record */
		}
		st = s->ins_record;
		sqlite3_bind_int64(st, 1, (sqlite3_int64)it->seq);
		sqlite3_bind_text(st, 2, it->key, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 3, (sqlite3_int64)it->run_seq);
		sqlite3_bind_blob(st, 4, it->hash, 32, SQLITE_STATIC);
		sqlite3_bind_text(st, 5, it->text, -1, SQLITE_STATIC);
		break;
	case STORE_ITEM_REQUEST:
		st = s->ins_request;
		sqlite3_bind_text(st, 1, it->key, -1, SQLITE_STATIC);
		sqlite3_bind_blob(st, 2, it->digest, 32, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, it->text, -1, SQLITE_STATIC);
		break;
	case STORE_ITEM_CHECKPOINT:
		st = s->ins_checkpoint;
		sqlite3_bind_int64(st, 1, (sqlite3_int64)it->seq);
		sqlite3_bind_text(st, 2, it->text, -1, SQLITE_STATIC);
		break;
	default:
		return SQLITE_MISUSE;
	}
	rc = sqlite3_step(st);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int store_commit(struct store *s, const struct store_item *items, size_t n, char *err, size_t err_size)
{
	int rc;

	rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		return fail(s, rc, err, err_size, "begin");
	}
	for (size_t i = 0; i < n; i++) {
		rc = insert_item(s, &items[i]);
		if (rc != SQLITE_OK) {
			int e = fail(s, rc, err, err_size, "append");
			(void)sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
			return e;
		}
	}
	rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		int e = fail(s, rc, err, err_size, "commit");
		(void)sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
		return e;
	}
	return 0;
}

static int run_records_query(struct store *s, sqlite3_stmt *st, store_record_cb cb, void *userdata)
{
	int rc, r = 0;

	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const void *hash = sqlite3_column_blob(st, 3);
		const char *line = (const char *)sqlite3_column_text(st, 4);
		int line_len = sqlite3_column_bytes(st, 4);
		if (!hash || sqlite3_column_bytes(st, 3) != 32 || !line) {
			r = -EBADMSG;
			break;
		}
		r = cb((uint64_t)sqlite3_column_int64(st, 0), (const char *)sqlite3_column_text(st, 1),
		       (uint64_t)sqlite3_column_int64(st, 2), hash, line, (size_t)line_len, userdata);
		if (r < 0) {
			break;
		}
	}
	if (r >= 0 && rc != SQLITE_DONE && rc != SQLITE_ROW) {
		r = sqlite_to_errno(rc);
	}
	sqlite3_finalize(st);
	return r < 0 ? r : 0;
}

int store_foreach_record(struct store *s, uint64_t from, store_record_cb cb, void *userdata)
{
	sqlite3_stmt *st;
	int rc;

	rc = sqlite3_prepare_v2(s->db,
				"SELECT seq, run_key, run_seq, hash, line FROM records WHERE seq >= ? ORDER BY seq", -1,
				&st, NULL);
	if (rc != SQLITE_OK) {
		return sqlite_to_errno(rc);
	}
	sqlite3_bind_int64(st, 1, (sqlite3_int64)from);
	return run_records_query(s, st, cb, userdata);
}

int store_foreach_run_record(struct store *s, const char *run_key, uint64_t below, store_record_cb cb, void *userdata)
{
	sqlite3_stmt *st;
	int rc;

	rc = sqlite3_prepare_v2(s->db,
				"SELECT seq, run_key, run_seq, hash, line FROM records WHERE run_key = ? AND seq < ?"
				" ORDER BY run_seq",
				-1, &st, NULL);
	if (rc != SQLITE_OK) {
		return sqlite_to_errno(rc);
	}
	sqlite3_bind_text(st, 1, run_key, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 2, below > INT64_MAX ? INT64_MAX : (sqlite3_int64)below);
	return run_records_query(s, st, cb, userdata);
}

int store_get_record(struct store *s, uint64_t seq, char **ret_line)
{
	sqlite3_stmt *st;
	char *line = NULL;
	int rc, r;

	rc = sqlite3_prepare_v2(s->db, "SELECT line FROM records WHERE seq = ?", -1, &st, NULL);
	if (rc != SQLITE_OK) {
		return sqlite_to_errno(rc);
	}
	sqlite3_bind_int64(st, 1, (sqlite3_int64)seq);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		line = strdup((const char *)sqlite3_column_text(st, 0));
		r = line ? 0 : -ENOMEM;
	} else if (rc == SQLITE_DONE) {
		r = -ENOENT;
	} else {
		r = sqlite_to_errno(rc);
	}
	sqlite3_finalize(st);
	if (r == 0) {
		*ret_line = line;
	}
	return r;
}

int store_foreach_request(struct store *s, size_t newest, store_request_cb cb, void *userdata)
{
	sqlite3_stmt *st;
	int rc, r = 0;

	/* Rows are never deleted, so rowids grow by one per request: the newest N are the last N rowids. */
	rc = sqlite3_prepare_v2(s->db,
				"SELECT key, digest, response FROM requests"
				" WHERE ?1 = 0 OR rowid > (SELECT COALESCE(MAX(rowid), 0) FROM requests) - ?1"
				" ORDER BY rowid",
				-1, &st, NULL);
	if (rc != SQLITE_OK) {
		return sqlite_to_errno(rc);
	}
	sqlite3_bind_int64(st, 1, (sqlite3_int64)newest);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const void *d = sqlite3_column_blob(st, 1);
		if (!d || sqlite3_column_bytes(st, 1) != 32) {
			r = -EBADMSG;
			break;
		}
		r = cb((const char *)sqlite3_column_text(st, 0), d, (const char *)sqlite3_column_text(st, 2), userdata);
		if (r < 0) {
			break;
		}
	}
	if (r >= 0 && rc != SQLITE_DONE && rc != SQLITE_ROW) {
		r = sqlite_to_errno(rc);
	}
	sqlite3_finalize(st);
	return r < 0 ? r : 0;
}

int store_get_request(struct store *s, const char *key, uint8_t ret_digest[32], char **ret_response)
{
	sqlite3_stmt *st;
	char *resp = NULL;
	int rc, r;

	rc = sqlite3_prepare_v2(s->db, "SELECT digest, response FROM requests WHERE key = ?", -1, &st, NULL);
	if (rc != SQLITE_OK) {
		return sqlite_to_errno(rc);
	}
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const void *d = sqlite3_column_blob(st, 0);
		if (!d || sqlite3_column_bytes(st, 0) != 32) {
			r = -EBADMSG;
		} else {
			memcpy(ret_digest, d, 32);
			resp = strdup((const char *)sqlite3_column_text(st, 1));
			r = resp ? 0 : -ENOMEM;
		}
	} else if (rc == SQLITE_DONE) {
		r = -ENOENT;
	} else {
		r = sqlite_to_errno(rc);
	}
	sqlite3_finalize(st);
	if (r == 0) {
		*ret_response = resp;
	}
	return r;
}

int store_checkpoint_at_least(struct store *s, uint64_t min_size, uint64_t *ret_size, char **ret_note)
{
	sqlite3_stmt *st;
	char *note = NULL;
	uint64_t size = 0;
	int rc, r;

	rc = sqlite3_prepare_v2(s->db, "SELECT size, note FROM checkpoints WHERE size >= ? ORDER BY size DESC LIMIT 1",
				-1, &st, NULL);
	if (rc != SQLITE_OK) {
		return sqlite_to_errno(rc);
	}
	sqlite3_bind_int64(st, 1, (sqlite3_int64)min_size);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		size = (uint64_t)sqlite3_column_int64(st, 0);
		note = strdup((const char *)sqlite3_column_text(st, 1));
		r = note ? 0 : -ENOMEM;
	} else if (rc == SQLITE_DONE) {
		r = -ENOENT;
	} else {
		r = sqlite_to_errno(rc);
	}
	sqlite3_finalize(st);
	if (r == 0) {
		*ret_size = size;
		*ret_note = note;
	}
	return r;
}
