/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "banned.h"
#include "egress/preset.h"
#include "strv.h"

/*
 * The presets of the reference's Table 5. The fixed ones name their hosts
 * here; debian, apt-ubuntu, npm, pypi and go-proxy name none: their hosts come
 * from the image's own files (and the box's environment) at box creation.
 */
struct preset {
	const char *name;
	const char *const *hosts; /* NULL-terminated, or NULL */
	unsigned needs; /* EGRESS_NEED_* */
	const char *warn; /* or NULL */
};

/* The site, its API, archives (codeload), raw files, release assets and Git LFS objects. */
static const char *const github_hosts[] = {
	"github.com",
	"api.github.com",
	"codeload.github.com",
	"raw.githubusercontent.com",
	"objects.githubusercontent.com",
	"release-assets.githubusercontent.com",
	"github-releases.githubusercontent.com",
	"media.githubusercontent.com",
	"github-cloud.githubusercontent.com",
	NULL,
};
static const char *const anthropic_hosts[] = { "api.anthropic.com", NULL };
static const char *const openai_hosts[] = { "api.openai.com", NULL };
static const char *const claude_code_hosts[] = { "api.anthropic.com", "statsig.anthropic.com", NULL };

static const struct preset presets[] = {
	{ "pypi", NULL, EGRESS_NEED_PIP, NULL },
	{ "npm", NULL, EGRESS_NEED_NPM, NULL },
	{ "github", github_hosts, 0, NULL },
	{ "anthropic", anthropic_hosts, 0, NULL },
	{ "openai", openai_hosts, 0, NULL },
	{ "claude-code", claude_code_hosts, 0, NULL },
	{ "debian", NULL, EGRESS_NEED_APT, NULL },
	{ "apt-ubuntu", NULL, EGRESS_NEED_APT, NULL },
	{ "go-proxy", NULL, EGRESS_NEED_GO,
	  "the go-proxy preset allows a module proxy that fetches on the box's behalf: through it the box can make "
	  "the proxy contact any host a module path names, and carry data there in the path" },
};

/* The box's warnings when the image's GOPROXY holds `direct` (policy->go_direct). */
#define GO_DIRECT_WARN                                                                                                 \
	"the image's GOPROXY lists `direct`: a module its proxies do not serve is fetched from the module's own "      \
	"host, which the go-proxy preset does not allow; allow such hosts with their own --allow HOST"

#define FORMS                                                                                                          \
	"the forms: host, host:port, *.example.com[:port], or a preset: pypi, npm, github, anthropic, openai, "        \
	"claude-code, debian, apt-ubuntu, go-proxy"

static const struct preset *preset_find(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(presets); i++) {
		if (strcmp(presets[i].name, name) == 0) {
			return &presets[i];
		}
	}
	return NULL;
}

static const struct preset *preset_find_case(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(presets); i++) {
		if (strcasecmp(presets[i].name, name) == 0) {
			return &presets[i];
		}
	}
	return NULL;
}

bool egress_preset_known(const char *name)
{
	return name && preset_find(name) != NULL;
}

/* A value as it may be shown back: at most 80 bytes, anything but printable ASCII as '?'. */
static void show_value(const char *v, char out[84])
{
	size_t i = 0;

	for (; v[i] && i < 80; i++) {
		out[i] = v[i] >= 0x20 && v[i] < 0x7f ? v[i] : '?';
	}
	if (v[i]) {
		memcpy(out + i, "...", 3);
		i += 3;
	}
	out[i] = '\0';
}

/* ---------------------------------------------------------------- entries */

void egress_allow_format(const struct egress_allow *e, char out[EGRESS_ENTRY_TEXT_MAX])
{
	bool v6 = e->host.kind == EGRESS_HOST_ADDR && e->host.addr.family == 6;
	char port[8] = "";

	if (e->port) {
		(void)snprintf(port, sizeof(port), ":%u", (unsigned)e->port);
	}
	(void)snprintf(out, EGRESS_ENTRY_TEXT_MAX, "%s%s%s%s%s", e->wildcard ? "*." : "", v6 ? "[" : "", e->host.name,
		       v6 ? "]" : "", port);
}

static bool allow_equal(const struct egress_allow *a, const struct egress_allow *b)
{
	return a->wildcard == b->wildcard && a->port == b->port && a->host.kind == b->host.kind &&
	       strcmp(a->host.name, b->host.name) == 0;
}

/* The expanded list being built: duplicates dropped, at most EGRESS_MAX_ALLOW. */
struct alist {
	struct egress_allow *v;
	size_t n, cap;
};

static int alist_add(struct alist *l, const struct egress_allow *e)
{
	for (size_t i = 0; i < l->n; i++) {
		if (allow_equal(&l->v[i], e)) {
			return 0;
		}
	}
	if (l->n >= EGRESS_MAX_ALLOW) {
		return -E2BIG;
	}
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct egress_allow *v = reallocarray(l->v, cap, sizeof(*v));
		if (!v) {
			return -ENOMEM;
		}
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = *e;
	return 0;
}

static int alist_add_text(struct alist *l, const char *text)
{
	struct egress_allow e;
	int r = egress_allow_parse(text, &e);

	return r < 0 ? -EINVAL : alist_add(l, &e);
}

