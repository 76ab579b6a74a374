/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <openssl/ssl.h>
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
#include "daemon/egress-sup.h"
#include "daemon/ipc.h"
#include "daemon/sandbox.h"
#include "daemon/sup-diff.h"
#include "daemon/supervisor.h"
#include "daemon/supmsg.h"
#include "exec-stream.h"
#include "io.h"
#include "json.h"
#include "log.h"
#include "vmm/vm-box.h"

#define SUP_SHUTDOWN_MS 20000
#define SUP_RELEASE_WAIT_MS 60000
#define SUP_KILL_GRACE_MS 10000 /* a killed command has this long to end in the guest */
#define SUP_MAX_IGNORED_KILLS 3 /* commands a guest may leave running after their kill before its box is stopped */
#define SUP_TIMED_OUT_HOST "the command ran past its time limit; the box did not stop the command, so the host ended it"
#define SUP_DAEMON_GONE "the daemon went away"
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
	struct exit_status sent_exit; /* what the held EXIT frame carries */
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
	bool has_exit; /* the agent reported how the command ended */
	struct exit_status exit;
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
	char refused[512]; /* why a daemon message was refused, when one was */
	struct buf msg;
	struct supmon mon; /* what the daemon and this side may send now (supmsg.h) */
	struct egress_sup *egress; /* the host end of tkbox.egress and the proxy (egress-sup.c) */
	struct egress_ca *ca; /* the box's CA, until the proxy takes it (NULL: the box has none) */
	SSL_CTX *client_ctx; /* the origins' trust, loaded with the CA before the supervisor confines itself */
	struct sup_diff diff; /* the patch door: the one diff the daemon asked for (sup-diff.c) */
};

static uint64_t now_ms(void)
{
	return vm_box_now_ns() / 1000000ull;
}

/* Every message to the daemon goes through the monitor and the one encoder (supmsg.c). */
static int send_msg_fds(struct sup *s, const struct supmsg *m, const int *fds)
{
	const char *why = NULL;
	int r = ipc_send_msg(s->ctl, &s->mon, SUPMSG_TO_DAEMON, m, fds, &why);

	if (r < 0) {
		log_warn("supervisor: telling the daemon %s: %s", supmsg_op_name(m->op), why ? why : tk_strerror(r));
	}
	return r;
}

/* A message without fds. */
static int send_msg(struct sup *s, const struct supmsg *m)
{
	return send_msg_fds(s, m, NULL);
}

/* The diff's answer goes through the same monitor, with the patch's memfd. */
static int diff_send(void *ctx, const struct supmsg *m, const int *fds)
{
	return send_msg_fds(ctx, m, fds);
}

/* What the proxy tells the daemon goes through the same monitor. */
static int egress_send(void *ctx, const struct supmsg *m)
{
	return send_msg(ctx, m);
}

static void send_event(struct sup *s, const char *event, const char *detail)
{
	struct supmsg m = { .op = SUPMSG_EVENT, .event = (char *)event, .detail = (char *)detail };

	(void)send_msg(s, &m);
}

static void send_text(struct sup *s, enum supmsg_op op, const char *text)
{
	struct supmsg m = { .op = op };

	if (op == SUPMSG_FAILED) {
		m.message = (char *)text;
	} else {
		m.reason = (char *)text;
	}
	(void)send_msg(s, &m);
}

