/* pmcctl's call path trees printed: a Query.tree reply read process by process as its parts
 * arrive (each node folded into its process's tree by tree.c as its part arrives, the part
 * then freed; its untracked samples kept with it), each node unpacked only while it is
 * printed, and each tree printed as query --tree prints it (an indented table with self columns,
 * nested JSON, CSV with path and self) or after dump's regions. flamegraph.c reads the same
 * reply through tree_print_reply_each(). A node's figures are printed with query.c's writers. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cgroup.h"
#include "common/util.h"
#include "pmcctl/call.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"
#include "pmcctl/query.h"
#include "pmcctl/tree-print.h"
#include "pmcctl/tree.h"
#include "wire/pmc-shared.h"

/* ---- a tree reply, process by process ---- */

/* A reason of QueryReply.untracked in words, or NULL for one this pmcctl does not know. */
static const char *
untracked_text(const char *reason)
{
	if (!strcmp(reason, "path-depth"))
		return "begun deeper than 32 regions: counted in the self figures of the node "
		       "above them";
	if (!strcmp(reason, "path-limit"))
		return "past the daemon's or the library's limit on call paths";
	if (!strcmp(reason, "older-client"))
		return "sent by a libpmcclient that sends no call paths";
	return NULL;
}

/* Samples of a process in no node, by reason (QueryReply.untracked), kept until its tree is
 * printed. */
struct untracked {
	int32_t pid;
	char *reason;
	uint64_t count;
};

/* A tree reply printed (or handed to @on_tree) process by process as its parts arrive. Each
 * node is folded into the tree of its process as it arrives (tree_add()), so that each part
 * is freed after its callback: what a tree keeps of its nodes is about the reply's own size.
 * A process's tree is shown at a node of another process or at the end of the reply: its
 * untracked samples come in the part that lists its last node, as its losses do. */
struct tree_printer {
	const struct opts *o;
	bool dump;       /* after dump's regions (JSON: the member "tree") */
	bool old_daemon; /* a node without an id: the daemon knows no Query.tree */
	struct tree cur; /* the process whose nodes may go on in the next part */
	/* Those of its pid before it (the pid again: recycled, or exec'd), ended, shown with it. */
	struct tree *held;
	size_t n_held, cap_held;
	/* What they hold beyond what grows with their nodes (tree_overhead()), charged to
	 * --max-reply with the parts they came of, which are charged already: a reply whose
	 * every node repeats an id makes a tree of each, some 1,160 bytes for a node of 85 in
	 * the reply (236 MB at --max-reply 16); a large tree set aside holds about what the
	 * current one would, within twice its parts. */
	uint64_t held_mem;
	struct untracked *untracked;
	size_t n_untracked, cap_untracked;
	size_t n_nodes, n_selected; /* listed, and in the subtrees --region selects */
	size_t n_procs;             /* printed */
	bool csv_head;              /* CSV: the header printed */
	struct table_notes notes;
	bool any_negative;
	struct arena arena;      /* the node printed, unpacked */
	struct tree_paths paths; /* the paths of a walk */
	/* Not NULL: each tree is handed to it with @ctx (flamegraph), nothing printed here. */
	void (*on_tree)(const struct tree *t, void *ctx);
	void *ctx;
};

static const char *const tree_csv_head[] = {
        "pid",           "comm",  "region",    "count",  "event",  "sum",  "min",
        "max",           "mean",  "stddev",    "p50",    "p90",    "p99",  "scaled",
        "running_ratio", "floor", "too_short", "cgroup", "ns_pid", "path", "self",
};

/* @v (@cap trees) grown to hold @need. */
static struct tree *
grow_held(struct tree *v, size_t *cap, size_t need)
{
	if (need <= *cap)
		return v;
	size_t c = *cap ? 2 * *cap : 4;
	v = reallocarray(v, c, sizeof(*v));
	if (!v)
		pmcctl_oom();
	*cap = c;
	return v;
}

