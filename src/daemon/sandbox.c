/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "banned.h"
#include "daemon/sandbox.h"

/* Newer than some distributions' linux/landlock.h: the values are the kernel's ABI. */
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif

/* The largest seccomp program accepted (BPF_MAXINSNS is the kernel's own cap). */
#define SANDBOX_BPF_MAX_INSNS BPF_MAXINSNS

/* Refused (EPERM) in every profile; the supervisor's allowlist has none of them either. */
const char *const sandbox_denied_syscalls[] = {
	"ptrace",
	"process_vm_readv",
	"process_vm_writev",
	"mount",
	"umount2",
	"pivot_root",
	"chroot",
	"unshare",
	"setns",
	"open_tree",
	"move_mount",
	"fsopen",
	"fsmount",
	"fsconfig",
	"fspick",
	"mount_setattr",
	"kexec_load",
	"kexec_file_load",
	"init_module",
	"finit_module",
	"delete_module",
	"bpf",
	"keyctl",
	"add_key",
	"request_key",
	"perf_event_open",
	"userfaultfd",
	"reboot",
	"swapon",
	"swapoff",
	"open_by_handle_at",
	"name_to_handle_at",
	"personality",
	"acct",
	"settimeofday",
	"clock_settime",
	"adjtimex",
	"iopl",
	"ioperm",
	/* io_uring runs socket and file operations that the filter never sees. */
	"io_uring_setup",
	"io_uring_enter",
	"io_uring_register",
	/* A new Landlock domain or seccomp filter could only narrow, but the children need neither. */
	"landlock_create_ruleset",
	"landlock_add_rule",
	"landlock_restrict_self",
	NULL,
};

/*
 * What the supervisor's loop calls once the box is up (the loop in
 * supervisor.c, the agent client, vm_poke/vm_stop_hard/vm_free, vm_box_free
 * with keep_console and vm_rm_rf, the logger), found by reading them and
 * checked by running tests/daemon/e2e.sh and hostile.sh under the filter.
 * Everything else kills the process (SCMP_ACT_KILL_PROCESS): in particular
 * execve/execveat, ptrace, socket, socketpair, connect, bind, listen, accept,
 * fork/clone.
 */
const char *const sandbox_supervisor_syscalls[] = {
	/* I/O on the fds it holds: the daemon's socketpair, the agent and QMP channels, exec clients */
	"read",
	"write",
	"readv",
	"writev",
	"pread64",
	"pwrite64",
	"recvfrom",
	"sendto",
	"recvmsg",
	"sendmsg",
	"shutdown", /* a client's stream is half-closed when its command ends */
	"poll",
	"ppoll",
	"close",
	"dup",
	"fcntl",
	"fstat",
	"newfstatat",
	"statx",
	"lseek",
	/* Files: Landlock keeps these to the box directories (console log, keep_console, removing the box dir) */
	"openat",
	"open",
	"getdents64",
	"unlink",
	"unlinkat",
	"rename",
	"renameat",
	"renameat2",
	"rmdir",
	"ftruncate",
	"memfd_create", /* the box's patch goes to the daemon as a sealed memfd (io_memfd_sealed; F_ADD_SEALS: fcntl) */
	"fsync",
	"fdatasync",
	/* Memory (malloc, jansson) */
	"brk",
	"mmap",
	"munmap",
	"mremap",
	"mprotect",
	"madvise",
	/* Secret values (secmem.c): locked when the limit allows, never in a core dump (MADV_DONTDUMP above) */
	"mlock",
	"munlock",
	/* Time and waiting */
	"clock_gettime",
	"clock_getres",
	"gettimeofday",
	"time",
	"nanosleep",
	"clock_nanosleep",
	"futex",
	"sched_yield",
	"restart_syscall",
	/* Its QEMU and console drainer: signal, reap */
	"kill",
	"wait4",
	"waitid",
	"getpid",
	"gettid",
	"tgkill", /* abort() on an assertion */
	"rt_sigaction",
	"rt_sigprocmask",
	"rt_sigreturn",
	"sigaltstack",
	"getrandom",
	"exit",
	"exit_group",
	NULL,
};

