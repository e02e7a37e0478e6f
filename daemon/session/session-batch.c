/* session-batch: a connection's SampleBatches: its region definitions, the samples counted
 * into the registry, and what is dropped, with its reason. */
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

#include "common/util.h"
#include "kernel/creds.h"
#include "kernel/log.h"
#include "kernel/perf.h"
#include "model/batch.h"
#include "model/ingest.h"
#include "session/server.h"
#include "wire/wire.h"

/* On a call path connection, a sample's key is its path id when the path has a node, else
 * KEY_NAME + its client region id; on another, its client region id. */
#define KEY_NAME (PMC_LIMIT_REGION_ID + 1u)
/* Keys a batch's check finds room for without allocating. */
#define SESSION_STACK_KEYS 2048
/* Call path ids a batch's check remembers as checked (a direct-mapped table). */
#define SESSION_KNOWN_PATHS 64
_Static_assert(2 * KEY_NAME <= INGEST_KEYS, "every key of a batch is one ingest_batch() takes");

_Static_assert(PMC__PATH_LIMITS__PATH_MAX_DEPTH == PMC_LIMIT_PATH_DEPTH,
               "the wire's longest call path is the one the library and the daemon keep");

/* Ids of regions over --max-regions map here: their samples are dropped, counted. */
static struct region_agg refused_region;

/* Client ids are dense from 1: one far above the region limit would only make the id table
 * large (8 bytes an id, per connection). Ids past this bound are refused regions, kept in no
 * table. */
static uint32_t
session_max_id(const struct session *s)
{
	return s->srv->policy.max_regions > 4096 ? s->srv->policy.max_regions : 4096;
}

/* The highest client region id @s keeps: session_max_id(), or less once its uid's share of
 * id tables refused it a larger table. */
static uint32_t
ids_bound(const struct session *s)
{
	if (s->ids_full && s->n_ids <= session_max_id(s))
		return s->n_ids ? (uint32_t)s->n_ids - 1 : 0;
	return session_max_id(s);
}

/* The aggregate of client region @id; &refused_region for every id past the table's bound;
 * NULL for an id never defined. */
static struct region_agg *
session_region(const struct session *s, uint32_t id)
{
	if (id < s->n_ids && s->ids[id])
		return s->ids[id];
	return id > ids_bound(s) && id <= PMC_LIMIT_REGION_ID ? &refused_region : NULL;
}

/* Says once per uid that @s's uid has no room for a larger table of ids. */
static void
warn_define_share(struct session *s)
{
	struct user_share *u = s->user;
	if (u->warned_define)
		return;
	u->warned_define = true;
	log_warn_limited("pid %d: uid %d holds %zu bytes of tables of region and call path ids, "
	                 "past its share (--max-define-memory-per-user %u MiB) as far as the "
	                 "other users' shares allow (--max-define-memory %u MiB): samples of its "
	                 "connections' later new ids are dropped (counted as max-regions)",
	                 (int)s->pid, (int)s->uid, u->define.used,
	                 s->srv->policy.max_define_memory_per_user_mib,
	                 s->srv->policy.max_define_memory_mib);
}

/* Grows the table *@v of *@n slots of @elem bytes to hold index @id (doubled, up to @max + 1
 * slots), the bytes charged to @s's uid (--max-define-memory-per-user, share.h's rule;
 * --max-define-memory in all). Return: 0, 1 when the share refused them (*@full set: the
 * table stays as it is, logged once per uid), or -ENOMEM. */
static int
table_grow(struct session *s, void **v, size_t *n, uint32_t id, uint32_t max, size_t elem,
           bool *full)
{
	struct user_share *u = s->user;
	size_t want = (size_t)id + 1, grown = 2 * *n > want ? 2 * *n : want;
	if (grown > (size_t)max + 1)
		grown = (size_t)max + 1 > want ? (size_t)max + 1 : want;
	u->define.keep =
	        users_others_unused(&s->srv->model.users, s->uid, USERS_DEFINE, u->define.limit);
	if (!stats_budget_charge(&u->define, (grown - *n) * elem)) {
		grown = want; /* the least that holds @id */
		if (!stats_budget_charge(&u->define, (grown - *n) * elem)) {
			warn_define_share(s);
			*full = true;
			return 1;
		}
	}
	void *nv = realloc(*v, grown * elem);
	if (!nv) {
		stats_budget_credit(&u->define, (grown - *n) * elem);
		return -ENOMEM;
	}
	memset((char *)nv + *n * elem, 0, (grown - *n) * elem);
	*v = nv;
	*n = grown;
	return 0;
}