/* Forgets the trees of the nodes not shown yet. */
static void
pending_clear(struct tree_printer *p)
{
	for (size_t i = 0; i < p->n_held; i++)
		tree_free(&p->held[i]);
	p->n_held = 0;
	p->held_mem = 0;
	tree_free(&p->cur);
	tree_init(&p->cur, !p->on_tree);
}

static void
untracked_add(struct tree_printer *p, const Pmc__ProcessLoss *l)
{
	if (p->n_untracked == p->cap_untracked) {
		size_t cap = p->cap_untracked ? 2 * p->cap_untracked : 16;
		struct untracked *v = reallocarray(p->untracked, cap, sizeof(*v));

		if (!v)
			pmcctl_oom();
		p->untracked = v;
		p->cap_untracked = cap;
	}
	struct untracked *u = &p->untracked[p->n_untracked++];
	u->pid = l->pid;
	u->count = l->count;
	if (!(u->reason = strdup(l->reason)))
		pmcctl_oom();
}

/* Forgets the untracked samples of @pid, once its tree is printed. */
static void
untracked_forget(struct tree_printer *p, int32_t pid)
{
	size_t k = 0;

	for (size_t i = 0; i < p->n_untracked; i++) {
		if (p->untracked[i].pid == pid)
			free(p->untracked[i].reason);
		else
			p->untracked[k++] = p->untracked[i];
	}
	p->n_untracked = k;
}

static void
tree_printer_free(struct tree_printer *p)
{
	pending_clear(p);
	free(p->held);
	tree_free(&p->cur);
	call_arena_free(&p->arena);
	tree_paths_free(&p->paths);
	for (size_t i = 0; i < p->n_untracked; i++)
		free(p->untracked[i].reason);
	free(p->untracked);
}

/* ---- a tree as a table ---- */

/* The event columns of @t's table, the caller's to free: every event name of its selected
 * nodes, first seen first. */
static const char **
tree_event_columns(const struct tree *t, size_t *n)
{
	const char **names = NULL;

	*n = 0;
	for (size_t i = 0; i < t->n; i++) {
		const struct tree_node *nd = &t->node[i];

		for (size_t j = 0; nd->selected && j < nd->n_ev; j++) {
			const char *name = tree_event_name(t, nd, j);
			size_t k = 0;

			while (k < *n && strcmp(names[k], name))
				k++;
			if (k < *n)
				continue;
			const char **grown = reallocarray(names, *n + 1, sizeof(*names));
			if (!grown)
				pmcctl_oom();
			names = grown;
			names[(*n)++] = name;
		}
	}
	return names;
}

/* A whole figure as a table shows it, in @buf: a time when @ns; sets *@rounded when it
 * lost digits. */
static void
figure_text(char *buf, size_t len, double v, bool ns, bool *rounded)
{
	*rounded |= ns ? output_format_time(buf, len, v) : output_format_count(buf, len, v, true);
}

/* A signed figure (a self sum), with @mark after it; sets *@rounded when it lost digits. */
static void
table_add_signed(struct table *t, int64_t v, bool ns, const char *mark, bool *rounded)
{
	char buf[64];

	figure_text(buf, sizeof(buf), v < 0 ? -(double)v : (double)v, ns, rounded);
	output_table_add(t, "%s%s%s", v < 0 ? "-" : "", buf, mark);
}

/* The cells of event @name in @nd's row: its inclusive sum (marked '*' when extrapolated,
 * '~' when too short) and its self sum ('*' when its own or a child's was extrapolated);
 * "-" where @nd did not count it. */
