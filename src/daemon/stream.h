/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_STREAM_H
#define TKBOX_DAEMON_STREAM_H

#include "frame.h"

/*
 * The exec stream: after the daemon answers an exec request with
 * "101 Switching Protocols" (Upgrade: tkbox-exec/1), the connection carries
 * frames (frame.h: [type u8][len u32 BE][payload]) between the client and the
 * box's supervisor.
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
	EXS_STDOUT = 0x82, /* bytes */
	EXS_STDERR = 0x83, /* bytes */
	EXS_EXIT = 0x84, /* 5 bytes: kind u8 (0 exited, 1 killed by a signal), value u32 BE */
	EXS_ERROR = 0x85, /* UTF-8 text: why it did not run or was cut; an EXIT follows or the stream ends */
	EXS_CREDIT = 0x86, /* 4 bytes u32 BE: more stdin may be sent */
};

#define EXS_MAX_DATA ((size_t)64 * 1024)
#define EXS_MAX_FRAME (EXS_MAX_DATA + 16)
#define EXS_STDIN_WINDOW ((uint32_t)256 * 1024)
#define EXS_EXIT_EXITED 0
#define EXS_EXIT_SIGNAL 1

#endif
