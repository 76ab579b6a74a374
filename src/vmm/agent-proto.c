/* SPDX-License-Identifier: Apache-2.0 */
#include <signal.h>
#include <string.h>

#include "banned.h"
#include "strv.h"
#include "frame.h"
#include "json.h"
#include "vmm/agent-proto.h"
#include "vmm/proto-json.h"

void agent_msg_release(struct agent_msg *m)
{
	if (!m) {
		return;
	}
	strv_free(m->argv);
	strv_free(m->env);
	strv_free(m->notices);
	free(m->cwd);
	free(m->err_code);
	free(m->message);
	*m = (struct agent_msg){ 0 };
}

bool agent_msg_from_host(uint8_t type)
{
	switch (type) {
	case AGENT_MSG_PING:
	case AGENT_MSG_EXEC:
	case AGENT_MSG_STDIN:
	case AGENT_MSG_SIGNAL:
	case AGENT_MSG_WINDOW:
	case AGENT_MSG_SHUTDOWN:
	case AGENT_MSG_CLOCK:
	case AGENT_MSG_DIFF:
		return true;
	default:
		return false;
	}
}

bool agent_msg_from_guest(uint8_t type)
{
	switch (type) {
	case AGENT_MSG_PONG:
	case AGENT_MSG_STARTED:
	case AGENT_MSG_STDOUT:
	case AGENT_MSG_STDERR:
	case AGENT_MSG_EXIT:
	case AGENT_MSG_ERROR:
	case AGENT_MSG_STDIN_WINDOW:
	case AGENT_MSG_SHUTDOWN_ACK:
	case AGENT_MSG_DIFF_DATA:
	case AGENT_MSG_DIFF_END:
		return true;
	default:
		return false;
	}
}

bool agent_signal_allowed(int64_t sig)
{
	return exit_signal_forwardable(sig);
}

static bool is_data_type(uint8_t type)
{
	return type == AGENT_MSG_STDIN || type == AGENT_MSG_STDOUT || type == AGENT_MSG_STDERR ||
	       type == AGENT_MSG_DIFF_DATA;
}

/* A string member with a byte cap; an embedded NUL cannot occur (strict JSON refuses \u0000). */
int proto_get_string(const json_t *obj, const char *key, size_t max, char **ret)
{
	const char *s;
	int r;

	r = json_get_string(obj, key, &s);
	if (r < 0) {
		return r;
	}
	if (strlen(s) > max) {
		return -E2BIG;
	}
	char *d = strdup(s);
	if (!d) {
		return -ENOMEM;
	}
	*ret = d;
	return 0;
}

