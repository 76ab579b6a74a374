/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tkbox doctor [--json] [--state-dir D] [--signer SOCK] [--guest FILE]:
 * what this host can run, each check ok, warn or fail with a one-line
 * finding and, unless ok, a fix. Exit 0 when nothing failed, 1 otherwise.
 *
 * Each check asks the code the daemon uses: the accelerator is resolved by
 * vm_accel_resolve() (a probe boot under KVM, its verdict cached in the state
 * dir exactly as the daemon caches it), the guest kernel by vm_assets_ensure()
 * (without fetching), the signer's isolation is what the signer measures for
 * this caller (its status answer), and the resolver check is one lookup
 * through egress_resolve_name(), the daemon's own resolver path. Nothing
 * leaves the host but that one query to the host's resolver, for a name under
 * .invalid, which RFC 6761 asks a resolver to answer without asking anyone
 * else.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <ares.h>

#include "banned.h"
#include "cli/apiclient.h"
#include "cli/commands.h"
#include "clock.h"
#include "daemon/daemon.h"
#include "daemon/egress-door.h"
#include "io.h"
#include "json.h"
#include "log.h"
#include "signer/client.h"
#include "signer/paths.h"
#include "signer/rpc.h"
#include "vmm/assets.h"
#include "vmm/initramfs.h"
#include "vmm/vm.h"

#define DOCTOR_MAX_CHECKS 16
#define DOCTOR_TEXT_MAX 512
#define DOCTOR_TIMEOUT_MS 3000 /* a signer's or daemon's answer */
#define DOCTOR_PROBE_NAME "tkbox-doctor.invalid"
/* Free space under the state dir: below FAIL no box fits; below WARN one default box (4 GiB disk) barely does. */
#define DOCTOR_DISK_FAIL_MIB 1024
#define DOCTOR_DISK_WARN_MIB (DAEMON_DEFAULT_DISK_MIB + 1024)
#define DOCTOR_QEMU_OUT_MAX ((size_t)256 << 10)

enum doctor_status {
	DOCTOR_OK = 0,
	DOCTOR_WARN,
	DOCTOR_FAIL,
};

static const char *const status_names[] = { "ok", "warn", "fail" };

struct doctor_check {
	const char *name;
	enum doctor_status status;
	char finding[DOCTOR_TEXT_MAX];
	char fix[DOCTOR_TEXT_MAX];
};

struct doctor {
	const char *state_dir;
	const char *signer_arg; /* --signer, or NULL */
	char *guest; /* the guest agent found, or NULL */
	json_t *info; /* the daemon's /v1/info, or NULL */
	struct vm_assets assets;
	bool have_assets;
	struct doctor_check checks[DOCTOR_MAX_CHECKS];
	size_t n;
};

static void add(struct doctor *d, const char *name, enum doctor_status st, const char *fix, const char *fmt, ...)
	_printf_(5, 6);
static void add(struct doctor *d, const char *name, enum doctor_status st, const char *fix, const char *fmt, ...)
{
	struct doctor_check *c;
	va_list ap;

	if (d->n >= DOCTOR_MAX_CHECKS) {
		return;
	}
	c = &d->checks[d->n++];
	c->name = name;
	c->status = st;
	va_start(ap, fmt);
	(void)vsnprintf(c->finding, sizeof(c->finding), fmt, ap);
	va_end(ap);
	(void)snprintf(c->fix, sizeof(c->fix), "%s", st == DOCTOR_OK || !fix ? "" : fix);
	/* A finding quotes paths and what a daemon, signer or QEMU said: one line, valid UTF-8 (JSON takes it). */
	for (char *t = c->finding; *t; t++) {
		if ((unsigned char)*t < 0x20 || *t == 0x7f) {
			*t = '?';
		}
	}
	(void)json_utf8_clip(c->finding);
}

/* ---------------------------------------------------------------- the VM: guest agent, kernel, QEMU, KVM */

/* The daemon's own search (daemon_find_guest), NULL when it finds nothing. */
static char *find_guest_or_null(void)
{
	char *p = NULL;

	return daemon_find_guest(&p) < 0 ? NULL : p;
}

