/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "client.h"
#include "config.h"
#include "log.h"
#include "rpc.h"
#include "server.h"

#include "banned.h"
#include "io.h"

#define UP_WAIT_MS 30000
#define DOWN_WAIT_MS 15000

struct opts {
	char *dir;
	const char *socket;
	bool dev;
	bool system;
	bool wait;
	const char *run;
	const char *out;
	bool json; /* status, approvals list: the signer's answer as JSON on stdout */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tkbox-signer COMMAND [--dir DIR] [--socket PATH]\n"
		"  init [--dev|--system]      create keys, config, default policy and trust.json\n"
		"  serve                      run in the foreground\n"
		"  up [--wait]                run in the background (--wait: until the socket answers)\n"
		"  down                       stop the background signer\n"
		"  status [--json]            print the signer's status\n"
		"  approvals list [--json]|approve ID|reject ID\n"
		"  export --run ID [--out FILE.tkb]   write the run's bundle and FILE.trust.json\n"
		"  rpc                        send NDJSON requests from stdin, print the replies\n"
		"  --version\n"
		"DIR defaults to $%s, else ~/.local/share/tkbox-signer (dev) or /var/lib/tkbox-signer (--system);\n"
		"the socket to --socket, $%s, the config's socket, else $XDG_RUNTIME_DIR/tkbox-signer/signer.sock.\n",
		SIGNER_DIR_ENV, SIGNER_SOCKET_ENV);
}

static int resolve_dir(struct opts *o)
{
	const char *env = getenv(SIGNER_DIR_ENV);

	if (o->dir) {
		return 0;
	}
	if (env && env[0] == '/') {
		o->dir = strdup(env);
		return o->dir ? 0 : -ENOMEM;
	}
	return signer_default_dir(o->system ? SIGNER_MODE_SYSTEM : SIGNER_MODE_DEV, &o->dir);
}

static int load_config(struct opts *o, struct signer_config *cfg)
{
	char err[512];
	int r = signer_config_load(o->dir, o->socket, cfg, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "tkbox-signer: %s\n", err);
	}
	return r;
}

static int cmd_init(struct opts *o)
{
	char err[512] = "";
	int r;

	if (o->dev && o->system) {
		fprintf(stderr, "tkbox-signer: --dev and --system exclude each other\n");
		return 2;
	}
	r = signer_init_dir(o->dir, o->system ? SIGNER_MODE_SYSTEM : SIGNER_MODE_DEV, o->socket, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "tkbox-signer: init: %s\n", err[0] ? err : strerror(-r));
		return 1;
	}
	printf("initialised %s (%s mode)\ntrust file: %s/trust.json\n", o->dir, o->system ? "system" : "dev", o->dir);
	return 0;
}

static int cmd_serve(struct opts *o, int ready_fd)
{
	struct signer_config cfg = { 0 };
	char err[512] = "";
	int r;

	if (load_config(o, &cfg) < 0) {
		return 1;
	}
	r = server_run(&cfg, ready_fd, err, sizeof(err));
	signer_config_release(&cfg);
	if (r < 0) {
		log_error("serve: %s", err[0] ? err : strerror(-r));
		return 1;
	}
	return 0;
}

static int try_hello(const char *socket_path)
{
	struct signer_client *c = NULL;
	char err[256];
	int r = signer_client_open(socket_path, &c, err, sizeof(err));
	signer_client_free(c);
	return r;
}

static int cmd_up(struct opts *o)
{
	struct signer_config cfg = { 0 };
	_cleanup_free_ char *logpath = NULL;
	int pfd[2];
	pid_t pid;
	int r;

	if (load_config(o, &cfg) < 0) {
		return 1;
	}
	if (try_hello(cfg.socket_path) == 0) {
		printf("tkbox-signer already running on %s\n", cfg.socket_path);
		signer_config_release(&cfg);
		return 0;
	}
	if (asprintf(&logpath, "%s/signer.log", o->dir) < 0 || pipe2(pfd, O_CLOEXEC) < 0) {
		signer_config_release(&cfg);
		return 1;
	}
	pid = fork();
	if (pid < 0) {
		perror("fork");
		signer_config_release(&cfg);
		return 1;
	}
	if (pid == 0) {
		int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
		int lf = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		close(pfd[0]);
		if (nul < 0 || lf < 0 || setsid() < 0 || dup2(nul, 0) < 0 || dup2(lf, 1) < 0 || dup2(lf, 2) < 0) {
			_exit(1);
		}
		/* Double fork: the signer is not a child of the caller's shell or session. */
		pid = fork();
		if (pid < 0) {
			_exit(1);
		}
		if (pid > 0) {
			_exit(0);
		}
		signer_config_release(&cfg);
		_exit(cmd_serve(o, pfd[1]));
	}
	close(pfd[1]);
	(void)waitpid(pid, NULL, 0);
	if (o->wait) {
		struct pollfd p = { .fd = pfd[0], .events = POLLIN };
		char byte;
		r = RETRY_EINTR(poll(&p, 1, UP_WAIT_MS));
		if (r <= 0 || read(pfd[0], &byte, 1) != 1 || try_hello(cfg.socket_path) < 0) {
			fprintf(stderr, "tkbox-signer: the signer did not come up; see %s\n", logpath);
			close(pfd[0]);
			signer_config_release(&cfg);
			return 1;
		}
		printf("tkbox-signer up on %s\n", cfg.socket_path);
	}
	close(pfd[0]);
	signer_config_release(&cfg);
	return 0;
}

