/* SPDX-License-Identifier: Apache-2.0 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "tb.h"
#include "verify/bundle.h"
#include "verify/record.h"
#include "verify/schema.h"
#include "verify/verify.h"

/*
 * The bundle reader and the whole verifier over arbitrary bytes. The trust
 * file pins the keys of the corpus bundles (made by tkb-gen ... fixed: seed
 * 32 x 0x42), so mutations of valid bundles reach every check. Invariants:
 * no crash, no leak, the verifier answers every input (only -ENOMEM may
 * fail), exit codes are in 0..3, and a report renders as text and JSON;
 * every parsed record's event also goes through the event schema's per-type
 * rules (verify/schema.c), which answer without crashing.
 */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *trust;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	uint8_t seed[32];
	struct tb t;

	(void)argc;
	(void)argv;
	memset(seed, 0x42, sizeof(seed));
	if (tb_build_seeded(&t, 1, true, seed) < 0) {
		abort();
	}
	trust = strdup(t.trust);
	tb_release(&t);
	if (!trust) {
		abort();
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct verify_opts opts = { .strict = (size & 1) != 0 };
	struct verify_report rep;
	struct bundle *b = NULL;
	int r;

	if (bundle_read(data, size, &b, NULL) == 0) {
		for (size_t i = 0; i < b->n; i++) {
			struct bundle_line *lines = NULL;
			size_t n = 0;

			if (bundle_lines(b->e[i].data, b->e[i].size, &lines, &n, NULL) < 0) {
				continue;
			}
			for (size_t j = 0; j < n; j++) {
				struct record rec = { 0 };

				if (record_parse(lines[j].p, lines[j].n, &rec) == 0) {
					char why[EVENT_SCHEMA_WHY_MAX];

					(void)record_check_hash(&rec);
					/* The per-type data rules directly, whatever the signatures say. */
					if (event_schema_check(rec.event, why, sizeof(why)) == 0 && strlen(why) != 0) {
						abort();
					}
					(void)event_binding_check(rec.event, why, sizeof(why));
					record_release(&rec);
				}
			}
			free(lines);
		}
		bundle_free(b);
	}
	r = verify_bundle(data, size, trust, strlen(trust), &opts, &rep);
	if (r == 0) {
		struct buf text = { 0 };
		json_t *j = NULL;

		if (rep.exit_code < 0 || rep.exit_code > 3 || !rep.integrity) {
			abort();
		}
		if (buf_init(&text, (size_t)1 << 20, 0) == 0 && verify_report_text(&rep, &text) < 0) {
			abort();
		}
		buf_release(&text);
		if (verify_report_json(&rep, &j) == 0) {
			json_decref(j);
		}
		verify_report_release(&rep);
	} else if (r != -ENOMEM) {
		abort();
	}
	return 0;
}
