/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "banned.h"
#include "cli/commands.h"
#include "cli/apiclient.h"
#include "cli/cliutil.h"
#include "daemon/daemon.h"
#include "egress/secret.h"
#include "json.h"
#include "secmem.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tkbox run --image IMG [--name NAME] [--workspace DIR|EXT4] [--env K=V]...\n"
		"                 [--memory 2G] [--cpus 2] [--disk 4G] [--timeout 1h] [--exec-timeout 30m] "
		"[--state-dir D]\n"
		"                 [--platform linux/amd64|linux/arm64] [--registry-auth FILE] [--registry-ca FILE]\n"
		"                 [--allow HOST|HOST:PORT|*.DOMAIN[:PORT]|PRESET[,...]]... [--inspect all|none]\n"
		"                 [--secret NAME=env:VAR|file:PATH|stdin@HOST[,HOST...][:Header]]...\n"
		"IMG is an image reference (python:3.12-slim, localhost:5000/test:1, name@sha256:...), a local\n"
		"source (oci:DIR[:NAME], oci-archive:FILE[:NAME], docker-archive:FILE), a local ext4 image or a\n"
		"directory. Registry images are cached: a second box of the same reference asks no registry.\n"
		"--allow (repeatable, comma lists) names what the box may reach without a person's approval:\n"
		"hosts, host:port, *.example.com, or the presets pypi, npm, github, anthropic, openai, claude-code,\n"
		"debian, apt-ubuntu, go-proxy (debian, apt-ubuntu and npm read the image's own configuration).\n"
		"--inspect all refuses every host off the list at once instead of asking a person.\n"
		"--secret (repeatable, at most 16) hands the box a placeholder in $NAME; the host's proxy swaps the\n"
		"value (read here from the env variable, the file or stdin) into the header (Authorization unless\n"
		"named) of requests to the exact hosts named, and blocks it everywhere else.\n");
}

/* ---------------------------------------------------------------- --secret */

#define RUN_SECRET_READ_MAX (EGRESS_SECRET_VALUE_MAX + 2) /* a value and its "\r\n" */

/* The source words: "stdin", "env:VAR" (a variable name), "file:PATH" (a path). */
static bool secret_source_ok(const char *s, size_t n)
{
	if (n == 5 && memcmp(s, "stdin", 5) == 0) {
		return true;
	}
	if (n > 4 && memcmp(s, "env:", 4) == 0) {
		if ((s[4] >= '0' && s[4] <= '9')) {
			return false;
		}
		for (size_t i = 4; i < n; i++) {
			char c = s[i];
			if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
				return false;
			}
		}
		return true;
	}
	return n > 5 && memcmp(s, "file:", 5) == 0 && !memchr(s, '\0', n);
}

/*
 * Read at most RUN_SECRET_READ_MAX bytes of fd into secmem; one trailing "\n"
 * or "\r\n" goes. -EFBIG past the cap. The value is then copied to a secmem
 * buffer of its own size (secmem_free takes the size it was given).
 */
static int secret_read_fd(int fd, bool one_line, uint8_t **ret, size_t *ret_n)
{
	uint8_t *b = secmem_alloc(RUN_SECRET_READ_MAX + 1);
	size_t n = 0;
	int r = 0;

	if (!b) {
		return -ENOMEM;
	}
	while (n < RUN_SECRET_READ_MAX + 1) {
		ssize_t k = read(fd, b + n, RUN_SECRET_READ_MAX + 1 - n);
		if (k < 0 && errno == EINTR) {
			continue;
		}
		if (k < 0) {
			r = -errno;
			break;
		}
		if (k == 0) {
			break;
		}
		n += (size_t)k;
		if (one_line && b[n - 1] == '\n') {
			break;
		}
	}
	if (r >= 0 && n > RUN_SECRET_READ_MAX) {
		r = -EFBIG;
	}
	if (r >= 0 && n > 0 && b[n - 1] == '\n') {
		n--;
		if (n > 0 && b[n - 1] == '\r') {
			n--;
		}
	}
	if (r >= 0 && n > EGRESS_SECRET_VALUE_MAX) {
		r = -EFBIG;
	}
	if (r >= 0) {
		*ret = n ? secmem_dup(b, n) : NULL;
		*ret_n = n;
		r = n && !*ret ? -ENOMEM : 0;
	}
	secmem_free(b, RUN_SECRET_READ_MAX + 1);
	return r;
}

