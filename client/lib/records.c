/* libpmcclient: the records a thread read through its pages writes (client-internal.h,
 * PMC_REC_BYTES), turned into samples by whoever holds G.conn.lock (or, while another thread
 * holds it, by the thread itself; t->conv says who): the nesting, the call paths, the deltas,
 * the multiplexing and the wall time's checks, off the region itself. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "lib/client-internal.h"
#include "lib/reader.h"

uint32_t
pmc__sample_scale(struct pmc_sample *s, size_t n, uint64_t de, uint64_t dr)
{
	float ratio = de ? (float)dr / (float)de : 0.0f;
	for (size_t j = 0; j < n; j++) {
		pmc_sample_ratio(s, n)[j] = ratio;
		s->values[j] = pmc_scale(s->values[j], de, dr);
	}
	return (UINT32_C(1) << n) - 1;
}

uint32_t
pmc__path_resolve(uint32_t parent, pmc_region_t region, unsigned d)
{
	uint32_t path;
	if (region == PMC_WARMUP_REGION)
		path = 0;
	else if (parent & PMC_PATH_FLAGS)
		path = (parent & PMC_PATH_FLAGS) | region;
	else if (d >= PMC_PATH_DEPTH)
		path = PMC_PATH_FLAG_DEEP | region;
	else if (!(path = pmc__path_intern(parent, region)))
		path = PMC_PATH_FLAG_FULL | region;
	/* Before the sample is published (release): its batch will look for the name. */
	if (path & PMC_PATH_FLAGS)
		atomic_store_explicit(&G.paths.flagged, 1, memory_order_relaxed);
	return path;
}

/* The path of @region begun at depth @d in @parent on @t, through the thread's cache (the
 * reader's alone on a thread that writes records: whoever holds t->conv). */
static uint32_t
rec_path(struct pmc_thread *t, uint32_t parent, pmc_region_t region, unsigned d)
{
	struct pcache *c = &t->pcache[pcache_slot(parent, region)];
	uint64_t key = pcache_key(parent, region);
	if (c->key == key)
		return c->path;
	c->key = key;
	c->path = pmc__path_resolve(parent, region, d);
	return c->path;
}

bool
pmc__records_alloc(struct pmc_thread *t)
{
	/* A slot: the record's words, to a power of two (64, 128 or 256 bytes). */
	t->rs = 64;
	while (t->rs < PMC_REC_WORDS(t->n) * sizeof(uint64_t))
		t->rs *= 2;
	t->cw = PMC_REC_WORDS((unsigned)t->n) + 1;
	t->ccap = PMC_STACK_START;
	t->rbase = aligned_alloc(PMC_REC_BYTES, PMC_REC_BYTES);
	t->cstk = calloc((size_t)t->ccap * t->cw, sizeof(uint64_t));
	if (!t->rbase || !t->cstk)
		return false;
	t->rec = 1;
	pmc__records_reset(t);
	return true;
}

void
pmc__records_reset(struct pmc_thread *t)
{
	memset(t->rbase, 0, PMC_REC_BYTES);
	t->rw = t->rr = t->rbase;
	__atomic_store_n(&t->rlim, rec_prev(t->rbase, t->rs), __ATOMIC_RELEASE);
	t->cdepth = 0;
	t->skip = t->pops = 0;
	memset(t->closs, 0, sizeof(t->closs));
	t->tomb_end = 0;
}

void
pmc__records_due(struct pmc_thread *t, uint64_t e)
{
	uint64_t done = atomic_load_explicit(&t->head, memory_order_acquire);
	uint64_t out = e - done, kick = PMC_REC_KICK(t->rs);
	/* The reader caught up since this kick point was set. */
	if (out < kick) {
		__atomic_store_n(&t->ekick, done + kick, __ATOMIC_RELAXED);
		return;
	}
	__atomic_store_n(&t->ekick, e + kick / 4, __ATOMIC_RELAXED);
	if (__atomic_load_n(&G.service.running, __ATOMIC_RELAXED) && out < 3 * kick) {
		pthread_cond_signal(&G.service.wake);
		return;
	}
	pmc__flush_try(t);
}

/* The reader's frame at depth @d (below ccap). */
static inline uint64_t *
cframe(const struct pmc_thread *t, unsigned d)
{
	return t->cstk + (size_t)d * t->cw;
}

/* A begin's record @q pushed as the frame of an open region. */
static void
rec_push(struct pmc_thread *t, const uint64_t *q)
{
	unsigned d = t->cdepth;
	if (d >= t->ccap && t->ccap < PMC_LIMIT_DEPTH) {
		unsigned cap = 2 * t->ccap;
		uint64_t *m = realloc(t->cstk, (size_t)cap * t->cw * sizeof(uint64_t));
		if (m) {
			t->cstk = m;
			t->ccap = cap;
		}
	}
	t->cdepth = d + 1;
	if (d >= t->ccap)
		return; /* its end is lost (PMC_LOSS_DEPTH) */
	uint64_t *f = cframe(t, d);
	size_t w = PMC_REC_WORDS(t->n);
	memcpy(f, q, w * sizeof(uint64_t));
	pmc_region_t region = (pmc_region_t)q[0];
	uint32_t parent = d ? (uint32_t)cframe(t, d - 1)[w] : 0;
	f[w] = region ? rec_path(t, parent, region, d) : 0;
}

/* Whether open frame @d is of @region. */
static inline bool
rec_is(const struct pmc_thread *t, unsigned d, pmc_region_t region)
{
	return d < t->ccap && (pmc_region_t)cframe(t, d)[0] == region;
}

/* The sample of the end record @q in ring slot @s, or a tombstone. Return: its loss reason, or
 * -1 for a sample, PMC_LOSS_N for no region at all. */
