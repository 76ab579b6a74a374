/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "banned.h"
#include "cli/apiclient.h"
#include "cli/commands.h"
#include "cli/config.h"
#include "cli/execclient.h"
#include "cli/mcp.h"
#include "cli/patchview.h"
#include "crypto.h"
#include "daemon/door.h"
#include "egress/secret.h"
#include "io.h"
#include "json.h"
#include "log.h"
#include "patch/patch.h"
#include "secmem.h"

/*
 * tkbox mcp: an MCP server over stdio (docs/cli.md, "tkbox mcp"). The
 * protocol is mcp.c's; this file is the I/O loop, the session and the tools,
 * each a client of the daemon's API. Logs go to stderr only: stdout carries
 * nothing but the protocol's lines.
 */

#define MCP_DEFAULT_MAX_BOXES 4
#define MCP_EXEC_MAX_OUTPUT ((size_t)1 << 20) /* collected per stream for the client */
#define MCP_DIFF_MAX_TEXT ((size_t)1 << 20) /* patch text given to the client */
#define MCP_EXPORT_MAX_BUNDLE ((uint64_t)512 << 20)
#define MCP_BOX_NAME_MAX 32

struct session {
	const char *state_dir;
	struct config cfg;
	size_t max_boxes;
	size_t max_message;
	char *export_dir; /* absolute, or NULL: tkbox_export refused */
	char prefix[24]; /* mcp-<8 hex>: this session's box names */
	char boxes[CONFIG_MCP_MAX_BOXES_MAX][MCP_BOX_NAME_MAX];
	size_t n_boxes;
	int guard_fd; /* the guardian's pipe: each box name, before its create is sent */
	int sig_fd;
	int quit_signo;
};

/* ---------------------------------------------------------------- tools' schemas */

/* clang-format off */
#define BOX_ARG "\"box\":{\"type\":\"string\",\"maxLength\":64,\"description\":\"a box this session created\"}"
#define LIMIT(n, lo, hi, what) \
	"\"" n "\":{\"type\":\"integer\",\"minimum\":" #lo ",\"maximum\":" #hi ",\"description\":\"" what \
	" (at most the operator's value; only when the operator set it)\"}"
#define ONLY_BOX "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"box\"],\"properties\":{" \
	BOX_ARG "}}"

static const struct mcp_tool tools[] = {
	{ "tkbox_run", "Start a box",
	  "Start a micro-VM box from the operator's setup and return its name. The call may narrow that setup (a "
	  "subset of its allow entries and secrets, lower limits), never widen it.",
	  "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{"
	  "\"image\":{\"type\":\"string\",\"maxLength\":1024,"
		"\"description\":\"the operator's image (the only one allowed; omit it)\"},"
	  "\"allow\":{\"type\":\"array\",\"maxItems\":512,\"items\":{\"type\":\"string\",\"maxLength\":300},"
		"\"description\":\"network allow entries: a subset of the operator's (default: all of them)\"},"
	  "\"secrets\":{\"type\":\"array\",\"maxItems\":16,\"items\":{\"type\":\"string\",\"maxLength\":64},"
		"\"description\":\"names of the operator's secrets to bind (default: all of them)\"},"
	  LIMIT("memory_mib", 128, 262144, "memory in MiB") ","
	  LIMIT("cpus", 1, 64, "vCPUs") ","
	  LIMIT("disk_mib", 64, 1048576, "disk in MiB") ","
	  LIMIT("timeout_s", 1, 604800, "the box's lifetime in seconds") ","
	  LIMIT("exec_timeout_s", 1, 604800, "each command's time limit in seconds") "}}" },
	{ "tkbox_exec", "Run a command in a box",
	  "Run a command in a box of this session after the signer decided it; returns its exit status, stdout and "
	  "stderr (each cut at 1 MiB). Give argv, or command (run by /bin/sh -c).",
	  "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"box\"],\"properties\":{" BOX_ARG ","
	  "\"argv\":{\"type\":\"array\",\"maxItems\":4096,\"items\":{\"type\":\"string\",\"maxLength\":131072}},"
	  "\"command\":{\"type\":\"string\",\"maxLength\":131072,\"description\":\"a shell command line\"},"
	  "\"cwd\":{\"type\":\"string\",\"maxLength\":4096,\"description\":\"absolute working directory\"},"
	  "\"env\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\",\"maxLength\":131072},"
		"\"description\":\"per-command environment\"},"
	  "\"stdin_data\":{\"type\":\"string\",\"maxLength\":1048576,"
		"\"description\":\"the command's stdin (UTF-8 text, at most 1 MiB), decided with the command\"},"
	  "\"timeout_s\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":604800}}}" },
	{ "tkbox_diff", "Show a box's changes",
	  "The box's changes to /workspace as a git patch, with a summary per file.", ONLY_BOX },
	{ "tkbox_stop", "Stop a box",
	  "Stop a box of this session; its patch is saved and its record stays open until export.", ONLY_BOX },
	{ "tkbox_export", "Export a box's signed record",
	  "Export a stopped box's signed bundle into the operator's export directory; returns the file's path.",
	  ONLY_BOX },
	{ "tkbox_ls", "List this session's boxes", "The boxes this session created, with their state.",
	  "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{}}" },
};
/* clang-format on */

/* ---------------------------------------------------------------- session */

static bool session_has(const struct session *s, const char *box)
{
	for (size_t i = 0; i < s->n_boxes; i++) {
		if (strcmp(s->boxes[i], box) == 0) {
			return true;
		}
	}
	return false;
}

/* The "box" argument, or a tool error for a box that is not this session's (*ret_err). */
static const char *session_box(const struct session *s, const json_t *args, const char *tool, json_t **ret_err)
{
	const char *box = json_string_value(json_object_get(args, "box"));

	if (!box || !session_has(s, box)) {
		char q[LOG_QUOTE_BUFSIZE];
		*ret_err = mcp_tool_errorf("%s: %s is not a box of this session (tkbox_ls lists them)", tool,
					   box ? log_quote(box, strlen(box), q) : "?");
		return NULL;
	}
	return box;
}

