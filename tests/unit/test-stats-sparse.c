/* Unit tests for the sparse histogram of daemon/model/stats.c: blocks only for the groups samples
 * fall in, stats_memory() of what is allocated, every result equal to a dense reference
 * histogram (counts, quantiles, merges of disjoint and overlapping groups), stats_reset()
 * keeping the blocks zeroed, allocation failures that leave the aggregate consistent, and the
 * state file (daemon/model/state.c) written and read back through the same sparse (index, count)
 * pairs. Prints "ok N - name" per test; exits 1 at the first failed check. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "pmc-test.h"

/* The histograms' allocator, able to fail on demand (stats_set_realloc()). */
static long realloc_ok = -1; /* reallocs that still succeed; -1: all of them */
static unsigned long n_reallocs;

static void *
test_realloc(void *p, size_t size)
{
	n_reallocs++;
	if (realloc_ok == 0)
		return NULL;
	if (realloc_ok > 0)
		realloc_ok--;
	return realloc(p, size);
}

#include "model/model.h"
#include "model/registry.h"
#include "model/state.h"
#include "model/stats.h"
#include "pmc.pb-c.h"

/* The 16 counters of group @g's block, or NULL when it has none: the layout struct
 * stats_hist documents (stats.h), written here independently of stats.c. */
static const uint64_t *
stats_hist_block(const struct stats_hist *h, unsigned g)
{
	unsigned k = h->slot[g];

	return k ? &h->c[8u * k + STATS_GROUP_BUCKETS * g - 16u * STATS_SLOT_BIAS] : NULL;
}

#define POW2(k) (UINT64_C(1) << (k))

#define RUN(fn) PMC_TEST_RUN(fn)

#define rng_next pmc_test_rng

/* The histogram as it was before it went sparse: every bucket, in one array. */
struct dense {
	uint64_t c[STATS_BUCKETS];
};

static void
dense_add(struct dense *d, uint64_t v)
{
	d->c[stats_bucket(v)]++;
}

static void
dense_merge(struct dense *into, const struct dense *from)
{
	for (unsigned i = 0; i < STATS_BUCKETS; i++)
		into->c[i] = util_sat_add(into->c[i], from->c[i]);
}

/* @x within @s's [min, max]. */
static double
ref_clamp(const struct stats *s, double x)
{
	return x < (double)s->min ? (double)s->min : x > (double)s->max ? (double)s->max : x;
}

/* The nearest rank ceil(q * n), within [1, n]; a product a few ulps past an integer (0.29 *
 * 100 = 29.000000000000004) is that integer. */
static uint64_t
ref_rank(double q, uint64_t n)
{
	double x = q * (double)n, r = ceil(x);
	if (r - x > 1.0 - 4.0 * DBL_EPSILON * fmax(x, 1.0))
		r -= 1.0;
	return r < 1.0 ? 1 : r >= (double)n ? n : (uint64_t)r;
}

/* stats_quantile() over a dense histogram, with the scalars of @s: the reference. */
static double
dense_quantile(const struct stats *s, const struct dense *d, double q)
{
	uint64_t n = 0, rank, seen = 0, lo, hi, mid;
	unsigned i;

	if (s->count == 0)
		return 0;
	if (!(q > 0) || s->min == s->max)
		return (double)s->min;
	if (q >= 1)
		return (double)s->max;
	for (i = 0; i < STATS_BUCKETS; i++)
		n = util_sat_add(n, d->c[i]);
	if (n == 0)
		return ref_clamp(s, s->mean);
	rank = ref_rank(q, n);
	for (i = 0; i < STATS_BUCKETS; i++) {
		seen = util_sat_add(seen, d->c[i]);
		if (seen >= rank)
			break;
	}
	if (i == STATS_BUCKETS)
		i = STATS_BUCKETS - 1u;
	lo = stats_bucket_low(i);
	hi = stats_bucket_high(i);
	mid = lo + (hi - lo) / 2u;
	if (mid < s->min)
		mid = s->min;
	if (mid > s->max)
		mid = s->max;
	return (double)mid;
}

/* Groups with a block in @s's histogram. */
static uint64_t
block_groups(const struct stats *s)
{
	uint64_t m = 0;

	for (unsigned g = 0; s->hist && g < STATS_GROUPS; g++)
		if (stats_hist_block(s->hist, g))
			m |= POW2(g);
	return m;
}

/* Groups in which @d has a nonzero counter. */
static uint64_t
dense_groups(const struct dense *d)
{
	uint64_t m = 0;

	for (unsigned i = 0; i < STATS_BUCKETS; i++)
		if (d->c[i])
			m |= POW2(i / STATS_GROUP_BUCKETS);
	return m;
}

static size_t
mem_for(unsigned blocks)
{
	return blocks ? sizeof(struct stats_hist) + blocks * STATS_GROUP_BUCKETS * sizeof(uint64_t)
	              : 0;
}

