/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "banned.h"
#include "cli/commands.h"
#include "daemon/api-proto.h"
#include "daemon/door.h"
#include "daemon/secrets.h"
#include "daemon/supmsg.h"
#include "image/workspace-answer.h"
#include "image/workspace.h"
#include "json.h"
#include "secmem.h"
#include "strv.h"

/*
 * Secrets input (issue 13): the --secret flag (reference finding F6: a refused
 * flag never quotes the value), the create request's secrets, the daemon's
 * table (placeholders, env, hosts, the exec check, the supervisor's memfd) and
 * the workspace check (in the builder and through its confined child).
 */

#define VAL "ghp_T0kenValue_9f8e7d"

/* No 6-byte window of value appears in text (the "no part of a value" rule, as the e2e tests grep). */
static void assert_no_part(const char *text, const char *value)
{
	size_t n = strlen(value);

	for (size_t i = 0; i + 6 <= n; i++) {
		if (memmem(text, strlen(text), value + i, 6)) {
			fail_msg("\"%s\" holds a part of the value", text);
		}
	}
}

static int parse(const char *arg, int fd, bool *stdin_used, struct egress_secret *s, char *err)
{
	memset(s, 0, sizeof(*s));
	err[0] = '\0';
	return run_secret_parse(arg, fd, stdin_used, s, err, 1024);
}

static void assert_value(const struct egress_secret *s, const char *want)
{
	assert_int_equal(s->value_len, strlen(want));
	assert_memory_equal(s->value, want, strlen(want));
}

/* ---------------------------------------------------------------- the flag */

static void test_flag_f6(void **state)
{
	static const struct {
		const char *arg, *pasted;
	} cases[] = {
		{ "GH=" VAL "@api.github.com", VAL }, /* the value where the source goes */
		{ VAL, VAL }, /* the value alone */
		{ "GH=" VAL, VAL },
		{ "GH=env" VAL "@api.github.com", VAL },
		{ "GH=file" VAL "@api.github.com", VAL },
		{ "GH=stdin" VAL "@api.github.com", VAL },
		{ "GH=env:-" VAL "@api.github.com", VAL },
		{ "gh=" VAL "@api.github.com", VAL },
		{ "GH=abc@" VAL "@api.github.com", "abc@" VAL }, /* a value holding '@': split at the last one */
		{ "MZXW6YTBOI======", "MZXW6YTBOI======" }, /* base32: '=' is part of the value */
		{ "MZXW6YTBOI======@api.github.com", "MZXW6YTBOI======" },
		{ "dG9rZW4tdmFsdWU=", "dG9rZW4tdmFsdWU=" }, /* base64 */
	};
	struct egress_secret s;
	bool used = false;
	char err[1024];
	(void)state;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		assert_int_equal(parse(cases[i].arg, -1, &used, &s, err), -EINVAL);
		assert_non_null(strstr(err, "not shown"));
		assert_no_part(err, cases[i].pasted);
		assert_null(s.value);
	}
	/* the name is shown when the flag has its shape */
	assert_int_equal(parse("GH=" VAL "@api.github.com", -1, &used, &s, err), -EINVAL);
	assert_non_null(strstr(err, "--secret GH: the source must be env:VAR, file:PATH or stdin"));
	assert_false(used);
}

