/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_IMAGE_FILES_H
#define TKBOX_DAEMON_IMAGE_FILES_H

#include "egress/preset.h"
#include "macro.h"

/*
 * The few files of an image the allow presets read (src/egress/preset.h):
 * apt's sources for debian / apt-ubuntu, npm's npmrc files and its built-in
 * default registry for npm. They are read out of the box's root file (ext4)
 * by e2fsprogs' debugfs, run read-only in a child confined like the image
 * children (SANDBOX_IMAGE_LOCAL: no sockets, Landlock to the ext4 file and a
 * scratch directory), one run to list the directories, then one `cat` per
 * file. The daemon never mounts the image or parses its file system; it
 * only reads the listing (debugfs `ls -p`) and the files' text.
 *
 * Only regular files are read: a file that is itself a symlink is not
 * followed (skipped). Symlinks among the directories on the way are resolved
 * by debugfs inside the image (against its own root), never on the host.
 *
 * Read, when needs (EGRESS_NEED_*) asks:
 *   apt: /etc/apt/sources.list, /etc/apt/sources.list.d/NAME.list and
 *     NAME.sources (NAME of [A-Za-z0-9_.-], as apt reads them), in name order;
 *     more than EGRESS_IMAGE_APT_MAX files in all is refused.
 *   npm: the npmrc files, lowest precedence first: npm's builtin npmrc
 *     (/usr/local/lib/node_modules/npm/npmrc, /usr/lib/node_modules/npm/npmrc,
 *     /usr/share/nodejs/npm/npmrc), the global ones (/usr/etc/npmrc,
 *     /usr/local/etc/npmrc, /etc/npmrc), /root/.npmrc; and npm's config
 *     definitions (the first of IMAGE_FILES_NPM_DEFS that exists), from
 *     which egress_npm_default_find takes the default registry.
 *   pip: the pip.conf files, lowest precedence first (/etc/xdg/pip/pip.conf,
 *     /etc/pip.conf, /root/.pip/pip.conf, /root/.config/pip/pip.conf), and
 *     the first pip/_internal/models/index.py of: /usr/local/lib/python3.N/
 *     site-packages and dist-packages, /usr/lib/python3/dist-packages,
 *     /usr/lib/python3.N/site-packages (highest N first), from which
 *     egress_pip_default_find takes pip's default index and file host.
 *   go: the first GOROOT/go.env of /usr/local/go, /usr/lib/go, /usr/lib/go-V,
 *     /usr/share/go-V (highest V first), then /root/.config/go/env.
 *   The python3.N and go-V directories are found by listing /usr/local/lib,
 *     /usr/lib and /usr/share; more than IMAGE_FILES_VERSIONS_MAX of one kind
 *     in one directory is refused.
 */

#define IMAGE_FILES_FILE_MAX (64 * 1024) /* one apt source or npmrc file */
#define IMAGE_FILES_NPM_DEFS_MAX (1024 * 1024) /* npm's config definitions file (about 94 KB in npm 11) */
#define IMAGE_FILES_LIST_MAX (1024 * 1024) /* the directory listings, all together */
#define IMAGE_FILES_TIMEOUT_S 30 /* each debugfs run */
#define IMAGE_FILES_VERSIONS_MAX 8 /* python3.N or go-V directories in one directory */

struct image_files {
	struct egress_image_files f; /* points into texts and npm_default */
	char *texts[EGRESS_IMAGE_APT_MAX + EGRESS_IMAGE_NPMRC_MAX + EGRESS_IMAGE_PIP_MAX + EGRESS_IMAGE_GOENV_MAX];
	size_t n_texts;
	char npm_default[512];
	char pip_index[512];
	char pip_files[256];
};

/*
 * Read what needs asks from the ext4 file at ext4. scratch_dir is a directory
 * of the daemon's where a scratch directory for the child is made and
 * removed. 0, or -errno with err saying what failed (-EFBIG: a file past its
 * cap, -E2BIG: too many apt source files or version directories, -EIO:
 * debugfs failed, -ETIME: it
 * ran past IMAGE_FILES_TIMEOUT_S). *ret is written on success only.
 */
_wur_ int image_files_read(const char *ext4, unsigned needs, const char *scratch_dir, struct image_files *ret,
			   char *err, size_t err_size);

/* Free what f holds. Accepts a zeroed struct. */
void image_files_release(struct image_files *f);

#endif
