/* SPDX-License-Identifier: Apache-2.0 */
#include <linux/capability.h>
#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "banned.h"
#include "daemon/sandbox.h"

const char *const sandbox_denied_syscalls[] = {
	"execve",
	"execveat",
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
	NULL,
};

/* Every capability out of the bounding set, then none effective, permitted or inheritable. */
static int drop_capabilities(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[2] = { { 0 }, { 0 } };

	for (int cap = 0; cap <= 63; cap++) {
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL) {
			return negative_errno();
		}
	}
	return syscall(SYS_capset, &h, d) < 0 ? negative_errno() : 0;
}

int sandbox_supervisor(void)
{
	scmp_filter_ctx ctx;
	int r = 0;

	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		return negative_errno();
	}
	/* Same uid as its QEMU and box directory: signals and files need no capability. */
	r = drop_capabilities();
	if (r < 0) {
		return r;
	}
	ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx) {
		return -ENOMEM;
	}
	for (size_t i = 0; sandbox_denied_syscalls[i] && r >= 0; i++) {
		int nr = seccomp_syscall_resolve_name(sandbox_denied_syscalls[i]);
		if (nr == __NR_SCMP_ERROR) {
			continue; /* not on this architecture or libseccomp */
		}
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
	}
	if (r >= 0) {
		r = seccomp_load(ctx);
	}
	seccomp_release(ctx);
	return r < 0 ? r : 0;
}
