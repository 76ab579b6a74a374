/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "banned.h"
#include "clock.h"
#include "crypto.h"
#include "daemon/daemon.h"
#include "daemon/signer-link.h"
#include "log.h"
#include "signer/client.h"
#include "signer/rpc.h"

/*
 * Long-lived connections: each says hello (role runtime) once and then
 * carries one call at a time. The signer answers a connection's requests in
 * order, so a call checks a connection out of the pool for its whole life
 * (an approval_wait long poll holds only its own) and gives it back after a
 * whole reply. A connection that timed out, was abandoned or broke is closed,
 * never given back: a late reply on it would answer the next call.
 */
static struct {
	char *socket_path;
	unsigned timeout_s;
	pthread_mutex_t mu;
	struct signer_client *idle[SIGNER_LINK_MAX_IDLE];
	int64_t idle_since[SIGNER_LINK_MAX_IDLE];
	size_t n_idle;
} L = { .mu = PTHREAD_MUTEX_INITIALIZER };

int signer_link_init(const char *socket_path, unsigned timeout_s)
{
	free(L.socket_path);
	L.socket_path = strdup(socket_path);
	L.timeout_s = timeout_s;
	return L.socket_path ? 0 : -ENOMEM;
}

void signer_link_shutdown(void)
{
	pthread_mutex_lock(&L.mu);
	while (L.n_idle > 0) {
		signer_client_free(L.idle[--L.n_idle]);
	}
	pthread_mutex_unlock(&L.mu);
	free(L.socket_path);
	L.socket_path = NULL;
}

const char *signer_link_socket(void)
{
	return L.socket_path;
}

/* Every step of a call (connect, hello, the request, the reply) ends by the call's deadline. */

/* The deadline of a call starting now that may take extra_ms more than an ordinary one. */
int64_t signer_link_deadline(int64_t extra_ms)
{
	return (int64_t)clock_mono_ms() + (int64_t)L.timeout_s * 1000 + extra_ms;
}

/* A blocking send or connect on fd gives up at the deadline (at least 1 ms: 0 would mean never). */
static void sock_deadline(int fd, int64_t deadline)
{
	int64_t left = MAX(deadline - (int64_t)clock_mono_ms(), (int64_t)1);
	struct timeval tv = { .tv_sec = left / 1000, .tv_usec = (left % 1000) * 1000 };

	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/*
 * One request and its reply on c, by the deadline. abandon_fd (or -1) is the
 * API client's connection: when the client hangs up, the call is abandoned
 * (-ECANCELED). 0 with the reply; -EREMOTEIO with *ret (the error reply) when
 * the signer refused; -ETIMEDOUT past the deadline; -ECONNRESET when the
 * connection ended without a reply. req stays the caller's.
 */
static int signer_rpc(struct signer_client *c, const json_t *req, int fd, int abandon_fd, int64_t deadline,
		      json_t **ret)
{
	json_t *reply = NULL;
	int r;

	/* A request of up to 256 KiB may not fit the socket's buffer: the send blocks, until the deadline. */
	if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) & ~O_NONBLOCK) < 0) {
		return negative_errno();
	}
	sock_deadline(c->fd, deadline);
	r = signer_client_send(c, req, fd);
	if (r == -EAGAIN) {
		return -ETIMEDOUT;
	}
	if (r < 0 && r != -EPIPE && r != -ECONNRESET) {
		return r;
	}
	/* The reply is read without blocking, by poll: a reply in pieces cannot stretch the deadline. */
	if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) < 0) {
		return negative_errno();
	}
	for (;;) {
		struct pollfd p[2] = { { .fd = c->fd, .events = POLLIN }, { .fd = abandon_fd, .events = 0 } };
		int64_t left;
		int k;

		/* A refusal may have come before the request was sent whole (EPIPE): it is read here too. */
		r = signer_client_recv(c, &reply);
		if (r != -EAGAIN) {
			break;
		}
		left = deadline - (int64_t)clock_mono_ms();
		if (left <= 0) {
			return -ETIMEDOUT;
		}
		k = poll(p, abandon_fd >= 0 ? 2 : 1, (int)MIN(left, (int64_t)INT32_MAX));
		if (k < 0 && errno != EINTR) {
			return negative_errno();
		}
		/* Only a client gone both ways abandons the call (POLLHUP): a half-close is still a client. */
		if (k > 0 && abandon_fd >= 0 && (p[1].revents & (POLLHUP | POLLERR))) {
			return -ECANCELED;
		}
	}
	if (r < 0) {
		return r == -EPIPE ? -ECONNRESET : r;
	}
	*ret = reply;
	return signer_reply_error(reply, NULL) ? -EREMOTEIO : 0;
}

