/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "banned.h"
#include "cli/child-confine.h"
#include "image/util.h"

/*
 * The image child's and the workspace builder's confinement, applied by
 * their own call (child_confine) in a forked child, then tried: each profile
 * closed every descriptor a parent leaked (a connected AF_UNIX socket), and
 * refuses socket(AF_UNIX), an open for write outside its directory, a file
 * made outside it, and (but for SANDBOX_IMAGE_PULL) socket(AF_INET); and it
 * still does what the child needs: write and rename in its directory, read
 * the system paths and its read-only input, run a program, and (only
 * SANDBOX_IMAGE_PULL) connect to a TCP listener on loopback.
 * /proc/self/status must say NoNewPrivs 1 and Seccomp 2.
 */

struct fixture {
	char root[64]; /* mktemp: dir/ (writable), ro/ (read-only input), outside/ */
	char dir[128], ro[128], outside[128];
	int tcp; /* a listener on 127.0.0.1 the children may or may not reach */
	struct sockaddr_in tcp_addr;
	struct sockaddr_un unix_addr; /* a listener on a path outside dir */
	int unix_fd;
	int leaked[2]; /* a connected AF_UNIX pair, as a parent could leak one */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	socklen_t len = sizeof(f->tcp_addr);
	int fd;

	assert_non_null(f);
	(void)snprintf(f->root, sizeof(f->root), "/tmp/tkbox-child-sandbox-XXXXXX");
	assert_non_null(mkdtemp(f->root));
	(void)snprintf(f->dir, sizeof(f->dir), "%s/dir", f->root);
	(void)snprintf(f->ro, sizeof(f->ro), "%s/ro", f->root);
	(void)snprintf(f->outside, sizeof(f->outside), "%s/outside", f->root);
	/* open to every uid: only the confinement stands between a child run as nobody and these */
	assert_int_equal(chmod(f->root, 0755), 0);
	assert_int_equal(mkdir(f->dir, 0700), 0);
	assert_int_equal(chmod(f->dir, 0777), 0);
	assert_int_equal(mkdir(f->ro, 0755), 0);
	assert_int_equal(mkdir(f->outside, 0700), 0);
	assert_int_equal(chmod(f->outside, 0777), 0);
	fd = open(f->ro, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	{
		int w = openat(fd, "input", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		assert_true(w >= 0);
		assert_int_equal(write(w, "in", 2), 2);
		(void)close(w);
	}
	(void)close(fd);
	fd = open(f->outside, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	{
		int w = openat(fd, "existing", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		assert_true(w >= 0);
		assert_int_equal(fchmod(w, 0666), 0);
		(void)close(w);
	}
	(void)close(fd);

	f->tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(f->tcp >= 0);
	f->tcp_addr = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	assert_int_equal(bind(f->tcp, (struct sockaddr *)&f->tcp_addr, sizeof(f->tcp_addr)), 0);
	assert_int_equal(getsockname(f->tcp, (struct sockaddr *)&f->tcp_addr, &len), 0);
	assert_int_equal(listen(f->tcp, 8), 0);

	f->unix_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(f->unix_fd >= 0);
	f->unix_addr.sun_family = AF_UNIX;
	(void)snprintf(f->unix_addr.sun_path, sizeof(f->unix_addr.sun_path), "%s/sock", f->outside);
	assert_int_equal(bind(f->unix_fd, (struct sockaddr *)&f->unix_addr, sizeof(f->unix_addr)), 0);
	assert_int_equal(listen(f->unix_fd, 8), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, f->leaked), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	int fd = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	(void)close(f->tcp);
	(void)close(f->unix_fd);
	(void)close(f->leaked[0]);
	(void)close(f->leaked[1]);
	if (fd >= 0) {
		(void)image_rm_rf_at(fd, f->root + 5);
		(void)close(fd);
	}
	free(f);
	return 0;
}

/* One failure line on stderr; the child's exit status counts them. */
static int fails;

static void expect(bool ok, const char *profile, const char *what)
{
	if (!ok) {
		fprintf(stderr, "%s: %s\n", profile, what);
		fails++;
	}
}

static bool status_says(const char *key, const char *value)
{
	char buf[8192], want[64];
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0) {
		(void)close(fd);
	}
	if (n <= 0) {
		return false;
	}
	buf[n] = '\0';
	(void)snprintf(want, sizeof(want), "\n%s:\t%s\n", key, value);
	return strstr(buf, want) != NULL;
}

/* Runs in the forked child, after child_confine. */
static void try_everything(const struct fixture *f, enum sandbox_profile p)
{
	const char *name = sandbox_profile_name(p);
	char path[256], path2[256];
	bool pull = p == SANDBOX_IMAGE_PULL;
	int fd, s;

	expect(status_says("NoNewPrivs", "1"), name, "/proc/self/status: NoNewPrivs is not 1");
	expect(status_says("Seccomp", "2"), name, "/proc/self/status: Seccomp is not 2 (filter)");

	/* refused */
	expect(write(f->leaked[0], "x", 1) < 0, name, "a leaked AF_UNIX socket is still open");
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	expect(s < 0, name, "socket(AF_UNIX) was allowed");
	if (s >= 0) {
		expect(connect(s, (const struct sockaddr *)&f->unix_addr, sizeof(f->unix_addr)) < 0, name,
		       "connect() to a unix socket outside dir succeeded");
		(void)close(s);
	}
	s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	expect(s < 0, name, "socket(AF_UNIX, SOCK_DGRAM) was allowed");
	s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0);
	expect(s < 0, name, "socket(AF_NETLINK) was allowed");
	(void)snprintf(path, sizeof(path), "%s/existing", f->outside);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	expect(fd < 0, name, "open for write of a file outside dir succeeded");
	(void)snprintf(path, sizeof(path), "%s/new", f->outside);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	expect(fd < 0, name, "creating a file outside dir succeeded");
	(void)snprintf(path, sizeof(path), "%s/new", f->ro);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	expect(fd < 0, name, "creating a file in the read-only input succeeded");
	fd = open("/tmp/tkbox-child-sandbox-escape", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	expect(fd < 0, name, "creating a file in /tmp succeeded");
	if (fd >= 0) {
		(void)unlink("/tmp/tkbox-child-sandbox-escape");
	}
	/* the network: only the pull profile opens a TCP connection (here: to a loopback listener) */
	s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (pull) {
		expect(s >= 0, name, "socket(AF_INET) was refused");
		expect(s >= 0 && connect(s, (const struct sockaddr *)&f->tcp_addr, sizeof(f->tcp_addr)) == 0, name,
		       "connect() to a loopback TCP listener failed");
	} else {
		expect(s < 0, name, "socket(AF_INET) was allowed");
	}
	if (s >= 0) {
		(void)close(s);
	}
	s = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	expect(pull ? true : s < 0, name, "socket(AF_INET6) was allowed");

	/* allowed: what the child needs */
	(void)snprintf(path, sizeof(path), "%s/sub", f->dir);
	expect(mkdir(path, 0700) == 0, name, "mkdir in dir failed");
	(void)snprintf(path, sizeof(path), "%s/file", f->dir);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	expect(fd >= 0 && write(fd, "x", 1) == 1, name, "writing a file in dir failed");
	if (fd >= 0) {
		(void)close(fd);
	}
	if (p != SANDBOX_WORKSPACE) {
		/* the cache's tmp/ -> roots.v2/ move */
		(void)snprintf(path2, sizeof(path2), "%s/sub/file", f->dir);
		expect(rename(path, path2) == 0, name, "rename across directories inside dir failed");
	}
	(void)snprintf(path, sizeof(path), "%s/input", f->ro);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	expect(fd >= 0, name, "reading the read-only input failed");
	if (fd >= 0) {
		(void)close(fd);
	}
	fd = open("/etc/passwd", O_RDONLY | O_CLOEXEC);
	expect(fd >= 0, name, "reading /etc/passwd (a system path) failed");
	if (fd >= 0) {
		(void)close(fd);
	}
	{
		/* git, mkfs.ext4 and debugfs are programs the children run */
		pid_t pid = fork();
		int st = 0;
		if (pid == 0) {
			char *argv[] = { "true", NULL };
			char *envp[] = { NULL };
			execve("/bin/true", argv, envp);
			_exit(127);
		}
		expect(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, name,
		       "running /bin/true failed");
	}
}

/* as_nobody: the child first becomes uid/gid 65534 (when the test runs as root), as a daemon not run as root */
static void run_profile(void **state, enum sandbox_profile p, bool as_nobody)
{
	struct fixture *f = *state;
	const char *ro[] = { f->ro, NULL };
	int st = 0;
	pid_t pid;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct sandbox_report rep = { 0 };
		int r;
		if (as_nobody && getuid() == 0 && sandbox_drop_uid(65534, 65534) < 0) {
			_exit(102);
		}
		r = child_confine(p, f->dir, ro, &rep);
		if (r < 0) {
			fprintf(stderr, "%s: child_confine: %s\n", sandbox_profile_name(p), strerror(-r));
			_exit(100);
		}
		if (!rep.seccomp || !rep.nnp || !rep.caps_dropped || (sandbox_landlock_abi() > 0 && !rep.landlock)) {
			fprintf(stderr, "%s: the report says a part did not hold\n", sandbox_profile_name(p));
			_exit(101);
		}
		try_everything(f, p);
		_exit(fails > 99 ? 99 : fails);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_image_pull(void **state)
{
	run_profile(state, SANDBOX_IMAGE_PULL, false);
}

static void test_image_local(void **state)
{
	run_profile(state, SANDBOX_IMAGE_LOCAL, false);
}

static void test_workspace(void **state)
{
	run_profile(state, SANDBOX_WORKSPACE, false);
}

static void test_image_pull_not_root(void **state)
{
	run_profile(state, SANDBOX_IMAGE_PULL, true);
}

static void test_image_local_not_root(void **state)
{
	run_profile(state, SANDBOX_IMAGE_LOCAL, true);
}

static void test_workspace_not_root(void **state)
{
	run_profile(state, SANDBOX_WORKSPACE, true);
}

/* The supervisor's profile is not the children's: child_confine refuses it. */
static void test_only_child_profiles(void **state)
{
	struct fixture *f = *state;
	struct sandbox_report rep = { 0 };

	assert_int_equal(child_confine(SANDBOX_SUPERVISOR, f->dir, NULL, &rep), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_image_pull, setup, teardown),
		cmocka_unit_test_setup_teardown(test_image_local, setup, teardown),
		cmocka_unit_test_setup_teardown(test_workspace, setup, teardown),
		cmocka_unit_test_setup_teardown(test_image_pull_not_root, setup, teardown),
		cmocka_unit_test_setup_teardown(test_image_local_not_root, setup, teardown),
		cmocka_unit_test_setup_teardown(test_workspace_not_root, setup, teardown),
		cmocka_unit_test_setup_teardown(test_only_child_profiles, setup, teardown),
	};
	if (sandbox_landlock_abi() == 0) {
		/* without Landlock the write checks cannot hold: say so instead of passing them */
		fprintf(stderr, "test-child-sandbox: this kernel has no Landlock; skipped\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
