/* Unit tests for daemon/model/stats.c: exact moments, histogram layout, quantile accuracy, merge,
 * saturation and reset, and the batch accumulators (struct stats_acc) against stats_add().
 * Prints "ok N - name" per test; exits 1 at the first failed check. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/stats.h"
#include "pmc-test.h"

#define POW2(k) (UINT64_C(1) << (k))

#define RUN(fn) PMC_TEST_RUN(fn)

/* True when @a and @b agree to @rel relative to the larger magnitude (or both are ~0). */
static int
near(double a, double b, double rel)
{
	double scale = fmax(fabs(a), fabs(b));

	return fabs(a - b) <= rel * (scale > 1.0 ? scale : 1.0);
}

#define rng_next pmc_test_rng

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank quantile of sorted @v[0..n). */
static uint64_t
true_quantile(const uint64_t *v, size_t n, double q)
{
	double r = ceil(q * (double)n);
	size_t rank = r < 1.0 ? 1 : r > (double)n ? n : (size_t)r;

	return v[rank - 1];
}

/* The histograms of @a and @b hold the same counts, bucket by bucket. */
static int
same_hist(const struct stats *a, const struct stats *b)
{
	unsigned i;

	for (i = 0; i < STATS_BUCKETS; i++)
		if (stats_hist_get(a, i) != stats_hist_get(b, i))
			return 0;
	return 1;
}

static void
add_all(struct stats *s, const uint64_t *v, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		CHECK(stats_add(s, v[i], NULL) == 0);
}

static void
test_empty(void)
{
	struct stats s, t;

	stats_init(&s);
	CHECK(s.count == 0 && s.sum == 0 && s.min == 0 && s.max == 0);
	CHECK(s.mean == 0 && s.m2 == 0 && s.hist == NULL);
	CHECK(stats_stddev(&s) == 0);
	CHECK(stats_quantile(&s, 0) == 0);
	CHECK(stats_quantile(&s, 0.5) == 0);
	CHECK(stats_quantile(&s, 1) == 0);
	CHECK(stats_memory(&s) == 0);

	/* Merging empties allocates nothing. */
	stats_init(&t);
	CHECK(stats_merge(&s, &t, NULL) == 0);
	CHECK(s.count == 0 && s.hist == NULL && stats_memory(&s) == 0);

	stats_free(&s);
	stats_free(&s);
	CHECK(s.hist == NULL && s.count == 0);
}

static void
test_known_set(void)
{
	static const uint64_t v[] = {2, 4, 4, 4, 5, 5, 7, 9};
	struct stats s;

	stats_init(&s);
	add_all(&s, v, sizeof(v) / sizeof(v[0]));
	CHECK(s.count == 8);
	CHECK(s.sum == 40);
	CHECK(s.min == 2);
	CHECK(s.max == 9);
	CHECK(near(s.mean, 5.0, 1e-12));
	CHECK(near(s.m2, 32.0, 1e-12));
	CHECK(near(stats_stddev(&s), 2.0, 1e-12));
	/* Small values have exact buckets, so nearest-rank quantiles are exact. */
	CHECK(stats_quantile(&s, 0) == 2);
	CHECK(stats_quantile(&s, 0.125) == 2);
	CHECK(stats_quantile(&s, 0.25) == 4);
	CHECK(stats_quantile(&s, 0.5) == 4);
	CHECK(stats_quantile(&s, 0.75) == 5);
	CHECK(stats_quantile(&s, 0.8) == 7);
	CHECK(stats_quantile(&s, 0.9) == 9);
	CHECK(stats_quantile(&s, 1) == 9);
	/* All below 16: one block, group 0's. */
	CHECK(stats_memory(&s) == sizeof(struct stats_hist) + 16 * sizeof(uint64_t));
	stats_free(&s);
}

static void
test_single_sample(void)
{
	struct stats s;

	stats_init(&s);
	CHECK(stats_add(&s, 1000003, NULL) == 0);
	CHECK(s.count == 1 && s.sum == 1000003 && s.min == 1000003 && s.max == 1000003);
	CHECK(s.mean == 1000003.0);
	CHECK(stats_stddev(&s) == 0);
	CHECK(stats_quantile(&s, 0) == 1000003.0);
	CHECK(stats_quantile(&s, 0.5) == 1000003.0);
	CHECK(stats_quantile(&s, 1) == 1000003.0);
	stats_free(&s);
}

static void
test_constant_stream(void)
{
	static const uint64_t consts[] = {0, 7, 123456789, POW2(40) + 12345, UINT64_MAX};
	size_t c, i;

	for (c = 0; c < sizeof(consts) / sizeof(consts[0]); c++) {
		uint64_t k = consts[c];
		struct stats s;

		stats_init(&s);
		for (i = 0; i < 1000; i++)
			CHECK(stats_add(&s, k, NULL) == 0);
		CHECK(s.count == 1000 && s.min == k && s.max == k);
		CHECK(s.mean == (double)k);
		CHECK(stats_stddev(&s) == 0);
		CHECK(stats_quantile(&s, 0.5) == (double)k);
		CHECK(stats_quantile(&s, 0.9) == (double)k);
		CHECK(stats_quantile(&s, 0.99) == (double)k);
		CHECK(stats_quantile(&s, 0.999) == (double)k);
		stats_free(&s);
	}
}

