/* pmcctl's call path trees: the nodes of one process, as a Query.tree reply lists them (each
 * RegionStats with its id and its parent's), linked into a tree; each node's self figures
 * (its inclusive sums less its children's); the subtrees --region selects; and the folded
 * stacks of flamegraph. Plain data in, plain data out: no wire and no printing, so that
 * test-tree.c can feed it nodes made by hand. */

#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- building ---- */

/* Ids to node indexes: open addressing, @cap a power of two above twice the nodes. */
struct id_map {
	size_t *slot; /* index + 1; 0: free */
	size_t cap;
	const struct tree_node *node;
};

static size_t *
id_map_slot(const struct id_map *m, uint32_t id)
{
	size_t i = (id * UINT32_C(0x9e3779b1)) & (m->cap - 1);

	while (m->slot[i] && m->node[m->slot[i] - 1].r->path != id)
		i = (i + 1) & (m->cap - 1);
	return &m->slot[i];
}

/* The node of id @id among those added, or NULL. */
static struct tree_node *
id_map_find(const struct id_map *m, uint32_t id)
{
	size_t s = *id_map_slot(m, id);

	return s ? (struct tree_node *)&m->node[s - 1] : NULL;
}

/* Links @nd under the node its parent id names, if an earlier node has that id; else it is
 * a root, an orphan when it named a parent. */
static void
tree_link(struct tree *t, const struct id_map *m, struct tree_node *nd)
{
	struct tree_node *up = nd->r->parent ? id_map_find(m, nd->r->parent) : NULL;

	if (!up) {
		nd->orphan = nd->r->parent != 0;
		t->n_orphans += nd->orphan;
		return;
	}
	nd->parent = up;
	nd->depth = up->depth + 1;
	if (up->last_child)
		up->last_child->next = nd;
	else
		up->child = nd;
	up->last_child = nd;
}

ssize_t
tree_event_named(const Pmc__RegionStats *r, const char *name)
{
	for (size_t j = 0; j < r->n_events; j++)
		if (!strcmp(r->events[j]->name, name))
			return (ssize_t)j;
	return -1;
}

/* Self figures: each node's sums, less those of its children (their events matched by
 * name). Unsigned arithmetic wraps; the difference read back as signed is exact while it
 * fits in 63 bits. */
static void
tree_self(struct tree *t)
{
	for (size_t i = 0; i < t->n; i++) {
		struct tree_node *nd = &t->node[i];

		nd->self_wall = (int64_t)sum_of(nd->r->wall_ns);
		for (size_t j = 0; j < nd->r->n_events; j++)
			nd->self[j] = (int64_t)sum_of(nd->r->events[j]->stats);
	}
	for (size_t i = 0; i < t->n; i++) {
		const struct tree_node *nd = &t->node[i];
		struct tree_node *up = nd->parent;

		if (!up)
			continue;
		up->self_wall = (int64_t)((uint64_t)up->self_wall - sum_of(nd->r->wall_ns));
		for (size_t j = 0; j < up->r->n_events; j++) {
			ssize_t k = tree_event_named(nd->r, up->r->events[j]->name);

			if (k >= 0)
				up->self[j] = (int64_t)((uint64_t)up->self[j] -
				                        sum_of(nd->r->events[k]->stats));
		}
	}
}

/* Gives each node of @t its self figures' room, in one block for @n_ev events in all. */
static void
tree_self_alloc(struct tree *t, size_t n_ev)
{
	t->self_block = calloc(n_ev + 1, sizeof(*t->self_block));
	if (!t->self_block)
		pmcctl_oom();
	n_ev = 0;
	for (size_t i = 0; i < t->n; i++) {
		t->node[i].self = t->self_block + n_ev;
		n_ev += t->node[i].r->n_events;
	}
}

/* Marks the nodes with samples, in them or below them. */
static void
tree_samples(struct tree *t)
{
	/* Children come after their parents: from the last node up, each tells its parent. */
	for (size_t i = t->n; i-- > 0;) {
		struct tree_node *nd = &t->node[i];

		nd->samples |= nd->r->count > 0;
		if (nd->parent)
			nd->parent->samples |= nd->samples;
	}
}

size_t
tree_build(struct tree *t, Pmc__RegionStats *const *r, size_t n)
{
	struct id_map m = {.cap = 4};
	size_t n_ev = 0, i;

	memset(t, 0, sizeof(*t));
	while (m.cap < 2 * n)
		m.cap *= 2;
	t->node = calloc(n, sizeof(*t->node));
	m.slot = calloc(m.cap, sizeof(*m.slot));
	if (!t->node || !m.slot)
		pmcctl_oom();
	m.node = t->node;
	t->pid = r[0]->pid;
	t->comm = r[0]->comm;
	t->cgroup = r[0]->cgroup;
	t->ns_pid = r[0]->ns_pid;
	t->uid = r[0]->uid;
	for (i = 0; i < n; i++) {
		size_t *slot = id_map_slot(&m, r[i]->path);

		/* Another process: another pid, or the same pid again (recycled, or exec'd). */
		if (r[i]->pid != t->pid || *slot)
			break;
		t->node[i].r = r[i];
		/* Its parent is looked up among the nodes before it only: a node may not be its
		 * own parent, nor a parent listed after it. */
		tree_link(t, &m, &t->node[i]);
		*slot = i + 1;
		n_ev += r[i]->n_events;
	}
	free(m.slot);
	t->n = i;
	tree_self_alloc(t, n_ev);
	tree_self(t);
	tree_samples(t);
	tree_select(t, NULL, 0);
	return t->n;
}

