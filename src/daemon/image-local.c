/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "banned.h"
#include "crypto.h"
#include "io.h"
#include "daemon/image-local.h"
#include "log.h"
#include "vmm/assets.h"
#ifdef TKBOX_HAVE_IMAGES
#include "image/image-answer.h"
#include "image/image.h"
#include "image/workspace.h"
#endif

void local_image_release(struct local_image *r)
{
	if (r) {
		free(r->path);
		free(r->digest);
		free(r->source);
		for (char **e = r->env; e && *e; e++) {
			free(*e);
		}
		free(r->env);
		free(r->working_dir);
		free(r->user);
		*r = (struct local_image){ 0 };
	}
}

#ifdef TKBOX_HAVE_IMAGES
/*
 * A registry or OCI-layout reference, through the images library (pulls and
 * caches) in a child `tkbox images` process: the daemon holds the signer's
 * run tokens and the boxes' secrets, so it never parses registry or layer
 * bytes itself (docs/images.md). What it reads back is the child's answer,
 * one strict JSON object (src/image/image-answer.h), never scraped lines.
 */
static int resolve_ref(const char *state_dir, const char *image, const struct local_image_opts *lo,
		       struct local_image *ret, char *err, size_t err_size)
{
	struct image_diag diag = { .msg = "" };
	struct image_opts o = { .state_dir = state_dir, .progress_fd = -1, .diag = &diag };
	struct image_result res = { 0 };
	struct local_image ref = { 0 };
	int r;

	if (lo) {
		o.platform = lo->platform;
		o.auth_file = lo->auth_file;
		o.ca_file = lo->ca_file;
	}
	r = image_answer_exec(lo && lo->exe ? lo->exe : "/proc/self/exe", &o, image, &res);
	if (r < 0) {
		(void)snprintf(err, err_size, "image %s: %s", image, diag.msg[0] ? diag.msg : tk_strerror(r));
		return r;
	}
	ref.path = steal_ptr(res.ext4_path);
	ref.digest = strdup(res.manifest_digest ? res.manifest_digest : res.config_digest);
	ref.source = strdup(image);
	ref.working_dir = res.working_dir ? strdup(res.working_dir) : NULL;
	ref.user = res.user ? strdup(res.user) : NULL;
	ref.from_cache = res.from_cache;
	ref.env = calloc(res.n_env + 1, sizeof(char *));
	r = ref.path && ref.digest && ref.source && ref.env && (ref.working_dir || !res.working_dir) &&
			    (ref.user || !res.user)
		    ? 0
		    : -ENOMEM;
	for (size_t i = 0; r >= 0 && i < res.n_env; i++) {
		ref.env[i] = strdup(res.env[i]);
		r = ref.env[i] ? 0 : -ENOMEM;
	}
	image_result_release(&res);
	if (r < 0) {
		local_image_release(&ref);
		return r;
	}
	*ret = ref;
	return 0;
}
#endif

/* ext4 from a directory: mkfs.ext4 -d, rebuilt when the directory changed since the cached build. */
static int build_from_dir(const char *state_dir, const char *dir, const struct stat *dst, unsigned size_mib, char **ret,
			  char *err, size_t err_size)
{
	_cleanup_free_ char *outdir = NULL, *out = NULL, *tmp = NULL;
	uint8_t h[SHA256_LEN];
	char hex[17], size[32];
	struct stat st;
	int r;

	r = sha256(dir, strlen(dir), h);
	if (r < 0) {
		return r;
	}
	for (size_t i = 0; i < 8; i++) {
		(void)snprintf(hex + 2 * i, 3, "%02x", h[i]);
	}
	if (asprintf(&outdir, "%s/images/local", state_dir) < 0 || asprintf(&out, "%s/%s.ext4", outdir, hex) < 0 ||
	    asprintf(&tmp, "%s/%s.ext4.tmp", outdir, hex) < 0) {
		return -ENOMEM;
	}
	r = io_mkdir_p(AT_FDCWD, outdir, 0700);
	if (r < 0) {
		return r;
	}
	if (stat(out, &st) == 0 && st.st_mtime > dst->st_mtime) {
		*ret = steal_ptr(out);
		return 0;
	}
	(void)unlink(tmp);
	(void)snprintf(size, sizeof(size), "%uM", size_mib);
	{
		char *argv[] = { "mkfs.ext4", "-q", "-F", "-E", "root_owner=0:0", "-O", "^has_journal", "-d",
				 (char *)dir, tmp,  size, NULL };
		r = vm_run_program(argv, NULL, -1);
	}
	if (r != 0) {
		(void)snprintf(err, err_size, "mkfs.ext4 -d %s failed (is e2fsprogs installed, does it fit in %u MiB?)",
			       dir, size_mib);
		(void)unlink(tmp);
		return -EIO;
	}
	if (rename(tmp, out) < 0) {
		return negative_errno();
	}
	*ret = steal_ptr(out);
	return 0;
}

