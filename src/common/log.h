/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_LOG_H
#define TKBOX_LOG_H

#include <stdarg.h>
#include <time.h>

#include "macro.h"

/*
 * The one logger. Only top layers (main programs, daemons) log; common/ and
 * parsers never do. Lines go to stderr (or a set fd) as
 *   LEVEL file:line function: message
 * Strings from a guest, the network or a user go through log_quote, which
 * caps and escapes them. A secret's value never reaches a log line.
 */

enum log_level {
	LOG_LVL_ERR = 0,
	LOG_LVL_WARN = 1,
	LOG_LVL_INFO = 2,
	LOG_LVL_DEBUG = 3,
};

void log_set_level(enum log_level lvl);
enum log_level log_get_level(void);
void log_set_fd(int fd);
void log_set_ident(const char *ident);

void log_emit(enum log_level lvl, const char *file, int line, const char *func, const char *fmt, ...) _printf_(5, 6);

#define log_error(...) log_emit(LOG_LVL_ERR, __FILE__, __LINE__, __func__, __VA_ARGS__)
#define log_warn(...) log_emit(LOG_LVL_WARN, __FILE__, __LINE__, __func__, __VA_ARGS__)
#define log_info(...) log_emit(LOG_LVL_INFO, __FILE__, __LINE__, __func__, __VA_ARGS__)
#define log_debug(...) log_emit(LOG_LVL_DEBUG, __FILE__, __LINE__, __func__, __VA_ARGS__)

/* Log and return r (negative errno): return log_errno(r, "..."). */
#define log_error_errno(r, fmt, ...)                                                                                   \
	({                                                                                                             \
		int _e_ = (r);                                                                                         \
		log_emit(LOG_LVL_ERR, __FILE__, __LINE__, __func__, fmt ": %s", ##__VA_ARGS__, tk_strerror(_e_));      \
		_e_;                                                                                                   \
	})

/*
 * Quote an untrusted string for a log line: wraps in double quotes, escapes
 * '"', '\\' and every byte outside printable ASCII as \xNN, and cuts at
 * LOG_QUOTE_MAX input bytes with a trailing "..." marker. out must hold
 * LOG_QUOTE_BUFSIZE bytes. Returns out.
 */
#define LOG_QUOTE_MAX 200
#define LOG_QUOTE_BUFSIZE (LOG_QUOTE_MAX * 4 + 8)
const char *log_quote(const void *p, size_t n, char out[LOG_QUOTE_BUFSIZE]);

/*
 * A token-bucket rate limiter for lines a guest can trigger: at most burst
 * lines per interval_ms; log_ratelimit_ok reports whether this line may pass
 * and counts the suppressed ones (reported on the next allowed line).
 */
struct log_ratelimit {
	uint64_t interval_ms;
	unsigned burst;
	uint64_t window_start_ms;
	unsigned count;
	unsigned suppressed;
};
#define LOG_RATELIMIT_INIT(ms, b) ((struct log_ratelimit){ .interval_ms = (ms), .burst = (b) })
bool log_ratelimit_ok(struct log_ratelimit *rl, uint64_t now_ms, unsigned *ret_suppressed);

/* The one error table: a message for a negative errno, with tkbox's meanings for the ones parsers return. */
const char *tk_strerror(int r);

#endif
