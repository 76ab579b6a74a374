/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "banned.h"
#include "clock.h"
#include "daemon/egress-sup.h"
#include "egress/clienthello.h"
#include "egress/proxy-head.h"
#include "log.h"

#define ES_DOWN_MAX ((size_t)64 << 10) /* origin bytes held for the guest per stream */
#define ES_READS_PER_TURN 4 /* origin reads per socket and turn (each at most ES_DOWN_MAX) */
#define ES_GRANT_MIN ((uint32_t)64 << 10) /* credit is returned in steps of at least this much */
#define ES_ESTABLISHED "HTTP/1.1 200 Connection established\r\n\r\n"

enum es_state {
	ES_FREE = 0,
	ES_HEAD, /* reading the request head */
	ES_ASKED, /* egress_open sent: waiting for the daemon */
	ES_HELLO, /* dialled CONNECT: reading a ClientHello, nothing past fwd goes */
	ES_SERVER, /* the ClientHello went: the server's first bytes decide whether a second one comes (HRR) */
	ES_RELAY, /* bytes both ways */
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

static void es_free(struct es *x)
{
	if (x->fd >= 0) {
		(void)close(x->fd);
	}
	buf_release(&x->hdr);
	buf_release(&x->in);
	buf_release(&x->down);
	free(x->ch);
	*x = (struct es){ .fd = -1 };
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
	} else if (r == 1) {
		es_ask(e, x);
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
	return x->state == ES_RELAY || (x->state == ES_HELLO && (x->retry || x->plain));
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

/*
 * The origin is read in every dialled state, so its EOF is seen in each: in
 * ES_HELLO without plain what it sends is held (down_open is false) and
 * judged as the server's first bytes once the ClientHello went.
 */
static bool es_wants_read(const struct es *x)
{
	return x->fd >= 0 && !x->origin_eof && buf_len(&x->down) < ES_DOWN_MAX &&
	       (x->state == ES_RELAY || x->state == ES_SERVER || x->state == ES_HELLO);
}

static bool es_wants_write(const struct es *x)
{
	return x->fd >= 0 &&
	       (buf_len(&x->hdr) > 0 ||
		(x->state == ES_RELAY && !x->framed ? buf_len(&x->in) : MIN(x->fwd, buf_len(&x->in))) > 0);
}

/* Move a dialled stream on: bytes, credit, the server's first bytes, FIN and the end. */
static void es_pump(struct egress_sup *e, struct es *x)
{
	int r = es_push_up(x);

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

void egress_sup_stop(struct egress_sup *e)
{
	refused_summary(e);
	e->stopping = true;
	for (size_t i = 0; i < ARRAY_SIZE(e->s); i++) {
		struct es *x = &e->s[i];
		if (x->state == ES_FREE) {
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
		if (e->s[i].fd >= 0 && e->s[i].state != ES_FREE) {
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

bool egress_sup_pending(const struct egress_sup *e)
{
	return buf_len(&e->rx) > 0 && !e->why[0];
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
	free(e);
}
