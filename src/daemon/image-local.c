/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "banned.h"
#include "crypto.h"
#include "io.h"
#include "daemon/image-local.h"
#include "daemon/secrets.h"
#include "log.h"
#include "vmm/assets.h"
#ifdef TKBOX_HAVE_IMAGES
#include "image/image-answer.h"
#include "image/image.h"
#include "image/workspace-answer.h"
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
/* What the workspace builder left out goes to the daemon's log: the paths its answer names, then a count. */
static void ws_log_left_out(const char *workspace, const struct workspace_answer *a)
{
	char q1[LOG_QUOTE_BUFSIZE], q2[LOG_QUOTE_BUFSIZE];
	uint64_t total = a->stats.credentials + a->stats.skipped;

	for (size_t i = 0; i < a->n_left_out; i++) {
		log_info("workspace %s: left out %s: %s", log_quote(workspace, strlen(workspace), q1),
			 log_quote(a->left_out[i].path, strlen(a->left_out[i].path), q2), a->left_out[i].why);
	}
	if (!a->error && total > a->n_left_out) {
		log_info("workspace %s: %llu more paths left out", log_quote(workspace, strlen(workspace), q1),
			 (unsigned long long)(total - a->n_left_out));
	}
}

/*
 * Take the child's ext4 out of its build directory: a regular file with one
 * link (not a symlink or a hard link to a file the child could not write),
 * renamed to final.
 */
