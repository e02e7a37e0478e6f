/* pmcctl's call path trees: the nodes of one process, as a Query.tree reply lists them (each
 * RegionStats with its id and its parent's), folded into a tree one by one as the reply's
 * parts arrive, so that each part may be freed once its nodes are in: arrays of nodes and of
 * their events linked by index, the names kept once each, and (for the printers) each node's
 * RegionStats packed less what the tree already holds, no allocation per node. Each node's
 * self figures (its inclusive sums less its children's), the subtrees --region selects, and
 * the folded stacks of flamegraph, frames kept once each. Plain data in, plain data out: no
 * wire and no printing but the folded stacks, so that test-tree.c can feed it nodes made by
 * hand. */

#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "pmcctl/event-name.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"
#include "pmcctl/tree.h"

static uint64_t
sum_of(const Pmc__Stats *s)
{
	return s ? s->sum : 0;
}

/* @v (@cap items of @size) grown to hold @need, by half again at least. */
static void *
grow(void *v, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return v;
	size_t c = *cap < 64 ? 64 : *cap + *cap / 2;
	if (c < need)
		c = need;
	v = reallocarray(v, c, size);
	if (!v)
		pmcctl_oom();
	*cap = c;
	return v;
}

/* @v (@cap items of @size) made to hold @n exactly (an empty one kept as it is). */
static void *
shrink(void *v, size_t *cap, size_t n, size_t size)
{
	if (!v || !n || n >= *cap)
		return v;
	void *w = reallocarray(v, n, size);
	if (!w)
		return v; /* (smaller: its room stays, nothing is lost) */
	*cap = n;
	return w;
}

/* A seed of this process's own for the hash tables: ids and names are the daemon's to choose,
 * and with a fixed hash a hostile one could send thousands that all take one slot (each
 * added node then probing all the others: 3.5 s for 65,400 nodes of a 5 MB reply). */
static uint64_t
hash_seed(void)
{
	static uint64_t seed;

	if (!seed &&
	    (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed) || !seed))
		seed = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL) ^
		       UINT64_C(0x5bd1e9955bd1e995);
	return seed;
}

/* An index into a table of @cap (a power of two) slots for the hash @h: @h and the seed mixed
 * by a bijection whose every output bit depends on every input bit (murmur3's finalizer). */
static size_t
slot_of(uint64_t h, size_t cap)
{
	h ^= hash_seed();
	h ^= h >> 33;
	h *= UINT64_C(0xff51afd7ed558ccd);
	h ^= h >> 33;
	h *= UINT64_C(0xc4ceb9fe1a85ec53);
	h ^= h >> 33;
	return (size_t)h & (cap - 1);
}

/* ---- names, each once ---- */

static uint64_t
text_hash(const char *s)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325) ^ hash_seed(); /* FNV-1a, seeded */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * UINT64_C(0x100000001b3);
	return h;
}

/* @v (@cap slots, @n of them used) with room for one more: doubled once 3/4 would be used,
 * each slot moved by its key. */
static struct tree_slot *
slots_room(struct tree_slot *v, size_t *cap, size_t n)
{
	if (4 * (n + 1) <= 3 * *cap)
		return v;
	size_t c = *cap ? 2 * *cap : 64;
	struct tree_slot *w = calloc(c, sizeof(*w));

	if (!w)
		pmcctl_oom();
	for (size_t i = 0; i < *cap; i++) {
		if (!v[i].at)
			continue;
		size_t s = slot_of(v[i].key, c);

		while (w[s].at)
			s = (s + 1) & (c - 1);
		w[s] = v[i];
	}
	free(v);
	*cap = c;
	return w;
}

/* The offset of @s in @nm, added if it was not there. */
static uint32_t
names_add(struct tree_names *nm, const char *s)
{
	uint32_t h = (uint32_t)text_hash(s);

	nm->slot = slots_room(nm->slot, &nm->cap_slot, nm->n_slot);
	size_t i = slot_of(h, nm->cap_slot), len = strlen(s) + 1;

	for (; nm->slot[i].at; i = (i + 1) & (nm->cap_slot - 1))
		if (nm->slot[i].key == h && !strcmp(nm->s + nm->slot[i].at - 1, s))
			return nm->slot[i].at - 1;
	if (nm->n + len >= UINT32_MAX)
		pmcctl_fail("the call path names of one reply passed 4 GiB");
	nm->s = grow(nm->s, &nm->cap, nm->n + len, 1);
	memcpy(nm->s + nm->n, s, len);
	nm->slot[i] = (struct tree_slot){h, (uint32_t)nm->n + 1};
	nm->n_slot++;
	nm->n += len;
	return nm->slot[i].at - 1;
}

