/* region-index: (parent, name) -> a position in an array of regions (see region-index.h). */
#include "model/region-index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model/registry.h"

uint64_t
region_index_hash(uint32_t parent, const char *name)
{
	uint64_t h = UINT64_C(14695981039346656037);
	for (const unsigned char *c = (const unsigned char *)name; *c; c++)
		h = (h ^ *c) * UINT64_C(1099511628211);
	return h ^ ((uint64_t)parent * UINT64_C(0x9e3779b97f4a7c15));
}

/* The slot of (@parent, @name) in @ix: where it is, or the empty slot where it would go. */
static size_t
slot_of(const struct region_index *ix, struct region_agg *const *v, uint32_t parent,
        const char *name, uint64_t h)
{
	size_t mask = ix->cap - 1;
	for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
		uint32_t s = ix->slots[i];
		if (!s)
			return i;
		const struct region_agg *r = v[s - 1];
		if (r->hash == h && r->parent == parent && !strcmp(r->name, name))
			return i;
	}
}

struct region_agg *
region_index_find(const struct region_index *ix, struct region_agg *const *v, uint32_t parent,
                  const char *name)
{
	if (!ix->cap)
		return NULL;
	uint32_t s = ix->slots[slot_of(ix, v, parent, name, region_index_hash(parent, name))];
	return s ? v[s - 1] : NULL;
}

int
region_index_reserve(struct region_index *ix, struct region_agg ***v, size_t n, size_t *cap)
{
	if (n == *cap) {
		size_t c = *cap ? 2 * *cap : 8;
		struct region_agg **nv = realloc(*v, c * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = c;
	}
	if (2 * (n + 1) > ix->cap) {
		struct region_index grown = {.cap = ix->cap ? 2 * ix->cap : 16};
		grown.slots = calloc(grown.cap, sizeof(*grown.slots));
		if (!grown.slots)
			return -ENOMEM;
		free(ix->slots);
		*ix = grown;
		for (size_t i = 0; i < n; i++)
			region_index_put(ix, *v, i);
	}
	return 0;
}

void
region_index_put(struct region_index *ix, struct region_agg *const *v, size_t i)
{
	const struct region_agg *r = v[i];
	ix->slots[slot_of(ix, v, r->parent, r->name, r->hash)] = (uint32_t)i + 1;
}

void
region_index_free(struct region_index *ix)
{
	free(ix->slots);
	*ix = (struct region_index){0};
}
