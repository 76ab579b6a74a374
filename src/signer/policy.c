/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The signer's policy engine: a strict YAML loader (libyaml events, so
 * aliases, anchors, tags and duplicate keys can be refused), patterns checked
 * against a subset that POSIX ERE and RE2 read the same way and compiled with
 * regcomp, and decisions over the subjects each tool exposes (see policy.h and
 * docs/policy.md).
 *
 * Why regcomp: glibc's matcher simulates the automaton over sets of states
 * and only backtracks for backreferences, which are refused here, so there
 * is no catastrophic backtracking. An unanchored search still restarts at
 * every offset (quadratic on long subjects), so each pattern P is compiled
 * as ^.*(P): one left-to-right pass decides the match.
 */
#include <errno.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "banned.h"
#include "buf.h"
#include "crypto.h"
#include "json.h"
#include "policy.h"
#include "shparse.h"

#define POLICY_MAX_YAML_NODES 65536 /* scalars + collections in one document */
#define POLICY_MAX_REPEAT 100 /* the largest bound of a {m,n} repeat */
#define POLICY_MAX_EXPANDED 65536 /* pattern size once counted repeats are expanded */
#define POLICY_MAX_GROUP_DEPTH 32 /* nesting of ( ) in a pattern */
#define SUBJECTS_MAX_JSON ((size_t)4 << 20)

enum section {
	SEC_DENY = 0,
	SEC_ASK = 1,
	SEC_FLAG = 2,
	_SEC_MAX,
};

static const char *const section_names[_SEC_MAX] = { "deny", "ask", "flag" };

struct rule {
	enum section section;
	char *id;
	char *pattern;
	char *tool;
	char *field;
	char *unless;
	char *reason;
	char *label;
	char *rationale;
	regex_t re;
	regex_t tool_re;
	regex_t unless_re;
	bool has_re;
	bool has_tool;
	bool has_unless;
};

struct policy {
	char *version;
	char *description;
	struct rule *rules; /* deny rules, then ask, then flag, each in file order */
	size_t n_rules;
};

/* ---- errors -------------------------------------------------------------- */

_printf_(3, 4) static void seterr(char *errmsg, size_t size, const char *fmt, ...)
{
	va_list ap;
	if (!errmsg || size == 0) {
		return;
	}
	va_start(ap, fmt);
	(void)vsnprintf(errmsg, size, fmt, ap);
	va_end(ap);
}

/* ---- a small YAML tree ---------------------------------------------------- */

enum ynode_type {
	Y_SCALAR,
	Y_SEQ,
	Y_MAP,
};

struct ynode {
	enum ynode_type type;
	size_t line;
	char *value; /* scalar */
	size_t len;
	struct ynode **items; /* seq: elements; map: key, value, key, value, ... */
	size_t n;
	size_t cap;
};

static void ynode_free(struct ynode *y)
{
	if (!y) {
		return;
	}
	for (size_t i = 0; i < y->n; i++) {
		ynode_free(y->items[i]);
	}
	free(y->items);
	free(y->value);
	free(y);
}

struct yreader {
	yaml_parser_t parser;
	size_t nodes;
	char *errmsg;
	size_t errmsg_size;
};

static int yreader_next(struct yreader *yr, yaml_event_t *ev)
{
	if (!yaml_parser_parse(&yr->parser, ev)) {
		seterr(yr->errmsg, yr->errmsg_size, "line %zu: YAML syntax error: %s", yr->parser.problem_mark.line + 1,
		       yr->parser.problem ? yr->parser.problem : "unknown");
		return -EBADMSG;
	}
	return 0;
}

static int ynode_add(struct ynode *parent, struct ynode *child)
{
	if (parent->n == parent->cap) {
		size_t cap = parent->cap ? parent->cap * 2 : 8;
		struct ynode **p = reallocarray(parent->items, cap, sizeof(*p));
		if (!p) {
			return -ENOMEM;
		}
		parent->items = p;
		parent->cap = cap;
	}
	parent->items[parent->n++] = child;
	return 0;
}

/* Build the node that starts with ev (consumed); refuses aliases, anchors and explicit tags. */
static int yread_node(struct yreader *yr, yaml_event_t *ev, unsigned depth, struct ynode **ret)
{
	struct ynode *y;
	size_t line = ev->start_mark.line + 1;
	int r;

	if (depth > POLICY_MAX_YAML_DEPTH) {
		seterr(yr->errmsg, yr->errmsg_size, "line %zu: nesting deeper than POLICY_MAX_YAML_DEPTH (%d)", line,
		       POLICY_MAX_YAML_DEPTH);
		return -E2BIG;
	}
	if (++yr->nodes > POLICY_MAX_YAML_NODES) {
		seterr(yr->errmsg, yr->errmsg_size, "line %zu: more than POLICY_MAX_YAML_NODES (%d) YAML nodes", line,
		       POLICY_MAX_YAML_NODES);
		return -E2BIG;
	}
	switch (ev->type) {
	case YAML_ALIAS_EVENT:
		seterr(yr->errmsg, yr->errmsg_size, "line %zu: YAML aliases are not allowed", line);
		return -EBADMSG;
	case YAML_SCALAR_EVENT:
		if (ev->data.scalar.anchor ||
		    (ev->data.scalar.tag && !ev->data.scalar.plain_implicit && !ev->data.scalar.quoted_implicit)) {
			seterr(yr->errmsg, yr->errmsg_size, "line %zu: YAML anchors and tags are not allowed", line);
			return -EBADMSG;
		}
		break;
	case YAML_SEQUENCE_START_EVENT:
		if (ev->data.sequence_start.anchor ||
		    (ev->data.sequence_start.tag && !ev->data.sequence_start.implicit)) {
			seterr(yr->errmsg, yr->errmsg_size, "line %zu: YAML anchors and tags are not allowed", line);
			return -EBADMSG;
		}
		break;
	case YAML_MAPPING_START_EVENT:
		if (ev->data.mapping_start.anchor || (ev->data.mapping_start.tag && !ev->data.mapping_start.implicit)) {
			seterr(yr->errmsg, yr->errmsg_size, "line %zu: YAML anchors and tags are not allowed", line);
			return -EBADMSG;
		}
		break;
	case YAML_NO_EVENT:
	case YAML_STREAM_START_EVENT:
	case YAML_STREAM_END_EVENT:
	case YAML_DOCUMENT_START_EVENT:
	case YAML_DOCUMENT_END_EVENT:
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT:
	default:
		seterr(yr->errmsg, yr->errmsg_size, "line %zu: unexpected YAML event", line);
		return -EBADMSG;
	}

	y = calloc(1, sizeof(*y));
	if (!y) {
		return -ENOMEM;
	}
	y->line = line;
	if (ev->type == YAML_SCALAR_EVENT) {
		y->type = Y_SCALAR;
		y->len = ev->data.scalar.length;
		/* A "\0" escape would make two keys compare equal as C strings. */
		if (memchr(ev->data.scalar.value, '\0', y->len)) {
			seterr(yr->errmsg, yr->errmsg_size, "line %zu: NUL byte in a YAML scalar", line);
			ynode_free(y);
			return -EBADMSG;
		}
		y->value = malloc(y->len + 1);
		if (!y->value) {
			ynode_free(y);
			return -ENOMEM;
		}
		memcpy(y->value, ev->data.scalar.value, y->len);
		y->value[y->len] = '\0';
		*ret = y;
		return 0;
	}
	y->type = ev->type == YAML_SEQUENCE_START_EVENT ? Y_SEQ : Y_MAP;
	for (;;) {
		yaml_event_t child;
		struct ynode *c = NULL;
		r = yreader_next(yr, &child);
		if (r < 0) {
			ynode_free(y);
			return r;
		}
		if (child.type == (y->type == Y_SEQ ? YAML_SEQUENCE_END_EVENT : YAML_MAPPING_END_EVENT)) {
			yaml_event_delete(&child);
			break;
		}
		r = yread_node(yr, &child, depth + 1, &c);
		yaml_event_delete(&child);
		if (r >= 0 && y->type == Y_MAP && (y->n % 2) == 0) {
			/* A key: scalar, and not seen before in this mapping. */
			if (c->type != Y_SCALAR) {
				seterr(yr->errmsg, yr->errmsg_size, "line %zu: mapping keys must be scalars", c->line);
				r = -EBADMSG;
			}
			for (size_t i = 0; r >= 0 && i < y->n; i += 2) {
				if (y->items[i]->len == c->len && memcmp(y->items[i]->value, c->value, c->len) == 0) {
					seterr(yr->errmsg, yr->errmsg_size, "line %zu: duplicate key '%.64s'", c->line,
					       c->value);
					r = -EBADMSG;
				}
			}
		}
		if (r >= 0) {
			r = ynode_add(y, c);
		}
		if (r < 0) {
			ynode_free(c);
			ynode_free(y);
			return r;
		}
	}
	*ret = y;
	return 0;
}