/* Read (and execute) only, for the children that run programs. */
const char *const sandbox_system_paths[] = {
	"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/proc", "/dev/urandom", "/dev/random", NULL,
};

/* Read and write, for the children: where programs send what they do not want. */
static const char *const sandbox_rw_devices[] = { "/dev/null", "/dev/zero", NULL };

static const char *const profile_names[_SANDBOX_PROFILE_MAX] = {
	[SANDBOX_SUPERVISOR] = "supervisor",	   [SANDBOX_IMAGE_PULL] = "image-pull",
	[SANDBOX_IMAGE_LOCAL] = "image-local",	   [SANDBOX_WORKSPACE] = "workspace",
	[SANDBOX_APPLY_PREPARE] = "apply-prepare", [SANDBOX_APPLY_WRITE] = "apply-write",
};

const char *sandbox_profile_name(enum sandbox_profile p)
{
	return (unsigned)p < _SANDBOX_PROFILE_MAX ? profile_names[p] : "unknown";
}

int sandbox_landlock_abi(void)
{
	long v = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	return v < 0 ? 0 : (int)v;
}

/* ------------------------------------------------------------- Landlock */

/* Every file-system right this ABI knows, so that what no rule grants is refused. */
static uint64_t landlock_handled(int abi)
{
	uint64_t a = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1; /* ABI 1: bits 0..12 */
	if (abi >= 2) {
		a |= LANDLOCK_ACCESS_FS_REFER;
	}
	if (abi >= 3) {
		a |= LANDLOCK_ACCESS_FS_TRUNCATE;
	}
	if (abi >= 5) {
		a |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
	}
	return a;
}

#define LL_FILE_RIGHTS                                                                                                 \
	(LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE |                   \
	 LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_IOCTL_DEV)
#define LL_READ (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
#define LL_READ_EXEC (LL_READ | LANDLOCK_ACCESS_FS_EXECUTE)
/* Read, write, create and remove files, directories and links; no devices, no execution. */
#define LL_RW                                                                                                          \
	(LL_READ | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_REMOVE_DIR |       \
	 LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |                  \
	 LANDLOCK_ACCESS_FS_MAKE_SYM)

/*
 * The patch writer in the checkout: files, directories (missing parents)
 * and symlinks made, files replaced (rename within a directory) and
 * removed; no directory removed, nothing executed, no rename across
 * directories (no LANDLOCK_ACCESS_FS_REFER).
 */
#define LL_RW_APPLY_WRITE                                                                                              \
	(LL_READ | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_REMOVE_FILE |      \
	 LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SYM)

#define LL_RW_SUPERVISOR                                                                                               \
	(LL_READ | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_REMOVE_DIR |       \
	 LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_REG)

/*
 * One rule: `rights` beneath `path`. A file gets only the file rights; a
 * path that does not exist is skipped when `optional` (a system path this
 * host lacks).
 */
static int landlock_allow(int ruleset, uint64_t handled, const char *path, uint64_t rights, bool optional)
{
	struct landlock_path_beneath_attr pb = { 0 };
	struct stat st;
	int fd = open(path, O_PATH | O_CLOEXEC);
	int r = 0;

	if (fd < 0) {
		return optional && errno == ENOENT ? 0 : negative_errno();
	}
	if (fstat(fd, &st) < 0) {
		r = negative_errno();
	} else {
		pb.parent_fd = fd;
		pb.allowed_access = rights & handled & (S_ISDIR(st.st_mode) ? ~0ULL : LL_FILE_RIGHTS);
		if (syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) < 0) {
			r = negative_errno();
		}
	}
	(void)close(fd);
	return r;
}

