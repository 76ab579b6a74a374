/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The guest forwarder (src/guest/egress.c) run on the host: its port is one
 * end of a socketpair, its listener a loopback socket on a free port, and
 * this test plays the host with egress-proto's codec and its own tracker, so
 * any frame the forwarder sends against the mux's rules (DATA before OPEN_OK
 * or beyond the credit, a 257th OPEN) fails the test where it arrives.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <ftw.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "banned.h"
#include "frame.h"
#include "guest/egress.h"
#include "io.h"
#include "vmm/egress-proto.h"

/* A guard against a hang, never a timing assertion: an expected frame or byte comes long before. */
#define HANG_MS 60000
/* How long "nothing more arrives" is watched. */
#define QUIET_MS 300
#define BIG ((size_t)5 * 1024 * 1024)

struct host {
	int fd;
	struct frame_decoder dec;
	struct buf payload;
	struct egress_mux mux;
	uint8_t rbuf[65536];
	size_t rlen, roff;
};

struct fx {
	int port[2]; /* [0] the forwarder's, [1] the host's */
	int lfd;
	uint16_t lport;
	pthread_t th;
	int ret;
	bool joined;
	struct host h;
};

static void *fwd_thread(void *arg)
{
	struct fx *x = arg;

	x->ret = guest_egress_run(x->port[0], x->lfd);
	return NULL;
}

