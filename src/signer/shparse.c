/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A bounded POSIX sh tokenizer for policy matching (see shparse.h). It never
 * expands anything: it only finds where the commands of a line are, what
 * each one runs once wrappers are stripped, and which strings a shell would
 * itself parse again (substitutions, sh -c, eval, heredocs fed to a shell).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "buf.h"
#include "shparse.h"

#define WORD_MAX (SH_MAX_INPUT * 4 + 64) /* a word holds at most the input (re-quoting grows it up to 4x) */
#define INIT_CAP 8

/* Characters that would change a normalised line's structure if printed bare. */
static bool is_special(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '|' || c == '&' || c == ';' || c == '<' || c == '>' ||
	       c == '(' || c == ')' || c == '\'' || c == '"' || c == '`' || c == '\\';
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static bool is_name_start(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool is_name_char(char c)
{
	return is_name_start(c) || (c >= '0' && c <= '9');
}

const char *sh_error_str(enum sh_error e)
{
	switch (e) {
	case SH_OK:
		return "ok";
	case SH_ERR_SQUOTE:
		return "unbalanced single quote";
	case SH_ERR_DQUOTE:
		return "unbalanced double quote";
	case SH_ERR_SUBST:
		return "unterminated $( ), <( ), ( ) or $(( ))";
	case SH_ERR_BACKTICK:
		return "unterminated backquote";
	case SH_ERR_PARAM:
		return "unterminated ${ }";
	case SH_ERR_HEREDOC:
		return "heredoc not closed by its delimiter";
	case SH_ERR_SYNTAX:
		return "syntax error";
	case SH_ERR_NUL:
		return "NUL byte in command line";
	case SH_ERR_TOO_LONG:
		return "command line too long (SH_MAX_INPUT/SH_MAX_OUTPUT)";
	case SH_ERR_TOO_DEEP:
		return "nesting too deep (SH_MAX_DEPTH)";
	case SH_ERR_TOO_MANY_WORDS:
		return "too many words (SH_MAX_WORDS)";
	case SH_ERR_TOO_MANY_COMMANDS:
		return "too many commands (SH_MAX_COMMANDS)";
	case SH_ERR_TOO_MANY_HEREDOCS:
		return "too many heredocs (SH_MAX_HEREDOCS)";
	case _SH_ERR_MAX:
	default:
		return "unknown error";
	}
}

struct word {
	struct buf text;
	struct buf qmask; /* one byte per text byte: 1 when it came from quoting or an escape */
	size_t unquoted_prefix; /* leading bytes appended bare (for NAME= and reserved words) */
	bool quote; /* holds a quoted special character: re-quote when printed */
	bool subst; /* holds a substitution */
	bool prefix_open; /* still counting unquoted_prefix */
};

struct redir {
	char *op;
	struct word target;
};

struct heredoc {
	char *delim;
	bool strip_tabs;
	bool expand; /* unquoted delimiter: the body's $( ) and ` ` run */
	bool feeds_shell; /* the command is a shell reading its script from stdin */
};

struct ctx {
	struct sh_parse *out;
	size_t cap_commands;
	size_t cap_lines;
	size_t n_words;
	size_t out_bytes;
	enum sh_error err;
};

struct src {
	const char *s;
	size_t n;
	size_t pos;
};

struct cmdbuild {
	struct word *words;
	size_t n_words;
	size_t cap_words;
	struct redir *redirs;
	size_t n_redirs;
	size_t cap_redirs;
	bool subshell;
	size_t hd_first;
};

static int fail(struct ctx *c, enum sh_error e)
{
	if (c->err == SH_OK) {
		c->err = e;
	}
	switch (e) {
	case SH_ERR_TOO_LONG:
	case SH_ERR_TOO_DEEP:
	case SH_ERR_TOO_MANY_WORDS:
	case SH_ERR_TOO_MANY_COMMANDS:
	case SH_ERR_TOO_MANY_HEREDOCS:
		return -E2BIG;
	default:
		return -EBADMSG;
	}
}

/* buf errors: -E2BIG means an output cap, anything else is passed through. */
static int bufr(struct ctx *c, int r)
{
	if (r == -E2BIG) {
		return fail(c, SH_ERR_TOO_LONG);
	}
	return r;
}

static int word_init(struct ctx *c, struct word *w)
{
	int r;
	memset(w, 0, sizeof(*w));
	if (c->n_words >= SH_MAX_WORDS) {
		return fail(c, SH_ERR_TOO_MANY_WORDS);
	}
	c->n_words++;
	w->prefix_open = true;
	r = buf_init(&w->text, WORD_MAX, 0);
	if (r >= 0) {
		r = buf_init(&w->qmask, WORD_MAX, 0);
	}
	return r;
}

static void word_release(struct word *w)
{
	buf_release(&w->text);
	buf_release(&w->qmask);
}

static int word_put_mask(struct ctx *c, struct word *w, size_t n, bool quoted)
{
	uint8_t *m;
	int r;
	if (n == 0) {
		return 0;
	}
	r = buf_reserve(&w->qmask, n, &m);
	if (r < 0) {
		return bufr(c, r);
	}
	memset(m, quoted ? 1 : 0, n);
	return 0;
}

static int word_put(struct ctx *c, struct word *w, const char *p, size_t n, bool quoted)
{
	int r;
	if (quoted || n == 0) {
		w->prefix_open = false;
	}
	for (size_t i = 0; quoted && i < n; i++) {
		if (is_special(p[i])) {
			w->quote = true;
		}
	}
	if (w->prefix_open) {
		w->unquoted_prefix += n;
	}
	r = word_put_mask(c, w, n, quoted);
	if (r < 0) {
		return r;
	}
	return bufr(c, buf_put(&w->text, p, n));
}

static int word_put_subst(struct ctx *c, struct word *w, const char *p, size_t n)
{
	int r;
	w->subst = true;
	w->prefix_open = false;
	r = word_put_mask(c, w, n, false);
	if (r < 0) {
		return r;
	}
	return bufr(c, buf_put(&w->text, p, n));
}

/* NUL-terminated copy of a word's text. */
static int word_str(const struct word *w, char **ret)
{
	return buf_dup_cstring(&w->text, ret);
}

static bool word_is(const struct word *w, const char *lit)
{
	size_t n = strlen(lit);
	return buf_len(&w->text) == n && w->unquoted_prefix == n && !w->subst && memcmp(buf_ptr(&w->text), lit, n) == 0;
}

/* NAME=value with NAME unquoted. */
static bool word_is_assignment(const struct word *w)
{
	const char *t = (const char *)buf_ptr(&w->text);
	size_t n = buf_len(&w->text);
	if (n == 0 || !is_name_start(t[0])) {
		return false;
	}
	for (size_t i = 1; i < n; i++) {
		if (t[i] == '=') {
			return i < w->unquoted_prefix;
		}
		if (!is_name_char(t[i])) {
			return false;
		}
	}
	return false;
}

/*
 * Append a word to out, re-quoted with '...' when it holds quoted special
 * characters. With mask (the normalised lines), operator characters that came
 * from quoting are printed as '_': quoted text never looks like a pipe or a
 * list to a pattern (what a shell would run of it is parsed on its own).
 */
static int put_word(struct ctx *c, struct buf *out, const char *t, size_t n, bool quote, const uint8_t *mask)
{
	int r;
	if (!quote) {
		return bufr(c, buf_put(out, t, n));
	}
	r = buf_put_u8(out, '\'');
	for (size_t i = 0; r >= 0 && i < n; i++) {
		char ch = t[i];
		if (mask && mask[i] &&
		    (ch == '|' || ch == '&' || ch == ';' || ch == '<' || ch == '>' || ch == '(' || ch == ')' ||
		     ch == '`' || ch == '\n')) {
			ch = '_';
		}
		if (ch == '\'') {
			r = buf_put(out, "'\\''", 4);
		} else {
			r = buf_put_u8(out, (uint8_t)ch);
		}
	}
	if (r >= 0) {
		r = buf_put_u8(out, '\'');
	}
	return bufr(c, r);
}

static int count_out(struct ctx *c, size_t n)
{
	if (size_add(c->out_bytes, n, &c->out_bytes) < 0 || c->out_bytes > SH_MAX_OUTPUT) {
		return fail(c, SH_ERR_TOO_LONG);
	}
	return 0;
}

static int push_line(struct ctx *c, const struct buf *line)
{
	struct sh_parse *o = c->out;
	char *s;
	int r;
	size_t n = buf_len(line);
	const char *t = (const char *)buf_ptr(line);

	/* Trailing separators say nothing about structure. */
	while (n > 0 && (t[n - 1] == ' ' || t[n - 1] == ';')) {
		n--;
	}
	if (n == 0) {
		return 0;
	}
	r = count_out(c, n + 1);
	if (r < 0) {
		return r;
	}
	if (o->n_lines == c->cap_lines) {
		size_t cap = c->cap_lines ? c->cap_lines * 2 : INIT_CAP;
		char **p = reallocarray(o->lines, cap, sizeof(*p));
		if (!p) {
			return -ENOMEM;
		}
		o->lines = p;
		c->cap_lines = cap;
	}
	s = strndup(t, n);
	if (!s) {
		return -ENOMEM;
	}
	o->lines[o->n_lines++] = s;
	return 0;
}

static int parse_list(struct ctx *c, struct src *src, unsigned depth, char term, struct buf *inline_out);
static int read_word(struct ctx *c, struct src *src, unsigned depth, struct word *w);

static int parse_string(struct ctx *c, const char *s, size_t n, unsigned depth)
{
	struct src sub = { .s = s, .n = n, .pos = 0 };
	if (memchr(s, '\0', n)) {
		return fail(c, SH_ERR_NUL);
	}
	return parse_list(c, &sub, depth, 0, NULL);
}

/* $( ... ), <( ... ), >( ... ): src->pos at the first of the two opening characters. */
static int read_cmd_subst(struct ctx *c, struct src *src, unsigned depth, struct word *w)
{
	size_t start = src->pos;
	int r;
	src->pos += 2;
	r = parse_list(c, src, depth + 1, ')', NULL);
	if (r < 0) {
		return r;
	}
	return word_put_subst(c, w, src->s + start, src->pos - start);
}

/* $(( ... )): arithmetic; kept as text. */
static int read_arith(struct ctx *c, struct src *src, struct word *w)
{
	size_t start = src->pos, i = src->pos + 3;
	int level = 2;
	for (; i < src->n && level > 0; i++) {
		if (src->s[i] == '(') {
			level++;
		} else if (src->s[i] == ')') {
			level--;
		}
	}
	if (level > 0) {
		return fail(c, SH_ERR_SUBST);
	}
	src->pos = i;
	return word_put_subst(c, w, src->s + start, i - start);
}

/* ` ... `: the body, with \\ \` \$ unescaped, is parsed as its own line. */
static int read_backtick(struct ctx *c, struct src *src, unsigned depth, struct word *w)
{
	size_t start = src->pos, i = src->pos + 1;
	struct buf body;
	int r;

	if (depth + 1 > SH_MAX_DEPTH) {
		return fail(c, SH_ERR_TOO_DEEP);
	}
	r = buf_init(&body, WORD_MAX, 0);
	if (r < 0) {
		return r;
	}
	for (; i < src->n && src->s[i] != '`'; i++) {
		char ch = src->s[i];
		if (ch == '\\' && i + 1 < src->n &&
		    (src->s[i + 1] == '\\' || src->s[i + 1] == '`' || src->s[i + 1] == '$')) {
			ch = src->s[++i];
		}
		r = buf_put_u8(&body, (uint8_t)ch);
		if (r < 0) {
			buf_release(&body);
			return bufr(c, r);
		}
	}
	if (i >= src->n) {
		buf_release(&body);
		return fail(c, SH_ERR_BACKTICK);
	}
	src->pos = i + 1;
	r = parse_string(c, (const char *)buf_ptr(&body), buf_len(&body), depth + 1);
	buf_release(&body);
	if (r < 0) {
		return r;
	}
	return word_put_subst(c, w, src->s + start, src->pos - start);
}

static int read_dquote_body(struct ctx *c, struct src *src, unsigned depth, struct word *w, bool until_quote);

/* ${ ... }: kept as text; substitutions inside are parsed. */
static int read_param(struct ctx *c, struct src *src, unsigned depth, struct word *w)
{
	size_t start = src->pos;
	int level = 1, r;
	struct word scratch;

	r = word_init(c, &scratch);
	if (r < 0) {
		return r;
	}
	src->pos += 2;
	while (level > 0) {
		char ch;
		if (src->pos >= src->n) {
			word_release(&scratch);
			return fail(c, SH_ERR_PARAM);
		}
		ch = src->s[src->pos];
		if (ch == '\\') {
			src->pos += 2;
		} else if (ch == '\'') {
			const char *q = memchr(src->s + src->pos + 1, '\'', src->n - src->pos - 1);
			if (!q) {
				word_release(&scratch);
				return fail(c, SH_ERR_SQUOTE);
			}
			src->pos = (size_t)(q - src->s) + 1;
		} else if (ch == '"') {
			src->pos++;
			r = read_dquote_body(c, src, depth, &scratch, true);
			if (r < 0) {
				word_release(&scratch);
				return r;
			}
		} else if (ch == '$' && src->pos + 1 < src->n && src->s[src->pos + 1] == '(') {
			r = read_cmd_subst(c, src, depth, &scratch);
			if (r < 0) {
				word_release(&scratch);
				return r;
			}
		} else if (ch == '`') {
			r = read_backtick(c, src, depth, &scratch);
			if (r < 0) {
				word_release(&scratch);
				return r;
			}
		} else {
			if (ch == '{') {
				level++;
			} else if (ch == '}') {
				level--;
			}
			src->pos++;
		}
	}
	word_release(&scratch);
	if (src->pos > src->n) {
		return fail(c, SH_ERR_PARAM);
	}
	return word_put_subst(c, w, src->s + start, src->pos - start);
}

/* A '$' in a word or in double quotes: src->pos at the '$'. */
static int read_dollar(struct ctx *c, struct src *src, unsigned depth, struct word *w, bool quoted)
{
	char next = src->pos + 1 < src->n ? src->s[src->pos + 1] : '\0';
	if (next == '(') {
		if (src->pos + 2 < src->n && src->s[src->pos + 2] == '(') {
			return read_arith(c, src, w);
		}
		return read_cmd_subst(c, src, depth, w);
	}
	if (next == '{') {
		return read_param(c, src, depth, w);
	}
	src->pos++;
	return word_put(c, w, "$", 1, quoted);
}

/*
 * The inside of "...": src->pos just after the opening quote. With
 * until_quote false it scans a whole heredoc body for the substitutions an
 * unquoted delimiter lets run.
 */
static int read_dquote_body(struct ctx *c, struct src *src, unsigned depth, struct word *w, bool until_quote)
{
	int r;
	for (;;) {
		char ch;
		if (src->pos >= src->n) {
			return until_quote ? fail(c, SH_ERR_DQUOTE) : 0;
		}
		ch = src->s[src->pos];
		if (ch == '"' && until_quote) {
			src->pos++;
			return 0;
		}
		if (ch == '\\' && src->pos + 1 < src->n) {
			char e = src->s[src->pos + 1];
			if (e == '\n') {
				src->pos += 2;
				continue;
			}
			if (e == '$' || e == '`' || e == '"' || e == '\\') {
				src->pos += 2;
				r = word_put(c, w, &e, 1, true);
			} else {
				src->pos++;
				r = word_put(c, w, "\\", 1, true);
			}
		} else if (ch == '$') {
			r = read_dollar(c, src, depth, w, true);
		} else if (ch == '`') {
			r = read_backtick(c, src, depth, w);
		} else {
			src->pos++;
			r = word_put(c, w, &ch, 1, true);
		}
		if (r < 0) {
			return r;
		}
	}
}

static bool ends_word(char ch)
{
	return is_blank(ch) || ch == '\n' || ch == ';' || ch == '&' || ch == '|' || ch == '(' || ch == ')';
}

/* A word starting at src->pos (not a blank nor an operator). */
static int read_word(struct ctx *c, struct src *src, unsigned depth, struct word *w)
{
	int r;
	while (src->pos < src->n) {
		char ch = src->s[src->pos];
		char next = src->pos + 1 < src->n ? src->s[src->pos + 1] : '\0';
		if (ends_word(ch)) {
			break;
		}
		if (ch == '<' || ch == '>') {
			if (next != '(') {
				break;
			}
			r = read_cmd_subst(c, src, depth, w);
		} else if (ch == '\'') {
			const char *q = memchr(src->s + src->pos + 1, '\'', src->n - src->pos - 1);
			if (!q) {
				return fail(c, SH_ERR_SQUOTE);
			}
			r = word_put(c, w, src->s + src->pos + 1, (size_t)(q - src->s) - src->pos - 1, true);
			src->pos = (size_t)(q - src->s) + 1;
		} else if (ch == '"') {
			src->pos++;
			/* An empty "" still makes a word. */
			r = word_put(c, w, "", 0, true);
			if (r >= 0) {
				r = read_dquote_body(c, src, depth, w, true);
			}
		} else if (ch == '\\') {
			if (next == '\n') {
				src->pos += 2;
				continue;
			}
			if (src->pos + 1 >= src->n) {
				src->pos++;
				r = word_put(c, w, "\\", 1, true);
			} else {
				src->pos += 2;
				r = word_put(c, w, &next, 1, true);
			}
		} else if (ch == '$' && next == '\'') {
			/* $'...' (ANSI-C quoting): kept undecoded; a \' inside does not close it. */
			size_t i = src->pos + 2;
			while (i < src->n && src->s[i] != '\'') {
				i += src->s[i] == '\\' ? 2 : 1;
			}
			if (i >= src->n) {
				return fail(c, SH_ERR_SQUOTE);
			}
			r = word_put(c, w, src->s + src->pos + 2, i - src->pos - 2, true);
			src->pos = i + 1;
		} else if (ch == '$') {
			r = read_dollar(c, src, depth, w, false);
		} else if (ch == '`') {
			r = read_backtick(c, src, depth, w);
		} else {
			src->pos++;
			r = word_put(c, w, &ch, 1, false);
		}
		if (r < 0) {
			return r;
		}
	}
	return 0;
}

static void cmdbuild_reset(struct cmdbuild *cb)
{
	for (size_t i = 0; i < cb->n_words; i++) {
		word_release(&cb->words[i]);
	}
	for (size_t i = 0; i < cb->n_redirs; i++) {
		free(cb->redirs[i].op);
		word_release(&cb->redirs[i].target);
	}
	cb->n_words = 0;
	cb->n_redirs = 0;
	cb->subshell = false;
}

static void cmdbuild_release(struct cmdbuild *cb)
{
	cmdbuild_reset(cb);
	free(cb->words);
	free(cb->redirs);
	memset(cb, 0, sizeof(*cb));
}

static int cmdbuild_add_word(struct cmdbuild *cb, struct word *w)
{
	if (cb->n_words == cb->cap_words) {
		size_t cap = cb->cap_words ? cb->cap_words * 2 : INIT_CAP;
		struct word *p = reallocarray(cb->words, cap, sizeof(*p));
		if (!p) {
			return -ENOMEM;
		}
		cb->words = p;
		cb->cap_words = cap;
	}
	cb->words[cb->n_words++] = *w;
	memset(w, 0, sizeof(*w));
	return 0;
}

static int cmdbuild_add_redir(struct cmdbuild *cb, const char *op, size_t op_len, struct word *target)
{
	char *o;
	if (cb->n_redirs == cb->cap_redirs) {
		size_t cap = cb->cap_redirs ? cb->cap_redirs * 2 : INIT_CAP;
		struct redir *p = reallocarray(cb->redirs, cap, sizeof(*p));
		if (!p) {
			return -ENOMEM;
		}
		cb->redirs = p;
		cb->cap_redirs = cap;
	}
	o = strndup(op, op_len);
	if (!o) {
		return -ENOMEM;
	}
	cb->redirs[cb->n_redirs].op = o;
	cb->redirs[cb->n_redirs].target = *target;
	cb->n_redirs++;
	memset(target, 0, sizeof(*target));
	return 0;
}

/* Words that only introduce the command that follows them. */
static bool is_reserved_prefix(const struct word *w)
{
	static const char *const words[] = { "if", "then", "else", "elif", "do",   "while", "until", "!",
					     "{",  "}",	   "fi",   "done", "esac", "(",	    NULL };
	for (size_t i = 0; words[i]; i++) {
		if (word_is(w, words[i])) {
			return true;
		}
	}
	return false;
}

struct wrapper {
	const char *name;
	const char *short_arg; /* short options that take the next word */
	const char *const *long_arg; /* long options that take the next word when written without '=' */
	unsigned positional; /* operands before the command (timeout's duration, chroot's dir) */
	bool assignments; /* NAME=value operands may precede the command */
};

static const char *const sudo_long[] = { "--user",	 "--group",	      "--host", "--prompt",
					 "--close-from", "--chdir",	      "--role", "--type",
					 "--other-user", "--command-timeout", NULL };
static const char *const env_long[] = {
	"--unset", "--chdir", "--split-string", "--default-signal", "--ignore-signal", "--block-signal", NULL
};
static const char *const timeout_long[] = { "--signal", "--kill-after", NULL };
static const char *const xargs_long[] = { "--arg-file",	 "--delimiter", "--max-lines",	      "--max-args",
					  "--max-procs", "--max-chars", "--process-slot-var", "--eof",
					  "--replace",	 NULL };
static const char *const nice_long[] = { "--adjustment", NULL };
static const char *const none_long[] = { NULL };

static const struct wrapper wrappers[] = {
	{ "sudo", "ughpCDrtUT", sudo_long, 0, true },  { "doas", "uC", none_long, 0, false },
	{ "env", "uCS", env_long, 0, true },	       { "nohup", "", none_long, 0, false },
	{ "time", "fo", none_long, 0, false },	       { "exec", "a", none_long, 0, false },
	{ "command", "", none_long, 0, false },	       { "builtin", "", none_long, 0, false },
	{ "xargs", "aEILnPsd", xargs_long, 0, false }, { "nice", "n", nice_long, 0, false },
	{ "ionice", "cnp", none_long, 0, false },      { "timeout", "sk", timeout_long, 1, false },
	{ "stdbuf", "ioe", none_long, 0, false },      { "setsid", "", none_long, 0, false },
	{ "busybox", "", none_long, 0, false },	       { "chroot", "", none_long, 1, false },
	{ "unbuffer", "", none_long, 0, false },       { "caffeinate", "t", none_long, 0, false },
};

static const char *word_basename(const char *t)
{
	const char *slash = strrchr(t, '/');
	return slash && slash[1] ? slash + 1 : t;
}

static const struct wrapper *find_wrapper(const struct word *w)
{
	_cleanup_free_ char *t = NULL;
	const char *b;
	if (w->subst || word_str(w, &t) < 0) {
		return NULL;
	}
	b = word_basename(t);
	for (size_t i = 0; i < ARRAY_SIZE(wrappers); i++) {
		if (strcmp(b, wrappers[i].name) == 0) {
			return &wrappers[i];
		}
	}
	return NULL;
}

static bool is_shell_name(const char *b)
{
	static const char *const shells[] = { "sh",   "bash", "zsh",  "dash", "ksh",  "ash",   "mksh",
					      "posh", "yash", "fish", "csh",  "tcsh", "rbash", NULL };
	for (size_t i = 0; shells[i]; i++) {
		if (strcmp(b, shells[i]) == 0) {
			return true;
		}
	}
	return false;
}

static bool long_takes_arg(const char *t, const char *const *long_arg)
{
	for (size_t i = 0; long_arg[i]; i++) {
		if (strcmp(t, long_arg[i]) == 0) {
			return true;
		}
	}
	return false;
}

/*
 * Skip the wrapper at words[i] and its options; returns the index of what it
 * runs. env -S STRING is parsed as its own line.
 */
static int skip_wrapper(struct ctx *c, struct cmdbuild *cb, size_t i, const struct wrapper *wr, unsigned depth,
			size_t *ret)
{
	unsigned positional = wr->positional;
	int r;
	i++;
	while (i < cb->n_words) {
		_cleanup_free_ char *t = NULL;
		struct word *w = &cb->words[i];
		r = word_str(w, &t);
		if (r < 0) {
			return r;
		}
		if (strcmp(t, "--") == 0) {
			i++;
			break;
		}
		if (t[0] == '-' && t[1] != '\0' && positional == wr->positional) {
			bool takes = false;
			const char *split = NULL;
			if (t[1] == '-') {
				takes = long_takes_arg(t, wr->long_arg);
				if (strcmp(wr->name, "env") == 0 && strncmp(t, "--split-string=", 15) == 0) {
					split = t + 15;
				}
			} else if (t[2] == '\0' && strchr(wr->short_arg, t[1])) {
				takes = true;
			} else if (strcmp(wr->name, "env") == 0 && t[1] == 'S') {
				split = t + 2;
			}
			if (takes && strcmp(wr->name, "env") == 0 &&
			    (strcmp(t, "-S") == 0 || strcmp(t, "--split-string") == 0) && i + 1 < cb->n_words) {
				_cleanup_free_ char *arg = NULL;
				r = word_str(&cb->words[i + 1], &arg);
				if (r >= 0) {
					r = parse_string(c, arg, strlen(arg), depth + 1);
				}
				if (r < 0) {
					return r;
				}
			} else if (split) {
				r = parse_string(c, split, strlen(split), depth + 1);
				if (r < 0) {
					return r;
				}
			}
			i += takes ? 2 : 1;
			continue;
		}
		if (wr->assignments && word_is_assignment(w)) {
			i++;
			continue;
		}
		if (strcmp(wr->name, "env") == 0 && strcmp(t, "-") == 0) {
			i++;
			continue;
		}
		if (positional > 0) {
			positional--;
			i++;
			continue;
		}
		break;
	}
	*ret = i;
	return 0;
}

/*
 * Parse argv[from..to) again as a command line: joined by spaces as eval,
 * ssh and watch do, or (quote_each) with each word single-quoted so that
 * find -exec's words stay words.
 */
static int parse_words(struct ctx *c, char *const *argv, size_t from, size_t to, bool quote_each, unsigned depth)
{
	struct buf all;
	int r;
	if (from >= to) {
		return 0;
	}
	r = buf_init(&all, SH_MAX_OUTPUT, 0);
	for (size_t k = from; r >= 0 && k < to; k++) {
		if (k > from) {
			r = buf_put_u8(&all, ' ');
		}
		if (r >= 0 && quote_each) {
			r = put_word(c, &all, argv[k], strlen(argv[k]), true, NULL);
		} else if (r >= 0) {
			r = buf_put(&all, argv[k], strlen(argv[k]));
		}
	}
	if (r >= 0) {
		r = parse_string(c, (const char *)buf_ptr(&all), buf_len(&all), depth + 1);
	}
	buf_release(&all);
	return bufr(c, r);
}

/* Index of the first operand after options; short options in with_arg take the next word. */
static size_t skip_options(char *const *argv, size_t argc, size_t k, const char *with_arg)
{
	while (k < argc && argv[k][0] == '-' && argv[k][1] != '\0') {
		if (strcmp(argv[k], "--") == 0) {
			return k + 1;
		}
		if (argv[k][1] != '-' && argv[k][2] == '\0' && strchr(with_arg, argv[k][1])) {
			k++;
		}
		k++;
	}
	return k;
}

/* Commands that run their arguments as another command line: eval, su -c, ssh, watch, find -exec. */
static int recurse_runners(struct ctx *c, const struct sh_command *cmd, unsigned depth)
{
	const char *name = cmd->argv[0];
	size_t k;
	if (strcmp(name, "eval") == 0) {
		return parse_words(c, cmd->argv, 1, cmd->argc, false, depth);
	}
	if (strcmp(name, "su") == 0) {
		for (k = 1; k + 1 < cmd->argc; k++) {
			if (strcmp(cmd->argv[k], "-c") == 0 || strcmp(cmd->argv[k], "--command") == 0) {
				return parse_string(c, cmd->argv[k + 1], strlen(cmd->argv[k + 1]), depth + 1);
			}
		}
		return 0;
	}
	if (strcmp(name, "ssh") == 0) {
		k = skip_options(cmd->argv, cmd->argc, 1, "bcDEeFIiJLlmOopQRSWw");
		return parse_words(c, cmd->argv, k + 1, cmd->argc, false, depth);
	}
	if (strcmp(name, "watch") == 0) {
		k = skip_options(cmd->argv, cmd->argc, 1, "nq");
		return parse_words(c, cmd->argv, k, cmd->argc, false, depth);
	}
	if (strcmp(name, "find") == 0) {
		for (k = 1; k < cmd->argc; k++) {
			const char *a = cmd->argv[k];
			size_t end;
			int r;
			if (strcmp(a, "-exec") != 0 && strcmp(a, "-execdir") != 0 && strcmp(a, "-ok") != 0 &&
			    strcmp(a, "-okdir") != 0) {
				continue;
			}
			for (end = k + 1; end < cmd->argc; end++) {
				if (strcmp(cmd->argv[end], ";") == 0 || strcmp(cmd->argv[end], "+") == 0) {
					break;
				}
			}
			r = parse_words(c, cmd->argv, k + 1, end, true, depth);
			if (r < 0) {
				return r;
			}
			k = end;
		}
	}
	return 0;
}

/*
 * Record one simple command: strip assignments, reserved words and wrappers,
 * append its normalised text to line, recurse into what a shell would parse
 * again, and mark heredocs that feed a shell.
 */
static int finish_command(struct ctx *c, struct cmdbuild *cb, unsigned depth, struct buf *line, struct heredoc *hd,
			  size_t n_hd)
{
	struct sh_parse *o = c->out;
	struct sh_command cmd = { 0 };
	struct buf joined = { 0 };
	size_t i = 0, last = 0;
	const char *name;
	int r;

	if (cb->n_words == 0) {
		goto redirs;
	}
	/* Assignments only (X=1): the command is the assignment itself. */
	while (i < cb->n_words && word_is_assignment(&cb->words[i])) {
		i++;
	}
	if (i == cb->n_words) {
		i = 0;
	}
	for (;;) {
		const struct wrapper *wr;
		last = i;
		while (i < cb->n_words && is_reserved_prefix(&cb->words[i])) {
			i++;
		}
		if (i >= cb->n_words) {
			i = last;
			break;
		}
		wr = find_wrapper(&cb->words[i]);
		if (!wr) {
			break;
		}
		last = i;
		r = skip_wrapper(c, cb, i, wr, depth, &i);
		if (r < 0) {
			return r;
		}
		while (i < cb->n_words && word_is_assignment(&cb->words[i])) {
			i++;
		}
		if (i >= cb->n_words) {
			/* A wrapper that runs nothing (sudo -s, env): it is the command. */
			i = last;
			break;
		}
	}

	if (c->out->n_commands >= SH_MAX_COMMANDS) {
		return fail(c, SH_ERR_TOO_MANY_COMMANDS);
	}
	cmd.argc = cb->n_words - i;
	cmd.argv = calloc(cmd.argc + 1, sizeof(char *));
	if (!cmd.argv) {
		return -ENOMEM;
	}
	r = buf_init(&joined, SH_MAX_OUTPUT, 0);
	for (size_t k = 0; r >= 0 && k < cmd.argc; k++) {
		const struct word *w = &cb->words[i + k];
		r = word_str(w, &cmd.argv[k]);
		if (r < 0) {
			break;
		}
		if (k == 0 && !w->subst) {
			const char *b = word_basename(cmd.argv[0]);
			if (b != cmd.argv[0]) {
				memmove(cmd.argv[0], b, strlen(b) + 1);
			}
		}
		if (k > 0) {
			r = bufr(c, buf_put_u8(&joined, ' '));
		}
		if (r >= 0) {
			r = put_word(c, &joined, cmd.argv[k], strlen(cmd.argv[k]), w->quote, NULL);
		}
		if (r >= 0) {
			r = count_out(c, strlen(cmd.argv[k]) + 1);
		}
		/* The line keeps argv[0] as written (a ./script stays visible). */
		if (r >= 0 && buf_len(line) > 0 && buf_ptr(line)[buf_len(line) - 1] != ' ') {
			r = bufr(c, buf_put_u8(line, ' '));
		}
		if (r >= 0) {
			r = put_word(c, line, (const char *)buf_ptr(&w->text), buf_len(&w->text), w->quote,
				     buf_ptr(&w->qmask));
		}
	}
	if (r >= 0) {
		r = buf_dup_cstring(&joined, &cmd.joined);
	}
	if (r >= 0) {
		r = count_out(c, buf_len(&joined) + 1);
	}
	buf_release(&joined);
	if (r >= 0 && o->n_commands == c->cap_commands) {
		size_t cap = c->cap_commands ? c->cap_commands * 2 : INIT_CAP;
		struct sh_command *p = reallocarray(o->commands, cap, sizeof(*p));
		if (!p) {
			r = -ENOMEM;
		} else {
			o->commands = p;
			c->cap_commands = cap;
		}
	}
	if (r < 0) {
		for (size_t k = 0; k < cmd.argc; k++) {
			free(cmd.argv[k]);
		}
		free(cmd.argv);
		free(cmd.joined);
		return r;
	}
	o->commands[o->n_commands++] = cmd;
	name = cmd.argv[0];

	/* What a shell parses again. */
	if (is_shell_name(name)) {
		bool has_c = false, operand = false;
		size_t k = 1;
		for (; k < cmd.argc; k++) {
			const char *a = cmd.argv[k];
			if (strcmp(a, "--") == 0 || strcmp(a, "-") == 0) {
				k++;
				break;
			}
			if ((a[0] == '-' || a[0] == '+') && a[1] != '\0') {
				if (a[0] == '-' && a[1] != '-' && strchr(a, 'c')) {
					has_c = true;
				}
				if ((strcmp(a + 1, "o") == 0 || strcmp(a, "--rcfile") == 0 ||
				     strcmp(a, "--init-file") == 0) &&
				    k + 1 < cmd.argc) {
					k++;
				}
				continue;
			}
			break;
		}
		if (k < cmd.argc) {
			operand = true;
			if (has_c) {
				r = parse_string(c, cmd.argv[k], strlen(cmd.argv[k]), depth + 1);
				if (r < 0) {
					return r;
				}
			}
		}
		if (!has_c && !operand) {
			for (size_t h = cb->hd_first; h < n_hd; h++) {
				hd[h].feeds_shell = true;
			}
			for (size_t h = 0; h < cb->n_redirs; h++) {
				if (strcmp(cb->redirs[h].op, "<<<") == 0) {
					const struct word *t = &cb->redirs[h].target;
					r = parse_string(c, (const char *)buf_ptr(&t->text), buf_len(&t->text),
							 depth + 1);
					if (r < 0) {
						return r;
					}
				}
			}
		}
	} else {
		r = recurse_runners(c, &cmd, depth);
		if (r < 0) {
			return r;
		}
	}

redirs:
	for (size_t k = 0; k < cb->n_redirs; k++) {
		const struct redir *rd = &cb->redirs[k];
		if (buf_len(line) > 0) {
			r = bufr(c, buf_put_u8(line, ' '));
			if (r < 0) {
				return r;
			}
		}
		r = bufr(c, buf_put(line, rd->op, strlen(rd->op)));
		if (r >= 0) {
			r = bufr(c, buf_put_u8(line, ' '));
		}
		if (r >= 0) {
			r = put_word(c, line, (const char *)buf_ptr(&rd->target.text), buf_len(&rd->target.text),
				     rd->target.quote, buf_ptr(&rd->target.qmask));
		}
		if (r < 0) {
			return r;
		}
	}
	return 0;
}

/* Read the bodies of pending heredocs after a newline. */
static int read_heredocs(struct ctx *c, struct src *src, unsigned depth, struct heredoc *hd, size_t n_hd)
{
	int r;
	for (size_t h = 0; h < n_hd; h++) {
		size_t body_start = src->pos;
		size_t body_end;
		bool closed = false;
		size_t dl = strlen(hd[h].delim);
		while (src->pos < src->n) {
			const char *nl = memchr(src->s + src->pos, '\n', src->n - src->pos);
			size_t end = nl ? (size_t)(nl - src->s) : src->n;
			size_t ls = src->pos;
			if (hd[h].strip_tabs) {
				while (ls < end && src->s[ls] == '\t') {
					ls++;
				}
			}
			if (end - ls == dl && memcmp(src->s + ls, hd[h].delim, dl) == 0) {
				body_end = src->pos;
				src->pos = nl ? end + 1 : end;
				closed = true;
				break;
			}
			src->pos = nl ? end + 1 : end;
		}
		if (!closed) {
			return fail(c, SH_ERR_HEREDOC);
		}
		if (hd[h].feeds_shell) {
			r = parse_string(c, src->s + body_start, body_end - body_start, depth + 1);
			if (r < 0) {
				return r;
			}
		} else if (hd[h].expand) {
			struct src body = { .s = src->s, .n = body_end, .pos = body_start };
			struct word scratch;
			r = word_init(c, &scratch);
			if (r < 0) {
				return r;
			}
			r = read_dquote_body(c, &body, depth, &scratch, false);
			word_release(&scratch);
			if (r < 0) {
				return r;
			}
		}
	}
	return 0;
}

static void heredocs_release(struct heredoc *hd, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(hd[i].delim);
	}
}

/* Redirection operators, longest first. */
static size_t redir_op_len(const char *p, size_t n)
{
	static const char *const ops[] = {
		"&>>", "<<<", "<<-", "&>", "<<", "<>", "<&", ">>", ">&", ">|", "<", ">", NULL
	};
	for (size_t i = 0; ops[i]; i++) {
		size_t l = strlen(ops[i]);
		if (l <= n && memcmp(p, ops[i], l) == 0) {
			return l;
		}
	}
	return 0;
}

static int put_sep(struct ctx *c, struct buf *line, const char **pending_op)
{
	int r = 0;
	if (buf_len(line) > 0) {
		r = bufr(c, buf_put_u8(line, ' '));
		if (r >= 0 && *pending_op) {
			r = bufr(c, buf_put(line, *pending_op, strlen(*pending_op)));
			if (r >= 0) {
				r = bufr(c, buf_put_u8(line, ' '));
			}
		}
	}
	*pending_op = NULL;
	return r;
}

/*
 * One command list, up to term (')' for substitutions and subshells, '\0'
 * for the end of the string). Its normalised line is pushed to the output,
 * or appended as "( ... )" to inline_out for a subshell.
 */
static int parse_list(struct ctx *c, struct src *src, unsigned depth, char term, struct buf *inline_out)
{
	struct cmdbuild cb = { 0 };
	struct heredoc hd[SH_MAX_HEREDOCS];
	size_t n_hd = 0;
	struct buf line = { 0 };
	const char *pending_op = NULL;
	bool started = false; /* the current command's text was begun in line */
	int r;

	if (depth > SH_MAX_DEPTH) {
		return fail(c, SH_ERR_TOO_DEEP);
	}
	r = buf_init(&line, SH_MAX_OUTPUT, 0);
	if (r < 0) {
		return r;
	}

	for (;;) {
		char ch, next;
		const char *op = NULL;
		size_t oplen;

		while (src->pos < src->n) {
			if (is_blank(src->s[src->pos])) {
				src->pos++;
			} else if (src->s[src->pos] == '\\' && src->pos + 1 < src->n && src->s[src->pos + 1] == '\n') {
				src->pos += 2;
			} else {
				break;
			}
		}
		if (src->pos >= src->n) {
			if (term) {
				r = fail(c, SH_ERR_SUBST);
				goto out;
			}
			break;
		}
		ch = src->s[src->pos];
		next = src->pos + 1 < src->n ? src->s[src->pos + 1] : '\0';

		if (ch == term) {
			src->pos++;
			break;
		}
		if (ch == '#') {
			const char *nl = memchr(src->s + src->pos, '\n', src->n - src->pos);
			src->pos = nl ? (size_t)(nl - src->s) : src->n;
			continue;
		}
		if (ch == ')') {
			r = fail(c, SH_ERR_SYNTAX);
			goto out;
		}
		if (ch == '\n' || ch == ';' || (ch == '&' && next != '>') || ch == '|') {
			if (ch == '\n' || ch == ';') {
				op = ";";
				src->pos += (ch == ';' && next == ';') ? 2 : 1;
			} else if (ch == '&') {
				op = next == '&' ? "&&" : "&";
				src->pos += next == '&' ? 2 : 1;
			} else {
				op = next == '|' ? "||" : next == '&' ? "|&" : "|";
				src->pos += (next == '|' || next == '&') ? 2 : 1;
			}
			r = started ? finish_command(c, &cb, depth, &line, hd, n_hd) : 0;
			if (r < 0) {
				goto out;
			}
			cmdbuild_reset(&cb);
			cb.hd_first = n_hd;
			started = false;
			if (buf_len(&line) > 0) {
				pending_op = op;
			}
			if (ch == '\n' && n_hd > 0) {
				r = read_heredocs(c, src, depth, hd, n_hd);
				heredocs_release(hd, n_hd);
				n_hd = 0;
				cb.hd_first = 0;
				if (r < 0) {
					goto out;
				}
			}
			continue;
		}
		if (ch == '(') {
			if (cb.n_words > 0) {
				/*
				 * name() { ...; }: a function definition. The name runs
				 * nothing; the body's commands start after "()".
				 */
				if (next == ')') {
					src->pos += 2;
					cmdbuild_reset(&cb);
					cb.hd_first = n_hd;
					continue;
				}
				r = fail(c, SH_ERR_SYNTAX);
				goto out;
			}
			src->pos++;
			r = put_sep(c, &line, &pending_op);
			if (r >= 0) {
				started = true;
				cb.subshell = true;
				r = parse_list(c, src, depth + 1, ')', &line);
			}
			if (r < 0) {
				goto out;
			}
			continue;
		}

		/* A redirection, with an optional fd number (2>) or & (&>). */
		oplen = 0;
		{
			size_t j = src->pos;
			while (j < src->n && src->s[j] >= '0' && src->s[j] <= '9') {
				j++;
			}
			if (j < src->n && (src->s[j] == '<' || src->s[j] == '>') &&
			    !(j + 1 < src->n && src->s[j + 1] == '(')) {
				oplen = j - src->pos + redir_op_len(src->s + j, src->n - j);
			} else if (j == src->pos && ch == '&' && next == '>') {
				oplen = redir_op_len(src->s + j, src->n - j);
			}
		}
		if (!started) {
			r = put_sep(c, &line, &pending_op);
			if (r < 0) {
				goto out;
			}
			started = true;
		}
		if (oplen > 0) {
			const char *opp = src->s + src->pos;
			struct word target;
			size_t digits = 0;
			bool heredoc, heredoc_dash;
			while (opp[digits] >= '0' && opp[digits] <= '9') {
				digits++;
			}
			heredoc = oplen - digits == 2 && memcmp(opp + digits, "<<", 2) == 0;
			heredoc_dash = oplen - digits == 3 && memcmp(opp + digits, "<<-", 3) == 0;
			src->pos += oplen;
			while (src->pos < src->n && is_blank(src->s[src->pos])) {
				src->pos++;
			}
			if (src->pos >= src->n || ends_word(src->s[src->pos]) ||
			    ((src->s[src->pos] == '<' || src->s[src->pos] == '>') &&
			     !(src->pos + 1 < src->n && src->s[src->pos + 1] == '('))) {
				r = fail(c, SH_ERR_SYNTAX);
				goto out;
			}
			r = word_init(c, &target);
			if (r < 0) {
				goto out;
			}
			r = read_word(c, src, depth, &target);
			if (r >= 0 && (heredoc || heredoc_dash)) {
				if (n_hd >= SH_MAX_HEREDOCS) {
					r = fail(c, SH_ERR_TOO_MANY_HEREDOCS);
				} else {
					r = word_str(&target, &hd[n_hd].delim);
					if (r >= 0) {
						hd[n_hd].strip_tabs = heredoc_dash;
						hd[n_hd].expand = target.unquoted_prefix == buf_len(&target.text) &&
								  !target.subst;
						hd[n_hd].feeds_shell = false;
						n_hd++;
					}
				}
			}
			if (r >= 0) {
				r = cmdbuild_add_redir(&cb, opp, oplen, &target);
			}
			if (r < 0) {
				word_release(&target);
				goto out;
			}
			continue;
		}

		{
			struct word w;
			r = word_init(c, &w);
			if (r < 0) {
				goto out;
			}
			r = read_word(c, src, depth, &w);
			if (r >= 0) {
				r = cmdbuild_add_word(&cb, &w);
			}
			if (r < 0) {
				word_release(&w);
				goto out;
			}
		}
	}

	r = finish_command(c, &cb, depth, &line, hd, n_hd);
	if (r < 0) {
		goto out;
	}
	if (pending_op && strcmp(pending_op, "&") == 0) {
		r = bufr(c, buf_put(&line, " &", 2));
		if (r < 0) {
			goto out;
		}
	}
	if (n_hd > 0) {
		r = fail(c, SH_ERR_HEREDOC);
		goto out;
	}
	if (inline_out) {
		r = bufr(c, buf_put(inline_out, "( ", 2));
		if (r >= 0) {
			r = bufr(c, buf_put(inline_out, buf_ptr(&line), buf_len(&line)));
		}
		if (r >= 0) {
			r = bufr(c, buf_put(inline_out, " )", 2));
		}
	} else {
		r = push_line(c, &line);
	}
out:
	heredocs_release(hd, n_hd);
	cmdbuild_release(&cb);
	buf_release(&line);
	return r;
}

void sh_parse_free(struct sh_parse *p)
{
	if (!p) {
		return;
	}
	for (size_t i = 0; i < p->n_commands; i++) {
		for (size_t k = 0; k < p->commands[i].argc; k++) {
			free(p->commands[i].argv[k]);
		}
		free(p->commands[i].argv);
		free(p->commands[i].joined);
	}
	free(p->commands);
	for (size_t i = 0; i < p->n_lines; i++) {
		free(p->lines[i]);
	}
	free(p->lines);
	free(p);
}

int sh_parse(const char *s, size_t n, enum sh_error *err, struct sh_parse **ret)
{
	struct ctx c = { 0 };
	struct src src = { .s = s, .n = n, .pos = 0 };
	int r;

	if (err) {
		*err = SH_OK;
	}
	if (!s || !ret) {
		return -EINVAL;
	}
	if (n > SH_MAX_INPUT) {
		r = fail(&c, SH_ERR_TOO_LONG);
		goto fail;
	}
	if (memchr(s, '\0', n)) {
		r = fail(&c, SH_ERR_NUL);
		goto fail;
	}
	c.out = calloc(1, sizeof(*c.out));
	if (!c.out) {
		return -ENOMEM;
	}
	r = parse_list(&c, &src, 0, 0, NULL);
	if (r < 0) {
		sh_parse_free(c.out);
		goto fail;
	}
	*ret = c.out;
	return 0;
fail:
	if (err && c.err != SH_OK) {
		*err = c.err;
	}
	return r;
}
