/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h"
#include "daemon/obsq.h"

int obsq_init(struct obsq *q, size_t cap)
{
	struct obsq_item *items;

	if (cap == 0 || cap > OBSQ_MAX) {
		return -EINVAL;
	}
	items = calloc(cap, sizeof(*items));
	if (!items) {
		return -ENOMEM;
	}
	*q = (struct obsq){ .items = items, .cap = cap };
	return 0;
}

void obsq_release(struct obsq *q)
{
	if (q) {
		(void)obsq_clear(q);
		free(q->items);
		*q = (struct obsq){ 0 };
	}
}

int obsq_push(struct obsq *q, const char *kind, json_t *data)
{
	struct obsq_item *it;
	char *k;

	if (!kind || !data) {
		json_decref(data);
		return -EINVAL;
	}
	if (q->len >= q->cap) {
		json_decref(data);
		return -ENOSPC;
	}
	k = strdup(kind);
	if (!k) {
		json_decref(data);
		return -ENOMEM;
	}
	it = &q->items[(q->head + q->len) % q->cap];
	it->kind = k;
	it->data = data;
	q->len++;
	return 0;
}

const struct obsq_item *obsq_peek(const struct obsq *q)
{
	return q->len > 0 ? &q->items[q->head] : NULL;
}

void obsq_pop(struct obsq *q)
{
	struct obsq_item *it;

	if (q->len == 0) {
		return;
	}
	it = &q->items[q->head];
	free(it->kind);
	json_decref(it->data);
	*it = (struct obsq_item){ 0 };
	q->head = (q->head + 1) % q->cap;
	q->len--;
}

size_t obsq_clear(struct obsq *q)
{
	size_t n = q->len;

	while (q->len > 0) {
		obsq_pop(q);
	}
	q->head = 0;
	return n;
}

size_t obsq_len(const struct obsq *q)
{
	return q->len;
}
