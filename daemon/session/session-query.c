/* session-query: what a connection may ask of the figures: Query (its reply streamed in
 * parts), Reset, Status and ListEvents. */
#include "session/session-internal.h"

#include <errno.h>
#include <event2/event.h>
#include <fnmatch.h>
#include <linux/perf_event.h>
#include <linux/sockios.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fdcheck.h"
#include "common/util.h"
#include "kernel/caps.h"
#include "kernel/creds.h"
#include "kernel/log.h"
#include "kernel/perf.h"
#include "model/batch.h"
#include "session/query-enc.h"
#include "session/server.h"
#include "wire/wire.h"

/* A figure whose mean is within 10x of what an empty region measures (@floor > 0) says
 * more about the measurement than about the code measured. */
static bool
too_short(const struct stats *st, uint64_t floor)
{
	return floor && st->count && st->mean < 10.0 * (double)floor;
}

struct query_buf {
	Pmc__Derived *dv, **dvp;
	Pmc__RegionStats *rs, **rsp;
	Pmc__Stats *st;
	Pmc__EventStats *es, **esp;
	size_t n_rs, n_st, n_es, n_dv;
	void **allocs; /* the buckets of each Stats that has them (Query.hist) */
	size_t n_allocs, cap_allocs;
};

/* The non-empty buckets of @st's histogram. */
static size_t
hist_buckets(const struct stats *st)
{
	size_t n = 0;
	uint64_t count;
	for (unsigned b = 0, i; stats_hist_next(st, &b, &i, &count);)
		n++;
	return n;
}

/* @out's buckets (Query.hist): @st's non-empty ones, in one allocation that @b frees. */
static int
fill_buckets(Pmc__Stats *out, const struct stats *st, struct query_buf *b)
{
	size_t n = hist_buckets(st);
	if (!n)
		return 0;
	if (b->n_allocs == b->cap_allocs) {
		size_t cap = b->cap_allocs ? 2 * b->cap_allocs : 16;
		void **v = realloc(b->allocs, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		b->allocs = v;
		b->cap_allocs = cap;
	}
	Pmc__Bucket **bp = malloc(n * (sizeof(*bp) + sizeof(Pmc__Bucket)));
	if (!bp)
		return -ENOMEM;
	b->allocs[b->n_allocs++] = bp;
	Pmc__Bucket *bk = (Pmc__Bucket *)(bp + n);
	size_t k = 0;
	uint64_t count;
	for (unsigned at = 0, i; k < n && stats_hist_next(st, &at, &i, &count); k++) {
		pmc__bucket__init(&bk[k]);
		bk[k].low = stats_bucket_low(i);
		bk[k].high = stats_bucket_high(i);
		bk[k].count = count;
		bp[k] = &bk[k];
	}
	out->n_buckets = k;
	out->buckets = bp;
	return 0;
}

static void
fill_stats(Pmc__Stats *out, const struct stats *st)
{
	pmc__stats__init(out);
	out->sum = st->sum;
	out->min = st->count ? st->min : 0;
	out->max = st->max;
	out->mean = st->mean;
	out->stddev = stats_stddev(st);
	out->p50 = stats_quantile(st, 0.50);
	out->p90 = stats_quantile(st, 0.90);
	out->p99 = stats_quantile(st, 0.99);
}

static void
query_buf_free(struct query_buf *q)
{
	free(q->dv);
	free(q->dvp);
	free(q->rs);
	free(q->rsp);
	free(q->st);
	free(q->es);
	free(q->esp);
	for (size_t i = 0; i < q->n_allocs; i++)
		free(q->allocs[i]);
	free(q->allocs);
}

/* Whether shell glob @pattern matches @name (fnmatch(3), no flags); one with no wildcard is
 * compared as it is (a query for one name runs through every region of the process). */
static bool
name_match(const char *pattern, const char *name)
{
	if (!strpbrk(pattern, "*?[\\"))
		return !strcmp(pattern, name);
	return !fnmatch(pattern, name, 0);
}

/* Whether the filters of @q, asked by @uid, select region @r of @p; @r NULL: whether they
 * select @p, its regions' names aside. Who may see @p is the caller's to check. A run tag
 * answers only its owner: the processes of @uid that said it, whoever else says the same
 * tag (root's too). */
static bool
query_match(const Pmc__Query *q, uid_t uid, const struct process *p, const struct region_agg *r)
{
	bool any = !q->n_comms;

	if (q->pid && p->pid != q->pid)
		return false;
	if (q->min_start && p->start < q->min_start)
		return false;
	if (*q->run_tag && (strcmp(q->run_tag, p->run_tag) || p->uid != uid))
		return false;
	for (size_t i = 0; !any && i < q->n_comms; i++)
		any = name_match(q->comms[i], p->comm);
	if (any && q->n_cgroups) {
		any = false;
		for (size_t i = 0; !any && p->cgroup && i < q->n_cgroups; i++)
			any = name_match(q->cgroups[i], p->cgroup);
	}
	if (!any || !r || q->tree)
		return any;
	if (!q->n_regions)
		return !*q->region || !strcmp(q->region, r->name);
	for (size_t i = 0; i < q->n_regions; i++)
		if (name_match(q->regions[i], r->name))
			return true;
	return false;
}

/* The floor shown beside @p's figures. */
struct query_floor {
	uint64_t wall;
	uint64_t ev[PROCESS_MAX_EVENTS];
};

/* A query's walk over the registry, part by part: the processes there were when it began
 * (pointers, checked again whenever a process has been forgotten since), and where the walk
 * stands in them. */
struct query_key {
	pid_t pid;
	uid_t uid;
	uint64_t start;
};

struct query_stream {
	Pmc__Query *q; /* the request's filters (owned copy) */
	struct process **procs;
	struct query_key *keys; /* who each of procs was: not a newcomer at the same address */
	size_t n_procs;
	size_t next_proc;   /* into procs */
	size_t next_region; /* into procs[next_proc]->regions */
	bool listed;        /* a region of procs[next_proc] is listed already */
	uint64_t evicted;   /* the registry's count of forgotten processes at the last check */
	uint32_t visible, hidden;
	uint8_t *pending; /* an encoded part the socket had no room for */
	size_t pending_len;
	bool last;        /* pending is the last part (whole_reply: the last is built) */
	bool whole_reply; /* one reply (no Query.stream): the parts gather in whole */
	bool building;    /* whole_reply, counted in its uid's wholes (else waiting) */
	uint8_t *whole;   /* WHOLE_HEAD bytes, then the QueryReplys of the parts built */
	size_t whole_len;
	struct event *wev;
	/* The floor of procs[floor_proc - 1] (0: none yet), found once for the parts that list
	 * its regions: each part looked at every region of the process again (a process of
	 * 4,000 regions in a hundred parts: a fifth of a full query's time). */
	size_t floor_proc;
	struct query_floor floor;
};

/* Bytes a part of a streamed reply holds, about: a region more past them starts the next.
 */
#define QUERY_PART_BYTES (64 * 1024)
/* Regions a part looks at, listed or not: a query that selects few of many still ends
 * its part, and the slice, in bounded time. */
#define QUERY_PART_ITEMS 16384

void
session_query_free(struct query_stream *qs)
{
	if (!qs)
		return;
	if (qs->q)
		pmc__query__free_unpacked(qs->q, NULL);
	if (qs->wev)
		event_free(qs->wev);
	free(qs->procs);
	free(qs->keys);
	free(qs->pending);
	free(qs->whole);
	free(qs);
}

static int
proc_ptr_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t) * (struct process *const *)a;
	uintptr_t y = (uintptr_t) * (struct process *const *)b;
	return x < y ? -1 : x > y;
}