int image_local_resolve(const char *state_dir, const char *image, unsigned size_mib, const struct local_image_opts *o,
			struct local_image *ret, char *err, size_t err_size)
{
	struct local_image ref = { 0 };
	char hexd[65];
	struct stat st;
	char *real;
	int r;

	real = realpath(image, NULL);
	if (!real || stat(real, &st) < 0) {
		free(real);
#ifdef TKBOX_HAVE_IMAGES
		/* Not a local file or directory: an image reference, unless it was written as a path. */
		if (image[0] != '/' && image[0] != '.') {
			return resolve_ref(state_dir, image, o, ret, err, err_size);
		}
		(void)snprintf(err, err_size, "image %s: no such file or directory", image);
		return -ENOENT;
#else
		(void)o;
		(void)snprintf(
			err, err_size,
			"image %s: no such local ext4 file or directory (this build has no registry images; build "
			"one with tests/e2e/mkimage.sh)",
			image);
		return -ENOENT;
#endif
	}
	if (S_ISDIR(st.st_mode)) {
		r = build_from_dir(state_dir, real, &st, size_mib, &ref.path, err, err_size);
		free(real);
		if (r < 0) {
			return r;
		}
	} else if (S_ISREG(st.st_mode)) {
		ref.path = real;
	} else {
		free(real);
		(void)snprintf(err, err_size, "image %s is neither a regular file nor a directory", image);
		return -EINVAL;
	}
	r = vm_file_sha256(ref.path, hexd);
	if (r >= 0 && (asprintf(&ref.digest, "sha256:%s", hexd) < 0 || !(ref.source = strdup(image)))) {
		r = -ENOMEM;
	}
	if (r < 0) {
		local_image_release(&ref);
		return r;
	}
	*ret = ref;
	return 0;
}

#ifdef TKBOX_HAVE_IMAGES
/* What the workspace builder left out goes to the daemon's log: the first few paths, then a count. */
#define WORKSPACE_NOTICES_LOGGED 32
struct ws_notices {
	const char *workspace;
	unsigned long n;
};

static void ws_notice(void *userdata, const char *rel, const char *why)
{
	struct ws_notices *w = userdata;
	char q1[LOG_QUOTE_BUFSIZE], q2[LOG_QUOTE_BUFSIZE];

	if (w->n++ < WORKSPACE_NOTICES_LOGGED) {
		log_info("workspace %s: left out %s: %s", log_quote(w->workspace, strlen(w->workspace), q1),
			 log_quote(rel, strlen(rel), q2), why);
	}
}
#endif

int workspace_local_resolve(const char *state_dir, const char *workspace, const char *out_dir, struct local_image *ret,
			    char *err, size_t err_size)
{
	struct stat st;

	if (stat(workspace, &st) < 0) {
		(void)snprintf(err, err_size, "workspace %s: %s", workspace, tk_strerror(negative_errno()));
		return -ENOENT;
	}
#ifdef TKBOX_HAVE_IMAGES
	if (S_ISDIR(st.st_mode)) {
		struct image_diag diag = { .msg = "" };
		struct workspace_stats ws = { 0 };
		struct ws_notices wn = { .workspace = workspace };
		struct local_image ref = { 0 };
		char hexd[65];
		int r;

		if (asprintf(&ref.path, "%s/workspace.ext4", out_dir) < 0 || !(ref.source = strdup(workspace))) {
			local_image_release(&ref);
			return -ENOMEM;
		}
		(void)unlink(ref.path);
		r = workspace_build(&(struct workspace_opts){ .dir = workspace,
							      .out = ref.path,
							      .notice = ws_notice,
							      .userdata = &wn,
							      .diag = &diag },
				    &ws);
		if (wn.n > WORKSPACE_NOTICES_LOGGED) {
			char q[LOG_QUOTE_BUFSIZE];
			log_info("workspace %s: %lu more paths left out", log_quote(workspace, strlen(workspace), q),
				 wn.n - WORKSPACE_NOTICES_LOGGED);
		}
		if (r >= 0) {
			r = vm_file_sha256(ref.path, hexd);
		}
		if (r >= 0 && asprintf(&ref.digest, "sha256:%s", hexd) < 0) {
			r = -ENOMEM;
		}
		if (r < 0) {
			(void)snprintf(err, err_size, "workspace %s: %s", workspace,
				       diag.msg[0] ? diag.msg : tk_strerror(r));
			local_image_release(&ref);
			return r;
		}
		*ret = ref;
		return 0;
	}
#else
	(void)out_dir;
#endif
	return image_local_resolve(state_dir, workspace, 1024, NULL, ret, err, err_size);
}
