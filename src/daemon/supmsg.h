/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_SUPMSG_H
#define TKBOX_DAEMON_SUPMSG_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "exit-status.h"

/*
 * Daemon <-> per-box supervisor: one JSON object per SOCK_SEQPACKET message
 * (at most SUPMSG_MAX bytes), fds passed with SCM_RIGHTS. This file holds
 * the one encoder and decoder of both directions (closed key set per
 * operation, typed struct) and the monitor: the table of which operation
 * each side may send in which state (OpenSSH's monitor.c). It is pure.
 *
 *   daemon -> supervisor
 *     boot    {op,box_id,rootfs,workspace?,state_dir,guest,accel,vcpus,mem_mib,scratch_mib,env[],lifetime_s,
 *              console_keep?,kernel?,modules?}
 *     exec    {op,exec,argv[],env[],cwd?,stdin:"none"|"upfront"|"stream",timeout_s}  fds: client[, stdin memfd]
 *     release {op,exec}                          the completion is recorded: send the client its EXIT
 *     stop    {op}
 *   supervisor -> daemon (the supervisor parses guest bytes, so its words are checked twice: here and by the monitor)
 *     ready   {op,accel,isolation,ready_ms}
 *     failed  {op,message}                      boot failed; the supervisor exits
 *     done    {op,exec,status:"ok"|"error",exit_code?|signal?,error?,stdin_sha256?+stdin_bytes?}
 *     event   {op,event,detail?}                a line for the box's events file
 *     stopped {op,reason}                       the VM is gone; the supervisor exits
 *
 *   the network door (issue 12; docs/egress.md). A connection is one "conn"
 *   number the supervisor picks (1.., never reused in a box):
 *     egress_open    to daemon  {op,conn,form:"connect"|"absolute",host,port}
 *                               the proxy read a request head for host:port (host canonical: a lower-case
 *                               name or an IP literal, IPv6 without brackets); the daemon decides and dials
 *     egress_dial    to sup.    {op,conn,url,plain}  fds: the connected socket
 *                               url: the door's url decided; plain: a tunnel that is not TLS may pass
 *                               (an allow entry names the port)
 *     egress_refuse  to sup.    {op,conn,status,rule,message}  status 400|403|502|503|504: the proxy answers the
 *                               box with it (message: which rule refused and how a person can allow it)
 *     egress_done    to daemon  {op,conn,bytes_up,bytes_down,duration_ms,error?,rule?}
 *                               a dialled connection ended (rule: the proxy refused it after the dial,
 *                               e.g. the TLS server name; error says how)
 *     egress_refused to daemon  {op,rule,message,host?,port?}  the proxy refused a request itself before
 *                               asking (a malformed head, CONNECT to 80, the stream cap); for tkbox.egress
 *
 *   secrets, inspection and model calls (issue 13; docs/secrets.md):
 *     boot           gains      ca_cert?, ca_key? (PEM, <= SUPMSG_MAX_PEM; both or neither: the box's CA),
 *                               upstream_ca? (a path: tkbox daemon --egress-ca)
 *     egress_dial    gains      inspect (bool: terminate TLS and read the requests), model (bool: a model host)
 *     secrets        to sup.    {op,secrets:[{name,placeholder,header,hosts[],len}]}  fds: one sealed memfd holding
 *                               the values back to back, in order, len bytes each (never in JSON)
 *     secret_use     to daemon  {op,conn,secret,host}   a swap waits for its record (tkbox.secret.use)
 *     secret_ok      to sup.    {op,conn,ok,message?}   the record was kept (ok) or not (the request is refused)
 *     secret_leak    to daemon  {op,conn,secret,host,reason}  a request was refused: tkbox.secret.leak (conn 0: none)
 *     model_call     to daemon  {op,conn,host,method,path,status,bytes_up,bytes_down,duration_ms,model?,
 *                               input_tokens?,output_tokens?}   tkbox.model.call (struct: tokens -1 when absent)
 *     selftest       to daemon  {op,ran[],trusted[],clock_offset_ms}  the box's TLS self-test (ran: the clients the
 *                               guest says it ran; trusted: those whose request reached the proxy over TLS with
 *                               the box's CA) and the guest clock's offset from the host's, in ms
 *
 *   the patch door (issue 14; docs/patch.md). A diff is one "diff" number the daemon picks (1..2^53):
 *     diff           to sup.    {op,diff}   make the box's patch now (the guest walks /workspace's overlay)
 *     diff_done      to daemon  {op,diff,ok,error?,sha256?,bytes?,files?,notices?}
 *                               ok: fds: one sealed memfd holding the patch (bytes long, 0..PATCH_MAX_BYTES),
 *                               parsed by patch_parse in the supervisor; sha256 its digest (64 lower-case hex),
 *                               files its sections (0..PATCH_MAX_FILES), notices [[path,why],...] the files the
 *                               guest left out (at most PATCH_MAX_NOTICES, each string 1..PATCH_MAX_NOTICE bytes).
 *                               not ok: error (1..SUPMSG_MAX_TEXT) says why there is no patch, and nothing else
 */

