/* Unit tests for pmcctl's call path trees (client/pmcctl/tree.c) on Query.tree replies made
 * by hand: linking, self figures (a negative one too), folded stacks that add up to their
 * roots' inclusive sums, --region's subtrees, and nodes whose parent is unknown or listed
 * after them (made roots). Prints "ok N - name" per test; exits 1 at the first failed
 * check. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pmc-test.h"
#include "pmcctl/event-name.h"
#include "pmcctl/tree.h"

#define RUN(fn) PMC_TEST_RUN(fn)

/* Hand-made nodes: each with its stats and one event, "page-faults:u". */
#define MAX_NODES 16

struct fake {
	Pmc__RegionStats r[MAX_NODES];
	Pmc__RegionStats *rp[MAX_NODES];
	Pmc__Stats wall[MAX_NODES], pf[MAX_NODES];
	Pmc__EventStats ev[MAX_NODES];
	Pmc__EventStats *evp[MAX_NODES];
	size_t n;
};

/* Adds node @id of process @pid under @parent (0: a root): @wall ns and @pf page faults. */
static void
add(struct fake *f, int32_t pid, uint32_t id, uint32_t parent, const char *name, uint64_t wall,
    uint64_t pf)
{
	size_t i = f->n++;

	CHECK(i < MAX_NODES);
	pmc__region_stats__init(&f->r[i]);
	pmc__stats__init(&f->wall[i]);
	pmc__stats__init(&f->pf[i]);
	pmc__event_stats__init(&f->ev[i]);
	f->r[i].pid = pid;
	f->r[i].comm = (char *)"app";
	f->r[i].uid = 1000;
	f->r[i].name = (char *)name;
	f->r[i].count = 1;
	f->r[i].path = id;
	f->r[i].parent = parent;
	f->wall[i].sum = wall;
	f->r[i].wall_ns = &f->wall[i];
	f->pf[i].sum = pf;
	f->ev[i].name = (char *)"page-faults:u";
	f->ev[i].stats = &f->pf[i];
	f->evp[i] = &f->ev[i];
	f->r[i].events = &f->evp[i];
	f->r[i].n_events = 1;
	f->rp[i] = &f->r[i];
}

/*
 * Two roots, a recursion (a;b;b) and a node still open (b, id 2: its child measured more
 * page faults than it did):
 *   1 a      wall 1000  pf 100
 *   2 a;b    wall  600  pf  70   (child pf 80: self -10)
 *   3 a;b;b  wall  200  pf  80
 *   4 a;c    wall  300  pf  20
 *   5 d      wall  500  pf   5
 *   6 d;e    wall  200  pf   3
 */
static void
make_sample(struct fake *f)
{
	memset(f, 0, sizeof(*f));
	add(f, 100, 1, 0, "a", 1000, 100);
	add(f, 100, 2, 1, "b", 600, 70);
	add(f, 100, 3, 2, "b", 200, 80);
	add(f, 100, 4, 1, "c", 300, 20);
	add(f, 100, 5, 0, "d", 500, 5);
	add(f, 100, 6, 5, "e", 200, 3);
}

static const struct tree_node *
node_of(const struct tree *t, uint32_t id)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->node[i].id == id)
			return &t->node[i];
	return NULL;
}

/* The self figure of the @j-th event of node @id. */
static int64_t
self_ev(const struct tree *t, uint32_t id, size_t j)
{
	return t->ev[node_of(t, id)->ev + j].self;
}

static void
test_links(void)
{
	struct fake f;
	struct tree t;

	make_sample(&f);
	CHECK(tree_build(&t, f.rp, f.n, true) == 6);
	CHECK(t.pid == 100 && !strcmp(t.comm, "app") && t.uid == 1000 && t.n_orphans == 0);
	CHECK(!tree_parent(&t, node_of(&t, 1)) && !tree_parent(&t, node_of(&t, 5)));
	CHECK(tree_parent(&t, node_of(&t, 3)) == node_of(&t, 2) && node_of(&t, 3)->depth == 2);
	CHECK(&t.node[node_of(&t, 1)->child] == node_of(&t, 2) &&
	      &t.node[node_of(&t, 2)->next] == node_of(&t, 4));
	/* Depth first, children in the reply's order, within the subtree only. */
	const struct tree_node *top = node_of(&t, 1), *nd = top;
	uint32_t order[6];
	size_t n = 0;
	for (; nd && n < 6; nd = tree_next(&t, nd, top))
		order[n++] = nd->id;
	CHECK(n == 4 && order[0] == 1 && order[1] == 2 && order[2] == 3 && order[3] == 4);
	_cleanup_free_ char *path = tree_path(&t, node_of(&t, 3));
	CHECK(!strcmp(path, "a;b;b"));
	tree_free(&t);
}

