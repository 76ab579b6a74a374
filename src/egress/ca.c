/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "banned.h"
#include "crypto.h"
#include "egress/ca.h"
#include "egress/host.h"

/*
 * OpenSSL's error queue is drained by crypto_ossl_error (src/common/crypto.c),
 * the one place that translates it; every failed libcrypto/libssl call here
 * goes through ossl_fail().
 */
static int ossl_fail(void)
{
	return crypto_ossl_error(NULL, 0);
}

#define CN_MAX 64 /* ub-common-name (RFC 5280): OpenSSL refuses a longer commonName */
#define BOX_ID_MAX 64 /* as the boot config (BOOT_MAX_BOX_ID) */
#define LIFETIME_MAX ((int64_t)INT32_MAX) /* keeps notAfter's arithmetic far from overflow */

struct leaf {
	char host[EGRESS_HOST_TEXT_MAX];
	SSL_CTX *ctx; /* the cache's reference; each egress_tls made from it holds its own (SSL_new) */
	uint64_t used; /* ca->tick at the last lookup: the smallest is evicted first */
};

struct egress_ca {
	X509 *cert;
	EVP_PKEY *key;
	EVP_PKEY *leaf_key; /* one per CA, made with it (or when it is loaded) */
	uint64_t tick;
	size_t n;
	struct leaf cache[EGRESS_CA_CACHE];
};

/* A host as the certificates name it: a DNS name, or an address (4 or 16 bytes). */
struct ca_name {
	const char *dns; /* NULL for an address */
	uint8_t ip[16];
	size_t ip_len;
};

/*
 * host: a canonical DNS name (lower case, as egress_host_parse prints it) or
 * an IP literal in inet_pton's form (an IPv6 one with or without brackets).
 */
static int name_parse(const char *host, struct ca_name *ret)
{
	struct egress_host h;
	char lit[EGRESS_ADDR_TEXT_MAX];
	size_t n;

	if (!host) {
		return -EINVAL;
	}
	n = strnlen(host, EGRESS_HOST_TEXT_MAX);
	if (n == 0 || n >= EGRESS_HOST_TEXT_MAX) {
		return -EINVAL;
	}
	if (host[0] == '[' && n >= 2 && host[n - 1] == ']' && n - 2 < sizeof(lit)) {
		memcpy(lit, host + 1, n - 2);
		lit[n - 2] = '\0';
		if (inet_pton(AF_INET6, lit, ret->ip) == 1) {
			ret->dns = NULL;
			ret->ip_len = 16;
			return 0;
		}
		return -EINVAL;
	}
	if (inet_pton(AF_INET, host, ret->ip) == 1) {
		ret->dns = NULL;
		ret->ip_len = 4;
		return 0;
	}
	if (inet_pton(AF_INET6, host, ret->ip) == 1) {
		ret->dns = NULL;
		ret->ip_len = 16;
		return 0;
	}
	/* A name: only in its canonical form (so that "127.1" or "Example.COM" never reach a certificate). */
	if (egress_host_parse(host, n, &h) < 0 || h.kind != EGRESS_HOST_NAME || strcmp(h.name, host) != 0) {
		return -EINVAL;
	}
	ret->dns = host;
	ret->ip_len = 0;
	return 0;
}

/* An allocation failed inside OpenSSL: drain its queue, say -ENOMEM unless it said otherwise. */
static int ossl_nomem(void)
{
	int r = ossl_fail();

	return r == -EIO ? -ENOMEM : r;
}

