/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "banned.h"
#include "crypto.h"
#include "io.h"
#include "log.h"
#include "vmm/initramfs.h"
#include "vmm/vm-box.h"

uint64_t vm_box_now_ns(void)
{
	struct timespec ts;
	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A sparse ext4 file for the writable layers (mkfs.ext4 from e2fsprogs; lazy init keeps it fast). */
static int make_scratch(const char *path, unsigned mib)
{
	char size[32];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	int r;

	if (fd < 0) {
		return -errno;
	}
	r = ftruncate(fd, (off_t)mib << 20) < 0 ? -errno : 0;
	(void)close(fd);
	if (r < 0) {
		return r;
	}
	(void)snprintf(size, sizeof(size), "%u", mib);
	{
		char *argv[] = {
			"mkfs.ext4", "-q",	     "-F",	   "-E", "lazy_itable_init=1,lazy_journal_init=1",
			"-O",	     "^has_journal", (char *)path, NULL
		};
		r = vm_run_program(argv, NULL, -1);
	}
	if (r != 0) {
		log_error("mkfs.ext4 %s failed (status %d)", path, r);
		return -EIO;
	}
	return 0;
}

/* Copy <box_dir>/console.log (already capped by the drainer; capped again here) to dst, replacing it. */
static int keep_console(const char *box_dir, const char *dst)
{
	_cleanup_free_ char *src = NULL, *tmp = NULL;
	_cleanup_close_ int in = -1, out = -1;
	static uint8_t chunk[65536];
	size_t total = 0;
	int r = 0;

	if (asprintf(&src, "%s/console.log", box_dir) < 0 || asprintf(&tmp, "%s.tmp", dst) < 0) {
		return -ENOMEM;
	}
	in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (in < 0) {
		return errno == ENOENT ? 0 : -errno;
	}
	out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0) {
		return -errno;
	}
	while (total < VM_CONSOLE_LOG_MAX + 4096) {
		ssize_t n = RETRY_EINTR(read(in, chunk, MIN(sizeof(chunk), VM_CONSOLE_LOG_MAX + 4096 - total)));
		if (n <= 0) {
			r = n < 0 ? -errno : 0;
			break;
		}
		r = io_write_all(out, chunk, (size_t)n);
		if (r < 0) {
			break;
		}
		total += (size_t)n;
	}
	if (r >= 0 && rename(tmp, dst) < 0) {
		r = -errno;
	}
	if (r < 0) {
		(void)unlink(tmp);
	}
	return r;
}

/* After a failed boot: the tail of the guest's console in the log (quoted: the guest wrote it). */
static void log_console_tail(const char *box_dir)
{
	_cleanup_free_ char *path = NULL;
	_cleanup_close_ int fd = -1;
	char text[4096], q[LOG_QUOTE_BUFSIZE];
	ssize_t n;
	off_t size;
	const char *p, *end;

	if (asprintf(&path, "%s/console.log", box_dir) < 0) {
		return;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		return;
	}
	size = lseek(fd, 0, SEEK_END);
	n = pread(fd, text, sizeof(text), size > (off_t)sizeof(text) ? size - (off_t)sizeof(text) : 0);
	if (n <= 0) {
		return;
	}
	end = text + n;
	for (p = text; p < end;) {
		const char *e = memchr(p, '\n', (size_t)(end - p));
		if (!e) {
			e = end;
		}
		if (e > p) {
			log_error("console: %s", log_quote(p, (size_t)(e - p), q));
		}
		p = e + 1;
	}
}

/*
 * One start of QEMU up to the agent's first pong. -EHOSTDOWN when the guest
 * never asked for its boot config (it did not reach init): QEMU is stopped
 * and the caller may try again.
 */
