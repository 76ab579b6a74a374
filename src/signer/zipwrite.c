/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>
#include <zlib.h>

#include "zipwrite.h"

#include "banned.h"

/* 1980-01-01 00:00: a constant, so bundles do not depend on the export time. */
#define ZIP_DOS_TIME 0x0000
#define ZIP_DOS_DATE 0x0021
#define ZIP_VERSION 20
#define ZIP_METHOD_DEFLATE 8
#define ZIP_CD_MAX ((size_t)16 << 20)

static int put_le16(struct buf *b, uint16_t v)
{
	uint8_t x[2] = { (uint8_t)v, (uint8_t)(v >> 8) };
	return buf_put(b, x, sizeof(x));
}

static int put_le32(struct buf *b, uint32_t v)
{
	uint8_t x[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
	return buf_put(b, x, sizeof(x));
}

int zipwrite_init(struct zipwrite *z, struct buf *out)
{
	int r;

	*z = (struct zipwrite){ .out = out };
	r = buf_init(&z->cd, ZIP_CD_MAX, 0);
	if (r < 0) {
		return r;
	}
	return 0;
}

void zipwrite_release(struct zipwrite *z)
{
	if (!z) {
		return;
	}
	for (size_t i = 0; i < z->n_entries; i++) {
		free(z->names[i]);
	}
	free(z->names);
	buf_release(&z->cd);
	*z = (struct zipwrite){ 0 };
}

static bool name_char_ok(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
	       c == '-';
}

bool zipwrite_name_ok(const char *name)
{
	size_t n = strlen(name);
	size_t seg_start = 0;

	if (n == 0 || n > ZIPWRITE_MAX_NAME || name[0] == '.') {
		return false;
	}
	for (size_t i = 0; i <= n; i++) {
		if (i == n || name[i] == '/') {
			size_t len = i - seg_start;
			bool all_dots = true;
			if (len == 0) {
				return false;
			}
			for (size_t j = seg_start; j < i; j++) {
				if (name[j] != '.') {
					all_dots = false;
				}
			}
			if (all_dots) {
				return false;
			}
			seg_start = i + 1;
			continue;
		}
		if (!name_char_ok(name[i])) {
			return false;
		}
	}
	return true;
}

static int deflate_raw(const void *p, size_t n, struct buf *out, size_t *ret_len)
{
	z_stream zs = { 0 };
	size_t bound;
	uint8_t *dst;
	int r;

	if (deflateInit2(&zs, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
		return -ENOMEM;
	}
	bound = deflateBound(&zs, (uLong)n);
	r = buf_reserve(out, bound, &dst);
	if (r < 0) {
		(void)deflateEnd(&zs);
		return r;
	}
	zs.next_in = (Bytef *)(uintptr_t)p;
	zs.avail_in = (uInt)n;
	zs.next_out = dst;
	zs.avail_out = (uInt)bound;
	if (deflate(&zs, Z_FINISH) != Z_STREAM_END) {
		(void)deflateEnd(&zs);
		return -EIO;
	}
	*ret_len = zs.total_out;
	(void)deflateEnd(&zs);
	return 0;
}

int zipwrite_add(struct zipwrite *z, const char *name, const void *p, size_t n)
{
	struct buf comp = { 0 };
	size_t clen = 0, name_len, offset;
	char **names;
	char *dup;
	uint32_t crc;
	int r;

	if (z->finished) {
		return -EINVAL;
	}
	if (!zipwrite_name_ok(name)) {
		return -EINVAL;
	}
	if (z->n_entries >= ZIPWRITE_MAX_ENTRIES || n > ZIPWRITE_MAX_ENTRY_SIZE) {
		return -E2BIG;
	}
	for (size_t i = 0; i < z->n_entries; i++) {
		if (strcmp(z->names[i], name) == 0) {
			return -EEXIST;
		}
	}
	name_len = strlen(name);
	offset = buf_len(z->out);
	if (offset > UINT32_MAX) {
		return -E2BIG;
	}

	/* deflateBound can exceed n slightly; leave room for it. */
	r = buf_init(&comp, ZIPWRITE_MAX_ENTRY_SIZE + ZIPWRITE_MAX_ENTRY_SIZE / 64 + 4096, 0);
	if (r < 0) {
		return r;
	}
	r = deflate_raw(p, n, &comp, &clen);
	if (r < 0) {
		goto out;
	}
	crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), p, (uInt)n);

	names = realloc(z->names, (z->n_entries + 1) * sizeof(*names));
	if (!names) {
		r = -ENOMEM;
		goto out;
	}
	z->names = names;
	dup = strdup(name);
	if (!dup) {
		r = -ENOMEM;
		goto out;
	}

	/* Local file header. */
	if ((r = put_le32(z->out, 0x04034b50)) < 0 || (r = put_le16(z->out, ZIP_VERSION)) < 0 ||
	    (r = put_le16(z->out, 0)) < 0 || (r = put_le16(z->out, ZIP_METHOD_DEFLATE)) < 0 ||
	    (r = put_le16(z->out, ZIP_DOS_TIME)) < 0 || (r = put_le16(z->out, ZIP_DOS_DATE)) < 0 ||
	    (r = put_le32(z->out, crc)) < 0 || (r = put_le32(z->out, (uint32_t)clen)) < 0 ||
	    (r = put_le32(z->out, (uint32_t)n)) < 0 || (r = put_le16(z->out, (uint16_t)name_len)) < 0 ||
	    (r = put_le16(z->out, 0)) < 0 || (r = buf_put(z->out, name, name_len)) < 0 ||
	    (r = buf_put(z->out, buf_ptr(&comp), clen)) < 0) {
		free(dup);
		goto out;
	}
	/* Central directory entry. */
	if ((r = put_le32(&z->cd, 0x02014b50)) < 0 || (r = put_le16(&z->cd, (3 << 8) | ZIP_VERSION)) < 0 ||
	    (r = put_le16(&z->cd, ZIP_VERSION)) < 0 || (r = put_le16(&z->cd, 0)) < 0 ||
	    (r = put_le16(&z->cd, ZIP_METHOD_DEFLATE)) < 0 || (r = put_le16(&z->cd, ZIP_DOS_TIME)) < 0 ||
	    (r = put_le16(&z->cd, ZIP_DOS_DATE)) < 0 || (r = put_le32(&z->cd, crc)) < 0 ||
	    (r = put_le32(&z->cd, (uint32_t)clen)) < 0 || (r = put_le32(&z->cd, (uint32_t)n)) < 0 ||
	    (r = put_le16(&z->cd, (uint16_t)name_len)) < 0 || (r = put_le16(&z->cd, 0)) < 0 ||
	    (r = put_le16(&z->cd, 0)) < 0 || (r = put_le16(&z->cd, 0)) < 0 || (r = put_le16(&z->cd, 0)) < 0 ||
	    /* external attributes: a regular file, mode 0644 (never a symlink) */
	    (r = put_le32(&z->cd, (uint32_t)0100644 << 16)) < 0 || (r = put_le32(&z->cd, (uint32_t)offset)) < 0 ||
	    (r = buf_put(&z->cd, name, name_len)) < 0) {
		free(dup);
		goto out;
	}
	z->names[z->n_entries++] = dup;
	r = 0;
out:
	buf_release(&comp);
	return r;
}

int zipwrite_finish(struct zipwrite *z)
{
	size_t cd_off = buf_len(z->out);
	int r;

	if (z->finished) {
		return -EINVAL;
	}
	if (cd_off > UINT32_MAX || buf_len(&z->cd) > UINT32_MAX) {
		return -E2BIG;
	}
	if ((r = buf_put(z->out, buf_ptr(&z->cd), buf_len(&z->cd))) < 0 || (r = put_le32(z->out, 0x06054b50)) < 0 ||
	    (r = put_le16(z->out, 0)) < 0 || (r = put_le16(z->out, 0)) < 0 ||
	    (r = put_le16(z->out, (uint16_t)z->n_entries)) < 0 || (r = put_le16(z->out, (uint16_t)z->n_entries)) < 0 ||
	    (r = put_le32(z->out, (uint32_t)buf_len(&z->cd))) < 0 || (r = put_le32(z->out, (uint32_t)cd_off)) < 0 ||
	    (r = put_le16(z->out, 0)) < 0) {
		return r;
	}
	z->finished = true;
	return 0;
}