int run_secret_parse(const char *arg, int stdin_fd, bool *stdin_used, struct egress_secret *ret, char *err,
		     size_t err_size)
{
	const char *eq = strchr(arg, '='), *at, *src, *why;
	struct egress_secret s = { 0 };
	char bind_err[512], shown[EGRESS_SECRET_NAME_MAX + 2] = "";
	size_t src_n, nl;
	uint8_t *v = NULL;
	size_t vn = 0;
	int r;

	/* Nothing of the text is quoted until its source is known to be a source word (F6). */
	if (!eq) {
		(void)snprintf(err, err_size,
			       "--secret takes NAME=SOURCE@HOST[,HOST...][:Header] (SOURCE: env:VAR, file:PATH or "
			       "stdin); the text given is not shown, since it may be the value itself");
		return -EINVAL;
	}
	nl = (size_t)(eq - arg);
	at = strrchr(eq + 1, '@');
	src = eq + 1;
	src_n = at ? (size_t)(at - src) : strlen(src);
	if (nl <= EGRESS_SECRET_NAME_MAX) {
		memcpy(s.name, arg, nl);
		s.name[nl] = '\0';
	}
	/* the name is shown only when the text has the flag's shape (a base32 value's "=" padding does not) */
	if (at && src_n > 0 && src[0] != '=' && nl <= EGRESS_SECRET_NAME_MAX && egress_secret_name_ok(s.name)) {
		(void)snprintf(shown, sizeof(shown), " %s", s.name);
	}
	if (!secret_source_ok(src, src_n)) {
		(void)snprintf(err, err_size,
			       "--secret%s: the source must be env:VAR, file:PATH or stdin; the text given is not "
			       "shown, since it may be the value itself",
			       shown);
		return -EINVAL;
	}
	if (nl > EGRESS_SECRET_NAME_MAX || !egress_secret_name_ok(s.name)) {
		(void)snprintf(err, err_size,
			       "--secret: the name before '=' is 1..%d of [A-Z0-9_], not starting with a digit (it "
			       "becomes the box's env variable)",
			       EGRESS_SECRET_NAME_MAX);
		return -EINVAL;
	}
	if (!at) {
		(void)snprintf(err, err_size,
			       "--secret %s: no host; write %s=SOURCE@HOST[,HOST...][:Header]: the value goes only to "
			       "the hosts named",
			       s.name, s.name);
		return -EINVAL;
	}
	r = egress_secret_binding_parse(at + 1, &s, bind_err, sizeof(bind_err));
	if (r < 0) {
		(void)snprintf(err, err_size, "--secret %s: %s", s.name, bind_err);
		return -EINVAL;
	}
	if (src_n == 5 && memcmp(src, "stdin", 5) == 0) {
		if (*stdin_used) {
			(void)snprintf(err, err_size,
				       "--secret %s: only one secret may come from stdin; use file: or "
				       "env: for the others",
				       s.name);
			return -EINVAL;
		}
		if (isatty(stdin_fd)) {
			/* typed in: one line, not echoed */
			struct termios t, quiet;
			bool echo_off = tcgetattr(stdin_fd, &t) == 0;
			quiet = t;
			quiet.c_lflag &= ~(tcflag_t)ECHO;
			echo_off = echo_off && tcsetattr(stdin_fd, TCSAFLUSH, &quiet) == 0;
			fprintf(stderr, "tkbox run: the value of secret %s (not shown), then Enter: ", s.name);
			r = secret_read_fd(stdin_fd, true, &v, &vn);
			if (echo_off) {
				(void)tcsetattr(stdin_fd, TCSAFLUSH, &t);
			}
			fputc('\n', stderr);
		} else {
			r = secret_read_fd(stdin_fd, false, &v, &vn);
		}
		if (r < 0) {
			(void)snprintf(err, err_size, "--secret %s: reading stdin: %s", s.name,
				       r == -EFBIG ? "more than 4096 bytes (EGRESS_SECRET_VALUE_MAX)" : strerror(-r));
			return r;
		}
		*stdin_used = true;
	} else if (memcmp(src, "env:", 4) == 0) {
		char var[256];
		const char *e;
		if (src_n - 4 >= sizeof(var)) {
			(void)snprintf(err, err_size, "--secret %s: the variable name after env: is too long", s.name);
			return -EINVAL;
		}
		memcpy(var, src + 4, src_n - 4);
		var[src_n - 4] = '\0';
		e = getenv(var);
		if (!e) {
			(void)snprintf(err, err_size, "--secret %s: the variable named after env: is not set", s.name);
			return -ENOENT;
		}
		vn = strlen(e);
		if (egress_secret_value_check((const uint8_t *)e, vn, &why) < 0) {
			(void)snprintf(err, err_size, "--secret %s: %s", s.name, why);
			return -EINVAL;
		}
		v = secmem_dup(e, vn);
		if (!v) {
			(void)snprintf(err, err_size, "--secret %s: no secure memory (secmem)", s.name);
			return -ENOMEM;
		}
	} else {
		_cleanup_free_ char *path = strndup(src + 5, src_n - 5);
		_cleanup_close_ int fd = path ? open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK) : -1;
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0) {
			(void)snprintf(err, err_size, "--secret %s: the file named after file: cannot be read: %s",
				       s.name, path ? strerror(errno) : "out of memory");
			return -ENOENT;
		}
		if (!S_ISREG(st.st_mode)) {
			(void)snprintf(err, err_size,
				       "--secret %s: the file named after file: is not a regular file (use stdin for a "
				       "pipe)",
				       s.name);
			return -EINVAL;
		}
		r = secret_read_fd(fd, false, &v, &vn);
		if (r < 0) {
			(void)snprintf(err, err_size, "--secret %s: the file named after file: %s", s.name,
				       r == -EFBIG ? "holds more than 4096 bytes (EGRESS_SECRET_VALUE_MAX)"
						   : "cannot be read");
			return r;
		}
	}
	if (egress_secret_value_check(v, vn, &why) < 0) {
		if (v) {
			secmem_free(v, vn);
		}
		(void)snprintf(err, err_size, "--secret %s: %s", s.name, why);
		return -EINVAL;
	}
	s.value = v;
	s.value_len = vn;
	*ret = s;
	return 0;
}

