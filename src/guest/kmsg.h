/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_GUEST_KMSG_H
#define TKBOX_GUEST_KMSG_H

#include "macro.h"

/*
 * One line on the box's console through /dev/kmsg, prefixed "tkbox-guest: ".
 * printk writes the serial port synchronously, while a user-space write to
 * ttyS0 waits for the UART's transmit interrupt, which microvm with pic=off
 * does not deliver (the 8250 driver falls back to a ~1 s backup timer). The
 * line is cut at 255 bytes; control characters in it become '?'. Nothing
 * happens when /dev/kmsg cannot be opened (a test on the host).
 */
void guest_kmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
