/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "egress/host.h"

static int hp(const char *s, struct egress_host *h)
{
	return egress_host_parse(s, strlen(s), h);
}

static void test_names(void **state)
{
	struct egress_host h;
	char name[300];
	(void)state;

	assert_int_equal(hp("Example.COM.", &h), 0);
	assert_int_equal(h.kind, EGRESS_HOST_NAME);
	assert_string_equal(h.name, "example.com");
	assert_int_equal(hp("xn--bcher-kva.example", &h), 0);
	assert_int_equal(hp("a-b.c0", &h), 0);
	assert_int_equal(hp("b\xc3\xbc"
			    "cher.example",
			    &h),
			 -EBADMSG); /* non-ASCII: send the punycode form */
	static const char *const bad[] = { "a..b",
					   "-a.com",
					   "a-.com",
					   "a_b.com",
					   ".",
					   "..",
					   "a.com..",
					   "a b",
					   "a/b",
					   "1.2.3.4.5",
					   "example.123",
					   "example.0x1f",
					   "example.0X",
					   "256.1.1.1",
					   "08.1.1.1",
					   "[example.com]",
					   "*.example.com",
					   "a%2e.com",
					   "[::1" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (hp(bad[i], &h) >= 0) {
			fail_msg("%s accepted", bad[i]);
		}
	}
	/* a label of 63 bytes passes, 64 does not; a name of 253 passes, 254 does not */
	memset(name, 'a', 63);
	memcpy(name + 63, ".com", 5);
	assert_int_equal(hp(name, &h), 0);
	memset(name, 'a', 64);
	memcpy(name + 64, ".com", 5);
	assert_int_equal(hp(name, &h), -ENAMETOOLONG);
	for (size_t i = 0; i < 253; i++) {
		name[i] = (i % 2) ? '.' : 'a';
	}
	name[253] = '\0';
	assert_int_equal(hp(name, &h), 0);
	name[253] = '.';
	name[254] = '\0';
	assert_int_equal(hp(name, &h), 0); /* the trailing dot does not count */
	name[253] = 'a';
	assert_int_equal(hp(name, &h), -ENAMETOOLONG);
	assert_int_equal(egress_host_parse("a\0b", 3, &h), -EBADMSG);
}

static void test_literals_are_addresses(void **state)
{
	struct egress_host h;
	(void)state;

	assert_int_equal(hp("0x7f.1", &h), 0);
	assert_int_equal(h.kind, EGRESS_HOST_ADDR);
	assert_string_equal(h.name, "127.0.0.1");
	assert_int_equal(hp("[::FFFF:127.0.0.1]", &h), 0);
	assert_int_equal(h.kind, EGRESS_HOST_ADDR);
	assert_string_equal(h.name, "::ffff:127.0.0.1");
	assert_int_equal(hp("2130706433.", &h), 0);
	assert_int_equal(h.kind, EGRESS_HOST_ADDR);
	assert_int_equal(hp("fe80::1%eth0", &h), -EINVAL);
	assert_int_equal(hp("::1::", &h), -EBADMSG);
}

static void test_authority_and_url(void **state)
{
	struct egress_host h;
	uint16_t port;
	size_t off;
	const char *u;
	(void)state;

	assert_int_equal(egress_authority_parse("Example.com:443", 15, &h, &port), 0);
	assert_string_equal(h.name, "example.com");
	assert_int_equal(port, 443);
	assert_int_equal(egress_authority_parse("[::1]:8443", 10, &h, &port), 0);
	assert_int_equal(h.kind, EGRESS_HOST_ADDR);
	assert_int_equal(port, 8443);
	static const char *const bad[] = { "example.com",     "example.com:",	   ":443",
					   "example.com:0",   "example.com:65536", "example.com:0443",
					   "example.com:44a", "::1:443",	   "[::1]443",
					   "[::1]",	      "a@example.com:443", "example.com:443:1" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (egress_authority_parse(bad[i], strlen(bad[i]), &h, &port) >= 0) {
			fail_msg("%s accepted", bad[i]);
		}
	}
	u = "HTTP://Deb.Example/debian/dists?x=1";
	assert_int_equal(egress_url_parse(u, strlen(u), &h, &port, &off), 0);
	assert_string_equal(h.name, "deb.example");
	assert_int_equal(port, 80);
	assert_string_equal(u + off, "/debian/dists?x=1");
	u = "http://[2001:db8::1]:8080";
	assert_int_equal(egress_url_parse(u, strlen(u), &h, &port, &off), 0);
	assert_int_equal(port, 8080);
	assert_int_equal(off, strlen(u));
	u = "https://example.com/";
	assert_int_equal(egress_url_parse(u, strlen(u), &h, &port, &off), -EPROTONOSUPPORT);
	static const char *const badu[] = { "http://user@169.254.169.254/",
					    "http://example.com/#frag",
					    "ftp://x/",
					    "http:/x",
					    "http://",
					    "http://:80/",
					    "http://example.com:/",
					    "http://exa mple.com/" };
	for (size_t i = 0; i < sizeof(badu) / sizeof(badu[0]); i++) {
		if (egress_url_parse(badu[i], strlen(badu[i]), &h, &port, &off) >= 0) {
			fail_msg("%s accepted", badu[i]);
		}
	}
}

static enum egress_addr_class hc(const char *s, unsigned flags)
{
	struct egress_host h;

	if (hp(s, &h) != 0) {
		fail_msg("%s refused", s);
	}
	return egress_host_classify(&h, NULL, NULL, flags);
}

