/* stats: streaming aggregate of uint64 samples with a log-linear histogram; see stats.h. */
#include "model/stats.h"
#include "model/share.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define SUB_BITS STATS_SUB_BITS
#define SUB_COUNT (1u << SUB_BITS)

_Static_assert(STATS_BUCKETS == (64u - SUB_BITS + 1u) * SUB_COUNT, "STATS_BUCKETS mismatch");
_Static_assert(STATS_BUCKETS < 1024u, "histogram must stay bounded");
_Static_assert(STATS_BUCKETS % STATS_GROUP_BUCKETS == 0, "groups cover the buckets");
_Static_assert(2u * (STATS_SLOT_BIAS + STATS_GROUPS - 1u) <= UINT8_MAX, "slots fit a byte");
_Static_assert(STATS_SLOT_BIAS > STATS_GROUPS - 1u, "a slot is never 0");
_Static_assert(sizeof(struct stats_hist) == 64u, "the table takes one cache line");

#define BLOCK_BYTES (SUB_COUNT * sizeof(uint64_t))

/* The slot of block @j for group @g, and where the counter of bucket @b is in @c when its
 * group's slot is @k (struct stats_hist). */
static inline uint8_t
hist_slot(unsigned j, unsigned g)
{
	return (uint8_t)(2u * (STATS_SLOT_BIAS + j - g));
}

