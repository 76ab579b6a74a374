/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "banned.h"
#include "daemon/ipc.h"
#include "daemon/supmsg.h"

static void pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	/* Room for a message past SUPMSG_MAX. */
	int sz = 4 << 20;
	(void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	(void)setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
}

static void test_message_and_fd(void **state)
{
	int sv[2], p[2], fds[IPC_MAX_FDS] = { -1, -1 };
	struct buf in;
	size_t nfds = 0;
	json_t *v = json_pack("{s:s,s:i}", "op", "exec", "exec", 7);
	char c = 0;
	(void)state;

	pair(sv);
	assert_int_equal(pipe(p), 0);
	assert_int_equal(buf_init(&in, SUPMSG_MAX + 1, 0), 0);
	assert_int_equal(ipc_send(sv[0], v, &p[1], 1), 0);
	(void)close(p[1]);
	assert_int_equal(ipc_recv(sv[1], &in, fds, IPC_MAX_FDS, &nfds), 0);
	assert_int_equal(nfds, 1);
	assert_true(buf_len(&in) > 0);
	assert_memory_equal(buf_ptr(&in), "{\"op\":\"exec\",\"exec\":7}", buf_len(&in));
	/* The passed fd is the pipe's write end, close-on-exec. */
	assert_true(fcntl(fds[0], F_GETFD) & FD_CLOEXEC);
	assert_int_equal(write(fds[0], "x", 1), 1);
	assert_int_equal(read(p[0], &c, 1), 1);
	assert_int_equal(c, 'x');
	(void)close(fds[0]);
	(void)close(p[0]);
	json_decref(v);
	buf_release(&in);
	(void)close(sv[0]);
	(void)close(sv[1]);
}

/*
 * A supervisor that stops reading: the daemon's sends fill its queue, then
 * fail with -EAGAIN instead of blocking (the daemon holds its lock while it
 * sends). Without MSG_DONTWAIT this test hangs and meson's timeout fails it.
 */
static void test_never_blocks_on_supervisor(void **state)
{
	const char *env[] = { "A=1", NULL };
	const struct supmsg boot = { .op = SUPMSG_BOOT,
				     .box_id = "b1",
				     .rootfs = "/r.ext4",
				     .state_dir = "/s",
				     .guest = "/g",
				     .accel = "auto",
				     .vcpus = 1,
				     .mem_mib = 256,
				     .env = (char **)env,
				     .envc = 1,
				     .lifetime_s = 60 };
	int sv[2], r = 0, sent = 0;

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	for (; sent < 100000; sent++) {
		struct supmon mon = { 0 }; /* each send a first boot: allowed */
		r = ipc_send_msg(sv[0], &mon, SUPMSG_TO_SUPERVISOR, &boot, NULL, NULL);
		if (r < 0) {
			break;
		}
	}
	assert_int_equal(r, -EAGAIN);
	assert_true(sent > 0);
	(void)close(sv[0]);
	(void)close(sv[1]);
}

static void test_caps(void **state)
{
	int sv[2], fds[IPC_MAX_FDS];
	struct buf in;
	size_t nfds = 0;
	char *big = malloc(SUPMSG_MAX + 2);
	json_t *v;
	(void)state;

	pair(sv);
	assert_int_equal(buf_init(&in, SUPMSG_MAX + 1, 0), 0);
	/* A message whose compact form is exactly SUPMSG_MAX bytes passes; one more byte is refused by the sender. */
	memset(big, 'a', SUPMSG_MAX);
	big[SUPMSG_MAX - 8] = '\0'; /* {"a":"..."} adds 8 bytes */
	v = json_pack("{s:s}", "a", big);
	assert_int_equal(ipc_send(sv[0], v, NULL, 0), 0);
	json_decref(v);
	assert_int_equal(ipc_recv(sv[1], &in, fds, IPC_MAX_FDS, &nfds), 0);
	assert_int_equal(buf_len(&in), SUPMSG_MAX);
	big[SUPMSG_MAX - 8] = 'a';
	big[SUPMSG_MAX - 7] = '\0';
	v = json_pack("{s:s}", "a", big);
	assert_int_equal(ipc_send(sv[0], v, NULL, 0), -E2BIG);
	json_decref(v);

	/* A datagram past the cap from a peer that ignores it: -EPROTO, nothing kept. */
	memset(big, 'a', SUPMSG_MAX + 1);
	assert_int_equal(send(sv[0], big, SUPMSG_MAX + 1, 0), SUPMSG_MAX + 1);
	assert_int_equal(ipc_recv(sv[1], &in, fds, IPC_MAX_FDS, &nfds), -EPROTO);
	assert_int_equal(buf_len(&in), 0);

	/* More fds than the receiver takes: -EPROTO, and the extra fds are closed, not leaked. */
	{
		int p[2];
		v = json_pack("{s:s}", "op", "x");
		assert_int_equal(pipe(p), 0);
		assert_int_equal(ipc_send(sv[0], v, p, 2), 0);
		(void)close(p[0]);
		(void)close(p[1]);
		assert_int_equal(ipc_recv(sv[1], &in, fds, 1, &nfds), -EPROTO);
		json_decref(v);
	}

	/* More fds than IPC_MAX_FDS cannot be sent. */
	{
		int three[3] = { 0, 1, 2 };
		v = json_pack("{s:s}", "op", "x");
		assert_int_equal(ipc_send(sv[0], v, three, 3), -E2BIG);
		json_decref(v);
	}

	/* The peer is gone: -ECONNRESET. */
	(void)close(sv[0]);
	assert_int_equal(ipc_recv(sv[1], &in, fds, IPC_MAX_FDS, &nfds), -ECONNRESET);
	(void)close(sv[1]);
	buf_release(&in);
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_message_and_fd),
		cmocka_unit_test(test_caps),
		cmocka_unit_test(test_never_blocks_on_supervisor),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
