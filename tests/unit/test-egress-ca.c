/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "banned.h"
#include "buf.h"
#include "egress/ca.h"
#include "egress/tls.h"

static const char *const permitted[] = { "example.test", "192.0.2.1", "2001:db8::1", EGRESS_SELFTEST_HOST };

/* CPU time of this process: what a figure costs, less at the mercy of the machine's load than wall time. */
static uint64_t now_us(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static struct egress_ca *ca_make(const char *const *names, size_t n)
{
	struct egress_ca *ca = NULL;

	assert_int_equal(egress_ca_new("box-1", names, n, 3600, &ca), 0);
	assert_non_null(ca);
	return ca;
}

static X509 *ca_cert(const struct egress_ca *ca)
{
	char *pem = NULL;
	BIO *b;
	X509 *x;

	assert_int_equal(egress_ca_cert_pem(ca, &pem), 0);
	b = BIO_new_mem_buf(pem, -1);
	x = PEM_read_bio_X509(b, NULL, NULL, NULL);
	assert_non_null(x);
	BIO_free(b);
	free(pem);
	return x;
}

static X509 *leaf_of(struct egress_ca *ca, const char *host)
{
	SSL_CTX *ctx = NULL;
	X509 *x;

	assert_int_equal(egress_ca_server_ctx(ca, host, &ctx), 0);
	x = SSL_CTX_get0_certificate(ctx);
	assert_non_null(x);
	assert_int_equal(X509_up_ref(x), 1);
	return x;
}

/* X509_verify_cert with the CA as the only anchor, strict (Python 3.13's VERIFY_X509_STRICT), as a TLS server. */
static int verify_ex(X509 *anchor, X509 *leaf, const char *host, unsigned long flags)
{
	X509_STORE *st = X509_STORE_new();
	X509_STORE_CTX *c = X509_STORE_CTX_new();
	int ok, err;

	assert_non_null(st);
	assert_non_null(c);
	assert_int_equal(X509_STORE_add_cert(st, anchor), 1);
	assert_int_equal(X509_STORE_CTX_init(c, st, leaf, NULL), 1);
	X509_STORE_CTX_set_flags(c, flags);
	assert_int_equal(X509_STORE_CTX_set_purpose(c, X509_PURPOSE_SSL_SERVER), 1);
	if (host) {
		X509_VERIFY_PARAM *p = X509_STORE_CTX_get0_param(c);
		if (strchr(host, ':') || (host[0] >= '0' && host[0] <= '9')) {
			assert_int_equal(X509_VERIFY_PARAM_set1_ip_asc(p, host), 1);
		} else {
			assert_int_equal(X509_VERIFY_PARAM_set1_host(p, host, 0), 1);
		}
	}
	ok = X509_verify_cert(c);
	err = X509_STORE_CTX_get_error(c);
	X509_STORE_CTX_free(c);
	X509_STORE_free(st);
	return ok == 1 ? X509_V_OK : (err == X509_V_OK ? -1 : err);
}

static int verify(X509 *anchor, X509 *leaf, const char *host)
{
	return verify_ex(anchor, leaf, host, X509_V_FLAG_X509_STRICT);
}

static X509_EXTENSION *ext_of(X509 *x, int nid)
{
	int i = X509_get_ext_by_NID(x, nid, -1);

	assert_true(i >= 0);
	/* exactly one */
	assert_true(X509_get_ext_by_NID(x, nid, i) < 0);
	return X509_get_ext(x, i);
}

static void test_ca_and_leaves_pass_strict(void **state)
{
	/* the last one is longer than a commonName may be (64): subject O=tkbox, the name in the SAN only */
	static const char *const hosts[] = {
		"api.example.test",
		"example.test",
		"a.b.example.test",
		"192.0.2.1",
		"2001:db8::1",
		EGRESS_SELFTEST_HOST,
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.example.test",
	};
	struct egress_ca *ca = ca_make(permitted, ARRAY_SIZE(permitted));
	X509 *cx = ca_cert(ca), *first = NULL;
	const ASN1_OCTET_STRING *ski;
	BASIC_CONSTRAINTS *bc;
	int day, sec;

	(void)state;
	/* The CA: v3, P-256, critical basicConstraints CA:TRUE pathlen:0, critical keyUsage, SKI, AKI, critical NC. */
	assert_int_equal(X509_get_version(cx), X509_VERSION_3);
	assert_true(EVP_PKEY_is_a(X509_get0_pubkey(cx), "EC"));
	assert_int_equal(EVP_PKEY_get_bits(X509_get0_pubkey(cx)), 256);
	assert_int_equal(X509_EXTENSION_get_critical(ext_of(cx, NID_basic_constraints)), 1);
	bc = X509_get_ext_d2i(cx, NID_basic_constraints, NULL, NULL);
	assert_non_null(bc);
	assert_true(bc->ca);
	assert_int_equal(ASN1_INTEGER_get(bc->pathlen), 0);
	BASIC_CONSTRAINTS_free(bc);
	assert_int_equal(X509_EXTENSION_get_critical(ext_of(cx, NID_key_usage)), 1);
	assert_int_equal(X509_get_key_usage(cx), KU_KEY_CERT_SIGN | KU_CRL_SIGN);
	assert_int_equal(X509_EXTENSION_get_critical(ext_of(cx, NID_name_constraints)), 1);
	ski = X509_get0_subject_key_id(cx);
	assert_non_null(ski);
	assert_non_null(X509_get0_authority_key_id(cx));
	assert_int_equal(ASN1_OCTET_STRING_cmp(ski, X509_get0_authority_key_id(cx)), 0);
	assert_true(ASN1_STRING_length(X509_get0_serialNumber(cx)) >= 14);
	/* notAfter = now + lifetime (3600) + 1 day, notBefore = now - 1 h (to the minute) */
	assert_int_equal(ASN1_TIME_diff(&day, &sec, NULL, X509_get0_notAfter(cx)), 1);
	assert_int_equal(day, 1);
	assert_true(sec > 3600 - 60 && sec <= 3600);
	assert_int_equal(ASN1_TIME_diff(&day, &sec, NULL, X509_get0_notBefore(cx)), 1);
	assert_true(day == 0 && sec >= -3600 - 60 && sec <= -3600 + 60);

	for (size_t i = 0; i < ARRAY_SIZE(hosts); i++) {
		X509 *lx = leaf_of(ca, hosts[i]);
		BASIC_CONSTRAINTS *lbc;

		assert_int_equal(verify(cx, lx, hosts[i]), X509_V_OK);
		assert_int_equal(X509_get_version(lx), X509_VERSION_3);
		assert_int_equal(X509_EXTENSION_get_critical(ext_of(lx, NID_basic_constraints)), 1);
		lbc = X509_get_ext_d2i(lx, NID_basic_constraints, NULL, NULL);
		assert_non_null(lbc);
		assert_false(lbc->ca);
		BASIC_CONSTRAINTS_free(lbc);
		assert_int_equal(X509_EXTENSION_get_critical(ext_of(lx, NID_key_usage)), 1);
		assert_int_equal(X509_get_key_usage(lx), KU_DIGITAL_SIGNATURE);
		assert_int_equal(X509_get_extended_key_usage(lx), XKU_SSL_SERVER);
		assert_non_null(X509_get0_subject_key_id(lx));
		assert_int_equal(ASN1_OCTET_STRING_cmp(X509_get0_authority_key_id(lx), ski), 0);
		assert_int_equal(ASN1_TIME_compare(X509_get0_notBefore(lx), X509_get0_notBefore(cx)), 0);
		assert_int_equal(ASN1_TIME_compare(X509_get0_notAfter(lx), X509_get0_notAfter(cx)), 0);
		assert_true(ASN1_STRING_length(X509_get0_serialNumber(lx)) >= 14);
		assert_int_equal(EVP_PKEY_get_bits(X509_get0_pubkey(lx)), 256);
		/* a host other than the leaf's own fails the name check */
		assert_int_equal(verify(cx, lx,
					hosts[i][0] == '2'   ? "2001:db8::2"
					: hosts[i][0] == '1' ? "192.0.2.9"
							     : "other.test"),
				 hosts[i][0] == '1' || hosts[i][0] == '2' ? X509_V_ERR_IP_ADDRESS_MISMATCH
									  : X509_V_ERR_HOSTNAME_MISMATCH);
		if (!first) {
			first = lx;
			continue;
		}
		/* one leaf key per CA, fresh serials */
		assert_int_equal(EVP_PKEY_eq(X509_get0_pubkey(first), X509_get0_pubkey(lx)), 1);
		assert_int_not_equal(ASN1_INTEGER_cmp(X509_get0_serialNumber(first), X509_get0_serialNumber(lx)), 0);
		X509_free(lx);
	}
	X509_free(first);
	X509_free(cx);
	egress_ca_free(ca);
}

static void test_name_constraints_enforced(void **state)
{
	static const char *const outside[] = { "evil.test", "notexample.test", "example.test.evil", "192.0.2.2",
					       "2001:db8::2" };
	static const char *const names_only[] = { "example.test" };
	struct egress_ca *ca = ca_make(permitted, ARRAY_SIZE(permitted));
	struct egress_ca *ca2 = ca_make(names_only, 1), *ca3 = ca_make(NULL, 0);
	X509 *cx = ca_cert(ca), *cx2 = ca_cert(ca2), *cx3 = ca_cert(ca3), *lx;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(outside); i++) {
		lx = leaf_of(ca, outside[i]);
		assert_int_equal(verify(cx, lx, NULL), X509_V_ERR_PERMITTED_VIOLATION);
		X509_free(lx);
	}
	/* No address permitted: every address is excluded. */
	lx = leaf_of(ca2, "192.0.2.1");
	assert_int_equal(verify(cx2, lx, NULL), X509_V_ERR_EXCLUDED_VIOLATION);
	X509_free(lx);
	lx = leaf_of(ca2, "2001:db8::1");
	assert_int_equal(verify(cx2, lx, NULL), X509_V_ERR_EXCLUDED_VIOLATION);
	X509_free(lx);
	lx = leaf_of(ca2, "x.example.test");
	assert_int_equal(verify(cx2, lx, NULL), X509_V_OK);
	X509_free(lx);
	/* None given: no nameConstraints, any name verifies. */
	assert_true(X509_get_ext_by_NID(cx3, NID_name_constraints, -1) < 0);
	lx = leaf_of(ca3, "evil.test");
	assert_int_equal(verify(cx3, lx, "evil.test"), X509_V_OK);
	X509_free(lx);

	/*
	 * A leaf built by hand with the CA's key (the key PEM): CN only, no SAN,
	 * outside the permitted names. OpenSSL checks the CN against the DNS
	 * constraints then: refused too.
	 */
	{
		char *kp = NULL;
		BIO *b;
		EVP_PKEY *cak, *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
		X509 *h = X509_new();

		assert_int_equal(egress_ca_key_pem(ca, &kp), 0);
		b = BIO_new_mem_buf(kp, -1);
		cak = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
		assert_non_null(cak);
		BIO_free(b);
		explicit_bzero(kp, strlen(kp));
		free(kp);
		assert_int_equal(X509_set_version(h, X509_VERSION_3), 1);
		assert_int_equal(ASN1_INTEGER_set(X509_get_serialNumber(h), 7), 1);
		assert_int_equal(X509_NAME_add_entry_by_txt(X509_get_subject_name(h), "CN", MBSTRING_ASC,
							    (const unsigned char *)"www.evil.test", -1, -1, 0),
				 1);
		assert_int_equal(X509_set_issuer_name(h, X509_get_subject_name(cx)), 1);
		assert_int_equal(X509_set1_notBefore(h, X509_get0_notBefore(cx)), 1);
		assert_int_equal(X509_set1_notAfter(h, X509_get0_notAfter(cx)), 1);
		assert_int_equal(X509_set_pubkey(h, k), 1);
		assert_true(X509_sign(h, cak, EVP_sha256()) > 0);
		/* not strict: this leaf lacks the extensions strict mode wants */
		assert_int_equal(verify_ex(cx, h, NULL, 0), X509_V_ERR_PERMITTED_VIOLATION);
		X509_free(h);
		EVP_PKEY_free(k);
		EVP_PKEY_free(cak);
	}
	X509_free(cx);
	X509_free(cx2);
	X509_free(cx3);
	egress_ca_free(ca);
	egress_ca_free(ca2);
	egress_ca_free(ca3);
}

