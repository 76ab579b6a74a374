/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_SIGNER_CLIENT_H
#define TKBOX_SIGNER_CLIENT_H

#include "buf.h"
#include "json.h"

/*
 * A blocking client of the signer socket, for the CLI (status, approvals,
 * export, rpc), the tests and the bench. Replies are read as lines of at
 * most CLIENT_MAX_REPLY bytes and parsed strictly.
 */

#define CLIENT_MAX_REPLY ((size_t)32 << 20)

struct signer_client {
	int fd;
	struct buf in;
};

/*
 * Connect to the signer's socket. timeout_ms > 0 bounds the connect (a signer
 * that does not accept fills its listen backlog, and connect then blocks):
 * -ETIMEDOUT past it. It also stays the socket's send timeout.
 */
_wur_ int signer_client_connect(const char *socket_path, int timeout_ms, struct signer_client **ret);
void signer_client_free(struct signer_client *c);

/* Send one request line (JSON object, compact) and, when fd >= 0, pass fd with it (SCM_RIGHTS). */
_wur_ int signer_client_send(struct signer_client *c, const json_t *req, int fd);
/* Send raw bytes (already framed lines). */
_wur_ int signer_client_send_raw(struct signer_client *c, const void *p, size_t n);
/* Read one reply line and parse it (max_bytes CLIENT_MAX_REPLY). -ECONNRESET on EOF. */
_wur_ int signer_client_recv(struct signer_client *c, json_t **ret);
/* send + recv. */
_wur_ int signer_client_call(struct signer_client *c, const json_t *req, int fd, json_t **ret);
/* Connect and say hello (RPC_PROTO_VERSION); err gets the signer's message on refusal. */
_wur_ int signer_client_open(const char *socket_path, struct signer_client **ret, char *err, size_t err_size);
/* The same, declaring role ("runtime", "approver"; NULL: none, a runtime connection) in hello. */
_wur_ int signer_client_open_as(const char *socket_path, const char *role, struct signer_client **ret, char *err,
				size_t err_size);

/* The error code of a reply ({"error":{"code"}}), or NULL for a success. */
const char *signer_reply_error(const json_t *reply, const char **ret_message);

#endif
