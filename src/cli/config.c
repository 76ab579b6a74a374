/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tkbox.yaml: a strict parser over libyaml's event API (config.h). Nothing is
 * built from a YAML document tree: each event is checked against what the
 * schema expects at that point and refused at its own position, so the
 * nesting is bounded by the schema and nothing is skipped unread.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "banned.h"
#include "cli/cliutil.h"
#include "cli/config.h"
#include "crypto.h"
#include "daemon/daemon.h"
#include "egress/host.h"
#include "log.h"
#include "strv.h"

struct cp {
	yaml_parser_t y;
	yaml_event_t ev;
	bool have_ev;
	const char *file;
	char *err;
	size_t err_size;
	struct config *c;
};

static const char *const top_keys[] = { "version", "image", "name",   "workspace", "inspect", "allow",
					"secrets", "env",   "limits", "mcp",	   NULL };
static const char *const limit_keys[] = { "memory", "cpus", "disk", "timeout", "exec_timeout", NULL };
static const char *const mcp_keys[] = { "max_boxes", "max_message_bytes", NULL };
static const char *const secret_keys[] = { "source", "hosts", "header", NULL };

__attribute__((format(printf, 3, 4))) static int cp_fail_at(struct cp *p, const yaml_mark_t *m, const char *fmt, ...)
{
	va_list ap;
	int n = m ? snprintf(p->err, p->err_size, "%s:%zu:%zu: ", p->file, m->line + 1, m->column + 1)
		  : snprintf(p->err, p->err_size, "%s: ", p->file);

	if (n < 0 || (size_t)n >= p->err_size) {
		return -EINVAL;
	}
	va_start(ap, fmt);
	(void)vsnprintf(p->err + n, p->err_size - (size_t)n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

#define cp_fail(p, ...) cp_fail_at((p), &(p)->ev.start_mark, __VA_ARGS__)

static const char *event_what(yaml_event_type_t t)
{
	switch (t) {
	case YAML_SCALAR_EVENT:
		return "a scalar";
	case YAML_SEQUENCE_START_EVENT:
		return "a list";
	case YAML_MAPPING_START_EVENT:
		return "a mapping";
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT:
		return "the end of a collection";
	case YAML_DOCUMENT_START_EVENT:
		return "a second document";
	case YAML_DOCUMENT_END_EVENT:
	case YAML_STREAM_END_EVENT:
		return "the end of the document";
	default:
		return "something else";
	}
}

/* The next event, refused when it is an alias, carries an anchor or a tag, or holds a NUL or too many bytes. */
static int cp_next(struct cp *p)
{
	const yaml_event_t *e = &p->ev;

	if (p->have_ev) {
		yaml_event_delete(&p->ev);
		p->have_ev = false;
	}
	if (!yaml_parser_parse(&p->y, &p->ev)) {
		return cp_fail_at(p, &p->y.problem_mark, "not valid YAML: %s%s%s",
				  p->y.problem ? p->y.problem : "a syntax error", p->y.context ? " " : "",
				  p->y.context ? p->y.context : "");
	}
	p->have_ev = true;
	switch (e->type) {
	case YAML_ALIAS_EVENT:
		return cp_fail(p, "aliases (*name) are not accepted: write the value out");
	case YAML_DOCUMENT_START_EVENT:
		if (e->data.document_start.tag_directives.start != e->data.document_start.tag_directives.end) {
			return cp_fail(p, "%%TAG directives are not accepted");
		}
		return 0;
	case YAML_SCALAR_EVENT:
		if (e->data.scalar.anchor) {
			return cp_fail(p, "anchors (&name) are not accepted: write the value out");
		}
		if (e->data.scalar.tag) {
			return cp_fail(p, "tags (!name, !!type) are not accepted");
		}
		if (e->data.scalar.length > CONFIG_SCALAR_MAX) {
			return cp_fail(p, "a key or value longer than %d bytes (CONFIG_SCALAR_MAX)", CONFIG_SCALAR_MAX);
		}
		if (memchr(e->data.scalar.value, '\0', e->data.scalar.length)) {
			return cp_fail(p, "a key or value holds a NUL byte");
		}
		return 0;
	case YAML_SEQUENCE_START_EVENT:
	case YAML_MAPPING_START_EVENT:
		if (e->data.sequence_start.anchor || e->data.sequence_start.tag) {
			return cp_fail(p, e->data.sequence_start.anchor ? "anchors (&name) are not accepted"
									: "tags (!name, !!type) are not accepted");
		}
		return 0;
	default:
		return 0;
	}
}

/* The next event must be of type t; what says what the key takes. */
static int cp_expect(struct cp *p, yaml_event_type_t t, const char *key, const char *what)
{
	int r = cp_next(p);

	if (r < 0) {
		return r;
	}
	if (p->ev.type != t) {
		return cp_fail(p, "%s: expected %s, found %s", key, what, event_what(p->ev.type));
	}
	return 0;
}

static const char *ev_text(const struct cp *p)
{
	return (const char *)p->ev.data.scalar.value;
}

/* A plain null (empty, ~, null): a key given no value. */
static bool ev_null(const struct cp *p)
{
	const char *s = ev_text(p);

	return p->ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
	       (!s[0] || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
		strcmp(s, "NULL") == 0);
}

/* A non-empty string value (not null). */
static int cp_string(struct cp *p, const char *key, const char *what)
{
	int r = cp_expect(p, YAML_SCALAR_EVENT, key, what);

	if (r >= 0 && (ev_null(p) || !ev_text(p)[0])) {
		return cp_fail(p, "%s: expected %s, found %s", key, what, ev_null(p) ? "no value" : "an empty string");
	}
	return r;
}

static int cp_dup_string(struct cp *p, const char *key, const char *what, char **ret)
{
	int r = cp_string(p, key, what);

	if (r < 0) {
		return r;
	}
	*ret = strdup(ev_text(p));
	return *ret ? 0 : -ENOMEM;
}

/* "unknown key 'k'; the known keys are: a, b, c" (the key not shown under secrets). */
static int cp_unknown(struct cp *p, const char *where, const char *const *known, bool show)
{
	char q[LOG_QUOTE_BUFSIZE], list[256] = "";
	size_t off = 0;

	for (size_t i = 0; known[i] && off < sizeof(list); i++) {
		int n = snprintf(list + off, sizeof(list) - off, "%s%s", i ? ", " : "", known[i]);
		off += n > 0 ? (size_t)n : 0;
	}
	if (strcmp(ev_text(p), "<<") == 0) {
		return cp_fail(p, "merge keys (<<) are not accepted: write the keys out");
	}
	if (!show) {
		return cp_fail(p, "%s: an unknown key (not shown); the known keys are: %s", where, list);
	}
	return cp_fail(p, "%s%sunknown key %s; the known keys are: %s", where, where[0] ? ": " : "",
		       log_quote(ev_text(p), p->ev.data.scalar.length, q), list);
}

/* Index of the current key in known, or -1; each key once (seen is a bit set over known). */
static int cp_key(struct cp *p, const char *where, const char *const *known, unsigned *seen, bool show)
{
	if (p->ev.type != YAML_SCALAR_EVENT) {
		return cp_fail(p, "%s%sa key is a plain word, not %s", where, where[0] ? ": " : "",
			       event_what(p->ev.type));
	}
	for (int i = 0; known[i]; i++) {
		if (strcmp(ev_text(p), known[i]) == 0) {
			if (*seen & (1u << i)) {
				return cp_fail(p, "%s%s%s is given twice (duplicate key)", where, where[0] ? "." : "",
					       known[i]);
			}
			*seen |= 1u << i;
			return i;
		}
	}
	return cp_unknown(p, where, known, show);
}

/* ------------------------------------------------------------ scalars with units */

static int cp_limit(struct cp *p, const char *key)
{
	struct config *c = p->c;
	int r = cp_string(p, key, "a number or a size or duration such as 2G or 30m");

	if (r < 0) {
		return r;
	}
	if (strcmp(key, "limits.memory") == 0) {
		r = cli_parse_mib(ev_text(p), 128, 256 * 1024, &c->memory_mib);
		c->has |= CONFIG_HAS_MEMORY;
	} else if (strcmp(key, "limits.disk") == 0) {
		r = cli_parse_mib(ev_text(p), 64, DAEMON_MAX_DISK_MIB, &c->disk_mib);
		c->has |= CONFIG_HAS_DISK;
	} else if (strcmp(key, "limits.cpus") == 0) {
		r = cli_parse_uint(ev_text(p), 1, 64, &c->cpus);
		c->has |= CONFIG_HAS_CPUS;
	} else if (strcmp(key, "limits.timeout") == 0) {
		r = cli_parse_duration(ev_text(p), 1, DAEMON_MAX_LIFETIME_S, &c->timeout_s);
		c->has |= CONFIG_HAS_TIMEOUT;
	} else {
		r = cli_parse_duration(ev_text(p), 1, DAEMON_MAX_LIFETIME_S, &c->exec_timeout_s);
		c->has |= CONFIG_HAS_EXEC_TIMEOUT;
	}
	if (r < 0) {
		return cp_fail(p,
			       "%s: %s (memory 128M..256G, disk 64M..1T, cpus 1..64, timeout and exec_timeout "
			       "1s..7d: 90, 90s, 15m, 1h, 2d; sizes 2048 (MiB), 512M, 2G)",
			       key, r == -ERANGE ? "out of range" : "not a valid value");
	}
	return 0;
}

/* Bytes: "1048576", "512K", "4M" (KiB, MiB). */
static int parse_bytes(const char *s, uint64_t *ret)
{
	size_t n = strlen(s);
	uint64_t mul = 1, v;
	_cleanup_free_ char *num = NULL;

	if (n > 1 && (s[n - 1] == 'K' || s[n - 1] == 'M')) {
		mul = s[n - 1] == 'K' ? 1024 : 1024 * 1024;
		n--;
	}
	num = strndup(s, n);
	if (!num) {
		return -ENOMEM;
	}
	if (cli_parse_uint(num, 1, CONFIG_MCP_MESSAGE_MAX, &v) < 0 || v > CONFIG_MCP_MESSAGE_MAX / mul) {
		return -ERANGE;
	}
	*ret = v * mul;
	return 0;
}

/* ------------------------------------------------------------ sections */

static int cp_limits(struct cp *p)
{
	unsigned seen = 0;
	int r = cp_expect(p, YAML_MAPPING_START_EVENT, "limits",
			  "a mapping of memory, cpus, disk, timeout, exec_timeout");

	while (r >= 0 && (r = cp_next(p)) >= 0 && p->ev.type != YAML_MAPPING_END_EVENT) {
		char key[32];
		int k = cp_key(p, "limits", limit_keys, &seen, true);
		if (k < 0) {
			return k;
		}
		(void)snprintf(key, sizeof(key), "limits.%s", limit_keys[k]);
		r = cp_limit(p, key);
	}
	return r;
}

static int cp_mcp(struct cp *p)
{
	struct config *c = p->c;
	unsigned seen = 0;
	int r = cp_expect(p, YAML_MAPPING_START_EVENT, "mcp", "a mapping of max_boxes, max_message_bytes");

	while (r >= 0 && (r = cp_next(p)) >= 0 && p->ev.type != YAML_MAPPING_END_EVENT) {
		int k = cp_key(p, "mcp", mcp_keys, &seen, true);
		if (k < 0) {
			return k;
		}
		r = cp_string(p, k == 0 ? "mcp.max_boxes" : "mcp.max_message_bytes", "a number");
		if (r < 0) {
			return r;
		}
		if (k == 0) {
			r = cli_parse_uint(ev_text(p), 1, CONFIG_MCP_MAX_BOXES_MAX, &c->mcp_max_boxes);
			c->has |= CONFIG_HAS_MCP_MAX_BOXES;
		} else {
			r = parse_bytes(ev_text(p), &c->mcp_max_message_bytes);
			r = r >= 0 && c->mcp_max_message_bytes < CONFIG_MCP_MESSAGE_MIN ? -ERANGE : r;
			c->has |= CONFIG_HAS_MCP_MAX_MESSAGE;
		}
		if (r < 0) {
			return cp_fail(p,
				       "%s: out of range (max_boxes 1..%d; max_message_bytes %d..%d, or with K or M)",
				       k == 0 ? "mcp.max_boxes" : "mcp.max_message_bytes", CONFIG_MCP_MAX_BOXES_MAX,
				       CONFIG_MCP_MESSAGE_MIN, CONFIG_MCP_MESSAGE_MAX);
		}
	}
	return r;
}

/* A growing NULL-terminated list of at most max strings. */
static int strv_push(char ***v, size_t *n, size_t max, char *s)
{
	char **nv;

	if (!s) {
		return -ENOMEM;
	}
	if (*n >= max) {
		free(s);
		return -E2BIG;
	}
	nv = realloc(*v, (*n + 2) * sizeof(**v));
	if (!nv) {
		free(s);
		return -ENOMEM;
	}
	nv[(*n)++] = s;
	nv[*n] = NULL;
	*v = nv;
	return 0;
}

/* allow: a list of entries and presets (or one string), checked by the daemon as --allow values are. */
static int cp_allow(struct cp *p)
{
	struct config *c = p->c;
	int r = cp_next(p);

	c->has |= CONFIG_HAS_ALLOW;
	c->allow = calloc(1, sizeof(*c->allow));
	if (r < 0 || !c->allow) {
		return r < 0 ? r : -ENOMEM;
	}
	if (p->ev.type == YAML_SCALAR_EVENT && !ev_null(p) && ev_text(p)[0] && !strchr(ev_text(p), ',')) {
		return strv_push(&c->allow, &c->n_allow, EGRESS_MAX_ALLOW, strdup(ev_text(p)));
	}
	if (p->ev.type != YAML_SEQUENCE_START_EVENT) {
		return cp_fail(p, "allow: expected a list of hosts and presets (one per item), found %s",
			       p->ev.type != YAML_SCALAR_EVENT ? event_what(p->ev.type)
			       : ev_null(p)		       ? "no value"
							       : "an empty string or a comma list");
	}
	while ((r = cp_next(p)) >= 0 && p->ev.type != YAML_SEQUENCE_END_EVENT) {
		if (p->ev.type != YAML_SCALAR_EVENT || ev_null(p) || !ev_text(p)[0] || strchr(ev_text(p), ',')) {
			return cp_fail(p, "allow[%zu]: expected one host, host:port, *.domain or preset, found %s",
				       c->n_allow,
				       p->ev.type != YAML_SCALAR_EVENT ? event_what(p->ev.type)
				       : ev_null(p)		       ? "no value"
						    : "an empty string or a comma list (one entry per item)");
		}
		r = strv_push(&c->allow, &c->n_allow, EGRESS_MAX_ALLOW, strdup(ev_text(p)));
		if (r == -E2BIG) {
			return cp_fail(p, "allow: more than %d entries (EGRESS_MAX_ALLOW)", EGRESS_MAX_ALLOW);
		}
		if (r < 0) {
			return r;
		}
	}
	return r;
}

static bool env_name_ok(const char *s, size_t n)
{
	if (n == 0 || n > 255 || (s[0] >= '0' && s[0] <= '9')) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) {
			return false;
		}
	}
	return true;
}