static int read_pid(const char *dir, pid_t *ret)
{
	_cleanup_free_ char *path = NULL, *data = NULL;
	char *end;
	long v;
	int r;

	if (asprintf(&path, "%s/signer.pid", dir) < 0) {
		return -ENOMEM;
	}
	r = io_read_file(AT_FDCWD, path, 32, IO_READ_NOFOLLOW, &data, NULL);
	if (r < 0) {
		return r;
	}
	v = strtol(data, &end, 10);
	if (v <= 1 || (*end != '\n' && *end != '\0')) {
		return -EBADMSG;
	}
	*ret = (pid_t)v;
	return 0;
}

static int cmd_down(struct opts *o)
{
	pid_t pid;
	int r = read_pid(o->dir, &pid);

	if (r < 0) {
		printf("tkbox-signer is not running (no pid file in %s)\n", o->dir);
		return 0;
	}
	if (kill(pid, SIGTERM) < 0) {
		printf("tkbox-signer is not running (stale pid %d)\n", (int)pid);
		return 0;
	}
	for (int waited = 0; waited < DOWN_WAIT_MS; waited += 50) {
		if (kill(pid, 0) < 0 && errno == ESRCH) {
			printf("tkbox-signer stopped\n");
			return 0;
		}
		(void)usleep(50 * 1000);
	}
	fprintf(stderr, "tkbox-signer: pid %d did not stop within %d s\n", (int)pid, DOWN_WAIT_MS / 1000);
	return 1;
}

/* role: the role declared in hello ("approver" for a person's answers), or NULL for none (runtime). */
static int open_client(struct opts *o, const char *role, struct signer_client **ret)
{
	struct signer_config cfg = { 0 };
	char err[512];
	int r;

	if (load_config(o, &cfg) < 0) {
		return -ENOENT;
	}
	r = signer_client_open_as(cfg.socket_path, role, ret, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "tkbox-signer: %s\n", err);
	}
	signer_config_release(&cfg);
	return r;
}

static int call_print(struct signer_client *c, json_t *req, int fd, json_t **ret)
{
	const char *code, *msg;
	json_t *rep = NULL;
	int r;

	if (!req) {
		return -ENOMEM;
	}
	r = signer_client_call(c, req, fd, &rep);
	json_decref(req);
	if (r < 0) {
		fprintf(stderr, "tkbox-signer: rpc failed: %s\n", strerror(-r));
		return r;
	}
	code = signer_reply_error(rep, &msg);
	if (code) {
		fprintf(stderr, "tkbox-signer: %s: %s\n", code, msg);
		json_decref(rep);
		return -EPROTO;
	}
	*ret = rep;
	return 0;
}

/* --json: the signer's answer as it is (indented, keys sorted), for scripts. */
static void print_reply_json(const json_t *rep)
{
	char *s = json_dumps(rep, JSON_INDENT(2) | JSON_SORT_KEYS);

	printf("%s\n", s ? s : "null");
	free(s);
}

static int cmd_status(struct opts *o)
{
	struct signer_client *c = NULL;
	json_t *rep = NULL, *v;
	const char *k;

	if (open_client(o, NULL, &c) < 0) {
		/* with --json stdout stays JSON or empty */
		fprintf(o->json ? stderr : stdout, "tkbox-signer: not running\n");
		return 3;
	}
	if (call_print(c, json_pack("{s:s}", "method", "status"), -1, &rep) < 0) {
		signer_client_free(c);
		return 1;
	}
	if (o->json) {
		print_reply_json(rep);
		json_decref(rep);
		signer_client_free(c);
		return 0;
	}
	json_object_foreach(rep, k, v) {
		if (json_is_string(v)) {
			printf("%s: %s\n", k, json_string_value(v));
		} else if (json_is_integer(v)) {
			printf("%s: %lld\n", k, (long long)json_integer_value(v));
		}
	}
	json_decref(rep);
	signer_client_free(c);
	return 0;
}