/* Parse one YAML document into a tree; refuses multiple documents. */
static int yaml_load_tree(const char *yaml, size_t n, char *errmsg, size_t errmsg_size, struct ynode **ret)
{
	struct yreader yr = { .errmsg = errmsg, .errmsg_size = errmsg_size };
	struct ynode *root = NULL;
	yaml_event_t ev;
	int r;

	if (!yaml_parser_initialize(&yr.parser)) {
		return -ENOMEM;
	}
	yaml_parser_set_input_string(&yr.parser, (const unsigned char *)yaml, n);
	yaml_parser_set_encoding(&yr.parser, YAML_UTF8_ENCODING);

	/* STREAM-START, DOCUMENT-START */
	for (int i = 0; i < 2; i++) {
		r = yreader_next(&yr, &ev);
		if (r < 0) {
			goto out;
		}
		if (ev.type == YAML_STREAM_END_EVENT) {
			yaml_event_delete(&ev);
			seterr(errmsg, errmsg_size, "empty policy document");
			r = -EBADMSG;
			goto out;
		}
		yaml_event_delete(&ev);
	}
	r = yreader_next(&yr, &ev);
	if (r < 0) {
		goto out;
	}
	r = yread_node(&yr, &ev, 0, &root);
	yaml_event_delete(&ev);
	if (r < 0) {
		goto out;
	}
	/* DOCUMENT-END, then STREAM-END: a second document is refused. */
	r = yreader_next(&yr, &ev);
	if (r < 0) {
		goto out;
	}
	yaml_event_delete(&ev);
	r = yreader_next(&yr, &ev);
	if (r < 0) {
		goto out;
	}
	if (ev.type != YAML_STREAM_END_EVENT) {
		seterr(errmsg, errmsg_size, "line %zu: only one YAML document is allowed", ev.start_mark.line + 1);
		r = -EBADMSG;
	}
	yaml_event_delete(&ev);
out:
	yaml_parser_delete(&yr.parser);
	if (r < 0) {
		ynode_free(root);
		return r;
	}
	*ret = root;
	return 0;
}

/* ---- patterns -------------------------------------------------------------- */

/*
 * Check a pattern against the subset that POSIX ERE (glibc) and RE2 read the
 * same way, and against the caps that keep regcomp cheap. Pure.
 *
 * glibc's regcomp copies the tree of a repeated atom (X+ becomes XX*, X{m,n}
 * m..n copies), so a repeat of a repeat doubles the size at each level:
 * "expanded" counts the nodes after those copies, group by group, and is
 * capped by POLICY_MAX_EXPANDED; a repeat applied directly to a repeat
 * ("a**", "a+{2}") is refused outright, as RE2 refuses it.
 */
