/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VMM_BOOT_PROTO_H
#define TKBOX_VMM_BOOT_PROTO_H

#include "buf.h"
#include "vmm/agent-proto.h"

/*
 * The boot config: served once by the host (src/vmm/vm.c) over the
 * tkbox.boot port and read by the guest's PID 1 (src/guest/main.c) before it
 * mounts anything. The exchange is three frames (types in agent-proto.h):
 * the guest sends AGENT_MSG_BOOT_REQUEST {}, the host answers with one
 * AGENT_MSG_BOOT_CONFIG, the guest acknowledges with AGENT_MSG_BOOT_ACK {}.
 *
 * The config is a strict JSON object with a closed key set, every member
 * required but ca_pem:
 *   {box_id, hostname, env[], clock_sec, clock_nsec, vcpus, mem_mib, entropy[8], ca_pem?}
 * Compiled into the host and the static guest; pure (no I/O, no logging).
 */

#define BOOT_MAX_JSON AGENT_MAX_JSON /* the config's bytes (= the frame cap) */
#define BOOT_MAX_ENV 1024 /* base environment entries */
#define BOOT_MAX_STRING (64u * 1024) /* one env entry */
#define BOOT_MAX_BOX_ID 64
#define BOOT_MAX_HOSTNAME 63
#define BOOT_MAX_VCPUS 256
#define BOOT_MIN_MEM_MIB 64
#define BOOT_MAX_MEM_MIB (1 << 20)
#define BOOT_ENTROPY_WORDS 8
#define BOOT_MAX_CA_PEM (16u * 1024) /* ca_pem's bytes (= EGRESS_CA_PEM_MAX) */

struct boot_config {
	char *box_id; /* [A-Za-z0-9._-]{1,64} */
	char *hostname; /* 1..63 bytes, [A-Za-z0-9-] */
	char **env; /* NULL-terminated, "K=V": the box's base environment */
	size_t envc;
	int64_t clock_sec; /* host CLOCK_REALTIME at launch */
	int64_t clock_nsec;
	int64_t vcpus;
	int64_t mem_mib;
	/*
	 * Host randomness credited to the guest kernel's pool at boot: without it
	 * the CRNG of a TCG guest is not ready for seconds and the first
	 * /dev/urandom or getrandom() reader stalls.
	 */
	uint32_t entropy[BOOT_ENTROPY_WORDS];
	/*
	 * The box's CA certificate (PEM: printable ASCII and newlines, from a
	 * "-----BEGIN CERTIFICATE-----" line to an "-----END CERTIFICATE-----"
	 * line), which the guest installs where the box's TLS clients look; NULL
	 * when the box has none (the member absent, or "" on the wire).
	 */
	char *ca_pem;
};

/* Free what a decoded config owns; accepts a zeroed struct. */
void boot_config_release(struct boot_config *c);

/*
 * Decode an AGENT_MSG_BOOT_CONFIG payload: -EBADMSG for malformed content or a
 * value out of range, -E2BIG past a cap, -ENOENT for a missing member. On
 * success *ret owns its strings.
 */
_wur_ int boot_config_decode(const uint8_t *p, size_t n, struct boot_config *ret);

/* Append one AGENT_MSG_BOOT_CONFIG frame; -EINVAL for a config the decoder would refuse. */
_wur_ int boot_config_encode(const struct boot_config *c, struct buf *out);

#endif
