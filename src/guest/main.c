/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tkbox-guest: PID 1 of a box. Sets the VM up (mounts, modules, the three
 * virtio-serial ports, disks by serial, the overlay root), reads the boot
 * config once, then serves the agent RPC until the host asks for shutdown.
 * The host trusts nothing this program says; it holds nothing of value.
 */
#include <dirent.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <linux/random.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>

#include "banned.h"
#include "frame.h"
#include "io.h"
#include "guest/agent.h"
#include "guest/egress.h"
#include "guest/kmsg.h"
#include "guest/trust.h"
#include "json.h"
#include "log.h"
#include "vmm/agent-proto.h"
#include "vmm/boot-proto.h"

#define NEWROOT "/run/tk/root"
#define MODULES_DIR "/modules"
#define MAX_MODULES 64
#define PORT_WAIT_MS 10000
#define SMALL_FILE_MAX 4096
#define PATH_MAX_BUF 4096
#define WS_LOWER "/run/tk/ws-lower"
#define WS_EMPTY "/run/tk/ws-empty"
#define WS_UPPERBASE "/run/tk/scratch/workspace"

static bool tracing;

/* A line on the console (guest/kmsg.h says why through /dev/kmsg). */
static void kmsg_line(const char *text)
{
	guest_kmsg("%s", text);
}

/* tkbox.trace=1 on the kernel command line: each boot step on the console as it happens (printk timestamps). */
static void trace(const char *step)
{
	if (tracing) {
		kmsg_line(step);
	}
}

static int do_mount(const char *src, const char *dst, const char *type, unsigned long flags, const char *data)
{
	int r = io_mkdir_p(AT_FDCWD, dst, 0755);

	if (r < 0) {
		return log_error_errno(r, "mkdir %s", dst);
	}
	if (mount(src, dst, type, flags, data) < 0) {
		return log_error_errno(-errno, "mount %s on %s (%s)", src, dst, type);
	}
	return 0;
}

/* Read a small sysfs/proc file into out (NUL-terminated, trailing newline cut). */
static int read_small(const char *path, char *out, size_t outsz)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0) {
		return -errno;
	}
	n = RETRY_EINTR(read(fd, out, outsz - 1));
	(void)close(fd);
	if (n < 0) {
		return -errno;
	}
	out[n] = '\0';
	while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' ')) {
		out[--n] = '\0';
	}
	return (int)n;
}

static _noreturn_ void power_off(void)
{
	sync();
	(void)reboot(RB_POWER_OFF);
	/* reboot() only returns on error; PID 1 must never exit. */
	for (;;) {
		pause();
	}
}

static void setup_console(void)
{
	int fd = open("/dev/console", O_RDWR | O_CLOEXEC | O_NOCTTY);

	if (fd < 0) {
		return;
	}
	for (int i = 0; i < 3; i++) {
		(void)dup2(fd, i);
	}
	if (fd > 2) {
		(void)close(fd);
	}
}

static int load_modules(void)
{
	char list[SMALL_FILE_MAX];
	char *save = NULL;
	int r, count = 0;

	r = read_small(MODULES_DIR "/order", list, sizeof(list));
	if (r == -ENOENT) {
		return 0; /* a kernel with everything built in */
	}
	if (r < 0) {
		return log_error_errno(r, "reading the module list");
	}
	for (char *name = strtok_r(list, "\n", &save); name; name = strtok_r(NULL, "\n", &save)) {
		char path[PATH_MAX_BUF];
		int fd;
		if (++count > MAX_MODULES) {
			return log_error_errno(-E2BIG, "module list");
		}
		if (snprintf(path, sizeof(path), MODULES_DIR "/%s", name) >= (int)sizeof(path)) {
			return -ENAMETOOLONG;
		}
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			return log_error_errno(-errno, "open %s", path);
		}
		r = (int)syscall(SYS_finit_module, fd, "", 0);
		(void)close(fd);
		if (r < 0 && errno != EEXIST) {
			return log_error_errno(-errno, "loading %s", name);
		}
	}
	return 0;
}