#define SUPMSG_MAX ((size_t)64 << 10)
#define SUPMSG_MAX_TEXT 1024 /* message, error, event, detail, reason */
#define SUPMSG_MAX_PATH 4096 /* boot's paths */
#define SUPMSG_MAX_NAME 64 /* box_id, accel, isolation */
#define SUPMSG_MAX_ARGS 4096 /* exec argv entries (= DOOR_MAX_ARGS) */
#define SUPMSG_MAX_ENV 1024 /* boot and exec env entries (= BOOT_MAX_ENV) */
#define SUPMSG_MAX_EXEC_ID ((int64_t)1 << 53)
#define SUPMSG_MAX_TIMEOUT_S (7 * 24 * 3600)
#define SUPMSG_MAX_MIB (1 << 20)
#define SUPMSG_MAX_VCPUS 256
#define SUPMSG_MAX_CONN ((int64_t)1 << 53)
#define SUPMSG_MAX_HOST 256 /* egress host text (EGRESS_HOST_TEXT_MAX) */
#define SUPMSG_MAX_URL 280 /* the door's url (EGRESS_URL_MAX) */
#define SUPMSG_MAX_RULE 64 /* an egress rule name: [a-z0-9_.-] */
#define SUPMSG_MAX_PEM 16384 /* ca_cert, ca_key (EGRESS_CA_PEM_MAX) */
#define SUPMSG_MAX_SECRETS 16 /* EGRESS_SECRET_MAX */
#define SUPMSG_MAX_SECRET_HOSTS 8 /* EGRESS_SECRET_HOSTS_MAX */
#define SUPMSG_MAX_SECRET_LEN 4096 /* EGRESS_SECRET_VALUE_MAX */
#define SUPMSG_MAX_SELFTEST 8 /* ran[], trusted[] entries: [a-z0-9]{1,16} */
#define SUPMSG_MAX_MODEL 128 /* model_call's model */
#define SUPMSG_MAX_HTTP_PATH 1024 /* model_call's path (EGRESS_INSP_PATH_MAX) */
#define SUPMSG_MAX_DIFF ((int64_t)1 << 53) /* diff numbers are 1..this */

enum supmsg_op {
	/* daemon -> supervisor */
	SUPMSG_BOOT = 0,
	SUPMSG_EXEC,
	SUPMSG_RELEASE,
	SUPMSG_STOP,
	/* supervisor -> daemon */
	SUPMSG_READY,
	SUPMSG_FAILED,
	SUPMSG_DONE,
	SUPMSG_EVENT,
	SUPMSG_STOPPED,
	/* the network door */
	SUPMSG_EGRESS_OPEN, /* to daemon */
	SUPMSG_EGRESS_DIAL, /* to supervisor, 1 fd */
	SUPMSG_EGRESS_REFUSE, /* to supervisor */
	SUPMSG_EGRESS_DONE, /* to daemon */
	SUPMSG_EGRESS_REFUSED, /* to daemon */
	/* secrets, inspection, model calls */
	SUPMSG_SECRETS, /* to supervisor, 1 fd */
	SUPMSG_SECRET_USE, /* to daemon */
	SUPMSG_SECRET_OK, /* to supervisor */
	SUPMSG_SECRET_LEAK, /* to daemon */
	SUPMSG_MODEL_CALL, /* to daemon */
	SUPMSG_SELFTEST, /* to daemon */
	/* the patch door */
	SUPMSG_DIFF, /* to supervisor */
	SUPMSG_DIFF_DONE, /* to daemon, 1 fd when ok */
	SUPMSG_OP_COUNT,
};

enum supmsg_dir {
	SUPMSG_TO_SUPERVISOR = 0,
	SUPMSG_TO_DAEMON,
};

enum supmsg_stdin {
	SUPMSG_STDIN_NONE = 0,
	SUPMSG_STDIN_UPFRONT, /* a sealed memfd comes with the message */
	SUPMSG_STDIN_STREAM, /* the client streams it (exec stream) */
};

/*
 * One message. A decoded message owns every string and string array
 * (supmsg_release frees them); a message built for supmsg_encode borrows
 * them from the caller and is never released.
 */
