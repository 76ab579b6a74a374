/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "frame.h"
#include "vmm/agent-proto.h"
#include "vmm/boot-proto.h"

/* Decode the single frame at the start of b. */
static int decode_buf(const struct buf *b, struct agent_msg *m)
{
	const uint8_t *p;
	size_t n;
	uint8_t type;
	int r = frame_decode_one(buf_ptr(b), buf_len(b), FRAME_MAX_PAYLOAD, &type, &p, &n);
	if (r < 0) {
		return r;
	}
	return agent_msg_decode(type, p, n, m);
}

static int decode_json(uint8_t type, const char *json, struct agent_msg *m)
{
	return agent_msg_decode(type, (const uint8_t *)json, strlen(json), m);
}

static void test_exec_roundtrip(void **state)
{
	char *argv[] = { "sh", "-c", "echo hi", NULL };
	char *env[] = { "A=1", "PATH=/bin", NULL };
	struct agent_msg m = { .type = AGENT_MSG_EXEC,
			       .id = 7,
			       .argv = argv,
			       .argc = 3,
			       .env = env,
			       .envc = 2,
			       .cwd = "/workspace",
			       .stdin_open = true };
	struct agent_msg d;
	struct buf b;
	(void)state;

	assert_int_equal(buf_init(&b, 1 << 20, 0), 0);
	assert_int_equal(agent_msg_encode(&m, &b), 0);
	assert_int_equal(decode_buf(&b, &d), 0);
	assert_int_equal(d.type, AGENT_MSG_EXEC);
	assert_int_equal(d.id, 7);
	assert_int_equal(d.argc, 3);
	assert_string_equal(d.argv[2], "echo hi");
	assert_null(d.argv[3]);
	assert_int_equal(d.envc, 2);
	assert_string_equal(d.env[1], "PATH=/bin");
	assert_string_equal(d.cwd, "/workspace");
	assert_true(d.stdin_open);
	agent_msg_release(&d);
	buf_release(&b);
}

static void test_data_roundtrip(void **state)
{
	struct agent_msg d;
	struct buf b;
	uint8_t *big = calloc(1, AGENT_MAX_DATA + 1);
	(void)state;

	assert_non_null(big);
	assert_int_equal(buf_init(&b, 1 << 20, 0), 0);
	assert_int_equal(agent_encode_data(&b, AGENT_MSG_STDOUT, 3, "abc", 3), 0);
	assert_int_equal(decode_buf(&b, &d), 0);
	assert_int_equal(d.id, 3);
	assert_int_equal(d.data_len, 3);
	assert_memory_equal(d.data, "abc", 3);
	agent_msg_release(&d);
	buf_reset(&b);
	/* The largest data frame passes, one more byte does not (encoder and decoder). */
	assert_int_equal(agent_encode_data(&b, AGENT_MSG_STDOUT, 3, big, AGENT_MAX_DATA), 0);
	assert_int_equal(decode_buf(&b, &d), 0);
	agent_msg_release(&d);
	assert_int_equal(agent_encode_data(&b, AGENT_MSG_STDOUT, 3, big, AGENT_MAX_DATA + 1), -EINVAL);
	{
		uint8_t *raw = calloc(1, AGENT_MAX_DATA + 5);
		assert_non_null(raw);
		raw[3] = 1;
		assert_int_equal(agent_msg_decode(AGENT_MSG_STDOUT, raw, AGENT_MAX_DATA + 4, &d), 0);
		agent_msg_release(&d);
		assert_int_equal(agent_msg_decode(AGENT_MSG_STDOUT, raw, AGENT_MAX_DATA + 5, &d), -E2BIG);
		/* id 0 is not an exec id; an empty output frame is refused; an empty stdin frame is EOF. */
		raw[3] = 0;
		assert_int_equal(agent_msg_decode(AGENT_MSG_STDOUT, raw, 10, &d), -EBADMSG);
		raw[3] = 1;
		assert_int_equal(agent_msg_decode(AGENT_MSG_STDOUT, raw, 4, &d), -EBADMSG);
		assert_int_equal(agent_msg_decode(AGENT_MSG_STDIN, raw, 4, &d), 0);
		assert_int_equal(d.data_len, 0);
		assert_int_equal(agent_msg_decode(AGENT_MSG_STDIN, raw, 3, &d), -EBADMSG);
		free(raw);
	}
	free(big);
	buf_release(&b);
}

