/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_EGRESS_CLIENTHELLO_H
#define TKBOX_EGRESS_CLIENTHELLO_H

#include "egress/host.h"

/*
 * The TLS ClientHello a tunnel opens with, read incrementally before any byte
 * is forwarded: TLS records of type handshake (22) are reassembled, split
 * across records and reads at any byte, up to EGRESS_CH_MAX bytes of
 * handshake message. Pure: no I/O, no allocation (the reader is caller
 * storage, about 72 KiB).
 *
 * Refused: bytes that are not a TLS handshake record at all (-EPROTONOSUPPORT,
 * decided from the first two bytes, so a caller can treat the tunnel as
 * plain TCP), a record of another type, length 0 or above 2^14, a handshake
 * message other than ClientHello, bytes after the ClientHello in its last
 * record, a malformed ClientHello, a duplicated extension (-EBADMSG); a
 * ClientHello larger than EGRESS_CH_MAX (-E2BIG); two server names, an
 * encrypted ClientHello (extension 0xfe0d, GREASE ECH included, and the
 * drafts' codepoints 0xfe08..0xfe0c, 0xff02..0xff04), ESNI 0xffce or
 * ech_outer_extensions 0xfd00 (-EACCES).
 */

#define EGRESS_CH_MAX 65536
#define EGRESS_TLS_RECORD_MAX 16384

struct egress_ch_info {
	bool has_sni;
	char sni[EGRESS_HOST_TEXT_MAX]; /* lower case */
	uint16_t legacy_version;
	size_t raw_len; /* stream bytes of the records that carried the ClientHello */
};

struct egress_ch_reader {
	uint8_t msg[EGRESS_CH_MAX]; /* the reassembled handshake message */
	size_t msg_len;
	uint8_t hdr[5]; /* the current record header */
	size_t hdr_len;
	size_t rec_left; /* payload bytes left in the current record */
	size_t consumed; /* stream bytes read so far */
	int state; /* 0 reading, 1 done, < 0 the sticky error */
	const char *reason;
	uint8_t seen[8192]; /* extension types seen (a bitmap) */
};

void egress_ch_init(struct egress_ch_reader *r);

/*
 * Feed p[0..n). Returns 0 when all n bytes were taken and more are needed; 1
 * when the ClientHello is complete: *ret_used bytes of p were taken (the rest
 * is what the client sent after it) and *ret is filled; or a negative errno
 * with *ret_reason naming the rule. After 1 or an error every call returns
 * the same again without reading.
 */
_wur_ int egress_ch_feed(struct egress_ch_reader *r, const uint8_t *p, size_t n, size_t *ret_used,
			 struct egress_ch_info *ret, const char **ret_reason);

/*
 * The server name against the CONNECT host: a name host needs exactly that
 * SNI; an IP literal host needs none. 0 or -EACCES with *ret_reason.
 */
_wur_ int egress_ch_check_sni(const struct egress_ch_info *ch, const struct egress_host *h, const char **ret_reason);

/* After a HelloRetryRequest: the second ClientHello names what the first did. 0 or -EACCES. */
_wur_ int egress_ch_check_retry(const struct egress_ch_info *first, const struct egress_ch_info *second,
				const char **ret_reason);

/*
 * Whether the server's first bytes p[0..n) open with a HelloRetryRequest
 * (a ServerHello whose random is RFC 8446's HRR value): 1 yes; 0 no (a
 * ServerHello with another random, or a first record that is not a
 * handshake: an alert, not TLS); -ENODATA when more bytes are needed to say
 * (at most 43); -EBADMSG a first handshake record that cannot be judged
 * alone: shorter than EGRESS_TLS_HRR_MIN bytes (the ServerHello split across
 * records) or not opening with a ServerHello. Fail-closed: the caller ends
 * the tunnel, so a split HelloRetryRequest never lets a second ClientHello
 * through unread.
 */
#define EGRESS_TLS_HRR_MIN 38 /* handshake bytes: type, length, version, random */
_wur_ int egress_tls_is_hrr(const uint8_t *p, size_t n);

#endif