/* Waits ms, or less when abandon_fd hangs up: -ECANCELED then. */
static int pause_ms(int64_t ms, int abandon_fd)
{
	struct pollfd p = { .fd = abandon_fd, .events = 0 };

	if (poll(&p, abandon_fd >= 0 ? 1 : 0, (int)ms) > 0 && (p.revents & (POLLHUP | POLLERR))) {
		return -ECANCELED;
	}
	return 0;
}

/*
 * Connect and say hello by the deadline. The connect is bounded too: a signer
 * that does not accept fills its listen backlog, and connect then blocks. A
 * signer that is restarting refuses connections (or has no socket yet, or
 * dies before the hello's reply) for a moment: the connect and hello are
 * tried again for SIGNER_LINK_RECONNECT_MS.
 * abandon_fd: as for signer_rpc().
 */
static int signer_open(int64_t deadline, int abandon_fd, struct signer_client **ret)
{
	_cleanup_json_ json_t *hello =
		json_pack("{s:s,s:i,s:s}", "method", "hello", "proto", RPC_PROTO_VERSION, "role", "runtime");
	int64_t give_up = MIN(deadline, (int64_t)clock_mono_ms() + SIGNER_LINK_RECONNECT_MS);
	int r;

	if (!hello) {
		return -ENOMEM;
	}
	for (;;) {
		int64_t now = (int64_t)clock_mono_ms(), left = MAX(deadline - now, (int64_t)1);
		struct signer_client *c = NULL;
		json_t *reply = NULL;

		r = signer_client_connect(L.socket_path, (int)MIN(left, (int64_t)INT32_MAX), &c);
		if (r >= 0) {
			r = signer_rpc(c, hello, -1, abandon_fd, deadline, &reply);
			json_decref(reply);
			if (r >= 0) {
				*ret = c;
				return 0;
			}
			signer_client_free(c);
		}
		/* Refused, no socket yet, or accepted by a signer that died before its hello: it is restarting. */
		if ((r != -ECONNREFUSED && r != -ENOENT && r != -ECONNRESET) ||
		    (int64_t)clock_mono_ms() + SIGNER_LINK_RECONNECT_PAUSE_MS >= give_up) {
			return r == -EREMOTEIO ? -EPROTO : r;
		}
		r = pause_ms(SIGNER_LINK_RECONNECT_PAUSE_MS, abandon_fd);
		if (r < 0) {
			return r;
		}
	}
}

/* An idle connection the signer closed (it restarted, or the connection idled out) reads as ready: EOF. */
static bool still_open(const struct signer_client *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };

	return poll(&p, 1, 0) == 0;
}

/* A connection for one call: an idle one from the pool, else a new one. */
static int checkout(int64_t deadline, int abandon_fd, struct signer_client **ret)
{
	for (;;) {
		struct signer_client *c = NULL;
		int64_t since = 0;

		pthread_mutex_lock(&L.mu);
		if (L.n_idle > 0) {
			L.n_idle--;
			c = L.idle[L.n_idle];
			since = L.idle_since[L.n_idle];
		}
		pthread_mutex_unlock(&L.mu);
		if (!c) {
			break;
		}
		if ((int64_t)clock_mono_ms() - since < SIGNER_LINK_IDLE_MS && still_open(c)) {
			*ret = c;
			return 0;
		}
		signer_client_free(c);
	}
	return signer_open(deadline, abandon_fd, ret);
}

/* Back to the pool after a whole reply (or closed when the pool is full). */
static void checkin(struct signer_client *c)
{
	pthread_mutex_lock(&L.mu);
	if (L.n_idle < SIGNER_LINK_MAX_IDLE) {
		L.idle[L.n_idle] = c;
		L.idle_since[L.n_idle] = (int64_t)clock_mono_ms();
		L.n_idle++;
		c = NULL;
	}
	pthread_mutex_unlock(&L.mu);
	signer_client_free(c);
}

