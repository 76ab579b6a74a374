/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "image/ref.h"

bool image_digest_valid(const char *s)
{
	if (!s || strncmp(s, "sha256:", 7) != 0 || strlen(s) != IMAGE_DIGEST_LEN) {
		return false;
	}
	for (const char *p = s + 7; *p; p++) {
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) {
			return false;
		}
	}
	return true;
}

static bool is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_alnum(char c)
{
	return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

/* One path component: [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)* (docker's reference grammar). */
static bool component_valid(const char *s, size_t n)
{
	size_t i = 0;
	if (n == 0 || !is_lower_alnum(s[0]) || !is_lower_alnum(s[n - 1])) {
		return false;
	}
	while (i < n) {
		if (is_lower_alnum(s[i])) {
			i++;
			continue;
		}
		/* a separator run: '.', '_', '__', or one or more '-' */
		size_t j = i;
		if (s[i] == '.') {
			j = i + 1;
		} else if (s[i] == '_') {
			j = i + 1;
			if (j < n && s[j] == '_') {
				j++;
			}
		} else if (s[i] == '-') {
			while (j < n && s[j] == '-') {
				j++;
			}
		} else {
			return false;
		}
		if (j >= n || !is_lower_alnum(s[j])) {
			return false;
		}
		i = j;
	}
	return true;
}

/* host[:port]: labels of [A-Za-z0-9-] not starting or ending with '-', port 1..65535. */
static bool domain_valid(const char *s, size_t n)
{
	const char *colon = memchr(s, ':', n);
	size_t hn = colon ? (size_t)(colon - s) : n;
	size_t label = 0;
	if (hn == 0) {
		return false;
	}
	for (size_t i = 0; i < hn; i++) {
		char c = s[i];
		if (c == '.') {
			if (label == 0 || s[i - 1] == '-') {
				return false;
			}
			label = 0;
			continue;
		}
		if (!(is_alnum(c) || c == '-') || (label == 0 && c == '-')) {
			return false;
		}
		label++;
	}
	if (label == 0 || s[hn - 1] == '-') {
		return false;
	}
	if (colon) {
		unsigned long port = 0;
		size_t pn = n - hn - 1;
		if (pn == 0 || pn > 5) {
			return false;
		}
		for (size_t i = hn + 1; i < n; i++) {
			if (s[i] < '0' || s[i] > '9') {
				return false;
			}
			port = port * 10 + (unsigned long)(s[i] - '0');
		}
		if (port == 0 || port > 65535) {
			return false;
		}
	}
	return true;
}

/* [A-Za-z0-9_][A-Za-z0-9_.-]{0,127} */
static bool tag_valid(const char *s, size_t n)
{
	if (n == 0 || n > IMAGE_REF_MAX_TAG || !(is_alnum(s[0]) || s[0] == '_')) {
		return false;
	}
	for (size_t i = 1; i < n; i++) {
		if (!(is_alnum(s[i]) || s[i] == '_' || s[i] == '.' || s[i] == '-')) {
			return false;
		}
	}
	return true;
}

void image_ref_release(struct image_ref *r)
{
	if (!r) {
		return;
	}
	free(r->registry);
	free(r->repository);
	free(r->tag);
	free(r->digest);
	free(r->path);
	free(r->name);
	*r = (struct image_ref){ 0 };
}

static int parse_local(const char *s, enum image_ref_kind kind, struct image_ref *ret)
{
	struct image_ref r = { .kind = kind };
	const char *colon = strrchr(s, ':');
	size_t pn = strlen(s);
	if (kind != IMAGE_REF_DOCKER_ARCHIVE && colon && colon != s && !strchr(colon, '/') &&
	    tag_valid(colon + 1, strlen(colon + 1))) {
		pn = (size_t)(colon - s);
		r.name = strdup(colon + 1);
		if (!r.name) {
			return -ENOMEM;
		}
	}
	if (pn == 0 || memchr(s, '\n', pn)) {
		image_ref_release(&r);
		return -EINVAL;
	}
	r.path = strndup(s, pn);
	if (!r.path) {
		image_ref_release(&r);
		return -ENOMEM;
	}
	*ret = r;
	return 0;
}

int image_ref_parse(const char *s, struct image_ref *ret)
{
	struct image_ref r = { .kind = IMAGE_REF_REGISTRY };
	size_t n;
	const char *at, *name_end, *slash, *rest, *tag = NULL;
	size_t name_n;
	int rc;

	if (!s) {
		return -EINVAL;
	}
	n = strlen(s);
	if (n == 0) {
		return -EINVAL;
	}
	if (n > IMAGE_REF_MAX_LEN) {
		return -ENAMETOOLONG;
	}
	if (strncmp(s, "oci:", 4) == 0) {
		return parse_local(s + 4, IMAGE_REF_OCI_DIR, ret);
	}
	if (strncmp(s, "oci-archive:", 12) == 0) {
		return parse_local(s + 12, IMAGE_REF_OCI_ARCHIVE, ret);
	}
	if (strncmp(s, "docker-archive:", 15) == 0) {
		return parse_local(s + 15, IMAGE_REF_DOCKER_ARCHIVE, ret);
	}

	at = strchr(s, '@');
	name_end = at ? at : s + n;
	if (at && !image_digest_valid(at + 1)) {
		return -EINVAL;
	}
	/* a tag is the part after the last ':' that follows the last '/' */
	slash = NULL;
	for (const char *p = s; p < name_end; p++) {
		if (*p == '/') {
			slash = p;
		}
	}
	for (const char *p = slash ? slash : s; p < name_end; p++) {
		if (*p == ':') {
			tag = p;
		}
	}
	if (tag) {
		if (!tag_valid(tag + 1, (size_t)(name_end - tag - 1))) {
			return -EINVAL;
		}
		name_end = tag;
	}
	name_n = (size_t)(name_end - s);
	if (name_n == 0) {
		return -EINVAL;
	}
	if (name_n > IMAGE_REF_MAX_NAME) {
		return -ENAMETOOLONG;
	}

	/* the first component is a registry when it has '.' or ':' or is "localhost" */
	slash = memchr(s, '/', name_n);
	rest = s;
	if (slash) {
		size_t dn = (size_t)(slash - s);
		bool is_domain =
			memchr(s, '.', dn) || memchr(s, ':', dn) || (dn == 9 && strncmp(s, "localhost", 9) == 0);
		if (is_domain) {
			if (!domain_valid(s, dn)) {
				return -EINVAL;
			}
			if (dn == 15 && strncmp(s, "index.docker.io", 15) == 0) {
				r.registry = strdup("docker.io");
			} else {
				r.registry = strndup(s, dn);
			}
			rest = slash + 1;
		}
	}
	if (!r.registry) {
		r.registry = strdup("docker.io");
	}
	if (!r.registry) {
		return -ENOMEM;
	}
	/* validate each path component of the repository */
	{
		const char *p = rest;
		while (p < name_end) {
			const char *e = memchr(p, '/', (size_t)(name_end - p));
			if (!e) {
				e = name_end;
			}
			if (!component_valid(p, (size_t)(e - p))) {
				image_ref_release(&r);
				return -EINVAL;
			}
			p = e == name_end ? e : e + 1;
			if (e != name_end && p == name_end) {
				image_ref_release(&r);
				return -EINVAL;
			}
		}
		if (rest >= name_end) {
			image_ref_release(&r);
			return -EINVAL;
		}
	}
	if (strcmp(r.registry, "docker.io") == 0 && !memchr(rest, '/', (size_t)(name_end - rest))) {
		rc = asprintf(&r.repository, "library/%.*s", (int)(name_end - rest), rest);
		if (rc < 0) {
			r.repository = NULL;
		}
	} else {
		r.repository = strndup(rest, (size_t)(name_end - rest));
	}
	if (!r.repository) {
		image_ref_release(&r);
		return -ENOMEM;
	}
	if (tag) {
		size_t tn = (size_t)((at ? at : s + n) - tag - 1);
		r.tag = strndup(tag + 1, tn);
	} else if (!at) {
		r.tag = strdup("latest");
	}
	if (at) {
		r.digest = strdup(at + 1);
	}
	if ((!r.tag && !at) || (at && !r.digest)) {
		image_ref_release(&r);
		return -ENOMEM;
	}
	*ret = r;
	return 0;
}

int image_ref_canonical(const struct image_ref *r, char **ret)
{
	char *s = NULL;
	int rc;
	switch (r->kind) {
	case IMAGE_REF_REGISTRY:
		rc = asprintf(&s, "%s/%s%s%s%s%s", r->registry, r->repository, r->tag ? ":" : "", r->tag ? r->tag : "",
			      r->digest ? "@" : "", r->digest ? r->digest : "");
		break;
	case IMAGE_REF_OCI_DIR:
	case IMAGE_REF_OCI_ARCHIVE:
	case IMAGE_REF_DOCKER_ARCHIVE:
		rc = asprintf(&s, "%s:%s%s%s",
			      r->kind == IMAGE_REF_OCI_DIR	 ? "oci"
			      : r->kind == IMAGE_REF_OCI_ARCHIVE ? "oci-archive"
								 : "docker-archive",
			      r->path, r->name ? ":" : "", r->name ? r->name : "");
		break;
	default:
		return -EINVAL;
	}
	if (rc < 0) {
		return -ENOMEM;
	}
	*ret = s;
	return 0;
}

const char *image_ref_api_host(const struct image_ref *r)
{
	if (r->registry && strcmp(r->registry, "docker.io") == 0) {
		return "registry-1.docker.io";
	}
	return r->registry;
}
