/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test tool: write a valid bundle made by the test generator and its trust
 * file. usage: tkb-gen OUT.tkb OUT.trust.json [N_CALLS [open|closed [fixed]]]
 * "fixed" uses the seed of the fuzz corpus (32 bytes of 0x42), so the bundle
 * verifies under the trust file that fuzz-verify-bundle pins.
 */
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "tb.h"

static int write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "we");

	if (!f) {
		return -1;
	}
	if (fwrite(p, 1, n, f) != n) {
		fclose(f);
		return -1;
	}
	return fclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct tb t;
	struct buf zip = { 0 };
	unsigned long calls = 3;
	bool closed = true;

	if (argc < 3) {
		fprintf(stderr, "usage: tkb-gen OUT.tkb OUT.trust.json [N_CALLS [open|closed [fixed]]]\n");
		return 2;
	}
	if (argc > 3) {
		calls = strtoul(argv[3], NULL, 10);
	}
	if (argc > 4 && strcmp(argv[4], "open") == 0) {
		closed = false;
	}
	if (argc > 5 && strcmp(argv[5], "fixed") == 0) {
		uint8_t seed[32];

		memset(seed, 0x42, sizeof(seed));
		if (tb_build_seeded(&t, calls, closed, seed) < 0) {
			fprintf(stderr, "tkb-gen: could not build the bundle\n");
			return 1;
		}
	} else if (tb_build(&t, calls, closed) < 0) {
		fprintf(stderr, "tkb-gen: could not build the bundle\n");
		return 1;
	}
	if (buf_init(&zip, (size_t)64 << 20, 0) < 0 || tb_zip(&t, &zip) < 0) {
		fprintf(stderr, "tkb-gen: could not build the bundle\n");
		return 1;
	}
	if (write_file(argv[1], buf_ptr(&zip), buf_len(&zip)) < 0 ||
	    write_file(argv[2], t.trust, strlen(t.trust)) < 0) {
		perror("tkb-gen");
		return 1;
	}
	buf_release(&zip);
	tb_release(&t);
	return 0;
}
