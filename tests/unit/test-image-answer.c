/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "banned.h"
#include "image/image-answer.h"
#include "json.h"
#include "vmm/boot-proto.h"

#define D1 "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "sha256:2222222222222222222222222222222222222222222222222222222222222222"

/* A well-formed answer as a JSON tree; tests break one member and write it with craft(). */
static json_t *valid_tree(void)
{
	json_t *o = json_pack("{s:s,s:[s,s],s:s,s:b,s:s,s:s,s:s,s:s,s:s}", "config", D1, "env", "PATH=/usr/bin",
			      "GREETING=hello world", "ext4", "/state/images/roots/11/rootfs.ext4", "from_cache", 0,
			      "image_json", "/state/images/roots/11/image.json", "manifest", D2, "schema",
			      IMAGE_ANSWER_SCHEMA, "user", "1000:1000", "working_dir", "/app");
	assert_non_null(o);
	return o;
}

/* JCS of o plus "\n", bypassing the encoder's checks (the decoder must refuse on its own). */
static char *craft(json_t *o)
{
	char *s = NULL, *r = NULL;
	assert_int_equal(json_jcs_string(o, BUF_SIZE_CEILING, &s), 0);
	assert_true(asprintf(&r, "%s\n", s) > 0);
	free(s);
	json_decref(o);
	return r;
}

static int decode_str(const char *s, struct image_result *res, struct image_diag *d)
{
	d->msg[0] = '\0';
	return image_answer_decode(s, strlen(s), res, d);
}

/* Decoding s is refused with err and a message that contains want. */
static void refused(const char *s, int err, const char *want)
{
	struct image_result res = { 0 };
	struct image_diag d;
	int r = decode_str(s, &res, &d);
	if (r != err || !strstr(d.msg, want)) {
		fail_msg("decoding %.200s: got %d \"%s\", want %d with \"%s\"", s, r, d.msg, err, want);
	}
	assert_null(res.ext4_path);
}

static void refused_tree(json_t *o, int err, const char *want)
{
	char *s = craft(o);
	refused(s, err, want);
	free(s);
}

static void accepted(const char *s)
{
	struct image_result res = { 0 };
	struct image_diag d;
	int r = decode_str(s, &res, &d);
	if (r != 0) {
		fail_msg("decoding %.200s: %d \"%s\"", s, r, d.msg);
	}
	image_result_release(&res);
}

static void accepted_tree(json_t *o)
{
	char *s = craft(o);
	accepted(s);
	free(s);
}

static char *encode(const struct image_result *res, int *ret_r, struct image_diag *d)
{
	struct buf *b = NULL;
	char *s = NULL;
	assert_int_equal(buf_new(IMAGE_ANSWER_MAX_BYTES, 0, &b), 0);
	d->msg[0] = '\0';
	*ret_r = image_answer_encode(res, b, d);
	if (*ret_r == 0) {
		s = strndup((const char *)buf_ptr(b), buf_len(b));
		assert_non_null(s);
	} else {
		assert_int_equal(buf_len(b), 0);
	}
	buf_free(b);
	return s;
}