static void test_flag_env(void **state)
{
	struct egress_secret s;
	bool used = false;
	char err[1024];
	(void)state;

	assert_int_equal(setenv("TK_TEST_SECRET", VAL, 1), 0);
	assert_int_equal(parse("GH=env:TK_TEST_SECRET@API.github.com,uploads.github.com:X-Key", -1, &used, &s, err), 0);
	assert_string_equal(s.name, "GH");
	assert_value(&s, VAL);
	assert_int_equal(s.n_hosts, 2);
	assert_string_equal(s.hosts[0], "api.github.com");
	assert_string_equal(s.hosts[1], "uploads.github.com");
	assert_string_equal(s.header, "X-Key");
	secmem_free(s.value, s.value_len);

	assert_int_equal(parse("GH=env:TK_TEST_SECRET@api.github.com", -1, &used, &s, err), 0);
	assert_string_equal(s.header, "Authorization");
	secmem_free(s.value, s.value_len);

	/* an unset variable: its name is not quoted either (text after '=') */
	(void)unsetenv("TK_TEST_UNSET_VAR");
	assert_int_equal(parse("GH=env:TK_TEST_UNSET_VAR@api.github.com", -1, &used, &s, err), -ENOENT);
	assert_null(strstr(err, "TK_TEST_UNSET_VAR"));
	/* a short value: the rule, not the value */
	assert_int_equal(setenv("TK_TEST_SHORT", "q7Zx9", 1), 0);
	assert_int_equal(parse("GH=env:TK_TEST_SHORT@api.github.com", -1, &used, &s, err), -EINVAL);
	assert_non_null(strstr(err, "6 bytes"));
	assert_null(strstr(err, "q7Zx9"));
	/* the name, the hosts, the binding */
	assert_int_equal(parse("gh=env:TK_TEST_SECRET@api.github.com", -1, &used, &s, err), -EINVAL);
	assert_non_null(strstr(err, "[A-Z0-9_]"));
	assert_int_equal(parse("GH=env:TK_TEST_SECRET", -1, &used, &s, err), -EINVAL);
	assert_non_null(strstr(err, "no host"));
	assert_int_equal(parse("GH=env:TK_TEST_SECRET@*.github.com", -1, &used, &s, err), -EINVAL);
	assert_non_null(strstr(err, "wildcard"));
	assert_int_equal(parse("GH=env:TK_TEST_SECRET@192.0.2.1", -1, &used, &s, err), -EINVAL);
	assert_int_equal(parse("GH=env:TK_TEST_SECRET@api.github.com:443", -1, &used, &s, err), -EINVAL);
	assert_int_equal(parse("GH=env:TK_TEST_SECRET@a.example,a.example", -1, &used, &s, err), -EINVAL);
	assert_int_equal(parse("GH=env:TK_TEST_SECRET@a.example:Host", -1, &used, &s, err), -EINVAL);
	assert_int_equal(setenv("TK_TEST_NL", VAL "\n", 1), 0);
	assert_int_equal(parse("GH=env:TK_TEST_NL@a.example", -1, &used, &s, err), -EINVAL); /* env: keeps its bytes */
	assert_no_part(err, VAL);
	assert_false(used);
}

static void write_file(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, p, n), (ssize_t)n);
	assert_int_equal(close(fd), 0);
}

static void test_flag_file_stdin(void **state)
{
	char dir[] = "/tmp/tk-secret-f@XXXXXX", path[128], arg[256], err[1024];
	char big[EGRESS_SECRET_VALUE_MAX + 3];
	struct egress_secret s;
	bool used = false;
	int p[2];
	(void)state;

	assert_non_null(mkdtemp(dir));
	/* the path holds '@': the binding starts after the last one */
	(void)snprintf(path, sizeof(path), "%s/tok", dir);
	(void)snprintf(arg, sizeof(arg), "GH=file:%s@api.github.com", path);
	static const char *const forms[] = { VAL "\n", VAL "\r\n", VAL };
	for (size_t i = 0; i < ARRAY_SIZE(forms); i++) {
		write_file(path, forms[i], strlen(forms[i]));
		assert_int_equal(parse(arg, -1, &used, &s, err), 0);
		assert_value(&s, VAL); /* one trailing newline goes */
		assert_string_equal(s.hosts[0], "api.github.com");
		secmem_free(s.value, s.value_len);
	}
	write_file(path, VAL "\n\n", strlen(VAL) + 2); /* only one */
	assert_int_equal(parse(arg, -1, &used, &s, err), -EINVAL);
	assert_non_null(strstr(err, "control"));
	assert_no_part(err, VAL);
	write_file(path, VAL "\r", strlen(VAL) + 1);
	assert_int_equal(parse(arg, -1, &used, &s, err), -EINVAL);
	/* EGRESS_SECRET_VALUE_MAX with its newline, and one past it */
	memset(big, 'x', sizeof(big));
	big[EGRESS_SECRET_VALUE_MAX] = '\n';
	write_file(path, big, EGRESS_SECRET_VALUE_MAX + 1);
	assert_int_equal(parse(arg, -1, &used, &s, err), 0);
	assert_int_equal(s.value_len, EGRESS_SECRET_VALUE_MAX);
	secmem_free(s.value, s.value_len);
	big[EGRESS_SECRET_VALUE_MAX] = 'x';
	write_file(path, big, EGRESS_SECRET_VALUE_MAX + 1);
	assert_true(parse(arg, -1, &used, &s, err) < 0);
	assert_non_null(strstr(err, "4096"));
	/* not a regular file; missing (the path is not quoted) */
	(void)snprintf(arg, sizeof(arg), "GH=file:%s@api.github.com", dir);
	assert_int_equal(parse(arg, -1, &used, &s, err), -EINVAL);
	assert_non_null(strstr(err, "regular file"));
	(void)snprintf(arg, sizeof(arg), "GH=file:%s/none-such@api.github.com", dir);
	assert_int_equal(parse(arg, -1, &used, &s, err), -ENOENT);
	assert_null(strstr(err, "none-such"));
	(void)unlink(path);
	(void)rmdir(dir);

	/* stdin: read from the fd given, once */
	assert_int_equal(pipe(p), 0);
	assert_int_equal(write(p[1], VAL "\r\n", strlen(VAL) + 2), (ssize_t)strlen(VAL) + 2);
	(void)close(p[1]);
	assert_int_equal(parse("GH=stdin@api.github.com", p[0], &used, &s, err), 0);
	assert_value(&s, VAL);
	assert_true(used);
	secmem_free(s.value, s.value_len);
	assert_int_equal(parse("OTHER=stdin@api.github.com", p[0], &used, &s, err), -EINVAL);
	assert_non_null(strstr(err, "only one"));
	(void)close(p[0]);
}

