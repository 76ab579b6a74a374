/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "buf.h"
#include "crypto.h"
#include "json.h"
#include "verify/schema.h"

/* The tables below leave `required` (false) and trailing node fields (zero) out: that is what they mean. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

/*
 * Tracekit's event schema v2, tracekit/schema/tracekit.event.v2.json of the
 * public Cygnux-Labs/Tracekit repository at commit
 * 687a96cad5b1ac4857ce1f363d7077327da13809 (63,674 characters; the newest of
 * the versions we could read, a copy in tests/verify/vectors/). Over the
 * 8db1632 version this table followed before, it adds: the `policy.external`
 * type, the `import` and `gateway` sources, a top-level `span_id`, the
 * `decision_mismatch` gap kind, `salt_id` in tool.call and tool.result,
 * `tenant_level` in capture.gap and trace.tamper, run.final `coverage`,
 * run.registered `harness`/`fidelity`/`remote`, approval `via`/`groups`/
 * `person`, signer.epoch key `cert`, a `hash` kid in key.retire, and it
 * requires `log_id`, `tenant`, `run_seq` and `run_prev_hash` on every event.
 *
 * The JSON Schema subset tracekit.event.v2.json uses, as C tables. One node
 * is one schema object; a property list ends with a NULL name. Types are a
 * bit set (0: any). A string length is counted in code points, as Python's
 * len() and the schema do.
 */

enum {
	T_STR = 1 << 0,
	T_INT = 1 << 1,
	T_NUM = 1 << 2, /* integer or real */
	T_BOOL = 1 << 3,
	T_NULL = 1 << 4,
	T_OBJ = 1 << 5,
	T_ARR = 1 << 6,
};

enum pattern {
	P_NONE = 0,
	P_HEX32, /* ^[0-9a-f]{32}$ */
	P_HEX64, /* ^[0-9a-f]{64}$ */
	P_HASH, /* ^sha256:[0-9a-f]{64}$ */
	P_HMAC, /* ^hmac-sha256:[0-9a-f]{64}$ */
	P_TS, /* ^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$ */
	P_ID, /* ^[A-Za-z0-9._:-]+$ */
	P_ENGINE, /* ^[A-Za-z0-9._-]+@[A-Za-z0-9._+-]+$ */
	P_ALG, /* ^[a-z0-9-]+$ */
	P_B64, /* ^[A-Za-z0-9+/]+={0,2}$ */
	P_V1KID, /* ^ed25519:[0-9a-f]{16}$ */
	P_HEX16, /* ^[0-9a-f]{16}$ */
	P_HEXN, /* ^[0-9a-f]+$ */
};

#define MAX_SAFE ((int64_t)9007199254740991)

struct node;

struct prop {
	const char *name;
	const struct node *node;
	bool required;
};

struct node {
	unsigned types;
	enum pattern pat;
	int64_t min_len; /* strings; 0: none */
	int64_t max_len; /* strings; 0: none */
	const char *const *enums; /* the value is one of these strings */
	const char *const_str;
	bool const_true;
	bool const_one;
	bool has_min, has_max;
	int64_t min, max; /* numbers */
	const struct prop *props;
	bool closed; /* additionalProperties: false */
	const struct node *extra; /* additionalProperties: schema */
	const struct node *items;
	int64_t max_items; /* 0: none */
	const struct node *const *one_of; /* NULL-terminated */
};

/* ---- building blocks ---- */

#define STRN(n)                                                                                                        \
	{                                                                                                              \
		.types = T_STR, .max_len = (n)                                                                         \
	}
#define STRN_NULL(n)                                                                                                   \
	{                                                                                                              \
		.types = T_STR | T_NULL, .max_len = (n)                                                                \
	}

static const struct node s32 = STRN(32), s64 = STRN(64), s256 = STRN(256), s1024 = STRN(1024), s4096 = STRN(4096),
			 s16384 = STRN(16384), s4096n = STRN_NULL(4096), s200n = STRN_NULL(200);
static const struct node n_int = { .types = T_INT }, n_int_n = { .types = T_INT | T_NULL },
			 n_num_n = { .types = T_NUM | T_NULL };
static const struct node n_uint = { .types = T_INT, .has_min = true, .min = 0 },
			 n_uint_n = { .types = T_INT | T_NULL, .has_min = true, .min = 0 };
static const struct node n_seq = { .types = T_INT, .has_min = true, .min = 0, .has_max = true, .max = MAX_SAFE };
static const struct node n_count = { .types = T_INT, .has_min = true, .min = 1, .has_max = true, .max = MAX_SAFE };
static const struct node n_bool = { .types = T_BOOL }, n_bool_n = { .types = T_BOOL | T_NULL };
static const struct node n_obj = { .types = T_OBJ }, n_any = { 0 }, n_null = { .types = T_NULL };
static const struct node n_true = { .const_true = true };

static const struct node hash = { .types = T_STR, .pat = P_HASH, .max_len = 71 };
static const struct node commitment = { .types = T_STR, .pat = P_HMAC, .max_len = 76 };
static const struct node hmac76 = { .types = T_STR, .pat = P_HMAC, .max_len = 76 };
static const struct node hmac4096 = { .types = T_STR, .pat = P_HMAC, .max_len = 4096 };
static const struct node id = { .types = T_STR, .pat = P_ID, .min_len = 1, .max_len = 128 };
static const struct node ts4096 = { .types = T_STR, .pat = P_TS, .max_len = 4096 };
static const struct node ts27 = { .types = T_STR, .pat = P_TS, .max_len = 27 };
static const struct node hex32_4096 = { .types = T_STR, .pat = P_HEX32, .max_len = 4096 };
static const struct node hex32_32 = { .types = T_STR, .pat = P_HEX32, .max_len = 32 };
static const struct node hex64_4096 = { .types = T_STR, .pat = P_HEX64, .max_len = 4096 };
static const struct node hex64_64 = { .types = T_STR, .pat = P_HEX64, .max_len = 64 };

