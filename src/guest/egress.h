/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_GUEST_EGRESS_H
#define TKBOX_GUEST_EGRESS_H

#include "macro.h"

/*
 * The box's end of the network door: a forwarder on 127.0.0.1:3128 in the
 * guest. It speaks no HTTP: each accepted TCP connection becomes one stream
 * of the tkbox.egress mux (vmm/egress-proto.h) and its bytes travel as DATA
 * both ways; the host's proxy reads the request head. One single-threaded
 * poll loop, non-blocking everywhere, run in its own process forked by PID 1
 * so that a crash cannot take down PID 1 or the exec agent.
 *
 * Per stream: OPEN, then nothing until the host answers; OPEN_OK opens the
 * credit (EGRESS_INITIAL_WINDOW each way) and the forwarder keeps what the
 * host may send at most GUEST_EGRESS_WINDOW ahead of what the client has
 * read; OPEN_REFUSED becomes an HTTP 503 to the client. The 257th connection
 * (EGRESS_MAX_STREAMS) gets a 503 naming the limit without an OPEN.
 */

#define GUEST_EGRESS_PORT 3128
#define GUEST_EGRESS_PORT_NAME "tkbox.egress"
/* Bytes of host DATA a stream buffers for a slow client: the credit the forwarder grants the host. */
#define GUEST_EGRESS_WINDOW ((size_t)1024 * 1024)
/* Refused or finished connections whose answer is still being written (beyond the 256 streams). */
#define GUEST_EGRESS_MAX_DRAINING 32

/*
 * Run the forwarder over port_fd (tkbox.egress, opened O_RDWR|O_NONBLOCK) and
 * listen_fd (a listening TCP socket, non-blocking). Both stay the caller's.
 * Returns only when the mux ends: -EPROTO when the host broke the protocol
 * (every client is closed; the host stops the box), -EPIPE when the host end
 * closed, another -errno on a local failure.
 */
_wur_ int guest_egress_run(int port_fd, int listen_fd);

/* A non-blocking TCP listener on 127.0.0.1:port (0: any free port, for tests). */
_wur_ int guest_egress_listen(uint16_t port, int *ret_fd);

/*
 * Fork the forwarder's process over port_fd (tkbox.egress; the parent keeps
 * and may close its copy). The child waits for the host end to connect,
 * listens on 127.0.0.1:3128 and runs guest_egress_run; it logs to /dev/kmsg.
 * Returns the child's pid (PID 1 reaps it like any child) or -errno.
 */
_wur_ int guest_egress_start(int port_fd);

/*
 * When the root below rootfd has etc/apt, write
 * etc/apt/apt.conf.d/99tkbox-proxy naming the forwarder as apt's HTTP and
 * HTTPS proxy. No symlink is followed (a planted one is replaced, never
 * written through). 1: written, 0: no etc/apt, -ELOOP: a symlink on the way,
 * -errno otherwise.
 */
_wur_ int guest_egress_write_apt_proxy(int rootfd);

#endif
