/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "log.h"
#include "policy.h"
#include "rpc.h"
#include "server.h"
#include "service.h"
#include "store.h"

#include "banned.h"
#include "io.h"

#define TAG_LISTEN ((uint64_t)-1)
#define TAG_EVENT ((uint64_t)-2)
#define TAG_SIGNAL ((uint64_t)-3)

/* ---- the commit thread and its signing helpers ---- */

#define SIGN_MAX_HELPERS 7

/*
 * Signing is the costly step of a record (an Ed25519 signature), and it does
 * not need to be sequential: the chain links hashes, which the event loop
 * computes. So the commit thread signs each batch with helper threads (one
 * per extra CPU) before writing it.
 */
struct signpool {
	pthread_mutex_t mu;
	pthread_cond_t cv_work;
	pthread_cond_t cv_done;
	const struct signer_keys *keys;
	struct store_item *items;
	size_t n;
	size_t next;
	size_t done;
	int err;
	unsigned gen;
	bool stop;
	pthread_t th[SIGN_MAX_HELPERS];
	size_t nthreads;
};

static void signpool_work(struct signpool *p)
{
	size_t i, finished = 0;

	while ((i = __atomic_fetch_add(&p->next, 1, __ATOMIC_ACQ_REL)) < p->n) {
		int r = service_sign_item(p->keys, &p->items[i]);
		if (r < 0) {
			__atomic_store_n(&p->err, r, __ATOMIC_RELEASE);
		}
		finished++;
	}
	pthread_mutex_lock(&p->mu);
	p->done += finished;
	if (p->done >= p->n) {
		pthread_cond_broadcast(&p->cv_done);
	}
	pthread_mutex_unlock(&p->mu);
}

static void *signpool_main(void *arg)
{
	struct signpool *p = arg;
	unsigned seen = 0;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (p->gen == seen && !p->stop) {
			pthread_cond_wait(&p->cv_work, &p->mu);
		}
		if (p->stop) {
			break;
		}
		seen = p->gen;
		pthread_mutex_unlock(&p->mu);
		signpool_work(p);
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static int signpool_sign(struct signpool *p, struct store_item *items, size_t n)
{
	pthread_mutex_lock(&p->mu);
	p->items = items;
	p->n = n;
	p->next = 0;
	p->done = 0;
	p->err = 0;
	p->gen++;
	pthread_cond_broadcast(&p->cv_work);
	pthread_mutex_unlock(&p->mu);
	signpool_work(p);
	pthread_mutex_lock(&p->mu);
	while (p->done < p->n) {
		pthread_cond_wait(&p->cv_done, &p->mu);
	}
	p->items = NULL;
	p->n = 0;
	pthread_mutex_unlock(&p->mu);
	return __atomic_load_n(&p->err, __ATOMIC_ACQUIRE);
}

static void signpool_start(struct signpool *p, const struct signer_keys *keys)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t want = cpus > 1 ? (size_t)MIN(cpus - 1, SIGN_MAX_HELPERS) : 0;

	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv_work, NULL);
	pthread_cond_init(&p->cv_done, NULL);
	p->keys = keys;
	for (size_t i = 0; i < want; i++) {
		if (pthread_create(&p->th[p->nthreads], NULL, signpool_main, p) != 0) {
			break;
		}
		p->nthreads++;
	}
}

static void signpool_stop(struct signpool *p)
{
	if (!p->keys) {
		return; /* never started */
	}
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->cv_work);
	pthread_mutex_unlock(&p->mu);
	for (size_t i = 0; i < p->nthreads; i++) {
		pthread_join(p->th[i], NULL);
	}
	p->nthreads = 0;
}

struct committer {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct store_item *incoming;
	size_t n;
	size_t cap;
	bool busy;
	bool stop;
	bool broken;
	char err[256];
	uint64_t durable;
	uint64_t batches;
	uint64_t committed_records;
	int efd;
	struct store *writer;
	struct signpool pool;
};

static void items_free(struct store_item *items, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		store_item_release(&items[i]);
	}
	free(items);
}

