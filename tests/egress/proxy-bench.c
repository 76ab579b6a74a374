/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The supervisor's proxy (src/daemon/egress-sup.c) alone on the host's
 * loopback, for bench/egress.sh: its tunnel throughput against socat on the
 * same path. The real egress_sup code runs its own poll loop here as in the
 * supervisor; a socketpair stands in for the tkbox.egress port, and a thread
 * plays the guest forwarder (OPEN, the CONNECT head as DATA, WINDOW grants
 * like src/guest/egress.c: 1 MiB outstanding, topped up per quarter) and
 * counts what arrives. The "daemon" answers egress_open by dialling
 * 127.0.0.1:PORT (a source that sends BYTES and closes) and handing the socket
 * over with egress_dial (plain: the tunnel is not TLS).
 *   egress-proxy-bench PORT          through the proxy
 *   egress-proxy-bench --raw PORT    the same reader timing a plain TCP read of PORT (socat's relay)
 * prints "<MiB/s> <bytes> <seconds>" timed from the first tunnel byte to the
 * stream's end; 1 on any failure (with why on stderr). Measures only.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "daemon/egress-sup.h"
#include "banned.h"

#define GRANT_TOTAL ((uint32_t)1024 * 1024)
#define GRANT_STEP (GRANT_TOTAL / 4)

static int port_no;
static int64_t open_conn = -1; /* an egress_open to answer */
static volatile int done_seen, guest_over;
static char fail_why[256];

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int on_send(void *ctx, const struct supmsg *m)
{
	(void)ctx;
	if (m->op == SUPMSG_EGRESS_OPEN) {
		open_conn = m->conn;
	} else if (m->op == SUPMSG_EGRESS_DONE) {
		done_seen = 1;
	} else if (m->op == SUPMSG_EGRESS_REFUSED) {
		snprintf(fail_why, sizeof(fail_why), "the proxy refused: %s", m->message ? m->message : "?");
		done_seen = 1;
	}
	return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n > 0) {
		ssize_t k = write(fd, b, n);
		if (k < 0 && errno == EINTR) {
			continue;
		}
		if (k <= 0) {
			return -1;
		}
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

static int read_all(int fd, void *p, size_t n)
{
	uint8_t *b = p;
	while (n > 0) {
		ssize_t k = read(fd, b, n);
		if (k < 0 && errno == EINTR) {
			continue;
		}
		if (k <= 0) {
			return -1;
		}
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

/* One frame: [type][len u32 BE][id u32 BE][payload]. */
static int send_frame(int fd, uint8_t type, uint32_t id, const void *p, size_t n)
{
	uint8_t h[9];
	uint32_t len = (uint32_t)(4 + n);
	h[0] = type;
	h[1] = (uint8_t)(len >> 24);
	h[2] = (uint8_t)(len >> 16);
	h[3] = (uint8_t)(len >> 8);
	h[4] = (uint8_t)len;
	h[5] = (uint8_t)(id >> 24);
	h[6] = (uint8_t)(id >> 16);
	h[7] = (uint8_t)(id >> 8);
	h[8] = (uint8_t)id;
	return write_all(fd, h, sizeof(h)) < 0 || (n > 0 && write_all(fd, p, n) < 0) ? -1 : 0;
}

static int send_window(int fd, uint32_t id, uint32_t credit)
{
	uint8_t c[4] = { (uint8_t)(credit >> 24), (uint8_t)(credit >> 16), (uint8_t)(credit >> 8), (uint8_t)credit };
	return send_frame(fd, EGRESS_WINDOW, id, c, sizeof(c));
}

struct guest_result {
	uint64_t bytes;
	double t0, t1;
	int ok;
};

static void *guest(void *arg)
{
	int fd = *(int *)arg;
	static struct guest_result r;
	static uint8_t payload[70 * 1024];
	char head[512];
	size_t head_n = 0;
	int established = 0;
	uint32_t consumed = 0;
	const uint32_t id = 1;

	if (send_frame(fd, EGRESS_OPEN, id, NULL, 0) < 0) {
		return &r;
	}
	for (;;) {
		uint8_t h[5];
		if (read_all(fd, h, sizeof(h)) < 0) {
			break;
		}
		uint32_t len = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
		if (len < 4 || len > sizeof(payload) || read_all(fd, payload, len) < 0) {
			break;
		}
		const uint8_t *p = payload + 4;
		size_t n = len - 4;
		if (h[0] == EGRESS_OPEN_OK) {
			char req[160];
			int k = snprintf(req, sizeof(req),
					 "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", port_no,
					 port_no);
			if (send_frame(fd, EGRESS_DATA, id, req, (size_t)k) < 0 ||
			    send_window(fd, id, GRANT_TOTAL - EGRESS_INITIAL_WINDOW) < 0) {
				break;
			}
		} else if (h[0] == EGRESS_DATA) {
			consumed += (uint32_t)n;
			if (!established) {
				size_t take = n < sizeof(head) - 1 - head_n ? n : sizeof(head) - 1 - head_n;
				memcpy(head + head_n, p, take);
				head_n += take;
				head[head_n] = '\0';
				char *end = strstr(head, "\r\n\r\n");
				if (!end) {
					continue;
				}
				if (strncmp(head, "HTTP/1.1 200", 12) != 0) {
					snprintf(fail_why, sizeof(fail_why), "the proxy answered: %.120s", head);
					break;
				}
				established = 1;
				/* The proxy classifies the tunnel from the client's first bytes: not TLS, plain allowed. */
				if (send_frame(fd, EGRESS_DATA, id, "go\n", 3) < 0) {
					break;
				}
				size_t rest = head_n - (size_t)(end + 4 - head);
				if (rest > 0) {
					r.t0 = now_s();
					r.bytes += rest;
				}
			} else {
				if (r.bytes == 0) {
					r.t0 = now_s();
				}
				r.bytes += n;
			}
			if (consumed >= GRANT_STEP) {
				if (send_window(fd, id, consumed) < 0) {
					break;
				}
				consumed = 0;
			}
		} else if (h[0] == EGRESS_FIN || h[0] == EGRESS_CLOSE) {
			r.t1 = now_s();
			r.ok = established && r.bytes > 0;
			(void)send_frame(fd, EGRESS_CLOSE, id, "\0", 1);
			break;
		} else if (h[0] == EGRESS_OPEN_REFUSED) {
			snprintf(fail_why, sizeof(fail_why), "OPEN refused: %.*s", (int)n, (const char *)p);
			break;
		}
	}
	guest_over = 1;
	return &r;
}

static int dial(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (fd >= 0) {
			close(fd);
		}
		return -1;
	}
	return fd;
}

/* The same timing over a plain TCP read: from the first byte to EOF. */
static int read_raw(int port)
{
	static uint8_t b[1 << 20];
	uint64_t bytes = 0;
	double t0 = 0, t1;
	int fd = dial(port);
	if (fd < 0) {
		fprintf(stderr, "egress-proxy-bench: dial 127.0.0.1:%d failed\n", port);
		return 1;
	}
	for (;;) {
		ssize_t k = read(fd, b, sizeof(b));
		if (k < 0 && errno == EINTR) {
			continue;
		}
		if (k <= 0) {
			break;
		}
		if (bytes == 0) {
			t0 = now_s();
		}
		bytes += (uint64_t)k;
	}
	t1 = now_s();
	close(fd);
	if (bytes == 0 || t1 <= t0) {
		fprintf(stderr, "egress-proxy-bench: no bytes from 127.0.0.1:%d\n", port);
		return 1;
	}
	printf("%.1f %llu %.3f\n", (double)bytes / 1048576.0 / (t1 - t0), (unsigned long long)bytes, t1 - t0);
	return 0;
}

int main(int argc, char **argv)
{
	int sp[2];
	struct egress_sup *e = NULL;
	struct egress_sup_host host = { .send = on_send, .ctx = NULL };
	pthread_t th;
	void *res = NULL;
	char url[64];

	bool raw = argc == 3 && strcmp(argv[1], "--raw") == 0;
	char *end = NULL;
	unsigned long v = argc == 2 || raw ? strtoul(argv[argc - 1], &end, 10) : 0;
	if (!end || *end != '\0' || v == 0 || v > 65535) {
		fprintf(stderr, "usage: egress-proxy-bench [--raw] PORT\n");
		return 2;
	}
	port_no = (int)v;
	if (raw) {
		return read_raw(port_no);
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0 || egress_sup_new(sp[0], &host, &e) < 0) {
		fprintf(stderr, "egress-proxy-bench: setup failed\n");
		return 1;
	}
	if (pthread_create(&th, NULL, guest, &sp[1]) != 0) {
		return 1;
	}
	double deadline = now_s() + 600;
	while (!done_seen && !guest_over && now_s() < deadline) {
		struct pollfd p[EGRESS_SUP_POLL_MAX];
		size_t n = egress_sup_fill(e, p, EGRESS_SUP_POLL_MAX);
		int r = poll(p, n, egress_sup_pending(e) ? 0 : 100);
		if (r < 0 && errno != EINTR) {
			break;
		}
		if (egress_sup_handle(e, p, r > 0 ? n : 0) < 0) {
			snprintf(fail_why, sizeof(fail_why), "the mux broke: %s",
				 egress_sup_violation(e) ? egress_sup_violation(e) : "?");
			break;
		}
		if (open_conn >= 0) {
			struct supmsg m;
			int fd = dial(port_no);
			memset(&m, 0, sizeof(m));
			snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port_no);
			m.op = SUPMSG_EGRESS_DIAL;
			m.conn = open_conn;
			m.url = url;
			m.plain = true;
			open_conn = -1;
			if (fd < 0 || egress_sup_message(e, &m, &fd) < 0) {
				snprintf(fail_why, sizeof(fail_why), "dial 127.0.0.1:%d failed", port_no);
				if (fd >= 0) {
					close(fd);
				}
				break;
			}
		}
	}
	shutdown(sp[1], SHUT_RDWR);
	pthread_join(th, &res);
	egress_sup_free(e);
	close(sp[0]);
	close(sp[1]);
	const struct guest_result *g = res;
	if (!g || !g->ok || g->t1 <= g->t0) {
		fprintf(stderr, "egress-proxy-bench: %s\n", fail_why[0] ? fail_why : "no tunnel bytes");
		return 1;
	}
	double secs = g->t1 - g->t0;
	printf("%.1f %llu %.3f\n", (double)g->bytes / 1048576.0 / secs, (unsigned long long)g->bytes, secs);
	return 0;
}
