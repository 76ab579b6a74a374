/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_SIGNER_PATHS_H
#define TKBOX_SIGNER_PATHS_H

#include "macro.h"

/*
 * Where a signer lives, for its clients: the modes and their default state
 * dir and socket. Part of the signer's client library (with client.c), which
 * is all the daemon links of the signer: no keys, store or policy.
 */

#define SIGNER_SOCKET_ENV "TKBOX_SIGNER_SOCKET"
#define SIGNER_DIR_ENV "TKBOX_SIGNER_DIR"

enum signer_mode {
	SIGNER_MODE_DEV = 0,
	SIGNER_MODE_SYSTEM = 1,
};

/* Default state dir for a mode (new string): $XDG_DATA_HOME or ~/.local/share, or /var/lib in system mode. */
_wur_ int signer_default_dir(enum signer_mode mode, char **ret);
/* Default socket path for a mode (new string). */
_wur_ int signer_default_socket(enum signer_mode mode, char **ret);

#endif
