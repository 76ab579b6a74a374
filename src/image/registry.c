/* SPDX-License-Identifier: Apache-2.0 */
#include <curl/curl.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "banned.h"
#include "clock.h"
#include "io.h"
#include "crypto.h"
#include "image/registry.h"
#include "json.h"
#include "log.h"

struct registry {
	CURL *curl;
	char *registry; /* as in the reference: docker.io, localhost:5000 */
	char *host; /* API host */
	char *repo;
	struct buf *basic; /* "user:password", secret */
	struct buf *authz; /* the Authorization header line in use, secret */
	struct registry_opts o;
	unsigned layer, n_layers;
	uint64_t last_draw_ms;
};

/* ---- pure parsers ---- */

void registry_challenge_release(struct registry_challenge *c)
{
	if (!c) {
		return;
	}
	free(c->realm);
	free(c->service);
	free(c->scope);
	*c = (struct registry_challenge){ 0 };
}

static bool is_tchar(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       strchr("!#$%&'*+-.^_`|~", c);
}

int registry_challenge_parse(const char *s, struct registry_challenge *ret)
{
	struct registry_challenge c = { 0 };
	const char *p = s;
	int r = -EBADMSG;

	if (!s) {
		return -EBADMSG;
	}
	if (strlen(s) > REGISTRY_MAX_CHALLENGE) {
		return -E2BIG;
	}
	if (strncasecmp(p, "Bearer", 6) == 0 && (p[6] == ' ' || p[6] == '\0')) {
		c.scheme = REGISTRY_AUTH_BEARER;
		p += 6;
	} else if (strncasecmp(p, "Basic", 5) == 0 && (p[5] == ' ' || p[5] == '\0')) {
		c.scheme = REGISTRY_AUTH_BASIC;
		p += 5;
	} else {
		return -EPROTONOSUPPORT;
	}
	for (;;) {
		const char *k;
		size_t kn;
		_cleanup_free_ char *v = NULL;
		size_t vn = 0;
		char **slot = NULL;

		while (*p == ' ' || *p == '\t' || *p == ',') {
			p++;
		}
		if (*p == '\0') {
			break;
		}
		k = p;
		while (*p && is_tchar(*p)) {
			p++;
		}
		kn = (size_t)(p - k);
		if (kn == 0 || *p != '=') {
			goto fail;
		}
		p++;
		v = malloc(strlen(p) + 1);
		if (!v) {
			r = -ENOMEM;
			goto fail;
		}
		if (*p == '"') {
			p++;
			while (*p && *p != '"') {
				if (*p == '\\') {
					p++;
					if (!*p) {
						goto fail;
					}
				}
				v[vn++] = *p++;
			}
			if (*p != '"') {
				goto fail;
			}
			p++;
		} else {
			while (*p && is_tchar(*p)) {
				v[vn++] = *p++;
			}
		}
		v[vn] = '\0';
		if (*p && *p != ',' && *p != ' ' && *p != '\t') {
			goto fail;
		}
		if (kn == 5 && strncasecmp(k, "realm", 5) == 0) {
			slot = &c.realm;
		} else if (kn == 7 && strncasecmp(k, "service", 7) == 0) {
			slot = &c.service;
		} else if (kn == 5 && strncasecmp(k, "scope", 5) == 0) {
			slot = &c.scope;
		}
		if (slot) {
			if (*slot) {
				goto fail; /* a repeated parameter is ambiguous */
			}
			*slot = steal_ptr(v);
		}
	}
	if (c.scheme == REGISTRY_AUTH_BEARER && (!c.realm || !*c.realm)) {
		goto fail;
	}
	*ret = c;
	return 0;
fail:
	registry_challenge_release(&c);
	return r;
}

static int auth_entry(const json_t *e, struct buf **ret)
{
	const char *a, *u, *pw;
	_cleanup_buf_ struct buf *b = NULL;
	int r = buf_new(8192, BUF_SECRET, &b);
	if (r < 0) {
		return r;
	}
	if (json_get_string(e, "auth", &a) == 0 && *a) {
		r = b64_decode(a, strlen(a), B64_STD, b);
		if (r < 0) {
			return r;
		}
		if (!memchr(buf_ptr(b), ':', buf_len(b)) || memchr(buf_ptr(b), '\0', buf_len(b))) {
			return -EBADMSG;
		}
	} else if (json_get_string(e, "username", &u) == 0 && json_get_string(e, "password", &pw) == 0) {
		if (strchr(u, ':')) {
			return -EBADMSG;
		}
		if ((r = buf_put(b, u, strlen(u))) < 0 || (r = buf_put(b, ":", 1)) < 0 ||
		    (r = buf_put(b, pw, strlen(pw))) < 0) {
			return r;
		}
	} else {
		return -ENOENT;
	}
	*ret = steal_ptr(b);
	return 0;
}

