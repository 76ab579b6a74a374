/* SPDX-License-Identifier: Apache-2.0 */
#include <ares.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "banned.h"
#include "clock.h"
#include "daemon/egress-approve.h"
#include "daemon/egress-door.h"
#include "json.h"
#include "log.h"

/* ---------------------------------------------------------------- --resolve */

int egress_resolve_parse(const char *value, struct egress_door_config *cfg, char *err, size_t err_size)
{
	const char *eq = value ? strchr(value, '=') : NULL;
	struct egress_resolve_entry e = { 0 };
	struct egress_host h;
	const char *a;
	int r;

	if (!eq || eq == value || !eq[1]) {
		(void)snprintf(err, err_size, "--resolve %s: takes NAME=ADDR (e.g. mirror.test=192.0.2.10)",
			       value ? value : "");
		return -EINVAL;
	}
	r = egress_host_parse(value, (size_t)(eq - value), &h);
	if (r < 0 || h.kind != EGRESS_HOST_NAME) {
		(void)snprintf(err, err_size,
			       "--resolve %s: NAME must be a DNS name (letters, digits, '-', dots; not an address)",
			       value);
		return -EINVAL;
	}
	a = eq + 1;
	/* The address said plainly: a canonical dotted quad, or IPv6 as inet_pton reads it. */
	r = strchr(a, ':') ? egress_addr_parse(a, strlen(a), &e.addr)
			   : egress_addr_parse_canonical(a, strlen(a), &e.addr);
	if (r < 0 || (strchr(a, ':') && e.addr.family != 6) || a[0] == '[') {
		(void)snprintf(
			err, err_size,
			"--resolve %s: ADDR must be an IPv4 dotted quad (192.0.2.10) or an IPv6 address (2001:db8::10)",
			value);
		return -EINVAL;
	}
	if (cfg->n_resolve >= EGRESS_MAX_RESOLVE) {
		(void)snprintf(err, err_size, "--resolve: at most %d entries", EGRESS_MAX_RESOLVE);
		return -E2BIG;
	}
	(void)snprintf(e.name, sizeof(e.name), "%s", h.name);
	cfg->resolve[cfg->n_resolve++] = e;
	return 0;
}

json_t *egress_resolve_json(const struct egress_door_config *cfg)
{
	json_t *v = json_array();

	for (size_t i = 0; v && i < cfg->n_resolve; i++) {
		char addr[EGRESS_ADDR_TEXT_MAX], *t = NULL;
		egress_addr_format(&cfg->resolve[i].addr, addr);
		if (asprintf(&t, "%s=%s", cfg->resolve[i].name, addr) < 0 ||
		    json_array_append_new(v, json_string(t)) < 0) {
			free(t);
			json_decref(v);
			return NULL;
		}
		free(t);
	}
	return v;
}

size_t egress_resolve_lookup(const struct egress_door_config *cfg, const char *name, struct egress_addr *ret,
			     size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < cfg->n_resolve; i++) {
		if (strcmp(cfg->resolve[i].name, name) == 0) {
			if (n < max) {
				ret[n] = cfg->resolve[i].addr;
			}
			n++;
		}
	}
	return n;
}

/* ---------------------------------------------------------------- this host's addresses */

static pthread_mutex_t own_lock = PTHREAD_MUTEX_INITIALIZER;
static struct egress_host_addrs own_cache;
static uint64_t own_read_ms;
static bool own_read;
static bool own_cap_warned;

