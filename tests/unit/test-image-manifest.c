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
#include "buf.h"
#include "image/manifest.h"
#include "image/registry.h"

#define D64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define DESC(mt) "{\"mediaType\":\"" mt "\",\"digest\":\"sha256:" D64 "\",\"size\":10}"
#define LAYER_GZ "application/vnd.oci.image.layer.v1.tar+gzip"

static int parse(const char *s, const char *ct, struct image_manifest *m)
{
	return image_manifest_parse(s, strlen(s), ct, m, NULL);
}

static void test_oci_manifest(void **state)
{
	struct image_manifest m;
	(void)state;
	assert_int_equal(parse("{\"schemaVersion\":2,\"mediaType\":\"" MT_OCI_MANIFEST
			       "\",\"config\":" DESC("application/vnd.oci.image.config.v1+json") ",\"layers\":[" DESC(
				       LAYER_GZ) "," DESC("application/vnd.oci.image.layer.v1.tar+zstd") "]}",
			       NULL, &m),
			 0);
	assert_int_equal(m.kind, IMAGE_MANIFEST_IMAGE);
	assert_int_equal(m.n_layers, 2);
	assert_string_equal(m.config.digest, "sha256:" D64);
	assert_int_equal(m.layers[1].size, 10);
	image_manifest_release(&m);
	/* docker v2, with the type only in Content-Type */
	assert_int_equal(parse("{\"schemaVersion\":2,\"config\":" DESC("x") ",\"layers\":[" DESC(
				       "application/vnd.docker.image.rootfs.diff.tar.gzip") "]}",
			       MT_DOCKER_MANIFEST, &m),
			 0);
	assert_int_equal(m.kind, IMAGE_MANIFEST_IMAGE);
	image_manifest_release(&m);
}

static void test_index(void **state)
{
	struct image_manifest m;
	size_t i;
	(void)state;
	assert_int_equal(parse("{\"schemaVersion\":2,\"mediaType\":\"" MT_DOCKER_LIST "\",\"manifests\":["
			       "{\"mediaType\":\"" MT_DOCKER_MANIFEST "\",\"digest\":\"sha256:" D64 "\",\"size\":1,"
			       "\"platform\":{\"os\":\"linux\",\"architecture\":\"arm\",\"variant\":\"v7\"}},"
			       "{\"mediaType\":\"" MT_DOCKER_MANIFEST "\",\"digest\":\"sha256:" D64 "\",\"size\":2,"
			       "\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\",\"variant\":\"v8\"}},"
			       "{\"mediaType\":\"" MT_DOCKER_MANIFEST "\",\"digest\":\"sha256:" D64 "\",\"size\":3,"
			       "\"platform\":{\"os\":\"unknown\",\"architecture\":\"unknown\"}},"
			       "{\"mediaType\":\"" MT_DOCKER_MANIFEST "\",\"digest\":\"sha256:" D64 "\",\"size\":4,"
			       "\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}]}",
			       NULL, &m),
			 0);
	assert_int_equal(m.kind, IMAGE_MANIFEST_INDEX);
	assert_int_equal(m.n_manifests, 4);
	assert_int_equal(image_index_select(&m, "linux", "amd64", NULL, &i), 0);
	assert_int_equal(i, 3);
	assert_int_equal(image_index_select(&m, "linux", "arm64", NULL, &i), 0);
	assert_int_equal(i, 1);
	assert_int_equal(image_index_select(&m, "linux", "riscv64", NULL, &i), -ENOENT);
	image_manifest_release(&m);
	/* no mediaType anywhere: told by the members */
	assert_int_equal(parse("{\"schemaVersion\":2,\"manifests\":[]}", NULL, &m), 0);
	assert_int_equal(m.kind, IMAGE_MANIFEST_INDEX);
	image_manifest_release(&m);
}

