/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_EGRESS_LEAK_H
#define TKBOX_EGRESS_LEAK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "egress/secret.h"
#include "macro.h"

/*
 * Finding secret values and placeholders in bytes the proxy reads, and
 * redacting values from bytes it relays (docs/secrets.md "Leak blocking",
 * "Redaction"). Pure: no I/O, no logging; the set owns copies of the
 * patterns in secmem (they are the value's encodings) and wipes them.
 *
 * Targets, per secret, for the value and for the placeholder:
 *   raw      the bytes, ASCII letters in any case;
 *   hex      two hex digits per byte, any case;
 *   base64   standard and URL-safe alphabets, at each of the 3 alignments a
 *            value can have inside a longer base64 text (only the characters
 *            the value alone determines), case-sensitive.
 * Each target character may also appear escaped, in any mix: percent-encoded
 * (%XX, any case) or JSON-escaped (\uXXXX any case, and \" \\ \/ \b \f \n
 * \r \t). So "percent-encoded hex" and "JSON-escaped base64" are found too.
 * A value byte >= 0x80 matches only raw or percent-encoded.
 *
 * Matching is leftmost, non-overlapping, left to right; after a match the
 * scan resumes after its last byte, so redacted bytes never take part in a
 * later match (reference finding F4). The marker byte is chosen when the set
 * is built: the first of "*#~!^|" that is in no value or placeholder (any
 * case); it is neither a hex, base64 nor escape character, so the output
 * can never hold a target built partly from markers.
 */

#define EGRESS_LEAK_VALUES 1u /* the values' targets */
#define EGRESS_LEAK_PLACEHOLDERS 2u /* the placeholders' targets */

struct egress_leak_set;

struct egress_leak_match {
	size_t secret; /* index into the secrets the set was built from */
	bool placeholder; /* the placeholder matched (else the value) */
	const char *form; /* static: "raw", "hex", "base64", "base64url" */
	bool escaped; /* percent- or JSON-escapes were part of it */
	size_t off, len; /* where, in the bytes scanned (one-shot calls only) */
};

/* Build the targets of s[0..n) (n may be 0: a set that never matches). -ENOMEM. */
_wur_ int egress_leak_set_new(const struct egress_secret *s, size_t n, struct egress_leak_set **ret);
void egress_leak_set_free(struct egress_leak_set *set);

/* The longest encoded target in bytes: a stream holds back one byte less. */
size_t egress_leak_holdback(const struct egress_leak_set *set);

/* The marker byte redaction writes. */
uint8_t egress_leak_marker(const struct egress_leak_set *set);

/*
 * The reason text of a match for a record or a refusal, e.g. "the value of
 * GH_TOKEN (base64, escaped)"; never any byte of the value. s is the whole
 * array the set was built from (m->secret indexes it). Written to out
 * (always NUL-terminated).
 */
void egress_leak_describe(const struct egress_leak_set *set, const struct egress_secret *s,
			  const struct egress_leak_match *m, char *out, size_t out_size);

/* One-shot: the first match in p[0..n) among the targets of what. 1 (*ret filled), 0 none. */
int egress_leak_find(const struct egress_leak_set *set, unsigned what, const uint8_t *p, size_t n,
		     struct egress_leak_match *ret);

/* One-shot: every value match in p[0..n) overwritten with the marker (same length). Returns how many. */
size_t egress_leak_redact(const struct egress_leak_set *set, uint8_t *p, size_t n);

/*
 * A stream of one direction's body bytes, split at any boundary. It holds
 * back egress_leak_holdback()-1 bytes (a BUF_SECRET buffer) until it knows
 * they cannot start a match.
 *
 *   scan mode (redact false): finds the targets of what. At the first match
 *     the feed returns 1 with *ret (off/len 0): nothing from the match's
 *     first byte on was appended to out, and the stream is dead (every later
 *     call returns 1 with the same match).
 *   redact mode (redact true): values only (what is ignored); matches are
 *     overwritten with the marker and everything is appended, in order, with
 *     the same total length as fed.
 */
struct egress_leak_stream {
	const struct egress_leak_set *set;
	unsigned what;
	bool redact;
	bool dead;
	struct egress_leak_match m;
	struct buf hold;
};

_wur_ int egress_leak_stream_init(struct egress_leak_stream *s, const struct egress_leak_set *set, unsigned what,
				  bool redact);
void egress_leak_stream_release(struct egress_leak_stream *s);

/* Feed p[0..n): 0, 1 (scan mode: a match, *ret filled), -ENOMEM or -E2BIG (out is full). */
_wur_ int egress_leak_stream_feed(struct egress_leak_stream *s, const uint8_t *p, size_t n, struct buf *out,
				  struct egress_leak_match *ret);

/* The end: the held bytes, scanned or redacted, appended. 0, 1 (a match), or -errno of out. */
_wur_ int egress_leak_stream_end(struct egress_leak_stream *s, struct buf *out, struct egress_leak_match *ret);

#endif