/*
 * Find the /dev node of the entry of classdir (a /sys directory of devices)
 * whose attribute file attr reads exactly want: ports by
 * /sys/class/virtio-ports/X/name, disks by /sys/block/X/serial.
 */
static int find_dev(const char *classdir, const char *attr, const char *want, char *ret_dev, size_t devsz)
{
	DIR *d = opendir(classdir);
	struct dirent *de;
	int r = -ENOENT;

	if (!d) {
		return -errno;
	}
	while ((de = readdir(d))) {
		char path[PATH_MAX_BUF], val[256];
		if (de->d_name[0] == '.') {
			continue;
		}
		if (snprintf(path, sizeof(path), "%s/%s/%s", classdir, de->d_name, attr) >= (int)sizeof(path)) {
			continue;
		}
		if (read_small(path, val, sizeof(val)) < 0 || strcmp(val, want) != 0) {
			continue;
		}
		if (snprintf(ret_dev, devsz, "/dev/%s", de->d_name) < (int)devsz) {
			r = 0;
		}
		break;
	}
	(void)closedir(d);
	return r;
}

/* The /dev node of the virtio-serial port called name. */
static int find_port(const char *name, char *ret_dev, size_t devsz)
{
	return find_dev("/sys/class/virtio-ports", "name", name, ret_dev, devsz);
}

/* The /dev/vdX whose virtio serial is serial; -ENOENT when there is none. */
static int find_disk(const char *serial, char *ret_dev, size_t devsz)
{
	return find_dev("/sys/block", "serial", serial, ret_dev, devsz);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
	(void)nanosleep(&ts, NULL);
}

static int wait_port(const char *name, char *dev, size_t devsz)
{
	for (int waited = 0; waited < PORT_WAIT_MS; waited += 10) {
		if (find_port(name, dev, devsz) == 0 && access(dev, F_OK) == 0) {
			return 0;
		}
		sleep_ms(10);
	}
	return log_error_errno(-ETIMEDOUT, "waiting for port %s", name);
}

/* Open the boot port and ask for the config; the answer is read later by read_boot_config. */
static int request_boot_config(int *ret_fd)
{
	char dev[PATH_MAX_BUF];
	struct buf req;
	int fd, r;

	r = wait_port("tkbox.boot", dev, sizeof(dev));
	if (r < 0) {
		return r;
	}
	trace("boot port found");
	fd = open(dev, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		return log_error_errno(-errno, "open %s", dev);
	}
	trace("boot port open");
	/* The host writes the config only once it knows the port is open on this side. */
	r = buf_init(&req, 64, 0);
	if (r >= 0) {
		r = agent_encode_simple(&req, AGENT_MSG_BOOT_REQUEST, 0);
		if (r >= 0 && write(fd, buf_ptr(&req), buf_len(&req)) != (ssize_t)buf_len(&req)) {
			r = negative_errno();
		}
		buf_release(&req);
	}
	if (r < 0) {
		(void)close(fd);
		return log_error_errno(r, "requesting the boot config");
	}
	trace("boot config requested");
	*ret_fd = fd;
	return 0;
}

