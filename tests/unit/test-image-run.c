/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#include "banned.h"
#include "image/util.h"

/*
 * fd lifetime of the helper-program runner (image_run_opts), which the
 * threaded daemon calls from an API connection's thread (the workspace
 * builder, the image child, the patch door's git): it must close each of
 * its fds exactly once. A second close of a number it already closed hits
 * whatever another thread opened meanwhile: in the daemon, the connection of
 * a concurrent `POST /v1/boxes`, whose client then got a reset and the next
 * client that connection number went to got the first one's reply.
 */

#define HELD 8

/* The fds open in this process (the listing's own fd not counted). */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d))) {
		n += de->d_name[0] != '.';
	}
	(void)closedir(d);
	return n - 1;
}

struct other {
	const char *ready, *go; /* fifos: the child says it runs; the thread lets it exit */
	int baseline; /* fds open before image_run_opts */
	int held[HELD + 1]; /* what this "other thread" opened while the child ran, and keeps */
	int err;
};

/* Another thread of the process: while the child runs (and the runner closed its pipes' write ends), it opens fds. */
static void *other_thread(void *arg)
{
	struct other *o = arg;
	char c;
	int go, i;

	o->held[0] = open(o->ready, O_RDONLY | O_CLOEXEC); /* until the child opened it: the child runs */
	if (o->held[0] < 0 || read(o->held[0], &c, 1) != 1) {
		o->err = 1;
		return NULL;
	}
	/* The runner's fds now: the read ends of its stdout and stderr pipes (the write ends are closed), and held[0]. */
	for (i = 0; i < 10000 && count_fds() != o->baseline + 3; i++) {
		(void)nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	}
	if (i == 10000) {
		o->err = 2;
	}
	/* The lowest free numbers: the ones the runner closed come back here. */
	for (i = 1; i <= HELD; i++) {
		o->held[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	go = open(o->go, O_WRONLY | O_CLOEXEC);
	if (go < 0 || write(go, "g\n", 2) != 2) {
		o->err = 3;
	}
	if (go >= 0) {
		(void)close(go);
	}
	return NULL;
}

static void test_run_closes_nothing_of_another_thread(void **state)
{
	char dir[] = "/tmp/test-image-run-XXXXXX";
	char ready[64], go[64];
	struct buf out, err;
	struct other o = { .ready = ready, .go = go };
	pthread_t t;
	(void)state;

	assert_non_null(mkdtemp(dir));
	(void)snprintf(ready, sizeof(ready), "%s/ready", dir);
	(void)snprintf(go, sizeof(go), "%s/go", dir);
	assert_int_equal(mkfifo(ready, 0600), 0);
	assert_int_equal(mkfifo(go, 0600), 0);
	{
		char *argv[] = { "/bin/sh", "-c", "echo r > \"$0\"; read x < \"$1\"; echo done", ready, go, NULL };
		char *envp[] = { "PATH=/usr/bin:/bin", NULL };
		struct image_run_opts ro = { .out = &out, .err = &err, .timeout_s = 60, .keep_fd = -1, .stdin_fd = -1 };
		assert_int_equal(buf_init(&out, 4096, 0), 0);
		assert_int_equal(buf_init(&err, 4096, 0), 0);
		o.baseline = count_fds();
		assert_int_equal(pthread_create(&t, NULL, other_thread, &o), 0);
		assert_int_equal(image_run_opts(argv, envp, &ro), 0);
		assert_int_equal(pthread_join(t, NULL), 0);
	}
	assert_int_equal(o.err, 0);
	assert_int_equal(buf_len(&out), 5);
	assert_memory_equal(buf_ptr(&out), "done\n", 5);
	/* Every fd the other thread opened is still open: the runner closed none of them. */
	for (int i = 0; i <= HELD; i++) {
		assert_true(o.held[i] >= 0);
		assert_int_equal(fcntl(o.held[i], F_GETFD), FD_CLOEXEC);
		(void)close(o.held[i]);
	}
	assert_int_equal(count_fds(), o.baseline);
	buf_release(&out);
	buf_release(&err);
	(void)unlink(ready);
	(void)unlink(go);
	(void)rmdir(dir);
}

/* closep leaves -1 behind: a second closep (or the cleanup at scope end) closes nothing. */
static void test_closep_resets(void **state)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int other;
	(void)state;

	assert_true(fd >= 0);
	closep(&fd);
	assert_int_equal(fd, -1);
	other = open("/dev/null", O_RDONLY | O_CLOEXEC); /* takes the number fd had */
	assert_true(other >= 0);
	closep(&fd);
	assert_int_equal(fcntl(other, F_GETFD), FD_CLOEXEC);
	(void)close(other);
	{
		_cleanup_close_ int scoped = open("/dev/null", O_RDONLY | O_CLOEXEC);
		assert_true(scoped >= 0);
		closep(&scoped); /* then the cleanup runs on -1 */
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_closep_resets),
		cmocka_unit_test(test_run_closes_nothing_of_another_thread),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