static void test_classify_names(void **state)
{
	(void)state;
	assert_int_equal(hc("metadata.google.internal", 0), EGRESS_ADDR_METADATA);
	assert_int_equal(hc("METADATA.Google.Internal.", EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_METADATA);
	assert_int_equal(hc("metadata", 0), EGRESS_ADDR_METADATA);
	assert_int_equal(hc("instance-data", 0), EGRESS_ADDR_METADATA);
	assert_int_equal(hc("instance-data.ec2.internal", 0), EGRESS_ADDR_METADATA);
	assert_int_equal(hc("metadata.goog", 0), EGRESS_ADDR_METADATA);
	assert_int_equal(hc("localhost", 0), EGRESS_ADDR_LOOPBACK);
	assert_int_equal(hc("a.b.LOCALHOST", 0), EGRESS_ADDR_LOOPBACK);
	assert_int_equal(hc("localhost", EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_OK);
	assert_int_equal(hc("notlocalhost", 0), EGRESS_ADDR_OK);
	assert_int_equal(hc("example.com", 0), EGRESS_ADDR_OK);
	assert_int_equal(hc("0251.0376.0251.0376", EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_METADATA);
	assert_int_equal(hc("[::1]", 0), EGRESS_ADDR_LOOPBACK);
}

static struct egress_host host_of(const char *s)
{
	struct egress_host h;

	if (hp(s, &h) != 0) {
		fail_msg("%s refused", s);
	}
	return h;
}

static void test_allowlist(void **state)
{
	struct egress_allow list[4];
	struct egress_host h;
	(void)state;

	assert_int_equal(egress_allow_parse("*.Example.com", &list[0]), 0);
	assert_true(list[0].wildcard);
	assert_int_equal(egress_allow_parse("git.example.org:22", &list[1]), 0);
	assert_int_equal(list[1].port, 22);
	assert_int_equal(egress_allow_parse("index.test.example", &list[2]), 0);
	assert_int_equal(egress_allow_parse("api.example.net:443", &list[3]), 0);
	static const char *const bad[] = {
		"*", "*.", "*.com", "*.1.2.3.4", "**.example.com", "a.*.example.com", "example.com:0", "", "*.[::1]"
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct egress_allow e;

		if (egress_allow_parse(bad[i], &e) >= 0) {
			fail_msg("%s accepted", bad[i]);
		}
	}
	h = host_of("a.b.example.com");
	assert_int_equal(egress_allow_match(list, 4, &h, 443), EGRESS_MATCH_HOST);
	assert_int_equal(egress_allow_match(list, 4, &h, 80), EGRESS_MATCH_HOST);
	assert_int_equal(egress_allow_match(list, 4, &h, 8443), EGRESS_MATCH_NONE);
	h = host_of("example.com");
	assert_int_equal(egress_allow_match(list, 4, &h, 443),
			 EGRESS_MATCH_NONE); /* the suffix itself is not covered */
	h = host_of("evilexample.com");
	assert_int_equal(egress_allow_match(list, 4, &h, 443), EGRESS_MATCH_NONE);
	h = host_of("git.example.org");
	assert_int_equal(egress_allow_match(list, 4, &h, 22), EGRESS_MATCH_PORT);
	assert_int_equal(egress_allow_match(list, 4, &h, 443), EGRESS_MATCH_NONE);
	h = host_of("Index.Test.Example.");
	assert_int_equal(egress_allow_match(list, 4, &h, 443), EGRESS_MATCH_HOST);
	assert_int_equal(egress_allow_match(list, 4, &h, 22), EGRESS_MATCH_NONE);
	h = host_of("api.example.net");
	assert_int_equal(egress_allow_match(list, 4, &h, 443), EGRESS_MATCH_PORT);
}

static void test_door_url(void **state)
{
	struct egress_host h = host_of("Example.com");
	char out[EGRESS_URL_MAX];
	(void)state;

	assert_int_equal(egress_door_url(EGRESS_REQ_CONNECT, &h, 443, EGRESS_MATCH_HOST, out, sizeof(out)), 23);
	assert_string_equal(out, "https://example.com:443");
	assert_int_equal(egress_door_url(EGRESS_REQ_CONNECT, &h, 443, EGRESS_MATCH_NONE, out, sizeof(out)), 23);
	assert_string_equal(out, "https://example.com:443");
	assert_true(egress_door_url(EGRESS_REQ_CONNECT, &h, 443, EGRESS_MATCH_PORT, out, sizeof(out)) > 0);
	assert_string_equal(out, "tcp://example.com:443");
	assert_true(egress_door_url(EGRESS_REQ_CONNECT, &h, 22, EGRESS_MATCH_PORT, out, sizeof(out)) > 0);
	assert_string_equal(out, "tcp://example.com:22");
	assert_true(egress_door_url(EGRESS_REQ_ABSOLUTE, &h, 80, EGRESS_MATCH_HOST, out, sizeof(out)) > 0);
	assert_string_equal(out, "http://example.com:80");
	h = host_of("2001:db8::1");
	assert_true(egress_door_url(EGRESS_REQ_CONNECT, &h, 443, EGRESS_MATCH_NONE, out, sizeof(out)) > 0);
	assert_string_equal(out, "https://[2001:db8::1]:443");
	assert_int_equal(egress_door_url(EGRESS_REQ_CONNECT, &h, 443, EGRESS_MATCH_NONE, out, 25), -ENOBUFS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_literals_are_addresses),
		cmocka_unit_test(test_authority_and_url),
		cmocka_unit_test(test_classify_names),
		cmocka_unit_test(test_allowlist),
		cmocka_unit_test(test_door_url),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