int egress_url_entry(const char *url, size_t n, char out[EGRESS_ENTRY_TEXT_MAX])
{
	struct egress_allow e = { 0 };
	struct egress_allow check;
	size_t a, end, at;
	uint16_t dflt;
	int r;

	if (n >= 8 && strncasecmp(url, "https://", 8) == 0) {
		a = 8;
		dflt = 443;
	} else if (n >= 7 && strncasecmp(url, "http://", 7) == 0) {
		a = 7;
		dflt = 80;
	} else {
		return -EBADMSG;
	}
	for (end = a; end < n && url[end] != '/' && url[end] != '?' && url[end] != '#'; end++) {
	}
	/* userinfo (a mirror's login) is not part of the host */
	for (at = end; at > a && url[at - 1] != '@'; at--) {
	}
	r = egress_hostport_parse(url + at, end - at, &e.host, &e.port);
	if (r < 0) {
		return -EBADMSG;
	}
	/* A one-label name ("intranet") is what a host's search domains would complete: never from an image. */
	if (e.host.kind == EGRESS_HOST_NAME && !strchr(e.host.name, '.')) {
		return -EBADMSG;
	}
	if (e.port == dflt) {
		e.port = 0; /* a host entry covers 80 and 443 already */
	}
	egress_allow_format(&e, out);
	return egress_allow_parse(out, &check) < 0 ? -EBADMSG : 0;
}

/* ---------------------------------------------------------------- apt sources */

static bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

static const char *skip_ws(const char *p, const char *end)
{
	while (p < end && is_ws(*p)) {
		p++;
	}
	return p;
}

static const char *token_end(const char *p, const char *end)
{
	while (p < end && !is_ws(*p)) {
		p++;
	}
	return p;
}

static const char *line_end(const char *p)
{
	const char *e = strchr(p, '\n');
	return e ? e : p + strlen(p);
}

static bool token_is(const char *p, const char *e, const char *word)
{
	return (size_t)(e - p) == strlen(word) && strncmp(p, word, (size_t)(e - p)) == 0;
}

/* One URI of a source: http(s) gives an entry, any other scheme is skipped. */
static int apt_uri(const char *p, const char *e, int (*fn)(const char *entry, void *arg), void *arg)
{
	char entry[EGRESS_ENTRY_TEXT_MAX];

	if (egress_url_entry(p, (size_t)(e - p), entry) < 0) {
		return 0;
	}
	return fn(entry, arg);
}

/* "deb [opts] uri suite [component...]"; comments from '#'. A line without a suite is skipped. */
static int apt_one_line(const char *p, const char *end, int (*fn)(const char *entry, void *arg), void *arg)
{
	const char *hash = memchr(p, '#', (size_t)(end - p));
	const char *t, *uri, *uri_end;

	end = hash ? hash : end;
	p = skip_ws(p, end);
	t = token_end(p, end);
	if (!token_is(p, t, "deb") && !token_is(p, t, "deb-src")) {
		return 0;
	}
	p = skip_ws(t, end);
	if (p < end && *p == '[') {
		const char *close = memchr(p, ']', (size_t)(end - p));
		if (!close) {
			return 0;
		}
		p = skip_ws(close + 1, end);
	}
	uri = p;
	uri_end = token_end(uri, end);
	p = skip_ws(uri_end, end);
	if (uri == uri_end || p == end) {
		return 0; /* no URI, or no suite */
	}
	return apt_uri(uri, uri_end, fn, arg);
}

/* Is [p, e) a deb822 "Field:" line? *ret_colon is the colon. */
static bool field_line(const char *p, const char *e, const char **ret_colon)
{
	const char *q = p;

	while (q < e && ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
			 (*q == '-' && q > p))) {
		q++;
	}
	if (q == p || q == e || *q != ':') {
		return false;
	}
	*ret_colon = q;
	return true;
}

struct stanza {
	const char *uris; /* where the URIs value starts, or NULL */
	bool bad, disabled, has_type;
};

/* The URIs of a stanza: its value, then its continuation lines (comment lines between them skipped). */
static int stanza_emit(const struct stanza *s, int (*fn)(const char *entry, void *arg), void *arg)
{
	const char *p = s->uris, *end;
	int r;

	if (!s->uris || s->bad || s->disabled || !s->has_type) {
		return 0;
	}
	end = line_end(p);
	for (;;) {
		p = skip_ws(p, end);
		while (p < end) {
			const char *t = token_end(p, end);
			r = apt_uri(p, t, fn, arg);
			if (r < 0) {
				return r;
			}
			p = skip_ws(t, end);
		}
		if (!*end) {
			return 0;
		}
		p = end + 1;
		end = line_end(p);
		while (*p == '#') {
			if (!*end) {
				return 0;
			}
			p = end + 1;
			end = line_end(p);
		}
		if (!is_ws(*p) || skip_ws(p, end) == end) {
			return 0; /* the next field or the end of the stanza */
		}
	}
}

static void stanza_field(struct stanza *s, const char *name, size_t nn, const char *v, const char *end)
{
	const char *ve;

	v = skip_ws(v, end);
	ve = end;
	while (ve > v && is_ws(ve[-1])) {
		ve--;
	}
	if (nn == 4 && strncasecmp(name, "URIs", 4) == 0) {
		s->bad = s->bad || s->uris != NULL; /* a field twice: apt refuses the file */
		s->uris = v;
	} else if (nn == 7 && strncasecmp(name, "Enabled", 7) == 0) {
		if ((size_t)(ve - v) == 2 && strncasecmp(v, "no", 2) == 0) {
			s->disabled = true;
		} else if (!((size_t)(ve - v) == 3 && strncasecmp(v, "yes", 3) == 0)) {
			s->bad = true;
		}
	} else if (nn == 5 && strncasecmp(name, "Types", 5) == 0) {
		while (v < ve) {
			const char *t = token_end(v, ve);
			s->has_type = s->has_type || token_is(v, t, "deb") || token_is(v, t, "deb-src");
			v = skip_ws(t, ve);
		}
	}
}

