/* ingest: how a checked sample batch becomes aggregates. Each sample counts in its region
 * and, on a call path connection, in its call path's node; where either is (or whether a
 * limit refused its region) the caller's resolver says, so that this file knows nothing of
 * connections. A region whose samples all came through one node shares that node's
 * statistics (registry.h, struct region_agg's via): their values are counted once, in the
 * node's, until a sample of another node or of none makes them part (share_begin(),
 * share_end()). The batch is counted key by key through the accumulators of stats.h (grouped,
 * no division or lookup per value), or sample by sample where its values do not fit them. */
#include "model/ingest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The extrapolated values (bits of @scaled) of one sample of @reg; @k indexes the next ratio. */
static void
count_scaled(const struct ingest *g, struct region_agg *reg, uint32_t scaled, size_t *k)
{
	for (size_t j = 0; scaled; j++, scaled >>= 1) {
		if (!(scaled & 1))
			continue;
		struct event_agg *e = &reg->ev[g->ev_id[j]];
		float ratio = g->b->scale_ratio[(*k)++];
		e->scaled++;
		e->ratio_sum += ratio >= 0 && ratio <= 1 ? ratio : 0;
	}
}

/* Whether @r has event slot @e. */
static inline bool
slot_there(const struct region_agg *r, size_t e)
{
	return e < r->n_ev && r->seen[e];
}

/* The event slots of @t's events in @reg (and @node): created first, as creating one may
 * move the others. 0 or -ENOMEM. */
static int
batch_slots(const struct ingest *g, struct region_agg *reg, struct region_agg *node)
{
	for (size_t j = 0; j < g->ne; j++) {
		size_t e = g->ev_id[j];
		/* Most batches find every slot there: no call then. */
		if (!slot_there(reg, e) && !registry_region_event(reg, e))
			return -ENOMEM;
		if (node && !slot_there(node, e) && !registry_region_event(node, e))
			return -ENOMEM;
	}
	return 0;
}

/* Whether @r's statistics (wall and events) have counted nothing. */
static bool
stats_empty(const struct region_agg *r)
{
	if (r->wall.count)
		return false;
	for (size_t i = 0; i < r->n_ev; i++)
		if (r->ev[i].st.count)
			return false;
	return true;
}

/* Whether a region about to count samples of @node (NULL: of none) starts sharing its
 * statistics with @node: when neither has counted any (registry.h, struct region_agg's via). */
static bool
share_begins(const struct region_agg *reg, const struct region_agg *node)
{
	return node && !reg->via && stats_empty(reg) && stats_empty(node);
}

/* Whether a region about to count samples of @node stops sharing its statistics: it shares
 * them with another node, which those samples do not go through. */
static bool
share_ends(const struct region_agg *reg, const struct region_agg *node)
{
	return reg->via && reg->via != node;
}

static void
share_begin(struct region_agg *reg, struct region_agg *node)
{
	if (share_begins(reg, node))
		reg->via = node;
}

/* share_ends(): the region gets its own copy first. */
static void
share_end(const struct ingest *g, struct region_agg *reg, const struct region_agg *node)
{
	if (share_ends(reg, node))
		(void)registry_region_unshare(reg, g->budget, true);
}

/* Counts a checked batch sample by sample with stats_add(): the way for values over
 * STATS_ACC_MAX_VALUE, or when count_accumulated() cannot allocate. Sample i counts where
 * @keys[i] says (the resolver); *@counted counts those counted. 0 or -ENOMEM. */
static int
count_samples(struct ingest *g)
{
	const Pmc__SampleBatch *b = g->b;
	const uint32_t *keys = g->keys;
	struct region_agg *last = NULL, *node;
	size_t k = 0, ne = g->ne;
	for (size_t i = 0; i < b->n_region; i++) {
		struct region_agg *reg = g->resolve(g->ctx, keys[i], &node);
		uint32_t scaled = b->n_scaled ? b->scaled[i] : 0;
		if (!reg) {
			k += (size_t)__builtin_popcount(scaled);
			g->refused++;
			continue;
		}
		g->counted++;
		if ((reg != last || node) && batch_slots(g, reg, node) < 0)
			return -ENOMEM;
		last = reg;
		share_begin(reg, node);
		share_end(g, reg, node);
		size_t k0 = k;
		for (struct region_agg *a = reg; a; a = a == reg ? node : NULL) {
			a->count++;
			/* A region sharing its node's statistics counts in the node's. */
			if (!(a == reg && reg->via)) {
				stats_add(&a->wall, b->wall_ns[i], g->budget);
				for (size_t j = 0; j < ne; j++)
					stats_add(&a->ev[g->ev_id[j]].st, b->values[i * ne + j],
					          g->budget);
			}
			k = k0;
			if (scaled)
				count_scaled(g, a, scaled, &k);
		}
	}
	return 0;
}

