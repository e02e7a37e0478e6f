/* stats: a streaming aggregate of uint64 samples, one per (process, region, event) in the
 * daemon. Keeps count, saturating sum, min, max, Welford's running mean and variance, and a
 * bounded log-linear histogram from which approximate quantiles are read. Two aggregates can
 * be merged exactly. Samples come one at a time (stats_add()) or, without a division per
 * sample, gathered in a struct stats_acc and folded in at once (stats_acc_fold()). Not
 * thread-safe: the caller serialises access to one struct stats. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Histogram layout: values 0..15 each own an exact bucket (0..15). A value v >= 16 with its
 * highest set bit at position e (4..63) falls in group e, split into 16 linear sub-buckets of
 * width 2^(e-4) selected by the 4 bits below the leading one:
 *	bucket = (e - 3) * 16 + ((v >> (e - 4)) & 15)
 * so buckets 0..31 are exact (width 1) and any bucket's width is at most 1/16 of its lowest
 * value. Groups 4..63 give 60 * 16 buckets after the first 16, 976 in all.
 */
#define STATS_BUCKETS 976u
/* log2 of the number of linear sub-buckets per power of two. */
#define STATS_SUB_BITS 4u

/*
 * Storage: the buckets come in STATS_GROUPS groups of STATS_GROUP_BUCKETS, group g holding
 * buckets 16g..16g+15 (group 0 the exact values 0..15, group g >= 1 the values with their
 * highest bit at g + 3). Real samples fall in a few powers of two, so a histogram keeps a
 * block of 16 counters (128 bytes) only for the groups a sample has fallen in.
 */
#define STATS_GROUP_BUCKETS (1u << STATS_SUB_BITS)
#define STATS_GROUPS (STATS_BUCKETS / STATS_GROUP_BUCKETS)
/* See struct stats_hist: a slot is 2 * (STATS_SLOT_BIAS + block - group), never 0. */
#define STATS_SLOT_BIAS 64u

/**
 * struct stats_hist - the sparse histogram: one allocation, a table then the blocks
 * @slot: per group g, 0 when it has no block (all its counters are 0), else
 *        2 * (STATS_SLOT_BIAS + j - g) for block j, a value in [8, 248]
 * @n: blocks in @c
 * @c: the blocks of 16 counters, block j at @c[16j], in the order they were allocated
 *
 * The counter of bucket b, in group g = b / 16 with a block, is then
 *	@c[8 * @slot[g] + b - 16 * STATS_SLOT_BIAS]	(= @c[16j + b % 16])
 * one shift-and-add from the slot and the bucket, which keeps the per-sample path as short
 * as a dense array's but for the table look-up.
 *
 * Takes sizeof(struct stats_hist) (64) + 128 * @n bytes, and grows (realloc(), so it may
 * move) by one block the first time a sample falls in a group. Read it through
 * stats_hist_get() and stats_hist_next(); the daemon writes it only through the stats_*()
 * functions.
 */
struct stats_hist {
	uint8_t slot[STATS_GROUPS];
	uint8_t n;
	uint64_t c[];
};

/**
 * struct stats - streaming aggregate of uint64 samples
 * @count: number of samples added
 * @sum: sum of the samples, saturating at UINT64_MAX instead of wrapping
 * @min: smallest sample (0 while @count is 0)
 * @max: largest sample (0 while @count is 0)
 * @mean: Welford's running mean
 * @m2: Welford's running sum of squared deviations from the mean
 * @hist: the histogram's blocks (struct stats_hist), NULL until a sample is first counted in
 *        it (by stats_add(), the accumulators, stats_merge() or stats_hist_set()); owned by
 *        the struct and released by stats_free()
 *
 * Initialise with stats_init() (or zero it); the fields may be read directly.
 */
struct stats {
	uint64_t count, sum, min, max;
	double mean, m2;
	struct stats_hist *hist;
};

