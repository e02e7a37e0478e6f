/* registry: per-process, per-region aggregates of the samples clients send, and (for
 * /metrics) the retired aggregates that keep what forgotten processes counted. */
#include "model/registry.h"
#include "model/share.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cgroup.h"
#include "common/procstat.h"
#include "common/util.h"
#include "kernel/log.h"

static void retired_attach(struct registry *reg, struct process *p);

int
registry_process_read_start(pid_t pid, uint64_t *start, char comm[17])
{
	struct procstat st;
	int r = procstat_read(pid, &st);
	if (r < 0)
		return r;
	*start = st.start;
	memcpy(comm, st.comm, sizeof(st.comm));
	return 0;
}

int
registry_process_set_cgroup(struct process *p, const char *cgroup)
{
	free(p->cgroup);
	p->cgroup = NULL;
	if (!cgroup || !*cgroup)
		return 0;
	p->cgroup = strndup(cgroup, CGROUP_PATH_MAX - 1);
	return p->cgroup ? 0 : -ENOMEM;
}

struct process *
registry_process(struct registry *reg, pid_t pid, uid_t uid)
{
	uint64_t start;
	char comm[17];
	if (registry_process_read_start(pid, &start, comm) < 0)
		return NULL;
	return registry_process_at(reg, pid, start, comm, uid, true);
}

struct process *
registry_process_at(struct registry *reg, pid_t pid, uint64_t start, const char comm[17], uid_t uid,
                    bool live)
{
	struct process *p;
	pmc_list_for_each(p, &reg->procs, link)
		/* Figures belong to the credentials that sent them: a process that exec'd a
		 * setuid program gets new figures under its new uid. */
		if (p->pid == pid && p->start == start && p->uid == uid) {
			p->ended = 0;
			return p;
		}
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->pid = pid;
	p->uid = uid;
	p->start = start;
	memcpy(p->comm, comm, sizeof(p->comm));
	p->comm[sizeof(p->comm) - 1] = 0;
	char cgroup[CGROUP_PATH_MAX];
	/* Unknown when unreadable (a v1-only host, the process gone): it is counted anyway. */
	if (live && cgroup_read_path(pid, cgroup) == 0)
		(void)registry_process_set_cgroup(p, cgroup);
	if (!live || cgroup_read_ns_pid(pid, &p->ns_pid) < 0)
		p->ns_pid = 0;
	pmc_list_prepend(&reg->procs, &p->link);
	reg->n_procs++;
	retired_attach(reg, p);
	return p;
}

struct region_agg *
registry_region_find(struct process *p, const char *name)
{
	return region_index_find(&p->index, p->regions, 0, name);
}

/* A new region @name of @p, not counted in any registry total. */
static struct region_agg *
region_new(struct process *p, const char *name)
{
	if (region_index_reserve(&p->index, &p->regions, p->n_regions, &p->cap_regions) < 0)
		return NULL;
	struct region_agg *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->name = strdup(name);
	if (!r->name) {
		free(r);
		return NULL;
	}
	r->hash = region_index_hash(0, name);
	stats_init(&r->wall);
	p->regions[p->n_regions] = r;
	region_index_put(&p->index, p->regions, p->n_regions++);
	return r;
}

/* ---- the call path tree ---- */

struct region_agg *
registry_path_find(struct process *p, uint32_t parent, const char *name)
{
	return region_index_find(&p->path_index, p->paths, parent, name);
}

struct region_agg *
registry_process_path(struct registry *reg, struct process *p, uint32_t parent, const char *name)
{
	if (parent > p->n_paths || (parent && p->paths[parent - 1]->depth >= PMC_LIMIT_PATH_DEPTH))
		return NULL;
	struct region_agg *r = registry_path_find(p, parent, name);
	if (r)
		return r;
	if (region_index_reserve(&p->path_index, &p->paths, p->n_paths, &p->cap_paths) < 0 ||
	    !(r = calloc(1, sizeof(*r))))
		return NULL;
	if (!(r->name = strdup(name))) {
		free(r);
		return NULL;
	}
	r->hash = region_index_hash(parent, name);
	r->parent = parent;
	r->depth = parent ? p->paths[parent - 1]->depth + 1 : 1;
	r->id = (uint32_t)p->n_paths + 1;
	stats_init(&r->wall);
	p->paths[p->n_paths] = r;
	region_index_put(&p->path_index, p->paths, p->n_paths++);
	reg->n_paths++;
	return r;
}

