/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "banned.h"
#include "crypto.h"
#include "io.h"
#include "json.h"
#include "log.h"
#include "vmm/assets.h"

const char *const vm_wanted_modules[] = {
	"virtio_ring", "virtio", "virtio_mmio", "virtio_console", "virtio_blk", "overlay", NULL,
};

#define MANIFEST_MAX ((size_t)1 << 20)
#define APT_OUTPUT_MAX ((size_t)1 << 20)

/* ---- pure parsers ---- */

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint16_t le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static uint64_t le64(const uint8_t *p)
{
	return (uint64_t)le32(p) | ((uint64_t)le32(p + 4) << 32);
}

int bzimage_lz4_payload(const uint8_t *p, size_t n, size_t *ret_off, size_t *ret_len)
{
	static const uint8_t lz4_legacy[4] = { 0x02, 0x21, 0x4c, 0x18 };
	size_t setup_sects, base, off, len;

	/* The real-mode header: "HdrS" at 0x202, protocol version at 0x206, payload fields at 0x248. */
	if (n < 0x250 || memcmp(p + 0x202, "HdrS", 4) != 0 || le16(p + 0x206) < 0x208) {
		return -EBADMSG;
	}
	setup_sects = p[0x1f1] ? p[0x1f1] : 4;
	base = (setup_sects + 1) * 512;
	off = le32(p + 0x248);
	len = le32(p + 0x24c);
	if (base > n || off > n - base || len > n - base - off || len < 8) {
		return -EBADMSG;
	}
	off += base;
	if (memcmp(p + off, lz4_legacy, sizeof(lz4_legacy)) != 0) {
		return -EPROTONOSUPPORT;
	}
	*ret_off = off;
	*ret_len = len - 4; /* the uncompressed size the build appends is not LZ4 */
	return 0;
}

int modinfo_depends(const uint8_t *p, size_t n, char **ret)
{
	uint64_t shoff;
	uint16_t shentsize, shnum, shstrndx;
	const uint8_t *strtab_sh;
	uint64_t stroff, strsize;

	if (n < 64 || memcmp(p, "\177ELF", 4) != 0 || p[4] != 2 /* ELFCLASS64 */ || p[5] != 1 /* LSB */) {
		return -EBADMSG;
	}
	shoff = le64(p + 0x28);
	shentsize = le16(p + 0x3a);
	shnum = le16(p + 0x3c);
	shstrndx = le16(p + 0x3e);
	if (shentsize != 64 || shnum == 0 || shstrndx >= shnum || shoff > n || (uint64_t)shnum * 64 > n - shoff) {
		return -EBADMSG;
	}
	strtab_sh = p + shoff + (uint64_t)shstrndx * 64;
	stroff = le64(strtab_sh + 0x18);
	strsize = le64(strtab_sh + 0x20);
	if (stroff > n || strsize > n - stroff) {
		return -EBADMSG;
	}
	for (uint16_t i = 0; i < shnum; i++) {
		const uint8_t *sh = p + shoff + (uint64_t)i * 64;
		uint32_t name = le32(sh);
		uint64_t off = le64(sh + 0x18), size = le64(sh + 0x20);
		const char *nm;
		if (name >= strsize) {
			return -EBADMSG;
		}
		nm = (const char *)p + stroff + name;
		if (strnlen(nm, strsize - name) != strlen(".modinfo") || memcmp(nm, ".modinfo", 8) != 0) {
			continue;
		}
		if (off > n || size > n - off) {
			return -EBADMSG;
		}
		/* NUL-separated key=value strings. */
		for (uint64_t k = 0; k < size;) {
			const char *s = (const char *)p + off + k;
			size_t l = strnlen(s, size - k);
			if (l >= 8 && memcmp(s, "depends=", 8) == 0) {
				char *d = strndup(s + 8, l - 8);
				if (!d) {
					return -ENOMEM;
				}
				*ret = d;
				return 0;
			}
			k += l + 1;
		}
		char *d = strdup("");
		if (!d) {
			return -ENOMEM;
		}
		*ret = d;
		return 0;
	}
	return -ENOENT;
}

