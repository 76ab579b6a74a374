/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The daemon's signer link (src/daemon/signer-link.c) under load:
 *   link-stress SOCKET THREADS N STOPFILE
 * registers a run, then THREADS threads each decide and complete through
 * signer_link_once, as the daemon's API threads do, each call with a fresh
 * request_id: N times each, and on until STOPFILE exists. Prints the run id first (for the checks that follow),
 * then "calls failed: K"; exits 0 only when every call succeeded. The test
 * script (link-restart.sh) kills and restarts the signer meanwhile.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/signer-link.h"
#include "json.h"
#include "signer/rpcmsg.h"

#include "banned.h"

static const char *run_id, *run_token, *stop_file;
static long per_thread;
static int failed;
static long done;

static int call(json_t *req, json_t **ret)
{
	char err[512];
	int r = signer_link_once(signer_link_request_id(req), ret, err, sizeof(err));

	if (r < 0) {
		fprintf(stderr, "link-stress: %s\n", err);
		__atomic_add_fetch(&failed, 1, __ATOMIC_RELAXED);
	}
	return r;
}

static void *worker(void *arg)
{
	long id = (long)arg;
	json_t *args = json_pack("{s:s}", "command", "true");
	char digest[RPC_DIGEST_STRLEN + 1];

	if (!args || rpc_args_digest("Bash", args, digest) < 0) {
		__atomic_add_fetch(&failed, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	for (long i = 0; i < per_thread || access(stop_file, F_OK) < 0; i++) {
		char tcid[64];
		json_t *d = NULL, *c = NULL;

		(void)snprintf(tcid, sizeof(tcid), "t%ld-%ld", id, i);
		if (call(rpc_decide_encode(&(struct rpc_decide){ .run_id = run_id,
								 .run_token = run_token,
								 .tool_call_id = tcid,
								 .tool = "Bash",
								 .args = args,
								 .attempt = -1 }),
			 &d) < 0) {
			continue;
		}
		(void)call(rpc_complete_encode(&(struct rpc_complete){
				   .run_id = run_id,
				   .run_token = run_token,
				   .tool_call_id = tcid,
				   .decision_id = json_string_value(json_object_get(d, "decision_id")),
				   .args_digest = digest,
				   .status = RPC_STATUS_OK,
				   .exit_code = 0 }),
			   &c);
		json_decref(d);
		json_decref(c);
		__atomic_add_fetch(&done, 1, __ATOMIC_RELAXED);
	}
	json_decref(args);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th[64];
	json_t *run = NULL;
	long threads;

	if (argc != 5 || (threads = strtol(argv[2], NULL, 10)) < 1 || threads > 64 ||
	    (per_thread = strtol(argv[3], NULL, 10)) < 1) {
		fprintf(stderr, "usage: link-stress SOCKET THREADS(1..64) N STOPFILE\n");
		return 2;
	}
	stop_file = argv[4];
	if (signer_link_init(argv[1], 30) < 0 ||
	    call(json_pack("{s:s,s:{s:s}}", "method", "register_run", "agent", "name", "link-stress"), &run) < 0) {
		return 1;
	}
	run_id = json_string_value(json_object_get(run, "run_id"));
	run_token = json_string_value(json_object_get(run, "run_token"));
	printf("%s\n", run_id);
	fflush(stdout);
	for (long i = 0; i < threads; i++) {
		if (pthread_create(&th[i], NULL, worker, (void *)i) != 0) {
			return 1;
		}
	}
	for (long i = 0; i < threads; i++) {
		pthread_join(th[i], NULL);
	}
	printf("calls failed: %d\n", failed);
	printf("tool calls: %ld\n", __atomic_load_n(&done, __ATOMIC_RELAXED));
	json_decref(run);
	signer_link_shutdown();
	return failed == 0 ? 0 : 1;
}
