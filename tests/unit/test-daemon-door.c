/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "cli/cliutil.h"
#include "daemon/door.h"
#include "daemon/events.h"
#include "json.h"

static void expect_line(char *const *argv, char *const *env, const char *want)
{
	char *line = NULL;

	assert_int_equal(door_command_line(argv, env, &line), 0);
	assert_string_equal(line, want);
	free(line);
}

static void test_quote_words(void **state)
{
	(void)state;
	expect_line((char *[]){ "echo", "hello", NULL }, NULL, "echo hello");
	expect_line((char *[]){ "sh", "-c", "echo $HOME; ls", NULL }, NULL, "sh -c 'echo $HOME; ls'");
	expect_line((char *[]){ "printf", "it's", "", NULL }, NULL, "printf 'it'\\''s' ''");
	expect_line((char *[]){ "ls", "/a b/*", "~", "a\nb", NULL }, NULL, "ls '/a b/*' '~' 'a\nb'");
	/* Safe bytes stay bare, including '=' after the program word. */
	expect_line((char *[]){ "make", "CC=clang", "-j2", "x@y:z,w+v%", NULL }, NULL, "make CC=clang -j2 x@y:z,w+v%");
}

static void test_program_word(void **state)
{
	char *line = NULL;
	(void)state;

	/* A first word holding '=' would be an assignment to the shell: quoted, it names the program. */
	expect_line((char *[]){ "A=b", "x", NULL }, NULL, "'A=b' x");
	/* Reserved words are quoted: `if` as a program, not a compound command. */
	expect_line((char *[]){ "if", NULL }, NULL, "'if'");
	expect_line((char *[]){ "time", "ls", NULL }, NULL, "'time' ls");
	expect_line((char *[]){ "!", "true", NULL }, NULL, "'!' true");
	/* A job spec to bash and zsh: refused (F5). */
	assert_int_equal(door_command_line((char *[]){ "%1", NULL }, NULL, &line), -EPERM);
	/* With env, env(1) would read the program word as an assignment or an option: refused. */
	assert_int_equal(door_command_line((char *[]){ "A=b", NULL }, (char *[]){ "X=1", NULL }, &line), -EPERM);
	assert_int_equal(door_command_line((char *[]){ "-i", NULL }, (char *[]){ "X=1", NULL }, &line), -EPERM);
	assert_int_equal(door_command_line((char *[]){ NULL }, NULL, &line), -EINVAL);
	assert_null(line);
}

static void test_env_prefix(void **state)
{
	(void)state;
	expect_line((char *[]){ "python3", "-c", "print(1)", NULL },
		    (char *[]){ "PYTHONUNBUFFERED=1", "MSG=a b", NULL },
		    "env PYTHONUNBUFFERED=1 'MSG=a b' python3 -c 'print(1)'");
}

