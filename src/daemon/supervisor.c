/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "banned.h"
#include "strv.h"
#include "crypto.h"
#include "daemon/door.h"
#include "daemon/ipc.h"
#include "daemon/sandbox.h"
#include "daemon/stream.h"
#include "daemon/supervisor.h"
#include "daemon/supmsg.h"
#include "json.h"
#include "log.h"
#include "vmm/vm-box.h"

#define SUP_SHUTDOWN_MS 20000
#define SUP_RELEASE_WAIT_MS 60000
#define SUP_KILL_GRACE_MS 10000 /* a killed command has this long to end in the guest */
#define SUP_MAX_IGNORED_KILLS 3 /* commands a guest may leave running after their kill before its box is stopped */
#define SUP_TIMED_OUT_HOST "the command ran past its time limit; the box did not stop the command, so the host ended it"
#define SUP_AGENT_EVENTS_PER_TURN 256 /* guest events handled before the daemon and the clients get a turn */

struct sx {
	bool used;
	int64_t exec; /* the daemon's exec number */
	uint32_t agent_id; /* the agent's exec id */
	int fd; /* client stream, -1 once gone */
	bool client_gone;
	bool started;
	bool finished; /* EXIT/ERROR seen: flush and close */
	bool held; /* finished, its EXIT held until the daemon recorded the completion */
	uint8_t exit_frame[5];
	uint64_t held_until_ms; /* a release that never comes does not hold the client forever */
	bool killed; /* we sent SIGKILL */
	uint64_t kill_grace_ms; /* past it, a killed command the guest never ended is ended by the host */
	char *why; /* why we cut it (timeout, client gone, slow client) */
	uint64_t deadline_ms;
	/* stdin */
	enum { SX_STDIN_NONE, SX_STDIN_UPFRONT, SX_STDIN_STREAM } stdin_mode;
	struct buf in; /* stdin received and not yet sent to the agent */
	bool in_eof;
	bool in_closed; /* stdin_close sent to the agent */
	uint64_t in_total;
	struct sha256_ctx *in_hash;
	uint32_t credit_owed; /* stdin credit to return to the client */
	/* client */
	struct frame_decoder dec;
	struct buf out;
	/* result */
	bool exited;
	int code, sig;
	char *error;
};

struct sup {
	int ctl;
	struct vm_box *box;
	struct sx x[SUPERVISOR_MAX_EXECS];
	uint64_t lifetime_deadline_ms;
	unsigned ignored_kills; /* commands the guest did not end after their kill */
	bool stopping;
	const char *stop_reason;
	char lost[256]; /* why the agent connection ended, when it did */
	struct buf msg;
};

static uint64_t now_ms(void)
{
	return vm_box_now_ns() / 1000000ull;
}

static void send_ctl(struct sup *s, json_t *v)
{
	if (v) {
		int r = ipc_send(s->ctl, v, NULL, 0);
		if (r < 0) {
			log_warn("supervisor: telling the daemon: %s", tk_strerror(r));
		}
		json_decref(v);
	}
}

static void send_event(struct sup *s, const char *event, const char *detail)
{
	json_t *v = json_pack("{s:s,s:s}", "op", "event", "event", event);
	if (v && detail) {
		(void)json_object_set_new(v, "detail", json_string(detail));
	}
	send_ctl(s, v);
}

static void sx_frame(struct sx *x, uint8_t type, const void *p, size_t n)
{
	if (x->fd < 0 || x->client_gone) {
		return;
	}
	if (frame_encode(&x->out, type, p, n) < 0) {
		/* The client does not read: the command cannot go on writing to it. */
		x->client_gone = true;
		if (!x->why) {
			x->why = strdup("the client did not read the output (8 MiB queued)");
		}
		/* Its queue is never sent now: give the memory back at once. */
		buf_release(&x->out);
		if (buf_init(&x->out, SUPERVISOR_EXEC_OUT_MAX, 0) < 0) {
			log_warn("supervisor: exec %lld: output queue", (long long)x->exec);
		}
	}
}

static void sx_release(struct sx *x)
{
	if (x->fd >= 0) {
		(void)close(x->fd);
	}
	buf_release(&x->in);
	buf_release(&x->out);
	frame_decoder_release(&x->dec);
	sha256_free(x->in_hash);
	free(x->why);
	free(x->error);
	*x = (struct sx){ .fd = -1 };
}

