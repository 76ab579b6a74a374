/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "banned.h"
#include "image/ext4.h"
#include "io.h"
#include "log.h"
#include "path.h"

struct walk {
	ext4_meta_fn meta;
	void *ud;
	FILE *script;
	struct ext4_stats st;
	struct image_diag *diag;
};

/* Bytes of rel once quoted for debugfs ("/" prefix, '"' doubled, two quotes); -EINVAL on a control character. */
static int quoted_len(const char *rel, size_t *ret)
{
	size_t n = 3;
	for (const char *p = rel; *p; p++) {
		if ((unsigned char)*p < 0x20 || *p == 0x7f) {
			return -EINVAL;
		}
		n += *p == '"' ? 2 : 1;
	}
	*ret = n;
	return 0;
}

/*
 * Every name is checked, whether or not it needs a fix-up, so an image
 * builds or is refused the same way as root and as an ordinary user.
 */
static int check_name(struct walk *w, const char *rel)
{
	char q[LOG_QUOTE_BUFSIZE];
	size_t n;
	if (quoted_len(rel, &n) < 0) {
		image_diag_set(w->diag, "cannot build ext4: control character in name %s",
			       log_quote(rel, strlen(rel), q));
		return -EINVAL;
	}
	if (n + EXT4_DEBUGFS_CMD_RESERVE > EXT4_DEBUGFS_MAX_LINE) {
		image_diag_set(w->diag,
			       "cannot build ext4: a name takes %zu bytes quoted for debugfs, more than one line of "
			       "its script holds (EXT4_DEBUGFS_MAX_LINE, %d bytes with the command); shorten it in "
			       "the image: %s",
			       n, EXT4_DEBUGFS_MAX_LINE, log_quote(rel, strlen(rel), q));
		return -ENAMETOOLONG;
	}
	return 0;
}

static int quote_path(FILE *f, const char *rel)
{
	if (fputs("\"/", f) < 0) {
		return -EIO;
	}
	for (const char *p = rel; *p; p++) {
		if (*p == '"' && fputc('"', f) == EOF) {
			return -EIO;
		}
		if (fputc(*p, f) == EOF) {
			return -EIO;
		}
	}
	return fputc('"', f) == EOF ? -EIO : 0;
}

static int fixup(struct walk *w, const char *rel, const struct stat *st)
{
	struct flatten_meta m;
	static const char *const fields[] = { "uid", "gid", "mode" };
	uint32_t want[3], have[3];
	if (!w->meta(w->ud, rel, &m)) {
		return 0;
	}
	want[0] = m.uid;
	want[1] = m.gid;
	/* keep the type bits of what is on disk: the side table only changes permissions */
	want[2] = (uint32_t)(st->st_mode & S_IFMT) | (m.mode & 07777);
	have[0] = (uint32_t)st->st_uid;
	have[1] = (uint32_t)st->st_gid;
	have[2] = (uint32_t)st->st_mode;
	if (S_ISLNK(st->st_mode)) {
		want[2] = have[2];
	}
	if (rel[0] == '\0') {
		/* mkfs applies root_owner and its own mode to the root: always set what is wanted */
		have[0] = want[0] + 1;
		have[1] = want[1] + 1;
		have[2] = want[2] + 1;
	}
	for (size_t i = 0; i < 3; i++) {
		int r;
		if (want[i] == have[i]) {
			continue;
		}
		if (fputs("sif ", w->script) < 0) {
			return -EIO;
		}
		r = quote_path(w->script, rel);
		if (r < 0) {
			return r;
		}
		if (fprintf(w->script, i == 2 ? " %s 0%o\n" : " %s %u\n", fields[i], want[i]) < 0) {
			return -EIO;
		}
		w->st.fixups++;
	}
	return 0;
}

static uint64_t blocks_of(uint64_t bytes)
{
	/* data blocks plus roughly one extent/index block per 32 MiB */
	return (bytes + 4095) / 4096 + bytes / (32u << 20) + 1;
}

static int walk_dir(struct walk *w, int dfd, const char *rel, unsigned depth)
{
	DIR *d;
	struct dirent *de;
	int r = 0;

	if (depth > PATH_MAX_DEPTH) {
		return -ELOOP;
	}
	d = io_opendir_dup(dfd);
	if (!d) {
		return negative_errno();
	}
	while ((de = readdir(d))) {
		_cleanup_free_ char *crel = NULL;
		struct stat st;
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
			continue;
		}
		if (asprintf(&crel, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) < 0) {
			r = -ENOMEM;
			break;
		}
		if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			r = negative_errno();
			break;
		}
		w->st.inodes++;
		if (S_ISREG(st.st_mode)) {
			/* a hardlinked file counts once per name: an over-estimate, on the safe side */
			w->st.bytes += blocks_of((uint64_t)st.st_size) * 4096;
		} else if (S_ISLNK(st.st_mode)) {
			w->st.bytes += st.st_size > 59 ? 4096 : 0;
		} else if (S_ISDIR(st.st_mode)) {
			w->st.bytes += 4096;
		}
		r = check_name(w, crel);
		if (r >= 0) {
			r = fixup(w, crel, &st);
		}
		if (r < 0) {
			break;
		}
		if (S_ISDIR(st.st_mode)) {
			_cleanup_close_ int cfd =
				openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (cfd < 0) {
				r = negative_errno();
				break;
			}
			r = walk_dir(w, cfd, crel, depth + 1);
			if (r < 0) {
				break;
			}
		}
	}
	(void)closedir(d);
	return r;
}

