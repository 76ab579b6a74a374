/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_OBSQ_H
#define TKBOX_DAEMON_OBSQ_H

#include <jansson.h>
#include <stddef.h>

#include "macro.h"

/*
 * The queue of a box's must-keep observations (tkbox.box, and the egress,
 * approval and secret observations that join it): bounded, FIFO, drained to
 * the signer in order by one thread at a time. Fail closed (issue 5): an
 * observation that cannot be queued (OBSQ_MAX pending) or that the signer
 * refuses stops the box and is counted in a tkbox.gap; the daemon does that
 * (daemon.c box_observe_keep), this is the pure container.
 */

#define OBSQ_MAX 4096

struct obsq_item {
	char *kind;
	json_t *data; /* one reference, owned by the queue */
};

struct obsq {
	struct obsq_item *items; /* ring of cap entries */
	size_t cap, head, len;
};

/* cap in 1..OBSQ_MAX, else -EINVAL. */
_wur_ int obsq_init(struct obsq *q, size_t cap);
/* Frees what is still queued; accepts a zeroed (never initialised) queue. */
void obsq_release(struct obsq *q);

/*
 * Append at the back. Takes data's reference whatever the outcome (dropped
 * on failure), so a caller never leaks it. -ENOSPC when cap entries are
 * queued, -EINVAL for a NULL kind or data, -ENOMEM.
 */
_wur_ int obsq_push(struct obsq *q, const char *kind, json_t *data);
/* The oldest entry, or NULL when empty; valid until the next pop/release. */
const struct obsq_item *obsq_peek(const struct obsq *q);
/* Drop the oldest entry (no-op when empty). */
void obsq_pop(struct obsq *q);
/* Drop every entry; returns how many were dropped. */
size_t obsq_clear(struct obsq *q);
size_t obsq_len(const struct obsq *q);

#endif
