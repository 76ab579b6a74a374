/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The guest's patch producer (guest/diff.h): a walk of the workspace
 * overlay's upper layer against its lower one, and git's patch format written
 * by hand (the format of git's diff.c, quote.c and base85.c, read, not
 * copied). Runs in a child of PID 1 (guest/agent.c), so it may take its time.
 */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <zlib.h>

#include "banned.h"
#include "guest/diff.h"
#include "guest/sha1.h"
#include "io.h"
#include "patch/patch.h"
#include "path.h"
#include "vmm/agent-proto.h"

#define NULL_OID "0000000000000000000000000000000000000000"
#define BINARY_PROBE 8000 /* git's buffer_is_binary looks this far for a NUL */
#define CONTEXT 3
#define FUNC_MAX 80 /* git's func_line buffer */

enum kind { K_NONE = 0, K_REG, K_LNK, K_DIR, K_OTHER };

struct side {
	enum kind k;
	uint32_t mode;
	uint8_t *data;
	size_t len;
	char oid[41];
};

struct walk {
	struct guest_diff *d;
	char path[PATH_MAX_LEN + 2];
	size_t plen;
	char *diag;
	size_t diag_size;
};

/* ---- results ---- */

void guest_diff_release(struct guest_diff *d)
{
	if (!d) {
		return;
	}
	buf_release(&d->body);
	for (size_t i = 0; i < d->n_sec; i++) {
		free(d->sec[i].path);
	}
	free(d->sec);
	for (size_t i = 0; i < d->n_notices; i++) {
		free(d->notices[i].path);
		free(d->notices[i].why);
	}
	free(d->notices);
	*d = (struct guest_diff){ 0 };
}

static bool needs_quote(uint8_t c)
{
	return c < 0x20 || c == 0x7f || c == '"' || c == '\\' || c >= 0x80;
}

/* git's quote_c_style of prefix+name: as is, or in double quotes with C escapes and octal. */
static int put_quoted(struct buf *b, const char *prefix, const char *name, size_t n)
{
	static const char esc[] = {
		['\a'] = 'a', ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\v'] = 'v', ['\f'] = 'f', ['\r'] = 'r'
	};
	bool q = false;
	int r;

	for (size_t i = 0; i < n; i++) {
		q |= needs_quote((uint8_t)name[i]);
	}
	if (!q) {
		r = buf_put(b, prefix, strlen(prefix));
		return r < 0 ? r : buf_put(b, name, n);
	}
	r = buf_putf(b, "\"%s", prefix);
	for (size_t i = 0; r >= 0 && i < n; i++) {
		uint8_t c = (uint8_t)name[i];
		if (!needs_quote(c)) {
			r = buf_put_u8(b, c);
		} else if (c == '"' || c == '\\') {
			r = buf_putf(b, "\\%c", c);
		} else if (c < sizeof(esc) && esc[c]) {
			r = buf_putf(b, "\\%c", esc[c]);
		} else {
			r = buf_putf(b, "\\%03o", c);
		}
	}
	return r < 0 ? r : buf_put_u8(b, '"');
}

static char *quoted_dup(const char *name, size_t n)
{
	struct buf b;
	char *s = NULL;

	if (buf_init(&b, PATCH_MAX_NOTICE, 0) < 0) {
		return NULL;
	}
	if (put_quoted(&b, "", name, n) < 0) {
		/* Over the notice cap: the start of the name, said to be cut. */
		buf_reset(&b);
		(void)put_quoted(&b, "", name, MIN(n, (size_t)PATCH_MAX_NOTICE / 8));
		(void)buf_put(&b, "...", 3);
	}
	(void)buf_dup_cstring(&b, &s);
	buf_release(&b);
	return s;
}

/* A notice for w->path (plus name when not NULL); past the cap, the last one counts the rest. */
static int notice(struct walk *w, const char *name, const char *why)
{
	struct guest_diff *d = w->d;
	struct guest_diff_notice *n;
	char path[PATH_MAX_LEN + 2 + NAME_MAX + 1];
	int len = snprintf(path, sizeof(path), "%.*s%s%s", (int)w->plen, w->path, w->plen && name ? "/" : "",
			   name ? name : "");

	if (d->n_notices == PATCH_MAX_NOTICES) {
		d->n_dropped++;
		return 0;
	}
	if (!d->notices) {
		d->notices = calloc(PATCH_MAX_NOTICES, sizeof(*d->notices));
		if (!d->notices) {
			return -ENOMEM;
		}
	}
	n = &d->notices[d->n_notices];
	n->path = quoted_dup(path, len < 0 ? 0 : MIN((size_t)len, sizeof(path) - 1));
	n->why = strdup(why);
	if (!n->path || !n->why) {
		free(n->path);
		free(n->why);
		*n = (struct guest_diff_notice){ 0 };
		return -ENOMEM;
	}
	d->n_notices++;
	return 0;
}