static int setup(void **state)
{
	struct fx *x = calloc(1, sizeof(*x));
	struct sockaddr_in a;
	socklen_t al = sizeof(a);

	assert_non_null(x);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, x->port), 0);
	assert_int_equal(fcntl(x->port[0], F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(fcntl(x->port[1], F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(guest_egress_listen(0, &x->lfd), 0);
	assert_int_equal(getsockname(x->lfd, (struct sockaddr *)&a, &al), 0);
	x->lport = ntohs(a.sin_port);
	x->h.fd = x->port[1];
	assert_int_equal(frame_decoder_init(&x->h.dec, EGRESS_MAX_FRAME), 0);
	assert_int_equal(buf_init(&x->h.payload, EGRESS_MAX_FRAME, 0), 0);
	egress_mux_init(&x->h.mux, EGRESS_FROM_HOST);
	assert_int_equal(pthread_create(&x->th, NULL, fwd_thread, x), 0);
	*state = x;
	return 0;
}

static int teardown(void **state)
{
	struct fx *x = *state;

	/* The host end closes: the forwarder ends with -EPIPE (a test that ended it otherwise joined already). */
	(void)close(x->port[1]);
	if (!x->joined) {
		assert_int_equal(pthread_join(x->th, NULL), 0);
		assert_int_equal(x->ret, -EPIPE);
	}
	(void)close(x->port[0]);
	(void)close(x->lfd);
	frame_decoder_release(&x->h.dec);
	buf_release(&x->h.payload);
	free(x);
	return 0;
}

/* The next frame from the forwarder within ms, through the host's tracker: 1, or 0 when none came. */
static int host_recv(struct host *h, struct egress_frame *fr, int ms)
{
	for (;;) {
		struct pollfd p = { .fd = h->fd, .events = POLLIN };
		ssize_t k;
		while (h->roff < h->rlen) {
			const char *why = "?";
			size_t used = 0;
			uint8_t type = 0;
			int r = frame_decoder_feed(&h->dec, h->rbuf + h->roff, h->rlen - h->roff, &used);
			h->roff += used;
			assert_true(r >= 0);
			if (r == 0) {
				continue;
			}
			buf_reset(&h->payload);
			assert_int_equal(frame_decoder_take(&h->dec, &type, &h->payload), 0);
			r = egress_mux_receive(&h->mux, EGRESS_FROM_GUEST, type, buf_ptr(&h->payload),
					       buf_len(&h->payload), fr, &why);
			if (r < 0) {
				fail_msg("the forwarder sent frame 0x%02x that the host's tracker refuses: %s", type,
					 why);
			}
			return 1;
		}
		if (poll(&p, 1, ms) == 0) {
			return 0;
		}
		k = read(h->fd, h->rbuf, sizeof(h->rbuf));
		if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
			continue;
		}
		assert_true(k > 0);
		h->rlen = (size_t)k;
		h->roff = 0;
	}
}

/* The next frame but WINDOW (grants come as the client reads; the tracker counts them), which must come. */
static void host_expect(struct host *h, struct egress_frame *fr, uint8_t type, uint32_t id)
{
	do {
		assert_int_equal(host_recv(h, fr, HANG_MS), 1);
	} while (fr->type == EGRESS_WINDOW && type != EGRESS_WINDOW);
	assert_int_equal(fr->type, type);
	if (id) {
		assert_int_equal(fr->id, id);
	}
}

static void write_port(int fd, const struct buf *b)
{
	const uint8_t *p = buf_ptr(b);
	size_t n = buf_len(b);

	while (n > 0) {
		struct pollfd q = { .fd = fd, .events = POLLOUT };
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
			assert_int_equal(poll(&q, 1, HANG_MS), 1);
			continue;
		}
		assert_true(k > 0);
		p += k;
		n -= (size_t)k;
	}
}

/* Nothing but WINDOW arrives for QUIET_MS. */
static void host_quiet(struct host *h)
{
	struct egress_frame fr;

	while (host_recv(h, &fr, QUIET_MS) == 1) {
		if (fr.type != EGRESS_WINDOW) {
			fail_msg("frame 0x%02x on stream %u where none was due", fr.type, fr.id);
		}
	}
}

/* Send a frame as the host, through the host's tracker. */
static void host_send(struct host *h, const struct egress_frame *fr)
{
	const char *why = "?";
	struct buf b;

	if (egress_mux_apply(&h->mux, EGRESS_FROM_HOST, fr, &why) < 0) {
		fail_msg("the test's own frame breaks the mux: %s", why);
	}
	assert_int_equal(buf_init(&b, EGRESS_MAX_FRAME + FRAME_HEADER_SIZE, 0), 0);
	assert_int_equal(egress_encode(fr, &b), 0);
	write_port(h->fd, &b);
	buf_release(&b);
}

static void host_simple(struct host *h, uint8_t type, uint32_t id)
{
	host_send(h, &(struct egress_frame){ .type = type, .id = id });
}

static void host_data(struct host *h, uint32_t id, const char *s)
{
	host_send(h, &(struct egress_frame){
			     .type = EGRESS_DATA, .id = id, .data = (const uint8_t *)s, .len = strlen(s) });
}

static int client_connect(const struct fx *x)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(x->lport) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static void client_write(int fd, const char *s)
{
	assert_int_equal(io_write_all(fd, s, strlen(s)), 0);
}

/* Read exactly n bytes (or until EOF when want_eof) from a client socket into out. */
static size_t client_read(int fd, char *out, size_t n, bool want_eof)
{
	size_t got = 0;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t k;
		if (!want_eof && got == n) {
			return got;
		}
		assert_int_equal(poll(&p, 1, HANG_MS), 1);
		k = recv(fd, out + got, n - got, 0);
		if (k < 0) {
			fail_msg("client read: %s", strerror(errno));
		}
		if (k == 0) {
			assert_true(want_eof);
			return got;
		}
		got += (size_t)k;
		assert_true(got <= n);
	}
}

static void client_expect(int fd, const char *s)
{
	char got[256];

	assert_true(strlen(s) < sizeof(got));
	assert_int_equal(client_read(fd, got, strlen(s), false), strlen(s));
	assert_memory_equal(got, s, strlen(s));
}

/* Collect DATA of one stream until n bytes came (no other frame in between). */
static void host_expect_bytes(struct host *h, uint32_t id, const char *s)
{
	size_t n = strlen(s), got = 0;
	struct egress_frame fr;

	while (got < n) {
		host_expect(h, &fr, EGRESS_DATA, id);
		assert_true(got + fr.len <= n);
		assert_memory_equal(fr.data, s + got, fr.len);
		got += fr.len;
	}
}