static void test_refused(void **state)
{
	struct image_manifest m;
	(void)state;
	/* schema 1 */
	assert_int_equal(parse("{\"schemaVersion\":1,\"fsLayers\":[]}", NULL, &m), -EPROTONOSUPPORT);
	/* foreign (Windows) layer */
	assert_int_equal(parse("{\"schemaVersion\":2,\"config\":" DESC("x") ",\"layers\":[" DESC(
				       "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip") "]}",
			       MT_DOCKER_MANIFEST, &m),
			 -EPROTONOSUPPORT);
	/* unknown document type */
	assert_int_equal(parse("{\"schemaVersion\":2,\"mediaType\":\"text/html\",\"layers\":[]}", NULL, &m),
			 -EPROTONOSUPPORT);
	/* both members and no type */
	assert_int_equal(parse("{\"schemaVersion\":2,\"manifests\":[],\"layers\":[]}", NULL, &m), -EBADMSG);
	/* digest forms */
	assert_int_equal(
		parse("{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"sha256:abc\",\"size\":1}]}", NULL, &m),
		-EBADMSG);
	assert_int_equal(
		parse("{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"sha512:" D64 D64 "\",\"size\":1}]}", NULL, &m),
		-EBADMSG);
	/* negative and over-cap sizes */
	assert_int_equal(
		parse("{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"sha256:" D64 "\",\"size\":-1}]}", NULL, &m),
		-EBADMSG);
	assert_int_equal(parse("{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"sha256:" D64
			       "\",\"size\":17179869185}]}",
			       NULL, &m),
			 -E2BIG);
	/* duplicate keys and trailing garbage (the strict reader) */
	assert_int_equal(parse("{\"schemaVersion\":2,\"schemaVersion\":2,\"manifests\":[]}", NULL, &m), -EBADMSG);
	assert_int_equal(parse("{\"schemaVersion\":2,\"manifests\":[]} x", NULL, &m), -EBADMSG);
	assert_int_equal(parse("[]", NULL, &m), -EBADMSG);
	assert_int_equal(parse("{\"schemaVersion\":2,\"config\":" DESC("x") "}", MT_OCI_MANIFEST, &m), -EBADMSG);
}

static char *repeat_desc(const char *head, size_t n, const char *tail, const char *mt)
{
	struct buf *b = NULL;
	char *s = NULL;
	assert_int_equal(buf_new((size_t)8 << 20, 0, &b), 0);
	assert_int_equal(buf_putf(b, "%s", head), 0);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(buf_putf(b, "%s{\"mediaType\":\"%s\",\"digest\":\"sha256:%s\",\"size\":1}",
					  i ? "," : "", mt, D64),
				 0);
	}
	assert_int_equal(buf_putf(b, "%s", tail), 0);
	assert_int_equal(buf_dup_cstring(b, &s), 0);
	buf_free(b);
	return s;
}

static void test_caps(void **state)
{
	struct image_manifest m;
	char *s;
	(void)state;
	s = repeat_desc("{\"schemaVersion\":2,\"config\":" DESC("x") ",\"layers\":[", IMAGE_MAX_LAYERS, "]}", LAYER_GZ);
	assert_int_equal(parse(s, MT_OCI_MANIFEST, &m), 0);
	image_manifest_release(&m);
	free(s);
	s = repeat_desc("{\"schemaVersion\":2,\"config\":" DESC("x") ",\"layers\":[", IMAGE_MAX_LAYERS + 1, "]}",
			LAYER_GZ);
	assert_int_equal(parse(s, MT_OCI_MANIFEST, &m), -E2BIG);
	free(s);
	s = repeat_desc("{\"schemaVersion\":2,\"manifests\":[", IMAGE_MAX_INDEX_ENTRIES, "]}", MT_OCI_MANIFEST);
	assert_int_equal(parse(s, NULL, &m), 0);
	image_manifest_release(&m);
	free(s);
	s = repeat_desc("{\"schemaVersion\":2,\"manifests\":[", IMAGE_MAX_INDEX_ENTRIES + 1, "]}", MT_OCI_MANIFEST);
	assert_int_equal(parse(s, NULL, &m), -E2BIG);
	free(s);
	/* document size: one byte past IMAGE_MAX_MANIFEST_BYTES */
	s = malloc(IMAGE_MAX_MANIFEST_BYTES + 2);
	assert_non_null(s);
	memset(s, ' ', IMAGE_MAX_MANIFEST_BYTES + 1);
	memcpy(s, "{\"schemaVersion\":2,\"manifests\":[]}", 34);
	s[IMAGE_MAX_MANIFEST_BYTES + 1] = '\0';
	assert_int_equal(image_manifest_parse(s, IMAGE_MAX_MANIFEST_BYTES + 1, NULL, &m, NULL), -E2BIG);
	assert_int_equal(image_manifest_parse(s, IMAGE_MAX_MANIFEST_BYTES, NULL, &m, NULL), 0);
	image_manifest_release(&m);
	free(s);
}

