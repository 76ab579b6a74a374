/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_EGRESS_PRESET_H
#define TKBOX_EGRESS_PRESET_H

#include <stdbool.h>
#include <stddef.h>

#include "egress/host.h"
#include "json.h"

/*
 * A box's allowlist: the --allow values (entries and preset names) expanded
 * into one list of egress_allow entries. Pure: no I/O. The hosts of the
 * presets that depend on the image (debian, apt-ubuntu, npm, pypi, go-proxy)
 * come from the image's own files, which the daemon reads
 * (src/daemon/image-files.c) and passes in as texts, and from the box's
 * environment; no registry or mirror host is written in this code.
 *
 * Presets (the reference's Table 5):
 *   github, anthropic, openai, claude-code: fixed host lists (preset.c);
 *   pypi: the indexes the image's pip would use: index-url, extra-index-url
 *     and find-links from PIP_* in the box's environment, else the pip.conf
 *     files ([install] over [global], a later file over an earlier one);
 *     without an index-url, the default index and file host built into the
 *     image's pip (its pip/_internal/models/index.py). An error when the image
 *     has neither pip nor a configuration naming an index;
 *   go-proxy: the proxies of GOPROXY and the checksum database of GOSUMDB, from
 *     the box's environment, else the user's go env file, else GOROOT/go.env;
 *     egress_policy_warn says it relays, and the policy's JSON warns when
 *     GOPROXY holds `direct`. An error when the image has no Go and names none;
 *   debian, apt-ubuntu: every host the image's apt sources name
 *     (sources.list one-line format and deb822 .sources; both presets read the
 *     same files); an error when the image names none;
 *   npm: the registry the image's npm would use (the last `registry=` of its
 *     npmrc files, in the order given, lowest precedence first; else npm's
 *     built-in default as read from the image), plus any `@scope:registry=`;
 *     an error when there is neither.
 */

#define EGRESS_PRESET_NAME_MAX 32
#define EGRESS_IMAGE_APT_MAX 16 /* apt source files read from an image */
#define EGRESS_IMAGE_NPMRC_MAX 8 /* npmrc files read from an image */
#define EGRESS_IMAGE_PIP_MAX 4 /* pip.conf files read from an image */
#define EGRESS_IMAGE_GOENV_MAX 2 /* Go env files read from an image: GOROOT/go.env and the user's */
#define EGRESS_ENTRY_TEXT_MAX (EGRESS_HOST_TEXT_MAX + 8) /* "*." + host + ":65535" + NUL */

/* The texts of the image's files (NUL-terminated; any may be absent). */
struct egress_image_files {
	const char *apt_sources[16]; /* sources.list, sources.list.d/ *.list and *.sources texts */
	size_t n_apt;
	const char *npmrc[8]; /* lowest precedence first: npm's builtin npmrc, global, /root/.npmrc */
	size_t n_npmrc;
	const char *npm_default_registry; /* the URL npm's own config definitions name as default, or NULL */
	const char *pip_conf[4]; /* lowest precedence first: /etc/xdg/pip, /etc, /root/.pip, /root/.config/pip */
	size_t n_pip_conf;
	const char *pip_default_index; /* the index URL the image's pip has built in (egress_pip_default_find) */
	const char *pip_default_files; /* the host name its files are stored on, or NULL */
	bool pip_found; /* the image has pip (its models/index.py), whether or not its default could be read */
	const char *go_env[2]; /* lowest precedence first: GOROOT/go.env, then the user's go env file */
	size_t n_go_env;
	bool go_found; /* the image has a Go toolchain with a GOROOT/go.env */
	char *const *env; /* the box's environment (NAME=VALUE, NULL-terminated) or NULL: PIP_*, GOPROXY, GOSUMDB */
};

struct egress_policy {
	struct egress_allow *allow;
	size_t n_allow;
	char **values; /* as given, NULL-terminated */
	bool inspect_all;
	bool go_direct; /* the go-proxy preset found `direct` in GOPROXY: the JSON warns */
};

/*
 * Expand values (NULL-terminated; NULL for none). Each value is a preset name
 * or an allow entry (host, host:port, *.example.com[:port]). Duplicates are
 * dropped. img may be NULL when no value names an image preset.
 * 0, or -EINVAL (an unknown preset or a bad entry: err names the value and the
 * forms accepted), -ENOENT (an image preset whose files name no host),
 * -E2BIG (more than EGRESS_MAX_ALLOW entries after expansion), -ENOMEM.
 * *ret is written only on success; release it with egress_policy_release.
 */
_wur_ int egress_policy_build(char *const *values, bool inspect_all, const struct egress_image_files *img,
			      struct egress_policy *ret, char *err, size_t err_size);

/* {allow: [expanded entries as text], presets: [names used], inspect: "all"|"none"}; NULL on ENOMEM. */
json_t *egress_policy_json(const struct egress_policy *p);

/*
 * The policy as box.json keeps it: egress_policy_json's object plus
 * "values" (as given). Entries are re-parsed; -EBADMSG when one does not
 * parse or the object is not that shape.
 */
_wur_ int egress_policy_from_json(const json_t *v, struct egress_policy *ret);

/* Free what p holds (p itself is not freed); p is left empty. NULL-safe. */
void egress_policy_release(struct egress_policy *p);

