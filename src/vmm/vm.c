/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/klog.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>

#include "banned.h"
#include "clock.h"
#include "strv.h"
#include "frame.h"
#include "io.h"
#include "log.h"
#include "vmm/vm.h"

#define KMSG_MAX ((size_t)16 << 20)
#define SMALL_MAX ((size_t)1 << 20)

static const char *const channel_names[] = { "agent", "egress", "boot", "qmp", "console" };
enum { CH_AGENT, CH_EGRESS, CH_BOOT, CH_QMP, CH_CONSOLE, CH_COUNT };

const char *vm_accel_name(enum vm_accel a)
{
	switch (a) {
	case VM_ACCEL_AUTO:
		return "auto";
	case VM_ACCEL_KVM:
		return "kvm";
	case VM_ACCEL_TCG:
		return "tcg";
	default:
		return "?";
	}
}

int vm_accel_parse(const char *s, enum vm_accel *ret)
{
	if (strcmp(s, "auto") == 0) {
		*ret = VM_ACCEL_AUTO;
	} else if (strcmp(s, "kvm") == 0) {
		*ret = VM_ACCEL_KVM;
	} else if (strcmp(s, "tcg") == 0) {
		*ret = VM_ACCEL_TCG;
	} else {
		return -EINVAL;
	}
	return 0;
}

struct argv_builder {
	char **v;
	size_t n;
	size_t cap;
	int err;
};

static void add_arg(struct argv_builder *b, const char *s)
{
	if (b->err) {
		return;
	}
	if (b->n + 2 > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64;
		char **nv = realloc(b->v, cap * sizeof(char *));
		if (!nv) {
			b->err = -ENOMEM;
			return;
		}
		b->v = nv;
		b->cap = cap;
	}
	b->v[b->n] = strdup(s);
	if (!b->v[b->n]) {
		b->err = -ENOMEM;
		return;
	}
	b->v[++b->n] = NULL;
}

static void add_argf(struct argv_builder *b, const char *fmt, ...) _printf_(2, 3);
static void add_argf(struct argv_builder *b, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	int r;

	if (b->err) {
		return;
	}
	va_start(ap, fmt);
	r = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (r < 0) {
		b->err = -ENOMEM;
		return;
	}
	add_arg(b, s);
	free(s);
}

/* QEMU's option parser splits on ','; a path holding one must double it. */
static bool path_ok_for_qemu(const char *p)
{
	return p && !strchr(p, ',') && !strchr(p, '\n');
}

