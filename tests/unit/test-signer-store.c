/* SPDX-License-Identifier: Apache-2.0 */
/* The record store (src/signer/store.c): atomic group commits, append-only tables, reads. */
#include <setjmp.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "signer/store.h"

#include "banned.h"

static char dir[64], db[128];

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/tks-store.XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(db, sizeof(db), "%s/store.db", dir);
	return 0;
}

static int teardown(void **state)
{
	char cmd[160];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
	return 0;
}

static struct store_item rec(uint64_t seq, const char *key, uint64_t run_seq)
{
	struct store_item it = { .kind = STORE_ITEM_RECORD, .seq = seq, .run_seq = run_seq };
	it.key = strdup(key);
	assert_true(asprintf(&it.text, "{\"line\":%llu}", (unsigned long long)seq) > 0);
	memset(it.hash, (int)seq, sizeof(it.hash));
	return it;
}

static int count_cb(uint64_t seq, const char *run_key, uint64_t run_seq, const uint8_t hash[32], const char *line,
		    size_t line_len, void *userdata)
{
	uint64_t *n = userdata;
	assert_int_equal(hash[0], (uint8_t)seq);
	(*n)++;
	return 0;
}

static void release(struct store_item *items, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		store_item_release(&items[i]);
	}
}

static void test_commit_and_read(void **state)
{
	struct store *s = NULL;
	struct store_item items[4];
	char err[256], *line = NULL, *note = NULL;
	uint64_t n = 0, size = 0;

	assert_int_equal(store_open(db, true, &s, err, sizeof(err)), 0);
	items[0] = rec(0, "t/a", 0);
	items[1] = rec(1, "t/b", 0);
	items[2] = rec(2, "t/a", 1);
	items[3] = (struct store_item){ .kind = STORE_ITEM_CHECKPOINT, .seq = 3, .text = strdup("note3") };
	assert_int_equal(store_commit(s, items, 4, err, sizeof(err)), 0);
	release(items, 4);
	assert_int_equal(store_foreach_record(s, 0, count_cb, &n), 0);
	assert_int_equal(n, 3);
	n = 0;
	assert_int_equal(store_foreach_run_record(s, "t/a", 100, count_cb, &n), 0);
	assert_int_equal(n, 2);
	n = 0;
	assert_int_equal(store_foreach_run_record(s, "t/a", 2, count_cb, &n), 0); /* seq < 2 only */
	assert_int_equal(n, 1);
	assert_int_equal(store_get_record(s, 1, &line), 0);
	assert_string_equal(line, "{\"line\":1}");
	free(line);
	assert_int_equal(store_get_record(s, 9, &line), -ENOENT);
	assert_int_equal(store_checkpoint_at_least(s, 3, &size, &note), 0);
	assert_int_equal(size, 3);
	assert_string_equal(note, "note3");
	free(note);
	assert_int_equal(store_checkpoint_at_least(s, 4, &size, &note), -ENOENT);
	store_close(s);
}

static void test_group_commit_is_atomic(void **state)
{
	struct store *s = NULL;
	struct store_item items[3];
	char err[256];
	uint64_t n = 0;

	assert_int_equal(store_open(db, true, &s, err, sizeof(err)), 0);
	items[0] = rec(0, "t/a", 0);
	assert_int_equal(store_commit(s, items, 1, err, sizeof(err)), 0);
	release(items, 1);
	/* A batch whose last item collides (seq 0 again) is refused as a whole. */
	items[0] = rec(1, "t/a", 1);
	items[1] = rec(2, "t/a", 2);
	items[2] = rec(0, "t/a", 3);
	assert_true(store_commit(s, items, 3, err, sizeof(err)) < 0);
	assert_true(strlen(err) > 0);
	release(items, 3);
	assert_int_equal(store_foreach_record(s, 0, count_cb, &n), 0);
	assert_int_equal(n, 1);
	store_close(s);
}

