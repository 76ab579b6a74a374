/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VMM_VM_BOX_H
#define TKBOX_VMM_VM_BOX_H

#include "vmm/agent-client.h"
#include "vmm/assets.h"
#include "vmm/vm.h"

/*
 * Boot a box end to end: assets (cache or override), initramfs, accelerator,
 * scratch disk, QEMU, boot config, agent ready (answers ping). Used by the
 * supervisor, tkbox-vm (debug/bench) and the e2e tests.
 */

#define VM_BOX_READY_TIMEOUT_MS 60000
#define VM_BOX_CONTACT_TIMEOUT_MS 45000 /* QEMU start -> the guest asks for its boot config */
#define VM_BOX_BOOT_ATTEMPTS 2
#define VM_BOX_DEFAULT_SCRATCH_MIB 1024
#define VM_BOX_DEAD_AGENT_WAIT_MS 2000 /* vm_box_shutdown on a dead agent connection: then a hard stop */

struct vm_box_opts {
	const char *state_dir; /* asset cache: <state_dir>/images/assets */
	bool allow_fetch; /* fetch the kernel with apt-get when not cached */
	const char *kernel; /* --kernel override (with modules_dir) */
	const char *modules_dir;
	const char *guest_bin; /* the static tkbox-guest */
	const char *rootfs; /* ext4 image (required) */
	const char *workspace; /* ext4 image or NULL */
	unsigned scratch_mib; /* 0: upper layers in guest memory */
	enum vm_accel accel; /* AUTO probes */
	unsigned vcpus;
	unsigned mem_mib;
	const char *box_dir; /* NULL: a new private directory under /tmp, removed by vm_box_free */
	const char *box_id; /* NULL: "box" */
	char *const *env; /* the box environment, NULL-terminated or NULL */
	const char *ca_pem; /* the box's CA certificate (PEM) for the guest to trust, or NULL */
	const char *qemu; /* NULL: qemu-system-x86_64 from PATH */
	const char *extra_cmdline; /* appended to the kernel command line (tkbox.trace=1) */
	/*
	 * Where vm_box_free copies the console log (at most VM_CONSOLE_LOG_MAX)
	 * before an own box dir is removed, so a person can read what a stopped
	 * box printed; NULL: not kept.
	 */
	const char *console_keep;
};

struct vm_box {
	struct vm *vm;
	struct agent_client *agent;
	char *box_dir;
	bool own_dir;
	char *console_keep;
	enum vm_accel accel;
	const char *isolation; /* "kvm" or "emulated" (TCG is no security boundary) */
	uint64_t t_start_ns; /* CLOCK_MONOTONIC just before QEMU was forked */
	uint64_t t_ready_ns; /* when the first pong arrived */
};

_wur_ int vm_box_boot(const struct vm_box_opts *o, struct vm_box **ret);

/* Orderly stop: shutdown request, ack, QEMU exits with status 0 (-EIO otherwise). */
_wur_ int vm_box_shutdown(struct vm_box *b, int timeout_ms);

/* Hard stop if still running; removes an own box dir. Accepts NULL. */
void vm_box_free(struct vm_box *b);

uint64_t vm_box_now_ns(void);

#endif
