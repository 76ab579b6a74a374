/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The supervisor's side of a diff (src/daemon/sup-diff.c, with the agent
 * client's checks in src/vmm/agent-client.c) driven from both ends: the test
 * plays the guest over a socketpair as the tkbox.agent port (real frames,
 * read by a real agent_client) and the daemon over a SOCK_SEQPACKET pair
 * (supmsg, both monitors, ipc with the patch's memfd as a real fd).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "banned.h"
#include "crypto.h"
#include "daemon/ipc.h"
#include "daemon/sup-diff.h"
#include "frame.h"
#include "patch/patch.h"
#include "vmm/agent-client.h"

static struct {
	struct agent_client *c;
	int guest; /* the guest's end of the agent port */
	int ctl[2]; /* [0] the supervisor's end, [1] the daemon's */
	struct supmon mon_sup, mon_d;
	struct sup_diff d;
} T;

/* The supervisor's send (supervisor.c's send_msg_fds): the monitor, the encoder, ipc with the fds. */
static int t_send(void *ctx, const struct supmsg *m, const int *fds)
{
	const char *why = NULL;
	(void)ctx;
	return ipc_send_msg(T.ctl[0], &T.mon_sup, SUPMSG_TO_DAEMON, m, fds, &why);
}

static const struct supmsg boot_msg = { .op = SUPMSG_BOOT,
					.box_id = "b1",
					.rootfs = "/r.ext4",
					.state_dir = "/s",
					.guest = "/g",
					.accel = "auto",
					.vcpus = 1,
					.mem_mib = 256,
					.lifetime_s = 60 };

static int setup(void **state)
{
	int sp[2];
	struct supmsg ready = { .op = SUPMSG_READY, .accel = "tcg", .isolation = "emulated" };
	(void)state;

	memset(&T, 0, sizeof(T));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	assert_int_equal(agent_client_new(sp[0], &T.c), 0);
	T.guest = sp[1];
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, T.ctl), 0);
	supmon_init(&T.mon_sup);
	supmon_init(&T.mon_d);
	/* Both monitors up: boot, then ready. */
	assert_int_equal(supmon_apply(&T.mon_sup, SUPMSG_TO_SUPERVISOR, &boot_msg, NULL), 0);
	assert_int_equal(supmon_apply(&T.mon_d, SUPMSG_TO_SUPERVISOR, &boot_msg, NULL), 0);
	assert_int_equal(supmon_apply(&T.mon_sup, SUPMSG_TO_DAEMON, &ready, NULL), 0);
	assert_int_equal(supmon_apply(&T.mon_d, SUPMSG_TO_DAEMON, &ready, NULL), 0);
	sup_diff_init(&T.d, t_send, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	sup_diff_release(&T.d);
	agent_client_free(T.c);
	(void)close(T.guest);
	(void)close(T.ctl[0]);
	(void)close(T.ctl[1]);
	return 0;
}

/* The daemon asks for diff n: both monitors pass it, the supervisor starts it; the guest reads AGENT_MSG_DIFF. */
static uint32_t ask(int64_t n)
{
	struct supmsg m = { .op = SUPMSG_DIFF, .diff = n };
	struct agent_event ev;
	struct frame_decoder dec;
	struct buf payload;
	struct agent_msg am = { 0 };
	uint8_t byte, type;
	size_t used;
	uint32_t id;
	int r = 0;

	assert_int_equal(supmon_apply(&T.mon_d, SUPMSG_TO_SUPERVISOR, &m, NULL), 0);
	assert_int_equal(supmon_apply(&T.mon_sup, SUPMSG_TO_SUPERVISOR, &m, NULL), 0);
	sup_diff_start(&T.d, T.c, n, 1000);
	assert_int_equal(sup_diff_deadline(&T.d), 1000 + (uint64_t)SUP_DIFF_TIMEOUT_S * 1000);
	/* The request goes out (nothing comes back yet). */
	assert_int_equal(agent_client_next(T.c, 0, &ev), 0);
	assert_int_equal(frame_decoder_init(&dec, FRAME_MAX_PAYLOAD), 0);
	assert_int_equal(buf_init(&payload, FRAME_MAX_PAYLOAD, 0), 0);
	while (r == 0) {
		assert_int_equal(read(T.guest, &byte, 1), 1);
		r = frame_decoder_feed(&dec, &byte, 1, &used);
	}
	assert_int_equal(r, 1);
	assert_int_equal(frame_decoder_take(&dec, &type, &payload), 0);
	assert_int_equal(type, AGENT_MSG_DIFF);
	assert_int_equal(agent_msg_decode(type, buf_ptr(&payload), buf_len(&payload), &am), 0);
	id = am.id;
	assert_true(id >= 1 && id <= AGENT_MAX_ID);
	agent_msg_release(&am);
	buf_release(&payload);
	frame_decoder_release(&dec);
	return id;
}

