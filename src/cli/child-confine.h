/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_CLI_CHILD_CONFINE_H
#define TKBOX_CLI_CHILD_CONFINE_H

#include "daemon/sandbox.h"

/*
 * The confinement the image child (`tkbox images pull|resolve`) and the
 * workspace builder (`tkbox workspace build`) apply to themselves before
 * they touch any input: sandbox_prepare + sandbox_enter of
 * src/daemon/sandbox.c with `dir` the one directory they write (the image
 * cache, the workspace's output directory) and `ro` the inputs they read (a
 * local image source, --registry-auth, --registry-ca; the checkout).
 * Every descriptor but 0, 1 and 2 is closed first (a socket a parent leaked
 * would pass by the socket() refusal). Single-threaded callers only (it
 * allocates).
 *
 * For SANDBOX_IMAGE_PULL and SANDBOX_IMAGE_LOCAL it also grants
 * LANDLOCK_ACCESS_FS_REFER beneath dir: the cache moves what it built from
 * tmp/ into blobs/ and roots.v2/ by rename, which Landlock (ABI >= 2)
 * refuses across directories without it.
 *
 * -errno when a step failed (rep says what held); the caller refuses then.
 */
_wur_ int child_confine(enum sandbox_profile p, const char *dir, const char *const *ro, struct sandbox_report *rep);

#endif
