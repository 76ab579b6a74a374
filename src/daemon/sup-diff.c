/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "banned.h"
#include "crypto.h"
#include "daemon/sup-diff.h"
#include "io.h"
#include "log.h"
#include "patch/patch.h"

/*
 * The guest's text in a message for the daemon and a person: bytes other than
 * printable ASCII become \xNN (no terminal escape, always valid UTF-8), at
 * most max - 1 bytes (the end cut, never an escape).
 */
static void escape_text(const char *in, char *out, size_t max)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	for (; in && *in && o + 1 < max; in++) {
		unsigned char c = (unsigned char)*in;

		if (c >= 0x20 && c < 0x7f) {
			out[o++] = (char)c;
			continue;
		}
		if (o + 5 >= max) {
			break;
		}
		out[o++] = '\\';
		out[o++] = 'x';
		out[o++] = hex[c >> 4];
		out[o++] = hex[c & 15];
	}
	out[o] = '\0';
}

void sup_diff_init(struct sup_diff *d, int (*send)(void *ctx, const struct supmsg *m, const int *fds), void *ctx)
{
	*d = (struct sup_diff){ .send = send, .ctx = ctx };
}

uint64_t sup_diff_deadline(const struct sup_diff *d)
{
	return d->n != 0 ? d->deadline_ms : 0;
}

void sup_diff_release(struct sup_diff *d)
{
	buf_release(&d->data);
	d->n = 0;
	d->deadline_ms = 0;
}

/* The pending diff ends without a patch: the daemon hears why (what the guest still sends of it is dropped). */
void sup_diff_fail(struct sup_diff *d, const char *why)
{
	struct supmsg done = { .op = SUPMSG_DIFF_DONE, .diff = d->n, .error = (char *)why };

	if (d->n == 0) {
		return;
	}
	log_info("supervisor: diff %lld: %s", (long long)d->n, why);
	(void)d->send(d->ctx, &done, NULL);
	sup_diff_release(d);
}

/* The daemon asks for the box's patch: the guest makes it, DIFF_DATA lands in data. */
void sup_diff_start(struct sup_diff *d, struct agent_client *agent, int64_t n, uint64_t now_ms)
{
	uint32_t id;
	int r;

	d->n = n;
	r = buf_init(&d->data, PATCH_MAX_BYTES, 0);
	r = r < 0 ? r : agent_client_diff(agent, &id);
	if (r < 0) {
		sup_diff_fail(d, r == -EBUSY
					 ? "the box is still sending a patch asked for earlier; try again in a moment"
					 : "the request for the box's patch could not be sent to the box");
		return;
	}
	d->deadline_ms = now_ms + (uint64_t)SUP_DIFF_TIMEOUT_S * 1000;
}

/* The guest's notices (files it left out) as the supmsg's, escaped; what cannot be shown is dropped. */
static int diff_notices(const struct agent_event *ev, struct supmsg *m)
{
	const struct agent_msg *am = ev->msg;
	size_t n = am ? am->n_notices : 0;

	m->notices = n ? calloc(n, sizeof(*m->notices)) : NULL;
	if (n && !m->notices) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < n && i < PATCH_MAX_NOTICES; i++) {
		char path[PATCH_MAX_NOTICE + 1], why[PATCH_MAX_NOTICE + 1];

		escape_text(am->notices[2 * i], path, sizeof(path));
		escape_text(am->notices[2 * i + 1], why, sizeof(why));
		if (!path[0] || !why[0]) {
			continue;
		}
		m->notices[m->n_notices].path = strdup(path);
		m->notices[m->n_notices].why = strdup(why);
		m->n_notices++;
		if (!m->notices[m->n_notices - 1].path || !m->notices[m->n_notices - 1].why) {
			return -ENOMEM;
		}
	}
	return 0;
}

/*
 * The guest's patch is whole: the strict parser reads it (a refusal is the
 * daemon's answer), then its digest and a sealed memfd of exactly these
 * bytes go to the daemon with the diff_done.
 */