static void check_guest(struct doctor *d, const char *guest_arg)
{
	struct stat st;

	d->guest = guest_arg ? realpath(guest_arg, NULL) : find_guest_or_null();
	if (!d->guest || stat(d->guest, &st) < 0 || !S_ISREG(st.st_mode)) {
		add(d, "guest", DOCTOR_FAIL,
		    "reinstall tkbox (the guest agent is built with it), or give the daemon --guest FILE",
		    "the guest agent %s was not found%s%s", DAEMON_GUEST_NAME, guest_arg ? " at " : " next to tkbox",
		    guest_arg ? guest_arg : "");
		free(d->guest);
		d->guest = NULL;
		return;
	}
	add(d, "guest", DOCTOR_OK, NULL, "guest agent %s (%lld KiB)", d->guest, (long long)st.st_size / 1024);
}

static void check_kernel(struct doctor *d)
{
	char fix[DOCTOR_TEXT_MAX];
	int r = vm_assets_ensure(d->state_dir, false, &d->assets);

	if (r >= 0) {
		d->have_assets = true;
		if (d->assets.n_modules == 0) {
			add(d, "kernel", DOCTOR_OK, NULL, "guest kernel %s (the built kernel, drivers built in)",
			    d->assets.version);
		} else {
			add(d, "kernel", DOCTOR_OK, NULL,
			    "guest kernel %s cached (Debian's cloud kernel, %zu modules); boxes boot faster on a "
			    "kernel built with `tkbox-vm assets --build-kernel` (needs linux-source-6.1)",
			    d->assets.version, d->assets.n_modules);
		}
		return;
	}
	(void)snprintf(fix, sizeof(fix),
		       "fetch it now: tkbox-vm assets --state %s (apt-get download of %s; needs dpkg-deb and lz4)",
		       d->state_dir, VM_ASSETS_META_PACKAGE);
	if (r == -ENOENT) {
		add(d, "kernel", DOCTOR_WARN, fix,
		    "no guest kernel cached in %s/images/assets: the first box fetches it with apt", d->state_dir);
	} else {
		add(d, "kernel", DOCTOR_FAIL, fix, "the guest kernel cache in %s/images/assets is unusable (%s)",
		    d->state_dir, tk_strerror(r));
	}
}

/* Run argv with stdout into a new string (stderr to /dev/null); the exit status, or -errno. */
static int run_capture(char *const argv[], char **ret)
{
	_cleanup_close_ int fd = memfd_create("tkbox-doctor", MFD_CLOEXEC);
	char path[64];
	int saved, nul, status;
	size_t n;

	if (fd < 0) {
		return negative_errno();
	}
	saved = dup(STDERR_FILENO);
	nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (saved >= 0 && nul >= 0) {
		(void)dup2(nul, STDERR_FILENO);
	}
	status = vm_run_program(argv, NULL, fd);
	if (saved >= 0) {
		(void)dup2(saved, STDERR_FILENO);
		(void)close(saved);
	}
	if (nul >= 0) {
		(void)close(nul);
	}
	if (status < 0) {
		return status;
	}
	(void)snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return io_read_file(AT_FDCWD, path, DOCTOR_QEMU_OUT_MAX, IO_READ_PREFIX, ret, &n) < 0 ? -EIO : status;
}

static void check_qemu(struct doctor *d)
{
	static const char fix[] = "install QEMU: apt-get install qemu-system-x86 (Debian) or your system's package";
	char *version_argv[] = { VM_QEMU, "--version", NULL };
	char *machine_argv[] = { VM_QEMU, "-machine", "help", NULL };
	_cleanup_free_ char *out = NULL, *machines = NULL;
	const char *v;
	size_t len;
	int r = run_capture(version_argv, &out);

	if (r != 0) {
		add(d, "qemu", DOCTOR_FAIL, fix, "%s %s", VM_QEMU, r == 127 ? "is not on PATH" : "--version failed");
		return;
	}
	v = strstr(out, "version ");
	v = v ? v + 8 : "unknown";
	len = strcspn(v, " \n");
	r = run_capture(machine_argv, &machines);
	if (r != 0 || !strstr(machines, "\nmicrovm ")) {
		add(d, "qemu", DOCTOR_FAIL, fix, "%s %.*s has no microvm machine type", VM_QEMU, (int)MIN(len, 32), v);
		return;
	}
	add(d, "qemu", DOCTOR_OK, NULL, "%s %.*s with the microvm machine type", VM_QEMU, (int)MIN(len, 32), v);
}