static void
test_small_values(void)
{
	struct stats s;
	double p50, p99;
	uint64_t v;

	stats_init(&s);
	for (v = 1; v <= 100; v++)
		CHECK(stats_add(&s, v, NULL) == 0);
	CHECK(s.count == 100 && s.sum == 5050 && s.min == 1 && s.max == 100);
	CHECK(near(s.mean, 50.5, 1e-12));
	CHECK(near(stats_stddev(&s), sqrt((100.0 * 100.0 - 1.0) / 12.0), 1e-12));

	p50 = stats_quantile(&s, 0.5);
	p99 = stats_quantile(&s, 0.99);
	CHECK(p50 >= (double)stats_bucket_low(stats_bucket(50)));
	CHECK(p50 <= (double)stats_bucket_high(stats_bucket(50)));
	CHECK(p99 >= (double)stats_bucket_low(stats_bucket(99)));
	CHECK(p99 <= (double)stats_bucket_high(stats_bucket(99)));
	CHECK(fabs(p50 - 50.0) <= 50.0 / 32.0);
	CHECK(fabs(p99 - 99.0) <= 99.0 / 32.0);

	/* Values below 32 sit in width-1 buckets: exact. */
	CHECK(stats_quantile(&s, 0.01) == 1);
	CHECK(stats_quantile(&s, 0.1) == 10);
	CHECK(stats_quantile(&s, 0.15) == 15);
	CHECK(stats_quantile(&s, 0.16) == 16);
	CHECK(stats_quantile(&s, 0.31) == 31);
	/* 0.07 * 100 is 7.000000000000001 in doubles: still rank 7. */
	CHECK(stats_quantile(&s, 0.07) == 7);
	CHECK(stats_quantile(&s, 0.29) == 29);
	CHECK(stats_quantile(&s, 1) == 100);
	stats_free(&s);
}

static void
test_quantile_args(void)
{
	struct stats s;
	uint64_t v;

	stats_init(&s);
	for (v = 1000; v <= 5000; v += 10)
		CHECK(stats_add(&s, v, NULL) == 0);
	CHECK(stats_quantile(&s, -1) == 1000);
	CHECK(stats_quantile(&s, 0) == 1000);
	CHECK(stats_quantile(&s, NAN) == 1000);
	CHECK(stats_quantile(&s, 1) == 5000);
	CHECK(stats_quantile(&s, 2) == 5000);
	CHECK(stats_quantile(&s, INFINITY) == 5000);
	/* Never outside [min, max]. */
	CHECK(stats_quantile(&s, 1e-9) >= 1000);
	CHECK(stats_quantile(&s, 1 - 1e-9) <= 5000);
	stats_free(&s);

	/* Bucket [992, 1023] has midpoint 1007: clamped up to min 1020, then down to max 1000. */
	stats_init(&s);
	for (v = 1020; v <= 1023; v++)
		CHECK(stats_add(&s, v, NULL) == 0);
	CHECK(stats_add(&s, 4000, NULL) == 0);
	CHECK(stats_bucket_low(stats_bucket(1020)) == 992 &&
	      stats_bucket_high(stats_bucket(1020)) == 1023);
	CHECK(stats_quantile(&s, 0.5) == 1020);
	stats_reset(&s);
	CHECK(stats_add(&s, 10, NULL) == 0);
	for (v = 992; v <= 1000; v++)
		CHECK(stats_add(&s, v, NULL) == 0);
	CHECK(stats_quantile(&s, 0.9) == 1000);
	stats_free(&s);
}

/* Quantiles of @v[0..n) (unsorted, scratch) within 1/32 of the true nearest-rank ones. */
static void
check_quantiles(uint64_t *v, size_t n)
{
	static const double qs[] = {0.001, 0.01, 0.05, 0.1,  0.25, 0.5,
	                            0.75,  0.9,  0.95, 0.99, 0.999};
	struct stats s;
	size_t i;

	stats_init(&s);
	add_all(&s, v, n);
	qsort(v, n, sizeof(*v), cmp_u64);
	CHECK(s.min == v[0] && s.max == v[n - 1]);
	for (i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
		double t = (double)true_quantile(v, n, qs[i]);

		CHECK(fabs(stats_quantile(&s, qs[i]) - t) <= t / 32.0);
	}
	for (i = 1; i < 1000; i++) {
		double q = (double)i / 1000.0, t = (double)true_quantile(v, n, q);

		CHECK(fabs(stats_quantile(&s, q) - t) <= t / 32.0);
	}
	stats_free(&s);
}

static void
test_large_uniform(void)
{
	const size_t n = 100000;
	uint64_t *v = malloc(n * sizeof(*v)), seed = 42;
	size_t i;

	CHECK(v);
	for (i = 0; i < n; i++)
		v[i] = 1000000 + rng_next(&seed) % 1000001;
	check_quantiles(v, n);
	free(v);
}

static void
test_wide_range(void)
{
	const size_t n = 50000;
	uint64_t *v = malloc(n * sizeof(*v)), seed = 7;
	size_t i;

	CHECK(v);
	/* Roughly log-uniform over the whole uint64 range, small values included. */
	for (i = 0; i < n; i++)
		v[i] = rng_next(&seed) >> (rng_next(&seed) % 64);
	check_quantiles(v, n);
	free(v);
}

