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
#include "egress/preset.h"

/* Build from a NULL-terminated list; on success the expanded entries joined with ' ' in out. */
static int build(const char *const *values, const struct egress_image_files *img, char *out, size_t n, char *err,
		 size_t en)
{
	struct egress_policy p;
	char text[EGRESS_ENTRY_TEXT_MAX];
	int r = egress_policy_build((char *const *)values, false, img, &p, err, en);

	if (r < 0) {
		return r;
	}
	out[0] = '\0';
	for (size_t i = 0; i < p.n_allow; i++) {
		egress_allow_format(&p.allow[i], text);
		assert_true(strlen(out) + strlen(text) + 2 < n);
		if (i) {
			memcpy(out + strlen(out), " ", 2);
		}
		memcpy(out + strlen(out), text, strlen(text) + 1);
	}
	egress_policy_release(&p);
	return 0;
}

static void expect(const char *const *values, const struct egress_image_files *img, const char *want)
{
	char out[8192], err[512] = "";

	assert_int_equal(build(values, img, out, sizeof(out), err, sizeof(err)), 0);
	assert_string_equal(out, want);
}

static void expect_err(const char *const *values, const struct egress_image_files *img, int want_r,
		       const char *want_in_err)
{
	char out[8192], err[512] = "";

	assert_int_equal(build(values, img, out, sizeof(out), err, sizeof(err)), want_r);
	if (!strstr(err, want_in_err)) {
		fail_msg("error \"%s\" does not say \"%s\"", err, want_in_err);
	}
}

static void test_fixed_presets(void **state)
{
	(void)state;
	expect((const char *[]){ "github", NULL }, NULL,
	       "github.com api.github.com codeload.github.com raw.githubusercontent.com objects.githubusercontent.com "
	       "release-assets.githubusercontent.com github-releases.githubusercontent.com "
	       "media.githubusercontent.com github-cloud.githubusercontent.com");
	expect((const char *[]){ "anthropic", NULL }, NULL, "api.anthropic.com");
	expect((const char *[]){ "openai", NULL }, NULL, "api.openai.com");
	expect((const char *[]){ "claude-code", NULL }, NULL, "api.anthropic.com statsig.anthropic.com");
	/* duplicates are dropped: anthropic's host is in claude-code too */
	expect((const char *[]){ "anthropic", "claude-code", "API.anthropic.com", NULL }, NULL,
	       "api.anthropic.com statsig.anthropic.com");
	/* entries in every form, next to presets */
	expect((const char *[]){ "example.com:8443", "*.Example.org", "192.0.2.1", "[2001:db8::1]:22", "openai", NULL },
	       NULL, "example.com:8443 *.example.org 192.0.2.1 [2001:db8::1]:22 api.openai.com");
	expect((const char *[]){ NULL }, NULL, "");
	expect(NULL, NULL, "");
}

static void test_bad_values(void **state)
{
	(void)state;
	expect_err((const char *[]){ "pypi", "no_such_preset", NULL }, NULL, -EINVAL,
		   "--allow no_such_preset: not a preset or an allow entry (the forms: host, host:port, "
		   "*.example.com[:port], or a preset: pypi, npm,");
	expect_err((const char *[]){ "PyPI", NULL }, NULL, -EINVAL, "presets are named in lower case: --allow pypi");
	expect_err((const char *[]){ "*.com", NULL }, NULL, -EINVAL, "--allow *.com: not a preset");
	/* a mistyped preset is not taken as a one-label host name (nor with a port) */
	expect_err((const char *[]){ "pipy", NULL }, NULL, -EINVAL,
		   "--allow pipy: not a preset, and a host name of one label is not taken (write the full name, e.g. "
		   "pipy.example.com;");
	expect_err((const char *[]){ "intranet:8080", NULL }, NULL, -EINVAL, "--allow intranet:8080: not a preset");
	expect((const char *[]){ "intranet.example:8080", NULL }, NULL, "intranet.example:8080");
	expect_err((const char *[]){ "example.com:0", NULL }, NULL, -EINVAL, "the forms");
	expect_err((const char *[]){ "a\nb", NULL }, NULL, -EINVAL, "--allow a?b: not");
	expect_err((const char *[]){ "", NULL }, NULL, -EINVAL, "the forms");
}

