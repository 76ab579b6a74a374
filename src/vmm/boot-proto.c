/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "banned.h"
#include "strv.h"
#include "json.h"
#include "vmm/boot-proto.h"
#include "vmm/proto-json.h"

void boot_config_release(struct boot_config *c)
{
	if (!c) {
		return;
	}
	free(c->box_id);
	free(c->hostname);
	strv_free(c->env);
	free(c->ca_pem);
	*c = (struct boot_config){ 0 };
}

static bool valid_name(const char *s, size_t max, bool allow_dot_underscore)
{
	size_t n = strlen(s);

	if (n == 0 || n > max) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
			  ch == '-' || (allow_dot_underscore && (ch == '.' || ch == '_'));
		if (!ok) {
			return false;
		}
	}
	return true;
}

#define PEM_BEGIN "-----BEGIN CERTIFICATE-----\n"
#define PEM_END "-----END CERTIFICATE-----"

/* A PEM certificate text: the guest writes it into the box's trust files as it is. */
static bool valid_ca_pem(const char *s)
{
	size_t n = strlen(s), bl = strlen(PEM_BEGIN), el = strlen(PEM_END);

	if (n > BOOT_MAX_CA_PEM || n < bl + el) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '\n' && (s[i] < 0x20 || s[i] > 0x7e)) {
			return false;
		}
	}
	if (s[n - 1] == '\n') {
		n--;
	}
	return memcmp(s, PEM_BEGIN, bl) == 0 && n >= bl + el && memcmp(s + n - el, PEM_END, el) == 0 &&
	       s[n - el - 1] == '\n';
}

static bool values_valid(const struct boot_config *c)
{
	return c->clock_sec >= 0 && c->clock_nsec >= 0 && c->clock_nsec <= 999999999 && c->vcpus >= 1 &&
	       c->vcpus <= BOOT_MAX_VCPUS && c->mem_mib >= BOOT_MIN_MEM_MIB && c->mem_mib <= BOOT_MAX_MEM_MIB;
}

int boot_config_decode(const uint8_t *p, size_t n, struct boot_config *ret)
{
	static const char *const keys[] = { "box_id", "hostname", "env",     "clock_sec", "clock_nsec",
					    "vcpus",  "mem_mib",  "entropy", "ca_pem",	  NULL };
	struct json_opts opts = JSON_OPTS_DEFAULT;
	_cleanup_json_ json_t *o = NULL;
	struct boot_config c = { 0 };
	int r;

	opts.max_bytes = BOOT_MAX_JSON;
	opts.max_depth = 4;
	r = json_parse_strict(p, n, &opts, &o);
	if (r < 0) {
		return r;
	}
	r = json_only_keys(o, keys);
	if (r >= 0) {
		r = proto_get_string(o, "box_id", BOOT_MAX_BOX_ID, &c.box_id);
	}
	if (r >= 0 && !valid_name(c.box_id, BOOT_MAX_BOX_ID, true)) {
		r = -EBADMSG;
	}
	if (r >= 0) {
		r = proto_get_string(o, "hostname", BOOT_MAX_HOSTNAME, &c.hostname);
	}
	if (r >= 0 && !valid_name(c.hostname, BOOT_MAX_HOSTNAME, false)) {
		r = -EBADMSG;
	}
	if (r >= 0) {
		r = proto_get_strv(o, "env", BOOT_MAX_ENV, BOOT_MAX_STRING, true, &c.env, &c.envc);
	}
	if (r >= 0) {
		r = json_get_int(o, "clock_sec", &c.clock_sec);
	}
	if (r >= 0) {
		r = json_get_int(o, "clock_nsec", &c.clock_nsec);
	}
	if (r >= 0) {
		r = json_get_int(o, "vcpus", &c.vcpus);
	}
	if (r >= 0) {
		r = json_get_int(o, "mem_mib", &c.mem_mib);
	}
	if (r >= 0) {
		json_t *arr;
		r = json_get_array(o, "entropy", &arr);
		if (r >= 0 && json_array_size(arr) != BOOT_ENTROPY_WORDS) {
			r = -EBADMSG;
		}
		for (size_t i = 0; r >= 0 && i < BOOT_ENTROPY_WORDS; i++) {
			json_t *v = json_array_get(arr, i);
			if (!json_is_integer(v) || json_integer_value(v) < 0 ||
			    json_integer_value(v) > (json_int_t)UINT32_MAX) {
				r = -EBADMSG;
			} else {
				c.entropy[i] = (uint32_t)json_integer_value(v);
			}
		}
	}
	if (r >= 0) {
		r = proto_get_string(o, "ca_pem", BOOT_MAX_CA_PEM, &c.ca_pem);
		if (r == -ENOENT) {
			r = 0;
		} else if (r >= 0 && c.ca_pem[0] == '\0') {
			free(c.ca_pem);
			c.ca_pem = NULL;
		} else if (r >= 0 && !valid_ca_pem(c.ca_pem)) {
			r = -EBADMSG;
		}
	}
	if (r >= 0 && !values_valid(&c)) {
		r = -EBADMSG;
	}
	if (r < 0) {
		boot_config_release(&c);
		return r;
	}
	*ret = c;
	return 0;
}

int boot_config_encode(const struct boot_config *c, struct buf *out)
{
	_cleanup_json_ json_t *o = json_object();
	json_t *a;
	int r;

	if (!o) {
		return -ENOMEM;
	}
	/* The host never sends what the guest would refuse. */
	if (!c->box_id || !valid_name(c->box_id, BOOT_MAX_BOX_ID, true) || !c->hostname ||
	    !valid_name(c->hostname, BOOT_MAX_HOSTNAME, false) || c->envc > BOOT_MAX_ENV || (c->envc > 0 && !c->env) ||
	    !values_valid(c) || (c->ca_pem && c->ca_pem[0] && !valid_ca_pem(c->ca_pem))) {
		return -EINVAL;
	}
	r = proto_set_str(o, "box_id", c->box_id);
	if (r >= 0) {
		r = proto_set_str(o, "hostname", c->hostname);
	}
	if (r >= 0) {
		r = proto_json_strv(c->env, c->envc, &a);
		if (r >= 0) {
			r = json_object_set_new(o, "env", a) < 0 ? -ENOMEM : 0;
		}
	}
	if (r >= 0) {
		r = proto_set_int(o, "clock_sec", c->clock_sec);
	}
	if (r >= 0) {
		r = proto_set_int(o, "clock_nsec", c->clock_nsec);
	}
	if (r >= 0) {
		r = proto_set_int(o, "vcpus", c->vcpus);
	}
	if (r >= 0) {
		r = proto_set_int(o, "mem_mib", c->mem_mib);
	}
	if (r >= 0) {
		a = json_array();
		r = a ? 0 : -ENOMEM;
		for (size_t i = 0; r >= 0 && i < BOOT_ENTROPY_WORDS; i++) {
			r = json_array_append_new(a, json_integer(c->entropy[i])) < 0 ? -ENOMEM : 0;
		}
		if (a && json_object_set_new(o, "entropy", a) < 0 && r >= 0) {
			r = -ENOMEM;
		}
	}
	/* No CA: the member is left out (an old guest's closed key set would refuse it). */
	if (r >= 0 && c->ca_pem && c->ca_pem[0]) {
		r = proto_set_str(o, "ca_pem", c->ca_pem);
	}
	if (r < 0) {
		return r;
	}
	return proto_emit_json(out, AGENT_MSG_BOOT_CONFIG, o);
}