/* An array of strings, each at most max_len, at most max_n of them; env entries must be K=V with K non-empty. */
int proto_get_strv(const json_t *obj, const char *key, size_t max_n, size_t max_len, bool env, char ***ret,
		   size_t *ret_n)
{
	json_t *arr;
	char **v;
	size_t n;
	int r;

	r = json_get_array(obj, key, &arr);
	if (r < 0) {
		return r;
	}
	n = json_array_size(arr);
	if (n > max_n) {
		return -E2BIG;
	}
	v = calloc(n + 1, sizeof(*v));
	if (!v) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(arr, i);
		const char *s;
		if (!json_is_string(e)) {
			strv_free(v);
			return -EBADMSG;
		}
		s = json_string_value(e);
		if (strlen(s) > max_len) {
			strv_free(v);
			return -E2BIG;
		}
		if (env) {
			const char *eq = strchr(s, '=');
			if (!eq || eq == s) {
				strv_free(v);
				return -EBADMSG;
			}
		}
		v[i] = strdup(s);
		if (!v[i]) {
			strv_free(v);
			return -ENOMEM;
		}
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

static int get_id(const json_t *obj, bool allow_zero, uint32_t *ret)
{
	int64_t v;
	int r;

	r = json_get_int(obj, "id", &v);
	if (r < 0) {
		return r;
	}
	if (v < (allow_zero ? 0 : 1) || v > (int64_t)AGENT_MAX_ID) {
		return -EBADMSG;
	}
	*ret = (uint32_t)v;
	return 0;
}

static int decode_exec(const json_t *o, struct agent_msg *m)
{
	static const char *const keys[] = { "id", "argv", "cwd", "env", "stdin", NULL };
	int r;

	r = json_only_keys(o, keys);
	if (r < 0) {
		return r;
	}
	r = get_id(o, false, &m->id);
	if (r < 0) {
		return r;
	}
	r = proto_get_strv(o, "argv", AGENT_MAX_ARGS, AGENT_MAX_STRING, false, &m->argv, &m->argc);
	if (r < 0) {
		return r;
	}
	if (m->argc == 0 || m->argv[0][0] == '\0') {
		return -EBADMSG;
	}
	r = proto_get_strv(o, "env", AGENT_MAX_ENV, AGENT_MAX_STRING, true, &m->env, &m->envc);
	if (r == -ENOENT) {
		m->env = calloc(1, sizeof(char *));
		if (!m->env) {
			return -ENOMEM;
		}
	} else if (r < 0) {
		return r;
	}
	r = proto_get_string(o, "cwd", AGENT_MAX_STRING, &m->cwd);
	if (r < 0 && r != -ENOENT) {
		return r;
	}
	if (m->cwd && m->cwd[0] != '/') {
		return -EBADMSG;
	}
	r = json_get_bool(o, "stdin", &m->stdin_open);
	if (r < 0 && r != -ENOENT) {
		return r;
	}
	return 0;
}

/* DIFF_END's notices: at most PATCH_MAX_NOTICES pairs [path, why], each string 1..PATCH_MAX_NOTICE bytes. */
static int decode_notices(const json_t *o, struct agent_msg *m)
{
	json_t *arr;
	size_t n;
	int r;

	r = json_get_array(o, "notices", &arr);
	if (r < 0) {
		return r;
	}
	n = json_array_size(arr);
	if (n > PATCH_MAX_NOTICES) {
		return -E2BIG;
	}
	m->notices = calloc(2 * n + 1, sizeof(char *));
	if (!m->notices) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *pair = json_array_get(arr, i);
		if (!json_is_array(pair) || json_array_size(pair) != 2) {
			return -EBADMSG;
		}
		for (size_t k = 0; k < 2; k++) {
			json_t *e = json_array_get(pair, k);
			size_t len = json_is_string(e) ? json_string_length(e) : 0;
			if (len == 0) {
				return -EBADMSG;
			}
			if (len > PATCH_MAX_NOTICE) {
				return -E2BIG;
			}
			m->notices[2 * i + k] = strdup(json_string_value(e));
			if (!m->notices[2 * i + k]) {
				return -ENOMEM;
			}
		}
	}
	m->n_notices = n;
	return 0;
}

static int decode_diff_end(const json_t *o, struct agent_msg *m)
{
	static const char *const keys[] = { "id", "bytes", "notices", NULL };
	int r;

	r = json_only_keys(o, keys);
	if (r >= 0) {
		r = get_id(o, false, &m->id);
	}
	if (r >= 0) {
		r = json_get_int(o, "bytes", &m->bytes);
	}
	if (r >= 0 && (m->bytes < 0 || (uint64_t)m->bytes > PATCH_MAX_BYTES)) {
		r = -EBADMSG;
	}
	return r < 0 ? r : decode_notices(o, m);
}

