/* SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "frame.h"
#include "vmm/boot-proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool same(const struct boot_config *a, const struct boot_config *b)
{
	if (strcmp(a->box_id, b->box_id) != 0 || strcmp(a->hostname, b->hostname) != 0 || a->envc != b->envc ||
	    a->clock_sec != b->clock_sec || a->clock_nsec != b->clock_nsec || a->vcpus != b->vcpus ||
	    a->mem_mib != b->mem_mib || memcmp(a->entropy, b->entropy, sizeof(a->entropy)) != 0 ||
	    !a->ca_pem != !b->ca_pem || (a->ca_pem && strcmp(a->ca_pem, b->ca_pem) != 0)) {
		return false;
	}
	for (size_t i = 0; i < a->envc; i++) {
		if (strcmp(a->env[i], b->env[i]) != 0) {
			return false;
		}
	}
	return true;
}

/*
 * The boot config decoder (the guest's PID 1 runs it on the host's bytes).
 * A config that decodes must re-encode as one AGENT_MSG_BOOT_CONFIG frame,
 * and that frame must decode to the same config.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct boot_config c, c2;
	const uint8_t *p;
	uint8_t type;
	size_t n;
	struct buf enc;

	if (boot_config_decode(data, size, &c) != 0) {
		return 0;
	}
	if (buf_init(&enc, FRAME_MAX_PAYLOAD + FRAME_HEADER_SIZE, 0) < 0 || boot_config_encode(&c, &enc) < 0) {
		abort();
	}
	if (frame_decode_one(buf_ptr(&enc), buf_len(&enc), FRAME_MAX_PAYLOAD, &type, &p, &n) < 0 ||
	    type != AGENT_MSG_BOOT_CONFIG || boot_config_decode(p, n, &c2) != 0 || !same(&c, &c2)) {
		abort();
	}
	boot_config_release(&c2);
	boot_config_release(&c);
	buf_release(&enc);
	return 0;
}
