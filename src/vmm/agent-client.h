/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VMM_AGENT_CLIENT_H
#define TKBOX_VMM_AGENT_CLIENT_H

#include "vmm/agent-proto.h"

/*
 * The host's agent RPC client over the tkbox.agent socket. Everything the
 * guest sends is hostile: every frame is bounded (AGENT_CLIENT_MAX_FRAME),
 * strict JSON, of a type a guest may send, about an exec the host started,
 * within the credit the host granted, and asked for: a pong answers an
 * outstanding ping once, a SHUTDOWN_ACK answers a shutdown once, DIFF_DATA and
 * one DIFF_END (its byte count equal to the data's) or one ERROR answer the one
 * diff asked (agent_client_diff). Any violation
 * kills the connection (-EPROTO / -E2BIG, then every call returns that error;
 * agent_client_violation() says which frame broke which rule): the host's
 * memory stays bounded whatever the guest writes.
 *
 * Fairness: each agent_client_next() writes the host's queued requests before
 * it decodes more guest bytes, and returns at most one event; a caller that
 * handles a bounded number per turn checks agent_client_buffered() rather
 * than poll() on agent_client_fd(), which cannot see bytes already read.
 *
 * Single-threaded and event driven: agent_client_next() returns one event at
 * a time. Data of a STDOUT/STDERR event stays valid until the next call,
 * which also returns the output credit for it to the guest.
 */

/*
 * The largest frame a guest may send: a data frame (AGENT_MAX_DATA + 4), or
 * a DIFF_END with PATCH_MAX_NOTICES notices of two PATCH_MAX_NOTICE-byte
 * strings each, JSON-escaped (at most 2 bytes per byte: no control bytes).
 */
#define AGENT_CLIENT_MAX_FRAME ((size_t)256 * 1024)
#define AGENT_CLIENT_OUT_MAX ((size_t)4 << 20) /* queued bytes towards the guest */
#define AGENT_CLIENT_MAX_TRACKED (2 * AGENT_MAX_EXECS) /* execs the host tracks (the guest refuses past 64) */
#define AGENT_CLIENT_MAX_PINGS 8 /* pings awaiting their pong (-EBUSY past it) */

enum agent_event_type {
	AGENT_EV_PONG,
	AGENT_EV_STARTED,
	AGENT_EV_STDOUT,
	AGENT_EV_STDERR,
	AGENT_EV_EXIT,
	AGENT_EV_ERROR, /* err_code/message; for id != 0 the exec is over */
	AGENT_EV_STDIN_CREDIT, /* more stdin may be sent for id */
	AGENT_EV_SHUTDOWN_ACK,
	AGENT_EV_DIFF_DATA, /* data/len: the next bytes of the patch diff id asked for */
	AGENT_EV_DIFF_END, /* the patch is whole: bytes (= the data's total), msg->notices; the diff is over */
};

struct agent_event {
	enum agent_event_type type;
	uint32_t id;
	const uint8_t *data;
	size_t len;
	int64_t pid;
	struct exit_status exit; /* AGENT_EV_EXIT: as the agent's EXIT carried it */
	const char *err_code; /* valid until the next call */
	const char *message;
	int64_t bytes; /* AGENT_EV_DIFF_END */
	const struct agent_msg
		*msg; /* the decoded message (AGENT_EV_DIFF_END: its notices); valid until the next call */
	bool diff; /* AGENT_EV_ERROR: about the pending diff (id is its id), which is over */
};

struct agent_client;

/* Takes ownership of fd (made non-blocking). */
_wur_ int agent_client_new(int fd, struct agent_client **ret);
void agent_client_free(struct agent_client *c);

/* Queue requests (sent by agent_client_next/flush). */
_wur_ int agent_client_ping(struct agent_client *c, uint32_t *ret_id);
/* argv NULL-terminated; env may be NULL; cwd may be NULL; stdin_open: stdin will be streamed with agent_client_stdin. */
_wur_ int agent_client_exec(struct agent_client *c, char *const *argv, char *const *env, const char *cwd,
			    bool stdin_open, uint32_t *ret_id);
/* Send up to n bytes of stdin within the credit; *ret_sent may be 0 (wait for AGENT_EV_STDIN_CREDIT). */
_wur_ int agent_client_stdin(struct agent_client *c, uint32_t id, const void *p, size_t n, size_t *ret_sent);
_wur_ int agent_client_stdin_close(struct agent_client *c, uint32_t id);
_wur_ int agent_client_signal(struct agent_client *c, uint32_t id, int sig);
_wur_ int agent_client_shutdown(struct agent_client *c);
/*
 * Queue AGENT_MSG_DIFF: the guest makes /workspace's patch and answers with
 * DIFF_DATA events then DIFF_END, or an ERROR (ev.diff). One at a time:
 * -EBUSY while the previous one is not answered.
 */
_wur_ int agent_client_diff(struct agent_client *c, uint32_t *ret_id);
/* Queue AGENT_MSG_CLOCK with the host's CLOCK_REALTIME now: the guest sets its clock from it (no reply). */
_wur_ int agent_client_clock(struct agent_client *c);
/*
 * The clock's timer: when now_ms (CLOCK_MONOTONIC ms) reached the due time
 * (at once on the first call), queue AGENT_MSG_CLOCK and set the next due
 * time AGENT_CLOCK_INTERVAL_MS later. *ret_due_ms: when to call again. A
 * CLOCK that finds the queue full is tried again a second later.
 */
_wur_ int agent_client_clock_tick(struct agent_client *c, uint64_t now_ms, uint64_t *ret_due_ms);

/*
 * Write queued requests without waiting: 0 when all are out, 1 when some
 * remain (poll agent_client_fd() for POLLOUT), or -errno (the connection is
 * dead). For a caller that queues a request (a kill) and then waits in its
 * own poll() rather than in agent_client_next().
 */
_wur_ int agent_client_flush(struct agent_client *c);

/* Stdin credit left for id (0 for an unknown id). */
size_t agent_client_stdin_credit(const struct agent_client *c, uint32_t id);

/*
 * Write queued requests and wait for the next event. Returns 1 with *ret
 * filled, 0 on timeout (timeout_ms < 0: wait forever; 0: look at the socket
 * once without waiting), or -errno (the
 * connection is dead: -EPROTO/-E2BIG for a guest that broke the protocol,
 * -EPIPE when it went away).
 */
_wur_ int agent_client_next(struct agent_client *c, int timeout_ms, struct agent_event *ret);

/*
 * Why the connection was cut for a protocol violation ("protocol violation:
 * frame type 0x81 (a pong without an outstanding ping)"), or NULL when it is
 * alive or just went away. Valid until agent_client_free.
 */
const char *agent_client_violation(const struct agent_client *c);

/* The socket, for poll(): readable means new bytes, not buffered ones. */
int agent_client_fd(const struct agent_client *c);

/* True when bytes already read from the socket wait to be decoded (call agent_client_next without polling). */
bool agent_client_buffered(const struct agent_client *c);

/* Bytes received from the guest so far (for tests and the bench). */
uint64_t agent_client_bytes_in(const struct agent_client *c);

#endif
