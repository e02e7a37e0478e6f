/* Figures for registries the unit tests build by hand (test-registry, test-scrape). */
#pragma once

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