/* A daemon error reply as a tool error: "TOOL: MESSAGE". */
static json_t *daemon_error(const char *tool, int status, const json_t *reply)
{
	const json_t *e = json_object_get(reply, "error");
	const char *msg = json_string_value(json_object_get(e, "message"));
	json_t *r = mcp_tool_errorf("%s: %s", tool, msg ? msg : "the daemon refused");

	if (r && e) {
		(void)json_object_set_new(r, "structuredContent",
					  json_pack("{s:i,s:O}", "http_status", status, "error", (json_t *)e));
	}
	return r;
}

static json_t *call_daemon(struct session *s, const char *method, const char *path, const json_t *body, int *status)
{
	json_t *reply = NULL;

	if (apiclient_call(s->state_dir, method, path, body, status, &reply) < 0) {
		return NULL;
	}
	return reply;
}

/* ---------------------------------------------------------------- tkbox_run */

/* A limit the call asks for: at most the operator's, and only one the operator set. */
static json_t *narrow_limit(struct session *s, const json_t *args, json_t *body, const char *key, unsigned bit,
			    uint64_t have, const char *cfgkey)
{
	const json_t *v = json_object_get(args, key);

	if (!v) {
		if (s->cfg.has & bit) {
			(void)json_object_set_new(body, key, json_integer((json_int_t)have));
		}
		return NULL;
	}
	if (!(s->cfg.has & bit)) {
		return mcp_tool_errorf("tkbox_run: %s: the operator's config sets no %s, so a call may not set it", key,
				       cfgkey);
	}
	if ((uint64_t)json_integer_value(v) > have) {
		return mcp_tool_errorf("tkbox_run: %s %lld is above the operator's %s (%llu): a call may only lower it",
				       key, (long long)json_integer_value(v), cfgkey, (unsigned long long)have);
	}
	(void)json_object_set_new(body, key, json_integer(json_integer_value(v)));
	return NULL;
}

static bool cfg_allows(const struct session *s, const char *entry)
{
	for (size_t i = 0; i < s->cfg.n_allow; i++) {
		if (strcmp(s->cfg.allow[i], entry) == 0) {
			return true;
		}
	}
	return false;
}

static json_t *narrow_allow(struct session *s, const json_t *args, json_t *body)
{
	const json_t *want = json_object_get(args, "allow");
	json_t *v;
	json_t *out = json_array();
	size_t i;

	if (!out) {
		return mcp_tool_errorf("tkbox_run: out of memory");
	}
	if (!want) {
		for (i = 0; i < s->cfg.n_allow; i++) {
			(void)json_array_append_new(out, json_string(s->cfg.allow[i]));
		}
	}
	json_array_foreach(want, i, v) {
		if (!cfg_allows(s, json_string_value(v))) {
			char q[LOG_QUOTE_BUFSIZE];
			json_decref(out);
			return mcp_tool_errorf("tkbox_run: allow entry %s is not in the operator's allow list (a call "
					       "may pick a subset of it, never add to it)",
					       log_quote(json_string_value(v), json_string_length(v), q));
		}
		(void)json_array_append_new(out, json_string(json_string_value(v)));
	}
	if (json_array_size(out) > 0) {
		(void)json_object_set_new(body, "allow", out);
	} else {
		json_decref(out);
	}
	return NULL;
}

static const struct config_secret *cfg_secret(const struct session *s, const char *name)
{
	for (size_t i = 0; i < s->cfg.n_secrets; i++) {
		if (strcmp(s->cfg.secrets[i].name, name) == 0) {
			return &s->cfg.secrets[i];
		}
	}
	return NULL;
}

/* Read one operator secret's value from its source (env:, file:) into the create body's list. */
static json_t *add_secret(json_t *list, const struct config_secret *cs)
{
	_cleanup_free_ char *flag = NULL;
	struct egress_secret sec;
	bool stdin_used = true; /* stdin is the MCP client's channel */
	char err[1024];
	json_t *o;

	if (config_secret_flag(cs, &flag) < 0) {
		return mcp_tool_errorf("tkbox_run: out of memory");
	}
	if (run_secret_parse(flag, -1, &stdin_used, &sec, err, sizeof(err)) < 0) {
		explicit_bzero(flag, strlen(flag));
		return mcp_tool_errorf("tkbox_run: the operator's %s", err);
	}
	explicit_bzero(flag, strlen(flag));
	o = run_secret_json(&sec);
	secmem_free(sec.value, sec.value_len);
	if (!o || json_array_append_new(list, o) < 0) {
		return mcp_tool_errorf("tkbox_run: out of memory");
	}
	return NULL;
}

static json_t *narrow_secrets(struct session *s, const json_t *args, json_t *body)
{
	const json_t *want = json_object_get(args, "secrets"), *v;
	json_t *list = json_array(), *err;
	size_t i;

	if (!list || json_object_set_new(body, "secrets", list) < 0) {
		return mcp_tool_errorf("tkbox_run: out of memory");
	}
	/* Every name first, so that a refusal reads no value. */
	json_array_foreach(want, i, v) {
		if (!cfg_secret(s, json_string_value(v))) {
			char q[LOG_QUOTE_BUFSIZE];
			return mcp_tool_errorf("tkbox_run: secret %s is not one of the operator's secrets (a call may "
					       "pick some of them by name, never add one)",
					       log_quote(json_string_value(v), json_string_length(v), q));
		}
	}
	for (i = 0; i < (want ? json_array_size(want) : s->cfg.n_secrets); i++) {
		const struct config_secret *cs =
			want ? cfg_secret(s, json_string_value(json_array_get(want, i))) : &s->cfg.secrets[i];
		err = add_secret(list, cs);
		if (err) {
			return err;
		}
	}
	if (json_array_size(list) == 0) {
		(void)json_object_del(body, "secrets");
	}
	return NULL;
}

