/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_SUP_DIFF_H
#define TKBOX_DAEMON_SUP_DIFF_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "daemon/supmsg.h"
#include "vmm/agent-client.h"

/*
 * The supervisor's side of a diff (issue 14; docs/patch.md): the daemon asks
 * (supmsg diff N), the guest makes /workspace's patch (AGENT_MSG_DIFF), its
 * DIFF_DATA lands in memory (at most PATCH_MAX_BYTES), and at DIFF_END the
 * strict parser reads it (patch_parse), its sha256 is taken and a sealed
 * memfd of exactly those bytes goes to the daemon with diff_done ok. Every
 * other end is diff_done not ok with a reason a person can act on: the cap,
 * the parser's refusal, the guest's ERROR (escaped), SUP_DIFF_TIMEOUT_S, the
 * box stopping. What the guest still sends of an answered diff is dropped.
 * Frames for no diff, a second end or a byte count that is not the data's
 * are protocol violations (agent-client.c cuts the guest off).
 */

#define SUP_DIFF_TIMEOUT_S 300 /* a diff the guest has not answered by then is answered not ok; the box goes on */

struct sup_diff {
	int64_t n; /* the daemon's diff number, 0: none pending */
	struct buf data; /* the patch so far */
	uint64_t deadline_ms;
	/* How diff_done goes to the daemon (the supervisor's send: the monitor, ipc with fds). */
	int (*send)(void *ctx, const struct supmsg *m, const int *fds);
	void *ctx;
};

void sup_diff_init(struct sup_diff *d, int (*send)(void *ctx, const struct supmsg *m, const int *fds), void *ctx);

/* The daemon asks for diff n (the monitor let it through: none pending): AGENT_MSG_DIFF goes to the guest. */
void sup_diff_start(struct sup_diff *d, struct agent_client *agent, int64_t n, uint64_t now_ms);

/* An agent event: true when it was the diff's (DIFF_DATA, DIFF_END, the diff's ERROR), handled here. */
bool sup_diff_event(struct sup_diff *d, const struct agent_event *ev);

/* The pending diff ends without a patch: diff_done not ok with why (nothing when none is pending). */
void sup_diff_fail(struct sup_diff *d, const char *why);

/* When the pending diff times out (CLOCK_MONOTONIC ms), 0 when none is pending. */
uint64_t sup_diff_deadline(const struct sup_diff *d);

void sup_diff_release(struct sup_diff *d);

#endif
