/* SPDX-License-Identifier: Apache-2.0 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "cli/config.h"
#include "daemon/daemon.h"
#include "egress/host.h"

/*
 * config_parse over arbitrary bytes. A refusal starts with the file name and
 * fits the buffer; an accepted file keeps every cap, every list is
 * NULL-terminated at its count, and each secret's --secret text reads back
 * (egress_secret_binding_parse) to the same hosts and header. Anything else
 * is a finding (abort()).
 */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_secret(const struct config_secret *s)
{
	struct egress_secret e = { 0 };
	char *flag = NULL, why[512];
	const char *at;

	if (!egress_secret_name_ok(s->name) || !s->source || s->n_hosts == 0 || s->n_hosts > EGRESS_SECRET_HOSTS_MAX ||
	    config_secret_flag(s, &flag) < 0) {
		abort();
	}
	at = strrchr(flag, '@');
	if (!at || egress_secret_binding_parse(at + 1, &e, why, sizeof(why)) < 0 || e.n_hosts != s->n_hosts ||
	    strcmp(e.header, s->header) != 0) {
		abort();
	}
	for (size_t h = 0; h < s->n_hosts; h++) {
		if (strcmp(e.hosts[h], s->hosts[h]) != 0) {
			abort();
		}
	}
	free(flag);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config c = { 0 };
	char err[512];
	int r = config_parse("f.yaml", data, size, &c, err, sizeof(err));

	if (r < 0) {
		if (strncmp(err, "f.yaml:", 7) != 0 || strlen(err) >= sizeof(err)) {
			abort();
		}
		return 0;
	}
	if (c.n_allow > EGRESS_MAX_ALLOW || (c.allow && c.allow[c.n_allow]) || c.n_env > DAEMON_MAX_BOX_ENV ||
	    (c.env && c.env[c.n_env]) || c.n_secrets > EGRESS_SECRET_MAX || (c.has & CONFIG_HAS_IMAGE && !c.image) ||
	    (c.has & CONFIG_HAS_CPUS && (c.cpus < 1 || c.cpus > 64))) {
		abort();
	}
	for (size_t i = 0; i < c.n_env; i++) {
		if (!strchr(c.env[i], '=')) {
			abort();
		}
	}
	for (size_t i = 0; i < c.n_secrets; i++) {
		check_secret(&c.secrets[i]);
	}
	config_release(&c);
	return 0;
}
