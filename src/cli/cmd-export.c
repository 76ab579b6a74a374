/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "banned.h"
#include "io.h"
#include "cli/commands.h"
#include "crypto.h"
#include "cli/apiclient.h"
#include "cli/cliutil.h"
#include "daemon/door.h"
#include "json.h"
#include "log.h"

#define EXPORT_MAX_BUNDLE ((uint64_t)512 << 20)

int cmd_export(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_free_ char *trust_path = NULL, *trust = NULL;
	struct apiclient *c = NULL;
	struct sha256_ctx *h = NULL;
	const char *state_dir = NULL, *out = NULL, *box = NULL;
	char path[128], hex[65];
	uint8_t digest[SHA256_LEN];
	uint64_t got = 0;
	struct buf bundle = { 0 };
	int ch, r, ret = 125;

	optind = 1;
	for (;;) {
		ch = getopt_long(argc, argv, "+o:", longopts, NULL);
		if (ch == -1) {
			if (!box && optind < argc) {
				box = argv[optind++];
				continue;
			}
			break;
		}
		if (ch == 'o') {
			out = optarg;
		} else if (ch == 'd') {
			state_dir = optarg;
		} else {
			fprintf(stderr, "usage: tkbox export BOX -o FILE.tkb [--state-dir D]\n");
			return 2;
		}
	}
	if (!box || !out || optind != argc || !door_box_name_ok(box)) {
		fprintf(stderr, "usage: tkbox export BOX -o FILE.tkb [--state-dir D]\n");
		return 2;
	}
	if (cli_trust_path(out, &trust_path) < 0) {
		return 125;
	}
	(void)snprintf(path, sizeof(path), "/v1/boxes/%s/export", box);
	r = apiclient_connect(state_dir, &c);
	if (r < 0) {
		return 125;
	}
	r = apiclient_request(c, "POST", path, NULL, false, NULL);
	if (r < 0) {
		fprintf(stderr, "tkbox export: the daemon's answer was cut or malformed: %s\n", tk_strerror(r));
		goto out;
	}
	if (c->resp.status != 200) {
		apiclient_print_refusal(c, "export");
		goto out;
	}
	if (!c->resp.has_length || c->resp.content_length > EXPORT_MAX_BUNDLE || !c->resp.trust ||
	    !c->resp.bundle_sha256) {
		fprintf(stderr, "tkbox export: the daemon's answer lacks the bundle's length, digest or trust file\n");
		goto out;
	}
	r = apiclient_read_body(c, EXPORT_MAX_BUNDLE, &bundle);
	got = buf_len(&bundle);
	if (r >= 0) {
		r = sha256_new(&h);
	}
	if (r >= 0) {
		r = sha256_update(h, buf_ptr(&bundle), buf_len(&bundle));
	}
	if (r >= 0) {
		r = sha256_final(h, digest);
	}
	if (r < 0) {
		fprintf(stderr, "tkbox export: receiving the bundle: %s\n", tk_strerror(r));
		goto out;
	}
	for (size_t i = 0; i < SHA256_LEN; i++) {
		(void)snprintf(hex + 2 * i, 3, "%02x", digest[i]);
	}
	if (strcmp(hex, c->resp.bundle_sha256) != 0) {
		fprintf(stderr, "tkbox export: the bundle received does not match the digest the signer gave; nothing "
				"written\n");
		goto out;
	}
	{
		struct buf tb;
		r = buf_init(&tb, 8192, 0);
		if (r >= 0) {
			r = b64_decode(c->resp.trust, strlen(c->resp.trust), B64_URL, &tb);
		}
		if (r >= 0) {
			r = buf_dup_cstring(&tb, &trust);
		}
		buf_release(&tb);
		if (r < 0) {
			fprintf(stderr, "tkbox export: the trust file in the answer is malformed\n");
			goto out;
		}
	}
	r = io_write_file_atomic(out, buf_ptr(&bundle), buf_len(&bundle), 0644);
	if (r >= 0) {
		r = io_write_file_atomic(trust_path, trust, strlen(trust), 0644);
	}
	if (r < 0) {
		fprintf(stderr, "tkbox export: writing %s: %s\n", out, tk_strerror(r));
		goto out;
	}
	fprintf(stderr, "tkbox export: wrote %s (%llu bytes, sha256 %s) and %s\n", out, (unsigned long long)got, hex,
		trust_path);
	ret = 0;
out:
	sha256_free(h);
	buf_release(&bundle);
	apiclient_free(c);
	return ret;
}