/* The parent of `dir` may remove `dir` itself (a box directory is removed by its supervisor). */
static int landlock_allow_rmdir_of(int ruleset, uint64_t handled, const char *dir)
{
	char parent[4096];
	char *slash;

	if (snprintf(parent, sizeof(parent), "%s", dir) >= (int)sizeof(parent)) {
		return -ENAMETOOLONG;
	}
	slash = strrchr(parent, '/');
	if (!slash || slash == parent) {
		return 0; /* "/" or relative: nothing to grant */
	}
	*slash = '\0';
	return landlock_allow(ruleset, handled, parent, LANDLOCK_ACCESS_FS_REMOVE_DIR, false);
}

static int landlock_build(enum sandbox_profile p, const char *const *rw, const char *const *ro, int abi, int *ret_fd)
{
	struct landlock_ruleset_attr attr = { .handled_access_fs = landlock_handled(abi) };
	uint64_t h = attr.handled_access_fs;
	int fd, r = 0;

	fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
	if (fd < 0) {
		return negative_errno();
	}
	for (size_t i = 0; rw && rw[i] && r >= 0; i++) {
		/* The supervisor makes no directory or link; the children's tools rename across their directory. */
		r = landlock_allow(fd, h, rw[i],
				   p == SANDBOX_SUPERVISOR    ? LL_RW_SUPERVISOR
				   : p == SANDBOX_APPLY_WRITE ? LL_RW_APPLY_WRITE
							      : LL_RW | LANDLOCK_ACCESS_FS_REFER,
				   false);
		if (r >= 0 && i == 0 && p == SANDBOX_SUPERVISOR) {
			r = landlock_allow_rmdir_of(fd, h, rw[i]);
		}
	}
	for (size_t i = 0; ro && ro[i] && r >= 0; i++) {
		r = landlock_allow(fd, h, ro[i], LL_READ, false);
	}
	if (p == SANDBOX_APPLY_PREPARE && r >= 0) {
		/* git reads the checkout, its git dir, the config files it is asked for: anywhere, read only */
		r = landlock_allow(fd, h, "/", LL_READ, false);
	}
	if (p == SANDBOX_APPLY_WRITE) {
		for (size_t i = 0; sandbox_rw_devices[i] && r >= 0; i++) {
			r = landlock_allow(fd, h, sandbox_rw_devices[i],
					   LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE, true);
		}
	} else if (p != SANDBOX_SUPERVISOR) {
		for (size_t i = 0; sandbox_system_paths[i] && r >= 0; i++) {
			r = landlock_allow(fd, h, sandbox_system_paths[i], LL_READ_EXEC, true);
		}
		for (size_t i = 0; sandbox_rw_devices[i] && r >= 0; i++) {
			r = landlock_allow(fd, h, sandbox_rw_devices[i],
					   LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE, true);
		}
	}
	if (r < 0) {
		(void)close(fd);
		return r;
	}
	*ret_fd = fd;
	return 0;
}

/* -------------------------------------------------------------- seccomp */

static int add_names(scmp_filter_ctx ctx, const char *const *names, uint32_t action)
{
	for (size_t i = 0; names[i]; i++) {
		int nr = seccomp_syscall_resolve_name(names[i]);
		int r;
		if (nr == __NR_SCMP_ERROR) {
			continue; /* not on this architecture or libseccomp */
		}
		r = seccomp_rule_add(ctx, action, nr, 0);
		if (r < 0) {
			return r;
		}
	}
	return 0;
}

/*
 * The children's denylist: sandbox_denied_syscalls, execution stays
 * allowed (but for SANDBOX_APPLY_WRITE); socket() of every family is refused
 * with EACCES, except AF_INET/AF_INET6 for SANDBOX_IMAGE_PULL (its registry
 * connection).
 */
