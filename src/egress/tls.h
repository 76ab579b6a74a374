/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_EGRESS_TLS_H
#define TKBOX_EGRESS_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#include "buf.h"
#include "macro.h"

/*
 * One TLS endpoint driven without I/O (OpenSSL over two memory BIOs): the
 * caller puts the bytes it read from the wire in, takes the bytes to write
 * out, and reads and writes plaintext. The proxy uses two per inspected
 * connection: a server towards the box (the per-box CA's leaf) and a client
 * towards the origin (verified against the client context's trust store,
 * the name checked, SNI sent for a DNS name).
 */

#define EGRESS_TLS_CIPHER_MAX ((size_t)256 << 10) /* wire bytes held in either direction */

struct egress_tls;

_wur_ int egress_tls_server_new(SSL_CTX *ctx, struct egress_tls **ret);
/* host: a canonical DNS name (SNI and name check) or an IP literal (address check, no SNI). */
_wur_ int egress_tls_client_new(SSL_CTX *ctx, const char *host, struct egress_tls **ret);
void egress_tls_free(struct egress_tls *t);

/* Wire bytes in. -E2BIG past EGRESS_TLS_CIPHER_MAX held. */
_wur_ int egress_tls_put(struct egress_tls *t, const uint8_t *p, size_t n);

/* Wire bytes out: everything pending appended to out (up to its room). -errno of out. */
_wur_ int egress_tls_take(struct egress_tls *t, struct buf *out);

/* Bytes waiting to be taken. */
size_t egress_tls_pending(const struct egress_tls *t);

/*
 * Drive the handshake and read plaintext into out (at most max bytes).
 * Returns the bytes read (0: nothing yet), -EPIPE for the peer's
 * close_notify (or a clean EOF after egress_tls_eof), -EPROTO for a TLS or
 * verification failure (egress_tls_error says which, e.g. "certificate
 * verify failed: unable to get local issuer certificate").
 */
_wur_ int egress_tls_read(struct egress_tls *t, struct buf *out, size_t max);

/* Encrypt p[0..n) (queued until the handshake is done). -EPROTO after a failure. */
_wur_ int egress_tls_write(struct egress_tls *t, const uint8_t *p, size_t n);

/* The transport ended (the peer's socket or stream closed). */
void egress_tls_eof(struct egress_tls *t);

/* Send close_notify. */
void egress_tls_close(struct egress_tls *t);

bool egress_tls_established(const struct egress_tls *t);
const char *egress_tls_error(const struct egress_tls *t);

#endif
