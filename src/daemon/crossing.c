/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "crypto.h"
#include "daemon/crossing.h"
#include "daemon/signer-link.h"
#include "io.h"
#include "json.h"
#include "signer/rpcmsg.h"
#include "log.h"
#include "strv.h"

void crossing_result_release(struct crossing_result *r)
{
	free(r->error);
	free(r->stdin_sha256);
	strv_free(r->written_paths);
	*r = (struct crossing_result){ 0 };
}

void crossing_release(struct crossing *x)
{
	json_decref(x->refusal.extra);
	x->refusal.extra = NULL;
}

static int refuse(struct crossing *x, int ret, int status, const char *code, json_t *extra, const char *fmt, ...)
	_printf_(6, 7);
static int refuse(struct crossing *x, int ret, int status, const char *code, json_t *extra, const char *fmt, ...)
{
	va_list ap;

	json_decref(x->refusal.extra);
	x->refusal.status = status;
	x->refusal.code = code;
	x->refusal.extra = extra;
	va_start(ap, fmt);
	(void)vsnprintf(x->refusal.message, sizeof(x->refusal.message), fmt, ap);
	va_end(ap);
	return ret;
}

/* An event of the box, named <door>.what. */
static void door_event(struct crossing *x, bool problem, const char *what, json_t *extra)
{
	char name[64];

	(void)snprintf(name, sizeof(name), "%s.%s", x->door->name, what);
	x->host->event(x->box, problem, name, extra);
}

/* ---------------------------------------------------------------- decide */

/* decide: 0 with the reply; < 0 refused (nothing acts). */
static int crossing_decide(struct crossing *x, json_t **ret)
{
	json_t *reply = NULL;
	char rnd[2 * 8 + 1];
	char err[512] = "";
	int r;

	if (!x->run_id || !x->run_token) {
		return refuse(x, -EIO, 503, "signer_unreachable", NULL,
			      "the box has no open run: refused, nothing ran");
	}
	if (crypto_random_hex(8, rnd) < 0) {
		return refuse(x, -EIO, 500, "internal", NULL, "no randomness");
	}
	(void)snprintf(x->tool_call_id, sizeof(x->tool_call_id), "%s-%lld-%s", x->door->name, (long long)x->seq, rnd);
	r = signer_link_call(signer_link_request_id(json_pack("{s:s,s:s,s:s,s:s,s:s,s:O}", "method", "decide", "run_id",
							      x->run_id, "run_token", x->run_token, "tool_call_id",
							      x->tool_call_id, "tool", x->door->tool, "args", x->args)),
			     -1, x->client_fd, signer_link_deadline(0), &reply);
	if (r < 0) {
		/* Each crossing asks afresh: while the signer is stopped or wedged every one is refused at the deadline. */
		signer_link_error(err, sizeof(err), "decide", r, reply);
		json_decref(reply);
		if (r == -ECANCELED) {
			door_event(x, true, "abandoned",
				   json_pack("{s:s}", "detail", "the client left while the signer decided"));
			return -ECANCELED;
		}
		x->host->event(x->box, true, "signer.decide_failed", json_pack("{s:s}", "detail", err));
		return refuse(x, -EIO, 503, "signer_unreachable", NULL, "%s; nothing ran%s", err,
			      r == -EREMOTEIO
				      ? ""
				      : ": every command is refused until the signer answers again (check it "
					"with tkbox-signer status; the limit is tkbox daemon --signer-timeout)");
	}
	x->host->signer_back(x->box); /* the signer answers again: record what was lost while it did not */
	*ret = reply;
	return 0;
}

static int crossing_deny(struct crossing *x, const json_t *reply)
{
	const char *why = NULL;
	json_t *rules = json_object_get(reply, "rule_ids");

	(void)json_get_string(reply, "reason", &why);
	door_event(x, false, "denied", json_pack("{s:s,s:O?}", "decision_id", x->decision_id, "rule_ids", rules));
	return refuse(x, -EPERM, 403, "denied",
		      json_pack("{s:O?,s:s}", "rule_ids", rules, "decision_id", x->decision_id),
		      "denied by the signer's policy%s%s", why ? ": " : "", why ? why : "");
}

/* The client shows the approval id while it waits: an interim response. */
static void crossing_tell_approval(struct crossing *x)
{
	char head[512];
	int k = snprintf(head, sizeof(head), "HTTP/1.1 102 Processing\r\nTkbox-Approval: %s\r\n\r\n", x->approval_id);

	if (x->client_fd >= 0 && k > 0 && (size_t)k < sizeof(head)) {
		(void)io_write_all(x->client_fd, head, (size_t)k);
	}
}