static void
names_free(struct tree_names *nm)
{
	free(nm->s);
	free(nm->slot);
	memset(nm, 0, sizeof(*nm));
}

/* ---- building ---- */

/* The slot of node id @id in @t's hash table: the one holding its index, or the free one
 * where it would go. */
static struct tree_slot *
id_slot(const struct tree *t, uint32_t id)
{
	size_t i = slot_of(id, t->cap_id);

	while (t->id_slot[i].at && t->id_slot[i].key != id)
		i = (i + 1) & (t->cap_id - 1);
	return &t->id_slot[i];
}

/* The index + 1 of the node of id @id in @t, 0 when none has it. */
static uint32_t
id_find(const struct tree *t, uint32_t id)
{
	if (id < t->cap_by_id && t->by_id[id])
		return t->by_id[id];
	/* (an id put in the table when it was beyond by_id's end) */
	return t->n_id_slot ? id_slot(t, id)->at : 0;
}

/* Records that node @i has id @id (none had it). */
static void
id_put(struct tree *t, uint32_t id, uint32_t i)
{
	/* Directly where ids are dense: by_id takes 8 bytes a node at most, and a reply's
	 * scattered ids cannot make it large. */
	if ((uint64_t)id < 2 * ((uint64_t)t->n + 4096)) {
		if (id >= t->cap_by_id) {
			size_t old = t->cap_by_id;

			t->by_id = grow(t->by_id, &t->cap_by_id, (size_t)id + 1, sizeof(*t->by_id));
			memset(t->by_id + old, 0, (t->cap_by_id - old) * sizeof(*t->by_id));
		}
		t->by_id[id] = i + 1;
		return;
	}
	t->id_slot = slots_room(t->id_slot, &t->cap_id, t->n_id_slot);
	*id_slot(t, id) = (struct tree_slot){id, i + 1};
	t->n_id_slot++;
}

void
tree_init(struct tree *t, bool keep)
{
	memset(t, 0, sizeof(*t));
	t->keep = keep;
}

/* Links the new node @i under the node its parent id names, if an earlier node has that id
 * (its own is not in the table yet: a node is never its own parent); else it is a root, an
 * orphan when it named a parent. Takes its figures out of its parent's self figures. */
static void
tree_link(struct tree *t, uint32_t i, uint32_t parent_id)
{
	struct tree_node *nd = &t->node[i];
	uint32_t s = parent_id ? id_find(t, parent_id) : 0;

	if (!s) {
		nd->orphan = parent_id != 0;
		t->n_orphans += nd->orphan;
		return;
	}
	struct tree_node *up = &t->node[s - 1];

	nd->parent = s - 1;
	nd->depth = up->depth + 1;
	if (up->last_child != TREE_NONE)
		t->node[up->last_child].next = i;
	else
		up->child = i;
	up->last_child = i;
	/* Unsigned arithmetic wraps; the difference read back as signed is exact while it fits
	 * in 63 bits. The new node's self figures are still its sums. */
	up->self_wall = (int64_t)((uint64_t)up->self_wall - (uint64_t)nd->self_wall);
	for (uint32_t j = 0; j < up->n_ev; j++) {
		struct tree_event *e = &t->ev[up->ev + j];

		for (uint32_t k = 0; k < nd->n_ev; k++) {
			const struct tree_event *c = &t->ev[nd->ev + k];

			if (c->name != e->name)
				continue;
			e->self = (int64_t)((uint64_t)e->self - (uint64_t)c->self);
			e->self_scaled |= c->scaled;
			break;
		}
	}
}

