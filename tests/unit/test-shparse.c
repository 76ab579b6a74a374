/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "buf.h"
#include "signer/shparse.h"

static struct sh_parse *parse_ok(const char *s)
{
	struct sh_parse *p = NULL;
	enum sh_error e = _SH_ERR_MAX;
	int r = sh_parse(s, strlen(s), &e, &p);
	if (r != 0) {
		fail_msg("sh_parse(%s) = %d (%s)", s, r, sh_error_str(e));
	}
	assert_int_equal(e, SH_OK);
	assert_non_null(p);
	return p;
}

static void parse_fails(const char *s, size_t n, int want_r, enum sh_error want)
{
	struct sh_parse *p = NULL;
	enum sh_error e = SH_OK;
	int r = sh_parse(s, n, &e, &p);
	if (r != want_r || e != want) {
		fail_msg("sh_parse(%.80s) = %d (%s), want %d (%s)", s, r, sh_error_str(e), want_r, sh_error_str(want));
	}
	assert_null(p);
}

static bool has_command(const struct sh_parse *p, const char *joined)
{
	for (size_t i = 0; i < p->n_commands; i++) {
		if (strcmp(p->commands[i].joined, joined) == 0) {
			return true;
		}
	}
	return false;
}

static bool has_line(const struct sh_parse *p, const char *line)
{
	for (size_t i = 0; i < p->n_lines; i++) {
		if (strcmp(p->lines[i], line) == 0) {
			return true;
		}
	}
	return false;
}

#define assert_command(p, s)                                                                                           \
	do {                                                                                                           \
		if (!has_command((p), (s))) {                                                                          \
			fail_msg("no command \"%s\"", (s));                                                            \
		}                                                                                                      \
	} while (0)
#define assert_line(p, s)                                                                                              \
	do {                                                                                                           \
		if (!has_line((p), (s))) {                                                                             \
			fail_msg("no line \"%s\" (first: \"%s\")", (s), (p)->n_lines ? (p)->lines[0] : "");            \
		}                                                                                                      \
	} while (0)

static void test_split_operators(void **state)
{
	struct sh_parse *p = parse_ok("a 1; b && c || d | e & f |& g\nh");
	(void)state;
	assert_int_equal(p->n_commands, 8);
	assert_int_equal(p->n_lines, 1);
	assert_string_equal(p->lines[0], "a 1 ; b && c || d | e & f |& g ; h");
	assert_string_equal(p->commands[0].argv[0], "a");
	assert_string_equal(p->commands[0].argv[1], "1");
	assert_null(p->commands[0].argv[2]);
	assert_int_equal(p->commands[0].argc, 2);
	sh_parse_free(p);
}

static void test_quotes_and_escapes(void **state)
{
	struct sh_parse *p = parse_ok("echo \"a b\" 'c d' e\\ f \"x\\\"y\" 'it'\\''s' \"\" $'t\\'u'");
	(void)state;
	assert_int_equal(p->n_commands, 1);
	assert_int_equal(p->commands[0].argc, 8);
	assert_string_equal(p->commands[0].argv[1], "a b");
	assert_string_equal(p->commands[0].argv[2], "c d");
	assert_string_equal(p->commands[0].argv[3], "e f");
	assert_string_equal(p->commands[0].argv[4], "x\"y");
	assert_string_equal(p->commands[0].argv[5], "it's");
	assert_string_equal(p->commands[0].argv[6], "");
	assert_string_equal(p->commands[0].argv[7], "t\\'u");
	/* Words that hold quoted blanks or operators are re-quoted. */
	assert_string_equal(p->commands[0].joined, "echo 'a b' 'c d' 'e f' 'x\"y' 'it'\\''s'  't\\'\\''u'");
	sh_parse_free(p);
}

static void test_quoted_pipe_is_text(void **state)
{
	struct sh_parse *p = parse_ok("echo \"curl x | sh\"");
	(void)state;
	assert_int_equal(p->n_commands, 1);
	/* Operators that came from quoting are masked in lines, kept in argv. */
	assert_string_equal(p->lines[0], "echo 'curl x _ sh'");
	assert_string_equal(p->commands[0].joined, "echo 'curl x | sh'");
	assert_string_equal(p->commands[0].argv[1], "curl x | sh");
	sh_parse_free(p);

	p = parse_ok("printf '%s\\n' 'a && b; c (d) <e> `f`' a\\|b \"$(echo x | cat) y\"");
	assert_string_equal(p->lines[1], "printf '%s\\n' 'a __ b_ c _d_ _e_ _f_' 'a_b' '$(echo x | cat) y'");
	sh_parse_free(p);
}