static void *committer_main(void *arg)
{
	struct committer *c = arg;

	for (;;) {
		struct store_item *items;
		uint64_t top = 0;
		bool has_records = false, broken;
		char err[256] = "";
		size_t n;
		int r = 0;

		pthread_mutex_lock(&c->mu);
		while (c->n == 0 && !c->stop) {
			pthread_cond_wait(&c->cv, &c->mu);
		}
		if (c->n == 0 && c->stop) {
			pthread_mutex_unlock(&c->mu);
			break;
		}
		items = c->incoming;
		n = c->n;
		c->incoming = NULL;
		c->n = c->cap = 0;
		c->busy = true;
		broken = c->broken;
		pthread_mutex_unlock(&c->mu);

		/* While broken, records were built on top of lost ones: drop them, never commit them. */
		if (!broken) {
			for (size_t i = 0; i < n; i++) {
				if (items[i].kind == STORE_ITEM_RECORD) {
					has_records = true;
					top = MAX(top, items[i].seq + 1);
				}
			}
			r = signpool_sign(&c->pool, items, n);
			if (r < 0) {
				snprintf(err, sizeof(err), "signing failed: %s", strerror(-r));
			} else {
				r = store_commit(c->writer, items, n, err, sizeof(err));
			}
		}
		items_free(items, n);

		pthread_mutex_lock(&c->mu);
		c->busy = false;
		if (!broken && r < 0) {
			c->broken = true;
			snprintf(c->err, sizeof(c->err), "%s", err);
		} else if (!broken) {
			c->batches++;
			if (has_records) {
				c->committed_records += top > c->durable ? top - c->durable : 0;
				c->durable = MAX(c->durable, top);
			}
		}
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
		{
			uint64_t one = 1;
			(void)!write(c->efd, &one, sizeof(one));
		}
	}
	return NULL;
}

static int committer_push(struct committer *c, struct store_item *items, size_t n)
{
	if (n == 0) {
		free(items);
		return 0;
	}
	pthread_mutex_lock(&c->mu);
	if (c->n + n > c->cap) {
		size_t ncap = MAX(c->cap * 2, c->n + n + 256);
		struct store_item *ni = realloc(c->incoming, ncap * sizeof(*ni));
		if (!ni) {
			pthread_mutex_unlock(&c->mu);
			items_free(items, n);
			return -ENOMEM;
		}
		c->incoming = ni;
		c->cap = ncap;
	}
	memcpy(c->incoming + c->n, items, n * sizeof(*items));
	c->n += n;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	free(items);
	return 0;
}

/* ---- connections ---- */

struct out_entry {
	json_t *body;
	uint64_t need;
	bool close_after;
	char *wait_approval;
	int64_t deadline_ms;
};

struct conn {
	int fd;
	struct caller who;
	bool authorized;
	struct rpc_framer fr;
	struct out_entry *q;
	size_t qn;
	size_t qcap;
	struct buf wbuf;
	int64_t last_ms;
	int passed_fd;
	bool closing; /* close once everything queued has been written */
	uint32_t mask; /* epoll events registered */
	bool dead;
};

struct server {
	const struct signer_config *cfg;
	struct signer_keys keys;
	struct policy *policy;
	struct store *reader;
	struct service *svc;
	struct committer com;
	pthread_t thread;
	bool thread_started;
	int epfd;
	int lfd;
	int sfd;
	struct conn *conns[SERVER_MAX_CONNS];
	bool stopping;
};

static void out_entry_release(struct out_entry *e)
{
	if (e->body) {
		json_decref(e->body);
	}
	free(e->wait_approval);
	*e = (struct out_entry){ 0 };
}