/* One env entry "K=V": the name is checked, the value is never quoted. */
static int cp_env_add(struct cp *p, const yaml_mark_t *m, char *entry, const char *key)
{
	struct config *c = p->c;
	const char *eq = entry ? strchr(entry, '=') : NULL;
	int r;

	if (entry && (!eq || !env_name_ok(entry, (size_t)(eq - entry)))) {
		free(entry);
		return cp_fail(p, "%s: a name of [A-Za-z0-9_] (not starting with a digit) and a value: NAME=VALUE",
			       key);
	}
	for (size_t i = 0; entry && i < c->n_env; i++) {
		if (strncmp(c->env[i], entry, (size_t)(eq - entry) + 1) == 0) {
			free(entry);
			return cp_fail_at(p, m, "%s: this variable is given twice (duplicate key)", key);
		}
	}
	r = strv_push(&c->env, &c->n_env, DAEMON_MAX_BOX_ENV, entry);
	if (r == -E2BIG) {
		return cp_fail_at(p, m, "env: more than %d variables (DAEMON_MAX_BOX_ENV)", DAEMON_MAX_BOX_ENV);
	}
	return r;
}

/* env: a mapping NAME: VALUE, or a list of NAME=VALUE. */
static int cp_env(struct cp *p)
{
	struct config *c = p->c;
	int r = cp_next(p);
	bool map;

	c->has |= CONFIG_HAS_ENV;
	c->env = calloc(1, sizeof(*c->env));
	if (r < 0 || !c->env) {
		return r < 0 ? r : -ENOMEM;
	}
	map = p->ev.type == YAML_MAPPING_START_EVENT;
	if (!map && p->ev.type != YAML_SEQUENCE_START_EVENT) {
		return cp_fail(p, "env: expected a mapping NAME: VALUE or a list of NAME=VALUE, found %s",
			       event_what(p->ev.type));
	}
	while ((r = cp_next(p)) >= 0 && p->ev.type != (map ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT)) {
		char *entry = NULL;
		yaml_mark_t km = p->ev.start_mark;
		if (p->ev.type != YAML_SCALAR_EVENT || ev_null(p)) {
			return cp_fail(p, "env: expected %s, found %s", map ? "a variable name" : "NAME=VALUE",
				       p->ev.type == YAML_SCALAR_EVENT ? "no value" : event_what(p->ev.type));
		}
		if (map) {
			_cleanup_free_ char *k = strdup(ev_text(p));
			if (!k) {
				return -ENOMEM;
			}
			if (!env_name_ok(k, strlen(k))) {
				return cp_fail_at(p, &km, "env: a name is [A-Za-z0-9_], not starting with a digit");
			}
			r = cp_expect(p, YAML_SCALAR_EVENT, "env", "a value (a string)");
			if (r < 0) {
				return r;
			}
			if (ev_null(p)) {
				return cp_fail(p, "env.%s: expected a value (write \"\" for an empty one)", k);
			}
			if (asprintf(&entry, "%s=%s", k, ev_text(p)) < 0) {
				return -ENOMEM;
			}
		} else {
			entry = strdup(ev_text(p));
			if (!entry) {
				return -ENOMEM;
			}
		}
		r = cp_env_add(p, &km, entry, "env");
		if (r < 0) {
			return r;
		}
	}
	return r;
}