/* ---------------------------------------------------------------- the create request */

static int decode(const char *body, struct api_create_req *q, struct api_error *e)
{
	memset(q, 0, sizeof(*q));
	return api_decode_create(body, strlen(body), q, e);
}

static void assert_refused(const char *body, const char *want, const char *value)
{
	struct api_create_req q;
	struct api_error e;

	assert_true(decode(body, &q, &e) < 0);
	assert_int_equal(e.status, 400);
	if (!strstr(e.message, want)) {
		fail_msg("\"%s\" does not say \"%s\"", e.message, want);
	}
	if (value) {
		assert_no_part(e.message, value);
	}
}

static void test_api(void **state)
{
	struct api_create_req q;
	struct api_error e;
	char body[8192];
	size_t k;
	(void)state;

	assert_int_equal(decode("{\"image\":\"x\",\"secrets\":[{\"name\":\"GH\",\"value\":\"" VAL
				"\",\"hosts\":[\"API.github.com\"]},{\"name\":\"K2\",\"value\":\"other-value-2\","
				"\"hosts\":[\"a.example\",\"b.example\"],\"header\":\"x-api-key\"}]}",
				&q, &e),
			 0);
	assert_int_equal(q.n_secrets, 2);
	assert_string_equal(q.secrets[0].name, "GH");
	assert_int_equal(q.secrets[0].value_len, strlen(VAL));
	assert_memory_equal(q.secrets[0].value, VAL, strlen(VAL));
	assert_string_equal(q.secrets[0].hosts[0], "api.github.com");
	assert_string_equal(q.secrets[0].header, "Authorization");
	assert_int_equal(q.secrets[1].n_hosts, 2);
	assert_string_equal(q.secrets[1].header, "x-api-key");
	/* the parsed tree holds no value any more: its bytes were wiped in place */
	{
		const json_t *v = json_object_get(json_array_get(json_object_get(q.root, "secrets"), 0), "value");
		assert_int_equal(json_string_length(v), strlen(VAL));
		for (size_t i = 0; i < json_string_length(v); i++) {
			assert_int_equal(json_string_value(v)[i], 0);
		}
		char *dump = json_dumps(q.root, 0);
		assert_no_part(dump, VAL);
		free(dump);
	}
	api_create_req_release(&q);

	assert_refused(
		"{\"image\":\"x\",\"secrets\":[{\"name\":\"GH\",\"value\":\"q7Zx9\",\"hosts\":[\"a.example\"]}]}",
		"6 bytes", "q7Zx9");
	assert_refused("{\"image\":\"x\",\"secrets\":[{\"name\":\"GH\",\"value\":\"" VAL
		       "\\n\",\"hosts\":[\"a.example\"]}]}",
		       "control", VAL);
	assert_refused("{\"image\":\"x\",\"secrets\":[{\"name\":\"GH\",\"value\":42,\"hosts\":[\"a.example\"]}]}",
		       "JSON string", NULL);
	assert_refused("{\"image\":\"x\",\"secrets\":[{\"name\":\"gh\",\"value\":\"" VAL
		       "\",\"hosts\":[\"a.example\"]}]}",
		       "[A-Z0-9_]", VAL);
	assert_refused("{\"image\":\"x\",\"secrets\":[{\"name\":\"GH\",\"value\":\"" VAL
		       "\",\"hosts\":[\"*.example.com\"]}]}",
		       "wildcard", VAL);
	assert_refused("{\"image\":\"x\",\"secrets\":[{\"name\":\"GH\",\"value\":\"" VAL
		       "\",\"hosts\":[\"a.example:443\"]}]}",
		       "hosts[0]", VAL);
	assert_refused("{\"image\":\"x\",\"secrets\":[{\"name\":\"GH\",\"value\":\"" VAL
		       "\",\"hosts\":[\"192.0.2.7\"]}]}",
		       "IP literal", VAL);
	assert_refused("{\"image\":\"x\",\"secrets\":[{\"name\":\"GH\",\"value\":\"" VAL "\",\"hosts\":[]}]}", "hosts",
		       VAL);
	assert_refused("{\"image\":\"x\",\"secrets\":[{\"name\":\"GH\",\"value\":\"" VAL
		       "\",\"hosts\":[\"a.example\"],\"header\":\"Host\"}]}",
		       "header", VAL);
	assert_refused("{\"image\":\"x\",\"secrets\":[{\"name\":\"GH\",\"value\":\"" VAL
		       "\",\"hosts\":[\"a.example\"],\"extra\":1}]}",
		       "secrets[0]", VAL);
	assert_refused("{\"image\":\"x\",\"secrets\":[{\"name\":\"GH\",\"value\":\"" VAL
		       "\",\"hosts\":[\"a.example\"]},{\"name\":\"GH\",\"value\":\"" VAL
		       "x\",\"hosts\":[\"b.example\"]}]}",
		       "named twice", VAL);
	assert_refused("{\"image\":\"x\",\"secrets\":{}}", "secrets is a list", NULL);
	/* wildcards through the binding rules */
	assert_refused("{\"image\":\"x\",\"secrets\":[{\"name\":\"GH\",\"value\":\"" VAL
		       "\",\"hosts\":[\"a.example\",\"*.b.example\"]}]}",
		       "wildcard", VAL);
	/* EGRESS_SECRET_HOSTS_MAX + 1 hosts */
	k = (size_t)snprintf(body, sizeof(body),
			     "{\"image\":\"x\",\"secrets\":[{\"name\":\"GH\",\"value\":\"%s\",\"hosts\":[", VAL);
	for (int i = 0; i <= EGRESS_SECRET_HOSTS_MAX; i++) {
		k += (size_t)snprintf(body + k, sizeof(body) - k, "%s\"h%d.example\"", i ? "," : "", i);
	}
	(void)snprintf(body + k, sizeof(body) - k, "]}]}");
	assert_refused(body, "EGRESS_SECRET_HOSTS_MAX", VAL);
	/* EGRESS_SECRET_MAX, and one past it */
	k = (size_t)snprintf(body, sizeof(body), "{\"image\":\"x\",\"secrets\":[");
	for (int i = 0; i < EGRESS_SECRET_MAX; i++) {
		k += (size_t)snprintf(body + k, sizeof(body) - k,
				      "%s{\"name\":\"S%d\",\"value\":\"value-number-%d\",\"hosts\":[\"a.example\"]}",
				      i ? "," : "", i, i);
	}
	(void)snprintf(body + k, sizeof(body) - k, "]}");
	assert_int_equal(decode(body, &q, &e), 0);
	assert_int_equal(q.n_secrets, EGRESS_SECRET_MAX);
	api_create_req_release(&q);
	(void)snprintf(body + k, sizeof(body) - k,
		       ",{\"name\":\"S99\",\"value\":\"value-number-99\",\"hosts\":[\"a.example\"]}]}");
	assert_refused(body, "EGRESS_SECRET_MAX", NULL);
}

