/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VERIFY_VERIFY_H
#define TKBOX_VERIFY_VERIFY_H

#include <jansson.h>

#include "buf.h"
#include "macro.h"

/*
 * The offline verifier of Tracekit format v2 bundles (format-v2.md section 11,
 * verdicts.md): bundle bytes + trust config bytes -> a report of check lines,
 * an integrity verdict, an assurance level and an exit code.
 *
 * API contract
 *   - verify_bundle is pure (no I/O, no logging, no clock) and never fails
 *     because of the bundle's content: any content problem becomes a FAIL
 *     line. It returns < 0 only when memory runs out (-ENOMEM).
 *   - Exit codes: 0 verified; 1 a check failed (FAILED); 2 trust config or
 *     bundle unusable (UNUSABLE BUNDLE) or too new (UNVERIFIABLE); 3 with
 *     opts->strict when nothing failed but a line is a warning.
 *   - Check names are Tracekit's: trust config, bundle readable, manifest,
 *     checkpoint, witness quorum, rekor anchor, keys, bundle structure,
 *     signatures, run chain, inclusion, policy snapshot, run-set, then the
 *     informational lines policy, coverage, tiers, args source, isolation,
 *     fail-open classes, key assurance, break-glass approvals.
 *   - Strings from the bundle are quoted (log_quote) before they reach a
 *     detail.
 */

/* The Tracekit verifier version whose behaviour tkbox verify follows (for verifier_min_version). */
#define VERIFY_COMPAT_VERSION "1.0.0"
#define VERIFY_MAX_CHECKS 48

enum check_status {
	CHECK_PASS,
	CHECK_WARN,
	CHECK_FAIL,
};

struct verify_check {
	const char *name; /* static */
	enum check_status status;
	char *detail;
};

struct verify_report {
	struct verify_check checks[VERIFY_MAX_CHECKS];
	size_t n_checks;
	size_t failures;
	size_t warnings;
	int exit_code;
	char *integrity; /* "VERIFIED", "VERIFIED TO HEAD n (open)", "FAILED", "UNUSABLE BUNDLE", "UNVERIFIABLE (...)" */
	char *assurance; /* "dev; records ed25519; ..." or NULL when integrity is not established */
	char *isolation; /* the run's signer_isolation, or NULL */
};

struct verify_opts {
	bool strict;
};

_wur_ int verify_bundle(const void *bundle, size_t n, const void *trust, size_t trust_n, const struct verify_opts *opts,
			struct verify_report *ret);
void verify_report_release(struct verify_report *r);

/* "[PASS] name — detail" lines, then "Integrity: X." and "Assurance: Y.", appended to out. */
_wur_ int verify_report_text(const struct verify_report *r, struct buf *out);
/* {"exit_code","checks":[{"check","status","detail","problems"}],"failures","warnings","integrity","assurance","notes"} */
_wur_ int verify_report_json(const struct verify_report *r, json_t **ret);

#endif
