/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_CLI_EXECCLIENT_H
#define TKBOX_CLI_EXECCLIENT_H

#include <jansson.h>

#include "buf.h"
#include "exit-status.h"

/*
 * The client side of one exec (tkbox exec, tkbox exec --json, tkbox mcp's
 * tkbox_exec): POST /v1/boxes/NAME/exec with Upgrade: tkbox-exec/1, the
 * interim 102 approvals, the 101, then the exec stream's frames
 * (src/common/exec-stream.h) until EXIT. Output is either written to fds as
 * it comes, or collected into bounded buffers: bytes past the cap are counted
 * and dropped (the command keeps running; a client that stops reading would
 * get it killed at the daemon's 8 MiB queue).
 */

/* Cap on one collected stream for tkbox exec --json (per stream). */
#define EXECCLIENT_JSON_MAX_OUTPUT ((size_t)4 << 20)

enum execclient_stdin {
	EXECCLIENT_STDIN_NONE,
	EXECCLIENT_STDIN_UPFRONT, /* stdin_data[0..stdin_len), at most DOOR_MAX_STDIN: decided with its digest */
	/* read from stdin_fd under the supervisor's credit; stdin_data[0..stdin_len) (at most DOOR_MAX_STDIN + 1),
	 * read from it already, goes first */
	EXECCLIENT_STDIN_STREAM,
};

struct execclient_opts {
	const char *state_dir; /* NULL: the default */
	const char *box;
	/* {argv, env?, cwd?, timeout_s?}: borrowed; execclient sets "stdin" in it */
	json_t *body;
	enum execclient_stdin stdin_mode;
	const uint8_t *stdin_data;
	size_t stdin_len;
	int stdin_fd;
	/* Output: written to out_fd / err_fd as it arrives when >= 0, else collected up to collect_max bytes. */
	int out_fd;
	int err_fd;
	size_t collect_max;
	/*
	 * A signalfd (or -1): before the 101 a signal gives up (result intr_signo); after it, each signal is sent
	 * to the command (the third as SIGKILL).
	 */
	int sig_fd;
	/* tkbox mcp: after the 101 a signal ends the stream too (the command is killed when the connection closes) */
	bool sig_ends;
	void (*on_approval)(const char *id, void *ctx);
	void *ctx;
};

enum execclient_outcome {
	EXECCLIENT_RAN, /* exit holds how the command ended */
	EXECCLIENT_REFUSED, /* the daemon answered an error: http_status, error (its {"error": ...} object) */
	EXECCLIENT_INTERRUPTED, /* a signal on sig_fd before the command was let through: nothing started */
	EXECCLIENT_FAILED, /* no daemon, a cut answer or stream: errno, and stream_error if the box said why */
};

struct execclient_result {
	enum execclient_outcome outcome;
	struct exit_status exit;
	int http_status;
	json_t *error; /* EXECCLIENT_REFUSED: the daemon's error object (owned), or NULL when it sent none */
	int intr_signo;
	int err; /* EXECCLIENT_FAILED: -errno */
	bool connected; /* false: no daemon answered (apiclient printed why) */
	/* EXS_ERROR texts (why it did not start or was cut), joined with "; ", at most EXS_MAX_ERROR + 1 bytes */
	struct buf stream_error;
	/* collected output (out_fd / err_fd < 0) and the totals the box sent */
	struct buf out;
	struct buf errout;
	uint64_t out_total;
	uint64_t err_total;
};

/*
 * Run one exec. Returns 0 with *ret filled in whatever the outcome (release
 * it with execclient_result_release), or -ENOMEM / -EINVAL before anything
 * was sent. The daemon connection failure prints its one line (apiclient).
 */
_wur_ int execclient_run(const struct execclient_opts *o, struct execclient_result *ret);
void execclient_result_release(struct execclient_result *r);

/*
 * One collected stream as JSON members of obj: "NAME" (text) when the bytes
 * are UTF-8 without NUL, else "NAME_base64"; "NAME_bytes" (the total the box
 * sent) and "NAME_truncated" (true when bytes past the cap were dropped).
 */
_wur_ int execclient_output_json(json_t *obj, const char *name, const struct buf *b, uint64_t total);

/* How it ended as JSON members: "exit_code" N, or "signal" N and "signal_name" ("KILL"). */
_wur_ int execclient_exit_json(json_t *obj, const struct exit_status *s);

#endif