/* ------------------------------------------------------------ secrets */

static bool secret_source_ok(const char *s, size_t n, enum config_source_kind *ret)
{
	if (n == 5 && memcmp(s, "stdin", 5) == 0) {
		*ret = CONFIG_SOURCE_STDIN;
		return true;
	}
	if (n > 4 && memcmp(s, "env:", 4) == 0) {
		*ret = CONFIG_SOURCE_ENV;
		return env_name_ok(s + 4, n - 4);
	}
	*ret = CONFIG_SOURCE_FILE;
	return n > 5 && memcmp(s, "file:", 5) == 0;
}

/* The binding "host[,host...][:Header]" into s (egress_secret_binding_parse: the flag's rules). */
static int cp_binding(struct cp *p, const yaml_mark_t *m, struct config_secret *s, const char *text)
{
	struct egress_secret e = { 0 };
	char why[512];

	if (egress_secret_binding_parse(text, &e, why, sizeof(why)) < 0) {
		return cp_fail_at(p, m, "secrets.%s: %s", s->name, why);
	}
	memcpy(s->hosts, e.hosts, sizeof(s->hosts));
	s->n_hosts = e.n_hosts;
	(void)snprintf(s->header, sizeof(s->header), "%s", e.header);
	return 0;
}

static int cp_secret_source(struct cp *p, struct config_secret *s, const char *src, size_t n)
{
	if (!secret_source_ok(src, n, &s->kind)) {
		return cp_fail(p,
			       "secrets.%s: the source must be env:VAR, file:PATH or stdin; a secret's value is never "
			       "written in tkbox.yaml (the text given is not shown)",
			       s->name);
	}
	s->source = strndup(src, n);
	return s->source ? 0 : -ENOMEM;
}