static const char apt_one_line[] =
	"# a comment line\n"
	"deb http://deb.example.org/debian bookworm main contrib\n"
	"deb-src http://deb.example.org/debian bookworm main\n"
	"deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] https://secure.example.org/debian-security "
	"bookworm-security main # trailing comment\n"
	"deb [ trusted=yes ] http://mirror.example.net:8080/ubuntu jammy main\n"
	"   deb\thttps://tab.example.net:443/x jammy main\r\n"
	"deb http://user:secret@auth.example.com/debian bookworm main\n"
	"deb http://[2001:db8::5]/debian bookworm main\n"
	"deb cdrom:[Debian GNU/Linux 12]/ bookworm main\n"
	"deb file:/srv/mirror bookworm main\n"
	"deb copy:/srv/mirror bookworm main\n"
	"deb mirror+http://list.example.com/mirrors.txt bookworm main\n"
	"deb http://nosuite.example.com/debian\n"
	"deb [arch=amd64 http://unclosed.example.com/debian bookworm main\n"
	"#deb http://commented.example.com/debian bookworm main\n"
	"rpm http://rpm.example.com/ x y\n"
	"deb http://bad_host.example.com/debian bookworm main\n"
	"deb http://last.example.com/debian bookworm main"; /* no newline at the end */

static void test_apt_one_line(void **state)
{
	struct egress_image_files img = { .apt_sources = { apt_one_line }, .n_apt = 1 };
	(void)state;

	expect((const char *[]){ "debian", NULL }, &img,
	       "deb.example.org secure.example.org mirror.example.net:8080 tab.example.net auth.example.com "
	       "[2001:db8::5] last.example.com");
	/* apt-ubuntu reads the same files */
	expect((const char *[]){ "apt-ubuntu", NULL }, &img,
	       "deb.example.org secure.example.org mirror.example.net:8080 tab.example.net auth.example.com "
	       "[2001:db8::5] last.example.com");
}

static const char apt_deb822[] = "# deb822 sources\n"
				 "Types: deb deb-src\n"
				 "URIs: http://one.example.org/debian https://two.example.org/debian\n"
				 "# a comment inside a stanza\n"
				 "  http://three.example.org/debian\n"
				 "Suites: bookworm bookworm-updates\n"
				 "Components: main\n"
				 "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
				 "\n"
				 "Types: deb\n"
				 "URIs: http://disabled.example.org/debian\n"
				 "Suites: bookworm\n"
				 "Enabled: no\n"
				 "\n"
				 "types: deb\n"
				 "uris: http://lower.example.org:8081/debian\n"
				 "suites: bookworm\n"
				 "enabled: yes\n"
				 "\n"
				 "Types: deb\n"
				 "URIs: http://malformed.example.org/debian\n"
				 "this line is neither a field nor a continuation\n"
				 "\n"
				 "Types: rpm\n"
				 "URIs: http://notdeb.example.org/\n"
				 "\n"
				 "Types: deb\n"
				 "URIs: cdrom:/media http://after-cdrom.example.org/debian file:/srv\n"
				 "Suites: bookworm\n"
				 "\n"
				 "Types: deb\n"
				 "URIs: http://twice.example.org/\n"
				 "URIs: http://twice2.example.org/\n"
				 "\n\n"
				 "Types: deb\n"
				 "Enabled: maybe\n"
				 "URIs: http://badenabled.example.org/\n"
				 "\n"
				 "Types: deb\n"
				 "Suites: no-uris\n"
				 "\n"
				 "Types: deb\n"
				 "URIs: http://eof.example.org/debian\n"
				 "Suites: bookworm";

static void test_apt_deb822(void **state)
{
	struct egress_image_files img = { .apt_sources = { apt_deb822 }, .n_apt = 1 };
	(void)state;

	expect((const char *[]){ "debian", NULL }, &img,
	       "one.example.org two.example.org three.example.org lower.example.org:8081 after-cdrom.example.org "
	       "eof.example.org");
	/* several files, the two formats, duplicates across files dropped */
	img = (struct egress_image_files){ .apt_sources = { "deb http://one.example.org/d x main\n", apt_deb822,
							    "Types: deb\nURIs: http://z.example.org/\n" },
					   .n_apt = 3 };
	expect((const char *[]){ "debian", NULL }, &img,
	       "one.example.org two.example.org three.example.org lower.example.org:8081 after-cdrom.example.org "
	       "eof.example.org z.example.org");
}