static GENERAL_NAME *general_name_new(const struct ca_name *nm, bool with_mask)
{
	GENERAL_NAME *gn = GENERAL_NAME_new();
	ASN1_STRING *s = NULL;
	uint8_t b[32];
	size_t len;

	if (!gn) {
		return NULL;
	}
	if (nm->dns) {
		s = ASN1_IA5STRING_new();
		if (!s || ASN1_STRING_set(s, nm->dns, (int)strlen(nm->dns)) != 1) {
			goto fail;
		}
		GENERAL_NAME_set0_value(gn, GEN_DNS, s);
		return gn;
	}
	memcpy(b, nm->ip, nm->ip_len);
	len = nm->ip_len;
	if (with_mask) {
		/* nameConstraints' iPAddress: the address, then its mask (all ones: that one address). */
		memset(b + len, 0xff, nm->ip_len);
		len *= 2;
	}
	s = ASN1_OCTET_STRING_new();
	if (!s || ASN1_OCTET_STRING_set(s, b, (int)len) != 1) {
		goto fail;
	}
	GENERAL_NAME_set0_value(gn, GEN_IPADD, s);
	return gn;
fail:
	ASN1_STRING_free(s);
	GENERAL_NAME_free(gn);
	return NULL;
}

/* Append a subtree of base gn (taken, freed on failure) to *sk (made on first use). */
static int subtree_push(STACK_OF(GENERAL_SUBTREE) * *sk, GENERAL_NAME *gn)
{
	GENERAL_SUBTREE *st = NULL;

	if (!gn || (!*sk && !(*sk = sk_GENERAL_SUBTREE_new_null())) || !(st = GENERAL_SUBTREE_new())) {
		GENERAL_NAME_free(gn);
		return ossl_nomem();
	}
	GENERAL_NAME_free(st->base);
	st->base = gn;
	if (!sk_GENERAL_SUBTREE_push(*sk, st)) {
		GENERAL_SUBTREE_free(st);
		return ossl_nomem();
	}
	return 0;
}

/*
 * nameConstraints, critical: a subtree per name (a DNS name covers itself
 * and its subdomains in OpenSSL, Go, NSS and GnuTLS; an address comes with
 * an all-ones mask). When no address is permitted, every address is
 * excluded (0.0.0.0/0 and ::/0): a name type without a permitted subtree
 * would otherwise be unconstrained.
 */
static int add_name_constraints(X509 *x, const struct ca_name *names, size_t n)
{
	static const struct ca_name any4 = { .ip_len = 4 }, any6 = { .ip_len = 16 };
	NAME_CONSTRAINTS *nc = NAME_CONSTRAINTS_new();
	bool has_ip = false;
	int r = 0;

	if (!nc) {
		return ossl_nomem();
	}
	for (size_t i = 0; i < n && r >= 0; i++) {
		r = subtree_push(&nc->permittedSubtrees, general_name_new(&names[i], true));
		has_ip = has_ip || !names[i].dns;
	}
	if (r >= 0 && !has_ip) {
		/* general_name_new without a mask over all-zero bytes, then the zero mask appended. */
		GENERAL_NAME *v4 = general_name_new(&any4, false), *v6 = general_name_new(&any6, false);
		static const uint8_t zero[32];
		if (v4 && ASN1_OCTET_STRING_set(v4->d.iPAddress, zero, 8) != 1) {
			GENERAL_NAME_free(v4);
			v4 = NULL;
		}
		if (v6 && ASN1_OCTET_STRING_set(v6->d.iPAddress, zero, 32) != 1) {
			GENERAL_NAME_free(v6);
			v6 = NULL;
		}
		r = subtree_push(&nc->excludedSubtrees, v4);
		if (r >= 0) {
			r = subtree_push(&nc->excludedSubtrees, v6);
		} else {
			GENERAL_NAME_free(v6);
		}
	}
	if (r >= 0 && X509_add1_ext_i2d(x, NID_name_constraints, nc, 1, X509V3_ADD_DEFAULT) != 1) {
		r = ossl_fail();
	}
	NAME_CONSTRAINTS_free(nc);
	return r;
}

static int p256_keygen(EVP_PKEY **ret)
{
	EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");

	if (!k) {
		return ossl_fail();
	}
	*ret = k;
	return 0;
}