static int apt_deb822(const char *text, int (*fn)(const char *entry, void *arg), void *arg)
{
	struct stanza s = { 0 };
	bool in_stanza = false;
	const char *p = text;
	int r;

	for (;;) {
		const char *end = line_end(p), *colon;
		bool last = !*end;

		if (p < end && *p == '#') {
			/* a comment line, inside a stanza or not */
		} else if (skip_ws(p, end) == end) {
			if (in_stanza && (r = stanza_emit(&s, fn, arg)) < 0) {
				return r;
			}
			s = (struct stanza){ 0 };
			in_stanza = false;
		} else if (is_ws(*p)) {
			s.bad = s.bad || !in_stanza; /* a continuation line before any field */
		} else if (field_line(p, end, &colon)) {
			in_stanza = true;
			stanza_field(&s, p, (size_t)(colon - p), colon + 1, end);
		} else {
			in_stanza = true;
			s.bad = true; /* neither a field nor a continuation: the stanza is skipped */
		}
		if (last) {
			break;
		}
		p = end + 1;
	}
	return in_stanza ? stanza_emit(&s, fn, arg) : 0;
}

int egress_apt_parse(const char *text, int (*fn)(const char *entry, void *arg), void *arg)
{
	const char *p = text, *colon;

	if (!text) {
		return 0;
	}
	/* deb822 when the first line that is not blank or a comment is a field */
	for (;;) {
		const char *end = line_end(p);
		const char *q = skip_ws(p, end);
		if (q < end && *q != '#') {
			if (field_line(p, end, &colon)) {
				return apt_deb822(text, fn, arg);
			}
			break;
		}
		if (!*end) {
			break;
		}
		p = end + 1;
	}
	for (p = text;;) {
		const char *end = line_end(p);
		int r = apt_one_line(p, end, fn, arg);
		if (r < 0) {
			return r;
		}
		if (!*end) {
			return 0;
		}
		p = end + 1;
	}
}

/* ---------------------------------------------------------------- npm */

int egress_npmrc_parse(const char *text, int (*fn)(const char *entry, bool is_default, void *arg), void *arg)
{
	const char *p = text;
	bool in_section = false;

	if (!text) {
		return 0;
	}
	for (;;) {
		const char *end = line_end(p), *eq, *k, *ke, *v, *ve;
		char entry[EGRESS_ENTRY_TEXT_MAX];
		bool is_default;
		int r;

		k = skip_ws(p, end);
		eq = memchr(k, '=', (size_t)(end - k));
		if (k < end && *k == '[') {
			in_section = true; /* keys under a [section] are not npm's top-level config */
		} else if (!in_section && eq && *k != ';' && *k != '#') {
			for (ke = eq; ke > k && is_ws(ke[-1]); ke--) {
			}
			v = skip_ws(eq + 1, end);
			for (ve = end; ve > v && is_ws(ve[-1]); ve--) {
			}
			if (ve - v >= 2 && (*v == '"' || *v == '\'') && ve[-1] == *v) {
				v++, ve--;
			}
			is_default = token_is(k, ke, "registry");
			if ((is_default || (ke - k > 10 && *k == '@' && strncmp(ke - 9, ":registry", 9) == 0)) &&
			    !memmem(v, (size_t)(ve - v), "${", 2) &&
			    egress_url_entry(v, (size_t)(ve - v), entry) >= 0) {
				r = fn(entry, is_default, arg);
				if (r < 0) {
					return r;
				}
			}
		}
		if (!*end) {
			return 0;
		}
		p = end + 1;
	}
}

/* A JS string literal at p ('...', "..." or `...`, no escapes, one line): [*ret_s, *ret_e). */
static bool js_string(const char *p, const char *end, const char **ret_s, const char **ret_e)
{
	const char *q;
	char quote;

	if (p >= end || (*p != '\'' && *p != '"' && *p != '`')) {
		return false;
	}
	quote = *p++;
	for (q = p; q < end && *q != quote; q++) {
		if (*q == '\\' || *q == '\n' || (quote == '`' && *q == '$')) {
			return false;
		}
	}
	if (q == end) {
		return false;
	}
	*ret_s = p;
	*ret_e = q;
	return true;
}

static const char *js_skip_ws(const char *p, const char *end)
{
	while (p < end && (is_ws(*p) || *p == '\n')) {
		p++;
	}
	return p;
}

static int take_url(const char *s, const char *e, char *out, size_t out_size)
{
	if ((size_t)(e - s) >= out_size || (size_t)(e - s) < 7 || strncasecmp(s, "http", 4) != 0) {
		return -ENOENT;
	}
	memcpy(out, s, (size_t)(e - s));
	out[e - s] = '\0';
	return 0;
}

