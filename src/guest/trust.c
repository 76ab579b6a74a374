/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "banned.h"
#include "clock.h"
#include "guest/agent.h"
#include "guest/egress.h"
#include "guest/kmsg.h"
#include "guest/trust.h"
#include "io.h"
#include "path.h"

/* Where the box's own clients look for their roots, in the order the tkbox bundle's base is chosen. */
static const char *const base_bundles[] = {
	"etc/ssl/certs/ca-certificates.crt", /* Debian, Ubuntu, Alpine */
	"etc/pki/tls/certs/ca-bundle.crt", /* RHEL, Fedora */
	"etc/ssl/cert.pem", /* Alpine, macOS-style */
};

/* Every system bundle the CA is appended to (the regular files among them: a symlink names another one). */
static const char *const system_bundles[] = {
	"etc/ssl/certs/ca-certificates.crt",
	"etc/pki/tls/certs/ca-bundle.crt",
	"etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"etc/ssl/cert.pem",
};

#define SELFTEST_TAIL 512 /* bytes of a client's output kept for its console line */

/* ---- files ---- */

/*
 * Open rel beneath rootfd, never leaving the root, only when it is a regular
 * file: its type is looked at through an O_PATH descriptor first, so a FIFO
 * or a device is never opened (an open could block or act). follow: symlinks
 * are resolved inside the root (to read a bundle that RHEL keeps behind one);
 * otherwise any symlink on the way is -ELOOP. -EINVAL: not a regular file.
 */
static int open_regular(int rootfd, const char *rel, bool follow, int flags)
{
	uint64_t resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | (follow ? 0 : RESOLVE_NO_SYMLINKS);
	struct open_how how = { .flags = O_PATH | O_CLOEXEC, .resolve = resolve };
	_cleanup_close_ int pfd = -1;
	struct stat st;
	int fd;

	pfd = (int)syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
	if (pfd < 0 && errno == ENOSYS) {
		/* A kernel without openat2 (not the box's): no symlink is followed at all. */
		pfd = safe_openat(rootfd, rel, O_PATH, 0);
		if (pfd < 0) {
			errno = -pfd;
		}
	}
	if (pfd < 0) {
		return errno == EXDEV ? -ELOOP : -errno;
	}
	if (fstat(pfd, &st) < 0) {
		return -errno;
	}
	if (!S_ISREG(st.st_mode)) {
		return -EINVAL;
	}
	/* The same walk again, now to open it (nothing else runs in the box yet to swap it in between). */
	how = (struct open_how){ .flags = (uint64_t)(flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK), .resolve = resolve };
	fd = (int)syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
	if (fd < 0 && errno == ENOSYS) {
		fd = safe_openat(rootfd, rel, flags | O_NOCTTY | O_NONBLOCK, 0);
		if (fd < 0) {
			errno = -fd;
		}
	}
	if (fd < 0) {
		return errno == EXDEV ? -ELOOP : -errno;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		(void)close(fd);
		return -EINVAL;
	}
	return fd;
}

/* A regular file's bytes, at most GUEST_TRUST_MAX_BUNDLE (-E2BIG past it). */
static int read_regular(int rootfd, const char *rel, bool follow, struct buf **ret)
{
	_cleanup_close_ int fd = open_regular(rootfd, rel, follow, O_RDONLY);

	if (fd < 0) {
		return fd;
	}
	return io_read_all_new(fd, GUEST_TRUST_MAX_BUNDLE, 0, ret);
}

/* The directory rel beneath rootfd, made (mode 0755) when missing; no symlink on the way. */
static int open_dir(int rootfd, const char *rel, bool create)
{
	int fd = safe_openat(rootfd, rel, O_RDONLY | O_DIRECTORY, 0);

	if (fd == -ENOENT && create) {
		const char *slash = strrchr(rel, '/');
		_cleanup_close_ int parent = -1;
		if (slash) {
			_cleanup_free_ char *p = strndup(rel, (size_t)(slash - rel));
			if (!p) {
				return -ENOMEM;
			}
			parent = safe_openat(rootfd, p, O_RDONLY | O_DIRECTORY, 0);
			if (parent < 0) {
				return parent;
			}
		}
		if (mkdirat(slash ? parent : rootfd, slash ? slash + 1 : rel, 0755) < 0 && errno != EEXIST) {
			return -errno;
		}
		fd = safe_openat(rootfd, rel, O_RDONLY | O_DIRECTORY, 0);
	}
	return fd == -ENOTDIR ? -ELOOP : fd;
}