/* NAME: "SOURCE@host[,host...][:Header]", the --secret text after NAME=. */
static int cp_secret_string(struct cp *p, struct config_secret *s)
{
	const char *t = ev_text(p), *at = strrchr(t, '@');
	yaml_mark_t m = p->ev.start_mark;
	int r = cp_secret_source(p, s, t, at ? (size_t)(at - t) : strlen(t));

	if (r < 0) {
		return r;
	}
	if (!at) {
		return cp_fail(p,
			       "secrets.%s: no host: write SOURCE@HOST[,HOST...][:Header] or {source, hosts, header}",
			       s->name);
	}
	return cp_binding(p, &m, s, at + 1);
}

/* NAME: {source, hosts: [..], header}. */
static int cp_secret_map(struct cp *p, struct config_secret *s)
{
	char binding[EGRESS_SECRET_HOSTS_MAX * EGRESS_HOST_TEXT_MAX + EGRESS_SECRET_HEADER_MAX + 2] = "";
	char header[EGRESS_SECRET_HEADER_MAX + 2] = "";
	yaml_mark_t m = p->ev.start_mark;
	size_t off = 0, nh = 0;
	unsigned seen = 0;
	int r;

	while ((r = cp_next(p)) >= 0 && p->ev.type != YAML_MAPPING_END_EVENT) {
		int k;
		if (p->ev.type == YAML_SCALAR_EVENT && strcmp(ev_text(p), "value") == 0) {
			return cp_fail(p,
				       "secrets.%s: a secret's value is never written in tkbox.yaml: name its source "
				       "(source: env:VAR, file:PATH or stdin)",
				       s->name);
		}
		k = cp_key(p, "secrets entry", secret_keys, &seen, false);
		if (k < 0) {
			return k;
		}
		if (k == 0) {
			r = cp_string(p, "source", "env:VAR, file:PATH or stdin");
			r = r < 0 ? r : cp_secret_source(p, s, ev_text(p), p->ev.data.scalar.length);
		} else if (k == 2) {
			r = cp_string(p, "header", "a header name");
			if (r >= 0 && p->ev.data.scalar.length > EGRESS_SECRET_HEADER_MAX) {
				return cp_fail(p, "secrets.%s.header: longer than %d bytes (EGRESS_SECRET_HEADER_MAX)",
					       s->name, EGRESS_SECRET_HEADER_MAX);
			}
			if (r >= 0) {
				(void)snprintf(header, sizeof(header), ":%s", ev_text(p));
			}
		} else {
			r = cp_expect(p, YAML_SEQUENCE_START_EVENT, "hosts", "a list of exact host names");
			while (r >= 0 && (r = cp_next(p)) >= 0 && p->ev.type != YAML_SEQUENCE_END_EVENT) {
				if (p->ev.type != YAML_SCALAR_EVENT || ev_null(p) || strpbrk(ev_text(p), ",:@") ||
				    p->ev.data.scalar.length >= EGRESS_HOST_TEXT_MAX || nh >= EGRESS_SECRET_HOSTS_MAX) {
					return cp_fail(p,
						       "secrets.%s.hosts[%zu]: 1..%d exact host names (no port, no "
						       "wildcard; EGRESS_SECRET_HOSTS_MAX)",
						       s->name, nh, EGRESS_SECRET_HOSTS_MAX);
				}
				off += (size_t)snprintf(binding + off, sizeof(binding) - off, "%s%s", nh ? "," : "",
							ev_text(p));
				nh++;
			}
		}
		if (r < 0) {
			return r;
		}
	}
	if (r < 0) {
		return r;
	}
	if (!s->source || nh == 0) {
		return cp_fail_at(p, &m, "secrets.%s: needs source (env:VAR, file:PATH or stdin) and hosts", s->name);
	}
	(void)snprintf(binding + off, sizeof(binding) - off, "%s", header);
	return cp_binding(p, &m, s, binding);
}