/* Packs @r into @t->packed, less what @t holds of it (tree_node_stats() puts it back). */
static void
tree_pack(struct tree *t, struct tree_node *nd, const Pmc__RegionStats *r)
{
	Pmc__RegionStats c = *r;
	char *empty = (char *)protobuf_c_empty_string;

	c.pid = 0;
	c.name = empty;
	c.path = 0;
	if (nd->parent != TREE_NONE)
		c.parent = 0;
	if (!nd->own_origin) {
		c.comm = c.cgroup = empty;
		c.ns_pid = 0;
		c.uid = 0;
	}
	if (r->n_events > t->cap_ev_copy) {
		size_t cap = t->cap_ev_copy;

		t->ev_copy = grow(t->ev_copy, &cap, r->n_events, sizeof(*t->ev_copy));
		cap = t->cap_ev_copy;
		t->ev_ptr = grow(t->ev_ptr, &cap, r->n_events, sizeof(*t->ev_ptr));
		t->cap_ev_copy = cap;
	}
	for (size_t j = 0; j < r->n_events; j++) {
		t->ev_copy[j] = *r->events[j];
		t->ev_copy[j].name = empty;
		t->ev_ptr[j] = &t->ev_copy[j];
	}
	c.events = t->ev_ptr;
	size_t len = pmc__region_stats__get_packed_size(&c);
	t->packed = grow(t->packed, &t->cap_packed, t->n_packed + len, 1);
	t->n_packed += pmc__region_stats__pack(&c, t->packed + t->n_packed);
	t->packed_end = grow(t->packed_end, &t->cap_packed_end, t->n + 1, sizeof(*t->packed_end));
	t->packed_end[t->n] = t->n_packed;
}

bool
tree_add(struct tree *t, const Pmc__RegionStats *r)
{
	/* Another process: another pid, or the same pid again (recycled, or exec'd). */
	if (t->n && r->pid != t->pid)
		return false;
	if (id_find(t, r->path))
		return false;
	if (t->n >= TREE_NONE - 1 || t->n_ev_all + r->n_events >= UINT32_MAX)
		pmcctl_fail("a process of more than %" PRIu32 " call path nodes or events",
		            TREE_NONE - 2);
	if (!t->n) {
		t->pid = r->pid;
		t->ns_pid = r->ns_pid;
		t->uid = r->uid;
		if (!(t->comm = strdup(r->comm)) || !(t->cgroup = strdup(r->cgroup)))
			pmcctl_oom();
	}
	t->node = grow(t->node, &t->cap, t->n + 1, sizeof(*t->node));
	t->ev = grow(t->ev, &t->cap_ev, t->n_ev_all + r->n_events, sizeof(*t->ev));

	uint32_t i = (uint32_t)t->n;
	struct tree_node *nd = &t->node[i];

	*nd = (struct tree_node){.id = r->path,
	                         .parent = TREE_NONE,
	                         .child = TREE_NONE,
	                         .last_child = TREE_NONE,
	                         .next = TREE_NONE,
	                         .name = names_add(&t->names, r->name),
	                         .ev = (uint32_t)t->n_ev_all,
	                         .n_ev = (uint32_t)r->n_events,
	                         .counted = r->count > 0,
	                         .self_wall = (int64_t)sum_of(r->wall_ns)};
	nd->own_origin = strcmp(r->comm, t->comm) || strcmp(r->cgroup, t->cgroup) ||
	                 r->ns_pid != t->ns_pid || r->uid != t->uid;
	for (size_t j = 0; j < r->n_events; j++) {
		const Pmc__EventStats *e = r->events[j];
		bool scaled = e->scaled_count > 0;

		t->ev[t->n_ev_all + j] = (struct tree_event){.name = names_add(&t->names, e->name),
		                                             .scaled = scaled,
		                                             .self_scaled = scaled,
		                                             .self = (int64_t)sum_of(e->stats)};
	}
	t->n_ev_all += r->n_events;
	/* Its parent is looked up among the nodes before it only: a node may not be its own
	 * parent, nor a parent listed after it. */
	tree_link(t, i, r->parent);
	id_put(t, r->path, i);
	if (t->keep)
		tree_pack(t, nd, r);
	t->n++;
	return true;
}