/* name in dirfd := the n parts, written as a new file and renamed into place (a planted symlink is replaced). */
static int write_new(int dirfd, const char *name, const void *const *parts, const size_t *lens, size_t n)
{
	char tmp[128];
	_cleanup_close_ int fd = -1;
	int r = 0;

	if (snprintf(tmp, sizeof(tmp), ".%s.tkbox-tmp", name) >= (int)sizeof(tmp)) {
		return -ENAMETOOLONG;
	}
	(void)unlinkat(dirfd, tmp, 0);
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		return -errno;
	}
	for (size_t i = 0; r >= 0 && i < n; i++) {
		if (lens[i] > 0) {
			r = io_write_all(fd, parts[i], lens[i]);
		}
	}
	if (r >= 0 && fchmod(fd, 0644) < 0) {
		r = -errno;
	}
	if (r >= 0 && renameat(dirfd, tmp, dirfd, name) < 0) {
		r = -errno;
	}
	if (r < 0) {
		(void)unlinkat(dirfd, tmp, 0);
	}
	return r;
}

static bool holds(const struct buf *b, const char *pem, size_t pem_len)
{
	return buf_len(b) >= pem_len && memmem(buf_ptr(b), buf_len(b), pem, pem_len) != NULL;
}

static bool ends_in_newline(const struct buf *b)
{
	return buf_len(b) == 0 || ((const char *)buf_ptr(b))[buf_len(b) - 1] == '\n';
}

static void note_error(struct guest_trust_report *rep, int r, const char *rel)
{
	if (!rep->error) {
		rep->error = r;
		rep->error_path = rel;
	}
}

/* Append the CA to one system bundle when it is a regular file that does not hold it yet. */
static void append_to_bundle(int rootfd, const char *rel, const char *pem, size_t pem_len,
			     struct guest_trust_report *rep)
{
	_cleanup_buf_ struct buf *old = NULL;
	_cleanup_close_ int fd = -1;
	/* The PEM without its last newline: what a bundle holding it must contain. */
	size_t body = pem[pem_len - 1] == '\n' ? pem_len - 1 : pem_len;
	const void *parts[3];
	size_t lens[3], k = 0;
	int r;

	r = read_regular(rootfd, rel, false, &old);
	if (r == -ENOENT) {
		return;
	}
	if (r == -ELOOP || r == -EINVAL || r == -E2BIG) {
		rep->skipped++;
		return;
	}
	if (r < 0) {
		note_error(rep, r, rel);
		return;
	}
	if (holds(old, pem, body)) {
		rep->present++;
		return;
	}
	fd = open_regular(rootfd, rel, false, O_WRONLY | O_APPEND);
	if (fd < 0) {
		note_error(rep, fd, rel);
		return;
	}
	if (!ends_in_newline(old)) {
		parts[k] = "\n";
		lens[k++] = 1;
	}
	parts[k] = pem;
	lens[k++] = pem_len;
	if (body == pem_len) {
		parts[k] = "\n";
		lens[k++] = 1;
	}
	for (size_t i = 0; i < k; i++) {
		r = io_write_all(fd, parts[i], lens[i]);
		if (r < 0) {
			note_error(rep, r, rel);
			return;
		}
	}
	rep->appended++;
}

/* A copy of the CA in a trust-store source directory (dir beneath rootfd), when that directory exists. */
static void drop_copy(int rootfd, const char *dir, bool create, const char *name, const char *pem, size_t pem_len,
		      bool nl, struct guest_trust_report *rep)
{
	_cleanup_close_ int fd = open_dir(rootfd, dir, create);
	const void *parts[2] = { pem, "\n" };
	size_t lens[2] = { pem_len, nl ? 1 : 0 };
	int r;

	if (fd == -ENOENT) {
		return;
	}
	r = fd < 0 ? fd : write_new(fd, name, parts, lens, 2);
	if (r < 0) {
		note_error(rep, r, dir);
	}
}

