/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host's agent client against a fake guest on a socketpair: a normal
 * exchange, and guests that lie or flood. The host must cut a lying guest
 * off and stay bounded in memory whatever it sends.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "banned.h"
#include "frame.h"
#include "vmm/agent-client.h"

/*
 * Under ASan, freed blocks stay resident in its quarantine, so RSS measures
 * the sanitizer, not the client: the memory-bound checks run in normal builds.
 */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_MEANINGFUL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSS_MEANINGFUL 0
#endif
#endif
#ifndef RSS_MEANINGFUL
#define RSS_MEANINGFUL 1
#endif

struct pair {
	struct agent_client *c;
	int guest;
};

static void pair_open(struct pair *p)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(agent_client_new(sv[0], &p->c), 0);
	p->guest = sv[1];
}

static void pair_close(struct pair *p)
{
	agent_client_free(p->c);
	(void)close(p->guest);
}

static void guest_send(struct pair *p, const struct buf *b)
{
	assert_int_equal(write(p->guest, buf_ptr(b), buf_len(b)), (ssize_t)buf_len(b));
}

static void guest_send_json(struct pair *p, uint8_t type, const char *json)
{
	struct buf b;
	assert_int_equal(buf_init(&b, 1 << 20, 0), 0);
	assert_int_equal(frame_encode(&b, type, json, strlen(json)), 0);
	guest_send(p, &b);
	buf_release(&b);
}

/* Read one frame the host sent and decode it. */
static void guest_recv(struct pair *p, struct agent_msg *m)
{
	struct frame_decoder d;
	struct buf payload;
	uint8_t byte, type;
	size_t used;
	int r = 0;

	assert_int_equal(frame_decoder_init(&d, FRAME_MAX_PAYLOAD), 0);
	assert_int_equal(buf_init(&payload, FRAME_MAX_PAYLOAD, 0), 0);
	while (r == 0) {
		assert_int_equal(read(p->guest, &byte, 1), 1);
		r = frame_decoder_feed(&d, &byte, 1, &used);
	}
	assert_int_equal(r, 1);
	assert_int_equal(frame_decoder_take(&d, &type, &payload), 0);
	assert_int_equal(agent_msg_decode(type, buf_ptr(&payload), buf_len(&payload), m), 0);
	/* Data views would dangle: the tests only look at JSON messages here. */
	m->data = NULL;
	buf_release(&payload);
	frame_decoder_release(&d);
}

