/* SPDX-License-Identifier: Apache-2.0 */
#include <unistd.h>

#include "banned.h"
#include "cli/child-confine.h"

int child_confine(enum sandbox_profile p, const char *dir, const char *const *ro, struct sandbox_report *rep)
{
	struct sandbox_prepared sp = { .ruleset_fd = -1 };
	int r;

	if (p != SANDBOX_IMAGE_PULL && p != SANDBOX_IMAGE_LOCAL && p != SANDBOX_WORKSPACE &&
	    p != SANDBOX_APPLY_PREPARE && p != SANDBOX_APPLY_WRITE) {
		return -EINVAL;
	}
	/*
	 * A descriptor its parent leaked (a connected socket to the signer or the
	 * API) would pass by the socket() refusal: nothing but stdin, stdout and
	 * stderr stays open.
	 */
	if (close_range(3, ~0U, 0) < 0) {
		return negative_errno();
	}
	r = sandbox_prepare(p, dir, ro, &sp);
	if (r >= 0) {
		/* Also as a non-root user (nothing to drop then), and renames across dir stay allowed. */
		r = sandbox_enter(&sp, rep);
	}
	sandbox_prepared_release(&sp);
	return r;
}
