/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_EXIT_STATUS_H
#define TKBOX_EXIT_STATUS_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

/*
 * How a command ended, in one shape from the guest agent to the CLI. Each hop
 * encodes it once with its own protocol file: the agent's EXIT message
 * (vmm/agent-proto.c), the supervisor's "done" (daemon/supmsg.c), the exec
 * stream's EXS_EXIT frame (common/exec-stream.c). Killed by SIGKILL is not
 * exit 137: the two stay apart until a shell-style number is asked for.
 */

enum exit_kind {
	EXIT_KIND_EXITED = 0, /* value: the exit code, 0..255 */
	EXIT_KIND_SIGNALED = 1, /* value: the signal, 1..EXIT_MAX_SIGNAL */
};

#define EXIT_MAX_CODE 255
#define EXIT_MAX_SIGNAL 64

struct exit_status {
	enum exit_kind kind;
	uint32_t value;
};

static inline bool exit_status_valid(const struct exit_status *s)
{
	switch (s->kind) {
	case EXIT_KIND_EXITED:
		return s->value <= EXIT_MAX_CODE;
	case EXIT_KIND_SIGNALED:
		return s->value >= 1 && s->value <= EXIT_MAX_SIGNAL;
	default:
		return false;
	}
}

/* The signals a client may send a running command (the exec stream's SIGNAL, the agent's signal). */
static inline bool exit_signal_forwardable(int64_t sig)
{
	return sig == SIGHUP || sig == SIGINT || sig == SIGQUIT || sig == SIGKILL || sig == SIGTERM;
}

/* The number a shell shows: the code, or 128 + the signal. */
static inline int exit_status_shell(const struct exit_status *s)
{
	return s->kind == EXIT_KIND_EXITED ? (int)(s->value & 0xff) : 128 + (int)(s->value & 0x7f);
}

#endif
