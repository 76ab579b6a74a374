/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include "banned.h"
#include "clock.h"
#include "strv.h"
#include "io.h"
#include "crypto.h"
#include "daemon/daemon.h"
#include "daemon/door.h"
#include "daemon/events.h"
#include "daemon/http.h"
#include "daemon/image-local.h"
#include "daemon/ipc.h"
#include "daemon/obsq.h"
#include "daemon/signer-link.h"
#include "daemon/supervisor.h"
#include "daemon/supmsg.h"
#include "json.h"
#include "log.h"
#include "signer/client.h"
#include "signer/config.h"
#include "signer/rpc.h"

enum box_state {
	BOX_CREATING = 0,
	BOX_RUNNING,
	BOX_STOPPING,
	BOX_STOPPED,
	BOX_FAILED,
	BOX_LOST, /* a previous daemon ran it and is gone: its run stays open */
};

static const char *const state_names[] = { "creating", "running", "stopping", "stopped", "failed", "lost" };

struct pend {
	int64_t exec;
	bool done;
	bool ok;
	bool has_exit_code, has_signal; /* exited with exit_code, or killed by signal: never both */
	int exit_code, signal;
	char *error;
	char *stdin_sha256;
	int64_t stdin_bytes;
	struct pend *next;
};

struct box {
	char name[64];
	char *dir;
	enum box_state state;
	pid_t sup_pid;
	int sup_fd;
	char *run_id, *run_token;
	bool run_closed;
	char *close_reason;
	char *image, *image_digest, *workspace;
	char *workdir; /* the image's WorkingDir: the default --cwd */
	char *image_user; /* the image's User: recorded, not applied (the guest runs commands as root) */
	bool image_from_cache; /* the image came from the cache: no registry was asked */
	char **env;
	unsigned vcpus, mem_mib, disk_mib;
	unsigned lifetime_s, exec_timeout_s;
	char accel[8], isolation[16];
	int64_t created_s, ready_ms;
	unsigned n_execs;
	int64_t next_exec;
	struct pend *pend;
	pthread_cond_t cond;
	bool boot_answered;
	char *boot_error;
	bool sup_gone;
	bool reader_done; /* the supervisor's reader thread has finished with the box */
	unsigned refs; /* requests using the box without holding g.lock (export) */
	char *stop_reason;
	char *cut_reason; /* the supervisor cut the box off from its agent (lost, protocol violation, kills ignored): why */
	bool stop_requested;
	uint64_t gaps_complete; /* completions the signer did not record */
	uint64_t gaps_unrecorded; /* ... of which not even the gap is recorded yet */
	uint64_t obs_gaps_unrecorded; /* must-keep observations lost whose gap is not recorded yet */
	struct obsq obs; /* must-keep observations not yet recorded (OBSQ_MAX), drained in order */
	bool obs_draining; /* one thread sends the queue to the signer at a time */
	bool obs_failed; /* one was refused or did not fit: the box was stopped */
	int events_fd;
	struct events_cap events;
	bool removed;
	struct box *next;
};

struct daemon {
	struct daemon_opts o;
	char *signer_socket;
	char *guest_bin;
	char *sock_path;
	pthread_mutex_t lock;
	struct box *boxes;
	unsigned n_boxes;
	unsigned n_conns;
	bool shutting_down;
};

static struct daemon g = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* ---------------------------------------------------------------- utilities */

static int64_t wall_s(void)
{
	return (int64_t)time(NULL);
}