/* The block index a group's slot names (struct stats_hist). */
static unsigned
slot_block(const struct stats_hist *h, unsigned g)
{
	CHECK(h->slot[g] && h->slot[g] % 2 == 0);
	return h->slot[g] / 2u + g - STATS_SLOT_BIAS;
}

/*
 * @s against @d: the same count in every bucket, a well-formed table (each block owned by one
 * group, @n of them, a block for exactly the groups in @groups), stats_memory() of what is
 * allocated, and the reference quantiles to the last bit.
 */
static void
check_hist(const struct stats *s, const struct dense *d, uint64_t groups)
{
	static const double qs[] = {-1,   0,   1e-9, 0.001, 0.01,  0.05,     0.1, 0.25, 0.5,
	                            0.75, 0.9, 0.95, 0.99,  0.999, 1 - 1e-9, 1,   2,    NAN};
	const struct stats_hist *h = s->hist;
	unsigned owner[STATS_GROUPS], blocks = 0;

	for (unsigned i = 0; i < STATS_BUCKETS; i++)
		CHECK(stats_hist_get(s, i) == d->c[i]);
	CHECK(block_groups(s) == groups);
	if (h) {
		memset(owner, 0, sizeof(owner));
		for (unsigned g = 0; g < STATS_GROUPS; g++) {
			const uint64_t *blk = stats_hist_block(h, g);
			unsigned k;

			if (!blk)
				continue;
			k = slot_block(h, g);
			CHECK(k < h->n && owner[k] == 0 && blk == &h->c[k * STATS_GROUP_BUCKETS]);
			owner[k] = g + 1;
			blocks++;
			for (unsigned j = 0; j < STATS_GROUP_BUCKETS; j++)
				CHECK(blk[j] == d->c[g * STATS_GROUP_BUCKETS + j]);
		}
		CHECK(blocks == h->n && blocks > 0);
	}
	CHECK(stats_memory(s) == mem_for(blocks));
	for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++)
		CHECK(stats_quantile(s, qs[i]) == dense_quantile(s, d, qs[i]));
	for (unsigned i = 1; i < 1000; i++)
		CHECK(stats_quantile(s, i / 1000.0) == dense_quantile(s, d, i / 1000.0));
}

/* A value in group @g (0..STATS_GROUPS-1), anywhere in it. */
static uint64_t
in_group(unsigned g, uint64_t r)
{
	if (g == 0)
		return r % 16;
	/* Group g >= 1: highest bit g + 3. */
	return POW2(g + 3) | (r & (POW2(g + 3) - 1));
}

/* @n values in the groups of @mask, chosen at random. */
static void
values_in(uint64_t *v, size_t n, uint64_t mask, uint64_t *seed)
{
	unsigned gs[STATS_GROUPS], ng = 0;

	for (unsigned g = 0; g < STATS_GROUPS; g++)
		if (mask & POW2(g))
			gs[ng++] = g;
	CHECK(ng > 0);
	for (size_t i = 0; i < n; i++)
		v[i] = in_group(gs[rng_next(seed) % ng], rng_next(seed));
}

static void
test_group_of_values(void)
{
	/* The storage groups follow the bucket layout: group g is buckets 16g..16g+15. */
	CHECK(STATS_GROUPS == 61 && STATS_GROUP_BUCKETS == 16);
	CHECK(sizeof(struct stats_hist) == 64);
	for (unsigned g = 0; g < STATS_GROUPS; g++) {
		CHECK(stats_bucket(in_group(g, 0)) / STATS_GROUP_BUCKETS == g);
		CHECK(stats_bucket(in_group(g, UINT64_MAX)) / STATS_GROUP_BUCKETS == g);
		CHECK(stats_bucket_low(g * STATS_GROUP_BUCKETS) == in_group(g, 0));
	}
	CHECK(stats_bucket(UINT64_MAX) / STATS_GROUP_BUCKETS == STATS_GROUPS - 1);
}