struct supmsg {
	enum supmsg_op op;
	/* boot */
	char *box_id, *rootfs, *workspace, *state_dir, *guest, *accel, *console_keep, *kernel, *modules;
	int64_t vcpus, mem_mib, scratch_mib, lifetime_s;
	char **env; /* boot and exec: NULL-terminated, "K=V" */
	size_t envc;
	/* exec, release, done */
	int64_t exec;
	char **argv; /* exec: NULL-terminated */
	size_t argc;
	char *cwd;
	enum supmsg_stdin stdin_mode;
	int64_t timeout_s;
	/* ready (accel above) */
	char *isolation;
	int64_t ready_ms;
	/* failed */
	char *message;
	/* done */
	bool ok;
	bool has_exit; /* the command ran to an end (else: error says why) */
	struct exit_status exit;
	char *error;
	char *stdin_sha256; /* streamed stdin: its digest (hex) and size */
	int64_t stdin_bytes;
	/* event */
	char *event, *detail;
	/* stopped */
	char *reason;
	/* egress_*: message (above) is egress_refuse's and egress_refused's text, error egress_done's */
	int64_t conn;
	bool form_connect; /* egress_open: "connect" (else "absolute") */
	char *host; /* egress_open; egress_refused (optional) */
	int64_t port; /* egress_open 1..65535; egress_refused 0: absent */
	char *url; /* egress_dial */
	bool plain; /* egress_dial */
	int64_t status; /* egress_refuse: 403, 502, 503, 504 */
	char *rule; /* egress_refuse, egress_refused; egress_done (optional) */
	int64_t bytes_up, bytes_down, duration_ms; /* egress_done, model_call: each 0..2^53 */
	/* boot: the box's CA (PEM) and the extra upstream trust file */
	char *ca_cert, *ca_key, *upstream_ca;
	/* egress_dial */
	bool inspect, model_host; /* JSON keys "inspect", "model" */
	/* secrets (the values come in the memfd) */
	struct supmsg_secret {
		char *name, *placeholder, *header;
		char **hosts; /* NULL-terminated */
		size_t n_hosts;
		int64_t len; /* EGRESS_SECRET_VALUE_MIN..SUPMSG_MAX_SECRET_LEN */
	} * secrets;
	size_t n_secrets;
	/* secret_use, secret_leak: the secret's name (host above); secret_ok: ok (above) and message (above) */
	char *secret;
	/* secret_leak: reason (above). model_call: host, status (100..599), bytes and duration above, and: */
	char *method, *path, *model;
	int64_t input_tokens, output_tokens; /* -1: absent */
	/* selftest */
	char **ran, **trusted; /* NULL-terminated */
	size_t n_ran, n_trusted;
	int64_t clock_offset_ms; /* -2^53..2^53 */
	/* diff, diff_done: the diff's number; diff_done: ok (above), error (above) when not ok, and when ok: */
	int64_t diff;
	char *sha256; /* the patch's digest, 64 lower-case hex */
	int64_t patch_bytes; /* JSON "bytes": 0..PATCH_MAX_BYTES */
	int64_t files; /* 0..PATCH_MAX_FILES */
	struct supmsg_notice {
		char *path, *why; /* each 1..PATCH_MAX_NOTICE bytes, no control bytes */
	} * notices;
	size_t n_notices; /* 0..PATCH_MAX_NOTICES */
};

/* The direction an operation goes (the tables below). */
enum supmsg_dir supmsg_op_dir(enum supmsg_op op);
const char *supmsg_op_name(enum supmsg_op op);

/*
 * The fds an operation carries: exec 1 (the client), 2 with up-front stdin; egress_dial 1; secrets 1; diff_done 1
 * when ok (the patch's memfd); the others 0.
 */
size_t supmsg_fds(const struct supmsg *m);

/*
 * Decode one message sent in direction dir: -EPROTO for an operation that
 * does not go that way (or none), -EBADMSG for a malformed or out-of-range
 * member, -E2BIG past a cap. On success *ret owns its strings.
 */
_wur_ int supmsg_decode(enum supmsg_dir dir, const uint8_t *p, size_t n, struct supmsg *ret);

/* What the daemon reads: supmsg_decode(SUPMSG_TO_DAEMON, ...). */
_wur_ int supmsg_parse(const uint8_t *p, size_t n, struct supmsg *ret);

/*
 * Encode m as the JSON object ipc_send writes (compactly, at most SUPMSG_MAX
 * bytes); -EINVAL for a message the decoder would refuse.
 */
_wur_ int supmsg_encode(const struct supmsg *m, json_t **ret);

void supmsg_release(struct supmsg *m);

