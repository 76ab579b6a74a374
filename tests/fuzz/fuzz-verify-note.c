/* SPDX-License-Identifier: Apache-2.0 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "verify/note.h"

/*
 * The C2SP note, checkpoint and vkey parsers over arbitrary bytes. The pinned
 * keys are the log and witness keys of Tracekit's c2sp_checkpoint.json vector
 * (the corpus starts from its note). Invariants: no crash or leak; a note that
 * opens has its text as a prefix of the input; a checkpoint that parses
 * formats back to the same body when it has no extensions.
 */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct note_vkey keys[2];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const char *const vk[2] = {
		"tracekit.example.org/log/0190f3a0-test+070965d6+AZsfhHkc/HZjBFhU04netcqVRJ2HXydqg4QLBgqznPxx",
		"witness.example.org/w1+257cc7f1+BGG3op9v3HIXXDPBmFc/0CioJHhGCXc+pyvvFPlBZdYO",
	};

	(void)argc;
	(void)argv;
	for (size_t i = 0; i < 2; i++) {
		if (note_vkey_parse(vk[i], strlen(vk[i]), &keys[i]) < 0) {
			abort();
		}
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct note_opened o = { 0 };
	struct checkpoint c = { 0 };
	struct note_vkey k = { 0 };

	if (checkpoint_open(data, size, keys, 2, &c, &o) == 0) {
		if (o.text_len > size || memcmp(o.text, data, o.text_len) != 0) {
			abort();
		}
		checkpoint_release(&c);
		note_opened_release(&o);
	}
	if (note_open(data, size, keys, 2, &o) == 0) {
		note_opened_release(&o);
	}
	if (checkpoint_parse((const char *)data, size, &c) == 0) {
		char *text = NULL;

		if (c.n_extensions == 0 && checkpoint_format(c.origin, c.size, c.root, &text) == 0) {
			if (strlen(text) != size || memcmp(text, data, size) != 0) {
				abort();
			}
			free(text);
		}
		checkpoint_release(&c);
	}
	if (note_vkey_parse((const char *)data, size, &k) == 0) {
		note_vkey_release(&k);
	}
	return 0;
}
