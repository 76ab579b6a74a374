/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where the daemon's state and API socket are. Apart from daemon.c so that
 * the lean `tkbox` client (src/cli/tkbox-lean.c) finds the socket without
 * linking the daemon.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "daemon/daemon.h"

const char *daemon_default_state_dir(void)
{
	static char buf[4096];
	const char *e = getenv("TKBOX_STATE_DIR");
	const char *home = getenv("HOME");

	if (e && e[0] == '/') {
		return e;
	}
	if (home && home[0] == '/' && snprintf(buf, sizeof(buf), "%s/.local/state/tkbox", home) < (int)sizeof(buf)) {
		return buf;
	}
	return "/var/lib/tkbox";
}

int daemon_socket_path(const char *state_dir, char **ret)
{
	const char *e = getenv("TKBOX_SOCKET");
	char *p = NULL;

	if (e && e[0] == '/') {
		p = strdup(e);
	} else if (asprintf(&p, "%s/api/tkbox.sock", state_dir) < 0) {
		p = NULL;
	}
	if (!p) {
		return -ENOMEM;
	}
	*ret = p;
	return 0;
}
