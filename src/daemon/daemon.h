/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_DAEMON_H
#define TKBOX_DAEMON_DAEMON_H

#include "macro.h"

/*
 * tkbox daemon: the API socket, the box registry, one supervisor per box,
 * and the command door (every exec decided by the signer first).
 *
 * State directory layout (D, 0700):
 *   D/api/tkbox.sock          the API socket (directory 0700, socket 0600)
 *   D/boxes/NAME/box.json     what a box is (no secret; the run token is kept in memory only)
 *   D/boxes/NAME/events.jsonl its events (JSON lines, capped)
 *   D/images/assets/          guest kernel and modules (src/vmm)
 *   D/images/local/           ext4 images built from local directories
 */

/* Limits and their defaults (docs/limits.md). */
#define DAEMON_DEFAULT_MAX_BOXES 8
#define DAEMON_MAX_MAX_BOXES 256
#define DAEMON_DEFAULT_MAX_EXECS 64 /* per box; the guest refuses past 64 too */
#define DAEMON_DEFAULT_LIFETIME_S 3600
#define DAEMON_DEFAULT_EXEC_TIMEOUT_S 1800
#define DAEMON_MAX_LIFETIME_S (7 * 24 * 3600)
#define DAEMON_DEFAULT_VCPUS 2
#define DAEMON_DEFAULT_MEM_MIB 2048
#define DAEMON_DEFAULT_DISK_MIB 4096
#define DAEMON_MAX_DISK_MIB (1024 * 1024)
#define DAEMON_MAX_BOX_ENV 256
#define DAEMON_MAX_OPT_PATH 4096 /* --registry-auth / --registry-ca path length */
#define DAEMON_APPROVAL_WAIT_MS 120000
/* How long apply and export wait for an apply that is ending before they answer apply_busy. */
#define DAEMON_APPLY_SETTLE_MS 5000
/* Each signer call (connect and hello included) ends by this deadline; approval_wait gets its own wait on top. */
#define DAEMON_DEFAULT_SIGNER_TIMEOUT_S 10
#define DAEMON_MAX_SIGNER_TIMEOUT_S 600
#define DAEMON_EXPORT_TIMEOUT_S 300 /* the signer writes a whole bundle */
#define DAEMON_BOOT_TIMEOUT_S 180
#define DAEMON_STOP_TIMEOUT_S 40
#define DAEMON_SELFTEST_TIMEOUT_S 60 /* a create waits this long for the box's TLS self-test and clock */
#define DAEMON_SELFTEST_NOCA_TIMEOUT_S 10 /* ... for a box without a CA: the guest only reports its clock */
#define DAEMON_REQUEST_TIMEOUT_S 30
#define DAEMON_MAX_CONNECTIONS 256
/* Events file caps: daemon/events.h. */

struct egress_door_config;

struct daemon_opts {
	const char *state_dir;
	const char *signer_socket; /* NULL: $TKBOX_SIGNER_SOCKET, else the dev signer's default */
	const char *accel; /* auto|kvm|tcg */
	bool unrecorded;
	unsigned max_boxes;
	unsigned max_execs;
	unsigned signer_timeout_s; /* 0: DAEMON_DEFAULT_SIGNER_TIMEOUT_S */
	unsigned observe_queue; /* a box's must-keep queue cap, 1..OBSQ_MAX; 0: OBSQ_MAX */
	const char *guest_bin; /* NULL: next to the tkbox binary */
	const char *kernel; /* with modules_dir: instead of the asset cache */
	const char *modules_dir;
	/* The network door: --egress-block, --egress-allow-private, --resolve (copied at start; NULL: none). */
	const struct egress_door_config *egress;
	/* --egress-ca: extra trust anchors (PEM) for origins the proxy verifies when it terminates TLS; NULL: none. */
	const char *egress_ca;
};

/* Run the daemon until SIGTERM/SIGINT; returns the exit status. */
int daemon_run(const struct daemon_opts *o);

/* The state directory: $TKBOX_STATE_DIR, else ~/.local/state/tkbox, else /var/lib/tkbox (a static string or env). */
const char *daemon_default_state_dir(void);

/* The API socket path under a state dir (new string). */
_wur_ int daemon_socket_path(const char *state_dir, char **ret);

/* The guest agent's binary name, and where it is: next to this binary, else ../libexec/tkbox/ (new string). */
#define DAEMON_GUEST_NAME "tkbox-guest-linux-amd64"
_wur_ int daemon_find_guest(char **ret);

#endif
