/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_CLOCK_H
#define TKBOX_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Milliseconds on CLOCK_MONOTONIC: the one clock deadlines are computed on. */
static inline uint64_t clock_mono_ms(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

#endif
