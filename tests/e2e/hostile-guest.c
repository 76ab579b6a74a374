/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hostile-guest: a test-only PID 1 that the daemon boots in place of
 * tkbox-guest (`tkbox daemon --guest build/tests/e2e/hostile-guest`). It is
 * the real guest's boot (src/guest/main.c, compiled in whole) up to the agent
 * loop, so it passes the boot handshake exactly as tkbox-guest does. Then,
 * by the box environment's TKBOX_HOSTILE (`tkbox run --env TKBOX_HOSTILE=MODE`),
 * it answers the boot ping and misbehaves:
 *
 *   bigframe      announces a 4 GiB frame, then writes zeros
 *   garbage       writes pseudo-random bytes
 *   badtype       sends a frame of an undefined type (0x42)
 *   unknown-exec  sends output for an exec id the host never started
 *   flood-pong    sends 1,000,000 pongs for the boot ping ({"id":1})
 *   ignore-kills  starts every exec (STARTED) and never ends one, whatever the host signals
 *   hang          reads nothing and sends nothing more
 *   flood-egress  writes the egress port without pause, and serves execs as tkbox-guest does
 *   patch         serves the box as far as the patch door needs (pongs, an
 *                 orderly shutdown; execs refused) and answers every DIFF with
 *                 the bytes of TKBOX_HOSTILE_PATCH_B64 (standard base64, given
 *                 with `tkbox run --env`) as DIFF_DATA frames, then DIFF_END:
 *                 any patch a compromised guest could send
 *                 (tests/patch/patch-hostile.sh)
 *
 * Without TKBOX_HOSTILE it is tkbox-guest, so a normal neighbour box can run
 * in the same daemon. Never installed; never a part of a release.
 *
 * `hostile-guest --hijack`, run as root by a command inside a normal box,
 * takes PID 1's agent channel with pidfd_getfd and writes a frame of an
 * undefined type on it: root in a box is a hostile agent too.
 */
#define guest_agent_run hostile_agent_run
#define main guest_main
int guest_main(int argc, char **argv);
#include "../../src/guest/main.c"
#undef main
#undef guest_agent_run

/* The real agent loop (src/guest/agent.c), for the neighbour and the egress flood. */
int guest_agent_run(const struct guest_agent_config *cfg);

#define HOSTILE_ENV "TKBOX_HOSTILE="
#define PATCH_B64_ENV "TKBOX_HOSTILE_PATCH_B64="
#define FLOOD_PONGS 1000000

static int hport = -1;

/* Bytes read from the port past the last whole message, kept for the next get_msg. */
static uint8_t rbuf[4096];
static size_t roff, rlen;

/* Write all of p, waiting while the port is full. False once the host is gone. */
static bool put(const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n > 0) {
		struct pollfd pfd = { .fd = hport, .events = POLLOUT };
		ssize_t w = write(hport, b, n);
		if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
			(void)poll(&pfd, 1, 1000);
			continue;
		}
		if (w <= 0) {
			return false;
		}
		b += w;
		n -= (size_t)w;
	}
	return true;
}

static bool put_buf(struct buf *b)
{
	bool ok = put(buf_ptr(b), buf_len(b));
	buf_reset(b);
	return ok;
}

/* Block until the next whole message from the host: true with *m, false when the port fails. */
static bool get_msg(struct frame_decoder *d, struct buf *payload, struct agent_msg *m)
{
	for (;;) {
		while (roff < rlen) {
			size_t used = 0;
			uint8_t type;
			int r = frame_decoder_feed(d, rbuf + roff, rlen - roff, &used);
			roff += used;
			if (r < 0) {
				return false;
			}
			if (r == 1) {
				buf_reset(payload);
				return frame_decoder_take(d, &type, payload) >= 0 &&
				       agent_msg_decode(type, buf_ptr(payload), buf_len(payload), m) >= 0;
			}
		}
		struct pollfd pfd = { .fd = hport, .events = POLLIN };
		ssize_t n;

		(void)poll(&pfd, 1, -1);
		n = read(hport, rbuf, sizeof(rbuf));
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			continue;
		}
		if (n <= 0) {
			return false;
		}
		roff = 0;
		rlen = (size_t)n;
	}
}

