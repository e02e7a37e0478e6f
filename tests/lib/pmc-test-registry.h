/* Figures for registries the unit tests build by hand (test-registry, test-scrape). */
#pragma once

#include "model/ingest.h"
#include "model/registry.h"
#include "pmc-test.h"

/* @n runs of region @name of @p, each of wall time 100 ns and @v page faults, histogram
 * blocks charged to @budget (NULL: to nobody). */
static inline void
pmc_test_add_runs_to(struct registry *reg, struct process *p, const char *name, unsigned n,
                     uint64_t v, struct stats_budget *budget)
{
	struct region_agg *r = registry_process_region(reg, p, name);
	int id = registry_process_event_id(p, "page-faults");
	CHECK(r && id >= 0);
	struct event_agg *ev = registry_region_event(r, (size_t)id);
	CHECK(ev);
	for (unsigned i = 0; i < n; i++) {
		r->count++;
		CHECK(stats_add(&r->wall, 100, budget) == 0);
		CHECK(stats_add(&ev->st, v, budget) == 0);
	}
}

/* pmc_test_add_runs_to() charging nobody. */
static inline void
pmc_test_add_runs(struct registry *reg, struct process *p, const char *name, unsigned n, uint64_t v)
{
	pmc_test_add_runs_to(reg, p, name, n, v, NULL);
}

/* pmc_test_ingest_runs_to()'s resolver: every key is the region and its node in @ctx. */
static inline struct region_agg *
pmc_test_path_key(void *ctx, uint32_t key, struct region_agg **node)
{
	struct region_agg **rn = ctx;
	(void)key;
	*node = rn[1];
	return rn[0];
}

/* pmc_test_add_runs_to() as the daemon counts a batch of them (ingest_batch()), through
 * region @name's root call path node when @path: while that node holds every sample of the
 * region, the region reads its figures there (struct region_agg's via). */
static inline void
pmc_test_ingest_runs_to(struct registry *reg, struct process *p, const char *name, unsigned n,
                        uint64_t v, struct stats_budget *budget, bool path)
{
	struct region_agg *rn[2] = {registry_process_region(reg, p, name),
	                            path ? registry_process_path(reg, p, 0, name) : NULL};
	int id = registry_process_event_id(p, "page-faults");
	CHECK(rn[0] && (rn[1] || !path) && id >= 0 && n <= 64);
	uint32_t keys[64] = {0}, ev_id[1] = {(uint32_t)id};
	uint64_t wall[64], values[64];
	for (unsigned i = 0; i < n; i++)
		wall[i] = 100, values[i] = v;
	Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT;
	b.n_region = n, b.region = keys;
	b.n_wall_ns = n, b.wall_ns = wall;
	b.n_values = n, b.values = values;
	struct ingest g = {.b = &b,
	                   .keys = keys,
	                   .ev_id = ev_id,
	                   .ne = 1,
	                   .resolve = pmc_test_path_key,
	                   .ctx = rn,
	                   .budget = budget};
	CHECK(ingest_batch(&g) == 0 && g.counted == n);
}

/* pmc_test_ingest_runs_to() through the region's root node. */
static inline void
pmc_test_add_path_runs_to(struct registry *reg, struct process *p, const char *name, unsigned n,
                          uint64_t v, struct stats_budget *budget)
{
	pmc_test_ingest_runs_to(reg, p, name, n, v, budget, true);
}