static inline size_t
hist_index(unsigned k, unsigned b)
{
	return 8u * (size_t)k + b - 16u * STATS_SLOT_BIAS;
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

/* What a histogram lookup sees while @s has none: no blocks. Never written. */
/* What histogram blocks grow with (stats_set_realloc()). */
static void *(*hist_realloc)(void *, size_t) = realloc;

void
stats_set_realloc(void *(*fn)(void *, size_t))
{
	hist_realloc = fn ? fn : realloc;
}

static struct stats_hist hist_none;

static inline struct stats_hist *
hist_or_none(const struct stats *s)
{
	return s->hist ? s->hist : &hist_none;
}

void
stats_budget_credit(struct stats_budget *b, size_t bytes)
{
	for (; b; b = b->parent)
		b->used = b->used > bytes ? b->used - bytes : 0;
}

bool
stats_budget_charge(struct stats_budget *budget, size_t bytes)
{
	for (struct stats_budget *b = budget; b; b = b->parent)
		if (b->parent && b->keep != SIZE_MAX
		            ? !share_allows(b->used, bytes, b->limit, b->parent->used,
		                            b->parent->limit, b->keep)
		            : bytes > b->limit || b->used > b->limit - bytes)
			return false;
	for (struct stats_budget *b = budget; b; b = b->parent)
		b->used += bytes;
	return true;
}

/* Whether @bytes more fit @budget (and its parents; NULL: no budget); charges them if so,
 * counts a miss if not. */
static bool
budget_take(struct stats_budget *budget, size_t bytes)
{
	if (stats_budget_charge(budget, bytes))
		return true;
	budget->missed++;
	return false;
}

/* The block of group @g, allocated (zeroed, charged to @budget) if @s has none yet; NULL when
 * that fails, with @s unchanged. Moves @s->hist. */
static uint64_t *
hist_block(struct stats *s, unsigned g, struct stats_budget *budget)
{
	struct stats_hist *h = s->hist;
	unsigned n = h ? h->n : 0;

	if (h && h->slot[g])
		return &h->c[hist_index(h->slot[g], g * SUB_COUNT)];
	size_t bytes = BLOCK_BYTES + (n == 0 ? sizeof(*h) : 0);
	if (!budget_take(budget, bytes))
		return NULL;
	/* One block more, no spare room: most aggregates stop at a few. */
	h = hist_realloc(h, sizeof(*h) + (n + 1u) * BLOCK_BYTES);
	if (!h) {
		stats_budget_credit(budget, bytes);
		return NULL;
	}
	if (n == 0)
		memset(h, 0, sizeof(*h));
	memset(&h->c[n * SUB_COUNT], 0, BLOCK_BYTES);
	h->slot[g] = hist_slot(n, g);
	h->n = (uint8_t)(n + 1u);
	s->hist = h;
	return &h->c[n * SUB_COUNT];
}

/* stats_hist_add() where bucket @b's group has no block yet. Kept out of the loops. */
static int hist_add_new(struct stats *s, unsigned b, uint64_t n, struct stats_budget *budget)
        __attribute__((noinline, cold));

static int
hist_add_new(struct stats *s, unsigned b, uint64_t n, struct stats_budget *budget)
{
	uint64_t *blk = hist_block(s, b / SUB_COUNT, budget);

	if (!blk)
		return -ENOMEM;
	blk[b % SUB_COUNT] += n;
	return 0;
}

/* Counts @n in bucket @b of @h, @s's histogram or hist_none; returns what @s's histogram is
 * afterwards (it moves when a block is added). */
static inline struct stats_hist *
hist_count(struct stats *s, struct stats_hist *h, unsigned b, uint64_t n,
           struct stats_budget *budget)
{
	unsigned k = h->slot[b / SUB_COUNT];

	if (__builtin_expect(k != 0, 1)) {
		h->c[hist_index(k, b)] += n;
		return h;
	}
	(void)hist_add_new(s, b, n, budget);
	return hist_or_none(s);
}

int
stats_hist_add(struct stats *s, unsigned b, uint64_t n, struct stats_budget *budget)
{
	unsigned k = hist_or_none(s)->slot[b / SUB_COUNT];

	if (__builtin_expect(k != 0, 1)) {
		s->hist->c[hist_index(k, b)] += n;
		return 0;
	}
	return n ? hist_add_new(s, b, n, budget) : 0;
}

/* stats_hist_block() - the block of a group (the layout is this file's: others walk a
 * histogram with stats_hist_next())
 * @h: a histogram
 * @g: the group, below STATS_GROUPS
 * Return: the group's 16 counters (buckets 16@g..16@g+15), or NULL when it has no block.
 */
static inline const uint64_t *
stats_hist_block(const struct stats_hist *h, unsigned g)
{
	unsigned k = h->slot[g];

	return k ? &h->c[8u * k + STATS_GROUP_BUCKETS * g - 16u * STATS_SLOT_BIAS] : NULL;
}

bool
stats_hist_next(const struct stats *s, unsigned *b, unsigned *index, uint64_t *count)
{
	const struct stats_hist *h = s->hist;

	for (unsigned i = *b; h && i < STATS_BUCKETS;) {
		const uint64_t *blk = stats_hist_block(h, i / SUB_COUNT);

		if (!blk) {
			i = (i / SUB_COUNT + 1) * SUB_COUNT;
			continue;
		}
		if (blk[i % SUB_COUNT]) {
			*index = i;
			*count = blk[i % SUB_COUNT];
			*b = i + 1;
			return true;
		}
		i++;
	}
	*b = STATS_BUCKETS;
	return false;
}

int
stats_hist_set(struct stats *s, unsigned b, uint64_t n, struct stats_budget *budget)
{
	uint64_t *blk;

	if (b >= STATS_BUCKETS)
		return -EINVAL;
	if (!n && !hist_or_none(s)->slot[b / SUB_COUNT])
		return 0;
	blk = hist_block(s, b / SUB_COUNT, budget);
	if (!blk)
		return -ENOMEM;
	blk[b % SUB_COUNT] = n;
	return 0;
}

int
stats_add(struct stats *s, uint64_t v, struct stats_budget *budget)
{
	double delta;

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
	s->sum = util_sat_add(s->sum, v);
	delta = (double)v - s->mean;
	s->mean += delta / (double)s->count;
	s->m2 += delta * ((double)v - s->mean);

	return stats_hist_add(s, stats_bucket(v), 1, budget);
}

void
stats_acc_begin(struct stats_acc *a, struct stats *s, uint64_t shift, struct stats_budget *budget)
{
	a->sum = 0;
	a->sq = 0;
	a->shift = shift;
	a->count = 0;
	a->min = UINT64_MAX;
	a->max = 0;
	a->s = s;
	a->s2 = NULL;
	a->budget = budget;
}

/* The loop of stats_acc_gather(), inlined once for stride 1 (a column of its own, as the wall
 * times are) and once for any stride. */
static inline void gather(struct stats_acc *a, const uint64_t *base, size_t stride,
                          const uint32_t *idx, size_t n) __attribute__((always_inline));

static inline void
gather(struct stats_acc *a, const uint64_t *base, size_t stride, const uint32_t *idx, size_t n)
{
	stats_u128 sq = 0, total = 0;
	uint64_t lo = a->min, hi = a->max, run = 0;
	struct stats *s = a->s, *s2 = a->s2;
	struct stats_hist *h = hist_or_none(s), *h2 = s2 ? hist_or_none(s2) : NULL;
	const uint32_t *end = idx + n;
	unsigned last;

	/*
	 * Counting each sample into the histogram as it comes would chain the increments of a
	 * bucket through memory (store, then load) when many samples share it, as counts of
	 * rare events do: count the run in a register instead. A run is never empty, so no
	 * block is allocated for a group without samples.
	 *
	 * The squares are summed unshifted, sum(v^2) < 2^106 * STATS_ACC_MAX_COUNT = 2^128, and
	 * shifted once at the end: sum((v - shift)^2) = sum(v^2) - 2 shift sum(v) + n shift^2,
	 * exact modulo 2^128 and so exact, the true value being below 2^128 too. One register
	 * and one subtraction less per sample than shifting each.
	 */
	last = stats_bucket(base[(size_t)*idx * stride]);
	while (idx < end) {
		/* Values below 2^53: the sum of 2^11 of them fits in 64 bits. */
		const uint32_t *stop = end - idx > 2048 ? idx + 2048 : end;
		uint64_t sum = 0;

		for (; idx < stop; idx++) {
			uint64_t v = base[(size_t)*idx * stride];
			unsigned bucket = stats_bucket(v);

			sum += v;
			sq += (stats_u128)v * v;
			lo = v < lo ? v : lo;
			hi = v > hi ? v : hi;
			if (bucket != last) {
				h = hist_count(s, h, last, run, a->budget);
				if (s2)
					h2 = hist_count(s2, h2, last, run, a->budget);
				last = bucket;
				run = 0;
			}
			run++;
		}
		total += sum;
	}
	(void)hist_count(s, h, last, run, a->budget);
	if (s2)
		(void)hist_count(s2, h2, last, run, a->budget);
	a->sum += total;
	a->sq += sq - 2u * a->shift * total + (stats_u128)n * a->shift * a->shift;
	a->min = lo;
	a->max = hi;
	a->count += n;
}

void
stats_acc_gather(struct stats_acc *a, const uint64_t *base, size_t stride, const uint32_t *idx,
                 size_t n)
{
	if (n == 0)
		return;
	if (stride == 1)
		gather(a, base, 1, idx, n);
	else
		gather(a, base, stride, idx, n);
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

/* What stats_acc_fold() takes of an accumulator, the same for every aggregate it folds into:
 * its count, its sum of deviations from its shift and their mean, and its m2. */
struct acc_moments {
	long double nb, q, m2;
};

static struct acc_moments
acc_moments(const struct stats_acc *a)
{
	/* Exact: s1 = sum(v - shift), |s1| < 2^75; sq < 2^128. */
	stats_i128 s1i = (stats_i128)(a->sum - (stats_u128)a->count * a->shift);
	struct acc_moments m;
	long double s1;

	/* One rounding each in 64-bit precision: sq - s1^2 / n cancels at most a factor 2n. */
	s1 = ld_i128(s1i);
	m.nb = (long double)a->count;
	m.q = s1 / m.nb;
	m.m2 = ld_u128(a->sq) - s1 * m.q;
	if (!(m.m2 > 0))
		m.m2 = 0;
	return m;
}

/* stats_acc_fold() of a nonempty @a, its moments @mo. */
static void
acc_fold(struct stats *s, const struct stats_acc *a, const struct acc_moments *mo)
{
	long double na, nb = mo->nb, q = mo->q, m2 = mo->m2, f, delta;

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
	s->sum = util_sat_add(s->sum, a->sum > UINT64_MAX ? UINT64_MAX : (uint64_t)a->sum);
}

void
stats_acc_fold(struct stats *s, const struct stats_acc *a)
{
	if (a->count == 0)
		return;
	struct acc_moments mo = acc_moments(a);
	acc_fold(s, a, &mo);
}

int
stats_merge(struct stats *into, const struct stats *from, struct stats_budget *budget)
{
	/* Copy first: @from may be @into. */
	const struct stats b = *from;
	double n, delta;
	const struct stats_hist *h = b.hist;
	int r = 0;

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
	into->sum = util_sat_add(into->sum, b.sum);

	if (!h)
		return 0;
	if (from == into) {
		/* Every block doubles; none is added, so @h does not move. */
		for (unsigned i = 0; i < h->n * SUB_COUNT; i++)
			into->hist->c[i] = util_sat_add(h->c[i], h->c[i]);
		return 0;
	}
	for (unsigned g = 0; g < STATS_GROUPS; g++) {
		const uint64_t *src;
		uint64_t *dst, any = 0;

		if (!h->slot[g])
			continue;
		src = &h->c[hist_index(h->slot[g], g * SUB_COUNT)];
		for (unsigned i = 0; i < SUB_COUNT; i++)
			any |= src[i];
		/* A block zeroed by stats_reset() adds nothing: no block for it in @into. */
		if (!any)
			continue;
		dst = hist_block(into, g, budget);
		if (!dst) {
			r = -ENOMEM;
			continue;
		}
		for (unsigned i = 0; i < SUB_COUNT; i++)
			dst[i] = util_sat_add(dst[i], src[i]);
	}
	return r;
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
	const struct stats_hist *h = s->hist;
	uint64_t n = 0, rank, seen = 0, lo, hi, mid;
	unsigned i = STATS_BUCKETS - 1u;

	if (s->count == 0)
		return 0;
	if (!(q > 0) || s->min == s->max)
		return (double)s->min;
	if (q >= 1)
		return (double)s->max;

	/* A group without a block has only zero counters: skipping it changes no sum. */
	for (unsigned k = 0; h && k < h->n * SUB_COUNT; k++)
		n = util_sat_add(n, h->c[k]);
	if (n == 0)
		return clamp_to_range(s, s->mean);

	rank = nearest_rank(q, n);
	for (unsigned g = 0; g < STATS_GROUPS; g++) {
		const uint64_t *blk;

		if (!h->slot[g])
			continue;
		blk = &h->c[hist_index(h->slot[g], g * SUB_COUNT)];
		for (unsigned j = 0; j < SUB_COUNT; j++) {
			seen = util_sat_add(seen, blk[j]);
			if (seen >= rank) {
				i = g * SUB_COUNT + j;
				goto found;
			}
		}
	}
	/* Not reached: the counters sum to n >= rank. The last bucket, as before. */
found:

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
	struct stats_hist *h = s->hist;

	if (h)
		memset(h->c, 0, h->n * BLOCK_BYTES);
	stats_init(s);
	s->hist = h;
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
	return s->hist ? sizeof(*s->hist) + s->hist->n * BLOCK_BYTES : 0;
}

void
stats_tally_hist_new(const struct stats_tally *t, struct stats *s, unsigned b)
{
	(void)stats_hist_add(s, b, 1, t->budget);
}

void
stats_tally_fold(const struct stats_tally *t, uint64_t count)
{
	uint64_t zeros = count - t->nonzero;

	if (count == 0)
		return;
	if (zeros) {
		(void)stats_hist_add(t->s, 0, zeros, t->budget);
		if (t->s2)
			(void)stats_hist_add(t->s2, 0, zeros, t->budget);
	}
	/*
	 * An accumulator of the same samples, shifted by their mean (rounded down: within their
	 * range): sum((v - m)^2) = sum(v^2) - 2 m sum(v) + n m^2, exact modulo 2^128 and so
	 * exact, the true value being below 2^128.
	 */
	uint64_t m = t->nonzero ? t->sum / count : 0;
	struct stats_acc a = {
	        .sum = t->sum,
	        .sq = t->sq - 2 * (stats_u128)m * t->sum + (stats_u128)count * m * m,
	        .shift = m,
	        .count = count,
	        .min = zeros ? 0 : t->min,
	        .max = t->max,
	};
	/* The moments once for both aggregates: the same operations stats_acc_fold() does. Of
	 * zeros alone (a rare event's, often) they are what acc_moments() gives, exactly: their
	 * count, and +0 for their mean and m2. */
	struct acc_moments mo =
	        t->nonzero ? acc_moments(&a) : (struct acc_moments){.nb = (long double)count};
	acc_fold(t->s, &a, &mo);
	if (t->s2)
		acc_fold(t->s2, &a, &mo);
}
