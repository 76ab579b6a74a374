/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The guest forwarder (egress.h). Every accepted connection takes a slot.
 * While its mux stream lives, the slot holds the stream id; the stream's
 * state (answered, FINs, credit each way) is the tracker's alone, read back
 * with egress_mux_find. Once this end has sent CLOSE (or refused the
 * connection itself) the id is 0 and the slot only drains: it writes what
 * the client is still owed (host DATA, a 503), shuts down its write side and
 * discards what the client sends until EOF, so that the answer is not lost
 * to a reset when the client still had bytes in flight.
 *
 * Memory: one queue of frames to the host (OUT_MAX), and per slot the host's
 * DATA not yet written to the client, at most GUEST_EGRESS_WINDOW because
 * that is all the credit the forwarder ever grants. Client bytes go straight
 * from one read into one DATA frame of the queue, read only while the stream
 * has credit and the queue has room, so nothing else buffers them.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

#include "banned.h"
#include "frame.h"
#include "guest/egress.h"
#include "io.h"
#include "log.h"
#include "path.h"
#include "vmm/egress-proto.h"

#define CHUNK EGRESS_MAX_DATA /* one read from a client or from the port */
#define OUT_MAX ((size_t)4 * 1024 * 1024)
/*
 * Room kept in the queue for control frames, which are never refused for
 * want of room: the port and the listener are read only above it. Each of
 * the 256 streams sends at most one OPEN, FIN and CLOSE and one WINDOW per
 * turn (about 41 bytes), far below.
 */
#define CTRL_RESERVE ((size_t)64 * 1024)
#define DATA_ROOM (CTRL_RESERVE + FRAME_HEADER_SIZE + 4 + CHUNK)
/* A WINDOW is sent once a quarter of the window is free again, not for every read of the client. */
#define GRANT_MIN (GUEST_EGRESS_WINDOW / 4)
/* One more than streams and draining slots together: an accept always finds a slot for its answer. */
#define SLOTS (EGRESS_MAX_STREAMS + GUEST_EGRESS_MAX_DRAINING + 1)
#define DRAIN_MS 5000
#define DRAIN_BYTES ((size_t)256 * 1024)
#define ACCEPT_BURST 16
#define ACCEPT_PAUSE_MS 100
#define HOST_WAIT_MS 10000

#define APT_DIR "etc/apt"
#define APT_CONF "99tkbox-proxy"
#define APT_CONF_TMP ".99tkbox-proxy.tmp"

enum slot_flags {
	SL_SHUT = 1 << 0, /* shutdown(SHUT_WR) done on the client */
	SL_ABORT = 1 << 1, /* close with a reset: the far end was reset */
};

struct slot {
	uint32_t id; /* the mux stream; 0 once this end sent CLOSE, or for a refusal */
	int fd; /* the client; -1: the slot is free */
	unsigned flags; /* enum slot_flags */
	struct buf to_client; /* host DATA (or this end's 503) not yet written */
	int64_t drain_until; /* id 0: closed at this time (CLOCK_MONOTONIC, ms) */
	size_t drained; /* id 0: client bytes discarded */
};

struct fwd {
	int port_fd, listen_fd;
	bool port_is_sock;
	struct egress_mux mux;
	struct frame_decoder dec;
	struct buf payload; /* one frame from the host */
	struct buf out; /* frames to the host */
	uint8_t *chunk; /* a client's bytes */
	uint8_t *pin; /* the port's bytes */
	uint32_t next_id;
	int64_t accept_pause_until;
	struct slot slots[SLOTS];
	struct pollfd pfd[2 + SLOTS];
	struct slot *pslot[2 + SLOTS];
};