static void rfc3339_now(char out[40])
{
	struct timespec ts;
	struct tm tm;

	(void)clock_gettime(CLOCK_REALTIME, &ts);
	(void)gmtime_r(&ts.tv_sec, &tm);
	(void)snprintf(out, 40, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
		       tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
}

static int random_hex(size_t nbytes, char *out)
{
	uint8_t b[32];
	int r;

	if (nbytes > sizeof(b)) {
		return -EINVAL;
	}
	r = crypto_random(b, nbytes);
	if (r < 0) {
		return r;
	}
	for (size_t i = 0; i < nbytes; i++) {
		(void)snprintf(out + 2 * i, 3, "%02x", b[i]);
	}
	return 0;
}

static json_t *strv_json(char *const *v)
{
	json_t *a = json_array();
	for (char *const *p = v; a && p && *p; p++) {
		if (json_array_append_new(a, json_string(*p)) < 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

/* ------------------------------------------------------------- events file */

enum ev_class {
	EV_LIFECYCLE = 0,
	EV_PROBLEM, /* egress and signer problems: the first to stop at EVENTS_SOFT_CAP */
};

static void box_stop_async(struct box *b, const char *reason);
static void box_flush_gaps(struct box *b);

/* Caller holds g.lock. The line is {"ts","event",...extra}; extra is stolen. */
static void events_write(struct box *b, enum ev_class cls, const char *event, json_t *extra)
{
	char ts[40];
	json_t *v = extra ? extra : json_object();
	char *line;
	size_t n;

	if (!v || b->events_fd < 0) {
		json_decref(v);
		return;
	}
	rfc3339_now(ts);
	(void)json_object_set_new(v, "ts", json_string(ts));
	(void)json_object_set_new(v, "event", json_string(event));
	(void)json_object_set_new(v, "box", json_string(b->name));
	line = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(v);
	if (!line) {
		return;
	}
	n = strlen(line);
	if (n > EVENTS_MAX_LINE) {
		n = EVENTS_MAX_LINE; /* cut, still one line: readers skip what does not parse */
	}
	switch (events_admit(&b->events, cls == EV_PROBLEM ? EVENTS_PROBLEM : EVENTS_LIFECYCLE, n + 1)) {
	case EVENTS_WRITE:
		line[n] = '\n';
		(void)io_write_all(b->events_fd, line, n + 1);
		break;
	case EVENTS_STOP_BOX:
		log_warn("box %s: events file reached %llu bytes: stopping the box", b->name,
			 (unsigned long long)EVENTS_HARD_CAP);
		box_stop_async(b, "the events file reached its cap");
		break;
	case EVENTS_DROP:
	default:
		break;
	}
	free(line);
}

/* ------------------------------------------------------------- persistence */

/* Caller holds g.lock. box.json holds no secret: the run token stays in memory. */
static void box_save(struct box *b)
{
	_cleanup_free_ char *path = NULL, *s = NULL;
	json_t *v;

	v = json_pack("{s:s,s:s,s:s?,s:b,s:s?,s:s?,s:s?,s:s?,s:I,s:s,s:s,s:I,s:I,s:I,s:I,s:I}", "name", b->name,
		      "state", state_names[b->state], "run_id", b->run_id, "run_closed", b->run_closed, "close_reason",
		      b->close_reason, "image", b->image, "image_digest", b->image_digest, "workspace", b->workspace,
		      "created", (json_int_t)b->created_s, "accel", b->accel, "isolation", b->isolation, "vcpus",
		      (json_int_t)b->vcpus, "mem_mib", (json_int_t)b->mem_mib, "disk_mib", (json_int_t)b->disk_mib,
		      "lifetime_s", (json_int_t)b->lifetime_s, "exec_timeout_s", (json_int_t)b->exec_timeout_s);
	if (!v) {
		return;
	}
	s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(v);
	if (!s || asprintf(&path, "%s/box.json", b->dir) < 0) {
		return;
	}
	/* Best effort: box.json is the operator's view; the record lives in the signer. */
	(void)io_write_file_atomic(path, s, strlen(s), 0600);
}

static struct box *box_find(const char *name)
{
	for (struct box *b = g.boxes; b; b = b->next) {
		if (!b->removed && strcmp(b->name, name) == 0) {
			return b;
		}
	}
	return NULL;
}

static void box_unlink(struct box *b)
{
	for (struct box **p = &g.boxes; *p; p = &(*p)->next) {
		if (*p == b) {
			*p = b->next;
			break;
		}
	}
	g.n_boxes--;
}

/* Boxes a previous daemon left: stopped ones stay exportable; running ones are lost. */
static void load_boxes(void)
{
	_cleanup_free_ char *dir = NULL;
	DIR *d;
	struct dirent *de;

	if (asprintf(&dir, "%s/boxes", g.o.state_dir) < 0) {
		return;
	}
	d = opendir(dir);
	if (!d) {
		return;
	}
	while ((de = readdir(d))) {
		_cleanup_free_ char *path = NULL, *text = NULL;
		_cleanup_json_ json_t *v = NULL;
		const char *state = NULL, *s;
		struct box *b;
		int64_t i;
		size_t n = 0;

		if (!door_box_name_ok(de->d_name) || asprintf(&path, "%s/%s/box.json", dir, de->d_name) < 0) {
			continue;
		}
		/* A longer box.json is cut and then refused by the parser, as before. */
		if (io_read_file(AT_FDCWD, path, 65535, IO_READ_PREFIX, &text, &n) < 0 ||
		    json_parse_strict(text, n, NULL, &v) < 0 || json_get_string(v, "state", &state) < 0) {
			continue;
		}
		b = calloc(1, sizeof(*b));
		if (!b) {
			break;
		}
		(void)snprintf(b->name, sizeof(b->name), "%s", de->d_name);
		b->sup_fd = -1;
		b->events_fd = -1;
		(void)pthread_cond_init(&b->cond, NULL);
		if (asprintf(&b->dir, "%s/%s", dir, de->d_name) < 0) {
			free(b);
			break;
		}
		b->state = strcmp(state, "stopped") == 0  ? BOX_STOPPED
			   : strcmp(state, "failed") == 0 ? BOX_FAILED
							  : BOX_LOST;
		if (json_get_string(v, "run_id", &s) >= 0) {
			b->run_id = strdup(s);
		}
		(void)json_get_bool(v, "run_closed", &b->run_closed);
		if (json_get_string(v, "close_reason", &s) >= 0) {
			b->close_reason = strdup(s);
		}
		if (json_get_string(v, "image", &s) >= 0) {
			b->image = strdup(s);
		}
		if (json_get_string(v, "image_digest", &s) >= 0) {
			b->image_digest = strdup(s);
		}
		if (json_get_string(v, "accel", &s) >= 0) {
			(void)snprintf(b->accel, sizeof(b->accel), "%s", s);
		}
		if (json_get_string(v, "isolation", &s) >= 0) {
			(void)snprintf(b->isolation, sizeof(b->isolation), "%s", s);
		}
		if (json_get_int(v, "created", &i) >= 0) {
			b->created_s = i;
		}
		{
			_cleanup_free_ char *ep = NULL;
			if (asprintf(&ep, "%s/events.jsonl", b->dir) >= 0) {
				struct stat st;
				b->events_fd = open(ep, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
				if (b->events_fd >= 0 && fstat(b->events_fd, &st) == 0) {
					b->events.bytes = (uint64_t)st.st_size;
				}
			}
		}
		b->next = g.boxes;
		g.boxes = b;
		g.n_boxes++;
		if (b->state == BOX_LOST) {
			events_write(b, EV_LIFECYCLE, "box.lost",
				     json_pack("{s:s}", "detail",
					       "the daemon that ran this box ended without stopping it; "
					       "its run stays open"));
			box_save(b);
		}
	}
	(void)closedir(d);
}

/* ---------------------------------------------------------------- signer (src/daemon/signer-link.c) */

/* Observe on b's run (caller does not hold g.lock). */
static int observe(const char *run_id, const char *token, const char *kind, json_t *data, char *err, size_t err_size)
{
	if (!run_id || !token) {
		json_decref(data);
		return 0;
	}
	return signer_link_once(
		signer_link_request_id(json_pack("{s:s,s:s,s:s,s:s,s:o}", "method", "observe", "run_id", run_id,
						 "run_token", token, "kind", kind, "data", data)),
		NULL, err, err_size);
}

static int close_run(const char *run_id, const char *token, const char *reason, char *err, size_t err_size)
{
	if (!run_id || !token) {
		return 0;
	}
	return signer_link_once(signer_link_request_id(json_pack("{s:s,s:s,s:s,s:s}", "method", "close_run", "run_id",
								 run_id, "run_token", token, "reason", reason)),
				NULL, err, err_size);
}

/* Close b's run once (caller does not hold g.lock). */
static void box_close_run(struct box *b, const char *reason)
{
	_cleanup_free_ char *run_id = NULL, *token = NULL;
	char err[512] = "";
	int r;

	box_flush_gaps(b);
	pthread_mutex_lock(&g.lock);
	{
		/* Commands still completing (a stop just killed them) are recorded before the run closes. */
		struct timespec until;
		(void)clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 30;
		while (b->n_execs > 0 && pthread_cond_timedwait(&b->cond, &g.lock, &until) != ETIMEDOUT) {
		}
	}
	if (b->run_closed || !b->run_id || !b->run_token) {
		pthread_mutex_unlock(&g.lock);
		return;
	}
	b->run_closed = true; /* claimed: no second close */
	run_id = strdup(b->run_id);
	token = strdup(b->run_token);
	pthread_mutex_unlock(&g.lock);

	r = close_run(run_id, token, reason, err, sizeof(err));
	pthread_mutex_lock(&g.lock);
	if (r < 0) {
		b->run_closed = false;
		events_write(b, EV_PROBLEM, "signer.close_failed", json_pack("{s:s}", "detail", err));
		log_warn("box %s: closing run %s: %s", b->name, run_id, err);
	} else {
		free(b->close_reason);
		b->close_reason = strdup(reason);
		events_write(b, EV_LIFECYCLE, "run.closed", json_pack("{s:s,s:s}", "run_id", run_id, "reason", reason));
	}
	box_save(b);
	pthread_mutex_unlock(&g.lock);
}

/* Record a loss in the run; fails closed by stopping the box when even that cannot be recorded. */
static int box_gap(struct box *b, const char *kind, const char *reason, uint64_t count)
{
	_cleanup_free_ char *run_id = NULL, *token = NULL;
	char err[512] = "";
	int r;

	pthread_mutex_lock(&g.lock);
	run_id = b->run_id && !b->run_closed ? strdup(b->run_id) : NULL;
	token = b->run_token ? strdup(b->run_token) : NULL;
	events_write(b, EV_PROBLEM, "gap",
		     json_pack("{s:s,s:s,s:I}", "kind", kind, "reason", reason, "count", (json_int_t)count));
	pthread_mutex_unlock(&g.lock);
	r = observe(run_id, token, "tkbox.gap",
		    json_pack("{s:s,s:s,s:I}", "reason", reason, "kind", kind, "count", (json_int_t)count), err,
		    sizeof(err));
	if (r < 0) {
		pthread_mutex_lock(&g.lock);
		events_write(b, EV_PROBLEM, "signer.gap_failed", json_pack("{s:s}", "detail", err));
		pthread_mutex_unlock(&g.lock);
	}
	return r;
}

/*
 * Completions and must-keep observations lost while the signer was away (it
 * refused, or did not answer within the deadline) cannot be counted in the run
 * at that moment either: they are recorded at the next chance (the next
 * decision or the run's close), completions with the box's total count,
 * observations with the count lost (caller does not hold g.lock).
 */
static void box_flush_gaps(struct box *b)
{
	uint64_t pending, total, obs;

	pthread_mutex_lock(&g.lock);
	pending = b->gaps_unrecorded;
	total = b->gaps_complete;
	obs = b->obs_gaps_unrecorded;
	pthread_mutex_unlock(&g.lock);
	if (pending > 0 &&
	    box_gap(b, "complete", "completions of commands that ran could not be recorded", total) >= 0) {
		pthread_mutex_lock(&g.lock);
		b->gaps_unrecorded -= MIN(pending, b->gaps_unrecorded);
		pthread_mutex_unlock(&g.lock);
	}
	if (obs > 0 &&
	    box_gap(b, "observe", "must-keep observations could not be kept; the box was stopped", obs) >= 0) {
		pthread_mutex_lock(&g.lock);
		b->obs_gaps_unrecorded -= MIN(obs, b->obs_gaps_unrecorded);
		pthread_mutex_unlock(&g.lock);
	}
}

/* ------------------------------------------------------------ supervisors */

static int find_self(char **ret)
{
	char *p = realpath("/proc/self/exe", NULL);
	if (!p) {
		return negative_errno();
	}
	*ret = p;
	return 0;
}

/* fork + exec `tkbox daemon --supervise` with the socketpair on SUPERVISOR_FD. */
static int spawn_supervisor(const char *name, pid_t *ret_pid, int *ret_fd)
{
	_cleanup_free_ char *self = NULL;
	int sv[2], r;
	pid_t pid;

	r = find_self(&self);
	if (r < 0) {
		return r;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		return negative_errno();
	}
	pid = fork();
	if (pid < 0) {
		r = negative_errno();
		(void)close(sv[0]);
		(void)close(sv[1]);
		return r;
	}
	if (pid == 0) {
		/* The box's name is for ps(1) only. */
		char *argv[] = { "tkbox", "daemon", SUPERVISOR_ARG, (char *)name, NULL };
		sigset_t all;
		/* Only async-signal-safe calls between fork and exec (the daemon has threads). */
		(void)sigemptyset(&all);
		(void)sigprocmask(SIG_SETMASK, &all, NULL);
		if (dup2(sv[1], SUPERVISOR_FD) < 0) {
			_exit(127);
		}
		(void)setpgid(0, 0); /* a Ctrl-C at the daemon's terminal is the daemon's to handle */
		(void)execv(self, argv);
		_exit(127);
	}
	(void)close(sv[1]);
	*ret_pid = pid;
	*ret_fd = sv[0];
	return 0;
}

static void pend_finish_all(struct box *b, const char *why)
{
	for (struct pend *p = b->pend; p; p = p->next) {
		if (!p->done) {
			p->done = true;
			p->ok = false;
			p->error = strdup(why);
		}
	}
}

struct reader_arg {
	struct box *b;
};

/* Supervisor events that mean the box's agent is gone: the box is stopped and its run says why. */
static bool box_cut_event(const char *event)
{
	return strcmp(event, "box.agent_lost") == 0 || strcmp(event, "box.protocol_violation") == 0 ||
	       strcmp(event, "box.kills_ignored") == 0;
}

/* One thread per box: reads the supervisor's messages until it exits. */
static void *reader_thread(void *arg)
{
	struct box *b = arg;
	struct buf msg;
	int fds[IPC_MAX_FDS];
	size_t nfds;
	bool stopped_ok = false;
	int status = 0;

	if (buf_init(&msg, SUPMSG_MAX + 1, 0) < 0) {
		return NULL;
	}
	for (;;) {
		struct supmsg m;
		int r = ipc_recv(b->sup_fd, &msg, fds, 0, &nfds);
		if (r < 0) {
			break;
		}
		r = supmsg_parse(buf_ptr(&msg), buf_len(&msg), &m);
		pthread_mutex_lock(&g.lock);
		if (r < 0) {
			/* A supervisor that breaks the protocol is compromised or broken: stop it. */
			events_write(b, EV_LIFECYCLE, "supervisor.protocol_error",
				     json_pack("{s:s}", "detail", tk_strerror(r)));
			pthread_mutex_unlock(&g.lock);
			(void)kill(b->sup_pid, SIGKILL);
			break;
		}
		switch (m.op) {
		case SUPMSG_READY:
			(void)snprintf(b->accel, sizeof(b->accel), "%s", m.accel);
			(void)snprintf(b->isolation, sizeof(b->isolation), "%s", m.isolation);
			b->ready_ms = m.ready_ms;
			b->boot_answered = true;
			break;
		case SUPMSG_FAILED:
			b->boot_error = strdup(m.message);
			b->boot_answered = true;
			break;
		case SUPMSG_DONE:
			for (struct pend *p = b->pend; p; p = p->next) {
				if (p->exec == m.exec && !p->done) {
					p->done = true;
					p->ok = strcmp(m.status, "ok") == 0;
					/* Killed by SIGKILL is not exit 137: the two stay apart up to the signer. */
					p->has_exit_code = m.has_exit_code;
					p->exit_code = (int)m.exit_code;
					p->has_signal = m.has_signal;
					p->signal = (int)m.signal;
					p->error = m.error ? strdup(m.error) : NULL;
					p->stdin_sha256 = m.stdin_sha256 ? strdup(m.stdin_sha256) : NULL;
					p->stdin_bytes = m.stdin_bytes;
				}
			}
			break;
		case SUPMSG_EVENT:
			events_write(b, EV_LIFECYCLE, m.event,
				     m.detail ? json_pack("{s:s}", "detail", m.detail) : NULL);
			if (!b->cut_reason && box_cut_event(m.event)) {
				/*
				 * The box's agent is gone or hostile: the box leaves running now,
				 * so no exec is decided for it; the supervisor is stopping it.
				 */
				b->cut_reason = strdup(m.detail ? m.detail : m.event);
				if (b->state == BOX_RUNNING || b->state == BOX_CREATING) {
					b->state = BOX_STOPPING;
				}
				box_save(b);
			}
			break;
		case SUPMSG_STOPPED:
			stopped_ok = true;
			free(b->stop_reason);
			b->stop_reason = strdup(m.reason);
			break;
		default:
			break;
		}
		pthread_cond_broadcast(&b->cond);
		pthread_mutex_unlock(&g.lock);
		supmsg_release(&m);
	}
	buf_release(&msg);
	(void)RETRY_EINTR(waitpid(b->sup_pid, &status, 0));

	pthread_mutex_lock(&g.lock);
	(void)close(b->sup_fd);
	b->sup_fd = -1;
	b->sup_gone = true;
	pend_finish_all(b, "the box's supervisor exited before the command finished");
	if (!b->boot_answered) {
		b->boot_answered = true;
		b->boot_error = strdup("the box's supervisor exited during boot");
	}
	if (b->state != BOX_CREATING) {
		b->state = stopped_ok || b->stop_requested ? BOX_STOPPED : BOX_FAILED;
	}
	events_write(b, EV_LIFECYCLE, b->state == BOX_FAILED ? "box.failed" : "box.stopped",
		     json_pack("{s:s,s:i}", "reason", b->stop_reason ? b->stop_reason : "the supervisor exited",
			       "status", status));
	box_save(b);
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&g.lock);

	if (b->state == BOX_FAILED) {
		/* The loss is recorded, then the run is closed: a failure ends the run. */
		box_gap(b, "supervisor", "the box's supervisor exited unexpectedly; the box was stopped", 1);
		box_close_run(b, "failure: the box's supervisor exited");
	} else if (b->cut_reason) {
		/* Why the host cut the box off is in its record: a gap (nothing the agent did after is seen), then the close. */
		_cleanup_free_ char *close = NULL;
		if (box_gap(b, "agent", b->cut_reason, 1) < 0) {
			log_warn("box %s: the cut-off could not be recorded", b->name);
		}
		if (asprintf(&close, "failure: %s", b->cut_reason) >= 0) {
			box_close_run(b, close);
		}
	}
	pthread_mutex_lock(&g.lock);
	b->reader_done = true; /* from here on nothing of this thread touches b: rm may free it */
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&g.lock);
	return NULL;
}

/* Caller holds g.lock. */
static void box_stop_async(struct box *b, const char *reason)
{
	json_t *m;

	if (b->state != BOX_RUNNING || b->sup_fd < 0) {
		return;
	}
	b->state = BOX_STOPPING;
	b->stop_requested = true;
	m = json_pack("{s:s}", "op", "stop");
	if (!m || ipc_send(b->sup_fd, m, NULL, 0) < 0) {
		(void)kill(b->sup_pid, SIGKILL);
	}
	json_decref(m);
	events_write(b, EV_LIFECYCLE, "box.stopping", json_pack("{s:s}", "reason", reason));
}

/* Caller holds g.lock; returns with it held, once the supervisor is gone. */
static void box_stop_wait(struct box *b, const char *reason)
{
	struct timespec until;

	box_stop_async(b, reason);
	(void)clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += DAEMON_STOP_TIMEOUT_S;
	while (!b->sup_gone && b->sup_pid > 0) {
		if (pthread_cond_timedwait(&b->cond, &g.lock, &until) == ETIMEDOUT) {
			(void)kill(b->sup_pid, SIGKILL);
			until.tv_sec += 5;
		}
	}
}

/*
 * A must-keep observation on b's run (issue 5's fail-closed rule): queued
 * (at most OBSQ_MAX pending) and sent to the signer in FIFO order by one
 * thread at a time. When it does not fit in the queue, or the signer refuses
 * or cannot take one, the box is stopped, what was still queued is dropped
 * and the loss is recorded as one tkbox.gap (kind observe) with its count.
 * Returns 0 when this call recorded everything queued up to and including
 * data, 1 when data was queued behind another thread's drain (that thread
 * owns the outcome), < 0 when the box was stopped (err says why). Takes
 * data's reference. The caller does not hold g.lock.
 */
static int box_observe_keep(struct box *b, const char *kind, json_t *data, char *err, size_t err_size)
{
	_cleanup_free_ char *run_id = NULL, *token = NULL;
	size_t lost = 0;
	int r = 0;

	pthread_mutex_lock(&g.lock);
	if (b->obs_failed) {
		pthread_mutex_unlock(&g.lock);
		json_decref(data);
		(void)snprintf(err, err_size, "an earlier record of this box could not be kept; it was stopped");
		return -ESHUTDOWN;
	}
	if (!b->obs.items) {
		r = obsq_init(&b->obs, OBSQ_MAX);
	}
	if (r >= 0) {
		r = obsq_push(&b->obs, kind, data);
	} else {
		json_decref(data);
	}
	if (r < 0) {
		(void)snprintf(err, err_size, "%s could not be queued (%s; at most %d pending)", kind, tk_strerror(r),
			       OBSQ_MAX);
		lost = 1;
		goto failed;
	}
	if (b->obs_draining) {
		pthread_mutex_unlock(&g.lock);
		return 1;
	}
	b->obs_draining = true;
	run_id = b->run_id ? strdup(b->run_id) : NULL;
	token = b->run_token ? strdup(b->run_token) : NULL;
	while (obsq_peek(&b->obs)) {
		const struct obsq_item *it = obsq_peek(&b->obs);
		_cleanup_free_ char *k = strdup(it->kind);
		json_t *d = json_incref(it->data);

		pthread_mutex_unlock(&g.lock);
		r = k ? observe(run_id, token, k, d, err, err_size) : -ENOMEM;
		if (!k) {
			json_decref(d);
		}
		pthread_mutex_lock(&g.lock);
		if (r < 0) {
			events_write(b, EV_PROBLEM, "signer.observe_failed",
				     json_pack("{s:s,s:s}", "kind", k ? k : kind, "detail", err));
			break;
		}
		obsq_pop(&b->obs);
	}
	b->obs_draining = false;
	if (r >= 0) {
		pthread_mutex_unlock(&g.lock);
		return 0;
	}
	lost = obsq_clear(&b->obs);
failed:
	b->obs_failed = true;
	box_stop_wait(b, "a record of the box could not be kept");
	/* A signer past its deadline would not take the gap now either: it is recorded when it answers again. */
	if (r == -ETIMEDOUT) {
		b->obs_gaps_unrecorded += lost;
		pthread_mutex_unlock(&g.lock);
		return r;
	}
	pthread_mutex_unlock(&g.lock);
	if (box_gap(b, "observe", "a must-keep observation could not be kept; the box was stopped", lost) < 0) {
		pthread_mutex_lock(&g.lock);
		b->obs_gaps_unrecorded += lost;
		pthread_mutex_unlock(&g.lock);
	}
	return r < 0 ? r : -EIO;
}

/* ---------------------------------------------------------------- HTTP I/O */

struct conn {
	int fd;
	uid_t uid;
	struct http_request req;
	struct buf body;
};

static void respond_raw(int fd, int status, const char *ctype, const void *body, size_t n, const char *extra_headers)
{
	char head[1024];
	int k = snprintf(head, sizeof(head),
			 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
			 status, http_reason(status), ctype, n, extra_headers ? extra_headers : "");
	if (k > 0 && (size_t)k < sizeof(head) && io_write_all(fd, head, (size_t)k) >= 0 && n > 0) {
		(void)io_write_all(fd, body, n);
	}
}

static void respond_json(int fd, int status, json_t *v)
{
	char *s = v ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS) : NULL;

	if (!s) {
		static const char oom[] = "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}";
		respond_raw(fd, 500, "application/json", oom, sizeof(oom) - 1, NULL);
	} else {
		respond_raw(fd, status, "application/json", s, strlen(s), NULL);
	}
	free(s);
	json_decref(v);
}

static void respond_error(int fd, int status, const char *code, json_t *extra, const char *fmt, ...) _printf_(5, 6);
static void respond_error(int fd, int status, const char *code, json_t *extra, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	json_t *e;

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	e = extra ? extra : json_object();
	if (e) {
		(void)json_object_set_new(e, "code", json_string(code));
		(void)json_object_set_new(e, "message", json_string(msg));
	}
	respond_json(fd, status, json_pack("{s:o}", "error", e));
}

static json_t *box_json(const struct box *b)
{
	json_t *v = json_pack("{s:s,s:s,s:s?,s:b,s:s?,s:s?,s:I,s:I}", "name", b->name, "state", state_names[b->state],
			      "run_id", b->run_id, "run_closed", b->run_closed, "image", b->image, "image_digest",
			      b->image_digest, "created", (json_int_t)b->created_s, "execs", (json_int_t)b->n_execs);
	if (v && b->accel[0]) {
		(void)json_object_set_new(v, "accel", json_string(b->accel));
		(void)json_object_set_new(v, "isolation", json_string(b->isolation));
	}
	if (v && b->close_reason) {
		(void)json_object_set_new(v, "close_reason", json_string(b->close_reason));
	}
	if (v && b->stop_reason) {
		(void)json_object_set_new(v, "stop_reason", json_string(b->stop_reason));
	}
	if (v && b->state != BOX_LOST) {
		(void)json_object_set_new(v, "limits",
					  json_pack("{s:I,s:I,s:I,s:I,s:I}", "vcpus", (json_int_t)b->vcpus,
						    "memory_mib", (json_int_t)b->mem_mib, "disk_mib",
						    (json_int_t)b->disk_mib, "lifetime_s", (json_int_t)b->lifetime_s,
						    "exec_timeout_s", (json_int_t)b->exec_timeout_s));
	}
	return v;
}

static int parse_body(struct conn *c, json_t **ret)
{
	struct json_opts o = { .max_bytes = HTTP_MAX_BODY, .max_depth = 8, .want_top = JSON_OBJECT };

	if (buf_len(&c->body) == 0) {
		*ret = json_object();
		return *ret ? 0 : -ENOMEM;
	}
	return json_parse_strict(buf_ptr(&c->body), buf_len(&c->body), &o, ret);
}

/* A list of strings from a JSON array member (absent: empty). */
static int get_strv(const json_t *o, const char *key, size_t max, char ***ret)
{
	json_t *a = json_object_get(o, key);
	char **v;
	size_t n;

	if (!a) {
		*ret = calloc(1, sizeof(char *));
		return *ret ? 0 : -ENOMEM;
	}
	if (!json_is_array(a)) {
		return -EBADMSG;
	}
	n = json_array_size(a);
	if (n > max) {
		return -E2BIG;
	}
	v = calloc(n + 1, sizeof(*v));
	if (!v) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const char *s = json_string_value(json_array_get(a, i));
		if (!s || strlen(s) > DOOR_MAX_WORD || !(v[i] = strdup(s))) {
			strv_free(v);
			return s ? -E2BIG : -EBADMSG;
		}
	}
	*ret = v;
	return 0;
}

static int get_uint(const json_t *o, const char *key, unsigned min, unsigned max, unsigned def, unsigned *ret)
{
	int64_t v;
	int r = json_get_int(o, key, &v);

	if (r == -ENOENT) {
		*ret = def;
		return 0;
	}
	if (r < 0 || v < min || v > max) {
		return -ERANGE;
	}
	*ret = (unsigned)v;
	return 0;
}

/* ------------------------------------------------------------ create a box */

static void box_free(struct box *b)
{
	if (!b) {
		return;
	}
	for (struct pend *p = b->pend, *n; p; p = n) {
		n = p->next;
		free(p->error);
		free(p->stdin_sha256);
		free(p);
	}
	if (b->events_fd >= 0) {
		(void)close(b->events_fd);
	}
	if (b->run_token) {
		explicit_bzero(b->run_token, strlen(b->run_token));
	}
	free(b->run_token);
	free(b->run_id);
	free(b->dir);
	free(b->close_reason);
	free(b->image);
	free(b->image_digest);
	free(b->workspace);
	free(b->workdir);
	free(b->image_user);
	obsq_release(&b->obs);
	free(b->boot_error);
	free(b->stop_reason);
	free(b->cut_reason);
	strv_free(b->env);
	(void)pthread_cond_destroy(&b->cond);
	free(b);
}

static const char *const default_box_env[] = {
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root",
	"LANG=C.UTF-8",
	NULL,
};

static int build_box_env(char **user, char ***ret)
{
	size_t nu = 0, k = 0;
	char **v;

	while (user[nu]) {
		nu++;
	}
	v = calloc(ARRAY_SIZE(default_box_env) + nu, sizeof(*v));
	if (!v) {
		return -ENOMEM;
	}
	for (size_t i = 0; default_box_env[i]; i++) {
		bool over = false;
		size_t kl = (size_t)(strchr(default_box_env[i], '=') - default_box_env[i]) + 1;
		for (size_t j = 0; j < nu; j++) {
			over = over || strncmp(user[j], default_box_env[i], kl) == 0;
		}
		if (!over && !(v[k++] = strdup(default_box_env[i]))) {
			strv_free(v);
			return -ENOMEM;
		}
	}
	for (size_t j = 0; j < nu; j++) {
		if (!(v[k++] = strdup(user[j]))) {
			strv_free(v);
			return -ENOMEM;
		}
	}
	*ret = v;
	return 0;
}

/*
 * An optional short string option of POST /v1/boxes: a platform
 * (linux/amd64|linux/arm64) or an absolute path. Absent is fine (*ret
 * untouched); anything malformed is -EINVAL.
 */
static int get_opt_text(const json_t *req, const char *key, bool is_path, const char **ret)
{
	const char *s;
	int r = json_get_string(req, key, &s);

	if (r == -ENOENT) {
		return 0;
	}
	if (r < 0) {
		return -EINVAL;
	}
	if (is_path ? (s[0] != '/' || strlen(s) > DAEMON_MAX_OPT_PATH)
		    : (strcmp(s, "linux/amd64") != 0 && strcmp(s, "linux/arm64") != 0)) {
		return -EINVAL;
	}
	*ret = s;
	return 0;
}

static void api_create(struct conn *c)
{
	_cleanup_json_ json_t *req = NULL;
	_cleanup_(strv_freep) char **uenv = NULL;
	struct local_image img = { 0 }, ws = { 0 };
	struct local_image_opts iopts = { 0 };
	const char *image = NULL, *name = NULL, *workspace = NULL;
	char gen[16], err[1024] = "", run_id[128];
	struct box *b = NULL;
	struct timespec until;
	json_t *reply = NULL, *boot = NULL;
	int r;

	if (parse_body(c, &req) < 0 ||
	    json_only_keys(req, (const char *const[]){ "image", "name", "workspace", "env", "memory_mib", "cpus",
						       "timeout_s", "exec_timeout_s", "disk_mib", "platform",
						       "registry_auth", "registry_ca", NULL }) < 0) {
		respond_error(c->fd, 400, "bad_request", NULL,
			      "the request body must be a JSON object of known fields");
		return;
	}
	if (json_get_string(req, "image", &image) < 0 || !*image) {
		respond_error(c->fd, 400, "bad_request", NULL, "--image is required");
		return;
	}
	if (json_get_string(req, "name", &name) < 0) {
		if (random_hex(3, gen + 4) < 0) {
			respond_error(c->fd, 500, "internal", NULL, "no randomness");
			return;
		}
		memcpy(gen, "box-", 4);
		name = gen;
	}
	if (!door_box_name_ok(name)) {
		respond_error(c->fd, 400, "bad_request", NULL,
			      "a box name is 1-63 of [A-Za-z0-9._-], starting with a letter or digit");
		return;
	}
	if (json_get_string(req, "workspace", &workspace) < 0) {
		workspace = NULL;
	}
	/* Image resolution options: the files are read by the `tkbox images` child, as absolute paths. */
	if (get_opt_text(req, "platform", false, &iopts.platform) < 0 ||
	    get_opt_text(req, "registry_auth", true, &iopts.auth_file) < 0 ||
	    get_opt_text(req, "registry_ca", true, &iopts.ca_file) < 0) {
		respond_error(c->fd, 400, "bad_request", NULL,
			      "--platform is linux/amd64 or linux/arm64; --registry-auth and --registry-ca take "
			      "absolute paths");
		return;
	}
	r = get_strv(req, "env", DAEMON_MAX_BOX_ENV, &uenv);
	for (char **e = uenv; r >= 0 && e && *e; e++) {
		const char *why;
		r = door_env_check(*e, &why);
		if (r == -EPERM) {
			r = 0; /* the box's own env is set by its owner and recorded in tkbox.box; only the syntax is checked */
		}
	}
	if (r < 0) {
		respond_error(c->fd, 400, "bad_request", NULL, "--env takes NAME=VALUE entries (at most %d)",
			      DAEMON_MAX_BOX_ENV);
		return;
	}
	b = calloc(1, sizeof(*b));
	if (!b) {
		respond_error(c->fd, 500, "internal", NULL, "out of memory");
		return;
	}
	b->sup_fd = -1;
	b->events_fd = -1;
	b->sup_pid = -1;
	(void)pthread_cond_init(&b->cond, NULL);
	(void)snprintf(b->name, sizeof(b->name), "%s", name);
	if (get_uint(req, "cpus", 1, 64, DAEMON_DEFAULT_VCPUS, &b->vcpus) < 0 ||
	    get_uint(req, "memory_mib", 128, 256 * 1024, DAEMON_DEFAULT_MEM_MIB, &b->mem_mib) < 0 ||
	    get_uint(req, "disk_mib", 64, DAEMON_MAX_DISK_MIB, DAEMON_DEFAULT_DISK_MIB, &b->disk_mib) < 0 ||
	    get_uint(req, "timeout_s", 1, DAEMON_MAX_LIFETIME_S, DAEMON_DEFAULT_LIFETIME_S, &b->lifetime_s) < 0 ||
	    get_uint(req, "exec_timeout_s", 1, DAEMON_MAX_LIFETIME_S, DAEMON_DEFAULT_EXEC_TIMEOUT_S,
		     &b->exec_timeout_s) < 0) {
		respond_error(c->fd, 400, "bad_request", NULL,
			      "out of range: --cpus 1..64, --memory 128 MiB..256 GiB, --disk 64 MiB..1 TiB, --timeout "
			      "1 s..7 days");
		box_free(b);
		return;
	}
	r = build_box_env(uenv, &b->env);
	if (r < 0 || asprintf(&b->dir, "%s/boxes/%s", g.o.state_dir, b->name) < 0) {
		respond_error(c->fd, 500, "internal", NULL, "out of memory");
		box_free(b);
		return;
	}

	/* Reserve the name and a slot. */
	pthread_mutex_lock(&g.lock);
	if (g.shutting_down) {
		r = -ESHUTDOWN;
	} else if (box_find(b->name)) {
		r = -EEXIST;
	} else if (g.n_boxes >= g.o.max_boxes) {
		r = -EUSERS;
	} else {
		b->state = BOX_CREATING;
		b->created_s = wall_s();
		b->next = g.boxes;
		g.boxes = b;
		g.n_boxes++;
		r = 0;
	}
	pthread_mutex_unlock(&g.lock);
	if (r == -EEXIST) {
		respond_error(c->fd, 409, "exists", NULL, "a box named %s exists (tkbox rm %s, or pick another --name)",
			      b->name, b->name);
		box_free(b);
		return;
	}
	if (r < 0) {
		if (r == -EUSERS) {
			respond_error(
				c->fd, 429, "too_many_boxes", NULL,
				"the daemon runs %u boxes already (the limit; tkbox rm one, or start the daemon with "
				"--max-boxes)",
				g.o.max_boxes);
		} else {
			respond_error(c->fd, 503, "shutting_down", NULL, "the daemon is shutting down");
		}
		box_free(b);
		return;
	}

	/* Directory, events file; a box directory a removed box left is reused. */
	{
		_cleanup_free_ char *boxes = NULL, *ep = NULL;
		if (asprintf(&boxes, "%s/boxes", g.o.state_dir) < 0 || asprintf(&ep, "%s/events.jsonl", b->dir) < 0) {
			r = -ENOMEM;
		} else {
			(void)mkdir(boxes, 0700);
			r = mkdir(b->dir, 0700) < 0 && errno != EEXIST ? negative_errno() : 0;
			if (r >= 0) {
				b->events_fd = open(
					ep, O_WRONLY | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
				r = b->events_fd < 0 ? negative_errno() : 0;
			}
		}
		if (r < 0) {
			(void)snprintf(err, sizeof(err), "creating the box directory %s: %s", b->dir, tk_strerror(r));
			goto fail;
		}
	}

	r = image_local_resolve(g.o.state_dir, image, 1024, &iopts, &img, err, sizeof(err));
	if (r >= 0 && workspace) {
		r = workspace_local_resolve(g.o.state_dir, workspace, b->dir, &ws, err, sizeof(err));
	}
	if (r < 0) {
		goto fail;
	}
	if (img.env) {
		/* The image's own Env comes first; the defaults and --env override it. */
		char **merged = NULL;
		size_t ni = 0, nb = 0;
		while (img.env[ni]) {
			ni++;
		}
		while (b->env[nb]) {
			nb++;
		}
		merged = calloc(ni + nb + 1, sizeof(char *));
		if (!merged) {
			r = -ENOMEM;
			goto fail;
		}
		{
			size_t k = 0;
			for (size_t i = 0; i < ni; i++) {
				size_t kl = strcspn(img.env[i], "=") + 1;
				bool over = false;
				for (size_t j = 0; j < nb; j++) {
					over = over || strncmp(b->env[j], img.env[i], kl) == 0;
				}
				if (!over && !(merged[k++] = strdup(img.env[i]))) {
					strv_free(merged);
					r = -ENOMEM;
					goto fail;
				}
			}
			memcpy(merged + k, b->env, nb * sizeof(char *));
		}
		free(b->env);
		b->env = merged;
	}
	b->image = strdup(img.source);
	b->image_digest = strdup(img.digest);
	b->workspace = ws.source ? strdup(ws.source) : NULL;
	b->workdir = img.working_dir && img.working_dir[0] == '/' ? strdup(img.working_dir) : NULL;
	b->image_user = img.user ? strdup(img.user) : NULL;
	b->image_from_cache = img.from_cache;

	/* The run first: nothing boots that is not recorded. */
	if (!g.o.unrecorded) {
		char rnd[9];
		(void)random_hex(4, rnd);
		(void)snprintf(run_id, sizeof(run_id), "tkbox-%s-%s", b->name, rnd);
		r = signer_link_once(
			signer_link_request_id(json_pack("{s:s,s:{s:s,s:s},s:s}", "method", "register_run", "agent",
							 "name", "tkbox", "version", TKBOX_VERSION, "run_id", run_id)),
			&reply, err, sizeof(err));
		if (r < 0) {
			goto fail;
		}
		{
			const char *rid, *tok;
			if (json_get_string(reply, "run_id", &rid) < 0 ||
			    json_get_string(reply, "run_token", &tok) < 0) {
				(void)snprintf(err, sizeof(err),
					       "the signer's register_run reply has no run_id/run_token");
				r = -EPROTO;
				goto fail;
			}
			pthread_mutex_lock(&g.lock);
			b->run_id = strdup(rid);
			b->run_token = strdup(tok);
			pthread_mutex_unlock(&g.lock);
		}
		json_decref(reply);
		reply = NULL;
	}

	r = spawn_supervisor(b->name, &b->sup_pid, &b->sup_fd);
	if (r < 0) {
		(void)snprintf(err, sizeof(err), "starting the box's supervisor: %s", tk_strerror(r));
		goto fail;
	}
	{
		pthread_t t;
		pthread_attr_t a;
		(void)pthread_attr_init(&a);
		(void)pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &a, reader_thread, b) != 0) {
			(void)kill(b->sup_pid, SIGKILL);
			(void)waitpid(b->sup_pid, NULL, 0);
			(void)close(b->sup_fd);
			b->sup_fd = -1;
			b->sup_pid = -1; /* no reader thread to wait for */
			(void)snprintf(err, sizeof(err), "no thread for the box");
			r = -EAGAIN;
			(void)pthread_attr_destroy(&a);
			goto fail;
		}
		(void)pthread_attr_destroy(&a);
	}
	boot = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:o,s:I}", "op", "boot", "box_id", b->name, "rootfs",
			 img.path, "state_dir", g.o.state_dir, "guest", g.guest_bin, "accel", g.o.accel, "vcpus",
			 (json_int_t)b->vcpus, "mem_mib", (json_int_t)b->mem_mib, "scratch_mib",
			 (json_int_t)b->disk_mib, "env", strv_json(b->env), "lifetime_s", (json_int_t)b->lifetime_s);
	if (boot && ws.path) {
		(void)json_object_set_new(boot, "workspace", json_string(ws.path));
	}
	/* What the box printed stays in its state until tkbox rm (the supervisor copies it when the VM is gone). */
	if (boot) {
		_cleanup_free_ char *console = NULL;
		if (asprintf(&console, "%s/console.log", b->dir) >= 0) {
			(void)json_object_set_new(boot, "console_keep", json_string(console));
		}
	}
	if (boot && g.o.kernel && g.o.modules_dir) {
		(void)json_object_set_new(boot, "kernel", json_string(g.o.kernel));
		(void)json_object_set_new(boot, "modules", json_string(g.o.modules_dir));
	}
	r = boot ? ipc_send(b->sup_fd, boot, NULL, 0) : -ENOMEM;
	json_decref(boot);
	pthread_mutex_lock(&g.lock);
	events_write(b, EV_LIFECYCLE, "box.creating",
		     json_pack("{s:s,s:s,s:s?,s:b,s:s?,s:s?}", "image", b->image, "image_digest", b->image_digest,
			       "run_id", b->run_id, "image_from_cache", b->image_from_cache, "image_user",
			       b->image_user, "workdir", b->workdir));
	(void)clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += DAEMON_BOOT_TIMEOUT_S;
	while (r >= 0 && !b->boot_answered) {
		if (pthread_cond_timedwait(&b->cond, &g.lock, &until) == ETIMEDOUT) {
			(void)kill(b->sup_pid, SIGKILL);
			until.tv_sec += 10;
		}
	}
	if (r < 0 || b->boot_error) {
		(void)snprintf(err, sizeof(err), "%s",
			       b->boot_error ? b->boot_error : "the box's supervisor did not take the boot request");
		pthread_mutex_unlock(&g.lock);
		r = -EIO;
		goto fail;
	}
	if (b->cut_reason) {
		/* Its agent was lost right after boot: never reported running (the reader thread records why). */
		(void)snprintf(err, sizeof(err), "%s", b->cut_reason);
		pthread_mutex_unlock(&g.lock);
		log_warn("box %s: agent lost right after boot: %s", b->name, err);
		respond_error(c->fd, 503, "box_lost", NULL,
			      "box %s was stopped right after boot: %s (tkbox export %s shows its record)", b->name,
			      err, b->name);
		local_image_release(&img);
		local_image_release(&ws);
		return;
	}
	b->state = BOX_RUNNING;
	events_write(b, EV_LIFECYCLE, "box.running",
		     json_pack("{s:s,s:s,s:I}", "accel", b->accel, "isolation", b->isolation, "ready_ms",
			       (json_int_t)b->ready_ms));
	box_save(b);
	pthread_mutex_unlock(&g.lock);

	/* The box's record: must be kept, else the box stops (fail closed). */
	if (!g.o.unrecorded) {
		json_t *data = json_pack(
			"{s:s,s:s,s:s,s:s?,s:o,s:{s:I,s:I,s:I,s:I,s:I},s:s,s:s,s:s}", "box", b->name, "image", b->image,
			"image_digest", b->image_digest, "workspace", b->workspace, "env", strv_json(b->env), "limits",
			"vcpus", (json_int_t)b->vcpus, "memory_mib", (json_int_t)b->mem_mib, "disk_mib",
			(json_int_t)b->disk_mib, "lifetime_s", (json_int_t)b->lifetime_s, "exec_timeout_s",
			(json_int_t)b->exec_timeout_s, "accel", b->accel, "isolation", b->isolation, "network", "none");
		/* The image's User is recorded as named, with what the box did with it (not applied yet). */
		if (data && b->image_user) {
			(void)json_object_set_new(data, "image_user",
						  json_pack("{s:s,s:b}", "user", b->image_user, "applied", 0));
		}
		/* The first observation of the box: the queue is empty, so this call records it (or stops the box). */
		r = box_observe_keep(b, "tkbox.box", data, err, sizeof(err));
		if (r < 0) {
			respond_error(c->fd, 503, "not_recorded", NULL,
				      "the box could not be recorded, so it was stopped: %s", err);
			local_image_release(&img);
			local_image_release(&ws);
			return;
		}
	}
	pthread_mutex_lock(&g.lock);
	reply = box_json(b);
	pthread_mutex_unlock(&g.lock);
	log_info("box %s running (%s, isolation %s, ready in %lld ms)", b->name, b->accel, b->isolation,
		 (long long)b->ready_ms);
	respond_json(c->fd, 201, reply);
	local_image_release(&img);
	local_image_release(&ws);
	return;

