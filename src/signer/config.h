/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_SIGNER_CONFIG_H
#define TKBOX_SIGNER_CONFIG_H

#include <sys/types.h>

#include "crypto.h"
#include "signer/paths.h"

/*
 * The signer's state directory and configuration.
 *
 *   DIR/config.json       {"version":1,"mode":"dev"|"system","log_id","origin","tenant",
 *                          "authorize":[uid | {"uid":uid,"roles":["runtime"|"approver",...]}, ...],
 *                          "socket"?: path, "approval_ttl_s"?: 1..SIGNER_MAX_APPROVAL_TTL_S}
 *                         tenant is an id of the event schema: [A-Za-z0-9._:-]{1,128}
 *   DIR/keys/log.key      Ed25519 seed (hex) signing checkpoints (the key trust.json pins)
 *   DIR/keys/record.key   Ed25519 seed (hex) signing records (declared by the signer.epoch record)
 *   DIR/keys/args_salt.key  32 random bytes (hex): HMAC key of the per-record argument salts
 *   DIR/keys/token.key    32 random bytes (hex): HMAC key of run tokens
 *   DIR/policy.yaml       the policy (the default pack at init)
 *   DIR/trust.json        {"logs":[vkey],"algs":["ed25519"]}
 *   DIR/store.db          the SQLite record store (WAL)
 *   DIR/signer.pid        pid of a running `serve`
 */

#define SIGNER_CONFIG_MAX_BYTES ((size_t)64 << 10)
#define SIGNER_MAX_AUTHORIZE 64
#define SIGNER_KEY_FILE_MAX 256
#define SIGNER_LOG_ID_LEN 32 /* hex chars */
#define SIGNER_DEFAULT_APPROVAL_TTL_S 600
#define SIGNER_MAX_APPROVAL_TTL_S 86400

/*
 * The roles a connection can hold. A connection's first `hello` fixes its
 * role (`"role"`, runtime when absent); before it, it is a runtime connection. The role must be
 * granted to the peer's uid (SO_PEERCRED) by `authorize`: a bare uid grants
 * every role, {"uid","roles"} the listed ones.
 *   runtime   the daemon: register_run, decide, complete, observe,
 *             approval_request, close_run
 *   approver  a person: approval_list, approval_decide
 * hello, status, approval_wait, export and checkpoint_nudge take either.
 */
enum signer_role {
	SIGNER_ROLE_RUNTIME = 0,
	SIGNER_ROLE_APPROVER = 1,
	SIGNER_ROLE_MAX,
};
#define SIGNER_ROLES_ALL ((1u << SIGNER_ROLE_MAX) - 1)

const char *signer_role_name(enum signer_role r);
/* The role named s, or -EINVAL. */
_wur_ int signer_role_parse(const char *s, enum signer_role *ret);

struct signer_config {
	char *dir;
	enum signer_mode mode;
	char log_id[SIGNER_LOG_ID_LEN + 1];
	char *origin;
	char *tenant;
	char *socket_path; /* resolved */
	uid_t authorize[SIGNER_MAX_AUTHORIZE];
	unsigned authorize_roles[SIGNER_MAX_AUTHORIZE]; /* bit (1 << signer_role) per granted role */
	size_t n_authorize;
	int64_t approval_ttl_s; /* an approval not answered within this expires */
};

struct signer_keys {
	uint8_t log_priv[ED25519_PRIV_LEN];
	uint8_t log_pub[ED25519_PUB_LEN];
	uint8_t rec_priv[ED25519_PRIV_LEN];
	uint8_t rec_pub[ED25519_PUB_LEN];
	uint8_t salt_key[32];
	uint8_t token_key[32];
};

/*
 * Parse config.json bytes (pure). dir is copied into the config. The socket
 * path is taken from the file when present, else the mode's default; the
 * caller may override it afterwards.
 */
_wur_ int signer_config_parse(const char *dir, const void *p, size_t n, struct signer_config *ret, char *err,
			      size_t err_size);
void signer_config_release(struct signer_config *c);
/* Read DIR/config.json; socket override (NULL: env TKBOX_SIGNER_SOCKET, then file, then default). */
_wur_ int signer_config_load(const char *dir, const char *socket_override, struct signer_config *ret, char *err,
			     size_t err_size);
/* True when uid may talk to the signer. */
bool signer_config_authorized(const struct signer_config *c, uid_t uid);
/* The roles authorize grants uid (bits 1 << signer_role; 0 when not listed). */
unsigned signer_config_roles(const struct signer_config *c, uid_t uid);

/* Load DIR/keys/ (wiped by signer_keys_wipe). */
_wur_ int signer_keys_load(const char *dir, struct signer_keys *ret);
void signer_keys_wipe(struct signer_keys *k);

/*
 * `tkbox-signer init`: create DIR (0700) with keys, config, default policy and
 * trust.json. Refuses (-EEXIST) when DIR/config.json exists.
 */
_wur_ int signer_init_dir(const char *dir, enum signer_mode mode, const char *socket_path, char *err, size_t err_size);

/* The log key's vkey ("origin+keyid+base64") and the trust.json document for it (new strings). */
_wur_ int signer_log_vkey(const struct signer_config *c, const struct signer_keys *k, char **ret);
_wur_ int signer_trust_json(const struct signer_config *c, const struct signer_keys *k, char **ret);

#endif
