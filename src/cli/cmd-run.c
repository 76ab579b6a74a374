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
#include "cli/config.h"
#include "daemon/daemon.h"
#include "egress/secret.h"
#include "json.h"
#include "secmem.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tkbox run [--config FILE | --no-config] --image IMG [--name NAME] [--workspace DIR|EXT4]\n"
		"                 [--env K=V]...\n"
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
		"named) of requests to the exact hosts named, and blocks it everywhere else.\n"
		"Settings come from ./tkbox.yaml when it exists (or --config FILE; --no-config ignores it;\n"
		"docs/config.md). A flag overrides the file's setting; --allow, --env and --secret replace the\n"
		"file's whole list. The file's name, digest and the flags that overrode it are recorded.\n");
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

void run_secrets_wipe(json_t *body)
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

json_t *run_secret_json(const struct egress_secret *s)
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
static int run_image_absolute(const char *image, const char *base, char **ret)
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
	if (rest[0] == '/') {
		return 0;
	}
	cwd = base ? strdup(base) : getcwd(NULL, 0);
	if (!cwd) {
		return -errno;
	}
	if (!prefix[0]) {
		_cleanup_free_ char *p = NULL;
		if (asprintf(&p, "%s/%s", cwd, rest) < 0) {
			return -ENOMEM;
		}
		if (stat(p, &st) < 0) {
			return 0;
		}
	}
	if (asprintf(&out, "%s%s/%s", prefix, cwd, rest) < 0) {
		return -ENOMEM;
	}
	*ret = out;
	return 0;
}

/* ---------------------------------------------------------------- tkbox.yaml */

/* The flag that overrides each setting of the file. */
static const struct {
	unsigned bit;
	const char *flag;
} run_flag_names[] = {
	{ CONFIG_HAS_IMAGE, "--image" },
	{ CONFIG_HAS_NAME, "--name" },
	{ CONFIG_HAS_WORKSPACE, "--workspace" },
	{ CONFIG_HAS_INSPECT, "--inspect" },
	{ CONFIG_HAS_ALLOW, "--allow" },
	{ CONFIG_HAS_SECRETS, "--secret" },
	{ CONFIG_HAS_ENV, "--env" },
	{ CONFIG_HAS_MEMORY, "--memory" },
	{ CONFIG_HAS_CPUS, "--cpus" },
	{ CONFIG_HAS_DISK, "--disk" },
	{ CONFIG_HAS_TIMEOUT, "--timeout" },
	{ CONFIG_HAS_EXEC_TIMEOUT, "--exec-timeout" },
};

/* --config FILE, else ./tkbox.yaml when it exists, unless --no-config. 0, or the exit status (2). */
static int run_config(const char *path, bool no_config, struct config *cfg)
{
	char err[1024];
	struct stat st;
	int r;

	if (no_config || (!path && lstat("tkbox.yaml", &st) < 0 && errno == ENOENT)) {
		return 0;
	}
	r = config_load(path ? path : "tkbox.yaml", cfg, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "tkbox run: %s\n", err);
		return 2;
	}
	fprintf(stderr, "tkbox run: settings from %s\n", cfg->path);
	return 0;
}

/* The file's secrets, read from their sources as --secret would read them. */
static int run_config_secrets(const struct config *cfg, json_t *body, json_t *secrets, bool *stdin_used)
{
	for (size_t i = 0; i < cfg->n_secrets; i++) {
		struct egress_secret sec;
		_cleanup_free_ char *flag = NULL;
		char err[1024];
		json_t *o;
		if (config_secret_flag(&cfg->secrets[i], &flag) < 0) {
			return 125;
		}
		if (run_secret_parse(flag, STDIN_FILENO, stdin_used, &sec, err, sizeof(err)) < 0) {
			fprintf(stderr, "tkbox run: %s (secrets.%s in %s)\n", err, cfg->secrets[i].name, cfg->path);
			return 2;
		}
		o = run_secret_json(&sec);
		secmem_free(sec.value, sec.value_len);
		if (!o || json_array_append_new(secrets, o) < 0) {
			return 125;
		}
		(void)json_object_set(body, "secrets", secrets);
	}
	return 0;
}

static void run_set_uint(json_t *body, const char *key, unsigned bit, unsigned use, uint64_t v)
{
	if (use & bit) {
		(void)json_object_set_new(body, key, json_integer((json_int_t)v));
	}
}

/*
 * What the file sets and no flag does goes into the body; a flag replaces the
 * file's value (a list flag its whole list). body.config records the file's
 * path, digest and the flags that overrode it.
 */