static void
test_blocks_where_values_fall(void)
{
	struct stats s;
	struct dense d = {{0}};

	stats_init(&s);
	CHECK(stats_memory(&s) == 0 && s.hist == NULL);
	CHECK(stats_add(&s, 5, NULL) == 0);
	dense_add(&d, 5);
	CHECK(s.hist && s.hist->n == 1 && slot_block(s.hist, 0) == 0);
	CHECK(stats_memory(&s) == 64 + 128);
	/* More in group 0: no block more. */
	for (uint64_t v = 0; v < 16; v++) {
		CHECK(stats_add(&s, v, NULL) == 0);
		dense_add(&d, v);
	}
	CHECK(s.hist->n == 1 && stats_memory(&s) == 64 + 128);
	check_hist(&s, &d, 1);
	/* 16 opens group 1, 2^40 group 37, UINT64_MAX group 60, each once. */
	CHECK(stats_add(&s, 16, NULL) == 0 && stats_add(&s, 31, NULL) == 0);
	CHECK(stats_add(&s, POW2(40), NULL) == 0 && stats_add(&s, POW2(41) - 1, NULL) == 0);
	CHECK(stats_add(&s, UINT64_MAX, NULL) == 0 && stats_add(&s, POW2(63), NULL) == 0);
	dense_add(&d, 16);
	dense_add(&d, 31);
	dense_add(&d, POW2(40));
	dense_add(&d, POW2(41) - 1);
	dense_add(&d, UINT64_MAX);
	dense_add(&d, POW2(63));
	CHECK(s.hist->n == 4);
	/* Blocks in the order their groups were met; the extreme slots, 2 * (64 + j - g). */
	CHECK(slot_block(s.hist, 1) == 1 && slot_block(s.hist, 37) == 2);
	CHECK(slot_block(s.hist, 60) == 3 && s.hist->slot[60] == 2 * (64 + 3 - 60));
	CHECK(s.hist->slot[0] == 2 * 64);
	CHECK(stats_memory(&s) == 64 + 4 * 128);
	check_hist(&s, &d, POW2(0) | POW2(1) | POW2(37) | POW2(60));
	stats_free(&s);
	CHECK(s.hist == NULL && stats_memory(&s) == 0);

	/* Every group, met from the last to the first: the slots span 8 (group 60, block 0) to
	 * 248 (group 0, block 60); the most a histogram takes. */
	memset(&d, 0, sizeof(d));
	for (unsigned g = STATS_GROUPS; g-- > 0;) {
		uint64_t v = in_group(g, UINT64_C(0x5555555555555555) * g);

		CHECK(stats_add(&s, v, NULL) == 0 && stats_add(&s, in_group(g, 0), NULL) == 0);
		dense_add(&d, v);
		dense_add(&d, in_group(g, 0));
		CHECK(slot_block(s.hist, g) == STATS_GROUPS - 1 - g);
	}
	CHECK(s.hist->slot[60] == 8 && s.hist->slot[0] == 248);
	CHECK(stats_memory(&s) == 64 + STATS_GROUPS * 128);
	check_hist(&s, &d, POW2(STATS_GROUPS) - 1);
	stats_free(&s);
}

/* Random streams in random few groups, through stats_add() and through accumulators (one
 * per piece, gathered in a scrambled order): blocks for exactly those groups, the dense
 * reference's counts and quantiles. */
static void
test_random_streams(void)
{
	const size_t n = 3000;
	uint64_t *v = malloc(n * sizeof(*v)), seed = 11;
	uint32_t *idx = malloc(n * sizeof(*idx));

	CHECK(v && idx);
	for (unsigned round = 0; round < 300; round++) {
		uint64_t mask = 0;
		unsigned ng = 1 + (unsigned)(rng_next(&seed) % 6);
		size_t len = 1 + (size_t)(rng_next(&seed) % n);
		struct stats s, t;
		struct stats_acc a;
		struct dense d = {{0}};

		/* Groups whose values stay below 2^53 for the accumulators. */
		for (unsigned k = 0; k < ng; k++)
			mask |= POW2(rng_next(&seed) % 50);
		values_in(v, len, mask, &seed);
		stats_init(&s);
		stats_init(&t);
		for (size_t i = 0; i < len; i++) {
			CHECK(stats_add(&s, v[i], NULL) == 0);
			dense_add(&d, v[i]);
		}
		check_hist(&s, &d, dense_groups(&d));
		for (size_t i = 0; i < len;) {
			size_t piece = 1 + (size_t)(rng_next(&seed) % 700), k = 0;

			if (piece > len - i)
				piece = len - i;
			for (size_t j = 0; j < piece; j++)
				idx[k++] = (uint32_t)((j * 7) % piece);
			/* (j * 7) % piece repeats rows when 7 divides piece: use every row. */
			if (piece % 7 == 0)
				for (size_t j = 0; j < piece; j++)
					idx[j] = (uint32_t)(piece - 1 - j);
			stats_acc_begin(&a, &t, v[i], NULL);
			if (round % 2)
				stats_acc_gather(&a, v + i, 1, idx, k);
			else
				for (size_t j = 0; j < k; j++)
					stats_acc_add(&a, v[i + idx[j]]);
			stats_acc_fold(&t, &a);
			i += piece;
		}
		CHECK(t.count == s.count && t.sum == s.sum && t.min == s.min && t.max == s.max);
		check_hist(&t, &d, dense_groups(&d));
		stats_free(&s);
		stats_free(&t);
	}
	free(idx);
	free(v);
}

