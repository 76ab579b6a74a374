/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "cli/cliutil.h"

/* Digits then a suffix; the value must not overflow. */
static int number_suffix(const char *s, uint64_t *ret_v, const char **ret_suffix)
{
	uint64_t v = 0;
	size_t i = 0;

	if (!s || s[0] < '0' || s[0] > '9') {
		return -EINVAL;
	}
	for (; s[i] >= '0' && s[i] <= '9'; i++) {
		if (i >= 18) {
			return -ERANGE;
		}
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*ret_v = v;
	*ret_suffix = s + i;
	return 0;
}

int cli_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *ret)
{
	const char *suf;
	uint64_t v;
	int r = number_suffix(s, &v, &suf);

	if (r < 0) {
		return r;
	}
	if (*suf) {
		return -EINVAL;
	}
	if (v < min || v > max) {
		return -ERANGE;
	}
	*ret = v;
	return 0;
}

int cli_parse_duration(const char *s, uint64_t min, uint64_t max, uint64_t *ret)
{
	const char *suf;
	uint64_t v, mul;
	int r = number_suffix(s, &v, &suf);

	if (r < 0) {
		return r;
	}
	if (!*suf || strcmp(suf, "s") == 0) {
		mul = 1;
	} else if (strcmp(suf, "m") == 0) {
		mul = 60;
	} else if (strcmp(suf, "h") == 0) {
		mul = 3600;
	} else if (strcmp(suf, "d") == 0) {
		mul = 86400;
	} else {
		return -EINVAL;
	}
	if (__builtin_mul_overflow(v, mul, &v) || v < min || v > max) {
		return -ERANGE;
	}
	*ret = v;
	return 0;
}

int cli_parse_mib(const char *s, uint64_t min, uint64_t max, uint64_t *ret)
{
	const char *suf;
	uint64_t v, mul;
	int r = number_suffix(s, &v, &suf);

	if (r < 0) {
		return r;
	}
	if (!*suf || strcmp(suf, "M") == 0 || strcmp(suf, "MiB") == 0) {
		mul = 1;
	} else if (strcmp(suf, "G") == 0 || strcmp(suf, "GiB") == 0) {
		mul = 1024;
	} else if (strcmp(suf, "T") == 0 || strcmp(suf, "TiB") == 0) {
		mul = 1024 * 1024;
	} else {
		return -EINVAL;
	}
	if (__builtin_mul_overflow(v, mul, &v) || v < min || v > max) {
		return -ERANGE;
	}
	*ret = v;
	return 0;
}

int cli_trust_path(const char *bundle, char **ret)
{
	size_t n = strlen(bundle);
	char *p = NULL;

	if (n > 4 && strcmp(bundle + n - 4, ".tkb") == 0) {
		n -= 4;
	}
	if (asprintf(&p, "%.*s.trust.json", (int)n, bundle) < 0) {
		return -ENOMEM;
	}
	*ret = p;
	return 0;
}
