/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_BANNED_H
#define TKBOX_BANNED_H

/*
 * The headers that declare the banned functions come first, so that their
 * (possibly inline) definitions are seen before the macros below; a later
 * #include of them is then a no-op behind its include guard.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Included first in every tkbox source file (after system headers that need
 * the real prototypes). Functions with no bound or with hidden state are
 * turned into compile errors, as git's banned.h does: a call to one of them
 * names an undeclared identifier and -Werror stops the build.
 */

#undef strcpy
#define strcpy(x, y) sorry_strcpy_is_banned_use_snprintf_or_memcpy
#undef strcat
#define strcat(x, y) sorry_strcat_is_banned
#undef strncpy
#define strncpy(x, y, n) sorry_strncpy_is_banned
#undef strncat
#define strncat(x, y, n) sorry_strncat_is_banned
#undef sprintf
#define sprintf(...) sorry_sprintf_is_banned_use_snprintf
#undef vsprintf
#define vsprintf(...) sorry_vsprintf_is_banned_use_vsnprintf
#undef strtok
#define strtok(x, y) sorry_strtok_is_banned_use_strtok_r
#undef gets
#define gets(x) sorry_gets_is_banned
#undef atoi
#define atoi(x) sorry_atoi_is_banned_use_parse_u64
#undef atol
#define atol(x) sorry_atol_is_banned_use_parse_u64
#undef atoll
#define atoll(x) sorry_atoll_is_banned_use_parse_u64

#endif