static void
tree_table_event(struct tree_printer *p, struct table *t, const struct tree *tr,
                 const struct tree_node *nd, const Pmc__RegionStats *r, const char *name)
{
	ssize_t j = tree_event_named(tr, nd, name);
	bool ns = query_event_counts_ns(name);
	char sum[64];

	if (j < 0) {
		output_table_add(t, "-");
		output_table_add(t, "-");
		return;
	}
	const Pmc__EventStats *e = r->events[j];
	const struct tree_event *te = &tr->ev[nd->ev + (size_t)j];
	bool scaled = te->self_scaled;

	figure_text(sum, sizeof(sum), (double)call_stats_or_zero(e->stats)->sum, ns,
	            &p->notes.rounded);
	output_table_add(t, "%s%s%s", sum, e->scaled_count > 0 ? "*" : "", e->too_short ? "~" : "");
	table_add_signed(t, te->self, ns, scaled ? "*" : "", &p->notes.rounded);
	p->notes.any_scaled |= scaled;
	p->notes.any_short |= e->too_short;
	p->any_negative |= te->self < 0;
}

/* The row of @nd, @top the top of its subtree shown: its name indented by its depth below
 * @top, or @top's whole path where it has ancestors (--region); then its count, and the
 * inclusive and self sums of the wall time and of each event of @ev. */
static void
tree_table_row(struct tree_printer *p, struct table *t, const struct tree *tr,
               const struct tree_node *nd, const struct tree_node *top, const char *const *ev,
               size_t n_ev)
{
	const Pmc__RegionStats *r = tree_node_stats(tr, nd, &p->arena);
	char count[64];

	if (nd == top && tree_parent(tr, nd)) {
		_cleanup_free_ char *path = tree_path(tr, nd);
		output_table_add(t, "%s", path);
	} else {
		output_table_add(t, "%*s%s", (int)(2 * (nd->depth - top->depth)), "", r->name);
	}
	figure_text(count, sizeof(count), (double)r->count, false, &p->notes.rounded);
	output_table_add(t, "%s", count);
	figure_text(count, sizeof(count), (double)call_stats_or_zero(r->wall_ns)->sum, true,
	            &p->notes.rounded);
	output_table_add(t, "%s%s", count, r->wall_too_short ? "~" : "");
	table_add_signed(t, nd->self_wall, true, "", &p->notes.rounded);
	p->notes.any_short |= r->wall_too_short;
	p->any_negative |= nd->self_wall < 0;
	for (size_t c = 0; c < n_ev; c++)
		tree_table_event(p, t, tr, nd, r, ev[c]);
	call_arena_reset(&p->arena);
}

/* Each reason of @pid's untracked samples, a line. */
static void
untracked_lines(const struct tree_printer *p, int32_t pid)
{
	for (size_t i = 0; i < p->n_untracked; i++) {
		const struct untracked *u = &p->untracked[i];
		_cleanup_free_ char *reason = output_escape_text(u->reason);
		const char *why = untracked_text(u->reason);

		if (u->pid != pid)
			continue;
		printf("%" PRIu64 " sample%s of this process %s in no path: %s%s%s%s\n", u->count,
		       u->count == 1 ? "" : "s", u->count == 1 ? "is" : "are", reason,
		       why ? " (" : "", why ? why : "", why ? ")" : "");
	}
}

/* The header of a tree's table with event columns @ev: each its name (escaped: the caller
 * frees those, head[4], head[6]...) and "SELF". */
static const char **
tree_table_head(const char *const *ev, size_t n_ev)
{
	const char **head = calloc(4 + 2 * n_ev, sizeof(*head));

	if (!head)
		pmcctl_oom();
	head[0] = "REGION";
	head[1] = "COUNT";
	head[2] = "WALL";
	head[3] = "SELF";
	for (size_t c = 0; c < n_ev; c++) {
		/* Event names come from the programs: the header reaches the terminal too. */
		head[4 + 2 * c] = output_escape_text(ev[c]);
		head[5 + 2 * c] = "SELF";
	}
	return head;
}

