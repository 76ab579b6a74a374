/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The box's trust in its CA (src/guest/trust.c) run on the host against a
 * temporary root laid out as Debian, RHEL or Alpine images are, with the
 * symlinks, FIFOs and escapes a hostile image could plant; the PATH lookup;
 * and the self-test's done request against a loopback listener that checks
 * the exact bytes.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "banned.h"
#include "guest/trust.h"
#include "io.h"

static const char ca[] = "-----BEGIN CERTIFICATE-----\nQ0FDQUNB\n-----END CERTIFICATE-----\n";
static const char roots[] = "-----BEGIN CERTIFICATE-----\nUk9PVFM=\n-----END CERTIFICATE-----\n";

struct fx {
	char dir[64]; /* holds root/ and outside/ */
	char root[96];
	int rootfd;
};

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static int setup(void **state)
{
	struct fx *x = calloc(1, sizeof(*x));

	assert_non_null(x);
	(void)snprintf(x->dir, sizeof(x->dir), "/tmp/tkbox-trust-XXXXXX");
	assert_non_null(mkdtemp(x->dir));
	(void)snprintf(x->root, sizeof(x->root), "%s/root", x->dir);
	assert_int_equal(mkdir(x->root, 0755), 0);
	x->rootfd = open(x->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(x->rootfd >= 0);
	*state = x;
	return 0;
}

static int teardown(void **state)
{
	struct fx *x = *state;

	(void)close(x->rootfd);
	(void)nftw(x->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	free(x);
	return 0;
}

/* rel (beneath the root) := text, making its directories. */
static void put(struct fx *x, const char *rel, const char *text)
{
	char path[512];
	char *slash;

	(void)snprintf(path, sizeof(path), "%s/%s", x->root, rel);
	slash = strrchr(path, '/');
	*slash = '\0';
	assert_int_equal(io_mkdir_p(AT_FDCWD, path, 0755), 0);
	*slash = '/';
	assert_int_equal(io_write_file_atomic(path, text, strlen(text), 0644), 0);
}

static void mkdirs(struct fx *x, const char *rel)
{
	char path[512];

	(void)snprintf(path, sizeof(path), "%s/%s", x->root, rel);
	assert_int_equal(io_mkdir_p(AT_FDCWD, path, 0755), 0);
}

static void link_to(struct fx *x, const char *rel, const char *target)
{
	char path[512], dir[512];

	(void)snprintf(path, sizeof(path), "%s/%s", x->root, rel);
	(void)snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = '\0';
	assert_int_equal(io_mkdir_p(AT_FDCWD, dir, 0755), 0);
	assert_int_equal(symlink(target, path), 0);
}

/* The file's text ("<absent>" when missing), malloc'd. */
static char *get(struct fx *x, const char *rel)
{
	char *s = NULL;

	if (io_read_file(x->rootfd, rel, 1 << 20, IO_READ_NOFOLLOW, &s, NULL) < 0) {
		return strdup("<absent>");
	}
	return s;
}

static void assert_file(struct fx *x, const char *rel, const char *want)
{
	char *s = get(x, rel);

	assert_string_equal(s, want);
	free(s);
}

static char *cat2(const char *a, const char *b)
{
	char *s = NULL;

	assert_true(asprintf(&s, "%s%s", a, b) > 0);
	return s;
}

static void test_debian(void **state)
{
	struct fx *x = *state;
	struct guest_trust_report rep;
	char *both = cat2(roots, ca);

	put(x, "etc/ssl/certs/ca-certificates.crt", roots);
	mkdirs(x, "usr/local/share");
	assert_int_equal(guest_trust_install(x->rootfd, ca, &rep), 0);
	assert_string_equal(rep.base, "etc/ssl/certs/ca-certificates.crt");
	assert_int_equal(rep.appended, 1);
	assert_int_equal(rep.present, 0);
	assert_int_equal(rep.error, 0);
	assert_file(x, "etc/tkbox/ca.pem", ca);
	assert_file(x, "etc/tkbox/ca-bundle.crt", both);
	assert_file(x, "etc/ssl/certs/ca-certificates.crt", both);
	assert_file(x, "usr/local/share/ca-certificates/tkbox-box-ca.crt", ca);
	/* No RHEL tree: none made. */
	assert_file(x, "etc/pki/ca-trust/source/anchors/tkbox-box-ca.pem", "<absent>");

	/* A second boot of the same disk: nothing doubles. */
	assert_int_equal(guest_trust_install(x->rootfd, ca, &rep), 0);
	assert_int_equal(rep.appended, 0);
	assert_int_equal(rep.present, 1);
	assert_file(x, "etc/ssl/certs/ca-certificates.crt", both);
	assert_file(x, "etc/tkbox/ca-bundle.crt", both);
	free(both);
}

/* RHEL: ca-bundle.crt is a symlink (absolute) to the extracted bundle; Alpine-style cert.pem a relative one. */
static void test_rhel_symlinks(void **state)
{
	struct fx *x = *state;
	struct guest_trust_report rep;
	char *both = cat2(roots, ca);

	put(x, "etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", roots);
	link_to(x, "etc/pki/tls/certs/ca-bundle.crt", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem");
	link_to(x, "etc/ssl/cert.pem", "../pki/tls/certs/ca-bundle.crt");
	mkdirs(x, "etc/pki/ca-trust/source/anchors");
	assert_int_equal(guest_trust_install(x->rootfd, ca, &rep), 0);
	/* The base is read through the symlink, resolved inside the root. */
	assert_string_equal(rep.base, "etc/pki/tls/certs/ca-bundle.crt");
	assert_file(x, "etc/tkbox/ca-bundle.crt", both);
	/* The real file got the CA once; the two symlinks were left alone. */
	assert_int_equal(rep.appended, 1);
	assert_int_equal(rep.skipped, 2);
	assert_file(x, "etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", both);
	assert_file(x, "etc/pki/ca-trust/source/anchors/tkbox-box-ca.pem", ca);
	/* No usr/local/share: not made. */
	assert_file(x, "usr/local/share/ca-certificates/tkbox-box-ca.crt", "<absent>");
	free(both);
}

static void test_no_bundle(void **state)
{
	struct fx *x = *state;
	struct guest_trust_report rep;
	/* A PEM without its last newline gets one in every file. */
	char pem[sizeof(ca)];

	memcpy(pem, ca, sizeof(ca));
	pem[strlen(pem) - 1] = '\0';
	assert_int_equal(guest_trust_install(x->rootfd, pem, &rep), 0);
	assert_null(rep.base);
	assert_int_equal(rep.appended, 0);
	assert_file(x, "etc/tkbox/ca.pem", ca);
	assert_file(x, "etc/tkbox/ca-bundle.crt", ca);
}

/* A bundle without a final newline: the CA starts on a line of its own. */
static void test_no_final_newline(void **state)
{
	struct fx *x = *state;
	struct guest_trust_report rep;
	char cut[sizeof(roots)], *want;

	memcpy(cut, roots, sizeof(roots));
	cut[strlen(cut) - 1] = '\0';
	put(x, "etc/ssl/cert.pem", cut);
	assert_int_equal(guest_trust_install(x->rootfd, ca, &rep), 0);
	want = cat2(roots, ca);
	assert_file(x, "etc/ssl/cert.pem", want);
	assert_file(x, "etc/tkbox/ca-bundle.crt", want);
	free(want);
}

/* What a hostile image can plant: nothing outside the root is read or written, and nothing blocks. */
static void test_hostile_image(void **state)
{
	struct fx *x = *state;
	struct guest_trust_report rep;
	char outside[256], target[256], fifo[512];
	char *s = NULL;

	(void)snprintf(outside, sizeof(outside), "%s/outside", x->dir);
	assert_int_equal(mkdir(outside, 0755), 0);
	(void)snprintf(target, sizeof(target), "%s/secret.pem", outside);
	assert_int_equal(io_write_file_atomic(target, "OUTSIDE\n", 8, 0644), 0);
	/* The first base candidate: an absolute symlink to a host path, which means root/<that path> in the box. */
	link_to(x, "etc/ssl/certs/ca-certificates.crt", target);
	/* The second: a FIFO (opening it to read or append would wait for a writer or reader forever). */
	(void)snprintf(fifo, sizeof(fifo), "%s/etc/pki/tls/certs/ca-bundle.crt", x->root);
	mkdirs(x, "etc/pki/tls/certs");
	assert_int_equal(mkfifo(fifo, 0644), 0);
	/* The third, real. */
	put(x, "etc/ssl/cert.pem", roots);
	/* The install's own files, planted as symlinks to the outside. */
	mkdirs(x, "etc/tkbox");
	link_to(x, "etc/tkbox/ca.pem", target);
	link_to(x, "etc/tkbox/ca-bundle.crt", target);
	/* A directory on the way to a copy, a symlink out of the root. */
	mkdirs(x, "usr/local/share");
	link_to(x, "usr/local/share/ca-certificates", outside);

	assert_int_equal(guest_trust_install(x->rootfd, ca, &rep), 0);
	assert_string_equal(rep.base, "etc/ssl/cert.pem");
	assert_int_equal(rep.appended, 1);
	assert_int_equal(rep.skipped, 2); /* the symlink and the FIFO */
	assert_int_equal(rep.error, -ELOOP); /* the copy's directory */
	assert_string_equal(rep.error_path, "usr/local/share/ca-certificates");
	/* The outside file is as it was, and nothing new appeared beside it. */
	assert_int_equal(io_read_file(AT_FDCWD, target, 4096, 0, &s, NULL), 0);
	assert_string_equal(s, "OUTSIDE\n");
	free(s);
	(void)snprintf(fifo, sizeof(fifo), "%s/tkbox-box-ca.crt", outside);
	assert_int_equal(access(fifo, F_OK), -1);
	/* The planted symlinks were replaced by the files themselves. */
	assert_file(x, "etc/tkbox/ca.pem", ca);
	s = cat2(roots, ca);
	assert_file(x, "etc/tkbox/ca-bundle.crt", s);
	free(s);
}

/* etc/tkbox itself a symlink out of the root: refused, nothing written there. */
static void test_tkbox_dir_symlink(void **state)
{
	struct fx *x = *state;
	struct guest_trust_report rep;
	char outside[256], probe[300];

	(void)snprintf(outside, sizeof(outside), "%s/outside", x->dir);
	assert_int_equal(mkdir(outside, 0755), 0);
	link_to(x, "etc/tkbox", outside);
	assert_int_equal(guest_trust_install(x->rootfd, ca, &rep), -ELOOP);
	(void)snprintf(probe, sizeof(probe), "%s/ca.pem", outside);
	assert_int_equal(access(probe, F_OK), -1);
}

static void test_find_in_path(void **state)
{
	struct fx *x = *state;
	char a[256], b[256], envpath[600], got[512], want[300];
	char *env[] = { envpath, NULL };

	(void)snprintf(a, sizeof(a), "%s/a", x->dir);
	(void)snprintf(b, sizeof(b), "%s/b", x->dir);
	assert_int_equal(mkdir(a, 0755), 0);
	assert_int_equal(mkdir(b, 0755), 0);
	(void)snprintf(want, sizeof(want), "%s/tool", a);
	/* In a: not executable. In b: executable. A directory named git in a. */
	assert_int_equal(io_write_file_atomic(want, "x", 1, 0644), 0);
	(void)snprintf(want, sizeof(want), "%s/tool", b);
	assert_int_equal(io_write_file_atomic(want, "x", 1, 0755), 0);
	(void)snprintf(got, sizeof(got), "%s/git", a);
	assert_int_equal(mkdir(got, 0755), 0);
	/* A relative PATH entry is never used: "relative/tool" exists from the cwd, executable. */
	(void)snprintf(got, sizeof(got), "%s/relative", x->dir);
	assert_int_equal(mkdir(got, 0755), 0);
	(void)snprintf(got, sizeof(got), "%s/relative/tool", x->dir);
	assert_int_equal(io_write_file_atomic(got, "x", 1, 0755), 0);
	assert_int_equal(chdir(x->dir), 0);
	(void)snprintf(envpath, sizeof(envpath), "PATH=relative:%s::%s", a, b);
	assert_int_equal(guest_find_in_path(env, "tool", got, sizeof(got)), 0);
	assert_string_equal(got, want);
	assert_int_equal(guest_find_in_path(env, "git", got, sizeof(got)), -ENOENT);
	assert_int_equal(guest_find_in_path(env, "nothere", got, sizeof(got)), -ENOENT);
	assert_int_equal(guest_find_in_path(env, "../tool", got, sizeof(got)), -EINVAL);
	assert_int_equal(chdir("/"), 0);
}

/* A one-connection server in a child: answers 204 when the request is byte for byte want, 400 otherwise. */
static pid_t serve_once(int lfd, const char *want, bool answer)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		char req[1024];
		size_t got = 0;
		int c = accept(lfd, NULL, NULL);
		if (c < 0) {
			_exit(2);
		}
		while (got < sizeof(req) - 1 && !strstr(req, "\r\n\r\n")) {
			ssize_t n = read(c, req + got, sizeof(req) - 1 - got);
			if (n <= 0) {
				break;
			}
			got += (size_t)n;
			req[got] = '\0';
		}
		req[got] = '\0';
		if (answer) {
			const char *a = strcmp(req, want) == 0 ? "HTTP/1.1 204 No Content\r\n\r\n"
							       : "HTTP/1.1 400 Bad Request\r\n\r\n";
			(void)!write(c, a, strlen(a));
		}
		(void)close(c);
		_exit(0);
	}
	return pid;
}

static void test_done_request(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	char status[64];
	int lfd, st;
	pid_t pid;

	(void)state;
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);

	pid = serve_once(lfd,
			 "GET http://tkbox-selftest.invalid/done?ran=curl,python3,git&clock_ms=1764670000123 "
			 "HTTP/1.1\r\nHost: tkbox-selftest.invalid\r\n\r\n",
			 true);
	assert_int_equal(
		guest_selftest_done(ntohs(sa.sin_port), "curl,python3,git", 1764670000123LL, status, sizeof(status)),
		0);
	assert_string_equal(status, "HTTP/1.1 204 No Content");
	assert_int_equal(waitpid(pid, &st, 0), pid);

	/* Nothing ran (no CA): ran is empty, the request is still sent. */
	pid = serve_once(lfd,
			 "GET http://tkbox-selftest.invalid/done?ran=&clock_ms=5 HTTP/1.1\r\nHost: "
			 "tkbox-selftest.invalid\r\n\r\n",
			 true);
	assert_int_equal(guest_selftest_done(ntohs(sa.sin_port), "", 5, status, sizeof(status)), 0);
	assert_string_equal(status, "HTTP/1.1 204 No Content");
	assert_int_equal(waitpid(pid, &st, 0), pid);

	/* A forwarder that closes without an answer. */
	pid = serve_once(lfd, "", false);
	assert_int_equal(guest_selftest_done(ntohs(sa.sin_port), "curl", 5, status, sizeof(status)), -ECONNRESET);
	assert_int_equal(waitpid(pid, &st, 0), pid);

	/* ran is a list of names, never free text in a request line. */
	assert_int_equal(guest_selftest_done(ntohs(sa.sin_port), "curl HTTP/1.1\r\nX: y", 5, status, sizeof(status)),
			 -EINVAL);
	(void)close(lfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_debian, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rhel_symlinks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_bundle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_final_newline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_image, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tkbox_dir_symlink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_find_in_path, setup, teardown),
		cmocka_unit_test(test_done_request),
	};

	(void)signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
