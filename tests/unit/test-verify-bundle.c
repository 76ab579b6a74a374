/* SPDX-License-Identifier: Apache-2.0 */
/* The strict bundle (ZIP) reader: every cap one past, names, duplicates, symlinks, lies, truncation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "banned.h"
#include "tb.h"
#include "verify/bundle.h"

static int read_zip(struct zb *z, struct bundle **ret)
{
	const char *why = NULL;
	int r;

	assert_int_equal(zb_finish(z), 0);
	r = bundle_read(buf_ptr(&z->out), buf_len(&z->out), ret, &why);
	if (r < 0) {
		assert_non_null(why);
	}
	return r;
}

static int one_entry(const char *name, const void *p, size_t n, const struct zb_opts *o)
{
	struct bundle *b = NULL;
	struct zb z;
	int r;

	assert_int_equal(zb_init(&z), 0);
	assert_int_equal(zb_add(&z, name, p, n, o), 0);
	r = read_zip(&z, &b);
	bundle_free(b);
	zb_release(&z);
	return r;
}

static void test_valid(void **state)
{
	struct zb_opts stored = { .stored = true }, reg = { .unix_mode = 0100644 };
	const struct bundle_entry *e;
	struct bundle *b = NULL;
	struct zb z;

	(void)state;
	assert_int_equal(zb_init(&z), 0);
	assert_int_equal(zb_add(&z, "manifest.json", "{}", 2, NULL), 0);
	assert_int_equal(zb_add(&z, "runs/a.jsonl", "hello\n", 6, &stored), 0);
	assert_int_equal(zb_add(&z, "empty", "", 0, NULL), 0);
	assert_int_equal(zb_add(&z, "a/.x-_9", "z", 1, &reg), 0);
	assert_int_equal(read_zip(&z, &b), 0);
	assert_int_equal(b->n, 4);
	e = bundle_find(b, "runs/a.jsonl");
	assert_non_null(e);
	assert_int_equal(e->size, 6);
	assert_memory_equal(e->data, "hello\n", 6);
	e = bundle_find(b, "empty");
	assert_non_null(e);
	assert_int_equal(e->size, 0);
	assert_null(bundle_find(b, "nope"));
	bundle_free(b);
	zb_release(&z);
}

static void test_max_entries(void **state)
{
	struct zb_opts stored = { .stored = true };
	struct bundle *b = NULL;
	struct zb z;
	char name[32];

	(void)state;
	assert_int_equal(zb_init(&z), 0);
	for (size_t i = 0; i < BUNDLE_MAX_ENTRIES; i++) {
		snprintf(name, sizeof(name), "f/%05zu", i);
		assert_int_equal(zb_add(&z, name, "", 0, &stored), 0);
	}
	assert_int_equal(read_zip(&z, &b), 0);
	assert_int_equal(b->n, BUNDLE_MAX_ENTRIES);
	bundle_free(b);
	zb_release(&z);

	assert_int_equal(zb_init(&z), 0);
	for (size_t i = 0; i < BUNDLE_MAX_ENTRIES + 1; i++) {
		snprintf(name, sizeof(name), "f/%05zu", i);
		assert_int_equal(zb_add(&z, name, "", 0, &stored), 0);
	}
	b = NULL;
	assert_int_equal(read_zip(&z, &b), -E2BIG);
	assert_null(b);
	zb_release(&z);
}

static void test_duplicate(void **state)
{
	struct bundle *b = NULL;
	struct zb z;

	(void)state;
	assert_int_equal(zb_init(&z), 0);
	assert_int_equal(zb_add(&z, "a", "1", 1, NULL), 0);
	assert_int_equal(zb_add(&z, "b", "2", 1, NULL), 0);
	assert_int_equal(zb_add(&z, "a", "3", 1, NULL), 0);
	assert_int_equal(read_zip(&z, &b), -EEXIST);
	zb_release(&z);
}

static void test_types(void **state)
{
	struct zb_opts link = { .unix_mode = 0120777 }, dir = { .unix_mode = 040755 }, fifo = { .unix_mode = 010644 },
		       reg = { .unix_mode = 0100600 };

	(void)state;
	assert_int_equal(one_entry("a", "target", 6, &link), -ELOOP);
	assert_int_equal(one_entry("a", "", 0, &dir), -ELOOP);
	assert_int_equal(one_entry("a", "", 0, &fifo), -ELOOP);
	assert_int_equal(one_entry("a", "x", 1, &reg), 0);
}

static void test_names(void **state)
{
	static const char *const bad[] = {
		"../x", "/abs", "a/../b", "..",	 ".",	".hidden", "a//b",     "a/", "a\\b",
		"a b",	"a/..", "a/...",  "a/.", "a:b", "a\x01",   "\xc3\xa9", "",
	};
	static const char *const good[] = { "a", "A-_9", "_x", "-x", "a/.x", "a/b.c/d..e", "policies/ab.json" };
	char longname[BUNDLE_MAX_NAME + 2];

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_false(bundle_name_ok(bad[i], strlen(bad[i])));
		if (bad[i][0]) {
			assert_int_equal(one_entry(bad[i], "x", 1, NULL), -EINVAL);
		}
	}
	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		assert_true(bundle_name_ok(good[i], strlen(good[i])));
		assert_int_equal(one_entry(good[i], "x", 1, NULL), 0);
	}
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	assert_false(bundle_name_ok(longname, BUNDLE_MAX_NAME + 1));
	assert_int_equal(one_entry(longname, "x", 1, NULL), -EINVAL);
	longname[BUNDLE_MAX_NAME] = '\0';
	assert_true(bundle_name_ok(longname, BUNDLE_MAX_NAME));
	assert_int_equal(one_entry(longname, "x", 1, NULL), 0);
}

static void test_entry_size(void **state)
{
	uint8_t *zeros = calloc(1, BUNDLE_MAX_ENTRY_SIZE + 1);

	(void)state;
	assert_non_null(zeros);
	assert_int_equal(one_entry("big", zeros, BUNDLE_MAX_ENTRY_SIZE, NULL), 0);
	assert_int_equal(one_entry("big", zeros, BUNDLE_MAX_ENTRY_SIZE + 1, NULL), -E2BIG);
	free(zeros);
}

static void test_total_size(void **state)
{
	struct bundle *b = NULL;
	struct zb z;
	char name[16];

	(void)state;
	/*
	 * Eight entries that claim 64 MiB each: exactly the 512 MiB cap. The cap is
	 * not hit, so the reader goes on to inflate and finds the lie (-EBADMSG).
	 */
	assert_int_equal(zb_init(&z), 0);
	for (size_t i = 0; i < 8; i++) {
		struct zb_opts lie = { .usize_delta = (int32_t)BUNDLE_MAX_ENTRY_SIZE - 1 };

		snprintf(name, sizeof(name), "e%zu", i);
		assert_int_equal(zb_add(&z, name, "x", 1, &lie), 0);
	}
	assert_int_equal(read_zip(&z, &b), -EBADMSG);
	zb_release(&z);
	/* One byte more in total is refused on the declared sizes alone, before any inflation. */
	assert_int_equal(zb_init(&z), 0);
	for (size_t i = 0; i < 8; i++) {
		struct zb_opts lie = { .usize_delta = (int32_t)BUNDLE_MAX_ENTRY_SIZE - 1 };

		snprintf(name, sizeof(name), "e%zu", i);
		assert_int_equal(zb_add(&z, name, "x", 1, &lie), 0);
	}
	assert_int_equal(zb_add(&z, "last", "x", 1, NULL), 0);
	assert_int_equal(read_zip(&z, &b), -E2BIG);
	zb_release(&z);
}