/* A probe boot needs the guest's initramfs: built in a private directory, as a box's is. */
static int kvm_probe(struct doctor *d, enum vm_accel *ret)
{
	char dir[] = "/tmp/tkbox-doctor-XXXXXX";
	_cleanup_free_ char *initrd = NULL;
	int r;

	if (!mkdtemp(dir)) {
		return negative_errno();
	}
	r = asprintf(&initrd, "%s/initramfs.cpio", dir) < 0 ? -ENOMEM : 0;
	if (r >= 0) {
		r = vm_initramfs_build(d->guest, &d->assets, initrd);
	}
	if (r >= 0) {
		r = vm_accel_resolve(VM_ACCEL_AUTO, d->state_dir, d->assets.kernel, d->assets.kernel_sha256, initrd,
				     ret);
	}
	(void)vm_rm_rf(dir);
	return r;
}

static void check_kvm(struct doctor *d)
{
	static const char fix_access[] = "give this user /dev/kvm: usermod -aG kvm USER (then log in again), or the "
					 "udev rule KERNEL==\"kvm\", MODE=\"0666\"";
	static const char fix_none[] = "enable virtualization (VT-x/AMD-V) in the firmware or the hypervisor and "
				       "load kvm_intel or kvm_amd; until then boxes run under TCG";
	enum vm_accel accel = VM_ACCEL_TCG;
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC), r;

	if (fd < 0) {
		r = negative_errno();
		add(d, "kvm", DOCTOR_WARN, r == -ENOENT ? fix_none : fix_access,
		    "/dev/kvm does not open (%s): boxes run under TCG, isolation \"emulated\"", tk_strerror(r));
		return;
	}
	(void)close(fd);
	if (!d->guest || !d->have_assets) {
		add(d, "kvm", DOCTOR_WARN, "see the guest and kernel checks, then run tkbox doctor again",
		    "/dev/kvm opens; not probed: a probe boot needs the guest agent and a cached guest kernel");
		return;
	}
	r = kvm_probe(d, &accel);
	if (r < 0) {
		add(d, "kvm", DOCTOR_WARN, "see the daemon's log when a box starts",
		    "/dev/kvm opens; the probe boot could not run (%s)", tk_strerror(r));
	} else if (accel == VM_ACCEL_KVM) {
		add(d, "kvm", DOCTOR_OK, NULL, "KVM works: a probe boot under /dev/kvm reached the guest's user space");
	} else {
		char fix_broken[DOCTOR_TEXT_MAX];
		(void)snprintf(fix_broken, sizeof(fix_broken),
			       "enable nested virtualization on the hypervisor of this VM, or accept TCG; remove "
			       "%s/accel-probe to probe again",
			       d->state_dir);
		add(d, "kvm", DOCTOR_WARN, fix_broken,
		    "/dev/kvm opens but a probe boot under KVM does not reach user space (verdict cached in "
		    "%s/accel-probe): boxes run under TCG, isolation \"emulated\"",
		    d->state_dir);
	}
}

/* ---------------------------------------------------------------- the daemon and the signer */

