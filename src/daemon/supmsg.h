/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_SUPMSG_H
#define TKBOX_DAEMON_SUPMSG_H

#include <jansson.h>

#include "buf.h"

/*
 * Daemon <-> per-box supervisor: one JSON object per SOCK_SEQPACKET message
 * (at most SUPMSG_MAX bytes), fds passed with SCM_RIGHTS. A closed set of
 * operations each way:
 *
 *   daemon -> supervisor
 *     boot  {op,box_id,rootfs,workspace?,state_dir,guest,accel,vcpus,mem_mib,scratch_mib,env[],lifetime_s,console_keep?,
 *            kernel?,modules?}
 *     exec  {op,exec,argv[],env[],cwd?,stdin:"none"|"upfront"|"stream",timeout_s}  fds: client[, stdin memfd]
 *     release {op,exec}                          the completion is recorded: send the client its EXIT
 *     stop  {op}
 *   supervisor -> daemon (parsed by supmsg_parse: the supervisor parses guest bytes, so its words are checked)
 *     ready   {op,accel,isolation,ready_ms}
 *     failed  {op,message}                      boot failed; the supervisor exits
 *     done    {op,exec,status:"ok"|"error",exit_code?,signal?,error?,stdin_sha256?,stdin_bytes?}
 *     event   {op,event,detail?}                a line for the box's events file
 *     stopped {op,reason}                       the VM is gone; the supervisor exits
 */

#define SUPMSG_MAX ((size_t)64 << 10)
#define SUPMSG_MAX_TEXT 1024 /* message, error, event, detail, reason */

enum supmsg_op {
	SUPMSG_READY = 0,
	SUPMSG_FAILED,
	SUPMSG_DONE,
	SUPMSG_EVENT,
	SUPMSG_STOPPED,
};

struct supmsg {
	enum supmsg_op op;
	json_t *obj; /* owns the strings below */
	const char *accel, *isolation, *message, *status, *error, *stdin_sha256, *event, *detail, *reason;
	int64_t ready_ms, exec, exit_code, signal, stdin_bytes;
	bool has_exit_code, has_signal, has_stdin;
};

_wur_ int supmsg_parse(const uint8_t *p, size_t n, struct supmsg *ret);
void supmsg_release(struct supmsg *m);

#endif