static void test_exec_exchange(void **state)
{
	char *argv[] = { "echo", "hi", NULL };
	struct pair p;
	struct agent_event ev;
	struct agent_msg m;
	struct buf b;
	uint32_t id;
	(void)state;

	pair_open(&p);
	assert_int_equal(agent_client_exec(p.c, argv, NULL, NULL, false, &id), 0);
	/* Nothing arrives yet: the call flushes the request, then times out. */
	assert_int_equal(agent_client_next(p.c, 10, &ev), 0);
	guest_recv(&p, &m);
	assert_int_equal(m.type, AGENT_MSG_EXEC);
	assert_int_equal(m.id, id);
	assert_string_equal(m.argv[1], "hi");
	agent_msg_release(&m);

	assert_int_equal(buf_init(&b, 1 << 20, 0), 0);
	{
		struct agent_msg s = { .type = AGENT_MSG_STARTED, .id = id, .pid = 42 };
		assert_int_equal(agent_msg_encode(&s, &b), 0);
		assert_int_equal(agent_encode_data(&b, AGENT_MSG_STDOUT, id, "hi\n", 3), 0);
	}
	guest_send(&p, &b);
	buf_reset(&b);
	assert_int_equal(agent_client_next(p.c, 1000, &ev), 1);
	assert_int_equal(ev.type, AGENT_EV_STARTED);
	assert_int_equal(ev.pid, 42);
	assert_int_equal(agent_client_next(p.c, 1000, &ev), 1);
	assert_int_equal(ev.type, AGENT_EV_STDOUT);
	assert_int_equal(ev.len, 3);
	assert_memory_equal(ev.data, "hi\n", 3);
	/* The host hands the output credit back before it waits again. */
	assert_int_equal(agent_client_next(p.c, 10, &ev), 0);
	guest_recv(&p, &m);
	assert_int_equal(m.type, AGENT_MSG_WINDOW);
	assert_int_equal(m.id, id);
	assert_int_equal(m.bytes, 3);
	agent_msg_release(&m);
	{
		struct agent_msg e = { .type = AGENT_MSG_EXIT, .id = id, .exit = { EXIT_KIND_EXITED, 0 } };
		assert_int_equal(agent_encode_data(&b, AGENT_MSG_STDERR, id, "e", 1), 0);
		assert_int_equal(agent_msg_encode(&e, &b), 0);
	}
	guest_send(&p, &b);
	buf_release(&b);
	assert_int_equal(agent_client_next(p.c, 1000, &ev), 1);
	assert_int_equal(ev.type, AGENT_EV_STDERR);
	assert_int_equal(agent_client_next(p.c, 1000, &ev), 1);
	assert_int_equal(ev.type, AGENT_EV_EXIT);
	assert_int_equal(ev.exit.kind, EXIT_KIND_EXITED);
	assert_int_equal(ev.exit.value, 0);
	/* The exec is over: more output for it is a lie. */
	assert_int_equal(buf_init(&b, 1 << 20, 0), 0);
	assert_int_equal(agent_encode_data(&b, AGENT_MSG_STDOUT, id, "x", 1), 0);
	guest_send(&p, &b);
	buf_release(&b);
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPROTO);
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPROTO);
	pair_close(&p);
}

static void test_stdin_credit(void **state)
{
	char *argv[] = { "cat", NULL };
	static uint8_t data[2 << 20];
	struct pair p;
	struct agent_event ev;
	size_t sent = 0, k;
	uint32_t id;
	char json[64];
	(void)state;

	pair_open(&p);
	assert_int_equal(agent_client_exec(p.c, argv, NULL, NULL, true, &id), 0);
	/* 2 MB offered: only the window goes out until the guest credits more. */
	assert_int_equal(agent_client_stdin(p.c, id, data, sizeof(data), &sent), 0);
	assert_int_equal(sent, AGENT_STDIN_WINDOW);
	assert_int_equal(agent_client_stdin(p.c, id, data, sizeof(data), &k), 0);
	assert_int_equal(k, 0);
	/* The guest returns 1000 bytes of credit. */
	(void)snprintf(json, sizeof(json), "{\"bytes\":1000,\"id\":%u}", id);
	guest_send_json(&p, AGENT_MSG_STDIN_WINDOW, json);
	assert_int_equal(agent_client_next(p.c, 1000, &ev), 1);
	assert_int_equal(ev.type, AGENT_EV_STDIN_CREDIT);
	assert_int_equal(agent_client_stdin_credit(p.c, id), 1000);
	/* Credit beyond what was ever used is a lie. */
	(void)snprintf(json, sizeof(json), "{\"bytes\":%u,\"id\":%u}", (unsigned)AGENT_STDIN_WINDOW, id);
	guest_send_json(&p, AGENT_MSG_STDIN_WINDOW, json);
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPROTO);
	pair_close(&p);
}