static void check_daemon(struct doctor *d)
{
	struct timeval tv = { .tv_sec = DOCTOR_TIMEOUT_MS / 1000 };
	_cleanup_free_ char *path = NULL;
	struct apiclient *c = NULL;
	const char *version = NULL;
	json_t *info = NULL;
	int saved = dup(STDERR_FILENO), nul = open("/dev/null", O_WRONLY | O_CLOEXEC), r;

	if (daemon_socket_path(d->state_dir, &path) < 0) {
		path = NULL;
	}
	/* apiclient_connect says what to do on stderr; the finding says it here instead. */
	if (saved >= 0 && nul >= 0) {
		(void)dup2(nul, STDERR_FILENO);
	}
	r = apiclient_connect(d->state_dir, &c);
	if (saved >= 0) {
		(void)dup2(saved, STDERR_FILENO);
		(void)close(saved);
	}
	if (nul >= 0) {
		(void)close(nul);
	}
	if (r >= 0) {
		(void)setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		(void)setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		r = apiclient_request(c, "GET", "/v1/info", NULL, false, NULL);
		r = r < 0 ? r : c->resp.status != 200 ? -EPROTO : apiclient_read_json(c, &info);
		apiclient_free(c);
	}
	if (r < 0) {
		add(d, "daemon", DOCTOR_FAIL,
		    "start it: tkbox daemon (it needs a signer first: tkbox-signer up --wait); or set "
		    "TKBOX_STATE_DIR / TKBOX_SOCKET to the daemon you mean",
		    "no daemon answers at %s (%s%s)", path ? path : "?", tk_strerror(r),
		    r == -EAGAIN ? ": no answer within DOCTOR_TIMEOUT_MS, 3 s" : "");
		return;
	}
	d->info = info;
	(void)json_get_string(info, "version", &version);
	if (json_is_true(json_object_get(info, "unrecorded"))) {
		add(d, "daemon", DOCTOR_WARN, "restart it without --unrecorded, with a signer",
		    "the daemon at %s runs --unrecorded: nothing its boxes do is decided or recorded", path);
		return;
	}
	add(d, "daemon", version && strcmp(version, TKBOX_VERSION) == 0 ? DOCTOR_OK : DOCTOR_WARN,
	    "restart the daemon from this build", "daemon %.32s at %s, %lld of %lld boxes", version ? version : "?",
	    path, (long long)json_integer_value(json_object_get(info, "boxes")),
	    (long long)json_integer_value(json_object_get(info, "max_boxes")));
}

/* The signer's socket as the daemon picks it: its own answer, else --signer, $TKBOX_SIGNER_SOCKET, the default. */
static char *signer_socket(const struct doctor *d)
{
	const char *s = NULL, *e = getenv(SIGNER_SOCKET_ENV);
	char *p = NULL;

	if (d->signer_arg) {
		return strdup(d->signer_arg);
	}
	if (d->info && json_get_string(d->info, "signer", &s) == 0 && s[0] == '/') {
		return strdup(s);
	}
	if (e && e[0] == '/') {
		return strdup(e);
	}
	return signer_default_socket(SIGNER_MODE_DEV, &p) < 0 ? NULL : p;
}

/* hello, then status: the signer's answer (a new reference) or -errno with err set. */
static int signer_status(const char *path, json_t **ret, char *err, size_t err_size)
{
	struct timeval tv = { .tv_sec = DOCTOR_TIMEOUT_MS / 1000 };
	_cleanup_json_ json_t *hello = json_pack("{s:s,s:i}", "method", "hello", "proto", RPC_PROTO_VERSION);
	_cleanup_json_ json_t *status = json_pack("{s:s}", "method", "status");
	_cleanup_json_ json_t *rep = NULL;
	struct signer_client *c = NULL;
	const char *code, *msg = "";
	int r = signer_client_connect(path, DOCTOR_TIMEOUT_MS, &c);

	if (r < 0) {
		(void)snprintf(err, err_size, "cannot connect: %s", tk_strerror(r));
		return r;
	}
	(void)setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	r = hello && status ? signer_client_call(c, hello, -1, &rep) : -ENOMEM;
	if (r >= 0 && (code = signer_reply_error(rep, &msg))) {
		(void)snprintf(err, err_size, "it refused hello: %.64s: %.128s", code, msg);
		r = -EPROTO;
	}
	if (r >= 0) {
		json_decref(steal_ptr(rep));
		r = signer_client_call(c, status, -1, &rep);
		if (r >= 0 && (code = signer_reply_error(rep, &msg))) {
			(void)snprintf(err, err_size, "it refused status: %.64s: %.128s", code, msg);
			r = -EPROTO;
		}
	}
	signer_client_free(c);
	if (r < 0) {
		if (r == -EAGAIN || r == -ETIMEDOUT) {
			(void)snprintf(err, err_size, "no answer to hello and status within %d s",
				       DOCTOR_TIMEOUT_MS / 1000);
		} else if (r != -EPROTO) {
			(void)snprintf(err, err_size, "no answer to hello and status: %s", tk_strerror(r));
		}
		return r;
	}
	*ret = steal_ptr(rep);
	return 0;
}