static void
fill(struct stats *s, struct dense *d, uint64_t mask, size_t n, uint64_t *seed)
{
	uint64_t *v = malloc(n * sizeof(*v));

	CHECK(v);
	values_in(v, n, mask, seed);
	for (size_t i = 0; i < n; i++) {
		CHECK(stats_add(s, v[i], NULL) == 0);
		dense_add(d, v[i]);
	}
	free(v);
}

/* @a merged with @b (groups @ma and @mb) against the dense reference and one aggregate that
 * took every sample; @b is left as it was. */
static void
check_merge(uint64_t ma, uint64_t mb, uint64_t *seed)
{
	struct stats a, b, whole;
	struct dense da = {{0}}, db = {{0}}, dw = {{0}};
	struct stats_hist *bh;
	uint64_t s1 = *seed, s2;
	size_t bmem;

	stats_init(&a);
	stats_init(&b);
	stats_init(&whole);
	fill(&a, &da, ma, 500, seed);
	s2 = *seed;
	fill(&b, &db, mb, 300, seed);
	fill(&whole, &dw, ma, 500, &s1);
	fill(&whole, &dw, mb, 300, &s2);
	bh = b.hist;
	bmem = stats_memory(&b);
	CHECK(stats_merge(&a, &b, NULL) == 0);
	dense_merge(&da, &db);
	CHECK(memcmp(&da, &dw, sizeof(da)) == 0);
	check_hist(&a, &da, ma | mb);
	CHECK(stats_memory(&a) == mem_for((unsigned)__builtin_popcountll(ma | mb)));
	/* The same quantiles as one aggregate of every sample. */
	check_hist(&whole, &da, ma | mb);
	CHECK(a.count == whole.count && a.sum == whole.sum);
	CHECK(a.min == whole.min && a.max == whole.max);
	CHECK(b.hist == bh && stats_memory(&b) == bmem);
	check_hist(&b, &db, mb);
	stats_free(&a);
	stats_free(&b);
	stats_free(&whole);
}

static void
test_merge_groups(void)
{
	uint64_t seed = 3;
	struct stats a, e;
	struct dense d = {{0}}, d2;

	/* Disjoint, overlapping, nested, equal. */
	check_merge(POW2(0) | POW2(5), POW2(10) | POW2(60), &seed);
	check_merge(POW2(1) | POW2(2) | POW2(3), POW2(2) | POW2(3) | POW2(4), &seed);
	check_merge(POW2(7) | POW2(8) | POW2(9) | POW2(30), POW2(8), &seed);
	check_merge(POW2(12) | POW2(13), POW2(12) | POW2(13), &seed);
	/* Random sets of groups, each with one group at least. */
	for (unsigned i = 0; i < 100; i++) {
		uint64_t ma = rng_next(&seed) & rng_next(&seed) & (POW2(STATS_GROUPS) - 1);
		uint64_t mb = rng_next(&seed) & rng_next(&seed) & (POW2(STATS_GROUPS) - 1);

		check_merge(ma | POW2(i % STATS_GROUPS), mb | POW2((i * 7) % STATS_GROUPS), &seed);
	}

	/* Into an empty aggregate: a block per group of the other, none more. */
	stats_init(&a);
	stats_init(&e);
	fill(&a, &d, POW2(4) | POW2(44), 100, &seed);
	CHECK(stats_merge(&e, &a, NULL) == 0);
	check_hist(&e, &d, POW2(4) | POW2(44));
	CHECK(e.hist != a.hist && stats_memory(&e) == 64 + 2 * 128);

	/* Into itself: every counter doubles, no block added, nothing moves. */
	{
		struct stats_hist *h = a.hist;

		d2 = d;
		dense_merge(&d2, &d);
		CHECK(stats_merge(&a, &a, NULL) == 0);
		CHECK(a.hist == h && a.count == 200);
		check_hist(&a, &d2, POW2(4) | POW2(44));
	}

	/* Blocks zeroed by stats_reset() bring no block along. */
	stats_reset(&a);
	memset(&d, 0, sizeof(d));
	CHECK(stats_add(&a, 3, NULL) == 0);
	dense_add(&d, 3);
	CHECK(block_groups(&a) == (POW2(0) | POW2(4) | POW2(44)));
	stats_free(&e);
	stats_init(&e);
	CHECK(stats_merge(&e, &a, NULL) == 0);
	check_hist(&e, &d, POW2(0));

	/* Counters saturate bucket by bucket. */
	CHECK(stats_hist_set(&e, 7, UINT64_MAX - 1, NULL) == 0);
	CHECK(stats_hist_set(&a, 7, 5, NULL) == 0);
	CHECK(stats_merge(&e, &a, NULL) == 0);
	CHECK(stats_hist_get(&e, 7) == UINT64_MAX && stats_hist_get(&e, 3) == 2);
	stats_free(&a);
	stats_free(&e);
}

