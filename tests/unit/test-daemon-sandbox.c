/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The confinement profiles of src/daemon/sandbox.c, applied with the same
 * call the supervisor and the daemon's children use (sandbox_apply), each in
 * a forked child that then tries one thing. Every refusal has a control: the
 * same action without the sandbox succeeds, so no check passes vacuously.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "banned.h"
#include "daemon/sandbox.h"

/* The child's exit codes. */
enum { DONE = 0, REFUSED = 1, SETUP = 2, UNEXPECTED = 3 };

/* Where the sandboxed child may write, and where it may not (with a listening socket: the signer's stand-in). */
static char box_dir[64], outside_dir[64], sock_path[128];
static int listen_fd = -1;

typedef int (*probe_fn)(void);

/* 0 = the action worked; REFUSED = the call failed with EPERM or EACCES. */
static int refused_or(int r)
{
	if (r >= 0) {
		return DONE;
	}
	return errno == EPERM || errno == EACCES ? REFUSED : UNEXPECTED;
}

static int probe_socket_unix(void)
{
	return refused_or(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
}

static int probe_socket_inet(void)
{
	return refused_or(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
}

/* The socket exists from before the sandbox (as the supervisor's fds do); only connect() is new. */
static int probe_connect_signer_fd = -1;
static int probe_connect_signer(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	(void)snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock_path);
	return refused_or(connect(probe_connect_signer_fd, (struct sockaddr *)&a, sizeof(a)));
}

static int probe_write_outside(void)
{
	char p[128];
	(void)snprintf(p, sizeof(p), "%s/escaped", outside_dir);
	return refused_or(open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
}

static int probe_write_inside(void)
{
	char p[128];
	int fd;
	(void)snprintf(p, sizeof(p), "%s/kept", box_dir);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, "ok\n", 3) != 3) {
		return UNEXPECTED;
	}
	(void)close(fd);
	return DONE;
}

static int probe_execve(void)
{
	char *argv[] = { "/bin/true", NULL };
	char *envp[] = { NULL };
	(void)execve(argv[0], argv, envp);
	return refused_or(-1);
}

/* execve refused by the seccomp filter itself (EPERM; Landlock's refusal would be EACCES). */
static int probe_execve_seccomp(void)
{
	char *argv[] = { "/bin/true", NULL };
	char *envp[] = { NULL };
	(void)execve(argv[0], argv, envp);
	return errno == EPERM ? REFUSED : UNEXPECTED;
}

/* execve and wait: the children's profiles run programs. */
static int probe_run_program(void)
{
	pid_t p = fork();
	int st;
	if (p == 0) {
		char *argv[] = { "/bin/true", NULL };
		char *envp[] = { NULL };
		(void)execve(argv[0], argv, envp);
		_exit(99);
	}
	if (p < 0 || waitpid(p, &st, 0) != p) {
		return UNEXPECTED;
	}
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? DONE : REFUSED;
}

/* A file made before the sandbox in outside_dir (not granted) and in ro_dir (granted read-only to the writer). */
static char ro_dir[64];

static int probe_read_file(const char *dir)
{
	char p[160];
	int fd;
	(void)snprintf(p, sizeof(p), "%s/input", dir);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		(void)close(fd);
	}
	return refused_or(fd);
}

static int probe_read_outside(void)
{
	return probe_read_file(outside_dir);
}

static int probe_read_ro(void)
{
	return probe_read_file(ro_dir);
}

static int probe_write_ro(void)
{
	char p[128];
	(void)snprintf(p, sizeof(p), "%s/input", ro_dir);
	return refused_or(open(p, O_WRONLY | O_CLOEXEC));
}

/* What the writer does in the checkout: a directory, a temp file renamed over a name, a symlink, an unlink. */
static int probe_writer_ops(void)
{
	char d[128], t[160], f[160], l[160];
	int fd;
	(void)snprintf(d, sizeof(d), "%s/sub", box_dir);
	(void)snprintf(t, sizeof(t), "%s/.tmp", d);
	(void)snprintf(f, sizeof(f), "%s/file", d);
	(void)snprintf(l, sizeof(l), "%s/link", d);
	if (mkdir(d, 0755) < 0 && errno != EEXIST) {
		return refused_or(-1);
	}
	fd = open(t, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, "x", 1) != 1 || close(fd) < 0 || rename(t, f) < 0 || symlink("file", l) < 0 ||
	    unlink(l) < 0 || unlink(f) < 0) {
		return refused_or(-1);
	}
	return DONE;
}

/* Removing a directory (the writer never does: a delete removes only a file or a symlink). */
static int probe_rmdir_inside(void)
{
	char d[128];
	(void)snprintf(d, sizeof(d), "%s/gone", box_dir);
	if (mkdir(d, 0755) < 0 && errno != EEXIST) {
		return UNEXPECTED;
	}
	return refused_or(rmdir(d));
}

