/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tkbox.yaml (src/cli/config.c): what the parser accepts and how it refuses:
 * FILE:LINE:COL for every refusal, unknown keys listed, duplicates, wrong
 * types, anchors/aliases/tags/merge keys, a second document, every cap one
 * past, and no value's text in any message (a secret's value least of all).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "banned.h"
#include "cli/config.h"
#include "daemon/api-proto.h"
#include "daemon/daemon.h"
#include "json.h"
#include "egress/host.h"

static char err[1024];

static int parse(const char *text, struct config *c)
{
	err[0] = '\0';
	return config_parse("t.yaml", text, strlen(text), c, err, sizeof(err));
}

/* Refused with an error that starts with want (the position) and holds has. */
static void refused(const char *text, const char *want, const char *has)
{
	struct config c = { 0 };
	int r = parse(text, &c);

	if (r >= 0 || strncmp(err, want, strlen(want)) != 0 || (has && !strstr(err, has))) {
		print_error("text:\n%s\nr=%d err: %s\nwant prefix %s and %s\n", text, r, err, want, has ? has : "");
		fail();
	}
}

static void test_full(void **state)
{
	struct config c = { 0 };
	char *flag = NULL;

	(void)state;
	assert_int_equal(parse("version: 1\n"
			       "image: python:3.12-slim\n"
			       "name: job-1\n"
			       "workspace: src\n"
			       "inspect: all\n"
			       "allow: [pypi, api.example.com:443]\n"
			       "secrets:\n"
			       "  GH_TOKEN: {source: env:GH_TOKEN, hosts: [api.github.com, uploads.github.com]}\n"
			       "  NPM: file:tok.txt@registry.example.org:X-Token\n"
			       "env:\n"
			       "  LANG: C.UTF-8\n"
			       "  N: 3\n"
			       "limits: {memory: 2G, cpus: 2, disk: 4096, timeout: 1h, exec_timeout: 90}\n"
			       "mcp: {max_boxes: 3, max_message_bytes: 2M}\n",
			       &c),
			 0);
	assert_string_equal(c.image, "python:3.12-slim");
	assert_string_equal(c.name, "job-1");
	assert_string_equal(c.workspace, "src");
	assert_true(c.inspect_all);
	assert_int_equal(c.n_allow, 2);
	assert_string_equal(c.allow[1], "api.example.com:443");
	assert_null(c.allow[2]);
	assert_int_equal(c.n_env, 2);
	assert_string_equal(c.env[0], "LANG=C.UTF-8");
	assert_string_equal(c.env[1], "N=3");
	assert_int_equal(c.memory_mib, 2048);
	assert_int_equal(c.cpus, 2);
	assert_int_equal(c.disk_mib, 4096);
	assert_int_equal(c.timeout_s, 3600);
	assert_int_equal(c.exec_timeout_s, 90);
	assert_int_equal(c.mcp_max_boxes, 3);
	assert_int_equal(c.mcp_max_message_bytes, 2 * 1024 * 1024);
	assert_int_equal(c.n_secrets, 2);
	assert_string_equal(c.secrets[0].source, "env:GH_TOKEN");
	assert_int_equal(c.secrets[0].kind, CONFIG_SOURCE_ENV);
	assert_int_equal(c.secrets[0].n_hosts, 2);
	assert_string_equal(c.secrets[0].header, "Authorization");
	assert_string_equal(c.secrets[1].hosts[0], "registry.example.org");
	assert_string_equal(c.secrets[1].header, "X-Token");
	assert_int_equal(c.secrets[1].kind, CONFIG_SOURCE_FILE);
	assert_int_equal(config_secret_flag(&c.secrets[0], &flag), 0);
	assert_string_equal(flag, "GH_TOKEN=env:GH_TOKEN@api.github.com,uploads.github.com:Authorization");
	free(flag);
	assert_true(c.has & CONFIG_HAS_IMAGE);
	assert_true(c.has & CONFIG_HAS_EXEC_TIMEOUT);
	config_release(&c);
}

