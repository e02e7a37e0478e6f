/* pprof.c: query, dump and run with --format pprof, a gzip-compressed profile.proto of
 * google/pprof. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "pmc.pb-c.h"
#include "pmcctl/pmcctl.h"

struct whole;

/** pprof_cmd() - query and dump with --format pprof: the regions and call path trees of the
 * processes @o selects written to stdout as a gzip-compressed pprof profile (pprof_write()) */
int pprof_cmd(int sock, const struct command *cmd, const struct opts *o);

/**
 * pprof_write() - write to stdout a gzip-compressed pprof profile.proto of @tree's call path
 * nodes (a Query.tree reply; NULL: none) and of what they do not hold of @flat's regions
 * (the reply of the same Query without tree)
 * @o: --region selects the subtrees, as in query --tree
 * @keep: NULL, or whether the figures of process @pid go in (run's processes)
 * @ctx: passed to @keep
 * Each selected node is a sample: its stack the node's path, leaf first, under a frame named
 * after its program; its values the node's self figures (calls, wall/nanoseconds, one per
 * event, in the order they are first met); labels pid, comm, uid, container (the cgroup path)
 * and, per multiplexed event, multiplexed. A region's calls and sums that no node holds
 * (older clients, path-limit) are a sample of two frames, labelled call_path=untracked.
 * @whole: NULL, or run's whole-program figures (borrowed): samples of the frame
 * "(whole program)" under the command's name (@o->argv[0]), label call_path=whole-program:
 * one per process where a single run ran several (the wall time on the command's own), else
 * one of the sums over the runs (calls: the runs)
 * Both replies are borrowed. Exits on allocation or write failure, saying why.
 */
void pprof_write(const Pmc__QueryReply *flat, const Pmc__QueryReply *tree, const struct opts *o,
                 bool (*keep)(int32_t pid, void *ctx), void *ctx, const struct whole *whole);