/* The rows of @t's table, each node's unpacked while its row is made. */
static void
tree_table_rows(struct tree_printer *p, struct table *tab, const struct tree *t,
                const char *const *ev, size_t n_ev)
{
	for (size_t i = 0; i < t->n; i++) {
		const struct tree_node *top = &t->node[i];

		if (!tree_is_top(t, top))
			continue;
		for (const struct tree_node *nd = top; nd; nd = tree_next(t, nd, top))
			tree_table_row(p, tab, t, nd, top, ev, n_ev);
	}
}

/* @t as a table, under a line naming its process, its untracked samples after it. Its rows
 * are made twice, measured then printed (no cell kept: a table of 660,000 nodes kept its
 * cells in 366 MB for a 58.8 MB reply). */
static void
tree_table(struct tree_printer *p, const struct tree *t)
{
	size_t n_ev;
	_cleanup_free_ const char **ev = tree_event_columns(t, &n_ev);
	_cleanup_free_ const char **head = tree_table_head(ev, n_ev);
	_cleanup_free_ bool *right = calloc(4 + 2 * n_ev, sizeof(*right));
	_cleanup_free_ size_t *width = calloc(4 + 2 * n_ev, sizeof(*width));
	_cleanup_free_ char *comm = output_escape_text(t->comm);
	struct table tab = {.ncols = 4 + 2 * n_ev, .head = head, .right = right};

	if (!right || !width)
		pmcctl_oom();
	for (size_t c = 1; c < tab.ncols; c++)
		right[c] = true;
	output_table_measure(&tab, width);
	tree_table_rows(p, &tab, t, ev, n_ev);
	char container[CGROUP_NAME_MAX];
	_cleanup_free_ char *where =
	        output_escape_text(cgroup_container_name(t->cgroup, container, sizeof(container)));
	printf("%spid %" PRId32 " (%s), container %s, uid %" PRIu32 "\n",
	       p->n_procs || p->dump ? "\n" : "", t->pid, comm, where, t->uid);
	output_table_stream(&tab, stdout);
	tree_table_rows(p, &tab, t, ev, n_ev);
	for (size_t c = 0; c < n_ev; c++)
		free((char *)head[4 + 2 * c]);
	untracked_lines(p, t->pid);
}

/* The notes under the tables of a tree reply, once. */
static void
tree_table_notes(struct tree_printer *p)
{
	if (!p->n_selected)
		return; /* processes without nodes only */
	puts("\nSELF: the node's own share, its sum less the sums of its children");
	if (p->any_negative)
		puts("a negative SELF: its children measured more than it did (it is still open, "
		     "or samples of it were lost)");
	query_table_notes(&p->notes);
}

/* ---- a tree as JSON and CSV ---- */

/* The object query prints for @nd's region, with its "path", "self" and "children" (empty). */
static json_t *
tree_node_json(struct tree_printer *p, const struct tree *t, const struct tree_node *nd)
{
	json_t *o = query_region_json(tree_node_stats(t, nd, &p->arena));
	json_t *self = output_jobject();
	_cleanup_free_ char *path = tree_path(t, nd);

	call_arena_reset(&p->arena);
	output_jset(o, "path", output_jstr(path));
	output_jset(self, "wall_ns", json_integer(nd->self_wall));
	for (size_t j = 0; j < nd->n_ev; j++)
		output_jset(self, tree_event_name(t, nd, j), json_integer(t->ev[nd->ev + j].self));
	output_jset(o, "self", self);
	output_jset(o, "children", output_jarray());
	return o;
}

/* The deepest node --format json writes (see tree_json()). */
#define TREE_JSON_MAX_DEPTH 4096

/* Prints the subtree of @top, one of the process's "tree" at @indent: each node as query prints
 * its region, with its "path", "self" and "children", as jansson would print them nested, one
 * node's values held at a time (a process's whole tree in jansson's values took 8.6 GB for a
 * 58.8 MB reply of 660,000 nodes). The walk is depth first, in the reply's order, as the
 * children were appended before. */
