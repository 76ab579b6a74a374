/* SPDX-License-Identifier: Apache-2.0 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "hex.h"
#include "verify/note.h"

/* U+2014 EM DASH followed by a space: the prefix of every signature line. */
static const char SIG_PREFIX[] = "\xe2\x80\x94 ";
#define SIG_PREFIX_LEN (sizeof(SIG_PREFIX) - 1)
/* Longest base64 we decode from a signature line: a hybrid SLH-DSA line is ~10 KiB, a note at most 1 MiB. */
#define NOTE_MAX_SIG_BYTES ((size_t)64 << 10)

static bool name_ok(const char *s, size_t n)
{
	if (n == 0 || n > NOTE_MAX_NAME) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		/* No whitespace, controls or '+' (the vkey separator); UTF-8 bytes >= 0x80 pass. */
		if (c <= 0x20 || c == 0x7f || c == '+') {
			return false;
		}
	}
	return true;
}

int note_key_id(const char *name, uint8_t type, const uint8_t pub[ED25519_PUB_LEN], uint8_t ret[NOTE_KEY_ID_LEN])
{
	struct sha256_ctx *c = NULL;
	uint8_t sep = 0x0a, h[SHA256_LEN];
	size_t n = name ? strlen(name) : 0;
	int r;

	if (!name_ok(name, n)) {
		return -EINVAL;
	}
	r = sha256_new(&c);
	if (r < 0) {
		return r;
	}
	r = sha256_update(c, name, n);
	if (r >= 0) {
		r = sha256_update(c, &sep, 1);
	}
	if (r >= 0) {
		r = sha256_update(c, &type, 1);
	}
	if (r >= 0) {
		r = sha256_update(c, pub, ED25519_PUB_LEN);
	}
	if (r >= 0) {
		r = sha256_final(c, h);
	}
	sha256_free(c);
	if (r < 0) {
		return r;
	}
	memcpy(ret, h, NOTE_KEY_ID_LEN);
	return 0;
}

/* A key ID is lowercase hex only: the one canonical spelling of the key. */
static int hex_nibble(char c)
{
	return c >= 'A' && c <= 'F' ? -1 : hex_digit_value(c);
}

int note_vkey_parse(const char *s, size_t n, struct note_vkey *ret)
{
	struct note_vkey k = { 0 };
	struct buf raw = { 0 };
	const char *p1, *p2;
	size_t name_len;
	uint8_t id[NOTE_KEY_ID_LEN];
	int r;

	if (!s || n == 0 || n > NOTE_MAX_NAME + 80) {
		return n == 0 || !s ? -EBADMSG : -E2BIG;
	}
	if (memchr(s, '\0', n)) {
		return -EBADMSG;
	}
	p1 = memchr(s, '+', n);
	if (!p1) {
		return -EBADMSG;
	}
	name_len = (size_t)(p1 - s);
	if (!name_ok(s, name_len)) {
		return -EBADMSG;
	}
	p2 = p1 + 1;
	if ((size_t)(s + n - p2) < NOTE_KEY_ID_LEN * 2 + 1 || p2[NOTE_KEY_ID_LEN * 2] != '+') {
		return -EBADMSG;
	}
	for (size_t i = 0; i < NOTE_KEY_ID_LEN; i++) {
		int hi = hex_nibble(p2[2 * i]), lo = hex_nibble(p2[2 * i + 1]);

		if (hi < 0 || lo < 0) {
			return -EBADMSG;
		}
		id[i] = (uint8_t)(hi << 4 | lo);
	}
	p2 += NOTE_KEY_ID_LEN * 2 + 1;
	r = buf_init(&raw, 64, 0);
	if (r < 0) {
		return r;
	}
	r = b64_decode(p2, (size_t)(s + n - p2), B64_STD, &raw);
	if (r < 0 || buf_len(&raw) != 1 + ED25519_PUB_LEN) {
		buf_release(&raw);
		return r == -ENOMEM ? r : -EBADMSG;
	}
	k.type = buf_ptr(&raw)[0];
	memcpy(k.pub, buf_ptr(&raw) + 1, ED25519_PUB_LEN);
	buf_release(&raw);
	if (k.type != NOTE_SIG_ED25519 && k.type != NOTE_SIG_COSIGNATURE) {
		return -EPROTONOSUPPORT;
	}
	k.name = strndup(s, name_len);
	if (!k.name) {
		return -ENOMEM;
	}
	r = note_key_id(k.name, k.type, k.pub, k.key_id);
	if (r < 0 || memcmp(k.key_id, id, NOTE_KEY_ID_LEN) != 0) {
		free(k.name);
		return r == -ENOMEM ? r : -EBADMSG;
	}
	*ret = k;
	return 0;
}