static void test_minimal_and_lists(void **state)
{
	struct config c = { 0 };

	(void)state;
	assert_int_equal(parse("version: 1\n", &c), 0);
	assert_int_equal(c.has, 0);
	assert_null(c.allow);
	config_release(&c);
	assert_int_equal(parse("---\nversion: 1\nenv: [A=1, 'B=x y']\nallow: github\n...\n", &c), 0);
	assert_int_equal(c.n_env, 2);
	assert_string_equal(c.env[1], "B=x y");
	assert_int_equal(c.n_allow, 1);
	config_release(&c);
	/* an empty list is a list: it clears (allow nothing beyond the defaults) */
	assert_int_equal(parse("version: 1\nallow: []\n", &c), 0);
	assert_true(c.has & CONFIG_HAS_ALLOW);
	assert_int_equal(c.n_allow, 0);
	config_release(&c);
}

static void test_positions(void **state)
{
	(void)state;
	refused("version: 1\nimage: x\nimgae: y\n",
		"t.yaml:3:1: unknown key \"imgae\"; the known keys are: version, "
		"image, name, workspace, inspect, allow, secrets, env, limits, mcp",
		NULL);
	refused("version: 1\nimage: x\nimage: y\n", "t.yaml:3:1: image is given twice", NULL);
	refused("version: 1\nlimits:\n  memory: 2G\n  memory: 3G\n", "t.yaml:4:3: limits.memory is given twice", NULL);
	refused("version: 1\nlimits:\n  mem: 2G\n", "t.yaml:3:3: limits: unknown key \"mem\"", "memory, cpus");
	refused("version: 1\nimage: [a]\n", "t.yaml:2:8: image: expected an image reference", "found a list");
	refused("version: 1\nallow: {a: b}\n", "t.yaml:2:8: allow: expected a list", "found a mapping");
	refused("version: 1\nlimits: 2G\n", "t.yaml:2:9: limits: expected a mapping", NULL);
	refused("version: 1\nlimits: {cpus: 0}\n", "t.yaml:2:16: limits.cpus: out of range", NULL);
	refused("version: 1\nlimits: {memory: 2X}\n", "t.yaml:2:18: limits.memory: not a valid value", NULL);
	refused("version: 1\nlimits: {timeout: 8d}\n", "t.yaml:2:19: limits.timeout: out of range", NULL);
	refused("version: 1\nname:\n", "t.yaml:2:6: name: expected a box name, found no value", NULL);
	refused("version: 2\n", "t.yaml:1:10: version: this tkbox reads version 1 only", NULL);
	refused("image: x\n", "t.yaml:2:1: version: 1 is missing", NULL);
	refused("", "t.yaml:1:1: the file is empty", NULL);
	refused("- a\n", "t.yaml:1:1: tkbox.yaml: expected a mapping", NULL);
	refused("version: 1\ninspect: some\n", "t.yaml:2:10: inspect: all or none", NULL);
	refused("version: 1\nimage: 'x\n", "t.yaml:", "not valid YAML");
	refused("version: 1\nallow: [a, [b]]\n", "t.yaml:2:12: allow[1]: expected one host", NULL);
	refused("version: 1\nallow: ['a,b']\n", "t.yaml:2:9: allow[0]", "a comma list");
	refused("version: 1\nenv: {1X: a}\n", "t.yaml:2:7: env: a name is", NULL);
	refused("version: 1\nenv: [NOEQUALS]\n", "t.yaml:2:7: env: a name of", NULL);
	refused("version: 1\nenv: {A: 1, A: 2}\n", "t.yaml:2:13: env: this variable is given twice", NULL);
	refused("version: 1\nenv: {A: }\n", "t.yaml:2:10: env.A: expected a value", NULL);
	refused("version: 1\nmcp: {max_boxes: 65}\n", "t.yaml:2:18: mcp.max_boxes: out of range", NULL);
	refused("version: 1\nmcp: {max_message_bytes: 100}\n", "t.yaml:2:26: mcp.max_message_bytes: out of range",
		NULL);
	refused("version: 1\nmcp: {max_message_bytes: 65M}\n", "t.yaml:2:26: mcp.max_message_bytes", NULL);
}

