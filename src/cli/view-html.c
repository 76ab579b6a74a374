/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tkbox view's renderer (view-html.h): bundle records + the verifier's verdict
 * in, one HTML page out. Every bundle string goes through view_escape into
 * element text; nothing from the bundle reaches an attribute, a URL or a style.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "banned.h"
#include "cli/view-html.h"
#include "json.h"
#include "log.h"
#include "verify/bundle.h"
#include "utf8.h"
#include "verify/record.h"

#define VIEW_MAX_NOTES 8

struct view {
	struct buf tl; /* the timeline, composed into the page at the end */
	json_t *decisions; /* decision_id -> door (integer) */
	size_t count[VIEW_DOOR_N];
	size_t refused;
	size_t total;
	size_t shown;
	size_t bad_lines;
	char run_id[96];
	char box_isolation[64]; /* of the first tkbox.box record (bundle text: escaped when shown) */
	char box_accel[32];
	char notes[VIEW_MAX_NOTES][160]; /* template text and numbers only, never bundle bytes */
	size_t n_notes;
	int err; /* sticky: the first failure of an append */
};

static const char *const door_names[VIEW_DOOR_N] = {
	[VIEW_DOOR_COMMANDS] = "commands", [VIEW_DOOR_CONNECTIONS] = "connections",
	[VIEW_DOOR_FILES] = "files",	   [VIEW_DOOR_APPROVALS] = "approvals",
	[VIEW_DOOR_SECRETS] = "secrets",   [VIEW_DOOR_MODEL] = "model",
	[VIEW_DOOR_GAPS] = "gaps",	   [VIEW_DOOR_RUN] = "run",
	[VIEW_DOOR_OTHER] = "other",
};

/* Class suffixes of the doors (template text: the filters' CSS names them). */
static const char *const door_ids[VIEW_DOOR_N] = {
	"cmd", "net", "files", "appr", "sec", "model", "gap", "run", "other"
};

const char *view_door_name(enum view_door d)
{
	return d < VIEW_DOOR_N ? door_names[d] : "other";
}

/* ------------------------------------------------------------- escaping */

static int put(struct buf *o, const char *s)
{
	return buf_put(o, s, strlen(s));
}

/* Characters shown as \u{XXXX}: C1 controls, and format characters that reorder or hide text. */
static bool invisible(uint32_t c)
{
	return (c >= 0x80 && c <= 0x9f) || c == 0xad || c == 0x61c || (c >= 0x200b && c <= 0x200f) ||
	       (c >= 0x2028 && c <= 0x202e) || (c >= 0x2060 && c <= 0x206f) || c == 0xfeff ||
	       (c >= 0xfff9 && c <= 0xfffb) || (c >= 0xe0000 && c <= 0xe007f);
}

static int escape_char(struct buf *o, const uint8_t *p, size_t len, uint32_t c)
{
	switch (c) {
	case '&':
		return put(o, "&amp;");
	case '<':
		return put(o, "&lt;");
	case '>':
		return put(o, "&gt;");
	case '"':
		return put(o, "&quot;");
	case '\'':
		return put(o, "&#39;");
	default:
		break;
	}
	if (c < 0x20 || c == 0x7f) {
		return buf_putf(o, "\\x%02" PRIx32, c);
	}
	if (invisible(c)) {
		return buf_putf(o, "\\u{%04" PRIX32 "}", c);
	}
	return buf_put(o, p, len);
}

int view_escape(struct buf *out, const void *p, size_t n, size_t max)
{
	const uint8_t *s = p;
	size_t i = 0;
	int r;

	while (i < n) {
		uint32_t c = 0;
		size_t len = utf8_decode(s + i, n - i, &c);

		if (len == 0 || i + len > max) {
			if (len == 0 && i < max) {
				r = buf_putf(out, "\\x%02x", s[i]);
				if (r < 0) {
					return r;
				}
				i++;
				continue;
			}
			break;
		}
		r = escape_char(out, s + i, len, c);
		if (r < 0) {
			return r;
		}
		i += len;
	}
	if (i < n) {
		return buf_putf(out, "\xe2\x80\xa6 (%zu more bytes)", n - i);
	}
	return 0;
}

/* ------------------------------------------------------------- sticky appends */

static void emit(struct view *v, struct buf *o, const char *s)
{
	if (v->err >= 0) {
		int r = put(o, s);
		v->err = r < 0 ? r : v->err;
	}
}