/* The box's record names the operator's file and what the call narrowed, as flags would (tkbox.box config). */
static json_t *record_config(const struct session *s, const json_t *args, json_t *body)
{
	static const char *const flags[][2] = {
		{ "allow", "--allow" },
		{ "secrets", "--secret" },
		{ "memory_mib", "--memory" },
		{ "cpus", "--cpus" },
		{ "disk_mib", "--disk" },
		{ "timeout_s", "--timeout" },
		{ "exec_timeout_s", "--exec-timeout" },
	};
	json_t *over = json_array();

	for (size_t i = 0; over && i < ARRAY_SIZE(flags); i++) {
		if (json_object_get(args, flags[i][0])) {
			(void)json_array_append_new(over, json_string(flags[i][1]));
		}
	}
	if (!over || !s->cfg.path ||
	    json_object_set_new(
		    body, "config",
		    json_pack("{s:s,s:s,s:o}", "file", s->cfg.path, "sha256", s->cfg.sha256, "overridden", over)) < 0) {
		return mcp_tool_errorf("tkbox_run: out of memory");
	}
	return NULL;
}

/* The create body from the operator's config, narrowed by the call; NULL and *ret_err on a refusal. */
static json_t *run_body(struct session *s, const json_t *args, json_t **ret_err)
{
	_cleanup_json_ json_t *body = json_object();
	const char *image = json_string_value(json_object_get(args, "image"));
	json_t *err = NULL;

	if (!body) {
		*ret_err = mcp_tool_errorf("tkbox_run: out of memory");
		return NULL;
	}
	if (image && strcmp(image, s->cfg.image) != 0) {
		char q[LOG_QUOTE_BUFSIZE];
		*ret_err = mcp_tool_errorf("tkbox_run: image %s is not the operator's image (the config names one "
					   "image; omit image)",
					   log_quote(image, strlen(image), q));
		return NULL;
	}
	(void)json_object_set_new(body, "image", json_string(s->cfg.image));
	if (s->cfg.workspace) {
		(void)json_object_set_new(body, "workspace", json_string(s->cfg.workspace));
	}
	(void)json_object_set_new(body, "inspect", json_string(s->cfg.inspect_all ? "all" : "none"));
	if (s->cfg.n_env > 0) {
		json_t *env = json_array();
		for (size_t i = 0; env && i < s->cfg.n_env; i++) {
			(void)json_array_append_new(env, json_string(s->cfg.env[i]));
		}
		(void)json_object_set_new(body, "env", env);
	}
	err = narrow_limit(s, args, body, "memory_mib", CONFIG_HAS_MEMORY, s->cfg.memory_mib, "limits.memory");
	err = err ? err : narrow_limit(s, args, body, "cpus", CONFIG_HAS_CPUS, s->cfg.cpus, "limits.cpus");
	err = err ? err : narrow_limit(s, args, body, "disk_mib", CONFIG_HAS_DISK, s->cfg.disk_mib, "limits.disk");
	err = err ? err
		  : narrow_limit(s, args, body, "timeout_s", CONFIG_HAS_TIMEOUT, s->cfg.timeout_s, "limits.timeout");
	err = err ? err
		  : narrow_limit(s, args, body, "exec_timeout_s", CONFIG_HAS_EXEC_TIMEOUT, s->cfg.exec_timeout_s,
				 "limits.exec_timeout");
	err = err ? err : narrow_allow(s, args, body);
	err = err ? err : record_config(s, args, body);
	err = err ? err : narrow_secrets(s, args, body);
	if (err) {
		run_secrets_wipe(body);
		*ret_err = err;
		return NULL;
	}
	return steal_ptr(body);
}

/* Tell the guardian the name before the create is sent: a session killed mid-create still stops its box. */
static int session_add(struct session *s, char *ret_name)
{
	char line[MCP_BOX_NAME_MAX + 1];
	int n;

	(void)snprintf(ret_name, MCP_BOX_NAME_MAX, "%s-%zu", s->prefix, s->n_boxes + 1);
	n = snprintf(line, sizeof(line), "%s\n", ret_name);
	if (io_write_all(s->guard_fd, line, (size_t)n) < 0) {
		return -EPIPE;
	}
	(void)snprintf(s->boxes[s->n_boxes++], MCP_BOX_NAME_MAX, "%s", ret_name);
	return 0;
}

static json_t *tool_run(struct session *s, const json_t *args)
{
	_cleanup_json_ json_t *reply = NULL;
	json_t *body, *err = NULL, *out;
	char name[MCP_BOX_NAME_MAX];
	int status = 0;

	if (s->n_boxes >= s->max_boxes) {
		return mcp_tool_errorf("tkbox_run: this session already created %zu boxes, its limit (mcp.max_boxes "
				       "in the server's --config raises it)",
				       s->max_boxes);
	}
	body = run_body(s, args, &err);
	if (!body) {
		return err;
	}
	if (session_add(s, name) < 0) {
		run_secrets_wipe(body);
		json_decref(body);
		return mcp_tool_errorf("tkbox_run: the session's guardian is gone; no box was started");
	}
	(void)json_object_set_new(body, "name", json_string(name));
	fprintf(stderr, "tkbox mcp: tkbox_run: starting box %s\n", name);
	reply = call_daemon(s, "POST", "/v1/boxes", body, &status);
	run_secrets_wipe(body);
	json_decref(body);
	if (!reply) {
		return mcp_tool_errorf("tkbox_run: the daemon did not answer (is tkbox daemon running?)");
	}
	if (status != 201) {
		return daemon_error("tkbox_run", status, reply);
	}
	out = json_pack("{s:s,s:O?,s:O?,s:O?,s:O?}", "box", name, "run_id", json_object_get(reply, "run_id"), "accel",
			json_object_get(reply, "accel"), "isolation", json_object_get(reply, "isolation"), "limits",
			json_object_get(reply, "limits"));
	return mcp_tool_result(name, false, out);
}