struct region_agg *
registry_process_region(struct registry *reg, struct process *p, const char *name)
{
	struct region_agg *r = registry_region_find(p, name);
	if (r)
		return r;
	r = region_new(p, name);
	if (r)
		reg->n_regions++;
	return r;
}

int
registry_process_event_id(struct process *p, const char *name)
{
	for (size_t i = 0; i < p->n_events; i++)
		if (!strcmp(p->events[i], name))
			return (int)i;
	char **v = realloc(p->events, (p->n_events + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	p->events = v;
	v[p->n_events] = strdup(name);
	if (!v[p->n_events])
		return -ENOMEM;
	return (int)p->n_events++;
}

int
registry_process_event_room(const struct process *p, char *const *names, size_t n)
{
	size_t add = 0;
	for (size_t i = 0; i < n; i++) {
		size_t j = 0;
		while (j < p->n_events && strcmp(p->events[j], names[i]))
			j++;
		add += j == p->n_events;
	}
	return p->n_events + add > PROCESS_MAX_EVENTS ? -EMFILE : 0;
}

struct event_agg *
registry_region_event(struct region_agg *r, size_t id)
{
	if (id >= r->n_ev) {
		size_t n = id + 1;
		struct event_agg *ev = realloc(r->ev, n * sizeof(*ev));
		if (!ev)
			return NULL;
		r->ev = ev;
		bool *seen = realloc(r->seen, n * sizeof(*seen));
		if (!seen)
			return NULL;
		r->seen = seen;
		for (size_t i = r->n_ev; i < n; i++) {
			memset(&ev[i], 0, sizeof(ev[i]));
			stats_init(&ev[i].st);
			seen[i] = false;
		}
		r->n_ev = n;
	}
	r->seen[id] = true;
	return &r->ev[id];
}

/* The sum of the first counted event of @r whose base name is @base. */
static bool
event_sum(const struct process *p, const struct region_agg *r, const char *base, uint64_t *sum)
{
	size_t len = strlen(base);
	for (size_t i = 0; i < r->n_ev && i < p->n_events; i++) {
		const char *name = p->events[i];
		/* The first byte first: a query asks this of every region listed, for three
		 * metrics, of events that are mostly not theirs. */
		if (!r->seen[i] || name[0] != base[0] || strncmp(name, base, len) ||
		    (name[len] && name[len] != ':'))
			continue;
		*sum = registry_region_stats(r, i)->sum;
		return true;
	}
	return false;
}

size_t
registry_region_derived(const struct process *p, const struct region_agg *r, struct derived *out)
{
	static const struct {
		const char *name, *num, *den;
	} metrics[DERIVED_MAX] = {
	        {"ipc", "instructions", "cycles"},
	        {"cache-miss-ratio", "cache-misses", "cache-references"},
	        {"branch-miss-ratio", "branch-misses", "branches"},
	};
	size_t n = 0;
	for (size_t i = 0; i < DERIVED_MAX; i++) {
		uint64_t num, den;
		if (!event_sum(p, r, metrics[i].num, &num) ||
		    !event_sum(p, r, metrics[i].den, &den) || den == 0)
			continue;
		out[n].name = metrics[i].name;
		out[n++].value = (double)num / (double)den;
	}
	return n;
}

/* Heap memory of @r's histograms. */
static size_t
region_memory(const struct region_agg *r)
{
	size_t bytes = stats_memory(&r->wall);
	for (size_t j = 0; j < r->n_ev; j++)
		bytes += stats_memory(&r->ev[j].st);
	return bytes;
}

/* Frees @r's statistics (the wall time's and each event's), leaving them empty. */
static void
region_stats_free(struct region_agg *r)
{
	stats_free(&r->wall);
	for (size_t i = 0; i < r->n_ev; i++)
		stats_free(&r->ev[i].st);
}

/* The statistics @r shares with @n, in turn (@i: 0 the wall time, then event i - 1): false
 * past them. */
static bool
pair_at(struct region_agg *r, struct region_agg *n, size_t i, struct stats **rs, struct stats **ns)
{
	if (i == 0) {
		*rs = &r->wall, *ns = &n->wall;
		return true;
	}
	if (i > r->n_ev || i > n->n_ev)
		return false;
	*rs = &r->ev[i - 1].st, *ns = &n->ev[i - 1].st;
	return true;
}

static void
stats_swap(struct stats *a, struct stats *b)
{
	struct stats t = *a;
	*a = *b;
	*b = t;
}

int
registry_region_unshare(struct region_agg *r, struct stats_budget *budget, bool copy)
{
	struct region_agg *n = r->via;
	struct stats *rs, *ns;
	int e = 0;

	if (!n)
		return 0;
	r->via = NULL;
	/* The region's own are empty while it shares (blocks a reset kept, zeroed, at most):
	 * the node's go to the region, those to the node, which the merge fills. */
	for (size_t i = 0; pair_at(r, n, i, &rs, &ns); i++) {
		stats_swap(rs, ns);
		if (copy)
			e |= stats_merge(ns, rs, budget);
	}
	return e < 0 ? -ENOMEM : 0;
}

/* The counts @s's histogram holds. */
static uint64_t
hist_total(const struct stats *s)
{
	uint64_t total = 0, c;
	for (unsigned b = 0, i; stats_hist_next(s, &b, &i, &c);)
		total = util_sat_add(total, c);
	return total;
}

bool
registry_node_restored(struct process *p, struct region_agg *node, struct stats_budget *budget)
{
	struct region_agg *r = registry_region_find(p, node->name);
	struct stats *rs, *ns;
	size_t i;

	if (!r || r->via || !r->wall.count)
		return false;
	for (i = 0; pair_at(r, node, i, &rs, &ns); i++)
		if (rs->count != ns->count || rs->sum != ns->sum || rs->min != ns->min ||
		    rs->max != ns->max)
			return false;
	/* Slots one of them has alone: empty there. */
	for (size_t k = i - 1; k < r->n_ev; k++)
		if (r->ev[k].st.count)
			return false;
	for (size_t k = i - 1; k < node->n_ev; k++)
		if (node->ev[k].st.count)
			return false;
	for (i = 0; pair_at(r, node, i, &rs, &ns); i++) {
		uint64_t kept = hist_total(ns), other = hist_total(rs);
		if (other > kept)
			stats_swap(rs, ns);
		stats_budget_credit(budget, stats_memory(rs));
		stats_free(rs);
	}
	r->via = node;
	return true;
}

/* Clears @r's figures; a region sharing its node's statistics (via) gets its own again,
 * empty. */
static void
region_clear(struct region_agg *r)
{
	r->via = NULL;
	r->count = 0;
	r->first_path = r->first_path_wall = 0;
	stats_reset(&r->wall);
	for (size_t i = 0; i < r->n_ev; i++) {
		stats_reset(&r->ev[i].st);
		r->ev[i].scaled = 0;
		r->ev[i].ratio_sum = 0;
		r->ev[i].first_path_sum = 0;
	}
}

static void region_free(struct region_agg *r);

/* Whether @r counted anything: a region without figures adds nothing to an aggregate. */
static bool
region_has_figures(const struct region_agg *r)
{
	if (r->count || r->first_path || registry_region_wall(r)->count)
		return true;
	for (size_t i = 0; i < r->n_ev; i++)
		if (registry_region_stats(r, i)->count || r->ev[i].scaled)
			return true;
	return false;
}

static struct stats_budget *
user_budget(struct registry *reg, uid_t uid)
{
	struct user_share *u = reg->users ? users_get(reg->users, uid) : NULL;
	return u ? &u->hist : NULL;
}

/* Frees the regions of @p (their histogram memory back to its uid's budget); counts them
 * nowhere. */
static void
process_free_regions(struct registry *reg, struct process *p)
{
	struct stats_budget *b = user_budget(reg, p->uid);
	for (size_t i = 0; i < p->n_regions; i++) {
		if (b)
			stats_budget_credit(b, region_memory(p->regions[i]));
		region_free(p->regions[i]);
	}
	for (size_t i = 0; i < p->n_paths; i++) {
		if (b)
			stats_budget_credit(b, region_memory(p->paths[i]));
		region_free(p->paths[i]);
	}
	reg->n_paths -= p->n_paths;
	free(p->regions);
	region_index_free(&p->index);
	free(p->paths);
	region_index_free(&p->path_index);
	p->regions = p->paths = NULL;
	p->n_regions = p->cap_regions = 0;
	p->n_paths = p->cap_paths = 0;
}

/* ---- retired aggregates ---- */

/* Whether cgroups @a and @b (NULL: none) are the same. */
static bool
same_cgroup(const char *a, const char *b)
{
	return !strcmp(a ? a : "", b ? b : "");
}

/* The retired aggregate of (@p's uid, @p's comm), and @p's cgroup when they are kept per
 * cgroup, made if there is none. */
static struct process *
retired_get(struct registry *reg, const struct process *p)
{
	struct process *a;
	pmc_list_for_each(a, &reg->retired, link)
		if (a->uid == p->uid && !strcmp(a->comm, p->comm) &&
		    (!reg->retired_by_cgroup || same_cgroup(a->cgroup, p->cgroup)))
			return a;
	a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	if (reg->retired_by_cgroup && registry_process_set_cgroup(a, p->cgroup) < 0) {
		free(a);
		return NULL;
	}
	a->uid = p->uid;
	/* Never the same twice: /metrics tells a new aggregate from a freed one by it. */
	a->start = ++reg->clock;
	memcpy(a->comm, p->comm, sizeof(a->comm));
	pmc_list_prepend(&reg->retired, &a->link);
	return a;
}

/* Gives @p its retired aggregate, when they are kept: made with the process, so that a
 * scrape that saw the process sees the aggregate its figures go to. */
static void
retired_attach(struct registry *reg, struct process *p)
{
	if (!reg->max_retired || p->retired)
		return;
	p->retired = retired_get(reg, p);
	if (p->retired)
		p->retired->members++;
}

/* Forgets the regions of retired aggregate @a, and @a itself when no process is its
 * member. */
static void
retired_drop(struct registry *reg, struct process *a)
{
	reg->n_retired -= a->n_regions;
	process_free_regions(reg, a);
	if (a->members)
		return;
	pmc_list_remove(&reg->retired, &a->link);
	for (size_t i = 0; i < a->n_events; i++)
		free(a->events[i]);
	free(a->events);
	free(a->cgroup);
	free(a);
}

static size_t
retired_user_regions(const struct registry *reg, uid_t uid)
{
	size_t n = 0;
	const struct process *a;
	pmc_list_for_each(a, &reg->retired, link)
		n += a->uid == uid ? a->n_regions : 0;
	return n;
}

/* Room for one more region in retired aggregate @keep: the uid's aggregate that figures
 * joined the longest ago gives up its regions, never another user's, nor @keep. */
static bool
retired_room(struct registry *reg, const struct process *keep)
{
	for (bool logged = false;; logged = true) {
		/* Far from both bounds (the usual case): no walk over the aggregates. */
		if (reg->n_retired < reg->max_retired_per_uid)
			return true;
		size_t mine = retired_user_regions(reg, keep->uid);
		if (mine < reg->max_retired_per_uid && reg->n_retired < reg->max_retired)
			return true;
		struct user_share *u = reg->users ? users_get(reg->users, keep->uid) : NULL;
		if (!logged && u && !u->warned_retired) {
			log_warn_limited("uid %d's retired figures on /metrics reached %s (%zu of "
			                 "its %zu regions; %zu of %zu over every uid, "
			                 "--metrics-max-series / 4): those of its program that "
			                 "joined the longest ago are dropped to make room, or else "
			                 "those of the process it forgets; "
			                 "pmc_retired_dropped_total counts them",
			                 (int)keep->uid,
			                 mine >= reg->max_retired_per_uid ? "its share"
			                                                  : "the daemon's bound",
			                 mine, reg->max_retired_per_uid, reg->n_retired,
			                 reg->max_retired);
			u->warned_retired = true;
		}
		struct process *lru = NULL;
		struct process *a;
		pmc_list_for_each(a, &reg->retired, link)
			if (a->uid == keep->uid && a != keep && a->n_regions &&
			    (!lru || a->folded < lru->folded))
				lru = a;
		if (!lru)
			return false;
		reg->retired_dropped += lru->n_regions;
		retired_drop(reg, lru);
	}
}

/* The id of event @name in retired aggregate @a, made if new; -EMFILE past
 * PROCESS_MAX_EVENTS, as for a process. */
static int
retired_event_id(struct process *a, const char *name)
{
	for (size_t i = 0; i < a->n_events; i++)
		if (!strcmp(a->events[i], name))
			return (int)i;
	if (a->n_events >= PROCESS_MAX_EVENTS)
		return -EMFILE;
	return registry_process_event_id(a, name);
}

/* Adds the figures of region @r of @p to retired aggregate @a, its histogram blocks charged
 * to @b (NULL: to nobody). */
static void
retire_region(struct registry *reg, struct process *a, const struct process *p,
              const struct region_agg *r, struct stats_budget *b)
{
	if (!region_has_figures(r))
		return;
	struct region_agg *d = registry_region_find(a, r->name);
	if (!d) {
		if (!retired_room(reg, a) || !(d = region_new(a, r->name))) {
			reg->retired_dropped++;
			return;
		}
		reg->n_retired++;
	}
	/* A histogram block that cannot be had loses its counts: the region is counted. */
	bool lost = stats_merge(&d->wall, registry_region_wall(r), b) < 0;
	d->count += r->count;
	d->first_path += r->first_path;
	d->first_path_wall += r->first_path_wall;
	for (size_t i = 0; i < r->n_ev && i < p->n_events; i++) {
		const struct event_agg *e = &r->ev[i];
		const struct stats *st = registry_region_stats(r, i);
		if (!st->count && !e->scaled && !e->first_path_sum)
			continue;
		int id = p->events[i] ? retired_event_id(a, p->events[i]) : -EINVAL;
		struct event_agg *de = id >= 0 ? registry_region_event(d, (size_t)id) : NULL;
		if (!de) {
			lost = true;
			continue;
		}
		lost |= stats_merge(&de->st, st, b) < 0;
		de->scaled += e->scaled;
		de->ratio_sum += e->ratio_sum;
		de->first_path_sum += e->first_path_sum;
	}
	reg->retired_dropped += lost;
}

/* Adds the figures of @p's regions named @region (NULL or "": all) to its retired
 * aggregate. @forget: @p is freed next; each region's histogram memory goes back to its
 * uid before its figures join (so that the blocks the aggregate needs fit the budget they
 * leave), and is freed after. */
static void
retire(struct registry *reg, struct process *p, const char *region, bool forget)
{
	if (!reg->max_retired)
		return;
	retired_attach(reg, p);
	struct process *a = p->retired;
	struct stats_budget *b = user_budget(reg, p->uid);
	if (a)
		a->folded = ++reg->clock;
	for (size_t i = 0; i < p->n_regions; i++) {
		struct region_agg *r = p->regions[i];
		if (region && *region && strcmp(region, r->name))
			continue;
		if (!a) {
			reg->retired_dropped += region_has_figures(r);
			continue;
		}
		/* A region that shares its node's figures leaves the node's memory (freed here:
		 * the node is freed with the process, nothing more to credit then). */
		struct region_agg *held[2] = {r, r->via};
		if (forget && b)
			stats_budget_credit(b, region_memory(r) +
			                               (r->via ? region_memory(r->via) : 0));
		retire_region(reg, a, p, r, b);
		for (int k = 0; forget && k < 2 && held[k]; k++)
			region_stats_free(held[k]);
	}
}

int
registry_process_load(struct registry *reg, const struct process_saved *saved, struct process **out)
{
	struct process *p = calloc(1, sizeof(*p));
	if (!p || registry_process_set_cgroup(p, saved->cgroup) < 0) {
		free(p);
		return -ENOMEM;
	}
	p->pid = saved->pid;
	p->uid = saved->uid;
	p->start = saved->start;
	p->received = saved->received;
	p->ended = 1; /* not connected; the first to go if too many have ended */
	snprintf(p->comm, sizeof(p->comm), "%s", saved->comm);
	p->ns_pid = saved->ns_pid > 0 ? saved->ns_pid : 0;
	pmc_list_prepend(&reg->procs, &p->link);
	reg->n_procs++;
	*out = p;
	return 0;
}

int
registry_retired_load(struct registry *reg, uid_t uid, const char *comm, const char *cgroup,
                      struct process **out)
{
	char c[17];
	snprintf(c, sizeof(c), "%s", comm);
	struct process *a = calloc(1, sizeof(*a));
	if (!a || registry_process_set_cgroup(a, cgroup) < 0) {
		free(a);
		return -ENOMEM;
	}
	struct process *b;
	pmc_list_for_each(b, &reg->retired, link)
		if (b->uid == uid && !strcmp(b->comm, c) && same_cgroup(a->cgroup, b->cgroup)) {
			free(a->cgroup);
			free(a);
			return -EEXIST;
		}
	a->uid = uid;
	a->start = ++reg->clock;
	a->folded = ++reg->clock;
	memcpy(a->comm, c, sizeof(c));
	pmc_list_prepend(&reg->retired, &a->link);
	*out = a;
	return 0;
}

struct region_agg *
registry_retired_region(struct registry *reg, struct process *a, const char *name)
{
	struct region_agg *r = registry_region_find(a, name);
	if (r)
		return r;
	r = region_new(a, name);
	if (r)
		reg->n_retired++;
	return r;
}

/* Newest first: the order in which registry_retired_trim() keeps aggregates. */
static int
cmp_folded_desc(const void *x, const void *y)
{
	const struct process *a = *(struct process *const *)x, *b = *(struct process *const *)y;
	return a->folded < b->folded ? 1 : a->folded > b->folded ? -1 : 0;
}

/* By uid, then newest first. */
static int
cmp_uid_folded(const void *x, const void *y)
{
	const struct process *a = *(struct process *const *)x, *b = *(struct process *const *)y;
	if (a->uid != b->uid)
		return a->uid < b->uid ? -1 : 1;
	return cmp_folded_desc(x, y);
}

int
registry_retired_trim(struct registry *reg)
{
	if (reg->n_retired <= reg->max_retired_per_uid && reg->n_retired <= reg->max_retired)
		return 0;
	size_t n = 0;
	struct process *a;
	pmc_list_for_each(a, &reg->retired, link)
		n += a->n_regions != 0;
	struct process **v = malloc(n * sizeof(*v));
	if (!v)
		return -ENOMEM;
	size_t k = 0;
	pmc_list_for_each(a, &reg->retired, link)
		if (a->n_regions)
			v[k++] = a;
	size_t before = reg->n_retired, dropped = 0;
	uid_t uid = 0;
	/* Each uid keeps its aggregates that figures joined last, up to its share; then
	 * every uid together, up to the bound. What retired_room() would have dropped. */
	qsort(v, n, sizeof(*v), cmp_uid_folded);
	size_t sum = 0;
	for (size_t i = 0; i < n; i++) {
		if (i && v[i]->uid != uid)
			sum = 0;
		uid = v[i]->uid;
		sum += v[i]->n_regions;
		if (sum > reg->max_retired_per_uid) {
			dropped += v[i]->n_regions;
			retired_drop(reg, v[i]);
			v[i] = NULL;
		}
	}
	k = 0;
	for (size_t i = 0; i < n; i++)
		if (v[i])
			v[k++] = v[i];
	qsort(v, k, sizeof(*v), cmp_folded_desc);
	sum = 0;
	for (size_t i = 0; i < k; i++) {
		sum += v[i]->n_regions;
		if (sum > reg->max_retired) {
			dropped += v[i]->n_regions;
			retired_drop(reg, v[i]);
		}
	}
	free(v);
	if (dropped) {
		reg->retired_dropped += dropped;
		log_warn("the retired figures on /metrics restored from the state file hold %zu "
		         "regions, over their bound (%zu regions, --metrics-max-series / 4, and "
		         "%zu per uid): %zu regions of the programs whose figures joined them the "
		         "longest ago are dropped; pmc_retired_dropped_total counts them",
		         before, reg->max_retired, reg->max_retired_per_uid, dropped);
	}
	return 0;
}

int
registry_retire_enable(struct registry *reg, size_t max)
{
	int r = 0;
	reg->max_retired = max;
	reg->max_retired_per_uid = max / 4 ? max / 4 : 1;
	/* Those restored from a state file, which a daemon with a larger bound may have
	 * written. */
	if (registry_retired_trim(reg) < 0)
		r = -ENOMEM;
	struct process *p;
	pmc_list_for_each(p, &reg->procs, link) {
		retired_attach(reg, p);
		if (max && !p->retired)
			r = -ENOMEM;
	}
	return r;
}

/* ---- reset and eviction ---- */

unsigned
registry_reset(struct registry *reg, pid_t pid, const char *region)
{
	unsigned n = 0;
	struct process *p;
	pmc_list_for_each(p, &reg->procs, link) {
		if (pid && p->pid != pid)
			continue;
		/* One process's figures cleared would lower its program's series on /metrics:
		 * they stay there, in the retired aggregate. */
		if (pid)
			retire(reg, p, region, false);
		for (size_t i = 0; i < p->n_regions; i++) {
			if (region && *region && strcmp(region, p->regions[i]->name))
				continue;
			region_clear(p->regions[i]);
			n++;
		}
		/* Its tree whole, whatever the region: inclusive and self figures stay true. */
		bool touched = !region || !*region;
		for (size_t i = 0; !touched && i < p->n_regions; i++)
			touched = !strcmp(region, p->regions[i]->name);
		/* A region left as it is keeps the figures its node shared with it. */
		for (size_t i = 0; touched && i < p->n_regions; i++)
			(void)registry_region_unshare(p->regions[i], NULL, false);
		for (size_t i = 0; touched && i < p->n_paths; i++)
			region_clear(p->paths[i]);
		if (touched)
			memset(p->untracked, 0, sizeof(p->untracked));
	}
	/* Every process's: then every figure of each series touched is cleared, a real
	 * counter reset, which Prometheus's rate() takes as one. */
	struct process *a;
	if (!pid)
		pmc_list_for_each(a, &reg->retired, link)
			for (size_t i = 0; i < a->n_regions; i++)
				if (!region || !*region || !strcmp(region, a->regions[i]->name))
					region_clear(a->regions[i]);
	return n;
}

static void
process_free(struct registry *reg, struct process *p)
{
	struct process *a = p->retired;
	if (a && --a->members == 0 && !a->n_regions)
		retired_drop(reg, a);
	reg->n_regions -= p->n_regions;
	process_free_regions(reg, p);
	for (size_t i = 0; i < p->n_events; i++)
		free(p->events[i]);
	free(p->events);
	free(p->cgroup);
	free(p);
}

uint64_t
registry_tag_evicted(const struct registry *reg, uid_t uid, const char *tag)
{
	return reg->users ? users_tag_evicted(users_find(reg->users, uid), tag) : 0;
}

/* Forgets the process that ended first, of @uid only unless it is -1, never @keep; its
 * figures join its retired aggregate. Return: false when there is none. */
static bool
evict_oldest(struct registry *reg, uid_t uid, const struct process *keep)
{
	struct process *victim = NULL, *q;
	pmc_list_for_each(q, &reg->procs, link)
		if (q->ended && q != keep && (uid == (uid_t)-1 || q->uid == uid) &&
		    (!victim || q->ended < victim->ended))
			victim = q;
	if (!victim)
		return false;
	pmc_list_remove(&reg->procs, &victim->link);
	reg->n_procs--;
	reg->evicted++;
	struct user_share *u = reg->users ? users_get(reg->users, victim->uid) : NULL;
	if (u)
		u->evicted++;
	if (u && victim->run_tag[0])
		users_tag_evicted_add(u, victim->run_tag);
	retire(reg, victim, NULL, true);
	process_free(reg, victim);
	return true;
}

void
registry_process_ended(struct registry *reg, struct process *p, uint64_t now)
{
	p->ended = now ? now : 1;
	size_t n_ended = 0, n_uid = 0;
	struct process *q;
	pmc_list_for_each(q, &reg->procs, link) {
		n_ended += q->ended != 0;
		n_uid += q->ended != 0 && q->uid == p->uid;
	}
	/* One user's short-lived processes first push out that user's own. */
	for (; reg->max_ended_per_uid && n_uid > reg->max_ended_per_uid; n_uid--, n_ended--)
		(void)evict_oldest(reg, p->uid, NULL);
	for (; n_ended > reg->max_ended; n_ended--)
		(void)evict_oldest(reg, (uid_t)-1, NULL);
}

/* The regions (@paths: call path nodes) of @uid's processes, live or exited. */
static size_t
user_count(const struct registry *reg, uid_t uid, bool paths)
{
	size_t n = 0;
	const struct process *q;
	pmc_list_for_each(q, &reg->procs, link)
		n += q->uid == uid ? (paths ? q->n_paths : q->n_regions) : 0;
	return n;
}

size_t
registry_user_regions(const struct registry *reg, uid_t uid)
{
	return user_count(reg, uid, false);
}

/* Forgets @uid's processes that ended first (never @keep) until its regions (@paths: nodes)
 * are below @max; or, @uid -1, every user's until *@total is below @max (0: no limit).
 * Return: false when none is left to forget first. */
static bool
make_room(struct registry *reg, uid_t uid, const struct process *keep, size_t max, bool paths,
          const size_t *total)
{
	while (uid != (uid_t)-1 ? user_count(reg, uid, paths) >= max : max && *total >= max)
		if (!evict_oldest(reg, uid, keep))
			return false;
	return true;
}

/* Per uid, the regions (@paths: nodes) its processes hold, live or exited: @n of them in
 * @v (allocated, the caller frees it). Return: 0 or -ENOMEM. */
struct uid_count {
	uid_t uid;
	size_t n;
};

static int
count_by_uid(const struct registry *reg, bool paths, struct uid_count **v, size_t *n)
{
	size_t cap = 0;
	*v = NULL;
	*n = 0;
	const struct process *q;
	pmc_list_for_each(q, &reg->procs, link) {
		size_t k = paths ? q->n_paths : q->n_regions, i = 0;
		while (i < *n && (*v)[i].uid != q->uid)
			i++;
		if (i == *n) {
			if (*n == cap) {
				cap = cap ? 2 * cap : 8;
				struct uid_count *w = realloc(*v, cap * sizeof(*w));
				if (!w) {
					free(*v);
					*v = NULL;
					return -ENOMEM;
				}
				*v = w;
			}
			(*v)[(*n)++] = (struct uid_count){.uid = q->uid};
		}
		(*v)[i].n += k;
	}
	return 0;
}

/* Forgets the process that ended first among those of the uids that hold more than
 * @share (never @uid's, never @keep). Return: false when there is none. */
static bool
evict_over_share(struct registry *reg, uid_t uid, const struct process *keep, size_t share,
                 bool paths)
{
	struct uid_count *v;
	size_t n;
	if (count_by_uid(reg, paths, &v, &n) < 0)
		return false;
	struct process *oldest = NULL;
	struct process *q;
	pmc_list_for_each(q, &reg->procs, link) {
		if (!q->ended || q == keep || q->uid == uid ||
		    (oldest && q->ended >= oldest->ended))
			continue;
		for (size_t i = 0; i < n; i++)
			if (v[i].uid == q->uid && v[i].n > share)
				oldest = q;
	}
	free(v);
	return oldest && evict_oldest(reg, oldest->uid, keep);
}

bool
registry_share_room(struct registry *reg, uid_t uid, const struct process *keep, size_t share,
                    size_t cap, bool paths)
{
	const size_t *total = paths ? &reg->n_paths : &reg->n_regions;
	for (;;) {
		struct uid_count *v;
		size_t n, mine = 0, others = 0;
		if (count_by_uid(reg, paths, &v, &n) < 0)
			return false;
		for (size_t i = 0; i < n; i++)
			if (v[i].uid == uid)
				mine = v[i].n;
			else if (v[i].n)
				others += share_unused(v[i].n, share);
		free(v);
		if (share_allows(mine, 1, share, *total, cap ? cap : SIZE_MAX, others))
			return true;
		/* Room comes from processes that ended, oldest first: within its share, from
		 * the uids past theirs, then its own, then anyone's; past its share, from its
		 * own only. Live figures stay. */
		if (mine < share && evict_over_share(reg, uid, keep, share, paths))
			continue;
		if (evict_oldest(reg, uid, keep))
			continue;
		if (mine < share && *total >= (cap ? cap : SIZE_MAX) &&
		    evict_oldest(reg, (uid_t)-1, keep))
			continue;
		return false;
	}
}

bool
registry_room(struct registry *reg, const struct process *keep)
{
	return make_room(reg, (uid_t)-1, keep, reg->max_regions, false, &reg->n_regions);
}

static void
region_free(struct region_agg *r)
{
	region_stats_free(r);
	free(r->ev);
	free(r->seen);
	free(r->name);
	free(r);
}

void
registry_free(struct registry *reg)
{
	struct process *p, *next;
	pmc_list_for_each_safe(p, next, &reg->procs, link) {
		pmc_list_remove(&reg->procs, &p->link);
		process_free(reg, p);
	}
	reg->n_procs = reg->n_regions = reg->n_paths = 0;
	while ((p = pmc_list_first(&reg->retired, struct process, link))) {
		p->members = 0; /* every process is freed */
		retired_drop(reg, p);
	}
	reg->n_retired = 0;
}
