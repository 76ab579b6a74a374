/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "banned.h"
#include "guest/kmsg.h"

static int kmsg_fd = -1;

void guest_kmsg(const char *fmt, ...)
{
	char text[256], line[300];
	va_list ap;
	int n;

	if (kmsg_fd < 0) {
		kmsg_fd = open("/dev/kmsg", O_WRONLY | O_CLOEXEC | O_NOCTTY);
	}
	if (kmsg_fd < 0) {
		return;
	}
	va_start(ap, fmt);
	n = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (n < 0) {
		return;
	}
	/* One record per line: text from a program's output must not start another or carry escapes. */
	for (char *p = text; *p; p++) {
		if ((unsigned char)*p < 0x20 || *p == 0x7f) {
			*p = '?';
		}
	}
	/* <3>: shown even with "quiet" on the kernel command line. */
	n = snprintf(line, sizeof(line), "<3>tkbox-guest: %s\n", text);
	if (n > 0) {
		(void)!write(kmsg_fd, line, (size_t)MIN((size_t)n, sizeof(line) - 1));
	}
}