/* Forgets the processes of @qs the registry has forgotten since the last check. */
static int
query_stream_check(struct query_stream *qs, struct registry *reg)
{
	if (reg->evicted == qs->evicted)
		return 0;
	struct process **live = malloc((reg->n_procs + 1) * sizeof(*live));
	if (!live)
		return -ENOMEM;
	size_t n = 0;
	struct process *lp;
	pmc_list_for_each(lp, &reg->procs, link)
		live[n++] = lp;
	qsort(live, n, sizeof(*live), proc_ptr_cmp);
	for (size_t i = qs->next_proc; i < qs->n_procs; i++) {
		const struct process *p = qs->procs[i];
		const struct query_key *k = &qs->keys[i];
		if (p && (!bsearch(&qs->procs[i], live, n, sizeof(*live), proc_ptr_cmp) ||
		          p->pid != k->pid || p->uid != k->uid || p->start != k->start))
			qs->procs[i] = NULL;
	}
	free(live);
	qs->evicted = reg->evicted;
	return 0;
}

/* Per region listed: its figures, one Stats for the wall time and each event, and the
 * derived ratios. */
static size_t
region_estimate(const struct process *p, const struct region_agg *r, bool hist)
{
	size_t n = 64 + strlen(r->name) + strlen(p->comm) + (p->cgroup ? strlen(p->cgroup) : 0) +
	           DERIVED_MAX * 24;
	for (size_t j = 0; j < r->n_ev; j++)
		if (r->seen[j])
			n += 96 + strlen(p->events[j]) +
			     (hist ? 40 * hist_buckets(registry_region_stats(r, j)) : 0);
	return n + 96 + (hist ? 40 * hist_buckets(registry_region_wall(r)) : 0);
}

/* What a query lists of @p: its regions, or with Query.tree its call path nodes (in *@n). */
static struct region_agg **
query_items(const struct process *p, const Pmc__Query *q, size_t *n)
{
	*n = q->tree ? p->n_paths : p->n_regions;
	return q->tree ? p->paths : p->regions;
}

/* Whether @r is listed: one with samples; every node of a tree (a region still open has
 * none, and its children some). */