static void test_apt_none(void **state)
{
	struct egress_image_files img = { .apt_sources = { "# nothing\n", "deb cdrom:/x y main\n",
							   "Types: deb\nURIs: http://off.example/\nEnabled: no\n" },
					  .n_apt = 3 };
	(void)state;

	expect_err((const char *[]){ "debian", NULL }, &img, -ENOENT,
		   "--allow debian: the image's apt sources (/etc/apt/sources.list");
	expect_err((const char *[]){ "apt-ubuntu", NULL }, NULL, -ENOENT, "name no http or https mirror");
	/* an image preset needs no image until it is expanded: the API's check passes it */
	char err[256] = "";
	assert_int_equal(
		egress_policy_check((char *const *)(const char *[]){ "debian", "npm", NULL }, err, sizeof(err)), 0);
	assert_int_equal(
		egress_policy_check((char *const *)(const char *[]){ "debian", "nope!", NULL }, err, sizeof(err)),
		-EINVAL);
	assert_non_null(strstr(err, "--allow nope!: not a preset"));
}

static void test_npm(void **state)
{
	struct egress_image_files img = {
		.npmrc = { "; builtin\nglobalconfig=/etc/npmrc\n",
			   "registry = "
			   "https://global.example.org/npm/\n@corp:registry=https://corp.example.com:4873/\n",
			   "# user\nregistry=\"http://user.example.net/\"\n"
			   "@env:registry=${NPM_REGISTRY}\n"
			   "//user.example.net/:_authToken=abc\n"
			   "[section]\nregistry=https://section.example.com/\n" },
		.n_npmrc = 3,
		.npm_default_registry = "https://default.example.org/",
	};
	(void)state;

	/* the last file wins for registry=; scoped registries are added; the default is not needed */
	expect((const char *[]){ "npm", NULL }, &img, "corp.example.com:4873 user.example.net");
	/* no registry= line: npm's own default, read from the image */
	img = (struct egress_image_files){ .npmrc = { "; nothing\n" },
					   .n_npmrc = 1,
					   .npm_default_registry = "https://default.example.org/" };
	expect((const char *[]){ "npm", NULL }, &img, "default.example.org");
	img.npm_default_registry = NULL;
	expect_err((const char *[]){ "npm", NULL }, &img, -ENOENT,
		   "--allow npm: the image's npm configuration names no registry");
	expect_err((const char *[]){ "npm", NULL }, NULL, -ENOENT, "names no registry");
	img.npm_default_registry = "not a url";
	expect_err((const char *[]){ "npm", NULL }, &img, -ENOENT, "names no registry");
}

static void test_npm_default_find(void **state)
{
	static const char v7[] = "const a = new Definition('registry-x', { default: 'https://wrong.example/' })\n"
				 "  registry: new Definition('registry', {\n"
				 "    default: 'https://npm-default.example.org/',\n"
				 "    type: URL,\n";
	static const char v6[] = "    'init-version': '1.0.0',\n    registry: 'https://six.example.org/',\n";
	static const char none[] = "  registry: new Definition('registry', {\n    type: URL,\n  })\n";
	char out[256];
	(void)state;

	assert_int_equal(egress_npm_default_find(v7, strlen(v7), out, sizeof(out)), 0);
	assert_string_equal(out, "https://npm-default.example.org/");
	assert_int_equal(egress_npm_default_find(v6, strlen(v6), out, sizeof(out)), 0);
	assert_string_equal(out, "https://six.example.org/");
	assert_int_equal(egress_npm_default_find(none, strlen(none), out, sizeof(out)), -ENOENT);
	assert_int_equal(egress_npm_default_find(v7, strlen(v7), out, 10), -ENOENT);
	assert_int_equal(egress_npm_default_find("", 0, out, sizeof(out)), -ENOENT);
}