/* The body's secret values, wiped in the tree (jansson copied them) once the request is sent. */
static void run_secrets_wipe(json_t *body)
{
	json_t *a = json_object_get(body, "secrets"), *o;
	size_t i;

	json_array_foreach(a, i, o) {
		json_t *v = json_object_get(o, "value");
		if (json_is_string(v) && json_string_length(v)) {
			explicit_bzero((char *)json_string_value(v), json_string_length(v));
		}
	}
}

/* A secret as the create request carries it: {name, value, hosts, header}. */
static json_t *run_secret_json(const struct egress_secret *s)
{
	json_t *hosts = json_array();

	for (size_t h = 0; hosts && h < s->n_hosts; h++) {
		if (json_array_append_new(hosts, json_string(s->hosts[h])) < 0) {
			json_decref(hosts);
			return NULL;
		}
	}
	return hosts ? json_pack("{s:s,s:s%,s:o,s:s}", "name", s->name, "value", (const char *)s->value, s->value_len,
				 "hosts", hosts, "header", s->header)
		     : NULL;
}

/*
 * The daemon resolves --image in its own working directory: a relative local
 * source (oci:DIR, oci-archive:FILE, docker-archive:FILE, an ext4 file or a
 * directory) is made absolute here. *ret stays NULL when the name is fine as
 * it is (a registry reference, or already absolute).
 */