/*
 * What the API checks before a box is made: every value is a preset name or an
 * allow entry, and the fixed presets and entries alone fit EGRESS_MAX_ALLOW.
 * 0, -EINVAL or -E2BIG with err as egress_policy_build writes it.
 */
_wur_ int egress_policy_check(char *const *values, char *err, size_t err_size);

/* Which image files the values need: a mask of the bits below (0: no image read needed). */
#define EGRESS_NEED_APT 1u
#define EGRESS_NEED_NPM 2u
#define EGRESS_NEED_PIP 4u
#define EGRESS_NEED_GO 8u
unsigned egress_policy_needs(char *const *values);

/* Is name a preset? */
bool egress_preset_known(const char *name);

/*
 * A warning for a person about the values (go-proxy relays to other hosts), or
 * NULL. Static text.
 */
const char *egress_policy_warn(char *const *values);

/* One entry as text: "host", "host:port", "*.suffix[:port]", "[v6]:port". */
void egress_allow_format(const struct egress_allow *e, char out[EGRESS_ENTRY_TEXT_MAX]);

/*
 * The parsers, exposed for tests and the fuzz target. Each calls fn(entry,
 * arg) for every host it finds, entry text as egress_allow_parse reads it
 * ("host" or "host:port"); fn returns < 0 to stop (returned as is).
 *
 * egress_apt_parse: one apt sources file. deb822 when its first line that is
 * not blank or a comment is a "Field:" line, one-line format otherwise. URIs
 * with http or https (any other scheme, e.g. cdrom, file, copy, mirror+file,
 * tor+http, is skipped); `Enabled: no` stanzas skipped; one-line [options]
 * skipped over; a malformed line or stanza is skipped. 0 or fn's error.
 */
_wur_ int egress_apt_parse(const char *text, int (*fn)(const char *entry, void *arg), void *arg);

/*
 * egress_npmrc_parse: one npmrc (ini) file; `registry=URL` and
 * `@scope:registry=URL` lines. Values with ${...} expansions or that are not
 * http(s) URLs are skipped. fn gets is_default true for `registry=`.
 */
_wur_ int egress_npmrc_parse(const char *text, int (*fn)(const char *entry, bool is_default, void *arg), void *arg);

/* The host[:port] entry of an http(s) URL, written to out; -EBADMSG when it is not one. */
_wur_ int egress_url_entry(const char *url, size_t n, char out[EGRESS_ENTRY_TEXT_MAX]);

/*
 * The default registry URL npm's own config definitions give (the JS text of
 * its definitions file): the first string literal after `default:` in the
 * `registry` definition. -ENOENT when there is none.
 */
_wur_ int egress_npm_default_find(const char *js, size_t n, char *out, size_t out_size);

/*
 * egress_pip_conf_value: in one pip.conf (ini, as Python's configparser reads
 * it: `key = value` or `key: value`, indented continuation lines, full-line
 * `#` and `;` comments), the value of key in [section] (key compared as pip
 * does: any case, `_` as `-`, an optional leading `--`); the last one when
 * the key is there twice. [*ret_v, *ret_v + *ret_n) spans its first line and
 * continuation lines. -ENOENT when it is not there.
 */
_wur_ int egress_pip_conf_value(const char *text, const char *section, const char *key, const char **ret_v,
				size_t *ret_n);

/*
 * egress_pip_urls: the http(s) URLs of a pip value (whitespace-separated, over
 * lines; comment lines skipped; anything else, e.g. a local path, skipped):
 * fn(entry) for each. 0 or fn's error.
 */
_wur_ int egress_pip_urls(const char *v, size_t n, int (*fn)(const char *entry, void *arg), void *arg);

/*
 * egress_pip_default_find: in pip's pip/_internal/models/index.py text, the
 * `PyPI = PackageIndex("URL", file_storage_domain="HOST")` line (within 1 KiB
 * of its start): the URL into url, the host into files. -ENOENT when there is
 * none or a string does not fit.
 */
_wur_ int egress_pip_default_find(const char *py, size_t n, char *url, size_t url_size, char *files, size_t files_size);

/*
 * egress_go_env_value: in a Go env file (GOROOT/go.env, the user's go/env),
 * the value of the last `KEY=VALUE` line for key, as Go reads it (a line not
 * starting with A-Z is ignored). -ENOENT when it is not there.
 */
_wur_ int egress_go_env_value(const char *text, const char *key, const char **ret_v, size_t *ret_n);

/*
 * egress_goproxy_parse: a GOPROXY list (`,` and `|` separated): fn(entry)
 * for each http(s) URL (a scheme-less entry with a `.`, `:` or `/` is https,
 * as Go reads it); `direct` sets *ret_direct; `off`, file URLs and paths are
 * skipped. 0 or fn's error.
 */
_wur_ int egress_goproxy_parse(const char *v, size_t n, bool *ret_direct, int (*fn)(const char *entry, void *arg),
			       void *arg);

/*
 * egress_gosumdb_entry: the host of a GOSUMDB value: `off` or empty gives
 * -ENOENT; `NAME[+KEY]` the host of https://NAME; `NAME+KEY URL` the URL's
 * host (a scheme-less URL is https). -EBADMSG when it is none of these.
 */
_wur_ int egress_gosumdb_entry(const char *v, size_t n, char out[EGRESS_ENTRY_TEXT_MAX]);

#endif
