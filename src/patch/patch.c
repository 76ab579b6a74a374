/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The strict patch parser (patch.h). Read alongside git's apply.c
 * (parse_git_diff_header, git_header_name, the gitdiff_* handlers,
 * find_header, parse_fragment, parse_single_patch, parse_binary_hunk): every
 * form accepted here is one git apply reads the same way, and the rest is
 * refused rather than guessed at.
 *
 * The approach: names are decoded, then re-encoded exactly as git diff
 * writes them and compared byte for byte with the line, so no two readings
 * of one line can exist; hunks are consumed by their counts as
 * parse_fragment does; binary hunks are decoded (base85) and inflated into
 * a fixed buffer to check their size. One pass, no recursion, every loop
 * bounded by the input.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "banned.h"
#include "path.h"
#include "patch/patch.h"

#define DIFF_GIT "diff --git "
#define NO_NEWLINE "\\ No newline at end of file\n"
#define HEX_FULL 40 /* a full sha1 object name: the index line binary needs (git's hexsz) */
#define HEX_MIN 7
#define EMPTY_BLOB "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
#define NUM_MAX_DIGITS 10
#define PATCH_DIAG_PATH_MAX 200 /* path bytes a message shows */
#define NAME_MAX_ENC ((PATH_MAX_LEN + 2) * 4 + 3) /* "a/" + path, every byte as \ooo, quotes, NUL */

struct ctx {
	const uint8_t *p;
	size_t n, pos;
	char *diag;
	size_t diag_size;
	size_t section; /* 1-based, for messages */
	const char *path; /* the section's path once known */
};

struct hdr {
	bool old_mode_line, new_file, deleted;
	uint32_t old_mode, new_mode, index_mode;
	bool has_index;
	char old_oid[65], new_oid[65];
};

_printf_(3, 4) static int refuse(struct ctx *c, int r, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	size_t k = 0;

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!c->diag || c->diag_size == 0) {
		return r;
	}
	/* the path is the agent's text: escaped, so no control byte reaches a terminal or a log */
	{
		char esc[PATCH_DIAG_PATH_MAX * 4 + 8];
		size_t e = 0;
		const char *s = c->path;
		for (size_t i = 0; s && s[i] && e + 8 < sizeof(esc); i++) {
			unsigned char ch = (unsigned char)s[i];
			if (i >= PATCH_DIAG_PATH_MAX) {
				e += (size_t)snprintf(esc + e, sizeof(esc) - e, "...");
				break;
			}
			if (ch < 0x20 || ch >= 0x7f || ch == '\\') {
				e += (size_t)snprintf(esc + e, sizeof(esc) - e, "\\x%02x", ch);
			} else {
				esc[e++] = (char)ch;
			}
		}
		esc[e] = '\0';
		if (s) {
			k = (size_t)snprintf(c->diag, c->diag_size, "patch: section %zu (%s): %s", c->section, esc,
					     msg);
		} else if (c->section > 0) {
			k = (size_t)snprintf(c->diag, c->diag_size, "patch: section %zu: %s", c->section, msg);
		} else {
			k = (size_t)snprintf(c->diag, c->diag_size, "patch: %s", msg);
		}
	}
	(void)k;
	return r;
}

const char *patch_op_name(enum patch_op op)
{
	switch (op) {
	case PATCH_MODIFY:
		return "modify";
	case PATCH_CREATE:
		return "create";
	case PATCH_DELETE:
		return "delete";
	default:
		return "?";
	}
}

const char *patch_mode_name(uint32_t mode)
{
	switch (mode) {
	case PATCH_MODE_FILE:
		return "100644";
	case PATCH_MODE_EXEC:
		return "100755";
	case PATCH_MODE_LINK:
		return "120000";
	default:
		return NULL;
	}
}

void patch_release(struct patch *p)
{
	if (!p) {
		return;
	}
	for (size_t i = 0; i < p->n_files; i++) {
		free(p->files[i].path);
	}
	free(p->files);
	p->files = NULL;
	p->n_files = 0;
}

/* The line at c->pos: its length including the '\n', or 0 at the end. *nl: it ends with '\n'. */
static size_t line_at(const struct ctx *c, size_t pos, bool *nl)
{
	const uint8_t *s = c->p + pos, *e;
	size_t left = c->n - pos;

	if (left == 0) {
		*nl = false;
		return 0;
	}
	e = memchr(s, '\n', left);
	*nl = e != NULL;
	return e ? (size_t)(e - s) + 1 : left;
}

static bool starts(const uint8_t *s, size_t n, const char *lit)
{
	size_t k = strlen(lit);
	return n >= k && memcmp(s, lit, k) == 0;
}

static bool line_is(const uint8_t *s, size_t n, const char *lit)
{
	return n == strlen(lit) && memcmp(s, lit, n) == 0;
}

/*
 * Header lines: one '\n' at the end, no NUL, no CR before the LF (git
 * would read "100644\r" as a mode and a name with a CR in it).
 */
static int header_line(struct ctx *c, size_t *ret_len)
{
	bool nl;
	size_t len = line_at(c, c->pos, &nl);

	if (!nl) {
		return refuse(c, -EBADMSG, "the patch ends inside a header line (truncated) (PATCH format rule)");
	}
	if (memchr(c->p + c->pos, 0, len)) {
		return refuse(c, -EBADMSG, "a NUL byte in a header line is refused (PATCH format rule)");
	}
	if (len >= 2 && c->p[c->pos + len - 2] == '\r') {
		return refuse(c, -EBADMSG, "a header line ending in CR LF is refused (PATCH format rule)");
	}
	*ret_len = len;
	return 0;
}