/* 128 random bits, never zero (RFC 5280 wants a positive serial). */
static int set_serial(X509 *x)
{
	uint8_t b[16];
	BIGNUM *bn;
	int r;

	r = crypto_random(b, sizeof(b));
	if (r < 0) {
		return r;
	}
	bn = BN_bin2bn(b, sizeof(b), NULL);
	if (!bn || (BN_is_zero(bn) && BN_one(bn) != 1) || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x))) {
		BN_free(bn);
		return ossl_fail();
	}
	BN_free(bn);
	return 0;
}

/* An extension from OpenSSL's config syntax (fixed texts only: no host ever goes through here). */
static int add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX v3;
	X509_EXTENSION *ext;
	int r = 0;

	X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
	ext = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
	if (!ext) {
		return ossl_fail();
	}
	if (X509_add_ext(x, ext, -1) != 1) {
		r = ossl_fail();
	}
	X509_EXTENSION_free(ext);
	return r;
}

static bool box_id_ok(const char *s)
{
	size_t n = s ? strnlen(s, BOX_ID_MAX + 1) : 0;

	if (n == 0 || n > BOX_ID_MAX) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == '-')) {
			return false;
		}
	}
	return true;
}

static int ca_cert_make(const char *box_id, const struct ca_name *names, size_t n, int64_t lifetime_s, EVP_PKEY *key,
			X509 **ret)
{
	X509 *x = X509_new();
	X509_NAME *subj;
	char cn[CN_MAX + 1];
	int r;

	if (!x) {
		return ossl_fail();
	}
	/* "tkbox box " + id + " CA" within 64 bytes: a long id is cut (the subject is for people to read). */
	(void)snprintf(cn, sizeof(cn), "tkbox box %.*s CA", CN_MAX - 13, box_id);
	subj = X509_get_subject_name(x);
	if (X509_set_version(x, X509_VERSION_3) != 1 ||
	    X509_NAME_add_entry_by_txt(subj, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0) != 1 ||
	    X509_set_issuer_name(x, subj) != 1 || !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
	    !X509_gmtime_adj(X509_getm_notAfter(x), (long)(lifetime_s + 86400)) || X509_set_pubkey(x, key) != 1) {
		r = ossl_fail();
		goto fail;
	}
	r = set_serial(x);
	if (r < 0) {
		goto fail;
	}
	/* SKI before AKI: the self-signed AKI takes the SKI just added. */
	if ((r = add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0")) < 0 ||
	    (r = add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign")) < 0 ||
	    (r = add_ext(x, x, NID_subject_key_identifier, "hash")) < 0 ||
	    (r = add_ext(x, x, NID_authority_key_identifier, "keyid:always")) < 0) {
		goto fail;
	}
	if (n > 0 && (r = add_name_constraints(x, names, n)) < 0) {
		goto fail;
	}
	if (X509_sign(x, key, EVP_sha256()) <= 0) {
		r = ossl_fail();
		goto fail;
	}
	*ret = x;
	return 0;
fail:
	X509_free(x);
	return r;
}

static struct egress_ca *ca_alloc(void)
{
	return calloc(1, sizeof(struct egress_ca));
}

int egress_ca_new(const char *box_id, const char *const *permitted, size_t n, int64_t lifetime_s,
		  struct egress_ca **ret)
{
	struct ca_name *names = NULL;
	struct egress_ca *ca = NULL;
	int r;

	if (!ret || !box_id_ok(box_id) || n > EGRESS_CA_PERMITTED_MAX || (n > 0 && !permitted) || lifetime_s <= 0 ||
	    lifetime_s > LIFETIME_MAX) {
		return -EINVAL;
	}
	if (n > 0) {
		names = calloc(n, sizeof(*names));
		if (!names) {
			return -ENOMEM;
		}
	}
	for (size_t i = 0; i < n; i++) {
		r = name_parse(permitted[i], &names[i]);
		if (r < 0) {
			goto out;
		}
	}
	ca = ca_alloc();
	if (!ca) {
		r = -ENOMEM;
		goto out;
	}
	if ((r = p256_keygen(&ca->key)) < 0 || (r = p256_keygen(&ca->leaf_key)) < 0 ||
	    (r = ca_cert_make(box_id, names, n, lifetime_s, ca->key, &ca->cert)) < 0) {
		goto out;
	}
	*ret = steal_ptr(ca);
	r = 0;
out:
	egress_ca_free(ca);
	free(names);
	return r;
}

/* The BIO's bytes as a new NUL-terminated string. */
static int bio_to_string(BIO *b, char **ret)
{
	char *p = NULL, *s;
	long n = BIO_get_mem_data(b, &p);

	if (n <= 0 || !p) {
		return -EIO;
	}
	s = malloc((size_t)n + 1);
	if (!s) {
		return -ENOMEM;
	}
	memcpy(s, p, (size_t)n);
	s[n] = '\0';
	*ret = s;
	return 0;
}

int egress_ca_cert_pem(const struct egress_ca *ca, char **ret)
{
	BIO *b;
	int r;

	if (!ca || !ret) {
		return -EINVAL;
	}
	b = BIO_new(BIO_s_mem());
	if (!b) {
		return ossl_fail();
	}
	r = PEM_write_bio_X509(b, ca->cert) == 1 ? bio_to_string(b, ret) : ossl_fail();
	BIO_free(b);
	return r;
}

int egress_ca_key_pem(const struct egress_ca *ca, char **ret)
{
	BIO *b;
	int r;

	if (!ca || !ret) {
		return -EINVAL;
	}
	/* A secure-heap BIO: its buffer is cleansed when freed. */
	b = BIO_new(BIO_s_secmem());
	if (!b) {
		return ossl_fail();
	}
	r = PEM_write_bio_PrivateKey(b, ca->key, NULL, NULL, 0, NULL, NULL) == 1 ? bio_to_string(b, ret) : ossl_fail();
	BIO_free(b);
	return r;
}

/* Never prompts for a passphrase (OpenSSL's default callback would read the terminal): an encrypted key fails. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)u;
	return -1;
}

/* Only whitespace may follow the one PEM block. */
static bool bio_rest_blank(BIO *b)
{
	char *p = NULL;
	long n = BIO_get_mem_data(b, &p);

	for (long i = 0; i < n; i++) {
		if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r' && p[i] != '\n') {
			return false;
		}
	}
	return true;
}

static BIO *pem_bio(const char *pem)
{
	size_t n = pem ? strnlen(pem, EGRESS_CA_PEM_MAX + 1) : 0;

	if (n == 0 || n > EGRESS_CA_PEM_MAX) {
		return NULL;
	}
	return BIO_new_mem_buf(pem, (int)n);
}

int egress_ca_load(const char *cert_pem, const char *key_pem, struct egress_ca **ret)
{
	struct egress_ca *ca = NULL;
	BIO *cb = NULL, *kb = NULL;
	int r = -EBADMSG;

	if (!ret) {
		return -EINVAL;
	}
	cb = pem_bio(cert_pem);
	kb = pem_bio(key_pem);
	ca = ca_alloc();
	if (!ca) {
		r = -ENOMEM;
		goto out;
	}
	if (!cb || !kb) {
		goto out;
	}
	ca->cert = PEM_read_bio_X509(cb, NULL, no_passphrase, NULL);
	ca->key = PEM_read_bio_PrivateKey(kb, NULL, no_passphrase, NULL);
	if (!ca->cert || !ca->key || !bio_rest_blank(cb) || !bio_rest_blank(kb)) {
		goto out;
	}
	/* A P-256 CA certificate and its own key: nothing else is a box CA. */
	if (!EVP_PKEY_is_a(ca->key, "EC") || EVP_PKEY_get_bits(ca->key) != 256 || X509_check_ca(ca->cert) != 1 ||
	    X509_check_private_key(ca->cert, ca->key) != 1) {
		goto out;
	}
	{
		char group[32];
		if (EVP_PKEY_get_group_name(ca->key, group, sizeof(group), NULL) != 1 ||
		    strcmp(group, "prime256v1") != 0) {
			goto out;
		}
	}
	r = p256_keygen(&ca->leaf_key);
	if (r < 0) {
		goto out;
	}
	*ret = steal_ptr(ca);
	r = 0;
out:
	if (r == -EBADMSG) {
		(void)ossl_fail(); /* drop what the parsers queued */
	}
	BIO_free(cb);
	BIO_free(kb);
	egress_ca_free(ca);
	return r;
}

static int leaf_make(const struct egress_ca *ca, const struct ca_name *nm, X509 **ret)
{
	X509 *x = X509_new();
	GENERAL_NAMES *san = NULL;
	GENERAL_NAME *gn = NULL;
	X509_NAME *subj;
	int r;

	if (!x) {
		return ossl_fail();
	}
	subj = X509_get_subject_name(x);
	/*
	 * CN=host for a name that fits a commonName (64 bytes). An address, or a
	 * longer name, gets O=tkbox instead: OpenSSL checks a leaf's CN against
	 * the CA's DNS name constraints when the leaf has no DNS SAN, and
	 * "192.0.2.1" reads as a DNS name there, so CN=192.0.2.1 would fail.
	 */
	if (nm->dns && strlen(nm->dns) <= CN_MAX) {
		r = X509_NAME_add_entry_by_txt(subj, "CN", MBSTRING_ASC, (const unsigned char *)nm->dns, -1, -1, 0);
	} else {
		r = X509_NAME_add_entry_by_txt(subj, "O", MBSTRING_ASC, (const unsigned char *)"tkbox", -1, -1, 0);
	}
	if (r != 1 || X509_set_version(x, X509_VERSION_3) != 1 ||
	    X509_set_issuer_name(x, X509_get_subject_name(ca->cert)) != 1 ||
	    X509_set1_notBefore(x, X509_get0_notBefore(ca->cert)) != 1 ||
	    X509_set1_notAfter(x, X509_get0_notAfter(ca->cert)) != 1 || X509_set_pubkey(x, ca->leaf_key) != 1) {
		r = ossl_fail();
		goto fail;
	}
	r = set_serial(x);
	if (r < 0) {
		goto fail;
	}
	if ((r = add_ext(x, ca->cert, NID_basic_constraints, "critical,CA:FALSE")) < 0 ||
	    (r = add_ext(x, ca->cert, NID_key_usage, "critical,digitalSignature")) < 0 ||
	    (r = add_ext(x, ca->cert, NID_ext_key_usage, "serverAuth")) < 0 ||
	    (r = add_ext(x, ca->cert, NID_subject_key_identifier, "hash")) < 0 ||
	    (r = add_ext(x, ca->cert, NID_authority_key_identifier, "keyid:always")) < 0) {
		goto fail;
	}
	san = sk_GENERAL_NAME_new_null();
	gn = general_name_new(nm, false);
	if (!san || !gn || !sk_GENERAL_NAME_push(san, gn)) {
		GENERAL_NAME_free(gn);
		r = ossl_nomem();
		goto fail;
	}
	if (X509_add1_ext_i2d(x, NID_subject_alt_name, san, 0, X509V3_ADD_DEFAULT) != 1 ||
	    X509_sign(x, ca->key, EVP_sha256()) <= 0) {
		r = ossl_fail();
		goto fail;
	}
	GENERAL_NAMES_free(san);
	*ret = x;
	return 0;
fail:
	GENERAL_NAMES_free(san);
	X509_free(x);
	return r;
}

/* ALPN: "http/1.1" when the client offers it; otherwise no ALPN at all (never h2). */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
		       unsigned int inlen, void *arg)
{
	static const unsigned char http11[] = "http/1.1";
	unsigned int i = 0;

	(void)ssl;
	(void)arg;
	while (i < inlen) {
		unsigned int len = in[i];
		if (len == 0 || len > inlen - i - 1) {
			break;
		}
		if (len == sizeof(http11) - 1 && memcmp(in + i + 1, http11, len) == 0) {
			*out = http11;
			*outlen = (unsigned char)len;
			return SSL_TLSEXT_ERR_OK;
		}
		i += len + 1;
	}
	return SSL_TLSEXT_ERR_NOACK;
}

