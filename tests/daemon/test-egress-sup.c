/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The supervisor's egress proxy (src/daemon/egress-sup.c) driven from both
 * ends: the test plays the guest over a socketpair as the tkbox.egress port
 * (the mux encoder and its own tracker), the daemon over a SOCK_SEQPACKET
 * pair (supmsg, the monitor, ipc with real fds), and the origin as a TCP
 * listener on loopback whose accepted sockets show exactly what arrived.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "banned.h"
#include "daemon/egress-sup.h"
#include "daemon/ipc.h"
#include "daemon/sandbox.h"
#include "egress/leak.h"
#include "egress/tls.h"
#include "guest/egress.h"
#include "secmem.h"

#include "../unit/clienthello-vector.h"

#define TURNS 400 /* poll rounds (5 ms each at most) before a wait is a failure */

static struct {
	struct egress_sup *e;
	int port[2]; /* [0] the proxy's end, [1] the guest's */
	int ctl[2]; /* [0] the supervisor's end, [1] the daemon's */
	struct supmon mon_sup, mon_d;
	struct egress_mux gm; /* the guest's tracker */
	struct frame_decoder gdec;
	struct buf graw, gpay;
	int lfd;
	struct sockaddr_in laddr;
	int rc; /* the last egress_sup_handle result */
} T;

static int t_send(void *ctx, const struct supmsg *m)
{
	const char *why = NULL;
	(void)ctx;
	return ipc_send_msg(T.ctl[0], &T.mon_sup, SUPMSG_TO_DAEMON, m, NULL, &why);
}

static int setup(void **state)
{
	struct egress_sup_host h = { .send = t_send };
	socklen_t sl = sizeof(T.laddr);
	(void)state;

	memset(&T, 0, sizeof(T));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, T.port), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, T.ctl), 0);
	supmon_init(&T.mon_sup);
	supmon_init(&T.mon_d);
	T.mon_sup.state = T.mon_d.state = SUPMON_UP;
	egress_mux_init(&T.gm, EGRESS_FROM_GUEST);
	assert_int_equal(frame_decoder_init(&T.gdec, EGRESS_MAX_FRAME), 0);
	assert_int_equal(buf_init(&T.graw, (size_t)16 << 20, 0), 0);
	assert_int_equal(buf_init(&T.gpay, EGRESS_MAX_FRAME, 0), 0);
	T.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	T.laddr = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	assert_int_equal(bind(T.lfd, (struct sockaddr *)&T.laddr, sizeof(T.laddr)), 0);
	assert_int_equal(listen(T.lfd, 16), 0);
	assert_int_equal(getsockname(T.lfd, (struct sockaddr *)&T.laddr, &sl), 0);
	assert_int_equal(egress_sup_new(T.port[0], &h, &T.e), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	egress_sup_free(T.e);
	for (int i = 0; i < 2; i++) {
		(void)close(T.port[i]);
		(void)close(T.ctl[i]);
	}
	(void)close(T.lfd);
	frame_decoder_release(&T.gdec);
	buf_release(&T.graw);
	buf_release(&T.gpay);
	return 0;
}

/* One turn of the supervisor's loop for the proxy. */
static int turn(void)
{
	struct pollfd p[EGRESS_SUP_POLL_MAX];
	size_t n = egress_sup_fill(T.e, p, ARRAY_SIZE(p));

	(void)poll(p, n, egress_sup_pending(T.e) ? 0 : 5);
	T.rc = egress_sup_handle(T.e, p, n);
	return T.rc;
}

/* ---- the guest ---- */

static void g_write(const struct buf *b)
{
	size_t off = 0;

	while (off < buf_len(b)) {
		ssize_t n = send(T.port[1], buf_ptr(b) + off, buf_len(b) - off, MSG_DONTWAIT);
		if (n < 0) {
			assert_true(errno == EAGAIN);
			(void)turn();
			continue;
		}
		off += (size_t)n;
	}
}

/* Send one frame through the guest's tracker (it must allow it). */
static void g_frame(const struct egress_frame *f)
{
	struct buf b;
	const char *why = NULL;

	assert_int_equal(buf_init(&b, EGRESS_MAX_FRAME + 16, 0), 0);
	assert_int_equal(egress_mux_apply(&T.gm, EGRESS_FROM_GUEST, f, &why), 0);
	assert_int_equal(egress_encode(f, &b), 0);
	g_write(&b);
	buf_release(&b);
}

static void g_open(uint32_t id)
{
	struct egress_frame f = { .type = EGRESS_OPEN, .id = id };
	g_frame(&f);
}

static void g_data(uint32_t id, const void *p, size_t n)
{
	for (size_t off = 0; off < n;) {
		struct egress_frame f = { .type = EGRESS_DATA, .id = id, .data = (const uint8_t *)p + off };
		f.len = MIN(n - off, EGRESS_MAX_DATA);
		g_frame(&f);
		off += f.len;
	}
}

static void g_str(uint32_t id, const char *s)
{
	g_data(id, s, strlen(s));
}

static void g_simple(uint8_t type, uint32_t id, uint8_t reason)
{
	struct egress_frame f = { .type = type, .id = id, .reason = reason };
	g_frame(&f);
}

/* The next frame but WINDOW the proxy sends the guest (through the guest's tracker); its data in T.gpay. */
static void g_next(struct egress_frame *ret)
{
	const char *why = NULL;

	for (int i = 0; i < TURNS; i++) {
		uint8_t type, rb[65536];
		ssize_t n;
		while (buf_len(&T.graw) > 0) {
			size_t used = 0;
			int r = frame_decoder_feed(&T.gdec, buf_ptr(&T.graw), buf_len(&T.graw), &used);
			assert_true(r >= 0);
			assert_int_equal(buf_consume(&T.graw, used), 0);
			if (r == 1) {
				buf_reset(&T.gpay);
				assert_int_equal(frame_decoder_take(&T.gdec, &type, &T.gpay), 0);
				assert_int_equal(egress_mux_receive(&T.gm, EGRESS_FROM_HOST, type, buf_ptr(&T.gpay),
								    buf_len(&T.gpay), ret, &why),
						 0);
				if (ret->type == EGRESS_WINDOW) {
					continue; /* credit: the guest's tracker holds it */
				}
				return;
			}
		}
		(void)turn();
		n = recv(T.port[1], rb, sizeof(rb), MSG_DONTWAIT);
		if (n > 0) {
			assert_int_equal(buf_put(&T.graw, rb, (size_t)n), 0);
		}
	}
	fail_msg("the proxy sent the guest no frame");
}

static void g_expect(uint8_t type, uint32_t id, struct egress_frame *ret)
{
	struct egress_frame f;

	g_next(&f);
	assert_int_equal(f.type, type);
	assert_int_equal(f.id, id);
	if (ret) {
		*ret = f;
	}
}

/* Read DATA on id until a frame of another type comes; the bytes into out (NUL-terminated). */
static uint8_t g_collect(uint32_t id, char *out, size_t max, size_t *ret_n, struct egress_frame *ret_last)
{
	struct egress_frame f;
	size_t n = 0;

	for (;;) {
		g_next(&f);
		assert_int_equal(f.id, id);
		if (f.type != EGRESS_DATA) {
			break;
		}
		assert_true(n + f.len < max);
		memcpy(out + n, f.data, f.len);
		n += f.len;
	}
	out[n] = '\0';
	if (ret_n) {
		*ret_n = n;
	}
	if (ret_last) {
		*ret_last = f;
	}
	return f.type;
}

/* ---- the daemon ---- */

static void d_recv(struct supmsg *ret, enum supmsg_op op)
{
	struct buf b;
	int fds[IPC_MAX_FDS];
	size_t nfds = 0;
	const char *why = NULL;

	assert_int_equal(buf_init(&b, SUPMSG_MAX + 1, 0), 0);
	for (int i = 0; i < TURNS; i++) {
		struct pollfd p = { .fd = T.ctl[1], .events = POLLIN };
		if (poll(&p, 1, 0) == 1) {
			assert_int_equal(ipc_recv(T.ctl[1], &b, fds, IPC_MAX_FDS, &nfds), 0);
			assert_int_equal(nfds, 0);
			assert_int_equal(supmon_receive(&T.mon_d, buf_ptr(&b), buf_len(&b), ret, &why), 0);
			assert_int_equal(ret->op, op);
			buf_release(&b);
			return;
		}
		(void)turn();
	}
	fail_msg("the proxy told the daemon nothing");
}

/* Nothing from the proxy for the daemon (after some turns). */
static void d_quiet(void)
{
	struct pollfd p = { .fd = T.ctl[1], .events = POLLIN };

	for (int i = 0; i < 10; i++) {
		(void)turn();
	}
	assert_int_equal(poll(&p, 1, 0), 0);
}

/* The daemon answers: the message goes through both monitors and ipc, as in supervisor.c's ctl_message. */
static void d_answer(const struct supmsg *m, int fd)
{
	struct buf b;
	struct supmsg got;
	int fds[IPC_MAX_FDS] = { fd, -1 };
	size_t nfds = 0;
	const char *why = NULL;

	assert_int_equal(ipc_send_msg(T.ctl[1], &T.mon_d, SUPMSG_TO_SUPERVISOR, m, fds, &why), 0);
	if (fd >= 0) {
		(void)close(fd);
	}
	assert_int_equal(buf_init(&b, SUPMSG_MAX + 1, 0), 0);
	assert_int_equal(ipc_recv(T.ctl[0], &b, fds, IPC_MAX_FDS, &nfds), 0);
	assert_int_equal(supmsg_decode(SUPMSG_TO_SUPERVISOR, buf_ptr(&b), buf_len(&b), &got), 0);
	assert_int_equal(supmon_apply(&T.mon_sup, SUPMSG_TO_SUPERVISOR, &got, &why), 0);
	assert_int_equal(nfds, supmsg_fds(&got));
	assert_int_equal(egress_sup_message(T.e, &got, &fds[0]), 0);
	if (nfds > 0) {
		assert_int_equal(fds[0], -1); /* the proxy took the socket */
	}
	supmsg_release(&got);
	buf_release(&b);
}

/* Dial the origin as the daemon would: a connected TCP socket; *ret_origin is the listener's side. */
static int d_dial(int *ret_origin)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&T.laddr, sizeof(T.laddr)), 0);
	*ret_origin = accept4(T.lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(*ret_origin >= 0);
	return fd;
}

static void d_send_dial(int64_t conn, const char *url, bool plain, int *ret_origin)
{
	struct supmsg m = { .op = SUPMSG_EGRESS_DIAL, .conn = conn, .url = (char *)url, .plain = plain };

	d_answer(&m, d_dial(ret_origin));
}

/* ---- the origin ---- */

/* Read from the origin's socket until n bytes or EOF; returns what came. */
static size_t o_read(int fd, uint8_t *out, size_t n, bool *ret_eof)
{
	size_t got = 0;

	*ret_eof = false;
	for (int i = 0; i < TURNS && got < n; i++) {
		ssize_t k = recv(fd, out + got, n - got, MSG_DONTWAIT);
		if (k == 0) {
			*ret_eof = true;
			break;
		}
		if (k > 0) {
			got += (size_t)k;
			continue;
		}
		assert_true(errno == EAGAIN);
		(void)turn();
	}
	return got;
}