static int boot_attempt(struct vm_box *b, const struct vm_config *c, struct boot_config *bc)
{
	uint32_t ping_id;
	int r;

	if (b->agent) {
		agent_client_free(b->agent);
		b->agent = NULL;
	}
	if (b->vm) {
		(void)vm_stop_hard(b->vm, 1000);
		vm_free(b->vm);
		b->vm = NULL;
	}
	b->t_start_ns = vm_box_now_ns();
	r = vm_start(c, &b->vm);
	if (r < 0) {
		return r;
	}
	r = agent_client_new(b->vm->agent_fd, &b->agent);
	if (r < 0) {
		return r;
	}
	b->vm->agent_fd = -1; /* owned by the client now */
	/* The ping waits in the socket until the guest opens its port. */
	r = agent_client_ping(b->agent, &ping_id);
	if (r < 0) {
		return r;
	}
	r = vm_serve_boot_config(b->vm, bc, VM_BOX_CONTACT_TIMEOUT_MS, VM_BOX_READY_TIMEOUT_MS);
	if (r == -EHOSTDOWN) {
		(void)vm_stop_hard(b->vm, 1000);
		return r;
	}
	if (r < 0) {
		log_error("serving the boot config: %s", tk_strerror(r));
		return r;
	}
	for (uint64_t deadline = vm_box_now_ns() + VM_BOX_READY_TIMEOUT_MS * 1000000ull;;) {
		struct agent_event ev;
		/* Short waits with a QMP poke between them: see vm_poke. */
		vm_poke(b->vm);
		r = agent_client_next(b->agent, 20, &ev);
		if (r == 0) {
			if (vm_box_now_ns() < deadline) {
				continue;
			}
			r = -ETIMEDOUT;
		}
		if (r < 0) {
			log_error("waiting for the agent: %s", tk_strerror(r));
			return r;
		}
		if (ev.type == AGENT_EV_PONG && ev.id == ping_id) {
			return 0;
		}
	}
}

