/* SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "vmm/assets.h"
#include "vmm/vm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * The host's parsers of bytes it reads while preparing a box: a bzImage
 * header, a module's ELF .modinfo, apt-cache output, the kernel log and
 * /proc/cpuinfo. The first byte picks the parser; results must lie inside
 * the input.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off, len;
	uint64_t khz;
	char *s = NULL;

	if (size < 1) {
		return 0;
	}
	switch (data[0] % 5) {
	case 0:
		if (bzimage_lz4_payload(data + 1, size - 1, &off, &len) == 0 &&
		    (off > size - 1 || len > size - 1 - off)) {
			abort();
		}
		break;
	case 1:
		if (modinfo_depends(data + 1, size - 1, &s) == 0 && strlen(s) >= size) {
			abort();
		}
		break;
	case 2:
		if (apt_depends_parse((const char *)data + 1, size - 1, &s) == 0 && strlen(s) > 128) {
			abort();
		}
		break;
	case 3:
		(void)tsc_khz_from_kmsg((const char *)data + 1, size - 1, &khz);
		break;
	case 4:
		(void)tsc_khz_from_cpuinfo((const char *)data + 1, size - 1, &khz);
		break;
	default:
		break;
	}
	free(s);
	return 0;
}