static void test_substitutions_recurse(void **state)
{
	struct sh_parse *p = parse_ok("echo $(curl x | sh) `id -u` <(ls /) >(cat) ${HOME:-$(whoami)} $((1+2))");
	(void)state;
	assert_command(p, "curl x");
	assert_command(p, "sh");
	assert_command(p, "id -u");
	assert_command(p, "ls /");
	assert_command(p, "cat");
	assert_command(p, "whoami");
	assert_line(p, "curl x | sh");
	assert_line(p, "echo $(curl x | sh) `id -u` <(ls /) >(cat) ${HOME:-$(whoami)} $((1+2))");
	sh_parse_free(p);

	p = parse_ok("echo \"$(echo \"$(pkill x)\")\"");
	assert_command(p, "pkill x");
	sh_parse_free(p);
}

static void test_wrappers_stripped(void **state)
{
	struct sh_parse *p;
	(void)state;
	p = parse_ok("A=1 B=\"x y\" env -i C=2 sudo -u root -E nohup nice -n 5 timeout -s KILL 10 stdbuf -oL "
		     "/usr/bin/pkill -f tkbox-signer");
	assert_int_equal(p->n_commands, 1);
	assert_string_equal(p->commands[0].joined, "pkill -f tkbox-signer");
	assert_string_equal(p->lines[0], "/usr/bin/pkill -f tkbox-signer");
	sh_parse_free(p);

	p = parse_ok("exec -a x command -p time -p xargs -0 -n 1 rm -f");
	assert_string_equal(p->commands[0].joined, "rm -f");
	sh_parse_free(p);

	/* A wrapper that runs nothing is the command; a lone assignment is the command. */
	p = parse_ok("sudo -s; X=1");
	assert_string_equal(p->commands[0].joined, "sudo -s");
	assert_string_equal(p->commands[1].joined, "X=1");
	sh_parse_free(p);

	/* A quoted NAME= is not an assignment. */
	p = parse_ok("'X=1' cmd");
	assert_string_equal(p->commands[0].argv[0], "X=1");
	sh_parse_free(p);

	/* Reserved words are not commands. */
	p = parse_ok("if true; then ! rm -rf x; fi; { pkill y; }; f() { kill z; }");
	assert_command(p, "rm -rf x");
	assert_command(p, "pkill y");
	assert_command(p, "kill z");
	sh_parse_free(p);
}

static void test_shell_strings_recurse(void **state)
{
	struct sh_parse *p;
	(void)state;
	p = parse_ok("bash -lc 'pkill -9 x'; sh -e -c \"curl y | sh\" arg0; eval 'rm -rf' '~'; su -c 'id' root");
	assert_command(p, "pkill -9 x");
	assert_line(p, "curl y | sh");
	assert_command(p, "rm -rf ~");
	assert_command(p, "id");
	sh_parse_free(p);

	/* A script file operand is not parsed as a command string. */
	p = parse_ok("bash script.sh 'pkill x'");
	assert_false(has_command(p, "pkill x"));
	sh_parse_free(p);

	p = parse_ok("env -S 'pkill z' true");
	assert_command(p, "pkill z");
	sh_parse_free(p);

	/* Runners: find -exec keeps its words, ssh and watch join theirs as a shell would. */
	p = parse_ok("find / -name x -exec rm -rf \"a b\" {} \\; -execdir sh -c 'pkill y' + ; "
		     "ssh -p 22 -i key host 'curl x | sh' ; watch -n 1 'kill -9 -1'");
	assert_command(p, "rm -rf 'a b' {}");
	assert_command(p, "pkill y");
	assert_line(p, "curl x | sh");
	assert_command(p, "kill -9 -1");
	sh_parse_free(p);
	p = parse_ok("ssh host; find . -exec");
	assert_int_equal(p->n_commands, 2);
	sh_parse_free(p);
}

static void test_redirections(void **state)
{
	struct sh_parse *p = parse_ok("curl x>/tmp/a.sh 2>&1 && bash </tmp/a.sh &>log; cat <<<\"$(id)\"");
	(void)state;
	assert_line(p, "curl x > /tmp/a.sh 2>& 1 && bash < /tmp/a.sh &> log ; cat <<< $(id)");
	assert_command(p, "curl x");
	assert_command(p, "id");
	sh_parse_free(p);

	p = parse_ok("bash <<< 'pkill q'");
	assert_command(p, "pkill q");
	sh_parse_free(p);
}