/* ask: request an approval, tell the client, wait for a person. 0 when approved. */
static int crossing_ask(struct crossing *x)
{
	_cleanup_json_ json_t *ar = NULL, *wr = NULL;
	const char *aid = NULL, *state = NULL;
	char err[512] = "";
	int r;

	r = signer_link_call(
		signer_link_request_id(json_pack("{s:s,s:s,s:s,s:s}", "method", "approval_request", "run_id", x->run_id,
						 "run_token", x->run_token, "decision_id", x->decision_id)),
		-1, x->client_fd, signer_link_deadline(0), &ar);
	if (r < 0 || json_get_string(ar, "approval_id", &aid) < 0 || strlen(aid) >= sizeof(x->approval_id)) {
		signer_link_error(err, sizeof(err), "approval_request", r < 0 ? r : -EBADMSG, ar);
		return refuse(x, -EPERM, 403, "not_approved", NULL,
			      "the command needs an approval that could not be requested (%s): refused, nothing ran",
			      err);
	}
	(void)snprintf(x->approval_id, sizeof(x->approval_id), "%s", aid);
	crossing_tell_approval(x);
	/* A long poll: its own wait, then the signer deadline as for any call. */
	r = signer_link_call(json_pack("{s:s,s:s,s:I}", "method", "approval_wait", "approval_id", aid, "timeout_ms",
				       (json_int_t)x->approval_wait_ms),
			     -1, x->client_fd, signer_link_deadline(x->approval_wait_ms), &wr);
	if (r == -ECANCELED) {
		door_event(x, false, "abandoned",
			   json_pack("{s:s,s:s,s:s}", "decision_id", x->decision_id, "approval_id", aid, "detail",
				     "the client left while it waited for the approval"));
		return -ECANCELED;
	}
	if (r >= 0 && json_get_string(wr, "state", &state) >= 0 && strcmp(state, "approved") == 0) {
		return 0;
	}
	if (r < 0 && r != -EREMOTEIO) {
		signer_link_error(err, sizeof(err), "approval_wait", r, NULL);
	}
	door_event(x, false, "not_approved",
		   json_pack("{s:s,s:s,s:s}", "decision_id", x->decision_id, "approval_id", aid, "state",
			     state ? state : "unanswered"));
	return refuse(x, -EPERM, 403, "not_approved", json_pack("{s:s}", "approval_id", aid),
		      "approval %s was %s%s%s: refused, nothing ran", aid, state ? state : "not answered",
		      err[0] && !state ? ": " : "", err[0] && !state ? err : "");
}

/* <door>.decided: the number, the decision and what the door adds. */
static void crossing_decided_event(struct crossing *x)
{
	json_t *ev = json_pack("{s:I,s:s,s:s}", x->door->name, (json_int_t)x->seq, "decision", x->decision,
			       "decision_id", x->decision_id);

	if (ev && x->decided_extra) {
		(void)json_object_update(ev, x->decided_extra);
	}
	door_event(x, false, "decided", ev);
}

/* decide, then allow, deny or ask. 0 when the act may go ahead. */
static int crossing_gate(struct crossing *x)
{
	_cleanup_json_ json_t *reply = NULL;
	const char *decision = NULL, *did = NULL;
	int r = crossing_decide(x, &reply);

	if (r < 0) {
		return r;
	}
	if (json_get_string(reply, "decision", &decision) < 0 || json_get_string(reply, "decision_id", &did) < 0 ||
	    strlen(did) >= sizeof(x->decision_id)) {
		return refuse(x, -EIO, 503, "signer_unreachable", NULL,
			      "the signer's decision is malformed: refused, nothing ran");
	}
	(void)snprintf(x->decision_id, sizeof(x->decision_id), "%s", did);
	if (strcmp(decision, "deny") == 0) {
		return crossing_deny(x, reply);
	}
	if (strcmp(decision, "ask") == 0) {
		r = crossing_ask(x);
		x->decision = "ask";
	} else if (strcmp(decision, "allow") == 0 || strcmp(decision, "flag") == 0) {
		x->decision = strcmp(decision, "allow") == 0 ? "allow" : "flag";
	} else {
		return refuse(x, -EPERM, 403, "denied", NULL, "the signer's decision %s is not allow: refused",
			      decision);
	}
	if (r < 0) {
		return r;
	}
	x->decided = true;
	crossing_decided_event(x);
	return 0;
}

/* ---------------------------------------------------------------- act, complete */

/* <door>.done: how the act ended, exit_status as the shell shows it (128 + N for signal N). */
static void crossing_done_event(struct crossing *x, const struct crossing_result *res)
{
	json_t *ev = json_pack("{s:I,s:b}", x->door->name, (json_int_t)x->seq, "ok", res->ok);

	if (ev && res->has_exit) {
		(void)json_object_set_new(ev, "exit_status", json_integer(exit_status_shell(&res->exit)));
	}
	if (ev && res->has_exit && res->exit.kind == EXIT_KIND_SIGNALED) {
		(void)json_object_set_new(ev, "signal", json_integer(res->exit.value));
	}
	if (ev && res->error) {
		(void)json_object_set_new(ev, "error", json_string(res->error));
	}
	/* A streamed stdin's digest: also in the signed completion (tool.result output.value). */
	if (ev && res->stdin_sha256) {
		(void)json_object_set_new(ev, "stdin_sha256", json_string(res->stdin_sha256));
		(void)json_object_set_new(ev, "stdin_bytes", json_integer(res->stdin_bytes));
	}
	if (ev && res->has_transfer) {
		(void)json_object_set_new(ev, "bytes_up", json_integer(res->bytes_up));
		(void)json_object_set_new(ev, "bytes_down", json_integer(res->bytes_down));
		(void)json_object_set_new(ev, "duration_ms", json_integer(res->duration_ms));
	}
	door_event(x, false, "done", ev);
}

