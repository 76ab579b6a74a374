/* SPDX-License-Identifier: Apache-2.0 */
#include <signal.h>
#include <string.h>

#include "banned.h"
#include "exec-stream.h"

bool exs_signal_allowed(int sig)
{
	return exit_signal_forwardable(sig);
}

static bool from_client(uint8_t type)
{
	return type == EXS_STDIN || type == EXS_STDIN_EOF || type == EXS_SIGNAL;
}

static bool from_supervisor(uint8_t type)
{
	switch (type) {
	case EXS_STARTED:
	case EXS_STDOUT:
	case EXS_STDERR:
	case EXS_EXIT:
	case EXS_ERROR:
	case EXS_CREDIT:
		return true;
	default:
		return false;
	}
}

static uint32_t get_u32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* The size and value rules of each type: the decoder and the encoder both apply them. */
static int check(const struct exs_frame *f)
{
	switch (f->type) {
	case EXS_STDIN:
	case EXS_STDOUT:
	case EXS_STDERR:
		if (f->len > EXS_MAX_DATA) {
			return -E2BIG;
		}
		return f->len >= 1 ? 0 : -EBADMSG;
	case EXS_ERROR:
		if (f->len > EXS_MAX_ERROR) {
			return -E2BIG;
		}
		return f->len >= 1 && !memchr(f->data, '\0', f->len) ? 0 : -EBADMSG;
	case EXS_STDIN_EOF:
	case EXS_STARTED:
		return f->len == 0 ? 0 : -EBADMSG;
	case EXS_SIGNAL:
		return exs_signal_allowed(f->signal) ? 0 : -EBADMSG;
	case EXS_EXIT:
		return exit_status_valid(&f->exit) ? 0 : -EBADMSG;
	case EXS_CREDIT:
		return f->credit >= 1 && f->credit <= EXS_STDIN_WINDOW ? 0 : -EBADMSG;
	default:
		return -EPROTO;
	}
}

int exs_decode(enum exs_dir dir, uint8_t type, const uint8_t *p, size_t n, struct exs_frame *ret)
{
	struct exs_frame f = { .type = type };
	int r;

	if (!(dir == EXS_FROM_CLIENT ? from_client(type) : from_supervisor(type))) {
		return -EPROTO;
	}
	switch (type) {
	case EXS_SIGNAL:
		if (n != 1) {
			return -EBADMSG;
		}
		f.signal = p[0];
		break;
	case EXS_EXIT:
		if (n != 5 || p[0] > EXIT_KIND_SIGNALED) {
			return -EBADMSG;
		}
		f.exit.kind = p[0] == EXIT_KIND_EXITED ? EXIT_KIND_EXITED : EXIT_KIND_SIGNALED;
		f.exit.value = get_u32(p + 1);
		break;
	case EXS_CREDIT:
		if (n != 4) {
			return -EBADMSG;
		}
		f.credit = get_u32(p);
		break;
	default:
		f.data = n > 0 ? p : NULL;
		f.len = n;
		break;
	}
	r = check(&f);
	if (r < 0) {
		return r;
	}
	*ret = f;
	return 0;
}

int exs_encode(const struct exs_frame *f, struct buf *out)
{
	uint8_t b[5];
	int r = check(f);

	if (r < 0) {
		return r == -EPROTO ? -EPROTO : -EINVAL;
	}
	switch (f->type) {
	case EXS_SIGNAL:
		b[0] = f->signal;
		return frame_encode(out, f->type, b, 1);
	case EXS_EXIT:
		b[0] = (uint8_t)f->exit.kind;
		b[1] = (uint8_t)(f->exit.value >> 24);
		b[2] = (uint8_t)(f->exit.value >> 16);
		b[3] = (uint8_t)(f->exit.value >> 8);
		b[4] = (uint8_t)f->exit.value;
		return frame_encode(out, f->type, b, 5);
	case EXS_CREDIT:
		b[0] = (uint8_t)(f->credit >> 24);
		b[1] = (uint8_t)(f->credit >> 16);
		b[2] = (uint8_t)(f->credit >> 8);
		b[3] = (uint8_t)f->credit;
		return frame_encode(out, f->type, b, 4);
	default:
		return frame_encode(out, f->type, f->data, f->len);
	}
}

int exs_encode_bytes(struct buf *out, uint8_t type, const void *p, size_t n)
{
	struct exs_frame f = { .type = type, .data = p, .len = n };

	if (type == EXS_SIGNAL || type == EXS_EXIT || type == EXS_CREDIT) {
		return -EINVAL;
	}
	return exs_encode(&f, out);
}

int exs_encode_exit(struct buf *out, const struct exit_status *s)
{
	struct exs_frame f = { .type = EXS_EXIT, .exit = *s };

	return exs_encode(&f, out);
}

int exs_encode_credit(struct buf *out, uint32_t credit)
{
	struct exs_frame f = { .type = EXS_CREDIT, .credit = credit };

	return exs_encode(&f, out);
}

int exs_encode_signal(struct buf *out, int sig)
{
	struct exs_frame f = { .type = EXS_SIGNAL, .signal = (uint8_t)sig };

	if (sig < 0 || sig > UINT8_MAX) {
		return -EINVAL;
	}
	return exs_encode(&f, out);
}