static void test_lies(void **state)
{
	struct pair p;
	struct agent_event ev;
	(void)state;

	/* A pong for a ping never sent. */
	pair_open(&p);
	guest_send_json(&p, AGENT_MSG_PONG, "{\"id\":5}");
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPROTO);
	pair_close(&p);
	/* A type only the host may send. */
	pair_open(&p);
	guest_send_json(&p, AGENT_MSG_EXEC, "{\"argv\":[\"x\"],\"id\":1}");
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPROTO);
	pair_close(&p);
	/* An unknown type. */
	pair_open(&p);
	guest_send_json(&p, 0x7e, "{}");
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPROTO);
	pair_close(&p);
	/* STARTED for an exec the host never asked for. */
	pair_open(&p);
	guest_send_json(&p, AGENT_MSG_STARTED, "{\"id\":9,\"pid\":1}");
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPROTO);
	pair_close(&p);
	/* Malformed JSON. */
	pair_open(&p);
	{
		uint32_t id;
		assert_int_equal(agent_client_ping(p.c, &id), 0);
		guest_send_json(&p, AGENT_MSG_PONG, "{\"id\":1,}");
		assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPROTO);
	}
	pair_close(&p);
	/* The guest goes away. */
	pair_open(&p);
	(void)close(p.guest);
	p.guest = -1;
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPIPE);
	agent_client_free(p.c);
}

/* What the host never asked for is a violation, and the client says which frame broke which rule. */
static void test_unsolicited(void **state)
{
	char *argv[] = { "true", NULL };
	struct pair p;
	struct agent_event ev;
	struct agent_msg m;
	uint32_t id;
	char json[64];
	(void)state;

	/* A pong answers its ping once: a replay is refused. */
	pair_open(&p);
	assert_null(agent_client_violation(p.c));
	assert_int_equal(agent_client_ping(p.c, &id), 0);
	(void)snprintf(json, sizeof(json), "{\"id\":%u}", id);
	guest_send_json(&p, AGENT_MSG_PONG, json);
	assert_int_equal(agent_client_next(p.c, 1000, &ev), 1);
	assert_int_equal(ev.type, AGENT_EV_PONG);
	guest_send_json(&p, AGENT_MSG_PONG, json);
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPROTO);
	assert_non_null(agent_client_violation(p.c));
	assert_non_null(strstr(agent_client_violation(p.c), "frame type 0x81"));
	assert_non_null(strstr(agent_client_violation(p.c), "pong without an outstanding ping"));
	pair_close(&p);

	/* A shutdown ack with no shutdown asked for. */
	pair_open(&p);
	guest_send_json(&p, AGENT_MSG_SHUTDOWN_ACK, "{}");
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPROTO);
	assert_non_null(strstr(agent_client_violation(p.c), "frame type 0x88"));
	pair_close(&p);

	/* Asked for: one ack is an event, a second one a violation. */
	pair_open(&p);
	assert_int_equal(agent_client_shutdown(p.c), 0);
	guest_send_json(&p, AGENT_MSG_SHUTDOWN_ACK, "{}");
	assert_int_equal(agent_client_next(p.c, 1000, &ev), 1);
	assert_int_equal(ev.type, AGENT_EV_SHUTDOWN_ACK);
	guest_send_json(&p, AGENT_MSG_SHUTDOWN_ACK, "{}");
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPROTO);
	assert_non_null(strstr(agent_client_violation(p.c), "frame type 0x88"));
	pair_close(&p);

	/* Output for an exec id never started. */
	pair_open(&p);
	{
		struct buf b;
		assert_int_equal(buf_init(&b, 1024, 0), 0);
		assert_int_equal(agent_encode_data(&b, AGENT_MSG_STDOUT, 9, "x", 1), 0);
		guest_send(&p, &b);
		buf_release(&b);
	}
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPROTO);
	assert_non_null(strstr(agent_client_violation(p.c), "frame type 0x83"));
	assert_non_null(strstr(agent_client_violation(p.c), "never started"));
	pair_close(&p);

	/* An exit for an exec that already exited. */
	pair_open(&p);
	assert_int_equal(agent_client_exec(p.c, argv, NULL, NULL, false, &id), 0);
	assert_int_equal(agent_client_next(p.c, 10, &ev), 0);
	guest_recv(&p, &m);
	agent_msg_release(&m);
	(void)snprintf(json, sizeof(json), "{\"id\":%u,\"pid\":3}", id);
	guest_send_json(&p, AGENT_MSG_STARTED, json);
	(void)snprintf(json, sizeof(json), "{\"code\":0,\"id\":%u}", id);
	guest_send_json(&p, AGENT_MSG_EXIT, json);
	assert_int_equal(agent_client_next(p.c, 1000, &ev), 1);
	assert_int_equal(agent_client_next(p.c, 1000, &ev), 1);
	assert_int_equal(ev.type, AGENT_EV_EXIT);
	guest_send_json(&p, AGENT_MSG_EXIT, json);
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPROTO);
	assert_non_null(strstr(agent_client_violation(p.c), "frame type 0x85"));
	pair_close(&p);

	/* A type no guest may send, and an announced frame over the cap, are named too. */
	pair_open(&p);
	guest_send_json(&p, 0x42, "{}");
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPROTO);
	assert_non_null(strstr(agent_client_violation(p.c), "frame type 0x42"));
	pair_close(&p);
	pair_open(&p);
	{
		uint8_t hdr[5] = { AGENT_MSG_STDOUT, 0xff, 0xff, 0xff, 0xff };
		assert_int_equal(write(p.guest, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
	}
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -E2BIG);
	assert_non_null(strstr(agent_client_violation(p.c), "announces 4294967295 bytes"));
	pair_close(&p);

	/* A guest that just goes away broke no rule. */
	pair_open(&p);
	(void)close(p.guest);
	p.guest = -1;
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPIPE);
	assert_null(agent_client_violation(p.c));
	agent_client_free(p.c);
}