/* ---------------------------------------------------------------- tkbox_exec */

static bool env_name_ok(const char *k)
{
	if (!k[0] || (k[0] >= '0' && k[0] <= '9')) {
		return false;
	}
	for (const char *p = k; *p; p++) {
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) {
			return false;
		}
	}
	return true;
}

static json_t *exec_body(const json_t *args)
{
	const json_t *argv = json_object_get(args, "argv"), *cmd = json_object_get(args, "command");
	const json_t *envo = json_object_get(args, "env"), *v;
	json_t *body = json_object(), *env = json_array(), *av;
	const char *k;

	if (!body || !env) {
		json_decref(body);
		json_decref(env);
		return NULL;
	}
	av = argv ? json_incref((json_t *)argv) : json_pack("[s,s,O]", "/bin/sh", "-c", (json_t *)cmd);
	(void)json_object_set_new(body, "argv", av);
	json_object_foreach((json_t *)envo, k, v) {
		_cleanup_free_ char *kv = NULL;
		if (asprintf(&kv, "%s=%s", k, json_string_value(v)) >= 0) {
			(void)json_array_append_new(env, json_string(kv));
		}
	}
	(void)json_object_set_new(body, "env", env);
	if (json_object_get(args, "cwd")) {
		(void)json_object_set(body, "cwd", json_object_get(args, "cwd"));
	}
	if (json_object_get(args, "timeout_s")) {
		(void)json_object_set(body, "timeout_s", json_object_get(args, "timeout_s"));
	}
	return body;
}

static json_t *exec_result(const char *box, const struct execclient_result *res)
{
	json_t *o = json_object();
	_cleanup_free_ char *text = NULL;
	int r = o ? execclient_exit_json(o, &res->exit) : -ENOMEM;

	if (r >= 0) {
		r = execclient_output_json(o, "stdout", &res->out, res->out_total);
	}
	if (r >= 0) {
		r = execclient_output_json(o, "stderr", &res->errout, res->err_total);
	}
	if (r >= 0 && buf_len(&res->stream_error) > 0) {
		(void)json_object_set_new(
			o, "error",
			json_stringn((const char *)buf_ptr(&res->stream_error), buf_len(&res->stream_error)));
	}
	text = r >= 0 ? json_dumps(o, JSON_COMPACT) : NULL;
	if (!text) {
		json_decref(o);
		return NULL;
	}
	(void)box;
	return mcp_tool_result(text, false, o);
}

static json_t *tool_exec(struct session *s, const json_t *args)
{
	_cleanup_json_ json_t *body = NULL;
	struct execclient_result res;
	const json_t *sd = json_object_get(args, "stdin_data");
	const char *box;
	json_t *err = NULL, *out;
	struct execclient_opts o = { .state_dir = s->state_dir,
				     .stdin_fd = -1,
				     .out_fd = -1,
				     .err_fd = -1,
				     .collect_max = MCP_EXEC_MAX_OUTPUT,
				     .sig_fd = s->sig_fd,
				     .sig_ends = true };

	box = session_box(s, args, "tkbox_exec", &err);
	if (!box) {
		return err;
	}
	if (!json_object_get(args, "argv") == !json_object_get(args, "command") ||
	    (json_object_get(args, "argv") && json_array_size(json_object_get(args, "argv")) == 0)) {
		return mcp_tool_errorf("tkbox_exec: give argv (a non-empty list) or command, not both");
	}
	if (json_object_get(args, "timeout_s") && (s->cfg.has & CONFIG_HAS_EXEC_TIMEOUT) &&
	    (uint64_t)json_integer_value(json_object_get(args, "timeout_s")) > s->cfg.exec_timeout_s) {
		return mcp_tool_errorf("tkbox_exec: timeout_s is above the operator's limits.exec_timeout (%llu s)",
				       (unsigned long long)s->cfg.exec_timeout_s);
	}
	{
		const char *k;
		json_t *v;
		json_object_foreach(json_object_get(args, "env"), k, v) {
			if (!env_name_ok(k)) {
				char q[LOG_QUOTE_BUFSIZE];
				return mcp_tool_errorf(
					"tkbox_exec: env name %s is not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
					log_quote(k, strlen(k), q));
			}
		}
	}
	body = exec_body(args);
	if (!body) {
		return NULL;
	}
	o.box = box;
	o.body = body;
	if (sd) {
		o.stdin_mode = EXECCLIENT_STDIN_UPFRONT;
		o.stdin_data = (const uint8_t *)json_string_value(sd);
		o.stdin_len = json_string_length(sd);
	}
	if (execclient_run(&o, &res) < 0) {
		return mcp_tool_errorf("tkbox_exec: out of memory, or stdin_data over 1 MiB");
	}
	switch (res.outcome) {
	case EXECCLIENT_RAN:
		out = exec_result(box, &res);
		break;
	case EXECCLIENT_REFUSED: {
		_cleanup_json_ json_t *reply = json_pack("{s:O?}", "error", res.error);
		out = daemon_error("tkbox_exec", res.http_status, reply);
		break;
	}
	case EXECCLIENT_INTERRUPTED:
		s->quit_signo = res.intr_signo;
		out = mcp_tool_errorf("tkbox_exec: the server is shutting down (SIG%s); the command was ended",
				      sigabbrev_np(res.intr_signo) ? sigabbrev_np(res.intr_signo) : "?");
		break;
	case EXECCLIENT_FAILED:
	default:
		out = mcp_tool_errorf("tkbox_exec: the stream ended before the command's exit status (%s)%s%.*s",
				      tk_strerror(res.err), buf_len(&res.stream_error) ? ": " : "",
				      (int)buf_len(&res.stream_error), (const char *)buf_ptr(&res.stream_error));
		break;
	}
	execclient_result_release(&res);
	return out;
}

/* ---------------------------------------------------------------- tkbox_diff */