fail:
	log_warn("box %s: create failed: %s", b->name, err);
	pthread_mutex_lock(&g.lock);
	events_write(b, EV_LIFECYCLE, "box.create_failed", json_pack("{s:s}", "detail", err));
	if (b->sup_pid > 0 && !b->reader_done) {
		/* Its reader thread must be done with b before b is freed below. */
		if (!b->sup_gone) {
			(void)kill(b->sup_pid, SIGKILL);
		}
		while (!b->reader_done) {
			pthread_cond_wait(&b->cond, &g.lock);
		}
	}
	pthread_mutex_unlock(&g.lock);
	box_close_run(b, "failure: the box did not start");
	pthread_mutex_lock(&g.lock);
	box_unlink(b);
	pthread_mutex_unlock(&g.lock);
	respond_error(c->fd, r == -ENOENT || r == -EINVAL ? 400 : 503, "create_failed", NULL, "%s", err);
	json_decref(reply);
	local_image_release(&img);
	local_image_release(&ws);
	/* The directory stays (events.jsonl says why); its memory goes. */
	box_free(b);
}

/* ---------------------------------------------------------------- the exec door */

static void pend_remove(struct box *b, struct pend *p)
{
	for (struct pend **q = &b->pend; *q; q = &(*q)->next) {
		if (*q == p) {
			*q = p->next;
			break;
		}
	}
	free(p->error);
	free(p->stdin_sha256);
	free(p);
}

