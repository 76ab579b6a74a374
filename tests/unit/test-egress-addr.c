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
#include "egress/addr.h"

static int parse(const char *s, struct egress_addr *a)
{
	return egress_addr_parse(s, strlen(s), a);
}

static void assert_parses_to(const char *s, const char *want)
{
	struct egress_addr a;
	char t[EGRESS_ADDR_TEXT_MAX];

	if (parse(s, &a) != 0) {
		fail_msg("%s did not parse", s);
	}
	egress_addr_format(&a, t);
	if (strcmp(t, want) != 0) {
		fail_msg("%s parsed as %s, want %s", s, t, want);
	}
}

static void test_parse_forms(void **state)
{
	(void)state;
	assert_parses_to("127.0.0.1", "127.0.0.1");
	assert_parses_to("2130706433", "127.0.0.1");
	assert_parses_to("0177.0.0.1", "127.0.0.1");
	assert_parses_to("0x7f.1", "127.0.0.1");
	assert_parses_to("0X7F.0.1", "127.0.0.1");
	assert_parses_to("127.1", "127.0.0.1");
	assert_parses_to("127.0.1", "127.0.0.1");
	assert_parses_to("0x7f000001", "127.0.0.1");
	assert_parses_to("017700000001", "127.0.0.1");
	assert_parses_to("0000000000000000000012.1", "10.0.0.1"); /* any number of leading zeros: octal */
	assert_parses_to("127.0.0.1.", "127.0.0.1");
	assert_parses_to("0", "0.0.0.0");
	assert_parses_to("4294967295", "255.255.255.255");
	assert_parses_to("1.16777215", "1.255.255.255");
	assert_parses_to("::1", "::1");
	assert_parses_to("[::1]", "::1");
	assert_parses_to("[::ffff:127.0.0.1]", "::ffff:127.0.0.1");
	assert_parses_to("0:0:0:0:0:ffff:7f00:1", "::ffff:127.0.0.1");
	assert_parses_to("64:ff9b::169.254.169.254", "64:ff9b::a9fe:a9fe");
}

static void test_parse_refused(void **state)
{
	static const char *const bad[] = {
		"",
		"1.2.3.4.5",
		"256.1",
		"08.1.1.1",
		"0x",
		"1..2",
		"[::1",
		"::1]",
		"[]",
		"4294967296",
		"1.16777216",
		"1.2.65536",
		" 127.1",
		"127.1 x",
		"127.0.0.1..",
		"0x1.0x",
		"1.0.0.0x100",
		"[127.0.0.1]",
		"example.com",
		":::",
		"1:2:3:4:5:6:7:8:9",
	};
	struct egress_addr a;
	(void)state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (parse(bad[i], &a) >= 0) {
			fail_msg("%s parsed", bad[i]);
		}
	}
	assert_int_equal(parse("1.", &a), 0); /* a trailing dot: the literal 0.0.0.1 */
	assert_int_equal(a.b[3], 1);
	assert_int_equal(parse("fe80::1%eth0", &a), -EINVAL);
	assert_int_equal(parse("[fe80::1%25eth0]", &a), -EINVAL);
	assert_int_equal(egress_addr_parse("127.0.0.1\0x", 11, &a), -EBADMSG);
}

/* Our IPv4 reading is inet_aton's for every text without whitespace (inet_aton stops at a space). */
static void test_parse_matches_inet_aton(void **state)
{
	static const char *const texts[] = {
		"0",
		"00",
		"0x0",
		"0x",
		"09",
		"0.0x1",
		"1.2.3",
		"1.2.3.256",
		"1.2.65535",
		"0xffffffff",
		"0377.0377.0377.0377",
		"0400.1",
		"1.0xff",
		"1.0x100",
		"099",
		"0x1g",
		"1e5",
		"1.2.3.4",
		"037777777777",
	};
	(void)state;

	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		struct in_addr ia;
		struct egress_addr a;
		int mine = parse(texts[i], &a), libc = inet_aton(texts[i], &ia);

		if ((mine == 0) != (libc == 1)) {
			fail_msg("%s: ours %d, inet_aton %d", texts[i], mine, libc);
		}
		if (mine == 0) {
			assert_int_equal(a.family, 4);
			assert_memory_equal(a.b, &ia.s_addr, 4);
		}
	}
}

