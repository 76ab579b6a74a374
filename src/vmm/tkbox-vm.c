/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tkbox-vm: boot a box and talk to its agent without the daemon. For
 * debugging, the benchmarks (bench/boot.sh) and fetching the guest kernel.
 *
 *   tkbox-vm assets [--state DIR] [--build-kernel [--source TARBALL]]
 *                                                     fetch the cloud kernel, or build the guest kernel
 *   tkbox-vm run   [options] [--stdin] -- ARGV...     run one command, exit with its status
 *   tkbox-vm bench [options] [--execs N]              ready time, `true` round trips, QEMU peak RSS
 *   tkbox-vm bare  [options]                          bare boot of the same kernel to an init printing READY
 */
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "banned.h"
#include "io.h"
#include "log.h"
#include "vmm/initramfs.h"
#include "vmm/vm-box.h"

struct opts {
	struct vm_box_opts box;
	bool want_stdin;
	unsigned execs;
	char **argv;
	bool build_kernel;
	const char *source;
};

static char *default_guest(const char *self)
{
	_cleanup_free_ char *exe = realpath("/proc/self/exe", NULL);
	char *slash, *p = NULL;
	static const char *const rel[] = { "tkbox-guest-linux-amd64", "../tkbox-guest-linux-amd64",
					   "../../tkbox-guest-linux-amd64", NULL };

	(void)self;
	if (!exe) {
		return NULL;
	}
	slash = strrchr(exe, '/');
	if (!slash) {
		return NULL;
	}
	*slash = '\0';
	for (size_t i = 0; rel[i]; i++) {
		if (asprintf(&p, "%s/%s", exe, rel[i]) < 0) {
			return NULL;
		}
		if (access(p, R_OK) == 0) {
			return p;
		}
		free(p);
		p = NULL;
	}
	return NULL;
}

static const char *default_state(void)
{
	static char buf[4096];
	const char *e = getenv("TKBOX_STATE_DIR");
	const char *home = getenv("HOME");

	if (e && *e) {
		return e;
	}
	if (home && *home && snprintf(buf, sizeof(buf), "%s/.local/state/tkbox", home) < (int)sizeof(buf)) {
		return buf;
	}
	return "/var/lib/tkbox";
}