static int args_digest(json_t *args, char out[80])
{
	_cleanup_json_ json_t *o = json_pack("{s:s,s:O}", "tool", "Bash", "args", args);
	_cleanup_free_ char *s = NULL;
	uint8_t h[SHA256_LEN];
	int r;

	if (!o) {
		return -ENOMEM;
	}
	r = json_jcs_string(o, (size_t)4 << 20, &s);
	if (r >= 0) {
		r = sha256(s, strlen(s), h);
	}
	if (r < 0) {
		return r;
	}
	memcpy(out, "sha256:", 7);
	for (size_t i = 0; i < SHA256_LEN; i++) {
		(void)snprintf(out + 7 + 2 * i, 3, "%02x", h[i]);
	}
	return 0;
}

static int make_memfd(const void *p, size_t n)
{
	int fd = memfd_create("tkbox-stdin", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int r;

	if (fd < 0) {
		return negative_errno();
	}
	r = n ? io_write_all(fd, p, n) : 0;
	if (r >= 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
		r = negative_errno();
	}
	if (r < 0) {
		(void)close(fd);
		return r;
	}
	return fd;
}

static void api_exec(struct conn *c, const char *name)
{
	_cleanup_json_ json_t *req = NULL, *args = NULL, *reply = NULL;
	_cleanup_(strv_freep) char **argv = NULL, **env = NULL;
	_cleanup_free_ char *line = NULL, *run_id = NULL, *token = NULL, *workdir = NULL;
	struct buf stdin_data = { 0 };
	const char *cwd = "/", *mode = "none", *decision = NULL, *decision_id = NULL;
	char err[1024] = "", digest[80], tcid[40];
	struct box *b;
	struct pend *p = NULL;
	json_t *stdin_obj;
	int memfd = -1, r;
	unsigned timeout_s = 0;
	int64_t exec_no = 0;
	bool decided = false;

	if (!c->req.upgrade_exec) {
		respond_error(c->fd, 400, "bad_request", NULL, "an exec request asks for Upgrade: %s",
			      HTTP_EXEC_UPGRADE);
		return;
	}
	if (parse_body(c, &req) < 0 ||
	    json_only_keys(req, (const char *const[]){ "argv", "env", "cwd", "stdin", "timeout_s", NULL }) < 0) {
		respond_error(c->fd, 400, "bad_request", NULL,
			      "the request body must be a JSON object of known fields");
		return;
	}
	r = get_strv(req, "argv", DOOR_MAX_ARGS, &argv);
	if (r >= 0 && !argv[0]) {
		r = -EINVAL;
	}
	if (r >= 0) {
		r = get_strv(req, "env", DOOR_MAX_ENV, &env);
	}
	if (r < 0) {
		respond_error(c->fd, 400, "bad_request", NULL,
			      "argv (at least one word) and env must be lists of strings");
		return;
	}
	for (char **e = env; *e; e++) {
		const char *why = "";
		r = door_env_check(*e, &why);
		if (r < 0) {
			char q[LOG_QUOTE_BUFSIZE];
			const char *eq = strchr(*e, '=');
			respond_error(c->fd, r == -EPERM ? 403 : 400, r == -EPERM ? "env_refused" : "bad_request", NULL,
				      "--env %s refused: %s (set it in the box with tkbox run --env, or not at all)",
				      log_quote(*e, eq ? (size_t)(eq - *e) : strlen(*e), q), why);
			return;
		}
	}
	r = json_get_string(req, "cwd", &cwd);
	if (r == -ENOENT) {
		/* The image's WorkingDir, else "/". */
		pthread_mutex_lock(&g.lock);
		b = box_find(name);
		workdir = b && b->workdir ? strdup(b->workdir) : NULL;
		pthread_mutex_unlock(&g.lock);
		cwd = workdir ? workdir : "/";
	}
	if (r == -EBADMSG || cwd[0] != '/' || strlen(cwd) > DOOR_MAX_CWD) {
		respond_error(c->fd, 400, "bad_request", NULL, "--cwd must be an absolute path");
		return;
	}
	stdin_obj = json_object_get(req, "stdin");
	if (stdin_obj) {
		const char *b64 = NULL;
		if (json_get_string(stdin_obj, "mode", &mode) < 0 ||
		    (strcmp(mode, "none") != 0 && strcmp(mode, "upfront") != 0 && strcmp(mode, "stream") != 0) ||
		    json_only_keys(stdin_obj, (const char *const[]){ "mode", "data", NULL }) < 0) {
			respond_error(c->fd, 400, "bad_request", NULL, "stdin.mode is none, upfront or stream");
			return;
		}
		if (strcmp(mode, "upfront") == 0) {
			r = json_get_string(stdin_obj, "data", &b64);
			if (r >= 0) {
				r = buf_init(&stdin_data, DOOR_MAX_STDIN, 0);
			}
			if (r >= 0) {
				r = b64_decode(b64, strlen(b64), B64_STD, &stdin_data);
			}
			if (r < 0) {
				buf_release(&stdin_data);
				respond_error(c->fd, r == -E2BIG ? 413 : 400, "bad_request", NULL,
					      "stdin.data must be base64 of at most 1 MiB (more is streamed)");
				return;
			}
		}
	}
	r = door_command_line(argv, env[0] ? env : NULL, &line);
	if (r < 0) {
		buf_release(&stdin_data);
		respond_error(
			c->fd, r == -EPERM ? 403 : 400, r == -EPERM ? "refused" : "bad_request", NULL,
			r == -EPERM ? "the program name would not be the program that runs (it starts with %% or, with "
				      "--env, holds = or starts with -)"
				    : "the command line is malformed or too long (%s)",
			tk_strerror(r));
		return;
	}
	/* The decided arguments: what runs, where, with what, and its stdin when known up front. */
	args = json_pack("{s:s,s:s,s:s}", "command", line, "cwd", cwd, "stdin", mode);
	if (args && env[0]) {
		json_t *eo = json_object();
		for (char **e = env; eo && *e; e++) {
			char *eq = strchr(*e, '=');
			_cleanup_free_ char *k = strndup(*e, (size_t)(eq - *e));
			if (k) {
				(void)json_object_set_new(eo, k, json_string(eq + 1));
			}
		}
		(void)json_object_set_new(args, "env", eo);
	}
	if (args && strcmp(mode, "upfront") == 0) {
		r = door_stdin_args(buf_ptr(&stdin_data), buf_len(&stdin_data), args);
		if (r >= 0) {
			memfd = make_memfd(buf_ptr(&stdin_data), buf_len(&stdin_data));
			r = memfd < 0 ? memfd : 0;
		}
		if (r < 0) {
			buf_release(&stdin_data);
			respond_error(c->fd, 500, "internal", NULL, "stdin: %s", tk_strerror(r));
			return;
		}
	}
	buf_release(&stdin_data);
	if (!args || args_digest(args, digest) < 0) {
		if (memfd >= 0) {
			(void)close(memfd);
		}
		respond_error(c->fd, 500, "internal", NULL, "out of memory");
		return;
	}

	/* A slot in the box. */
	pthread_mutex_lock(&g.lock);
	b = box_find(name);
	if (!b || b->state != BOX_RUNNING) {
		_cleanup_free_ char *why = b && b->cut_reason ? strdup(b->cut_reason) : NULL;
		pthread_mutex_unlock(&g.lock);
		if (memfd >= 0) {
			(void)close(memfd);
		}
		if (why) {
			/* Refused before any decision: the host cut the box off from its agent. */
			respond_error(
				c->fd, 409, "box_not_running", NULL,
				"box %s was stopped by the host: %s; nothing ran (tkbox export %s shows its record)",
				name, why, name);
			return;
		}
		respond_error(c->fd, b ? 409 : 404, b ? "box_not_running" : "no_such_box", NULL,
			      b ? "box %s is not running (tkbox ls)" : "no box named %s (tkbox ls)", name);
		return;
	}
	if (b->n_execs >= g.o.max_execs) {
		pthread_mutex_unlock(&g.lock);
		if (memfd >= 0) {
			(void)close(memfd);
		}
		respond_error(c->fd, 429, "too_many_execs", NULL, "box %s runs %u commands already (the limit)", name,
			      g.o.max_execs);
		return;
	}
	b->n_execs++;
	exec_no = ++b->next_exec;
	timeout_s = b->exec_timeout_s;
	run_id = b->run_id ? strdup(b->run_id) : NULL;
	token = b->run_token ? strdup(b->run_token) : NULL;
	pthread_mutex_unlock(&g.lock);
	{
		unsigned asked;
		if (get_uint(req, "timeout_s", 1, timeout_s, timeout_s, &asked) >= 0) {
			timeout_s = asked;
		}
	}

	/* Decide before anything starts. */
	if (!g.o.unrecorded) {
		int64_t deadline = signer_link_deadline(0);
		char hx[17];

		(void)random_hex(8, hx);
		(void)snprintf(tcid, sizeof(tcid), "exec-%lld-%s", (long long)exec_no, hx);
		r = signer_link_call(signer_link_request_id(json_pack(
					     "{s:s,s:s,s:s,s:s,s:s,s:O}", "method", "decide", "run_id", run_id,
					     "run_token", token, "tool_call_id", tcid, "tool", "Bash", "args", args)),
				     -1, c->fd, deadline, &reply);
		if (r < 0) {
			/*
			 * Each exec asks afresh: while the signer is stopped or wedged every one is refused
			 * at the deadline; the first one it answers again runs.
			 */
			signer_link_error(err, sizeof(err), "decide", r, reply);
			if (r != -ECANCELED) {
				respond_error(c->fd, 503, "signer_unreachable", NULL, "%s; nothing ran%s", err,
					      r == -EREMOTEIO
						      ? ""
						      : ": every command is refused until the signer answers "
							"again (check it with tkbox-signer status; the limit is "
							"tkbox daemon --signer-timeout)");
			}
			pthread_mutex_lock(&g.lock);
			events_write(b, EV_PROBLEM, r == -ECANCELED ? "exec.abandoned" : "signer.decide_failed",
				     json_pack("{s:s}", "detail",
					       r == -ECANCELED ? "the client left while the signer decided" : err));
			pthread_mutex_unlock(&g.lock);
			goto out;
		}
		box_flush_gaps(b); /* the signer answers again: record what was lost while it did not */
		if (json_get_string(reply, "decision", &decision) < 0 ||
		    json_get_string(reply, "decision_id", &decision_id) < 0) {
			respond_error(c->fd, 503, "signer_unreachable", NULL,
				      "the signer's decision is malformed: refused, nothing ran");
			goto out;
		}
		if (strcmp(decision, "deny") == 0) {
			const char *why = NULL;
			(void)json_get_string(reply, "reason", &why);
			respond_error(c->fd, 403, "denied",
				      json_pack("{s:O,s:s}", "rule_ids", json_object_get(reply, "rule_ids"),
						"decision_id", decision_id),
				      "denied by the signer's policy%s%s", why ? ": " : "", why ? why : "");
			pthread_mutex_lock(&g.lock);
			events_write(b, EV_LIFECYCLE, "exec.denied",
				     json_pack("{s:s,s:O}", "decision_id", decision_id, "rule_ids",
					       json_object_get(reply, "rule_ids")));
			pthread_mutex_unlock(&g.lock);
			goto out;
		}
		if (strcmp(decision, "ask") == 0) {
			_cleanup_json_ json_t *ar = NULL, *wr = NULL;
			const char *aid = NULL, *state = NULL;
			char head[512];
			int k;
			r = signer_link_call(signer_link_request_id(json_pack(
						     "{s:s,s:s,s:s,s:s}", "method", "approval_request", "run_id",
						     run_id, "run_token", token, "decision_id", decision_id)),
					     -1, c->fd, signer_link_deadline(0), &ar);
			if (r < 0 || json_get_string(ar, "approval_id", &aid) < 0) {
				signer_link_error(err, sizeof(err), "approval_request", r < 0 ? r : -EBADMSG, ar);
				respond_error(
					c->fd, 403, "not_approved", NULL,
					"the command needs an approval that could not be requested (%s): refused, "
					"nothing ran",
					err);
				goto out;
			}
			/* An interim response: the client shows the approval id while it waits. */
			k = snprintf(head, sizeof(head), "HTTP/1.1 102 Processing\r\nTkbox-Approval: %s\r\n\r\n", aid);
			if (k > 0 && (size_t)k < sizeof(head)) {
				(void)io_write_all(c->fd, head, (size_t)k);
			}
			/* A long poll: its own wait, then the signer deadline as for any call. */
			r = signer_link_call(json_pack("{s:s,s:s,s:I}", "method", "approval_wait", "approval_id", aid,
						       "timeout_ms", (json_int_t)DAEMON_APPROVAL_WAIT_MS),
					     -1, c->fd, signer_link_deadline(DAEMON_APPROVAL_WAIT_MS), &wr);
			if (r == -ECANCELED) {
				pthread_mutex_lock(&g.lock);
				events_write(b, EV_LIFECYCLE, "exec.abandoned",
					     json_pack("{s:s,s:s,s:s}", "decision_id", decision_id, "approval_id", aid,
						       "detail", "the client left while it waited for the approval"));
				pthread_mutex_unlock(&g.lock);
				goto out;
			}
			if (r < 0 || json_get_string(wr, "state", &state) < 0 || strcmp(state, "approved") != 0) {
				if (r < 0 && r != -EREMOTEIO) {
					signer_link_error(err, sizeof(err), "approval_wait", r, NULL);
				}
				respond_error(c->fd, 403, "not_approved", json_pack("{s:s}", "approval_id", aid),
					      "approval %s was %s%s%s: refused, nothing ran", aid,
					      state ? state : "not answered", err[0] && !state ? ": " : "",
					      err[0] && !state ? err : "");
				pthread_mutex_lock(&g.lock);
				events_write(b, EV_LIFECYCLE, "exec.not_approved",
					     json_pack("{s:s,s:s,s:s}", "decision_id", decision_id, "approval_id", aid,
						       "state", state ? state : "unanswered"));
				pthread_mutex_unlock(&g.lock);
				goto out;
			}
		} else if (strcmp(decision, "allow") != 0 && strcmp(decision, "flag") != 0) {
			respond_error(c->fd, 403, "denied", NULL, "the signer's decision %s is not allow: refused",
				      decision);
			goto out;
		}
		decided = true;
		pthread_mutex_lock(&g.lock);
		{
			json_t *ev = json_pack("{s:I,s:s,s:s,s:s,s:s,s:s}", "exec", (json_int_t)exec_no, "decision",
					       decision, "decision_id", decision_id, "command", line, "cwd", cwd,
					       "stdin", mode);
			json_t *sh = json_object_get(args, "stdin_sha256"), *sb = json_object_get(args, "stdin_bytes");
			if (ev && sh && sb) {
				(void)json_object_set(ev, "stdin_sha256", sh);
				(void)json_object_set(ev, "stdin_bytes", sb);
			}
			events_write(b, EV_LIFECYCLE, "exec.decided", ev);
		}
		pthread_mutex_unlock(&g.lock);
	}

	/* Hand the connection to the box's supervisor, which streams to and from the guest. */
	p = calloc(1, sizeof(*p));
	if (!p) {
		respond_error(c->fd, 500, "internal", NULL, "out of memory");
		goto out;
	}
	p->exec = exec_no;
	{
		static const char up[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: " HTTP_EXEC_UPGRADE
					 "\r\nConnection: Upgrade\r\n\r\n";
		json_t *m = json_pack("{s:s,s:I,s:o,s:o,s:s,s:s,s:I}", "op", "exec", "exec", (json_int_t)exec_no,
				      "argv", strv_json(argv), "env", strv_json(env), "cwd", cwd, "stdin", mode,
				      "timeout_s", (json_int_t)timeout_s);
		int fds[2] = { c->fd, memfd };

		pthread_mutex_lock(&g.lock);
		if (b->state != BOX_RUNNING || b->sup_fd < 0) {
			r = -ESHUTDOWN;
		} else {
			r = io_write_all(c->fd, up, sizeof(up) - 1);
			if (r >= 0) {
				p->next = b->pend;
				b->pend = p;
				r = m ? ipc_send(b->sup_fd, m, fds, memfd >= 0 ? 2 : 1) : -ENOMEM;
				if (r < 0) {
					b->pend = p->next;
				}
			}
		}
		pthread_mutex_unlock(&g.lock);
		json_decref(m);
		if (r < 0) {
			free(p);
			p = NULL;
			if (r == -ESHUTDOWN) {
				respond_error(c->fd, 409, "box_not_running", NULL,
					      "box %s stopped before the command started", name);
			}
			if (decided) {
				json_t *nrep = NULL;
				(void)signer_link_call(
					signer_link_request_id(
						json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "method", "complete",
							  "run_id", run_id, "run_token", token, "tool_call_id", tcid,
							  "decision_id", decision_id, "args_digest", digest, "status",
							  "error", "error", "the command never started")),
					-1, -1, signer_link_deadline(0), &nrep);
				json_decref(nrep);
			}
			goto out;
		}
	}
	/* The supervisor owns the stream now. */
	(void)close(c->fd);
	c->fd = -1;

	pthread_mutex_lock(&g.lock);
	while (!p->done) {
		pthread_cond_wait(&b->cond, &g.lock);
	}
	{
		json_t *ev = json_pack("{s:I,s:b}", "exec", (json_int_t)exec_no, "ok", p->ok);
		/* exit_status as the shell shows it (128 + N for signal N), and the signal on its own. */
		if (ev && p->has_exit_code) {
			(void)json_object_set_new(ev, "exit_status", json_integer(p->exit_code));
		}
		if (ev && p->has_signal) {
			(void)json_object_set_new(ev, "exit_status", json_integer(128 + p->signal));
			(void)json_object_set_new(ev, "signal", json_integer(p->signal));
		}
		if (ev && p->error) {
			(void)json_object_set_new(ev, "error", json_string(p->error));
		}
		/* Streamed stdin's digest: also in the signed completion below (tool.result output.value). */
		if (ev && p->stdin_sha256) {
			(void)json_object_set_new(ev, "stdin_sha256", json_string(p->stdin_sha256));
			(void)json_object_set_new(ev, "stdin_bytes", json_integer(p->stdin_bytes));
		}
		events_write(b, EV_LIFECYCLE, "exec.done", ev);
	}
	pthread_mutex_unlock(&g.lock);

	if (decided) {
		json_t *creq = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "method", "complete", "run_id", run_id,
					 "run_token", token, "tool_call_id", tcid, "decision_id", decision_id,
					 "args_digest", digest, "status", p->ok ? "ok" : "error");
		json_t *crep = NULL;
		int64_t deadline = signer_link_deadline(0);
		/* Exited with a code, or killed by a signal: never both (SIGKILL is not exit 137). */
		if (creq && p->has_exit_code) {
			(void)json_object_set_new(creq, "exit_code", json_integer(p->exit_code));
		} else if (creq && p->has_signal) {
			(void)json_object_set_new(creq, "signal", json_integer(p->signal));
		}
		if (creq && p->error) {
			(void)json_object_set_new(creq, "error",
						  json_stringn(p->error, MIN(strlen(p->error), (size_t)4096)));
		}
		if (creq && p->stdin_sha256) {
			/* A streamed stdin is known only now: its digest and size go into the signed completion. */
			(void)json_object_set_new(creq, "stdin_sha256", json_string(p->stdin_sha256));
			(void)json_object_set_new(creq, "stdin_bytes", json_integer(p->stdin_bytes));
		}
		r = signer_link_call(signer_link_request_id(creq), -1, -1, deadline, &crep);
		if (r < 0) {
			/* The command ran: a completion the signer did not take is counted, never dropped. */
			uint64_t n;
			signer_link_error(err, sizeof(err), "complete", r, crep);
			pthread_mutex_lock(&g.lock);
			n = ++b->gaps_complete;
			events_write(b, EV_PROBLEM, "signer.complete_failed",
				     json_pack("{s:I,s:s}", "exec", (json_int_t)exec_no, "detail", err));
			/* Past the deadline the signer would not take the gap now either: it goes at the next chance. */
			if (r == -ETIMEDOUT) {
				b->gaps_unrecorded++;
			}
			pthread_mutex_unlock(&g.lock);
			if (r != -ETIMEDOUT &&
			    box_gap(b, "complete", "a command's completion could not be recorded", n) < 0) {
				pthread_mutex_lock(&g.lock);
				b->gaps_unrecorded++;
				pthread_mutex_unlock(&g.lock);
			}
		}
		json_decref(crep);
	}
	/* Recorded (or its loss counted): now the client may see the exit status. */
	pthread_mutex_lock(&g.lock);
	if (b->sup_fd >= 0) {
		json_t *rel = json_pack("{s:s,s:I}", "op", "release", "exec", (json_int_t)exec_no);
		if (!rel || ipc_send(b->sup_fd, rel, NULL, 0) < 0) {
			events_write(b, EV_LIFECYCLE, "exec.release_failed",
				     json_pack("{s:I}", "exec", (json_int_t)exec_no));
		}
		json_decref(rel);
	}
	pthread_mutex_unlock(&g.lock);

out:
	if (memfd >= 0) {
		(void)close(memfd);
	}
	pthread_mutex_lock(&g.lock);
	if (p) {
		pend_remove(b, p);
	}
	b->n_execs--;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&g.lock);
}