static void
tree_json_subtree(struct tree_printer *p, const struct tree *t, const struct tree_node *top,
                  unsigned indent)
{
	const struct tree_node *next;

	for (const struct tree_node *nd = top; nd; nd = next) {
		next = tree_next(t, nd, top);
		bool parent = next && next->depth > nd->depth;
		unsigned at = indent + 4 * (nd->depth - top->depth);

		if (parent) {
			output_json_print_open(tree_node_json(p, t, nd), (int)at);
			continue;
		}
		output_json_print_indented(tree_node_json(p, t, nd), (int)at);
		/* Up to the next node's level: each node above whose last child this was. */
		uint32_t to = next ? next->depth : top->depth;
		for (uint32_t d = nd->depth; d > to; d--)
			output_json_close((int)(indent + 4 * (d - 1 - top->depth)));
		if (next)
			fputs(",\n", stdout);
	}
}

/* {"pid","comm","cgroup","ns_pid","uid","untracked":{reason:count},"tree":[node...]} of @t, at
 * @indent; @t has selected nodes. */
static void
tree_json(struct tree_printer *p, const struct tree *t, unsigned indent)
{
	json_t *proc = output_jobject();
	json_t *untracked = output_jobject();

	for (size_t i = 0; i < t->n; i++) {
		const struct tree_node *nd = &t->node[i];

		/* Readers of JSON nest by recursion too (jansson's writer overflowed an 8 MiB
		 * stack at some 30,000 levels before this wrote the nesting itself; Python's
		 * reader stops at about 1,000). A daemon keeps call paths of at most
		 * PMC_LIMIT_PATH_DEPTH regions; one that sends more is refused here. */
		if (nd->selected && nd->depth >= TREE_JSON_MAX_DEPTH)
			pmcctl_fail(
			        "the call path tree of pid %d is over %d levels deep (a daemon "
			        "keeps paths of at most %d regions): too deep for --format json; "
			        "--format csv writes it",
			        (int)t->pid, TREE_JSON_MAX_DEPTH, PMC_LIMIT_PATH_DEPTH);
	}
	output_jset(proc, "pid", json_integer(t->pid));
	output_jset(proc, "comm", output_jstr(t->comm));
	output_jset(proc, "cgroup", output_jstr(t->cgroup));
	output_jset(proc, "ns_pid", json_integer(t->ns_pid));
	output_jset(proc, "uid", json_integer(t->uid));
	for (size_t i = 0; i < p->n_untracked; i++)
		if (p->untracked[i].pid == t->pid)
			output_jset(untracked, p->untracked[i].reason,
			            output_ju64(p->untracked[i].count));
	output_jset(proc, "untracked", untracked);
	output_jset(proc, "tree", output_jarray());
	output_json_print_open(proc, (int)indent);
	bool first = true;
	for (size_t i = 0; i < t->n; i++) {
		const struct tree_node *top = &t->node[i];

		if (!tree_is_top(t, top))
			continue;
		if (!first)
			fputs(",\n", stdout);
		first = false;
		tree_json_subtree(p, t, top, indent + 4);
	}
	output_json_close((int)indent);
}

/* Where the JSON of a tree reply begins: an array, or dump's member "tree". */
static const char *
tree_json_open(const struct tree_printer *p)
{
	return p->dump ? ",\n  \"tree\": [" : "[";
}

/* The rows of @nd: query's, each with the path and the self sum of its figure after them. */
static void
tree_csv_node(struct tree_printer *p, const struct tree *t, const struct tree_node *nd,
              const char *path)
{
	const Pmc__RegionStats *r = tree_node_stats(t, nd, &p->arena);

	query_csv_fields(r, NULL);
	output_csv_str(path);
	output_csv_i64(nd->self_wall);
	output_csv_end();
	for (size_t j = 0; j < r->n_events; j++) {
		query_csv_fields(r, r->events[j]);
		output_csv_str(path);
		output_csv_i64(t->ev[nd->ev + j].self);
		output_csv_end();
	}
	for (size_t j = 0; j < r->n_derived; j++) {
		query_csv_derived_fields(r, r->derived[j]);
		output_csv_str(path);
		output_csv_str("");
		output_csv_end();
	}
	call_arena_reset(&p->arena);
}

