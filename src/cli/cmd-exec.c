/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>

#include "banned.h"
#include "io.h"
#include "cli/commands.h"
#include "crypto.h"
#include "exec-stream.h"
#include "cli/apiclient.h"
#include "cli/cliutil.h"
#include "daemon/door.h"
#include "json.h"
#include "log.h"

/* Exit statuses (docs/cli.md). */
#define EXIT_TKBOX 125 /* tkbox could not run the command */
#define EXIT_REFUSED 126 /* the door refused it: nothing ran */

static void usage(FILE *f)
{
	fprintf(f, "usage: tkbox exec BOX [-i] [--env K=V]... [--cwd DIR] [--timeout 30m] [--state-dir D] -- ARGV...\n"
		   "  -i, --interactive   attach stdin: known up front when it ends within 1 MiB, else streamed\n");
}

static void on_approval(const char *id)
{
	char q[LOG_QUOTE_BUFSIZE];
	fprintf(stderr, "tkbox exec: held for a person's approval %s: tkbox-signer approvals approve %s (or reject)\n",
		log_quote(id, strlen(id), q), log_quote(id, strlen(id), q));
}

/* Send one exec stream frame (exec-stream.c encodes it). */
static int send_frame(int fd, const struct exs_frame *f)
{
	struct buf b;
	int r = buf_init(&b, EXS_MAX_FRAME + FRAME_HEADER_SIZE, 0);

	if (r < 0) {
		return r;
	}
	r = exs_encode(f, &b);
	if (r >= 0) {
		const uint8_t *q = buf_ptr(&b);
		size_t left = buf_len(&b);
		while (left > 0 && r >= 0) {
			ssize_t k = RETRY_EINTR(send(fd, q, left, MSG_NOSIGNAL));
			if (k < 0) {
				r = negative_errno();
			} else {
				q += k;
				left -= (size_t)k;
			}
		}
	}
	buf_release(&b);
	return r;
}

/* Read stdin up to DOOR_MAX_STDIN + 1 bytes: 1 when it ended within the cap (known up front). */
static int read_upfront(struct buf *in)
{
	for (;;) {
		uint8_t *dst;
		ssize_t n;
		size_t want = MIN((size_t)65536, DOOR_MAX_STDIN + 1 - buf_len(in));
		int r;
		if (want == 0) {
			return 0;
		}
		r = buf_reserve(in, want, &dst);
		if (r < 0) {
			return r;
		}
		n = RETRY_EINTR(read(0, dst, want));
		in->len -= want - (n > 0 ? (size_t)n : 0);
		if (n < 0) {
			return negative_errno();
		}
		if (n == 0) {
			return 1;
		}
	}
}

struct stream {
	int sock;
	int sfd;
	bool stream_stdin;
	bool stdin_eof;
	bool eof_sent;
	uint64_t credit;
	struct buf pending; /* stdin read but not yet sent (beyond the credit) */
	struct frame_decoder dec;
	struct buf payload;
	bool have_exit;
	struct exit_status exit;
	unsigned interrupts;
};

static int on_frame(struct stream *s, uint8_t type)
{
	struct exs_frame f;
	int r = exs_decode(EXS_FROM_SUPERVISOR, type, buf_ptr(&s->payload), buf_len(&s->payload), &f);

	if (r < 0) {
		return -EPROTO;
	}
	switch (f.type) {
	case EXS_STARTED:
		return 0;
	case EXS_STDOUT:
		return io_write_all(1, f.data, f.len) < 0 ? 0 : 0; /* a closed stdout does not stop the command */
	case EXS_STDERR:
		return io_write_all(2, f.data, f.len) < 0 ? 0 : 0;
	case EXS_EXIT:
		s->exit = f.exit;
		s->have_exit = true;
		return 0;
	case EXS_ERROR: {
		char q[LOG_QUOTE_BUFSIZE];
		fprintf(stderr, "tkbox exec: %s\n", log_quote(f.data, f.len, q));
		return 0;
	}
	case EXS_CREDIT:
		s->credit += f.credit;
		return 0;
	default:
		return -EPROTO;
	}
}

