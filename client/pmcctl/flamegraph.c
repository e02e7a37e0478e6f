/* pmcctl flamegraph: the folded stacks ("comm (uid U);outer;inner WEIGHT") of the call path trees
 * of the processes selected, for flamegraph.pl, inferno or speedscope, weighted by each node's self
 * figure of --event (the wall time by default). The reply is read by tree-print.c
 * (tree_print_reply_each()), the stacks folded by tree.c (tree_fold()) and written sorted
 * (tree_folded_print()). */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pmcctl/call.h"
#include "pmcctl/event-name.h"
#include "pmcctl/flamegraph.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"
#include "pmcctl/tree-print.h"
#include "pmcctl/tree.h"

/* The folded stacks of a reply, gathered process by process and printed at the end. */
struct flamegraph {
	const struct opts *o;
	struct folded folded;
	size_t n_counted;          /* selected nodes that counted --event */
	struct event_names events; /* the events of the selected nodes, for messages */
};

static void
flamegraph_free(struct flamegraph *g)
{
	tree_folded_free(&g->folded);
	event_name_free(&g->events);
}

/* Adds @t's folded stacks to @ctx (a struct flamegraph), and the names of the events its
 * selected nodes counted. */
static void
flamegraph_tree(const struct tree *t, void *ctx)
{
	struct flamegraph *g = ctx;

	g->n_counted += tree_fold(t, g->o->event, &g->folded);
	for (size_t i = 0; i < t->n; i++) {
		const struct tree_node *nd = &t->node[i];

		for (size_t j = 0; nd->selected && j < nd->n_ev; j++)
			event_name_add(&g->events, tree_event_name(t, nd, j));
	}
}

int
cmd_flamegraph(int sock, const struct command *cmd, const struct opts *o)
{
	struct flamegraph g = {.o = o};
	struct tree_counts n;
	_cleanup_response_ Pmc__Response *last =
	        tree_print_reply_each(sock, cmd->name, o, flamegraph_tree, &g, &n);

	if (!n.selected) {
		_cleanup_free_ char *why = tree_print_empty_reason(o, n.nodes, last->query);
		_cleanup_free_ char *safe = output_escape_text(why);

		pmcctl_fail("%s", safe);
	}
	if (!g.n_counted)
		event_name_not_counted(o->event, n.selected, "call path node", &g.events);
	tree_folded_print(&g.folded, stdout);
	flamegraph_free(&g);
	if (fflush(stdout) || ferror(stdout))
		pmcctl_fail("cannot write the output: %s", strerror(errno));
	return 0;
}