static void check_signer(struct doctor *d)
{
	_cleanup_free_ char *path = signer_socket(d);
	_cleanup_json_ json_t *st = NULL;
	const char *mode = "?", *iso = "?", *version = "?";
	char err[DOCTOR_TEXT_MAX] = "";
	int r = path ? signer_status(path, &st, err, sizeof(err)) : -ENOMEM;

	if (r < 0) {
		add(d, "signer", DOCTOR_FAIL,
		    "start one: tkbox-signer up --wait (dev), or point TKBOX_SIGNER_SOCKET / tkbox daemon --signer "
		    "at yours",
		    "no signer answers at %s (%s)", path ? path : "?", err);
		/* the signer check failed already: the same cause is not counted twice */
		add(d, "isolation", DOCTOR_WARN, "see the signer check", "unknown: no signer answered");
		return;
	}
	(void)json_get_string(st, "mode", &mode);
	(void)json_get_string(st, "isolation", &iso);
	(void)json_get_string(st, "version", &version);
	add(d, "signer", DOCTOR_OK, NULL, "signer %.32s (%.16s mode) answers at %s (records: %lld)", version, mode,
	    path, (long long)json_integer_value(json_object_get(st, "records")));
	if (strcmp(iso, "separate-user") == 0) {
		add(d, "isolation", DOCTOR_OK, NULL, "separate-user: the signer runs as another user than this one");
	} else {
		add(d, "isolation", DOCTOR_WARN,
		    "for runs others must trust: a system signer as its own user (docs/signer.md, \"System mode\")",
		    "%.32s: the signer runs as this user, so a process of this user could reach its keys; bundles "
		    "say isolation %.32s",
		    iso, iso);
	}
}

/* ---------------------------------------------------------------- the egress resolver */

/* The servers c-ares reads from the host's configuration, as "ADDR:PORT, ..." (the daemon's resolver). */
static void resolver_servers(char *out, size_t n)
{
	struct ares_options opts = { .timeout = 1000, .tries = 1 };
	struct ares_addr_port_node *list = NULL;
	ares_channel ch;
	size_t k = 0;

	(void)snprintf(out, n, "?");
	if (ares_library_init(ARES_LIB_INIT_ALL) != ARES_SUCCESS) {
		return;
	}
	if (ares_init_options(&ch, &opts, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES) == ARES_SUCCESS) {
		if (ares_get_servers_ports(ch, &list) == ARES_SUCCESS) {
			for (struct ares_addr_port_node *s = list; s && k + 64 < n; s = s->next) {
				char a[64] = "?";
				(void)inet_ntop(s->family, &s->addr, a, sizeof(a));
				k += (size_t)snprintf(out + k, n - k, "%s%s%s%s:%d", k ? ", " : "",
						      s->family == AF_INET6 ? "[" : "", a,
						      s->family == AF_INET6 ? "]" : "", s->udp_port ? s->udp_port : 53);
			}
			ares_free_data(list);
		}
		ares_destroy(ch);
	}
	ares_library_cleanup();
}

static void check_resolver(struct doctor *d)
{
	static const char fix[] = "fix the nameserver lines of /etc/resolv.conf (or the resolver they name); or give "
				  "the daemon --resolve NAME=ADDR for each host boxes may reach";
	struct egress_addr addrs[EGRESS_MAX_RESOLVED];
	char servers[DOCTOR_TEXT_MAX / 2], err[DOCTOR_TEXT_MAX / 2] = "";
	uint64_t t0 = clock_mono_ms();
	size_t n = 0;
	int r;

	resolver_servers(servers, sizeof(servers));
	r = egress_resolve_name(DOCTOR_PROBE_NAME, addrs, EGRESS_MAX_RESOLVED, &n, err, sizeof(err));
	/* "No such name" is an answer: the resolver works. Anything else (refused, timed out, SERVFAIL) is not. */
	if (r == 0 || (r == -ENOENT &&
		       (strstr(err, ares_strerror(ARES_ENOTFOUND)) || strstr(err, ares_strerror(ARES_ENODATA))))) {
		add(d, "resolver", DOCTOR_OK, NULL, "the host's resolver %s answered a lookup of %s in %llu ms%s",
		    servers, DOCTOR_PROBE_NAME, (unsigned long long)(clock_mono_ms() - t0),
		    r == 0 ? " (with addresses: it rewrites names that do not exist)" : "");
		return;
	}
	add(d, "resolver", DOCTOR_FAIL, fix, "the host's resolver %s did not answer: %s", servers, err);
}