static bool
query_listed(const struct region_agg *r, const Pmc__Query *q)
{
	return r->count || r->first_path || q->tree;
}

/* Whether a tree query lists @p's untracked counts (even with no node listed). */
static bool
query_untracked(const struct process *p, const Pmc__Query *q)
{
	uint64_t any = 0;
	for (unsigned k = 0; q->tree && k < UNTRACKED_N; k++)
		any |= p->untracked[k];
	return any != 0;
}

/* Whether a query that names no region lists @p's losses even with no region listed: a
 * process whose samples were all lost (a forked child that _exit()ed before its first
 * batch: "unsent") is in the figures with its reason. */
static bool
query_losses(const struct process *p, const Pmc__Query *q)
{
	uint64_t any = 0;
	for (unsigned k = 0; !q->n_regions && k < PMC_LOSS_N; k++)
		any |= p->dropped[k];
	return any != 0;
}

/* @f lowered to what @r, a region of @p, measured at least. */
static void
query_floor_lower(const struct process *p, const struct region_agg *r, struct query_floor *f)
{
	const struct stats *w = registry_region_wall(r);
	if (w->count && w->min < f->wall)
		f->wall = w->min;
	for (size_t j = 0; j < r->n_ev && j < PROCESS_MAX_EVENTS; j++) {
		const struct stats *st = registry_region_stats(r, j);
		if ((p->has_floor >> j & 1) && st->count && st->min < f->ev[j])
			f->ev[j] = st->min;
	}
}

/* The floor shown beside @p's figures, in @f: what the library measured of an empty region as
 * each thread started (ThreadFloor, the least over its threads: one warm pass, which cold
 * caches or a first read() can make longer than the same empty region measures later), never
 * above the least that any region of @p measured, since no region measures less than an
 * empty one. */
static void
query_floor_of(const struct process *p, struct query_floor *f)
{
	f->wall = p->wall_floor;
	memcpy(f->ev, p->floor, sizeof(f->ev));
	for (size_t i = 0; i < p->n_regions; i++)
		query_floor_lower(p, p->regions[i], f);
}

/* Whether @s may see the figures of @p. */
static bool
query_mine(const struct session *s, const struct process *p)
{
	return s->admin || p->uid == s->uid;
}

/* Walks @qs from where it stands, counting what the caller may see and choosing what this
 * part lists: up to @max_bytes (at least one region). Leaves @qs where the part ends and
 * says, in *@n_rs, *@n_es and *@n_pl, how many regions, events and process losses it
 * lists. @from_proc/@from_region: where it began. */
static void
query_plan(struct session *s, struct query_stream *qs, size_t max_bytes, size_t *n_rs, size_t *n_es,
           size_t *n_pl)
{
	const Pmc__Query *q = qs->q;
	size_t bytes = 0, walked = 0;
	*n_rs = *n_es = *n_pl = 0;
	for (; qs->next_proc < qs->n_procs; qs->next_proc++, qs->next_region = 0) {
		struct process *p = qs->procs[qs->next_proc];
		if (walked++ >= QUERY_PART_ITEMS)
			return;
		if (!p)
			continue;
		bool mine = query_mine(s, p);
		bool selected = query_match(q, s->uid, p, NULL) && (mine || q->pid);
		if (qs->next_region == 0)
			qs->listed =
			        mine && selected && (query_untracked(p, q) || query_losses(p, q));
		size_t n_items;
		struct region_agg **items = query_items(p, q, &n_items);
		for (; qs->next_region < n_items; qs->next_region++) {
			struct region_agg *r = items[qs->next_region];
			if (walked++ >= QUERY_PART_ITEMS)
				return; /* so does the next part */
			if (!query_listed(r, q))
				continue;
			if (!mine) {
				qs->hidden += selected;
				continue;
			}
			if (!selected || !query_match(q, s->uid, p, r)) {
				qs->visible++;
				continue;
			}
			size_t need = region_estimate(p, r, q->hist);
			if (*n_rs && bytes + need > max_bytes)
				return; /* the next part starts with it */
			qs->visible++;
			bytes += need;
			(*n_rs)++;
			qs->listed = true;
			for (size_t j = 0; j < r->n_ev; j++)
				*n_es += r->seen[j];
		}
		if (qs->listed)
			for (unsigned k = 0; k < PMC_LOSS_N; k++)
				*n_pl += p->dropped[k] != 0;
		if (qs->listed && q->tree)
			for (unsigned k = 0; k < UNTRACKED_N; k++)
				*n_pl += p->untracked[k] != 0;
	}
}

/* Fills @qr with the part @query_plan chose from (@from_proc, @from_region) to where @qs
 * stands now; its parts in @b and @pl. */