static int children_rules(scmp_filter_ctx ctx, enum sandbox_profile p)
{
	int r = add_names(ctx, sandbox_denied_syscalls, SCMP_ACT_ERRNO(EPERM));

	if (r < 0) {
		return r;
	}
	if (p == SANDBOX_APPLY_WRITE) {
		/* the writer runs no program */
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(execve), 0);
		r = r < 0 ? r : seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(execveat), 0);
		if (r < 0) {
			return r;
		}
	}
	if (p != SANDBOX_IMAGE_PULL) {
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 0);
		return r < 0 ? r : seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(connect), 0);
	}
	for (int fam = 0; fam < AF_MAX && r >= 0; fam++) {
		if (fam != AF_INET && fam != AF_INET6) {
			struct scmp_arg_cmp eq = { .arg = 0, .op = SCMP_CMP_EQ, .datum_a = (scmp_datum_t)fam };
			r = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1, &eq);
		}
	}
	if (r >= 0) {
		struct scmp_arg_cmp ge = { .arg = 0, .op = SCMP_CMP_GE, .datum_a = AF_MAX };
		r = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1, &ge);
	}
	return r;
}

/* The filter as a BPF program in memory (libseccomp 2.5 exports only to an fd). */
static int seccomp_build(enum sandbox_profile p, void **ret_bpf, size_t *ret_len)
{
	bool allowlist = p == SANDBOX_SUPERVISOR;
	scmp_filter_ctx ctx = seccomp_init(allowlist ? SCMP_ACT_KILL_PROCESS : SCMP_ACT_ALLOW);
	void *bpf = NULL;
	off_t size = 0;
	int fd = -1, r;

	if (!ctx) {
		return -ENOMEM;
	}
	r = allowlist ? add_names(ctx, sandbox_supervisor_syscalls, SCMP_ACT_ALLOW) : children_rules(ctx, p);
	if (r >= 0) {
		fd = memfd_create("tkbox-seccomp", MFD_CLOEXEC);
		r = fd < 0 ? negative_errno() : seccomp_export_bpf(ctx, fd);
	}
	if (r >= 0) {
		size = lseek(fd, 0, SEEK_END);
		if (size <= 0 || (size_t)size % sizeof(struct sock_filter) != 0 ||
		    (size_t)size / sizeof(struct sock_filter) > SANDBOX_BPF_MAX_INSNS) {
			r = -E2BIG;
		}
	}
	if (r >= 0 && !(bpf = malloc((size_t)size))) {
		r = -ENOMEM;
	}
	if (r >= 0 && pread(fd, bpf, (size_t)size, 0) != size) {
		r = -EIO;
	}
	if (fd >= 0) {
		(void)close(fd);
	}
	seccomp_release(ctx);
	if (r < 0) {
		free(bpf);
		return r;
	}
	*ret_bpf = bpf;
	*ret_len = (size_t)size / sizeof(struct sock_filter);
	return 0;
}

/* ------------------------------------------------------------ the API */

int sandbox_prepare_dirs(enum sandbox_profile p, const char *const *rw, const char *const *ro,
			 struct sandbox_prepared *ret)
{
	struct sandbox_prepared sp = { .profile = p, .ruleset_fd = -1 };
	int r;

	if ((unsigned)p >= _SANDBOX_PROFILE_MAX || !rw || !rw[0] || rw[0][0] != '/') {
		return -EINVAL;
	}
	sp.landlock_abi = sandbox_landlock_abi();
	if (sp.landlock_abi > 0) {
		r = landlock_build(p, rw, ro, sp.landlock_abi, &sp.ruleset_fd);
		if (r < 0) {
			return r;
		}
	}
	r = seccomp_build(p, &sp.bpf, &sp.bpf_len);
	if (r < 0) {
		sandbox_prepared_release(&sp);
		return r;
	}
	*ret = sp;
	return 0;
}

int sandbox_prepare(enum sandbox_profile p, const char *dir, const char *const *ro, struct sandbox_prepared *ret)
{
	const char *rw[] = { dir, NULL };
	return sandbox_prepare_dirs(p, rw, ro, ret);
}

void sandbox_prepared_release(struct sandbox_prepared *sp)
{
	if (!sp) {
		return;
	}
	if (sp->ruleset_fd >= 0) {
		(void)close(sp->ruleset_fd);
	}
	free(sp->bpf);
	sp->bpf = NULL;
	sp->bpf_len = 0;
	sp->ruleset_fd = -1;
}

