/* SPDX-License-Identifier: Apache-2.0 */
/* The guest's hand-written SHA-1 (src/guest/sha1.c) against OpenSSL's, and git's blob ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/sha.h>

#include "guest/sha1.h"
#include "macro.h"

/* Every length from 0 to 1000 (all padding cases), fed whole and in odd pieces. */
static void test_against_openssl(void **state)
{
	static uint8_t data[1000];
	uint8_t want[SHA1_DIGEST_SIZE], got[SHA1_DIGEST_SIZE];

	(void)state;
	for (size_t i = 0; i < sizeof(data); i++) {
		data[i] = (uint8_t)(i * 131 + 7);
	}
	for (size_t n = 0; n <= sizeof(data); n++) {
		struct sha1_ctx c;
		SHA1(data, n, want);
		sha1_init(&c);
		sha1_update(&c, data, n);
		sha1_final(&c, got);
		assert_memory_equal(want, got, sizeof(want));
		sha1_init(&c);
		for (size_t off = 0; off < n;) {
			size_t take = MIN(n - off, (off % 7) + 1);
			sha1_update(&c, data + off, take);
			off += take;
		}
		sha1_final(&c, got);
		assert_memory_equal(want, got, sizeof(want));
	}
}

/* git's names for the empty blob and "hello\n" (git hash-object). */
static void test_git_blob(void **state)
{
	char hex[41];

	(void)state;
	sha1_git_blob_hex("", 0, hex);
	assert_string_equal(hex, "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
	sha1_git_blob_hex("hello\n", 6, hex);
	assert_string_equal(hex, "ce013625030ba8dba906f756967f9e9ca394464a");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_against_openssl),
		cmocka_unit_test(test_git_blob),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