/**
 * struct stats_budget - bytes of histogram blocks one owner may hold
 * @used: bytes charged now
 * @limit: the most it may hold
 * @missed: samples a histogram missed because a block would have gone past the limit
 * @parent: a budget charged too (the daemon's, above each user's), or NULL
 * @keep: with a parent, @limit is a share, not a cap (share_allows()): past it the budget
 *        may take more of the parent while the other users' unused shares (@keep bytes)
 *        and one share for a newcomer stay free; SIZE_MAX: @limit is a cap
 */
struct stats_budget {
	size_t used, limit;
	uint64_t missed;
	struct stats_budget *parent;
	size_t keep;
};

/**
 * stats_budget_credit() - give back @bytes to @b and its parents (saturating at 0: figures
 * restored from a state file were never charged)
 */
void stats_budget_credit(struct stats_budget *b, size_t bytes);

/**
 * stats_budget_charge() - charge @bytes to @b and its parents if they fit all of them (with
 * a parent and @b->keep other than SIZE_MAX, @b->limit as a share: share_allows())
 * Return: whether they were charged (nothing is, nor counted in @b->missed, when not).
 */
bool stats_budget_charge(struct stats_budget *b, size_t bytes);

/**
 * stats_init() - make @s an empty aggregate
 * @s: the aggregate, caller-owned; any previous contents are overwritten, not freed
 *
 * Allocates nothing.
 */
void stats_init(struct stats *s);

/**
 * stats_add() - add one sample
 * @s: the aggregate
 * @v: the sample
 * @budget: what a histogram block it allocates is charged to (and its parents): a block that
 *          would take one past its limit is not allocated, the sample missing from the
 *          histogram only (counted in @budget->missed); NULL: charged to nobody
 *
 * Updates count, sum (saturating), min, max, mean and m2, then counts @v in the histogram,
 * allocating the block of @v's group the first time a sample falls in it. If that allocation
 * fails every other field has still been updated; only the histogram misses the sample (see
 * stats_quantile()).
 * Return: 0, or -ENOMEM when the histogram block could not be allocated.
 */
int stats_add(struct stats *s, uint64_t v, struct stats_budget *budget);

/**
 * stats_merge() - fold the samples of @from into @into
 * @into: the aggregate that receives the samples
 * @from: the aggregate to add, borrowed and left unchanged; may be @into itself
 * @budget: what a histogram block it allocates is charged to (and its parents): a block that
 *          would take one past its limit is not allocated, the sample missing from the
 *          histogram only (counted in @budget->missed); NULL: charged to nobody
 *
 * The result is what adding every sample of both to one aggregate would give: count, sum
 * (saturating), min and max exactly, mean and m2 by the parallel Welford formula (equal up to
 * floating-point rounding), histograms added bucket by bucket (saturating). @into gets a
 * block for each group in which @from has a nonzero counter and @into has none yet; if one
 * cannot be allocated the scalar fields are merged anyway and only @from's counts in that
 * group are lost.
 * Return: 0, or -ENOMEM when a block of @into's histogram could not be allocated.
 */
int stats_merge(struct stats *into, const struct stats *from, struct stats_budget *budget);

/**
 * stats_stddev() - population standard deviation, sqrt(m2 / count)
 * @s: the aggregate
 * Return: the standard deviation, 0 when fewer than 2 samples were added.
 */
double stats_stddev(const struct stats *s);

/**
 * stats_quantile() - approximate nearest-rank quantile
 * @s: the aggregate
 * @q: the quantile in [0, 1]; values outside are clamped, NaN is taken as 0
 *
 * Finds the histogram bucket holding the ceil(@q * n)-th smallest sample (n the samples in
 * the histogram; a product within a few ulps above an integer is taken as that integer, so
 * that 0.07 * 100 ranks 7) and returns the bucket's midpoint clamped to [min, max]. @q <= 0
 * returns min and @q >= 1 returns max exactly. The result is exact for samples below 32 and
 * for a constant stream, and otherwise within 1/32 of the true sample's value.
 *
 * If a histogram block allocation failed the quantile reflects only the samples it holds;
 * with none in the histogram at all it is min for @q <= 0, max for @q >= 1 and the mean
 * clamped to [min, max] otherwise.
 * Return: the quantile, 0 when @s is empty.
 */