int apt_depends_parse(const char *text, size_t n, char **ret)
{
	static const char key[] = "Depends: ";
	size_t i = 0;

	while (i < n) {
		size_t end = i;
		size_t s = i;
		while (end < n && text[end] != '\n') {
			end++;
		}
		while (s < end && text[s] == ' ') {
			s++;
		}
		if (end - s > sizeof(key) - 1 && memcmp(text + s, key, sizeof(key) - 1) == 0) {
			size_t a = s + sizeof(key) - 1, l = end - a;
			bool ok = l > 0 && l <= 128;
			for (size_t k = a; ok && k < end; k++) {
				char c = text[k];
				ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '+' ||
				     c == '-';
			}
			if (ok) {
				char *d = strndup(text + a, l);
				if (!d) {
					return -ENOMEM;
				}
				*ret = d;
				return 0;
			}
		}
		i = end + 1;
	}
	return -ENOENT;
}

/* ---- helpers ---- */

/* argv (no shell) with stdin from /dev/null, stdout to out_fd and stderr to err_fd (-1: /dev/null, -2: kept). */
static int run_program(char *const argv[], const char *cwd, int out_fd, int err_fd)
{
	int status;
	pid_t pid = fork();

	if (pid < 0) {
		return -errno;
	}
	if (pid == 0) {
		int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (nul < 0 || dup2(nul, 0) < 0 || dup2(out_fd >= 0 ? out_fd : nul, 1) < 0 ||
		    (err_fd != -2 && dup2(err_fd >= 0 ? err_fd : nul, 2) < 0)) {
			_exit(127);
		}
		if (cwd && chdir(cwd) < 0) {
			_exit(127);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	if (RETRY_EINTR(waitpid(pid, &status, 0)) < 0) {
		return -errno;
	}
	if (WIFEXITED(status)) {
		return WEXITSTATUS(status);
	}
	return 128 + WTERMSIG(status);
}

int vm_run_program(char *const argv[], const char *cwd, int out_fd)
{
	return run_program(argv, cwd, out_fd, -2);
}

int vm_run_program_log(char *const argv[], const char *cwd, int log_fd)
{
	return run_program(argv, cwd, log_fd, log_fd);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP) {
		return rmdir(path) < 0 ? -1 : 0;
	}
	return unlink(path) < 0 ? -1 : 0;
}

int vm_rm_rf(const char *path)
{
	if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0) {
		return errno == ENOENT ? 0 : negative_errno();
	}
	return 0;
}

static int map_file(const char *path, size_t max, const uint8_t **ret_p, size_t *ret_n)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	void *m;

	if (fd < 0) {
		return -errno;
	}
	if (fstat(fd, &st) < 0) {
		return -errno;
	}
	if (!S_ISREG(st.st_mode) || st.st_size <= 0) {
		return -EBADMSG;
	}
	if ((size_t)st.st_size > max) {
		return -E2BIG;
	}
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m == MAP_FAILED) {
		return -errno;
	}
	*ret_p = m;
	*ret_n = (size_t)st.st_size;
	return 0;
}

int vm_file_sha256(const char *path, char ret[65])
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct sha256_ctx *c = NULL;
	uint8_t md[SHA256_LEN];
	uint8_t chunk[65536];
	struct buf hex;
	int r;

	if (fd < 0) {
		return -errno;
	}
	r = sha256_new(&c);
	if (r < 0) {
		return r;
	}
	for (;;) {
		ssize_t n = RETRY_EINTR(read(fd, chunk, sizeof(chunk)));
		if (n < 0) {
			r = -errno;
			break;
		}
		if (n == 0) {
			r = sha256_final(c, md);
			break;
		}
		r = sha256_update(c, chunk, (size_t)n);
		if (r < 0) {
			break;
		}
	}
	sha256_free(c);
	if (r < 0) {
		return r;
	}
	r = buf_init(&hex, 65, 0);
	if (r < 0) {
		return r;
	}
	r = hex_encode(md, sizeof(md), &hex);
	if (r >= 0 && buf_len(&hex) == 64) {
		memcpy(ret, buf_ptr(&hex), 64);
		ret[64] = '\0';
	} else if (r >= 0) {
		r = -EINVAL;
	}
	buf_release(&hex);
	return r;
}

