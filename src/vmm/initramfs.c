/* SPDX-License-Identifier: Apache-2.0 */
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "banned.h"
#include "buf.h"
#include "io.h"
#include "log.h"
#include "vmm/initramfs.h"

static int add_entry(struct archive *ar, const char *name, mode_t mode, dev_t rdev, const void *p, size_t n)
{
	struct archive_entry *e = archive_entry_new();
	int r = 0;

	if (!e) {
		return -ENOMEM;
	}
	archive_entry_set_pathname(e, name);
	archive_entry_set_mode(e, mode);
	archive_entry_set_uid(e, 0);
	archive_entry_set_gid(e, 0);
	archive_entry_set_nlink(e, S_ISDIR(mode) ? 2 : 1);
	archive_entry_set_mtime(e, 0, 0);
	if (S_ISCHR(mode)) {
		archive_entry_set_rdev(e, rdev);
	}
	archive_entry_set_size(e, S_ISREG(mode) ? (la_int64_t)n : 0);
	if (archive_write_header(ar, e) != ARCHIVE_OK) {
		r = -EIO;
	} else if (S_ISREG(mode) && n > 0 && archive_write_data(ar, p, n) != (la_ssize_t)n) {
		r = -EIO;
	}
	archive_entry_free(e);
	return r;
}

static int add_file(struct archive *ar, const char *name, const char *src, mode_t perm, size_t max)
{
	_cleanup_free_ char *p = NULL;
	size_t n;
	int r;

	r = io_read_file(AT_FDCWD, src, max, IO_READ_REGULAR, &p, &n);
	if (r < 0) {
		return log_error_errno(r, "reading %s", src);
	}
	return add_entry(ar, name, S_IFREG | perm, 0, p, n);
}

int vm_initramfs_build(const char *guest_bin, const struct vm_assets *a, const char *out_path)
{
	static const char *const dirs[] = { "dev", "proc", "sys", "tmp", "run", "modules", NULL };
	_cleanup_free_ char *tmp = NULL;
	struct buf order = { 0 };
	struct archive *ar;
	int r = 0;

	if (asprintf(&tmp, "%s.tmp", out_path) < 0) {
		return -ENOMEM;
	}
	r = buf_init(&order, 64 * 1024, 0);
	if (r < 0) {
		return r;
	}
	ar = archive_write_new();
	if (!ar) {
		buf_release(&order);
		return -ENOMEM;
	}
	if (archive_write_set_format_cpio_newc(ar) != ARCHIVE_OK || archive_write_add_filter_none(ar) != ARCHIVE_OK ||
	    archive_write_open_filename(ar, tmp) != ARCHIVE_OK) {
		log_error("initramfs %s: %s", tmp, archive_error_string(ar));
		r = -EIO;
		goto out;
	}
	for (size_t i = 0; dirs[i] && r >= 0; i++) {
		r = add_entry(ar, dirs[i], S_IFDIR | 0755, 0, NULL, 0);
	}
	if (r >= 0) {
		r = add_entry(ar, "dev/console", S_IFCHR | 0600, makedev(5, 1), NULL, 0);
	}
	for (size_t i = 0; i < a->n_modules && r >= 0; i++) {
		_cleanup_free_ char *src = NULL, *dst = NULL;
		if (asprintf(&src, "%s/%s", a->modules_dir, a->modules[i]) < 0 ||
		    asprintf(&dst, "modules/%s", a->modules[i]) < 0) {
			r = -ENOMEM;
			break;
		}
		r = add_file(ar, dst, src, 0644, VM_MODULE_MAX_SIZE);
		if (r >= 0) {
			r = buf_putf(&order, "%s\n", a->modules[i]);
		}
	}
	if (r >= 0) {
		r = add_entry(ar, "modules/order", S_IFREG | 0644, 0, buf_ptr(&order), buf_len(&order));
	}
	if (r >= 0) {
		r = add_file(ar, "init", guest_bin, 0755, VM_GUEST_MAX_SIZE);
	}
	if (archive_write_close(ar) != ARCHIVE_OK && r >= 0) {
		log_error("initramfs %s: %s", tmp, archive_error_string(ar));
		r = -EIO;
	}
	if (r >= 0 && rename(tmp, out_path) < 0) {
		r = -errno;
	}
out:
	archive_write_free(ar);
	buf_release(&order);
	if (r < 0) {
		(void)unlink(tmp);
	}
	return r;
}