int vm_qemu_argv(const struct vm_config *c, char ***ret)
{
	struct argv_builder b = { 0 };
	unsigned vcpus = c->vcpus ? c->vcpus : VM_DEFAULT_VCPUS;
	unsigned mem = c->mem_mib ? c->mem_mib : VM_DEFAULT_MEM_MIB;
	const char *disk_names[] = { "rootfs", "scratch", "workspace" };
	const char *disk_paths[] = { c->rootfs, c->scratch, c->workspace };

	if (c->accel != VM_ACCEL_KVM && c->accel != VM_ACCEL_TCG) {
		return -EINVAL;
	}
	if (vcpus > VM_MAX_VCPUS || mem < 128 || mem > VM_MAX_MEM_MIB) {
		return -ERANGE;
	}
	if (!path_ok_for_qemu(c->box_dir) || !path_ok_for_qemu(c->kernel) || !path_ok_for_qemu(c->initrd)) {
		return -EINVAL;
	}
	for (size_t i = 0; i < ARRAY_SIZE(disk_paths); i++) {
		if (disk_paths[i] && !path_ok_for_qemu(disk_paths[i])) {
			return -EINVAL;
		}
	}
	if (c->extra_cmdline && (strchr(c->extra_cmdline, '\n') || strlen(c->extra_cmdline) > 1024)) {
		return -EINVAL;
	}
	add_arg(&b, c->qemu ? c->qemu : VM_QEMU);
	/* pic=off: with the PVH entry a stray legacy IRQ panics the kernel. acpi=on: virtio-mmio is found via ACPI. */
	add_arg(&b, "-M");
	add_arg(&b, "microvm,acpi=on,pic=off");
	add_arg(&b, "-nodefaults");
	add_arg(&b, "-no-user-config");
	add_arg(&b, "-nic");
	add_arg(&b, "none");
	add_arg(&b, "-display");
	add_arg(&b, "none");
	add_arg(&b, "-no-reboot");
	add_arg(&b, "-sandbox");
	add_arg(&b, "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
	add_arg(&b, "-accel");
	if (c->accel == VM_ACCEL_KVM) {
		add_arg(&b, "kvm");
	} else {
		add_argf(&b, "tcg,tb-size=%u", VM_TCG_TB_MIB);
	}
	add_arg(&b, "-m");
	add_argf(&b, "%u", mem);
	add_arg(&b, "-smp");
	add_argf(&b, "%u", vcpus);
	add_arg(&b, "-kernel");
	add_arg(&b, c->kernel);
	add_arg(&b, "-initrd");
	add_arg(&b, c->initrd);
	add_arg(&b, "-append");
	/* Under TCG microvm has no HPET/PM timer: without tsc_early_khz boots hang at random under load. */
	if (c->tsc_khz) {
		add_argf(&b, "%s tsc_early_khz=%llu%s%s", VM_BASE_CMDLINE, (unsigned long long)c->tsc_khz,
			 c->extra_cmdline ? " " : "", c->extra_cmdline ? c->extra_cmdline : "");
	} else {
		add_argf(&b, "%s%s%s", VM_BASE_CMDLINE, c->extra_cmdline ? " " : "",
			 c->extra_cmdline ? c->extra_cmdline : "");
	}
	/* Every channel: QEMU is the client of a socket the supervisor already listens on. */
	for (size_t i = 0; i < CH_COUNT; i++) {
		add_arg(&b, "-chardev");
		add_argf(&b, "socket,id=%s,path=%s/%s.sock", channel_names[i], c->box_dir, channel_names[i]);
	}
	add_arg(&b, "-serial");
	add_arg(&b, "chardev:console");
	add_arg(&b, "-mon");
	add_arg(&b, "chardev=qmp,mode=control");
	add_arg(&b, "-device");
	add_arg(&b, "virtio-serial-device,max_ports=4");
	for (size_t i = 0; i < CH_BOOT + 1; i++) {
		add_arg(&b, "-device");
		add_argf(&b, "virtserialport,chardev=%s,name=tkbox.%s", channel_names[i], channel_names[i]);
	}
	for (size_t i = 0; i < ARRAY_SIZE(disk_paths); i++) {
		if (!disk_paths[i]) {
			continue;
		}
		add_arg(&b, "-drive");
		add_argf(&b, "file=%s,if=none,id=%s,format=raw%s", disk_paths[i], disk_names[i],
			 i == 1 ? "" : ",readonly=on");
		add_arg(&b, "-device");
		add_argf(&b, "virtio-blk-device,drive=%s,serial=%s", disk_names[i], disk_names[i]);
	}
	if (b.err) {
		strv_free(b.v);
		return b.err;
	}
	*ret = b.v;
	return 0;
}

static int listen_unix(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		return -errno;
	}
	(void)unlink(path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1) < 0) {
		int r = -errno;
		(void)close(fd);
		return r;
	}
	return fd;
}

static void reap_nohang(struct vm *vm)
{
	int status;

	if (vm->qemu_pid > 0 && !vm->reaped && waitpid(vm->qemu_pid, &status, WNOHANG) == vm->qemu_pid) {
		vm->reaped = true;
		vm->exit_status = status;
	}
}

/* The console drainer: copies the serial console to console.log up to max bytes, then discards. */
static _noreturn_ void console_drain(int in, int out, size_t max)
{
	uint8_t chunk[4096];
	size_t written = 0;
	bool noted = false;

	for (;;) {
		ssize_t n = RETRY_EINTR(read(in, chunk, sizeof(chunk)));
		if (n <= 0) {
			_exit(0);
		}
		if (written < max) {
			size_t w = MIN((size_t)n, max - written);
			if (write(out, chunk, w) != (ssize_t)w) {
				_exit(1);
			}
			written += w;
		} else if (!noted) {
			static const char msg[] = "\n[tkbox: console log cap reached; further output discarded]\n";
			(void)!write(out, msg, sizeof(msg) - 1);
			noted = true;
		}
	}
}

/* The box's own uid for its QEMU and console drainer, set once by the supervisor (vm_run_as). */
static struct {
	bool set;
	uid_t uid;
	gid_t gid;
} run_as;

void vm_run_as(uid_t uid, gid_t gid)
{
	run_as.set = true;
	run_as.uid = uid;
	run_as.gid = gid;
}

