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

#include <openssl/pem.h>
#include <openssl/x509.h>

#include "banned.h"
#include "clock.h"
#include "strv.h"
#include "io.h"
#include "crypto.h"
#include "daemon/api-proto.h"
#include "daemon/apply.h"
#include "daemon/crossing.h"
#include "daemon/daemon.h"
#include "daemon/door.h"
#include "daemon/egress-approve.h"
#include "daemon/egress-door.h"
#include "daemon/events.h"
#include "daemon/http.h"
#include "daemon/image-files.h"
#include "daemon/image-local.h"
#include "daemon/ipc.h"
#include "daemon/obsq.h"
#include "daemon/sandbox.h"
#include "daemon/secrets.h"
#include "daemon/signer-link.h"
#include "daemon/supervisor.h"
#include "daemon/supmsg.h"
#include "egress/ca.h"
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
	bool has_exit; /* it ran to an end: exited with a code, or killed by a signal (never both) */
	struct exit_status exit;
	char *error;
	char *stdin_sha256;
	int64_t stdin_bytes;
	struct pend *next;
};

/* A dialled connection of the network door waiting for its egress_done. */
struct egress_wait {
	int64_t conn;
	bool done;
	bool gone; /* the supervisor exited first */
	struct egress_done_info info;
	struct egress_wait *next;
};

struct box {
	char name[64];
	char *dir;
	enum box_state state;
	pid_t sup_pid;
	int sup_fd;
	struct supmon mon; /* what the daemon and the supervisor may send now (supmsg.h; zeroed: before boot) */
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
	char *sup_violation; /* the supervisor broke the daemon's side of the protocol (stopped reading its requests): how */
	char *cut_reason; /* the supervisor cut the box off from its agent (lost, protocol violation, kills ignored): why */
	bool stop_requested;
	uint64_t gaps_complete; /* completions the signer did not record */
	uint64_t gaps_unrecorded; /* ... of which not even the gap is recorded yet */
	uint64_t obs_gaps_unrecorded; /* must-keep observations lost whose gap is not recorded yet */
	struct obsq obs; /* must-keep observations not yet recorded (--observe-queue), drained in order */
	bool obs_draining; /* one thread sends the queue to the signer at a time */
	uint64_t obs_pushed, obs_kept; /* observations queued and taken by the signer, in order (cond wakes waiters) */
	bool obs_failed; /* one was refused or did not fit: the box was stopped */
	int events_fd;
	struct events_cap events;
	bool removed;
	/* The network door (egress-door.c). */
	struct egress_policy egress; /* the box's allowlist (built at creation) */
	unsigned n_egress; /* connection threads and the record sender using the box */
	bool egress_closed; /* a stop began: every later connection is refused, no dial goes out */
	struct egress_wait *ewait; /* dialled connections waiting for their egress_done */
	/*
	 * A pipe made with the first connection (egress_hup_made): its read end is
	 * every crossing's abandon fd; egress_close closes the write end, so a
	 * signer call or approval wait of the box ends at once (POLLHUP).
	 */
	int egress_hup[2];
	bool egress_hup_made;
	struct egress_rate erate; /* tkbox.egress: at most EGRESS_RECORD_RATE a second, then a summary */
	json_t *erecords; /* tkbox.egress records admitted and not yet sent (an array) */
	bool erecord_sending; /* one thread sends them */
	uint64_t egress_lost_unrecorded; /* tkbox.egress records the signer did not take, not yet counted as a gap */
	/* Secrets, the box's CA and its self-test (issue 13; docs/secrets.md). */
	struct box_secrets secrets; /* the values in secmem: wiped when the box stops or is removed */
	char **bound_hosts; /* every secret's bound hosts (they joined the allowlist) */
	char **model_hosts; /* egress_model_hosts of its --allow values */
	struct egress_inspect_cfg insp; /* what the door inspects (borrows the two lists above) */
	struct egress_ca *ca; /* from create until the boot request went out */
	char ca_sha256[SHA256_HEX_LEN + 1]; /* the CA certificate's digest (DER); "" without a CA */
	bool selftest_seen; /* the supervisor's selftest came */
	json_t *selftest; /* {ran, trusted} */
	int64_t clock_offset_ms; /* the guest's clock minus the host's, at its self-test */
	/* The patch door (apply.c): one diff at a time, the patch saved at stop, one apply at a time. */
	int64_t diff_no; /* the pending diff's number (0: none) */
	bool diff_done;
	bool diff_abandoned; /* its waiter gave up (DAEMON_DIFF_TIMEOUT_S): the answer is dropped when it comes */
	struct box_patch diff; /* the pending diff's answer */
	json_t *patch; /* the box JSON's "patch": what stop saved, or why nothing was */
	json_t *config; /* the create request's config (the tkbox.yaml read), recorded in tkbox.box; or NULL */
	bool applying;
	struct box *next;
};

