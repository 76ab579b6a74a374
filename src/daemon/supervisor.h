/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_SUPERVISOR_H
#define TKBOX_DAEMON_SUPERVISOR_H

#include "macro.h"

/*
 * The per-box supervisor: a process of its own (the daemon forks and execs
 * `tkbox daemon --supervise`, with the socketpair on fd SUPERVISOR_FD). It
 * owns the box's QEMU and agent channel and the exec streams the daemon hands
 * it, and answers the closed set of requests in supmsg.h. It parses guest
 * bytes, so it holds no signer connection, no run token and no other box.
 * When the daemon goes away (its end of the socketpair closes) it stops the
 * VM and exits.
 */

#define SUPERVISOR_FD 3
#define SUPERVISOR_ARG "--supervise"
#define SUPERVISOR_EXEC_OUT_MAX ((size_t)8 << 20) /* output queued for one slow client before the command is killed */
#define SUPERVISOR_MAX_EXECS 64
/*
 * Output queued for all of a box's clients together: past it the command of
 * the client with the most queued (the slowest reader) is killed, so 64
 * stalled clients cannot hold 64 x 8 MiB.
 */
#define SUPERVISOR_BOX_OUT_MAX ((size_t)32 << 20)

/* Runs the supervisor on fd; returns the process exit status. */
int supervisor_main(int fd);

#endif