static int copy_file(const char *src, const char *dst, mode_t mode)
{
	_cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int out = -1;
	uint8_t chunk[65536];

	if (in < 0) {
		return -errno;
	}
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	if (out < 0) {
		return -errno;
	}
	for (;;) {
		ssize_t n = RETRY_EINTR(read(in, chunk, sizeof(chunk)));
		if (n < 0) {
			return -errno;
		}
		if (n == 0) {
			break;
		}
		for (ssize_t o = 0; o < n;) {
			ssize_t w = RETRY_EINTR(write(out, chunk + o, (size_t)(n - o)));
			if (w < 0) {
				return -errno;
			}
			o += w;
		}
	}
	return fsync(out) < 0 ? -errno : 0;
}

int vm_write_file(const char *path, const void *p, size_t n)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	const uint8_t *b = p;

	if (fd < 0) {
		return -errno;
	}
	for (size_t o = 0; o < n;) {
		ssize_t w = RETRY_EINTR(write(fd, b + o, n - o));
		if (w < 0) {
			return -errno;
		}
		o += (size_t)w;
	}
	return fsync(fd) < 0 ? -errno : 0;
}

int vm_assets_point(const char *assets, const char *ptr, const char *target)
{
	_cleanup_free_ char *path = NULL, *tmp = NULL;
	int r;

	if (asprintf(&path, "%s/%s", assets, ptr) < 0 || asprintf(&tmp, "%s/%s.tmp", assets, ptr) < 0) {
		return -ENOMEM;
	}
	r = vm_write_file(tmp, target, strlen(target));
	if (r >= 0 && rename(tmp, path) < 0) {
		r = -errno;
	}
	return r;
}

int vm_assets_write_manifest(const char *dir, const json_t *man)
{
	_cleanup_free_ char *path = NULL;
	struct buf out = { 0 };
	int r;

	if (asprintf(&path, "%s/manifest.json", dir) < 0) {
		return -ENOMEM;
	}
	r = buf_init(&out, MANIFEST_MAX, 0);
	if (r >= 0) {
		r = json_write_jcs(man, &out);
	}
	if (r >= 0) {
		r = vm_write_file(path, buf_ptr(&out), buf_len(&out));
	}
	buf_release(&out);
	return r;
}

/* Module names treat '-' and '_' alike. */
static void module_norm(char *s)
{
	for (; *s; s++) {
		if (*s == '-') {
			*s = '_';
		}
	}
}

void vm_assets_release(struct vm_assets *a)
{
	if (!a) {
		return;
	}
	free(a->dir);
	free(a->kernel);
	free(a->modules_dir);
	if (a->modules) {
		for (size_t i = 0; i < a->n_modules; i++) {
			free(a->modules[i]);
		}
		free(a->modules);
	}
	free(a->version);
	*a = (struct vm_assets){ 0 };
}

/*
 * Order modules so that each comes after its dependencies. find(name) gives
 * the path of name's .ko under the source directory (or NULL).
 */
struct modset {
	char *names[VM_MAX_MODULES];
	char *paths[VM_MAX_MODULES];
	size_t n;
};

static void modset_release(struct modset *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->names[i]);
		free(s->paths[i]);
	}
	s->n = 0;
}

typedef int (*module_finder)(void *ctx, const char *name, char **ret_path);

