/* SPDX-License-Identifier: Apache-2.0 */
#include "banned.h"
#include "daemon/events.h"

enum events_verdict events_admit(struct events_cap *c, enum events_class cls, size_t len)
{
	if (c->hard_full || (cls == EVENTS_PROBLEM && c->soft_full)) {
		return EVENTS_DROP;
	}
	if (c->bytes + len > EVENTS_HARD_CAP) {
		c->hard_full = true;
		c->soft_full = true;
		return EVENTS_STOP_BOX;
	}
	if (cls == EVENTS_PROBLEM && c->bytes + len > EVENTS_SOFT_CAP) {
		c->soft_full = true;
		return EVENTS_DROP;
	}
	c->bytes += len;
	return EVENTS_WRITE;
}