double stats_quantile(const struct stats *s, double q);

/**
 * stats_reset() - empty @s
 * @s: the aggregate
 *
 * Keeps the histogram's blocks allocated, zeroed, so that refilling @s with samples in the
 * same groups allocates nothing; stats_memory() is unchanged. stats_free() releases them.
 */
void stats_reset(struct stats *s);

/**
 * stats_free() - release the histogram and leave @s empty
 * @s: the aggregate; the struct itself belongs to the caller
 *
 * @s may be used again afterwards (it is as after stats_init()); calling stats_free() twice
 * is harmless.
 */
void stats_free(struct stats *s);

/**
 * stats_memory() - heap memory owned by @s
 * @s: the aggregate
 * Return: bytes allocated for @s, not counting the struct itself: 0 without a histogram,
 * else sizeof(struct stats_hist) (64) + 128 bytes per block.
 */
size_t stats_memory(const struct stats *s);

/**
 * stats_hist_get() - histogram count of a bucket
 * @s: the aggregate
 * @b: bucket index, below STATS_BUCKETS
 * Return: the samples counted in bucket @b, 0 where its group has no block.
 */
static inline uint64_t
stats_hist_get(const struct stats *s, unsigned b)
{
	const struct stats_hist *h = s->hist;
	unsigned k = h ? h->slot[b / STATS_GROUP_BUCKETS] : 0;

	return k ? h->c[8u * k + b - 16u * STATS_SLOT_BIAS] : 0;
}

/**
 * stats_set_realloc() - the allocator histogram blocks grow with, for tests that make it fail
 * on demand (tests/unit/test-stats-sparse.c)
 * @fn: realloc()'s contract; NULL: realloc() again
 *
 * Process-wide: set it before any aggregate grows, from one thread, and never in pmcdaemon.
 */
void stats_set_realloc(void *(*fn)(void *, size_t));

/**
 * stats_hist_next() - the next non-empty bucket of @s's histogram, in ascending order
 * @s: the aggregate
 * @b: in: the first bucket to look at (0 to start); out: the bucket after the one returned
 * @index: out: the bucket's index (stats_bucket_low() and stats_bucket_high() give its bounds)
 * @count: out: the samples it counts, never 0
 *
 * The one way outside stats.c to walk a histogram (its layout is stats.c's): groups without
 * a block are skipped without looking at their buckets.
 * Return: true with a bucket in *@index and *@count, false when none is left.
 */
bool stats_hist_next(const struct stats *s, unsigned *b, unsigned *index, uint64_t *count);

/**
 * stats_hist_set() - set the histogram count of a bucket
 * @s: the aggregate
 * @b: bucket index
 * @n: the count; 0 allocates nothing
 * @budget: what a histogram block it allocates is charged to (and its parents): a block that
 *          would take one past its limit is not allocated, the sample missing from the
 *          histogram only (counted in @budget->missed); NULL: charged to nobody
 *
 * For restoring a saved histogram (daemon/model/state.c): touches nothing but that counter (the
 * caller keeps the scalar fields consistent with it).
 * Return: 0, -EINVAL when @b >= STATS_BUCKETS, or -ENOMEM when the block of @b's group could
 * not be allocated (@s is unchanged then).
 */
int stats_hist_set(struct stats *s, unsigned b, uint64_t n, struct stats_budget *budget);

/**
 * stats_hist_add() - add to the histogram count of a bucket
 * @s: the aggregate
 * @b: bucket index, below STATS_BUCKETS
 * @n: samples to count in @b (wrapping, as stats_add() counts); 0 allocates nothing
 * @budget: what a histogram block it allocates is charged to (and its parents): a block that
 *          would take one past its limit is not allocated, the sample missing from the
 *          histogram only (counted in @budget->missed); NULL: charged to nobody
 *
 * Touches nothing but that counter: stats_add() and the accumulators count their samples
 * in the histogram this way.
 * Return: 0, or -ENOMEM when the block of @b's group could not be allocated: the histogram
 * misses the @n samples then.
 */