static void test_unknown_and_strict(void **state)
{
	struct agent_msg m;
	(void)state;

	assert_int_equal(decode_json(0x7f, "{}", &m), -EPROTO);
	assert_int_equal(decode_json(AGENT_MSG_BOOT_CONFIG, "{}", &m), -EPROTO);
	/* Unknown keys, duplicate keys, wrong types, trailing bytes. */
	assert_int_equal(decode_json(AGENT_MSG_PING, "{\"id\":1,\"x\":2}", &m), -EBADMSG);
	assert_int_not_equal(decode_json(AGENT_MSG_PING, "{\"id\":1,\"id\":2}", &m), 0);
	assert_int_equal(decode_json(AGENT_MSG_PING, "{\"id\":\"1\"}", &m), -EBADMSG);
	assert_int_not_equal(decode_json(AGENT_MSG_PING, "{\"id\":1} x", &m), 0);
	assert_int_equal(decode_json(AGENT_MSG_PING, "{\"id\":1}", &m), 0);
	agent_msg_release(&m);
	/* exec: argv required and non-empty, cwd absolute, env K=V. */
	assert_int_equal(decode_json(AGENT_MSG_EXEC, "{\"id\":1}", &m), -ENOENT);
	assert_int_equal(decode_json(AGENT_MSG_EXEC, "{\"id\":1,\"argv\":[]}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_EXEC, "{\"id\":1,\"argv\":[\"\"]}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_EXEC, "{\"id\":1,\"argv\":[1]}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_EXEC, "{\"id\":1,\"argv\":[\"a\"],\"cwd\":\"rel\"}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_EXEC, "{\"id\":1,\"argv\":[\"a\"],\"env\":[\"NOEQ\"]}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_EXEC, "{\"id\":1,\"argv\":[\"a\"],\"env\":[\"=v\"]}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_EXEC, "{\"id\":0,\"argv\":[\"a\"]}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_EXEC, "{\"id\":2147483648,\"argv\":[\"a\"]}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_EXEC, "{\"id\":2147483647,\"argv\":[\"a\"]}", &m), 0);
	agent_msg_release(&m);
	/* signal: only the allowed set. */
	assert_int_equal(decode_json(AGENT_MSG_SIGNAL, "{\"id\":1,\"signal\":2}", &m), 0);
	assert_int_equal(decode_json(AGENT_MSG_SIGNAL, "{\"id\":1,\"signal\":19}", &m), -EBADMSG);
	/* exit: exactly one of code/signal, in range. */
	assert_int_equal(decode_json(AGENT_MSG_EXIT, "{\"id\":1,\"code\":3}", &m), 0);
	assert_int_equal(m.exit.kind, EXIT_KIND_EXITED);
	assert_int_equal(m.exit.value, 3);
	assert_int_equal(decode_json(AGENT_MSG_EXIT, "{\"id\":1,\"signal\":9}", &m), 0);
	assert_int_equal(m.exit.kind, EXIT_KIND_SIGNALED);
	assert_int_equal(m.exit.value, 9);
	assert_int_equal(decode_json(AGENT_MSG_EXIT, "{\"id\":1,\"signal\":65}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_EXIT, "{\"id\":1,\"code\":3,\"signal\":9}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_EXIT, "{\"id\":1,\"code\":256}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_EXIT, "{\"id\":1}", &m), -EBADMSG);
	/* window: positive, capped. */
	assert_int_equal(decode_json(AGENT_MSG_WINDOW, "{\"id\":1,\"bytes\":0}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_WINDOW, "{\"id\":1,\"bytes\":1073741824}", &m), 0);
	assert_int_equal(decode_json(AGENT_MSG_WINDOW, "{\"id\":1,\"bytes\":1073741825}", &m), -EBADMSG);
	/* error strings are capped. */
	{
		size_t n = 4097 + 64;
		char *s = malloc(n + 64);
		assert_non_null(s);
		int k = snprintf(s, n + 64, "{\"id\":0,\"code\":\"x\",\"message\":\"");
		memset(s + k, 'a', 4097);
		memcpy(s + k + 4097, "\"}", 3);
		assert_int_equal(decode_json(AGENT_MSG_ERROR, s, &m), -E2BIG);
		memcpy(s + k + 4096, "\"}", 3);
		assert_int_equal(decode_json(AGENT_MSG_ERROR, s, &m), 0);
		agent_msg_release(&m);
		free(s);
	}
}

/* AGENT_MAX_ARGS argv entries pass, one more does not. */
static void test_argv_cap(void **state)
{
	struct buf b;
	struct agent_msg m;
	(void)state;

	assert_int_equal(buf_init(&b, 1 << 20, 0), 0);
	for (int extra = 0; extra <= 1; extra++) {
		buf_reset(&b);
		assert_int_equal(buf_putf(&b, "{\"id\":1,\"argv\":["), 0);
		for (int i = 0; i < AGENT_MAX_ARGS + extra; i++) {
			assert_int_equal(buf_putf(&b, "%s\"a\"", i ? "," : ""), 0);
		}
		assert_int_equal(buf_putf(&b, "]}"), 0);
		int r = agent_msg_decode(AGENT_MSG_EXEC, buf_ptr(&b), buf_len(&b), &m);
		if (extra) {
			assert_int_equal(r, -E2BIG);
		} else {
			assert_int_equal(r, 0);
			assert_int_equal(m.argc, AGENT_MAX_ARGS);
			agent_msg_release(&m);
		}
	}
	buf_release(&b);
}

static void test_string_cap(void **state)
{
	struct buf b;
	struct agent_msg m;
	(void)state;

	assert_int_equal(buf_init(&b, 1 << 20, 0), 0);
	for (int extra = 0; extra <= 1; extra++) {
		uint8_t *w;
		buf_reset(&b);
		assert_int_equal(buf_putf(&b, "{\"id\":1,\"argv\":[\""), 0);
		assert_int_equal(buf_reserve(&b, AGENT_MAX_STRING + extra, &w), 0);
		memset(w, 'x', AGENT_MAX_STRING + extra);
		assert_int_equal(buf_putf(&b, "\"]}"), 0);
		int r = agent_msg_decode(AGENT_MSG_EXEC, buf_ptr(&b), buf_len(&b), &m);
		assert_int_equal(r, extra ? -E2BIG : 0);
		agent_msg_release(&m);
	}
	buf_release(&b);
}

static void test_direction(void **state)
{
	(void)state;
	assert_true(agent_msg_from_host(AGENT_MSG_EXEC));
	assert_false(agent_msg_from_guest(AGENT_MSG_EXEC));
	assert_true(agent_msg_from_guest(AGENT_MSG_STDOUT));
	assert_false(agent_msg_from_host(AGENT_MSG_STDOUT));
	assert_false(agent_msg_from_guest(0));
	assert_false(agent_signal_allowed(SIGSTOP));
	assert_true(agent_signal_allowed(SIGKILL));
}

/* Issue 14: DIFF, DIFF_DATA, DIFF_END: round trips, closed keys, one past each cap. */
static void test_diff_messages(void **state)
{
	char *pairs[] = { "a/.git", "left out", "fifo", "special", NULL };
	struct agent_msg m, d;
	struct buf b;
	uint8_t raw[8] = { 0, 0, 0, 5, 'x' };
	(void)state;

	assert_int_equal(buf_init(&b, 4 << 20, 0), 0);
	assert_true(agent_msg_from_host(AGENT_MSG_DIFF));
	assert_true(agent_msg_from_guest(AGENT_MSG_DIFF_DATA));
	assert_true(agent_msg_from_guest(AGENT_MSG_DIFF_END));
	assert_false(agent_msg_from_guest(AGENT_MSG_DIFF));
	/* DIFF {"id"}: 1..AGENT_MAX_ID, nothing else. */
	assert_int_equal(decode_json(AGENT_MSG_DIFF, "{\"id\":1}", &m), 0);
	assert_int_equal(m.id, 1);
	assert_int_equal(decode_json(AGENT_MSG_DIFF, "{\"id\":0}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_DIFF, "{\"id\":2147483648}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_DIFF, "{\"id\":1,\"x\":1}", &m), -EBADMSG);
	m = (struct agent_msg){ .type = AGENT_MSG_DIFF, .id = 9 };
	assert_int_equal(agent_msg_encode(&m, &b), 0);
	assert_int_equal(decode_buf(&b, &d), 0);
	assert_int_equal(d.id, 9);
	buf_reset(&b);
	/* DIFF_DATA: binary, never empty, AGENT_MAX_DATA at most. */
	assert_int_equal(agent_msg_decode(AGENT_MSG_DIFF_DATA, raw, 5, &d), 0);
	assert_int_equal(d.id, 5);
	assert_int_equal(d.data_len, 1);
	assert_int_equal(agent_msg_decode(AGENT_MSG_DIFF_DATA, raw, 4, &d), -EBADMSG);
	{
		uint8_t *big = calloc(1, AGENT_MAX_DATA + 5);
		assert_non_null(big);
		big[3] = 1;
		assert_int_equal(agent_msg_decode(AGENT_MSG_DIFF_DATA, big, AGENT_MAX_DATA + 4, &d), 0);
		assert_int_equal(agent_msg_decode(AGENT_MSG_DIFF_DATA, big, AGENT_MAX_DATA + 5, &d), -E2BIG);
		assert_int_equal(agent_encode_data(&b, AGENT_MSG_DIFF_DATA, 1, big, AGENT_MAX_DATA + 1), -EINVAL);
		free(big);
	}
	/* DIFF_END: round trip with notices. */
	m = (struct agent_msg){ .type = AGENT_MSG_DIFF_END, .id = 3, .bytes = 42, .notices = pairs, .n_notices = 2 };
	assert_int_equal(agent_msg_encode(&m, &b), 0);
	assert_int_equal(decode_buf(&b, &d), 0);
	assert_int_equal(d.bytes, 42);
	assert_int_equal(d.n_notices, 2);
	assert_string_equal(d.notices[0], "a/.git");
	assert_string_equal(d.notices[3], "special");
	agent_msg_release(&d);
	buf_reset(&b);
	/* Keys: all three, no other; bytes 0..PATCH_MAX_BYTES; pairs of two non-empty strings. */
	assert_int_equal(decode_json(AGENT_MSG_DIFF_END, "{\"id\":1,\"bytes\":0,\"notices\":[]}", &d), 0);
	agent_msg_release(&d);
	assert_int_equal(decode_json(AGENT_MSG_DIFF_END, "{\"id\":1,\"bytes\":0}", &d), -ENOENT);
	assert_int_equal(decode_json(AGENT_MSG_DIFF_END, "{\"id\":1,\"bytes\":0,\"notices\":[],\"x\":1}", &d),
			 -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_DIFF_END, "{\"id\":1,\"bytes\":33554432,\"notices\":[]}", &d), 0);
	agent_msg_release(&d);
	assert_int_equal(decode_json(AGENT_MSG_DIFF_END, "{\"id\":1,\"bytes\":33554433,\"notices\":[]}", &d), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_DIFF_END, "{\"id\":1,\"bytes\":-1,\"notices\":[]}", &d), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_DIFF_END, "{\"id\":1,\"bytes\":0,\"notices\":[[\"a\"]]}", &d), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_DIFF_END, "{\"id\":1,\"bytes\":0,\"notices\":[[\"a\",\"\"]]}", &d),
			 -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_DIFF_END, "{\"id\":1,\"bytes\":0,\"notices\":[[\"a\",1]]}", &d),
			 -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_DIFF_END, "{\"id\":1,\"bytes\":0,\"notices\":[\"a\"]}", &d), -EBADMSG);
	/* PATCH_MAX_NOTICES notices pass, one more does not; a string of PATCH_MAX_NOTICE bytes passes, one more not. */
	for (int extra = 0; extra <= 1; extra++) {
		buf_reset(&b);
		assert_int_equal(buf_putf(&b, "{\"id\":1,\"bytes\":0,\"notices\":["), 0);
		for (int i = 0; i < PATCH_MAX_NOTICES + extra; i++) {
			assert_int_equal(buf_putf(&b, "%s[\"p\",\"w\"]", i ? "," : ""), 0);
		}
		assert_int_equal(buf_putf(&b, "]}"), 0);
		assert_int_equal(agent_msg_decode(AGENT_MSG_DIFF_END, buf_ptr(&b), buf_len(&b), &d),
				 extra ? -E2BIG : 0);
		agent_msg_release(&d);
		buf_reset(&b);
		assert_int_equal(buf_putf(&b, "{\"id\":1,\"bytes\":0,\"notices\":[[\"p\",\"%0*d\"]]}",
					  (int)PATCH_MAX_NOTICE + extra, 0),
				 0);
		assert_int_equal(agent_msg_decode(AGENT_MSG_DIFF_END, buf_ptr(&b), buf_len(&b), &d),
				 extra ? -E2BIG : 0);
		agent_msg_release(&d);
	}
	/* The encoder refuses what the decoder would. */
	buf_reset(&b);
	m = (struct agent_msg){ .type = AGENT_MSG_DIFF_END, .id = 3, .bytes = (int64_t)PATCH_MAX_BYTES + 1 };
	assert_int_equal(agent_msg_encode(&m, &b), -EINVAL);
	m = (struct agent_msg){
		.type = AGENT_MSG_DIFF_END, .id = 3, .notices = pairs, .n_notices = PATCH_MAX_NOTICES + 1
	};
	assert_int_equal(agent_msg_encode(&m, &b), -EINVAL);
	pairs[1] = "";
	m = (struct agent_msg){ .type = AGENT_MSG_DIFF_END, .id = 3, .notices = pairs, .n_notices = 1 };
	assert_int_equal(agent_msg_encode(&m, &b), -EINVAL);
	assert_int_equal(buf_len(&b), 0);
	buf_release(&b);
}

static void test_boot_config(void **state)
{
	char *env[] = { "LANG=C", NULL };
	struct boot_config c = { .box_id = "demo-1",
				 .hostname = "box",
				 .env = env,
				 .envc = 1,
				 .clock_sec = 1700000000,
				 .clock_nsec = 5,
				 .vcpus = 2,
				 .mem_mib = 2048 };
	struct boot_config d;
	struct buf b;
	const uint8_t *p;
	size_t n;
	uint8_t type;
	(void)state;

	assert_int_equal(buf_init(&b, 1 << 20, 0), 0);
	assert_int_equal(boot_config_encode(&c, &b), 0);
	assert_int_equal(frame_decode_one(buf_ptr(&b), buf_len(&b), FRAME_MAX_PAYLOAD, &type, &p, &n), 0);
	assert_int_equal(type, AGENT_MSG_BOOT_CONFIG);
	assert_int_equal(boot_config_decode(p, n, &d), 0);
	assert_string_equal(d.box_id, "demo-1");
	assert_string_equal(d.env[0], "LANG=C");
	assert_int_equal(d.clock_sec, 1700000000);
	boot_config_release(&d);
	/* Bad hostname: the encoder never sends it, the decoder refuses it; missing member, unknown member. */
	c.hostname = "a b";
	buf_reset(&b);
	assert_int_equal(boot_config_encode(&c, &b), -EINVAL);
	assert_int_equal(buf_len(&b), 0);
	c.hostname = "box";
	c.vcpus = BOOT_MAX_VCPUS + 1;
	assert_int_equal(boot_config_encode(&c, &b), -EINVAL);
	c.vcpus = 2;
	{
		static const char *const docs[] = {
			/* hostname with a space, vcpus one past, mem one under, box_id one past BOOT_MAX_BOX_ID */
			"{\"box_id\":\"b\",\"clock_nsec\":0,\"clock_sec\":1,\"env\":[],\"hostname\":\"a "
			"b\",\"mem_mib\":64,"
			"\"vcpus\":1,\"entropy\":[0,0,0,0,0,0,0,0]}",
			"{\"box_id\":\"b\",\"clock_nsec\":0,\"clock_sec\":1,\"env\":[],\"hostname\":\"h\",\"mem_mib\":"
			"64,"
			"\"vcpus\":257,\"entropy\":[0,0,0,0,0,0,0,0]}",
			"{\"box_id\":\"b\",\"clock_nsec\":0,\"clock_sec\":1,\"env\":[],\"hostname\":\"h\",\"mem_mib\":"
			"63,"
			"\"vcpus\":1,\"entropy\":[0,0,0,0,0,0,0,0]}",
			"{\"box_id\":\"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\",\"clock_"
			"nsec\":0,"
			"\"clock_sec\":1,\"env\":[],\"hostname\":\"h\",\"mem_mib\":64,\"vcpus\":1,\"entropy\":[0,0,0,0,"
			"0,0,0,0]}",
		};
		for (size_t i = 0; i < ARRAY_SIZE(docs); i++) {
			int r = boot_config_decode((const uint8_t *)docs[i], strlen(docs[i]), &d);
			assert_true(r == -EBADMSG || r == -E2BIG);
		}
	}
	/* BOOT_MAX_ENV entries decode; one more does not. */
	{
		char **many = calloc(BOOT_MAX_ENV + 2, sizeof(*many));
		assert_non_null(many);
		for (size_t i = 0; i <= BOOT_MAX_ENV; i++) {
			many[i] = "A=1";
		}
		c.env = many;
		c.envc = BOOT_MAX_ENV;
		buf_reset(&b);
		assert_int_equal(boot_config_encode(&c, &b), 0);
		assert_int_equal(frame_decode_one(buf_ptr(&b), buf_len(&b), FRAME_MAX_PAYLOAD, &type, &p, &n), 0);
		assert_int_equal(boot_config_decode(p, n, &d), 0);
		assert_int_equal(d.envc, BOOT_MAX_ENV);
		boot_config_release(&d);
		c.envc = BOOT_MAX_ENV + 1;
		assert_int_equal(boot_config_encode(&c, &b), -EINVAL);
		free(many);
		c.env = env;
		c.envc = 1;
	}
	assert_int_equal(boot_config_decode((const uint8_t *)"{\"box_id\":\"a\"}", 14, &d), -ENOENT);
	assert_int_equal(boot_config_decode((const uint8_t *)"{\"zz\":1}", 8, &d), -EBADMSG);
	/* The entropy array: exactly BOOT_ENTROPY_WORDS u32 values. */
	{
		static const char head[] =
			"{\"box_id\":\"b\",\"clock_nsec\":0,\"clock_sec\":1,\"env\":[],\"hostname\":\"h\","
			"\"mem_mib\":2048,\"vcpus\":2,\"entropy\":";
		static const char *const tails[] = {
			"[1,2,3,4,5,6,7,4294967295]}", "[1,2,3,4,5,6,7]}",    "[1,2,3,4,5,6,7,8,9]}",
			"[1,2,3,4,5,6,7,4294967296]}", "[1,2,3,4,5,6,7,-1]}",
		};
		for (size_t i = 0; i < 5; i++) {
			char doc[512];
			int k = snprintf(doc, sizeof(doc), "%s%s", head, tails[i]);
			int r = boot_config_decode((const uint8_t *)doc, (size_t)k, &d);
			assert_int_equal(r, i == 0 ? 0 : -EBADMSG);
			if (r == 0) {
				assert_int_equal(d.entropy[7], 4294967295u);
				boot_config_release(&d);
			}
		}
	}
	buf_release(&b);
}

/* The host's clock for the guest: {"sec","nsec"}, closed keys, in range, no reply. */
static void test_clock(void **state)
{
	struct agent_msg c = { .type = AGENT_MSG_CLOCK, .clock_sec = 1764670000, .clock_nsec = 999999999 };
	struct agent_msg m;
	struct buf b;
	(void)state;

	assert_true(agent_msg_from_host(AGENT_MSG_CLOCK));
	assert_false(agent_msg_from_guest(AGENT_MSG_CLOCK));
	assert_int_equal(buf_init(&b, 4096, 0), 0);
	assert_int_equal(agent_msg_encode(&c, &b), 0);
	assert_int_equal(decode_buf(&b, &m), 0);
	assert_int_equal(m.type, AGENT_MSG_CLOCK);
	assert_int_equal(m.clock_sec, 1764670000);
	assert_int_equal(m.clock_nsec, 999999999);
	agent_msg_release(&m);
	/* The encoder never sends what the decoder refuses. */
	buf_reset(&b);
	c.clock_nsec = 1000000000;
	assert_int_equal(agent_msg_encode(&c, &b), -EINVAL);
	c.clock_nsec = 0;
	c.clock_sec = -1;
	assert_int_equal(agent_msg_encode(&c, &b), -EINVAL);
	c.clock_sec = AGENT_MAX_CLOCK_SEC + 1;
	assert_int_equal(agent_msg_encode(&c, &b), -EINVAL);
	assert_int_equal(buf_len(&b), 0);
	buf_release(&b);

	assert_int_equal(decode_json(AGENT_MSG_CLOCK, "{\"nsec\":0,\"sec\":0}", &m), 0);
	agent_msg_release(&m);
	assert_int_equal(decode_json(AGENT_MSG_CLOCK, "{\"nsec\":0,\"sec\":1099511627776}", &m), 0);
	agent_msg_release(&m);
	/* Extra keys, a missing one, wrong types, out of range. */
	assert_int_equal(decode_json(AGENT_MSG_CLOCK, "{\"nsec\":0,\"sec\":1,\"id\":1}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_CLOCK, "{\"sec\":1}", &m), -ENOENT);
	assert_int_equal(decode_json(AGENT_MSG_CLOCK, "{\"nsec\":0,\"sec\":\"1\"}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_CLOCK, "{\"nsec\":0.5,\"sec\":1}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_CLOCK, "{\"nsec\":1000000000,\"sec\":1}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_CLOCK, "{\"nsec\":-1,\"sec\":1}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_CLOCK, "{\"nsec\":0,\"sec\":-1}", &m), -EBADMSG);
	assert_int_equal(decode_json(AGENT_MSG_CLOCK, "{\"nsec\":0,\"sec\":1099511627777}", &m), -EBADMSG);
	assert_int_not_equal(decode_json(AGENT_MSG_CLOCK, "{\"nsec\":0,\"sec\":1,\"sec\":2}", &m), 0);
}

/* A config with the box's CA: optional, PEM-shaped, capped at BOOT_MAX_CA_PEM. */
static void test_boot_config_ca(void **state)
{
	static const char pem[] = "-----BEGIN CERTIFICATE-----\nQ0FDQUNB\n-----END CERTIFICATE-----\n";
	static const char head[] = "{\"box_id\":\"b\",\"clock_nsec\":0,\"clock_sec\":1,\"env\":[],\"hostname\":\"h\","
				   "\"mem_mib\":64,\"vcpus\":1,\"entropy\":[0,0,0,0,0,0,0,0]";
	char *env[] = { NULL };
	struct boot_config c = { .box_id = "b",
				 .hostname = "h",
				 .env = env,
				 .clock_sec = 1,
				 .vcpus = 1,
				 .mem_mib = 64,
				 .ca_pem = (char *)pem };
	struct boot_config d;
	struct buf b;
	const uint8_t *p;
	size_t n;
	uint8_t type;
	char doc[256];
	char *big;
	(void)state;

	assert_int_equal(buf_init(&b, 1 << 20, 0), 0);
	assert_int_equal(boot_config_encode(&c, &b), 0);
	assert_int_equal(frame_decode_one(buf_ptr(&b), buf_len(&b), FRAME_MAX_PAYLOAD, &type, &p, &n), 0);
	assert_int_equal(boot_config_decode(p, n, &d), 0);
	assert_string_equal(d.ca_pem, pem);
	boot_config_release(&d);
	/* None: the member is left out, and both absent and "" decode as none. */
	c.ca_pem = NULL;
	buf_reset(&b);
	assert_int_equal(boot_config_encode(&c, &b), 0);
	assert_int_equal(frame_decode_one(buf_ptr(&b), buf_len(&b), FRAME_MAX_PAYLOAD, &type, &p, &n), 0);
	assert_null(memmem(p, n, "ca_pem", 6));
	assert_int_equal(boot_config_decode(p, n, &d), 0);
	assert_null(d.ca_pem);
	boot_config_release(&d);
	(void)snprintf(doc, sizeof(doc), "%s,\"ca_pem\":\"\"}", head);
	assert_int_equal(boot_config_decode((const uint8_t *)doc, strlen(doc), &d), 0);
	assert_null(d.ca_pem);
	boot_config_release(&d);
	/* Wrong types. */
	(void)snprintf(doc, sizeof(doc), "%s,\"ca_pem\":1}", head);
	assert_int_equal(boot_config_decode((const uint8_t *)doc, strlen(doc), &d), -EBADMSG);
	(void)snprintf(doc, sizeof(doc), "%s,\"ca_pem\":null}", head);
	assert_int_equal(boot_config_decode((const uint8_t *)doc, strlen(doc), &d), -EBADMSG);
	(void)snprintf(doc, sizeof(doc), "%s,\"ca_pem\":[\"x\"]}", head);
	assert_int_equal(boot_config_decode((const uint8_t *)doc, strlen(doc), &d), -EBADMSG);
	/* Not a PEM certificate: free text, a key, a control character, no END line. */
	{
		static const char *const bad[] = {
			"hello",
			"-----BEGIN PRIVATE KEY-----\\nQQ==\\n-----END PRIVATE KEY-----\\n",
			"-----BEGIN CERTIFICATE-----\\nQ0\\tFD\\n-----END CERTIFICATE-----\\n",
			"-----BEGIN CERTIFICATE-----\\nQ0FD\\n",
			"-----BEGIN CERTIFICATE-----\\nQ0FD\\n-----END CERTIFICATE-----\\n\\n",
			"x-----BEGIN CERTIFICATE-----\\nQ0FD\\n-----END CERTIFICATE-----\\n",
		};
		for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
			(void)snprintf(doc, sizeof(doc), "%s,\"ca_pem\":\"%s\"}", head, bad[i]);
			assert_int_equal(boot_config_decode((const uint8_t *)doc, strlen(doc), &d), -EBADMSG);
		}
		/* Without the last newline it is still whole. */
		(void)snprintf(doc, sizeof(doc), "%s,\"ca_pem\":\"%s\"}", head,
			       "-----BEGIN CERTIFICATE-----\\nQ0FD\\n-----END CERTIFICATE-----");
		assert_int_equal(boot_config_decode((const uint8_t *)doc, strlen(doc), &d), 0);
		boot_config_release(&d);
		c.ca_pem = "-----BEGIN PRIVATE KEY-----\nQQ==\n-----END PRIVATE KEY-----\n";
		buf_reset(&b);
		assert_int_equal(boot_config_encode(&c, &b), -EINVAL);
	}
	/* BOOT_MAX_CA_PEM bytes pass, one more does not (the encoder refuses it too). */
	big = malloc(BOOT_MAX_CA_PEM + 2);
	assert_non_null(big);
	for (size_t extra = 0; extra <= 1; extra++) {
		size_t total = BOOT_MAX_CA_PEM + extra, hl = strlen("-----BEGIN CERTIFICATE-----\n"),
		       tl = strlen("\n-----END CERTIFICATE-----\n");
		memcpy(big, "-----BEGIN CERTIFICATE-----\n", hl);
		memset(big + hl, 'A', total - hl - tl);
		memcpy(big + total - tl, "\n-----END CERTIFICATE-----\n", tl + 1);
		assert_int_equal(strlen(big), total);
		c.ca_pem = big;
		buf_reset(&b);
		assert_int_equal(boot_config_encode(&c, &b), extra ? -EINVAL : 0);
		if (!extra) {
			assert_int_equal(frame_decode_one(buf_ptr(&b), buf_len(&b), FRAME_MAX_PAYLOAD, &type, &p, &n),
					 0);
			assert_int_equal(boot_config_decode(p, n, &d), 0);
			assert_int_equal(strlen(d.ca_pem), BOOT_MAX_CA_PEM);
			boot_config_release(&d);
		} else {
			struct buf j;
			int r;
			assert_int_equal(buf_init(&j, 1 << 20, 0), 0);
			assert_int_equal(buf_putf(&j, "%s,\"ca_pem\":\"", head), 0);
			for (const char *q = big; *q; q++) {
				assert_int_equal(*q == '\n' ? buf_putf(&j, "\\n") : buf_put(&j, q, 1), 0);
			}
			assert_int_equal(buf_putf(&j, "\"}"), 0);
			r = boot_config_decode(buf_ptr(&j), buf_len(&j), &d);
			assert_int_equal(r, -E2BIG);
			buf_release(&j);
		}
	}
	free(big);
	buf_release(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exec_roundtrip),
		cmocka_unit_test(test_data_roundtrip),
		cmocka_unit_test(test_unknown_and_strict),
		cmocka_unit_test(test_argv_cap),
		cmocka_unit_test(test_string_cap),
		cmocka_unit_test(test_direction),
		cmocka_unit_test(test_boot_config),
		cmocka_unit_test(test_boot_config_ca),
		cmocka_unit_test(test_clock),
		cmocka_unit_test(test_diff_messages),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