/* git's quote_c_style with core.quotePath on: does byte ch need quoting, and how. */
static char cq_letter(unsigned char ch)
{
	switch (ch) {
	case '\a':
		return 'a';
	case '\b':
		return 'b';
	case '\t':
		return 't';
	case '\n':
		return 'n';
	case '\v':
		return 'v';
	case '\f':
		return 'f';
	case '\r':
		return 'r';
	case '"':
		return '"';
	case '\\':
		return '\\';
	default:
		return 0;
	}
}

static bool cq_needs(unsigned char ch)
{
	return ch < 0x20 || ch == '"' || ch == '\\' || ch >= 0x7f;
}

/* prefix + path as git diff writes it (quoted when any byte needs it) into out[NAME_MAX_ENC]; its length. */
static size_t enc_name(const char *prefix, const char *path, char *out)
{
	size_t k = 0, pl = strlen(path);
	bool q = false;

	for (size_t i = 0; i < pl; i++) {
		q = q || cq_needs((unsigned char)path[i]);
	}
	if (!q) {
		k = (size_t)snprintf(out, NAME_MAX_ENC, "%s%s", prefix, path);
		return k;
	}
	out[k++] = '"';
	for (const char *s = prefix; *s; s++) {
		out[k++] = *s;
	}
	for (size_t i = 0; i < pl; i++) {
		unsigned char ch = (unsigned char)path[i];
		char l = cq_letter(ch);
		if (l) {
			out[k++] = '\\';
			out[k++] = l;
		} else if (cq_needs(ch)) {
			out[k++] = '\\';
			out[k++] = (char)('0' + ((ch >> 6) & 3));
			out[k++] = (char)('0' + ((ch >> 3) & 7));
			out[k++] = (char)('0' + (ch & 7));
		} else {
			out[k++] = (char)ch;
		}
	}
	out[k++] = '"';
	out[k] = '\0';
	return k;
}

/*
 * A C-quoted name at s[0] == '"' (git's unquote_c_style): into out (at most
 * max bytes, NUL-terminated), *used the bytes read including both quotes.
 * A \000 (NUL) or an unknown escape is refused.
 */
static int dec_quoted(const uint8_t *s, size_t n, char *out, size_t max, size_t *used, size_t *ret_len)
{
	size_t i = 1, k = 0;

	for (;;) {
		unsigned char ch;
		if (i >= n) {
			return -EBADMSG;
		}
		ch = s[i++];
		if (ch == '"') {
			break;
		}
		if (ch == '\n' || ch == 0) {
			return -EBADMSG;
		}
		if (ch == '\\') {
			if (i >= n) {
				return -EBADMSG;
			}
			ch = s[i++];
			switch (ch) {
			case 'a':
				ch = '\a';
				break;
			case 'b':
				ch = '\b';
				break;
			case 't':
				ch = '\t';
				break;
			case 'n':
				ch = '\n';
				break;
			case 'v':
				ch = '\v';
				break;
			case 'f':
				ch = '\f';
				break;
			case 'r':
				ch = '\r';
				break;
			case '"':
			case '\\':
				break;
			case '0':
			case '1':
			case '2':
			case '3':
				if (i + 2 > n || s[i] < '0' || s[i] > '7' || s[i + 1] < '0' || s[i + 1] > '7') {
					return -EBADMSG;
				}
				ch = (unsigned char)(((ch - '0') << 6) | ((s[i] - '0') << 3) | (s[i + 1] - '0'));
				i += 2;
				if (ch == 0) {
					return -EBADMSG;
				}
				break;
			default:
				return -EBADMSG;
			}
		}
		if (k + 1 >= max) {
			return -ENAMETOOLONG;
		}
		out[k++] = (char)ch;
	}
	out[k] = '\0';
	*used = i;
	*ret_len = k;
	return 0;
}

/* Bytes of an HFS+-ignorable code point at s (U+200C..200F, U+202A..202E, U+206A..206F, U+FEFF), or 0. */
static size_t hfs_ignorable(const unsigned char *s, size_t len)
{
	if (len >= 3 && s[0] == 0xe2 && s[1] == 0x80 &&
	    ((s[2] >= 0x8c && s[2] <= 0x8f) || (s[2] >= 0xaa && s[2] <= 0xae))) {
		return 3;
	}
	if (len >= 3 && s[0] == 0xe2 && s[1] == 0x81 && s[2] >= 0xaa && s[2] <= 0xaf) {
		return 3;
	}
	return len >= 3 && s[0] == 0xef && s[1] == 0xbb && s[2] == 0xbf ? 3 : 0;
}

/*
 * ".git" in any case, and every form git's verify_path also takes for it:
 * trailing dots or spaces, the 8.3 name git~1, an NTFS stream name after it
 * (".git::$INDEX_ALLOCATION"), and HFS+-ignorable code points inside it.
 */
static bool seg_is_dotgit(const char *seg, size_t len)
{
	char plain[PATH_MAX_SEGMENT + 1];
	size_t n = 0, stem;

	for (size_t i = 0; i < len && n < sizeof(plain) - 1;) {
		size_t skip = hfs_ignorable((const unsigned char *)seg + i, len - i);
		if (skip) {
			i += skip;
			continue;
		}
		plain[n++] = seg[i++];
	}
	if (n >= 4 && strncasecmp(plain, ".git", 4) == 0) {
		stem = 4;
	} else if (n >= 5 && strncasecmp(plain, "git~1", 5) == 0) {
		stem = 5;
	} else {
		return false;
	}
	if (stem < n && plain[stem] == ':') {
		return true;
	}
	for (size_t i = stem; i < n; i++) {
		if (plain[i] != '.' && plain[i] != ' ') {
			return false;
		}
	}
	return true;
}

