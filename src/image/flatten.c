/* SPDX-License-Identifier: Apache-2.0 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <search.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "banned.h"
#include "image/flatten.h"
#include "log.h"
#include "path.h"

struct meta_node {
	char *path; /* first member: tsearch compares by it */
	struct flatten_meta m;
};

struct flatten {
	int rootfd;
	struct flatten_limits lim;
	void *meta; /* tsearch tree of struct meta_node */
	uint64_t entries;
	uint64_t bytes;
	unsigned layer;
	uid_t disk_uid;
};

static int meta_cmp(const void *a, const void *b)
{
	return strcmp(((const struct meta_node *)a)->path, ((const struct meta_node *)b)->path);
}

static void meta_node_free(void *p)
{
	struct meta_node *n = p;
	free(n->path);
	free(n);
}

static int meta_set(struct flatten *f, const char *rel, const struct flatten_meta *m)
{
	struct meta_node key = { .path = (char *)rel }, *n, **found;
	found = tfind(&key, &f->meta, meta_cmp);
	if (found) {
		(*found)->m = *m;
		return 0;
	}
	n = calloc(1, sizeof(*n));
	if (!n) {
		return -ENOMEM;
	}
	n->path = strdup(rel);
	n->m = *m;
	if (!n->path || !tsearch(n, &f->meta, meta_cmp)) {
		meta_node_free(n);
		return -ENOMEM;
	}
	return 0;
}

bool flatten_meta_get(struct flatten *f, const char *rel, struct flatten_meta *ret)
{
	struct meta_node key = { .path = (char *)rel }, **found = tfind(&key, &f->meta, meta_cmp);
	if (!found) {
		return false;
	}
	*ret = (*found)->m;
	return true;
}

uint64_t flatten_entries(const struct flatten *f)
{
	return f->entries;
}

uint64_t flatten_bytes(const struct flatten *f)
{
	return f->bytes;
}

int flatten_new(int rootfd, const struct flatten_limits *lim, struct flatten **ret)
{
	struct flatten *f = calloc(1, sizeof(*f));
	int r;
	if (!f) {
		return -ENOMEM;
	}
	f->rootfd = rootfd;
	f->lim = lim ? *lim : FLATTEN_LIMITS_DEFAULT;
	f->disk_uid = geteuid();
	/* the root of an image is root-owned 0755 unless a layer says otherwise */
	r = meta_set(f, "", &(struct flatten_meta){ .uid = 0, .gid = 0, .mode = S_IFDIR | 0755 });
	if (r < 0) {
		flatten_free(f);
		return r;
	}
	*ret = f;
	return 0;
}

void flatten_free(struct flatten *f)
{
	if (!f) {
		return;
	}
	tdestroy(f->meta, meta_node_free);
	free(f);
}

/*
 * Normalise a tar member name into a path_verify'd relative path ("" for the
 * root): strips leading "./" and one trailing '/'. Absolute names are refused
 * rather than re-rooted: no builder writes them, so they signal a hostile layer.
 */
static int normalize_name(const char *name, char **ret, const char **why)
{
	size_t n;
	char *s;
	int r;

	if (!name) {
		*why = "entry without a name";
		return -EBADMSG;
	}
	while (name[0] == '.' && name[1] == '/') {
		name += 2;
		while (*name == '/') {
			name++;
		}
	}
	if (name[0] == '/') {
		*why = "absolute path";
		return -EINVAL;
	}
	n = strlen(name);
	if (n > 0 && name[n - 1] == '/') {
		n--;
	}
	if (n == 0 || (n == 1 && name[0] == '.')) {
		*ret = strdup("");
		return *ret ? 0 : -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) {
			*why = "control character in name";
			return -EINVAL;
		}
	}
	r = path_verify(name, n);
	if (r < 0) {
		*why = r == -EINVAL ? "path escapes the root or is malformed (\"..\", \".\", empty segment)"
				    : "path too long or too deep";
		return r;
	}
	s = strndup(name, n);
	if (!s) {
		return -ENOMEM;
	}
	*ret = s;
	return 0;
}

/*
 * Open the directory rel beneath the root one component at a time with
 * O_NOFOLLOW, creating missing components when create is set (safe_openat
 * cannot create intermediate directories). A component that is a symlink or
 * not a directory is refused: writes never go through a link.
 */