static void test_new_refuses(void **state)
{
	static const char *const bad[] = {
		"",	    "Example.test", "127.1", "*.example.test", "example.test.", "exa mple.test", "[192.0.2.1]",
		"::ffff:zz"
	};
	const char *names[EGRESS_CA_PERMITTED_MAX + 1];
	char text[EGRESS_CA_PERMITTED_MAX + 1][32];
	struct egress_ca *ca = NULL;
	SSL_CTX *ctx;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(egress_ca_new("box-1", &bad[i], 1, 3600, &ca), -EINVAL);
	}
	assert_int_equal(egress_ca_new("", permitted, 1, 3600, &ca), -EINVAL);
	assert_int_equal(egress_ca_new("box/1", permitted, 1, 3600, &ca), -EINVAL);
	assert_int_equal(egress_ca_new("box-1", permitted, 1, 0, &ca), -EINVAL);
	assert_int_equal(egress_ca_new("box-1", NULL, 1, 3600, &ca), -EINVAL);
	assert_null(ca);
	/* EGRESS_CA_PERMITTED_MAX names work; one more is refused. */
	for (size_t i = 0; i <= EGRESS_CA_PERMITTED_MAX; i++) {
		(void)snprintf(text[i], sizeof(text[i]), "h%zu.example.test", i);
		names[i] = text[i];
	}
	assert_int_equal(egress_ca_new("box-1", names, EGRESS_CA_PERMITTED_MAX + 1, 3600, &ca), -EINVAL);
	/* A box id of 64 bytes (cut in the CN). */
	assert_int_equal(egress_ca_new("0123456789012345678901234567890123456789012345678901234567890123", names,
				       EGRESS_CA_PERMITTED_MAX, 3600, &ca),
			 0);
	assert_int_equal(egress_ca_server_ctx(ca, "Bad.example.test", &ctx), -EINVAL);
	assert_int_equal(egress_ca_server_ctx(ca, "", &ctx), -EINVAL);
	{
		X509 *cx = ca_cert(ca), *lx = leaf_of(ca, "h599.example.test");
		assert_int_equal(verify(cx, lx, "h599.example.test"), X509_V_OK);
		X509_free(lx);
		X509_free(cx);
	}
	egress_ca_free(ca);
}