static int cp_secrets(struct cp *p)
{
	struct config *c = p->c;
	int r = cp_expect(p, YAML_MAPPING_START_EVENT, "secrets", "a mapping of NAME: {source, hosts, header}");

	c->has |= CONFIG_HAS_SECRETS;
	while (r >= 0 && (r = cp_next(p)) >= 0 && p->ev.type != YAML_MAPPING_END_EVENT) {
		struct config_secret *s;
		if (p->ev.type != YAML_SCALAR_EVENT || p->ev.data.scalar.length > EGRESS_SECRET_NAME_MAX ||
		    !egress_secret_name_ok(ev_text(p))) {
			return cp_fail(p,
				       "secrets: a secret's name is 1..%d of [A-Z0-9_], not starting with a digit (the "
				       "key given is not shown)",
				       EGRESS_SECRET_NAME_MAX);
		}
		for (size_t i = 0; i < c->n_secrets; i++) {
			if (strcmp(c->secrets[i].name, ev_text(p)) == 0) {
				return cp_fail(p, "secrets.%s is given twice (duplicate key)", ev_text(p));
			}
		}
		if (c->n_secrets >= EGRESS_SECRET_MAX) {
			return cp_fail(p, "secrets: more than %d (EGRESS_SECRET_MAX)", EGRESS_SECRET_MAX);
		}
		s = &c->secrets[c->n_secrets++];
		(void)snprintf(s->name, sizeof(s->name), "%s", ev_text(p));
		r = cp_next(p);
		if (r >= 0 && p->ev.type == YAML_SCALAR_EVENT && !ev_null(p)) {
			r = cp_secret_string(p, s);
		} else if (r >= 0 && p->ev.type == YAML_MAPPING_START_EVENT) {
			r = cp_secret_map(p, s);
		} else if (r >= 0) {
			r = cp_fail(p, "secrets.%s: expected {source, hosts, header} or SOURCE@HOST[,HOST...][:Header]",
				    s->name);
		}
	}
	return r;
}

