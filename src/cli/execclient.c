/* SPDX-License-Identifier: Apache-2.0 */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>

#include "banned.h"
#include "cli/apiclient.h"
#include "cli/execclient.h"
#include "crypto.h"
#include "daemon/door.h"
#include "exec-stream.h"
#include "io.h"
#include "json.h"

struct stream {
	const struct execclient_opts *o;
	struct execclient_result *res;
	int sock;
	bool stream_stdin;
	bool stdin_eof;
	bool eof_sent;
	uint64_t credit;
	struct buf pending; /* stdin read but not yet sent (beyond the credit) */
	struct frame_decoder dec;
	struct buf payload;
	bool have_exit;
	unsigned interrupts;
};

/* Send one exec stream frame (exec-stream.c encodes it). */
static int send_frame(int fd, const struct exs_frame *f)
{
	struct buf b;
	int r = buf_init(&b, EXS_MAX_FRAME + FRAME_HEADER_SIZE, 0);

	if (r < 0) {
		return r;
	}
	r = exs_encode(f, &b);
	if (r >= 0) {
		const uint8_t *q = buf_ptr(&b);
		size_t left = buf_len(&b);
		while (left > 0 && r >= 0) {
			ssize_t k = RETRY_EINTR(send(fd, q, left, MSG_NOSIGNAL));
			if (k < 0) {
				r = negative_errno();
			} else {
				q += k;
				left -= (size_t)k;
			}
		}
	}
	buf_release(&b);
	return r;
}

/* Output to its fd, or into its bounded buffer (bytes past the cap are counted and dropped). */
static void take_output(int fd, struct buf *b, uint64_t *total, const uint8_t *p, size_t n)
{
	*total += n;
	if (fd >= 0) {
		(void)io_write_all(fd, p, n); /* a closed stdout does not stop the command */
		return;
	}
	(void)buf_put(b, p, MIN(n, buf_avail(b)));
}

static void take_error(struct buf *e, const uint8_t *p, size_t n)
{
	if (buf_len(e) > 0) {
		(void)buf_put(e, "; ", MIN((size_t)2, buf_avail(e)));
	}
	(void)buf_put(e, p, MIN(n, buf_avail(e)));
}

static int on_frame(struct stream *s, uint8_t type)
{
	struct exs_frame f;
	int r = exs_decode(EXS_FROM_SUPERVISOR, type, buf_ptr(&s->payload), buf_len(&s->payload), &f);

	if (r < 0) {
		return -EPROTO;
	}
	switch (f.type) {
	case EXS_STARTED:
		return 0;
	case EXS_STDOUT:
		take_output(s->o->out_fd, &s->res->out, &s->res->out_total, f.data, f.len);
		return 0;
	case EXS_STDERR:
		take_output(s->o->err_fd, &s->res->errout, &s->res->err_total, f.data, f.len);
		return 0;
	case EXS_EXIT:
		s->res->exit = f.exit;
		s->have_exit = true;
		return 0;
	case EXS_ERROR:
		take_error(&s->res->stream_error, f.data, f.len);
		return 0;
	case EXS_CREDIT:
		s->credit += f.credit;
		return 0;
	default:
		return -EPROTO;
	}
}

static int feed(struct stream *s, const uint8_t *p, size_t n)
{
	size_t off = 0;

	while (off < n) {
		size_t used = 0;
		uint8_t type;
		int r = frame_decoder_feed(&s->dec, p + off, n - off, &used);
		off += used;
		if (r < 0) {
			return r;
		}
		if (r == 1) {
			buf_reset(&s->payload);
			r = frame_decoder_take(&s->dec, &type, &s->payload);
			if (r >= 0) {
				r = on_frame(s, type);
			}
			if (r < 0) {
				return r;
			}
		}
	}
	return 0;
}

