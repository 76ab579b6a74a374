/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_SIGNER_SERVER_H
#define TKBOX_SIGNER_SERVER_H

#include "config.h"

/*
 * `tkbox-signer serve`: one event loop thread (epoll: accept, read NDJSON
 * frames, decide, sign, answer in order) and one commit thread (group
 * commit: every record produced while the previous transaction was being
 * fsynced goes into the next one). A reply leaves only after the records it
 * depends on are committed.
 */

#define SERVER_MAX_CONNS 256
#define SERVER_IDLE_TIMEOUT_MS 30000
#define SERVER_MAX_OUTPUT ((size_t)64 << 20) /* queued reply bytes per connection */
#define SERVER_MAX_QUEUED 4096 /* queued replies per connection */

/*
 * Run until SIGTERM/SIGINT. ready_fd (or -1) gets one byte once the socket
 * listens (used by `up --wait`), then is closed. Returns 0 or -errno with err set.
 */
_wur_ int server_run(const struct signer_config *cfg, int ready_fd, char *err, size_t err_size);

#endif
