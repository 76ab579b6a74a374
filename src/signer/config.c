/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "json.h"
#include "policy.h"
#include "rpc.h"
#include "verify/note.h"

#include "banned.h"
#include "io.h"

static int path_join(const char *a, const char *b, char **ret)
{
	char *p = NULL;
	if (asprintf(&p, "%s/%s", a, b) < 0) {
		return -ENOMEM;
	}
	*ret = p;
	return 0;
}

void signer_config_release(struct signer_config *c)
{
	if (!c) {
		return;
	}
	free(c->dir);
	free(c->origin);
	free(c->tenant);
	free(c->socket_path);
	*c = (struct signer_config){ 0 };
}

static bool hex_lower(const char *s, size_t n)
{
	if (strlen(s) != n) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) {
			return false;
		}
	}
	return true;
}

const char *signer_role_name(enum signer_role r)
{
	return r == SIGNER_ROLE_APPROVER ? "approver" : "runtime";
}

int signer_role_parse(const char *s, enum signer_role *ret)
{
	for (int r = 0; r < SIGNER_ROLE_MAX; r++) {
		if (strcmp(s, signer_role_name((enum signer_role)r)) == 0) {
			*ret = (enum signer_role)r;
			return 0;
		}
	}
	return -EINVAL;
}

/* One authorize entry: a bare uid (every role) or {"uid":N,"roles":["runtime"|"approver",...]}. */
static int parse_grant(const json_t *v, uid_t *ret_uid, unsigned *ret_roles, char *err, size_t err_size)
{
	static const char *const keys[] = { "uid", "roles", NULL };
	const json_t *u = v, *roles = NULL, *x;
	unsigned bits = SIGNER_ROLES_ALL;
	json_int_t n;
	size_t i;

	if (json_is_object(v)) {
		u = json_object_get(v, "uid");
		roles = json_object_get(v, "roles");
		if (json_only_keys(v, keys) < 0 || !json_is_array(roles) || json_array_size(roles) == 0) {
			snprintf(err, err_size,
				 "config.json: an authorize object is "
				 "{\"uid\":N,\"roles\":[\"runtime\"|\"approver\",...]}");
			return -EBADMSG;
		}
		bits = 0;
		json_array_foreach(roles, i, x) {
			enum signer_role role;
			if (!json_is_string(x) || signer_role_parse(json_string_value(x), &role) < 0) {
				snprintf(err, err_size,
					 "config.json: authorize roles are \"runtime\" and \"approver\"");
				return -EBADMSG;
			}
			bits |= 1u << role;
		}
	}
	if (!json_is_integer(u) || (n = json_integer_value(u)) < 0 || n > (json_int_t)UINT32_MAX - 1) {
		snprintf(err, err_size, "config.json: authorize must list uids (or {\"uid\",\"roles\"} objects)");
		return -EBADMSG;
	}
	*ret_uid = (uid_t)n;
	*ret_roles = bits;
	return 0;
}