static void emitf(struct view *v, struct buf *o, const char *fmt, ...) _printf_(3, 4);
static void emitf(struct view *v, struct buf *o, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	int n;

	if (v->err < 0) {
		return;
	}
	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tmp)) {
		v->err = -EINVAL;
		return;
	}
	emit(v, o, tmp);
}

static void esc(struct view *v, struct buf *o, const char *s, size_t n, size_t max)
{
	if (v->err >= 0) {
		int r = view_escape(o, s, n, max);
		v->err = r < 0 ? r : v->err;
	}
}

static void esc_str(struct view *v, struct buf *o, const char *s)
{
	esc(v, o, s, strlen(s), VIEW_MAX_STRING);
}

/* A JSON value as text: a string as is, a number or literal as JSON, anything else as compact JSON; capped. */
static void esc_value(struct view *v, struct buf *o, const json_t *j, size_t max)
{
	if (!j) {
		emit(v, o, "\xe2\x80\x94");
	} else if (json_is_string(j)) {
		esc(v, o, json_string_value(j), json_string_length(j), max);
	} else if (json_is_array(j) && json_array_size(j) == 0) {
		emit(v, o, "none");
	} else if (json_is_array(j) && max == VIEW_MAX_STRING) {
		/* Elements are shown with max VIEW_MAX_STRING - 1: an array inside is compact JSON, no deeper. */
		size_t i;
		json_t *e;

		json_array_foreach(j, i, e) {
			if (i >= VIEW_MAX_ITEMS) {
				emitf(v, o, ", \xe2\x80\xa6 (%zu more)", json_array_size(j) - i);
				break;
			}
			emit(v, o, i ? ", " : "");
			esc_value(v, o, e, VIEW_MAX_STRING - 1);
		}
	} else {
		_cleanup_free_ char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);

		if (!s) {
			v->err = v->err < 0 ? v->err : -ENOMEM;
			return;
		}
		esc(v, o, s, strlen(s), max);
	}
}

/* ------------------------------------------------------------- classification */

/* A string member for classification, or "" (also for one with a NUL inside: "Bash\u0000x" is not Bash). */
static const char *jstr(const json_t *o, const char *k)
{
	const json_t *j = json_object_get(o, k);
	const char *s = json_string_value(j);

	return s && strlen(s) == json_string_length(j) ? s : "";
}

static enum view_door door_of_tool(const char *tool)
{
	if (strcmp(tool, "Bash") == 0) {
		return VIEW_DOOR_COMMANDS;
	}
	if (strcmp(tool, "WebFetch") == 0) {
		return VIEW_DOOR_CONNECTIONS;
	}
	if (strcmp(tool, "Write") == 0) {
		return VIEW_DOOR_FILES;
	}
	return VIEW_DOOR_OTHER;
}

static const struct {
	const char *reviewer;
	enum view_door door;
} reviewers[] = {
	{ "tkbox.box", VIEW_DOOR_RUN },
	{ "tkbox.egress", VIEW_DOOR_CONNECTIONS },
	{ "tkbox.approval", VIEW_DOOR_APPROVALS },
	{ "tkbox.secret.use", VIEW_DOOR_SECRETS },
	{ "tkbox.secret.leak", VIEW_DOOR_SECRETS },
	{ "tkbox.model.call", VIEW_DOOR_MODEL },
	{ "tkbox.patch", VIEW_DOOR_FILES },
};

static enum view_door door_of(struct view *v, const char *type, const json_t *data)
{
	if (strcmp(type, "policy.decision") == 0 || strcmp(type, "tool.call") == 0) {
		enum view_door d = door_of_tool(jstr(data, "tool"));
		const char *did = jstr(data, "decision_id");

		if (did[0] && json_object_set_new(v->decisions, did, json_integer(d)) < 0) {
			v->err = -ENOMEM;
		}
		return d;
	}
	if (strcmp(type, "tool.result") == 0) {
		json_t *d = json_object_get(v->decisions, jstr(data, "decision_id"));
		return d ? (enum view_door)json_integer_value(d) : VIEW_DOOR_OTHER;
	}
	if (strcmp(type, "approval") == 0 || strncmp(type, "approval.", 9) == 0) {
		return VIEW_DOOR_APPROVALS;
	}
	if (strcmp(type, "capture.gap") == 0) {
		return VIEW_DOOR_GAPS;
	}
	if (strncmp(type, "run.", 4) == 0) {
		return VIEW_DOOR_RUN;
	}
	if (strcmp(type, "review") == 0) {
		for (size_t i = 0; i < ARRAY_SIZE(reviewers); i++) {
			if (strcmp(jstr(data, "reviewer"), reviewers[i].reviewer) == 0) {
				return reviewers[i].door;
			}
		}
	}
	return VIEW_DOOR_OTHER;
}