int registry_auth_lookup(const void *json, size_t n, const char *registry, struct buf **ret)
{
	const struct json_opts jo = { .max_bytes = REGISTRY_MAX_AUTH_FILE, .max_depth = 16, .want_top = JSON_OBJECT };
	_cleanup_json_ json_t *root = NULL;
	json_t *auths;
	const char *key;
	json_t *val;
	bool hub = strcmp(registry, "docker.io") == 0;
	int r = json_parse_strict(json, n, &jo, &root);

	if (r < 0) {
		return r;
	}
	r = json_get_object(root, "auths", &auths);
	if (r < 0) {
		return r;
	}
	json_object_foreach(auths, key, val) {
		const char *k = key;
		size_t rl = strlen(registry), kl;
		if (strncmp(k, "https://", 8) == 0) {
			k += 8;
		} else if (strncmp(k, "http://", 7) == 0) {
			k += 7;
		}
		kl = strlen(k);
		if (kl > 0 && k[kl - 1] == '/') {
			kl--;
		}
		if (kl >= 3 && (strncmp(k + kl - 3, "/v1", 3) == 0 || strncmp(k + kl - 3, "/v2", 3) == 0)) {
			kl -= 3;
		}
		if ((kl == rl && strncmp(k, registry, rl) == 0) ||
		    (hub && ((kl == 15 && strncmp(k, "index.docker.io", 15) == 0) ||
			     (kl == 20 && strncmp(k, "registry-1.docker.io", 20) == 0)))) {
			return auth_entry(val, ret);
		}
	}
	return -ENOENT;
}

int registry_token_parse(const void *json, size_t n, char **ret)
{
	const struct json_opts jo = { .max_bytes = REGISTRY_MAX_TOKEN_BYTES, .max_depth = 8, .want_top = JSON_OBJECT };
	_cleanup_json_ json_t *root = NULL;
	const char *t;
	int r = json_parse_strict(json, n, &jo, &root);
	if (r < 0) {
		return r;
	}
	r = json_get_string(root, "token", &t);
	if (r == -ENOENT || (r == 0 && !*t)) {
		r = json_get_string(root, "access_token", &t);
	}
	if (r < 0) {
		return r == -ENOENT ? -EBADMSG : r;
	}
	/* the token goes into a header line: refuse anything that could break it */
	for (const char *p = t; *p; p++) {
		if ((unsigned char)*p <= 0x20 || *p == 0x7f) {
			return -EBADMSG;
		}
	}
	if (!*t) {
		return -EBADMSG;
	}
	*ret = strdup(t);
	return *ret ? 0 : -ENOMEM;
}

/* ---- HTTP ---- */

struct resp {
	long status;
	struct buf *body; /* 2xx body when no writer */
	struct blob_writer *w; /* 2xx body for blobs */
	struct buf *errbody; /* non-2xx body, capped and truncated silently */
	char *content_type;
	char *www_auth;
	int werr; /* first write error */
	struct registry *reg;
	uint64_t expect_size;
};

static void resp_reset_headers(struct resp *q)
{
	free(q->content_type);
	free(q->www_auth);
	q->content_type = q->www_auth = NULL;
}