int stats_hist_add(struct stats *s, unsigned b, uint64_t n, struct stats_budget *budget);

/**
 * stats_bucket() - histogram bucket of a value
 * @v: the value
 * Return: the bucket index, below STATS_BUCKETS; non-decreasing in @v.
 */
static inline unsigned
stats_bucket(uint64_t v)
{
	/*
	 * Without a branch: with s = e - 4 for v >= 16 (e its leading bit) and s = 0 below,
	 * v >> s is 16 + the sub-bucket for v >= 16 and v itself below, so (s << 4) + (v >> s)
	 * is the layout above in both cases.
	 */
	unsigned s = (63u ^ (unsigned)__builtin_clzll(v | (1u << STATS_SUB_BITS))) - STATS_SUB_BITS;

	return (s << STATS_SUB_BITS) + (unsigned)(v >> s);
}

/**
 * stats_bucket_low() - smallest value in a bucket
 * @b: bucket index; an index >= STATS_BUCKETS is taken as the last bucket
 * Return: the lowest value v with stats_bucket(v) == @b.
 */
uint64_t stats_bucket_low(unsigned b);

/**
 * stats_bucket_high() - largest value in a bucket
 * @b: bucket index; an index >= STATS_BUCKETS is taken as the last bucket
 * Return: the highest value v with stats_bucket(v) == @b (UINT64_MAX for the last bucket).
 */
uint64_t stats_bucket_high(unsigned b);

/*
 * Batch accumulation. stats_add() divides once per sample (Welford's running mean). A caller
 * with many samples at once gathers them in a struct stats_acc instead, in integers only, and
 * folds the accumulator into the aggregate once:
 *
 *	stats_acc_begin(&a, &s, first);		(first: any value near the samples)
 *	stats_acc_add(&a, v);			(for each sample v, or stats_acc_gather())
 *	stats_acc_fold(&s, &a);
 *
 * Every value added must be at most STATS_ACC_MAX_VALUE (as must the shift given to
 * stats_acc_begin()), and at most STATS_ACC_MAX_COUNT values go into one accumulator: then
 * its sums are exact (no overflow in 128 bits). Several accumulators may be open on one
 * aggregate at once (they fold in one after the other); between stats_acc_begin() and
 * stats_acc_fold() the aggregate must not be freed or moved (the accumulator points to it).
 *
 * The samples are counted in the aggregate's histogram as they are added, and a histogram
 * block is allocated the first time one falls in a group. Nothing in this path fails: when
 * such an allocation fails the samples of that group miss the histogram, and every other
 * field still gets them at stats_acc_fold(), exactly as stats_add() does without memory. So a
 * batch opened with stats_acc_begin() on each of its aggregates is always counted whole,
 * with no reserve step before counting and no fallback after.
 */
#define STATS_ACC_MAX_VALUE ((UINT64_C(1) << 53) - 1u)
#define STATS_ACC_MAX_COUNT (UINT64_C(1) << 22)

__extension__ typedef unsigned __int128 stats_u128;
__extension__ typedef __int128 stats_i128;

/**
 * struct stats_acc - samples gathered for one aggregate, not yet folded in
 * @sum: exact sum of the values
 * @sq: exact sum of the squared deviations (v - @shift)^2
 * @shift: the origin of the deviations: the first value, or one near the samples
 * @count: number of values added
 * @min: smallest value added (UINT64_MAX while @count is 0)
 * @max: largest value added (0 while @count is 0)
 * @s: the aggregate, whose histogram counts the values directly
 * @s2: NULL, or a second aggregate whose histogram counts them too (stats_acc_also())
 *
 * Filled by stats_acc_begin(), stats_acc_add() and stats_acc_gather(); read by
 * stats_acc_fold().
 */
struct stats_acc {
	stats_u128 sum, sq;
	uint64_t shift, count, min, max;
	struct stats *s, *s2;
	struct stats_budget *budget; /* what the histogram blocks it allocates are charged to */
};