static void test_config(void **state)
{
	struct image_config c;
	const char *ok =
		"{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":[\"PATH=/usr/bin\",\"A=b=c\"],"
		"\"WorkingDir\":\"/app\",\"User\":\"1000:1000\",\"Cmd\":[\"sh\"]},"
		"\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:" D64 "\"]},\"history\":[]}";
	(void)state;
	assert_int_equal(image_config_parse(ok, strlen(ok), &c, NULL), 0);
	assert_int_equal(c.n_env, 2);
	assert_string_equal(c.env[1], "A=b=c");
	assert_string_equal(c.working_dir, "/app");
	assert_string_equal(c.user, "1000:1000");
	assert_string_equal(c.arch, "amd64");
	assert_int_equal(c.n_diff_ids, 1);
	image_config_release(&c);
	/* empty strings and nulls mean unset */
	ok = "{\"config\":{\"Env\":null,\"WorkingDir\":\"\",\"User\":\"\"}}";
	assert_int_equal(image_config_parse(ok, strlen(ok), &c, NULL), 0);
	assert_null(c.working_dir);
	assert_null(c.user);
	assert_int_equal(c.n_env, 0);
	image_config_release(&c);
	ok = "{\"config\":null}";
	assert_int_equal(image_config_parse(ok, strlen(ok), &c, NULL), 0);
	image_config_release(&c);
	/* refused: an Env entry without '=', with an empty name, a relative WorkingDir, a non-string */
	assert_int_equal(image_config_parse("{\"config\":{\"Env\":[\"NOEQ\"]}}", 26, &c, NULL), -EBADMSG);
	assert_int_equal(image_config_parse("{\"config\":{\"Env\":[\"=x\"]}}", 24, &c, NULL), -EBADMSG);
	assert_int_equal(image_config_parse("{\"config\":{\"WorkingDir\":\"app\"}}", 31, &c, NULL), -EBADMSG);
	assert_int_equal(image_config_parse("{\"config\":{\"Env\":[1]}}", 21, &c, NULL), -EBADMSG);
}

/* Refused with a reason that names the field. */
static void expect_config_refused(const char *json, int want, const char *words)
{
	struct image_config c;
	struct image_diag d = { .msg = "" };
	assert_int_equal(image_config_parse(json, strlen(json), &c, &d), want);
	if (!strstr(d.msg, words)) {
		fail_msg("diag \"%s\" lacks \"%s\"", d.msg, words);
	}
}

static void test_config_fields(void **state)
{
	struct image_config c;
	const char *ok = "{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:" D64 "\",\"sha256:" D64 "\"]}}";
	(void)state;
	assert_int_equal(image_config_parse(ok, strlen(ok), &c, NULL), 0);
	assert_int_equal(c.n_diff_ids, 2);
	assert_string_equal(c.diff_ids[1], "sha256:" D64);
	image_config_release(&c);
	/* a newline in WorkingDir would forge a line of the image child's answer ("from_cache yes") */
	expect_config_refused("{\"config\":{\"WorkingDir\":\"/tmp\\nfrom_cache yes\"}}", -EBADMSG,
			      "WorkingDir \"/tmp\\x0afrom_cache yes\" holds a control character");
	expect_config_refused("{\"config\":{\"User\":\"root\\r\"}}", -EBADMSG, "User");
	expect_config_refused("{\"config\":{\"User\":\"a\\u007fb\"}}", -EBADMSG, "User");
	expect_config_refused("{\"config\":{\"Env\":[\"A=1\",\"B=x\\ny\"]}}", -EBADMSG, "Env[1]");
	/* a NUL never reaches the field checks: the strict JSON reader refuses it */
	expect_config_refused("{\"config\":{\"Env\":[\"A=\\u0000\"]}}", -EBADMSG, "image config");
	expect_config_refused("{\"config\":{\"WorkingDir\":\"../..\"}}", -EBADMSG,
			      "WorkingDir \"../..\" is not an absolute path");
	expect_config_refused("{\"config\":{\"WorkingDir\":\"/app/../..\"}}", -EBADMSG, "WorkingDir");
	expect_config_refused("{\"config\":{\"WorkingDir\":7}}", -EBADMSG, "WorkingDir is not a string");
	expect_config_refused("{\"config\":{\"Env\":[\"NOEQ\"]}}", -EBADMSG, "Env[0] \"NOEQ\" is not NAME=value");
	expect_config_refused("{\"config\":{\"Env\":\"A=1\"}}", -EBADMSG, "Env is not a list");
	expect_config_refused("{\"rootfs\":{\"diff_ids\":[\"sha256:x\"]}}", -EBADMSG, "rootfs.diff_ids[0]");
	expect_config_refused("{\"rootfs\":{\"diff_ids\":{}}}", -EBADMSG, "rootfs.diff_ids");
	expect_config_refused("not json", -EBADMSG, "image config");
}

/* Refused manifests name the member that is wrong. */
static void test_manifest_fields(void **state)
{
	struct image_manifest m;
	struct image_diag d = { .msg = "" };
	const char *s;
	(void)state;
	s = "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"digest\":"
	    "\"sha256:" D64 "\",\"size\":2},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\","
	    "\"digest\":\"sha256:" D64 "\",\"size\":18253611008}]}";
	assert_int_equal(image_manifest_parse(s, strlen(s), NULL, &m, &d), -E2BIG);
	assert_non_null(strstr(d.msg, "layers[0].size 18253611008 is above"));
	assert_non_null(strstr(d.msg, "IMAGE_MAX_BLOB_SIZE"));
	s = "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"digest\":"
	    "\"sha256:" D64 "\",\"size\":2},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\","
	    "\"digest\":\"sha256:" D64 "\",\"size\":1},{\"mediaType\":\"x/foreign\",\"digest\":\"sha256:" D64 "\","
	    "\"size\":1}]}";
	assert_int_equal(image_manifest_parse(s, strlen(s), NULL, &m, &d), -EPROTONOSUPPORT);
	assert_non_null(strstr(d.msg, "layers[1].mediaType \"x/foreign\""));
	s = "{\"schemaVersion\":1}";
	assert_int_equal(image_manifest_parse(s, strlen(s), NULL, &m, &d), -EPROTONOSUPPORT);
	assert_non_null(strstr(d.msg, "schemaVersion 1"));
	s = "{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"md5:1\",\"size\":1}]}";
	assert_int_equal(image_manifest_parse(s, strlen(s), NULL, &m, &d), -EBADMSG);
	assert_non_null(strstr(d.msg, "manifests[0].digest"));
}

/* tkbox run --env adds at most 256 (DOOR_MAX_ENV) and the daemon a few defaults */
#define DOOR_MAX_ENV_ROOM 300

static void test_config_env_cap(void **state)
{
	struct buf *b = NULL;
	struct image_config c;
	(void)state;
	for (int extra = 0; extra < 2; extra++) {
		assert_int_equal(buf_new((size_t)8 << 20, 0, &b), 0);
		assert_int_equal(buf_putf(b, "{\"config\":{\"Env\":["), 0);
		for (int i = 0; i < IMAGE_MAX_ENV + extra; i++) {
			assert_int_equal(buf_putf(b, "%s\"V%d=1\"", i ? "," : "", i), 0);
		}
		assert_int_equal(buf_putf(b, "]}}"), 0);
		{
			struct image_diag d = { .msg = "" };
			assert_int_equal(image_config_parse(buf_ptr(b), buf_len(b), &c, &d), extra ? -E2BIG : 0);
			/* one limit with the boot config: an image that pulls can boot */
			assert_true(IMAGE_MAX_ENV + DOOR_MAX_ENV_ROOM <= BOOT_MAX_ENV);
			if (extra) {
				assert_non_null(strstr(d.msg, "IMAGE_MAX_ENV"));
			}
		}
		if (!extra) {
			image_config_release(&c);
		}
		buf_free(b);
	}
}

static void test_platform(void **state)
{
	char *o, *a, *v;
	(void)state;
	assert_int_equal(image_platform_parse("linux/amd64", &o, &a, &v), 0);
	assert_string_equal(o, "linux");
	assert_string_equal(a, "amd64");
	assert_null(v);
	free(o);
	free(a);
	assert_int_equal(image_platform_parse("linux/arm64/v8", &o, &a, &v), 0);
	assert_string_equal(v, "v8");
	free(o);
	free(a);
	free(v);
	assert_int_equal(image_platform_parse("windows/amd64", &o, &a, &v), -EINVAL);
	assert_int_equal(image_platform_parse("linux", &o, &a, &v), -EINVAL);
}

static void test_challenge(void **state)
{
	struct registry_challenge c;
	(void)state;
	assert_int_equal(
		registry_challenge_parse("Bearer realm=\"https://auth.docker.io/token\","
					 "service=\"registry.docker.io\",scope=\"repository:library/python:pull\"",
					 &c),
		0);
	assert_int_equal(c.scheme, REGISTRY_AUTH_BEARER);
	assert_string_equal(c.realm, "https://auth.docker.io/token");
	assert_string_equal(c.service, "registry.docker.io");
	assert_string_equal(c.scope, "repository:library/python:pull");
	registry_challenge_release(&c);
	assert_int_equal(registry_challenge_parse("Basic realm=\"tkbox-test\"", &c), 0);
	assert_int_equal(c.scheme, REGISTRY_AUTH_BASIC);
	registry_challenge_release(&c);
	assert_int_equal(registry_challenge_parse("bearer realm=x, error=\"insufficient_scope\"", &c), 0);
	assert_string_equal(c.realm, "x");
	registry_challenge_release(&c);
	assert_int_equal(registry_challenge_parse("Bearer realm=\"a\\\"b\"", &c), 0);
	assert_string_equal(c.realm, "a\"b");
	registry_challenge_release(&c);
	assert_int_equal(registry_challenge_parse("Digest realm=x", &c), -EPROTONOSUPPORT);
	assert_int_equal(registry_challenge_parse("Bearer service=x", &c), -EBADMSG);
	assert_int_equal(registry_challenge_parse("Bearer realm=\"unterminated", &c), -EBADMSG);
	assert_int_equal(registry_challenge_parse("Bearer realm=a,realm=b", &c), -EBADMSG);
	assert_int_equal(registry_challenge_parse(NULL, &c), -EBADMSG);
	{
		char big[REGISTRY_MAX_CHALLENGE + 2];
		memset(big, 'a', sizeof(big));
		memcpy(big, "Basic realm=", 12);
		big[REGISTRY_MAX_CHALLENGE] = '\0';
		assert_int_equal(registry_challenge_parse(big, &c), 0);
		registry_challenge_release(&c);
		big[REGISTRY_MAX_CHALLENGE] = 'a';
		big[REGISTRY_MAX_CHALLENGE + 1] = '\0';
		assert_int_equal(registry_challenge_parse(big, &c), -E2BIG);
	}
}

static void test_auth_lookup(void **state)
{
	struct buf *b = NULL;
	/* "dXNlcjpwYXNz" is base64("user:pass") */
	const char *cfg = "{\"auths\":{\"https://index.docker.io/v1/\":{\"auth\":\"aHViOmh1YnBhc3M=\"},"
			  "\"localhost:5000\":{\"auth\":\"dXNlcjpwYXNz\"},"
			  "\"https://ghcr.io\":{\"username\":\"u\",\"password\":\"p\"},"
			  "\"bad.io\":{\"auth\":\"bm9jb2xvbg==\"}},\"credsStore\":\"desktop\"}";
	(void)state;
	assert_int_equal(registry_auth_lookup(cfg, strlen(cfg), "localhost:5000", &b), 0);
	assert_int_equal(buf_len(b), 9);
	assert_memory_equal(buf_ptr(b), "user:pass", 9);
	buf_free(b);
	assert_int_equal(registry_auth_lookup(cfg, strlen(cfg), "docker.io", &b), 0);
	assert_memory_equal(buf_ptr(b), "hub:hubpass", 11);
	buf_free(b);
	assert_int_equal(registry_auth_lookup(cfg, strlen(cfg), "ghcr.io", &b), 0);
	assert_memory_equal(buf_ptr(b), "u:p", 3);
	buf_free(b);
	assert_int_equal(registry_auth_lookup(cfg, strlen(cfg), "localhost:5001", &b), -ENOENT);
	assert_int_equal(registry_auth_lookup(cfg, strlen(cfg), "localhost", &b), -ENOENT);
	/* "nocolon" has no user:password form */
	assert_int_equal(registry_auth_lookup(cfg, strlen(cfg), "bad.io", &b), -EBADMSG);
	assert_int_equal(registry_auth_lookup("{}", 2, "x", &b), -ENOENT);
}

static void test_token(void **state)
{
	char *t = NULL;
	(void)state;
	assert_int_equal(registry_token_parse("{\"token\":\"abc.def\",\"expires_in\":300}", 36, &t), 0);
	assert_string_equal(t, "abc.def");
	free(t);
	assert_int_equal(registry_token_parse("{\"access_token\":\"xyz\"}", 22, &t), 0);
	assert_string_equal(t, "xyz");
	free(t);
	assert_int_equal(registry_token_parse("{\"token\":\"a\\r\\nX-Injected: 1\"}", 30, &t), -EBADMSG);
	assert_int_equal(registry_token_parse("{\"token\":\"\"}", 12, &t), -EBADMSG);
	assert_int_equal(registry_token_parse("{}", 2, &t), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_oci_manifest),	cmocka_unit_test(test_index),
		cmocka_unit_test(test_refused),		cmocka_unit_test(test_caps),
		cmocka_unit_test(test_config),		cmocka_unit_test(test_config_fields),
		cmocka_unit_test(test_manifest_fields), cmocka_unit_test(test_config_env_cap),
		cmocka_unit_test(test_platform),	cmocka_unit_test(test_challenge),
		cmocka_unit_test(test_auth_lookup),	cmocka_unit_test(test_token),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
