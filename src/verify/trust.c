/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "banned.h"
#include "json.h"
#include "verify/trust.h"

static const char *const class_names[] = { "public", "customer", "tracekit", "operator" };

const char *witness_class_name(enum witness_class c)
{
	switch (c) {
	case WITNESS_PUBLIC:
	case WITNESS_CUSTOMER:
	case WITNESS_TRACEKIT:
	case WITNESS_OPERATOR:
		return class_names[c];
	default:
		return "unknown";
	}
}

static int parse_class(const char *s, enum witness_class *ret)
{
	for (size_t i = 0; i < ARRAY_SIZE(class_names); i++) {
		if (strcmp(s, class_names[i]) == 0) {
			*ret = (enum witness_class)i;
			return 0;
		}
	}
	return -EBADMSG;
}

void trust_release(struct trust *t)
{
	if (!t) {
		return;
	}
	for (size_t i = 0; i < t->n_logs + t->n_witnesses; i++) {
		note_vkey_release(&t->keys[i]);
	}
	*t = (struct trust){ 0 };
}

#define FAIL(code, why)                                                                                                \
	do {                                                                                                           \
		r = (code);                                                                                            \
		reason = (why);                                                                                        \
		goto out;                                                                                              \
	} while (0)

int trust_parse(const void *p, size_t n, struct trust *ret, const char **ret_why)
{
	static const char *const top_keys[] = { "logs",	 "algs",     "witnesses", "witnesses_required",
						"rekor", "monitors", NULL };
	static const char *const witness_keys[] = { "vkey", "class", NULL };
	static const char *const rekor_keys[] = { "trusted_root", "publishing_key", "class", NULL };
	static const char *const monitor_keys[] = { "vkey", "class", "max_age_s", NULL };
	struct json_opts opts = { .max_bytes = TRUST_MAX_BYTES, .max_depth = 0, .want_top = JSON_OBJECT };
	struct trust *t = NULL;
	const char *reason = NULL;
	json_t *doc = NULL, *logs, *algs, *wit, *v;
	size_t i;
	int r;

	if (n > TRUST_MAX_BYTES) {
		if (ret_why) {
			*ret_why = "trust config larger than 1 MiB";
		}
		return -E2BIG;
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		return -ENOMEM;
	}
	r = json_parse_strict(p, n, &opts, &doc);
	if (r < 0) {
		FAIL(r == -ENOMEM ? r : -EBADMSG, "not one strict JSON object");
	}
	if (json_only_keys(doc, top_keys) < 0) {
		FAIL(-EBADMSG, "unknown key (allowed: logs, algs, witnesses, witnesses_required, rekor, monitors)");
	}
	if (json_get_array(doc, "logs", &logs) < 0 || json_array_size(logs) == 0) {
		FAIL(-EBADMSG, "logs must be a non-empty array of vkeys");
	}
	if (json_array_size(logs) > TRUST_MAX_LOGS) {
		FAIL(-E2BIG, "more than 16 log keys");
	}
	json_array_foreach(logs, i, v) {
		struct note_vkey *k = &t->keys[t->n_logs];

		if (!json_is_string(v)) {
			FAIL(-EBADMSG, "logs must be a non-empty array of vkeys");
		}
		r = note_vkey_parse(json_string_value(v), json_string_length(v), k);
		if (r == -EPROTONOSUPPORT) {
			FAIL(r, "a log key of a type tkbox verify cannot check (hybrid SLH-DSA?)");
		}
		if (r < 0) {
			FAIL(r == -ENOMEM ? r : -EBADMSG, "a log vkey does not parse");
		}
		t->n_logs++;
		if (k->type != NOTE_SIG_ED25519) {
			FAIL(-EBADMSG, "a log vkey is not an Ed25519 (type 0x01) key");
		}
	}
	if (json_get_array(doc, "algs", &algs) < 0 || json_array_size(algs) == 0) {
		FAIL(-EBADMSG, "algs must be a non-empty array of strings");
	}
	if (json_array_size(algs) > TRUST_MAX_ALGS) {
		FAIL(-E2BIG, "more than 8 algs");
	}
	json_array_foreach(algs, i, v) {
		if (!json_is_string(v)) {
			FAIL(-EBADMSG, "algs must be a non-empty array of strings");
		}
		if (strcmp(json_string_value(v), "ed25519") == 0) {
			t->alg_ed25519 = true;
		}
	}
	r = json_get_array(doc, "witnesses", &wit);
	if (r == -EBADMSG) {
		FAIL(r, "witnesses must be an array");
	}
	if (r == 0) {
		if (json_array_size(wit) > TRUST_MAX_WITNESSES) {
			FAIL(-E2BIG, "more than 32 witnesses");
		}
		json_array_foreach(wit, i, v) {
			struct note_vkey *k = &t->keys[t->n_logs + t->n_witnesses];
			const char *vk, *cls;

			if (!json_is_object(v) || json_only_keys(v, witness_keys) < 0 ||
			    json_get_string(v, "vkey", &vk) < 0 || json_get_string(v, "class", &cls) < 0) {
				FAIL(-EBADMSG, "a witness is not {vkey, class}");
			}
			if (parse_class(cls, &t->wclass[t->n_witnesses]) < 0) {
				FAIL(-EBADMSG, "a witness class is not public, customer, tracekit or operator");
			}
			r = note_vkey_parse(vk, strlen(vk), k);
			if (r < 0) {
				FAIL(r == -ENOMEM ? r : -EBADMSG, "a witness vkey does not parse");
			}
			t->n_witnesses++;
		}
	}
	r = json_get_int(doc, "witnesses_required", &t->witnesses_required);
	if (r == -EBADMSG || (r == 0 && (t->witnesses_required < 0 || t->witnesses_required > TRUST_MAX_WITNESSES))) {
		FAIL(-EBADMSG, "witnesses_required must be an integer from 0 to 32");
	}
	v = json_object_get(doc, "rekor");
	if (v) {
		const char *s;
		json_t *root;

		if (!json_is_object(v) || json_only_keys(v, rekor_keys) < 0 ||
		    json_get_object(v, "trusted_root", &root) < 0 || json_get_string(v, "publishing_key", &s) < 0 ||
		    json_get_string(v, "class", &s) < 0) {
			FAIL(-EBADMSG, "rekor must be {trusted_root, publishing_key, class}");
		}
		t->has_rekor = true;
	}
	v = json_object_get(doc, "monitors");
	if (v) {
		json_t *m;

		if (!json_is_array(v)) {
			FAIL(-EBADMSG, "monitors must be an array");
		}
		json_array_foreach(v, i, m) {
			const char *s;
			int64_t age;

			if (!json_is_object(m) || json_only_keys(m, monitor_keys) < 0 ||
			    json_get_string(m, "vkey", &s) < 0 || json_get_string(m, "class", &s) < 0 ||
			    json_get_int(m, "max_age_s", &age) < 0) {
				FAIL(-EBADMSG, "a monitor is not {vkey, class, max_age_s}");
			}
		}
		t->has_monitors = json_array_size(v) > 0;
	}
	*ret = *t;
	free(t);
	t = NULL;
	r = 0;
out:
	if (r < 0 && ret_why) {
		*ret_why = reason;
	}
	if (t) {
		trust_release(t);
		free(t);
	}
	json_decref(doc);
	return r;
}
