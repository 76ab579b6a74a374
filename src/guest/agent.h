/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_GUEST_AGENT_H
#define TKBOX_GUEST_AGENT_H

#include "macro.h"

/*
 * The guest side of the agent RPC (vmm/agent-proto.h): a single-threaded poll
 * loop over the tkbox.agent port, the children's pipes and a signalfd for
 * SIGCHLD. PID 1 reaps every child here, including orphans it never started.
 */

/* A command's PATH when the box environment has none. */
#define GUEST_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* The host's clock (AGENT_MSG_CLOCK): an offset under this is slewed (adjtime), a larger one stepped. */
#define GUEST_CLOCK_SLEW_MAX_MS 500
/* A clock step larger than this is written to the console. */
#define GUEST_CLOCK_LOG_STEP_MS 1000

struct guest_agent_config {
	int port_fd; /* tkbox.agent, opened O_RDWR|O_NONBLOCK|O_CLOEXEC; owned by the loop */
	char **base_env; /* the box environment from the boot config (NULL-terminated), borrowed */
	/*
	 * Closed by the loop once its first PONG is written to the host (the
	 * agent is up: the self-test waits for it), owned by the loop; -1: none.
	 */
	int ready_fd;
	/*
	 * The workspace overlay's lower and upper directories (O_PATH), opened
	 * before the chroot hid them; the patch producer (guest/diff.h) reads
	 * them in a forked child. Borrowed; -1: no workspace overlay.
	 */
	int ws_lower_fd;
	int ws_upper_fd;
};

/*
 * Run until the host asks for shutdown (returns 0: the caller syncs and powers
 * off) or a fatal local error (-errno).
 */
_wur_ int guest_agent_run(const struct guest_agent_config *cfg);

#endif