/* ---------------------------------------------------------------- stop, rm, export, ls */

static void api_stop(struct conn *c, const char *name)
{
	struct box *b;
	json_t *v;

	pthread_mutex_lock(&g.lock);
	b = box_find(name);
	if (!b) {
		pthread_mutex_unlock(&g.lock);
		respond_error(c->fd, 404, "no_such_box", NULL, "no box named %s (tkbox ls)", name);
		return;
	}
	if (b->state == BOX_CREATING) {
		pthread_mutex_unlock(&g.lock);
		respond_error(c->fd, 409, "box_creating", NULL,
			      "box %s is still starting; retry when tkbox ls shows it running", name);
		return;
	}
	box_stop_wait(b, "tkbox stop");
	box_save(b);
	v = box_json(b);
	pthread_mutex_unlock(&g.lock);
	respond_json(c->fd, 200, v);
}

static void api_rm(struct conn *c, const char *name)
{
	struct box *b;

	pthread_mutex_lock(&g.lock);
	b = box_find(name);
	if (!b) {
		pthread_mutex_unlock(&g.lock);
		respond_error(c->fd, 404, "no_such_box", NULL, "no box named %s (tkbox ls)", name);
		return;
	}
	if (b->state == BOX_RUNNING || b->state == BOX_STOPPING || b->state == BOX_CREATING || b->n_execs > 0) {
		pthread_mutex_unlock(&g.lock);
		respond_error(c->fd, 409, "box_running", NULL,
			      "box %s is running: tkbox stop %s first (or tkbox rm -f)", name, name);
		return;
	}
	if (b->refs > 0 || (b->sup_pid > 0 && !b->reader_done)) {
		pthread_mutex_unlock(&g.lock);
		respond_error(c->fd, 409, "box_busy", NULL, "box %s is being exported or closed; retry in a moment",
			      name);
		return;
	}
	b->removed = true; /* no new request finds it */
	pthread_mutex_unlock(&g.lock);
	box_close_run(b, "removed");
	pthread_mutex_lock(&g.lock);
	{
		_cleanup_free_ char *bj = NULL, *ev = NULL;
		if (asprintf(&bj, "%s/box.json", b->dir) >= 0) {
			(void)unlink(bj);
		}
		if (asprintf(&ev, "%s/events.jsonl", b->dir) >= 0) {
			(void)unlink(ev);
		}
		{
			_cleanup_free_ char *con = NULL;
			if (asprintf(&con, "%s/console.log", b->dir) >= 0) {
				(void)unlink(con);
			}
		}
		(void)rmdir(b->dir);
	}
	box_unlink(b);
	pthread_mutex_unlock(&g.lock);
	box_free(b);
	respond_json(c->fd, 200, json_pack("{s:s,s:b}", "name", name, "removed", 1));
}

