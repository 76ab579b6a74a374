/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>

#include "banned.h"
#include "frame.h"
#include "guest/agent.h"
#include "guest/diff.h"
#include "guest/kmsg.h"
#include "io.h"
#include "log.h"
#include "vmm/agent-proto.h"

#define OUTBUF_MAX ((size_t)4 << 20) /* frames queued towards the host */
#define READ_CHUNK ((size_t)64 * 1024)
#define STDIN_ACK_MIN ((size_t)32 * 1024) /* return stdin credit in chunks, not per write */

struct exec_slot {
	bool used;
	uint32_t id;
	pid_t pid;
	bool reaped;
	int status;
	int in_fd; /* write end of the child's stdin, -1 once closed */
	int out_fd; /* read ends, -1 at EOF */
	int err_fd;
	bool in_eof; /* host sent end of stdin: close in_fd once inbuf drains */
	struct buf inbuf;
	size_t in_credit_pending; /* bytes written to the child not yet credited back */
	uint64_t out_window;
};

/*
 * The one patch being made (AGENT_MSG_DIFF): a forked child writes the
 * finished frames (DIFF_DATA..., DIFF_END, or an ERROR) into a memfd; once
 * it exits 0 the loop forwards them whole, a frame at a time, as the queue
 * towards the host has room, so execs keep being served meanwhile.
 */
struct diff_job {
	uint32_t id; /* 0: no job */
	pid_t pid; /* the producer, 0 once reaped */
	int status;
	int memfd;
	bool streaming;
	off_t off, end;
};

struct agent {
	int port_fd;
	int ws_lower_fd, ws_upper_fd;
	struct diff_job diff;
	bool host_gone;
	int sig_fd;
	char **base_env;
	struct frame_decoder dec;
	struct buf in_payload;
	struct buf out;
	struct exec_slot slots[AGENT_MAX_EXECS];
	unsigned running;
	bool shutdown;
	uint8_t *chunk;
	int ready_fd; /* closed once a pong is out */
	bool pong_queued;
	bool clock_failed; /* clock_settime refused once: said once */
};

static struct exec_slot *slot_find(struct agent *a, uint32_t id)
{
	for (size_t i = 0; i < ARRAY_SIZE(a->slots); i++) {
		if (a->slots[i].used && a->slots[i].id == id) {
			return &a->slots[i];
		}
	}
	return NULL;
}

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		(void)close(*fd);
		*fd = -1;
	}
}

static void queue_error(struct agent *a, uint32_t id, const char *code, const char *message)
{
	int r = agent_encode_error(&a->out, id, code, message);
	if (r < 0) {
		log_warn("dropping error reply for exec %u: %s", id, tk_strerror(r));
	}
}

/* ---- starting a command ---- */

static const char *env_lookup(char *const *env, const char *key)
{
	size_t kl = strlen(key);

	for (char *const *e = env; e && *e; e++) {
		if (strncmp(*e, key, kl) == 0 && (*e)[kl] == '=') {
			return *e + kl + 1;
		}
	}
	return NULL;
}

/* Merge the box environment with the exec's own (the exec's entries win). */
static int build_env(char *const *base, char *const *extra, char ***ret)
{
	size_t nb = 0, ne = 0, k = 0;
	char **v;

	for (char *const *e = base; e && *e; e++) {
		nb++;
	}
	for (char *const *e = extra; e && *e; e++) {
		ne++;
	}
	v = calloc(nb + ne + 1, sizeof(*v));
	if (!v) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < nb; i++) {
		const char *eq = strchr(base[i], '=');
		bool overridden = false;
		for (size_t j = 0; eq && j < ne; j++) {
			if (strncmp(extra[j], base[i], (size_t)(eq - base[i]) + 1) == 0) {
				overridden = true;
			}
		}
		if (!overridden) {
			v[k++] = base[i];
		}
	}
	for (size_t j = 0; j < ne; j++) {
		v[k++] = extra[j];
	}
	*ret = v;
	return 0;
}