static int modset_add(struct modset *s, const char *name, module_finder find, void *ctx, unsigned depth)
{
	_cleanup_free_ char *path = NULL, *deps = NULL;
	const uint8_t *p;
	size_t n;
	char *save = NULL;
	int r;

	for (size_t i = 0; i < s->n; i++) {
		if (strcmp(s->names[i], name) == 0) {
			return 0;
		}
	}
	if (depth > 16) {
		return -ELOOP;
	}
	r = find(ctx, name, &path);
	if (r < 0) {
		log_error("module %s not found: %s", name, tk_strerror(r));
		return r;
	}
	if (strlen(path) > 3 && strcmp(path + strlen(path) - 3, ".ko") != 0) {
		log_error("module %s is compressed (%s); only plain .ko is supported", name, path);
		return -EPROTONOSUPPORT;
	}
	r = map_file(path, VM_MODULE_MAX_SIZE, &p, &n);
	if (r < 0) {
		return log_error_errno(r, "reading %s", path);
	}
	r = modinfo_depends(p, n, &deps);
	(void)munmap((void *)p, n);
	if (r < 0) {
		return log_error_errno(r, "parsing .modinfo of %s", path);
	}
	for (char *d = strtok_r(deps, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
		module_norm(d);
		r = modset_add(s, d, find, ctx, depth + 1);
		if (r < 0) {
			return r;
		}
	}
	if (s->n >= VM_MAX_MODULES) {
		return -E2BIG;
	}
	s->names[s->n] = strdup(name);
	s->paths[s->n] = steal_ptr(path);
	if (!s->names[s->n]) {
		free(s->paths[s->n]);
		return -ENOMEM;
	}
	s->n++;
	return 0;
}

/* Finder over one flat directory (the --modules override and the cache). */
static int find_in_dir(void *ctx, const char *name, char **ret)
{
	const char *dir = ctx;
	char *p = NULL;
	struct stat st;

	if (asprintf(&p, "%s/%s.ko", dir, name) < 0) {
		return -ENOMEM;
	}
	if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
		*ret = p;
		return 0;
	}
	/* Try the other spelling ('_' in names, '-' in some file names). */
	for (char *c = p + strlen(dir) + 1; *c; c++) {
		if (*c == '_') {
			*c = '-';
		}
	}
	if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
		*ret = p;
		return 0;
	}
	free(p);
	return -ENOENT;
}

/* Finder over an extracted package: walk lib/modules/<ver>/kernel. */
static const char *walk_want;
static char *walk_found;

static int walk_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	const char *base = path + ftw->base;
	char name[256];
	size_t l = strlen(base);

	(void)st;
	if (flag != FTW_F) {
		return 0;
	}
	static const char *const exts[] = { ".ko", ".ko.xz", ".ko.zst", NULL };
	for (size_t i = 0; exts[i]; i++) {
		size_t el = strlen(exts[i]);
		if (l > el && l - el < sizeof(name) && strcmp(base + l - el, exts[i]) == 0) {
			memcpy(name, base, l - el);
			name[l - el] = '\0';
			module_norm(name);
			if (strcmp(name, walk_want) == 0) {
				walk_found = strdup(path);
				return walk_found ? 1 : -1;
			}
		}
	}
	return 0;
}

static int find_in_tree(void *ctx, const char *name, char **ret)
{
	int r;

	walk_want = name;
	walk_found = NULL;
	r = nftw((const char *)ctx, walk_one, 16, FTW_PHYS);
	if (r < 0) {
		return negative_errno();
	}
	if (!walk_found) {
		return -ENOENT;
	}
	*ret = walk_found;
	walk_found = NULL;
	return 0;
}

static int modset_build(struct modset *s, module_finder find, void *ctx)
{
	int r;

	for (size_t i = 0; vm_wanted_modules[i]; i++) {
		r = modset_add(s, vm_wanted_modules[i], find, ctx, 0);
		if (r < 0) {
			return r;
		}
	}
	return 0;
}

int vm_assets_override(const char *kernel, const char *modules_dir, struct vm_assets *ret)
{
	struct vm_assets a = { 0 };
	struct modset s = { 0 };
	int r;

	r = vm_file_sha256(kernel, a.kernel_sha256);
	if (r < 0) {
		return log_error_errno(r, "--kernel %s", kernel);
	}
	r = modset_build(&s, find_in_dir, (void *)modules_dir);
	if (r < 0) {
		modset_release(&s);
		return log_error_errno(r, "--modules %s", modules_dir);
	}
	a.kernel = realpath(kernel, NULL);
	a.modules_dir = realpath(modules_dir, NULL);
	a.version = strdup("override");
	a.modules = calloc(s.n + 1, sizeof(char *));
	if (!a.kernel || !a.modules_dir || !a.version || !a.modules) {
		modset_release(&s);
		vm_assets_release(&a);
		return -ENOMEM;
	}
	for (size_t i = 0; i < s.n; i++) {
		const char *slash = strrchr(s.paths[i], '/');
		a.modules[i] = strdup(slash ? slash + 1 : s.paths[i]);
		if (!a.modules[i]) {
			modset_release(&s);
			vm_assets_release(&a);
			return -ENOMEM;
		}
		a.n_modules++;
	}
	modset_release(&s);
	*ret = a;
	return 0;
}

