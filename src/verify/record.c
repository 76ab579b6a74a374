/* SPDX-License-Identifier: Apache-2.0 */
#include <inttypes.h>
#include <string.h>

#include "banned.h"
#include "json.h"
#include "verify/record.h"

/* DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410): SEQUENCE { SEQUENCE { OID 1.3.101.112 } BIT STRING }. */
static const uint8_t SPKI_PREFIX[12] = { 0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00 };
static const char HASH_PREFIX[] = "sha256:";
#define HASH_PREFIX_LEN (sizeof(HASH_PREFIX) - 1)

void record_spki(const uint8_t pub[ED25519_PUB_LEN], uint8_t ret[RECORD_SPKI_LEN])
{
	memcpy(ret, SPKI_PREFIX, sizeof(SPKI_PREFIX));
	memcpy(ret + sizeof(SPKI_PREFIX), pub, ED25519_PUB_LEN);
}

int record_spki_b64(const uint8_t pub[ED25519_PUB_LEN], char **ret)
{
	uint8_t spki[RECORD_SPKI_LEN];
	struct buf out = { 0 };
	char *s;
	int r;

	record_spki(pub, spki);
	r = buf_init(&out, 128, 0);
	if (r < 0) {
		return r;
	}
	r = b64_encode(spki, sizeof(spki), B64_STD, &out);
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

int record_spki_b64_decode(const char *s, size_t n, uint8_t ret_pub[ED25519_PUB_LEN])
{
	struct buf raw = { 0 };
	int r;

	if (!s || n > 128) {
		return -EBADMSG;
	}
	r = buf_init(&raw, 128, 0);
	if (r < 0) {
		return r;
	}
	r = b64_decode(s, n, B64_STD, &raw);
	if (r < 0 || buf_len(&raw) != RECORD_SPKI_LEN || memcmp(buf_ptr(&raw), SPKI_PREFIX, sizeof(SPKI_PREFIX)) != 0) {
		buf_release(&raw);
		return r == -ENOMEM ? r : -EBADMSG;
	}
	memcpy(ret_pub, buf_ptr(&raw) + sizeof(SPKI_PREFIX), ED25519_PUB_LEN);
	buf_release(&raw);
	return 0;
}

void record_hash_format(const uint8_t h[SHA256_LEN], char ret[RECORD_HASH_STRLEN + 1])
{
	static const char hexd[] = "0123456789abcdef";

	memcpy(ret, HASH_PREFIX, HASH_PREFIX_LEN);
	for (size_t i = 0; i < SHA256_LEN; i++) {
		ret[HASH_PREFIX_LEN + 2 * i] = hexd[h[i] >> 4];
		ret[HASH_PREFIX_LEN + 2 * i + 1] = hexd[h[i] & 0xf];
	}
	ret[RECORD_HASH_STRLEN] = '\0';
}

int record_hash_parse(const char *s, uint8_t ret[SHA256_LEN])
{
	uint8_t h[SHA256_LEN];

	if (!s || strlen(s) != RECORD_HASH_STRLEN || memcmp(s, HASH_PREFIX, HASH_PREFIX_LEN) != 0) {
		return -EBADMSG;
	}
	for (size_t i = 0; i < SHA256_LEN; i++) {
		unsigned v = 0;

		for (size_t j = 0; j < 2; j++) {
			char c = s[HASH_PREFIX_LEN + 2 * i + j];

			if (c >= '0' && c <= '9') {
				v = v << 4 | (unsigned)(c - '0');
			} else if (c >= 'a' && c <= 'f') {
				v = v << 4 | (unsigned)(c - 'a' + 10);
			} else {
				return -EBADMSG;
			}
		}
		h[i] = (uint8_t)v;
	}
	memcpy(ret, h, SHA256_LEN);
	return 0;
}

int record_kid(const uint8_t pub[ED25519_PUB_LEN], char ret[RECORD_HASH_STRLEN + 1])
{
	uint8_t spki[RECORD_SPKI_LEN], h[SHA256_LEN];

	record_spki(pub, spki);
	if (sha256(spki, sizeof(spki), h) < 0) {
		return -EIO;
	}
	record_hash_format(h, ret);
	return 0;
}

int record_event_jcs(const json_t *event, struct buf *out, uint8_t ret[SHA256_LEN])
{
	int r;

	if (!json_is_object(event)) {
		return -EINVAL;
	}
	buf_reset(out);
	r = json_write_jcs(event, out);
	if (r >= 0) {
		r = sha256(buf_ptr(out), buf_len(out), ret) < 0 ? -EIO : 0;
	}
	return r;
}

int record_event_hash(const json_t *event, uint8_t ret[SHA256_LEN])
{
	struct buf jcs = { 0 };
	int r = buf_init(&jcs, RECORD_MAX_EVENT_JCS, 0);

	if (r >= 0) {
		r = record_event_jcs(event, &jcs, ret);
	}
	buf_release(&jcs);
	return r;
}

/* The position fields every v2 event carries, typed. */
struct position {
	const char *log_id, *tenant, *run_id, *prev_hash, *run_prev_hash;
	int64_t seq, run_seq;
};

static int get_position(const json_t *event, struct position *ret)
{
	struct position p;

	if (!json_is_object(event) || json_get_string(event, "log_id", &p.log_id) < 0 ||
	    json_get_string(event, "tenant", &p.tenant) < 0 || json_get_string(event, "run_id", &p.run_id) < 0 ||
	    json_get_string(event, "prev_hash", &p.prev_hash) < 0 ||
	    json_get_string(event, "run_prev_hash", &p.run_prev_hash) < 0 || json_get_int(event, "seq", &p.seq) < 0 ||
	    json_get_int(event, "run_seq", &p.run_seq) < 0) {
		return -EBADMSG;
	}
	if (p.seq < 0 || p.seq > JSON_MAX_SAFE_INT || p.run_seq < 0 || p.run_seq > JSON_MAX_SAFE_INT) {
		return -EBADMSG;
	}
	*ret = p;
	return 0;
}

/* "key": then the string value, JCS. */
static int put_member(struct buf *out, const char *key, const char *v)
{
	int r = buf_putf(out, "\"%s\":", key);

	return r < 0 ? r : json_write_jcs_string(v, strlen(v), out);
}

/*
 * The signature message: the JCS object {alg, hash, kid, log_id, prev_hash, run_id, run_prev_hash, run_seq, seq, t,
 * tenant} (keys in JCS order, the integers in [0, 2^53) so plain decimals), written directly rather than built as a
 * JSON tree and serialised; the vectors' messages pin its bytes (tests/unit/test-record.c).
 */
int record_sigmsg(const json_t *event, const char *kid, const char *hash, struct buf *out)
{
	struct position p;
	int r;

	r = get_position(event, &p);
	if (r < 0) {
		return -EINVAL;
	}
	r = buf_putf(out, "{\"alg\":\"ed25519\",");
	if (r >= 0) {
		r = put_member(out, "hash", hash);
	}
	if (r >= 0 && (r = buf_put_u8(out, ',')) >= 0) {
		r = put_member(out, "kid", kid);
	}
	if (r >= 0 && (r = buf_put_u8(out, ',')) >= 0) {
		r = put_member(out, "log_id", p.log_id);
	}
	if (r >= 0 && (r = buf_put_u8(out, ',')) >= 0) {
		r = put_member(out, "prev_hash", p.prev_hash);
	}
	if (r >= 0 && (r = buf_put_u8(out, ',')) >= 0) {
		r = put_member(out, "run_id", p.run_id);
	}
	if (r >= 0 && (r = buf_put_u8(out, ',')) >= 0) {
		r = put_member(out, "run_prev_hash", p.run_prev_hash);
	}
	if (r >= 0) {
		r = buf_putf(out, ",\"run_seq\":%" PRId64 ",\"seq\":%" PRId64 ",", p.run_seq, p.seq);
	}
	if (r >= 0) {
		r = put_member(out, "t", RECORD_SIG_DOMAIN);
	}
	if (r >= 0 && (r = buf_put_u8(out, ',')) >= 0) {
		r = put_member(out, "tenant", p.tenant);
	}
	if (r >= 0) {
		r = buf_put_u8(out, '}');
	}
	return r;
}

/*
 * The record line, JCS: its keys sorted (alg, event, hash, kid, sig, v), the event's own JCS bytes as its value (JCS
 * of an object nested in another is the object's JCS), and the other values strings that need no escaping (hash and
 * kid are "sha256:<hex>", sig standard base64). Concatenated, not serialised again; a unit test holds it equal to
 * json_jcs_string of the same object.
 */
static int record_line(const char *ev_jcs, size_t ev_len, const char *hash_str, const char *kid, const char *sig64,
		       char **ret)
{
	struct buf line = { 0 };
	int r = buf_init(&line, RECORD_MAX_LINE, 0);

	if (r >= 0) {
		r = buf_putf(&line, "{\"alg\":\"ed25519\",\"event\":");
	}
	if (r >= 0) {
		r = buf_put(&line, ev_jcs, ev_len);
	}
	if (r >= 0) {
		r = buf_putf(&line, ",\"hash\":\"%s\",\"kid\":\"%s\",\"sig\":\"%s\",\"v\":2}", hash_str, kid, sig64);
	}
	if (r >= 0) {
		r = buf_dup_cstring(&line, ret);
	}
	buf_release(&line);
	return r;
}

int record_build_jcs(const json_t *event, const char *ev_jcs, size_t ev_len, const uint8_t priv[ED25519_PRIV_LEN],
		     const uint8_t pub[ED25519_PUB_LEN], char **ret_line, uint8_t ret_hash[SHA256_LEN])
{
	char kid[RECORD_HASH_STRLEN + 1], hash_str[RECORD_HASH_STRLEN + 1];
	uint8_t h[SHA256_LEN], sig[ED25519_SIG_LEN];
	struct buf msg = { 0 }, sig64 = { 0 };
	struct position p;
	char *sig_str = NULL;
	int r;

	r = get_position(event, &p);
	if (r < 0) {
		return -EINVAL;
	}
	if (sha256(ev_jcs, ev_len, h) < 0) {
		return -EIO;
	}
	record_hash_format(h, hash_str);
	r = record_kid(pub, kid);
	if (r < 0) {
		return r;
	}
	r = buf_init(&msg, RECORD_MAX_LINE, 0);
	if (r < 0) {
		return r;
	}
	r = record_sigmsg(event, kid, hash_str, &msg);
	if (r >= 0) {
		r = ed25519_sign(priv, buf_ptr(&msg), buf_len(&msg), sig);
	}
	buf_release(&msg);
	if (r < 0) {
		return r;
	}
	r = buf_init(&sig64, 128, 0);
	if (r < 0) {
		return r;
	}
	r = b64_encode(sig, sizeof(sig), B64_STD, &sig64);
	if (r >= 0) {
		r = buf_dup_cstring(&sig64, &sig_str);
	}
	buf_release(&sig64);
	if (r >= 0) {
		r = record_line(ev_jcs, ev_len, hash_str, kid, sig_str, ret_line);
	}
	free(sig_str);
	if (r >= 0 && ret_hash) {
		memcpy(ret_hash, h, SHA256_LEN);
	}
	return r;
}

int record_build(const json_t *event, const uint8_t priv[ED25519_PRIV_LEN], const uint8_t pub[ED25519_PUB_LEN],
		 char **ret_line, uint8_t ret_hash[SHA256_LEN])
{
	struct buf jcs = { 0 };
	struct position p;
	int r;

	if (get_position(event, &p) < 0) {
		return -EINVAL;
	}
	r = buf_init(&jcs, RECORD_MAX_EVENT_JCS, 0);
	if (r >= 0) {
		r = json_write_jcs(event, &jcs);
	}
	if (r >= 0) {
		r = record_build_jcs(event, (const char *)buf_ptr(&jcs), buf_len(&jcs), priv, pub, ret_line, ret_hash);
	}
	buf_release(&jcs);
	return r;
}

void record_release(struct record *r)
{
	if (!r) {
		return;
	}
	if (r->event) {
		json_decref(r->event);
	}
	*r = (struct record){ 0 };
}

int record_parse(const void *line, size_t n, struct record *ret)
{
	static const char *const keys[] = { "v", "event", "hash", "alg", "kid", "sig", NULL };
	struct json_opts opts = { .max_bytes = RECORD_MAX_LINE, .max_depth = 0, .want_top = JSON_OBJECT };
	struct record rec = { 0 };
	struct position p;
	struct buf sig = { 0 };
	const char *hash, *alg, *kid, *sig_s;
	json_t *doc = NULL, *v, *event;
	int r;

	if (n > RECORD_MAX_LINE) {
		return -E2BIG;
	}
	r = json_parse_strict(line, n, &opts, &doc);
	if (r < 0) {
		return r == -E2BIG || r == -ENOMEM ? r : -EBADMSG;
	}
	r = -EBADMSG;
	if (json_only_keys(doc, keys) < 0 || json_object_size(doc) != 6) {
		goto out;
	}
	v = json_object_get(doc, "v");
	if (!json_is_integer(v) || json_integer_value(v) != 2) {
		goto out;
	}
	if (json_get_object(doc, "event", &event) < 0 || json_get_string(doc, "hash", &hash) < 0 ||
	    json_get_string(doc, "alg", &alg) < 0 || json_get_string(doc, "kid", &kid) < 0 ||
	    json_get_string(doc, "sig", &sig_s) < 0) {
		goto out;
	}
	if (record_hash_parse(hash, rec.hash) < 0 || record_hash_parse(kid, rec.kid) < 0) {
		goto out;
	}
	if (get_position(event, &p) < 0 || record_hash_parse(p.prev_hash, rec.prev_hash) < 0 ||
	    record_hash_parse(p.run_prev_hash, rec.run_prev_hash) < 0) {
		goto out;
	}
	r = buf_init(&sig, 128, 0);
	if (r < 0) {
		goto out;
	}
	r = b64_decode(sig_s, strlen(sig_s), B64_STD, &sig);
	if (r < 0 || buf_len(&sig) != ED25519_SIG_LEN) {
		r = r == -ENOMEM ? r : -EBADMSG;
		goto out;
	}
	memcpy(rec.sig, buf_ptr(&sig), ED25519_SIG_LEN);
	if (strcmp(alg, "ed25519") != 0) {
		r = -EPROTONOSUPPORT;
		goto out;
	}
	memcpy(rec.kid_str, kid, RECORD_HASH_STRLEN + 1);
	rec.event = json_incref(event);
	rec.log_id = p.log_id;
	rec.tenant = p.tenant;
	rec.run_id = p.run_id;
	rec.seq = p.seq;
	rec.run_seq = p.run_seq;
	if (json_get_string(event, "type", &rec.type) < 0) {
		rec.type = NULL;
	}
	*ret = rec;
	r = 0;
out:
	buf_release(&sig);
	json_decref(doc);
	return r;
}

int record_check_hash(const struct record *r)
{
	uint8_t h[SHA256_LEN];
	int e;

	e = record_event_hash(r->event, h);
	if (e < 0) {
		return e == -ENOMEM ? e : -EBADMSG;
	}
	return crypto_equal(h, r->hash, SHA256_LEN) ? 0 : -EBADMSG;
}

int record_verify_sig(const struct record *r, const uint8_t pub[ED25519_PUB_LEN])
{
	char kid[RECORD_HASH_STRLEN + 1], hash_str[RECORD_HASH_STRLEN + 1];
	struct buf msg = { 0 };
	int e;

	e = record_kid(pub, kid);
	if (e < 0) {
		return e;
	}
	if (strcmp(kid, r->kid_str) != 0) {
		return -EBADMSG;
	}
	record_hash_format(r->hash, hash_str);
	e = buf_init(&msg, RECORD_MAX_LINE, 0);
	if (e < 0) {
		return e;
	}
	e = record_sigmsg(r->event, r->kid_str, hash_str, &msg);
	if (e >= 0) {
		e = ed25519_verify(pub, buf_ptr(&msg), buf_len(&msg), r->sig);
		if (e < 0 && e != -ENOMEM) {
			e = -EBADMSG;
		}
	} else if (e != -ENOMEM) {
		e = -EBADMSG;
	}
	buf_release(&msg);
	return e;
}
