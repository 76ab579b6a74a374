/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_IPC_H
#define TKBOX_DAEMON_IPC_H

#include <jansson.h>

#include "buf.h"
#include "daemon/supmsg.h"

/*
 * One JSON message per SOCK_SEQPACKET datagram, with up to IPC_MAX_FDS file
 * descriptors (SCM_RIGHTS). Used between the daemon and its supervisors.
 */

#define IPC_MAX_FDS 2

/* Send v compactly (at most SUPMSG_MAX bytes) with nfds fds. */
_wur_ int ipc_send(int sock, const json_t *v, const int *fds, size_t nfds);

/*
 * Send m through the monitor: supmon_check(dir), the one encoder
 * (supmsg_encode), ipc_send with supmsg_fds(m) fds from fds[], then
 * supmon_apply. -EPROTO (with *ret_why) for a message the monitor's table
 * does not allow now; nothing is sent then. The caller serializes access to
 * mon (the daemon holds g.lock).
 */
_wur_ int ipc_send_msg(int sock, struct supmon *mon, enum supmsg_dir dir, const struct supmsg *m, const int *fds,
		       const char **ret_why);

/*
 * Receive one message into out (reset first; max_size must hold SUPMSG_MAX).
 * Received fds go to fds[] (O_CLOEXEC) and their count to *ret_nfds; more
 * than max_fds, a truncated message or truncated control data is -EPROTO
 * (every received fd is closed). 0 bytes read with no error is -ECONNRESET.
 */
_wur_ int ipc_recv(int sock, struct buf *out, int *fds, size_t max_fds, size_t *ret_nfds);

#endif