void note_vkey_release(struct note_vkey *k)
{
	if (!k) {
		return;
	}
	free(k->name);
	*k = (struct note_vkey){ 0 };
}

int note_vkey_encode(const char *name, uint8_t type, const uint8_t pub[ED25519_PUB_LEN], char **ret)
{
	uint8_t id[NOTE_KEY_ID_LEN], raw[1 + ED25519_PUB_LEN];
	struct buf out = { 0 };
	char *s;
	int r;

	r = note_key_id(name, type, pub, id);
	if (r < 0) {
		return r;
	}
	raw[0] = type;
	memcpy(raw + 1, pub, ED25519_PUB_LEN);
	r = buf_init(&out, NOTE_MAX_NAME + 128, 0);
	if (r < 0) {
		return r;
	}
	r = buf_putf(&out, "%s+%02x%02x%02x%02x+", name, id[0], id[1], id[2], id[3]);
	if (r >= 0) {
		r = b64_encode(raw, sizeof(raw), B64_STD, &out);
	}
	if (r >= 0) {
		r = buf_dup_cstring(&out, &s);
	}
	buf_release(&out);
	if (r < 0) {
		return r;
	}
	*ret = s;
	return 0;
}

/* The bytes a key of this type signs: the text itself, or the cosignature/v1 message. */
static int signed_message(const char *text, size_t text_len, uint8_t type, uint64_t timestamp, struct buf *out)
{
	switch (type) {
	case NOTE_SIG_ED25519:
		return buf_put(out, text, text_len);
	case NOTE_SIG_COSIGNATURE: {
		int r = buf_putf(out, "cosignature/v1\ntime %" PRIu64 "\n", timestamp);

		return r < 0 ? r : buf_put(out, text, text_len);
	}
	default:
		return -EPROTONOSUPPORT;
	}
}

static bool text_ok(const char *text, size_t n)
{
	/* Non-empty, ends in '\n', no empty line, no NUL or other control byte but '\n'. */
	if (n == 0 || text[n - 1] != '\n') {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)text[i];

		if (c == '\n') {
			if (i == 0 || text[i - 1] == '\n') {
				return false;
			}
		} else if (c < 0x20 || c == 0x7f) {
			return false;
		}
	}
	return true;
}

