/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "banned.h"
#include "strv.h"
#include "daemon/supmsg.h"
#include "json.h"
#include "patch/patch.h"
#include "vmm/proto-json.h"

#define S(st) (1u << (st))

enum exec_rule {
	EX_NONE, /* carries no exec number */
	EX_NEW, /* a new exec: not open already (the daemon sends them in the order their decisions end, not by number) */
	EX_OPEN, /* an exec sent and not done */
	EX_DONE, /* an exec done and not released */
};

enum conn_rule {
	CN_NONE, /* carries no conn number */
	CN_NEW, /* egress_open: a conn not known already -> asked */
	CN_DIAL, /* egress_dial: asked -> dialled */
	CN_REFUSE, /* egress_refuse: asked -> forgotten */
	CN_DONE, /* egress_done: dialled, no use pending -> forgotten */
	CN_USE, /* secret_use: dialled, no use pending -> use pending */
	CN_OK, /* secret_ok: use pending -> not pending */
	CN_DIALLED, /* model_call: dialled (unchanged) */
};

enum diff_rule {
	DF_NONE, /* carries no diff number */
	DF_NEW, /* diff: none pending -> this one pending */
	DF_DONE, /* diff_done: this one pending -> none pending */
};

/* The monitor's table: one row per operation (supmsg.h shows it as a table). */
static const struct op_rule {
	const char *name;
	enum supmsg_dir dir;
	unsigned states;
	enum exec_rule exec;
	int next; /* the state after it, -1: unchanged */
	enum conn_rule conn;
	enum diff_rule diff; /* DF_NONE unless named */
} rules[SUPMSG_OP_COUNT] = {
	[SUPMSG_BOOT] = { "boot", SUPMSG_TO_SUPERVISOR, S(SUPMON_INIT), EX_NONE, SUPMON_BOOTING, CN_NONE, DF_NONE },
	[SUPMSG_EXEC] = { "exec", SUPMSG_TO_SUPERVISOR, S(SUPMON_UP), EX_NEW, -1, CN_NONE, DF_NONE },
	[SUPMSG_RELEASE] = { "release", SUPMSG_TO_SUPERVISOR, S(SUPMON_UP) | S(SUPMON_STOPPING) | S(SUPMON_OVER),
			     EX_DONE, -1, CN_NONE, DF_NONE },
	[SUPMSG_STOP] = { "stop", SUPMSG_TO_SUPERVISOR, S(SUPMON_UP), EX_NONE, SUPMON_STOPPING, CN_NONE, DF_NONE },
	[SUPMSG_READY] = { "ready", SUPMSG_TO_DAEMON, S(SUPMON_BOOTING), EX_NONE, SUPMON_UP, CN_NONE, DF_NONE },
	[SUPMSG_FAILED] = { "failed", SUPMSG_TO_DAEMON, S(SUPMON_INIT) | S(SUPMON_BOOTING), EX_NONE, SUPMON_OVER,
			    CN_NONE, DF_NONE },
	[SUPMSG_DONE] = { "done", SUPMSG_TO_DAEMON, S(SUPMON_UP) | S(SUPMON_STOPPING), EX_OPEN, -1, CN_NONE, DF_NONE },
	[SUPMSG_EVENT] = { "event", SUPMSG_TO_DAEMON, S(SUPMON_BOOTING) | S(SUPMON_UP) | S(SUPMON_STOPPING), EX_NONE,
			   -1, CN_NONE, DF_NONE },
	[SUPMSG_STOPPED] = { "stopped", SUPMSG_TO_DAEMON, S(SUPMON_UP) | S(SUPMON_STOPPING), EX_NONE, SUPMON_OVER,
			     CN_NONE, DF_NONE },
	/* Also while stopping: the proxy may have asked before it read the stop (the daemon answers 503). */
	[SUPMSG_EGRESS_OPEN] = { "egress_open", SUPMSG_TO_DAEMON, S(SUPMON_UP) | S(SUPMON_STOPPING), EX_NONE, -1,
				 CN_NEW, DF_NONE },
	[SUPMSG_EGRESS_DIAL] = { "egress_dial", SUPMSG_TO_SUPERVISOR, S(SUPMON_UP), EX_NONE, -1, CN_DIAL, DF_NONE },
	[SUPMSG_EGRESS_REFUSE] = { "egress_refuse", SUPMSG_TO_SUPERVISOR, S(SUPMON_UP) | S(SUPMON_STOPPING), EX_NONE,
				   -1, CN_REFUSE, DF_NONE },
	[SUPMSG_EGRESS_DONE] = { "egress_done", SUPMSG_TO_DAEMON, S(SUPMON_UP) | S(SUPMON_STOPPING), EX_NONE, -1,
				 CN_DONE, DF_NONE },
	[SUPMSG_EGRESS_REFUSED] = { "egress_refused", SUPMSG_TO_DAEMON, S(SUPMON_UP) | S(SUPMON_STOPPING), EX_NONE, -1,
				    CN_NONE, DF_NONE },
	[SUPMSG_SECRETS] = { "secrets", SUPMSG_TO_SUPERVISOR, S(SUPMON_UP), EX_NONE, -1, CN_NONE, DF_NONE },
	[SUPMSG_SECRET_USE] = { "secret_use", SUPMSG_TO_DAEMON, S(SUPMON_UP), EX_NONE, -1, CN_USE, DF_NONE },
	[SUPMSG_SECRET_OK] = { "secret_ok", SUPMSG_TO_SUPERVISOR, S(SUPMON_UP) | S(SUPMON_STOPPING), EX_NONE, -1, CN_OK,
			       DF_NONE },
	[SUPMSG_SECRET_LEAK] = { "secret_leak", SUPMSG_TO_DAEMON, S(SUPMON_UP) | S(SUPMON_STOPPING), EX_NONE, -1,
				 CN_NONE, DF_NONE },
	[SUPMSG_MODEL_CALL] = { "model_call", SUPMSG_TO_DAEMON, S(SUPMON_UP) | S(SUPMON_STOPPING), EX_NONE, -1,
				CN_DIALLED, DF_NONE },
	[SUPMSG_SELFTEST] = { "selftest", SUPMSG_TO_DAEMON, S(SUPMON_UP), EX_NONE, -1, CN_NONE, DF_NONE },
	[SUPMSG_DIFF] = { "diff", SUPMSG_TO_SUPERVISOR, S(SUPMON_UP), EX_NONE, -1, CN_NONE, DF_NEW },
	/* Also while stopping: a stop does not end a pending diff, the supervisor answers it (not ok). */
	[SUPMSG_DIFF_DONE] = { "diff_done", SUPMSG_TO_DAEMON, S(SUPMON_UP) | S(SUPMON_STOPPING), EX_NONE, -1, CN_NONE,
			       DF_DONE },
};

/* The events a supervisor may report (a closed set: they become lines of the box's events file). */
static const char *const events[] = {
	"box.agent_lost",
	"box.boot_retry",
	"box.kills_ignored",
	"box.lifetime",
	"box.protocol_violation",
	"box.shutdown_unclean",
	"box.stopping", /* the supervisor began a stop itself: egress closes in the daemon now */
	NULL,
};

static const char *const stdin_names[] = {
	[SUPMSG_STDIN_NONE] = "none", [SUPMSG_STDIN_UPFRONT] = "upfront", [SUPMSG_STDIN_STREAM] = "stream"
};

enum supmsg_dir supmsg_op_dir(enum supmsg_op op)
{
	return (unsigned)op < SUPMSG_OP_COUNT ? rules[op].dir : SUPMSG_TO_SUPERVISOR;
}

const char *supmsg_op_name(enum supmsg_op op)
{
	return (unsigned)op < SUPMSG_OP_COUNT ? rules[op].name : "?";
}