static int fail(struct walk *w, int r, const char *msg)
{
	(void)snprintf(w->diag, w->diag_size, "%s", msg);
	return r;
}

/* ---- text: lines, a bounded Myers, hunks as git's xdiff writes them ---- */

struct line {
	const uint8_t *p;
	size_t n; /* with its '\n' when it has one */
	uint64_t h;
};

struct lines {
	struct line *v;
	size_t n;
	uint8_t *chg; /* per line: deleted (old) / inserted (new) */
};

static void lines_release(struct lines *l)
{
	free(l->v);
	free(l->chg);
	*l = (struct lines){ 0 };
}

static int lines_split(const uint8_t *p, size_t n, struct lines *ret)
{
	size_t count = 0, k = 0;

	for (size_t i = 0; i < n; i++) {
		count += p[i] == '\n';
	}
	count += n > 0 && p[n - 1] != '\n';
	ret->v = calloc(count + 1, sizeof(*ret->v));
	ret->chg = calloc(count + 1, 1);
	if (!ret->v || !ret->chg) {
		lines_release(ret);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; k++) {
		const uint8_t *nl = memchr(p + i, '\n', n - i);
		size_t len = nl ? (size_t)(nl - (p + i)) + 1 : n - i;
		uint64_t h = 1469598103934665603ull;
		for (size_t j = 0; j < len; j++) {
			h = (h ^ p[i + j]) * 1099511628211ull;
		}
		ret->v[k] = (struct line){ .p = p + i, .n = len, .h = h };
		i += len;
	}
	ret->n = count;
	return 0;
}

static bool line_eq(const struct line *a, const struct line *b)
{
	return a->h == b->h && a->n == b->n && memcmp(a->p, b->p, a->n) == 0;
}

/* Mark the changed lines of a[0..n) vs b[0..m) through the Myers trace saved in hist; walks back from (n, m). */
static void myers_back(const int *hist, int dend, struct lines *a, size_t ao, struct lines *b, size_t bo, int n, int m)
{
	int x = n, y = m;

	for (int d = dend; d > 0; d--) {
		/* Round d - 1 saved v[-(d-1)..d-1] at hist + (d-1)^2: index it by k. */
		const int *v = hist + (size_t)(d - 1) * (size_t)(d - 1) + (d - 1);
		int k = x - y, pk, px;
		bool down = k == -d || (k != d && v[k - 1] < v[k + 1]);
		pk = down ? k + 1 : k - 1;
		px = v[pk];
		if (down) {
			b->chg[bo + (size_t)(px - pk)] = 1;
		} else {
			a->chg[ao + (size_t)px] = 1;
		}
		x = px;
		y = px - pk;
	}
}

/* Myers on the middle a[ao..ao+n) / b[bo..bo+m); 0 done, -E2BIG past GUEST_DIFF_MAX_COST. */
static int myers(struct lines *a, size_t ao, int n, struct lines *b, size_t bo, int m)
{
	int dmax = MIN(n + m, GUEST_DIFF_MAX_COST);
	_cleanup_free_ int *vbuf = calloc((size_t)(2 * dmax + 3), sizeof(int));
	_cleanup_free_ int *hist = calloc((size_t)(dmax + 1) * (size_t)(dmax + 1), sizeof(int));
	int *v;

	if (!vbuf || !hist) {
		return -ENOMEM;
	}
	v = vbuf + dmax + 1;
	for (int d = 0; d <= dmax; d++) {
		for (int k = -d; k <= d; k += 2) {
			int x = (k == -d || (k != d && v[k - 1] < v[k + 1])) ? v[k + 1] : v[k - 1] + 1;
			int y = x - k;
			while (x < n && y < m && line_eq(&a->v[ao + (size_t)x], &b->v[bo + (size_t)y])) {
				x++;
				y++;
			}
			v[k] = x;
			if (x >= n && y >= m) {
				myers_back(hist, d, a, ao, b, bo, n, m);
				return 0;
			}
		}
		memcpy(hist + (size_t)d * (size_t)d, v - d, (size_t)(2 * d + 1) * sizeof(int));
	}
	return -E2BIG;
}

/* Fill a->chg and b->chg: common ends trimmed (as xdiff does), Myers in between, the whole middle past the cap. */
static int mark_changes(struct lines *a, struct lines *b)
{
	size_t pre = 0, suf = 0, n, m;
	int r;

	while (pre < a->n && pre < b->n && line_eq(&a->v[pre], &b->v[pre])) {
		pre++;
	}
	while (suf < a->n - pre && suf < b->n - pre && line_eq(&a->v[a->n - 1 - suf], &b->v[b->n - 1 - suf])) {
		suf++;
	}
	n = a->n - pre - suf;
	m = b->n - pre - suf;
	if (n == 0 || m == 0 || n + m > (size_t)INT32_MAX / 4) {
		r = -E2BIG;
	} else {
		r = myers(a, pre, (int)n, b, pre, (int)m);
	}
	if (r == -E2BIG) {
		memset(a->chg + pre, 1, n);
		memset(b->chg + pre, 1, m);
		r = 0;
	}
	return r;
}

