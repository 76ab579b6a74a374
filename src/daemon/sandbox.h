/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_SANDBOX_H
#define TKBOX_DAEMON_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "json.h"
#include "macro.h"

/*
 * Confinement of the processes that handle guest, image or repository bytes.
 * One call, sandbox_apply(), used by every one of them; each profile says
 * what its process may still do.
 *
 * All profiles: no core dumps and no ptrace by its own uid (PR_SET_DUMPABLE
 * 0), no privilege gain (PR_SET_NO_NEW_PRIVS), no capability (the bounding
 * set is emptied when the process may; one without CAP_SETPCAP holds none
 * and cannot gain one under no_new_privs), Landlock where the kernel has it
 * (sandbox_landlock_abi), and a seccomp filter (TSYNC: every thread).
 *
 * SANDBOX_SUPERVISOR: the box's supervisor once its box is up. Its seccomp
 *   filter is an allowlist (sandbox_supervisor_syscalls) whose default kills
 *   the process (SIGSYS): no execve, no ptrace, no socket() of any family, no
 *   connect/bind/listen/accept, no fork/clone. Landlock: read, write, create
 *   and remove files under the writable directories only (no directories,
 *   links or devices made; nothing else on the file system, /proc included).
 * SANDBOX_IMAGE_PULL, SANDBOX_IMAGE_LOCAL, SANDBOX_WORKSPACE: children that
 *   run programs (git, mkfs.ext4, tar). Seccomp: a denylist (EPERM) of
 *   sandbox_denied_syscalls; socket() of every family but AF_INET/AF_INET6
 *   refused (EACCES), and for all but SANDBOX_IMAGE_PULL socket() and
 *   connect() refused whatever the family. Landlock: read/write/create (and
 *   rename across, LANDLOCK_ACCESS_FS_REFER) under `dir`, read and execute
 *   under sandbox_system_paths (/usr, /lib*, /bin, /sbin, /etc, /proc,
 *   /dev/urandom), read/write /dev/null and /dev/zero, nothing else. Extra
 *   read-only inputs (a source tree to snapshot) go in `ro`.
 *
 * SANDBOX_APPLY_PREPARE: `tkbox-host apply prepare` (the patch door): as
 *   SANDBOX_WORKSPACE (runs git; no socket(), no connect()), but it reads
 *   anywhere (Landlock: read beneath "/"; git reads the checkout, its git
 *   dir and the config files it is asked for) and writes only under `dir`,
 *   its scratch directory; it executes only under sandbox_system_paths.
 * SANDBOX_APPLY_WRITE: `tkbox-host apply-write`, the writer: no program
 *   (execve/execveat refused with EPERM; Landlock grants execution nowhere),
 *   no socket() or connect(); Landlock: read, write, create files,
 *   directories and symlinks and remove files under `dir` (the checkout)
 *   but remove no directory and rename nothing across directories; read
 *   `ro` (the scratch tree); /dev/null; nothing else, not even the system
 *   paths (it loads nothing once confined).
 *
 * SANDBOX_SUPERVISOR only: the parent of the first writable directory may
 * remove that directory (rmdir only), so it can remove its box directory.
 *
 * Order of use in a child that runs a program (the daemon has threads, so
 * between fork and exec only async-signal-safe calls are allowed):
 *   parent: sandbox_prepare(p, dir, ro, &sp)        allocates, opens the paths
 *   child:  sandbox_drop_uid(uid, gid) (optional)   then sandbox_enter(&sp, &rep)
 *   parent: sandbox_prepared_release(&sp)
 * A single-threaded process (the supervisor) can call sandbox_apply(), which
 * is those three in one.
 */

enum sandbox_profile {
	SANDBOX_SUPERVISOR,
	SANDBOX_IMAGE_PULL,
	SANDBOX_IMAGE_LOCAL,
	SANDBOX_WORKSPACE,
	SANDBOX_APPLY_PREPARE,
	SANDBOX_APPLY_WRITE,
	_SANDBOX_PROFILE_MAX,
};

/* What held. Filled by sandbox_enter()/sandbox_apply() even when they fail part way. */
struct sandbox_report {
	bool seccomp; /* a filter is loaded */
	bool allowlist; /* ... and it kills by default (SANDBOX_SUPERVISOR) */
	bool nnp; /* PR_SET_NO_NEW_PRIVS */
	bool caps_dropped; /* none effective, permitted, inheritable or ambient; bounding set empty when it could be */
	bool landlock; /* a Landlock domain restricts the process */
	int landlock_abi; /* the kernel's Landlock ABI, 0 when it has none */
	bool own_uid; /* its uid is in the box range (SANDBOX_UID_BASE...) */
	uid_t uid; /* real uid when the report was made */
};

/* Prepared confinement: everything that allocates or opens, done before fork. */
struct sandbox_prepared {
	enum sandbox_profile profile;
	int ruleset_fd; /* Landlock ruleset, -1 when the kernel has none */
	int landlock_abi; /* 0 when none */
	void *bpf; /* the seccomp program (struct sock_filter[]) */
	size_t bpf_len; /* in instructions */
};

/* The box uid range when the daemon runs as root: SANDBOX_UID_BASE + slot, gid the same. */
#define SANDBOX_UID_BASE 0x7b000000u
#define SANDBOX_UID_SLOTS 65536u

extern const char *const sandbox_denied_syscalls[];
extern const char *const sandbox_supervisor_syscalls[];
extern const char *const sandbox_system_paths[];

/* The kernel's Landlock ABI version, 0 when Landlock is absent or disabled. */
int sandbox_landlock_abi(void);