/* ------------------------------------------------------------ the document */

static int cp_scalar_field(struct cp *p, int k)
{
	struct config *c = p->c;
	int r;

	switch (k) {
	case 0:
		r = cp_string(p, "version", "1");
		if (r >= 0 && strcmp(ev_text(p), "1") != 0) {
			return cp_fail(p, "version: this tkbox reads version 1 only");
		}
		return r;
	case 1:
		c->has |= CONFIG_HAS_IMAGE;
		return cp_dup_string(p, "image", "an image reference or local source", &c->image);
	case 2:
		c->has |= CONFIG_HAS_NAME;
		return cp_dup_string(p, "name", "a box name", &c->name);
	case 3:
		c->has |= CONFIG_HAS_WORKSPACE;
		return cp_dup_string(p, "workspace", "a directory (relative to this file's directory)", &c->workspace);
	default:
		c->has |= CONFIG_HAS_INSPECT;
		r = cp_string(p, "inspect", "all or none");
		if (r >= 0 && strcmp(ev_text(p), "all") != 0 && strcmp(ev_text(p), "none") != 0) {
			return cp_fail(p, "inspect: all or none");
		}
		c->inspect_all = r >= 0 && strcmp(ev_text(p), "all") == 0;
		return r;
	}
}

static int cp_document(struct cp *p)
{
	unsigned seen = 0;
	int r = cp_next(p);

	if (r >= 0 && p->ev.type == YAML_STREAM_START_EVENT) {
		r = cp_next(p);
	}
	if (r >= 0 && p->ev.type != YAML_DOCUMENT_START_EVENT) {
		return cp_fail(p, "the file is empty: it needs at least version: 1");
	}
	r = r < 0 ? r
		  : cp_expect(p, YAML_MAPPING_START_EVENT, "tkbox.yaml", "a mapping of keys (version: 1, image, ...)");
	while (r >= 0 && (r = cp_next(p)) >= 0 && p->ev.type != YAML_MAPPING_END_EVENT) {
		int k = cp_key(p, "", top_keys, &seen, true);
		if (k < 0) {
			return k;
		}
		if (k <= 4) {
			r = cp_scalar_field(p, k);
		} else if (k == 5) {
			r = cp_allow(p);
		} else if (k == 6) {
			r = cp_secrets(p);
		} else if (k == 7) {
			r = cp_env(p);
		} else if (k == 8) {
			r = cp_limits(p);
		} else {
			r = cp_mcp(p);
		}
	}
	if (r < 0) {
		return r;
	}
	if (!(seen & 1u)) {
		return cp_fail(p, "version: 1 is missing (every tkbox.yaml says which format it is)");
	}
	r = cp_expect(p, YAML_DOCUMENT_END_EVENT, "tkbox.yaml", "the end of the document");
	r = r < 0 ? r : cp_next(p);
	if (r >= 0 && p->ev.type != YAML_STREAM_END_EVENT) {
		return cp_fail(p, "one document per file: a second document (---) is not accepted");
	}
	return r;
}