/* A connection through OPEN / OPEN_OK. */
static uint32_t open_stream(struct fx *x, int *ret_fd)
{
	struct egress_frame fr;

	*ret_fd = client_connect(x);
	host_expect(&x->h, &fr, EGRESS_OPEN, 0);
	host_simple(&x->h, EGRESS_OPEN_OK, fr.id);
	return fr.id;
}

static void test_open_waits_for_ok(void **state)
{
	struct fx *x = *state;
	const char *head = "CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n";
	struct egress_frame fr;
	uint32_t id1, id2;
	int c1, c2;

	c1 = client_connect(x);
	client_write(c1, head);
	host_expect(&x->h, &fr, EGRESS_OPEN, 0);
	id1 = fr.id;
	assert_int_not_equal(id1, 0);
	/* The client's bytes wait: nothing arrives (a DATA here would also fail the host's tracker). */
	host_quiet(&x->h);
	c2 = client_connect(x);
	host_expect(&x->h, &fr, EGRESS_OPEN, 0);
	id2 = fr.id;
	assert_int_not_equal(id2, id1);
	host_simple(&x->h, EGRESS_OPEN_OK, id1);
	host_expect_bytes(&x->h, id1, head);
	host_data(&x->h, id1, "HTTP/1.1 200 Connection established\r\n\r\n");
	client_expect(c1, "HTTP/1.1 200 Connection established\r\n\r\n");
	client_write(c1, "\x16\x03\x01 tls bytes");
	host_expect_bytes(&x->h, id1, "\x16\x03\x01 tls bytes");
	host_data(&x->h, id1, "server bytes");
	client_expect(c1, "server bytes");
	/* The second stream, still unanswered, sent nothing at all. */
	host_quiet(&x->h);
	(void)close(c1);
	(void)close(c2);
}

struct pump {
	int fd;
	const uint8_t *up;
	uint8_t *down;
	size_t n, got;
	int err;
};

/* The client of the big transfer: send n bytes, then shut down; read until EOF. No cmocka here (a thread). */
static void *pump_thread(void *arg)
{
	struct pump *p = arg;
	size_t sent = 0;
	bool eof = false;

	while ((!eof || sent < p->n) && !p->err) {
		struct pollfd q = { .fd = p->fd, .events = (short)((eof ? 0 : POLLIN) | (sent < p->n ? POLLOUT : 0)) };
		ssize_t k;
		if (poll(&q, 1, HANG_MS) != 1) {
			p->err = ETIMEDOUT;
			break;
		}
		if ((q.revents & POLLOUT) && sent < p->n) {
			k = send(p->fd, p->up + sent, MIN((size_t)65536, p->n - sent), MSG_NOSIGNAL | MSG_DONTWAIT);
			sent += k > 0 ? (size_t)k : 0;
			if (sent == p->n) {
				(void)shutdown(p->fd, SHUT_WR);
			}
		}
		if (!eof && (q.revents & (POLLIN | POLLHUP | POLLERR))) {
			k = recv(p->fd, p->down + p->got, p->n + 1 - p->got, MSG_DONTWAIT);
			if (k < 0 && errno != EAGAIN) {
				p->err = errno;
			}
			eof = k == 0;
			p->got += k > 0 ? (size_t)k : 0;
		}
	}
	return NULL;
}

struct side {
	uint8_t *got_up;
	size_t up_got, down_sent;
	const uint8_t *down;
	bool fin_seen, fin_sent, closed;
	unsigned grants;
};