static void test_round_trip(void **state)
{
	char *env[] = { "PATH=/usr/bin", "EMPTY=", "Q=\"quoted\" \\ \x01", NULL };
	struct image_result in = { .ext4_path = "/s/images/roots/ab/rootfs.ext4",
				   .json_path = "/s/images/roots/ab/image.json",
				   .config_digest = D1,
				   .manifest_digest = D2,
				   .env = env,
				   .n_env = 3,
				   .working_dir = "/app/",
				   .user = "nobody",
				   .from_cache = true };
	struct image_result out = { 0 }, out2 = { 0 };
	struct image_diag d;
	char *s, *s2;
	int r;
	(void)state;

	s = encode(&in, &r, &d);
	assert_int_equal(r, 0);
	assert_int_equal(decode_str(s, &out, &d), 0);
	assert_string_equal(out.ext4_path, in.ext4_path);
	assert_string_equal(out.json_path, in.json_path);
	assert_string_equal(out.config_digest, D1);
	assert_string_equal(out.manifest_digest, D2);
	assert_string_equal(out.working_dir, "/app/");
	assert_string_equal(out.user, "nobody");
	assert_true(out.from_cache);
	assert_int_equal(out.n_env, 3);
	for (size_t i = 0; i < 3; i++) {
		assert_string_equal(out.env[i], env[i]);
	}
	assert_null(out.env[3]);
	/* the decoded answer encodes to the same bytes */
	s2 = encode(&out, &r, &d);
	assert_int_equal(r, 0);
	assert_string_equal(s, s2);
	free(s2);
	image_result_release(&out);
	free(s);

	/* the optional members as null, no env */
	in = (struct image_result){ .ext4_path = "/s/images/x/rootfs.ext4",
				    .json_path = "/s/images/x/image.json",
				    .config_digest = D1 };
	s = encode(&in, &r, &d);
	assert_int_equal(r, 0);
	assert_non_null(strstr(s, "\"manifest\":null"));
	assert_non_null(strstr(s, "\"user\":null"));
	assert_non_null(strstr(s, "\"working_dir\":null"));
	assert_int_equal(decode_str(s, &out2, &d), 0);
	assert_null(out2.manifest_digest);
	assert_null(out2.user);
	assert_null(out2.working_dir);
	assert_false(out2.from_cache);
	assert_int_equal(out2.n_env, 0);
	assert_non_null(out2.env);
	assert_null(out2.env[0]);
	image_result_release(&out2);
	free(s);
	accepted_tree(valid_tree());
}

/*
 * Issue 9: a WorkingDir of "/tmp\nfrom_cache yes" forged image_from_cache
 * when the answer was lines. As JSON it is one string and nothing else.
 */
static void test_forged_working_dir(void **state)
{
	struct image_result in = { .ext4_path = "/s/images/roots/ab/rootfs.ext4",
				   .json_path = "/s/images/roots/ab/image.json",
				   .config_digest = D1,
				   .working_dir = "/tmp\nfrom_cache yes",
				   .user = "root\nfrom_cache yes\n\"from_cache\":true",
				   .from_cache = false };
	struct image_result out = { 0 };
	struct image_diag d;
	char *s;
	int r;
	(void)state;

	s = encode(&in, &r, &d);
	assert_int_equal(r, 0);
	/* one line: the only newline is the last byte */
	assert_ptr_equal(strchr(s, '\n'), s + strlen(s) - 1);
	assert_int_equal(decode_str(s, &out, &d), 0);
	assert_false(out.from_cache);
	assert_string_equal(out.working_dir, "/tmp\nfrom_cache yes");
	assert_string_equal(out.user, in.user);
	image_result_release(&out);
	free(s);
	/* the same answer spelled as the old lines is not an answer at all */
	refused("ext4 /s/images/roots/ab/rootfs.ext4\nimage_json /s/images/roots/ab/image.json\n"
		"working_dir /tmp\nfrom_cache yes\n",
		-EBADMSG, "not valid JSON");
}

static void test_keys(void **state)
{
	static const char *const keys[] = { "config",	"env",	  "ext4", "from_cache", "image_json",
					    "manifest", "schema", "user", "working_dir" };
	json_t *o;
	(void)state;

	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		char want[64];
		o = valid_tree();
		assert_int_equal(json_object_del(o, keys[i]), 0);
		(void)snprintf(want, sizeof(want), "key \"%s\" is missing", keys[i]);
		refused_tree(o, -EBADMSG, want);
	}
	o = valid_tree();
	assert_int_equal(json_object_set_new(o, "image_from_cache", json_true()), 0);
	refused_tree(o, -EBADMSG, "unknown key \"image_from_cache\"");
	o = valid_tree();
	assert_int_equal(json_object_set_new(o, "zz\nfrom_cache yes", json_true()), 0);
	refused_tree(o, -EBADMSG, "unknown key \"zz\\x0afrom_cache yes\"");
	/* a duplicate key: jansson's message names it */
	refused("{\"config\":\"" D1 "\",\"config\":\"" D1 "\"}\n", -EBADMSG, "duplicate object key");
}