static _noreturn_ void hang(void)
{
	for (;;) {
		(void)pause();
	}
}

/* Writes without end: zeros, or pseudo-random bytes. */
static _noreturn_ void spew(bool random)
{
	static uint8_t chunk[65536];
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (;;) {
		if (random) {
			for (size_t i = 0; i < sizeof(chunk); i++) {
				x ^= x << 13;
				x ^= x >> 7;
				x ^= x << 17;
				chunk[i] = (uint8_t)x;
			}
		}
		if (!put(chunk, sizeof(chunk))) {
			hang();
		}
	}
}

/* Starts every exec, never ends one; signals, stdin, credit and shutdown are ignored. */
static _noreturn_ void ignore_kills(struct frame_decoder *d, struct buf *payload, struct buf *out)
{
	for (;;) {
		struct agent_msg m = { 0 };
		if (!get_msg(d, payload, &m)) {
			hang();
		}
		if (m.type == AGENT_MSG_EXEC) {
			struct agent_msg s = { .type = AGENT_MSG_STARTED, .id = m.id, .pid = 2 };
			if (agent_msg_encode(&s, out) < 0 || !put_buf(out)) {
				hang();
			}
		} else if (m.type == AGENT_MSG_PING) {
			if (agent_encode_simple(out, AGENT_MSG_PONG, m.id) < 0 || !put_buf(out)) {
				hang();
			}
		}
		agent_msg_release(&m);
	}
}

static void flood_egress(void)
{
	char dev[PATH_MAX_BUF];
	pid_t pid;
	int fd;

	if (find_port("tkbox.egress", dev, sizeof(dev)) < 0) {
		log_error("hostile: no egress port");
		return;
	}
	pid = fork();
	if (pid != 0) {
		return;
	}
	fd = open(dev, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		_exit(1);
	}
	hport = fd;
	spew(true);
}

static int b64_value(uint8_t c)
{
	if (c >= 'A' && c <= 'Z') {
		return c - 'A';
	}
	if (c >= 'a' && c <= 'z') {
		return c - 'a' + 26;
	}
	if (c >= '0' && c <= '9') {
		return c - '0' + 52;
	}
	if (c == '+') {
		return 62;
	}
	if (c == '/') {
		return 63;
	}
	return -1;
}

/* Standard base64 with padding into out (the guest links no libcrypto); -EBADMSG on anything else. */
static int b64_decode_std(const char *s, struct buf *out)
{
	size_t n = strlen(s);

	if (n % 4 != 0) {
		return -EBADMSG;
	}
	for (size_t i = 0; i < n; i += 4) {
		int v[4];
		size_t pad = 0;
		uint8_t o[3];
		for (size_t j = 0; j < 4; j++) {
			if (s[i + j] == '=' && i + 4 == n && j >= 2) {
				v[j] = 0;
				pad++;
				continue;
			}
			v[j] = pad ? -1 : b64_value((uint8_t)s[i + j]);
			if (v[j] < 0) {
				return -EBADMSG;
			}
		}
		o[0] = (uint8_t)(v[0] << 2 | v[1] >> 4);
		o[1] = (uint8_t)((v[1] & 15) << 4 | v[2] >> 2);
		o[2] = (uint8_t)((v[2] & 3) << 6 | v[3]);
		if (buf_put(out, o, 3 - pad) < 0) {
			return -E2BIG;
		}
	}
	return 0;
}