/*
 * What QEMU under its own uid gets instead of paths it may not be able to
 * open (a root-only state directory or image cache): the read-only disks as
 * fds in an fdset (/dev/fdset/N; QEMU dups them, no permission check), the
 * kernel as /proc/self/fd/N (its mode must let the uid read it: the asset
 * cache writes it 0644). The box directory, its sockets, initrd and scratch
 * are the box's: chowned to the uid.
 */
struct qemu_fds {
	int kernel, rootfs, workspace;
	gid_t kvm_gid; /* (gid_t)-1: no supplementary group */
	char kernel_path[32];
};

static int qemu_fds_open(struct vm_config *c, struct qemu_fds *f)
{
	struct stat st;

	*f = (struct qemu_fds){ .kernel = -1, .rootfs = -1, .workspace = -1, .kvm_gid = (gid_t)-1 };
	f->kernel = open(c->kernel, O_RDONLY | O_CLOEXEC);
	f->rootfs = c->rootfs ? open(c->rootfs, O_RDONLY | O_CLOEXEC) : -2;
	f->workspace = c->workspace ? open(c->workspace, O_RDONLY | O_CLOEXEC) : -2;
	if (f->kernel < 0 || f->rootfs == -1 || f->workspace == -1) {
		return -errno;
	}
	/* Never through a symlink: on a retry the box uid's first QEMU could have put one in its place. */
	if (lchown(c->box_dir, c->uid, c->gid) < 0 || lchown(c->initrd, c->uid, c->gid) < 0 ||
	    (c->scratch && lchown(c->scratch, c->uid, c->gid) < 0)) {
		return -errno;
	}
	/* /dev/kvm readable and writable by its group only (the usual 0660 root:kvm): QEMU joins that group. */
	if (c->accel == VM_ACCEL_KVM && stat("/dev/kvm", &st) == 0 && (st.st_mode & 0006) != 0006 &&
	    (st.st_mode & 0060) == 0060) {
		f->kvm_gid = st.st_gid;
	}
	(void)snprintf(f->kernel_path, sizeof(f->kernel_path), "/proc/self/fd/%d", f->kernel);
	c->kernel = f->kernel_path;
	c->rootfs = c->rootfs ? "/dev/fdset/1" : NULL;
	c->workspace = c->workspace ? "/dev/fdset/2" : NULL;
	return 0;
}

static void qemu_fds_close(struct qemu_fds *f)
{
	int *fds[] = { &f->kernel, &f->rootfs, &f->workspace };
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++) {
		if (*fds[i] >= 0) {
			(void)close(*fds[i]);
		}
		*fds[i] = -1;
	}
}

/* argv + "-add-fd fd=N,set=K" for each disk given by fd. */
static int qemu_fds_argv(const struct qemu_fds *f, char ***argv)
{
	size_t n = 0;
	char **v;

	while ((*argv)[n]) {
		n++;
	}
	v = realloc(*argv, (n + 5) * sizeof(char *));
	if (!v) {
		return -ENOMEM;
	}
	*argv = v;
	v[n] = NULL;
	for (int set = 1; set <= 2; set++) {
		int fd = set == 1 ? f->rootfs : f->workspace;
		if (fd < 0) {
			continue;
		}
		if (!(v[n] = strdup("-add-fd")) || asprintf(&v[n + 1], "fd=%d,set=%d", fd, set) < 0) {
			free(v[n]);
			v[n] = NULL;
			return -ENOMEM;
		}
		n += 2;
		v[n] = NULL;
	}
	return 0;
}

/* In QEMU's child, before exec: keep the fds, then the box's uid (and /dev/kvm's group when it needs it). */
static void qemu_child_drop(const struct vm_config *c, const struct qemu_fds *f)
{
	int fds[] = { f->kernel, f->rootfs, f->workspace };

	for (size_t i = 0; i < ARRAY_SIZE(fds); i++) {
		if (fds[i] >= 0 && fcntl(fds[i], F_SETFD, 0) < 0) {
			_exit(126);
		}
	}
	if (setgroups(f->kvm_gid != (gid_t)-1 ? 1 : 0, &f->kvm_gid) < 0 || setresgid(c->gid, c->gid, c->gid) < 0 ||
	    setresuid(c->uid, c->uid, c->uid) < 0) {
		_exit(126);
	}
}