void
tree_finish(struct tree *t)
{
	/* Children come after their parents: from the last node up, each tells its parent. */
	for (size_t i = t->n; i-- > 0;) {
		struct tree_node *nd = &t->node[i];

		nd->samples |= nd->counted;
		if (nd->parent != TREE_NONE)
			t->node[nd->parent].samples |= nd->samples;
	}
	/* No node comes any more: what only adding needs goes, and the arrays keep only what
	 * they hold (a reply whose every node repeats an id makes a tree of each, which would
	 * otherwise keep room for 64 nodes: 4 KB for 80 bytes of the reply). */
	t->node = shrink(t->node, &t->cap, t->n, sizeof(*t->node));
	t->ev = shrink(t->ev, &t->cap_ev, t->n_ev_all, sizeof(*t->ev));
	t->names.s = shrink(t->names.s, &t->names.cap, t->names.n, 1);
	t->packed = shrink(t->packed, &t->cap_packed, t->n_packed, 1);
	t->packed_end = shrink(t->packed_end, &t->cap_packed_end, t->packed_end ? t->n : 0,
	                       sizeof(*t->packed_end));
	free(t->names.slot);
	t->names.slot = NULL;
	t->names.n_slot = t->names.cap_slot = 0;
	free(t->id_slot);
	free(t->by_id);
	free(t->ev_copy);
	free(t->ev_ptr);
	t->by_id = NULL;
	t->cap_by_id = t->n_id_slot = 0;
	t->id_slot = NULL;
	t->ev_copy = NULL;
	t->ev_ptr = NULL;
	t->cap_id = t->cap_ev_copy = 0;
	tree_select(t, NULL, 0);
}

size_t
tree_build(struct tree *t, Pmc__RegionStats *const *r, size_t n, bool keep)
{
	size_t i = 0;

	tree_init(t, keep);
	while (i < n && tree_add(t, r[i]))
		i++;
	tree_finish(t);
	return i;
}

size_t
tree_overhead(const struct tree *t)
{
	/* A finished tree's blocks (comm, cgroup, node, ev, names, packed, packed_end: the tables
	 * only adding needs are freed by tree_finish()), each at least malloc's 32-byte chunk,
	 * and what their cutting to size leaves between them: a one-node tree set aside measured
	 * some 1,160 bytes of RSS. */
	return sizeof(*t) + strlen(t->comm ? t->comm : "") + strlen(t->cgroup ? t->cgroup : "") +
	       2 + 7 * 32 + 512;
}

void
tree_free(struct tree *t)
{
	free(t->comm);
	free(t->cgroup);
	free(t->node);
	free(t->ev);
	names_free(&t->names);
	free(t->id_slot);
	free(t->by_id);
	free(t->packed);
	free(t->packed_end);
	free(t->ev_copy);
	free(t->ev_ptr);
	memset(t, 0, sizeof(*t));
}

Pmc__RegionStats *
tree_node_stats(const struct tree *t, const struct tree_node *nd, struct arena *a)
{
	size_t i = (size_t)(nd - t->node), from = i ? t->packed_end[i - 1] : 0;
	ProtobufCAllocator alloc = call_arena_allocator(a);
	Pmc__RegionStats *r =
	        pmc__region_stats__unpack(&alloc, t->packed_end[i] - from, t->packed + from);

	if (!r || r->n_events != nd->n_ev)
		pmcctl_oom(); /* (packed here: only memory can fail) */
	r->pid = t->pid;
	r->name = (char *)tree_name(t, nd);
	r->path = nd->id;
	if (nd->parent != TREE_NONE)
		r->parent = t->node[nd->parent].id;
	if (!nd->own_origin) {
		r->comm = t->comm;
		r->cgroup = t->cgroup;
		r->ns_pid = t->ns_pid;
		r->uid = t->uid;
	}
	for (size_t j = 0; j < r->n_events; j++)
		r->events[j]->name = (char *)tree_event_name(t, nd, j);
	return r;
}

/* ---- walking and selecting ---- */

/* Node @i, or the first selected node after it among its siblings; NULL when none is. */
static const struct tree_node *
selected_from(const struct tree *t, uint32_t i)
{
	while (i != TREE_NONE && !t->node[i].selected)
		i = t->node[i].next;
	return i == TREE_NONE ? NULL : &t->node[i];
}

const struct tree_node *
tree_next(const struct tree *t, const struct tree_node *nd, const struct tree_node *top)
{
	const struct tree_node *c = selected_from(t, nd->child);

	/* Below a selected node, one that is not has no samples, nor has any below it. */
	if (c)
		return c;
	for (; nd != top; nd = tree_parent(t, nd))
		if ((c = selected_from(t, nd->next)))
			return c;
	return NULL;
}

bool
tree_is_top(const struct tree *t, const struct tree_node *nd)
{
	return nd->selected && (nd->parent == TREE_NONE || !t->node[nd->parent].selected);
}