static const struct node arr_s4096_1024 = { .types = T_ARR, .items = &s4096, .max_items = 1024 };
static const struct node arr_s64_64 = { .types = T_ARR, .items = &s64, .max_items = 64 };
static const struct node arr_s64_32 = { .types = T_ARR, .items = &s64, .max_items = 32 };
static const struct node b64_4096 = { .types = T_STR, .pat = P_B64, .max_len = 4096 };

static const char *const e_args_source[] = { "raw", "parsed", "coerced", NULL };
static const char *const e_layers[] = { "L1", "L2", "L3", "L4", "L5", "L6", NULL };
static const char *const e_open_closed[] = { "open", "closed", NULL };
static const struct node args_source = { .enums = e_args_source };
static const struct node layer = { .enums = e_layers };
static const struct node open_closed = { .enums = e_open_closed };
static const struct node layers6 = { .types = T_ARR, .items = &layer, .max_items = 6 };
static const char *const e_id_schemes[] = { "uid", "harness", "token", "k8s_sa", "mtls", "oidc", NULL };
static const struct node id_scheme = { .enums = e_id_schemes };

/* ---- $defs ---- */

static const struct node redaction_client = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "rules",
					  &(const struct node){ .types = T_ARR, .items = &s64, .max_items = 32 } },
					{ "count", &n_uint },
					{ NULL } },
};
static const struct node redaction = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "rules", &arr_s64_64, true },
					{ "count", &n_uint, true },
					{ "client_claimed", &n_bool, true },
					{ "client", &redaction_client },
					{ "client_redaction_incomplete", &n_true },
					{ NULL } },
};

static const struct node content_value = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "value", &n_any, true }, { "redacted", &n_bool, true }, { NULL } },
};
static const struct node content_ref = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "hash", &commitment, true },
					{ "size", &n_uint, true },
					{ "redacted", &n_bool, true },
					{ NULL } },
};
static const struct node content = { .one_of = (const struct node *const[]){ &content_value, &content_ref, NULL } };
static const struct node commitment_or_null = { .one_of = (const struct node *const[]){ &commitment, &n_null, NULL } };

static const struct node run_start = {
	.types = T_OBJ,
	.closed = true,
	.props =
		(const struct prop[]){
			{ "agent",
			  &(const struct node){ .types = T_OBJ,
						.props = (const struct prop[]){ { "name", &s4096, true },
										{ "version", &s4096n },
										{ NULL } } },
			  true },
			{ "model", &s4096n },
			{ "repo", &s4096n },
			{ "commit", &s4096n },
			{ "cwd", &s4096n },
			{ "host", &s4096, true },
			{ "os_user", &s4096, true },
			{ "fail_mode", &open_closed, true },
			{ "policy",
			  &(const struct node){ .types = T_OBJ,
						.closed = true,
						.props = (const struct prop[]){ { "version", &s4096, true },
										{ "hash", &hash, true },
										{ NULL } } },
			  true },
			{ "capture_sources",
			  &(const struct node){
				  .types = T_ARR,
				  .max_items = 1024,
				  .items = &(const struct node){ .enums = (const char *const[]){ "hook", "proxy",
												 "transcript",
												 "sdk", NULL } } },
			  true },
			{ "sandbox",
			  &(const struct node){
				  .enums = (const char *const[]){ "none", "unknown", "self-reported-active", NULL } },
			  true },
			{ "content_capture",
			  &(const struct node){ .enums = (const char *const[]){ "hashed", "full", NULL } }, true },
			{ "reasoning_capture", &n_bool },
			{ "signer_isolation",
			  &(const struct node){ .enums = (const char *const[]){ "separate-user", "same-user", NULL } },
			  true },
			{ "os_user_attested", &n_bool },
			{ "harness",
			  &(const struct node){
				  .types = T_OBJ,
				  .closed = true,
				  .props = (const struct prop[]){ { "name", &s4096, true },
								  { "exe", &s4096, true },
								  { "pid", &n_int, true },
								  { "start_time", &n_int_n },
								  { "attested", &n_bool, true },
								  { NULL } } } },
			{ NULL } },
};

static const struct node run_end = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "reason", &s4096, true }, { NULL } },
};

static const struct node tool_call = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "tool_use_id", &s4096, true },
					{ "name", &s4096, true },
					{ "input", &(const struct node){ .types = T_OBJ, .extra = &content }, true },
					{ "salt_id", &id },
					{ NULL } },
};

static const struct node policy_decision = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "tool_use_id", &s4096, true },
					{ "decision",
					  &(const struct node){ .enums = (const char *const[]){ "allow", "deny", "flag",
												"ask", NULL } },
					  true },
					{ "rule_ids", &arr_s4096_1024, true },
					{ "reasons", &arr_s4096_1024 },
					{ "policy_hash", &hash },
					{ "policy_version", &s4096 },
					{ "tool", &s256 },
					{ "decision_id", &id },
					{ "args_commitment", &hmac76 },
					{ "engine", &s64 },
					{ "nonce", &hex32_32 },
					{ "expires_at", &ts27 },
					{ "nondeterministic", &n_bool },
					{ NULL } },
};