size_t supmsg_fds(const struct supmsg *m)
{
	if (m->op == SUPMSG_EGRESS_DIAL || m->op == SUPMSG_SECRETS || (m->op == SUPMSG_DIFF_DONE && m->ok)) {
		return 1;
	}
	if (m->op != SUPMSG_EXEC) {
		return 0;
	}
	return m->stdin_mode == SUPMSG_STDIN_UPFRONT ? 2 : 1;
}

void supmsg_release(struct supmsg *m)
{
	if (!m) {
		return;
	}
	free(m->box_id);
	free(m->rootfs);
	free(m->workspace);
	free(m->state_dir);
	free(m->guest);
	free(m->accel);
	free(m->console_keep);
	free(m->kernel);
	free(m->modules);
	strv_free(m->env);
	strv_free(m->argv);
	free(m->cwd);
	free(m->isolation);
	free(m->message);
	free(m->error);
	free(m->stdin_sha256);
	free(m->event);
	free(m->detail);
	free(m->reason);
	free(m->host);
	free(m->url);
	free(m->rule);
	free(m->ca_cert);
	if (m->ca_key) {
		explicit_bzero(m->ca_key, strlen(m->ca_key));
		free(m->ca_key);
	}
	free(m->upstream_ca);
	for (size_t i = 0; m->secrets && i < m->n_secrets; i++) {
		free(m->secrets[i].name);
		free(m->secrets[i].placeholder);
		free(m->secrets[i].header);
		strv_free(m->secrets[i].hosts);
	}
	free(m->secrets);
	free(m->secret);
	free(m->method);
	free(m->path);
	free(m->model);
	strv_free(m->ran);
	strv_free(m->trusted);
	free(m->sha256);
	for (size_t i = 0; m->notices && i < m->n_notices; i++) {
		free(m->notices[i].path);
		free(m->notices[i].why);
	}
	free(m->notices);
	*m = (struct supmsg){ 0 };
}

/* ---- decoding ---- */

static int text(const json_t *o, const char *key, size_t max, bool required, char **ret)
{
	int r = proto_get_string(o, key, max, ret);

	if (r == -ENOENT && !required) {
		*ret = NULL;
		return 0;
	}
	return r == -E2BIG ? r : r < 0 ? -EBADMSG : 0;
}

static int integer(const json_t *o, const char *key, int64_t min, int64_t max, bool *ret_has, int64_t *ret)
{
	int r = json_get_int(o, key, ret);

	if (r == -ENOENT && ret_has) {
		*ret_has = false;
		return 0;
	}
	if (r < 0 || *ret < min || *ret > max) {
		return -EBADMSG;
	}
	if (ret_has) {
		*ret_has = true;
	}
	return 0;
}

static int strv(const json_t *o, const char *key, size_t max_n, bool env, char ***ret, size_t *ret_n)
{
	int r = proto_get_strv(o, key, max_n, SUPMSG_MAX, env, ret, ret_n);

	return r == -E2BIG ? r : r < 0 ? -EBADMSG : 0;
}

static bool one_of(const char *s, const char *const *set)
{
	for (; *set; set++) {
		if (strcmp(s, *set) == 0) {
			return true;
		}
	}
	return false;
}

static bool box_name_ok(const char *s)
{
	size_t n = strlen(s);

	return n >= 1 && n <= SUPMSG_MAX_NAME &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

static bool starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int decode_boot(const json_t *o, struct supmsg *m)
{
	static const char *const keys[] = { "op",      "box_id",     "rootfs",	     "workspace", "state_dir",
					    "guest",   "accel",	     "vcpus",	     "mem_mib",	  "scratch_mib",
					    "env",     "lifetime_s", "console_keep", "kernel",	  "modules",
					    "ca_cert", "ca_key",     "upstream_ca",  NULL };
	static const char *const accels[] = { "auto", "kvm", "tcg", NULL };
	int r = json_only_keys(o, keys);

	r = r < 0 ? r : text(o, "box_id", SUPMSG_MAX_NAME, true, &m->box_id);
	r = r < 0 ? r : text(o, "rootfs", SUPMSG_MAX_PATH, true, &m->rootfs);
	r = r < 0 ? r : text(o, "workspace", SUPMSG_MAX_PATH, false, &m->workspace);
	r = r < 0 ? r : text(o, "state_dir", SUPMSG_MAX_PATH, true, &m->state_dir);
	r = r < 0 ? r : text(o, "guest", SUPMSG_MAX_PATH, true, &m->guest);
	r = r < 0 ? r : text(o, "accel", SUPMSG_MAX_NAME, true, &m->accel);
	r = r < 0 ? r : integer(o, "vcpus", 1, SUPMSG_MAX_VCPUS, NULL, &m->vcpus);
	r = r < 0 ? r : integer(o, "mem_mib", 1, SUPMSG_MAX_MIB, NULL, &m->mem_mib);
	r = r < 0 ? r : integer(o, "scratch_mib", 0, SUPMSG_MAX_MIB, NULL, &m->scratch_mib);
	r = r < 0 ? r : strv(o, "env", SUPMSG_MAX_ENV, true, &m->env, &m->envc);
	r = r < 0 ? r : integer(o, "lifetime_s", 0, SUPMSG_MAX_TIMEOUT_S, NULL, &m->lifetime_s);
	r = r < 0 ? r : text(o, "console_keep", SUPMSG_MAX_PATH, false, &m->console_keep);
	r = r < 0 ? r : text(o, "kernel", SUPMSG_MAX_PATH, false, &m->kernel);
	r = r < 0 ? r : text(o, "modules", SUPMSG_MAX_PATH, false, &m->modules);
	r = r < 0 ? r : text(o, "ca_cert", SUPMSG_MAX_PEM, false, &m->ca_cert);
	r = r < 0 ? r : text(o, "ca_key", SUPMSG_MAX_PEM, false, &m->ca_key);
	r = r < 0 ? r : text(o, "upstream_ca", SUPMSG_MAX_PATH, false, &m->upstream_ca);
	if (r < 0) {
		return r;
	}
	/* The box's CA: certificate and key together, each a PEM block; the trust file a path. */
	if (!m->ca_cert != !m->ca_key ||
	    (m->ca_cert && (!starts_with(m->ca_cert, "-----BEGIN CERTIFICATE-----") ||
			    !starts_with(m->ca_key, "-----BEGIN ") || !strstr(m->ca_key, "PRIVATE KEY-----"))) ||
	    (m->upstream_ca && m->upstream_ca[0] != '/')) {
		return -EBADMSG;
	}
	/* A kernel comes with its modules; paths are never empty. */
	if (!box_name_ok(m->box_id) || !one_of(m->accel, accels) || !m->rootfs[0] || !m->state_dir[0] || !m->guest[0] ||
	    (m->workspace && !m->workspace[0]) || (m->console_keep && !m->console_keep[0]) ||
	    !m->kernel != !m->modules || (m->kernel && (!m->kernel[0] || !m->modules[0]))) {
		return -EBADMSG;
	}
	return 0;
}

static int decode_exec(const json_t *o, struct supmsg *m)
{
	static const char *const keys[] = { "op", "exec", "argv", "env", "cwd", "stdin", "timeout_s", NULL };
	char *mode = NULL;
	int r = json_only_keys(o, keys);

	r = r < 0 ? r : integer(o, "exec", 1, SUPMSG_MAX_EXEC_ID, NULL, &m->exec);
	r = r < 0 ? r : strv(o, "argv", SUPMSG_MAX_ARGS, false, &m->argv, &m->argc);
	r = r < 0 ? r : strv(o, "env", SUPMSG_MAX_ENV, true, &m->env, &m->envc);
	r = r < 0 ? r : text(o, "cwd", SUPMSG_MAX_PATH, false, &m->cwd);
	r = r < 0 ? r : text(o, "stdin", 16, true, &mode);
	r = r < 0 ? r : integer(o, "timeout_s", 0, SUPMSG_MAX_TIMEOUT_S, NULL, &m->timeout_s);
	if (r >= 0 && (m->argc == 0 || !m->argv[0][0] || (m->cwd && m->cwd[0] && m->cwd[0] != '/'))) {
		r = -EBADMSG;
	}
	if (r >= 0) {
		r = -EBADMSG;
		for (size_t i = 0; i < ARRAY_SIZE(stdin_names); i++) {
			if (strcmp(mode, stdin_names[i]) == 0) {
				m->stdin_mode = (enum supmsg_stdin)i;
				r = 0;
			}
		}
	}
	free(mode);
	return r;
}

static int decode_done(const json_t *o, struct supmsg *m)
{
	static const char *const keys[] = { "op",    "exec",	     "status",	    "exit_code", "signal",
					    "error", "stdin_sha256", "stdin_bytes", NULL };
	static const char *const statuses[] = { "ok", "error", NULL };
	char *status = NULL;
	int64_t code = 0, sig = 0;
	bool has_code = false, has_sig = false, has_bytes = false;
	int r = json_only_keys(o, keys);

	r = r < 0 ? r : integer(o, "exec", 1, SUPMSG_MAX_EXEC_ID, NULL, &m->exec);
	r = r < 0 ? r : text(o, "status", 16, true, &status);
	r = r < 0 ? r : integer(o, "exit_code", 0, EXIT_MAX_CODE, &has_code, &code);
	r = r < 0 ? r : integer(o, "signal", 1, EXIT_MAX_SIGNAL, &has_sig, &sig);
	r = r < 0 ? r : text(o, "error", SUPMSG_MAX_TEXT, false, &m->error);
	r = r < 0 ? r : text(o, "stdin_sha256", 64, false, &m->stdin_sha256);
	r = r < 0 ? r : integer(o, "stdin_bytes", 0, INT64_C(1) << 50, &has_bytes, &m->stdin_bytes);
	if (r >= 0 && (!one_of(status, statuses) || (has_code && has_sig) || has_bytes != (m->stdin_sha256 != NULL))) {
		r = -EBADMSG;
	}
	if (r >= 0 && m->stdin_sha256 &&
	    (strlen(m->stdin_sha256) != 64 || strspn(m->stdin_sha256, "0123456789abcdef") != 64)) {
		r = -EBADMSG;
	}
	if (r >= 0) {
		m->ok = strcmp(status, "ok") == 0;
		m->has_exit = has_code || has_sig;
		m->exit = has_sig ? (struct exit_status){ EXIT_KIND_SIGNALED, (uint32_t)sig }
				  : (struct exit_status){ EXIT_KIND_EXITED, (uint32_t)code };
		/* "ok" is exit 0 with nothing to say, and nothing else. */
		if (m->ok && (!has_code || code != 0 || m->error)) {
			r = -EBADMSG;
		}
	}
	free(status);
	return r;
}

/* An egress rule name: [a-z0-9_.-]{1,SUPMSG_MAX_RULE}. */
static bool rule_ok(const char *s)
{
	size_t n = strlen(s);

	return n >= 1 && n <= SUPMSG_MAX_RULE && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
}

/* A host or url: 1..max bytes of printable ASCII, no spaces. */
static bool token_ok(const char *s, size_t max)
{
	size_t n = strlen(s);

	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f) {
			return false;
		}
	}
	return n >= 1 && n <= max;
}

