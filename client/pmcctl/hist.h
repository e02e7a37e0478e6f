/* hist.c: pmcctl hist, one region's distribution drawn from the daemon's histogram; and the
 * buckets of histograms gathered from several figures, which diff merges too. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "pmcctl/pmcctl.h"

/** cmd_hist() - pmcctl hist (the contract of struct command in pmcctl.h): one region's distribution
 * as a bar chart (--region needed, --event chooses) */
int cmd_hist(int sock, const struct command *cmd, const struct opts *o);

/* A histogram's buckets gathered from several figures (diff's too). */
struct bucket {
	uint64_t low, high, count;
};

struct hist {
	struct bucket *v; /* the caller frees it */
	size_t n, cap;
	uint64_t count; /* runs */
	size_t regions; /* (process, region) aggregates merged */
};

/** hist_push() - add to @h a bucket of @count runs from @low to @high; exits on allocation
 * failure */
void hist_push(struct hist *h, uint64_t low, uint64_t high, uint64_t count);

/** hist_merge() - sort the buckets of @h by value and add up those of the same bounds */
void hist_merge(struct hist *h);