static const struct node approval = {
	.types = T_OBJ,
	.closed = true,
	.props =
		(const struct prop[]){
			{ "tool_use_id", &s4096, true },
			{ "decision",
			  &(const struct node){ .enums = (const char *const[]){ "approve", "reject", "timeout",
										"self_approval_refused", NULL } },
			  true },
			{ "approver", &s4096, true },
			{ "channel", &s4096, true },
			{ "approver_uid", &n_int_n },
			{ "wait_ms", &n_int_n },
			{ "same_user", &n_bool_n },
			{ "approval_id", &id },
			{ "self_approved", &n_bool },
			{ "reason", &s1024 },
			{ "approver_identity",
			  &(const struct node){ .types = T_OBJ,
						.closed = true,
						.props = (const struct prop[]){ { "scheme", &s32, true },
										{ "subject", &s256, true },
										{ "attested", &n_bool, true },
										{ "person", &s256 },
										{ NULL } } } },
			{ "break_glass", &n_bool },
			{ "via", &(const struct node){ .types = T_OBJ,
						       .closed = true,
						       .props = (const struct prop[]){ { "scheme", &s32, true },
										       { "subject", &s256, true },
										       { "attested", &n_bool, true },
										       { NULL } } } },
			{ "groups", &arr_s64_32 },
			{ "person", &s4096 },
			{ NULL } },
};

static const struct node tool_result = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "tool_use_id", &s4096, true },
					{ "ok", &n_bool, true },
					{ "output", &content, true },
					{ "duration_ms", &n_int_n },
					{ "decision_id", &id },
					{ "redaction", &redaction },
					{ "salt_id", &id },
					{ NULL } },
};

static const struct node error_def = {
	.types = T_OBJ,
	.props = (const struct prop[]){ { "message", &s4096, true }, { NULL } },
};

static const struct node review = {
	.types = T_OBJ,
	.props = (const struct prop[]){ { "reviewer", &s4096, true }, { "verdict", &n_obj, true }, { NULL } },
};

static const struct node trace_tamper = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "tenant_level", &n_bool },
					{ "path", &s4096, true },
					{ "before",
					  &(const struct node){ .types = T_OBJ,
								.props = (const struct prop[]){ { "hash", &hash },
												{ "length", &n_int },
												{ NULL } } },
					  true },
					{ "after",
					  &(const struct node){ .types = T_OBJ,
								.props = (const struct prop[]){ { "hash", &s4096n },
												{ "length", &n_int_n },
												{ NULL } } },
					  true },
					{ "kind",
					  &(const struct node){
						  .enums = (const char *const[]){ "deleted", "truncated",
										  "edited", "prefix_unverifiable",
										  "rollback", NULL } } },
					{ NULL } },
};

static const char *const gap_kinds[] = {
	"signer_unavailable",
	"client_counter_gap",
	"retry_conflict",
	"run_abandoned",
	"witness_late",
	"witness_failed",
	"degraded_unanchored",
	"format_upgrade",
	"policy_timeout",
	"decision_flip",
	"class_mismatch",
	"args_coerced",
	"reconcile.hook_missing",
	"reconcile.fabricated",
	"reconcile.args_mismatch",
	"reconcile.result_without_call",
	"reconcile.unexplained_effect",
	"state_tamper",
	"tailer_lost",
	"rollback",
	"clock_skew",
	"key_retired",
	"key_revoked",
	"log_closed",
	"quota_refused",
	"identity_refused",
	"approval_expired",
	"executed_against_policy",
	"decision_mismatch",
	NULL,
};

static const struct node capture_gap = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "tenant_level", &n_bool },
					{ "reason", &s4096, true },
					{ "from_ts", &s4096n },
					{ "to_ts", &s4096n },
					{ "missed_events", &n_int_n },
					{ "kind", &(const struct node){ .enums = gap_kinds } },
					{ "tool_use_id", &s4096n },
					{ NULL } },
};

static const struct node checkpoint_def = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "head_seq", &n_int, true },
					{ "head_hash", &hex64_4096, true },
					{ "kid", &s4096, true },
					{ "witnesses", &arr_s4096_1024, true },
					{ NULL } },
};

static const struct node user_prompt = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "content", &content, true }, { NULL } },
};

static const struct node model_message = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "kind",
					  &(const struct node){ .enums = (const char *const[]){ "text", "thinking",
												"thinking_withheld",
												NULL } },
					  true },
					{ "message_id", &s4096n },
					{ "content", &content, true },
					{ NULL } },
};

static const struct node tool_use = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "id", &s4096, true },
					{ "name", &s4096, true },
					{ "executed_by",
					  &(const struct node){
						  .enums = (const char *const[]){ "client", "provider", NULL } } },
					{ "args_source", &args_source },
					{ "args_commitment", &hmac76 },
					{ "args_unparseable", &n_true },
					{ "id_synthetic", &n_true },
					{ NULL } },
};

static const struct node usage = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "input_tokens", &n_uint, true },
					{ "output_tokens", &n_uint, true },
					{ "cache_read_tokens", &n_uint_n },
					{ "cache_write_tokens", &n_uint_n },
					{ "reasoning_tokens", &n_uint_n },
					{ NULL } },
};