static void
test_self(void)
{
	struct fake f;
	struct tree t;
	int64_t v = 0;

	make_sample(&f);
	tree_build(&t, f.rp, f.n, true);
	CHECK(node_of(&t, 1)->self_wall == 100 && self_ev(&t, 1, 0) == 10);
	CHECK(node_of(&t, 2)->self_wall == 400 && self_ev(&t, 2, 0) == -10);
	CHECK(node_of(&t, 3)->self_wall == 200 && self_ev(&t, 3, 0) == 80);
	CHECK(node_of(&t, 5)->self_wall == 300 && self_ev(&t, 5, 0) == 2);
	/* --event: "wall", none, the full name or the name without its mode. */
	CHECK(tree_self_of(&t, node_of(&t, 2), NULL, &v) && v == 400);
	CHECK(tree_self_of(&t, node_of(&t, 2), "wall", &v) && v == 400);
	CHECK(tree_self_of(&t, node_of(&t, 2), "page-faults", &v) && v == -10);
	CHECK(tree_self_of(&t, node_of(&t, 2), "page-faults:u", &v) && v == -10);
	v = 7;
	CHECK(!tree_self_of(&t, node_of(&t, 2), "page-fault", &v) && v == 7);
	CHECK(!tree_self_of(&t, node_of(&t, 2), "cycles", &v) && v == 7);
	tree_free(&t);
}

/* --event against the names counted: the exact name first, a name without a mode for any
 * mode, a mode for the counted name of the same modes (pmcdaemon leaves the default unsaid:
 * user mode for hardware events, both for software events). */
static void
test_event_names(void)
{
	static const char *const names[] = {"cycles", "page-faults", "instructions:k",
	                                    "task-clock:u", "task-clock"};
	Pmc__EventStats ev[ARRAY_SIZE(names)], *evp[ARRAY_SIZE(names)];
	Pmc__RegionStats r = PMC__REGION_STATS__INIT;

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		pmc__event_stats__init(&ev[i]);
		ev[i].name = (char *)names[i];
		evp[i] = &ev[i];
	}
	r.events = evp;
	r.n_events = ARRAY_SIZE(names);
	CHECK(event_name_index(&r, "cycles") == 0);
	CHECK(event_name_index(&r, "cycles:u") == 0);
	CHECK(event_name_index(&r, "cycles:k") == -1);
	CHECK(event_name_index(&r, "page-faults") == 1);
	CHECK(event_name_index(&r, "page-faults:uk") == 1);
	CHECK(event_name_index(&r, "page-faults:ku") == 1);
	CHECK(event_name_index(&r, "page-faults:u") == -1); /* counted in kernel mode too */
	CHECK(event_name_index(&r, "instructions") == 2);
	CHECK(event_name_index(&r, "instructions:k") == 2);
	CHECK(event_name_index(&r, "instructions:u") == -1);
	CHECK(event_name_index(&r, "task-clock") == 4); /* exact before any mode */
	CHECK(event_name_index(&r, "task-clock:u") == 3);
	CHECK(event_name_index(&r, "task-clock:uk") == 4);
	CHECK(event_name_index(&r, "task") == -1);
	CHECK(event_name_index(&r, "page-faults:x") == -1);
}

