/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "banned.h"
#include "image/ext4.h"
#include "image/workspace.h"
#include "io.h"
#include "log.h"
#include "path.h"

static bool ends_with(const char *s, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);
	return n >= k && strncasecmp(s + n - k, suffix, k) == 0;
}

static bool seg_is(const char *s, size_t n, const char *name)
{
	return strlen(name) == n && strncasecmp(s, name, n) == 0;
}

static bool is_example(const char *b, size_t n)
{
	static const char *const ok[] = { ".example", ".sample", ".template", ".dist", ".defaults", ".tmpl" };
	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		if (ends_with(b, n, ok[i])) {
			return true;
		}
	}
	return false;
}

const char *workspace_credential_rule(const char *rel)
{
	/* a directory anywhere in the path that holds credentials as a whole */
	static const char *const dirs[] = { ".ssh", ".aws", ".azure", ".gnupg", ".password-store", "credentials" };
	/* exact file names */
	static const char *const names[] = {
		".netrc",
		"_netrc",
		".npmrc",
		".pypirc",
		".git-credentials",
		".htpasswd",
		".pgpass",
		".my.cnf",
		".boto",
		".s3cfg",
		".dockercfg",
		".vault-token",
		".yarnrc",
		".gem-credentials",
		"kubeconfig",
		"application_default_credentials.json",
		"credentials.toml",
		"credentials", /* .aws/credentials, .cargo/credentials, a bare credentials file anywhere */
		"auth.json", /* Composer, podman/skopeo/containers registry logins */
		".terraformrc",
		"terraform.rc",
		"rclone.conf",
		".bash_history",
		".zsh_history",
		".psql_history",
		".mysql_history",
	};
	/* file name suffixes */
	static const char *const suffixes[] = {
		".pem",	     ".key",	     ".p12",	    ".pfx",	".jks",
		".keystore", ".ppk",	     ".kdbx",	    ".tfstate", ".tfstate.backup",
		".tfvars",   ".tfvars.json", ".kubeconfig",
	};
	static const char *const ssh_keys[] = { "id_rsa",      "id_dsa",	"id_ecdsa", "id_ed25519",
						"id_ecdsa_sk", "id_ed25519_sk", "identity" };
	const char *segs[PATH_MAX_DEPTH + 1];
	size_t lens[PATH_MAX_DEPTH + 1], ns = 0;
	const char *b;
	size_t bn;

	for (const char *p = rel; *p && ns <= PATH_MAX_DEPTH;) {
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		segs[ns] = p;
		lens[ns++] = n;
		p = e ? e + 1 : p + n;
	}
	if (ns == 0) {
		return NULL;
	}
	for (size_t i = 0; i + 1 < ns; i++) {
		for (size_t k = 0; k < ARRAY_SIZE(dirs); k++) {
			if (seg_is(segs[i], lens[i], dirs[k])) {
				return dirs[k];
			}
		}
		if (seg_is(segs[i], lens[i], ".config") && seg_is(segs[i + 1], lens[i + 1], "gcloud") && i + 2 < ns) {
			return ".config/gcloud/";
		}
	}
	b = segs[ns - 1];
	bn = lens[ns - 1];
	if (ns >= 2 && seg_is(segs[ns - 2], lens[ns - 2], ".docker") && seg_is(b, bn, "config.json")) {
		return ".docker/config.json";
	}
	if (ns >= 2 && seg_is(segs[ns - 2], lens[ns - 2], ".kube") && seg_is(b, bn, "config")) {
		return ".kube/config";
	}
	if (ns >= 3 && seg_is(segs[ns - 3], lens[ns - 3], ".config") && seg_is(segs[ns - 2], lens[ns - 2], "gh") &&
	    seg_is(b, bn, "hosts.yml")) {
		return ".config/gh/hosts.yml";
	}
	if (ns >= 2 && seg_is(segs[ns - 2], lens[ns - 2], ".m2") &&
	    (seg_is(b, bn, "settings.xml") || seg_is(b, bn, "settings-security.xml"))) {
		return ".m2/settings.xml";
	}
	if (ns >= 2 && seg_is(segs[ns - 2], lens[ns - 2], ".gradle") && seg_is(b, bn, "gradle.properties")) {
		return ".gradle/gradle.properties";
	}
	if (bn >= 4 && strncasecmp(b, ".env", 4) == 0 && !is_example(b, bn)) {
		return ".env*";
	}
	for (size_t k = 0; k < ARRAY_SIZE(names); k++) {
		if (seg_is(b, bn, names[k])) {
			return names[k];
		}
	}
	for (size_t k = 0; k < ARRAY_SIZE(suffixes); k++) {
		if (ends_with(b, bn, suffixes[k])) {
			return suffixes[k];
		}
	}
	for (size_t k = 0; k < ARRAY_SIZE(ssh_keys); k++) {
		size_t kl = strlen(ssh_keys[k]);
		if (bn >= kl && strncasecmp(b, ssh_keys[k], kl) == 0 && !ends_with(b, bn, ".pub") &&
		    (bn == kl || b[kl] == '.' || b[kl] == '_' || b[kl] == '-')) {
			return "id_* (SSH private key)";
		}
	}
	if (ends_with(b, bn, ".json") &&
	    (memmem(b, bn, "credentials", 11) || memmem(b, bn, "client_secret", 13) ||
	     memmem(b, bn, "service-account", 15) || memmem(b, bn, "service_account", 15))) {
		return "*credentials*.json";
	}
	return NULL;
}