static struct sx *sx_by_agent(struct sup *s, uint32_t id)
{
	for (size_t i = 0; i < ARRAY_SIZE(s->x); i++) {
		if (s->x[i].used && s->x[i].agent_id == id && !s->x[i].finished) {
			return &s->x[i];
		}
	}
	return NULL;
}

static void sx_kill(struct sup *s, struct sx *x, const char *why)
{
	if (x->finished || x->killed) {
		return;
	}
	x->killed = true;
	x->kill_grace_ms = now_ms() + SUP_KILL_GRACE_MS;
	if (!x->why && why) {
		x->why = strdup(why);
	}
	if (agent_client_signal(s->box->agent, x->agent_id, SIGKILL) < 0) {
		log_warn("supervisor: could not signal exec %lld", (long long)x->exec);
	}
}

/* The command is over: tell the client and the daemon. */
static void sx_finish(struct sup *s, struct sx *x)
{
	uint8_t ex[5];
	uint32_t v;
	json_t *done;
	bool ok = x->exited && x->code == 0 && !x->error;

	x->finished = true;
	if (x->why) {
		sx_frame(x, EXS_ERROR, x->why, strlen(x->why));
	}
	if (x->error && x->why != x->error) {
		sx_frame(x, EXS_ERROR, x->error, strlen(x->error));
	}
	if (x->exited || x->sig) {
		ex[0] = x->exited ? EXS_EXIT_EXITED : EXS_EXIT_SIGNAL;
		v = x->exited ? (uint32_t)x->code : (uint32_t)x->sig;
	} else {
		ex[0] = EXS_EXIT_EXITED;
		v = x->started ? 125 : 127;
	}
	ex[1] = (uint8_t)(v >> 24);
	ex[2] = (uint8_t)(v >> 16);
	ex[3] = (uint8_t)(v >> 8);
	ex[4] = (uint8_t)v;
	if (s->stopping) {
		sx_frame(x, EXS_EXIT, ex, sizeof(ex));
	} else {
		/* When the client sees the exit status, the completion is in the record (or its loss is). */
		memcpy(x->exit_frame, ex, sizeof(ex));
		x->held = true;
		x->held_until_ms = now_ms() + SUP_RELEASE_WAIT_MS;
	}

	done = json_pack("{s:s,s:I,s:s}", "op", "done", "exec", (json_int_t)x->exec, "status", ok ? "ok" : "error");
	if (done && x->exited) {
		(void)json_object_set_new(done, "exit_code", json_integer(x->code));
	} else if (done && x->sig) {
		(void)json_object_set_new(done, "signal", json_integer(x->sig));
	}
	if (done && (x->error || x->why)) {
		(void)json_object_set_new(done, "error", json_string(x->why ? x->why : x->error));
	}
	if (done && x->stdin_mode == SX_STDIN_STREAM && x->in_hash) {
		uint8_t h[SHA256_LEN];
		struct buf hx;
		char *hs = NULL;
		if (sha256_final(x->in_hash, h) >= 0 && buf_init(&hx, 65, 0) >= 0) {
			if (hex_encode(h, sizeof(h), &hx) >= 0 && buf_dup_cstring(&hx, &hs) >= 0) {
				(void)json_object_set_new(done, "stdin_sha256", json_string(hs));
				(void)json_object_set_new(done, "stdin_bytes", json_integer((json_int_t)x->in_total));
			}
			buf_release(&hx);
			free(hs);
		}
	}
	send_ctl(s, done);
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? negative_errno() : 0;
}

static char **strv_from_json(const json_t *a, size_t max)
{
	size_t n;
	char **v;

	if (!json_is_array(a) || json_array_size(a) > max) {
		return NULL;
	}
	n = json_array_size(a);
	v = calloc(n + 1, sizeof(*v));
	for (size_t i = 0; v && i < n; i++) {
		const char *str = json_string_value(json_array_get(a, i));
		v[i] = str ? strdup(str) : NULL;
		if (!v[i]) {
			for (size_t k = 0; k < i; k++) {
				free(v[k]);
			}
			free(v);
			return NULL;
		}
	}
	return v;
}