static void test_framing(void **state)
{
	char *good = craft(valid_tree()), *s = NULL;
	size_t n = strlen(good);
	(void)state;

	accepted(good);
	refused("", -EBADMSG, "empty");
	good[n - 1] = '\0';
	refused(good, -EBADMSG, "does not end with a newline");
	assert_true(asprintf(&s, "%s{}\n", good) > 0);
	refused(s, -EBADMSG, "trailing bytes after the JSON object");
	free(s);
	assert_true(asprintf(&s, "%s\nx\n", good) > 0);
	refused(s, -EBADMSG, "trailing bytes");
	free(s);
	assert_true(asprintf(&s, "%s \n", good) > 0);
	refused(s, -EBADMSG, "not in canonical (JCS) form");
	free(s);
	assert_true(asprintf(&s, " %s\n", good) > 0);
	refused(s, -EBADMSG, "not in canonical (JCS) form");
	free(s);
	/* key order is part of the canonical form */
	assert_true(asprintf(&s, "{\"env\":[],%s\n", strstr(good, "\"config\"")) > 0);
	{
		/* cut the original env member out of the tail */
		char *e = strstr(s + 10, ",\"env\":[");
		char *end = e ? strchr(e, ']') : NULL;
		assert_non_null(end);
		memmove(e, end + 1, strlen(end + 1) + 1);
	}
	refused(s, -EBADMSG, "not in canonical (JCS) form");
	free(s);
	/* an escape JCS does not use */
	s = strdup(good);
	assert_non_null(s);
	{
		char *u = strstr(s, "\"/app\"");
		char *t = NULL;
		assert_non_null(u);
		*u = '\0';
		assert_true(asprintf(&t, "%s\"\\/app\"%s\n", s, u + 6) > 0);
		refused(t, -EBADMSG, "not in canonical (JCS) form");
		free(t);
	}
	free(s);
	refused("[]\n", -EBADMSG, "not a JSON object");
	refused("{\"env\":[[\"A=B\"]]}\n", -E2BIG, "nested deeper");
	free(good);
}

static void test_types(void **state)
{
	static const struct {
		const char *key;
		const char *json;
		const char *want;
	} cases[] = {
		{ "config", "1", "\"config\" is not a string" },
		{ "config", "\"sha256:ABCD\"", "\"config\" is not a sha256" },
		{ "config",
		  "\"sha512:"
		  "1111111111111111111111111111111111111111111111111111111111111111\"",
		  "\"config\" is not a sha256" },
		{ "config", "null", "\"config\" is not a string" },
		{ "manifest", "\"" D2 "x\"", "\"manifest\" is neither null nor a sha256" },
		{ "manifest", "false", "\"manifest\" is not a string or null" },
		{ "env", "\"A=B\"", "\"env\" is not an array" },
		{ "env", "[1]", "\"env\"[0] is not a string" },
		{ "env", "[\"A=B\",\"NOEQUALS\"]", "\"env\"[1] is not NAME=value" },
		{ "env", "[\"=value\"]", "\"env\"[0] is not NAME=value" },
		{ "ext4", "null", "\"ext4\" is not a string" },
		{ "ext4", "\"rootfs.ext4\"", "\"ext4\" is not an absolute path" },
		{ "ext4", "\"/s/images/../../etc/shadow\"", "\"ext4\" is not an absolute path" },
		{ "ext4", "\"/s/images/./x\"", "\"ext4\" is not an absolute path" },
		{ "ext4", "\"/s/images/x/..\"", "\"ext4\" is not an absolute path" },
		{ "ext4", "\"/.\"", "\"ext4\" is not an absolute path" },
		{ "ext4", "\"\"", "\"ext4\" is not an absolute path" },
		{ "ext4", "\"/s/images/x\\nfrom_cache yes\"", "\"ext4\" is not an absolute path" },
		{ "image_json", "\"image.json\"", "\"image_json\" is not an absolute path" },
		{ "from_cache", "\"yes\"", "\"from_cache\" is not true or false" },
		{ "from_cache", "1", "\"from_cache\" is not true or false" },
		{ "from_cache", "null", "\"from_cache\" is not true or false" },
		{ "schema", "\"tkbox.image-answer.v2\"", "\"schema\" is not \"tkbox.image-answer.v1\"" },
		{ "schema", "1", "\"schema\" is not a string" },
		{ "user", "\"\"", "\"user\" is empty" },
		{ "user", "7", "\"user\" is not a string or null" },
		{ "working_dir", "\"../..\"", "\"working_dir\" (the image's WorkingDir) is not an absolute path" },
		{ "working_dir", "\"app\"", "\"working_dir\" (the image's WorkingDir) is not an absolute path" },
		{ "working_dir", "[]", "\"working_dir\" is not a string or null" },
	};
	(void)state;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		json_t *o = valid_tree(), *v = NULL;
		assert_int_equal(json_parse_strict(cases[i].json, strlen(cases[i].json),
						   &(struct json_opts){ .want_top = (json_type)-1 }, &v),
				 0);
		assert_int_equal(json_object_set_new(o, cases[i].key, v), 0);
		refused_tree(o, -EBADMSG, cases[i].want);
	}
}