static bool is_refusal(const char *type, const json_t *data)
{
	const char *reviewer = jstr(data, "reviewer");
	const json_t *verdict = json_object_get(data, "verdict");

	if (strcmp(type, "policy.decision") == 0) {
		return strcmp(jstr(data, "decision"), "deny") == 0;
	}
	if (strcmp(type, "approval") == 0) {
		return strcmp(jstr(data, "decision"), "reject") == 0;
	}
	if (strcmp(type, "approval.expired") == 0 || strcmp(type, "approval.refused") == 0 ||
	    strcmp(type, "approval.binding_mismatch") == 0) {
		return true;
	}
	if (strcmp(type, "review") != 0) {
		return false;
	}
	return strcmp(reviewer, "tkbox.egress") == 0 || strcmp(reviewer, "tkbox.secret.leak") == 0 ||
	       (strcmp(reviewer, "tkbox.approval") == 0 && strcmp(jstr(verdict, "decision"), "approved") != 0);
}

/* ------------------------------------------------------------- one record */

/*
 * What a record's summary line shows: a headline (template text) and the
 * fields at these paths of its data (of data.verdict for a review); "a[].b"
 * takes b of every element of the array a. The record's whole data is in its
 * details below the line.
 */
struct kind_view {
	const char *type;
	const char *reviewer; /* for type "review" */
	const char *headline;
	const char *fields[12];
};

static const struct kind_view kinds[] = {
	{ "run.registered",
	  NULL,
	  "run registered",
	  { "agent.name", "agent.version", "identity.scheme", "identity.subject", "signer_isolation" } },
	{ "run.end", NULL, "run ended", { "reason" } },
	{ "run.closing", NULL, "run closing", { "reason" } },
	{ "run.final", NULL, "run final", { "head_run_seq" } },
	{ "review",
	  "tkbox.box",
	  "box",
	  { "box", "image", "image_digest", "workspace", "accel", "isolation", "network", "egress.allow",
	    "egress.presets", "egress.inspect", "secrets[].name", "limits" } },
	{ "review",
	  "tkbox.egress",
	  "connection refused",
	  { "host", "port", "decision", "rule", "reason", "suppressed" } },
	{ "review",
	  "tkbox.approval",
	  "host approval",
	  { "decision", "target", "url", "approver", "approval_id", "box" } },
	{ "review", "tkbox.secret.use", "secret used", { "name", "host" } },
	{ "review", "tkbox.secret.leak", "secret leak blocked", { "name", "host", "reason" } },
	{ "review",
	  "tkbox.model.call",
	  "model call",
	  { "host", "method", "path", "status", "model", "input_tokens", "output_tokens", "bytes_up", "bytes_down",
	    "duration_ms" } },
	{ "review", "tkbox.patch", "patch", { "status", "files", "bytes", "sha256", "notices", "reason" } },
	{ "approval.request",
	  NULL,
	  "approval requested",
	  { "approval_id", "binding.tool", "rule_ids", "reasons", "binding.expires_at" } },
	{ "approval",
	  NULL,
	  "approval answered",
	  { "decision", "approver", "channel", "self_approved", "break_glass", "approval_id" } },
	{ "capture.gap", NULL, "gap in the record", { "kind", "reason", "missed_events" } },
};

static const struct kind_view *kind_of(const char *type, const json_t *data)
{
	for (size_t i = 0; i < ARRAY_SIZE(kinds); i++) {
		if (strcmp(kinds[i].type, type) != 0) {
			continue;
		}
		if (!kinds[i].reviewer || strcmp(kinds[i].reviewer, jstr(data, "reviewer")) == 0) {
			return &kinds[i];
		}
	}
	return NULL;
}

static const json_t *at_path(const json_t *o, const char *path, size_t n)
{
	while (o && n > 0) {
		const char *dot = memchr(path, '.', n);
		size_t seg = dot ? (size_t)(dot - path) : n;
		char key[64];

		if (seg >= sizeof(key)) {
			return NULL;
		}
		memcpy(key, path, seg);
		key[seg] = '\0';
		o = json_object_get(o, key);
		path += seg;
		n -= seg;
		if (n > 0) {
			path++, n--;
		}
	}
	return o;
}