static const struct node model_exchange = {
	.types = T_OBJ,
	.closed = true,
	.props =
		(const struct prop[]){
			{ "salt_id", &id },
			{ "exchange_id", &s4096, true },
			{ "phase",
			  &(const struct node){ .enums = (const char *const[]){ "request", "response", NULL } }, true },
			{ "model", &s4096n },
			{ "request", &content },
			{ "response", &content },
			{ "status", &n_int_n },
			{ "streamed", &n_bool, true },
			{ "duration_ms", &n_int_n },
			{ "first_byte_ms", &n_int_n },
			{ "added_latency_ms", &n_num_n },
			{ "tool_uses", &(const struct node){ .types = T_ARR, .items = &tool_use, .max_items = 1024 } },
			{ "tool_results_sent", &arr_s4096_1024 },
			{ "stop_reason", &s4096n },
			{ "upstream", &s4096 },
			{ "error", &s4096n },
			{ "attribution",
			  &(const struct node){
				  .enums = (const char *const[]){ "metadata", "tool_use_id", "none", NULL } } },
			{ "usage", &usage },
			{ "content_digest", &commitment },
			{ NULL } },
};

static const struct node run_registered = {
	.types = T_OBJ,
	.closed = true,
	.props =
		(const struct prop[]){
			{ "agent",
			  &(const struct node){ .types = T_OBJ,
						.closed = true,
						.props =
							(const struct prop[]){ { "name",
										 &(const struct node){ .types = T_STR,
												       .min_len = 1,
												       .max_len = 128 },
										 true },
									       { "version", &s64 },
									       { NULL } } },
			  true },
			{ "identity",
			  &(const struct node){ .types = T_OBJ,
						.closed = true,
						.props =
							(const struct prop[]){ { "scheme", &id_scheme, true },
									       { "subject", &s256, true },
									       { "attested", &n_bool, true },
									       { "person", &s256 },
									       { NULL } } },
			  true },
			{ "signer_isolation",
			  &(const struct node){ .enums = (const char *const[]){ "same-user", "separate-user",
										"remote", "unknown", NULL } } },
			{ "harness",
			  &(const struct node){
				  .types = T_OBJ,
				  .closed = true,
				  .props =
					  (const struct prop[]){
						  { "name", &s64, true },
						  { "exe", &s4096, true },
						  { "pid",
						    &(const struct node){ .types = T_INT, .has_min = true, .min = 1 },
						    true },
						  { "start_time", &n_int_n, true },
						  { "attested", &n_true, true },
						  { NULL } } } },
			{ "fail_modes", &(const struct node){ .types = T_OBJ, .extra = &open_closed } },
			{ "analyzes", &id },
			{ "fidelity", &(const struct node){ .enums = (const char *const[]){ "none", NULL } } },
			{ NULL } },
};

static const struct node run_closing = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "reason",
					  &(const struct node){
						  .enums = (const char *const[]){ "close_run", "idle_timeout", NULL } },
					  true },
					{ NULL } },
};

/* What run.final says of the capture layers that reported and the tool calls the signer reconciled. */
static const struct node unreconciled = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "hook_missing", &n_count },
					{ "fabricated", &n_count },
					{ "args_mismatch", &n_count },
					{ "args_unparseable", &n_count },
					{ "result_without_call", &n_count },
					{ NULL } },
};
static const struct node coverage = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "layers", &layers6, true },
					{ "reconciled", &n_seq, true },
					{ "unreconciled", &unreconciled, true },
					{ NULL } },
};

static const struct node run_final = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "head_run_seq", &n_seq, true },
					{ "head_hash", &hash, true },
					{ "coverage", &coverage },
					{ NULL } },
};

static const struct node binding = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "v", &(const struct node){ .const_one = true }, true },
					{ "approval_id", &id, true },
					{ "tenant", &id, true },
					{ "run_id", &id, true },
					{ "tool_call_id", &id, true },
					{ "attempt", &n_seq, true },
					{ "tool", &s256, true },
					{ "args_commitment", &hmac76, true },
					{ "args_source", &args_source, true },
					{ "policy_hash", &hash, true },
					{ "nonce", &hex32_32, true },
					{ "expires_at", &ts4096, true },
					{ NULL } },
};

static const struct node approval_request = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "salt_id", &id },
					{ "approval_id", &id, true },
					{ "policy_hash", &hash, true },
					{ "rule_ids", &arr_s64_32, true },
					{ "expires_at", &ts4096, true },
					{ "requester", &s256, true },
					{ "requester_person", &s256 },
					{ "decision_id", &id, true },
					{ "binding", &binding, true },
					{ "binding_digest", &hash, true },
					{ "executor",
					  &(const struct node){ .enums = (const char *const[]){ "t1", "t2", NULL } } },
					{ NULL } },
};

static const struct node approval_id_only = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "approval_id", &id, true }, { NULL } },
};

static const struct node approval_refused = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "tool_use_id", &id, true },
					{ "approval_id", &id },
					{ "rule_ids", &arr_s64_32, true },
					{ "reason", &s1024, true },
					{ NULL } },
};

static const struct node approval_binding_mismatch = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "salt_id", &id },
					{ "approval_id", &id, true },
					{ "tool_use_id", &id, true },
					{ "approved_commitment", &hmac76, true },
					{ "args_commitment", &hmac76, true },
					{ "decision_id", &id },
					{ NULL } },
};

static const struct node approval_abandoned = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "approval_id", &id, true }, { "reason", &s1024 }, { NULL } },
};

static const struct node state_write = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "salt_id", &id },
					{ "store", &s256, true },
					{ "key", &s256, true },
					{ "prev_digest", &commitment_or_null },
					{ "digest", &commitment, true },
					{ NULL } },
};