static void test_pem_round_trip(void **state)
{
	struct egress_ca *ca = ca_make(permitted, ARRAY_SIZE(permitted)), *other = ca_make(permitted, 1);
	struct egress_ca *loaded = NULL;
	char *cert = NULL, *key = NULL, *okey = NULL, *big, *trail;
	X509 *cx, *lx;

	(void)state;
	assert_int_equal(egress_ca_cert_pem(ca, &cert), 0);
	assert_int_equal(egress_ca_key_pem(ca, &key), 0);
	assert_int_equal(egress_ca_key_pem(other, &okey), 0);
	assert_non_null(strstr(cert, "-----BEGIN CERTIFICATE-----"));
	assert_non_null(strstr(key, "-----BEGIN PRIVATE KEY-----"));
	assert_int_equal(egress_ca_load(cert, key, &loaded), 0);
	/* The loaded CA mints leaves that chain to the original certificate. */
	cx = ca_cert(ca);
	lx = leaf_of(loaded, "api.example.test");
	assert_int_equal(verify(cx, lx, "api.example.test"), X509_V_OK);
	X509_free(lx);
	X509_free(cx);
	{
		char *again = NULL;
		assert_int_equal(egress_ca_cert_pem(loaded, &again), 0);
		assert_string_equal(again, cert);
		free(again);
	}
	egress_ca_free(loaded);
	loaded = NULL;

	/* Refused: a key of another CA, garbage, swapped, trailing bytes, empty, over EGRESS_CA_PEM_MAX. */
	assert_int_equal(egress_ca_load(cert, okey, &loaded), -EBADMSG);
	assert_int_equal(egress_ca_load(cert, "garbage", &loaded), -EBADMSG);
	assert_int_equal(egress_ca_load(key, cert, &loaded), -EBADMSG);
	assert_int_equal(egress_ca_load("", key, &loaded), -EBADMSG);
	trail = malloc(strlen(cert) + 8);
	assert_non_null(trail);
	memcpy(trail, cert, strlen(cert));
	memcpy(trail + strlen(cert), "x\n", 3);
	assert_int_equal(egress_ca_load(trail, key, &loaded), -EBADMSG);
	free(trail);
	big = malloc(EGRESS_CA_PEM_MAX + 2);
	assert_non_null(big);
	memset(big, '\n', EGRESS_CA_PEM_MAX + 1);
	memcpy(big, cert, strlen(cert));
	big[EGRESS_CA_PEM_MAX + 1] = '\0';
	assert_int_equal(egress_ca_load(big, key, &loaded), -EBADMSG);
	big[EGRESS_CA_PEM_MAX] = '\0'; /* exactly the cap: trailing newlines only */
	assert_int_equal(egress_ca_load(big, key, &loaded), 0);
	egress_ca_free(loaded);
	free(big);
	/* A leaf certificate is not a CA, even with the right key for it: refused (CA key does not match anyway). */
	explicit_bzero(key, strlen(key));
	explicit_bzero(okey, strlen(okey));
	free(key);
	free(okey);
	free(cert);
	egress_ca_free(ca);
	egress_ca_free(other);
}

/* ---- handshakes between two egress_tls objects ---- */

struct seen {
	char alpn[32];
	char sni[256];
	int version;
	int done;
};
static struct seen seen_client, seen_server;

static void info_cb(const SSL *ssl, int where, int ret, struct seen *s)
{
	const unsigned char *p = NULL;
	unsigned len = 0;
	const char *sni;

	(void)ret;
	if (!(where & SSL_CB_HANDSHAKE_DONE)) {
		return;
	}
	SSL_get0_alpn_selected(ssl, &p, &len);
	(void)snprintf(s->alpn, sizeof(s->alpn), "%.*s", (int)len, p ? (const char *)p : "");
	sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
	(void)snprintf(s->sni, sizeof(s->sni), "%s", sni ? sni : "");
	s->version = SSL_version(ssl);
	s->done++;
}
static void info_client(const SSL *ssl, int where, int ret)
{
	info_cb(ssl, where, ret, &seen_client);
}
static void info_server(const SSL *ssl, int where, int ret)
{
	info_cb(ssl, where, ret, &seen_server);
}

