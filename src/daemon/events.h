/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_EVENTS_H
#define TKBOX_DAEMON_EVENTS_H

#include "macro.h"

/*
 * The caps of a box's events file (JSON lines): egress and signer-problem
 * lines stop at EVENTS_SOFT_CAP bytes; every line stops at EVENTS_HARD_CAP,
 * and the first line refused there stops the box (a box whose events cannot
 * be kept does not go on). Pure bookkeeping: the daemon writes.
 */

#define EVENTS_SOFT_CAP ((uint64_t)64 << 20)
#define EVENTS_HARD_CAP ((uint64_t)256 << 20)
#define EVENTS_MAX_LINE 4096 /* longer lines are cut to this many bytes */

enum events_class {
	EVENTS_LIFECYCLE = 0, /* lifecycle, commands, refusals */
	EVENTS_PROBLEM, /* egress and signer problems: the first to stop */
};

enum events_verdict {
	EVENTS_WRITE = 0, /* write it (the byte count is already taken) */
	EVENTS_DROP, /* do not write it */
	EVENTS_STOP_BOX, /* do not write it, and stop the box: the file reached its hard cap */
};

struct events_cap {
	uint64_t bytes;
	bool soft_full;
	bool hard_full;
};

/* May a line of len bytes (newline included) be written? Updates c. */
enum events_verdict events_admit(struct events_cap *c, enum events_class cls, size_t len);

#endif