/* Nothing reached the origin (after some turns of the proxy). */
static void o_nothing(int fd)
{
	uint8_t b[1];

	for (int i = 0; i < 10; i++) {
		(void)turn();
	}
	assert_int_equal(recv(fd, b, 1, MSG_DONTWAIT), -1);
	assert_int_equal(errno, EAGAIN);
}

static void o_write(int fd, const void *p, size_t n)
{
	assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* ---- the common openings ---- */

/* OPEN id, send the head, and get the daemon's egress_open. */
static int64_t ask(uint32_t id, const char *head, bool connect, const char *host, int64_t port)
{
	struct supmsg m;
	int64_t conn;

	g_open(id);
	g_expect(EGRESS_OPEN_OK, id, NULL);
	g_str(id, head);
	d_recv(&m, SUPMSG_EGRESS_OPEN);
	assert_int_equal(m.form_connect, connect);
	assert_string_equal(m.host, host);
	assert_int_equal(m.port, port);
	conn = m.conn;
	supmsg_release(&m);
	return conn;
}

#define CONNECT_EXAMPLE "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"
#define ESTABLISHED "HTTP/1.1 200 Connection established\r\n\r\n"

/* A CONNECT dialled: the guest has read the 200. */
static int64_t tunnel(uint32_t id, const char *head, const char *host, int64_t port, bool plain, int *ret_origin)
{
	char text[256];
	struct egress_frame f;
	int64_t conn = ask(id, head, true, host, port);

	d_send_dial(conn, "https://example.com:443", plain, ret_origin);
	g_expect(EGRESS_DATA, id, &f);
	assert_int_equal(f.len, strlen(ESTABLISHED));
	memcpy(text, f.data, f.len);
	text[f.len] = '\0';
	assert_string_equal(text, ESTABLISHED);
	return conn;
}

static void expect_done(int64_t conn, int64_t up, int64_t down, const char *rule, const char *error_part)
{
	struct supmsg m;

	d_recv(&m, SUPMSG_EGRESS_DONE);
	assert_int_equal(m.conn, conn);
	if (up >= 0) {
		assert_int_equal(m.bytes_up, up);
	}
	if (down >= 0) {
		assert_int_equal(m.bytes_down, down);
	}
	if (rule) {
		assert_non_null(m.rule);
		assert_string_equal(m.rule, rule);
	} else {
		assert_null(m.rule);
	}
	if (error_part) {
		assert_non_null(m.error);
		assert_non_null(strstr(m.error, error_part));
	} else {
		assert_null(m.error);
	}
	supmsg_release(&m);
}

/* Read exactly n bytes of DATA on id. */
static void g_read(uint32_t id, void *out, size_t n)
{
	struct egress_frame f;
	size_t got = 0;

	while (got < n) {
		g_expect(EGRESS_DATA, id, &f);
		assert_true(got + f.len <= n);
		memcpy((uint8_t *)out + got, f.data, f.len);
		got += f.len;
	}
}

/* ---- the cases ---- */

/* CONNECT allowed, a real ClientHello forwarded only once whole, then bytes both ways, FIN and the end. */
static void test_connect_relay(void **state)
{
	static const char server[] = "SSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSS: not an HRR";
	uint8_t got[sizeof(openssl_ch) + 64];
	size_t half = sizeof(openssl_ch) / 2;
	bool eof;
	int origin;
	int64_t conn = tunnel(1, CONNECT_EXAMPLE, "example.com", 443, false, &origin);
	(void)state;

	g_data(1, openssl_ch, half);
	o_nothing(origin);
	g_data(1, openssl_ch + half, sizeof(openssl_ch) - half);
	assert_int_equal(o_read(origin, got, sizeof(openssl_ch), &eof), sizeof(openssl_ch));
	assert_memory_equal(got, openssl_ch, sizeof(openssl_ch));
	/* The server's first bytes (no HelloRetryRequest) reach the box, then the box's next bytes go. */
	o_write(origin, server, strlen(server));
	g_read(1, got, strlen(server));
	assert_memory_equal(got, server, strlen(server));
	g_str(1, "client finished");
	assert_int_equal(o_read(origin, got, 15, &eof), 15);
	assert_memory_equal(got, "client finished", 15);
	/* FIN each way, then CLOSE 0 and egress_done with the origin's bytes each way. */
	g_simple(EGRESS_FIN, 1, 0);
	assert_int_equal(o_read(origin, got, 1, &eof), 0);
	assert_true(eof);
	(void)close(origin);
	g_expect(EGRESS_FIN, 1, NULL);
	g_expect(EGRESS_CLOSE, 1, NULL);
	expect_done(conn, (int64_t)sizeof(openssl_ch) + 15, (int64_t)strlen(server), NULL, NULL);
	g_simple(EGRESS_CLOSE, 1, EGRESS_CLOSE_DONE);
	d_quiet();
	assert_int_equal(T.rc, 0);
}

/* The ClientHello names another host than the CONNECT: refused, nothing reaches the origin. */
static void test_sni_mismatch(void **state)
{
	struct egress_frame f;
	uint8_t b[16];
	bool eof;
	int origin;
	int64_t conn = tunnel(3, "CONNECT other.example:443 HTTP/1.1\r\nHost: other.example:443\r\n\r\n",
			      "other.example", 443, false, &origin);
	(void)state;

	g_data(3, openssl_ch, sizeof(openssl_ch));
	g_expect(EGRESS_CLOSE, 3, &f);
	assert_int_equal(f.reason, EGRESS_CLOSE_REFUSED);
	expect_done(conn, 0, 0, "sni-mismatch", "server name");
	assert_int_equal(o_read(origin, b, sizeof(b), &eof), 0);
	assert_true(eof);
	(void)close(origin);
}

/* A ClientHello split into 1-byte DATA frames: nothing goes before its last byte, then all of it. */
static void test_split_hello(void **state)
{
	uint8_t got[sizeof(openssl_ch)];
	bool eof;
	int origin;
	(void)tunnel(5, CONNECT_EXAMPLE, "example.com", 443, false, &origin);
	(void)state;

	for (size_t i = 0; i + 1 < sizeof(openssl_ch); i++) {
		g_data(5, openssl_ch + i, 1);
	}
	o_nothing(origin);
	g_data(5, openssl_ch + sizeof(openssl_ch) - 1, 1);
	assert_int_equal(o_read(origin, got, sizeof(got), &eof), sizeof(got));
	assert_memory_equal(got, openssl_ch, sizeof(got));
	(void)close(origin);
}

/* A HelloRetryRequest's first bytes: a ServerHello whose random is RFC 8446's HRR value. */
static const uint8_t hrr[] = { 0x16, 0x03, 0x03, 0x00, 0x2d, 0x02, 0x00, 0x00, 0x29, 0x03, 0x03, 0xcf, 0x21,
			       0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8,
			       0x91, 0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2,
			       0xc8, 0xa8, 0x33, 0x9c, 0x00, 0x13, 0x01, 0x00, 0x00, 0x01, 0x00 };
static const uint8_t ccs[] = { 0x14, 0x03, 0x03, 0x00, 0x01, 0x01 };

/* CONNECT, the first ClientHello through, the server's HRR back to the box. */
static int64_t hrr_open(uint32_t id, int *ret_origin)
{
	uint8_t got[sizeof(openssl_ch)];
	bool eof;
	int64_t conn = tunnel(id, CONNECT_EXAMPLE, "example.com", 443, false, ret_origin);

	g_data(id, openssl_ch, sizeof(openssl_ch));
	assert_int_equal(o_read(*ret_origin, got, sizeof(got), &eof), sizeof(got));
	o_write(*ret_origin, hrr, sizeof(hrr));
	g_read(id, got, sizeof(hrr));
	assert_memory_equal(got, hrr, sizeof(hrr));
	return conn;
}

/* After a HelloRetryRequest the second ClientHello is read whole and checked: a changed SNI is refused. */
static void test_hrr(void **state)
{
	uint8_t ch2[sizeof(openssl_ch)], got[sizeof(ccs) + sizeof(openssl_ch)];
	uint8_t *name = memmem(openssl_ch, sizeof(openssl_ch), "Example.COM", 11);
	struct egress_frame f;
	bool eof;
	int origin;
	int64_t conn = hrr_open(31, &origin);
	(void)state;

	assert_non_null(name);
	memcpy(ch2, openssl_ch, sizeof(ch2));
	memcpy(ch2 + (name - openssl_ch), "example.ORG", 11);
	g_data(31, ccs, sizeof(ccs));
	g_data(31, ch2, sizeof(ch2));
	g_expect(EGRESS_CLOSE, 31, &f);
	assert_int_equal(f.reason, EGRESS_CLOSE_REFUSED);
	expect_done(conn, (int64_t)sizeof(openssl_ch), (int64_t)sizeof(hrr), "hrr-sni-changed", "HelloRetryRequest");
	assert_int_equal(o_read(origin, got, sizeof(got), &eof), 0); /* not even the ChangeCipherSpec */
	assert_true(eof);
	(void)close(origin);

	/* The same name again: the ChangeCipherSpec and the second ClientHello go, in one piece. */
	(void)hrr_open(32, &origin);
	g_data(32, ccs, sizeof(ccs));
	o_nothing(origin);
	g_data(32, openssl_ch, sizeof(openssl_ch));
	assert_int_equal(o_read(origin, got, sizeof(got), &eof), sizeof(got));
	assert_memory_equal(got, ccs, sizeof(ccs));
	assert_memory_equal(got + sizeof(ccs), openssl_ch, sizeof(openssl_ch));
	(void)close(origin);
}

/* Not TLS: refused without plain (no allow entry names the port), relayed with it. */
static void test_not_tls(void **state)
{
	static const char ssh[] = "SSH-2.0-OpenSSH_9.2\r\n";
	struct egress_frame f;
	uint8_t got[64];
	bool eof;
	int origin;
	int64_t conn = tunnel(7, "CONNECT example.com:22 HTTP/1.1\r\nHost: example.com:22\r\n\r\n", "example.com", 22,
			      false, &origin);
	(void)state;

	g_str(7, ssh);
	g_expect(EGRESS_CLOSE, 7, &f);
	assert_int_equal(f.reason, EGRESS_CLOSE_REFUSED);
	expect_done(conn, 0, 0, "not-tls", "--allow example.com:22");
	assert_int_equal(o_read(origin, got, sizeof(got), &eof), 0);
	assert_true(eof);
	(void)close(origin);
	g_simple(EGRESS_CLOSE, 7, EGRESS_CLOSE_DONE);

	conn = tunnel(8, "CONNECT example.com:22 HTTP/1.1\r\nHost: example.com:22\r\n\r\n", "example.com", 22, true,
		      &origin);
	g_str(8, ssh);
	assert_int_equal(o_read(origin, got, strlen(ssh), &eof), strlen(ssh));
	assert_memory_equal(got, ssh, strlen(ssh));
	o_write(origin, ssh, strlen(ssh));
	g_read(8, got, strlen(ssh));
	assert_memory_equal(got, ssh, strlen(ssh));
	(void)close(origin);
	(void)conn;
}

/* Absolute form goes in origin form: the proxy's headers dropped, Connection: close; the answer comes back. */
static void test_absolute_rewrite(void **state)
{
	static const char want[] = "POST /x/y?z=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n"
				   "Content-Length: 4\r\nConnection: close\r\n\r\nbody";
	static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
	char got[512];
	bool eof;
	int origin;
	int64_t conn = ask(9,
			   "POST http://Example.com/x/y?z=1 HTTP/1.1\r\nHost: example.com\r\nProxy-Connection: "
			   "keep-alive\r\nAccept: */*\r\nProxy-Authorization: Basic eDp5\r\nConnection: keep-alive\r\n"
			   "Content-Length: 4\r\n\r\nbody",
			   false, "example.com", 80);
	(void)state;

	d_send_dial(conn, "http://example.com:80", false, &origin);
	assert_int_equal(o_read(origin, (uint8_t *)got, strlen(want), &eof), strlen(want));
	got[strlen(want)] = '\0';
	assert_string_equal(got, want);
	o_nothing(origin); /* exactly that, nothing more */
	o_write(origin, answer, strlen(answer));
	(void)close(origin);
	g_read(9, got, strlen(answer));
	assert_memory_equal(got, answer, strlen(answer));
	g_expect(EGRESS_FIN, 9, NULL);
	g_simple(EGRESS_CLOSE, 9, EGRESS_CLOSE_DONE);
	expect_done(conn, (int64_t)strlen(want), (int64_t)strlen(answer), NULL, NULL);
}

/* The proxy refuses a bad head itself: the response, CLOSE 2, egress_refused to the daemon, no egress_open. */
static void refused_by_proxy(uint32_t id, const char *head, const char *status_line, const char *rule, const char *host,
			     int64_t port)
{
	char text[4096];
	struct egress_frame f;
	struct supmsg m;

	g_open(id);
	g_expect(EGRESS_OPEN_OK, id, NULL);
	g_str(id, head);
	assert_int_equal(g_collect(id, text, sizeof(text), NULL, &f), EGRESS_CLOSE);
	assert_int_equal(f.reason, EGRESS_CLOSE_REFUSED);
	assert_true(strncmp(text, status_line, strlen(status_line)) == 0);
	assert_non_null(strstr(text, "Tkbox-Rule: "));
	assert_non_null(strstr(text, rule));
	assert_non_null(strstr(text, "\r\n\r\ntkbox egress: "));
	d_recv(&m, SUPMSG_EGRESS_REFUSED);
	assert_string_equal(m.rule, rule);
	if (host) {
		/* The target the rule refused, for tkbox.egress. */
		assert_non_null(m.host);
		assert_string_equal(m.host, host);
		assert_int_equal(m.port, port);
	} else {
		assert_null(m.host);
	}
	supmsg_release(&m);
	g_simple(EGRESS_CLOSE, id, EGRESS_CLOSE_DONE);
}

static void test_proxy_refusals(void **state)
{
	(void)state;
	refused_by_proxy(11,
			 "POST http://example.com/ HTTP/1.1\r\nHost: example.com\r\nContent-Length: 4\r\n"
			 "Transfer-Encoding: chunked\r\n\r\n",
			 "HTTP/1.1 400 Bad Request\r\n", "malformed-request", NULL, 0);
	refused_by_proxy(12, "CONNECT example.com:80 HTTP/1.1\r\nHost: example.com:80\r\n\r\n",
			 "HTTP/1.1 403 Forbidden\r\n", "connect-port-80", "example.com", 80);
	refused_by_proxy(13, "GET http://example.com:8080/ HTTP/1.1\r\nHost: other.example\r\n\r\n",
			 "HTTP/1.1 403 Forbidden\r\n", "host-mismatch", "example.com", 8080);
	d_quiet(); /* no egress_open for any of them */
}

/* The daemon's egress_refuse: a 403 with Tkbox-Rule and Tkbox-Approval, the message as the body, CLOSE 2. */
static void test_daemon_refuse(void **state)
{
	static const char msg[] = "tkbox egress: example.com:443 refused: not on the box's allowlist. A person on the "
				  "host can approve it with `tkbox approve k3x9` (see `tkbox approvals`)";
	struct supmsg m = {
		.op = SUPMSG_EGRESS_REFUSE, .status = 403, .rule = "not-allowlisted", .message = (char *)msg
	};
	char text[4096], want[1024];
	struct egress_frame f;
	(void)state;

	m.conn = ask(15, CONNECT_EXAMPLE, true, "example.com", 443);
	d_answer(&m, -1);
	assert_int_equal(g_collect(15, text, sizeof(text), NULL, &f), EGRESS_CLOSE);
	assert_int_equal(f.reason, EGRESS_CLOSE_REFUSED);
	(void)snprintf(want, sizeof(want),
		       "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
		       "Tkbox-Rule: not-allowlisted\r\nTkbox-Approval: k3x9\r\nContent-Length: %zu\r\n\r\n%s\n",
		       strlen(msg) + 1, msg);
	assert_string_equal(text, want);
}

/* A guest that sends past its credit (here: before the daemon answered, nothing was granted) breaks the mux. */
static void test_credit_violation(void **state)
{
	static uint8_t big[EGRESS_MAX_DATA];
	struct buf b;
	size_t left = EGRESS_INITIAL_WINDOW - strlen(CONNECT_EXAMPLE);
	int r = 0;
	(void)state;

	(void)ask(17, CONNECT_EXAMPLE, true, "example.com", 443);
	memset(big, 0x16, sizeof(big));
	while (left > 0) {
		size_t n = MIN(left, sizeof(big));
		g_data(17, big, n); /* within the credit: the guest's tracker allows it */
		left -= n;
	}
	/* One byte more, past the guest's own tracker (a broken or hostile guest). */
	assert_int_equal(buf_init(&b, 64, 0), 0);
	assert_int_equal(egress_encode_data(&b, 17, "x", 1), 0);
	g_write(&b);
	buf_release(&b);
	for (int i = 0; i < TURNS && r == 0; i++) {
		r = turn();
	}
	assert_int_equal(r, -EPROTO);
	assert_non_null(egress_sup_violation(T.e));
	assert_non_null(strstr(egress_sup_violation(T.e), "credit"));
}

/* A stop cuts open tunnels (CLOSE 3, egress_done), refuses new OPENs, and answers a refuse still due. */
static void test_stop(void **state)
{
	struct supmsg m = { .op = SUPMSG_EGRESS_REFUSE, .status = 503, .rule = "box-stopping", .message = "stopping" };
	struct egress_frame f;
	uint8_t got[sizeof(openssl_ch)];
	bool eof;
	int origin;
	int64_t conn = tunnel(21, CONNECT_EXAMPLE, "example.com", 443, false, &origin), asked;
	(void)state;

	g_data(21, openssl_ch, sizeof(openssl_ch));
	assert_int_equal(o_read(origin, got, sizeof(got), &eof), sizeof(got));
	asked = ask(22, CONNECT_EXAMPLE, true, "example.com", 443);
	egress_sup_stop(T.e);
	T.mon_sup.state = T.mon_d.state = SUPMON_STOPPING; /* the daemon sent stop */
	g_expect(EGRESS_CLOSE, 21, &f);
	assert_int_equal(f.reason, EGRESS_CLOSE_STOPPING);
	g_expect(EGRESS_CLOSE, 22, &f);
	assert_int_equal(f.reason, EGRESS_CLOSE_STOPPING);
	expect_done(conn, (int64_t)sizeof(openssl_ch), 0, NULL, "the box is stopping");
	assert_int_equal(o_read(origin, got, sizeof(got), &eof), 0);
	assert_true(eof);
	(void)close(origin);
	g_open(23);
	egress_sup_drain(T.e);
	g_expect(EGRESS_OPEN_REFUSED, 23, &f);
	assert_memory_equal(f.data, EGRESS_SUP_STOPPING, strlen(EGRESS_SUP_STOPPING));
	m.conn = asked;
	d_answer(&m, -1);
	d_quiet();
}

/* The guest closes a stream before the daemon answered: the dial that follows is closed and reported at once. */
static void test_closed_before_dial(void **state)
{
	int origin;
	bool eof;
	uint8_t b[4];
	int64_t conn = ask(25, CONNECT_EXAMPLE, true, "example.com", 443);
	(void)state;

	g_simple(EGRESS_CLOSE, 25, EGRESS_CLOSE_RESET);
	g_expect(EGRESS_CLOSE, 25, NULL);
	d_send_dial(conn, "https://example.com:443", false, &origin);
	expect_done(conn, 0, 0, NULL, "before it was dialled");
	assert_int_equal(o_read(origin, b, sizeof(b), &eof), 0);
	assert_true(eof);
	(void)close(origin);
}

/*
 * 256 conns the daemon still decides on whose streams the box closed: the next OPEN is refused by the proxy
 * (conn-cap, told to the daemon) instead of a 257th egress_open the daemon's monitor would refuse.
 */
static void test_conn_cap(void **state)
{
	struct supmsg m;
	struct egress_frame f;
	(void)state;

	for (uint32_t id = 1; id <= EGRESS_SUP_SLOTS; id++) {
		(void)ask(id, CONNECT_EXAMPLE, true, "example.com", 443);
		g_simple(EGRESS_CLOSE, id, EGRESS_CLOSE_RESET);
		g_expect(EGRESS_CLOSE, id, NULL);
	}
	assert_int_equal(T.mon_d.nc, SUPMON_MAX_CONNS);
	g_open(1000);
	g_expect(EGRESS_OPEN_REFUSED, 1000, &f);
	assert_non_null(memmem(f.data, f.len, "256 connections", 15));
	d_recv(&m, SUPMSG_EGRESS_REFUSED);
	assert_string_equal(m.rule, "conn-cap");
	supmsg_release(&m);
	/* The daemon answers one: its slot is free again. */
	m = (struct supmsg){ .op = SUPMSG_EGRESS_REFUSE, .conn = 1, .status = 403, .rule = "r", .message = "m" };
	d_answer(&m, -1);
	(void)ask(1001, CONNECT_EXAMPLE, true, "example.com", 443);
	assert_int_equal(T.rc, 0);
}

/* An absolute-form request dialled: the origin reads exactly want (the rewritten head and the body), no more. */
static int64_t absolute(uint32_t id, const char *sent, const char *want, int *ret_origin)
{
	char got[4096];
	bool eof;
	int64_t conn = ask(id, sent, false, "example.com", 80);

	d_send_dial(conn, "http://example.com:80", false, ret_origin);
	assert_int_equal(o_read(*ret_origin, (uint8_t *)got, strlen(want), &eof), strlen(want));
	got[strlen(want)] = '\0';
	assert_string_equal(got, want);
	o_nothing(*ret_origin);
	return conn;
}

/* The origin answers and closes; the box reads it all, then FIN; the conn ends with up bytes to the origin. */
static void absolute_end(uint32_t id, int64_t conn, int origin, int64_t up)
{
	static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
	char got[256];

	o_write(origin, answer, strlen(answer));
	(void)close(origin);
	g_read(id, got, strlen(answer));
	assert_memory_equal(got, answer, strlen(answer));
	g_expect(EGRESS_FIN, id, NULL);
	g_simple(EGRESS_CLOSE, id, EGRESS_CLOSE_DONE);
	g_expect(EGRESS_CLOSE, id, NULL); /* the proxy's answer: the id is free */
	expect_done(conn, up, (int64_t)strlen(answer), NULL, NULL);
}

#define EVIL "GET http://evil.example/steal HTTP/1.1\r\nHost: evil.example\r\n\r\n"

/*
 * A second request pipelined behind the first (another Host, another target)
 * never reaches the decided origin: after a Content-Length body, and after a
 * chunked one; neither in the first DATA nor later.
 */
static void test_pipelined(void **state)
{
	static const char cl_want[] = "POST /p HTTP/1.1\r\nHost: example.com\r\nContent-Length: 4\r\n"
				      "Connection: close\r\n\r\nbody";
	static const char ch_want[] = "POST /c HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n"
				      "Connection: close\r\n\r\n4\r\nWiki\r\n0\r\n\r\n";
	static const char get_want[] = "GET /g HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n";
	int origin;
	int64_t conn;
	(void)state;

	conn = absolute(41,
			"POST http://example.com/p HTTP/1.1\r\nHost: example.com\r\nContent-Length: 4\r\n\r\nbody" EVIL,
			cl_want, &origin);
	g_str(41, EVIL);
	o_nothing(origin);
	absolute_end(41, conn, origin, (int64_t)strlen(cl_want));

	conn = absolute(42,
			"POST http://example.com/c HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n"
			"4\r\nWiki\r\n0\r\n\r\n" EVIL,
			ch_want, &origin);
	g_str(42, EVIL);
	o_nothing(origin);
	absolute_end(42, conn, origin, (int64_t)strlen(ch_want));

	/* No body at all: nothing after the head goes. */
	conn = absolute(43, "GET http://example.com/g HTTP/1.1\r\nHost: example.com\r\n\r\n" EVIL, get_want, &origin);
	absolute_end(43, conn, origin, (int64_t)strlen(get_want));
}

/* A chunked body in pieces (extensions, a trailer) goes exactly, whatever the DATA split; nothing after it. */
static void test_chunked_exact(void **state)
{
	static const char head[] = "PUT /u HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n"
				   "Connection: close\r\n\r\n";
	static const char body[] = "7;a=\"b;c\"\r\nchunk 1\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0 ;end\r\n"
				   "X-Sum: 42\r\n\r\n";
	char want[512], got[512];
	bool eof;
	int origin;
	int64_t conn =
		absolute(45,
			 "PUT http://example.com/u HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n"
			 "\r\n",
			 head, &origin);
	(void)state;

	for (size_t i = 0; i < strlen(body); i += 3) {
		g_data(45, body + i, MIN((size_t)3, strlen(body) - i));
	}
	g_str(45, EVIL);
	assert_int_equal(o_read(origin, (uint8_t *)got, strlen(body), &eof), strlen(body));
	assert_memory_equal(got, body, strlen(body));
	o_nothing(origin);
	(void)snprintf(want, sizeof(want), "%s%s", head, body);
	absolute_end(45, conn, origin, (int64_t)strlen(want));
}

/* A malformed chunk framing ends the stream: CLOSE 1, egress_done with the error; nothing after it goes. */
static void test_chunked_malformed(void **state)
{
	static const char head[] = "POST /m HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n"
				   "Connection: close\r\n\r\n4\r\nWiki";
	struct egress_frame f;
	char got[512];
	bool eof;
	int origin;
	int64_t conn =
		absolute(47,
			 "POST http://example.com/m HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n"
			 "\r\n4\r\nWiki",
			 head, &origin);
	(void)state;

	g_str(47, "X\r\n0\r\n\r\n" EVIL); /* data longer than its size: no CRLF after it */
	g_expect(EGRESS_CLOSE, 47, &f);
	assert_int_equal(f.reason, EGRESS_CLOSE_RESET);
	expect_done(conn, (int64_t)strlen(head), 0, "malformed-request", "chunked");
	assert_int_equal(o_read(origin, (uint8_t *)got, sizeof(got), &eof), 0);
	assert_true(eof);
	(void)close(origin);
}

/* Hop-by-hop headers never reach the origin: Upgrade, Keep-Alive, TE, Trailer, any the Connection header names. */
static void test_hop_headers(void **state)
{
	static const char want[] = "POST /h HTTP/1.1\r\nHost: example.com\r\nX-Other: 2\r\nContent-Length: 2\r\n"
				   "Connection: close\r\n\r\nhi";
	int origin;
	int64_t conn =
		absolute(49,
			 "POST http://example.com/h HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive, "
			 "X-Secret ,content-length, Upgrade\r\nUpgrade: websocket\r\nKeep-Alive: timeout=5\r\nTE: "
			 "trailers\r\nTrailer: X-Sum\r\nX-Secret: 1\r\nX-Other: 2\r\nContent-Length: 2\r\n"
			 "Connection: x-more\r\nX-More: 3\r\n\r\nhi",
			 want, &origin);
	(void)state;

	absolute_end(49, conn, origin, (int64_t)strlen(want));
}

/* A server whose HelloRetryRequest comes split across records: the tunnel ends (tls-malformed), nothing goes on. */
static void test_hrr_split(void **state)
{
	uint8_t got[sizeof(openssl_ch)], split[sizeof(hrr) + 5];
	struct egress_frame f;
	bool eof;
	int origin;
	int64_t conn = tunnel(51, CONNECT_EXAMPLE, "example.com", 443, false, &origin);
	(void)state;

	g_data(51, openssl_ch, sizeof(openssl_ch));
	assert_int_equal(o_read(origin, got, sizeof(got), &eof), sizeof(got));
	/* The same HRR as two records: 10 handshake bytes, then the rest. */
	memcpy(split, hrr, 5 + 10);
	split[3] = 0;
	split[4] = 10;
	memcpy(split + 15, hrr, 5);
	split[18] = 0;
	split[19] = (uint8_t)(sizeof(hrr) - 15);
	memcpy(split + 20, hrr + 15, sizeof(hrr) - 15);
	o_write(origin, split, sizeof(split));
	g_expect(EGRESS_CLOSE, 51, &f); /* not one byte of the server's reached the box */
	assert_int_equal(f.reason, EGRESS_CLOSE_REFUSED);
	expect_done(conn, (int64_t)sizeof(openssl_ch), 0, "tls-malformed", "ServerHello");
	(void)close(origin);
}

/*
 * A flood of bad requests: EGRESS_SUP_REFUSED_PER_S egress_refused, then one
 * summary (rule suppressed) counting the rest; the daemon is not flooded.
 */
static void test_refusal_flood(void **state)
{
	enum { N = 25 };
	static const char bad[] = "GET /origin-form HTTP/1.1\r\nHost: example.com\r\n\r\n";
	struct supmsg m;
	char want[64];
	(void)state;

	for (uint32_t id = 1; id <= N; id++) {
		g_open(id);
	}
	for (uint32_t id = 1; id <= N; id++) {
		g_expect(EGRESS_OPEN_OK, id, NULL);
	}
	for (uint32_t id = 1; id <= N; id++) {
		g_str(id, bad); /* written before the proxy's next turn: handled in one */
	}
	for (int i = 0; i < EGRESS_SUP_REFUSED_PER_S; i++) {
		d_recv(&m, SUPMSG_EGRESS_REFUSED);
		assert_string_equal(m.rule, "malformed-request");
		supmsg_release(&m);
	}
	d_recv(&m, SUPMSG_EGRESS_REFUSED); /* once the second is over */
	assert_string_equal(m.rule, "suppressed");
	(void)snprintf(want, sizeof(want), "%d more refusals by the proxy", N - EGRESS_SUP_REFUSED_PER_S);
	assert_non_null(strstr(m.message, want));
	assert_non_null(strstr(m.message, "(rule malformed-request)"));
	supmsg_release(&m);
	d_quiet();
}

/*
 * A server that speaks first and closes (an SMTP/SSH banner) in a plain tunnel, the client silent: the box gets
 * the bytes, then FIN, and the conn ends once the box ends its side. The head is python's HTTP/1.0 CONNECT
 * without Host. Then a TLS tunnel (no plain) whose server closes before the ClientHello: it ends at once.
 */
static void test_server_first_eof(void **state)
{
	static const char banner[] = "220 mail.example ESMTP ready\r\n";
	struct egress_frame f;
	char got[64];
	int origin;
	int64_t conn = tunnel(1, "CONNECT example.com:25 HTTP/1.0\r\n\r\n", "example.com", 25, true, &origin);
	(void)state;

	o_write(origin, banner, strlen(banner));
	(void)close(origin);
	g_read(1, got, strlen(banner));
	assert_memory_equal(got, banner, strlen(banner));
	g_expect(EGRESS_FIN, 1, NULL); /* without a byte from the box */
	g_simple(EGRESS_FIN, 1, 0); /* the client read the end and closed */
	g_expect(EGRESS_CLOSE, 1, &f);
	assert_int_equal(f.reason, EGRESS_CLOSE_DONE);
	expect_done(conn, 0, (int64_t)strlen(banner), NULL, NULL);
	g_simple(EGRESS_CLOSE, 1, EGRESS_CLOSE_DONE);

	conn = tunnel(2, CONNECT_EXAMPLE, "example.com", 443, false, &origin);
	(void)close(origin);
	g_expect(EGRESS_CLOSE, 2, &f);
	assert_int_equal(f.reason, EGRESS_CLOSE_DONE);
	expect_done(conn, 0, 0, NULL, "closed the connection before the box's TLS ClientHello");
	g_simple(EGRESS_CLOSE, 2, EGRESS_CLOSE_DONE);

	/* A TLS tunnel the box ends without sending a byte (a probe): nothing crossed, a clean end, no rule. */
	conn = tunnel(3, CONNECT_EXAMPLE, "example.com", 443, false, &origin);
	g_simple(EGRESS_FIN, 3, 0);
	g_expect(EGRESS_CLOSE, 3, &f);
	assert_int_equal(f.reason, EGRESS_CLOSE_DONE);
	expect_done(conn, 0, 0, NULL, NULL);
	(void)close(origin);
	g_simple(EGRESS_CLOSE, 3, EGRESS_CLOSE_DONE);
	d_quiet();
	assert_int_equal(T.rc, 0);
}

/*
 * The guest's forwarder refuses the 257th connection itself, so the host records the cap: one egress_refused
 * (stream-limit) when the 256th stream opens, none while it stays there, one more when it is reached again.
 */
static void test_stream_limit(void **state)
{
	struct supmsg m;
	(void)state;

	for (uint32_t id = 1; id < EGRESS_MAX_STREAMS; id++) {
		g_open(id);
		g_expect(EGRESS_OPEN_OK, id, NULL);
	}
	d_quiet(); /* 255 open: nothing to record */
	g_open(EGRESS_MAX_STREAMS);
	g_expect(EGRESS_OPEN_OK, EGRESS_MAX_STREAMS, NULL);
	d_recv(&m, SUPMSG_EGRESS_REFUSED);
	assert_string_equal(m.rule, "stream-limit");
	assert_non_null(strstr(m.message, "256 connections open (EGRESS_MAX_STREAMS)"));
	assert_null(m.host);
	supmsg_release(&m);
	g_str(7, "GET http://example.com/ HTTP/1.1\r\nHost: exa"); /* frames at the cap: not told again */
	d_quiet();
	g_simple(EGRESS_CLOSE, 3, EGRESS_CLOSE_RESET);
	g_expect(EGRESS_CLOSE, 3, NULL);
	g_open(1000); /* the cap is reached again */
	g_expect(EGRESS_OPEN_OK, 1000, NULL);
	d_recv(&m, SUPMSG_EGRESS_REFUSED);
	assert_string_equal(m.rule, "stream-limit");
	supmsg_release(&m);
	d_quiet();
	assert_int_equal(T.rc, 0);
}

/*
 * A stream that ends before any byte requested nothing: CLOSE, no response, nothing recorded. One that ends
 * inside its head is refused: 400, rule incomplete-request, told to the daemon.
 */
static void test_empty_stream(void **state)
{
	struct egress_frame f;
	struct supmsg m;
	char got[1024];
	(void)state;

	for (uint32_t id = 1; id <= 3; id++) {
		g_open(id);
		g_expect(EGRESS_OPEN_OK, id, NULL);
		g_simple(EGRESS_FIN, id, 0);
		g_expect(EGRESS_CLOSE, id, &f); /* no DATA (no 400) before it */
		assert_int_equal(f.reason, EGRESS_CLOSE_DONE);
		g_simple(EGRESS_CLOSE, id, EGRESS_CLOSE_DONE);
	}
	d_quiet();
	g_open(4);
	g_expect(EGRESS_OPEN_OK, 4, NULL);
	g_str(4, "CONNECT example.com:443 HTTP/1.1\r\nHost: exa");
	g_simple(EGRESS_FIN, 4, 0);
	assert_int_equal(g_collect(4, got, sizeof(got), NULL, &f), EGRESS_CLOSE);
	assert_int_equal(f.reason, EGRESS_CLOSE_REFUSED);
	assert_non_null(strstr(got, "HTTP/1.1 400 Bad Request\r\n"));
	assert_non_null(strstr(got, "Tkbox-Rule: incomplete-request\r\n"));
	d_recv(&m, SUPMSG_EGRESS_REFUSED);
	assert_string_equal(m.rule, "incomplete-request");
	supmsg_release(&m);
	d_quiet();
}

/* ---- issue 13: inspected tunnels, secrets, the self-test host ---- */

#define GH_VALUE "ghp_R3alTokenValue0123456789abcdef"
#define GH_PLACEHOLDER "tkbox_GH_0123456789abcdef0123456789abcdef"

/* The TLS ends the test plays: the box's client (trusting the box's CA) and the origin's server (a second CA). */
static struct {
	char dir[64], box_ca[96], origin_ca[96];
	struct egress_ca *origin; /* the origin's own CA (the supervisor trusts it through upstream_ca) */
	SSL_CTX *guest_ctx; /* the box's client context: the box's CA */
	struct egress_tls *g, *o; /* the box's client, the origin's server */
	struct buf gplain, oplain, tmp;
	bool g_fin, g_closed, o_eof;
	uint8_t g_close_reason;
	uint32_t gid;
	int ofd;
} X;

static void write_pem(const char *path, const char *pem)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fputs(pem, f) >= 0, true);
	assert_int_equal(fclose(f), 0);
}