/* Queue one exec stream frame for the client (exec-stream.c encodes it). */
static void sx_queue(struct sx *x, const struct exs_frame *f)
{
	int r;

	if (x->fd < 0 || x->client_gone) {
		return;
	}
	r = exs_encode(f, &x->out);
	if (r == -EINVAL || r == -EPROTO) {
		log_warn("supervisor: exec %lld: frame 0x%02x not sent: %s", (long long)x->exec, f->type,
			 tk_strerror(r));
		return;
	}
	if (r < 0) {
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

static void sx_frame(struct sx *x, uint8_t type, const void *p, size_t n)
{
	struct exs_frame f = { .type = type, .data = p, .len = n };

	sx_queue(x, &f);
}

static void sx_text(struct sx *x, const char *text)
{
	sx_frame(x, EXS_ERROR, text, MIN(strlen(text), EXS_MAX_ERROR));
}

static void sx_exit(struct sx *x, const struct exit_status *st)
{
	struct exs_frame f = { .type = EXS_EXIT, .exit = *st };

	sx_queue(x, &f);
}

static void sx_credit(struct sx *x, uint32_t credit)
{
	struct exs_frame f = { .type = EXS_CREDIT, .credit = credit };

	sx_queue(x, &f);
}

/* The held EXIT goes to the client now (the daemon released it, it waited too long, or the box stops). */
static void sx_unhold(struct sx *x)
{
	if (x->held) {
		sx_exit(x, &x->sent_exit);
		x->held = false;
	}
}

/*
 * Close a client's stream. Bytes it sent that nobody read (a last stdin
 * frame behind the command's end) would make close() send a reset, and a
 * reset destroys what the client has not read yet: its EXIT frame. Read
 * what is queued first, then half-close, then close.
 */
static void client_close(int fd)
{
	uint8_t sink[4096];

	for (int i = 0; i < 256 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++) {
	}
	(void)shutdown(fd, SHUT_WR);
	(void)close(fd);
}

static void sx_release(struct sx *x)
{
	if (x->fd >= 0) {
		client_close(x->fd);
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

/* Streamed stdin's digest as hex into ret (65 bytes), or "" when there is none. */
static void stdin_digest(struct sx *x, char ret[static 65])
{
	uint8_t h[SHA256_LEN];
	struct buf hx;

	ret[0] = '\0';
	if (x->stdin_mode != SX_STDIN_STREAM || !x->in_hash || sha256_final(x->in_hash, h) < 0 ||
	    buf_init(&hx, 65, 0) < 0) {
		return;
	}
	if (hex_encode(h, sizeof(h), &hx) >= 0 && buf_len(&hx) == 64) {
		memcpy(ret, buf_ptr(&hx), 64);
		ret[64] = '\0';
	}
	buf_release(&hx);
}

/* The command is over: tell the client and the daemon. */
static void sx_finish(struct sup *s, struct sx *x)
{
	struct supmsg done = { .op = SUPMSG_DONE, .exec = x->exec, .has_exit = x->has_exit, .exit = x->exit };
	char hex[65];

	x->finished = true;
	if (x->why) {
		sx_text(x, x->why);
	}
	if (x->error && x->why != x->error) {
		sx_text(x, x->error);
	}
	/* The client's exit status: how the command ended, else 125 (it started) or 127 (it never did). */
	x->sent_exit = x->has_exit ? x->exit
				   : (struct exit_status){ .kind = EXIT_KIND_EXITED, .value = x->started ? 125 : 127 };
	if (s->stopping) {
		sx_exit(x, &x->sent_exit);
	} else {
		/* When the client sees the exit status, the completion is in the record (or its loss is). */
		x->held = true;
		x->held_until_ms = now_ms() + SUP_RELEASE_WAIT_MS;
	}

	done.error = x->why ? x->why : x->error;
	done.ok = x->has_exit && x->exit.kind == EXIT_KIND_EXITED && x->exit.value == 0 && !done.error;
	stdin_digest(x, hex);
	if (hex[0]) {
		done.stdin_sha256 = hex;
		done.stdin_bytes = (int64_t)x->in_total;
	}
	if (send_msg(s, &done) < 0 && done.error) {
		/* A guest's error text that does not encode (cut mid-character): the result still goes. */
		done.error = "the command's error text could not be sent";
		(void)send_msg(s, &done);
	}
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? negative_errno() : 0;
}

/* Read the up-front stdin the daemon decided on (a sealed memfd, at most DOOR_MAX_STDIN). */
static int read_upfront(int fd, struct buf *in)
{
	struct stat st;
	uint8_t *dst;
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
	return io_pread_all(fd, dst, (size_t)st.st_size, 0);
}

/* An exec the supervisor cannot take is answered at once: done with an error (its client's stream just ends). */
static void refuse_exec(struct sup *s, int64_t exec, const char *why)
{
	struct supmsg done = { .op = SUPMSG_DONE, .exec = exec, .error = (char *)why };

	(void)send_msg(s, &done);
}

static void start_exec(struct sup *s, const struct supmsg *m, int *fds)
{
	struct sx *x = NULL;
	int r;

	for (size_t i = 0; i < ARRAY_SIZE(s->x); i++) {
		if (!s->x[i].used) {
			x = &s->x[i];
			break;
		}
	}
	if (!x) {
		refuse_exec(s, m->exec, "the box runs 64 commands already");
		return;
	}
	*x = (struct sx){ .used = true, .exec = m->exec, .fd = fds[0] };
	fds[0] = -1;
	x->stdin_mode = m->stdin_mode == SUPMSG_STDIN_UPFRONT  ? SX_STDIN_UPFRONT
			: m->stdin_mode == SUPMSG_STDIN_STREAM ? SX_STDIN_STREAM
							       : SX_STDIN_NONE;
	x->deadline_ms = now_ms() + (uint64_t)m->timeout_s * 1000;
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
		r = read_upfront(fds[1], &x->in);
		x->in_eof = true;
	}
	if (r >= 0 && x->stdin_mode == SX_STDIN_STREAM) {
		r = sha256_new(&x->in_hash);
	}
	if (r >= 0) {
		r = agent_client_exec(s->box->agent, m->argv, m->env, m->cwd && *m->cwd ? m->cwd : NULL,
				      x->stdin_mode != SX_STDIN_NONE, &x->agent_id);
	}
	if (r < 0) {
		x->error = strdup(r == -EBUSY ? "the box runs 64 commands already"
					      : "the command could not be sent to the box");
		sx_finish(s, x);
		return;
	}
	if (x->stdin_mode == SX_STDIN_STREAM) {
		sx_credit(x, EXS_STDIN_WINDOW);
	}
}

/* Handle one frame from an exec client (exec-stream.c decodes it). */
static void client_frame(struct sup *s, struct sx *x, uint8_t type, const struct buf *p)
{
	struct exs_frame f;

	if (exs_decode(EXS_FROM_CLIENT, type, buf_ptr(p), buf_len(p), &f) < 0) {
		x->client_gone = true;
		sx_kill(s, x, "the client broke the exec stream protocol");
		return;
	}
	switch (f.type) {
	case EXS_STDIN:
		if (x->stdin_mode != SX_STDIN_STREAM || x->in_eof || buf_len(&x->in) + f.len > EXS_STDIN_WINDOW) {
			x->client_gone = true; /* beyond its credit: a broken client */
			sx_kill(s, x, "the client broke the exec stream protocol");
			return;
		}
		if (buf_put(&x->in, f.data, f.len) < 0 || sha256_update(x->in_hash, f.data, f.len) < 0) {
			sx_kill(s, x, "out of memory");
			return;
		}
		x->in_total += f.len;
		return;
	case EXS_STDIN_EOF:
		x->in_eof = true;
		return;
	case EXS_SIGNAL:
		if (!x->finished && agent_client_signal(s->box->agent, x->agent_id, f.signal) < 0) {
			log_warn("supervisor: signal for exec %lld not sent", (long long)x->exec);
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
		sx_credit(x, x->credit_owed);
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
	struct sx *x;

	if (sup_diff_event(&s->diff, ev)) {
		return;
	}
	x = ev->type == AGENT_EV_PONG || ev->type == AGENT_EV_SHUTDOWN_ACK ? NULL : sx_by_agent(s, ev->id);
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
		x->has_exit = true;
		x->exit = ev->exit;
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
static void release_exec(struct sup *s, int64_t exec)
{
	for (size_t i = 0; i < ARRAY_SIZE(s->x); i++) {
		struct sx *x = &s->x[i];
		if (x->used && x->held && x->exec == exec) {
			sx_unhold(x);
		}
	}
}

/*
 * The box's CA and the origins' trust (issue 13), read now: once confined
 * (Landlock) the supervisor could not open OpenSSL's configuration or the
 * trust store. The key's PEM is wiped once loaded.
 */
static int load_tls(struct sup *s, struct supmsg *m)
{
	int r = 0;

	if (!m->ca_cert != !m->ca_key) {
		r = -EINVAL;
	} else if (m->ca_cert) {
		r = OPENSSL_init_ssl(OPENSSL_INIT_LOAD_CONFIG, NULL) == 1 ? 0 : -EIO;
		r = r < 0 ? r : egress_ca_load(m->ca_cert, m->ca_key, &s->ca);
		r = r < 0 ? r : egress_tls_client_ctx(m->upstream_ca, &s->client_ctx);
	}
	if (m->ca_key) {
		explicit_bzero(m->ca_key, strlen(m->ca_key));
	}
	if (r < 0) {
		(void)snprintf(
			s->refused, sizeof(s->refused),
			"the box's CA or the trust file for origins (tkbox daemon --egress-ca%s%s) did not load: %s",
			m->upstream_ca ? " " : "", m->upstream_ca ? m->upstream_ca : "", tk_strerror(r));
	}
	return r;
}

static int boot(struct sup *s, struct supmsg *m)
{
	struct vm_box_opts o = { 0 };
	int r = load_tls(s, m);

	if (r < 0) {
		return r;
	}

	o.box_id = m->box_id;
	o.rootfs = m->rootfs;
	o.state_dir = m->state_dir;
	o.guest_bin = m->guest;
	o.console_keep = m->console_keep;
	r = vm_accel_parse(m->accel, &o.accel);
	if (r < 0) {
		return r;
	}
	o.allow_fetch = true;
	o.workspace = m->workspace;
	o.kernel = m->kernel;
	o.modules_dir = m->modules;
	o.vcpus = (unsigned)m->vcpus;
	o.mem_mib = (unsigned)m->mem_mib;
	o.scratch_mib = (unsigned)m->scratch_mib;
	o.env = m->env;
	o.ca_pem = m->ca_cert; /* the box's CA: the guest installs it (NULL: none) */
	s->lifetime_deadline_ms = now_ms() + (uint64_t)m->lifetime_s * 1000;
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

/* The box's egress is over: a guest that broke the mux protocol (the tracker's rule), or the port closed. */
static void egress_lost(struct sup *s, int r)
{
	const char *why = egress_sup_violation(s->egress);

	if (why) {
		(void)snprintf(s->lost, sizeof(s->lost), "%s", why);
		send_event(s, "box.protocol_violation", s->lost);
	} else {
		(void)snprintf(s->lost, sizeof(s->lost), "the egress channel failed: %s", tk_strerror(r));
		send_event(s, "box.agent_lost", s->lost);
	}
	stop_box(s, s->lost);
}

/* Stop: every command is killed, the guest is asked to power off, QEMU is reaped. */
static void stop_box(struct sup *s, const char *reason)
{
	uint64_t until = now_ms() + 3000;
	int r;

	/*
	 * A stop of our own (lifetime, ignored kills, the agent lost, an
	 * internal error) is told at once, not ~23 s later with stopped: the
	 * daemon closes egress now, so no conn it still decides on is dialled.
	 */
	if (!s->stopping && strcmp(reason, "stop") != 0 && strcmp(reason, SUP_DAEMON_GONE) != 0) {
		send_event(s, "box.stopping", reason);
	}
	s->stopping = true;
	s->stop_reason = reason;
	/* A diff still pending gets its answer before the stopped. */
	if (sup_diff_deadline(&s->diff) != 0) {
		char why[SUPMSG_MAX_TEXT];
		(void)snprintf(why, sizeof(why), "the box stopped before its patch was made (%s)", reason);
		sup_diff_fail(&s->diff, why);
	}
	/* Egress closes the moment a stop begins: tunnels are cut, later OPENs refused. */
	if (s->egress) {
		egress_sup_stop(s->egress);
	}
	for (size_t i = 0; i < ARRAY_SIZE(s->x); i++) {
		if (s->x[i].used && !s->x[i].finished) {
			sx_kill(s, &s->x[i], strcmp(reason, "stop") == 0 ? "the box is stopping" : reason);
		}
	}
	/* Give killed commands a moment to report their exit (their clients get a status). */
	while (busy(s) && now_ms() < until) {
		struct agent_event ev;
		if (s->egress) {
			egress_sup_drain(s->egress);
		}
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
				sx_unhold(x);
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
		if (x->used) {
			/* Stopping: no wait for the daemon's release. */
			sx_unhold(x);
		}
		if (x->used) {
			client_flush(x);
			sx_release(x);
		}
	}
	if (s->egress) {
		egress_sup_drain(s->egress);
	}
	r = vm_box_shutdown(s->box, SUP_SHUTDOWN_MS);
	if (r < 0) {
		send_event(s, "box.shutdown_unclean", tk_strerror(r));
	}
}

/*
 * One message from the daemon, through the one decoder and the monitor
 * (supmsg.c). A message out of the table, out of state or with the wrong fds
 * is refused: the box is stopped and the supervisor exits (-EPROTO).
 */
static int ctl_message(struct sup *s, int *fds, size_t nfds)
{
	struct supmsg m = { 0 };
	const char *why = NULL;
	int r = supmsg_decode(SUPMSG_TO_SUPERVISOR, buf_ptr(&s->msg), buf_len(&s->msg), &m);
	const char *what = r >= 0 ? supmsg_op_name(m.op) : "a message";

	if (r < 0) {
		why = r == -EPROTO ? "an operation outside the monitor's table" : "a malformed message";
	} else if (supmon_apply(&s->mon, SUPMSG_TO_SUPERVISOR, &m, &why) < 0) {
		r = -EPROTO;
	} else if (nfds != supmsg_fds(&m)) {
		why = "a message with the wrong number of file descriptors";
		r = -EPROTO;
	}
	if (r < 0) {
		(void)snprintf(s->refused, sizeof(s->refused), "the daemon broke the supervisor protocol: %s: %s", what,
			       why);
		log_warn("supervisor: %s", s->refused);
		supmsg_release(&m);
		return -EPROTO;
	}
	switch (m.op) {
	case SUPMSG_BOOT:
		r = boot(s, &m);
		break;
	case SUPMSG_EXEC:
		start_exec(s, &m, fds);
		break;
	case SUPMSG_RELEASE:
		release_exec(s, m.exec);
		break;
	case SUPMSG_STOP:
		stop_box(s, "stop");
		break;
	case SUPMSG_DIFF:
		sup_diff_start(&s->diff, s->box->agent, m.diff, now_ms());
		break;
	case SUPMSG_SECRETS:
	case SUPMSG_SECRET_OK:
	case SUPMSG_EGRESS_DIAL:
	case SUPMSG_EGRESS_REFUSE:
		/* The dialled socket or the secrets' memfd (fds[0]) is the proxy's now: the caller does not close it. */
		if (m.op == SUPMSG_SECRETS && (!s->egress || egress_sup_message(s->egress, &m, &fds[0]) < 0)) {
			send_event(s, "box.secrets_failed",
				   "the box's secrets did not load into the proxy: every request it would read is "
				   "refused");
			break;
		}
		if (m.op == SUPMSG_SECRETS) {
			break;
		}
		if (!s->egress || egress_sup_message(s->egress, &m, &fds[0]) < 0) {
			log_warn("supervisor: egress conn %lld: the daemon's answer found no conn", (long long)m.conn);
		}
		break;
	default:
		r = -EPROTO; /* the monitor lets no other operation through */
		break;
	}
	supmsg_release(&m);
	return r;
}

int supervisor_main(int fd)
{
	struct sup s = { .ctl = fd };
	int fds[IPC_MAX_FDS];
	size_t nfds = 0;
	uid_t box_uid = 0;
	int r;

	log_set_ident("tkbox-supervisor");
	/* The daemon's socket (dup2'd onto fd 3 without close-on-exec) must not reach QEMU or anything it runs. */
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
		return 1;
	}
	supmon_init(&s.mon);
	sup_diff_init(&s.diff, diff_send, &s);
	(void)signal(SIGPIPE, SIG_IGN);
	for (size_t i = 0; i < ARRAY_SIZE(s.x); i++) {
		s.x[i].fd = -1;
	}
	/* Wiped on every reset: the boot message carries the CA's key. */
	r = buf_init(&s.msg, SUPMSG_MAX + 1, BUF_SECRET);
	/* A uid of its own from the daemon (root): QEMU starts under it, the supervisor drops to it once up. */
	if (r >= 0 && (r = sandbox_box_uid_from_env(&box_uid)) > 0) {
		vm_run_as(box_uid, (gid_t)box_uid);
	}
	if (r >= 0) {
		r = ipc_recv(fd, &s.msg, fds, 0, &nfds);
	}
	if (r >= 0) {
		/* Before boot the monitor lets only "boot" through. */
		r = ctl_message(&s, fds, nfds);
	}
	if (r < 0) {
		char msg[sizeof(s.refused) + 64];
		(void)snprintf(msg, sizeof(msg), "the box did not boot: %s", s.refused[0] ? s.refused : tk_strerror(r));
		send_text(&s, SUPMSG_FAILED, msg);
		egress_ca_free(s.ca);
		SSL_CTX_free(s.client_ctx);
		buf_release(&s.msg);
		return 1;
	}
	/* Up: from here on guest bytes arrive, and no new program is ever needed. */
	{
		struct sandbox_report rep;
		r = sandbox_supervisor_enter(s.box->box_dir, &s.box->console_keep, box_uid, &rep);
	}
	if (r < 0) {
		char msg[256];
		(void)snprintf(msg, sizeof(msg), "the supervisor could not confine itself: %s", tk_strerror(r));
		send_text(&s, SUPMSG_FAILED, msg);
		egress_ca_free(s.ca);
		SSL_CTX_free(s.client_ctx);
		vm_box_free(s.box);
		buf_release(&s.msg);
		return 1;
	}
	{
		struct egress_sup_host eh = { .send = egress_send, .ctx = &s };
		r = egress_sup_new(s.box->vm->egress_fd, &eh, &s.egress);
	}
	if (r >= 0) {
		/* The proxy owns the CA and the origins' trust from here on. */
		egress_sup_tls(s.egress, s.ca, s.client_ctx);
	} else {
		egress_ca_free(s.ca);
		SSL_CTX_free(s.client_ctx);
	}
	s.ca = NULL;
	s.client_ctx = NULL;
	if (r < 0) {
		char msg[256];
		(void)snprintf(msg, sizeof(msg), "the supervisor could not open the egress channel: %s",
			       tk_strerror(r));
		send_text(&s, SUPMSG_FAILED, msg);
		vm_box_free(s.box);
		buf_release(&s.msg);
		return 1;
	}
	{
		struct supmsg ready = { .op = SUPMSG_READY,
					.accel = (char *)vm_accel_name(s.box->accel),
					.isolation = (char *)s.box->isolation,
					.ready_ms = (int64_t)((s.box->t_ready_ns - s.box->t_start_ns) / 1000000) };
		(void)send_msg(&s, &ready);
	}

	while (!s.stopping) {
		/* The exec clients, the egress port and tunnels, the daemon, the agent. */
		struct pollfd p[SUPERVISOR_MAX_EXECS + EGRESS_SUP_POLL_MAX + 2];
		struct sx *px[SUPERVISOR_MAX_EXECS + EGRESS_SUP_POLL_MAX + 2];
		size_t np = 0, nc, ne;
		uint64_t t = now_ms(), next = s.lifetime_deadline_ms;
		int timeout;
		bool pending_stdin = false, agent_more;
		uint64_t clock_due = next;

		/* The guest's clock from the host's: right after ready, then every AGENT_CLOCK_INTERVAL_MS. */
		if (agent_client_clock_tick(s.box->agent, t, &clock_due) >= 0) {
			next = MIN(next, clock_due);
		}

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
				sx_unhold(x);
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
		if (sup_diff_deadline(&s.diff) != 0 && t >= sup_diff_deadline(&s.diff)) {
			sup_diff_fail(
				&s.diff,
				"the box did not make its patch within SUP_DIFF_TIMEOUT_S (300 s); the box goes on");
		}
		if (sup_diff_deadline(&s.diff) != 0) {
			next = MIN(next, sup_diff_deadline(&s.diff));
		}
		if (t >= s.lifetime_deadline_ms) {
			send_event(&s, "box.lifetime", "the box reached its lifetime limit");
			stop_box(&s, "the box reached its lifetime limit");
			break;
		}
		nc = np;
		ne = egress_sup_fill(s.egress, p + np, EGRESS_SUP_POLL_MAX);
		np += ne;
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
		if (egress_sup_timeout(s.egress) >= 0) {
			timeout = MIN(timeout, egress_sup_timeout(s.egress)); /* the proxy's refusal summary */
		}
		if (agent_more || agent_client_buffered(s.box->agent) || egress_sup_pending(s.egress)) {
			timeout = 0; /* guest frames already read (or a full turn of them): no waiting */
		}
		r = poll(p, np, timeout);
		if (r < 0 && errno != EINTR) {
			stop_box(&s, "internal error");
			break;
		}
		if (r < 0) {
			continue;
		}
		/* At most EGRESS_SUP_FRAMES_PER_TURN guest frames, like the agent's events. */
		if ((r = egress_sup_handle(s.egress, p + nc, ne)) < 0) {
			egress_lost(&s, r);
			break;
		}
		for (size_t i = 0; i < nc; i++) {
			if (p[i].revents & (POLLIN | POLLHUP | POLLERR)) {
				client_read(&s, px[i]);
			}
		}
		if (p[np - 2].revents) {
			r = ipc_recv(s.ctl, &s.msg, fds, IPC_MAX_FDS, &nfds);
			if (r < 0) {
				/* The daemon is gone: nobody is left to record what the box does. */
				stop_box(&s, SUP_DAEMON_GONE);
				break;
			}
			r = ctl_message(&s, fds, nfds);
			for (size_t i = 0; i < nfds; i++) {
				if (fds[i] >= 0) {
					(void)close(fds[i]);
				}
			}
			if (r < 0) {
				stop_box(&s, s.refused);
				break;
			}
		}
	}
	send_text(&s, SUPMSG_STOPPED, s.stop_reason ? s.stop_reason : "stop");
	sup_diff_release(&s.diff);
	egress_sup_free(s.egress);
	vm_box_free(s.box);
	buf_release(&s.msg);
	return 0;
}
