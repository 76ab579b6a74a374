/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VMM_INITRAMFS_H
#define TKBOX_VMM_INITRAMFS_H

#include "vmm/assets.h"

/*
 * The box's initramfs, a cpio "newc" archive written with libarchive:
 *   /init            the static tkbox-guest
 *   /dev/console     (char 5:1, so the kernel gives init a console)
 *   /proc /sys /dev /tmp /run
 *   /modules/NAME.ko the assets' modules
 *   /modules/order   their load order, one file name a line
 * Written to a temporary file next to out_path, then renamed.
 */
#define VM_GUEST_MAX_SIZE ((size_t)64 << 20)

_wur_ int vm_initramfs_build(const char *guest_bin, const struct vm_assets *a, const char *out_path);

#endif