static char *header_value(const char *p, size_t n, const char *name)
{
	size_t nl = strlen(name);
	if (n <= nl || strncasecmp(p, name, nl) != 0 || p[nl] != ':') {
		return NULL;
	}
	p += nl + 1;
	n -= nl + 1;
	while (n > 0 && (*p == ' ' || *p == '\t')) {
		p++;
		n--;
	}
	while (n > 0 && (p[n - 1] == '\r' || p[n - 1] == '\n' || p[n - 1] == ' ')) {
		n--;
	}
	if (memchr(p, '\0', n)) {
		return NULL;
	}
	return strndup(p, n);
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
	struct resp *q = ud;
	size_t len = size * n;
	char *v;
	if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
		/* a new response (after a redirect or 100): forget the previous one's headers */
		resp_reset_headers(q);
		return len;
	}
	if (len > REGISTRY_MAX_CHALLENGE + 64) {
		return len;
	}
	if ((v = header_value(p, len, "content-type"))) {
		free(q->content_type);
		q->content_type = v;
	} else if ((v = header_value(p, len, "www-authenticate"))) {
		if (!q->www_auth) {
			q->www_auth = v;
		} else {
			free(v);
		}
	}
	return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
	struct resp *q = ud;
	size_t len = size * n;
	long status = 0;
	int r;
	(void)curl_easy_getinfo(q->reg->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status < 200 || status >= 300) {
		(void)buf_put(q->errbody, p, MIN(len, buf_avail(q->errbody)));
		return len;
	}
	if (q->w) {
		r = blob_writer_write(q->w, p, len);
		if (r == 0 && q->expect_size && q->w->written > q->expect_size) {
			r = -E2BIG;
		}
	} else {
		r = buf_put(q->body, p, len);
	}
	if (r < 0) {
		q->werr = r;
		return 0; /* abort the transfer */
	}
	return len;
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
	struct registry *r = ud;
	uint64_t t = clock_mono_ms();
	(void)ultotal;
	(void)ulnow;
	if (r->o.progress_fd < 0 || r->n_layers == 0 || t - r->last_draw_ms < 100) {
		return 0;
	}
	r->last_draw_ms = t;
	dprintf(r->o.progress_fd, "\r\033[Kpulling layer %u/%u: %.1f / %.1f MiB", r->layer, r->n_layers,
		(double)dlnow / 1048576.0, (double)dltotal / 1048576.0);
	return 0;
}

void registry_set_progress_label(struct registry *r, unsigned layer, unsigned n_layers)
{
	r->layer = layer;
	r->n_layers = n_layers;
}

void registry_free(struct registry *r)
{
	if (!r) {
		return;
	}
	if (r->curl) {
		curl_easy_cleanup(r->curl);
	}
	free(r->registry);
	free(r->host);
	free(r->repo);
	buf_free(r->basic);
	buf_free(r->authz);
	free(r);
}

int registry_new(const struct image_ref *ref, const struct registry_opts *o, struct registry **ret,
		 struct image_diag *diag)
{
	struct registry *r;
	int rc;

	if (ref->kind != IMAGE_REF_REGISTRY) {
		return -EINVAL;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		return -EIO;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		return -ENOMEM;
	}
	r->o = *o;
	r->registry = strdup(ref->registry);
	r->host = strdup(image_ref_api_host(ref));
	r->repo = strdup(ref->repository);
	r->curl = curl_easy_init();
	if (!r->registry || !r->host || !r->repo || !r->curl) {
		registry_free(r);
		return -ENOMEM;
	}
	if (o->auth_file) {
		_cleanup_buf_ struct buf *f = NULL;
		_cleanup_close_ int fd = open(o->auth_file, O_RDONLY | O_CLOEXEC);
		rc = fd < 0 ? negative_errno() : io_read_all_new(fd, REGISTRY_MAX_AUTH_FILE, BUF_SECRET, &f);
		if (rc < 0) {
			image_diag_set(diag, "cannot read --registry-auth file: %s", tk_strerror(rc));
			registry_free(r);
			return rc;
		}
		rc = registry_auth_lookup(buf_ptr(f), buf_len(f), r->registry, &r->basic);
		if (rc < 0 && rc != -ENOENT) {
			image_diag_set(diag, "--registry-auth file: %s", tk_strerror(rc));
			registry_free(r);
			return rc;
		}
	}
	*ret = r;
	return 0;
}

static int set_authz(struct registry *r, const char *scheme, const char *cred, size_t n, bool encode)
{
	_cleanup_buf_ struct buf *b = NULL;
	int rc = buf_new(REGISTRY_MAX_TOKEN_BYTES + 64, BUF_SECRET, &b);
	if (rc < 0) {
		return rc;
	}
	if ((rc = buf_putf(b, "Authorization: %s ", scheme)) < 0) {
		return rc;
	}
	rc = encode ? b64_encode(cred, n, B64_STD, b) : buf_put(b, cred, n);
	if (rc < 0 || (rc = buf_put_u8(b, 0)) < 0) {
		return rc;
	}
	buf_free(r->authz);
	r->authz = steal_ptr(b);
	return 0;
}

static bool transient(CURLcode cc, long status)
{
	if (cc != CURLE_OK) {
		return cc == CURLE_COULDNT_CONNECT || cc == CURLE_OPERATION_TIMEDOUT || cc == CURLE_PARTIAL_FILE ||
		       cc == CURLE_RECV_ERROR || cc == CURLE_SEND_ERROR || cc == CURLE_GOT_NOTHING ||
		       cc == CURLE_COULDNT_RESOLVE_HOST || cc == CURLE_HTTP2 || cc == CURLE_HTTP2_STREAM;
	}
	return status == 429 || status == 502 || status == 503 || status == 504 || status == 500;
}