/* What a batch may have without allocating: distinct keys, accumulators (one per key and
 * column: the wall time, then each event), samples. */
#define BATCH_STACK_REGIONS 32
#define BATCH_STACK_ACCS 160
#define BATCH_STACK_SAMPLES 2048

struct batch_region {
	struct region_agg *reg;  /* NULL: refused (--max-regions) */
	struct region_agg *node; /* its call path's node, counted too (NULL: none) */
	uint32_t id;             /* the key */
	uint32_t n;              /* its samples in the batch */
	uint32_t start, end;     /* where they are in the grouped order */
};

/* Key -> 1 + its index in a batch's groups (group_keys()); all 0 outside it (the daemon is one
 * thread, and no batch is handled inside another). */
static uint32_t batch_slot[INGEST_KEYS];

/* @b fits the accumulators: no value over STATS_ACC_MAX_VALUE, not too many samples. */
static bool
batch_fits_acc(const Pmc__SampleBatch *b)
{
	uint64_t all = 0, x[4] = {0, 0, 0, 0};
	size_t i = 0;
	if (b->n_region > STATS_ACC_MAX_COUNT)
		return false;
	for (i = 0; i < b->n_wall_ns; i++)
		all |= b->wall_ns[i];
	/* Four chains: one would take a cycle per value. */
	for (i = 0; i + 4 <= b->n_values; i += 4)
		for (size_t j = 0; j < 4; j++)
			x[j] |= b->values[i + j];
	for (; i < b->n_values; i++)
		all |= b->values[i];
	return (all | x[0] | x[1] | x[2] | x[3]) <= STATS_ACC_MAX_VALUE;
}

/* A batch's distinct keys, in the order they first come (group_keys()). */
struct batch_groups {
	struct batch_region stack[BATCH_STACK_REGIONS], *br;
	size_t n, cap;
};

/* Groups @g's samples by key: each distinct key resolved once, its samples counted, its
 * index + 1 in batch_slot. 0 or -ENOMEM (then ungroup() still undoes what was done). */
static int
group_keys(struct ingest *g, struct batch_groups *gr)
{
	const uint32_t *keys = g->keys;
	size_t n = g->b->n_region, ng = 0, cap = BATCH_STACK_REGIONS;
	struct batch_region *br = gr->stack;
	int r = 0;
	/* In locals: the counts' stores would otherwise reload them each sample. */
	for (size_t i = 0; i < n; i++) {
		/* Four keys at once while each has its group: x - 1 wraps to 2^32 - 1 (the top
		 * bit set) only for a key without one (x is at most the batch's samples). */
		while (i + 4 <= n) {
			uint32_t x0 = batch_slot[keys[i]] - 1u, x1 = batch_slot[keys[i + 1]] - 1u,
			         x2 = batch_slot[keys[i + 2]] - 1u,
			         x3 = batch_slot[keys[i + 3]] - 1u;
			if ((x0 | x1 | x2 | x3) >> 31)
				break;
			br[x0].n++;
			br[x1].n++;
			br[x2].n++;
			br[x3].n++;
			i += 4;
		}
		if (i == n)
			break;
		uint32_t id = keys[i], x = batch_slot[id];
		if (__builtin_expect(x != 0, 1)) {
			br[x - 1u].n++;
			continue;
		}
		if (ng == cap) {
			struct batch_region *v = br == gr->stack
			                                 ? malloc(2 * cap * sizeof(*v))
			                                 : realloc(br, 2 * cap * sizeof(*v));
			if (!v) {
				r = -ENOMEM;
				break;
			}
			if (br == gr->stack)
				memcpy(v, gr->stack, sizeof(gr->stack));
			br = v;
			cap *= 2;
		}
		struct region_agg *node, *reg = g->resolve(g->ctx, id, &node);
		br[ng] = (struct batch_region){reg, reg ? node : NULL, id, 1, 0, 0};
		batch_slot[id] = (uint32_t)++ng;
	}
	gr->br = br;
	gr->n = ng;
	gr->cap = cap;
	return r;
}

