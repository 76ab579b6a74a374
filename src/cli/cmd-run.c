/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "banned.h"
#include "cli/commands.h"
#include "cli/apiclient.h"
#include "cli/cliutil.h"
#include "daemon/daemon.h"
#include "json.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tkbox run --image IMG [--name NAME] [--workspace DIR|EXT4] [--env K=V]...\n"
		"                 [--memory 2G] [--cpus 2] [--disk 4G] [--timeout 1h] [--exec-timeout 30m] "
		"[--state-dir D]\n"
		"                 [--platform linux/amd64|linux/arm64] [--registry-auth FILE] [--registry-ca FILE]\n"
		"                 [--allow HOST|HOST:PORT|*.DOMAIN[:PORT]|PRESET[,...]]... [--inspect all|none]\n"
		"IMG is an image reference (python:3.12-slim, localhost:5000/test:1, name@sha256:...), a local\n"
		"source (oci:DIR[:NAME], oci-archive:FILE[:NAME], docker-archive:FILE), a local ext4 image or a\n"
		"directory. Registry images are cached: a second box of the same reference asks no registry.\n"
		"--allow (repeatable, comma lists) names what the box may reach without a person's approval:\n"
		"hosts, host:port, *.example.com, or the presets pypi, npm, github, anthropic, openai, claude-code,\n"
		"debian, apt-ubuntu, go-proxy (debian, apt-ubuntu and npm read the image's own configuration).\n"
		"--inspect all refuses every host off the list at once instead of asking a person.\n");
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

int cmd_run(int argc, char **argv)
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
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_json_ json_t *body = json_object(), *env = json_array(), *allow = json_array(), *reply = NULL;
	const char *state_dir = NULL, *image = NULL;
	uint64_t v;
	int ch, status = 0, r;

	if (!body || !env || !allow) {
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