int guest_trust_install(int rootfd, const char *ca_pem, struct guest_trust_report *ret)
{
	struct guest_trust_report rep = { 0 };
	_cleanup_buf_ struct buf *base = NULL;
	_cleanup_close_ int etc = -1, dir = -1;
	size_t pem_len = strlen(ca_pem), body;
	bool nl;
	int r;

	if (pem_len == 0) {
		return -EINVAL;
	}
	/* Every file gets whole lines: the PEM ends with a newline there even when the config's did not. */
	nl = ca_pem[pem_len - 1] != '\n';
	body = nl ? pem_len : pem_len - 1;
	/* The base is read before any system bundle gets the CA appended. */
	for (size_t i = 0; i < ARRAY_SIZE(base_bundles) && !rep.base; i++) {
		if (read_regular(rootfd, base_bundles[i], true, &base) >= 0) {
			rep.base = base_bundles[i];
		} else {
			buf_free(base);
			base = NULL;
		}
	}
	etc = open_dir(rootfd, "etc", true);
	if (etc < 0) {
		return etc;
	}
	dir = open_dir(etc, "tkbox", true);
	if (dir < 0) {
		return dir;
	}
	{
		const void *parts[] = { ca_pem, "\n" };
		size_t lens[] = { pem_len, nl ? 1 : 0 };
		r = write_new(dir, "ca.pem", parts, lens, ARRAY_SIZE(parts));
		if (r < 0) {
			return r;
		}
	}
	{
		bool has = base && holds(base, ca_pem, body);
		const void *parts[] = { base ? (const void *)buf_ptr(base) : "", "\n", ca_pem, "\n" };
		size_t lens[] = { base ? buf_len(base) : 0, base && !ends_in_newline(base) ? 1 : 0, has ? 0 : pem_len,
				  !has && nl ? 1 : 0 };
		r = write_new(dir, "ca-bundle.crt", parts, lens, ARRAY_SIZE(parts));
		if (r < 0) {
			return r;
		}
	}
	for (size_t i = 0; i < ARRAY_SIZE(system_bundles); i++) {
		append_to_bundle(rootfd, system_bundles[i], ca_pem, pem_len, &rep);
	}
	/* Only where the tree is there already: a distribution's update tool regenerates the bundles from it. */
	{
		int fd = safe_openat(rootfd, "usr/local/share", O_PATH | O_DIRECTORY, 0);
		if (fd >= 0) {
			(void)close(fd);
			drop_copy(rootfd, "usr/local/share/ca-certificates", true, "tkbox-box-ca.crt", ca_pem, pem_len,
				  nl, &rep);
		}
	}
	drop_copy(rootfd, "etc/pki/ca-trust/source/anchors", false, "tkbox-box-ca.pem", ca_pem, pem_len, nl, &rep);
	*ret = rep;
	return 0;
}

/* ---- programs ---- */

static const char *env_get(char *const *env, const char *key)
{
	size_t kl = strlen(key);

	for (char *const *e = env; e && *e; e++) {
		if (strncmp(*e, key, kl) == 0 && (*e)[kl] == '=') {
			return *e + kl + 1;
		}
	}
	return NULL;
}

int guest_find_in_path(char *const *env, const char *name, char *ret, size_t size)
{
	const char *path = env_get(env, "PATH");

	if (!path) {
		path = GUEST_DEFAULT_PATH;
	}
	if (!*name || strchr(name, '/')) {
		return -EINVAL;
	}
	while (*path) {
		const char *colon = strchr(path, ':');
		size_t dl = colon ? (size_t)(colon - path) : strlen(path);
		struct stat st;
		/* Only absolute directories: a relative one would depend on the cwd of whoever runs it. */
		if (dl > 0 && path[0] == '/') {
			int n = snprintf(ret, size, "%.*s/%s", (int)dl, path, name);
			if (n > 0 && (size_t)n < size && stat(ret, &st) == 0 && S_ISREG(st.st_mode) &&
			    access(ret, X_OK) == 0) {
				return 0;
			}
		}
		path += dl;
		if (*path == ':') {
			path++;
		}
	}
	return -ENOENT;
}

/* A program run with a time limit: its pid, its output pipe and the tail of what it printed. */
struct limited {
	pid_t pid;
	int out; /* the read end of its stdout+stderr, -1 at EOF */
	uint64_t deadline; /* CLOCK_MONOTONIC ms */
	bool reaped, killed;
	int status;
	char keep[SELFTEST_TAIL]; /* the last bytes it printed */
	size_t kept;
};

/*
 * Start path with argv and env in a child of its own session (stdin
 * /dev/null, stdout and stderr into a pipe), to be stopped timeout_ms later.
 */