static void conn_free(struct server *S, size_t idx)
{
	struct conn *c = S->conns[idx];

	if (!c) {
		return;
	}
	(void)epoll_ctl(S->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	if (c->passed_fd >= 0) {
		close(c->passed_fd);
	}
	for (size_t i = 0; i < c->qn; i++) {
		out_entry_release(&c->q[i]);
	}
	free(c->q);
	rpc_framer_release(&c->fr);
	buf_release(&c->wbuf);
	free(c);
	S->conns[idx] = NULL;
}

static int conn_queue(struct conn *c, struct service_reply *rep)
{
	if (c->qn == c->qcap) {
		size_t ncap = c->qcap ? c->qcap * 2 : 16;
		struct out_entry *nq;
		if (ncap > SERVER_MAX_QUEUED) {
			return -E2BIG;
		}
		nq = realloc(c->q, ncap * sizeof(*nq));
		if (!nq) {
			return -ENOMEM;
		}
		c->q = nq;
		c->qcap = ncap;
	}
	c->q[c->qn++] = (struct out_entry){ .body = rep->body,
					    .need = rep->need,
					    .close_after = rep->close_after,
					    .wait_approval = rep->wait_approval,
					    .deadline_ms = rep->wait_deadline_ms };
	rep->body = NULL;
	rep->wait_approval = NULL;
	return 0;
}

static void queue_error(struct conn *c, enum rpc_err e, const char *msg, bool close_after)
{
	struct service_reply rep = { .body = rpc_error_new(e, msg), .close_after = close_after };
	if (conn_queue(c, &rep) < 0) {
		service_reply_release(&rep);
		c->dead = true;
	}
}

static void accept_conns(struct server *S)
{
	for (;;) {
		struct ucred cred;
		socklen_t len = sizeof(cred);
		struct conn *c;
		size_t slot;
		int fd;

		fd = accept4(S->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			return;
		}
		for (slot = 0; slot < SERVER_MAX_CONNS && S->conns[slot]; slot++) {
		}
		if (slot == SERVER_MAX_CONNS || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
			close(fd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (!c || rpc_framer_init(&c->fr) < 0 || buf_init(&c->wbuf, SERVER_MAX_OUTPUT, 0) < 0) {
			if (c) {
				rpc_framer_release(&c->fr);
				free(c);
			}
			close(fd);
			continue;
		}
		c->fd = fd;
		c->passed_fd = -1;
		c->who = (struct caller){ .uid = cred.uid, .gid = cred.gid, .pid = cred.pid };
		c->authorized = signer_config_authorized(S->cfg, cred.uid);
		c->last_ms = service_now_ms();
		c->mask = EPOLLIN;
		S->conns[slot] = c;
		if (epoll_ctl(S->epfd, EPOLL_CTL_ADD, fd,
			      &(struct epoll_event){ .events = EPOLLIN, .data.u64 = slot }) < 0) {
			conn_free(S, slot);
			continue;
		}
	}
}

static void handle_line(struct server *S, struct conn *c, const uint8_t *p, size_t n)
{
	struct rpc_request req = { 0 };
	struct service_reply rep = { 0 };
	enum rpc_err e;
	char msg[256];
	int fd = -1;

	if (rpc_request_parse(p, n, &req, &e, msg, sizeof(msg)) < 0) {
		queue_error(c, e, msg, false);
		return;
	}
	if (req.method == RPC_EXPORT) {
		fd = c->passed_fd;
	}
	service_handle(S->svc, &c->who, &req, fd, &rep);
	if (rep.set_role) {
		c->who.role = rep.role;
		c->who.role_declared = true;
	}
	if (fd >= 0) {
		close(fd);
		c->passed_fd = -1;
	}
	rpc_request_release(&req);
	if (conn_queue(c, &rep) < 0) {
		service_reply_release(&rep);
		queue_error(c, RPC_ERR_QUOTA_EXCEEDED, "too many replies queued", true);
		c->closing = true;
	}
}

static void read_conn(struct server *S, struct conn *c)
{
	uint8_t chunk[65536];

	while (!c->closing && !c->dead) {
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(int))];
		} cm;
		struct iovec iov = { .iov_base = chunk, .iov_len = MIN(sizeof(chunk), buf_avail(&c->fr.in)) };
		struct msghdr mh = {
			.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b, .msg_controllen = sizeof(cm.b)
		};
		const uint8_t *line;
		size_t line_len;
		ssize_t k;
		int r;

		if (iov.iov_len == 0) {
			queue_error(c, RPC_ERR_QUOTA_EXCEEDED, "frame larger than 1 MiB", true);
			c->closing = true;
			return;
		}
		k = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (k < 0) {
			if (errno != EAGAIN && errno != EINTR) {
				c->dead = true;
			}
			return;
		}
		for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h)) {
			if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
				size_t nfd = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
				for (size_t i = 0; i < nfd; i++) {
					int fd;
					memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
					/* Keep only the newest fd: it is the export target of the next export request. */
					if (c->passed_fd >= 0) {
						close(c->passed_fd);
					}
					c->passed_fd = fd;
				}
			}
		}
		if (k == 0) {
			c->closing = true;
			return;
		}
		c->last_ms = service_now_ms();
		if (!c->authorized) {
			/*
			 * Identity comes from the kernel (SO_PEERCRED): an unlisted uid's
			 * first bytes are answered with unauthenticated, unparsed, and the
			 * connection is closed.
			 */
			queue_error(c, RPC_ERR_UNAUTHENTICATED, "this uid is not in the signer's authorize list", true);
			c->closing = true;
			return;
		}
		if (rpc_framer_feed(&c->fr, chunk, (size_t)k) < 0) {
			queue_error(c, RPC_ERR_QUOTA_EXCEEDED, "frame larger than 1 MiB", true);
			c->closing = true;
			return;
		}
		while ((r = rpc_framer_next(&c->fr, &line, &line_len)) == 1) {
			handle_line(S, c, line, line_len);
			rpc_framer_consume(&c->fr, line_len);
			if (c->closing || c->dead) {
				return;
			}
		}
		if (r < 0) {
			queue_error(c, RPC_ERR_QUOTA_EXCEEDED, "frame larger than 1 MiB", true);
			c->closing = true;
			return;
		}
	}
}

