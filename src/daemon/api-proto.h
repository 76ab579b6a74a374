/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_API_PROTO_H
#define TKBOX_DAEMON_API_PROTO_H

#include <jansson.h>
#include <stdint.h>

#include "buf.h"
#include "daemon/http.h"
#include "egress/secret.h"
#include "macro.h"

/*
 * The daemon API v1: its routes and one decoder per operation's request body.
 * Pure: no I/O, no logging, no globals.
 *
 *   - api_route: (method, target) to an operation and its box name, from one
 *     table (api_routes[]).
 *   - api_decode_*: a body (bytes, possibly empty) to a typed struct. Each has
 *     a closed key set: an unknown key is refused with its name in the
 *     message. Each limit is refused with the limit in the message.
 *
 * On a refusal the decoders and api_route return < 0 and fill *ret_err with
 * the HTTP status, the error code and the message the user sees; the struct
 * being decoded is then released (api_*_release is safe on it).
 */

#define API_MAX_MESSAGE 1024
#define API_MAX_BODY_DEPTH 8

struct api_error {
	int status;
	const char *code; /* static */
	char message[API_MAX_MESSAGE];
};

/*
 * Fill e (status, static code, message) and return the errno that goes with
 * the status: 403 -EPERM, 413 -E2BIG, 404 -ENOENT, anything else -EBADMSG.
 */
int api_refuse(struct api_error *e, int status, const char *code, const char *fmt, ...) _printf_(4, 5);

enum api_op {
	API_OP_INFO = 0,
	API_OP_LIST,
	API_OP_CREATE,
	API_OP_SHOW,
	API_OP_RM,
	API_OP_EXEC,
	API_OP_STOP,
	API_OP_EXPORT,
	API_OP_APPROVALS,
	API_OP_APPROVE,
	API_OP_REJECT,
	API_OP_DIFF,
	API_OP_APPLY,
	API_OP_COUNT,
};

struct api_route {
	enum http_method method;
	const char *pattern; /* "/v1/boxes/{box}/exec": {box} matches one box name, {id} one approval id */
	enum api_op op;
};

/* The routes, terminated by a NULL pattern. */
extern const struct api_route api_routes[];

#define API_MAX_ID 32 /* an {id} segment: 1..31 of [a-z0-9-] (approval ids are "ap-" and 12 hex) */

struct api_match {
	enum api_op op;
	char box[64]; /* the {box} segment, or "" */
	char id[API_MAX_ID]; /* the {id} segment, or "" */
};

/*
 * Find target's route. 404 when no pattern matches the path (or the path
 * matches but not with this method), 400 when the {box} segment is not a box
 * name or the {id} segment not an id.
 */
_wur_ int api_route(enum http_method method, const char *target, struct api_match *ret, struct api_error *ret_err);

/* POST /v1/boxes: {image, name, workspace, env, memory_mib, cpus, timeout_s, exec_timeout_s, disk_mib, platform,
 * registry_auth, registry_ca, allow, inspect, secrets, config}. Strings point into root. secrets: [{name, value, hosts,
 * header?}] (<= EGRESS_SECRET_MAX, names unique; secret.h's rules); each value is copied into secmem and the
 * JSON string's bytes are wiped in place, so root never holds one. */
struct api_create_req {
	json_t *root;
	const char *image; /* required, non-empty */
	const char *name; /* NULL: the daemon picks one */
	const char *workspace; /* NULL: none */
	const char *platform; /* NULL, linux/amd64 or linux/arm64 */
	const char *registry_auth, *registry_ca; /* NULL or absolute paths <= DAEMON_MAX_OPT_PATH */
	char **env; /* NAME=VALUE entries (<= DAEMON_MAX_BOX_ENV), NULL-terminated, never NULL on success */
	unsigned cpus, memory_mib, disk_mib, timeout_s, exec_timeout_s; /* defaults filled in */
	char **allow; /* --allow values (<= EGRESS_MAX_ALLOW), each an entry or a preset (egress_policy_check); never NULL */
	bool inspect_all; /* inspect: "all" (an off-list host is refused at once) or "none" (default) */
	struct egress_secret *secrets; /* n_secrets entries (placeholder ""); value in secmem or NULL once taken */
	size_t n_secrets;
	const json_t *config; /* NULL, or the tkbox.yaml read: {file, sha256, overridden: [flag names]} (in root) */
};

#define API_MAX_CONFIG_FLAGS 16 /* config.overridden: flag names */

_wur_ int api_decode_create(const void *body, size_t n, struct api_create_req *ret, struct api_error *ret_err);
void api_create_req_release(struct api_create_req *r);

enum api_stdin_mode {
	API_STDIN_NONE = 0,
	API_STDIN_UPFRONT,
	API_STDIN_STREAM,
};

/* POST /v1/boxes/{box}/exec: {argv, env, cwd, stdin: {mode, data}, timeout_s}. Strings point into root. */
struct api_exec_req {
	json_t *root;
	char **argv; /* at least one word, <= DOOR_MAX_ARGS */
	char **env; /* per-exec "K=V" entries that door_env_check allows (<= DOOR_MAX_ENV); never NULL */
	const char *cwd; /* absolute, <= DOOR_MAX_CWD; NULL: the box's WorkingDir */
	enum api_stdin_mode stdin_mode;
	const char *stdin_mode_name; /* "none", "upfront", "stream" (static) */
	struct buf stdin_data; /* upfront: the decoded bytes (<= DOOR_MAX_STDIN) */
	unsigned timeout_s; /* 0: the box's exec timeout; else 1..DAEMON_MAX_LIFETIME_S */
};

_wur_ int api_decode_exec(const void *body, size_t n, struct api_exec_req *ret, struct api_error *ret_err);
void api_exec_req_release(struct api_exec_req *r);

/*
 * POST /v1/boxes/{box}/apply: {checkout?, allow_sensitive?, dry_run?} (closed key set). checkout: an absolute path
 * (path_is_normal_abs) of at most DAEMON_MAX_OPT_PATH bytes; absent: the box's --workspace source. The two flags
 * are booleans, false when absent. Strings point into root.
 */
struct api_apply_req {
	json_t *root;
	const char *checkout; /* NULL: the box's --workspace source */
	bool allow_sensitive, dry_run;
};

_wur_ int api_decode_apply(const void *body, size_t n, struct api_apply_req *ret, struct api_error *ret_err);
void api_apply_req_release(struct api_apply_req *r);

/* The operations without fields (info, list, show, rm, stop, export, diff): an empty body or {}. */
_wur_ int api_decode_empty(const void *body, size_t n, struct api_error *ret_err);

#endif