static bool sockaddr_addr(const struct sockaddr *sa, struct egress_addr *ret)
{
	*ret = (struct egress_addr){ 0 };
	if (sa && sa->sa_family == AF_INET) {
		ret->family = 4;
		memcpy(ret->b, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
		return true;
	}
	if (sa && sa->sa_family == AF_INET6) {
		ret->family = 6;
		memcpy(ret->b, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
		return true;
	}
	return false;
}

void egress_own_addrs(struct egress_host_addrs *ret)
{
	uint64_t now = clock_mono_ms();

	pthread_mutex_lock(&own_lock);
	if (!own_read || now - own_read_ms >= EGRESS_OWN_ADDRS_TTL_MS) {
		struct ifaddrs *ifa = NULL;
		if (getifaddrs(&ifa) == 0) {
			size_t past = 0;
			own_cache.n = 0;
			/* Only what the fixed ranges let through needs the table: public addresses are all kept. */
			for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
				struct egress_addr a;
				if (sockaddr_addr(i->ifa_addr, &a) && egress_host_addrs_add(&own_cache, &a) == -E2BIG) {
					past++;
				}
			}
			freeifaddrs(ifa);
			if (past > 0 && !own_cap_warned) {
				own_cap_warned = true;
				log_warn("egress: this host has more than %d public addresses "
					 "(EGRESS_MAX_HOST_ADDRS); %zu are not in the own-address table, "
					 "so only --egress-block can refuse them (this warning is given once)",
					 EGRESS_MAX_HOST_ADDRS, past);
			}
			own_read = true;
			own_read_ms = now;
		} else {
			/* The last table stays; the fixed ranges hold regardless. */
			log_warn("egress: this host's addresses could not be read (%s)", tk_strerror(negative_errno()));
		}
	}
	*ret = own_cache;
	pthread_mutex_unlock(&own_lock);
}

/* ---------------------------------------------------------------- the record rate */

bool egress_rate_admit(struct egress_rate *r, int64_t now_ms)
{
	int64_t s = now_ms / 1000;

	if (s != r->second) {
		r->second = s;
		r->n = 0;
	}
	if (r->n < EGRESS_RECORD_RATE) {
		r->n++;
		return true;
	}
	r->suppressed++;
	r->suppressed_second = s;
	return false;
}

uint64_t egress_rate_summary(struct egress_rate *r, int64_t now_ms, int64_t *ret_second)
{
	uint64_t n = r->suppressed;

	if (n == 0 || now_ms / 1000 <= r->suppressed_second) {
		return 0;
	}
	*ret_second = r->suppressed_second;
	r->suppressed = 0;
	return n;
}

void egress_done_info_release(struct egress_done_info *d)
{
	free(d->error);
	free(d->rule);
	*d = (struct egress_done_info){ 0 };
}

/* ---------------------------------------------------------------- names (c-ares) */

static pthread_once_t ares_once = PTHREAD_ONCE_INIT;
static int ares_lib_r;

static void ares_lib_init(void)
{
	ares_lib_r = ares_library_init(ARES_LIB_INIT_ALL);
}

struct resolve_state {
	bool done;
	int status;
	struct egress_addr *ret;
	size_t max, n;
};

static void resolve_cb(void *arg, int status, int timeouts, struct ares_addrinfo *res)
{
	struct resolve_state *st = arg;

	(void)timeouts;
	st->done = true;
	st->status = status;
	for (struct ares_addrinfo_node *n = res ? res->nodes : NULL; n && st->n < st->max; n = n->ai_next) {
		struct egress_addr a;
		bool seen = false;
		if (!sockaddr_addr(n->ai_addr, &a)) {
			continue;
		}
		for (size_t i = 0; i < st->n; i++) {
			seen = seen || egress_addr_equal(&st->ret[i], &a);
		}
		if (!seen) {
			st->ret[st->n++] = a;
		}
	}
	if (res) {
		ares_freeaddrinfo(res);
	}
}

/* Run ch's queries until st is done or the deadline passes (true: it passed). */
static bool resolve_wait(ares_channel ch, struct resolve_state *st, uint64_t deadline)
{
	while (!st->done) {
		ares_socket_t socks[ARES_GETSOCK_MAXNUM];
		struct pollfd p[ARES_GETSOCK_MAXNUM];
		/* c-ares's ARES_GETSOCK_WRITABLE shifts a signed 1 by up to 31: test the bits unsigned instead. */
		unsigned bits = (unsigned)ares_getsock(ch, socks, ARES_GETSOCK_MAXNUM);
		int np = 0, k;
		uint64_t now = clock_mono_ms();
		struct timeval tv, *tvp, max_tv;

		if (now >= deadline) {
			return true;
		}
		max_tv = (struct timeval){ .tv_sec = (time_t)((deadline - now) / 1000),
					   .tv_usec = (suseconds_t)((deadline - now) % 1000) * 1000 };
		tvp = ares_timeout(ch, &max_tv, &tv);
		for (int i = 0; i < ARES_GETSOCK_MAXNUM; i++) {
			bool rd = bits & (1u << i), wr = bits & (1u << (i + ARES_GETSOCK_MAXNUM));
			if (rd || wr) {
				p[np++] = (struct pollfd){ .fd = socks[i],
							   .events = (short)((rd ? POLLIN : 0) | (wr ? POLLOUT : 0)) };
			}
		}
		k = poll(p, (nfds_t)np, (int)(tvp->tv_sec * 1000 + tvp->tv_usec / 1000));
		if (k < 0 && errno != EINTR) {
			break;
		}
		if (k <= 0) {
			ares_process_fd(ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD); /* its timeouts */
			continue;
		}
		for (int i = 0; i < np; i++) {
			if (p[i].revents) {
				ares_process_fd(ch,
						p[i].revents & (POLLIN | POLLERR | POLLHUP) ? p[i].fd : ARES_SOCKET_BAD,
						p[i].revents & POLLOUT ? p[i].fd : ARES_SOCKET_BAD);
			}
		}
	}
	return false;
}

int egress_resolve_name(const char *name, struct egress_addr *ret, size_t max, size_t *ret_n, char *err,
			size_t err_size)
{
	struct ares_options opts = { .timeout = 1000, .tries = 2 };
	struct ares_addrinfo_hints hints = { .ai_family = AF_UNSPEC, .ai_flags = ARES_AI_NOSORT };
	struct resolve_state st = { .ret = ret, .max = max };
	uint64_t deadline = clock_mono_ms() + EGRESS_RESOLVE_TIMEOUT_MS;
	ares_channel ch;
	bool timed_out;
	int r;

	(void)pthread_once(&ares_once, ares_lib_init);
	if (ares_lib_r != ARES_SUCCESS) {
		(void)snprintf(err, err_size, "the resolver library did not start (%s)", ares_strerror(ares_lib_r));
		return -EIO;
	}
	/* The host's resolver configuration (resolv.conf, hosts), read afresh for each name. */
	/*
	 * No search list: the name is looked up exactly as decided, never with the
	 * host's search domains appended (x.allowed.test must not become
	 * x.allowed.test.corp.example, a name nobody allowed).
	 */
	opts.domains = NULL;
	opts.ndomains = 0;
	r = ares_init_options(&ch, &opts, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_DOMAINS);
	if (r != ARES_SUCCESS) {
		(void)snprintf(err, err_size, "the resolver did not start (%s)", ares_strerror(r));
		return -EIO;
	}
	ares_getaddrinfo(ch, name, NULL, &hints, resolve_cb, &st);
	timed_out = resolve_wait(ch, &st, deadline);
	if (!st.done) {
		ares_cancel(ch);
	}
	ares_destroy(ch);
	if (timed_out) {
		(void)snprintf(err, err_size, "the host's resolver did not answer within %d s",
			       EGRESS_RESOLVE_TIMEOUT_MS / 1000);
		return -ETIMEDOUT;
	}
	if (st.status != ARES_SUCCESS || st.n == 0) {
		(void)snprintf(err, err_size, "%s does not resolve on the host (%s)", name,
			       st.status != ARES_SUCCESS ? ares_strerror(st.status) : "no address");
		return -ENOENT;
	}
	*ret_n = st.n;
	return 0;
}

/* ---------------------------------------------------------------- refusals */

static void host_display(const struct egress_conn *c, char *out, size_t n)
{
	bool parsed = c->h.name[0] != '\0';
	const char *t = parsed ? c->h.name : c->host_text ? c->host_text : "?";
	size_t k = 0;

	if (parsed && c->h.kind == EGRESS_HOST_ADDR && c->h.addr.family == 6) {
		(void)snprintf(out, n, "[%s]", t);
		return;
	}
	/* The supervisor's text, shown safely: printable ASCII only, at most 255 bytes. */
	for (; t[k] && k + 1 < n && k < 255; k++) {
		out[k] = t[k] > 0x20 && t[k] < 0x7f ? t[k] : '?';
	}
	out[k] = '\0';
}

static int conn_refuse(struct egress_conn *c, int status, const char *rule, bool record, const char *how,
		       const char *fmt, ...) _printf_(6, 7);
static int conn_refuse(struct egress_conn *c, int status, const char *rule, bool record, const char *how,
		       const char *fmt, ...)
{
	char host[EGRESS_HOST_TEXT_MAX + 2];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(c->refusal.reason, sizeof(c->refusal.reason), fmt, ap);
	va_end(ap);
	/* A long text (the signer's reason) may be cut inside a UTF-8 character: cut it before that character. */
	(void)json_utf8_clip(c->refusal.reason);
	host_display(c, host, sizeof(host));
	c->refusal.status = status;
	c->refusal.record = record;
	(void)snprintf(c->refusal.rule, sizeof(c->refusal.rule), "%s", rule);
	(void)snprintf(c->refusal.message, sizeof(c->refusal.message), "%s:%lld refused: %s. %s", host,
		       (long long)c->port, c->refusal.reason, how);
	(void)json_utf8_clip(c->refusal.message);
	return -EPERM;
}

#define HOW_ALWAYS                                                                                                     \
	"loopback, private, link-local, cloud metadata and this host's own addresses are always refused; nothing can " \
	"allow them"

/* How a person lets this host through the allowlist: --allow host (443 and 80) or host:port. */
static void how_allow(const struct egress_conn *c, char *out, size_t n)
{
	char host[EGRESS_HOST_TEXT_MAX + 2];

	host_display(c, host, sizeof(host));
	if (c->port16 == 443 || c->port16 == 80) {
		(void)snprintf(out, n, "add `--allow %s` to `tkbox run`", host);
	} else {
		(void)snprintf(out, n, "add `--allow %s:%u` to `tkbox run`", host, (unsigned)c->port16);
	}
}

static int refuse_class(struct egress_conn *c, enum egress_addr_class cls, const struct egress_addr *a,
			const char *rule, const char *name)
{
	char why[256];

	if (a) {
		(void)egress_addr_explain(a, cls, why, sizeof(why));
	} else {
		(void)snprintf(why, sizeof(why), "%s", egress_addr_class_str(cls));
	}
	if (name) {
		return conn_refuse(c, 403, rule, true,
				   cls == EGRESS_ADDR_BLOCKED ? "the daemon's --egress-block names it" : HOW_ALWAYS,
				   "%s resolves to an address that is refused: %s", name, why);
	}
	return conn_refuse(c, 403, rule, true,
			   cls == EGRESS_ADDR_BLOCKED
				   ? "the daemon's --egress-block names it; nothing else can allow it"
				   : HOW_ALWAYS,
			   "%s%s%s", a ? "" : c->h.name, a ? "" : " names ", why);
}

/* Every address of a name checked: one refused address refuses the connection. */
static int check_addrs(struct egress_conn *c, const struct egress_host_addrs *own)
{
	for (size_t i = 0; i < c->n_addrs; i++) {
		enum egress_addr_class cls = egress_addr_classify(&c->addrs[i], &c->cfg->block, own, c->cfg->flags);
		if (cls != EGRESS_ADDR_OK) {
			return refuse_class(c, cls, &c->addrs[i], "resolved-address", c->h.name);
		}
	}
	return 0;
}

/* A name's addresses: the daemon's --resolve entries for it, else the host's resolver. */
static int resolve(struct egress_conn *c, const struct egress_host_addrs *own)
{
	char err[256] = "";
	size_t n = egress_resolve_lookup(c->cfg, c->h.name, c->addrs, EGRESS_MAX_RESOLVED);
	int r = 0;

	if (n > 0) {
		c->n_addrs = MIN(n, (size_t)EGRESS_MAX_RESOLVED);
	} else {
		r = egress_resolve_name(c->h.name, c->addrs, EGRESS_MAX_RESOLVED, &c->n_addrs, err, sizeof(err));
	}
	c->resolved = true;
	if (r < 0) {
		return conn_refuse(
			c, 502, "resolve-failed", true,
			"check the name and the host's resolver (tkbox daemon --resolve NAME=ADDR maps a name "
			"on an air-gapped host)",
			"%s", err);
	}
	return check_addrs(c, own);
}

/* ---------------------------------------------------------------- inspection (issue 13) */

static const char *const model_presets[] = { "anthropic", "openai", "claude-code", NULL };

static bool in_list(char *const *list, const char *s)
{
	for (; list && *list; list++) {
		if (strcmp(*list, s) == 0) {
			return true;
		}
	}
	return false;
}

/* Append a copy of s to the NULL-terminated *v (of *n entries) unless it is there already. */
static int add_unique(char ***v, size_t *n, const char *s)
{
	char **nv;

	if (in_list(*v, s)) {
		return 0;
	}
	nv = reallocarray(*v, *n + 2, sizeof(char *));
	if (!nv) {
		return -ENOMEM;
	}
	*v = nv;
	nv[*n] = strdup(s);
	if (!nv[*n]) {
		return -ENOMEM;
	}
	nv[++*n] = NULL;
	return 0;
}

/* The hosts one fixed preset names (its policy, built from it alone). */
static int preset_hosts(const char *preset, char ***v, size_t *n)
{
	char *values[] = { (char *)preset, NULL };
	struct egress_policy p = { 0 };
	char err[256];
	int r = egress_policy_build(values, false, NULL, &p, err, sizeof(err));

	for (size_t i = 0; r >= 0 && i < p.n_allow; i++) {
		r = p.allow[i].wildcard ? 0 : add_unique(v, n, p.allow[i].host.name);
	}
	egress_policy_release(&p);
	return r;
}

int egress_model_hosts(char *const *values, char ***ret)
{
	char **all = NULL, **out = NULL;
	size_t n_all = 0, n_out = 0;
	int r = 0;

	for (size_t i = 0; r >= 0 && model_presets[i]; i++) {
		r = preset_hosts(model_presets[i], &all, &n_all);
	}
	for (size_t i = 0; r >= 0 && values && values[i]; i++) {
		struct egress_allow e;

		if (in_list((char *const *)model_presets, values[i])) {
			r = preset_hosts(values[i], &out, &n_out);
		} else if (egress_allow_parse(values[i], &e) >= 0) {
			/* An allow entry that matches a host a model preset names: that host is a model host. */
			for (size_t k = 0; r >= 0 && k < n_all; k++) {
				struct egress_host h;
				if (egress_host_parse(all[k], strlen(all[k]), &h) >= 0 &&
				    egress_allow_match(&e, 1, &h, 443) != EGRESS_MATCH_NONE) {
					r = add_unique(&out, &n_out, all[k]);
				}
			}
		}
	}
	if (r >= 0 && !out) {
		out = calloc(1, sizeof(char *));
		r = out ? 0 : -ENOMEM;
	}
	for (size_t i = 0; i < n_all; i++) {
		free(all[i]);
	}
	free(all);
	if (r < 0) {
		for (size_t i = 0; i < n_out; i++) {
			free(out[i]);
		}
		free(out);
		return r;
	}
	*ret = out;
	return 0;
}

bool egress_inspect_decide(const struct egress_inspect_cfg *insp, bool inspect_all, const char *url, const char *host,
			   bool *ret_model)
{
	bool model = insp && host && in_list(insp->model_hosts, host);

	*ret_model = model;
	/* egress_door_url writes https:// only for a CONNECT to 443 whose entry does not name the port. */
	if (!insp || !insp->has_ca || !url || !host || strncmp(url, "https://", 8) != 0) {
		return false;
	}
	return inspect_all || model || in_list(insp->bound, host);
}

/* ---------------------------------------------------------------- the checks before any decision */

int egress_door_check(struct egress_conn *c, const struct egress_host_addrs *own)
{
	enum egress_addr_class cls;
	int r;

	c->refusal = (struct egress_refusal){ 0 };
	c->h = (struct egress_host){ 0 };
	c->inspect = false;
	c->model = false;
	c->n_addrs = 0;
	c->resolved = false;
	/* The supervisor's text is read again: it parses the box's bytes, so its words are checked twice. */
	r = c->host_text ? egress_host_parse(c->host_text, strnlen(c->host_text, SUPMSG_MAX_HOST + 1), &c->h)
			 : -EBADMSG;
	if (r < 0) {
		c->h = (struct egress_host){ 0 };
		return conn_refuse(c, 400, "bad-host", true,
				   "send a DNS name (punycode for non-ASCII) or an IP address",
				   "the host is not a DNS name or an IP address");
	}
	if (c->port < 1 || c->port > 65535) {
		return conn_refuse(c, 400, "bad-port", true, "name a port 1..65535", "the port is out of range");
	}
	c->port16 = (uint16_t)c->port;
	if (c->form_connect && c->port16 == 80) {
		return conn_refuse(c, 403, "connect-80", true,
				   "send plain HTTP as an absolute-form request (http://host/...) through the proxy",
				   "CONNECT to port 80 is refused");
	}
	cls = egress_host_classify(&c->h, &c->cfg->block, own, c->cfg->flags);
	if (cls != EGRESS_ADDR_OK) {
		return c->h.kind == EGRESS_HOST_ADDR ? refuse_class(c, cls, &c->h.addr, "blocked-address", NULL)
						     : refuse_class(c, cls, NULL, "blocked-name", NULL);
	}
	c->match = c->policy ? egress_allow_match(c->policy->allow, c->policy->n_allow, &c->h, c->port16)
			     : EGRESS_MATCH_NONE;
	c->plain = c->match == EGRESS_MATCH_PORT;
	r = egress_door_url(c->form_connect ? EGRESS_REQ_CONNECT : EGRESS_REQ_ABSOLUTE, &c->h, c->port16, c->match,
			    c->url, sizeof(c->url));
	if (r < 0) {
		return conn_refuse(c, 400, "bad-host", true, "send a shorter host", "the door's url does not fit");
	}
	c->inspect = egress_inspect_decide(c->insp, c->policy && c->policy->inspect_all, c->url, c->h.name, &c->model);
	if (c->h.kind == EGRESS_HOST_ADDR) {
		c->addrs[0] = c->h.addr;
		c->n_addrs = 1;
		return 0;
	}
	/* Only a name on the list is looked up before a decision: a lookup carries data to the name's servers. */
	return c->match != EGRESS_MATCH_NONE ? resolve(c, own) : 0;
}

/* ---------------------------------------------------------------- the dial */

static void addr_sockaddr(const struct egress_addr *a, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	if (a->family == 4) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)(void *)ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		memcpy(&s4->sin_addr, a->b, 4);
		*len = sizeof(*s4);
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)(void *)ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		memcpy(&s6->sin6_addr, a->b, 16);
		*len = sizeof(*s6);
	}
}