static int pattern_check(const char *p, size_t n, char *why, size_t why_size)
{
	bool group_counted[POLICY_MAX_GROUP_DEPTH + 1] = { false };
	size_t group_open[POLICY_MAX_GROUP_DEPTH + 1] = { 0 };
	size_t depth = 0, expanded = 0, atom = 0;
	bool have_atom = false, last_repeat = false, atom_is_group = false, atom_group_counted = false;

	if (n == 0) {
		seterr(why, why_size, "empty pattern");
		return -EBADMSG;
	}
	if (n > POLICY_MAX_PATTERN_LEN) {
		seterr(why, why_size, "pattern longer than POLICY_MAX_PATTERN_LEN (%d bytes)", POLICY_MAX_PATTERN_LEN);
		return -E2BIG;
	}
	if (memchr(p, '\0', n)) {
		seterr(why, why_size, "NUL byte in pattern");
		return -EBADMSG;
	}
	for (size_t i = 0; i < n;) {
		char c = p[i];
		size_t copies = 0;
		if (c == '\\') {
			char e = i + 1 < n ? p[i + 1] : '\0';
			if (e == '\0') {
				seterr(why, why_size, "trailing backslash");
				return -EBADMSG;
			}
			if (e >= '0' && e <= '9') {
				seterr(why, why_size,
				       "backreference \\%c is refused (it would need a backtracking matcher)", e);
				return -EBADMSG;
			}
			if (((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) && !strchr("sSwWbB", e)) {
				seterr(why, why_size,
				       "escape \\%c is not in the POSIX ERE/RE2 common subset (allowed: \\s \\S \\w "
				       "\\W \\b "
				       "\\B and escaped punctuation)",
				       e);
				return -EBADMSG;
			}
			if (e == '<' || e == '>' || e == '`' || e == '\'') {
				seterr(why, why_size, "GNU anchor \\%c is not in the POSIX ERE/RE2 common subset", e);
				return -EBADMSG;
			}
			if ((unsigned char)e >= 0x80) {
				seterr(why, why_size, "non-ASCII escape");
				return -EBADMSG;
			}
			i += 2;
			atom = 1;
			have_atom = true;
			atom_is_group = false;
			last_repeat = false;
		} else if (c == '[') {
			size_t j = i + 1;
			if (j < n && p[j] == '^') {
				j++;
			}
			if (j < n && p[j] == ']') {
				j++;
			}
			for (; j < n && p[j] != ']'; j++) {
				if (p[j] == '\\') {
					seterr(why, why_size,
					       "a backslash inside [...] is literal in POSIX ERE but an escape in RE2: "
					       "move "
					       "it out of the set");
					return -EBADMSG;
				}
				if (p[j] == '[' && j + 1 < n &&
				    (p[j + 1] == ':' || p[j + 1] == '=' || p[j + 1] == '.')) {
					seterr(why, why_size,
					       "[: :], [= =] and [. .] inside sets are not in the RE2 subset");
					return -EBADMSG;
				}
			}
			if (j >= n) {
				seterr(why, why_size, "unbalanced [");
				return -EBADMSG;
			}
			i = j + 1;
			atom = 1;
			have_atom = true;
			atom_is_group = false;
			last_repeat = false;
		} else if (c == '(') {
			if (i + 1 < n && p[i + 1] == '?') {
				seterr(why, why_size, "(? groups are not POSIX ERE");
				return -EBADMSG;
			}
			if (depth >= POLICY_MAX_GROUP_DEPTH) {
				seterr(why, why_size, "groups nested deeper than POLICY_MAX_GROUP_DEPTH (%d)",
				       POLICY_MAX_GROUP_DEPTH);
				return -E2BIG;
			}
			depth++;
			group_counted[depth] = false;
			group_open[depth] = expanded;
			i++;
			have_atom = false;
			last_repeat = false;
			continue;
		} else if (c == ')') {
			if (depth == 0) {
				seterr(why, why_size, "unbalanced )");
				return -EBADMSG;
			}
			/* The group's size is what its contents expanded to, plus its own node. */
			atom = expanded - group_open[depth] + 1;
			atom_is_group = true;
			atom_group_counted = group_counted[depth];
			depth--;
			if (atom_group_counted) {
				group_counted[depth] = true;
			}
			i++;
			expanded++;
			have_atom = true;
			last_repeat = false;
			continue;
		} else if (c == '*' || c == '+' || c == '?' || c == '{') {
			if (!have_atom) {
				seterr(why, why_size, "a repeat needs something to repeat");
				return -EBADMSG;
			}
			if (last_repeat) {
				seterr(why, why_size, "a repeat of a repeat is refused");
				return -EBADMSG;
			}
			if (c == '{') {
				size_t j = i + 1;
				unsigned long lo = 0, hi = 0;
				bool has_hi = false, comma = false;
				while (j < n && p[j] >= '0' && p[j] <= '9' && lo <= POLICY_MAX_REPEAT) {
					lo = lo * 10 + (unsigned long)(p[j++] - '0');
				}
				if (j == i + 1) {
					seterr(why, why_size,
					       "a literal { must be escaped, and a repeat needs a lower bound");
					return -EBADMSG;
				}
				if (j < n && p[j] == ',') {
					comma = true;
					j++;
					while (j < n && p[j] >= '0' && p[j] <= '9' && hi <= POLICY_MAX_REPEAT) {
						has_hi = true;
						hi = hi * 10 + (unsigned long)(p[j++] - '0');
					}
				}
				if (j >= n || p[j] != '}') {
					seterr(why, why_size,
					       "a literal { must be escaped, and a repeat needs a lower bound");
					return -EBADMSG;
				}
				if (!comma) {
					hi = lo;
					has_hi = true;
				}
				if (lo > POLICY_MAX_REPEAT || (has_hi && hi > POLICY_MAX_REPEAT)) {
					seterr(why, why_size, "repeat bound above POLICY_MAX_REPEAT (%d)",
					       POLICY_MAX_REPEAT);
					return -E2BIG;
				}
				if (has_hi && hi < lo) {
					seterr(why, why_size, "repeat bounds out of order");
					return -EBADMSG;
				}
				if (atom_is_group && atom_group_counted) {
					seterr(why, why_size,
					       "a counted repeat of a group with a counted repeat inside is refused");
					return -EBADMSG;
				}
				group_counted[depth] = true;
				copies = has_hi ? hi : lo + 1;
				i = j + 1;
			} else {
				copies = c == '+' ? 2 : 1;
				i++;
			}
			/* The atom is already counted once. */
			expanded += atom * (copies > 0 ? copies - 1 : 0) + 1;
			last_repeat = true;
		} else {
			/* '|', '^', '$' end the atom; anything else is a one-byte atom. */
			bool is_atom = !(c == '|' || c == '^' || c == '$');
			i++;
			atom = 1;
			have_atom = is_atom;
			atom_is_group = false;
			last_repeat = false;
		}
		if (!last_repeat || copies == 0) {
			expanded++;
		}
		if (expanded > POLICY_MAX_EXPANDED) {
			seterr(why, why_size, "pattern larger than POLICY_MAX_EXPANDED (%d) once repeats expand",
			       POLICY_MAX_EXPANDED);
			return -E2BIG;
		}
	}
	if (depth != 0) {
		seterr(why, why_size, "unbalanced (");
		return -EBADMSG;
	}
	if (expanded > POLICY_MAX_EXPANDED) {
		seterr(why, why_size, "pattern larger than POLICY_MAX_EXPANDED (%d) once repeats expand",
		       POLICY_MAX_EXPANDED);
		return -E2BIG;
	}
	return 0;
}

/* Compile "<pre>(pattern)<post>" after pattern_check. */
static int pattern_compile(const char *p, const char *pre, const char *post, regex_t *ret, char *why, size_t why_size)
{
	_cleanup_free_ char *full = NULL;
	int e;
	if (asprintf(&full, "%s(%s)%s", pre, p, post) < 0) {
		return -ENOMEM;
	}
	e = regcomp(ret, full, REG_EXTENDED | REG_NOSUB);
	if (e != 0) {
		char msg[128];
		(void)regerror(e, ret, msg, sizeof(msg));
		seterr(why, why_size, "bad regex: %s", msg);
		return e == REG_ESPACE ? -ENOMEM : -EBADMSG;
	}
	return 0;
}

/* ---- loading --------------------------------------------------------------- */

static void rule_release(struct rule *r)
{
	free(r->id);
	free(r->pattern);
	free(r->tool);
	free(r->field);
	free(r->unless);
	free(r->reason);
	free(r->label);
	free(r->rationale);
	if (r->has_re) {
		regfree(&r->re);
	}
	if (r->has_tool) {
		regfree(&r->tool_re);
	}
	if (r->has_unless) {
		regfree(&r->unless_re);
	}
	memset(r, 0, sizeof(*r));
}

void policy_free(struct policy *p)
{
	if (!p) {
		return;
	}
	for (size_t i = 0; i < p->n_rules; i++) {
		rule_release(&p->rules[i]);
	}
	free(p->rules);
	free(p->version);
	free(p->description);
	free(p);
}

static bool valid_id(const char *s, size_t n)
{
	if (n == 0 || n > POLICY_MAX_ID_LEN) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == '-')) {
			return false;
		}
	}
	return true;
}

static bool reserved_id(const char *s)
{
	return strcmp(s, POLICY_ID_SHELL_PARSE) == 0 || strcmp(s, POLICY_ID_ARGS_INVALID) == 0 ||
	       strcmp(s, POLICY_ID_OVERSIZE) == 0;
}