/*
 * Every capability out of the bounding set, then none effective, permitted
 * or inheritable. A process that may not change its bounding set (no
 * CAP_SETPCAP: not root, or after sandbox_drop_uid) and holds no capability
 * cannot gain one by exec under no_new_privs (set before this), so for it an
 * EPERM there is not a failure.
 */
static int drop_capabilities(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[2] = { { 0 }, { 0 } };

	for (int cap = 0; cap <= 63; cap++) {
		if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) != 1 || prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0) {
			continue;
		}
		if (errno != EPERM || syscall(SYS_capget, &h, d) < 0 ||
		    (d[0].effective | d[0].permitted | d[1].effective | d[1].permitted) != 0) {
			return -EPERM;
		}
		break; /* holds none and cannot gain one: the rest of the set is out of reach too */
	}
	h = (struct __user_cap_header_struct){ .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	memset(d, 0, sizeof(d));
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL) {
		return negative_errno();
	}
	return syscall(SYS_capset, &h, d) < 0 ? negative_errno() : 0;
}

int sandbox_enter(const struct sandbox_prepared *sp, struct sandbox_report *rep)
{
	struct sock_fprog prog;

	*rep = (struct sandbox_report){ .landlock_abi = sp->landlock_abi, .uid = getuid() };
	rep->own_uid = rep->uid >= SANDBOX_UID_BASE && rep->uid < SANDBOX_UID_BASE + SANDBOX_UID_SLOTS;
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		return negative_errno();
	}
	rep->nnp = true;
	if (drop_capabilities() < 0) {
		return negative_errno();
	}
	rep->caps_dropped = true;
	if (sp->ruleset_fd >= 0) {
		if (syscall(SYS_landlock_restrict_self, sp->ruleset_fd, 0) < 0) {
			return negative_errno();
		}
		rep->landlock = true;
	}
	if (!sp->bpf || sp->bpf_len == 0) {
		return -EINVAL;
	}
	prog = (struct sock_fprog){ .len = (unsigned short)sp->bpf_len, .filter = sp->bpf };
	/* TSYNC: every thread of the process, or none. */
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0) {
		return errno ? negative_errno() : -EBUSY;
	}
	rep->seccomp = true;
	rep->allowlist = sp->profile == SANDBOX_SUPERVISOR;
	return 0;
}

int sandbox_apply_dirs(enum sandbox_profile p, const char *const *rw, const char *const *ro, struct sandbox_report *rep)
{
	struct sandbox_prepared sp;
	int r;

	*rep = (struct sandbox_report){ .landlock_abi = sandbox_landlock_abi(), .uid = getuid() };
	r = sandbox_prepare_dirs(p, rw, ro, &sp);
	if (r < 0) {
		return r;
	}
	r = sandbox_enter(&sp, rep);
	sandbox_prepared_release(&sp);
	return r;
}

int sandbox_apply(enum sandbox_profile p, const char *dir, struct sandbox_report *rep)
{
	const char *rw[] = { dir, NULL };
	return sandbox_apply_dirs(p, rw, NULL, rep);
}

