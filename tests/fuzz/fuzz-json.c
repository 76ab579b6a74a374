/* SPDX-License-Identifier: Apache-2.0 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "banned.h"
#include "json.h"

/*
 * json_parse_strict over arbitrary bytes (any top-level type, small caps so
 * the limits are reached). On success: the JCS text must parse again and
 * canonicalise to the same bytes; anything else is a finding (abort()).
 */

/* Room for the JCS of any accepted input (escapes grow a byte to at most 6). */
#define FUZZ_MAX_INPUT 4096
#define FUZZ_MAX_JCS (6 * FUZZ_MAX_INPUT + 64)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct json_opts opts = { .max_bytes = FUZZ_MAX_INPUT, .max_depth = 32, .want_top = (json_type)-1 };
	struct buf a = { 0 }, b = { 0 };
	json_t *v = NULL, *v2 = NULL;
	int r;

	r = json_parse_strict(data, size, &opts, &v);
	if (r < 0) {
		if (r != -EBADMSG && r != -E2BIG && r != -ENOMEM) {
			abort();
		}
		if (v) {
			abort(); /* written on failure */
		}
		return 0;
	}
	if (buf_init(&a, FUZZ_MAX_JCS, 0) < 0 || buf_init(&b, FUZZ_MAX_JCS, 0) < 0) {
		abort();
	}
	if (json_write_jcs(v, &a) < 0) {
		abort();
	}
	/* The canonical text is itself strict JSON, no larger than ... its own size. */
	r = json_parse_strict(
		buf_ptr(&a), buf_len(&a),
		&(struct json_opts){ .max_bytes = FUZZ_MAX_JCS, .max_depth = 32, .want_top = (json_type)-1 }, &v2);
	if (r < 0) {
		abort();
	}
	if (json_write_jcs(v2, &b) < 0) {
		abort();
	}
	if (buf_len(&a) != buf_len(&b) || memcmp(buf_ptr(&a), buf_ptr(&b), buf_len(&a)) != 0) {
		abort();
	}
	/* The top-level type survives, except that an integral real reads back as an integer. */
	if (json_typeof(v) != json_typeof(v2) && !(json_is_real(v) && json_is_integer(v2))) {
		abort();
	}
	buf_release(&a);
	buf_release(&b);
	json_decref(v);
	json_decref(v2);
	return 0;
}
