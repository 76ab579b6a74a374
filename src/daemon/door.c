/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>
#include <strings.h>

#include "banned.h"
#include "crypto.h"
#include "daemon/door.h"

static bool safe_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '@' ||
	       c == '%' || c == '+' || c == '=' || c == ':' || c == ',' || c == '.' || c == '/' || c == '-';
}

int door_quote_word(const char *s, struct buf *out)
{
	size_t n = strlen(s);
	bool bare = n > 0;
	int r;

	if (n > DOOR_MAX_WORD) {
		return -E2BIG;
	}
	for (size_t i = 0; i < n && bare; i++) {
		bare = safe_byte((unsigned char)s[i]);
	}
	if (bare) {
		return buf_put(out, s, n);
	}
	r = buf_put_u8(out, '\'');
	for (size_t i = 0; i < n && r >= 0; i++) {
		/* A single quote cannot appear inside '...': close, escape it, reopen. */
		r = s[i] == '\'' ? buf_put(out, "'\\''", 4) : buf_put_u8(out, (uint8_t)s[i]);
	}
	return r < 0 ? r : buf_put_u8(out, '\'');
}

static const char *const reserved_words[] = {
	"!",  "{",   "}",	 "[[", "]]", "case",   "coproc", "do",	 "done",  "elif",  "else", "esac",
	"fi", "for", "function", "if", "in", "select", "then",	 "time", "until", "while", NULL,
};

static bool is_reserved(const char *s)
{
	for (size_t i = 0; reserved_words[i]; i++) {
		if (strcmp(s, reserved_words[i]) == 0) {
			return true;
		}
	}
	return false;
}

/* A program word that would be read differently from how the agent execs it. */
static int check_program(const char *w, bool with_env)
{
	if (w[0] == '%') {
		return -EPERM; /* a job spec to bash and zsh */
	}
	if (with_env && (w[0] == '-' || strchr(w, '='))) {
		return -EPERM; /* env(1) would take it as an option or an assignment */
	}
	return 0;
}

int door_command_line(char *const *argv, char *const *env, char **ret)
{
	struct buf b;
	size_t nargs = 0, nenv = 0;
	bool with_env;
	char *s = NULL;
	int r;

	if (!argv || !argv[0]) {
		return -EINVAL;
	}
	for (char *const *a = argv; *a; a++) {
		if (++nargs > DOOR_MAX_ARGS) {
			return -E2BIG;
		}
	}
	for (char *const *e = env; e && *e; e++) {
		if (++nenv > DOOR_MAX_ENV) {
			return -E2BIG;
		}
	}
	with_env = nenv > 0;
	r = check_program(argv[0], with_env);
	if (r < 0) {
		return r;
	}
	r = buf_init(&b, DOOR_MAX_LINE + 1, 0);
	if (r < 0) {
		return r;
	}
	if (with_env) {
		r = buf_put(&b, "env", 3);
		for (char *const *e = env; e && *e && r >= 0; e++) {
			const char *why;
			r = door_env_check(*e, &why);
			if (r >= 0) {
				r = buf_put_u8(&b, ' ');
			}
			if (r >= 0) {
				r = door_quote_word(*e, &b);
			}
		}
		if (r >= 0) {
			r = buf_put_u8(&b, ' ');
		}
	}
	if (r >= 0) {
		if (!with_env && (strchr(argv[0], '=') || is_reserved(argv[0]))) {
			/* Quoted, the shell reads it as a command name, as execve does. */
			r = buf_put_u8(&b, '\'');
			for (const char *p = argv[0]; *p && r >= 0; p++) {
				r = *p == '\'' ? buf_put(&b, "'\\''", 4) : buf_put_u8(&b, (uint8_t)*p);
			}
			if (r >= 0) {
				r = buf_put_u8(&b, '\'');
			}
		} else {
			r = door_quote_word(argv[0], &b);
		}
	}
	for (size_t i = 1; i < nargs && r >= 0; i++) {
		r = buf_put_u8(&b, ' ');
		if (r >= 0) {
			r = door_quote_word(argv[i], &b);
		}
	}
	if (r >= 0 && buf_len(&b) > DOOR_MAX_LINE) {
		r = -E2BIG;
	}
	if (r >= 0) {
		r = buf_dup_cstring(&b, &s);
	}
	buf_release(&b);
	if (r == -E2BIG || r == -EBADMSG) {
		return r == -EBADMSG ? -EINVAL : r;
	}
	if (r < 0) {
		return r;
	}
	*ret = s;
	return 0;
}

