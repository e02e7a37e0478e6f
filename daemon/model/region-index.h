/* region-index: the one find-or-add index of a process's regions and of its call path nodes:
 * an array of struct region_agg * in the order they came, and an open-addressing table from
 * (parent, name) to 1 + the position in that array. Regions are the nodes of parent 0. So that
 * a client defining its regions again on every new connection costs the daemon one probe a
 * name, not a scan. */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct region_agg;

struct region_index {
	uint32_t *slots; /* 1 + a position in the array (0: empty) */
	size_t cap;      /* 0 or a power of two, at least twice the array's length */
};

/**
 * region_index_hash() - the hash of (@parent, @name) that struct region_agg's hash holds
 * FNV-1a of @name, mixed with @parent: names are short, and the index needs a spread, not
 * secrecy (a client that makes its own names collide slows only its own process's lookups).
 */
uint64_t region_index_hash(uint32_t parent, const char *name);

/**
 * region_index_find() - the region of @v with @parent and @name, or NULL
 * @ix: the index of @v, borrowed
 * @v: the array, borrowed
 */
struct region_agg *region_index_find(const struct region_index *ix, struct region_agg *const *v,
                                     uint32_t parent, const char *name);

/**
 * region_index_reserve() - make room for element @n (0-based) of array *@v: the array grows
 * (doubles, from 8) when @n reaches *@cap, the index (doubles, from 16, rebuilt) when it would
 * be more than half full
 * @ix: the index of *@v, updated
 * @v: the array, realloc'ed (still the caller's)
 * @n: the elements in *@v now
 * @cap: the array's capacity, updated
 * Return: 0, or -ENOMEM (*@v, *@cap and @ix as they were or grown, all still valid).
 */
int region_index_reserve(struct region_index *ix, struct region_agg ***v, size_t n, size_t *cap);

/**
 * region_index_put() - index element @i of @v, whose name, parent and hash are set, and which
 * is not in the index yet; room made by region_index_reserve()
 */
void region_index_put(struct region_index *ix, struct region_agg *const *v, size_t i);

/** region_index_free() - free the table of @ix (not the array nor its regions); @ix is empty */
void region_index_free(struct region_index *ix);
