/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "banned.h"
#include "crypto.h"
#include "egress/host.h"
#include "egress/tls.h"

#define TLS_ERR_MAX 256
#define TLS_READ_CHUNK 16384 /* one TLS record's plaintext: what SSL_read_ex gives at most per call */

struct egress_tls {
	SSL *ssl; /* holds its own reference on its SSL_CTX (SSL_new): a CA cache eviction cannot free it */
	BIO *in; /* wire bytes from the peer (the SSL reads them); owned by ssl */
	BIO *out; /* wire bytes for the peer (the SSL writes them); owned by ssl */
	struct buf queue; /* plaintext written before the handshake ended (secret: it may hold a swapped value) */
	bool established, eof, failed, peer_closed, close_wanted, close_sent;
	char err[TLS_ERR_MAX];
};

/* The error text is a + b. */
static void tls_fail(struct egress_tls *t, const char *a, const char *b)
{
	t->failed = true;
	(void)snprintf(t->err, sizeof(t->err), "%s%s", a, b);
}

/*
 * A failed SSL call: the reason from OpenSSL's queue (drained by
 * crypto_ossl_error, the one place that reads it), or the verifier's when
 * the peer's certificate was refused.
 */
static void tls_fail_ssl(struct egress_tls *t, int e)
{
	char reason[TLS_ERR_MAX - 32];
	long v = SSL_get_verify_result(t->ssl);

	(void)crypto_ossl_error(reason, sizeof(reason));
	if (v != X509_V_OK) {
		tls_fail(t, "certificate verify failed: ", X509_verify_cert_error_string(v));
	} else if (e == SSL_ERROR_SYSCALL) {
		tls_fail(t, "", "the TLS connection failed (no reason given)");
	} else {
		tls_fail(t, "", reason);
	}
}

static int tls_new(SSL_CTX *ctx, bool server, struct egress_tls **ret)
{
	struct egress_tls *t;
	int r;

	if (!ctx || !ret) {
		return -EINVAL;
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		return -ENOMEM;
	}
	r = buf_init(&t->queue, EGRESS_TLS_CIPHER_MAX, BUF_SECRET);
	if (r < 0) {
		free(t);
		return r;
	}
	t->ssl = SSL_new(ctx);
	t->in = BIO_new(BIO_s_mem());
	t->out = BIO_new(BIO_s_mem());
	if (!t->ssl || !t->in || !t->out) {
		r = crypto_ossl_error(NULL, 0);
		BIO_free(t->in);
		BIO_free(t->out);
		t->in = t->out = NULL;
		egress_tls_free(t);
		return r == -EIO ? -ENOMEM : r;
	}
	/* An empty BIO means "nothing yet", never EOF: the transport's end comes through egress_tls_eof. */
	(void)BIO_set_mem_eof_return(t->in, -1);
	(void)BIO_set_mem_eof_return(t->out, -1);
	SSL_set_bio(t->ssl, t->in, t->out);
	/* A write retried from the queue passes another pointer than the first attempt. */
	(void)SSL_set_mode(t->ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	if (server) {
		SSL_set_accept_state(t->ssl);
	} else {
		SSL_set_connect_state(t->ssl);
	}
	*ret = t;
	return 0;
}

int egress_tls_server_new(SSL_CTX *ctx, struct egress_tls **ret)
{
	return tls_new(ctx, true, ret);
}

int egress_tls_client_new(SSL_CTX *ctx, const char *host, struct egress_tls **ret)
{
	struct egress_tls *t;
	struct egress_host h;
	char lit[EGRESS_ADDR_TEXT_MAX];
	uint8_t ip[16];
	size_t n = host ? strnlen(host, EGRESS_HOST_TEXT_MAX) : 0;
	bool is_ip = false;
	int r;

	if (n == 0 || n >= EGRESS_HOST_TEXT_MAX) {
		return -EINVAL;
	}
	/* An IP literal in inet_pton's form (IPv6 with or without brackets), or a canonical DNS name. */
	if (host[0] == '[' && n >= 2 && host[n - 1] == ']') {
		if (n - 2 >= sizeof(lit)) {
			return -EINVAL;
		}
		memcpy(lit, host + 1, n - 2);
		lit[n - 2] = '\0';
		if (inet_pton(AF_INET6, lit, ip) != 1) {
			return -EINVAL;
		}
		is_ip = true;
	} else if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1) {
		(void)snprintf(lit, sizeof(lit), "%s", host);
		is_ip = true;
	} else if (egress_host_parse(host, n, &h) < 0 || h.kind != EGRESS_HOST_NAME || strcmp(h.name, host) != 0) {
		return -EINVAL;
	}
	r = tls_new(ctx, false, &t);
	if (r < 0) {
		return r;
	}
	if (is_ip) {
		/* An address: checked against the certificate's iPAddress names; no SNI (RFC 6066 forbids it). */
		if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), lit) != 1) {
			goto fail;
		}
	} else {
		SSL_set_hostflags(t->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
		if (SSL_set1_host(t->ssl, host) != 1 || SSL_set_tlsext_host_name(t->ssl, host) != 1) {
			goto fail;
		}
	}
	*ret = t;
	return 0;
fail:
	r = crypto_ossl_error(NULL, 0);
	egress_tls_free(t);
	return r;
}