static void test_yaml_features_refused(void **state)
{
	(void)state;
	refused("version: 1\nimage: &a x\n", "t.yaml:2:8: anchors (&name) are not accepted", NULL);
	refused("version: 1\nimage: &a x\nname: *a\n", "t.yaml:2:8: anchors", NULL);
	refused("version: 1\nname: *a\n", "t.yaml:", NULL);
	refused("version: 1\nimage: !!str x\n", "t.yaml:2:8: tags", NULL);
	refused("version: 1\nlimits: !!map {cpus: 1}\n", "t.yaml:2:9: tags", NULL);
	refused("version: 1\nlimits:\n  <<: {cpus: 1}\n", "t.yaml:3:3: merge keys (<<) are not accepted", NULL);
	refused("version: 1\n---\nversion: 1\n", "t.yaml:2:1: one document per file", NULL);
	refused("%TAG ! tag:x,2000:\n---\nversion: 1\n", "t.yaml:", "%TAG directives");
	refused("version: 1\n? [a]\n: b\n", "t.yaml:2:3: a key is a plain word", NULL);
	refused("version: 1\nimage: \"a\\0b\"\n", "t.yaml:2:8: a key or value holds a NUL byte", NULL);
}

static void test_secrets(void **state)
{
	static const char *const values[] = {
		"version: 1\nsecrets:\n  TOK: ghp_0123456789abcdef@api.github.com\n",
		"version: 1\nsecrets:\n  TOK: ghp_0123456789abcdef\n",
		"version: 1\nsecrets:\n  TOK: {source: ghp_0123456789abcdef, hosts: [a.example]}\n",
		"version: 1\nsecrets:\n  TOK: {value: ghp_0123456789abcdef, hosts: [a.example]}\n",
		"version: 1\nsecrets:\n  TOK: {source: env:A, ghp_0123456789abcdef: 1}\n",
		"version: 1\nsecrets:\n  ghp_0123456789abcdef: env:A@a.example\n",
		"version: 1\nenv: {A: [ghp_0123456789abcdef]}\n",
		"version: 1\nenv: [\"0ghp_0123456789abcdef=x\"]\n",
		"version: 1\nenv: {A: ghp_0123456789abcdef, A: ghp_0123456789abcdef}\n",
		"version: 1\nimage: [ghp_0123456789abcdef]\n",
		"version: 1\nname: \"ghp_0123456789abcdef\x01\"\n",
	};
	struct config c = { 0 };

	(void)state;
	/* F6: no part of what may be a value appears in a refusal */
	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		refused(values[i], "t.yaml:", NULL);
		if (strstr(err, "ghp_") || strstr(err, "0123456789abcdef")) {
			print_error("%s\n-> %s\n", values[i], err);
			fail();
		}
	}
	refused(values[1], "t.yaml:3:8: secrets.TOK: the source must be env:VAR, file:PATH or stdin", NULL);
	refused(values[3], "t.yaml:3:9: secrets.TOK: a secret's value is never written", NULL);
	refused("version: 1\nsecrets:\n  TOK: env:A\n", "t.yaml:3:8: secrets.TOK: no host", NULL);
	refused("version: 1\nsecrets:\n  TOK: {source: env:A}\n", "t.yaml:3:8: secrets.TOK: needs source", NULL);
	refused("version: 1\nsecrets:\n  TOK: {source: env:A, hosts: ['*.x.example']}\n",
		"t.yaml:3:8: secrets.TOK:", NULL);
	refused("version: 1\nsecrets:\n  TOK: env:A@a.example\n  TOK: stdin@b.example\n",
		"t.yaml:4:3: secrets.TOK is given twice", NULL);
	refused("version: 1\nsecrets:\n  TOK: env:A@a.example:Host\n", "t.yaml:3:8: secrets.TOK:", NULL);
	refused("version: 1\nsecrets:\n  tok: env:A@a.example\n", "t.yaml:3:3: secrets: a secret's name", NULL);
	refused("version: 1\nsecrets:\n  TOK: {source: env:A, hosts: [a, b, c, d, e, f, g, h, i]}\n",
		"t.yaml:3:56: secrets.TOK.hosts[8]", NULL);
	assert_int_equal(parse("version: 1\nsecrets:\n  TOK: stdin@a.example\n", &c), 0);
	assert_int_equal(c.secrets[0].kind, CONFIG_SOURCE_STDIN);
	config_release(&c);
}

