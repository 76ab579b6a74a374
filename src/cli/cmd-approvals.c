/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "cli/apiclient.h"
#include "cli/commands.h"
#include "json.h"

/*
 * Box approvals for the network door: `tkbox approvals` lists the pending
 * ones (every box's), `tkbox approve ID` and `tkbox reject ID` answer one.
 * Only the API socket can answer, and only the daemon's uid and root reach it.
 */

#define ID_MAX 31 /* the daemon's {id} segment (API_MAX_ID - 1) */

static const char *str(const json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "-";
}

/* Our ids are "ap-" and hex; a word outside [a-z0-9-] would not reach a route anyway. */
static bool id_ok(const char *id)
{
	size_t n = strlen(id);
	return n > 0 && n <= ID_MAX && strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

/* Parse `[--state-dir D]` and the expected number of words; -1 after printing usage. */
static int parse_args(int argc, char **argv, bool allow_json, bool *ret_json, const char **ret_state_dir,
		      const char *usage)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'j':
			if (!allow_json) {
				fprintf(stderr, "usage: %s\n", usage);
				return -1;
			}
			*ret_json = true;
			break;
		case 'd':
			*ret_state_dir = optarg;
			break;
		default:
			fprintf(stderr, "usage: %s\n", usage);
			return -1;
		}
	}
	return 0;
}

static void format_age(json_int_t s, char out[32])
{
	if (s < 60) {
		(void)snprintf(out, 32, "%llds", (long long)s);
	} else {
		(void)snprintf(out, 32, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
	}
}

int cmd_approvals(int argc, char **argv)
{
	static const char usage[] = "tkbox approvals [--json] [--state-dir D]";
	_cleanup_json_ json_t *reply = NULL;
	const char *state_dir = NULL;
	bool as_json = false;
	json_t *list, *a;
	int status = 0;
	size_t i;

	if (parse_args(argc, argv, true, &as_json, &state_dir, usage) < 0) {
		return 2;
	}
	if (optind != argc) {
		fprintf(stderr, "usage: %s\n", usage);
		return 2;
	}
	if (apiclient_call(state_dir, "GET", "/v1/approvals", NULL, &status, &reply) < 0) {
		return 125;
	}
	if (status != 200) {
		apiclient_print_error("approvals", status, reply);
		return 125;
	}
	list = json_object_get(reply, "approvals");
	if (!json_is_array(list)) {
		fprintf(stderr, "tkbox approvals: the daemon's answer has no approvals list (is it an older tkbox?)\n");
		return 125;
	}
	if (as_json) {
		/* The API's body as it is: {approvals: [{id, box, target, url, age_s, expires_in_s, waiting}]}. */
		char *s = json_dumps(reply, JSON_INDENT(2) | JSON_SORT_KEYS);
		if (s) {
			printf("%s\n", s);
			free(s);
		}
		return 0;
	}
	if (json_array_size(list) == 0) {
		printf("no pending approvals\n");
		return 0;
	}
	printf("%-16s %-20s %-40s %s\n", "ID", "BOX", "TARGET", "AGE");
	json_array_foreach(list, i, a) {
		char age[32];
		format_age(json_integer_value(json_object_get(a, "age_s")), age);
		printf("%-16s %-20s %-40s %s\n", str(a, "id"), str(a, "box"), str(a, "target"), age);
	}
	return 0;
}

static int answer(int argc, char **argv, bool approve)
{
	const char *verb = approve ? "approve" : "reject";
	_cleanup_json_ json_t *reply = NULL;
	const char *state_dir = NULL;
	char usage[64], path[96];
	bool unused = false;
	int status = 0;

	(void)snprintf(usage, sizeof(usage), "tkbox %s ID [--state-dir D]", verb);
	if (parse_args(argc, argv, false, &unused, &state_dir, usage) < 0) {
		return 2;
	}
	if (optind + 1 != argc || !id_ok(argv[optind])) {
		fprintf(stderr, "usage: %s (ID as `tkbox approvals` lists it, e.g. ap-0123456789ab)\n", usage);
		return 2;
	}
	(void)snprintf(path, sizeof(path), "/v1/approvals/%s/%s", argv[optind], verb);
	if (apiclient_call(state_dir, "POST", path, NULL, &status, &reply) < 0) {
		return 125;
	}
	if (status != 200) {
		apiclient_print_error(verb, status, reply);
		/* No such approval, or one already answered: nothing changed. */
		return status == 404 || status == 409 ? 1 : 125;
	}
	printf("%s: %s\n", str(reply, "id"), str(reply, "state"));
	return 0;
}

int cmd_approve(int argc, char **argv)
{
	return answer(argc, argv, true);
}

int cmd_reject(int argc, char **argv)
{
	return answer(argc, argv, false);
}