static int decode_egress_to_sup(const json_t *o, enum supmsg_op op, struct supmsg *m)
{
	static const char *const k_dial[] = { "op", "conn", "url", "plain", "inspect", "model", NULL };
	static const char *const k_refuse[] = { "op", "conn", "status", "rule", "message", NULL };
	int r = json_only_keys(o, op == SUPMSG_EGRESS_DIAL ? k_dial : k_refuse);

	r = r < 0 ? r : integer(o, "conn", 1, SUPMSG_MAX_CONN, NULL, &m->conn);
	if (op == SUPMSG_EGRESS_DIAL) {
		r = r < 0 ? r : text(o, "url", SUPMSG_MAX_URL, true, &m->url);
		r = r < 0 ? r : json_get_bool(o, "plain", &m->plain) < 0 ? -EBADMSG : 0;
		r = r < 0 ? r : json_get_bool(o, "inspect", &m->inspect) < 0 ? -EBADMSG : 0;
		r = r < 0 ? r : json_get_bool(o, "model", &m->model_host) < 0 ? -EBADMSG : 0;
		/* Inspected: a TLS tunnel the proxy terminates, never one that may be plain. */
		if (r >= 0 && m->inspect && (m->plain || !starts_with(m->url, "https://"))) {
			r = -EBADMSG;
		}
		return r >= 0 && !token_ok(m->url, SUPMSG_MAX_URL) ? -EBADMSG : r;
	}
	r = r < 0 ? r : integer(o, "status", 400, 504, NULL, &m->status);
	r = r < 0 ? r : text(o, "rule", SUPMSG_MAX_RULE, true, &m->rule);
	r = r < 0 ? r : text(o, "message", SUPMSG_MAX_TEXT, true, &m->message);
	if (r >= 0 &&
	    (!rule_ok(m->rule) || !m->message[0] ||
	     (m->status != 400 && m->status != 403 && m->status != 502 && m->status != 503 && m->status != 504))) {
		r = -EBADMSG;
	}
	return r;
}

static int decode_egress_to_daemon(const json_t *o, enum supmsg_op op, struct supmsg *m)
{
	static const char *const k_open[] = { "op", "conn", "form", "host", "port", NULL };
	static const char *const k_done[] = { "op",	     "conn",  "bytes_up", "bytes_down",
					      "duration_ms", "error", "rule",	  NULL };
	static const char *const k_refused[] = { "op", "rule", "message", "host", "port", NULL };
	static const char *const forms[] = { "connect", "absolute", NULL };
	_cleanup_free_ char *form = NULL;
	bool has_port = false;
	int r;

	switch (op) {
	case SUPMSG_EGRESS_OPEN:
		r = json_only_keys(o, k_open);
		r = r < 0 ? r : integer(o, "conn", 1, SUPMSG_MAX_CONN, NULL, &m->conn);
		r = r < 0 ? r : text(o, "form", 16, true, &form);
		r = r < 0 ? r : text(o, "host", SUPMSG_MAX_HOST, true, &m->host);
		r = r < 0 ? r : integer(o, "port", 1, 65535, NULL, &m->port);
		if (r >= 0 && (!one_of(form, forms) || !token_ok(m->host, SUPMSG_MAX_HOST))) {
			r = -EBADMSG;
		}
		m->form_connect = r >= 0 && strcmp(form, "connect") == 0;
		return r;
	case SUPMSG_EGRESS_DONE:
		r = json_only_keys(o, k_done);
		r = r < 0 ? r : integer(o, "conn", 1, SUPMSG_MAX_CONN, NULL, &m->conn);
		r = r < 0 ? r : integer(o, "bytes_up", 0, INT64_C(1) << 53, NULL, &m->bytes_up);
		r = r < 0 ? r : integer(o, "bytes_down", 0, INT64_C(1) << 53, NULL, &m->bytes_down);
		r = r < 0 ? r : integer(o, "duration_ms", 0, INT64_C(1) << 53, NULL, &m->duration_ms);
		r = r < 0 ? r : text(o, "error", SUPMSG_MAX_TEXT, false, &m->error);
		r = r < 0 ? r : text(o, "rule", SUPMSG_MAX_RULE, false, &m->rule);
		/* A rule names why the proxy ended it, so it comes with the error text. */
		if (r >= 0 && ((m->rule && (!rule_ok(m->rule) || !m->error)) || (m->error && !m->error[0]))) {
			r = -EBADMSG;
		}
		return r;
	case SUPMSG_EGRESS_REFUSED:
		r = json_only_keys(o, k_refused);
		r = r < 0 ? r : text(o, "rule", SUPMSG_MAX_RULE, true, &m->rule);
		r = r < 0 ? r : text(o, "message", SUPMSG_MAX_TEXT, true, &m->message);
		r = r < 0 ? r : text(o, "host", SUPMSG_MAX_HOST, false, &m->host);
		r = r < 0 ? r : integer(o, "port", 1, 65535, &has_port, &m->port);
		if (r >= 0 && (!rule_ok(m->rule) || !m->message[0] ||
			       (m->host && !token_ok(m->host, SUPMSG_MAX_HOST)) || (has_port && !m->host))) {
			r = -EBADMSG;
		}
		return r;
	default:
		return -EPROTO;
	}
}