static void test_cap(void **state)
{
	static char names[EGRESS_MAX_ALLOW + 2][32];
	const char *v[EGRESS_MAX_ALLOW + 3];
	char out[32768], err[512];
	(void)state;

	for (size_t i = 0; i < EGRESS_MAX_ALLOW + 1; i++) {
		(void)snprintf(names[i], sizeof(names[i]), "h%zu.example.com", i);
		v[i] = names[i];
	}
	v[EGRESS_MAX_ALLOW] = NULL;
	assert_int_equal(build(v, NULL, out, sizeof(out), err, sizeof(err)), 0); /* exactly the cap */
	v[EGRESS_MAX_ALLOW] = names[EGRESS_MAX_ALLOW];
	v[EGRESS_MAX_ALLOW + 1] = NULL;
	expect_err(v, NULL, -E2BIG, "more than 512 entries (EGRESS_MAX_ALLOW");
	assert_int_equal(egress_policy_check((char *const *)v, err, sizeof(err)), -E2BIG);
	/* 511 entries and a preset of two hosts: one past after expansion */
	v[EGRESS_MAX_ALLOW - 1] = "claude-code";
	v[EGRESS_MAX_ALLOW] = NULL;
	expect_err(v, NULL, -E2BIG, "EGRESS_MAX_ALLOW");
	/* a duplicate does not count */
	v[EGRESS_MAX_ALLOW - 1] = names[0];
	assert_int_equal(build(v, NULL, out, sizeof(out), err, sizeof(err)), 0);
	/* one past through an image preset */
	static char big[EGRESS_MAX_ALLOW * 48];
	size_t k = 0;
	for (size_t i = 0; i < EGRESS_MAX_ALLOW; i++) {
		k += (size_t)snprintf(big + k, sizeof(big) - k, "deb http://m%zu.example.org/ x main\n", i);
	}
	struct egress_image_files img = { .apt_sources = { big }, .n_apt = 1 };
	assert_int_equal(build((const char *[]){ "debian", NULL }, &img, out, sizeof(out), err, sizeof(err)), 0);
	expect_err((const char *[]){ "debian", "extra.example.com", NULL }, &img, -E2BIG, "EGRESS_MAX_ALLOW");
	expect_err((const char *[]){ "extra.example.com", "debian", NULL }, &img, -E2BIG, "EGRESS_MAX_ALLOW");
}

/* Shaped like a Go toolchain's GOROOT/go.env; the hosts are test names. */
static const char go_env_fixture[] = "# This file contains the initial defaults for go command configuration.\n"
				     "# Values set by 'go env -w' and written to the user's go/env file override "
				     "these.\n"
				     "# The environment overrides everything else.\n"
				     "\n"
				     "# Use the module mirror and checksum database by default.\n"
				     "GOPROXY=https://proxy.test.example,direct\n"
				     "GOSUMDB=sum.test.example\n"
				     "\n"
				     "# Automatically download newer toolchains as directed by go.mod files.\n"
				     "GOTOOLCHAIN=auto\n";

/* Shaped like pip's pip/_internal/models/index.py; the hosts are test names. */
static const char pip_index_fixture[] =
	"import urllib.parse\n"
	"\n"
	"\n"
	"class PackageIndex:\n"
	"    \"\"\"Represents a Package Index and provides easier access to endpoints\"\"\"\n"
	"\n"
	"    __slots__ = [\"url\", \"netloc\", \"simple_url\", \"pypi_url\", \"file_storage_domain\"]\n"
	"\n"
	"    def __init__(self, url: str, file_storage_domain: str) -> None:\n"
	"        super().__init__()\n"
	"        self.url = url\n"
	"        self.netloc = urllib.parse.urlsplit(url).netloc\n"
	"        self.simple_url = self._url_for_path(\"simple\")\n"
	"        self.pypi_url = self._url_for_path(\"pypi\")\n"
	"        self.file_storage_domain = file_storage_domain\n"
	"\n"
	"    def _url_for_path(self, path: str) -> str:\n"
	"        return urllib.parse.urljoin(self.url, path)\n"
	"\n"
	"\n"
	"PyPI = PackageIndex(\"https://index.test.example/\", file_storage_domain=\"files.test.example\")\n"
	"TestPyPI = PackageIndex(\n"
	"    \"https://test.index.test.example/\", file_storage_domain=\"test-files.test.example\"\n"
	")\n";