const char workspace_link_to_credential[] = "symbolic link to a credential file";

const char *workspace_link_rule(const char *rel, const char *target)
{
	_cleanup_free_ char *res = NULL, *probe = NULL;
	const char *slash = strrchr(rel, '/'), *rule;
	size_t len = slash ? (size_t)(slash - rel) : 0;

	if (target[0] == '\0') {
		return "symbolic link with an empty target";
	}
	if (target[0] == '/') {
		return "symbolic link to an absolute path (its target would show a host path in the box)";
	}
	for (const char *p = target; *p; p++) {
		if ((unsigned char)*p < 0x20 || *p == 0x7f) {
			return "symbolic link whose target has a control character";
		}
	}
	res = malloc(strlen(rel) + strlen(target) + 2);
	if (!res) {
		return "symbolic link left out (out of memory)";
	}
	/* rel passed path_verify: its directory part has no "", "." or ".." segment */
	memcpy(res, rel, len);
	for (const char *p = target; *p;) {
		const char *e = strchr(p, '/');
		size_t k = e ? (size_t)(e - p) : strlen(p);
		if (k == 2 && p[0] == '.' && p[1] == '.') {
			char *up;
			if (len == 0) {
				return "symbolic link that leaves the checkout (its target would show host paths in "
				       "the box)";
			}
			res[len] = '\0';
			up = strrchr(res, '/');
			len = up ? (size_t)(up - res) : 0;
		} else if (k > 0 && !(k == 1 && p[0] == '.')) {
			if (len > 0) {
				res[len++] = '/';
			}
			memcpy(res + len, p, k);
			len += k;
		}
		p += k + (e ? 1 : 0);
	}
	res[len] = '\0';
	for (const char *s = res; s; s = strchr(s, '/') ? strchr(s, '/') + 1 : NULL) {
		if (strncmp(s, ".git", 4) == 0 && (s[4] == '/' || s[4] == '\0')) {
			return "symbolic link into .git (not in the workspace)";
		}
	}
	/* the target as a file, and as a directory whose contents are credentials (.ssh, credentials/) */
	rule = len > 0 ? workspace_credential_rule(res) : NULL;
	if (!rule && asprintf(&probe, "%s%s_", res, len > 0 ? "/" : "") >= 0) {
		rule = workspace_credential_rule(probe);
	}
	if (rule) {
		return workspace_link_to_credential;
	}
	return NULL;
}

/* The armor header lines of a PGP private key (RFC 4880 and PGP 2.x's "SECRET"). */
static const char *const pgp_private_marks[] = { "-----BEGIN PGP PRIVATE KEY BLOCK-----",
						 "-----BEGIN PGP SECRET KEY BLOCK-----" };
#define PGP_MARK_MAX 37 /* the longer mark */

/* Looks for a mark across read() boundaries: the tail of what was seen plus the head of each new chunk. */
struct pgp_scan {
	uint8_t tail[PGP_MARK_MAX - 1];
	size_t n;
	bool found;
};