static int
query_fill(struct session *s, struct query_stream *qs, size_t from_proc, size_t from_region,
           bool from_listed, size_t n_rs, size_t n_es, size_t n_pl, struct query_buf *b,
           Pmc__ProcessLoss **pl, Pmc__ProcessLoss ***plp, Pmc__QueryReply *qr)
{
	const Pmc__Query *q = qs->q;
	b->rs = calloc(n_rs + 1, sizeof(*b->rs));
	b->rsp = calloc(n_rs + 1, sizeof(*b->rsp));
	b->st = calloc(n_rs + n_es + 1, sizeof(*b->st));
	b->es = calloc(n_es + 1, sizeof(*b->es));
	b->esp = calloc(n_es + 1, sizeof(*b->esp));
	b->dv = calloc(DERIVED_MAX * n_rs + 1, sizeof(*b->dv));
	b->dvp = calloc(DERIVED_MAX * n_rs + 1, sizeof(*b->dvp));
	*pl = calloc(n_pl + 1, sizeof(**pl));
	*plp = calloc(2 * (n_pl + 1), sizeof(**plp)); /* the losses, then the untracked */
	if (!b->rs || !b->rsp || !b->st || !b->es || !b->esp || !b->dv || !b->dvp || !*pl || !*plp)
		return -ENOMEM;

	for (size_t pi = from_proc; pi <= qs->next_proc && pi < qs->n_procs; pi++) {
		struct process *p = qs->procs[pi];
		if (!p)
			continue;
		size_t n_items;
		struct region_agg **items = query_items(p, q, &n_items);
		size_t first = pi == from_proc ? from_region : 0;
		size_t end = pi == qs->next_proc ? qs->next_region : n_items;
		bool listed = pi == from_proc && from_listed;
		if (!query_mine(s, p) || !query_match(q, s->uid, p, NULL))
			continue;
		listed |= query_untracked(p, q) || query_losses(p, q);
		for (size_t i = first; i < end && i < n_items && b->n_rs < n_rs; i++) {
			struct region_agg *r = items[i];
			if (!query_listed(r, q) || !query_match(q, s->uid, p, r))
				continue;
			listed = true;
			if (qs->floor_proc != pi + 1) {
				query_floor_of(p, &qs->floor);
				qs->floor_proc = pi + 1;
			} else {
				/* Found in an earlier part or for an earlier region: what this
				 * region counted since may lower it (never above a figure listed
				 * beside it). */
				query_floor_lower(p, r, &qs->floor);
			}
			const struct query_floor *floor = &qs->floor;
			Pmc__RegionStats *rs = &b->rs[b->n_rs];
			b->rsp[b->n_rs++] = rs;
			pmc__region_stats__init(rs);
			rs->pid = p->pid;
			rs->uid = p->uid;
			rs->comm = p->comm;
			if (p->cgroup)
				rs->cgroup = p->cgroup;
			rs->ns_pid = p->ns_pid;
			rs->name = r->name;
			/* The totals count the samples kept out of the figures too. */
			rs->count = r->count + r->first_path;
			rs->first_path_samples = r->first_path;
			if (q->tree) {
				rs->path = r->id;
				rs->parent = r->parent;
			}
			const struct stats *wall = registry_region_wall(r);
			rs->wall_ns = &b->st[b->n_st++];
			fill_stats(rs->wall_ns, wall);
			rs->wall_ns->sum += r->first_path_wall;
			if (q->hist && fill_buckets(rs->wall_ns, wall, b) < 0)
				return -ENOMEM;
			rs->events = &b->esp[b->n_es];
			for (size_t j = 0; j < r->n_ev && b->n_es < n_es; j++) {
				if (!r->seen[j])
					continue;
				Pmc__EventStats *es = &b->es[b->n_es];
				b->esp[b->n_es++] = es;
				rs->n_events++;
				pmc__event_stats__init(es);
				es->name = p->events[j];
				const struct stats *st = registry_region_stats(r, j);
				es->stats = &b->st[b->n_st++];
				fill_stats(es->stats, st);
				es->stats->sum += r->ev[j].first_path_sum;
				if (q->hist && fill_buckets(es->stats, st, b) < 0)
					return -ENOMEM;
				es->scaled_count = r->ev[j].scaled;
				es->scaled_ratio = r->ev[j].scaled ? r->ev[j].ratio_sum /
				                                             (double)r->ev[j].scaled
				                                   : 0.0;
				if (j < PROCESS_MAX_EVENTS && (p->has_floor >> j & 1)) {
					es->floor = floor->ev[j];
					es->too_short = too_short(st, floor->ev[j]);
				}
			}
			rs->wall_floor = floor->wall;
			rs->wall_too_short = too_short(wall, floor->wall);
			struct derived d[DERIVED_MAX];
			size_t nd = registry_region_derived(p, r, d);
			rs->derived = &b->dvp[b->n_dv];
			rs->n_derived = nd;
			for (size_t j = 0; j < nd; j++) {
				Pmc__Derived *dv = &b->dv[b->n_dv];
				b->dvp[b->n_dv++] = dv;
				pmc__derived__init(dv);
				dv->name = (char *)d[j].name;
				dv->value = d[j].value;
			}
		}
		/* The process's losses, once: in the part that finishes its regions. */
		if (pi == qs->next_proc || !listed)
			continue;
		for (unsigned k = 0; k < PMC_LOSS_N && qr->n_losses + qr->n_untracked < n_pl; k++) {
			if (!p->dropped[k])
				continue;
			Pmc__ProcessLoss *x = &(*pl)[qr->n_losses + qr->n_untracked];
			pmc__process_loss__init(x);
			x->pid = p->pid;
			x->reason = (char *)pmc_loss_name(k);
			x->count = p->dropped[k];
			(*plp)[qr->n_losses++] = x;
		}
		/* Its untracked samples (a tree), the same way, after the losses. */
		for (unsigned k = 0; q->tree && k < UNTRACKED_N; k++) {
			if (!p->untracked[k] || qr->n_losses + qr->n_untracked >= n_pl)
				continue;
			Pmc__ProcessLoss *x = &(*pl)[qr->n_losses + qr->n_untracked];
			pmc__process_loss__init(x);
			x->pid = p->pid;
			x->reason = (char *)registry_untracked_reason_name(k);
			x->count = p->untracked[k];
			(*plp)[n_pl + 1 + qr->n_untracked++] = x;
		}
	}
	qr->n_regions = b->n_rs;
	qr->regions = b->rsp;
	qr->losses = *plp;
	qr->untracked = *plp + n_pl + 1;
	return 0;
}

