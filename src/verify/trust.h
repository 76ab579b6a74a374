/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VERIFY_TRUST_H
#define TKBOX_VERIFY_TRUST_H

#include "macro.h"
#include "verify/note.h"

/*
 * The verifier's pinned trust config: Tracekit's trust.json (format-v2.md
 * section 10), parsed strictly.
 *
 *   {"logs": ["<log vkey>", ...],                       required, non-empty
 *    "algs": ["ed25519", ...],                          required, non-empty
 *    "witnesses": [{"vkey": "<vkey>", "class": "public|customer|tracekit|operator"}],   optional
 *    "witnesses_required": n,                           optional, default 0
 *    "rekor": {"trusted_root": {...}, "publishing_key": "<b64 SPKI>", "class": "..."}, optional
 *    "monitors": [{"vkey": "...", "class": "...", "max_age_s": n}]}                     optional
 *
 * No other key. Log vkeys must be Ed25519 (type 0x01); a hybrid SLH-DSA log
 * key (type 0xff) is refused (-EPROTONOSUPPORT): tkbox verify cannot check
 * it and must not silently ignore a pinned key. Witness vkeys are type 0x04
 * (or 0x01). rekor and monitors are accepted and recorded, but tkbox verify
 * does not check anchors or monitor reports (the report says so).
 *
 * trust_parse is pure; errors -EBADMSG / -E2BIG / -EPROTONOSUPPORT with a
 * static reason in ret_why.
 */

#define TRUST_MAX_BYTES ((size_t)1 << 20)
#define TRUST_MAX_LOGS 16
#define TRUST_MAX_WITNESSES 32
#define TRUST_MAX_ALGS 8

enum witness_class {
	WITNESS_PUBLIC,
	WITNESS_CUSTOMER,
	WITNESS_TRACEKIT,
	WITNESS_OPERATOR,
};

struct trust {
	/* keys[0..n_logs) are the log keys, keys[n_logs..n_logs+n_witnesses) the witnesses. */
	struct note_vkey keys[TRUST_MAX_LOGS + TRUST_MAX_WITNESSES];
	size_t n_logs;
	size_t n_witnesses;
	enum witness_class wclass[TRUST_MAX_WITNESSES];
	bool alg_ed25519; /* "ed25519" is in algs */
	int64_t witnesses_required;
	bool has_rekor;
	bool has_monitors;
};

_wur_ int trust_parse(const void *p, size_t n, struct trust *ret, const char **ret_why);
void trust_release(struct trust *t);
const char *witness_class_name(enum witness_class c);

#endif
