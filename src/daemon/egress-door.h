/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_EGRESS_DOOR_H
#define TKBOX_DAEMON_EGRESS_DOOR_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon/crossing.h"
#include "daemon/egress-approve.h"
#include "daemon/supmsg.h"
#include "egress/addr.h"
#include "egress/host.h"
#include "egress/preset.h"
#include "macro.h"

/*
 * The daemon's side of the network door (docs/egress.md "The daemon's
 * door"). The supervisor's proxy read a request head and sent egress_open
 * {conn, form, host, port}; one thread per connection runs
 * egress_door_run(), in the reference's order:
 *
 *   1. the host text is parsed again (the supervisor's words are not
 *      trusted) and the port checked;
 *   2. an IP literal is classified (egress_addr_classify: the fixed ranges,
 *      this host's own addresses, --egress-block); a metadata or localhost
 *      name is refused; refused here: 403, a tkbox.egress record, no
 *      decision is asked;
 *   3. a name on the box's allowlist is resolved once (--resolve entries,
 *      else c-ares with the host's resolver configuration, A and AAAA,
 *      EGRESS_RESOLVE_TIMEOUT_MS) and every address is checked: one refused
 *      address refuses the connection (rule resolved-address);
 *   4. the crossing: the signer decides WebFetch {url} (egress_door_url);
 *      deny: 403 naming the signer's rules;
 *   5. the act: a name off the list waits for a person
 *      (egress_approve_ask; with --inspect all it is refused at once); only
 *      then is it resolved and its addresses checked; the daemon dials the
 *      address it checked (non-blocking, EGRESS_DIAL_TIMEOUT_MS over all
 *      addresses), hands the socket to the supervisor (egress_dial) and
 *      waits for egress_done; the completion carries bytes each way and the
 *      duration.
 */

#define EGRESS_MAX_RESOLVE 64 /* tkbox daemon --resolve entries */
#define EGRESS_MAX_RESOLVED 16 /* addresses of one name checked and tried */
#define EGRESS_RESOLVE_TIMEOUT_MS 5000
#define EGRESS_DIAL_TIMEOUT_MS 10000
#define EGRESS_OWN_ADDRS_TTL_MS 5000 /* this host's addresses are re-read at most this often */
#define EGRESS_RECORD_RATE 20 /* tkbox.egress records per second per box; then one summary */
#define EGRESS_THREAD_STACK ((size_t)256 << 10) /* a connection's thread (detached, one per connection) */
#define EGRESS_SIGNER_TEXT_MAX 256 /* bytes of the signer's reason in a refusal (cut before a UTF-8 character) */

/* One tkbox daemon --resolve NAME=ADDR. */
struct egress_resolve_entry {
	char name[EGRESS_HOST_TEXT_MAX];
	struct egress_addr addr;
};

/* The daemon's flags for the door; read-only once the daemon serves. */
struct egress_door_config {
	struct egress_block block; /* --egress-block */
	unsigned flags; /* EGRESS_ALLOW_PRIVATE (--egress-allow-private) */
	struct egress_resolve_entry resolve[EGRESS_MAX_RESOLVE];
	size_t n_resolve;
};

/*
 * One --resolve value "NAME=ADDR": NAME a DNS name (host.h's rules, not a
 * literal), ADDR an IPv4 dotted quad or an IPv6 address. A name may be given
 * several times (several addresses). -EINVAL (err says why), -E2BIG past
 * EGRESS_MAX_RESOLVE. cfg is unchanged on failure.
 */
_wur_ int egress_resolve_parse(const char *value, struct egress_door_config *cfg, char *err, size_t err_size);

/* ["NAME=ADDR", ...] for the box record; NULL on ENOMEM. */
json_t *egress_resolve_json(const struct egress_door_config *cfg);

/* The --resolve addresses of name (lower case, no trailing dot): their count, at most max into ret. */
size_t egress_resolve_lookup(const struct egress_door_config *cfg, const char *name, struct egress_addr *ret,
			     size_t max);

/* This host's own addresses: read with getifaddrs(3), cached at most EGRESS_OWN_ADDRS_TTL_MS. */
void egress_own_addrs(struct egress_host_addrs *ret);

/*
 * tkbox.egress records of one box: at most EGRESS_RECORD_RATE in a second
 * (one second of CLOCK_MONOTONIC, now_ms), the rest counted; once that
 * second has ended, one summary with the count. Not locked: the caller
 * serializes.
 */
struct egress_rate {
	int64_t second; /* the second counted (now_ms / 1000) */
	unsigned n; /* records admitted in it */
	uint64_t suppressed; /* records suppressed in suppressed_second */
	int64_t suppressed_second;
};

/* True: record it. False: suppressed (counted for the summary). */
bool egress_rate_admit(struct egress_rate *r, int64_t now_ms);

/*
 * The summary due at now_ms: the count suppressed in a second that has
 * ended (*ret_second: that second), and the count is reset; 0 when none is
 * due.
 */
uint64_t egress_rate_summary(struct egress_rate *r, int64_t now_ms, int64_t *ret_second);

/* What the proxy reported when a dialled connection ended (egress_done). */
struct egress_done_info {
	int64_t bytes_up, bytes_down, duration_ms;
	char *error; /* owned, or NULL */
	char *rule; /* owned, or NULL: the proxy refused it after the dial (e.g. sni-mismatch) */
};

void egress_done_info_release(struct egress_done_info *d);

