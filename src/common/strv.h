/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_STRV_H
#define TKBOX_STRV_H

#include "macro.h"

/* NULL-terminated arrays of strings (argv, env): the one place that frees them. */

static inline void strv_free(char **v)
{
	for (char **p = v; p && *p; p++) {
		free(*p);
	}
	free(v);
}

static inline void strv_freep(char ***v)
{
	strv_free(*v);
}
#define _cleanup_strv_ _cleanup_(strv_freep)

#endif