void
session_batch_tables_free(struct session *s)
{
	if (s->user)
		stats_budget_credit(&s->user->define,
		                    s->n_ids * sizeof(*s->ids) + s->n_paths * sizeof(*s->paths));
	free(s->ids);
	free(s->paths);
	s->ids = NULL;
	s->paths = NULL;
	s->n_ids = s->n_paths = 0;
}

/* Client region @def_id[i] is named @def_name[i] (@n_id and @n_name of them). *@full: a
 * share or the total refused a region earlier in the message: the rest of its new names are
 * refused without asking again (each asking walks every process). */
static int
define_regions(struct session *s, size_t n_id, const uint32_t *def_id, size_t n_name,
               char *const *def_name, bool *full)
{
	if (n_id != n_name)
		return -EBADMSG;
	for (size_t i = 0; i < n_id; i++) {
		uint32_t id = def_id[i];
		const char *name = def_name[i];
		size_t len = strlen(name);
		if (id == 0 || id > PMC_LIMIT_REGION_ID || len == 0 || len > PMC_LIMIT_NAME_MAX)
			return -EBADMSG;
		struct process *p = s->proc;
		/* An id names one region for the connection's life (a library never takes one
		 * back): its paths' nodes count that region's samples only, which the region may
		 * read its figures from (registry.h, struct region_agg's via). */
		if (id < s->n_ids && s->ids[id] && s->ids[id] != &refused_region &&
		    strcmp(s->ids[id]->name, name))
			return -EBADMSG;
		if (id > ids_bound(s)) {
			if (s->ids_full) /* its uid's share of id tables: logged there */
				continue;
			/* More names than --max-regions allows: the library may hold more. */
			if (!p->warned_regions)
				log_warn_limited(
				        "pid %d: over %u regions (--max-regions): samples of "
				        "region '%s' and later new ones are dropped",
				        (int)s->pid, s->srv->policy.max_regions, name);
			p->warned_regions = true;
			continue;
		}
		if (id >= s->n_ids) {
			int r = table_grow(s, (void **)&s->ids, &s->n_ids, id, session_max_id(s),
			                   sizeof(*s->ids), &s->ids_full);
			if (r < 0)
				return r;
			if (r > 0)
				continue; /* past the table now: refused */
		}
		struct region_agg *r = registry_region_find(p, name);
		if (!r && p->n_regions >= s->srv->policy.max_regions) {
			if (!p->warned_regions)
				log_warn_limited(
				        "pid %d: over %u regions (--max-regions): samples of "
				        "region '%s' and later new ones are dropped",
				        (int)s->pid, s->srv->policy.max_regions, name);
			p->warned_regions = true;
			s->ids[id] = &refused_region;
			continue;
		}
		const struct policy *pol = &s->srv->policy;
		if (!r && (*full || !registry_share_room(&s->srv->model.reg, p->uid, p,
		                                         pol->max_regions_per_user,
		                                         pol->max_total_regions, false))) {
			*full = true;
			size_t mine = registry_user_regions(&s->srv->model.reg, p->uid);
			if (mine >= pol->max_regions_per_user && !p->warned_user)
				log_warn_limited("pid %d: uid %d holds %zu regions, past its share "
				                 "(--max-regions-per-user %u) as far as the other "
				                 "users' shares allow: samples of region '%s' and "
				                 "later new ones are dropped",
				                 (int)s->pid, (int)p->uid, mine,
				                 pol->max_regions_per_user, name);
			else if (mine < pol->max_regions_per_user && !p->warned_total)
				log_warn_limited(
				        "pid %d: the daemon holds %u regions of running processes, "
				        "its limit (--max-total-regions): samples of region '%s' "
				        "and later new ones are dropped",
				        (int)s->pid, pol->max_total_regions, name);
			p->warned_user |= mine >= pol->max_regions_per_user;
			p->warned_total |= mine < pol->max_regions_per_user;
			s->ids[id] = &refused_region;
			continue;
		}
		if (!r)
			r = registry_process_region(&s->srv->model.reg, p, name);
		if (!r)
			return -ENOMEM;
		s->ids[id] = r;
	}
	return 0;
}

/* Whether @s may keep one more call path node for its process (the limits of regions,
 * counted apart); says once per process when it may not. */