static json_t *complete_request(const struct crossing *x, const struct crossing_result *res)
{
	const char *error = res->started ? res->error : "the command never started";
	json_t *req = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "method", "complete", "run_id", x->run_id, "run_token",
				x->run_token, "tool_call_id", x->tool_call_id, "decision_id", x->decision_id,
				"args_digest", x->args_digest, "status", res->started && res->ok ? "ok" : "error");

	/* Exited with a code, or killed by a signal: never both (SIGKILL is not exit 137). */
	if (req && res->has_exit) {
		(void)json_object_set_new(req, res->exit.kind == EXIT_KIND_SIGNALED ? "signal" : "exit_code",
					  json_integer(res->exit.value));
	}
	if (req && error) {
		(void)json_object_set_new(req, "error", json_stringn(error, MIN(strlen(error), CROSSING_MAX_ERROR)));
	}
	/* A streamed stdin is known only now: its digest and size go into the signed completion. */
	if (req && res->stdin_sha256) {
		(void)json_object_set_new(req, "stdin_sha256", json_string(res->stdin_sha256));
		(void)json_object_set_new(req, "stdin_bytes", json_integer(res->stdin_bytes));
	}
	/* A connection: bytes each way (tool.result output.value) and its duration (tool.result duration_ms). */
	if (req && res->has_transfer) {
		(void)json_object_set_new(req, "bytes_up", json_integer(res->bytes_up));
		(void)json_object_set_new(req, "bytes_down", json_integer(res->bytes_down));
		(void)json_object_set_new(req, "duration_ms", json_integer(res->duration_ms));
	}
	/* A file write: what it wrote ([] when nothing), in the signed completion (tool.result output.value). */
	if (req && res->written_paths) {
		json_t *a = json_array();
		for (char **p = res->written_paths; a && *p; p++) {
			(void)json_array_append_new(a, json_string(*p));
		}
		(void)json_object_set_new(req, "written_paths", a);
	}
	return req;
}

/* The act happened (or never started): a completion the signer does not take is counted, never dropped. */
static void crossing_complete(struct crossing *x, const struct crossing_result *res)
{
	json_t *reply = NULL;
	char err[512] = "";
	int r;

	r = signer_link_call(signer_link_request_id(complete_request(x, res)), -1, -1, signer_link_deadline(0), &reply);
	if (r < 0) {
		signer_link_error(err, sizeof(err), "complete", r, reply);
		x->host->event(x->box, true, "signer.complete_failed",
			       json_pack("{s:I,s:s}", x->door->name, (json_int_t)x->seq, "detail", err));
		x->host->complete_lost(x->box, r);
	}
	json_decref(reply);
}

/* An observed door: the crossing is a must-keep observation, kept before the act or the act is refused. */
static int crossing_observe(struct crossing *x)
{
	char err[512] = "";
	json_t *data = json_deep_copy(x->args);

	if (!data) {
		return refuse(x, -ENOMEM, 500, "internal", NULL, "out of memory");
	}
	if (x->host->observe_keep(x->box, x->door->observe_kind, data, err, sizeof(err)) < 0) {
		return refuse(x, -EIO, 503, "not_recorded", NULL, "%s could not be recorded, so it was refused: %s",
			      x->door->observe_kind, err);
	}
	return 0;
}

int crossing_gate_only(struct crossing *x)
{
	int r;

	x->refusal = (struct crossing_refusal){ 0 };
	x->decided = false;
	x->decision = NULL;
	r = rpc_args_digest(x->door->tool, x->args, x->args_digest);
	if (r < 0) {
		return refuse(x, r, 500, "internal", NULL, "the arguments: %s", tk_strerror(r));
	}
	if (x->unrecorded) {
		return 0;
	}
	return x->door->observe_kind ? crossing_observe(x) : crossing_gate(x);
}

void crossing_finish(struct crossing *x, const struct crossing_result *res)
{
	if (res->started) {
		crossing_done_event(x, res);
	}
	if (x->decided) {
		crossing_complete(x, res);
	}
	if (res->started && x->door->after) {
		x->door->after(x, res);
	}
}

int crossing_run(struct crossing *x)
{
	struct crossing_result res = { 0 };
	int r = crossing_gate_only(x);

	if (r < 0) {
		return r;
	}
	r = x->door->act(x, &res);
	res.started = r >= 0;
	crossing_finish(x, &res);
	crossing_result_release(&res);
	return r < 0 ? r : 0;
}