static int64_t now_ms(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool again(void)
{
	return errno == EAGAIN || errno == EWOULDBLOCK;
}

/* A failed read or write on the port: the host end going away is -EPIPE, however it says so. */
static int port_errno(void)
{
	if (again()) {
		return 0;
	}
	return errno == ECONNRESET || errno == EPIPE ? -EPIPE : -errno;
}

static struct slot *slot_by_id(struct fwd *f, uint32_t id)
{
	for (size_t i = 0; i < SLOTS; i++) {
		if (f->slots[i].fd >= 0 && f->slots[i].id == id) {
			return &f->slots[i];
		}
	}
	return NULL;
}

static void slot_close(struct slot *s)
{
	if (s->fd >= 0 && (s->flags & SL_ABORT)) {
		struct linger l = { .l_onoff = 1, .l_linger = 0 };
		(void)setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	}
	if (s->fd >= 0) {
		(void)close(s->fd);
	}
	buf_release(&s->to_client);
	*s = (struct slot){ .fd = -1 };
}

/* Queue one frame to the host, through the tracker first. A refusal is this end's bug: fatal. */
static int queue(struct fwd *f, const struct egress_frame *fr)
{
	const char *why = "?";
	int r;

	if (buf_avail(&f->out) < FRAME_HEADER_SIZE + 8 + fr->len) {
		return log_error_errno(-ENOBUFS, "the queue to the host is full");
	}
	r = egress_mux_apply(&f->mux, EGRESS_FROM_GUEST, fr, &why);
	if (r < 0) {
		log_error("stream %u: the forwarder's own frame 0x%02x broke the mux: %s", fr->id, fr->type, why);
		return r;
	}
	return egress_encode(fr, &f->out);
}

static int send_close(struct fwd *f, struct slot *s, enum egress_close reason)
{
	struct egress_frame fr = { .type = EGRESS_CLOSE, .id = s->id, .reason = (uint8_t)reason };

	s->id = 0;
	return queue(f, &fr);
}

/* The client's socket failed: reset the stream and the connection. */
static int client_failed(struct fwd *f, struct slot *s)
{
	int r = s->id ? send_close(f, s, EGRESS_CLOSE_RESET) : 0;

	s->flags |= SL_ABORT;
	slot_close(s);
	return r;
}

/* s (id 0) writes what it owes, then drains; past GUEST_EGRESS_MAX_DRAINING it gets one try and is closed. */
static void drain(struct fwd *f, struct slot *s, int64_t now)
{
	size_t n = 0;

	for (size_t i = 0; i < SLOTS; i++) {
		n += f->slots[i].fd >= 0 && f->slots[i].id == 0;
	}
	s->drain_until = now + DRAIN_MS;
	if (n > GUEST_EGRESS_MAX_DRAINING) {
		(void)!send(s->fd, buf_ptr(&s->to_client), buf_len(&s->to_client), MSG_NOSIGNAL | MSG_DONTWAIT);
		slot_close(s);
	}
}

/* Answer the client with a 503 of the forwarder's own (no stream, or the host refused the OPEN). */
static void refuse(struct fwd *f, struct slot *s, const char *rule, const char *why, int64_t now)
{
	char body[EGRESS_MAX_REASON + 256];
	int n = snprintf(body, sizeof(body), "tkbox egress: %s\n", why);

	s->id = 0;
	buf_reset(&s->to_client);
	if (n > 0 && (size_t)n < sizeof(body)) {
		(void)!buf_putf(&s->to_client,
				"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
				"Connection: close\r\nTkbox-Rule: %s\r\nContent-Length: %d\r\n\r\n%s",
				rule, n, body);
	}
	drain(f, s, now);
}

static uint32_t pick_id(struct fwd *f)
{
	/* At most 256 ids are in use, so this ends within 257 steps. */
	do {
		f->next_id++;
	} while (f->next_id == 0 || egress_mux_find(&f->mux, f->next_id));
	return f->next_id;
}

static int take_client(struct fwd *f, int fd, int64_t now)
{
	struct egress_frame fr = { .type = EGRESS_OPEN };
	struct slot *s = NULL;

	for (size_t i = 0; i < SLOTS && !s; i++) {
		s = f->slots[i].fd < 0 ? &f->slots[i] : NULL;
	}
	if (!s) {
		/* Cannot happen (SLOTS counts one spare); never leave a connection without an owner. */
		(void)close(fd);
		return 0;
	}
	*s = (struct slot){ .fd = fd };
	if (buf_init(&s->to_client, GUEST_EGRESS_WINDOW, 0) < 0) {
		slot_close(s);
		return -EINVAL;
	}
	if (f->mux.n >= EGRESS_MAX_STREAMS) {
		refuse(f, s, "stream-limit",
		       "refused: the box has 256 connections open through its proxy (EGRESS_MAX_STREAMS, the box's "
		       "connection limit); close one and retry",
		       now);
		return 0;
	}
	s->id = fr.id = pick_id(f);
	return queue(f, &fr);
}

static int on_accept(struct fwd *f, int64_t now)
{
	for (int i = 0; i < ACCEPT_BURST && buf_avail(&f->out) >= CTRL_RESERVE; i++) {
		int r, fd = accept4(f->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EINTR || errno == ECONNABORTED)) {
			continue;
		}
		if (fd < 0) {
			/* EMFILE and the like stay readable: wait a little instead of spinning. */
			if (!again()) {
				f->accept_pause_until = now + ACCEPT_PAUSE_MS;
			}
			return 0;
		}
		r = take_client(f, fd, now);
		if (r < 0) {
			return r;
		}
	}
	return 0;
}