/* A record key's issuance entry from a record-key issuer (tracekit.format.cert). */
static const struct node cert_body = {
	.types = T_OBJ,
	.closed = true,
	.props =
		(const struct prop[]){
			{ "kid", &hash, true },
			{ "spki", &b64_4096, true },
			{ "log_id", &s64, true },
			{ "tenants", &(const struct node){ .types = T_ARR, .items = &s256, .max_items = 256 }, true },
			{ "not_before", &n_seq, true },
			{ "not_after", &n_seq, true },
			{ "serial", &(const struct node){ .types = T_STR, .max_len = 64, .pat = P_HEXN }, true },
			{ NULL } },
};
static const struct node certificate = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "cert", &cert_body, true },
					{ "sig", &(const struct node){ .types = T_STR, .max_len = 128, .pat = P_B64 },
					  true },
					{ NULL } },
};
static const struct node b64_64 = { .types = T_STR, .max_len = 64, .pat = P_B64 };
static const struct node key_cert = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "certificate", &certificate, true },
					{ "index", &n_seq, true },
					{ "inclusion",
					  &(const struct node){ .types = T_ARR, .items = &b64_64, .max_items = 64 },
					  true },
					{ "checkpoint", &s16384, true },
					{ NULL } },
};

static const struct node epoch_key = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "kid", &hash, true },
					{ "alg", &(const struct node){ .types = T_STR, .max_len = 32, .pat = P_ALG },
					  true },
					{ "spki", &b64_4096, true },
					{ "cert", &key_cert },
					{ NULL } },
};

static const struct node signer_epoch = {
	.types = T_OBJ,
	.closed = true,
	.props =
		(const struct prop[]){
			{ "keys", &(const struct node){ .types = T_ARR, .items = &epoch_key, .max_items = 16 }, true },
			{ "bridge",
			  &(const struct node){ .types = T_OBJ,
						.closed = true,
						.props =
							(const struct prop[]){ { "v1_kid",
										 &(const struct node){ .types = T_STR,
												       .max_len = 24,
												       .pat = P_V1KID },
										 true },
									       { "v1_last_seq", &n_seq, true },
									       { "v1_head", &hex64_64, true },
									       { NULL } } } },
			{ NULL } },
};

static const struct node key_retire = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "kid", &hash, true }, { "last_seq", &n_seq, true }, { NULL } },
};

static const struct node log_closed = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "final_seq", &n_seq, true }, { NULL } },
};

static const struct node reconcile = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "layers", &layers6, true }, { "detail", &s1024 }, { NULL } },
};

static const struct node refusal_summary = {
	.types = T_OBJ,
	.closed = true,
	.props =
		(const struct prop[]){
			{ "code", &s64, true },
			{ "count",
			  &(const struct node){
				  .types = T_INT, .has_min = true, .min = 1, .has_max = true, .max = MAX_SAFE },
			  true },
			{ "from_ts", &ts4096, true },
			{ "to_ts", &ts4096, true },
			{ "identity", &s256 },
			{ NULL } },
};

/* Another system's decision about a tool call, imported through decision_import (source import, tier T3). */
static const struct node policy_external = {
	.types = T_OBJ,
	.closed = true,
	.props =
		(const struct prop[]){
			{ "system", &(const struct node){ .types = T_STR, .min_len = 1, .max_len = 64 }, true },
			{ "decision",
			  &(const struct node){ .enums = (const char *const[]){ "allow", "deny", "ask", NULL } },
			  true },
			{ "tool_use_id", &id, true },
			{ "tool", &(const struct node){ .types = T_STR, .min_len = 1, .max_len = 256 }, true },
			{ "rule_ids", &arr_s64_32, true },
			{ "reason", &s4096 },
			{ "signature",
			  &(const struct node){ .enums = (const char *const[]){ "verified", "unverified", NULL } },
			  true },
			{ "record",
			  &(const struct node){ .types = T_OBJ,
						.closed = true,
						.props = (const struct prop[]){ { "hash", &hmac76, true },
										{ "size", &n_seq, true },
										{ NULL } } },
			  true },
			{ "identity",
			  &(const struct node){ .types = T_OBJ,
						.closed = true,
						.props =
							(const struct prop[]){ { "scheme", &id_scheme, true },
									       { "subject", &s256, true },
									       { "attested", &n_bool, true },
									       { NULL } } },
			  true },
			{ "salt_id", &id, true },
			{ NULL } },
};

/* The allOf of if type == X then data is Y: every type of the enum has its data rules. */
static const struct {
	const char *type;
	const struct node *data;
} data_by_type[] = {
	{ "run.start", &run_start },
	{ "run.end", &run_end },
	{ "tool.call", &tool_call },
	{ "policy.decision", &policy_decision },
	{ "approval", &approval },
	{ "tool.result", &tool_result },
	{ "error", &error_def },
	{ "review", &review },
	{ "trace.tamper", &trace_tamper },
	{ "capture.gap", &capture_gap },
	{ "checkpoint", &checkpoint_def },
	{ "user.prompt", &user_prompt },
	{ "model.message", &model_message },
	{ "model.exchange", &model_exchange },
	{ "run.registered", &run_registered },
	{ "run.closing", &run_closing },
	{ "run.final", &run_final },
	{ "approval.request", &approval_request },
	{ "approval.consumed", &approval_id_only },
	{ "approval.expired", &approval_id_only },
	{ "approval.refused", &approval_refused },
	{ "approval.binding_mismatch", &approval_binding_mismatch },
	{ "approval.abandoned", &approval_abandoned },
	{ "state.write", &state_write },
	{ "signer.epoch", &signer_epoch },
	{ "key.retire", &key_retire },
	{ "log.closed", &log_closed },
	{ "reconcile.hook_missing", &reconcile },
	{ "reconcile.fabricated", &reconcile },
	{ "reconcile.args_mismatch", &reconcile },
	{ "reconcile.result_without_call", &reconcile },
	{ "reconcile.unexplained_effect", &reconcile },
	{ "reconcile.args_unparseable", &reconcile },
	{ "refusal.summary", &refusal_summary },
	{ "policy.external", &policy_external },
};