static pid_t flood(int fd, uint8_t type, uint32_t len, uint64_t total, uint32_t id);

/*
 * A guest keeps the host's read buffer full of valid output: a request the
 * host queues still reaches the socket at the next call, not after the flood.
 */
static void test_fair_to_host(void **state)
{
	char *argv[] = { "yes", NULL };
	struct pair p;
	struct agent_event ev;
	struct agent_msg m;
	struct pollfd pfd;
	uint32_t id, ping = 0, got_id = 0;
	int got_type = -1, r1, r2, r3, t1, t3;
	bool b1, b3;
	pid_t pid;
	int status;
	char json[64];
	(void)state;

	pair_open(&p);
	assert_int_equal(agent_client_exec(p.c, argv, NULL, NULL, false, &id), 0);
	assert_int_equal(agent_client_next(p.c, 10, &ev), 0);
	guest_recv(&p, &m);
	assert_int_equal(m.type, AGENT_MSG_EXEC);
	agent_msg_release(&m);
	(void)snprintf(json, sizeof(json), "{\"id\":%u,\"pid\":7}", id);
	guest_send_json(&p, AGENT_MSG_STARTED, json);
	assert_int_equal(agent_client_next(p.c, 1000, &ev), 1);
	assert_int_equal(ev.type, AGENT_EV_STARTED);
	/* 100,000 one-byte output frames (within the output credit). */
	pid = flood(p.guest, AGENT_MSG_STDOUT, 5, (uint64_t)100000 * 10, id);
	/* Let the socket fill first, so the host's next read fills its buffer (no race with the writer). */
	for (int i = 0; i < 10000; i++) {
		int pending = 0;
		if (ioctl(agent_client_fd(p.c), FIONREAD, &pending) == 0 && pending >= 128 * 1024) {
			break;
		}
		(void)usleep(1000);
	}
	/* No assertion while the flooder lives: a failed one would leave it blocked on a socket meson waits on. */
	r1 = agent_client_next(p.c, 5000, &ev);
	t1 = ev.type;
	b1 = agent_client_buffered(p.c);
	r2 = agent_client_ping(p.c, &ping);
	r3 = agent_client_next(p.c, 0, &ev);
	t3 = ev.type;
	b3 = agent_client_buffered(p.c);
	/* The ping is on the wire already, with guest frames still waiting on the host's side. */
	pfd = (struct pollfd){ .fd = p.guest, .events = POLLIN };
	if (poll(&pfd, 1, 0) == 1) {
		guest_recv(&p, &m);
		got_type = m.type;
		got_id = m.id;
		agent_msg_release(&m);
	}
	(void)close(p.guest);
	p.guest = -1;
	(void)kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	agent_client_free(p.c);
	assert_int_equal(r1, 1);
	assert_int_equal(t1, AGENT_EV_STDOUT);
	assert_true(b1);
	assert_int_equal(r2, 0);
	assert_int_equal(r3, 1);
	assert_int_equal(t3, AGENT_EV_STDOUT);
	assert_true(b3);
	assert_int_equal(got_type, AGENT_MSG_PING);
	assert_int_equal(got_id, ping);
}

