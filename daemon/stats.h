/* stats: a streaming aggregate of uint64 samples, one per (process, region, event) in the
 * daemon. Keeps count, saturating sum, min, max, Welford's running mean and variance, and a
 * bounded log-linear histogram from which approximate quantiles are read. Two aggregates can
 * be merged exactly. Not thread-safe: the caller serialises access to one struct stats. */
#pragma once

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

/**
 * struct stats - streaming aggregate of uint64 samples
 * @count: number of samples added
 * @sum: sum of the samples, saturating at UINT64_MAX instead of wrapping
 * @min: smallest sample (0 while @count is 0)
 * @max: largest sample (0 while @count is 0)
 * @mean: Welford's running mean
 * @m2: Welford's running sum of squared deviations from the mean
 * @hist: STATS_BUCKETS counters, allocated by the first stats_add() (or stats_merge() of an
 *        aggregate that has one), owned by the struct and released by stats_free()
 *
 * Initialise with stats_init() (or zero it); the fields may be read directly.
 */
struct stats {
	uint64_t count, sum, min, max;
	double mean, m2;
	uint64_t *hist;
};

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
 *
 * Updates count, sum (saturating), min, max, mean and m2, then counts @v in the histogram,
 * allocating it on first use. If that allocation fails every other field has still been
 * updated; only the histogram misses the sample (see stats_quantile()).
 * Return: 0, or -ENOMEM when the histogram could not be allocated.
 */
int stats_add(struct stats *s, uint64_t v);

/**
 * stats_merge() - fold the samples of @from into @into
 * @into: the aggregate that receives the samples
 * @from: the aggregate to add, borrowed and left unchanged; may be @into itself
 *
 * The result is what adding every sample of both to one aggregate would give: count, sum
 * (saturating), min and max exactly, mean and m2 by the parallel Welford formula (equal up to
 * floating-point rounding), histograms added bucket by bucket. If @into has no histogram and
 * @from has one, it is allocated; if that fails the scalar fields are merged anyway and only
 * @from's histogram counts are lost.
 * Return: 0, or -ENOMEM when @into's histogram could not be allocated.
 */
int stats_merge(struct stats *into, const struct stats *from);

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
 * If the histogram allocation failed the quantile reflects only the samples it holds; with no
 * histogram at all it is min for @q <= 0, max for @q >= 1 and the mean clamped to [min, max]
 * otherwise.
 * Return: the quantile, 0 when @s is empty.
 */
double stats_quantile(const struct stats *s, double q);

/**
 * stats_reset() - empty @s
 * @s: the aggregate
 *
 * Keeps the histogram allocated (zeroed) so that refilling @s allocates nothing.
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
 * Return: bytes allocated for @s (the histogram), not counting the struct itself.
 */
size_t stats_memory(const struct stats *s);

/**
 * stats_bucket() - histogram bucket of a value
 * @v: the value
 * Return: the bucket index, below STATS_BUCKETS; non-decreasing in @v.
 */
unsigned stats_bucket(uint64_t v);

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