static int feed(struct stream *s, const uint8_t *p, size_t n)
{
	size_t off = 0;

	while (off < n) {
		size_t used = 0;
		uint8_t type;
		int r = frame_decoder_feed(&s->dec, p + off, n - off, &used);
		off += used;
		if (r < 0) {
			return r;
		}
		if (r == 1) {
			buf_reset(&s->payload);
			r = frame_decoder_take(&s->dec, &type, &s->payload);
			if (r >= 0) {
				r = on_frame(s, type);
			}
			if (r < 0) {
				return r;
			}
		}
	}
	return 0;
}

/* Send pending stdin within the credit. */
static int pump_stdin(struct stream *s)
{
	while (buf_len(&s->pending) > 0 && s->credit > 0) {
		size_t k = MIN(MIN(buf_len(&s->pending), EXS_MAX_DATA), (size_t)s->credit);
		struct exs_frame f = { .type = EXS_STDIN, .data = buf_ptr(&s->pending), .len = k };
		int r = send_frame(s->sock, &f);
		if (r < 0) {
			return r;
		}
		(void)buf_consume(&s->pending, k);
		s->credit -= k;
	}
	if (s->stdin_eof && buf_len(&s->pending) == 0 && !s->eof_sent) {
		s->eof_sent = true;
		return send_frame(s->sock, &(struct exs_frame){ .type = EXS_STDIN_EOF });
	}
	return 0;
}

