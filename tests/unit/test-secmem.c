/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "banned.h"
#include "secmem.h"

/* Secret memory (src/common/secmem.c): its own mapping, out of core dumps, unmapped whole on free. */

static size_t page(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

/* The VmFlags line of the mapping holding p, from /proc/self/smaps ("" when none). */
static void vmflags_of(const void *p, char *ret, size_t ret_size)
{
	FILE *f = fopen("/proc/self/smaps", "re");
	char line[512];
	bool inside = false;

	assert_non_null(f);
	ret[0] = '\0';
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
			inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
		} else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
			(void)snprintf(ret, ret_size, "%s", line + 8);
			break;
		}
	}
	(void)fclose(f);
}

/* Is the page holding p still mapped? (mincore says ENOMEM for an unmapped range.) */
static bool mapped(const void *p)
{
	unsigned char vec;
	void *pg = (void *)((uintptr_t)p & ~(uintptr_t)(page() - 1));

	if (mincore(pg, page(), &vec) == 0) {
		return true;
	}
	assert_int_equal(errno, ENOMEM);
	return false;
}

static void test_alloc_free(void **state)
{
	const size_t sizes[] = { 1, 6, 4096, page() - 16, page() - 15, page(), 3 * page() + 1 };
	(void)state;

	errno = 0;
	assert_null(secmem_alloc(0));
	assert_int_equal(errno, EINVAL);
	secmem_free(NULL, 12); /* accepted */

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];
		uint8_t *p = secmem_alloc(n);
		char flags[256];

		assert_non_null(p);
		/* every byte asked for is there (a short mapping would fault) */
		memset(p, 0xa5, n);
		assert_int_equal(p[n - 1], 0xa5);
		/* excluded from core dumps: VmFlags "dd" */
		vmflags_of(p, flags, sizeof(flags));
		assert_non_null(strstr(flags, " dd"));
		assert_true(mapped(p) && mapped(p + n - 1));
		/* freed with the caller's n: every page of it is gone */
		secmem_free(p, n);
		assert_false(mapped(p));
		assert_false(mapped(p + n - 1));
	}
}

static void test_dup(void **state)
{
	static const char v[] = "ghp_0123456789";
	uint8_t *p;
	(void)state;

	p = secmem_dup(v, sizeof(v) - 1);
	assert_non_null(p);
	assert_memory_equal(p, v, sizeof(v) - 1);
	assert_ptr_not_equal(p, v);
	secmem_free(p, sizeof(v) - 1);
	errno = 0;
	assert_null(secmem_dup(v, 0));
	assert_int_equal(errno, EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_alloc_free),
		cmocka_unit_test(test_dup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