/* Move ready replies (in order) into the write buffer and write what the socket takes. */
static void flush_conn(struct server *S, struct conn *c, uint64_t durable)
{
	size_t done = 0;
	bool close_now = false;

	while (done < c->qn) {
		struct out_entry *e = &c->q[done];
		char *s;
		int r;

		if (!e->body || e->need > durable) {
			break;
		}
		s = json_dumps(e->body, JSON_COMPACT | JSON_ENSURE_ASCII);
		if (!s) {
			c->dead = true;
			return;
		}
		r = buf_put(&c->wbuf, s, strlen(s));
		if (r >= 0) {
			r = buf_put_u8(&c->wbuf, '\n');
		}
		free(s);
		if (r < 0) {
			c->dead = true;
			return;
		}
		close_now = close_now || e->close_after;
		out_entry_release(e);
		done++;
		if (close_now) {
			break;
		}
	}
	if (done > 0) {
		memmove(c->q, c->q + done, (c->qn - done) * sizeof(*c->q));
		c->qn -= done;
	}
	if (close_now) {
		c->closing = true;
		for (size_t i = 0; i < c->qn; i++) {
			out_entry_release(&c->q[i]);
		}
		c->qn = 0;
	}
	while (buf_len(&c->wbuf) > 0) {
		ssize_t k = send(c->fd, buf_ptr(&c->wbuf), buf_len(&c->wbuf), MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k < 0) {
			if (errno == EAGAIN) {
				break;
			}
			c->dead = true;
			return;
		}
		(void)buf_consume(&c->wbuf, (size_t)k);
	}
	if (buf_len(&c->wbuf) == 0) {
		buf_reset(&c->wbuf);
	}
	{
		/* A closing connection is not read any more: drop EPOLLIN so a hung-up peer does not spin the loop. */
		uint32_t mask = (c->closing ? 0 : EPOLLIN) | (buf_len(&c->wbuf) > 0 ? EPOLLOUT : 0);
		if (mask != c->mask) {
			size_t slot;
			for (slot = 0; slot < SERVER_MAX_CONNS && S->conns[slot] != c; slot++) {
			}
			(void)epoll_ctl(S->epfd, EPOLL_CTL_MOD, c->fd,
					&(struct epoll_event){ .events = mask, .data.u64 = slot });
			c->mask = mask;
		}
	}
}