static void test_env_refused(void **state)
{
	static const char *const refused[] = {
		"LD_PRELOAD=x",
		"LD_LIBRARY_PATH=x",
		"GIT_SSH_COMMAND=x",
		"GIT_CONFIG_GLOBAL=x",
		"XDG_CONFIG_HOME=x",
		"PYTHONPATH=x",
		"PYTHONSTARTUP=x",
		"PYTHONWARNINGS=x",
		"PERL5OPT=x",
		"PERL5LIB=x",
		"RUBYOPT=x",
		"NODE_OPTIONS=x",
		"JAVA_TOOL_OPTIONS=x",
		"JDK_JAVA_OPTIONS=x",
		"_JAVA_OPTIONS=x",
		"LUA_INIT=x",
		"BASH_ENV=x",
		"BASH_FUNC_x=1",
		"npm_config_script_shell=x",
		"NPM_CONFIG_PREFIX=x",
		"PATH=/x",
		"HOME=/x",
		"SHELLOPTS=xtrace",
		"PS4=$(id)",
		"CLASSPATH=x",
		"ENV=x",
		"RUSTC_WRAPPER=x",
		"CC=x",
		"MAKEFLAGS=x",
		"GLIBC_TUNABLES=x",
		"IFS=x",
		"PROMPT_COMMAND=x",
		"TKBOX_X=1",
		NULL,
	};
	static const char *const allowed[] = {
		"PYTHONUNBUFFERED=1",
		"PYTHONDONTWRITEBYTECODE=1",
		"GIT_AUTHOR_NAME=a",
		"GIT_COMMITTER_EMAIL=a@b",
		"DEBIAN_FRONTEND=noninteractive",
		"FOO=bar=baz",
		"X=",
		"lower_case=1",
		"NODE_ENV=production",
		NULL,
	};
	const char *why = NULL;
	(void)state;

	for (size_t i = 0; refused[i]; i++) {
		if (door_env_check(refused[i], &why) != -EPERM) {
			fail_msg("%s should be refused", refused[i]);
		}
		assert_non_null(why);
	}
	for (size_t i = 0; allowed[i]; i++) {
		if (door_env_check(allowed[i], &why) != 0) {
			fail_msg("%s should be allowed", allowed[i]);
		}
	}
	assert_int_equal(door_env_check("NOEQUALS", &why), -EINVAL);
	assert_int_equal(door_env_check("=x", &why), -EINVAL);
	assert_int_equal(door_env_check("1A=x", &why), -EINVAL);
	assert_int_equal(door_env_check("A-B=x", &why), -EINVAL);
	/* bash's exported functions: not a valid name, refused as malformed. */
	assert_int_equal(door_env_check("BASH_FUNC_ls%%=() { id; }", &why), -EINVAL);
	/* A refused env entry makes the whole command line refused. */
	{
		char *line = NULL;
		assert_int_equal(
			door_command_line((char *[]){ "true", NULL }, (char *[]){ "LD_PRELOAD=x", NULL }, &line),
			-EPERM);
	}
}

static void test_env_caps(void **state)
{
	char name[DOOR_MAX_ENV_NAME + 3];
	const char *why;
	char *env[DOOR_MAX_ENV + 2];
	char *line = NULL;
	(void)state;

	memset(name, 'A', sizeof(name));
	name[DOOR_MAX_ENV_NAME] = '=';
	name[DOOR_MAX_ENV_NAME + 1] = '\0';
	assert_int_equal(door_env_check(name, &why), 0);
	name[DOOR_MAX_ENV_NAME] = 'A';
	name[DOOR_MAX_ENV_NAME + 1] = '=';
	name[DOOR_MAX_ENV_NAME + 2] = '\0';
	assert_int_equal(door_env_check(name, &why), -E2BIG);

	for (size_t i = 0; i < DOOR_MAX_ENV + 1; i++) {
		env[i] = "X=1";
	}
	env[DOOR_MAX_ENV] = NULL;
	assert_int_equal(door_command_line((char *[]){ "true", NULL }, env, &line), 0);
	free(line);
	env[DOOR_MAX_ENV] = "X=1";
	env[DOOR_MAX_ENV + 1] = NULL;
	assert_int_equal(door_command_line((char *[]){ "true", NULL }, env, &line), -E2BIG);
}

static void test_line_caps(void **state)
{
	char **argv = calloc(DOOR_MAX_ARGS + 2, sizeof(char *));
	char *big = malloc(DOOR_MAX_WORD + 2);
	char *line = NULL;
	(void)state;

	for (size_t i = 0; i < DOOR_MAX_ARGS + 1; i++) {
		argv[i] = "x";
	}
	assert_int_equal(door_command_line(argv, NULL, &line), -E2BIG);
	argv[DOOR_MAX_ARGS] = NULL;
	assert_int_equal(door_command_line(argv, NULL, &line), 0);
	free(line);

	/* One word at the cap is fine, one past is refused. */
	memset(big, 'a', DOOR_MAX_WORD + 1);
	big[DOOR_MAX_WORD] = '\0';
	assert_int_equal(door_command_line((char *[]){ "echo", big, NULL }, NULL, &line), 0);
	free(line);
	line = NULL;
	big[DOOR_MAX_WORD] = 'a';
	big[DOOR_MAX_WORD + 1] = '\0';
	assert_int_equal(door_command_line((char *[]){ "echo", big, NULL }, NULL, &line), -E2BIG);

	/* The whole line: two words at the word cap pass DOOR_MAX_LINE (2 x 128 KiB + "echo  "). */
	big[DOOR_MAX_WORD] = '\0';
	assert_int_equal(door_command_line((char *[]){ "echo", big, big, NULL }, NULL, &line), -E2BIG);
	assert_null(line);
	{
		/* Exactly DOOR_MAX_LINE bytes, then one more. */
		size_t n2 = DOOR_MAX_LINE - (4 + 1 + DOOR_MAX_WORD + 1);
		char *w2 = malloc(n2 + 2);
		memset(w2, 'b', n2 + 1);
		w2[n2] = '\0';
		assert_int_equal(door_command_line((char *[]){ "echo", big, w2, NULL }, NULL, &line), 0);
		assert_int_equal(strlen(line), DOOR_MAX_LINE);
		free(line);
		w2[n2] = 'b';
		w2[n2 + 1] = '\0';
		assert_int_equal(door_command_line((char *[]){ "echo", big, w2, NULL }, NULL, &line), -E2BIG);
		free(w2);
	}
	free(big);
	free(argv);
}

