/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_EGRESS_CA_H
#define TKBOX_EGRESS_CA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#include "macro.h"

/*
 * The per-box CA (docs/secrets.md "The per-box CA"). The daemon makes one
 * for each box that may have inspected connections (a secret, --inspect
 * all, or a model preset) and puts its certificate in the boot config; the
 * supervisor gets certificate and key in its boot request and mints a leaf
 * per host on first use (cached).
 *
 * CA: ECDSA P-256, X.509 v3, subject "CN=tkbox box <box_id> CA", serial 128
 * random bits, notBefore now - 1 h, notAfter now + lifetime + 1 day;
 * basicConstraints critical CA:TRUE pathlen:0; keyUsage critical
 * keyCertSign, cRLSign; subjectKeyIdentifier; authorityKeyIdentifier;
 * nameConstraints (critical) permitting exactly the names given (a DNS name
 * permits it and its subdomains; an IPv4/IPv6 literal permits that one
 * address); none given: no nameConstraints extension.
 *
 * Leaf: one P-256 key per CA (made with it), subject CN=host for a DNS name
 * of at most 64 bytes, else O=tkbox (OpenSSL checks a leaf's CN against the
 * CA's DNS name constraints when it has no DNS SAN), SAN dNSName
 * (or iPAddress for a literal), basicConstraints critical CA:FALSE, keyUsage
 * critical digitalSignature, extendedKeyUsage serverAuth, SKI, AKI (keyid),
 * serial 128 random bits, the CA's validity. Both pass OpenSSL's
 * X509_V_FLAG_X509_STRICT (what Python 3.13's VERIFY_X509_STRICT sets).
 */

#define EGRESS_CA_PERMITTED_MAX 600 /* names in nameConstraints (allow entries, bound hosts, the self-test name) */
#define EGRESS_CA_CACHE 256 /* leaves kept per box; the oldest goes first */
#define EGRESS_CA_PEM_MAX 16384 /* a certificate or key in PEM */
#define EGRESS_SELFTEST_HOST "tkbox-selftest.invalid"

struct egress_ca;

/* A fresh CA. permitted: DNS names or IP literals (canonical, as host.h prints them). -EINVAL, -ENOMEM, -EIO (OpenSSL). */
_wur_ int egress_ca_new(const char *box_id, const char *const *permitted, size_t n, int64_t lifetime_s,
			struct egress_ca **ret);

/* PEM texts (malloc'd; the key's is wiped by the caller with explicit_bzero before free). */
_wur_ int egress_ca_cert_pem(const struct egress_ca *ca, char **ret);
_wur_ int egress_ca_key_pem(const struct egress_ca *ca, char **ret);

/* The CA from its PEM texts (the supervisor). -EBADMSG when they do not parse or do not belong together. */
_wur_ int egress_ca_load(const char *cert_pem, const char *key_pem, struct egress_ca **ret);

/*
 * The server-side SSL_CTX for host (a canonical DNS name or IP literal): the
 * leaf minted on first use and cached. TLS 1.2 and 1.3, ALPN "http/1.1"
 * only (a client offering only h2 gets no ALPN, and speaks HTTP/1.1 or
 * fails). The CTX stays owned by the CA's cache: use it at once (SSL_new
 * takes its own reference), before the next call may evict it.
 */
_wur_ int egress_ca_server_ctx(struct egress_ca *ca, const char *host, SSL_CTX **ret);

void egress_ca_free(struct egress_ca *ca);

/*
 * The client-side SSL_CTX the proxy verifies origins with: the system trust
 * store (OpenSSL's default paths) plus extra_ca_file when not NULL (tkbox
 * daemon --egress-ca FILE), TLS 1.2+, peer verification on, ALPN
 * "http/1.1". Loaded before the supervisor confines itself.
 */
_wur_ int egress_tls_client_ctx(const char *extra_ca_file, SSL_CTX **ret);

#endif
