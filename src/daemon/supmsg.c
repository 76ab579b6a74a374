/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "banned.h"
#include "daemon/supmsg.h"
#include "json.h"

static int text(const json_t *o, const char *key, bool required, const char **ret)
{
	int r = json_get_string(o, key, ret);

	if (r == -ENOENT && !required) {
		*ret = NULL;
		return 0;
	}
	if (r < 0) {
		return -EBADMSG;
	}
	return strlen(*ret) > SUPMSG_MAX_TEXT ? -E2BIG : 0;
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

static bool one_of(const char *s, const char *a, const char *b)
{
	return strcmp(s, a) == 0 || strcmp(s, b) == 0;
}

int supmsg_parse(const uint8_t *p, size_t n, struct supmsg *ret)
{
	struct json_opts opts = { .max_bytes = SUPMSG_MAX, .max_depth = 4, .want_top = JSON_OBJECT };
	struct supmsg m = { 0 };
	const char *op;
	int r;

	if (n > SUPMSG_MAX) {
		return -E2BIG;
	}
	r = json_parse_strict(p, n, &opts, &m.obj);
	if (r < 0) {
		return r;
	}
	r = json_get_string(m.obj, "op", &op) < 0 ? -EBADMSG : 0;
	if (r < 0) {
		goto fail;
	}
	if (strcmp(op, "ready") == 0) {
		m.op = SUPMSG_READY;
		r = json_only_keys(m.obj, (const char *const[]){ "op", "accel", "isolation", "ready_ms", NULL });
		if (r >= 0) {
			r = text(m.obj, "accel", true, &m.accel);
		}
		if (r >= 0) {
			r = text(m.obj, "isolation", true, &m.isolation);
		}
		if (r >= 0) {
			r = integer(m.obj, "ready_ms", 0, 86400000, NULL, &m.ready_ms);
		}
		if (r >= 0 && (!one_of(m.accel, "kvm", "tcg") || !one_of(m.isolation, "kvm", "emulated"))) {
			r = -EBADMSG;
		}
	} else if (strcmp(op, "failed") == 0) {
		m.op = SUPMSG_FAILED;
		r = json_only_keys(m.obj, (const char *const[]){ "op", "message", NULL });
		if (r >= 0) {
			r = text(m.obj, "message", true, &m.message);
		}
	} else if (strcmp(op, "done") == 0) {
		m.op = SUPMSG_DONE;
		r = json_only_keys(m.obj, (const char *const[]){ "op", "exec", "status", "exit_code", "signal", "error",
								 "stdin_sha256", "stdin_bytes", NULL });
		if (r >= 0) {
			r = integer(m.obj, "exec", 1, INT32_MAX, NULL, &m.exec);
		}
		if (r >= 0) {
			r = text(m.obj, "status", true, &m.status);
		}
		if (r >= 0 && !one_of(m.status, "ok", "error")) {
			r = -EBADMSG;
		}
		if (r >= 0) {
			r = integer(m.obj, "exit_code", 0, 255, &m.has_exit_code, &m.exit_code);
		}
		if (r >= 0) {
			r = integer(m.obj, "signal", 1, 64, &m.has_signal, &m.signal);
		}
		if (r >= 0) {
			r = text(m.obj, "error", false, &m.error);
		}
		if (r >= 0) {
			r = text(m.obj, "stdin_sha256", false, &m.stdin_sha256);
		}
		if (r >= 0) {
			r = integer(m.obj, "stdin_bytes", 0, INT64_C(1) << 50, &m.has_stdin, &m.stdin_bytes);
		}
		if (r >= 0 && (m.has_stdin != (m.stdin_sha256 != NULL) || (m.has_exit_code && m.has_signal))) {
			r = -EBADMSG;
		}
		if (r >= 0 && m.stdin_sha256) {
			size_t len = strlen(m.stdin_sha256);
			r = len == 64 && strspn(m.stdin_sha256, "0123456789abcdef") == 64 ? 0 : -EBADMSG;
		}
	} else if (strcmp(op, "event") == 0) {
		m.op = SUPMSG_EVENT;
		r = json_only_keys(m.obj, (const char *const[]){ "op", "event", "detail", NULL });
		if (r >= 0) {
			r = text(m.obj, "event", true, &m.event);
		}
		if (r >= 0) {
			r = text(m.obj, "detail", false, &m.detail);
		}
	} else if (strcmp(op, "stopped") == 0) {
		m.op = SUPMSG_STOPPED;
		r = json_only_keys(m.obj, (const char *const[]){ "op", "reason", NULL });
		if (r >= 0) {
			r = text(m.obj, "reason", true, &m.reason);
		}
	} else {
		r = -EPROTO;
	}
	if (r < 0) {
		goto fail;
	}
	*ret = m;
	return 0;
fail:
	json_decref(m.obj);
	return r;
}

void supmsg_release(struct supmsg *m)
{
	if (m) {
		json_decref(m->obj);
		*m = (struct supmsg){ 0 };
	}
}