static void
test_reset_keeps_blocks(void)
{
	struct stats s;
	struct stats_hist *h;
	uint8_t slot[STATS_GROUPS];
	struct dense d = {{0}};
	unsigned long before;
	uint64_t seed = 9;

	stats_init(&s);
	fill(&s, &d, POW2(0) | POW2(9) | POW2(20), 1000, &seed);
	h = s.hist;
	memcpy(slot, h->slot, sizeof(slot));
	stats_reset(&s);
	/* Kept, zeroed: same table, same memory, no count. */
	CHECK(s.hist == h && s.hist->n == 3 && memcmp(slot, h->slot, sizeof(slot)) == 0);
	CHECK(stats_memory(&s) == 64 + 3 * 128);
	CHECK(s.count == 0 && s.sum == 0 && s.min == 0 && s.max == 0);
	for (unsigned i = 0; i < STATS_BUCKETS; i++)
		CHECK(stats_hist_get(&s, i) == 0);
	CHECK(stats_quantile(&s, 0.5) == 0);
	/* Refilled in the same groups: nothing allocated, as a fresh aggregate. */
	memset(&d, 0, sizeof(d));
	before = n_reallocs;
	fill(&s, &d, POW2(9) | POW2(20), 400, &seed);
	CHECK(n_reallocs == before && s.hist == h);
	for (unsigned i = 0; i < STATS_BUCKETS; i++)
		CHECK(stats_hist_get(&s, i) == d.c[i]);
	CHECK(stats_quantile(&s, 0.5) == dense_quantile(&s, &d, 0.5));
	/* A new group: one block more. */
	fill(&s, &d, POW2(33), 10, &seed);
	CHECK(n_reallocs == before + 1 && s.hist->n == 4 && stats_memory(&s) == 64 + 4 * 128);
	check_hist(&s, &d, POW2(0) | POW2(9) | POW2(20) | POW2(33));
	stats_free(&s);
	CHECK(s.hist == NULL && stats_memory(&s) == 0);
	stats_reset(&s);
	CHECK(s.hist == NULL);
}

static void
test_hist_set_get(void)
{
	struct stats s;

	stats_init(&s);
	CHECK(stats_hist_get(&s, 0) == 0 && stats_hist_get(&s, STATS_BUCKETS - 1) == 0);
	CHECK(stats_hist_set(&s, STATS_BUCKETS, 1, NULL) == -EINVAL);
	CHECK(stats_hist_set(&s, 100, 0, NULL) == 0 && s.hist == NULL);
	CHECK(stats_hist_add(&s, 100, 0, NULL) == 0 && s.hist == NULL);
	CHECK(stats_hist_set(&s, 100, 42, NULL) == 0 && stats_hist_get(&s, 100) == 42);
	CHECK(s.hist->n == 1 && slot_block(s.hist, 100 / 16) == 0);
	CHECK(stats_hist_set(&s, 101, 0, NULL) == 0 && stats_hist_get(&s, 101) == 0);
	CHECK(stats_hist_set(&s, 100, 7, NULL) == 0 && stats_hist_get(&s, 100) == 7);
	CHECK(stats_hist_add(&s, 100, 3, NULL) == 0 && stats_hist_get(&s, 100) == 10);
	CHECK(stats_hist_add(&s, STATS_BUCKETS - 1, 2, NULL) == 0);
	CHECK(stats_hist_get(&s, STATS_BUCKETS - 1) == 2 && s.hist->n == 2);
	/* Set to 0, the block stays. */
	CHECK(stats_hist_set(&s, 100, 0, NULL) == 0 && s.hist->n == 2);
	stats_free(&s);
}

/* Allocation failures: the aggregate stays consistent, every scalar counts the samples, only
 * the histogram misses those of the groups whose block could not be allocated. */
