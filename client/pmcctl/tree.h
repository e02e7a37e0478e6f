/* tree.c: the call path nodes of one process, from a Query.tree reply, linked into a tree;
 * self figures, the subtrees --region selects, folded stacks. Plain data, no wire, no printing. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pmc.pb-c.h"

/* A call path node: one RegionStats of the reply (inclusive figures), linked to its parent
 * and children. */
struct tree_node {
	const Pmc__RegionStats *r;            /* borrowed from the reply */
	struct tree_node *parent;             /* NULL: a root */
	struct tree_node *child, *last_child; /* its children, in the reply's order */
	struct tree_node *next;               /* its next sibling */
	unsigned depth;                       /* 0: a root */
	bool orphan;       /* it named a parent that no earlier node is: made a root */
	bool samples;      /* it or a node below it has samples (count > 0): not just reset */
	bool selected;     /* in a subtree tree_select() chose */
	int64_t self_wall; /* its wall time sum less its children's (< 0 possible) */
	int64_t *self;     /* r->n_events: each event's sum less its children's of that name */
};

/* The nodes of one process. */
struct tree {
	int32_t pid;
	const char *comm;   /* borrowed from the first node */
	const char *cgroup; /* borrowed from the first node */
	int32_t ns_pid;
	uint32_t uid;
	struct tree_node *node; /* n, in the reply's order: each parent before its children */
	size_t n;
	size_t n_orphans;    /* nodes whose parent was not listed before them */
	int64_t *self_block; /* (the self figures of every node) */
};

/**
 * tree_build() - build @t from the first nodes of @r (@n >= 1, each with its path id and its
 * parent's, RegionStats.path and .parent): those of one process, up to the first node of
 * another pid or one whose id is already in @t (a second process with the pid)
 * @t: set whole; its nodes borrow @r's RegionStats, which must outlive it (tree_free())
 *
 * Self figures: a node's sum (wall time, each event) less the sums of its children (their
 * events matched by name; a child without the event counts 0). Below zero where the node is
 * still open (its children ended, it did not) or samples of it were lost.
 * A node whose parent id is not that of a node before it (unknown, or listed later) is made
 * a root and counted in @t->n_orphans: the reply lists parents first. Every node with
 * samples in it or below it is selected (tree_select() with no glob).
 * Return: the nodes of @r taken into @t (at least 1); exits on allocation failure.
 */
size_t tree_build(struct tree *t, Pmc__RegionStats *const *r, size_t n);

/** tree_free() - free what tree_build() allocated for @t (not the RegionStats) */
void tree_free(struct tree *t);

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
bool tree_is_top(const struct tree_node *nd);

/** tree_next() - the selected node after @nd (selected) in a depth-first walk (parents
 * first, children in the reply's order) of the subtree of @top (selected); NULL after its
 * last */
const struct tree_node *tree_next(const struct tree_node *nd, const struct tree_node *top);

/**
 * tree_path() - "outer;inner": the names of @nd's ancestors, then its own, joined by ';',
 * each escaped (output_escape_text()) and its own ';' written "\x3b"
 * Return: the text, the caller's to free; exits on allocation failure.
 */
char *tree_path(const struct tree_node *nd);

/** tree_is_wall() - whether --event @event (NULL: none given) names the wall time: "wall",
 * as the tables name it, or "wall_ns", as JSON and CSV do */
bool tree_is_wall(const char *event);

/** tree_event_named() - the index in @r->events of the event named @name exactly, -1 when
 * @r has none */
ssize_t tree_event_named(const Pmc__RegionStats *r, const char *name);

/** tree_self_of() - set *@self to @nd's self figure of --event @event (tree_is_wall(): the wall
 * time)
 * Return: false, *@self untouched, when @nd did not count @event. */
bool tree_self_of(const struct tree_node *nd, const char *event, int64_t *self);

/* Folded stacks ("comm (uid U);outer;inner WEIGHT"), one line per node. */
struct folded_line {
	char *stack; /* "comm (uid U);outer;inner", escaped as tree_path() */
	uint64_t weight;
};

struct folded {
	struct folded_line *v;
	size_t n, cap;
};

/**
 * tree_fold() - add to @f a line for each selected node of @t whose self figure of @event
 * (tree_self_of()) is above zero, weighted by it: so a subtree's lines add up to its top's
 * inclusive sum, where no self figure is negative (those are left out)
 * Return: the selected nodes that counted @event (0: the event is not known there); exits on
 * allocation failure.
 */
size_t tree_fold(const struct tree *t, const char *event, struct folded *f);

/** tree_folded_merge() - sort the lines of @f by stack and add up the weights of equal stacks
 * (processes of one comm) into one line */
void tree_folded_merge(struct folded *f);

/** tree_folded_free() - free the lines of @f and empty it */
void tree_folded_free(struct folded *f);