static int open_dir(struct flatten *f, const char *rel, bool create, int *ret_fd, const char **why)
{
	_cleanup_free_ char *p = strdup(rel);
	_cleanup_close_ int fd = -1;
	char *save = NULL, *comp;
	int r;

	if (!p) {
		return -ENOMEM;
	}
	fd = fcntl(f->rootfd, F_DUPFD_CLOEXEC, 3);
	if (fd < 0) {
		return negative_errno();
	}
	if (rel[0] == '\0') {
		*ret_fd = steal_fd(fd);
		return 0;
	}
	for (comp = strtok_r(p, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
		int nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0 && errno == ENOENT && create) {
			size_t plen = (size_t)(comp - p) + strlen(comp);
			_cleanup_free_ char *prefix = strndup(rel, plen);
			if (!prefix) {
				return -ENOMEM;
			}
			if (mkdirat(fd, comp, 0755) < 0 && errno != EEXIST) {
				return negative_errno();
			}
			r = meta_set(f, prefix, &(struct flatten_meta){ .uid = 0, .gid = 0, .mode = S_IFDIR | 0755 });
			if (r < 0) {
				return r;
			}
			nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		if (nfd < 0) {
			struct stat st;
			r = negative_errno();
			if (fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
				*why = "path goes through a symbolic link";
				return -ELOOP;
			}
			if (r == -ENOTDIR) {
				*why = "a parent of this path is not a directory";
			}
			return r;
		}
		(void)close(fd);
		fd = nfd;
	}
	*ret_fd = steal_fd(fd);
	return 0;
}

static void split(const char *rel, char **ret_parent, const char **ret_base)
{
	const char *slash = strrchr(rel, '/');
	*ret_parent = slash ? strndup(rel, (size_t)(slash - rel)) : strdup("");
	*ret_base = slash ? slash + 1 : rel;
}

static struct archive *open_archive(void)
{
	struct archive *a = archive_read_new();
	if (!a) {
		return NULL;
	}
	/* only what OCI layers use: plain, gzip or zstd tar (and the empty layer) */
	if (archive_read_support_filter_gzip(a) < ARCHIVE_WARN || archive_read_support_filter_zstd(a) < ARCHIVE_WARN ||
	    archive_read_support_format_tar(a) != ARCHIVE_OK || archive_read_support_format_empty(a) != ARCHIVE_OK) {
		archive_read_free(a);
		return NULL;
	}
	return a;
}

struct source {
	int fd;
	const void *p;
	size_t n;
};

static int source_open(const struct source *s, struct archive **ret)
{
	struct archive *a = open_archive();
	int r;
	if (!a) {
		return -ENOMEM;
	}
	if (s->p) {
		r = archive_read_open_memory(a, s->p, s->n);
	} else {
		if (lseek(s->fd, 0, SEEK_SET) < 0) {
			archive_read_free(a);
			return negative_errno();
		}
		r = archive_read_open_fd(a, s->fd, 65536);
	}
	if (r != ARCHIVE_OK) {
		archive_read_free(a);
		return -EBADMSG;
	}
	*ret = a;
	return 0;
}

static void diag_entry(struct flatten *f, struct image_diag *diag, const char *name, const char *why)
{
	char q[LOG_QUOTE_BUFSIZE];
	image_diag_set(diag, "layer %u: entry %s: %s", f->layer,
		       log_quote(name ? name : "", name ? strlen(name) : 0, q), why);
}

static int next_header(struct archive *a, struct archive_entry **e, struct flatten *f, struct image_diag *diag)
{
	int r = archive_read_next_header(a, e);
	if (r == ARCHIVE_EOF) {
		return 0;
	}
	if (r == ARCHIVE_OK || r == ARCHIVE_WARN) {
		return 1;
	}
	image_diag_set(diag, "layer %u: unreadable archive: %s", f->layer,
		       archive_error_string(a) ? archive_error_string(a) : "?");
	return -EBADMSG;
}

/* Pass 1: whiteouts remove what lower layers put there; this layer's own entries come after. */
static int apply_whiteouts(struct flatten *f, const struct source *src, struct image_diag *diag)
{
	struct archive *a = NULL;
	struct archive_entry *e;
	int r = source_open(src, &a);
	if (r < 0) {
		image_diag_set(diag, "layer %u: not a tar, tar.gz or tar.zst archive", f->layer);
		return r;
	}
	for (;;) {
		_cleanup_free_ char *rel = NULL, *parent = NULL;
		_cleanup_close_ int pfd = -1;
		const char *base, *why = "malformed entry", *name;
		r = next_header(a, &e, f, diag);
		if (r <= 0) {
			break;
		}
		name = archive_entry_pathname(e);
		r = normalize_name(name, &rel, &why);
		if (r < 0) {
			diag_entry(f, diag, name, why);
			break;
		}
		/* checked here too: skipping a member that claims 1 TiB fails later with a less clear error */
		if (archive_entry_size_is_set(e) &&
		    (archive_entry_size(e) < 0 || (uint64_t)archive_entry_size(e) > f->lim.max_entry_size)) {
			diag_entry(f, diag, name,
				   "entry claims a size above the per-file cap (FLATTEN_MAX_ENTRY_SIZE)");
			r = -EFBIG;
			break;
		}
		split(rel, &parent, &base);
		if (!parent) {
			r = -ENOMEM;
			break;
		}
		if (strncmp(base, ".wh.", 4) != 0) {
			continue;
		}
		r = open_dir(f, parent, false, &pfd, &why);
		if (r == -ENOENT) {
			continue; /* nothing below to hide */
		}
		if (r < 0) {
			diag_entry(f, diag, name, why);
			break;
		}
		if (strcmp(base, ".wh..wh..opq") == 0) {
			DIR *d = fdopendir(fcntl(pfd, F_DUPFD_CLOEXEC, 3));
			struct dirent *de;
			if (!d) {
				r = negative_errno();
				break;
			}
			while ((de = readdir(d))) {
				if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
					continue;
				}
				r = image_rm_rf_at(pfd, de->d_name);
				if (r < 0) {
					break;
				}
			}
			(void)closedir(d);
			if (r < 0) {
				break;
			}
			continue;
		}
		if (strncmp(base, ".wh..wh.", 8) == 0) {
			continue; /* aufs bookkeeping (.wh..wh.plnk and friends): nothing to apply */
		}
		if (base[4] == '\0' || strcmp(base + 4, ".") == 0 || strcmp(base + 4, "..") == 0) {
			diag_entry(f, diag, name, "whiteout of an invalid name");
			r = -EINVAL;
			break;
		}
		r = image_rm_rf_at(pfd, base + 4);
		if (r < 0) {
			break;
		}
	}
	archive_read_free(a);
	return r;
}

