/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_CLI_CLIUTIL_H
#define TKBOX_CLI_CLIUTIL_H

#include "macro.h"

/* Pure parsers of command-line values (unit-tested). -EINVAL malformed, -ERANGE out of [min, max]. */

/* "90", "90s", "15m", "1h", "2d" -> seconds. */
_wur_ int cli_parse_duration(const char *s, uint64_t min, uint64_t max, uint64_t *ret);
/* "2048" (MiB), "512M", "2G", "2GiB", "1T" -> MiB. */
_wur_ int cli_parse_mib(const char *s, uint64_t min, uint64_t max, uint64_t *ret);
/* Decimal, no sign, no leading/trailing junk. */
_wur_ int cli_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *ret);

/* "FILE.tkb" -> "FILE.trust.json"; any other name -> "NAME.trust.json". New string. */
_wur_ int cli_trust_path(const char *bundle, char **ret);

#endif