int egress_npm_default_find(const char *js, size_t n, char *out, size_t out_size)
{
	static const char *const defs[] = { "Definition('registry'", "Definition(\"registry\"", "define('registry'",
					    "define(\"registry\"" };
	const char *end = js + n, *s, *e;

	/* npm 9 and later: new Definition('registry', { default: 'URL' }); npm 7 and 8: define('registry', {...}) */
	for (size_t i = 0; i < ARRAY_SIZE(defs); i++) {
		const char *d = memmem(js, n, defs[i], strlen(defs[i]));
		if (d) {
			const char *lim = end - d > 4096 ? d + 4096 : end;
			const char *dflt = memmem(d, (size_t)(lim - d), "default:", 8);
			if (dflt && js_string(js_skip_ws(dflt + 8, end), end, &s, &e)) {
				return take_url(s, e, out, out_size);
			}
			return -ENOENT;
		}
	}
	/* npm 6: a defaults object, registry: 'URL' */
	for (const char *p = js; (p = memmem(p, (size_t)(end - p), "registry:", 9)); p += 9) {
		if (p > js && !is_ws(p[-1]) && p[-1] != '\n' && p[-1] != '{' && p[-1] != ',') {
			continue;
		}
		if (js_string(js_skip_ws(p + 9, end), end, &s, &e) && take_url(s, e, out, out_size) == 0) {
			return 0;
		}
	}
	return -ENOENT;
}

/* ---------------------------------------------------------------- pip */

/* Is [k, ke) key as pip names it: any case, '_' as '-', an optional leading "--"? */
static bool pip_key_is(const char *k, const char *ke, const char *key)
{
	size_t n = strlen(key);

	if (ke - k >= 2 && k[0] == '-' && k[1] == '-') {
		k += 2;
	}
	if ((size_t)(ke - k) != n) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		char c = k[i] == '_' ? '-' : k[i];
		if (c >= 'A' && c <= 'Z') {
			c = (char)(c - 'A' + 'a');
		}
		if (c != key[i]) {
			return false;
		}
	}
	return true;
}

/* A configparser comment or blank line: skipped, and it does not end a value. */
static bool ini_skip_line(const char *p, const char *end)
{
	p = skip_ws(p, end);
	return p == end || *p == '#' || *p == ';';
}

int egress_pip_conf_value(const char *text, const char *section, const char *key, const char **ret_v, size_t *ret_n)
{
	const char *p = text, *v = NULL, *v_end = NULL;
	bool in_section = false, in_option = false, ours = false;
	size_t indent = 0;

	if (!text) {
		return -ENOENT;
	}
	for (;;) {
		const char *end = line_end(p), *q = skip_ws(p, end), *le = end;
		bool last = !*end;

		while (le > q && is_ws(le[-1])) {
			le--;
		}
		if (ini_skip_line(p, end)) {
			/* nothing */
		} else if (in_option && (size_t)(q - p) > indent) {
			if (ours) {
				v_end = le; /* a continuation line of our value */
			}
		} else {
			indent = (size_t)(q - p);
			in_option = ours = false;
			if (*q == '[') {
				const char *close = le - 1;
				while (close > q && *close != ']') {
					close--;
				}
				in_section = close > q + 1 && token_is(q + 1, close, section);
			} else {
				const char *d = q, *ke;
				while (d < le && *d != '=' && *d != ':') {
					d++;
				}
				if (d < le) {
					in_option = true;
					for (ke = d; ke > q && is_ws(ke[-1]); ke--) {
					}
					if (in_section && pip_key_is(q, ke, key)) {
						ours = true; /* the last one wins */
						v = skip_ws(d + 1, le);
						v_end = le;
					}
				}
			}
		}
		if (last) {
			break;
		}
		p = end + 1;
	}
	if (!v) {
		return -ENOENT;
	}
	*ret_v = v;
	*ret_n = (size_t)(v_end - v);
	return 0;
}

int egress_pip_urls(const char *v, size_t n, int (*fn)(const char *entry, void *arg), void *arg)
{
	const char *end = v + n, *p = v;
	bool first = true;

	while (p < end) {
		const char *le = memchr(p, '\n', (size_t)(end - p));
		le = le ? le : end;
		/* the first line is the value itself; a later one that is a comment is not part of it */
		if (first || !ini_skip_line(p, le)) {
			for (const char *q = skip_ws(p, le); q < le;) {
				const char *t = token_end(q, le);
				char entry[EGRESS_ENTRY_TEXT_MAX];
				if (egress_url_entry(q, (size_t)(t - q), entry) == 0) {
					int r = fn(entry, arg);
					if (r < 0) {
						return r;
					}
				}
				q = skip_ws(t, le);
			}
		}
		first = false;
		p = le < end ? le + 1 : end;
	}
	return 0;
}

/* A Python string literal ('...' or "...", no escapes, one line). */
static bool py_string(const char *p, const char *end, const char **ret_s, const char **ret_e)
{
	return p < end && *p != '`' && js_string(p, end, ret_s, ret_e);
}

