/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_APPLY_H
#define TKBOX_DAEMON_APPLY_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon/api-proto.h"
#include "daemon/crossing.h"
#include "macro.h"

/*
 * The patch door's daemon side (issue 14; docs/patch.md): a box's patch made
 * now (tkbox diff of a running box) or saved at tkbox stop, and tkbox apply.
 * daemon.c keeps the box registry and hands this file what one request needs
 * (struct apply_box); the flow, the records and the replies are here.
 *
 *   <box>/patch.diff   the patch saved at stop (0600)
 *   <box>/patch.json   {sha256, bytes, files, notices} or {error}: why none was saved
 *   <box>/apply.<n>/   an apply's scratch (prepare's tree and git dir), removed after
 *
 * apply: the box is stopped, its run open (checked by daemon.c), the patch
 * saved; prepare (the confined child) plans it against the checkout; each
 * file is one crossing of the door "apply" (tool Write), every one decided
 * before any is written; the first refusal stops the deciding and nothing is
 * written; then the writer child writes them in order and each "written"
 * line completes that file's decision at once (written_paths [path]); the
 * rest end as errors naming what was written. Once any Write was decided the
 * run is closed (applied, apply denied, apply failed): Figure 7.
 */

#define DAEMON_DIFF_TIMEOUT_S 300 /* a diff of a running box: the supervisor has SUP_DIFF_TIMEOUT_S itself */
#define APPLY_SUMMARY_MAX ((size_t)4000) /* the Tkbox-Patch-Summary value (base64url): under HTTP_MAX_HEADER_VALUE */

/* A box's patch: made now or saved at stop. */
struct box_patch {
	char *error; /* NULL: there is one */
	int fd; /* the bytes (a memfd or the saved file), or -1 */
	char sha256[65];
	uint64_t bytes, files;
	json_t *notices; /* [[path, why], ...] (owned), never NULL when there is one */
};

void box_patch_release(struct box_patch *p);

/*
 * Save p at stop into dir (patch.diff 0600 and patch.json, each written
 * atomically; p->error: only patch.json, with the error). Returns the box
 * JSON's "patch" member in *ret_box and the tkbox.patch observation's data in
 * *ret_observe (both new), also when the files could not be written (then
 * status none, with why).
 */
void apply_patch_save(const char *dir, const struct box_patch *p, json_t **ret_box, json_t **ret_observe);

/* The saved patch of dir: 0, -ENOENT none saved at all, or the saved error in ret->error. */
_wur_ int apply_patch_load(const char *dir, struct box_patch *ret);

/* The box JSON's "patch" member from patch.json in dir, or NULL when there is none. */
json_t *apply_patch_box_json(const char *dir);

/* GET /v1/boxes/{box}/diff: the patch bytes, Tkbox-Patch-Sha256 and Tkbox-Patch-Summary (saved: from stop). */
void apply_diff_respond(int client_fd, const struct box_patch *p, bool saved);

/* What one apply needs of its box (daemon.c holds the box: apply_busy, no rm). */
struct apply_box {
	void *box; /* for host's callbacks */
	const struct crossing_host_ops *host;
	void (*close_run)(void *box, const char *reason); /* close the run once (the caller holds no lock) */
	const char *name, *dir;
	const char *workspace; /* the box's --workspace source (the default checkout), or NULL */
	const char *run_id, *run_token; /* NULL when unrecorded */
	bool unrecorded;
	int64_t approval_wait_ms;
	char *const *child_env; /* what the children get from the daemon's own (HOME, TKBOX_TEST_APPLY_STOP_AFTER) */
};

/* Remove every apply.<n>/ scratch in dir (one a daemon that ended mid-apply left), before tkbox rm removes dir. */
void apply_remove_scratch(const char *dir);

/* POST /v1/boxes/{box}/apply: the whole flow and the reply. */
void apply_handle(int client_fd, const struct apply_box *ab, const struct api_apply_req *q);

#endif
