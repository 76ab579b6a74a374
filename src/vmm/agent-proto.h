/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VMM_AGENT_PROTO_H
#define TKBOX_VMM_AGENT_PROTO_H

#include "buf.h"
#include "exit-status.h"
#include "patch/patch.h"

/*
 * The agent RPC spoken over the tkbox.agent port (the boot config served once
 * over tkbox.boot is in vmm/boot-proto.h; its frame types are below). Compiled into both the host (src/vmm) and the static
 * guest (src/guest): it needs buf, frame and json only, never libcrypto.
 *
 * Every message is one frame [type u8][len u32 BE][payload] (frame.h). The
 * frame type byte is the message kind. Control messages carry a strict JSON
 * object (closed key set); the three data messages carry raw bytes after a
 * 4-byte big-endian exec id, because a 64 MiB stdout must not be escaped.
 *
 * Flow control: the guest may send at most AGENT_OUT_WINDOW bytes of
 * stdout+stderr data per exec before the host returns credit with WINDOW;
 * the host may send at most AGENT_STDIN_WINDOW bytes of stdin per exec before
 * the guest returns credit with STDIN_WINDOW. A peer that overruns its
 * credit is a protocol violation.
 *
 * Decoders are pure: no I/O, no logging. A decoded message owns its strings;
 * data views point into the caller's payload.
 */

enum agent_msg_type {
	/* host -> guest */
	AGENT_MSG_PING = 0x01, /* {"id"} */
	AGENT_MSG_EXEC = 0x02, /* {"id","argv","cwd"?,"env"?,"stdin"?} */
	AGENT_MSG_STDIN = 0x03, /* binary: id, bytes; zero bytes = end of stdin */
	AGENT_MSG_SIGNAL = 0x04, /* {"id","signal"} */
	AGENT_MSG_WINDOW = 0x05, /* {"id","bytes"}: output credit returned */
	AGENT_MSG_SHUTDOWN = 0x06, /* {} */
	AGENT_MSG_CLOCK = 0x07, /* {"sec","nsec"}: the host's CLOCK_REALTIME; no reply */
	AGENT_MSG_DIFF = 0x08, /* {"id"}: make /workspace's patch (guest/diff.h); one at a time */
	/* guest -> host */
	AGENT_MSG_PONG = 0x81, /* {"id"} */
	AGENT_MSG_STARTED = 0x82, /* {"id","pid"} */
	AGENT_MSG_STDOUT = 0x83, /* binary: id, bytes */
	AGENT_MSG_STDERR = 0x84, /* binary: id, bytes */
	AGENT_MSG_EXIT = 0x85, /* {"id","code"} or {"id","signal"} */
	AGENT_MSG_ERROR = 0x86, /* {"id","code","message"}; id 0: not about one exec */
	AGENT_MSG_STDIN_WINDOW = 0x87, /* {"id","bytes"}: stdin credit returned */
	AGENT_MSG_SHUTDOWN_ACK = 0x88, /* {} */
	AGENT_MSG_DIFF_DATA = 0x89, /* binary: id, 1..AGENT_MAX_DATA bytes of the patch, in order */
	AGENT_MSG_DIFF_END = 0x8a, /* {"id","bytes","notices":[["path","why"],...]}: the patch is complete */
	/* tkbox.boot port */
	AGENT_MSG_BOOT_REQUEST = 0x91, /* guest -> host: {} the port is open, send the config */
	AGENT_MSG_BOOT_CONFIG = 0x10, /* host -> guest, once */
	AGENT_MSG_BOOT_ACK = 0x90, /* guest -> host: {} config received, host closes the port */
};