/* The header of a tree reply's CSV, once. */
static void
tree_csv_head_print(struct tree_printer *p)
{
	if (!p->csv_head)
		output_csv_header(tree_csv_head, ARRAY_SIZE(tree_csv_head));
	p->csv_head = true;
}

static void
tree_csv(struct tree_printer *p, const struct tree *t)
{
	tree_csv_head_print(p);
	for (size_t i = 0; i < t->n; i++) {
		const struct tree_node *top = &t->node[i];

		if (!tree_is_top(t, top))
			continue;
		for (const struct tree_node *nd = top; nd; nd = tree_next(t, nd, top))
			tree_csv_node(p, t, nd, tree_paths_at(&p->paths, t, nd, top));
	}
}

/* ---- the reply's flow ---- */

/* Prints @t, which has selected nodes, in @p's format, or hands it to @p->on_tree. */
static void
tree_emit(struct tree_printer *p, const struct tree *t)
{
	if (t->n_orphans)
		fprintf(stderr,
		        "pmcctl: pid %" PRId32 ": %zu call path node%s named a parent not listed "
		        "before them: shown as roots\n",
		        t->pid, t->n_orphans, t->n_orphans == 1 ? "" : "s");
	if (p->on_tree) {
		p->on_tree(t, p->ctx);
	} else if (p->o->format == FORMAT_JSON) {
		if (p->n_procs)
			fputs(",\n", stdout);
		else
			printf("%s\n", tree_json_open(p));
		tree_json(p, t, p->dump ? 4 : 2);
	} else if (p->o->format == FORMAT_CSV) {
		tree_csv(p, t);
	} else {
		tree_table(p, t);
	}
	p->n_procs++;
}

/* A process with untracked samples but no node (an older client's): its pid and those lines
 * in a table, {"pid","untracked","tree":[]} in JSON (its comm and uid are not known);
 * nothing in CSV nor to @p->on_tree (folded stacks), nor with --region. */
static void
tree_emit_bare(struct tree_printer *p, int32_t pid)
{
	if (p->on_tree || p->o->n_regions || p->o->format == FORMAT_CSV)
		return;
	if (p->o->format == FORMAT_JSON) {
		json_t *proc = output_jobject();
		json_t *untracked = output_jobject();

		output_jset(proc, "pid", json_integer(pid));
		for (size_t i = 0; i < p->n_untracked; i++)
			if (p->untracked[i].pid == pid)
				output_jset(untracked, p->untracked[i].reason,
				            output_ju64(p->untracked[i].count));
		output_jset(proc, "untracked", untracked);
		output_jset(proc, "tree", output_jarray());
		if (p->n_procs)
			fputs(",\n", stdout);
		else
			printf("%s\n", tree_json_open(p));
		output_json_print_indented(proc, p->dump ? 4 : 2);
	} else {
		printf("%spid %" PRId32 ": no call path node\n", p->n_procs || p->dump ? "\n" : "",
		       pid);
		untracked_lines(p, pid);
	}
	p->n_procs++;
}

/* Shows the processes whose untracked samples are listed but no node, and forgets them:
 * those of every pid but @pending's (the process whose nodes may go on in the next part;
 * NULL: none). A process's untracked samples come after its nodes. */
static void
untracked_flush(struct tree_printer *p, const int32_t *pending)
{
	while (p->n_untracked) {
		size_t i = 0;

		while (i < p->n_untracked && pending && p->untracked[i].pid == *pending)
			i++;
		if (i == p->n_untracked)
			return;
		int32_t pid = p->untracked[i].pid;
		tree_emit_bare(p, pid);
		untracked_forget(p, pid);
	}
}

