/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "banned.h"
#include "crypto.h"
#include "daemon/secrets.h"
#include "io.h"
#include "secmem.h"
#include "strv.h"

void box_secrets_free(struct box_secrets *s)
{
	if (!s) {
		return;
	}
	for (size_t i = 0; s->v && i < s->n; i++) {
		if (s->v[i].value) {
			secmem_free(s->v[i].value, s->v[i].value_len);
		}
	}
	if (s->v) {
		explicit_bzero(s->v, s->n * sizeof(*s->v));
	}
	free(s->v);
	*s = (struct box_secrets){ 0 };
}

/* One secret of the request, checked again: the daemon never trusts that its decoder ran. */
static int secret_check(const struct egress_secret *in, char *err, size_t err_size)
{
	const char *why;

	if (!egress_secret_name_ok(in->name)) {
		(void)snprintf(err, err_size, "a secret's name is not [A-Z_][A-Z0-9_]* of at most %d bytes",
			       EGRESS_SECRET_NAME_MAX);
		return -EINVAL;
	}
	if (!in->value || egress_secret_value_check(in->value, in->value_len, &why) < 0) {
		(void)snprintf(err, err_size, "secret %s: %s", in->name, in->value ? why : "no value");
		return -EINVAL;
	}
	if (egress_secret_header_check(in->header, &why) < 0) {
		(void)snprintf(err, err_size, "secret %s: %s", in->name, why);
		return -EINVAL;
	}
	if (in->n_hosts == 0 || in->n_hosts > EGRESS_SECRET_HOSTS_MAX) {
		(void)snprintf(err, err_size, "secret %s: 1..%d bound hosts (EGRESS_SECRET_HOSTS_MAX)", in->name,
			       EGRESS_SECRET_HOSTS_MAX);
		return -EINVAL;
	}
	for (size_t h = 0; h < in->n_hosts; h++) {
		struct egress_host eh;
		size_t hn = strnlen(in->hosts[h], EGRESS_HOST_TEXT_MAX);
		if (hn == EGRESS_HOST_TEXT_MAX || egress_host_parse(in->hosts[h], hn, &eh) < 0 ||
		    eh.kind != EGRESS_HOST_NAME || strcmp(eh.name, in->hosts[h]) != 0) {
			(void)snprintf(err, err_size, "secret %s: a bound host is not an exact, canonical DNS name",
				       in->name);
			return -EINVAL;
		}
		for (size_t k = 0; k < h; k++) {
			if (strcmp(in->hosts[k], in->hosts[h]) == 0) {
				(void)snprintf(err, err_size, "secret %s: host %s is named twice", in->name,
					       in->hosts[h]);
				return -EINVAL;
			}
		}
	}
	return 0;
}

int box_secrets_from_api(struct api_create_req *q, struct box_secrets *ret, char *err, size_t err_size)
{
	struct box_secrets s = { 0 };
	int r;

	if (q->n_secrets == 0) {
		*ret = s;
		return 0;
	}
	if (q->n_secrets > EGRESS_SECRET_MAX) {
		(void)snprintf(err, err_size, "more than %d secrets (EGRESS_SECRET_MAX)", EGRESS_SECRET_MAX);
		return -EINVAL;
	}
	for (size_t i = 0; i < q->n_secrets; i++) {
		r = secret_check(&q->secrets[i], err, err_size);
		if (r < 0) {
			return r;
		}
		for (size_t k = 0; k < i; k++) {
			if (strcmp(q->secrets[k].name, q->secrets[i].name) == 0) {
				(void)snprintf(err, err_size, "secret %s is named twice", q->secrets[i].name);
				return -EINVAL;
			}
		}
	}
	s.v = calloc(q->n_secrets, sizeof(*s.v));
	if (!s.v) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < q->n_secrets; i++) {
		char hex[EGRESS_SECRET_RANDOM_HEX + 1];
		struct egress_secret *o = &s.v[i];

		if (crypto_random_hex(EGRESS_SECRET_RANDOM_HEX / 2, hex) < 0) {
			free(s.v);
			(void)snprintf(err, err_size, "no randomness for the placeholders");
			return -EIO;
		}
		*o = q->secrets[i];
		o->value = NULL;
		o->value_len = 0;
		(void)snprintf(o->placeholder, sizeof(o->placeholder), "tkbox_%s_%s", o->name, hex);
	}
	/* Nothing can fail from here: the values move. */
	for (size_t i = 0; i < q->n_secrets; i++) {
		s.v[i].value = steal_ptr(q->secrets[i].value);
		s.v[i].value_len = q->secrets[i].value_len;
		q->secrets[i].value_len = 0;
	}
	s.n = q->n_secrets;
	*ret = s;
	return 0;
}