static void guest_write(const struct buf *b)
{
	const uint8_t *p = buf_ptr(b);
	size_t n = buf_len(b);

	while (n > 0) {
		ssize_t k = write(T.guest, p, n);
		assert_true(k > 0);
		p += k;
		n -= (size_t)k;
	}
}

/* The guest sends the patch as DIFF_DATA frames of at most AGENT_MAX_DATA bytes (small: fits the socket buffer). */
static void guest_data(uint32_t id, const void *p, size_t n)
{
	struct buf b;
	const uint8_t *q = p;

	assert_int_equal(buf_init(&b, 2 * AGENT_MAX_DATA, 0), 0);
	for (size_t off = 0; off < n;) {
		size_t k = MIN(n - off, AGENT_MAX_DATA);
		assert_int_equal(agent_encode_data(&b, AGENT_MSG_DIFF_DATA, id, q + off, k), 0);
		guest_write(&b);
		buf_reset(&b);
		off += k;
	}
	buf_release(&b);
}

/* Many bytes: a child writes them while the supervisor reads; the events' data is counted up to n. */
static void guest_data_big(uint32_t id, const void *p, size_t n)
{
	struct agent_event ev;
	size_t got = 0;
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		guest_data(id, p, n);
		_exit(0);
	}
	while (got < n) {
		/* A generous wait: this is a hang guard, not a timing. */
		assert_int_equal(agent_client_next(T.c, 60000, &ev), 1);
		assert_int_equal(ev.type, AGENT_EV_DIFF_DATA);
		got += ev.len;
		assert_true(sup_diff_event(&T.d, &ev));
	}
	assert_int_equal(got, n);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void guest_json(uint8_t type, const char *json)
{
	struct buf b;

	assert_int_equal(buf_init(&b, 1 << 20, 0), 0);
	assert_int_equal(frame_encode(&b, type, json, strlen(json)), 0);
	guest_write(&b);
	buf_release(&b);
}

/*
 * Feed the guest's frames to the supervisor until the agent client has
 * nothing more: 0, or its error. The guest's frames were written whole
 * before: a look at the socket without waiting sees them all.
 */
static int pump(void)
{
	struct agent_event ev;
	int r;

	while ((r = agent_client_next(T.c, 0, &ev)) == 1) {
		assert_true(sup_diff_event(&T.d, &ev));
	}
	return r;
}

/* The daemon's reader: one message through its monitor, its fd (if any) in *ret_fd. */
static void daemon_recv(struct supmsg *m, int *ret_fd)
{
	struct buf msg;
	int fds[IPC_MAX_FDS] = { -1, -1 };
	size_t nfds = 0;
	const char *why = NULL;

	assert_int_equal(buf_init(&msg, SUPMSG_MAX + 1, 0), 0);
	assert_int_equal(ipc_recv(T.ctl[1], &msg, fds, 1, &nfds), 0);
	if (supmon_receive(&T.mon_d, buf_ptr(&msg), buf_len(&msg), m, &why) < 0) {
		fail_msg("the daemon's monitor refused the supervisor's message: %s", why);
	}
	assert_int_equal(nfds, supmsg_fds(m));
	*ret_fd = nfds ? fds[0] : -1;
	buf_release(&msg);
}