static const char *const event_types[] = {
	"run.start",
	"run.end",
	"tool.call",
	"policy.decision",
	"approval",
	"tool.result",
	"error",
	"review",
	"trace.tamper",
	"capture.gap",
	"checkpoint",
	"user.prompt",
	"model.message",
	"model.exchange",
	"run.registered",
	"run.closing",
	"run.final",
	"approval.request",
	"approval.consumed",
	"approval.expired",
	"approval.refused",
	"approval.binding_mismatch",
	"approval.abandoned",
	"state.write",
	"signer.epoch",
	"key.retire",
	"log.closed",
	"reconcile.hook_missing",
	"reconcile.fabricated",
	"reconcile.args_mismatch",
	"reconcile.result_without_call",
	"reconcile.unexplained_effect",
	"reconcile.args_unparseable",
	"refusal.summary",
	"policy.external",
	NULL,
};

static const struct node transcript = {
	.types = T_OBJ,
	.closed = true,
	.props = (const struct prop[]){ { "path", &s4096, true },
					{ "length", &n_uint, true },
					{ "hash", &commitment, true },
					{ "prefix_length", &n_uint_n },
					{ "prefix_hash", &commitment_or_null },
					{ "missing", &n_bool },
					{ NULL } },
};

static const struct node event = {
	.types = T_OBJ,
	.closed = true,
	.props =
		(const struct prop[]){
			{ "schema_version", &(const struct node){ .const_str = "tracekit.event.v2" }, true },
			{ "id", &hex32_4096, true },
			{ "seq", &n_seq, true },
			{ "prev_hash", &hash, true },
			{ "ts", &ts4096, true },
			{ "ts_signed", &ts4096 },
			{ "run_id", &(const struct node){ .types = T_STR, .min_len = 1, .max_len = 200 }, true },
			{ "agent_id", &(const struct node){ .types = T_STR, .min_len = 1, .max_len = 200 }, true },
			{ "parent_id", &s200n, true },
			{ "source",
			  &(const struct node){ .enums = (const char *const[]){ "hook", "proxy", "transcript", "signer",
										"sdk", "migrated", "import", "gateway",
										NULL } },
			  true },
			{ "type", &(const struct node){ .enums = event_types }, true },
			{ "data", &n_obj, true },
			{ "transcript", &transcript },
			{ "log_id", &hex32_4096, true },
			{ "tenant", &id, true },
			{ "tenant_attested", &n_bool },
			{ "principal", &s256 },
			{ "principal_attested", &n_bool },
			{ "request_id", &id },
			{ "stream", &id },
			{ "client_seq", &n_seq },
			{ "tool_call_id", &id },
			{ "attempt", &n_seq },
			{ "step", &n_seq },
			{ "run_seq", &n_seq, true },
			{ "run_prev_hash", &hash, true },
			{ "capture_layer", &layer },
			{ "tier", &(const struct node){ .enums = (const char *const[]){ "T1", "T2", "T3", NULL } } },
			{ "span_id", &(const struct node){ .types = T_STR, .max_len = 16, .pat = P_HEX16 } },
			{ "args_commitment", &hmac4096 },
			{ "args_source", &args_source },
			{ "engine", &(const struct node){ .types = T_STR, .max_len = 128, .pat = P_ENGINE } },
			{ NULL } },
};

/* ---- the checker ---- */

struct ctx {
	char path[160];
	char *why;
	size_t why_size;
	bool quiet; /* inside oneOf: count matches, report nothing */
};

static bool fail(struct ctx *c, const char *fmt, ...) _printf_(2, 3);
static bool fail(struct ctx *c, const char *fmt, ...)
{
	char msg[160];
	va_list ap;

	if (c->quiet || !c->why || c->why_size == 0) {
		return false;
	}
	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	(void)snprintf(c->why, c->why_size, "%s: %s", c->path, msg);
	c->quiet = true; /* the first problem is the one reported */
	return false;
}

static bool hex_run(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) {
			return false;
		}
	}
	return true;
}

static bool in_set(char ch, const char *extra)
{
	return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
	       (ch != '\0' && strchr(extra, ch) != NULL);
}

/* A run of at least one character of [A-Za-z0-9<extra>]: its length. */
static size_t span_set(const char *s, size_t n, const char *extra)
{
	size_t i = 0;

	while (i < n && in_set(s[i], extra)) {
		i++;
	}
	return i;
}