static void test_file_size(void **state)
{
	size_t n = BUNDLE_MAX_FILE + 1;
	struct bundle *b = NULL;
	void *p;

	(void)state;
	/* Untouched anonymous pages: the size is refused before a byte is read. */
	p = mmap(NULL, n, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	assert_true(p != MAP_FAILED);
	assert_int_equal(bundle_read(p, n, &b, NULL), -E2BIG);
	assert_int_equal(bundle_read(p, BUNDLE_MAX_FILE, &b, NULL), -EBADMSG);
	munmap(p, n);
}

static void test_lies(void **state)
{
	struct zb_opts more = { .usize_delta = 1 }, less = { .usize_delta = -1 }, crc = { .bad_crc = true },
		       stored_less = { .stored = true, .usize_delta = -1 };

	(void)state;
	assert_int_equal(one_entry("a", "hello", 5, &more), -EBADMSG);
	assert_int_equal(one_entry("a", "hello", 5, &less), -EBADMSG);
	assert_int_equal(one_entry("a", "hello", 5, &crc), -EBADMSG);
	assert_int_equal(one_entry("a", "hello", 5, &stored_less), -EBADMSG);
}

static void test_structure(void **state)
{
	struct bundle *b = NULL;
	struct zb z;
	uint8_t *p;
	size_t n;

	(void)state;
	assert_int_equal(zb_init(&z), 0);
	assert_int_equal(zb_add(&z, "manifest.json", "{\"a\":1}", 7, NULL), 0);
	assert_int_equal(zb_add(&z, "b", "bbbb", 4, NULL), 0);
	assert_int_equal(zb_finish(&z), 0);
	n = buf_len(&z.out);
	p = malloc(n + 8);
	assert_non_null(p);
	memcpy(p, buf_ptr(&z.out), n);
	/* Every truncation is refused, none crashes. */
	for (size_t k = 0; k < n; k++) {
		assert_true(bundle_read(p, k, &b, NULL) < 0);
	}
	assert_int_equal(bundle_read(p, n, &b, NULL), 0);
	bundle_free(b);
	/* Bytes prepended or appended. */
	memmove(p + 1, p, n);
	p[0] = 'X';
	assert_int_equal(bundle_read(p, n + 1, &b, NULL), -EBADMSG);
	memmove(p, p + 1, n);
	p[n] = 'X';
	assert_int_equal(bundle_read(p, n + 1, &b, NULL), -EBADMSG);
	/* The local header's name differs from the central directory's. */
	p[30] = 'N';
	assert_int_equal(bundle_read(p, n, &b, NULL), -EBADMSG);
	free(p);
	zb_release(&z);
	/* Not a zip at all. */
	assert_int_equal(bundle_read("PK", 2, &b, NULL), -EBADMSG);
	assert_int_equal(bundle_read(NULL, 0, &b, NULL), -EBADMSG);
}

static void test_lines(void **state)
{
	struct bundle_line *l = NULL;
	const char *why = NULL;
	size_t n = 0;
	uint8_t *big;

	(void)state;
	assert_int_equal(bundle_lines((const uint8_t *)"{}\n{\"a\":1}\n", 11, &l, &n, &why), 0);
	assert_int_equal(n, 2);
	assert_int_equal(l[1].n, 7);
	free(l);
	assert_int_equal(bundle_lines((const uint8_t *)"", 0, &l, &n, &why), 0);
	assert_int_equal(n, 0);
	free(l);
	assert_int_equal(bundle_lines((const uint8_t *)"{}\n{}", 5, &l, &n, &why), -EBADMSG);
	assert_int_equal(bundle_lines((const uint8_t *)"{}\n\n{}\n", 7, &l, &n, &why), -EBADMSG);
	assert_int_equal(bundle_lines((const uint8_t *)"\n", 1, &l, &n, &why), -EBADMSG);
	/* BUNDLE_MAX_LINE bytes pass, one more is refused. */
	big = malloc(BUNDLE_MAX_LINE + 2);
	assert_non_null(big);
	memset(big, ' ', BUNDLE_MAX_LINE + 1);
	big[BUNDLE_MAX_LINE] = '\n';
	assert_int_equal(bundle_lines(big, BUNDLE_MAX_LINE + 1, &l, &n, &why), 0);
	free(l);
	big[BUNDLE_MAX_LINE] = ' ';
	big[BUNDLE_MAX_LINE + 1] = '\n';
	assert_int_equal(bundle_lines(big, BUNDLE_MAX_LINE + 2, &l, &n, &why), -E2BIG);
	free(big);
	/* BUNDLE_MAX_LINES lines pass, one more is refused. */
	big = malloc(3 * (BUNDLE_MAX_LINES + 1));
	assert_non_null(big);
	for (size_t i = 0; i <= BUNDLE_MAX_LINES; i++) {
		memcpy(big + 3 * i, "{}\n", 3);
	}
	assert_int_equal(bundle_lines(big, 3 * BUNDLE_MAX_LINES, &l, &n, &why), 0);
	assert_int_equal(n, BUNDLE_MAX_LINES);
	free(l);
	assert_int_equal(bundle_lines(big, 3 * (BUNDLE_MAX_LINES + 1), &l, &n, &why), -E2BIG);
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid),	   cmocka_unit_test(test_max_entries),
		cmocka_unit_test(test_duplicate),  cmocka_unit_test(test_types),
		cmocka_unit_test(test_names),	   cmocka_unit_test(test_entry_size),
		cmocka_unit_test(test_total_size), cmocka_unit_test(test_file_size),
		cmocka_unit_test(test_lies),	   cmocka_unit_test(test_structure),
		cmocka_unit_test(test_lines),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
