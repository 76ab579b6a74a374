/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_SIGNER_LINK_H
#define TKBOX_DAEMON_SIGNER_LINK_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

/*
 * The daemon's one way to the signer. Every call ends by its deadline: a
 * signer that is stopped (kill -STOP), wedged or overloaded fails the call
 * with -ETIMEDOUT instead of holding the caller. The deadline is tkbox daemon
 * --signer-timeout (docs/limits.md); approval_wait adds its own wait to it,
 * export its own.
 *
 * Connections are long-lived: hello (role runtime) once per connection, one
 * call at a time on each, several calls in flight on several connections.
 * When the signer restarts, a request with a request_id is sent again, same
 * id, on a new connection (the signer answers a repeat with its first answer).
 */

/* Idle connections kept for the next calls (more may be open while calls are in flight). */
#define SIGNER_LINK_MAX_IDLE 16
/* An idle connection is closed after this long (the signer closes one idle 30 s: SERVER_IDLE_TIMEOUT_MS). */
#define SIGNER_LINK_IDLE_MS 20000
/* A refused connect (a signer restarting) is tried again for this long, within the call's deadline. */
#define SIGNER_LINK_RECONNECT_MS 5000
#define SIGNER_LINK_RECONNECT_PAUSE_MS 50
/* Sends of one request in all (the first and its resends after a lost connection). */
#define SIGNER_LINK_MAX_SENDS 3

/* Once, before any call: the signer's socket and the per-call timeout. */
_wur_ int signer_link_init(const char *socket_path, unsigned timeout_s);
void signer_link_shutdown(void);
const char *signer_link_socket(void);

/* The deadline (CLOCK_MONOTONIC ms) of a call starting now that may take extra_ms more than an ordinary one. */
int64_t signer_link_deadline(int64_t extra_ms);

/* Adds a fresh request_id to a state-changing request (idempotent retries). Takes and returns req. */
json_t *signer_link_request_id(json_t *req);

/*
 * One request and its reply by the deadline. Takes req. pass_fd (or -1) goes
 * with the request (export's bundle memfd). abandon_fd (or -1) is the API
 * client's connection: when the client hangs up, the call is abandoned
 * (-ECANCELED). 0 with the reply in *ret; -EREMOTEIO with *ret (the error
 * reply) when the signer refused; -ETIMEDOUT past the deadline; -EPROTO when
 * the signer refused the daemon's hello.
 */
_wur_ int signer_link_call(json_t *req, int pass_fd, int abandon_fd, int64_t deadline, json_t **ret);

/* A message for the user about a failed call (what: the method; reply: the error reply or NULL). */
void signer_link_error(char *err, size_t err_size, const char *what, int r, const json_t *reply);

/* signer_link_call by the ordinary deadline; err gets a message for the user. ret may be NULL. Takes req. */
_wur_ int signer_link_once(json_t *req, json_t **ret, char *err, size_t err_size);

#endif
