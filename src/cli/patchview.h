/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_CLI_PATCHVIEW_H
#define TKBOX_CLI_PATCHVIEW_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "macro.h"
#include "patch/patch.h"

/*
 * How tkbox diff, apply and stop show a box's patch (issue 14; docs/cli.md).
 * The patch and its paths are the agent's text: nothing of it reaches a
 * terminal as a control sequence. Pure apart from writing to the FILE given;
 * unit-tested (tests/unit/test-cli-patchview.c).
 */

/*
 * Write p[0..n) to f for a terminal: "\n" and "\t" as they are, valid UTF-8
 * from U+00A0 up as it is, every other byte (C0 controls, DEL, the C1
 * controls U+0080..U+009F, bytes not in valid UTF-8) as a \xNN escape.
 */
void patchview_write_safe(FILE *f, const uint8_t *p, size_t n);

/*
 * s as one line for a terminal or a JSON string: as patchview_write_safe,
 * "\n", "\t" and "\\" escaped too (a path's own "\x1b" never passes for an
 * escape of ours). Always valid UTF-8. New string, NULL on ENOMEM.
 */
char *patchview_text(const char *s);

/* --stat: one line per file ("create 100644 path | +3 -0", binary: "| binary"), then the totals. */
void patchview_stat(FILE *f, const struct patch *p);

/*
 * --json's summary: {sha256, bytes, saved, files:[{path, op, old_mode,
 * new_mode, binary, added, deleted}], notices:[[path, why]...], notices_total}
 * (paths through patchview_text). notices may be NULL. New object, NULL on ENOMEM.
 */
json_t *patchview_json(const struct patch *p, const char *sha256, uint64_t bytes, bool saved, const json_t *notices,
		       int64_t notices_total);

/* The notices ([[path, why]...]) on f, one per line, "tkbox WHAT: left out: PATH: WHY" ("left out" once). */
void patchview_notices(FILE *f, const char *what, const json_t *notices);

/* tkbox apply's exit status for the daemon's answer: 0 all written, 1 refused (nothing written), 3 partly written. */
#define PATCHVIEW_EXIT_OK 0
#define PATCHVIEW_EXIT_REFUSED 1
#define PATCHVIEW_EXIT_PARTIAL 3
#define PATCHVIEW_EXIT_TKBOX 125
int patchview_apply_status(int http_status, const json_t *reply);

/* The daemon's Tkbox-Patch-Summary header: base64url of {notices, notices_total?, saved, ...}; NULL when absent
 * or malformed (strict JSON, at most a header value's size). */
json_t *patchview_summary_decode(const char *v);

#endif