/* Shows @t, ended, when it has nodes --region selects; frees it. */
static void
tree_show(struct tree_printer *p, struct tree *t)
{
	size_t selected = tree_select(t, p->o->regions, p->o->n_regions);

	p->n_nodes += t->n;
	p->n_selected += selected;
	if (selected)
		tree_emit(p, t);
	untracked_forget(p, t->pid);
	tree_free(t);
}

/* Shows the trees of the nodes not shown yet (one process, or several of one pid); forgets
 * them. */
static void
tree_flush(struct tree_printer *p)
{
	for (size_t i = 0; i < p->n_held; i++)
		tree_show(p, &p->held[i]);
	p->n_held = 0;
	p->held_mem = 0;
	if (p->cur.n) {
		tree_finish(&p->cur);
		tree_show(p, &p->cur);
	}
	pending_clear(p);
}

/* Folds @q's nodes into their trees, shows those ended; returns what the trees set aside hold
 * beyond their nodes (held_mem). */
static uint64_t
tree_part(const Pmc__QueryReply *q, void *ctx)
{
	struct tree_printer *p = ctx;

	if (p->old_daemon)
		return 0;
	for (size_t i = 0; i < q->n_untracked; i++)
		untracked_add(p, q->untracked[i]);
	for (size_t i = 0; i < q->n_regions; i++) {
		Pmc__RegionStats *r = q->regions[i];

		if (!r->path) {
			p->old_daemon = true;
			pending_clear(p);
			return 0;
		}
		if (p->cur.n && r->pid != p->cur.pid)
			tree_flush(p);
		if (tree_add(&p->cur, r))
			continue;
		/* The pid again, a node id again: another process. */
		tree_finish(&p->cur);
		p->held = grow_held(p->held, &p->cap_held, p->n_held + 1);
		p->held[p->n_held++] = p->cur;
		p->held_mem += tree_overhead(&p->cur);
		tree_init(&p->cur, !p->on_tree);
		tree_add(&p->cur, r);
	}
	untracked_flush(p, p->cur.n ? &p->cur.pid : NULL);
	return p->held_mem;
}

/* Asks for the call path nodes of the processes @o selects and prints their trees (or hands
 * them to @p->on_tree) as @p says, process by process. Return: the reply's last part (visible,
 * hidden), the caller's to free. */
static Pmc__Response *
tree_stream(int sock, const char *what, const struct opts *o, struct tree_printer *p)
{
	Pmc__Query q;

	call_query_init(&q, o);
	/* The daemon lists every node of each process: --region picks the subtrees here. */
	q.tree = true;
	q.n_regions = 0;
	q.regions = NULL;
	q.region = (char *)protobuf_c_empty_string;
	tree_init(&p->cur, !p->on_tree);
	p->arena.block_size = 1 << 16;
	Pmc__Response *last = call_query_stream(sock, what, &q, o, tree_part, p);
	tree_flush(p);
	if (!p->old_daemon)
		untracked_flush(p, NULL);
	return last;
}

/* Exits 1: the daemon answered Query.tree with regions (it knows no trees). */
static void tree_old_daemon(const char *what) __attribute__((noreturn));

static void
tree_old_daemon(const char *what)
{
	pmcctl_fail("%s: this pmcdaemon is older than pmcctl: it records no call paths; upgrade it",
	            what);
}

/* Why nothing is shown of the @n_nodes listed, @end the reply's last part: no node with
 * samples in the subtrees of --region, none with samples at all, or no node listed. */