/* In the child only: execve argv[0], searching PATH from the new environment. Returns errno. */
static int child_exec(char **argv, char **envp)
{
	const char *path;
	int err = ENOENT;

	if (strchr(argv[0], '/')) {
		(void)execve(argv[0], argv, envp);
		return errno;
	}
	path = env_lookup(envp, "PATH");
	if (!path) {
		path = GUEST_DEFAULT_PATH;
	}
	while (*path) {
		const char *colon = strchr(path, ':');
		size_t dl = colon ? (size_t)(colon - path) : strlen(path);
		char full[4096];
		int n = snprintf(full, sizeof(full), "%.*s/%s", (int)dl, dl ? path : ".", argv[0]);
		if (n > 0 && (size_t)n < sizeof(full)) {
			(void)execve(full, argv, envp);
			if (errno == EACCES) {
				err = EACCES;
			} else if (errno != ENOENT && errno != ENOTDIR) {
				return errno;
			}
		}
		path += dl;
		if (*path == ':') {
			path++;
		}
	}
	return err;
}

/* What the child reports through its status pipe when it cannot exec: which step failed and errno. */
enum child_step {
	CHILD_STEP_FDS = 1,
	CHILD_STEP_CWD = 2,
	CHILD_STEP_EXEC = 3,
};

static _noreturn_ void child_run(const struct agent_msg *m, char **envp, int in_r, int out_w, int err_w, int status_w)
{
	sigset_t none;
	int report[2] = { CHILD_STEP_FDS, 0 };
	int err;

	/* A fresh session: signals from the host go to the whole process group. */
	(void)setsid();
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	(void)signal(SIGPIPE, SIG_DFL);
	if (dup2(in_r, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0) {
		err = errno;
		goto fail;
	}
	report[0] = CHILD_STEP_CWD;
	if (chdir(m->cwd ? m->cwd : "/") < 0) {
		err = errno;
		goto fail;
	}
	report[0] = CHILD_STEP_EXEC;
	err = child_exec(m->argv, envp);
fail:
	report[1] = err;
	(void)!write(status_w, report, sizeof(report));
	_exit(127);
}

static void exec_start(struct agent *a, const struct agent_msg *m)
{
	struct exec_slot *s = NULL;
	int in[2] = { -1, -1 }, out[2] = { -1, -1 }, err[2] = { -1, -1 }, st[2] = { -1, -1 };
	_cleanup_free_ char **envp = NULL;
	char msg[512];
	pid_t pid;
	int child_report[2] = { 0, 0 };
	ssize_t n;
	int r;

	if (slot_find(a, m->id)) {
		queue_error(a, m->id, AGENT_ERR_PROTO, "exec id already in use");
		return;
	}
	for (size_t i = 0; i < ARRAY_SIZE(a->slots); i++) {
		if (!a->slots[i].used) {
			s = &a->slots[i];
			break;
		}
	}
	if (!s) {
		(void)snprintf(msg, sizeof(msg), "too many concurrent execs: at most %d may run in a box",
			       AGENT_MAX_EXECS);
		queue_error(a, m->id, AGENT_ERR_BUSY, msg);
		return;
	}
	r = build_env(a->base_env, m->env, &envp);
	if (r < 0) {
		queue_error(a, m->id, AGENT_ERR_EXEC, "out of memory");
		return;
	}
	if (m->stdin_open) {
		if (pipe2(in, O_CLOEXEC) < 0) {
			goto fail_errno;
		}
	} else {
		in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (in[0] < 0) {
			goto fail_errno;
		}
	}
	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 || pipe2(st, O_CLOEXEC) < 0) {
		goto fail_errno;
	}
	pid = fork();
	if (pid < 0) {
		goto fail_errno;
	}
	if (pid == 0) {
		child_run(m, envp, in[0], out[1], err[1], st[1]);
	}
	close_fd(&in[0]);
	close_fd(&out[1]);
	close_fd(&err[1]);
	close_fd(&st[1]);
	/* Blocks only until the child's execve: the status pipe is O_CLOEXEC. */
	n = RETRY_EINTR(read(st[0], child_report, sizeof(child_report)));
	close_fd(&st[0]);
	if (n == (ssize_t)sizeof(child_report)) {
		/* The child is reaped by the SIGCHLD path as a pid without a slot. */
		if (child_report[0] == CHILD_STEP_CWD) {
			(void)snprintf(msg, sizeof(msg), "cannot change to directory %.200s: %s", m->cwd ? m->cwd : "/",
				       strerror(child_report[1]));
		} else {
			(void)snprintf(msg, sizeof(msg), "cannot run %.200s: %s", m->argv[0],
				       strerror(child_report[1]));
		}
		queue_error(a, m->id, AGENT_ERR_EXEC, msg);
		close_fd(&in[1]);
		close_fd(&out[0]);
		close_fd(&err[0]);
		return;
	}
	*s = (struct exec_slot){
		.used = true,
		.id = m->id,
		.pid = pid,
		.in_fd = in[1],
		.out_fd = out[0],
		.err_fd = err[0],
		.out_window = AGENT_OUT_WINDOW,
	};
	r = buf_init(&s->inbuf, AGENT_STDIN_WINDOW, 0);
	if (r < 0) {
		/* Cannot happen short of ENOMEM at init; kill rather than leave a child without stdin handling. */
		(void)kill(-pid, SIGKILL);
		close_fd(&s->in_fd);
	}
	if (s->in_fd >= 0) {
		(void)fcntl(s->in_fd, F_SETFL, O_NONBLOCK);
	}
	(void)fcntl(s->out_fd, F_SETFL, O_NONBLOCK);
	(void)fcntl(s->err_fd, F_SETFL, O_NONBLOCK);
	a->running++;
	{
		struct agent_msg started = { .type = AGENT_MSG_STARTED, .id = m->id, .pid = pid };
		r = agent_msg_encode(&started, &a->out);
		if (r < 0) {
			log_warn("cannot queue STARTED: %s", tk_strerror(r));
		}
	}
	return;

fail_errno:
	(void)snprintf(msg, sizeof(msg), "cannot start %.200s: %s", m->argv[0], strerror(errno));
	queue_error(a, m->id, AGENT_ERR_EXEC, msg);
	for (int *fd = in; fd < in + 2; fd++) {
		close_fd(fd);
	}
	close_fd(&out[0]);
	close_fd(&out[1]);
	close_fd(&err[0]);
	close_fd(&err[1]);
	close_fd(&st[0]);
	close_fd(&st[1]);
}

