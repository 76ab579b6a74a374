/* SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "frame.h"
#include "vmm/agent-proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * The agent message decoder (guest -> host and host -> guest); the boot
 * config has its own target (fuzz-boot-config.c). The first byte picks the
 * frame type. Every message that
 * decodes must re-encode, and the re-encoding must decode to the same kind,
 * id and payload.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct agent_msg m, m2;
	const uint8_t *p;
	size_t n;
	uint8_t type, type2;
	struct buf enc;

	if (size < 1) {
		return 0;
	}
	type = data[0];
	data++;
	size--;
	if (agent_msg_decode(type, data, size, &m) != 0) {
		return 0;
	}
	if (buf_init(&enc, FRAME_MAX_PAYLOAD + FRAME_HEADER_SIZE, 0) < 0) {
		abort();
	}
	if (agent_msg_encode(&m, &enc) < 0) {
		abort();
	}
	if (frame_decode_one(buf_ptr(&enc), buf_len(&enc), FRAME_MAX_PAYLOAD, &type2, &p, &n) < 0 || type2 != type) {
		abort();
	}
	if (agent_msg_decode(type2, p, n, &m2) != 0 || m2.id != m.id || m2.argc != m.argc || m2.envc != m.envc ||
	    m2.data_len != m.data_len || (m.data_len && memcmp(m.data, m2.data, m.data_len) != 0) ||
	    m2.clock_sec != m.clock_sec || m2.clock_nsec != m.clock_nsec || m2.bytes != m.bytes ||
	    m2.n_notices != m.n_notices) {
		abort();
	}
	for (size_t i = 0; i < 2 * m.n_notices; i++) {
		if (strcmp(m.notices[i], m2.notices[i]) != 0) {
			abort();
		}
	}
	for (size_t i = 0; i < m.argc; i++) {
		if (strcmp(m.argv[i], m2.argv[i]) != 0) {
			abort();
		}
	}
	agent_msg_release(&m2);
	agent_msg_release(&m);
	buf_release(&enc);
	return 0;
}