static int probe_ptrace(void)
{
	return refused_or((int)ptrace(PTRACE_TRACEME, 0, NULL, NULL));
}

/* Outcome of `probe` in a child, sandboxed with `profile` unless it is -1: DONE, REFUSED or -SIGNAL. */
static int run(int profile, probe_fn probe)
{
	pid_t pid = fork();
	int st = 0;

	assert_true(pid >= 0);
	if (pid == 0) {
		struct sandbox_report rep;
		const char *rw[] = { box_dir, NULL }, *ro[] = { ro_dir, NULL };
		/* the writer's one read-only input (the scratch tree); the others read what their profile says */
		if (profile >= 0 && sandbox_apply_dirs((enum sandbox_profile)profile, rw,
						       profile == SANDBOX_APPLY_WRITE ? ro : NULL, &rep) < 0) {
			_exit(SETUP);
		}
		_exit(probe());
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st)) {
		return -WTERMSIG(st);
	}
	assert_true(WIFEXITED(st));
	assert_int_not_equal(WEXITSTATUS(st), SETUP);
	assert_int_not_equal(WEXITSTATUS(st), UNEXPECTED);
	return WEXITSTATUS(st);
}

/* Refused in the supervisor's profile: killed by the filter (SIGSYS) or failed with EPERM/EACCES. */
static void assert_refused(int outcome)
{
	assert_true(outcome == -SIGSYS || outcome == REFUSED);
}

static int setup(void **state)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	(void)state;

	(void)snprintf(box_dir, sizeof(box_dir), "/tmp/tkbox-sbx-XXXXXX");
	(void)snprintf(outside_dir, sizeof(outside_dir), "/tmp/tkbox-sbx-out-XXXXXX");
	(void)snprintf(ro_dir, sizeof(ro_dir), "/tmp/tkbox-sbx-ro-XXXXXX");
	if (!mkdtemp(box_dir) || !mkdtemp(outside_dir) || !mkdtemp(ro_dir)) {
		return -1;
	}
	{
		char p[160];
		int fd;
		(void)snprintf(p, sizeof(p), "%s/input", outside_dir);
		fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		(void)close(fd);
		(void)snprintf(p, sizeof(p), "%s/input", ro_dir);
		if (fd < 0 || (fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) < 0) {
			return -1;
		}
		(void)close(fd);
	}
	(void)snprintf(sock_path, sizeof(sock_path), "%s/signer.sock", outside_dir);
	(void)snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock_path);
	listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(listen_fd, 8) < 0) {
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	char p[160];
	(void)state;
	(void)close(listen_fd);
	(void)unlink(sock_path);
	(void)snprintf(p, sizeof(p), "%s/escaped", outside_dir);
	(void)unlink(p);
	(void)snprintf(p, sizeof(p), "%s/kept", box_dir);
	(void)unlink(p);
	(void)snprintf(p, sizeof(p), "%s/input", outside_dir);
	(void)unlink(p);
	(void)snprintf(p, sizeof(p), "%s/input", ro_dir);
	(void)unlink(p);
	(void)snprintf(p, sizeof(p), "%s/gone", box_dir);
	(void)rmdir(p);
	(void)snprintf(p, sizeof(p), "%s/sub", box_dir);
	(void)rmdir(p);
	(void)rmdir(ro_dir);
	(void)rmdir(outside_dir);
	(void)rmdir(box_dir);
	return 0;
}

/* The controls: without a sandbox every probe below succeeds on this host. */
static void test_controls(void **state)
{
	(void)state;
	assert_int_equal(run(-1, probe_socket_unix), DONE);
	probe_connect_signer_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(probe_connect_signer_fd >= 0);
	assert_int_equal(run(-1, probe_connect_signer), DONE);
	(void)close(probe_connect_signer_fd);
	assert_int_equal(run(-1, probe_write_outside), DONE);
	{
		char p[160];
		(void)snprintf(p, sizeof(p), "%s/escaped", outside_dir);
		assert_int_equal(unlink(p), 0);
	}
	assert_int_equal(run(-1, probe_execve), DONE); /* execve replaced the child: /bin/true exits 0 */
	assert_int_equal(run(-1, probe_ptrace), DONE);
	assert_int_equal(run(-1, probe_write_inside), DONE);
	assert_int_equal(run(-1, probe_read_outside), DONE);
	assert_int_equal(run(-1, probe_read_ro), DONE);
	assert_int_equal(run(-1, probe_write_ro), DONE);
	assert_int_equal(run(-1, probe_writer_ops), DONE);
	assert_int_equal(run(-1, probe_rmdir_inside), DONE);
	assert_int_equal(run(-1, probe_run_program), DONE);
}