/* The patch as DIFF_DATA frames of at most AGENT_MAX_DATA bytes, then DIFF_END with its byte count. */
static bool send_patch(uint32_t id, const struct buf *patch, struct buf *out)
{
	static uint8_t frame[4 + AGENT_MAX_DATA];
	char end[128];
	size_t off = 0;
	int n;

	while (off < buf_len(patch)) {
		size_t k = MIN(buf_len(patch) - off, AGENT_MAX_DATA);
		frame[0] = (uint8_t)(id >> 24);
		frame[1] = (uint8_t)(id >> 16);
		frame[2] = (uint8_t)(id >> 8);
		frame[3] = (uint8_t)id;
		memcpy(frame + 4, (const uint8_t *)buf_ptr(patch) + off, k);
		if (frame_encode(out, AGENT_MSG_DIFF_DATA, frame, 4 + k) < 0 || !put_buf(out)) {
			return false;
		}
		off += k;
	}
	/* Keys in JCS order, as the real guest writes them. */
	n = snprintf(end, sizeof(end), "{\"bytes\":%zu,\"id\":%u,\"notices\":[]}", buf_len(patch), id);
	return n > 0 && (size_t)n < sizeof(end) && frame_encode(out, AGENT_MSG_DIFF_END, end, (size_t)n) >= 0 &&
	       put_buf(out);
}

/*
 * Mode patch: pongs, every DIFF answered with the patch from the box env, execs
 * refused, SHUTDOWN acknowledged (returns 0: main powers off, so a stop is
 * orderly and the host saves what this guest sent).
 */
static int serve_patch(const struct guest_agent_config *cfg, struct frame_decoder *d, struct buf *payload,
		       struct buf *out)
{
	struct buf patch;
	const char *b64 = NULL;

	for (size_t i = 0; cfg->base_env && cfg->base_env[i]; i++) {
		if (strncmp(cfg->base_env[i], PATCH_B64_ENV, strlen(PATCH_B64_ENV)) == 0) {
			b64 = cfg->base_env[i] + strlen(PATCH_B64_ENV);
		}
	}
	if (buf_init(&patch, AGENT_MAX_STRING, 0) < 0 || !b64 || b64_decode_std(b64, &patch) < 0) {
		log_error("hostile: patch mode needs %sBASE64", PATCH_B64_ENV);
		hang();
	}
	if (cfg->ready_fd >= 0) {
		(void)close(cfg->ready_fd);
	}
	for (;;) {
		struct agent_msg m = { 0 };
		bool ok = true;
		if (!get_msg(d, payload, &m)) {
			hang();
		}
		switch (m.type) {
		case AGENT_MSG_PING:
			ok = agent_encode_simple(out, AGENT_MSG_PONG, m.id) >= 0 && put_buf(out);
			break;
		case AGENT_MSG_EXEC:
			ok = agent_encode_error(out, m.id, AGENT_ERR_EXEC,
						"the hostile patch guest runs no commands") >= 0 &&
			     put_buf(out);
			break;
		case AGENT_MSG_DIFF:
			kmsg_line("HOSTILE-GUEST sends its patch");
			ok = send_patch(m.id, &patch, out);
			break;
		case AGENT_MSG_SHUTDOWN:
			agent_msg_release(&m);
			(void)agent_encode_simple(out, AGENT_MSG_SHUTDOWN_ACK, 0);
			(void)put_buf(out);
			return 0;
		default:
			break;
		}
		agent_msg_release(&m);
		if (!ok) {
			hang();
		}
	}
}