/*
 * Names that change what runs: the dynamic loader, shells' startup and trace
 * hooks, interpreters' module paths and startup files, build tools' wrappers,
 * git's programs and config, pagers and editors that tools spawn.
 */
static const char *const refused_exact[] = {
	"PATH",
	"HOME",
	"SHELL",
	"ENV",
	"BASH_ENV",
	"SHELLOPTS",
	"BASHOPTS",
	"PS4",
	"PS0",
	"PROMPT_COMMAND",
	"IFS",
	"CDPATH",
	"GLOBIGNORE",
	"ZDOTDIR",
	"CLASSPATH",
	"GCONV_PATH",
	"LOCPATH",
	"NLSPATH",
	"GLIBC_TUNABLES",
	"HOSTALIASES",
	"RESOLV_HOST_CONF",
	"TMPDIR_EXEC",
	"MALLOC_CHECK_",
	"MALLOC_PERTURB_",
	"CC",
	"CXX",
	"CPP",
	"LD",
	"AR",
	"AS",
	"NM",
	"RANLIB",
	"STRIP",
	"OBJCOPY",
	"MAKE",
	"MAKEFLAGS",
	"MFLAGS",
	"GNUMAKEFLAGS",
	"MAKEFILES",
	"CFLAGS",
	"CXXFLAGS",
	"CPPFLAGS",
	"LDFLAGS",
	"RUSTC",
	"RUSTC_WRAPPER",
	"RUSTC_WORKSPACE_WRAPPER",
	"RUSTFLAGS",
	"RUSTDOCFLAGS",
	"GOFLAGS",
	"GOTOOLCHAIN",
	"GOENV",
	"CGO_CFLAGS",
	"CGO_LDFLAGS",
	"PKG_CONFIG",
	"PKG_CONFIG_PATH",
	"EDITOR",
	"VISUAL",
	"PAGER",
	"MANPAGER",
	"BROWSER",
	"LESSOPEN",
	"LESSCLOSE",
	"SSH_ASKPASS",
	"SUDO_ASKPASS",
	"GPG_AGENT_INFO",
	"GNUPGHOME",
	"PIP_CONFIG_FILE",
	"PIP_INDEX_URL",
	"PIP_EXTRA_INDEX_URL",
	"UV_INDEX_URL",
	"CURL_HOME",
	"WGETRC",
	"SSL_CERT_FILE",
	"SSL_CERT_DIR",
	"REQUESTS_CA_BUNDLE",
	"GEM_HOME",
	"GEM_PATH",
	"BUNDLE_GEMFILE",
	"COMPOSER_HOME",
	"DOTNET_STARTUP_HOOKS",
	"TERMINFO",
	"TERMINFO_DIRS",
	"INPUTRC",
	"EMACSLOADPATH",
	"VIMINIT",
	"EXINIT",
	"MYVIMRC",
	"CMAKE_TOOLCHAIN_FILE",
	"CMAKE_C_COMPILER_LAUNCHER",
	"CMAKE_CXX_COMPILER_LAUNCHER",
	"CCACHE_PREFIX",
	"DISTCC_HOSTS",
	"http_proxy",
	"https_proxy",
	"HTTP_PROXY",
	"HTTPS_PROXY",
	"ALL_PROXY",
	"all_proxy",
	"NO_PROXY",
	"no_proxy",
	NULL,
};

static const char *const refused_prefix[] = {
	"LD_",	 "GIT_",   "XDG_",    "PYTHON",	   "PERL",	  "RUBY",  "NODE_",  "JAVA_",
	"JDK_",	 "_JAVA_", "LUA_",    "BASH_",	   "NPM_CONFIG_", "YARN_", "CARGO_", "TKBOX_",
	"DYLD_", "GCONV_", "GOPROXY", "GONOSUMDB", "GOPRIVATE",	  NULL,
};