static void test_json(void **state)
{
	struct egress_image_files img = { .pip_conf = { "[global]\nindex-url = https://index.test.example/simple\n" },
					  .n_pip_conf = 1,
					  .go_env = { go_env_fixture },
					  .n_go_env = 1,
					  .go_found = true };
	struct egress_policy p;
	char err[256];
	json_t *v;
	char *s;
	(void)state;

	assert_int_equal(egress_policy_build((char *const *)(const char *[]){ "pypi", "example.com:8443", "pypi",
									      "go-proxy", NULL },
					     true, &img, &p, err, sizeof(err)),
			 0);
	assert_true(p.go_direct);
	v = egress_policy_json(&p);
	assert_non_null(v);
	s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
	assert_non_null(s);
	assert_string_equal(s,
			    "{\"allow\":[\"index.test.example\",\"example.com:8443\",\"proxy.test.example\","
			    "\"sum.test.example\"],\"inspect\":\"all\",\"presets\":[\"pypi\","
			    "\"go-proxy\"],\"warnings\":[\"the go-proxy preset allows a module proxy that fetches on "
			    "the box's behalf: through it the box can make the proxy contact any host a module path "
			    "names, and carry data there in the path\",\"the image's GOPROXY lists `direct`: a module "
			    "its proxies do not serve is fetched from the module's own host, which the go-proxy preset "
			    "does not allow; allow such hosts with their own --allow HOST\"]}");
	free(s);
	json_decref(v);
	assert_string_equal(p.values[0], "pypi");
	assert_string_equal(p.values[3], "go-proxy");
	assert_null(p.values[4]);

	/* box.json's form (the object and the values as given) reads back to the same policy */
	struct egress_policy back;
	v = egress_policy_json(&p);
	assert_int_equal(json_object_set_new(v, "values",
					     json_pack("[s,s,s,s]", "pypi", "example.com:8443", "pypi", "go-proxy")),
			 0);
	assert_int_equal(egress_policy_from_json(v, &back), 0);
	assert_int_equal(back.n_allow, p.n_allow);
	assert_true(back.inspect_all);
	assert_true(back.go_direct);
	assert_string_equal(back.values[1], "example.com:8443");
	assert_null(back.values[4]);
	assert_string_equal(back.allow[1].host.name, "example.com");
	assert_int_equal(back.allow[1].port, 8443);
	egress_policy_release(&back);
	(void)json_object_set_new(v, "allow", json_pack("[s]", "*.com"));
	assert_int_equal(egress_policy_from_json(v, &back), -EBADMSG);
	assert_int_equal(egress_policy_from_json(NULL, &back), -EBADMSG);
	json_decref(v);
	egress_policy_release(&p);
	assert_null(p.allow);
	egress_policy_release(&p);

	/* no direct: only the relay warning */
	img.go_env[0] = "GOPROXY=https://proxy.test.example\n";
	assert_int_equal(egress_policy_build((char *const *)(const char *[]){ "go-proxy", NULL }, false, &img, &p, err,
					     sizeof(err)),
			 0);
	assert_false(p.go_direct);
	v = egress_policy_json(&p);
	assert_int_equal(json_array_size(json_object_get(v, "warnings")), 1);
	json_decref(v);
	egress_policy_release(&p);

	assert_int_equal(egress_policy_build(NULL, false, NULL, &p, err, sizeof(err)), 0);
	v = egress_policy_json(&p);
	s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(s, "{\"allow\":[],\"inspect\":\"none\",\"presets\":[]}");
	free(s);
	json_decref(v);
	egress_policy_release(&p);
}

static void test_needs_and_warn(void **state)
{
	(void)state;
	assert_int_equal(egress_policy_needs((char *const *)(const char *[]){ "github", "example.com", NULL }), 0);
	assert_int_equal(egress_policy_needs((char *const *)(const char *[]){ "pypi", "example.com", NULL }),
			 EGRESS_NEED_PIP);
	assert_int_equal(egress_policy_needs((char *const *)(const char *[]){ "go-proxy", NULL }), EGRESS_NEED_GO);
	assert_int_equal(egress_policy_needs((char *const *)(const char *[]){ "debian", NULL }), EGRESS_NEED_APT);
	assert_int_equal(egress_policy_needs((char *const *)(const char *[]){ "npm", "apt-ubuntu", NULL }),
			 EGRESS_NEED_APT | EGRESS_NEED_NPM);
	assert_int_equal(egress_policy_needs(NULL), 0);
	assert_null(egress_policy_warn((char *const *)(const char *[]){ "pypi", NULL }));
	assert_non_null(egress_policy_warn((char *const *)(const char *[]){ "pypi", "go-proxy", NULL }));
	assert_true(egress_preset_known("claude-code"));
	assert_false(egress_preset_known("Claude-Code"));
	assert_false(egress_preset_known("example.com"));
}

static int collect(const char *entry, void *arg)
{
	char *out = arg;
	size_t n = strlen(out);

	(void)snprintf(out + n, 1024 - n, "%s%s", n ? " " : "", entry);
	return 0;
}

static int stop_at_two(const char *entry, void *arg)
{
	int *count = arg;
	(void)entry;
	return ++*count == 2 ? -ECANCELED : 0;
}