/* One frame of the big transfer, as the host. The host grants more only once the guest's credit is spent. */
static void transfer_frame(struct host *h, uint32_t id, struct side *s, const struct egress_frame *fr)
{
	const struct egress_stream *st;

	assert_int_equal(fr->id, id);
	switch (fr->type) {
	case EGRESS_DATA:
		assert_true(s->up_got + fr->len <= BIG);
		memcpy(s->got_up + s->up_got, fr->data, fr->len);
		s->up_got += fr->len;
		st = egress_mux_find(&h->mux, id);
		if (st->credit[EGRESS_FROM_GUEST] == 0 && s->up_got < BIG) {
			/* An odd size, so the credit runs out in the middle of a client read. */
			host_send(h, &(struct egress_frame){ .type = EGRESS_WINDOW, .id = id, .credit = 300001 });
			s->grants++;
		}
		break;
	case EGRESS_FIN:
		s->fin_seen = true;
		break;
	case EGRESS_CLOSE:
		assert_int_equal(fr->reason, EGRESS_CLOSE_DONE);
		host_send(h, &(struct egress_frame){ .type = EGRESS_CLOSE, .id = id, .reason = EGRESS_CLOSE_DONE });
		s->closed = true;
		break;
	default:
		break; /* WINDOW: the tracker counted it */
	}
}

static void transfer_send(struct host *h, uint32_t id, struct side *s)
{
	const struct egress_stream *st = egress_mux_find(&h->mux, id);
	size_t n = MIN(EGRESS_MAX_DATA, BIG - s->down_sent);

	if (s->down_sent == BIG) {
		host_simple(h, EGRESS_FIN, id);
		s->fin_sent = true;
		return;
	}
	n = MIN(n, st->credit[EGRESS_FROM_HOST]);
	host_send(h, &(struct egress_frame){ .type = EGRESS_DATA, .id = id, .data = s->down + s->down_sent, .len = n });
	s->down_sent += n;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
}

static void test_transfer_5mib(void **state)
{
	struct fx *x = *state;
	uint8_t *up = malloc(BIG), *down = malloc(BIG), *got_down = malloc(BIG + 1);
	struct side s = { .got_up = malloc(BIG), .down = down };
	struct pump p = { .up = up, .down = got_down, .n = BIG };
	struct egress_frame fr;
	pthread_t th;
	uint32_t id;

	assert_true(up && down && got_down && s.got_up);
	fill(up, BIG, 1);
	fill(down, BIG, 2);
	id = open_stream(x, &p.fd);
	assert_int_equal(pthread_create(&th, NULL, pump_thread, &p), 0);
	while (!s.closed) {
		const struct egress_stream *st = egress_mux_find(&x->h.mux, id);
		bool out = !s.fin_sent && (s.down_sent == BIG || st->credit[EGRESS_FROM_HOST] > 0);
		struct pollfd q = { .fd = x->h.fd, .events = (short)(POLLIN | (out ? POLLOUT : 0)) };
		if (x->h.roff == x->h.rlen) {
			assert_true(poll(&q, 1, HANG_MS) > 0);
		}
		if (x->h.roff < x->h.rlen || (q.revents & POLLIN)) {
			assert_int_equal(host_recv(&x->h, &fr, HANG_MS), 1);
			transfer_frame(&x->h, id, &s, &fr);
		}
		if ((q.revents & POLLOUT) && out) {
			transfer_send(&x->h, id, &s);
		}
	}
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(p.err, 0);
	assert_true(s.fin_seen);
	assert_int_equal(s.up_got, BIG);
	assert_memory_equal(s.got_up, up, BIG);
	assert_int_equal(p.got, BIG);
	assert_memory_equal(got_down, down, BIG);
	/* The credit was spent and renewed many times each way. */
	assert_true(s.grants >= 10);
	assert_null(egress_mux_find(&x->h.mux, id));
	(void)close(p.fd);
	free(up);
	free(down);
	free(got_down);
	free(s.got_up);
}

static void expect_eof(int fd)
{
	char c;

	assert_int_equal(client_read(fd, &c, 1, true), 0);
}

