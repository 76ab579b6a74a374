/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Load generator for bench/signer.sh: C clients, each with its own run,
 * send `decide` requests (Bash "echo hi") with up to DEPTH in flight and
 * measure each one from send to its (durable) answer.
 *   signer-bench SOCKET CLIENTS REQUESTS_PER_CLIENT DEPTH
 * Prints decisions/s and p50/p90/p99/max latency. It measures; it asserts nothing.
 * With SIGNER_BENCH_CLOSE=1 each client closes its run at the end and prints
 * "run_id=<id>" (bench/signer.sh exports and verifies that run).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "json.h"
#include "signer/client.h"

#include "banned.h"

struct worker {
	const char *sock;
	long n;
	int depth;
	double *lat_ms;
	long done;
	long errors;
	int id;
};

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct signer_client *c = NULL;
	json_t *rep = NULL, *req;
	char err[256], *line = NULL;
	const char *run_id, *token;
	double *sent;
	long next = 0;

	if (signer_client_open(w->sock, &c, err, sizeof(err)) < 0) {
		fprintf(stderr, "client %d: %s\n", w->id, err);
		return NULL;
	}
	/* Request ids unique per process and client: a second bench must not replay the first one's answers. */
	snprintf(err, sizeof(err), "bench-%d-%d", (int)getpid(), w->id);
	req = json_pack("{s:s,s:s,s:{s:s}}", "method", "register_run", "request_id", err, "agent", "name", "bench");
	if (!req || signer_client_call(c, req, -1, &rep) < 0 || signer_reply_error(rep, NULL)) {
		fprintf(stderr, "client %d: register_run failed\n", w->id);
		return NULL;
	}
	json_decref(req);
	run_id = json_string_value(json_object_get(rep, "run_id"));
	token = json_string_value(json_object_get(rep, "run_token"));
	sent = calloc((size_t)w->n, sizeof(double));
	if (!sent) {
		return NULL;
	}
	while (w->done < w->n) {
		/* Keep DEPTH requests in flight (answers come back in order). */
		while (next < w->n && next - w->done < w->depth) {
			int k;
			free(line);
			k = asprintf(
				&line,
				"{\"method\":\"decide\",\"request_id\":\"b%d-%d-%ld\",\"run_id\":\"%s\",\"run_token\":"
				"\"%"
				"s\","
				"\"tool_call_id\":\"c%ld\",\"tool\":\"Bash\",\"args\":{\"command\":\"echo hi\"}}\n",
				(int)getpid(), w->id, next, run_id, token, next);
			if (k < 0) {
				line = NULL;
				goto out;
			}
			sent[next] = now_ms();
			if (signer_client_send_raw(c, line, (size_t)k) < 0) {
				goto out;
			}
			next++;
		}
		{
			json_t *d = NULL;
			if (signer_client_recv(c, &d) < 0) {
				goto out;
			}
			w->lat_ms[w->done] = now_ms() - sent[w->done];
			if (signer_reply_error(d, NULL)) {
				w->errors++;
			}
			json_decref(d);
			w->done++;
		}
	}
	if (getenv("SIGNER_BENCH_CLOSE")) {
		char closeid[64];
		snprintf(closeid, sizeof(closeid), "bench-close-%d-%d", (int)getpid(), w->id);
		json_t *cl = json_pack("{s:s,s:s,s:s,s:s}", "method", "close_run", "request_id", closeid, "run_id",
				       run_id, "run_token", token),
		       *crep = NULL;
		if (cl && signer_client_call(c, cl, -1, &crep) == 0 && !signer_reply_error(crep, NULL)) {
			printf("run_id=%s\n", run_id);
		}
		json_decref(cl);
		json_decref(crep);
	}
out:
	free(line);
	free(sent);
	json_decref(rep);
	signer_client_free(c);
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct worker *ws;
	pthread_t *th;
	double *all, t0, t1;
	long clients, n, total = 0, errors = 0;
	int depth;

	if (argc != 5) {
		fprintf(stderr, "usage: signer-bench SOCKET CLIENTS REQUESTS_PER_CLIENT DEPTH\n");
		return 2;
	}
	clients = strtol(argv[2], NULL, 10);
	n = strtol(argv[3], NULL, 10);
	depth = (int)strtol(argv[4], NULL, 10);
	if (clients < 1 || clients > 256 || n < 1 || n > 10000000 || depth < 1 || depth > 4096) {
		fprintf(stderr, "signer-bench: bad arguments\n");
		return 2;
	}
	ws = calloc((size_t)clients, sizeof(*ws));
	th = calloc((size_t)clients, sizeof(*th));
	all = calloc((size_t)(clients * n), sizeof(double));
	if (!ws || !th || !all) {
		return 2;
	}
	t0 = now_ms();
	for (long i = 0; i < clients; i++) {
		ws[i] = (struct worker){ .sock = argv[1], .n = n, .depth = depth, .id = (int)i };
		ws[i].lat_ms = calloc((size_t)n, sizeof(double));
		if (!ws[i].lat_ms || pthread_create(&th[i], NULL, worker_main, &ws[i]) != 0) {
			return 2;
		}
	}
	for (long i = 0; i < clients; i++) {
		pthread_join(th[i], NULL);
		memcpy(all + total, ws[i].lat_ms, (size_t)ws[i].done * sizeof(double));
		total += ws[i].done;
		errors += ws[i].errors;
		free(ws[i].lat_ms);
	}
	t1 = now_ms();
	qsort(all, (size_t)total, sizeof(double), cmp_double);
	if (total == 0) {
		fprintf(stderr, "signer-bench: no decision completed\n");
		return 1;
	}
	printf("clients=%ld depth=%d decisions=%ld errors=%ld wall=%.3fs rate=%.0f/s p50=%.3fms p90=%.3fms "
	       "p99=%.3fms max=%.3fms\n",
	       clients, depth, total, errors, (t1 - t0) / 1e3, (double)total / ((t1 - t0) / 1e3), all[total / 2],
	       all[(long)((double)total * 0.90)], all[(long)((double)total * 0.99)], all[total - 1]);
	free(all);
	free(ws);
	free(th);
	return total == clients * n && errors == 0 ? 0 : 1;
}