/* ---- the cache ---- */

int vm_assets_load_dir(const char *dir, struct vm_assets *ret)
{
	static const char *const keys[] = { "package", "kernel", "kernel_sha256", "modules", NULL };
	struct json_opts opts = JSON_OPTS_DEFAULT;
	_cleanup_free_ char *path = NULL;
	_cleanup_json_ json_t *o = NULL;
	struct vm_assets a = { 0 };
	const uint8_t *p;
	const char *s, *ksha;
	json_t *mods;
	size_t n;
	int r;

	if (asprintf(&path, "%s/manifest.json", dir) < 0) {
		return -ENOMEM;
	}
	r = map_file(path, MANIFEST_MAX, &p, &n);
	if (r < 0) {
		return r;
	}
	opts.max_bytes = MANIFEST_MAX;
	r = json_parse_strict(p, n, &opts, &o);
	(void)munmap((void *)p, n);
	if (r < 0) {
		return r;
	}
	r = json_only_keys(o, keys);
	if (r >= 0) {
		r = json_get_string(o, "kernel_sha256", &ksha);
	}
	if (r >= 0 && strlen(ksha) != 64) {
		r = -EBADMSG;
	}
	if (r >= 0) {
		r = json_get_string(o, "package", &s);
	}
	if (r >= 0) {
		r = json_get_array(o, "modules", &mods);
	}
	if (r >= 0 && json_array_size(mods) > VM_MAX_MODULES) {
		r = -E2BIG;
	}
	if (r < 0) {
		return r;
	}
	memcpy(a.kernel_sha256, ksha, 65);
	a.version = strdup(s);
	a.dir = strdup(dir);
	if (asprintf(&a.kernel, "%s/vmlinux", dir) < 0) {
		a.kernel = NULL;
	}
	if (asprintf(&a.modules_dir, "%s/modules", dir) < 0) {
		a.modules_dir = NULL;
	}
	a.modules = calloc(json_array_size(mods) + 1, sizeof(char *));
	if (!a.version || !a.dir || !a.kernel || !a.modules_dir || !a.modules) {
		vm_assets_release(&a);
		return -ENOMEM;
	}
	for (size_t i = 0; i < json_array_size(mods); i++) {
		json_t *m = json_array_get(mods, i);
		const char *file, *sha;
		char *mp = NULL, got[65];
		r = json_get_string(m, "file", &file);
		if (r >= 0) {
			r = json_get_string(m, "sha256", &sha);
		}
		if (r >= 0 && (strchr(file, '/') || file[0] == '.' || file[0] == '\0')) {
			r = -EBADMSG;
		}
		if (r >= 0 && asprintf(&mp, "%s/%s", a.modules_dir, file) < 0) {
			r = -ENOMEM;
		}
		if (r >= 0) {
			r = vm_file_sha256(mp, got);
			if (r >= 0 && strcmp(got, sha) != 0) {
				log_error("asset cache: %s does not match its manifest", mp);
				r = -EBADMSG;
			}
		}
		free(mp);
		if (r >= 0) {
			a.modules[i] = strdup(file);
			r = a.modules[i] ? 0 : -ENOMEM;
		}
		if (r < 0) {
			vm_assets_release(&a);
			return r;
		}
		a.n_modules++;
	}
	{
		char got[65];
		r = vm_file_sha256(a.kernel, got);
		if (r >= 0 && strcmp(got, a.kernel_sha256) != 0) {
			log_error("asset cache: %s does not match its manifest", a.kernel);
			r = -EBADMSG;
		}
	}
	if (r < 0) {
		vm_assets_release(&a);
		return r;
	}
	*ret = a;
	return 0;
}