static int limited_start(struct limited *l, const char *path, char *const *argv, char *const *env, int timeout_ms)
{
	int out[2];

	*l = (struct limited){ .out = -1, .deadline = clock_mono_ms() + (uint64_t)timeout_ms };
	if (pipe2(out, O_CLOEXEC) < 0) {
		return -errno;
	}
	l->pid = fork();
	if (l->pid < 0) {
		int r = -errno;
		(void)close(out[0]);
		(void)close(out[1]);
		return r;
	}
	if (l->pid == 0) {
		sigset_t none;
		int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
		(void)setsid();
		sigemptyset(&none);
		(void)sigprocmask(SIG_SETMASK, &none, NULL);
		(void)signal(SIGPIPE, SIG_DFL);
		(void)signal(SIGCHLD, SIG_DFL);
		if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out[1], 1) < 0 || dup2(out[1], 2) < 0) {
			_exit(126);
		}
		(void)execve(path, argv, env);
		_exit(127);
	}
	(void)close(out[1]);
	l->out = out[0];
	return 0;
}

static void limited_read(struct limited *l)
{
	char chunk[4096];
	ssize_t n = read(l->out, chunk, sizeof(chunk));
	size_t take;

	if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
		return;
	}
	if (n <= 0) {
		(void)close(l->out);
		l->out = -1;
		return;
	}
	/* Keep the last SELFTEST_TAIL bytes. */
	take = MIN((size_t)n, sizeof(l->keep));
	if (l->kept + take > sizeof(l->keep)) {
		size_t drop = l->kept + take - sizeof(l->keep);
		memmove(l->keep, l->keep + drop, l->kept - drop);
		l->kept -= drop;
	}
	memcpy(l->keep + l->kept, chunk + (size_t)n - take, take);
	l->kept += take;
}

/* Over: reaped, and its output read to the end (or it was killed: an escaped descendant may hold the pipe). */
static bool limited_over(const struct limited *l)
{
	return l->reaped && (l->out < 0 || l->killed);
}

/*
 * Wait for the n started programs together, each killed (its process group)
 * at its deadline; every one is reaped on return.
 */
static void limited_wait(struct limited *ls, size_t n)
{
	for (;;) {
		struct pollfd p[8];
		struct limited *owner[8];
		uint64_t now = clock_mono_ms(), wake = now + 100;
		size_t np = 0;
		bool all = true;

		for (size_t i = 0; i < n; i++) {
			struct limited *l = &ls[i];
			if (!l->reaped && waitpid(l->pid, &l->status, WNOHANG) == l->pid) {
				l->reaped = true;
			}
			if (!l->reaped && !l->killed && now >= l->deadline) {
				(void)kill(-l->pid, SIGKILL);
				(void)kill(l->pid, SIGKILL);
				l->killed = true;
			}
			if (limited_over(l)) {
				continue;
			}
			all = false;
			if (!l->killed) {
				wake = MIN(wake, l->deadline);
			}
			if (l->out >= 0 && np < ARRAY_SIZE(p)) {
				p[np] = (struct pollfd){ .fd = l->out, .events = POLLIN };
				owner[np++] = l;
			}
		}
		if (all) {
			break;
		}
		/* Short waits: a child's exit is seen by waitpid, not by poll. */
		if (poll(p, np, (int)(wake - MIN(wake, now))) > 0) {
			for (size_t i = 0; i < np; i++) {
				if (p[i].revents) {
					limited_read(owner[i]);
				}
			}
		}
	}
	for (size_t i = 0; i < n; i++) {
		if (ls[i].out >= 0) {
			(void)close(ls[i].out);
			ls[i].out = -1;
		}
	}
}

/* Its wait status, or -1 when it was killed at its limit; its last non-empty output line into tail. */
static int limited_result(const struct limited *l, char *tail, size_t size)
{
	size_t end = l->kept, start;

	while (end > 0 && (l->keep[end - 1] == '\n' || l->keep[end - 1] == '\r' || l->keep[end - 1] == ' ')) {
		end--;
	}
	start = end;
	while (start > 0 && l->keep[start - 1] != '\n') {
		start--;
	}
	(void)snprintf(tail, size, "%.*s", (int)(end - start), l->keep + start);
	return l->killed ? -1 : l->status;
}

static void describe_status(int status, char *out, size_t size)
{
	if (status < 0) {
		(void)snprintf(out, size, "was killed at its time limit");
	} else if (WIFEXITED(status)) {
		(void)snprintf(out, size, "exited %d", WEXITSTATUS(status));
	} else if (WIFSIGNALED(status)) {
		(void)snprintf(out, size, "died of signal %d", WTERMSIG(status));
	} else {
		(void)snprintf(out, size, "ended");
	}
}

/* ---- Java ---- */