/* ---------------------------------------------------------------- the state dir and disk */

/* The daemon's rule for its state dir (daemon.c mkdir_private): a directory of its uid that no one else may write. */
static void check_state(struct doctor *d)
{
	char fix[DOCTOR_TEXT_MAX];
	struct stat st;

	if (lstat(d->state_dir, &st) < 0) {
		int r = negative_errno();
		add(d, "state", r == -ENOENT ? DOCTOR_OK : DOCTOR_FAIL,
		    "check the path's parents and their permissions", "state dir %s %s", d->state_dir,
		    r == -ENOENT ? "does not exist yet: tkbox daemon creates it (0700)" : tk_strerror(r));
		return;
	}
	(void)snprintf(fix, sizeof(fix),
		       "chown %u %s && chmod 0700 %s, or set TKBOX_STATE_DIR to a directory of your own",
		       (unsigned)geteuid(), d->state_dir, d->state_dir);
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
		add(d, "state", DOCTOR_FAIL, fix, "state dir %s is not a directory of uid %u: the daemon refuses it",
		    d->state_dir, (unsigned)geteuid());
	} else if (st.st_mode & 022) {
		add(d, "state", DOCTOR_FAIL, fix,
		    "state dir %s is writable by group or others (mode %04o): the daemon refuses it", d->state_dir,
		    (unsigned)(st.st_mode & 07777));
	} else {
		add(d, "state", DOCTOR_OK, NULL, "state dir %s: a directory of uid %u, mode %04o", d->state_dir,
		    (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
	}
}

/* path, or its nearest existing parent (the state dir may not exist yet): free MiB, or -errno. */
static int64_t free_mib(const char *path, dev_t *ret_dev)
{
	_cleanup_free_ char *p = strdup(path);
	struct statvfs sv;
	struct stat st;

	while (p && stat(p, &st) < 0) {
		char *slash = strrchr(p, '/');
		if (!slash || slash == p) {
			p[1] = '\0';
			break;
		}
		*slash = '\0';
	}
	if (!p || statvfs(p, &sv) < 0 || stat(p, &st) < 0) {
		return p ? negative_errno() : -ENOMEM;
	}
	*ret_dev = st.st_dev;
	return (int64_t)((uint64_t)sv.f_bavail * sv.f_frsize / (1024 * 1024));
}

static void check_disk_one(struct doctor *d, const char *name, const char *what, const char *path)
{
	char fix[DOCTOR_TEXT_MAX];
	dev_t dev;
	int64_t mib = free_mib(path, &dev);

	(void)snprintf(fix, sizeof(fix),
		       "free space there (tkbox rm stopped boxes, tkbox images prune), or set TKBOX_STATE_DIR to a "
		       "larger file system (at least %d MiB free)",
		       DOCTOR_DISK_WARN_MIB);
	if (mib < 0) {
		add(d, name, DOCTOR_FAIL, fix, "%s %s: %s", what, path, tk_strerror((int)mib));
	} else if (mib < DOCTOR_DISK_FAIL_MIB) {
		add(d, name, DOCTOR_FAIL, fix, "%s %s: %lld MiB free, below %d MiB", what, path, (long long)mib,
		    DOCTOR_DISK_FAIL_MIB);
	} else if (mib < DOCTOR_DISK_WARN_MIB) {
		add(d, name, DOCTOR_WARN, fix, "%s %s: %lld MiB free, below %d MiB (one box with the default disk)",
		    what, path, (long long)mib, DOCTOR_DISK_WARN_MIB);
	} else {
		add(d, name, DOCTOR_OK, NULL, "%s %s: %lld MiB free", what, path, (long long)mib);
	}
}

static void check_disk(struct doctor *d)
{
	_cleanup_free_ char *images = NULL;
	dev_t a = 0, b = 0;

	check_disk_one(d, "disk", "state dir", d->state_dir);
	/* The image cache is under the state dir; it gets its own line when it is another file system (a mount). */
	if (asprintf(&images, "%s/images", d->state_dir) >= 0 && access(images, F_OK) == 0 &&
	    free_mib(d->state_dir, &a) >= 0 && free_mib(images, &b) >= 0 && a != b) {
		check_disk_one(d, "disk-images", "image cache", images);
	}
}

/* ---------------------------------------------------------------- output */

static int print_json(const struct doctor *d, bool ok)
{
	_cleanup_json_ json_t *v = json_pack("{s:b,s:s,s:[]}", "ok", ok, "state_dir", d->state_dir, "checks");
	json_t *list = v ? json_object_get(v, "checks") : NULL;
	char *s;

	for (size_t i = 0; list && i < d->n; i++) {
		const struct doctor_check *c = &d->checks[i];
		json_t *o = json_pack("{s:s,s:s,s:s,s:s?}", "name", c->name, "status", status_names[c->status],
				      "finding", c->finding, "fix", c->fix[0] ? c->fix : NULL);
		if (!o || json_array_append_new(list, o) < 0) {
			list = NULL;
		}
	}
	s = list ? json_dumps(v, JSON_INDENT(2)) : NULL;
	if (!s) {
		fprintf(stderr, "tkbox doctor: out of memory\n");
		return -ENOMEM;
	}
	printf("%s\n", s);
	free(s);
	return 0;
}

static void print_text(const struct doctor *d)
{
	unsigned n[3] = { 0 };

	printf("state dir %s\n", d->state_dir);
	for (size_t i = 0; i < d->n; i++) {
		const struct doctor_check *c = &d->checks[i];
		n[c->status]++;
		printf("%-4s  %-11s %s\n", status_names[c->status], c->name, c->finding);
		if (c->fix[0]) {
			printf("%-17s fix: %s\n", "", c->fix);
		}
	}
	printf("%u ok, %u warn, %u fail\n", n[DOCTOR_OK], n[DOCTOR_WARN], n[DOCTOR_FAIL]);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: tkbox doctor [--json] [--state-dir D] [--signer SOCK] [--guest FILE]\n"
		   "Checks KVM (a probe boot), QEMU, the guest agent and kernel, the signer and its isolation, the\n"
		   "daemon, the egress resolver, the state dir and disk space. Exit 0 when no check fails, 1 "
		   "otherwise.\n");
}