/* The box's CA given to the proxy, and the supervisor's client context trusting a second CA (the origin's). */
static int setup_tls(void **state)
{
	static const char *const permitted[] = { "example.com", EGRESS_SELFTEST_HOST };
	struct egress_ca *ca = NULL;
	SSL_CTX *client = NULL;
	char *pem = NULL;

	setup(state);
	memset(&X, 0, sizeof(X));
	X.ofd = -1;
	(void)snprintf(X.dir, sizeof(X.dir), "/tmp/tkbox-egress-sup-XXXXXX");
	assert_non_null(mkdtemp(X.dir));
	(void)snprintf(X.box_ca, sizeof(X.box_ca), "%s/box-ca.pem", X.dir);
	(void)snprintf(X.origin_ca, sizeof(X.origin_ca), "%s/origin-ca.pem", X.dir);
	assert_int_equal(egress_ca_new("box1", permitted, ARRAY_SIZE(permitted), 3600, &ca), 0);
	assert_int_equal(egress_ca_cert_pem(ca, &pem), 0);
	write_pem(X.box_ca, pem);
	free(pem);
	assert_int_equal(egress_ca_new("origin", permitted, 1, 3600, &X.origin), 0);
	assert_int_equal(egress_ca_cert_pem(X.origin, &pem), 0);
	write_pem(X.origin_ca, pem);
	free(pem);
	assert_int_equal(egress_tls_client_ctx(X.origin_ca, &client), 0);
	assert_int_equal(egress_tls_client_ctx(X.box_ca, &X.guest_ctx), 0);
	egress_sup_tls(T.e, ca, client);
	assert_int_equal(buf_init(&X.gplain, (size_t)1 << 20, 0), 0);
	assert_int_equal(buf_init(&X.oplain, (size_t)1 << 20, 0), 0);
	assert_int_equal(buf_init(&X.tmp, (size_t)1 << 20, 0), 0);
	return 0;
}

