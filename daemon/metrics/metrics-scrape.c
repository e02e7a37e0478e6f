/* metrics-scrape: the page's figures read from the registry in steps (see metrics.h).
 *
 * The page shows one set of series per (program, uid, region): the figures of every
 * process of that uid with that comm, live or exited, and of its retired aggregate (what
 * the processes the registry forgot counted), merged (counts and sums add, histograms add
 * bucket by bucket). So a series never goes down when a process is forgotten: its
 * figures move from the process to the aggregate, within one step of the loop. A uid
 * label, so that another user's process named like yours never adds to your series; no
 * pid label: a pid changes with each run of a program and would make new series each
 * time, and a fleet's figures add up per program (sum without (uid)), not per process.
 *
 * A scrape runs in steps of at most METRICS_STEP_NS, each from a zero timer, so that the
 * loop polls its sockets between two steps:
 *
 *   SNAPSHOT  the processes and the retired aggregates, sorted by comm, uid (and container
 *             with --metrics-labels container, the aggregates then per cgroup), each
 *             group's aggregates after its processes: a group per (comm, uid[, container])
 *             (one step)
 *   MAP       per group, the union of its processes' event names; per process, its event
 *             ids mapped onto that union
 *   SCAN      a group at a time: every region of its processes into one entry per
 *             region name: its runs, and the smallest wall time and count of each event,
 *             which tell its series; then each entry's series counted, and the entry
 *             copied into a heap if it may be on the page (heap_offer()): its uid's,
 *             which holds the best entries of the uid whose series fit in its share of
 *             max_series, or the rest's, the best of the others that fit in max_series;
 *             the worst at the top of each
 *   SORT      the rest sorted; the page's entries: every uid's share, then the best of
 *             the rest that fit beside them, sorted, the most runs first; the series of
 *             all the others are counted as dropped
 *   GATHER    for each kept entry, its processes' figures merged into histograms of
 *             the page's bounds; then what SCAN held is unmapped
 *   WRITE     the page, a chunk of METRICS_CHUNK_BYTES at a time, each once the previous
 *             has gone out (evhttp_send_reply_chunk_with_cb())
 *
 * One scrape at a time goes through SNAPSHOT to GATHER (the others wait, QUEUED). SCAN
 * holds the entries of one group at a time, about 80 bytes each, in one buffer that the
 * next group reuses; they are found by name through an index only once a name may come
 * twice (from a second process of the group, or after a step, when the registry may have
 * changed). What a scrape keeps for WRITE is bounded by max_series. Between two steps
 * the registry may change, and a process may be freed: each step first finds which
 * processes of the snapshot are still there (mark_alive()), and reads only those. A
 * process the snapshot holds has its retired aggregate in the snapshot too (the registry
 * makes it with the process), after it in its group: one forgotten before SCAN reaches it
 * has its regions scanned in the aggregate, one forgotten later has them scanned already,
 * and GATHER finds them in either. The aggregate may have learnt event names since MAP: those are
 * mapped by name (event_of()).
 */

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/cgroup.h"
#include "kernel/log.h"
#include "metrics/metrics-internal.h"
#include "session/server.h"

/* One (comm, region) as SCAN gathers it: in the group's buffer while SCAN merges the
 * regions of that comm's processes, then copied into the heap if it is among the best. */
struct entry {
	uint64_t key;
	uint64_t count;
	uint64_t wall_min; /* MIN_EMPTY: no run */
	uint32_t group;
	uint32_t series;
	uint32_t size;   /* bytes of the entry: its name, then ev_min at ev_off */
	uint32_t ev_off; /* per event of the group: MIN_UNSEEN, MIN_EMPTY or the smallest */
	uint32_t room;   /* in the heap: bytes of its memory, which the next copy may reuse */
	char name[];
};

static uint64_t *
ev_min(const struct entry *e)
{
	return (uint64_t *)(void *)((char *)e + e->ev_off);
}

/* ---- SNAPSHOT and the processes still there ---- */

static int
sproc_comm_cmp(const void *a, const void *b)
{
	const struct sproc *x = a, *y = b;
	int c = strcmp(x->p->comm, y->p->comm);

	if (!c)
		c = strcmp(x->container, y->container);
	if (c)
		return c;
	if (x->uid != y->uid)
		return x->uid < y->uid ? -1 : 1;
	if (x->retired != y->retired)
		return x->retired ? 1 : -1;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

static int
sproc_addr_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)(*(struct sproc *const *)a)->p;
	uintptr_t y = (uintptr_t)(*(struct sproc *const *)b)->p;

	return x < y ? -1 : x > y;
}

/* Marks @sp of the snapshot for @p, if it is the same process (or retired aggregate). */
static void
mark_one(struct scrape *s, const struct process *p)
{
	size_t lo = 0, hi = s->n_procs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if ((uintptr_t)s->by_addr[mid]->p < (uintptr_t)p)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < s->n_procs) {
		struct sproc *sp = s->by_addr[lo];

		if (sp->p == p && sp->pid == p->pid && sp->start == p->start && sp->uid == p->uid)
			sp->gen = s->gen;
	}
}

/* Marks the processes and retired aggregates of the snapshot that the registry still holds
 * (the same one: a new one may have the address of one freed). Run at the start of each
 * step that reads the registry. */
static void
mark_alive(struct scrape *s)
{
	const struct registry *reg = &s->m->model->reg;

	s->gen++;
	const struct process *p;
	pmc_list_for_each(p, &reg->procs, link)
		mark_one(s, p);
	pmc_list_for_each(p, &reg->retired, link)
		mark_one(s, p);
}