/* Children's events are matched by name, whatever their order; one a child lacks counts 0. */
static void
test_self_by_name(void)
{
	struct fake f;
	struct tree t;
	Pmc__Stats cyc[2];
	Pmc__EventStats ev[2];
	Pmc__EventStats *parent_ev[2], *child_ev[2];

	memset(&f, 0, sizeof(f));
	add(&f, 7, 1, 0, "p", 100, 50);
	add(&f, 7, 2, 1, "q", 40, 20);
	add(&f, 7, 3, 1, "r", 10, 5);
	for (int i = 0; i < 2; i++) {
		pmc__stats__init(&cyc[i]);
		pmc__event_stats__init(&ev[i]);
		ev[i].name = (char *)"cycles";
		ev[i].stats = &cyc[i];
	}
	cyc[0].sum = 1000;
	cyc[1].sum = 600;
	parent_ev[0] = &f.ev[0];
	parent_ev[1] = &ev[0];
	f.r[0].events = parent_ev;
	f.r[0].n_events = 2;
	child_ev[0] = &ev[1]; /* cycles first, then page faults */
	child_ev[1] = &f.ev[1];
	f.r[1].events = child_ev;
	f.r[1].n_events = 2;
	tree_build(&t, f.rp, f.n, true);
	CHECK(self_ev(&t, 1, 0) == 50 - 20 - 5);
	CHECK(self_ev(&t, 1, 1) == 1000 - 600); /* r counted no cycles */
	CHECK(node_of(&t, 1)->self_wall == 50);
	tree_free(&t);
}

/* The lines tree_folded_print() wrote, "STACK WEIGHT" each. */
struct lines {
	char *text;
	size_t len, n;
	char *stack[32];
	uint64_t weight[32];
};

/* Prints @f into @l (after it nothing may be folded into @f). */
static void
lines_of(struct folded *f, struct lines *l)
{
	FILE *out;

	memset(l, 0, sizeof(*l));
	CHECK((out = open_memstream(&l->text, &l->len)) != NULL);
	size_t n = tree_folded_print(f, out);
	CHECK(!fclose(out));
	for (char *line = l->text, *end; *line; line = end + 1) {
		CHECK(l->n < 32 && (end = strchr(line, '\n')) != NULL);
		*end = '\0';
		char *sp = strrchr(line, ' ');
		CHECK(sp != NULL);
		*sp = '\0';
		l->stack[l->n] = line;
		l->weight[l->n++] = strtoull(sp + 1, NULL, 10);
	}
	CHECK(n == l->n);
	/* Sorted as strcmp(3) sorts, each stack once. */
	for (size_t i = 1; i < l->n; i++)
		CHECK(strcmp(l->stack[i - 1], l->stack[i]) < 0);
}

/* The weights of the folded lines of each root's subtree. */
static uint64_t
folded_sum(const struct lines *l, const char *prefix)
{
	size_t len = strlen(prefix);
	uint64_t sum = 0;

	for (size_t i = 0; i < l->n; i++)
		if (!strncmp(l->stack[i], prefix, len) &&
		    (!l->stack[i][len] || l->stack[i][len] == ';'))
			sum += l->weight[i];
	return sum;
}

static bool
has_line(const struct lines *l, const char *stack, uint64_t weight)
{
	for (size_t i = 0; i < l->n; i++)
		if (!strcmp(l->stack[i], stack))
			return l->weight[i] == weight;
	return false;
}

static void
test_fold_adds_up(void)
{
	struct fake f;
	struct tree t;
	struct folded fw = {0}, fp = {0}, fc = {0};
	struct lines lw, lp;

	make_sample(&f);
	tree_build(&t, f.rp, f.n, true);
	CHECK(tree_fold(&t, NULL, &fw) == 6);
	lines_of(&fw, &lw);
	CHECK(lw.n == 6);
	CHECK(has_line(&lw, "app (uid 1000);a;b;b", 200) && has_line(&lw, "app (uid 1000);a", 100));
	/* Every root: its subtree's lines add up to its inclusive sum. */
	for (size_t i = 0; i < t.n; i++) {
		const struct tree_node *nd = &t.node[i];
		_cleanup_free_ char *prefix = NULL;

		if (nd->parent != TREE_NONE)
			continue;
		CHECK(asprintf(&prefix, "app (uid 1000);%s", tree_name(&t, nd)) > 0);
		CHECK(folded_sum(&lw, prefix) == f.r[i].wall_ns->sum);
	}
	/* Page faults: b's self is negative, left out; d's subtree still adds up, a's now holds
	 * b's child's 80 without b's -10. */
	CHECK(tree_fold(&t, "page-faults", &fp) == 6);
	lines_of(&fp, &lp);
	CHECK(lp.n == 5 && !has_line(&lp, "app (uid 1000);a;b", 0));
	CHECK(folded_sum(&lp, "app (uid 1000);d") == 5);
	CHECK(folded_sum(&lp, "app (uid 1000);a") == 100 + 10);
	CHECK(tree_fold(&t, "cycles", &fc) == 0 && fc.n == 0);
	tree_folded_free(&fw);
	tree_folded_free(&fp);
	tree_folded_free(&fc);
	free(lw.text);
	free(lp.text);
	tree_free(&t);
}

