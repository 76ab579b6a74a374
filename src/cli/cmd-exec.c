/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>

#include "banned.h"
#include "io.h"
#include "cli/commands.h"
#include "cli/cliutil.h"
#include "cli/execclient.h"
#include "daemon/door.h"
#include "json.h"
#include "log.h"

/* Exit statuses (docs/cli.md). */
#define EXIT_TKBOX 125 /* tkbox could not run the command */
#define EXIT_REFUSED 126 /* the door refused it: nothing ran */

static void usage(FILE *f)
{
	fprintf(f, "usage: tkbox exec BOX [-i] [--json] [--env K=V]... [--cwd DIR] [--timeout 30m] [--state-dir D] -- "
		   "ARGV...\n"
		   "  -i, --interactive   attach stdin: known up front when it ends within 1 MiB, else streamed\n"
		   "  --json              one JSON object on stdout once the command ended (docs/cli.md)\n");
}

static void on_approval(const char *id, void *ctx)
{
	char q[LOG_QUOTE_BUFSIZE];

	(void)ctx;
	fprintf(stderr, "tkbox exec: held for a person's approval %s: tkbox-signer approvals approve %s (or reject)\n",
		log_quote(id, strlen(id), q), log_quote(id, strlen(id), q));
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

static void print_refusal(const struct execclient_result *res)
{
	const json_t *e = res->error;
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *msg = json_string_value(json_object_get(e, "message"));
	json_t *rules = json_object_get(e, "rule_ids"), *id;
	size_t i;

	if (code && strcmp(code, "denied") == 0 && json_array_size(rules) > 0) {
		fprintf(stderr, "tkbox exec: denied by the signer:");
		json_array_foreach(rules, i, id) {
			fprintf(stderr, " %s", json_string_value(id) ? json_string_value(id) : "?");
		}
		fprintf(stderr, " (%s)\n", msg ? msg : "");
	} else if (msg) {
		fprintf(stderr, "tkbox exec: %s\n", msg);
	} else {
		fprintf(stderr, "tkbox exec: the daemon answered HTTP %d\n", res->http_status);
	}
}

/* --json: the result as one object on stdout (docs/cli.md, "tkbox exec --json"). */
static int print_json(const struct execclient_result *res)
{
	_cleanup_json_ json_t *o = json_object();
	int r = o ? 0 : -ENOMEM;

	if (r >= 0 && res->outcome == EXECCLIENT_REFUSED) {
		r = json_object_set_new(o, "http_status", json_integer(res->http_status));
		if (r >= 0 && res->error) {
			r = json_object_set(o, "error", res->error);
		}
	} else if (r >= 0) {
		r = execclient_exit_json(o, &res->exit);
		if (r >= 0) {
			r = execclient_output_json(o, "stdout", &res->out, res->out_total);
		}
		if (r >= 0) {
			r = execclient_output_json(o, "stderr", &res->errout, res->err_total);
		}
		if (r >= 0 && buf_len(&res->stream_error) > 0) {
			r = json_object_set_new(
				o, "error",
				json_stringn((const char *)buf_ptr(&res->stream_error), buf_len(&res->stream_error)));
		}
	}
	if (r < 0 || json_dumpf(o, stdout, JSON_COMPACT) < 0 || fputc('\n', stdout) == EOF || fflush(stdout) != 0) {
		fprintf(stderr, "tkbox exec: writing the JSON result failed\n");
		return -EIO;
	}
	return 0;
}

struct exec_args {
	const char *state_dir;
	const char *box;
	bool interactive;
	bool json;
};

static int parse_args(int argc, char **argv, json_t *body, struct exec_args *a)
{
	static const struct option longopts[] = {
		{ "interactive", no_argument, NULL, 'i' },   { "json", no_argument, NULL, 'j' },
		{ "env", required_argument, NULL, 'e' },     { "cwd", required_argument, NULL, 'C' },
		{ "timeout", required_argument, NULL, 't' }, { "state-dir", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },	     { NULL, 0, NULL, 0 },
	};
	json_t *env = json_array(), *av = json_array();
	uint64_t v;
	int ch;

	if (!env || !av || json_object_set_new(body, "env", env) < 0 || json_object_set_new(body, "argv", av) < 0) {
		return EXIT_TKBOX;
	}
	/* BOX may come before or after the options; ARGV follows "--". */
	optind = 1;
	for (;;) {
		ch = getopt_long(argc, argv, "+ih", longopts, NULL);
		if (ch == -1) {
			if (!a->box && optind < argc && strcmp(argv[optind - 1], "--") != 0) {
				a->box = argv[optind++];
				continue;
			}
			break;
		}
		switch (ch) {
		case 'i':
			a->interactive = true;
			break;
		case 'j':
			a->json = true;
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
			a->state_dir = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!a->box || !door_box_name_ok(a->box) || optind >= argc) {
		usage(stderr);
		return 2;
	}
	for (int i = optind; i < argc; i++) {
		(void)json_array_append_new(av, json_string(argv[i]));
	}
	return -1;
}

/* What the command's run came to: the process exit status, with its lines printed. */
static int finish(const struct exec_args *a, const struct execclient_result *res)
{
	switch (res->outcome) {
	case EXECCLIENT_INTERRUPTED:
		return interrupted(res->intr_signo);
	case EXECCLIENT_REFUSED:
		print_refusal(res);
		if (a->json) {
			(void)print_json(res);
		}
		return refusal_status(json_string_value(json_object_get(res->error, "code")));
	case EXECCLIENT_FAILED:
		if (buf_len(&res->stream_error) > 0) {
			char q[LOG_QUOTE_BUFSIZE];
			fprintf(stderr, "tkbox exec: %s\n",
				log_quote(buf_ptr(&res->stream_error), buf_len(&res->stream_error), q));
		}
		if (!res->connected) {
			return EXIT_TKBOX; /* apiclient said why */
		}
		fprintf(stderr,
			"tkbox exec: the daemon's answer or the stream ended before the command's exit status (%s)\n",
			tk_strerror(res->err));
		return EXIT_TKBOX;
	case EXECCLIENT_RAN:
		if (buf_len(&res->stream_error) > 0 && !a->json) {
			char q[LOG_QUOTE_BUFSIZE];
			fprintf(stderr, "tkbox exec: %s\n",
				log_quote(buf_ptr(&res->stream_error), buf_len(&res->stream_error), q));
		}
		if (a->json && print_json(res) < 0) {
			return EXIT_TKBOX;
		}
		return exit_status_shell(&res->exit);
	default:
		return EXIT_TKBOX;
	}
}

int cmd_exec(int argc, char **argv)
{
	_cleanup_json_ json_t *body = json_object();
	struct execclient_result res = { 0 };
	struct exec_args a = { 0 };
	struct buf in = { 0 };
	struct execclient_opts o = {
		.stdin_fd = 0, .out_fd = 1, .err_fd = 2, .sig_fd = -1, .on_approval = on_approval
	};
	sigset_t mask;
	int r, ret = EXIT_TKBOX;

	if (!body) {
		return EXIT_TKBOX;
	}
	r = parse_args(argc, argv, body, &a);
	if (r >= 0) {
		return r;
	}
	o.state_dir = a.state_dir;
	o.box = a.box;
	o.body = body;
	if (a.json) {
		o.out_fd = o.err_fd = -1;
		o.collect_max = EXECCLIENT_JSON_MAX_OUTPUT;
	}
	if (buf_init(&in, DOOR_MAX_STDIN + 1, 0) < 0) {
		return EXIT_TKBOX;
	}
	if (a.interactive) {
		r = isatty(0) ? 0 : read_upfront(&in);
		if (r < 0) {
			fprintf(stderr, "tkbox exec: reading stdin: %s\n", tk_strerror(r));
			goto out;
		}
		/* Ended within 1 MiB: decided with its digest, and exactly these bytes are the stdin. */
		o.stdin_mode = r == 1 ? EXECCLIENT_STDIN_UPFRONT : EXECCLIENT_STDIN_STREAM;
		o.stdin_data = buf_ptr(&in);
		o.stdin_len = buf_len(&in);
		/* Streamed: what was read already goes first, then the rest of stdin. */
	}

	/* Ctrl-C and friends go to the command in the box, not to this process. */
	(void)sigemptyset(&mask);
	(void)sigaddset(&mask, SIGINT);
	(void)sigaddset(&mask, SIGTERM);
	(void)sigaddset(&mask, SIGHUP);
	(void)sigaddset(&mask, SIGQUIT);
	(void)sigprocmask(SIG_BLOCK, &mask, NULL);
	(void)signal(SIGPIPE, SIG_IGN);
	o.sig_fd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (o.sig_fd < 0) {
		/* Blocked signals nobody reads would make this process unkillable but by SIGKILL. */
		fprintf(stderr, "tkbox exec: signalfd: %s\n", tk_strerror(negative_errno()));
		(void)sigprocmask(SIG_UNBLOCK, &mask, NULL);
		goto out;
	}
	r = execclient_run(&o, &res);
	if (r < 0) {
		fprintf(stderr, "tkbox exec: %s\n", tk_strerror(r));
		goto out;
	}
	ret = finish(&a, &res);
	execclient_result_release(&res);
out:
	buf_release(&in);
	if (o.sig_fd >= 0) {
		(void)close(o.sig_fd);
	}
	return ret;
}