static int write_data(struct flatten *f, struct archive *a, int fd, struct image_diag *diag, const char *name)
{
	uint8_t tmp[65536];
	uint64_t n = 0;
	for (;;) {
		la_ssize_t k = archive_read_data(a, tmp, sizeof(tmp));
		if (k < 0) {
			image_diag_set(diag, "layer %u: unreadable archive: %s", f->layer,
				       archive_error_string(a) ? archive_error_string(a) : "?");
			return -EBADMSG;
		}
		if (k == 0) {
			return 0;
		}
		n += (uint64_t)k;
		f->bytes += (uint64_t)k;
		if (n > f->lim.max_entry_size) {
			diag_entry(f, diag, name, "file larger than the per-file cap (FLATTEN_MAX_ENTRY_SIZE)");
			return -EFBIG;
		}
		if (f->bytes > f->lim.max_total_bytes) {
			diag_entry(f, diag, name, "image larger than the total cap (FLATTEN_MAX_TOTAL_BYTES)");
			return -EFBIG;
		}
		for (size_t off = 0; off < (size_t)k;) {
			ssize_t w = RETRY_EINTR(write(fd, tmp + off, (size_t)k - off));
			if (w < 0) {
				return negative_errno();
			}
			off += (size_t)w;
		}
	}
}

