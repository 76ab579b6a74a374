/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "banned.h"
#include "image/cache.h"
#include "image/image.h"
#include "crypto.h"
#include "image/util.h"

/* sha256("hello") */
#define HELLO "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"

static int count_entries(struct image_cache *c, const char *rel)
{
	int fd = openat(c->dirfd, rel, O_RDONLY | O_DIRECTORY);
	DIR *d = fdopendir(fd);
	struct dirent *de;
	int n = 0;
	assert_non_null(d);
	while ((de = readdir(d))) {
		n += de->d_name[0] != '.';
	}
	closedir(d);
	return n;
}

static void test_blob_writer(void **state)
{
	char dir[] = "/tmp/test-image-cache-XXXXXX";
	struct image_cache *c = NULL;
	struct blob_writer w;
	struct buf *b = NULL;
	int root;
	(void)state;

	assert_non_null(mkdtemp(dir));
	assert_int_equal(image_cache_open(dir, false, &c), 0);

	/* the right bytes: committed under their digest */
	assert_int_equal(blob_writer_begin(&w, c, HELLO, 5), 0);
	assert_int_equal(blob_writer_write(&w, "hel", 3), 0);
	assert_int_equal(blob_writer_write(&w, "lo", 2), 0);
	assert_int_equal(blob_writer_commit(&w), 0);
	assert_string_equal(w.digest, HELLO);
	blob_writer_abort(&w);
	assert_true(image_cache_has_blob(c, HELLO));
	assert_int_equal(image_cache_read_blob(c, HELLO, 5, &b), 0);
	assert_memory_equal(buf_ptr(b), "hello", 5);
	buf_free(b);
	/* read cap one short */
	assert_int_equal(image_cache_read_blob(c, HELLO, 4, &b), -E2BIG);

	/* wrong bytes for the digest: refused, nothing left behind */
	assert_int_equal(blob_writer_begin(&w, c,
					   "sha256:"
					   "0000000000000000000000000000000000000000000000000000000000000000",
					   5),
			 0);
	assert_int_equal(blob_writer_write(&w, "hello", 5), 0);
	assert_int_equal(blob_writer_commit(&w), -EBADMSG);
	blob_writer_abort(&w);
	assert_false(
		image_cache_has_blob(c, "sha256:0000000000000000000000000000000000000000000000000000000000000000"));
	assert_int_equal(count_entries(c, "tmp"), 0);

	/* one byte past the declared size */
	assert_int_equal(blob_writer_begin(&w, c, HELLO, 4), 0);
	assert_int_equal(blob_writer_write(&w, "hell", 4), 0);
	assert_int_equal(blob_writer_write(&w, "o", 1), -E2BIG);
	blob_writer_abort(&w);
	assert_int_equal(count_entries(c, "tmp"), 0);

	/* a blob tampered with in the cache is caught when read whole */
	{
		int fd = openat(c->dirfd,
				"blobs/sha256/2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
				O_WRONLY | O_TRUNC);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, "HELLO", 5), 5);
		close(fd);
	}
	assert_int_equal(image_cache_read_blob(c, HELLO, 5, &b), -EBADMSG);

	/* refs round trip and mismatch */
	{
		struct image_cache_ref v = { 0 }, got;
		memcpy(v.manifest, HELLO, sizeof(HELLO));
		memcpy(v.config, HELLO, sizeof(HELLO));
		/* a record without a root key is refused: it cannot say what its root was built from */
		assert_int_equal(image_cache_ref_put(c, "localhost:5000/x:1", "linux/amd64", &v), -EINVAL);
		memcpy(v.root, HELLO, sizeof(HELLO));
		assert_int_equal(image_cache_ref_put(c, "localhost:5000/x:1", "linux/amd64", &v), 0);
		assert_int_equal(image_cache_ref_get(c, "localhost:5000/x:1", "linux/amd64", &got), 0);
		assert_string_equal(got.config, HELLO);
		assert_string_equal(got.root, HELLO);
		assert_int_equal(image_cache_ref_get(c, "localhost:5000/x:1", "linux/arm64", &got), -ENOENT);
	}
	/* a record of the old layout (config digest only) is not trusted */
	{
		struct image_cache_ref got;
		char hex[SHA256_HEX_LEN + 1], rel[128];
		const char *key = "localhost:5000/old:1|linux/amd64";
		const char *rec = "{\"config\":\"" HELLO "\",\"manifest\":\"" HELLO
				  "\",\"platform\":\"linux/amd64\",\"ref\":\"localhost:5000/old:1\"}";
		assert_int_equal(sha256_hex(key, strlen(key), hex), 0);
		(void)snprintf(rel, sizeof(rel), "refs/%s.json", hex);
		assert_int_equal(image_cache_write_file(c, rel, rec, strlen(rec)), 0);
		assert_int_equal(image_cache_ref_get(c, "localhost:5000/old:1", "linux/amd64", &got), -EBADMSG);
	}
	/* a crash mid-download: the writer is never committed nor aborted */
	{
		struct image_prune_stats ps;
		assert_int_equal(blob_writer_begin(&w, c,
						   "sha256:"
						   "1111111111111111111111111111111111111111111111111111111111111111",
						   100),
				 0);
		assert_int_equal(blob_writer_write(&w, "partial", 7), 0);
		close(w.fd);
		free(w.tmpname);
		sha256_free(w.sha);
		assert_false(image_cache_has_blob(
			c, "sha256:1111111111111111111111111111111111111111111111111111111111111111"));
		assert_int_equal(count_entries(c, "tmp"), 1);
		image_cache_free(c);
		c = NULL;
		/* prune (exclusive lock: no pull running) removes the leftover */
		assert_int_equal(image_prune(dir, &ps), 0);
		assert_int_equal(ps.tmp, 1);
		assert_int_equal(image_cache_open(dir, false, &c), 0);
		assert_int_equal(count_entries(c, "tmp"), 0);
	}
	image_cache_free(c);
	root = open("/", O_RDONLY | O_DIRECTORY);
	assert_int_equal(image_rm_rf_at(root, dir + 1), 0);
	close(root);
}