/* Folds the wall time of every process of @f into @fw; returns the nodes taken. */
static size_t
fold_all(struct fake *f, struct folded *fw)
{
	struct tree t;
	size_t off = 0;

	while (off < f->n) {
		off += tree_build(&t, f->rp + off, f->n - off, false);
		tree_fold(&t, "wall", fw);
		tree_free(&t);
	}
	return off;
}

/* Lines are sorted, and equal stacks (two processes of one comm and uid) are added up; those
 * of another user's process of that comm never are: the root frame names the user
 * (another user's program named like the victim's had added to its stack). */
static void
test_fold_merge(void)
{
	struct fake f;
	struct folded fw = {0};
	struct lines l;

	memset(&f, 0, sizeof(f));
	add(&f, 10, 1, 0, "z", 50, 0);
	add(&f, 10, 2, 1, "y", 20, 0);
	add(&f, 11, 1, 0, "z", 70, 0);
	add(&f, 11, 2, 0, "semi;colon", 5, 0);
	add(&f, 12, 1, 0, "z", 1000000, 0);
	f.r[4].uid = 65534;
	CHECK(fold_all(&f, &fw) == 5);
	lines_of(&fw, &l);
	CHECK(l.n == 4);
	CHECK(!strcmp(l.stack[0], "app (uid 1000);semi\\x3bcolon") && l.weight[0] == 5);
	CHECK(!strcmp(l.stack[1], "app (uid 1000);z") && l.weight[1] == 30 + 70);
	CHECK(!strcmp(l.stack[2], "app (uid 1000);z;y") && l.weight[2] == 20);
	CHECK(!strcmp(l.stack[3], "app (uid 65534);z") && l.weight[3] == 1000000);
	tree_folded_free(&fw);
	free(l.text);
}

static void
test_region_subtrees(void)
{
	struct fake f;
	struct tree t;
	struct folded fw = {0};
	struct lines l;
	const char *globs[] = {"b"};
	const char *none[] = {"nothing*"};

	make_sample(&f);
	tree_build(&t, f.rp, f.n, true);
	CHECK(tree_select(&t, globs, 1) == 2);
	CHECK(tree_is_top(&t, node_of(&t, 2)) && !tree_is_top(&t, node_of(&t, 3)));
	CHECK(node_of(&t, 3)->selected && !node_of(&t, 1)->selected && !node_of(&t, 4)->selected);
	/* The ancestors stay in each line's stack. */
	CHECK(tree_fold(&t, NULL, &fw) == 2);
	lines_of(&fw, &l);
	CHECK(l.n == 2);
	CHECK(has_line(&l, "app (uid 1000);a;b", 400) && has_line(&l, "app (uid 1000);a;b;b", 200));
	CHECK(folded_sum(&l, "app (uid 1000);a;b") == 600);
	free(l.text);
	CHECK(tree_select(&t, none, 1) == 0);
	CHECK(tree_select(&t, (const char *const[]){"[de]"}, 1) == 2 &&
	      tree_is_top(&t, node_of(&t, 5)));
	CHECK(tree_select(&t, NULL, 0) == 6);
	tree_folded_free(&fw);
	tree_free(&t);
}