/* One "label value" pair of the summary, when the record has that field. */
static void field(struct view *v, const json_t *base, const char *path)
{
	const char *arr = strstr(path, "[].");
	const char *label = strrchr(path, '.') ? strrchr(path, '.') + 1 : path;
	const json_t *val;

	if (arr) {
		const json_t *a = at_path(base, path, (size_t)(arr - path)), *e;
		size_t i;

		if (!json_is_array(a) || json_array_size(a) == 0) {
			return;
		}
		emitf(v, &v->tl, " <span class=\"f\"><b>%.*s</b> ", (int)(arr - path), path);
		json_array_foreach(a, i, e) {
			if (i >= VIEW_MAX_ITEMS) {
				emitf(v, &v->tl, ", \xe2\x80\xa6 (%zu more)", json_array_size(a) - i);
				break;
			}
			emit(v, &v->tl, i ? ", " : "");
			esc_value(v, &v->tl, at_path(e, arr + 3, strlen(arr + 3)), VIEW_MAX_STRING - 1);
		}
		emit(v, &v->tl, "</span>");
		return;
	}
	val = at_path(base, path, strlen(path));
	if (!val || json_is_null(val)) {
		return;
	}
	emitf(v, &v->tl, " <span class=\"f\"><b>%s</b> ", label);
	esc_value(v, &v->tl, val, VIEW_MAX_STRING);
	emit(v, &v->tl, "</span>");
}

static const char *const door_nouns[VIEW_DOOR_N] = {
	[VIEW_DOOR_COMMANDS] = "command", [VIEW_DOOR_CONNECTIONS] = "connection",
	[VIEW_DOOR_FILES] = "file write", [VIEW_DOOR_APPROVALS] = "approval",
	[VIEW_DOOR_SECRETS] = "secret",	  [VIEW_DOOR_MODEL] = "model call",
	[VIEW_DOOR_GAPS] = "gap",	  [VIEW_DOOR_RUN] = "run",
	[VIEW_DOOR_OTHER] = "tool",
};

/* Decisions and results: the door's noun, and what the bundle says of the tool, the verdict and the outcome. */
static void summary_tool(struct view *v, const char *type, const json_t *data, enum view_door d)
{
	static const char *const decision_fields[] = { "rule_ids", "reasons", "tool_use_id" };
	static const char *const result_fields[] = { "output.value.status",
						     "output.value.exit_code",
						     "output.value.signal_name",
						     "output.value.error",
						     "output.value.bytes_up",
						     "output.value.bytes_down",
						     "output.value.written_paths",
						     "output.value.stdin_bytes",
						     "duration_ms",
						     "tool_use_id" };
	bool result = strcmp(type, "tool.result") == 0;

	emitf(v, &v->tl, "<span class=\"h\">%s ", door_nouns[d]);
	if (d == VIEW_DOOR_OTHER && !result) {
		esc_str(v, &v->tl, jstr(data, "tool"));
		emit(v, &v->tl, " ");
	}
	if (result) {
		emit(v, &v->tl, "ended");
	} else if (json_is_string(json_object_get(data, "decision"))) {
		esc_str(v, &v->tl, jstr(data, "decision"));
	} else {
		emit(v, &v->tl, "called");
	}
	emit(v, &v->tl, "</span>");
	if (result) {
		for (size_t i = 0; i < ARRAY_SIZE(result_fields); i++) {
			field(v, data, result_fields[i]);
		}
	} else {
		for (size_t i = 0; i < ARRAY_SIZE(decision_fields); i++) {
			field(v, data, decision_fields[i]);
		}
	}
}

static void summary(struct view *v, const char *type, const json_t *data, enum view_door d)
{
	const struct kind_view *k;
	const json_t *base = data;

	if (strcmp(type, "policy.decision") == 0 || strcmp(type, "tool.call") == 0 ||
	    strcmp(type, "tool.result") == 0) {
		summary_tool(v, type, data, d);
		return;
	}
	k = kind_of(type, data);
	if (!k) {
		emit(v, &v->tl, "<span class=\"h\">");
		esc_str(v, &v->tl, type);
		if (strcmp(type, "review") == 0) {
			emit(v, &v->tl, " by ");
			esc_str(v, &v->tl, jstr(data, "reviewer"));
		}
		emit(v, &v->tl, "</span>");
		return;
	}
	if (k->reviewer) {
		base = json_object_get(data, "verdict");
	}
	emitf(v, &v->tl, "<span class=\"h\">%s</span>", k->headline);
	for (size_t i = 0; i < ARRAY_SIZE(k->fields) && k->fields[i]; i++) {
		field(v, base, k->fields[i]);
	}
}