static void pgp_scan_feed(struct pgp_scan *s, const uint8_t *p, size_t n)
{
	uint8_t edge[2 * (PGP_MARK_MAX - 1)];
	size_t k = MIN(n, (size_t)PGP_MARK_MAX - 1), ne = s->n + k, keep;

	if (s->found) {
		return;
	}
	memcpy(edge, s->tail, s->n);
	memcpy(edge + s->n, p, k);
	for (size_t i = 0; i < ARRAY_SIZE(pgp_private_marks); i++) {
		const char *m = pgp_private_marks[i];
		s->found = s->found || memmem(edge, ne, m, strlen(m)) || memmem(p, n, m, strlen(m));
	}
	if (n >= PGP_MARK_MAX - 1) {
		memcpy(s->tail, p + n - (PGP_MARK_MAX - 1), PGP_MARK_MAX - 1);
		s->n = PGP_MARK_MAX - 1;
	} else {
		keep = MIN(ne, (size_t)PGP_MARK_MAX - 1);
		memmove(s->tail, edge + ne - keep, keep);
		s->n = keep;
	}
}

static void notice(const struct workspace_opts *o, const char *rel, const char *why)
{
	if (o->notice) {
		o->notice(o->userdata, rel, why);
	}
}

struct ws_meta {
	int stagefd;
	uint32_t uid, gid;
};

static bool ws_meta_cb(void *ud, const char *rel, struct flatten_meta *ret)
{
	struct ws_meta *m = ud;
	struct stat st;
	if (fstatat(m->stagefd, rel[0] ? rel : ".", &st, AT_SYMLINK_NOFOLLOW) < 0) {
		return false;
	}
	*ret = (struct flatten_meta){ .uid = m->uid, .gid = m->gid, .mode = (uint32_t)st.st_mode };
	return true;
}

/* ---- the workspace check: secret values in paths, symlink targets and content ---- */

#define WS_SCAN_TAIL 4095 /* the longest value (4096) less one: what a match across reads can have seen already */

/* The secret whose value p[0..n) holds, or NULL. */
static const struct workspace_secret *ws_secret_in(const struct workspace_opts *o, const void *p, size_t n)
{
	for (size_t i = 0; i < o->n_secrets; i++) {
		const struct workspace_secret *x = &o->secrets[i];
		if (x->len && n >= x->len && memmem(p, n, x->value, x->len)) {
			return x;
		}
	}
	return NULL;
}

/* A file's content as it streams by: the last bytes of the previous reads are kept for a match across them. */
struct ws_scan {
	uint8_t tail[WS_SCAN_TAIL];
	size_t tail_len;
	uint8_t win[2 * WS_SCAN_TAIL];
};

static const struct workspace_secret *ws_scan_feed(const struct workspace_opts *o, struct ws_scan *sc, const uint8_t *p,
						   size_t n)
{
	const struct workspace_secret *hit;
	size_t head = MIN(n, (size_t)WS_SCAN_TAIL), keep;

	if (o->n_secrets == 0 || n == 0) {
		return NULL;
	}
	/* across the boundary: the tail, then the chunk's first bytes */
	memcpy(sc->win, sc->tail, sc->tail_len);
	memcpy(sc->win + sc->tail_len, p, head);
	hit = ws_secret_in(o, sc->win, sc->tail_len + head);
	if (!hit) {
		hit = ws_secret_in(o, p, n);
	}
	/* the new tail: the last WS_SCAN_TAIL bytes of tail + chunk */
	if (n >= WS_SCAN_TAIL) {
		memcpy(sc->tail, p + n - WS_SCAN_TAIL, WS_SCAN_TAIL);
		sc->tail_len = WS_SCAN_TAIL;
	} else {
		keep = MIN(sc->tail_len, (size_t)WS_SCAN_TAIL - n);
		memmove(sc->tail, sc->tail + sc->tail_len - keep, keep);
		memcpy(sc->tail + keep, p, n);
		sc->tail_len = keep + n;
	}
	return hit;
}

static int ws_secret_refuse(const struct workspace_opts *o, const char *rel, const struct workspace_secret *x)
{
	char q[LOG_QUOTE_BUFSIZE];

	if (rel) {
		image_diag_set(o->diag,
			       "workspace file %s holds the value of secret %s (rule " WORKSPACE_SECRET_RULE
			       "); remove it from the checkout (or make git ignore it), or bind another secret",
			       log_quote(rel, strlen(rel), q), x->name);
	} else {
		image_diag_set(o->diag,
			       "a workspace path holds the value of secret %s (rule " WORKSPACE_SECRET_RULE
			       "); rename it, or make git ignore it",
			       x->name);
	}
	if (o->ret_rule) {
		*o->ret_rule = WORKSPACE_SECRET_RULE;
	}
	return -EACCES;
}

