/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tkbox verify BUNDLE --trust TRUST [--json] [--strict]
 *
 * Reads the two files (each under its cap) and hands the bytes to the pure
 * verifier in src/verify; prints the report. Exit codes are Tracekit's: 0
 * verified, 1 a check failed, 2 unusable input or bad flags, 3 --strict with
 * warnings.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "banned.h"
#include "cli/commands.h"
#include "io.h"
#include "json.h"
#include "log.h"
#include "verify/bundle.h"
#include "verify/trust.h"
#include "verify/verify.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: tkbox verify BUNDLE --trust TRUST [--json] [--strict]\n"
		   "\n"
		   "Verify a Tracekit format v2 evidence bundle (.tkb) offline against a pinned trust file.\n"
		   "Exit status: 0 verified, 1 a check failed, 2 unusable bundle/trust or bad flags,\n"
		   "3 --strict and a warning.\n");
}

/* The report of a file that could not be read at all, in the form asked for. */
static void print_unusable(bool json, const char *check, const char *detail)
{
	if (json) {
		printf("{\n  \"exit_code\": 2,\n  \"checks\": [{\"check\": \"%s\", \"status\": \"fail\", \"detail\": "
		       "\"%s\", "
		       "\"problems\": [\"%s\"]}],\n  \"failures\": [\"%s \u2014 %s\"],\n  \"warnings\": [],\n  "
		       "\"integrity\": "
		       "\"UNUSABLE BUNDLE\",\n  \"assurance\": null,\n  \"notes\": []\n}\n",
		       check, detail, detail, check, detail);
	} else {
		printf("[FAIL] %s \xe2\x80\x94 %s\nIntegrity: UNUSABLE BUNDLE.\nAssurance: none (integrity not "
		       "established).\n",
		       check, detail);
	}
}

int cmd_verify(int argc, char **argv)
{
	const char *bundle_path = NULL, *trust_path = NULL;
	struct verify_opts opts = { .strict = false };
	struct verify_report rep = { 0 };
	_cleanup_free_ char *bundle = NULL, *trust = NULL;
	size_t bundle_n = 0, trust_n = 0;
	char q[LOG_QUOTE_BUFSIZE];
	bool json = false;
	int r, code;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--trust") == 0 && i + 1 < argc) {
			trust_path = argv[++i];
		} else if (strncmp(argv[i], "--trust=", 8) == 0) {
			trust_path = argv[i] + 8;
		} else if (strcmp(argv[i], "--json") == 0) {
			json = true;
		} else if (strcmp(argv[i], "--strict") == 0) {
			opts.strict = true;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		} else if (argv[i][0] != '-' && !bundle_path) {
			bundle_path = argv[i];
		} else {
			fprintf(stderr, "tkbox verify: unexpected argument %s\n",
				log_quote(argv[i], strlen(argv[i]), q));
			usage(stderr);
			return 2;
		}
	}
	if (!bundle_path || !trust_path) {
		usage(stderr);
		return 2;
	}
	r = io_read_file(AT_FDCWD, trust_path, TRUST_MAX_BYTES, IO_READ_REGULAR, &trust, &trust_n);
	if (r < 0) {
		fprintf(stderr, "tkbox verify: cannot read the trust file %s: %s\n",
			log_quote(trust_path, strlen(trust_path), q), tk_strerror(r));
		print_unusable(json, "trust config", "cannot read the trust file");
		return 2;
	}
	r = io_read_file(AT_FDCWD, bundle_path, BUNDLE_MAX_FILE, IO_READ_REGULAR, &bundle, &bundle_n);
	if (r < 0) {
		fprintf(stderr, "tkbox verify: cannot read the bundle %s: %s\n",
			log_quote(bundle_path, strlen(bundle_path), q), tk_strerror(r));
		print_unusable(json, "bundle readable", "cannot read the bundle");
		return 2;
	}
	r = verify_bundle(bundle, bundle_n, trust, trust_n, &opts, &rep);
	if (r < 0) {
		fprintf(stderr, "tkbox verify: %s\n", tk_strerror(r));
		return 2;
	}
	if (json) {
		json_t *o = NULL;
		char *s;

		r = verify_report_json(&rep, &o);
		s = r >= 0 ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
		json_decref(o);
		if (!s) {
			verify_report_release(&rep);
			fprintf(stderr, "tkbox verify: out of memory\n");
			return 2;
		}
		printf("%s\n", s);
		free(s);
	} else {
		struct buf out = { 0 };

		r = buf_init(&out, (size_t)1 << 20, 0);
		if (r >= 0) {
			r = verify_report_text(&rep, &out);
		}
		if (r < 0) {
			buf_release(&out);
			verify_report_release(&rep);
			fprintf(stderr, "tkbox verify: %s\n", tk_strerror(r));
			return 2;
		}
		fwrite(buf_ptr(&out), 1, buf_len(&out), stdout);
		buf_release(&out);
	}
	code = rep.exit_code;
	verify_report_release(&rep);
	if (fflush(stdout) != 0) {
		return 2;
	}
	return code;
}