/* Both FINs seen and the client served: the forwarder closes, the host answers, the id is free. */
static void expect_done(struct host *h, uint32_t id)
{
	struct egress_frame fr;

	host_expect(h, &fr, EGRESS_CLOSE, id);
	assert_int_equal(fr.reason, EGRESS_CLOSE_DONE);
	host_send(h, &(struct egress_frame){ .type = EGRESS_CLOSE, .id = id, .reason = EGRESS_CLOSE_DONE });
	assert_null(egress_mux_find(&h->mux, id));
}

static void test_half_close(void **state)
{
	struct fx *x = *state;
	struct egress_frame fr;
	uint32_t id;
	int c;

	/* The client finishes first and still reads the answer. */
	id = open_stream(x, &c);
	client_write(c, "ping");
	assert_int_equal(shutdown(c, SHUT_WR), 0);
	host_expect_bytes(&x->h, id, "ping");
	host_expect(&x->h, &fr, EGRESS_FIN, id);
	host_data(&x->h, id, "pong");
	client_expect(c, "pong");
	host_simple(&x->h, EGRESS_FIN, id);
	expect_eof(c);
	expect_done(&x->h, id);
	(void)close(c);

	/* The host finishes first: the client sees EOF and may still send. */
	id = open_stream(x, &c);
	host_data(&x->h, id, "hello");
	host_simple(&x->h, EGRESS_FIN, id);
	client_expect(c, "hello");
	expect_eof(c);
	client_write(c, "late");
	host_expect_bytes(&x->h, id, "late");
	host_quiet(&x->h);
	assert_int_equal(shutdown(c, SHUT_WR), 0);
	host_expect(&x->h, &fr, EGRESS_FIN, id);
	expect_done(&x->h, id);
	(void)close(c);
}

/* Read a whole 503 until EOF (never a reset) and check its head and body. */
static void expect_503(int fd, const char *rule, const char *text)
{
	char resp[2048], want[128];
	size_t n = client_read(fd, resp, sizeof(resp) - 1, true);
	const char *body;

	resp[n] = '\0';
	assert_true(strncmp(resp, "HTTP/1.1 503 Service Unavailable\r\n", 34) == 0);
	assert_non_null(strstr(resp, "\r\nConnection: close\r\n"));
	assert_non_null(strstr(resp, "\r\nContent-Type: text/plain; charset=utf-8\r\n"));
	(void)snprintf(want, sizeof(want), "\r\nTkbox-Rule: %s\r\n", rule);
	assert_non_null(strstr(resp, want));
	body = strstr(resp, "\r\n\r\n");
	assert_non_null(body);
	body += 4;
	(void)snprintf(want, sizeof(want), "\r\nContent-Length: %zu\r\n", strlen(body));
	assert_non_null(strstr(resp, want));
	assert_non_null(strstr(body, text));
}

static void test_open_refused(void **state)
{
	struct fx *x = *state;
	const char *reason = "egress is closed: the box is stopping";
	char *body = calloc(1, 65536);
	struct egress_frame fr;
	int c;

	assert_non_null(body);
	c = client_connect(x);
	/* A request with a body the forwarder never reads: the 503 must still arrive whole, not as a reset. */
	client_write(c, "POST http://example.test/ HTTP/1.1\r\nHost: example.test\r\nContent-Length: 65535\r\n\r\n");
	memset(body, 'b', 65535);
	client_write(c, body);
	host_expect(&x->h, &fr, EGRESS_OPEN, 0);
	host_send(&x->h, &(struct egress_frame){ .type = EGRESS_OPEN_REFUSED,
						 .id = fr.id,
						 .data = (const uint8_t *)reason,
						 .len = strlen(reason) });
	expect_503(c, "open-refused", reason);
	assert_null(egress_mux_find(&x->h.mux, fr.id));
	/* Nothing follows for the refused id (the host's tracker would refuse it). */
	host_quiet(&x->h);
	(void)close(c);
	free(body);
}

