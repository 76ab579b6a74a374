/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "banned.h"
#include "cli/commands.h"
#include "cli/cliutil.h"
#include "daemon/daemon.h"
#include "daemon/egress-door.h"
#include "daemon/obsq.h"
#include "daemon/supervisor.h"
#include "log.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: tkbox daemon [--state-dir D] [--signer SOCK] [--accel auto|kvm|tcg] [--unrecorded]\n"
		   "                    [--max-boxes N] [--max-execs N] [--signer-timeout 10s] [--guest FILE]\n"
		   "                    [--kernel FILE --modules DIR]\n"
		   "                    [--egress-block CIDR[,CIDR]]... [--egress-allow-private] [--resolve "
		   "NAME=ADDR]...\n"
		   "                    [--egress-ca FILE] [--observe-queue N]\n"
		   "Runs in the foreground until SIGTERM or Ctrl-C, which stop every box and close every run.\n"
		   "Exits at once when no signer answers, unless --unrecorded (which records nothing).\n");
}

/*
 * --egress-ca FILE: extra trust anchors for the origins the proxy verifies
 * when it terminates TLS. Checked at start: a readable PEM file holding at
 * least one certificate (and nothing that fails to parse as one). Its
 * absolute path goes to each box's supervisor, which loads it before it
 * confines itself. 0 with *ret the path (malloc'd), or 2 (an exit status)
 * after saying why.
 */
static int egress_ca_check(const char *file, char **ret)
{
	char *path = realpath(file, NULL);
	FILE *f = path ? fopen(path, "re") : NULL;
	unsigned n = 0;
	X509 *x;

	if (!f) {
		fprintf(stderr, "tkbox daemon: --egress-ca %s: %s (give a readable PEM file of CA certificates)\n",
			file, strerror(errno));
		free(path);
		return 2;
	}
	while ((x = PEM_read_X509(f, NULL, NULL, NULL))) {
		X509_free(x);
		n++;
	}
	/* The loop ends at the end of the file (no start line) or at a block that does not parse. */
	if (ERR_GET_REASON(ERR_peek_last_error()) != PEM_R_NO_START_LINE || n == 0) {
		fprintf(stderr,
			"tkbox daemon: --egress-ca %s: %s (give a PEM file of CA certificates, each a "
			"-----BEGIN CERTIFICATE----- block)\n",
			file, n == 0 ? "holds no certificate" : "a certificate in it does not parse");
		ERR_clear_error();
		(void)fclose(f);
		free(path);
		return 2;
	}
	ERR_clear_error();
	(void)fclose(f);
	*ret = path;
	return 0;
}