int signer_config_parse(const char *dir, const void *p, size_t n, struct signer_config *ret, char *err, size_t err_size)
{
	static const char *const keys[] = { "version",	 "mode",   "log_id",	     "origin", "tenant",
					    "authorize", "socket", "approval_ttl_s", NULL };
	_cleanup_json_ json_t *j = NULL;
	struct signer_config c = { 0 };
	const char *mode, *log_id, *origin, *tenant, *sock = NULL;
	json_t *auth, *v;
	int64_t version;
	size_t i;
	int r;

	r = json_parse_strict(p, n,
			      &(struct json_opts){ .max_bytes = SIGNER_CONFIG_MAX_BYTES, .want_top = JSON_OBJECT }, &j);
	if (r < 0) {
		snprintf(err, err_size, "config.json: not strict JSON");
		return r;
	}
	if (json_only_keys(j, keys) < 0 || json_get_int(j, "version", &version) < 0 || version != 1 ||
	    json_get_string(j, "mode", &mode) < 0 || json_get_string(j, "log_id", &log_id) < 0 ||
	    json_get_string(j, "origin", &origin) < 0 || json_get_string(j, "tenant", &tenant) < 0 ||
	    json_get_array(j, "authorize", &auth) < 0) {
		snprintf(err, err_size, "config.json: unknown key, missing key or wrong type (version must be 1)");
		return -EBADMSG;
	}
	r = json_get_string(j, "socket", &sock);
	if (r < 0 && r != -ENOENT) {
		snprintf(err, err_size, "config.json: socket must be a string");
		return -EBADMSG;
	}
	c.approval_ttl_s = SIGNER_DEFAULT_APPROVAL_TTL_S;
	r = json_get_int(j, "approval_ttl_s", &c.approval_ttl_s);
	if ((r < 0 && r != -ENOENT) || c.approval_ttl_s < 1 || c.approval_ttl_s > SIGNER_MAX_APPROVAL_TTL_S) {
		snprintf(err, err_size, "config.json: approval_ttl_s must be an integer 1..%d (seconds)",
			 SIGNER_MAX_APPROVAL_TTL_S);
		return -EBADMSG;
	}
	if (strcmp(mode, "dev") == 0) {
		c.mode = SIGNER_MODE_DEV;
	} else if (strcmp(mode, "system") == 0) {
		c.mode = SIGNER_MODE_SYSTEM;
	} else {
		snprintf(err, err_size, "config.json: mode must be dev or system");
		return -EBADMSG;
	}
	if (!hex_lower(log_id, SIGNER_LOG_ID_LEN) || origin[0] == '\0' || strlen(origin) > NOTE_MAX_NAME) {
		snprintf(err, err_size, "config.json: bad log_id or origin");
		return -EBADMSG;
	}
	/* The tenant is written in every record and in approval bindings, where the event schema wants an id. */
	if (!rpc_id_ok(tenant)) {
		snprintf(err, err_size,
			 "config.json: tenant must match [A-Za-z0-9._:-]{1,128} (an id of the event schema)");
		return -EBADMSG;
	}
	if (json_array_size(auth) > SIGNER_MAX_AUTHORIZE) {
		snprintf(err, err_size, "config.json: authorize has more than %d uids (SIGNER_MAX_AUTHORIZE)",
			 SIGNER_MAX_AUTHORIZE);
		return -E2BIG;
	}
	json_array_foreach(auth, i, v) {
		r = parse_grant(v, &c.authorize[c.n_authorize], &c.authorize_roles[c.n_authorize], err, err_size);
		if (r < 0) {
			return r;
		}
		c.n_authorize++;
	}
	memcpy(c.log_id, log_id, SIGNER_LOG_ID_LEN + 1);
	c.origin = strdup(origin);
	c.tenant = strdup(tenant);
	c.dir = strdup(dir);
	if (sock) {
		c.socket_path = strdup(sock);
	} else if (signer_default_socket(c.mode, &c.socket_path) < 0) {
		c.socket_path = NULL;
	}
	if (!c.origin || !c.tenant || !c.dir || !c.socket_path) {
		signer_config_release(&c);
		return -ENOMEM;
	}
	*ret = c;
	return 0;
}

int signer_config_load(const char *dir, const char *socket_override, struct signer_config *ret, char *err,
		       size_t err_size)
{
	_cleanup_free_ char *path = NULL, *data = NULL;
	struct signer_config c;
	const char *env = getenv(SIGNER_SOCKET_ENV);
	size_t len;
	int r;

	r = path_join(dir, "config.json", &path);
	if (r < 0) {
		return r;
	}
	r = io_read_file(AT_FDCWD, path, SIGNER_CONFIG_MAX_BYTES, IO_READ_NOFOLLOW, &data, &len);
	if (r < 0) {
		snprintf(err, err_size, "cannot read %s: %s (run `tkbox-signer init` first)", path, strerror(-r));
		return r;
	}
	r = signer_config_parse(dir, data, len, &c, err, err_size);
	if (r < 0) {
		return r;
	}
	if (!socket_override && env && env[0] != '\0') {
		socket_override = env;
	}
	if (socket_override) {
		char *s = strdup(socket_override);
		if (!s) {
			signer_config_release(&c);
			return -ENOMEM;
		}
		free(c.socket_path);
		c.socket_path = s;
	}
	*ret = c;
	return 0;
}

bool signer_config_authorized(const struct signer_config *c, uid_t uid)
{
	return signer_config_roles(c, uid) != 0;
}

unsigned signer_config_roles(const struct signer_config *c, uid_t uid)
{
	unsigned bits = 0;

	/* A uid listed twice holds the union of its grants. */
	for (size_t i = 0; i < c->n_authorize; i++) {
		if (c->authorize[i] == uid) {
			bits |= c->authorize_roles[i];
		}
	}
	return bits;
}