int egress_pip_default_find(const char *py, size_t n, char *url, size_t url_size, char *files, size_t files_size)
{
	const char *end = py + n;

	for (const char *p = py; (p = memmem(p, (size_t)(end - p), "PyPI", 4)); p += 4) {
		const char *lim = end - p > 1024 ? p + 1024 : end, *q, *us, *ue, *fs, *fe;
		char u[512];

		if (p > py && p[-1] != '\n') {
			continue;
		}
		q = skip_ws(p + 4, lim);
		if (q == lim || *q != '=') {
			continue;
		}
		q = skip_ws(q + 1, lim);
		if (lim - q < 13 || memcmp(q, "PackageIndex(", 13) != 0) {
			continue;
		}
		/* the definition: ("URL", file_storage_domain="HOST"), the second by keyword or by position */
		q = js_skip_ws(q + 13, lim);
		if (!py_string(q, lim, &us, &ue) || take_url(us, ue, u, sizeof(u)) < 0) {
			return -ENOENT;
		}
		q = js_skip_ws(ue + 1, lim);
		if (q == lim || *q != ',') {
			return -ENOENT;
		}
		q = js_skip_ws(q + 1, lim);
		if (lim - q >= 19 && memcmp(q, "file_storage_domain", 19) == 0) {
			q = js_skip_ws(q + 19, lim);
			if (q == lim || *q != '=') {
				return -ENOENT;
			}
			q = js_skip_ws(q + 1, lim);
		}
		if (!py_string(q, lim, &fs, &fe) || fe == fs || (size_t)(fe - fs) >= files_size ||
		    strlen(u) >= url_size) {
			return -ENOENT;
		}
		q = js_skip_ws(fe + 1, lim);
		if (q < lim && *q == ',') {
			q = js_skip_ws(q + 1, lim);
		}
		if (q == lim || *q != ')') {
			return -ENOENT;
		}
		memcpy(url, u, strlen(u) + 1);
		memcpy(files, fs, (size_t)(fe - fs));
		files[fe - fs] = '\0';
		return 0;
	}
	return -ENOENT;
}

/* ---------------------------------------------------------------- go */

int egress_go_env_value(const char *text, const char *key, const char **ret_v, size_t *ret_n)
{
	size_t kn = strlen(key), vn = 0;
	const char *p = text, *v = NULL;

	if (!text) {
		return -ENOENT;
	}
	for (;;) {
		const char *end = line_end(p);
		if (*p >= 'A' && *p <= 'Z' && (size_t)(end - p) > kn && strncmp(p, key, kn) == 0 && p[kn] == '=') {
			v = p + kn + 1;
			vn = (size_t)(end - v);
			while (vn > 0 && is_ws(v[vn - 1])) {
				vn--;
			}
		}
		if (!*end) {
			break;
		}
		p = end + 1;
	}
	if (!v) {
		return -ENOENT;
	}
	*ret_v = v;
	*ret_n = vn;
	return 0;
}

/* A Go URL: as is when it has "://" (":/" as Go checks), https:// put before a scheme-less one with '.', ':' or '/'. */
static int go_url_entry(const char *s, size_t n, char out[EGRESS_ENTRY_TEXT_MAX])
{
	char buf[600];

	if (memmem(s, n, ":/", 2)) {
		return egress_url_entry(s, n, out);
	}
	if (n == 0 || s[0] == '/' || n > sizeof(buf) - 9 ||
	    !(memchr(s, '.', n) || memchr(s, ':', n) || memchr(s, '/', n))) {
		return -EBADMSG;
	}
	memcpy(buf, "https://", 8);
	memcpy(buf + 8, s, n);
	return egress_url_entry(buf, n + 8, out);
}

int egress_goproxy_parse(const char *v, size_t n, bool *ret_direct, int (*fn)(const char *entry, void *arg), void *arg)
{
	const char *end = v + n, *p = v;
	bool direct = false;

	while (p < end) {
		const char *t = p, *s, *e;
		char entry[EGRESS_ENTRY_TEXT_MAX];

		while (t < end && *t != ',' && *t != '|') {
			t++;
		}
		s = skip_ws(p, t);
		for (e = t; e > s && is_ws(e[-1]); e--) {
		}
		if (token_is(s, e, "direct")) {
			direct = true;
		} else if (!token_is(s, e, "off") && go_url_entry(s, (size_t)(e - s), entry) == 0) {
			int r = fn(entry, arg);
			if (r < 0) {
				return r;
			}
		}
		p = t < end ? t + 1 : end;
	}
	if (ret_direct) {
		*ret_direct = direct;
	}
	return 0;
}

int egress_gosumdb_entry(const char *v, size_t n, char out[EGRESS_ENTRY_TEXT_MAX])
{
	const char *end = v + n, *f[2][2] = { { NULL, NULL }, { NULL, NULL } }, *p = skip_ws(v, end);
	char entry[EGRESS_ENTRY_TEXT_MAX];
	size_t nf = 0;
	int r;

	while (p < end) {
		const char *t = token_end(p, end);
		if (nf == 2) {
			return -EBADMSG; /* Go: too many fields */
		}
		f[nf][0] = p;
		f[nf++][1] = t;
		p = skip_ws(t, end);
	}
	if (nf == 0 || (nf == 1 && token_is(f[0][0], f[0][1], "off"))) {
		return -ENOENT;
	}
	if (nf == 2) {
		r = go_url_entry(f[1][0], (size_t)(f[1][1] - f[1][0]), entry);
	} else {
		/* NAME[+KEY]: the database is at https://NAME */
		const char *plus = memchr(f[0][0], '+', (size_t)(f[0][1] - f[0][0]));
		const char *ne = plus ? plus : f[0][1];
		char buf[600];
		if (ne == f[0][0] || (size_t)(ne - f[0][0]) > sizeof(buf) - 9 ||
		    memmem(f[0][0], (size_t)(ne - f[0][0]), ":/", 2)) {
			return -EBADMSG;
		}
		memcpy(buf, "https://", 8);
		memcpy(buf + 8, f[0][0], (size_t)(ne - f[0][0]));
		r = egress_url_entry(buf, (size_t)(ne - f[0][0]) + 8, entry);
	}
	if (r < 0) {
		return -EBADMSG;
	}
	memcpy(out, entry, strlen(entry) + 1);
	return 0;
}

/* ---------------------------------------------------------------- the policy */

struct apt_ctx {
	struct alist *l;
	size_t found;
};