void config_release(struct config *c)
{
	if (!c) {
		return;
	}
	free(c->image);
	free(c->name);
	free(c->workspace);
	strv_free(c->allow);
	strv_free(c->env);
	for (size_t i = 0; c->secrets && i < c->n_secrets; i++) {
		free(c->secrets[i].source);
	}
	free(c->secrets);
	free(c->path);
	free(c->dir);
	*c = (struct config){ 0 };
}

int config_parse(const char *name, const void *text, size_t len, struct config *ret, char *err, size_t err_size)
{
	struct config c = { 0 };
	struct cp p = { .file = name, .err = err, .err_size = err_size, .c = &c };
	int r;

	if (len > CONFIG_FILE_MAX) {
		(void)cp_fail_at(&p, NULL, "%zu bytes; a tkbox.yaml is at most %d (CONFIG_FILE_MAX)", len,
				 CONFIG_FILE_MAX);
		return -E2BIG;
	}
	c.secrets = calloc(EGRESS_SECRET_MAX, sizeof(*c.secrets));
	if (!c.secrets || !yaml_parser_initialize(&p.y)) {
		free(c.secrets);
		return -ENOMEM;
	}
	yaml_parser_set_input_string(&p.y, (const unsigned char *)text, len);
	r = cp_document(&p);
	if (p.have_ev) {
		yaml_event_delete(&p.ev);
	}
	yaml_parser_delete(&p.y);
	if (r == -ENOMEM) {
		(void)cp_fail_at(&p, NULL, "out of memory");
	}
	if (r < 0) {
		config_release(&c);
		return r;
	}
	*ret = c;
	return 0;
}