static enum egress_addr_class cls(const char *s, const struct egress_block *b, const struct egress_host_addrs *own,
				  unsigned flags)
{
	struct egress_addr a;

	if (parse(s, &a) != 0) {
		fail_msg("%s did not parse", s);
	}
	return egress_addr_classify(&a, b, own, flags);
}

static void test_classify_every_form(void **state)
{
	static const struct {
		const char *s;
		enum egress_addr_class want;
	} cases[] = {
		{ "127.0.0.1", EGRESS_ADDR_LOOPBACK },
		{ "2130706433", EGRESS_ADDR_LOOPBACK },
		{ "0177.0.0.1", EGRESS_ADDR_LOOPBACK },
		{ "0x7f.1", EGRESS_ADDR_LOOPBACK },
		{ "127.1", EGRESS_ADDR_LOOPBACK },
		{ "127.0.1.", EGRESS_ADDR_LOOPBACK },
		{ "[::1]", EGRESS_ADDR_LOOPBACK },
		{ "::ffff:127.0.0.1", EGRESS_ADDR_LOOPBACK },
		{ "::127.0.0.1", EGRESS_ADDR_LOOPBACK },
		{ "64:ff9b::7f00:1", EGRESS_ADDR_LOOPBACK },
		{ "64:ff9b:1:7f00:0:100::", EGRESS_ADDR_LOOPBACK },
		{ "64:ff9b:1::7f00:1", EGRESS_ADDR_LOOPBACK },
		{ "2002:7f00:1::", EGRESS_ADDR_LOOPBACK },
		{ "2001:0:4136:e378:8000:63bf:80ff:fffe", EGRESS_ADDR_LOOPBACK },
		{ "0.0.0.0", EGRESS_ADDR_UNSPECIFIED },
		{ "0", EGRESS_ADDR_UNSPECIFIED },
		{ "0.1.2.3", EGRESS_ADDR_UNSPECIFIED },
		{ "::", EGRESS_ADDR_UNSPECIFIED },
		{ "::2", EGRESS_ADDR_UNSPECIFIED },
		{ "10.1.2.3", EGRESS_ADDR_PRIVATE },
		{ "012.1", EGRESS_ADDR_PRIVATE },
		{ "0xa000001", EGRESS_ADDR_PRIVATE },
		{ "172.16.0.1", EGRESS_ADDR_PRIVATE },
		{ "172.31.255.255", EGRESS_ADDR_PRIVATE },
		{ "192.168.1.1", EGRESS_ADDR_PRIVATE },
		{ "::ffff:192.168.1.1", EGRESS_ADDR_PRIVATE },
		{ "fc00::1", EGRESS_ADDR_PRIVATE },
		{ "fdff::1", EGRESS_ADDR_PRIVATE },
		{ "100.64.0.1", EGRESS_ADDR_SHARED },
		{ "100.127.255.255", EGRESS_ADDR_SHARED },
		{ "169.254.1.1", EGRESS_ADDR_LINK_LOCAL },
		{ "fe80::1", EGRESS_ADDR_LINK_LOCAL },
		{ "febf::1", EGRESS_ADDR_LINK_LOCAL },
		{ "224.0.0.1", EGRESS_ADDR_MULTICAST },
		{ "239.255.255.250", EGRESS_ADDR_MULTICAST },
		{ "ff02::1", EGRESS_ADDR_MULTICAST },
		{ "255.255.255.255", EGRESS_ADDR_BROADCAST },
		{ "4294967295", EGRESS_ADDR_BROADCAST },
		{ "240.0.0.1", EGRESS_ADDR_RESERVED },
		{ "169.254.169.254", EGRESS_ADDR_METADATA },
		{ "2852039166", EGRESS_ADDR_METADATA },
		{ "0xa9fea9fe", EGRESS_ADDR_METADATA },
		{ "0251.0376.0251.0376", EGRESS_ADDR_METADATA },
		{ "169.254.43518", EGRESS_ADDR_METADATA },
		{ "[::ffff:169.254.169.254]", EGRESS_ADDR_METADATA },
		{ "::ffff:a9fe:a9fe", EGRESS_ADDR_METADATA },
		{ "64:ff9b::169.254.169.254", EGRESS_ADDR_METADATA },
		{ "2002:a9fe:a9fe::1", EGRESS_ADDR_METADATA },
		{ "fd00:ec2::254", EGRESS_ADDR_METADATA },
		{ "fd20:ce::254", EGRESS_ADDR_METADATA },
		{ "169.254.170.2", EGRESS_ADDR_METADATA },
		{ "100.100.100.200", EGRESS_ADDR_METADATA },
		{ "192.0.0.192", EGRESS_ADDR_METADATA },
		{ "168.63.129.16", EGRESS_ADDR_METADATA },
		{ "169.254.170.23", EGRESS_ADDR_METADATA }, /* AWS EKS Pod Identity */
		{ "fd00:ec2::23", EGRESS_ADDR_METADATA },
		{ "[fd00:ec2:0::0023]", EGRESS_ADDR_METADATA },
		{ "169.254.0.23", EGRESS_ADDR_METADATA }, /* Tencent Cloud */
		{ "2851995671", EGRESS_ADDR_METADATA }, /* 169.254.0.23 in decimal */
		{ "::ffff:169.254.170.23", EGRESS_ADDR_METADATA },
		/* not listed by issue 12: documentation ranges and public addresses pass */
		{ "192.0.2.1", EGRESS_ADDR_OK },
		{ "198.51.100.7", EGRESS_ADDR_OK },
		{ "203.0.113.9", EGRESS_ADDR_OK },
		{ "2001:db8::1", EGRESS_ADDR_OK },
		{ "8.8.8.8", EGRESS_ADDR_OK },
		{ "::ffff:8.8.8.8", EGRESS_ADDR_OK },
		{ "172.32.0.1", EGRESS_ADDR_OK },
		{ "100.128.0.1", EGRESS_ADDR_OK },
		{ "2606:4700::1111", EGRESS_ADDR_OK },
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		enum egress_addr_class c = cls(cases[i].s, NULL, NULL, 0);

		if (c != cases[i].want) {
			fail_msg("%s: class %d, want %d", cases[i].s, c, cases[i].want);
		}
	}
}