static void
test_bucket_layout(void)
{
	unsigned b;

	CHECK(STATS_BUCKETS < 1024);
	CHECK(stats_bucket_low(0) == 0);
	CHECK(stats_bucket_high(STATS_BUCKETS - 1) == UINT64_MAX);
	for (b = 0; b < STATS_BUCKETS; b++) {
		uint64_t lo = stats_bucket_low(b), hi = stats_bucket_high(b);

		CHECK(lo <= hi);
		if (b > 0)
			CHECK(lo == stats_bucket_high(b - 1) + 1);
		CHECK(stats_bucket(lo) == b);
		CHECK(stats_bucket(hi) == b);
		if (b < 32)
			CHECK(lo == b && hi == b);
		else
			CHECK((hi - lo + 1) * 16 <= lo);
	}
	CHECK(stats_bucket_low(STATS_BUCKETS) == stats_bucket_low(STATS_BUCKETS - 1));
	CHECK(stats_bucket_high(5000) == UINT64_MAX);
}

static void
test_bucket_sweep(void)
{
	const size_t cap = 4097 + 64 * 3 + 64 * 16 * 3 + 16 + 20000;
	uint64_t *v = malloc(cap * sizeof(*v)), seed = 99;
	size_t n = 0, i;
	unsigned k, j;

	CHECK(v);
	for (i = 0; i <= 4096; i++)
		v[n++] = i;
	for (k = 0; k < 64; k++) {
		v[n++] = POW2(k) - 1;
		v[n++] = POW2(k);
		v[n++] = POW2(k) + 1;
		for (j = 0; k >= 4 && j < 16; j++) {
			uint64_t edge = POW2(k) + j * POW2(k - 4);

			v[n++] = edge - 1;
			v[n++] = edge;
			v[n++] = edge + 1;
		}
	}
	v[n++] = POW2(32);
	v[n++] = POW2(63);
	v[n++] = UINT64_MAX;
	v[n++] = UINT64_MAX - 1;
	for (i = 0; i < 20000; i++)
		v[n++] = rng_next(&seed) >> (i % 64);
	CHECK(n <= cap);

	CHECK(stats_bucket(0) == 0);
	CHECK(stats_bucket(15) == 15);
	CHECK(stats_bucket(16) == 16);
	CHECK(stats_bucket(17) == 17);
	CHECK(stats_bucket_low(stats_bucket(POW2(32))) == POW2(32));
	CHECK(stats_bucket_low(stats_bucket(POW2(63))) == POW2(63));
	CHECK(stats_bucket(UINT64_MAX) == STATS_BUCKETS - 1);

	qsort(v, n, sizeof(*v), cmp_u64);
	for (i = 0; i < n; i++) {
		unsigned b = stats_bucket(v[i]);

		CHECK(b < STATS_BUCKETS);
		CHECK(stats_bucket_low(b) <= v[i] && v[i] <= stats_bucket_high(b));
		if (i > 0)
			CHECK(stats_bucket(v[i - 1]) <= b);
	}
	free(v);
}

static void
test_sum_saturation(void)
{
	struct stats s, t;

	stats_init(&s);
	CHECK(stats_add(&s, UINT64_MAX - 5, NULL) == 0);
	CHECK(s.sum == UINT64_MAX - 5);
	CHECK(stats_add(&s, 5, NULL) == 0);
	CHECK(s.sum == UINT64_MAX);
	CHECK(stats_add(&s, 10, NULL) == 0);
	CHECK(s.sum == UINT64_MAX);
	CHECK(stats_add(&s, UINT64_MAX, NULL) == 0);
	CHECK(s.sum == UINT64_MAX);
	CHECK(s.count == 4 && s.min == 5 && s.max == UINT64_MAX);
	CHECK(stats_quantile(&s, 1) == (double)UINT64_MAX);
	CHECK(stats_quantile(&s, 0) == 5);

	/* Merge saturates too. */
	stats_init(&t);
	CHECK(stats_add(&t, POW2(63), NULL) == 0);
	CHECK(stats_merge(&t, &t, NULL) == 0);
	CHECK(t.sum == UINT64_MAX && t.count == 2);
	CHECK(stats_merge(&t, &s, NULL) == 0);
	CHECK(t.sum == UINT64_MAX && t.count == 6);
	stats_free(&s);
	stats_free(&t);
}

static void
check_same(const struct stats *a, const struct stats *b)
{
	CHECK(a->count == b->count);
	CHECK(a->sum == b->sum);
	CHECK(a->min == b->min);
	CHECK(a->max == b->max);
	CHECK(near(a->mean, b->mean, 1e-9));
	CHECK(near(stats_stddev(a), stats_stddev(b), 1e-9));
	CHECK((a->hist == NULL) == (b->hist == NULL));
	CHECK(same_hist(a, b));
}

static void
test_merge_halves(void)
{
	const size_t n = 2001;
	uint64_t *v = malloc(n * sizeof(*v)), seed = 1234;
	struct stats whole, a, b, parts, acc;
	size_t i;

	CHECK(v);
	for (i = 0; i < n; i++)
		v[i] = i % 3 == 0 ? i : 1000000 + rng_next(&seed) % 50000000;
	stats_init(&whole);
	stats_init(&a);
	stats_init(&b);
	add_all(&whole, v, n);
	add_all(&a, v, n / 2);
	add_all(&b, v + n / 2, n - n / 2);

	CHECK(stats_merge(&a, &b, NULL) == 0);
	check_same(&a, &whole);
	/* @from is left alone. */
	CHECK(b.count == n - n / 2);

	/* Many uneven pieces, merged into an aggregate that starts empty. */
	stats_init(&acc);
	for (i = 0; i < n;) {
		size_t len = 1 + (i * 7) % 300;

		if (len > n - i)
			len = n - i;
		stats_init(&parts);
		add_all(&parts, v + i, len);
		CHECK(stats_merge(&acc, &parts, NULL) == 0);
		stats_free(&parts);
		i += len;
	}
	check_same(&acc, &whole);
	stats_free(&acc);
	stats_free(&a);
	stats_free(&b);
	stats_free(&whole);
	free(v);
}

