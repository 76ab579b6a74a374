/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The built guest kernel: Debian's linux-source tarball, `make tinyconfig`
 * with src/vmm/kernel/tkbox-guest.config merged over it, `make vmlinux`,
 * stripped, cached in <state>/images/assets/built-<key> next to the cloud
 * kernel (key: the tarball's and the fragment's SHA-256), named by the
 * pointer file `built`. Everything a box needs is built in, so its manifest
 * lists no modules. Built once (minutes); boots then only read the cache.
 */
#include <fcntl.h>
#include <glob.h>
#include <sys/file.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "banned.h"
#include "buf.h"
#include "crypto.h"
#include "io.h"
#include "json.h"
#include "log.h"
#include "vmm/assets.h"
#include "kernel-config.h" /* generated from kernel/tkbox-guest.config */

/* Seconds since t0 (CLOCK_MONOTONIC), for the log. */
static double since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* The one linux-source tarball under /usr/src (Debian's linux-source-X.Y package), as a new string. */
static int find_source(char **ret)
{
	glob_t g = { 0 };
	int r = glob(VM_KERNEL_SOURCE_GLOB, 0, NULL, &g);

	if (r != 0 || g.gl_pathc == 0) {
		globfree(&g);
		log_error(
			"no kernel source: %s not found. Install it with `apt-get install linux-source-6.1 flex bison "
			"bc libelf-dev`, or pass its path",
			VM_KERNEL_SOURCE_GLOB);
		return -ENOENT;
	}
	/* glob sorts: with several versions installed the last is the newest of the same major. */
	*ret = strdup(g.gl_pathv[g.gl_pathc - 1]);
	globfree(&g);
	return *ret ? 0 : -ENOMEM;
}

/* Run argv with stdout and stderr appended to log_fd; a failure names the step and the log. */
static int step(const char *what, char *const argv[], const char *cwd, int log_fd, const char *log_path)
{
	int r = vm_run_program_log(argv, cwd, log_fd);

	if (r != 0) {
		log_error("building the guest kernel: %s failed (%s %d); see %s", what, r < 0 ? "error" : "status",
			  r < 0 ? -r : r, log_path);
		return r < 0 ? r : -EIO;
	}
	return 0;
}

/* Every CONFIG_ line of the fragment must be in the final .config: an option the source dropped is an error. */
static int config_check(const char *dot_config)
{
	_cleanup_free_ char *have = NULL;
	size_t n = 0;
	const char *p = tkbox_guest_config;
	int r = io_read_file(AT_FDCWD, dot_config, (size_t)4 << 20, 0, &have, &n);

	if (r < 0) {
		return log_error_errno(r, "reading %s", dot_config);
	}
	while (*p) {
		const char *e = strchr(p, '\n');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		char line[256];

		if (l > 7 && l < sizeof(line) && strncmp(p, "CONFIG_", 7) == 0) {
			memcpy(line, p, l);
			line[l] = '\0';
			/* A whole line of .config: preceded by a newline (or the start) and followed by one. */
			const char *hit = have;
			bool found = false;
			while ((hit = strstr(hit, line))) {
				if ((hit == have || hit[-1] == '\n') && (hit[l] == '\n' || hit[l] == '\0')) {
					found = true;
					break;
				}
				hit += l;
			}
			if (!found) {
				log_error("building the guest kernel: %s is not in the final configuration (this "
					  "source does "
					  "not offer it, or a dependency is missing)",
					  line);
				return -EINVAL;
			}
		}
		p += l + (e ? 1 : 0);
	}
	return 0;
}

/* The cache key: SHA-256 over the tarball's SHA-256 and the configuration fragment, as hex. */
static int build_key(const char *source, char ret[65], char src_sha[65])
{
	_cleanup_free_ char *both = NULL;
	int r = vm_file_sha256(source, src_sha);

	if (r < 0) {
		return log_error_errno(r, "reading %s", source);
	}
	if (asprintf(&both, "%s\n%s", src_sha, tkbox_guest_config) < 0) {
		return -ENOMEM;
	}
	return sha256_hex(both, strlen(both), ret) < 0 ? -EIO : 0;
}

/* tar, tinyconfig, the fragment merged, olddefconfig, checked, vmlinux: in work (src/ and out/), output to log_fd. */
static int compile(const char *source, const char *work, int log_fd, const char *log_path)
{
	_cleanup_free_ char *src = NULL, *out = NULL, *frag = NULL, *merge = NULL, *dotcfg = NULL, *jobs = NULL,
			    *o_arg = NULL;
	struct timespec t0;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int r;

	if (asprintf(&src, "%s/src", work) < 0 || asprintf(&out, "%s/out", work) < 0 ||
	    asprintf(&frag, "%s/tkbox-guest.config", work) < 0 ||
	    asprintf(&merge, "%s/scripts/kconfig/merge_config.sh", src) < 0 ||
	    asprintf(&dotcfg, "%s/.config", out) < 0 || asprintf(&jobs, "-j%ld", ncpu > 0 ? ncpu + 1 : 2) < 0 ||
	    asprintf(&o_arg, "O=%s", out) < 0) {
		return -ENOMEM;
	}
	if (mkdir(src, 0755) < 0 || mkdir(out, 0755) < 0) {
		return -errno;
	}
	r = vm_write_file(frag, tkbox_guest_config, strlen(tkbox_guest_config));
	if (r < 0) {
		return r;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	{
		char *argv[] = { "tar", "-xf", (char *)source, "-C", src, "--strip-components=1", NULL };
		r = step("unpacking the source", argv, NULL, log_fd, log_path);
	}
	if (r >= 0) {
		log_info("kernel source unpacked in %.0f s", since(&t0));
		char *argv[] = { "make", "-C", src, o_arg, "tinyconfig", NULL };
		r = step("make tinyconfig", argv, NULL, log_fd, log_path);
	}
	if (r >= 0) {
		char *argv[] = { "sh", merge, "-m", "-O", out, dotcfg, frag, NULL };
		r = step("merging tkbox-guest.config", argv, src, log_fd, log_path);
	}
	if (r >= 0) {
		char *argv[] = { "make", "-C", src, o_arg, "olddefconfig", NULL };
		r = step("make olddefconfig", argv, NULL, log_fd, log_path);
	}
	if (r >= 0) {
		r = config_check(dotcfg);
	}
	if (r >= 0) {
		log_info("compiling the guest kernel (%s; several minutes)", jobs);
		char *argv[] = { "make", "-C", src, o_arg, jobs, "vmlinux", NULL };
		r = step("make vmlinux", argv, NULL, log_fd, log_path);
	}
	if (r >= 0) {
		log_info("guest kernel compiled in %.0f s", since(&t0));
	}
	return r;
}

/* The stripped vmlinux and its manifest in dir (new), then dir renamed to final. */
static int install(const char *vmlinux, const char *dir, const char *final, const char *source, const char *src_sha,
		   const char *key, int log_fd, const char *log_path)
{
	_cleanup_free_ char *kpath = NULL, *package = NULL;
	_cleanup_json_ json_t *man = NULL;
	const char *base = strrchr(source, '/');
	char sha[65];
	int r;

	if (asprintf(&kpath, "%s/vmlinux", dir) < 0 || asprintf(&package, "built from %s (sha256 %.16s), config %.16s",
								base ? base + 1 : source, src_sha, key) < 0) {
		return -ENOMEM;
	}
	(void)vm_rm_rf(dir);
	if (mkdir(dir, 0755) < 0) {
		return -errno;
	}
	{
		char *argv[] = { "strip", "-o", kpath, (char *)vmlinux, NULL };
		r = step("strip vmlinux", argv, NULL, log_fd, log_path);
	}
	if (r >= 0) {
		r = vm_file_sha256(kpath, sha);
	}
	if (r < 0) {
		return r;
	}
	man = json_pack("{s:s,s:s,s:s,s:[]}", "package", package, "kernel", "vmlinux", "kernel_sha256", sha, "modules");
	if (!man) {
		return -ENOMEM;
	}
	r = vm_assets_write_manifest(dir, man);
	if (r < 0) {
		return r;
	}
	(void)vm_rm_rf(final);
	return rename(dir, final) < 0 ? -errno : 0;
}

/* Built kernels of other sources or configurations than keep, no longer named by `built`: removed. */
static void prune_built(const char *assets, const char *keep)
{
	_cleanup_free_ char *pattern = NULL;
	glob_t g = { 0 };

	if (asprintf(&pattern, "%s/built-*", assets) < 0) {
		return;
	}
	if (glob(pattern, GLOB_NOSORT, NULL, &g) == 0) {
		for (size_t i = 0; i < g.gl_pathc; i++) {
			const char *base = strrchr(g.gl_pathv[i], '/') + 1;
			if (strcmp(base, keep) != 0) {
				log_info("removing the previous built kernel %s", g.gl_pathv[i]);
				(void)vm_rm_rf(g.gl_pathv[i]);
			}
		}
	}
	globfree(&g);
}

/*
 * One build per cache at a time: an exclusive lock on <assets>/.kbuild.lock (held until the fd closes); once held,
 * scratch trees an interrupted build left are removed.
 */
static int build_lock(const char *assets, int *ret_fd)
{
	_cleanup_free_ char *lock = NULL, *pattern = NULL;
	glob_t g = { 0 };
	int fd;

	if (asprintf(&lock, "%s/.kbuild.lock", assets) < 0 || asprintf(&pattern, "%s/.kbuild-*", assets) < 0) {
		return -ENOMEM;
	}
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		return log_error_errno(-errno, "opening %s", lock);
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e = -errno;
		(void)close(fd);
		if (e == -EWOULDBLOCK) {
			log_error("another guest kernel build is running in %s; wait for it", assets);
			return -EBUSY;
		}
		return log_error_errno(e, "locking %s", lock);
	}
	if (glob(pattern, GLOB_NOSORT, NULL, &g) == 0) {
		for (size_t i = 0; i < g.gl_pathc; i++) {
			log_info("removing %s, left by an interrupted kernel build", g.gl_pathv[i]);
			(void)vm_rm_rf(g.gl_pathv[i]);
		}
	}
	globfree(&g);
	*ret_fd = fd;
	return 0;
}

int vm_kernel_build(const char *state_dir, const char *source)
{
	_cleanup_free_ char *found = NULL, *assets = NULL, *work = NULL, *log_path = NULL, *name = NULL, *final = NULL,
			    *tmp = NULL, *vmlinux = NULL;
	_cleanup_close_ int log_fd = -1, lock_fd = -1;
	char key[65], src_sha[65];
	struct vm_assets a = { 0 };
	int r;

	if (!source) {
		r = find_source(&found);
		if (r < 0) {
			return r;
		}
		source = found;
	}
	r = build_key(source, key, src_sha);
	if (r < 0) {
		return r;
	}
	if (asprintf(&assets, "%s/images/assets", state_dir) < 0 || asprintf(&name, "built-%.16s", key) < 0 ||
	    asprintf(&final, "%s/%s", assets, name) < 0 || asprintf(&tmp, "%s.tmp", final) < 0 ||
	    asprintf(&log_path, "%s/kernel-build.log", assets) < 0 ||
	    asprintf(&work, "%s/.kbuild-XXXXXX", assets) < 0) {
		return -ENOMEM;
	}
	r = io_mkdir_p(AT_FDCWD, assets, 0755);
	if (r < 0) {
		return log_error_errno(r, "creating %s", assets);
	}
	r = build_lock(assets, &lock_fd);
	if (r < 0) {
		return r;
	}
	r = vm_assets_load_dir(final, &a);
	if (r >= 0) {
		vm_assets_release(&a);
		log_info("guest kernel %s already built from this source and configuration", final);
		r = vm_assets_point(assets, VM_ASSETS_BUILT_PTR, name);
		if (r >= 0) {
			prune_built(assets, name);
		}
		return r;
	}
	log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (log_fd < 0 || !mkdtemp(work)) {
		return log_error_errno(-errno, "building the guest kernel in %s", assets);
	}
	log_info("building the guest kernel from %s in %s (output in %s)", source, work, log_path);
	r = compile(source, work, log_fd, log_path);
	if (r >= 0 && asprintf(&vmlinux, "%s/out/vmlinux", work) < 0) {
		r = -ENOMEM;
	}
	if (r >= 0) {
		r = install(vmlinux, tmp, final, source, src_sha, key, log_fd, log_path);
	}
	if (r >= 0) {
		r = vm_assets_point(assets, VM_ASSETS_BUILT_PTR, name);
	}
	if (r >= 0) {
		prune_built(assets, name);
		log_info("guest kernel built and cached in %s; boxes boot it from now on (%s=cloud for the cloud "
			 "kernel)",
			 final, VM_KERNEL_ENV);
	} else {
		(void)vm_rm_rf(tmp);
	}
	(void)vm_rm_rf(work);
	return r;
}