static char *rep(char c, size_t n)
{
	char *s = malloc(n + 1);
	assert_non_null(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

static void test_caps(void **state)
{
	json_t *o, *env;
	char *s, *p;
	(void)state;

	/* env entries: BOOT_MAX_ENV, then one more */
	o = valid_tree();
	env = json_array();
	for (int i = 0; i < BOOT_MAX_ENV; i++) {
		char e[32];
		(void)snprintf(e, sizeof(e), "V%d=x", i);
		assert_int_equal(json_array_append_new(env, json_string(e)), 0);
	}
	assert_int_equal(json_object_set(o, "env", env), 0);
	accepted_tree(json_deep_copy(o));
	assert_int_equal(json_array_append_new(env, json_string("ONE=more")), 0);
	json_decref(env);
	refused_tree(o, -E2BIG, "more than BOOT_MAX_ENV (1024)");

	/* one env entry: BOOT_MAX_STRING bytes, then one more */
	p = rep('x', BOOT_MAX_STRING);
	p[0] = 'A';
	p[1] = '=';
	o = valid_tree();
	assert_int_equal(json_object_set_new(o, "env", json_pack("[s]", p)), 0);
	accepted_tree(o);
	free(p);
	p = rep('x', BOOT_MAX_STRING + 1);
	p[0] = 'A';
	p[1] = '=';
	o = valid_tree();
	assert_int_equal(json_object_set_new(o, "env", json_pack("[s]", p)), 0);
	refused_tree(o, -E2BIG, "more than BOOT_MAX_STRING");
	free(p);

	/* paths and working_dir: IMAGE_ANSWER_MAX_PATH bytes, then one more */
	p = rep('a', IMAGE_ANSWER_MAX_PATH);
	p[0] = '/';
	o = valid_tree();
	assert_int_equal(json_object_set_new(o, "ext4", json_string(p)), 0);
	assert_int_equal(json_object_set_new(o, "working_dir", json_string(p)), 0);
	accepted_tree(o);
	free(p);
	p = rep('a', IMAGE_ANSWER_MAX_PATH + 1);
	p[0] = '/';
	o = valid_tree();
	assert_int_equal(json_object_set_new(o, "ext4", json_string(p)), 0);
	refused_tree(o, -E2BIG, "\"ext4\" is 4097 bytes, more than IMAGE_ANSWER_MAX_PATH");
	o = valid_tree();
	assert_int_equal(json_object_set_new(o, "image_json", json_string(p)), 0);
	refused_tree(o, -E2BIG, "\"image_json\" is 4097 bytes");
	o = valid_tree();
	assert_int_equal(json_object_set_new(o, "working_dir", json_string(p)), 0);
	refused_tree(o, -E2BIG, "\"working_dir\" (the image's WorkingDir) is 4097 bytes");
	free(p);

	/* user: IMAGE_ANSWER_MAX_USER bytes, then one more */
	p = rep('u', IMAGE_ANSWER_MAX_USER);
	o = valid_tree();
	assert_int_equal(json_object_set_new(o, "user", json_string(p)), 0);
	accepted_tree(o);
	free(p);
	p = rep('u', IMAGE_ANSWER_MAX_USER + 1);
	o = valid_tree();
	assert_int_equal(json_object_set_new(o, "user", json_string(p)), 0);
	refused_tree(o, -E2BIG, "more than IMAGE_ANSWER_MAX_USER (256)");
	free(p);

	/* the whole answer: exactly IMAGE_ANSWER_MAX_BYTES with its newline, then one more */
	{
		size_t len, want = IMAGE_ANSWER_MAX_BYTES, k = 0;
		o = valid_tree();
		env = json_array();
		assert_int_equal(json_object_set_new(o, "env", env), 0);
		s = craft(json_deep_copy(o));
		len = strlen(s);
		free(s);
		/* entries of 30,000 bytes, then one that fills the rest exactly (each adds 2 quotes and a comma) */
		while (len < want) {
			size_t room = want - len, over = 2 + (k > 0 ? 1 : 0), name;
			char head[32];
			name = (size_t)snprintf(head, sizeof(head), "E%zu=", k);
			p = rep('x', room > 65000 ? 30000 : room - over);
			memcpy(p, head, name);
			assert_int_equal(json_array_append_new(env, json_string(p)), 0);
			free(p);
			s = craft(json_deep_copy(o));
			len = strlen(s);
			free(s);
			k++;
		}
		assert_int_equal(len, want);
		s = craft(json_deep_copy(o));
		accepted(s);
		/* the encoder writes it too */
		{
			struct image_result res = { 0 };
			struct image_diag d;
			char *e;
			int r;
			assert_int_equal(decode_str(s, &res, &d), 0);
			e = encode(&res, &r, &d);
			assert_int_equal(r, 0);
			assert_string_equal(e, s);
			free(e);
			/* one byte more in the last entry: the encoder refuses, and so does the decoder */
			p = malloc(strlen(res.env[res.n_env - 1]) + 2);
			assert_non_null(p);
			(void)snprintf(p, strlen(res.env[res.n_env - 1]) + 2, "%sx", res.env[res.n_env - 1]);
			free(res.env[res.n_env - 1]);
			res.env[res.n_env - 1] = p;
			e = encode(&res, &r, &d);
			assert_int_equal(r, -E2BIG);
			assert_null(e);
			assert_non_null(strstr(d.msg, "more than IMAGE_ANSWER_MAX_BYTES"));
			image_result_release(&res);
		}
		free(s);
		{
			json_t *last = json_array_get(env, json_array_size(env) - 1);
			char *l = NULL;
			assert_true(asprintf(&l, "%sx", json_string_value(last)) > 0);
			assert_int_equal(json_string_set(last, l), 0);
			free(l);
		}
		s = craft(o);
		assert_int_equal(strlen(s), want + 1);
		refused(s, -E2BIG, "more than IMAGE_ANSWER_MAX_BYTES");
		free(s);
	}
}

static void test_encoder_refuses(void **state)
{
	char *bad_env[] = { "NOEQUALS", NULL };
	char *nonutf8[] = { "A=\xff", NULL };
	struct image_result in = { .ext4_path = "/s/images/x/rootfs.ext4",
				   .json_path = "/s/images/x/image.json",
				   .config_digest = D1 };
	struct image_diag d;
	char *s;
	int r;
	(void)state;

	in.working_dir = "../..";
	s = encode(&in, &r, &d);
	assert_int_equal(r, -EBADMSG);
	assert_null(s);
	assert_non_null(strstr(d.msg, "\"working_dir\" (the image's WorkingDir) is not an absolute path"));
	in.working_dir = NULL;
	in.env = bad_env;
	in.n_env = 1;
	s = encode(&in, &r, &d);
	assert_int_equal(r, -EBADMSG);
	assert_non_null(strstr(d.msg, "\"env\"[0] is not NAME=value"));
	in.env = nonutf8;
	s = encode(&in, &r, &d);
	assert_int_equal(r, -EBADMSG);
	assert_non_null(strstr(d.msg, "not UTF-8"));
	in.env = NULL;
	in.n_env = 0;
	in.config_digest = "sha256:x";
	s = encode(&in, &r, &d);
	assert_int_equal(r, -EBADMSG);
	assert_non_null(strstr(d.msg, "\"config\""));
}

/* ---- image_answer_exec against a stand-in child (a shell script) ---- */

static char tmpdir[64];

static const char *child(const char *body)
{
	static char path[128];
	FILE *f;
	(void)snprintf(path, sizeof(path), "%s/child.sh", tmpdir);
	(void)unlink(path);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_true(fprintf(f, "#!/bin/sh\n%s\n", body) > 0);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(chmod(path, 0700), 0);
	return path;
}

static int run_child(const char *body, const char *state_dir, struct image_result *res, struct image_diag *d)
{
	struct image_opts o = { .state_dir = state_dir, .progress_fd = -1, .diag = d };
	d->msg[0] = '\0';
	return image_answer_exec(child(body), &o, "example/ref:1", res);
}

static void test_exec(void **state)
{
	struct image_result res = { 0 };
	struct image_diag d;
	char *good, *body = NULL;
	int r;
	(void)state;

	(void)snprintf(tmpdir, sizeof(tmpdir), "/tmp/test-image-answer-XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	good = craft(valid_tree()); /* under /state/images/ */

	/* the child is asked for --json and given the reference */
	assert_true(asprintf(&body,
			     "case \"$*\" in 'images --json --state /state -- resolve example/ref:1') ;; *) echo "
			     "\"argv: $*\" >&2; exit 3;; esac\nprintf '%%s' '%s'",
			     good) > 0);
	r = run_child(body, "/state", &res, &d);
	if (r != 0) {
		fail_msg("%d %s", r, d.msg);
	}
	assert_string_equal(res.ext4_path, "/state/images/roots/11/rootfs.ext4");
	assert_string_equal(res.working_dir, "/app");
	assert_false(res.from_cache);
	image_result_release(&res);
	free(body);

	/* the cache is elsewhere: the paths the child names are not in it */
	assert_true(asprintf(&body, "printf '%%s' '%s'", good) > 0);
	assert_int_equal(run_child(body, "/other", &res, &d), -EPROTO);
	assert_non_null(strstr(d.msg, "not under the image cache /other/images/"));
	free(body);

	/* a state directory given with a trailing slash: the child's paths hold "//" and are still under it */
	{
		json_t *o = valid_tree();
		char *a;
		assert_int_equal(json_object_set_new(o, "ext4", json_string("/state//images/r/rootfs.ext4")), 0);
		assert_int_equal(json_object_set_new(o, "image_json", json_string("/state//images/r/image.json")), 0);
		a = craft(o);
		assert_true(asprintf(&body, "printf '%%s' '%s'", a) > 0);
		assert_int_equal(run_child(body, "/state/", &res, &d), 0);
		assert_string_equal(res.ext4_path, "/state//images/r/rootfs.ext4");
		image_result_release(&res);
		free(body);
		/* image.json elsewhere */
		o = valid_tree();
		assert_int_equal(json_object_set_new(o, "image_json", json_string("/etc/image.json")), 0);
		free(a);
		a = craft(o);
		assert_true(asprintf(&body, "printf '%%s' '%s'", a) > 0);
		assert_int_equal(run_child(body, "/state", &res, &d), -EPROTO);
		assert_null(res.ext4_path);
		free(body);
		free(a);
	}

	/* the old scraped lines, forged: refused */
	assert_int_equal(
		run_child("echo 'ext4 /state/images/r/rootfs.ext4'; echo 'from_cache yes'", "/state", &res, &d),
		-EBADMSG);
	assert_non_null(strstr(d.msg, "image answer: not valid JSON"));
	assert_null(res.ext4_path);

	/* an answer past IMAGE_ANSWER_MAX_BYTES: cut off, the child killed, refused */
	assert_int_equal(run_child("exec yes '{\"config\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}'",
				   "/state", &res, &d),
			 -E2BIG);
	assert_non_null(strstr(d.msg, "larger than IMAGE_ANSWER_MAX_BYTES"));

	/* the child's error comes back without its prefix */
	assert_int_equal(run_child("echo 'tkbox images resolve \"example/ref:1\": image config: boom' >&2; exit 1",
				   "/state", &res, &d),
			 -EIO);
	assert_string_equal(d.msg, "image config: boom");
	/* and a reason with control characters comes back quoted */
	assert_int_equal(run_child("printf 'evil\\033[2J\\n' >&2; exit 1", "/state", &res, &d), -EIO);
	assert_null(strchr(d.msg, '\033'));
	free(good);
	{
		char path[128];
		(void)snprintf(path, sizeof(path), "%s/child.sh", tmpdir);
		(void)unlink(path);
		(void)rmdir(tmpdir);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_forged_working_dir),
		cmocka_unit_test(test_keys),
		cmocka_unit_test(test_framing),
		cmocka_unit_test(test_types),
		cmocka_unit_test(test_caps),
		cmocka_unit_test(test_encoder_refuses),
		cmocka_unit_test(test_exec),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