static void diag_tool(struct image_diag *diag, const char *tool, int rc, const struct buf *err)
{
	char q[LOG_QUOTE_BUFSIZE];
	if (rc == -ETIME) {
		image_diag_set(diag,
			       "%s did not finish within %d s (EXT4_TOOL_TIMEOUT_S) and was killed; the image has too "
			       "many files or too large a directory for an ext4 root",
			       tool, EXT4_TOOL_TIMEOUT_S);
		return;
	}
	image_diag_set(diag, "%s failed (%s%d): %s", tool, rc < 0 ? "error " : "exit ", rc,
		       log_quote(buf_ptr(err), buf_len(err), q));
}

/* debugfs always exits 0 and prints its banner on stderr: any other stderr line is an error. */
static bool debugfs_failed(const struct buf *err)
{
	const char *p = (const char *)buf_ptr(err), *end = p + buf_len(err);
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (n > 0 && !(n >= 8 && strncmp(p, "debugfs ", 8) == 0)) {
			return true;
		}
		p += n + 1;
	}
	return false;
}

int ext4_build(const char *tree, const char *out, const char *label, ext4_meta_fn meta, void *userdata,
	       struct ext4_stats *ret_stats, struct image_diag *diag)
{
	static char *const envp[] = { "PATH=/usr/sbin:/sbin:/usr/bin:/bin", "LC_ALL=C", NULL };
	struct walk w = { .meta = meta, .ud = userdata, .diag = diag };
	_cleanup_close_ int tfd = -1, ofd = -1;
	_cleanup_free_ char *mkfs = NULL, *debugfs = NULL, *script = NULL, *inodes = NULL, *labelopt = NULL;
	_cleanup_buf_ struct buf *err = NULL;
	struct stat rst;
	uint64_t size;
	int r;

	r = image_find_program("mkfs.ext4", &mkfs);
	if (r < 0) {
		image_diag_set(diag, "mkfs.ext4 not found (install e2fsprogs)");
		return r;
	}
	r = image_find_program("debugfs", &debugfs);
	if (r < 0) {
		image_diag_set(diag, "debugfs not found (install e2fsprogs)");
		return r;
	}
	r = buf_new(64 << 10, 0, &err);
	if (r < 0) {
		return r;
	}
	tfd = open(tree, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (tfd < 0) {
		return negative_errno();
	}
	if (asprintf(&script, "%s.debugfs", out) < 0) {
		script = NULL;
		return -ENOMEM;
	}
	w.script = fopen(script, "wxe");
	if (!w.script) {
		return negative_errno();
	}
	if (fstat(tfd, &rst) < 0) {
		r = negative_errno();
		goto out;
	}
	r = fixup(&w, "", &rst);
	if (r >= 0) {
		r = walk_dir(&w, tfd, "", 0);
	}
	if (fclose(w.script) != 0 && r >= 0) {
		r = -EIO;
	}
	w.script = NULL;
	if (r < 0) {
		goto out;
	}
	/* inode tables take 256 bytes per inode; a 20% + 8 MiB margin covers metadata and directories */
	size = w.st.bytes + w.st.bytes / 5 + (w.st.inodes + 2048) * 256 + ((uint64_t)8 << 20);
	size = MAX(size, EXT4_MIN_BYTES);
	size = (size + 4095) & ~(uint64_t)4095;
	if (size > EXT4_MAX_BYTES) {
		image_diag_set(diag, "tree too large for an ext4 image (EXT4_MAX_BYTES)");
		r = -EFBIG;
		goto out;
	}
	w.st.image_bytes = size;
	ofd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (ofd < 0) {
		r = negative_errno();
		goto out;
	}
	if (ftruncate(ofd, (off_t)size) < 0) {
		r = negative_errno();
		goto out;
	}
	if (asprintf(&inodes, "%llu", (unsigned long long)(w.st.inodes + w.st.inodes / 8 + 1024)) < 0 ||
	    asprintf(&labelopt, "%s", label ? label : "tkbox") < 0) {
		r = -ENOMEM;
		goto out;
	}
	{
		char *argv[] = { mkfs,		 "-q",	      "-F",	"-t", "ext4",		"-b",
				 "4096",	 "-m",	      "0",	"-N", inodes,		"-O",
				 "^has_journal", "-L",	      labelopt, "-E", "root_owner=0:0", "-d",
				 (char *)tree,	 (char *)out, NULL };
		r = image_run_timed(argv, envp, NULL, NULL, err, EXT4_TOOL_TIMEOUT_S);
		if (r != 0) {
			diag_tool(diag, "mkfs.ext4", r, err);
			r = r < 0 ? r : -EIO;
			goto out;
		}
	}
	if (w.st.fixups > 0) {
		char *argv[] = { debugfs, "-w", "-f", script, (char *)out, NULL };
		buf_reset(err);
		r = image_run_timed(argv, envp, NULL, NULL, err, EXT4_TOOL_TIMEOUT_S);
		if (r != 0 || debugfs_failed(err)) {
			diag_tool(diag, "debugfs", r, err);
			r = r < 0 ? r : -EIO;
			goto out;
		}
	}
	r = 0;
out:
	if (w.script) {
		(void)fclose(w.script);
	}
	(void)unlink(script);
	if (r < 0 && ofd >= 0) {
		(void)unlink(out);
	}
	if (r >= 0 && ret_stats) {
		*ret_stats = w.st;
	}
	return r;
}