int guest_trust_java_start(char *const *env)
{
	char keytool[4096];
	char *stores[GUEST_TRUST_JAVA_MAX_KEYSTORES] = { 0 };
	dev_t devs[GUEST_TRUST_JAVA_MAX_KEYSTORES];
	ino_t inos[GUEST_TRUST_JAVA_MAX_KEYSTORES];
	size_t n = 0;
	DIR *d;
	struct dirent *de;
	pid_t pid;

	d = opendir("/usr/lib/jvm");
	if (!d) {
		return 0;
	}
	/* Bounded: a directory of a million entries in a hostile image must not hold the boot up. */
	for (unsigned seen = 0; (de = readdir(d)) && n < ARRAY_SIZE(stores) && seen < GUEST_TRUST_JAVA_MAX_ENTRIES;
	     seen++) {
		char *p = NULL;
		struct stat st;
		bool dup = false;
		if (de->d_name[0] == '.') {
			continue;
		}
		if (asprintf(&p, "/usr/lib/jvm/%s/lib/security/cacerts", de->d_name) < 0) {
			break;
		}
		/* JDK directories are often symlinks to each other and to one shared keystore: import once. */
		if (stat(p, &st) < 0 || !S_ISREG(st.st_mode)) {
			free(p);
			continue;
		}
		for (size_t i = 0; i < n; i++) {
			dup = dup || (devs[i] == st.st_dev && inos[i] == st.st_ino);
		}
		if (dup) {
			free(p);
			continue;
		}
		devs[n] = st.st_dev;
		inos[n] = st.st_ino;
		stores[n++] = p;
	}
	(void)closedir(d);
	if (n == 0 || guest_find_in_path(env, "keytool", keytool, sizeof(keytool)) < 0) {
		for (size_t i = 0; i < n; i++) {
			free(stores[i]);
		}
		if (n > 0) {
			guest_kmsg(
				"a JDK keystore exists but keytool is not on the box's PATH: Java does not trust the "
				"box CA");
		}
		return 0;
	}
	pid = fork();
	if (pid < 0) {
		int r = -errno;
		for (size_t i = 0; i < n; i++) {
			free(stores[i]);
		}
		return r;
	}
	if (pid > 0) {
		for (size_t i = 0; i < n; i++) {
			free(stores[i]);
		}
		return (int)pid;
	}
	for (size_t i = 0; i < n; i++) {
		char *argv[] = { "keytool",	 "-importcert", "-noprompt", "-alias",	   "tkbox-box-ca", "-file",
				 GUEST_TRUST_CA, "-keystore",	stores[i],   "-storepass", "changeit",	   NULL };
		char tail[200], how[64];
		int status = 0;
		struct limited l;
		if (limited_start(&l, keytool, argv, env, GUEST_TRUST_JAVA_TIMEOUT_MS) < 0) {
			guest_kmsg("java: keytool could not be started for %s", stores[i]);
			continue;
		}
		limited_wait(&l, 1);
		status = limited_result(&l, tail, sizeof(tail));
		if (status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
			guest_kmsg("java: the box CA is in %s", stores[i]);
			continue;
		}
		describe_status(status, how, sizeof(how));
		guest_kmsg("java: keytool %s for %s: %s", how, stores[i], tail);
	}
	_exit(0);
}

/* ---- the self-test ---- */

int guest_selftest_done(uint16_t port, const char *ran, int64_t clock_ms, char *status, size_t size)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	_cleanup_close_ int fd = -1;
	char req[512], ans[256];
	size_t got = 0;
	uint64_t deadline;
	int n, r;

	for (const char *p = ran; *p; p++) {
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == ',')) {
			return -EINVAL;
		}
	}
	n = snprintf(req, sizeof(req),
		     "GET http://" GUEST_SELFTEST_HOST "/done?ran=%s&clock_ms=%lld HTTP/1.1\r\n"
		     "Host: " GUEST_SELFTEST_HOST "\r\n\r\n",
		     ran, (long long)clock_ms);
	if (n < 0 || (size_t)n >= sizeof(req)) {
		return -E2BIG;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		return -errno;
	}
	deadline = clock_mono_ms() + GUEST_SELFTEST_DONE_TIMEOUT_MS;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
		return -errno;
	}
	{
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		int err = 0;
		socklen_t el = sizeof(err);
		if (poll(&p, 1, GUEST_SELFTEST_DONE_TIMEOUT_MS) != 1) {
			return -ETIMEDOUT;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err != 0) {
			return err ? -err : -errno;
		}
	}
	/* A few hundred bytes into an empty loopback socket: one send takes them all. */
	if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
		return -EIO;
	}
	while (got < sizeof(ans) - 1 && !memchr(ans, '\n', got)) {
		uint64_t now = clock_mono_ms();
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t k;
		if (now >= deadline) {
			return -ETIMEDOUT;
		}
		r = poll(&p, 1, (int)(deadline - now));
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r <= 0) {
			return r < 0 ? -errno : -ETIMEDOUT;
		}
		k = read(fd, ans + got, sizeof(ans) - 1 - got);
		if (k < 0 && (errno == EINTR || errno == EAGAIN)) {
			continue;
		}
		if (k <= 0) {
			break;
		}
		got += (size_t)k;
	}
	if (got == 0) {
		return -ECONNRESET;
	}
	ans[got] = '\0';
	ans[strcspn(ans, "\r\n")] = '\0';
	(void)snprintf(status, size, "%s", ans);
	return 0;
}

