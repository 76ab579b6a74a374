/* SPDX-License-Identifier: Apache-2.0 */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "banned.h"
#include "cli/apiclient.h"
#include "daemon/daemon.h"
#include "json.h"
#include "log.h"

int apiclient_connect(const char *state_dir, struct apiclient **ret)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	_cleanup_free_ char *path = NULL;
	struct apiclient *c;
	int fd, r;

	r = daemon_socket_path(state_dir ? state_dir : daemon_default_state_dir(), &path);
	if (r < 0) {
		return r;
	}
	if (strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "tkbox: the daemon socket path %s is too long\n", path);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return negative_errno();
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = negative_errno();
		(void)close(fd);
		fprintf(stderr,
			"tkbox: no daemon answers at %s (%s): start one with 'tkbox daemon' (or set TKBOX_STATE_DIR / "
			"TKBOX_SOCKET)\n",
			path, tk_strerror(r));
		return r;
	}
	c = calloc(1, sizeof(*c));
	if (!c || buf_init(&c->in, APICLIENT_MAX_JSON + HTTP_MAX_RESPONSE_HEAD, 0) < 0) {
		free(c);
		(void)close(fd);
		return -ENOMEM;
	}
	c->fd = fd;
	c->intr_fd = -1;
	*ret = c;
	return 0;
}

void apiclient_free(struct apiclient *c)
{
	if (!c) {
		return;
	}
	if (c->fd >= 0) {
		(void)close(c->fd);
	}
	buf_release(&c->in);
	http_response_release(&c->resp);
	free(c);
}

static int send_all(int fd, const void *p, size_t n)
{
	const uint8_t *q = p;

	while (n > 0) {
		ssize_t k = RETRY_EINTR(send(fd, q, n, MSG_NOSIGNAL));
		if (k < 0) {
			return negative_errno();
		}
		q += k;
		n -= (size_t)k;
	}
	return 0;
}

int apiclient_send(struct apiclient *c, const char *method, const char *path, const json_t *body, bool upgrade)
{
	_cleanup_free_ char *s = NULL;
	char head[2048];
	size_t n = 0;
	int k, r;

	if (body) {
		s = json_dumps(body, JSON_COMPACT);
		if (!s) {
			return -ENOMEM;
		}
		n = strlen(s);
	}
	k = snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\nHost: tkbox\r\nContent-Length: %zu\r\n%s%s\r\n", method,
		     path, n, body ? "Content-Type: application/json\r\n" : "",
		     upgrade ? "Connection: Upgrade\r\nUpgrade: " HTTP_EXEC_UPGRADE "\r\n" : "");
	if (k < 0 || (size_t)k >= sizeof(head)) {
		return -E2BIG;
	}
	r = send_all(c->fd, head, (size_t)k);
	if (r >= 0 && n) {
		r = send_all(c->fd, s, n);
	}
	if (s) {
		explicit_bzero(s, n); /* a create body may hold secret values */
	}
	return r;
}

