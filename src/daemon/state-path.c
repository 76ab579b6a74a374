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
#include <unistd.h>

#include "banned.h"
#include "daemon/daemon.h"
#include "macro.h"

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

/* The guest agent: next to this binary (a build tree), else ../libexec/tkbox/ (an install). */
int daemon_find_guest(char **ret)
{
	static const char *const rel[] = { DAEMON_GUEST_NAME, "../libexec/tkbox/" DAEMON_GUEST_NAME, NULL };
	_cleanup_free_ char *self = realpath("/proc/self/exe", NULL);
	char *slash, *p = NULL;

	if (!self || !(slash = strrchr(self, '/'))) {
		return -ENOENT;
	}
	*slash = '\0';
	for (size_t i = 0; rel[i]; i++) {
		if (asprintf(&p, "%s/%s", self, rel[i]) < 0) {
			return -ENOMEM;
		}
		if (access(p, R_OK) == 0) {
			*ret = p;
			return 0;
		}
		free(p);
	}
	return -ENOENT;
}