static bool
alive(const struct scrape *s, const struct sproc *sp)
{
	return sp->gen == s->gen;
}

static int
uid_cmp(const void *a, const void *b)
{
	uid_t x = *(const uid_t *)a, y = *(const uid_t *)b;

	return x < y ? -1 : x > y;
}

/* The uids with regions now, each with its heap capped at its share of max_series; the
 * rest's heap capped at max_series. */
static int
snapshot_users(struct scrape *s)
{
	uid_t *uids = arena_alloc(&s->small, (s->n_groups + 1) * sizeof(*uids));
	size_t n = 0;

	if (!uids)
		return -ENOMEM;
	for (size_t i = 0; i < s->n_groups; i++) {
		const struct group *g = &s->groups[i];

		for (uint32_t j = g->first; j < g->first + g->n; j++)
			if (s->procs[j].p->n_regions) {
				uids[n++] = g->uid;
				break;
			}
	}
	qsort(uids, n, sizeof(*uids), uid_cmp);
	s->n_users = 0;
	for (size_t i = 0; i < n; i++)
		if (!i || uids[i] != uids[i - 1])
			uids[s->n_users++] = uids[i];
	s->users = arena_alloc(&s->small, (s->n_users + 1) * sizeof(*s->users));
	if (!s->users)
		return -ENOMEM;
	for (size_t i = 0; i < s->n_users; i++)
		s->users[i].cap = s->m->max_series / s->n_users;
	s->rest.cap = s->m->max_series;
	for (size_t i = 0; i < s->n_groups; i++) {
		uid_t *u = bsearch(&s->groups[i].uid, uids, s->n_users, sizeof(*uids), uid_cmp);

		s->groups[i].user = u ? (int32_t)(u - uids) : -1;
	}
	return 1;
}

static int
step_snapshot(struct scrape *s)
{
	const struct registry *reg = &s->m->model->reg;
	size_t n = 0, n_retired = 0, max;

	const struct process *a;
	pmc_list_for_each(a, &reg->retired, link)
		n_retired++;
	max = reg->n_procs + n_retired;
	s->procs = arena_alloc(&s->small, (max + 1) * sizeof(*s->procs));
	s->by_addr = arena_alloc(&s->small, (max + 1) * sizeof(*s->by_addr));
	s->groups = arena_alloc(&s->small, (max + 1) * sizeof(*s->groups));
	if (!s->procs || !s->by_addr || !s->groups)
		return -ENOMEM;
	for (struct process *p = registry_first(reg); p && n < reg->n_procs;
	     p = registry_process_next(p))
		s->procs[n++] =
		        (struct sproc){.p = p, .pid = p->pid, .uid = p->uid, .start = p->start};
	for (struct process *p = registry_first_retired(reg); p && n < max;
	     p = registry_process_next(p))
		s->procs[n++] = (struct sproc){
		        .p = p, .pid = p->pid, .uid = p->uid, .start = p->start, .retired = true};
	s->n_procs = n;
	for (size_t i = 0; i < n; i++) {
		char name[CGROUP_NAME_MAX];

		s->procs[i].container = "";
		if (s->m->label_container &&
		    !(s->procs[i].container =
		              arena_strdup(&s->small, cgroup_container_name(s->procs[i].p->cgroup,
		                                                            name, sizeof(name)))))
			return -ENOMEM;
	}
	qsort(s->procs, n, sizeof(*s->procs), sproc_comm_cmp);
	for (size_t i = 0; i < n; i++) {
		struct group *g;

		if (!i || strcmp(s->procs[i].p->comm, s->procs[i - 1].p->comm) ||
		    strcmp(s->procs[i].container, s->procs[i - 1].container) ||
		    s->procs[i].uid != s->procs[i - 1].uid) {
			g = &s->groups[s->n_groups++];
			memcpy(g->comm, s->procs[i].p->comm, sizeof(g->comm));
			g->comm[sizeof(g->comm) - 1] = '\0';
			g->container = s->procs[i].container;
			g->uid = s->procs[i].uid;
			g->first = (uint32_t)i;
		}
		g = &s->groups[s->n_groups - 1];
		g->n++;
		s->procs[i].group = (uint32_t)(s->n_groups - 1);
		s->by_addr[i] = &s->procs[i];
	}
	qsort(s->by_addr, n, sizeof(*s->by_addr), sproc_addr_cmp);
	return snapshot_users(s);
}

/* ---- MAP ---- */

/* The index of event @name in the group being mapped, added if new; NO_EVENT past
 * METRICS_GROUP_EVENTS or without memory. */
static uint16_t
union_event(struct scrape *s, const char *name)
{
	for (uint32_t i = 0; i < s->n_uni; i++)
		if (!strcmp(s->uni[i], name))
			return (uint16_t)i;
	if (s->n_uni == METRICS_GROUP_EVENTS)
		return NO_EVENT;
	s->uni[s->n_uni] = arena_strdup(&s->small, name);
	return s->uni[s->n_uni] ? (uint16_t)s->n_uni++ : NO_EVENT;
}