int vm_box_boot(const struct vm_box_opts *o, struct vm_box **ret)
{
	struct vm_assets assets = { 0 };
	struct vm_box *b;
	struct vm_config c = { 0 };
	struct boot_config bc = { 0 };
	_cleanup_free_ char *initrd = NULL, *scratch = NULL;
	char *empty_env[] = { NULL };
	uint64_t khz = 0;
	int r;

	if (!o->rootfs || !o->guest_bin) {
		return -EINVAL;
	}
	b = calloc(1, sizeof(*b));
	if (!b) {
		return -ENOMEM;
	}
	if (o->box_dir) {
		b->box_dir = strdup(o->box_dir);
	} else {
		/* Short: socket paths must fit sockaddr_un. */
		b->box_dir = strdup("/tmp/tkbox-XXXXXX");
		if (b->box_dir && !mkdtemp(b->box_dir)) {
			free(b->box_dir);
			b->box_dir = NULL;
		}
		b->own_dir = b->box_dir != NULL;
	}
	if (!b->box_dir) {
		free(b);
		return -ENOMEM;
	}
	if (o->console_keep && !(b->console_keep = strdup(o->console_keep))) {
		free(b->box_dir);
		free(b);
		return -ENOMEM;
	}
	if (o->kernel || o->modules_dir) {
		r = o->kernel && o->modules_dir ? vm_assets_override(o->kernel, o->modules_dir, &assets) : -EINVAL;
	} else {
		r = vm_assets_ensure(o->state_dir, o->allow_fetch, &assets);
	}
	if (r < 0) {
		goto fail;
	}
	if (asprintf(&initrd, "%s/initramfs.cpio", b->box_dir) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	r = vm_initramfs_build(o->guest_bin, &assets, initrd);
	if (r < 0) {
		log_error("building the initramfs: %s", tk_strerror(r));
		goto fail;
	}
	r = vm_accel_resolve(o->accel, o->state_dir, assets.kernel, assets.kernel_sha256, initrd, &b->accel);
	if (r < 0) {
		goto fail;
	}
	b->isolation = b->accel == VM_ACCEL_KVM ? "kvm" : "emulated";
	if (o->scratch_mib) {
		if (asprintf(&scratch, "%s/scratch.ext4", b->box_dir) < 0) {
			r = -ENOMEM;
			goto fail;
		}
		r = make_scratch(scratch, o->scratch_mib);
		if (r < 0) {
			goto fail;
		}
	}
	r = vm_host_tsc_khz(&khz);
	if (r < 0) {
		log_warn("host TSC frequency unknown (%s): booting without tsc_early_khz", tk_strerror(r));
		khz = 0;
	}
	c = (struct vm_config){
		.qemu = o->qemu,
		.box_dir = b->box_dir,
		.kernel = assets.kernel,
		.initrd = initrd,
		.rootfs = o->rootfs,
		.scratch = scratch,
		.workspace = o->workspace,
		.vcpus = o->vcpus,
		.mem_mib = o->mem_mib,
		.accel = b->accel,
		.tsc_khz = khz,
		.extra_cmdline = o->extra_cmdline,
	};
	bc = (struct boot_config){
		.box_id = (char *)(o->box_id ? o->box_id : "box"),
		.hostname = (char *)"box",
		.env = o->env ? (char **)o->env : empty_env,
		.vcpus = c.vcpus ? c.vcpus : VM_DEFAULT_VCPUS,
		.mem_mib = c.mem_mib ? c.mem_mib : VM_DEFAULT_MEM_MIB,
		.ca_pem = (char *)o->ca_pem,
	};
	for (char *const *e = bc.env; *e; e++) {
		bc.envc++;
	}
	r = crypto_random(bc.entropy, sizeof(bc.entropy));
	if (r < 0) {
		goto fail;
	}
	for (unsigned attempt = 1;; attempt++) {
		r = boot_attempt(b, &c, &bc);
		if (r >= 0 || r != -EHOSTDOWN || attempt >= VM_BOX_BOOT_ATTEMPTS) {
			break;
		}
		/*
		 * The guest never reached its init (a kernel hang early in boot, seen
		 * about once in 50 TCG boots on a loaded host): one fresh start.
		 */
		log_warn("box %s: no contact from the guest in %d s; restarting QEMU (attempt %u of %u)", b->box_dir,
			 VM_BOX_CONTACT_TIMEOUT_MS / 1000, attempt + 1, VM_BOX_BOOT_ATTEMPTS);
		log_console_tail(b->box_dir);
	}
	explicit_bzero(bc.entropy, sizeof(bc.entropy));
	if (r < 0) {
		goto fail;
	}
	b->t_ready_ns = vm_box_now_ns();
	vm_assets_release(&assets);
	*ret = b;
	return 0;

fail:
	if (b->vm) {
		/* Stop QEMU first so the console drainer has written everything. */
		(void)vm_stop_hard(b->vm, 1000);
		vm_free(b->vm);
		b->vm = NULL;
		log_console_tail(b->box_dir);
	}
	vm_assets_release(&assets);
	vm_box_free(b);
	return r;
}

int vm_box_shutdown(struct vm_box *b, int timeout_ms)
{
	uint64_t deadline = vm_box_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int r;

	r = agent_client_shutdown(b->agent);
	while (r >= 0) {
		struct agent_event ev;
		uint64_t t = vm_box_now_ns();
		if (t >= deadline) {
			r = -ETIMEDOUT;
			break;
		}
		r = agent_client_next(b->agent, (int)((deadline - t) / 1000000ull), &ev);
		if (r == 1 && ev.type == AGENT_EV_SHUTDOWN_ACK) {
			break;
		}
	}
	/*
	 * The guest powers off after the ack, or the connection drops as QEMU
	 * exits. A connection already dead (a guest cut off for a protocol
	 * violation, or gone) gets no long wait: the caller stops QEMU hard.
	 */
	{
		uint64_t t = vm_box_now_ns();
		int left = t < deadline ? (int)((deadline - t) / 1000000ull) : 0;
		if (r < 0 && r != -ETIMEDOUT) {
			left = MIN(left, VM_BOX_DEAD_AGENT_WAIT_MS);
		}
		if (vm_wait(b->vm, left) != 1) {
			return -ETIMEDOUT;
		}
	}
	if (!WIFEXITED(b->vm->exit_status) || WEXITSTATUS(b->vm->exit_status) != 0) {
		return -EIO;
	}
	return 0;
}

void vm_box_free(struct vm_box *b)
{
	if (!b) {
		return;
	}
	agent_client_free(b->agent);
	if (b->vm) {
		(void)vm_stop_hard(b->vm, 2000);
		vm_free(b->vm);
	}
	if (b->console_keep && b->box_dir) {
		int r = keep_console(b->box_dir, b->console_keep);
		if (r < 0) {
			log_warn("keeping the console log as %s: %s", b->console_keep, tk_strerror(r));
		}
	}
	if (b->own_dir && b->box_dir) {
		(void)vm_rm_rf(b->box_dir);
	}
	free(b->console_keep);
	free(b->box_dir);
	free(b);
}
