/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_SIGNER_SERVICE_H
#define TKBOX_SIGNER_SERVICE_H

#include <sys/types.h>

#include "config.h"
#include "policy.h"
#include "rpc.h"
#include "store.h"

/*
 * The signer's state and its RPC verbs. The state (runs, decisions,
 * approvals, idempotent replies, the Merkle tree, the log head) is derived
 * from the records: at start it is rebuilt by replaying the store, and every
 * new record goes through the same apply step. Nothing is acknowledged
 * before it is durable: each reply carries `need`, the record count that must
 * be committed before the reply may be sent (the server holds it until
 * then). When a commit fails, every uncommitted record is dropped and the
 * state is rebuilt from the store (service_reload), so the log never has a
 * hole and a failed decide fails closed.
 *
 * Single-threaded: the event loop owns the service.
 */

#define SERVICE_ENGINE "tkbox-policy@" TKBOX_VERSION
#define SERVICE_MAX_RUNS_OPEN 4096
#define SERVICE_MAX_DECISIONS_PER_RUN 1000000
#define SERVICE_APPROVAL_TTL_S 600
#define SERVICE_MAX_WAIT_MS 300000
#define SERVICE_CHECKPOINT_INTERVAL_MS 10000
#define SERVICE_MAX_BUNDLE ((size_t)512 << 20)
#define SERVICE_MAX_INLINE_EXPORT ((size_t)8 << 20)
#define SERVICE_MAX_OBSERVE_DATA ((size_t)64 << 10)
/*
 * Idempotent replies (by uid and request_id) kept in memory: the newest
 * SERVICE_MAX_REQUESTS_KEPT .. twice that. Every one is in the store, in the
 * same commit as its records; an older one is looked up there.
 */
#ifndef SERVICE_MAX_REQUESTS_KEPT /* a test builds the service with a small one (test-signer-requests) */
#define SERVICE_MAX_REQUESTS_KEPT 32768
#endif

struct service;

struct caller {
	uid_t uid;
	gid_t gid;
	pid_t pid;
	enum signer_role role; /* declared in hello; runtime until then */
	bool role_declared;
};

struct service_reply {
	json_t *body; /* result or {"error":...}; NULL while parked */
	uint64_t need; /* records that must be durable before sending */
	bool close_after; /* close the connection after sending (unauthenticated, quota) */
	char *wait_approval; /* parked approval_wait: the approval id */
	int64_t wait_deadline_ms;
	bool set_role; /* the connection's first hello: it holds `role` from now on */
	enum signer_role role;
};
void service_reply_release(struct service_reply *r);

/*
 * Build the service over an open store (read connection). Replays the log;
 * on a fresh log appends the signer.epoch record (pending until committed).
 * policy is borrowed and must outlive the service.
 */
_wur_ int service_new(const struct signer_config *cfg, const struct signer_keys *keys, const struct policy *policy,
		      struct store *reader, struct service **ret, char *err, size_t err_size);
void service_free(struct service *s);

/* Handle one parsed request (fd: an fd the caller passed with it, or -1; borrowed). */
void service_handle(struct service *s, const struct caller *c, const struct rpc_request *req, int fd,
		    struct service_reply *ret);

/* Move the records and rows waiting to be committed to the caller (who frees them with store_item_release). */
void service_take_pending(struct service *s, struct store_item **ret_items, size_t *ret_n);

/*
 * Sign a pending record item (thread-safe: uses only the keys and the item).
 * The event was hashed and chained by the service; this makes its signed line.
 */
_wur_ int service_sign_item(const struct signer_keys *keys, struct store_item *it);

/* The committer reports: the first `count` records are durable. May queue a checkpoint. */
void service_durable(struct service *s, uint64_t count, int64_t now_ms);
uint64_t service_durable_count(const struct service *s);
uint64_t service_assigned_count(const struct service *s);

/* A commit failed: forget everything not durable and rebuild from the store. */
_wur_ int service_reload(struct service *s, char *err, size_t err_size);

/* Sign a checkpoint of the durable tree now, if it grew (at shutdown). */
void service_checkpoint_now(struct service *s);

/* Periodic work (checkpoint every 10 s while the tree grows). */
void service_tick(struct service *s, int64_t now_ms);

/*
 * For parked approval_wait replies: the reply body if the approval is no
 * longer pending (or the deadline passed), else NULL.
 */
json_t *service_wait_poll(struct service *s, const char *approval_id, bool deadline_passed);

/* The store connection for reads (export). */
int64_t service_now_ms(void);

#endif
