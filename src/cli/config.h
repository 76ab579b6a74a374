/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_CLI_CONFIG_H
#define TKBOX_CLI_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egress/secret.h"
#include "macro.h"

/*
 * tkbox.yaml (docs/config.md): a box's settings in a file, read by `tkbox run`
 * (./tkbox.yaml or --config FILE) and by `tkbox mcp --config FILE` (the
 * operator's setup, which an MCP client can only narrow).
 *
 *   version: 1                       # required
 *   image: python:3.12-slim
 *   name: job-1
 *   workspace: .                     # relative to the file's directory
 *   inspect: none                    # all | none
 *   allow: [pypi, api.example.com]   # entries and presets, as --allow
 *   secrets:                         # sources only, never values
 *     GH_TOKEN: {source: env:GH_TOKEN, hosts: [api.github.com], header: Authorization}
 *     NPM_TOKEN: file:npm-token.txt@registry.example.org   # the --secret text after NAME=
 *   env: {LANG: C.UTF-8}             # or a list of K=V
 *   limits: {memory: 2G, cpus: 2, disk: 4G, timeout: 1h, exec_timeout: 30m}
 *   mcp: {max_boxes: 4, max_message_bytes: 4M}
 *
 * The parser is pure (no I/O, no logging, no globals) and strict: a mapping
 * at the top, known keys only (the message lists them), each key once, the
 * right type for each key, no anchors, aliases, tags or merge keys, one
 * document, at most CONFIG_FILE_MAX bytes, every list and string capped.
 * Every error is "FILE:LINE:COL: message" (1-based, from libyaml's marks)
 * and never quotes a value's text (a value may be a secret written by
 * mistake); unknown keys are quoted (log_quote), except under secrets.
 *
 * Limits are held in the units the create request takes (MiB, seconds)
 * after the CLI's own parsers (cliutil.h) and ranges.
 *
 * The API (stable: tkbox run and tkbox mcp use it):
 *   config_parse()   bytes -> struct config (pure)
 *   config_load()    read a file (capped), parse, sha256 of its bytes, and
 *                    resolve relative paths (workspace, file: sources)
 *                    against the file's directory
 *   config_release() frees what either filled in (accepts a zeroed struct)
 */

#define CONFIG_FILE_MAX (64 * 1024) /* bytes of tkbox.yaml */
#define CONFIG_SCALAR_MAX 4096 /* bytes of one key or value */
#define CONFIG_VERSION 1
#define CONFIG_MCP_MAX_BOXES_MAX 64
#define CONFIG_MCP_MESSAGE_MIN (4 * 1024)
#define CONFIG_MCP_MESSAGE_MAX (64 * 1024 * 1024)

/* Which optional settings the file gave (a bit each; CONFIG_HAS_*). */
enum config_has {
	CONFIG_HAS_IMAGE = 1 << 0,
	CONFIG_HAS_NAME = 1 << 1,
	CONFIG_HAS_WORKSPACE = 1 << 2,
	CONFIG_HAS_INSPECT = 1 << 3,
	CONFIG_HAS_ALLOW = 1 << 4,
	CONFIG_HAS_SECRETS = 1 << 5,
	CONFIG_HAS_ENV = 1 << 6,
	CONFIG_HAS_MEMORY = 1 << 7,
	CONFIG_HAS_CPUS = 1 << 8,
	CONFIG_HAS_DISK = 1 << 9,
	CONFIG_HAS_TIMEOUT = 1 << 10,
	CONFIG_HAS_EXEC_TIMEOUT = 1 << 11,
	CONFIG_HAS_MCP_MAX_BOXES = 1 << 12,
	CONFIG_HAS_MCP_MAX_MESSAGE = 1 << 13,
};

enum config_source_kind {
	CONFIG_SOURCE_ENV = 1, /* source "env:VAR" */
	CONFIG_SOURCE_FILE, /* source "file:PATH" */
	CONFIG_SOURCE_STDIN, /* source "stdin" */
};

/* A secret as the file names it: where its value is read, and where it may go. Never a value. */
struct config_secret {
	char name[EGRESS_SECRET_NAME_MAX + 1];
	enum config_source_kind kind;
	char *source; /* "env:VAR", "file:PATH" or "stdin" (config_load makes a relative PATH absolute) */
	char hosts[EGRESS_SECRET_HOSTS_MAX][EGRESS_HOST_TEXT_MAX]; /* exact names, as egress_secret_binding_parse */
	size_t n_hosts;
	char header[EGRESS_SECRET_HEADER_MAX + 1]; /* EGRESS_SECRET_DEFAULT_HEADER when none is named */
};

struct config {
	unsigned has; /* enum config_has */
	char *image, *name;
	char *workspace; /* as written by config_parse; absolute after config_load */
	bool inspect_all; /* inspect: all (else none) */
	char **allow; /* n_allow values (<= EGRESS_MAX_ALLOW), NULL-terminated; NULL when absent */
	size_t n_allow;
	char **env; /* n_env "K=V" (<= DAEMON_MAX_BOX_ENV), NULL-terminated; NULL when absent */
	size_t n_env;
	struct config_secret *secrets; /* n_secrets (<= EGRESS_SECRET_MAX), names unique, in file order */
	size_t n_secrets;
	uint64_t memory_mib, cpus, disk_mib, timeout_s, exec_timeout_s; /* when the CONFIG_HAS_ bit is set */
	uint64_t mcp_max_boxes, mcp_max_message_bytes; /* when the CONFIG_HAS_MCP_ bit is set */
	/* config_load only */
	char *path; /* the file's absolute path */
	char *dir; /* its directory */
	char sha256[65]; /* lower-case hex of the file's bytes */
};

/*
 * Parse len bytes of text (need not be NUL-terminated) named name in errors.
 * 0 and *ret filled (release it); -EINVAL (malformed, refused), -E2BIG (over a
 * cap) or -ENOMEM, with err holding "name:LINE:COL: message" (or "name: ..."
 * when there is no position). *ret is untouched on failure.
 */
_wur_ int config_parse(const char *name, const void *text, size_t len, struct config *ret, char *err, size_t err_size);

/*
 * Read path (a regular file of at most CONFIG_FILE_MAX bytes), parse it, fill
 * path, dir and sha256, and make workspace and file: secret sources absolute
 * against the file's directory. -ENOENT when it does not exist (err says so),
 * else config_parse's errors or -errno.
 */
_wur_ int config_load(const char *path, struct config *ret, char *err, size_t err_size);

void config_release(struct config *c);

/*
 * The --secret text for s: "NAME=SOURCE@host[,host...]:Header" (new string),
 * which run_secret_parse reads as the flag would be.
 */
_wur_ int config_secret_flag(const struct config_secret *s, char **ret);

#endif