static int check_path(struct ctx *c, const char *path, size_t len)
{
	int r;

	if (len > 0 && path[0] == '/') {
		return refuse(c, -EBADMSG, "an absolute path is refused (PATCH path rule)");
	}
	for (size_t i = 0, seg = 0; i <= len; i++) {
		if (i < len && path[i] != '/') {
			continue;
		}
		if (i - seg == 2 && path[seg] == '.' && path[seg + 1] == '.') {
			return refuse(c, -EBADMSG, "a path with a .. segment is refused (PATCH path rule)");
		}
		if (seg_is_dotgit(path + seg, i - seg)) {
			return refuse(
				c, -EBADMSG,
				"a path with a .git segment is refused (PATCH path rule; git's own files are never "
				"written from a box)");
		}
		seg = i + 1;
	}
	r = path_verify(path, len);
	if (r == -ENAMETOOLONG || r == -ELOOP) {
		return refuse(c, -E2BIG,
			      "the path is longer or deeper than PATH_MAX_LEN/PATH_MAX_SEGMENT/"
			      "PATH_MAX_DEPTH allow (PATCH path rule)");
	}
	if (r < 0) {
		return refuse(c, -EBADMSG, "the path is empty or has an empty or \".\" segment (PATCH path rule)");
	}
	return 0;
}

/* "diff --git a/P b/P\n": P, which must be written exactly as git writes it. */
static int parse_diff_git(struct ctx *c, size_t len, char **ret)
{
	const uint8_t *rest = c->p + c->pos + strlen(DIFF_GIT);
	size_t rlen = len - strlen(DIFF_GIT) - 1, plen = 0;
	_cleanup_free_ char *path = NULL, *enc = NULL;
	size_t k;
	int r;

	path = malloc(PATH_MAX_LEN + 3);
	enc = malloc(2 * NAME_MAX_ENC + 2);
	if (!path || !enc) {
		return -ENOMEM;
	}
	if (rlen > 0 && rest[0] == '"') {
		size_t used;
		char *tmp = malloc(PATH_MAX_LEN + 4);
		if (!tmp) {
			return -ENOMEM;
		}
		r = dec_quoted(rest, rlen, tmp, PATH_MAX_LEN + 4, &used, &plen);
		if (r < 0 || plen < 2 || memcmp(tmp, "a/", 2) != 0) {
			free(tmp);
			if (r == -ENAMETOOLONG) {
				return refuse(c, -E2BIG, "the path is longer than PATH_MAX_LEN (PATCH path rule)");
			}
			return refuse(c, -EBADMSG,
				      "the \"diff --git\" line is not in git's form (a quoted name with a bad "
				      "escape or a NUL, or no a/ prefix) (PATCH format rule)");
		}
		plen -= 2;
		memcpy(path, tmp + 2, plen + 1);
		free(tmp);
	} else {
		if (rlen < 7 || (rlen - 5) % 2 != 0 || !starts(rest, rlen, "a/")) {
			return refuse(
				c, -EBADMSG,
				"the \"diff --git\" line does not name one path as a/P b/P; renames and copies are "
				"refused (PATCH rename rule)");
		}
		plen = (rlen - 5) / 2;
		if (plen > PATH_MAX_LEN) {
			return refuse(c, -E2BIG, "the path is longer than PATH_MAX_LEN (PATCH path rule)");
		}
		memcpy(path, rest + 2, plen);
		path[plen] = '\0';
	}
	if (memchr(path, 0, plen)) {
		return refuse(c, -EBADMSG, "a NUL in a path is refused (PATCH path rule)");
	}
	k = enc_name("a/", path, enc);
	enc[k++] = ' ';
	k += enc_name("b/", path, enc + k);
	if (k != rlen || memcmp(enc, rest, k) != 0) {
		return refuse(c, -EBADMSG,
			      "the \"diff --git\" line does not name the same path twice in git's form (a/P b/P); "
			      "renames, copies and other spellings are refused (PATCH rename rule)");
	}
	/* from here on messages name the path; the caller owns it whatever happens */
	c->path = path;
	r = check_path(c, path, plen);
	*ret = steal_ptr(path);
	return r;
}

static int parse_mode(struct ctx *c, const uint8_t *s, size_t n, uint32_t *ret)
{
	/* s[0..n) is the text after the keyword, '\n' included */
	if (line_is(s, n, "100644\n")) {
		*ret = PATCH_MODE_FILE;
	} else if (line_is(s, n, "100755\n")) {
		*ret = PATCH_MODE_EXEC;
	} else if (line_is(s, n, "120000\n")) {
		*ret = PATCH_MODE_LINK;
	} else if (line_is(s, n, "160000\n")) {
		return refuse(c, -EBADMSG, "a gitlink (submodule, mode 160000) is refused (PATCH mode rule)");
	} else {
		return refuse(c, -EBADMSG, "a mode other than 100644, 100755 or 120000 is refused (PATCH mode rule)");
	}
	return 0;
}

