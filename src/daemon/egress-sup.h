/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_EGRESS_SUP_H
#define TKBOX_DAEMON_EGRESS_SUP_H

#include <poll.h>

#include "daemon/supmsg.h"
#include "vmm/egress-proto.h"

/*
 * The host end of the tkbox.egress mux and the proxy, in the per-box
 * supervisor (docs/egress.md "The host proxy (supervisor)"). One struct per
 * box, fixed caps, non-blocking: the supervisor's loop polls the fds
 * egress_sup_fill lists and hands the results to egress_sup_handle.
 *
 * Each stream the guest opens is one request: its head is parsed
 * (egress_head_parse); a bad head is answered here (400/403 as DATA, CLOSE 2,
 * egress_refused to the daemon), a good one is asked (egress_open). The
 * daemon answers egress_refuse (the response is written, CLOSE 2) or
 * egress_dial with the socket it dialled: a CONNECT tunnel forwards nothing
 * before the whole ClientHello is read and checked (and the second one after
 * a HelloRetryRequest); an absolute-form request goes in origin form with
 * "Connection: close". Bytes are relayed with the mux's credit; the end is
 * egress_done. A guest that breaks the mux protocol ends the box's egress:
 * egress_sup_handle returns -EPROTO and egress_sup_violation says why.
 */

#define EGRESS_SUP_SLOTS SUPMON_MAX_CONNS /* streams and conns waiting for the daemon, together */
#define EGRESS_SUP_POLL_MAX (1 + EGRESS_SUP_SLOTS) /* the port and one socket per slot */
#define EGRESS_SUP_FRAMES_PER_TURN 256 /* guest frames handled before the rest of the supervisor gets a turn */
#define EGRESS_SUP_OUT_MAX ((size_t)4 << 20) /* bytes queued towards the guest */
#define EGRESS_SUP_OUT_DATA_MAX ((size_t)1 << 20) /* no more origin bytes are read past this queue */
#define EGRESS_SUP_STOPPING "the box is stopping (egress closed)"
#define EGRESS_SUP_REFUSED_PER_S 10 /* the proxy's own refusals told one by one a second; then one summary */

struct egress_sup;

/* How the proxy talks to the daemon: send one message (through the supervisor's monitor). */
struct egress_sup_host {
	int (*send)(void *ctx, const struct supmsg *m);
	void *ctx;
};

/* port: the tkbox.egress channel (made non-blocking; not owned: the VM closes it). */
_wur_ int egress_sup_new(int port, const struct egress_sup_host *host, struct egress_sup **ret);

/* Closes every tunnel socket. Accepts NULL. */
void egress_sup_free(struct egress_sup *e);

/* The fds to poll now, at most max (EGRESS_SUP_POLL_MAX holds all): the port first. */
size_t egress_sup_fill(struct egress_sup *e, struct pollfd *p, size_t max);

/*
 * The results of the poll over what egress_sup_fill listed (p[0..n) as it
 * wrote them). 0, or -EPROTO (the guest broke the protocol) or -ECONNRESET
 * (the port closed): the box's egress is over, stop the box.
 */
_wur_ int egress_sup_handle(struct egress_sup *e, const struct pollfd *p, size_t n);

/*
 * Milliseconds until the proxy has something to tell the daemon without any
 * fd being ready (the summary of refusals held back this second), or -1.
 */
int egress_sup_timeout(const struct egress_sup *e);

/* True when guest bytes already read wait for the next turn (poll with a zero timeout). */
bool egress_sup_pending(const struct egress_sup *e);

/* Why the guest's egress was refused (the tracker's rule), or NULL. */
const char *egress_sup_violation(const struct egress_sup *e);

/*
 * A daemon message for the proxy: egress_dial (*fd is taken: set to -1) or
 * egress_refuse. -EINVAL for any other operation.
 */
_wur_ int egress_sup_message(struct egress_sup *e, const struct supmsg *m, int *fd);

/*
 * A stop begins: every tunnel is cut (CLOSE 3, the socket closed,
 * egress_done "the box is stopping"), later OPENs are refused. Conns still
 * waiting for the daemon stay until it answers.
 */
void egress_sup_stop(struct egress_sup *e);

/*
 * The one HTTP response every refusal the box reads is built by (status
 * 400/403/502/503/504, the rule for Tkbox-Rule, the message as the body,
 * prefixed "tkbox egress: " when it is not; a "tkbox approve ID" in it gives
 * Tkbox-Approval). Appended to out.
 */
_wur_ int egress_sup_response(int64_t status, const char *rule, const char *message, struct buf *out);

/* While stopping: read the port without waiting (refuse OPENs, answer CLOSEs) and flush what is queued. */
void egress_sup_drain(struct egress_sup *e);

#endif