static void test_stream_limit(void **state)
{
	struct fx *x = *state;
	int c[EGRESS_MAX_STREAMS + 2];
	uint32_t ids[EGRESS_MAX_STREAMS];
	struct rlimit rl;
	struct egress_frame fr;

	/* 258 clients here and as many accepted by the forwarder in the same process. */
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	rl.rlim_cur = MAX(rl.rlim_cur, MIN(rl.rlim_max, (rlim_t)4096));
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	assert_true(rl.rlim_cur >= 1024);
	for (size_t i = 0; i < EGRESS_MAX_STREAMS; i++) {
		c[i] = client_connect(x);
		host_expect(&x->h, &fr, EGRESS_OPEN, 0);
		ids[i] = fr.id;
	}
	assert_int_equal(x->h.mux.n, EGRESS_MAX_STREAMS);
	/* The 257th gets a 503 naming the limit, and no OPEN (a 257th OPEN would fail the host's tracker). */
	c[EGRESS_MAX_STREAMS] = client_connect(x);
	client_write(c[EGRESS_MAX_STREAMS], "CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n");
	expect_503(c[EGRESS_MAX_STREAMS], "stream-limit", "256 connections open through its proxy (EGRESS_MAX_STREAMS");
	host_quiet(&x->h);
	/* One stream ends (refused by the host): the next connection is opened again. */
	host_send(&x->h,
		  &(struct egress_frame){
			  .type = EGRESS_OPEN_REFUSED, .id = ids[0], .data = (const uint8_t *)"test", .len = 4 });
	expect_503(c[0], "open-refused", "test");
	c[EGRESS_MAX_STREAMS + 1] = client_connect(x);
	host_expect(&x->h, &fr, EGRESS_OPEN, 0);
	for (size_t i = 0; i < ARRAY_SIZE(c); i++) {
		(void)close(c[i]);
	}
}

/* A raw frame from the host, past the test's own tracker. */
static void host_raw(struct host *h, const struct egress_frame *fr)
{
	struct buf b;

	assert_int_equal(buf_init(&b, EGRESS_MAX_FRAME + FRAME_HEADER_SIZE, 0), 0);
	assert_int_equal(egress_encode(fr, &b), 0);
	write_port(h->fd, &b);
	buf_release(&b);
}

static void violation(struct fx *x, const struct egress_frame *bad)
{
	char ch;
	int c;

	struct pollfd p;

	(void)open_stream(x, &c);
	host_raw(&x->h, bad);
	/* The forwarder closes every client (a reset or EOF, never data), then ends with -EPROTO. */
	p = (struct pollfd){ .fd = c, .events = POLLIN };
	assert_int_equal(poll(&p, 1, HANG_MS), 1);
	assert_true(recv(c, &ch, 1, 0) <= 0);
	assert_int_equal(pthread_join(x->th, NULL), 0);
	x->joined = true;
	assert_int_equal(x->ret, -EPROTO);
	(void)close(c);
}

static void test_violation_unopened_id(void **state)
{
	violation(*state,
		  &(struct egress_frame){ .type = EGRESS_DATA, .id = 0x7777, .data = (const uint8_t *)"x", .len = 1 });
}

static void test_violation_wrong_way(void **state)
{
	/* OPEN goes guest -> host only. */
	violation(*state, &(struct egress_frame){ .type = EGRESS_OPEN, .id = 0x7777 });
}

/* ---- apt's proxy setting ---- */

