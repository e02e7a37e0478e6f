/* tree.c: the call path nodes of one process, from a Query.tree reply, folded into a tree as
 * they arrive (each part of the reply may be freed once its nodes are in); self figures, the
 * subtrees --region selects, folded stacks. Plain data, no wire, no printing. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "pmc.pb-c.h"
#include "pmcctl/call.h"

/* No node (an index of struct tree's arrays). */
#define TREE_NONE UINT32_MAX

/* A slot of a hash table (open addressing, a power of two of them, at most 3/4 used): an
 * index + 1 (0: a free slot) and the key it was found by (a hash, or a node id). */
struct tree_slot {
	uint32_t key, at;
};

/* Names, each kept once, NUL-terminated, end to end: a name is its offset in @s. */
struct tree_names {
	char *s;
	size_t n, cap;
	struct tree_slot *slot; /* the offsets, by their text's hash */
	size_t n_slot, cap_slot;
};

/* An event a node counted: its self figure, matched to the children's by name. */
struct tree_event {
	uint32_t name;    /* in tree.names */
	bool scaled;      /* its figures were extrapolated (EventStats.scaled_count > 0) */
	bool self_scaled; /* its own or a child's of that name were: its self figure is too */
	int64_t self;     /* its sum less its children's of that name (< 0 possible) */
};

/* A call path node: one RegionStats of the reply (inclusive figures), linked by index to
 * its parent and children in tree.node. */
struct tree_node {
	uint32_t id;                /* RegionStats.path */
	uint32_t parent;            /* TREE_NONE: a root */
	uint32_t child, last_child; /* its children, in the reply's order (TREE_NONE: none) */
	uint32_t next;              /* its next sibling (TREE_NONE: none) */
	uint32_t depth;             /* 0: a root */
	uint32_t name;              /* in tree.names */
	uint32_t ev, n_ev;          /* its events: tree.ev[ev] to tree.ev[ev + n_ev - 1] */
	bool orphan : 1;            /* it named a parent that no earlier node is: made a root */
	bool counted : 1;           /* RegionStats.count > 0 */
	bool samples : 1;    /* it or a node below it has samples (count > 0): not just reset */
	bool selected : 1;   /* in a subtree tree_select() chose */
	bool own_origin : 1; /* its comm, cgroup, ns_pid or uid are not the tree's (kept whole) */
	int64_t self_wall;   /* its wall time sum less its children's (< 0 possible) */
};

/* The nodes of one process. */
struct tree {
	int32_t pid;
	char *comm;   /* the first node's (a copy) */
	char *cgroup; /* the first node's (a copy) */
	int32_t ns_pid;
	uint32_t uid;
	struct tree_node *node; /* n, in the reply's order: each parent before its children */
	size_t n, cap;
	struct tree_event *ev; /* the events of the nodes, node by node */
	size_t n_ev_all, cap_ev;
	struct tree_names names; /* the names of the nodes and of their events */
	size_t n_orphans;        /* nodes whose parent was not listed before them */
	/* Node indexes + 1 by id (0: none): directly for ids below about twice the nodes (a
	 * daemon numbers them 1, 2, ...), the others in a hash table. */
	uint32_t *by_id;
	size_t cap_by_id;
	struct tree_slot *id_slot;
	size_t cap_id, n_id_slot;
	/* keep: each node's RegionStats packed, end to end, less what the tree holds (its
	 * name, its events' names, its pid, path and parent, its process's figures). */
	bool keep;
	uint8_t *packed;
	size_t n_packed, cap_packed;
	size_t *packed_end; /* where each node's ends in packed */
	size_t cap_packed_end;
	Pmc__EventStats *ev_copy; /* (room to pack a node's events without their names) */
	Pmc__EventStats **ev_ptr;
	size_t cap_ev_copy;
};

/**
 * tree_init() - an empty tree, for tree_add(); @keep: keep each node's whole RegionStats
 * (tree_node_stats()), packed; without it only what self figures, selections and folded
 * stacks need is kept
 */
void tree_init(struct tree *t, bool keep);

/**
 * tree_add() - fold @r (with its path id and its parent's, RegionStats.path and .parent)
 * into @t, the next node of the reply, unless it is another process's: one of another pid,
 * or one whose id is already in @t (a second process with the pid). @r is not borrowed: it
 * may be freed once this returns.
 *
 * Self figures: a node's sum (wall time, each event) less the sums of its children (their
 * events matched by name; a child without the event counts 0). Below zero where the node is
 * still open (its children ended, it did not) or samples of it were lost.
 * A node whose parent id is not that of a node before it (unknown, or listed later) is made
 * a root and counted in @t->n_orphans: the reply lists parents first.
 * Return: false, @t untouched, when @r is another process's (@t has nodes); exits on
 * allocation failure, and when @t would pass 2^32 - 2 nodes or 4 GiB of names.
 */
bool tree_add(struct tree *t, const Pmc__RegionStats *r);

/**
 * tree_finish() - after @t's last node: mark the nodes with samples in them or below them,
 * and select every one with samples (tree_select() with no glob)
 */
void tree_finish(struct tree *t);

/**
 * tree_build() - tree_init(@t, @keep), tree_add() of the first nodes of @r (@n >= 1) up to
 * the first that is another process's, tree_finish(): node i is @r[i]
 * Return: the nodes of @r taken into @t (at least 1); exits on allocation failure.
 */
size_t tree_build(struct tree *t, Pmc__RegionStats *const *r, size_t n, bool keep);

/**
 * tree_overhead() - about the bytes a finished tree (tree_finish()) holds whatever its nodes:
 * its structure, its process's comm and cgroup, its blocks' malloc chunks and what cutting them
 * to size leaves; what grows with its nodes (about 1.6 times their bytes in the reply) is not
 * in it
 */