static void test_supervisor_profile(void **state)
{
	(void)state;
	assert_refused(run(SANDBOX_SUPERVISOR, probe_socket_unix));
	assert_refused(run(SANDBOX_SUPERVISOR, probe_socket_inet));
	probe_connect_signer_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(probe_connect_signer_fd >= 0);
	assert_refused(run(SANDBOX_SUPERVISOR, probe_connect_signer));
	(void)close(probe_connect_signer_fd);
	assert_refused(run(SANDBOX_SUPERVISOR, probe_execve));
	assert_refused(run(SANDBOX_SUPERVISOR, probe_ptrace));
	/* The allowlist kills by default: a refusal there is SIGSYS, not an error return. */
	assert_int_equal(run(SANDBOX_SUPERVISOR, probe_socket_unix), -SIGSYS);
	/* What it must still do: write in its own directory. */
	assert_int_equal(run(SANDBOX_SUPERVISOR, probe_write_inside), DONE);
	if (sandbox_landlock_abi() > 0) {
		assert_int_equal(run(SANDBOX_SUPERVISOR, probe_write_outside), REFUSED);
	} else {
		print_message("Landlock: not in this kernel; the write-outside check is skipped\n");
	}
}

/* The children: programs run, no AF_UNIX and (but for the pull) no network socket, no write outside. */
static void test_children_profiles(void **state)
{
	(void)state;
	for (int p = SANDBOX_IMAGE_PULL; p <= SANDBOX_WORKSPACE; p++) {
		assert_int_equal(run(p, probe_run_program), DONE);
		assert_int_equal(run(p, probe_write_inside), DONE);
		assert_int_equal(run(p, probe_socket_unix), REFUSED);
		assert_int_equal(run(p, probe_socket_inet), p == SANDBOX_IMAGE_PULL ? DONE : REFUSED);
		assert_int_equal(run(p, probe_ptrace), REFUSED);
		if (sandbox_landlock_abi() > 0) {
			assert_int_equal(run(p, probe_write_outside), REFUSED);
		}
	}
}

/*
 * The patch door's children. The prepare child runs git, reads anywhere and
 * writes only its scratch; the writer runs nothing, reads only the scratch,
 * writes only the checkout (files, directories, symlinks; no directory
 * removed). Neither opens a socket.
 */
static void test_apply_profiles(void **state)
{
	bool ll = sandbox_landlock_abi() > 0;

	(void)state;
	assert_string_equal(sandbox_profile_name(SANDBOX_APPLY_PREPARE), "apply-prepare");
	assert_string_equal(sandbox_profile_name(SANDBOX_APPLY_WRITE), "apply-write");
	for (int p = SANDBOX_APPLY_PREPARE; p <= SANDBOX_APPLY_WRITE; p++) {
		assert_int_equal(run(p, probe_write_inside), DONE);
		assert_int_equal(run(p, probe_writer_ops), DONE);
		assert_int_equal(run(p, probe_read_ro), DONE);
		assert_int_equal(run(p, probe_socket_unix), REFUSED);
		assert_int_equal(run(p, probe_socket_inet), REFUSED);
		probe_connect_signer_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(probe_connect_signer_fd >= 0);
		assert_int_equal(run(p, probe_connect_signer), REFUSED);
		(void)close(probe_connect_signer_fd);
		assert_int_equal(run(p, probe_ptrace), REFUSED);
		if (ll) {
			assert_int_equal(run(p, probe_write_outside), REFUSED);
			assert_int_equal(run(p, probe_write_ro), REFUSED);
		}
	}
	/* prepare: git runs, and it reads anywhere */
	assert_int_equal(run(SANDBOX_APPLY_PREPARE, probe_run_program), DONE);
	assert_int_equal(run(SANDBOX_APPLY_PREPARE, probe_read_outside), DONE);
	assert_int_equal(run(SANDBOX_APPLY_PREPARE, probe_rmdir_inside), DONE);
	/* the writer: no program at all (seccomp: EPERM), nothing read but its input, no directory removed */
	assert_int_equal(run(SANDBOX_APPLY_WRITE, probe_execve), REFUSED);
	assert_int_equal(run(SANDBOX_APPLY_WRITE, probe_execve_seccomp), REFUSED);
	assert_int_equal(run(SANDBOX_APPLY_WRITE, probe_run_program), REFUSED);
	if (ll) {
		assert_int_equal(run(SANDBOX_APPLY_WRITE, probe_read_outside), REFUSED);
		assert_int_equal(run(SANDBOX_APPLY_WRITE, probe_rmdir_inside), REFUSED);
	} else {
		print_message("Landlock: not in this kernel; the writer's file-system checks are skipped\n");
	}
}