/* One address, non-blocking, until deadline: the fd (blocking again), or -errno (-ETIMEDOUT). */
static int dial_one(const struct egress_addr *a, uint16_t port, uint64_t deadline)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, r = 0, soerr = 0;
	socklen_t sl = sizeof(soerr);

	addr_sockaddr(a, port, &ss, &len);
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return negative_errno();
	}
	if (connect(fd, (struct sockaddr *)&ss, len) < 0) {
		r = errno == EINPROGRESS ? 0 : negative_errno();
		while (r == 0) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };
			uint64_t now = clock_mono_ms();
			int k;
			if (now >= deadline) {
				r = -ETIMEDOUT;
				break;
			}
			k = poll(&p, 1, (int)MIN(deadline - now, (uint64_t)1000));
			if (k < 0 && errno != EINTR) {
				r = negative_errno();
			} else if (k > 0) {
				r = getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 ? negative_errno()
				    : soerr						  ? -soerr
											  : 1;
			}
		}
	}
	if (r >= 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) {
		r = negative_errno();
	}
	if (r < 0) {
		(void)close(fd);
		return r;
	}
	return fd;
}

/* Dial the checked addresses in turn within EGRESS_DIAL_TIMEOUT_MS: the fd, or a refusal (502/504). */
static int dial(struct egress_conn *c)
{
	uint64_t deadline = clock_mono_ms() + EGRESS_DIAL_TIMEOUT_MS;
	char addr[EGRESS_ADDR_TEXT_MAX] = "";
	int r = -EHOSTUNREACH;

	for (size_t i = 0; i < c->n_addrs; i++) {
		if (c->ops->stopping(c->box)) {
			return conn_refuse(c, 503, "box-stopping", false, "the box is stopping; nothing can connect",
					   "the box began to stop");
		}
		egress_addr_format(&c->addrs[i], addr);
		r = dial_one(&c->addrs[i], c->port16, deadline);
		if (r >= 0 || r == -ETIMEDOUT) {
			break;
		}
	}
	if (r == -ETIMEDOUT) {
		return conn_refuse(c, 504, "dial-timeout", false, "the origin may be down; try again later",
				   "no connection to %s within %d s", addr, EGRESS_DIAL_TIMEOUT_MS / 1000);
	}
	if (r < 0) {
		return conn_refuse(c, 502, "dial-failed", false, "the origin may be down; try again later",
				   "the connection to %s failed (%s)", addr, tk_strerror(r));
	}
	return r;
}