static bool
name_matches(const char *name, const char *const *globs, size_t n_globs)
{
	for (size_t i = 0; i < n_globs; i++)
		if (!fnmatch(globs[i], name, 0))
			return true;
	return false;
}

size_t
tree_select(struct tree *t, const char *const *globs, size_t n_globs)
{
	size_t n = 0;

	/* Parents come first: a node's parent is decided before it. */
	for (size_t i = 0; i < t->n; i++) {
		struct tree_node *nd = &t->node[i];
		const struct tree_node *up = tree_parent(t, nd);

		nd->selected = nd->samples && (!n_globs || (up && up->selected) ||
		                               name_matches(tree_name(t, nd), globs, n_globs));
		n += nd->selected;
	}
	return n;
}

/* ---- paths and events ---- */

/* @name escaped (output_escape_text()), its ';' written "\x3b": ';' joins a path's names.
 * The caller's to free. */
static char *
frame_text(const char *name)
{
	char *safe = output_escape_text(name);
	size_t semis = 0, len = 0;

	for (const char *c = safe; *c; c++, len++)
		semis += *c == ';';
	if (!semis)
		return safe;
	char *out = malloc(len + 3 * semis + 1), *o = out;
	if (!out)
		pmcctl_oom();
	for (const char *c = safe; *c; c++)
		if (*c == ';')
			o = stpcpy(o, "\\x3b");
		else
			*o++ = *c;
	*o = '\0';
	free(safe);
	return out;
}

char *
tree_path(const struct tree *t, const struct tree_node *nd)
{
	struct tree_paths p = {0};
	size_t n = 0;
	const struct tree_node **chain = calloc(nd->depth + 1, sizeof(*chain));

	if (!chain)
		pmcctl_oom();
	for (const struct tree_node *up = nd; up; up = tree_parent(t, up))
		chain[n++] = up;
	/* Its root first: each name after its parent's, a walk from the root's subtree. */
	while (n--)
		tree_paths_at(&p, t, chain[n], chain[nd->depth]);
	free(chain);
	free(p.end);
	return p.s;
}

/* Room in @p for @len more bytes of path at @at, and its NUL. */
static void
paths_room(struct tree_paths *p, size_t at, size_t len)
{
	p->s = grow(p->s, &p->cap, at + len + 1, 1);
}

const char *
tree_paths_at(struct tree_paths *p, const struct tree *t, const struct tree_node *nd,
              const struct tree_node *top)
{
	size_t d = nd->depth - top->depth, at = 0;
	_cleanup_free_ char *frame = frame_text(tree_name(t, nd));
	size_t len = strlen(frame);

	p->end = grow(p->end, &p->cap_end, d + 1, sizeof(*p->end));
	if (nd == top && nd->parent != TREE_NONE) {
		_cleanup_free_ char *whole = tree_path(t, nd);

		len = strlen(whole);
		paths_room(p, 0, len);
		memcpy(p->s, whole, len + 1);
		p->end[0] = len;
		return p->s;
	}
	if (d) {
		at = p->end[d - 1];
		paths_room(p, at, 1 + len);
		p->s[at++] = ';';
	} else {
		paths_room(p, 0, len);
	}
	memcpy(p->s + at, frame, len + 1);
	p->end[d] = at + len;
	return p->s;
}

void
tree_paths_free(struct tree_paths *p)
{
	free(p->s);
	free(p->end);
	memset(p, 0, sizeof(*p));
}

bool
tree_is_wall(const char *event)
{
	return !event || !strcmp(event, "wall") || !strcmp(event, "wall_ns");
}

ssize_t
tree_event_named(const struct tree *t, const struct tree_node *nd, const char *name)
{
	for (size_t j = 0; j < nd->n_ev; j++)
		if (!strcmp(tree_event_name(t, nd, j), name))
			return (ssize_t)j;
	return -1;
}

struct node_of_tree {
	const struct tree *t;
	const struct tree_node *nd;
};

static const char *
node_event_name(const void *ctx, size_t j)
{
	const struct node_of_tree *n = ctx;

	return tree_event_name(n->t, n->nd, j);
}

bool
tree_self_of(const struct tree *t, const struct tree_node *nd, const char *event, int64_t *self)
{
	ssize_t j;

	if (tree_is_wall(event)) {
		*self = nd->self_wall;
		return true;
	}
	j = event_name_pick(event, nd->n_ev, node_event_name, &(struct node_of_tree){t, nd});
	if (j < 0)
		return false;
	*self = t->ev[nd->ev + (size_t)j].self;
	return true;
}