static int cmd_approvals(struct opts *o, int argc, char **argv)
{
	struct signer_client *c = NULL;
	json_t *rep = NULL, *a, *v;
	char rid[64];
	size_t i;
	int rc = 1;

	if (argc < 1 || (strcmp(argv[0], "list") != 0 && argc < 2)) {
		usage(stderr);
		return 2;
	}
	if (open_client(o, "approver", &c) < 0) {
		return 1;
	}
	if (strcmp(argv[0], "list") == 0) {
		if (call_print(c, json_pack("{s:s}", "method", "approval_list"), -1, &rep) < 0) {
			goto out;
		}
		a = json_object_get(rep, "approvals");
		if (o->json) {
			/* {approvals: [{approval_id, state, run_id, tool, decision_id, rule_ids, expires_at, reason?}]} */
			print_reply_json(rep);
			rc = 0;
			goto out;
		}
		if (json_array_size(a) == 0) {
			printf("no pending approvals\n");
		}
		json_array_foreach(a, i, v) {
			_cleanup_free_ char *rules = json_dumps(json_object_get(v, "rule_ids"), JSON_COMPACT);
			const char *reason = json_string_value(json_object_get(v, "reason"));
			printf("%s  run=%s  tool=%s  rules=%s  expires=%s%s%s\n",
			       json_string_value(json_object_get(v, "approval_id")),
			       json_string_value(json_object_get(v, "run_id")),
			       json_string_value(json_object_get(v, "tool")), rules ? rules : "[]",
			       json_string_value(json_object_get(v, "expires_at")), reason ? "  reason=" : "",
			       reason ? reason : "");
		}
		rc = 0;
	} else if (strcmp(argv[0], "approve") == 0 || strcmp(argv[0], "reject") == 0) {
		snprintf(rid, sizeof(rid), "cli-%ld-%d", (long)time(NULL), (int)getpid());
		if (call_print(c,
			       json_pack("{s:s,s:s,s:s,s:s}", "method", "approval_decide", "request_id", rid,
					 "approval_id", argv[1], "decision", argv[0]),
			       -1, &rep) < 0) {
			goto out;
		}
		printf("%s: %s\n", argv[1], json_string_value(json_object_get(rep, "state")));
		rc = 0;
	} else {
		usage(stderr);
		rc = 2;
	}
out:
	if (rep) {
		json_decref(rep);
	}
	signer_client_free(c);
	return rc;
}

static int cmd_export(struct opts *o)
{
	struct signer_client *c = NULL;
	_cleanup_free_ char *out = NULL, *trust_path = NULL, *tmp = NULL;
	json_t *rep = NULL;
	const char *trust;
	size_t n;
	int fd, rc = 1;

	if (!o->run) {
		fprintf(stderr, "tkbox-signer: export needs --run ID\n");
		return 2;
	}
	if (o->out) {
		out = strdup(o->out);
	} else if (asprintf(&out, "%s.tkb", o->run) < 0) {
		out = NULL;
	}
	if (!out) {
		return 1;
	}
	n = strlen(out);
	if (n > 4 && strcmp(out + n - 4, ".tkb") == 0) {
		if (asprintf(&trust_path, "%.*s.trust.json", (int)(n - 4), out) < 0) {
			return 1;
		}
	} else if (asprintf(&trust_path, "%s.trust.json", out) < 0) {
		return 1;
	}
	if (asprintf(&tmp, "%s.part", out) < 0) {
		return 1;
	}
	if (open_client(o, NULL, &c) < 0) {
		return 1;
	}
	/* The signer writes into an fd we opened: it needs no access to our directory. */
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		fprintf(stderr, "tkbox-signer: %s: %s\n", tmp, strerror(errno));
		goto out;
	}
	if (call_print(c, json_pack("{s:s,s:s}", "method", "export", "run_id", o->run), fd, &rep) < 0) {
		close(fd);
		(void)unlink(tmp);
		goto out;
	}
	if (fsync(fd) < 0 || close(fd) < 0 || rename(tmp, out) < 0) {
		fprintf(stderr, "tkbox-signer: writing %s: %s\n", out, strerror(errno));
		goto out;
	}
	trust = json_string_value(json_object_get(rep, "trust"));
	if (!trust || io_write_file_atomic(trust_path, trust, strlen(trust), 0644) < 0) {
		fprintf(stderr, "tkbox-signer: writing %s failed\n", trust_path);
		goto out;
	}
	printf("bundle: %s (%lld bytes, sha256 %s, tree size %lld%s)\ntrust: %s\n", out,
	       (long long)json_integer_value(json_object_get(rep, "size")),
	       json_string_value(json_object_get(rep, "sha256")),
	       (long long)json_integer_value(json_object_get(rep, "tree_size")),
	       json_is_true(json_object_get(rep, "closed")) ? "" : ", run still open", trust_path);
	rc = 0;