static void test_append_only(void **state)
{
	struct store *s = NULL;
	struct store_item items[3];
	char err[256];
	sqlite3 *h;

	assert_int_equal(store_open(db, true, &s, err, sizeof(err)), 0);
	items[0] = rec(0, "t/a", 0);
	items[1] = (struct store_item){ .kind = STORE_ITEM_REQUEST, .key = strdup("0:r"), .text = strdup("{}") };
	items[2] = (struct store_item){ .kind = STORE_ITEM_CHECKPOINT, .seq = 1, .text = strdup("n") };
	assert_int_equal(store_commit(s, items, 3, err, sizeof(err)), 0);
	release(items, 3);
	store_close(s);
	/* Another writer of the same file cannot edit or delete a record: triggers refuse it. */
	assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
	assert_int_not_equal(sqlite3_exec(h, "UPDATE records SET line = 'x' WHERE seq = 0", NULL, NULL, NULL),
			     SQLITE_OK);
	assert_int_not_equal(sqlite3_exec(h, "DELETE FROM records", NULL, NULL, NULL), SQLITE_OK);
	assert_int_not_equal(sqlite3_exec(h, "DELETE FROM requests", NULL, NULL, NULL), SQLITE_OK);
	assert_int_not_equal(sqlite3_exec(h, "UPDATE checkpoints SET note = ''", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(h);
}

static int req_cb(const char *key, const uint8_t digest[32], const char *response, void *userdata)
{
	char *seen = userdata;
	size_t n = strlen(seen);

	assert_int_equal(digest[0], (uint8_t)key[2]);
	assert_true(n + 2 < 16);
	seen[n] = key[2];
	seen[n + 1] = '\0';
	return 0;
}

/* Idempotent replies: the newest N load oldest first (the service keeps those), any one is found by key. */
static void test_requests(void **state)
{
	struct store *s = NULL;
	struct store_item items[5];
	char err[256], seen[16] = "", *resp = NULL;
	uint8_t digest[32];

	assert_int_equal(store_open(db, true, &s, err, sizeof(err)), 0);
	for (size_t i = 0; i < 5; i++) {
		items[i] = (struct store_item){ .kind = STORE_ITEM_REQUEST };
		assert_true(asprintf(&items[i].key, "0:%c", (char)('a' + i)) > 0);
		assert_true(asprintf(&items[i].text, "{\"n\":%zu}", i) > 0);
		memset(items[i].digest, 'a' + (int)i, sizeof(items[i].digest));
	}
	assert_int_equal(store_commit(s, items, 5, err, sizeof(err)), 0);
	release(items, 5);
	assert_int_equal(store_foreach_request(s, 0, req_cb, seen), 0);
	assert_string_equal(seen, "abcde");
	seen[0] = '\0';
	assert_int_equal(store_foreach_request(s, 2, req_cb, seen), 0);
	assert_string_equal(seen, "de");
	seen[0] = '\0';
	assert_int_equal(store_foreach_request(s, 9, req_cb, seen), 0);
	assert_string_equal(seen, "abcde");
	assert_int_equal(store_get_request(s, "0:b", digest, &resp), 0);
	assert_int_equal(digest[31], 'b');
	assert_string_equal(resp, "{\"n\":1}");
	free(resp);
	assert_int_equal(store_get_request(s, "0:z", digest, &resp), -ENOENT);
	assert_int_equal(store_get_request(s, "1:b", digest, &resp), -ENOENT);
	store_close(s);
}

static void test_wal_mode(void **state)
{
	struct store *s = NULL;
	char err[256];
	sqlite3 *h;
	sqlite3_stmt *st;

	assert_int_equal(store_open(db, true, &s, err, sizeof(err)), 0);
	assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(h, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
	sqlite3_finalize(st);
	sqlite3_close(h);
	store_close(s);
	/* A reader never creates a store. */
	snprintf(db, sizeof(db), "%s/missing.db", dir);
	assert_true(store_open(db, false, &s, err, sizeof(err)) < 0);
	snprintf(db, sizeof(db), "%s/store.db", dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_commit_and_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_group_commit_is_atomic, setup, teardown),
		cmocka_unit_test_setup_teardown(test_append_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wal_mode, setup, teardown),
		cmocka_unit_test_setup_teardown(test_requests, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