/* One GET; q->status holds the final status. Returns -errno for transport errors. */
static int http_get(struct registry *r, const char *url, const char *accept, bool with_auth, struct resp *q,
		    struct image_diag *diag)
{
	struct curl_slist *h = NULL;
	char errbuf[CURL_ERROR_SIZE] = "";
	CURLcode cc;
	int rc = 0;
	CURL *c = r->curl;

	curl_easy_reset(c);
	if (accept) {
		h = curl_slist_append(h, accept);
	}
	if (with_auth && r->authz) {
		struct curl_slist *h2 = curl_slist_append(h, (const char *)buf_ptr(r->authz));
		if (!h2) {
			curl_slist_free_all(h);
			return -ENOMEM;
		}
		h = h2;
	}
	(void)curl_easy_setopt(c, CURLOPT_URL, url);
	(void)curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https");
	(void)curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "https");
	(void)curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
	(void)curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
	(void)curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	(void)curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
	(void)curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	(void)curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
	(void)curl_easy_setopt(c, CURLOPT_USERAGENT, "tkbox/" TKBOX_VERSION);
	(void)curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	(void)curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	(void)curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	(void)curl_easy_setopt(c, CURLOPT_HEADERDATA, q);
	(void)curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	(void)curl_easy_setopt(c, CURLOPT_WRITEDATA, q);
	(void)curl_easy_setopt(c, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
	if (r->o.ca_file) {
		(void)curl_easy_setopt(c, CURLOPT_CAINFO, r->o.ca_file);
		(void)curl_easy_setopt(c, CURLOPT_CAPATH, NULL);
	}
	if (q->w && r->o.progress_fd >= 0) {
		(void)curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
		(void)curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
		(void)curl_easy_setopt(c, CURLOPT_XFERINFODATA, r);
	}
	q->reg = r;
	cc = curl_easy_perform(c);
	(void)curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &q->status);
	(void)curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	(void)curl_easy_setopt(c, CURLOPT_ERRORBUFFER, NULL);
	curl_slist_free_all(h);
	if (q->werr < 0) {
		return q->werr;
	}
	if (cc != CURLE_OK) {
		char qb[LOG_QUOTE_BUFSIZE];
		image_diag_set(diag, "%s: %s", r->host,
			       log_quote(errbuf[0] ? errbuf : curl_easy_strerror(cc),
					 strlen(errbuf[0] ? errbuf : curl_easy_strerror(cc)), qb));
		rc = transient(cc, 0) ? -EAGAIN : -ECONNREFUSED;
		if (cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE) {
			rc = -EPERM;
		}
	}
	return rc;
}

static int fetch_token(struct registry *r, const struct registry_challenge *ch, struct image_diag *diag)
{
	_cleanup_free_ char *url = NULL, *esc_service = NULL, *esc_scope = NULL, *scope = NULL, *token = NULL;
	_cleanup_buf_ struct buf *body = NULL, *eb = NULL;
	struct resp q = { 0 };
	int rc;

	if (strncmp(ch->realm, "https://", 8) != 0) {
		image_diag_set(diag, "%s: token realm is not https; refusing to send credentials there", r->host);
		return -EPERM;
	}
	if (!ch->scope && asprintf(&scope, "repository:%s:pull", r->repo) < 0) {
		return -ENOMEM;
	}
	esc_scope = curl_easy_escape(r->curl, ch->scope ? ch->scope : scope, 0);
	esc_service = ch->service ? curl_easy_escape(r->curl, ch->service, 0) : NULL;
	if (!esc_scope || (ch->service && !esc_service)) {
		return -ENOMEM;
	}
	if (asprintf(&url, "%s%sscope=%s%s%s", ch->realm, strchr(ch->realm, '?') ? "&" : "?", esc_scope,
		     esc_service ? "&service=" : "", esc_service ? esc_service : "") < 0) {
		return -ENOMEM;
	}
	if ((rc = buf_new(REGISTRY_MAX_TOKEN_BYTES, BUF_SECRET, &body)) < 0 ||
	    (rc = buf_new(REGISTRY_MAX_ERROR_BODY, 0, &eb)) < 0) {
		return rc;
	}
	if (r->basic) {
		rc = set_authz(r, "Basic", (const char *)buf_ptr(r->basic), buf_len(r->basic), true);
	} else {
		buf_free(r->authz);
		r->authz = NULL;
	}
	if (rc < 0) {
		return rc;
	}
	q.body = body;
	q.errbody = eb;
	rc = http_get(r, url, NULL, true, &q, diag);
	resp_reset_headers(&q);
	if (rc < 0) {
		return rc;
	}
	if (q.status != 200) {
		image_diag_set(diag, "%s: token endpoint answered HTTP %ld%s", r->host, q.status,
			       q.status == 401 ? " (wrong or missing credentials)" : "");
		return q.status == 401 || q.status == 403 ? -EACCES : -EPROTO;
	}
	rc = registry_token_parse(buf_ptr(body), buf_len(body), &token);
	if (rc < 0) {
		image_diag_set(diag, "%s: malformed token answer", r->host);
		return rc;
	}
	rc = set_authz(r, "Bearer", token, strlen(token), false);
	explicit_bzero(token, strlen(token));
	return rc;
}

