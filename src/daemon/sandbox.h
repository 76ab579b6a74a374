/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_SANDBOX_H
#define TKBOX_DAEMON_SANDBOX_H

#include "macro.h"

/*
 * The supervisor's confinement once its box is up. From then on it parses
 * guest bytes and needs no new program, so: no core dumps and no ptrace by
 * its own uid (PR_SET_DUMPABLE 0), no privilege gain (PR_SET_NO_NEW_PRIVS),
 * no capability (even as root: the bounding set is emptied), and a seccomp
 * filter that fails with EPERM every call in
 * sandbox_denied_syscalls: running programs (execve, execveat), reading or
 * writing other processes (ptrace, process_vm_*), namespaces and mounts,
 * kernel modules, kexec, bpf, the kernel keyring, perf, userfaultfd, reboot,
 * swap. Everything else stays allowed (it still forks nothing new, but keeps
 * its sockets, files and QEMU's process to signal).
 */

extern const char *const sandbox_denied_syscalls[];

/* Apply to the calling process (irreversible). -errno when the filter could not be loaded. */
_wur_ int sandbox_supervisor(void);

#endif