int cmd_daemon(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "state-dir", required_argument, NULL, 'd' },
		{ "signer", required_argument, NULL, 's' },
		{ "accel", required_argument, NULL, 'a' },
		{ "unrecorded", no_argument, NULL, 'U' },
		{ "max-boxes", required_argument, NULL, 'b' },
		{ "max-execs", required_argument, NULL, 'x' },
		{ "signer-timeout", required_argument, NULL, 'T' },
		{ "guest", required_argument, NULL, 'g' },
		{ "kernel", required_argument, NULL, 'k' },
		{ "modules", required_argument, NULL, 'm' },
		{ "egress-block", required_argument, NULL, 'B' },
		{ "egress-allow-private", no_argument, NULL, 'P' },
		{ "resolve", required_argument, NULL, 'R' },
		{ "egress-ca", required_argument, NULL, 'C' },
		{ "observe-queue", required_argument, NULL, 'Q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static struct egress_door_config egress; /* large: not on the stack */
	struct daemon_opts o = { .accel = "auto", .egress = &egress };
	_cleanup_free_ char *egress_ca = NULL;
	const char *egress_ca_arg = NULL;
	char err[512];
	uint64_t v;
	int ch, r;

	/* The per-box supervisor is this binary too (forked and exec'd by the daemon). */
	if (argc >= 2 && argc <= 3 && strcmp(argv[1], SUPERVISOR_ARG) == 0) {
		return supervisor_main(SUPERVISOR_FD);
	}
	log_set_ident("tkbox-daemon");
	o.state_dir = daemon_default_state_dir();
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'd':
			o.state_dir = optarg;
			break;
		case 's':
			o.signer_socket = optarg;
			break;
		case 'a':
			if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "kvm") != 0 && strcmp(optarg, "tcg") != 0) {
				fprintf(stderr, "tkbox daemon: --accel is auto, kvm or tcg\n");
				return 2;
			}
			o.accel = optarg;
			break;
		case 'U':
			o.unrecorded = true;
			break;
		case 'b':
		case 'x':
			if (cli_parse_uint(optarg, 1, ch == 'b' ? DAEMON_MAX_MAX_BOXES : DAEMON_DEFAULT_MAX_EXECS, &v) <
			    0) {
				fprintf(stderr, "tkbox daemon: --%s is 1..%d\n", ch == 'b' ? "max-boxes" : "max-execs",
					ch == 'b' ? DAEMON_MAX_MAX_BOXES : DAEMON_DEFAULT_MAX_EXECS);
				return 2;
			}
			if (ch == 'b') {
				o.max_boxes = (unsigned)v;
			} else {
				o.max_execs = (unsigned)v;
			}
			break;
		case 'T':
			if (cli_parse_duration(optarg, 1, DAEMON_MAX_SIGNER_TIMEOUT_S, &v) < 0) {
				fprintf(stderr,
					"tkbox daemon: --signer-timeout takes a duration of 1s..%dm (default %ds)\n",
					DAEMON_MAX_SIGNER_TIMEOUT_S / 60, DAEMON_DEFAULT_SIGNER_TIMEOUT_S);
				return 2;
			}
			o.signer_timeout_s = (unsigned)v;
			break;
		case 'g':
			o.guest_bin = optarg;
			break;
		case 'k':
			o.kernel = optarg;
			break;
		case 'm':
			o.modules_dir = optarg;
			break;
		case 'B':
			r = egress_block_parse(optarg, &egress.block);
			if (r < 0) {
				fprintf(stderr,
					"tkbox daemon: --egress-block %s: %s (CIDRs or bare addresses, "
					"comma-separated: "
					"203.0.113.7, 198.51.100.0/24, 2001:db8::/32; IPv4 as plain dotted quads; no "
					"host "
					"bits set; at most %d entries)\n",
					optarg,
					r == -E2BIG    ? "too many entries"
					: r == -EINVAL ? "a prefix is out of range or has host bits set"
						       : "not an address or CIDR",
					EGRESS_MAX_BLOCK);
				return 2;
			}
			break;
		case 'P':
			egress.flags |= EGRESS_ALLOW_PRIVATE;
			break;
		case 'R':
			if (egress_resolve_parse(optarg, &egress, err, sizeof(err)) < 0) {
				fprintf(stderr, "tkbox daemon: %s\n", err);
				return 2;
			}
			break;
		case 'C':
			egress_ca_arg = optarg;
			break;
		case 'Q':
			/* For tests (a full queue is reachable) and small hosts; each entry is one pending record. */
			if (cli_parse_uint(optarg, 1, OBSQ_MAX, &v) < 0) {
				fprintf(stderr,
					"tkbox daemon: --observe-queue is 1..%d (default %d), the must-keep records a "
					"box "
					"may have waiting for the signer\n",
					OBSQ_MAX, OBSQ_MAX);
				return 2;
			}
			o.observe_queue = (unsigned)v;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || (!o.kernel != !o.modules_dir)) {
		usage(stderr);
		return 2;
	}
	if (o.state_dir[0] != '/') {
		fprintf(stderr, "tkbox daemon: --state-dir must be an absolute path\n");
		return 2;
	}
	if (egress_ca_arg && egress_ca_check(egress_ca_arg, &egress_ca) != 0) {
		return 2;
	}
	o.egress_ca = egress_ca;
	if (egress.flags & EGRESS_ALLOW_PRIVATE) {
		fprintf(stderr, "tkbox daemon: WARNING: --egress-allow-private: BOXES MAY CONNECT TO LOOPBACK, "
				"PRIVATE, SHARED AND "
				"LINK-LOCAL ADDRESSES, THIS HOST'S OWN INCLUDED.\n"
				"tkbox daemon: WARNING: for development only; cloud metadata, --egress-block and the "
				"other fixed "
				"ranges stay refused.\n");
	}
	return daemon_run(&o);
}