/* Move what a holds for b, and what b holds for a. Returns the wire bytes moved. */
static size_t shuttle(struct egress_tls *a, struct egress_tls *b)
{
	struct buf w;
	size_t moved = 0;
	struct egress_tls *from[2] = { a, b }, *to[2] = { b, a };

	assert_int_equal(buf_init(&w, EGRESS_TLS_CIPHER_MAX, 0), 0);
	for (int i = 0; i < 2; i++) {
		int n = egress_tls_take(from[i], &w);
		assert_true(n >= 0);
		assert_int_equal((size_t)n, buf_len(&w));
		assert_int_equal(egress_tls_pending(from[i]), 0);
		assert_int_equal(egress_tls_put(to[i], buf_ptr(&w), buf_len(&w)), 0);
		moved += buf_len(&w);
		buf_reset(&w);
	}
	buf_release(&w);
	return moved;
}

/*
 * Shuttle and read both ends until nothing moves. The last read results in
 * *rc_c / *rc_s (a negative one stops that end's reads).
 */
static void run(struct egress_tls *c, struct egress_tls *s, struct buf *cin, struct buf *sin, int *rc_c, int *rc_s)
{
	*rc_c = *rc_s = 0;
	for (int round = 0; round < 100; round++) {
		size_t moved = shuttle(c, s);
		int got = 0;

		if (*rc_c >= 0) {
			*rc_c = egress_tls_read(c, cin, 1 << 20);
			got += *rc_c > 0;
		}
		if (*rc_s >= 0) {
			*rc_s = egress_tls_read(s, sin, 1 << 20);
			got += *rc_s > 0;
		}
		if (moved == 0 && got == 0 && egress_tls_pending(c) == 0 && egress_tls_pending(s) == 0) {
			return;
		}
	}
	fail_msg("no quiet state after 100 rounds");
}

static char ca_file[64];
static char tmp_dir[64];