static void
test_alloc_failure(void)
{
	struct stats s, t, w;
	struct stats_acc a;
	struct stats_hist *h;
	struct dense d = {{0}};
	uint64_t v[64];
	uint32_t idx[64];

	/* No histogram at all: as an aggregate whose histogram allocation failed before. */
	stats_init(&s);
	realloc_ok = 0;
	CHECK(stats_add(&s, 10, NULL) == -ENOMEM && stats_add(&s, 1000, NULL) == -ENOMEM);
	CHECK(s.count == 2 && s.sum == 1010 && s.min == 10 && s.max == 1000 && s.hist == NULL);
	CHECK(stats_memory(&s) == 0);
	CHECK(stats_quantile(&s, 0.5) == 505 && stats_quantile(&s, 1) == 1000);
	realloc_ok = -1;

	/* Later samples get blocks again; the missed ones stay missed. */
	CHECK(stats_add(&s, 1000, NULL) == 0);
	dense_add(&d, 1000);
	CHECK(s.count == 3 && s.hist->n == 1);
	check_hist(&s, &d, POW2(stats_bucket(1000) / 16));

	/* A new group fails: the table does not move, count/sum/min/max still move. */
	h = s.hist;
	realloc_ok = 0;
	CHECK(stats_add(&s, 3, NULL) == -ENOMEM);
	CHECK(stats_add(&s, 1001, NULL) == 0); /* its group has a block: no allocation */
	dense_add(&d, 1001);
	realloc_ok = -1;
	CHECK(s.hist == h && s.count == 5 && s.sum == 3014 && s.min == 3 && s.max == 1001);
	check_hist(&s, &d, POW2(stats_bucket(1000) / 16));

	/* Accumulators: every sample in the scalars, in the histogram where blocks exist or
	 * could be allocated (here the first new group of the batch, not the next two). */
	stats_init(&w);
	for (unsigned i = 0; i < 64; i++) {
		/* 600 + i: 1000's group; 100000 + i: a new one; 7 and 2^30: two more. */
		v[i] = i % 4 == 0 ? 600 + i : i % 4 == 1 ? 100000 + i : i % 4 == 2 ? 7 : POW2(30);
		idx[i] = i;
		CHECK(stats_add(&w, v[i], NULL) == 0);
	}
	realloc_ok = 1;
	stats_acc_begin(&a, &s, v[0], NULL);
	stats_acc_gather(&a, v, 1, idx, 64);
	realloc_ok = -1;
	stats_acc_fold(&s, &a);
	/* The first new group met is 100000's (sample 1). */
	for (unsigned i = 0; i < 64; i++)
		if (i % 4 == 0 || i % 4 == 1)
			dense_add(&d, v[i]);
	CHECK(s.count == 5 + 64 && s.min == 3 && s.max == POW2(30));
	CHECK(s.sum == 3014 + w.sum);
	check_hist(&s, &d, POW2(stats_bucket(1000) / 16) | POW2(stats_bucket(100000) / 16));

	/* stats_acc_add() the same way. */
	stats_init(&t);
	realloc_ok = 0;
	stats_acc_begin(&a, &t, 5, NULL);
	stats_acc_add(&a, 5);
	stats_acc_add(&a, 6);
	realloc_ok = -1;
	stats_acc_fold(&t, &a);
	CHECK(t.count == 2 && t.sum == 11 && t.hist == NULL);
	CHECK(stats_quantile(&t, 0.5) == 5.5);

	/* Merge: the scalars merge, the groups that get a block merge, the others are lost. */
	stats_free(&t);
	stats_init(&t);
	CHECK(stats_add(&t, 1002, NULL) == 0 && stats_add(&t, 9, NULL) == 0 &&
	      stats_add(&t, POW2(50), NULL) == 0);
	realloc_ok = 1;
	CHECK(stats_merge(&s, &t, NULL) == -ENOMEM);
	realloc_ok = -1;
	dense_add(&d, 1002); /* its group had a block */
	dense_add(&d, 9);    /* group 0: the one allocation that succeeded */
	CHECK(s.count == 5 + 64 + 3 && s.max == POW2(50) && s.min == 3);
	check_hist(&s, &d,
	           POW2(0) | POW2(stats_bucket(1000) / 16) | POW2(stats_bucket(100000) / 16));

	/* stats_hist_set(): -ENOMEM, nothing changed. */
	h = s.hist;
	realloc_ok = 0;
	CHECK(stats_hist_set(&s, STATS_BUCKETS - 1, 4, NULL) == -ENOMEM);
	CHECK(stats_hist_set(&s, 5, 4, NULL) == 0); /* group 0 has its block */
	realloc_ok = -1;
	d.c[5] = 4;
	CHECK(s.hist == h);
	check_hist(&s, &d,
	           POW2(0) | POW2(stats_bucket(1000) / 16) | POW2(stats_bucket(100000) / 16));
	stats_free(&s);
	stats_free(&t);
	stats_free(&w);
}

/* --- the state file (daemon/model/state.c) --- */

static struct region_agg *
make_region(struct registry *reg, struct process *p, const char *name)
{
	struct region_agg *r = registry_process_region(reg, p, name);

	CHECK(r);
	return r;
}

static struct stats *
make_event(struct process *p, struct region_agg *r, const char *name)
{
	int id = registry_process_event_id(p, name);
	struct event_agg *e;

	CHECK(id >= 0);
	e = registry_region_event(r, (size_t)id);
	CHECK(e);
	return &e->st;
}

static struct process *
find_process(struct registry *reg, pid_t pid)
{
	struct process *p;
	pmc_list_for_each(p, &reg->procs, link)
		if (p->pid == pid)
			return p;
	return NULL;
}

static const struct stats *
find_event(const struct process *p, const struct region_agg *r, const char *name)
{
	for (size_t i = 0; i < p->n_events && i < r->n_ev; i++)
		if (!strcmp(p->events[i], name))
			return &r->ev[i].st;
	return NULL;
}