/* A secret's name: [A-Z_][A-Z0-9_]{0,63} (egress_secret_name_ok's rule; this file stays pure). */
static bool secret_name_ok(const char *s)
{
	size_t n = strlen(s);

	return n >= 1 && n <= SUPMSG_MAX_NAME && !(s[0] >= '0' && s[0] <= '9') &&
	       strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == n;
}

/* "tkbox_<name>_" and 32 lower-case hex digits. */
static bool placeholder_ok(const char *name, const char *ph)
{
	size_t n = strlen(name);

	return starts_with(ph, "tkbox_") && strncmp(ph + 6, name, n) == 0 && ph[6 + n] == '_' &&
	       strlen(ph + 7 + n) == 32 && strspn(ph + 7 + n, "0123456789abcdef") == 32;
}

/* An RFC 9110 token of 1..max bytes (a header name, a method). */
static bool http_token_ok(const char *s, size_t max)
{
	size_t n = strlen(s);

	return n >= 1 && n <= max &&
	       strspn(s, "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") == n;
}

/* 1..max bytes of text without control bytes (UTF-8 is checked by the parser). */
static bool line_ok(const char *s, size_t max)
{
	size_t n = strlen(s);

	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] == 0x7f) {
			return false;
		}
	}
	return n >= 1 && n <= max;
}

static int decode_secret(const json_t *o, struct supmsg_secret *x)
{
	static const char *const keys[] = { "name", "placeholder", "header", "hosts", "len", NULL };
	int r = json_only_keys(o, keys);

	r = r < 0 ? r : text(o, "name", SUPMSG_MAX_NAME, true, &x->name);
	r = r < 0 ? r : text(o, "placeholder", SUPMSG_MAX_NAME + 64, true, &x->placeholder);
	r = r < 0 ? r : text(o, "header", SUPMSG_MAX_NAME, true, &x->header);
	r = r < 0 ? r : strv(o, "hosts", SUPMSG_MAX_SECRET_HOSTS, false, &x->hosts, &x->n_hosts);
	r = r < 0 ? r : integer(o, "len", 6, SUPMSG_MAX_SECRET_LEN, NULL, &x->len);
	if (r < 0) {
		return r;
	}
	if (!secret_name_ok(x->name) || !placeholder_ok(x->name, x->placeholder) ||
	    !http_token_ok(x->header, SUPMSG_MAX_NAME) || x->n_hosts == 0) {
		return -EBADMSG;
	}
	for (size_t i = 0; i < x->n_hosts; i++) {
		if (!token_ok(x->hosts[i], SUPMSG_MAX_HOST)) {
			return -EBADMSG;
		}
		for (size_t j = 0; j < i; j++) {
			if (strcmp(x->hosts[i], x->hosts[j]) == 0) {
				return -EBADMSG;
			}
		}
	}
	return 0;
}

static int decode_secrets(const json_t *o, struct supmsg *m)
{
	static const char *const keys[] = { "op", "secrets", NULL };
	json_t *a = NULL;
	size_t n;
	int r = json_only_keys(o, keys);

	r = r < 0 ? r : json_get_array(o, "secrets", &a) < 0 ? -EBADMSG : 0;
	if (r < 0) {
		return r;
	}
	n = json_array_size(a);
	if (n > SUPMSG_MAX_SECRETS) {
		return -E2BIG;
	}
	m->secrets = n ? calloc(n, sizeof(*m->secrets)) : NULL;
	if (n && !m->secrets) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		m->n_secrets = i + 1; /* released with m whatever happens next */
		r = decode_secret(json_array_get(a, i), &m->secrets[i]);
		if (r < 0) {
			return r;
		}
		for (size_t j = 0; j < i; j++) {
			if (strcmp(m->secrets[i].name, m->secrets[j].name) == 0) {
				return -EBADMSG;
			}
		}
	}
	return 0;
}

/* ran[] or trusted[]: at most SUPMSG_MAX_SELFTEST distinct [a-z0-9]{1,16}. */
static int clients(const json_t *o, const char *key, char ***ret, size_t *ret_n)
{
	int r = strv(o, key, SUPMSG_MAX_SELFTEST, false, ret, ret_n);

	for (size_t i = 0; r >= 0 && i < *ret_n; i++) {
		size_t n = strlen((*ret)[i]);

		if (n < 1 || n > 16 || strspn((*ret)[i], "abcdefghijklmnopqrstuvwxyz0123456789") != n) {
			r = -EBADMSG;
		}
		for (size_t j = 0; r >= 0 && j < i; j++) {
			r = strcmp((*ret)[i], (*ret)[j]) == 0 ? -EBADMSG : 0;
		}
	}
	return r;
}

static int decode_inspect(const json_t *o, enum supmsg_op op, struct supmsg *m)
{
	static const char *const k_use[] = { "op", "conn", "secret", "host", NULL };
	static const char *const k_ok[] = { "op", "conn", "ok", "message", NULL };
	static const char *const k_leak[] = { "op", "conn", "secret", "host", "reason", NULL };
	static const char *const k_model[] = { "op",	       "conn",		"host",	      "method",	     "path",
					       "status",       "bytes_up",	"bytes_down", "duration_ms", "model",
					       "input_tokens", "output_tokens", NULL };
	static const char *const k_self[] = { "op", "ran", "trusted", "clock_offset_ms", NULL };
	const int64_t big = INT64_C(1) << 53;
	bool has_in = false, has_out = false;
	int r;

	switch (op) {
	case SUPMSG_SECRETS:
		return decode_secrets(o, m);
	case SUPMSG_SECRET_USE:
	case SUPMSG_SECRET_LEAK:
		r = json_only_keys(o, op == SUPMSG_SECRET_USE ? k_use : k_leak);
		r = r < 0 ? r : integer(o, "conn", op == SUPMSG_SECRET_USE ? 1 : 0, SUPMSG_MAX_CONN, NULL, &m->conn);
		r = r < 0 ? r : text(o, "secret", SUPMSG_MAX_NAME, true, &m->secret);
		r = r < 0 ? r : text(o, "host", SUPMSG_MAX_HOST, true, &m->host);
		if (r >= 0 && op == SUPMSG_SECRET_LEAK) {
			r = text(o, "reason", SUPMSG_MAX_TEXT, true, &m->reason);
			r = r < 0 ? r : line_ok(m->reason, SUPMSG_MAX_TEXT) ? 0 : -EBADMSG;
		}
		return r >= 0 && (!secret_name_ok(m->secret) || !token_ok(m->host, SUPMSG_MAX_HOST)) ? -EBADMSG : r;
	case SUPMSG_SECRET_OK:
		r = json_only_keys(o, k_ok);
		r = r < 0 ? r : integer(o, "conn", 1, SUPMSG_MAX_CONN, NULL, &m->conn);
		r = r < 0 ? r : json_get_bool(o, "ok", &m->ok) < 0 ? -EBADMSG : 0;
		r = r < 0 ? r : text(o, "message", SUPMSG_MAX_TEXT, false, &m->message);
		return r >= 0 && m->message && !m->message[0] ? -EBADMSG : r;
	case SUPMSG_MODEL_CALL:
		r = json_only_keys(o, k_model);
		r = r < 0 ? r : integer(o, "conn", 1, SUPMSG_MAX_CONN, NULL, &m->conn);
		r = r < 0 ? r : text(o, "host", SUPMSG_MAX_HOST, true, &m->host);
		r = r < 0 ? r : text(o, "method", 32, true, &m->method);
		r = r < 0 ? r : text(o, "path", SUPMSG_MAX_HTTP_PATH, true, &m->path);
		r = r < 0 ? r : integer(o, "status", 100, 599, NULL, &m->status);
		r = r < 0 ? r : integer(o, "bytes_up", 0, big, NULL, &m->bytes_up);
		r = r < 0 ? r : integer(o, "bytes_down", 0, big, NULL, &m->bytes_down);
		r = r < 0 ? r : integer(o, "duration_ms", 0, big, NULL, &m->duration_ms);
		r = r < 0 ? r : text(o, "model", SUPMSG_MAX_MODEL, false, &m->model);
		r = r < 0 ? r : integer(o, "input_tokens", 0, big, &has_in, &m->input_tokens);
		r = r < 0 ? r : integer(o, "output_tokens", 0, big, &has_out, &m->output_tokens);
		if (r >= 0 && (!token_ok(m->host, SUPMSG_MAX_HOST) || !http_token_ok(m->method, 32) ||
			       !line_ok(m->path, SUPMSG_MAX_HTTP_PATH) || m->path[0] != '/' ||
			       (m->model && !line_ok(m->model, SUPMSG_MAX_MODEL)))) {
			r = -EBADMSG;
		}
		m->input_tokens = has_in ? m->input_tokens : -1;
		m->output_tokens = has_out ? m->output_tokens : -1;
		return r;
	case SUPMSG_SELFTEST:
		r = json_only_keys(o, k_self);
		r = r < 0 ? r : clients(o, "ran", &m->ran, &m->n_ran);
		r = r < 0 ? r : clients(o, "trusted", &m->trusted, &m->n_trusted);
		return r < 0 ? r : integer(o, "clock_offset_ms", -big, big, NULL, &m->clock_offset_ms);
	default:
		return -EPROTO;
	}
}

