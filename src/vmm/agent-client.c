/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "banned.h"
#include "clock.h"
#include "frame.h"
#include "vmm/agent-client.h"

#define RBUF_SIZE ((size_t)64 * 1024)

struct tracked {
	bool used;
	bool started;
	bool stdin_open;
	uint32_t id;
	uint64_t out_unacked; /* output bytes received and not yet credited back */
	uint64_t out_owed; /* delivered to the caller, to credit back */
	uint64_t stdin_credit;
};

struct agent_client {
	int fd;
	int dead; /* 0 or the negative errno that killed the connection */
	struct frame_decoder dec;
	struct buf payload;
	struct buf out;
	uint8_t *rbuf;
	size_t rpos, rlen;
	struct tracked t[AGENT_CLIENT_MAX_TRACKED];
	uint32_t next_id;
	uint32_t next_ping;
	uint32_t pings[AGENT_CLIENT_MAX_PINGS]; /* outstanding ping ids (0: free) */
	bool shutdown_sent;
	bool shutdown_acked;
	char why[160]; /* the violation that killed the connection, for the record */
	struct agent_msg cur; /* the last event's message (owns its strings) */
	uint64_t bytes_in;
	uint64_t clock_due_ms; /* agent_client_clock_tick: 0 = not sent yet */
	uint32_t diff_id; /* the diff asked and not yet answered (END or ERROR), 0: none */
	uint64_t diff_bytes; /* DIFF_DATA bytes received for it */
};

static struct tracked *track_find(struct agent_client *c, uint32_t id)
{
	for (size_t i = 0; i < ARRAY_SIZE(c->t); i++) {
		if (c->t[i].used && c->t[i].id == id) {
			return &c->t[i];
		}
	}
	return NULL;
}

int agent_client_new(int fd, struct agent_client **ret)
{
	struct agent_client *c;
	int r, fl;

	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		return -errno;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		return -ENOMEM;
	}
	c->fd = fd;
	c->next_id = 1;
	c->next_ping = 1;
	c->rbuf = malloc(RBUF_SIZE);
	r = c->rbuf ? 0 : -ENOMEM;
	if (r >= 0) {
		r = frame_decoder_init(&c->dec, AGENT_CLIENT_MAX_FRAME);
	}
	if (r >= 0) {
		r = buf_init(&c->payload, AGENT_CLIENT_MAX_FRAME, 0);
	}
	if (r >= 0) {
		r = buf_init(&c->out, AGENT_CLIENT_OUT_MAX, 0);
	}
	if (r < 0) {
		c->fd = -1;
		agent_client_free(c);
		return r;
	}
	*ret = c;
	return 0;
}

void agent_client_free(struct agent_client *c)
{
	if (!c) {
		return;
	}
	if (c->fd >= 0) {
		(void)close(c->fd);
	}
	frame_decoder_release(&c->dec);
	buf_release(&c->payload);
	buf_release(&c->out);
	agent_msg_release(&c->cur);
	free(c->rbuf);
	free(c);
}

uint64_t agent_client_bytes_in(const struct agent_client *c)
{
	return c->bytes_in;
}

static int kill_conn(struct agent_client *c, int r)
{
	if (!c->dead) {
		c->dead = r;
		/* Stop reading: whatever else the guest sends is never looked at. */
		(void)shutdown(c->fd, SHUT_RDWR);
	}
	return c->dead;
}

int agent_client_ping(struct agent_client *c, uint32_t *ret_id)
{
	uint32_t id;
	int r;

	size_t slot = ARRAY_SIZE(c->pings);

	if (c->dead) {
		return c->dead;
	}
	for (size_t i = 0; i < ARRAY_SIZE(c->pings); i++) {
		if (c->pings[i] == 0) {
			slot = i;
			break;
		}
	}
	if (slot == ARRAY_SIZE(c->pings)) {
		return -EBUSY;
	}
	id = c->next_ping;
	r = agent_encode_simple(&c->out, AGENT_MSG_PING, id);
	if (r < 0) {
		return r;
	}
	c->pings[slot] = id;
	c->next_ping = id >= AGENT_MAX_ID ? 1 : id + 1;
	if (ret_id) {
		*ret_id = id;
	}
	return 0;
}