static int run_stream(struct stream *s)
{
	for (;;) {
		struct pollfd p[3];
		nfds_t np = 0;
		int r;
		bool want_stdin;

		/* Credit may have arrived with the last frames read: send what it allows before waiting. */
		if (s->stream_stdin && pump_stdin(s) < 0 && !s->have_exit) {
			/* The command may have ended without reading stdin: keep reading its output. */
			s->stdin_eof = true;
			s->stream_stdin = false;
		}
		want_stdin = s->stream_stdin && !s->stdin_eof && buf_len(&s->pending) == 0 && s->credit > 0;

		p[np++] = (struct pollfd){ .fd = s->sock, .events = POLLIN };
		p[np++] = (struct pollfd){ .fd = s->sfd, .events = POLLIN };
		if (want_stdin) {
			p[np++] = (struct pollfd){ .fd = 0, .events = POLLIN };
		}
		r = poll(p, np, -1);
		if (r < 0) {
			if (errno == EINTR) {
				continue;
			}
			return negative_errno();
		}
		if (p[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			if (read(s->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
				/* Ctrl-C interrupts the command in the box; a third one kills it. */
				struct exs_frame f = { .type = EXS_SIGNAL, .signal = (uint8_t)si.ssi_signo };
				if (++s->interrupts >= 3) {
					f.signal = SIGKILL;
				}
				(void)send_frame(s->sock, &f);
			}
		}
		if (np > 2 && (p[2].revents & (POLLIN | POLLHUP | POLLERR))) {
			uint8_t *dst;
			ssize_t n;
			r = buf_reserve(&s->pending, EXS_MAX_DATA, &dst);
			if (r < 0) {
				return r;
			}
			n = RETRY_EINTR(read(0, dst, EXS_MAX_DATA));
			s->pending.len -= EXS_MAX_DATA - (n > 0 ? (size_t)n : 0);
			if (n <= 0) {
				s->stdin_eof = true;
			}
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			uint8_t rb[65536];
			ssize_t n = RETRY_EINTR(recv(s->sock, rb, sizeof(rb), 0));
			if (n <= 0) {
				return s->have_exit ? 0 : -ECONNRESET;
			}
			r = feed(s, rb, (size_t)n);
			if (r < 0) {
				return r;
			}
		}
	}
}

/*
 * A signal while the daemon had not let the command start yet (it waits for
 * the signer's decision, which has a deadline, or for a person's approval):
 * give up at once. Closing the connection makes the daemon drop the request;
 * a command let through at that very moment sees its client gone and is
 * killed, as for any client that dies.
 */
static int interrupted(int signo)
{
	const char *name = sigabbrev_np(signo);

	fprintf(stderr,
		"tkbox exec: SIG%s while waiting for the signer's decision or an approval: gave up; the command was "
		"not started\n",
		name ? name : "?");
	return 128 + signo;
}

static int refusal_status(const char *code)
{
	if (!code) {
		return EXIT_TKBOX;
	}
	if (strcmp(code, "denied") == 0 || strcmp(code, "not_approved") == 0 ||
	    strcmp(code, "signer_unreachable") == 0 || strcmp(code, "env_refused") == 0 ||
	    strcmp(code, "refused") == 0) {
		return EXIT_REFUSED;
	}
	return EXIT_TKBOX;
}

int cmd_exec(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "interactive", no_argument, NULL, 'i' },
		{ "env", required_argument, NULL, 'e' },
		{ "cwd", required_argument, NULL, 'C' },
		{ "timeout", required_argument, NULL, 't' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *body = json_object(), *env = json_array(), *reply = NULL;
	struct stream s = { .sock = -1, .sfd = -1 };
	struct apiclient *c = NULL;
	const char *state_dir = NULL, *box = NULL;
	bool interactive = false;
	char path[128];
	sigset_t mask;
	uint64_t v;
	int ch, r, ret = EXIT_TKBOX;

	if (!body || !env) {
		return EXIT_TKBOX;
	}
	/* BOX may come before or after the options; ARGV follows "--". */
	optind = 1;
	for (;;) {
		ch = getopt_long(argc, argv, "+ih", longopts, NULL);
		if (ch == -1) {
			if (!box && optind < argc && strcmp(argv[optind - 1], "--") != 0) {
				box = argv[optind++];
				continue;
			}
			break;
		}
		switch (ch) {
		case 'i':
			interactive = true;
			break;
		case 'e':
			(void)json_array_append_new(env, json_string(optarg));
			break;
		case 'C':
			(void)json_object_set_new(body, "cwd", json_string(optarg));
			break;
		case 't':
			if (cli_parse_duration(optarg, 1, 7 * 86400, &v) < 0) {
				fprintf(stderr, "tkbox exec: --timeout takes a duration such as 90s, 30m or 2h\n");
				return 2;
			}
			(void)json_object_set_new(body, "timeout_s", json_integer((json_int_t)v));
			break;
		case 'd':
			state_dir = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!box || !door_box_name_ok(box) || optind >= argc) {
		usage(stderr);
		return 2;
	}
	{
		json_t *a = json_array();
		for (int i = optind; a && i < argc; i++) {
			(void)json_array_append_new(a, json_string(argv[i]));
		}
		(void)json_object_set_new(body, "argv", a);
	}
	(void)json_object_set(body, "env", env);
	if (buf_init(&s.pending, DOOR_MAX_STDIN + EXS_MAX_DATA + 1, 0) < 0 ||
	    frame_decoder_init(&s.dec, EXS_MAX_FRAME) < 0 || buf_init(&s.payload, EXS_MAX_FRAME, 0) < 0) {
		return EXIT_TKBOX;
	}
	if (interactive) {
		r = isatty(0) ? 0 : read_upfront(&s.pending);
		if (r < 0) {
			fprintf(stderr, "tkbox exec: reading stdin: %s\n", tk_strerror(r));
			return EXIT_TKBOX;
		}
		if (r == 1) {
			/* Ended within 1 MiB: decided with its digest, and exactly these bytes are the stdin. */
			struct buf b64;
			char *enc = NULL;
			if (buf_init(&b64, 2 * DOOR_MAX_STDIN, 0) < 0 ||
			    b64_encode(buf_ptr(&s.pending), buf_len(&s.pending), B64_STD, &b64) < 0 ||
			    buf_dup_cstring(&b64, &enc) < 0) {
				return EXIT_TKBOX;
			}
			buf_release(&b64);
			(void)json_object_set_new(body, "stdin",
						  json_pack("{s:s,s:s}", "mode", "upfront", "data", enc));
			free(enc);
			buf_reset(&s.pending);
		} else {
			s.stream_stdin = true;
			(void)json_object_set_new(body, "stdin", json_pack("{s:s}", "mode", "stream"));
		}
	}

	/* Ctrl-C and friends go to the command in the box, not to this process. */
	(void)sigemptyset(&mask);
	(void)sigaddset(&mask, SIGINT);
	(void)sigaddset(&mask, SIGTERM);
	(void)sigaddset(&mask, SIGHUP);
	(void)sigaddset(&mask, SIGQUIT);
	(void)sigprocmask(SIG_BLOCK, &mask, NULL);
	(void)signal(SIGPIPE, SIG_IGN);
	s.sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (s.sfd < 0) {
		/* Blocked signals nobody reads would make this process unkillable but by SIGKILL. */
		fprintf(stderr, "tkbox exec: signalfd: %s\n", tk_strerror(negative_errno()));
		(void)sigprocmask(SIG_UNBLOCK, &mask, NULL);
		goto out;
	}

	(void)snprintf(path, sizeof(path), "/v1/boxes/%s/exec", box);
	r = apiclient_connect(state_dir, &c);
	if (r < 0) {
		goto out;
	}
	/* While the daemon waits for the signer (or a person), a signal ends this wait: see interrupted(). */
	c->intr_fd = s.sfd;
	r = apiclient_request(c, "POST", path, body, true, on_approval);
	if (r < 0 && c->intr_signo > 0) {
		ret = interrupted(c->intr_signo);
		goto out;
	}
	if (r < 0) {
		fprintf(stderr, "tkbox exec: the daemon's answer was cut or malformed: %s\n", tk_strerror(r));
		goto out;
	}
	if (c->resp.status != 101 || !c->resp.upgrade_exec) {
		const char *code = NULL;
		json_t *e, *rules;
		r = apiclient_read_json(c, &reply);
		if (r < 0 && c->intr_signo > 0) {
			ret = interrupted(c->intr_signo);
			goto out;
		}
		if (r < 0) {
			fprintf(stderr, "tkbox exec: the daemon answered HTTP %d\n", c->resp.status);
			goto out;
		}
		e = json_object_get(reply, "error");
		code = json_string_value(json_object_get(e, "code"));
		rules = json_object_get(e, "rule_ids");
		if (code && strcmp(code, "denied") == 0 && json_array_size(rules) > 0) {
			size_t i;
			json_t *id;
			fprintf(stderr, "tkbox exec: denied by the signer:");
			json_array_foreach(rules, i, id) {
				fprintf(stderr, " %s", json_string_value(id) ? json_string_value(id) : "?");
			}
			fprintf(stderr, " (%s)\n", json_string_value(json_object_get(e, "message")));
		} else {
			apiclient_print_error("exec", c->resp.status, reply);
		}
		ret = refusal_status(code);
		goto out;
	}
	s.sock = c->fd;
	r = feed(&s, buf_ptr(&c->in), buf_len(&c->in));
	if (r >= 0) {
		r = run_stream(&s);
	}
	if (r < 0 || !s.have_exit) {
		fprintf(stderr, "tkbox exec: the stream ended before the command's exit status (%s)\n",
			tk_strerror(r < 0 ? r : -ECONNRESET));
		goto out;
	}
	ret = exit_status_shell(&s.exit);
out:
	apiclient_free(c);
	buf_release(&s.pending);
	buf_release(&s.payload);
	frame_decoder_release(&s.dec);
	if (s.sfd >= 0) {
		(void)close(s.sfd);
	}
	return ret;
}
