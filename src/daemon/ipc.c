/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>
#include <sys/socket.h>

#include "banned.h"
#include "daemon/ipc.h"
#include "daemon/supmsg.h"
#include "json.h"

/* The text of a sent message is wiped before it is freed: a boot request carries the box CA's key. */
static void wipe_freep(char **p)
{
	if (*p) {
		explicit_bzero(*p, strlen(*p));
		free(*p);
	}
}

static int ipc_send_flags(int sock, const json_t *v, const int *fds, size_t nfds, int flags)
{
	_cleanup_(wipe_freep) char *s = json_dumps(v, JSON_COMPACT);
	union {
		char buf[CMSG_SPACE(sizeof(int) * IPC_MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct iovec iov;
	struct msghdr mh = { 0 };
	size_t n;
	ssize_t w;

	if (!s) {
		return -ENOMEM;
	}
	n = strlen(s);
	if (n > SUPMSG_MAX || nfds > IPC_MAX_FDS) {
		return -E2BIG;
	}
	iov = (struct iovec){ .iov_base = s, .iov_len = n };
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (nfds > 0) {
		struct cmsghdr *c;
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	w = RETRY_EINTR(sendmsg(sock, &mh, MSG_NOSIGNAL | flags));
	if (w < 0) {
		return negative_errno();
	}
	return (size_t)w == n ? 0 : -EIO;
}

int ipc_send(int sock, const json_t *v, const int *fds, size_t nfds)
{
	return ipc_send_flags(sock, v, fds, nfds, 0);
}

int ipc_send_msg(int sock, struct supmon *mon, enum supmsg_dir dir, const struct supmsg *m, const int *fds,
		 const char **ret_why)
{
	_cleanup_json_ json_t *v = NULL;
	int r = supmon_check(mon, dir, m, ret_why);

	if (r >= 0) {
		r = supmsg_encode(m, &v);
	}
	if (r >= 0) {
		/* The daemon never waits on a supervisor: a full queue is -EAGAIN (the supervisor stopped reading). */
		r = ipc_send_flags(sock, v, fds, supmsg_fds(m), dir == SUPMSG_TO_SUPERVISOR ? MSG_DONTWAIT : 0);
	}
	if (r >= 0) {
		r = supmon_apply(mon, dir, m, ret_why);
	}
	if (v && m->ca_key) {
		/* The key's copy in the JSON object: wiped before jansson frees it. */
		json_t *k = json_object_get(v, "ca_key");
		if (json_is_string(k)) {
			explicit_bzero((char *)json_string_value(k), json_string_length(k));
		}
	}
	return r;
}

int ipc_recv(int sock, struct buf *out, int *fds, size_t max_fds, size_t *ret_nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * IPC_MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct iovec iov;
	struct msghdr mh = { 0 };
	uint8_t *dst;
	size_t nfds = 0;
	ssize_t n;
	int r;

	buf_reset(out);
	r = buf_reserve(out, SUPMSG_MAX + 1, &dst);
	if (r < 0) {
		return r;
	}
	iov = (struct iovec){ .iov_base = dst, .iov_len = SUPMSG_MAX + 1 };
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	n = RETRY_EINTR(recvmsg(sock, &mh, MSG_CMSG_CLOEXEC));
	if (n < 0) {
		buf_reset(out);
		return negative_errno();
	}
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			int tmp[IPC_MAX_FDS];
			memcpy(tmp, CMSG_DATA(c), sizeof(int) * MIN(k, (size_t)IPC_MAX_FDS));
			for (size_t i = 0; i < k && i < IPC_MAX_FDS; i++) {
				if (nfds < max_fds) {
					fds[nfds++] = tmp[i];
				} else {
					(void)close(tmp[i]);
					r = -EPROTO;
				}
			}
		}
	}
	if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || (size_t)n > SUPMSG_MAX) {
		r = -EPROTO;
	}
	if (r >= 0 && n == 0) {
		r = -ECONNRESET;
	}
	if (r < 0) {
		for (size_t i = 0; i < nfds; i++) {
			(void)close(fds[i]);
		}
		buf_reset(out);
		return r;
	}
	/* buf_reserve appended SUPMSG_MAX + 1 bytes: keep only what arrived. */
	out->len = out->off + (size_t)n;
	*ret_nfds = nfds;
	return 0;
}