int agent_client_exec(struct agent_client *c, char *const *argv, char *const *env, const char *cwd, bool stdin_open,
		      uint32_t *ret_id)
{
	struct agent_msg m = { .type = AGENT_MSG_EXEC, .stdin_open = stdin_open };
	struct tracked *t = NULL;
	int r;

	if (c->dead) {
		return c->dead;
	}
	for (size_t i = 0; i < ARRAY_SIZE(c->t); i++) {
		if (!c->t[i].used) {
			t = &c->t[i];
			break;
		}
	}
	if (!t) {
		return -EBUSY;
	}
	m.id = c->next_id;
	m.argv = (char **)argv;
	while (argv[m.argc]) {
		m.argc++;
	}
	m.env = (char **)env;
	while (env && env[m.envc]) {
		m.envc++;
	}
	m.cwd = (char *)cwd;
	r = agent_msg_encode(&m, &c->out);
	if (r < 0) {
		return r;
	}
	*t = (struct tracked){ .used = true, .id = m.id, .stdin_open = stdin_open, .stdin_credit = AGENT_STDIN_WINDOW };
	c->next_id = m.id >= AGENT_MAX_ID ? 1 : m.id + 1;
	*ret_id = m.id;
	return 0;
}

size_t agent_client_stdin_credit(const struct agent_client *c, uint32_t id)
{
	for (size_t i = 0; i < ARRAY_SIZE(c->t); i++) {
		if (c->t[i].used && c->t[i].id == id && c->t[i].stdin_open) {
			return (size_t)c->t[i].stdin_credit;
		}
	}
	return 0;
}

int agent_client_stdin(struct agent_client *c, uint32_t id, const void *p, size_t n, size_t *ret_sent)
{
	struct tracked *t = track_find(c, id);
	const uint8_t *b = p;
	size_t sent = 0;
	int r;

	if (c->dead) {
		return c->dead;
	}
	if (!t || !t->stdin_open) {
		return -ENOENT;
	}
	while (sent < n && t->stdin_credit > 0 && buf_avail(&c->out) >= AGENT_MAX_DATA + 16) {
		size_t k = MIN(MIN(n - sent, AGENT_MAX_DATA), (size_t)t->stdin_credit);
		r = agent_encode_data(&c->out, AGENT_MSG_STDIN, id, b + sent, k);
		if (r < 0) {
			return r;
		}
		t->stdin_credit -= k;
		sent += k;
	}
	*ret_sent = sent;
	return 0;
}

int agent_client_stdin_close(struct agent_client *c, uint32_t id)
{
	struct tracked *t = track_find(c, id);
	int r;

	if (c->dead) {
		return c->dead;
	}
	if (!t || !t->stdin_open) {
		return -ENOENT;
	}
	r = agent_encode_data(&c->out, AGENT_MSG_STDIN, id, NULL, 0);
	if (r >= 0) {
		t->stdin_open = false;
	}
	return r;
}

int agent_client_clock(struct agent_client *c)
{
	struct agent_msg m = { .type = AGENT_MSG_CLOCK };
	struct timespec ts;

	if (c->dead) {
		return c->dead;
	}
	/* Stamped as it is queued: the queue is written before the next guest frame is read. */
	if (clock_gettime(CLOCK_REALTIME, &ts) < 0) {
		return -errno;
	}
	m.clock_sec = (int64_t)ts.tv_sec;
	m.clock_nsec = (int64_t)ts.tv_nsec;
	return agent_msg_encode(&m, &c->out);
}

int agent_client_clock_tick(struct agent_client *c, uint64_t now_ms, uint64_t *ret_due_ms)
{
	int r;

	if (c->clock_due_ms == 0 || now_ms >= c->clock_due_ms) {
		r = agent_client_clock(c);
		if (r < 0 && r != -E2BIG) {
			return r;
		}
		c->clock_due_ms = r >= 0 ? now_ms + AGENT_CLOCK_INTERVAL_MS : now_ms + 1000;
	}
	*ret_due_ms = c->clock_due_ms;
	return 0;
}