/* ---- folded stacks ---- */

/* The frame @name (in @f->names) under @parent in @f, added if it was not there. */
static uint32_t
folded_frame(struct folded *f, uint32_t parent, uint32_t name)
{
	/* (a hash of both, mixed again by slot_of()) */
	uint32_t h =
	        (uint32_t)(((((uint64_t)parent << 32) | name) * UINT64_C(0xff51afd7ed558ccd)) >>
	                   32);

	f->slot = slots_room(f->slot, &f->cap_slot, f->n);
	size_t s = slot_of(h, f->cap_slot);

	for (; f->slot[s].at; s = (s + 1) & (f->cap_slot - 1)) {
		const struct folded_frame *fr = &f->v[f->slot[s].at - 1];

		if (f->slot[s].key == h && fr->parent == parent && fr->name == name)
			return f->slot[s].at - 1;
	}
	if (f->n >= TREE_NONE - 1)
		pmcctl_fail("more than %" PRIu32 " folded stacks", TREE_NONE - 2);
	f->v = grow(f->v, &f->cap, f->n + 1, sizeof(*f->v));
	f->v[f->n] = (struct folded_frame){.parent = parent, .name = name};
	f->slot[s] = (struct tree_slot){h, (uint32_t)++f->n};
	return f->slot[s].at - 1;
}

/* The frames of @t's nodes in @f, made as they are asked for: @frame[i] (TREE_NONE: not yet)
 * that of node i, the root frame "comm (uid U)" @root. */
struct fold_state {
	const struct tree *t;
	struct folded *f;
	uint32_t root;
	uint32_t *frame;
	uint32_t *chain; /* (the nodes above one, up to one with a frame) */
	size_t cap_chain;
};

static uint32_t
fold_frame_of(struct fold_state *s, uint32_t i)
{
	size_t n = 0;
	uint32_t j = i;

	/* No recursion: a chain of nodes may be as deep as the reply is long. */
	while (j != TREE_NONE && s->frame[j] == TREE_NONE) {
		s->chain = grow(s->chain, &s->cap_chain, n + 1, sizeof(*s->chain));
		s->chain[n++] = j;
		j = s->t->node[j].parent;
	}
	uint32_t up = j == TREE_NONE ? s->root : s->frame[j];
	while (n--) {
		j = s->chain[n];
		_cleanup_free_ char *text = frame_text(tree_name(s->t, &s->t->node[j]));
		up = s->frame[j] = folded_frame(s->f, up, names_add(&s->f->names, text));
	}
	return up;
}

size_t
tree_fold(const struct tree *t, const char *event, struct folded *f)
{
	struct fold_state s = {.t = t, .f = f};
	size_t n = 0;

	for (size_t i = 0; i < t->n; i++) {
		const struct tree_node *nd = &t->node[i];
		int64_t self;

		if (!nd->selected || !tree_self_of(t, nd, event, &self))
			continue;
		n++;
		/* Below zero: the node's children measured more than it did (it is still open,
		 * or samples of it were lost); flame graphs have no negative widths. */
		if (self <= 0)
			continue;
		if (!s.frame) {
			/* The root frame names the program and its user, so that the stacks of
			 * two users' programs of one name are never merged into one. */
			_cleanup_free_ char *comm = frame_text(t->comm);
			_cleanup_free_ char *root = NULL;

			if (asprintf(&root, "%s (uid %" PRIu32 ")", comm, t->uid) < 0 ||
			    !(s.frame = malloc(t->n * sizeof(*s.frame))))
				pmcctl_oom();
			memset(s.frame, 0xff, t->n * sizeof(*s.frame));
			s.root = folded_frame(f, TREE_NONE, names_add(&f->names, root));
		}
		/* (f->v moves as frames are added) */
		uint32_t k = fold_frame_of(&s, (uint32_t)i);
		struct folded_frame *fr = &f->v[k];

		fr->weight += (uint64_t)self;
		fr->line = true;
	}
	free(s.frame);
	free(s.chain);
	return n;
}

/* One place in the order of the lines below a frame: the line of @frame (@end '\0'), or the
 * lines below it (@end ';'). Stacks compare as their texts do: "a" before "a b" before "a;b",
 * and a frame's lines below it may come after another frame's ("a.b" before "a;c"). */