/* ---- the patch (AGENT_MSG_DIFF) ---- */

/* In the producer only: drop every fd of the loop, so an exec's stdin still reaches EOF and readiness still shows. */
static void diff_child_close(struct agent *a)
{
	(void)close(a->port_fd);
	(void)close(a->sig_fd);
	if (a->ready_fd >= 0) {
		(void)close(a->ready_fd);
	}
	for (size_t i = 0; i < ARRAY_SIZE(a->slots); i++) {
		struct exec_slot *s = &a->slots[i];
		if (s->used) {
			close_fd(&s->in_fd);
			close_fd(&s->out_fd);
			close_fd(&s->err_fd);
		}
	}
}

static void diff_job_clear(struct diff_job *j)
{
	close_fd(&j->memfd);
	*j = (struct diff_job){ .memfd = -1 };
}

static void diff_start(struct agent *a, uint32_t id)
{
	sigset_t none;
	pid_t pid;
	int fd;

	if (a->diff.id != 0) {
		queue_error(a, id, AGENT_ERR_DIFF,
			    "a patch is already being made in this box; ask again once it is done");
		return;
	}
	if (a->ws_lower_fd < 0 || a->ws_upper_fd < 0) {
		queue_error(a, id, AGENT_ERR_DIFF, "this box has no /workspace overlay, so it has no patch");
		return;
	}
	fd = memfd_create("tkbox-diff", MFD_CLOEXEC);
	pid = fd < 0 ? -1 : fork();
	if (pid < 0) {
		char msg[160];
		(void)snprintf(msg, sizeof(msg), "the patch producer could not start: %s", strerror(errno));
		queue_error(a, id, AGENT_ERR_DIFF, msg);
		if (fd >= 0) {
			(void)close(fd);
		}
		return;
	}
	if (pid == 0) {
		diff_child_close(a);
		sigemptyset(&none);
		(void)sigprocmask(SIG_SETMASK, &none, NULL);
		/* The box's own commands come first. */
		(void)setpriority(PRIO_PROCESS, 0, 10);
		_exit(guest_diff_write_frames(a->ws_lower_fd, a->ws_upper_fd, id, fd) < 0 ? 1 : 0);
	}
	a->diff = (struct diff_job){ .id = id, .pid = pid, .memfd = fd };
}