/* A text scalar: no NUL, at most max bytes. */
static int take_text(const struct ynode *v, const char *what, const char *where, size_t max, char *errmsg,
		     size_t errmsg_size, char **ret)
{
	char *s;
	if (v->type != Y_SCALAR) {
		seterr(errmsg, errmsg_size, "line %zu: %s%s must be a string", v->line, where, what);
		return -EBADMSG;
	}
	if (memchr(v->value, '\0', v->len)) {
		seterr(errmsg, errmsg_size, "line %zu: %s%s holds a NUL byte", v->line, where, what);
		return -EBADMSG;
	}
	if (v->len > max) {
		seterr(errmsg, errmsg_size, "line %zu: %s%s is longer than its limit (%zu bytes)", v->line, where, what,
		       max);
		return -E2BIG;
	}
	s = strndup(v->value, v->len);
	if (!s) {
		return -ENOMEM;
	}
	*ret = s;
	return 0;
}

static int load_rule(const struct ynode *y, enum section sec, struct rule *r, char *errmsg, size_t errmsg_size)
{
	_cleanup_free_ char *where = NULL;
	char why[256];
	const struct ynode *id = NULL;
	int k;

	r->section = sec;
	if (y->type != Y_MAP) {
		seterr(errmsg, errmsg_size, "line %zu: each %s rule must be a mapping", y->line, section_names[sec]);
		return -EBADMSG;
	}
	for (size_t i = 0; i < y->n; i += 2) {
		if (strcmp(y->items[i]->value, "id") == 0) {
			id = y->items[i + 1];
		}
	}
	if (!id) {
		seterr(errmsg, errmsg_size, "line %zu: %s rule without an id", y->line, section_names[sec]);
		return -EBADMSG;
	}
	if (id->type != Y_SCALAR || !valid_id(id->value, id->len)) {
		if (id->type == Y_SCALAR && id->len > POLICY_MAX_ID_LEN) {
			seterr(errmsg, errmsg_size, "line %zu: rule id longer than POLICY_MAX_ID_LEN (%d)", id->line,
			       POLICY_MAX_ID_LEN);
			return -E2BIG;
		}
		seterr(errmsg, errmsg_size, "line %zu: rule id must match [A-Za-z0-9._-]{1,%d}", id->line,
		       POLICY_MAX_ID_LEN);
		return -EBADMSG;
	}
	if (asprintf(&where, "%s rule %s: ", section_names[sec], id->value) < 0) {
		where = NULL;
		return -ENOMEM;
	}
	for (size_t i = 0; i < y->n; i += 2) {
		const char *key = y->items[i]->value;
		const struct ynode *v = y->items[i + 1];
		char **dst;
		size_t max;
		if (strcmp(key, "id") == 0) {
			dst = &r->id;
			max = POLICY_MAX_ID_LEN;
		} else if (strcmp(key, "pattern") == 0) {
			dst = &r->pattern;
			max = POLICY_MAX_PATTERN_LEN;
		} else if (strcmp(key, "tool") == 0) {
			dst = &r->tool;
			max = POLICY_MAX_PATTERN_LEN;
		} else if (strcmp(key, "unless") == 0) {
			dst = &r->unless;
			max = POLICY_MAX_PATTERN_LEN;
		} else if (strcmp(key, "field") == 0) {
			dst = &r->field;
			max = POLICY_MAX_FIELD_LEN;
		} else if (strcmp(key, "reason") == 0) {
			dst = &r->reason;
			max = POLICY_MAX_REASON_LEN;
		} else if (strcmp(key, "label") == 0) {
			dst = &r->label;
			max = POLICY_MAX_REASON_LEN;
		} else if (strcmp(key, "rationale") == 0) {
			dst = &r->rationale;
			max = POLICY_MAX_REASON_LEN;
		} else {
			seterr(errmsg, errmsg_size, "line %zu: %sunknown key '%.64s'", y->items[i]->line, where, key);
			return -EBADMSG;
		}
		k = take_text(v, key, where, max, errmsg, errmsg_size, dst);
		if (k < 0) {
			if (k == -E2BIG) {
				const char *cap = strcmp(key, "pattern") == 0 || strcmp(key, "tool") == 0 ||
								  strcmp(key, "unless") == 0
							  ? "POLICY_MAX_PATTERN_LEN"
						  : strcmp(key, "field") == 0 ? "POLICY_MAX_FIELD_LEN"
									      : "POLICY_MAX_REASON_LEN";
				seterr(errmsg, errmsg_size, "line %zu: %s%s longer than %s (%zu bytes)", v->line, where,
				       key, cap, max);
			}
			return k;
		}
	}
	if (reserved_id(r->id)) {
		seterr(errmsg, errmsg_size, "line %zu: rule id %s is reserved for the engine", id->line, r->id);
		return -EBADMSG;
	}
	if (!r->pattern) {
		seterr(errmsg, errmsg_size, "line %zu: %smissing pattern", y->line, where);
		return -EBADMSG;
	}
	if (r->field && !valid_id(r->field, strlen(r->field))) {
		seterr(errmsg, errmsg_size, "line %zu: %sfield must match [A-Za-z0-9._-]+", y->line, where);
		return -EBADMSG;
	}

	{
		struct {
			const char *src;
			const char *name;
			const char *pre;
			const char *post;
			regex_t *re;
			bool *has;
		} pats[] = {
			{ r->pattern, "pattern", "^.*", "", &r->re, &r->has_re },
			{ r->tool, "tool", "^", "$", &r->tool_re, &r->has_tool },
			{ r->unless, "unless", "^.*", "", &r->unless_re, &r->has_unless },
		};
		for (size_t i = 0; i < ARRAY_SIZE(pats); i++) {
			if (!pats[i].src) {
				continue;
			}
			k = pattern_check(pats[i].src, strlen(pats[i].src), why, sizeof(why));
			if (k >= 0) {
				k = pattern_compile(pats[i].src, pats[i].pre, pats[i].post, pats[i].re, why,
						    sizeof(why));
			}
			if (k < 0) {
				seterr(errmsg, errmsg_size, "line %zu: %s%s: %s", y->line, where, pats[i].name, why);
				return k;
			}
			*pats[i].has = true;
		}
	}
	return 0;
}