static int
step_map(struct scrape *s)
{
	for (; s->cur < s->n_procs; s->cur++) {
		struct sproc *sp = &s->procs[s->cur];
		struct group *g = &s->groups[sp->group];

		if (s->cur == g->first)
			s->n_uni = 0;
		if (alive(s, sp) && sp->p->n_events) {
			const struct process *p = sp->p;

			sp->map = arena_alloc(&s->small, p->n_events * sizeof(*sp->map));
			if (!sp->map)
				return -ENOMEM;
			for (size_t id = 0; id < p->n_events; id++)
				sp->map[id] =
				        p->events[id] ? union_event(s, p->events[id]) : NO_EVENT;
			sp->n_map = (uint32_t)p->n_events;
		}
		if (s->cur + 1 == (size_t)g->first + g->n) {
			g->events = arena_alloc(&s->small, (s->n_uni + 1) * sizeof(*g->events));
			if (!g->events)
				return -ENOMEM;
			memcpy(g->events, s->uni, s->n_uni * sizeof(*g->events));
			g->n_events = s->n_uni;
		}
		if (metrics_past_deadline(s)) {
			s->cur++;
			return 0;
		}
	}
	return 1;
}

/* ---- SCAN ---- */

static uint64_t
mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= UINT64_C(0xbf58476d1ce4e5b9);
	x ^= x >> 27;
	x *= UINT64_C(0x94d049bb133111eb);
	return x ^ (x >> 31);
}

/* Room for @more bytes in the group's buffer: its entries are found by offset, so it may
 * move. */
static int
gbuf_grow(struct scrape *s, size_t more)
{
	size_t cap = s->gbuf_cap ? 2 * s->gbuf_cap : 64u << 10;
	char *b;

	while (cap < s->g_used + more)
		cap *= 2;
	if (!(b = arena_map(cap)))
		return -ENOMEM;
	if (s->g_used)
		memcpy(b, s->gbuf, s->g_used);
	arena_unmap(s->gbuf, s->gbuf_cap);
	s->gbuf = b;
	s->gbuf_cap = cap;
	return 0;
}

static struct entry *
gbuf_at(const struct scrape *s, size_t off)
{
	return (struct entry *)(void *)(s->gbuf + off);
}