void
tree_free(struct tree *t)
{
	free(t->node);
	free(t->self_block);
	memset(t, 0, sizeof(*t));
}

/* ---- walking and selecting ---- */

/* @nd, or the first selected node after it among its siblings; NULL when none is. */
static const struct tree_node *
selected_from(const struct tree_node *nd)
{
	while (nd && !nd->selected)
		nd = nd->next;
	return nd;
}

const struct tree_node *
tree_next(const struct tree_node *nd, const struct tree_node *top)
{
	const struct tree_node *c = selected_from(nd->child);

	/* Below a selected node, one that is not has no samples, nor has any below it. */
	if (c)
		return c;
	for (; nd != top; nd = nd->parent)
		if ((c = selected_from(nd->next)))
			return c;
	return NULL;
}

bool
tree_is_top(const struct tree_node *nd)
{
	return nd->selected && (!nd->parent || !nd->parent->selected);
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

		nd->selected = nd->samples && (!n_globs || (nd->parent && nd->parent->selected) ||
		                               name_matches(nd->r->name, globs, n_globs));
		n += nd->selected;
	}
	return n;
}

/* ---- paths and events ---- */

/* Writes @name to @f, escaped (output_escape_text()), its ';' as "\x3b": ';' joins a path's names.
 */
static void
name_write(FILE *f, const char *name)
{
	_cleanup_free_ char *safe = output_escape_text(name);

	for (const char *c = safe; *c; c++)
		if (*c == ';')
			fputs("\\x3b", f);
		else
			fputc(*c, f);
}

/* Writes @nd's path to @f: its ancestors' names, then its own, joined by ';'. */
static void
path_write(FILE *f, const struct tree_node *nd)
{
	if (nd->parent) {
		path_write(f, nd->parent);
		fputc(';', f);
	}
	name_write(f, nd->r->name);
}

/* @nd's path, after a root frame "comm (uid U);" naming @t's program and user when @t is not
 * NULL; the caller's to free. The user is in the root frame, so that the stacks of two
 * users' programs of one name are never merged into one. */
static char *
path_text(const struct tree *t, const struct tree_node *nd)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		pmcctl_oom();
	if (t) {
		name_write(f, t->comm);
		fprintf(f, " (uid %" PRIu32 ");", t->uid);
	}
	path_write(f, nd);
	if (fclose(f))
		pmcctl_oom();
	return text;
}

char *
tree_path(const struct tree_node *nd)
{
	return path_text(NULL, nd);
}

bool
tree_is_wall(const char *event)
{
	return !event || !strcmp(event, "wall") || !strcmp(event, "wall_ns");
}

bool
tree_self_of(const struct tree_node *nd, const char *event, int64_t *self)
{
	ssize_t j;

	if (tree_is_wall(event)) {
		*self = nd->self_wall;
		return true;
	}
	j = event_name_index(nd->r, event);
	if (j < 0)
		return false;
	*self = nd->self[j];
	return true;
}

/* ---- folded stacks ---- */

static void
folded_add(struct folded *f, char *stack, uint64_t weight)
{
	if (f->n == f->cap) {
		size_t cap = f->cap ? 2 * f->cap : 64;
		struct folded_line *v = reallocarray(f->v, cap, sizeof(*v));

		if (!v)
			pmcctl_oom();
		f->v = v;
		f->cap = cap;
	}
	f->v[f->n++] = (struct folded_line){stack, weight};
}

size_t
tree_fold(const struct tree *t, const char *event, struct folded *f)
{
	size_t n = 0;

	for (size_t i = 0; i < t->n; i++) {
		const struct tree_node *nd = &t->node[i];
		int64_t self;

		if (!nd->selected || !tree_self_of(nd, event, &self))
			continue;
		n++;
		/* Below zero: the node's children measured more than it did (it is still open,
		 * or samples of it were lost); flame graphs have no negative widths. */
		if (self > 0)
			folded_add(f, path_text(t, nd), (uint64_t)self);
	}
	return n;
}

static int
folded_cmp(const void *a, const void *b)
{
	const struct folded_line *x = a, *y = b;

	return strcmp(x->stack, y->stack);
}

void
tree_folded_merge(struct folded *f)
{
	size_t k = 0;

	if (!f->n)
		return;
	qsort(f->v, f->n, sizeof(*f->v), folded_cmp);
	for (size_t i = 0; i < f->n; i++) {
		if (k && !strcmp(f->v[k - 1].stack, f->v[i].stack)) {
			f->v[k - 1].weight += f->v[i].weight;
			free(f->v[i].stack);
		} else {
			f->v[k++] = f->v[i];
		}
	}
	f->n = k;
}

void
tree_folded_free(struct folded *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->v[i].stack);
	free(f->v);
	memset(f, 0, sizeof(*f));
}