/* ---------------------------------------------------------------- the daemon's table */

/* A table from a request body (secrets only). */
static void table(const char *secrets_json, struct box_secrets *s)
{
	struct api_create_req q;
	struct api_error e;
	char body[4096], err[512];

	(void)snprintf(body, sizeof(body), "{\"image\":\"x\",\"secrets\":%s}", secrets_json);
	assert_int_equal(decode(body, &q, &e), 0);
	memset(s, 0, sizeof(*s));
	assert_int_equal(box_secrets_from_api(&q, s, err, sizeof(err)), 0);
	for (size_t i = 0; i < q.n_secrets; i++) {
		assert_null(q.secrets[i].value); /* moved, not copied */
	}
	api_create_req_release(&q);
}

static bool placeholder_shape(const char *p, const char *name)
{
	size_t nl = strlen(name);

	if (strncmp(p, "tkbox_", 6) != 0 || strncmp(p + 6, name, nl) != 0 || p[6 + nl] != '_') {
		return false;
	}
	p += 7 + nl;
	return strlen(p) == EGRESS_SECRET_RANDOM_HEX && strspn(p, "0123456789abcdef") == EGRESS_SECRET_RANDOM_HEX;
}

#define TWO                                                                                                            \
	"[{\"name\":\"GH\",\"value\":\"" VAL "\",\"hosts\":[\"api.github.com\",\"b.example\"]},"                       \
	"{\"name\":\"K2\",\"value\":\"sek ret-42\",\"hosts\":[\"b.example\"],\"header\":\"X-Key\"}]"