static void diff_end(struct sup_diff *d, const struct agent_event *ev)
{
	struct supmsg done = { .op = SUPMSG_DIFF_DONE, .diff = d->n, .ok = true };
	struct patch p = { 0 };
	char diag[SUPMSG_MAX_TEXT - 64], msg[SUPMSG_MAX_TEXT], hex[SHA256_HEX_LEN + 1];
	struct iovec iov = { .iov_base = (void *)buf_ptr(&d->data), .iov_len = buf_len(&d->data) };
	int fd = -1, r;

	diag[0] = '\0';
	r = patch_parse(buf_ptr(&d->data), buf_len(&d->data), &p, diag, sizeof(diag));
	if (r < 0) {
		char esc[sizeof(diag)];

		escape_text(diag[0] ? diag : tk_strerror(r), esc, sizeof(esc));
		(void)snprintf(msg, sizeof(msg), "the box's patch was refused: %s", esc);
		sup_diff_fail(d, msg);
		return;
	}
	done.files = (int64_t)p.n_files;
	done.patch_bytes = (int64_t)buf_len(&d->data);
	patch_release(&p);
	r = sha256_hex(buf_ptr(&d->data), buf_len(&d->data), hex);
	if (r >= 0) {
		done.sha256 = hex;
		r = fd = io_memfd_sealed("tkbox-patch", &iov, 1);
	}
	r = r < 0 ? r : diff_notices(ev, &done);
	if (r < 0) {
		(void)snprintf(msg, sizeof(msg), "the supervisor could not keep the box's patch: %s", tk_strerror(r));
		sup_diff_fail(d, msg);
	} else {
		/* Notices past what one message holds (SUPMSG_MAX: 64 long ones) are cut from the end, and logged. */
		while ((r = d->send(d->ctx, &done, &fd)) == -EINVAL && done.n_notices > 0) {
			done.n_notices--;
			log_warn("supervisor: diff %lld: a notice did not fit in the message: %s", (long long)done.diff,
				 done.notices[done.n_notices].path);
			free(done.notices[done.n_notices].path);
			free(done.notices[done.n_notices].why);
		}
		if (r < 0) {
			sup_diff_fail(d, "the supervisor could not send the box's patch to the daemon");
		}
		sup_diff_release(d);
	}
	for (size_t i = 0; i < done.n_notices; i++) {
		free(done.notices[i].path);
		free(done.notices[i].why);
	}
	free(done.notices);
	if (fd >= 0) {
		(void)close(fd);
	}
}

/* A diff's frames from the guest (agent-client.c checked they answer the one diff asked). */
bool sup_diff_event(struct sup_diff *d, const struct agent_event *ev)
{
	char esc[SUPMSG_MAX_TEXT - 64], msg[SUPMSG_MAX_TEXT];
	int r;

	if (ev->type != AGENT_EV_DIFF_DATA && ev->type != AGENT_EV_DIFF_END &&
	    !(ev->type == AGENT_EV_ERROR && ev->diff)) {
		return false;
	}
	if (d->n == 0) {
		return true; /* answered already (the cap, the deadline): the rest is dropped */
	}
	switch (ev->type) {
	case AGENT_EV_DIFF_DATA:
		r = buf_put(&d->data, ev->data, ev->len);
		if (r == -E2BIG) {
			sup_diff_fail(d,
				      "the box's patch is over PATCH_MAX_BYTES (32 MiB): make fewer or smaller changes "
				      "in /workspace, or copy large files out another way");
		} else if (r < 0) {
			sup_diff_fail(d, "the supervisor could not keep the box's patch: out of memory");
		}
		return true;
	case AGENT_EV_DIFF_END:
		diff_end(d, ev);
		return true;
	case AGENT_EV_ERROR:
	default:
		escape_text(ev->message, esc, sizeof(esc));
		(void)snprintf(msg, sizeof(msg), "the guest could not make the patch: %s", esc[0] ? esc : "no reason");
		sup_diff_fail(d, msg);
		return true;
	}
}
