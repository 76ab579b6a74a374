/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VMM_ASSETS_H
#define TKBOX_VMM_ASSETS_H

#include <jansson.h>

#include "macro.h"

/*
 * The guest kernel and its modules. Fetched from Debian's
 * linux-image-*-cloud-amd64 with `apt-get download` (apt verifies it) into
 * <state>/images/assets, never installed; the uncompressed kernel ELF is
 * extracted from the bzImage's LZ4 payload (PVH entry, ~0.5 s faster to boot
 * than the bzImage under TCG) and the modules the guest needs are copied out
 * with their load order (dependencies from each module's .modinfo). A
 * manifest records every file's SHA-256; later boots use the cache and check
 * the hashes, and never call apt again.
 */

#define VM_ASSETS_META_PACKAGE "linux-image-cloud-amd64"
/* Pointer files in <state>/images/assets naming the cloud kernel's and the built kernel's directories. */
#define VM_ASSETS_CLOUD_PTR "current"
#define VM_ASSETS_BUILT_PTR "built"
/* Debian's linux-source-X.Y package installs its tarball here; the built kernel is made from it. */
#define VM_KERNEL_SOURCE_GLOB "/usr/src/linux-source-*.tar.xz"
/* Which kernel boxes boot: built, cloud, or unset (the built one when cached, else the cloud one). */
#define VM_KERNEL_ENV "TKBOX_KERNEL"
#define VM_MAX_MODULES 64
#define VM_MODULE_MAX_SIZE ((size_t)64 << 20)
#define VM_KERNEL_MAX_SIZE ((size_t)256 << 20)

/* The modules a box needs on the cloud kernel under microvm (ARCHITECTURE.md). */
extern const char *const vm_wanted_modules[];

struct vm_assets {
	char *dir; /* directory holding kernel + modules */
	char *kernel; /* path of the kernel image */
	char *modules_dir; /* directory of *.ko */
	char **modules; /* file names in load order, NULL-terminated */
	size_t n_modules;
	char *version; /* package and version, or "override" */
	char kernel_sha256[65];
};

void vm_assets_release(struct vm_assets *a);

/*
 * Make sure the cache holds a kernel and modules (fetching with apt-get when
 * allow_fetch and nothing is cached) and load them. -ENOENT with a message
 * logged that says how to fetch when nothing is cached and fetching is off
 * or failed.
 */
_wur_ int vm_assets_ensure(const char *state_dir, bool allow_fetch, struct vm_assets *ret);

enum vm_kernel_choice {
	VM_KERNEL_PREFER_BUILT,
	VM_KERNEL_BUILT,
	VM_KERNEL_CLOUD,
};

/* TKBOX_KERNEL read: -EINVAL (logged) for anything but built, cloud or unset. */
_wur_ int vm_kernel_choice(enum vm_kernel_choice *ret);

/*
 * Build the guest kernel from Debian's linux-source tarball (source, or NULL: the one under /usr/src) with
 * src/vmm/kernel/tkbox-guest.config merged over tinyconfig, and cache it as the built kernel of
 * <state>/images/assets (`built` names it). Minutes of compiling; a cached build of the same source and
 * configuration is reused. The build's output goes to <state>/images/assets/kernel-build.log.
 */
_wur_ int vm_kernel_build(const char *state_dir, const char *source);

/* --kernel FILE --modules DIR: use these instead of the cache; order from .modinfo. */
_wur_ int vm_assets_override(const char *kernel, const char *modules_dir, struct vm_assets *ret);

/* ---- pure parsers (unit-tested, fuzzed) ---- */

/*
 * The compressed payload of an x86 bzImage (boot protocol >= 2.08): offset
 * and length of the bytes to decompress, excluding the 4-byte size trailer
 * the kernel build appends. -EBADMSG when the header is not a bzImage,
 * -EPROTONOSUPPORT when the payload is not LZ4 (magic 02 21 4c 18).
 */
_wur_ int bzimage_lz4_payload(const uint8_t *p, size_t n, size_t *ret_off, size_t *ret_len);

/*
 * The value of depends= in an ELF64 module's .modinfo section, as a new
 * string ("" when the module depends on nothing). -EBADMSG for a malformed
 * ELF, -ENOENT when there is no .modinfo section.
 */
_wur_ int modinfo_depends(const uint8_t *p, size_t n, char **ret);

/*
 * The dependency named by `apt-cache depends linux-image-cloud-amd64`
 * output ("  Depends: linux-image-6.1.0-56-cloud-amd64"), as a new string.
 * Only names made of [a-z0-9.+-] are accepted. -ENOENT when absent.
 */
_wur_ int apt_depends_parse(const char *text, size_t n, char **ret);

/* Run argv (no shell), stdout to out_fd (-1: /dev/null), cwd (NULL: unchanged). Returns the exit status or -errno. */
_wur_ int vm_run_program(char *const argv[], const char *cwd, int out_fd);

/* vm_run_program with stderr to log_fd as well. */
_wur_ int vm_run_program_log(char *const argv[], const char *cwd, int log_fd);

/* Write a file (0644, O_NOFOLLOW, fsync'd). */
_wur_ int vm_write_file(const char *path, const void *p, size_t n);

/* Point the pointer file ptr of the assets dir at the directory target (written aside, renamed). */
_wur_ int vm_assets_point(const char *assets, const char *ptr, const char *target);

/* A kernel directory of the cache (manifest.json, every file's SHA-256 checked) loaded. */
_wur_ int vm_assets_load_dir(const char *dir, struct vm_assets *ret);

/* dir/manifest.json, JCS. */
_wur_ int vm_assets_write_manifest(const char *dir, const json_t *man);

/* Remove a directory tree (no symlink following). */
_wur_ int vm_rm_rf(const char *path);

/* SHA-256 of a file as lowercase hex. */
_wur_ int vm_file_sha256(const char *path, char ret[65]);

#endif