/*
 * GET url with retries and the auth dance. On 2xx returns 0 with q filled
 * (q->body or q->w). reset() is called before each attempt so a blob writer
 * can start over.
 */
static int request(struct registry *r, const char *url, const char *accept, struct resp *q, int (*reset)(void *),
		   void *reset_ud, struct image_diag *diag)
{
	bool authed = false;
	unsigned attempt = 0;
	int rc;
	for (;;) {
		if (reset) {
			rc = reset(reset_ud);
			if (rc < 0) {
				return rc;
			}
		}
		if (q->body) {
			buf_reset(q->body);
		}
		buf_reset(q->errbody);
		q->werr = 0;
		rc = http_get(r, url, accept, true, q, diag);
		if (rc == 0 && q->status >= 200 && q->status < 300) {
			return 0;
		}
		if (rc == 0 && q->status == 401 && !authed) {
			struct registry_challenge ch;
			authed = true;
			rc = registry_challenge_parse(q->www_auth, &ch);
			if (rc < 0) {
				image_diag_set(diag, "%s: HTTP 401 with an unusable WWW-Authenticate challenge",
					       r->host);
				return -EACCES;
			}
			if (ch.scheme == REGISTRY_AUTH_BEARER) {
				rc = fetch_token(r, &ch, diag);
			} else if (r->basic) {
				rc = set_authz(r, "Basic", (const char *)buf_ptr(r->basic), buf_len(r->basic), true);
			} else {
				image_diag_set(diag,
					       "%s: the registry requires authentication (pass --registry-auth FILE)",
					       r->host);
				rc = -EACCES;
			}
			registry_challenge_release(&ch);
			if (rc < 0) {
				return rc;
			}
			continue;
		}
		if ((rc == -EAGAIN || (rc == 0 && transient(CURLE_OK, q->status))) && attempt < r->o.retries) {
			struct timespec ts;
			uint64_t ms = (uint64_t)REGISTRY_BACKOFF_MS << attempt;
			ts.tv_sec = (time_t)(ms / 1000);
			ts.tv_nsec = (long)(ms % 1000) * 1000000;
			(void)nanosleep(&ts, NULL);
			attempt++;
			continue;
		}
		if (rc < 0) {
			return rc == -EAGAIN ? -ECONNREFUSED : rc;
		}
		{
			char qb[LOG_QUOTE_BUFSIZE];
			image_diag_set(
				diag, "%s: HTTP %ld for %s%s: %s", r->host, q->status, url,
				q->status == 401 || q->status == 403
					? (r->basic ? " (access denied to these credentials)"
						    : " (access denied; pass --registry-auth FILE for a private image)")
					: "",
				log_quote(buf_ptr(q->errbody), buf_len(q->errbody), qb));
		}
		switch (q->status) {
		case 401:
		case 403:
			return -EACCES;
		case 404:
			return -ENOENT;
		default:
			return -EPROTO;
		}
	}
}

static int digest_of(const void *p, size_t n, char out[IMAGE_DIGEST_LEN + 1])
{
	uint8_t md[SHA256_LEN];
	struct buf b;
	int rc = sha256(p, n, md);
	if (rc < 0) {
		return rc;
	}
	rc = buf_init(&b, 2 * SHA256_LEN, 0);
	if (rc < 0) {
		return rc;
	}
	rc = hex_encode(md, SHA256_LEN, &b);
	if (rc >= 0) {
		memcpy(out, "sha256:", 7);
		memcpy(out + 7, buf_ptr(&b), 2 * SHA256_LEN);
		out[IMAGE_DIGEST_LEN] = '\0';
	}
	buf_release(&b);
	return rc;
}

