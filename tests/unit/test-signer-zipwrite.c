/* SPDX-License-Identifier: Apache-2.0 */
/* The bundle ZIP writer (src/signer/zipwrite.c), read back with libarchive. */
#include <archive.h>
#include <archive_entry.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "signer/zipwrite.h"

#include "banned.h"

static void test_roundtrip(void **state)
{
	struct buf out = { 0 };
	struct zipwrite z;
	struct archive *a;
	struct archive_entry *e;
	char *big = malloc(300000), got[64];
	int n = 0;

	assert_non_null(big);
	for (size_t i = 0; i < 300000; i++) {
		big[i] = (char)('a' + (i * 7) % 26);
	}
	assert_int_equal(buf_init(&out, 16 << 20, 0), 0);
	assert_int_equal(zipwrite_init(&z, &out), 0);
	assert_int_equal(zipwrite_add(&z, "manifest.json", "{}", 2), 0);
	assert_int_equal(zipwrite_add(&z, "runs/abc.jsonl", big, 300000), 0);
	assert_int_equal(zipwrite_add(&z, "empty", "", 0), 0);
	assert_int_equal(zipwrite_finish(&z), 0);
	assert_int_equal(zipwrite_add(&z, "late", "x", 1), -EINVAL);
	zipwrite_release(&z);

	a = archive_read_new();
	assert_int_equal(archive_read_support_format_zip(a), ARCHIVE_OK);
	assert_int_equal(archive_read_open_memory(a, buf_ptr(&out), buf_len(&out)), ARCHIVE_OK);
	while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
		const char *name = archive_entry_pathname(e);
		assert_true(archive_entry_filetype(e) == AE_IFREG);
		if (strcmp(name, "runs/abc.jsonl") == 0) {
			char *data = malloc(300001);
			la_ssize_t k, tot = 0;
			assert_non_null(data);
			while ((k = archive_read_data(a, data + tot, 300001 - (size_t)tot)) > 0) {
				tot += k;
			}
			assert_int_equal(tot, 300000);
			assert_memory_equal(data, big, 300000);
			free(data);
		} else if (strcmp(name, "manifest.json") == 0) {
			assert_int_equal(archive_read_data(a, got, sizeof(got)), 2);
			assert_memory_equal(got, "{}", 2);
		} else {
			assert_string_equal(name, "empty");
			assert_int_equal(archive_read_data(a, got, sizeof(got)), 0);
		}
		n++;
	}
	assert_int_equal(n, 3);
	archive_read_free(a);
	buf_release(&out);
	free(big);
}

static void test_names(void **state)
{
	assert_true(zipwrite_name_ok("manifest.json"));
	assert_true(zipwrite_name_ok("runs/0123abcdef.jsonl"));
	assert_true(zipwrite_name_ok("_a/-b/c.d"));
	assert_false(zipwrite_name_ok(""));
	assert_false(zipwrite_name_ok(".hidden"));
	assert_false(zipwrite_name_ok("/abs"));
	assert_false(zipwrite_name_ok("a//b"));
	assert_false(zipwrite_name_ok("a/"));
	assert_false(zipwrite_name_ok("a/../b"));
	assert_false(zipwrite_name_ok("a/./b"));
	assert_false(zipwrite_name_ok("a/..."));
	assert_false(zipwrite_name_ok("a b"));
	assert_false(zipwrite_name_ok("a\\b"));
}

static void test_duplicate_and_bad(void **state)
{
	struct buf out = { 0 };
	struct zipwrite z;

	assert_int_equal(buf_init(&out, 1 << 20, 0), 0);
	assert_int_equal(zipwrite_init(&z, &out), 0);
	assert_int_equal(zipwrite_add(&z, "a", "1", 1), 0);
	assert_int_equal(zipwrite_add(&z, "a", "2", 1), -EEXIST);
	assert_int_equal(zipwrite_add(&z, "../a", "2", 1), -EINVAL);
	zipwrite_release(&z);
	buf_release(&out);
}

static void test_max_entries(void **state)
{
	struct buf out = { 0 };
	struct zipwrite z;
	char name[32];

	assert_int_equal(buf_init(&out, 64 << 20, 0), 0);
	assert_int_equal(zipwrite_init(&z, &out), 0);
	for (int i = 0; i < ZIPWRITE_MAX_ENTRIES; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		assert_int_equal(zipwrite_add(&z, name, "x", 1), 0);
	}
	assert_int_equal(zipwrite_add(&z, "one-past", "x", 1), -E2BIG);
	assert_int_equal(zipwrite_finish(&z), 0);
	zipwrite_release(&z);
	buf_release(&out);
}

static void test_max_entry_size(void **state)
{
	struct buf out = { 0 };
	struct zipwrite z;
	char *big = calloc(1, ZIPWRITE_MAX_ENTRY_SIZE + 1);

	assert_non_null(big);
	assert_int_equal(buf_init(&out, 128 << 20, 0), 0);
	assert_int_equal(zipwrite_init(&z, &out), 0);
	assert_int_equal(zipwrite_add(&z, "big", big, ZIPWRITE_MAX_ENTRY_SIZE + 1), -E2BIG);
	assert_int_equal(zipwrite_add(&z, "big", big, ZIPWRITE_MAX_ENTRY_SIZE), 0);
	zipwrite_release(&z);
	buf_release(&out);
	free(big);
}

static void test_output_cap(void **state)
{
	struct buf out = { 0 };
	struct zipwrite z;
	char data[4096];

	uint32_t x = 12345;

	/* Incompressible bytes (an LCG's high bits): the deflated member cannot fit in 1 KiB. */
	for (size_t i = 0; i < sizeof(data); i++) {
		x = x * 1103515245u + 12345u;
		data[i] = (char)(x >> 24);
	}
	assert_int_equal(buf_init(&out, 1024, 0), 0);
	assert_int_equal(zipwrite_init(&z, &out), 0);
	assert_int_equal(zipwrite_add(&z, "x", data, sizeof(data)), -E2BIG);
	zipwrite_release(&z);
	buf_release(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),	  cmocka_unit_test(test_names),
		cmocka_unit_test(test_duplicate_and_bad), cmocka_unit_test(test_max_entries),
		cmocka_unit_test(test_max_entry_size),	  cmocka_unit_test(test_output_cap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