static void
ungroup(struct batch_groups *gr)
{
	for (size_t x = 0; x < gr->n; x++)
		batch_slot[gr->br[x].id] = 0;
	if (gr->br != gr->stack)
		free(gr->br);
}

/* The event slots of every group's region and node, created before anything is counted; then
 * which regions share their node's statistics for the batch (struct region_agg's via): after
 * it, a region does when it does with the node of each of its groups, and counts its own
 * figures alone otherwise. 0 or -ENOMEM (nothing shared or copied then). */
static int
groups_slots(const struct ingest *g, const struct batch_groups *gr)
{
	for (size_t x = 0; x < gr->n; x++)
		if (gr->br[x].reg && batch_slots(g, gr->br[x].reg, gr->br[x].node) < 0)
			return -ENOMEM;
	/* Begun for every group first: a region in two groups of the batch that begins with the
	 * one ends with the other, before either counts. */
	for (size_t x = 0; x < gr->n; x++)
		if (gr->br[x].reg)
			share_begin(gr->br[x].reg, gr->br[x].node);
	for (size_t x = 0; x < gr->n; x++)
		if (gr->br[x].reg)
			share_end(g, gr->br[x].reg, gr->br[x].node);
	return 0;
}

/* Whether @br's region counts its own statistics beside its node's (else they are one). */
static inline struct region_agg *
group_also(const struct batch_region *br)
{
	return br->node && br->reg->via != br->node ? br->reg : NULL;
}

/* Each group's samples counted in its region and node (their statistics aside), and in
 * @g->counted or @g->refused; then the scaled events of every sample. */
static void
count_groups(struct ingest *g, const struct batch_groups *gr)
{
	const Pmc__SampleBatch *b = g->b;
	for (size_t x = 0; x < gr->n; x++) {
		const struct batch_region *br = &gr->br[x];
		if (!br->reg) {
			g->refused += br->n;
			continue;
		}
		g->counted += br->n;
		br->reg->count += br->n;
		if (br->node)
			br->node->count += br->n;
	}
	for (size_t i = 0, k = 0; i < b->n_scaled; i++) {
		uint32_t scaled = b->scaled[i];
		const struct batch_region *grp = &gr->br[batch_slot[g->keys[i]] - 1u];
		size_t kk = k;
		if (!scaled)
			continue;
		if (grp->node)
			count_scaled(g, grp->node, scaled, &kk);
		if (grp->reg)
			count_scaled(g, grp->reg, scaled, &k);
		else
			k += (size_t)__builtin_popcount(scaled);
	}
}

/*
 * Counts a checked batch key by key (the resolver): the samples are grouped by key (a counting
 * sort), then the values of each key and column go through one stats_acc, opened on the
 * aggregate before anything is counted and folded in at the end: into the region, and into
 * its call path's node when it has one (one pass counts both: stats_acc_also()). Per value:
 * no lookup, no division, no allocation but a histogram block the first time a value falls in
 * its power of two. Returns 0, -ENOMEM, or -EAGAIN (nothing counted) when the batch does not
 * fit the accumulators or memory is short.
 */