/* Every cap, one past. */
static void test_caps(void **state)
{
	char *big = malloc(CONFIG_FILE_MAX + 2);
	size_t off;
	struct config c = { 0 };

	(void)state;
	assert_non_null(big);
	memset(big, '#', CONFIG_FILE_MAX + 1);
	memcpy(big, "version: 1\n", 11);
	big[CONFIG_FILE_MAX + 1] = '\0';
	refused(big, "t.yaml: 65537 bytes; a tkbox.yaml is at most 65536 (CONFIG_FILE_MAX)", NULL);
	big[CONFIG_FILE_MAX] = '\0';
	assert_int_equal(parse(big, &c), 0);
	config_release(&c);

	/* a scalar of CONFIG_SCALAR_MAX bytes, then one more */
	off = (size_t)snprintf(big, 64, "version: 1\nimage: ");
	memset(big + off, 'a', CONFIG_SCALAR_MAX);
	big[off + CONFIG_SCALAR_MAX] = '\0';
	assert_int_equal(parse(big, &c), 0);
	config_release(&c);
	big[off + CONFIG_SCALAR_MAX] = 'a';
	big[off + CONFIG_SCALAR_MAX + 1] = '\0';
	refused(big, "t.yaml:2:8: a key or value longer than 4096 bytes (CONFIG_SCALAR_MAX)", NULL);

	/* EGRESS_MAX_ALLOW entries, then one more */
	off = (size_t)snprintf(big, 64, "version: 1\nallow:\n");
	for (int i = 0; i < EGRESS_MAX_ALLOW; i++) {
		off += (size_t)snprintf(big + off, CONFIG_FILE_MAX - off, "- h%d.example\n", i);
	}
	big[off] = '\0';
	assert_int_equal(parse(big, &c), 0);
	assert_int_equal(c.n_allow, EGRESS_MAX_ALLOW);
	config_release(&c);
	(void)snprintf(big + off, CONFIG_FILE_MAX - off, "- one.more\n");
	refused(big, "t.yaml:", "more than 512 entries (EGRESS_MAX_ALLOW)");

	/* DAEMON_MAX_BOX_ENV variables, then one more */
	off = (size_t)snprintf(big, 64, "version: 1\nenv:\n");
	for (int i = 0; i < DAEMON_MAX_BOX_ENV; i++) {
		off += (size_t)snprintf(big + off, CONFIG_FILE_MAX - off, "  V%d: x\n", i);
	}
	big[off] = '\0';
	assert_int_equal(parse(big, &c), 0);
	config_release(&c);
	(void)snprintf(big + off, CONFIG_FILE_MAX - off, "  MORE: x\n");
	refused(big, "t.yaml:", "more than 256 variables (DAEMON_MAX_BOX_ENV)");

	/* EGRESS_SECRET_MAX secrets, then one more */
	off = (size_t)snprintf(big, 64, "version: 1\nsecrets:\n");
	for (int i = 0; i < EGRESS_SECRET_MAX; i++) {
		off += (size_t)snprintf(big + off, CONFIG_FILE_MAX - off, "  S%d: env:S@a.example\n", i);
	}
	big[off] = '\0';
	assert_int_equal(parse(big, &c), 0);
	assert_int_equal(c.n_secrets, EGRESS_SECRET_MAX);
	config_release(&c);
	(void)snprintf(big + off, CONFIG_FILE_MAX - off, "  MORE: env:S@a.example\n");
	refused(big, "t.yaml:19:3: secrets: more than 16 (EGRESS_SECRET_MAX)", NULL);
	free(big);
}