int sandbox_supervisor_enter(const char *box_dir, char **console_keep, uid_t uid, struct sandbox_report *rep)
{
	struct sandbox_prepared sp;
	_cleanup_free_ char *keep_dir = NULL, *keep_name = NULL;
	const char *rw[3] = { box_dir, NULL, NULL };
	char *slash;
	int r;

	*rep = (struct sandbox_report){ .landlock_abi = sandbox_landlock_abi(), .uid = getuid() };
	if (*console_keep) {
		keep_dir = strdup(*console_keep);
		slash = keep_dir ? strrchr(keep_dir, '/') : NULL;
		if (!slash || slash == keep_dir || !slash[1]) {
			return keep_dir ? -EINVAL : -ENOMEM;
		}
		*slash = '\0';
		keep_name = strdup(slash + 1);
		if (!keep_name) {
			return -ENOMEM;
		}
		rw[1] = keep_dir;
	}
	r = sandbox_prepare_dirs(SANDBOX_SUPERVISOR, rw, NULL, &sp);
	if (r < 0) {
		return r;
	}
	if (keep_dir && chdir(keep_dir) < 0) {
		r = negative_errno();
	}
	if (r >= 0 && uid != 0) {
		r = sandbox_drop_uid(uid, (gid_t)uid);
	}
	if (r >= 0) {
		r = sandbox_enter(&sp, rep);
	}
	sandbox_prepared_release(&sp);
	if (r >= 0 && keep_name) {
		free(*console_keep);
		*console_keep = steal_ptr(keep_name);
	}
	return r;
}

int sandbox_box_uid_from_env(uid_t *ret)
{
	const char *v = getenv(SANDBOX_UID_ENV);
	char *end = NULL;
	unsigned long u;

	if (!v) {
		return 0;
	}
	errno = 0;
	u = strtoul(v, &end, 10);
	if (errno || !end || *end || end == v || u < SANDBOX_UID_BASE || u >= SANDBOX_UID_BASE + SANDBOX_UID_SLOTS) {
		return -EINVAL;
	}
	*ret = (uid_t)u;
	return 1;
}

/* Does a running process have this uid (the owner of /proc/<pid>)? */
static bool uid_in_use(uid_t uid)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	bool used = false;

	if (!d) {
		return true; /* cannot tell: take another */
	}
	while (!used && (e = readdir(d))) {
		struct stat st;
		if (e->d_name[0] >= '1' && e->d_name[0] <= '9' && fstatat(dirfd(d), e->d_name, &st, 0) == 0) {
			used = st.st_uid == uid;
		}
	}
	(void)closedir(d);
	return used;
}

int sandbox_box_give(const char *box_dir, uid_t *ret_uid, char ***ret_env)
{
	extern char **environ;
	static const char *const kept[] = { "console.log", "console.log.tmp" };
	size_t n = 0, k = 0;
	char **env;
	uid_t uid;
	int dfd, r;

	r = sandbox_box_uid_pick(&uid);
	if (r < 0) {
		return r;
	}
	dfd = open(box_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		return negative_errno();
	}
	if (fchown(dfd, (uid_t)-1, (gid_t)uid) < 0 || fchmod(dfd, 01770) < 0) {
		r = negative_errno();
	}
	for (size_t i = 0; i < ARRAY_SIZE(kept) && r >= 0; i++) {
		struct stat st;
		int fd = openat(dfd, kept[i], O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0) {
			continue; /* none, or not a file this box may take over */
		}
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && fchown(fd, uid, (gid_t)uid) < 0) {
			r = negative_errno();
		}
		(void)close(fd);
	}
	(void)close(dfd);
	if (r < 0) {
		return r;
	}
	while (environ && environ[n]) {
		n++;
	}
	env = calloc(n + 2, sizeof(char *));
	if (!env) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		if (strncmp(environ[i], SANDBOX_UID_ENV "=", strlen(SANDBOX_UID_ENV) + 1) != 0) {
			env[k++] = environ[i]; /* borrowed: only the new entry is freed (sandbox_env_free) */
		}
	}
	if (asprintf(&env[k], "%s=%u", SANDBOX_UID_ENV, (unsigned)uid) < 0) {
		free(env);
		return -ENOMEM;
	}
	*ret_uid = uid;
	*ret_env = env;
	return 0;
}

void sandbox_env_free(char **env)
{
	size_t n = 0;

	if (!env) {
		return;
	}
	while (env[n]) {
		n++;
	}
	if (n > 0) {
		free(env[n - 1]); /* the one entry sandbox_box_give made */
	}
	free(env);
}

