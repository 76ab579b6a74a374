/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_IMAGE_LOCAL_H
#define TKBOX_DAEMON_IMAGE_LOCAL_H

#include <stdbool.h>

#include "macro.h"

/*
 * The one seam between `--image` / `--workspace` and an ext4 file the VM can
 * attach.
 *   --image: a local ext4 image file, or a directory turned into ext4 with
 *     mkfs.ext4 -d (cached under <state>/images/local by the directory's
 *     path); anything else is an image reference for the images library
 *     (src/image: registry pulls, oci:/oci-archive:/docker-archive: sources),
 *     when it is built in (TKBOX_HAVE_IMAGES), with the config's Env,
 *     WorkingDir and User as the box's defaults.
 *   --workspace: an ext4 file, or a git checkout snapshotted by the images
 *     library's workspace builder (no .git, no credential files) into
 *     out_dir; without the library, a directory copied with mkfs.ext4 -d.
 */
struct local_image {
	char *path; /* ext4 file */
	char *digest; /* "sha256:<hex>": the manifest's digest for a registry image, else of the ext4 file */
	char *source; /* what the user named */
	char **env; /* the image config's Env (NULL-terminated) or NULL */
	char *working_dir; /* the image config's WorkingDir or NULL */
	char *user; /* the image config's User or NULL (recorded; the guest runs commands as root for now) */
	bool from_cache; /* a registry/OCI image served from the cache (nothing fetched, no ext4 built) */
};

/* How image references are resolved (tkbox run --platform --registry-auth --registry-ca). */
struct local_image_opts {
	const char *platform; /* NULL: linux/amd64 */
	const char *auth_file; /* docker-style config.json, absolute, or NULL */
	const char *ca_file; /* PEM bundle, absolute, or NULL */
	const char *exe; /* the tkbox binary that runs `tkbox images` in a child; NULL: /proc/self/exe */
};

void local_image_release(struct local_image *r);

/*
 * -ENOENT (with a message in err) when image is neither a file nor a directory
 * nor an image reference. o may be NULL (defaults). Image references are
 * resolved by a child `tkbox images` process (image_answer_exec): this
 * process never parses registry answers, manifests or layer bytes.
 */
_wur_ int image_local_resolve(const char *state_dir, const char *image, unsigned size_mib,
			      const struct local_image_opts *o, struct local_image *ret, char *err, size_t err_size);

/*
 * The workspace into out_dir/workspace.ext4 (or the named ext4 file). A git
 * checkout is snapshotted by a child `/proc/self/exe workspace build --json`
 * (workspace_answer_exec), confined
 * (SANDBOX_WORKSPACE) to out_dir/workspace.build: this process never runs
 * git or mkfs.ext4 on it nor parses its listing.
 */
_wur_ int workspace_local_resolve(const char *state_dir, const char *workspace, const char *out_dir,
				  struct local_image *ret, char *err, size_t err_size);

/*
 * workspace_local_resolve, and with secrets (may be NULL or empty) the
 * workspace check: the builder child gets the values in a sealed memfd and
 * refuses the build when a file it copies holds one in its content, path or
 * symlink target (-EINVAL, a 400; err: "workspace DIR: workspace file <path>
 * holds the value of secret NAME ...", never the value). A workspace given
 * as an ext4 file, or a directory without the images library, cannot be
 * checked: -EINVAL too when there are secrets.
 */
struct box_secrets;
_wur_ int workspace_local_resolve_secrets(const char *state_dir, const char *workspace, const char *out_dir,
					  const struct box_secrets *secrets, struct local_image *ret, char *err,
					  size_t err_size);

#endif