/* Full match, ASCII only (s may hold NULs: n is its length). */
static bool pattern_ok(enum pattern p, const char *s, size_t n)
{
	switch (p) {
	case P_NONE:
		return true;
	case P_HEX32:
		return n == 32 && hex_run(s, 32);
	case P_HEX64:
		return n == 64 && hex_run(s, 64);
	case P_HASH:
		return n == 71 && memcmp(s, "sha256:", 7) == 0 && hex_run(s + 7, 64);
	case P_HMAC:
		return n == 76 && memcmp(s, "hmac-sha256:", 12) == 0 && hex_run(s + 12, 64);
	case P_V1KID:
		return n == 24 && memcmp(s, "ed25519:", 8) == 0 && hex_run(s + 8, 16);
	case P_HEX16:
		return n == 16 && hex_run(s, 16);
	case P_HEXN:
		return n > 0 && hex_run(s, n);
	case P_TS: {
		static const char shape[] = "dddd-dd-ddTdd:dd:dd.ddddddZ";
		if (n != sizeof(shape) - 1) {
			return false;
		}
		for (size_t i = 0; i < n; i++) {
			if (shape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i]) {
				return false;
			}
		}
		return true;
	}
	case P_ID:
		return n > 0 && span_set(s, n, "._:-") == n;
	case P_ENGINE: {
		size_t a = span_set(s, n, "._-");
		return a > 0 && a < n && s[a] == '@' && n - a - 1 > 0 &&
		       span_set(s + a + 1, n - a - 1, "._+-") == n - a - 1;
	}
	case P_ALG:
		for (size_t i = 0; i < n; i++) {
			if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-')) {
				return false;
			}
		}
		return n > 0;
	case P_B64: {
		size_t a = span_set(s, n, "+/"), pad = n - a;
		if (a == 0 || pad > 2) {
			return false;
		}
		for (size_t i = a; i < n; i++) {
			if (s[i] != '=') {
				return false;
			}
		}
		return true;
	}
	default:
		return false;
	}
}

static const char *pattern_text(enum pattern p)
{
	switch (p) {
	case P_HEX32:
		return "^[0-9a-f]{32}$";
	case P_HEX64:
		return "^[0-9a-f]{64}$";
	case P_HASH:
		return "^sha256:[0-9a-f]{64}$";
	case P_HMAC:
		return "^hmac-sha256:[0-9a-f]{64}$";
	case P_V1KID:
		return "^ed25519:[0-9a-f]{16}$";
	case P_HEX16:
		return "^[0-9a-f]{16}$";
	case P_HEXN:
		return "^[0-9a-f]+$";
	case P_TS:
		return "YYYY-MM-DDTHH:MM:SS.ffffffZ";
	case P_ID:
		return "^[A-Za-z0-9._:-]+$";
	case P_ENGINE:
		return "^[A-Za-z0-9._-]+@[A-Za-z0-9._+-]+$";
	case P_ALG:
		return "^[a-z0-9-]+$";
	case P_B64:
		return "^[A-Za-z0-9+/]+={0,2}$";
	case P_NONE:
	default:
		return "";
	}
}

/* Code points of a UTF-8 string (jansson holds valid UTF-8). */
static size_t code_points(const char *s, size_t n)
{
	size_t cp = 0;

	for (size_t i = 0; i < n; i++) {
		cp += ((unsigned char)s[i] & 0xc0) != 0x80;
	}
	return cp;
}

static bool type_ok(const json_t *v, unsigned types)
{
	return ((types & T_STR) && json_is_string(v)) || ((types & T_INT) && json_is_integer(v)) ||
	       ((types & T_NUM) && json_is_number(v)) || ((types & T_BOOL) && json_is_boolean(v)) ||
	       ((types & T_NULL) && json_is_null(v)) || ((types & T_OBJ) && json_is_object(v)) ||
	       ((types & T_ARR) && json_is_array(v));
}

static const char *type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "object";
	case JSON_ARRAY:
		return "array";
	case JSON_STRING:
		return "string";
	case JSON_INTEGER:
		return "integer";
	case JSON_REAL:
		return "number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "boolean";
	case JSON_NULL:
		return "null";
	default:
		return "?";
	}
}

static bool check(struct ctx *c, const json_t *v, const struct node *n);

/* Descend into path + suffix, check, restore the path. */
static bool check_at(struct ctx *c, const json_t *v, const struct node *n, const char *fmt, ...) _printf_(4, 5);
static bool check_at(struct ctx *c, const json_t *v, const struct node *n, const char *fmt, ...)
{
	size_t len = strlen(c->path);
	va_list ap;
	bool ok;

	va_start(ap, fmt);
	(void)vsnprintf(c->path + len, sizeof(c->path) - len, fmt, ap);
	va_end(ap);
	ok = check(c, v, n);
	c->path[len] = '\0';
	return ok;
}

static bool check_object(struct ctx *c, const json_t *v, const struct node *n)
{
	const char *k;
	json_t *val;

	for (const struct prop *p = n->props; p && p->name; p++) {
		if (p->required && !json_object_get(v, p->name)) {
			return fail(c, "missing required '%s'", p->name);
		}
	}
	json_object_foreach((json_t *)v, k, val) {
		const struct prop *p = n->props;
		char shown[40];

		while (p && p->name && strcmp(p->name, k) != 0) {
			p++;
		}
		/* A key from the bundle reaches a report line: printable ASCII only, capped. */
		(void)snprintf(shown, sizeof(shown), "%s", k);
		for (char *q = shown; *q; q++) {
			if (*q < 0x20 || *q > 0x7e || *q == '\'' || *q == '\\') {
				*q = '?';
			}
		}
		if (p && p->name) {
			if (!check_at(c, val, p->node, ".%s", shown)) {
				return false;
			}
		} else if (n->closed) {
			return fail(c, "unexpected field '%s'", shown);
		} else if (n->extra && !check_at(c, val, n->extra, ".%s", shown)) {
			return false;
		}
	}
	return true;
}