/* Wait until c->fd is readable; -EINTR when a signal arrived on c->intr_fd first. */
static int wait_readable(struct apiclient *c)
{
	while (c->intr_fd >= 0) {
		struct pollfd p[2] = { { .fd = c->fd, .events = POLLIN }, { .fd = c->intr_fd, .events = POLLIN } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR) {
				continue;
			}
			return negative_errno();
		}
		if (p[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			if (read(c->intr_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
				c->intr_signo = (int)si.ssi_signo;
				return -EINTR;
			}
		}
		if (p[0].revents) {
			return 0;
		}
	}
	return 0;
}

static int fill(struct apiclient *c)
{
	uint8_t *dst;
	ssize_t n;
	int r = wait_readable(c);

	if (r >= 0) {
		r = buf_reserve(&c->in, 16384, &dst);
	}
	if (r < 0) {
		return r;
	}
	n = RETRY_EINTR(recv(c->fd, dst, 16384, 0));
	c->in.len -= 16384 - (n > 0 ? (size_t)n : 0);
	if (n < 0) {
		return negative_errno();
	}
	return n == 0 ? -ECONNRESET : 0;
}

int apiclient_read_head(struct apiclient *c, void (*on_interim)(const char *approval))
{
	for (;;) {
		size_t head = 0;
		int r;

		http_response_release(&c->resp);
		r = http_response_parse(buf_ptr(&c->in), buf_len(&c->in), &c->resp, &head);
		if (r < 0) {
			return r;
		}
		if (r == 0) {
			r = fill(c);
			if (r < 0) {
				return r;
			}
			continue;
		}
		(void)buf_consume(&c->in, head);
		if (c->resp.status >= 100 && c->resp.status < 200 && c->resp.status != 101) {
			if (on_interim && c->resp.approval) {
				on_interim(c->resp.approval);
			}
			continue;
		}
		return 0;
	}
}

int apiclient_read_json(struct apiclient *c, json_t **ret)
{
	struct json_opts o = { .max_bytes = APICLIENT_MAX_JSON, .max_depth = 16, .want_top = JSON_OBJECT };

	if (!c->resp.has_length || c->resp.content_length > APICLIENT_MAX_JSON) {
		return -EBADMSG;
	}
	while (buf_len(&c->in) < c->resp.content_length) {
		int r = fill(c);
		if (r < 0) {
			return r;
		}
	}
	return json_parse_strict(buf_ptr(&c->in), (size_t)c->resp.content_length, &o, ret);
}

int apiclient_request(struct apiclient *c, const char *method, const char *path, const json_t *body, bool upgrade,
		      void (*on_interim)(const char *approval))
{
	int r = apiclient_send(c, method, path, body, upgrade);
	int rr = apiclient_read_head(c, on_interim);

	return rr >= 0 || r >= 0 ? rr : r;
}

void apiclient_print_refusal(struct apiclient *c, const char *what)
{
	_cleanup_json_ json_t *reply = NULL;

	if (apiclient_read_json(c, &reply) >= 0) {
		apiclient_print_error(what, c->resp.status, reply);
	} else {
		fprintf(stderr, "tkbox %s: the daemon answered HTTP %d\n", what, c->resp.status);
	}
}

int apiclient_call(const char *state_dir, const char *method, const char *path, const json_t *body, int *ret_status,
		   json_t **ret)
{
	struct apiclient *c = NULL;
	int r;

	r = apiclient_connect(state_dir, &c);
	if (r < 0) {
		return r;
	}
	r = apiclient_request(c, method, path, body, false, NULL);
	if (r >= 0) {
		r = apiclient_read_json(c, ret);
	}
	if (r >= 0) {
		*ret_status = c->resp.status;
	} else {
		fprintf(stderr, "tkbox: the daemon's answer to %s %s was cut or malformed: %s\n", method, path,
			tk_strerror(r));
	}
	apiclient_free(c);
	return r;
}

void apiclient_print_error(const char *what, int status, const json_t *reply)
{
	json_t *e = json_object_get(reply, "error");
	const char *msg = json_string_value(json_object_get(e, "message"));

	if (msg) {
		fprintf(stderr, "tkbox %s: %s\n", what, msg);
	} else {
		fprintf(stderr, "tkbox %s: the daemon answered HTTP %d\n", what, status);
	}
}

int apiclient_read_body(struct apiclient *c, uint64_t max, struct buf *out)
{
	int r;

	*out = (struct buf){ 0 };
	if (!c->resp.has_length || c->resp.content_length > max) {
		return -EBADMSG;
	}
	r = buf_init(out, (size_t)c->resp.content_length + 1, 0);
	if (r >= 0) {
		r = buf_put(out, buf_ptr(&c->in), MIN(buf_len(&c->in), (size_t)c->resp.content_length));
	}
	while (r >= 0 && buf_len(out) < c->resp.content_length) {
		uint8_t rb[65536];
		ssize_t n =
			RETRY_EINTR(recv(c->fd, rb, MIN(sizeof(rb), (size_t)c->resp.content_length - buf_len(out)), 0));
		if (n <= 0) {
			r = n < 0 ? negative_errno() : -ECONNRESET;
			break;
		}
		r = buf_put(out, rb, (size_t)n);
	}
	return r;
}