static int ws_take_file(const char *built, const char *final)
{
	_cleanup_close_ int fd = open(built, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;

	if (fd < 0 || fstat(fd, &st) < 0) {
		return negative_errno();
	}
	if (!S_ISREG(st.st_mode) || st.st_nlink != 1) {
		return -EPROTO;
	}
	return rename(built, final) < 0 ? negative_errno() : 0;
}

/*
 * The workspace builder runs as a child (`tkbox workspace build --json`),
 * confined to out_dir/workspace.build (SANDBOX_WORKSPACE): git, its listing,
 * the copy and mkfs.ext4 never run in the daemon. The daemon reads its one
 * answer (src/image/workspace-answer.h) and takes the ext4 file.
 */
static int ws_build_child(const char *exe, const char *workspace, const char *out_dir, char *const *extra, int keep_fd,
			  struct local_image *ref, char *err, size_t err_size)
{
	_cleanup_free_ char *bdir = NULL, *built = NULL;
	_cleanup_close_ int ofd = -1;
	struct image_diag diag = { .msg = "" };
	struct workspace_answer a = { 0 };
	int r;

	if (asprintf(&bdir, "%s/workspace.build", out_dir) < 0 || asprintf(&built, "%s/workspace.ext4", bdir) < 0) {
		return -ENOMEM;
	}
	ofd = open(out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ofd < 0) {
		return negative_errno();
	}
	/* a build dir an earlier failed start left goes first: the child gets an empty one */
	if ((r = image_rm_rf_at(ofd, "workspace.build")) < 0 || mkdirat(ofd, "workspace.build", 0700) < 0) {
		r = r < 0 ? r : negative_errno();
		(void)snprintf(err, err_size, "workspace %s: creating %s: %s", workspace, bdir, tk_strerror(r));
		return r;
	}
	r = workspace_answer_exec_args(exe, workspace, built, extra, keep_fd, &a, &diag);
	if (r >= 0) {
		ws_log_left_out(workspace, &a);
		if (a.error) {
			(void)snprintf(err, err_size, "workspace %s: %s", workspace, a.error);
			/* the workspace check: a 400 the person can act on */
			r = a.rule && strcmp(a.rule, WORKSPACE_SECRET_RULE) == 0 ? -EINVAL : -EIO;
		} else {
			r = ws_take_file(built, ref->path);
			if (r < 0) {
				(void)snprintf(err, err_size,
					       "workspace %s: the builder's ext4 file is not a regular file of its own "
					       "(%s)",
					       workspace, tk_strerror(r));
			}
		}
	} else {
		(void)snprintf(err, err_size, "workspace %s: %s", workspace, diag.msg[0] ? diag.msg : tk_strerror(r));
	}
	workspace_answer_release(&a);
	(void)image_rm_rf_at(ofd, "workspace.build");
	return r;
}
#endif

#ifdef TKBOX_HAVE_IMAGES
/*
 * The workspace check's arguments: `--secrets-fd N --secret NAME:LEN ...` and the sealed memfd (N) the child
 * keeps; *ret_fd -1 and no arguments without secrets.
 */
static int ws_secret_args(const struct box_secrets *secrets, char ***ret_extra, int *ret_fd)
{
	char **v;
	int fd;

	*ret_extra = NULL;
	*ret_fd = -1;
	if (!secrets || secrets->n == 0) {
		return 0;
	}
	fd = box_secrets_memfd(secrets);
	if (fd < 0) {
		return fd;
	}
	v = calloc(2 * secrets->n + 3, sizeof(char *));
	if (!v || asprintf(&v[0], "--secrets-fd") < 0 || asprintf(&v[1], "%d", fd) < 0) {
		free(v ? v[0] : NULL);
		free(v);
		(void)close(fd);
		return -ENOMEM;
	}
	for (size_t i = 0; i < secrets->n; i++) {
		if (asprintf(&v[2 + 2 * i], "--secret") < 0 ||
		    asprintf(&v[3 + 2 * i], "%s:%zu", secrets->v[i].name, secrets->v[i].value_len) < 0) {
			v[2 + 2 * i] = v[3 + 2 * i] = NULL;
			for (char **p = v; *p; p++) {
				free(*p);
			}
			free(v);
			(void)close(fd);
			return -ENOMEM;
		}
	}
	*ret_extra = v;
	*ret_fd = fd;
	return 0;
}
#endif

int workspace_local_resolve(const char *state_dir, const char *workspace, const char *out_dir, struct local_image *ret,
			    char *err, size_t err_size)
{
	return workspace_local_resolve_secrets(state_dir, workspace, out_dir, NULL, ret, err, err_size);
}

int workspace_local_resolve_secrets(const char *state_dir, const char *workspace, const char *out_dir,
				    const struct box_secrets *secrets, struct local_image *ret, char *err,
				    size_t err_size)
{
	struct stat st;

	if (stat(workspace, &st) < 0) {
		(void)snprintf(err, err_size, "workspace %s: %s", workspace, tk_strerror(negative_errno()));
		return -ENOENT;
	}
#ifdef TKBOX_HAVE_IMAGES
	if (S_ISDIR(st.st_mode)) {
		struct local_image ref = { 0 };
		char hexd[65];
		int r;

		if (asprintf(&ref.path, "%s/workspace.ext4", out_dir) < 0 || !(ref.source = strdup(workspace))) {
			local_image_release(&ref);
			return -ENOMEM;
		}
		(void)unlink(ref.path);
		{
			char **extra = NULL;
			int sfd = -1;
			r = ws_secret_args(secrets, &extra, &sfd);
			if (r < 0) {
				(void)snprintf(err, err_size, "workspace %s: the secrets for its check: %s", workspace,
					       tk_strerror(r));
			} else {
				r = ws_build_child("/proc/self/exe", workspace, out_dir, extra, sfd, &ref, err,
						   err_size);
			}
			for (char **p = extra; p && *p; p++) {
				free(*p);
			}
			free(extra);
			if (sfd >= 0) {
				(void)close(sfd);
			}
		}
		if (r >= 0) {
			r = vm_file_sha256(ref.path, hexd);
			if (r < 0) {
				(void)snprintf(err, err_size, "workspace %s: %s", workspace, tk_strerror(r));
			}
		}
		if (r >= 0 && asprintf(&ref.digest, "sha256:%s", hexd) < 0) {
			r = -ENOMEM;
			(void)snprintf(err, err_size, "workspace %s: %s", workspace, tk_strerror(r));
		}
		if (r < 0) {
			local_image_release(&ref);
			return r;
		}
		*ret = ref;
		return 0;
	}
#else
	(void)out_dir;
#endif
	/* an ext4 file (or, without the images library, a directory copied whole) cannot be checked: fail closed */
	if (secrets && secrets->n > 0) {
		(void)snprintf(err, err_size,
			       "workspace %s: a box with --secret needs a directory or git checkout as its workspace, "
			       "so that no file in it can hold a secret's value (the workspace check); an ext4 file "
			       "cannot be checked",
			       workspace);
		return -EINVAL;
	}
	return image_local_resolve(state_dir, workspace, 1024, NULL, ret, err, err_size);
}