int cmd_doctor(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },	    { "state-dir", required_argument, NULL, 'd' },
		{ "signer", required_argument, NULL, 's' }, { "guest", required_argument, NULL, 'g' },
		{ "help", no_argument, NULL, 'h' },	    { NULL, 0, NULL, 0 },
	};
	struct doctor d = { .state_dir = daemon_default_state_dir() };
	const char *guest_arg = NULL;
	bool as_json = false, ok = true;
	int ch, nul;

	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'j':
			as_json = true;
			break;
		case 'd':
			d.state_dir = optarg;
			break;
		case 's':
			d.signer_arg = optarg;
			break;
		case 'g':
			guest_arg = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || d.state_dir[0] != '/') {
		usage(stderr);
		return 2;
	}
	/* Every finding is in the report: the libraries' own log lines would only repeat them. */
	nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (nul >= 0) {
		log_set_fd(nul);
	}
	check_daemon(&d);
	check_signer(&d);
	check_qemu(&d);
	check_guest(&d, guest_arg);
	check_kernel(&d);
	check_kvm(&d);
	check_resolver(&d);
	check_state(&d);
	check_disk(&d);
	log_set_fd(STDERR_FILENO);
	if (nul >= 0) {
		(void)close(nul);
	}
	for (size_t i = 0; i < d.n; i++) {
		ok = ok && d.checks[i].status != DOCTOR_FAIL;
	}
	if (as_json ? print_json(&d, ok) < 0 : (print_text(&d), false)) {
		ok = false;
	}
	json_decref(d.info);
	free(d.guest);
	if (d.have_assets) {
		vm_assets_release(&d.assets);
	}
	return ok ? 0 : 1;
}