static bool
path_room(struct session *s)
{
	const struct policy *pol = &s->srv->policy;
	struct process *p = s->proc;
	struct registry *reg = &s->srv->model.reg;
	/* Exited processes make room, those of the same user first, as for regions. */
	bool room = p->n_paths < pol->max_regions &&
	            registry_share_room(reg, p->uid, p, pol->max_regions_per_user,
	                                pol->max_total_regions, true);
	if (!room && !p->warned_paths)
		log_warn_limited("pid %d: over its call path nodes (as many as --max-regions, "
		                 "--max-regions-per-user or --max-total-regions allow regions): "
		                 "samples of later new paths count under their region only",
		                 (int)s->pid);
	p->warned_paths |= !room;
	return room;
}

/* Client path ids kept in a table (8 bytes an id, per connection): 4 per region id. A
 * library's are dense from 1; a sample of a path past them is dropped, counted as a
 * region's past the table would be ("max-regions"). */
uint32_t
session_batch_max_path(const struct session *s)
{
	uint32_t n = 4 * session_max_id(s);
	return n < PMC_LIMIT_REGION_ID ? n : PMC_LIMIT_REGION_ID;
}

/* The highest call path id @s keeps: session_batch_max_path(), or less once its uid's share of id
 * tables refused it a larger table. */
static uint32_t
paths_bound(const struct session *s)
{
	if (s->paths_full && s->n_paths <= session_batch_max_path(s))
		return s->n_paths ? (uint32_t)s->n_paths - 1 : 0;
	return session_batch_max_path(s);
}

/* Client call path @id is region @region begun in path @parent (0: none). *@full: a limit
 * refused a node earlier in the message (then no new one is asked for: each asking walks
 * every process). */
static int
define_path(struct session *s, uint32_t id, uint32_t parent, uint32_t region, bool *full)
{
	struct region_agg *name = session_region(s, region);
	if (!id || id > PMC_LIMIT_REGION_ID || !name || parent > PMC_LIMIT_REGION_ID ||
	    (parent && parent <= paths_bound(s) &&
	     (parent >= s->n_paths || !s->paths[parent].depth)))
		return -EBADMSG;
	if (id > paths_bound(s) || parent > paths_bound(s)) {
		if (s->paths_full) /* its uid's share of id tables: logged there */
			return 0;
		if (!s->proc->warned_paths)
			log_warn_limited(
			        "pid %d: call path ids past %u: samples of those paths are "
			        "dropped (counted as max-regions)",
			        (int)s->pid, session_batch_max_path(s));
		s->proc->warned_paths = true;
		return 0;
	}
	const struct session_path *up = parent ? &s->paths[parent] : NULL;
	if (up && up->depth >= PMC_LIMIT_PATH_DEPTH)
		return -EBADMSG;
	if (id >= s->n_paths) {
		int r = table_grow(s, (void **)&s->paths, &s->n_paths, id,
		                   session_batch_max_path(s), sizeof(*s->paths), &s->paths_full);
		if (r != 0)
			return r < 0 ? r : 0; /* 1: past the table now, as those past the bound */
		up = parent ? &s->paths[parent] : NULL;
	}
	struct session_path sp = {.name_id = (uint16_t)region,
	                          .depth = (uint8_t)(up ? up->depth + 1 : 1)};
	if (name == &refused_region) {
		sp.why = UNTRACKED_N; /* dropped, counted so */
	} else if (up && !up->node) {
		sp.why = up->why == UNTRACKED_N ? UNTRACKED_LIMIT : up->why;
	} else {
		uint32_t pnode = up ? up->node : 0;
		struct region_agg *node = registry_path_find(s->proc, pnode, name->name);
		if (!node && !*full && !path_room(s))
			*full = true;
		if (!node && !*full &&
		    !(node = registry_process_path(&s->srv->model.reg, s->proc, pnode, name->name)))
			return -ENOMEM;
		sp.node = node ? node->id : 0;
		sp.why = UNTRACKED_LIMIT;
	}
	s->paths[id] = sp;
	return 0;
}

/* Names and paths a Define handles between looks at the clock (about 0.1 ms of them; a new
 * node asks for room, which walks the processes). */
#define DEFINE_STEP 256

/* @s's definitions (a Define, or a SampleBatch's names) are done: its uid's other
 * connections are read again. */
