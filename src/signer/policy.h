/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_SIGNER_POLICY_H
#define TKBOX_SIGNER_POLICY_H

#include <stddef.h>

#include <jansson.h>

#include "macro.h"

/*
 * The signer's policy engine (issue 3, "Policy"; docs/policy.md). A policy is
 * a YAML document with three rule lists, `deny`, `ask` and `flag` (Tracekit
 * policy v2 shape). Each rule has:
 *   id        (required) unique across the policy, [A-Za-z0-9._-]{1,64}
 *   pattern   (required) POSIX ERE (regcomp), searched unanchored in each
 *             subject; backreferences and what RE2 reads differently are refused
 *   tool      (optional) POSIX ERE that must match the WHOLE tool name ("Bash",
 *             "WebFetch", "Write", ...); without it the rule applies to every tool
 *   field     (optional) which subjects to match:
 *             Bash: none or "argv" (each simple command: wrappers stripped,
 *             argv[0] a basename), "command" (the raw line), "normalized" (each
 *             normalised command list, see shparse.h), "line" (raw + normalized);
 *             WebFetch: "url", "host"; Write: "path" (raw and lexically
 *             normalised); any other name: that argument if it is a string;
 *             none (not Bash): the arguments as compact sorted JSON
 *   unless    (optional) POSIX ERE: a subject it matches is exempt
 *   reason, label, rationale (optional) text
 * Optional top level: `version`, `description` (strings).
 * Loading is strict: unknown keys, duplicate keys, duplicate ids, aliases,
 * anchors, tags, multiple documents and over-cap inputs are refused.
 *
 * Decisions: strictest wins. Any matching deny rule -> POLICY_DENY; else any
 * matching ask rule (or TK-SHELL-PARSE for a Bash line the shell tokenizer
 * cannot parse) -> POLICY_ASK; else POLICY_ALLOW. Matching flag rules only add
 * their ids to flag_ids.
 *
 * Thread safety: a loaded struct policy is immutable; policy_decide may be
 * called concurrently on one policy from several threads (regexec on a
 * compiled regex_t is thread-safe in glibc).
 */

/* Caps (each refused one past the limit with an error naming it). */
#define POLICY_MAX_YAML_BYTES ((size_t)1 << 20) /* 1 MiB of YAML */
#define POLICY_MAX_RULES 1024 /* deny + ask + flag together */
#define POLICY_MAX_PATTERN_LEN 4096 /* bytes of one pattern (and one tool regex) */
#define POLICY_MAX_ID_LEN 64 /* bytes of a rule id */
#define POLICY_MAX_REASON_LEN 1024 /* bytes of a reason */
#define POLICY_MAX_FIELD_LEN 64 /* bytes of a field name */
#define POLICY_MAX_TEXT_LEN 1024 /* bytes of version / description */
#define POLICY_MAX_YAML_DEPTH 8 /* YAML nesting depth */
#define POLICY_MAX_SUBJECT_LEN ((size_t)64 << 10) /* a subject over 64 KiB is not matched: TK-OVERSIZE deny */

/* Rule ids the engine adds itself (not in any YAML). */
#define POLICY_ID_SHELL_PARSE "TK-SHELL-PARSE" /* ask: a Bash line the tokenizer cannot parse */
#define POLICY_ID_ARGS_INVALID "TK-ARGS-INVALID" /* deny: args not an object / required field missing or not a string */
#define POLICY_ID_OVERSIZE "TK-OVERSIZE" /* deny: a subject longer than POLICY_MAX_SUBJECT_LEN */

struct policy;

/*
 * Parse and compile the YAML policy in yaml[0..n). On success *ret owns a new
 * policy (free with policy_free) and 0 is returned. On failure returns
 * -EBADMSG (syntax, unknown/duplicate key, missing id/pattern, bad regex,
 * backreference), -E2BIG (a cap above was exceeded) or -ENOMEM, and, when
 * errmsg is non-NULL and errmsg_size > 0, writes a NUL-terminated one-line
 * message naming the problem (line number and rule id when known, and which
 * MAX_* limit for -E2BIG). Pure: no I/O, no logging.
 */
_wur_ int policy_load(const char *yaml, size_t n, struct policy **ret, char *errmsg, size_t errmsg_size);

/* Free a policy; NULL is fine. */
void policy_free(struct policy *p);

/* The embedded default pack (NUL-terminated YAML, static storage). */
const char *policy_default_yaml(void);

enum policy_verdict {
	POLICY_ALLOW = 0,
	POLICY_ASK = 1,
	POLICY_DENY = 2,
};

/* "allow", "ask" or "deny" (static strings; "deny" for an out-of-range value). */
const char *policy_verdict_name(enum policy_verdict v);

/*
 * A decision. rule_ids: the ids of the matching deny and ask rules (deny rules
 * first, then ask, each in policy order, no duplicates; includes the engine's
 * own TK-SHELL-PARSE / TK-ARGS-INVALID / TK-OVERSIZE). flag_ids: the matching
 * flag rules. reason: the reason of the first rule in rule_ids (or of the first
 * flag when rule_ids is empty), NULL when there is none. All strings are owned
 * by the decision; release with policy_decision_release.
 */
struct policy_decision {
	enum policy_verdict verdict;
	char **rule_ids;
	size_t n_rule_ids;
	char **flag_ids;
	size_t n_flag_ids;
	char *reason;
};

/*
 * Decide a tool call. tool: "Bash" (args {"command": "...", "cwd"?: "..."}),
 * "WebFetch" (args {"url": "..."}), "Write" (args {"file_path": "..."}) or any
 * other name (matched by rules whose field names one of its string args, or
 * with no field: the args as compact sorted JSON). Invalid args for a known
 * tool (not an object, missing or non-string required member) do not fail:
 * they give a POLICY_DENY with TK-ARGS-INVALID. Returns 0 and fills *ret on
 * success (ret is overwritten, not released first); -EINVAL for NULL
 * p/tool/ret; -ENOMEM. On failure *ret is untouched and the caller must fail
 * closed (treat as deny).
 */
_wur_ int policy_decide(const struct policy *p, const char *tool, const json_t *args, struct policy_decision *ret);

/* Free the members of d and zero it; NULL and a zeroed decision are fine. */
void policy_decision_release(struct policy_decision *d);

/*
 * The compiled policy as a JSON object to store in bundles as
 * policies/<sha256 of its JCS bytes>.json (Tracekit's compiled-policy shape:
 * {"version"?, "description"?, "unknown_tools":"allow",
 * "deny":[...], "ask":[...], "flag":[...]} with each rule's id, pattern,
 * tool?, field?, reason?). The caller serialises it with json_write_jcs and
 * hashes those bytes. *ret_json is a new reference.
 */
_wur_ int policy_snapshot(const struct policy *p, json_t **ret_json);

/*
 * "sha256:<hex>" of the JCS bytes of policy_snapshot (Tracekit's policy_hash),
 * NUL-terminated into out (at least POLICY_HASH_STRLEN + 1 bytes).
 */
#define POLICY_HASH_STRLEN (7 + 64)
_wur_ int policy_hash(const struct policy *p, char out[POLICY_HASH_STRLEN + 1]);

#endif