size_t tree_overhead(const struct tree *t);
/** tree_free() - free what @t holds; it is then empty (tree_init() it to use it again) */
void tree_free(struct tree *t);

/** tree_name() - @nd's region name (RegionStats.name), borrowed from @t */
static inline const char *
tree_name(const struct tree *t, const struct tree_node *nd)
{
	return t->names.s + nd->name;
}

/** tree_event_name() - the name of @nd's @j-th event, borrowed from @t */
static inline const char *
tree_event_name(const struct tree *t, const struct tree_node *nd, size_t j)
{
	return t->names.s + t->ev[nd->ev + j].name;
}

/** tree_parent() - @nd's parent in @t, NULL for a root */
static inline const struct tree_node *
tree_parent(const struct tree *t, const struct tree_node *nd)
{
	return nd->parent == TREE_NONE ? NULL : &t->node[nd->parent];
}

/**
 * tree_node_stats() - @nd's RegionStats as the reply had it (@t kept them: tree_init()),
 * unpacked into @a (the caller resets or frees it)
 * Return: the message, borrowing names from @t; exits on allocation failure.
 */
Pmc__RegionStats *tree_node_stats(const struct tree *t, const struct tree_node *nd,
                                  struct arena *a);

/**
 * tree_select() - mark the nodes of @t in subtrees rooted at a node whose name matches one of
 * the @n_globs shell globs @globs (fnmatch(3), no flags; --region); none: every node. A node
 * with no samples in it nor below it (just reset) is never selected; one still open (no
 * samples yet, its children some) is.
 * Return: the nodes selected.
 */
size_t tree_select(struct tree *t, const char *const *globs, size_t n_globs);

/** tree_is_top() - whether @nd is selected and its parent (if any) is not: the top of a
 * subtree shown */
bool tree_is_top(const struct tree *t, const struct tree_node *nd);

/** tree_next() - the selected node after @nd (selected) in a depth-first walk (parents
 * first, children in the reply's order) of the subtree of @top (selected); NULL after its
 * last */
const struct tree_node *tree_next(const struct tree *t, const struct tree_node *nd,
                                  const struct tree_node *top);

/**
 * tree_path() - "outer;inner": the names of @nd's ancestors, then its own, joined by ';',
 * each escaped (output_escape_text()) and its own ';' written "\x3b"
 * Return: the text, the caller's to free; exits on allocation failure.
 */
char *tree_path(const struct tree *t, const struct tree_node *nd);

/* The paths of a depth-first walk (tree_next()), each made from its parent's: */
struct tree_paths {
	char *s; /* the path of the node at hand, NUL-terminated */
	size_t cap;
	size_t *end; /* the length of the path of its ancestor at each depth below the top */
	size_t cap_end;
};

/**
 * tree_paths_at() - @nd's path (tree_path()) in @p->s, @nd in the walk of @top's subtree
 * (tree_next()) after its parent, unless it is @top
 * Return: @p->s, valid until the next call; exits on allocation failure.
 */
const char *tree_paths_at(struct tree_paths *p, const struct tree *t, const struct tree_node *nd,
                          const struct tree_node *top);

/** tree_paths_free() - free what @p holds */
void tree_paths_free(struct tree_paths *p);

/** tree_is_wall() - whether --event @event (NULL: none given) names the wall time: "wall",
 * as the tables name it, or "wall_ns", as JSON and CSV do */
bool tree_is_wall(const char *event);

/** tree_event_named() - the index among @nd's events of the event named @name exactly, -1
 * when @nd has none */
ssize_t tree_event_named(const struct tree *t, const struct tree_node *nd, const char *name);

/** tree_self_of() - set *@self to @nd's self figure of --event @event (tree_is_wall(): the wall
 * time; event_name_index() says which event it names)
 * Return: false, *@self untouched, when @nd did not count @event. */
bool tree_self_of(const struct tree *t, const struct tree_node *nd, const char *event,
                  int64_t *self);

/* Folded stacks ("comm (uid U);outer;inner WEIGHT"): the frames of every stack folded in,
 * each once, under the one before it (the first frame "comm (uid U)" a root): two equal
 * stacks are one. */
struct folded_frame {
	uint32_t parent; /* TREE_NONE: a root frame */
	uint32_t name;   /* in folded.names: escaped as tree_path()'s */
	bool line;       /* the stack that ends here has a line */
	uint64_t weight; /* its line's weight */
};

struct folded {
	struct folded_frame *v;
	size_t n, cap;
	struct tree_names names;
	struct tree_slot *slot; /* frames by the hash of (parent, name) */
	size_t cap_slot;
};

/**
 * tree_fold() - add to @f a line for each selected node of @t whose self figure of @event
 * (tree_self_of()) is above zero, weighted by it: so a subtree's lines add up to its top's
 * inclusive sum, where no self figure is negative (those are left out); the weights of equal
 * stacks (processes of one comm and uid) are added up into one line
 * Return: the selected nodes that counted @event (0: the event is not known there); exits on
 * allocation failure.
 */
size_t tree_fold(const struct tree *t, const char *event, struct folded *f);

/**
 * tree_folded_print() - write the lines of @f to @out sorted by stack (strcmp(3)), each
 * "STACK WEIGHT\n"; what only tree_fold() needs is freed first: nothing may be folded into
 * @f after it
 * Return: the lines written; exits on allocation failure.
 */
size_t tree_folded_print(struct folded *f, FILE *out);

/** tree_folded_free() - free what @f holds and empty it */
void tree_folded_free(struct folded *f);