/* The producer is reaped: forward its frames, or say it failed. */
static void diff_reaped(struct agent *a)
{
	struct diff_job *j = &a->diff;
	struct stat st;
	char msg[160];

	if (WIFEXITED(j->status) && WEXITSTATUS(j->status) == 0 && fstat(j->memfd, &st) == 0 && st.st_size > 0) {
		j->streaming = true;
		j->off = 0;
		j->end = st.st_size;
		return;
	}
	if (WIFSIGNALED(j->status)) {
		(void)snprintf(msg, sizeof(msg), "the patch producer was killed by signal %d (out of memory?)",
			       WTERMSIG(j->status));
	} else {
		(void)snprintf(msg, sizeof(msg), "the patch producer failed (exit %d)", WEXITSTATUS(j->status));
	}
	queue_error(a, j->id, AGENT_ERR_DIFF, msg);
	diff_job_clear(j);
}

/* Whole frames from the memfd into the queue while it has room; the job ends with the last one. */
static void diff_pump(struct agent *a)
{
	struct diff_job *j = &a->diff;
	uint8_t hdr[FRAME_HEADER_SIZE];

	while (j->streaming && j->off < j->end) {
		size_t len;
		uint8_t *w;
		if (io_pread_all(j->memfd, hdr, sizeof(hdr), j->off) < 0) {
			break;
		}
		len = FRAME_HEADER_SIZE +
		      (((size_t)hdr[1] << 24) | ((size_t)hdr[2] << 16) | ((size_t)hdr[3] << 8) | hdr[4]);
		if (len > FRAME_HEADER_SIZE + FRAME_MAX_PAYLOAD || (off_t)len > j->end - j->off) {
			break;
		}
		if (buf_avail(&a->out) < len) {
			return;
		}
		w = malloc(len);
		if (!w || io_pread_all(j->memfd, w, len, j->off) < 0 || buf_put(&a->out, w, len) < 0) {
			free(w);
			break;
		}
		free(w);
		j->off += (off_t)len;
	}
	if (j->streaming && j->off != j->end) {
		queue_error(a, j->id, AGENT_ERR_DIFF, "the patch could not be read back from the producer's memfd");
	}
	if (j->streaming) {
		diff_job_clear(j);
	}
}

static void diff_kill(struct agent *a)
{
	if (a->diff.pid > 0) {
		(void)kill(a->diff.pid, SIGKILL);
		return; /* reap() clears the job */
	}
	if (a->diff.id != 0) {
		diff_job_clear(&a->diff);
	}
}

/* ---- messages from the host ---- */

/*
 * The host's CLOCK_REALTIME: TLS in the box checks certificate dates against
 * this clock. A small offset is slewed (adjtime), so the box's time never
 * steps back by the few ms the message took to arrive; a larger one is
 * stepped.
 */
