/* SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "egress/preset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * The image-file parsers of the allow presets (apt sources in both formats,
 * npmrc, npm's default registry, pip.conf values and URL lists, pip's default
 * index, Go env files, GOPROXY and GOSUMDB): every host they return parses as
 * an allow entry, is not a wildcard, and formats back to the same text; a
 * value found is a piece of the input; a policy built from the input as the
 * image's files holds at most EGRESS_MAX_ALLOW entries, each of which parses;
 * the default registry and pip's default index are pieces of the input.
 */
static void check_entry(const char *entry)
{
	struct egress_allow e;
	char again[EGRESS_ENTRY_TEXT_MAX];

	if (strlen(entry) >= EGRESS_ENTRY_TEXT_MAX || egress_allow_parse(entry, &e) != 0 || e.wildcard) {
		abort();
	}
	egress_allow_format(&e, again);
	if (strcmp(again, entry) != 0) {
		abort();
	}
}

static int on_apt(const char *entry, void *arg)
{
	(void)arg;
	check_entry(entry);
	return 0;
}

static int on_npmrc(const char *entry, bool is_default, void *arg)
{
	(void)is_default;
	(void)arg;
	check_entry(entry);
	return 0;
}

/* A value a parser found lies within the input. */
static void check_within(const char *v, size_t n, const char *s, size_t size)
{
	if (v < s || v + n > s + size) {
		abort();
	}
}

static void fuzz_pip_go(const char *s, size_t size)
{
	static const char *const sections[] = { "global", "install" };
	static const char *const keys[] = { "index-url", "extra-index-url", "find-links" };
	static const char *const go_keys[] = { "GOPROXY", "GOSUMDB" };
	char url[512], files[256], e[EGRESS_ENTRY_TEXT_MAX];
	const char *v;
	size_t n;
	bool direct;

	for (size_t i = 0; i < 2; i++) {
		for (size_t k = 0; k < 3; k++) {
			if (egress_pip_conf_value(s, sections[i], keys[k], &v, &n) == 0) {
				check_within(v, n, s, size);
				if (egress_pip_urls(v, n, on_apt, NULL) != 0) {
					abort();
				}
			}
		}
		if (egress_go_env_value(s, go_keys[i], &v, &n) == 0) {
			check_within(v, n, s, size);
		}
	}
	/* the whole input as a value too */
	if (egress_pip_urls(s, size, on_apt, NULL) != 0 || egress_goproxy_parse(s, size, &direct, on_apt, NULL) != 0) {
		abort();
	}
	if (egress_gosumdb_entry(s, size, e) == 0) {
		check_entry(e);
	}
	if (egress_pip_default_find(s, size, url, sizeof(url), files, sizeof(files)) == 0 &&
	    (!memmem(s, size, url, strlen(url)) || !memmem(s, size, files, strlen(files)))) {
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct egress_image_files img = { 0 };
	struct egress_policy p;
	char err[512], url[512], text[EGRESS_ENTRY_TEXT_MAX], pip_url[512], pip_files[256];
	char *s;

	if (size > 65536) {
		return 0;
	}
	s = malloc(size + 1);
	if (!s) {
		return 0;
	}
	memcpy(s, data, size);
	s[size] = '\0';

	if (egress_apt_parse(s, on_apt, NULL) != 0 || egress_npmrc_parse(s, on_npmrc, NULL) != 0) {
		abort();
	}
	if (egress_npm_default_find(s, size, url, sizeof(url)) == 0 && !memmem(data, size, url, strlen(url))) {
		abort();
	}
	img.apt_sources[0] = s;
	img.n_apt = 1;
	img.npmrc[0] = s;
	img.n_npmrc = 1;
	img.npm_default_registry = egress_npm_default_find(s, size, url, sizeof(url)) == 0 ? url : NULL;
	fuzz_pip_go(s, size);
	img.pip_conf[0] = s;
	img.n_pip_conf = 1;
	img.pip_found = egress_pip_default_find(s, size, pip_url, sizeof(pip_url), pip_files, sizeof(pip_files)) == 0;
	img.pip_default_index = img.pip_found ? pip_url : NULL;
	img.pip_default_files = img.pip_found ? pip_files : NULL;
	img.go_env[0] = s;
	img.n_go_env = 1;
	if (egress_policy_build((char *const *)(const char *[]){ "debian", "npm", "pypi", "go-proxy", NULL }, false,
				&img, &p, err, sizeof(err)) == 0) {
		if (p.n_allow > EGRESS_MAX_ALLOW) {
			abort();
		}
		for (size_t i = 0; i < p.n_allow; i++) {
			egress_allow_format(&p.allow[i], text);
			check_entry(text);
		}
		egress_policy_release(&p);
	}
	free(s);
	return 0;
}