int policy_load(const char *yaml, size_t n, struct policy **ret, char *errmsg, size_t errmsg_size)
{
	struct ynode *root = NULL;
	struct policy *p = NULL;
	const struct ynode *sections[_SEC_MAX] = { NULL };
	size_t total = 0;
	int r;

	seterr(errmsg, errmsg_size, "ok");
	if (!yaml || !ret) {
		return -EINVAL;
	}
	if (n > POLICY_MAX_YAML_BYTES) {
		seterr(errmsg, errmsg_size, "policy larger than POLICY_MAX_YAML_BYTES (%zu bytes)",
		       (size_t)POLICY_MAX_YAML_BYTES);
		return -E2BIG;
	}
	if (memchr(yaml, '\0', n)) {
		seterr(errmsg, errmsg_size, "NUL byte in policy");
		return -EBADMSG;
	}
	r = yaml_load_tree(yaml, n, errmsg, errmsg_size, &root);
	if (r < 0) {
		return r;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		r = -ENOMEM;
		goto out;
	}
	if (root->type != Y_MAP) {
		seterr(errmsg, errmsg_size, "line %zu: a policy is a mapping", root->line);
		r = -EBADMSG;
		goto out;
	}
	for (size_t i = 0; i < root->n; i += 2) {
		const char *key = root->items[i]->value;
		const struct ynode *v = root->items[i + 1];
		bool found = false;
		for (int s = 0; s < _SEC_MAX; s++) {
			if (strcmp(key, section_names[s]) == 0) {
				found = true;
				/* An empty "deny:" is an empty list. */
				if (v->type == Y_SCALAR && v->len == 0) {
					break;
				}
				if (v->type != Y_SEQ) {
					seterr(errmsg, errmsg_size, "line %zu: %s must be a list of rules", v->line,
					       key);
					r = -EBADMSG;
					goto out;
				}
				sections[s] = v;
				total += v->n;
			}
		}
		if (found) {
			continue;
		}
		if (strcmp(key, "version") == 0) {
			r = take_text(v, "version", "", POLICY_MAX_TEXT_LEN, errmsg, errmsg_size, &p->version);
		} else if (strcmp(key, "description") == 0) {
			r = take_text(v, "description", "", POLICY_MAX_TEXT_LEN, errmsg, errmsg_size, &p->description);
		} else {
			seterr(errmsg, errmsg_size, "line %zu: unknown key '%.64s'", root->items[i]->line, key);
			r = -EBADMSG;
		}
		if (r < 0) {
			if (r == -E2BIG) {
				seterr(errmsg, errmsg_size, "line %zu: %s longer than POLICY_MAX_TEXT_LEN (%d bytes)",
				       v->line, key, POLICY_MAX_TEXT_LEN);
			}
			goto out;
		}
	}
	if (total > POLICY_MAX_RULES) {
		seterr(errmsg, errmsg_size, "more than POLICY_MAX_RULES (%d) rules", POLICY_MAX_RULES);
		r = -E2BIG;
		goto out;
	}
	if (total > 0) {
		p->rules = calloc(total, sizeof(*p->rules));
		if (!p->rules) {
			r = -ENOMEM;
			goto out;
		}
	}
	for (int s = 0; s < _SEC_MAX; s++) {
		for (size_t i = 0; sections[s] && i < sections[s]->n; i++) {
			struct rule *rl = &p->rules[p->n_rules];
			r = load_rule(sections[s]->items[i], (enum section)s, rl, errmsg, errmsg_size);
			if (r < 0) {
				rule_release(rl);
				goto out;
			}
			p->n_rules++;
			for (size_t k = 0; k + 1 < p->n_rules; k++) {
				if (strcmp(p->rules[k].id, rl->id) == 0) {
					seterr(errmsg, errmsg_size, "line %zu: duplicate rule id %s",
					       sections[s]->items[i]->line, rl->id);
					r = -EBADMSG;
					goto out;
				}
			}
		}
	}
	seterr(errmsg, errmsg_size, "ok");
	*ret = p;
	p = NULL;
	r = 0;
out:
	policy_free(p);
	ynode_free(root);
	return r;
}

/* ---- deciding -------------------------------------------------------------- */

const char *policy_verdict_name(enum policy_verdict v)
{
	switch (v) {
	case POLICY_ALLOW:
		return "allow";
	case POLICY_ASK:
		return "ask";
	case POLICY_DENY:
	default:
		return "deny";
	}
}

enum tool_kind {
	TOOL_BASH,
	TOOL_WEBFETCH,
	TOOL_WRITE,
	TOOL_OTHER,
};

/* What one call exposes to rules; built lazily. */
struct call {
	enum tool_kind kind;
	const json_t *args;
	const char *main_arg; /* Bash command, WebFetch url, Write file_path */
	struct sh_parse *sh;
	bool sh_done;
	bool sh_failed;
	enum sh_error sh_err;
	char *args_json;
	bool args_json_done;
	char *host;
	char *lexical_path;
	bool oversize;
};

static void call_release(struct call *c)
{
	sh_parse_free(c->sh);
	free(c->args_json);
	free(c->host);
	free(c->lexical_path);
}

/* A string member of args: NULL when absent, not a string, or holding a NUL. */
static const char *arg_string(const json_t *args, const char *key)
{
	const json_t *v = json_object_get(args, key);
	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
		return NULL;
	}
	return json_string_value(v);
}

/* scheme://[userinfo@]host[:port]/... -> lower-case host (no brackets for IPv6). */
static int url_host(const char *url, char **ret)
{
	const char *p = strstr(url, "://"), *end, *at, *h;
	size_t n;
	char *s;
	p = p ? p + 3 : url;
	end = p + strcspn(p, "/?#");
	at = NULL;
	for (const char *q = p; q < end; q++) {
		if (*q == '@') {
			at = q;
		}
	}
	h = at ? at + 1 : p;
	if (*h == '[') {
		const char *rb = memchr(h, ']', (size_t)(end - h));
		h++;
		n = rb ? (size_t)(rb - h) : (size_t)(end - h);
	} else {
		const char *colon = memchr(h, ':', (size_t)(end - h));
		n = colon ? (size_t)(colon - h) : (size_t)(end - h);
	}
	s = strndup(h, n);
	if (!s) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] >= 'A' && s[i] <= 'Z') {
			s[i] = (char)(s[i] - 'A' + 'a');
		}
	}
	*ret = s;
	return 0;
}

/*
 * Lexical normalisation: drop empty and "." segments, resolve ".." against
 * the segment before it (a leading ".." of a relative path stays; "/.." is
 * "/"). Symlinks are not followed: the path is only a string here.
 */
static int path_lexical(const char *path, char **ret)
{
	size_t n = strlen(path), n_seg = 0, o = 0;
	bool abs = path[0] == '/';
	_cleanup_free_ const char **seg = calloc(n + 1, sizeof(*seg));
	_cleanup_free_ size_t *len = calloc(n + 1, sizeof(*len));
	char *out;
	const char *p = path;

	if (!seg || !len) {
		return -ENOMEM;
	}
	while (*p) {
		const char *s = p;
		size_t l;
		while (*p && *p != '/') {
			p++;
		}
		l = (size_t)(p - s);
		while (*p == '/') {
			p++;
		}
		if (l == 0 || (l == 1 && s[0] == '.')) {
			continue;
		}
		if (l == 2 && s[0] == '.' && s[1] == '.') {
			if (n_seg > 0 && !(len[n_seg - 1] == 2 && memcmp(seg[n_seg - 1], "..", 2) == 0)) {
				n_seg--;
				continue;
			}
			if (abs) {
				continue;
			}
		}
		seg[n_seg] = s;
		len[n_seg] = l;
		n_seg++;
	}
	out = malloc(n + 2);
	if (!out) {
		return -ENOMEM;
	}
	if (abs) {
		out[o++] = '/';
	}
	for (size_t i = 0; i < n_seg; i++) {
		if (i > 0) {
			out[o++] = '/';
		}
		memcpy(out + o, seg[i], len[i]);
		o += len[i];
	}
	if (o == 0) {
		out[o++] = '.';
	}
	out[o] = '\0';
	*ret = out;
	return 0;
}