/* One change: old lines [i0, i1) replaced by new lines [j0, j1). */
struct change {
	size_t i0, i1, j0, j1;
};

static int changes_collect(const struct lines *a, const struct lines *b, struct change **ret, size_t *ret_n)
{
	size_t i = 0, j = 0, n = 0, cap = 0;
	struct change *v = NULL;

	while (i < a->n || j < b->n) {
		struct change c;
		if (!((i < a->n && a->chg[i]) || (j < b->n && b->chg[j]))) {
			i++;
			j++;
			continue;
		}
		c.i0 = i;
		c.j0 = j;
		while (i < a->n && a->chg[i]) {
			i++;
		}
		while (j < b->n && b->chg[j]) {
			j++;
		}
		c.i1 = i;
		c.j1 = j;
		if (n == cap) {
			struct change *nv = reallocarray(v, cap ? cap * 2 : 16, sizeof(*v));
			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
			cap = cap ? cap * 2 : 16;
		}
		v[n++] = c;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

/* git's default funcname: the nearest line above the hunk starting with a letter, '_' or '$', trimmed, cut at 80. */
static void func_line(const struct lines *a, long start, long limit, char *func, size_t *func_len)
{
	for (long l = start; l > limit && l >= 0; l--) {
		const struct line *ln = &a->v[l];
		size_t len = MIN(ln->n, (size_t)FUNC_MAX);
		if (ln->n == 0 || !(isalpha(ln->p[0]) || ln->p[0] == '_' || ln->p[0] == '$')) {
			continue;
		}
		while (len > 0 && isspace(ln->p[len - 1])) {
			len--;
		}
		memcpy(func, ln->p, len);
		*func_len = len;
		return;
	}
}

static int put_line(struct buf *b, char mark, const struct line *l)
{
	int r = buf_put_u8(b, (uint8_t)mark);

	if (r >= 0) {
		r = buf_put(b, l->p, l->n);
	}
	if (r >= 0 && (l->n == 0 || l->p[l->n - 1] != '\n')) {
		static const char nonl[] = "\n\\ No newline at end of file\n";
		r = buf_put(b, nonl, sizeof(nonl) - 1);
	}
	return r;
}

static int put_range(struct buf *b, char sign, size_t s, size_t c)
{
	/* xdiff: the start is the line before when the range is empty; ",1" is left out. */
	size_t start = c ? s + 1 : s;
	return c == 1 ? buf_putf(b, " %c%zu", sign, start) : buf_putf(b, " %c%zu,%zu", sign, start, c);
}

/* The hunk of changes v[0..n): context around them, then each change's '-' and '+' lines. */
static int put_hunk(struct buf *b, const struct lines *a, const struct lines *nb, const struct change *v, size_t n,
		    char *func, size_t *func_len, long *func_prev)
{
	size_t s1 = v[0].i0 > CONTEXT ? v[0].i0 - CONTEXT : 0, s2 = v[0].j0 - (v[0].i0 - s1);
	size_t e1 = MIN(a->n, v[n - 1].i1 + CONTEXT), e2 = v[n - 1].j1 + (e1 - v[n - 1].i1);
	size_t i = s1;
	int r;

	func_line(a, (long)s1 - 1, *func_prev, func, func_len);
	*func_prev = (long)s1 - 1;
	r = buf_put(b, "@@", 2);
	r = r < 0 ? r : put_range(b, '-', s1, e1 - s1);
	r = r < 0 ? r : put_range(b, '+', s2, e2 - s2);
	r = r < 0 ? r : buf_put(b, " @@", 3);
	if (r >= 0 && *func_len > 0) {
		r = buf_put_u8(b, ' ');
		r = r < 0 ? r : buf_put(b, func, *func_len);
	}
	r = r < 0 ? r : buf_put_u8(b, '\n');
	for (size_t k = 0; r >= 0 && k < n; k++) {
		for (; r >= 0 && i < v[k].i0; i++) {
			r = put_line(b, ' ', &a->v[i]);
		}
		for (; r >= 0 && i < v[k].i1; i++) {
			r = put_line(b, '-', &a->v[i]);
		}
		for (size_t j = v[k].j0; r >= 0 && j < v[k].j1; j++) {
			r = put_line(b, '+', &nb->v[j]);
		}
	}
	for (; r >= 0 && i < e1; i++) {
		r = put_line(b, ' ', &a->v[i]);
	}
	return r;
}

/* The hunks of a text change: changes closer than 2 * CONTEXT + 1 lines share one (xdiff's rule). */
static int put_text_body(struct buf *b, const struct side *o, const struct side *nw)
{
	struct lines a = { 0 }, nb = { 0 };
	_cleanup_free_ struct change *v = NULL;
	char func[FUNC_MAX];
	size_t n = 0, func_len = 0;
	long func_prev = -1;
	int r;

	r = lines_split(o->data, o->len, &a);
	r = r < 0 ? r : lines_split(nw->data, nw->len, &nb);
	r = r < 0 ? r : mark_changes(&a, &nb);
	r = r < 0 ? r : changes_collect(&a, &nb, &v, &n);
	for (size_t s = 0; r >= 0 && s < n;) {
		size_t e = s + 1;
		while (e < n && v[e].i0 - v[e - 1].i1 <= 2 * CONTEXT) {
			e++;
		}
		r = put_hunk(b, &a, &nb, v + s, e - s, func, &func_len, &func_prev);
		s = e;
	}
	lines_release(&a);
	lines_release(&nb);
	return r;
}

/* ---- binary: a forward literal hunk, zlib-deflated, in git's base85 lines ---- */

static int put_b85_line(struct buf *b, const uint8_t *p, size_t n)
{
	static const char b85[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				  "abcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";
	char line[1 + 13 * 5 + 1];
	size_t k = 0;

	line[k++] = n <= 26 ? (char)('A' + n - 1) : (char)('a' + n - 27);
	for (size_t i = 0; i < n; i += 4) {
		uint32_t acc = 0;
		for (size_t j = 0; j < 4; j++) {
			acc = (acc << 8) | (i + j < n ? p[i + j] : 0);
		}
		for (int c = 4; c >= 0; c--) {
			line[k + (size_t)c] = b85[acc % 85];
			acc /= 85;
		}
		k += 5;
	}
	line[k++] = '\n';
	return buf_put(b, line, k);
}

static int put_binary_body(struct buf *b, const struct side *nw)
{
	uLongf zlen = compressBound((uLong)nw->len);
	_cleanup_free_ uint8_t *z = malloc(zlen);
	int r;

	if (!z) {
		return -ENOMEM;
	}
	if (compress2(z, &zlen, nw->len ? nw->data : (const uint8_t *)"", (uLong)nw->len, Z_DEFAULT_COMPRESSION) !=
	    Z_OK) {
		return -ENOMEM;
	}
	r = buf_putf(b, "GIT binary patch\nliteral %zu\n", nw->len);
	for (size_t i = 0; r >= 0 && i < zlen; i += 52) {
		r = put_b85_line(b, z + i, MIN((size_t)52, zlen - i));
	}
	return r < 0 ? r : buf_put_u8(b, '\n');
}

static bool is_binary(const struct side *s)
{
	return s->k == K_REG && memchr(s->data ? s->data : (const uint8_t *)"", 0, MIN(s->len, (size_t)BINARY_PROBE));
}

/* ---- one section ---- */

static int put_label(struct buf *b, const char *what, const char *prefix, const char *path, size_t plen, bool null)
{
	size_t start = buf_len(b);
	int r = buf_put(b, what, 4);

	if (r >= 0) {
		r = null ? buf_put(b, "/dev/null", 9) : put_quoted(b, prefix, path, plen);
	}
	/* git ends a name with a space with a TAB (diff.c, DIFF_SYMBOL_FILEPAIR_*). */
	if (r >= 0 && memchr(buf_ptr(b) + start + 4, ' ', buf_len(b) - start - 4)) {
		r = buf_put_u8(b, '\t');
	}
	return r < 0 ? r : buf_put_u8(b, '\n');
}

static int put_header(struct buf *b, const char *path, size_t plen, const struct side *o, const struct side *nw)
{
	int r = buf_put(b, "diff --git ", 11);

	r = r < 0 ? r : put_quoted(b, "a/", path, plen);
	r = r < 0 ? r : buf_put_u8(b, ' ');
	r = r < 0 ? r : put_quoted(b, "b/", path, plen);
	r = r < 0 ? r : buf_put_u8(b, '\n');
	if (r >= 0 && o->k == K_NONE) {
		r = buf_putf(b, "new file mode %06o\n", nw->mode);
	} else if (r >= 0 && nw->k == K_NONE) {
		r = buf_putf(b, "deleted file mode %06o\n", o->mode);
	} else if (r >= 0 && o->mode != nw->mode) {
		r = buf_putf(b, "old mode %06o\nnew mode %06o\n", o->mode, nw->mode);
	}
	if (r >= 0 && strcmp(o->oid, nw->oid) != 0) {
		r = buf_putf(b, "index %s..%s", o->oid, nw->oid);
		if (r >= 0 && o->k != K_NONE && nw->k != K_NONE && o->mode == nw->mode) {
			r = buf_putf(b, " %06o", o->mode);
		}
		r = r < 0 ? r : buf_put_u8(b, '\n');
	}
	return r;
}

static int put_section_bytes(struct buf *b, const char *path, size_t plen, const struct side *o, const struct side *nw)
{
	int r = put_header(b, path, plen, o, nw);

	if (r < 0 || strcmp(o->oid, nw->oid) == 0) {
		return r;
	}
	if (is_binary(o) || is_binary(nw)) {
		return put_binary_body(b, nw);
	}
	if (o->len == 0 && nw->len == 0) {
		return 0; /* an empty file made or removed: git writes the header only */
	}
	r = put_label(b, "--- ", "a/", path, plen, o->k == K_NONE);
	r = r < 0 ? r : put_label(b, "+++ ", "b/", path, plen, nw->k == K_NONE);
	return r < 0 ? r : put_text_body(b, o, nw);
}

static void side_oid(struct side *s)
{
	if (s->k == K_NONE) {
		memcpy(s->oid, NULL_OID, sizeof(s->oid));
	} else {
		sha1_git_blob_hex(s->data ? s->data : (const uint8_t *)"", s->len, s->oid);
	}
}

static int add_section(struct walk *w, struct side *o, struct side *nw)
{
	struct guest_diff *d = w->d;
	size_t off = buf_len(&d->body);
	char msg[256];
	int r;

	if (d->n_sec == PATCH_MAX_FILES) {
		(void)snprintf(msg, sizeof(msg),
			       "the patch of /workspace has more than PATCH_MAX_FILES (%d) files; change fewer files "
			       "in one box, or copy the rest out with tkbox exec",
			       PATCH_MAX_FILES);
		return fail(w, -E2BIG, msg);
	}
	if (d->n_sec == d->cap_sec) {
		size_t cap = d->cap_sec ? d->cap_sec * 2 : 64;
		struct guest_diff_section *v = reallocarray(d->sec, cap, sizeof(*v));
		if (!v) {
			return -ENOMEM;
		}
		d->sec = v;
		d->cap_sec = cap;
	}
	side_oid(o);
	side_oid(nw);
	r = put_section_bytes(&d->body, w->path, w->plen, o, nw);
	if (r == -E2BIG) {
		(void)snprintf(msg, sizeof(msg),
			       "the patch of /workspace is over PATCH_MAX_BYTES (%zu MiB); keep large or generated "
			       "files out of /workspace, or copy them out with tkbox exec",
			       PATCH_MAX_BYTES >> 20);
		return fail(w, r, msg);
	}
	if (r < 0) {
		return r;
	}
	d->sec[d->n_sec] = (struct guest_diff_section){
		.path = strndup(w->path, w->plen), .path_len = w->plen, .off = off, .len = buf_len(&d->body) - off
	};
	if (!d->sec[d->n_sec].path) {
		return -ENOMEM;
	}
	d->n_sec++;
	return 0;
}

/* ---- the walk ---- */

static enum kind kind_of(const struct stat *st)
{
	return S_ISREG(st->st_mode) ? K_REG : S_ISLNK(st->st_mode) ? K_LNK : S_ISDIR(st->st_mode) ? K_DIR : K_OTHER;
}

static uint32_t git_mode(enum kind k, const struct stat *st)
{
	if (k == K_LNK) {
		return PATCH_MODE_LINK;
	}
	return (st->st_mode & S_IXUSR) ? PATCH_MODE_EXEC : PATCH_MODE_FILE;
}

static bool is_dotgit(const char *name)
{
	return strcasecmp(name, ".git") == 0;
}

/* An upper entry that deletes the lower one: a 0:0 char device, or an empty file marked by xattr. */
static bool is_whiteout(int dirfd, const char *name, const struct stat *st)
{
	char v[4];
	int fd;
	bool w;

	if (S_ISCHR(st->st_mode)) {
		return st->st_rdev == makedev(0, 0);
	}
	if (!S_ISREG(st->st_mode) || st->st_size != 0) {
		return false;
	}
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		return false;
	}
	w = fgetxattr(fd, "trusted.overlay.whiteout", v, sizeof(v)) >= 0;
	(void)close(fd);
	return w;
}

static bool is_opaque(int fd)
{
	char v[4];

	return fd >= 0 && fgetxattr(fd, "trusted.overlay.opaque", v, sizeof(v)) == 1 && v[0] == 'y';
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void names_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i]);
	}
	free(v);
}