static size_t hex_run(const uint8_t *s, size_t n)
{
	size_t i = 0;
	while (i < n && ((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) {
		i++;
	}
	return i;
}

static bool all_zero(const char *s)
{
	for (; *s; s++) {
		if (*s != '0') {
			return false;
		}
	}
	return true;
}

/* "index H..H[ M]\n" after "index ". */
static int parse_index(struct ctx *c, const uint8_t *s, size_t n, struct hdr *h)
{
	size_t a = hex_run(s, n), b;

	if (a < HEX_MIN || a > HEX_FULL || n < a + 2 || s[a] != '.' || s[a + 1] != '.') {
		goto bad;
	}
	b = hex_run(s + a + 2, n - a - 2);
	if (b != a) {
		goto bad;
	}
	memcpy(h->old_oid, s, a);
	h->old_oid[a] = '\0';
	memcpy(h->new_oid, s + a + 2, b);
	h->new_oid[b] = '\0';
	s += a + 2 + b;
	n -= a + 2 + b;
	if (line_is(s, n, "\n")) {
		h->has_index = true;
		return 0;
	}
	if (n > 1 && s[0] == ' ') {
		int r = parse_mode(c, s + 1, n - 1, &h->index_mode);
		if (r < 0) {
			return r;
		}
		h->has_index = true;
		return 0;
	}
bad:
	return refuse(
		c, -EBADMSG,
		"the index line is not \"index H..H[ MODE]\" with 7 to 40 lowercase hex digits (PATCH format rule)");
}

static int hdr_refusal(struct ctx *c, const uint8_t *s, size_t n)
{
	if (starts(s, n, "rename ")) {
		return refuse(c, -EBADMSG, "a rename section is refused (PATCH rename rule)");
	}
	if (starts(s, n, "copy ")) {
		return refuse(c, -EBADMSG, "a copy section is refused (PATCH copy rule)");
	}
	if (starts(s, n, "similarity index ") || starts(s, n, "dissimilarity index ")) {
		return refuse(c, -EBADMSG,
			      "a similarity or dissimilarity (rewrite) line is refused (PATCH similarity rule)");
	}
	if (starts(s, n, "old mode ") || starts(s, n, "new mode ") || starts(s, n, "new file mode ") ||
	    starts(s, n, "deleted file mode ") || starts(s, n, "index ")) {
		return refuse(
			c, -EBADMSG,
			"extended header lines out of git's order, repeated or contradictory (PATCH format rule)");
	}
	if (starts(s, n, "Binary files ") || starts(s, n, "Files ")) {
		return refuse(
			c, -EBADMSG,
			"\"Binary files ... differ\" carries no data and is refused; the producer writes git binary "
			"patches (PATCH binary rule)");
	}
	if (starts(s, n, "@@ -")) {
		return refuse(c, -EBADMSG, "hunks without ---/+++ lines are refused (PATCH format rule)");
	}
	if (starts(s, n, "--- ") || starts(s, n, "+++ ")) {
		return refuse(c, -EBADMSG, "a ---/+++ line out of place (PATCH format rule)");
	}
	return refuse(c, -EBADMSG, "an unknown line in a section's header is refused (PATCH format rule)");
}

/* Parse a number of 1..NUM_MAX_DIGITS digits at s[*i], at most UINT32_MAX. */
static bool parse_num(const uint8_t *s, size_t n, size_t *i, uint64_t *ret)
{
	uint64_t v = 0;
	size_t d = 0;

	while (*i < n && s[*i] >= '0' && s[*i] <= '9') {
		if (++d > NUM_MAX_DIGITS) {
			return false;
		}
		v = v * 10 + (uint64_t)(s[*i] - '0');
		(*i)++;
	}
	if (d == 0 || v > UINT32_MAX) {
		return false;
	}
	*ret = v;
	return true;
}

struct range {
	uint64_t oldpos, oldlines, newpos, newlines;
};

/* "@@ -a[,b] +c[,d] @@[ tail]\n" (parse_fragment_header) */
static bool parse_hunk_header(const uint8_t *s, size_t n, struct range *rg)
{
	size_t i = 4;

	if (!starts(s, n, "@@ -") || !parse_num(s, n, &i, &rg->oldpos)) {
		return false;
	}
	rg->oldlines = 1;
	if (i < n && s[i] == ',') {
		i++;
		if (!parse_num(s, n, &i, &rg->oldlines)) {
			return false;
		}
	}
	if (i + 2 > n || s[i] != ' ' || s[i + 1] != '+') {
		return false;
	}
	i += 2;
	if (!parse_num(s, n, &i, &rg->newpos)) {
		return false;
	}
	rg->newlines = 1;
	if (i < n && s[i] == ',') {
		i++;
		if (!parse_num(s, n, &i, &rg->newlines)) {
			return false;
		}
	}
	if (!starts(s + i, n - i, " @@")) {
		return false;
	}
	i += 3;
	/* the rest is git's function context: anything but NUL (checked by header_line) */
	return s[i] == '\n' || s[i] == ' ';
}

static int parse_text(struct ctx *c, struct patch_file *f, bool create, bool del)
{
	char *enc = NULL;
	size_t len;
	int r;
	uint64_t old_bytes = 0, new_bytes = 0;
	uint64_t last_old_end = 0, last_new_end = 0;
	size_t hunks = 0;
	bool space = strchr(f->path, ' ') != NULL;

	enc = malloc(NAME_MAX_ENC + 8);
	if (!enc) {
		return -ENOMEM;
	}
	/* --- line */
	for (int side = 0; side < 2; side++) {
		const char *kw = side == 0 ? "--- " : "+++ ";
		bool null_side = side == 0 ? create : del;
		size_t k;

		r = header_line(c, &len);
		if (r < 0) {
			goto out;
		}
		if (!starts(c->p + c->pos, len, kw)) {
			r = refuse(c, -EBADMSG, "expected a \"%s\" line (PATCH format rule)",
				   side == 0 ? "---" : "+++");
			goto out;
		}
		if (line_is(c->p + c->pos + 4, len - 4, "/dev/null\n")) {
			if (!null_side) {
				/* finding F1: git reads this as a file named dev/null */
				r = refuse(
					c, -EBADMSG,
					"/dev/null on the %s line without the \"%s\" line is refused (PATCH dev-null "
					"rule, finding F1: git would read a file named dev/null)",
					side == 0 ? "---" : "+++", side == 0 ? "new file mode" : "deleted file mode");
				goto out;
			}
		} else {
			if (null_side) {
				r = refuse(c, -EBADMSG, "a %s must have /dev/null on its %s line (PATCH dev-null rule)",
					   side == 0 ? "creation" : "deletion", side == 0 ? "---" : "+++");
				goto out;
			}
			k = enc_name(side == 0 ? "a/" : "b/", f->path, enc);
			if (space) {
				enc[k++] = '\t';
			}
			enc[k++] = '\n';
			if (len - 4 != k || memcmp(c->p + c->pos + 4, enc, k) != 0) {
				r = refuse(
					c, -EBADMSG,
					"the %s line does not name the section's path as git writes it (PATCH rename "
					"rule)",
					side == 0 ? "---" : "+++");
				goto out;
			}
		}
		c->pos += len;
	}
	/* hunks, consumed by their counts as git's parse_fragment does */
	for (;;) {
		struct range rg;
		uint64_t ol, nl_;
		uint64_t added = 0, deleted = 0;
		bool nl, prev_marker = false, prev_line = false;

		len = line_at(c, c->pos, &nl);
		if (len == 0 || starts(c->p + c->pos, len, DIFF_GIT)) {
			break;
		}
		if (!starts(c->p + c->pos, len, "@@ -")) {
			if (hunks == 0) {
				r = refuse(c, -EBADMSG, "a text section without hunks is refused (PATCH hunk rule)");
			} else {
				r = refuse(c, -EBADMSG,
					   "bytes after the last hunk that are not a new \"diff --git\" section "
					   "(miscounted or garbage lines) are refused (PATCH hunk rule)");
			}
			goto out;
		}
		r = header_line(c, &len);
		if (r < 0) {
			goto out;
		}
		if (!parse_hunk_header(c->p + c->pos, len, &rg)) {
			r = refuse(c, -EBADMSG, "a hunk header that is not \"@@ -a,b +c,d @@\" (PATCH hunk rule)");
			goto out;
		}
		if ((create || del) && hunks > 0) {
			r = refuse(c, -EBADMSG, "a creation or deletion with more than one hunk (PATCH hunk rule)");
			goto out;
		}
		if (create && (rg.oldpos != 0 || rg.oldlines != 0 || rg.newpos != 1 || rg.newlines == 0)) {
			r = refuse(c, -EBADMSG, "a creation's hunk must be @@ -0,0 +1,N @@ (PATCH hunk rule)");
			goto out;
		}
		if (del && (rg.newpos != 0 || rg.newlines != 0 || rg.oldpos != 1 || rg.oldlines == 0)) {
			r = refuse(c, -EBADMSG, "a deletion's hunk must be @@ -1,N +0,0 @@ (PATCH hunk rule)");
			goto out;
		}
		if (hunks > 0 && (rg.oldpos < last_old_end || rg.newpos < last_new_end)) {
			r = refuse(c, -EBADMSG, "hunks out of order or overlapping (PATCH hunk rule)");
			goto out;
		}
		last_old_end = rg.oldpos + rg.oldlines + (rg.oldlines == 0 ? 1 : 0);
		last_new_end = rg.newpos + rg.newlines + (rg.newlines == 0 ? 1 : 0);
		c->pos += len;
		ol = rg.oldlines;
		nl_ = rg.newlines;
		while (ol || nl_) {
			const uint8_t *s = c->p + c->pos;
			len = line_at(c, c->pos, &nl);
			if (!nl) {
				r = refuse(
					c, -EBADMSG,
					"the patch ends inside a hunk: fewer lines than its header counts (truncated "
					"or miscounted) (PATCH hunk rule)");
				goto out;
			}
			switch (s[0]) {
			case ' ':
			case '\n':
				if (ol == 0 || nl_ == 0) {
					goto miscount;
				}
				ol--;
				nl_--;
				old_bytes += len - (s[0] == ' ');
				new_bytes += len - (s[0] == ' ');
				prev_line = true;
				prev_marker = false;
				break;
			case '-':
				if (ol == 0) {
					goto miscount;
				}
				ol--;
				deleted++;
				old_bytes += len - 1;
				prev_line = true;
				prev_marker = false;
				break;
			case '+':
				if (nl_ == 0) {
					goto miscount;
				}
				nl_--;
				added++;
				new_bytes += len - 1;
				prev_line = true;
				prev_marker = false;
				break;
			case '\\':
				if (!line_is(s, len, NO_NEWLINE) || !prev_line || prev_marker) {
					r = refuse(
						c, -EBADMSG,
						"a \"\\\" line other than one \"\\ No newline at end of file\" after a "
						"line (PATCH hunk rule)");
					goto out;
				}
				prev_marker = true;
				break;
			default:
				r = refuse(
					c, -EBADMSG,
					"a hunk line that starts with none of ' ', '+', '-', '\\' before the header's "
					"counts are reached (miscounted or truncated hunk) (PATCH hunk rule)");
				goto out;
			}
			c->pos += len;
			if (old_bytes > PATCH_MAX_FILE_BYTES || new_bytes > PATCH_MAX_FILE_BYTES) {
				r = refuse(c, -E2BIG,
					   "a file's text is larger than PATCH_MAX_FILE_BYTES (%zu bytes) (PATCH cap)",
					   PATCH_MAX_FILE_BYTES);
				goto out;
			}
		}
		/* a hunk whose last line has no newline: the marker after the counts run out (git does the same) */
		len = line_at(c, c->pos, &nl);
		if (len > 0 && c->p[c->pos] == '\\') {
			if (!line_is(c->p + c->pos, len, NO_NEWLINE) || prev_marker) {
				r = refuse(c, -EBADMSG,
					   "a \"\\\" line other than one \"\\ No newline at end of file\" after a line "
					   "(PATCH hunk rule)");
				goto out;
			}
			c->pos += len;
		}
		if (added == 0 && deleted == 0) {
			r = refuse(c, -EBADMSG, "a hunk that adds and deletes nothing (PATCH hunk rule)");
			goto out;
		}
		f->added += added;
		f->deleted += deleted;
		hunks++;
		continue;
	miscount:
		r = refuse(c, -EBADMSG, "a hunk with more lines than its header counts (miscounted) (PATCH hunk rule)");
		goto out;
	}
	if (hunks == 0) {
		r = refuse(c, -EBADMSG, "a text section without hunks is refused (PATCH hunk rule)");
		goto out;
	}
	r = 0;
out:
	free(enc);
	return r;
}

/* git's base85 alphabet (base85.c) */
static int de85(uint8_t ch)
{
	static const char a85[] =
		"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";
	const char *p = ch ? strchr(a85, ch) : NULL;
	return p ? (int)(p - a85) : -1;
}

/* Decode one base85 line's data (5 chars per 4 bytes) into out; false when corrupt (git's decode_85). */
static bool decode_85(const uint8_t *s, size_t nbytes, uint8_t *out)
{
	while (nbytes) {
		uint32_t acc = 0;
		for (int k = 0; k < 5; k++) {
			int d = de85(*s++);
			if (d < 0) {
				return false;
			}
			if (k == 4) {
				if (UINT32_MAX / 85 < acc || UINT32_MAX - (uint32_t)d < acc * 85) {
					return false;
				}
			}
			acc = acc * 85 + (uint32_t)d;
		}
		for (int k = 0; k < 4 && nbytes; k++, nbytes--) {
			*out++ = (uint8_t)(acc >> 24);
			acc <<= 8;
		}
	}
	return true;
}

/* One binary hunk ("literal N" / "delta N", base85 lines, a blank line). */
static int parse_binary_hunk(struct ctx *c, bool forward, bool create)
{
	size_t len, i;
	uint64_t declared;
	bool delta, nl, ended = false;
	z_stream zs;
	uint8_t *outbuf = NULL, head[24];
	size_t head_len = 0;
	uint64_t total = 0;
	int r, zr = Z_OK;

	r = header_line(c, &len);
	if (r < 0) {
		return r;
	}
	if (starts(c->p + c->pos, len, "literal ")) {
		delta = false;
		i = 8;
	} else if (starts(c->p + c->pos, len, "delta ")) {
		delta = true;
		i = 6;
	} else {
		return refuse(c, -EBADMSG,
			      "a binary hunk must start with \"literal N\" or \"delta N\" (PATCH binary rule)");
	}
	if (!parse_num(c->p + c->pos, len, &i, &declared) || i + 1 != len) {
		return refuse(c, -EBADMSG, "a binary hunk's size is not a number (PATCH binary rule)");
	}
	if (declared > PATCH_MAX_FILE_BYTES) {
		return refuse(c, -E2BIG, "a binary hunk larger than PATCH_MAX_FILE_BYTES (%zu bytes) (PATCH cap)",
			      PATCH_MAX_FILE_BYTES);
	}
	if (delta && forward && create) {
		return refuse(c, -EBADMSG, "a creation's binary hunk must be a literal (PATCH binary rule)");
	}
	c->pos += len;
	memset(&zs, 0, sizeof(zs));
	if (inflateInit(&zs) != Z_OK) {
		return -ENOMEM;
	}
	outbuf = malloc(65536);
	if (!outbuf) {
		inflateEnd(&zs);
		return -ENOMEM;
	}
	for (;;) {
		const uint8_t *s = c->p + c->pos;
		uint8_t dec[52];
		size_t maxb, nb;

		len = line_at(c, c->pos, &nl);
		if (!nl) {
			r = refuse(c, -EBADMSG, "the patch ends inside a binary hunk (truncated) (PATCH binary rule)");
			goto out;
		}
		if (len == 1) {
			c->pos += 1; /* the blank line that ends the hunk */
			break;
		}
		if (len < 7 || (len - 2) % 5 != 0 || len > 67) {
			goto corrupt;
		}
		maxb = (len - 2) / 5 * 4;
		if (s[0] >= 'A' && s[0] <= 'Z') {
			nb = (size_t)(s[0] - 'A' + 1);
		} else if (s[0] >= 'a' && s[0] <= 'z') {
			nb = (size_t)(s[0] - 'a' + 27);
		} else {
			goto corrupt;
		}
		if (maxb < nb || nb + 4 <= maxb) {
			goto corrupt;
		}
		if (!decode_85(s + 1, nb, dec)) {
			goto corrupt;
		}
		if (ended) {
			goto corrupt; /* data after the end of the zlib stream */
		}
		zs.next_in = dec;
		zs.avail_in = (uInt)nb;
		while (zs.avail_in > 0 && !ended) {
			zs.next_out = outbuf;
			zs.avail_out = 65536;
			zr = inflate(&zs, Z_NO_FLUSH);
			if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR) {
				goto corrupt;
			}
			{
				size_t got = 65536 - zs.avail_out;
				if (head_len < sizeof(head)) {
					size_t take = MIN(got, sizeof(head) - head_len);
					memcpy(head + head_len, outbuf, take);
					head_len += take;
				}
				total += got;
			}
			if (total > declared) {
				goto corrupt;
			}
			if (zr == Z_STREAM_END) {
				ended = true;
			} else if (zr == Z_BUF_ERROR && zs.avail_out != 0) {
				break; /* needs more input */
			}
		}
		if (ended && zs.avail_in > 0) {
			goto corrupt;
		}
		c->pos += len;
	}
	if (!ended || total != declared) {
		goto corrupt;
	}
	if (delta) {
		/* the delta's header: source size, result size (varints); the result is capped too */
		uint64_t v[2] = { 0, 0 };
		size_t at = 0;
		for (int k = 0; k < 2; k++) {
			unsigned shift = 0;
			for (;;) {
				if (at >= head_len || shift > 56) {
					goto corrupt;
				}
				v[k] |= (uint64_t)(head[at] & 0x7f) << shift;
				shift += 7;
				if (!(head[at++] & 0x80)) {
					break;
				}
			}
		}
		if (v[0] > PATCH_MAX_FILE_BYTES || v[1] > PATCH_MAX_FILE_BYTES) {
			r = refuse(c, -E2BIG,
				   "a binary delta's file is larger than PATCH_MAX_FILE_BYTES (%zu bytes) "
				   "(PATCH cap)",
				   PATCH_MAX_FILE_BYTES);
			goto out;
		}
	}
	r = 0;
	goto out;
corrupt:
	r = refuse(c, -EBADMSG,
		   "a corrupt binary hunk (bad base85 line, or its data does not inflate to exactly its declared "
		   "size) (PATCH binary rule)");
out:
	inflateEnd(&zs);
	free(outbuf);
	return r;
}

static int parse_binary(struct ctx *c, struct hdr *h, bool create)
{
	bool nl;
	size_t len;
	int r;

	if (!h->has_index || strlen(h->old_oid) != HEX_FULL) {
		return refuse(c, -EBADMSG,
			      "a binary patch without a full (40 hex) index line is refused: git cannot check it "
			      "(PATCH binary rule)");
	}
	c->pos += strlen("GIT binary patch\n");
	r = parse_binary_hunk(c, true, create);
	if (r < 0) {
		return r;
	}
	len = line_at(c, c->pos, &nl);
	if (starts(c->p + c->pos, len, "literal ") || starts(c->p + c->pos, len, "delta ")) {
		r = parse_binary_hunk(c, false, create);
		if (r < 0) {
			return r;
		}
	}
	return 0;
}

/* One section at c->pos (a "diff --git" line). */
static int parse_section(struct ctx *c, struct patch_file *f)
{
	struct hdr h = { 0 };
	size_t len, start = c->pos;
	bool nl, create, del;
	int r;

	r = header_line(c, &len);
	if (r < 0) {
		return r;
	}
	r = parse_diff_git(c, len, &f->path);
	c->path = f->path;
	if (r < 0) {
		return r;
	}
	c->pos += len;

	/* extended headers in git's order */
	len = line_at(c, c->pos, &nl);
	if (starts(c->p + c->pos, len, "old mode ")) {
		if ((r = header_line(c, &len)) < 0 ||
		    (r = parse_mode(c, c->p + c->pos + 9, len - 9, &h.old_mode)) < 0) {
			return r;
		}
		c->pos += len;
		len = line_at(c, c->pos, &nl);
		if (!starts(c->p + c->pos, len, "new mode ")) {
			return refuse(c, -EBADMSG, "\"old mode\" without \"new mode\" (PATCH mode rule)");
		}
		if ((r = header_line(c, &len)) < 0 ||
		    (r = parse_mode(c, c->p + c->pos + 9, len - 9, &h.new_mode)) < 0) {
			return r;
		}
		if (h.old_mode == h.new_mode) {
			return refuse(c, -EBADMSG, "\"old mode\" and \"new mode\" are the same (PATCH mode rule)");
		}
		if ((h.old_mode == PATCH_MODE_LINK) != (h.new_mode == PATCH_MODE_LINK)) {
			/* git would turn a symlink into a file holding its target, or a file into a link to its bytes */
			return refuse(
				c, -EBADMSG,
				"a mode change between a symlink and a file is refused (PATCH mode rule; git writes "
				"a type change as a deletion and a creation)");
		}
		h.old_mode_line = true;
		c->pos += len;
	} else if (starts(c->p + c->pos, len, "new file mode ")) {
		if ((r = header_line(c, &len)) < 0 ||
		    (r = parse_mode(c, c->p + c->pos + 14, len - 14, &h.new_mode)) < 0) {
			return r;
		}
		h.new_file = true;
		c->pos += len;
	} else if (starts(c->p + c->pos, len, "deleted file mode ")) {
		if ((r = header_line(c, &len)) < 0 ||
		    (r = parse_mode(c, c->p + c->pos + 18, len - 18, &h.old_mode)) < 0) {
			return r;
		}
		h.deleted = true;
		c->pos += len;
	}
	len = line_at(c, c->pos, &nl);
	if (starts(c->p + c->pos, len, "index ")) {
		if ((r = header_line(c, &len)) < 0 || (r = parse_index(c, c->p + c->pos + 6, len - 6, &h)) < 0) {
			return r;
		}
		if (h.index_mode && (h.old_mode_line || h.new_file || h.deleted)) {
			return refuse(c, -EBADMSG,
				      "a mode on the index line of a section that already names its modes (PATCH mode "
				      "rule)");
		}
		if ((h.new_file && !all_zero(h.old_oid)) || (h.deleted && !all_zero(h.new_oid)) ||
		    (!h.new_file && all_zero(h.old_oid)) || (!h.deleted && all_zero(h.new_oid))) {
			return refuse(c, -EBADMSG,
				      "the index line's zero object names do not match the creation/deletion lines "
				      "(PATCH format rule)");
		}
		c->pos += len;
	}
	create = h.new_file;
	del = h.deleted;
	f->op = create ? PATCH_CREATE : del ? PATCH_DELETE : PATCH_MODIFY;
	f->old_mode = h.old_mode_line || del ? h.old_mode : h.index_mode;
	f->new_mode = h.old_mode_line || create ? h.new_mode : h.index_mode;
	if (create) {
		f->old_mode = 0;
	}
	if (del) {
		f->new_mode = 0;
	}
	memcpy(f->old_oid, h.old_oid, sizeof(f->old_oid));
	memcpy(f->new_oid, h.new_oid, sizeof(f->new_oid));

	/* the body */
	len = line_at(c, c->pos, &nl);
	if (len == 0 || starts(c->p + c->pos, len, DIFF_GIT)) {
		if (h.old_mode_line && !h.has_index) {
			f->mode_only = true;
		} else if (!create && !del) {
			return refuse(
				c, -EBADMSG,
				"a section with no body must be a mode change alone (\"old mode\"/\"new mode\", no "
				"index line) (PATCH format rule)");
		} else if (!h.has_index || strcmp(create ? h.new_oid : h.old_oid, EMPTY_BLOB) != 0) {
			return refuse(
				c, -EBADMSG,
				"a creation or deletion without a body must be of an empty file, with git's full index "
				"line for it (PATCH format rule)");
		}
	} else if (starts(c->p + c->pos, len, "--- ")) {
		r = parse_text(c, f, create, del);
		if (r < 0) {
			return r;
		}
	} else if (line_is(c->p + c->pos, len, "GIT binary patch\n")) {
		if (f->old_mode == PATCH_MODE_LINK || f->new_mode == PATCH_MODE_LINK) {
			return refuse(c, -EBADMSG, "a binary patch of a symlink is refused (PATCH binary rule)");
		}
		r = parse_binary(c, &h, create);
		if (r < 0) {
			return r;
		}
		f->binary = true;
		len = line_at(c, c->pos, &nl);
		if (len != 0 && !starts(c->p + c->pos, len, DIFF_GIT)) {
			return refuse(
				c, -EBADMSG,
				"bytes after the binary hunks that are not a new \"diff --git\" section are refused "
				"(PATCH binary rule)");
		}
	} else {
		return hdr_refusal(c, c->p + c->pos, len);
	}
	f->off = start;
	f->len = c->pos - start;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A second section for one path, or a path under a symlink a section creates or changes. */
static int check_across(struct ctx *c, struct patch *pt)
{
	_cleanup_free_ const char **sorted = NULL;
	size_t n = pt->n_files;

	if (n < 2) {
		return 0;
	}
	sorted = malloc(n * sizeof(*sorted));
	if (!sorted) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		sorted[i] = pt->files[i].path;
	}
	qsort(sorted, n, sizeof(*sorted), cmp_str);
	for (size_t i = 1; i < n; i++) {
		if (strcmp(sorted[i - 1], sorted[i]) == 0) {
			c->section = 0;
			for (size_t k = 0, seen = 0; k < n; k++) {
				if (strcmp(pt->files[k].path, sorted[i]) == 0 && ++seen == 2) {
					c->section = k + 1;
				}
			}
			c->path = sorted[i];
			return refuse(c, -EBADMSG,
				      "a second section for the same path is refused (PATCH duplicate rule; a type "
				      "change is a deletion and a creation, which the box leaves out)");
		}
	}
	for (size_t k = 0; k < n; k++) {
		const struct patch_file *f = &pt->files[k];
		size_t pl = strlen(f->path), lo = 0, hi = n;
		/* a deleted link may give way to a directory of the same name (git writes exactly that) */
		if (f->new_mode != PATCH_MODE_LINK) {
			continue;
		}
		/* the first sorted path >= "P/" is the only candidate that may start with it */
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			int d = strncmp(sorted[mid], f->path, pl);
			if (d < 0 || (d == 0 && (unsigned char)sorted[mid][pl] < '/')) {
				lo = mid + 1;
			} else {
				hi = mid;
			}
		}
		if (lo < n && strncmp(sorted[lo], f->path, pl) == 0 && sorted[lo][pl] == '/') {
			for (size_t j = 0; j < n; j++) {
				if (pt->files[j].path == sorted[lo]) {
					c->section = j + 1;
				}
			}
			c->path = sorted[lo];
			return refuse(c, -EBADMSG,
				      "a path under a symlink another section of the patch writes is refused (PATCH "
				      "symlink rule)");
		}
	}
	return 0;
}