/* ---------------------------------------------------------------- the crossing */

/* The person's answer for an off-list host: 0 approved, else a refusal. */
static int approve(struct egress_conn *c, struct crossing *x)
{
	char id[EGRESS_APPROVAL_ID_MAX] = "", why[512] = "", how[512];
	const char *rule = "";
	int r = egress_approve_ask_rule(x, c->box_name, c->h.name, c->port16, c->url,
					c->approval_wait_ms > 0 ? c->approval_wait_ms : EGRESS_APPROVAL_WAIT_MS, id,
					why, sizeof(why), &rule);

	if (r == 0) {
		return 0;
	}
	if (r == -ECANCELED) {
		return conn_refuse(c, 503, "box-stopping", false, "the box is stopping; nothing can connect",
				   "the box began to stop while the host waited for a person");
	}
	if (r == -EPERM) {
		how_allow(c, how, sizeof(how));
		/* why names the approval and how a person answers it (tkbox approve ID). */
		return conn_refuse(c, 403, rule && rule[0] ? rule : "not-approved", true, how, "%s",
				   why[0] ? why : "not approved by a person");
	}
	/* The approval could not be recorded: nothing passes (the host stops the box). */
	return conn_refuse(c, 503, rule && rule[0] ? rule : "approval-not-recorded", false,
			   "the box is being stopped; tkbox ls shows why", "the approval could not be recorded (%s)",
			   why[0] ? why : tk_strerror(r));
}

