/* SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "daemon/api-proto.h"
#include "daemon/daemon.h"
#include "daemon/door.h"
#include "path.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A refusal names a status the API uses, a code and a message. */
static void check_refusal(const struct api_error *e)
{
	if ((e->status != 400 && e->status != 403 && e->status != 404 && e->status != 413) || !e->code ||
	    !e->message[0] || strlen(e->message) >= sizeof(e->message)) {
		abort();
	}
}

static void fuzz_create(const uint8_t *data, size_t size)
{
	struct api_create_req q = { 0 };
	struct api_error e = { 0 };

	if (api_decode_create(data, size, &q, &e) < 0) {
		check_refusal(&e);
		if (q.root || q.env) {
			abort(); /* released on refusal */
		}
		return;
	}
	if (!q.image || !*q.image || !q.env || (q.name && !door_box_name_ok(q.name)) || q.cpus < 1 || q.cpus > 64 ||
	    q.memory_mib < 128 || q.disk_mib < 64 || q.disk_mib > DAEMON_MAX_DISK_MIB || q.timeout_s < 1 ||
	    q.timeout_s > DAEMON_MAX_LIFETIME_S || q.exec_timeout_s < 1 || q.exec_timeout_s > DAEMON_MAX_LIFETIME_S ||
	    (q.registry_ca && (q.registry_ca[0] != '/' || strlen(q.registry_ca) > DAEMON_MAX_OPT_PATH))) {
		abort();
	}
	for (size_t i = 0; q.env[i]; i++) {
		if (i >= DAEMON_MAX_BOX_ENV || !strchr(q.env[i], '=')) {
			abort();
		}
	}
	api_create_req_release(&q);
}

static void fuzz_exec(const uint8_t *data, size_t size)
{
	struct api_exec_req q = { 0 };
	struct api_error e = { 0 };

	if (api_decode_exec(data, size, &q, &e) < 0) {
		check_refusal(&e);
		if (q.root || q.argv || q.env) {
			abort();
		}
		return;
	}
	if (!q.argv || !q.argv[0] || !q.env || (q.cwd && (q.cwd[0] != '/' || strlen(q.cwd) > DOOR_MAX_CWD)) ||
	    q.timeout_s > DAEMON_MAX_LIFETIME_S || buf_len(&q.stdin_data) > DOOR_MAX_STDIN ||
	    (q.stdin_mode != API_STDIN_UPFRONT && buf_len(&q.stdin_data) != 0)) {
		abort();
	}
	/* Every per-exec env entry the decoder let through is one door_env_check allows. */
	for (size_t i = 0; q.env[i]; i++) {
		const char *why;
		if (i >= DOOR_MAX_ENV || door_env_check(q.env[i], &why) < 0) {
			abort();
		}
	}
	api_exec_req_release(&q);
}

static void fuzz_apply(const uint8_t *data, size_t size)
{
	struct api_apply_req q = { 0 };
	struct api_error e = { 0 };

	if (api_decode_apply(data, size, &q, &e) < 0) {
		check_refusal(&e);
		if (q.root || q.checkout) {
			abort();
		}
		return;
	}
	if (!q.root || (q.checkout && (strlen(q.checkout) > DAEMON_MAX_OPT_PATH || !path_is_normal_abs(q.checkout)))) {
		abort();
	}
	api_apply_req_release(&q);
}

/* The bytes as a request target: a route found names an operation and, when it has one, a box name or an id. */
static void fuzz_route(const uint8_t *data, size_t size)
{
	struct api_match m;
	struct api_error e = { 0 };
	char target[HTTP_MAX_TARGET + 1];

	if (size > HTTP_MAX_TARGET || memchr(data, '\0', size)) {
		return;
	}
	memcpy(target, data, size);
	target[size] = '\0';
	for (int method = HTTP_GET; method <= HTTP_DELETE; method++) {
		if (api_route((enum http_method)method, target, &m, &e) < 0) {
			check_refusal(&e);
			continue;
		}
		if (m.op >= API_OP_COUNT || (m.box[0] && !door_box_name_ok(m.box)) || strncmp(target, "/v1/", 4) != 0) {
			abort();
		}
		/* An {id} is 1..API_MAX_ID-1 of [a-z0-9-], and a route has a {box} or an {id}, never both. */
		if (m.id[0] && (m.box[0] || strlen(m.id) >= API_MAX_ID ||
				strspn(m.id, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(m.id))) {
			abort();
		}
	}
}

/*
 * Every API v1 body decoder and the route table over bytes a local client
 * sends. Properties: no crash or leak; a refusal has a status, a code and a
 * message and leaves nothing allocated; an accepted body is within every
 * limit the decoder promises.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct api_error e = { 0 };

	fuzz_create(data, size);
	fuzz_exec(data, size);
	fuzz_apply(data, size);
	if (api_decode_empty(data, size, &e) < 0) {
		check_refusal(&e);
	}
	fuzz_route(data, size);
	return 0;
}
