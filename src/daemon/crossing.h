/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_CROSSING_H
#define TKBOX_DAEMON_CROSSING_H

#include <jansson.h>
#include <stdint.h>

#include "exit-status.h"
#include "macro.h"

/*
 * The crossing engine: one act of a box through a door (a command today; a
 * connection, a file write or a model call next), through its whole life:
 *
 *   decide    the door's tool and arguments, shaped as the signer expects
 *             ("Bash" with the exec arguments, "WebFetch", "Write", ...);
 *   allow     (or flag) goes on; deny refuses; ask requests an approval,
 *             tells the client its id (an interim 102 with Tkbox-Approval)
 *             and waits for a person within DAEMON_APPROVAL_WAIT_MS;
 *   act       the door's callback (exec: hand the stream to the supervisor
 *             and wait for its done);
 *   complete  the act's status, exit code XOR signal, error and stdin digest
 *             (a connection: bytes each way and duration_ms), signed
 *             against the decision;
 *   observe   instead of decide and complete, for a door whose crossings are
 *             recorded but not decided (observe_kind): a must-keep
 *             observation before the act;
 *   after     the door's callback once the completion is recorded or its loss
 *             counted (exec: the client may now see the exit status).
 *
 * Fail-closed rules (the reference's Table 8), as built:
 *   - a decide that fails (refused, malformed, past the deadline) refuses the
 *     act: nothing runs, the client is told why (503);
 *   - a decision other than allow, flag or ask refuses the act (403);
 *   - an ask whose approval cannot be requested, is rejected, expires or is
 *     not answered in time refuses the act (403);
 *   - a client that leaves while the signer decides or a person is asked ends
 *     the crossing, nothing runs (<door>.abandoned);
 *   - a completion the signer does not take is counted as a tkbox.gap of kind
 *     complete (the box's host does it, now or at the next chance), never
 *     dropped; this includes an act that never started;
 *   - an observed crossing whose observation cannot be kept refuses the act
 *     (503 not_recorded; the host stops the box and records the loss);
 *   - only a daemon started --unrecorded skips decide and complete; a
 *     recorded box without a run is refused at decide.
 *
 * Each step writes the box's events through the host's callbacks: <door>.denied,
 * <door>.not_approved, <door>.abandoned, <door>.decided, signer.decide_failed,
 * signer.complete_failed.
 */

#define CROSSING_MAX_ERROR 4096 /* bytes of a completion's error sent to the signer (= RPC_MAX_ERROR_LEN) */
#define CROSSING_MAX_ID 128 /* a decision or approval id the signer hands out (= RPC_MAX_ID_LEN) */

/* What an act did: exactly what the signer's complete takes. */
struct crossing_result {
	bool started; /* false: the act never began (completed as an error) */
	bool ok;
	bool has_exit; /* it ran to an end: exited with a code, or killed by a signal (never both) */
	struct exit_status exit;
	char *error; /* owned, or NULL */
	char *stdin_sha256; /* a streamed stdin's digest (owned), or NULL */
	int64_t stdin_bytes;
	/* A connection (the network door): its bytes each way and how long it lasted, each 0..2^53-1. */
	bool has_transfer;
	int64_t bytes_up, bytes_down, duration_ms;
	/* A file write (the patch door): the files this act wrote (owned strv; an empty one is sent as []), or NULL. */
	char **written_paths;
};

void crossing_result_release(struct crossing_result *r);

/* Why a crossing did not act, for the client (status 0: nothing to send, e.g. it left). */
struct crossing_refusal {
	int status;
	const char *code; /* static */
	json_t *extra; /* owned: more members of the error object, or NULL */
	char message[1024];
};

struct crossing;

/* The box the crossing belongs to: its events and its record of losses. */
struct crossing_host_ops {
	/* Append an event to the box's events (problem: the class that stops first at the cap). Takes extra. */
	void (*event)(void *box, bool problem, const char *event, json_t *extra);
	/* The signer answered a decide: record the losses counted while it did not. */
	void (*signer_back)(void *box);
	/* A completion the signer did not take (r: the call's error): count it as a tkbox.gap. */
	void (*complete_lost)(void *box, int r);
	/* A must-keep observation (takes data). < 0 when it cannot be kept (the host stops the box, err says why). */
	int (*observe_keep)(void *box, const char *kind, json_t *data, char *err, size_t err_size);
};

/* What a door supplies. */
struct crossing_door {
	const char *name; /* "exec": the events' prefix and the tool_call_id's */
	const char *tool; /* the signer's tool: "Bash", "WebFetch", "Write" */
	/*
	 * NULL for a decided door. Else the door's crossings are observed, not
	 * decided: each is a must-keep observation of this kind (data: the
	 * arguments) before it acts, and one that cannot be kept refuses the act.
	 */
	const char *observe_kind;
	/* Act on an allowed crossing. < 0: it never started (x->refusal may say why to the client). */
	int (*act)(struct crossing *x, struct crossing_result *ret);
	/* Once the completion is recorded or its loss counted (may be NULL). */
	void (*after)(struct crossing *x, const struct crossing_result *res);
};

struct crossing {
	/* Set by the door before crossing_run. */
	const struct crossing_door *door;
	const struct crossing_host_ops *host;
	void *box; /* for host's callbacks */
	void *ctx; /* the door's own */
	json_t *args; /* the decided arguments (borrowed) */
	json_t *decided_extra; /* more members of <door>.decided (borrowed, or NULL) */
	int64_t seq; /* the crossing's number in its box (exec: the exec number) */
	bool unrecorded; /* the daemon runs --unrecorded: nothing is decided or completed */
	const char *run_id, *run_token; /* the box's run (NULL when not unrecorded: refused, fail closed) */
	int client_fd; /* the API client: the interim 102 and abandonment (-1: none) */
	int64_t approval_wait_ms;

	/* Written by the engine. */
	char tool_call_id[48];
	char args_digest[80]; /* rpc_args_digest of {tool, args}: the one the signer computes */
	const char *decision; /* allow, flag, ask (approved); NULL when unrecorded */
	char decision_id[CROSSING_MAX_ID + 1];
	char approval_id[CROSSING_MAX_ID + 1];
	bool decided;
	struct crossing_refusal refusal;
};

/*
 * Run the crossing through its life. 0 when it acted (its completion
 * recorded or its loss counted); < 0 when it did not act, with x->refusal
 * for the client (-EPERM refused, -ECANCELED the client left, -EIO the signer
 * did not decide, or the act's error).
 */
_wur_ int crossing_run(struct crossing *x);

/*
 * The same life in two steps, for a door that decides N crossings first and
 * acts on them later (the patch door: every file decided before any is
 * written). crossing_gate_only decides (or observes) x: 0 when it may act
 * (x->decided says whether a completion is owed), < 0 refused as in
 * crossing_run. crossing_finish then records how the act ended (res->started
 * false: it never began): the <door>.done event when it started, the
 * completion when it was decided (a completion the signer does not take is
 * counted), and the door's after. Each decided crossing must be finished
 * exactly once.
 */
_wur_ int crossing_gate_only(struct crossing *x);
void crossing_finish(struct crossing *x, const struct crossing_result *res);

/* Release what crossing_run left in x (the refusal's extra). */
void crossing_release(struct crossing *x);

#endif