static int parse_uint(const char *s, unsigned max, unsigned *ret)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v > max) {
		return -EINVAL;
	}
	*ret = (unsigned)v;
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: tkbox-vm assets|run|bench|bare [--state DIR] [--kernel FILE --modules DIR] [--guest FILE]\n"
		"                [--build-kernel [--source TARBALL]] (assets)\n"
		"                [--rootfs IMG] [--workspace IMG] [--scratch-mib N] [--accel auto|kvm|tcg]\n"
		"                [--vcpus N] [--mem-mib N] [--box-dir DIR] [--stdin] [--execs N] [-- ARGV...]\n");
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "state", required_argument, NULL, 's' },
		{ "kernel", required_argument, NULL, 'k' },
		{ "modules", required_argument, NULL, 'm' },
		{ "guest", required_argument, NULL, 'g' },
		{ "rootfs", required_argument, NULL, 'r' },
		{ "workspace", required_argument, NULL, 'w' },
		{ "scratch-mib", required_argument, NULL, 'S' },
		{ "accel", required_argument, NULL, 'a' },
		{ "vcpus", required_argument, NULL, 'c' },
		{ "mem-mib", required_argument, NULL, 'M' },
		{ "box-dir", required_argument, NULL, 'b' },
		{ "stdin", no_argument, NULL, 'i' },
		{ "execs", required_argument, NULL, 'n' },
		{ "no-fetch", no_argument, NULL, 'N' },
		{ "cmdline", required_argument, NULL, 'C' },
		{ "qemu", required_argument, NULL, 'Q' },
		{ "build-kernel", no_argument, NULL, 'B' },
		{ "source", required_argument, NULL, 'T' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	o->box.state_dir = default_state();
	o->box.allow_fetch = true;
	o->box.accel = VM_ACCEL_AUTO;
	o->box.scratch_mib = VM_BOX_DEFAULT_SCRATCH_MIB;
	o->execs = 20;
	while ((ch = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
		int r = 0;
		switch (ch) {
		case 's':
			o->box.state_dir = optarg;
			break;
		case 'k':
			o->box.kernel = optarg;
			break;
		case 'm':
			o->box.modules_dir = optarg;
			break;
		case 'g':
			o->box.guest_bin = optarg;
			break;
		case 'r':
			o->box.rootfs = optarg;
			break;
		case 'w':
			o->box.workspace = optarg;
			break;
		case 'S':
			r = parse_uint(optarg, 1 << 20, &o->box.scratch_mib);
			break;
		case 'a':
			r = vm_accel_parse(optarg, &o->box.accel);
			break;
		case 'c':
			r = parse_uint(optarg, VM_MAX_VCPUS, &o->box.vcpus);
			break;
		case 'M':
			r = parse_uint(optarg, VM_MAX_MEM_MIB, &o->box.mem_mib);
			break;
		case 'b':
			o->box.box_dir = optarg;
			break;
		case 'i':
			o->want_stdin = true;
			break;
		case 'n':
			r = parse_uint(optarg, 100000, &o->execs);
			break;
		case 'N':
			o->box.allow_fetch = false;
			break;
		case 'C':
			o->box.extra_cmdline = optarg;
			break;
		case 'Q':
			o->box.qemu = optarg;
			break;
		case 'B':
			o->build_kernel = true;
			break;
		case 'T':
			o->source = optarg;
			break;
		default:
			return -EINVAL;
		}
		if (r < 0) {
			fprintf(stderr, "tkbox-vm: bad value for --%s: %s\n", longopts[optind > 0 ? 0 : 0].name,
				optarg);
			return r;
		}
	}
	o->argv = argv + optind;
	if (!o->box.guest_bin) {
		o->box.guest_bin = default_guest(argv[0]);
	}
	return 0;
}

static int cmd_run(struct opts *o)
{
	struct vm_box *b = NULL;
	uint32_t id;
	uint8_t inbuf[65536];
	size_t in_len = 0, in_off = 0;
	bool in_eof = !o->want_stdin;
	int status = -1, r;

	if (!o->argv[0]) {
		usage();
		return 2;
	}
	r = vm_box_boot(&o->box, &b);
	if (r < 0) {
		fprintf(stderr, "tkbox-vm: boot failed: %s\n", tk_strerror(r));
		return 125;
	}
	fprintf(stderr, "tkbox-vm: box ready in %.3f s (accel %s, isolation %s)\n",
		(double)(b->t_ready_ns - b->t_start_ns) / 1e9, vm_accel_name(b->accel), b->isolation);
	r = agent_client_exec(b->agent, o->argv, NULL, NULL, o->want_stdin, &id);
	while (r >= 0 && status < 0) {
		struct agent_event ev;
		if (!in_eof && in_off == in_len) {
			struct pollfd p = { .fd = 0, .events = POLLIN };
			if (poll(&p, 1, 0) == 1) {
				ssize_t n = read(0, inbuf, sizeof(inbuf));
				if (n <= 0) {
					in_eof = true;
					r = agent_client_stdin_close(b->agent, id);
				} else {
					in_len = (size_t)n;
					in_off = 0;
				}
			}
		}
		if (r >= 0 && in_off < in_len) {
			size_t sent = 0;
			r = agent_client_stdin(b->agent, id, inbuf + in_off, in_len - in_off, &sent);
			in_off += sent;
		}
		if (r < 0) {
			break;
		}
		r = agent_client_next(b->agent, in_eof ? -1 : 20, &ev);
		if (r <= 0) {
			continue;
		}
		switch (ev.type) {
		case AGENT_EV_STDOUT:
			r = io_write_all(1, ev.data, ev.len);
			break;
		case AGENT_EV_STDERR:
			r = io_write_all(2, ev.data, ev.len);
			break;
		case AGENT_EV_EXIT:
			status = exit_status_shell(&ev.exit);
			break;
		case AGENT_EV_ERROR:
			fprintf(stderr, "tkbox-vm: guest error (%s): %s\n", ev.err_code, ev.message);
			if (ev.id == id) {
				status = 126;
			}
			break;
		default:
			break;
		}
	}
	if (r < 0) {
		fprintf(stderr, "tkbox-vm: agent: %s\n", tk_strerror(r));
		status = 125;
	}
	r = vm_box_shutdown(b, 30000);
	if (r < 0) {
		fprintf(stderr, "tkbox-vm: shutdown: %s\n", tk_strerror(r));
	}
	vm_box_free(b);
	return status;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int cmd_bench(struct opts *o)
{
	struct vm_box *b = NULL;
	uint64_t *rt, rss = 0;
	char *argv_true[] = { "true", NULL };
	int r;

	r = vm_box_boot(&o->box, &b);
	if (r < 0) {
		fprintf(stderr, "tkbox-vm: boot failed: %s\n", tk_strerror(r));
		return 1;
	}
	rt = calloc(o->execs ? o->execs : 1, sizeof(*rt));
	if (!rt) {
		vm_box_free(b);
		return 1;
	}
	for (unsigned i = 0; i < o->execs && r >= 0; i++) {
		uint64_t t0 = vm_box_now_ns();
		uint32_t id;
		bool done = false;
		r = agent_client_exec(b->agent, argv_true, NULL, NULL, false, &id);
		while (r >= 0 && !done) {
			struct agent_event ev;
			r = agent_client_next(b->agent, 30000, &ev);
			if (r == 0) {
				r = -ETIMEDOUT;
			}
			if (r > 0 && (ev.type == AGENT_EV_EXIT || ev.type == AGENT_EV_ERROR) && ev.id == id) {
				done = true;
			}
		}
		rt[i] = vm_box_now_ns() - t0;
	}
	(void)vm_qemu_peak_rss_kib(b->vm, &rss);
	if (r >= 0) {
		qsort(rt, o->execs, sizeof(*rt), cmp_u64);
		printf("ready_s=%.3f accel=%s isolation=%s exec_true_median_ms=%.2f exec_true_runs=%u "
		       "qemu_peak_rss_mib=%.1f\n",
		       (double)(b->t_ready_ns - b->t_start_ns) / 1e9, vm_accel_name(b->accel), b->isolation,
		       o->execs ? (double)rt[o->execs / 2] / 1e6 : 0.0, o->execs, (double)rss / 1024.0);
	}
	free(rt);
	if (r >= 0) {
		r = vm_box_shutdown(b, 30000);
	}
	if (r < 0) {
		fprintf(stderr, "tkbox-vm: bench: %s\n", tk_strerror(r));
	}
	vm_box_free(b);
	return r < 0 ? 1 : 0;
}

/* Bare boot: same kernel, same QEMU flags, the guest's probe init prints READY and powers off. */
static int cmd_bare(struct opts *o)
{
	struct vm_assets a = { 0 };
	char dir[] = "/tmp/tkbox-bare-XXXXXX";
	_cleanup_free_ char *initrd = NULL, *logp = NULL;
	struct vm_config c = { 0 };
	struct vm *vm = NULL;
	uint64_t khz = 0, t0, t_ready = 0;
	enum vm_accel accel;
	int r;

	if (!mkdtemp(dir)) {
		return 1;
	}
	r = o->box.kernel ? vm_assets_override(o->box.kernel, o->box.modules_dir, &a)
			  : vm_assets_ensure(o->box.state_dir, o->box.allow_fetch, &a);
	if (r >= 0 && (asprintf(&initrd, "%s/initramfs.cpio", dir) < 0 || asprintf(&logp, "%s/console.log", dir) < 0)) {
		r = -ENOMEM;
	}
	if (r >= 0) {
		r = vm_initramfs_build(o->box.guest_bin, &a, initrd);
	}
	if (r >= 0) {
		r = vm_accel_resolve(o->box.accel, o->box.state_dir, a.kernel, a.kernel_sha256, initrd, &accel);
	}
	if (r >= 0) {
		(void)vm_host_tsc_khz(&khz);
		c = (struct vm_config){ .qemu = o->box.qemu,
					.box_dir = dir,
					.kernel = a.kernel,
					.initrd = initrd,
					.vcpus = o->box.vcpus,
					.mem_mib = o->box.mem_mib,
					.accel = accel,
					.tsc_khz = khz,
					.extra_cmdline = "tkbox.probe=1" };
		t0 = vm_box_now_ns();
		r = vm_start(&c, &vm);
	}
	/* Watch the console log for READY (the drainer writes it as it arrives). */
	while (r >= 0 && !t_ready) {
		char text[8192];
		int fd = open(logp, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			ssize_t n = read(fd, text, sizeof(text) - 1);
			(void)close(fd);
			if (n > 0) {
				text[n] = '\0';
				if (strstr(text, "READY")) {
					t_ready = vm_box_now_ns();
					break;
				}
			}
		}
		if (vm_wait(vm, 1) == 1) {
			/* QEMU gone: check the log once more. */
			fd = open(logp, O_RDONLY | O_CLOEXEC);
			if (fd >= 0) {
				ssize_t n = read(fd, text, sizeof(text) - 1);
				(void)close(fd);
				if (n > 0) {
					text[n] = '\0';
					if (strstr(text, "READY")) {
						t_ready = vm_box_now_ns();
						break;
					}
				}
			}
			r = -EIO;
		}
		if (vm_box_now_ns() - t0 > 60ull * 1000000000ull) {
			r = -ETIMEDOUT;
		}
	}
	if (r >= 0) {
		uint64_t t_exit;
		(void)vm_wait(vm, 30000);
		t_exit = vm_box_now_ns();
		printf("bare_ready_s=%.3f bare_exit_s=%.3f accel=%s\n", (double)(t_ready - t0) / 1e9,
		       (double)(t_exit - t0) / 1e9, vm_accel_name(accel));
	} else {
		fprintf(stderr, "tkbox-vm: bare boot: %s\n", tk_strerror(r));
	}
	vm_free(vm);
	vm_assets_release(&a);
	if (getenv("TKBOX_VM_SHOW_CONSOLE")) {
		char *cat[] = { "cat", logp, NULL };
		(void)!vm_run_program(cat, NULL, 2);
	}
	(void)vm_rm_rf(dir);
	return r < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct opts o = { 0 };
	const char *cmd;
	int r;

	log_set_ident("tkbox-vm");
	if (argc < 2) {
		usage();
		return 2;
	}
	cmd = argv[1];
	r = parse_opts(argc - 1, argv + 1, &o);
	if (r < 0) {
		usage();
		return 2;
	}
	if (strcmp(cmd, "assets") == 0) {
		struct vm_assets a = { 0 };
		if (o.build_kernel && vm_kernel_build(o.box.state_dir, o.source) < 0) {
			return 1;
		}
		r = o.box.kernel ? vm_assets_override(o.box.kernel, o.box.modules_dir, &a)
				 : vm_assets_ensure(o.box.state_dir, o.box.allow_fetch, &a);
		if (r < 0) {
			return 1;
		}
		printf("kernel %s\nkernel_sha256 %s\npackage %s\nmodules", a.kernel, a.kernel_sha256, a.version);
		for (size_t i = 0; i < a.n_modules; i++) {
			printf(" %s", a.modules[i]);
		}
		printf("\n");
		vm_assets_release(&a);
		return 0;
	}
	if (!o.box.guest_bin) {
		fprintf(stderr, "tkbox-vm: tkbox-guest-linux-amd64 not found next to tkbox-vm; pass --guest FILE\n");
		return 2;
	}
	if (strcmp(cmd, "bare") == 0) {
		return cmd_bare(&o);
	}
	if (!o.box.rootfs) {
		fprintf(stderr, "tkbox-vm: --rootfs IMG is required\n");
		return 2;
	}
	if (strcmp(cmd, "run") == 0) {
		return cmd_run(&o);
	}
	if (strcmp(cmd, "bench") == 0) {
		return cmd_bench(&o);
	}
	usage();
	return 2;
}