static void test_placeholders(void **state)
{
	struct box_secrets a, b;
	struct api_create_req q = { 0 };
	struct egress_secret bad = { .name = "GH", .header = "Authorization", .n_hosts = 1 };
	char err[512];
	(void)state;

	table(TWO, &a);
	table(TWO, &b);
	assert_int_equal(a.n, 2);
	assert_true(placeholder_shape(a.v[0].placeholder, "GH"));
	assert_true(placeholder_shape(a.v[1].placeholder, "K2"));
	assert_string_not_equal(a.v[0].placeholder + 9, a.v[1].placeholder + 9);
	/* a new box of the same secrets gets new placeholders */
	assert_string_not_equal(a.v[0].placeholder, b.v[0].placeholder);
	assert_int_equal(a.v[1].value_len, 10);
	assert_memory_equal(a.v[1].value, "sek ret-42", 10);
	box_secrets_free(&a);
	box_secrets_free(&b);
	assert_int_equal(a.n, 0);
	assert_null(a.v);
	box_secrets_free(NULL);

	/* checked again in the daemon: a wildcard host that did not come through the decoder */
	(void)snprintf(bad.hosts[0], sizeof(bad.hosts[0]), "*.github.com");
	bad.value = secmem_dup(VAL, strlen(VAL));
	bad.value_len = strlen(VAL);
	q.secrets = &bad;
	q.n_secrets = 1;
	memset(&a, 0, sizeof(a));
	assert_int_equal(box_secrets_from_api(&q, &a, err, sizeof(err)), -EINVAL);
	assert_int_equal(a.n, 0);
	assert_non_null(bad.value); /* not taken: the request still owns it */
	assert_no_part(err, VAL);
	secmem_free(bad.value, bad.value_len);
}

static void test_env_hosts(void **state)
{
	struct box_secrets s;
	_cleanup_strv_ char **env = NULL, **hosts = NULL;
	char **none = NULL;
	char *user_ok[] = { "GHX=1", "PATH=/bin", NULL };
	char *user_same[] = { "GH=mine", NULL };
	char *user_value[] = { "TOKEN=Bearer " VAL, NULL };
	char want[128], err[512];
	(void)state;

	table(TWO, &s);
	assert_int_equal(box_secrets_env(&s, user_ok, &env, err, sizeof(err)), 0);
	(void)snprintf(want, sizeof(want), "GH=%s", s.v[0].placeholder);
	assert_string_equal(env[0], want);
	(void)snprintf(want, sizeof(want), "K2=%s", s.v[1].placeholder);
	assert_string_equal(env[1], want);
	assert_null(env[2]);
	assert_int_equal(box_secrets_env(&s, user_same, &none, err, sizeof(err)), -EEXIST);
	assert_non_null(strstr(err, "--env sets GH"));
	assert_int_equal(box_secrets_env(&s, user_value, &none, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "--env TOKEN holds the value of secret GH"));
	assert_no_part(err, VAL);
	assert_null(none);

	assert_int_equal(box_secrets_hosts(&s, &hosts), 0);
	assert_string_equal(hosts[0], "api.github.com");
	assert_string_equal(hosts[1], "b.example"); /* once, though two secrets name it */
	assert_null(hosts[2]);
	box_secrets_free(&s);
}

static void expect_exec(const struct box_secrets *s, char *const *argv, const char *line, const char *cwd,
			char *const *env, const char *in, const char *place)
{
	char why[512] = "";
	int r = box_secrets_check_exec(s, argv, line, cwd, env, in, in ? strlen(in) : 0, why, sizeof(why));

	if (!place) {
		assert_int_equal(r, 0);
		return;
	}
	assert_int_equal(r, -EACCES);
	if (!strstr(why, place) || !strstr(why, "rule secret-in-exec") || !strstr(why, "placeholder $K2")) {
		fail_msg("\"%s\" does not name %s", why, place);
	}
	assert_no_part(why, "sek ret-42");
}