static void add_record(struct view *v, const struct record *r)
{
	const char *type = r->type ? r->type : "";
	const json_t *data = json_object_get(r->event, "data");
	const json_t *ts = json_object_get(r->event, "ts");
	enum view_door d = door_of(v, type, data);
	bool refused = is_refusal(type, data);
	char hash[RECORD_HASH_STRLEN + 1];

	v->count[d]++;
	v->total++;
	v->refused += refused;
	if (!v->run_id[0] && r->run_id) {
		(void)snprintf(v->run_id, sizeof(v->run_id), "%s", r->run_id);
	}
	if (!v->box_isolation[0] && strcmp(type, "review") == 0 && strcmp(jstr(data, "reviewer"), "tkbox.box") == 0) {
		const json_t *box = json_object_get(data, "verdict");

		(void)snprintf(v->box_isolation, sizeof(v->box_isolation), "%s", jstr(box, "isolation"));
		(void)snprintf(v->box_accel, sizeof(v->box_accel), "%s", jstr(box, "accel"));
	}
	if (v->shown >= VIEW_MAX_RECORDS || buf_avail(&v->tl) < VIEW_RECORD_RESERVE) {
		return;
	}
	v->shown++;
	emitf(v, &v->tl, "<li class=\"r d-%s%s\"><div class=\"m\"><span class=\"seq\">#%" PRId64 "</span> ",
	      door_ids[d], refused ? " refused" : "", r->seq);
	emitf(v, &v->tl, "<span class=\"rs\">run_seq %" PRId64 "</span> <span class=\"ts\">", r->run_seq);
	esc_value(v, &v->tl, ts, 64);
	emitf(v, &v->tl, "</span> <span class=\"door\">%s</span> <span class=\"type\">", door_names[d]);
	esc_str(v, &v->tl, type);
	emit(v, &v->tl, "</span></div><div class=\"s\">");
	summary(v, type, data, d);
	record_hash_format(r->hash, hash);
	emitf(v, &v->tl, "</div><div class=\"hash\">hash %s</div><details><summary>data</summary><pre>", hash);
	esc_value(v, &v->tl, data, VIEW_MAX_DATA);
	emit(v, &v->tl, "</pre></details></li>\n");
}

static void note(struct view *v, const char *fmt, ...) _printf_(2, 3);
static void note(struct view *v, const char *fmt, ...)
{
	va_list ap;

	if (v->n_notes >= VIEW_MAX_NOTES) {
		return;
	}
	va_start(ap, fmt);
	(void)vsnprintf(v->notes[v->n_notes++], sizeof(v->notes[0]), fmt, ap);
	va_end(ap);
}

/* One run file: every line that is a record line is counted and, within the caps, rendered. */
static void add_member(struct view *v, const uint8_t *p, size_t n)
{
	_cleanup_free_ struct bundle_line *lines = NULL;
	const char *why = NULL;
	size_t n_lines = 0;

	if (bundle_lines(p, n, &lines, &n_lines, &why) < 0) {
		note(v, "A run file is not JSON lines (%s): none of its records are shown.", why ? why : "malformed");
		return;
	}
	for (size_t i = 0; i < n_lines && v->err >= 0; i++) {
		struct record rec;

		if (record_parse(lines[i].p, lines[i].n, &rec) < 0) {
			v->bad_lines++;
			continue;
		}
		add_record(v, &rec);
		record_release(&rec);
	}
}

/* ------------------------------------------------------------- the page */