static void test_heredocs(void **state)
{
	struct sh_parse *p;
	(void)state;
	/* A heredoc fed to a shell is a script; an unquoted delimiter lets $( ) run. */
	p = parse_ok("bash <<EOF\npkill a\nEOF\ncat <<X\n$(pkill b)\nX\ncat <<'Q'\n$(pkill c)\nQ\necho after");
	assert_command(p, "pkill a");
	assert_command(p, "pkill b");
	assert_false(has_command(p, "pkill c"));
	assert_command(p, "echo after");
	sh_parse_free(p);

	p = parse_ok("cat <<-END\n\tbody\n\tEND\n");
	sh_parse_free(p);

	parse_fails("cat <<EOF\nbody\n", 15, -EBADMSG, SH_ERR_HEREDOC);
	parse_fails("cat <<EOF", 9, -EBADMSG, SH_ERR_HEREDOC);
}

static void test_subshell_inline(void **state)
{
	struct sh_parse *p = parse_ok("(cd /tmp && curl x) | sh");
	(void)state;
	assert_line(p, "( cd /tmp && curl x ) | sh");
	sh_parse_free(p);
}

static void test_errors(void **state)
{
	(void)state;
	parse_fails("echo 'x", 7, -EBADMSG, SH_ERR_SQUOTE);
	parse_fails("echo $'x", 8, -EBADMSG, SH_ERR_SQUOTE);
	parse_fails("echo \"x", 7, -EBADMSG, SH_ERR_DQUOTE);
	parse_fails("echo $(ls", 9, -EBADMSG, SH_ERR_SUBST);
	parse_fails("echo <(ls", 9, -EBADMSG, SH_ERR_SUBST);
	parse_fails("(ls", 3, -EBADMSG, SH_ERR_SUBST);
	parse_fails("echo $((1", 9, -EBADMSG, SH_ERR_SUBST);
	parse_fails("echo `ls", 8, -EBADMSG, SH_ERR_BACKTICK);
	parse_fails("echo ${x", 8, -EBADMSG, SH_ERR_PARAM);
	parse_fails("ls )", 4, -EBADMSG, SH_ERR_SYNTAX);
	parse_fails("echo >", 6, -EBADMSG, SH_ERR_SYNTAX);
	parse_fails("echo > ;", 8, -EBADMSG, SH_ERR_SYNTAX);
	parse_fails("echo a\0b", 8, -EBADMSG, SH_ERR_NUL);
	parse_fails("bash -c 'echo \"x'", 17, -EBADMSG, SH_ERR_DQUOTE);
	for (int e = 0; e <= _SH_ERR_MAX; e++) {
		assert_non_null(sh_error_str((enum sh_error)e));
	}
}

static char *repeat(const char *unit, size_t times, const char *tail)
{
	size_t ul = strlen(unit), tl = strlen(tail);
	char *s = malloc(ul * times + tl + 1);
	assert_non_null(s);
	for (size_t i = 0; i < times; i++) {
		memcpy(s + i * ul, unit, ul);
	}
	memcpy(s + ul * times, tail, tl + 1);
	return s;
}

static void test_cap_input(void **state)
{
	char *s = repeat("a", SH_MAX_INPUT, "");
	struct sh_parse *p = NULL;
	(void)state;
	assert_int_equal(sh_parse(s, SH_MAX_INPUT, NULL, &p), 0);
	sh_parse_free(p);
	free(s);
	s = repeat("a", SH_MAX_INPUT + 1, "");
	parse_fails(s, SH_MAX_INPUT + 1, -E2BIG, SH_ERR_TOO_LONG);
	free(s);
}

static char *nested(unsigned depth)
{
	/* $( $( ... pkill x ... ) ) */
	char *open = repeat("$(", depth, "pkill x");
	char *close = repeat(")", depth, "");
	char *s = NULL;
	assert_true(asprintf(&s, "echo %s%s", open, close) > 0);
	free(open);
	free(close);
	return s;
}

static void test_cap_depth(void **state)
{
	char *s = nested(SH_MAX_DEPTH);
	struct sh_parse *p = parse_ok(s);
	(void)state;
	assert_command(p, "pkill x");
	sh_parse_free(p);
	free(s);
	s = nested(SH_MAX_DEPTH + 1);
	parse_fails(s, strlen(s), -E2BIG, SH_ERR_TOO_DEEP);
	free(s);
}

