/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VERIFY_SCHEMA_H
#define TKBOX_VERIFY_SCHEMA_H

#include <jansson.h>

#include "macro.h"

/*
 * Tracekit's event schema v2 (tracekit/schema/tracekit.event.v2.json in the
 * public Cygnux-Labs/Tracekit repository, at EVENT_SCHEMA_COMMIT), as one
 * table of rules in schema.c: the closed top level, then `data` by `type`
 * (every $defs entry: required keys, closed key sets, types, enums, consts,
 * full-match ASCII patterns, minLength/maxLength in code points, maxItems,
 * minimum/maximum, oneOf).
 *
 * API contract
 *   - Pure: no I/O, no logging, no globals written. 0 / -errno.
 *   - event_schema_check returns 0 when ev is valid under the schema, else
 *     -EBADMSG with the first problem in why, named by its path the way
 *     Tracekit's verifier names it ("event.data: missing required
 *     'binding'"). why may be NULL.
 *   - event_binding_check: what the schema says in words and the verifier
 *     does not check, for tkbox's own verdict: in approval.request,
 *     binding_digest is "sha256:" + hex(SHA-256(JCS(binding))) and the
 *     binding names this record's approval_id, tenant and run_id. 0 for any
 *     other type. -EBADMSG with why; -ENOMEM.
 */

#define EVENT_SCHEMA_COMMIT "687a96cad5b1ac4857ce1f363d7077327da13809"
#define EVENT_SCHEMA_WHY_MAX 256

_wur_ int event_schema_check(const json_t *ev, char *why, size_t why_size);
_wur_ int event_binding_check(const json_t *ev, char *why, size_t why_size);

#endif