int registry_get_manifest(struct registry *r, const char *reference, struct buf **ret_body, char **ret_content_type,
			  char ret_digest[IMAGE_DIGEST_LEN + 1], struct image_diag *diag)
{
	static const char accept[] =
		"Accept: " MT_OCI_INDEX ", " MT_OCI_MANIFEST ", " MT_DOCKER_LIST ", " MT_DOCKER_MANIFEST;
	_cleanup_free_ char *url = NULL;
	_cleanup_buf_ struct buf *body = NULL, *eb = NULL;
	char digest[IMAGE_DIGEST_LEN + 1];
	struct resp q = { 0 };
	int rc;

	if (asprintf(&url, "https://%s/v2/%s/manifests/%s", r->host, r->repo, reference) < 0) {
		return -ENOMEM;
	}
	if ((rc = buf_new(IMAGE_MAX_MANIFEST_BYTES, 0, &body)) < 0 ||
	    (rc = buf_new(REGISTRY_MAX_ERROR_BODY, 0, &eb)) < 0) {
		return rc;
	}
	q.body = body;
	q.errbody = eb;
	rc = request(r, url, accept, &q, NULL, NULL, diag);
	if (rc == -E2BIG) {
		image_diag_set(diag, "%s: manifest larger than IMAGE_MAX_MANIFEST_BYTES", r->host);
	}
	if (rc < 0) {
		resp_reset_headers(&q);
		return rc;
	}
	rc = digest_of(buf_ptr(body), buf_len(body), digest);
	if (rc < 0) {
		resp_reset_headers(&q);
		return rc;
	}
	if (image_digest_valid(reference) && strcmp(reference, digest) != 0) {
		image_diag_set(diag, "%s: manifest does not match its digest %s", r->host, reference);
		resp_reset_headers(&q);
		return -EBADMSG;
	}
	free(q.www_auth);
	*ret_content_type = q.content_type;
	*ret_body = steal_ptr(body);
	memcpy(ret_digest, digest, sizeof(digest));
	return 0;
}

struct blob_reset {
	struct blob_writer *w;
	struct image_cache *c;
	const char *digest;
	uint64_t max;
	bool begun;
};

static int blob_reset(void *ud)
{
	struct blob_reset *b = ud;
	if (b->begun) {
		blob_writer_abort(b->w);
	}
	b->begun = true;
	return blob_writer_begin(b->w, b->c, b->digest, b->max);
}

int registry_get_blob(struct registry *r, const struct image_descriptor *d, struct image_cache *c,
		      struct image_diag *diag)
{
	_cleanup_free_ char *url = NULL;
	_cleanup_buf_ struct buf *eb = NULL;
	struct blob_writer w = { .fd = -1 };
	struct blob_reset br = { .w = &w, .c = c, .digest = d->digest, .max = (uint64_t)d->size };
	struct resp q = { 0 };
	int rc;

	if (image_cache_has_blob(c, d->digest)) {
		return 0;
	}
	if (asprintf(&url, "https://%s/v2/%s/blobs/%s", r->host, r->repo, d->digest) < 0) {
		return -ENOMEM;
	}
	rc = buf_new(REGISTRY_MAX_ERROR_BODY, 0, &eb);
	if (rc < 0) {
		return rc;
	}
	q.w = &w;
	q.errbody = eb;
	q.expect_size = (uint64_t)d->size;
	rc = request(r, url, NULL, &q, blob_reset, &br, diag);
	resp_reset_headers(&q);
	if (r->o.progress_fd >= 0) {
		dprintf(r->o.progress_fd, "\r\033[K");
	}
	if (rc == -E2BIG) {
		image_diag_set(diag, "%s: blob %s is larger than its manifest says", r->host, d->digest);
	}
	if (rc == 0 && w.written != (uint64_t)d->size) {
		image_diag_set(diag, "%s: blob %s has %llu bytes, its manifest says %lld", r->host, d->digest,
			       (unsigned long long)w.written, (long long)d->size);
		rc = -EBADMSG;
	}
	if (rc == 0) {
		rc = blob_writer_commit(&w);
		if (rc == -EBADMSG) {
			image_diag_set(diag, "%s: blob does not match its digest %s", r->host, d->digest);
		}
	}
	if (rc < 0) {
		blob_writer_abort(&w);
	}
	return rc;
}
