/* tree-print.c: a Query.tree reply read process by process, and its trees printed (query
 * --tree, dump's trees; flamegraph reads the reply through tree_print_reply_each()). */
#pragma once

#include <stddef.h>

#include "pmc.pb-c.h"
#include "pmcctl/pmcctl.h"
#include "pmcctl/tree.h"

/**
 * tree_print_query() - query --tree: ask @sock (borrowed) for the call path nodes of the processes
 * @o selects and print the tree of each, the subtrees --region selects, in @o->format, as
 * the reply's parts arrive; when none is shown, say why (on stderr in JSON and CSV)
 * @what: names the command in messages
 * Exits 1 when the daemon records no call paths (older than pmcctl), and on any failure,
 * saying why.
 */
void tree_print_query(int sock, const char *what, const struct opts *o);

/**
 * tree_print_dump() - dump's call path trees, after its regions, in @o->format: a table per
 * process (with their notes), or in JSON the member "tree" of the document whose last member
 * was written before without its end (the caller closes it); nothing (JSON: "tree": [])
 * where the daemon lists none, an older daemon's too
 * @sock, @what: as tree_print_query()'s; exits on any failure, saying why.
 */
void tree_print_dump(int sock, const char *what, const struct opts *o);

/* What a tree reply listed, for messages (tree_print_empty_reason()). */
struct tree_counts {
	size_t nodes;    /* the nodes listed */
	size_t selected; /* those in the subtrees --region selects */
};

/**
 * tree_print_reply_each() - ask @sock (borrowed) for the call path nodes of the processes @o
 * selects and hand the tree of each process with nodes --region selects to
 * @on_tree(t, @ctx) as its last node arrives (after a line on stderr when it has orphans);
 * @t is freed after the callback returns. Nothing is printed to stdout.
 * @what: names the command in messages
 * @n: set to the nodes listed and selected
 * Return: the reply's last part (its visible and hidden), the caller's to free
 * (_cleanup_response_); exits 1 when the daemon records no call paths (older than pmcctl),
 * and on any failure, saying why.
 */
Pmc__Response *tree_print_reply_each(int sock, const char *what, const struct opts *o,
                                     void (*on_tree)(const struct tree *t, void *ctx), void *ctx,
                                     struct tree_counts *n);

/**
 * tree_print_empty_reason() - why a tree reply shows nothing, with the filters of @o: no node with
 * samples in the subtrees of --region, none with samples at all (they were reset), or no
 * node listed
 * @n_nodes: the nodes listed (struct tree_counts)
 * @end: the reply's last part (its visible and hidden), borrowed
 * Return: a sentence, the caller's to free; exits on allocation failure.
 */
char *tree_print_empty_reason(const struct opts *o, size_t n_nodes, const Pmc__QueryReply *end);