static void api_export(struct conn *c, const char *name)
{
	_cleanup_free_ char *run_id = NULL, *trust_b64 = NULL;
	_cleanup_json_ json_t *reply = NULL;
	const char *trust = NULL, *sha = NULL;
	char err[512] = "", headers[4096];
	struct box *b;
	struct stat st;
	void *map = NULL;
	int memfd = -1, r;
	bool lost;

	pthread_mutex_lock(&g.lock);
	b = box_find(name);
	if (!b) {
		pthread_mutex_unlock(&g.lock);
		respond_error(c->fd, 404, "no_such_box", NULL, "no box named %s (tkbox ls)", name);
		return;
	}
	if (b->state == BOX_RUNNING || b->state == BOX_STOPPING || b->state == BOX_CREATING) {
		pthread_mutex_unlock(&g.lock);
		respond_error(c->fd, 409, "box_running", NULL, "box %s is running: tkbox stop %s first", name, name);
		return;
	}
	if (!b->run_id) {
		pthread_mutex_unlock(&g.lock);
		respond_error(c->fd, 409, "unrecorded", NULL,
			      "box %s ran unrecorded (tkbox daemon --unrecorded): nothing to export", name);
		return;
	}
	lost = b->state == BOX_LOST && !b->run_closed;
	run_id = strdup(b->run_id);
	b->refs++;
	pthread_mutex_unlock(&g.lock);
	if (lost) {
		pthread_mutex_lock(&g.lock);
		b->refs--;
		pthread_mutex_unlock(&g.lock);
		respond_error(
			c->fd, 409, "run_open", NULL,
			"box %s was left running by a daemon that ended (crash or kill -9); its run %s is still open, "
			"so tkbox does not export it (tkbox-signer export --run %s writes what was recorded)",
			name, run_id, run_id);
		return;
	}
	/* Export ends the run: its close reason says so. */
	box_close_run(b, "exported");

	memfd = memfd_create("tkbox-bundle", MFD_CLOEXEC);
	/* The signer writes the whole bundle: its own deadline. */
	r = memfd < 0 ? negative_errno()
		      : signer_link_call(json_pack("{s:s,s:s}", "method", "export", "run_id", run_id), memfd, -1,
					 (int64_t)clock_mono_ms() + (int64_t)DAEMON_EXPORT_TIMEOUT_S * 1000, &reply);
	if (r < 0) {
		if (r == -ETIMEDOUT) {
			(void)snprintf(err, sizeof(err), "the signer did not finish the export within %d s",
				       DAEMON_EXPORT_TIMEOUT_S);
		} else {
			signer_link_error(err, sizeof(err), "export", r, reply);
		}
		respond_error(c->fd, 503, "export_failed", NULL, "the signer did not export run %s: %s", run_id, err);
		goto out;
	}
	if (json_get_string(reply, "trust", &trust) < 0 || json_get_string(reply, "sha256", &sha) < 0 ||
	    fstat(memfd, &st) < 0 || st.st_size <= 0) {
		respond_error(c->fd, 503, "export_failed", NULL, "the signer's export reply is incomplete");
		goto out;
	}
	{
		struct buf tb;
		if (buf_init(&tb, 8192, 0) >= 0) {
			if (b64_encode(trust, strlen(trust), B64_URL, &tb) >= 0) {
				(void)buf_dup_cstring(&tb, &trust_b64);
			}
			buf_release(&tb);
		}
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, memfd, 0);
	if (!trust_b64 || map == MAP_FAILED) {
		map = NULL;
		respond_error(c->fd, 500, "internal", NULL, "out of memory");
		goto out;
	}
	(void)snprintf(headers, sizeof(headers), "Tkbox-Trust: %s\r\nTkbox-Bundle-Sha256: %s\r\nTkbox-Run: %s\r\n",
		       trust_b64, sha, run_id);
	respond_raw(c->fd, 200, "application/zip", map, (size_t)st.st_size, headers);
	pthread_mutex_lock(&g.lock);
	events_write(b, EV_LIFECYCLE, "run.exported",
		     json_pack("{s:s,s:s,s:I}", "run_id", run_id, "sha256", sha, "bytes", (json_int_t)st.st_size));
	pthread_mutex_unlock(&g.lock);
out:
	pthread_mutex_lock(&g.lock);
	b->refs--;
	pthread_mutex_unlock(&g.lock);
	if (map) {
		(void)munmap(map, (size_t)st.st_size);
	}
	if (memfd >= 0) {
		(void)close(memfd);
	}
}