static void set_clock(struct agent *a, const struct agent_msg *m)
{
	struct timespec now, to = { .tv_sec = (time_t)m->clock_sec, .tv_nsec = (long)m->clock_nsec };
	int64_t step_us;
	int r;

	(void)clock_gettime(CLOCK_REALTIME, &now);
	step_us = ((int64_t)to.tv_sec - (int64_t)now.tv_sec) * 1000000 +
		  ((int64_t)to.tv_nsec - (int64_t)now.tv_nsec) / 1000;
	if (step_us > -GUEST_CLOCK_SLEW_MAX_MS * 1000 && step_us < GUEST_CLOCK_SLEW_MAX_MS * 1000) {
		struct timeval delta = { .tv_sec = step_us / 1000000, .tv_usec = step_us % 1000000 };
		r = adjtime(&delta, NULL);
	} else {
		r = clock_settime(CLOCK_REALTIME, &to);
	}
	if (r < 0) {
		if (!a->clock_failed) {
			guest_kmsg("setting the clock from the host: %s", strerror(errno));
		}
		a->clock_failed = true;
		return;
	}
	if (step_us > GUEST_CLOCK_LOG_STEP_MS * 1000 || step_us < -GUEST_CLOCK_LOG_STEP_MS * 1000) {
		guest_kmsg("clock stepped by %+lld ms to the host's time", (long long)(step_us / 1000));
	}
}

static void credit_stdin(struct agent *a, struct exec_slot *s, bool force)
{
	struct agent_msg w = { .type = AGENT_MSG_STDIN_WINDOW, .id = s->id };

	if (s->in_credit_pending == 0 || (!force && s->in_credit_pending < STDIN_ACK_MIN)) {
		return;
	}
	w.bytes = (int64_t)s->in_credit_pending;
	if (agent_msg_encode(&w, &a->out) >= 0) {
		s->in_credit_pending = 0;
	}
}

static void handle_stdin(struct agent *a, const struct agent_msg *m)
{
	struct exec_slot *s = slot_find(a, m->id);
	int r;

	if (!s) {
		return; /* the exec ended while the host was still sending: not an error */
	}
	if (m->data_len == 0) {
		s->in_eof = true;
		if (buf_len(&s->inbuf) == 0) {
			close_fd(&s->in_fd);
		}
		return;
	}
	if (s->in_fd < 0) {
		/* The child closed its stdin: drop the bytes but give the credit back. */
		s->in_credit_pending += m->data_len;
		credit_stdin(a, s, true);
		return;
	}
	r = buf_put(&s->inbuf, m->data, m->data_len);
	if (r < 0) {
		queue_error(a, m->id, AGENT_ERR_PROTO, "stdin beyond the granted window");
	}
}

static void handle_frame(struct agent *a, uint8_t type, const uint8_t *p, size_t n)
{
	struct agent_msg m;
	struct exec_slot *s;
	char msg[128];
	int r;

	if (!agent_msg_from_host(type)) {
		(void)snprintf(msg, sizeof(msg), "unknown message type 0x%02x", type);
		queue_error(a, 0, AGENT_ERR_PROTO, msg);
		return;
	}
	r = agent_msg_decode(type, p, n, &m);
	if (r < 0) {
		(void)snprintf(msg, sizeof(msg), "bad message type 0x%02x: %s", type, tk_strerror(r));
		queue_error(a, 0, AGENT_ERR_PROTO, msg);
		return;
	}
	switch (type) {
	case AGENT_MSG_PING:
		r = agent_encode_simple(&a->out, AGENT_MSG_PONG, m.id);
		if (r < 0) {
			log_warn("cannot queue PONG: %s", tk_strerror(r));
		} else {
			a->pong_queued = true;
		}
		break;
	case AGENT_MSG_CLOCK:
		set_clock(a, &m);
		break;
	case AGENT_MSG_EXEC:
		exec_start(a, &m);
		break;
	case AGENT_MSG_STDIN:
		handle_stdin(a, &m);
		break;
	case AGENT_MSG_SIGNAL:
		s = slot_find(a, m.id);
		/*
		 * An unknown id is an exec that already ended (its EXIT may be in
		 * flight): nothing to signal, and no reply, which the host could not
		 * tell apart from a lie about an exec it no longer tracks.
		 */
		if (s && !s->reaped) {
			/* The whole process group: a shell's children stop too. */
			if (kill(-s->pid, (int)m.signal) < 0 && kill(s->pid, (int)m.signal) < 0) {
				log_warn("kill %d: %s", (int)s->pid, strerror(errno));
			}
		}
		break;
	case AGENT_MSG_WINDOW:
		s = slot_find(a, m.id);
		if (s) {
			s->out_window = MIN(s->out_window + (uint64_t)m.bytes, (uint64_t)1 << 31);
		}
		break;
	case AGENT_MSG_SHUTDOWN:
		a->shutdown = true;
		break;
	case AGENT_MSG_DIFF:
		diff_start(a, m.id);
		break;
	default:
		break;
	}
	agent_msg_release(&m);
}