/* The names in directory dirfd (none for -1), sorted bytewise. */
static int list_dir(int dirfd, char ***ret, size_t *ret_n)
{
	size_t n = 0, cap = 0;
	char **v = NULL;
	struct dirent *de;
	DIR *dir;
	int fd;

	*ret = NULL;
	*ret_n = 0;
	if (dirfd < 0) {
		return 0;
	}
	fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	dir = fd < 0 ? NULL : fdopendir(fd);
	if (!dir) {
		int r = negative_errno();
		if (fd >= 0) {
			(void)close(fd);
		}
		return r;
	}
	while ((de = readdir(dir))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
			continue;
		}
		if (n == cap) {
			char **nv =
				n < GUEST_DIFF_MAX_DIR_ENTRIES ? reallocarray(v, cap ? cap * 2 : 32, sizeof(*v)) : NULL;
			if (!nv) {
				names_free(v, n);
				(void)closedir(dir);
				return n < GUEST_DIFF_MAX_DIR_ENTRIES ? -ENOMEM : -E2BIG;
			}
			v = nv;
			cap = cap ? cap * 2 : 32;
		}
		v[n] = strdup(de->d_name);
		if (!v[n]) {
			names_free(v, n);
			(void)closedir(dir);
			return -ENOMEM;
		}
		n++;
	}
	(void)closedir(dir);
	if (n > 1) {
		qsort(v, n, sizeof(*v), name_cmp);
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

static int side_read(int dirfd, const char *name, enum kind k, const struct stat *st, struct side *s)
{
	char *data = NULL;
	size_t n = 0;
	int r = 0;

	*s = (struct side){ .k = k };
	if (k == K_NONE) {
		return 0;
	}
	s->mode = git_mode(k, st);
	if (k == K_REG) {
		r = io_read_file(dirfd, name, PATCH_MAX_FILE_BYTES, IO_READ_REGULAR | IO_READ_NOFOLLOW, &data, &n);
	} else {
		data = malloc(PATH_MAX_LEN + 2);
		ssize_t l = data ? readlinkat(dirfd, name, data, PATH_MAX_LEN + 1) : -1;
		r = !data ? -ENOMEM : l < 0 ? negative_errno() : l > PATH_MAX_LEN ? -E2BIG : 0;
		n = l > 0 ? (size_t)l : 0;
	}
	if (r < 0) {
		free(data);
		return r;
	}
	s->data = (uint8_t *)data;
	s->len = n;
	return 0;
}

static bool path_push(struct walk *w, const char *name, size_t *saved)
{
	size_t nl = strlen(name), need = w->plen + (w->plen ? 1 : 0) + nl;

	*saved = w->plen;
	if (need > PATH_MAX_LEN) {
		return false;
	}
	if (w->plen) {
		w->path[w->plen++] = '/';
	}
	memcpy(w->path + w->plen, name, nl + 1);
	w->plen += nl;
	return true;
}

static void path_pop(struct walk *w, size_t saved)
{
	w->plen = saved;
	w->path[saved] = '\0';
}

struct entry {
	const char *name;
	int old_fd, up_fd; /* the parent directories */
	enum kind ok, nk;
	struct stat ost, ust;
};

#define WHY_SPECIAL "left out: a special file (fifo, socket or device) has no place in a git patch"
#define WHY_TYPE                                                                                                       \
	"left out: a change between a symlink and a file or directory (a type change) is refused by the patch "        \
	"parser"
#define WHY_READ "left out: it changed or vanished while the patch was made, or could not be read"

/* A file or symlink at w->path: created, deleted or changed (k NONE on one side). */
static int walk_leaf(struct walk *w, const struct entry *e, enum kind ok, enum kind nk)
{
	struct side o = { 0 }, nw = { 0 };
	char msg[160];
	int r;

	if (ok == K_OTHER || nk == K_OTHER) {
		return notice(w, NULL, WHY_SPECIAL);
	}
	if (ok != K_NONE && nk != K_NONE && ok != nk) {
		return notice(w, NULL, WHY_TYPE);
	}
	if ((ok == K_REG && (uint64_t)e->ost.st_size > PATCH_MAX_FILE_BYTES) ||
	    (nk == K_REG && (uint64_t)e->ust.st_size > PATCH_MAX_FILE_BYTES)) {
		(void)snprintf(msg, sizeof(msg), "left out: the file is over PATCH_MAX_FILE_BYTES (%zu MiB)",
			       PATCH_MAX_FILE_BYTES >> 20);
		return notice(w, NULL, msg);
	}
	r = side_read(e->old_fd, e->name, ok, &e->ost, &o);
	if (r >= 0) {
		r = side_read(e->up_fd, e->name, nk, &e->ust, &nw);
	}
	if (r == -ENOMEM) {
		/* nothing */
	} else if (r < 0) {
		r = notice(w, NULL,
			   r == -E2BIG ? "left out: the file grew past PATCH_MAX_FILE_BYTES while read" : WHY_READ);
	} else if (o.k != nw.k || o.mode != nw.mode || o.len != nw.len ||
		   (o.len && memcmp(o.data, nw.data, o.len) != 0)) {
		r = add_section(w, &o, &nw);
	}
	free(o.data);
	free(nw.data);
	return r;
}

static int walk_dir(struct walk *w, int old_fd, int up_fd, bool merged);

/* w->path is a directory on at least one side: the other side's file, then what is under it. */
static int walk_into(struct walk *w, const struct entry *e, bool merged)
{
	_cleanup_close_ int sub_old = -1, sub_up = -1;
	size_t depth = 1;
	int r = 0;

	for (size_t i = 0; i < w->plen; i++) {
		depth += w->path[i] == '/';
	}
	/* Paths under a symlink another section writes are refused by the parser (PATCH symlink rule). */
	if (e->ok == K_LNK || e->nk == K_LNK) {
		return notice(w, NULL, WHY_TYPE);
	}
	if (e->ok != K_DIR && e->ok != K_NONE) {
		r = walk_leaf(w, e, e->ok, K_NONE);
	}
	if (r >= 0 && e->nk != K_DIR && e->nk != K_NONE) {
		r = walk_leaf(w, e, K_NONE, e->nk);
	}
	if (r < 0) {
		return r;
	}
	if (depth + 1 > PATH_MAX_DEPTH) {
		return notice(w, NULL, "left out: what is under it is deeper than PATH_MAX_DEPTH (128) levels");
	}
	if (e->ok == K_DIR) {
		sub_old = openat(e->old_fd, e->name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (e->nk == K_DIR) {
		sub_up = openat(e->up_fd, e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if ((e->ok == K_DIR && sub_old < 0) || (e->nk == K_DIR && sub_up < 0)) {
		return notice(w, NULL, WHY_READ);
	}
	return walk_dir(w, sub_old, sub_up, merged && e->ok == K_DIR && e->nk == K_DIR && !is_opaque(sub_up));
}

/* One name of a directory: what the lower had and what the merged view has now. */
static int walk_entry(struct walk *w, struct entry *e, bool in_old, bool in_up, bool merged)
{
	size_t saved;
	int r;

	if (in_old && fstatat(e->old_fd, e->name, &e->ost, AT_SYMLINK_NOFOLLOW) == 0) {
		e->ok = kind_of(&e->ost);
	}
	if (in_up && fstatat(e->up_fd, e->name, &e->ust, AT_SYMLINK_NOFOLLOW) == 0) {
		e->nk = is_whiteout(e->up_fd, e->name, &e->ust) ? K_NONE : kind_of(&e->ust);
	} else if (merged) {
		return 0; /* not in the upper layer: the lower entry shows through unchanged */
	}
	if (e->ok == K_NONE && e->nk == K_NONE) {
		return 0;
	}
	if (!path_push(w, e->name, &saved)) {
		r = notice(w, e->name, "left out: the path is longer than PATH_MAX_LEN (4095) bytes");
		path_pop(w, saved);
		return r;
	}
	if (is_dotgit(e->name)) {
		r = notice(w, NULL, "left out: a path with a .git segment is never part of the patch");
	} else if (e->ok == K_DIR || e->nk == K_DIR) {
		r = walk_into(w, e, merged);
	} else {
		r = walk_leaf(w, e, e->ok, e->nk);
	}
	path_pop(w, saved);
	return r;
}

static int walk_dir(struct walk *w, int old_fd, int up_fd, bool merged)
{
	char **on = NULL, **un = NULL;
	size_t no = 0, nu = 0, i = 0, j = 0;
	int r;

	r = list_dir(old_fd, &on, &no);
	if (r >= 0) {
		r = list_dir(up_fd, &un, &nu);
	}
	if (r == -E2BIG) {
		r = fail(w, r, "a directory in /workspace has more than 1048576 entries (GUEST_DIFF_MAX_DIR_ENTRIES)");
	}
	while (r >= 0 && (i < no || j < nu)) {
		int c = i == no ? 1 : j == nu ? -1 : strcmp(on[i], un[j]);
		struct entry e = { .name = c <= 0 ? on[i] : un[j], .old_fd = old_fd, .up_fd = up_fd };
		r = walk_entry(w, &e, c <= 0, c >= 0, merged);
		i += c <= 0;
		j += c >= 0;
	}
	names_free(on, no);
	names_free(un, nu);
	return r;
}

/* ---- the result ---- */

static int section_cmp(const void *a, const void *b)
{
	const struct guest_diff_section *x = a, *y = b;
	int c = memcmp(x->path, y->path, MIN(x->path_len, y->path_len));

	return c ? c : (x->path_len > y->path_len) - (x->path_len < y->path_len);
}

/* Past PATCH_MAX_NOTICES the last notice counts the rest, so the host still learns something was left out. */
static int notices_finish(struct guest_diff *d)
{
	struct guest_diff_notice *last;
	char why[160];

	if (d->n_dropped == 0) {
		return 0;
	}
	last = &d->notices[d->n_notices - 1];
	(void)snprintf(why, sizeof(why),
		       "left out: %zu more paths (notices past PATCH_MAX_NOTICES, %d, are counted here)",
		       d->n_dropped + 1, PATCH_MAX_NOTICES);
	free(last->path);
	free(last->why);
	last->path = strdup("...");
	last->why = strdup(why);
	return last->path && last->why ? 0 : -ENOMEM;
}

int guest_diff_make(int lower_fd, int upper_fd, struct guest_diff *ret, char *diag, size_t diag_size)
{
	struct guest_diff d = { 0 };
	struct walk w = { .d = &d, .diag = diag, .diag_size = diag_size };
	_cleanup_close_ int up = -1;
	int r;

	if (diag_size > 0) {
		diag[0] = '\0';
	}
	r = buf_init(&d.body, PATCH_MAX_BYTES, 0);
	if (r < 0) {
		return r;
	}
	up = openat(upper_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	r = up < 0 ? negative_errno() : walk_dir(&w, lower_fd, up, !is_opaque(up));
	if (r >= 0) {
		r = notices_finish(&d);
	}
	if (r < 0) {
		if (diag_size > 0 && diag[0] == '\0') {
			(void)snprintf(diag, diag_size, "reading /workspace's layers: %s", strerror(-r));
		}
		guest_diff_release(&d);
		return r;
	}
	if (d.n_sec > 1) {
		qsort(d.sec, d.n_sec, sizeof(*d.sec), section_cmp);
	}
	*ret = d;
	return 0;
}

int guest_diff_concat(const struct guest_diff *d, struct buf *out)
{
	for (size_t i = 0; i < d->n_sec; i++) {
		int r = buf_put(out, buf_ptr(&d->body) + d->sec[i].off, d->sec[i].len);
		if (r < 0) {
			return r;
		}
	}
	return 0;
}

/* ---- frames for the host ---- */

static int frames_flush(struct buf *out, int fd)
{
	int r = io_write_all(fd, buf_ptr(out), buf_len(out));

	buf_reset(out);
	return r;
}

/* The sections' bytes as DIFF_DATA frames of up to AGENT_MAX_DATA bytes each, in order. */
static int frames_data(const struct guest_diff *d, uint32_t id, struct buf *out, int fd, uint64_t *ret_total)
{
	_cleanup_free_ uint8_t *chunk = malloc(AGENT_MAX_DATA);
	size_t fill = 0;
	uint64_t total = 0;
	int r = chunk ? 0 : -ENOMEM;

	for (size_t i = 0; r >= 0 && i < d->n_sec; i++) {
		const uint8_t *p = buf_ptr(&d->body) + d->sec[i].off;
		size_t left = d->sec[i].len;
		while (r >= 0 && left > 0) {
			size_t take = MIN(left, AGENT_MAX_DATA - fill);
			memcpy(chunk + fill, p, take);
			fill += take;
			p += take;
			left -= take;
			if (fill == AGENT_MAX_DATA) {
				r = agent_encode_data(out, AGENT_MSG_DIFF_DATA, id, chunk, fill);
				r = r < 0 ? r : frames_flush(out, fd);
				total += fill;
				fill = 0;
			}
		}
	}
	if (r >= 0 && fill > 0) {
		r = agent_encode_data(out, AGENT_MSG_DIFF_DATA, id, chunk, fill);
		total += fill;
	}
	*ret_total = total;
	return r;
}

int guest_diff_write_frames(int lower_fd, int upper_fd, uint32_t id, int fd)
{
	struct guest_diff d = { 0 };
	struct agent_msg end = { .type = AGENT_MSG_DIFF_END, .id = id };
	_cleanup_free_ char **pairs = NULL;
	struct buf out;
	char diag[512];
	uint64_t total = 0;
	int r;

	r = buf_init(&out, AGENT_MAX_JSON + 64, 0);
	if (r < 0) {
		return r;
	}
	r = guest_diff_make(lower_fd, upper_fd, &d, diag, sizeof(diag));
	if (r < 0) {
		r = agent_encode_error(&out, id, AGENT_ERR_DIFF, diag);
		r = r < 0 ? r : frames_flush(&out, fd);
		buf_release(&out);
		return r;
	}
	r = frames_data(&d, id, &out, fd, &total);
	pairs = calloc(2 * d.n_notices + 1, sizeof(*pairs));
	if (r >= 0 && !pairs) {
		r = -ENOMEM;
	}
	for (size_t i = 0; r >= 0 && i < d.n_notices; i++) {
		pairs[2 * i] = d.notices[i].path;
		pairs[2 * i + 1] = d.notices[i].why;
	}
	end.bytes = (int64_t)total;
	end.notices = pairs;
	end.n_notices = d.n_notices;
	r = r < 0 ? r : agent_msg_encode(&end, &out);
	r = r < 0 ? r : frames_flush(&out, fd);
	buf_release(&out);
	guest_diff_release(&d);
	return r;
}