static int load_key_hex(int dirfd, const char *name, uint8_t *out, size_t n)
{
	_cleanup_free_ char *data = NULL;
	struct buf b = { 0 };
	size_t len;
	int r;

	r = io_read_file(dirfd, name, SIGNER_KEY_FILE_MAX, IO_READ_NOFOLLOW, &data, &len);
	if (r < 0) {
		return r;
	}
	while (len > 0 && (data[len - 1] == '\n')) {
		len--;
	}
	r = buf_init(&b, n, BUF_SECRET);
	if (r < 0) {
		explicit_bzero(data, len);
		return r;
	}
	r = hex_decode(data, len, &b);
	explicit_bzero(data, len);
	if (r >= 0 && buf_len(&b) != n) {
		r = -EBADMSG;
	}
	if (r >= 0) {
		memcpy(out, buf_ptr(&b), n);
	}
	buf_release(&b);
	return r;
}

int signer_keys_load(const char *dir, struct signer_keys *ret)
{
	_cleanup_close_ int dfd = -1;
	struct signer_keys k = { 0 };
	_cleanup_free_ char *kd = NULL;
	int r;

	r = path_join(dir, "keys", &kd);
	if (r < 0) {
		return r;
	}
	dfd = open(kd, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		return negative_errno();
	}
	if ((r = load_key_hex(dfd, "log.key", k.log_priv, sizeof(k.log_priv))) < 0 ||
	    (r = load_key_hex(dfd, "record.key", k.rec_priv, sizeof(k.rec_priv))) < 0 ||
	    (r = load_key_hex(dfd, "args_salt.key", k.salt_key, sizeof(k.salt_key))) < 0 ||
	    (r = load_key_hex(dfd, "token.key", k.token_key, sizeof(k.token_key))) < 0 ||
	    (r = ed25519_public_from_private(k.log_priv, k.log_pub)) < 0 ||
	    (r = ed25519_public_from_private(k.rec_priv, k.rec_pub)) < 0) {
		signer_keys_wipe(&k);
		return r;
	}
	*ret = k;
	explicit_bzero(&k, sizeof(k));
	return 0;
}

void signer_keys_wipe(struct signer_keys *k)
{
	explicit_bzero(k, sizeof(*k));
}

static int write_key_hex(const char *keydir, const char *name, const uint8_t *p, size_t n)
{
	_cleanup_free_ char *path = NULL;
	struct buf b = { 0 };
	int r;

	r = path_join(keydir, name, &path);
	if (r < 0) {
		return r;
	}
	r = buf_init(&b, 2 * n + 1, BUF_SECRET);
	if (r < 0) {
		return r;
	}
	if ((r = hex_encode(p, n, &b)) >= 0 && (r = buf_put_u8(&b, '\n')) >= 0) {
		r = io_write_file_atomic(path, buf_ptr(&b), buf_len(&b), 0600);
	}
	buf_release(&b);
	return r;
}

int signer_log_vkey(const struct signer_config *c, const struct signer_keys *k, char **ret)
{
	return note_vkey_encode(c->origin, NOTE_SIG_ED25519, k->log_pub, ret);
}

int signer_trust_json(const struct signer_config *c, const struct signer_keys *k, char **ret)
{
	_cleanup_free_ char *vkey = NULL;
	_cleanup_json_ json_t *j = NULL;
	char *s = NULL;
	int r;

	r = signer_log_vkey(c, k, &vkey);
	if (r < 0) {
		return r;
	}
	j = json_pack("{s:[s],s:[s]}", "logs", vkey, "algs", "ed25519");
	if (!j) {
		return -ENOMEM;
	}
	r = json_jcs_string(j, 64 << 10, &s);
	if (r < 0) {
		return r;
	}
	*ret = s;
	return 0;
}