int box_secrets_env(const struct box_secrets *s, char *const *user_env, char ***ret, char *err, size_t err_size)
{
	_cleanup_strv_ char **v = calloc(s->n + 1, sizeof(char *));

	if (!v) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < s->n; i++) {
		size_t nl = strlen(s->v[i].name);
		for (char *const *e = user_env; e && *e; e++) {
			/* the box's env is recorded and is the box's: it may not hold a value either */
			if (egress_secret_in(&s->v[i], *e, strlen(*e))) {
				const char *eq = strchr(*e, '=');
				size_t kl = eq ? (size_t)(eq - *e) : 0;
				if (kl && !egress_secret_in(&s->v[i], *e, kl)) {
					(void)snprintf(
						err, err_size,
						"--env %.*s holds the value of secret %s; use the placeholder $%s "
						"the box gets: the proxy swaps it in for %s's bound hosts",
						(int)MIN(kl, (size_t)200), *e, s->v[i].name, s->v[i].name,
						s->v[i].name);
				} else {
					(void)snprintf(err, err_size, "an --env entry holds the value of secret %s",
						       s->v[i].name);
				}
				return -EINVAL;
			}
			if (strncmp(*e, s->v[i].name, nl) == 0 && (*e)[nl] == '=') {
				(void)snprintf(
					err, err_size,
					"--env sets %s, which secret %s sets to its placeholder; drop one of them",
					s->v[i].name, s->v[i].name);
				return -EEXIST;
			}
		}
		if (asprintf(&v[i], "%s=%s", s->v[i].name, s->v[i].placeholder) < 0) {
			v[i] = NULL;
			return -ENOMEM;
		}
	}
	*ret = steal_ptr(v);
	return 0;
}

int box_secrets_hosts(const struct box_secrets *s, char ***ret)
{
	size_t total = 0, k = 0;
	_cleanup_strv_ char **v = NULL;

	for (size_t i = 0; i < s->n; i++) {
		total += s->v[i].n_hosts;
	}
	v = calloc(total + 1, sizeof(char *));
	if (!v) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < s->n; i++) {
		for (size_t h = 0; h < s->v[i].n_hosts; h++) {
			bool seen = false;
			for (size_t j = 0; j < k && !seen; j++) {
				seen = strcmp(v[j], s->v[i].hosts[h]) == 0;
			}
			if (!seen && !(v[k++] = strdup(s->v[i].hosts[h]))) {
				return -ENOMEM;
			}
		}
	}
	*ret = steal_ptr(v);
	return 0;
}

static int exec_refuse(const struct egress_secret *x, const char *place, char *why, size_t why_size)
{
	(void)snprintf(why, why_size,
		       "exec refused: %s holds the value of secret %s (rule secret-in-exec); use the placeholder $%s: "
		       "the proxy swaps it in for %s's bound hosts",
		       place, x->name, x->name, x->name);
	return -EACCES;
}