/* A parent id no node has, or one listed after its child: the child is made a root. */
static void
test_orphans(void)
{
	struct fake f;
	struct tree t;
	struct folded fw = {0};

	memset(&f, 0, sizeof(f));
	add(&f, 5, 1, 3, "early", 10, 0); /* its parent comes later */
	add(&f, 5, 2, 9, "lost", 20, 0);  /* no node 9 */
	add(&f, 5, 3, 0, "root", 100, 0);
	add(&f, 5, 4, 4, "self", 7, 0); /* its own parent */
	CHECK(tree_build(&t, f.rp, f.n, true) == 4);
	CHECK(t.n_orphans == 3);
	CHECK(node_of(&t, 1)->orphan && !tree_parent(&t, node_of(&t, 1)));
	CHECK(node_of(&t, 2)->orphan && node_of(&t, 4)->orphan && !node_of(&t, 3)->orphan);
	CHECK(node_of(&t, 3)->child == TREE_NONE && node_of(&t, 3)->self_wall == 100);
	CHECK(tree_is_top(&t, node_of(&t, 1)) && tree_is_top(&t, node_of(&t, 4)));
	struct lines l;
	CHECK(tree_fold(&t, NULL, &fw) == 4);
	lines_of(&fw, &l);
	CHECK(has_line(&l, "app (uid 1000);early", 10));
	free(l.text);
	tree_folded_free(&fw);
	tree_free(&t);
}

/* A node still open (no samples, its children some) is shown; a subtree with no samples at
 * all (just reset) is not, whatever --region says. */
static void
test_empty_subtrees(void)
{
	struct fake f;
	struct tree t;
	struct folded fw = {0};

	memset(&f, 0, sizeof(f));
	add(&f, 3, 1, 0, "open", 0, 0);
	add(&f, 3, 2, 1, "done", 40, 1);
	add(&f, 3, 3, 0, "reset", 0, 0);
	add(&f, 3, 4, 3, "reset-child", 0, 0);
	f.r[0].count = f.r[2].count = f.r[3].count = 0;
	tree_build(&t, f.rp, f.n, true);
	CHECK(node_of(&t, 1)->selected && node_of(&t, 2)->selected);
	CHECK(!node_of(&t, 3)->selected && !node_of(&t, 4)->selected);
	CHECK(node_of(&t, 1)->self_wall == -40);
	CHECK(tree_select(&t, (const char *const[]){"reset*"}, 1) == 0);
	CHECK(tree_select(&t, NULL, 0) == 2);
	struct lines l;
	CHECK(tree_fold(&t, NULL, &fw) == 2);
	lines_of(&fw, &l);
	CHECK(l.n == 1 && has_line(&l, "app (uid 1000);open;done", 40));
	free(l.text);
	/* A walk skips what is not selected. */
	add(&f, 3, 5, 1, "reset-too", 0, 0);
	add(&f, 3, 6, 1, "done-too", 5, 0);
	f.r[4].count = 0;
	tree_free(&t);
	tree_build(&t, f.rp, f.n, true);
	const struct tree_node *top = node_of(&t, 1);
	CHECK(tree_next(&t, top, top) == node_of(&t, 2));
	CHECK(tree_next(&t, node_of(&t, 2), top) == node_of(&t, 6));
	CHECK(tree_next(&t, node_of(&t, 6), top) == NULL);
	tree_folded_free(&fw);
	tree_free(&t);
}

/* A tree ends at another pid, or at an id it holds (a second process with the pid). */
static void
test_process_ends(void)
{
	struct fake f;
	struct tree t;

	memset(&f, 0, sizeof(f));
	add(&f, 1, 1, 0, "a", 1, 0);
	add(&f, 1, 2, 1, "b", 1, 0);
	add(&f, 1, 1, 0, "a", 1, 0); /* pid 1 again: recycled */
	add(&f, 2, 1, 0, "a", 1, 0);
	CHECK(tree_build(&t, f.rp, f.n, true) == 2);
	tree_free(&t);
	CHECK(tree_build(&t, f.rp + 2, f.n - 2, true) == 1 && t.pid == 1);
	tree_free(&t);
	CHECK(tree_build(&t, f.rp + 3, 1, true) == 1 && t.pid == 2);
	tree_free(&t);
}

/* Stacks sort as their texts: a frame's own line first, then the lines of frames whose
 * names go on after its own below ';' (' ', '.'), then the lines below it. */