static void test_stdin_args(void **state)
{
	json_t *a = json_object();
	char *big = calloc(1, DOOR_MAX_STDIN + 1);
	(void)state;

	assert_int_equal(door_stdin_args("hello\n", 6, a), 0);
	assert_string_equal(json_string_value(json_object_get(a, "stdin_sha256")),
			    "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03");
	assert_int_equal(json_integer_value(json_object_get(a, "stdin_bytes")), 6);
	assert_string_equal(json_string_value(json_object_get(a, "stdin_text")), "hello\n");
	json_decref(a);

	/* Not UTF-8, or a NUL: no text, still the digest. */
	a = json_object();
	assert_int_equal(door_stdin_args("\xff\xfe", 2, a), 0);
	assert_null(json_object_get(a, "stdin_text"));
	assert_non_null(json_object_get(a, "stdin_sha256"));
	json_decref(a);
	a = json_object();
	assert_int_equal(door_stdin_args("a\0b", 3, a), 0);
	assert_null(json_object_get(a, "stdin_text"));
	json_decref(a);

	/* Text up to 4 KiB; 4 KiB + 1 has only the digest. */
	memset(big, 'x', DOOR_MAX_STDIN + 1);
	a = json_object();
	assert_int_equal(door_stdin_args(big, DOOR_MAX_STDIN_TEXT, a), 0);
	assert_non_null(json_object_get(a, "stdin_text"));
	json_decref(a);
	a = json_object();
	assert_int_equal(door_stdin_args(big, DOOR_MAX_STDIN_TEXT + 1, a), 0);
	assert_null(json_object_get(a, "stdin_text"));
	json_decref(a);

	/* 1 MiB up front; one byte more is streamed, never decided up front. */
	a = json_object();
	assert_int_equal(door_stdin_args(big, DOOR_MAX_STDIN, a), 0);
	assert_int_equal(door_stdin_args(big, DOOR_MAX_STDIN + 1, a), -E2BIG);
	json_decref(a);
	free(big);
}

static void test_box_names(void **state)
{
	char name[66];
	(void)state;

	assert_true(door_box_name_ok("demo"));
	assert_true(door_box_name_ok("a.b_c-1"));
	assert_false(door_box_name_ok(""));
	assert_false(door_box_name_ok("-x"));
	assert_false(door_box_name_ok(".x"));
	assert_false(door_box_name_ok("a/b"));
	assert_false(door_box_name_ok("a b"));
	assert_false(door_box_name_ok(".."));
	memset(name, 'a', 63);
	name[63] = '\0';
	assert_true(door_box_name_ok(name));
	name[63] = 'a';
	name[64] = '\0';
	assert_false(door_box_name_ok(name));
}

