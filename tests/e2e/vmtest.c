/* SPDX-License-Identifier: Apache-2.0 */
/*
 * End-to-end checks of a real box (QEMU microvm, TCG in CI): boots once and
 * runs the group of checks against it, printing TAP-style lines.
 *
 *   vmtest --guest FILE --rootfs IMG --workspace IMG [--state DIR] [--accel tcg]
 */
#include <dirent.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "banned.h"
#include "crypto.h"
#include "log.h"
#include "vmm/vm-box.h"

#define BIG_SIZE ((uint64_t)64 << 20)
#define CAPTURE_MAX ((size_t)1 << 20)
#define EXEC_TIMEOUT_MS 120000

static int failures;
static int checks;

static void report(bool ok, const char *name, const char *detail)
{
	checks++;
	if (!ok) {
		failures++;
	}
	printf("%s %d - %s%s%s\n", ok ? "ok" : "not ok", checks, name, detail && *detail ? ": " : "",
	       detail ? detail : "");
	fflush(stdout);
}

struct result {
	struct buf out;
	struct buf err;
	bool done;
	bool exited;
	int code;
	int signal;
	bool refused;
	char refusal[512];
	uint64_t out_bytes;
	struct sha256_ctx *sha; /* when set, stdout is hashed instead of kept */
};

static void result_init(struct result *r)
{
	*r = (struct result){ 0 };
	if (buf_init(&r->out, CAPTURE_MAX, 0) < 0 || buf_init(&r->err, CAPTURE_MAX, 0) < 0) {
		abort();
	}
}

static void result_release(struct result *r)
{
	buf_release(&r->out);
	buf_release(&r->err);
	sha256_free(r->sha);
	r->sha = NULL;
}

/* Apply one event to the result it belongs to. */
static void apply(struct result *r, const struct agent_event *ev)
{
	switch (ev->type) {
	case AGENT_EV_STDOUT:
		r->out_bytes += ev->len;
		if (r->sha) {
			if (sha256_update(r->sha, ev->data, ev->len) < 0) {
				abort();
			}
		} else {
			(void)buf_put(&r->out, ev->data, MIN(ev->len, buf_avail(&r->out)));
		}
		break;
	case AGENT_EV_STDERR:
		(void)buf_put(&r->err, ev->data, MIN(ev->len, buf_avail(&r->err)));
		break;
	case AGENT_EV_EXIT:
		r->done = true;
		r->exited = ev->exit.kind == EXIT_KIND_EXITED;
		r->code = r->exited ? (int)ev->exit.value : 0;
		r->signal = r->exited ? 0 : (int)ev->exit.value;
		break;
	case AGENT_EV_ERROR:
		r->done = true;
		r->refused = true;
		(void)snprintf(r->refusal, sizeof(r->refusal), "%s: %s", ev->err_code ? ev->err_code : "?",
			       ev->message ? ev->message : "");
		break;
	default:
		break;
	}
}

/* Run argv to completion, with optional stdin sent up front and closed. */
static int run(struct vm_box *b, char **argv, char **env, const char *cwd, const void *in, size_t in_len,
	       struct result *res)
{
	uint64_t deadline = vm_box_now_ns() + (uint64_t)EXEC_TIMEOUT_MS * 1000000ull;
	size_t in_off = 0;
	bool in_closed = in == NULL;
	uint32_t id;
	int r;

	r = agent_client_exec(b->agent, argv, env, cwd, in != NULL, &id);
	while (r >= 0 && !res->done) {
		struct agent_event ev;
		if (!in_closed) {
			size_t sent = 0;
			r = agent_client_stdin(b->agent, id, (const uint8_t *)in + in_off, in_len - in_off, &sent);
			in_off += sent;
			if (r >= 0 && in_off == in_len) {
				r = agent_client_stdin_close(b->agent, id);
				in_closed = true;
			}
			if (r < 0) {
				break;
			}
		}
		if (vm_box_now_ns() > deadline) {
			return -ETIMEDOUT;
		}
		r = agent_client_next(b->agent, 1000, &ev);
		if (r > 0 && ev.id == id) {
			apply(res, &ev);
		}
	}
	return r < 0 ? r : 0;
}