/* One request whose answer is a body (diff, export): c connected and its head read, or a tool error. */
static json_t *body_request(struct session *s, const char *tool, const char *method, const char *path,
			    struct apiclient **ret)
{
	struct apiclient *c = NULL;
	_cleanup_json_ json_t *reply = NULL;
	int r = apiclient_connect(s->state_dir, &c);

	if (r < 0) {
		return mcp_tool_errorf("%s: no daemon answers (%s)", tool, tk_strerror(r));
	}
	r = apiclient_request(c, method, path, NULL, false, NULL);
	if (r < 0) {
		apiclient_free(c);
		return mcp_tool_errorf("%s: the daemon's answer was cut or malformed: %s", tool, tk_strerror(r));
	}
	if (c->resp.status != 200) {
		int status = c->resp.status;
		r = apiclient_read_json(c, &reply);
		apiclient_free(c);
		return daemon_error(tool, status, r >= 0 ? reply : NULL);
	}
	*ret = c;
	return NULL;
}

static json_t *diff_result(const struct buf *body, const char *hex, const json_t *summary)
{
	struct patch p = { 0 };
	char diag[512] = "";
	size_t n = MIN(buf_len(body), MCP_DIFF_MAX_TEXT);
	json_t *o, *text = NULL;

	if (patch_parse(buf_ptr(body), buf_len(body), &p, diag, sizeof(diag)) < 0) {
		return mcp_tool_errorf("tkbox_diff: the patch received does not parse: %s", diag);
	}
	o = patchview_json(&p, hex, buf_len(body), json_is_true(json_object_get(summary, "saved")),
			   json_object_get(summary, "notices"),
			   json_integer_value(json_object_get(summary, "notices_total")));
	patch_release(&p);
	/* The agent's text, as data: UTF-8 cut at the cap (never inside a character; binary hunks are ASCII). */
	for (size_t back = 0; back < 4 && back <= n && !text; back++) {
		text = json_stringn((const char *)buf_ptr(body), n - back);
	}
	if (!o || !text) {
		json_decref(o);
		json_decref(text);
		return mcp_tool_errorf("tkbox_diff: the patch is not UTF-8 text; tkbox diff on the host shows it");
	}
	(void)json_object_set_new(o, "patch_truncated", json_boolean(json_string_length(text) < buf_len(body)));
	(void)json_object_set_new(o, "patch", text);
	return mcp_tool_result(buf_len(body) ? json_string_value(text) : "(no changes)", false, o);
}

static json_t *tool_diff(struct session *s, const json_t *args)
{
	_cleanup_json_ json_t *summary = NULL;
	struct apiclient *c = NULL;
	struct buf body = { 0 };
	char path[128], hex[SHA256_HEX_LEN + 1];
	const char *box;
	json_t *err = NULL;
	int r;

	box = session_box(s, args, "tkbox_diff", &err);
	if (!box) {
		return err;
	}
	(void)snprintf(path, sizeof(path), "/v1/boxes/%s/diff", box);
	err = body_request(s, "tkbox_diff", "GET", path, &c);
	if (err) {
		return err;
	}
	r = apiclient_read_body(c, PATCH_MAX_BYTES, &body);
	if (r >= 0) {
		r = sha256_hex(buf_ptr(&body), buf_len(&body), hex);
	}
	if (r < 0 || !c->resp.patch_sha256 || strcmp(hex, c->resp.patch_sha256) != 0) {
		err = mcp_tool_errorf("tkbox_diff: the patch received was cut or does not match the daemon's digest");
	} else {
		summary = patchview_summary_decode(c->resp.patch_summary);
		err = diff_result(&body, hex, summary);
	}
	buf_release(&body);
	apiclient_free(c);
	return err;
}

/* ---------------------------------------------------------------- tkbox_stop, tkbox_ls */

static json_t *tool_stop(struct session *s, const json_t *args)
{
	_cleanup_json_ json_t *reply = NULL;
	char path[128];
	const char *box;
	json_t *err = NULL, *out;
	int status = 0;

	box = session_box(s, args, "tkbox_stop", &err);
	if (!box) {
		return err;
	}
	(void)snprintf(path, sizeof(path), "/v1/boxes/%s/stop", box);
	reply = call_daemon(s, "POST", path, NULL, &status);
	if (!reply) {
		return mcp_tool_errorf("tkbox_stop: the daemon did not answer");
	}
	if (status != 200) {
		return daemon_error("tkbox_stop", status, reply);
	}
	fprintf(stderr, "tkbox mcp: tkbox_stop: box %s stopped\n", box);
	out = json_pack("{s:s,s:O?,s:O?}", "box", box, "state", json_object_get(reply, "state"), "patch",
			json_object_get(reply, "patch"));
	return mcp_tool_result("stopped; its patch is saved (tkbox_diff shows it, tkbox_export writes the record)",
			       false, out);
}

static json_t *tool_ls(struct session *s, const json_t *args)
{
	_cleanup_json_ json_t *reply = NULL;
	_cleanup_free_ char *text = NULL;
	json_t *list = json_array(), *b, *out;
	int status = 0;
	size_t i;

	(void)args;
	reply = call_daemon(s, "GET", "/v1/boxes", NULL, &status);
	if (!list || !reply || status != 200) {
		json_decref(list);
		return reply ? daemon_error("tkbox_ls", status, reply) : mcp_tool_errorf("tkbox_ls: no answer");
	}
	json_array_foreach(json_object_get(reply, "boxes"), i, b) {
		const char *name = json_string_value(json_object_get(b, "name"));
		if (name && session_has(s, name)) {
			(void)json_array_append_new(
				list, json_pack("{s:s,s:O?,s:O?,s:O?,s:O?,s:O?}", "name", name, "state",
						json_object_get(b, "state"), "run_id", json_object_get(b, "run_id"),
						"execs", json_object_get(b, "execs"), "created",
						json_object_get(b, "created"), "image", json_object_get(b, "image")));
		}
	}
	out = json_pack("{s:o}", "boxes", list);
	text = out ? json_dumps(out, JSON_COMPACT) : NULL;
	return text ? mcp_tool_result(text, false, out) : NULL;
}

