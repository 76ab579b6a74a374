/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "banned.h"
#include "buf.h"
#include "egress/clienthello.h"

#define TLS_HANDSHAKE 22
#define HS_CLIENT_HELLO 1
#define HS_SERVER_HELLO 2
#define EXT_SERVER_NAME 0x0000
#define EXT_ECH 0xfe0d
#define EXT_ECH_OUTER 0xfd00
#define EXT_ESNI 0xffce /* encrypted_server_name, draft-ietf-tls-esni-00..05 */

/*
 * Every codepoint an encrypted ClientHello or server name has used: ESNI,
 * the ECH drafts' encrypted_client_hello (06/07: 0xff02, with ech_nonce
 * 0xff03 and outer_extensions 0xff04; 08..12: 0xfe08..0xfe0c; 13 on and
 * RFC 9849: 0xfe0d) and ech_outer_extensions. A client speaking an old draft
 * hides its server name as well as a current one.
 */
static bool ext_encrypted(uint16_t type)
{
	return type == EXT_ECH || type == EXT_ECH_OUTER || type == EXT_ESNI || (type >= 0xfe08 && type <= 0xfe0c) ||
	       (type >= 0xff02 && type <= 0xff04);
}

void egress_ch_init(struct egress_ch_reader *r)
{
	r->msg_len = 0;
	r->hdr_len = 0;
	r->rec_left = 0;
	r->consumed = 0;
	r->state = 0;
	r->reason = NULL;
}

static int fail(struct egress_ch_reader *r, int err, const char *reason)
{
	r->state = err;
	r->reason = reason;
	return err;
}

/* A u8/u16-length-prefixed vector as a view. */
static int get_vec(struct buf *b, unsigned lenbytes, struct buf *ret)
{
	uint8_t l8;
	uint16_t l16;
	size_t len;
	int r;

	r = lenbytes == 1 ? buf_get_u8(b, &l8) : buf_get_u16(b, &l16);
	if (r < 0) {
		return -EBADMSG;
	}
	len = lenbytes == 1 ? l8 : l16;
	if (len > buf_len(b)) {
		return -EBADMSG;
	}
	buf_view(ret, buf_ptr(b), len);
	return buf_consume(b, len) < 0 ? -EBADMSG : 0;
}

/* server_name: exactly one host_name, a DNS name (RFC 6066: no literal, no trailing dot). */
static int parse_sni(struct egress_ch_reader *r, struct buf *ext, struct egress_ch_info *info)
{
	struct buf list, name;
	struct egress_host h;
	uint8_t type;

	if (info->has_sni || get_vec(ext, 2, &list) < 0 || buf_len(ext) != 0) {
		return fail(r, -EBADMSG, "a malformed server_name extension in the ClientHello");
	}
	while (buf_len(&list) > 0) {
		if (info->has_sni) {
			return fail(r, -EACCES, "the ClientHello names two servers (SNI must name exactly one host)");
		}
		if (buf_get_u8(&list, &type) < 0 || get_vec(&list, 2, &name) < 0) {
			return fail(r, -EBADMSG, "a malformed server_name extension in the ClientHello");
		}
		if (type != 0 || buf_len(&name) == 0 || buf_ptr(&name)[buf_len(&name) - 1] == '.' ||
		    egress_host_parse((const char *)buf_ptr(&name), buf_len(&name), &h) < 0 ||
		    h.kind != EGRESS_HOST_NAME) {
			return fail(r, -EBADMSG, "the ClientHello's server name is not a valid DNS host name");
		}
		memcpy(info->sni, h.name, sizeof(info->sni));
		info->has_sni = true;
	}
	if (!info->has_sni) {
		return fail(r, -EBADMSG, "an empty server_name extension in the ClientHello");
	}
	return 0;
}