static bool out_is(const struct result *r, const char *s)
{
	return buf_len(&r->out) == strlen(s) && memcmp(buf_ptr(&r->out), s, strlen(s)) == 0;
}

static bool err_is(const struct result *r, const char *s)
{
	return buf_len(&r->err) == strlen(s) && memcmp(buf_ptr(&r->err), s, strlen(s)) == 0;
}

static void check_simple(struct vm_box *b)
{
	struct result res;
	char detail[256];
	int r;

	{
		char *argv[] = { "echo", "hi", NULL };
		result_init(&res);
		r = run(b, argv, NULL, NULL, NULL, 0, &res);
		report(r == 0 && res.exited && res.code == 0 && out_is(&res, "hi\n"), "echo hi prints hi", NULL);
		result_release(&res);
	}
	{
		char *argv[] = { "sh", "-c", "exit 3", NULL };
		result_init(&res);
		r = run(b, argv, NULL, NULL, NULL, 0, &res);
		(void)snprintf(detail, sizeof(detail), "r=%d exited=%d code=%d", r, res.exited, res.code);
		report(r == 0 && res.exited && res.code == 3, "sh -c 'exit 3' returns 3", detail);
		result_release(&res);
	}
	{
		char *argv[] = { "sh", "-c", "echo out; echo err >&2; echo out2", NULL };
		result_init(&res);
		r = run(b, argv, NULL, NULL, NULL, 0, &res);
		report(r == 0 && out_is(&res, "out\nout2\n") && err_is(&res, "err\n"),
		       "stdout and stderr stay separate", NULL);
		result_release(&res);
	}
	{
		char *argv[] = { "cat", NULL };
		result_init(&res);
		r = run(b, argv, NULL, NULL, "up front\n", 9, &res);
		report(r == 0 && res.code == 0 && out_is(&res, "up front\n"), "stdin sent up front reaches the command",
		       NULL);
		result_release(&res);
	}
	{
		char *argv[] = { "sh", "-c", "echo $FOO; pwd; hostname; cat README", NULL };
		char *env[] = { "FOO=bar", NULL };
		result_init(&res);
		r = run(b, argv, env, "/workspace", NULL, 0, &res);
		report(r == 0 && out_is(&res, "bar\n/workspace\nbox\nhello from the workspace\n"),
		       "env, cwd, hostname and the workspace disk", NULL);
		result_release(&res);
	}
	{
		/* The host's boot entropy was credited: the CRNG is ready, nothing in the box stalls on getrandom(). */
		char *argv[] = { "cat", "/proc/sys/kernel/random/entropy_avail", NULL };
		result_init(&res);
		r = run(b, argv, NULL, NULL, NULL, 0, &res);
		report(r == 0 && out_is(&res, "256\n"), "the guest CRNG is seeded at boot", NULL);
		result_release(&res);
	}
	{
		char *argv[] = { "no-such-program", NULL };
		result_init(&res);
		r = run(b, argv, NULL, NULL, NULL, 0, &res);
		report(r == 0 && res.refused && strstr(res.refusal, "exec:"), "a missing program is a clear error",
		       res.refusal);
		result_release(&res);
	}
	{
		char *argv[] = { "true", NULL };
		result_init(&res);
		r = run(b, argv, NULL, "/no/such/dir", NULL, 0, &res);
		report(r == 0 && res.refused && strstr(res.refusal, "cannot change to directory /no/such/dir"),
		       "a missing working directory is a clear error", res.refusal);
		result_release(&res);
	}
	{
		/* The root is an overlay: writes land in the upper layer, the image stays read-only. */
		char *argv[] = { "sh", "-c", "echo x > /etc/new && cat /etc/new && grep -c ' / overlay ' /proc/mounts",
				 NULL };
		result_init(&res);
		r = run(b, argv, NULL, NULL, NULL, 0, &res);
		report(r == 0 && res.code == 0 && out_is(&res, "x\n1\n"), "the root is a writable overlay", NULL);
		result_release(&res);
	}
}