static int run_config_merge(const struct config *cfg, unsigned given, json_t *body, json_t *env, json_t *allow,
			    json_t *secrets, bool *stdin_used)
{
	unsigned use = cfg->has & ~given;
	json_t *over;

	if (!cfg->path) {
		return 0;
	}
	over = json_array();
	for (size_t i = 0; over && i < ARRAY_SIZE(run_flag_names); i++) {
		if (cfg->has & given & run_flag_names[i].bit) {
			(void)json_array_append_new(over, json_string(run_flag_names[i].flag));
		}
	}
	if (!over || json_object_set_new(body, "config",
					 json_pack("{s:s,s:s,s:o}", "file", cfg->path, "sha256", cfg->sha256,
						   "overridden", over)) < 0) {
		return 125;
	}
	if (use & CONFIG_HAS_NAME) {
		(void)json_object_set_new(body, "name", json_string(cfg->name));
	}
	if (use & CONFIG_HAS_WORKSPACE) {
		(void)json_object_set_new(body, "workspace", json_string(cfg->workspace));
	}
	if (use & CONFIG_HAS_INSPECT) {
		(void)json_object_set_new(body, "inspect", json_string(cfg->inspect_all ? "all" : "none"));
	}
	for (size_t i = 0; (use & CONFIG_HAS_ALLOW) && i < cfg->n_allow; i++) {
		(void)json_array_append_new(allow, json_string(cfg->allow[i]));
	}
	for (size_t i = 0; (use & CONFIG_HAS_ENV) && i < cfg->n_env; i++) {
		(void)json_array_append_new(env, json_string(cfg->env[i]));
	}
	run_set_uint(body, "memory_mib", CONFIG_HAS_MEMORY, use, cfg->memory_mib);
	run_set_uint(body, "cpus", CONFIG_HAS_CPUS, use, cfg->cpus);
	run_set_uint(body, "disk_mib", CONFIG_HAS_DISK, use, cfg->disk_mib);
	run_set_uint(body, "timeout_s", CONFIG_HAS_TIMEOUT, use, cfg->timeout_s);
	run_set_uint(body, "exec_timeout_s", CONFIG_HAS_EXEC_TIMEOUT, use, cfg->exec_timeout_s);
	return (use & CONFIG_HAS_SECRETS) ? run_config_secrets(cfg, body, secrets, stdin_used) : 0;
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
		{ "config", required_argument, NULL, 'F' },
		{ "no-config", no_argument, NULL, 'N' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *env = json_array(), *allow = json_array(), *reply = NULL, *secrets = json_array();
	const char *state_dir = NULL, *image = NULL, *config_path = NULL;
	struct config cfg __attribute__((cleanup(config_release))) = { 0 };
	bool stdin_used = false, no_config = false;
	unsigned given = 0; /* enum config_has: what the flags set */
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
			given |= CONFIG_HAS_IMAGE;
			break;
		case 'F':
			config_path = optarg;
			break;
		case 'N':
			no_config = true;
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
			given |= CONFIG_HAS_NAME;
			break;
		case 'w': {
			/* The daemon resolves nothing against its own cwd: the path goes absolute, as the user meant it. */
			_cleanup_free_ char *abs = realpath(optarg, NULL);
			if (!abs) {
				fprintf(stderr, "tkbox run: --workspace %s: %s\n", optarg, strerror(errno));
				return 2;
			}
			(void)json_object_set_new(body, "workspace", json_string(abs));
			given |= CONFIG_HAS_WORKSPACE;
			break;
		}
		case 'e':
			if (!strchr(optarg, '=')) {
				fprintf(stderr, "tkbox run: --env takes NAME=VALUE\n");
				return 2;
			}
			(void)json_array_append_new(env, json_string(optarg));
			given |= CONFIG_HAS_ENV;
			break;
		case 'M':
		case 'D':
			given |= ch == 'M' ? CONFIG_HAS_MEMORY : CONFIG_HAS_DISK;
			r = cli_parse_mib(optarg, ch == 'M' ? 128 : 64, ch == 'M' ? 256 * 1024 : DAEMON_MAX_DISK_MIB,
					  &v);
			if (r >= 0) {
				(void)json_object_set_new(body, ch == 'M' ? "memory_mib" : "disk_mib",
							  json_integer((json_int_t)v));
			}
			break;
		case 'c':
			given |= CONFIG_HAS_CPUS;
			r = cli_parse_uint(optarg, 1, 64, &v);
			if (r >= 0) {
				(void)json_object_set_new(body, "cpus", json_integer((json_int_t)v));
			}
			break;
		case 't':
		case 'T':
			given |= ch == 't' ? CONFIG_HAS_TIMEOUT : CONFIG_HAS_EXEC_TIMEOUT;
			r = cli_parse_duration(optarg, 1, DAEMON_MAX_LIFETIME_S, &v);
			if (r >= 0) {
				(void)json_object_set_new(body, ch == 't' ? "timeout_s" : "exec_timeout_s",
							  json_integer((json_int_t)v));
			}
			break;
		case 'a':
			given |= CONFIG_HAS_ALLOW;
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
			given |= CONFIG_HAS_INSPECT;
			break;
		case 'S': {
			struct egress_secret sec;
			char err[1024];
			json_t *o;
			given |= CONFIG_HAS_SECRETS;
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
	if (optind != argc || (config_path && no_config)) {
		usage(stderr);
		return 2;
	}
	r = run_config(config_path, no_config, &cfg);
	if (r != 0) {
		return r;
	}
	r = run_config_merge(&cfg, given, body, env, allow, secrets, &stdin_used);
	if (r != 0) {
		return r;
	}
	if (!image && cfg.image) {
		image = cfg.image;
	}
	if (!image) {
		fprintf(stderr, "tkbox run: no image: give --image IMG or image: in tkbox.yaml\n");
		usage(stderr);
		return 2;
	}
	{
		_cleanup_free_ char *abs = NULL;
		r = run_image_absolute(image, image == cfg.image ? cfg.dir : NULL, &abs);
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
