/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_GUEST_TRUST_H
#define TKBOX_GUEST_TRUST_H

#include "macro.h"

/*
 * The box's trust in its CA (the boot config's ca_pem; docs/secrets.md): the
 * files where the box's TLS clients look, the JDK's keystore, and the
 * boot-time self-test that tells the host which clients trust it. The guest
 * is untrusted: all of this is convenience and evidence, never a control.
 * PID 1 calls these; none may crash or hang it on a hostile image: no
 * symlink is followed where a file is written, only regular files are read
 * or appended to, every read is capped, and every program runs in a child
 * with a time limit.
 */

#define GUEST_TRUST_CA "/etc/tkbox/ca.pem" /* the CA alone (NODE_EXTRA_CA_CERTS) */
#define GUEST_TRUST_BUNDLE "/etc/tkbox/ca-bundle.crt" /* the system roots + the CA (SSL_CERT_FILE and the others) */
#define GUEST_TRUST_LOCAL_CA "/usr/local/share/ca-certificates/tkbox-box-ca.crt" /* update-ca-certificates */
#define GUEST_TRUST_MAX_BUNDLE ((size_t)16 << 20) /* a system bundle read (a bigger one is left alone) */
#define GUEST_TRUST_JAVA_TIMEOUT_MS 60000 /* one keytool run */
#define GUEST_TRUST_JAVA_MAX_KEYSTORES 8
#define GUEST_TRUST_JAVA_MAX_ENTRIES 256 /* entries of /usr/lib/jvm looked at */

#define GUEST_SELFTEST_HOST "tkbox-selftest.invalid"
#define GUEST_SELFTEST_CLIENT_TIMEOUT_MS 20000 /* one client (curl, python3, git) */
#define GUEST_SELFTEST_DONE_TIMEOUT_MS 5000 /* the done ping's answer */
#define GUEST_SELFTEST_READY_WAIT_MS 30000 /* for the agent's first pong, then the self-test runs anyway */

struct guest_trust_report {
	const char *base; /* the system bundle GUEST_TRUST_BUNDLE starts from ("/etc/..."), NULL: none found */
	unsigned appended; /* system bundles the CA was appended to */
	unsigned present; /* system bundles that held the CA already (a second boot of the same disk) */
	unsigned skipped; /* system bundles left alone: a symlink (its target is in the list), too big, not a file */
	int error; /* the first error on a system bundle or the local copy (not fatal), 0: none */
	const char *error_path; /* where it happened */
};

/*
 * Install ca_pem (a PEM certificate, as the boot config's decoder checked it)
 * under rootfd ("/" in the box):
 *   etc/tkbox/ca.pem            the CA;
 *   etc/tkbox/ca-bundle.crt     the first existing of etc/ssl/certs/ca-certificates.crt,
 *                               etc/pki/tls/certs/ca-bundle.crt, etc/ssl/cert.pem (symlinks followed inside
 *                               the root), then the CA (the CA alone when none exists);
 *   the system bundles          etc/ssl/certs/ca-certificates.crt, etc/pki/tls/certs/ca-bundle.crt,
 *                               etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem, etc/ssl/cert.pem: the CA
 *                               appended to each that is a regular file (not a symlink: a file is appended
 *                               once) and does not hold it yet;
 *   usr/local/share/ca-certificates/tkbox-box-ca.crt  (when usr/local/share exists) so that
 *                               update-ca-certificates keeps it; the same as
 *                               etc/pki/ca-trust/source/anchors/tkbox-box-ca.pem when that directory exists
 *                               (update-ca-trust).
 * The two etc/tkbox files are written new and renamed into place, never
 * through a symlink. Returns 0 when both are written (*ret says what
 * happened to the rest), -errno when they are not.
 */
_wur_ int guest_trust_install(int rootfd, const char *ca_pem, struct guest_trust_report *ret);

/*
 * The JDK's truststore: when a regular file /usr/lib/jvm/<any>/lib/security/cacerts
 * exists and keytool is on env's PATH, fork a process that imports
 * GUEST_TRUST_CA into each (alias tkbox-box-ca, storepass changeit), each run
 * limited to GUEST_TRUST_JAVA_TIMEOUT_MS, results on the console. Returns
 * its pid (PID 1 reaps it), 0 when there is nothing to do, -errno.
 */
_wur_ int guest_trust_java_start(char *const *env);

/*
 * The self-test (spec step 11), in a forked process so that it never delays
 * PID 1. It waits until *ret_ready_fd (a pipe's write end, O_CLOEXEC, for the
 * agent to close once it answered its first ping) is closed, at most
 * GUEST_SELFTEST_READY_WAIT_MS; then, with_ca only, runs each of curl,
 * python3 and git found on env's PATH against https://tkbox-selftest.invalid/
 * with env, GUEST_SELFTEST_CLIENT_TIMEOUT_MS each; then always sends the done
 * request (guest_selftest_done) to the forwarder. Everything it learns goes
 * to the console. Returns the pid (PID 1 reaps it) or -errno.
 */
_wur_ int guest_selftest_start(bool with_ca, char *const *env, int *ret_ready_fd);

/*
 * The done request on 127.0.0.1:port: "GET http://tkbox-selftest.invalid/done?ran=<ran>&clock_ms=<clock_ms>
 * HTTP/1.1" with its Host, then the answer's status line (at most
 * GUEST_SELFTEST_DONE_TIMEOUT_MS) into status (cut to size), then close.
 * ran: a comma list of [a-z0-9] names (-EINVAL otherwise).
 */
_wur_ int guest_selftest_done(uint16_t port, const char *ran, int64_t clock_ms, char *status, size_t size);

/*
 * The program name on the PATH of env (the default PATH when env has none):
 * the first directory holding an executable regular file name, as a path in
 * ret (size bytes). -ENOENT when there is none.
 */
_wur_ int guest_find_in_path(char *const *env, const char *name, char *ret, size_t size);

#endif