/* config_load: the digest of the bytes, and relative paths against the file's directory. */
static void test_load(void **state)
{
	char dir[] = "/tmp/test-config-XXXXXX", path[128], cwd_path[160];
	const char *text = "version: 1\nworkspace: ws\nsecrets:\n  A: file:tok@a.example\n  B: file:/abs@a.example\n";
	struct config c = { 0 };
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	(void)snprintf(path, sizeof(path), "%s/tkbox.yaml", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(config_load(path, &c, err, sizeof(err)), 0);
	assert_string_equal(c.path, path);
	assert_string_equal(c.dir, dir);
	(void)snprintf(cwd_path, sizeof(cwd_path), "%s/ws", dir);
	assert_string_equal(c.workspace, cwd_path);
	(void)snprintf(cwd_path, sizeof(cwd_path), "file:%s/tok", dir);
	assert_string_equal(c.secrets[0].source, cwd_path);
	assert_string_equal(c.secrets[1].source, "file:/abs");
	/* the text's bytes, as sha256sum gives them */
	assert_string_equal(c.sha256, "e4f2774eeb89be9c9f59449a87e3de681a43ebd7502f1a878bf6c1a3fc00cbbb");
	config_release(&c);
	assert_int_equal(config_load(dir, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "not a regular file"));
	assert_int_equal(unlink(path), 0);
	assert_int_equal(config_load(path, &c, err, sizeof(err)), -ENOENT);
	assert_int_equal(rmdir(dir), 0);
}

/* The create request's config field (src/daemon/api-proto.c): strict, bounded, one past each cap. */
static void test_create_config(void **state)
{
#define SHA "e4f2774eeb89be9c9f59449a87e3de681a43ebd7502f1a878bf6c1a3fc00cbbb"
	static const char *const bad[] = {
		"\"x\"",
		"{\"file\":\"/a/tkbox.yaml\",\"sha256\":\"" SHA "\",\"overridden\":[],\"extra\":1}",
		"{\"file\":\"rel.yaml\",\"sha256\":\"" SHA "\",\"overridden\":[]}",
		"{\"file\":\"/a/"
		"tkbox.yaml\",\"sha256\":\"e4f2774eeb89be9c9f59449a87e3de681a43ebd7502f1a878bf6c1a3fc00cbb\","
		"\"overridden\":[]}",
		"{\"file\":\"/a/tkbox.yaml\",\"sha256\":\"" SHA "a\",\"overridden\":[]}",
		"{\"file\":\"/a/"
		"tkbox.yaml\",\"sha256\":\"E4F2774EEB89BE9C9F59449A87E3DE681A43EBD7502F1A878BF6C1A3FC00CBBB\","
		"\"overridden\":[]}",
		"{\"file\":\"/a/tkbox.yaml\",\"sha256\":\"" SHA "\"}",
		"{\"file\":\"/a/tkbox.yaml\",\"sha256\":\"" SHA "\",\"overridden\":[\"allow\"]}",
		"{\"file\":\"/a/tkbox.yaml\",\"sha256\":\"" SHA "\",\"overridden\":[\"--Allow\"]}",
		"{\"file\":\"/a/tkbox.yaml\",\"sha256\":\"" SHA "\",\"overridden\":[1]}",
		"{\"file\":\"/a/tkbox\\u0000.yaml\",\"sha256\":\"" SHA "\",\"overridden\":[]}",
	};
	const char *sha = "e4f2774eeb89be9c9f59449a87e3de681a43ebd7502f1a878bf6c1a3fc00cbbb";
	char body[2048], flags[1024] = "";
	struct api_create_req q;
	struct api_error e;
	size_t off = 0;

	(void)state;
	(void)snprintf(body, sizeof(body),
		       "{\"image\":\"x\",\"config\":{\"file\":\"/a/tkbox.yaml\",\"sha256\":\"%s\","
		       "\"overridden\":[\"--allow\",\"--exec-timeout\"]}}",
		       sha);
	assert_int_equal(api_decode_create(body, strlen(body), &q, &e), 0);
	assert_non_null(q.config);
	assert_int_equal(json_array_size(json_object_get(q.config, "overridden")), 2);
	api_create_req_release(&q);
	assert_int_equal(api_decode_create("{\"image\":\"x\"}", 13, &q, &e), 0);
	assert_null(q.config);
	api_create_req_release(&q);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		(void)snprintf(body, sizeof(body), "{\"image\":\"x\",\"config\":%s}", bad[i]);
		if (api_decode_create(body, strlen(body), &q, &e) >= 0 || e.status != 400) {
			print_error("accepted: %s\n", body);
			fail();
		}
	}
	/* API_MAX_CONFIG_FLAGS names, then one more */
	for (int i = 0; i < API_MAX_CONFIG_FLAGS; i++) {
		off += (size_t)snprintf(flags + off, sizeof(flags) - off, "%s\"--f\"", i ? "," : "");
	}
	(void)snprintf(body, sizeof(body),
		       "{\"image\":\"x\",\"config\":{\"file\":\"/t\",\"sha256\":\"%s\",\"overridden\":[%s]}}", sha,
		       flags);
	assert_int_equal(api_decode_create(body, strlen(body), &q, &e), 0);
	api_create_req_release(&q);
	(void)snprintf(body, sizeof(body),
		       "{\"image\":\"x\",\"config\":{\"file\":\"/t\",\"sha256\":\"%s\",\"overridden\":[%s,\"--g\"]}}",
		       sha, flags);
	assert_true(api_decode_create(body, strlen(body), &q, &e) < 0);
	assert_non_null(strstr(e.message, "at most 16 flag names"));
}