/* What the daemon does for the door in one box. */
struct egress_box_ops {
	/* A tkbox.egress record (takes data): the box rate-limits and sends it. */
	void (*record)(void *box, json_t *data);
	/* An events-file line of the box (takes extra). */
	void (*event)(void *box, const char *event, json_t *extra);
	/* egress_refuse {conn, status, rule, message}: the proxy answers the box with it. */
	void (*refuse)(void *box, int64_t conn, int status, const char *rule, const char *message);
	/*
	 * egress_dial {conn, url, plain, inspect, model} with the connected
	 * socket (the callee closes fd in every case). 0 sent, *ret_wait the
	 * handle wait_done takes; -ESHUTDOWN the box is stopping (nothing sent);
	 * other < 0 the send failed.
	 */
	int (*dial)(void *box, int64_t conn, const char *url, bool plain, bool inspect, bool model, int fd,
		    void **ret_wait);
	/*
	 * Wait for the egress_done of the conn dial sent (wait: its handle,
	 * released here): 0 with ret filled, -ESHUTDOWN the box stopped first.
	 */
	int (*wait_done)(void *box, void *wait, struct egress_done_info *ret);
	/* A stop began: no dial may go out. */
	bool (*stopping)(void *box);
	/*
	 * May be NULL. An fd that hangs up (POLLHUP) once the box's egress
	 * closes, valid while the connection's thread runs; -1 when none. The
	 * crossing polls it as its client: a stop ends a signer call or a
	 * signer approval wait at once (the crossing ends as abandoned, nothing
	 * is dialled).
	 */
	int (*abandon_fd)(void *box);
};

/* Why the door refused a connection: what the box's proxy answers. */
struct egress_refusal {
	int status; /* 0: not refused */
	char rule[SUPMSG_MAX_RULE];
	char message[SUPMSG_MAX_TEXT]; /* what the agent reads, with how a person can allow it */
	char reason[512]; /* the record's reason (no how-to) */
	bool record; /* the door itself refused: a tkbox.egress record (the signer's refusals are its own records) */
};

/*
 * The box's TLS inspection (issue 13, docs/secrets.md): which dialled
 * connections the supervisor's proxy terminates and reads (inspect), and
 * which carry model calls (model). Built at box creation; read-only after.
 */
struct egress_inspect_cfg {
	bool has_ca; /* the box has a CA (a secret, --inspect all or a model preset): without one nothing is inspected */
	char *const *bound; /* the secrets' bound hosts (canonical names), NULL-terminated, or NULL */
	char *const *model_hosts; /* egress_model_hosts of the box's --allow values, or NULL */
};

/*
 * The model hosts of a box's --allow values: every host the anthropic,
 * openai and claude-code presets name, when a value is that preset or an
 * allow entry that matches the host (a secret's bound host alone is never
 * one: bound hosts are not --allow values). NULL-terminated, unique (an
 * empty array when there are none). -ENOMEM.
 */
_wur_ int egress_model_hosts(char *const *values, char ***ret);

/*
 * The decision for one connection: inspect when the box has a CA and the
 * url is https://host:443 (a CONNECT to 443 whose entry does not name the
 * port) and the host is bound by a secret, or the box has --inspect all, or
 * the host is a model host. *ret_model: host is a model host (whatever the
 * form). insp may be NULL (nothing inspected).
 */
bool egress_inspect_decide(const struct egress_inspect_cfg *insp, bool inspect_all, const char *url, const char *host,
			   bool *ret_model);

/* One connection through the door. */
struct egress_conn {
	/* Set by the caller. */
	const struct egress_door_config *cfg;
	const struct egress_policy *policy; /* the box's allowlist (borrowed; lives as long as the box) */
	const char *box_name;
	const struct egress_box_ops *ops;
	const struct crossing_host_ops *host; /* the crossing's view of the box */
	void *box; /* for ops and host */
	const char *run_id, *run_token;
	bool unrecorded;
	int64_t approval_wait_ms; /* a person's (egress_approve_ask) and the signer's ask; 0: the defaults */
	int64_t conn; /* the supervisor's conn number */
	bool form_connect; /* CONNECT (else absolute-form http://) */
	const char *host_text; /* egress_open's host */
	int64_t port;
	const struct egress_inspect_cfg *insp; /* the box's inspection (NULL: none) */

	/* Written by the door. */
	struct egress_host h;
	uint16_t port16;
	enum egress_match match;
	char url[EGRESS_URL_MAX];
	bool plain; /* a tunnel that is not TLS may pass: the matching entry names the port */
	bool inspect, model; /* egress_inspect_decide's answer: what egress_dial says */
	struct egress_addr addrs[EGRESS_MAX_RESOLVED];
	size_t n_addrs;
	bool resolved;
	bool decided; /* the crossing asked the signer */
	bool dialled; /* egress_dial went to the supervisor */
	const struct egress_host_addrs *own; /* during egress_door_run: this host's addresses */
	struct egress_refusal refusal;
};

/*
 * Steps 1-3 (no decision asked): 0 to go on (c->url, c->match, and for an
 * allowlisted name c->addrs); -EPERM refused (c->refusal: 400 a malformed
 * host or port, 403 a refused address or name, 502 an allowlisted name that
 * does not resolve). own: this host's addresses. Sends and records nothing.
 */
_wur_ int egress_door_check(struct egress_conn *c, const struct egress_host_addrs *own);

/*
 * The connection's whole way through the door: the checks, the crossing,
 * the refusal or the dial. Every refusal is sent (ops->refuse), recorded
 * (ops->record, when the door itself refused) and written to the events
 * (egress.refused). Returns 0 when the connection was dialled and ended, <
 * 0 when it was refused (c->refusal).
 */
int egress_door_run(struct egress_conn *c);

/* A name's addresses from the host's resolver (c-ares), at most max; -ENOENT none, -ETIMEDOUT. */
_wur_ int egress_resolve_name(const char *name, struct egress_addr *ret, size_t max, size_t *ret_n, char *err,
			      size_t err_size);

#endif