static const char page_css[] =
	"*{box-sizing:border-box}"
	"body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#1d2330;background:#f4f5f7}"
	"main{max-width:1180px;margin:0 auto;padding:20px 24px 40px}"
	"h1{font-size:18px;margin:0 0 4px}h2{font-size:15px;margin:22px 0 8px}"
	".verdict{border-radius:10px;padding:16px 20px;margin-bottom:16px;border:2px solid}"
	".verdict .big{font-size:26px;font-weight:700;letter-spacing:.02em}"
	".verdict p{margin:4px 0}.verdict ul{margin:6px 0 0;padding-left:20px}"
	".ok{background:#e8f6ee;border-color:#2f9e5b}.ok .big{color:#1d7a43}"
	".none{background:#fff6e0;border-color:#d79a10}.none .big{color:#9a6a00}"
	".fail{background:#fdeaea;border-color:#d93838}.fail .big{color:#b51f1f}"
	".meta{color:#555;margin:0 0 12px;word-break:break-all}"
	"table.counts{border-collapse:collapse;background:#fff;border-radius:8px;overflow:hidden}"
	".counts td,.counts th{padding:5px 14px;text-align:center}"
	".counts th{font-weight:500;font-size:12px;color:#5b6475;border-bottom:1px solid #e3e5ea}"
	".counts td.n{font-variant-numeric:tabular-nums;font-weight:700;font-size:17px}"
	".note{background:#fff6e0;border-left:4px solid #d79a10;padding:6px 10px}"
	".fi{position:absolute;opacity:0;pointer-events:none}"
	"nav.filters{margin:14px 0 10px}"
	"nav.filters label{display:inline-block;padding:4px 11px;margin:0 6px 6px 0;border-radius:14px;"
	"background:#e3e6ec;cursor:pointer;font-size:13px}"
	"ol.tl{list-style:none;margin:0;padding:0}"
	".r{background:#fff;border-radius:8px;padding:8px 12px;margin:0 0 6px;border-left:5px solid #9aa3b2}"
	".r.refused{border-left-color:#d93838;background:#fff7f7}"
	".m{font-size:12px;color:#5b6475}.m .seq{font-weight:700;color:#1d2330}"
	".door{display:inline-block;padding:0 7px;border-radius:8px;background:#eef0f4;margin-left:4px}"
	".type{font-family:ui-monospace,monospace}"
	".s{margin:3px 0;word-break:break-word}.s .h{font-weight:600;margin-right:6px}"
	".f{display:inline-block;margin-right:10px}.f b{font-weight:500;color:#5b6475;margin-right:3px}"
	".hash{font:11px ui-monospace,monospace;color:#7a8294;word-break:break-all}"
	"details summary{font-size:12px;color:#5b6475;cursor:pointer}"
	"pre{white-space:pre-wrap;word-break:break-all;font:12px ui-monospace,monospace;background:#f6f7f9;"
	"padding:6px;margin:4px 0 0}"
	".d-cmd{border-left-color:#3b6fd8}.d-net{border-left-color:#0f9aa8}.d-files{border-left-color:#8a55c9}"
	".d-appr{border-left-color:#d79a10}.d-sec{border-left-color:#c2407a}.d-model{border-left-color:#3e9b4f}"
	".d-gap{border-left-color:#d93838}"
	".cut{font-weight:600;color:#b51f1f}footer{margin-top:24px;color:#7a8294;font-size:12px}";

static void page_head(struct view *v, struct buf *o, const struct view_page *page)
{
	emit(v, o,
	     "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
	     "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
	     "'unsafe-inline'; img-src data:\">\n<meta name=\"referrer\" content=\"no-referrer\">\n"
	     "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\n<title>tkbox view");
	if (page->title) {
		emit(v, o, ": ");
		esc_str(v, o, page->title);
	}
	emit(v, o, "</title>\n<style>");
	emit(v, o, page_css);
	/* The filters: each radio hides the records of the other doors (template names only). */
	for (size_t d = 0; d < VIEW_DOOR_N; d++) {
		emitf(v, o, "#f-%s:checked~ol .r:not(.d-%s){display:none}", door_ids[d], door_ids[d]);
		emitf(v, o, "#f-%s:checked~nav label[for=f-%s]{background:#1d2330;color:#fff}", door_ids[d],
		      door_ids[d]);
	}
	emit(v, o,
	     "#f-refused:checked~ol .r:not(.refused){display:none}"
	     "#f-refused:checked~nav label[for=f-refused],#f-all:checked~nav label[for=f-all]"
	     "{background:#1d2330;color:#fff}</style>\n</head>\n<body><main>\n");
}

static void check_list(struct view *v, struct buf *o, const struct verify_report *rep, int only)
{
	static const char *const status[] = { "PASS", "WARN", "FAIL" };

	emit(v, o, "<ul>");
	for (size_t i = 0; i < rep->n_checks; i++) {
		const struct verify_check *c = &rep->checks[i];

		if (only >= 0 && (int)c->status != only) {
			continue;
		}
		emitf(v, o, "<li>[%s] <b>", status[c->status <= CHECK_FAIL ? c->status : CHECK_FAIL]);
		esc_str(v, o, c->name ? c->name : "");
		emit(v, o, "</b> \xe2\x80\x94 ");
		esc(v, o, c->detail ? c->detail : "", c->detail ? strlen(c->detail) : 0, 4 * VIEW_MAX_STRING);
		emit(v, o, "</li>");
	}
	emit(v, o, "</ul>");
}