static void check_big_stdout(struct vm_box *b)
{
	char *gen[] = { "sh", "-c", "head -c 67108864 /dev/urandom > /tmp/big && sha256sum /tmp/big", NULL };
	char *cat[] = { "cat", "/tmp/big", NULL };
	uint8_t md[SHA256_LEN];
	char want[65] = { 0 }, got[65] = { 0 }, detail[256];
	struct result res;
	uint64_t t0;
	double secs;
	int r;

	result_init(&res);
	r = run(b, gen, NULL, NULL, NULL, 0, &res);
	if (r < 0 || res.code != 0 || buf_len(&res.out) < 64) {
		report(false, "64 MiB stdout arrives complete", "could not create the file in the guest");
		result_release(&res);
		return;
	}
	memcpy(want, buf_ptr(&res.out), 64);
	result_release(&res);
	result_init(&res);
	if (sha256_new(&res.sha) < 0) {
		abort();
	}
	t0 = vm_box_now_ns();
	r = run(b, cat, NULL, NULL, NULL, 0, &res);
	secs = (double)(vm_box_now_ns() - t0) / 1e9;
	if (r == 0 && sha256_final(res.sha, md) == 0) {
		for (size_t i = 0; i < SHA256_LEN; i++) {
			(void)snprintf(got + 2 * i, 3, "%02x", md[i]);
		}
	}
	(void)snprintf(detail, sizeof(detail), "%llu bytes in %.2f s (%.0f MiB/s), sha256 %s",
		       (unsigned long long)res.out_bytes, secs, (double)res.out_bytes / 1048576.0 / secs, got);
	report(r == 0 && res.code == 0 && res.out_bytes == BIG_SIZE && strcmp(want, got) == 0,
	       "64 MiB stdout arrives complete", detail);
	result_release(&res);
}

static void check_network(struct vm_box *b)
{
	char *devs[] = { "cat", "/proc/net/dev", NULL };
	char *attempt[] = { "sh", "-c",
			    "ip link add d0 type dummy 2>/dev/null && echo CREATED-dummy;"
			    "ip link add v0 type veth peer name v1 2>/dev/null && echo CREATED-veth;"
			    "ip link add b0 type bridge 2>/dev/null && echo CREATED-bridge;"
			    "ip tuntap add t0 mode tun 2>/dev/null && echo CREATED-tun;"
			    "ip link add s0 type sit 2>/dev/null && echo CREATED-sit;"
			    "modprobe dummy 2>/dev/null && echo CREATED-module;"
			    "if test -e /proc/modules || test -e /proc/sys/kernel/modules_disabled; then"
			    " echo modules_disabled=$(cat /proc/sys/kernel/modules_disabled);"
			    " else echo modules_disabled=unsupported; fi;"
			    "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' '; echo;"
			    "wget -q -T 3 -O /dev/null http://10.0.2.2/ 2>/dev/null && echo REACHED-10.0.2.2;"
			    "wget -q -T 3 -O /dev/null http://1.1.1.1/ 2>/dev/null && echo REACHED-1.1.1.1;"
			    "nc -w 2 127.0.0.1 1 </dev/null 2>/dev/null; ip -o addr show lo | grep -c 127.0.0.1",
			    NULL };
	struct result res;
	char names[256] = { 0 };
	size_t nl = 0;
	int r;

	result_init(&res);
	r = run(b, devs, NULL, NULL, NULL, 0, &res);
	if (r == 0) {
		/* Interface names: the text before ':' on every line after the two headers. */
		const char *p = (const char *)buf_ptr(&res.out), *end = p + buf_len(&res.out);
		int line = 0;
		while (p < end) {
			const char *e = memchr(p, '\n', (size_t)(end - p));
			const char *colon;
			if (!e) {
				e = end;
			}
			colon = memchr(p, ':', (size_t)(e - p));
			if (line >= 2 && colon) {
				while (p < colon && *p == ' ') {
					p++;
				}
				nl += (size_t)snprintf(names + nl, sizeof(names) - MIN(nl, sizeof(names)), "%.*s ",
						       (int)(colon - p), p);
			}
			line++;
			p = e + 1;
		}
	}
	report(r == 0 && strcmp(names, "lo ") == 0, "/proc/net/dev lists only lo", names);
	result_release(&res);

	result_init(&res);
	r = run(b, attempt, NULL, NULL, NULL, 0, &res);
	{
		char detail[600];
		const char *o = (const char *)buf_ptr(&res.out);
		bool created = buf_len(&res.out) > 0 && memmem(o, buf_len(&res.out), "CREATED", 7);
		bool reached = buf_len(&res.out) > 0 && memmem(o, buf_len(&res.out), "REACHED", 7);
		/* Module loading switched off after boot, or a kernel without module support (the built kernel). */
		bool disabled = buf_len(&res.out) > 0 &&
				(memmem(o, buf_len(&res.out), "modules_disabled=1\nlo \n", 23) ||
				 memmem(o, buf_len(&res.out), "modules_disabled=unsupported\nlo \n", 33));
		(void)snprintf(detail, sizeof(detail), "%.*s", (int)MIN(buf_len(&res.out), 500), o);
		for (char *c = detail; *c; c++) {
			if (*c == '\n') {
				*c = '|';
			}
		}
		report(r == 0 && !created && !reached && disabled,
		       "no network interface can be created and nothing outside is reachable", detail);
	}
	result_release(&res);
}