static void test_exec_check(void **state)
{
	struct box_secrets s;
	char *argv_value[] = { "curl", "-H", "X-Key: sek ret-42", "https://b.example/", NULL };
	char *argv_split[] = { "echo", "sek", "ret-42", NULL }; /* the value is in no word, only in the line */
	char *argv_ok[] = { "sh", "-c", "curl -H \"X-Key: $K2\" https://b.example/", NULL };
	char *argv_near[] = { "echo", "sek ret-4", "SEK RET-42", "sek%20ret-42", NULL };
	char *env_value[] = { "A=1", "TOKEN=xsek ret-42y", NULL };
	char *env_ok[] = { "A=1", "TOKEN=tkbox_K2_0123", NULL };
	_cleanup_free_ char *line = NULL, *line_ok = NULL, *line_env = NULL;
	(void)state;

	table(TWO, &s);
	assert_int_equal(door_command_line(argv_split, NULL, &line), 0);
	assert_int_equal(door_command_line(argv_ok, NULL, &line_ok), 0);
	expect_exec(&s, argv_value, NULL, "/", NULL, NULL,
		    "exec refused: the command line holds the value of secret K2");
	expect_exec(&s, argv_split, line, "/", NULL, NULL, "the command line holds");
	/* without the decided form the split value is not seen: the line is what catches it */
	expect_exec(&s, argv_split, NULL, "/", NULL, NULL, NULL);
	expect_exec(&s, argv_ok, line_ok, "/work/sek ret-42", NULL, NULL, "its working directory holds");
	assert_int_equal(door_command_line(argv_ok, env_value, &line_env), 0);
	expect_exec(&s, argv_ok, line_env, "/", env_value, NULL, "the command's env TOKEN holds");
	expect_exec(&s, argv_ok, line_ok, "/", env_ok, "data\nsek ret-42\n", "its stdin holds");
	/* no false refusal: the placeholder, near misses, other encodings */
	expect_exec(&s, argv_ok, line_ok, "/work", env_ok, "data\nsek ret-4\n", NULL);
	expect_exec(&s, argv_near, NULL, NULL, NULL, NULL, NULL);
	box_secrets_free(&s);
	/* no secrets: nothing refused */
	expect_exec(&s, argv_value, NULL, "/", env_value, "sek ret-42", NULL);
}

static void test_memfd(void **state)
{
	struct box_secrets s;
	struct supmsg m = { 0 };
	_cleanup_json_ json_t *j = NULL, *enc = NULL;
	char buf[128];
	char *dump;
	int fd, fd2;
	(void)state;

	table(TWO, &s);
	fd = box_secrets_memfd(&s);
	assert_true(fd >= 0);
	assert_int_equal(fcntl(fd, F_GET_SEALS), F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	assert_int_equal(read(fd, buf, sizeof(buf)), (ssize_t)(strlen(VAL) + 10));
	assert_memory_equal(buf, VAL "sek ret-42", strlen(VAL) + 10);
	assert_int_equal(pwrite(fd, "x", 1, 0), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(ftruncate(fd, 1), -1);
	assert_int_equal(fcntl(fd, F_ADD_SEALS, 0), -1); /* F_SEAL_SEAL */
	assert_ptr_equal(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);
	(void)close(fd);

	/* the `secrets` message: names, placeholders, headers, hosts and lengths; the values only in the memfd */
	assert_int_equal(box_secrets_supmsg(&s, &m, &fd2), 0);
	assert_int_equal(m.op, SUPMSG_SECRETS);
	assert_int_equal(m.n_secrets, 2);
	assert_string_equal(m.secrets[0].name, "GH");
	assert_int_equal(m.secrets[0].len, (int64_t)strlen(VAL));
	assert_int_equal(m.secrets[0].n_hosts, 2);
	assert_string_equal(m.secrets[0].hosts[1], "b.example");
	assert_null(m.secrets[0].hosts[2]);
	assert_string_equal(m.secrets[1].header, "X-Key");
	assert_string_equal(m.secrets[1].placeholder, s.v[1].placeholder);
	assert_int_equal(supmsg_fds(&m), 1);
	assert_int_equal(supmsg_encode(&m, &enc), 0);
	dump = json_dumps(enc, 0);
	assert_no_part(dump, VAL);
	assert_no_part(dump, "sek ret-42");
	free(dump);
	box_secrets_supmsg_release(&m);
	assert_null(m.secrets);
	(void)close(fd2);

	/* tkbox.box: name, placeholder, hosts, header; never a value */
	j = box_secrets_json(&s);
	assert_non_null(j);
	assert_int_equal(json_array_size(j), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(j, 1), "placeholder")),
			    s.v[1].placeholder);
	assert_string_equal(json_string_value(json_object_get(json_array_get(j, 0), "header")), "Authorization");
	dump = json_dumps(j, 0);
	assert_no_part(dump, VAL);
	assert_no_part(dump, "sek ret-42");
	free(dump);
	box_secrets_free(&s);
	assert_int_equal(box_secrets_memfd(&s), -ENOENT);
}

