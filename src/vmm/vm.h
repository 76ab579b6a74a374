/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VMM_VM_H
#define TKBOX_VMM_VM_H

#include <sys/types.h>

#include "vmm/boot-proto.h"

/*
 * One box's VM: QEMU microvm with no network device, started by the
 * supervisor (fork, optional privilege drop, exec). The supervisor listens on
 * the channel sockets first and QEMU connects to them as a client, so no byte
 * the guest writes is lost before the host is there.
 *
 * Box directory layout (paths must fit a sockaddr_un):
 *   agent.sock egress.sock boot.sock qmp.sock console.sock   (unlinked once QEMU connected)
 *   console.log                                              (serial console, capped)
 */

enum vm_accel {
	VM_ACCEL_AUTO = 0,
	VM_ACCEL_KVM,
	VM_ACCEL_TCG,
};

const char *vm_accel_name(enum vm_accel a);
_wur_ int vm_accel_parse(const char *s, enum vm_accel *ret);

#define VM_DEFAULT_VCPUS 2
#define VM_DEFAULT_MEM_MIB 2048
/*
 * Under TCG, QEMU's translated-code buffer (tb-size, MiB): QEMU's default is up to 1 GiB, and a box's idle QEMU
 * kept ~50 MiB of it resident. A box's kernel and tools fit in far less; when it fills, QEMU flushes and retranslates.
 */
#define VM_TCG_TB_MIB 16
#define VM_MAX_VCPUS 64
#define VM_MAX_MEM_MIB (256 * 1024)
#define VM_CONSOLE_LOG_MAX ((size_t)1 << 20)
#define VM_CONNECT_TIMEOUT_MS 15000
#define VM_QEMU "qemu-system-x86_64"
#define VM_BASE_CMDLINE                                                                                                \
	"console=ttyS0 quiet no_timer_check tsc=reliable i8042.noaux i8042.nokbd i8042.nopnp cryptomgr.notests "       \
	"8250.nr_uarts=1 panic=-1 reboot=t"

struct vm_config {
	const char *qemu; /* NULL: VM_QEMU from PATH */
	const char *box_dir; /* exists, private to this box */
	const char *kernel; /* uncompressed ELF (PVH) */
	const char *initrd;
	const char *rootfs; /* ext4 image, attached read-only; NULL for a probe boot */
	const char *scratch; /* writable, NULL: upper layers in guest memory */
	const char *workspace; /* read-only lower of /workspace, NULL: none */
	unsigned vcpus; /* 0: default */
	unsigned mem_mib; /* 0: default */
	enum vm_accel accel; /* KVM or TCG (resolve AUTO with vm_accel_resolve first) */
	uint64_t tsc_khz; /* 0: do not pass tsc_early_khz (never under TCG in production) */
	const char *extra_cmdline;
	bool drop_privileges;
	uid_t uid;
	gid_t gid;
	size_t console_max; /* 0: VM_CONSOLE_LOG_MAX */
};

/* The QEMU command line for c, with sockets and logs under c->box_dir (pure; NULL-terminated; strv_free it). */
_wur_ int vm_qemu_argv(const struct vm_config *c, char ***ret);

struct vm {
	pid_t qemu_pid;
	pid_t console_pid;
	int agent_fd;
	int egress_fd;
	int boot_fd;
	int qmp_fd;
	enum vm_accel accel;
	int exit_status; /* valid once reaped */
	bool reaped;
	bool qmp_negotiated;
};

/*
 * From now on a box's QEMU (and its console drainer) runs as uid:gid
 * (setgroups to none, or /dev/kvm's group when KVM needs it). Its disks are
 * handed over as fds, so the image cache may stay private. Not for the
 * accelerator probe (a config with no rootfs).
 */
void vm_run_as(uid_t uid, gid_t gid);

/* Start QEMU and wait until it connected to every channel. */
_wur_ int vm_start(const struct vm_config *c, struct vm **ret);

/*
 * Serve the boot config once on tkbox.boot: wait up to contact_ms for the
 * guest's request (-EHOSTDOWN when none came: the guest never reached init),
 * stamp the host clock into bc, send it, wait up to timeout_ms for the ack,
 * close the port for good (-EALREADY on a second call).
 */
_wur_ int vm_serve_boot_config(struct vm *vm, struct boot_config *bc, int contact_ms, int timeout_ms);

/*
 * Wake QEMU's main loop through QMP. QEMU re-checks whether a chardev may
 * read only when its main loop runs; after the guest opens a virtio-serial
 * port nothing wakes it, so bytes the host already wrote can sit unread for
 * a second or more under TCG. Call this while waiting for the guest's first
 * answer on a port. Drains and discards QMP's replies.
 */
void vm_poke(struct vm *vm);

/* Wait for QEMU to exit (timeout_ms < 0: forever). 1 when it exited, 0 on timeout. */
_wur_ int vm_wait(struct vm *vm, int timeout_ms);

/* Hard stop: QMP quit, then SIGKILL if QEMU is still there after grace_ms. Reaps it. */
_wur_ int vm_stop_hard(struct vm *vm, int grace_ms);

/* Kills QEMU if still running, reaps everything, closes fds. Accepts NULL. */
void vm_free(struct vm *vm);

/* Peak resident set of QEMU so far (VmHWM), in KiB. */
_wur_ int vm_qemu_peak_rss_kib(const struct vm *vm, uint64_t *ret);

/* ---- host facts ---- */

/*
 * The host's TSC frequency in kHz: the kernel's "tsc: Refined TSC clocksource
 * calibration" or "tsc: Detected ... MHz processor" line, else /proc/cpuinfo.
 */
_wur_ int vm_host_tsc_khz(uint64_t *ret);
/* Pure parsers behind it. -ENOENT when the text has no such line. */
_wur_ int tsc_khz_from_kmsg(const char *text, size_t n, uint64_t *ret);
_wur_ int tsc_khz_from_cpuinfo(const char *text, size_t n, uint64_t *ret);

/*
 * Resolve VM_ACCEL_AUTO: KVM only when /dev/kvm opens and a probe boot of
 * this kernel under KVM reaches user space (an openable but broken /dev/kvm
 * is common under nested virtualisation). The verdict is cached in
 * <state_dir>/accel-probe keyed by host kernel, QEMU and guest kernel.
 */
_wur_ int vm_accel_resolve(enum vm_accel requested, const char *state_dir, const char *kernel,
			   const char *kernel_sha256, const char *initrd, enum vm_accel *ret);

/* A bare boot to the probe init (tkbox.probe=1): 1 when it printed READY within timeout_ms. */
_wur_ int vm_probe_boot(const char *qemu, const char *dir, const char *kernel, const char *initrd, enum vm_accel accel,
			uint64_t tsc_khz, int timeout_ms);

#endif