static int
count_accumulated(struct ingest *g)
{
	const Pmc__SampleBatch *b = g->b;
	const uint32_t *keys = g->keys;
	struct batch_groups gr;
	struct stats_acc stack_acc[BATCH_STACK_ACCS], *acc = stack_acc;
	uint32_t stack_order[BATCH_STACK_SAMPLES], *order = stack_order;
	size_t n = b->n_region, ne = g->ne, na = ne + 1, nr;
	struct batch_region *br;
	int r = -EAGAIN;

	if (!batch_fits_acc(b))
		return -EAGAIN;
	if (group_keys(g, &gr) < 0)
		goto out;
	nr = gr.n;
	br = gr.br;
	if (n > BATCH_STACK_SAMPLES && !(order = malloc(n * sizeof(*order))))
		goto out;
	if (nr * na > BATCH_STACK_ACCS && !(acc = malloc(nr * na * sizeof(*acc))))
		goto out;
	if (groups_slots(g, &gr) < 0) {
		r = -ENOMEM;
		goto out;
	}
	/* The samples grouped by key, each group in batch order. */
	for (size_t x = 0, at = 0; x < nr; x++) {
		br[x].start = br[x].end = (uint32_t)at;
		at += br[x].n;
	}
	for (size_t i = 0; i < n; i++)
		order[br[batch_slot[keys[i]] - 1u].end++] = (uint32_t)i;
	/*
	 * Nothing fails from here on, so the batch is counted whole: a histogram block that
	 * cannot be allocated only misses its samples, which every other figure still counts,
	 * as with stats_add() (stats.h). An accumulator is opened on the node when there is
	 * one, counting in the region's histogram too.
	 */
	for (size_t x = 0; x < nr; x++) {
		struct region_agg *reg = br[x].reg, *node = br[x].node;
		struct region_agg *first = node ? node : reg;
		struct stats_acc *a = acc + x * na;
		size_t i = order[br[x].start];
		if (!reg)
			continue;
		struct region_agg *also = group_also(&br[x]);
		stats_acc_begin(&a[0], &first->wall, b->wall_ns[i], g->budget);
		if (also)
			stats_acc_also(&a[0], &also->wall);
		for (size_t j = 0; j < ne; j++) {
			size_t e = g->ev_id[j];
			stats_acc_begin(&a[1 + j], &first->ev[e].st, b->values[i * ne + j],
			                g->budget);
			if (also)
				stats_acc_also(&a[1 + j], &also->ev[e].st);
		}
	}

	for (size_t x = 0; x < nr; x++) {
		struct stats_acc *a = acc + x * na;
		const uint32_t *rows = order + br[x].start;
		if (!br[x].reg)
			continue;
		stats_acc_gather(&a[0], b->wall_ns, 1, rows, br[x].n);
		for (size_t j = 0; j < ne; j++)
			stats_acc_gather(&a[1 + j], b->values + j, ne, rows, br[x].n);
	}
	count_groups(g, &gr);
	for (size_t x = 0; x < nr; x++) {
		struct region_agg *reg = br[x].reg, *node = br[x].node;
		const struct stats_acc *a = acc + x * na;
		if (!reg)
			continue;
		struct region_agg *also = group_also(&br[x]);
		for (struct region_agg *agg = node ? node : reg; agg;
		     agg = agg == node ? also : NULL) {
			stats_acc_fold(&agg->wall, &a[0]);
			for (size_t j = 0; j < ne; j++)
				stats_acc_fold(&agg->ev[g->ev_id[j]].st, &a[1 + j]);
		}
	}
	r = 0;
out:
	ungroup(&gr);
	if (acc != stack_acc)
		free(acc);
	if (order != stack_order)
		free(order);
	return r;
}

/* The varint at *@p of a column in place, the 8 bytes from it readable (no look at the
 * datagram's end): a byte below 0x80 is the value, a longer one batch_varint8()'s (at most
 * BATCH_INPLACE_BYTES: never 0). */
static inline uint64_t
varint_fast(const uint8_t **p)
{
	const uint8_t *q = *p;
	uint64_t x = 0;

	if (*q < 0x80) {
		*p = q + 1;
		return *q;
	}
	*p = q + batch_varint8(q, &x);
	return x;
}

/* The rows of a batch in place, sample after sample, each counted in the tallies @row[its
 * group] (NULL: refused, read past). While 8 bytes are readable at every varint of a sample,
 * they are read without a look at the datagram's end; the last samples with one. Inlined
 * with @ne known (4 events, the default) and not. */