/* A notice's string: 1..PATCH_MAX_NOTICE bytes without control bytes (the guest's words, shown to a person). */
static int notice_text(const json_t *a, size_t i, char **ret)
{
	const json_t *v = json_array_get(a, i);
	size_t n;

	if (!json_is_string(v)) {
		return -EBADMSG;
	}
	n = json_string_length(v);
	if (n > PATCH_MAX_NOTICE) {
		return -E2BIG;
	}
	if (n != strlen(json_string_value(v)) || !line_ok(json_string_value(v), PATCH_MAX_NOTICE)) {
		return -EBADMSG;
	}
	*ret = strdup(json_string_value(v));
	return *ret ? 0 : -ENOMEM;
}

/* notices: [[path,why],...], at most PATCH_MAX_NOTICES pairs. */
static int decode_notices(const json_t *o, struct supmsg *m)
{
	json_t *a = NULL;
	size_t n;
	int r = json_get_array(o, "notices", &a) < 0 ? -EBADMSG : 0;

	if (r < 0) {
		return r;
	}
	n = json_array_size(a);
	if (n > PATCH_MAX_NOTICES) {
		return -E2BIG;
	}
	m->notices = n ? calloc(n, sizeof(*m->notices)) : NULL;
	if (n && !m->notices) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const json_t *pair = json_array_get(a, i);

		m->n_notices = i + 1; /* released with m whatever happens next */
		if (!json_is_array(pair) || json_array_size(pair) != 2) {
			return -EBADMSG;
		}
		r = notice_text(pair, 0, &m->notices[i].path);
		r = r < 0 ? r : notice_text(pair, 1, &m->notices[i].why);
		if (r < 0) {
			return r;
		}
	}
	return 0;
}

static int decode_diff(const json_t *o, enum supmsg_op op, struct supmsg *m)
{
	static const char *const k_diff[] = { "op", "diff", NULL };
	static const char *const k_done[] = {
		"op", "diff", "ok", "error", "sha256", "bytes", "files", "notices", NULL
	};
	bool has_bytes = false, has_files = false;
	int r = json_only_keys(o, op == SUPMSG_DIFF ? k_diff : k_done);

	r = r < 0 ? r : integer(o, "diff", 1, SUPMSG_MAX_DIFF, NULL, &m->diff);
	if (r < 0 || op == SUPMSG_DIFF) {
		return r;
	}
	r = json_get_bool(o, "ok", &m->ok) < 0 ? -EBADMSG : 0;
	r = r < 0 ? r : text(o, "error", SUPMSG_MAX_TEXT, false, &m->error);
	r = r < 0 ? r : text(o, "sha256", 64, false, &m->sha256);
	r = r < 0 ? r : integer(o, "bytes", 0, (int64_t)PATCH_MAX_BYTES, &has_bytes, &m->patch_bytes);
	r = r < 0 ? r : integer(o, "files", 0, PATCH_MAX_FILES, &has_files, &m->files);
	if (r < 0) {
		return r;
	}
	if (!m->ok) {
		/* No patch: why, and nothing that would describe one. */
		return m->error && m->error[0] && !m->sha256 && !has_bytes && !has_files &&
				       !json_object_get(o, "notices")
			       ? 0
			       : -EBADMSG;
	}
	if (m->error || !m->sha256 || !has_bytes || !has_files || strlen(m->sha256) != 64 ||
	    strspn(m->sha256, "0123456789abcdef") != 64) {
		return -EBADMSG;
	}
	return decode_notices(o, m);
}

static int decode_op(const json_t *o, enum supmsg_op op, struct supmsg *m)
{
	static const char *const k_id[] = { "op", "exec", NULL };
	static const char *const k_none[] = { "op", NULL };
	static const char *const k_ready[] = { "op", "accel", "isolation", "ready_ms", NULL };
	static const char *const k_failed[] = { "op", "message", NULL };
	static const char *const k_event[] = { "op", "event", "detail", NULL };
	static const char *const k_stopped[] = { "op", "reason", NULL };
	static const char *const accels[] = { "kvm", "tcg", NULL };
	static const char *const isolations[] = { "kvm", "emulated", NULL };
	int r;

	switch (op) {
	case SUPMSG_BOOT:
		return decode_boot(o, m);
	case SUPMSG_EXEC:
		return decode_exec(o, m);
	case SUPMSG_RELEASE:
		r = json_only_keys(o, k_id);
		return r < 0 ? r : integer(o, "exec", 1, SUPMSG_MAX_EXEC_ID, NULL, &m->exec);
	case SUPMSG_STOP:
		return json_only_keys(o, k_none);
	case SUPMSG_READY:
		r = json_only_keys(o, k_ready);
		r = r < 0 ? r : text(o, "accel", SUPMSG_MAX_NAME, true, &m->accel);
		r = r < 0 ? r : text(o, "isolation", SUPMSG_MAX_NAME, true, &m->isolation);
		r = r < 0 ? r : integer(o, "ready_ms", 0, 86400000, NULL, &m->ready_ms);
		if (r >= 0 && (!one_of(m->accel, accels) || !one_of(m->isolation, isolations))) {
			r = -EBADMSG;
		}
		return r;
	case SUPMSG_FAILED:
		r = json_only_keys(o, k_failed);
		return r < 0 ? r : text(o, "message", SUPMSG_MAX_TEXT, true, &m->message);
	case SUPMSG_DONE:
		return decode_done(o, m);
	case SUPMSG_EVENT:
		r = json_only_keys(o, k_event);
		r = r < 0 ? r : text(o, "event", SUPMSG_MAX_TEXT, true, &m->event);
		r = r < 0 ? r : text(o, "detail", SUPMSG_MAX_TEXT, false, &m->detail);
		return r >= 0 && !one_of(m->event, events) ? -EBADMSG : r;
	case SUPMSG_STOPPED:
		r = json_only_keys(o, k_stopped);
		return r < 0 ? r : text(o, "reason", SUPMSG_MAX_TEXT, true, &m->reason);
	case SUPMSG_EGRESS_DIAL:
	case SUPMSG_EGRESS_REFUSE:
		return decode_egress_to_sup(o, op, m);
	case SUPMSG_EGRESS_OPEN:
	case SUPMSG_EGRESS_DONE:
	case SUPMSG_EGRESS_REFUSED:
		return decode_egress_to_daemon(o, op, m);
	case SUPMSG_SECRETS:
	case SUPMSG_SECRET_USE:
	case SUPMSG_SECRET_OK:
	case SUPMSG_SECRET_LEAK:
	case SUPMSG_MODEL_CALL:
	case SUPMSG_SELFTEST:
		return decode_inspect(o, op, m);
	case SUPMSG_DIFF:
	case SUPMSG_DIFF_DONE:
		return decode_diff(o, op, m);
	case SUPMSG_OP_COUNT:
	default:
		return -EPROTO;
	}
}