static int apt_add(const char *entry, void *arg)
{
	struct apt_ctx *c = arg;

	c->found++;
	return alist_add_text(c->l, entry);
}

struct npm_ctx {
	struct alist *l;
	char dflt[EGRESS_ENTRY_TEXT_MAX];
};

static int npm_add(const char *entry, bool is_default, void *arg)
{
	struct npm_ctx *c = arg;

	if (is_default) {
		/* a later file (higher precedence) or a later line overrides */
		(void)snprintf(c->dflt, sizeof(c->dflt), "%s", entry);
		return 0;
	}
	return alist_add_text(c->l, entry);
}

static int too_many(char *err, size_t err_size)
{
	(void)snprintf(err, err_size,
		       "--allow expands to more than %d entries (EGRESS_MAX_ALLOW, presets expanded); name fewer "
		       "hosts, or cover a site's hosts with one *.example.com entry",
		       EGRESS_MAX_ALLOW);
	return -E2BIG;
}

/* The value of NAME in the box's environment; NULL when unset or empty (pip and Go take empty as unset). */
static const char *env_get(char *const *env, const char *name)
{
	size_t n = strlen(name);

	for (char *const *e = env; e && *e; e++) {
		if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') {
			return (*e)[n + 1] ? *e + n + 1 : NULL;
		}
	}
	return NULL;
}

/*
 * pip's configuration as pip reads it: PIP_* in the environment over the
 * files; in the files an [install] value over a [global] one, a later file
 * over an earlier one (each key on its own). With no index-url anywhere, the
 * default index and file host of the image's own pip.
 */
static int expand_pip(struct alist *l, const struct egress_image_files *img, char *err, size_t err_size)
{
	static const char *const keys[] = { "index-url", "extra-index-url", "find-links" };
	static const char *const env_names[] = { "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS" };
	struct apt_ctx c = { .l = l };
	bool index_set = false, any = false;
	char e[EGRESS_ENTRY_TEXT_MAX], url[300];
	int r = 0;

	for (size_t k = 0; img && r >= 0 && k < ARRAY_SIZE(keys); k++) {
		const char *v = env_get(img->env, env_names[k]);
		size_t vn = v ? strlen(v) : 0;
		for (size_t s = 0; !v && s < 2; s++) {
			for (size_t i = img->n_pip_conf < EGRESS_IMAGE_PIP_MAX ? img->n_pip_conf : EGRESS_IMAGE_PIP_MAX;
			     !v && i-- > 0;) {
				if (egress_pip_conf_value(img->pip_conf[i], s == 0 ? "install" : "global", keys[k], &v,
							  &vn) < 0) {
					v = NULL;
				}
			}
		}
		if (v) {
			any = true;
			index_set = index_set || k == 0;
			r = egress_pip_urls(v, vn, apt_add, &c);
		}
	}
	if (r >= 0 && !index_set && img && img->pip_default_index &&
	    egress_url_entry(img->pip_default_index, strlen(img->pip_default_index), e) == 0) {
		c.found++;
		r = alist_add_text(l, e);
		/* the default index serves its files from another host, named beside it in pip */
		if (r >= 0 && img->pip_default_files && strlen(img->pip_default_files) < sizeof(url) - 9) {
			(void)snprintf(url, sizeof(url), "https://%s", img->pip_default_files);
			if (!strpbrk(img->pip_default_files, "/@?#") && egress_url_entry(url, strlen(url), e) == 0) {
				r = alist_add_text(l, e);
			}
		}
	}
	if (r >= 0 && c.found == 0) {
		if (!img || (!img->pip_found && !any)) {
			(void)snprintf(
				err, err_size,
				"--allow pypi: the image has no pip (no pip/_internal/models/index.py under "
				"/usr/local/lib/python3.*, /usr/lib/python3/dist-packages or /usr/lib/python3.*) "
				"and no pip configuration naming an index; name the index's hosts with --allow "
				"HOST");
		} else {
			(void)snprintf(
				err, err_size,
				"--allow pypi: the image's pip configuration (PIP_INDEX_URL, pip.conf index-url, "
				"extra-index-url, find-links) names no http or https index, and no default index "
				"could be read from its pip; name the index's hosts with --allow HOST");
		}
		return -ENOENT;
	}
	return r;
}

/* A Go setting as go reads it: the environment (not empty), the user's go env file, GOROOT/go.env. */
static bool go_value(const struct egress_image_files *img, const char *key, const char **ret_v, size_t *ret_n)
{
	const char *v = env_get(img->env, key);

	if (v) {
		*ret_v = v;
		*ret_n = strlen(v);
		return true;
	}
	for (size_t i = img->n_go_env < EGRESS_IMAGE_GOENV_MAX ? img->n_go_env : EGRESS_IMAGE_GOENV_MAX; i-- > 0;) {
		if (egress_go_env_value(img->go_env[i], key, ret_v, ret_n) == 0) {
			return true;
		}
	}
	return false;
}