int note_append_signature(const char *text, size_t text_len, const char *name, uint8_t type,
			  const uint8_t priv[ED25519_PRIV_LEN], uint64_t timestamp, struct buf *out)
{
	uint8_t pub[ED25519_PUB_LEN], sig[ED25519_SIG_LEN], id[NOTE_KEY_ID_LEN];
	struct buf msg = { 0 }, blob = { 0 };
	size_t start_len = out->len, cap;
	int r;

	if (!text_ok(text, text_len) || text_len > NOTE_MAX_BYTES) {
		return -EINVAL;
	}
	if (type != NOTE_SIG_ED25519 && type != NOTE_SIG_COSIGNATURE) {
		return -EPROTONOSUPPORT;
	}
	r = ed25519_public_from_private(priv, pub);
	if (r < 0) {
		return r;
	}
	r = note_key_id(name, type, pub, id);
	if (r < 0) {
		return r;
	}
	r = size_add(text_len, 64, &cap);
	if (r < 0) {
		return r;
	}
	r = buf_init(&msg, cap, 0);
	if (r < 0) {
		return r;
	}
	r = signed_message(text, text_len, type, timestamp, &msg);
	if (r >= 0) {
		r = ed25519_sign(priv, buf_ptr(&msg), buf_len(&msg), sig);
	}
	buf_release(&msg);
	if (r < 0) {
		return r;
	}
	r = buf_init(&blob, 128, 0);
	if (r < 0) {
		return r;
	}
	r = buf_put(&blob, id, sizeof(id));
	if (r >= 0 && type == NOTE_SIG_COSIGNATURE) {
		r = buf_put_u64(&blob, timestamp);
	}
	if (r >= 0) {
		r = buf_put(&blob, sig, sizeof(sig));
	}
	if (r >= 0) {
		r = buf_put(out, SIG_PREFIX, SIG_PREFIX_LEN);
	}
	if (r >= 0) {
		r = buf_putf(out, "%s ", name);
	}
	if (r >= 0) {
		r = b64_encode(buf_ptr(&blob), buf_len(&blob), B64_STD, out);
	}
	if (r >= 0) {
		r = buf_put_u8(out, '\n');
	}
	buf_release(&blob);
	if (r < 0) {
		/* All-or-nothing: drop a partial line. */
		out->len = start_len;
		return r;
	}
	return 0;
}

int note_sign(const char *text, size_t text_len, const char *name, const uint8_t priv[ED25519_PRIV_LEN],
	      char **ret_note)
{
	struct buf out = { 0 };
	size_t cap;
	char *s;
	int r;

	r = size_add(text_len, NOTE_MAX_NAME + 256, &cap);
	if (r < 0) {
		return r;
	}
	r = buf_init(&out, cap, 0);
	if (r < 0) {
		return r;
	}
	r = buf_put(&out, text, text_len);
	if (r >= 0) {
		r = buf_put_u8(&out, '\n');
	}
	if (r >= 0) {
		r = note_append_signature(text, text_len, name, NOTE_SIG_ED25519, priv, 0, &out);
	}
	if (r >= 0) {
		r = buf_dup_cstring(&out, &s);
	}
	buf_release(&out);
	if (r < 0) {
		return r;
	}
	*ret_note = s;
	return 0;
}

void note_opened_release(struct note_opened *o)
{
	if (!o) {
		return;
	}
	free(o->text);
	*o = (struct note_opened){ 0 };
}

/* Check one signature line against the pinned keys; updates o. */
static int open_line(const char *line, size_t n, const char *text, size_t text_len, const struct note_vkey *keys,
		     size_t n_keys, struct note_opened *o)
{
	const char *name, *sp, *b64;
	size_t name_len;
	struct buf blob = { 0 }, msg = { 0 };
	const uint8_t *bp;
	int r;

	if (n < SIG_PREFIX_LEN || memcmp(line, SIG_PREFIX, SIG_PREFIX_LEN) != 0) {
		return -EBADMSG;
	}
	name = line + SIG_PREFIX_LEN;
	sp = memchr(name, ' ', (size_t)(line + n - name));
	if (!sp) {
		return -EBADMSG;
	}
	name_len = (size_t)(sp - name);
	if (!name_ok(name, name_len)) {
		return -EBADMSG;
	}
	b64 = sp + 1;
	r = buf_init(&blob, NOTE_MAX_SIG_BYTES, 0);
	if (r < 0) {
		return r;
	}
	r = b64_decode(b64, (size_t)(line + n - b64), B64_STD, &blob);
	if (r < 0 || buf_len(&blob) < NOTE_KEY_ID_LEN + 1) {
		buf_release(&blob);
		return r == -ENOMEM ? r : (r == -E2BIG ? -E2BIG : -EBADMSG);
	}
	bp = buf_ptr(&blob);
	for (size_t i = 0; i < n_keys; i++) {
		const struct note_vkey *k = &keys[i];
		uint64_t ts = 0;
		const uint8_t *sig;
		size_t want;

		if (strlen(k->name) != name_len || memcmp(k->name, name, name_len) != 0 ||
		    memcmp(k->key_id, bp, NOTE_KEY_ID_LEN) != 0) {
			continue;
		}
		if (o->verified[i]) {
			/* One key signing twice: a note is not a place for a second opinion from the same key. */
			buf_release(&blob);
			return -EKEYREJECTED;
		}
		want = NOTE_KEY_ID_LEN + ED25519_SIG_LEN + (k->type == NOTE_SIG_COSIGNATURE ? 8 : 0);
		if (buf_len(&blob) != want) {
			buf_release(&blob);
			return -EKEYREJECTED;
		}
		sig = bp + NOTE_KEY_ID_LEN;
		if (k->type == NOTE_SIG_COSIGNATURE) {
			for (size_t j = 0; j < 8; j++) {
				ts = ts << 8 | sig[j];
			}
			sig += 8;
		}
		r = buf_init(&msg, text_len + 64, 0);
		if (r >= 0) {
			r = signed_message(text, text_len, k->type, ts, &msg);
		}
		if (r >= 0) {
			r = ed25519_verify(k->pub, buf_ptr(&msg), buf_len(&msg), sig);
			if (r < 0 && r != -ENOMEM) {
				r = -EKEYREJECTED;
			}
		}
		buf_release(&msg);
		buf_release(&blob);
		if (r < 0) {
			return r;
		}
		o->verified[i] = true;
		o->timestamp[i] = ts;
		return 0;
	}
	buf_release(&blob);
	o->n_unknown++;
	return 0;
}