/* Send pending stdin within the credit. */
static int pump_stdin(struct stream *s)
{
	while (buf_len(&s->pending) > 0 && s->credit > 0) {
		size_t k = MIN(MIN(buf_len(&s->pending), EXS_MAX_DATA), (size_t)s->credit);
		struct exs_frame f = { .type = EXS_STDIN, .data = buf_ptr(&s->pending), .len = k };
		int r = send_frame(s->sock, &f);
		if (r < 0) {
			return r;
		}
		(void)buf_consume(&s->pending, k);
		s->credit -= k;
	}
	if (s->stdin_eof && buf_len(&s->pending) == 0 && !s->eof_sent) {
		s->eof_sent = true;
		return send_frame(s->sock, &(struct exs_frame){ .type = EXS_STDIN_EOF });
	}
	return 0;
}

/* A signal on sig_fd: to the command in the box; the third one kills it. */
static void forward_signal(struct stream *s)
{
	struct signalfd_siginfo si;

	if (read(s->o->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		struct exs_frame f = { .type = EXS_SIGNAL, .signal = (uint8_t)si.ssi_signo };
		if (++s->interrupts >= 3 || !exs_signal_allowed((int)si.ssi_signo)) {
			f.signal = SIGKILL;
		}
		(void)send_frame(s->sock, &f);
	}
}

static int read_stdin(struct stream *s)
{
	uint8_t *dst;
	ssize_t n;
	int r = buf_reserve(&s->pending, EXS_MAX_DATA, &dst);

	if (r < 0) {
		return r;
	}
	n = RETRY_EINTR(read(s->o->stdin_fd, dst, EXS_MAX_DATA));
	s->pending.len -= EXS_MAX_DATA - (n > 0 ? (size_t)n : 0);
	if (n <= 0) {
		s->stdin_eof = true;
	}
	return 0;
}

static int run_stream(struct stream *s)
{
	for (;;) {
		struct pollfd p[3];
		nfds_t np = 0, isig = 0, iin = 0;
		int r;
		bool want_stdin;

		/* Credit may have arrived with the last frames read: send what it allows before waiting. */
		if (s->stream_stdin && pump_stdin(s) < 0 && !s->have_exit) {
			/* The command may have ended without reading stdin: keep reading its output. */
			s->stdin_eof = true;
			s->stream_stdin = false;
		}
		want_stdin = s->stream_stdin && !s->stdin_eof && buf_len(&s->pending) == 0 && s->credit > 0;

		p[np++] = (struct pollfd){ .fd = s->sock, .events = POLLIN };
		if (s->o->sig_fd >= 0) {
			isig = np;
			p[np++] = (struct pollfd){ .fd = s->o->sig_fd, .events = POLLIN };
		}
		if (want_stdin) {
			iin = np;
			p[np++] = (struct pollfd){ .fd = s->o->stdin_fd, .events = POLLIN };
		}
		r = poll(p, np, -1);
		if (r < 0) {
			if (errno == EINTR) {
				continue;
			}
			return negative_errno();
		}
		if (isig && (p[isig].revents & POLLIN) && s->o->sig_ends) {
			struct signalfd_siginfo si;
			if (read(s->o->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
				s->res->intr_signo = (int)si.ssi_signo;
				return -EINTR;
			}
		} else if (isig && (p[isig].revents & POLLIN)) {
			forward_signal(s);
		}
		if (iin && (p[iin].revents & (POLLIN | POLLHUP | POLLERR))) {
			r = read_stdin(s);
			if (r < 0) {
				return r;
			}
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			uint8_t rb[65536];
			ssize_t n = RETRY_EINTR(recv(s->sock, rb, sizeof(rb), 0));
			if (n <= 0) {
				return s->have_exit ? 0 : -ECONNRESET;
			}
			r = feed(s, rb, (size_t)n);
			if (r < 0) {
				return r;
			}
		}
	}
}

static void relay_approval(const char *id, void *ctx)
{
	const struct execclient_opts *o = ctx;

	if (o->on_approval) {
		o->on_approval(id, o->ctx);
	}
}

/* apiclient's interim callback has no context: the one exec in flight per process holds it. */
static const struct execclient_opts *approval_opts;
static void on_interim(const char *id)
{
	relay_approval(id, (void *)approval_opts);
}

/* The request's stdin member. */
static int set_stdin(const struct execclient_opts *o)
{
	struct buf b64;
	_cleanup_free_ char *enc = NULL;
	int r;

	switch (o->stdin_mode) {
	case EXECCLIENT_STDIN_NONE:
		return 0;
	case EXECCLIENT_STDIN_STREAM:
		if (o->stdin_fd < 0) {
			return -EINVAL;
		}
		return json_object_set_new(o->body, "stdin", json_pack("{s:s}", "mode", "stream")) < 0 ? -ENOMEM : 0;
	case EXECCLIENT_STDIN_UPFRONT:
		if (o->stdin_len > DOOR_MAX_STDIN) {
			return -E2BIG;
		}
		r = buf_init(&b64, 2 * DOOR_MAX_STDIN + 8, 0);
		if (r >= 0) {
			r = b64_encode(o->stdin_data, o->stdin_len, B64_STD, &b64);
		}
		if (r >= 0) {
			r = buf_dup_cstring(&b64, &enc);
		}
		buf_release(&b64);
		if (r < 0) {
			return r;
		}
		return json_object_set_new(o->body, "stdin", json_pack("{s:s,s:s}", "mode", "upfront", "data", enc)) < 0
			       ? -ENOMEM
			       : 0;
	default:
		return -EINVAL;
	}
}

static int result_init(const struct execclient_opts *o, struct execclient_result *res)
{
	size_t cap = o->collect_max ? o->collect_max : 1;

	*res = (struct execclient_result){ .outcome = EXECCLIENT_FAILED, .err = -EIO };
	if (buf_init(&res->stream_error, EXS_MAX_ERROR + 1, 0) < 0 || buf_init(&res->out, cap, 0) < 0 ||
	    buf_init(&res->errout, cap, 0) < 0) {
		execclient_result_release(res);
		return -ENOMEM;
	}
	return 0;
}

/* The daemon answered with an error instead of the 101. */
static void take_refusal(struct apiclient *c, struct execclient_result *res)
{
	_cleanup_json_ json_t *reply = NULL;
	int r = apiclient_read_json(c, &reply);

	res->http_status = c->resp.status;
	if (r < 0 && c->intr_signo > 0) {
		res->outcome = EXECCLIENT_INTERRUPTED;
		res->intr_signo = c->intr_signo;
		return;
	}
	res->outcome = EXECCLIENT_REFUSED;
	if (r >= 0 && json_is_object(json_object_get(reply, "error"))) {
		res->error = json_incref(json_object_get(reply, "error"));
	}
}

static int stream_init(struct stream *s, const struct execclient_opts *o, struct execclient_result *res)
{
	*s = (struct stream){ .o = o, .res = res, .sock = -1 };
	s->stream_stdin = o->stdin_mode == EXECCLIENT_STDIN_STREAM;
	if (s->stream_stdin && o->stdin_len > DOOR_MAX_STDIN + 1) {
		return -E2BIG;
	}
	if (buf_init(&s->pending, DOOR_MAX_STDIN + EXS_MAX_DATA + 2, 0) < 0 ||
	    frame_decoder_init(&s->dec, EXS_MAX_FRAME) < 0 || buf_init(&s->payload, EXS_MAX_FRAME, 0) < 0) {
		return -ENOMEM;
	}
	/* Streamed stdin: what the caller read already goes first. */
	return s->stream_stdin && o->stdin_len > 0 ? buf_put(&s->pending, o->stdin_data, o->stdin_len) : 0;
}

static void stream_release(struct stream *s)
{
	buf_release(&s->pending);
	buf_release(&s->payload);
	frame_decoder_release(&s->dec);
}

int execclient_run(const struct execclient_opts *o, struct execclient_result *ret)
{
	struct apiclient *c = NULL;
	struct stream s;
	char path[128];
	int r;

	if (!o->box || !door_box_name_ok(o->box) || !o->body) {
		return -EINVAL;
	}
	r = set_stdin(o);
	if (r < 0) {
		return r;
	}
	r = result_init(o, ret);
	if (r < 0) {
		return r;
	}
	r = stream_init(&s, o, ret);
	if (r < 0) {
		stream_release(&s);
		execclient_result_release(ret);
		return r;
	}
	(void)snprintf(path, sizeof(path), "/v1/boxes/%s/exec", o->box);
	r = apiclient_connect(o->state_dir, &c);
	if (r < 0) {
		ret->err = r;
		goto out;
	}
	ret->connected = true;
	/* While the daemon waits for the signer (or a person), a signal ends this wait. */
	c->intr_fd = o->sig_fd;
	approval_opts = o;
	r = apiclient_request(c, "POST", path, o->body, true, on_interim);
	approval_opts = NULL;
	if (r < 0 && c->intr_signo > 0) {
		ret->outcome = EXECCLIENT_INTERRUPTED;
		ret->intr_signo = c->intr_signo;
		goto out;
	}
	if (r < 0) {
		ret->err = r;
		goto out;
	}
	if (c->resp.status != 101 || !c->resp.upgrade_exec) {
		take_refusal(c, ret);
		goto out;
	}
	s.sock = c->fd;
	r = feed(&s, buf_ptr(&c->in), buf_len(&c->in));
	if (r >= 0) {
		r = run_stream(&s);
	}
	if (r < 0 && ret->intr_signo > 0) {
		ret->outcome = EXECCLIENT_INTERRUPTED;
		goto out;
	}
	if (r < 0 || !s.have_exit) {
		ret->err = r < 0 ? r : -ECONNRESET;
		goto out;
	}
	ret->outcome = EXECCLIENT_RAN;
out:
	stream_release(&s);
	apiclient_free(c);
	return 0;
}

void execclient_result_release(struct execclient_result *r)
{
	if (!r) {
		return;
	}
	json_decref(r->error);
	r->error = NULL;
	buf_release(&r->stream_error);
	buf_release(&r->out);
	buf_release(&r->errout);
}

int execclient_output_json(json_t *obj, const char *name, const struct buf *b, uint64_t total)
{
	const uint8_t *p = buf_ptr(b);
	size_t n = buf_len(b);
	json_t *text = memchr(p, '\0', n) ? NULL : json_stringn((const char *)p, n);
	char key[64];
	int r = 0;

	if (text) {
		r = json_object_set_new(obj, name, text);
	} else {
		struct buf enc;
		_cleanup_free_ char *s = NULL;
		r = buf_init(&enc, (n / 3 + 1) * 4 + 8, 0);
		if (r >= 0) {
			r = b64_encode(p, n, B64_STD, &enc);
		}
		if (r >= 0) {
			r = buf_dup_cstring(&enc, &s);
		}
		buf_release(&enc);
		(void)snprintf(key, sizeof(key), "%s_base64", name);
		if (r >= 0) {
			r = json_object_set_new(obj, key, json_string(s));
		}
	}
	(void)snprintf(key, sizeof(key), "%s_bytes", name);
	if (r >= 0) {
		r = json_object_set_new(obj, key, json_integer((json_int_t)total));
	}
	(void)snprintf(key, sizeof(key), "%s_truncated", name);
	if (r >= 0) {
		r = json_object_set_new(obj, key, json_boolean(total > n));
	}
	return r < 0 ? -ENOMEM : 0;
}

int execclient_exit_json(json_t *obj, const struct exit_status *s)
{
	if (s->kind == EXIT_KIND_SIGNALED) {
		const char *name = sigabbrev_np((int)s->value);
		if (json_object_set_new(obj, "signal", json_integer((json_int_t)s->value)) < 0 ||
		    json_object_set_new(obj, "signal_name", json_string(name ? name : "?")) < 0) {
			return -ENOMEM;
		}
		return 0;
	}
	return json_object_set_new(obj, "exit_code", json_integer((json_int_t)s->value)) < 0 ? -ENOMEM : 0;
}