int signer_init_dir(const char *dir, enum signer_mode mode, const char *socket_path, char *err, size_t err_size)
{
	_cleanup_free_ char *keydir = NULL, *cfgpath = NULL, *polpath = NULL, *trustpath = NULL, *cfg = NULL,
			    *trust = NULL, *origin = NULL;
	_cleanup_json_ json_t *j = NULL;
	struct signer_keys k = { 0 };
	struct signer_config c = { 0 };
	uint8_t log_id_raw[16];
	char log_id[SIGNER_LOG_ID_LEN + 1];
	struct buf hb = { 0 };
	struct stat st;
	int r;

	if ((r = path_join(dir, "keys", &keydir)) < 0 || (r = path_join(dir, "config.json", &cfgpath)) < 0 ||
	    (r = path_join(dir, "policy.yaml", &polpath)) < 0 || (r = path_join(dir, "trust.json", &trustpath)) < 0) {
		return r;
	}
	if (stat(cfgpath, &st) == 0) {
		snprintf(err, err_size, "%s already exists: this signer is initialised", cfgpath);
		return -EEXIST;
	}
	/* A fresh home has no ~/.local/share: its missing parents are made private (existing ones are left alone). */
	if (mkdir(dir, 0700) < 0 && errno == ENOENT) {
		_cleanup_free_ char *parent = strdup(dir);
		char *slash = parent ? strrchr(parent, '/') : NULL;
		if (slash && slash != parent) {
			*slash = '\0';
			(void)io_mkdir_p(AT_FDCWD, parent, 0700);
		}
	}
	if (mkdir(dir, 0700) < 0) {
		r = negative_errno();
		if (r != -EEXIST) {
			snprintf(err, err_size, "mkdir %s: %s", dir, strerror(-r));
			return r;
		}
		/* An existing directory is never re-moded (it could be /tmp or $HOME): it must be private already. */
		if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || (st.st_mode & 077) != 0) {
			snprintf(err, err_size,
				 "%s exists and is not a private directory (mode 0700): choose a new --dir", dir);
			return -EPERM;
		}
	} else if (chmod(dir, 0700) < 0) {
		r = negative_errno();
		snprintf(err, err_size, "chmod %s: %s", dir, strerror(-r));
		return r;
	}
	if (mkdir(keydir, 0700) < 0 && errno != EEXIST) {
		r = negative_errno();
		snprintf(err, err_size, "preparing %s: %s", dir, strerror(-r));
		return r;
	}

	if ((r = ed25519_keygen(k.log_priv, k.log_pub)) < 0 || (r = ed25519_keygen(k.rec_priv, k.rec_pub)) < 0 ||
	    (r = crypto_random(k.salt_key, sizeof(k.salt_key))) < 0 ||
	    (r = crypto_random(k.token_key, sizeof(k.token_key))) < 0 ||
	    (r = crypto_random(log_id_raw, sizeof(log_id_raw))) < 0) {
		snprintf(err, err_size, "key generation failed");
		goto out;
	}
	if ((r = buf_init(&hb, 64, 0)) < 0 || (r = hex_encode(log_id_raw, sizeof(log_id_raw), &hb)) < 0) {
		goto out;
	}
	memcpy(log_id, buf_ptr(&hb), SIGNER_LOG_ID_LEN);
	log_id[SIGNER_LOG_ID_LEN] = '\0';
	/* The origin names the log in checkpoints; Tracekit's default form is tracekit.local/<log_id>. */
	if (asprintf(&origin, "tkbox.local/%s", log_id) < 0) {
		r = -ENOMEM;
		goto out;
	}

	if ((r = write_key_hex(keydir, "log.key", k.log_priv, sizeof(k.log_priv))) < 0 ||
	    (r = write_key_hex(keydir, "record.key", k.rec_priv, sizeof(k.rec_priv))) < 0 ||
	    (r = write_key_hex(keydir, "args_salt.key", k.salt_key, sizeof(k.salt_key))) < 0 ||
	    (r = write_key_hex(keydir, "token.key", k.token_key, sizeof(k.token_key))) < 0) {
		snprintf(err, err_size, "writing keys: %s", strerror(-r));
		goto out;
	}

	j = json_pack("{s:i,s:s,s:s,s:s,s:s,s:[i]}", "version", 1, "mode", mode == SIGNER_MODE_DEV ? "dev" : "system",
		      "log_id", log_id, "origin", origin, "tenant", "default", "authorize", (json_int_t)getuid());
	if (!j) {
		r = -ENOMEM;
		goto out;
	}
	if (socket_path && json_object_set_new(j, "socket", json_string(socket_path)) < 0) {
		r = -ENOMEM;
		goto out;
	}
	if ((r = json_jcs_string(j, SIGNER_CONFIG_MAX_BYTES, &cfg)) < 0) {
		goto out;
	}
	if ((r = io_write_file_atomic(polpath, policy_default_yaml(), strlen(policy_default_yaml()), 0600)) < 0) {
		snprintf(err, err_size, "writing %s: %s", polpath, strerror(-r));
		goto out;
	}
	memcpy(c.log_id, log_id, sizeof(log_id));
	c.origin = origin;
	r = signer_trust_json(&c, &k, &trust);
	c.origin = NULL;
	if (r < 0) {
		goto out;
	}
	if ((r = io_write_file_atomic(trustpath, trust, strlen(trust), 0644)) < 0) {
		snprintf(err, err_size, "writing %s: %s", trustpath, strerror(-r));
		goto out;
	}
	/* config.json last: its presence means "initialised". */
	if ((r = io_write_file_atomic(cfgpath, cfg, strlen(cfg), 0600)) < 0) {
		snprintf(err, err_size, "writing %s: %s", cfgpath, strerror(-r));
		goto out;
	}
	r = 0;
out:
	buf_release(&hb);
	signer_keys_wipe(&k);
	return r;
}