static int capture_program(char *const argv[], char **ret, size_t *ret_n)
{
	char tmpl[] = "/tmp/tkbox-apt-XXXXXX";
	_cleanup_close_ int fd = mkostemp(tmpl, O_CLOEXEC);
	const uint8_t *p;
	size_t n;
	int r;

	if (fd < 0) {
		return -errno;
	}
	(void)unlink(tmpl);
	r = vm_run_program(argv, NULL, fd);
	if (r != 0) {
		return r < 0 ? r : -EIO;
	}
	{
		struct stat st;
		char *d;
		if (fstat(fd, &st) < 0) {
			return -errno;
		}
		if ((size_t)st.st_size > APT_OUTPUT_MAX) {
			return -E2BIG;
		}
		n = (size_t)st.st_size;
		d = malloc(n + 1);
		if (!d) {
			return -ENOMEM;
		}
		if (n > 0 && pread(fd, d, n, 0) != (ssize_t)n) {
			free(d);
			return -EIO;
		}
		d[n] = '\0';
		p = (const uint8_t *)d;
	}
	*ret = (char *)p;
	*ret_n = n;
	return 0;
}

static int extract_kernel(const char *vmlinuz, const char *out_path)
{
	const uint8_t *p;
	size_t n, off, len;
	_cleanup_free_ char *lz = NULL;
	_cleanup_close_ int out = -1;
	int r;

	r = map_file(vmlinuz, VM_KERNEL_MAX_SIZE, &p, &n);
	if (r < 0) {
		return log_error_errno(r, "reading %s", vmlinuz);
	}
	r = bzimage_lz4_payload(p, n, &off, &len);
	if (r < 0) {
		(void)munmap((void *)p, n);
		return log_error_errno(r, "%s: no LZ4 payload", vmlinuz);
	}
	if (asprintf(&lz, "%s.lz4", out_path) < 0) {
		(void)munmap((void *)p, n);
		return -ENOMEM;
	}
	r = vm_write_file(lz, p + off, len);
	(void)munmap((void *)p, n);
	if (r < 0) {
		return r;
	}
	out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out < 0) {
		return -errno;
	}
	{
		char *argv[] = { "lz4", "-dc", lz, NULL };
		r = vm_run_program(argv, NULL, out);
	}
	(void)unlink(lz);
	if (r != 0) {
		log_error("lz4 -dc failed (status %d): install Debian's lz4 package", r);
		return -EIO;
	}
	r = map_file(out_path, VM_KERNEL_MAX_SIZE, &p, &n);
	if (r < 0) {
		return r;
	}
	r = memcmp(p, "\177ELF", 4) == 0 ? 0 : -EBADMSG;
	(void)munmap((void *)p, n);
	return r;
}

/* Find boot/vmlinuz-* in the extracted package. */
static int find_vmlinuz(const char *root, char **ret)
{
	_cleanup_free_ char *boot = NULL;
	struct dirent *de;
	DIR *d;
	int r = -ENOENT;

	if (asprintf(&boot, "%s/boot", root) < 0) {
		return -ENOMEM;
	}
	d = opendir(boot);
	if (!d) {
		return -errno;
	}
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "vmlinuz-", 8) == 0) {
			r = asprintf(ret, "%s/%s", boot, de->d_name) < 0 ? -ENOMEM : 0;
			break;
		}
	}
	(void)closedir(d);
	return r;
}

