/* SPDX-License-Identifier: Apache-2.0 */
/* The signer's config.json parser and state-dir defaults (src/signer/config.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "signer/config.h"

#include "banned.h"

#define LOG_ID "0123456789abcdef0123456789abcdef"

static int parse(const char *text, struct signer_config *c)
{
	char err[256] = "";
	int r = signer_config_parse("/d", text, strlen(text), c, err, sizeof(err));
	if (r < 0) {
		assert_true(strlen(err) > 0); /* every refusal says why */
	}
	return r;
}

static void test_parse_ok(void **state)
{
	struct signer_config c = { 0 };

	assert_int_equal(parse("{\"version\":1,\"mode\":\"system\",\"log_id\":\"" LOG_ID "\",\"origin\":\"o/x\","
			       "\"tenant\":\"default\",\"authorize\":[0,1000],\"socket\":\"/run/s.sock\"}",
			       &c),
			 0);
	assert_int_equal(c.mode, SIGNER_MODE_SYSTEM);
	assert_string_equal(c.socket_path, "/run/s.sock");
	assert_true(signer_config_authorized(&c, 1000));
	assert_false(signer_config_authorized(&c, 1001));
	signer_config_release(&c);
}

static void test_parse_refusals(void **state)
{
	struct signer_config c = { 0 };

	assert_true(parse("{\"version\":2,\"mode\":\"dev\",\"log_id\":\"" LOG_ID "\",\"origin\":\"o\",\"tenant\":\"t\","
			  "\"authorize\":[]}",
			  &c) < 0);
	assert_true(parse("{\"version\":1,\"mode\":\"dev\",\"log_id\":\"" LOG_ID "\",\"origin\":\"o\",\"tenant\":\"t\","
			  "\"authorize\":[],\"extra\":1}",
			  &c) < 0);
	assert_true(parse("{\"version\":1,\"mode\":\"odd\",\"log_id\":\"" LOG_ID "\",\"origin\":\"o\",\"tenant\":\"t\","
			  "\"authorize\":[]}",
			  &c) < 0);
	assert_true(parse("{\"version\":1,\"mode\":\"dev\",\"log_id\":\"ABC\",\"origin\":\"o\",\"tenant\":\"t\","
			  "\"authorize\":[]}",
			  &c) < 0);
	assert_true(parse("{\"version\":1,\"mode\":\"dev\",\"log_id\":\"" LOG_ID "\",\"origin\":\"o\",\"tenant\":\"t\","
			  "\"authorize\":[-1]}",
			  &c) < 0);
	assert_true(parse("{\"version\":1,\"version\":1}", &c) < 0);
}

static void test_authorize_max(void **state)
{
	struct signer_config c = { 0 };
	char text[2048];
	size_t n;

	for (int count = SIGNER_MAX_AUTHORIZE; count <= SIGNER_MAX_AUTHORIZE + 1; count++) {
		n = (size_t)snprintf(text, sizeof(text),
				     "{\"version\":1,\"mode\":\"dev\",\"log_id\":\"" LOG_ID "\",\"origin\":\"o\","
				     "\"tenant\":\"t\",\"authorize\":[");
		for (int i = 0; i < count; i++) {
			n += (size_t)snprintf(text + n, sizeof(text) - n, "%s%d", i ? "," : "", i);
		}
		snprintf(text + n, sizeof(text) - n, "]}");
		if (count == SIGNER_MAX_AUTHORIZE) {
			assert_int_equal(parse(text, &c), 0);
			assert_int_equal(c.n_authorize, SIGNER_MAX_AUTHORIZE);
			signer_config_release(&c);
		} else {
			assert_int_equal(parse(text, &c), -E2BIG);
		}
	}
}

static void test_config_max_bytes(void **state)
{
	struct signer_config c = { 0 };
	char *text = malloc(SIGNER_CONFIG_MAX_BYTES + 2);
	const char *head =
		"{\"version\":1,\"mode\":\"dev\",\"log_id\":\"" LOG_ID "\",\"origin\":\"o\",\"tenant\":\"t\","
		"\"authorize\":[]}";
	size_t hl = strlen(head);

	assert_non_null(text);
	/* Trailing JSON whitespace pads the document to exactly the cap, then one past it. */
	memcpy(text, head, hl);
	memset(text + hl, ' ', SIGNER_CONFIG_MAX_BYTES + 1 - hl);
	text[SIGNER_CONFIG_MAX_BYTES] = '\0';
	assert_int_equal(parse(text, &c), 0);
	signer_config_release(&c);
	text[SIGNER_CONFIG_MAX_BYTES] = ' ';
	text[SIGNER_CONFIG_MAX_BYTES + 1] = '\0';
	assert_true(parse(text, &c) < 0);
	free(text);
}

static void test_defaults(void **state)
{
	char *p = NULL;

	setenv("XDG_DATA_HOME", "/xdg/data", 1);
	assert_int_equal(signer_default_dir(SIGNER_MODE_DEV, &p), 0);
	assert_string_equal(p, "/xdg/data/tkbox-signer");
	free(p);
	assert_int_equal(signer_default_dir(SIGNER_MODE_SYSTEM, &p), 0);
	assert_string_equal(p, "/var/lib/tkbox-signer");
	free(p);
	setenv("XDG_RUNTIME_DIR", "/run/user/7", 1);
	assert_int_equal(signer_default_socket(SIGNER_MODE_DEV, &p), 0);
	assert_string_equal(p, "/run/user/7/tkbox-signer/signer.sock");
	free(p);
	assert_int_equal(signer_default_socket(SIGNER_MODE_SYSTEM, &p), 0);
	assert_string_equal(p, "/run/tkbox-signer/signer.sock");
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_ok),      cmocka_unit_test(test_parse_refusals),
		cmocka_unit_test(test_authorize_max), cmocka_unit_test(test_config_max_bytes),
		cmocka_unit_test(test_defaults),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