/* Read the up-front stdin the daemon decided on (a sealed memfd, at most DOOR_MAX_STDIN). */
static int read_upfront(int fd, struct buf *in)
{
	struct stat st;
	uint8_t *dst;
	size_t got = 0;
	int r;

	if (fstat(fd, &st) < 0) {
		return negative_errno();
	}
	if (st.st_size < 0 || (uint64_t)st.st_size > DOOR_MAX_STDIN) {
		return -E2BIG;
	}
	if (st.st_size == 0) {
		return 0;
	}
	r = buf_reserve(in, (size_t)st.st_size, &dst);
	if (r < 0) {
		return r;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = RETRY_EINTR(pread(fd, dst + got, (size_t)st.st_size - got, (off_t)got));
		if (n <= 0) {
			return n < 0 ? negative_errno() : -EIO;
		}
		got += (size_t)n;
	}
	return 0;
}

static void start_exec(struct sup *s, json_t *m, int *fds, size_t nfds)
{
	struct sx *x = NULL;
	_cleanup_(strv_freep) char **argv = NULL, **env = NULL;
	const char *cwd = NULL, *mode = NULL;
	int64_t exec = 0, timeout_s = 0;
	int r = -EINVAL;

	for (size_t i = 0; i < ARRAY_SIZE(s->x); i++) {
		if (!s->x[i].used) {
			x = &s->x[i];
			break;
		}
	}
	if (json_get_int(m, "exec", &exec) < 0 || json_get_string(m, "stdin", &mode) < 0 ||
	    json_get_int(m, "timeout_s", &timeout_s) < 0 || nfds < 1) {
		goto refuse;
	}
	if (json_get_string(m, "cwd", &cwd) < 0) {
		cwd = NULL;
	}
	argv = strv_from_json(json_object_get(m, "argv"), DOOR_MAX_ARGS);
	env = strv_from_json(json_object_get(m, "env"), DOOR_MAX_ENV);
	if (!argv || !argv[0] || !env || !x) {
		r = x ? -EINVAL : -EBUSY;
		goto refuse;
	}
	*x = (struct sx){ .used = true, .exec = exec, .fd = fds[0] };
	fds[0] = -1;
	x->stdin_mode = strcmp(mode, "upfront") == 0  ? SX_STDIN_UPFRONT
			: strcmp(mode, "stream") == 0 ? SX_STDIN_STREAM
						      : SX_STDIN_NONE;
	x->deadline_ms = now_ms() + (uint64_t)timeout_s * 1000;
	r = set_nonblock(x->fd);
	if (r >= 0) {
		r = frame_decoder_init(&x->dec, EXS_MAX_FRAME);
	}
	if (r >= 0) {
		r = buf_init(&x->out, SUPERVISOR_EXEC_OUT_MAX, 0);
	}
	if (r >= 0) {
		r = buf_init(&x->in, MAX(DOOR_MAX_STDIN, (size_t)EXS_STDIN_WINDOW), 0);
	}
	if (r >= 0 && x->stdin_mode == SX_STDIN_UPFRONT) {
		r = nfds >= 2 ? read_upfront(fds[1], &x->in) : -EINVAL;
		x->in_eof = true;
	}
	if (r >= 0 && x->stdin_mode == SX_STDIN_STREAM) {
		r = sha256_new(&x->in_hash);
	}
	if (r >= 0) {
		r = agent_client_exec(s->box->agent, argv, env, cwd && *cwd ? cwd : NULL,
				      x->stdin_mode != SX_STDIN_NONE, &x->agent_id);
	}
	if (r < 0) {
		x->error = strdup(r == -EBUSY ? "the box runs 64 commands already"
					      : "the command could not be sent to the box");
		sx_finish(s, x);
		return;
	}
	if (x->stdin_mode == SX_STDIN_STREAM) {
		uint8_t c[4] = { EXS_STDIN_WINDOW >> 24, (EXS_STDIN_WINDOW >> 16) & 0xff,
				 (EXS_STDIN_WINDOW >> 8) & 0xff, EXS_STDIN_WINDOW & 0xff };
		sx_frame(x, EXS_CREDIT, c, sizeof(c));
	}
	return;

refuse : {
	json_t *done = json_pack("{s:s,s:I,s:s,s:s}", "op", "done", "exec", (json_int_t)(exec > 0 ? exec : 1), "status",
				 "error", "error",
				 r == -EBUSY ? "the box runs 64 commands already" : "malformed exec request");
	send_ctl(s, done);
}
}