/*
 * The monitor: each side keeps one and passes every message it sends and
 * receives through supmon_check (may it go now?) and supmon_apply (it went).
 * The states and what each operation may do in them:
 *
 *   operation  direction   allowed in              then
 *   boot       to sup.     BEFORE BOOT (INIT)      BOOTING
 *   exec       to sup.     UP                      exec N open (N not open already, at most SUPMON_MAX_EXECS open)
 *   release    to sup.     UP, STOPPING, OVER      exec N done -> forgotten (once per exec)
 *   stop       to sup.     UP                      STOPPING
 *   ready      to daemon   BOOTING                 UP
 *   failed     to daemon   BEFORE BOOT, BOOTING    OVER (before boot: the boot request itself was refused)
 *   done       to daemon   UP, STOPPING            exec N open -> done (once per exec)
 *   event      to daemon   BOOTING, UP, STOPPING   -
 *   stopped    to daemon   UP, STOPPING            OVER
 *   egress_open    to daemon   UP, STOPPING        conn N asked (N not known already, at most SUPMON_MAX_CONNS known;
 *                                                  while stopping: sent before the stop was read, refused 503)
 *   egress_dial    to sup.     UP                  conn N asked -> dialled (egress closes the moment a stop begins);
 *                                                  with inspect: only after secrets
 *   egress_refuse  to sup.     UP, STOPPING        conn N asked -> forgotten
 *   egress_done    to daemon   UP, STOPPING        conn N dialled, no secret_use pending -> forgotten (an end
 *                                                  waits for the pending secret_ok, which would else cross it)
 *   egress_refused to daemon   UP, STOPPING        -
 *   secrets        to sup.     UP                  once per box (before it the supervisor inspects nothing);
 *                                                  the daemon sends it right after ready to every box with a
 *                                                  CA or a secret (0 entries and an empty memfd: a CA, no secret)
 *   secret_use     to daemon   UP                  conn N dialled, no use of it pending -> use pending
 *   secret_ok      to sup.     UP, STOPPING        conn N's use pending -> not pending
 *   secret_leak    to daemon   UP, STOPPING        -
 *   model_call     to daemon   UP, STOPPING        conn N dialled
 *   selftest       to daemon   UP                  once per box
 *   diff           to sup.     UP                  no diff pending -> diff N pending (one at a time)
 *   diff_done      to daemon   UP, STOPPING        diff N pending -> none pending (once per diff; a stop does not
 *                                                  end a pending diff: the supervisor answers it, not ok)
 *
 * Anything else is refused: the daemon kills the supervisor, stops the box
 * and records a tkbox.gap; the supervisor stops the box and exits.
 */

#define SUPMON_MAX_EXECS 256 /* execs sent and not yet released (the daemon allows fewer per box) */
#define SUPMON_MAX_CONNS 256 /* egress conns asked or dialled and not yet forgotten (= EGRESS_MAX_STREAMS) */

enum supmon_state {
	SUPMON_INIT = 0, /* nothing sent */
	SUPMON_BOOTING, /* boot sent, no answer yet */
	SUPMON_UP, /* ready */
	SUPMON_STOPPING, /* stop sent */
	SUPMON_OVER, /* failed or stopped: the supervisor exits */
};

struct supmon {
	enum supmon_state state;
	size_t n;
	struct {
		int64_t exec;
		bool done;
	} x[SUPMON_MAX_EXECS];
	size_t nc;
	struct {
		int64_t conn;
		bool dialled;
		bool use_pending; /* secret_use sent, secret_ok not yet */
	} c[SUPMON_MAX_CONNS];
	bool secrets_sent, selftest_seen;
	int64_t diff; /* the pending diff's number, 0: none */
};

void supmon_init(struct supmon *mon);
const char *supmon_state_name(enum supmon_state s);

/* May m go in direction dir now? 0, or -EPROTO with *ret_why naming the rule (a static string). */
_wur_ int supmon_check(const struct supmon *mon, enum supmsg_dir dir, const struct supmsg *m, const char **ret_why);

/* supmon_check, then the state change m makes. */
_wur_ int supmon_apply(struct supmon *mon, enum supmsg_dir dir, const struct supmsg *m, const char **ret_why);

/*
 * The daemon's reader decides with this on each supervisor message: decode
 * (SUPMSG_TO_DAEMON) and supmon_apply. -EPROTO/-EBADMSG/-E2BIG: the
 * supervisor broke the protocol (*ret_why says how); on success *ret owns
 * the decoded message.
 */
_wur_ int supmon_receive(struct supmon *mon, const uint8_t *p, size_t n, struct supmsg *ret, const char **ret_why);

#endif