struct fold_token {
	const char *name;
	uint32_t frame;
	char end;
};

static int
token_cmp(const void *a, const void *b)
{
	const struct fold_token *x = a, *y = b;

	/* Names hold no ';' nor NUL: each text ends at its mark. */
	for (size_t i = 0;; i++) {
		unsigned char cx = x->name[i] ? (unsigned char)x->name[i] : (unsigned char)x->end;
		unsigned char cy = y->name[i] ? (unsigned char)y->name[i] : (unsigned char)y->end;

		if (cx != cy)
			return cx < cy ? -1 : 1;
		if (!x->name[i] || !y->name[i])
			return 0;
	}
}

/* A frame whose lines are being written: its tokens, sorted, the next one @i, and the
 * length of the stack text up to it. */
struct fold_level {
	struct fold_token *tok;
	size_t n, i, len;
};

size_t
tree_folded_print(struct folded *f, FILE *out)
{
	free(f->slot);
	free(f->names.slot);
	f->slot = f->names.slot = NULL;
	f->cap_slot = f->names.cap_slot = f->names.n_slot = 0;

	/* Each frame's children, end to end: those of frame k from first[k] to first[k + 1]
	 * (the root frames: k = f->n). */
	size_t *first = calloc(f->n + 2, sizeof(*first));
	uint32_t *kids = malloc((f->n ? f->n : 1) * sizeof(*kids));
	struct fold_level *lv = NULL;
	size_t depth = 0, cap_lv = 0, lines = 0, cap_text = 0;
	char *text = NULL;

	if (!first || !kids)
		pmcctl_oom();
	for (size_t i = 0; i < f->n; i++)
		first[(f->v[i].parent == TREE_NONE ? f->n : f->v[i].parent) + 1]++;
	for (size_t k = 0; k <= f->n; k++)
		first[k + 1] += first[k];
	for (size_t i = 0, *at = NULL; i < f->n; i++) {
		at = &first[f->v[i].parent == TREE_NONE ? f->n : f->v[i].parent];
		kids[(*at)++] = (uint32_t)i;
	}
	/* (each first[k] is now where k's children end: first[k - 1] where they begin) */
	for (size_t k = f->n + 1; k-- > 0;)
		first[k + 1] = first[k];
	first[0] = 0;

	for (size_t k = f->n, len = 0;;) {
		/* The tokens of frame k's children (k = f->n: the root frames). */
		size_t from = first[k], to = first[k + 1], n = 0;
		struct fold_token *tok = malloc(2 * (to - from + 1) * sizeof(*tok));

		if (!tok)
			pmcctl_oom();
		for (size_t c = from; c < to; c++) {
			const struct folded_frame *fr = &f->v[kids[c]];
			const char *name = f->names.s + fr->name;

			if (fr->line)
				tok[n++] = (struct fold_token){name, kids[c], '\0'};
			if (first[kids[c] + 1] > first[kids[c]])
				tok[n++] = (struct fold_token){name, kids[c], ';'};
		}
		qsort(tok, n, sizeof(*tok), token_cmp);
		lv = grow(lv, &cap_lv, depth + 1, sizeof(*lv));
		lv[depth++] = (struct fold_level){tok, n, 0, len};
		/* The next token to go down into, writing the lines met on the way. */
		for (k = TREE_NONE; depth && k == TREE_NONE;) {
			struct fold_level *l = &lv[depth - 1];

			if (l->i == l->n) {
				free(l->tok);
				depth--;
				continue;
			}
			const struct fold_token *t = &l->tok[l->i++];
			size_t name_len = strlen(t->name);

			text = grow(text, &cap_text, l->len + name_len + 2, 1);
			memcpy(text + l->len, t->name, name_len);
			len = l->len + name_len;
			if (t->end) {
				text[len++] = ';';
				k = t->frame;
				continue;
			}
			text[len] = '\0';
			fprintf(out, "%s %" PRIu64 "\n", text, f->v[t->frame].weight);
			lines++;
		}
		if (!depth)
			break;
	}
	free(lv);
	free(text);
	free(first);
	free(kids);
	return lines;
}

void
tree_folded_free(struct folded *f)
{
	free(f->v);
	free(f->slot);
	names_free(&f->names);
	memset(f, 0, sizeof(*f));
}