/* A command that never reads its 2 MB of stdin stops on sig; the host stays responsive meanwhile. */
static void check_unread_stdin(struct vm_box *b, int sig)
{
	static uint8_t junk[2 << 20];
	char *argv[] = { "sleep", "600", NULL };
	struct result res;
	char name[128], detail[256];
	size_t off = 0;
	uint32_t id, ping;
	bool started = false, pong = false, signalled = false;
	uint64_t deadline = vm_box_now_ns() + 60ull * 1000000000ull;
	int r;

	result_init(&res);
	r = agent_client_exec(b->agent, argv, NULL, NULL, true, &id);
	while (r >= 0 && !res.done && vm_box_now_ns() < deadline) {
		struct agent_event ev;
		size_t sent = 0;
		if (off < sizeof(junk)) {
			r = agent_client_stdin(b->agent, id, junk + off, sizeof(junk) - off, &sent);
			off += sent;
		}
		/* Once the window is used up and the guest holds what it could take: ping, then signal. */
		if (r >= 0 && started && !signalled && agent_client_stdin_credit(b->agent, id) == 0) {
			if (!pong && agent_client_ping(b->agent, &ping) >= 0) {
				struct agent_event pev;
				for (int k = 0; k < 100 && !pong; k++) {
					if (agent_client_next(b->agent, 100, &pev) > 0) {
						if (pev.type == AGENT_EV_PONG && pev.id == ping) {
							pong = true;
						} else if (pev.id == id) {
							apply(&res, &pev);
						}
					}
				}
			}
			r = agent_client_signal(b->agent, id, sig);
			signalled = true;
		}
		if (r < 0) {
			break;
		}
		r = agent_client_next(b->agent, 200, &ev);
		if (r > 0 && ev.id == id) {
			if (ev.type == AGENT_EV_STARTED) {
				started = true;
			}
			apply(&res, &ev);
		}
	}
	(void)snprintf(name, sizeof(name), "2 MB unread stdin: the command stops on %s",
		       sig == SIGINT ? "SIGINT" : "SIGKILL");
	(void)snprintf(detail, sizeof(detail), "r=%d sent=%zu of %zu, pong while blocked=%d, done=%d signal=%d", r, off,
		       sizeof(junk), pong, res.done, res.signal);
	report(r >= 0 && res.done && !res.exited && res.signal == sig && pong && off < sizeof(junk), name, detail);
	result_release(&res);
}

