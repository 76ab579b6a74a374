/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The guest's patch producer (src/guest/diff.c) against random overlay
 * layers: the input is a list of operations that build a lower and an upper
 * directory in a temporary dir (files, dirs, symlinks, 0:0 whiteouts, xattr
 * whiteouts, opaque dirs; the last two need root and are skipped without
 * it). Property: whenever the producer makes a patch, the strict parser
 * (src/patch/patch.h) accepts it, with one section per file the producer
 * counted; notices are well formed.
 *
 * One operation: [kind][path][mode][len][len bytes of content]. path picks
 * 1..3 components from a fixed set of names (one with a space, one with a
 * control byte, one ".git"-like in another case).
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "banned.h"
#include "guest/diff.h"
#include "io.h"
#include "patch/patch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const names[] = { "a", "b c", "d\x01", ".Git" };

static char root[64];

static void make_path(const char *layer, uint8_t sel, char *out, size_t n)
{
	size_t depth = (size_t)(sel & 3) % 3 + 1, k;

	k = (size_t)snprintf(out, n, "%s/%s", root, layer);
	for (size_t i = 0; i < depth; i++) {
		const char *nm = names[(sel >> (2 + 2 * i)) & 3];
		/* Parents as directories where possible; failures leave the op a no-op. */
		(void)mkdir(out, 0755);
		k += (size_t)snprintf(out + k, n - k, "/%s", nm);
	}
}

static void op_file(const char *p, uint8_t mode, const uint8_t *c, size_t len)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode & 1 ? 0755 : 0644);

	if (fd >= 0) {
		(void)io_write_all(fd, c, len);
		(void)close(fd);
	}
}

static void apply_op(uint8_t kind, uint8_t sel, uint8_t mode, const uint8_t *c, size_t len)
{
	char p[512];

	make_path(kind % 9 < 3 ? "lower" : "upper", sel, p, sizeof(p));
	switch (kind % 9) {
	case 0:
	case 3:
		op_file(p, mode, c, len);
		break;
	case 1:
	case 4:
		(void)mkdir(p, 0755);
		break;
	case 2:
	case 7:
		(void)symlink(len ? (const char *)names[c[0] & 3] : "a", p);
		break;
	case 5:
		(void)mknod(p, S_IFCHR | 0600, makedev(0, 0));
		break;
	case 6:
		(void)mkdir(p, 0755);
		(void)setxattr(p, "trusted.overlay.opaque", "y", 1, 0);
		break;
	case 8:
		op_file(p, 0, c, 0);
		(void)setxattr(p, "trusted.overlay.whiteout", "y", 1, 0);
		break;
	default:
		break;
	}
}

static void check(void)
{
	char lp[96], up[96], diag[512];
	struct guest_diff d;
	struct patch pt;
	struct buf out;
	int lo, upfd;

	(void)snprintf(lp, sizeof(lp), "%s/lower", root);
	(void)snprintf(up, sizeof(up), "%s/upper", root);
	lo = open(lp, O_PATH | O_DIRECTORY | O_CLOEXEC);
	upfd = open(up, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (lo < 0 || upfd < 0 || buf_init(&out, PATCH_MAX_BYTES, 0) < 0) {
		abort();
	}
	if (guest_diff_make(lo, upfd, &d, diag, sizeof(diag)) == 0) {
		if (guest_diff_concat(&d, &out) < 0 ||
		    patch_parse(buf_ptr(&out), buf_len(&out), &pt, diag, sizeof(diag)) < 0 || pt.n_files != d.n_sec) {
			fprintf(stderr, "refused: %s\n%.*s\n", diag, (int)buf_len(&out), (const char *)buf_ptr(&out));
			abort();
		}
		for (size_t i = 0; i < d.n_notices; i++) {
			size_t pl = strlen(d.notices[i].path);
			if (pl == 0 || pl > PATCH_MAX_NOTICE || d.notices[i].why[0] == '\0') {
				abort();
			}
		}
		patch_release(&pt);
		guest_diff_release(&d);
	}
	buf_release(&out);
	(void)close(lo);
	(void)close(upfd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char cmd[128];
	size_t off = 0;

	if (size > 4096) {
		return 0;
	}
	memcpy(root, "/tmp/tk-fuzz-gdiff-XXXXXX", 26);
	if (!mkdtemp(root)) {
		abort();
	}
	(void)snprintf(cmd, sizeof(cmd), "%s/lower", root);
	(void)mkdir(cmd, 0755);
	(void)snprintf(cmd, sizeof(cmd), "%s/upper", root);
	(void)mkdir(cmd, 0755);
	while (off + 4 <= size) {
		size_t len = MIN((size_t)data[off + 3], size - off - 4);
		apply_op(data[off], data[off + 1], data[off + 2], data + off + 4, len);
		off += 4 + len;
	}
	check();
	(void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0) {
		abort();
	}
	return 0;
}
