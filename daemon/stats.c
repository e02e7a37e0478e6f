/* stats: streaming aggregate of uint64 samples with a log-linear histogram; see stats.h. */
#include "stats.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SUB_BITS STATS_SUB_BITS
#define SUB_COUNT (1u << SUB_BITS)

_Static_assert(STATS_BUCKETS == (64u - SUB_BITS + 1u) * SUB_COUNT, "STATS_BUCKETS mismatch");
_Static_assert(STATS_BUCKETS < 1024u, "histogram must stay bounded");

static uint64_t
sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

uint64_t
stats_bucket_low(unsigned b)
{
	unsigned e;

	if (b >= STATS_BUCKETS)
		b = STATS_BUCKETS - 1u;
	if (b < SUB_COUNT)
		return b;
	e = (b >> SUB_BITS) + SUB_BITS - 1u;
	return (uint64_t)(SUB_COUNT | (b & (SUB_COUNT - 1u))) << (e - SUB_BITS);
}

uint64_t
stats_bucket_high(unsigned b)
{
	unsigned e;

	if (b >= STATS_BUCKETS)
		b = STATS_BUCKETS - 1u;
	if (b < SUB_COUNT)
		return b;
	e = (b >> SUB_BITS) + SUB_BITS - 1u;
	/* Written as low + (width - 1) so the last bucket ends at UINT64_MAX without overflow. */
	return stats_bucket_low(b) + ((UINT64_C(1) << (e - SUB_BITS)) - 1u);
}

void
stats_init(struct stats *s)
{
	memset(s, 0, sizeof(*s));
}

static int
hist_ensure(struct stats *s)
{
	if (s->hist)
		return 0;
	s->hist = calloc(STATS_BUCKETS, sizeof(*s->hist));
	return s->hist ? 0 : -ENOMEM;
}

int
stats_add(struct stats *s, uint64_t v)
{
	double delta;
	int r;

	if (s->count == 0) {
		s->min = v;
		s->max = v;
	} else {
		if (v < s->min)
			s->min = v;
		if (v > s->max)
			s->max = v;
	}
	s->count++;
	s->sum = sat_add(s->sum, v);
	delta = (double)v - s->mean;
	s->mean += delta / (double)s->count;
	s->m2 += delta * ((double)v - s->mean);

	r = hist_ensure(s);
	if (r < 0)
		return r;
	s->hist[stats_bucket(v)]++;
	return 0;
}

int
stats_acc_begin(struct stats_acc *a, struct stats *s, uint64_t shift)
{
	int r = hist_ensure(s);

	a->sum = 0;
	a->sq = 0;
	a->shift = shift;
	a->count = 0;
	a->min = UINT64_MAX;
	a->max = 0;
	a->hist = s->hist;
	return r;
}

void
stats_acc_gather(struct stats_acc *a, const uint64_t *base, size_t stride, const uint32_t *idx,
                 size_t n)
{
	stats_u128 sq = a->sq;
	uint64_t shift = a->shift, lo = a->min, hi = a->max, *hist = a->hist, run = 0;
	unsigned last;

	if (n == 0)
		return;
	/*
	 * Counting each sample into the histogram as it comes would chain the increments of a
	 * bucket through memory (store, then load) when many samples share it, as counts of
	 * rare events do: count the run in a register instead.
	 */
	last = stats_bucket(base[(size_t)idx[0] * stride]);
	for (size_t k = 0; k < n;) {
		/* Values below 2^53: the sum of 2^11 of them fits in 64 bits. */
		size_t stop = n - k > 2048 ? k + 2048 : n;
		uint64_t sum = 0;

		for (; k < stop; k++) {
			uint64_t v = base[(size_t)idx[k] * stride];
			int64_t d = (int64_t)(v - shift);
			unsigned bucket = stats_bucket(v);

			sum += v;
			sq += (stats_u128)((stats_i128)d * d);
			lo = v < lo ? v : lo;
			hi = v > hi ? v : hi;
			if (bucket != last) {
				hist[last] += run;
				last = bucket;
				run = 0;
			}
			run++;
		}
		a->sum += sum;
	}
	hist[last] += run;
	a->sq = sq;
	a->min = lo;
	a->max = hi;
	a->count += n;
}

/* x in 64-bit precision; libgcc's 128-bit conversion only when it needs more than 64 bits. */
static long double
ld_i128(stats_i128 x)
{
	return x >= INT64_MIN && x <= INT64_MAX ? (long double)(int64_t)x : (long double)x;
}

static long double
ld_u128(stats_u128 x)
{
	return x <= UINT64_MAX ? (long double)(uint64_t)x : (long double)x;
}

