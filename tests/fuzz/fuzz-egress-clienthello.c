/* SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "egress/clienthello.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * FuzzClientHello (paper Table 14): an admitted ClientHello names the CONNECT
 * host and only it, in every reading; exactly one ClientHello is forwarded.
 *
 * The first input byte seeds where the rest is split into reads. The stream
 * is read whole and split; both readings must agree on the result, the bytes
 * taken, and the server name. An admitted ClientHello is exactly the bytes
 * taken (re-reading just those gives the same), its name passes the SNI
 * check against itself as the CONNECT host and fails against any other.
 */
static struct egress_ch_reader one, split;

static int read_split(const uint8_t *p, size_t n, uint32_t seed, struct egress_ch_info *info, size_t *ret_used)
{
	size_t i = 0, used = 0;
	int r = 0;

	egress_ch_init(&split);
	while (i < n) {
		size_t k;

		seed = seed * 1103515245u + 12345u;
		k = 1 + (seed >> 16) % 97;
		k = k > n - i ? n - i : k;
		r = egress_ch_feed(&split, p + i, k, &used, info, NULL);
		if (r != 0) {
			*ret_used = i + (r == 1 ? used : 0);
			return r;
		}
		i += k;
	}
	*ret_used = i;
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct egress_ch_info a = { 0 }, b = { 0 }, c = { 0 };
	struct egress_host h;
	const char *reason = NULL;
	size_t used_a = 0, used_b = 0, used_c = 0;
	int ra, rb;

	if (size < 1) {
		return 0;
	}
	egress_ch_init(&one);
	ra = egress_ch_feed(&one, data + 1, size - 1, &used_a, &a, &reason);
	if (ra < 0 && !reason) {
		abort();
	}
	rb = read_split(data + 1, size - 1, data[0], &b, &used_b);
	if (ra != rb || (ra == 1 && (used_a != used_b || a.has_sni != b.has_sni || strcmp(a.sni, b.sni) != 0 ||
				     a.raw_len != b.raw_len || a.raw_len != used_a))) {
		abort();
	}
	if (ra != 1) {
		return 0;
	}
	egress_ch_init(&one);
	if (egress_ch_feed(&one, data + 1, used_a, &used_c, &c, &reason) != 1 || used_c != used_a ||
	    strcmp(c.sni, a.sni) != 0) {
		abort();
	}
	if (a.has_sni) {
		if (egress_host_parse(a.sni, strlen(a.sni), &h) != 0 || egress_ch_check_sni(&a, &h, &reason) != 0) {
			abort();
		}
		if (egress_host_parse("other.invalid", 13, &h) != 0 ||
		    (strcmp(a.sni, "other.invalid") != 0 && egress_ch_check_sni(&a, &h, &reason) == 0)) {
			abort();
		}
	}
	return 0;
}