static inline __attribute__((always_inline)) void
count_rows(const struct ingest *g, struct stats_tally *const *row, size_t ne, bool also)
{
	const struct batch_cols *c = g->cols;
	const uint32_t *keys = g->keys;
	const uint8_t *pw = c->wall, *pv = c->values, *limit = c->limit;
	size_t n = g->b->n_region, i = 0;

	/* A sample's varints start at most 7 bytes apart: 8 * (ne + 1) readable suffice (no
	 * values: no column, pv NULL). */
	for (; i < n && (size_t)(limit - pw) >= 8 && (!ne || (size_t)(limit - pv) >= 8 * (ne + 1));
	     i++) {
		struct stats_tally *t = row[batch_slot[keys[i]] - 1u];
		if (__builtin_expect(!t, 0)) {
			(void)varint_fast(&pw);
			for (size_t j = 0; j < ne; j++)
				(void)varint_fast(&pv);
			continue;
		}
		stats_tally_add(&t[0], varint_fast(&pw), also);
		for (size_t j = 0; j < ne; j++)
			stats_tally_add(&t[1 + j], varint_fast(&pv), also);
	}
	for (; i < n; i++) {
		struct stats_tally *t = row[batch_slot[keys[i]] - 1u];
		if (!t) {
			(void)batch_varint_at(&pw, limit);
			for (size_t j = 0; j < ne; j++)
				(void)batch_varint_at(&pv, limit);
			continue;
		}
		stats_tally_add(&t[0], batch_varint_at(&pw, limit), also);
		for (size_t j = 0; j < ne; j++)
			stats_tally_add(&t[1 + j], batch_varint_at(&pv, limit), also);
	}
}

/* The value at @p of a column in fixed form (8 bytes, little-endian, not aligned), modulo
 * 2^49 (STATS_TALLY_MAX_VALUE + 1): the frame's writer may have changed it since
 * batch_scan_shared() found every value below that (a SampleRing's frame is read where it
 * lies), and a tally's sums hold only values up to STATS_TALLY_MAX_VALUE. A mask, where a
 * clamp took two instructions more a value. */
static inline uint64_t
fixed_at(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v & STATS_TALLY_MAX_VALUE;
}

/* count_rows() of a batch in fixed form: each value read where it lies, no varint to find. */
static inline __attribute__((always_inline)) void
count_rows_fixed(const struct ingest *g, struct stats_tally *const *row, size_t ne, bool also)
{
	const struct batch_cols *c = g->cols;
	const uint32_t *keys = g->keys;
	const uint8_t *pw = c->wall, *pv = c->values;
	size_t n = g->b->n_region;

	for (size_t i = 0; i < n; i++, pw += 8, pv += 8 * ne) {
		struct stats_tally *t = row[batch_slot[keys[i]] - 1u];
		if (__builtin_expect(!t, 0))
			continue;
		stats_tally_add(&t[0], fixed_at(pw), also);
		for (size_t j = 0; j < ne; j++)
			stats_tally_add(&t[1 + j], fixed_at(pv + 8 * j), also);
	}
}

/* count_rows() or count_rows_fixed(), inlined for 4 events (the default) and any, and for
 * tallies of which some count in a second aggregate (@also) and none do. */
static void
count_rows_any(const struct ingest *g, struct stats_tally *const *row, size_t ne, bool also)
{
	if (g->cols->fixed) {
		if (ne == 4 && also)
			count_rows_fixed(g, row, 4, true);
		else if (ne == 4)
			count_rows_fixed(g, row, 4, false);
		else
			count_rows_fixed(g, row, ne, also);
		return;
	}
	if (ne == 4 && also)
		count_rows(g, row, 4, true);
	else if (ne == 4)
		count_rows(g, row, 4, false);
	else
		count_rows(g, row, ne, also);
}

/* Events a carried batch may have (struct ingest's @carry): PMC_LIMIT_EVENTS, a thread's. */
#define CARRY_EVENTS PMC_LIMIT_EVENTS

/*
 * The tallies of the last batch counted in place with @carry, not yet folded in: the next
 * batch of the same groups (same resolver context, events and budget; same keys, regions and
 * nodes, in the same order, and nothing for groups_slots() to do) counts on in them, the
 * statistics' divisions then once for many batches (ingest_flush()). Each group's histograms
 * have counted every nonzero value already; their zeros, counts, sums, extremes and moments
 * wait for the fold. One, the daemon being one thread.
 */