int agent_client_signal(struct agent_client *c, uint32_t id, int sig)
{
	struct agent_msg m = { .type = AGENT_MSG_SIGNAL, .id = id, .signal = sig };

	if (c->dead) {
		return c->dead;
	}
	if (!agent_signal_allowed(sig)) {
		return -EINVAL;
	}
	return agent_msg_encode(&m, &c->out);
}

int agent_client_shutdown(struct agent_client *c)
{
	int r;

	if (c->dead) {
		return c->dead;
	}
	r = agent_encode_simple(&c->out, AGENT_MSG_SHUTDOWN, 0);
	if (r >= 0) {
		c->shutdown_sent = true;
	}
	return r;
}

int agent_client_diff(struct agent_client *c, uint32_t *ret_id)
{
	uint32_t id;
	int r;

	if (c->dead) {
		return c->dead;
	}
	if (c->diff_id != 0) {
		return -EBUSY;
	}
	/* From the execs' numbers: an ERROR's id then names the diff or one exec, never both. */
	id = c->next_id;
	while (track_find(c, id)) {
		id = id >= AGENT_MAX_ID ? 1 : id + 1;
	}
	r = agent_encode_simple(&c->out, AGENT_MSG_DIFF, id);
	if (r < 0) {
		return r;
	}
	c->next_id = id >= AGENT_MAX_ID ? 1 : id + 1;
	c->diff_id = id;
	c->diff_bytes = 0;
	*ret_id = id;
	return 0;
}

const char *agent_client_violation(const struct agent_client *c)
{
	return c->why[0] ? c->why : NULL;
}

int agent_client_fd(const struct agent_client *c)
{
	return c->fd;
}

bool agent_client_buffered(const struct agent_client *c)
{
	return !c->dead && c->rpos < c->rlen;
}

static void return_credit(struct agent_client *c, uint64_t min)
{
	for (size_t i = 0; i < ARRAY_SIZE(c->t); i++) {
		struct tracked *t = &c->t[i];
		struct agent_msg w = { .type = AGENT_MSG_WINDOW };
		if (!t->used || t->out_owed == 0 || t->out_owed < min) {
			continue;
		}
		w.id = t->id;
		w.bytes = (int64_t)t->out_owed;
		if (agent_msg_encode(&w, &c->out) >= 0) {
			t->out_unacked -= t->out_owed;
			t->out_owed = 0;
		}
	}
}

static int flush(struct agent_client *c)
{
	while (buf_len(&c->out) > 0) {
		ssize_t n = send(c->fd, buf_ptr(&c->out), buf_len(&c->out), MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR) {
				return 0;
			}
			return -errno;
		}
		(void)buf_consume(&c->out, (size_t)n);
	}
	return 0;
}

int agent_client_flush(struct agent_client *c)
{
	int r;

	if (c->dead) {
		return c->dead;
	}
	r = flush(c);
	if (r < 0) {
		return kill_conn(c, r);
	}
	return buf_len(&c->out) > 0 ? 1 : 0;
}

/* Note why the guest is cut off (the supervisor records it), and fail with -EPROTO (or r). */
static int violation(struct agent_client *c, uint8_t type, const char *what, int r)
{
	if (!c->why[0]) {
		(void)snprintf(c->why, sizeof(c->why), "protocol violation: frame type 0x%02x (%s)", type, what);
	}
	return r;
}

static bool take_ping(struct agent_client *c, uint32_t id)
{
	for (size_t i = 0; id != 0 && i < ARRAY_SIZE(c->pings); i++) {
		if (c->pings[i] == id) {
			c->pings[i] = 0;
			return true;
		}
	}
	return false;
}

/*
 * Validate one decoded guest message against what the host asked for, and
 * turn it into an event. A frame the host never asked for is a violation: a
 * pong without its ping, an ack without a shutdown, anything about an exec
 * the host never started or that is already over.
 */
