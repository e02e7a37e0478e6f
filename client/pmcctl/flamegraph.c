/* pmcctl flamegraph: the folded stacks ("comm (uid U);outer;inner WEIGHT") of the call path trees
 * of the processes selected, for flamegraph.pl, inferno or speedscope, weighted by each node's self
 * figure of --event (the wall time by default). The reply is read by tree-print.c
 * (tree_reply_each()), the stacks folded by tree.c (tree_fold()). */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmcctl.h"

/* The folded stacks of a reply, gathered process by process and printed at the end. */
struct flamegraph {
	const struct opts *o;
	struct folded folded;
	size_t n_counted; /* selected nodes that counted --event */
	char **events;    /* the events of the selected nodes, for messages */
	size_t n_events;
};

static void
flamegraph_free(struct flamegraph *g)
{
	folded_free(&g->folded);
	for (size_t i = 0; i < g->n_events; i++)
		free(g->events[i]);
	free(g->events);
}

/* Adds @t's folded stacks to @ctx (a struct flamegraph), and the names of the events its
 * selected nodes counted. */
static void
flamegraph_tree(const struct tree *t, void *ctx)
{
	struct flamegraph *g = ctx;

	g->n_counted += tree_fold(t, g->o->event, &g->folded);
	for (size_t i = 0; i < t->n; i++) {
		const Pmc__RegionStats *r = t->node[i].r;

		for (size_t j = 0; t->node[i].selected && j < r->n_events; j++) {
			size_t k = 0;

			while (k < g->n_events && strcmp(g->events[k], r->events[j]->name))
				k++;
			if (k < g->n_events)
				continue;
			char **grown = reallocarray(g->events, g->n_events + 1, sizeof(*grown));
			if (!grown)
				oom();
			g->events = grown;
			if (!(g->events[g->n_events++] = strdup(r->events[j]->name)))
				oom();
		}
	}
}

/* Exits 1: none of the @n_selected nodes selected counted --event; names the events they
 * did. */
static void fold_unknown_event(const struct flamegraph *g, size_t n_selected)
        __attribute__((noreturn));

static void
fold_unknown_event(const struct flamegraph *g, size_t n_selected)
{
	char *list = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&list, &len);

	if (!f)
		oom();
	fputs("wall", f);
	for (size_t i = 0; i < g->n_events; i++)
		fprintf(f, ", %s", g->events[i]);
	if (fclose(f))
		oom();
	_cleanup_free_ char *safe = escape_text(list);
	_cleanup_free_ char *event = escape_text(g->o->event);
	free(list);
	fail("event '%s' was not counted in the %zu call path node%s selected: they have %s", event,
	     n_selected, n_selected == 1 ? "" : "s", safe);
}

int
cmd_flamegraph(int sock, const struct command *cmd, const struct opts *o)
{
	struct flamegraph g = {.o = o};
	struct tree_counts n;
	_cleanup_response_ Pmc__Response *last =
	        tree_reply_each(sock, cmd->name, o, flamegraph_tree, &g, &n);

	if (!n.selected) {
		_cleanup_free_ char *why = tree_empty_reason(o, n.nodes, last->query);
		_cleanup_free_ char *safe = escape_text(why);

		fail("%s", safe);
	}
	if (!g.n_counted)
		fold_unknown_event(&g, n.selected);
	folded_merge(&g.folded);
	for (size_t i = 0; i < g.folded.n; i++)
		printf("%s %" PRIu64 "\n", g.folded.v[i].stack, g.folded.v[i].weight);
	flamegraph_free(&g);
	if (fflush(stdout) || ferror(stdout))
		fail("cannot write the output: %s", strerror(errno));
	return 0;
}