static int teardown_tls(void **state)
{
	egress_tls_free(X.g);
	egress_tls_free(X.o);
	SSL_CTX_free(X.guest_ctx);
	egress_ca_free(X.origin);
	buf_release(&X.gplain);
	buf_release(&X.oplain);
	buf_release(&X.tmp);
	if (X.ofd >= 0) {
		(void)close(X.ofd);
	}
	(void)unlink(X.box_ca);
	(void)unlink(X.origin_ca);
	(void)rmdir(X.dir);
	return teardown(state);
}

/* One frame for the guest if one is there (no waiting); WINDOW is taken by the guest's tracker. */
static bool g_poll(struct egress_frame *ret)
{
	const char *why = NULL;
	uint8_t rb[65536];
	ssize_t n;

	for (;;) {
		while (buf_len(&T.graw) > 0) {
			size_t used = 0;
			uint8_t type;
			int r = frame_decoder_feed(&T.gdec, buf_ptr(&T.graw), buf_len(&T.graw), &used);
			assert_true(r >= 0);
			assert_int_equal(buf_consume(&T.graw, used), 0);
			if (r == 1) {
				buf_reset(&T.gpay);
				assert_int_equal(frame_decoder_take(&T.gdec, &type, &T.gpay), 0);
				assert_int_equal(egress_mux_receive(&T.gm, EGRESS_FROM_HOST, type, buf_ptr(&T.gpay),
								    buf_len(&T.gpay), ret, &why),
						 0);
				if (ret->type != EGRESS_WINDOW) {
					return true;
				}
			}
		}
		n = recv(T.port[1], rb, sizeof(rb), MSG_DONTWAIT);
		if (n <= 0) {
			return false;
		}
		assert_int_equal(buf_put(&T.graw, rb, (size_t)n), 0);
	}
}

