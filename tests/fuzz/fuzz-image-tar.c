/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <archive.h>
#include <archive_entry.h>

#include "banned.h"
#include "image/flatten.h"

/*
 * Layer bytes through the flattener, applied to a fresh directory each run,
 * two layers per input so whiteouts and symlinks meet a lower layer. Small
 * caps keep runs fast. After each run nothing may exist outside the root.
 *
 * First byte < 0x80: raw mode. The rest is split at a point that byte names
 * into two layers of raw bytes (tar, tar.gz, tar.zst) for libarchive.
 * First byte >= 0x80: structured mode. The rest is a list of entries
 * [kind u8][name len u8][name][arg len u8][arg], written as tar with
 * libarchive so every entry reaches the flattener's path logic (checksums
 * would stop most raw mutations at the header). Kind: 0 file (arg: data),
 * 1 dir, 2 symlink (arg: target), 3 hardlink (arg: target), 4 char device,
 * 5 layer break; bit 3 sets mode 04755, bits 4-7 an owner.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char base[64];
static int basefd = -1;

#define MAX_LAYER_BYTES (1 << 20)

/* Write the entries up to a layer break as one tar; returns the bytes consumed. */
static size_t build_layer(const uint8_t *p, size_t n, uint8_t *out, size_t *ret_used)
{
	struct archive *a = archive_write_new();
	size_t i = 0;
	if (!a || archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
	    archive_write_open_memory(a, out, MAX_LAYER_BYTES, ret_used) != ARCHIVE_OK) {
		abort();
	}
	while (i + 3 <= n) {
		uint8_t kind = p[i], nl = p[i + 1], al;
		char name[256], arg[256];
		struct archive_entry *e;
		if (i + 2 + nl + 1 > n) {
			break;
		}
		memcpy(name, p + i + 2, nl);
		name[nl] = '\0';
		al = p[i + 2 + nl];
		if (i + 3 + nl + al > n) {
			break;
		}
		memcpy(arg, p + i + 3 + nl, al);
		arg[al] = '\0';
		i += 3u + nl + al;
		if ((kind & 7) == 5) {
			break;
		}
		e = archive_entry_new();
		archive_entry_set_pathname(e, name);
		archive_entry_set_perm(e, (kind & 8) ? 04755 : 0644);
		archive_entry_set_uid(e, kind >> 4);
		archive_entry_set_gid(e, kind >> 4);
		switch (kind & 7) {
		case 1:
			archive_entry_set_filetype(e, AE_IFDIR);
			break;
		case 2:
			archive_entry_set_filetype(e, AE_IFLNK);
			archive_entry_set_symlink(e, arg);
			break;
		case 3:
			archive_entry_set_filetype(e, AE_IFREG);
			archive_entry_set_hardlink(e, arg);
			break;
		case 4:
			archive_entry_set_filetype(e, AE_IFCHR);
			break;
		default:
			archive_entry_set_filetype(e, AE_IFREG);
			archive_entry_set_size(e, al);
			break;
		}
		if (archive_write_header(a, e) == ARCHIVE_OK && (kind & 7) == 0 && al) {
			(void)archive_write_data(a, arg, al);
		}
		archive_entry_free(e);
	}
	(void)archive_write_close(a);
	archive_write_free(a);
	return i;
}

static void structured(struct flatten *f, const uint8_t *p, size_t n, struct image_diag *d)
{
	static uint8_t *out;
	if (!out && !(out = malloc(MAX_LAYER_BYTES))) {
		abort();
	}
	for (int layer = 0; layer < 3 && n > 0; layer++) {
		size_t used = 0, k = build_layer(p, n, out, &used);
		if (flatten_layer_mem(f, out, used, NULL, d) < 0 || k == 0) {
			return;
		}
		p += k;
		n -= k;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct flatten_limits lim = { .max_entries = 2000,
					    .max_entry_size = 1 << 20,
					    .max_total_bytes = 8 << 20 };
	struct flatten *f = NULL;
	struct image_diag d;
	struct stat st;
	size_t cut;
	int rootfd;

	if (basefd < 0) {
		/* tmpfs when there is one: each run creates and removes a tree */
		(void)snprintf(base, sizeof(base), "%s/fuzz-image-tar-%d",
			       access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
		(void)mkdir(base, 0700);
		basefd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (basefd < 0) {
			abort();
		}
	}
	if (size == 0) {
		return 0;
	}
	cut = size > 1 ? 1 + (size_t)data[0] * (size - 1) / 256 : 1;
	(void)image_rm_rf_at(basefd, "root");
	if (mkdirat(basefd, "root", 0700) < 0) {
		abort();
	}
	rootfd = openat(basefd, "root", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0 || flatten_new(rootfd, &lim, &f) < 0) {
		abort();
	}
	d.msg[0] = '\0';
	if (data[0] < 0x80) {
		if (flatten_layer_mem(f, data + 1, cut - 1, NULL, &d) == 0) {
			(void)flatten_layer_mem(f, data + cut, size - cut, NULL, &d);
		}
	} else {
		structured(f, data + 1, size - 1, &d);
	}
	flatten_free(f);
	(void)close(rootfd);
	/* the root is the only thing a layer may write: anything beside it is an escape */
	{
		int n = 0;
		int dfd = fcntl(basefd, F_DUPFD_CLOEXEC, 3);
		DIR *dir = fdopendir(dfd);
		struct dirent *de;
		while (dir && (de = readdir(dir))) {
			n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
			     strcmp(de->d_name, "root") != 0;
		}
		if (dir) {
			closedir(dir);
		}
		if (n != 0 || fstatat(AT_FDCWD, "/tmp/pwned", &st, AT_SYMLINK_NOFOLLOW) == 0) {
			abort();
		}
	}
	return 0;
}