static uint64_t rss_kib(void)
{
	char text[4096];
	FILE *f = fopen("/proc/self/status", "re");
	uint64_t v = 0;

	assert_non_null(f);
	while (fgets(text, sizeof(text), f)) {
		if (strncmp(text, "VmRSS:", 6) == 0) {
			v = strtoull(text + 6, NULL, 10);
		}
	}
	(void)fclose(f);
	return v;
}

/* A fake guest process that writes `total` bytes: header (type, len) then filler, repeated. */
static pid_t flood(int fd, uint8_t type, uint32_t len, uint64_t total, uint32_t id)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		static uint8_t chunk[1 << 16];
		uint64_t done = 0;
		(void)signal(SIGPIPE, SIG_DFL);
		while (done < total) {
			uint8_t hdr[9] = {
				type,	      (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
				(uint8_t)len, (uint8_t)(id >> 24),  (uint8_t)(id >> 16),  (uint8_t)(id >> 8),
				(uint8_t)id
			};
			if (write(fd, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr)) {
				_exit(0);
			}
			for (uint32_t left = len - 4; left > 0;) {
				uint32_t k = left < sizeof(chunk) ? left : (uint32_t)sizeof(chunk);
				if (write(fd, chunk, k) != (ssize_t)k) {
					_exit(0);
				}
				left -= k;
			}
			done += len + 5;
		}
		_exit(0);
	}
	return pid;
}

static void test_flood_oversized(void **state)
{
	struct pair p;
	struct agent_event ev;
	uint64_t before, after;
	pid_t pid;
	int status;
	(void)state;

	pair_open(&p);
	before = rss_kib();
	/* Frames announcing 1 GiB each, 256 MiB written in all: cut off at the first header. */
	pid = flood(p.guest, AGENT_MSG_STDOUT, 1u << 30, 256u << 20, 1);
	assert_int_equal(agent_client_next(p.c, 5000, &ev), -E2BIG);
	after = rss_kib();
	assert_true(agent_client_bytes_in(p.c) <= 64 * 1024 + 16);
	(void)close(p.guest); /* the writer sees EPIPE and stops */
	p.guest = -1;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (RSS_MEANINGFUL) {
		assert_true(after < before + 2048);
	}
	agent_client_free(p.c);

	/* Frames just over the host's per-frame cap: refused at the header too. */
	pair_open(&p);
	pid = flood(p.guest, AGENT_MSG_STDOUT, AGENT_CLIENT_MAX_FRAME + 1, 64u << 20, 1);
	assert_int_equal(agent_client_next(p.c, 5000, &ev), -E2BIG);
	(void)close(p.guest);
	p.guest = -1;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	agent_client_free(p.c);
}