int box_secrets_check_exec(const struct box_secrets *s, char *const *argv, const char *line, const char *cwd,
			   char *const *env, const void *stdin_p, size_t stdin_n, char *why, size_t why_size)
{
	for (size_t i = 0; i < s->n; i++) {
		const struct egress_secret *x = &s->v[i];

		for (char *const *a = argv; a && *a; a++) {
			if (egress_secret_in(x, *a, strlen(*a))) {
				return exec_refuse(x, "the command line", why, why_size);
			}
		}
		if (cwd && egress_secret_in(x, cwd, strlen(cwd))) {
			return exec_refuse(x, "its working directory", why, why_size);
		}
		for (char *const *e = env; e && *e; e++) {
			const char *eq = strchr(*e, '=');
			if (egress_secret_in(x, *e, strlen(*e))) {
				char place[256];
				size_t kl = eq ? (size_t)(eq - *e) : strlen(*e);
				/* A name is never a value's place: a value inside the name is named as the entry. */
				if (eq && !egress_secret_in(x, *e, kl)) {
					(void)snprintf(place, sizeof(place), "the command's env %.*s",
						       (int)MIN(kl, (size_t)128), *e);
				} else {
					(void)snprintf(place, sizeof(place), "the command's env");
				}
				return exec_refuse(x, place, why, why_size);
			}
		}
		/*
		 * The decided form, after the env it also holds (so an env entry is named as such): quoting
		 * can join words, so a value may appear only here.
		 */
		if (line && egress_secret_in(x, line, strlen(line))) {
			return exec_refuse(x, "the command line", why, why_size);
		}
		if (stdin_p && egress_secret_in(x, stdin_p, stdin_n)) {
			return exec_refuse(x, "its stdin", why, why_size);
		}
	}
	return 0;
}

int box_secrets_memfd(const struct box_secrets *s)
{
	struct iovec iov[EGRESS_SECRET_MAX];

	if (s->n == 0) {
		return -ENOENT;
	}
	if (s->n > ARRAY_SIZE(iov)) {
		return -E2BIG;
	}
	for (size_t i = 0; i < s->n; i++) {
		iov[i] = (struct iovec){ .iov_base = s->v[i].value, .iov_len = s->v[i].value_len };
	}
	return io_memfd_sealed("tkbox-secrets", iov, s->n);
}

void box_secrets_supmsg_release(struct supmsg *m)
{
	for (size_t i = 0; m->secrets && i < m->n_secrets; i++) {
		free(m->secrets[i].hosts); /* the host strings are the table's */
	}
	free(m->secrets);
	m->secrets = NULL;
	m->n_secrets = 0;
}

int box_secrets_supmsg(const struct box_secrets *s, struct supmsg *m, int *ret_fd)
{
	struct supmsg t = { .op = SUPMSG_SECRETS };
	int fd;

	if (s->n == 0) {
		return -ENOENT;
	}
	t.secrets = calloc(s->n, sizeof(*t.secrets));
	if (!t.secrets) {
		return -ENOMEM;
	}
	t.n_secrets = s->n;
	for (size_t i = 0; i < s->n; i++) {
		struct supmsg_secret *o = &t.secrets[i];
		struct egress_secret *x = &s->v[i];
		o->name = x->name;
		o->placeholder = x->placeholder;
		o->header = x->header;
		o->len = (int64_t)x->value_len;
		o->n_hosts = x->n_hosts;
		o->hosts = calloc(x->n_hosts + 1, sizeof(char *));
		if (!o->hosts) {
			box_secrets_supmsg_release(&t);
			return -ENOMEM;
		}
		for (size_t h = 0; h < x->n_hosts; h++) {
			o->hosts[h] = x->hosts[h];
		}
	}
	fd = box_secrets_memfd(s);
	if (fd < 0) {
		box_secrets_supmsg_release(&t);
		return fd;
	}
	m->op = t.op;
	m->secrets = t.secrets;
	m->n_secrets = t.n_secrets;
	*ret_fd = fd;
	return 0;
}

json_t *box_secrets_json(const struct box_secrets *s)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < s->n; i++) {
		const struct egress_secret *x = &s->v[i];
		json_t *hosts = json_array();
		for (size_t h = 0; hosts && h < x->n_hosts; h++) {
			if (json_array_append_new(hosts, json_string(x->hosts[h])) < 0) {
				json_decref(hosts);
				hosts = NULL;
			}
		}
		json_t *o = hosts ? json_pack("{s:s,s:s,s:o,s:s}", "name", x->name, "placeholder", x->placeholder,
					      "hosts", hosts, "header", x->header)
				  : NULL;
		if (!o || json_array_append_new(a, o) < 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}