static void
test_merge_edges(void)
{
	struct stats s, e, copy, twice;
	uint64_t v;
	unsigned i;

	stats_init(&s);
	stats_init(&e);
	for (v = 10; v < 500; v += 3)
		CHECK(stats_add(&s, v, NULL) == 0);

	/* Empty into filled: unchanged. */
	CHECK(stats_merge(&s, &e, NULL) == 0);
	CHECK(s.count == 164 && s.min == 10 && s.max == 499);

	/* Filled into empty: a copy, histogram allocated. */
	CHECK(stats_merge(&e, &s, NULL) == 0);
	CHECK(e.hist != NULL && e.hist != s.hist);
	check_same(&e, &s);
	CHECK(e.mean == s.mean && e.m2 == s.m2);

	/* Self merge: every sample twice. */
	stats_init(&copy);
	CHECK(stats_merge(&copy, &s, NULL) == 0);
	stats_init(&twice);
	for (i = 0; i < 2; i++)
		for (v = 10; v < 500; v += 3)
			CHECK(stats_add(&twice, v, NULL) == 0);
	CHECK(stats_merge(&s, &s, NULL) == 0);
	check_same(&s, &twice);
	CHECK(near(s.mean, copy.mean, 1e-12));
	CHECK(near(stats_stddev(&s), stats_stddev(&copy), 1e-12));

	stats_free(&s);
	stats_free(&e);
	stats_free(&copy);
	stats_free(&twice);
}

static void
test_no_histogram(void)
{
	/* What an aggregate looks like after its histogram allocation failed. */
	struct stats s = {.count = 3, .sum = 15, .min = 1, .max = 9, .mean = 5.0, .m2 = 32.0};
	struct stats t;

	CHECK(stats_memory(&s) == 0);
	CHECK(stats_quantile(&s, 0) == 1);
	CHECK(stats_quantile(&s, 0.5) == 5);
	CHECK(stats_quantile(&s, 1) == 9);

	/* Merged into an aggregate with a histogram: scalars combine, histogram kept as is. */
	stats_init(&t);
	CHECK(stats_add(&t, 100, NULL) == 0);
	CHECK(stats_merge(&t, &s, NULL) == 0);
	CHECK(t.count == 4 && t.sum == 115 && t.min == 1 && t.max == 100);
	CHECK(near(t.mean, 115.0 / 4.0, 1e-12));
	CHECK(stats_hist_get(&t, stats_bucket(100)) == 1);
	/* Quantiles use the samples the histogram holds. */
	CHECK(stats_quantile(&t, 0.5) == 100);
	stats_free(&t);

	/* Merging it into an empty aggregate allocates nothing. */
	stats_init(&t);
	CHECK(stats_merge(&t, &s, NULL) == 0);
	CHECK(t.hist == NULL && t.count == 3);
	stats_free(&t);
}

static void
test_reset(void)
{
	struct stats s, fresh;
	struct stats_hist *hist;
	size_t mem;
	uint64_t v;
	unsigned b;

	stats_init(&s);
	for (v = 0; v < 1000; v++)
		CHECK(stats_add(&s, v * v, NULL) == 0);
	hist = s.hist;
	mem = stats_memory(&s);
	stats_reset(&s);
	CHECK(s.count == 0 && s.sum == 0 && s.min == 0 && s.max == 0);
	CHECK(s.mean == 0 && s.m2 == 0);
	CHECK(stats_stddev(&s) == 0);
	CHECK(stats_quantile(&s, 0.5) == 0);
	/* The histogram's blocks are kept, zeroed. */
	CHECK(s.hist == hist);
	CHECK(stats_memory(&s) == mem);
	for (b = 0; b < STATS_BUCKETS; b++)
		CHECK(stats_hist_get(&s, b) == 0);

	/* Refilled, it matches a fresh aggregate. */
	stats_init(&fresh);
	for (v = 5; v < 50; v++) {
		CHECK(stats_add(&s, v, NULL) == 0);
		CHECK(stats_add(&fresh, v, NULL) == 0);
	}
	check_same(&s, &fresh);
	CHECK(s.hist == hist);

	stats_free(&s);
	CHECK(s.hist == NULL && s.count == 0 && stats_memory(&s) == 0);
	stats_reset(&s);
	CHECK(s.hist == NULL);
	CHECK(stats_add(&s, 3, NULL) == 0);
	CHECK(s.count == 1 && s.min == 3 && s.max == 3);
	stats_free(&s);
	stats_free(&fresh);
}

/* The bucket formula stats_bucket() had before it lost its branch. */
static unsigned
bucket_reference(uint64_t v)
{
	unsigned e;

	if (v < 16)
		return (unsigned)v;
	e = 63u - (unsigned)__builtin_clzll(v);
	return ((e - 3u) << 4) | (unsigned)((v >> (e - 4u)) & 15u);
}

