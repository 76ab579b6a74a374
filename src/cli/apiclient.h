/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_CLI_APICLIENT_H
#define TKBOX_CLI_APICLIENT_H

#include <jansson.h>

#include "buf.h"
#include "daemon/http.h"

/*
 * The CLI's side of the daemon API: connect to the socket (TKBOX_SOCKET, else
 * <state dir>/api/tkbox.sock), send one request, read the response head
 * (reporting 102 interim responses, which carry an approval id) and body.
 */

#define APICLIENT_MAX_JSON ((size_t)8 << 20)

struct apiclient {
	int fd;
	/*
	 * A signalfd (or -1, the default) watched while a read waits for the
	 * daemon: when a signal arrives, the read returns -EINTR with the signal in
	 * intr_signo, so that a client waiting for a decision can be stopped.
	 */
	int intr_fd;
	int intr_signo;
	struct buf in; /* bytes read past the response head (the body or stream frames) */
	struct http_response resp;
};

/* Connect; on failure prints one line that says what to do and returns -errno. */
_wur_ int apiclient_connect(const char *state_dir, struct apiclient **ret);
void apiclient_free(struct apiclient *c);

/* Send a request with an optional JSON body; upgrade asks for the exec stream. */
_wur_ int apiclient_send(struct apiclient *c, const char *method, const char *path, const json_t *body, bool upgrade);

/*
 * Read the final response head into c->resp; on_interim (may be NULL) is
 * called for each 102 with its Tkbox-Approval value. -EINTR when c->intr_fd
 * reported a signal (c->intr_signo).
 */
_wur_ int apiclient_read_head(struct apiclient *c, void (*on_interim)(const char *approval));

/*
 * apiclient_send, then apiclient_read_head even when the send failed: an
 * early refusal (403 for another uid, 413) may arrive before the request is
 * sent whole. Returns the head's result, or the send's error when no head came.
 */
_wur_ int apiclient_request(struct apiclient *c, const char *method, const char *path, const json_t *body, bool upgrade,
			    void (*on_interim)(const char *approval));

/* A non-2xx answer whose head was read: its JSON error printed as apiclient_print_error does, or its status. */
void apiclient_print_refusal(struct apiclient *c, const char *what);

/* Read a JSON body of the response (Content-Length) into *ret. */
_wur_ int apiclient_read_json(struct apiclient *c, json_t **ret);

/*
 * Read the response body (Content-Length, at most max bytes) into out, initialised here (the caller releases
 * it, also on failure): -EBADMSG without a length or over max, -ECONNRESET when the daemon closes early.
 */
_wur_ int apiclient_read_body(struct apiclient *c, uint64_t max, struct buf *out);

/* One call: send, read head and JSON body. *ret_status gets the HTTP status. */
_wur_ int apiclient_call(const char *state_dir, const char *method, const char *path, const json_t *body,
			 int *ret_status, json_t **ret);

/* Print {"error":{"message"}} of reply as "tkbox: MESSAGE" (or a generic line). */
void apiclient_print_error(const char *what, int status, const json_t *reply);

#endif