static int expand_go(struct alist *l, const struct egress_image_files *img, bool *ret_direct, char *err,
		     size_t err_size)
{
	struct apt_ctx c = { .l = l };
	bool direct = false, any = false;
	char e[EGRESS_ENTRY_TEXT_MAX];
	const char *v;
	size_t vn;
	int r = 0;

	if (img && go_value(img, "GOPROXY", &v, &vn)) {
		any = true;
		r = egress_goproxy_parse(v, vn, &direct, apt_add, &c);
	}
	if (r >= 0 && img && go_value(img, "GOSUMDB", &v, &vn)) {
		any = true;
		if (egress_gosumdb_entry(v, vn, e) == 0) {
			c.found++;
			r = alist_add_text(l, e);
		}
	}
	if (r >= 0 && c.found == 0) {
		if (!img || (!img->go_found && !any)) {
			(void)snprintf(
				err, err_size,
				"--allow go-proxy: the image has no Go (no go.env in /usr/local/go, /usr/lib/go, "
				"/usr/lib/go-*, /usr/share/go-*: Go 1.21 or later) and no GOPROXY in its Go env "
				"or the box's environment; name the module proxy's hosts with --allow HOST");
		} else {
			(void)snprintf(
				err, err_size,
				"--allow go-proxy: the image's GOPROXY names no http or https proxy (only direct "
				"or off) and its GOSUMDB is off or unset; name the hosts with --allow HOST");
		}
		return -ENOENT;
	}
	if (r >= 0 && direct) {
		*ret_direct = true;
	}
	return r;
}

static int expand_image(struct alist *l, const struct preset *p, const struct egress_image_files *img,
			bool *ret_go_direct, char *err, size_t err_size)
{
	int r = 0;

	if (p->needs & EGRESS_NEED_APT) {
		struct apt_ctx c = { .l = l };
		for (size_t i = 0; img && r >= 0 && i < img->n_apt && i < EGRESS_IMAGE_APT_MAX; i++) {
			r = egress_apt_parse(img->apt_sources[i], apt_add, &c);
		}
		if (r >= 0 && c.found == 0) {
			(void)snprintf(
				err, err_size,
				"--allow %s: the image's apt sources (/etc/apt/sources.list, "
				"/etc/apt/sources.list.d/*.list and *.sources) name no http or https mirror; name "
				"the mirror with --allow HOST",
				p->name);
			return -ENOENT;
		}
	}
	if (r >= 0 && (p->needs & EGRESS_NEED_NPM)) {
		struct npm_ctx c = { .l = l };
		for (size_t i = 0; img && r >= 0 && i < img->n_npmrc && i < EGRESS_IMAGE_NPMRC_MAX; i++) {
			r = egress_npmrc_parse(img->npmrc[i], npm_add, &c);
		}
		if (r >= 0 && !c.dflt[0] && img && img->npm_default_registry) {
			const char *u = img->npm_default_registry;
			if (egress_url_entry(u, strlen(u), c.dflt) < 0) {
				c.dflt[0] = '\0';
			}
		}
		if (r >= 0 && !c.dflt[0]) {
			(void)snprintf(
				err, err_size,
				"--allow npm: the image's npm configuration names no registry (no registry= line "
				"in its npmrc files, and no npm in the image whose default could be read); name "
				"the registry with --allow HOST");
			return -ENOENT;
		}
		if (r >= 0) {
			r = alist_add_text(l, c.dflt);
		}
	}
	if (r >= 0 && (p->needs & EGRESS_NEED_PIP)) {
		r = expand_pip(l, img, err, err_size);
	}
	if (r >= 0 && (p->needs & EGRESS_NEED_GO)) {
		r = expand_go(l, img, ret_go_direct, err, err_size);
	}
	return r == -E2BIG ? too_many(err, err_size) : r;
}

static int bad_value(const char *v, char *err, size_t err_size)
{
	const struct preset *p = preset_find_case(v);
	char shown[84];

	show_value(v, shown);
	if (p) {
		(void)snprintf(err, err_size, "--allow %s: presets are named in lower case: --allow %s", shown,
			       p->name);
	} else if (strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") == strlen(v)) {
		/* "pipy": a mistyped preset would otherwise pass as a one-label host name */
		(void)snprintf(err, err_size,
			       "--allow %s: not a preset, and a host name of one label is not taken (write the full "
			       "name, e.g. %s.example.com; %s)",
			       shown, shown, FORMS);
	} else {
		(void)snprintf(err, err_size, "--allow %s: not a preset or an allow entry (%s)", shown, FORMS);
	}
	return -EINVAL;
}

/* Expand values into l; img NULL with check_only: image presets add nothing. */
static int expand(char *const *values, const struct egress_image_files *img, bool check_only, struct alist *l,
		  bool *ret_go_direct, char *err, size_t err_size)
{
	size_t nv = 0;

	for (char *const *v = values; v && *v; v++) {
		if (++nv > EGRESS_MAX_ALLOW) {
			return too_many(err, err_size);
		}
	}
	/* every value is checked before any is expanded: a bad value is named before an image preset's refusal */
	for (char *const *v = values; v && *v; v++) {
		struct egress_allow e;
		if (!preset_find(*v) && (preset_find_case(*v) || egress_allow_parse(*v, &e) < 0 ||
					 (e.host.kind == EGRESS_HOST_NAME && !strchr(e.host.name, '.')))) {
			return bad_value(*v, err, err_size);
		}
	}
	for (char *const *v = values; v && *v; v++) {
		const struct preset *p = preset_find(*v);
		struct egress_allow e;
		int r = 0;

		if (!p) {
			if (egress_allow_parse(*v, &e) < 0) {
				return bad_value(*v, err, err_size);
			}
			r = alist_add(l, &e);
		}
		for (const char *const *h = p && p->hosts ? p->hosts : NULL; r >= 0 && h && *h; h++) {
			r = alist_add_text(l, *h);
		}
		if (r == -E2BIG) {
			return too_many(err, err_size);
		}
		if (r >= 0 && p && p->needs && !check_only) {
			r = expand_image(l, p, img, ret_go_direct, err, err_size);
		}
		if (r == -ENOMEM) {
			(void)snprintf(err, err_size, "out of memory");
		}
		if (r < 0) {
			return r;
		}
	}
	return 0;
}