static void fail_uncommitted(struct server *S, uint64_t durable, const char *why)
{
	char msg[400];

	snprintf(msg, sizeof(msg),
		 "the record store refused the write (%s): nothing was recorded, so the call is refused (fail closed)",
		 why);
	for (size_t i = 0; i < SERVER_MAX_CONNS; i++) {
		struct conn *c = S->conns[i];
		if (!c) {
			continue;
		}
		for (size_t j = 0; j < c->qn; j++) {
			if (c->q[j].need > durable) {
				out_entry_release(&c->q[j]);
				c->q[j].body = rpc_error_new(RPC_ERR_UNAVAILABLE, msg);
			}
		}
	}
}

static void on_committed(struct server *S)
{
	uint64_t v, durable;
	bool broken;
	char why[256];

	(void)!read(S->com.efd, &v, sizeof(v));
	pthread_mutex_lock(&S->com.mu);
	durable = S->com.durable;
	broken = S->com.broken;
	snprintf(why, sizeof(why), "%s", S->com.err);
	pthread_mutex_unlock(&S->com.mu);

	if (broken) {
		char err[256];
		struct store_item *items;
		size_t n;
		int r;

		/* Wait until the thread is idle, so nothing built on the lost records is in flight. */
		pthread_mutex_lock(&S->com.mu);
		while (S->com.busy) {
			pthread_cond_wait(&S->com.cv, &S->com.mu);
		}
		durable = S->com.durable;
		pthread_mutex_unlock(&S->com.mu);

		log_error("commit failed: %s; failing every unrecorded request and reloading from the store", why);
		fail_uncommitted(S, durable, why);
		service_take_pending(S->svc, &items, &n);
		items_free(items, n);
		r = service_reload(S->svc, err, sizeof(err));
		if (r < 0) {
			log_error("reloading the state from the store failed: %s; stopping", err);
			S->stopping = true;
		}
		pthread_mutex_lock(&S->com.mu);
		items_free(S->com.incoming, S->com.n);
		S->com.incoming = NULL;
		S->com.n = S->com.cap = 0;
		S->com.broken = false;
		S->com.durable = service_durable_count(S->svc);
		pthread_mutex_unlock(&S->com.mu);
		/* The reload may have queued a signer.epoch for a fresh log; it goes out with the next batch. */
		return;
	}
	service_durable(S->svc, durable, service_now_ms());
}

static int setup_socket(struct server *S, char *err, size_t err_size)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	_cleanup_free_ char *dir = NULL;
	const char *path = S->cfg->socket_path;
	char *slash;
	struct stat st;
	int fd, r;
	mode_t dmode = S->cfg->mode == SIGNER_MODE_DEV ? 0700 : 0711;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, err_size, "socket path too long (max %zu bytes): %s", sizeof(sa.sun_path) - 1, path);
		return -ENAMETOOLONG;
	}
	dir = strdup(path);
	if (!dir) {
		return -ENOMEM;
	}
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		bool created = mkdir(dir, dmode) == 0;
		if (!created && errno != EEXIST) {
			r = negative_errno();
			snprintf(err, err_size, "mkdir %s: %s", dir, strerror(-r));
			return r;
		}
		if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
			snprintf(err, err_size, "%s must be a directory owned by the signer's uid", dir);
			return -EPERM;
		}
		/*
		 * Only a directory made here is given its mode (the umask may have
		 * narrowed it). An existing one is never changed: a socket path in
		 * /tmp must not turn /tmp into 0700. It must already be as private.
		 */
		if (created && (st.st_mode & 07777) != dmode && chmod(dir, dmode) < 0) {
			r = negative_errno();
			snprintf(err, err_size, "chmod %s: %s", dir, strerror(-r));
			return r;
		}
		if (!created && (st.st_mode & (dmode == 0700 ? 077 : 022)) != 0) {
			snprintf(err, err_size,
				 "%s is reachable by other users (mode %04o): put the socket in a directory of its own "
				 "with mode %04o",
				 dir, (unsigned)(st.st_mode & 07777), (unsigned)dmode);
			return -EPERM;
		}
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return negative_errno();
	}
	/* A socket file left by a dead signer is removed; a live one (any signer answering there) is never stolen. */
	{
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			close(fd);
			snprintf(err, err_size, "another process is listening on %s", path);
			return -EADDRINUSE;
		}
		if (probe >= 0) {
			close(probe);
		}
	}
	(void)unlink(path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 128) < 0) {
		r = negative_errno();
		snprintf(err, err_size, "bind/listen %s: %s", path, strerror(-r));
		close(fd);
		return r;
	}
	if (chmod(path, S->cfg->mode == SIGNER_MODE_DEV ? 0600 : 0666) < 0) {
		r = negative_errno();
		close(fd);
		return r;
	}
	S->lfd = fd;
	return 0;
}