static bool check(struct ctx *c, const json_t *v, const struct node *n)
{
	if (n->types && !type_ok(v, n->types)) {
		return fail(c, "wrong type (%s)", type_name(v));
	}
	if (n->const_str && !(json_is_string(v) && strcmp(json_string_value(v), n->const_str) == 0)) {
		return fail(c, "must be '%s'", n->const_str);
	}
	if (n->const_true && !json_is_true(v)) {
		return fail(c, "must be true");
	}
	if (n->const_one && !(json_is_integer(v) && json_integer_value(v) == 1)) {
		return fail(c, "must be 1");
	}
	if (n->enums) {
		bool found = false;

		for (size_t i = 0; json_is_string(v) && n->enums[i] && !found; i++) {
			found = strcmp(json_string_value(v), n->enums[i]) == 0 &&
				strlen(n->enums[i]) == json_string_length(v);
		}
		if (!found) {
			return fail(c, "not one of the allowed values");
		}
	}
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		size_t len = json_string_length(v), cp = code_points(s, len);

		if (n->pat != P_NONE && !pattern_ok(n->pat, s, len)) {
			return fail(c, "does not match %s", pattern_text(n->pat));
		}
		if (n->min_len && (int64_t)cp < n->min_len) {
			return fail(c, "shorter than %lld", (long long)n->min_len);
		}
		if (n->max_len && (int64_t)cp > n->max_len) {
			return fail(c, "longer than %lld", (long long)n->max_len);
		}
	}
	if (json_is_integer(v)) {
		json_int_t x = json_integer_value(v);

		if ((n->has_min && x < n->min) || (n->has_max && x > n->max)) {
			return fail(c, "out of range");
		}
	} else if (json_is_real(v)) {
		double x = json_real_value(v);

		if ((n->has_min && x < (double)n->min) || (n->has_max && x > (double)n->max)) {
			return fail(c, "out of range");
		}
	}
	if (json_is_object(v) && (n->props || n->closed || n->extra) && !check_object(c, v, n)) {
		return false;
	}
	if (json_is_array(v)) {
		size_t i;
		json_t *it;

		if (n->max_items && (int64_t)json_array_size(v) > n->max_items) {
			return fail(c, "more than %lld items", (long long)n->max_items);
		}
		json_array_foreach((json_t *)v, i, it) {
			if (n->items && !check_at(c, it, n->items, "[%zu]", i)) {
				return false;
			}
		}
	}
	if (n->one_of) {
		bool quiet = c->quiet;
		size_t matched = 0;

		c->quiet = true;
		for (size_t i = 0; n->one_of[i]; i++) {
			matched += check(c, v, n->one_of[i]);
		}
		c->quiet = quiet;
		if (matched != 1) {
			return fail(c, "must match exactly one alternative (matched %zu)", matched);
		}
	}
	return true;
}

int event_schema_check(const json_t *ev, char *why, size_t why_size)
{
	struct ctx c = { .path = "event", .why = why, .why_size = why_size };
	const char *type;

	if (why && why_size) {
		why[0] = '\0';
	}
	if (!check(&c, ev, &event)) {
		return -EBADMSG;
	}
	type = json_string_value(json_object_get(ev, "type"));
	for (size_t i = 0; i < ARRAY_SIZE(data_by_type); i++) {
		if (strcmp(type, data_by_type[i].type) == 0) {
			return check_at(&c, json_object_get(ev, "data"), data_by_type[i].data, ".data") ? 0 : -EBADMSG;
		}
	}
	/* The type enum and the table list the same types: a type without data rules is a bug here. */
	(void)fail(&c, "type %s has no data rules", type);
	return -EBADMSG;
}

int event_binding_check(const json_t *ev, char *why, size_t why_size)
{
	const json_t *data = json_object_get(ev, "data"), *b = json_object_get(data, "binding");
	const char *type = json_string_value(json_object_get(ev, "type")), *digest;
	static const struct {
		const char *bkey;
		const char *key;
		bool in_data;
	} same[] = {
		{ "approval_id", "approval_id", true },
		{ "tenant", "tenant", false },
		{ "run_id", "run_id", false },
	};
	struct buf jcs = { 0 };
	uint8_t h[SHA256_LEN];
	char want[8 + 2 * SHA256_LEN] = "sha256:";
	int r;

	if (why && why_size) {
		why[0] = '\0';
	}
	if (!type || strcmp(type, "approval.request") != 0) {
		return 0;
	}
	if (!json_is_object(b) || !(digest = json_string_value(json_object_get(data, "binding_digest")))) {
		(void)snprintf(why, why ? why_size : 0, "event.data: no binding or binding_digest");
		return -EBADMSG;
	}
	for (size_t i = 0; i < ARRAY_SIZE(same); i++) {
		const char *x = json_string_value(json_object_get(b, same[i].bkey));
		const char *y = json_string_value(json_object_get(same[i].in_data ? data : ev, same[i].key));
		if (!x || !y || strcmp(x, y) != 0) {
			(void)snprintf(why, why ? why_size : 0, "event.data.binding.%s: not this record's %s",
				       same[i].bkey, same[i].key);
			return -EBADMSG;
		}
	}
	if ((r = buf_init(&jcs, (size_t)1 << 20, 0)) < 0) {
		return r;
	}
	r = json_write_jcs(b, &jcs);
	if (r >= 0) {
		r = sha256(buf_ptr(&jcs), buf_len(&jcs), h);
	}
	buf_release(&jcs);
	if (r < 0) {
		return r == -ENOMEM ? r : -EBADMSG;
	}
	for (size_t i = 0; i < SHA256_LEN; i++) {
		(void)snprintf(want + 7 + 2 * i, 3, "%02x", h[i]);
	}
	if (strcmp(want, digest) != 0) {
		(void)snprintf(why, why ? why_size : 0, "event.data.binding_digest: not sha256(JCS(binding))");
		return -EBADMSG;
	}
	return 0;
}