static char *tmpdir(void)
{
	char *d = strdup("/tmp/test-guest-egress.XXXXXX");

	assert_non_null(d);
	assert_non_null(mkdtemp(d));
	return d;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void rm_tree(char *d)
{
	(void)nftw(d, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(d);
}

static int rootfd_of(const char *d)
{
	int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	assert_true(fd >= 0);
	return fd;
}

static char *read_at(int dirfd, const char *path)
{
	char *s = NULL;

	assert_int_equal(io_read_file(dirfd, path, 4096, 0, &s, NULL), 0);
	return s;
}

static void test_apt_proxy(void **state)
{
	char *d = tmpdir();
	int root = rootfd_of(d);
	struct stat st;
	char *s;

	(void)state;
	/* Not an apt image: nothing written. */
	assert_int_equal(guest_egress_write_apt_proxy(root), 0);
	assert_int_equal(fstatat(root, "etc", &st, AT_SYMLINK_NOFOLLOW), -1);
	assert_int_equal(io_mkdir_p(root, "etc/apt", 0755), 0);
	assert_int_equal(guest_egress_write_apt_proxy(root), 1);
	s = read_at(root, "etc/apt/apt.conf.d/99tkbox-proxy");
	assert_non_null(strstr(s, "\nAcquire::http::Proxy \"http://127.0.0.1:3128/\";\n"));
	assert_non_null(strstr(s, "\nAcquire::https::Proxy \"http://127.0.0.1:3128/\";\n"));
	free(s);
	/* A second boot (a kept scratch disk) writes it again. */
	assert_int_equal(guest_egress_write_apt_proxy(root), 1);
	/* A symlink planted by the image is replaced, and what it names is untouched. */
	assert_int_equal(unlinkat(root, "etc/apt/apt.conf.d/99tkbox-proxy", 0), 0);
	assert_int_equal(symlinkat("../../../victim", root, "etc/apt/apt.conf.d/99tkbox-proxy"), 0);
	assert_int_equal(close(openat(root, "victim", O_WRONLY | O_CREAT | O_EXCL, 0644)), 0);
	assert_int_equal(guest_egress_write_apt_proxy(root), 1);
	assert_int_equal(fstatat(root, "etc/apt/apt.conf.d/99tkbox-proxy", &st, AT_SYMLINK_NOFOLLOW), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(fstatat(root, "victim", &st, AT_SYMLINK_NOFOLLOW), 0);
	assert_int_equal(st.st_size, 0);
	assert_int_equal(fstatat(root, "etc/apt/apt.conf.d/.99tkbox-proxy.tmp", &st, AT_SYMLINK_NOFOLLOW), -1);
	(void)close(root);
	rm_tree(d);
}

static void test_apt_proxy_symlinks(void **state)
{
	char *d = tmpdir();
	int root = rootfd_of(d);
	struct stat st;

	(void)state;
	/* etc/apt a symlink to a directory outside: refused, nothing written there. */
	assert_int_equal(io_mkdir_p(root, "outside/apt.conf.d", 0755), 0);
	assert_int_equal(io_mkdir_p(root, "etc", 0755), 0);
	assert_int_equal(symlinkat("../outside", root, "etc/apt"), 0);
	assert_int_equal(guest_egress_write_apt_proxy(root), -ELOOP);
	assert_int_equal(fstatat(root, "outside/apt.conf.d/99tkbox-proxy", &st, AT_SYMLINK_NOFOLLOW), -1);
	/* apt.conf.d a symlink: refused too. */
	assert_int_equal(unlinkat(root, "etc/apt", 0), 0);
	assert_int_equal(io_mkdir_p(root, "etc/apt", 0755), 0);
	assert_int_equal(symlinkat("../../outside/apt.conf.d", root, "etc/apt/apt.conf.d"), 0);
	assert_int_equal(guest_egress_write_apt_proxy(root), -ELOOP);
	assert_int_equal(fstatat(root, "outside/apt.conf.d/99tkbox-proxy", &st, AT_SYMLINK_NOFOLLOW), -1);
	assert_int_equal(fstatat(root, "outside/apt.conf.d/.99tkbox-proxy.tmp", &st, AT_SYMLINK_NOFOLLOW), -1);
	(void)close(root);
	rm_tree(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_open_waits_for_ok, setup, teardown),
		cmocka_unit_test_setup_teardown(test_transfer_5mib, setup, teardown),
		cmocka_unit_test_setup_teardown(test_half_close, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stream_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_violation_unopened_id, setup, teardown),
		cmocka_unit_test_setup_teardown(test_violation_wrong_way, setup, teardown),
		cmocka_unit_test(test_apt_proxy),
		cmocka_unit_test(test_apt_proxy_symlinks),
	};

	(void)signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