/* The box's isolation as its tkbox.box record states it. */
static void page_box_isolation(struct view *v, struct buf *o, const char *prefix)
{
	if (!v->box_isolation[0]) {
		return;
	}
	emit(v, o, prefix);
	esc_str(v, o, v->box_isolation);
	if (v->box_accel[0]) {
		emit(v, o, " (accel ");
		esc_str(v, o, v->box_accel);
		emit(v, o, ")");
	}
}

static void page_verdict(struct view *v, struct buf *o, const struct verify_report *rep)
{
	if (!rep) {
		emit(v, o,
		     "<section class=\"verdict none\" id=\"verdict\"><div class=\"big\">NOT VERIFIED</div>"
		     "<p>not verified: no trust file given. Nothing on this page is proven: it shows what the "
		     "bundle says. To check the signatures, the run chain and the checkpoint, run <code>tkbox "
		     "view BUNDLE --trust TRUST.json -o FILE</code> (or <code>tkbox verify</code>).</p>");
		if (v->box_isolation[0]) {
			page_box_isolation(v, o, "<p><b>Isolation (as the bundle states it):</b> box ");
			emit(v, o, "</p>");
		}
		emit(v, o, "</section>\n");
		return;
	}
	emitf(v, o, "<section class=\"verdict %s\" id=\"verdict\"><div class=\"big\">",
	      rep->exit_code == 0 || rep->exit_code == 3 ? "ok" : "fail");
	esc_str(v, o, rep->integrity ? rep->integrity : "UNKNOWN");
	emit(v, o, "</div>");
	if (rep->exit_code != 0 && rep->exit_code != 3) {
		emit(v, o,
		     "<p><b>Verification failed: the records below may be forged, altered or incomplete. "
		     "Do not rely on them.</b> What failed:</p>");
		check_list(v, o, rep, CHECK_FAIL);
	}
	emit(v, o, "<p><b>Assurance:</b> ");
	esc_str(v, o, rep->assurance ? rep->assurance : "none (integrity not established)");
	emit(v, o, "</p><p><b>Isolation:</b> signer ");
	esc_str(v, o, rep->isolation ? rep->isolation : "not stated");
	page_box_isolation(v, o, "; box ");
	emit(v, o, "</p>");
	if (rep->warnings > 0) {
		emit(v, o, "<p>Warnings:</p>");
		check_list(v, o, rep, CHECK_WARN);
	}
	emitf(v, o, "<details><summary>All %zu checks</summary>", rep->n_checks);
	check_list(v, o, rep, -1);
	emit(v, o, "</details></section>\n");
}

static void page_counts(struct view *v, struct buf *o)
{
	emit(v, o, "<h2>Crossings by door</h2><table class=\"counts\" id=\"counts\"><tr>");
	for (size_t d = 0; d < VIEW_DOOR_N; d++) {
		emitf(v, o, "<th>%s</th>", door_names[d]);
	}
	emit(v, o, "<th>refusals (any door)</th><th>all records</th></tr><tr>");
	for (size_t d = 0; d < VIEW_DOOR_N; d++) {
		emitf(v, o, "<td class=\"n\" id=\"n-%s\">%zu</td>", door_ids[d], v->count[d]);
	}
	emitf(v, o, "<td class=\"n\" id=\"n-refused\">%zu</td><td class=\"n\" id=\"n-all\">%zu</td></tr></table>\n",
	      v->refused, v->total);
}