/* One step of the world: the proxy's turn, the box's TLS client over the stream, the origin's TLS server. */
static void step(void)
{
	struct egress_frame f;
	uint8_t rb[65536];
	ssize_t n;

	(void)turn();
	if (X.g) {
		buf_reset(&X.tmp);
		assert_true(egress_tls_take(X.g, &X.tmp) >= 0);
		if (buf_len(&X.tmp) > 0 && !X.g_closed) {
			g_data(X.gid, buf_ptr(&X.tmp), buf_len(&X.tmp));
		}
	}
	while (g_poll(&f)) {
		assert_int_equal(f.id, X.gid);
		if (f.type == EGRESS_DATA && X.g) {
			assert_int_equal(egress_tls_put(X.g, f.data, f.len), 0);
		} else if (f.type == EGRESS_DATA) {
			assert_int_equal(buf_put(&X.gplain, f.data, f.len), 0); /* before the TLS client exists */
		} else if (f.type == EGRESS_FIN) {
			X.g_fin = true;
			if (X.g) {
				egress_tls_eof(X.g);
			}
		} else if (f.type == EGRESS_CLOSE) {
			X.g_closed = true;
			X.g_close_reason = f.reason;
		}
	}
	if (X.g) {
		(void)egress_tls_read(X.g, &X.gplain, buf_avail(&X.gplain));
	}
	if (X.o && X.ofd >= 0) {
		buf_reset(&X.tmp);
		assert_true(egress_tls_take(X.o, &X.tmp) >= 0);
		if (buf_len(&X.tmp) > 0) {
			o_write(X.ofd, buf_ptr(&X.tmp), buf_len(&X.tmp));
		}
		while ((n = recv(X.ofd, rb, sizeof(rb), MSG_DONTWAIT)) > 0) {
			assert_int_equal(egress_tls_put(X.o, rb, (size_t)n), 0);
		}
		if (n == 0 && !X.o_eof) {
			X.o_eof = true;
			egress_tls_eof(X.o);
		}
		(void)egress_tls_read(X.o, &X.oplain, buf_avail(&X.oplain));
	}
}

static bool has(const struct buf *b, const char *s)
{
	return buf_len(b) > 0 && memmem(buf_ptr(b), buf_len(b), s, strlen(s)) != NULL;
}

/* Steps until what holds s (the box's or the origin's plaintext) does. */
static void until_has(const struct buf *b, const char *s)
{
	for (int i = 0; i < TURNS && !has(b, s); i++) {
		step();
	}
	if (!has(b, s)) {
		fail_msg("never came: %s", s);
	}
}

/* The daemon sends the box's secrets: GH bound to example.com in Authorization, the value in a sealed memfd. */
static void d_secrets(void)
{
	char *hosts[] = { "example.com", NULL };
	struct supmsg_secret sec = { .name = "GH",
				     .placeholder = GH_PLACEHOLDER,
				     .header = "Authorization",
				     .hosts = hosts,
				     .n_hosts = 1,
				     .len = (int64_t)strlen(GH_VALUE) };
	struct supmsg m = { .op = SUPMSG_SECRETS, .secrets = &sec, .n_secrets = 1 };
	int fd = memfd_create("secrets", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, GH_VALUE, strlen(GH_VALUE)), (ssize_t)strlen(GH_VALUE));
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
	d_answer(&m, fd);
}

/* An inspected CONNECT example.com:443 dialled to the origin: the box's TLS client and the origin's server on it. */
static int64_t inspected(uint32_t id, struct egress_ca *origin_ca)
{
	struct supmsg m = { .op = SUPMSG_EGRESS_DIAL, .url = "https://example.com:443", .inspect = true };
	SSL_CTX *octx = NULL;
	int64_t conn = ask(id, CONNECT_EXAMPLE, true, "example.com", 443);

	X.gid = id;
	m.conn = conn;
	d_answer(&m, d_dial(&X.ofd));
	until_has(&X.gplain, ESTABLISHED);
	assert_int_equal(buf_len(&X.gplain), strlen(ESTABLISHED));
	buf_reset(&X.gplain);
	assert_int_equal(egress_ca_server_ctx(origin_ca, "example.com", &octx), 0);
	assert_int_equal(egress_tls_server_new(octx, &X.o), 0);
	assert_int_equal(egress_tls_client_new(X.guest_ctx, "example.com", &X.g), 0);
	for (int i = 0; i < TURNS && !(egress_tls_established(X.g) && egress_tls_established(X.o)); i++) {
		step();
	}
	assert_true(egress_tls_established(X.o));
	assert_true(egress_tls_established(X.g));
	return conn;
}

static void g_send(const char *s)
{
	assert_int_equal(egress_tls_write(X.g, (const uint8_t *)s, strlen(s)), 0);
	step();
}