int note_open(const void *p, size_t n, const struct note_vkey *keys, size_t n_keys, struct note_opened *ret)
{
	struct note_opened o = { 0 };
	const char *s = p, *sep = NULL, *line, *end;
	size_t text_len;
	bool any = false;
	int r;

	if (n > NOTE_MAX_BYTES || n_keys > NOTE_MAX_KEYS) {
		return -E2BIG;
	}
	if (!p || n < 2 || s[n - 1] != '\n') {
		return -EBADMSG;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c != '\n' && (c < 0x20 || c == 0x7f)) {
			return -EBADMSG;
		}
		if (!sep && c == '\n' && i + 1 < n && s[i + 1] == '\n') {
			sep = s + i;
		}
	}
	if (!sep) {
		return -EBADMSG;
	}
	text_len = (size_t)(sep - s) + 1;
	if (!text_ok(s, text_len)) {
		return -EBADMSG;
	}
	line = sep + 2;
	end = s + n;
	if (line >= end) {
		return -EBADMSG;
	}
	while (line < end) {
		const char *nl = memchr(line, '\n', (size_t)(end - line));

		/* Every line ends in '\n' (checked above), and no signature line is empty. */
		if (!nl || nl == line) {
			return -EBADMSG;
		}
		if (o.n_sigs >= NOTE_MAX_SIGS) {
			return -E2BIG;
		}
		o.n_sigs++;
		r = open_line(line, (size_t)(nl - line), s, text_len, keys, n_keys, &o);
		if (r < 0) {
			return r;
		}
		line = nl + 1;
	}
	for (size_t i = 0; i < n_keys; i++) {
		any = any || o.verified[i];
	}
	if (!any) {
		return -ENOKEY;
	}
	o.text = strndup(s, text_len);
	if (!o.text) {
		return -ENOMEM;
	}
	o.text_len = text_len;
	*ret = o;
	return 0;
}

void checkpoint_release(struct checkpoint *c)
{
	if (!c) {
		return;
	}
	free(c->origin);
	for (size_t i = 0; i < c->n_extensions; i++) {
		free(c->extensions[i]);
	}
	*c = (struct checkpoint){ 0 };
}

static int parse_size(const char *s, size_t n, uint64_t *ret)
{
	uint64_t v = 0;

	if (n == 0 || n > 19 || (n > 1 && s[0] == '0')) {
		return -EBADMSG;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9') {
			return -EBADMSG;
		}
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > (uint64_t)INT64_MAX) {
		return -EBADMSG;
	}
	*ret = v;
	return 0;
}