/* The CA certificate in a temp file (for egress_tls_client_ctx's extra_ca_file). */
static void write_ca_file(const struct egress_ca *ca, const char *name, char *path, size_t size)
{
	char *pem = NULL;
	FILE *f;

	if (!tmp_dir[0]) {
		(void)snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/test-egress-ca.XXXXXX");
		assert_non_null(mkdtemp(tmp_dir));
	}
	(void)snprintf(path, size, "%s/%s", tmp_dir, name);
	assert_int_equal(egress_ca_cert_pem(ca, &pem), 0);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(pem, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
	free(pem);
}

static void test_handshake_and_data(void **state)
{
	struct egress_ca *ca = ca_make(permitted, ARRAY_SIZE(permitted));
	SSL_CTX *sctx = NULL, *cctx = NULL;
	struct egress_tls *c = NULL, *s = NULL;
	struct buf cin, sin, first;
	static const char req[] = "GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n";
	static const char resp[] = "HTTP/1.1 204 No Content\r\n\r\n";
	int rc_c, rc_s;
	uint64_t t0, total = 0;
	const int rounds = 20;

	(void)state;
	write_ca_file(ca, "ca.pem", ca_file, sizeof(ca_file));
	assert_int_equal(egress_ca_server_ctx(ca, "api.example.test", &sctx), 0);
	assert_int_equal(egress_tls_client_ctx(ca_file, &cctx), 0);
	SSL_CTX_set_info_callback(cctx, info_client);
	SSL_CTX_set_info_callback(sctx, info_server);
	assert_int_equal(buf_init(&cin, 4 << 20, 0), 0);
	assert_int_equal(buf_init(&sin, 4 << 20, 0), 0);
	assert_int_equal(buf_init(&first, EGRESS_TLS_CIPHER_MAX, 0), 0);

	assert_int_equal(egress_tls_server_new(sctx, &s), 0);
	assert_int_equal(egress_tls_client_new(cctx, "api.example.test", &c), 0);
	assert_false(egress_tls_established(c));
	/* Written before the handshake: queued, sent once it is done. */
	assert_int_equal(egress_tls_write(c, (const uint8_t *)req, strlen(req)), 0);
	assert_int_equal(egress_tls_read(c, &cin, 1024), 0); /* the ClientHello */
	assert_true(egress_tls_pending(c) > 0);
	assert_true(egress_tls_take(c, &first) > 0);
	/* SNI in the clear in the ClientHello; no request bytes in it */
	assert_non_null(memmem(buf_ptr(&first), buf_len(&first), "api.example.test", 16));
	assert_int_equal(egress_tls_put(s, buf_ptr(&first), buf_len(&first)), 0);
	run(c, s, &cin, &sin, &rc_c, &rc_s);
	assert_int_equal(rc_c, 0);
	assert_true(rc_s >= 0);
	assert_true(egress_tls_established(c));
	assert_true(egress_tls_established(s));
	assert_string_equal(egress_tls_error(c), "");
	assert_int_equal(buf_len(&sin), strlen(req));
	assert_memory_equal(buf_ptr(&sin), req, strlen(req));
	assert_string_equal(seen_client.alpn, "http/1.1");
	assert_string_equal(seen_server.alpn, "http/1.1");
	assert_string_equal(seen_server.sni, "api.example.test");
	assert_int_equal(seen_client.version, TLS1_3_VERSION);

	/* The other way, then 1 MiB each way in pieces within EGRESS_TLS_CIPHER_MAX. */
	assert_int_equal(egress_tls_write(s, (const uint8_t *)resp, strlen(resp)), 0);
	run(c, s, &cin, &sin, &rc_c, &rc_s);
	assert_int_equal(buf_len(&cin), strlen(resp));
	assert_memory_equal(buf_ptr(&cin), resp, strlen(resp));
	buf_reset(&cin);
	buf_reset(&sin);
	{
		size_t total_n = 1 << 20, chunk = 100000;
		uint8_t *data = malloc(total_n);
		assert_non_null(data);
		for (size_t i = 0; i < total_n; i++) {
			data[i] = (uint8_t)(i * 7 + (i >> 11));
		}
		for (size_t off = 0; off < total_n; off += chunk) {
			size_t n = MIN(chunk, total_n - off);
			assert_int_equal(egress_tls_write(c, data + off, n), 0);
			assert_int_equal(egress_tls_write(s, data + off, n), 0);
			run(c, s, &cin, &sin, &rc_c, &rc_s);
		}
		assert_int_equal(buf_len(&cin), total_n);
		assert_int_equal(buf_len(&sin), total_n);
		assert_memory_equal(buf_ptr(&cin), data, total_n);
		assert_memory_equal(buf_ptr(&sin), data, total_n);
		/* read's max is respected */
		buf_reset(&cin);
		assert_int_equal(egress_tls_write(s, data, 5000), 0);
		(void)shuttle(c, s);
		assert_int_equal(egress_tls_read(c, &cin, 1000), 1000);
		assert_int_equal(egress_tls_read(c, &cin, 1 << 20), 4000);
		assert_memory_equal(buf_ptr(&cin), data, 5000);
		free(data);
	}

	/* close_notify from the server: the client reads -EPIPE, and so does the server after the client's. */
	egress_tls_close(s);
	assert_int_equal(egress_tls_write(s, (const uint8_t *)"x", 1), -EPIPE);
	run(c, s, &cin, &sin, &rc_c, &rc_s);
	assert_int_equal(rc_c, -EPIPE);
	assert_int_equal(egress_tls_read(c, &cin, 100), -EPIPE);
	egress_tls_close(c);
	run(c, s, &cin, &sin, &rc_c, &rc_s);
	assert_int_equal(rc_s, -EPIPE);
	egress_tls_free(c);
	egress_tls_free(s);

	/* Handshake time (both ends in this process, memory BIOs): figures only, never asserted. */
	for (int i = 0; i < rounds; i++) {
		t0 = now_us();
		assert_int_equal(egress_tls_server_new(sctx, &s), 0);
		assert_int_equal(egress_tls_client_new(cctx, "api.example.test", &c), 0);
		run(c, s, &cin, &sin, &rc_c, &rc_s);
		assert_true(egress_tls_established(c) && egress_tls_established(s));
		total += now_us() - t0;
		egress_tls_free(c);
		egress_tls_free(s);
	}
	print_message("measure: TLS 1.3 handshake, both ends in-process: %llu us CPU (mean of %d)\n",
		      (unsigned long long)(total / (uint64_t)rounds), rounds);

	buf_release(&cin);
	buf_release(&sin);
	buf_release(&first);
	SSL_CTX_free(cctx);
	egress_ca_free(ca);
}

/* A client that fails: -EPROTO with a readable reason on both ends. */
static void expect_fail(SSL_CTX *sctx, SSL_CTX *cctx, const char *host, const char *client_err)
{
	struct egress_tls *c = NULL, *s = NULL;
	struct buf cin, sin;
	int rc_c, rc_s;

	assert_int_equal(buf_init(&cin, 1 << 20, 0), 0);
	assert_int_equal(buf_init(&sin, 1 << 20, 0), 0);
	assert_int_equal(egress_tls_server_new(sctx, &s), 0);
	assert_int_equal(egress_tls_client_new(cctx, host, &c), 0);
	assert_int_equal(egress_tls_write(c, (const uint8_t *)"secret", 6), 0);
	run(c, s, &cin, &sin, &rc_c, &rc_s);
	assert_int_equal(rc_c, -EPROTO);
	assert_false(egress_tls_established(c));
	assert_string_equal(egress_tls_error(c), client_err);
	/* the server got the client's alert */
	assert_int_equal(rc_s, -EPROTO);
	assert_true(strlen(egress_tls_error(s)) > 0);
	print_message("server side saw: %s\n", egress_tls_error(s));
	assert_int_equal(buf_len(&sin), 0);
	assert_int_equal(egress_tls_read(c, &cin, 100), -EPROTO);
	assert_int_equal(egress_tls_write(c, (const uint8_t *)"x", 1), -EPROTO);
	egress_tls_free(c);
	egress_tls_free(s);
	buf_release(&cin);
	buf_release(&sin);
}

static void test_handshake_failures(void **state)
{
	struct egress_ca *ca = ca_make(permitted, ARRAY_SIZE(permitted));
	SSL_CTX *sctx = NULL, *ipctx = NULL, *cctx = NULL, *plain = NULL;
	char path[96];

	(void)state;
	write_ca_file(ca, "ca2.pem", path, sizeof(path));
	assert_int_equal(egress_ca_server_ctx(ca, "api.example.test", &sctx), 0);
	assert_int_equal(egress_ca_server_ctx(ca, "192.0.2.1", &ipctx), 0);
	assert_int_equal(egress_tls_client_ctx(path, &cctx), 0);
	assert_int_equal(egress_tls_client_ctx(NULL, &plain), 0);
	expect_fail(sctx, cctx, "other.example.test", "certificate verify failed: hostname mismatch");
	expect_fail(sctx, plain, "api.example.test",
		    "certificate verify failed: unable to get local issuer certificate");
	expect_fail(ipctx, cctx, "192.0.2.9", "certificate verify failed: IP address mismatch");
	expect_fail(sctx, cctx, "192.0.2.1", "certificate verify failed: IP address mismatch");
	assert_int_equal(egress_tls_client_ctx("/nonexistent/ca.pem", &plain), -ENOENT);

	/* An address: verified as one, no SNI sent. */
	{
		struct egress_tls *c = NULL, *s = NULL;
		struct buf cin, sin;
		int rc_c, rc_s;

		memset(&seen_server, 0, sizeof(seen_server));
		SSL_CTX_set_info_callback(ipctx, info_server);
		assert_int_equal(buf_init(&cin, 1 << 20, 0), 0);
		assert_int_equal(buf_init(&sin, 1 << 20, 0), 0);
		assert_int_equal(egress_tls_server_new(ipctx, &s), 0);
		assert_int_equal(egress_tls_client_new(cctx, "192.0.2.1", &c), 0);
		run(c, s, &cin, &sin, &rc_c, &rc_s);
		assert_true(egress_tls_established(c));
		assert_int_equal(seen_server.done, 1);
		assert_string_equal(seen_server.sni, "");
		egress_tls_free(c);
		egress_tls_free(s);
		buf_release(&cin);
		buf_release(&sin);
	}
	assert_int_equal(egress_tls_client_new(cctx, "Not a host", &(struct egress_tls *){ NULL }), -EINVAL);
	SSL_CTX_free(cctx);
	SSL_CTX_free(plain);
	egress_ca_free(ca);
}

static void alpn_case(SSL_CTX *sctx, const char *path, const unsigned char *protos, size_t n, const char *want,
		      int max_version)
{
	SSL_CTX *cctx = NULL;
	struct egress_tls *c = NULL, *s = NULL;
	struct buf cin, sin;
	int rc_c, rc_s;

	assert_int_equal(egress_tls_client_ctx(path, &cctx), 0);
	assert_int_equal(SSL_CTX_set_alpn_protos(cctx, protos, (unsigned)n), 0);
	assert_int_equal(SSL_CTX_set_max_proto_version(cctx, max_version), 1);
	SSL_CTX_set_info_callback(cctx, info_client);
	memset(&seen_client, 0, sizeof(seen_client));
	assert_int_equal(buf_init(&cin, 1 << 20, 0), 0);
	assert_int_equal(buf_init(&sin, 1 << 20, 0), 0);
	assert_int_equal(egress_tls_server_new(sctx, &s), 0);
	assert_int_equal(egress_tls_client_new(cctx, "api.example.test", &c), 0);
	run(c, s, &cin, &sin, &rc_c, &rc_s);
	assert_true(egress_tls_established(c));
	assert_true(egress_tls_established(s));
	assert_int_equal(seen_client.done, 1);
	assert_string_equal(seen_client.alpn, want);
	assert_int_equal(seen_client.version, max_version ? max_version : TLS1_3_VERSION);
	egress_tls_free(c);
	egress_tls_free(s);
	buf_release(&cin);
	buf_release(&sin);
	SSL_CTX_free(cctx);
}

static void test_alpn(void **state)
{
	struct egress_ca *ca = ca_make(permitted, ARRAY_SIZE(permitted));
	SSL_CTX *sctx = NULL;
	char path[96];

	(void)state;
	write_ca_file(ca, "ca3.pem", path, sizeof(path));
	assert_int_equal(egress_ca_server_ctx(ca, "api.example.test", &sctx), 0);
	alpn_case(sctx, path, (const unsigned char *)"\x02h2", 3, "", 0);
	alpn_case(sctx, path, (const unsigned char *)"\x02h2\x08http/1.1", 12, "http/1.1", 0);
	alpn_case(sctx, path, (const unsigned char *)"\x08http/1.0\x02h2", 12, "", 0);
	/* a TLS 1.2 client (ECDHE-ECDSA): served, ALPN the same */
	alpn_case(sctx, path, (const unsigned char *)"\x02h2\x08http/1.1", 12, "http/1.1", TLS1_2_VERSION);
	alpn_case(sctx, path, (const unsigned char *)"\x02h2", 3, "", TLS1_2_VERSION);
	egress_ca_free(ca);
}

static void test_cache_eviction(void **state)
{
	static const char *const names[] = { "example.test" };
	struct egress_ca *ca = ca_make(names, 1);
	SSL_CTX *ctx, *h0 = NULL, *h1 = NULL;
	struct egress_tls *kept = NULL, *c = NULL;
	ASN1_INTEGER *serial1;
	X509 *lx;
	char host[64], path[96];
	uint64_t t0, total;

	(void)state;
	t0 = now_us();
	for (int i = 0; i < EGRESS_CA_CACHE; i++) {
		(void)snprintf(host, sizeof(host), "h%d.example.test", i);
		assert_int_equal(egress_ca_server_ctx(ca, host, &ctx), 0);
		if (i == 0) {
			h0 = ctx;
		} else if (i == 1) {
			h1 = ctx;
		}
	}
	total = now_us() - t0;
	print_message("measure: leaf mint + server SSL_CTX: %llu us CPU (mean of %d)\n",
		      (unsigned long long)(total / EGRESS_CA_CACHE), EGRESS_CA_CACHE);
	/* Cached: the same CTX, no new leaf. */
	assert_int_equal(egress_ca_server_ctx(ca, "h0.example.test", &ctx), 0);
	assert_ptr_equal(ctx, h0);
	serial1 = ASN1_INTEGER_dup(X509_get0_serialNumber(SSL_CTX_get0_certificate(h1)));
	assert_non_null(serial1);
	/* A connection on h1's CTX outlives its eviction. */
	assert_int_equal(egress_tls_server_new(h1, &kept), 0);
	/* One more host: the least recently used (h1; h0 was just used) goes. */
	assert_int_equal(egress_ca_server_ctx(ca, "h256.example.test", &ctx), 0);
	assert_int_equal(egress_ca_server_ctx(ca, "h0.example.test", &ctx), 0);
	assert_ptr_equal(ctx, h0);
	assert_int_equal(egress_ca_server_ctx(ca, "h1.example.test", &ctx), 0);
	lx = SSL_CTX_get0_certificate(ctx);
	assert_int_not_equal(ASN1_INTEGER_cmp(serial1, X509_get0_serialNumber(lx)), 0);
	ASN1_INTEGER_free(serial1);
	{
		SSL_CTX *cctx = NULL;
		struct buf cin, sin;
		int rc_c, rc_s;

		write_ca_file(ca, "ca4.pem", path, sizeof(path));
		assert_int_equal(egress_tls_client_ctx(path, &cctx), 0);
		assert_int_equal(buf_init(&cin, 1 << 20, 0), 0);
		assert_int_equal(buf_init(&sin, 1 << 20, 0), 0);
		assert_int_equal(egress_tls_client_new(cctx, "h1.example.test", &c), 0);
		run(c, kept, &cin, &sin, &rc_c, &rc_s);
		assert_true(egress_tls_established(c));
		assert_true(egress_tls_established(kept));
		egress_tls_free(c);
		buf_release(&cin);
		buf_release(&sin);
		SSL_CTX_free(cctx);
	}
	egress_tls_free(kept);
	egress_ca_free(ca);
}

static void test_bounds_and_eof(void **state)
{
	struct egress_ca *ca = ca_make(permitted, ARRAY_SIZE(permitted));
	SSL_CTX *sctx = NULL, *cctx = NULL;
	struct egress_tls *c = NULL, *s = NULL;
	struct buf cin, sin, w;
	uint8_t *big = calloc(1, EGRESS_TLS_CIPHER_MAX + 1);
	char path[96];
	int rc_c, rc_s;

	(void)state;
	assert_non_null(big);
	write_ca_file(ca, "ca5.pem", path, sizeof(path));
	assert_int_equal(egress_ca_server_ctx(ca, "api.example.test", &sctx), 0);
	assert_int_equal(egress_tls_client_ctx(path, &cctx), 0);
	assert_int_equal(buf_init(&cin, 1 << 20, 0), 0);
	assert_int_equal(buf_init(&sin, 1 << 20, 0), 0);
	assert_int_equal(buf_init(&w, 1 << 20, 0), 0);

	/* Wire bytes in: EGRESS_TLS_CIPHER_MAX held, not one more. */
	assert_int_equal(egress_tls_server_new(sctx, &s), 0);
	assert_int_equal(egress_tls_put(s, big, EGRESS_TLS_CIPHER_MAX + 1), -E2BIG);
	assert_int_equal(egress_tls_put(s, big, EGRESS_TLS_CIPHER_MAX), 0);
	assert_int_equal(egress_tls_put(s, big, 1), -E2BIG);
	/* zeros are no TLS: refused with OpenSSL's reason */
	assert_int_equal(egress_tls_read(s, &sin, 100), -EPROTO);
	print_message("zeros: %s\n", egress_tls_error(s));
	assert_true(strlen(egress_tls_error(s)) > 0);
	egress_tls_free(s);

	/* Plaintext out: EGRESS_TLS_CIPHER_MAX held (queued or encrypted) at most. */
	assert_int_equal(egress_tls_client_new(cctx, "api.example.test", &c), 0);
	assert_int_equal(egress_tls_write(c, big, EGRESS_TLS_CIPHER_MAX + 1), -E2BIG);
	assert_int_equal(egress_tls_write(c, big, EGRESS_TLS_CIPHER_MAX - 10), 0);
	assert_int_equal(egress_tls_write(c, big, 11), -E2BIG);
	assert_int_equal(egress_tls_write(c, big, 10), 0);
	egress_tls_free(c);

	/* The transport ends during the handshake: -EPROTO. */
	assert_int_equal(egress_tls_server_new(sctx, &s), 0);
	assert_int_equal(egress_tls_client_new(cctx, "api.example.test", &c), 0);
	assert_int_equal(egress_tls_read(c, &cin, 100), 0);
	assert_true(egress_tls_take(c, &w) > 0);
	assert_int_equal(egress_tls_put(s, buf_ptr(&w), 20), 0);
	egress_tls_eof(s);
	assert_int_equal(egress_tls_put(s, buf_ptr(&w), 1), -EPIPE);
	assert_int_equal(egress_tls_read(s, &sin, 100), -EPROTO);
	assert_string_equal(egress_tls_error(s), "the peer closed the connection during the TLS handshake");
	egress_tls_free(s);
	egress_tls_free(c);
	buf_reset(&w);

	/* After the handshake: EOF at a record boundary is an end (-EPIPE); inside a record a cut (-EPROTO). */
	for (int cut = 0; cut < 2; cut++) {
		assert_int_equal(egress_tls_server_new(sctx, &s), 0);
		assert_int_equal(egress_tls_client_new(cctx, "api.example.test", &c), 0);
		run(c, s, &cin, &sin, &rc_c, &rc_s);
		assert_true(egress_tls_established(s));
		buf_reset(&sin);
		assert_int_equal(egress_tls_write(c, (const uint8_t *)"hello", 5), 0);
		assert_true(egress_tls_take(c, &w) > 0);
		assert_int_equal(egress_tls_put(s, buf_ptr(&w), buf_len(&w) - (size_t)cut), 0);
		buf_reset(&w);
		egress_tls_eof(s);
		if (cut) {
			assert_int_equal(egress_tls_read(s, &sin, 100), -EPROTO);
			assert_string_equal(egress_tls_error(s), "the connection ended inside a TLS record");
		} else {
			assert_int_equal(egress_tls_read(s, &sin, 100), 5);
			assert_int_equal(egress_tls_read(s, &sin, 100), -EPIPE);
		}
		egress_tls_free(s);
		egress_tls_free(c);
	}
	free(big);
	buf_release(&cin);
	buf_release(&sin);
	buf_release(&w);
	SSL_CTX_free(cctx);
	egress_ca_free(ca);
}

/* ---- other verifiers: the openssl command (-x509_strict), Python's ssl with VERIFY_X509_STRICT ---- */

static bool have(const char *prog)
{
	const char *path = getenv("PATH");
	char buf[512];

	if (!path) {
		return false;
	}
	while (*path) {
		const char *end = strchr(path, ':');
		size_t n = end ? (size_t)(end - path) : strlen(path);
		(void)snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, path, prog);
		if (n > 0 && access(buf, X_OK) == 0) {
			return true;
		}
		path += n + (end ? 1 : 0);
	}
	return false;
}

