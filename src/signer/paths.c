/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "signer/paths.h"

#include "banned.h"

/* s (or "a/b") as a new string. */
static int str_new(const char *a, const char *b, char **ret)
{
	char *p = NULL;

	if ((b ? asprintf(&p, "%s/%s", a, b) : asprintf(&p, "%s", a)) < 0) {
		return -ENOMEM;
	}
	*ret = p;
	return 0;
}

int signer_default_dir(enum signer_mode mode, char **ret)
{
	const char *xdg, *home;

	if (mode == SIGNER_MODE_SYSTEM) {
		return str_new("/var/lib/tkbox-signer", NULL, ret);
	}
	xdg = getenv("XDG_DATA_HOME");
	if (xdg && xdg[0] == '/') {
		return str_new(xdg, "tkbox-signer", ret);
	}
	home = getenv("HOME");
	if (!home || home[0] != '/') {
		return -ENOENT;
	}
	return str_new(home, ".local/share/tkbox-signer", ret);
}

int signer_default_socket(enum signer_mode mode, char **ret)
{
	const char *xdg;
	char *p = NULL;

	if (mode == SIGNER_MODE_SYSTEM) {
		return str_new("/run/tkbox-signer/signer.sock", NULL, ret);
	}
	xdg = getenv("XDG_RUNTIME_DIR");
	if (xdg && xdg[0] == '/') {
		return str_new(xdg, "tkbox-signer/signer.sock", ret);
	}
	if (asprintf(&p, "/tmp/tkbox-signer-%u/signer.sock", (unsigned)getuid()) < 0) {
		return -ENOMEM;
	}
	*ret = p;
	return 0;
}