typedef int (*subject_fn)(const char *subject, void *userdata);

static int want_args_json(struct call *c)
{
	if (!c->args_json_done) {
		c->args_json = json_dumps(c->args, JSON_COMPACT | JSON_SORT_KEYS);
		if (!c->args_json) {
			return -ENOMEM;
		}
		c->args_json_done = true;
	}
	return 0;
}

static void want_shell(struct call *c)
{
	int r;
	if (c->sh_done) {
		return;
	}
	c->sh_done = true;
	r = sh_parse(c->main_arg, strlen(c->main_arg), &c->sh_err, &c->sh);
	if (r < 0) {
		c->sh = NULL;
		c->sh_failed = true;
		if (c->sh_err == SH_OK) {
			c->sh_err = SH_ERR_SYNTAX;
		}
	}
}

/*
 * Visit each subject of field for this call; stops at the first visit that
 * returns > 0 (a match) and returns it. A subject over
 * POLICY_MAX_SUBJECT_LEN is never matched: the call is marked oversize.
 */
static int visit(struct call *c, const char *s, subject_fn fn, void *ud)
{
	if (strlen(s) > POLICY_MAX_SUBJECT_LEN) {
		c->oversize = true;
		return 0;
	}
	return fn(s, ud);
}

static int for_each_subject(struct call *c, const char *field, subject_fn fn, void *ud)
{
	int r;
	if (c->kind == TOOL_BASH && (!field || strcmp(field, "argv") == 0 || strcmp(field, "line") == 0 ||
				     strcmp(field, "normalized") == 0 || strcmp(field, "command") == 0)) {
		bool raw = field && (strcmp(field, "command") == 0 || strcmp(field, "line") == 0);
		if (raw) {
			r = visit(c, c->main_arg, fn, ud);
			if (r != 0 || strcmp(field, "command") == 0) {
				return r;
			}
		}
		if (strlen(c->main_arg) > POLICY_MAX_SUBJECT_LEN) {
			c->oversize = true;
			return 0;
		}
		want_shell(c);
		if (c->sh_failed) {
			/* Best effort on a line the tokenizer cannot read: rules still see it raw. */
			return raw ? 0 : visit(c, c->main_arg, fn, ud);
		}
		if (!field || strcmp(field, "argv") == 0) {
			for (size_t i = 0; i < c->sh->n_commands; i++) {
				r = visit(c, c->sh->commands[i].joined, fn, ud);
				if (r != 0) {
					return r;
				}
			}
			return 0;
		}
		for (size_t i = 0; i < c->sh->n_lines; i++) {
			r = visit(c, c->sh->lines[i], fn, ud);
			if (r != 0) {
				return r;
			}
		}
		return 0;
	}
	if (c->kind == TOOL_WEBFETCH && field && strcmp(field, "url") == 0) {
		return visit(c, c->main_arg, fn, ud);
	}
	if (c->kind == TOOL_WEBFETCH && field && strcmp(field, "host") == 0) {
		if (!c->host) {
			r = url_host(c->main_arg, &c->host);
			if (r < 0) {
				return r;
			}
		}
		return visit(c, c->host, fn, ud);
	}
	if (c->kind == TOOL_WRITE && field && strcmp(field, "path") == 0) {
		r = visit(c, c->main_arg, fn, ud);
		if (r != 0) {
			return r;
		}
		if (!c->lexical_path) {
			r = path_lexical(c->main_arg, &c->lexical_path);
			if (r < 0) {
				return r;
			}
		}
		if (strcmp(c->lexical_path, c->main_arg) == 0) {
			return 0;
		}
		return visit(c, c->lexical_path, fn, ud);
	}
	if (field) {
		const char *v = arg_string(c->args, field);
		return v ? visit(c, v, fn, ud) : 0;
	}
	r = want_args_json(c);
	if (r < 0) {
		return r;
	}
	return visit(c, c->args_json, fn, ud);
}

static int match_rule_subject(const char *s, void *ud)
{
	const struct rule *rl = ud;
	if (regexec(&rl->re, s, 0, NULL, 0) != 0) {
		return 0;
	}
	if (rl->has_unless && regexec(&rl->unless_re, s, 0, NULL, 0) == 0) {
		return 0;
	}
	return 1;
}

struct idlist {
	char **v;
	size_t n;
};

static int idlist_add(struct idlist *l, const char *id)
{
	char **p;
	for (size_t i = 0; i < l->n; i++) {
		if (strcmp(l->v[i], id) == 0) {
			return 0;
		}
	}
	p = reallocarray(l->v, l->n + 1, sizeof(*p));
	if (!p) {
		return -ENOMEM;
	}
	l->v = p;
	l->v[l->n] = strdup(id);
	if (!l->v[l->n]) {
		return -ENOMEM;
	}
	l->n++;
	return 0;
}

static void idlist_release(struct idlist *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i]);
	}
	free(l->v);
	memset(l, 0, sizeof(*l));
}

void policy_decision_release(struct policy_decision *d)
{
	if (!d) {
		return;
	}
	for (size_t i = 0; i < d->n_rule_ids; i++) {
		free(d->rule_ids[i]);
	}
	free(d->rule_ids);
	for (size_t i = 0; i < d->n_flag_ids; i++) {
		free(d->flag_ids[i]);
	}
	free(d->flag_ids);
	free(d->reason);
	memset(d, 0, sizeof(*d));
}

