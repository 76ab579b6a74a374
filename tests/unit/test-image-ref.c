/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banned.h"
#include "image/ref.h"

#define D64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void expect_ref(const char *in, const char *registry, const char *repo, const char *tag, const char *digest,
		       const char *canonical)
{
	struct image_ref r;
	char *c = NULL;
	assert_int_equal(image_ref_parse(in, &r), 0);
	assert_int_equal(r.kind, IMAGE_REF_REGISTRY);
	assert_string_equal(r.registry, registry);
	assert_string_equal(r.repository, repo);
	if (tag) {
		assert_non_null(r.tag);
		assert_string_equal(r.tag, tag);
	} else {
		assert_null(r.tag);
	}
	if (digest) {
		assert_non_null(r.digest);
		assert_string_equal(r.digest, digest);
	} else {
		assert_null(r.digest);
	}
	assert_int_equal(image_ref_canonical(&r, &c), 0);
	assert_string_equal(c, canonical);
	free(c);
	image_ref_release(&r);
}

static void test_docker_names(void **state)
{
	(void)state;
	expect_ref("python:3.12-slim", "docker.io", "library/python", "3.12-slim", NULL,
		   "docker.io/library/python:3.12-slim");
	expect_ref("busybox", "docker.io", "library/busybox", "latest", NULL, "docker.io/library/busybox:latest");
	expect_ref("owner/app:v1", "docker.io", "owner/app", "v1", NULL, "docker.io/owner/app:v1");
	expect_ref("ghcr.io/owner/name:tag", "ghcr.io", "owner/name", "tag", NULL, "ghcr.io/owner/name:tag");
	expect_ref("localhost:5000/test:1", "localhost:5000", "test", "1", NULL, "localhost:5000/test:1");
	expect_ref("localhost/x", "localhost", "x", "latest", NULL, "localhost/x:latest");
	expect_ref("index.docker.io/library/alpine", "docker.io", "library/alpine", "latest", NULL,
		   "docker.io/library/alpine:latest");
	expect_ref("name@sha256:" D64, "docker.io", "library/name", NULL, "sha256:" D64,
		   "docker.io/library/name@sha256:" D64);
	expect_ref("127.0.0.1:5000/a/b/c:t@sha256:" D64, "127.0.0.1:5000", "a/b/c", "t", "sha256:" D64,
		   "127.0.0.1:5000/a/b/c:t@sha256:" D64);
	expect_ref("a__b/c-d.e_f:T_.-", "docker.io", "a__b/c-d.e_f", "T_.-", NULL, "docker.io/a__b/c-d.e_f:T_.-");
}

static void test_api_host(void **state)
{
	struct image_ref r;
	(void)state;
	assert_int_equal(image_ref_parse("python", &r), 0);
	assert_string_equal(image_ref_api_host(&r), "registry-1.docker.io");
	image_ref_release(&r);
	assert_int_equal(image_ref_parse("localhost:5000/x", &r), 0);
	assert_string_equal(image_ref_api_host(&r), "localhost:5000");
	image_ref_release(&r);
}

static void test_invalid(void **state)
{
	static const char *const bad[] = {
		"",
		"UPPER",
		"a:",
		":tag",
		"a@sha256:123",
		"a@sha512:" D64,
		"a@sha256:" D64 "0",
		"a@sha256:"
		"0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
		"a//b",
		"a/",
		"/a",
		"-a",
		"a-",
		"a..b",
		"a___b",
		"a:t@",
		"host:99999/x",
		"host:0/x",
		"ho_st.io/x",
		"a b",
		"a:-tag",
		"a\nb",
		"localhost:/x",
		".io/x",
	};
	struct image_ref r;
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		int rc = image_ref_parse(bad[i], &r);
		if (rc == 0) {
			fail_msg("accepted %s", bad[i]);
		}
	}
	assert_int_equal(image_ref_parse(NULL, &r), -EINVAL);
}

static void test_caps(void **state)
{
	char s[IMAGE_REF_MAX_LEN + 2];
	char tag[IMAGE_REF_MAX_TAG + 8];
	struct image_ref r;
	(void)state;
	/* a name of exactly IMAGE_REF_MAX_NAME passes, one more is refused */
	memset(s, 'a', sizeof(s));
	memcpy(s, "x.io/", 5);
	s[IMAGE_REF_MAX_NAME] = '\0';
	assert_int_equal(image_ref_parse(s, &r), 0);
	image_ref_release(&r);
	s[IMAGE_REF_MAX_NAME] = 'a';
	s[IMAGE_REF_MAX_NAME + 1] = '\0';
	assert_int_equal(image_ref_parse(s, &r), -ENAMETOOLONG);
	/* the whole string */
	memset(s, 'a', sizeof(s));
	s[IMAGE_REF_MAX_LEN + 1] = '\0';
	assert_int_equal(image_ref_parse(s, &r), -ENAMETOOLONG);
	/* a tag of IMAGE_REF_MAX_TAG passes, one more does not */
	memcpy(tag, "a:", 2);
	memset(tag + 2, 't', IMAGE_REF_MAX_TAG);
	tag[2 + IMAGE_REF_MAX_TAG] = '\0';
	assert_int_equal(image_ref_parse(tag, &r), 0);
	image_ref_release(&r);
	tag[2 + IMAGE_REF_MAX_TAG] = 't';
	tag[3 + IMAGE_REF_MAX_TAG] = '\0';
	assert_int_equal(image_ref_parse(tag, &r), -EINVAL);
}

static void test_local(void **state)
{
	struct image_ref r;
	char *c = NULL;
	(void)state;
	assert_int_equal(image_ref_parse("oci:/srv/layout", &r), 0);
	assert_int_equal(r.kind, IMAGE_REF_OCI_DIR);
	assert_string_equal(r.path, "/srv/layout");
	assert_null(r.name);
	image_ref_release(&r);
	assert_int_equal(image_ref_parse("oci:/srv/layout:v1", &r), 0);
	assert_string_equal(r.path, "/srv/layout");
	assert_string_equal(r.name, "v1");
	assert_int_equal(image_ref_canonical(&r, &c), 0);
	assert_string_equal(c, "oci:/srv/layout:v1");
	free(c);
	image_ref_release(&r);
	assert_int_equal(image_ref_parse("oci-archive:img.tar:name", &r), 0);
	assert_int_equal(r.kind, IMAGE_REF_OCI_ARCHIVE);
	assert_string_equal(r.path, "img.tar");
	image_ref_release(&r);
	/* docker-archive never splits a name off */
	assert_int_equal(image_ref_parse("docker-archive:/a/b:c.tar", &r), 0);
	assert_int_equal(r.kind, IMAGE_REF_DOCKER_ARCHIVE);
	assert_string_equal(r.path, "/a/b:c.tar");
	assert_null(r.name);
	image_ref_release(&r);
	assert_int_equal(image_ref_parse("oci:", &r), -EINVAL);
	assert_int_equal(image_ref_parse("docker-archive:", &r), -EINVAL);
}

static void test_digest_valid(void **state)
{
	(void)state;
	assert_true(image_digest_valid("sha256:" D64));
	assert_false(image_digest_valid("sha256:" D64 "0"));
	assert_false(image_digest_valid("sha256:"));
	assert_false(image_digest_valid("sha384:" D64));
	assert_false(image_digest_valid(NULL));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_docker_names), cmocka_unit_test(test_api_host),
		cmocka_unit_test(test_invalid),	     cmocka_unit_test(test_caps),
		cmocka_unit_test(test_local),	     cmocka_unit_test(test_digest_valid),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