static void api_list(struct conn *c)
{
	json_t *a = json_array();

	pthread_mutex_lock(&g.lock);
	for (struct box *b = g.boxes; a && b; b = b->next) {
		if (!b->removed) {
			(void)json_array_append_new(a, box_json(b));
		}
	}
	pthread_mutex_unlock(&g.lock);
	respond_json(c->fd, 200, json_pack("{s:o}", "boxes", a));
}

static void api_show(struct conn *c, const char *name)
{
	struct box *b;
	json_t *v = NULL;

	pthread_mutex_lock(&g.lock);
	b = box_find(name);
	if (b) {
		v = box_json(b);
	}
	pthread_mutex_unlock(&g.lock);
	if (!b) {
		respond_error(c->fd, 404, "no_such_box", NULL, "no box named %s (tkbox ls)", name);
		return;
	}
	respond_json(c->fd, 200, v);
}

/* ---------------------------------------------------------------- connections */

static int read_request(struct conn *c)
{
	struct buf in;
	uint8_t *dst;
	size_t head = 0;
	int r;

	r = buf_init(&in, HTTP_MAX_HEAD + HTTP_MAX_BODY, 0);
	if (r < 0) {
		return r;
	}
	for (;;) {
		ssize_t n;
		r = buf_reserve(&in, 4096, &dst);
		if (r < 0) {
			break;
		}
		n = RETRY_EINTR(recv(c->fd, dst, 4096, 0));
		in.len -= 4096 - (n > 0 ? (size_t)n : 0);
		if (n <= 0) {
			r = n < 0 ? negative_errno() : -ECONNRESET;
			break;
		}
		if (!head) {
			r = http_request_parse(buf_ptr(&in), buf_len(&in), &c->req, &head);
			if (r < 0) {
				break;
			}
			if (r == 0) {
				continue;
			}
		}
		if (buf_len(&in) - head >= c->req.content_length) {
			r = buf_len(&in) - head == c->req.content_length ? 0
									 : -EBADMSG; /* one request per connection */
			break;
		}
	}
	if (r >= 0) {
		r = buf_init(&c->body, HTTP_MAX_BODY, 0);
		if (r >= 0) {
			r = buf_put(&c->body, buf_ptr(&in) + head, buf_len(&in) - head);
		}
	}
	buf_release(&in);
	return r;
}

static void route(struct conn *c)
{
	_cleanup_free_ char *copy = NULL;
	const char *seg[HTTP_MAX_SEGMENTS];
	size_t n = 0;
	enum http_method m = c->req.method;

	if (http_split_path(c->req.target, &copy, seg, &n) < 0 || n < 2 || strcmp(seg[0], "v1") != 0) {
		respond_error(c->fd, 404, "not_found", NULL, "no such API path (this daemon speaks /v1)");
		return;
	}
	if (n == 2 && strcmp(seg[1], "info") == 0 && m == HTTP_GET) {
		pthread_mutex_lock(&g.lock);
		respond_json(c->fd, 200,
			     json_pack("{s:s,s:s,s:b,s:I,s:I}", "version", TKBOX_VERSION, "signer", g.signer_socket,
				       "unrecorded", g.o.unrecorded, "boxes", (json_int_t)g.n_boxes, "max_boxes",
				       (json_int_t)g.o.max_boxes));
		pthread_mutex_unlock(&g.lock);
		return;
	}
	if (strcmp(seg[1], "boxes") != 0) {
		respond_error(c->fd, 404, "not_found", NULL, "no such API path");
		return;
	}
	if (n == 2 && m == HTTP_GET) {
		api_list(c);
	} else if (n == 2 && m == HTTP_POST) {
		api_create(c);
	} else if (n >= 3 && !door_box_name_ok(seg[2])) {
		respond_error(c->fd, 400, "bad_request", NULL, "not a box name");
	} else if (n == 3 && m == HTTP_GET) {
		api_show(c, seg[2]);
	} else if (n == 3 && m == HTTP_DELETE) {
		api_rm(c, seg[2]);
	} else if (n == 4 && m == HTTP_POST && strcmp(seg[3], "exec") == 0) {
		api_exec(c, seg[2]);
	} else if (n == 4 && m == HTTP_POST && strcmp(seg[3], "stop") == 0) {
		api_stop(c, seg[2]);
	} else if (n == 4 && m == HTTP_POST && strcmp(seg[3], "export") == 0) {
		api_export(c, seg[2]);
	} else {
		respond_error(c->fd, 404, "not_found", NULL, "no such API path or method");
	}
}

static void *conn_thread(void *arg)
{
	struct conn *c = arg;
	int r = read_request(c);

	if (r < 0) {
		int status = r == -E2BIG ? 413 : r == -EOPNOTSUPP ? 405 : 400;
		if (r != -ECONNRESET && r != -EAGAIN) {
			respond_error(c->fd, status, "bad_request", NULL, "malformed request: %s", tk_strerror(r));
		}
	} else {
		/* The request timeout guarded the read only: an exec or an approval may take long. */
		struct timeval tv = { 0 };
		(void)setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		route(c);
	}
	if (c->fd >= 0) {
		(void)close(c->fd);
	}
	http_request_release(&c->req);
	buf_release(&c->body);
	free(c);
	pthread_mutex_lock(&g.lock);
	g.n_conns--;
	pthread_mutex_unlock(&g.lock);
	return NULL;
}