static void test_allow_private_never_metadata(void **state)
{
	(void)state;
	assert_int_equal(cls("10.0.0.1", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_OK);
	assert_int_equal(cls("127.0.0.1", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_OK);
	assert_int_equal(cls("fd12::1", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_OK);
	assert_int_equal(cls("169.254.1.1", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_OK);
	assert_int_equal(cls("169.254.169.254", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_METADATA);
	assert_int_equal(cls("0xa9fea9fe", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_METADATA);
	assert_int_equal(cls("::ffff:169.254.169.254", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_METADATA);
	assert_int_equal(cls("fd00:ec2::254", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_METADATA);
	assert_int_equal(cls("100.100.100.200", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_METADATA);
	/* Credential endpoints inside link-local and fc00::/7, which --egress-allow-private lets through otherwise. */
	assert_int_equal(cls("169.254.170.23", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_METADATA);
	assert_int_equal(cls("fd00:ec2::23", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_METADATA);
	assert_int_equal(cls("169.254.0.23", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_METADATA);
	assert_int_equal(cls("64:ff9b::169.254.0.23", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_METADATA);
	assert_int_equal(cls("169.254.0.24", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_OK);
	assert_int_equal(cls("fd00:ec2::24", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_OK);
	assert_int_equal(cls("224.0.0.1", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_MULTICAST);
	assert_int_equal(cls("0.0.0.0", NULL, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_UNSPECIFIED);
}

static void test_own_addresses(void **state)
{
	struct egress_host_addrs own = { .n = 2 };
	(void)state;

	assert_int_equal(parse("203.0.113.5", &own.a[0]), 0);
	assert_int_equal(parse("2001:db8::5", &own.a[1]), 0);
	assert_int_equal(cls("203.0.113.5", NULL, &own, 0), EGRESS_ADDR_HOST);
	assert_int_equal(cls("3405803781", NULL, &own, 0), EGRESS_ADDR_HOST);
	assert_int_equal(cls("::ffff:203.0.113.5", NULL, &own, 0), EGRESS_ADDR_HOST);
	assert_int_equal(cls("64:ff9b::cb00:7105", NULL, &own, 0), EGRESS_ADDR_HOST);
	assert_int_equal(cls("[2001:db8:0::5]", NULL, &own, 0), EGRESS_ADDR_HOST);
	assert_int_equal(cls("203.0.113.6", NULL, &own, 0), EGRESS_ADDR_OK);
	assert_int_equal(cls("203.0.113.5", NULL, NULL, 0), EGRESS_ADDR_OK);
}

/*
 * The own-address table keeps what the fixed ranges let through: a host with
 * more than EGRESS_MAX_HOST_ADDRS loopback, private and link-local addresses
 * still has its public ones in the table (and each is refused as the host's),
 * and only past that many public ones is the table full.
 */
static void test_own_table_filter(void **state)
{
	static const char *const skipped[] = { "127.0.0.1",  "::1",	"10.1.2.3",	   "192.168.0.9",
					       "172.16.0.1", "fd12::1", "fe80::1",	   "169.254.3.4",
					       "100.64.0.1", "0.0.0.0", "::ffff:10.0.0.1", "169.254.169.254" };
	struct egress_host_addrs *own = calloc(1, sizeof(*own));
	struct egress_addr a;
	size_t i;

	(void)state;
	assert_non_null(own);
	for (i = 0; i < sizeof(skipped) / sizeof(skipped[0]); i++) {
		assert_int_equal(parse(skipped[i], &a), 0);
		if (egress_host_addrs_add(own, &a) != 0) {
			fail_msg("%s went into the table: the fixed ranges refuse it already", skipped[i]);
		}
	}
	/* 300 link-local addresses of a host with many interfaces: none takes a slot. */
	for (i = 0; i < 300; i++) {
		a = (struct egress_addr){ .family = 6,
					  .b = { 0xfe, 0x80, [14] = (uint8_t)(i >> 8), [15] = (uint8_t)i } };
		assert_int_equal(egress_host_addrs_add(own, &a), 0);
	}
	assert_int_equal(own->n, 0);
	assert_int_equal(parse("203.0.113.5", &a), 0);
	assert_int_equal(egress_host_addrs_add(own, &a), 1);
	assert_int_equal(egress_host_addrs_add(own, &a), 0); /* once */
	assert_int_equal(own->n, 1);
	assert_int_equal(cls("203.0.113.5", NULL, own, 0), EGRESS_ADDR_HOST);
	/* Public addresses fill it; one past the cap is said, not dropped silently. */
	for (i = 1; i < EGRESS_MAX_HOST_ADDRS; i++) {
		a = (struct egress_addr){
			.family = 6, .b = { 0x20, 0x01, 0x0d, 0xb8, [14] = (uint8_t)(i >> 8), [15] = (uint8_t)i }
		};
		assert_int_equal(egress_host_addrs_add(own, &a), 1);
	}
	assert_int_equal(own->n, EGRESS_MAX_HOST_ADDRS);
	assert_int_equal(parse("198.51.100.7", &a), 0);
	assert_int_equal(egress_host_addrs_add(own, &a), -E2BIG);
	assert_int_equal(own->n, EGRESS_MAX_HOST_ADDRS);
	free(own);
}

static void test_block_list(void **state)
{
	static struct egress_block b;
	(void)state;

	b.n = 0;
	assert_int_equal(egress_block_parse("203.0.113.0/24,2001:db8::/32", &b), 0);
	assert_int_equal(egress_block_parse("198.51.100.7", &b), 0);
	assert_int_equal(egress_block_parse("::ffff:192.0.2.0/120", &b), 0);
	assert_int_equal(b.n, 4);
	assert_int_equal(b.e[3].addr.family, 4); /* stored as 192.0.2.0/24 */
	assert_int_equal(b.e[3].prefix, 24);
	assert_int_equal(cls("203.0.113.77", &b, NULL, 0), EGRESS_ADDR_BLOCKED);
	assert_int_equal(cls("3405803853", &b, NULL, 0), EGRESS_ADDR_BLOCKED);
	assert_int_equal(cls("0xcb.0.0x71.0115", &b, NULL, 0), EGRESS_ADDR_BLOCKED);
	assert_int_equal(cls("::ffff:203.0.113.77", &b, NULL, 0), EGRESS_ADDR_BLOCKED);
	assert_int_equal(cls("64:ff9b::203.0.113.77", &b, NULL, 0), EGRESS_ADDR_BLOCKED);
	assert_int_equal(cls("2002:cb00:714d::", &b, NULL, 0), EGRESS_ADDR_BLOCKED);
	assert_int_equal(cls("2001:db8:ffff::1", &b, NULL, 0), EGRESS_ADDR_BLOCKED);
	assert_int_equal(cls("198.51.100.7", &b, NULL, EGRESS_ALLOW_PRIVATE), EGRESS_ADDR_BLOCKED);
	assert_int_equal(cls("198.51.100.8", &b, NULL, 0), EGRESS_ADDR_OK);
	assert_int_equal(cls("192.0.2.200", &b, NULL, 0), EGRESS_ADDR_BLOCKED);
	assert_int_equal(cls("203.0.114.1", &b, NULL, 0), EGRESS_ADDR_OK);

	assert_int_equal(egress_block_parse("203.0.113.1/24", &b), -EINVAL);
	assert_int_equal(egress_block_parse("203.0.113.0/33", &b), -EINVAL);
	assert_int_equal(egress_block_parse("203.0.113.0/024", &b), -EINVAL);
	assert_int_equal(egress_block_parse("2001:db8::/129", &b), -EINVAL);
	assert_int_equal(egress_block_parse("0313.0.113.0/24", &b), -EBADMSG);
	assert_int_equal(egress_block_parse("127.1", &b), -EBADMSG);
	assert_int_equal(egress_block_parse("", &b), -EBADMSG);
	assert_int_equal(egress_block_parse("1.2.3.4,", &b), -EBADMSG);
	assert_int_equal(egress_block_parse("1.2.3.4,,5.6.7.8", &b), -EBADMSG);
	assert_int_equal(egress_block_parse("1.2.3.4,nonsense", &b), -EBADMSG);
	assert_int_equal(b.n, 4); /* unchanged by every failure */
}

static void test_block_list_cap(void **state)
{
	static struct egress_block b;
	char v[32];
	(void)state;

	b.n = 0;
	for (unsigned i = 0; i < EGRESS_MAX_BLOCK; i++) {
		(void)snprintf(v, sizeof(v), "198.51.%u.%u", i / 256, i % 256);
		assert_int_equal(egress_block_parse(v, &b), 0);
	}
	assert_int_equal(b.n, EGRESS_MAX_BLOCK);
	assert_int_equal(egress_block_parse("203.0.113.1", &b), -E2BIG);
	assert_int_equal(b.n, EGRESS_MAX_BLOCK);
}

static void test_explain(void **state)
{
	struct egress_addr a;
	char out[160];
	(void)state;

	assert_int_equal(parse("0x7f.1", &a), 0);
	(void)egress_addr_explain(&a, egress_addr_classify(&a, NULL, NULL, 0), out, sizeof(out));
	assert_string_equal(out, "127.0.0.1 is loopback (always refused)");
	assert_int_equal(parse("[::ffff:169.254.169.254]", &a), 0);
	(void)egress_addr_explain(&a, egress_addr_classify(&a, NULL, NULL, 0), out, sizeof(out));
	assert_string_equal(out, "::ffff:169.254.169.254 is a cloud metadata address (always refused, even with "
				 "--egress-allow-private)");
	assert_int_equal(egress_addr_explain(&a, EGRESS_ADDR_LOOPBACK, out, 5), 4);
	assert_string_equal(out, "::ff");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_forms),
		cmocka_unit_test(test_parse_refused),
		cmocka_unit_test(test_parse_matches_inet_aton),
		cmocka_unit_test(test_classify_every_form),
		cmocka_unit_test(test_allow_private_never_metadata),
		cmocka_unit_test(test_own_addresses),
		cmocka_unit_test(test_own_table_filter),
		cmocka_unit_test(test_block_list),
		cmocka_unit_test(test_block_list_cap),
		cmocka_unit_test(test_explain),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