static int decode_json(uint8_t type, const uint8_t *p, size_t n, struct agent_msg *m)
{
	static const char *const k_id[] = { "id", NULL };
	static const char *const k_none[] = { NULL };
	static const char *const k_sig[] = { "id", "signal", NULL };
	static const char *const k_win[] = { "id", "bytes", NULL };
	static const char *const k_started[] = { "id", "pid", NULL };
	static const char *const k_exit[] = { "id", "code", "signal", NULL };
	static const char *const k_err[] = { "id", "code", "message", NULL };
	static const char *const k_clock[] = { "sec", "nsec", NULL };
	struct json_opts opts = JSON_OPTS_DEFAULT;
	_cleanup_json_ json_t *o = NULL;
	int64_t a, b;
	int r, rb;

	opts.max_bytes = AGENT_MAX_JSON;
	opts.max_depth = 4;
	r = json_parse_strict(p, n, &opts, &o);
	if (r < 0) {
		return r;
	}
	switch (type) {
	case AGENT_MSG_PING:
	case AGENT_MSG_PONG:
		r = json_only_keys(o, k_id);
		return r < 0 ? r : get_id(o, true, &m->id);
	case AGENT_MSG_DIFF:
		r = json_only_keys(o, k_id);
		return r < 0 ? r : get_id(o, false, &m->id);
	case AGENT_MSG_DIFF_END:
		return decode_diff_end(o, m);
	case AGENT_MSG_SHUTDOWN:
	case AGENT_MSG_SHUTDOWN_ACK:
	case AGENT_MSG_BOOT_ACK:
	case AGENT_MSG_BOOT_REQUEST:
		return json_only_keys(o, k_none);
	case AGENT_MSG_EXEC:
		return decode_exec(o, m);
	case AGENT_MSG_SIGNAL:
		r = json_only_keys(o, k_sig);
		if (r >= 0) {
			r = get_id(o, false, &m->id);
		}
		if (r >= 0) {
			r = json_get_int(o, "signal", &m->signal);
		}
		if (r >= 0 && !agent_signal_allowed(m->signal)) {
			r = -EBADMSG;
		}
		return r;
	case AGENT_MSG_WINDOW:
	case AGENT_MSG_STDIN_WINDOW:
		r = json_only_keys(o, k_win);
		if (r >= 0) {
			r = get_id(o, false, &m->id);
		}
		if (r >= 0) {
			r = json_get_int(o, "bytes", &m->bytes);
		}
		if (r >= 0 && (m->bytes < 1 || m->bytes > AGENT_MAX_WINDOW_RETURN)) {
			r = -EBADMSG;
		}
		return r;
	case AGENT_MSG_STARTED:
		r = json_only_keys(o, k_started);
		if (r >= 0) {
			r = get_id(o, false, &m->id);
		}
		if (r >= 0) {
			r = json_get_int(o, "pid", &m->pid);
		}
		if (r >= 0 && (m->pid < 1 || m->pid > INT32_MAX)) {
			r = -EBADMSG;
		}
		return r;
	case AGENT_MSG_EXIT:
		r = json_only_keys(o, k_exit);
		if (r >= 0) {
			r = get_id(o, false, &m->id);
		}
		if (r < 0) {
			return r;
		}
		/* Exactly one of code / signal. */
		r = json_get_int(o, "code", &a);
		rb = json_get_int(o, "signal", &b);
		if (r >= 0 && rb == -ENOENT && a >= 0 && a <= EXIT_MAX_CODE) {
			m->exit = (struct exit_status){ .kind = EXIT_KIND_EXITED, .value = (uint32_t)a };
			return 0;
		}
		if (r == -ENOENT && rb >= 0 && b >= 1 && b <= EXIT_MAX_SIGNAL) {
			m->exit = (struct exit_status){ .kind = EXIT_KIND_SIGNALED, .value = (uint32_t)b };
			return 0;
		}
		return -EBADMSG;
	case AGENT_MSG_CLOCK:
		r = json_only_keys(o, k_clock);
		if (r >= 0) {
			r = json_get_int(o, "sec", &m->clock_sec);
		}
		if (r >= 0) {
			r = json_get_int(o, "nsec", &m->clock_nsec);
		}
		if (r >= 0 && (m->clock_sec < 0 || m->clock_sec > AGENT_MAX_CLOCK_SEC || m->clock_nsec < 0 ||
			       m->clock_nsec > 999999999)) {
			r = -EBADMSG;
		}
		return r;
	case AGENT_MSG_ERROR:
		r = json_only_keys(o, k_err);
		if (r >= 0) {
			r = get_id(o, true, &m->id);
		}
		if (r >= 0) {
			r = proto_get_string(o, "code", 64, &m->err_code);
		}
		if (r >= 0) {
			r = proto_get_string(o, "message", 4096, &m->message);
		}
		return r;
	default:
		return -EPROTO;
	}
}

int agent_msg_decode(uint8_t type, const uint8_t *p, size_t n, struct agent_msg *ret)
{
	struct agent_msg m = { .type = type };
	int r;

	if (!agent_msg_from_host(type) && !agent_msg_from_guest(type) && type != AGENT_MSG_BOOT_ACK &&
	    type != AGENT_MSG_BOOT_REQUEST) {
		return -EPROTO;
	}
	if (is_data_type(type)) {
		uint32_t id;
		if (n < 4) {
			return -EBADMSG;
		}
		if (n - 4 > AGENT_MAX_DATA) {
			return -E2BIG;
		}
		id = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
		if (id < 1 || id > AGENT_MAX_ID) {
			return -EBADMSG;
		}
		/* Output frames are never empty; an empty STDIN frame is end of stdin. */
		if (n == 4 && type != AGENT_MSG_STDIN) {
			return -EBADMSG;
		}
		m.id = id;
		m.data = p + 4;
		m.data_len = n - 4;
		*ret = m;
		return 0;
	}
	r = decode_json(type, p, n, &m);
	if (r < 0) {
		agent_msg_release(&m);
		return r;
	}
	*ret = m;
	return 0;
}