int policy_decide(const struct policy *p, const char *tool, const json_t *args, struct policy_decision *ret)
{
	struct call c = { 0 };
	struct idlist deny = { 0 }, ask = { 0 }, flag = { 0 };
	_cleanup_free_ char *reason = NULL;
	const char *args_invalid = NULL;
	const struct rule *first = NULL;
	int r = 0;

	if (!p || !tool || !ret) {
		return -EINVAL;
	}
	c.args = args;
	c.kind = strcmp(tool, "Bash") == 0	 ? TOOL_BASH
		 : strcmp(tool, "WebFetch") == 0 ? TOOL_WEBFETCH
		 : strcmp(tool, "Write") == 0	 ? TOOL_WRITE
						 : TOOL_OTHER;
	if (!json_is_object(args)) {
		args_invalid = "the arguments are not a JSON object";
	} else if (c.kind != TOOL_OTHER) {
		const char *key = c.kind == TOOL_BASH ? "command" : c.kind == TOOL_WEBFETCH ? "url" : "file_path";
		c.main_arg = arg_string(args, key);
		if (!c.main_arg) {
			args_invalid = c.kind == TOOL_BASH ? "Bash needs a string \"command\" without NUL bytes"
				       : c.kind == TOOL_WEBFETCH
					       ? "WebFetch needs a string \"url\" without NUL bytes"
					       : "Write needs a string \"file_path\" without NUL bytes";
		}
	}
	if (args_invalid) {
		r = idlist_add(&deny, POLICY_ID_ARGS_INVALID);
		if (r >= 0) {
			reason = strdup(args_invalid);
			r = reason ? 0 : -ENOMEM;
		}
		goto done;
	}

	for (size_t i = 0; i < p->n_rules; i++) {
		const struct rule *rl = &p->rules[i];
		if (rl->has_tool && regexec(&rl->tool_re, tool, 0, NULL, 0) != 0) {
			continue;
		}
		r = for_each_subject(&c, rl->field, match_rule_subject, (void *)rl);
		if (r < 0) {
			goto done;
		}
		if (r == 0) {
			continue;
		}
		r = idlist_add(rl->section == SEC_DENY ? &deny : rl->section == SEC_ASK ? &ask : &flag, rl->id);
		if (r < 0) {
			goto done;
		}
		if (!first && rl->section != SEC_FLAG) {
			/* Rules are stored deny first: this is the first id of rule_ids. */
			first = rl;
		}
	}
	if (first && first->reason) {
		reason = strdup(first->reason);
		if (!reason) {
			r = -ENOMEM;
			goto done;
		}
	}
	if (c.kind == TOOL_BASH) {
		if (strlen(c.main_arg) <= POLICY_MAX_SUBJECT_LEN) {
			want_shell(&c);
		}
		if (c.sh_failed) {
			/* Engine ask first among asks: its reason says why the line is opaque. */
			struct idlist tmp = { 0 };
			r = idlist_add(&tmp, POLICY_ID_SHELL_PARSE);
			for (size_t i = 0; r >= 0 && i < ask.n; i++) {
				r = idlist_add(&tmp, ask.v[i]);
			}
			idlist_release(&ask);
			ask = tmp;
			if (r < 0) {
				goto done;
			}
			if (deny.n == 0) {
				free(reason);
				if (asprintf(&reason, "the command line cannot be parsed: %s", sh_error_str(c.sh_err)) <
				    0) {
					reason = NULL;
					r = -ENOMEM;
					goto done;
				}
			}
		}
	}
	if (c.oversize) {
		struct idlist tmp = { 0 };
		r = idlist_add(&tmp, POLICY_ID_OVERSIZE);
		for (size_t i = 0; r >= 0 && i < deny.n; i++) {
			r = idlist_add(&tmp, deny.v[i]);
		}
		idlist_release(&deny);
		deny = tmp;
		if (r < 0) {
			goto done;
		}
		free(reason);
		reason = strdup("a subject is larger than POLICY_MAX_SUBJECT_LEN (64 KiB) and is never matched");
		if (!reason) {
			r = -ENOMEM;
			goto done;
		}
	}
	if (!reason && deny.n == 0 && ask.n == 0 && flag.n > 0) {
		for (size_t i = 0; i < p->n_rules; i++) {
			if (p->rules[i].section == SEC_FLAG && strcmp(p->rules[i].id, flag.v[0]) == 0 &&
			    p->rules[i].reason) {
				reason = strdup(p->rules[i].reason);
				if (!reason) {
					r = -ENOMEM;
					goto done;
				}
			}
		}
	}
	r = 0;

done:
	if (r >= 0) {
		struct policy_decision d = { 0 };
		d.verdict = deny.n ? POLICY_DENY : ask.n ? POLICY_ASK : POLICY_ALLOW;
		/* rule_ids: deny then ask. */
		for (size_t i = 0; r >= 0 && i < ask.n; i++) {
			r = idlist_add(&deny, ask.v[i]);
		}
		if (r >= 0) {
			d.rule_ids = deny.v;
			d.n_rule_ids = deny.n;
			d.flag_ids = flag.v;
			d.n_flag_ids = flag.n;
			d.reason = steal_ptr(reason);
			memset(&deny, 0, sizeof(deny));
			memset(&flag, 0, sizeof(flag));
			*ret = d;
		}
	}
	idlist_release(&deny);
	idlist_release(&ask);
	idlist_release(&flag);
	call_release(&c);
	return r;
}

/* ---- snapshot -------------------------------------------------------------- */

static int set_str(json_t *o, const char *key, const char *v)
{
	if (!v) {
		return 0;
	}
	return json_object_set_new(o, key, json_string(v)) == 0 ? 0 : -ENOMEM;
}

int policy_snapshot(const struct policy *p, json_t **ret_json)
{
	_cleanup_json_ json_t *o = NULL;
	json_t *lists[_SEC_MAX] = { NULL };
	int r = 0;

	if (!p || !ret_json) {
		return -EINVAL;
	}
	o = json_object();
	if (!o) {
		return -ENOMEM;
	}
	r = set_str(o, "version", p->version);
	if (r >= 0) {
		r = set_str(o, "description", p->description);
	}
	if (r >= 0) {
		r = set_str(o, "unknown_tools", "allow");
	}
	for (int s = 0; r >= 0 && s < _SEC_MAX; s++) {
		lists[s] = json_array();
		if (!lists[s] || json_object_set_new(o, section_names[s], lists[s]) != 0) {
			r = -ENOMEM;
		}
	}
	for (size_t i = 0; r >= 0 && i < p->n_rules; i++) {
		const struct rule *rl = &p->rules[i];
		json_t *j = json_object();
		if (!j || json_array_append_new(lists[rl->section], j) != 0) {
			r = -ENOMEM;
			break;
		}
		r = set_str(j, "id", rl->id);
		if (r >= 0) {
			r = set_str(j, "pattern", rl->pattern);
		}
		if (r >= 0) {
			r = set_str(j, "tool", rl->tool);
		}
		if (r >= 0) {
			r = set_str(j, "field", rl->field);
		}
		if (r >= 0) {
			r = set_str(j, "unless", rl->unless);
		}
		if (r >= 0) {
			r = set_str(j, "reason", rl->reason);
		}
		if (r >= 0) {
			r = set_str(j, "label", rl->label);
		}
		if (r >= 0) {
			r = set_str(j, "rationale", rl->rationale);
		}
	}
	if (r < 0) {
		return r;
	}
	*ret_json = steal_ptr(o);
	return 0;
}

int policy_hash(const struct policy *p, char out[POLICY_HASH_STRLEN + 1])
{
	_cleanup_json_ json_t *snap = NULL;
	_cleanup_free_ char *jcs = NULL;
	struct buf hex = { 0 };
	uint8_t digest[SHA256_LEN];
	int r;

	r = policy_snapshot(p, &snap);
	if (r < 0) {
		return r;
	}
	r = json_jcs_string(snap, SUBJECTS_MAX_JSON, &jcs);
	if (r < 0) {
		return r;
	}
	r = sha256(jcs, strlen(jcs), digest);
	if (r < 0) {
		return r;
	}
	r = buf_init(&hex, 2 * SHA256_LEN + 1, 0);
	if (r >= 0) {
		r = hex_encode(digest, sizeof(digest), &hex);
	}
	if (r >= 0 && buf_len(&hex) != 2 * SHA256_LEN) {
		r = -EIO;
	}
	if (r >= 0) {
		memcpy(out, "sha256:", 7);
		memcpy(out + 7, buf_ptr(&hex), 2 * SHA256_LEN);
		out[POLICY_HASH_STRLEN] = '\0';
	}
	buf_release(&hex);
	return r;
}