static int fetch(const char *assets)
{
	_cleanup_free_ char *apt_out = NULL, *pkg = NULL, *deb = NULL, *xdir = NULL, *kdir = NULL, *tmpdir = NULL;
	_cleanup_free_ char *vmlinuz = NULL, *modroot = NULL, *kpath = NULL, *mdir = NULL;
	_cleanup_json_ json_t *man = NULL;
	struct modset s = { 0 };
	size_t n;
	char sha[65];
	int r;

	{
		char *argv[] = { "apt-cache", "depends", VM_ASSETS_META_PACKAGE, NULL };
		r = capture_program(argv, &apt_out, &n);
		if (r < 0) {
			return log_error_errno(r, "apt-cache depends " VM_ASSETS_META_PACKAGE);
		}
	}
	r = apt_depends_parse(apt_out, n, &pkg);
	if (r < 0) {
		return log_error_errno(r, "no kernel package named by apt-cache depends " VM_ASSETS_META_PACKAGE);
	}
	log_info("fetching %s with apt-get download into %s", pkg, assets);
	{
		char *argv[] = { "apt-get", "download", "-q", pkg, NULL };
		r = vm_run_program(argv, assets, -1);
		if (r != 0) {
			log_error("apt-get download %s failed (status %d)", pkg, r);
			return -EIO;
		}
	}
	/* apt names the file <pkg>_<version>_amd64.deb; find it. */
	{
		DIR *d = opendir(assets);
		struct dirent *de;
		size_t pl = strlen(pkg);
		if (!d) {
			return -errno;
		}
		while ((de = readdir(d))) {
			size_t l = strlen(de->d_name);
			if (strncmp(de->d_name, pkg, pl) == 0 && de->d_name[pl] == '_' && l > 4 &&
			    strcmp(de->d_name + l - 4, ".deb") == 0) {
				free(deb);
				if (asprintf(&deb, "%s/%s", assets, de->d_name) < 0) {
					deb = NULL;
				}
			}
		}
		(void)closedir(d);
		if (!deb) {
			return -ENOENT;
		}
	}
	if (asprintf(&xdir, "%s/.extract-XXXXXX", assets) < 0 || !mkdtemp(xdir)) {
		return -errno ? -errno : -ENOMEM;
	}
	{
		char *argv[] = { "dpkg-deb", "-x", deb, xdir, NULL };
		r = vm_run_program(argv, NULL, -1);
		if (r != 0) {
			log_error("dpkg-deb -x %s failed (status %d)", deb, r);
			r = -EIO;
			goto out;
		}
	}
	if (asprintf(&kdir, "%s/%s", assets, pkg) < 0 || asprintf(&tmpdir, "%s.tmp", kdir) < 0 ||
	    asprintf(&kpath, "%s/vmlinux", tmpdir) < 0 || asprintf(&mdir, "%s/modules", tmpdir) < 0 ||
	    asprintf(&modroot, "%s/lib/modules", xdir) < 0) {
		r = -ENOMEM;
		goto out;
	}
	(void)vm_rm_rf(tmpdir);
	if (mkdir(tmpdir, 0755) < 0 || mkdir(mdir, 0755) < 0) {
		r = -errno;
		goto out;
	}
	r = find_vmlinuz(xdir, &vmlinuz);
	if (r >= 0) {
		r = extract_kernel(vmlinuz, kpath);
	}
	if (r < 0) {
		goto out;
	}
	r = modset_build(&s, find_in_tree, modroot);
	if (r < 0) {
		goto out;
	}
	man = json_object();
	json_t *mods = json_array();
	if (!man || !mods || json_object_set_new(man, "modules", mods) < 0) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < s.n; i++) {
		_cleanup_free_ char *dst = NULL, *file = NULL;
		json_t *m;
		if (asprintf(&file, "%s.ko", s.names[i]) < 0 || asprintf(&dst, "%s/%s", mdir, file) < 0) {
			r = -ENOMEM;
			goto out;
		}
		r = copy_file(s.paths[i], dst, 0644);
		if (r >= 0) {
			r = vm_file_sha256(dst, sha);
		}
		if (r < 0) {
			goto out;
		}
		m = json_pack("{s:s,s:s}", "file", file, "sha256", sha);
		if (!m || json_array_append_new(mods, m) < 0) {
			r = -ENOMEM;
			goto out;
		}
	}
	r = vm_file_sha256(kpath, sha);
	if (r < 0) {
		goto out;
	}
	{
		const char *slash = strrchr(deb, '/');
		if (json_object_set_new(man, "package", json_string(slash + 1)) < 0 ||
		    json_object_set_new(man, "kernel", json_string("vmlinux")) < 0 ||
		    json_object_set_new(man, "kernel_sha256", json_string(sha)) < 0) {
			r = -ENOMEM;
			goto out;
		}
	}
	r = vm_assets_write_manifest(tmpdir, man);
	if (r < 0) {
		goto out;
	}
	(void)vm_rm_rf(kdir);
	if (rename(tmpdir, kdir) < 0) {
		r = -errno;
		goto out;
	}
	/* "current" names the kernel directory; replaced atomically. */
	r = vm_assets_point(assets, VM_ASSETS_CLOUD_PTR, pkg);
	if (r >= 0) {
		log_info("guest kernel %s cached in %s (kernel sha256 %s)", pkg, kdir, sha);
	}