/**
 * stats_acc_begin() - open an empty accumulator for @s
 * @a: the accumulator, caller-owned; any previous contents are overwritten
 * @s: the aggregate the samples are for
 * @shift: origin of the deviations, at most STATS_ACC_MAX_VALUE: the first sample, or any
 *         value within the samples' range (the fold is exact enough for any such value)
 * @budget: what the histogram blocks the samples gathered allocate is charged to (and its parents):
 * a block that would take one past its limit is not allocated, the sample missing from the
 *          histogram only (counted in @budget->missed); NULL: charged to nobody
 *
 * Allocates nothing and cannot fail: the histogram's blocks come as samples need them.
 */
void stats_acc_begin(struct stats_acc *a, struct stats *s, uint64_t shift,
                     struct stats_budget *budget);

/**
 * stats_acc_add() - gather one sample
 * @a: an accumulator opened by stats_acc_begin()
 * @v: the sample, at most STATS_ACC_MAX_VALUE; at most STATS_ACC_MAX_COUNT per accumulator
 *
 * Counts @v in the aggregate's histogram at once (stats_hist_add(): allocating the block of
 * @v's group the first time, or missing @v there when that fails); everything else waits for
 * stats_acc_fold(). No division, no failure.
 */
static inline void
stats_acc_add(struct stats_acc *a, uint64_t v)
{
	int64_t d = (int64_t)(v - a->shift);

	a->count++;
	a->sum += v;
	a->sq += (stats_u128)((stats_i128)d * d);
	a->min = v < a->min ? v : a->min;
	a->max = v > a->max ? v : a->max;
	(void)stats_hist_add(a->s, stats_bucket(v), 1, a->budget);
	if (a->s2)
		(void)stats_hist_add(a->s2, stats_bucket(v), 1, a->budget);
}

/**
 * stats_acc_also() - count what @a gathers in @s2's histogram too, so that the one
 * accumulator folds into both @a's aggregate and @s2 (stats_acc_fold() on each): the same
 * samples in two aggregates for the cost of one pass (a call path's node and its region)
 * @a: an accumulator opened by stats_acc_begin(), nothing gathered yet
 * @s2: the second aggregate, not @a's own; the same rules hold for it as for that one
 */
static inline void
stats_acc_also(struct stats_acc *a, struct stats *s2)
{
	a->s2 = s2;
}

/**
 * stats_acc_gather() - gather the samples @base[@idx[k] * @stride] for k < @n
 * @a: an accumulator opened by stats_acc_begin()
 * @base: the first value of the column
 * @stride: distance between two rows of the column, in values
 * @idx: @n row indices
 * @n: number of samples; each at most STATS_ACC_MAX_VALUE, at most STATS_ACC_MAX_COUNT in
 *     @a in all
 *
 * The same as stats_acc_add() of each sample in turn, faster: the sums stay in registers and
 * a run of samples that fall in one histogram bucket is counted with one store (allocating
 * the block of the bucket's group the first time, as stats_acc_add() does).
 */
void stats_acc_gather(struct stats_acc *a, const uint64_t *base, size_t stride, const uint32_t *idx,
                      size_t n);

/**
 * stats_acc_fold() - add the samples gathered in @a to @s
 * @s: the aggregate @a was opened for
 * @a: the accumulator, left unchanged; an empty one changes nothing
 *
 * The result is what stats_add() of each of @a's samples would give: count, sum
 * (saturating), min and max exactly, the histogram already (stats_acc_add()), mean and m2 up
 * to floating-point rounding, and nearer the exact ones than stats_add()'s running mean gets
 * (which loses digits when the values are large next to their spread): @a's mean and m2 come
 * from its exact sums with one rounding each, merged by the parallel formula of stats_merge()
 * in 64-bit precision and, while @s's sum has not saturated, from @s's exact sum.
 */
void stats_acc_fold(struct stats *s, const struct stats_acc *a);

