/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_CLI_VIEW_HTML_H
#define TKBOX_CLI_VIEW_HTML_H

#include "buf.h"
#include "macro.h"
#include "verify/verify.h"

/*
 * tkbox view's renderer: a bundle's run records and the verifier's verdict in,
 * one self-contained HTML page out (docs/cli.md "tkbox view").
 *
 * API contract
 *   - Pure: no I/O, no logging, no clock, no globals. 0 / -errno (-ENOMEM;
 *     -E2BIG only when out cannot hold even the page without records).
 *   - A bundle is hostile input. Every string taken from it (and the title)
 *     reaches the page through view_escape only, and only in element text:
 *     never in an attribute, a URL, a style or a script. The page has no
 *     script at all, no external asset, and carries a Content-Security-Policy
 *     of default-src 'none' (inline style only); the door filters are CSS
 *     radio inputs.
 *   - Bundle content never makes rendering fail: an unreadable bundle, a line
 *     that is not a record or a member that is not JSON lines becomes a
 *     visible note on the page.
 *   - Caps: VIEW_MAX_RECORDS records rendered (the rest are counted in the
 *     door counts and in a visible "N records not shown" line, as are records
 *     past the page's size, VIEW_MAX_TIMELINE); each string at most
 *     VIEW_MAX_STRING bytes, VIEW_MAX_ITEMS elements of an array and each
 *     record's data at most VIEW_MAX_DATA bytes shown, cut with "… (N more
 *     bytes)" / "… (N more)".
 *   - page->report NULL means no trust file was given: the page says "NOT
 *     VERIFIED" and why. Otherwise its integrity, assurance, isolation and
 *     failed checks lead the page.
 *
 * Doors (the filters and the counts), one per record:
 *   commands     policy.decision / tool.call of tool Bash, and the tool.result of such a decision
 *   connections  the same for tool WebFetch, and review tkbox.egress (the network door's refusals)
 *   files        the same for tool Write, and review tkbox.patch
 *   approvals    approval.* and approval records, and review tkbox.approval
 *   secrets      review tkbox.secret.use and tkbox.secret.leak
 *   model        review tkbox.model.call
 *   gaps         capture.gap
 *   run          run.* records and review tkbox.box
 *   other        anything else (another tool, reviewer or type)
 * Refusals (a second filter, across doors): a deny decision, an approval
 * answered reject, review tkbox.egress, tkbox.secret.leak, a tkbox.approval
 * rejected, approval.expired / approval.refused / approval.binding_mismatch.
 */

#define VIEW_MAX_RECORDS 2000
#define VIEW_MAX_STRING 256
#define VIEW_MAX_DATA 2048
/* Elements of an array shown in a summary field. */
#define VIEW_MAX_ITEMS 8
/* The timeline's share of the page; a record is rendered only with VIEW_RECORD_RESERVE bytes left. */
#define VIEW_MAX_TIMELINE ((size_t)32 << 20)
#define VIEW_RECORD_RESERVE ((size_t)256 << 10)
/* What out must be able to hold: the timeline and the rest of the page. */
#define VIEW_MAX_PAGE (VIEW_MAX_TIMELINE + ((size_t)1 << 20))

enum view_door {
	VIEW_DOOR_COMMANDS,
	VIEW_DOOR_CONNECTIONS,
	VIEW_DOOR_FILES,
	VIEW_DOOR_APPROVALS,
	VIEW_DOOR_SECRETS,
	VIEW_DOOR_MODEL,
	VIEW_DOOR_GAPS,
	VIEW_DOOR_RUN,
	VIEW_DOOR_OTHER,
	VIEW_DOOR_N,
};

struct view_page {
	const char *title; /* shown escaped (the bundle's file name); NULL: none */
	const struct verify_report *report; /* NULL: not verified (no trust file given) */
};

/*
 * A page for the bundle's bytes (its run files, runs/NAME.jsonl, in bundle order). 0, or VIEW_UNREADABLE
 * when the bytes are not a bundle (the page, rendered, says why and shows no record).
 */
#define VIEW_UNREADABLE 1
_wur_ int view_render(const void *bundle, size_t n, const struct view_page *page, struct buf *out);
/* A page for one run file's bytes (JSON lines): the unit test's and the fuzz target's entry. */
_wur_ int view_render_lines(const void *jsonl, size_t n, const struct view_page *page, struct buf *out);

/*
 * Append p[0..n) as HTML element text: & < > " ' as character references,
 * control bytes, C1 controls, bidi and invisible format characters and bytes
 * that are not UTF-8 as visible \xNN / \u{XXXX}; at most max input bytes (cut
 * on a character boundary, then "… (N more bytes)").
 */
_wur_ int view_escape(struct buf *out, const void *p, size_t n, size_t max);

const char *view_door_name(enum view_door d);

#endif