static int to_event(struct agent_client *c, struct agent_event *ev)
{
	struct agent_msg *m = &c->cur;
	struct tracked *t = NULL;

	*ev = (struct agent_event){ .id = m->id, .msg = m };
	/* The diff's frames: only for the one diff asked, its data's count checked at its end. */
	if (m->type == AGENT_MSG_DIFF_DATA || m->type == AGENT_MSG_DIFF_END ||
	    (m->type == AGENT_MSG_ERROR && m->id != 0 && m->id == c->diff_id)) {
		if (c->diff_id == 0 || m->id != c->diff_id) {
			return violation(c, m->type, "about a diff the host never asked for or that is over", -EPROTO);
		}
		if (m->type == AGENT_MSG_DIFF_DATA) {
			/* Past PATCH_MAX_BYTES the caller refuses the patch (and drops the rest); the count goes on. */
			c->diff_bytes += m->data_len;
			ev->type = AGENT_EV_DIFF_DATA;
			ev->data = m->data;
			ev->len = m->data_len;
			return 0;
		}
		if (m->type == AGENT_MSG_DIFF_END && (m->bytes < 0 || (uint64_t)m->bytes != c->diff_bytes)) {
			return violation(c, m->type, "a diff end whose byte count is not the data's", -EPROTO);
		}
		c->diff_id = 0;
		ev->type = m->type == AGENT_MSG_DIFF_END ? AGENT_EV_DIFF_END : AGENT_EV_ERROR;
		ev->bytes = m->bytes;
		ev->diff = m->type == AGENT_MSG_ERROR;
		ev->err_code = m->err_code;
		ev->message = m->message;
		return 0;
	}
	if (m->type != AGENT_MSG_PONG && m->type != AGENT_MSG_SHUTDOWN_ACK &&
	    !(m->type == AGENT_MSG_ERROR && m->id == 0)) {
		t = track_find(c, m->id);
		if (!t) {
			return violation(c, m->type, "about an exec the host never started or that is over", -EPROTO);
		}
	}
	switch (m->type) {
	case AGENT_MSG_PONG:
		/* A pong for a ping never sent (or already answered) is a lie. */
		if (!take_ping(c, m->id)) {
			return violation(c, m->type, "a pong without an outstanding ping", -EPROTO);
		}
		ev->type = AGENT_EV_PONG;
		return 0;
	case AGENT_MSG_SHUTDOWN_ACK:
		if (!c->shutdown_sent || c->shutdown_acked) {
			return violation(c, m->type, "a shutdown ack without a shutdown", -EPROTO);
		}
		c->shutdown_acked = true;
		ev->type = AGENT_EV_SHUTDOWN_ACK;
		return 0;
	case AGENT_MSG_STARTED:
		if (t->started) {
			return violation(c, m->type, "a second start for one exec", -EPROTO);
		}
		t->started = true;
		ev->type = AGENT_EV_STARTED;
		ev->pid = m->pid;
		return 0;
	case AGENT_MSG_STDOUT:
	case AGENT_MSG_STDERR:
		if (!t->started) {
			return violation(c, m->type, "output before the exec started", -EPROTO);
		}
		t->out_unacked += m->data_len;
		if (t->out_unacked > AGENT_OUT_WINDOW) {
			return violation(c, m->type, "output beyond the credit the host granted", -EPROTO);
		}
		t->out_owed += m->data_len;
		ev->type = m->type == AGENT_MSG_STDOUT ? AGENT_EV_STDOUT : AGENT_EV_STDERR;
		ev->data = m->data;
		ev->len = m->data_len;
		return 0;
	case AGENT_MSG_EXIT:
		if (!t->started) {
			return violation(c, m->type, "an exit before the exec started", -EPROTO);
		}
		ev->type = AGENT_EV_EXIT;
		ev->exit = m->exit;
		t->used = false;
		return 0;
	case AGENT_MSG_ERROR:
		ev->type = AGENT_EV_ERROR;
		ev->err_code = m->err_code;
		ev->message = m->message;
		/* A refused exec is over; an error about a running one (stdin beyond the window) is not. */
		if (t && !t->started) {
			t->used = false;
		}
		return 0;
	case AGENT_MSG_STDIN_WINDOW:
		if (t->stdin_credit + (uint64_t)m->bytes > AGENT_STDIN_WINDOW) {
			return violation(c, m->type, "stdin credit beyond what the host sent", -EPROTO);
		}
		t->stdin_credit += (uint64_t)m->bytes;
		ev->type = AGENT_EV_STDIN_CREDIT;
		return 0;
	default:
		return violation(c, m->type, "not a type a guest may send", -EPROTO);
	}
}