/* The host closed the stream: answer, then let the client have what it is owed (a reset passes on as one). */
static int on_close(struct fwd *f, struct slot *s, uint8_t reason, int64_t now)
{
	int r = send_close(f, s, EGRESS_CLOSE_DONE);

	if (reason == EGRESS_CLOSE_RESET || reason == EGRESS_CLOSE_PROTOCOL) {
		s->flags |= SL_ABORT;
		slot_close(s);
	} else {
		drain(f, s, now);
	}
	return r;
}

static int on_frame(struct fwd *f, const struct egress_frame *fr, int64_t now)
{
	struct slot *s = slot_by_id(f, fr->id);
	char why[EGRESS_MAX_REASON + 64];

	if (!s) {
		return 0; /* it crossed this end's CLOSE: the tracker accepted it and nothing wants it */
	}
	switch (fr->type) {
	case EGRESS_OPEN_REFUSED:
		(void)snprintf(why, sizeof(why), "the host refused the connection: %.*s", (int)fr->len,
			       (const char *)fr->data);
		refuse(f, s, "open-refused", why, now);
		return 0;
	case EGRESS_DATA:
		/* Never past the window: the tracker refused DATA beyond the credit granted. */
		return buf_put(&s->to_client, fr->data, fr->len);
	case EGRESS_CLOSE:
		return on_close(f, s, fr->reason, now);
	default:
		return 0; /* OPEN_OK, WINDOW, FIN: the tracker holds the state; the next turn acts on it */
	}
}

static int take_frame(struct fwd *f, int64_t now)
{
	struct egress_frame fr;
	const char *why = "?";
	uint8_t type = 0;
	int r;

	buf_reset(&f->payload);
	r = frame_decoder_take(&f->dec, &type, &f->payload);
	if (r < 0) {
		return r;
	}
	r = egress_mux_receive(&f->mux, EGRESS_FROM_HOST, type, buf_ptr(&f->payload), buf_len(&f->payload), &fr, &why);
	if (r < 0) {
		log_error("the host broke the egress protocol (frame type 0x%02x): %s", type, why);
		return -EPROTO;
	}
	return on_frame(f, &fr, now);
}

static int read_port(struct fwd *f, int64_t now)
{
	ssize_t n = RETRY_EINTR(read(f->port_fd, f->pin, CHUNK));
	size_t off = 0;

	if (n < 0) {
		return port_errno();
	}
	if (n == 0) {
		return -EPIPE;
	}
	while (off < (size_t)n) {
		size_t used = 0;
		int r = frame_decoder_feed(&f->dec, f->pin + off, (size_t)n - off, &used);
		off += used;
		if (r < 0) {
			log_error("the host broke the egress protocol: a frame over %zu bytes", EGRESS_MAX_FRAME);
			return -EPROTO;
		}
		if (r == 1) {
			r = take_frame(f, now);
			if (r < 0) {
				return r;
			}
		}
	}
	return 0;
}

static int flush_port(struct fwd *f)
{
	while (buf_len(&f->out) > 0) {
		ssize_t n = f->port_is_sock ? RETRY_EINTR(send(f->port_fd, buf_ptr(&f->out), buf_len(&f->out),
							       MSG_NOSIGNAL | MSG_DONTWAIT))
					    : RETRY_EINTR(write(f->port_fd, buf_ptr(&f->out), buf_len(&f->out)));
		if (n < 0) {
			return port_errno();
		}
		(void)buf_consume(&f->out, (size_t)n);
	}
	return 0;
}

