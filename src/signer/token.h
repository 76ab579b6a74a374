/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_SIGNER_TOKEN_H
#define TKBOX_SIGNER_TOKEN_H

#include <sys/types.h>
#include <time.h>

#include "macro.h"

/*
 * Run tokens: opaque to clients, bound to the run and to the caller's uid.
 *   token = base64url(JCS({"exp":unix,"run":run_id,"uid":uid})) "." base64url(HMAC-SHA256(key, first part))
 * A token is accepted only with the same run id, from the same uid, before exp.
 */

#define TOKEN_LIFETIME_S (24 * 3600)
#define TOKEN_MAX_LEN 1024

_wur_ int token_mint(const uint8_t key[32], const char *run_id, uid_t uid, time_t now, char **ret);
/* 0 when valid for (run_id, uid) at now; -EACCES otherwise (-ENOMEM on allocation failure). */
_wur_ int token_check(const uint8_t key[32], const char *token, const char *run_id, uid_t uid, time_t now);

#endif