static void
test_bucket_reference(void)
{
	uint64_t seed = 5, v;
	unsigned k;
	int d;

	for (v = 0; v < 70000; v++)
		CHECK(stats_bucket(v) == bucket_reference(v));
	for (k = 0; k < 64; k++)
		for (d = -2; d <= 2; d++) {
			v = POW2(k) + (uint64_t)(int64_t)d;
			CHECK(stats_bucket(v) == bucket_reference(v));
		}
	for (k = 0; k < 200000; k++) {
		v = rng_next(&seed) >> (k % 64);
		CHECK(stats_bucket(v) == bucket_reference(v));
	}
	CHECK(stats_bucket(UINT64_MAX) == bucket_reference(UINT64_MAX));
}

/* How an accumulator's shift is picked from the values of its piece. */
enum shift_mode { SHIFT_FIRST, SHIFT_MIN, SHIFT_MAX, SHIFT_MID };

static uint64_t
pick_shift(const uint64_t *v, size_t n, enum shift_mode mode)
{
	uint64_t lo = v[0], hi = v[0];
	size_t i;

	for (i = 1; i < n; i++) {
		lo = v[i] < lo ? v[i] : lo;
		hi = v[i] > hi ? v[i] : hi;
	}
	switch (mode) {
	case SHIFT_MIN:
		return lo;
	case SHIFT_MAX:
		return hi;
	case SHIFT_MID:
		return lo + (hi - lo) / 2;
	default:
		return v[0];
	}
}

/* @v[0..n) into @s in pieces of @piece samples, one accumulator each, as the daemon does per
 * batch; with @gather, through stats_acc_gather() in two interleaved halves. */
static void
acc_pieces(struct stats *s, const uint64_t *v, size_t n, size_t piece, enum shift_mode mode,
           int gather)
{
	uint32_t *idx = malloc((piece + 1) * sizeof(*idx));
	struct stats_acc a;
	size_t i, j, len;

	CHECK(idx);
	for (i = 0; i < n; i += len) {
		len = n - i < piece ? n - i : piece;
		stats_acc_begin(&a, s, pick_shift(v + i, len, mode), NULL);
		if (!gather) {
			for (j = 0; j < len; j++)
				stats_acc_add(&a, v[i + j]);
		} else {
			/* Even rows, then odd rows: the order of the samples does not matter. */
			size_t k = 0;

			for (j = 0; j < len; j += 2)
				idx[k++] = (uint32_t)j;
			stats_acc_gather(&a, v + i, 1, idx, k);
			k = 0;
			for (j = 1; j < len; j += 2)
				idx[k++] = (uint32_t)j;
			stats_acc_gather(&a, v + i, 1, idx, k);
		}
		CHECK(a.count == len);
		stats_acc_fold(s, &a);
	}
	free(idx);
}

/* Mean and m2 of @v[0..n) in long double, two passes: the reference. */
static void
exact_moments(const uint64_t *v, size_t n, long double *mean, long double *m2)
{
	long double sum = 0, d, m = 0;
	size_t i;

	for (i = 0; i < n; i++)
		sum += (long double)v[i];
	*mean = sum / (long double)n;
	for (i = 0; i < n; i++) {
		d = (long double)v[i] - *mean;
		m += d * d;
	}
	*m2 = m;
}

static double worst_acc_err, worst_welford_err;

static double
rel_err(long double got, long double want)
{
	long double scale = fabsl(want) > 1 ? fabsl(want) : 1;

	return (double)(fabsl(got - want) / scale);
}

/* @v[0..n) through stats_add() and through accumulators of several piece sizes and shifts:
 * the same count, sum, min, max and histogram; mean and m2 within 1e-11 of the exact ones,
 * and within 1e-9 of Welford's wherever Welford's are that close to the exact ones (its
 * running mean loses digits when the values are large next to their spread: 2^52 + [0, 1000)
 * costs it 4 digits of m2). */
static void
check_acc_matches(const uint64_t *v, size_t n)
{
	static const size_t pieces[] = {1, 2, 7, 64, 512, 100000};
	static const enum shift_mode modes[] = {SHIFT_FIRST, SHIFT_MIN, SHIFT_MAX, SHIFT_MID};
	struct stats w, s;
	long double mean, m2;
	size_t p, m;

	exact_moments(v, n, &mean, &m2);
	stats_init(&w);
	add_all(&w, v, n);
	if (rel_err(w.mean, mean) > worst_welford_err)
		worst_welford_err = rel_err(w.mean, mean);
	if (rel_err(w.m2, m2) > worst_welford_err)
		worst_welford_err = rel_err(w.m2, m2);
	for (p = 0; p < sizeof(pieces) / sizeof(pieces[0]); p++)
		for (m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
			stats_init(&s);
			acc_pieces(&s, v, n, pieces[p], modes[m], (p + m) % 2);
			CHECK(s.count == w.count && s.sum == w.sum);
			CHECK(s.min == w.min && s.max == w.max);
			CHECK(same_hist(&s, &w));
			CHECK(rel_err(s.mean, mean) <= 1e-11);
			CHECK(rel_err(s.m2, m2) <= 1e-11);
			if (rel_err(w.mean, mean) <= 1e-10 && rel_err(w.m2, m2) <= 1e-10) {
				CHECK(near(s.mean, w.mean, 1e-9));
				CHECK(near(stats_stddev(&s), stats_stddev(&w), 1e-9));
			}
			if (rel_err(s.mean, mean) > worst_acc_err)
				worst_acc_err = rel_err(s.mean, mean);
			if (rel_err(s.m2, m2) > worst_acc_err)
				worst_acc_err = rel_err(s.m2, m2);
			stats_free(&s);
		}
	stats_free(&w);
}