/* Handle one frame from an exec client. */
static void client_frame(struct sup *s, struct sx *x, uint8_t type, const struct buf *p)
{
	switch (type) {
	case EXS_STDIN:
		if (x->stdin_mode != SX_STDIN_STREAM || x->in_eof || buf_len(p) == 0 ||
		    buf_len(&x->in) + buf_len(p) > EXS_STDIN_WINDOW) {
			x->client_gone = true; /* beyond its credit: a broken client */
			sx_kill(s, x, "the client broke the exec stream protocol");
			return;
		}
		if (buf_put(&x->in, buf_ptr(p), buf_len(p)) < 0 ||
		    sha256_update(x->in_hash, buf_ptr(p), buf_len(p)) < 0) {
			sx_kill(s, x, "out of memory");
			return;
		}
		x->in_total += buf_len(p);
		return;
	case EXS_STDIN_EOF:
		x->in_eof = true;
		return;
	case EXS_SIGNAL:
		if (buf_len(p) == 1 && agent_signal_allowed(buf_ptr(p)[0]) && !x->finished) {
			if (agent_client_signal(s->box->agent, x->agent_id, buf_ptr(p)[0]) < 0) {
				log_warn("supervisor: signal for exec %lld not sent", (long long)x->exec);
			}
		}
		return;
	default:
		x->client_gone = true;
		sx_kill(s, x, "the client broke the exec stream protocol");
		return;
	}
}

static void client_read(struct sup *s, struct sx *x)
{
	uint8_t rb[16384];
	struct buf payload;

	if (buf_init(&payload, EXS_MAX_FRAME, 0) < 0) {
		return;
	}
	for (;;) {
		ssize_t n = recv(x->fd, rb, sizeof(rb), MSG_DONTWAIT);
		size_t off = 0;
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			break;
		}
		if (n <= 0) {
			/* The client went away (Ctrl-C'd hard or killed): the command must not outlive it. */
			x->client_gone = true;
			sx_kill(s, x, "the client went away");
			break;
		}
		while (off < (size_t)n && !x->client_gone) {
			size_t used = 0;
			uint8_t type;
			int r = frame_decoder_feed(&x->dec, rb + off, (size_t)n - off, &used);
			off += used;
			if (r < 0) {
				x->client_gone = true;
				sx_kill(s, x, "the client broke the exec stream protocol");
				break;
			}
			if (r == 1) {
				buf_reset(&payload);
				if (frame_decoder_take(&x->dec, &type, &payload) >= 0) {
					client_frame(s, x, type, &payload);
				}
			}
		}
		if (x->client_gone) {
			break;
		}
	}
	buf_release(&payload);
}

static void client_flush(struct sx *x)
{
	while (x->fd >= 0 && !x->client_gone && buf_len(&x->out) > 0) {
		ssize_t n = send(x->fd, buf_ptr(&x->out), buf_len(&x->out), MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR) {
				x->client_gone = true;
			}
			return;
		}
		(void)buf_consume(&x->out, (size_t)n);
	}
}

/* Move stdin towards the agent within its credit; return credit to the client. */
static void push_stdin(struct sup *s, struct sx *x)
{
	if (x->finished || x->in_closed || x->stdin_mode == SX_STDIN_NONE) {
		return;
	}
	if (buf_len(&x->in) > 0) {
		size_t sent = 0;
		if (agent_client_stdin(s->box->agent, x->agent_id, buf_ptr(&x->in), buf_len(&x->in), &sent) >= 0 &&
		    sent > 0) {
			(void)buf_consume(&x->in, sent);
			if (x->stdin_mode == SX_STDIN_STREAM) {
				x->credit_owed += (uint32_t)sent;
			}
		}
	}
	if (x->credit_owed >= EXS_STDIN_WINDOW / 4 || (x->credit_owed > 0 && buf_len(&x->in) == 0)) {
		uint32_t c = x->credit_owed;
		uint8_t b[4] = { (uint8_t)(c >> 24), (uint8_t)(c >> 16), (uint8_t)(c >> 8), (uint8_t)c };
		sx_frame(x, EXS_CREDIT, b, sizeof(b));
		x->credit_owed = 0;
	}
	if (x->in_eof && buf_len(&x->in) == 0 && x->started) {
		if (agent_client_stdin_close(s->box->agent, x->agent_id) >= 0) {
			x->in_closed = true;
		}
	}
}