/* ---------------------------------------------------------------- tkbox_export */

/* The trust file from the Tkbox-Trust header (base64url). */
static int trust_decode(const char *v, char **ret)
{
	struct buf tb;
	int r = buf_init(&tb, 8192, 0);

	if (r >= 0) {
		r = b64_decode(v, strlen(v), B64_URL, &tb);
	}
	if (r >= 0) {
		r = buf_dup_cstring(&tb, ret);
	}
	buf_release(&tb);
	return r;
}

/* Write DIR/BOX.tkb and DIR/BOX.trust.json: names the server picks, never the client. */
static json_t *export_write(struct session *s, const char *box, const struct buf *bundle, const char *trust,
			    const char *hex)
{
	_cleanup_free_ char *out = NULL, *tpath = NULL;
	struct stat st;
	int r;

	if (asprintf(&out, "%s/%s.tkb", s->export_dir, box) < 0 ||
	    asprintf(&tpath, "%s/%s.trust.json", s->export_dir, box) < 0) {
		return mcp_tool_errorf("tkbox_export: out of memory");
	}
	if (lstat(out, &st) == 0 || lstat(tpath, &st) == 0) {
		return mcp_tool_errorf("tkbox_export: %s exists already; nothing was overwritten", out);
	}
	r = io_write_file_atomic(out, buf_ptr(bundle), buf_len(bundle), 0644);
	if (r >= 0) {
		r = io_write_file_atomic(tpath, trust, strlen(trust), 0644);
	}
	if (r < 0) {
		return mcp_tool_errorf("tkbox_export: writing %s: %s", out, tk_strerror(r));
	}
	fprintf(stderr, "tkbox mcp: tkbox_export: wrote %s (%zu bytes, sha256 %s)\n", out, buf_len(bundle), hex);
	return mcp_tool_result(out, false,
			       json_pack("{s:s,s:s,s:s,s:I}", "bundle", out, "trust", tpath, "sha256", hex, "bytes",
					 (json_int_t)buf_len(bundle)));
}

static json_t *tool_export(struct session *s, const json_t *args)
{
	_cleanup_free_ char *trust = NULL;
	struct apiclient *c = NULL;
	struct buf bundle = { 0 };
	char path[128], hex[SHA256_HEX_LEN + 1];
	const char *box;
	json_t *err = NULL;
	int r;

	box = session_box(s, args, "tkbox_export", &err);
	if (!box) {
		return err;
	}
	if (!s->export_dir) {
		return mcp_tool_errorf("tkbox_export: exports are off: the operator starts tkbox mcp with --export-dir "
				       "DIR to allow them");
	}
	(void)snprintf(path, sizeof(path), "/v1/boxes/%s/export", box);
	err = body_request(s, "tkbox_export", "POST", path, &c);
	if (err) {
		return err;
	}
	r = c->resp.trust && c->resp.bundle_sha256 ? apiclient_read_body(c, MCP_EXPORT_MAX_BUNDLE, &bundle) : -EBADMSG;
	if (r >= 0) {
		r = sha256_hex(buf_ptr(&bundle), buf_len(&bundle), hex);
	}
	if (r >= 0 && strcmp(hex, c->resp.bundle_sha256) != 0) {
		r = -EBADMSG;
	}
	if (r >= 0) {
		r = trust_decode(c->resp.trust, &trust);
	}
	err = r < 0 ? mcp_tool_errorf("tkbox_export: the bundle received was cut, or does not match the signer's "
				      "digest, or its trust file is malformed; nothing written")
		    : export_write(s, box, &bundle, trust, hex);
	buf_release(&bundle);
	apiclient_free(c);
	return err;
}

/* ---------------------------------------------------------------- dispatch */

static int call_tool(void *ctx, const struct mcp_tool *tool, json_t *args, json_t **ret)
{
	struct session *s = ctx;
	json_t *r;

	if (strcmp(tool->name, "tkbox_run") == 0) {
		r = tool_run(s, args);
	} else if (strcmp(tool->name, "tkbox_exec") == 0) {
		r = tool_exec(s, args);
	} else if (strcmp(tool->name, "tkbox_diff") == 0) {
		r = tool_diff(s, args);
	} else if (strcmp(tool->name, "tkbox_stop") == 0) {
		r = tool_stop(s, args);
	} else if (strcmp(tool->name, "tkbox_export") == 0) {
		r = tool_export(s, args);
	} else {
		r = tool_ls(s, args);
	}
	if (!r) {
		return -ENOMEM;
	}
	if (json_is_true(json_object_get(r, "isError"))) {
		const char *t =
			json_string_value(json_object_get(json_array_get(json_object_get(r, "content"), 0), "text"));
		char q[LOG_QUOTE_BUFSIZE];
		fprintf(stderr, "tkbox mcp: %s\n", t ? log_quote(t, strlen(t), q) : tool->name);
	}
	*ret = r;
	return 0;
}

/* ---------------------------------------------------------------- the guardian */

/* Stop one box; a box still booting is asked again until it answers (or 5 minutes pass). */
static void guard_stop(const char *state_dir, const char *box)
{
	char path[128];

	(void)snprintf(path, sizeof(path), "/v1/boxes/%s/stop", box);
	for (int i = 0; i < 300; i++) {
		_cleanup_json_ json_t *reply = NULL;
		int status = 0;
		const char *code;
		if (apiclient_call(state_dir, "POST", path, NULL, &status, &reply) < 0) {
			return;
		}
		code = json_string_value(json_object_get(json_object_get(reply, "error"), "code"));
		if (status != 409 || !code || strcmp(code, "box_creating") != 0) {
			return;
		}
		(void)sleep(1);
	}
}

/*
 * The guardian: a child in its own session that learns each box name before
 * its create is sent and, when the server is gone whatever ended it (EOF,
 * a signal, even SIGKILL from an MCP client that gave up waiting), stops
 * every one of them. It holds none of the client's pipes.
 */