/* Bytes before a whole reply's QueryReply: the Response's tag for it and its length. */
#define WHOLE_HEAD 6

/* Appends @qr, encoded, to @qs's whole reply: -EMSGSIZE when that would not fit in one
 * datagram (nothing more is built then). */
static int
query_whole_append(struct query_stream *qs, Pmc__QueryReply *qr)
{
	_cleanup_(query_enc_free) struct query_enc e = {0};
	if (query_enc_size(&e, qr) < 0)
		return -ENOMEM;
	size_t at = qs->whole_len ? qs->whole_len : WHOLE_HEAD;
	if (at + e.len > WIRE_MAX_DATAGRAM)
		return -EMSGSIZE;
	/* Room for the cap at once: the pages are touched as the parts are written, where
	 * growing by copies cost the part that crossed 2 MiB 9 ms of the loop. */
	if (!qs->whole && !(qs->whole = malloc(WIRE_MAX_DATAGRAM)))
		return -ENOMEM;
	qs->whole_len = at + query_enc_pack(&e, qs->whole + at);
	return 0;
}

/* The next part of @s's reply: encoded in @qs->pending (the last when @qs->last), or, for a
 * whole reply, appended to @qs->whole (the QueryReplys of its parts one after the other, as
 * protobuf merges them: their regions and losses add up, `more` stays false). */
static int
query_next_part(struct session *s, struct query_stream *qs, size_t max_bytes)
{
	int r = query_stream_check(qs, &s->srv->model.reg);
	if (r < 0)
		return r;
	size_t from_proc = qs->next_proc, from_region = qs->next_region;
	bool from_listed = qs->listed;
	size_t n_rs, n_es, n_pl;
	query_plan(s, qs, max_bytes, &n_rs, &n_es, &n_pl);
	_cleanup_(query_buf_free) struct query_buf b = {0};
	_cleanup_free_ Pmc__ProcessLoss *pl = NULL;
	_cleanup_free_ Pmc__ProcessLoss **plp = NULL;
	Pmc__QueryReply qr = PMC__QUERY_REPLY__INIT;
	r = query_fill(s, qs, from_proc, from_region, from_listed, n_rs, n_es, n_pl, &b, &pl, &plp,
	               &qr);
	if (r < 0)
		return r;
	qs->last = qs->next_proc >= qs->n_procs;
	qr.more = !qs->last && !qs->whole_reply;
	qr.run_tag_matched = *qs->q->run_tag != 0;
	if (qs->last) {
		qr.visible = qs->visible;
		qr.hidden = qs->hidden;
		qr.all_users = s->admin;
		qr.run_tag_evicted =
		        registry_tag_evicted(&s->srv->model.reg, s->uid, qs->q->run_tag);
	}
	if (qs->whole_reply)
		return query_whole_append(qs, &qr);
	/* A Response whose one field is the QueryReply (error 0 and message "" are not
	 * written), the bytes pmc__response__pack() writes. */
	_cleanup_(query_enc_free) struct query_enc e = {0};
	if (query_enc_size(&e, &qr) < 0)
		return -ENOMEM;
	size_t len = 1 + query_enc_varint_size(e.len) + e.len;
	if (len > WIRE_MAX_DATAGRAM)
		return -EMSGSIZE;
	qs->pending = malloc(len);
	if (!qs->pending)
		return -ENOMEM;
	qs->pending[0] = PMC__RESPONSE__BODY_QUERY << 3 | 2; /* field 12, length-delimited */
	size_t head = 1 + query_enc_varint(qs->pending + 1, e.len);
	qs->pending_len = head + query_enc_pack(&e, qs->pending + head);
	return 0;
}