/* The door's act: a person for an off-list host, its name resolved only then, the dial, the supervisor's relay. */
static int door_act(struct crossing *x, struct crossing_result *ret)
{
	struct egress_conn *c = x->ctx;
	struct egress_done_info d = { 0 };
	void *wait = NULL;
	char how[512];
	int fd, r = 0;

	if (c->match == EGRESS_MATCH_NONE) {
		if (c->policy && c->policy->inspect_all) {
			how_allow(c, how, sizeof(how));
			r = conn_refuse(
				c, 403, "not-allowlisted", true, how,
				"the host is not on the box's allowlist (--inspect all: nothing off the list is "
				"held for a person)");
		} else {
			r = approve(c, x);
		}
		if (r >= 0 && c->h.kind == EGRESS_HOST_NAME) {
			r = resolve(c, c->own);
		}
	}
	if (r >= 0 && c->ops->stopping(c->box)) {
		r = conn_refuse(c, 503, "box-stopping", false, "the box is stopping; nothing can connect",
				"the box began to stop");
	}
	fd = r >= 0 ? dial(c) : r;
	if (fd >= 0) {
		r = c->ops->dial(c->box, c->conn, c->url, c->plain, c->inspect, c->model, fd, &wait);
		if (r < 0) {
			r = conn_refuse(c, 503, "box-stopping", false, "the box is stopping; nothing can connect",
					"the box stopped before the connection was handed over");
		}
	} else {
		r = fd;
	}
	if (r < 0) {
		/* Refused inside the act (after the decision): completed as an error, with the refusal. */
		*ret = (struct crossing_result){ .ok = false, .error = strdup(c->refusal.message) };
		return 0;
	}
	c->dialled = true;
	r = c->ops->wait_done(c->box, wait, &d);
	if (r < 0) {
		*ret = (struct crossing_result){ .ok = false,
						 .error = strdup("the box stopped while the connection was open") };
		return 0;
	}
	*ret = (struct crossing_result){ .ok = !d.error && !d.rule,
					 .has_transfer = true,
					 .bytes_up = d.bytes_up,
					 .bytes_down = d.bytes_down,
					 .duration_ms = d.duration_ms };
	if (d.rule || d.error) {
		char *e = NULL;
		if (asprintf(&e, "%s%s%s", d.rule ? d.rule : "", d.rule && d.error ? ": " : "",
			     d.error ? d.error : "") < 0) {
			e = NULL;
		}
		ret->error = e;
	}
	if (d.rule) {
		/* The proxy refused it after the dial (the TLS server name, a tunnel that is not TLS): tkbox.egress. */
		c->ops->record(c->box,
			       json_pack("{s:s,s:I,s:s,s:s,s:s}", "host", c->h.name, "port", (json_int_t)c->port,
					 "decision", "refused", "rule", d.rule, "reason", d.error ? d.error : d.rule));
	}
	egress_done_info_release(&d);
	return 0;
}