/* The parents of rel beneath stagefd, not rel itself. */
static int mkparents(int stagefd, const char *rel)
{
	_cleanup_free_ char *p = strdup(rel);
	char *slash;

	if (!p) {
		return -ENOMEM;
	}
	slash = strrchr(p, '/');
	if (!slash) {
		return 0;
	}
	*slash = '\0';
	return io_mkdir_p(stagefd, p, 0755);
}

static int copy_one(const struct workspace_opts *o, int srcfd, int stagefd, const char *rel, struct workspace_stats *st,
		    uint64_t max_bytes)
{
	_cleanup_free_ char *parent = NULL;
	_cleanup_close_ int pfd = -1, in = -1, out = -1;
	const char *slash = strrchr(rel, '/'), *base = slash ? slash + 1 : rel, *why;
	/* an .asc file is copied unless it holds a private key block (a public key may stay) */
	bool asc = ends_with(base, strlen(base), ".asc");
	struct pgp_scan pgp = { 0 };
	const struct workspace_secret *hit;
	_cleanup_free_ struct ws_scan *scan = NULL;
	uint64_t copied = 0;
	struct stat s;
	int r;

	parent = slash ? strndup(rel, (size_t)(slash - rel)) : strdup(".");
	if (!parent) {
		return -ENOMEM;
	}
	/* the parent is opened without following any symlink: a listed path never leads out of the checkout */
	pfd = strcmp(parent, ".") == 0 ? fcntl(srcfd, F_DUPFD_CLOEXEC, 3)
				       : safe_openat(srcfd, parent, O_RDONLY | O_DIRECTORY, 0);
	if (pfd < 0) {
		notice(o, rel, pfd == -ELOOP ? "parent is a symbolic link" : "cannot open its directory");
		st->skipped++;
		return 0;
	}
	if (fstatat(pfd, base, &s, AT_SYMLINK_NOFOLLOW) < 0) {
		st->skipped++; /* listed by git but deleted since */
		return 0;
	}
	if (S_ISLNK(s.st_mode)) {
		char target[PATH_MAX_LEN + 1];
		ssize_t n = readlinkat(pfd, base, target, sizeof(target));
		if (n < 0 || (size_t)n >= sizeof(target)) {
			notice(o, rel, "unreadable or over-long symbolic link");
			st->skipped++;
			return 0;
		}
		target[n] = '\0';
		if ((hit = ws_secret_in(o, target, (size_t)n))) {
			return ws_secret_refuse(o, rel, hit);
		}
		why = workspace_link_rule(rel, target);
		if (why) {
			notice(o, rel, why);
			if (why == workspace_link_to_credential) {
				st->credentials++;
			} else {
				st->skipped++;
			}
			return 0;
		}
		if ((r = mkparents(stagefd, rel)) < 0) {
			return r;
		}
		if (symlinkat(target, stagefd, rel) < 0) {
			return negative_errno();
		}
		st->symlinks++;
		return 0;
	}
	if (!S_ISREG(s.st_mode)) {
		notice(o, rel,
		       S_ISDIR(s.st_mode) ? "a directory (submodule or nested repository)" : "not a regular file");
		st->skipped++;
		return 0;
	}
	in = openat(pfd, base, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0) {
		notice(o, rel, "unreadable");
		st->skipped++;
		return 0;
	}
	if ((r = mkparents(stagefd, rel)) < 0) {
		return r;
	}
	out = openat(stagefd, rel, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		     (s.st_mode & S_IXUSR) ? 0755 : 0644);
	if (out < 0) {
		return negative_errno();
	}
	/* umask may have narrowed it; the image wants exactly 0644/0755 */
	if (fchmod(out, (s.st_mode & S_IXUSR) ? 0755 : 0644) < 0) {
		return negative_errno();
	}
	if (o->n_secrets && !(scan = calloc(1, sizeof(*scan)))) {
		return -ENOMEM;
	}
	for (;;) {
		uint8_t tmp[65536];
		ssize_t n = RETRY_EINTR(read(in, tmp, sizeof(tmp)));
		if (n < 0) {
			return negative_errno();
		}
		if (n == 0) {
			break;
		}
		if (asc) {
			pgp_scan_feed(&pgp, tmp, (size_t)n);
		}
		if (scan && (hit = ws_scan_feed(o, scan, tmp, (size_t)n))) {
			return ws_secret_refuse(o, rel, hit);
		}
		copied += (uint64_t)n;
		st->bytes += (uint64_t)n;
		if (st->bytes > max_bytes) {
			image_diag_set(o->diag, "workspace larger than WORKSPACE_MAX_BYTES (%llu bytes)",
				       (unsigned long long)max_bytes);
			return -EFBIG;
		}
		for (ssize_t off = 0; off < n;) {
			ssize_t w = RETRY_EINTR(write(out, tmp + off, (size_t)(n - off)));
			if (w < 0) {
				return negative_errno();
			}
			off += w;
		}
	}
	if (pgp.found) {
		/* .asc with a private key block: found while copying, so the copy goes again */
		(void)unlinkat(stagefd, rel, 0);
		st->bytes -= copied;
		notice(o, rel, "*.asc (PGP private key block)");
		st->credentials++;
		return 0;
	}
	st->files++;
	return 0;
}

