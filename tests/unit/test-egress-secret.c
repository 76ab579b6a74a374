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
#include "egress/secret.h"

static void test_names(void **state)
{
	char longest[EGRESS_SECRET_NAME_MAX + 2];
	(void)state;

	assert_true(egress_secret_name_ok("GH"));
	assert_true(egress_secret_name_ok("_X"));
	assert_true(egress_secret_name_ok("ANTHROPIC_API_KEY"));
	assert_true(egress_secret_name_ok("A1_2"));
	assert_false(egress_secret_name_ok(""));
	assert_false(egress_secret_name_ok(NULL));
	assert_false(egress_secret_name_ok("1GH"));
	assert_false(egress_secret_name_ok("gh"));
	assert_false(egress_secret_name_ok("G-H"));
	assert_false(egress_secret_name_ok("G H"));
	assert_false(egress_secret_name_ok("GH="));
	memset(longest, 'A', EGRESS_SECRET_NAME_MAX);
	longest[EGRESS_SECRET_NAME_MAX] = '\0';
	assert_true(egress_secret_name_ok(longest));
	/* one past EGRESS_SECRET_NAME_MAX */
	longest[EGRESS_SECRET_NAME_MAX] = 'A';
	longest[EGRESS_SECRET_NAME_MAX + 1] = '\0';
	assert_false(egress_secret_name_ok(longest));
}

static int vc(const char *v, const char **why)
{
	return egress_secret_value_check((const uint8_t *)v, strlen(v), why);
}

static void test_values(void **state)
{
	uint8_t big[EGRESS_SECRET_VALUE_MAX + 1];
	const char *why = NULL;
	(void)state;

	assert_int_equal(vc("ghp_0123456789abcdef", &why), 0);
	assert_int_equal(vc("abcdef", &why), 0); /* exactly EGRESS_SECRET_VALUE_MIN */
	assert_int_equal(vc("a b c d", &why), 0); /* inner spaces go into a header field */
	assert_int_equal(vc("p\xc3\xa4sswort", &why), 0); /* UTF-8 */
	/* one under the minimum: the message names the rule, never the value */
	assert_int_equal(vc("abcde", &why), -EINVAL);
	assert_non_null(strstr(why, "6 bytes"));
	assert_null(strstr(why, "abcde"));
	assert_int_equal(vc("", &why), -EINVAL);
	assert_int_equal(vc(" abcdefg", &why), -EINVAL);
	assert_int_equal(vc("abcdefg ", &why), -EINVAL);
	assert_int_equal(vc("abc\ndefg", &why), -EINVAL);
	assert_int_equal(vc("abcdefg\n", &why), -EINVAL);
	assert_int_equal(vc("abc\tdefg", &why), -EINVAL);
	assert_int_equal(vc("abc\x7f"
			    "defg",
			    &why),
			 -EINVAL);
	assert_int_equal(egress_secret_value_check((const uint8_t *)"abc\0defg", 8, &why), -EINVAL);
	assert_int_equal(vc("abc\xff"
			    "defg",
			    &why),
			 -EINVAL); /* not UTF-8 */
	assert_int_equal(vc("abc\xc0\xaf"
			    "defg",
			    &why),
			 -EINVAL); /* overlong */
	assert_int_equal(vc("abc\xed\xa0\x80"
			    "defg",
			    &why),
			 -EINVAL); /* a surrogate */
	assert_int_equal(vc("abcdefg\xc3", &why), -EINVAL); /* cut short */
	memset(big, 'x', sizeof(big));
	assert_int_equal(egress_secret_value_check(big, EGRESS_SECRET_VALUE_MAX, &why), 0);
	assert_int_equal(egress_secret_value_check(big, EGRESS_SECRET_VALUE_MAX + 1, &why), -E2BIG);
	assert_non_null(strstr(why, "4096"));
}

static void test_headers(void **state)
{
	char h[EGRESS_SECRET_HEADER_MAX + 2];
	const char *why;
	(void)state;

	assert_int_equal(egress_secret_header_check("Authorization", &why), 0);
	assert_int_equal(egress_secret_header_check("x-api-key", &why), 0);
	assert_int_equal(egress_secret_header_check("X-Goog-Api-Key", &why), 0);
	static const char *const bad[] = { "",
					   "Host",
					   "host",
					   "Content-Length",
					   "transfer-encoding",
					   "Connection",
					   "Upgrade",
					   "TE",
					   "Trailer",
					   "Keep-Alive",
					   "Expect",
					   "Content-Encoding",
					   "Proxy-Authorization",
					   "proxy-foo",
					   "X Key",
					   "X:Key",
					   "X\r\nInjected",
					   "443",
					   NULL };
	for (size_t i = 0; bad[i]; i++) {
		why = NULL;
		assert_int_equal(egress_secret_header_check(bad[i], &why), -EINVAL);
		assert_non_null(why);
	}
	memset(h, 'X', EGRESS_SECRET_HEADER_MAX);
	h[EGRESS_SECRET_HEADER_MAX] = '\0';
	assert_int_equal(egress_secret_header_check(h, &why), 0);
	h[EGRESS_SECRET_HEADER_MAX] = 'X';
	h[EGRESS_SECRET_HEADER_MAX + 1] = '\0';
	assert_int_equal(egress_secret_header_check(h, &why), -EINVAL);
}