out:
	if (rep) {
		json_decref(rep);
	}
	signer_client_free(c);
	return rc;
}

static int cmd_rpc(struct opts *o)
{
	struct signer_client *c = NULL;
	struct signer_config cfg = { 0 };
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int r, rc = 0;

	/* Raw: no hello is sent for you, so version handling can be scripted too. */
	if (load_config(o, &cfg) < 0) {
		return 1;
	}
	r = signer_client_connect(cfg.socket_path, 0, &c);
	signer_config_release(&cfg);
	if (r < 0) {
		fprintf(stderr, "tkbox-signer: connect: %s\n", strerror(-r));
		return 1;
	}
	while ((n = getline(&line, &cap, stdin)) > 0) {
		json_t *rep = NULL;
		char *s;
		if (line[n - 1] != '\n') {
			line[n] = '\0';
		}
		if ((size_t)n == 1 && line[0] == '\n') {
			continue;
		}
		if ((r = signer_client_send_raw(c, line, (size_t)n)) < 0 ||
		    (line[n - 1] != '\n' && (r = signer_client_send_raw(c, "\n", 1)) < 0) ||
		    (r = signer_client_recv(c, &rep)) < 0) {
			fprintf(stderr, "tkbox-signer: rpc: %s\n", strerror(-r));
			rc = 1;
			break;
		}
		s = json_dumps(rep, JSON_COMPACT);
		printf("%s\n", s ? s : "null");
		fflush(stdout);
		free(s);
		json_decref(rep);
	}
	free(line);
	signer_client_free(c);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "socket", required_argument, NULL, 's' },
		{ "dev", no_argument, NULL, 'D' },
		{ "system", no_argument, NULL, 'S' },
		{ "wait", no_argument, NULL, 'w' },
		{ "run", required_argument, NULL, 'r' },
		{ "out", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { 0 };
	const char *cmd;
	int c, rc;

	log_set_ident("tkbox-signer");
	while ((c = getopt_long(argc, argv, "+d:s:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			free(o.dir);
			o.dir = strdup(optarg);
			break;
		case 's':
			o.socket = optarg;
			break;
		case 'V':
			printf("tkbox-signer %s\n", TKBOX_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	cmd = argv[optind];
	/* Options may also follow the command. */
	optind++;
	{
		int sub_argc = argc - optind + 1;
		char **sub_argv = argv + optind - 1;
		/*
		 * No '+': options may come after positional words (approvals approve ID --dir D). optind = 0,
		 * not 1: glibc then re-reads the ordering from this optstring; with 1 it keeps the first
		 * loop's '+' (stop at the first non-option) and the options after ID were never seen.
		 */
		optind = 0;
		while ((c = getopt_long(sub_argc, sub_argv, "d:s:h", longopts, NULL)) != -1) {
			switch (c) {
			case 'd':
				free(o.dir);
				o.dir = strdup(optarg);
				break;
			case 's':
				o.socket = optarg;
				break;
			case 'D':
				o.dev = true;
				break;
			case 'S':
				o.system = true;
				break;
			case 'w':
				o.wait = true;
				break;
			case 'r':
				o.run = optarg;
				break;
			case 'o':
				o.out = optarg;
				break;
			case 'j':
				o.json = true;
				break;
			case 'h':
				usage(stdout);
				return 0;
			default:
				usage(stderr);
				return 2;
			}
		}
		argc = sub_argc - optind;
		argv = sub_argv + optind;
	}
	if (resolve_dir(&o) < 0) {
		fprintf(stderr, "tkbox-signer: no state directory (set --dir, $%s or $HOME)\n", SIGNER_DIR_ENV);
		return 2;
	}
	if (strcmp(cmd, "init") == 0) {
		rc = cmd_init(&o);
	} else if (strcmp(cmd, "serve") == 0) {
		rc = cmd_serve(&o, -1);
	} else if (strcmp(cmd, "up") == 0) {
		rc = cmd_up(&o);
	} else if (strcmp(cmd, "down") == 0) {
		rc = cmd_down(&o);
	} else if (strcmp(cmd, "status") == 0) {
		rc = cmd_status(&o);
	} else if (strcmp(cmd, "approvals") == 0) {
		rc = cmd_approvals(&o, argc, argv);
	} else if (strcmp(cmd, "export") == 0) {
		rc = cmd_export(&o);
	} else if (strcmp(cmd, "rpc") == 0) {
		rc = cmd_rpc(&o);
	} else {
		usage(stderr);
		rc = 2;
	}
	free(o.dir);
	return rc;
}