/* Keep the output queued for all of the box's clients under SUPERVISOR_BOX_OUT_MAX: the slowest reader goes first. */
static void box_out_check(struct sup *s)
{
	for (;;) {
		struct sx *slow = NULL;
		size_t total = 0;

		for (size_t i = 0; i < ARRAY_SIZE(s->x); i++) {
			struct sx *x = &s->x[i];
			if (!x->used || x->client_gone || buf_len(&x->out) == 0) {
				continue;
			}
			total += buf_len(&x->out);
			if (!slow || buf_len(&x->out) > buf_len(&slow->out)) {
				slow = x;
			}
		}
		if (!slow || total <= SUPERVISOR_BOX_OUT_MAX) {
			return;
		}
		slow->client_gone = true;
		if (!slow->why) {
			slow->why =
				strdup("the client did not read the output (the box's 32 MiB of output queued for its "
				       "clients was reached, and this client had the most)");
		}
		sx_kill(s, slow, NULL);
		/* Its queue is never sent now: give the memory back at once. */
		buf_release(&slow->out);
		if (buf_init(&slow->out, SUPERVISOR_EXEC_OUT_MAX, 0) < 0) {
			log_warn("supervisor: exec %lld: output queue", (long long)slow->exec);
		}
	}
}

static void agent_event(struct sup *s, const struct agent_event *ev)
{
	struct sx *x = ev->type == AGENT_EV_PONG || ev->type == AGENT_EV_SHUTDOWN_ACK ? NULL : sx_by_agent(s, ev->id);

	if (!x) {
		return;
	}
	switch (ev->type) {
	case AGENT_EV_STARTED:
		x->started = true;
		sx_frame(x, EXS_STARTED, NULL, 0);
		break;
	case AGENT_EV_STDOUT:
	case AGENT_EV_STDERR:
		sx_frame(x, ev->type == AGENT_EV_STDOUT ? EXS_STDOUT : EXS_STDERR, ev->data, ev->len);
		box_out_check(s);
		break;
	case AGENT_EV_EXIT:
		x->exited = ev->exited;
		x->code = ev->exited ? ev->code : 0;
		x->sig = ev->exited ? 0 : ev->signal;
		sx_finish(s, x);
		break;
	case AGENT_EV_ERROR:
		if (!x->started) {
			char msg[512];
			(void)snprintf(msg, sizeof(msg), "the box could not start the command (%s): %s",
				       ev->err_code ? ev->err_code : "?", ev->message ? ev->message : "");
			x->error = strdup(msg);
			sx_finish(s, x);
		}
		break;
	case AGENT_EV_STDIN_CREDIT:
	default:
		break;
	}
}

/* The daemon recorded the completion: the client gets the exit status now. */
static void release_exec(struct sup *s, const json_t *m)
{
	int64_t exec;

	if (json_get_int(m, "exec", &exec) < 0) {
		return;
	}
	for (size_t i = 0; i < ARRAY_SIZE(s->x); i++) {
		struct sx *x = &s->x[i];
		if (x->used && x->held && x->exec == exec) {
			sx_frame(x, EXS_EXIT, x->exit_frame, sizeof(x->exit_frame));
			x->held = false;
		}
	}
}