static int parse_extensions(struct egress_ch_reader *r, struct buf *b, struct egress_ch_info *info)
{
	struct buf exts, data;
	uint16_t type;
	int e;

	if (get_vec(b, 2, &exts) < 0 || buf_len(b) != 0) {
		return fail(r, -EBADMSG, "malformed ClientHello extensions");
	}
	memset(r->seen, 0, sizeof(r->seen));
	while (buf_len(&exts) > 0) {
		if (buf_get_u16(&exts, &type) < 0 || get_vec(&exts, 2, &data) < 0) {
			return fail(r, -EBADMSG, "malformed ClientHello extensions");
		}
		if (r->seen[type / 8] & (1u << (type % 8))) {
			return fail(r, -EBADMSG, "a ClientHello extension appears twice");
		}
		r->seen[type / 8] |= (uint8_t)(1u << (type % 8));
		if (ext_encrypted(type)) {
			return fail(r, -EACCES,
				    "an encrypted ClientHello (ECH, GREASE included) hides the server name; "
				    "turn ECH off in the client");
		}
		if (type == EXT_SERVER_NAME) {
			e = parse_sni(r, &data, info);
			if (e < 0) {
				return e;
			}
		}
	}
	return 0;
}

static int parse_client_hello(struct egress_ch_reader *r, struct egress_ch_info *info)
{
	struct buf b, v;
	uint16_t version;

	buf_view(&b, r->msg + 4, r->msg_len - 4);
	if (buf_get_u16(&b, &version) < 0 || version < 0x0301 || version > 0x0303 || buf_consume(&b, 32) < 0) {
		return fail(r, -EBADMSG, "a ClientHello with a bad version or no random");
	}
	info->legacy_version = version;
	if (get_vec(&b, 1, &v) < 0 || buf_len(&v) > 32) {
		return fail(r, -EBADMSG, "a ClientHello with a malformed session id");
	}
	if (get_vec(&b, 2, &v) < 0 || buf_len(&v) < 2 || buf_len(&v) % 2 != 0) {
		return fail(r, -EBADMSG, "a ClientHello with malformed cipher suites");
	}
	if (get_vec(&b, 1, &v) < 0 || buf_len(&v) < 1) {
		return fail(r, -EBADMSG, "a ClientHello with malformed compression methods");
	}
	if (buf_len(&b) == 0) {
		return 0; /* no extensions at all: no server name */
	}
	return parse_extensions(r, &b, info);
}

/* Record header: the first one decides whether this is TLS at all. */
static int take_header(struct egress_ch_reader *r)
{
	const uint8_t *h = r->hdr;
	bool first = r->consumed == r->hdr_len;

	if (first && (h[0] != TLS_HANDSHAKE || (r->hdr_len >= 2 && h[1] != 3))) {
		return fail(r, -EPROTONOSUPPORT, "the tunnel does not start with a TLS ClientHello");
	}
	if (r->hdr_len < 5) {
		return 0;
	}
	if (h[0] != TLS_HANDSHAKE || h[1] != 3 || h[2] < 1 || h[2] > 4) {
		return fail(r, -EBADMSG, "a TLS record other than a handshake inside the ClientHello");
	}
	r->rec_left = (size_t)h[3] << 8 | h[4];
	if (r->rec_left == 0 || r->rec_left > EGRESS_TLS_RECORD_MAX) {
		return fail(r, -EBADMSG, "a TLS handshake record of length 0 or above 2^14");
	}
	return 0;
}

/* After payload bytes arrive: the message type and its length against the cap. */
static int check_message(struct egress_ch_reader *r, size_t *ret_total)
{
	size_t total;

	if (r->msg_len < 4) {
		*ret_total = 0;
		return 0;
	}
	if (r->msg[0] != HS_CLIENT_HELLO) {
		return fail(r, -EBADMSG, "the first handshake message is not a ClientHello");
	}
	total = 4 + ((size_t)r->msg[1] << 16 | (size_t)r->msg[2] << 8 | r->msg[3]);
	if (total > EGRESS_CH_MAX) {
		return fail(r, -E2BIG, "the ClientHello is larger than 64 KiB (EGRESS_CH_MAX)");
	}
	if (r->msg_len > total) {
		return fail(r, -EBADMSG, "more handshake bytes after the ClientHello in its record");
	}
	*ret_total = total;
	return 0;
}