static void check_parallel(struct vm_box *b)
{
	char *argv[] = { "sleep", "600", NULL };
	uint32_t ids[AGENT_MAX_EXECS + 1];
	int started = 0, killed = 0;
	bool refused = false;
	char refusal[512] = { 0 }, detail[700];
	uint64_t deadline = vm_box_now_ns() + 120ull * 1000000000ull;
	int r = 0;

	for (int i = 0; i < AGENT_MAX_EXECS && r >= 0; i++) {
		r = agent_client_exec(b->agent, argv, NULL, NULL, false, &ids[i]);
	}
	while (r >= 0 && started < AGENT_MAX_EXECS && vm_box_now_ns() < deadline) {
		struct agent_event ev;
		r = agent_client_next(b->agent, 1000, &ev);
		if (r > 0 && ev.type == AGENT_EV_STARTED) {
			started++;
		}
	}
	if (r >= 0) {
		r = agent_client_exec(b->agent, argv, NULL, NULL, false, &ids[AGENT_MAX_EXECS]);
	}
	while (r >= 0 && !refused && vm_box_now_ns() < deadline) {
		struct agent_event ev;
		r = agent_client_next(b->agent, 1000, &ev);
		if (r > 0 && ev.id == ids[AGENT_MAX_EXECS]) {
			if (ev.type == AGENT_EV_ERROR) {
				refused = strcmp(ev.err_code, AGENT_ERR_BUSY) == 0;
				(void)snprintf(refusal, sizeof(refusal), "%s: %s", ev.err_code, ev.message);
			}
			break;
		}
	}
	for (int i = 0; i < AGENT_MAX_EXECS && r >= 0; i++) {
		r = agent_client_signal(b->agent, ids[i], SIGKILL);
	}
	while (r >= 0 && killed < AGENT_MAX_EXECS && vm_box_now_ns() < deadline) {
		struct agent_event ev;
		r = agent_client_next(b->agent, 1000, &ev);
		if (r > 0 && ev.type == AGENT_EV_EXIT && ev.exit.kind == EXIT_KIND_SIGNALED &&
		    ev.exit.value == SIGKILL) {
			killed++;
		}
	}
	(void)snprintf(detail, sizeof(detail), "started %d, 65th: %s, killed %d", started, refusal, killed);
	report(r >= 0 && started == AGENT_MAX_EXECS && killed == AGENT_MAX_EXECS, "64 parallel execs run", detail);
	report(refused && strstr(refusal, "64"), "the 65th exec is refused with a clear error", refusal);
}

static void check_boot_port(struct vm_box *b)
{
	char *argv[] = { "sh", "-c",
			 "for d in /sys/class/virtio-ports/*; do if [ \"$(cat $d/name)\" = tkbox.boot ]; then "
			 "timeout 5 head -c 4096 /dev/${d##*/} | wc -c; fi; done",
			 NULL };
	struct boot_config bc = { 0 };
	struct result res;
	char detail[128];
	int r, again;

	result_init(&res);
	r = run(b, argv, NULL, NULL, NULL, 0, &res);
	again = vm_serve_boot_config(b->vm, &bc, 1000, 1000);
	(void)snprintf(detail, sizeof(detail), "guest read %.*s byte(s); host serve again: %s",
		       (int)(buf_len(&res.out) ? buf_len(&res.out) - 1 : 0), (const char *)buf_ptr(&res.out),
		       tk_strerror(again));
	report(r == 0 && out_is(&res, "0\n") && again == -EALREADY, "the boot config port cannot be read twice",
	       detail);
	result_release(&res);
}

