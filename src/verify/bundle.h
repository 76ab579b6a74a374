/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VERIFY_BUNDLE_H
#define TKBOX_VERIFY_BUNDLE_H

#include <jansson.h>

#include "macro.h"

/*
 * The strict reader of a .tkb bundle (a ZIP file, Tracekit format v2
 * section 9) and of its JSON-lines members.
 *
 * API contract
 *   - Pure: bundle_read works on bytes in memory; no I/O, no logging.
 *   - Accepted ZIP subset: one disk, no ZIP64, no encryption, methods STORED
 *     and DEFLATE only, no archive comment bytes outside the end record, the
 *     central directory immediately followed by the end record, local headers
 *     that agree with the central directory (name, method, CRC and sizes;
 *     general-purpose bit 3 allowed), entries that do not overlap, CRC-32
 *     checked, each entry inflated to exactly its declared size.
 *   - Caps: BUNDLE_MAX_ENTRIES entries, BUNDLE_MAX_ENTRY_SIZE bytes per entry
 *     and BUNDLE_MAX_TOTAL in total (declared sizes, checked before
 *     inflating anything), BUNDLE_MAX_FILE input bytes: -E2BIG.
 *   - Names: [A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9._-]+)*, no segment made
 *     only of dots, and path_verify(): -EINVAL. Duplicates: -EEXIST.
 *     Symlinks or any non-regular Unix file type: -ELOOP. Malformed: -EBADMSG.
 *     Unsupported features (ZIP64, encryption, other methods): -EPROTONOSUPPORT.
 *   - On failure, ret_why (when not NULL) gets a static English reason.
 *
 * bundle_lines: split a JSON-lines member. Every line ends in '\n' (so the
 * member ends in one), none is empty, each is at most BUNDLE_MAX_LINE bytes
 * (-E2BIG), at most BUNDLE_MAX_LINES lines (-E2BIG), else -EBADMSG. The
 * member is validated before anything is allocated. The caller parses each line strictly
 * (record_parse / json_parse_strict). An empty member has zero lines and is
 * accepted here (callers decide). The spans point into p.
 */

#define BUNDLE_MAX_ENTRIES 10000
#define BUNDLE_MAX_ENTRY_SIZE ((size_t)64 << 20)
#define BUNDLE_MAX_TOTAL ((size_t)512 << 20)
/* Compressed input: the members plus headers; DEFLATE never grows data by more than a few bytes per 16 KiB. */
#define BUNDLE_MAX_FILE ((size_t)640 << 20)
#define BUNDLE_MAX_LINE ((size_t)1 << 20)
/* Lines in one JSON-lines member: a record line is hundreds of bytes, so 64 MiB holds far fewer. */
#define BUNDLE_MAX_LINES ((size_t)1000000)
#define BUNDLE_MAX_NAME 255

struct bundle_entry {
	char *name;
	uint8_t *data; /* NUL-terminated after size bytes, for convenience */
	size_t size;
};

struct bundle {
	size_t n;
	struct bundle_entry *e; /* in central-directory order */
};

_wur_ int bundle_read(const void *p, size_t n, struct bundle **ret, const char **ret_why);
void bundle_free(struct bundle *b);
static inline void bundle_freep(struct bundle **b)
{
	bundle_free(*b);
}
#define _cleanup_bundle_ _cleanup_(bundle_freep)

/* The entry of that name, or NULL. */
const struct bundle_entry *bundle_find(const struct bundle *b, const char *name);

/* True when name follows the member name rules (pure). */
bool bundle_name_ok(const char *name, size_t n);

struct bundle_line {
	const uint8_t *p; /* without the '\n' */
	size_t n;
};
_wur_ int bundle_lines(const uint8_t *p, size_t n, struct bundle_line **ret, size_t *ret_n, const char **ret_why);

#endif