static void
test_acc_random(void)
{
	const size_t n = 4000;
	uint64_t *v = malloc(n * sizeof(*v)), seed = 2024;
	unsigned kind;
	size_t i;

	CHECK(v);
	for (kind = 0; kind < 9; kind++) {
		for (i = 0; i < n; i++) {
			uint64_t r = rng_next(&seed);

			switch (kind) {
			case 0: /* small counts, mostly 0: page faults, context switches */
				v[i] = r % 64 == 0 ? 1 + r % 3 : 0;
				break;
			case 1: /* wall times in ns */
				v[i] = 1000 + r % 50000;
				break;
			case 2: /* large, narrow: a big offset and a small spread */
				v[i] = POW2(52) + r % 1000;
				break;
			case 3: /* log-uniform below 2^53 */
				v[i] = (r >> 11) >> (rng_next(&seed) % 53);
				break;
			case 4: /* the extremes of the accumulators' range */
				v[i] = r % 2 ? STATS_ACC_MAX_VALUE : 0;
				break;
			case 5: /* one outlier first, then a constant */
				v[i] = i == 0 ? POW2(45) : 12345;
				break;
			case 6: /* uniform below 2^53 */
				v[i] = r >> 11;
				break;
			case 7: /* a slow drift */
				v[i] = POW2(40) + i * 1000 + r % 7;
				break;
			default: /* constant */
				v[i] = 987654321;
			}
		}
		check_acc_matches(v, n);
		check_acc_matches(v, 1);
		check_acc_matches(v, 2);
		check_acc_matches(v, 513);
	}
	printf("# largest relative error of mean or m2 against the exact ones: accumulators %.3g, "
	       "stats_add() %.3g\n",
	       worst_acc_err, worst_welford_err);
	free(v);
}

static void
test_acc_gather_equals_add(void)
{
	const size_t rows = 1000, cols = 5;
	uint64_t *v = malloc(rows * cols * sizeof(*v)), seed = 77;
	uint32_t *idx = malloc(rows * sizeof(*idx));
	struct stats s1, s2;
	struct stats_acc a1, a2;
	size_t i, k = 0, c;

	CHECK(v && idx);
	for (i = 0; i < rows * cols; i++)
		v[i] = rng_next(&seed) >> (11 + i % 50);
	/* Every third row, in a scrambled order, of each column. */
	for (i = 0; i < rows; i += 3)
		idx[k++] = (uint32_t)((i * 7) % rows);
	for (c = 0; c < cols; c++) {
		stats_init(&s1);
		stats_init(&s2);
		stats_acc_begin(&a1, &s1, v[c], NULL);
		stats_acc_begin(&a2, &s2, v[c], NULL);
		for (i = 0; i < k; i++)
			stats_acc_add(&a1, v[idx[i] * cols + c]);
		stats_acc_gather(&a2, v + c, cols, idx, k);
		stats_acc_gather(&a2, v + c, cols, idx, 0);
		CHECK(a1.sum == a2.sum && a1.sq == a2.sq && a1.shift == a2.shift);
		CHECK(a1.count == k && a2.count == k);
		CHECK(a1.min == a2.min && a1.max == a2.max);
		CHECK(same_hist(&s1, &s2));
		stats_acc_fold(&s1, &a1);
		stats_acc_fold(&s2, &a2);
		CHECK(s1.count == s2.count && s1.sum == s2.sum && s1.mean == s2.mean &&
		      s1.m2 == s2.m2);
		stats_free(&s1);
		stats_free(&s2);
	}
	free(idx);
	free(v);
}

/* One accumulator counted into two aggregates (stats_acc_also(): a call path's node and its
 * region): each ends as if it had its own accumulator, whatever it held before; the second
 * may have other accumulators folded in too, gathered and added. */
static void
test_acc_also(void)
{
	const size_t n = 3000;
	uint64_t *v = malloc(n * sizeof(*v)), seed = 5;
	uint32_t *idx = malloc(n * sizeof(*idx));
	struct stats node, region, ref_node, ref_region;
	struct stats_acc a, b;

	CHECK(v && idx);
	for (size_t i = 0; i < n; i++) {
		v[i] = rng_next(&seed) >> (20 + i % 30);
		idx[i] = (uint32_t)i;
	}
	stats_init(&node);
	stats_init(&region);
	stats_init(&ref_node);
	stats_init(&ref_region);
	/* What the region held before: another path's samples. */
	for (size_t i = 0; i < 100; i++) {
		stats_add(&region, v[i] * 3, NULL);
		stats_add(&ref_region, v[i] * 3, NULL);
	}
	stats_acc_begin(&a, &node, v[0], NULL);
	stats_acc_also(&a, &region);
	stats_acc_begin(&b, &region, v[1], NULL); /* a second accumulator open on the region */
	stats_acc_gather(&a, v, 1, idx, n / 2);
	for (size_t i = n / 2; i < n; i++)
		stats_acc_add(&a, v[i]);
	stats_acc_gather(&b, v, 1, idx, 10);
	stats_acc_fold(&node, &a);
	stats_acc_fold(&region, &a);
	stats_acc_fold(&region, &b);
	for (size_t i = 0; i < n; i++) {
		stats_add(&ref_node, v[i], NULL);
		stats_add(&ref_region, v[i], NULL);
	}
	for (size_t i = 0; i < 10; i++)
		stats_add(&ref_region, v[i], NULL);
	CHECK(same_hist(&node, &ref_node));
	CHECK(same_hist(&region, &ref_region));
	CHECK(node.count == n && node.sum == ref_node.sum && node.min == ref_node.min &&
	      node.max == ref_node.max);
	CHECK(region.count == n + 110 && region.sum == ref_region.sum &&
	      region.min == ref_region.min && region.max == ref_region.max);
	CHECK(fabs(node.mean - ref_node.mean) <= 1e-9 * fabs(ref_node.mean));
	CHECK(fabs(region.m2 - ref_region.m2) <= 1e-9 * fabs(ref_region.m2));
	stats_free(&node);
	stats_free(&region);
	stats_free(&ref_node);
	stats_free(&ref_region);
	free(idx);
	free(v);
}