/* Read the boot config: exactly one frame, acknowledged, then the port is closed for good. */
static int read_boot_config(int fd, struct boot_config *ret)
{
	struct frame_decoder dec;
	struct buf payload, ack;
	uint8_t chunk[4096];
	uint8_t type = 0;
	int r;

	r = frame_decoder_init(&dec, FRAME_MAX_PAYLOAD);
	if (r < 0) {
		(void)close(fd);
		return r;
	}
	for (;;) {
		ssize_t n = RETRY_EINTR(read(fd, chunk, sizeof(chunk)));
		size_t off = 0;
		if (n <= 0) {
			r = n == 0 ? -EPIPE : -errno;
			break;
		}
		while (off < (size_t)n) {
			size_t used = 0;
			r = frame_decoder_feed(&dec, chunk + off, (size_t)n - off, &used);
			off += used;
			if (r != 0) {
				break;
			}
		}
		/* One frame only: bytes after it are a protocol error. */
		if (r == 1 && off != (size_t)n) {
			r = -EPROTO;
		}
		if (r != 0) {
			break;
		}
	}
	if (r == 1) {
		r = buf_init(&payload, FRAME_MAX_PAYLOAD, 0);
		if (r >= 0) {
			r = frame_decoder_take(&dec, &type, &payload);
			if (r >= 0) {
				r = type == AGENT_MSG_BOOT_CONFIG
					    ? boot_config_decode(buf_ptr(&payload), buf_len(&payload), ret)
					    : -EPROTO;
			}
			buf_release(&payload);
		}
	}
	frame_decoder_release(&dec);
	if (r >= 0 && buf_init(&ack, 64, 0) >= 0) {
		if (agent_encode_simple(&ack, AGENT_MSG_BOOT_ACK, 0) >= 0) {
			(void)!write(fd, buf_ptr(&ack), buf_len(&ack));
		}
		buf_release(&ack);
	}
	(void)close(fd);
	if (r < 0) {
		return log_error_errno(r, "boot config");
	}
	return 0;
}

static int lo_up(void)
{
	struct ifreq ifr = { 0 };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int r = 0;

	if (fd < 0) {
		return log_error_errno(-errno, "socket");
	}
	memcpy(ifr.ifr_name, "lo", 3);
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0) {
		r = log_error_errno(-errno, "SIOCGIFFLAGS lo");
	} else {
		ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
		if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0) {
			r = log_error_errno(-errno, "SIOCSIFFLAGS lo");
		}
	}
	(void)close(fd);
	return r;
}

/*
 * An overlay of lower (read-only) with its upper and work dirs under
 * upperbase on the scratch disk; extra (may be NULL) are options tried first
 * and dropped when the kernel refuses them.
 */
static int mount_overlay(const char *lower, const char *upperbase, const char *dst, const char *extra)
{
	char upper[PATH_MAX_BUF], work[PATH_MAX_BUF], opts[3 * PATH_MAX_BUF + 128];
	int base, r;

	if (snprintf(upper, sizeof(upper), "%s/upper", upperbase) >= (int)sizeof(upper) ||
	    snprintf(work, sizeof(work), "%s/work", upperbase) >= (int)sizeof(work) ||
	    snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work) >=
		    (int)sizeof(opts)) {
		return -ENAMETOOLONG;
	}
	base = (int)strlen(opts);
	if (extra && snprintf(opts + base, sizeof(opts) - (size_t)base, ",%s", extra) >= (int)sizeof(opts) - base) {
		return -ENAMETOOLONG;
	}
	r = io_mkdir_p(AT_FDCWD, upper, 0755);
	if (r >= 0) {
		r = io_mkdir_p(AT_FDCWD, work, 0755);
	}
	if (r >= 0) {
		r = io_mkdir_p(AT_FDCWD, dst, 0755);
	}
	if (r < 0) {
		return log_error_errno(r, "mkdir %s", upper);
	}
	if (extra && mount("overlay", dst, "overlay", 0, opts) == 0) {
		return 0;
	}
	if (extra) {
		/* A kernel without one of the extra options: the overlay without them, said on the console. */
		guest_kmsg("overlay on %s: options %s refused (%s); mounted without them", dst, extra, strerror(errno));
	}
	opts[base] = '\0';
	return do_mount("overlay", dst, "overlay", 0, opts);
}

/*
 * /workspace: an overlay of the workspace disk, or of an empty directory on
 * the initramfs when the box has none, so every box has a patch. The
 * producer (guest/diff.h) reads its layers, so a renamed directory must be a
 * copy plus whiteouts, never a redirect (redirect_dir=off), and every upper
 * file must hold its data (metacopy=off). Both layers are opened here, before
 * the chroot hides them; ws[0] lower, ws[1] upper.
 */
