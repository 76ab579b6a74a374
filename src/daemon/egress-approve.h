/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_EGRESS_APPROVE_H
#define TKBOX_DAEMON_EGRESS_APPROVE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/crossing.h"
#include "macro.h"

/*
 * Box approvals for the network door: a person on the host lets one box
 * reach one host:port. The agent cannot answer: the answer comes through the
 * daemon's API socket (tkbox approve / reject), which is host-only.
 *
 * One table for the daemon. Each pending approval has a random id
 * ("ap-" and 12 hex digits), its box, target and url, and expires
 * EGRESS_APPROVAL_WAIT_MS after it was asked. An approved host:port joins the
 * box's approved set for the rest of the box's life: a later ask for it
 * passes at once, with no new record. Asks for a target already pending join
 * that approval (one id, one record).
 *
 * An approval is recorded as tkbox.approval through the box's must-keep
 * observation (crossing_host_ops.observe_keep) by the thread that answers it,
 * before any waiter is told it passed; one that cannot be recorded lets
 * nothing through (the host stops the box).
 *
 * Locking: the table has its own mutex, never held while a host callback
 * runs; egress_approve_box_stop may be called with the daemon's lock held.
 */

#define EGRESS_APPROVAL_ID_MAX 16 /* "ap-" + 12 hex + NUL */
#define EGRESS_APPROVAL_WAIT_MS 120000 /* unanswered: refused after 2 minutes */
#define EGRESS_APPROVAL_MAX_PENDING 16 /* per box */
#define EGRESS_APPROVAL_MAX_PER_MIN 30 /* new approvals per box in any 60 s */
#define EGRESS_APPROVAL_MAX_APPROVED 1024 /* approved host:port targets per box */
#define EGRESS_APPROVAL_KEEP_MS 600000 /* an answered or expired id is still known (409) this long */

/*
 * Ask a person to let this box reach host:port (url: what the signer decided,
 * for the person). Blocks up to wait_ms (EGRESS_APPROVAL_WAIT_MS; tests pass
 * less). ret_id gets the approval's id ("" when none was made). Returns:
 *   0          approved (now, or earlier in this box's life), and
 *              tkbox.approval was recorded before this returns;
 *   -EPERM     rejected, expired, the 17th pending for the box, the 31st new
 *              in a minute, or the box's approved set is full (why says
 *              which, and what a person can do);
 *   -EIO       approved, but the record could not be kept: nothing passes;
 *   -ECANCELED the box is stopping (egress_approve_box_stop);
 *   -ENOMEM, -EINVAL (a bad argument).
 */
_wur_ int egress_approve_ask(struct crossing *x, const char *box, const char *host, uint16_t port, const char *url,
			     int64_t wait_ms, char ret_id[EGRESS_APPROVAL_ID_MAX], char *why, size_t why_size);

/*
 * The same, and *ret_rule (static) names what refused, for the refusal's
 * Tkbox-Rule and the door's tkbox.egress record: approval-rejected,
 * approval-expired, approval-pending-limit, approval-rate-limit,
 * approval-approved-limit, approval-not-recorded, box-stopping ("" when it
 * passed).
 */
_wur_ int egress_approve_ask_rule(struct crossing *x, const char *box, const char *host, uint16_t port, const char *url,
				  int64_t wait_ms, char ret_id[EGRESS_APPROVAL_ID_MAX], char *why, size_t why_size,
				  const char **ret_rule);

/*
 * The box is stopping: every pending ask of it returns -ECANCELED, and so
 * does every later one until the name is forgotten or a new box of that name
 * starts (egress_approve_box_start).
 */
void egress_approve_box_stop(const char *box);

/*
 * A new box takes this name (tkbox run): whatever an earlier box of the name
 * left (a stop mark, an approved set, answered ids: a box whose creation
 * failed, or one removed while the name was taken again) is forgotten, so
 * the new box starts with nothing approved and not stopping. The daemon
 * calls it once the name is reserved, before the box can ask.
 */
void egress_approve_box_start(const char *box);

/* The box is removed: drop its approved set, its stop mark and its answered ids. */
void egress_approve_box_forget(const char *box);

/*
 * The GET /v1/approvals body: {approvals: [{id, box, target, url, age_s,
 * expires_in_s, waiting}]}, pending ones only (waiting: the connections that
 * wait for it).
 */
json_t *egress_approve_list(void);

/*
 * A person's answer (approver: "uid:N" of the API caller). state gets
 * "approved" or "rejected". -ENOENT: no such id; -EALREADY: already answered,
 * expired or cancelled (state gets which); -EIO: approved but tkbox.approval
 * could not be recorded (nothing passes, the box is stopped; state
 * "not_recorded").
 */
_wur_ int egress_approve_answer(const char *id, bool approve, const char *approver, char *state, size_t n);

#endif