void egress_tls_free(struct egress_tls *t)
{
	if (!t) {
		return;
	}
	SSL_free(t->ssl); /* frees both BIOs and drops its CTX reference */
	buf_release(&t->queue);
	explicit_bzero(t, sizeof(*t));
	free(t);
}

int egress_tls_put(struct egress_tls *t, const uint8_t *p, size_t n)
{
	size_t held;

	if (!t || (!p && n > 0)) {
		return -EINVAL;
	}
	if (t->eof) {
		return -EPIPE;
	}
	held = BIO_ctrl_pending(t->in);
	if (n > EGRESS_TLS_CIPHER_MAX || held > EGRESS_TLS_CIPHER_MAX - n) {
		return -E2BIG;
	}
	if (n == 0) {
		return 0;
	}
	if (BIO_write(t->in, p, (int)n) != (int)n) {
		int r = crypto_ossl_error(NULL, 0);
		return r == -EIO ? -ENOMEM : r;
	}
	return 0;
}

int egress_tls_take(struct egress_tls *t, struct buf *out)
{
	size_t n;
	uint8_t *dst;
	int got, r;

	if (!t || !out) {
		return -EINVAL;
	}
	n = MIN(BIO_ctrl_pending(t->out), buf_avail(out));
	if (n == 0) {
		return 0;
	}
	r = buf_reserve(out, n, &dst);
	if (r < 0) {
		return r;
	}
	got = BIO_read(t->out, dst, (int)n);
	if (got < 0) {
		got = 0;
	}
	out->len -= n - (size_t)got;
	return got;
}

size_t egress_tls_pending(const struct egress_tls *t)
{
	return t ? BIO_ctrl_pending(t->out) : 0;
}

/* Send what was queued; then close_notify if egress_tls_close asked for it. Handshake done. */
static int flush(struct egress_tls *t)
{
	while (buf_len(&t->queue) > 0) {
		size_t n = 0;
		int e;

		ERR_clear_error();
		if (SSL_write_ex(t->ssl, buf_ptr(&t->queue), buf_len(&t->queue), &n) == 1) {
			(void)buf_consume(&t->queue, n);
			continue;
		}
		e = SSL_get_error(t->ssl, 0);
		if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
			return 0;
		}
		tls_fail_ssl(t, e);
		return -EPROTO;
	}
	if (t->close_wanted && !t->close_sent) {
		t->close_sent = true;
		ERR_clear_error();
		if (SSL_shutdown(t->ssl) < 0) {
			(void)crypto_ossl_error(NULL, 0);
		}
	}
	return 0;
}

