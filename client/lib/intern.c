/* libpmcclient's name and path tables, owner of G.names and G.paths: a region name interned as
 * its id (pmc_region()), a (parent path, region) pair as its path id. Both are open-addressing
 * tables read without a lock, written under one (G.names.lock for names, G.paths.lock for
 * paths), a small one first and a big one once the small one is full. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/client-internal.h"

/* FNV-1a of @name, and its length in *@len; stops after PMC_REGION_NAME_MAX bytes (a name
 * still going there is refused). */
static inline uint32_t
name_hash(const char *name, size_t *len)
{
	uint32_t h = 2166136261u;
	size_t i = 0;
	for (; i < PMC_REGION_NAME_MAX && name[i]; i++)
		h = (h ^ (unsigned char)name[i]) * 16777619u;
	*len = i;
	return h;
}

/* Whether interned name @id is @name (at most PMC_REGION_NAME_MAX bytes). */
static inline bool
name_is(pmc_region_t id, const char *name)
{
	const char *s = G.names.name[id];
	for (size_t i = 0; i < PMC_REGION_NAME_MAX; i++) {
		if (s[i] != name[i])
			return false;
		if (!s[i])
			return true;
	}
	return true;
}

/* Lock-free: the id of @name (hash @h) in the table @slots of @n (a power of two), or 0. */
static inline pmc_region_t
name_probe(_Atomic uint32_t *slots, uint32_t n, const char *name, uint32_t h)
{
	for (uint32_t i = h & (n - 1);; i = (i + 1) & (n - 1)) {
		uint32_t id = atomic_load_explicit(&slots[i], memory_order_acquire);
		if (!id)
			return 0;
		if (G.names.hash[id] == h && name_is(id, name))
			return id;
	}
}

/* Lock-free: the id of @name (hash @h), or 0. */
static pmc_region_t
name_find(const char *name, uint32_t h)
{
	pmc_region_t id = name_probe(G.names.slots, PMC_NAME_SLOTS, name, h);
	if (likely(id))
		return id;
	_Atomic uint32_t *big = atomic_load_explicit(&G.names.slots_big, memory_order_acquire);
	return big ? name_probe(big, PMC_NAME_SLOTS_BIG, name, h) : 0;
}

/* Called with G.names.lock held: a copy of @name (@len bytes), in chunks of 4 KiB written through
 * when made (the first at start), so that a name first seen in a region costs it no page
 * fault of the allocator's. Never freed, as names are not. */
char *
pmc__name_copy_locked(const char *name, size_t len)
{
	if (G.names.pool_left < len + 1) {
		size_t sz = 4096;
		char *chunk = malloc(sz);
		if (!chunk)
			return NULL;
		memset(chunk, 0, sz);
		G.names.pool = chunk;
		G.names.pool_left = sz;
	}
	char *copy = G.names.pool;
	memcpy(copy, name, len);
	copy[len] = 0;
	G.names.pool += len + 1;
	G.names.pool_left -= len + 1;
	return copy;
}

/* Publishes @id (hash @h) in the table @slots of @n (a power of two), its entries written. */
static void
table_insert(_Atomic uint32_t *slots, uint32_t n, uint32_t h, uint32_t id)
{
	uint32_t i = h & (n - 1);
	while (atomic_load_explicit(&slots[i], memory_order_relaxed))
		i = (i + 1) & (n - 1);
	atomic_store_explicit(&slots[i], id, memory_order_release);
}

/* A table of ids (names, paths): a small one for the first, then a big one for all. */
struct table {
	_Atomic uint32_t *small;
	uint32_t n_small;               /* its slots */
	uint32_t small_ids;             /* the first id that goes to the big one */
	_Atomic uint32_t *_Atomic *big; /* made when small_ids comes, never freed */
	uint32_t n_big;
	uint32_t (*hash)(uint32_t id); /* of an id in the table */
};

/* Called with @tb's lock held: where @id, the next id, goes (*@n: how many slots), the big
 * table made first when @id is the first for it, every earlier id moved into it before it is
 * published. Return: the slots, or NULL when memory is short. */