/* @a and @b hold the same figures, to the bit, and @b has blocks only where it counts. */
static void
check_restored(const struct stats *a, const struct stats *b)
{
	struct dense d;

	CHECK(a->count == b->count && a->sum == b->sum && a->min == b->min && a->max == b->max);
	CHECK(memcmp(&a->mean, &b->mean, sizeof(a->mean)) == 0);
	CHECK(memcmp(&a->m2, &b->m2, sizeof(a->m2)) == 0);
	for (unsigned i = 0; i < STATS_BUCKETS; i++)
		d.c[i] = stats_hist_get(a, i);
	check_hist(b, &d, dense_groups(&d));
	check_hist(a, &d, block_groups(a));
}

/* The pairs saved for @st: the nonzero buckets, in index order. */
static void
check_saved_pairs(const Pmc__StatsState *o, const struct stats *st)
{
	size_t k = 0;

	CHECK(o);
	for (unsigned i = 0; i < STATS_BUCKETS; i++) {
		uint64_t c = stats_hist_get(st, i);

		if (!c)
			continue;
		CHECK(k < o->n_hist && o->hist[k]->index == i && o->hist[k]->count == c);
		k++;
	}
	CHECK(k == o->n_hist);
}

static Pmc__State *
read_state(const char *path)
{
	FILE *f = fopen(path, "rb");
	static uint8_t buf[1 << 20];
	size_t len;

	CHECK(f);
	len = fread(buf, 1, sizeof(buf), f);
	CHECK(len < sizeof(buf) && !ferror(f));
	fclose(f);
	return pmc__state__unpack(NULL, len, buf);
}