/*
 * Tallies: the accumulator for samples that come interleaved, each of another aggregate than
 * the one before (a batch read in one pass, its regions' samples mixed). Its sums stay in
 * memory between samples instead of registers; a zero, the common value of rare events, costs
 * a test only (the zeros are what the count given to stats_tally_fold() leaves over):
 *
 *	stats_tally_begin(&t, &s, NULL, budget);
 *	stats_tally_add(&t, v, false);		(for each sample v)
 *	stats_tally_fold(&t, count);		(count: the samples added, zeros included)
 *
 * Values at most STATS_TALLY_MAX_VALUE, at most STATS_TALLY_MAX_COUNT in one tally: the sum
 * fits 64 bits and the sum of squares 128. Nothing fails, as with the accumulators: the
 * histogram counts each value at once (a block that cannot be allocated misses its samples),
 * the rest at the fold.
 */
#define STATS_TALLY_MAX_VALUE ((UINT64_C(1) << 49) - 1u)
#define STATS_TALLY_MAX_COUNT (UINT64_C(1) << 13)

/**
 * struct stats_tally - the nonzero samples of one aggregate (and a second), not yet folded in
 * @sum: their sum
 * @nonzero: how many
 * @min: the smallest (UINT64_MAX while none)
 * @max: the largest (0 while none)
 * @sq: the sum of their squares
 * @s: the aggregate, whose histogram counts them as they come
 * @s2: NULL, or a second aggregate counting the same samples
 * @budget: what the histogram blocks they allocate are charged to
 */
struct stats_tally {
	uint64_t sum, nonzero, min, max;
	stats_u128 sq;
	struct stats *s, *s2;
	struct stats_budget *budget;
};

/**
 * stats_tally_begin() - open an empty tally for @s (and @s2 unless NULL) charged to @budget;
 * allocates nothing. The aggregates must not be freed or moved until stats_tally_fold().
 */
static inline void
stats_tally_begin(struct stats_tally *t, struct stats *s, struct stats *s2,
                  struct stats_budget *budget)
{
	*t = (struct stats_tally){.min = UINT64_MAX, .s = s, .s2 = s2, .budget = budget};
}

/* stats_hist_inc()'s way when @s has no block for bucket @b: stats_hist_add() (which allocates
 * it, charged to @t's budget, or misses the value). Out of line, so that the loops never load
 * the budget. */
void stats_tally_hist_new(const struct stats_tally *t, struct stats *s, unsigned b)
        __attribute__((noinline, cold));

/* Counts a value in bucket @b of @s's histogram (@t's aggregate or its second): in place where
 * its block is, else through stats_tally_hist_new(). */
static inline void
stats_hist_inc(const struct stats_tally *t, struct stats *s, unsigned b)
{
	struct stats_hist *h = s->hist;
	unsigned k = h ? h->slot[b / STATS_GROUP_BUCKETS] : 0;

	if (__builtin_expect(k != 0, 1))
		h->c[8u * k + b - 16u * STATS_SLOT_BIAS]++;
	else
		stats_tally_hist_new(t, s, b);
}

/**
 * stats_tally_add() - gather sample @v (at most STATS_TALLY_MAX_VALUE) in @t: a zero only
 * in the count stats_tally_fold() is given; another in the sums and the histograms at once.
 * @also: false only where @t was opened without a second aggregate (@s2 NULL): inlined with a
 *        constant, the test of @s2 leaves the loop that adds the values
 */
static inline __attribute__((always_inline)) void
stats_tally_add(struct stats_tally *t, uint64_t v, bool also)
{
	if (!v)
		return;
	unsigned b = stats_bucket(v);
	t->nonzero++;
	t->sum += v;
	t->sq += (stats_u128)v * v;
	if (v < t->min)
		t->min = v;
	if (v > t->max)
		t->max = v;
	stats_hist_inc(t, t->s, b);
	if (also && t->s2)
		stats_hist_inc(t, t->s2, b);
}

/**
 * stats_tally_fold() - add what @t gathered to its aggregates
 * @t: the tally
 * @count: the samples given to stats_tally_add(), zeros included (at least @t->nonzero);
 *         0: nothing changes
 *
 * As stats_acc_fold() of an accumulator of the same samples (zeros counted in the histograms
 * here), into @t->s, then @t->s2.
 */
void stats_tally_fold(const struct stats_tally *t, uint64_t count);