void
stats_acc_fold(struct stats *s, const struct stats_acc *a)
{
	/* Exact: s1 = sum(v - shift), |s1| < 2^75; sq < 2^128. */
	stats_i128 s1i = (stats_i128)(a->sum - (stats_u128)a->count * a->shift);
	long double s1, q, m2, na, nb, f, delta;

	if (a->count == 0)
		return;
	/* One rounding each in 64-bit precision: sq - s1^2 / n cancels at most a factor 2n. */
	s1 = ld_i128(s1i);
	nb = (long double)a->count;
	q = s1 / nb;
	m2 = ld_u128(a->sq) - s1 * q;
	if (!(m2 > 0))
		m2 = 0;

	if (s->count == 0) {
		s->min = a->min;
		s->max = a->max;
		s->mean = (double)((long double)a->shift + q);
		s->m2 = (double)m2;
	} else {
		/*
		 * The parallel formula of stats_merge() in 64-bit precision. While @s's sum is
		 * exact (not saturated) the means come from the sums, and their difference from
		 * exact integers, not from the rounded means: then the result is as exact as if
		 * every sample had come in one accumulator.
		 */
		if (a->min < s->min)
			s->min = a->min;
		if (a->max > s->max)
			s->max = a->max;
		na = (long double)s->count;
		f = nb / (na + nb);
		if (s->sum < UINT64_MAX) {
			stats_i128 t =
			        (stats_i128)((stats_u128)a->shift * s->count) - (stats_i128)s->sum;

			delta = ld_i128(t) / na + q; /* (shift - sum / na) + q */
			s->mean = (double)(ld_u128((stats_u128)s->sum + a->sum) / (na + nb));
		} else {
			delta = ((long double)a->shift - (long double)s->mean) + q;
			s->mean = (double)((long double)s->mean + delta * f);
		}
		s->m2 = (double)((long double)s->m2 + m2 + delta * delta * na * f);
	}
	s->count += a->count;
	s->sum = sat_add(s->sum, a->sum > UINT64_MAX ? UINT64_MAX : (uint64_t)a->sum);
}

int
stats_merge(struct stats *into, const struct stats *from)
{
	/* Copy first: @from may be @into. */
	const struct stats b = *from;
	double n, delta;
	unsigned i;
	int r;

	if (b.count == 0)
		return 0;

	if (into->count == 0) {
		into->min = b.min;
		into->max = b.max;
		into->mean = b.mean;
		into->m2 = b.m2;
	} else {
		if (b.min < into->min)
			into->min = b.min;
		if (b.max > into->max)
			into->max = b.max;
		n = (double)into->count + (double)b.count;
		delta = b.mean - into->mean;
		into->mean += delta * ((double)b.count / n);
		into->m2 += b.m2 + delta * delta * ((double)into->count * (double)b.count / n);
	}
	into->count += b.count;
	into->sum = sat_add(into->sum, b.sum);

	if (!b.hist)
		return 0;
	r = hist_ensure(into);
	if (r < 0)
		return r;
	for (i = 0; i < STATS_BUCKETS; i++)
		into->hist[i] = sat_add(into->hist[i], b.hist[i]);
	return 0;
}

double
stats_stddev(const struct stats *s)
{
	if (s->count < 2 || !(s->m2 > 0))
		return 0;
	return sqrt(s->m2 / (double)s->count);
}

static double
clamp_to_range(const struct stats *s, double x)
{
	if (x < (double)s->min)
		return (double)s->min;
	if (x > (double)s->max)
		return (double)s->max;
	return x;
}

/* Nearest rank ceil(q * n) in [1, n], forgiving a product a few ulps above an integer. */
static uint64_t
nearest_rank(double q, uint64_t n)
{
	double x = q * (double)n;
	double r = ceil(x);

	if (r - x > 1.0 - 4.0 * DBL_EPSILON * (x > 1.0 ? x : 1.0))
		r -= 1.0;
	if (!(r >= 1.0))
		return 1;
	if (r >= (double)n)
		return n;
	return (uint64_t)r;
}

double
stats_quantile(const struct stats *s, double q)
{
	uint64_t n = 0, rank, seen = 0, lo, hi, mid;
	unsigned i;

	if (s->count == 0)
		return 0;
	if (!(q > 0) || s->min == s->max)
		return (double)s->min;
	if (q >= 1)
		return (double)s->max;

	if (s->hist)
		for (i = 0; i < STATS_BUCKETS; i++)
			n = sat_add(n, s->hist[i]);
	if (n == 0)
		return clamp_to_range(s, s->mean);

	rank = nearest_rank(q, n);
	for (i = 0; i < STATS_BUCKETS; i++) {
		seen = sat_add(seen, s->hist[i]);
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

void
stats_reset(struct stats *s)
{
	uint64_t *hist = s->hist;

	if (hist)
		memset(hist, 0, STATS_BUCKETS * sizeof(*hist));
	stats_init(s);
	s->hist = hist;
}

void
stats_free(struct stats *s)
{
	free(s->hist);
	stats_init(s);
}

size_t
stats_memory(const struct stats *s)
{
	return s->hist ? STATS_BUCKETS * sizeof(*s->hist) : 0;
}