static int read_port(struct agent *a)
{
	ssize_t n = read(a->port_fd, a->chunk, READ_CHUNK);
	size_t off = 0;
	int r;

	if (n < 0) {
		return (errno == EAGAIN || errno == EINTR) ? 0 : -errno;
	}
	if (n == 0) {
		return -EPIPE;
	}
	while (off < (size_t)n) {
		size_t used = 0;
		uint8_t type;
		r = frame_decoder_feed(&a->dec, a->chunk + off, (size_t)n - off, &used);
		off += used;
		if (r < 0) {
			/* The host is trusted, but a broken stream cannot be resynchronised: start over. */
			log_error("agent stream broken: %s", tk_strerror(r));
			frame_decoder_release(&a->dec);
			r = frame_decoder_init(&a->dec, FRAME_MAX_PAYLOAD);
			if (r < 0) {
				return r;
			}
			queue_error(a, 0, AGENT_ERR_PROTO, "frame refused; stream reset");
			return 0;
		}
		if (r == 0) {
			break;
		}
		buf_reset(&a->in_payload);
		r = frame_decoder_take(&a->dec, &type, &a->in_payload);
		if (r < 0) {
			return r;
		}
		handle_frame(a, type, buf_ptr(&a->in_payload), buf_len(&a->in_payload));
	}
	return 0;
}

/* ---- children ---- */

static void read_child(struct agent *a, struct exec_slot *s, int *fd, uint8_t type)
{
	size_t want = MIN(READ_CHUNK, (size_t)s->out_window);
	ssize_t n;
	int r;

	if (want == 0) {
		return;
	}
	n = read(*fd, a->chunk, want);
	if (n < 0) {
		if (errno != EAGAIN && errno != EINTR) {
			close_fd(fd);
		}
		return;
	}
	if (n == 0) {
		close_fd(fd);
		return;
	}
	r = agent_encode_data(&a->out, type, s->id, a->chunk, (size_t)n);
	if (r < 0) {
		/* poll only asks for child output when the queue has room for a whole chunk. */
		log_error("output lost for exec %u: %s", s->id, tk_strerror(r));
	}
	s->out_window -= (uint64_t)n;
}

static void write_child(struct agent *a, struct exec_slot *s)
{
	ssize_t n = write(s->in_fd, buf_ptr(&s->inbuf), buf_len(&s->inbuf));

	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR) {
			return;
		}
		/* EPIPE: the child closed stdin. Credit back what we hold and stop writing. */
		s->in_credit_pending += buf_len(&s->inbuf);
		buf_reset(&s->inbuf);
		close_fd(&s->in_fd);
		credit_stdin(a, s, true);
		return;
	}
	(void)buf_consume(&s->inbuf, (size_t)n);
	s->in_credit_pending += (size_t)n;
	credit_stdin(a, s, buf_len(&s->inbuf) == 0);
	if (buf_len(&s->inbuf) == 0 && s->in_eof) {
		close_fd(&s->in_fd);
	}
}

static void reap(struct agent *a)
{
	struct signalfd_siginfo si;
	int status;
	pid_t pid;

	while (read(a->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		/* drain: one SIGCHLD may stand for many children */
	}
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		if (a->diff.pid > 0 && pid == a->diff.pid) {
			a->diff.pid = 0;
			a->diff.status = status;
			if (a->host_gone || a->shutdown) {
				diff_job_clear(&a->diff);
			} else {
				diff_reaped(a);
			}
			continue;
		}
		for (size_t i = 0; i < ARRAY_SIZE(a->slots); i++) {
			struct exec_slot *s = &a->slots[i];
			if (s->used && !s->reaped && s->pid == pid) {
				s->reaped = true;
				s->status = status;
			}
		}
	}
}