static struct {
	bool on;
	bool any_also;
	void *ctx;
	struct stats_budget *budget;
	size_t ne, n; /* events, groups */
	uint32_t ev_id[CARRY_EVENTS];
	struct carry_group {
		uint32_t id;
		uint32_t n; /* its samples in the batches carried */
		struct region_agg *reg, *node;
	} grp[BATCH_STACK_REGIONS];
	struct stats_tally tal[BATCH_STACK_ACCS];
} carry;

void *
ingest_carried(void)
{
	return carry.on ? carry.ctx : NULL;
}

void
ingest_flush(void)
{
	size_t na = carry.ne + 1;
	if (!carry.on)
		return;
	carry.on = false;
	for (size_t x = 0; x < carry.n; x++) {
		if (!carry.grp[x].reg)
			continue;
		for (size_t j = 0; j < na; j++)
			stats_tally_fold(&carry.tal[x * na + j], carry.grp[x].n);
	}
}

/* Whether groups_slots() would change nothing for @gr: every event slot there, and no
 * region to begin or end sharing with its node. */
static bool
groups_steady(const struct ingest *g, const struct batch_groups *gr)
{
	for (size_t x = 0; x < gr->n; x++) {
		const struct region_agg *reg = gr->br[x].reg, *node = gr->br[x].node;
		if (!reg)
			continue;
		for (size_t j = 0; j < g->ne; j++) {
			size_t e = g->ev_id[j];
			if (!slot_there(reg, e) || (node && !slot_there(node, e)))
				return false;
		}
		if (share_begins(reg, node) || share_ends(reg, node))
			return false;
	}
	return true;
}

/* Whether @g's batch, grouped in @gr, counts on in the tallies carried (see carry). */
static bool
carry_continues(const struct ingest *g, const struct batch_groups *gr)
{
	size_t na = g->ne + 1;
	if (!carry.on || carry.ctx != g->ctx || carry.budget != g->budget || carry.ne != g->ne ||
	    carry.n != gr->n || memcmp(carry.ev_id, g->ev_id, g->ne * sizeof(*g->ev_id)))
		return false;
	for (size_t x = 0; x < gr->n; x++) {
		const struct batch_region *br = &gr->br[x];
		const struct carry_group *c = &carry.grp[x];
		if (br->id != c->id || br->reg != c->reg || br->node != c->node ||
		    (uint64_t)c->n + br->n > STATS_TALLY_MAX_COUNT)
			return false;
		if (!br->reg)
			continue;
		/* The tallies' aggregates where they were: a check beside the caller's flushes,
		 * which are what keep them valid (an aggregate freed and its place reused would
		 * pass it). */
		struct region_agg *first = br->node ? br->node : br->reg, *also = group_also(br);
		const struct stats_tally *t = &carry.tal[x * na];
		if (t[0].s != &first->wall || t[0].s2 != (also ? &also->wall : NULL))
			return false;
		for (size_t j = 0; j < g->ne; j++) {
			size_t e = g->ev_id[j];
			if (t[1 + j].s != &first->ev[e].st ||
			    t[1 + j].s2 != (also ? &also->ev[e].st : NULL))
				return false;
		}
	}
	return groups_steady(g, gr);
}

/*
 * Counts a checked batch whose wall times and values lie in place (g->cols), in one pass over
 * them: each sample, as it is read, goes into the tallies of its key's region (stats.h: one
 * per column, kept in memory, the region's and its node's histograms counting each value at
 * once), which are folded in at the end. No value is copied; nothing is allocated but a
 * histogram block the first time a value falls in its power of two (and, past 32 distinct
 * keys in one batch, the groups' tables). Returns 0, -ENOMEM, or -EAGAIN (nothing counted)
 * when memory is short.
 */