/* Indexes the entries of the group so far by name, with room for @want. */
static int
group_index(struct scrape *s, size_t want)
{
	size_t cap = 64;

	while (cap < 2 * want || cap < 2 * (s->g_n + 1))
		cap *= 2;
	if (cap > s->gtab_len) {
		/* Its pages made at once: a page first read would be the zero page, and its
		 * first write then a fault and a TLB flush on every CPU. */
		size_t *t = mmap(NULL, cap * sizeof(*t), PROT_READ | PROT_WRITE,
		                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

		if (t == MAP_FAILED)
			return -ENOMEM;
		arena_unmap(s->gtab, s->gtab_len * sizeof(*s->gtab));
		s->gtab = t;
		s->gtab_len = cap;
	} else {
		memset(s->gtab, 0, cap * sizeof(*s->gtab));
	}
	s->g_cap = cap;
	for (size_t off = 0; off < s->g_used; off += gbuf_at(s, off)->size) {
		size_t i = (size_t)gbuf_at(s, off)->key & (cap - 1);

		while (s->gtab[i])
			i = (i + 1) & (cap - 1);
		s->gtab[i] = off + 1;
	}
	s->g_indexed = true;
	return 0;
}

/* The entry of region @r of a process of group @gi, made if new. Until the group is
 * indexed, every region read is new: the first process of the group with regions, read
 * within one step, has each name once. */
static struct entry *
entry_get(struct scrape *s, uint32_t gi, const struct region_agg *r)
{
	uint64_t key = mix64(r->hash);
	size_t i = 0, len, size, off;
	struct entry *e;
	uint32_t n_ev = s->groups[gi].n_events;

	if (s->g_indexed) {
		if (2 * (s->g_n + 1) > s->g_cap && group_index(s, s->g_n + 1) < 0)
			return NULL;
		for (i = (size_t)key & (s->g_cap - 1); s->gtab[i]; i = (i + 1) & (s->g_cap - 1)) {
			e = gbuf_at(s, s->gtab[i] - 1);
			if (e->key == key && !strcmp(e->name, r->name))
				return e;
		}
	}
	len = (offsetof(struct entry, name) + strlen(r->name) + 1 + 7u) & ~(size_t)7u;
	size = len + n_ev * sizeof(uint64_t);
	if (s->gbuf_cap - s->g_used < size && gbuf_grow(s, size) < 0)
		return NULL;
	off = s->g_used;
	e = gbuf_at(s, off);
	e->key = key;
	e->count = 0;
	e->wall_min = MIN_EMPTY;
	e->group = gi;
	e->series = 0;
	e->size = (uint32_t)size;
	e->ev_off = (uint32_t)len;
	e->room = 0;
	strcpy(e->name, r->name);
	for (uint32_t k = 0; k < n_ev; k++)
		ev_min(e)[k] = MIN_UNSEEN;
	s->g_used += size;
	s->g_n++;
	if (s->g_indexed)
		s->gtab[i] = off + 1;
	return e;
}

static uint64_t
min_of(const struct stats *st)
{
	if (!st->count)
		return MIN_EMPTY;
	return st->min < MIN_CLAMP ? st->min : MIN_CLAMP;
}

/* Whether process event @id of @r has figures: it is shown then, even at 0 runs. */
static bool
event_seen(const struct region_agg *r, size_t id)
{
	return r->seen[id] || registry_region_stats(r, id)->count;
}

static size_t
events_of(const struct sproc *sp, const struct region_agg *r)
{
	return r->n_ev < sp->p->n_events ? r->n_ev : sp->p->n_events;
}

/* The event of @sp's group that its event @id is: as MAP mapped it, or for an id it has
 * learnt since (a retired aggregate that a process's figures joined), by name; NO_EVENT
 * when the group has no such event (then no series of it was on the page either). */
static uint16_t
event_of(const struct scrape *s, const struct sproc *sp, size_t id)
{
	const struct group *g = &s->groups[sp->group];
	const char *name = sp->p->events[id];

	if (id < sp->n_map)
		return sp->map[id];
	for (uint32_t k = 0; name && k < g->n_events; k++)
		if (!strcmp(g->events[k], name))
			return (uint16_t)k;
	return NO_EVENT;
}

static int
scan_region(struct scrape *s, const struct sproc *sp, const struct region_agg *r)
{
	struct entry *e = entry_get(s, sp->group, r);
	uint64_t v;

	if (!e)
		return -ENOMEM;
	e->count += r->count + r->first_path; /* as pmcctl query counts */
	v = min_of(registry_region_wall(r));
	if (v < e->wall_min)
		e->wall_min = v;
	for (size_t id = 0, n = events_of(sp, r); id < n; id++) {
		uint16_t k = event_of(s, sp, id);

		if (k == NO_EVENT || !event_seen(r, id))
			continue;
		v = min_of(registry_region_stats(r, id));
		if (v < ev_min(e)[k])
			ev_min(e)[k] = v;
	}
	return 0;
}

/* ---- SELECT and SORT ---- */

/* The first bound k0 of a histogram whose smallest value is @min (the bucket below its
 * power of two, empty), and how many bounds it has up to @top. */
static unsigned
first_bound(uint64_t min)
{
	return min ? 63u - (unsigned)__builtin_clzll(min) : 0u;
}

static unsigned
n_bounds(uint64_t min, unsigned top)
{
	unsigned k0 = first_bound(min);

	return k0 <= top ? top - k0 + 1u : 0u;
}

/* The series of @e: its count, its wall-time histogram (bounds, +Inf, _sum, _count), and
 * per event a histogram and a counter. */
static uint32_t
entry_series(const struct scrape *s, const struct entry *e)
{
	uint32_t n = 1 + n_bounds(e->wall_min, WALL_TOP) + 3;

	for (uint32_t k = 0; k < s->groups[e->group].n_events; k++)
		if (ev_min(e)[k] != MIN_UNSEEN)
			n += n_bounds(ev_min(e)[k], COUNT_TOP) + 4;
	return n;
}

/* Whether @a goes on the page before @b: more runs, then by comm, container, uid and name. */
static bool
better(const struct scrape *s, const struct entry *a, const struct entry *b)
{
	const struct group *ga = &s->groups[a->group], *gb = &s->groups[b->group];
	int c;

	if (a->count != b->count)
		return a->count > b->count;
	c = strcmp(ga->comm, gb->comm);
	if (!c)
		c = strcmp(ga->container, gb->container);
	if (!c && ga->uid != gb->uid)
		return ga->uid < gb->uid;
	return c ? c < 0 : strcmp(a->name, b->name) < 0;
}

/* A heap keeps the worst entry at the top: none of its children goes after it. */
static void
sift_down(struct scrape *s, struct eheap *eh, size_t i, size_t n)
{
	struct entry **h = eh->v;

	for (;;) {
		size_t w = i, l = 2 * i + 1, r = l + 1;
		struct entry *t;

		if (l < n && better(s, h[w], h[l]))
			w = l;
		if (r < n && better(s, h[w], h[r]))
			w = r;
		if (w == i)
			return;
		t = h[i];
		h[i] = h[w];
		h[w] = t;
		i = w;
	}
}

static void
sift_up(struct scrape *s, struct eheap *eh, size_t i)
{
	struct entry **h = eh->v;

	while (i) {
		size_t up = (i - 1) / 2;
		struct entry *t;

		if (!better(s, h[up], h[i]))
			return;
		t = h[i];
		h[i] = h[up];
		h[up] = t;
		i = up;
	}
}

/* Room for one more pointer in @v (of *@len, @n used). */
static int
ptrs_room(struct entry ***v, size_t *len, size_t n)
{
	struct entry **w;
	size_t l = *len ? 2 * *len : 512;

	if (n < *len)
		return 0;
	if (!(w = arena_map(l * sizeof(*w))))
		return -ENOMEM;
	if (n)
		memcpy(w, *v, n * sizeof(*w));
	arena_unmap(*v, *len * sizeof(**v));
	*v = w;
	*len = l;
	return 0;
}

/* A copy of @e for the heap: in the memory of an entry that left it when one fits. */
static struct entry *
heap_copy(struct scrape *s, const struct entry *e)
{
	struct entry *c = NULL;
	uint32_t room = 0;

	for (size_t i = s->n_spare; i-- > 0 && s->n_spare - i <= 8;)
		if (s->spare[i]->room >= e->size) {
			c = s->spare[i];
			room = c->room;
			s->spare[i] = s->spare[--s->n_spare];
			break;
		}
	if (!c) {
		/* Room for a longer name or more events next time. */
		room = (e->size + 63u) & ~63u;
		if (!(c = arena_alloc(&s->big, room)))
			return NULL;
	}
	memcpy(c, e, e->size);
	c->room = room;
	return c;
}

/* Whether @h keeps @e: its series fit, or @e goes before its worst entry. */
static bool
heap_wants(const struct scrape *s, const struct eheap *h, const struct entry *e)
{
	return h->series + e->series <= h->cap || (h->n && better(s, e, h->v[0]));
}

/* @c, a copy for the heaps, into @h; then @h's worst entries out while its series are over
 * its cap: from a uid's heap into the rest if it wants them, else to the spares. */
static int
heap_put(struct scrape *s, struct eheap *h, struct entry *c)
{
	int r;

	if (ptrs_room(&h->v, &h->len, h->n) < 0)
		return -ENOMEM;
	h->v[h->n++] = c;
	sift_up(s, h, h->n - 1);
	h->series += c->series;
	while (h->series > h->cap) {
		struct entry *w = h->v[0];

		h->series -= w->series;
		h->v[0] = h->v[--h->n];
		sift_down(s, h, 0, h->n);
		if (h != &s->rest && heap_wants(s, &s->rest, w)) {
			if ((r = heap_put(s, &s->rest, w)) < 0)
				return r;
			continue;
		}
		if (ptrs_room(&s->spare, &s->spare_len, s->n_spare) < 0)
			return -ENOMEM;
		s->spare[s->n_spare++] = w;
	}
	return 0;
}

/*
 * @e, an entry of the group buffer, into a heap if it may be on the page. Each uid with
 * regions is guaranteed a share of max_series, max_series / (uids with regions): its best
 * entries whose series fit in its share, the longest such run, are on the page whatever
 * the other uids have. What the shares leave goes to the best of all the other entries,
 * whichever their uid: the longest run of them whose series fit in what is left. So a uid
 * alone may fill the page, and many regions of one uid never push another's off it.
 *
 * A heap keeps the longest run of the best entries offered whose series fit in its cap:
 * an entry is kept when the series of those before it and its own fit, so the worst entry,
 * after every other one of the heap, leaves when the heap's series do not fit (entries
 * offered later only add to those before it). The uid's heap, capped at its share, holds
 * its guaranteed entries; every other entry (not wanted there, or pushed out later) is
 * offered to the rest, capped at max_series, from which SORT takes the best that fit in
 * what the shares leave. The heaps hold no more than twice the page's series.
 */
static int
heap_offer(struct scrape *s, const struct entry *e)
{
	int32_t u = s->groups[e->group].user;
	struct eheap *h = u >= 0 && heap_wants(s, &s->users[u], e) ? &s->users[u] : NULL;
	struct entry *c;

	if (!h && heap_wants(s, &s->rest, e))
		h = &s->rest;
	if (!h)
		return 0;
	if (!(c = heap_copy(s, e)))
		return -ENOMEM;
	return heap_put(s, h, c);
}

/* Starts group @g: its processes with regions now tell how large its buffer and its index
 * may grow. The buffer is made large enough for names of up to 16 bytes at once, rather
 * than doubled (and copied) from small. */
static int
group_begin(struct scrape *s, const struct group *g)
{
	size_t bytes;

	s->g_want = 0;
	for (uint32_t i = g->first; i < g->first + g->n; i++)
		if (alive(s, &s->procs[i]))
			s->g_want += s->procs[i].p->n_regions;
	s->g_used = s->g_n = s->g_flush = 0;
	bytes = s->g_want * (offsetof(struct entry, name) + 16 + g->n_events * sizeof(uint64_t));
	if (bytes > s->gbuf_cap && gbuf_grow(s, bytes) < 0)
		return -ENOMEM;
	s->g_indexed = false;
	s->cur = g->first;
	s->cur_region = 0;
	return 0;
}

/* SCAN, a group at a time: every region of its processes into its entries, then each
 * entry's series counted and the entry offered to the heap. */
static int
step_scan(struct scrape *s)
{
	unsigned work = 0;
	int r;

	/* A group read on in a later step: the registry may have changed meanwhile. A process
	 * only ever adds regions, at the end of its list, so the rest of its list brings new
	 * names; but a retired aggregate may have given up its regions and taken others (its
	 * names read already may come again), and a process forgotten meanwhile has its
	 * figures in its aggregate, read next (the index is made for the aggregate then). */
	if (s->g_state == 1 && !s->g_indexed && s->cur < s->n_procs) {
		const struct sproc *sp = &s->procs[s->cur];

		if (alive(s, sp) && (sp->retired || sp->p->n_regions < s->cur_region) &&
		    (r = group_index(s, s->g_want)) < 0)
			return r;
	}
	for (; s->cur_group < s->n_groups; s->cur_group++) {
		const struct group *g = &s->groups[s->cur_group];

		if (s->g_state == 0) {
			if ((r = group_begin(s, g)) < 0)
				return r;
			s->g_state = 1;
		}
		for (; s->g_state == 1 && s->cur < (size_t)g->first + g->n;
		     s->cur++, s->cur_region = 0) {
			const struct sproc *sp = &s->procs[s->cur];

			if (!alive(s, sp))
				continue;
			/* A second process with regions: its names may be the first's. */
			if (!s->cur_region && s->g_n && !s->g_indexed &&
			    (r = group_index(s, s->g_want)) < 0)
				return r;
			while (s->cur_region < sp->p->n_regions) {
				if ((r = scan_region(s, sp, sp->p->regions[s->cur_region++])) < 0)
					return r;
				if (++work % 64 == 0 && metrics_past_deadline(s))
					return 0;
			}
		}
		s->g_state = 2;
		while (s->g_flush < s->g_used) {
			struct entry *e = gbuf_at(s, s->g_flush);

			s->g_flush += e->size;
			e->series = entry_series(s, e);
			s->total_series += e->series;
			if ((r = heap_offer(s, e)) < 0)
				return r;
			if (++work % 64 == 0 && metrics_past_deadline(s))
				return 0;
		}
		s->g_state = 0;
	}
	return 1;
}

/* Heapsort of @h, some of it: the worst goes to the end, so that @h->v ends sorted best
 * first (@h->n then 0). Return: 1 when done, 0 when the step's time is up. */
static int
heap_sort_some(struct scrape *s, struct eheap *h)
{
	unsigned work = 0;

	while (h->n > 1) {
		struct entry *t = h->v[0];

		h->v[0] = h->v[--h->n];
		h->v[h->n] = t;
		sift_down(s, h, 0, h->n);
		if (++work % 256 == 0 && metrics_past_deadline(s))
			return 0;
	}
	h->n = 0;
	return 1;
}

/* The page's entries: every uid's guaranteed ones, then the best of the rest that fit in
 * what the shares leave (the rest sorted first), all sorted best first. */
static int
step_sort(struct scrape *s)
{
	if (s->sort_stage == 0) {
		s->n_rest = s->rest.n;
		s->sort_stage = 1;
	}
	if (s->sort_stage == 1) {
		size_t n_rest = s->n_rest, n = 0;
		uint64_t used = 0;

		if (!heap_sort_some(s, &s->rest))
			return 0;
		for (size_t i = 0; i < s->n_users; i++) {
			n += s->users[i].n;
			used += s->users[i].series;
		}
		s->page.len = n + n_rest;
		if (s->page.len && !(s->page.v = arena_map(s->page.len * sizeof(*s->page.v))))
			return -ENOMEM;
		for (size_t i = 0; i < s->n_users; i++)
			for (size_t j = 0; j < s->users[i].n; j++)
				s->page.v[s->page.n++] = s->users[i].v[j];
		/* The shares are within max_series: what they leave, the rest fills. */
		for (size_t i = 0; i < n_rest && used + s->rest.v[i]->series <= s->m->max_series;
		     i++) {
			used += s->rest.v[i]->series;
			s->page.v[s->page.n++] = s->rest.v[i];
		}
		s->kept_series = used;
		s->n_kept = s->page.n;
		for (size_t i = s->page.n / 2; i-- > 0;)
			sift_down(s, &s->page, i, s->page.n);
		s->sort_stage = 2;
		if (metrics_past_deadline(s))
			return 0;
	}
	return heap_sort_some(s, &s->page);
}

/* ---- GATHER ---- */

/* Adds the values of @st's histogram to @c, per power of two (see POWERS): 0 in c[0], each
 * bucket whose values lie in [2^k, 2^(k+1)) in c[k + 1] (no bucket spans two powers). */
static void
coarse_add(uint64_t *c, const struct stats *st)
{
	uint64_t count;

	for (unsigned b = 0, i; stats_hist_next(st, &b, &i, &count);) {
		uint64_t low = stats_bucket_low(i);

		c[low ? 64 - __builtin_clzll(low) : 0] += count;
	}
}

static int
ohist_init(struct scrape *s, struct ohist *h, uint16_t event, uint64_t min, unsigned top)
{
	h->event = event;
	h->k0 = (uint8_t)first_bound(min);
	h->nb = (uint8_t)n_bounds(min, top);
	if (h->nb && !(h->cum = arena_alloc(&s->out, h->nb * sizeof(*h->cum))))
		return -ENOMEM;
	return 0;
}

/* The kept entry @e on the page as @o: its processes' figures now, merged. Its bounds are
 * those SCAN counted: a smaller value come since is in the first bucket for now. */
static int
gather_entry(struct scrape *s, const struct entry *e, struct oentry *o)
{
	const struct group *g = &s->groups[e->group];
	uint32_t n = 1;
	int r;

	for (uint32_t k = 0; k < g->n_events; k++)
		n += ev_min(e)[k] != MIN_UNSEEN;
	o->group = e->group;
	o->n_hist = n;
	o->name = arena_strdup(&s->out, e->name);
	o->h = arena_alloc(&s->out, n * sizeof(*o->h));
	if (!o->name || !o->h)
		return -ENOMEM;
	if ((r = ohist_init(s, &o->h[0], NO_EVENT, e->wall_min, WALL_TOP)) < 0)
		return r;
	n = 1;
	for (uint32_t k = 0; k < g->n_events; k++)
		if (ev_min(e)[k] != MIN_UNSEEN &&
		    (r = ohist_init(s, &o->h[n++], (uint16_t)k, ev_min(e)[k], COUNT_TOP)) < 0)
			return r;
	if (s->coarse_n < o->n_hist * POWERS) {
		uint64_t *c = realloc(s->coarse, o->n_hist * POWERS * sizeof(*c));

		if (!c)
			return -ENOMEM;
		s->coarse = c;
		s->coarse_n = o->n_hist * POWERS;
	}
	memset(s->coarse, 0, o->n_hist * POWERS * sizeof(*s->coarse));

	for (uint32_t i = g->first; i < g->first + g->n; i++) {
		const struct sproc *sp = &s->procs[i];
		const struct region_agg *ra =
		        alive(s, sp) ? registry_region_find(sp->p, o->name) : NULL;

		if (!ra)
			continue;
		o->count += ra->count + ra->first_path;
		const struct stats *wall = registry_region_wall(ra);
		coarse_add(s->coarse, wall);
		o->h[0].count += wall->count;
		o->h[0].sum = util_sat_add(o->h[0].sum, wall->sum);
		for (size_t id = 0, ne = events_of(sp, ra); id < ne; id++) {
			uint16_t k = event_of(s, sp, id);
			const struct event_agg *ev = &ra->ev[id];
			const struct stats *st = registry_region_stats(ra, id);

			if (k == NO_EVENT || !event_seen(ra, id))
				continue;
			for (uint32_t j = 1; j < o->n_hist; j++) {
				if (o->h[j].event != k)
					continue;
				coarse_add(s->coarse + j * POWERS, st);
				o->h[j].count += st->count;
				o->h[j].sum = util_sat_add(o->h[j].sum, st->sum);
				o->h[j].scaled += ev->scaled;
				break;
			}
		}
	}
	for (uint32_t j = 0; j < o->n_hist; j++) {
		const uint64_t *c = s->coarse + j * POWERS;
		struct ohist *h = &o->h[j];
		uint64_t cum = c[0]; /* values below 2^0 */

		for (unsigned k = 0; k < h->k0; k++)
			cum += c[1 + k];
		for (unsigned i = 0; i < h->nb; i++) {
			h->cum[i] = cum;
			cum += c[1 + h->k0 + i];
		}
	}
	return 0;
}

static int
step_gather(struct scrape *s)
{
	if (!s->kept && s->n_kept &&
	    !(s->kept = arena_alloc(&s->out, s->n_kept * sizeof(*s->kept))))
		return -ENOMEM;
	for (; s->cur < s->n_kept; s->cur++) {
		int r = gather_entry(s, s->page.v[s->cur], &s->kept[s->cur]);

		if (r < 0)
			return r;
		if (metrics_past_deadline(s)) {
			s->cur++;
			return 0;
		}
	}
	return 1;
}

/* What SCAN to GATHER needed and WRITE does not. */
static void
scrape_drop_scan(struct scrape *s)
{
	arena_free(&s->big);
	arena_unmap(s->gbuf, s->gbuf_cap);
	arena_unmap(s->gtab, s->gtab_len * sizeof(*s->gtab));
	for (size_t i = 0; i < s->n_users; i++)
		arena_unmap(s->users[i].v, s->users[i].len * sizeof(*s->users[i].v));
	s->n_users = 0;
	arena_unmap(s->rest.v, s->rest.len * sizeof(*s->rest.v));
	arena_unmap(s->page.v, s->page.len * sizeof(*s->page.v));
	s->rest.v = s->page.v = NULL;
	s->rest.len = s->page.len = 0;
	arena_unmap(s->spare, s->spare_len * sizeof(*s->spare));
	s->spare = NULL;
	s->spare_len = s->n_spare = 0;
	s->gbuf = NULL;
	s->gtab = NULL;
	s->gbuf_cap = s->gtab_len = 0;
	free(s->coarse);
	s->coarse = NULL;
	s->coarse_n = 0;
}

/* ---- a scrape's life ---- */

static void
scrape_arm(struct scrape *s)
{
	static const struct timeval now = {0, 0};

	evtimer_add(s->step_ev, &now);
}

/* Starts building the first queued scrape, when none is being built. */
static void
scrape_kick(struct metrics *m)
{
	if (m->building)
		return;
	struct scrape *s;
	pmc_list_for_each(s, &m->scrapes, link)
		if (s->phase == PH_QUEUED) {
			m->building = s;
			s->phase = PH_SNAPSHOT;
			scrape_arm(s);
			return;
		}
}

/* Forgets @s; its request is evhttp's or answered already. */
void
metrics_scrape_free(struct scrape *s)
{
	struct metrics *m = s->m;
	bool building = m->building == s;

	pmc_list_remove(&m->scrapes, &s->link);
	m->n_scrapes--;
	if (s->c)
		s->c->scrape = NULL;
	if (s->step_ev)
		event_free(s->step_ev);
	scrape_drop_scan(s);
	arena_free(&s->small);
	arena_free(&s->out);
	if (s->buf)
		evbuffer_free(s->buf);
	if (s->labels)
		evbuffer_free(s->labels);
	free(s);
	if (building) {
		m->building = NULL;
		scrape_kick(m);
	}
}

/* Answers the request of @s now: its connection may go away meanwhile without it. */
static void
scrape_detach(struct scrape *s)
{
	if (s->c)
		s->c->scrape = NULL;
	s->c = NULL;
}

/* The connection of @s went away (on_close()). On a network error or timeout evhttp left
 * the request to us, without its connection; otherwise evhttp frees it. */
void
metrics_scrape_abort(struct scrape *s)
{
	if (!evhttp_request_get_connection(s->req))
		evhttp_request_free(s->req);
	metrics_scrape_free(s);
}

/* evhttp wrote the last chunk out: the next one, in a step of its own. */
static void
on_sent(struct evhttp_connection *evcon, void *arg)
{
	scrape_arm(arg);
}

/* One chunk of the page. */
static void
scrape_write(struct scrape *s)
{
	struct page pg = {.b = s->buf};
	int r;

	if (!s->started) {
		evhttp_add_header(evhttp_request_get_output_headers(s->req), "Content-Type",
		                  METRICS_CONTENT_TYPE);
		evhttp_send_reply_start(s->req, HTTP_OK, "OK");
		s->started = true;
	}
	r = metrics_page_write_some(s, &pg);
	if (r < 0) {
		/* Cut short, the page must not look complete: close the connection (on_close()
		 * frees the scrape). */
		log_errno(r, "metrics: cannot write the page");
		evhttp_connection_free(evhttp_request_get_connection(s->req));
		return;
	}
	if (r == 1) {
		if (evbuffer_get_length(s->buf))
			evhttp_send_reply_chunk(s->req, s->buf);
		/* Detached first: without a chunk left to send, an HTTP/1.0 connection is
		 * closed (on_close()) within evhttp_send_reply_end(). */
		scrape_detach(s);
		evhttp_send_reply_end(s->req);
		metrics_scrape_free(s);
		return;
	}
	if (evbuffer_get_length(s->buf))
		evhttp_send_reply_chunk_with_cb(s->req, s->buf, on_sent, s);
	else
		scrape_arm(s); /* the step's time was up before a line */
}

/* The phases from s->phase on, in the same step while its time lasts. Return: 1 when the
 * phase is WRITE or the time is up, 0 when the phase has more, or -errno. */
static int
scrape_build(struct scrape *s)
{
	bool marked = false;
	int r = 1;

	while (r == 1 && s->phase != PH_WRITE) {
		/* The registry changed since the last step: which processes are left. */
		if (!marked &&
		    (s->phase == PH_MAP || s->phase == PH_SCAN || s->phase == PH_GATHER)) {
			mark_alive(s);
			marked = true;
		}
		switch (s->phase) {
		case PH_SNAPSHOT:
			r = step_snapshot(s);
			break;
		case PH_MAP:
			r = step_map(s);
			break;
		case PH_SCAN:
			r = step_scan(s);
			break;
		case PH_SORT:
			r = step_sort(s);
			break;
		case PH_GATHER:
			r = step_gather(s);
			break;
		default:
			r = -EINVAL;
			break;
		}
		if (r == 1) {
			s->phase++;
			s->cur = s->cur_region = 0;
			if (s->phase == PH_WRITE) {
				struct metrics *m = s->m;

				scrape_drop_scan(s);
				m->building = NULL;
				scrape_kick(m);
				if (s->total_series > s->kept_series && !m->warned_dropped) {
					log_warn("metrics: the page leaves off %" PRIu64
					         " series of the regions with the fewest runs to "
					         "stay within --metrics-max-series %zu "
					         "(pmc_metrics_series_dropped says how many)",
					         s->total_series - s->kept_series, m->max_series);
					m->warned_dropped = true;
				}
			}
			if (metrics_past_deadline(s))
				break;
		}
	}
	return r;
}

static void
on_step(evutil_socket_t fd, short what, void *arg)
{
	struct scrape *s = arg;
	int r;

	s->deadline = util_now_ns(CLOCK_MONOTONIC) + METRICS_STEP_NS;
	if (s->phase == PH_WRITE) {
		scrape_write(s);
		return;
	}
	r = scrape_build(s);
	if (r < 0) {
		log_errno(r, "metrics: cannot build the page");
		scrape_detach(s);
		metrics_reply_text(s->req, HTTP_INTERNAL, "Internal Server Error",
		                   "out of memory\n");
		metrics_scrape_free(s);
		return;
	}
	scrape_arm(s);
}

/* A scrape of @m, QUEUED at the end of its queue (in order of arrival); NULL without memory
 * (its buffers may be NULL: metrics_scrape_free() it). */
static struct scrape *
scrape_new(struct metrics *m)
{
	struct scrape *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->m = m;
	s->small.chunk = 64u << 10;
	s->big.chunk = 1u << 20;
	s->out.chunk = 64u << 10;
	s->buf = evbuffer_new();
	s->labels = evbuffer_new();
	m->n_scrapes++;
	pmc_list_append(&m->scrapes, &s->link);
	return s;
}

/* Answers GET /metrics on connection @c: queued, then built and written step by step. */
void
metrics_scrape_start(struct metrics *m, struct conn *c, struct evhttp_request *req)
{
	struct scrape *s;

	if (!c || c->scrape) {
		/* A connection evhttp made itself (on_new_bev() had no memory): untracked, it
		 * could not tell when it goes away. */
		metrics_reply_text(req, HTTP_INTERNAL, "Internal Server Error", "out of memory\n");
		return;
	}
	if (m->n_scrapes >= METRICS_MAX_SCRAPES) {
		unsigned long more;

		if (metrics_gate_pass(&m->gate_busy, 1, &more))
			log_warn("metrics: over %d scrapes at once: answered 503 (%lu more since "
			         "the last such line)",
			         METRICS_MAX_SCRAPES, more);
		evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
		metrics_reply_text(req, 503, "Service Unavailable",
		                   "busy: pmcdaemon serves a few scrapes at once; try again\n");
		return;
	}
	s = scrape_new(m);
	if (s) {
		s->c = c;
		s->req = req;
		s->step_ev = evtimer_new(m->srv->base, on_step, s);
		c->scrape = s;
	}
	if (!s || !s->step_ev || !s->buf || !s->labels) {
		if (s)
			metrics_scrape_free(s);
		log_errno(-ENOMEM, "metrics: cannot build the page");
		metrics_reply_text(req, HTTP_INTERNAL, "Internal Server Error", "out of memory\n");
		return;
	}
	scrape_kick(m);
}

int
metrics_scrape_page(struct metrics *m, struct evbuffer *out)
{
	struct scrape *s;
	int r;

	if (m->building)
		return -EBUSY;
	s = scrape_new(m);
	if (!s || !s->buf || !s->labels) {
		if (s)
			metrics_scrape_free(s);
		return -ENOMEM;
	}
	m->building = s;
	s->phase = PH_SNAPSHOT;
	do {
		s->deadline = util_now_ns(CLOCK_MONOTONIC) + METRICS_STEP_NS;
		r = scrape_build(s);
	} while (r >= 0 && s->phase != PH_WRITE);
	while (r >= 0) {
		struct page pg = {.b = s->buf};

		s->deadline = util_now_ns(CLOCK_MONOTONIC) + METRICS_STEP_NS;
		r = metrics_page_write_some(s, &pg);
		if (evbuffer_add_buffer(out, s->buf) < 0)
			r = -ENOMEM;
		if (r == 1)
			break;
	}
	metrics_scrape_free(s);
	return r < 0 ? r : 0;
}