static void
test_acc_edges(void)
{
	static const uint64_t known[] = {2, 4, 4, 4, 5, 5, 7, 9};
	struct stats s, w, t;
	struct stats_acc a;
	uint64_t *v;
	size_t i;

	/* An empty accumulator changes nothing, allocates nothing. */
	stats_init(&s);
	stats_acc_begin(&a, &s, 7, NULL);
	CHECK(s.hist == NULL && a.count == 0 && a.min == UINT64_MAX && a.max == 0);
	stats_acc_fold(&s, &a);
	CHECK(s.count == 0 && s.sum == 0 && s.min == 0 && s.max == 0 && s.mean == 0 && s.m2 == 0);
	CHECK(stats_quantile(&s, 0.5) == 0);

	/* The known set, with a shift outside the samples' range. */
	stats_acc_begin(&a, &s, 1000, NULL);
	for (i = 0; i < 8; i++)
		stats_acc_add(&a, known[i]);
	stats_acc_fold(&s, &a);
	CHECK(s.count == 8 && s.sum == 40 && s.min == 2 && s.max == 9);
	CHECK(near(s.mean, 5.0, 1e-15) && near(s.m2, 32.0, 1e-15));
	CHECK(stats_quantile(&s, 0.5) == 4 && stats_quantile(&s, 0.9) == 9);
	stats_free(&s);

	/* One sample: its mean exactly, no spread. */
	stats_init(&s);
	stats_acc_begin(&a, &s, 1000003, NULL);
	stats_acc_add(&a, 1000003);
	stats_acc_fold(&s, &a);
	CHECK(s.count == 1 && s.mean == 1000003.0 && s.m2 == 0 && stats_stddev(&s) == 0);

	/* Folded into an aggregate filled by stats_add(), then merged: as if all were added. */
	stats_init(&w);
	stats_init(&t);
	CHECK(stats_add(&s, 17, NULL) == 0);
	CHECK(stats_add(&w, 1000003, NULL) == 0);
	CHECK(stats_add(&w, 17, NULL) == 0);
	stats_acc_begin(&a, &s, 50, NULL);
	for (i = 0; i < 8; i++) {
		stats_acc_add(&a, known[i]);
		CHECK(stats_add(&w, known[i], NULL) == 0);
	}
	stats_acc_fold(&s, &a);
	check_same(&s, &w);
	stats_acc_begin(&a, &t, 3, NULL);
	stats_acc_add(&a, 3);
	stats_acc_add(&a, POW2(50));
	stats_acc_fold(&t, &a);
	CHECK(stats_merge(&s, &t, NULL) == 0);
	CHECK(stats_add(&w, 3, NULL) == 0);
	CHECK(stats_add(&w, POW2(50), NULL) == 0);
	check_same(&s, &w);
	stats_free(&s);
	stats_free(&t);
	stats_free(&w);

	/* A constant stream: mean exact, no spread, in any pieces. */
	stats_init(&s);
	for (i = 0; i < 10; i++) {
		stats_acc_begin(&a, &s, STATS_ACC_MAX_VALUE, NULL);
		for (size_t j = 0; j < 100; j++)
			stats_acc_add(&a, STATS_ACC_MAX_VALUE);
		stats_acc_fold(&s, &a);
	}
	CHECK(s.count == 1000 && s.mean == (double)STATS_ACC_MAX_VALUE && s.m2 == 0);
	CHECK(stats_stddev(&s) == 0 && s.min == STATS_ACC_MAX_VALUE && s.max == s.min);
	stats_free(&s);

	/* The sum saturates as stats_add()'s does: in one accumulator, and when folded. */
	v = malloc(4096 * sizeof(*v));
	CHECK(v);
	for (i = 0; i < 4096; i++)
		v[i] = STATS_ACC_MAX_VALUE - i;
	stats_init(&s);
	stats_init(&w);
	acc_pieces(&s, v, 4096, 4096, SHIFT_FIRST, 0);
	add_all(&w, v, 4096);
	CHECK(s.sum == UINT64_MAX && w.sum == UINT64_MAX);
	check_same(&s, &w);
	stats_free(&s);
	stats_init(&s);
	CHECK(stats_add(&s, UINT64_MAX - 5, NULL) == 0);
	stats_acc_begin(&a, &s, 5, NULL);
	stats_acc_add(&a, 5);
	stats_acc_add(&a, 1);
	stats_acc_fold(&s, &a);
	CHECK(s.sum == UINT64_MAX && s.count == 3 && s.min == 1 && s.max == UINT64_MAX - 5);
	stats_free(&s);
	stats_free(&w);
	free(v);
}

/* The most samples one accumulator takes, at the widest spread: its 128-bit sums do not
 * overflow. */