/* Decode one complete frame from the buffered bytes: 1 with an event, 0 when more bytes are needed. */
static int pump(struct agent_client *c, struct agent_event *ev)
{
	while (c->rpos < c->rlen) {
		size_t used = 0;
		uint8_t type;
		int r = frame_decoder_feed(&c->dec, c->rbuf + c->rpos, c->rlen - c->rpos, &used);
		c->rpos += used;
		if (r < 0) {
			if (!c->why[0]) {
				(void)snprintf(
					c->why, sizeof(c->why),
					"protocol violation: frame type 0x%02x announces %u bytes (the cap is %zu)",
					c->dec.type, (unsigned)c->dec.want, (size_t)AGENT_CLIENT_MAX_FRAME);
			}
			return r;
		}
		if (r == 0) {
			continue;
		}
		buf_reset(&c->payload);
		r = frame_decoder_take(&c->dec, &type, &c->payload);
		if (r < 0) {
			return r;
		}
		if (!agent_msg_from_guest(type)) {
			return violation(c, type, "not a type a guest may send", -EPROTO);
		}
		r = agent_msg_decode(type, buf_ptr(&c->payload), buf_len(&c->payload), &c->cur);
		if (r < 0) {
			return violation(c, type, r == -E2BIG ? "over a protocol cap" : "malformed payload",
					 r == -E2BIG ? -E2BIG : -EPROTO);
		}
		r = to_event(c, ev);
		if (r < 0) {
			return r;
		}
		return 1;
	}
	return 0;
}

int agent_client_next(struct agent_client *c, int timeout_ms, struct agent_event *ret)
{
	uint64_t deadline = timeout_ms >= 0 ? clock_mono_ms() + (uint64_t)timeout_ms : UINT64_MAX;
	bool polled = false;
	int r;

	if (c->dead) {
		return c->dead;
	}
	agent_msg_release(&c->cur);
	return_credit(c, AGENT_OUT_WINDOW / 4);
	/*
	 * The host's requests go out before more guest bytes are decoded: a guest
	 * that keeps the read buffer full must not hold back a signal, an exec or
	 * a shutdown (issue 10: a pong flood delayed an exec by 960 s).
	 */
	r = flush(c);
	if (r < 0) {
		return kill_conn(c, r);
	}
	for (;;) {
		struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
		uint64_t t;
		int wait;
		ssize_t n;

		r = pump(c, ret);
		if (r < 0) {
			return kill_conn(c, r);
		}
		if (r == 1) {
			return 1;
		}
		/* About to wait: hand back all credit so the guest never stalls on us. */
		return_credit(c, 1);
		r = flush(c);
		if (r < 0) {
			return kill_conn(c, r);
		}
		if (buf_len(&c->out) > 0) {
			pfd.events |= POLLOUT;
		}
		t = clock_mono_ms();
		if (polled && t >= deadline) {
			return 0;
		}
		/* A timeout of 0 still looks at the socket once, without waiting. */
		wait = deadline == UINT64_MAX ? -1 : t >= deadline ? 0 : (int)MIN(deadline - t, (uint64_t)INT32_MAX);
		r = poll(&pfd, 1, wait);
		polled = true;
		if (r < 0) {
			if (errno == EINTR) {
				continue;
			}
			return kill_conn(c, -errno);
		}
		if (r == 0) {
			continue;
		}
		if (pfd.revents & POLLIN) {
			n = recv(c->fd, c->rbuf, RBUF_SIZE, MSG_DONTWAIT);
			if (n < 0) {
				if (errno == EAGAIN || errno == EINTR) {
					continue;
				}
				return kill_conn(c, -errno);
			}
			if (n == 0) {
				return kill_conn(c, -EPIPE);
			}
			c->rpos = 0;
			c->rlen = (size_t)n;
			c->bytes_in += (uint64_t)n;
		} else if (pfd.revents & (POLLHUP | POLLERR)) {
			return kill_conn(c, -EPIPE);
		}
	}
}