static void
test_fold_text_order(void)
{
	struct fake f;
	struct tree t;
	struct folded fw = {0};
	struct lines l;

	memset(&f, 0, sizeof(f));
	add(&f, 9, 1, 0, "r1", 100, 0);
	add(&f, 9, 2, 1, "x", 10, 0);
	add(&f, 9, 3, 0, "r1.0", 5, 0);
	add(&f, 9, 4, 0, "r1 z", 5, 0);
	add(&f, 9, 5, 0, "r1<", 5, 0);
	add(&f, 9, 6, 3, "y", 1, 0);
	tree_build(&t, f.rp, f.n, false);
	CHECK(tree_fold(&t, NULL, &fw) == 6);
	lines_of(&fw, &l); /* (checks the order is strcmp(3)'s) */
	CHECK(l.n == 6 && !strcmp(l.stack[0], "app (uid 1000);r1") &&
	      !strcmp(l.stack[3], "app (uid 1000);r1.0;y") &&
	      !strcmp(l.stack[4], "app (uid 1000);r1;x") &&
	      !strcmp(l.stack[5], "app (uid 1000);r1<"));
	free(l.text);
	tree_folded_free(&fw);
	tree_free(&t);
}

/* A node's RegionStats as the reply had it: what the tree holds put back, and a node of
 * another comm (an exec) kept whole. */
static void
test_node_stats(void)
{
	struct fake f;
	struct tree t;
	struct arena a = {0};

	make_sample(&f);
	f.r[3].comm = (char *)"other";
	f.r[3].cgroup = (char *)"/c";
	f.r[4].ns_pid = 7;
	tree_build(&t, f.rp, f.n, true);
	for (size_t i = 0; i < t.n; i++) {
		const Pmc__RegionStats *r = tree_node_stats(&t, &t.node[i], &a), *o = f.rp[i];

		CHECK(r->pid == o->pid && !strcmp(r->comm, o->comm) && !strcmp(r->name, o->name));
		CHECK(!strcmp(r->cgroup, o->cgroup) && r->ns_pid == o->ns_pid && r->uid == o->uid);
		CHECK(r->path == o->path && r->parent == o->parent && r->count == o->count);
		CHECK(r->wall_ns->sum == o->wall_ns->sum && r->n_events == 1);
		CHECK(!strcmp(r->events[0]->name, "page-faults:u"));
		CHECK(r->events[0]->stats->sum == o->events[0]->stats->sum);
		call_arena_reset(&a);
	}
	call_arena_free(&a);
	tree_free(&t);
}

/* Ids far apart (a daemon numbers them 1, 2, ...; a hostile one may not): linked all the
 * same, and one listed again ends the process. */
static void
test_sparse_ids(void)
{
	struct fake f;
	struct tree t;

	memset(&f, 0, sizeof(f));
	add(&f, 4, 3000000000u, 0, "far", 100, 0);
	add(&f, 4, 7, 3000000000u, "near", 50, 0);
	add(&f, 4, 4000000000u, 7, "farther", 20, 0);
	add(&f, 4, 8, 4000000000u, "last", 5, 0);
	add(&f, 4, 4000000000u, 0, "again", 1, 0);
	CHECK(tree_build(&t, f.rp, f.n, false) == 4 && t.n_orphans == 0);
	CHECK(tree_parent(&t, node_of(&t, 7)) == node_of(&t, 3000000000u));
	CHECK(tree_parent(&t, node_of(&t, 8)) == node_of(&t, 4000000000u));
	CHECK(node_of(&t, 8)->depth == 3 && node_of(&t, 3000000000u)->self_wall == 50);
	tree_free(&t);
}

int
main(void)
{
	int fds = pmc_test_count_fds();

	RUN(test_links);
	RUN(test_self);
	RUN(test_event_names);
	RUN(test_self_by_name);
	RUN(test_fold_adds_up);
	RUN(test_fold_merge);
	RUN(test_region_subtrees);
	RUN(test_orphans);
	RUN(test_empty_subtrees);
	RUN(test_process_ends);
	RUN(test_fold_text_order);
	RUN(test_node_stats);
	RUN(test_sparse_ids);
	CHECK(pmc_test_count_fds() == fds);
	return 0;
}