/* The committed examples parse (TKBOX_SRC: the source tree, set by meson). */
static void test_examples(void **state)
{
	const char *src = getenv("TKBOX_SRC");
	char path[4096];
	struct config c = { 0 };

	(void)state;
	if (!src) {
		skip();
	}
	(void)snprintf(path, sizeof(path), "%s/examples/tkbox.yaml", src);
	if (config_load(path, &c, err, sizeof(err)) < 0) {
		print_error("%s\n", err);
		fail();
	}
	assert_int_equal(c.n_secrets, 2);
	assert_string_equal(c.secrets[0].header, "x-api-key");
	assert_int_equal(c.mcp_max_boxes, 4);
	assert_int_equal(c.memory_mib, 2048);
	config_release(&c);
	(void)snprintf(path, sizeof(path), "%s/examples/tkbox-offline.yaml", src);
	if (config_load(path, &c, err, sizeof(err)) < 0) {
		print_error("%s\n", err);
		fail();
	}
	assert_true(c.inspect_all);
	assert_int_equal(c.n_allow, 0);
	assert_int_equal(c.n_env, 2);
	config_release(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full),	  cmocka_unit_test(test_minimal_and_lists),
		cmocka_unit_test(test_positions), cmocka_unit_test(test_yaml_features_refused),
		cmocka_unit_test(test_secrets),	  cmocka_unit_test(test_caps),
		cmocka_unit_test(test_load),	  cmocka_unit_test(test_create_config),
		cmocka_unit_test(test_examples),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
