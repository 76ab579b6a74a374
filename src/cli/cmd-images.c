/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "banned.h"
#include "cli/commands.h"
#ifdef TKBOX_HAVE_DAEMON
#include "daemon/daemon.h"
#endif
#include "cli/child-confine.h"
#include "image/image-answer.h"
#include "image/image.h"
#include "io.h"
#include "json.h"
#include "log.h"

/*
 * tkbox images ls|pull REF|resolve REF|rm REF|prune [--state DIR] [--platform P]
 *              [--registry-auth FILE] [--registry-ca FILE] [--json]
 * The cache is <state>/images; state is --state, else the daemon's:
 * $TKBOX_STATE_DIR (absolute), else ~/.local/state/tkbox, else /var/lib/tkbox.
 */

static void images_usage(FILE *f)
{
	fprintf(f,
		"usage: tkbox images ls [--json]\n"
		"       tkbox images pull REF      fetch (again) and build the ext4 root\n"
		"       tkbox images resolve REF   as 'run' does: from the cache when there, else pull\n"
		"       tkbox images rm REF\n"
		"       tkbox images prune\n"
		"options: --state DIR  --platform linux/amd64|linux/arm64  --registry-auth FILE  --registry-ca FILE\n"
		"         --json  ls: a JSON array of {ref, platform, config, rootfs_bytes}; pull/resolve:\n"
		"                 the answer as one JSON object (src/image/image-answer.h), as the daemon reads it\n"
		"REF: NAME[:TAG][@sha256:...] | oci:DIR[:NAME] | oci-archive:FILE[:NAME] | docker-archive:FILE\n");
}

/* The daemon's state directory, so that `tkbox images` sees the cache `tkbox run` fills. */
static char *default_state_dir(void)
{
#ifdef TKBOX_HAVE_DAEMON
	return strdup(daemon_default_state_dir());
#else
	/* the same rule as daemon_default_state_dir(), for builds without the daemon */
	const char *e = getenv("TKBOX_STATE_DIR"), *home = getenv("HOME");
	char *r = NULL;
	if (e && e[0] == '/') {
		return strdup(e);
	}
	if (home && home[0] == '/') {
		return asprintf(&r, "%s/.local/state/tkbox", home) < 0 ? NULL : r;
	}
	return strdup("/var/lib/tkbox");
#endif
}

/* One "name value" line for a person; a value from the image is quoted when it could start another line. */
static void print_value(const char *name, const char *v)
{
	char q[LOG_QUOTE_BUFSIZE];
	bool plain = v[0] != '\0';

	for (const char *p = v; *p && plain; p++) {
		plain = (unsigned char)*p > 0x20 && *p != 0x7f && *p != '"' && *p != '\\';
	}
	printf("%s %s\n", name, plain ? v : log_quote(v, strlen(v), q));
}

/* For a person (and the e2e checks): the daemon reads the --json answer instead. */
static void print_result(const struct image_result *res)
{
	printf("ext4 %s\n", res->ext4_path);
	printf("image_json %s\n", res->json_path);
	printf("config %s\n", res->config_digest);
	printf("manifest %s\n", res->manifest_digest ? res->manifest_digest : "-");
	printf("from_cache %s\n", res->from_cache ? "yes" : "no");
	print_value("working_dir", res->working_dir ? res->working_dir : "/");
	print_value("user", res->user ? res->user : "root");
	for (size_t i = 0; i < res->n_env; i++) {
		char q[LOG_QUOTE_BUFSIZE];
		printf("env %s\n", log_quote(res->env[i], strlen(res->env[i]), q));
	}
}

