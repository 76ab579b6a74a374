/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_EXEC_STREAM_H
#define TKBOX_EXEC_STREAM_H

#include "buf.h"
#include "exit-status.h"
#include "frame.h"

/*
 * The exec stream: after the daemon answers an exec request with
 * "101 Switching Protocols" (Upgrade: tkbox-exec/1), the connection carries
 * frames (frame.h: [type u8][len u32 BE][payload]) between the client
 * (src/cli/cmd-exec.c) and the box's supervisor (src/daemon/supervisor.c).
 * This file holds the one encoder and decoder of its frames; both ends use
 * it. It is pure: no I/O, no logging.
 *
 * Flow control: the client may send at most the stdin credit the supervisor
 * granted (EXS_CREDIT frames add to it; the first grant is EXS_STDIN_WINDOW),
 * so a SIGNAL frame is never stuck behind stdin the command does not read.
 */

enum exec_stream_type {
	/* client -> supervisor */
	EXS_STDIN = 0x01, /* bytes (1..EXS_MAX_DATA) */
	EXS_STDIN_EOF = 0x02, /* empty */
	EXS_SIGNAL = 0x03, /* 1 byte: SIGINT, SIGTERM, SIGHUP, SIGQUIT or SIGKILL */
	/* supervisor -> client */
	EXS_STARTED = 0x81, /* empty: the program runs */
	EXS_STDOUT = 0x82, /* bytes (1..EXS_MAX_DATA) */
	EXS_STDERR = 0x83, /* bytes (1..EXS_MAX_DATA) */
	EXS_EXIT = 0x84, /* 5 bytes: kind u8 (enum exit_kind), value u32 BE (struct exit_status) */
	EXS_ERROR = 0x85, /* text (1..EXS_MAX_ERROR bytes, no NUL): why it did not run or was cut */
	EXS_CREDIT = 0x86, /* 4 bytes u32 BE, 1..EXS_STDIN_WINDOW: more stdin may be sent */
};

#define EXS_MAX_DATA ((size_t)64 * 1024)
#define EXS_MAX_FRAME (EXS_MAX_DATA + 16) /* the frame decoder's payload cap on both ends */
#define EXS_MAX_ERROR ((size_t)4096)
#define EXS_STDIN_WINDOW ((uint32_t)256 * 1024)

enum exs_dir {
	EXS_FROM_CLIENT,
	EXS_FROM_SUPERVISOR,
};

/* One decoded frame. data points into the caller's payload (STDIN, STDOUT, STDERR, ERROR). */
struct exs_frame {
	uint8_t type;
	const uint8_t *data;
	size_t len;
	uint8_t signal; /* SIGNAL */
	struct exit_status exit; /* EXIT */
	uint32_t credit; /* CREDIT */
};

/* The signals a client may ask for. */
bool exs_signal_allowed(int sig);

/*
 * Decode one frame's payload sent in direction dir: -EPROTO for a type that
 * does not go that way, -EBADMSG for a payload that breaks its type's size
 * or value rule, -E2BIG past a cap.
 */
_wur_ int exs_decode(enum exs_dir dir, uint8_t type, const uint8_t *p, size_t n, struct exs_frame *ret);

/* Append f as one frame to out (all or nothing); -EINVAL when f breaks the rules exs_decode checks. */
_wur_ int exs_encode(const struct exs_frame *f, struct buf *out);

/* Convenience encoders. */
_wur_ int exs_encode_bytes(struct buf *out, uint8_t type, const void *p, size_t n);
_wur_ int exs_encode_exit(struct buf *out, const struct exit_status *s);
_wur_ int exs_encode_credit(struct buf *out, uint32_t credit);
_wur_ int exs_encode_signal(struct buf *out, int sig);

#endif