struct selftest_client {
	const char *name;
	char *const *argv;
};

static void selftest_run(bool with_ca, char *const *env)
{
	static char *const curl[] = { "curl", "-sS", "-o", "/dev/null", "https://" GUEST_SELFTEST_HOST "/curl", NULL };
	static char *const python3[] = { "python3", "-c",
					 "import urllib.request as u; u.urlopen(\"https://" GUEST_SELFTEST_HOST
					 "/python3\", timeout=15)",
					 NULL };
	static char *const git[] = { "git", "ls-remote", "https://" GUEST_SELFTEST_HOST "/git", NULL };
	static const struct selftest_client clients[] = {
		{ "curl", curl },
		{ "python3", python3 },
		{ "git", git },
	};
	struct limited run[ARRAY_SIZE(clients)];
	const char *names[ARRAY_SIZE(clients)];
	char ran[64] = "", status[160];
	struct timespec now;
	size_t n = 0;
	int r;

	/* Together: under TCG each client's start-up and handshake take seconds, and the box's record waits. */
	for (size_t i = 0; with_ca && i < ARRAY_SIZE(clients); i++) {
		char path[4096];
		if (guest_find_in_path(env, clients[i].name, path, sizeof(path)) < 0) {
			continue;
		}
		r = limited_start(&run[n], path, clients[i].argv, env, GUEST_SELFTEST_CLIENT_TIMEOUT_MS);
		if (r < 0) {
			guest_kmsg("self-test: %s could not be started: %s", clients[i].name, strerror(-r));
			continue;
		}
		(void)snprintf(ran + strlen(ran), sizeof(ran) - strlen(ran), "%s%s", ran[0] ? "," : "",
			       clients[i].name);
		names[n++] = clients[i].name;
	}
	limited_wait(run, n);
	for (size_t i = 0; i < n; i++) {
		char tail[200], how[64];
		describe_status(limited_result(&run[i], tail, sizeof(tail)), how, sizeof(how));
		guest_kmsg("self-test: %s %s%s%s", names[i], how, tail[0] ? ": " : "", tail);
	}
	(void)clock_gettime(CLOCK_REALTIME, &now);
	r = guest_selftest_done(GUEST_EGRESS_PORT, ran, (int64_t)now.tv_sec * 1000 + (int64_t)now.tv_nsec / 1000000,
				status, sizeof(status));
	if (r < 0) {
		guest_kmsg("self-test: the done request (ran=%s) failed: %s", ran, strerror(-r));
	} else {
		guest_kmsg("self-test: done (ran=%s): %s", ran, status);
	}
}

int guest_selftest_start(bool with_ca, char *const *env, int *ret_ready_fd)
{
	int ready[2];
	pid_t pid;

	if (pipe2(ready, O_CLOEXEC) < 0) {
		return -errno;
	}
	pid = fork();
	if (pid < 0) {
		int r = -errno;
		(void)close(ready[0]);
		(void)close(ready[1]);
		return r;
	}
	if (pid == 0) {
		struct pollfd p = { .fd = ready[0], .events = POLLIN };
		sigset_t none;
		(void)close(ready[1]);
		sigemptyset(&none);
		(void)sigprocmask(SIG_SETMASK, &none, NULL);
		(void)signal(SIGCHLD, SIG_DFL);
		/* Until the agent is up (it closes the write end), so the box's first pong is not slowed. */
		(void)poll(&p, 1, GUEST_SELFTEST_READY_WAIT_MS);
		(void)close(ready[0]);
		selftest_run(with_ca, env);
		_exit(0);
	}
	(void)close(ready[0]);
	*ret_ready_fd = ready[1];
	return (int)pid;
}