static int load_policy(struct server *S, char *err, size_t err_size)
{
	_cleanup_free_ char *path = NULL, *yaml = NULL;
	char perr[256] = "";
	size_t len;
	int r;

	if (asprintf(&path, "%s/policy.yaml", S->cfg->dir) < 0) {
		return -ENOMEM;
	}
	r = io_read_file(AT_FDCWD, path, POLICY_MAX_YAML_BYTES, IO_READ_NOFOLLOW, &yaml, &len);
	if (r < 0) {
		snprintf(err, err_size, "reading %s: %s", path, strerror(-r));
		return r;
	}
	r = policy_load(yaml, len, &S->policy, perr, sizeof(perr));
	if (r < 0) {
		snprintf(err, err_size, "%s: %s", path, perr);
		return r;
	}
	return 0;
}

static int lock_dir(const char *dir, int *ret_fd, char *err, size_t err_size)
{
	_cleanup_free_ char *path = NULL;
	int fd;

	if (asprintf(&path, "%s/signer.lock", dir) < 0) {
		return -ENOMEM;
	}
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		return negative_errno();
	}
	/* One signer per store: two writers would fork the log. */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		snprintf(err, err_size, "another tkbox-signer is serving %s", dir);
		close(fd);
		return -EBUSY;
	}
	*ret_fd = fd;
	return 0;
}

static void write_pidfile(const char *dir)
{
	_cleanup_free_ char *path = NULL;
	char pid[32];

	if (asprintf(&path, "%s/signer.pid", dir) < 0) {
		return;
	}
	snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	(void)io_write_file_atomic(path, pid, strlen(pid), 0600);
}

static void remove_pidfile(const char *dir)
{
	_cleanup_free_ char *path = NULL;

	if (asprintf(&path, "%s/signer.pid", dir) >= 0) {
		(void)unlink(path);
	}
}

static void poll_waits(struct server *S, int64_t now)
{
	for (size_t i = 0; i < SERVER_MAX_CONNS; i++) {
		struct conn *c = S->conns[i];
		if (!c) {
			continue;
		}
		for (size_t j = 0; j < c->qn; j++) {
			struct out_entry *e = &c->q[j];
			if (!e->body && e->wait_approval) {
				e->body = service_wait_poll(S->svc, e->wait_approval, now >= e->deadline_ms);
				if (e->body) {
					/* The approval's record must be durable before the waiter hears of it. */
					e->need = service_assigned_count(S->svc);
				}
			}
		}
	}
}

static int64_t next_timeout(struct server *S, int64_t now)
{
	int64_t t = 1000;
	for (size_t i = 0; i < SERVER_MAX_CONNS; i++) {
		struct conn *c = S->conns[i];
		for (size_t j = 0; c && j < c->qn; j++) {
			if (!c->q[j].body && c->q[j].wait_approval) {
				t = MIN(t, MAX(0, c->q[j].deadline_ms - now));
			}
		}
	}
	return MIN(t, 200); /* approvals decided on another connection are noticed within 200 ms */
}