/* Sends @qs's whole reply: a Response whose one field is the QueryReply its parts make. */
static int
query_whole_send(struct session *s, struct query_stream *qs)
{
	uint8_t head[WHOLE_HEAD];
	size_t body = qs->whole_len ? qs->whole_len - WHOLE_HEAD : 0, n = 0;
	head[n++] = PMC__RESPONSE__BODY_QUERY << 3 | 2; /* field 12, length-delimited */
	n += query_enc_varint(head + n, body);
	if (!qs->whole) {
		qs->whole = malloc(WHOLE_HEAD);
		if (!qs->whole)
			return -ENOMEM;
	}
	memcpy(qs->whole + WHOLE_HEAD - n, head, n);
	return session_send_packed(s, qs->whole + WHOLE_HEAD - n, n + body);
}

void
session_query_end(struct session *s)
{
	struct query_stream *qs = s->qs;
	if (!qs)
		return;
	s->qs = NULL;
	bool building = qs->building;
	session_query_free(qs);
	if (!building)
		return;
	/* The uid's next whole reply, waiting for this one, may start. */
	s->turns->wholes--;
	struct session *o;
	pmc_list_for_each(o, &s->srv->sessions, link)
		if (o->user == s->user && o->qs && o->qs->whole_reply && !o->qs->building) {
			session_ready(o);
			break;
		}
}

static void query_stream_on_writable(evutil_socket_t fd, short what, void *arg);

