/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "crypto.h"
#include "json.h"
#include "token.h"

#include "banned.h"

int token_mint(const uint8_t key[32], const char *run_id, uid_t uid, time_t now, char **ret)
{
	_cleanup_json_ json_t *j = NULL;
	_cleanup_free_ char *payload = NULL;
	uint8_t mac[SHA256_LEN];
	struct buf b = { 0 };
	char *s;
	int r;

	j = json_pack("{s:I,s:s,s:I}", "exp", (json_int_t)(now + TOKEN_LIFETIME_S), "run", run_id, "uid",
		      (json_int_t)uid);
	if (!j) {
		return -ENOMEM;
	}
	if ((r = json_jcs_string(j, TOKEN_MAX_LEN, &payload)) < 0 || (r = buf_init(&b, TOKEN_MAX_LEN * 2, 0)) < 0) {
		return r;
	}
	if ((r = b64_encode(payload, strlen(payload), B64_URL, &b)) < 0 ||
	    (r = hmac_sha256(key, 32, buf_ptr(&b), buf_len(&b), mac)) < 0 || (r = buf_put_u8(&b, '.')) < 0 ||
	    (r = b64_encode(mac, sizeof(mac), B64_URL, &b)) < 0 || (r = buf_dup_cstring(&b, &s)) < 0) {
		buf_release(&b);
		return r;
	}
	buf_release(&b);
	*ret = s;
	return 0;
}

int token_check(const uint8_t key[32], const char *token, const char *run_id, uid_t uid, time_t now)
{
	_cleanup_json_ json_t *j = NULL;
	const char *dot, *run;
	uint8_t mac[SHA256_LEN];
	struct buf pb = { 0 }, mb = { 0 };
	int64_t exp, tuid;
	size_t n = strlen(token);
	int r = -EACCES;

	if (n == 0 || n > TOKEN_MAX_LEN || !(dot = strchr(token, '.'))) {
		return -EACCES;
	}
	if (hmac_sha256(key, 32, token, (size_t)(dot - token), mac) < 0) {
		return -ENOMEM;
	}
	if (buf_init(&mb, 64, 0) < 0 || buf_init(&pb, TOKEN_MAX_LEN, 0) < 0) {
		r = -ENOMEM;
		goto out;
	}
	if (b64_decode(dot + 1, strlen(dot + 1), B64_URL, &mb) < 0 || buf_len(&mb) != SHA256_LEN ||
	    !crypto_equal(buf_ptr(&mb), mac, SHA256_LEN)) {
		goto out;
	}
	if (b64_decode(token, (size_t)(dot - token), B64_URL, &pb) < 0 ||
	    json_parse_strict(buf_ptr(&pb), buf_len(&pb), &JSON_OPTS_DEFAULT, &j) < 0) {
		goto out;
	}
	if (json_get_int(j, "exp", &exp) < 0 || json_get_string(j, "run", &run) < 0 ||
	    json_get_int(j, "uid", &tuid) < 0) {
		goto out;
	}
	if (exp <= (int64_t)now || strcmp(run, run_id) != 0 || tuid != (int64_t)uid) {
		goto out;
	}
	r = 0;
out:
	buf_release(&mb);
	buf_release(&pb);
	return r;
}