static int run_git(const struct workspace_opts *o, const char *dir, const char *home, struct buf *out)
{
	_cleanup_free_ char *git = NULL, *safe = NULL, *env_home = NULL, *env_xdg = NULL;
	_cleanup_buf_ struct buf *err = NULL;
	int r = image_find_program("git", &git);
	if (r < 0) {
		image_diag_set(o->diag, "git not found");
		return r;
	}
	if (asprintf(&safe, "safe.directory=%s", dir) < 0 || asprintf(&env_home, "HOME=%s", home) < 0 ||
	    asprintf(&env_xdg, "XDG_CONFIG_HOME=%s", home) < 0) {
		return -ENOMEM;
	}
	r = buf_new(16 << 10, 0, &err);
	if (r < 0) {
		return r;
	}
	{
		char *argv[] = { git,
				 "-c",
				 "core.fsmonitor=false",
				 "-c",
				 "core.hooksPath=/dev/null",
				 "-c",
				 "core.untrackedCache=false",
				 "-c",
				 safe,
				 "--no-pager",
				 "-C",
				 (char *)dir,
				 "ls-files",
				 "-z",
				 "--cached",
				 "--others",
				 "--exclude-standard",
				 NULL };
		char *envp[] = { "PATH=/usr/bin:/bin",
				 env_home,
				 env_xdg,
				 "GIT_CONFIG_NOSYSTEM=1",
				 "GIT_CONFIG_GLOBAL=/dev/null",
				 "GIT_TERMINAL_PROMPT=0",
				 "GIT_PAGER=cat",
				 "PAGER=cat",
				 "GIT_OPTIONAL_LOCKS=0",
				 "LC_ALL=C",
				 NULL };
		r = image_run(argv, envp, NULL, out, err);
	}
	if (r == -E2BIG) {
		image_diag_set(o->diag, "git's file list is larger than WORKSPACE_MAX_LISTING");
		return r;
	}
	if (r != 0) {
		char q[LOG_QUOTE_BUFSIZE];
		image_diag_set(o->diag, "git ls-files failed (%d): %s", r, log_quote(buf_ptr(err), buf_len(err), q));
		return r < 0 ? r : -EIO;
	}
	return 0;
}

static void refused_by(const struct workspace_opts *o, const char *rule)
{
	if (o->ret_rule) {
		*o->ret_rule = rule;
	}
}

/*
 * A new directory beside o->out named PREFIX-XXXXXX (the out directory is the
 * only one a confined builder may write: git's HOME goes there too, not to
 * /tmp). *ret_path and *ret_fd on success.
 */
static int mkdtemp_beside(const char *outdir, const char *prefix, char **ret_path, int *ret_fd)
{
	_cleanup_free_ char *p = NULL;
	int fd;

	if (asprintf(&p, "%s%s-XXXXXX", outdir, prefix) < 0) {
		return -ENOMEM;
	}
	if (!mkdtemp(p)) {
		return negative_errno();
	}
	*ret_path = steal_ptr(p);
	fd = open(*ret_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fchmod(fd, 0755) < 0) {
		int r = negative_errno();
		if (fd >= 0) {
			(void)close(fd);
		}
		return r;
	}
	*ret_fd = fd;
	return 0;
}