int supmsg_decode(enum supmsg_dir dir, const uint8_t *p, size_t n, struct supmsg *ret)
{
	struct json_opts opts = { .max_bytes = SUPMSG_MAX, .max_depth = 4, .want_top = JSON_OBJECT };
	_cleanup_json_ json_t *o = NULL;
	struct supmsg m = { 0 };
	const char *op;
	size_t i;
	int r;

	if (n > SUPMSG_MAX) {
		return -E2BIG;
	}
	r = json_parse_strict(p, n, &opts, &o);
	if (r < 0) {
		return r;
	}
	if (json_get_string(o, "op", &op) < 0) {
		return -EBADMSG;
	}
	for (i = 0; i < SUPMSG_OP_COUNT; i++) {
		if (rules[i].dir == dir && strcmp(op, rules[i].name) == 0) {
			break;
		}
	}
	if (i == SUPMSG_OP_COUNT) {
		return -EPROTO;
	}
	m.op = (enum supmsg_op)i;
	r = decode_op(o, m.op, &m);
	if (r < 0) {
		supmsg_release(&m);
		return r;
	}
	*ret = m;
	return 0;
}

int supmsg_parse(const uint8_t *p, size_t n, struct supmsg *ret)
{
	return supmsg_decode(SUPMSG_TO_DAEMON, p, n, ret);
}

/* ---- encoding ---- */

static int put_str(json_t *o, const char *k, const char *v)
{
	if (!v) {
		return 0;
	}
	return json_object_set_new(o, k, json_string(v)) < 0 ? -EINVAL : 0;
}

static int put_int(json_t *o, const char *k, int64_t v)
{
	return json_object_set_new(o, k, json_integer(v)) < 0 ? -ENOMEM : 0;
}

static int put_bool(json_t *o, const char *k, bool v)
{
	return json_object_set_new(o, k, json_boolean(v)) < 0 ? -ENOMEM : 0;
}

static int put_strv(json_t *o, const char *k, char *const *v, size_t n)
{
	json_t *a;
	int r = n > 0 && !v ? -EINVAL : proto_json_strv(v, n, &a);

	if (r < 0) {
		return r;
	}
	return json_object_set_new(o, k, a) < 0 ? -ENOMEM : 0;
}

static int encode_egress(const struct supmsg *m, json_t *o)
{
	int r = 0;

	switch (m->op) {
	case SUPMSG_EGRESS_OPEN:
		r = put_int(o, "conn", m->conn);
		r = r < 0 ? r : put_str(o, "form", m->form_connect ? "connect" : "absolute");
		r = r < 0 ? r : put_str(o, "host", m->host);
		return r < 0 ? r : put_int(o, "port", m->port);
	case SUPMSG_EGRESS_DIAL:
		r = put_int(o, "conn", m->conn);
		r = r < 0 ? r : put_str(o, "url", m->url);
		r = r < 0 ? r : put_bool(o, "plain", m->plain);
		r = r < 0 ? r : put_bool(o, "inspect", m->inspect);
		return r < 0 ? r : put_bool(o, "model", m->model_host);
	case SUPMSG_EGRESS_REFUSE:
		r = put_int(o, "conn", m->conn);
		r = r < 0 ? r : put_int(o, "status", m->status);
		r = r < 0 ? r : put_str(o, "rule", m->rule);
		return r < 0 ? r : put_str(o, "message", m->message);
	case SUPMSG_EGRESS_DONE:
		r = put_int(o, "conn", m->conn);
		r = r < 0 ? r : put_int(o, "bytes_up", m->bytes_up);
		r = r < 0 ? r : put_int(o, "bytes_down", m->bytes_down);
		r = r < 0 ? r : put_int(o, "duration_ms", m->duration_ms);
		r = r < 0 ? r : put_str(o, "error", m->error);
		return r < 0 ? r : put_str(o, "rule", m->rule);
	case SUPMSG_EGRESS_REFUSED:
		r = put_str(o, "rule", m->rule);
		r = r < 0 ? r : put_str(o, "message", m->message);
		r = r < 0 ? r : put_str(o, "host", m->host);
		return r < 0 || m->port == 0 ? r : put_int(o, "port", m->port);
	default:
		return -EINVAL;
	}
}

static int encode_secrets(const struct supmsg *m, json_t *o)
{
	json_t *a = json_array(), *x;
	int r = a ? 0 : -ENOMEM;

	if (r < 0 || json_object_set_new(o, "secrets", a) < 0) {
		return -ENOMEM;
	}
	if (m->n_secrets > 0 && !m->secrets) {
		return -EINVAL;
	}
	for (size_t i = 0; i < m->n_secrets; i++) {
		const struct supmsg_secret *e = &m->secrets[i];

		x = json_object();
		if (!x || json_array_append_new(a, x) < 0) {
			return -ENOMEM;
		}
		r = put_str(x, "name", e->name);
		r = r < 0 ? r : put_str(x, "placeholder", e->placeholder);
		r = r < 0 ? r : put_str(x, "header", e->header);
		r = r < 0 ? r : put_strv(x, "hosts", e->hosts, e->n_hosts);
		r = r < 0 ? r : put_int(x, "len", e->len);
		if (r < 0) {
			return r;
		}
	}
	return 0;
}

static int encode_inspect(const struct supmsg *m, json_t *o)
{
	int r = 0;

	switch (m->op) {
	case SUPMSG_SECRETS:
		return encode_secrets(m, o);
	case SUPMSG_SECRET_USE:
	case SUPMSG_SECRET_LEAK:
		r = put_int(o, "conn", m->conn);
		r = r < 0 ? r : put_str(o, "secret", m->secret);
		r = r < 0 ? r : put_str(o, "host", m->host);
		return r < 0 || m->op == SUPMSG_SECRET_USE ? r : put_str(o, "reason", m->reason);
	case SUPMSG_SECRET_OK:
		r = put_int(o, "conn", m->conn);
		r = r < 0 ? r : put_bool(o, "ok", m->ok);
		return r < 0 ? r : put_str(o, "message", m->message);
	case SUPMSG_MODEL_CALL:
		r = put_int(o, "conn", m->conn);
		r = r < 0 ? r : put_str(o, "host", m->host);
		r = r < 0 ? r : put_str(o, "method", m->method);
		r = r < 0 ? r : put_str(o, "path", m->path);
		r = r < 0 ? r : put_int(o, "status", m->status);
		r = r < 0 ? r : put_int(o, "bytes_up", m->bytes_up);
		r = r < 0 ? r : put_int(o, "bytes_down", m->bytes_down);
		r = r < 0 ? r : put_int(o, "duration_ms", m->duration_ms);
		r = r < 0 ? r : put_str(o, "model", m->model);
		r = r < 0 || m->input_tokens < 0 ? r : put_int(o, "input_tokens", m->input_tokens);
		return r < 0 || m->output_tokens < 0 ? r : put_int(o, "output_tokens", m->output_tokens);
	case SUPMSG_SELFTEST:
		r = put_strv(o, "ran", m->ran, m->n_ran);
		r = r < 0 ? r : put_strv(o, "trusted", m->trusted, m->n_trusted);
		return r < 0 ? r : put_int(o, "clock_offset_ms", m->clock_offset_ms);
	default:
		return -EINVAL;
	}
}