static int run_image_absolute(const char *image, char **ret)
{
	static const char *const prefixes[] = { "oci:", "oci-archive:", "docker-archive:" };
	_cleanup_free_ char *cwd = NULL;
	const char *prefix = "", *rest = image;
	struct stat st;
	char *out;

	for (size_t i = 0; i < ARRAY_SIZE(prefixes); i++) {
		if (strncmp(image, prefixes[i], strlen(prefixes[i])) == 0) {
			prefix = prefixes[i];
			rest = image + strlen(prefixes[i]);
		}
	}
	if (rest[0] == '/' || (!prefix[0] && stat(rest, &st) < 0)) {
		return 0;
	}
	cwd = getcwd(NULL, 0);
	if (!cwd) {
		return -errno;
	}
	if (asprintf(&out, "%s%s/%s", prefix, cwd, rest) < 0) {
		return -ENOMEM;
	}
	*ret = out;
	return 0;
}

static int run_with(int argc, char **argv, json_t *body)
{
	static const struct option longopts[] = {
		{ "image", required_argument, NULL, 'i' },
		{ "name", required_argument, NULL, 'n' },
		{ "workspace", required_argument, NULL, 'w' },
		{ "env", required_argument, NULL, 'e' },
		{ "memory", required_argument, NULL, 'M' },
		{ "cpus", required_argument, NULL, 'c' },
		{ "disk", required_argument, NULL, 'D' },
		{ "timeout", required_argument, NULL, 't' },
		{ "exec-timeout", required_argument, NULL, 'T' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "platform", required_argument, NULL, 'P' },
		{ "registry-auth", required_argument, NULL, 'A' },
		{ "registry-ca", required_argument, NULL, 'C' },
		{ "allow", required_argument, NULL, 'a' },
		{ "inspect", required_argument, NULL, 'I' },
		{ "secret", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *env = json_array(), *allow = json_array(), *reply = NULL, *secrets = json_array();
	const char *state_dir = NULL, *image = NULL;
	bool stdin_used = false;
	uint64_t v;
	int ch, status = 0, r;

	if (!env || !allow || !secrets) {
		return 125;
	}
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		r = 0;
		switch (ch) {
		case 'i':
			image = optarg;
			break;
		case 'P':
			if (strcmp(optarg, "linux/amd64") != 0 && strcmp(optarg, "linux/arm64") != 0) {
				fprintf(stderr, "tkbox run: --platform is linux/amd64 or linux/arm64\n");
				return 2;
			}
			(void)json_object_set_new(body, "platform", json_string(optarg));
			break;
		case 'A':
		case 'C': {
			/* The daemon (another cwd) hands the path to its `tkbox images` child: make it absolute. */
			_cleanup_free_ char *abs = realpath(optarg, NULL);
			if (!abs) {
				fprintf(stderr, "tkbox run: %s %s: %s\n",
					ch == 'A' ? "--registry-auth" : "--registry-ca", optarg, strerror(errno));
				return 2;
			}
			(void)json_object_set_new(body, ch == 'A' ? "registry_auth" : "registry_ca", json_string(abs));
			break;
		}
		case 'n':
			(void)json_object_set_new(body, "name", json_string(optarg));
			break;
		case 'w':
			(void)json_object_set_new(body, "workspace", json_string(optarg));
			break;
		case 'e':
			if (!strchr(optarg, '=')) {
				fprintf(stderr, "tkbox run: --env takes NAME=VALUE\n");
				return 2;
			}
			(void)json_array_append_new(env, json_string(optarg));
			break;
		case 'M':
		case 'D':
			r = cli_parse_mib(optarg, ch == 'M' ? 128 : 64, ch == 'M' ? 256 * 1024 : DAEMON_MAX_DISK_MIB,
					  &v);
			if (r >= 0) {
				(void)json_object_set_new(body, ch == 'M' ? "memory_mib" : "disk_mib",
							  json_integer((json_int_t)v));
			}
			break;
		case 'c':
			r = cli_parse_uint(optarg, 1, 64, &v);
			if (r >= 0) {
				(void)json_object_set_new(body, "cpus", json_integer((json_int_t)v));
			}
			break;
		case 't':
		case 'T':
			r = cli_parse_duration(optarg, 1, DAEMON_MAX_LIFETIME_S, &v);
			if (r >= 0) {
				(void)json_object_set_new(body, ch == 't' ? "timeout_s" : "exec_timeout_s",
							  json_integer((json_int_t)v));
			}
			break;
		case 'a':
			/* a comma list is several values; the daemon checks each (an entry or a preset) */
			for (const char *p = optarg, *c;; p = c + 1) {
				c = strchr(p, ',');
				if ((c ? (size_t)(c - p) : strlen(p)) == 0) {
					fprintf(stderr, "tkbox run: --allow %s: an empty value\n", optarg);
					return 2;
				}
				(void)json_array_append_new(allow, json_stringn(p, c ? (size_t)(c - p) : strlen(p)));
				if (!c) {
					break;
				}
			}
			break;
		case 'I':
			if (strcmp(optarg, "all") != 0 && strcmp(optarg, "none") != 0) {
				fprintf(stderr, "tkbox run: --inspect is all or none\n");
				return 2;
			}
			(void)json_object_set_new(body, "inspect", json_string(optarg));
			break;
		case 'S': {
			struct egress_secret sec;
			char err[1024];
			json_t *o;
			if (json_array_size(secrets) >= EGRESS_SECRET_MAX) {
				fprintf(stderr,
					"tkbox run: more than %d --secret flags (EGRESS_SECRET_MAX); bind fewer "
					"secrets\n",
					EGRESS_SECRET_MAX);
				return 2;
			}
			if (run_secret_parse(optarg, STDIN_FILENO, &stdin_used, &sec, err, sizeof(err)) < 0) {
				fprintf(stderr, "tkbox run: %s\n", err);
				return 2;
			}
			for (size_t i = 0; i < json_array_size(secrets); i++) {
				if (strcmp(json_string_value(json_object_get(json_array_get(secrets, i), "name")),
					   sec.name) == 0) {
					fprintf(stderr, "tkbox run: --secret %s is given twice\n", sec.name);
					secmem_free(sec.value, sec.value_len);
					return 2;
				}
			}
			o = run_secret_json(&sec);
			secmem_free(sec.value, sec.value_len);
			if (!o || json_array_append_new(secrets, o) < 0) {
				return 125;
			}
			/* In the body from here on, so every way out wipes it. */
			(void)json_object_set(body, "secrets", secrets);
			break;
		}
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
		if (r < 0) {
			fprintf(stderr, "tkbox run: bad value %s (see tkbox run --help for the ranges)\n", optarg);
			return 2;
		}
	}
	if (!image || optind != argc) {
		usage(stderr);
		return 2;
	}
	{
		_cleanup_free_ char *abs = NULL;
		r = run_image_absolute(image, &abs);
		if (r < 0) {
			fprintf(stderr, "tkbox run: --image %s: %s\n", image, strerror(-r));
			return 2;
		}
		(void)json_object_set_new(body, "image", json_string(abs ? abs : image));
	}
	if (json_array_size(env) > 0) {
		(void)json_object_set(body, "env", env);
	}
	if (json_array_size(allow) > 0) {
		(void)json_object_set(body, "allow", allow);
	}
	r = apiclient_call(state_dir, "POST", "/v1/boxes", body, &status, &reply);
	if (r < 0) {
		return 125;
	}
	if (status != 201) {
		apiclient_print_error("run", status, reply);
		return 125;
	}
	printf("%s\n", json_string_value(json_object_get(reply, "name")));
	/* what the daemon says about the allowlist (go-proxy relays to hosts the box names) */
	{
		const json_t *w = json_object_get(json_object_get(reply, "egress"), "warnings");
		for (size_t i = 0; i < json_array_size(w); i++) {
			const char *t = json_string_value(json_array_get(w, i));
			if (t) {
				fprintf(stderr, "tkbox run: warning: %s\n", t);
			}
		}
	}
	fprintf(stderr, "tkbox run: box %s running (accel %s, isolation %s, run %s)\n",
		json_string_value(json_object_get(reply, "name")), json_string_value(json_object_get(reply, "accel")),
		json_string_value(json_object_get(reply, "isolation")),
		json_string_value(json_object_get(reply, "run_id"))
			? json_string_value(json_object_get(reply, "run_id"))
			: "unrecorded");
	return 0;
}

int cmd_run(int argc, char **argv)
{
	_cleanup_json_ json_t *body = json_object();
	int r = body ? run_with(argc, argv, body) : 125;

	/* Every way out: the values read for --secret leave no copy in the tree. */
	run_secrets_wipe(body);
	return r;
}