static void
defining_end(struct session *s)
{
	s->turns->defining = NULL;
	struct session *o;
	pmc_list_for_each(o, &s->srv->sessions, link)
		if (o->user == s->user && o->def_waits) {
			o->def_waits = false;
			session_ready(o);
		}
}

/* @s's Define is done: its uid's other connections are read again. @owned: it outlived
 * its dispatch (session_batch_define_step()), so it is freed here. */
static void
define_end(struct session *s, bool owned)
{
	if (owned)
		pmc__request__free_unpacked(s->def, NULL);
	s->def = NULL;
	defining_end(s);
}

void
session_batch_define_abort(struct session *s)
{
	if (s->def)
		define_end(s, true);
	if (s->batch_req) {
		pmc__request__free_unpacked(s->batch_req, NULL);
		s->batch_req = NULL;
	}
	if (s->turns && s->turns->defining == s)
		defining_end(s); /* a SampleBatch's names */
}

/* Handles @s's Define from s->def_next on: its names, then its paths, until the slice's end
 * (srv->deadline_ns). Return: SESSION_STEP_DONE, SESSION_STEP_MORE (s->def stays), or < 0
 * to close the connection (a malformed Define). */
static int
define_step(struct session *s)
{
	const Pmc__Define *d = s->def->define;
	size_t n = d->n_def_id + d->n_path_id;
	int r = 0;
	while (r == 0 && s->def_next < n) {
		size_t end = s->def_next + DEFINE_STEP < n ? s->def_next + DEFINE_STEP : n;
		for (; r == 0 && s->def_next < end; s->def_next++) {
			size_t i = s->def_next, j = i - d->n_def_id;
			r = i < d->n_def_id ? define_regions(s, 1, &d->def_id[i], 1,
			                                     &d->def_name[i], &s->def_full_names)
			                    : define_path(s, d->path_id[j], d->path_parent[j],
			                                  d->path_region[j], &s->def_full_paths);
		}
		if (r == 0 && s->def_next < n &&
		    util_now_ns(CLOCK_MONOTONIC) >= s->srv->deadline_ns) {
			s->user->define_slices = util_sat_add(s->user->define_slices, 1);
			return SESSION_STEP_MORE;
		}
	}
	if (r == -EBADMSG)
		log_warn_limited("pid %d: malformed Define: closing the connection", (int)s->pid);
	return r < 0 ? r : SESSION_STEP_DONE;
}

int
session_batch_define_step(struct session *s)
{
	int r = define_step(s);
	if (r != SESSION_STEP_MORE)
		define_end(s, true);
	return r;
}

int
session_batch_define(struct session *s, const Pmc__Request *req)
{
	const Pmc__Define *d = req->define;
	int r = s->call_paths ? 0 : -EBADMSG;
	/* Before any thread registered (a library whose reattach the daemon refused goes on
	 * on that connection): the process gets its aggregates here, as a register would. */
	if (r == 0 && !session_register_process(s))
		return -ESRCH;
	if (r == 0 && (d->n_def_name != d->n_def_id || d->n_path_parent != d->n_path_id ||
	               d->n_path_region != d->n_path_id))
		r = -EBADMSG;
	if (r < 0) {
		if (r == -EBADMSG)
			log_warn_limited("pid %d: malformed Define: closing the connection",
			                 (int)s->pid);
		return r;
	}
	/* A long one goes on in later slices (the connection keeps the request), and its uid's
	 * other connections wait: one decoded Define per uid held at a time. */
	s->def = (Pmc__Request *)req;
	s->def_next = 0;
	s->def_full_names = s->def_full_paths = false;
	s->turns->defining = s;
	r = define_step(s);
	if (r != SESSION_STEP_MORE)
		define_end(s, false);
	return r == SESSION_STEP_MORE ? 0 : r;
}

/* Sample id @id of a call path connection: its client region in *@name and its key in
 * *@key (batch_key(): its path when that has a node); a sample that its region counts but no
 * node does is counted in @untracked by reason (a refused region's is dropped, not
 * untracked). Return: false when @id is malformed. */