struct daemon {
	struct daemon_opts o;
	char *signer_socket;
	char *guest_bin;
	char *sock_path;
	pthread_mutex_t lock;
	struct egress_door_config egress; /* --egress-block, --egress-allow-private, --resolve */
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

static size_t strv_len(char *const *v)
{
	size_t n = 0;

	while (v && v[n]) {
		n++;
	}
	return n;
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
static void inspect_op(struct box *b, const struct supmsg *m);
static void egress_open(struct box *b, const struct supmsg *m);
static void egress_close(struct box *b);
static void egress_record_locked(struct box *b, json_t *data);

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
	/*
	 * The allowlist as shown, with the values as given, in egress.json beside it (a stopped box keeps it in ls and
	 * show; 512 entries do not fit box.json's 64 KiB).
	 */
	{
		_cleanup_free_ char *epath = NULL, *es = NULL;
		json_t *e = egress_policy_json(&b->egress);
		if (e && json_object_set_new(e, "values", strv_json(b->egress.values)) == 0 &&
		    (es = json_dumps(e, JSON_COMPACT | JSON_SORT_KEYS)) &&
		    asprintf(&epath, "%s/egress.json", b->dir) >= 0) {
			(void)io_write_file_atomic(epath, es, strlen(es), 0600);
		}
		json_decref(e);
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

/* A box's events file, appended to (its size counts against the cap). */
static void box_open_events(struct box *b)
{
	_cleanup_free_ char *ep = NULL;
	struct stat st;

	if (asprintf(&ep, "%s/events.jsonl", b->dir) < 0) {
		return;
	}
	b->events_fd = open(ep, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (b->events_fd >= 0 && fstat(b->events_fd, &st) == 0) {
		b->events.bytes = (uint64_t)st.st_size;
	}
}

static void box_load_fields(struct box *b, const json_t *v, const char *state)
{
	const char *s;
	int64_t i;

	b->state = strcmp(state, "stopped") == 0 ? BOX_STOPPED : strcmp(state, "failed") == 0 ? BOX_FAILED : BOX_LOST;
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
	if (json_get_string(v, "workspace", &s) >= 0) {
		b->workspace = strdup(s); /* apply's default checkout */
	}
	b->patch = apply_patch_box_json(b->dir);
	/* The allowlist box_save kept in egress.json; none readable (an older daemon's box) shows an empty one. */
	{
		_cleanup_free_ char *epath = NULL, *text = NULL;
		_cleanup_json_ json_t *e = NULL;
		size_t n = 0;
		if (asprintf(&epath, "%s/egress.json", b->dir) >= 0 &&
		    io_read_file(AT_FDCWD, epath, JSON_DEFAULT_MAX_BYTES, IO_READ_REGULAR | IO_READ_NOFOLLOW, &text,
				 &n) >= 0 &&
		    json_parse_strict(text, n, NULL, &e) >= 0) {
			(void)egress_policy_from_json(e, &b->egress);
		}
	}
}

/* One box a previous daemon left in dir/name (caller holds g.lock). -ENOMEM stops the scan. */
static int load_box(const char *dir, const char *name)
{
	_cleanup_free_ char *path = NULL, *text = NULL;
	_cleanup_json_ json_t *v = NULL;
	const char *state = NULL;
	struct box *b;
	size_t n = 0;

	if (!door_box_name_ok(name) || asprintf(&path, "%s/%s/box.json", dir, name) < 0) {
		return 0;
	}
	/* A longer box.json is cut and then refused by the parser, as before. */
	if (io_read_file(AT_FDCWD, path, 65535, IO_READ_PREFIX, &text, &n) < 0 ||
	    json_parse_strict(text, n, NULL, &v) < 0 || json_get_string(v, "state", &state) < 0) {
		return 0;
	}
	b = calloc(1, sizeof(*b));
	if (!b) {
		return -ENOMEM;
	}
	(void)snprintf(b->name, sizeof(b->name), "%s", name);
	b->sup_fd = -1;
	b->events_fd = -1;
	b->diff.fd = -1;
	(void)pthread_cond_init(&b->cond, NULL);
	if (asprintf(&b->dir, "%s/%s", dir, name) < 0) {
		free(b);
		return -ENOMEM;
	}
	box_load_fields(b, v, state);
	box_open_events(b);
	b->next = g.boxes;
	g.boxes = b;
	g.n_boxes++;
	if (b->state == BOX_LOST) {
		events_write(b, EV_LIFECYCLE, "box.lost",
			     json_pack("{s:s}", "detail",
				       "the daemon that ran this box ended without stopping it; its run stays open"));
		box_save(b);
	}
	return 0;
}

/* Boxes a previous daemon left: stopped ones stay exportable; running ones are lost. */
static void load_boxes(void)
{
	_cleanup_free_ char *dir = NULL;
	struct dirent *de;
	DIR *d;

	if (asprintf(&dir, "%s/boxes", g.o.state_dir) < 0) {
		return;
	}
	d = opendir(dir);
	if (!d) {
		return;
	}
	while ((de = readdir(d)) && load_box(dir, de->d_name) >= 0) {
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

	pthread_mutex_lock(&g.lock);
	{
		/* Commands still completing (a stop just killed them) are recorded before the run closes. */
		struct timespec until;
		(void)clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 30;
		while ((b->n_execs > 0 || b->n_egress > 0) &&
		       pthread_cond_timedwait(&b->cond, &g.lock, &until) != ETIMEDOUT) {
		}
	}
	pthread_mutex_unlock(&g.lock);
	/* Losses counted while the signer was away, those of the commands just waited for included, go in first. */
	box_flush_gaps(b);
	pthread_mutex_lock(&g.lock);
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
	events_write(b, EV_PROBLEM, "gap",
		     json_pack("{s:s,s:s,s:I}", "kind", kind, "reason", reason, "count", (json_int_t)count));
	if (b->run_id && b->run_closed) {
		/* Never "recorded" by default: the closed run cannot take it, and the box's events say so. */
		events_write(b, EV_PROBLEM, "signer.gap_after_close",
			     json_pack("{s:s,s:I,s:s}", "kind", kind, "count", (json_int_t)count, "detail",
				       "the run was already closed: this loss is only in the box's events"));
		pthread_mutex_unlock(&g.lock);
		return -ESHUTDOWN;
	}
	run_id = b->run_id ? strdup(b->run_id) : NULL;
	token = b->run_token ? strdup(b->run_token) : NULL;
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
	uint64_t pending, total, obs, eg;

	pthread_mutex_lock(&g.lock);
	pending = b->gaps_unrecorded;
	total = b->gaps_complete;
	obs = b->obs_gaps_unrecorded;
	eg = b->egress_lost_unrecorded;
	pthread_mutex_unlock(&g.lock);
	/* tkbox.egress records are best effort: one the signer did not take is counted here (kind egress). */
	if (eg > 0 &&
	    box_gap(b, "egress", "tkbox.egress records of the proxy's own refusals could not be recorded", eg) >= 0) {
		pthread_mutex_lock(&g.lock);
		b->egress_lost_unrecorded -= MIN(eg, b->egress_lost_unrecorded);
		pthread_mutex_unlock(&g.lock);
	}
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

/*
 * fork + exec `tkbox daemon --supervise` with the socketpair on SUPERVISOR_FD.
 * As root, the box gets a uid of its own (sandbox_box_give: its QEMU starts
 * under it, the supervisor drops to it once the box is up).
 */
static int spawn_supervisor(const struct box *b, pid_t *ret_pid, int *ret_fd)
{
	_cleanup_free_ char *self = NULL;
	_cleanup_(sandbox_env_freep) char **env = NULL;
	uid_t box_uid = 0;
	int sv[2], r;
	pid_t pid;

	r = find_self(&self);
	if (r >= 0 && geteuid() == 0) {
		r = sandbox_box_give(b->dir, &box_uid, &env);
		if (r == -EUSERS) {
			log_error("box %s: no free uid of the box range (SANDBOX_UID_BASE, %u slots, 64 tried): "
				  "processes of other users hold them; keep that uid range for tkbox",
				  b->name, SANDBOX_UID_SLOTS);
		}
	}
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
		char *argv[] = { "tkbox", "daemon", SUPERVISOR_ARG, (char *)b->name, NULL };
		sigset_t all;
		/* Only async-signal-safe calls between fork and exec (the daemon has threads). */
		(void)sigemptyset(&all);
		(void)sigprocmask(SIG_SETMASK, &all, NULL);
		/* dup2 onto itself keeps close-on-exec: the supervisor would start without its socket. */
		if (sv[1] == SUPERVISOR_FD ? fcntl(sv[1], F_SETFD, 0) < 0 : dup2(sv[1], SUPERVISOR_FD) < 0) {
			_exit(127);
		}
		(void)setpgid(0, 0); /* a Ctrl-C at the daemon's terminal is the daemon's to handle */
		(void)execve(self, argv, env ? env : environ);
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

/* Supervisor events that mean the box's agent is gone: the box is stopped and its run says why. */
static bool box_cut_event(const char *event)
{
	return strcmp(event, "box.agent_lost") == 0 || strcmp(event, "box.protocol_violation") == 0 ||
	       strcmp(event, "box.kills_ignored") == 0;
}

static int box_send(struct box *b, const struct supmsg *m, const int *fds);

/*
 * The `secrets` message right after ready (caller holds g.lock, the
 * reader's): to every box with a CA or a secret, the values in a sealed
 * memfd (none: an empty one). Before it the supervisor inspects nothing.
 */
static int box_send_secrets(struct box *b)
{
	struct supmsg m = { .op = SUPMSG_SECRETS };
	int fd = -1, r;

	if (!b->insp.has_ca && b->secrets.n == 0) {
		return 0;
	}
	/* A box with a CA and no secret still gets the message (the supervisor reads nothing before it): no values. */
	r = b->secrets.n > 0 ? box_secrets_supmsg(&b->secrets, &m, &fd)
			     : (fd = io_memfd_sealed("tkbox-secrets", NULL, 0));
	if (r >= 0) {
		r = box_send(b, &m, &fd);
	}
	if (b->secrets.n > 0) {
		box_secrets_supmsg_release(&m);
	}
	if (fd >= 0) {
		(void)close(fd);
	}
	if (r < 0) {
		events_write(b, EV_LIFECYCLE, "secrets.send_failed", json_pack("{s:s}", "detail", tk_strerror(r)));
	}
	return r;
}

/* One message from the supervisor, allowed by the monitor (caller holds g.lock). */
static void reader_apply(struct box *b, const struct supmsg *m, bool *stopped_ok)
{
	switch (m->op) {
	case SUPMSG_READY:
		(void)snprintf(b->accel, sizeof(b->accel), "%s", m->accel);
		(void)snprintf(b->isolation, sizeof(b->isolation), "%s", m->isolation);
		b->ready_ms = m->ready_ms;
		b->boot_answered = true;
		/* The secrets first: the reader sends them before it reads on, so no egress_dial precedes them. */
		if (box_send_secrets(b) < 0 && !b->boot_error) {
			b->boot_error = strdup("the box's secrets could not be handed to its supervisor; the box was "
					       "stopped (tkbox events shows why)");
			(void)kill(b->sup_pid, SIGKILL);
		}
		break;
	case SUPMSG_FAILED:
		b->boot_error = strdup(m->message);
		b->boot_answered = true;
		break;
	case SUPMSG_DONE:
		for (struct pend *p = b->pend; p; p = p->next) {
			if (p->exec == m->exec && !p->done) {
				p->done = true;
				p->ok = m->ok;
				/* Killed by SIGKILL is not exit 137: the two stay apart up to the signer. */
				p->has_exit = m->has_exit;
				p->exit = m->exit;
				p->error = m->error ? strdup(m->error) : NULL;
				p->stdin_sha256 = m->stdin_sha256 ? strdup(m->stdin_sha256) : NULL;
				p->stdin_bytes = m->stdin_bytes;
			}
		}
		break;
	case SUPMSG_EVENT:
		events_write(b, EV_LIFECYCLE, m->event, m->detail ? json_pack("{s:s}", "detail", m->detail) : NULL);
		if (!b->cut_reason && box_cut_event(m->event)) {
			/*
			 * The box's agent is gone or hostile: the box leaves running now,
			 * so no exec is decided for it; the supervisor is stopping it.
			 */
			b->cut_reason = strdup(m->detail ? m->detail : m->event);
			if (b->state == BOX_RUNNING || b->state == BOX_CREATING) {
				b->state = BOX_STOPPING;
			}
			egress_close(b);
			box_save(b);
		}
		if (strcmp(m->event, "box.stopping") == 0) {
			egress_close(b); /* a stop the supervisor began: no conn it still asks about is dialled */
		}
		break;
	case SUPMSG_EGRESS_OPEN:
		egress_open(b, m);
		break;
	case SUPMSG_EGRESS_DONE:
		for (struct egress_wait *w = b->ewait; w; w = w->next) {
			if (w->conn == m->conn && !w->done) {
				w->done = true;
				w->info = (struct egress_done_info){ .bytes_up = m->bytes_up,
								     .bytes_down = m->bytes_down,
								     .duration_ms = m->duration_ms,
								     .error = m->error ? strdup(m->error) : NULL,
								     .rule = m->rule ? strdup(m->rule) : NULL };
			}
		}
		break;
	case SUPMSG_EGRESS_REFUSED:
		/* The proxy refused a request itself before asking (a malformed head, CONNECT to 80, the stream cap). */
		events_write(b, EV_PROBLEM, "egress.refused",
			     json_pack("{s:s?,s:I,s:s,s:s}", "host", m->host, "port", (json_int_t)m->port, "rule",
				       m->rule, "reason", m->message));
		egress_record_locked(b, json_pack("{s:s,s:I,s:s,s:s,s:s}", "host", m->host ? m->host : "", "port",
						  (json_int_t)m->port, "decision", "refused", "rule", m->rule, "reason",
						  m->message));
		break;
	case SUPMSG_SECRET_USE:
	case SUPMSG_SECRET_LEAK:
	case SUPMSG_MODEL_CALL:
	case SUPMSG_SELFTEST:
		inspect_op(b, m);
		break;
	case SUPMSG_STOPPED:
		*stopped_ok = true;
		free(b->stop_reason);
		b->stop_reason = strdup(m->reason);
		break;
	default:
		break;
	}
}

/* The supervisor is gone: the box stops or fails, its commands end, a failure is recorded and ends the run. */
static void reader_finish(struct box *b, bool stopped_ok, const char *violation)
{
	int status = 0;

	(void)RETRY_EINTR(waitpid(b->sup_pid, &status, 0));

	pthread_mutex_lock(&g.lock);
	(void)close(b->sup_fd);
	b->sup_fd = -1;
	b->sup_gone = true;
	pend_finish_all(b, "the box's supervisor exited before the command finished");
	if (b->diff_no && !b->diff_done) {
		box_patch_release(&b->diff);
		b->diff.error = strdup("the box's supervisor exited before the patch was made");
		b->diff_done = true;
		b->diff_no = b->diff_abandoned ? 0 : b->diff_no;
	}
	egress_close(b);
	for (struct egress_wait *w = b->ewait; w; w = w->next) {
		w->gone = !w->done;
		w->done = true;
	}
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

	if (!violation) {
		pthread_mutex_lock(&g.lock);
		violation = b->sup_violation; /* b outlives this function: borrowed */
		pthread_mutex_unlock(&g.lock);
	}
	if (b->state == BOX_FAILED || violation) {
		/* The loss is recorded, then the run is closed: a failure ends the run. */
		box_gap(b, "supervisor",
			violation ? violation : "the box's supervisor exited unexpectedly; the box was stopped", 1);
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
	{
		/* The box stopped: its values go once no exec of it is checked against them any more. */
		struct timespec until;
		(void)clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 30;
		while (b->n_execs > 0 && pthread_cond_timedwait(&b->cond, &g.lock, &until) != ETIMEDOUT) {
		}
		if (b->n_execs == 0) {
			box_secrets_free(&b->secrets);
		}
	}
	b->reader_done = true; /* from here on nothing of this thread touches b: rm may free it */
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&g.lock);
}

/* The supervisor's answer to the pending diff (caller holds g.lock): the patch's memfd (taken) or why there is none. */
static void box_diff_done(struct box *b, const struct supmsg *m, int fd)
{
	box_patch_release(&b->diff);
	b->diff_done = true;
	if (b->diff_abandoned) {
		b->diff_abandoned = false;
		b->diff_no = 0;
		if (fd >= 0) {
			(void)close(fd);
		}
		return;
	}
	if (!m->ok || fd < 0) {
		b->diff.error = strdup(m->error ? m->error : "the supervisor sent no patch");
		if (fd >= 0) {
			(void)close(fd);
		}
		return;
	}
	b->diff.fd = fd;
	(void)snprintf(b->diff.sha256, sizeof(b->diff.sha256), "%s", m->sha256);
	b->diff.bytes = (uint64_t)m->patch_bytes;
	b->diff.files = (uint64_t)m->files;
	b->diff.notices = json_array();
	for (size_t i = 0; b->diff.notices && i < m->n_notices; i++) {
		(void)json_array_append_new(b->diff.notices, json_pack("[s,s]", m->notices[i].path, m->notices[i].why));
	}
}

/* One thread per box: reads the supervisor's messages until it exits. */
static void *reader_thread(void *arg)
{
	struct box *b = arg;
	struct buf msg;
	int fds[IPC_MAX_FDS];
	size_t nfds;
	bool stopped_ok = false;
	_cleanup_free_ char *violation = NULL; /* the supervisor broke the protocol: how */

	if (buf_init(&msg, SUPMSG_MAX + 1, 0) < 0) {
		return NULL;
	}
	for (;;) {
		struct supmsg m;
		const char *why = NULL;
		int r = ipc_recv(b->sup_fd, &msg, fds, 1, &nfds); /* diff_done carries the patch's memfd */
		if (r < 0) {
			/* Anything but its end (fds, an oversized or empty message) is a broken protocol too. */
			if (r != -ECONNRESET && asprintf(&violation,
							 "the box's supervisor sent a message the daemon cannot take "
							 "(%s), so it was killed and the box stopped",
							 tk_strerror(r)) < 0) {
				violation = NULL;
			}
			if (r != -ECONNRESET) {
				(void)kill(b->sup_pid, SIGKILL);
			}
			break;
		}
		pthread_mutex_lock(&g.lock);
		/* The one decoder and the monitor's table: the message must be well formed and allowed now. */
		r = supmon_receive(&b->mon, buf_ptr(&msg), buf_len(&msg), &m, &why);
		if (r >= 0 && nfds != supmsg_fds(&m)) {
			supmsg_release(&m);
			why = "a message with the wrong number of fds";
			r = -EPROTO;
		}
		if (r < 0) {
			for (size_t i = 0; i < nfds; i++) {
				(void)close(fds[i]);
			}
			/* A supervisor that breaks the protocol is compromised or broken: stop it, and the run says why. */
			if (asprintf(&violation,
				     "the box's supervisor broke its protocol (%s), so it was killed and the box "
				     "stopped",
				     why ? why : tk_strerror(r)) < 0) {
				violation = NULL;
			}
			events_write(b, EV_LIFECYCLE, "supervisor.protocol_error",
				     json_pack("{s:s}", "detail", why ? why : tk_strerror(r)));
			pthread_mutex_unlock(&g.lock);
			(void)kill(b->sup_pid, SIGKILL);
			break;
		}
		if (m.op == SUPMSG_DIFF_DONE) {
			box_diff_done(b, &m, nfds ? fds[0] : -1); /* takes the fd */
		}
		reader_apply(b, &m, &stopped_ok);
		pthread_cond_broadcast(&b->cond);
		pthread_mutex_unlock(&g.lock);
		supmsg_release(&m);
	}
	buf_release(&msg);
	reader_finish(b, stopped_ok, violation);
	return NULL;
}

/* Caller holds g.lock. */
/*
 * A request to b's supervisor (caller holds g.lock). The send never blocks:
 * a supervisor whose queue is full stopped reading its requests, so it is
 * killed, the box stops and its run records why.
 */
static int box_send(struct box *b, const struct supmsg *m, const int *fds)
{
	int r = ipc_send_msg(b->sup_fd, &b->mon, SUPMSG_TO_SUPERVISOR, m, fds, NULL);

	if (r == -EAGAIN) {
		if (!b->sup_violation) {
			b->sup_violation =
				strdup("the box's supervisor stopped reading the daemon's requests (its queue "
				       "was full), so it was killed and the box stopped");
		}
		events_write(b, EV_LIFECYCLE, "supervisor.protocol_error",
			     json_pack("{s:s}", "detail", "it stopped reading the daemon's requests"));
		(void)kill(b->sup_pid, SIGKILL);
	}
	return r;
}

static void box_stop_async(struct box *b, const char *reason)
{
	struct supmsg m = { .op = SUPMSG_STOP };

	if (b->state != BOX_RUNNING || b->sup_fd < 0) {
		return;
	}
	b->state = BOX_STOPPING;
	b->stop_requested = true;
	/* Egress closes the moment a stop begins: pending approvals end, no dial goes out. */
	egress_close(b);
	if (box_send(b, &m, NULL) < 0) {
		(void)kill(b->sup_pid, SIGKILL);
	}
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
 * Another thread is sending b's queue: wait for the outcome of the record
 * queued as number seq (a must-keep record is kept before anything acts on
 * it). Called with g.lock held; returns with it released.
 */
static int box_observe_wait(struct box *b, uint64_t seq, const char *kind, char *err, size_t err_size)
{
	int r;

	while (b->obs_kept < seq && !b->obs_failed) {
		pthread_cond_wait(&b->cond, &g.lock);
	}
	r = b->obs_kept >= seq ? 0 : -EIO;
	pthread_mutex_unlock(&g.lock);
	if (r < 0) {
		(void)snprintf(err, err_size,
			       "%s could not be kept (the records before it were refused); the box was stopped", kind);
	}
	return r;
}

/*
 * A must-keep observation on b's run (issue 5's fail-closed rule): queued
 * (at most --observe-queue, default OBSQ_MAX, pending) and sent to the signer in FIFO order by one
 * thread at a time. When it does not fit in the queue, or the signer refuses
 * or cannot take one, the box is stopped, what was still queued is dropped
 * and the loss is recorded as one tkbox.gap (kind observe) with its count.
 * Returns 0 once data is recorded (by this call, or by another thread's
 * drain it was queued behind: the call waits for that outcome, so no act
 * passes before its record), < 0 when the box was stopped (err says why). Takes
 * data's reference. The caller does not hold g.lock.
 */
static int box_observe_keep(struct box *b, const char *kind, json_t *data, char *err, size_t err_size)
{
	_cleanup_free_ char *run_id = NULL, *token = NULL;
	size_t lost = 0;
	uint64_t seq;
	int r = 0;

	pthread_mutex_lock(&g.lock);
	if (b->obs_failed) {
		pthread_mutex_unlock(&g.lock);
		json_decref(data);
		(void)snprintf(err, err_size, "an earlier record of this box could not be kept; it was stopped");
		return -ESHUTDOWN;
	}
	if (!b->obs.items) {
		r = obsq_init(&b->obs, g.o.observe_queue);
	}
	if (r >= 0) {
		r = obsq_push(&b->obs, kind, data);
	} else {
		json_decref(data);
	}
	if (r < 0) {
		(void)snprintf(err, err_size,
			       "%s could not be queued (%s; at most %u pending, tkbox daemon --observe-queue)", kind,
			       tk_strerror(r), g.o.observe_queue);
		/* The only trace of why the box stops: the caller's err reaches the box's client at most. */
		events_write(
			b, EV_PROBLEM, r == -ENOSPC ? "observe.queue_full" : "observe.queue_failed",
			json_pack("{s:s,s:I,s:s}", "kind", kind, "max", (json_int_t)g.o.observe_queue, "detail", err));
		lost = 1;
		goto failed;
	}
	seq = ++b->obs_pushed;
	if (b->obs_draining) {
		return box_observe_wait(b, seq, kind, err, err_size);
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
		b->obs_kept++;
		pthread_cond_broadcast(&b->cond);
	}
	b->obs_draining = false;
	if (r >= 0) {
		pthread_mutex_unlock(&g.lock);
		return 0;
	}
	lost = obsq_clear(&b->obs);
failed:
	b->obs_failed = true;
	pthread_cond_broadcast(&b->cond);
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

/* What a box keeps in the daemon's state until tkbox rm; then its directory goes too. */
static void box_remove_files(const struct box *b)
{
	static const char *const files[] = { "box.json",       "egress.json", "events.jsonl", "console.log",
					     "workspace.ext4", "patch.diff",  "patch.json" };

	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		_cleanup_free_ char *path = NULL;
		if (asprintf(&path, "%s/%s", b->dir, files[i]) >= 0) {
			(void)unlink(path);
		}
	}
	apply_remove_scratch(b->dir);
	if (rmdir(b->dir) < 0 && errno != ENOENT) {
		log_warn("box %s: its state directory %s was not removed: %s", b->name, b->dir, tk_strerror(-errno));
	}
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

/* The API's refusal of a request (api-proto's or the door's). */
static void respond_api_error(struct conn *c, const struct api_error *e)
{
	respond_error(c->fd, e->status, e->code, NULL, "%s", e->message);
}

/* The box's network door: {allow, presets, inspect} (egress_policy_json) and the daemon's resolve: ["NAME=ADDR"]. */
static json_t *box_egress_json(const struct box *b)
{
	json_t *v = egress_policy_json(&b->egress);

	if (v && json_object_set_new(v, "resolve", egress_resolve_json(&g.egress)) < 0) {
		json_decref(v);
		return NULL;
	}
	return v;
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
	if (v && b->state == BOX_RUNNING && b->sup_pid > 0) {
		(void)json_object_set_new(v, "supervisor_pid", json_integer(b->sup_pid));
		(void)json_object_set_new(v, "supervisor_isolation", sandbox_observe_json(b->sup_pid));
	}
	if (v && b->close_reason) {
		(void)json_object_set_new(v, "close_reason", json_string(b->close_reason));
	}
	if (v && b->stop_reason) {
		(void)json_object_set_new(v, "stop_reason", json_string(b->stop_reason));
	}
	if (v && b->state != BOX_LOST) {
		(void)json_object_set_new(v, "egress", box_egress_json(b));
	}
	if (v && b->patch) {
		(void)json_object_set(v, "patch", b->patch);
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
	json_decref(b->config);
	obsq_release(&b->obs);
	free(b->boot_error);
	free(b->stop_reason);
	free(b->cut_reason);
	free(b->sup_violation);
	strv_free(b->env);
	for (struct egress_wait *w = b->ewait, *n; w; w = n) {
		n = w->next;
		egress_done_info_release(&w->info);
		free(w);
	}
	for (int i = 0; b->egress_hup_made && i < 2; i++) {
		if (b->egress_hup[i] >= 0) {
			(void)close(b->egress_hup[i]);
		}
	}
	json_decref(b->erecords);
	egress_policy_release(&b->egress);
	box_secrets_free(&b->secrets);
	strv_free(b->bound_hosts);
	strv_free(b->model_hosts);
	egress_ca_free(b->ca);
	json_decref(b->selftest);
	json_decref(b->patch);
	box_patch_release(&b->diff);
	(void)pthread_cond_destroy(&b->cond);
	free(b);
}

static const char *const default_box_env[] = {
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root",
	"LANG=C.UTF-8",
	/* The network door: the guest's forwarder (docs/egress.md "The guest forwarder"). */
	"HTTP_PROXY=http://127.0.0.1:3128",
	"HTTPS_PROXY=http://127.0.0.1:3128",
	"http_proxy=http://127.0.0.1:3128",
	"https_proxy=http://127.0.0.1:3128",
	"NO_PROXY=localhost,127.0.0.1,::1",
	"no_proxy=localhost,127.0.0.1,::1",
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

/* A new box from a decoded request: its name, limits and env (not yet registered). -EIO: no randomness. */
static int box_new(const struct api_create_req *q, struct box **ret)
{
	char gen[16] = "box-";
	struct box *b;

	if (!q->name && crypto_random_hex(3, gen + 4) < 0) {
		return -EIO;
	}
	b = calloc(1, sizeof(*b));
	if (!b) {
		return -ENOMEM;
	}
	b->sup_fd = -1;
	b->events_fd = -1;
	b->sup_pid = -1;
	b->diff.fd = -1;
	(void)pthread_cond_init(&b->cond, NULL);
	(void)snprintf(b->name, sizeof(b->name), "%s", q->name ? q->name : gen);
	b->vcpus = q->cpus;
	b->mem_mib = q->memory_mib;
	b->disk_mib = q->disk_mib;
	b->lifetime_s = q->timeout_s;
	b->exec_timeout_s = q->exec_timeout_s;
	b->config = q->config ? json_deep_copy(q->config) : NULL;
	if (build_box_env(q->env, &b->env) < 0 || asprintf(&b->dir, "%s/boxes/%s", g.o.state_dir, b->name) < 0 ||
	    (q->config && !b->config)) {
		box_free(b);
		return -ENOMEM;
	}
	*ret = b;
	return 0;
}

/* Reserve the name and a slot; on a refusal the client is told and b freed. */
static int box_reserve(struct conn *c, struct box *b)
{
	int r = 0;

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
	}
	pthread_mutex_unlock(&g.lock);
	if (r == -EEXIST) {
		respond_error(c->fd, 409, "exists", NULL, "a box named %s exists (tkbox rm %s, or pick another --name)",
			      b->name, b->name);
	} else if (r == -EUSERS) {
		respond_error(c->fd, 429, "too_many_boxes", NULL,
			      "the daemon runs %u boxes already (the limit; tkbox rm one, or start the daemon with "
			      "--max-boxes)",
			      g.o.max_boxes);
	} else if (r < 0) {
		respond_error(c->fd, 503, "shutting_down", NULL, "the daemon is shutting down");
	}
	if (r < 0) {
		box_free(b);
	}
	return r;
}

/* Directory, events file; a box directory a removed box left is reused. */
static int box_make_dir(struct box *b, char *err, size_t err_size)
{
	_cleanup_free_ char *boxes = NULL, *ep = NULL;
	int r;

	if (asprintf(&boxes, "%s/boxes", g.o.state_dir) < 0 || asprintf(&ep, "%s/events.jsonl", b->dir) < 0) {
		r = -ENOMEM;
	} else {
		(void)mkdir(boxes, 0700);
		r = mkdir(b->dir, 0700) < 0 && errno != EEXIST ? negative_errno() : 0;
		if (r >= 0) {
			b->events_fd = open(ep, O_WRONLY | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
			r = b->events_fd < 0 ? negative_errno() : 0;
		}
	}
	if (r < 0) {
		(void)snprintf(err, err_size, "creating the box directory %s: %s", b->dir, tk_strerror(r));
	}
	return r;
}

/* The image's own Env comes first; the defaults and --env override it. */
static int box_merge_image_env(struct box *b, char *const *img_env)
{
	size_t ni = strv_len(img_env), nb = strv_len(b->env), k = 0;
	char **merged = calloc(ni + nb + 1, sizeof(char *));

	if (!merged) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < ni; i++) {
		size_t kl = strcspn(img_env[i], "=") + 1;
		bool over = false;
		for (size_t j = 0; j < nb; j++) {
			over = over || strncmp(b->env[j], img_env[i], kl) == 0;
		}
		if (!over && !(merged[k++] = strdup(img_env[i]))) {
			strv_free(merged);
			return -ENOMEM;
		}
	}
	memcpy(merged + k, b->env, nb * sizeof(char *));
	free(b->env);
	b->env = merged;
	return 0;
}

/*
 * The box's allowlist: its --allow values expanded (egress_policy_build). The image's apt sources and npm
 * configuration are read (a confined debugfs child, image-files.c) only when a preset needs them. A refusal the
 * person can act on (an image that names no mirror, a file past its cap, too many entries) is a 400.
 */
static int box_build_egress(struct box *b, const struct api_create_req *q, const struct local_image *img, char *err,
			    size_t err_size)
{
	struct image_files files = { 0 };
	unsigned needs = egress_policy_needs(q->allow);
	const char *warn;
	int r = 0;

	if (needs) {
		r = image_files_read(img->path, needs, b->dir, &files, err, err_size);
		if (r == -EFBIG || r == -E2BIG) {
			r = -EINVAL;
		} else if (r < 0) {
			r = r == -ENOENT ? -EIO : r;
		}
	}
	if (r >= 0) {
		files.f.env = b->env; /* PIP_*, GOPROXY, GOSUMDB: the image's Env with --env over it */
		r = egress_policy_build(q->allow, q->inspect_all, &files.f, &b->egress, err, err_size);
		r = r == -ENOENT || r == -E2BIG ? -EINVAL : r;
	}
	image_files_release(&files);
	if (r >= 0 && (warn = egress_policy_warn(q->allow))) {
		pthread_mutex_lock(&g.lock);
		events_write(b, EV_LIFECYCLE, "egress.preset_relays", json_pack("{s:s}", "detail", warn));
		pthread_mutex_unlock(&g.lock);
	}
	return r;
}

/* The env the box's TLS clients read the box's CA from (docs/secrets.md); the user's --env wins. */
static const char *const ca_box_env[] = {
	"SSL_CERT_FILE=/etc/tkbox/ca-bundle.crt",
	"REQUESTS_CA_BUNDLE=/etc/tkbox/ca-bundle.crt",
	"CURL_CA_BUNDLE=/etc/tkbox/ca-bundle.crt",
	"PIP_CERT=/etc/tkbox/ca-bundle.crt",
	"GIT_SSL_CAINFO=/etc/tkbox/ca-bundle.crt",
	"NODE_EXTRA_CA_CERTS=/etc/tkbox/ca.pem",
	NULL,
};

static bool env_has_key(char *const *env, const char *entry)
{
	size_t kl = strcspn(entry, "=") + 1;

	for (; env && *env; env++) {
		if (strncmp(*env, entry, kl) == 0) {
			return true;
		}
	}
	return false;
}

/* Append copies of add[] to the NULL-terminated *env (skipping keys *env has when keep_user). */
static int env_append(char ***env, char *const *add, bool keep_user)
{
	size_t n = strv_len(*env), k = n;
	char **v = reallocarray(*env, n + strv_len(add) + 1, sizeof(char *));

	if (!v) {
		return -ENOMEM;
	}
	*env = v;
	v[n] = NULL;
	for (; add && *add; add++) {
		if (keep_user && env_has_key(v, *add)) {
			continue;
		}
		v[k] = strdup(*add);
		if (!v[k]) {
			return -ENOMEM;
		}
		v[++k] = NULL;
	}
	return 0;
}

/*
 * The box's secrets (secrets.c): the values out of the request into secmem,
 * the placeholders into the box's env. Whether the box gets a CA: a secret,
 * --inspect all or a model preset; with one, the CA env (unless --env sets
 * it). Before box_resolve: the image's Env goes under all of it.
 */
static int box_take_secrets(struct box *b, struct api_create_req *q, char *err, size_t err_size)
{
	static const char *const model_presets[] = { "anthropic", "openai", "claude-code" };
	_cleanup_(strv_freep) char **extra = NULL;
	int r = box_secrets_from_api(q, &b->secrets, err, err_size);

	if (r >= 0) {
		r = box_secrets_env(&b->secrets, q->env, &extra, err, err_size);
		r = r == -EEXIST ? -EINVAL : r;
	}
	if (r >= 0) {
		r = env_append(&b->env, extra, false);
	}
	b->insp.has_ca = b->secrets.n > 0 || q->inspect_all;
	for (size_t i = 0; q->allow && q->allow[i]; i++) {
		for (size_t k = 0; k < ARRAY_SIZE(model_presets); k++) {
			b->insp.has_ca = b->insp.has_ca || strcmp(q->allow[i], model_presets[k]) == 0;
		}
	}
	if (r >= 0 && b->insp.has_ca) {
		r = env_append(&b->env, (char *const *)ca_box_env, true);
	}
	if (r == -ENOMEM) {
		(void)snprintf(err, err_size, "out of memory");
	}
	return r;
}

/* The SHA-256 of a PEM certificate's DER, in hex. */
static int cert_sha256(const char *pem, char out[SHA256_HEX_LEN + 1])
{
	BIO *bio = BIO_new_mem_buf(pem, -1);
	X509 *x = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
	unsigned char *der = NULL;
	int n = x ? i2d_X509(x, &der) : -1;
	int r = n > 0 ? sha256_hex(der, (size_t)n, out) : -EBADMSG;

	OPENSSL_free(der);
	X509_free(x);
	BIO_free(bio);
	return r;
}

/*
 * After the allowlist is built: the bound hosts join it (exact host
 * entries), the model hosts are known, and a box with a CA gets it
 * (permitted: every allow entry's host, a wildcard's suffix, and the
 * self-test name).
 */
static int box_prepare_tls(struct box *b, char *err, size_t err_size)
{
	_cleanup_free_ const char **permitted = NULL;
	_cleanup_free_ char *cert = NULL;
	size_t n = 0;
	int r = box_secrets_hosts(&b->secrets, &b->bound_hosts);

	for (size_t i = 0; r >= 0 && b->bound_hosts[i]; i++) {
		struct egress_allow e, *v;
		bool have = false;

		if (egress_allow_parse(b->bound_hosts[i], &e) < 0) {
			(void)snprintf(err, err_size, "the bound host %s is not an allow entry", b->bound_hosts[i]);
			return -EINVAL;
		}
		for (size_t k = 0; k < b->egress.n_allow; k++) {
			const struct egress_allow *a = &b->egress.allow[k];
			have = have || (!a->wildcard && a->port == 0 && strcmp(a->host.name, e.host.name) == 0);
			/*
			 * An entry naming 443 decides that port as tcp://, a tunnel the proxy
			 * does not read: the swap would silently not happen. Refused.
			 */
			if (a->port == 443 && egress_allow_match(a, 1, &e.host, 443) == EGRESS_MATCH_PORT) {
				(void)snprintf(err, err_size,
					       "a secret is bound to %s, but the allow entry for %s:443 lets any "
					       "protocol through that port, so the proxy could not read the requests "
					       "to swap the secret in; allow %s without a port",
					       e.host.name, e.host.name, e.host.name);
				return -EINVAL;
			}
		}
		if (have) {
			continue;
		}
		if (b->egress.n_allow >= EGRESS_MAX_ALLOW) {
			(void)snprintf(err, err_size,
				       "the allowlist with the secrets' bound hosts has more than %d entries "
				       "(EGRESS_MAX_ALLOW); allow fewer hosts",
				       EGRESS_MAX_ALLOW);
			return -EINVAL;
		}
		v = reallocarray(b->egress.allow, b->egress.n_allow + 1, sizeof(*v));
		if (!v) {
			return -ENOMEM;
		}
		b->egress.allow = v;
		v[b->egress.n_allow++] = e;
	}
	if (r >= 0) {
		r = egress_model_hosts(b->egress.values, &b->model_hosts);
	}
	if (r < 0) {
		(void)snprintf(err, err_size, "out of memory");
		return r;
	}
	b->insp.bound = b->bound_hosts;
	b->insp.model_hosts = b->model_hosts;
	if (!b->insp.has_ca) {
		return 0;
	}
	permitted = calloc(b->egress.n_allow + 1, sizeof(*permitted));
	if (!permitted) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < b->egress.n_allow; i++) {
		bool dup = false;
		for (size_t k = 0; k < n; k++) {
			dup = dup || strcmp(permitted[k], b->egress.allow[i].host.name) == 0;
		}
		if (!dup) {
			permitted[n++] = b->egress.allow[i].host.name;
		}
	}
	permitted[n++] = EGRESS_SELFTEST_HOST;
	if (n > EGRESS_CA_PERMITTED_MAX) {
		(void)snprintf(err, err_size,
			       "the box's CA would permit %zu names, more than %d (EGRESS_CA_PERMITTED_MAX); allow "
			       "fewer hosts",
			       n, EGRESS_CA_PERMITTED_MAX);
		return -EINVAL;
	}
	r = egress_ca_new(b->name, permitted, n, b->lifetime_s, &b->ca);
	if (r >= 0) {
		r = egress_ca_cert_pem(b->ca, &cert);
	}
	if (r >= 0) {
		r = cert_sha256(cert, b->ca_sha256);
	}
	if (r < 0) {
		(void)snprintf(err, err_size, "making the box's CA: %s", tk_strerror(r));
		return r == -EINVAL ? -EIO : r;
	}
	return 0;
}

/* The image and workspace the box boots (resolved, built or pulled as needed). */
static int box_resolve(struct box *b, const struct api_create_req *q, struct local_image *img, struct local_image *ws,
		       char *err, size_t err_size)
{
	/* Image resolution options: the files are read by the `tkbox images` child, as absolute paths. */
	struct local_image_opts iopts = { .platform = q->platform,
					  .auth_file = q->registry_auth,
					  .ca_file = q->registry_ca };
	int r = image_local_resolve(g.o.state_dir, q->image, 1024, &iopts, img, err, err_size);

	if (r >= 0 && q->workspace) {
		/* With secrets, a workspace file holding a value refuses the box (the message names the file and secret). */
		r = workspace_local_resolve_secrets(g.o.state_dir, q->workspace, b->dir, &b->secrets, ws, err,
						    err_size);
		r = r == -EACCES ? -EINVAL : r;
	}
	if (r >= 0 && img->env) {
		r = box_merge_image_env(b, img->env);
	}
	if (r >= 0) {
		r = box_build_egress(b, q, img, err, err_size);
	}
	if (r >= 0) {
		r = box_prepare_tls(b, err, err_size);
	}
	if (r < 0) {
		return r;
	}
	b->image = strdup(img->source);
	b->image_digest = strdup(img->digest);
	b->workspace = ws->source ? strdup(ws->source) : NULL;
	b->workdir = img->working_dir && img->working_dir[0] == '/' ? strdup(img->working_dir) : NULL;
	b->image_user = img->user ? strdup(img->user) : NULL;
	b->image_from_cache = img->from_cache;
	return 0;
}

/* The run first: nothing boots that is not recorded. */
static int box_register_run(struct box *b, char *err, size_t err_size)
{
	_cleanup_json_ json_t *reply = NULL;
	const char *rid, *tok;
	char rnd[9], run_id[128];
	int r;

	if (g.o.unrecorded) {
		return 0;
	}
	(void)crypto_random_hex(4, rnd);
	(void)snprintf(run_id, sizeof(run_id), "tkbox-%s-%s", b->name, rnd);
	r = signer_link_once(
		signer_link_request_id(json_pack("{s:s,s:{s:s,s:s},s:s}", "method", "register_run", "agent", "name",
						 "tkbox", "version", TKBOX_VERSION, "run_id", run_id)),
		&reply, err, err_size);
	if (r < 0) {
		return r;
	}
	if (json_get_string(reply, "run_id", &rid) < 0 || json_get_string(reply, "run_token", &tok) < 0) {
		(void)snprintf(err, err_size, "the signer's register_run reply has no run_id/run_token");
		return -EPROTO;
	}
	pthread_mutex_lock(&g.lock);
	b->run_id = strdup(rid);
	b->run_token = strdup(tok);
	pthread_mutex_unlock(&g.lock);
	return 0;
}

/* The box's supervisor and the thread that reads it. */
static int box_start_supervisor(struct box *b, char *err, size_t err_size)
{
	pthread_t t;
	pthread_attr_t a;
	int r = spawn_supervisor(b, &b->sup_pid, &b->sup_fd);

	if (r == -EUSERS) {
		(void)snprintf(err, err_size,
			       "no free box uid: 64 random tries in the range %#x..%#x all found a running process "
			       "(SANDBOX_UID_SLOTS); stop boxes or other processes of that range, then retry",
			       SANDBOX_UID_BASE, SANDBOX_UID_BASE + SANDBOX_UID_SLOTS - 1);
		return r;
	}
	if (r < 0) {
		(void)snprintf(err, err_size, "starting the box's supervisor: %s", tk_strerror(r));
		return r;
	}
	(void)pthread_attr_init(&a);
	(void)pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &a, reader_thread, b) != 0) {
		(void)kill(b->sup_pid, SIGKILL);
		(void)waitpid(b->sup_pid, NULL, 0);
		(void)close(b->sup_fd);
		b->sup_fd = -1;
		b->sup_pid = -1; /* no reader thread to wait for */
		(void)snprintf(err, err_size, "no thread for the box");
		r = -EAGAIN;
	}
	(void)pthread_attr_destroy(&a);
	return r;
}

/* The boot request to the supervisor, through the monitor (the reader checks its answer against the same state). */
static int box_send_boot(struct box *b, const struct local_image *img, const struct local_image *ws)
{
	/* What the box printed stays in its state until tkbox rm (the supervisor copies it when the VM is gone). */
	_cleanup_free_ char *console = NULL, *cert = NULL, *key = NULL;
	struct supmsg m = { .op = SUPMSG_BOOT,
			    .box_id = b->name,
			    .rootfs = img->path,
			    .workspace = ws->path,
			    .state_dir = (char *)g.o.state_dir,
			    .guest = g.guest_bin,
			    .accel = (char *)g.o.accel,
			    .vcpus = b->vcpus,
			    .mem_mib = b->mem_mib,
			    .scratch_mib = b->disk_mib,
			    .env = b->env,
			    .envc = strv_len(b->env),
			    .lifetime_s = b->lifetime_s };
	int r;

	if (g.o.kernel && g.o.modules_dir) {
		m.kernel = (char *)g.o.kernel;
		m.modules = (char *)g.o.modules_dir;
	}
	if (asprintf(&console, "%s/console.log", b->dir) < 0) {
		console = NULL;
		return -ENOMEM;
	}
	m.console_keep = console;
	/* The box's CA: certificate and key to the supervisor (the guest gets the certificate in its boot config). */
	if (b->ca) {
		r = egress_ca_cert_pem(b->ca, &cert);
		if (r >= 0) {
			r = egress_ca_key_pem(b->ca, &key);
		}
		if (r < 0) {
			return r;
		}
		m.ca_cert = cert;
		m.ca_key = key;
		m.upstream_ca = (char *)g.o.egress_ca;
	}
	pthread_mutex_lock(&g.lock);
	r = box_send(b, &m, NULL);
	pthread_mutex_unlock(&g.lock);
	/* The key leaves the daemon's memory: wiped here, the CA itself freed (the supervisor mints the leaves). */
	if (key) {
		explicit_bzero(key, strlen(key));
	}
	egress_ca_free(b->ca);
	b->ca = NULL;
	return r;
}

/*
 * Boot and wait for the supervisor's answer: 0 running; -ECONNRESET when the
 * agent was lost right after boot (err: why); else err says why it failed.
 */
static int box_boot(struct box *b, const struct local_image *img, const struct local_image *ws, char *err,
		    size_t err_size)
{
	struct timespec until;
	int r = box_send_boot(b, img, ws);

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
		(void)snprintf(err, err_size, "%s",
			       b->boot_error ? b->boot_error : "the box's supervisor did not take the boot request");
		r = -EIO;
	} else if (b->cut_reason) {
		/* Its agent was lost right after boot: never reported running (the reader thread records why). */
		(void)snprintf(err, err_size, "%s", b->cut_reason);
		r = -ECONNRESET;
	} else {
		b->state = BOX_RUNNING;
		events_write(b, EV_LIFECYCLE, "box.running",
			     json_pack("{s:s,s:s,s:I}", "accel", b->accel, "isolation", b->isolation, "ready_ms",
				       (json_int_t)b->ready_ms));
		box_save(b);
	}
	pthread_mutex_unlock(&g.lock);
	return r;
}

/* The box's record: must be kept, else the box stops (fail closed). */
static int box_record(struct box *b, char *err, size_t err_size)
{
	json_t *data;

	if (g.o.unrecorded) {
		return 0;
	}
	data = json_pack("{s:s,s:s,s:s,s:s?,s:o,s:{s:I,s:I,s:I,s:I,s:I},s:s,s:s,s:s}", "box", b->name, "image",
			 b->image, "image_digest", b->image_digest, "workspace", b->workspace, "env", strv_json(b->env),
			 "limits", "vcpus", (json_int_t)b->vcpus, "memory_mib", (json_int_t)b->mem_mib, "disk_mib",
			 (json_int_t)b->disk_mib, "lifetime_s", (json_int_t)b->lifetime_s, "exec_timeout_s",
			 (json_int_t)b->exec_timeout_s, "accel", b->accel, "isolation", b->isolation, "network",
			 "none");
	/* The image's User is recorded as named, with what the box did with it (not applied yet). */
	if (data && b->image_user) {
		(void)json_object_set_new(data, "image_user",
					  json_pack("{s:s,s:b}", "user", b->image_user, "applied", 0));
	}
	/* The network door: the expanded allowlist, its presets, --inspect and the daemon's --resolve entries. */
	if (data) {
		(void)json_object_set_new(data, "egress", box_egress_json(b));
	}
	/* Which confinement held, as the kernel shows it (review.verdict is an open object in the event schema). */
	if (data) {
		(void)json_object_set_new(data, "supervisor_isolation", sandbox_observe_json(b->sup_pid));
	}
	/* The tkbox.yaml the settings came from (docs/config.md): its path, digest and the flags that overrode it. */
	if (data && b->config) {
		(void)json_object_set(data, "config", b->config);
	}
	/* Secrets (names, placeholders, hosts, header: never a value), the box's TLS and its clock. */
	pthread_mutex_lock(&g.lock);
	if (data) {
		(void)json_object_set_new(data, "secrets", box_secrets_json(&b->secrets));
		json_t *st = b->selftest_seen && b->selftest ? json_incref(b->selftest) : json_string("timed out");
		(void)json_object_set_new(data, "tls",
					  !b->insp.has_ca
						  ? json_null()
						  : json_pack("{s:s,s:o}", "ca_sha256", b->ca_sha256, "selftest", st));
		if (!b->insp.has_ca) {
			json_decref(st);
		}
		(void)json_object_set_new(data, "clock_offset_ms",
					  b->selftest_seen ? json_integer(b->clock_offset_ms) : json_null());
		if (!b->selftest_seen) {
			(void)json_object_set_new(data, "selftest", json_string("timed out"));
		}
	}
	pthread_mutex_unlock(&g.lock);
	/* The first observation of the box: the queue is empty, so this call records it (or stops the box). */
	return box_observe_keep(b, "tkbox.box", data, err, err_size);
}

/* A box that did not start: its reader thread is done with it, its run closed, its memory freed. */
static void box_create_failed(struct conn *c, struct box *b, int r, const char *err)
{
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
	/* Its reader's egress_close marked the name stopping: forgotten while the name is still this box's. */
	egress_approve_box_forget(b->name);
	box_unlink(b);
	pthread_mutex_unlock(&g.lock);
	respond_error(c->fd, r == -ENOENT || r == -EINVAL ? 400 : 503, "create_failed", NULL, "%s", err);
	/* The directory stays (events.jsonl says why); its memory goes. */
	box_free(b);
}

/*
 * The box's TLS self-test and clock (the supervisor's selftest, after the
 * guest's done request): the record waits for it, at most
 * DAEMON_SELFTEST_TIMEOUT_S; then it says "timed out".
 */
static void box_wait_selftest(struct box *b)
{
	struct timespec until;
	int wait_s;

	if (g.o.unrecorded) {
		return;
	}
	pthread_mutex_lock(&g.lock);
	/* Without a CA the guest runs no client and pings at once: only its clock is waited for. */
	wait_s = b->ca_sha256[0] ? DAEMON_SELFTEST_TIMEOUT_S : DAEMON_SELFTEST_NOCA_TIMEOUT_S;
	(void)clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += wait_s;
	while (!b->selftest_seen && !b->sup_gone && b->state == BOX_RUNNING) {
		if (pthread_cond_timedwait(&b->cond, &g.lock, &until) == ETIMEDOUT) {
			events_write(b, EV_LIFECYCLE, "box.selftest_timed_out",
				     json_pack("{s:I}", "waited_s", (json_int_t)wait_s));
			break;
		}
	}
	pthread_mutex_unlock(&g.lock);
}

/* A box that booted: recorded (or stopped), then shown to the client. */
static void box_created(struct conn *c, struct box *b, int r, const char *why)
{
	char err[1024] = "";
	json_t *reply;

	if (r == -ECONNRESET) {
		log_warn("box %s: agent lost right after boot: %s", b->name, why);
		respond_error(c->fd, 503, "box_lost", NULL,
			      "box %s was stopped right after boot: %s (tkbox export %s shows its record)", b->name,
			      why, b->name);
		return;
	}
	box_wait_selftest(b);
	if (box_record(b, err, sizeof(err)) < 0) {
		respond_error(c->fd, 503, "not_recorded", NULL, "the box could not be recorded, so it was stopped: %s",
			      err);
		return;
	}
	pthread_mutex_lock(&g.lock);
	reply = box_json(b);
	pthread_mutex_unlock(&g.lock);
	log_info("box %s running (%s, isolation %s, ready in %lld ms)", b->name, b->accel, b->isolation,
		 (long long)b->ready_ms);
	respond_json(c->fd, 201, reply);
}

static void api_create(struct conn *c, const char *unused)
{
	struct api_create_req q = { 0 };
	struct local_image img = { 0 }, ws = { 0 };
	struct api_error e;
	char err[1024] = "";
	struct box *b = NULL;
	int r;

	(void)unused;
	if (api_decode_create(buf_ptr(&c->body), buf_len(&c->body), &q, &e) < 0) {
		respond_api_error(c, &e);
		return;
	}
	r = box_new(&q, &b);
	if (r < 0) {
		respond_error(c->fd, 500, "internal", NULL, "%s", r == -EIO ? "no randomness" : "out of memory");
	} else if (box_reserve(c, b) >= 0) {
		egress_approve_box_start(b->name); /* nothing an earlier box of this name left applies to this one */
		r = box_make_dir(b, err, sizeof(err));
		if (r >= 0) {
			r = box_take_secrets(b, &q, err, sizeof(err));
		}
		if (r >= 0) {
			r = box_resolve(b, &q, &img, &ws, err, sizeof(err));
		}
		if (r >= 0) {
			r = box_register_run(b, err, sizeof(err));
		}
		if (r >= 0) {
			r = box_start_supervisor(b, err, sizeof(err));
		}
		if (r >= 0) {
			r = box_boot(b, &img, &ws, err, sizeof(err));
		}
		if (r < 0 && r != -ECONNRESET) {
			box_create_failed(c, b, r, err);
		} else {
			box_created(c, b, r, err);
		}
	}
	local_image_release(&img);
	local_image_release(&ws);
	api_create_req_release(&q);
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

/* What one exec carries through its crossing. */
struct exec_ctx {
	struct conn *c;
	struct box *b;
	const struct api_exec_req *q;
	int64_t exec_no;
	unsigned timeout_s;
	char *run_id, *token, *cwd;
	char *line; /* the decided command line */
	json_t *args, *decided; /* the decided arguments; what exec.decided adds */
	int memfd; /* the up-front stdin, or -1 */
	struct pend *p;
};

/* A slot in the box: it runs, and has room for one more command. */
static int exec_slot(struct exec_ctx *e, const char *name, struct api_error *err)
{
	struct box *b;

	pthread_mutex_lock(&g.lock);
	b = box_find(name);
	if (!b || b->state != BOX_RUNNING) {
		if (b && b->cut_reason) {
			/* Refused before any decision: the host cut the box off from its agent. */
			(void)api_refuse(
				err, 409, "box_not_running",
				"box %s was stopped by the host: %s; nothing ran (tkbox export %s shows its record)",
				name, b->cut_reason, name);
		} else {
			(void)api_refuse(err, b ? 409 : 404, b ? "box_not_running" : "no_such_box",
					 b ? "box %s is not running (tkbox ls)" : "no box named %s (tkbox ls)", name);
		}
		pthread_mutex_unlock(&g.lock);
		return -ESRCH;
	}
	if (b->n_execs >= g.o.max_execs) {
		pthread_mutex_unlock(&g.lock);
		return api_refuse(err, 429, "too_many_execs", "box %s runs %u commands already (the limit)", name,
				  g.o.max_execs);
	}
	b->n_execs++;
	e->b = b;
	e->exec_no = ++b->next_exec;
	/* The box's exec timeout, or less when the request asks for less. */
	e->timeout_s = e->q->timeout_s && e->q->timeout_s < b->exec_timeout_s ? e->q->timeout_s : b->exec_timeout_s;
	e->run_id = b->run_id ? strdup(b->run_id) : NULL;
	e->token = b->run_token ? strdup(b->run_token) : NULL;
	/* No --cwd: the image's WorkingDir, else "/". */
	e->cwd = strdup(e->q->cwd ? e->q->cwd : b->workdir ? b->workdir : "/");
	pthread_mutex_unlock(&g.lock);
	return e->cwd ? 0 : api_refuse(err, 500, "internal", "out of memory");
}

static void exec_ctx_release(struct exec_ctx *e)
{
	if (e->b) {
		pthread_mutex_lock(&g.lock);
		if (e->p) {
			pend_remove(e->b, e->p);
		}
		e->b->n_execs--;
		pthread_cond_broadcast(&e->b->cond);
		pthread_mutex_unlock(&g.lock);
	}
	if (e->memfd >= 0) {
		(void)close(e->memfd);
	}
	if (e->token) {
		explicit_bzero(e->token, strlen(e->token));
	}
	free(e->token);
	free(e->run_id);
	free(e->cwd);
	free(e->line);
	json_decref(e->args);
	json_decref(e->decided);
}

/* The command line the signer decides: the argv, with the per-exec env as a leading `env K=V ...`. */
static int exec_line(struct exec_ctx *e, struct api_error *err)
{
	int r = door_command_line(e->q->argv, e->q->env[0] ? e->q->env : NULL, &e->line);

	if (r == -EPERM) {
		return api_refuse(err, 403, "refused",
				  "the program name would not be the program that runs (it starts with %% or, with "
				  "--env, holds = or starts with -)");
	}
	if (r < 0) {
		return api_refuse(err, 400, "bad_request", "the command line is malformed or too long (%s)",
				  tk_strerror(r));
	}
	return 0;
}

/* The decided arguments: what runs, where, with what, and its stdin when known up front. */
static int exec_args(struct exec_ctx *e, struct api_error *err)
{
	const struct api_exec_req *q = e->q;
	char why[512];
	int r = exec_line(e, err);

	if (r < 0) {
		return r;
	}
	/* No value of a secret in what runs (raw bytes): its placeholder is what the command uses. */
	r = box_secrets_check_exec(&e->b->secrets, q->argv, e->line, e->cwd, q->env[0] ? q->env : NULL,
				   q->stdin_mode == API_STDIN_UPFRONT ? buf_ptr(&q->stdin_data) : NULL,
				   q->stdin_mode == API_STDIN_UPFRONT ? buf_len(&q->stdin_data) : 0, why, sizeof(why));
	if (r == -EACCES) {
		return api_refuse(err, 403, "refused", "%s", why);
	}
	if (r < 0) {
		return api_refuse(err, 500, "internal", "the secrets check: %s", tk_strerror(r));
	}
	e->args = json_pack("{s:s,s:s,s:s}", "command", e->line, "cwd", e->cwd, "stdin", q->stdin_mode_name);
	if (e->args && q->env[0]) {
		json_t *eo = json_object();
		for (char **p = q->env; eo && *p; p++) {
			char *eq = strchr(*p, '=');
			_cleanup_free_ char *k = strndup(*p, (size_t)(eq - *p));
			if (k) {
				(void)json_object_set_new(eo, k, json_string(eq + 1));
			}
		}
		(void)json_object_set_new(e->args, "env", eo);
	}
	r = e->args ? 0 : -ENOMEM;
	if (r >= 0 && q->stdin_mode == API_STDIN_UPFRONT) {
		r = door_stdin_args(buf_ptr(&q->stdin_data), buf_len(&q->stdin_data), e->args);
		if (r >= 0) {
			e->memfd = io_memfd_sealed("tkbox-stdin",
						   &(struct iovec){ .iov_base = (void *)buf_ptr(&q->stdin_data),
								    .iov_len = buf_len(&q->stdin_data) },
						   1);
			r = e->memfd < 0 ? e->memfd : 0;
		}
	}
	/* exec.decided shows the line, where it ran and its stdin (with the digest when known up front). */
	e->decided = r >= 0 ? json_pack("{s:s,s:s,s:s}", "command", e->line, "cwd", e->cwd, "stdin", q->stdin_mode_name)
			    : NULL;
	if (e->decided && json_object_get(e->args, "stdin_sha256") && json_object_get(e->args, "stdin_bytes")) {
		(void)json_object_set(e->decided, "stdin_sha256", json_object_get(e->args, "stdin_sha256"));
		(void)json_object_set(e->decided, "stdin_bytes", json_object_get(e->args, "stdin_bytes"));
	}
	if (r >= 0 && !e->decided) {
		r = -ENOMEM;
	}
	return r < 0 ? api_refuse(err, 500, "internal", "stdin: %s", tk_strerror(r)) : 0;
}

/* Hand the connection to the box's supervisor, which streams to and from the guest. */
static int exec_hand_over(struct exec_ctx *e, struct pend *p)
{
	static const char up[] =
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: " HTTP_EXEC_UPGRADE "\r\nConnection: Upgrade\r\n\r\n";
	struct box *b = e->b;
	struct supmsg m = { .op = SUPMSG_EXEC,
			    .exec = e->exec_no,
			    .argv = e->q->argv,
			    .argc = strv_len(e->q->argv),
			    .env = e->q->env,
			    .envc = strv_len(e->q->env),
			    .cwd = (char *)e->cwd,
			    .stdin_mode = e->q->stdin_mode == API_STDIN_UPFRONT	 ? SUPMSG_STDIN_UPFRONT
					  : e->q->stdin_mode == API_STDIN_STREAM ? SUPMSG_STDIN_STREAM
										 : SUPMSG_STDIN_NONE,
			    .timeout_s = e->timeout_s };
	int fds[2] = { e->c->fd, e->memfd };
	int r;

	pthread_mutex_lock(&g.lock);
	if (b->state != BOX_RUNNING || b->sup_fd < 0) {
		r = -ESHUTDOWN;
	} else {
		/* The monitor's table first: nothing reaches the client for an exec that cannot be sent. */
		r = supmon_check(&b->mon, SUPMSG_TO_SUPERVISOR, &m, NULL);
		if (r >= 0) {
			r = io_write_all(e->c->fd, up, sizeof(up) - 1);
		}
		if (r >= 0) {
			p->next = b->pend;
			b->pend = p;
			r = box_send(b, &m, fds);
			if (r < 0) {
				b->pend = p->next;
			}
		}
	}
	pthread_mutex_unlock(&g.lock);
	return r;
}

/* The exec door's act: the supervisor runs the command; its done is the result. */
static int exec_act(struct crossing *x, struct crossing_result *ret)
{
	struct exec_ctx *e = x->ctx;
	struct pend *p = calloc(1, sizeof(*p));
	int r = p ? 0 : -ENOMEM;

	if (p) {
		p->exec = e->exec_no;
		r = exec_hand_over(e, p);
	}
	if (r < 0) {
		free(p);
		if (r == -ESHUTDOWN) {
			x->refusal.status = 409;
			x->refusal.code = "box_not_running";
			(void)snprintf(x->refusal.message, sizeof(x->refusal.message),
				       "box %s stopped before the command started", e->b->name);
		}
		return r;
	}
	e->p = p;
	/* The supervisor owns the stream now. */
	(void)close(e->c->fd);
	e->c->fd = -1;
	x->client_fd = -1;
	pthread_mutex_lock(&g.lock);
	while (!p->done) {
		pthread_cond_wait(&e->b->cond, &g.lock);
	}
	*ret = (struct crossing_result){ .ok = p->ok,
					 .has_exit = p->has_exit,
					 .exit = p->exit,
					 .error = steal_ptr(p->error),
					 .stdin_sha256 = steal_ptr(p->stdin_sha256),
					 .stdin_bytes = p->stdin_bytes };
	pthread_mutex_unlock(&g.lock);
	return 0;
}

/* Recorded (or its loss counted): now the client may see the exit status. */
static void exec_after(struct crossing *x, const struct crossing_result *res)
{
	struct exec_ctx *e = x->ctx;
	struct box *b = e->b;

	(void)res;
	pthread_mutex_lock(&g.lock);
	if (b->sup_fd >= 0) {
		struct supmsg rel = { .op = SUPMSG_RELEASE, .exec = e->exec_no };
		if (box_send(b, &rel, NULL) < 0) {
			events_write(b, EV_LIFECYCLE, "exec.release_failed",
				     json_pack("{s:I}", "exec", (json_int_t)e->exec_no));
		}
	}
	pthread_mutex_unlock(&g.lock);
}

static const struct crossing_door exec_door = {
	.name = "exec",
	.tool = "Bash",
	.act = exec_act,
	.after = exec_after,
};

/* The crossing engine's view of a box: its events and its record of losses. */
static void host_event(void *box, bool problem, const char *event, json_t *extra)
{
	pthread_mutex_lock(&g.lock);
	events_write(box, problem ? EV_PROBLEM : EV_LIFECYCLE, event, extra);
	pthread_mutex_unlock(&g.lock);
}

static void host_signer_back(void *box)
{
	box_flush_gaps(box);
}

/* A completion the signer did not take is counted, never dropped. */
static void host_complete_lost(void *box, int r)
{
	struct box *b = box;
	uint64_t n;

	pthread_mutex_lock(&g.lock);
	n = ++b->gaps_complete;
	/* Past the deadline the signer would not take the gap now either: it goes at the next chance. */
	if (r == -ETIMEDOUT) {
		b->gaps_unrecorded++;
	}
	pthread_mutex_unlock(&g.lock);
	if (r != -ETIMEDOUT && box_gap(b, "complete", "a command's completion could not be recorded", n) < 0) {
		pthread_mutex_lock(&g.lock);
		b->gaps_unrecorded++;
		pthread_mutex_unlock(&g.lock);
	}
}

static int host_observe_keep(void *box, const char *kind, json_t *data, char *err, size_t err_size)
{
	return box_observe_keep(box, kind, data, err, err_size);
}

static const struct crossing_host_ops box_host = {
	.event = host_event,
	.signer_back = host_signer_back,
	.complete_lost = host_complete_lost,
	.observe_keep = host_observe_keep,
};

/* Run the exec's crossing; the client hears a refusal, or the stream once the supervisor has it. */
static void exec_cross(struct exec_ctx *e)
{
	struct crossing x = {
		.door = &exec_door,
		.host = &box_host,
		.box = e->b,
		.ctx = e,
		.args = e->args,
		.decided_extra = e->decided,
		.seq = e->exec_no,
		.unrecorded = g.o.unrecorded,
		.run_id = e->run_id,
		.run_token = e->token,
		.client_fd = e->c->fd,
		.approval_wait_ms = DAEMON_APPROVAL_WAIT_MS,
	};

	if (crossing_run(&x) < 0 && x.refusal.status && e->c->fd >= 0) {
		respond_error(e->c->fd, x.refusal.status, x.refusal.code, steal_ptr(x.refusal.extra), "%s",
			      x.refusal.message);
	}
	crossing_release(&x);
}

static void api_exec(struct conn *c, const char *name)
{
	struct api_exec_req q = { 0 };
	struct exec_ctx e = { .c = c, .q = &q, .memfd = -1 };
	struct api_error err;

	if (!c->req.upgrade_exec) {
		respond_error(c->fd, 400, "bad_request", NULL, "an exec request asks for Upgrade: %s",
			      HTTP_EXEC_UPGRADE);
		return;
	}
	if (api_decode_exec(buf_ptr(&c->body), buf_len(&c->body), &q, &err) < 0) {
		respond_api_error(c, &err);
		return;
	}
	if (exec_slot(&e, name, &err) < 0 || exec_args(&e, &err) < 0) {
		respond_api_error(c, &err);
	} else {
		exec_cross(&e);
	}
	exec_ctx_release(&e);
	api_exec_req_release(&q);
}

/* ---------------------------------------------------------------- the network door (egress-door.c) */

/* Egress closes: every later connection is refused, no dial goes out, pending approvals end (caller holds g.lock). */
static void egress_close(struct box *b)
{
	if (b->egress_closed) {
		return;
	}
	b->egress_closed = true;
	egress_approve_box_stop(b->name); /* its own lock only: callable with g.lock held */
	if (b->egress_hup_made && b->egress_hup[1] >= 0) {
		/* The crossings' abandon fd hangs up: signer calls and signer approval waits of the box end now. */
		(void)close(b->egress_hup[1]);
		b->egress_hup[1] = -1;
	}
}

/* Send the box's admitted tkbox.egress records, then the summary of what was suppressed once its second ends. */
static void *egress_record_thread(void *arg)
{
	struct box *b = arg;

	pthread_mutex_lock(&g.lock);
	for (;;) {
		_cleanup_free_ char *run_id = NULL, *token = NULL;
		json_t *data = NULL;
		int64_t now = (int64_t)clock_mono_ms(), second = 0;
		uint64_t n;
		char err[512] = "";

		if (json_array_size(b->erecords) > 0) {
			data = json_incref(json_array_get(b->erecords, 0));
			(void)json_array_remove(b->erecords, 0);
		} else if ((n = egress_rate_summary(&b->erate, now, &second)) > 0) {
			data = json_pack("{s:b,s:I,s:s,s:s}", "summary", 1, "suppressed", (json_int_t)n, "decision",
					 "refused", "reason",
					 "more than 20 refusals in one second: the rest are counted here, not listed");
		} else if (b->erate.suppressed > 0) {
			/* Wait for the second to end (CLOCK_MONOTONIC); the summary follows. */
			struct timespec until;
			int64_t wait_ms = 1000 - now % 1000 + 1;
			(void)clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += (time_t)(wait_ms / 1000);
			until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			(void)pthread_cond_timedwait(&b->cond, &g.lock, &until);
			continue;
		} else {
			break;
		}
		run_id = b->run_id ? strdup(b->run_id) : NULL;
		token = b->run_token ? strdup(b->run_token) : NULL;
		pthread_mutex_unlock(&g.lock);
		/* Best effort (Table 8 makes only approvals must-keep): a record the signer does not take is a gap. */
		if (data && observe(run_id, token, "tkbox.egress", data, err, sizeof(err)) < 0) {
			pthread_mutex_lock(&g.lock);
			b->egress_lost_unrecorded++;
			events_write(b, EV_PROBLEM, "signer.observe_failed",
				     json_pack("{s:s,s:s}", "kind", "tkbox.egress", "detail", err));
			pthread_mutex_unlock(&g.lock);
		}
		pthread_mutex_lock(&g.lock);
	}
	b->erecord_sending = false;
	b->n_egress--;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&g.lock);
	return NULL;
}

/* A thread of the door: small stack, detached; b is held (n_egress) until it ends (caller holds g.lock). */
static int egress_thread_start(struct box *b, void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	pthread_t t;
	int r;

	(void)pthread_attr_init(&attr);
	(void)pthread_attr_setstacksize(&attr, EGRESS_THREAD_STACK);
	(void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = -pthread_create(&t, &attr, fn, arg);
	(void)pthread_attr_destroy(&attr);
	if (r >= 0) {
		b->n_egress++;
	}
	return r;
}

/* A tkbox.egress record (takes data): at most EGRESS_RECORD_RATE a second, then one summary (caller holds g.lock). */
static void egress_record_locked(struct box *b, json_t *data)
{
	if (!data || g.o.unrecorded) {
		json_decref(data);
		return;
	}
	if (!b->erecords) {
		b->erecords = json_array();
	}
	/* A record past the rate, or past what waits to be sent, is counted in the summary. */
	if (!b->erecords || json_array_size(b->erecords) >= 4 * EGRESS_RECORD_RATE ||
	    !egress_rate_admit(&b->erate, (int64_t)clock_mono_ms())) {
		json_decref(data);
		if (b->erecords && json_array_size(b->erecords) >= 4 * EGRESS_RECORD_RATE) {
			b->erate.suppressed++;
			b->erate.suppressed_second = (int64_t)clock_mono_ms() / 1000;
		}
	} else if (json_array_append_new(b->erecords, data) < 0) {
		b->egress_lost_unrecorded++;
	}
	if (!b->erecord_sending) {
		b->erecord_sending = egress_thread_start(b, egress_record_thread, b) >= 0;
	}
	pthread_cond_broadcast(&b->cond);
}

static void egress_op_record(void *box, json_t *data)
{
	pthread_mutex_lock(&g.lock);
	egress_record_locked(box, data);
	pthread_mutex_unlock(&g.lock);
}

static void egress_op_event(void *box, const char *event, json_t *extra)
{
	pthread_mutex_lock(&g.lock);
	events_write(box, EV_PROBLEM, event, extra);
	pthread_mutex_unlock(&g.lock);
}

/* egress_refuse (caller holds g.lock): the proxy answers the box with it. */
static void egress_refuse_locked(struct box *b, int64_t conn, int status, const char *rule, const char *message)
{
	struct supmsg m = { .op = SUPMSG_EGRESS_REFUSE,
			    .conn = conn,
			    .status = status,
			    .rule = (char *)rule,
			    .message = (char *)message };

	int r = b->sup_fd >= 0 ? box_send(b, &m, NULL) : 0;

	if (r < 0 && r != -EAGAIN && b->sup_fd >= 0) {
		/* The text could not be encoded (or sent): a fixed ASCII one, so the conn is never left waiting. */
		m.message = "refused by the host (the refusal's text could not be sent; tkbox events shows it)";
		r = box_send(b, &m, NULL);
	}
	if (r < 0) {
		events_write(b, EV_PROBLEM, "egress.refuse_failed", json_pack("{s:I}", "conn", (json_int_t)conn));
	}
}

static void egress_op_refuse(void *box, int64_t conn, int status, const char *rule, const char *message)
{
	pthread_mutex_lock(&g.lock);
	egress_refuse_locked(box, conn, status, rule, message);
	pthread_mutex_unlock(&g.lock);
}

/* egress_dial with the socket the door connected to the address it checked; no dial once a stop began. */
static int egress_op_dial(void *box, int64_t conn, const char *url, bool plain, bool inspect, bool model, int fd,
			  void **ret_wait)
{
	struct box *b = box;
	struct supmsg m = { .op = SUPMSG_EGRESS_DIAL,
			    .conn = conn,
			    .url = (char *)url,
			    .plain = plain,
			    .inspect = inspect,
			    .model_host = model };
	struct egress_wait *w = calloc(1, sizeof(*w));
	int r;

	pthread_mutex_lock(&g.lock);
	if (!w) {
		r = -ENOMEM;
	} else if (b->egress_closed || b->state != BOX_RUNNING || b->sup_fd < 0) {
		r = -ESHUTDOWN;
	} else {
		w->conn = conn;
		w->next = b->ewait;
		b->ewait = w;
		r = box_send(b, &m, &fd);
		if (r < 0) {
			b->ewait = w->next;
		} else {
			*ret_wait = w; /* wait_done takes this entry: the conn number alone may name two */
			w = NULL;
		}
	}
	pthread_mutex_unlock(&g.lock);
	free(w);
	(void)close(fd);
	return r;
}

static int egress_op_wait_done(void *box, void *wait, struct egress_done_info *ret)
{
	struct box *b = box;
	struct egress_wait *w = wait;
	int r;

	pthread_mutex_lock(&g.lock);
	while (w && !w->done) {
		pthread_cond_wait(&b->cond, &g.lock);
	}
	r = !w || w->gone ? -ESHUTDOWN : 0;
	if (w) {
		for (struct egress_wait **q = &b->ewait; *q; q = &(*q)->next) {
			if (*q == w) {
				*q = w->next;
				break;
			}
		}
		if (r >= 0) {
			*ret = w->info;
		} else {
			egress_done_info_release(&w->info);
		}
		free(w);
	}
	pthread_mutex_unlock(&g.lock);
	return r;
}

static bool egress_op_stopping(void *box)
{
	struct box *b = box;
	bool stopping;

	pthread_mutex_lock(&g.lock);
	stopping = b->egress_closed || b->state != BOX_RUNNING;
	pthread_mutex_unlock(&g.lock);
	return stopping;
}

/* The read end of the box's egress pipe: hangs up once egress closes (b is held by the conn's thread). */
static int egress_op_abandon_fd(void *box)
{
	struct box *b = box;
	int fd;

	pthread_mutex_lock(&g.lock);
	fd = b->egress_hup_made ? b->egress_hup[0] : -1;
	pthread_mutex_unlock(&g.lock);
	return fd;
}

static const struct egress_box_ops box_egress_ops = {
	.record = egress_op_record,
	.event = egress_op_event,
	.refuse = egress_op_refuse,
	.dial = egress_op_dial,
	.wait_done = egress_op_wait_done,
	.stopping = egress_op_stopping,
	.abandon_fd = egress_op_abandon_fd,
};

/* What one connection's thread carries. */
struct egress_job {
	struct box *b;
	int64_t conn;
	bool form_connect;
	int64_t port;
	char *host, *run_id, *token;
};

static void egress_job_free(struct egress_job *j)
{
	if (j->token) {
		explicit_bzero(j->token, strlen(j->token));
	}
	free(j->token);
	free(j->run_id);
	free(j->host);
	free(j);
}

/* One connection through the door, on its own thread so nothing else waits for its signer, person or dial. */
static void *egress_conn_thread(void *arg)
{
	struct egress_job *j = arg;
	struct box *b = j->b;
	struct egress_conn c = {
		.cfg = &g.egress,
		.policy = &b->egress,
		.box_name = b->name,
		.ops = &box_egress_ops,
		.host = &box_host,
		.box = b,
		.run_id = j->run_id,
		.run_token = j->token,
		.unrecorded = g.o.unrecorded,
		.conn = j->conn,
		.form_connect = j->form_connect,
		.host_text = j->host,
		.port = j->port,
		.insp = &b->insp,
	};

	(void)egress_door_run(&c);
	egress_job_free(j);
	pthread_mutex_lock(&g.lock);
	b->n_egress--;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&g.lock);
	return NULL;
}

/* egress_open from the proxy: a thread runs the connection's crossing (caller holds g.lock, the reader's). */
static void egress_open(struct box *b, const struct supmsg *m)
{
	struct egress_job *j;

	if (b->egress_closed || b->state != BOX_RUNNING) {
		char msg[SUPMSG_MAX_TEXT];
		(void)snprintf(msg, sizeof(msg), "%.256s:%lld refused: %s", m->host ? m->host : "?", (long long)m->port,
			       b->state == BOX_CREATING
				       ? "the box is still starting. Retry once tkbox ls shows it running"
				       : "the box is stopping. Nothing can connect from it any more");
		egress_refuse_locked(b, m->conn, 503, "box-stopping", msg);
		return;
	}
	if (!b->egress_hup_made) {
		/* Made before any crossing runs: a stop must be able to end each one's signer waits. */
		if (pipe2(b->egress_hup, O_CLOEXEC) < 0) {
			egress_refuse_locked(
				b, m->conn, 503, "internal",
				"the daemon could not start this connection (out of file descriptors); retry");
			return;
		}
		b->egress_hup_made = true;
	}
	j = calloc(1, sizeof(*j));
	if (j) {
		*j = (struct egress_job){ .b = b, .conn = m->conn, .form_connect = m->form_connect, .port = m->port };
		j->host = m->host ? strdup(m->host) : NULL;
		j->run_id = b->run_id ? strdup(b->run_id) : NULL;
		j->token = b->run_token ? strdup(b->run_token) : NULL;
	}
	if (!j || (m->host && !j->host) || egress_thread_start(b, egress_conn_thread, j) < 0) {
		if (j) {
			egress_job_free(j);
		}
		egress_refuse_locked(b, m->conn, 503, "internal",
				     "the daemon could not start this connection (out of memory or threads); retry");
	}
}

/* ---------------------------------------------------------------- secrets, model calls, the self-test */

/* secret_ok to the proxy, unless its conn is gone or the supervisor is (caller holds g.lock). */
static void secret_ok_locked(struct box *b, int64_t conn, bool ok, const char *message)
{
	struct supmsg m = { .op = SUPMSG_SECRET_OK, .conn = conn, .ok = ok, .message = (char *)message };

	if (b->sup_fd < 0 || supmon_check(&b->mon, SUPMSG_TO_SUPERVISOR, &m, NULL) < 0) {
		return; /* nothing waits for it any more: the proxy never forwards a swap without ok */
	}
	if (box_send(b, &m, NULL) < 0) {
		events_write(b, EV_PROBLEM, "secret.ok_failed", json_pack("{s:I}", "conn", (json_int_t)conn));
	}
}

/* A must-keep record of the proxy's (tkbox.secret.use, tkbox.secret.leak, tkbox.model.call), kept off the reader. */
struct keep_job {
	struct box *b;
	enum supmsg_op op;
	int64_t conn;
	char name[SUPMSG_MAX_NAME + 1]; /* secret_use: the secret */
	json_t *data;
};

/*
 * The record is kept (box_observe_keep blocks on the signer, so never on the
 * reader thread); a secret_use is answered only then. A record that cannot
 * be kept stops the box (box_observe_keep records the loss); a lost model
 * call is also a tkbox.gap of kind model.
 */
static void *keep_thread(void *arg)
{
	struct keep_job *j = arg;
	struct box *b = j->b;
	const char *kind = j->op == SUPMSG_SECRET_USE	 ? "tkbox.secret.use"
			   : j->op == SUPMSG_SECRET_LEAK ? "tkbox.secret.leak"
							 : "tkbox.model.call";
	char err[512] = "", msg[SUPMSG_MAX_TEXT];
	int r = box_observe_keep(b, kind, j->data, err, sizeof(err));

	if (r < 0 && j->op == SUPMSG_MODEL_CALL) {
		(void)box_gap(b, "model", "a tkbox.model.call record could not be kept; the box was stopped", 1);
	}
	pthread_mutex_lock(&g.lock);
	if (j->op == SUPMSG_SECRET_USE) {
		(void)snprintf(msg, sizeof(msg),
			       "the use of secret %s could not be recorded, so it was not sent; the box is being "
			       "stopped",
			       j->name);
		secret_ok_locked(b, j->conn, r >= 0, r >= 0 ? NULL : msg);
	}
	b->n_egress--;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&g.lock);
	free(j);
	return NULL;
}

/* What the proxy reports of inspected traffic and the self-test (caller holds g.lock, the reader's). */
static void inspect_op(struct box *b, const struct supmsg *m)
{
	struct keep_job *j;
	char msg[SUPMSG_MAX_TEXT];

	if (m->op == SUPMSG_SELFTEST) {
		json_decref(b->selftest);
		b->selftest = json_pack("{s:o,s:o}", "ran", strv_json(m->ran), "trusted", strv_json(m->trusted));
		b->clock_offset_ms = m->clock_offset_ms;
		b->selftest_seen = true;
		events_write(b, EV_LIFECYCLE, "box.selftest",
			     json_pack("{s:O?,s:I}", "selftest", b->selftest, "clock_offset_ms",
				       (json_int_t)m->clock_offset_ms));
		return;
	}
	if (m->op == SUPMSG_SECRET_LEAK) {
		events_write(b, EV_PROBLEM, "secret.leak",
			     json_pack("{s:s,s:s,s:s}", "name", m->secret, "host", m->host, "reason", m->reason));
	}
	if (m->op == SUPMSG_SECRET_USE && (b->egress_closed || b->state != BOX_RUNNING)) {
		(void)snprintf(msg, sizeof(msg), "the box is stopping; secret %s was not sent", m->secret);
		secret_ok_locked(b, m->conn, false, msg);
		return;
	}
	j = calloc(1, sizeof(*j));
	if (j) {
		j->b = b;
		j->op = m->op;
		j->conn = m->conn;
		(void)snprintf(j->name, sizeof(j->name), "%s", m->secret ? m->secret : "");
		switch (m->op) {
		case SUPMSG_SECRET_USE:
			j->data = json_pack("{s:s,s:s}", "name", m->secret, "host", m->host);
			break;
		case SUPMSG_SECRET_LEAK:
			j->data = json_pack("{s:s,s:s,s:s}", "name", m->secret, "host", m->host, "reason", m->reason);
			break;
		default:
			j->data = json_pack("{s:s,s:s,s:s,s:I,s:I,s:I,s:I}", "host", m->host, "method", m->method,
					    "path", m->path, "status", (json_int_t)m->status, "bytes_up",
					    (json_int_t)m->bytes_up, "bytes_down", (json_int_t)m->bytes_down,
					    "duration_ms", (json_int_t)m->duration_ms);
			/* The issue's "bytes": both directions' body bytes together (each is at most 2^53 - 1). */
			if (j->data) {
				int64_t total = m->bytes_up > INT64_C(9007199254740991) - m->bytes_down
							? INT64_C(9007199254740991)
							: m->bytes_up + m->bytes_down;
				(void)json_object_set_new(j->data, "bytes", json_integer(total));
			}
			if (j->data && m->model) {
				(void)json_object_set_new(j->data, "model", json_string(m->model));
			}
			if (j->data && m->input_tokens >= 0) {
				(void)json_object_set_new(j->data, "input_tokens", json_integer(m->input_tokens));
			}
			if (j->data && m->output_tokens >= 0) {
				(void)json_object_set_new(j->data, "output_tokens", json_integer(m->output_tokens));
			}
			break;
		}
	}
	if (j && j->data && egress_thread_start(b, keep_thread, j) >= 0) {
		return;
	}
	/* Not even queued: fail closed as a lost must-keep record does (the swap is refused, the box stops). */
	events_write(b, EV_PROBLEM, "signer.observe_failed",
		     json_pack("{s:s,s:s}", "kind", supmsg_op_name(m->op), "detail", "no memory or thread to keep it"));
	if (m->op == SUPMSG_SECRET_USE) {
		(void)snprintf(
			msg, sizeof(msg),
			"the use of secret %s could not be recorded, so it was not sent; the box is being stopped",
			m->secret);
		secret_ok_locked(b, m->conn, false, msg);
	}
	if (j) {
		json_decref(j->data);
		free(j);
	}
	box_stop_async(b, "a record of the box could not be kept");
}

/* ---------------------------------------------------------------- the patch door (apply.c) */

/* Ask b's supervisor for the box's patch and wait for it (caller holds g.lock; returns with it held). */
static int box_diff_make(struct box *b, struct box_patch *ret)
{
	static int64_t next_diff;
	struct supmsg m = { .op = SUPMSG_DIFF };
	struct timespec until;
	int r = 0;

	(void)clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += DAEMON_DIFF_TIMEOUT_S;
	while (b->diff_no && !b->sup_gone && r != ETIMEDOUT) { /* one diff at a time: wait for the other */
		r = pthread_cond_timedwait(&b->cond, &g.lock, &until);
	}
	if (b->diff_no || b->state != BOX_RUNNING || b->sup_fd < 0) {
		return b->diff_no && !b->sup_gone ? -ETIMEDOUT : -ESHUTDOWN;
	}
	m.diff = b->diff_no = ++next_diff;
	b->diff_done = false;
	r = box_send(b, &m, NULL);
	while (r >= 0 && !b->diff_done) {
		if (pthread_cond_timedwait(&b->cond, &g.lock, &until) == ETIMEDOUT) {
			b->diff_abandoned = true; /* the supervisor's answer, when it comes, frees the slot */
			return -ETIMEDOUT;
		}
	}
	b->diff_no = 0;
	pthread_cond_broadcast(&b->cond);
	if (r < 0) {
		return r;
	}
	*ret = b->diff;
	b->diff = (struct box_patch){ .fd = -1 };
	return 0;
}

/* Why a diff of b failed, for the user. */
static void diff_why(int r, char *out, size_t n)
{
	(void)snprintf(out, n, "%s",
		       r == -ETIMEDOUT	 ? "the box did not make its patch within DAEMON_DIFF_TIMEOUT_S (300 s)"
		       : r == -ESHUTDOWN ? "the box stopped before its patch was made"
					 : tk_strerror(r));
}

/*
 * tkbox stop: the box's patch, saved before the shutdown (patch.diff,
 * patch.json) and recorded as tkbox.patch (must-keep). Caller holds g.lock;
 * returns with it held.
 */
static void box_save_patch(struct box *b)
{
	struct box_patch p = { .fd = -1 };
	json_t *bj = NULL, *obs = NULL;
	char why[256], err[512];
	int r = box_diff_make(b, &p);

	if (r < 0) {
		diff_why(r, why, sizeof(why));
		p.error = strdup(why);
	}
	b->refs++;
	pthread_mutex_unlock(&g.lock);
	apply_patch_save(b->dir, &p, &bj, &obs);
	if (box_observe_keep(b, "tkbox.patch", obs, err, sizeof(err)) < 0) {
		log_warn("box %s: tkbox.patch could not be kept: %s", b->name, err);
	}
	pthread_mutex_lock(&g.lock);
	b->refs--;
	events_write(b, EV_LIFECYCLE, json_object_get(bj, "error") ? "patch.none" : "patch.saved", json_deep_copy(bj));
	json_decref(b->patch);
	b->patch = bj;
	box_patch_release(&p);
}

/* GET /v1/boxes/{box}/diff: a running box's patch made now, a stopped box's saved at stop. */
static void api_diff(struct conn *c, const char *name)
{
	struct box_patch p = { .fd = -1 };
	char why[256] = "";
	struct box *b;
	bool saved = false;
	int r = -ENOENT;

	pthread_mutex_lock(&g.lock);
	b = box_find(name);
	if (b && b->state == BOX_RUNNING) {
		r = box_diff_make(b, &p);
	} else if (b && (b->state == BOX_CREATING || b->state == BOX_STOPPING)) {
		r = -EBUSY;
	} else if (b) {
		saved = true;
		r = apply_patch_load(b->dir, &p);
	}
	pthread_mutex_unlock(&g.lock);
	if (!b) {
		respond_error(c->fd, 404, "no_such_box", NULL, "no box named %s (tkbox ls)", name);
	} else if (r == -EBUSY) {
		respond_error(c->fd, 409, "box_busy", NULL, "box %s is starting or stopping; retry in a moment", name);
	} else if (r < 0 || p.error) {
		diff_why(r, why, sizeof(why));
		respond_error(c->fd, 409, "no_patch", NULL, "box %s has no patch: %s", name,
			      p.error	     ? p.error
			      : r == -ENOENT ? "none was saved (only tkbox stop saves one)"
					     : why);
	} else {
		apply_diff_respond(c->fd, &p, saved);
	}
	box_patch_release(&p);
}

/* apply's checks, in the order docs/patch.md gives them (caller holds g.lock). True when refused (the client heard why). */
static bool apply_refused(struct conn *c, const struct box *b, const char *name)
{
	if (!b) {
		respond_error(c->fd, 404, "no_such_box", NULL, "no box named %s (tkbox ls)", name);
	} else if (b->state == BOX_RUNNING || b->state == BOX_STOPPING || b->state == BOX_CREATING) {
		respond_error(c->fd, 409, "box_running", NULL, "apply works only on a stopped box: tkbox stop %s",
			      name);
	} else if (b->run_closed) {
		respond_error(c->fd, 409, "run_closed", NULL,
			      "box %s's run is closed (%s): its patch can no longer be applied (apply comes before "
			      "export; tkbox diff %s still shows the patch)",
			      name, b->close_reason ? b->close_reason : "closed", name);
	} else if (!g.o.unrecorded && !b->run_id) {
		respond_error(c->fd, 409, "unrecorded", NULL,
			      "box %s ran unrecorded: a daemon with a signer does not apply its patch (tkbox diff %s "
			      "shows it)",
			      name, name);
	} else if (!g.o.unrecorded && (b->state == BOX_LOST || !b->run_token)) {
		respond_error(c->fd, 409, "run_closed", NULL,
			      "box %s's run %s was left open by a daemon that ended (crash or kill -9); its token went "
			      "with it, so the patch cannot be applied (tkbox diff %s shows it)",
			      name, b->run_id, name);
	} else if (b->applying) {
		respond_error(c->fd, 409, "apply_busy", NULL, "box %s is being applied already; wait for that apply",
			      name);
	} else {
		return false;
	}
	return true;
}

/*
 * apply.c answers its client before api_apply clears b->applying, so a client's next request (apply after a
 * dry run, export after an apply) may arrive first: wait up to DAEMON_APPLY_SETTLE_MS for an ending apply
 * instead of refusing it apply_busy. The caller holds g.lock; b may be NULL.
 */
static void apply_settle_locked(struct box *b)
{
	struct timespec until;

	if (!b || !b->applying) {
		return;
	}
	(void)clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += DAEMON_APPLY_SETTLE_MS / 1000;
	b->refs++; /* held while the lock is released: tkbox rm refuses a box with refs */
	while (b->applying && pthread_cond_timedwait(&b->cond, &g.lock, &until) != ETIMEDOUT) {
	}
	b->refs--;
}

static void apply_close_run(void *box, const char *reason)
{
	box_close_run(box, reason);
}

/* What the apply children get from the daemon's environment: the writer's test hook (docs/development.md). */
static char **apply_child_env(void)
{
	const char *v = getenv("TKBOX_TEST_APPLY_STOP_AFTER");
	char **env = calloc(2, sizeof(char *));

	if (env && v && asprintf(&env[0], "TKBOX_TEST_APPLY_STOP_AFTER=%s", v) < 0) {
		env[0] = NULL;
	}
	return env;
}

/* POST /v1/boxes/{box}/apply: the box held (apply_busy, no rm) while apply.c runs the whole flow. */
static void api_apply(struct conn *c, const char *name)
{
	_cleanup_free_ char *run_id = NULL, *token = NULL, *ws = NULL;
	_cleanup_strv_ char **env = apply_child_env();
	struct api_apply_req q = { 0 };
	struct api_error err;
	struct box *b;

	if (api_decode_apply(buf_ptr(&c->body), buf_len(&c->body), &q, &err) < 0) {
		respond_api_error(c, &err);
		return;
	}
	pthread_mutex_lock(&g.lock);
	apply_settle_locked(box_find(name));
	b = box_find(name); /* found again: the box may have gone while the lock was released */
	if (apply_refused(c, b, name)) {
		pthread_mutex_unlock(&g.lock);
		api_apply_req_release(&q);
		return;
	}
	b->applying = true;
	b->refs++;
	run_id = b->run_id ? strdup(b->run_id) : NULL;
	token = b->run_token ? strdup(b->run_token) : NULL;
	ws = b->workspace ? strdup(b->workspace) : NULL;
	pthread_mutex_unlock(&g.lock);
	apply_handle(c->fd,
		     &(struct apply_box){ .box = b,
					  .host = &box_host,
					  .close_run = apply_close_run,
					  .name = b->name,
					  .dir = b->dir,
					  .workspace = ws,
					  .run_id = run_id,
					  .run_token = token,
					  .unrecorded = g.o.unrecorded,
					  .approval_wait_ms = DAEMON_APPROVAL_WAIT_MS,
					  .child_env = env },
		     &q);
	pthread_mutex_lock(&g.lock);
	b->applying = false;
	b->refs--;
	pthread_cond_broadcast(&b->cond);
	box_save(b);
	pthread_mutex_unlock(&g.lock);
	if (token) {
		explicit_bzero(token, strlen(token));
	}
	api_apply_req_release(&q);
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
	if (b->state == BOX_RUNNING) {
		box_save_patch(b); /* before the shutdown: the guest makes it */
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
	if (b->refs > 0 || (b->sup_pid > 0 && !b->reader_done) || b->n_egress > 0) {
		pthread_mutex_unlock(&g.lock);
		respond_error(c->fd, 409, "box_busy", NULL,
			      "box %s is being exported or closed, or its last connections are being recorded; retry "
			      "in a moment",
			      name);
		return;
	}
	b->removed = true; /* no new request finds it */
	pthread_mutex_unlock(&g.lock);
	box_close_run(b, "removed");
	pthread_mutex_lock(&g.lock);
	box_remove_files(b);
	box_unlink(b);
	pthread_mutex_unlock(&g.lock);
	egress_approve_box_forget(name);
	box_free(b);
	respond_json(c->fd, 200, json_pack("{s:s,s:b}", "name", name, "removed", 1));
}

/* The box's run, held for an export (b->refs); the client hears why not. */
static struct box *export_claim(struct conn *c, const char *name, char **ret_run_id)
{
	struct box *b;
	bool lost;

	pthread_mutex_lock(&g.lock);
	apply_settle_locked(box_find(name));
	b = box_find(name); /* found again: the box may have gone while the lock was released */
	if (!b) {
		pthread_mutex_unlock(&g.lock);
		respond_error(c->fd, 404, "no_such_box", NULL, "no box named %s (tkbox ls)", name);
		return NULL;
	}
	if (b->state == BOX_RUNNING || b->state == BOX_STOPPING || b->state == BOX_CREATING) {
		pthread_mutex_unlock(&g.lock);
		respond_error(c->fd, 409, "box_running", NULL, "box %s is running: tkbox stop %s first", name, name);
		return NULL;
	}
	if (!b->run_id) {
		pthread_mutex_unlock(&g.lock);
		respond_error(c->fd, 409, "unrecorded", NULL,
			      "box %s ran unrecorded (tkbox daemon --unrecorded): nothing to export", name);
		return NULL;
	}
	if (b->applying) {
		pthread_mutex_unlock(&g.lock);
		respond_error(c->fd, 409, "apply_busy", NULL, "box %s is being applied; export it once the apply ends",
			      name);
		return NULL;
	}
	lost = b->state == BOX_LOST && !b->run_closed;
	if (lost) {
		pthread_mutex_unlock(&g.lock);
		respond_error(
			c->fd, 409, "run_open", NULL,
			"box %s was left running by a daemon that ended (crash or kill -9); its run %s is still open, "
			"so tkbox does not export it (tkbox-signer export --run %s writes what was recorded)",
			name, b->run_id, b->run_id);
		return NULL;
	}
	*ret_run_id = strdup(b->run_id);
	b->refs++;
	pthread_mutex_unlock(&g.lock);
	return b;
}

/* The bundle the signer wrote into memfd, to the client, with its trust file and digest in the headers. */
static void export_send(struct conn *c, struct box *b, const char *run_id, int memfd, const json_t *reply)
{
	_cleanup_free_ char *trust_b64 = NULL;
	const char *trust = NULL, *sha = NULL;
	char headers[4096];
	struct stat st;
	struct buf tb;
	void *map;

	if (json_get_string(reply, "trust", &trust) < 0 || json_get_string(reply, "sha256", &sha) < 0 ||
	    fstat(memfd, &st) < 0 || st.st_size <= 0) {
		respond_error(c->fd, 503, "export_failed", NULL, "the signer's export reply is incomplete");
		return;
	}
	if (buf_init(&tb, 8192, 0) >= 0) {
		if (b64_encode(trust, strlen(trust), B64_URL, &tb) >= 0) {
			(void)buf_dup_cstring(&tb, &trust_b64);
		}
		buf_release(&tb);
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, memfd, 0);
	if (!trust_b64 || map == MAP_FAILED) {
		if (map != MAP_FAILED) {
			(void)munmap(map, (size_t)st.st_size);
		}
		respond_error(c->fd, 500, "internal", NULL, "out of memory");
		return;
	}
	(void)snprintf(headers, sizeof(headers), "Tkbox-Trust: %s\r\nTkbox-Bundle-Sha256: %s\r\nTkbox-Run: %s\r\n",
		       trust_b64, sha, run_id);
	respond_raw(c->fd, 200, "application/zip", map, (size_t)st.st_size, headers);
	(void)munmap(map, (size_t)st.st_size);
	pthread_mutex_lock(&g.lock);
	events_write(b, EV_LIFECYCLE, "run.exported",
		     json_pack("{s:s,s:s,s:I}", "run_id", run_id, "sha256", sha, "bytes", (json_int_t)st.st_size));
	pthread_mutex_unlock(&g.lock);
}

static void api_export(struct conn *c, const char *name)
{
	_cleanup_free_ char *run_id = NULL;
	_cleanup_json_ json_t *reply = NULL;
	char err[512] = "";
	struct box *b = export_claim(c, name, &run_id);
	int memfd = -1, r;

	if (!b) {
		return;
	}
	/* Export ends the run: its close reason says so. */
	box_close_run(b, "exported");
	memfd = memfd_create("tkbox-bundle", MFD_CLOEXEC);
	/* The signer writes the whole bundle: its own deadline. */
	r = memfd < 0 || !run_id
		    ? -ENOMEM
		    : signer_link_call(json_pack("{s:s,s:s}", "method", "export", "run_id", run_id), memfd, -1,
				       (int64_t)clock_mono_ms() + (int64_t)DAEMON_EXPORT_TIMEOUT_S * 1000, &reply);
	if (r == -ETIMEDOUT) {
		(void)snprintf(err, sizeof(err), "the signer did not finish the export within %d s",
			       DAEMON_EXPORT_TIMEOUT_S);
	} else if (r < 0) {
		signer_link_error(err, sizeof(err), "export", r, reply);
	}
	if (r < 0) {
		respond_error(c->fd, 503, "export_failed", NULL, "the signer did not export run %s: %s",
			      run_id ? run_id : name, err);
	} else {
		export_send(c, b, run_id, memfd, reply);
	}
	pthread_mutex_lock(&g.lock);
	b->refs--;
	pthread_mutex_unlock(&g.lock);
	if (memfd >= 0) {
		(void)close(memfd);
	}
}

static void api_list(struct conn *c, const char *unused)
{
	json_t *a = json_array();

	(void)unused;

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

	r = buf_init(&in, HTTP_MAX_HEAD + HTTP_MAX_BODY, BUF_SECRET); /* a create body may hold secrets */
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
		r = buf_init(&c->body, HTTP_MAX_BODY, BUF_SECRET);
		if (r >= 0) {
			r = buf_put(&c->body, buf_ptr(&in) + head, buf_len(&in) - head);
		}
	}
	buf_release(&in);
	return r;
}

static void api_info(struct conn *c, const char *unused)
{
	(void)unused;
	pthread_mutex_lock(&g.lock);
	respond_json(c->fd, 200,
		     json_pack("{s:s,s:s,s:b,s:I,s:I}", "version", TKBOX_VERSION, "signer", g.signer_socket,
			       "unrecorded", g.o.unrecorded, "boxes", (json_int_t)g.n_boxes, "max_boxes",
			       (json_int_t)g.o.max_boxes));
	pthread_mutex_unlock(&g.lock);
}

/* ---------------------------------------------------------------- box approvals (the network door) */

/* GET /v1/approvals: the pending ones, every box's. */
static void api_approvals(struct conn *c, const char *unused)
{
	json_t *v = egress_approve_list();

	(void)unused;
	if (!v) {
		respond_error(c->fd, 500, "internal", NULL, "out of memory");
		return;
	}
	respond_json(c->fd, 200, v);
}

/* POST /v1/approvals/{id}/approve|reject, by a person on the host: the API caller's uid is the approver. */
static void approval_answer(struct conn *c, const char *id, bool approve)
{
	char approver[32], state[32];
	int r;

	(void)snprintf(approver, sizeof(approver), "uid:%u", (unsigned)c->uid);
	r = egress_approve_answer(id, approve, approver, state, sizeof(state));
	if (r == -ENOENT) {
		respond_error(c->fd, 404, "no_such_approval", NULL,
			      "no approval %s (tkbox approvals lists the pending ones; an answered one is forgotten "
			      "after 10 minutes)",
			      id);
	} else if (r == -EALREADY) {
		respond_error(c->fd, 409, "already_answered", json_pack("{s:s}", "state", state),
			      "approval %s is already %s; when the agent retries, a new one appears in tkbox approvals",
			      id, state);
	} else if (r == -EIO) {
		respond_error(c->fd, 503, "not_recorded", json_pack("{s:s}", "state", state),
			      "approval %s could not be recorded (tkbox.approval), so nothing passes; the box was "
			      "stopped (tkbox ls shows why)",
			      id);
	} else if (r < 0) {
		respond_error(c->fd, 500, "internal", NULL, "approval %s: %s", id, tk_strerror(r));
	} else {
		respond_json(c->fd, 200, json_pack("{s:s,s:s}", "id", id, "state", state));
	}
}

static void api_approve(struct conn *c, const char *id)
{
	approval_answer(c, id, true);
}

static void api_reject(struct conn *c, const char *id)
{
	approval_answer(c, id, false);
}

/* The handler of each route of api_routes[] (api-proto.c); each gets the {box} or {id} segment, or "". */
static void (*const api_handlers[API_OP_COUNT])(struct conn *c, const char *box) = {
	[API_OP_INFO] = api_info,	[API_OP_LIST] = api_list,     [API_OP_CREATE] = api_create,
	[API_OP_SHOW] = api_show,	[API_OP_RM] = api_rm,	      [API_OP_EXEC] = api_exec,
	[API_OP_STOP] = api_stop,	[API_OP_EXPORT] = api_export, [API_OP_APPROVALS] = api_approvals,
	[API_OP_APPROVE] = api_approve, [API_OP_REJECT] = api_reject, [API_OP_DIFF] = api_diff,
	[API_OP_APPLY] = api_apply,
};

static void route(struct conn *c)
{
	struct api_match m;
	struct api_error e;

	if (api_route(c->req.method, c->req.target, &m, &e) < 0) {
		respond_api_error(c, &e);
		return;
	}
	/* create, exec and apply decode their own bodies; the others take none. */
	if (m.op != API_OP_CREATE && m.op != API_OP_EXEC && m.op != API_OP_APPLY &&
	    api_decode_empty(buf_ptr(&c->body), buf_len(&c->body), &e) < 0) {
		respond_api_error(c, &e);
		return;
	}
	api_handlers[m.op](c, m.id[0] ? m.id : m.box);
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

/* daemon_default_state_dir() and daemon_socket_path() are in state-path.c (the lean CLI links them). */

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
		while ((b->n_execs > 0 || b->n_egress > 0) &&
		       pthread_cond_timedwait(&b->cond, &g.lock, &until) != ETIMEDOUT) {
		}
	}
	pthread_mutex_unlock(&g.lock);
	for (struct box *b = g.boxes; b; b = b->next) {
		if (!b->removed && b->state != BOX_LOST) {
			box_close_run(b, "daemon shutdown");
		}
	}
}

/* The options with their defaults, the signer's socket and the guest agent. */
static int daemon_configure(const struct daemon_opts *o)
{
	g.o = *o;
	if (o->egress) {
		g.egress = *o->egress;
	}
	g.o.egress = NULL;
	if (!g.o.max_boxes) {
		g.o.max_boxes = DAEMON_DEFAULT_MAX_BOXES;
	}
	if (!g.o.max_execs) {
		g.o.max_execs = DAEMON_DEFAULT_MAX_EXECS;
	}
	if (!g.o.observe_queue) {
		g.o.observe_queue = OBSQ_MAX;
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
		return -ENOMEM;
	}
	if (o->guest_bin) {
		g.guest_bin = realpath(o->guest_bin, NULL);
	} else if (daemon_find_guest(&g.guest_bin) < 0) {
		g.guest_bin = NULL;
	}
	if (!g.guest_bin) {
		fprintf(stderr, "tkbox daemon: the guest agent tkbox-guest-linux-amd64 was not found next to tkbox; "
				"pass --guest FILE\n");
		return -ENOENT;
	}
	return 0;
}

/* The state directory (0700, ours) and its boxes/. */
static int daemon_state_dir(void)
{
	_cleanup_free_ char *boxes = NULL;
	int r = mkdir_parents(g.o.state_dir);

	if (r >= 0) {
		r = mkdir_private(g.o.state_dir, false);
	}
	if (r < 0 || asprintf(&boxes, "%s/boxes", g.o.state_dir) < 0) {
		fprintf(stderr,
			"tkbox daemon: state directory %s: %s (it must be a directory of uid %u that no one else may "
			"write; tkbox creates it with mode 0700 when it does not exist)\n",
			g.o.state_dir, tk_strerror(r < 0 ? r : -ENOMEM), (unsigned)geteuid());
		return r < 0 ? r : -ENOMEM;
	}
	(void)mkdir(boxes, 0700);
	return 0;
}

/* Fail closed: no signer, no daemon (unless told to record nothing). */
static int daemon_check_signer(void)
{
	_cleanup_json_ json_t *st = NULL;
	char err[512] = "";
	int r;

	if (g.o.unrecorded) {
		fprintf(stderr,
			"tkbox daemon: WARNING: --unrecorded: NOTHING THESE BOXES DO IS DECIDED OR RECORDED.\n"
			"tkbox daemon: WARNING: no signer is asked about any command; no bundle can be exported.\n");
		return 0;
	}
	r = signer_link_once(json_pack("{s:s}", "method", "status"), &st, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr,
			"tkbox daemon: no signer answers at %s (%s): start one (tkbox-signer up --wait), pass "
			"--signer SOCK, or run with --unrecorded to record nothing\n",
			g.signer_socket, err);
	}
	return r;
}

/* Signals go to the main loop only (a signalfd); threads and supervisors never see them. */
static int daemon_signals(void)
{
	sigset_t mask;

	(void)sigemptyset(&mask);
	(void)sigaddset(&mask, SIGTERM);
	(void)sigaddset(&mask, SIGINT);
	(void)sigaddset(&mask, SIGHUP);
	(void)pthread_sigmask(SIG_BLOCK, &mask, NULL);
	(void)signal(SIGPIPE, SIG_IGN);
	return signalfd(-1, &mask, SFD_CLOEXEC);
}

/* Accept API connections until SIGTERM or SIGINT. */
static void daemon_serve(int lfd, int sfd)
{
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
}

int daemon_run(const struct daemon_opts *o)
{
	int lfd = -1, sfd = -1;

	if (daemon_configure(o) < 0 || daemon_state_dir() < 0 || daemon_check_signer() < 0 ||
	    daemon_socket_path(g.o.state_dir, &g.sock_path) < 0) {
		return 1;
	}
	sfd = daemon_signals();
	if (sfd < 0 || listen_api(&lfd) < 0) {
		return 1;
	}
	pthread_mutex_lock(&g.lock);
	load_boxes();
	pthread_mutex_unlock(&g.lock);
	log_info("listening on %s (signer %s%s, state %s, accel %s, at most %u boxes)", g.sock_path, g.signer_socket,
		 g.o.unrecorded ? ", UNRECORDED" : "", g.o.state_dir, g.o.accel, g.o.max_boxes);
	if (g.egress.block.n || g.egress.n_resolve || g.egress.flags) {
		log_info("network door: %zu --egress-block entries, %zu --resolve entries%s", g.egress.block.n,
			 g.egress.n_resolve, g.egress.flags & EGRESS_ALLOW_PRIVATE ? ", --egress-allow-private" : "");
	}
	daemon_serve(lfd, sfd);
	/* New connections are refused from here on. */
	(void)close(lfd);
	(void)unlink(g.sock_path);
	shutdown_all();
	log_info("stopped");
	(void)close(sfd);
	return 0;
}
