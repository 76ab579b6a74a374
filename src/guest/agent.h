/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_GUEST_AGENT_H
#define TKBOX_GUEST_AGENT_H

#include "macro.h"

/*
 * The guest side of the agent RPC (vmm/agent-proto.h): a single-threaded poll
 * loop over the tkbox.agent port, the children's pipes and a signalfd for
 * SIGCHLD. PID 1 reaps every child here, including orphans it never started.
 */

struct guest_agent_config {
	int port_fd; /* tkbox.agent, opened O_RDWR|O_NONBLOCK|O_CLOEXEC; owned by the loop */
	char **base_env; /* the box environment from the boot config (NULL-terminated), borrowed */
};

/*
 * Run until the host asks for shutdown (returns 0: the caller syncs and powers
 * off) or a fatal local error (-errno).
 */
_wur_ int guest_agent_run(const struct guest_agent_config *cfg);

#endif