_noreturn_ static void guardian(int rfd, const char *state_dir)
{
	char names[CONFIG_MCP_MAX_BOXES_MAX][MCP_BOX_NAME_MAX];
	char line[4096];
	size_t n = 0, have = 0;
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	(void)setsid();
	if (null >= 0) {
		(void)dup2(null, 0);
		(void)dup2(null, 1);
		(void)dup2(null, 2);
	}
	for (;;) {
		ssize_t k = RETRY_EINTR(read(rfd, line + have, sizeof(line) - 1 - have));
		char *nl;
		if (k <= 0) {
			break;
		}
		have += (size_t)k;
		while ((nl = memchr(line, '\n', have))) {
			*nl = '\0';
			if (n < CONFIG_MCP_MAX_BOXES_MAX && door_box_name_ok(line) && strlen(line) < MCP_BOX_NAME_MAX) {
				memcpy(names[n++], line, strlen(line) + 1);
			}
			have -= (size_t)(nl + 1 - line);
			memmove(line, nl + 1, have);
		}
		if (have == sizeof(line) - 1) {
			have = 0;
		}
	}
	for (size_t i = 0; i < n; i++) {
		guard_stop(state_dir, names[i]);
	}
	_exit(0);
}

static int guardian_start(struct session *s)
{
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0) {
		return negative_errno();
	}
	pid = fork();
	if (pid < 0) {
		(void)close(p[0]);
		(void)close(p[1]);
		return negative_errno();
	}
	if (pid == 0) {
		(void)close(p[1]);
		(void)sigprocmask(SIG_SETMASK, &(sigset_t){ 0 }, NULL);
		/* SIGINT/SIGHUP/SIGTERM meant for the session must not stop its cleanup. */
		(void)signal(SIGINT, SIG_IGN);
		(void)signal(SIGHUP, SIG_IGN);
		(void)signal(SIGTERM, SIG_IGN);
		(void)signal(SIGPIPE, SIG_IGN);
		guardian(p[0], s->state_dir);
	}
	(void)close(p[0]);
	s->guard_fd = p[1];
	return 0;
}

/* ---------------------------------------------------------------- the loop */

static int send_reply(json_t *reply)
{
	_cleanup_free_ char *s = json_dumps(reply, JSON_COMPACT);
	int r;

	if (!s) {
		return -ENOMEM;
	}
	/* jansson escapes every control character in strings: the line holds no newline but its last. */
	r = io_write_all(STDOUT_FILENO, s, strlen(s));
	return r < 0 ? r : io_write_all(STDOUT_FILENO, "\n", 1);
}

static int handle_line(struct mcp_server *srv, const uint8_t *p, size_t n)
{
	json_t *reply = NULL;
	int r;

	if (n > 0 && p[n - 1] == '\r') {
		n--;
	}
	if (n == 0) {
		return 0;
	}
	r = mcp_handle(srv, p, n, &reply);
	if (r < 0) {
		return r;
	}
	if (reply) {
		r = send_reply(reply);
		json_decref(reply);
	}
	return r;
}

/* Split what arrived into lines; a line past the cap is dropped whole and answered with the limit's error. */
static int take_input(struct mcp_server *srv, struct buf *in, bool *skipping)
{
	for (;;) {
		const uint8_t *p = buf_ptr(in), *nl = memchr(p, '\n', buf_len(in));
		int r = 0;
		if (!nl) {
			if (buf_len(in) > srv->max_message) {
				*skipping = true;
				buf_reset(in);
			}
			return 0;
		}
		if (*skipping) {
			json_t *e = mcp_oversize_reply(srv->max_message);
			*skipping = false;
			fprintf(stderr, "tkbox mcp: refused a message larger than %zu bytes (mcp.max_message_bytes)\n",
				srv->max_message);
			r = e ? send_reply(e) : -ENOMEM;
			json_decref(e);
		} else {
			r = handle_line(srv, p, (size_t)(nl - p));
		}
		(void)buf_consume(in, (size_t)(nl - p) + 1);
		if (r < 0) {
			return r;
		}
	}
}