static void
test_acc_limits(void)
{
	const size_t n = (size_t)STATS_ACC_MAX_COUNT;
	struct stats s;
	struct stats_acc a;
	long double mean, m2;
	size_t i;

	stats_init(&s);
	stats_acc_begin(&a, &s, 0, NULL);
	for (i = 0; i < n; i++)
		stats_acc_add(&a, i % 4 == 0 ? 0 : STATS_ACC_MAX_VALUE);
	stats_acc_fold(&s, &a);
	CHECK(s.count == n && s.sum == UINT64_MAX && s.min == 0 && s.max == STATS_ACC_MAX_VALUE);
	/* A quarter at 0, three quarters at M: mean 3M/4, m2 = n * 3M^2/16. */
	mean = 0.75L * (long double)STATS_ACC_MAX_VALUE;
	m2 = (long double)n * 3.0L * (long double)STATS_ACC_MAX_VALUE *
	     (long double)STATS_ACC_MAX_VALUE / 16.0L;
	CHECK(rel_err(s.mean, mean) <= 1e-12);
	CHECK(rel_err(s.m2, m2) <= 1e-12);
	CHECK(stats_hist_get(&s, 0) == n / 4);
	CHECK(stats_hist_get(&s, stats_bucket(STATS_ACC_MAX_VALUE)) == n - n / 4);
	/* Two groups met, two blocks. */
	CHECK(s.hist->n == 2);
	stats_free(&s);
}

/* stats_hist_next() lists exactly the non-empty buckets, in ascending order, with the counts
 * stats_hist_get() reads, whatever groups have blocks; and nothing for an empty aggregate. */
static void
test_hist_next(void)
{
	struct stats s;
	uint64_t seed = 11, count, total = 0;
	unsigned at = 0, i, prev = 0, listed = 0, nonzero = 0;

	stats_init(&s);
	CHECK(!stats_hist_next(&s, &at, &i, &count));
	for (unsigned k = 0; k < 5000; k++)
		CHECK(stats_add(&s, rng_next(&seed) >> (rng_next(&seed) % 64), NULL) == 0);
	CHECK(stats_add(&s, 0, NULL) == 0 && stats_add(&s, UINT64_MAX, NULL) == 0);
	for (at = 0; stats_hist_next(&s, &at, &i, &count);) {
		CHECK(listed == 0 || i > prev);
		CHECK(count != 0 && count == stats_hist_get(&s, i));
		CHECK(at == i + 1);
		prev = i;
		listed++;
		total += count;
	}
	for (unsigned b = 0; b < STATS_BUCKETS; b++)
		nonzero += stats_hist_get(&s, b) != 0;
	CHECK(listed == nonzero && total == s.count && listed > 50);
	CHECK(at == STATS_BUCKETS && !stats_hist_next(&s, &at, &i, &count));
	stats_free(&s);
}

/* A tally of zeros alone (a rare event's) folds as an accumulator of the same zeros does, bit
 * for bit: its moments, taken without a division, are the ones acc_moments() gives (their
 * count, +0, +0). Into an empty aggregate, one of a few values, and one whose sum saturated. */
static void
test_tally_zeros(void)
{
	for (int kind = 0; kind < 3; kind++) {
		struct stats x, y;
		stats_init(&x);
		stats_init(&y);
		uint64_t seed = 5 + (uint64_t)kind;
		for (int k = 0; kind && k < 37; k++) {
			uint64_t v =
			        kind == 2 ? UINT64_MAX - (uint64_t)k : rng_next(&seed) % 100000;
			CHECK(stats_add(&x, v, NULL) == 0 && stats_add(&y, v, NULL) == 0);
		}
		struct stats_tally t;
		stats_tally_begin(&t, &x, NULL, NULL);
		struct stats_acc a;
		stats_acc_begin(&a, &y, 0, NULL);
		for (int i = 0; i < 300; i++) {
			stats_tally_add(&t, 0, false);
			stats_acc_add(&a, 0);
		}
		stats_tally_fold(&t, 300);
		stats_acc_fold(&y, &a);
		CHECK(x.count == y.count && x.count == (kind ? 337u : 300u));
		CHECK(x.sum == y.sum && x.min == 0 && y.min == 0 && x.max == y.max);
		CHECK(memcmp(&x.mean, &y.mean, sizeof(x.mean)) == 0);
		CHECK(memcmp(&x.m2, &y.m2, sizeof(x.m2)) == 0);
		CHECK(stats_hist_get(&x, 0) == 300 && stats_hist_get(&y, 0) == 300);
		stats_free(&x);
		stats_free(&y);
	}
}

int
main(void)
{
	int fds_start = pmc_test_count_fds();

	RUN(test_empty);
	RUN(test_known_set);
	RUN(test_single_sample);
	RUN(test_constant_stream);
	RUN(test_small_values);
	RUN(test_quantile_args);
	RUN(test_large_uniform);
	RUN(test_wide_range);
	RUN(test_bucket_layout);
	RUN(test_bucket_sweep);
	RUN(test_sum_saturation);
	RUN(test_merge_halves);
	RUN(test_merge_edges);
	RUN(test_no_histogram);
	RUN(test_reset);
	RUN(test_bucket_reference);
	RUN(test_acc_random);
	RUN(test_acc_gather_equals_add);
	RUN(test_acc_also);
	RUN(test_acc_edges);
	RUN(test_acc_limits);
	RUN(test_tally_zeros);
	RUN(test_hist_next);

	CHECK(fds_start >= 0);
	CHECK(pmc_test_count_fds() == fds_start);
	printf("ok %u - no_fd_leak\n", ++pmc_test_n);
	printf("1..%u\n", pmc_test_n);
	return 0;
}