/* images ls --json: [{ref, platform, config, rootfs_bytes}], one object per cached reference. */
static int print_list_json(const struct image_entry *v, size_t n)
{
	_cleanup_json_ json_t *list = json_array();
	char *s;

	for (size_t i = 0; list && i < n; i++) {
		json_t *o = json_pack("{s:s,s:s,s:s,s:I}", "ref", v[i].ref, "platform", v[i].platform, "config",
				      v[i].config, "rootfs_bytes", (json_int_t)v[i].rootfs_bytes);
		if (!o || json_array_append_new(list, o) < 0) {
			json_decref(steal_ptr(list));
		}
	}
	s = list ? json_dumps(list, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
	if (!s) {
		log_error("listing images: %s", tk_strerror(-ENOMEM));
		return -ENOMEM;
	}
	printf("%s\n", s);
	free(s);
	return 0;
}

/*
 * The image child confines itself before it touches any input: writes under
 * <state>/images only, reads of the system paths and of the files it was
 * named (a local source, --registry-auth, --registry-ca, SSL_CERT_FILE/DIR),
 * and network sockets only for a registry reference (SANDBOX_IMAGE_PULL);
 * a local source gets none (SANDBOX_IMAGE_LOCAL). A confinement that does not
 * hold is a refusal.
 */
static int images_confine(const struct image_opts *o, const char *refstr, struct image_diag *diag)
{
	_cleanup_free_ char *cache = NULL, *src = NULL;
	struct sandbox_report rep = { 0 };
	struct image_ref ref = { 0 };
	enum sandbox_profile p = SANDBOX_IMAGE_LOCAL;
	const char *ro[6] = { 0 };
	size_t n = 0;
	int r;

	if (asprintf(&cache, "%s/images", o->state_dir) < 0) {
		return -ENOMEM;
	}
	r = io_mkdir_p(AT_FDCWD, cache, 0700);
	if (r < 0) {
		image_diag_set(diag, "cannot create the image cache %s: %s", cache, tk_strerror(r));
		return r;
	}
	/* a reference that does not parse is refused by image_resolve, confined like a local source */
	if (image_ref_parse(refstr, &ref) >= 0) {
		if (ref.kind == IMAGE_REF_REGISTRY) {
			p = SANDBOX_IMAGE_PULL;
		} else if ((src = realpath(ref.path, NULL))) {
			ro[n++] = src;
		}
		image_ref_release(&ref);
	}
	{
		/* only what exists: a missing file is image_resolve's to report, with its name */
		const char *files[] = { o->auth_file, o->ca_file, getenv("SSL_CERT_FILE"), getenv("SSL_CERT_DIR") };
		for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
			if (files[i] && files[i][0] && access(files[i], R_OK) == 0) {
				ro[n++] = files[i];
			}
		}
	}
	r = child_confine(p, cache, ro, &rep);
	if (r < 0) {
		image_diag_set(diag,
			       "the image child could not confine itself (SANDBOX_%s: %s; seccomp %s, no_new_privs "
			       "%s); tkbox reads no image unconfined",
			       p == SANDBOX_IMAGE_PULL ? "IMAGE_PULL" : "IMAGE_LOCAL", tk_strerror(r),
			       rep.seccomp ? "on" : "off", rep.nnp ? "on" : "off");
	}
	return r;
}

