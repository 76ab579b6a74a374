/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_COMMON_SECMEM_H
#define TKBOX_COMMON_SECMEM_H

#include <stddef.h>

/*
 * Memory for secret values: its own anonymous mapping, excluded from core
 * dumps (MADV_DONTDUMP) and locked when the limit allows (mlock, best
 * effort), wiped (explicit_bzero) before it is unmapped. NULL on failure
 * (errno set). Sizes are rounded up to pages; n 0 is EINVAL.
 */
void *secmem_alloc(size_t n);
void secmem_free(void *p, size_t n);

/* A copy of p[0..n) in secmem (NULL on failure). */
void *secmem_dup(const void *p, size_t n);

#endif
