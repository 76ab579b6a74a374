/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <poll.h>
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

static struct {
	char *socket_path;
	unsigned timeout_s;
} L;

int signer_link_init(const char *socket_path, unsigned timeout_s)
{
	free(L.socket_path);
	L.socket_path = strdup(socket_path);
	L.timeout_s = timeout_s;
	return L.socket_path ? 0 : -ENOMEM;
}

void signer_link_shutdown(void)
{
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
 * the signer refused; -ETIMEDOUT past the deadline. Takes req.
 */
static int signer_rpc(struct signer_client *c, json_t *req, int fd, int abandon_fd, int64_t deadline, json_t **ret)
{
	json_t *reply = NULL;
	int r;

	if (!req) {
		return -ENOMEM;
	}
	/* A request of up to 256 KiB may not fit the socket's buffer: the send blocks, until the deadline. */
	if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) & ~O_NONBLOCK) < 0) {
		json_decref(req);
		return negative_errno();
	}
	sock_deadline(c->fd, deadline);
	r = signer_client_send(c, req, fd);
	json_decref(req);
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
		return r;
	}
	*ret = reply;
	return signer_reply_error(reply, NULL) ? -EREMOTEIO : 0;
}

/*
 * Connect and say hello by the deadline. The connect is bounded too: a signer
 * that does not accept fills its listen backlog, and connect then blocks.
 * abandon_fd: as for signer_rpc().
 */
static int signer_open(int64_t deadline, int abandon_fd, struct signer_client **ret)
{
	_cleanup_json_ json_t *hello = NULL;
	struct signer_client *c;
	int64_t left = MAX(deadline - (int64_t)clock_mono_ms(), (int64_t)1);
	int r;

	r = signer_client_connect(L.socket_path, (int)MIN(left, (int64_t)INT32_MAX), &c);
	if (r < 0) {
		return r;
	}
	r = signer_rpc(c, json_pack("{s:s,s:i,s:s}", "method", "hello", "proto", RPC_PROTO_VERSION, "role", "runtime"),
		       -1, abandon_fd, deadline, &hello);
	if (r < 0) {
		signer_client_free(c);
		return r == -EREMOTEIO ? -EPROTO : r;
	}
	*ret = c;
	return 0;
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
	uint8_t rnd[16];
	char rid[2 * sizeof(rnd) + 1];

	if (req && crypto_random(rnd, sizeof(rnd)) >= 0) {
		for (size_t i = 0; i < sizeof(rnd); i++) {
			(void)snprintf(rid + 2 * i, 3, "%02x", rnd[i]);
		}
		(void)json_object_set_new(req, "request_id", json_string(rid));
	}
	return req;
}

/* Today: a fresh connection and hello per call (an approval wait blocks only its own request). */
int signer_link_call(json_t *req, int pass_fd, int abandon_fd, int64_t deadline, json_t **ret)
{
	struct signer_client *c = NULL;
	int r;

	r = signer_open(deadline, abandon_fd, &c);
	if (r < 0) {
		json_decref(req);
		return r;
	}
	r = signer_rpc(c, req, pass_fd, abandon_fd, deadline, ret);
	signer_client_free(c);
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