static bool
path_sample(const struct session *s, uint32_t id, uint32_t *name, uint32_t *key,
            uint64_t *untracked)
{
	const uint32_t flags = PMC__PATH_LIMITS__PATH_FLAG_DEEP | PMC__PATH_LIMITS__PATH_FLAG_FULL;
	if (id & flags) {
		if ((id & ~flags) > PMC_LIMIT_REGION_ID || (id & flags) == flags)
			return false;
		*name = id & ~flags;
		if (session_region(s, *name) != &refused_region)
			untracked[id & PMC__PATH_LIMITS__PATH_FLAG_DEEP ? UNTRACKED_DEPTH
			                                                : UNTRACKED_LIMIT]++;
	} else if (id > paths_bound(s) && id <= PMC_LIMIT_REGION_ID) {
		*name = PMC_LIMIT_REGION_ID; /* past the table: a refused region */
	} else if (!id || id >= s->n_paths || !s->paths[id].depth) {
		return false;
	} else if (s->paths[id].node) {
		*name = s->paths[id].name_id;
		*key = id;
		return true;
	} else {
		*name = s->paths[id].name_id;
		if (s->paths[id].why < UNTRACKED_N)
			untracked[s->paths[id].why]++;
	}
	*key = KEY_NAME + *name;
	return true;
}

/* What the process says it sent before this batch, against what this daemon (or the
 * state it restarted from) received: the difference was lost by a daemon that died. */
static void
account_sent(struct session *s, const Pmc__SampleBatch *b)
{
	struct process *p = s->proc;
	if (b->sent_before > p->received) {
		uint64_t lost = session_claim(s, b->sent_before - p->received);
		p->lost = util_sat_add(p->lost, lost);
		s->srv->model.lost = util_sat_add(s->srv->model.lost, lost);
		s->user->lost = util_sat_add(s->user->lost, lost);
		if (lost)
			log_warn_limited("pid %d: %llu samples it sent were lost by an earlier "
			                 "daemon",
			                 (int)s->pid, (unsigned long long)lost);
	}
	/* A smaller figure is a new image (exec): its count starts again. */
	p->received = util_sat_add(b->sent_before, b->n_region);
}

/* At most --max-batch-rate batches a second per connection; the rest are dropped. */
static bool
over_rate(struct session *s)
{
	uint64_t sec = util_now_ns(CLOCK_MONOTONIC) / 1000000000u;
	if (sec != s->rate_window) {
		s->rate_window = sec;
		s->rate_batches = 0;
	}
	if (++s->rate_batches <= s->srv->policy.max_batch_rate)
		return false;
	if (!s->warned_rate)
		log_warn_limited(
		        "pid %d: over %u sample batches a second (--max-batch-rate): dropping "
		        "the excess",
		        (int)s->pid, s->srv->policy.max_batch_rate);
	s->warned_rate = 1;
	return true;
}

/* Where a sample of @s with key @key counts: its region (NULL: refused, dropped) and, in
 * *@node, its call path's node (NULL: none). */
static struct region_agg *
batch_key(void *ctx, uint32_t key, struct region_agg **node)
{
	const struct session *s = ctx;
	struct region_agg *r;
	*node = NULL;
	if (!s->call_paths || key >= KEY_NAME) {
		r = session_region(s, s->call_paths ? key - KEY_NAME : key);
	} else {
		const struct session_path *sp = &s->paths[key];
		*node = s->proc->paths[sp->node - 1];
		r = session_region(s, sp->name_id);
	}
	return r == &refused_region ? NULL : r;
}

/* What the library says it dropped, by reason; `dropped` is their total, and what it holds
 * beyond their sum (an older library's) is "other". */
static void
count_reported(struct session *s, const Pmc__SampleBatch *b)
{
	const uint64_t by[] = {
	        [PMC_LOSS_DEPTH] = b->dropped_depth,
	        [PMC_LOSS_NESTING] = b->dropped_nesting,
	        [PMC_LOSS_FULL] = b->dropped_full,
	        [PMC_LOSS_READ] = b->dropped_read,
	        [PMC_LOSS_EXITED] = b->dropped_exited,
	        [PMC_LOSS_NAMES] = b->dropped_names,
	        [PMC_LOSS_LONG_NAMES] = b->dropped_long_names,
	        [PMC_LOSS_FD_LIMIT] = b->dropped_fd_limit,
	        [PMC_LOSS_UNREGISTERED] = b->dropped_unregistered,
	        [PMC_LOSS_NO_DAEMON] = b->dropped_no_daemon,
	};
	uint64_t sum = 0;
	/* Claims, checked by nothing: each bounded per connection (session_claim()), their
	 * sum saturated. */
	for (size_t k = 0; k < ARRAY_SIZE(by); k++) {
		uint64_t n = by[k] ? session_claim(s, by[k]) : 0;

		if (n)
			session_count_dropped(s, n, (enum pmc_loss)k);
		s->user->claimed = util_sat_add(s->user->claimed, n);
		sum = util_sat_add(sum, by[k]);
	}
	if (b->dropped > sum) {
		uint64_t n = session_claim(s, b->dropped - sum);

		if (n)
			session_count_dropped(s, n, PMC_LOSS_OTHER);
		s->user->claimed = util_sat_add(s->user->claimed, n);
	}
}