static int encode_diff(const struct supmsg *m, json_t *o)
{
	json_t *a, *pair;
	int r = put_int(o, "diff", m->diff);

	if (r < 0 || m->op == SUPMSG_DIFF) {
		return r;
	}
	r = put_bool(o, "ok", m->ok);
	if (r < 0 || !m->ok) {
		return r < 0 ? r : put_str(o, "error", m->error);
	}
	r = put_str(o, "sha256", m->sha256);
	r = r < 0 ? r : put_int(o, "bytes", m->patch_bytes);
	r = r < 0 ? r : put_int(o, "files", m->files);
	if (r < 0) {
		return r;
	}
	if (m->n_notices > 0 && !m->notices) {
		return -EINVAL;
	}
	a = json_array();
	if (!a || json_object_set_new(o, "notices", a) < 0) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->n_notices; i++) {
		if (!m->notices[i].path || !m->notices[i].why) {
			return -EINVAL;
		}
		pair = json_pack("[ss]", m->notices[i].path, m->notices[i].why);
		if (!pair || json_array_append_new(a, pair) < 0) {
			return pair ? -ENOMEM : -EINVAL;
		}
	}
	return 0;
}

static int encode_members(const struct supmsg *m, json_t *o)
{
	int r = put_str(o, "op", rules[m->op].name);

	switch (m->op) {
	case SUPMSG_BOOT:
		r = r < 0 ? r : put_str(o, "box_id", m->box_id);
		r = r < 0 ? r : put_str(o, "rootfs", m->rootfs);
		r = r < 0 ? r : put_str(o, "workspace", m->workspace);
		r = r < 0 ? r : put_str(o, "state_dir", m->state_dir);
		r = r < 0 ? r : put_str(o, "guest", m->guest);
		r = r < 0 ? r : put_str(o, "accel", m->accel);
		r = r < 0 ? r : put_int(o, "vcpus", m->vcpus);
		r = r < 0 ? r : put_int(o, "mem_mib", m->mem_mib);
		r = r < 0 ? r : put_int(o, "scratch_mib", m->scratch_mib);
		r = r < 0 ? r : put_strv(o, "env", m->env, m->envc);
		r = r < 0 ? r : put_int(o, "lifetime_s", m->lifetime_s);
		r = r < 0 ? r : put_str(o, "console_keep", m->console_keep);
		r = r < 0 ? r : put_str(o, "kernel", m->kernel);
		r = r < 0 ? r : put_str(o, "modules", m->modules);
		r = r < 0 ? r : put_str(o, "ca_cert", m->ca_cert);
		r = r < 0 ? r : put_str(o, "ca_key", m->ca_key);
		return r < 0 ? r : put_str(o, "upstream_ca", m->upstream_ca);
	case SUPMSG_EXEC:
		r = r < 0 ? r : put_int(o, "exec", m->exec);
		r = r < 0 ? r : put_strv(o, "argv", m->argv, m->argc);
		r = r < 0 ? r : put_strv(o, "env", m->env, m->envc);
		r = r < 0 ? r : put_str(o, "cwd", m->cwd);
		r = r < 0 || (unsigned)m->stdin_mode >= ARRAY_SIZE(stdin_names)
			    ? (r < 0 ? r : -EINVAL)
			    : put_str(o, "stdin", stdin_names[m->stdin_mode]);
		return r < 0 ? r : put_int(o, "timeout_s", m->timeout_s);
	case SUPMSG_RELEASE:
		return r < 0 ? r : put_int(o, "exec", m->exec);
	case SUPMSG_STOP:
		return r;
	case SUPMSG_READY:
		r = r < 0 ? r : put_str(o, "accel", m->accel);
		r = r < 0 ? r : put_str(o, "isolation", m->isolation);
		return r < 0 ? r : put_int(o, "ready_ms", m->ready_ms);
	case SUPMSG_FAILED:
		return r < 0 ? r : put_str(o, "message", m->message);
	case SUPMSG_DONE:
		r = r < 0 ? r : put_int(o, "exec", m->exec);
		r = r < 0 ? r : put_str(o, "status", m->ok ? "ok" : "error");
		if (r >= 0 && m->has_exit) {
			r = put_int(o, m->exit.kind == EXIT_KIND_SIGNALED ? "signal" : "exit_code", m->exit.value);
		}
		r = r < 0 ? r : put_str(o, "error", m->error);
		r = r < 0 ? r : put_str(o, "stdin_sha256", m->stdin_sha256);
		return r < 0 || !m->stdin_sha256 ? r : put_int(o, "stdin_bytes", m->stdin_bytes);
	case SUPMSG_EVENT:
		r = r < 0 ? r : put_str(o, "event", m->event);
		return r < 0 ? r : put_str(o, "detail", m->detail);
	case SUPMSG_STOPPED:
		return r < 0 ? r : put_str(o, "reason", m->reason);
	case SUPMSG_EGRESS_OPEN:
	case SUPMSG_EGRESS_DIAL:
	case SUPMSG_EGRESS_REFUSE:
	case SUPMSG_EGRESS_DONE:
	case SUPMSG_EGRESS_REFUSED:
		return r < 0 ? r : encode_egress(m, o);
	case SUPMSG_SECRETS:
	case SUPMSG_SECRET_USE:
	case SUPMSG_SECRET_OK:
	case SUPMSG_SECRET_LEAK:
	case SUPMSG_MODEL_CALL:
	case SUPMSG_SELFTEST:
		return r < 0 ? r : encode_inspect(m, o);
	case SUPMSG_DIFF:
	case SUPMSG_DIFF_DONE:
		return r < 0 ? r : encode_diff(m, o);
	case SUPMSG_OP_COUNT:
	default:
		return -EINVAL;
	}
}

int supmsg_encode(const struct supmsg *m, json_t **ret)
{
	_cleanup_json_ json_t *o = NULL;
	_cleanup_free_ char *s = NULL;
	struct supmsg check;
	int r;

	if ((unsigned)m->op >= SUPMSG_OP_COUNT || (m->has_exit && !exit_status_valid(&m->exit))) {
		return -EINVAL;
	}
	o = json_object();
	if (!o) {
		return -ENOMEM;
	}
	r = encode_members(m, o);
	if (r < 0) {
		return r;
	}
	/* What the peer's decoder would refuse never leaves: the encoding is decoded once here. */
	s = json_dumps(o, JSON_COMPACT);
	if (!s) {
		return -ENOMEM;
	}
	r = supmsg_decode(rules[m->op].dir, (const uint8_t *)s, strlen(s), &check);
	if (m->ca_key) {
		explicit_bzero(s, strlen(s)); /* the box CA's key */
	}
	if (r < 0) {
		return r == -ENOMEM ? r : -EINVAL;
	}
	supmsg_release(&check);
	*ret = steal_ptr(o);
	return 0;
}

/* ---- the monitor ---- */

static const char *const state_names[] = {
	[SUPMON_INIT] = "before boot",	[SUPMON_BOOTING] = "booting", [SUPMON_UP] = "up",
	[SUPMON_STOPPING] = "stopping", [SUPMON_OVER] = "over",
};