int egress_policy_check(char *const *values, char *err, size_t err_size)
{
	struct alist l = { 0 };
	bool go_direct = false;
	int r = expand(values, NULL, true, &l, &go_direct, err, err_size);

	free(l.v);
	return r;
}

int egress_policy_build(char *const *values, bool inspect_all, const struct egress_image_files *img,
			struct egress_policy *ret, char *err, size_t err_size)
{
	struct alist l = { 0 };
	bool go_direct = false;
	size_t nv = 0;
	char **copy;
	int r;

	r = expand(values, img, false, &l, &go_direct, err, err_size);
	if (r < 0) {
		free(l.v);
		return r;
	}
	for (char *const *v = values; v && *v; v++) {
		nv++;
	}
	copy = calloc(nv + 1, sizeof(*copy));
	for (size_t i = 0; copy && i < nv; i++) {
		if (!(copy[i] = strdup(values[i]))) {
			strv_free(copy);
			copy = NULL;
		}
	}
	if (!copy) {
		free(l.v);
		(void)snprintf(err, err_size, "out of memory");
		return -ENOMEM;
	}
	*ret = (struct egress_policy){
		.allow = l.v, .n_allow = l.n, .values = copy, .inspect_all = inspect_all, .go_direct = go_direct
	};
	return 0;
}

unsigned egress_policy_needs(char *const *values)
{
	unsigned needs = 0;

	for (char *const *v = values; v && *v; v++) {
		const struct preset *p = preset_find(*v);
		needs |= p ? p->needs : 0;
	}
	return needs;
}

const char *egress_policy_warn(char *const *values)
{
	for (char *const *v = values; v && *v; v++) {
		const struct preset *p = preset_find(*v);
		if (p && p->warn) {
			return p->warn;
		}
	}
	return NULL;
}

json_t *egress_policy_json(const struct egress_policy *p)
{
	json_t *allow = json_array(), *names = json_array(), *v;
	const char *warn = egress_policy_warn(p->values);
	char text[EGRESS_ENTRY_TEXT_MAX];
	int r = allow && names ? 0 : -ENOMEM;

	for (size_t i = 0; r >= 0 && i < p->n_allow; i++) {
		egress_allow_format(&p->allow[i], text);
		r = json_array_append_new(allow, json_string(text));
	}
	for (char **s = p->values; r >= 0 && s && *s; s++) {
		bool seen = false;
		for (char **t = p->values; t < s; t++) {
			seen = seen || strcmp(*t, *s) == 0;
		}
		if (!seen && preset_find(*s)) {
			r = json_array_append_new(names, json_string(*s));
		}
	}
	if (r < 0) {
		json_decref(allow);
		json_decref(names);
		return NULL;
	}
	v = json_pack("{s:o,s:o,s:s}", "allow", allow, "presets", names, "inspect", p->inspect_all ? "all" : "none");
	if (v && (warn || p->go_direct)) {
		json_t *w = json_array();
		if (w && warn) {
			(void)json_array_append_new(w, json_string(warn));
		}
		if (w && p->go_direct) {
			(void)json_array_append_new(w, json_string(GO_DIRECT_WARN));
		}
		(void)json_object_set_new(v, "warnings", w);
	}
	return v;
}

int egress_policy_from_json(const json_t *v, struct egress_policy *ret)
{
	const json_t *allow = json_object_get(v, "allow"), *values = json_object_get(v, "values");
	const json_t *warnings = json_object_get(v, "warnings");
	const char *inspect = json_string_value(json_object_get(v, "inspect"));
	struct egress_policy p = { .inspect_all = inspect && strcmp(inspect, "all") == 0 };
	size_t n = json_array_size(allow), nv = json_array_size(values);
	int r = 0;

	if (!json_is_array(allow) || !json_is_array(values) || n > EGRESS_MAX_ALLOW || nv > EGRESS_MAX_ALLOW ||
	    !inspect) {
		return -EBADMSG;
	}
	p.allow = calloc(n ? n : 1, sizeof(*p.allow));
	p.values = calloc(nv + 1, sizeof(*p.values));
	if (!p.allow || !p.values) {
		r = -ENOMEM;
	}
	for (size_t i = 0; r >= 0 && i < n; i++) {
		const char *s = json_string_value(json_array_get(allow, i));
		r = s && egress_allow_parse(s, &p.allow[i]) == 0 ? 0 : -EBADMSG;
		p.n_allow += r >= 0;
	}
	for (size_t i = 0; r >= 0 && i < nv; i++) {
		const char *s = json_string_value(json_array_get(values, i));
		r = !s ? -EBADMSG : (p.values[i] = strdup(s)) ? 0 : -ENOMEM;
	}
	for (size_t i = 0; i < json_array_size(warnings); i++) {
		const char *w = json_string_value(json_array_get(warnings, i));
		p.go_direct = p.go_direct || (w && strcmp(w, GO_DIRECT_WARN) == 0);
	}
	if (r < 0) {
		egress_policy_release(&p);
		return r;
	}
	*ret = p;
	return 0;
}

void egress_policy_release(struct egress_policy *p)
{
	if (p) {
		free(p->allow);
		strv_free(p->values);
		*p = (struct egress_policy){ 0 };
	}
}