/* Start argv[0] (stdout to /dev/null; stderr too when quiet); fd3, when >= 0, becomes its fd 3. */
static int run_prog(char *const argv[], int fd3, bool quiet)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		if (null >= 0) {
			(void)dup2(null, 1);
			if (quiet) {
				(void)dup2(null, 2);
			}
		}
		/* dup2 leaves the new descriptor without FD_CLOEXEC: fd 3 survives the exec */
		if (fd3 >= 0) {
			(void)dup2(fd3, 3);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

static int wait_prog(int pid)
{
	int st;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void write_pem_x509(X509 *x, const char *path)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(PEM_write_X509(f, x), 1);
	assert_int_equal(fclose(f), 0);
}

static void test_openssl_cli_strict(void **state)
{
	struct egress_ca *ca;
	char cap[96], good[96], evil[96], ip[96];
	X509 *lx;

	(void)state;
	if (!have("openssl")) {
		skip();
	}
	ca = ca_make(permitted, ARRAY_SIZE(permitted));
	write_ca_file(ca, "cli-ca.pem", cap, sizeof(cap));
	(void)snprintf(good, sizeof(good), "%s/good.pem", tmp_dir);
	(void)snprintf(evil, sizeof(evil), "%s/evil.pem", tmp_dir);
	(void)snprintf(ip, sizeof(ip), "%s/ip.pem", tmp_dir);
	lx = leaf_of(ca, "api.example.test");
	write_pem_x509(lx, good);
	X509_free(lx);
	lx = leaf_of(ca, "evil.test");
	write_pem_x509(lx, evil);
	X509_free(lx);
	lx = leaf_of(ca, "192.0.2.1");
	write_pem_x509(lx, ip);
	X509_free(lx);
	{
		char *ok[] = { "openssl",
			       "verify",
			       "-x509_strict",
			       "-purpose",
			       "sslserver",
			       "-verify_hostname",
			       "api.example.test",
			       "-CAfile",
			       cap,
			       good,
			       NULL };
		char *ok_ip[] = { "openssl",	"verify",    "-x509_strict", "-purpose", "sslserver",
				  "-verify_ip", "192.0.2.1", "-CAfile",	     cap,	 ip,
				  NULL };
		char *bad[] = { "openssl", "verify", "-x509_strict", "-CAfile", cap, evil, NULL };
		assert_int_equal(wait_prog(run_prog(ok, -1, true)), 0);
		assert_int_equal(wait_prog(run_prog(ok_ip, -1, true)), 0);
		assert_int_not_equal(wait_prog(run_prog(bad, -1, true)), 0);
	}
	egress_ca_free(ca);
}

/*
 * Python's ssl module as the box's client, over a socketpair, against an
 * egress_tls server: create_default_context with the CA, VERIFY_X509_STRICT
 * and VERIFY_X509_PARTIAL_CHAIN set (Python 3.13's defaults).
 */
static const char py_client[] = "import socket, ssl, sys\n"
				"ctx = ssl.create_default_context(cafile=sys.argv[1])\n"
				"ctx.verify_flags |= ssl.VERIFY_X509_STRICT | ssl.VERIFY_X509_PARTIAL_CHAIN\n"
				"ctx.set_alpn_protocols(['h2', 'http/1.1'])\n"
				"s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=3)\n"
				"try:\n"
				"    t = ctx.wrap_socket(s, server_hostname=sys.argv[2])\n"
				"except ssl.SSLError as e:\n"
				"    print(e, file=sys.stderr); sys.exit(2)\n"
				"assert t.selected_alpn_protocol() == 'http/1.1', t.selected_alpn_protocol()\n"
				"t.sendall(b'ping')\n"
				"d = b''\n"
				"while len(d) < 4:\n"
				"    x = t.recv(4 - len(d))\n"
				"    if not x: break\n"
				"    d += x\n"
				"sys.exit(0 if d == b'pong' else 3)\n";

static int python_case(SSL_CTX *sctx, const char *cafile, const char *host)
{
	struct egress_tls *s = NULL;
	struct buf in, wire;
	int sv[2], pid, rc;
	bool ponged = false;
	char *argv[] = { "python3", "-c", (char *)py_client, (char *)cafile, (char *)host, NULL };

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid = run_prog(argv, sv[1], false);
	(void)close(sv[1]);
	assert_int_equal(egress_tls_server_new(sctx, &s), 0);
	assert_int_equal(buf_init(&in, 1 << 16, 0), 0);
	assert_int_equal(buf_init(&wire, EGRESS_TLS_CIPHER_MAX, 0), 0);
	for (;;) {
		struct pollfd p = { .fd = sv[0], .events = POLLIN };
		uint8_t b[16384];
		ssize_t n;
		int r;

		if (poll(&p, 1, 20000) <= 0) {
			break;
		}
		n = read(sv[0], b, sizeof(b));
		if (n <= 0) {
			break;
		}
		assert_int_equal(egress_tls_put(s, b, (size_t)n), 0);
		r = egress_tls_read(s, &in, 100);
		if (r < 0) {
			print_message("python case %s: server: %s\n", host, egress_tls_error(s));
		}
		if (!ponged && buf_len(&in) >= 4) {
			assert_memory_equal(buf_ptr(&in), "ping", 4);
			assert_int_equal(egress_tls_write(s, (const uint8_t *)"pong", 4), 0);
			ponged = true;
		}
		assert_true(egress_tls_take(s, &wire) >= 0);
		if (buf_len(&wire) > 0) {
			assert_int_equal(send(sv[0], buf_ptr(&wire), buf_len(&wire), MSG_NOSIGNAL),
					 (ssize_t)buf_len(&wire));
			buf_reset(&wire);
		}
		if (r < 0) {
			break;
		}
	}
	(void)close(sv[0]);
	rc = wait_prog(pid);
	egress_tls_free(s);
	buf_release(&in);
	buf_release(&wire);
	return rc;
}

static void test_python_strict_client(void **state)
{
	struct egress_ca *ca;
	SSL_CTX *sctx = NULL, *evil = NULL;
	char cap[96];

	(void)state;
	if (!have("python3")) {
		skip();
	}
	ca = ca_make(permitted, ARRAY_SIZE(permitted));
	write_ca_file(ca, "py-ca.pem", cap, sizeof(cap));
	assert_int_equal(egress_ca_server_ctx(ca, "api.example.test", &sctx), 0);
	assert_int_equal(python_case(sctx, cap, "api.example.test"), 0);
	assert_int_equal(egress_ca_server_ctx(ca, "192.0.2.1", &sctx), 0);
	assert_int_equal(python_case(sctx, cap, "192.0.2.1"), 0);
	/* outside the name constraints: Python refuses the leaf */
	assert_int_equal(egress_ca_server_ctx(ca, "evil.test", &evil), 0);
	assert_int_equal(python_case(evil, cap, "evil.test"), 2);
	egress_ca_free(ca);
}

static int teardown_tmp(void **state)
{
	(void)state;
	if (tmp_dir[0]) {
		char *argv[] = { "rm", "-rf", tmp_dir, NULL };
		(void)wait_prog(run_prog(argv, -1, true));
	}
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ca_and_leaves_pass_strict),
		cmocka_unit_test(test_name_constraints_enforced),
		cmocka_unit_test(test_new_refuses),
		cmocka_unit_test(test_pem_round_trip),
		cmocka_unit_test(test_handshake_and_data),
		cmocka_unit_test(test_handshake_failures),
		cmocka_unit_test(test_alpn),
		cmocka_unit_test(test_cache_eviction),
		cmocka_unit_test(test_bounds_and_eof),
		cmocka_unit_test(test_openssl_cli_strict),
		cmocka_unit_test(test_python_strict_client),
	};

	return cmocka_run_group_tests(tests, NULL, teardown_tmp);
}