static void o_send(const char *s)
{
	assert_int_equal(egress_tls_write(X.o, (const uint8_t *)s, strlen(s)), 0);
	step();
}

/* Swapped only after secret_ok, the value reaches the origin in the bound header, and its echo comes back redacted. */
static void test_inspect_swap(void **state)
{
	static const char req[] =
		"GET /user HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer " GH_PLACEHOLDER "\r\n\r\n";
	char resp[512];
	struct supmsg m;
	struct supmsg ok = { .op = SUPMSG_SECRET_OK, .ok = true };
	int64_t conn;
	(void)state;

	d_secrets();
	conn = inspected(1, X.origin);
	g_send(req);
	d_recv(&m, SUPMSG_SECRET_USE);
	assert_int_equal(m.conn, conn);
	assert_string_equal(m.secret, "GH");
	assert_string_equal(m.host, "example.com");
	supmsg_release(&m);
	/* Not a byte of the request before the use is kept. */
	for (int i = 0; i < 20; i++) {
		step();
	}
	assert_int_equal(buf_len(&X.oplain), 0);
	ok.conn = conn;
	d_answer(&ok, -1);
	until_has(&X.oplain, "\r\n\r\n");
	assert_true(has(&X.oplain, "GET /user HTTP/1.1\r\n"));
	assert_true(has(&X.oplain, "Authorization: Bearer " GH_VALUE "\r\n"));
	assert_false(has(&X.oplain, GH_PLACEHOLDER));
	/* The origin echoes the value: the box gets the response with the value redacted, same length. */
	(void)snprintf(resp, sizeof(resp), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n{\"token\":\"%s\"}",
		       strlen(GH_VALUE) + 12, GH_VALUE);
	o_send(resp);
	until_has(&X.gplain, "{\"token\":\"");
	for (int i = 0; i < TURNS && buf_len(&X.gplain) < strlen(resp); i++) {
		step();
	}
	assert_int_equal(buf_len(&X.gplain), strlen(resp));
	assert_false(has(&X.gplain, GH_VALUE));
	assert_false(has(&X.gplain, "ghp_R3al"));
	assert_true(has(&X.gplain, "HTTP/1.1 200 OK\r\n"));
	/* The box closes: close_notify both ways, then the end with the wire bytes each way. */
	egress_tls_close(X.g);
	step();
	g_simple(EGRESS_FIN, 1, 0);
	for (int i = 0; i < TURNS && !X.o_eof; i++) {
		step();
	}
	assert_true(X.o_eof);
	egress_tls_close(X.o);
	step();
	(void)close(X.ofd);
	X.ofd = -1;
	d_recv(&m, SUPMSG_EGRESS_DONE);
	assert_int_equal(m.conn, conn);
	assert_true(m.bytes_up > (int64_t)strlen(req));
	assert_true(m.bytes_down > (int64_t)strlen(resp));
	assert_null(m.rule);
	supmsg_release(&m);
	assert_int_equal(T.rc, 0);
}

/* The placeholder in another header: 403 secret-leak through the box's TLS, secret_leak told, nothing sent. */
static void test_inspect_leak(void **state)
{
	struct supmsg m;
	int64_t conn;
	(void)state;

	d_secrets();
	conn = inspected(3, X.origin);
	g_send("GET / HTTP/1.1\r\nHost: example.com\r\nX-Token: " GH_PLACEHOLDER "\r\n\r\n");
	d_recv(&m, SUPMSG_SECRET_LEAK);
	assert_int_equal(m.conn, conn);
	assert_string_equal(m.secret, "GH");
	assert_string_equal(m.host, "example.com");
	assert_non_null(m.reason);
	assert_null(strstr(m.reason, GH_PLACEHOLDER));
	supmsg_release(&m);
	until_has(&X.gplain, "Tkbox-Rule: secret-leak\r\n");
	assert_true(has(&X.gplain, "HTTP/1.1 403 Forbidden\r\n"));
	d_recv(&m, SUPMSG_EGRESS_DONE);
	assert_int_equal(m.conn, conn);
	assert_string_equal(m.rule, "secret-leak");
	supmsg_release(&m);
	for (int i = 0; i < TURNS && !X.g_closed; i++) {
		step();
	}
	assert_true(X.g_closed);
	assert_int_equal(X.g_close_reason, EGRESS_CLOSE_REFUSED);
	assert_int_equal(buf_len(&X.oplain), 0); /* the origin got nothing of the request */
}

/* An origin the supervisor does not trust: the box gets 502 upstream-tls with OpenSSL's reason, through its TLS. */
static void test_inspect_upstream_untrusted(void **state)
{
	static const char *const names[] = { "example.com" };
	struct egress_ca *rogue = NULL;
	struct supmsg m = { .op = SUPMSG_EGRESS_DIAL, .url = "https://example.com:443", .inspect = true };
	SSL_CTX *octx = NULL;
	(void)state;

	d_secrets();
	assert_int_equal(egress_ca_new("rogue", names, 1, 3600, &rogue), 0);
	X.gid = 5;
	m.conn = ask(5, CONNECT_EXAMPLE, true, "example.com", 443);
	d_answer(&m, d_dial(&X.ofd));
	until_has(&X.gplain, ESTABLISHED);
	buf_reset(&X.gplain);
	assert_int_equal(egress_ca_server_ctx(rogue, "example.com", &octx), 0);
	assert_int_equal(egress_tls_server_new(octx, &X.o), 0);
	assert_int_equal(egress_tls_client_new(X.guest_ctx, "example.com", &X.g), 0);
	until_has(&X.gplain, "Tkbox-Rule: upstream-tls\r\n");
	assert_true(has(&X.gplain, "HTTP/1.1 502 Bad Gateway\r\n"));
	assert_true(has(&X.gplain, "certificate verify failed"));
	d_recv(&m, SUPMSG_EGRESS_DONE);
	assert_string_equal(m.rule, "upstream-tls");
	assert_non_null(strstr(m.error, "certificate verify failed"));
	supmsg_release(&m);
	egress_ca_free(rogue);
}

/*
 * An inspected dial before the secrets arrived is refused (fail closed), and
 * nothing reaches the origin. The monitors refuse such a dial already; they
 * are told the secrets went so that the proxy's own check is what is tested.
 */
static void test_inspect_before_secrets(void **state)
{
	struct supmsg m = { .op = SUPMSG_EGRESS_DIAL, .url = "https://example.com:443", .inspect = true };
	char text[1024];
	uint8_t b[1];
	bool eof;
	int origin;
	(void)state;

	T.mon_d.secrets_sent = T.mon_sup.secrets_sent = true;
	m.conn = ask(7, CONNECT_EXAMPLE, true, "example.com", 443);
	d_answer(&m, d_dial(&origin));
	assert_int_equal(g_collect(7, text, sizeof(text), NULL, NULL), EGRESS_CLOSE);
	assert_non_null(strstr(text, "HTTP/1.1 503 "));
	assert_non_null(strstr(text, "Tkbox-Rule: secrets-not-loaded\r\n"));
	expect_done(m.conn, 0, 0, "secrets-not-loaded", "not loaded yet");
	assert_int_equal(o_read(origin, b, 1, &eof), 0);
	assert_true(eof);
	(void)close(origin);
}

/*
 * A stop while a swap waits: the swapped request never reaches the origin;
 * the conn's end is told after secret_ok (the monitor's order).
 */
static void test_inspect_stop_drops_swap(void **state)
{
	struct supmsg m, ok = { .op = SUPMSG_SECRET_OK, .ok = true };
	int64_t conn;
	(void)state;

	d_secrets();
	conn = inspected(9, X.origin);
	g_send("GET / HTTP/1.1\r\nHost: example.com\r\nAuthorization: " GH_PLACEHOLDER "\r\n\r\n");
	d_recv(&m, SUPMSG_SECRET_USE);
	supmsg_release(&m);
	egress_sup_stop(T.e);
	T.mon_sup.state = T.mon_d.state = SUPMON_STOPPING;
	for (int i = 0; i < 20; i++) {
		step();
	}
	d_quiet();
	ok.conn = conn;
	d_answer(&ok, -1);
	d_recv(&m, SUPMSG_EGRESS_DONE);
	assert_int_equal(m.conn, conn);
	assert_non_null(strstr(m.error, "stopping"));
	supmsg_release(&m);
	assert_int_equal(buf_len(&X.oplain), 0);
	assert_true(X.o_eof); /* closed with nothing after the handshake */
}

/* The self-test host is served by the proxy: TLS with the box's CA, 204, then the result once; never asked. */
static void test_selftest(void **state)
{
	char text[1024], head[256];
	struct timespec ts;
	struct supmsg m;
	(void)state;

	X.gid = 11;
	g_open(11);
	g_expect(EGRESS_OPEN_OK, 11, NULL);
	g_str(11, "CONNECT tkbox-selftest.invalid:443 HTTP/1.1\r\nHost: tkbox-selftest.invalid:443\r\n\r\n");
	until_has(&X.gplain, ESTABLISHED);
	buf_reset(&X.gplain);
	assert_int_equal(egress_tls_client_new(X.guest_ctx, EGRESS_SELFTEST_HOST, &X.g), 0);
	for (int i = 0; i < TURNS && !egress_tls_established(X.g); i++) {
		step();
	}
	assert_true(egress_tls_established(X.g));
	g_send("GET /curl HTTP/1.1\r\nHost: tkbox-selftest.invalid\r\nUser-Agent: curl\r\n\r\n");
	until_has(&X.gplain, "\r\n\r\n");
	assert_true(has(&X.gplain, "HTTP/1.1 204 No Content\r\n"));
	for (int i = 0; i < TURNS && !X.g_closed; i++) {
		step();
	}
	assert_int_equal(X.g_close_reason, EGRESS_CLOSE_DONE);
	/* The result: ran as the guest says, trusted what reached the proxy over TLS, the clock's offset. */
	(void)clock_gettime(CLOCK_REALTIME, &ts);
	(void)snprintf(head, sizeof(head),
		       "GET http://tkbox-selftest.invalid/done?ran=curl,python3&clock_ms=%lld HTTP/1.1\r\n"
		       "Host: tkbox-selftest.invalid\r\n\r\n",
		       (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + 3600000);
	g_open(12);
	g_expect(EGRESS_OPEN_OK, 12, NULL);
	g_str(12, head);
	d_recv(&m, SUPMSG_SELFTEST);
	assert_int_equal(m.n_ran, 2);
	assert_string_equal(m.ran[0], "curl");
	assert_string_equal(m.ran[1], "python3");
	assert_int_equal(m.n_trusted, 1);
	assert_string_equal(m.trusted[0], "curl");
	assert_true(m.clock_offset_ms > 0 && m.clock_offset_ms <= 3600000); /* the box's clock is an hour ahead */
	supmsg_release(&m);
	assert_int_equal(g_collect(12, text, sizeof(text), NULL, NULL), EGRESS_CLOSE);
	assert_string_equal(text, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
	/* A second result is refused. */
	g_open(13);
	g_expect(EGRESS_OPEN_OK, 13, NULL);
	g_str(13, head);
	assert_int_equal(g_collect(13, text, sizeof(text), NULL, NULL), EGRESS_CLOSE);
	assert_non_null(strstr(text, "HTTP/1.1 403 Forbidden\r\n"));
	assert_non_null(strstr(text, "Tkbox-Rule: selftest\r\n"));
	d_recv(&m, SUPMSG_EGRESS_REFUSED);
	assert_string_equal(m.rule, "selftest");
	supmsg_release(&m);
	d_quiet(); /* no egress_open ever */
}

/* Without a CA the self-test host is refused over CONNECT; a malformed result is refused too. */
static void test_selftest_no_ca(void **state)
{
	static const char *const bad[] = {
		"GET http://tkbox-selftest.invalid/done?ran=curl,curl&clock_ms=1 HTTP/1.1\r\nHost: "
		"tkbox-selftest.invalid\r\n\r\n",
		"GET http://tkbox-selftest.invalid/done?ran=CURL&clock_ms=1 HTTP/1.1\r\nHost: "
		"tkbox-selftest.invalid\r\n\r\n",
		"GET http://tkbox-selftest.invalid/done?ran=curl&clock_ms=-1 HTTP/1.1\r\nHost: "
		"tkbox-selftest.invalid\r\n\r\n",
		"GET http://tkbox-selftest.invalid/done?clock_ms=1&ran=curl HTTP/1.1\r\nHost: "
		"tkbox-selftest.invalid\r\n\r\n",
		"GET http://tkbox-selftest.invalid/other HTTP/1.1\r\nHost: tkbox-selftest.invalid\r\n\r\n",
	};
	char text[1024];
	struct supmsg m;
	(void)state;

	g_open(14);
	g_expect(EGRESS_OPEN_OK, 14, NULL);
	g_str(14, "CONNECT tkbox-selftest.invalid:443 HTTP/1.1\r\n\r\n");
	assert_int_equal(g_collect(14, text, sizeof(text), NULL, NULL), EGRESS_CLOSE);
	assert_non_null(strstr(text, "HTTP/1.1 403 Forbidden\r\n"));
	assert_non_null(strstr(text, "Tkbox-Rule: selftest\r\n"));
	assert_non_null(strstr(text, "has no CA"));
	d_recv(&m, SUPMSG_EGRESS_REFUSED);
	supmsg_release(&m);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		g_open(15 + (uint32_t)i);
		g_expect(EGRESS_OPEN_OK, 15 + (uint32_t)i, NULL);
		g_str(15 + (uint32_t)i, bad[i]);
		assert_int_equal(g_collect(15 + (uint32_t)i, text, sizeof(text), NULL, NULL), EGRESS_CLOSE);
		assert_non_null(strstr(text, "Tkbox-Rule: selftest\r\n"));
		d_recv(&m, SUPMSG_EGRESS_REFUSED);
		supmsg_release(&m);
	}
	d_quiet();
}

/*
 * A box with secrets: the placeholder in an absolute-form head is a leak
 * refused before the daemon is asked (no approval, no dial), the reference
 * demo's case (no swap ever happens over plain HTTP).
 */
static void test_absolute_leak(void **state)
{
	char text[2048];
	struct supmsg m;
	(void)state;

	d_secrets();
	g_open(31);
	g_expect(EGRESS_OPEN_OK, 31, NULL);
	g_str(31, "GET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer " GH_PLACEHOLDER
		  "\r\n\r\n");
	d_recv(&m, SUPMSG_SECRET_LEAK);
	assert_int_equal(m.conn, 0);
	assert_string_equal(m.secret, "GH");
	assert_string_equal(m.host, "evil.example");
	assert_non_null(strstr(m.reason, "header Authorization"));
	assert_null(strstr(m.reason, GH_PLACEHOLDER));
	supmsg_release(&m);
	assert_int_equal(g_collect(31, text, sizeof(text), NULL, NULL), EGRESS_CLOSE);
	assert_non_null(strstr(text, "HTTP/1.1 403 Forbidden\r\n"));
	assert_non_null(strstr(text, "Tkbox-Rule: secret-leak\r\n"));
	assert_non_null(strstr(text, "the request to evil.example carried the placeholder of GH (raw) in header "
				     "Authorization"));
	assert_non_null(strstr(text, "tkbox run --secret GH=...@evil.example"));
	assert_null(strstr(text, GH_PLACEHOLDER));
	d_quiet(); /* never asked: no egress_open */
}

/* The placeholder in an absolute-form request's body (after the dial): the inspector refuses it before it goes. */
static void test_absolute_body_leak(void **state)
{
	static const char body[] = "{\"token\":\"" GH_PLACEHOLDER "\"}";
	char text[2048], head[256];
	uint8_t got[4096];
	struct supmsg m;
	bool eof;
	size_t n;
	int origin;
	int64_t conn;
	(void)state;

	d_secrets();
	(void)snprintf(head, sizeof(head),
		       "POST http://example.com/api HTTP/1.1\r\nHost: example.com\r\nContent-Length: %zu\r\n\r\n",
		       strlen(body));
	conn = ask(32, head, false, "example.com", 80);
	d_send_dial(conn, "http://example.com:80", false, &origin);
	g_str(32, body);
	d_recv(&m, SUPMSG_SECRET_LEAK);
	assert_int_equal(m.conn, conn);
	assert_string_equal(m.secret, "GH");
	supmsg_release(&m);
	assert_int_equal(g_collect(32, text, sizeof(text), NULL, NULL), EGRESS_CLOSE);
	assert_non_null(strstr(text, "Tkbox-Rule: secret-leak\r\n"));
	expect_done(conn, -1, -1, "secret-leak", "GH");
	n = o_read(origin, got, sizeof(got) - 1, &eof);
	assert_true(eof);
	got[n] = '\0';
	assert_null(strstr((char *)got, GH_PLACEHOLDER)); /* what went (if any) holds no whole placeholder */
	(void)close(origin);
}

/* The box's TLS client names another server than its CONNECT: the tunnel is refused before any TLS answer. */
static void test_inspect_sni_mismatch(void **state)
{
	struct supmsg m = { .op = SUPMSG_EGRESS_DIAL, .url = "https://example.com:443", .inspect = true };
	(void)state;

	d_secrets();
	X.gid = 33;
	m.conn = ask(33, CONNECT_EXAMPLE, true, "example.com", 443);
	d_answer(&m, d_dial(&X.ofd));
	until_has(&X.gplain, ESTABLISHED);
	buf_reset(&X.gplain);
	assert_int_equal(egress_tls_client_new(X.guest_ctx, "other.example", &X.g), 0);
	for (int i = 0; i < TURNS && !X.g_closed; i++) {
		step();
	}
	assert_true(X.g_closed);
	assert_int_equal(X.g_close_reason, EGRESS_CLOSE_REFUSED);
	assert_false(egress_tls_established(X.g));
	expect_done(m.conn, -1, 0, "sni-mismatch", "example.com:443 refused");
}

/* A model host: each exchange is told as model_call with the provider's counts. */
static void test_inspect_model_call(void **state)
{
	static const char body[] = "{\"model\":\"claude-test-1\",\"usage\":{\"input_tokens\":12,\"output_tokens\":34}}";
	struct supmsg m = {
		.op = SUPMSG_EGRESS_DIAL, .url = "https://example.com:443", .inspect = true, .model_host = true
	};
	SSL_CTX *octx = NULL;
	char resp[512];
	(void)state;

	d_secrets();
	X.gid = 35;
	m.conn = ask(35, CONNECT_EXAMPLE, true, "example.com", 443);
	d_answer(&m, d_dial(&X.ofd));
	until_has(&X.gplain, ESTABLISHED);
	buf_reset(&X.gplain);
	assert_int_equal(egress_ca_server_ctx(X.origin, "example.com", &octx), 0);
	assert_int_equal(egress_tls_server_new(octx, &X.o), 0);
	assert_int_equal(egress_tls_client_new(X.guest_ctx, "example.com", &X.g), 0);
	g_send("POST /v1/messages HTTP/1.1\r\nHost: example.com\r\nContent-Length: 2\r\n\r\n{}");
	until_has(&X.oplain, "{}");
	(void)snprintf(resp, sizeof(resp),
		       "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
		       strlen(body), body);
	o_send(resp);
	until_has(&X.gplain, "output_tokens");
	{
		struct supmsg c;
		d_recv(&c, SUPMSG_MODEL_CALL);
		assert_int_equal(c.conn, m.conn);
		assert_string_equal(c.host, "example.com");
		assert_string_equal(c.method, "POST");
		assert_string_equal(c.path, "/v1/messages");
		assert_int_equal(c.status, 200);
		assert_string_equal(c.model, "claude-test-1");
		assert_int_equal(c.input_tokens, 12);
		assert_int_equal(c.output_tokens, 34);
		supmsg_release(&c);
	}
}

/*
 * What the supervisor does with TLS and secrets once confined (issue 13):
 * the CA and the origins' trust loaded before sandbox_apply(SANDBOX_SUPERVISOR)
 * as supervisor.c does, then under the allowlist filter and Landlock: a leaf
 * minted, a verified handshake both ways, a value read from a memfd into
 * secmem, the leak set and a redaction. A syscall the filter lacks kills the
 * child (SIGSYS).
 */
static int confined_child(void)
{
	static const char *const names[] = { "example.com" };
	struct egress_ca *ca = NULL, *made = NULL;
	struct egress_tls *srv = NULL, *cli = NULL;
	struct egress_leak_set *leak = NULL;
	struct egress_secret sec = { .name = "GH", .placeholder = GH_PLACEHOLDER, .header = "Authorization" };
	struct sandbox_report rep;
	SSL_CTX *client = NULL, *sctx = NULL;
	char *cert = NULL, *key = NULL;
	struct buf a, b, pl;
	uint8_t echo[64];
	int fd = memfd_create("secrets", MFD_CLOEXEC);

	if (fd < 0 || write(fd, GH_VALUE, strlen(GH_VALUE)) != (ssize_t)strlen(GH_VALUE)) {
		return 10;
	}
	if (OPENSSL_init_ssl(OPENSSL_INIT_LOAD_CONFIG, NULL) != 1 || egress_ca_new("box", names, 1, 3600, &made) < 0 ||
	    egress_ca_cert_pem(made, &cert) < 0 || egress_ca_key_pem(made, &key) < 0 ||
	    egress_ca_load(cert, key, &ca) < 0) {
		return 11;
	}
	write_pem(X.box_ca, cert);
	if (egress_tls_client_ctx(X.box_ca, &client) < 0 || buf_init(&a, (size_t)1 << 20, 0) < 0 ||
	    buf_init(&b, (size_t)1 << 20, 0) < 0 || buf_init(&pl, (size_t)1 << 20, 0) < 0) {
		return 12;
	}
	if (sandbox_apply(SANDBOX_SUPERVISOR, X.dir, &rep) < 0 || !rep.seccomp || !rep.allowlist) {
		return 13;
	}
	/* Confined from here on. */
	if (egress_ca_server_ctx(ca, "example.com", &sctx) < 0 || egress_tls_server_new(sctx, &srv) < 0 ||
	    egress_tls_client_new(client, "example.com", &cli) < 0) {
		return 14;
	}
	for (int i = 0; i < 20 && !(egress_tls_established(srv) && egress_tls_established(cli)); i++) {
		buf_reset(&a);
		buf_reset(&b);
		if (egress_tls_read(cli, &pl, 4096) < 0 || egress_tls_take(cli, &a) < 0 ||
		    egress_tls_put(srv, buf_ptr(&a), buf_len(&a)) < 0 || egress_tls_read(srv, &pl, 4096) < 0 ||
		    egress_tls_take(srv, &b) < 0 || egress_tls_put(cli, buf_ptr(&b), buf_len(&b)) < 0) {
			return 15;
		}
	}
	if (!egress_tls_established(srv) || !egress_tls_established(cli)) {
		return 16;
	}
	sec.value = secmem_alloc(strlen(GH_VALUE));
	if (!sec.value || pread(fd, sec.value, strlen(GH_VALUE), 0) != (ssize_t)strlen(GH_VALUE)) {
		return 17;
	}
	sec.value_len = strlen(GH_VALUE);
	memcpy(echo, GH_VALUE, strlen(GH_VALUE));
	if (egress_leak_set_new(&sec, 1, &leak) < 0 || egress_leak_redact(leak, echo, strlen(GH_VALUE)) != 1) {
		return 18;
	}
	egress_leak_set_free(leak);
	secmem_free(sec.value, sec.value_len);
	egress_tls_free(srv);
	egress_tls_free(cli);
	egress_ca_free(ca);
	egress_ca_free(made);
	SSL_CTX_free(client);
	explicit_bzero(key, strlen(key));
	free(key);
	free(cert);
	return 0;
}

static void test_confined_tls(void **state)
{
	int st = 0;
	pid_t pid = fork();
	(void)state;

	assert_true(pid >= 0);
	if (pid == 0) {
		_exit(confined_child());
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st)) {
		fail_msg("the confined child was killed by signal %d (SIGSYS: a syscall the supervisor's filter lacks)",
			 WTERMSIG(st));
	}
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* The daemon could not keep the use (secret_ok false): the request is refused, the value never sent. */
static void test_inspect_swap_refused(void **state)
{
	struct supmsg m, no = { .op = SUPMSG_SECRET_OK, .ok = false, .message = "the signer is gone" };
	int64_t conn;
	(void)state;

	d_secrets();
	conn = inspected(37, X.origin);
	g_send("GET / HTTP/1.1\r\nHost: example.com\r\nAuthorization: token " GH_PLACEHOLDER "\r\n\r\n");
	d_recv(&m, SUPMSG_SECRET_USE);
	supmsg_release(&m);
	no.conn = conn;
	d_answer(&no, -1);
	until_has(&X.gplain, "Tkbox-Rule: swap-refused\r\n");
	d_recv(&m, SUPMSG_EGRESS_DONE);
	assert_string_equal(m.rule, "swap-refused");
	supmsg_release(&m);
	for (int i = 0; i < 20; i++) {
		step();
	}
	assert_int_equal(buf_len(&X.oplain), 0);
	assert_true(X.o_eof);
}

/*
 * One turn of the supervisor's loop as it runs for a box: the proxy is
 * handled only when a polled fd fired or egress_sup_pending said so (a
 * timeout's turn would hide a missed wake-up). True when it was handled.
 */
static bool woken_turn(void)
{
	struct pollfd p[EGRESS_SUP_POLL_MAX];
	size_t n = egress_sup_fill(T.e, p, ARRAY_SIZE(p));
	bool pending = egress_sup_pending(T.e);

	if (poll(p, n, pending ? 0 : 5) <= 0 && !pending) {
		return false;
	}
	T.rc = egress_sup_handle(T.e, p, n);
	return true;
}

/*
 * The guest forwarder's grant (src/guest/egress.c grant()) with a client
 * slower than the proxy: it reads what came only once the window is used,
 * and the forwarder grants again up to window once a quarter of it is free.
 */
static bool g_grant(uint32_t id, size_t window, size_t *unread)
{
	const struct egress_stream *st = egress_mux_find(&T.gm, id);
	struct egress_frame f = { .type = EGRESS_WINDOW, .id = id };
	size_t held;

	if (!st) {
		return false;
	}
	if (st->credit[EGRESS_FROM_HOST] == 0) {
		*unread = 0;
	}
	held = *unread + st->credit[EGRESS_FROM_HOST];
	if (held + window / 4 > window) {
		return false;
	}
	f.credit = (uint32_t)(window - held);
	g_frame(&f);
	return true;
}

/*
 * A body of many windows through an inspected conn, the guest granting as
 * the real forwarder does: it all arrives with the proxy woken only by its
 * fds and egress_sup_pending (a timeout's turn would hide a missed wake-up).
 * Bytes held in a stage (down_plain, x->down) while nothing polled will fire
 * is a stall: the guest grants again only once a quarter of its window is
 * used, and the origin is not read while a stage holds bytes.
 */
static void big_body(uint32_t id, size_t window, unsigned every)
{
	static const char req[] = "GET /big HTTP/1.1\r\nHost: example.com\r\n\r\n";
	const size_t body = (size_t)6 << 20;
	struct buf wire;
	uint8_t chunk[16384], rb[65536];
	char head[128];
	size_t head_len, written = 0, got = 0, unread = 0;
	int idle = 0;
	unsigned round = 0;

	d_secrets();
	(void)inspected(id, X.origin);
	g_send(req);
	until_has(&X.oplain, "\r\n\r\n");
	buf_reset(&X.gplain);
	head_len = (size_t)snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", body);
	assert_int_equal(egress_tls_write(X.o, (const uint8_t *)head, head_len), 0);
	for (size_t i = 0; i < sizeof(chunk); i++) {
		chunk[i] = (uint8_t)('a' + i % 26);
	}
	assert_int_equal(buf_init(&wire, (size_t)1 << 20, 0), 0);
	/*
	 * Each round: the proxy if woken, then the box (its port read every
	 * every-th round) and the origin; three rounds that read the port where
	 * nothing moves end it.
	 */
	while (got < head_len + body && idle < 3) {
		struct egress_frame f;
		bool moved = woken_turn(), reads = ++round % every == 0;
		ssize_t n;

		buf_reset(&X.tmp);
		assert_true(egress_tls_take(X.g, &X.tmp) >= 0);
		if (buf_len(&X.tmp) > 0) {
			g_data(X.gid, buf_ptr(&X.tmp), buf_len(&X.tmp));
			moved = true;
		}
		while (reads && g_poll(&f)) {
			assert_int_equal(f.type, EGRESS_DATA);
			assert_int_equal(egress_tls_put(X.g, f.data, f.len), 0);
			assert_true(egress_tls_read(X.g, &X.gplain, buf_avail(&X.gplain)) >= 0);
			got += buf_len(&X.gplain);
			buf_reset(&X.gplain);
			unread += f.len;
			moved = true;
		}
		moved = g_grant(X.gid, window, &unread) || moved;
		while (written < body && buf_avail(&wire) >= 2 * sizeof(chunk)) {
			size_t k = MIN(sizeof(chunk), body - written);
			assert_int_equal(egress_tls_write(X.o, chunk, k), 0);
			written += k;
			assert_true(egress_tls_take(X.o, &wire) >= 0);
		}
		n = buf_len(&wire) > 0 ? send(X.ofd, buf_ptr(&wire), buf_len(&wire), MSG_DONTWAIT | MSG_NOSIGNAL) : 0;
		if (n > 0) {
			assert_int_equal(buf_consume(&wire, (size_t)n), 0);
			moved = true;
		}
		while ((n = recv(X.ofd, rb, sizeof(rb), MSG_DONTWAIT)) > 0) {
			assert_int_equal(egress_tls_put(X.o, rb, (size_t)n), 0);
		}
		idle = moved ? 0 : idle + (reads ? 1 : 0);
	}
	buf_release(&wire);
	if (got < head_len + body) {
		fail_msg("stalled after %zu of %zu bytes: bytes wait in the proxy and nothing it polls will fire", got,
			 head_len + body);
	}
	assert_int_equal(T.rc, 0);
}

/* The guest's own window: t_pump stopped once x->down went to the guest, down_plain still full. */
static void test_inspect_big_body(void **state)
{
	(void)state;
	big_body(39, GUEST_EGRESS_WINDOW, 1);
}

/*
 * A window past the port queue's EGRESS_SUP_OUT_DATA_MAX and a guest that
 * reads its port in bursts: the queue, not the credit, stops the bytes;
 * egress_sup_handle pumps while it is full, then port_flush empties it, and
 * the credit left brings no WINDOW. The port takes the whole queue at once
 * but not the window: SO_SNDBUF 1.25 MiB (the kernel doubles it).
 */
static void test_inspect_big_window(void **state)
{
	int want = 5 << 18, have = 0;
	socklen_t len = sizeof(have);
	(void)state;

	if (setsockopt(T.port[0], SOL_SOCKET, SO_SNDBUFFORCE, &want, sizeof(want)) < 0) {
		(void)setsockopt(T.port[0], SOL_SOCKET, SO_SNDBUF, &want, sizeof(want));
	}
	assert_int_equal(getsockopt(T.port[0], SOL_SOCKET, SO_SNDBUF, &have, &len), 0);
	if ((size_t)have < 2 * EGRESS_SUP_OUT_DATA_MAX) {
		skip(); /* net.core.wmem_max below 1 MiB and no CAP_NET_ADMIN: the port cannot take the queue at once */
	}
	big_body(41, (size_t)8 << 20, 32);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_connect_relay, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sni_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_split_hello, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hrr, setup, teardown),
		cmocka_unit_test_setup_teardown(test_not_tls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_absolute_rewrite, setup, teardown),
		cmocka_unit_test_setup_teardown(test_proxy_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_daemon_refuse, setup, teardown),
		cmocka_unit_test_setup_teardown(test_credit_violation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_closed_before_dial, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conn_cap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pipelined, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chunked_exact, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chunked_malformed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hop_headers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hrr_split, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusal_flood, setup, teardown),
		cmocka_unit_test_setup_teardown(test_server_first_eof, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stream_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_stream, setup, teardown),
		cmocka_unit_test_setup_teardown(test_inspect_swap, setup_tls, teardown_tls),
		cmocka_unit_test_setup_teardown(test_inspect_leak, setup_tls, teardown_tls),
		cmocka_unit_test_setup_teardown(test_inspect_upstream_untrusted, setup_tls, teardown_tls),
		cmocka_unit_test_setup_teardown(test_inspect_before_secrets, setup_tls, teardown_tls),
		cmocka_unit_test_setup_teardown(test_inspect_stop_drops_swap, setup_tls, teardown_tls),
		cmocka_unit_test_setup_teardown(test_selftest, setup_tls, teardown_tls),
		cmocka_unit_test_setup_teardown(test_selftest_no_ca, setup, teardown),
		cmocka_unit_test_setup_teardown(test_absolute_leak, setup_tls, teardown_tls),
		cmocka_unit_test_setup_teardown(test_absolute_body_leak, setup_tls, teardown_tls),
		cmocka_unit_test_setup_teardown(test_inspect_sni_mismatch, setup_tls, teardown_tls),
		cmocka_unit_test_setup_teardown(test_inspect_model_call, setup_tls, teardown_tls),
		cmocka_unit_test_setup_teardown(test_confined_tls, setup_tls, teardown_tls),
		cmocka_unit_test_setup_teardown(test_inspect_swap_refused, setup_tls, teardown_tls),
		cmocka_unit_test_setup_teardown(test_inspect_big_body, setup_tls, teardown_tls),
		cmocka_unit_test_setup_teardown(test_inspect_big_window, setup_tls, teardown_tls),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