int proto_json_strv(char *const *v, size_t n, json_t **ret)
{
	json_t *a = json_array();

	if (!a) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		if (json_array_append_new(a, json_string(v[i])) < 0) {
			json_decref(a);
			return -EINVAL;
		}
	}
	*ret = a;
	return 0;
}

int proto_set_int(json_t *o, const char *k, int64_t v)
{
	return json_object_set_new(o, k, json_integer(v)) < 0 ? -ENOMEM : 0;
}

int proto_set_str(json_t *o, const char *k, const char *v)
{
	/* json_string refuses invalid UTF-8: that is a caller error worth reporting. */
	return json_object_set_new(o, k, json_string(v)) < 0 ? -EINVAL : 0;
}

int proto_emit_json(struct buf *out, uint8_t type, const json_t *o)
{
	struct buf tmp;
	int r;

	r = buf_init(&tmp, AGENT_MAX_JSON, 0);
	if (r < 0) {
		return r;
	}
	r = json_write_jcs(o, &tmp);
	if (r >= 0) {
		r = frame_encode(out, type, buf_ptr(&tmp), buf_len(&tmp));
	}
	buf_release(&tmp);
	return r;
}

static int encode_diff_end(const struct agent_msg *m, json_t *o)
{
	json_t *arr;
	int r;

	if (m->n_notices > PATCH_MAX_NOTICES || m->bytes < 0 || (uint64_t)m->bytes > PATCH_MAX_BYTES ||
	    (m->n_notices > 0 && !m->notices)) {
		return -EINVAL;
	}
	r = proto_set_int(o, "id", m->id);
	r = r < 0 ? r : proto_set_int(o, "bytes", m->bytes);
	arr = r < 0 ? NULL : json_array();
	if (r >= 0 && (!arr || json_object_set_new(o, "notices", arr) < 0)) {
		return -ENOMEM;
	}
	for (size_t i = 0; r >= 0 && i < m->n_notices; i++) {
		json_t *pair;
		for (size_t k = 0; k < 2; k++) {
			const char *s = m->notices[2 * i + k];
			if (!s || s[0] == '\0' || strlen(s) > PATCH_MAX_NOTICE) {
				return -EINVAL;
			}
		}
		r = proto_json_strv(m->notices + 2 * i, 2, &pair);
		if (r >= 0 && json_array_append_new(arr, pair) < 0) {
			r = -ENOMEM;
		}
	}
	return r;
}