static int bp(const char *text, struct egress_secret *s, char *err)
{
	memset(s, 0, sizeof(*s));
	err[0] = '\0';
	return egress_secret_binding_parse(text, s, err, 256);
}

static void test_binding(void **state)
{
	struct egress_secret s;
	char err[256], many[512];
	(void)state;

	assert_int_equal(bp("api.github.com", &s, err), 0);
	assert_int_equal(s.n_hosts, 1);
	assert_string_equal(s.hosts[0], "api.github.com");
	assert_string_equal(s.header, "Authorization");

	assert_int_equal(bp("API.GitHub.com.,uploads.github.com:X-Api-Key", &s, err), 0);
	assert_int_equal(s.n_hosts, 2);
	assert_string_equal(s.hosts[0], "api.github.com"); /* canonical: lower case, no trailing dot */
	assert_string_equal(s.hosts[1], "uploads.github.com");
	assert_string_equal(s.header, "X-Api-Key");
	assert_true(egress_secret_bound(&s, "uploads.github.com"));
	assert_false(egress_secret_bound(&s, "evil.example"));
	assert_false(egress_secret_bound(&s, "github.com"));

	/* wildcards, IP literals, ports, duplicates, empty parts, bad headers */
	assert_int_equal(bp("*.github.com", &s, err), -EINVAL);
	assert_non_null(strstr(err, "wildcard"));
	assert_int_equal(bp("api.*.com", &s, err), -EINVAL);
	assert_int_equal(bp("192.0.2.1", &s, err), -EINVAL);
	assert_non_null(strstr(err, "IP literal"));
	assert_int_equal(bp("0x7f.1", &s, err), -EINVAL);
	assert_int_equal(bp("[2001:db8::1]", &s, err), -EINVAL);
	assert_non_null(strstr(err, "IP literal"));
	assert_int_equal(bp("2001:db8::1", &s, err), -EINVAL);
	assert_int_equal(bp("api.github.com:443", &s, err), -EINVAL);
	assert_non_null(strstr(err, "port"));
	assert_int_equal(bp("api.github.com,API.github.com", &s, err), -EINVAL);
	assert_non_null(strstr(err, "twice"));
	assert_int_equal(bp("", &s, err), -EINVAL);
	assert_int_equal(bp(",a.example", &s, err), -EINVAL);
	assert_int_equal(bp("a.example,", &s, err), -EINVAL);
	assert_int_equal(bp("a.example:", &s, err), -EINVAL);
	assert_int_equal(bp("a.example:Host", &s, err), -EINVAL);
	assert_int_equal(bp("a.example:Proxy-Authorization", &s, err), -EINVAL);
	assert_int_equal(bp("a.example:X:Y", &s, err), -EINVAL);
	assert_int_equal(bp("a_b.example", &s, err), -EINVAL);
	assert_int_equal(bp("a.example/path", &s, err), -EINVAL);
	/* a refusal leaves s as it was */
	assert_int_equal(s.n_hosts, 0);

	/* EGRESS_SECRET_HOSTS_MAX, and one past it */
	many[0] = '\0';
	for (int i = 0, off = 0; i < EGRESS_SECRET_HOSTS_MAX; i++) {
		off += snprintf(many + off, sizeof(many) - (size_t)off, "%sh%d.example", i ? "," : "", i);
	}
	assert_int_equal(bp(many, &s, err), 0);
	assert_int_equal(s.n_hosts, EGRESS_SECRET_HOSTS_MAX);
	(void)snprintf(many + strlen(many), sizeof(many) - strlen(many), ",h99.example");
	assert_int_equal(bp(many, &s, err), -EINVAL);
	assert_non_null(strstr(err, "EGRESS_SECRET_HOSTS_MAX"));
}

static void test_in(void **state)
{
	struct egress_secret s = { 0 };
	uint8_t v[] = "sekrit-value";
	(void)state;

	s.value = v;
	s.value_len = 12;
	assert_true(egress_secret_in(&s, "xx sekrit-value yy", 18));
	assert_true(egress_secret_in(&s, "sekrit-value", 12));
	assert_false(egress_secret_in(&s, "sekrit-valu", 11));
	assert_false(egress_secret_in(&s, "SEKRIT-VALUE", 12)); /* raw bytes only */
	assert_false(egress_secret_in(&s, "sekrit-%76alue", 14));
	assert_false(egress_secret_in(&s, NULL, 0));
	s.value = NULL;
	assert_false(egress_secret_in(&s, "sekrit-value", 12));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),	cmocka_unit_test(test_values), cmocka_unit_test(test_headers),
		cmocka_unit_test(test_binding), cmocka_unit_test(test_in),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