/* sha256("world") */
#define WORLD "sha256:486ea46224d1bb4fb680f34f7c9ad96a8f24ec88be73ea8e5a6c65260e9cb8a7"

static void test_root_key(void **state)
{
	char k1[IMAGE_DIGEST_LEN + 1], k2[IMAGE_DIGEST_LEN + 1];
	const char *ab[] = { HELLO, WORLD }, *ba[] = { WORLD, HELLO }, *a[] = { HELLO };
	(void)state;
	/* the same blobs: the same key */
	assert_int_equal(image_cache_root_key(HELLO, ab, 2, k1), 0);
	assert_int_equal(image_cache_root_key(HELLO, ab, 2, k2), 0);
	assert_string_equal(k1, k2);
	assert_true(image_digest_valid(k1));
	/* the config digest alone is not the key (the old layout's poisoning) */
	assert_string_not_equal(k1, HELLO);
	/* another layer order, layer count, layer or config: another key */
	assert_int_equal(image_cache_root_key(HELLO, ba, 2, k2), 0);
	assert_string_not_equal(k1, k2);
	assert_int_equal(image_cache_root_key(HELLO, a, 1, k2), 0);
	assert_string_not_equal(k1, k2);
	assert_int_equal(image_cache_root_key(WORLD, ab, 2, k2), 0);
	assert_string_not_equal(k1, k2);
	assert_int_equal(image_cache_root_key(HELLO, NULL, 0, k2), 0);
	assert_string_not_equal(k1, k2);
	/* refused: an invalid digest */
	ab[1] = "sha256:xyz";
	assert_int_equal(image_cache_root_key(HELLO, ab, 2, k2), -EINVAL);
	assert_int_equal(image_cache_root_key("md5:1", a, 1, k2), -EINVAL);
}

static void test_run_deadline(void **state)
{
	char *sleep_argv[] = { "/bin/sleep", "30", NULL }, *true_argv[] = { "/bin/true", NULL };
	char *const envp[] = { NULL };
	struct buf *err = NULL;
	(void)state;
	/* a tool past its deadline is killed and reported as -ETIME, not waited for */
	assert_int_equal(image_run_timed(sleep_argv, envp, NULL, NULL, NULL, 1), -ETIME);
	assert_int_equal(buf_new(4096, 0, &err), 0);
	assert_int_equal(image_run_timed(sleep_argv, envp, NULL, NULL, err, 1), -ETIME);
	buf_free(err);
	assert_int_equal(image_run_timed(true_argv, envp, NULL, NULL, NULL, 5), 0);
	assert_int_equal(image_run_timed(true_argv, envp, NULL, NULL, NULL, 0), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blob_writer),
		cmocka_unit_test(test_root_key),
		cmocka_unit_test(test_run_deadline),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