static void test_parsers_direct(void **state)
{
	char out[1024] = "";
	int count = 0;
	(void)state;

	assert_int_equal(egress_apt_parse("deb https://A.Example.ORG./x y\n", collect, out), 0);
	assert_string_equal(out, "a.example.org");
	assert_int_equal(egress_apt_parse(apt_one_line, stop_at_two, &count), -ECANCELED);
	assert_int_equal(egress_apt_parse(NULL, collect, out), 0);
	char e[EGRESS_ENTRY_TEXT_MAX];
	assert_int_equal(egress_url_entry("https://h.example:443/", 22, e), 0);
	assert_string_equal(e, "h.example");
	assert_int_equal(egress_url_entry("http://h.example:443/", 21, e), 0);
	assert_string_equal(e, "h.example:443");
	assert_int_equal(egress_url_entry("ftp://h.example/", 16, e), -EBADMSG);
	assert_int_equal(egress_url_entry("http:///x", 9, e), -EBADMSG);
	assert_int_equal(egress_url_entry("http://127.1/", 13, e), 0);
	assert_string_equal(e, "127.0.0.1"); /* a literal is kept as its address: the door refuses it later */
}

static void test_pypi_config(void **state)
{
	struct egress_image_files img = {
		.pip_conf = { "[global]\nindex-url = https://xdg.test.example/simple\n",
			      "; /etc/pip.conf\n[global]\nindex_url=https://index.test.example/simple\n"
			      "extra-index-url =\n    https://extra1.test.example/simple\n"
			      "  # https://commented.test.example/simple\n\n"
			      "    http://extra2.test.example:8080/simple /srv/local-path\n"
			      "timeout = 60\n"
			      "[install]\nfind-links: https://links.test.example/wheels/\n",
			      "[freeze]\nindex-url = https://other-section.test.example/\n" },
		.n_pip_conf = 3,
		.pip_default_index = "https://default.test.example/",
		.pip_default_files = "default-files.test.example",
		.pip_found = true,
	};
	char *env[] = { "PATH=/usr/bin", "PIP_INDEX_URL=https://env.test.example/simple", NULL };
	(void)state;

	/* a later file over an earlier one; continuation lines, comment and blank lines in a value; a path
	 * skipped; [install] read too; another command's section not; the default not needed */
	expect((const char *[]){ "pypi", NULL }, &img,
	       "index.test.example extra1.test.example extra2.test.example:8080 links.test.example");
	/* [install] in any file over [global] in any file; --KEY and upper case as pip takes them */
	img.pip_conf[2] = "[install]\n--Index-URL = https://install.test.example/simple\n";
	expect((const char *[]){ "pypi", NULL }, &img,
	       "install.test.example extra1.test.example extra2.test.example:8080 links.test.example");
	/* the environment over the files; an empty variable is unset */
	img.env = env;
	expect((const char *[]){ "pypi", NULL }, &img,
	       "env.test.example extra1.test.example extra2.test.example:8080 links.test.example");
	env[1] = "PIP_INDEX_URL=";
	expect((const char *[]){ "pypi", NULL }, &img,
	       "install.test.example extra1.test.example extra2.test.example:8080 links.test.example");
	/* extra indexes only: pip's own default index and its file host are added */
	img = (struct egress_image_files){ .pip_conf = { "[global]\nextra-index-url = https://extra.test.example/\n" },
					   .n_pip_conf = 1,
					   .pip_default_index = "https://index.test.example/",
					   .pip_default_files = "files.test.example",
					   .pip_found = true };
	expect((const char *[]){ "pypi", NULL }, &img, "extra.test.example index.test.example files.test.example");
	/* a duplicate key: the last one (pip would refuse the file; the preset takes the last) */
	img.pip_conf[0] = "[global]\nindex-url = https://a.test.example/\nindex-url = https://b.test.example/\n";
	expect((const char *[]){ "pypi", NULL }, &img, "b.test.example");
}

