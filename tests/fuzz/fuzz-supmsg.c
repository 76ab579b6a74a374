/* SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "daemon/supmsg.h"
#include "json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A decoded message re-encodes, and the encoding decodes to the same operation, numbers and counts. */
static void roundtrip(enum supmsg_dir dir, const struct supmsg *m)
{
	json_t *v = NULL;
	char *s;
	struct supmsg m2;

	if (supmsg_encode(m, &v) < 0) {
		abort();
	}
	s = json_dumps(v, JSON_COMPACT);
	if (!s || supmsg_decode(dir, (const uint8_t *)s, strlen(s), &m2) != 0 || m2.op != m->op || m2.exec != m->exec ||
	    m2.conn != m->conn || m2.has_exit != m->has_exit || m2.exit.kind != m->exit.kind ||
	    m2.exit.value != m->exit.value || m2.argc != m->argc || m2.envc != m->envc || m2.inspect != m->inspect ||
	    m2.model_host != m->model_host || m2.ok != m->ok || m2.n_secrets != m->n_secrets || m2.n_ran != m->n_ran ||
	    m2.n_trusted != m->n_trusted || m2.input_tokens != m->input_tokens ||
	    m2.output_tokens != m->output_tokens || m2.clock_offset_ms != m->clock_offset_ms ||
	    !m2.ca_key != !m->ca_key || m2.diff != m->diff || m2.patch_bytes != m->patch_bytes ||
	    m2.files != m->files || m2.n_notices != m->n_notices || !m2.sha256 != !m->sha256) {
		abort();
	}
	supmsg_release(&m2);
	free(s);
	json_decref(v);
}

/*
 * Both decoders of the daemon <-> supervisor protocol and the monitor. The
 * input is a session: lines, each starting with '>' (daemon to supervisor)
 * or '<' (supervisor to daemon). Each line is decoded in its direction; what
 * decodes must round-trip and is passed through one monitor, whose state must
 * stay within its bounds whatever it accepts or refuses.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct supmon mon;
	size_t off = 0;

	supmon_init(&mon);
	while (off < size) {
		const uint8_t *nl = memchr(data + off, '\n', size - off);
		size_t end = nl ? (size_t)(nl - data) : size;
		struct supmsg m;
		const char *why = NULL;
		enum supmsg_dir dir;

		if (end > off && (data[off] == '>' || data[off] == '<')) {
			dir = data[off] == '>' ? SUPMSG_TO_SUPERVISOR : SUPMSG_TO_DAEMON;
			if (supmsg_decode(dir, data + off + 1, end - off - 1, &m) == 0) {
				roundtrip(dir, &m);
				if (supmon_apply(&mon, dir, &m, &why) < 0 && !why) {
					abort();
				}
				supmsg_release(&m);
			}
			if (mon.n > SUPMON_MAX_EXECS || mon.nc > SUPMON_MAX_CONNS ||
			    (unsigned)mon.state > SUPMON_OVER) {
				abort();
			}
		}
		off = end + 1;
	}
	return 0;
}