/* Caps (each has a unit test one past it). */
#define AGENT_MAX_EXECS 64 /* concurrent execs in one box */
#define AGENT_MAX_ID 0x7fffffffu /* exec ids are 1..AGENT_MAX_ID */
#define AGENT_MAX_ARGS 4096 /* argv entries */
#define AGENT_MAX_ENV 4096 /* env entries */
#define AGENT_MAX_STRING (128u * 1024) /* one argv/env/cwd/message string */
#define AGENT_MAX_JSON ((size_t)1 << 20) /* a JSON payload (= the frame cap) */
#define AGENT_MAX_DATA ((size_t)64 * 1024) /* bytes in one STDIN/STDOUT/STDERR frame */
#define AGENT_OUT_WINDOW ((uint64_t)1 << 20) /* stdout+stderr credit per exec */
#define AGENT_STDIN_WINDOW ((uint64_t)256 * 1024) /* stdin credit per exec */
#define AGENT_MAX_WINDOW_RETURN ((int64_t)1 << 30)
#define AGENT_MAX_CLOCK_SEC ((int64_t)1 << 40) /* CLOCK's "sec": past any real date, within time_t */
#define AGENT_CLOCK_INTERVAL_MS 60000 /* the host sends CLOCK after ready and then this often */

/* Error codes in AGENT_MSG_ERROR's "code" (a closed set). */
#define AGENT_ERR_BUSY "busy" /* AGENT_MAX_EXECS already running */
#define AGENT_ERR_EXEC "exec" /* the program could not be started */
#define AGENT_ERR_PROTO "protocol" /* a message the guest refused */
#define AGENT_ERR_DIFF "diff" /* the patch could not be made (a cap: the message names it) */

struct agent_msg {
	uint8_t type;
	uint32_t id;
	/* EXEC */
	char **argv; /* NULL-terminated */
	size_t argc;
	char **env; /* NULL-terminated, "K=V" */
	size_t envc;
	char *cwd; /* NULL: "/" */
	bool stdin_open; /* EXEC: stdin will be streamed (else /dev/null) */
	/* STARTED / SIGNAL / WINDOW / STDIN_WINDOW */
	int64_t pid;
	int64_t signal;
	/* EXIT: {"code"} or {"signal"}, never both */
	struct exit_status exit;
	int64_t bytes;
	/* CLOCK: 0..AGENT_MAX_CLOCK_SEC, 0..999999999 */
	int64_t clock_sec;
	int64_t clock_nsec;
	/* DIFF_END: bytes (0..PATCH_MAX_BYTES) above; notices as pairs path, why (2 * n_notices strings) */
	char **notices;
	size_t n_notices;
	/* ERROR */
	char *err_code;
	char *message;
	/* STDIN / STDOUT / STDERR / DIFF_DATA: a view into the decoded payload */
	const uint8_t *data;
	size_t data_len;
};

/* Free what a decoded (or caller-filled via agent_msg_set_*) message owns; accepts a zeroed struct. */
void agent_msg_release(struct agent_msg *m);

/* True for the types a host may send / a guest may send. */
bool agent_msg_from_host(uint8_t type);
bool agent_msg_from_guest(uint8_t type);

/*
 * Decode one frame's payload. -EBADMSG for malformed content, -EPROTO for an
 * unknown type, -E2BIG for a cap. On success *ret owns its strings.
 */
_wur_ int agent_msg_decode(uint8_t type, const uint8_t *p, size_t n, struct agent_msg *ret);

/* Encode m as one frame appended to out (all or nothing). */
_wur_ int agent_msg_encode(const struct agent_msg *m, struct buf *out);

/* Convenience encoders. */
_wur_ int agent_encode_data(struct buf *out, uint8_t type, uint32_t id, const void *p, size_t n);
_wur_ int agent_encode_simple(struct buf *out, uint8_t type, uint32_t id);
_wur_ int agent_encode_error(struct buf *out, uint32_t id, const char *code, const char *message);

/* Signals a host may ask for (SIGHUP SIGINT SIGQUIT SIGKILL SIGTERM). */
bool agent_signal_allowed(int64_t sig);

#endif