static void test_cap_words(void **state)
{
	char *s = repeat("a ", SH_MAX_WORDS, "");
	struct sh_parse *p = parse_ok(s);
	(void)state;
	assert_int_equal(p->commands[0].argc, SH_MAX_WORDS);
	sh_parse_free(p);
	free(s);
	s = repeat("a ", SH_MAX_WORDS + 1, "");
	parse_fails(s, strlen(s), -E2BIG, SH_ERR_TOO_MANY_WORDS);
	free(s);
}

static void test_cap_commands(void **state)
{
	char *s = repeat("a;", SH_MAX_COMMANDS, "");
	struct sh_parse *p = parse_ok(s);
	(void)state;
	assert_int_equal(p->n_commands, SH_MAX_COMMANDS);
	sh_parse_free(p);
	free(s);
	s = repeat("a;", SH_MAX_COMMANDS + 1, "");
	parse_fails(s, strlen(s), -E2BIG, SH_ERR_TOO_MANY_COMMANDS);
	free(s);
}

static void test_cap_heredocs(void **state)
{
	char *head = repeat(" <<E", SH_MAX_HEREDOCS, "\n");
	char *bodies = repeat("E\n", SH_MAX_HEREDOCS, "");
	char *s = NULL;
	struct sh_parse *p;
	(void)state;
	assert_true(asprintf(&s, "cat%s%s", head, bodies) > 0);
	p = parse_ok(s);
	sh_parse_free(p);
	free(s);
	free(head);
	free(bodies);
	head = repeat(" <<E", SH_MAX_HEREDOCS + 1, "\n");
	bodies = repeat("E\n", SH_MAX_HEREDOCS + 1, "");
	assert_true(asprintf(&s, "cat%s%s", head, bodies) > 0);
	parse_fails(s, strlen(s), -E2BIG, SH_ERR_TOO_MANY_HEREDOCS);
	free(s);
	free(head);
	free(bodies);
}

static void test_cap_output(void **state)
{
	/*
	 * Each nesting level prints the text of the levels inside it again, so
	 * a long word deep inside produces more than SH_MAX_OUTPUT; a short one
	 * does not.
	 */
	char *word = repeat("x", 200, "");
	char *open = repeat("$(echo ", SH_MAX_DEPTH, word);
	char *close = repeat(")", SH_MAX_DEPTH, "");
	char *s = NULL;
	struct sh_parse *p;
	(void)state;
	assert_true(asprintf(&s, "echo %s%s", open, close) > 0);
	p = parse_ok(s);
	sh_parse_free(p);
	free(s);
	free(word);
	free(open);
	word = repeat("x", SH_MAX_INPUT - 200, "");
	open = repeat("$(echo ", SH_MAX_DEPTH, word);
	assert_true(asprintf(&s, "echo %s%s", open, close) > 0);
	assert_true(strlen(s) <= SH_MAX_INPUT);
	parse_fails(s, strlen(s), -E2BIG, SH_ERR_TOO_LONG);
	free(s);
	free(word);
	free(open);
	free(close);
}

static void test_bad_args(void **state)
{
	struct sh_parse *p = NULL;
	(void)state;
	assert_int_equal(sh_parse(NULL, 0, NULL, &p), -EINVAL);
	assert_int_equal(sh_parse("a", 1, NULL, NULL), -EINVAL);
	/* Empty and blank lines parse to nothing. */
	p = parse_ok("   # only a comment");
	assert_int_equal(p->n_commands, 0);
	assert_int_equal(p->n_lines, 0);
	sh_parse_free(p);
	sh_parse_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_split_operators),
		cmocka_unit_test(test_quotes_and_escapes),
		cmocka_unit_test(test_quoted_pipe_is_text),
		cmocka_unit_test(test_substitutions_recurse),
		cmocka_unit_test(test_wrappers_stripped),
		cmocka_unit_test(test_shell_strings_recurse),
		cmocka_unit_test(test_redirections),
		cmocka_unit_test(test_heredocs),
		cmocka_unit_test(test_subshell_inline),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_cap_input),
		cmocka_unit_test(test_cap_depth),
		cmocka_unit_test(test_cap_words),
		cmocka_unit_test(test_cap_commands),
		cmocka_unit_test(test_cap_heredocs),
		cmocka_unit_test(test_cap_output),
		cmocka_unit_test(test_bad_args),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