static _Atomic uint32_t *
table_slots_locked(const struct table *tb, uint32_t id, uint32_t *n)
{
	_Atomic uint32_t *big = atomic_load_explicit(tb->big, memory_order_relaxed);
	if (id >= tb->small_ids && !big) {
		/* The small table is full: the big one takes every id from now on. */
		big = calloc(tb->n_big, sizeof(*big));
		if (!big)
			return NULL;
		for (uint32_t k = 1; k < id; k++)
			table_insert(big, tb->n_big, tb->hash(k), k);
		atomic_store_explicit(tb->big, big, memory_order_release);
	}
	*n = big ? tb->n_big : tb->n_small;
	return big ? big : tb->small;
}

static uint32_t
name_hash_of(uint32_t id)
{
	return G.names.hash[id];
}

static const struct table names = {G.names.slots,      PMC_NAME_SLOTS,     PMC_NAMES_SMALL,
                                   &G.names.slots_big, PMC_NAME_SLOTS_BIG, name_hash_of};

/* Called with G.names.lock held: interns @name (not there yet), or 0 when the table is full (then
 * G.names.full) or memory is short. */
static pmc_region_t
name_add_locked(const char *name, size_t len, uint32_t h)
{
	if (G.names.n + 1 >= PMC_MAX_REGIONS) {
		atomic_store(&G.names.full, 1);
		return 0;
	}
	uint32_t n;
	_Atomic uint32_t *slots = table_slots_locked(&names, G.names.n + 1, &n);
	if (!slots)
		return 0;
	char *copy = pmc__name_copy_locked(name, len);
	if (!copy)
		return 0;
	pmc_region_t id = ++G.names.n;
	G.names.name[id] = copy;
	G.names.hash[id] = h;
	table_insert(slots, n, h, id);
	return id;
}

/* pmc_region() said no to @name for @why: count it (the next batch tells the daemon), and
 * say so once. */
static pmc_region_t
name_refused(unsigned why, const char *name)
{
	atomic_fetch_add_explicit(&G.loss.lost[why], 1, memory_order_relaxed);
	if (why == PMC_LOSS_NAMES && !atomic_load(&G.names.full))
		pmc__warn_loss(why,
		               "out of memory interning region name '%.40s': refused (pmc_region() "
		               "returns 0), counted by pmcdaemon as a dropped sample (reason %s)",
		               name, pmc_loss_name(why));
	else if (why == PMC_LOSS_LONG_NAMES)
		pmc__warn_loss(
		        why,
		        "region name '%.40s...' is longer than PMC_REGION_NAME_MAX (%d bytes): "
		        "refused, as is every such name (pmc_region() returns 0); each refusal "
		        "is counted by pmcdaemon as a dropped sample (reason %s)",
		        name, PMC_REGION_NAME_MAX, pmc_loss_name(why));
	else
		pmc__warn_loss(
		        why,
		        "more than %d region names in this process: '%.40s' and every later "
		        "new name refused (pmc_region() returns 0); each refusal is counted by "
		        "pmcdaemon as a dropped sample (reason %s)",
		        PMC_MAX_REGIONS - 1, name, pmc_loss_name(why));
	return 0;
}

PMC_EXPORT pmc_region_t
pmc_region(const char *name)
{
	/* Interned also while no daemon is up: the id stays good once one is. */
	if (!name || !*name || ensure_connected() == ST_OFF)
		return 0;
	size_t len;
	uint32_t h = name_hash(name, &len);
	/* Never cut short: two names that differ past the limit would be one region. */
	if (unlikely(len == PMC_REGION_NAME_MAX && name[len]))
		return name_refused(PMC_LOSS_LONG_NAMES, name);
	pmc_region_t id = name_find(name, h);
	if (likely(id))
		return id;
	if (atomic_load_explicit(&G.names.full, memory_order_relaxed))
		return name_refused(PMC_LOSS_NAMES, name);
	pthread_mutex_lock(&G.names.lock);
	id = name_find(name, h);
	if (!id)
		id = name_add_locked(name, len, h);
	pthread_mutex_unlock(&G.names.lock);
	return id ? id : name_refused(PMC_LOSS_NAMES, name);
}

