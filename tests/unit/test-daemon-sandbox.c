/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "banned.h"
#include "daemon/sandbox.h"

/*
 * In a child: apply the supervisor's sandbox, then try what it must refuse.
 * Exit codes: 0 every check held, 10+ the failing check.
 */
static int child(void)
{
	char *argv[] = { "/bin/true", NULL };
	char *envp[] = { NULL };
	int fds[2];

	if (sandbox_supervisor() < 0) {
		return 10;
	}
	if (prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0) {
		return 11;
	}
	/* No new program: execve fails with EPERM instead of replacing the process. */
	if (execve(argv[0], argv, envp) != -1 || errno != EPERM) {
		return 12;
	}
	if (mount("none", "/tmp", "tmpfs", 0, NULL) != -1 || errno != EPERM) {
		return 13;
	}
	/* No capability left, even as root. */
	{
		FILE *f = fopen("/proc/self/status", "re");
		char line[256];
		bool eff = false, bnd = false;
		while (f && fgets(line, sizeof(line), f)) {
			eff = eff || strcmp(line, "CapEff:\t0000000000000000\n") == 0;
			bnd = bnd || strcmp(line, "CapBnd:\t0000000000000000\n") == 0;
		}
		if (f) {
			(void)fclose(f);
		}
		if (!eff || !bnd) {
			return 16;
		}
	}
	/* What it still needs works: pipes, forks. */
	if (pipe(fds) < 0) {
		return 14;
	}
	{
		pid_t p = fork();
		int st;
		if (p == 0) {
			_exit(7);
		}
		if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 7) {
			return 15;
		}
	}
	return 0;
}

static void test_sandbox(void **state)
{
	pid_t pid;
	int st = 0;
	(void)state;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		_exit(child());
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* Without the sandbox the same execve works: the test above fails without the code it checks. */
static void test_without_sandbox_exec_works(void **state)
{
	pid_t pid;
	int st = 0;
	(void)state;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char *argv[] = { "/bin/true", NULL };
		char *envp[] = { NULL };
		(void)execve(argv[0], argv, envp);
		_exit(99);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sandbox),
		cmocka_unit_test(test_without_sandbox_exec_works),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