/* 1: established; 0: more wire bytes needed; -EPROTO: failed. */
static int handshake(struct egress_tls *t)
{
	int r, e;

	ERR_clear_error();
	r = SSL_do_handshake(t->ssl);
	if (r == 1) {
		t->established = true;
		return flush(t) < 0 ? -EPROTO : 1;
	}
	e = SSL_get_error(t->ssl, r);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
		if (t->eof) {
			tls_fail(t, "", "the peer closed the connection during the TLS handshake");
			return -EPROTO;
		}
		return 0;
	}
	tls_fail_ssl(t, e);
	return -EPROTO;
}

int egress_tls_read(struct egress_tls *t, struct buf *out, size_t max)
{
	size_t room, got = 0;
	int r;

	if (!t || !out) {
		return -EINVAL;
	}
	if (t->failed) {
		return -EPROTO;
	}
	if (t->peer_closed) {
		return -EPIPE;
	}
	if (!t->established) {
		r = handshake(t);
		if (r <= 0) {
			return r;
		}
	}
	room = MIN(MIN(max, buf_avail(out)), (size_t)INT32_MAX);
	while (got < room) {
		size_t want = MIN(room - got, (size_t)TLS_READ_CHUNK), n = 0;
		uint8_t *dst;
		int e;

		r = buf_reserve(out, want, &dst);
		if (r < 0) {
			return got > 0 ? (int)got : r;
		}
		ERR_clear_error();
		if (SSL_read_ex(t->ssl, dst, want, &n) == 1) {
			out->len -= want - n;
			got += n;
			continue;
		}
		out->len -= want;
		e = SSL_get_error(t->ssl, 0);
		if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
			break;
		}
		if (e == SSL_ERROR_ZERO_RETURN) {
			t->peer_closed = true;
			break;
		}
		tls_fail_ssl(t, e);
		/* What was read before the failure is the caller's; the next call says -EPROTO. */
		return got > 0 ? (int)got : -EPROTO;
	}
	if (got > 0) {
		return (int)got;
	}
	if (t->peer_closed) {
		return -EPIPE;
	}
	if (t->eof && got < room) {
		/* The transport ended: at a record boundary it is an end (many servers skip close_notify), else a cut. */
		if (BIO_ctrl_pending(t->in) > 0 || SSL_has_pending(t->ssl)) {
			tls_fail(t, "", "the connection ended inside a TLS record");
			return -EPROTO;
		}
		t->peer_closed = true;
		return -EPIPE;
	}
	return 0;
}

int egress_tls_write(struct egress_tls *t, const uint8_t *p, size_t n)
{
	size_t held;
	int r;

	if (!t || (!p && n > 0)) {
		return -EINVAL;
	}
	if (t->failed) {
		return -EPROTO;
	}
	if (t->close_wanted) {
		return -EPIPE;
	}
	/* Plaintext becomes as many wire bytes (plus framing): the bound on wire bytes held out applies to it. */
	held = BIO_ctrl_pending(t->out) + buf_len(&t->queue);
	if (n > EGRESS_TLS_CIPHER_MAX || held > EGRESS_TLS_CIPHER_MAX - n) {
		return -E2BIG;
	}
	if (n == 0) {
		return 0;
	}
	if (t->established && buf_len(&t->queue) == 0) {
		size_t w = 0;
		int e;

		ERR_clear_error();
		if (SSL_write_ex(t->ssl, p, n, &w) == 1) {
			return 0;
		}
		e = SSL_get_error(t->ssl, 0);
		if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
			tls_fail_ssl(t, e);
			return -EPROTO;
		}
		/* Not now (a TLS 1.3 key update waiting on the peer): queued; SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER */
	}
	r = buf_put(&t->queue, p, n);
	if (r < 0) {
		return r;
	}
	return t->established ? flush(t) : 0;
}

void egress_tls_eof(struct egress_tls *t)
{
	if (t) {
		t->eof = true;
	}
}

void egress_tls_close(struct egress_tls *t)
{
	if (!t || t->failed || t->close_wanted) {
		return;
	}
	t->close_wanted = true;
	if (t->established) {
		(void)flush(t);
	}
}

bool egress_tls_established(const struct egress_tls *t)
{
	return t && t->established;
}

const char *egress_tls_error(const struct egress_tls *t)
{
	return t ? t->err : "";
}