static int server_ctx_new(X509 *leaf, EVP_PKEY *key, SSL_CTX **ret)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

	if (!ctx) {
		return ossl_fail();
	}
	/*
	 * No server-side session cache: with 256 contexts a box could make the
	 * supervisor hold 256 caches of up to 20k sessions. Resumption still
	 * works through stateless tickets.
	 */
	(void)SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	(void)SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 || SSL_CTX_use_certificate(ctx, leaf) != 1 ||
	    SSL_CTX_use_PrivateKey(ctx, key) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
		int r = ossl_fail();
		SSL_CTX_free(ctx);
		return r;
	}
	SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
	*ret = ctx;
	return 0;
}

int egress_ca_server_ctx(struct egress_ca *ca, const char *host, SSL_CTX **ret)
{
	struct ca_name nm;
	struct leaf *slot = NULL;
	SSL_CTX *ctx;
	X509 *leaf;
	int r;

	if (!ca || !ret) {
		return -EINVAL;
	}
	r = name_parse(host, &nm);
	if (r < 0) {
		return r;
	}
	for (size_t i = 0; i < ca->n; i++) {
		if (strcmp(ca->cache[i].host, host) == 0) {
			ca->cache[i].used = ++ca->tick;
			*ret = ca->cache[i].ctx;
			return 0;
		}
	}
	r = leaf_make(ca, &nm, &leaf);
	if (r < 0) {
		return r;
	}
	r = server_ctx_new(leaf, ca->leaf_key, &ctx);
	X509_free(leaf);
	if (r < 0) {
		return r;
	}
	if (ca->n < EGRESS_CA_CACHE) {
		slot = &ca->cache[ca->n++];
	} else {
		/* Full: the least recently used goes. A connection still using its CTX holds its own reference (SSL_new). */
		slot = &ca->cache[0];
		for (size_t i = 1; i < ca->n; i++) {
			if (ca->cache[i].used < slot->used) {
				slot = &ca->cache[i];
			}
		}
		SSL_CTX_free(slot->ctx);
	}
	(void)snprintf(slot->host, sizeof(slot->host), "%s", host);
	slot->ctx = ctx;
	slot->used = ++ca->tick;
	*ret = ctx;
	return 0;
}

void egress_ca_free(struct egress_ca *ca)
{
	if (!ca) {
		return;
	}
	for (size_t i = 0; i < ca->n; i++) {
		SSL_CTX_free(ca->cache[i].ctx);
	}
	X509_free(ca->cert);
	EVP_PKEY_free(ca->key);
	EVP_PKEY_free(ca->leaf_key);
	free(ca);
}

int egress_tls_client_ctx(const char *extra_ca_file, SSL_CTX **ret)
{
	static const unsigned char alpn[] = "\x08http/1.1";
	SSL_CTX *ctx;
	int r;

	if (!ret) {
		return -EINVAL;
	}
	ctx = SSL_CTX_new(TLS_client_method());
	if (!ctx) {
		return ossl_fail();
	}
	(void)SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 || SSL_CTX_set_default_verify_paths(ctx) != 1 ||
	    (extra_ca_file && SSL_CTX_load_verify_locations(ctx, extra_ca_file, NULL) != 1) ||
	    SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn) - 1) != 0) {
		r = ossl_fail();
		SSL_CTX_free(ctx);
		return r;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	*ret = ctx;
	return 0;
}
