/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_JSON_H
#define TKBOX_JSON_H

#include <jansson.h>

#include "buf.h"

/*
 * The one strict JSON reader (over jansson) and the one JCS (RFC 8785)
 * canonical writer. Every JSON byte that comes from a guest, the network, an
 * image, a bundle or an RPC peer goes through json_parse_strict.
 *
 * json_parse_strict refuses, with -EBADMSG unless said otherwise:
 *   - documents larger than opts->max_bytes                          (-E2BIG)
 *   - nesting deeper than opts->max_depth (a document nested exactly
 *     max_depth containers deep is accepted; jansson itself stops at
 *     JSON_PARSER_MAX_DEPTH = 2048 whatever max_depth says)           (-E2BIG)
 *   - empty input
 *   - invalid UTF-8 (bad bytes, overlong forms, encoded surrogates, above
 *     U+10FFFF), lone surrogates (a \ud800-\udbff escape not followed at
 *     once by a \udc00-\udfff one, or a low one alone), \u0000
 *   - duplicate object keys
 *   - NaN, Infinity, numbers that overflow a double (1e400)
 *   - integers with magnitude above 2^53-1 or written with more than 16 digits
 *   - reals with magnitude in [2^53, 1e21): JCS writes them as integer
 *     literals above 2^53-1 (1e20 -> 100000000000000000000), which this
 *     reader and Tracekit's refuse, so JCS output would not read back
 *   - leading/trailing garbage (anything but JSON whitespace after the value)
 *   - a top-level value of another type than opts->want_top, unless
 *     want_top is (json_type)-1 (note that JSON_OBJECT is 0)
 * Other reals are accepted (1.5, 1e3, -0.0, 1e-400 which reads as 0): they
 * are valid JSON and JCS defines their canonical form. A real that holds an
 * integral value stays a JSON_REAL (json_get_int refuses it) but its JCS form
 * is an integer literal (1.0 -> 1).
 * -ENOMEM when jansson runs out of memory; -EINVAL for a bad want_top.
 * opts may be NULL for JSON_OPTS_DEFAULT. *ret is written only on success
 * and holds a new reference.
 * It is pure: no I/O, no logging, no globals.
 */

#define JSON_MAX_SAFE_INT 9007199254740991LL /* 2^53 - 1 */
#define JSON_DEFAULT_MAX_DEPTH 64
#define JSON_DEFAULT_MAX_BYTES ((size_t)1 << 20) /* 1 MiB */
/* Most containers nested in a tree json_write_jcs writes (also stops a cyclic tree). */
#define JSON_JCS_MAX_DEPTH 2048

struct json_opts {
	size_t max_bytes; /* 0: JSON_DEFAULT_MAX_BYTES */
	unsigned max_depth; /* 0: JSON_DEFAULT_MAX_DEPTH */
	json_type want_top; /* JSON_OBJECT, JSON_ARRAY, ...; (json_type)-1 for any */
};

/* Default options: 1 MiB, depth 64, top level must be an object. */
#define JSON_OPTS_DEFAULT ((struct json_opts){ .max_bytes = 0, .max_depth = 0, .want_top = JSON_OBJECT })

_wur_ int json_parse_strict(const void *p, size_t n, const struct json_opts *opts, json_t **ret);

/*
 * Append the JCS (RFC 8785) canonical form of v to out: object members sorted
 * by UTF-16 code units (U+1F600 sorts before U+E000), no whitespace, strings
 * with the minimal escapes (\" \\ \b \t \n \f \r, other controls as
 * \u00xx lowercase; everything else raw UTF-8), integers in decimal, reals
 * in ECMAScript's Number-to-String form (shortest round-trip digits; -0 is 0).
 * -EDOM for a value JCS cannot represent: a non-finite real, an integer
 * beyond +-(2^53-1) (no exact double), a string or key that is not valid
 * UTF-8. -E2BIG when out is full (out then holds a partial prefix) or the
 * tree is deeper than JSON_JCS_MAX_DEPTH. -ENOMEM.
 */
_wur_ int json_write_jcs(const json_t *v, struct buf *out);

/* One string as JCS writes it (quoted, escaped), appended to out: for callers that write a fixed JCS object by hand. */
_wur_ int json_write_jcs_string(const char *s, size_t n, struct buf *out);

/*
 * Convenience: JCS into a new NUL-terminated string (free() it) whose text,
 * without the NUL, is at most max bytes (1..BUF_SIZE_CEILING, else -EINVAL);
 * -E2BIG when longer. Other errors as json_write_jcs.
 */
_wur_ int json_jcs_string(const json_t *v, size_t max, char **ret);

/*
 * Cut the NUL-terminated s at the end of its longest prefix that is valid
 * UTF-8 (the reader's rules): a text snprintf cut inside a character, or
 * one with a bad byte, becomes one json_string takes. Returns the new
 * length. s may be NULL (0).
 */
size_t json_utf8_clip(char *s);

/*
 * Typed getters for parsed objects; each fails with -EBADMSG when the member
 * is present with the wrong type (or obj is not an object) and -ENOENT when
 * absent. Returned pointers are borrowed from obj (no new reference).
 * json_get_string refuses a string with an embedded NUL; json_get_int
 * refuses reals (even 1.0) and integers beyond +-(2^53-1).
 */
_wur_ int json_get_string(const json_t *obj, const char *key, const char **ret);
_wur_ int json_get_int(const json_t *obj, const char *key, int64_t *ret);
_wur_ int json_get_bool(const json_t *obj, const char *key, bool *ret);
_wur_ int json_get_object(const json_t *obj, const char *key, json_t **ret);
_wur_ int json_get_array(const json_t *obj, const char *key, json_t **ret);

/*
 * Refuse members not in the NULL-terminated list allowed[] (-EBADMSG), for
 * closed message schemas. -EBADMSG also when obj is not an object.
 */
_wur_ int json_only_keys(const json_t *obj, const char *const *allowed);

/*
 * jansson (>= 2.9, with GCC or clang) already defines json_decrefp(json_t **),
 * NULL-safe; defining it again here is a redefinition error.
 */
#define _cleanup_json_ _cleanup_(json_decrefp)

#endif