static bool qemu_with_dir_running(const char *box_dir)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	bool found = false;

	if (!d) {
		return false;
	}
	while (!found && (de = readdir(d))) {
		char path[300], cmd[8192];
		FILE *f;
		size_t n;
		if (de->d_name[0] < '0' || de->d_name[0] > '9') {
			continue;
		}
		(void)snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
		f = fopen(path, "re");
		if (!f) {
			continue;
		}
		n = fread(cmd, 1, sizeof(cmd) - 1, f);
		(void)fclose(f);
		for (size_t i = 0; i < n; i++) {
			if (cmd[i] == '\0') {
				cmd[i] = ' ';
			}
		}
		cmd[n] = '\0';
		found = strstr(cmd, "qemu-system") && strstr(cmd, box_dir);
	}
	(void)closedir(d);
	return found;
}

static void check_shutdown(struct vm_box *b)
{
	char detail[256];
	pid_t pid = b->vm->qemu_pid;
	int r = vm_box_shutdown(b, 60000);
	bool gone = kill(pid, 0) < 0 && errno == ESRCH;
	bool none = !qemu_with_dir_running(b->box_dir);

	(void)snprintf(detail, sizeof(detail), "shutdown %s, QEMU status 0x%x, pid gone %d, no QEMU for the box %d",
		       tk_strerror(r), b->vm->exit_status, gone, none);
	report(r == 0 && gone && none, "shutdown powers off (QEMU exits 0) and leaves no QEMU process", detail);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "guest", required_argument, NULL, 'g' },     { "rootfs", required_argument, NULL, 'r' },
		{ "workspace", required_argument, NULL, 'w' }, { "state", required_argument, NULL, 's' },
		{ "accel", required_argument, NULL, 'a' },     { NULL, 0, NULL, 0 },
	};
	struct vm_box_opts o = { .allow_fetch = true,
				 .accel = VM_ACCEL_TCG,
				 .scratch_mib = VM_BOX_DEFAULT_SCRATCH_MIB };
	struct vm_box *b = NULL;
	char state[4096];
	int ch, r;

	log_set_ident("vmtest");
	(void)signal(SIGPIPE, SIG_IGN);
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'g':
			o.guest_bin = optarg;
			break;
		case 'r':
			o.rootfs = optarg;
			break;
		case 'w':
			o.workspace = optarg;
			break;
		case 's':
			o.state_dir = optarg;
			break;
		case 'a':
			if (vm_accel_parse(optarg, &o.accel) < 0) {
				return 2;
			}
			break;
		default:
			return 2;
		}
	}
	if (!o.state_dir) {
		const char *e = getenv("TKBOX_STATE_DIR"), *home = getenv("HOME");
		if (e && *e) {
			o.state_dir = e;
		} else {
			(void)snprintf(state, sizeof(state), "%s/.local/state/tkbox", home ? home : "/root");
			o.state_dir = state;
		}
	}
	if (!o.guest_bin || !o.rootfs) {
		fprintf(stderr,
			"usage: vmtest --guest FILE --rootfs IMG [--workspace IMG] [--state DIR] [--accel A]\n");
		return 2;
	}
	r = vm_box_boot(&o, &b);
	report(r == 0, "the box boots and its agent answers ping", r < 0 ? tk_strerror(r) : NULL);
	if (r < 0) {
		printf("1..%d\n", checks);
		return 1;
	}
	{
		char detail[128];
		(void)snprintf(detail, sizeof(detail), "ready in %.2f s, accel %s, isolation %s",
			       (double)(b->t_ready_ns - b->t_start_ns) / 1e9, vm_accel_name(b->accel), b->isolation);
		report(b->accel != VM_ACCEL_TCG || strcmp(b->isolation, "emulated") == 0,
		       "TCG reports isolation emulated", detail);
	}
	check_simple(b);
	check_big_stdout(b);
	check_network(b);
	check_unread_stdin(b, SIGINT);
	check_unread_stdin(b, SIGKILL);
	check_parallel(b);
	check_boot_port(b);
	check_shutdown(b);
	vm_box_free(b);
	printf("1..%d\n", checks);
	return failures ? 1 : 0;
}
