/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_DAEMON_SECRETS_H
#define TKBOX_DAEMON_SECRETS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "daemon/api-proto.h"
#include "daemon/supmsg.h"
#include "egress/secret.h"
#include "macro.h"

/*
 * A box's secrets (docs/secrets.md): the values the create request carried
 * (each in secmem), their placeholders "tkbox_<NAME>_<32 hex>" and bindings.
 * The values are never logged, recorded, printed or put in an error; every
 * message below names the secret, never its value.
 *
 * How the daemon (daemon.c) uses it, in order:
 *
 *   struct box gains `struct box_secrets secrets;` (zeroed by calloc).
 *
 *   create (api_create, after api_decode_create and box_new, before box_resolve):
 *     r = box_secrets_from_api(&q, &b->secrets, err, sizeof(err));
 *         takes the values out of q (q.secrets[i].value becomes NULL), makes
 *         the placeholders; -EINVAL (a 400, err says why) / -ENOMEM / -EIO (no randomness).
 *     r = box_secrets_env(&b->secrets, q.env, &extra, err, sizeof(err));
 *         extra: NULL-terminated "NAME=<placeholder>" entries (free with strv_free / free each):
 *         append them to b->env BEFORE box_merge_image_env (so they override the image's Env).
 *         -EEXIST (a 400): the user's --env already sets NAME; -EINVAL (a 400): an --env
 *         entry holds a secret's value (the box's env is recorded and is the box's).
 *     box_secrets_hosts(&b->secrets, &hosts): NULL-terminated, unique, canonical host names; each
 *         joins the allowlist as an exact host entry (egress_allow_parse(hosts[i]) works on each).
 *     workspace: call workspace_local_resolve_secrets(..., &b->secrets, ...) (image-local.h) in
 *         place of workspace_local_resolve: a workspace file whose content, path or symlink
 *         target holds a value refuses the box (-EINVAL: a 400, err names the file and the secret).
 *     tkbox.box record: json_object_set_new(data, "secrets", box_secrets_json(&b->secrets))
 *         ([{name, placeholder, hosts, header}], [] when none; never a value).
 *
 *   after ready (when b->secrets.n > 0):
 *     struct supmsg m = { 0 }; int fd;
 *     r = box_secrets_supmsg(&b->secrets, &m, &fd);   m.op = SUPMSG_SECRETS, m.secrets borrowed
 *     r = box_send(b, &m, &fd);  close(fd);  box_secrets_supmsg_release(&m);
 *
 *   exec (exec_args, after the decided line e->line is built):
 *     r = box_secrets_check_exec(&b->secrets, q->argv, e->line, e->cwd, q->env,
 *                                stdin_ptr, stdin_len, why, sizeof(why));
 *     -EACCES: refuse with 403 code "refused", message why (rule secret-in-exec). Called with
 *     g.lock not needed: b->secrets is written once at create, before the box runs.
 *
 *   box_free: box_secrets_free(&b->secrets) (wipes and unmaps every value).
 */

struct box_secrets {
	struct egress_secret *v; /* n entries; v[i].value in secmem */
	size_t n;
};

/*
 * From the decoded create request (q->secrets, q->n_secrets): checked again
 * (names, values, headers, hosts, the caps, names unique), the values moved
 * out of q, a placeholder made for each with crypto_random_hex. *ret must be
 * zeroed; on failure it stays empty and q keeps what was not moved.
 */
_wur_ int box_secrets_from_api(struct api_create_req *q, struct box_secrets *ret, char *err, size_t err_size);

/*
 * The box env entries "NAME=<placeholder>", NULL-terminated (an empty array
 * when there are no secrets). -EEXIST when user_env (the request's --env
 * entries, "K=V", NULL-terminated, may be NULL) already sets a secret's NAME;
 * -EINVAL when an entry holds a secret's value (err names the entry's name
 * and the secret, never the value).
 */
_wur_ int box_secrets_env(const struct box_secrets *s, char *const *user_env, char ***ret, char *err, size_t err_size);

/* Every bound host once (canonical names), NULL-terminated; an empty array when there are none. */
_wur_ int box_secrets_hosts(const struct box_secrets *s, char ***ret);

/*
 * The exec check (spec step 12): argv as given, the decided command line
 * (door_command_line's form, or NULL), cwd (or NULL), env ("K=V",
 * NULL-terminated, or NULL) and the up-front stdin (p, n; NULL/0 when none)
 * are searched for each value as raw bytes. -EACCES with why: "exec refused:
 * the command line holds the value of secret GH (rule secret-in-exec); use
 * the placeholder $GH: the proxy swaps it in for GH's bound hosts" (the
 * place: "the command line", "the command's env K", "its working directory",
 * "its stdin").
 */
_wur_ int box_secrets_check_exec(const struct box_secrets *s, char *const *argv, const char *line, const char *cwd,
				 char *const *env, const void *stdin_p, size_t stdin_n, char *why, size_t why_size);

/*
 * The values back to back, in order, in a sealed memfd (F_SEAL_WRITE,
 * F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL; close-on-exec; offset 0): the
 * fd or -errno. -ENOENT when there are no secrets.
 */
_wur_ int box_secrets_memfd(const struct box_secrets *s);

/*
 * The `secrets` message: m->op, m->secrets (name, placeholder, header
 * borrowed from s; hosts arrays allocated) and m->n_secrets, and the sealed
 * memfd in *ret_fd (the caller closes it). box_secrets_supmsg_release frees
 * what this allocated (never use supmsg_release on m).
 */
_wur_ int box_secrets_supmsg(const struct box_secrets *s, struct supmsg *m, int *ret_fd);
void box_secrets_supmsg_release(struct supmsg *m);

/* For tkbox.box: [{name, placeholder, hosts, header}] (never a value); NULL on ENOMEM. */
json_t *box_secrets_json(const struct box_secrets *s);

/* Wipe and unmap every value, free the table; s is empty afterwards. NULL and empty are fine. */
void box_secrets_free(struct box_secrets *s);

#endif