/* "supervisor", "image-pull", "image-local", "workspace", "apply-prepare", "apply-write". */
const char *sandbox_profile_name(enum sandbox_profile p);

/*
 * Build the filter and the Landlock ruleset for `p`. `dir` is the one
 * directory the process may write (required); `ro` is a NULL-terminated list
 * of extra read-only paths (may be NULL). -errno when a path cannot be opened
 * or the filter cannot be built.
 */
_wur_ int sandbox_prepare(enum sandbox_profile p, const char *dir, const char *const *ro, struct sandbox_prepared *ret);

/*
 * The same with several writable directories (the supervisor: its box
 * directory under /tmp and the daemon's box directory where the console log
 * is kept). For SANDBOX_SUPERVISOR the first one's parent may remove it
 * (rmdir only).
 */
_wur_ int sandbox_prepare_dirs(enum sandbox_profile p, const char *const *rw, const char *const *ro,
			       struct sandbox_prepared *ret);

/* Close and free what sandbox_prepare() made. Accepts a zeroed or released struct. */
void sandbox_prepared_release(struct sandbox_prepared *sp);

/*
 * Apply to the calling process, irreversibly. Async-signal-safe (prctl,
 * capset, landlock_restrict_self, seccomp only): use it between fork and
 * exec. -errno on the first step that failed; `rep` says what held.
 * A kernel without Landlock is not an error (rep->landlock false).
 */
_wur_ int sandbox_enter(const struct sandbox_prepared *sp, struct sandbox_report *rep);

/* sandbox_prepare + sandbox_enter + sandbox_prepared_release, for a single-threaded process. */
_wur_ int sandbox_apply(enum sandbox_profile p, const char *dir, struct sandbox_report *rep);

/* sandbox_prepare_dirs + sandbox_enter + sandbox_prepared_release. */
_wur_ int sandbox_apply_dirs(enum sandbox_profile p, const char *const *rw, const char *const *ro,
			     struct sandbox_report *rep);

/*
 * setgroups(0), setresgid(gid), setresuid(uid) by raw
 * system calls: async-signal-safe, for a forked child. -errno on failure; the
 * caller must then _exit.
 */
_wur_ int sandbox_drop_uid(uid_t uid, gid_t gid);

/* The uid for slot `slot` of the box range (SANDBOX_UID_BASE + slot). -ERANGE past the range. */
_wur_ int sandbox_box_uid(unsigned slot, uid_t *ret);

/*
 * The box record's `supervisor_isolation` object, as JSON text into `out`:
 * {"uid":"own"|"shared","seccomp":"allowlist"|"denylist"|"none",
 *  "no_new_privs":true|false,"landlock":"abi N"|"unsupported"|"not applied"}.
 * -ENOSPC when it does not fit.
 */
_wur_ int sandbox_report_format(const struct sandbox_report *rep, char *out, size_t size);

/*
 * The box's own uid, from the daemon (root only) to the supervisor it starts:
 * SANDBOX_UID_ENV=<uid> in the supervisor's environment. The supervisor boots
 * its box as the daemon's uid (it reads the private image cache and assets),
 * starts QEMU under the box uid (vm_run_as), and drops to it itself in
 * sandbox_supervisor_enter() before the sandbox.
 */
#define SANDBOX_UID_ENV "TKBOX_BOX_UID"

/*
 * A uid of the box range that no running process has (scanning /proc), for
 * a new box. -EUSERS when 64 tries found none free.
 */
_wur_ int sandbox_box_uid_pick(uid_t *ret);

/* The uid in SANDBOX_UID_ENV: 1 and *ret when set, 0 when not, -EINVAL when not a uid of the range. */
_wur_ int sandbox_box_uid_from_env(uid_t *ret);

/*
 * For the daemon (root) before it starts a box's supervisor: picks the box's
 * uid (sandbox_box_uid_pick), lets it keep its console log in `box_dir` (the
 * daemon's directory of the box: group = the box's gid, mode 01770, so it can
 * create files there but not remove or replace the daemon's own; a console
 * log an earlier box of the name left becomes this box's), and returns the
 * supervisor's environment: this process's, with SANDBOX_UID_ENV set.
 */
_wur_ int sandbox_box_give(const char *box_dir, uid_t *ret_uid, char ***ret_env);

/* Free what sandbox_box_give returned in ret_env. Accepts NULL. */
void sandbox_env_free(char **env);
static inline void sandbox_env_freep(char ***env)
{
	sandbox_env_free(*env);
}

/*
 * What confinement a running supervisor has, as the kernel reports it in
 * /proc/<pid>/status (Seccomp 2, NoNewPrivs 1, its real uid), with Landlock
 * from this kernel's ABI (a supervisor that could not restrict itself never
 * reports ready). -errno when the process is gone.
 */
_wur_ int sandbox_observe(pid_t pid, struct sandbox_report *ret);

/* sandbox_observe as the box record's `supervisor_isolation` object (sandbox_report_format); NULL when gone. */
json_t *sandbox_observe_json(pid_t pid);

/*
 * The supervisor, once its box is up: builds its profile (writable: box_dir,
 * and the directory of *console_keep where the console log is kept at the
 * end), moves its working directory to the latter and replaces *console_keep
 * with its base name (a box uid could not walk the daemon's private state
 * directory to it), drops to `uid` unless it is 0 (sandbox_drop_uid, uid and
 * gid the same), then sandbox_enter(). *console_keep may be NULL.
 */
_wur_ int sandbox_supervisor_enter(const char *box_dir, char **console_keep, uid_t uid, struct sandbox_report *rep);

#endif