/* An exec is over when its process is reaped and both output pipes reached EOF. */
static void finish_execs(struct agent *a)
{
	for (size_t i = 0; i < ARRAY_SIZE(a->slots); i++) {
		struct exec_slot *s = &a->slots[i];
		struct agent_msg m = { .type = AGENT_MSG_EXIT };
		int r;
		if (!s->used || !s->reaped || s->out_fd >= 0 || s->err_fd >= 0) {
			continue;
		}
		m.id = s->id;
		if (WIFSIGNALED(s->status)) {
			m.exit = (struct exit_status){ .kind = EXIT_KIND_SIGNALED,
						       .value = (uint32_t)WTERMSIG(s->status) };
		} else {
			m.exit = (struct exit_status){ .kind = EXIT_KIND_EXITED,
						       .value = (uint32_t)WEXITSTATUS(s->status) };
		}
		r = agent_msg_encode(&m, &a->out);
		if (r < 0) {
			/* Keep the slot and retry on the next turn, once the queue drained. */
			continue;
		}
		close_fd(&s->in_fd);
		buf_release(&s->inbuf);
		s->used = false;
		a->running--;
	}
}

static void kill_all(struct agent *a)
{
	for (size_t i = 0; i < ARRAY_SIZE(a->slots); i++) {
		struct exec_slot *s = &a->slots[i];
		if (s->used && !s->reaped) {
			(void)kill(-s->pid, SIGKILL);
			(void)kill(s->pid, SIGKILL);
		}
	}
}

static int flush_out(struct agent *a)
{
	while (buf_len(&a->out) > 0) {
		ssize_t n = write(a->port_fd, buf_ptr(&a->out), buf_len(&a->out));
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR) {
				return 0;
			}
			return -errno;
		}
		(void)buf_consume(&a->out, (size_t)n);
	}
	return 0;
}

static int agent_init(struct agent *a, const struct guest_agent_config *cfg)
{
	sigset_t mask;
	int r;

	*a = (struct agent){ .port_fd = cfg->port_fd,
			     .base_env = cfg->base_env,
			     .sig_fd = -1,
			     .ready_fd = cfg->ready_fd,
			     .ws_lower_fd = cfg->ws_lower_fd,
			     .ws_upper_fd = cfg->ws_upper_fd,
			     .diff = { .memfd = -1 } };
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0) {
		return -errno;
	}
	a->sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (a->sig_fd < 0) {
		return -errno;
	}
	a->chunk = malloc(READ_CHUNK);
	if (!a->chunk) {
		return -ENOMEM;
	}
	r = frame_decoder_init(&a->dec, FRAME_MAX_PAYLOAD);
	if (r >= 0) {
		r = buf_init(&a->in_payload, FRAME_MAX_PAYLOAD, 0);
	}
	if (r >= 0) {
		r = buf_init(&a->out, OUTBUF_MAX, 0);
	}
	return r;
}