int vm_start(const struct vm_config *c0, struct vm **ret)
{
	int lfd[CH_COUNT], cfd[CH_COUNT];
	_cleanup_free_ char *log_path = NULL;
	char **argv = NULL;
	struct vm *vm;
	struct vm_config cc = *c0;
	const struct vm_config *c = &cc;
	struct qemu_fds qf = { .kernel = -1, .rootfs = -1, .workspace = -1 };
	uint64_t deadline;
	int r;

	for (size_t i = 0; i < CH_COUNT; i++) {
		lfd[i] = cfd[i] = -1;
	}
	/* A box (not the accelerator probe, which has no rootfs) runs QEMU under the box's uid when it has one. */
	if (run_as.set && c0->rootfs && !c0->drop_privileges) {
		cc.drop_privileges = true;
		cc.uid = run_as.uid;
		cc.gid = run_as.gid;
	}
	r = cc.drop_privileges ? qemu_fds_open(&cc, &qf) : 0;
	if (r >= 0) {
		r = vm_qemu_argv(c, &argv);
	}
	if (r >= 0 && cc.drop_privileges) {
		r = qemu_fds_argv(&qf, &argv);
	}
	if (r < 0) {
		strv_free(argv);
		qemu_fds_close(&qf);
		return r;
	}
	vm = calloc(1, sizeof(*vm));
	if (!vm) {
		strv_free(argv);
		qemu_fds_close(&qf);
		return -ENOMEM;
	}
	*vm = (struct vm){ .agent_fd = -1, .egress_fd = -1, .boot_fd = -1, .qmp_fd = -1, .accel = c->accel };
	for (size_t i = 0; i < CH_COUNT; i++) {
		_cleanup_free_ char *p = NULL;
		if (asprintf(&p, "%s/%s.sock", c->box_dir, channel_names[i]) < 0) {
			r = -ENOMEM;
			goto fail;
		}
		lfd[i] = listen_unix(p);
		if (lfd[i] < 0) {
			r = log_error_errno(lfd[i], "listening on %s", p);
			goto fail;
		}
		if (c->drop_privileges && lchown(p, c->uid, c->gid) < 0) {
			r = log_error_errno(-errno, "giving %s to the box's uid", p);
			goto fail;
		}
	}
	vm->qemu_pid = fork();
	if (vm->qemu_pid < 0) {
		r = -errno;
		goto fail;
	}
	if (vm->qemu_pid == 0) {
		int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (nul >= 0) {
			(void)dup2(nul, 0);
			(void)dup2(nul, 1);
		}
		if (c->drop_privileges) {
			qemu_child_drop(c, &qf);
		}
		/* QEMU must not outlive its supervisor (after the uid change, which clears this setting). */
		(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
		execvp(argv[0], argv);
		_exit(127);
	}
	strv_free(argv);
	argv = NULL;
	qemu_fds_close(&qf);
	/* Accept QEMU's connection on every channel; QEMU connects while it initialises. */
	deadline = clock_mono_ms() + VM_CONNECT_TIMEOUT_MS;
	for (;;) {
		struct pollfd pfd[CH_COUNT];
		size_t np = 0, map[CH_COUNT];
		uint64_t t = clock_mono_ms();
		for (size_t i = 0; i < CH_COUNT; i++) {
			if (cfd[i] < 0) {
				pfd[np] = (struct pollfd){ .fd = lfd[i], .events = POLLIN };
				map[np++] = i;
			}
		}
		if (np == 0) {
			break;
		}
		reap_nohang(vm);
		if (vm->reaped) {
			r = log_error_errno(-ECHILD, "QEMU exited during start (status 0x%x; see %s/console.log)",
					    vm->exit_status, c->box_dir);
			goto fail;
		}
		if (t >= deadline) {
			r = log_error_errno(-ETIMEDOUT, "QEMU did not connect to its channels");
			goto fail;
		}
		r = poll(pfd, np, (int)MIN(deadline - t, 100));
		if (r < 0 && errno != EINTR) {
			r = -errno;
			goto fail;
		}
		for (size_t k = 0; k < np; k++) {
			if (pfd[k].revents & POLLIN) {
				size_t i = map[k];
				cfd[i] = accept4(lfd[i], NULL, NULL, SOCK_CLOEXEC);
				if (cfd[i] < 0 && errno != EAGAIN) {
					r = -errno;
					goto fail;
				}
			}
		}
	}
	/* Nobody else may ever connect: close the listeners and remove the socket files. */
	for (size_t i = 0; i < CH_COUNT; i++) {
		_cleanup_free_ char *p = NULL;
		(void)close(lfd[i]);
		lfd[i] = -1;
		if (asprintf(&p, "%s/%s.sock", c->box_dir, channel_names[i]) >= 0) {
			(void)unlink(p);
		}
	}
	if (asprintf(&log_path, "%s/console.log", c->box_dir) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	{
		int logfd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (logfd < 0) {
			r = log_error_errno(-errno, "open %s", log_path);
			goto fail;
		}
		if (c->drop_privileges && fchown(logfd, c->uid, c->gid) < 0) {
			r = log_error_errno(-errno, "giving %s to the box's uid", log_path);
			(void)close(logfd);
			goto fail;
		}
		vm->console_pid = fork();
		if (vm->console_pid == 0) {
			if (c->drop_privileges && (setgroups(0, NULL) < 0 || setresgid(c->gid, c->gid, c->gid) < 0 ||
						   setresuid(c->uid, c->uid, c->uid) < 0)) {
				_exit(126);
			}
			(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
			console_drain(cfd[CH_CONSOLE], logfd, c->console_max ? c->console_max : VM_CONSOLE_LOG_MAX);
		}
		(void)close(logfd);
		if (vm->console_pid < 0) {
			r = -errno;
			goto fail;
		}
		(void)close(cfd[CH_CONSOLE]);
		cfd[CH_CONSOLE] = -1;
	}
	vm->agent_fd = cfd[CH_AGENT];
	vm->egress_fd = cfd[CH_EGRESS];
	vm->boot_fd = cfd[CH_BOOT];
	vm->qmp_fd = cfd[CH_QMP];
	*ret = vm;
	return 0;

fail:
	strv_free(argv);
	qemu_fds_close(&qf);
	for (size_t i = 0; i < CH_COUNT; i++) {
		if (lfd[i] >= 0) {
			(void)close(lfd[i]);
		}
		if (cfd[i] >= 0) {
			(void)close(cfd[i]);
		}
	}
	vm_free(vm);
	return r;
}

static int write_all_timeout(int fd, const uint8_t *p, size_t n, uint64_t deadline)
{
	while (n > 0) {
		struct pollfd pfd = { .fd = fd, .events = POLLOUT };
		uint64_t t = clock_mono_ms();
		ssize_t w;
		if (t >= deadline) {
			return -ETIMEDOUT;
		}
		if (poll(&pfd, 1, (int)(deadline - t)) < 0 && errno != EINTR) {
			return -errno;
		}
		w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			if (errno == EAGAIN || errno == EINTR) {
				continue;
			}
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Read one empty-object frame ({}) of the given type from the boot port, a byte at a time. */
static int boot_read_tiny(struct vm *vm, uint8_t want_type, uint64_t deadline)
{
	struct frame_decoder dec;
	uint8_t byte;
	int r;

	/* The frames on this port are tiny; anything larger ends the exchange. */
	r = frame_decoder_init(&dec, 64);
	if (r < 0) {
		return r;
	}
	for (;;) {
		struct pollfd pfd = { .fd = vm->boot_fd, .events = POLLIN };
		uint64_t t = clock_mono_ms();
		ssize_t n;
		size_t used;
		if (t >= deadline) {
			r = -ETIMEDOUT;
			break;
		}
		vm_poke(vm);
		r = poll(&pfd, 1, (int)MIN(deadline - t, 20));
		reap_nohang(vm);
		if (vm->reaped) {
			r = -ECHILD;
			break;
		}
		if (r <= 0) {
			continue;
		}
		/* One byte at a time: nothing after the frame is consumed. */
		n = recv(vm->boot_fd, &byte, 1, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			continue;
		}
		if (n <= 0) {
			r = n == 0 ? -EPIPE : -errno;
			break;
		}
		r = frame_decoder_feed(&dec, &byte, 1, &used);
		if (r < 0) {
			break;
		}
		if (r == 1) {
			r = dec.type == want_type && dec.want == 2 &&
					    memcmp(dec.payload.data + dec.payload.off, "{}", 2) == 0
				    ? 0
				    : -EPROTO;
			break;
		}
	}
	frame_decoder_release(&dec);
	return r;
}

int vm_serve_boot_config(struct vm *vm, struct boot_config *bc, int contact_ms, int timeout_ms)
{
	struct timespec now;
	struct buf out;
	int r;

	if (vm->boot_fd < 0) {
		return -EALREADY; /* served once, never again */
	}
	/*
	 * The guest asks first: bytes written before it opened the port would
	 * wait in QEMU until its main loop next runs.
	 */
	r = boot_read_tiny(vm, AGENT_MSG_BOOT_REQUEST, clock_mono_ms() + (uint64_t)contact_ms);
	if (r == -ETIMEDOUT) {
		r = -EHOSTDOWN;
	}
	if (r >= 0) {
		uint64_t deadline = clock_mono_ms() + (uint64_t)timeout_ms;
		(void)clock_gettime(CLOCK_REALTIME, &now);
		bc->clock_sec = now.tv_sec;
		bc->clock_nsec = now.tv_nsec;
		/* Secret: the encoded config holds the entropy words. */
		r = buf_init(&out, FRAME_MAX_PAYLOAD + FRAME_HEADER_SIZE, BUF_SECRET);
		if (r >= 0) {
			r = boot_config_encode(bc, &out);
			if (r >= 0) {
				r = write_all_timeout(vm->boot_fd, buf_ptr(&out), buf_len(&out), deadline);
			}
			buf_release(&out);
		}
		if (r >= 0) {
			r = boot_read_tiny(vm, AGENT_MSG_BOOT_ACK, deadline);
		}
	}
	(void)close(vm->boot_fd);
	vm->boot_fd = -1;
	return r;
}

void vm_poke(struct vm *vm)
{
	static const char caps[] = "{\"execute\":\"qmp_capabilities\"}\n";
	static const char status[] = "{\"execute\":\"query-status\"}\n";
	uint8_t sink[4096];

	if (vm->qmp_fd < 0) {
		return;
	}
	/* QEMU's replies and greeting are not needed: read and drop them, bounded per call. */
	for (int i = 0; i < 16; i++) {
		if (recv(vm->qmp_fd, sink, sizeof(sink), MSG_DONTWAIT) <= 0) {
			break;
		}
	}
	if (!vm->qmp_negotiated) {
		if (send(vm->qmp_fd, caps, sizeof(caps) - 1, MSG_DONTWAIT | MSG_NOSIGNAL) ==
		    (ssize_t)(sizeof(caps) - 1)) {
			vm->qmp_negotiated = true;
		}
		return;
	}
	(void)send(vm->qmp_fd, status, sizeof(status) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

int vm_wait(struct vm *vm, int timeout_ms)
{
	uint64_t deadline = clock_mono_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);

	for (;;) {
		reap_nohang(vm);
		if (vm->reaped || vm->qemu_pid <= 0) {
			return 1;
		}
		if (timeout_ms >= 0 && clock_mono_ms() >= deadline) {
			return 0;
		}
		struct timespec ts = { .tv_sec = 0, .tv_nsec = 5 * 1000000L };
		(void)nanosleep(&ts, NULL);
	}
}

int vm_stop_hard(struct vm *vm, int grace_ms)
{
	static const char caps[] = "{\"execute\":\"qmp_capabilities\"}\n";
	static const char quit[] = "{\"execute\":\"quit\"}\n";
	int r;

	if (vm->qemu_pid <= 0 || vm->reaped) {
		return 0;
	}
	if (vm->qmp_fd >= 0) {
		if (!vm->qmp_negotiated) {
			(void)write_all_timeout(vm->qmp_fd, (const uint8_t *)caps, sizeof(caps) - 1,
						clock_mono_ms() + 1000);
		}
		(void)write_all_timeout(vm->qmp_fd, (const uint8_t *)quit, sizeof(quit) - 1, clock_mono_ms() + 1000);
	}
	r = vm_wait(vm, grace_ms);
	if (r == 0) {
		(void)kill(vm->qemu_pid, SIGKILL);
		r = vm_wait(vm, 5000);
	}
	return r == 1 ? 0 : -ETIMEDOUT;
}

void vm_free(struct vm *vm)
{
	int status;

	if (!vm) {
		return;
	}
	if (vm->qemu_pid > 0 && !vm->reaped) {
		(void)kill(vm->qemu_pid, SIGKILL);
		(void)RETRY_EINTR(waitpid(vm->qemu_pid, &status, 0));
	}
	if (vm->console_pid > 0) {
		(void)kill(vm->console_pid, SIGKILL);
		(void)RETRY_EINTR(waitpid(vm->console_pid, &status, 0));
	}
	if (vm->agent_fd >= 0) {
		(void)close(vm->agent_fd);
	}
	if (vm->egress_fd >= 0) {
		(void)close(vm->egress_fd);
	}
	if (vm->boot_fd >= 0) {
		(void)close(vm->boot_fd);
	}
	if (vm->qmp_fd >= 0) {
		(void)close(vm->qmp_fd);
	}
	free(vm);
}

int vm_qemu_peak_rss_kib(const struct vm *vm, uint64_t *ret)
{
	_cleanup_free_ char *path = NULL, *text = NULL;
	size_t n;
	const char *p;
	int r;

	if (asprintf(&path, "/proc/%d/status", (int)vm->qemu_pid) < 0) {
		return -ENOMEM;
	}
	r = io_read_file(AT_FDCWD, path, SMALL_MAX, IO_READ_PREFIX, &text, &n);
	if (r < 0) {
		return r;
	}
	p = strstr(text, "\nVmHWM:");
	if (!p) {
		return -ENOENT;
	}
	*ret = strtoull(p + 7, NULL, 10);
	return 0;
}

/* "<digits>[.<digits>] MHz" at p → kHz. */
static int parse_mhz(const char *p, const char *end, uint64_t *ret)
{
	uint64_t mhz = 0, frac = 0;
	unsigned fd = 0;

	while (p < end && *p == ' ') {
		p++;
	}
	if (p >= end || *p < '0' || *p > '9') {
		return -EBADMSG;
	}
	while (p < end && *p >= '0' && *p <= '9') {
		mhz = mhz * 10 + (uint64_t)(*p++ - '0');
		if (mhz > 1000000) {
			return -ERANGE;
		}
	}
	if (p < end && *p == '.') {
		p++;
		while (p < end && *p >= '0' && *p <= '9') {
			if (fd < 3) {
				frac = frac * 10 + (uint64_t)(*p - '0');
				fd++;
			}
			p++;
		}
	}
	while (fd < 3) {
		frac *= 10;
		fd++;
	}
	if (mhz == 0) {
		return -ERANGE;
	}
	*ret = mhz * 1000 + frac;
	return 0;
}

static const char *find_in(const char *text, size_t n, const char *needle, const char **ret_line_end)
{
	size_t nl = strlen(needle);
	const char *hit = NULL;

	/* The last occurrence wins (a later calibration refines an earlier one). */
	for (size_t i = 0; i + nl <= n; i++) {
		if (memcmp(text + i, needle, nl) == 0) {
			hit = text + i + nl;
		}
	}
	if (hit) {
		const char *e = memchr(hit, '\n', (size_t)(text + n - hit));
		*ret_line_end = e ? e : text + n;
	}
	return hit;
}

int tsc_khz_from_kmsg(const char *text, size_t n, uint64_t *ret)
{
	static const char *const keys[] = { "tsc: Refined TSC clocksource calibration:", "tsc: Detected", NULL };

	for (size_t k = 0; keys[k]; k++) {
		const char *end, *p = find_in(text, n, keys[k], &end);
		uint64_t v;
		if (p && parse_mhz(p, end, &v) == 0) {
			*ret = v;
			return 0;
		}
	}
	return -ENOENT;
}

int tsc_khz_from_cpuinfo(const char *text, size_t n, uint64_t *ret)
{
	const char *p = text;
	const char *end = text + n;

	while (p < end) {
		const char *e = memchr(p, '\n', (size_t)(end - p));
		if (!e) {
			e = end;
		}
		if ((size_t)(e - p) > 8 && memcmp(p, "cpu MHz", 7) == 0) {
			const char *colon = memchr(p, ':', (size_t)(e - p));
			uint64_t v;
			if (colon && parse_mhz(colon + 1, e, &v) == 0) {
				*ret = v;
				return 0;
			}
		}
		p = e + 1;
	}
	return -ENOENT;
}

int vm_host_tsc_khz(uint64_t *ret)
{
	_cleanup_free_ char *text = NULL;
	size_t n;
	int size, r;

	size = klogctl(10 /* SYSLOG_ACTION_SIZE_BUFFER */, NULL, 0);
	if (size > 0 && (size_t)size <= KMSG_MAX) {
		text = malloc((size_t)size);
		if (text) {
			r = klogctl(3 /* SYSLOG_ACTION_READ_ALL */, text, size);
			if (r > 0 && tsc_khz_from_kmsg(text, (size_t)r, ret) == 0) {
				return 0;
			}
		}
		free(text);
		text = NULL;
	}
	r = io_read_file(AT_FDCWD, "/proc/cpuinfo", SMALL_MAX, IO_READ_PREFIX, &text, &n);
	if (r < 0) {
		return r;
	}
	return tsc_khz_from_cpuinfo(text, n, ret);
}

int vm_probe_boot(const char *qemu, const char *dir, const char *kernel, const char *initrd, enum vm_accel accel,
		  uint64_t tsc_khz, int timeout_ms)
{
	struct vm_config c = {
		.qemu = qemu,
		.box_dir = dir,
		.kernel = kernel,
		.initrd = initrd,
		.vcpus = 1,
		.mem_mib = 256,
		.accel = accel,
		.tsc_khz = tsc_khz,
		.extra_cmdline = "tkbox.probe=1",
		.console_max = 64 * 1024,
	};
	_cleanup_free_ char *log_path = NULL, *text = NULL;
	struct vm *vm = NULL;
	size_t n;
	int r;

	r = vm_start(&c, &vm);
	if (r < 0) {
		return r;
	}
	r = vm_wait(vm, timeout_ms);
	vm_free(vm); /* also waits for the console drainer, so the log is complete */
	if (r == 0) {
		return 0;
	}
	if (asprintf(&log_path, "%s/console.log", dir) < 0) {
		return -ENOMEM;
	}
	r = io_read_file(AT_FDCWD, log_path, 64 * 1024, IO_READ_PREFIX, &text, &n);
	if (r < 0) {
		return r;
	}
	return strstr(text, "TKBOX-PROBE-OK READY") ? 1 : 0;
}

int vm_accel_resolve(enum vm_accel requested, const char *state_dir, const char *kernel, const char *kernel_sha256,
		     const char *initrd, enum vm_accel *ret)
{
	_cleanup_free_ char *cache = NULL, *key = NULL, *dir = NULL, *text = NULL;
	struct utsname u;
	uint64_t khz = 0;
	size_t n;
	int fd, r;

	if (requested != VM_ACCEL_AUTO) {
		*ret = requested;
		return 0;
	}
	fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		*ret = VM_ACCEL_TCG;
		return 0;
	}
	(void)close(fd);
	if (uname(&u) < 0) {
		return -errno;
	}
	if (asprintf(&cache, "%s/accel-probe", state_dir) < 0 ||
	    asprintf(&key, "%s %s %s\n", u.release, u.version, kernel_sha256) < 0) {
		return -ENOMEM;
	}
	if (io_read_file(AT_FDCWD, cache, 4096, IO_READ_PREFIX, &text, &n) >= 0) {
		const char *nl = strchr(text, '\n');
		if (nl && (size_t)(nl - text + 1) == strlen(key) && memcmp(text, key, strlen(key)) == 0) {
			*ret = strcmp(nl + 1, "kvm\n") == 0 ? VM_ACCEL_KVM : VM_ACCEL_TCG;
			return 0;
		}
	}
	/* /dev/kvm opens; only a real boot tells whether it works (nested KVM often does not). */
	if (asprintf(&dir, "%s/accel-probe.d", state_dir) < 0) {
		return -ENOMEM;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		return -errno;
	}
	(void)vm_host_tsc_khz(&khz);
	r = vm_probe_boot(NULL, dir, kernel, initrd, VM_ACCEL_KVM, khz, 20000);
	*ret = r == 1 ? VM_ACCEL_KVM : VM_ACCEL_TCG;
	log_info("accelerator probe: /dev/kvm %s; using %s", r == 1 ? "works" : "opens but cannot boot the guest",
		 vm_accel_name(*ret));
	{
		_cleanup_free_ char *tmp = NULL;
		if (asprintf(&tmp, "%s.tmp", cache) >= 0) {
			int w = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
			if (w >= 0) {
				bool ok = write(w, key, strlen(key)) == (ssize_t)strlen(key) &&
					  write(w, *ret == VM_ACCEL_KVM ? "kvm\n" : "tcg\n", 4) == 4;
				(void)close(w);
				if (ok) {
					(void)rename(tmp, cache);
				}
			}
		}
	}
	(void)initrd;
	return 0;
}
