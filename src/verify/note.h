/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VERIFY_NOTE_H
#define TKBOX_VERIFY_NOTE_H

#include "buf.h"
#include "crypto.h"
#include "macro.h"

/*
 * C2SP signed notes (c2sp.org/signed-note), tlog-checkpoint bodies
 * (c2sp.org/tlog-checkpoint) and tlog-cosignature/v1 lines, as Tracekit
 * format v2 uses them (docs/format-v2.md section 6).
 *
 *   note     = text "\n" 1*sigline
 *   text     = 1*( line "\n" )            (every line non-empty, no NUL/CR)
 *   sigline  = "\u2014 " name " " base64(key_id(4) || sig) "\n"
 *   vkey     = name "+" hex8(key_id) "+" base64(type(1) || pub(32))
 *   key_id   = SHA-256(name || 0x0A || type || pub)[0..4]
 *
 *   type 0x01 (NOTE_SIG_ED25519): sig = Ed25519(text)
 *   type 0x04 (NOTE_SIG_COSIGNATURE): sig = time(u64 BE) || Ed25519("cosignature/v1\ntime <time>\n" || text)
 *
 * API contract
 *   - Pure: no I/O, no logging, no globals. 0 / -errno.
 *   - Names: 1..NOTE_MAX_NAME bytes, no '+', no whitespace, no control
 *     bytes (-EINVAL when encoding, -EBADMSG when parsing).
 *   - Base64 is standard with padding and must be canonical (crypto.h).
 *   - note_open is strict: at most NOTE_MAX_BYTES and NOTE_MAX_SIGS signature
 *     lines (-E2BIG), exact structure (-EBADMSG). A signature line matches a
 *     pinned key when name AND key id are equal; lines of unpinned keys (and
 *     unknown types) are ignored and counted in n_unknown. A pinned key whose
 *     signature does not verify, or a pinned key that signs twice, rejects
 *     the note with -EKEYREJECTED; a note no pinned key signed gives -ENOKEY.
 *     Which pinned keys verified is reported per key index in
 *     ret->verified[] (and the cosignature time for type 0x04). At most
 *     NOTE_MAX_KEYS pinned keys (-E2BIG).
 *   - checkpoint_open = note_open + checkpoint_parse + "a pinned type-0x01 key
 *     whose name equals the origin verified" (else -EKEYREJECTED).
 *   - Outputs are written only on success; release them with the matching
 *     *_release (which accepts a zeroed struct).
 */

#define NOTE_MAX_BYTES ((size_t)1 << 20)
#define NOTE_MAX_SIGS 64
#define NOTE_MAX_KEYS 64
#define NOTE_MAX_NAME 255
#define NOTE_KEY_ID_LEN 4
/* Extension lines a checkpoint may carry after the root (tlog-checkpoint allows any number; we cap). */
#define CHECKPOINT_MAX_EXTENSIONS 16

enum note_sig_type {
	NOTE_SIG_ED25519 = 0x01,
	NOTE_SIG_COSIGNATURE = 0x04,
};

struct note_vkey {
	char *name;
	uint8_t type; /* enum note_sig_type */
	uint8_t key_id[NOTE_KEY_ID_LEN];
	uint8_t pub[ED25519_PUB_LEN];
};

/* Parse a vkey string (n bytes, no NUL needed). Types other than 0x01/0x04 give -EPROTONOSUPPORT. */
_wur_ int note_vkey_parse(const char *s, size_t n, struct note_vkey *ret);
void note_vkey_release(struct note_vkey *k);
/* Encode name+hex8+base64(type||pub) as a new string. */
_wur_ int note_vkey_encode(const char *name, uint8_t type, const uint8_t pub[ED25519_PUB_LEN], char **ret);
_wur_ int note_key_id(const char *name, uint8_t type, const uint8_t pub[ED25519_PUB_LEN], uint8_t ret[NOTE_KEY_ID_LEN]);

/*
 * Append one signature line for text (text_len bytes, must end in '\n') to
 * out: type NOTE_SIG_ED25519 (timestamp ignored) or NOTE_SIG_COSIGNATURE.
 */
_wur_ int note_append_signature(const char *text, size_t text_len, const char *name, uint8_t type,
				const uint8_t priv[ED25519_PRIV_LEN], uint64_t timestamp, struct buf *out);
/* Convenience: a complete note "text\n— name sig\n" signed by one Ed25519 (0x01) key, NUL-terminated. */
_wur_ int note_sign(const char *text, size_t text_len, const char *name, const uint8_t priv[ED25519_PRIV_LEN],
		    char **ret_note);

struct note_opened {
	char *text; /* NUL-terminated copy of the signed text, ending in '\n' */
	size_t text_len;
	size_t n_sigs; /* signature lines */
	size_t n_unknown; /* lines of keys not pinned (ignored) */
	bool verified[NOTE_MAX_KEYS];
	uint64_t timestamp[NOTE_MAX_KEYS]; /* cosignature time, type 0x04 only */
};

_wur_ int note_open(const void *p, size_t n, const struct note_vkey *keys, size_t n_keys, struct note_opened *ret);
void note_opened_release(struct note_opened *o);

struct checkpoint {
	char *origin;
	uint64_t size;
	uint8_t root[SHA256_LEN];
	size_t n_extensions;
	char *extensions[CHECKPOINT_MAX_EXTENSIONS];
};

/*
 * Parse a checkpoint body ("origin\nsize\nbase64(root)\n" then optional
 * non-empty extension lines). Size is decimal without leading zeros (except
 * "0"), at most 2^63-1; the root decodes to exactly 32 bytes.
 */
_wur_ int checkpoint_parse(const char *text, size_t n, struct checkpoint *ret);
/* Encode a checkpoint body without extensions (NUL-terminated). */
_wur_ int checkpoint_format(const char *origin, uint64_t size, const uint8_t root[SHA256_LEN], char **ret_text);
void checkpoint_release(struct checkpoint *c);

_wur_ int checkpoint_open(const void *p, size_t n, const struct note_vkey *keys, size_t n_keys,
			  struct checkpoint *ret_cp, struct note_opened *ret_opened);

#endif
