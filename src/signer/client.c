/* SPDX-License-Identifier: Apache-2.0 */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include "client.h"
#include "rpc.h"

#include "banned.h"

int signer_client_connect(const char *socket_path, int timeout_ms, struct signer_client **ret)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct signer_client *c;
	int fd, r;

	if (strlen(socket_path) >= sizeof(sa.sun_path)) {
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, socket_path, strlen(socket_path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return negative_errno();
	}
	if (timeout_ms > 0) {
		struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = errno == EAGAIN && timeout_ms > 0 ? -ETIMEDOUT : negative_errno();
		close(fd);
		return r;
	}
	c = calloc(1, sizeof(*c));
	if (!c || buf_init(&c->in, CLIENT_MAX_REPLY + 1, 0) < 0) {
		free(c);
		close(fd);
		return -ENOMEM;
	}
	c->fd = fd;
	*ret = c;
	return 0;
}

void signer_client_free(struct signer_client *c)
{
	if (!c) {
		return;
	}
	close(c->fd);
	buf_release(&c->in);
	free(c);
}

int signer_client_send_raw(struct signer_client *c, const void *p, size_t n)
{
	const uint8_t *q = p;
	while (n > 0) {
		ssize_t k = RETRY_EINTR(send(c->fd, q, n, MSG_NOSIGNAL));
		if (k < 0) {
			return negative_errno();
		}
		q += k;
		n -= (size_t)k;
	}
	return 0;
}

int signer_client_send(struct signer_client *c, const json_t *req, int fd)
{
	_cleanup_free_ char *s = json_dumps(req, JSON_COMPACT);
	size_t n;
	int r;

	if (!s) {
		return -ENOMEM;
	}
	n = strlen(s);
	if (fd >= 0) {
		/* The fd rides on the first byte; the rest follows as usual. */
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(int))];
		} cm = { 0 };
		struct iovec iov = { .iov_base = s, .iov_len = 1 };
		struct msghdr mh = {
			.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b, .msg_controllen = sizeof(cm.b)
		};
		struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(h), &fd, sizeof(int));
		if (RETRY_EINTR(sendmsg(c->fd, &mh, MSG_NOSIGNAL)) != 1) {
			return negative_errno();
		}
		r = signer_client_send_raw(c, s + 1, n - 1);
	} else {
		r = signer_client_send_raw(c, s, n);
	}
	if (r < 0) {
		return r;
	}
	return signer_client_send_raw(c, "\n", 1);
}

int signer_client_recv(struct signer_client *c, json_t **ret)
{
	for (;;) {
		const uint8_t *p = buf_ptr(&c->in);
		const uint8_t *nl = memchr(p, '\n', buf_len(&c->in));
		uint8_t chunk[65536];
		ssize_t k;
		int r;

		if (nl) {
			size_t n = (size_t)(nl - p);
			r = json_parse_strict(
				p, n, &(struct json_opts){ .max_bytes = CLIENT_MAX_REPLY, .want_top = JSON_OBJECT },
				ret);
			(void)buf_consume(&c->in, n + 1);
			return r;
		}
		if (buf_avail(&c->in) == 0) {
			return -E2BIG;
		}
		k = RETRY_EINTR(recv(c->fd, chunk, MIN(sizeof(chunk), buf_avail(&c->in)), 0));
		if (k < 0) {
			return negative_errno();
		}
		if (k == 0) {
			return -ECONNRESET;
		}
		r = buf_put(&c->in, chunk, (size_t)k);
		if (r < 0) {
			return r;
		}
	}
}

int signer_client_call(struct signer_client *c, const json_t *req, int fd, json_t **ret)
{
	int r = signer_client_send(c, req, fd);
	if (r < 0) {
		/* The signer may have answered (and closed) before reading it all: read why. */
		if ((r == -EPIPE || r == -ECONNRESET) && signer_client_recv(c, ret) == 0) {
			return 0;
		}
		return r;
	}
	return signer_client_recv(c, ret);
}

const char *signer_reply_error(const json_t *reply, const char **ret_message)
{
	json_t *e = json_object_get(reply, "error");
	const char *code = NULL, *msg = NULL;

	if (!e) {
		return NULL;
	}
	if (json_get_string(e, "code", &code) < 0) {
		code = "internal";
	}
	if (json_get_string(e, "message", &msg) < 0) {
		msg = "";
	}
	if (ret_message) {
		*ret_message = msg;
	}
	return code;
}

int signer_client_open(const char *socket_path, struct signer_client **ret, char *err, size_t err_size)
{
	return signer_client_open_as(socket_path, NULL, ret, err, err_size);
}

int signer_client_open_as(const char *socket_path, const char *role, struct signer_client **ret, char *err,
			  size_t err_size)
{
	struct signer_client *c = NULL;
	_cleanup_json_ json_t *req = NULL, *rep = NULL;
	const char *code, *msg;
	int r;

	r = signer_client_connect(socket_path, 0, &c);
	if (r < 0) {
		snprintf(err, err_size, "cannot connect to %s: %s", socket_path, strerror(-r));
		return r;
	}
	req = json_pack("{s:s,s:i}", "method", "hello", "proto", RPC_PROTO_VERSION);
	if (req && role && json_object_set_new(req, "role", json_string(role)) < 0) {
		json_decref(steal_ptr(req));
	}
	r = req ? signer_client_call(c, req, -1, &rep) : -ENOMEM;
	if (r < 0) {
		snprintf(err, err_size, "hello to %s failed: %s", socket_path, strerror(-r));
		signer_client_free(c);
		return r;
	}
	code = signer_reply_error(rep, &msg);
	if (code) {
		snprintf(err, err_size, "signer refused hello: %s: %s", code, msg);
		signer_client_free(c);
		return -EPROTO;
	}
	*ret = c;
	return 0;
}