int cmd_images(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "state", required_argument, NULL, 's' },
		{ "platform", required_argument, NULL, 'p' },
		{ "registry-auth", required_argument, NULL, 'a' },
		{ "registry-ca", required_argument, NULL, 'c' },
		{ "subprocess", no_argument, NULL, 'x' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct image_diag diag = { .msg = "" };
	struct image_opts o = { .progress_fd = -1, .diag = &diag };
	_cleanup_free_ char *state = NULL;
	const char *verb;
	bool subprocess = false, json = false;
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			free(state);
			state = strdup(optarg);
			break;
		case 'p':
			o.platform = optarg;
			break;
		case 'a':
			o.auth_file = optarg;
			break;
		case 'c':
			o.ca_file = optarg;
			break;
		case 'x':
			subprocess = true;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			images_usage(stdout);
			return 0;
		default:
			images_usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		images_usage(stderr);
		return 2;
	}
	if (!state) {
		state = default_state_dir();
	}
	if (!state) {
		fprintf(stderr, "tkbox images: no state directory (pass --state DIR or set TKBOX_STATE_DIR)\n");
		return 2;
	}
	o.state_dir = state;
	verb = argv[optind];
	if (strcmp(verb, "ls") == 0 && optind + 1 == argc) {
		struct image_entry *v = NULL;
		size_t n = 0;
		r = image_list(state, &v, &n);
		if (r < 0) {
			log_error("listing images: %s", tk_strerror(r));
			return 1;
		}
		if (json) {
			r = print_list_json(v, n);
			image_list_free(v, n);
			return r < 0 ? 1 : 0;
		}
		printf("%-60s %-12s %-19s %s\n", "REFERENCE", "PLATFORM", "CONFIG", "EXT4 MiB");
		for (size_t i = 0; i < n; i++) {
			printf("%-60s %-12s %-19.19s %.1f\n", v[i].ref, v[i].platform, v[i].config + 7,
			       (double)v[i].rootfs_bytes / 1048576.0);
		}
		image_list_free(v, n);
		return 0;
	}
	if (strcmp(verb, "prune") == 0 && optind + 1 == argc) {
		struct image_prune_stats st;
		r = image_prune(state, &st);
		if (r < 0) {
			log_error("pruning the image cache: %s", tk_strerror(r));
			return 1;
		}
		printf("removed %llu blobs (%.1f MiB), %llu stale references, %llu temporary files\n",
		       (unsigned long long)st.blobs, (double)st.bytes / 1048576.0, (unsigned long long)st.refs,
		       (unsigned long long)st.tmp);
		return 0;
	}
	if (optind + 2 != argc) {
		images_usage(stderr);
		return 2;
	}
	if (strcmp(verb, "rm") == 0) {
		r = image_remove(state, argv[optind + 1], o.platform, &diag);
		if (r < 0) {
			char q[LOG_QUOTE_BUFSIZE];
			log_error("removing %s: %s", log_quote(argv[optind + 1], strlen(argv[optind + 1]), q),
				  diag.msg[0] ? diag.msg : tk_strerror(r));
			return 1;
		}
		return 0;
	}
	if (strcmp(verb, "pull") == 0 || strcmp(verb, "resolve") == 0) {
		struct image_result res = { 0 };
		o.refresh = strcmp(verb, "pull") == 0;
		if (isatty(STDERR_FILENO)) {
			o.progress_fd = STDERR_FILENO;
		}
		/* --subprocess: as the daemon resolves (image_answer_exec), to test that path */
		if (subprocess) {
			r = image_answer_exec("/proc/self/exe", &o, argv[optind + 1], &res);
		} else {
			r = images_confine(&o, argv[optind + 1], &diag);
			if (r >= 0) {
				r = image_resolve(&o, argv[optind + 1], &res);
			}
		}
		if (r >= 0 && json) {
			_cleanup_buf_ struct buf *b = NULL;
			r = buf_new(IMAGE_ANSWER_MAX_BYTES, 0, &b);
			if (r >= 0) {
				r = image_answer_encode(&res, b, &diag);
			}
			if (r >= 0 &&
			    (fwrite(buf_ptr(b), 1, buf_len(b), stdout) != buf_len(b) || fflush(stdout) != 0)) {
				r = -EIO;
			}
			image_result_release(&res);
		}
		if (r < 0) {
			char q[LOG_QUOTE_BUFSIZE];
			fprintf(stderr, "tkbox images %s %s: %s\n", verb,
				log_quote(argv[optind + 1], strlen(argv[optind + 1]), q),
				diag.msg[0] ? diag.msg : tk_strerror(r));
			return 1;
		}
		if (!json) {
			print_result(&res);
			image_result_release(&res);
		}
		return 0;
	}
	images_usage(stderr);
	return 2;
}