int sandbox_observe(pid_t pid, struct sandbox_report *ret)
{
	char path[64], line[256];
	struct sandbox_report rep = { 0 };
	bool uid_seen = false;
	FILE *f;

	(void)snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f) {
		return negative_errno();
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned v;
		if (sscanf(line, "Seccomp: %u", &v) == 1) {
			rep.seccomp = rep.allowlist =
				v == 2; /* filter mode: the supervisor's filter is its allowlist */
		} else if (sscanf(line, "NoNewPrivs: %u", &v) == 1) {
			rep.nnp = v == 1;
		} else if (sscanf(line, "Uid: %u", &v) == 1) {
			rep.uid = (uid_t)v;
			uid_seen = true;
		} else if (strcmp(line, "CapEff:\t0000000000000000\n") == 0) {
			rep.caps_dropped = true;
		}
	}
	(void)fclose(f);
	if (!uid_seen) {
		return -ESRCH;
	}
	rep.own_uid = rep.uid >= SANDBOX_UID_BASE && rep.uid < SANDBOX_UID_BASE + SANDBOX_UID_SLOTS;
	rep.landlock_abi = sandbox_landlock_abi();
	rep.landlock = rep.seccomp && rep.landlock_abi > 0;
	*ret = rep;
	return 0;
}

int sandbox_box_uid_pick(uid_t *ret)
{
	static unsigned next;
	static bool seeded;
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	int r = -EUSERS;

	pthread_mutex_lock(&lock);
	if (!seeded) {
		/* A random start: a restarted daemon does not hand out the uid its last boxes had. */
		if (getrandom(&next, sizeof(next), 0) != sizeof(next)) {
			next = (unsigned)getpid();
		}
		seeded = true;
	}
	for (int i = 0; i < 64; i++) {
		uid_t u = (uid_t)(SANDBOX_UID_BASE + next++ % SANDBOX_UID_SLOTS);
		if (!uid_in_use(u)) {
			*ret = u;
			r = 0;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	return r;
}

int sandbox_drop_uid(uid_t uid, gid_t gid)
{
	/* The bounding set first, while CAP_SETPCAP is there: nothing can come back through a later exec. */
	for (int cap = 0; cap <= 63; cap++) {
		if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
			return negative_errno();
		}
	}
	/* Raw system calls: in a forked child of a threaded process glibc's set*id broadcast is not wanted. */
	if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, gid, gid, gid) < 0 ||
	    syscall(SYS_setresuid, uid, uid, uid) < 0) {
		return negative_errno();
	}
	return 0;
}

int sandbox_box_uid(unsigned slot, uid_t *ret)
{
	if (slot >= SANDBOX_UID_SLOTS) {
		return -ERANGE;
	}
	*ret = (uid_t)(SANDBOX_UID_BASE + slot);
	return 0;
}

int sandbox_report_format(const struct sandbox_report *rep, char *out, size_t size)
{
	char ll[32];
	int n;

	if (rep->landlock) {
		(void)snprintf(ll, sizeof(ll), "abi %d", rep->landlock_abi);
	} else {
		(void)snprintf(ll, sizeof(ll), "%s", rep->landlock_abi > 0 ? "not applied" : "unsupported");
	}
	n = snprintf(out, size, "{\"uid\":\"%s\",\"seccomp\":\"%s\",\"no_new_privs\":%s,\"landlock\":\"%s\"}",
		     rep->own_uid ? "own" : "shared",
		     !rep->seccomp    ? "none"
		     : rep->allowlist ? "allowlist"
				      : "denylist",
		     rep->nnp ? "true" : "false", ll);
	return n < 0 || (size_t)n >= size ? -ENOSPC : 0;
}

json_t *sandbox_observe_json(pid_t pid)
{
	struct sandbox_report rep;
	char text[256];
	json_t *v = NULL;

	if (pid > 0 && sandbox_observe(pid, &rep) >= 0 && sandbox_report_format(&rep, text, sizeof(text)) >= 0) {
		v = json_loads(text, 0, NULL);
	}
	return v;
}