static int
rec_end(struct pmc_thread *t, const uint64_t *q, struct pmc_sample *s)
{
	pmc_region_t region = (pmc_region_t)q[0];
	unsigned d = t->cdepth;
	if (!region)
		return PMC_LOSS_N;
	if (!d)
		return PMC_LOSS_N; /* an end with no begin: none */
	if (d > t->ccap) {
		/* The end of a begin too deep to have a frame. */
		t->cdepth = d - 1;
		return PMC_LOSS_DEPTH;
	}
	if (!rec_is(t, d - 1, region)) {
		unsigned k = d;
		while (k > 0 && !rec_is(t, k - 1, region))
			k--;
		if (!k)
			return PMC_LOSS_N; /* no such region open: none, as the general way */
		/* Regions begun inside this one and not ended: their samples are lost. */
		t->closs[PMC_LOSS_NESTING] += d - k;
		d = k;
	}
	t->cdepth = d - 1;
	const uint64_t *f = cframe(t, d - 1);
	if ((f[0] | q[0]) & PMC_REC_FAIL)
		return PMC_LOSS_READ;
	uint64_t wall = 0;
	if (pmc_wall_delta(f[1], q[1], &wall) < 0)
		return PMC_LOSS_READ;
	size_t n = t->n;
	for (size_t j = 0; j < n; j++)
		s->values[j] = q[4 + j] - f[4 + j];
	uint64_t de = q[2] - f[2], dr = q[3] - f[3];
	s->scaled = dr != de ? pmc__sample_scale(s, n, de, dr) : 0;
	s->region = (uint32_t)f[PMC_REC_WORDS(n)];
	s->wall = wall;
	return -1;
}

/* pmc__records_convert() by the holder of t->conv. */
static void
convert(struct pmc_thread *t)
{
	uint64_t e = atomic_load_explicit(t->head_mirror, memory_order_acquire);
	uint64_t hd = atomic_load_explicit(&t->head, memory_order_relaxed);
	uint64_t tl = atomic_load_explicit(&t->tail, memory_order_acquire);
	struct ring *rg = atomic_load_explicit(&t->ring, memory_order_relaxed);
	if (hd >= e)
		return;
	if (e - tl > rg->cap) {
		/* The daemon away or behind: hold more until it can be sent. */
		pmc__ring_grow(t);
		rg = atomic_load_explicit(&t->ring, memory_order_relaxed);
	}
	uint8_t *r = t->rr;
	size_t rs = t->rs;
	/* A ring's worth at most: the E-th end is within it, unless the records were never
	 * written as they must be. */
	for (size_t left = PMC_REC_BYTES / rs; hd < e && hd - tl < rg->cap && left; left--) {
		const uint64_t *q = (const uint64_t *)(const void *)r;
		uint64_t h = q[0];
		if (h & PMC_REC_POP) {
			uint64_t k = h & UINT32_MAX;
			t->cdepth = k < t->cdepth ? t->cdepth - (unsigned)k : 0;
		} else if (!(h & PMC_REC_END)) {
			if ((pmc_region_t)h)
				rec_push(t, q);
		} else {
			struct pmc_sample *s = ring_slot(rg, hd);
			int why = rec_end(t, q, s);
			if (why >= 0) {
				s->region = 0;
				s->scaled = PMC_SAMPLE_TOMB | (uint32_t)why;
				s->wall = 0;
				t->tomb_end = hd + 1;
			} else if (s->scaled) {
				atomic_store_explicit(&t->scaled_end, hd + 1, memory_order_relaxed);
			}
			hd++;
		}
		r = rec_next(r, rs);
	}
	t->rr = r;
	__atomic_store_n(&t->rlim, rec_prev(r, rs), __ATOMIC_RELEASE);
	atomic_store_explicit(&t->head, hd, memory_order_release);
	__atomic_store_n(&t->ekick, hd + PMC_REC_KICK(rs), __ATOMIC_RELAXED);
}

void
pmc__records_convert(struct pmc_thread *t)
{
	if (!t->rec)
		return;
	uint64_t deadline = 0;
	for (unsigned k = 0; atomic_exchange_explicit(&t->conv, 1, memory_order_acquire); k++) {
		/* The clock read once in 64 yields (a yield alone costs less than a read). */
		if (k % 64 == 0) {
			uint64_t now = util_now_ns(CLOCK_MONOTONIC);
			if (!deadline)
				deadline = now + PMC_CONV_WAIT_NS;
			else if (now >= deadline)
				return;
		}
		sched_yield();
	}
	convert(t);
	atomic_store_explicit(&t->conv, 0, memory_order_release);
}

bool
pmc__records_convert_own(struct pmc_thread *t)
{
	if (!t->rec || atomic_exchange_explicit(&t->conv, 1, memory_order_acquire))
		return false;
	uint64_t hd = atomic_load_explicit(&t->head, memory_order_relaxed);
	convert(t);
	atomic_store_explicit(&t->conv, 0, memory_order_release);
	return atomic_load_explicit(&t->head, memory_order_relaxed) != hd;
}

unsigned
pmc__records_open(const struct pmc_thread *t)
{
	/* Past the E-th end, the records are begins and the ends' pops: no end, each publishes. */
	uint64_t open = t->cdepth;
	for (const uint8_t *r = t->rr; r != t->rw; r = rec_next(r, t->rs)) {
		uint64_t h = *(const uint64_t *)(const void *)r;
		if (h & PMC_REC_POP)
			open -= (h & UINT32_MAX) < open ? (h & UINT32_MAX) : open;
		else if ((pmc_region_t)h)
			open++;
	}
	return open > t->pops ? (unsigned)(open - t->pops) : 0;
}