int guest_agent_run(const struct guest_agent_config *cfg)
{
	struct agent a;
	struct pollfd pfd[2 + 3 * AGENT_MAX_EXECS];
	struct exec_slot *owner[2 + 3 * AGENT_MAX_EXECS];
	int which[2 + 3 * AGENT_MAX_EXECS];
	int r;

	r = agent_init(&a, cfg);
	if (r < 0) {
		return r;
	}
	for (;;) {
		size_t np = 0;
		bool room = buf_avail(&a.out) >= READ_CHUNK + 64;

		reap(&a);
		finish_execs(&a);
		diff_pump(&a);
		if (!a.host_gone) {
			r = flush_out(&a);
			if (r < 0) {
				log_error("writing to the host: %s", tk_strerror(r));
				a.host_gone = true;
			}
			if (r >= 0 && a.pong_queued && buf_len(&a.out) == 0 && a.ready_fd >= 0) {
				/* The first pong is with the host: the box is ready. */
				(void)close(a.ready_fd);
				a.ready_fd = -1;
			}
		}
		if (a.shutdown && buf_len(&a.out) == 0) {
			break;
		}
		pfd[np] = (struct pollfd){ .fd = a.sig_fd, .events = POLLIN };
		owner[np] = NULL;
		which[np++] = 0;
		if (!a.host_gone) {
			pfd[np] = (struct pollfd){ .fd = a.port_fd, .events = POLLIN };
			if (buf_len(&a.out) > 0) {
				pfd[np].events |= POLLOUT;
			}
			owner[np] = NULL;
			which[np++] = 1;
		}
		for (size_t i = 0; i < ARRAY_SIZE(a.slots); i++) {
			struct exec_slot *s = &a.slots[i];
			if (!s->used) {
				continue;
			}
			if (s->in_fd >= 0 && buf_len(&s->inbuf) > 0) {
				pfd[np] = (struct pollfd){ .fd = s->in_fd, .events = POLLOUT };
				owner[np] = s;
				which[np++] = 2;
			}
			/* Read a child's output only with credit from the host and room in the queue. */
			if (room && s->out_window > 0) {
				if (s->out_fd >= 0) {
					pfd[np] = (struct pollfd){ .fd = s->out_fd, .events = POLLIN };
					owner[np] = s;
					which[np++] = 3;
				}
				if (s->err_fd >= 0) {
					pfd[np] = (struct pollfd){ .fd = s->err_fd, .events = POLLIN };
					owner[np] = s;
					which[np++] = 4;
				}
			}
		}
		r = poll(pfd, np, a.host_gone ? 1000 : -1);
		if (r < 0) {
			if (errno == EINTR) {
				continue;
			}
			return -errno;
		}
		if (a.host_gone) {
			/* Check whether the host came back: poll reports POLLHUP while it is away. */
			struct pollfd t = { .fd = a.port_fd, .events = POLLIN };
			if (poll(&t, 1, 0) == 1 && !(t.revents & POLLHUP)) {
				log_info("host reconnected");
				a.host_gone = false;
			}
		}
		for (size_t i = 0; i < np; i++) {
			short ev = pfd[i].revents;
			if (!ev) {
				continue;
			}
			switch (which[i]) {
			case 0:
				reap(&a);
				break;
			case 1:
				if (ev & POLLIN) {
					r = read_port(&a);
					if (r < 0 && r != -EPIPE) {
						return r;
					}
				} else if (ev & (POLLHUP | POLLERR)) {
					r = -EPIPE;
				} else {
					r = 0;
				}
				if (r == -EPIPE) {
					/* A host that disappears must not leave commands running unseen. */
					log_warn("host disconnected from the agent port; stopping all commands");
					a.host_gone = true;
					buf_reset(&a.out);
					kill_all(&a);
					diff_kill(&a);
				}
				break;
			case 2:
				if (owner[i]->in_fd >= 0) {
					write_child(&a, owner[i]);
				}
				break;
			case 3:
				if (owner[i]->out_fd >= 0) {
					read_child(&a, owner[i], &owner[i]->out_fd, AGENT_MSG_STDOUT);
				}
				break;
			case 4:
				if (owner[i]->err_fd >= 0) {
					read_child(&a, owner[i], &owner[i]->err_fd, AGENT_MSG_STDERR);
				}
				break;
			default:
				break;
			}
		}
		if (a.host_gone) {
			buf_reset(&a.out);
			/* Output nobody will read: keep draining pipes so children can finish. */
			for (size_t i = 0; i < ARRAY_SIZE(a.slots); i++) {
				a.slots[i].out_window = AGENT_OUT_WINDOW;
			}
		}
	}
	/* Shutdown: stop every command, tell the host, return so main can sync and power off. */
	kill_all(&a);
	diff_kill(&a);
	r = agent_encode_simple(&a.out, AGENT_MSG_SHUTDOWN_ACK, 0);
	if (r >= 0) {
		for (int tries = 0; tries < 100 && buf_len(&a.out) > 0 && !a.host_gone; tries++) {
			struct pollfd t = { .fd = a.port_fd, .events = POLLOUT };
			(void)poll(&t, 1, 10);
			if (flush_out(&a) < 0) {
				break;
			}
		}
	}
	return 0;
}