/* What the report and the box record say once applied (and the same in a status file). */
static int probe_report(void)
{
	struct sandbox_report rep;
	char text[256], want[256], line[256];
	/* Opened before: afterwards Landlock keeps the process out of /proc, and the probe is not allowed. */
	FILE *f = fopen("/proc/self/status", "re");
	int abi = sandbox_landlock_abi();
	bool seccomp = false, nnp = false;

	if (!f || sandbox_apply(SANDBOX_SUPERVISOR, box_dir, &rep) < 0 || !rep.seccomp || !rep.allowlist || !rep.nnp ||
	    !rep.caps_dropped || rep.landlock != (abi > 0) || rep.landlock_abi != abi) {
		return UNEXPECTED;
	}
	if (sandbox_report_format(&rep, text, sizeof(text)) < 0) {
		return UNEXPECTED;
	}
	if (rep.landlock) {
		(void)snprintf(
			want, sizeof(want),
			"{\"uid\":\"shared\",\"seccomp\":\"allowlist\",\"no_new_privs\":true,\"landlock\":\"abi %d\"}",
			rep.landlock_abi);
	} else {
		(void)snprintf(want, sizeof(want), "%s",
			       "{\"uid\":\"shared\",\"seccomp\":\"allowlist\",\"no_new_privs\":true,\"landlock\":"
			       "\"unsupported\"}");
	}
	if (strcmp(text, want) != 0 || sandbox_report_format(&rep, text, 20) != -ENOSPC) {
		return UNEXPECTED;
	}
	/* The kernel agrees (the e2e check reads the same file of a real supervisor). */
	while (f && fgets(line, sizeof(line), f)) {
		seccomp = seccomp || strcmp(line, "Seccomp:\t2\n") == 0;
		nnp = nnp || strcmp(line, "NoNewPrivs:\t1\n") == 0;
	}
	return seccomp && nnp ? DONE : UNEXPECTED;
}

static void test_report(void **state)
{
	(void)state;
	assert_int_equal(run(-1, probe_report), DONE);
}

/*
 * Not root (the daemon run by a user): no CAP_SETPCAP, so the bounding set
 * cannot be emptied, yet the profile holds (no capability can be gained
 * under no_new_privs). As root the child first becomes another uid.
 */
static int probe_not_root(void)
{
	struct sandbox_report rep;
	if (getuid() == 0 && (setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)) {
		return SETUP;
	}
	if (sandbox_apply(SANDBOX_SUPERVISOR, "/tmp", &rep) < 0 || !rep.caps_dropped || !rep.nnp || !rep.seccomp) {
		return UNEXPECTED;
	}
	return probe_socket_unix();
}

static void test_not_root(void **state)
{
	(void)state;
	assert_int_equal(run(-1, probe_not_root), -SIGSYS);
}

/* sandbox_drop_uid as root: a uid of the box range, no group, an empty bounding set; then the profile. */
static int probe_drop_uid(void)
{
	struct sandbox_report rep;
	uid_t r, e, s;
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	bool bnd = false;

	if (getuid() != 0 || !f) {
		return DONE; /* only root can change its uid */
	}
	if (sandbox_drop_uid(SANDBOX_UID_BASE + 7, SANDBOX_UID_BASE + 7) < 0 || getresuid(&r, &e, &s) < 0 ||
	    r != SANDBOX_UID_BASE + 7 || s != r || getgroups(0, NULL) != 0) {
		return UNEXPECTED;
	}
	if (sandbox_apply(SANDBOX_SUPERVISOR, "/tmp", &rep) < 0 || !rep.own_uid) {
		return UNEXPECTED;
	}
	while (fgets(line, sizeof(line), f)) {
		bnd = bnd || strcmp(line, "CapBnd:\t0000000000000000\n") == 0;
	}
	return bnd ? DONE : UNEXPECTED;
}

static void test_drop_uid(void **state)
{
	(void)state;
	assert_int_equal(run(-1, probe_drop_uid), DONE);
}

static void test_uid_range(void **state)
{
	uid_t u = 0;
	(void)state;
	assert_int_equal(sandbox_box_uid(0, &u), 0);
	assert_int_equal(u, SANDBOX_UID_BASE);
	assert_int_equal(sandbox_box_uid(SANDBOX_UID_SLOTS - 1, &u), 0);
	assert_int_equal(u, SANDBOX_UID_BASE + SANDBOX_UID_SLOTS - 1);
	assert_int_equal(sandbox_box_uid(SANDBOX_UID_SLOTS, &u), -ERANGE); /* one past the range */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_controls),	  cmocka_unit_test(test_supervisor_profile),
		cmocka_unit_test(test_children_profiles), cmocka_unit_test(test_report),
		cmocka_unit_test(test_not_root),	  cmocka_unit_test(test_drop_uid),
		cmocka_unit_test(test_uid_range),	  cmocka_unit_test(test_apply_profiles),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