static void page_timeline(struct view *v, struct buf *o)
{
	emit(v, o, "<h2>Timeline</h2>\n<input class=\"fi\" type=\"radio\" name=\"door\" id=\"f-all\" checked>");
	for (size_t d = 0; d < VIEW_DOOR_N; d++) {
		emitf(v, o, "<input class=\"fi\" type=\"radio\" name=\"door\" id=\"f-%s\">", door_ids[d]);
	}
	emitf(v, o,
	      "<input class=\"fi\" type=\"radio\" name=\"door\" id=\"f-refused\">\n<nav class=\"filters\">"
	      "<label for=\"f-all\">all (%zu)</label>",
	      v->total);
	for (size_t d = 0; d < VIEW_DOOR_N; d++) {
		if (v->count[d] > 0) {
			emitf(v, o, "<label for=\"f-%s\">%s (%zu)</label>", door_ids[d], door_names[d], v->count[d]);
		}
	}
	emitf(v, o, "<label for=\"f-refused\">refusals (%zu)</label></nav>\n<ol class=\"tl\">\n", v->refused);
	if (v->err >= 0) {
		int r = buf_put(o, buf_ptr(&v->tl), buf_len(&v->tl));
		v->err = r < 0 ? r : v->err;
	}
	emit(v, o, "</ol>\n");
	if (v->shown < v->total) {
		emitf(v, o,
		      "<p class=\"cut\" id=\"not-shown\">%zu records not shown: the page shows at most %d records "
		      "and %zu MiB of them; the counts above include them. <code>tkbox verify</code> and the "
		      "bundle itself have them all.</p>\n",
		      v->total - v->shown, VIEW_MAX_RECORDS, VIEW_MAX_TIMELINE >> 20);
	}
}

static int page_finish(struct view *v, const struct view_page *page, struct buf *out)
{
	page_head(v, out, page);
	page_verdict(v, out, page->report);
	emit(v, out, "<h1>tkbox run</h1><p class=\"meta\">");
	if (page->title) {
		emit(v, out, "bundle ");
		esc_str(v, out, page->title);
		emit(v, out, " \xc2\xb7 ");
	}
	emit(v, out, "run ");
	esc_str(v, out, v->run_id[0] ? v->run_id : "(none)");
	emitf(v, out, " \xc2\xb7 %zu records</p>\n", v->total);
	for (size_t i = 0; i < v->n_notes; i++) {
		emit(v, out, "<p class=\"note\">");
		esc_str(v, out, v->notes[i]);
		emit(v, out, "</p>\n");
	}
	if (v->bad_lines > 0) {
		emitf(v, out,
		      "<p class=\"note\">%zu lines of the run file are not record lines; they are not shown.</p>\n",
		      v->bad_lines);
	}
	page_counts(v, out);
	page_timeline(v, out);
	emit(v, out,
	     "<footer>Rendered by <code>tkbox view</code>: only what the bundle states. A command's "
	     "arguments are committed by HMAC in its decision, not stored, so command lines are not "
	     "shown; times are the signer's. This page has no script and loads nothing.</footer>\n"
	     "</main></body></html>\n");
	return v->err;
}

static int view_init(struct view *v)
{
	*v = (struct view){ 0 };
	v->decisions = json_object();
	if (!v->decisions) {
		return -ENOMEM;
	}
	return buf_init(&v->tl, VIEW_MAX_TIMELINE, 0);
}

static void view_release(struct view *v)
{
	json_decref(v->decisions);
	buf_release(&v->tl);
}

int view_render_lines(const void *jsonl, size_t n, const struct view_page *page, struct buf *out)
{
	struct view v;
	int r = view_init(&v);

	if (r >= 0) {
		add_member(&v, jsonl, n);
		r = page_finish(&v, page, out);
	}
	view_release(&v);
	return r;
}

static bool is_run_file(const char *name)
{
	size_t n = strlen(name);
	return strncmp(name, "runs/", 5) == 0 && n > 11 && strcmp(name + n - 6, ".jsonl") == 0;
}

int view_render(const void *bundle, size_t n, const struct view_page *page, struct buf *out)
{
	struct bundle *b = NULL;
	const char *why = NULL;
	struct view v;
	size_t runs = 0;
	int r = view_init(&v);

	if (r < 0) {
		view_release(&v);
		return r;
	}
	r = bundle_read(bundle, n, &b, &why);
	if (r == -ENOMEM) {
		view_release(&v);
		return r;
	}
	if (r < 0) {
		note(&v, "The bundle could not be read (%s): no record is shown.", why ? why : tk_strerror(r));
	}
	for (size_t i = 0; b && i < b->n; i++) {
		if (is_run_file(b->e[i].name)) {
			runs++;
			add_member(&v, b->e[i].data, b->e[i].size);
		}
	}
	if (b && runs == 0) {
		note(&v, "The bundle holds no run file (runs/NAME.jsonl): no record is shown.");
	}
	bundle_free(b);
	r = page_finish(&v, page, out);
	view_release(&v);
	return r < 0 ? r : b ? 0 : VIEW_UNREADABLE;
}