static int boot(struct sup *s, json_t *m)
{
	struct vm_box_opts o = { 0 };
	_cleanup_(strv_freep) char **env = NULL;
	const char *accel = "auto", *workspace = NULL, *kernel = NULL, *modules = NULL;
	int64_t vcpus = 0, mem = 0, scratch = 0, lifetime = 0;
	int r;

	if (json_get_string(m, "box_id", &o.box_id) < 0 || json_get_string(m, "rootfs", &o.rootfs) < 0 ||
	    json_get_string(m, "state_dir", &o.state_dir) < 0 || json_get_string(m, "guest", &o.guest_bin) < 0 ||
	    json_get_int(m, "vcpus", &vcpus) < 0 || json_get_int(m, "mem_mib", &mem) < 0 ||
	    json_get_int(m, "scratch_mib", &scratch) < 0 || json_get_int(m, "lifetime_s", &lifetime) < 0) {
		return -EINVAL;
	}
	(void)json_get_string(m, "accel", &accel);
	if (json_get_string(m, "workspace", &workspace) < 0) {
		workspace = NULL;
	}
	if (json_get_string(m, "console_keep", &o.console_keep) < 0) {
		o.console_keep = NULL;
	}
	if (json_get_string(m, "kernel", &kernel) < 0 || json_get_string(m, "modules", &modules) < 0) {
		kernel = modules = NULL;
	}
	env = strv_from_json(json_object_get(m, "env"), BOOT_MAX_ENV);
	if (!env) {
		return -EINVAL;
	}
	r = vm_accel_parse(accel, &o.accel);
	if (r < 0) {
		return r;
	}
	o.allow_fetch = true;
	o.workspace = workspace;
	o.kernel = kernel;
	o.modules_dir = modules;
	o.vcpus = (unsigned)vcpus;
	o.mem_mib = (unsigned)mem;
	o.scratch_mib = (unsigned)scratch;
	o.env = env;
	s->lifetime_deadline_ms = now_ms() + (uint64_t)lifetime * 1000;
	r = vm_box_boot(&o, &s->box);
	if (r == -ETIMEDOUT) {
		/* A TCG guest that never answered: seen rarely on a loaded host. One more try, then give up. */
		send_event(s, "box.boot_retry", "the guest did not answer within the boot timeout; booting again");
		r = vm_box_boot(&o, &s->box);
	}
	return r;
}

static bool busy(const struct sup *s)
{
	for (size_t i = 0; i < ARRAY_SIZE(s->x); i++) {
		if (s->x[i].used) {
			return true;
		}
	}
	return false;
}

/*
 * The agent connection is over: a guest that broke the protocol (the
 * violation names the frame) or one that went away. The daemon hears why
 * before the stop begins, and the stop reason carries it.
 */
static void stop_box(struct sup *s, const char *reason);

static void agent_lost(struct sup *s, int r)
{
	const char *why = agent_client_violation(s->box->agent);

	if (why) {
		(void)snprintf(s->lost, sizeof(s->lost), "%s", why);
		send_event(s, "box.protocol_violation", s->lost);
	} else {
		(void)snprintf(s->lost, sizeof(s->lost), "agent connection lost: %s", tk_strerror(r));
		send_event(s, "box.agent_lost", s->lost);
	}
	stop_box(s, s->lost);
}

/* Stop: every command is killed, the guest is asked to power off, QEMU is reaped. */
static void stop_box(struct sup *s, const char *reason)
{
	uint64_t until = now_ms() + 3000;
	int r;

	s->stopping = true;
	s->stop_reason = reason;
	for (size_t i = 0; i < ARRAY_SIZE(s->x); i++) {
		if (s->x[i].used && !s->x[i].finished) {
			sx_kill(s, &s->x[i], strcmp(reason, "stop") == 0 ? "the box is stopping" : reason);
		}
	}
	/* Give killed commands a moment to report their exit (their clients get a status). */
	while (busy(s) && now_ms() < until) {
		struct agent_event ev;
		r = agent_client_next(s->box->agent, 50, &ev);
		if (r < 0) {
			break;
		}
		if (r > 0) {
			agent_event(s, &ev);
		}
		for (size_t i = 0; i < ARRAY_SIZE(s->x); i++) {
			struct sx *x = &s->x[i];
			if (x->used && x->finished) {
				if (x->held) {
					sx_frame(x, EXS_EXIT, x->exit_frame, sizeof(x->exit_frame));
					x->held = false;
				}
				client_flush(x);
				sx_release(x);
			}
		}
	}
	for (size_t i = 0; i < ARRAY_SIZE(s->x); i++) {
		struct sx *x = &s->x[i];
		if (x->used && !x->finished) {
			if (!x->why) {
				x->why = strdup("the box stopped");
			}
			sx_finish(s, x);
		}
		if (x->used && x->held) {
			/* Stopping: no wait for the daemon's release. */
			sx_frame(x, EXS_EXIT, x->exit_frame, sizeof(x->exit_frame));
			x->held = false;
		}
		if (x->used) {
			client_flush(x);
			sx_release(x);
		}
	}
	r = vm_box_shutdown(s->box, SUP_SHUTDOWN_MS);
	if (r < 0) {
		send_event(s, "box.shutdown_unclean", tk_strerror(r));
	}
}