static int flush_client(struct fwd *f, struct slot *s)
{
	while (buf_len(&s->to_client) > 0) {
		ssize_t n = RETRY_EINTR(
			send(s->fd, buf_ptr(&s->to_client), buf_len(&s->to_client), MSG_NOSIGNAL | MSG_DONTWAIT));
		if (n < 0) {
			return again() ? 0 : client_failed(f, s);
		}
		(void)buf_consume(&s->to_client, (size_t)n);
	}
	return 0;
}

/* Client bytes become one DATA frame, never more than the host's credit; EOF becomes FIN. */
static int read_client(struct fwd *f, struct slot *s)
{
	const struct egress_stream *st = egress_mux_find(&f->mux, s->id);
	struct egress_frame fr = { .type = EGRESS_DATA, .id = s->id, .data = f->chunk };
	ssize_t n = RETRY_EINTR(recv(s->fd, f->chunk, MIN(CHUNK, (size_t)st->credit[EGRESS_FROM_GUEST]), 0));

	if (n < 0) {
		return again() ? 0 : client_failed(f, s);
	}
	if (n == 0) {
		fr = (struct egress_frame){ .type = EGRESS_FIN, .id = s->id };
		return queue(f, &fr);
	}
	fr.len = (size_t)n;
	return queue(f, &fr);
}

/* A draining client's bytes are dropped until its EOF, at most DRAIN_BYTES. */
static void drain_client(struct fwd *f, struct slot *s)
{
	ssize_t n = RETRY_EINTR(recv(s->fd, f->chunk, CHUNK, 0));

	if (n < 0 && again()) {
		return;
	}
	if (n > 0) {
		s->drained += (size_t)n;
	}
	if (n <= 0 || s->drained > DRAIN_BYTES) {
		slot_close(s);
	}
}

/* Grant the host credit up to GUEST_EGRESS_WINDOW, counting what the client has not read yet. */
static int grant(struct fwd *f, struct slot *s, const struct egress_stream *st)
{
	struct egress_frame fr = { .type = EGRESS_WINDOW, .id = s->id };
	size_t held = buf_len(&s->to_client) + st->credit[EGRESS_FROM_HOST];

	if ((st->flags & EGRESS_S_FIN_HOST) || held + GRANT_MIN > GUEST_EGRESS_WINDOW) {
		return 0;
	}
	fr.credit = (uint32_t)(GUEST_EGRESS_WINDOW - held);
	return queue(f, &fr);
}

static void shut(struct slot *s)
{
	if (!(s->flags & SL_SHUT)) {
		(void)shutdown(s->fd, SHUT_WR);
		s->flags |= SL_SHUT;
	}
}

/* One slot's turn before the poll: write, half-close, finish, grant, time out. */
static int service(struct fwd *f, struct slot *s, int64_t now)
{
	const struct egress_stream *st;
	int r = flush_client(f, s);

	if (r < 0 || s->fd < 0) {
		return r;
	}
	if (s->id == 0) {
		if (buf_len(&s->to_client) == 0) {
			shut(s);
		}
		if (now >= s->drain_until) {
			slot_close(s);
		}
		return 0;
	}
	st = egress_mux_find(&f->mux, s->id);
	if (!(st->flags & EGRESS_S_ESTABLISHED)) {
		return 0; /* OPEN sent: nothing else goes until the host answers */
	}
	if ((st->flags & EGRESS_S_FIN_HOST) && buf_len(&s->to_client) == 0) {
		shut(s);
	}
	if ((st->flags & EGRESS_S_FIN_GUEST) && (s->flags & SL_SHUT)) {
		/* Both ways finished and the client has every byte. */
		r = send_close(f, s, EGRESS_CLOSE_DONE);
		slot_close(s);
		return r;
	}
	return grant(f, s, st);
}

static short slot_events(const struct fwd *f, const struct slot *s)
{
	const struct egress_stream *st;
	short ev = buf_len(&s->to_client) > 0 ? POLLOUT : 0;

	if (s->id == 0) {
		return (s->flags & SL_SHUT) ? (short)(ev | POLLIN) : ev;
	}
	st = egress_mux_find(&f->mux, s->id);
	if ((st->flags & EGRESS_S_ESTABLISHED) && !(st->flags & EGRESS_S_FIN_GUEST) &&
	    st->credit[EGRESS_FROM_GUEST] > 0 && buf_avail(&f->out) >= DATA_ROOM) {
		ev |= POLLIN;
	}
	return ev;
}

