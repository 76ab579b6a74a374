/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Why a ZIP reader of our own rather than libarchive: the bundle is the input
 * an attacker controls completely, and the verifier must refuse every
 * ambiguity, not merely survive it. Reading the central directory ourselves
 * over one bounded in-memory buffer lets us (1) check every cap on declared
 * sizes before inflating a byte, (2) refuse ZIP64, encryption, prepended data,
 * overlapping entries and local headers that disagree with the central
 * directory (the classic way to show two different archives to two readers),
 * (3) refuse duplicates and symlinks before any content is used, and (4) keep
 * the parser pure, so the fuzz target runs it without any I/O. libarchive's
 * streaming reader trusts local headers and its seekable reader does not
 * expose these consistency checks. The subset we accept is what Python's
 * zipfile and tkbox-signer's zipwrite produce.
 */
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "banned.h"
#include "path.h"
#include "verify/bundle.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_ZIP64_LOCATOR 0x07064b50u
#define LOCAL_LEN 30u
#define CENTRAL_LEN 46u
#define EOCD_LEN 22u

/* General-purpose flags we refuse: encrypted (0), strong encryption (6), masked local header (13). */
#define FLAGS_REFUSED ((1u << 0) | (1u << 6) | (1u << 13))
#define FLAG_DESCRIPTOR (1u << 3)

struct cd_entry {
	uint16_t flags, method;
	uint32_t crc, csize, usize, offset;
	const uint8_t *name;
	uint16_t name_len;
	uint64_t data_start, data_end;
};

static uint16_t le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool name_char(char c, bool first)
{
	if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-') {
		return true;
	}
	return c == '.' && !first;
}

bool bundle_name_ok(const char *name, size_t n)
{
	size_t seg_start = 0;
	bool all_dots = true;

	if (!name || n == 0 || n > BUNDLE_MAX_NAME || !name_char(name[0], true)) {
		return false;
	}
	for (size_t i = 0; i <= n; i++) {
		if (i == n || name[i] == '/') {
			if (i == seg_start || all_dots) {
				return false;
			}
			seg_start = i + 1;
			all_dots = true;
			continue;
		}
		if (!name_char(name[i], false)) {
			return false;
		}
		if (name[i] != '.') {
			all_dots = false;
		}
	}
	/* The one path check of the project, on top of the format's own rule. */
	return path_verify(name, n) == 0;
}

void bundle_free(struct bundle *b)
{
	if (!b) {
		return;
	}
	for (size_t i = 0; i < b->n; i++) {
		free(b->e[i].name);
		free(b->e[i].data);
	}
	free(b->e);
	free(b);
}

const struct bundle_entry *bundle_find(const struct bundle *b, const char *name)
{
	for (size_t i = 0; i < b->n; i++) {
		if (strcmp(b->e[i].name, name) == 0) {
			return &b->e[i];
		}
	}
	return NULL;
}

static int find_eocd(const uint8_t *p, size_t n, size_t *ret)
{
	size_t lo = n - EOCD_LEN > 0xffff ? n - EOCD_LEN - 0xffff : 0;

	/* The last end record whose comment runs exactly to the end of the file. */
	for (size_t pos = n - EOCD_LEN + 1; pos-- > lo;) {
		if (le32(p + pos) == SIG_EOCD && (size_t)le16(p + pos + 20) == n - pos - EOCD_LEN) {
			*ret = pos;
			return 0;
		}
	}
	return -EBADMSG;
}