int workspace_build(const struct workspace_opts *o, struct workspace_stats *ret)
{
	struct workspace_stats st = { 0 };
	uint64_t max_files = o->max_files ? o->max_files : WORKSPACE_MAX_FILES;
	uint64_t max_bytes = o->max_bytes ? o->max_bytes : WORKSPACE_MAX_BYTES;
	_cleanup_free_ char *dir = NULL, *stage = NULL, *outdir = NULL, *home = NULL;
	_cleanup_buf_ struct buf *list = NULL;
	_cleanup_close_ int srcfd = -1, stagefd = -1, homefd = -1;
	uint64_t listed = 0;
	struct ws_meta wm;
	int r;

	refused_by(o, NULL);
	dir = realpath(o->dir, NULL);
	if (!dir) {
		r = negative_errno();
		image_diag_set(o->diag, "workspace directory: %s", tk_strerror(r));
		return r;
	}
	srcfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (srcfd < 0) {
		return negative_errno();
	}
	{
		const char *slash = strrchr(o->out, '/');
		outdir = slash ? strndup(o->out, (size_t)(slash - o->out) + 1) : strdup("./");
		if (!outdir) {
			return -ENOMEM;
		}
	}
	r = mkdtemp_beside(outdir, ".tkbox-ws-home", &home, &homefd);
	if (r < 0) {
		image_diag_set(o->diag, "cannot make git's empty HOME beside %s: %s", o->out, tk_strerror(r));
		goto out;
	}
	r = buf_new(WORKSPACE_MAX_LISTING, 0, &list);
	if (r < 0) {
		goto out;
	}
	r = run_git(o, dir, home, list);
	if (r < 0) {
		refused_by(o, r == -E2BIG ? "WORKSPACE_MAX_LISTING" : "git ls-files");
		goto out;
	}
	r = mkdtemp_beside(outdir, ".tkbox-ws", &stage, &stagefd);
	if (r < 0) {
		goto out;
	}
	for (const char *p = (const char *)buf_ptr(list), *end = p + buf_len(list); p < end;) {
		const char *z = memchr(p, '\0', (size_t)(end - p));
		size_t n = z ? (size_t)(z - p) : (size_t)(end - p);
		_cleanup_free_ char *rel = strndup(p, n);
		const char *rule;
		bool ctl = false, git = false;
		p += n + 1;
		if (!rel) {
			r = -ENOMEM;
			goto out;
		}
		/* before anything names the path (a notice, the answer's left_out, the daemon's log) */
		if (ws_secret_in(o, rel, n)) {
			r = ws_secret_refuse(o, NULL, ws_secret_in(o, rel, n));
			goto out;
		}
		if (++listed > max_files) {
			image_diag_set(o->diag, "workspace has more than WORKSPACE_MAX_FILES (%llu) files",
				       (unsigned long long)max_files);
			refused_by(o, "WORKSPACE_MAX_FILES");
			r = -E2BIG;
			goto out;
		}
		for (size_t i = 0; i < n; i++) {
			ctl = ctl || (unsigned char)rel[i] < 0x20 || rel[i] == 0x7f;
		}
		for (const char *s = rel; s; s = strchr(s, '/') ? strchr(s, '/') + 1 : NULL) {
			git = git || (strncmp(s, ".git", 4) == 0 && (s[4] == '/' || s[4] == '\0'));
		}
		if (ctl || path_verify(rel, n) < 0) {
			notice(o, rel, "unusable name");
			st.skipped++;
			continue;
		}
		if (git) {
			notice(o, rel, ".git");
			st.skipped++;
			continue;
		}
		rule = workspace_credential_rule(rel);
		if (rule) {
			notice(o, rel, rule);
			st.credentials++;
			continue;
		}
		r = copy_one(o, srcfd, stagefd, rel, &st, max_bytes);
		if (r == -EFBIG) {
			refused_by(o, "WORKSPACE_MAX_BYTES");
		}
		if (r < 0) {
			if (!o->diag || !o->diag->msg[0]) {
				char q[LOG_QUOTE_BUFSIZE];
				image_diag_set(o->diag, "copying %s: %s", log_quote(rel, strlen(rel), q),
					       tk_strerror(r));
			}
			goto out;
		}
		if (o->progress) {
			o->progress(o->userdata, "copy", st.files, st.bytes);
		}
	}
	if (o->progress) {
		o->progress(o->userdata, "ext4", st.files, st.bytes);
	}
	wm = (struct ws_meta){ .stagefd = stagefd, .uid = o->uid, .gid = o->gid };
	r = ext4_build(stage, o->out, "tkbox-ws", ws_meta_cb, &wm, NULL, o->diag);
	if (r >= 0) {
		*ret = st;
	} else {
		refused_by(o, "ext4 build");
	}
out:
	for (int i = 0; i < 2; i++) {
		const char *d = i == 0 ? stage : home;
		int tfd = d ? open(outdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
		if (tfd >= 0) {
			(void)image_rm_rf_at(tfd, strrchr(d, '/') ? strrchr(d, '/') + 1 : d);
			(void)close(tfd);
		}
	}
	return r;
}