int server_run(const struct signer_config *cfg, int ready_fd, char *err, size_t err_size)
{
	struct server S = { .cfg = cfg, .epfd = -1, .lfd = -1, .sfd = -1 };
	_cleanup_free_ char *dbpath = NULL;
	_cleanup_close_ int lockfd = -1;
	struct epoll_event evs[64];
	sigset_t mask;
	int r;

	S.com.efd = -1;
	pthread_mutex_init(&S.com.mu, NULL);
	pthread_cond_init(&S.com.cv, NULL);
	if ((r = lock_dir(cfg->dir, &lockfd, err, err_size)) < 0) {
		goto out;
	}
	if ((r = signer_keys_load(cfg->dir, &S.keys)) < 0) {
		snprintf(err, err_size, "loading keys from %s/keys: %s", cfg->dir, strerror(-r));
		goto out;
	}
	if ((r = load_policy(&S, err, err_size)) < 0) {
		goto out;
	}
	if (asprintf(&dbpath, "%s/store.db", cfg->dir) < 0) {
		r = -ENOMEM;
		goto out;
	}
	if ((r = store_open(dbpath, true, &S.com.writer, err, err_size)) < 0 ||
	    (r = store_open(dbpath, false, &S.reader, err, err_size)) < 0) {
		goto out;
	}
	if ((r = service_new(cfg, &S.keys, S.policy, S.reader, &S.svc, err, err_size)) < 0) {
		goto out;
	}
	pthread_mutex_lock(&S.com.mu);
	S.com.durable = service_durable_count(S.svc);
	pthread_mutex_unlock(&S.com.mu);

	S.com.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	S.epfd = epoll_create1(EPOLL_CLOEXEC);
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	S.sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (S.com.efd < 0 || S.epfd < 0 || S.sfd < 0) {
		r = negative_errno();
		snprintf(err, err_size, "event setup: %s", strerror(-r));
		goto out;
	}
	signpool_start(&S.com.pool, &S.keys);
	if ((r = pthread_create(&S.thread, NULL, committer_main, &S.com)) != 0) {
		r = -r;
		snprintf(err, err_size, "commit thread: %s", strerror(-r));
		goto out;
	}
	S.thread_started = true;
	if ((r = setup_socket(&S, err, err_size)) < 0) {
		goto out;
	}
	if (epoll_ctl(S.epfd, EPOLL_CTL_ADD, S.lfd,
		      &(struct epoll_event){ .events = EPOLLIN, .data.u64 = TAG_LISTEN }) < 0 ||
	    epoll_ctl(S.epfd, EPOLL_CTL_ADD, S.com.efd,
		      &(struct epoll_event){ .events = EPOLLIN, .data.u64 = TAG_EVENT }) < 0 ||
	    epoll_ctl(S.epfd, EPOLL_CTL_ADD, S.sfd,
		      &(struct epoll_event){ .events = EPOLLIN, .data.u64 = TAG_SIGNAL }) < 0) {
		r = negative_errno();
		goto out;
	}
	write_pidfile(cfg->dir);
	log_info("serving %s on %s (log %s, %llu records)", cfg->dir, cfg->socket_path, cfg->log_id,
		 (unsigned long long)service_assigned_count(S.svc));
	if (ready_fd >= 0) {
		(void)!write(ready_fd, "1", 1);
		close(ready_fd);
		ready_fd = -1;
	}

	while (!S.stopping) {
		int64_t now = service_now_ms();
		struct store_item *items;
		uint64_t durable;
		size_t n;
		int k = epoll_wait(S.epfd, evs, ARRAY_SIZE(evs), (int)next_timeout(&S, now));

		if (k < 0 && errno != EINTR) {
			r = negative_errno();
			break;
		}
		for (int i = 0; i < k; i++) {
			uint64_t tag = evs[i].data.u64;
			if (tag == TAG_LISTEN) {
				accept_conns(&S);
			} else if (tag == TAG_EVENT) {
				on_committed(&S);
			} else if (tag == TAG_SIGNAL) {
				struct signalfd_siginfo si;
				while (read(S.sfd, &si, sizeof(si)) == sizeof(si)) {
					log_info("signal %u: stopping", si.ssi_signo);
					S.stopping = true;
				}
			} else if (tag < SERVER_MAX_CONNS && S.conns[tag]) {
				struct conn *c = S.conns[tag];
				if ((evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !c->closing) {
					read_conn(&S, c);
				}
				/* Both directions gone: what it sent was handled above, nobody can read a reply. */
				if (evs[i].events & (EPOLLHUP | EPOLLERR)) {
					c->dead = true;
				}
			}
		}
		now = service_now_ms();
		service_tick(S.svc, now);
		poll_waits(&S, now);
		/* Group commit: everything produced in this turn goes to the commit thread as one batch. */
		service_take_pending(S.svc, &items, &n);
		if (committer_push(&S.com, items, n) < 0) {
			log_error("out of memory handing records to the commit thread");
			S.stopping = true;
		}
		durable = service_durable_count(S.svc);
		for (size_t i = 0; i < SERVER_MAX_CONNS; i++) {
			struct conn *c = S.conns[i];
			if (!c) {
				continue;
			}
			flush_conn(&S, c, durable);
			if (!c->dead && c->closing && c->qn == 0 && buf_len(&c->wbuf) == 0) {
				c->dead = true;
			}
			if (!c->dead && c->qn == 0 && now - c->last_ms > SERVER_IDLE_TIMEOUT_MS) {
				c->dead = true; /* 30 s without a request: the connection is closed */
			}
			if (c->dead) {
				conn_free(&S, i);
			}
		}
	}

	/* Drain: commit what is pending, then sign a last checkpoint of the durable tree and commit it. */
	if (S.thread_started) {
		for (int pass = 0; pass < 2; pass++) {
			struct store_item *items;
			uint64_t durable;
			size_t n;
			if (pass == 1) {
				service_checkpoint_now(S.svc);
			}
			service_take_pending(S.svc, &items, &n);
			(void)committer_push(&S.com, items, n);
			pthread_mutex_lock(&S.com.mu);
			while (S.com.busy || S.com.n > 0) {
				pthread_cond_wait(&S.com.cv, &S.com.mu);
			}
			durable = S.com.durable;
			pthread_mutex_unlock(&S.com.mu);
			service_durable(S.svc, durable, service_now_ms());
		}
		pthread_mutex_lock(&S.com.mu);
		S.com.stop = true;
		pthread_cond_broadcast(&S.com.cv);
		pthread_mutex_unlock(&S.com.mu);
		pthread_join(S.thread, NULL);
		S.thread_started = false;
	}
	r = r < 0 ? r : 0;
out:
	if (S.thread_started) {
		pthread_mutex_lock(&S.com.mu);
		S.com.stop = true;
		pthread_cond_broadcast(&S.com.cv);
		pthread_mutex_unlock(&S.com.mu);
		pthread_join(S.thread, NULL);
	}
	for (size_t i = 0; i < SERVER_MAX_CONNS; i++) {
		conn_free(&S, i);
	}
	if (S.lfd >= 0) {
		close(S.lfd);
		(void)unlink(cfg->socket_path);
		remove_pidfile(cfg->dir);
	}
	if (ready_fd >= 0) {
		close(ready_fd);
	}
	if (S.epfd >= 0) {
		close(S.epfd);
	}
	if (S.sfd >= 0) {
		close(S.sfd);
	}
	if (S.com.efd >= 0) {
		close(S.com.efd);
	}
	signpool_stop(&S.com.pool);
	items_free(S.com.incoming, S.com.n);
	service_free(S.svc);
	store_close(S.reader);
	store_close(S.com.writer);
	policy_free(S.policy);
	signer_keys_wipe(&S.keys);
	return r;
}