int checkpoint_parse(const char *text, size_t n, struct checkpoint *ret)
{
	struct checkpoint c = { 0 };
	const char *line = text, *end = text + n, *nl;
	struct buf root = { 0 };
	unsigned idx = 0;
	int r = 0;

	if (n > NOTE_MAX_BYTES) {
		return -E2BIG;
	}
	if (!text || !text_ok(text, n)) {
		return -EBADMSG;
	}
	while (line < end) {
		size_t len;

		nl = memchr(line, '\n', (size_t)(end - line));
		len = (size_t)(nl - line);
		switch (idx) {
		case 0:
			c.origin = strndup(line, len);
			if (!c.origin) {
				r = -ENOMEM;
			}
			break;
		case 1:
			r = parse_size(line, len, &c.size);
			break;
		case 2:
			/* 32 bytes in canonical padded base64 are exactly 44 characters. */
			if (len != 44) {
				r = -EBADMSG;
				break;
			}
			r = buf_init(&root, 64, 0);
			if (r >= 0) {
				r = b64_decode(line, len, B64_STD, &root);
			}
			if (r >= 0 && buf_len(&root) != SHA256_LEN) {
				r = -EBADMSG;
			}
			if (r >= 0) {
				memcpy(c.root, buf_ptr(&root), SHA256_LEN);
			} else if (r != -ENOMEM) {
				r = -EBADMSG;
			}
			buf_release(&root);
			break;
		default:
			if (c.n_extensions >= CHECKPOINT_MAX_EXTENSIONS) {
				r = -E2BIG;
				break;
			}
			c.extensions[c.n_extensions] = strndup(line, len);
			if (!c.extensions[c.n_extensions]) {
				r = -ENOMEM;
				break;
			}
			c.n_extensions++;
			break;
		}
		if (r < 0) {
			checkpoint_release(&c);
			return r;
		}
		idx++;
		line = nl + 1;
	}
	if (idx < 3) {
		checkpoint_release(&c);
		return -EBADMSG;
	}
	*ret = c;
	return 0;
}

int checkpoint_format(const char *origin, uint64_t size, const uint8_t root[SHA256_LEN], char **ret_text)
{
	struct buf out = { 0 };
	char *s;
	int r;

	if (!origin || !*origin || strchr(origin, '\n') || strlen(origin) > NOTE_MAX_NAME * 4 ||
	    size > (uint64_t)INT64_MAX) {
		return -EINVAL;
	}
	for (const char *q = origin; *q; q++) {
		if ((unsigned char)*q < 0x20 || *q == 0x7f) {
			return -EINVAL;
		}
	}
	r = buf_init(&out, 4096, 0);
	if (r < 0) {
		return r;
	}
	r = buf_putf(&out, "%s\n%" PRIu64 "\n", origin, size);
	if (r >= 0) {
		r = b64_encode(root, SHA256_LEN, B64_STD, &out);
	}
	if (r >= 0) {
		r = buf_put_u8(&out, '\n');
	}
	if (r >= 0) {
		r = buf_dup_cstring(&out, &s);
	}
	buf_release(&out);
	if (r < 0) {
		return r;
	}
	*ret_text = s;
	return 0;
}

int checkpoint_open(const void *p, size_t n, const struct note_vkey *keys, size_t n_keys, struct checkpoint *ret_cp,
		    struct note_opened *ret_opened)
{
	struct note_opened o = { 0 };
	struct checkpoint c = { 0 };
	bool log_signed = false;
	int r;

	r = note_open(p, n, keys, n_keys, &o);
	if (r < 0) {
		return r;
	}
	r = checkpoint_parse(o.text, o.text_len, &c);
	if (r < 0) {
		note_opened_release(&o);
		return r;
	}
	for (size_t i = 0; i < n_keys; i++) {
		if (o.verified[i] && keys[i].type == NOTE_SIG_ED25519 && strcmp(keys[i].name, c.origin) == 0) {
			log_signed = true;
		}
	}
	if (!log_signed) {
		checkpoint_release(&c);
		note_opened_release(&o);
		return -EKEYREJECTED;
	}
	*ret_cp = c;
	if (ret_opened) {
		*ret_opened = o;
	} else {
		note_opened_release(&o);
	}
	return 0;
}