static int serve(struct session *s, struct mcp_server *srv)
{
	struct buf in;
	bool skipping = false;
	int r = buf_init(&in, srv->max_message + 65536 + 2, 0);

	while (r >= 0 && !s->quit_signo) {
		struct pollfd p[2] = { { .fd = STDIN_FILENO, .events = POLLIN },
				       { .fd = s->sig_fd, .events = POLLIN } };
		uint8_t *dst;
		ssize_t k;
		if (poll(p, 2, -1) < 0) {
			r = errno == EINTR ? 0 : negative_errno();
			continue;
		}
		if (p[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			if (read(s->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
				s->quit_signo = (int)si.ssi_signo;
			}
			continue;
		}
		if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			continue;
		}
		r = buf_reserve(&in, 65536, &dst);
		if (r < 0) {
			break;
		}
		k = RETRY_EINTR(read(STDIN_FILENO, dst, 65536));
		in.len -= 65536 - (k > 0 ? (size_t)k : 0);
		if (k <= 0) {
			r = k < 0 ? negative_errno() : 0;
			break; /* EOF: the client ended the session */
		}
		r = take_input(srv, &in, &skipping);
	}
	buf_release(&in);
	return r;
}

/* ---------------------------------------------------------------- setup */

static void usage(FILE *f)
{
	fprintf(f, "usage: tkbox mcp --config FILE [--export-dir DIR] [--state-dir D]\n"
		   "  an MCP server on stdin/stdout (docs/cli.md, \"tkbox mcp\"); FILE is the operator's tkbox.yaml,\n"
		   "  which a client's tool calls can only narrow; bundles are exported into DIR only\n");
}

static int session_config(struct session *s, const char *path)
{
	char err[1024];
	int r = config_load(path, &s->cfg, err, sizeof(err));

	if (r < 0) {
		fprintf(stderr, "tkbox mcp: %s\n", err);
		return r;
	}
	if (!(s->cfg.has & CONFIG_HAS_IMAGE)) {
		fprintf(stderr, "tkbox mcp: %s: no image: the operator's config names the image every box runs\n",
			path);
		return -EINVAL;
	}
	for (size_t i = 0; i < s->cfg.n_secrets; i++) {
		if (s->cfg.secrets[i].kind == CONFIG_SOURCE_STDIN) {
			fprintf(stderr,
				"tkbox mcp: %s: secret %s: the source stdin cannot be used (stdin is the MCP "
				"client's); use env: or file:\n",
				path, s->cfg.secrets[i].name);
			return -EINVAL;
		}
	}
	s->max_boxes = s->cfg.has & CONFIG_HAS_MCP_MAX_BOXES ? (size_t)s->cfg.mcp_max_boxes : MCP_DEFAULT_MAX_BOXES;
	s->max_boxes = MIN(s->max_boxes, (size_t)CONFIG_MCP_MAX_BOXES_MAX);
	s->max_message = s->cfg.has & CONFIG_HAS_MCP_MAX_MESSAGE ? (size_t)s->cfg.mcp_max_message_bytes
								 : MCP_DEFAULT_MAX_MESSAGE;
	return 0;
}

/* Relative image sources are the config file's: made absolute against its directory (the daemon has another cwd). */
static int session_image(struct session *s)
{
	static const char *const prefixes[] = { "oci:", "oci-archive:", "docker-archive:" };
	const char *prefix = "", *rest = s->cfg.image;
	_cleanup_free_ char *local = NULL;
	struct stat st;
	char *abs;

	for (size_t i = 0; i < ARRAY_SIZE(prefixes); i++) {
		if (strncmp(rest, prefixes[i], strlen(prefixes[i])) == 0) {
			prefix = prefixes[i];
			rest += strlen(prefixes[i]);
		}
	}
	if (rest[0] == '/' || !s->cfg.dir) {
		return 0;
	}
	if (asprintf(&local, "%s/%s", s->cfg.dir, rest) < 0) {
		return -ENOMEM;
	}
	if (!prefix[0] && stat(local, &st) < 0) {
		return 0; /* a registry reference */
	}
	if (asprintf(&abs, "%s%s", prefix, local) < 0) {
		return -ENOMEM;
	}
	free(s->cfg.image);
	s->cfg.image = abs;
	return 0;
}

static int session_setup(struct session *s, const char *config, const char *export_dir)
{
	sigset_t mask;
	char hex[9];
	int r = session_config(s, config);

	if (r >= 0) {
		r = session_image(s);
	}
	if (r >= 0 && export_dir) {
		s->export_dir = realpath(export_dir, NULL);
		if (!s->export_dir) {
			r = negative_errno();
			fprintf(stderr, "tkbox mcp: --export-dir %s: %s\n", export_dir, tk_strerror(r));
		}
	}
	if (r >= 0) {
		r = crypto_random_hex(4, hex);
	}
	if (r < 0) {
		return r;
	}
	(void)snprintf(s->prefix, sizeof(s->prefix), "mcp-%s", hex);
	/* SIGTERM, SIGINT and SIGHUP end the session (read in the loop); a write to a gone client fails instead. */
	(void)sigemptyset(&mask);
	(void)sigaddset(&mask, SIGINT);
	(void)sigaddset(&mask, SIGTERM);
	(void)sigaddset(&mask, SIGHUP);
	(void)signal(SIGPIPE, SIG_IGN);
	r = guardian_start(s);
	if (r < 0) {
		fprintf(stderr, "tkbox mcp: starting the session's guardian: %s\n", tk_strerror(r));
		return r;
	}
	(void)sigprocmask(SIG_BLOCK, &mask, NULL);
	s->sig_fd = signalfd(-1, &mask, SFD_CLOEXEC);
	return s->sig_fd < 0 ? negative_errno() : 0;
}

int cmd_mcp(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "export-dir", required_argument, NULL, 'e' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct session s = { .guard_fd = -1, .sig_fd = -1 };
	struct mcp_server srv = {
		.call = call_tool, .ctx = &s, .server_name = "tkbox", .server_version = TKBOX_VERSION
	};
	const char *config = NULL, *export_dir = NULL;
	int ch, r;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			config = optarg;
			break;
		case 'e':
			export_dir = optarg;
			break;
		case 'd':
			s.state_dir = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!config || optind != argc) {
		usage(stderr);
		return 2;
	}
	r = session_setup(&s, config, export_dir);
	if (r >= 0) {
		r = mcp_server_init(&srv, tools, ARRAY_SIZE(tools), s.max_message);
	}
	if (r >= 0) {
		srv.instructions =
			"Each tool call runs in a micro-VM box this session starts with tkbox_run; the boxes "
			"are stopped when the session ends. Commands are decided by a signer and recorded.";
		fprintf(stderr, "tkbox mcp: serving (boxes %s-N, at most %zu; messages up to %zu bytes)\n", s.prefix,
			s.max_boxes, s.max_message);
		r = serve(&s, &srv);
	}
	if (s.quit_signo) {
		fprintf(stderr, "tkbox mcp: SIG%s: ending the session\n",
			sigabbrev_np(s.quit_signo) ? sigabbrev_np(s.quit_signo) : "?");
	}
	if (s.n_boxes > 0) {
		fprintf(stderr, "tkbox mcp: the session ends: its %zu box%s stopped by its guardian\n", s.n_boxes,
			s.n_boxes == 1 ? " is" : "es are");
	}
	/* Closing the pipe is the guardian's signal: it stops every box of the session. */
	if (s.guard_fd >= 0) {
		(void)close(s.guard_fd);
	}
	if (s.sig_fd >= 0) {
		(void)close(s.sig_fd);
	}
	mcp_server_release(&srv);
	config_release(&s.cfg);
	free(s.export_dir);
	if (r < 0) {
		return 125;
	}
	return s.quit_signo ? 128 + s.quit_signo : 0;
}