static void test_pypi_default(void **state)
{
	char url[256], files[256];
	struct egress_image_files img = { .pip_found = true };
	(void)state;

	assert_int_equal(egress_pip_default_find(pip_index_fixture, strlen(pip_index_fixture), url, sizeof(url), files,
						 sizeof(files)),
			 0);
	assert_string_equal(url, "https://index.test.example/");
	assert_string_equal(files, "files.test.example");
	/* no configuration: pip's built-in default */
	img.pip_default_index = url;
	img.pip_default_files = files;
	expect((const char *[]){ "pypi", NULL }, &img, "index.test.example files.test.example");
	/* the definition over lines, the second argument by position */
	static const char multi[] = "x = 1\nPyPI = PackageIndex(\n    'https://m.test.example:8443/',\n"
				    "    'mfiles.test.example',\n)\n";
	assert_int_equal(egress_pip_default_find(multi, strlen(multi), url, sizeof(url), files, sizeof(files)), 0);
	assert_string_equal(url, "https://m.test.example:8443/");
	assert_string_equal(files, "mfiles.test.example");
	/* not at a line's start, not a PackageIndex, a missing file host, a buffer too small: none */
	static const char *const bad[] = {
		"XPyPI = PackageIndex(\"https://a.test.example/\", file_storage_domain=\"f.test.example\")\n",
		"PyPI = Other(\"https://a.test.example/\", file_storage_domain=\"f.test.example\")\n",
		"PyPI = PackageIndex(\"https://a.test.example/\")\n",
		"PyPI = PackageIndex(\"https://a.test.example/\", file_storage_domain=\"\")\n",
		"PyPI = PackageIndex(\"ftp://a.test.example/\", file_storage_domain=\"f.test.example\")\n",
		"",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(
			egress_pip_default_find(bad[i], strlen(bad[i]), url, sizeof(url), files, sizeof(files)),
			-ENOENT);
	}
	assert_int_equal(
		egress_pip_default_find(pip_index_fixture, strlen(pip_index_fixture), url, 10, files, sizeof(files)),
		-ENOENT);
	/* a file host that is not a host name adds nothing */
	img.pip_default_index = "https://index.test.example/";
	img.pip_default_files = "bad/host";
	expect((const char *[]){ "pypi", NULL }, &img, "index.test.example");
}

static void test_pypi_none(void **state)
{
	struct egress_image_files img = { 0 };
	(void)state;

	/* no pip and no configuration */
	expect_err((const char *[]){ "pypi", NULL }, NULL, -ENOENT, "--allow pypi: the image has no pip");
	expect_err((const char *[]){ "pypi", NULL }, &img, -ENOENT, "name the index's hosts with --allow HOST");
	/* pip whose default could not be read, and no configuration */
	img.pip_found = true;
	expect_err((const char *[]){ "pypi", NULL }, &img, -ENOENT, "names no http or https index");
	/* a configuration naming only a local index, no pip */
	img = (struct egress_image_files){ .pip_conf = { "[global]\nindex-url = file:///srv/simple\n" },
					   .n_pip_conf = 1 };
	expect_err((const char *[]){ "pypi", NULL }, &img, -ENOENT, "names no http or https index");
	/* a bad value is named before an image preset's refusal */
	expect_err((const char *[]){ "pypi", "nope!", NULL }, NULL, -EINVAL, "--allow nope!: not a preset");
}

static void test_go(void **state)
{
	struct egress_image_files img = { .go_env = { go_env_fixture }, .n_go_env = 1, .go_found = true };
	char *env[] = { "GOSUMDB=sum.test.example+c9a8c7d6+AbCdEf https://sumdb.test.example/x", "GOPROXY=off", NULL };
	struct egress_policy p;
	char err[512];
	(void)state;

	expect((const char *[]){ "go-proxy", NULL }, &img, "proxy.test.example sum.test.example");
	/* the user's go env file over GOROOT/go.env, key by key; `|` lists; a later line wins */
	img.go_env[1] = "GOPROXY=https://old.test.example\n"
			"GOPROXY=https://corp.test.example/go|http://proxy2.test.example:8443/\n";
	img.n_go_env = 2;
	expect((const char *[]){ "go-proxy", NULL }, &img,
	       "corp.test.example proxy2.test.example:8443 sum.test.example");
	assert_int_equal(egress_policy_build((char *const *)(const char *[]){ "go-proxy", NULL }, false, &img, &p, err,
					     sizeof(err)),
			 0);
	assert_false(p.go_direct);
	egress_policy_release(&p);
	/* the environment over both: GOPROXY off, GOSUMDB with a key and a URL */
	img.env = env;
	expect((const char *[]){ "go-proxy", NULL }, &img, "sumdb.test.example");
	/* scheme-less proxies are https as go reads them; file URLs, paths, single words and off skipped */
	env[0] = "GOSUMDB=off";
	env[1] = "GOPROXY= mirror.test.example/go ,file:///srv/mods,/srv/mods,single,off,,direct";
	assert_int_equal(egress_policy_build((char *const *)(const char *[]){ "go-proxy", NULL }, false, &img, &p, err,
					     sizeof(err)),
			 0);
	assert_int_equal(p.n_allow, 1);
	assert_string_equal(p.allow[0].host.name, "mirror.test.example");
	assert_true(p.go_direct);
	egress_policy_release(&p);
	/* only direct, and no checksum database: nothing to allow */
	env[1] = "GOPROXY=direct";
	expect_err((const char *[]){ "go-proxy", NULL }, &img, -ENOENT,
		   "--allow go-proxy: the image's GOPROXY names no http or https proxy");
}