/* Nothing more came for the daemon. */
static void daemon_none(void)
{
	uint8_t b[16];
	assert_int_equal(recv(T.ctl[1], b, sizeof(b), MSG_DONTWAIT), -1);
}

static const char PATCH[] =
	"diff --git a/a.txt b/a.txt\n"
	"index 257cc5642cb1a054f08cc83f2d943e56fd3ebe99..3bd1f0e29744a1f32b08d5650e62e2e62afb177c 100644\n"
	"--- a/a.txt\n"
	"+++ b/a.txt\n"
	"@@ -1 +1,2 @@\n"
	" foo\n"
	"+bar\n"
	"diff --git a/new.sh b/new.sh\n"
	"new file mode 100755\n"
	"index 0000000000000000000000000000000000000000..257cc5642cb1a054f08cc83f2d943e56fd3ebe99\n"
	"--- /dev/null\n"
	"+++ b/new.sh\n"
	"@@ -0,0 +1 @@\n"
	"+foo\n";

/* The whole exchange: the daemon gets the patch in a sealed memfd, its digest, its file count and the notices. */
static void test_diff_ok(void **state)
{
	struct supmsg m;
	char end[512], hex[SHA256_HEX_LEN + 1], got[sizeof(PATCH)];
	uint32_t id;
	int fd, seals;
	(void)state;

	id = ask(7);
	guest_data(id, PATCH, 40);
	guest_data(id, PATCH + 40, sizeof(PATCH) - 1 - 40);
	(void)snprintf(end, sizeof(end),
		       "{\"bytes\":%zu,\"id\":%u,\"notices\":[[\".git/config\",\"a path with a .git segment is left "
		       "out\"],[\"p\\u001b[2J\",\"a fifo is left out\"]]}",
		       sizeof(PATCH) - 1, id);
	guest_json(AGENT_MSG_DIFF_END, end);
	assert_int_equal(pump(), 0);
	daemon_recv(&m, &fd);
	assert_int_equal(m.op, SUPMSG_DIFF_DONE);
	assert_true(m.ok);
	assert_int_equal(m.diff, 7);
	assert_int_equal(m.patch_bytes, sizeof(PATCH) - 1);
	assert_int_equal(m.files, 2);
	assert_int_equal(sha256_hex(PATCH, sizeof(PATCH) - 1, hex), 0);
	assert_string_equal(m.sha256, hex);
	assert_int_equal(m.n_notices, 2);
	assert_string_equal(m.notices[0].path, ".git/config");
	/* The guest's control bytes never reach the daemon (or a terminal after it). */
	assert_string_equal(m.notices[1].path, "p\\x1b[2J");
	/* The memfd: exactly the patch, sealed against any change. */
	assert_true(fd >= 0);
	seals = fcntl(fd, F_GET_SEALS);
	assert_true(seals >= 0);
	assert_int_equal(seals & (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
			 F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	assert_int_equal(pread(fd, got, sizeof(got), 0), (ssize_t)sizeof(PATCH) - 1);
	assert_memory_equal(got, PATCH, sizeof(PATCH) - 1);
	assert_int_equal(write(fd, "x", 1), -1);
	(void)close(fd);
	supmsg_release(&m);
	assert_int_equal(sup_diff_deadline(&T.d), 0);
	/* Answered: the next diff may go. */
	id = ask(8);
	(void)snprintf(end, sizeof(end), "{\"bytes\":0,\"id\":%u,\"notices\":[]}", id);
	guest_json(AGENT_MSG_DIFF_END, end);
	assert_int_equal(pump(), 0);
	daemon_recv(&m, &fd);
	assert_true(m.ok);
	assert_int_equal(m.files, 0); /* an empty patch: nothing changed */
	assert_int_equal(m.patch_bytes, 0);
	(void)close(fd);
	supmsg_release(&m);
}

/* The guest could not make it: not ok with its message, escaped; no fd. */
static void test_diff_guest_error(void **state)
{
	struct supmsg m;
	char json[256];
	uint32_t id;
	int fd;
	(void)state;

	id = ask(1);
	(void)snprintf(json, sizeof(json),
		       "{\"code\":\"diff\",\"id\":%u,\"message\":\"over PATCH_MAX_FILES (4096)\\u001b]0;x\\u0007\"}",
		       id);
	guest_json(AGENT_MSG_ERROR, json);
	assert_int_equal(pump(), 0);
	daemon_recv(&m, &fd);
	assert_false(m.ok);
	assert_int_equal(fd, -1);
	assert_string_equal(m.error, "the guest could not make the patch: over PATCH_MAX_FILES (4096)\\x1b]0;x\\x07");
	supmsg_release(&m);
}

/* The strict parser refuses what the guest made: not ok, the parser's words. */
static void test_diff_refused(void **state)
{
	static const char bad[] = "diff --git a/../x b/../x\n"
				  "new file mode 100644\n"
				  "--- /dev/null\n"
				  "+++ b/../x\n"
				  "@@ -0,0 +1 @@\n"
				  "+x\n";
	struct supmsg m;
	char end[128];
	uint32_t id;
	int fd;
	(void)state;

	id = ask(2);
	guest_data(id, bad, sizeof(bad) - 1);
	(void)snprintf(end, sizeof(end), "{\"bytes\":%zu,\"id\":%u,\"notices\":[]}", sizeof(bad) - 1, id);
	guest_json(AGENT_MSG_DIFF_END, end);
	assert_int_equal(pump(), 0);
	daemon_recv(&m, &fd);
	assert_false(m.ok);
	assert_int_equal(fd, -1);
	assert_non_null(strstr(m.error, "the box's patch was refused: "));
	supmsg_release(&m);
}

/* One past PATCH_MAX_BYTES: not ok naming the cap at once; the rest is dropped; a new diff waits for the guest. */
static void test_diff_cap(void **state)
{
	uint8_t *big = malloc(PATCH_MAX_BYTES + 1);
	struct supmsg m;
	char end[128];
	uint32_t id;
	int fd;
	(void)state;

	assert_non_null(big);
	memset(big, 'x', PATCH_MAX_BYTES + 1);
	id = ask(3);
	guest_data_big(id, big, PATCH_MAX_BYTES);
	assert_int_equal(pump(), 0);
	daemon_none(); /* the cap itself passes */
	guest_data(id, big, 1);
	assert_int_equal(pump(), 0);
	daemon_recv(&m, &fd);
	assert_false(m.ok);
	assert_int_equal(fd, -1);
	assert_string_equal(m.error, "the box's patch is over PATCH_MAX_BYTES (32 MiB): make fewer or smaller changes "
				     "in /workspace, or copy large files out another way");
	supmsg_release(&m);
	assert_int_equal(sup_diff_deadline(&T.d), 0);
	/* The guest still sends: dropped, nothing more for the daemon. */
	guest_data(id, big, 1000);
	assert_int_equal(pump(), 0);
	daemon_none();
	/* A new diff while the guest has not ended the old one: not ok, try again. */
	{
		struct supmsg q = { .op = SUPMSG_DIFF, .diff = 4 };
		assert_int_equal(supmon_apply(&T.mon_d, SUPMSG_TO_SUPERVISOR, &q, NULL), 0);
		assert_int_equal(supmon_apply(&T.mon_sup, SUPMSG_TO_SUPERVISOR, &q, NULL), 0);
		sup_diff_start(&T.d, T.c, 4, 0);
	}
	daemon_recv(&m, &fd);
	assert_false(m.ok);
	assert_int_equal(m.diff, 4);
	assert_non_null(strstr(m.error, "still sending"));
	supmsg_release(&m);
	/* The guest's end of the old one: error, and then a diff may go again. */
	(void)snprintf(end, sizeof(end), "{\"code\":\"diff\",\"id\":%u,\"message\":\"x\"}", id);
	guest_json(AGENT_MSG_ERROR, end);
	assert_int_equal(pump(), 0);
	daemon_none();
	id = ask(5);
	assert_true(id > 0);
	free(big);
}

/* The supervisor's own deadline (its loop calls sup_diff_fail when sup_diff_deadline passed) and a stop. */
static void test_diff_deadline_stop(void **state)
{
	struct supmsg m, stop = { .op = SUPMSG_STOP };
	char end[128];
	uint32_t id;
	int fd;
	(void)state;

	id = ask(9);
	sup_diff_fail(&T.d, "the box did not make its patch within SUP_DIFF_TIMEOUT_S (300 s); the box goes on");
	daemon_recv(&m, &fd);
	assert_false(m.ok);
	assert_non_null(strstr(m.error, "SUP_DIFF_TIMEOUT_S"));
	supmsg_release(&m);
	/* The guest answers late: dropped. */
	(void)snprintf(end, sizeof(end), "{\"bytes\":0,\"id\":%u,\"notices\":[]}", id);
	guest_json(AGENT_MSG_DIFF_END, end);
	assert_int_equal(pump(), 0);
	daemon_none();
	/* A diff pending when the box stops is answered while stopping. */
	(void)ask(10);
	assert_int_equal(supmon_apply(&T.mon_d, SUPMSG_TO_SUPERVISOR, &stop, NULL), 0);
	assert_int_equal(supmon_apply(&T.mon_sup, SUPMSG_TO_SUPERVISOR, &stop, NULL), 0);
	sup_diff_fail(&T.d, "the box stopped before its patch was made");
	daemon_recv(&m, &fd);
	assert_false(m.ok);
	assert_int_equal(m.diff, 10);
	supmsg_release(&m);
	sup_diff_fail(&T.d, "again"); /* nothing pending: nothing sent */
	daemon_none();
}

/* Guest frames the host never asked for, a second end, a byte count that is not the data's: cut off. */
static void test_diff_violations(void **state)
{
	struct agent_event ev;
	char end[128];
	uint32_t id;
	(void)state;

	/* DIFF_DATA with no diff asked. */
	guest_data(5, "x", 1);
	assert_int_equal(agent_client_next(T.c, 1000, &ev), -EPROTO);
	assert_non_null(strstr(agent_client_violation(T.c), "never asked for"));
	teardown(NULL);
	setup(NULL);

	/* A byte count that is not the data's. */
	id = ask(1);
	guest_data(id, PATCH, 10);
	(void)snprintf(end, sizeof(end), "{\"bytes\":11,\"id\":%u,\"notices\":[]}", id);
	guest_json(AGENT_MSG_DIFF_END, end);
	assert_int_equal(agent_client_next(T.c, 1000, &ev), 1); /* the data */
	assert_true(sup_diff_event(&T.d, &ev));
	assert_int_equal(agent_client_next(T.c, 1000, &ev), -EPROTO);
	assert_non_null(strstr(agent_client_violation(T.c), "byte count"));
	teardown(NULL);
	setup(NULL);

	/* A second end; an end for another id. */
	id = ask(1);
	(void)snprintf(end, sizeof(end), "{\"bytes\":0,\"id\":%u,\"notices\":[]}", id);
	guest_json(AGENT_MSG_DIFF_END, end);
	guest_json(AGENT_MSG_DIFF_END, end);
	assert_int_equal(agent_client_next(T.c, 1000, &ev), 1);
	assert_true(sup_diff_event(&T.d, &ev));
	assert_int_equal(agent_client_next(T.c, 1000, &ev), -EPROTO);
	assert_non_null(strstr(agent_client_violation(T.c), "never asked for or that is over"));
	teardown(NULL);
	setup(NULL);
	id = ask(1);
	(void)snprintf(end, sizeof(end), "{\"bytes\":0,\"id\":%u,\"notices\":[]}", id + 1);
	guest_json(AGENT_MSG_DIFF_END, end);
	assert_int_equal(agent_client_next(T.c, 1000, &ev), -EPROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_diff_ok, setup, teardown),
		cmocka_unit_test_setup_teardown(test_diff_guest_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_diff_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_diff_cap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_diff_deadline_stop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_diff_violations, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