int patch_parse(const uint8_t *p, size_t n, struct patch *ret, char *diag, size_t diag_size)
{
	struct ctx c = { .p = p, .n = n, .diag = diag, .diag_size = diag_size };
	struct patch pt = { 0 };
	size_t alloc = 0;
	int r;

	if (diag && diag_size) {
		diag[0] = '\0';
	}
	if (!p && n) {
		return -EINVAL;
	}
	if (n > PATCH_MAX_BYTES) {
		return refuse(&c, -E2BIG, "the patch is larger than PATCH_MAX_BYTES (%zu bytes) (PATCH cap)",
			      PATCH_MAX_BYTES);
	}
	while (c.pos < n) {
		bool nl;
		size_t len = line_at(&c, c.pos, &nl);
		struct patch_file *f;

		c.section = pt.n_files + 1;
		c.path = NULL;
		if (!starts(p + c.pos, len, DIFF_GIT)) {
			/* git skips such text looking for a header, and could find a traditional one in it */
			r = refuse(&c, -EBADMSG,
				   pt.n_files == 0 ? "text before the first \"diff --git\" section is refused (PATCH "
						     "format rule)"
						   : "text between sections is refused (PATCH format rule)");
			goto fail;
		}
		if (pt.n_files == PATCH_MAX_FILES) {
			r = refuse(&c, -E2BIG, "the patch has more than PATCH_MAX_FILES (%d) sections (PATCH cap)",
				   PATCH_MAX_FILES);
			goto fail;
		}
		if (pt.n_files == alloc) {
			size_t na = alloc ? alloc * 2 : 16;
			struct patch_file *nf = realloc(pt.files, na * sizeof(*nf));
			if (!nf) {
				r = -ENOMEM;
				goto fail;
			}
			pt.files = nf;
			alloc = na;
		}
		f = &pt.files[pt.n_files++];
		memset(f, 0, sizeof(*f));
		r = parse_section(&c, f);
		if (r < 0) {
			goto fail;
		}
	}
	r = check_across(&c, &pt);
	if (r < 0) {
		goto fail;
	}
	pt.bytes = n;
	*ret = pt;
	return 0;
fail:
	patch_release(&pt);
	return r;
}