int supervisor_main(int fd)
{
	struct sup s = { .ctl = fd };
	int fds[IPC_MAX_FDS];
	size_t nfds = 0;
	json_t *m = NULL;
	const char *op;
	int r;

	log_set_ident("tkbox-supervisor");
	(void)signal(SIGPIPE, SIG_IGN);
	for (size_t i = 0; i < ARRAY_SIZE(s.x); i++) {
		s.x[i].fd = -1;
	}
	r = buf_init(&s.msg, SUPMSG_MAX + 1, 0);
	if (r >= 0) {
		r = ipc_recv(fd, &s.msg, fds, 0, &nfds);
	}
	if (r >= 0) {
		r = json_parse_strict(buf_ptr(&s.msg), buf_len(&s.msg), NULL, &m);
	}
	if (r >= 0 && (json_get_string(m, "op", &op) < 0 || strcmp(op, "boot") != 0)) {
		r = -EPROTO;
	}
	if (r >= 0) {
		r = boot(&s, m);
	}
	json_decref(m);
	m = NULL;
	if (r < 0) {
		char msg[256];
		(void)snprintf(msg, sizeof(msg), "the box did not boot: %s", tk_strerror(r));
		send_ctl(&s, json_pack("{s:s,s:s}", "op", "failed", "message", msg));
		buf_release(&s.msg);
		return 1;
	}
	/* Up: from here on guest bytes arrive, and no new program is ever needed. */
	r = sandbox_supervisor();
	if (r < 0) {
		char msg[256];
		(void)snprintf(msg, sizeof(msg), "the supervisor could not confine itself: %s", tk_strerror(r));
		send_ctl(&s, json_pack("{s:s,s:s}", "op", "failed", "message", msg));
		vm_box_free(s.box);
		buf_release(&s.msg);
		return 1;
	}
	send_ctl(&s, json_pack("{s:s,s:s,s:s,s:I}", "op", "ready", "accel", vm_accel_name(s.box->accel), "isolation",
			       s.box->isolation, "ready_ms",
			       (json_int_t)((s.box->t_ready_ns - s.box->t_start_ns) / 1000000)));

	while (!s.stopping) {
		struct pollfd p[2 + SUPERVISOR_MAX_EXECS];
		struct sx *px[2 + SUPERVISOR_MAX_EXECS];
		size_t np = 0;
		uint64_t t = now_ms(), next = s.lifetime_deadline_ms;
		int timeout;
		bool pending_stdin = false, agent_more;

		/*
		 * Read the agent without waiting, at most SUP_AGENT_EVENTS_PER_TURN
		 * events, then serve the daemon and the clients: a guest that never
		 * stops sending cannot starve them. Each call writes the host's queued
		 * requests first. What is left in the client's buffer is invisible to
		 * poll(), so the turn ends with a zero timeout when any is.
		 */
		r = 0;
		agent_more = false;
		for (int k = 0; k < SUP_AGENT_EVENTS_PER_TURN; k++) {
			struct agent_event ev;
			r = agent_client_next(s.box->agent, 0, &ev);
			if (r <= 0) {
				break;
			}
			agent_event(&s, &ev);
			agent_more = k + 1 == SUP_AGENT_EVENTS_PER_TURN;
		}
		if (r < 0) {
			agent_lost(&s, r);
			break;
		}
		for (size_t i = 0; i < ARRAY_SIZE(s.x); i++) {
			struct sx *x = &s.x[i];
			if (!x->used) {
				continue;
			}
			if (!x->finished && t >= x->deadline_ms) {
				sx_kill(&s, x, "the command ran past its time limit and was killed");
			}
			if (x->client_gone && !x->finished) {
				sx_kill(&s, x, NULL);
			}
			if (!x->finished && x->killed && t >= x->kill_grace_ms) {
				/*
				 * The guest did not end a command it was told to kill: the host
				 * ends it on its side (the client is answered, the completion
				 * recorded), whatever the guest does with it later.
				 */
				if (t >= x->deadline_ms) {
					free(x->why);
					x->why = strdup(SUP_TIMED_OUT_HOST);
				} else if (!x->why) {
					x->why = strdup("the box did not stop the command after its kill, so the host "
							"ended it");
				}
				s.ignored_kills++;
				sx_finish(&s, x);
			}
			push_stdin(&s, x);
			client_flush(x);
			if (x->held && t >= x->held_until_ms) {
				sx_frame(x, EXS_EXIT, x->exit_frame, sizeof(x->exit_frame));
				x->held = false;
			}
			if (x->held) {
				next = MIN(next, x->held_until_ms);
			}
			if (x->finished && !x->held && (buf_len(&x->out) == 0 || x->client_gone)) {
				sx_release(x);
				continue;
			}
			if (buf_len(&x->in) > 0 && !x->finished) {
				pending_stdin = true;
			}
			if (!x->finished) {
				/* Never a past deadline as the poll timeout: a killed command waits for its grace. */
				next = MIN(next, x->killed ? x->kill_grace_ms : x->deadline_ms);
			}
			if (x->fd >= 0 && !x->client_gone) {
				p[np] = (struct pollfd){ .fd = x->fd,
							 .events = (short)((x->finished ? 0 : POLLIN) |
									   (buf_len(&x->out) ? POLLOUT : 0)) };
				px[np++] = x;
			}
		}
		if (s.ignored_kills >= SUP_MAX_IGNORED_KILLS) {
			(void)snprintf(s.lost, sizeof(s.lost),
				       "the box did not stop %u commands it was told to kill (SUP_MAX_IGNORED_KILLS)",
				       s.ignored_kills);
			send_event(&s, "box.kills_ignored", s.lost);
			stop_box(&s, s.lost);
			break;
		}
		if (t >= s.lifetime_deadline_ms) {
			send_event(&s, "box.lifetime", "the box reached its lifetime limit");
			stop_box(&s, "the box reached its lifetime limit");
			break;
		}
		p[np] = (struct pollfd){ .fd = s.ctl, .events = POLLIN };
		px[np++] = NULL;
		/* Requests queued on this turn (a kill at a deadline) go out now, not after the wait. */
		r = agent_client_flush(s.box->agent);
		if (r < 0) {
			agent_lost(&s, r);
			break;
		}
		p[np] = (struct pollfd){ .fd = agent_client_fd(s.box->agent),
					 .events = (short)(POLLIN | (r > 0 ? POLLOUT : 0)) };
		px[np++] = NULL;
		timeout = (int)MIN(next - MIN(next, t), (uint64_t)60000);
		if (pending_stdin) {
			timeout = MIN(timeout, 10); /* queued towards the agent: come back to flush it */
		}
		if (agent_more || agent_client_buffered(s.box->agent)) {
			timeout = 0; /* guest frames already read (or a full turn of them): no waiting */
		}
		r = poll(p, np, timeout);
		if (r < 0 && errno != EINTR) {
			stop_box(&s, "internal error");
			break;
		}
		if (r <= 0) {
			continue;
		}
		for (size_t i = 0; i + 2 < np; i++) {
			if (p[i].revents & (POLLIN | POLLHUP | POLLERR)) {
				client_read(&s, px[i]);
			}
		}
		if (p[np - 2].revents) {
			r = ipc_recv(s.ctl, &s.msg, fds, IPC_MAX_FDS, &nfds);
			if (r < 0) {
				/* The daemon is gone: nobody is left to record what the box does. */
				stop_box(&s, "the daemon went away");
				break;
			}
			r = json_parse_strict(buf_ptr(&s.msg), buf_len(&s.msg), NULL, &m);
			if (r >= 0 && json_get_string(m, "op", &op) >= 0) {
				if (strcmp(op, "exec") == 0) {
					start_exec(&s, m, fds, nfds);
				} else if (strcmp(op, "release") == 0) {
					release_exec(&s, m);
				} else if (strcmp(op, "stop") == 0) {
					stop_box(&s, "stop");
				}
			}
			for (size_t i = 0; i < nfds; i++) {
				if (fds[i] >= 0) {
					(void)close(fds[i]);
				}
			}
			json_decref(m);
			m = NULL;
		}
	}
	send_ctl(&s, json_pack("{s:s,s:s}", "op", "stopped", "reason", s.stop_reason ? s.stop_reason : "stop"));
	vm_box_free(s.box);
	buf_release(&s.msg);
	return 0;
}