/* ---------------------------------------------------------------- the workspace check */

static bool have_tools(void)
{
	return access("/usr/bin/git", X_OK) == 0 &&
	       (access("/sbin/mkfs.ext4", X_OK) == 0 || access("/usr/sbin/mkfs.ext4", X_OK) == 0);
}

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	assert_int_equal(system(cmd), 0);
}

/* A checkout in a new temp dir: a plain file, and what setup adds. */
static void repo(char *dir, const char *setup)
{
	assert_non_null(mkdtemp(dir));
	sh("set -e; cd %s; mkdir src out; cd src; git init -q .; printf hello > a.txt; %s", dir, setup);
}

static int ws_build(const char *dir, const struct workspace_secret *sec, size_t n, struct image_diag *d,
		    const char **rule)
{
	char src[256], out[256];
	struct workspace_stats st;
	struct workspace_opts o = { .uid = 0, .gid = 0 };

	(void)snprintf(src, sizeof(src), "%s/src", dir);
	(void)snprintf(out, sizeof(out), "%s/out/ws.ext4", dir);
	(void)unlink(out);
	d->msg[0] = '\0';
	*rule = NULL;
	o.dir = src;
	o.out = out;
	o.diag = d;
	o.ret_rule = rule;
	o.secrets = sec;
	o.n_secrets = n;
	return workspace_build(&o, &st);
}

/* A file of n bytes of 'a' with the value at offset off (a read is 64 KiB: 65536 - 7 splits it). */
#define SPLIT_SETUP(off, v)                                                                                            \
	"head -c " #off " /dev/zero | tr '\\0' a > big.bin; printf '%s' '" v "' >> big.bin; "                          \
	"head -c 70000 /dev/zero | tr '\\0' b >> big.bin; "

static void test_workspace_scan(void **state)
{
	static const struct workspace_secret sec[] = {
		{ .name = "K2", .value = (const uint8_t *)"other-value", .len = 11 },
		{ .name = "GH", .value = (const uint8_t *)VAL, .len = sizeof(VAL) - 1 },
	};
	struct image_diag d;
	const char *rule;
	int r;
	char d1[] = "/tmp/tk-ws-content-XXXXXX", d2[] = "/tmp/tk-ws-path-XXXXXX", d3[] = "/tmp/tk-ws-link-XXXXXX",
	     d4[] = "/tmp/tk-ws-clean-XXXXXX", d5[] = "/tmp/tk-ws-small-XXXXXX";
	(void)state;

	if (!have_tools()) {
		skip();
	}
	/* content split across the 64 KiB read boundary */
	repo(d1, SPLIT_SETUP(65529, VAL));
	r = ws_build(d1, sec, 2, &d, &rule);
	assert_int_equal(r, -EACCES);
	assert_non_null(strstr(d.msg, "workspace file \"big.bin\" holds the value of secret GH"));
	assert_string_equal(rule, WORKSPACE_SECRET_RULE);
	assert_no_part(d.msg, VAL);
	/* the same checkout without secrets builds */
	assert_int_equal(ws_build(d1, NULL, 0, &d, &rule), 0);

	/* a path: refused before anything names it */
	repo(d2, "mkdir sub; printf x > 'sub/key-" VAL ".txt'; printf t > '.env" VAL "'");
	assert_int_equal(ws_build(d2, sec, 2, &d, &rule), -EACCES);
	assert_non_null(strstr(d.msg, "a workspace path holds the value of secret GH"));
	assert_no_part(d.msg, VAL);

	/* a symlink target */
	repo(d3, "ln -s 'docs/" VAL "' link");
	assert_int_equal(ws_build(d3, sec, 2, &d, &rule), -EACCES);
	assert_non_null(strstr(d.msg, "workspace file \"link\" holds the value of secret GH"));
	assert_no_part(d.msg, VAL);

	/* no false refusal: the value less its last byte across the boundary, the placeholder, other case */
	repo(d4, SPLIT_SETUP(65530, "ghp_T0kenValue_9f8e7") "printf 'GHP_T0KENVALUE_9F8E7D tkbox_GH_00' > c.txt; "
							    "ln -s a.txt l2");
	assert_int_equal(ws_build(d4, sec, 2, &d, &rule), 0);

	/* small files and the first secret too; one value right at the start of a file */
	repo(d5, "printf 'other-value' > tiny");
	assert_int_equal(ws_build(d5, sec, 2, &d, &rule), -EACCES);
	assert_non_null(strstr(d.msg, "workspace file \"tiny\" holds the value of secret K2"));
	sh("rm -rf %s %s %s %s %s", d1, d2, d3, d4, d5);
}