/* ---- the default pack ----------------------------------------------------- */

/* Generated by tests/policy/gen-default.py, which also writes tests/policy/default.yaml (test-policy compares). */
static const char default_yaml[] =
	"# tkbox default policy pack (embedded in tkbox-signer; see docs/policy.md).\n"
	"# Patterns are POSIX ERE in the subset RE2 reads the same way.\n"
	"version: 'tkbox-default-1'\n"
	"description: 'tkbox default pack: downloaded scripts, recursive delete of / or home, the s"
	"igner itself; flags web requests and destructive commands'\n"
	"deny:\n"
	"  - id: TK-D002\n"
	"    tool: Bash\n"
	"    field: normalized\n"
	"    pattern: '(^|[;&|(] |\\$\\( *|` *|<\\( *)(\\S*/)?(curl|wget|fetch|aria2c)( [^;&|]*)?( \\|&?"
	" [^;&|]*)* \\|&? (\\S*/)?(((ba|z|da|k|mk|c|tc|fi|a)?sh|python[0-9.]*|perl[0-9.]*|ruby[0-9.]*"
	"|node(js)?|php[0-9.]*|lua[0-9.]*|deno|bun|tclsh|pwsh|osascript)|source|\\.|\\$SHELL|\\$\\{SHEL"
	"L\\})( -[^ cme]\\S*)*( -)?( [^-]|[;&|)]|$)|(^|[;&|(] |\\$\\( *|` *|<\\( *)(\\S*/)?(((ba|z|da|k|m"
	"k|c|tc|fi|a)?sh|python[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node(js)?|php[0-9.]*|lua[0-9.]*|deno"
	"|bun|tclsh|pwsh|osascript)|source|\\.|eval)( -[^ cme]\\S*)*( -[cme])? (< )?(<\\(|\\$\\(|`) *(\\S"
	"*/)?(curl|wget|fetch|aria2c)|(^|[;&|(] )(\\$\\(|`) *(\\S*/)?(curl|wget|fetch|aria2c)|(^|[;&|("
	"] |\\$\\( *|` *|<\\( *)(\\S*/)?(curl( [^;&|]*)? (-[a-zA-Z]*[oO][a-zA-Z]*|--output(=\\S*)?|--rem"
	"ote-name(-all)?|>>?)( |$)|(wget|fetch|aria2c)( |$))[^;&|]*( (&&|;|\\|\\||\\||&) [^;&|]*)* (&&"
	"|;|\\|\\||&) ((\\S*/)?(((ba|z|da|k|mk|c|tc|fi|a)?sh|python[0-9.]*|perl[0-9.]*|ruby[0-9.]*|nod"
	"e(js)?|php[0-9.]*|lua[0-9.]*|deno|bun|tclsh|pwsh|osascript)( -[^ cme]\\S*)* [^ -]|source [^"
	" ]|\\. [^ ]|chmod( \\S+)* \\S*[+=]\\S*x|chmod( \\S+)* [0-7]*[1357][0-7]*( |$))|\\.\\.?/|/tmp/|~/)"
	"'\n"
	"    reason: 'running a downloaded script unread: a download piped or substituted into a sh"
	"ell or interpreter, or saved and then executed'\n"
	"  - id: TK-D004\n"
	"    tool: Bash\n"
	"    field: argv\n"
	"    pattern: '^rm( \\S+)* (-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)( \\S+)* (/+\\.?\\*?|~/?\\*?|\\$H"
	"OME/?\\*?|\\$\\{HOME\\}/?\\*?)( |$)|^rm( \\S+)* (/+\\.?\\*?|~/?\\*?|\\$HOME/?\\*?|\\$\\{HOME\\}/?\\*?)( \\"
	"S+)* (-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)( |$)|^find (/+\\.?\\*?|~/?\\*?|\\$HOME/?\\*?|\\$\\{HOM"
	"E\\}/?\\*?)( \\S+)* -delete( |$)'\n"
	"    reason: 'recursive delete of the root or home directory'\n"
	"  - id: TK-D007\n"
	"    tool: Bash\n"
	"    field: line\n"
	"    pattern: 'tkbox-signer|tkbox_signer|signer\\.sock|(^|[;&|(] |\\$\\( *|` *|<\\( *)(\\S*/)?(p"
	"kill|killall|skill|kill)( [^;&|]*)? [^ ;&|]*(tkbox|signer)|(^|[;&|(] |\\$\\( *|` *|<\\( *)(\\S"
	"*/)?(pkill|killall)( -\\S+)* (\\.|\\.\\*|\\^)( |$)|(^|[;&|(] |\\$\\( *|` *|<\\( *)(\\S*/)?kill( [^;"
	"&|]*)? -1( [;&|)]|$)|(^|[;&|(] |\\$\\( *|` *|<\\( *)(\\S*/)?killall5( |$)|(^|[;&|(] |\\$\\( *|` "
	"*|<\\( *)(\\S*/)?(rm|mv|chmod|chown|shred|truncate)( [^;&|]*)? ((~|\\$HOME|\\$\\{HOME\\})/\\.loca"
	"l(/share)?|\\$XDG_RUNTIME_DIR|\\$\\{XDG_RUNTIME_DIR\\}|/run/user/[0-9]+)/?\\*?( |$)'\n"
	"    reason: 'touching the signer: its process, socket or data directory'\n"
	"  - id: TK-D013\n"
	"    tool: Write\n"
	"    field: path\n"
	"    pattern: 'tkbox-signer|signer\\.sock'\n"
	"    reason: 'writing the signer''s files, socket or state'\n"
	"ask: []\n"
	"flag:\n"
	"  - id: TK-F002\n"
	"    tool: WebFetch\n"
	"    pattern: '.*'\n"
	"    reason: 'web request'\n"
	"  - id: TK-F003\n"
	"    tool: Bash\n"
	"    field: argv\n"
	"    pattern: '^rm( \\S+)* (-[a-zA-Z]*[rRfF][a-zA-Z]*|--recursive|--force)( |$)|^(mkfs(\\.\\S+"
	")?|mke2fs|mkswap|wipefs|shred|fdisk|sfdisk|parted|blkdiscard)( |$)|^dd( \\S+)* of=/dev/|^gi"
	"t( \\S+)* push( \\S+)* (-f|--force|--force-with-lease(=\\S*)?|\\+\\S+)( |$)|^git( \\S+)* reset( "
	"\\S+)* --hard( |$)|^git( \\S+)* clean( \\S+)* -[a-zA-Z]*f|^(chmod|chown|chgrp)( \\S+)* (-[a-zA"
	"-Z]*R[a-zA-Z]*|--recursive)( |$)|^chmod( \\S+)* 0?777( |$)|^find( \\S+)* -delete( |$)|^trunc"
	"ate( \\S+)* (-s|--size)'\n"
	"    reason: 'destructive command'\n";

const char *policy_default_yaml(void)
{
	return default_yaml;
}
