/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "egress/host.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * FuzzHostText (paper Table 14): host text accepted as an IP literal is
 * checked as that literal; text accepted as a name is not one inet_aton (or
 * inet_pton) reads as an address. Also: a name is canonical (lower case,
 * bounded, re-parses to itself); a literal's canonical text re-parses to the
 * same address and class; an authority, URL or allow entry that parses has a
 * host that does too, and its door url fits EGRESS_URL_MAX.
 */
static void check_host(const char *text, size_t n, const struct egress_host *h)
{
	struct egress_host again;
	struct in_addr ia;
	uint8_t six[16];
	size_t len = strlen(h->name);

	if (h->kind == EGRESS_HOST_NAME) {
		if (inet_aton(text, &ia) == 1 || inet_pton(AF_INET6, text, six) == 1 || len == 0 ||
		    len > EGRESS_NAME_MAX) {
			abort();
		}
		for (size_t i = 0; i < len; i++) {
			if (h->name[i] >= 'A' && h->name[i] <= 'Z') {
				abort();
			}
		}
	}
	if (egress_host_parse(h->name, len, &again) != 0 || again.kind != h->kind || strcmp(again.name, h->name) != 0) {
		abort();
	}
	if (h->kind == EGRESS_HOST_ADDR) {
		if (!egress_addr_equal(&again.addr, &h->addr) ||
		    egress_host_classify(h, NULL, NULL, 0) != egress_addr_classify(&again.addr, NULL, NULL, 0) ||
		    egress_host_classify(h, NULL, NULL, EGRESS_ALLOW_PRIVATE) !=
			    egress_addr_classify(&again.addr, NULL, NULL, EGRESS_ALLOW_PRIVATE)) {
			abort();
		}
	}
	(void)n;
}

static void check_url(const struct egress_host *h, uint16_t port, enum egress_req_kind kind)
{
	char url[EGRESS_URL_MAX];

	for (int m = EGRESS_MATCH_NONE; m <= EGRESS_MATCH_PORT; m++) {
		if (egress_door_url(kind, h, port, (enum egress_match)m, url, sizeof(url)) <= 0) {
			abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char text[EGRESS_HOST_TEXT_MAX + 16];
	struct egress_host h;
	struct egress_allow e;
	uint16_t port;
	size_t off;

	if (size >= sizeof(text) || memchr(data, '\0', size)) {
		return 0;
	}
	memcpy(text, data, size);
	text[size] = '\0';
	if (egress_host_parse(text, size, &h) == 0) {
		check_host(text, size, &h);
		check_url(&h, 443, EGRESS_REQ_CONNECT);
	}
	if (egress_authority_parse(text, size, &h, &port) == 0) {
		if (port == 0) {
			abort();
		}
		check_host(h.name, strlen(h.name), &h);
		check_url(&h, port, EGRESS_REQ_CONNECT);
	}
	if (egress_url_parse(text, size, &h, &port, &off) == 0) {
		if (port == 0 || off > size || (off < size && text[off] != '/' && text[off] != '?')) {
			abort();
		}
		check_host(h.name, strlen(h.name), &h);
		check_url(&h, port, EGRESS_REQ_ABSOLUTE);
	}
	if (egress_allow_parse(text, &e) == 0) {
		/* an exact entry matches its own host on its port (or 443 when it names none) */
		if (!e.wildcard && egress_allow_match(&e, 1, &e.host, e.port ? e.port : 443) == EGRESS_MATCH_NONE) {
			abort();
		}
		if (e.wildcard && egress_allow_match(&e, 1, &e.host, e.port ? e.port : 443) != EGRESS_MATCH_NONE) {
			abort(); /* "*.example.com" does not cover example.com */
		}
	}
	return 0;
}