static const struct crossing_door egress_door = {
	.name = "egress",
	.tool = "WebFetch",
	.act = door_act,
};

/* A refusal of the crossing's gate (the signer denied, did not decide, or an ask was not approved). */
static void gate_refusal(struct egress_conn *c, const struct crossing *x)
{
	/* The signer's text, at most EGRESS_SIGNER_TEXT_MAX bytes cut on a character, so the rules and id still fit. */
	char said[EGRESS_SIGNER_TEXT_MAX + 1];

	(void)snprintf(said, sizeof(said), "%s", x->refusal.message);
	(void)json_utf8_clip(said);
	if (x->refusal.status == 403 && strcmp(x->refusal.code, "denied") == 0) {
		json_t *ids = json_object_get(x->refusal.extra, "rule_ids");
		char rules[256] = "";
		size_t i, k = 0;
		json_t *v;
		json_array_foreach(ids, i, v) {
			int w = snprintf(rules + k, sizeof(rules) - k, "%s%s", k ? ", " : "",
					 json_is_string(v) ? json_string_value(v) : "?");
			if (w < 0 || (size_t)w >= sizeof(rules) - k) {
				break;
			}
			k += (size_t)w;
		}
		(void)conn_refuse(c, 403, "signer-deny", false,
				  "the signer's policy decides; a person can change its rules (tkbox-signer policy)",
				  "%s%s%s (decision %s)", said, k ? "; rules " : "", rules, x->decision_id);
	} else if (x->refusal.status == 403) {
		(void)conn_refuse(c, 403, "not-approved", false, "a person on the host answers the signer's approval",
				  "%s", said);
	} else {
		(void)conn_refuse(c, 503, "signer-unavailable", false,
				  "check the signer (tkbox-signer status); nothing connects until it answers", "%s",
				  said[0] ? said : "the signer did not decide");
	}
}