/* Exceptions to the prefixes: settings that change no program, module path or hook. */
static const char *const allowed_exact[] = {
	"GIT_AUTHOR_NAME",
	"GIT_AUTHOR_EMAIL",
	"GIT_AUTHOR_DATE",
	"GIT_COMMITTER_NAME",
	"GIT_COMMITTER_EMAIL",
	"GIT_COMMITTER_DATE",
	"PYTHONUNBUFFERED",
	"PYTHONDONTWRITEBYTECODE",
	"PYTHONIOENCODING",
	"PYTHONUTF8",
	"PYTHONHASHSEED",
	"PYTHONFAULTHANDLER",
	"NODE_ENV",
	NULL,
};

bool door_env_name_refused(const char *name, size_t n, const char **ret_why)
{
	for (size_t i = 0; allowed_exact[i]; i++) {
		if (strlen(allowed_exact[i]) == n && memcmp(name, allowed_exact[i], n) == 0) {
			return false;
		}
	}
	for (size_t i = 0; refused_exact[i]; i++) {
		if (strlen(refused_exact[i]) == n && memcmp(name, refused_exact[i], n) == 0) {
			*ret_why = "it changes which program runs or how it starts";
			return true;
		}
	}
	for (size_t i = 0; refused_prefix[i]; i++) {
		size_t pl = strlen(refused_prefix[i]);
		/* npm reads npm_config_* in any case. */
		if (n >= pl && strncasecmp(name, refused_prefix[i], pl) == 0 &&
		    (memcmp(name, refused_prefix[i], pl) == 0 || strcmp(refused_prefix[i], "NPM_CONFIG_") == 0)) {
			*ret_why = "names with this prefix can load code or change which program runs";
			return true;
		}
	}
	return false;
}

int door_env_check(const char *entry, const char **ret_why)
{
	const char *eq = strchr(entry, '=');
	size_t n;

	if (!eq || eq == entry) {
		*ret_why = "an env entry is NAME=VALUE";
		return -EINVAL;
	}
	n = (size_t)(eq - entry);
	if (n > DOOR_MAX_ENV_NAME || strlen(entry) > DOOR_MAX_WORD) {
		*ret_why = "too long";
		return -E2BIG;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)entry[i];
		bool ok =
			c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9');
		if (!ok) {
			*ret_why = "a name is [A-Za-z_][A-Za-z0-9_]*";
			return -EINVAL;
		}
	}
	if (door_env_name_refused(entry, n, ret_why)) {
		return -EPERM;
	}
	return 0;
}

/* Valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF) without NUL: jansson refuses a string that is not. */
static bool text_ok(const uint8_t *p, size_t n)
{
	json_t *s;

	if (memchr(p, 0, n)) {
		return false;
	}
	s = json_stringn((const char *)p, n);
	if (!s) {
		return false;
	}
	json_decref(s);
	return true;
}

int door_stdin_args(const void *p, size_t n, json_t *args)
{
	uint8_t h[SHA256_LEN];
	struct buf hex;
	char *hs = NULL;
	int r;

	if (n > DOOR_MAX_STDIN) {
		return -E2BIG;
	}
	r = sha256(n ? p : "", n, h);
	if (r < 0) {
		return r;
	}
	r = buf_init(&hex, 2 * SHA256_LEN + 1, 0);
	if (r < 0) {
		return r;
	}
	r = hex_encode(h, sizeof(h), &hex);
	if (r >= 0) {
		r = buf_dup_cstring(&hex, &hs);
	}
	buf_release(&hex);
	if (r < 0) {
		return r;
	}
	r = json_object_set_new(args, "stdin_sha256", json_string(hs)) < 0 ||
			    json_object_set_new(args, "stdin_bytes", json_integer((json_int_t)n)) < 0
		    ? -ENOMEM
		    : 0;
	free(hs);
	if (r >= 0 && n <= DOOR_MAX_STDIN_TEXT && text_ok(p, n)) {
		r = json_object_set_new(args, "stdin_text", json_stringn((const char *)p, n)) < 0 ? -ENOMEM : 0;
	}
	return r;
}

bool door_box_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 63) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-'))) {
			return false;
		}
	}
	return true;
}