static size_t build_poll(struct fwd *f, int64_t now, int *ret_timeout)
{
	bool room = buf_avail(&f->out) >= CTRL_RESERVE, paused = now < f->accept_pause_until;
	int64_t next = paused ? f->accept_pause_until : INT64_MAX;
	size_t np = 2;

	f->pfd[0] = (struct pollfd){ .fd = f->port_fd,
				     .events = (short)((room ? POLLIN : 0) | (buf_len(&f->out) > 0 ? POLLOUT : 0)) };
	f->pfd[1] = (struct pollfd){ .fd = room && !paused ? f->listen_fd : -1, .events = POLLIN };
	for (size_t i = 0; i < SLOTS; i++) {
		struct slot *s = &f->slots[i];
		short ev = s->fd >= 0 ? slot_events(f, s) : 0;
		if (s->fd >= 0 && s->id == 0) {
			next = MIN(next, s->drain_until);
		}
		if (ev) {
			f->pslot[np] = s;
			f->pfd[np++] = (struct pollfd){ .fd = s->fd, .events = ev };
		}
	}
	*ret_timeout = next == INT64_MAX ? -1 : (int)MIN(MAX(next - now, 0), 60000);
	return np;
}

static int on_client(struct fwd *f, struct slot *s, int fd)
{
	short want;
	int r = 0;

	if (s->fd != fd) {
		return 0; /* closed (and maybe reused) earlier in this turn */
	}
	want = slot_events(f, s);
	if (want & POLLOUT) {
		r = flush_client(f, s);
	}
	if (r < 0 || s->fd < 0 || !(want & POLLIN)) {
		return r;
	}
	if (s->id == 0) {
		drain_client(f, s);
		return 0;
	}
	return read_client(f, s);
}

static int dispatch(struct fwd *f, size_t np, int64_t now)
{
	short pev = f->pfd[0].revents;
	int r = 0;

	if (pev & POLLIN) {
		r = read_port(f, now);
	} else if (pev & (POLLHUP | POLLERR)) {
		r = -EPIPE;
	}
	if (r >= 0 && (pev & POLLOUT)) {
		r = flush_port(f);
	}
	if (r >= 0 && f->pfd[1].revents) {
		r = on_accept(f, now);
	}
	for (size_t i = 2; r >= 0 && i < np; i++) {
		if (f->pfd[i].revents) {
			r = on_client(f, f->pslot[i], f->pfd[i].fd);
		}
	}
	return r;
}

static int turn(struct fwd *f)
{
	int64_t now = now_ms();
	int r, timeout;
	size_t np;

	for (size_t i = 0; i < SLOTS; i++) {
		r = f->slots[i].fd >= 0 ? service(f, &f->slots[i], now) : 0;
		if (r < 0) {
			return r;
		}
	}
	r = flush_port(f);
	if (r < 0) {
		return r;
	}
	np = build_poll(f, now, &timeout);
	if (poll(f->pfd, np, timeout) < 0) {
		return errno == EINTR ? 0 : -errno;
	}
	return dispatch(f, np, now_ms());
}

static void fwd_free(struct fwd *f)
{
	if (!f) {
		return;
	}
	for (size_t i = 0; i < SLOTS; i++) {
		f->slots[i].flags |= SL_ABORT;
		slot_close(&f->slots[i]);
	}
	frame_decoder_release(&f->dec);
	buf_release(&f->payload);
	buf_release(&f->out);
	free(f->chunk);
	free(f->pin);
	free(f);
}

static int fwd_new(int port_fd, int listen_fd, struct fwd **ret)
{
	struct fwd *f = calloc(1, sizeof(*f));
	struct stat st;
	int r;

	if (!f) {
		return -ENOMEM;
	}
	f->port_fd = port_fd;
	f->listen_fd = listen_fd;
	f->port_is_sock = fstat(port_fd, &st) == 0 && S_ISSOCK(st.st_mode);
	egress_mux_init(&f->mux, EGRESS_FROM_GUEST);
	for (size_t i = 0; i < SLOTS; i++) {
		f->slots[i].fd = -1;
	}
	f->chunk = malloc(CHUNK);
	f->pin = malloc(CHUNK);
	r = f->chunk && f->pin ? frame_decoder_init(&f->dec, EGRESS_MAX_FRAME) : -ENOMEM;
	if (r >= 0) {
		r = buf_init(&f->payload, EGRESS_MAX_FRAME, 0);
	}
	if (r >= 0) {
		r = buf_init(&f->out, OUT_MAX, 0);
	}
	if (r < 0) {
		fwd_free(f);
		return r;
	}
	*ret = f;
	return 0;
}

