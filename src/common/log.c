/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "log.h"

static enum log_level log_level = LOG_LVL_INFO;
static int log_fd = STDERR_FILENO;
static const char *log_ident = "tkbox";

void log_set_level(enum log_level lvl)
{
	log_level = lvl;
}

enum log_level log_get_level(void)
{
	return log_level;
}

void log_set_fd(int fd)
{
	log_fd = fd;
}

void log_set_ident(const char *ident)
{
	log_ident = ident;
}

static const char *level_name(enum log_level lvl)
{
	switch (lvl) {
	case LOG_LVL_ERR:
		return "error";
	case LOG_LVL_WARN:
		return "warning";
	case LOG_LVL_INFO:
		return "info";
	case LOG_LVL_DEBUG:
		return "debug";
	default:
		return "?";
	}
}

/* Log lines are bounded: a longer message is cut, never split over writes. */
#define LOG_LINE_MAX 2048

void log_emit(enum log_level lvl, const char *file, int line, const char *func, const char *fmt, ...)
{
	char msg[LOG_LINE_MAX];
	const char *base;
	va_list ap;
	int n, m;

	if (lvl > log_level) {
		return;
	}
	base = strrchr(file, '/');
	base = base ? base + 1 : file;
	if (log_level >= LOG_LVL_DEBUG) {
		n = snprintf(msg, sizeof(msg), "%s: %s %s:%d %s: ", log_ident, level_name(lvl), base, line, func);
	} else {
		n = snprintf(msg, sizeof(msg), "%s: %s: ", log_ident, level_name(lvl));
	}
	if (n < 0 || (size_t)n >= sizeof(msg)) {
		return;
	}
	va_start(ap, fmt);
	m = vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
	va_end(ap);
	if (m < 0) {
		return;
	}
	n = (size_t)n + (size_t)m >= sizeof(msg) - 1 ? (int)sizeof(msg) - 2 : n + m;
	msg[n++] = '\n';
	/* One write per line so concurrent writers do not interleave within a line. */
	(void)!write(log_fd, msg, (size_t)n);
}

const char *log_quote(const void *p, size_t n, char out[LOG_QUOTE_BUFSIZE])
{
	static const char hexd[] = "0123456789abcdef";
	const uint8_t *s = p;
	size_t o = 0, lim = MIN(n, (size_t)LOG_QUOTE_MAX);

	out[o++] = '"';
	for (size_t i = 0; i < lim; i++) {
		uint8_t c = s[i];
		if (c == '"' || c == '\\') {
			out[o++] = '\\';
			out[o++] = (char)c;
		} else if (c >= 0x20 && c < 0x7f) {
			out[o++] = (char)c;
		} else {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hexd[c >> 4];
			out[o++] = hexd[c & 15];
		}
	}
	out[o++] = '"';
	if (n > lim) {
		out[o++] = '.';
		out[o++] = '.';
		out[o++] = '.';
	}
	out[o] = 0;
	return out;
}

bool log_ratelimit_ok(struct log_ratelimit *rl, uint64_t now_ms, unsigned *ret_suppressed)
{
	if (rl->window_start_ms == 0 || now_ms < rl->window_start_ms ||
	    now_ms - rl->window_start_ms >= rl->interval_ms) {
		unsigned s = rl->suppressed;
		rl->window_start_ms = now_ms ? now_ms : 1;
		rl->count = 1;
		rl->suppressed = 0;
		if (ret_suppressed) {
			*ret_suppressed = s;
		}
		return true;
	}
	if (rl->count < rl->burst) {
		rl->count++;
		if (ret_suppressed) {
			*ret_suppressed = 0;
		}
		return true;
	}
	rl->suppressed++;
	return false;
}

const char *tk_strerror(int r)
{
	switch (r) {
	case 0:
		return "success";
	case -E2BIG:
		return "input exceeds a size limit";
	case -EBADMSG:
		return "malformed input";
	case -EPROTO:
		return "protocol error";
	case -ENODATA:
		return "input truncated";
	case -ELOOP:
		return "path crosses a symbolic link or nests too deep";
	case -ENAMETOOLONG:
		return "path too long";
	case -EOVERFLOW:
		return "size overflow";
	case -EDOM:
		return "value cannot be represented";
	default:
		return strerror(r < 0 ? -r : r);
	}
}