char *
tree_print_empty_reason(const struct opts *o, size_t n_nodes, const Pmc__QueryReply *end)
{
	struct opts procs = *o;
	char *why;
	int r;

	procs.n_regions = 0;
	if (n_nodes && o->n_regions) {
		_cleanup_free_ char *all = query_filters_text(o, true);

		r = asprintf(&why,
		             "no call path node with samples matches %s (%zu node%s listed: "
		             "without --region 'pmcctl query --tree' shows them)",
		             all, n_nodes, n_nodes == 1 ? "" : "s");
	} else if (n_nodes) {
		_cleanup_free_ char *sel = query_filters_text(&procs, false);

		r = asprintf(&why,
		             "no call path node has samples%s%s: the %zu listed were reset, and "
		             "have not run since",
		             sel[0] ? " for " : "", sel, n_nodes);
	} else if (end->visible) {
		_cleanup_free_ char *sel = query_filters_text(&procs, false);

		r = asprintf(&why,
		             "no call path node of a process that matches %s (%" PRIu32 " node%s "
		             "recorded that you may see: 'pmcctl query --tree' lists them)",
		             sel, end->visible, end->visible == 1 ? "" : "s");
	} else if (end->hidden) {
		query_empty_reason(end, &procs, &why);
		return why;
	} else {
		_cleanup_free_ char *sel = query_filters_text(&procs, false);

		r = asprintf(&why,
		             "no call paths recorded%s%s: no program has sent call paths to this "
		             "daemon since it started or was reset (a libpmcclient older than call "
		             "paths sends none: 'pmcctl query' lists its regions)",
		             sel[0] ? " for " : "", sel);
	}
	if (r < 0)
		pmcctl_oom();
	return why;
}

/* query --tree: the call path tree of each process @o selects, in @o's format. */
void
tree_print_query(int sock, const char *what, const struct opts *o)
{
	struct tree_printer p = {.o = o};
	_cleanup_response_ Pmc__Response *last = tree_stream(sock, what, o, &p);

	if (p.old_daemon)
		tree_old_daemon(what);
	_cleanup_free_ char *why =
	        p.n_procs ? NULL : tree_print_empty_reason(o, p.n_nodes, last->query);
	_cleanup_free_ char *safe = why ? output_escape_text(why) : NULL;
	if (o->format == FORMAT_JSON) {
		fputs(p.n_procs ? "\n]\n" : "[]\n", stdout);
	} else if (o->format == FORMAT_CSV) {
		tree_csv_head_print(&p);
	} else if (!why) {
		tree_table_notes(&p);
	}
	/* JSON and CSV stay what their readers parse; the reason is for the person. */
	if (why && o->format != FORMAT_TABLE)
		fprintf(stderr, "pmcctl: %s\n", safe);
	else if (why)
		puts(safe);
	tree_printer_free(&p);
}

/* dump's call path trees, after its regions, in @o's format (JSON or a table): JSON the
 * member "tree" (the document's last member written before, without its end), a table per
 * process. Nothing (JSON: "tree": []) where the daemon lists none. */
void
tree_print_dump(int sock, const char *what, const struct opts *o)
{
	struct tree_printer p = {.o = o, .dump = true};

	pmc__response__free_unpacked(tree_stream(sock, what, o, &p), NULL);
	if (o->format == FORMAT_JSON) {
		if (!p.n_procs)
			fputs(tree_json_open(&p), stdout);
		fputs(p.n_procs ? "\n  ]" : "]", stdout);
	} else if (p.n_procs) {
		tree_table_notes(&p);
	}
	tree_printer_free(&p);
}

/* The trees of the processes @o selects handed to @on_tree, for another command to print. */
Pmc__Response *
tree_print_reply_each(int sock, const char *what, const struct opts *o,
                      void (*on_tree)(const struct tree *t, void *ctx), void *ctx,
                      struct tree_counts *n)
{
	struct tree_printer p = {.o = o, .on_tree = on_tree, .ctx = ctx};
	Pmc__Response *last = tree_stream(sock, what, o, &p);

	if (p.old_daemon)
		tree_old_daemon(what);
	n->nodes = p.n_nodes;
	n->selected = p.n_selected;
	tree_printer_free(&p);
	return last;
}