out:
	modset_release(&s);
	if (tmpdir && r < 0) {
		(void)vm_rm_rf(tmpdir);
	}
	(void)vm_rm_rf(xdir);
	return r;
}

/*
 * The kernel directory a pointer file (`current`, `built`) names, loaded: 0, -ENOENT when there is no pointer, or why
 * the named directory is unusable (logged).
 */
static int load_pointed(const char *assets, const char *ptr, struct vm_assets *ret)
{
	_cleanup_free_ char *path = NULL, *name = NULL, *dir = NULL;
	size_t n = 0;
	int r;

	if (asprintf(&path, "%s/%s", assets, ptr) < 0) {
		return -ENOMEM;
	}
	r = io_read_file(AT_FDCWD, path, 255, 0, &name, &n);
	if (r == -ENOENT) {
		return r;
	}
	if (r < 0 || n == 0 || memchr(name, '/', n) || strlen(name) != n || name[0] == '.') {
		return log_error_errno(r < 0 ? r : -EBADMSG, "asset cache %s", path);
	}
	if (asprintf(&dir, "%s/%s", assets, name) < 0) {
		return -ENOMEM;
	}
	r = vm_assets_load_dir(dir, ret);
	if (r < 0) {
		log_error("asset cache %s unusable: %s", dir, tk_strerror(r));
	}
	return r;
}

int vm_kernel_choice(enum vm_kernel_choice *ret)
{
	const char *e = getenv(VM_KERNEL_ENV);

	if (!e || !*e) {
		*ret = VM_KERNEL_PREFER_BUILT;
	} else if (strcmp(e, "built") == 0) {
		*ret = VM_KERNEL_BUILT;
	} else if (strcmp(e, "cloud") == 0) {
		*ret = VM_KERNEL_CLOUD;
	} else {
		log_error("%s=%s: the guest kernel is `built` or `cloud` (unset: the built one when cached, else "
			  "the cloud one)",
			  VM_KERNEL_ENV, e);
		return -EINVAL;
	}
	return 0;
}

int vm_assets_ensure(const char *state_dir, bool allow_fetch, struct vm_assets *ret)
{
	_cleanup_free_ char *assets = NULL;
	enum vm_kernel_choice choice;
	int r;

	r = vm_kernel_choice(&choice);
	if (r < 0) {
		return r;
	}
	if (asprintf(&assets, "%s/images/assets", state_dir) < 0) {
		return -ENOMEM;
	}
	if (choice != VM_KERNEL_CLOUD) {
		r = load_pointed(assets, VM_ASSETS_BUILT_PTR, ret);
		if (r >= 0 || choice == VM_KERNEL_BUILT) {
			if (r == -ENOENT) {
				log_error("%s=built but no built guest kernel in %s: build it with `tkbox-vm assets "
					  "--build-kernel --state %s` (minutes; needs linux-source-6.1)",
					  VM_KERNEL_ENV, assets, state_dir);
			}
			return r;
		}
		/* A built kernel that is unusable was logged: the cloud kernel stands in. */
	}
	for (int attempt = 0; attempt < 2; attempt++) {
		r = load_pointed(assets, VM_ASSETS_CLOUD_PTR, ret);
		if (r >= 0) {
			return 0;
		}
		if (!allow_fetch || attempt > 0) {
			break;
		}
		r = io_mkdir_p(AT_FDCWD, assets, 0755);
		if (r < 0) {
			return log_error_errno(r, "creating %s", assets);
		}
		r = fetch(assets);
		if (r < 0) {
			log_error("fetching the guest kernel failed: %s", tk_strerror(r));
			break;
		}
	}
	log_error("no guest kernel in %s. Fetch it on a host with Debian apt access: `tkbox-vm assets --state %s` "
		  "(runs apt-get download $(apt-cache depends %s), needs dpkg-deb and lz4), or pass --kernel FILE "
		  "--modules DIR",
		  assets, state_dir, VM_ASSETS_META_PACKAGE);
	return -ENOENT;
}