static int finish(struct egress_ch_reader *r, size_t used, size_t *ret_used, struct egress_ch_info *ret)
{
	struct egress_ch_info info = { 0 };
	int e;

	e = parse_client_hello(r, &info);
	if (e < 0) {
		return e;
	}
	info.raw_len = r->consumed;
	*ret = info;
	*ret_used = used;
	r->state = 1;
	return 1;
}

int egress_ch_feed(struct egress_ch_reader *r, const uint8_t *p, size_t n, size_t *ret_used, struct egress_ch_info *ret,
		   const char **ret_reason)
{
	size_t i = 0, total, k;
	int e = r->state;

	if (e == 1) {
		e = -EALREADY; /* one ClientHello per reader: a second one needs a new reader */
		r->reason = "the ClientHello was already read";
	}
	while (e == 0 && i < n) {
		if (r->hdr_len < 5 && r->rec_left == 0) {
			r->hdr[r->hdr_len++] = p[i++];
			r->consumed++;
			e = take_header(r);
			continue;
		}
		k = MIN(n - i, r->rec_left);
		if (k > EGRESS_CH_MAX - r->msg_len) {
			e = fail(r, -E2BIG, "the ClientHello is larger than 64 KiB (EGRESS_CH_MAX)");
			break;
		}
		memcpy(r->msg + r->msg_len, p + i, k);
		r->msg_len += k;
		r->rec_left -= k;
		r->consumed += k;
		i += k;
		e = check_message(r, &total);
		if (e == 0 && r->rec_left == 0) {
			r->hdr_len = 0; /* the record is done */
			if (total != 0 && r->msg_len == total) {
				e = finish(r, i, ret_used, ret);
			}
		}
	}
	if (e < 0 && ret_reason) {
		*ret_reason = r->reason;
	}
	if (e == 0) {
		*ret_used = i;
	}
	return e;
}

int egress_ch_check_sni(const struct egress_ch_info *ch, const struct egress_host *h, const char **ret_reason)
{
	if (h->kind == EGRESS_HOST_ADDR) {
		if (ch->has_sni) {
			*ret_reason = "the ClientHello names a server but the tunnel was opened to an IP address";
			return -EACCES;
		}
		return 0;
	}
	if (!ch->has_sni) {
		*ret_reason = "the ClientHello names no server (SNI): it must name the CONNECT host";
		return -EACCES;
	}
	if (strcmp(ch->sni, h->name) != 0) {
		*ret_reason = "the ClientHello's server name (SNI) differs from the CONNECT host";
		return -EACCES;
	}
	return 0;
}

int egress_ch_check_retry(const struct egress_ch_info *first, const struct egress_ch_info *second,
			  const char **ret_reason)
{
	if (first->has_sni != second->has_sni || (first->has_sni && strcmp(first->sni, second->sni) != 0)) {
		*ret_reason = "the ClientHello after a HelloRetryRequest names another server than the first";
		return -EACCES;
	}
	return 0;
}

int egress_tls_is_hrr(const uint8_t *p, size_t n)
{
	/* SHA-256("HelloRetryRequest"), RFC 8446 section 4.1.3 */
	static const uint8_t hrr[32] = { 0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c,
					 0x02, 0x1e, 0x65, 0xb8, 0x91, 0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb,
					 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c };

	if (n == 0) {
		return -ENODATA;
	}
	if (p[0] != TLS_HANDSHAKE) {
		return 0; /* an alert, or not TLS: no handshake follows from this server */
	}
	if (n < 5) {
		return -ENODATA;
	}
	/* The first record must hold the ServerHello's type, length, version and random: never judged in parts. */
	if (p[1] != 3 || ((size_t)p[3] << 8 | p[4]) < EGRESS_TLS_HRR_MIN) {
		return -EBADMSG;
	}
	if (n < 6) {
		return -ENODATA;
	}
	if (p[5] != HS_SERVER_HELLO) {
		return -EBADMSG;
	}
	if (n < 5 + EGRESS_TLS_HRR_MIN) {
		return -ENODATA;
	}
	return memcmp(p + 11, hrr, sizeof(hrr)) == 0 ? 1 : 0;
}