/* Lock-free: the path id of (@parent, @region) (hash @h) in the table @slots of @n, or 0. */
static inline uint32_t
path_probe(_Atomic uint32_t *slots, uint32_t n, uint32_t parent, pmc_region_t region, uint32_t h)
{
	for (uint32_t i = h & (n - 1);; i = (i + 1) & (n - 1)) {
		uint32_t id = atomic_load_explicit(&slots[i], memory_order_acquire);
		if (!id)
			return 0;
		if (G.paths.parent[id] == parent && G.paths.region[id] == region)
			return id;
	}
}

static inline uint32_t
path_hash(uint32_t parent, pmc_region_t region)
{
	return (parent * 0x9e3779b1u) ^ (region * 0x85ebca6bu);
}

static uint32_t
path_hash_of(uint32_t id)
{
	return path_hash(G.paths.parent[id], G.paths.region[id]);
}

static const struct table paths = {G.paths.slots,      PMC_PATH_SLOTS,     PMC_PATHS_SMALL,
                                   &G.paths.slots_big, PMC_PATH_SLOTS_BIG, path_hash_of};

/* The path id of region @region begun in path @parent (0: none), interned on first use
 * (under G.paths.lock, which no one holds for long); 0 when the table is full (or past the
 * daemon's bound) or memory is short. */
uint32_t
pmc__path_intern(uint32_t parent, pmc_region_t region)
{
	uint32_t h = path_hash(parent, region);
	uint32_t id = path_probe(G.paths.slots, PMC_PATH_SLOTS, parent, region, h);
	_Atomic uint32_t *big = atomic_load_explicit(&G.paths.slots_big, memory_order_acquire);
	if (!id && big)
		id = path_probe(big, PMC_PATH_SLOTS_BIG, parent, region, h);
	if (id)
		return id;
	pthread_mutex_lock(&G.paths.lock);
	big = atomic_load_explicit(&G.paths.slots_big, memory_order_relaxed);
	id = big ? path_probe(big, PMC_PATH_SLOTS_BIG, parent, region, h)
	         : path_probe(G.paths.slots, PMC_PATH_SLOTS, parent, region, h);
	uint32_t n = atomic_load_explicit(&G.paths.n, memory_order_relaxed);
	uint32_t n_slots;
	_Atomic uint32_t *slots;
	if (!id && n + 1 < PMC_MAX_PATHS && n + 1 <= atomic_load(&G.conn.path_max) &&
	    (slots = table_slots_locked(&paths, n + 1, &n_slots))) {
		id = n + 1;
		G.paths.parent[id] = parent;
		G.paths.region[id] = region;
		/* Before the id is found (its slot) or defined (n_paths): its entries. */
		atomic_store_explicit(&G.paths.n, id, memory_order_release);
		table_insert(slots, n_slots, h, id);
	}
	pthread_mutex_unlock(&G.paths.lock);
	return id;
}

/* At the first connect: the small tables mapped now (32 KiB of names, the paths' and the first
 * 1,023 paths' entries), so that a name or path first seen inside a region costs that region
 * no page fault of them; the empty name, id 0, taken. */
void
pmc__intern_init(void)
{
	for (size_t i = 0; i < PMC_NAME_SLOTS; i += 1024)
		atomic_store_explicit(&G.names.slots[i], 0, memory_order_relaxed);
	for (size_t i = 0; i < PMC_PATH_SLOTS; i += 1024)
		atomic_store_explicit(&G.paths.slots[i], 0, memory_order_relaxed);
	G.paths.parent[0] = G.paths.region[0] = 0;
	pthread_mutex_lock(&G.names.lock);
	(void)pmc__name_copy_locked("", 0);
	pthread_mutex_unlock(&G.names.lock);
}

/* The tables stay the child's as they are: only their locks start over. */
void
pmc__intern_fork_child(void)
{
	pthread_mutex_init(&G.paths.lock, NULL);
	pthread_mutex_init(&G.names.lock, NULL);
}