/* @b's region names, from s->batch_next on, DEFINE_STEP at a time until the slice's end
 * (srv->deadline_ns), as a Define's: past it, SESSION_BATCH_MORE (the caller keeps the
 * request, s->batch_req, handled again at the connection's next slice, which goes on from
 * there), its uid's other connections waiting meanwhile (sched_uid.defining). Return: 0 once all
 * are defined, SESSION_BATCH_MORE, or < 0 to close the connection. */
static int
batch_names(struct session *s, const Pmc__SampleBatch *b)
{
	size_t n = b->n_def_id;
	int r = 0;
	while (r == 0 && s->batch_next < n) {
		size_t i = s->batch_next, end = i + DEFINE_STEP < n ? i + DEFINE_STEP : n;
		r = define_regions(s, end - i, &b->def_id[i], end - i, &b->def_name[i],
		                   &s->batch_full);
		s->batch_next = end;
		if (r == 0 && end < n && util_now_ns(CLOCK_MONOTONIC) >= s->srv->deadline_ns) {
			s->turns->defining = s;
			s->user->define_slices = util_sat_add(s->user->define_slices, 1);
			return SESSION_BATCH_MORE;
		}
	}
	s->batch_next = 0;
	s->batch_full = false;
	if (s->turns->defining == s)
		defining_end(s);
	return r;
}

/* The samples SampleBatch.first_path names (indices checked: ascending, below n_region), kept
 * out: each counts in its region's and node's first_path alone, and the batch's columns
 * (and @keys, where they are not its regions) are closed up over them. Return: how many of
 * them are of regions refused, which the caller counts as dropped (nothing else does). */
static size_t
keep_out_first_path(struct session *s, Pmc__SampleBatch *b, uint32_t *keys, const uint32_t *ev_id,
                    size_t ne)
{
	size_t n = b->n_region, to = 0, rto = 0, rfrom = 0, x = 0, refused = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t sc = b->n_scaled ? b->scaled[i] : 0;
		size_t nr = (size_t)__builtin_popcount(sc);
		if (x < b->n_first_path && b->first_path[x] == i) {
			struct region_agg *node, *reg = batch_key(s, keys[i], &node);
			/* A region refused (--max-regions, its uid's share): dropped, as
			 * ingest_batch() counts the others of it. */
			if (!reg)
				refused++;
			for (struct region_agg *a = reg; a; a = a == reg ? node : NULL) {
				a->first_path++;
				a->first_path_wall += b->wall_ns[i];
				for (size_t j = 0; j < ne; j++) {
					struct event_agg *e = registry_region_event(a, ev_id[j]);
					if (e)
						e->first_path_sum += b->values[i * ne + j];
				}
			}
			x++;
			rfrom += nr;
			continue;
		}
		if (keys != b->region)
			keys[to] = keys[i];
		b->region[to] = b->region[i];
		b->wall_ns[to] = b->wall_ns[i];
		if (ne)
			memmove(b->values + to * ne, b->values + i * ne, ne * sizeof(*b->values));
		if (b->n_scaled)
			b->scaled[to] = sc;
		if (nr) /* scale_ratio is NULL in a batch with none */
			memmove(b->scale_ratio + rto, b->scale_ratio + rfrom, nr * sizeof(float));
		rto += nr;
		rfrom += nr;
		to++;
	}
	b->n_region = b->n_wall_ns = to;
	b->n_values = to * ne;
	if (b->n_scaled)
		b->n_scaled = to;
	b->n_scale_ratio = rto;
	return refused;
}

/* @b's columns in fixed form (wall_ns_fixed, values_fixed) as wall_ns and values, as
 * batch_scan() gives them: @b itself when it has none, else @tmp (a copy whose arrays are
 * @b's: protobuf-c's to free). NULL: both forms, a batch refused. */