/* A guest streaming 256 MiB of valid output: the host keeps up in constant memory. */
static void test_flood_valid(void **state)
{
	char *argv[] = { "yes", NULL };
	struct pair p;
	struct agent_event ev;
	uint64_t before, after, got = 0;
	uint32_t id;
	pid_t pid;
	int status, r;
	char json[64];
	(void)state;

	pair_open(&p);
	assert_int_equal(agent_client_exec(p.c, argv, NULL, NULL, false, &id), 0);
	(void)snprintf(json, sizeof(json), "{\"id\":%u,\"pid\":7}", id);
	guest_send_json(&p, AGENT_MSG_STARTED, json);
	assert_int_equal(agent_client_next(p.c, 1000, &ev), 1);
	before = rss_kib();
	/* The fake guest never reads the host's credit: the socket buffer absorbs it (small frames). */
	pid = flood(p.guest, AGENT_MSG_STDOUT, AGENT_MAX_DATA + 4, 256u << 20, id);
	while (got < (200u << 20)) {
		r = agent_client_next(p.c, 5000, &ev);
		if (r < 0) {
			break;
		}
		assert_int_equal(r, 1);
		assert_int_equal(ev.type, AGENT_EV_STDOUT);
		got += ev.len;
	}
	after = rss_kib();
	/* Stop the flooder before asserting: a failed check must not leave it blocked on a pipe meson waits on. */
	(void)close(p.guest);
	p.guest = -1;
	(void)kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	agent_client_free(p.c);
	assert_true(got >= (200u << 20));
	if (RSS_MEANINGFUL) {
		assert_true(after < before + 4096);
	}
}

/* The host's clock for the guest: queued at once on the first tick, then every AGENT_CLOCK_INTERVAL_MS. */
static void test_clock(void **state)
{
	struct pair p;
	struct agent_event ev;
	struct agent_msg m;
	struct timespec before, after;
	uint64_t due = 0;
	int avail = 0;
	(void)state;

	pair_open(&p);
	assert_int_equal(clock_gettime(CLOCK_REALTIME, &before), 0);
	assert_int_equal(agent_client_clock_tick(p.c, 5000, &due), 0);
	assert_int_equal(clock_gettime(CLOCK_REALTIME, &after), 0);
	assert_int_equal(due, 5000 + AGENT_CLOCK_INTERVAL_MS);
	/* Before the due time: nothing more is queued. */
	assert_int_equal(agent_client_clock_tick(p.c, 5000 + AGENT_CLOCK_INTERVAL_MS - 1, &due), 0);
	assert_int_equal(due, 5000 + AGENT_CLOCK_INTERVAL_MS);
	assert_int_equal(agent_client_flush(p.c), 0);
	guest_recv(&p, &m);
	assert_int_equal(m.type, AGENT_MSG_CLOCK);
	/* The host's CLOCK_REALTIME as it was queued. */
	assert_true(m.clock_sec >= before.tv_sec && m.clock_sec <= after.tv_sec);
	agent_msg_release(&m);
	assert_int_equal(ioctl(p.guest, FIONREAD, &avail), 0);
	assert_int_equal(avail, 0);
	/* Due: one more, and the next due time moves on. */
	assert_int_equal(agent_client_clock_tick(p.c, 5000 + AGENT_CLOCK_INTERVAL_MS, &due), 0);
	assert_int_equal(due, 5000 + 2 * AGENT_CLOCK_INTERVAL_MS);
	assert_int_equal(agent_client_next(p.c, 0, &ev), 0);
	guest_recv(&p, &m);
	assert_int_equal(m.type, AGENT_MSG_CLOCK);
	agent_msg_release(&m);
	/* No reply is expected: a guest that answers with a pong is still a liar. */
	guest_send_json(&p, AGENT_MSG_PONG, "{\"id\":1}");
	assert_int_equal(agent_client_next(p.c, 1000, &ev), -EPROTO);
	/* A dead connection: the tick says so. */
	assert_int_equal(agent_client_clock_tick(p.c, 10 * AGENT_CLOCK_INTERVAL_MS, &due), -EPROTO);
	pair_close(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exec_exchange), cmocka_unit_test(test_stdin_credit),
		cmocka_unit_test(test_lies),	      cmocka_unit_test(test_flood_oversized),
		cmocka_unit_test(test_flood_valid),   cmocka_unit_test(test_unsolicited),
		cmocka_unit_test(test_fair_to_host),  cmocka_unit_test(test_clock),
	};
	(void)signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