int egress_door_run(struct egress_conn *c)
{
	struct egress_host_addrs own;
	char host[EGRESS_HOST_TEXT_MAX + 2];
	int r;

	egress_own_addrs(&own);
	c->own = &own;
	c->decided = false;
	c->dialled = false;
	r = egress_door_check(c, &own);
	if (r >= 0) {
		json_t *args = json_pack("{s:s}", "url", c->url);
		json_t *extra =
			json_pack("{s:s,s:I,s:s}", "host", c->h.name, "port", (json_int_t)c->port, "url", c->url);
		struct crossing x = {
			.door = &egress_door,
			.host = c->host,
			.box = c->box,
			.ctx = c,
			.args = args,
			.decided_extra = extra,
			.seq = c->conn,
			.unrecorded = c->unrecorded,
			.run_id = c->run_id,
			.run_token = c->run_token,
			.client_fd = c->ops->abandon_fd ? c->ops->abandon_fd(c->box) : -1,
			.approval_wait_ms = c->approval_wait_ms > 0 ? c->approval_wait_ms : EGRESS_APPROVAL_WAIT_MS,
		};
		if (!args || !extra) {
			r = conn_refuse(c, 503, "internal", false, "try again", "out of memory");
		} else {
			c->decided = !c->unrecorded;
			r = crossing_run(&x);
			if (r == -ECANCELED && !c->refusal.status) {
				/* The box's egress closed while the signer decided or a person was asked (abandoned). */
				(void)conn_refuse(c, 503, "box-stopping", false,
						  "the box is stopping; nothing can connect",
						  "the box began to stop while the signer decided");
			} else if (r < 0 && !c->refusal.status) {
				gate_refusal(c, &x);
			}
		}
		crossing_release(&x);
		json_decref(args);
		json_decref(extra);
	}
	c->own = NULL;
	if (!c->refusal.status) {
		return 0;
	}
	c->ops->refuse(c->box, c->conn, c->refusal.status, c->refusal.rule, c->refusal.message);
	host_display(c, host, sizeof(host));
	c->ops->event(c->box, "egress.refused",
		      json_pack("{s:I,s:s,s:I,s:i,s:s,s:s}", "conn", (json_int_t)c->conn, "host", host, "port",
				(json_int_t)c->port, "status", c->refusal.status, "rule", c->refusal.rule, "reason",
				c->refusal.reason));
	if (c->refusal.record) {
		c->ops->record(c->box,
			       json_pack("{s:s,s:I,s:s,s:s,s:s}", "host", host, "port", (json_int_t)c->port, "decision",
					 "refused", "rule", c->refusal.rule, "reason", c->refusal.reason));
	}
	return -EPERM;
}