static int
count_in_place(struct ingest *g)
{
	struct batch_groups gr;
	struct stats_tally stack_t[BATCH_STACK_ACCS], *tal = stack_t;
	/* Each group's tallies, NULL for a refused region's (its samples read past). */
	struct stats_tally *stack_row[BATCH_STACK_REGIONS], **row = stack_row;
	size_t ne = g->ne, na = ne + 1;
	int r = -EAGAIN;

	_Static_assert(BATCH_MAX_SAMPLES <= STATS_TALLY_MAX_COUNT, "a batch fits the tallies");
	_Static_assert(BATCH_INPLACE_BYTES * 7 <= 49, "a value in place fits the tallies");
	if (group_keys(g, &gr) < 0)
		goto out;
	if (g->carry && carry_continues(g, &gr)) {
		/* The groups of the batch before: counted on in its tallies. */
		for (size_t x = 0; x < gr.n; x++) {
			row[x] = gr.br[x].reg ? carry.tal + x * na : NULL;
			carry.grp[x].n += gr.br[x].n;
		}
		count_rows_any(g, row, ne, carry.any_also);
		count_groups(g, &gr);
		r = 0;
		goto out;
	}
	ingest_flush();
	/* Kept for the next batch where the caller says so and they fit, and its context names
	 * them (ingest_carried(): NULL says none wait). */
	bool keep = g->carry && g->ctx && gr.n <= BATCH_STACK_REGIONS &&
	            gr.n * na <= BATCH_STACK_ACCS && ne <= CARRY_EVENTS;
	if (keep)
		tal = carry.tal;
	else if (gr.n * na > BATCH_STACK_ACCS && !(tal = malloc(gr.n * na * sizeof(*tal))))
		goto out;
	if (gr.n > BATCH_STACK_REGIONS && !(row = malloc(gr.n * sizeof(*row))))
		goto out;
	if (groups_slots(g, &gr) < 0) {
		r = -ENOMEM;
		goto out;
	}
	/* From here on nothing fails (stats.h): the batch is counted whole. */
	bool any_also = false;
	for (size_t x = 0; x < gr.n; x++) {
		struct region_agg *reg = gr.br[x].reg, *node = gr.br[x].node;
		struct region_agg *first = node ? node : reg,
		                  *also = reg ? group_also(&gr.br[x]) : NULL;
		struct stats_tally *t = tal + x * na;
		if (!reg)
			continue;
		any_also |= also != NULL;
		stats_tally_begin(&t[0], &first->wall, also ? &also->wall : NULL, g->budget);
		for (size_t j = 0; j < ne; j++) {
			size_t e = g->ev_id[j];
			stats_tally_begin(&t[1 + j], &first->ev[e].st,
			                  also ? &also->ev[e].st : NULL, g->budget);
		}
	}
	for (size_t x = 0; x < gr.n; x++)
		row[x] = gr.br[x].reg ? tal + x * na : NULL;
	count_rows_any(g, row, ne, any_also);
	count_groups(g, &gr);
	if (keep) {
		carry.on = true;
		carry.any_also = any_also;
		carry.ctx = g->ctx;
		carry.budget = g->budget;
		carry.ne = ne;
		carry.n = gr.n;
		memcpy(carry.ev_id, g->ev_id, ne * sizeof(*g->ev_id));
		for (size_t x = 0; x < gr.n; x++)
			carry.grp[x] = (struct carry_group){gr.br[x].id, gr.br[x].n, gr.br[x].reg,
			                                    gr.br[x].node};
		r = 0;
		goto out;
	}
	for (size_t x = 0; x < gr.n; x++) {
		if (!gr.br[x].reg)
			continue;
		for (size_t j = 0; j < na; j++)
			stats_tally_fold(&tal[x * na + j], gr.br[x].n);
	}
	r = 0;
out:
	ungroup(&gr);
	if (tal != stack_t && tal != carry.tal)
		free(tal);
	if (row != stack_row)
		free(row);
	return r;
}

int
ingest_batch(struct ingest *g)
{
	int r = -EAGAIN;
	if (g->cols && g->cols->in_place) {
		r = count_in_place(g);
		if (r != -EAGAIN)
			return r;
		/* Memory short: the columns decoded, counted sample by sample (after what was
		 * carried: nothing else reads or moves the aggregates meanwhile). */
		ingest_flush();
		const Pmc__SampleBatch *b = g->b;
		Pmc__SampleBatch copy = *b;
		batch_cols_decode(g->cols, &copy);
		g->b = &copy;
		r = count_samples(g);
		g->b = b;
		return r;
	}
	ingest_flush();
	r = count_accumulated(g);
	if (r == -EAGAIN)
		r = count_samples(g);
	return r;
}