/*
 * Whether a request may be sent again after its connection broke with no
 * reply (the signer may have acted on it): one with a request_id (the signer
 * answers a repeat with the first answer, kept in its store), or one that
 * changes nothing.
 */
static bool may_resend(const json_t *req)
{
	const char *m = json_string_value(json_object_get(req, "method"));

	if (json_is_string(json_object_get(req, "request_id"))) {
		return true;
	}
	return m && (strcmp(m, "status") == 0 || strcmp(m, "approval_wait") == 0 || strcmp(m, "approval_list") == 0);
}

/*
 * A message for the user about a failed call (what: the method): says which
 * limit or refusal stopped it. reply: the signer's error reply, or NULL.
 */
void signer_link_error(char *err, size_t err_size, const char *what, int r, const json_t *reply)
{
	const char *msg = NULL, *code = reply ? signer_reply_error(reply, &msg) : NULL;
	/* approval_wait is a long poll: its own wait comes on top of the deadline. */
	unsigned within = L.timeout_s + (strcmp(what, "approval_wait") == 0 ? DAEMON_APPROVAL_WAIT_MS / 1000 : 0);

	if (r == -ETIMEDOUT) {
		(void)snprintf(err, err_size, "the signer did not answer within %u s (%s)", within, what);
	} else if (code) {
		(void)snprintf(err, err_size, "the signer refused %s: %s%s%s", what, code, msg && msg[0] ? ": " : "",
			       msg ? msg : "");
	} else if (r == -EPROTO) {
		(void)snprintf(err, err_size, "the signer at %s refused the daemon's hello (another protocol version?)",
			       L.socket_path);
	} else if (r == -EBADMSG) {
		(void)snprintf(err, err_size, "the signer's %s reply is malformed", what);
	} else {
		(void)snprintf(err, err_size, "the signer at %s does not answer (%s: %s)", L.socket_path, what,
			       tk_strerror(r));
	}
}

json_t *signer_link_request_id(json_t *req)
{
	char rid[2 * 16 + 1];

	if (req && crypto_random_hex(16, rid) >= 0) {
		(void)json_object_set_new(req, "request_id", json_string(rid));
	}
	return req;
}

/*
 * A call on a pooled connection. When the connection breaks before the reply
 * (the signer restarted, or closed an idle connection just then), the same
 * request, same request_id, goes again on a new connection if may_resend()
 * allows it, at most SIGNER_LINK_MAX_SENDS times in all, by the same deadline.
 */
int signer_link_call(json_t *req, int pass_fd, int abandon_fd, int64_t deadline, json_t **ret)
{
	const char *what = json_string_value(json_object_get(req, "method"));
	int r = -ENOMEM;

	for (unsigned sends = 0; req && sends < SIGNER_LINK_MAX_SENDS; sends++) {
		struct signer_client *c = NULL;

		r = checkout(deadline, abandon_fd, &c);
		if (r < 0) {
			break;
		}
		r = signer_rpc(c, req, pass_fd, abandon_fd, deadline, ret);
		if (r == 0 || r == -EREMOTEIO) {
			checkin(c);
			break;
		}
		signer_client_free(c);
		if (r != -ECONNRESET || !may_resend(req)) {
			break;
		}
		log_info("the signer's connection ended before its %s reply (restarted?): sending it again, same "
			 "request_id",
			 what ? what : "?");
	}
	json_decref(req);
	return r;
}

int signer_link_once(json_t *req, json_t **ret, char *err, size_t err_size)
{
	const char *what = json_string_value(json_object_get(req, "method"));
	_cleanup_free_ char *method = strdup(what ? what : "?");
	json_t *reply = NULL;
	int r;

	r = signer_link_call(req, -1, -1, signer_link_deadline(0), &reply);
	if (r < 0) {
		signer_link_error(err, err_size, method ? method : "?", r, reply);
		json_decref(reply);
		return r;
	}
	if (ret) {
		*ret = reply;
	} else {
		json_decref(reply);
	}
	return 0;
}