/* ------------------------------------------------------------ files */

static int read_capped(const char *path, uint8_t **ret, size_t *ret_n)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	_cleanup_free_ uint8_t *b = NULL;
	struct stat st;
	size_t n = 0;

	if (fd < 0 || fstat(fd, &st) < 0) {
		return -errno;
	}
	if (!S_ISREG(st.st_mode)) {
		return -EINVAL;
	}
	b = malloc(CONFIG_FILE_MAX + 1);
	if (!b) {
		return -ENOMEM;
	}
	while (n < CONFIG_FILE_MAX + 1) {
		ssize_t k = read(fd, b + n, CONFIG_FILE_MAX + 1 - n);
		if (k < 0 && errno == EINTR) {
			continue;
		}
		if (k < 0) {
			return -errno;
		}
		if (k == 0) {
			break;
		}
		n += (size_t)k;
	}
	if (n > CONFIG_FILE_MAX) {
		return -E2BIG;
	}
	*ret = steal_ptr(b);
	*ret_n = n;
	return 0;
}

/* rel against dir, unless absolute. */
static int absolute(const char *dir, const char *prefix, const char *rel, char **ret)
{
	char *out;

	if (rel[0] == '/') {
		return 0;
	}
	if (asprintf(&out, "%s%s/%s", prefix, dir, rel) < 0) {
		return -ENOMEM;
	}
	*ret = out;
	return 0;
}

static int config_resolve_paths(struct config *c)
{
	char *abs = NULL;
	int r = 0;

	if (c->workspace) {
		r = absolute(c->dir, "", c->workspace, &abs);
		if (r >= 0 && abs) {
			free(c->workspace);
			c->workspace = abs;
		}
	}
	for (size_t i = 0; r >= 0 && i < c->n_secrets; i++) {
		struct config_secret *s = &c->secrets[i];
		abs = NULL;
		if (s->kind == CONFIG_SOURCE_FILE) {
			r = absolute(c->dir, "file:", s->source + 5, &abs);
		}
		if (r >= 0 && abs) {
			free(s->source);
			s->source = abs;
		}
	}
	return r;
}

int config_load(const char *path, struct config *ret, char *err, size_t err_size)
{
	_cleanup_free_ uint8_t *b = NULL;
	_cleanup_free_ char *real = NULL;
	struct config c = { 0 };
	size_t n = 0;
	char *slash;
	int r = read_capped(path, &b, &n);

	if (r < 0) {
		(void)snprintf(err, err_size, "%s: %s", path,
			       r == -E2BIG    ? "more than 65536 bytes (CONFIG_FILE_MAX)"
			       : r == -EINVAL ? "not a regular file"
					      : strerror(-r));
		return r;
	}
	r = config_parse(path, b, n, &c, err, err_size);
	if (r < 0) {
		return r;
	}
	real = realpath(path, NULL);
	if (!real || sha256_hex(b, n, c.sha256) < 0) {
		(void)snprintf(err, err_size, "%s: %s", path, real ? "no SHA-256" : strerror(errno));
		config_release(&c);
		return -EIO;
	}
	c.path = strdup(real);
	slash = strrchr(real, '/');
	*slash = '\0';
	c.dir = strdup(slash == real ? "/" : real);
	if (!c.path || !c.dir || config_resolve_paths(&c) < 0) {
		(void)snprintf(err, err_size, "%s: out of memory", path);
		config_release(&c);
		return -ENOMEM;
	}
	*ret = c;
	return 0;
}

int config_secret_flag(const struct config_secret *s, char **ret)
{
	char hosts[EGRESS_SECRET_HOSTS_MAX * EGRESS_HOST_TEXT_MAX] = "";
	size_t off = 0;

	for (size_t i = 0; i < s->n_hosts; i++) {
		off += (size_t)snprintf(hosts + off, sizeof(hosts) - off, "%s%s", i ? "," : "", s->hosts[i]);
	}
	return asprintf(ret, "%s=%s@%s:%s", s->name, s->source, hosts, s->header) < 0 ? -ENOMEM : 0;
}
