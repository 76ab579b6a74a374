/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "banned.h"
#include "macro.h"
#include "secmem.h"

/*
 * Each allocation is its own anonymous private mapping. Its first
 * SECMEM_HEADER bytes record the mapping's length (the size rounding), so
 * secmem_free(p, n) with the caller's n unmaps exactly what was mapped and
 * a wrong n is caught instead of leaving pages behind unwiped.
 */
#define SECMEM_HEADER 16
#define SECMEM_MAGIC 0x746b7365636d656dull /* "tksecmem" */

struct secmem_header {
	uint64_t magic;
	uint64_t map_len;
};

static size_t secmem_page(void)
{
	long ps = sysconf(_SC_PAGESIZE);
	return ps > 0 ? (size_t)ps : 4096;
}

void *secmem_alloc(size_t n)
{
	size_t page = secmem_page(), need, map_len;
	struct secmem_header *h;
	void *base;

	if (n == 0) {
		errno = EINVAL;
		return NULL;
	}
	if (size_add(n, SECMEM_HEADER, &need) < 0 || size_add(need, page - 1, &map_len) < 0) {
		errno = ENOMEM;
		return NULL;
	}
	map_len -= map_len % page;
	base = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED) {
		return NULL;
	}
	/* Never fail open: memory that would land in a core dump is refused. */
	if (madvise(base, map_len, MADV_DONTDUMP) < 0) {
		int saved = errno;
		(void)munmap(base, map_len);
		errno = saved;
		return NULL;
	}
	/* Best effort: RLIMIT_MEMLOCK may be small; the pages are still out of dumps. */
	(void)mlock(base, map_len);
	h = base;
	h->magic = SECMEM_MAGIC;
	h->map_len = map_len;
	return (uint8_t *)base + SECMEM_HEADER;
}

void secmem_free(void *p, size_t n)
{
	struct secmem_header *h;
	size_t map_len;

	if (!p) {
		return;
	}
	h = (struct secmem_header *)((uint8_t *)p - SECMEM_HEADER);
	/* A pointer not from secmem_alloc, or an n larger than the allocation, is a programmer error. */
	if (h->magic != SECMEM_MAGIC || n > h->map_len - SECMEM_HEADER) {
		abort();
	}
	map_len = h->map_len;
	explicit_bzero(h, map_len);
	(void)munlock(h, map_len);
	(void)munmap(h, map_len);
}

void *secmem_dup(const void *p, size_t n)
{
	void *q = secmem_alloc(n);

	if (q) {
		memcpy(q, p, n);
	}
	return q;
}