static void accept_one(int lfd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	struct timeval tv = { .tv_sec = DAEMON_REQUEST_TIMEOUT_S };
	struct conn *c;
	pthread_t t;
	pthread_attr_t a;
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0) {
		return;
	}
	/* Only the daemon's own uid and root may drive boxes. */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || (cred.uid != geteuid() && cred.uid != 0)) {
		respond_error(fd, 403, "forbidden", NULL, "uid %u may not use this daemon (only uid %u and root)",
			      (unsigned)cred.uid, (unsigned)geteuid());
		(void)close(fd);
		return;
	}
	pthread_mutex_lock(&g.lock);
	if (g.n_conns >= DAEMON_MAX_CONNECTIONS) {
		pthread_mutex_unlock(&g.lock);
		respond_error(fd, 503, "busy", NULL, "too many open API connections");
		(void)close(fd);
		return;
	}
	g.n_conns++;
	pthread_mutex_unlock(&g.lock);
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	c = calloc(1, sizeof(*c));
	if (c) {
		c->fd = fd;
		c->uid = cred.uid;
		(void)pthread_attr_init(&a);
		(void)pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &a, conn_thread, c) == 0) {
			(void)pthread_attr_destroy(&a);
			return;
		}
		(void)pthread_attr_destroy(&a);
		free(c);
	}
	(void)close(fd);
	pthread_mutex_lock(&g.lock);
	g.n_conns--;
	pthread_mutex_unlock(&g.lock);
}

/* ---------------------------------------------------------------- setup and shutdown */

const char *daemon_default_state_dir(void)
{
	static char buf[4096];
	const char *e = getenv("TKBOX_STATE_DIR");
	const char *home = getenv("HOME");

	if (e && e[0] == '/') {
		return e;
	}
	if (home && home[0] == '/' && snprintf(buf, sizeof(buf), "%s/.local/state/tkbox", home) < (int)sizeof(buf)) {
		return buf;
	}
	return "/var/lib/tkbox";
}

int daemon_socket_path(const char *state_dir, char **ret)
{
	const char *e = getenv("TKBOX_SOCKET");
	char *p = NULL;

	if (e && e[0] == '/') {
		p = strdup(e);
	} else if (asprintf(&p, "%s/api/tkbox.sock", state_dir) < 0) {
		p = NULL;
	}
	if (!p) {
		return -ENOMEM;
	}
	*ret = p;
	return 0;
}

/*
 * A directory of this uid: created 0700, or an existing one that nobody else
 * may write (or, with no_access, enter at all). An existing directory is never
 * chmod'ed: it may be a shared one such as /tmp (a socket path of /tmp/x.sock
 * must not make /tmp private).
 */
static int mkdir_private(const char *path, bool no_access)
{
	struct stat st;
	bool created = mkdir(path, 0700) == 0;

	if (!created && errno != EEXIST) {
		return negative_errno();
	}
	if (lstat(path, &st) < 0) {
		return negative_errno();
	}
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
		return -EPERM;
	}
	if (created && (st.st_mode & 07777) != 0700) {
		return chmod(path, 0700) < 0 ? negative_errno() : 0; /* our own, under an odd umask */
	}
	return (st.st_mode & (no_access ? 077 : 022)) != 0 ? -EACCES : 0;
}

/* The parents of path, not path itself (0755; existing ones left as they are). */
static int mkdir_parents(const char *path)
{
	_cleanup_free_ char *p = strdup(path);
	char *slash;

	if (!p) {
		return -ENOMEM;
	}
	slash = strrchr(p, '/');
	if (!slash || slash == p) {
		return 0;
	}
	*slash = '\0';
	return io_mkdir_p(AT_FDCWD, p, 0755);
}

static int listen_api(int *ret)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	_cleanup_free_ char *dir = strdup(g.sock_path);
	char *slash;
	int fd, r;

	if (!dir || !(slash = strrchr(dir, '/'))) {
		return -ENOMEM;
	}
	*slash = '\0';
	r = mkdir_parents(dir); /* its parents, not the directory itself: that one is created 0700 below */
	if (r >= 0) {
		r = mkdir_private(dir, true);
	}
	if (r < 0) {
		log_error("the API socket's directory %s: %s (it must be a directory of uid %u that only it can enter, "
			  "mode "
			  "0700; tkbox creates it so when it does not exist)",
			  dir, tk_strerror(r), (unsigned)geteuid());
		return r;
	}
	if (strlen(g.sock_path) >= sizeof(sa.sun_path)) {
		log_error("the API socket path %s is too long for a Unix socket", g.sock_path);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, g.sock_path, strlen(g.sock_path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return negative_errno();
	}
	/* A live daemon answers on the socket; a stale one is removed. */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		(void)close(fd);
		log_error("another daemon already serves %s", g.sock_path);
		return -EADDRINUSE;
	}
	(void)unlink(g.sock_path);
	{
		mode_t old = umask(0177);
		r = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? negative_errno() : 0;
		(void)umask(old);
	}
	if (r >= 0 && chmod(g.sock_path, 0600) < 0) {
		r = negative_errno();
	}
	if (r >= 0 && listen(fd, 64) < 0) {
		r = negative_errno();
	}
	if (r < 0) {
		(void)close(fd);
		log_error("listening on %s: %s", g.sock_path, tk_strerror(r));
		return r;
	}
	*ret = fd;
	return 0;
}

static int find_guest(char **ret)
{
	_cleanup_free_ char *self = NULL;
	char *slash, *p = NULL;
	static const char *const rel[] = { "tkbox-guest-linux-amd64", "../libexec/tkbox/tkbox-guest-linux-amd64",
					   NULL };
	int r;

	r = find_self(&self);
	if (r < 0) {
		return r;
	}
	slash = strrchr(self, '/');
	*slash = '\0';
	for (size_t i = 0; rel[i]; i++) {
		if (asprintf(&p, "%s/%s", self, rel[i]) < 0) {
			return -ENOMEM;
		}
		if (access(p, R_OK) == 0) {
			*ret = p;
			return 0;
		}
		free(p);
	}
	return -ENOENT;
}

/* SIGTERM: stop every box, let their commands complete, close every run. */
static void shutdown_all(void)
{
	struct timespec until;

	pthread_mutex_lock(&g.lock);
	g.shutting_down = true;
	for (struct box *b = g.boxes; b; b = b->next) {
		box_stop_async(b, "the daemon is shutting down");
	}
	for (struct box *b = g.boxes; b; b = b->next) {
		box_stop_wait(b, "the daemon is shutting down");
	}
	/* Exec threads send their completions while the runs are still open. */
	(void)clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 15;
	for (struct box *b = g.boxes; b; b = b->next) {
		while (b->n_execs > 0 && pthread_cond_timedwait(&b->cond, &g.lock, &until) != ETIMEDOUT) {
		}
	}
	pthread_mutex_unlock(&g.lock);
	for (struct box *b = g.boxes; b; b = b->next) {
		if (!b->removed && b->state != BOX_LOST) {
			box_close_run(b, "daemon shutdown");
		}
	}
}

int daemon_run(const struct daemon_opts *o)
{
	_cleanup_free_ char *boxes = NULL;
	sigset_t mask;
	int lfd = -1, sfd = -1, r;

	g.o = *o;
	if (!g.o.max_boxes) {
		g.o.max_boxes = DAEMON_DEFAULT_MAX_BOXES;
	}
	if (!g.o.max_execs) {
		g.o.max_execs = DAEMON_DEFAULT_MAX_EXECS;
	}
	if (!g.o.signer_timeout_s) {
		g.o.signer_timeout_s = DAEMON_DEFAULT_SIGNER_TIMEOUT_S;
	}
	if (!g.o.accel) {
		g.o.accel = "auto";
	}
	if (o->signer_socket) {
		g.signer_socket = strdup(o->signer_socket);
	} else if (getenv(SIGNER_SOCKET_ENV) && getenv(SIGNER_SOCKET_ENV)[0] == '/') {
		g.signer_socket = strdup(getenv(SIGNER_SOCKET_ENV));
	} else if (signer_default_socket(SIGNER_MODE_DEV, &g.signer_socket) < 0) {
		g.signer_socket = NULL;
	}
	if (!g.signer_socket || signer_link_init(g.signer_socket, g.o.signer_timeout_s) < 0) {
		return 1;
	}
	if (o->guest_bin) {
		g.guest_bin = realpath(o->guest_bin, NULL);
	} else if (find_guest(&g.guest_bin) < 0) {
		g.guest_bin = NULL;
	}
	if (!g.guest_bin) {
		fprintf(stderr, "tkbox daemon: the guest agent tkbox-guest-linux-amd64 was not found next to tkbox; "
				"pass --guest FILE\n");
		return 1;
	}
	r = mkdir_parents(g.o.state_dir);
	if (r >= 0) {
		r = mkdir_private(g.o.state_dir, false);
	}
	if (r < 0 || asprintf(&boxes, "%s/boxes", g.o.state_dir) < 0) {
		fprintf(stderr,
			"tkbox daemon: state directory %s: %s (it must be a directory of uid %u that no one else may "
			"write; tkbox creates it with mode 0700 when it does not exist)\n",
			g.o.state_dir, tk_strerror(r < 0 ? r : -ENOMEM), (unsigned)geteuid());
		return 1;
	}
	(void)mkdir(boxes, 0700);

	/* Fail closed: no signer, no daemon (unless told to record nothing). */
	if (g.o.unrecorded) {
		fprintf(stderr,
			"tkbox daemon: WARNING: --unrecorded: NOTHING THESE BOXES DO IS DECIDED OR RECORDED.\n"
			"tkbox daemon: WARNING: no signer is asked about any command; no bundle can be exported.\n");
	} else {
		_cleanup_json_ json_t *st = NULL;
		char err[512] = "";
		r = signer_link_once(json_pack("{s:s}", "method", "status"), &st, err, sizeof(err));
		if (r < 0) {
			fprintf(stderr,
				"tkbox daemon: no signer answers at %s (%s): start one (tkbox-signer up --wait), pass "
				"--signer SOCK, or run with --unrecorded to record nothing\n",
				g.signer_socket, err);
			return 1;
		}
	}
	if (daemon_socket_path(g.o.state_dir, &g.sock_path) < 0) {
		return 1;
	}

	/* Signals go to the main loop only; threads and supervisors never see them. */
	(void)sigemptyset(&mask);
	(void)sigaddset(&mask, SIGTERM);
	(void)sigaddset(&mask, SIGINT);
	(void)sigaddset(&mask, SIGHUP);
	(void)pthread_sigmask(SIG_BLOCK, &mask, NULL);
	(void)signal(SIGPIPE, SIG_IGN);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (sfd < 0) {
		return 1;
	}
	r = listen_api(&lfd);
	if (r < 0) {
		return 1;
	}
	pthread_mutex_lock(&g.lock);
	load_boxes();
	pthread_mutex_unlock(&g.lock);
	log_info("listening on %s (signer %s%s, state %s, accel %s, at most %u boxes)", g.sock_path, g.signer_socket,
		 g.o.unrecorded ? ", UNRECORDED" : "", g.o.state_dir, g.o.accel, g.o.max_boxes);

	for (;;) {
		struct pollfd p[2] = { { .fd = lfd, .events = POLLIN }, { .fd = sfd, .events = POLLIN } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR) {
				continue;
			}
			break;
		}
		if (p[1].revents) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si) && si.ssi_signo != SIGHUP) {
				log_info("signal %u: stopping every box and closing every run", si.ssi_signo);
				break;
			}
		}
		if (p[0].revents & POLLIN) {
			accept_one(lfd);
		}
	}
	/* New connections are refused from here on. */
	(void)close(lfd);
	(void)unlink(g.sock_path);
	shutdown_all();
	log_info("stopped");
	(void)close(sfd);
	return 0;
}