/* The daemon's way: the confined child `tkbox-host workspace build --json` reads the sealed memfd it inherits. */
static void test_workspace_child(void **state)
{
	const char *exe = getenv("TKBOX_HOST");
	struct workspace_answer a = { 0 };
	struct image_diag d = { .msg = "" };
	struct box_secrets s;
	char d1[] = "/tmp/tk-ws-child-XXXXXX", d2[] = "/tmp/tk-ws-child-ok-XXXXXX";
	char src[256], out[256], fdarg[16], l0[96], l1[96];
	char *extra[] = { "--secrets-fd", fdarg, "--secret", l0, "--secret", l1, NULL };
	int fd;
	(void)state;

	/*
	 * meson passes the tkbox-host it built, except in a sanitizer build: there the confined child's
	 * LeakSanitizer cannot run at exit (no ptrace under its seccomp filter), so it exits 1 after a good answer.
	 */
	if (!have_tools() || !exe) {
		skip();
	}
	table(TWO, &s);
	fd = box_secrets_memfd(&s);
	assert_true(fd > 2);
	(void)snprintf(fdarg, sizeof(fdarg), "%d", fd);
	(void)snprintf(l0, sizeof(l0), "GH:%zu", s.v[0].value_len);
	(void)snprintf(l1, sizeof(l1), "K2:%zu", s.v[1].value_len);

	repo(d1, "printf 'x = \"sek ret-42\"\\n' > conf.toml");
	(void)snprintf(src, sizeof(src), "%s/src", d1);
	(void)snprintf(out, sizeof(out), "%s/out/ws.ext4", d1);
	assert_int_equal(workspace_answer_exec_args(exe, src, out, extra, fd, &a, &d), 0);
	assert_non_null(a.error);
	assert_non_null(strstr(a.error, "workspace file \"conf.toml\" holds the value of secret K2"));
	assert_string_equal(a.rule, WORKSPACE_SECRET_RULE);
	assert_no_part(a.error, "sek ret-42");
	workspace_answer_release(&a);

	repo(d2, "printf 'x = \"$K2\"\\n' > conf.toml");
	(void)snprintf(src, sizeof(src), "%s/src", d2);
	(void)snprintf(out, sizeof(out), "%s/out/ws.ext4", d2);
	assert_int_equal(workspace_answer_exec_args(exe, src, out, extra, fd, &a, &d), 0);
	assert_null(a.error);
	workspace_answer_release(&a);

	/* lengths that do not add up to the memfd: refused, never built unchecked */
	(void)snprintf(l1, sizeof(l1), "K2:%zu", s.v[1].value_len + 1);
	(void)unlink(out);
	assert_int_equal(workspace_answer_exec_args(exe, src, out, extra, fd, &a, &d), 0);
	assert_non_null(a.error);
	assert_non_null(strstr(a.error, "secrets"));
	workspace_answer_release(&a);
	(void)close(fd);
	box_secrets_free(&s);
	sh("rm -rf %s %s", d1, d2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_flag_f6),		cmocka_unit_test(test_flag_env),
		cmocka_unit_test(test_flag_file_stdin), cmocka_unit_test(test_api),
		cmocka_unit_test(test_placeholders),	cmocka_unit_test(test_env_hosts),
		cmocka_unit_test(test_exec_check),	cmocka_unit_test(test_memfd),
		cmocka_unit_test(test_workspace_scan),	cmocka_unit_test(test_workspace_child),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