int
session_query_step(struct session *s, uint64_t deadline_ns)
{
	struct query_stream *qs = s->qs;
	/* One whole reply of a uid built at a time: its memory is the cap's, however many
	 * connections ask. The others wait, neither queued nor read, until it ends. */
	if (qs->whole_reply && !qs->building) {
		if (s->turns->wholes)
			return SESSION_STEP_WAIT;
		s->turns->wholes++;
		qs->building = true;
	}
	for (;;) {
		if (!qs->pending) {
			int r = query_next_part(s, qs, QUERY_PART_BYTES);
			if (r == -EMSGSIZE && qs->whole_reply) {
				/* Refused as soon as it would not fit: the rest is never built. */
				session_query_end(s);
				r = session_reply_error(
				        s, EMSGSIZE,
				        "the regions asked for do not fit in one reply (%u bytes): "
				        "ask for the reply in parts (Query.stream, as pmcctl 1.1 "
				        "and "
				        "later do), or narrow the query with --pid, --comm or "
				        "--region",
				        WIRE_MAX_DATAGRAM);
				return r < 0 ? r : SESSION_STEP_DONE;
			}
			if (r < 0)
				return r;
		}
		if (qs->whole_reply) {
			if (qs->last) {
				int r = query_whole_send(s, qs);
				session_query_end(s);
				return r < 0 ? r : SESSION_STEP_DONE;
			}
			if (util_now_ns(CLOCK_MONOTONIC) >= deadline_ns)
				return SESSION_STEP_MORE;
			continue;
		}
		/* A part holds one region at least, which may be large (Query.hist). */
		session_sndbuf_fit(s, qs->pending_len);
		ssize_t n = send(s->fd, qs->pending, qs->pending_len, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			return -errno;
		if (n >= 0) {
			free(qs->pending);
			qs->pending = NULL;
			if (qs->last) {
				session_query_end(s);
				return SESSION_STEP_DONE;
			}
			if (util_now_ns(CLOCK_MONOTONIC) < deadline_ns)
				continue;
			return SESSION_STEP_MORE;
		}
		/* The socket is full: its turn comes again when it has room. */
		if (!qs->wev) {
			qs->wev = event_new(s->srv->base, s->fd, EV_WRITE, query_stream_on_writable,
			                    s);
			if (!qs->wev)
				return -ENOMEM;
		}
		return event_add(qs->wev, NULL) < 0 ? -ENOMEM : SESSION_STEP_WAIT;
	}
}

static void
query_stream_on_writable(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	if (s->qs)
		session_ready(s);
}

/* A Query's filters, copied out of the request (which is freed after the handler). */
static Pmc__Query *
query_copy(const Pmc__Query *q)
{
	size_t len = pmc__query__get_packed_size(q);
	_cleanup_free_ uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		return NULL;
	pmc__query__pack(q, buf);
	return pmc__query__unpack(NULL, len, buf);
}

int
session_query_handle(struct session *s, const Pmc__Request *req)
{
	const struct model *m = &s->srv->model;
	const struct registry *reg = &m->reg;
	/* One reply at a time: a second Query now would mean a broken dispatch (nothing is
	 * read while a reply is built or sent). */
	if (s->qs)
		return -EPROTO;

	/* A region with no samples (reset, or defined and never run) is not listed. Users see
	 * their own processes; root and --admin-group see all. The others' regions are only
	 * counted (hidden), and only for a query that names their pid, which the caller
	 * knows already: never by name (a count by glob would tell their names), never over
	 * all processes (another user's activity is theirs to see, as in Status). */
	struct query_stream *qs = calloc(1, sizeof(*qs));
	if (!qs)
		return session_reply_error(s, ENOMEM, "out of memory");
	qs->q = query_copy(req->query);
	qs->procs = malloc((reg->n_procs + 1) * sizeof(*qs->procs));
	qs->keys = malloc((reg->n_procs + 1) * sizeof(*qs->keys));
	if (!qs->q || !qs->procs || !qs->keys) {
		session_query_free(qs);
		return session_reply_error(s, ENOMEM, "out of memory");
	}
	struct process *p;
	pmc_list_for_each(p, &reg->procs, link) {
		qs->keys[qs->n_procs] = (struct query_key){p->pid, p->uid, p->start};
		qs->procs[qs->n_procs++] = p;
	}
	qs->evicted = reg->evicted;
	/* Streamed: part by part, as the socket takes them. Whole (an older client's, or one
	 * that wants it at once): built part by part too, its size checked at each. Either
	 * way a slice at a time, in the connection's turns; nothing else is read meanwhile. */
	qs->whole_reply = !req->query->stream;
	s->qs = qs;
	event_del(s->ev);
	session_ready(s);
	return 0;
}

int
session_query_reset(struct session *s, const Pmc__Request *req)
{
	if (!s->admin)
		return session_reply_error(
		        s, EPERM,
		        "reset needs root or a member of the daemon's --admin-group "
		        "(uid %d is neither)",
		        (int)s->uid);
	Pmc__ResetReply rr = PMC__RESET_REPLY__INIT;
	rr.cleared = registry_reset(&s->srv->model.reg, req->reset->pid, req->reset->region);
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.body_case = PMC__RESPONSE__BODY_RESET;
	resp.reset = &rr;
	return session_reply(s, &resp, NULL, 0);
}

int
session_query_status(struct session *s, const Pmc__Request *req)
{
	const struct server *srv = s->srv;
	const struct model *m = &srv->model;
	Pmc__StatusReply st = PMC__STATUS_REPLY__INIT;
	st.daemon_version = PMC_VERSION;
	st.protocol_version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	st.uptime_ns = util_now_ns(CLOCK_MONOTONIC) - srv->started_ns;
	st.all_users = s->admin;
	st.uid = (uint32_t)s->uid;
	if (s->admin) {
		st.clients = srv->n_sessions - 1; /* the caller's own connection left out */
		st.threads = srv->n_threads;
		st.processes = (uint32_t)m->reg.n_procs;
		st.regions = (uint32_t)m->reg.n_regions;
		st.samples = m->samples;
		st.batches = m->batches;
		st.dropped = m->dropped;
		st.rejected = m->rejected;
		st.lost = m->lost;
		st.lost_unsent = m->lost_unsent;
		st.evicted = m->reg.evicted;
		st.histogram_bytes = m->hist_budget.used;
		st.define_bytes = m->define_budget.used;
		for (size_t i = 0; i < m->users.n; i++) {
			st.histogram_missed += m->users.v[i]->hist.missed;
			st.drain_slices =
			        util_sat_add(st.drain_slices, m->users.v[i]->drain_slices);
			st.define_slices =
			        util_sat_add(st.define_slices, m->users.v[i]->define_slices);
		}
		struct pmc_fdcheck_stats fs;
		pmc_fdcheck_stats(&fs);
		st.closes_pending = fs.pending;
	} else {
		/* A user sees its own figures only, as in queries: what its processes sent,
		 * dropped and lost, never another user's activity. */
		const struct user_share *u = s->user;
		st.clients = u->connections - 1; /* the caller's own connection left out */
		st.threads = u->threads;
		const struct process *p;
		pmc_list_for_each(p, &m->reg.procs, link)
			if (p->uid == s->uid) {
				st.processes++;
				st.regions += (uint32_t)p->n_regions;
			}
		st.samples = u->samples;
		st.batches = u->batches;
		st.dropped = u->dropped;
		st.rejected = u->rejected;
		st.lost = u->lost;
		st.lost_unsent = u->lost_unsent;
		st.evicted = u->evicted;
		st.histogram_bytes = u->hist.used;
		st.define_bytes = u->define.used;
		st.define_slices = u->define_slices;
		st.histogram_missed = u->hist.missed;
		st.drain_slices = u->drain_slices;
		st.closes_pending = pmc_fdcheck_pending((unsigned)s->uid);
	}
	/* The losses by reason, over the processes the caller sees. */
	uint64_t by[PMC_LOSS_N] = {0};
	Pmc__Loss loss[PMC_LOSS_N], *lossp[PMC_LOSS_N];
	const struct process *p;
	pmc_list_for_each(p, &m->reg.procs, link)
		if (s->admin || p->uid == s->uid)
			for (unsigned r = 0; r < PMC_LOSS_N; r++)
				by[r] = util_sat_add(by[r], p->dropped[r]);
	for (unsigned r = 0; r < PMC_LOSS_N; r++) {
		if (!by[r])
			continue;
		pmc__loss__init(&loss[st.n_losses]);
		loss[st.n_losses].reason = (char *)pmc_loss_name(r);
		loss[st.n_losses].count = by[r];
		lossp[st.n_losses] = &loss[st.n_losses];
		st.n_losses++;
	}
	st.losses = lossp;
	/* Who claimed what: the totals above add up unchecked claims. */
	_cleanup_free_ Pmc__Claim *claim = calloc(m->users.n + 1, sizeof(*claim));
	_cleanup_free_ Pmc__Claim **claimp = calloc(m->users.n + 1, sizeof(*claimp));
	if (!claim || !claimp)
		return session_reply_error(s, ENOMEM, "out of memory");
	for (size_t i = 0; i < m->users.n; i++) {
		const struct user_share *u = m->users.v[i];

		if ((!s->admin && u->uid != s->uid) || (!u->claimed && !u->lost))
			continue;
		pmc__claim__init(&claim[st.n_claims]);
		claim[st.n_claims].uid = (uint32_t)u->uid;
		claim[st.n_claims].dropped = u->claimed;
		claim[st.n_claims].lost = u->lost;
		claimp[st.n_claims] = &claim[st.n_claims];
		st.n_claims++;
	}
	st.claims = claimp;
	st.pid = getpid();
	st.state_file = (char *)(srv->state_path ? srv->state_path : "");
	st.state_saved_ns = m->state_saved_ns;
	const char *hint;
	st.user_reads = perf_user_reads(&hint);
	st.user_reads_hint = (char *)(hint ? hint : "");
	st.state_moved_aside = m->state_moved_aside ? m->state_moved_aside : "";
	st.state_moved_reason = (char *)(m->state_moved_reason ? m->state_moved_reason : "");
	st.privilege = (char *)caps_describe();
	st.capabilities = caps_effective();
	st.perf_event_paranoid = caps_paranoid();
	st.sys_admin_raised = caps_raised();
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.body_case = PMC__RESPONSE__BODY_STATUS;
	resp.status = &st;
	return session_reply(s, &resp, NULL, 0);
}

struct event_list {
	Pmc__EventInfo *info;
	size_t n, cap;
	int oom;
};

static void
event_list_add(void *ctx, const char *name, const char *desc)
{
	struct event_list *l = ctx;
	if (l->oom)
		return;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		Pmc__EventInfo *v = realloc(l->info, cap * sizeof(*v));
		if (!v) {
			l->oom = 1;
			return;
		}
		l->info = v;
		l->cap = cap;
	}
	Pmc__EventInfo *e = &l->info[l->n];
	pmc__event_info__init(e);
	struct perf_event_attr attr;
	int r = perf_resolve(name, &attr);
	bool hardware = r == 0 && attr.type != PERF_TYPE_SOFTWARE;
	if (r == 0)
		r = perf_probe(name);
	e->name = strdup(name);
	e->description = strdup(desc);
	e->error = strdup(r ? strerror(-r) : "");
	e->usable = r == 0;
	e->hardware = hardware;
	if (!e->name || !e->description || !e->error) {
		free(e->name);
		free(e->description);
		free(e->error);
		l->oom = 1;
		return;
	}
	l->n++;
}