static int hostile(const char *mode, const struct guest_agent_config *cfg)
{
	struct frame_decoder d;
	struct buf payload, out;
	struct agent_msg m = { 0 };
	int fl;

	kmsg_line("HOSTILE-GUEST booted");
	if (strcmp(mode, "flood-egress") == 0) {
		flood_egress();
		return guest_agent_run(cfg);
	}
	hport = cfg->port_fd;
	fl = fcntl(hport, F_GETFL);
	if (fl < 0 || frame_decoder_init(&d, AGENT_MAX_JSON) < 0 || buf_init(&payload, AGENT_MAX_JSON, 0) < 0 ||
	    buf_init(&out, (size_t)1 << 20, 0) < 0) {
		return -ENOMEM;
	}
	/* The boot handshake: the host's first ping gets its pong, as from tkbox-guest. */
	if (!get_msg(&d, &payload, &m) || m.type != AGENT_MSG_PING) {
		return -EPROTO;
	}
	if (agent_encode_simple(&out, AGENT_MSG_PONG, m.id) < 0 || !put_buf(&out)) {
		return -EPIPE;
	}
	if (strcmp(mode, "bigframe") == 0) {
		uint8_t hdr[5] = { AGENT_MSG_STDOUT, 0xff, 0xff, 0xff, 0xff };
		if (put(hdr, sizeof(hdr))) {
			spew(false);
		}
	} else if (strcmp(mode, "garbage") == 0) {
		spew(true);
	} else if (strcmp(mode, "badtype") == 0) {
		(void)frame_encode(&out, 0x42, "{}", 2);
		(void)put_buf(&out);
	} else if (strcmp(mode, "unknown-exec") == 0) {
		(void)agent_encode_data(&out, AGENT_MSG_STDOUT, 4242, "x", 1);
		(void)put_buf(&out);
	} else if (strcmp(mode, "flood-pong") == 0) {
		for (int i = 0; i < FLOOD_PONGS; i++) {
			if (agent_encode_simple(&out, AGENT_MSG_PONG, m.id) < 0) {
				if (!put_buf(&out)) {
					break;
				}
				i--;
			}
		}
		(void)put_buf(&out);
	} else if (strcmp(mode, "ignore-kills") == 0) {
		ignore_kills(&d, &payload, &out);
	} else if (strcmp(mode, "hang") == 0) {
		hang();
	} else if (strcmp(mode, "patch") == 0) {
		return serve_patch(cfg, &d, &payload, &out);
	} else {
		log_error("hostile: unknown mode %s", mode);
	}
	hang();
}

int hostile_agent_run(const struct guest_agent_config *cfg)
{
	for (size_t i = 0; cfg->base_env && cfg->base_env[i]; i++) {
		if (strncmp(cfg->base_env[i], HOSTILE_ENV, strlen(HOSTILE_ENV)) == 0) {
			return hostile(cfg->base_env[i] + strlen(HOSTILE_ENV), cfg);
		}
	}
	return guest_agent_run(cfg);
}

/* Root inside a normal box: take PID 1's open agent port and speak on it. */
static int hijack(void)
{
	char dev[PATH_MAX_BUF], link[PATH_MAX_BUF], path[64];
	struct buf out;
	DIR *d;
	struct dirent *de;
	int pidfd, fd = -1;

	if (find_port("tkbox.agent", dev, sizeof(dev)) < 0) {
		fprintf(stderr, "hijack: no tkbox.agent port\n");
		return 1;
	}
	pidfd = (int)syscall(SYS_pidfd_open, 1, 0);
	d = opendir("/proc/1/fd");
	while (pidfd >= 0 && d && fd < 0 && (de = readdir(d))) {
		ssize_t n;
		(void)snprintf(path, sizeof(path), "/proc/1/fd/%s", de->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n > 0) {
			link[n] = '\0';
			if (strcmp(link, dev) == 0) {
				fd = (int)syscall(SYS_pidfd_getfd, pidfd, (int)strtol(de->d_name, NULL, 10), 0);
			}
		}
	}
	if (d) {
		(void)closedir(d);
	}
	if (fd < 0) {
		fprintf(stderr, "hijack: could not take PID 1's %s: %s\n", dev, strerror(errno));
		return 1;
	}
	if (buf_init(&out, 64, 0) < 0 || frame_encode(&out, 0x42, "{}", 2) < 0 ||
	    write(fd, buf_ptr(&out), buf_len(&out)) != (ssize_t)buf_len(&out)) {
		fprintf(stderr, "hijack: write: %s\n", strerror(errno));
		return 1;
	}
	printf("hijacked %s\n", dev);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--hijack") == 0) {
		return hijack();
	}
	return guest_main(argc, argv);
}