static int apply_entry(struct flatten *f, struct archive *a, struct archive_entry *e, struct image_diag *diag)
{
	_cleanup_free_ char *rel = NULL, *parent = NULL;
	_cleanup_close_ int pfd = -1;
	const char *name = archive_entry_pathname(e), *base, *why = "malformed entry", *hl = archive_entry_hardlink(e);
	mode_t type = archive_entry_filetype(e);
	struct flatten_meta m;
	struct stat st;
	int r;

	f->entries++;
	if (f->entries > f->lim.max_entries) {
		diag_entry(f, diag, name, "too many entries in the image (FLATTEN_MAX_ENTRIES)");
		return -E2BIG;
	}
	r = normalize_name(name, &rel, &why);
	if (r < 0) {
		diag_entry(f, diag, name, why);
		return r;
	}
	if (archive_entry_size_is_set(e) &&
	    (archive_entry_size(e) < 0 || (uint64_t)archive_entry_size(e) > f->lim.max_entry_size)) {
		diag_entry(f, diag, name, "entry claims a size above the per-file cap (FLATTEN_MAX_ENTRY_SIZE)");
		return -EFBIG;
	}
	if (archive_entry_uid(e) < 0 || archive_entry_uid(e) > UINT32_MAX - 1 || archive_entry_gid(e) < 0 ||
	    archive_entry_gid(e) > UINT32_MAX - 1) {
		diag_entry(f, diag, name, "owner out of range");
		return -ERANGE;
	}
	m = (struct flatten_meta){ .uid = (uint32_t)archive_entry_uid(e),
				   .gid = (uint32_t)archive_entry_gid(e),
				   .mode = (uint32_t)(type | (archive_entry_perm(e) & 07777)) };
	if (rel[0] == '\0') {
		if (!hl && type == AE_IFDIR) {
			return meta_set(f, "", &m);
		}
		diag_entry(f, diag, name, "the root is not a directory");
		return -EINVAL;
	}
	split(rel, &parent, &base);
	if (!parent) {
		return -ENOMEM;
	}
	if (strncmp(base, ".wh.", 4) == 0) {
		return 0; /* applied in the first pass */
	}
	if (!hl && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
		return 0; /* device nodes, FIFOs, sockets: dropped on purpose */
	}
	r = open_dir(f, parent, true, &pfd, &why);
	if (r < 0) {
		diag_entry(f, diag, name, why);
		return r;
	}
	if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (!hl && type == AE_IFDIR && S_ISDIR(st.st_mode)) {
			(void)fchmodat(pfd, base, (m.mode & 0777) | 0700, 0);
			return meta_set(f, rel, &m);
		}
		r = image_rm_rf_at(pfd, base);
		if (r < 0) {
			return r;
		}
	}
	if (hl) {
		_cleanup_free_ char *trel = NULL, *tparent = NULL;
		_cleanup_close_ int tfd = -1;
		const char *tbase;
		struct flatten_meta tm;
		r = normalize_name(hl, &trel, &why);
		if (r < 0 || trel[0] == '\0') {
			diag_entry(f, diag, name, r < 0 ? why : "hard link to the root");
			return r < 0 ? r : -EINVAL;
		}
		split(trel, &tparent, &tbase);
		if (!tparent) {
			return -ENOMEM;
		}
		r = open_dir(f, tparent, false, &tfd, &why);
		if (r < 0) {
			diag_entry(f, diag, name, r == -ENOENT ? "hard link to a missing file" : why);
			return r;
		}
		if (fstatat(tfd, tbase, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode)) {
			diag_entry(f, diag, name, "hard link to a missing file or a directory");
			return -EINVAL;
		}
		if (linkat(tfd, tbase, pfd, base, 0) < 0) {
			r = negative_errno();
			diag_entry(f, diag, name, "hard link failed");
			return r;
		}
		if (!flatten_meta_get(f, trel, &tm)) {
			tm = m;
		}
		return meta_set(f, rel, &tm);
	}
	switch (type) {
	case AE_IFDIR:
		if (mkdirat(pfd, base, (m.mode & 0777) | 0700) < 0) {
			return negative_errno();
		}
		break;
	case AE_IFLNK: {
		const char *target = archive_entry_symlink(e);
		/* the target is stored, never followed while building: any string is fine but an empty or huge one */
		if (!target || !*target || strlen(target) > PATH_MAX_LEN) {
			diag_entry(f, diag, name, "symbolic link with an empty or over-long target");
			return -EINVAL;
		}
		if (symlinkat(target, pfd, base) < 0) {
			return negative_errno();
		}
		m.mode = S_IFLNK | 0777;
		break;
	}
	case AE_IFREG: {
		_cleanup_close_ int fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		struct timespec ts[2];
		if (fd < 0) {
			return negative_errno();
		}
		r = write_data(f, a, fd, diag, name);
		if (r < 0) {
			return r;
		}
		/* on disk: never setuid/setgid, always readable by the builder; the real mode is in the side table */
		if (fchmod(fd, (m.mode & 0777) | 0600) < 0) {
			return negative_errno();
		}
		ts[0].tv_sec = ts[1].tv_sec = archive_entry_mtime(e);
		ts[0].tv_nsec = ts[1].tv_nsec = archive_entry_mtime_nsec(e);
		(void)futimens(fd, ts);
		break;
	}
	default:
		return 0;
	}
	return meta_set(f, rel, &m);
}

static int flatten_layer(struct flatten *f, const struct source *src, struct image_diag *diag)
{
	struct archive *a = NULL;
	struct archive_entry *e;
	int r;

	f->layer++;
	r = apply_whiteouts(f, src, diag);
	if (r < 0) {
		return r;
	}
	r = source_open(src, &a);
	if (r < 0) {
		return r;
	}
	for (;;) {
		r = next_header(a, &e, f, diag);
		if (r <= 0) {
			break;
		}
		r = apply_entry(f, a, e, diag);
		if (r < 0) {
			if (!diag || !diag->msg[0]) {
				const char *n = archive_entry_pathname(e);
				diag_entry(f, diag, n, tk_strerror(r));
			}
			break;
		}
	}
	archive_read_free(a);
	return r;
}

int flatten_layer_fd(struct flatten *f, int fd, struct image_diag *diag)
{
	struct source s = { .fd = fd };
	return flatten_layer(f, &s, diag);
}

int flatten_layer_mem(struct flatten *f, const void *p, size_t n, struct image_diag *diag)
{
	struct source s = { .fd = -1, .p = p ? p : "", .n = n };
	return flatten_layer(f, &s, diag);
}