static void test_cli_values(void **state)
{
	uint64_t v = 0;
	char *p = NULL;
	(void)state;

	assert_int_equal(cli_parse_duration("90", 1, 100000, &v), 0);
	assert_int_equal(v, 90);
	assert_int_equal(cli_parse_duration("15m", 1, 100000, &v), 0);
	assert_int_equal(v, 900);
	assert_int_equal(cli_parse_duration("2h", 1, 100000, &v), 0);
	assert_int_equal(v, 7200);
	assert_int_equal(cli_parse_duration("2x", 1, 100000, &v), -EINVAL);
	assert_int_equal(cli_parse_duration("-1", 1, 100000, &v), -EINVAL);
	assert_int_equal(cli_parse_duration("0", 1, 100000, &v), -ERANGE);
	assert_int_equal(cli_parse_duration("7d", 1, 7 * 86400, &v), 0);
	assert_int_equal(cli_parse_duration("604801", 1, 7 * 86400, &v), -ERANGE);
	assert_int_equal(cli_parse_duration("9999999999999999999", 1, UINT64_MAX, &v), -ERANGE);
	assert_int_equal(cli_parse_mib("2G", 1, 1 << 20, &v), 0);
	assert_int_equal(v, 2048);
	assert_int_equal(cli_parse_mib("512M", 1, 1 << 20, &v), 0);
	assert_int_equal(v, 512);
	assert_int_equal(cli_parse_mib("512", 1, 1 << 20, &v), 0);
	assert_int_equal(cli_parse_mib("1K", 1, 1 << 20, &v), -EINVAL);
	assert_int_equal(cli_parse_mib("1T", 1, 1 << 20, &v), 0);
	assert_int_equal(v, 1 << 20);
	assert_int_equal(cli_parse_mib("2T", 1, 1 << 20, &v), -ERANGE);
	assert_int_equal(cli_parse_uint("8", 1, 8, &v), 0);
	assert_int_equal(cli_parse_uint("9", 1, 8, &v), -ERANGE);
	assert_int_equal(cli_parse_uint("8 ", 1, 8, &v), -EINVAL);
	assert_int_equal(cli_trust_path("out/demo.tkb", &p), 0);
	assert_string_equal(p, "out/demo.trust.json");
	free(p);
	assert_int_equal(cli_trust_path("bundle", &p), 0);
	assert_string_equal(p, "bundle.trust.json");
	free(p);
}

static void test_events_caps(void **state)
{
	struct events_cap c = { 0 };
	(void)state;

	/* Problem lines: up to exactly the soft cap, then dropped; lifecycle lines still pass. */
	c.bytes = EVENTS_SOFT_CAP - 100;
	assert_int_equal(events_admit(&c, EVENTS_PROBLEM, 100), EVENTS_WRITE);
	assert_int_equal(c.bytes, EVENTS_SOFT_CAP);
	assert_int_equal(events_admit(&c, EVENTS_PROBLEM, 1), EVENTS_DROP);
	assert_true(c.soft_full);
	assert_int_equal(events_admit(&c, EVENTS_PROBLEM, 1), EVENTS_DROP);
	assert_int_equal(c.bytes, EVENTS_SOFT_CAP);
	assert_int_equal(events_admit(&c, EVENTS_LIFECYCLE, 50), EVENTS_WRITE);
	assert_int_equal(c.bytes, EVENTS_SOFT_CAP + 50);

	/* Every line: up to exactly the hard cap; one byte past stops the box, then everything is dropped. */
	c.bytes = EVENTS_HARD_CAP - 10;
	assert_int_equal(events_admit(&c, EVENTS_LIFECYCLE, 10), EVENTS_WRITE);
	assert_int_equal(c.bytes, EVENTS_HARD_CAP);
	assert_int_equal(events_admit(&c, EVENTS_LIFECYCLE, 1), EVENTS_STOP_BOX);
	assert_true(c.hard_full);
	assert_int_equal(events_admit(&c, EVENTS_LIFECYCLE, 1), EVENTS_DROP);
	assert_int_equal(c.bytes, EVENTS_HARD_CAP);

	/* A fresh file below the soft cap takes both classes. */
	c = (struct events_cap){ 0 };
	assert_int_equal(events_admit(&c, EVENTS_PROBLEM, 10), EVENTS_WRITE);
	assert_int_equal(events_admit(&c, EVENTS_LIFECYCLE, 10), EVENTS_WRITE);
	assert_int_equal(c.bytes, 20);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quote_words), cmocka_unit_test(test_program_word),
		cmocka_unit_test(test_env_prefix),  cmocka_unit_test(test_env_refused),
		cmocka_unit_test(test_env_caps),    cmocka_unit_test(test_line_caps),
		cmocka_unit_test(test_stdin_args),  cmocka_unit_test(test_box_names),
		cmocka_unit_test(test_cli_values),  cmocka_unit_test(test_events_caps),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
