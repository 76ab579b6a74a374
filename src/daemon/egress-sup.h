/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_EGRESS_SUP_H
#define TKBOX_DAEMON_EGRESS_SUP_H

#include <poll.h>

#include "daemon/supmsg.h"
#include "egress/ca.h"
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
 *
 * Issue 13 (docs/secrets.md): a dial with inspect terminates TLS on both
 * sides (a leaf from the box's CA towards the box, a verified client towards
 * the origin) and the plaintext goes through egress_insp: the bound header
 * swapped only after the daemon kept its use (secret_use, secret_ok), leaks
 * refused (403 secret-leak, secret_leak), responses redacted, model calls
 * told (model_call). A box with secrets has its absolute-form requests read
 * the same way (no TLS, no swap). The self-test host
 * (EGRESS_SELFTEST_HOST) is served here and never asked of the daemon.
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

/* True when guest frames already read, or bytes for the guest that can go now, wait for the next turn (poll with a zero timeout). */
bool egress_sup_pending(const struct egress_sup *e);

/* Why the guest's egress was refused (the tracker's rule), or NULL. */
const char *egress_sup_violation(const struct egress_sup *e);

/*
 * The box's CA and the client context origins are verified with (both taken,
 * freed with the proxy; both NULL: the box has no CA). Set once, before the
 * first dial: without a CA no dial is inspected and the self-test host is
 * refused.
 */
void egress_sup_tls(struct egress_sup *e, struct egress_ca *ca, SSL_CTX *client);

/*
 * A daemon message for the proxy: egress_dial (*fd is taken: set to -1),
 * egress_refuse, secrets (*fd, the sealed memfd with the values, is read and
 * closed: set to -1) or secret_ok. -EINVAL for any other operation; after
 * a secrets message that does not load, every dial the proxy would read is
 * refused (503 secrets-failed).
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