static int setup_workspace(int ws[2])
{
	const char *lower = WS_EMPTY;
	char dev[PATH_MAX_BUF];
	int r;

	if (find_disk("workspace", dev, sizeof(dev)) == 0) {
		lower = WS_LOWER;
		r = do_mount(dev, WS_LOWER, "ext4", MS_RDONLY | MS_NODEV, "noload");
	} else {
		r = io_mkdir_p(AT_FDCWD, WS_EMPTY, 0755);
	}
	if (r >= 0) {
		r = mount_overlay(lower, WS_UPPERBASE, NEWROOT "/workspace", "redirect_dir=off,metacopy=off,index=off");
	}
	if (r < 0) {
		return r;
	}
	ws[0] = open(lower, O_PATH | O_DIRECTORY | O_CLOEXEC);
	ws[1] = open(WS_UPPERBASE "/upper", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (ws[0] < 0 || ws[1] < 0) {
		return log_error_errno(-errno, "opening the workspace layers");
	}
	return 0;
}

static int setup_root(int ret_ws[2])
{
	char dev[PATH_MAX_BUF];
	int r;

	r = find_disk("rootfs", dev, sizeof(dev));
	if (r < 0) {
		return log_error_errno(r, "no disk with serial rootfs");
	}
	r = do_mount(dev, "/run/tk/lower", "ext4", MS_RDONLY | MS_NODEV, "noload");
	if (r < 0) {
		return r;
	}
	/* The writable layer: the scratch disk, or memory when the box has none. */
	if (find_disk("scratch", dev, sizeof(dev)) == 0) {
		r = do_mount(dev, "/run/tk/scratch", "ext4", MS_NODEV, NULL);
	} else {
		r = do_mount("tmpfs", "/run/tk/scratch", "tmpfs", MS_NODEV, "mode=0755");
	}
	if (r < 0) {
		return r;
	}
	r = mount_overlay("/run/tk/lower", "/run/tk/scratch/root", NEWROOT, NULL);
	if (r < 0) {
		return r;
	}
	r = setup_workspace(ret_ws);
	if (r < 0) {
		return r;
	}
	r = do_mount("proc", NEWROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	if (r >= 0) {
		r = do_mount("sysfs", NEWROOT "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	}
	if (r >= 0) {
		r = do_mount("devtmpfs", NEWROOT "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	}
	if (r >= 0) {
		r = do_mount("devpts", NEWROOT "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
			     "newinstance,ptmxmode=0666");
	}
	if (r >= 0) {
		r = do_mount("tmpfs", NEWROOT "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	}
	if (r >= 0) {
		r = do_mount("tmpfs", NEWROOT "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	}
	if (r >= 0) {
		r = do_mount("tmpfs", NEWROOT "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
	}
	if (r < 0) {
		return r;
	}
	/*
	 * The initramfs cannot be pivot_root'ed away: move the new root over /
	 * and chroot into it (what switch_root does). The lower and scratch
	 * mounts stay alive underneath, held by the overlays.
	 */
	if (chdir(NEWROOT) < 0) {
		return log_error_errno(-errno, "chdir " NEWROOT);
	}
	if (mount(".", "/", NULL, MS_MOVE, NULL) < 0) {
		return log_error_errno(-errno, "moving the root");
	}
	if (chroot(".") < 0) {
		return log_error_errno(-errno, "chroot");
	}
	if (chdir("/") < 0) {
		return log_error_errno(-errno, "chdir /");
	}
	return 0;
}

static bool cmdline_has(const char *word)
{
	char cmd[SMALL_FILE_MAX];
	size_t wl = strlen(word);

	if (read_small("/proc/cmdline", cmd, sizeof(cmd)) < 0) {
		return false;
	}
	for (const char *p = cmd; (p = strstr(p, word)); p += wl) {
		if ((p == cmd || p[-1] == ' ') && (p[wl] == '\0' || p[wl] == ' ')) {
			return true;
		}
	}
	return false;
}

/*
 * The network door's box end, once the root is set up and lo is up: apt's
 * proxy setting, then the forwarder in its own process (PID 1 only forks).
 */
static void start_egress(void)
{
	char dev[PATH_MAX_BUF], msg[200];
	int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = fd < 0 ? -errno : guest_egress_write_apt_proxy(fd);

	if (fd >= 0) {
		(void)close(fd);
	}
	if (r < 0) {
		(void)snprintf(msg, sizeof(msg),
			       "apt's proxy setting not written (/etc/apt/apt.conf.d/99tkbox-proxy): %s",
			       tk_strerror(r));
		kmsg_line(msg);
	}
	if (find_port(GUEST_EGRESS_PORT_NAME, dev, sizeof(dev)) < 0) {
		kmsg_line("no tkbox.egress port (an older host): the box has no proxy on 127.0.0.1:3128");
		return;
	}
	/* The forwarder keeps the port open; this copy goes (a port has one opener at a time). */
	fd = open(dev, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	r = fd < 0 ? -errno : guest_egress_start(fd);
	if (fd >= 0) {
		(void)close(fd);
	}
	if (r < 0) {
		(void)snprintf(msg, sizeof(msg), "the proxy forwarder did not start: %s", tk_strerror(r));
		kmsg_line(msg);
	}
}

/*
 * The box's CA (boot config ca_pem): the trust files before the agent runs
 * any command, the JDK's keystore in the background; then the self-test's
 * process, which waits for the agent (*ret_ready_fd goes to it). Nothing
 * here stops the boot: the box works without it, its clients just do not
 * trust the proxy, and the self-test says so.
 */
static void start_trust(const struct boot_config *cfg, int *ret_ready_fd)
{
	struct guest_trust_report rep;
	int r, root;

	*ret_ready_fd = -1;
	if (cfg->ca_pem) {
		root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		r = root < 0 ? -errno : guest_trust_install(root, cfg->ca_pem, &rep);
		if (root >= 0) {
			(void)close(root);
		}
		if (r < 0) {
			guest_kmsg("the box CA is not installed (" GUEST_TRUST_BUNDLE "): %s", tk_strerror(r));
		} else {
			guest_kmsg("the box CA is installed: " GUEST_TRUST_BUNDLE " (%s%s), appended to %u system "
				   "bundle(s), already in %u, %u left alone",
				   rep.base ? "from /" : "no system bundle", rep.base ? rep.base : "", rep.appended,
				   rep.present, rep.skipped);
			if (rep.error) {
				guest_kmsg("the box CA: /%s: %s", rep.error_path, tk_strerror(rep.error));
			}
			r = guest_trust_java_start(cfg->env);
			if (r < 0) {
				guest_kmsg("java: the keystore import did not start: %s", tk_strerror(r));
			}
		}
		trace("box CA installed");
	}
	r = guest_selftest_start(cfg->ca_pem != NULL, cfg->env, ret_ready_fd);
	if (r < 0) {
		guest_kmsg("self-test: not started: %s", tk_strerror(r));
	}
}

static int boot(void)
{
	struct boot_config cfg = { 0 };
	struct guest_agent_config acfg = { 0 };
	struct timespec ts;
	char dev[PATH_MAX_BUF];
	int r, port, boot_fd = -1, ws[2] = { -1, -1 };

	/* A command may close its end of a pipe; PID 1 must see EPIPE, not die. */
	(void)signal(SIGPIPE, SIG_IGN);
	r = do_mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	if (r >= 0) {
		r = do_mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	}
	if (r >= 0) {
		r = do_mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	}
	if (r >= 0) {
		r = do_mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	}
	if (r < 0) {
		return r;
	}
	setup_console();
	tracing = cmdline_has("tkbox.trace=1");
	trace("init started");
	if (cmdline_has("tkbox.probe=1")) {
		/* Accelerator probe and the bench's bare boot: the kernel reached user space. */
		kmsg_line("TKBOX-PROBE-OK READY");
		power_off();
	}
	/*
	 * jansson seeds its hash function from /dev/urandom on first use; this
	 * early the kernel's CRNG is not ready and that read spins ~1 s of jitter
	 * entropy under TCG. The seed only hardens hash tables against collision
	 * floods, and the host is the only JSON peer: an uninitialised-CRNG
	 * value is good enough here.
	 */
	{
		uint32_t seed = 0;
		if (getrandom(&seed, sizeof(seed), GRND_INSECURE) != (ssize_t)sizeof(seed)) {
			seed = (uint32_t)time(NULL);
		}
		json_object_seed(seed ? seed : 1);
	}
	r = load_modules();
	if (r < 0) {
		return r;
	}
	trace("modules loaded");
	/*
	 * Nothing inside the box may load a module after ours (a NIC driver, a tunnel). A kernel built without
	 * module support (tkbox's built kernel) has neither the switch nor /proc/modules: nothing can be loaded.
	 */
	if (access("/proc/sys/kernel/modules_disabled", F_OK) < 0 && errno == ENOENT &&
	    access("/proc/modules", F_OK) < 0 && errno == ENOENT) {
		trace("kernel without module support");
	} else {
		int fd = open("/proc/sys/kernel/modules_disabled", O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, "1", 1) != 1) {
			r = log_error_errno(negative_errno(), "disabling module loading");
		}
		if (fd >= 0) {
			(void)close(fd);
		}
		if (r < 0) {
			return r;
		}
	}
	/* Ask for the config first and mount the root while it travels. */
	r = request_boot_config(&boot_fd);
	if (r < 0) {
		return r;
	}
	r = wait_port("tkbox.agent", dev, sizeof(dev));
	if (r < 0) {
		return r;
	}
	port = open(dev, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (port < 0) {
		return log_error_errno(-errno, "open %s", dev);
	}
	r = setup_root(ws);
	if (r < 0) {
		return r;
	}
	trace("root ready");
	r = read_boot_config(boot_fd, &cfg);
	if (r < 0) {
		return r;
	}
	trace("boot config read");
	/* Credit the host's randomness so the box's first getrandom() does not stall (see boot_config). */
	{
		/* struct rand_pool_info: entropy_count (bits), buf_size (bytes), then the bytes. */
		int pool[2 + BOOT_ENTROPY_WORDS] = { BOOT_ENTROPY_WORDS * 32, (int)sizeof(cfg.entropy) };
		int rfd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
		memcpy(&pool[2], cfg.entropy, sizeof(cfg.entropy));
		if (rfd < 0 || ioctl(rfd, RNDADDENTROPY, pool) < 0) {
			log_warn("crediting boot entropy: %s", strerror(errno));
		}
		if (rfd >= 0) {
			(void)close(rfd);
		}
		explicit_bzero(&pool, sizeof(pool));
		explicit_bzero(cfg.entropy, sizeof(cfg.entropy));
	}
	ts = (struct timespec){ .tv_sec = (time_t)cfg.clock_sec, .tv_nsec = (long)cfg.clock_nsec };
	if (clock_settime(CLOCK_REALTIME, &ts) < 0) {
		return log_error_errno(-errno, "setting the clock");
	}
	if (sethostname(cfg.hostname, strlen(cfg.hostname)) < 0) {
		return log_error_errno(-errno, "sethostname");
	}
	r = lo_up();
	if (r < 0) {
		return r;
	}
	start_egress();
	start_trust(&cfg, &acfg.ready_fd);
	trace("agent starting");
	acfg.port_fd = port;
	acfg.base_env = cfg.env;
	acfg.ws_lower_fd = ws[0];
	acfg.ws_upper_fd = ws[1];
	r = guest_agent_run(&acfg);
	if (r < 0) {
		return log_error_errno(r, "agent");
	}
	boot_config_release(&cfg);
	return 0;
}

int main(int argc, char **argv)
{
	int r;

	if (argc == 2 && strcmp(argv[1], "--version") == 0) {
		printf("tkbox-guest %s\n", TKBOX_VERSION);
		return 0;
	}
	if (getpid() != 1) {
		fprintf(stderr, "tkbox-guest runs as PID 1 in a tkbox VM (tkbox-guest --version)\n");
		return 2;
	}
	log_set_ident("tkbox-guest");
	r = boot();
	if (r < 0) {
		log_error("box failed: %s; powering off", tk_strerror(r));
	}
	power_off();
}
