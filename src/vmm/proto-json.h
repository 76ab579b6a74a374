/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_VMM_PROTO_JSON_H
#define TKBOX_VMM_PROTO_JSON_H

#include <jansson.h>

#include "buf.h"

/*
 * JSON member helpers shared by the two protocol files of the VM's ports
 * (agent-proto.c, boot-proto.c); defined in agent-proto.c. Pure.
 */

/* A string member of at most max bytes, copied. */
_wur_ int proto_get_string(const json_t *obj, const char *key, size_t max, char **ret);
/* An array of at most max_n strings of at most max_len bytes; env: each is K=V with K non-empty. */
_wur_ int proto_get_strv(const json_t *obj, const char *key, size_t max_n, size_t max_len, bool env, char ***ret,
			 size_t *ret_n);
_wur_ int proto_json_strv(char *const *v, size_t n, json_t **ret);
_wur_ int proto_set_int(json_t *o, const char *k, int64_t v);
_wur_ int proto_set_str(json_t *o, const char *k, const char *v);
/* o in canonical form (JCS) as one frame of the given type, at most AGENT_MAX_JSON bytes. */
_wur_ int proto_emit_json(struct buf *out, uint8_t type, const json_t *o);

#endif