int guest_egress_run(int port_fd, int listen_fd)
{
	struct fwd *f = NULL;
	int r = fwd_new(port_fd, listen_fd, &f);

	while (r >= 0) {
		r = turn(f);
	}
	/* Every client is closed with the mux: nothing can pass once the channel is dead. */
	fwd_free(f);
	return r;
}

int guest_egress_listen(uint16_t port, int *ret_fd)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	_cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, SOMAXCONN) < 0) {
		return -errno;
	}
	*ret_fd = steal_fd(fd);
	return 0;
}

/* virtio-serial reports POLLHUP while the host end is not connected; wait for it (boot races). */
static int wait_host(int port_fd)
{
	for (int waited = 0; waited < HOST_WAIT_MS; waited += 10) {
		struct pollfd p = { .fd = port_fd, .events = POLLIN };
		struct timespec ts = { .tv_nsec = 10 * 1000000L };
		if (poll(&p, 1, 0) >= 0 && !(p.revents & POLLHUP)) {
			return 0;
		}
		(void)nanosleep(&ts, NULL);
	}
	return -ETIMEDOUT;
}

static _noreturn_ void child_main(int port_fd)
{
	int kmsg, lfd = -1, r;

	/* Out of PID 1's way: its own session, no fd of PID 1's but the port. */
	(void)setsid();
	(void)signal(SIGPIPE, SIG_IGN);
	if (port_fd > 3) {
		(void)syscall(SYS_close_range, 3u, (unsigned)port_fd - 1, 0u);
	}
	(void)syscall(SYS_close_range, (unsigned)port_fd + 1, ~0u, 0u);
	kmsg = open("/dev/kmsg", O_WRONLY | O_CLOEXEC);
	if (kmsg >= 0) {
		log_set_fd(kmsg);
	}
	/* <3>: the console shows the line even under "quiet", as PID 1's kmsg lines. */
	log_set_ident("<3>tkbox-egress");
	r = wait_host(port_fd);
	if (r >= 0) {
		r = guest_egress_listen(GUEST_EGRESS_PORT, &lfd);
	}
	if (r >= 0) {
		r = guest_egress_run(port_fd, lfd);
	}
	log_error("the proxy forwarder on 127.0.0.1:%d stopped: %s", GUEST_EGRESS_PORT,
		  r == -EPIPE ? "the host closed tkbox.egress" : tk_strerror(r));
	_exit(1);
}

int guest_egress_start(int port_fd)
{
	pid_t pid = fork();

	if (pid < 0) {
		return -errno;
	}
	if (pid == 0) {
		child_main(port_fd);
	}
	return (int)pid;
}

static const char apt_conf[] = "// Written by tkbox-guest at boot: apt goes through the box's proxy (docs/egress.md).\n"
			       "Acquire::http::Proxy \"http://127.0.0.1:3128/\";\n"
			       "Acquire::https::Proxy \"http://127.0.0.1:3128/\";\n";

int guest_egress_write_apt_proxy(int rootfd)
{
	_cleanup_close_ int apt = safe_openat(rootfd, APT_DIR, O_RDONLY | O_DIRECTORY, 0);
	_cleanup_close_ int dir = -1, fd = -1;
	int r;

	if (apt < 0) {
		return apt == -ENOENT ? 0 : apt;
	}
	if (mkdirat(apt, "apt.conf.d", 0755) < 0 && errno != EEXIST) {
		return -errno;
	}
	dir = openat(apt, "apt.conf.d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir < 0) {
		return errno == ENOTDIR ? -ELOOP : -errno;
	}
	/* A new file, then a rename: rename replaces a planted symlink itself, never what it names. */
	(void)unlinkat(dir, APT_CONF_TMP, 0);
	fd = openat(dir, APT_CONF_TMP, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		return -errno;
	}
	r = io_write_all(fd, apt_conf, sizeof(apt_conf) - 1);
	if (r >= 0 && renameat(dir, APT_CONF_TMP, dir, APT_CONF) < 0) {
		r = -errno;
	}
	if (r < 0) {
		(void)unlinkat(dir, APT_CONF_TMP, 0);
		return r;
	}
	return 1;
}