static void test_go_none(void **state)
{
	struct egress_image_files img = { 0 };
	char *env[] = { "GOPROXY=https://env.test.example", NULL };
	(void)state;

	expect_err((const char *[]){ "go-proxy", NULL }, NULL, -ENOENT, "--allow go-proxy: the image has no Go");
	expect_err((const char *[]){ "go-proxy", NULL }, &img, -ENOENT, "name the module proxy's hosts with --allow");
	/* no Go, but the box's environment names a proxy: it is taken */
	img.env = env;
	expect((const char *[]){ "go-proxy", NULL }, &img, "env.test.example");
}

static void test_go_parsers(void **state)
{
	char e[EGRESS_ENTRY_TEXT_MAX];
	const char *v;
	size_t n;
	(void)state;

	assert_int_equal(egress_gosumdb_entry("off", 3, e), -ENOENT);
	assert_int_equal(egress_gosumdb_entry("  ", 2, e), -ENOENT);
	assert_int_equal(egress_gosumdb_entry("a b c", 5, e), -EBADMSG);
	assert_int_equal(egress_gosumdb_entry("+key", 4, e), -EBADMSG);
	assert_int_equal(egress_gosumdb_entry("sum.test.example+abc+def", 24, e), 0);
	assert_string_equal(e, "sum.test.example");
	assert_int_equal(egress_gosumdb_entry("n+k sumdb.test.example:444", 26, e), 0);
	assert_string_equal(e, "sumdb.test.example:444");
	assert_int_equal(egress_gosumdb_entry("n+k ftp://x.test.example/", 25, e), -EBADMSG);
	/* Go's env file: lines not starting with A-Z ignored, the last line wins, trailing blanks dropped */
	assert_int_equal(egress_go_env_value(" GOPROXY=a\n#GOPROXY=b\nGOPROXY=c \r\nGOPROXYX=d\n", "GOPROXY", &v, &n),
			 0);
	assert_int_equal(n, 1);
	assert_int_equal(v[0], 'c');
	assert_int_equal(egress_go_env_value("GOSUMDB=x\n", "GOPROXY", &v, &n), -ENOENT);
	assert_int_equal(egress_go_env_value(NULL, "GOPROXY", &v, &n), -ENOENT);
}

static void test_pip_conf_value(void **state)
{
	const char *v;
	size_t n;
	char out[1024] = "";
	(void)state;

	/* a key before any section, one in another section, and an indented line of another key: not ours */
	static const char conf[] = "index-url = https://nosection.test.example/\n"
				   "[global]\n"
				   "trusted-host = a\n"
				   "    https://continuation-of-other.test.example/\n"
				   "extra-index-url = https://one.test.example/\n"
				   "# comment\n"
				   "\thttps://two.test.example/ https://three.test.example/\n"
				   "[globalx]\n"
				   "extra-index-url = https://x.test.example/\n";
	assert_int_equal(egress_pip_conf_value(conf, "global", "index-url", &v, &n), -ENOENT);
	assert_int_equal(egress_pip_conf_value(conf, "global", "extra-index-url", &v, &n), 0);
	assert_int_equal(egress_pip_urls(v, n, collect, out), 0);
	assert_string_equal(out, "one.test.example two.test.example three.test.example");
	assert_int_equal(egress_pip_conf_value(NULL, "global", "index-url", &v, &n), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fixed_presets),
		cmocka_unit_test(test_bad_values),
		cmocka_unit_test(test_apt_one_line),
		cmocka_unit_test(test_apt_deb822),
		cmocka_unit_test(test_apt_none),
		cmocka_unit_test(test_npm),
		cmocka_unit_test(test_npm_default_find),
		cmocka_unit_test(test_cap),
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_needs_and_warn),
		cmocka_unit_test(test_parsers_direct),
		cmocka_unit_test(test_pypi_config),
		cmocka_unit_test(test_pypi_default),
		cmocka_unit_test(test_pypi_none),
		cmocka_unit_test(test_go),
		cmocka_unit_test(test_go_none),
		cmocka_unit_test(test_go_parsers),
		cmocka_unit_test(test_pip_conf_value),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