/* qsort_r comparators over indexes into the entry array (no global state: the parser stays pure and reentrant). */
static int cmp_name(const void *a, const void *b, void *ctx)
{
	const struct cd_entry *base = ctx;
	const struct cd_entry *x = &base[*(const size_t *)a], *y = &base[*(const size_t *)b];
	int c = memcmp(x->name, y->name, MIN(x->name_len, y->name_len));

	return c ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

static int cmp_offset(const void *a, const void *b, void *ctx)
{
	const struct cd_entry *base = ctx;
	const struct cd_entry *x = &base[*(const size_t *)a], *y = &base[*(const size_t *)b];

	return (x->offset > y->offset) - (x->offset < y->offset);
}

#define FAIL(code, why)                                                                                                \
	do {                                                                                                           \
		r = (code);                                                                                            \
		reason = (why);                                                                                        \
		goto out;                                                                                              \
	} while (0)

static int inflate_entry(const uint8_t *src, size_t csize, uint8_t *dst, size_t usize)
{
	z_stream z = { 0 };
	int zr;

	if (inflateInit2(&z, -MAX_WBITS) != Z_OK) {
		return -ENOMEM;
	}
	z.next_in = (Bytef *)(uintptr_t)src;
	z.avail_in = (uInt)csize;
	z.next_out = dst;
	/* One spare byte: a stream that inflates to more than declared fills it and is refused. */
	z.avail_out = (uInt)(usize + 1);
	zr = inflate(&z, Z_FINISH);
	if (zr != Z_STREAM_END || z.total_out != usize || z.avail_in != 0) {
		inflateEnd(&z);
		return -EBADMSG;
	}
	inflateEnd(&z);
	return 0;
}

int bundle_read(const void *data, size_t n, struct bundle **ret, const char **ret_why)
{
	const uint8_t *p = data;
	const char *reason = NULL;
	struct cd_entry *ents = NULL;
	size_t *order = NULL;
	struct bundle *b = NULL;
	size_t eocd, cd_off, cd_size, count, pos, total = 0;
	int r;

	if (n > BUNDLE_MAX_FILE) {
		FAIL(-E2BIG, "file larger than the bundle cap");
	}
	if (!p || n < EOCD_LEN || find_eocd(p, n, &eocd) < 0) {
		FAIL(-EBADMSG, "not a zip file (no end of central directory)");
	}
	if (eocd >= 20 && le32(p + eocd - 20) == SIG_ZIP64_LOCATOR) {
		FAIL(-EPROTONOSUPPORT, "ZIP64 is not accepted");
	}
	if (le16(p + eocd + 4) != 0 || le16(p + eocd + 6) != 0 || le16(p + eocd + 8) != le16(p + eocd + 10)) {
		FAIL(-EPROTONOSUPPORT, "multi-disk zip");
	}
	count = le16(p + eocd + 10);
	cd_size = le32(p + eocd + 12);
	cd_off = le32(p + eocd + 16);
	if (count == 0xffff || cd_size == 0xffffffffu || cd_off == 0xffffffffu) {
		FAIL(-EPROTONOSUPPORT, "ZIP64 is not accepted");
	}
	if (count > BUNDLE_MAX_ENTRIES) {
		FAIL(-E2BIG, "more entries than the cap");
	}
	if (cd_off > eocd || cd_size != eocd - cd_off) {
		FAIL(-EBADMSG, "central directory is not followed by the end record");
	}
	ents = calloc(count ? count : 1, sizeof(*ents));
	order = calloc(count ? count : 1, sizeof(*order));
	b = calloc(1, sizeof(*b));
	if (!ents || !order || !b) {
		FAIL(-ENOMEM, "out of memory");
	}

	/* Pass 1: the central directory. Every cap is checked on declared sizes here, before any inflation. */
	pos = cd_off;
	for (size_t i = 0; i < count; i++) {
		struct cd_entry *e = &ents[i];
		const uint8_t *h = p + pos;
		size_t extra_len, comment_len, rec_len;
		uint16_t made_by;
		uint32_t ext_attr;

		if (eocd - pos < CENTRAL_LEN || le32(h) != SIG_CENTRAL) {
			FAIL(-EBADMSG, "bad central directory header");
		}
		made_by = le16(h + 4);
		e->flags = le16(h + 8);
		e->method = le16(h + 10);
		e->crc = le32(h + 16);
		e->csize = le32(h + 20);
		e->usize = le32(h + 24);
		e->name_len = le16(h + 28);
		extra_len = le16(h + 30);
		comment_len = le16(h + 32);
		ext_attr = le32(h + 38);
		e->offset = le32(h + 42);
		rec_len = CENTRAL_LEN + e->name_len + extra_len + comment_len;
		if (eocd - pos < rec_len) {
			FAIL(-EBADMSG, "central directory header runs past its end");
		}
		e->name = h + CENTRAL_LEN;
		if (e->flags & FLAGS_REFUSED) {
			FAIL(-EPROTONOSUPPORT, "encrypted entry");
		}
		if (e->method != 0 && e->method != 8) {
			FAIL(-EPROTONOSUPPORT, "compression method other than stored or deflate");
		}
		if (le16(h + 34) != 0) {
			FAIL(-EPROTONOSUPPORT, "multi-disk zip");
		}
		if (e->csize == 0xffffffffu || e->usize == 0xffffffffu || e->offset == 0xffffffffu) {
			FAIL(-EPROTONOSUPPORT, "ZIP64 is not accepted");
		}
		if (e->usize > BUNDLE_MAX_ENTRY_SIZE) {
			FAIL(-E2BIG, "entry larger than 64 MiB");
		}
		total += e->usize;
		if (total > BUNDLE_MAX_TOTAL) {
			FAIL(-E2BIG, "entries larger than 512 MiB in total");
		}
		if (e->method == 0 && e->csize != e->usize) {
			FAIL(-EBADMSG, "stored entry with different sizes");
		}
		if (!bundle_name_ok((const char *)e->name, e->name_len)) {
			FAIL(-EINVAL, "entry name not allowed (absolute, traversal, or outside the name rules)");
		}
		/* Unix host: the file type lives in the high 16 bits of the external attributes. */
		if ((made_by >> 8) == 3) {
			uint32_t type = (ext_attr >> 16) & 0170000u;

			if (type == 0120000u) {
				FAIL(-ELOOP, "symlink entry");
			}
			if (type != 0 && type != 0100000u) {
				FAIL(-ELOOP, "entry is not a regular file");
			}
		}
		if (ext_attr & 0x10u) {
			FAIL(-ELOOP, "directory entry");
		}
		order[i] = i;
		pos += rec_len;
	}
	if (pos != eocd) {
		FAIL(-EBADMSG, "central directory size mismatch");
	}

	/* Pass 2: duplicates. */
	qsort_r(order, count, sizeof(*order), cmp_name, ents);
	for (size_t i = 1; i < count; i++) {
		if (cmp_name(&order[i - 1], &order[i], ents) == 0) {
			FAIL(-EEXIST, "duplicate entry name");
		}
	}

	/* Pass 3: local headers agree with the central directory; entries lie before it and do not overlap. */
	for (size_t i = 0; i < count; i++) {
		struct cd_entry *e = &ents[i];
		const uint8_t *h = p + e->offset;
		size_t lname, lextra;
		uint32_t lcrc, lcsize, lusize;

		if (e->offset > cd_off || cd_off - e->offset < LOCAL_LEN || le32(h) != SIG_LOCAL) {
			FAIL(-EBADMSG, "bad local header");
		}
		lname = le16(h + 26);
		lextra = le16(h + 28);
		if (le16(h + 6) != e->flags || le16(h + 8) != e->method || lname != e->name_len) {
			FAIL(-EBADMSG, "local header disagrees with the central directory");
		}
		e->data_start = (uint64_t)e->offset + LOCAL_LEN + lname + lextra;
		e->data_end = e->data_start + e->csize;
		if (e->data_end > cd_off) {
			FAIL(-EBADMSG, "entry data runs into the central directory");
		}
		if (memcmp(h + LOCAL_LEN, e->name, lname) != 0) {
			FAIL(-EBADMSG, "local header disagrees with the central directory");
		}
		lcrc = le32(h + 14);
		lcsize = le32(h + 18);
		lusize = le32(h + 22);
		if (!(lcrc == e->crc && lcsize == e->csize && lusize == e->usize) &&
		    !((e->flags & FLAG_DESCRIPTOR) && lcrc == 0 && lcsize == 0 && lusize == 0)) {
			FAIL(-EBADMSG, "local header disagrees with the central directory");
		}
	}
	qsort_r(order, count, sizeof(*order), cmp_offset, ents);
	for (size_t i = 1; i < count; i++) {
		if (ents[order[i]].offset < ents[order[i - 1]].data_end) {
			FAIL(-EBADMSG, "overlapping entries");
		}
	}

	/* Pass 4: contents. */
	b->e = calloc(count ? count : 1, sizeof(*b->e));
	if (!b->e) {
		FAIL(-ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < count; i++) {
		struct cd_entry *e = &ents[i];
		struct bundle_entry *be = &b->e[i];

		be->name = strndup((const char *)e->name, e->name_len);
		be->data = malloc((size_t)e->usize + 1);
		b->n = i + 1;
		if (!be->name || !be->data) {
			FAIL(-ENOMEM, "out of memory");
		}
		be->size = e->usize;
		if (e->method == 0) {
			memcpy(be->data, p + e->data_start, e->usize);
		} else if (inflate_entry(p + e->data_start, e->csize, be->data, e->usize) < 0) {
			FAIL(-EBADMSG, "entry does not inflate to its declared size");
		}
		be->data[e->usize] = '\0';
		if ((uint32_t)crc32(0L, be->data, (uInt)e->usize) != e->crc) {
			FAIL(-EBADMSG, "entry CRC-32 mismatch");
		}
	}
	*ret = b;
	b = NULL;
	r = 0;
out:
	if (r < 0 && ret_why) {
		*ret_why = reason;
	}
	bundle_free(b);
	free(ents);
	free(order);
	return r;
}

int bundle_lines(const uint8_t *p, size_t n, struct bundle_line **ret, size_t *ret_n, const char **ret_why)
{
	struct bundle_line *lines = NULL;
	size_t count = 0, start = 0;

	if (n > 0 && p[n - 1] != '\n') {
		if (ret_why) {
			*ret_why = "JSON lines file does not end in a newline";
		}
		return -EBADMSG;
	}
	/* Validate and count first, so a hostile member cannot make us allocate before it is refused. */
	for (size_t i = 0; i < n; i++) {
		const char *why = NULL;

		if (p[i] != '\n') {
			continue;
		}
		if (i == start) {
			why = "empty line in a JSON lines file";
		} else if (i - start > BUNDLE_MAX_LINE) {
			why = "JSON line longer than 1 MiB";
		} else if (count >= BUNDLE_MAX_LINES) {
			why = "more than 1,000,000 lines in a JSON lines file";
		}
		if (why) {
			if (ret_why) {
				*ret_why = why;
			}
			return i == start ? -EBADMSG : -E2BIG;
		}
		count++;
		start = i + 1;
	}
	lines = calloc(count ? count : 1, sizeof(*lines));
	if (!lines) {
		return -ENOMEM;
	}
	count = 0;
	start = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] != '\n') {
			continue;
		}
		lines[count].p = p + start;
		lines[count].n = i - start;
		count++;
		start = i + 1;
	}
	*ret = lines;
	*ret_n = count;
	return 0;
}
