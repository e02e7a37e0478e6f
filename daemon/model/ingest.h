/* ingest: a checked SampleBatch counted into the aggregates of the data model (registry.h),
 * its samples' places resolved by the caller. Not thread-safe (one static key table: the
 * daemon is one thread, and no batch is counted inside another). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "model/batch.h"
#include "model/registry.h"
#include "model/stats.h"
#include "pmc.pb-c.h"
#include "wire/pmc-shared.h"

/* Keys a batch's samples may have: below this (the caller's key space: a call path id, or a
 * region id past the paths'). */
#define INGEST_KEYS (2u * (PMC_LIMIT_REGION_ID + 1u))

/**
 * struct ingest - one batch to count, and what counting it did
 * @b: the batch, borrowed, checked by the caller: n_wall_ns == n_region, n_values ==
 *     n_region * @ne, n_scaled 0 or n_region with no bit at or past @ne, n_scale_ratio the
 *     bits set in scaled
 * @cols: NULL, or where the batch's wall times and values lie when batch_scan() left them
 *        in place (then @b's arrays of them are not read): each sample is then counted as
 *        it is read, in one pass over them
 * @keys: each sample's key, below INGEST_KEYS (n_region of them), borrowed
 * @ev_id: the aggregate's event slot of each of the batch's @ne columns (registry_region_event())
 * @ne: the batch's events
 * @resolve: where the samples of key @key count: their region, or NULL where a limit
 *           refused it (the samples are then counted in @refused), and in *@node their call
 *           path's node, or NULL; called once or more per key, @ctx passed back
 * @ctx: for @resolve
 * @budget: what the histogram blocks the batch allocates are charged to (stats.h)
 * @carry: a batch counted in place may leave its sums unfolded, for the next batch of the
 *         same regions to count on in them (the divisions of the fold once for many
 *         batches): then the caller calls ingest_flush() before anything else reads or
 *         changes an aggregate (a region's statistics, its event slots, whether it shares its
 *         node's) or frees one, and before returning to its event loop; @ctx must stay valid
 *         until then (a NULL @ctx carries nothing: ingest_carried() names the batches by it).
 *         false: every batch is folded in whole before ingest_batch() returns
 * @counted: out: samples counted (set to 0 by the caller)
 * @refused: out: samples of refused regions, not counted (set to 0 by the caller)
 */
struct ingest {
	const Pmc__SampleBatch *b;
	const struct batch_cols *cols;
	const uint32_t *keys;
	const uint32_t *ev_id;
	size_t ne;
	struct region_agg *(*resolve)(void *ctx, uint32_t key, struct region_agg **node);
	void *ctx;
	struct stats_budget *budget;
	bool carry;
	size_t counted, refused;
};

/**
 * ingest_batch() - count the samples of @g->b into their regions and nodes
 *
 * Each sample adds one to its region's (and node's) count, its wall time and its values
 * (through the event slots @g->ev_id, created here as needed) to their statistics, and its
 * scaled events' ratios. A histogram block that cannot be allocated misses its samples
 * only, every other figure still counts them (stats.h).
 * Return: 0, or -ENOMEM when an event slot or a work array could not be allocated: then the
 * batch may be counted in part, as @g->counted and @g->refused say.
 */
int ingest_batch(struct ingest *g);

/**
 * ingest_flush() - fold in what batches counted with @carry left unfolded
 *
 * Every figure of their regions and nodes is then whole: their histograms (which counted each
 * nonzero value at once) get the zeros, and the sums, extremes and moments agree with the
 * count again. Nothing fails. The zeros' histogram block may be allocated here, charged to
 * the batches' budget (a block it refuses misses them, in its @missed, as in a batch).
 * Nothing to do (and cheap) when nothing is left. ingest_batch() calls it itself before a
 * batch it does not count on in the same tallies.
 * Threads: the daemon's one (the tallies left are one static set). Fork: call it first where
 * a child is to see the figures whole.
 */
void ingest_flush(void);

/**
 * ingest_carried() - the @ctx of the batches whose tallies wait for ingest_flush(), or NULL
 * when none do (for the caller to say what the flush's histogram blocks missed)
 */
void *ingest_carried(void);