static Pmc__SampleBatch *
sample_batch_cols(Pmc__SampleBatch *b, Pmc__SampleBatch *tmp)
{
	if (!b->n_wall_ns_fixed && !b->n_values_fixed)
		return b;
	if (b->n_wall_ns || b->n_values)
		return NULL;
	*tmp = *b;
	tmp->n_wall_ns = b->n_wall_ns_fixed;
	tmp->wall_ns = b->wall_ns_fixed;
	tmp->n_values = b->n_values_fixed;
	tmp->values = b->values_fixed;
	tmp->n_wall_ns_fixed = tmp->n_values_fixed = 0;
	tmp->wall_ns_fixed = tmp->values_fixed = NULL;
	return tmp;
}

/* handle_batch()'s table of call path ids known to be paths with a node and a known region:
 * 0 where @id is, else nonzero (four of them OR'ed: 0 when each is). */
static inline uint64_t
path_unknown(const uint64_t *known, uint32_t id)
{
	return known[id % SESSION_KNOWN_PATHS] ^ ((uint64_t)id + 1u);
}

static inline void
path_learn(uint64_t *known, uint32_t id)
{
	known[id % SESSION_KNOWN_PATHS] = (uint64_t)id + 1u;
}

/* Said once a uid: its histograms missed samples since @missed was its count of them. */
static void
warn_memory(struct session *s, uint64_t missed)
{
	if (s->user->hist.missed != missed && !s->user->warned_memory) {
		log_warn_limited(
		        "uid %d: its processes' histograms hold %zu bytes, its share "
		        "(--max-memory-per-user): further samples in new value ranges miss "
		        "the percentiles (every other figure still counts them)",
		        (int)s->uid, s->user->hist.used);
		s->user->warned_memory = true;
	}
}

void
session_batch_flush(void)
{
	/* The carry's context is a session: handle_batch() is the one caller that leaves one. */
	struct session *s = ingest_carried();
	if (!s)
		return;
	uint64_t missed = s->user->hist.missed;
	ingest_flush();
	warn_memory(s, missed);
}