static void
test_state_round_trip(void)
{
	static const char *const events[] = {"page-faults", "task-clock", "context-switches"};
	char dir[] = "/tmp/pmc-test-stats-......", path[64];
	memset(dir + sizeof(dir) - 7, 'X', 6); /* mkdtemp()'s template */
	struct model saved, back;
	struct process *p, *q;
	struct region_agg *r[3];
	struct dense scratch = {{0}};
	Pmc__State *st;
	uint64_t seed = 21;

	CHECK(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/state", dir);
	memset(&saved, 0, sizeof(saved));
	memset(&back, 0, sizeof(back));
	p = registry_process(&saved.reg, getpid(), getuid());
	CHECK(p);
	r[0] = make_region(&saved.reg, p, "few-groups");
	r[1] = make_region(&saved.reg, p, "wide");
	r[2] = make_region(&saved.reg, p, "reset");
	for (unsigned i = 0; i < 3; i++) {
		r[i]->count = 100 + i;
		fill(&r[i]->wall, &scratch, POW2(10) | POW2(11) | POW2(12), 200, &seed);
		for (unsigned j = 0; j < 3; j++)
			make_event(p, r[i], events[j]);
	}
	fill(make_event(p, r[0], events[0]), &scratch, POW2(0), 300, &seed);
	fill(make_event(p, r[0], events[1]), &scratch, POW2(10) | POW2(11), 300, &seed);
	/* Every group, saturated counters, the extremes. */
	fill(make_event(p, r[1], events[1]), &scratch, POW2(STATS_GROUPS) - 1, 5000, &seed);
	CHECK(stats_hist_set(make_event(p, r[1], events[1]), 0, UINT64_MAX, NULL) == 0);
	fill(make_event(p, r[1], events[2]), &scratch, POW2(60), 10, &seed);
	/* Zeroed blocks: none saved, none restored; then a sample in one of them. */
	fill(make_event(p, r[2], events[0]), &scratch, POW2(3) | POW2(4), 50, &seed);
	stats_reset(make_event(p, r[2], events[0]));
	stats_reset(&r[2]->wall);
	CHECK(stats_add(make_event(p, r[2], events[0]), 100, NULL) == 0);

	CHECK(state_save(&saved, path) == 0);

	/* The file: for each aggregate, its nonzero buckets as (index, count) in index order. */
	st = read_state(path);
	CHECK(st && st->n_processes == 1 && st->processes[0]->n_regions == 3);
	for (size_t i = 0; i < 3; i++) {
		const Pmc__RegionState *rs = st->processes[0]->regions[i];

		CHECK(!strcmp(rs->name, r[i]->name));
		check_saved_pairs(rs->wall, &r[i]->wall);
		CHECK(rs->n_events == 3);
		for (size_t j = 0; j < 3; j++)
			check_saved_pairs(rs->events[j]->stats,
			                  find_event(p, r[i], rs->events[j]->name));
	}
	CHECK(st->processes[0]->regions[2]->wall->n_hist == 0);
	pmc__state__free_unpacked(st, NULL);

	/* Read back: the same figures, blocks only where a count is. */
	CHECK(state_load(&back, path) == 0);
	q = find_process(&back.reg, getpid());
	CHECK(q && q->n_regions == 3);
	for (unsigned i = 0; i < 3; i++) {
		struct region_agg *x = registry_region_find(q, r[i]->name);

		CHECK(x && x->count == r[i]->count);
		check_restored(&r[i]->wall, &x->wall);
		for (unsigned j = 0; j < 3; j++)
			check_restored(find_event(p, r[i], events[j]), find_event(q, x, events[j]));
	}
	CHECK(registry_region_find(q, "reset")->wall.hist == NULL);
	CHECK(find_event(q, registry_region_find(q, "reset"), events[0])->hist->n == 1);
	registry_free(&back.reg);
	registry_free(&saved.reg);
	CHECK(unlink(path) == 0);
	CHECK(rmdir(dir) == 0);
}

/* A hand-written state file: zero counts allocate nothing, a later pair for an index wins,
 * an index past the last bucket is refused. */
static void
test_state_load_pairs(void)
{
	char dir[] = "/tmp/pmc-test-stats-......", path[64];
	memset(dir + sizeof(dir) - 7, 'X', 6); /* mkdtemp()'s template */
	Pmc__State st = PMC__STATE__INIT;
	Pmc__ProcessState ps = PMC__PROCESS_STATE__INIT, *pps = &ps;
	Pmc__RegionState rs = PMC__REGION_STATE__INIT, *prs = &rs;
	Pmc__StatsState wall = PMC__STATS_STATE__INIT;
	Pmc__HistBucket hb[5], *phb[5];
	static const uint32_t index[5] = {3, 500, 3, 20, 600};
	static const uint64_t count[5] = {9, 0, 2, 1, 0};
	struct model back;
	struct process *q;
	struct region_agg *x;
	uint8_t buf[4096];
	size_t len;
	FILE *f;

	CHECK(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/state", dir);
	for (unsigned i = 0; i < 5; i++) {
		pmc__hist_bucket__init(&hb[i]);
		hb[i].index = index[i];
		hb[i].count = count[i];
		phb[i] = &hb[i];
	}
	wall.count = 12;
	wall.sum = 12 * 3 + 2 + 20;
	wall.min = 3;
	wall.max = 20;
	wall.mean = 5;
	wall.n_hist = 5;
	wall.hist = phb;
	rs.name = "r";
	rs.count = 3;
	rs.wall = &wall;
	ps.pid = 424242;
	ps.comm = "x";
	ps.n_regions = 1;
	ps.regions = &prs;
	st.version = 1;
	st.n_processes = 1;
	st.processes = &pps;

	len = pmc__state__get_packed_size(&st);
	CHECK(len <= sizeof(buf));
	pmc__state__pack(&st, buf);
	f = fopen(path, "wb");
	CHECK(f && fwrite(buf, 1, len, f) == len && fclose(f) == 0);
	memset(&back, 0, sizeof(back));
	CHECK(state_load(&back, path) == 0);
	q = find_process(&back.reg, 424242);
	CHECK(q && (x = registry_region_find(q, "r")));
	CHECK(stats_hist_get(&x->wall, 3) == 2 && stats_hist_get(&x->wall, 20) == 1);
	CHECK(stats_hist_get(&x->wall, 500) == 0 && stats_hist_get(&x->wall, 600) == 0);
	CHECK(block_groups(&x->wall) == (POW2(0) | POW2(1)));
	CHECK(stats_memory(&x->wall) == 64 + 2 * 128);
	registry_free(&back.reg);

	/* Index 976: refused, nothing kept. */
	hb[4].index = STATS_BUCKETS;
	hb[4].count = 1;
	len = pmc__state__get_packed_size(&st);
	pmc__state__pack(&st, buf);
	f = fopen(path, "wb");
	CHECK(f && fwrite(buf, 1, len, f) == len && fclose(f) == 0);
	memset(&back, 0, sizeof(back));
	CHECK(state_load(&back, path) == -EBADMSG);
	CHECK(registry_first(&back.reg) == NULL);
	/* Moved aside to FILE.bad, so that the daemon starts afresh. */
	CHECK(back.state_moved_aside && access(path, F_OK) < 0);
	CHECK(unlink(back.state_moved_aside) == 0);
	free(back.state_moved_aside);
	CHECK(rmdir(dir) == 0);
}

int
main(void)
{
	int fds_start = pmc_test_count_fds();

	stats_set_realloc(test_realloc);
	RUN(test_group_of_values);
	RUN(test_blocks_where_values_fall);
	RUN(test_random_streams);
	RUN(test_merge_groups);
	RUN(test_reset_keeps_blocks);
	RUN(test_hist_set_get);
	RUN(test_alloc_failure);
	RUN(test_state_round_trip);
	RUN(test_state_load_pairs);

	CHECK(fds_start >= 0);
	CHECK(pmc_test_count_fds() == fds_start);
	printf("ok %u - no_fd_leak\n", ++pmc_test_n);
	printf("1..%u\n", pmc_test_n);
	return 0;
}
