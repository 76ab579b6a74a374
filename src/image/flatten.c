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
#include "crypto.h"
#include "image/flatten.h"
#include "io.h"
#include "log.h"
#include "path.h"

struct meta_node {
	char *path; /* first member: tsearch compares by it */
	struct flatten_meta m;
	uint64_t children; /* a directory: names created in it (an over-count after whiteouts, on the safe side) */
};

/* What one side-table node costs besides its path: the node, the tsearch node, two malloc headers. */
#define META_NODE_OVERHEAD 64

struct flatten {
	int rootfd;
	struct flatten_limits lim;
	void *meta; /* tsearch tree of struct meta_node */
	uint64_t entries;
	uint64_t bytes;
	uint64_t table_bytes; /* the side table's memory (paths plus META_NODE_OVERHEAD each) */
	const char *cap_why; /* set when the side table or a directory refused to grow: points to cap_msg */
	char cap_msg[160];
	char last_diff_id[IMAGE_DIGEST_LEN + 1];
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
	if (f->table_bytes + strlen(rel) + 1 + META_NODE_OVERHEAD > f->lim.max_path_bytes) {
		(void)snprintf(f->cap_msg, sizeof(f->cap_msg),
			       "the image's paths take more than %llu MiB in the owner/mode table "
			       "(FLATTEN_MAX_PATH_BYTES)",
			       (unsigned long long)(f->lim.max_path_bytes >> 20));
		f->cap_why = f->cap_msg;
		return -E2BIG;
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
	f->table_bytes += strlen(rel) + 1 + META_NODE_OVERHEAD;
	return 0;
}

static struct meta_node *meta_node_get(struct flatten *f, const char *rel)
{
	struct meta_node key = { .path = (char *)rel }, **found = tfind(&key, &f->meta, meta_cmp);
	return found ? *found : NULL;
}

/* A name was created in the directory parent: refuse past the per-directory cap. */
static int dir_child_added(struct flatten *f, const char *parent)
{
	struct meta_node *n = meta_node_get(f, parent);
	if (!n) {
		return 0; /* every directory the flattener creates has a node; a missing one is not counted */
	}
	if (n->children + 1 > f->lim.max_dir_entries) {
		(void)snprintf(f->cap_msg, sizeof(f->cap_msg),
			       "more than %llu entries in one directory (FLATTEN_MAX_DIR_ENTRIES): mkfs.ext4 and "
			       "debugfs slow down quadratically with it",
			       (unsigned long long)f->lim.max_dir_entries);
		f->cap_why = f->cap_msg;
		return -E2BIG;
	}
	n->children++;
	return 0;
}

/* rel is a new, empty directory (its node may be a stale one of a removed tree). */
static void dir_fresh(struct flatten *f, const char *rel)
{
	struct meta_node *n = meta_node_get(f, rel);
	if (n) {
		n->children = 0;
	}
}

static void dir_child_removed(struct flatten *f, const char *parent)
{
	struct meta_node *n = meta_node_get(f, parent);
	if (n && n->children > 0) {
		n->children--;
	}
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
	/* a caller that sets only some caps gets the defaults for the others */
	if (!f->lim.max_dir_entries) {
		f->lim.max_dir_entries = FLATTEN_MAX_DIR_ENTRIES;
	}
	if (!f->lim.max_path_bytes) {
		f->lim.max_path_bytes = FLATTEN_MAX_PATH_BYTES;
	}
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
	/*
	 * "./x" is how tar writes relative names; "./" followed by more slashes
	 * (".//etc/x") is "/etc/x" with a "." in front, an absolute name in
	 * disguise, and refused like one.
	 */
	while (name[0] == '.' && name[1] == '/') {
		name += 2;
		if (name[0] == '/') {
			*why = "absolute path";
			return -EINVAL;
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
			dir_fresh(f, prefix);
			{
				const char *slash = strrchr(prefix, '/');
				if (slash) {
					prefix[slash - prefix] = '\0';
				} else {
					prefix[0] = '\0';
				}
				r = dir_child_added(f, prefix);
				if (r < 0) {
					*why = f->cap_why;
					return r;
				}
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

struct source {
	int fd;
	const void *p;
	size_t n;
};

/*
 * One read of a layer: an outer libarchive reader that only decompresses
 * (gzip, zstd or none, "raw" format), and the tar reader on top of it, fed
 * through reader_pull so that every uncompressed byte is hashed once, as it
 * goes by: the diff_id is checked without decompressing the layer again.
 */
struct reader {
	struct archive *outer;
	struct archive *tar;
	struct sha256_ctx *sha;
	uint64_t n; /* uncompressed bytes so far */
	uint64_t max;
	bool outer_eof;
	bool too_big;
	uint8_t buf[65536];
};

static la_ssize_t reader_pull(struct archive *a, void *ud, const void **ret)
{
	struct reader *rd = ud;
	la_ssize_t k;
	if (rd->outer_eof) {
		return 0;
	}
	k = archive_read_data(rd->outer, rd->buf, sizeof(rd->buf));
	if (k < 0) {
		archive_set_error(a, EIO, "%s",
				  archive_error_string(rd->outer) ? archive_error_string(rd->outer)
								  : "cannot decompress");
		return -1;
	}
	if (k == 0) {
		rd->outer_eof = true;
		return 0;
	}
	rd->n += (uint64_t)k;
	if (rd->n > rd->max) {
		rd->too_big = true;
		archive_set_error(a, EFBIG, "uncompressed layer larger than the cap");
		return -1;
	}
	if (sha256_update(rd->sha, rd->buf, (size_t)k) < 0) {
		archive_set_error(a, ENOMEM, "sha256");
		return -1;
	}
	*ret = rd->buf;
	return k;
}

static void reader_free(struct reader *rd)
{
	if (!rd) {
		return;
	}
	if (rd->tar) {
		archive_read_free(rd->tar);
	}
	if (rd->outer) {
		archive_read_free(rd->outer);
	}
	sha256_free(rd->sha);
	free(rd);
}

static int reader_open(struct flatten *f, const struct source *s, struct reader **ret)
{
	struct reader *rd = calloc(1, sizeof(*rd));
	int r;
	if (!rd) {
		return -ENOMEM;
	}
	rd->max = f->lim.max_total_bytes + FLATTEN_MAX_TAR_OVERHEAD;
	r = sha256_new(&rd->sha);
	if (r < 0) {
		goto fail;
	}
	rd->outer = archive_read_new();
	rd->tar = archive_read_new();
	if (!rd->outer || !rd->tar) {
		r = -ENOMEM;
		goto fail;
	}
	/* only what OCI layers use: plain, gzip or zstd tar (and the empty layer) */
	if (archive_read_support_filter_gzip(rd->outer) < ARCHIVE_WARN ||
	    archive_read_support_filter_zstd(rd->outer) < ARCHIVE_WARN ||
	    archive_read_support_format_raw(rd->outer) != ARCHIVE_OK ||
	    archive_read_support_format_empty(rd->outer) != ARCHIVE_OK ||
	    archive_read_support_format_tar(rd->tar) != ARCHIVE_OK ||
	    archive_read_support_format_empty(rd->tar) != ARCHIVE_OK) {
		r = -ENOMEM;
		goto fail;
	}
	if (s->p) {
		r = archive_read_open_memory(rd->outer, s->p, s->n);
	} else {
		if (lseek(s->fd, 0, SEEK_SET) < 0) {
			r = negative_errno();
			goto fail;
		}
		r = archive_read_open_fd(rd->outer, s->fd, 65536);
	}
	if (r != ARCHIVE_OK) {
		r = -EBADMSG;
		goto fail;
	}
	{
		struct archive_entry *e;
		int ar = archive_read_next_header(rd->outer, &e);
		if (ar == ARCHIVE_EOF) {
			rd->outer_eof = true; /* a zero-byte layer */
		} else if (ar != ARCHIVE_OK && ar != ARCHIVE_WARN) {
			r = -EBADMSG;
			goto fail;
		}
	}
	if (archive_read_open(rd->tar, rd, NULL, reader_pull, NULL) != ARCHIVE_OK) {
		r = rd->too_big ? -EFBIG : -EBADMSG;
		goto fail;
	}
	*ret = rd;
	return 0;
fail:
	reader_free(rd);
	return r;
}

/*
 * After the tar reader stopped: hash what follows its end-of-archive blocks
 * (the diff_id covers the whole uncompressed stream) and compare. expect
 * NULL: not checked.
 */
static int reader_verify(struct flatten *f, struct reader *rd, const char *expect, struct image_diag *diag)
{
	const void *p;
	uint8_t md[SHA256_LEN];
	char got[IMAGE_DIGEST_LEN + 1];
	la_ssize_t k;
	int r;

	while ((k = reader_pull(rd->tar, rd, &p)) > 0) {
	}
	if (k < 0) {
		if (rd->too_big) {
			image_diag_set(diag,
				       "layer %u: uncompressed stream larger than the total cap plus tar overhead "
				       "(FLATTEN_MAX_TOTAL_BYTES + FLATTEN_MAX_TAR_OVERHEAD)",
				       f->layer);
			return -EFBIG;
		}
		image_diag_set(diag, "layer %u: unreadable archive: %s", f->layer,
			       archive_error_string(rd->tar) ? archive_error_string(rd->tar) : "?");
		return -EBADMSG;
	}
	r = sha256_final(rd->sha, md);
	if (r < 0) {
		return r;
	}
	memcpy(got, "sha256:", 7);
	sha256_digest_hex(md, got + 7);
	if (expect && strcmp(expect, got) != 0) {
		image_diag_set(diag,
			       "layer %u: its uncompressed content is %s but the image config's rootfs.diff_ids[%u] "
			       "is %s: the layer does not belong to this image (refused, nothing cached)",
			       f->layer, got, f->layer - 1, expect);
		return -EBADMSG;
	}
	memcpy(f->last_diff_id, got, sizeof(got));
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
static int apply_whiteouts(struct flatten *f, const struct source *src, const char *diff_id, struct image_diag *diag)
{
	struct reader *rd = NULL;
	struct archive *a;
	struct archive_entry *e;
	int r = reader_open(f, src, &rd);
	if (r < 0) {
		image_diag_set(diag, "layer %u: not a tar, tar.gz or tar.zst archive", f->layer);
		return r;
	}
	a = rd->tar;
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
			DIR *d = io_opendir_dup(pfd);
			dir_fresh(f, parent);
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
		{
			struct stat st;
			if (fstatat(pfd, base + 4, &st, AT_SYMLINK_NOFOLLOW) == 0) {
				dir_child_removed(f, parent);
			}
		}
		r = image_rm_rf_at(pfd, base + 4);
		if (r < 0) {
			break;
		}
	}
	/* the whole layer was read: its digest is known before any of its entries is written */
	if (r == 0) {
		r = reader_verify(f, rd, diff_id, diag);
	}
	reader_free(rd);
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
	} else {
		r = dir_child_added(f, parent);
		if (r < 0) {
			diag_entry(f, diag, name, f->cap_why);
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
	r = meta_set(f, rel, &m);
	if (r == 0 && type == AE_IFDIR) {
		dir_fresh(f, rel);
	}
	return r;
}

static int flatten_layer(struct flatten *f, const struct source *src, const char *diff_id, struct image_diag *diag)
{
	struct reader *rd = NULL;
	struct archive *a;
	struct archive_entry *e;
	int r;

	f->layer++;
	f->cap_why = NULL;
	r = apply_whiteouts(f, src, diff_id, diag);
	if (r < 0) {
		return r;
	}
	r = reader_open(f, src, &rd);
	if (r < 0) {
		image_diag_set(diag, "layer %u: not a tar, tar.gz or tar.zst archive", f->layer);
		return r;
	}
	a = rd->tar;
	for (;;) {
		r = next_header(a, &e, f, diag);
		if (r <= 0) {
			break;
		}
		r = apply_entry(f, a, e, diag);
		if (r < 0) {
			if (!diag || !diag->msg[0]) {
				const char *n = archive_entry_pathname(e);
				diag_entry(f, diag, n, f->cap_why ? f->cap_why : tk_strerror(r));
			}
			break;
		}
	}
	/* read again for the entries: checked again, so the bytes written are the bytes verified */
	if (r == 0) {
		r = reader_verify(f, rd, diff_id, diag);
	}
	reader_free(rd);
	return r;
}

int flatten_layer_fd(struct flatten *f, int fd, const char *diff_id, struct image_diag *diag)
{
	struct source s = { .fd = fd };
	return flatten_layer(f, &s, diff_id, diag);
}

int flatten_layer_mem(struct flatten *f, const void *p, size_t n, const char *diff_id, struct image_diag *diag)
{
	struct source s = { .fd = -1, .p = p ? p : "", .n = n };
	return flatten_layer(f, &s, diff_id, diag);
}

const char *flatten_last_diff_id(const struct flatten *f)
{
	return f->last_diff_id;
}