int agent_msg_encode(const struct agent_msg *m, struct buf *out)
{
	_cleanup_json_ json_t *o = NULL;
	json_t *a;
	int r = 0;

	if (is_data_type(m->type)) {
		return agent_encode_data(out, m->type, m->id, m->data, m->data_len);
	}
	o = json_object();
	if (!o) {
		return -ENOMEM;
	}
	switch (m->type) {
	case AGENT_MSG_SHUTDOWN:
	case AGENT_MSG_SHUTDOWN_ACK:
	case AGENT_MSG_BOOT_ACK:
	case AGENT_MSG_BOOT_REQUEST:
		break;
	case AGENT_MSG_PING:
	case AGENT_MSG_PONG:
		r = proto_set_int(o, "id", m->id);
		break;
	case AGENT_MSG_DIFF:
		r = m->id < 1 || m->id > AGENT_MAX_ID ? -EINVAL : proto_set_int(o, "id", m->id);
		break;
	case AGENT_MSG_DIFF_END:
		r = encode_diff_end(m, o);
		break;
	case AGENT_MSG_EXEC:
		if (!m->argv || m->argc == 0 || m->argc > AGENT_MAX_ARGS || m->envc > AGENT_MAX_ENV) {
			return -EINVAL;
		}
		r = proto_set_int(o, "id", m->id);
		if (r >= 0) {
			r = proto_json_strv(m->argv, m->argc, &a);
			if (r >= 0) {
				r = json_object_set_new(o, "argv", a) < 0 ? -ENOMEM : 0;
			}
		}
		if (r >= 0 && m->env && m->envc > 0) {
			r = proto_json_strv(m->env, m->envc, &a);
			if (r >= 0) {
				r = json_object_set_new(o, "env", a) < 0 ? -ENOMEM : 0;
			}
		}
		if (r >= 0 && m->cwd) {
			r = proto_set_str(o, "cwd", m->cwd);
		}
		if (r >= 0 && m->stdin_open) {
			r = json_object_set_new(o, "stdin", json_true()) < 0 ? -ENOMEM : 0;
		}
		break;
	case AGENT_MSG_SIGNAL:
		r = proto_set_int(o, "id", m->id);
		if (r >= 0) {
			r = proto_set_int(o, "signal", m->signal);
		}
		break;
	case AGENT_MSG_WINDOW:
	case AGENT_MSG_STDIN_WINDOW:
		r = proto_set_int(o, "id", m->id);
		if (r >= 0) {
			r = proto_set_int(o, "bytes", m->bytes);
		}
		break;
	case AGENT_MSG_STARTED:
		r = proto_set_int(o, "id", m->id);
		if (r >= 0) {
			r = proto_set_int(o, "pid", m->pid);
		}
		break;
	case AGENT_MSG_EXIT:
		r = proto_set_int(o, "id", m->id);
		if (r >= 0) {
			r = !exit_status_valid(&m->exit)       ? -EINVAL
			    : m->exit.kind == EXIT_KIND_EXITED ? proto_set_int(o, "code", m->exit.value)
							       : proto_set_int(o, "signal", m->exit.value);
		}
		break;
	case AGENT_MSG_CLOCK:
		if (m->clock_sec < 0 || m->clock_sec > AGENT_MAX_CLOCK_SEC || m->clock_nsec < 0 ||
		    m->clock_nsec > 999999999) {
			return -EINVAL;
		}
		r = proto_set_int(o, "sec", m->clock_sec);
		if (r >= 0) {
			r = proto_set_int(o, "nsec", m->clock_nsec);
		}
		break;
	case AGENT_MSG_ERROR:
		r = proto_set_int(o, "id", m->id);
		if (r >= 0) {
			r = proto_set_str(o, "code", m->err_code ? m->err_code : AGENT_ERR_PROTO);
		}
		if (r >= 0) {
			r = proto_set_str(o, "message", m->message ? m->message : "");
		}
		break;
	default:
		return -EPROTO;
	}
	if (r < 0) {
		return r;
	}
	return proto_emit_json(out, m->type, o);
}

int agent_encode_data(struct buf *out, uint8_t type, uint32_t id, const void *p, size_t n)
{
	size_t need;
	uint8_t *w;
	int r;

	if (!is_data_type(type) || n > AGENT_MAX_DATA || id < 1 || id > AGENT_MAX_ID) {
		return -EINVAL;
	}
	need = FRAME_HEADER_SIZE + 4 + n;
	if (buf_avail(out) < need) {
		return -E2BIG;
	}
	r = buf_reserve(out, need, &w);
	if (r < 0) {
		return r;
	}
	w[0] = type;
	w[1] = (uint8_t)((n + 4) >> 24);
	w[2] = (uint8_t)((n + 4) >> 16);
	w[3] = (uint8_t)((n + 4) >> 8);
	w[4] = (uint8_t)(n + 4);
	w[5] = (uint8_t)(id >> 24);
	w[6] = (uint8_t)(id >> 16);
	w[7] = (uint8_t)(id >> 8);
	w[8] = (uint8_t)id;
	if (n > 0) {
		memcpy(w + 9, p, n);
	}
	return 0;
}

int agent_encode_simple(struct buf *out, uint8_t type, uint32_t id)
{
	struct agent_msg m = { .type = type, .id = id };

	return agent_msg_encode(&m, out);
}

int agent_encode_error(struct buf *out, uint32_t id, const char *code, const char *message)
{
	struct agent_msg m = { .type = AGENT_MSG_ERROR, .id = id };
	int r;

	/* The message struct owns its strings; borrow them for the encode only. */
	m.err_code = (char *)code;
	m.message = (char *)message;
	r = agent_msg_encode(&m, out);
	return r;
}