static int
handle_batch(struct session *s, Pmc__SampleBatch *b, const struct batch_cols *cols)
{
	Pmc__SampleBatch cols_tmp;
	/* Only a plain batch counted in place counts on in the tallies the one before left
	 * (ingest.h): anything else may change the aggregates before it is counted. */
	if (!cols || !cols->in_place || b->n_def_id || b->n_first_path)
		session_batch_flush();
	if (!(b = sample_batch_cols(b, &cols_tmp)))
		return -EBADMSG;
	struct session_thread *t = session_register_find_thread(s, b->tid);
	if (!t && session_register_thread_refused(s, b->tid)) {
		session_count_dropped(s, b->n_region, PMC_LOSS_REFUSED);
		count_reported(s, b);
		return 0;
	}
	if (!t)
		return -EBADMSG;
	size_t n = b->n_region, ne = t->n;
	if (b->n_wall_ns != n || b->n_values != n * ne || (b->n_scaled && b->n_scaled != n) ||
	    b->n_def_id != b->n_def_name)
		return -EBADMSG;
	int r = batch_names(s, b);
	if (r != 0)
		return r;
	/* Check the whole batch before counting any of it. On a call path connection, each
	 * sample's key (batch_key()) in keys, and what no node counts in untracked. */
	uint32_t stack_keys[SESSION_STACK_KEYS], *keys = b->region;
	uint64_t untracked[UNTRACKED_N] = {0};
	size_t n_ratio = 0;
	uint32_t valid = ne >= 32 ? UINT32_MAX : (UINT32_C(1) << ne) - 1;
	/* Call path ids found to be paths with a node (their own key) and a known region, id + 1
	 * at id % SESSION_KNOWN_PATHS: checked again they would say the same (nothing here
	 * changes the tables), and such a sample counts nothing in untracked. */
	uint64_t known[SESSION_KNOWN_PATHS] = {0};
	const uint32_t *region = b->region;
	size_t i = 0;
	if (!s->call_paths) {
		for (; i < n; i++)
			if (!session_region(s, region[i])) {
				r = -EBADMSG;
				goto out;
			}
	}
	/* On a call path connection the keys are the ids (keys is b->region) while each is a
	 * path with a node; from the first that is not, they are copied, each set apart. */
	while (i < n && keys == b->region) {
		/* Four known ones at once. */
		while (i + 4 <= n) {
			uint32_t a = region[i], c = region[i + 1], d = region[i + 2],
			         e = region[i + 3];
			if (path_unknown(known, a) | path_unknown(known, c) |
			    path_unknown(known, d) | path_unknown(known, e))
				break;
			i += 4;
		}
		if (i == n)
			break;
		uint32_t id = region[i], name = id, key;
		if (!path_unknown(known, id)) {
			i++;
			continue;
		}
		if (!path_sample(s, id, &name, &key, untracked) || !session_region(s, name)) {
			r = -EBADMSG;
			goto out;
		}
		if (key == id) {
			path_learn(known, id);
			i++;
			continue;
		}
		keys = n > SESSION_STACK_KEYS ? malloc(n * sizeof(*keys)) : stack_keys;
		if (!keys)
			return -ENOMEM;
		memcpy(keys, region, i * sizeof(*keys));
		keys[i++] = key;
	}
	for (; i < n; i++) {
		uint32_t id = region[i], name = id;
		if (!path_unknown(known, id)) {
			keys[i] = id;
			continue;
		}
		if (!path_sample(s, id, &name, &keys[i], untracked) || !session_region(s, name)) {
			r = -EBADMSG;
			goto out;
		}
		if (keys[i] == id)
			path_learn(known, id);
	}
	for (size_t k = 0; k < b->n_scaled; k++) {
		if (b->scaled[k] & ~valid) {
			r = -EBADMSG;
			goto out;
		}
		n_ratio += (size_t)__builtin_popcount(b->scaled[k]);
	}
	if (b->n_scale_ratio != n_ratio) {
		r = -EBADMSG;
		goto out;
	}
	for (size_t x = 0; x < b->n_first_path; x++)
		if (b->first_path[x] >= n || (x && b->first_path[x] <= b->first_path[x - 1])) {
			r = -EBADMSG;
			goto out;
		}

	count_reported(s, b);
	account_sent(s, b);
	t->pending = b->pending;
	if (b->end > t->next_sample)
		t->next_sample = b->end;
	if (over_rate(s)) {
		session_count_dropped(s, n, PMC_LOSS_BATCH_RATE);
		goto out;
	}

	if (b->n_first_path) {
		/* Closed up over the samples kept out: the columns read in place are decoded
		 * first (a rare batch: the first samples of new paths). */
		if (cols && cols->in_place) {
			batch_cols_decode(cols, b);
			cols = NULL;
		}
		size_t refused = keep_out_first_path(s, b, keys, t->ev_id, ne);
		if (refused)
			session_count_dropped(s, refused, PMC_LOSS_MAX_REGIONS);
	}
	size_t counted = 0;
	uint64_t missed = s->user->hist.missed;
	/* Its share of the histograms, or more while the others' stay free (share.h). */
	s->user->hist.keep = users_others_unused(&s->srv->model.users, s->uid, USERS_HISTOGRAMS,
	                                         s->user->hist.limit);
	struct ingest g = {
	        .b = b,
	        .cols = cols,
	        .keys = keys,
	        .ev_id = t->ev_id,
	        .ne = ne,
	        .resolve = batch_key,
	        .ctx = s,
	        .budget = &s->user->hist,
	        .carry = true, /* session_batch_flush(): each slice's end, and before the rest */
	};
	r = ingest_batch(&g);
	counted = g.counted;
	if (g.refused)
		session_count_dropped(s, g.refused, PMC_LOSS_MAX_REGIONS);
	if (!s->call_paths)
		untracked[UNTRACKED_OLDER] = counted;
	for (unsigned k = 0; r == 0 && k < UNTRACKED_N; k++)
		s->proc->untracked[k] += untracked[k];
	warn_memory(s, missed);
	if (r < 0)
		goto out;
	s->srv->model.samples += counted;
	s->srv->model.batches++;
	s->user->samples += counted;
	s->user->batches++;
out:
	if (keys != b->region && keys != stack_keys)
		free(keys);
	return r;
}

int
session_batch_step(struct session *s)
{
	int r = session_batch_handle(s, s->batch_req);
	if (r == SESSION_BATCH_MORE)
		return SESSION_STEP_MORE;
	pmc__request__free_unpacked(s->batch_req, NULL);
	s->batch_req = NULL;
	return r < 0 ? r : SESSION_STEP_DONE;
}

int
session_batch_handle(struct session *s, const Pmc__Request *req)
{
	int r = handle_batch(s, req->sample_batch, s->rx_cols);
	if (r == -EBADMSG)
		log_warn_limited("pid %d: malformed sample batch (tid %d): closing the connection",
		                 (int)s->pid, (int)req->sample_batch->tid);
	return r;
}