void supmon_init(struct supmon *mon)
{
	*mon = (struct supmon){ .state = SUPMON_INIT };
}

const char *supmon_state_name(enum supmon_state s)
{
	return (unsigned)s < ARRAY_SIZE(state_names) ? state_names[s] : "?";
}

static ssize_t find_exec(const struct supmon *mon, int64_t exec)
{
	for (size_t i = 0; i < mon->n; i++) {
		if (mon->x[i].exec == exec) {
			return (ssize_t)i;
		}
	}
	return -1;
}

static ssize_t find_conn(const struct supmon *mon, int64_t conn)
{
	for (size_t i = 0; i < mon->nc; i++) {
		if (mon->c[i].conn == conn) {
			return (ssize_t)i;
		}
	}
	return -1;
}

/* The conn rows of the table: NULL when m may go, else the rule it breaks. */
static const char *conn_check(const struct supmon *mon, enum conn_rule rule, int64_t conn)
{
	ssize_t i = rule == CN_NONE ? -1 : find_conn(mon, conn);

	switch (rule) {
	case CN_NEW:
		if (i >= 0) {
			return "an egress conn number that is known already (each conn is asked once)";
		}
		return mon->nc >= SUPMON_MAX_CONNS ? "more egress conns asked or dialled than SUPMON_MAX_CONNS" : NULL;
	case CN_DIAL:
	case CN_REFUSE:
		return i < 0 || mon->c[i].dialled ? "an answer for an egress conn that is not waiting for one (never "
						    "asked, already dialled, or already answered)"
						  : NULL;
	case CN_DONE:
		if (i < 0 || !mon->c[i].dialled) {
			return "an end for an egress conn that was never dialled (or already ended)";
		}
		return mon->c[i].use_pending ? "an end for an egress conn whose secret_use is not answered yet (the "
					       "end waits for secret_ok)"
					     : NULL;
	case CN_USE:
		if (i < 0 || !mon->c[i].dialled) {
			return "a secret_use on an egress conn that is not dialled";
		}
		return mon->c[i].use_pending ? "a second secret_use on a conn before the first was answered" : NULL;
	case CN_OK:
		return i < 0 || !mon->c[i].use_pending ? "a secret_ok for a conn with no secret_use pending" : NULL;
	case CN_DIALLED:
		return i < 0 || !mon->c[i].dialled ? "a model_call on an egress conn that is not dialled" : NULL;
	case CN_NONE:
	default:
		return NULL;
	}
}

static void conn_apply(struct supmon *mon, enum conn_rule rule, int64_t conn)
{
	ssize_t i = find_conn(mon, conn);

	switch (rule) {
	case CN_NEW:
		mon->c[mon->nc].conn = conn;
		mon->c[mon->nc].dialled = false;
		mon->c[mon->nc].use_pending = false;
		mon->nc++;
		break;
	case CN_USE:
		mon->c[i].use_pending = true;
		break;
	case CN_OK:
		mon->c[i].use_pending = false;
		break;
	case CN_DIAL:
		mon->c[i].dialled = true;
		break;
	case CN_REFUSE:
	case CN_DONE:
		mon->c[i] = mon->c[--mon->nc];
		break;
	case CN_DIALLED:
	case CN_NONE:
	default:
		break;
	}
}

int supmon_check(const struct supmon *mon, enum supmsg_dir dir, const struct supmsg *m, const char **ret_why)
{
	const struct op_rule *rule;
	ssize_t i;
	const char *why = NULL;

	if ((unsigned)m->op >= SUPMSG_OP_COUNT) {
		why = "an operation outside the monitor's table";
	} else if ((rule = &rules[m->op])->dir != dir) {
		why = "an operation that goes the other way";
	} else if (!(rule->states & S(mon->state))) {
		why = "an operation the monitor's table does not allow in this state";
	} else {
		i = rule->exec == EX_NONE ? -1 : find_exec(mon, m->exec);
		switch (rule->exec) {
		case EX_NEW:
			if (i >= 0) {
				why = "an exec number that is open already (each exec is sent once)";
			} else if (mon->n >= SUPMON_MAX_EXECS) {
				why = "more open execs than SUPMON_MAX_EXECS";
			}
			break;
		case EX_OPEN:
			if (i < 0 || mon->x[i].done) {
				why = "a result for an exec that is not running (never sent, or already done)";
			}
			break;
		case EX_DONE:
			if (i < 0 || !mon->x[i].done) {
				why = "a release for an exec that is not done (never sent, running, or already "
				      "released)";
			}
			break;
		case EX_NONE:
		default:
			break;
		}
		if (!why) {
			why = conn_check(mon, rule->conn, m->conn);
		}
		if (!why && m->op == SUPMSG_EGRESS_DIAL && m->inspect && !mon->secrets_sent) {
			why = "an inspected egress_dial before the secrets message";
		}
		if (!why && rule->diff == DF_NEW && mon->diff != 0) {
			why = "a diff while another is pending (one at a time)";
		}
		if (!why && rule->diff == DF_DONE && (mon->diff == 0 || mon->diff != m->diff)) {
			why = "a diff_done for a diff that is not pending (never asked, or already answered)";
		}
		if (!why && (m->op == SUPMSG_SECRETS || m->op == SUPMSG_SELFTEST) &&
		    (m->op == SUPMSG_SECRETS ? mon->secrets_sent : m->op == SUPMSG_SELFTEST && mon->selftest_seen)) {
			why = m->op == SUPMSG_SECRETS ? "a second secrets message (sent once per box)"
						      : "a second selftest message (sent once per box)";
		}
	}
	if (why) {
		if (ret_why) {
			*ret_why = why;
		}
		return -EPROTO;
	}
	return 0;
}

int supmon_apply(struct supmon *mon, enum supmsg_dir dir, const struct supmsg *m, const char **ret_why)
{
	ssize_t i;
	int r = supmon_check(mon, dir, m, ret_why);

	if (r < 0) {
		return r;
	}
	switch (rules[m->op].exec) {
	case EX_NEW:
		mon->x[mon->n].exec = m->exec;
		mon->x[mon->n].done = false;
		mon->n++;
		break;
	case EX_OPEN:
		mon->x[find_exec(mon, m->exec)].done = true;
		break;
	case EX_DONE:
		i = find_exec(mon, m->exec);
		mon->x[i] = mon->x[--mon->n];
		break;
	case EX_NONE:
	default:
		break;
	}
	conn_apply(mon, rules[m->op].conn, m->conn);
	if (rules[m->op].diff == DF_NEW) {
		mon->diff = m->diff;
	} else if (rules[m->op].diff == DF_DONE) {
		mon->diff = 0;
	}
	if (m->op == SUPMSG_SECRETS) {
		mon->secrets_sent = true;
	} else if (m->op == SUPMSG_SELFTEST) {
		mon->selftest_seen = true;
	}
	if (rules[m->op].next >= 0) {
		mon->state = (enum supmon_state)rules[m->op].next;
	}
	return 0;
}

int supmon_receive(struct supmon *mon, const uint8_t *p, size_t n, struct supmsg *ret, const char **ret_why)
{
	struct supmsg m;
	int r = supmsg_decode(SUPMSG_TO_DAEMON, p, n, &m);

	if (r < 0) {
		if (ret_why) {
			*ret_why = r == -EPROTO	 ? "an operation outside the monitor's table"
				   : r == -E2BIG ? "a message past its caps (SUPMSG_MAX, SUPMSG_MAX_*)"
						 : "a malformed message";
		}
		return r;
	}
	r = supmon_apply(mon, SUPMSG_TO_DAEMON, &m, ret_why);
	if (r < 0) {
		supmsg_release(&m);
		return r;
	}
	*ret = m;
	return 0;
}