static void
event_list_free(struct event_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->info[i].name);
		free(l->info[i].description);
		free(l->info[i].error);
	}
	free(l->info);
}

int
session_query_list_events(struct session *s, const Pmc__Request *req)
{
	size_t n, n_def;
	const struct perf_known *k = perf_known_events(&n);
	char *const *def = perf_default_events(&n_def);
	_cleanup_(event_list_free) struct event_list l = {0};

	/* Each name is opened once on the daemon itself to tell whether it counts here. */
	for (size_t i = 0; i < n; i++)
		event_list_add(&l, k[i].name, k[i].description);
	perf_pfm_events(event_list_add, &l);
	if (l.oom)
		return session_reply_error(s, ENOMEM, "out of memory");
	_cleanup_free_ Pmc__EventInfo **ip = calloc(l.n + 1, sizeof(*ip));
	if (!ip)
		return session_reply_error(s, ENOMEM, "out of memory");
	for (size_t i = 0; i < l.n; i++)
		ip[i] = &l.info[i];
	Pmc__EventsReply er = PMC__EVENTS_REPLY__INIT;
	er.n_events = l.n;
	er.events = ip;
	er.hardware_pmu = perf_hardware_pmu();
	er.n_default_events = n_def;
	er.default_events = (char **)def;
	const char *hint;
	er.user_reads = perf_user_reads(&hint);
	er.user_reads_hint = (char *)(hint ? hint : "");
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.body_case = PMC__RESPONSE__BODY_EVENTS;
	resp.events = &er;
	return session_reply(s, &resp, NULL, 0);
}
