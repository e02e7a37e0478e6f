/* registry: the daemon's aggregates, per process and per region, kept after the
 * process disconnects. A process is keyed by (pid, start time, uid) so that a recycled
 * pid never merges into a dead process's figures, nor a setuid image into its starter's. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/list.h"
#include "model/region-index.h"
#include "model/stats.h"
#include "model/users.h"
#include "wire/pmc-shared.h"

/** Figures of one event in one region. */
struct event_agg {
	struct stats st;
	uint64_t scaled;         /* samples whose value was extrapolated */
	double ratio_sum;        /* sum of running/enabled over those samples */
	uint64_t first_path_sum; /* the values of the region's first_path samples */
};

/* Distinct events per process (the names kept, and slots in each of its regions). */
#define PROCESS_MAX_EVENTS 64

/** One named region of one process; or one node of its call path tree (struct process's
 * paths: the figures of its region when begun in that path). */
struct region_agg {
	char *name;      /* a node: its own region's name (the last of its path) */
	uint64_t hash;   /* of name (a node: of name and parent), for the process's index */
	uint32_t parent; /* a node: 1 + the index of its parent node in paths; 0: a root */
	uint32_t depth;  /* a node: regions in its path (1 for a root) */
	uint32_t id;     /* a node: 1 + its index in paths */
	uint64_t count;
	/* Samples kept out of st's figures (first samples of new paths: SampleBatch.first_path),
	 * counted in the totals a query gives alone (count, the sums): their number and wall
	 * time here, their values in each event_agg's first_path_sum. */
	uint64_t first_path;
	uint64_t first_path_wall;
	struct stats wall;
	size_t n_ev;          /* slots in ev, indexed by process event id */
	struct event_agg *ev; /* slot i is in use when ev[i].st.count or seen[i] */
	bool *seen;
	/*
	 * A region only (NULL in a node): its one call path node while every sample the region
	 * counted came through that node, which then holds the statistics of both (wall and
	 * ev[].st: one histogram and one fold per value instead of two); the region's own are
	 * left empty meanwhile. Read them through registry_region_wall() and
	 * registry_region_stats(); registry_region_unshare() gives the region its own copy
	 * before it counts anything the node does not (ingest.c), and before the node is cleared
	 * alone (registry_reset()). Same process: freed together.
	 */
	struct region_agg *via;
};

/**
 * registry_region_wall() - the wall time statistics of @r (a region, or a node): its own, or
 * those of the node it shares them with (struct region_agg's via); borrowed from @r's process
 */
static inline const struct stats *
registry_region_wall(const struct region_agg *r)
{
	return r->via ? &r->via->wall : &r->wall;
}

/**
 * registry_region_stats() - the statistics of process event @e (below @r->n_ev) in @r, as
 * registry_region_wall() says; borrowed from @r's process
 */
static inline const struct stats *
registry_region_stats(const struct region_agg *r, size_t e)
{
	/* Sharing, the region's own are empty: so are they where the node has no slot. */
	return r->via && e < r->via->n_ev ? &r->via->ev[e].st : &r->ev[e].st;
}

/**
 * registry_region_unshare() - give region @r statistics of its own instead of those it shares
 * with its node (struct region_agg's via), and share no more; nothing when it shares none
 * @budget: what the histogram blocks of the node's copy are charged to (NULL: nobody)
 * @copy: the node keeps counting: it gets a copy; false: the node is cleared next
 *        (registry_reset()), it gets empty statistics
 *
 * The region takes the node's statistics as they are, blocks and all, so that no figure or
 * bucket it shows goes down (/metrics); the node gets the copy. Return: 0, or -ENOMEM when a
 * block of the copy could not be had: its counts are missed in the node's histogram (counted
 * in @budget's missed), every other figure is copied.
 */
int registry_region_unshare(struct region_agg *r, struct stats_budget *budget, bool copy);

/**
 * enum untracked_reason - why samples counted under their region's name are in no call path
 * node of the tree
 */
enum untracked_reason {
	UNTRACKED_DEPTH, /* "path-depth": begun deeper than PMC_LIMIT_PATH_DEPTH regions */
	UNTRACKED_LIMIT, /* "path-limit": the path was past the limits (those of regions) */
	UNTRACKED_OLDER, /* "older-client": the library sends no call paths */
	UNTRACKED_N
};

/** registry_untracked_reason_name() - the short name of @r ("path-depth", ...; NULL past
 * UNTRACKED_N) */
static inline const char *
registry_untracked_reason_name(unsigned r)
{
	static const char *const names[UNTRACKED_N] = {
	        [UNTRACKED_DEPTH] = "path-depth",
	        [UNTRACKED_LIMIT] = "path-limit",
	        [UNTRACKED_OLDER] = "older-client",
	};
	return r < UNTRACKED_N ? names[r] : NULL;
}

struct process {
	pid_t pid;
	uid_t uid;
	uint64_t start; /* start time in clock ticks since boot (/proc/PID/stat) */
	char comm[17];
	char run_tag[33]; /* the pmcctl run it runs under (Hello.run_tag), "" none; not saved */
	/* Where it runs, read when the daemon first met it (kept as its comm is): its cgroup v2
	 * path (malloc'd, at most CGROUP_PATH_MAX - 1 bytes; NULL: unknown), and its pid in its
	 * own pid namespace (0: unknown; pid outside any container). */
	char *cgroup;
	pid_t ns_pid;
	unsigned connections;
	unsigned n_threads; /* registered now, over all its connections */
	uint64_t received;  /* samples the process has sent, as far as we know */
	uint64_t lost;      /* of those, lost by an earlier daemon */
	/* Samples not counted, by reason: dropped[PMC_LOSS_UNSENT] is lost, not in `lost`
	 * above; the others are in the daemon's and the uid's `dropped`. Not in the
	 * state file. */
	uint64_t dropped[PMC_LOSS_N];
	uint64_t ended;      /* when its last connection closed (0: connected) */
	bool warned_regions; /* logged once that it hit --max-regions */
	bool warned_total;   /* logged once that it hit --max-total-regions */
	bool warned_user;    /* logged once that its uid hit --max-regions-per-user */
	bool warned_paths;   /* logged once that it hit a limit of call path nodes */
	size_t n_events;
	char **events; /* process event ids -> names */
	/* What an empty region measures here (ThreadFloor), the smallest a thread reported:
	 * per event id while has_floor's bit is set, and the wall time (0: unknown). */
	uint64_t floor[PROCESS_MAX_EVENTS];
	uint64_t has_floor;
	uint64_t wall_floor;
	size_t n_regions;
	size_t cap_regions;
	struct region_agg **regions;
	/* The call path tree: its nodes, each after its parent, and (parent, name) -> 1 + index
	 * into paths, as index is for regions. */
	size_t n_paths;
	size_t cap_paths;
	struct region_agg **paths;
	struct region_index path_index;
	/* Samples counted under their region's name but in no node, by reason (saved). */
	uint64_t untracked[UNTRACKED_N];
	/* Name -> region (region-index.h). */
	struct region_index index;
	/* Retired figures (registry_retire_enable()). A process: the retired aggregate of its
	 * (uid, comm), which its figures join when it is forgotten (NULL: none). A retired
	 * aggregate is a struct process too, pid 0, on the registry's retired list: its
	 * start is a serial number, never the same twice; members counts the processes
	 * whose aggregate it is; folded says when figures last joined it (the registry's
	 * clock). Its event names only ever grow, so that an event id keeps its name. */
	struct process *retired;
	size_t members;
	uint64_t folded;
	struct pmc_list_node link; /* in the registry's procs, or its retired for an aggregate */
};

struct registry {
	struct pmc_list procs; /* struct process, by link: the newest first */
	size_t n_procs;
	size_t n_regions;
	size_t n_paths;           /* call path nodes over every process */
	size_t max_ended;         /* processes kept after they disconnect (--keep-exited) */
	size_t max_ended_per_uid; /* of those, per uid (--keep-exited-per-user; 0: no limit) */
	size_t max_regions;       /* over every process (--max-total-regions; 0: no limit) */
	uint64_t evicted;         /* disconnected processes dropped to stay within the limits */
	struct users *users;      /* where each uid's evictions are counted too, by run tag
	                           * (users_tag_evicted_add()), or NULL */
	/* What forgotten processes leave for /metrics (registry_retire_enable()): one
	 * aggregate per (uid, comm), the sum of the figures of its processes that were
	 * forgotten or reset one by one, so that the page's counters never go down. */
	struct pmc_list retired;    /* the aggregates (pid 0), not in procs: the newest first */
	size_t n_retired;           /* regions over them */
	size_t max_retired;         /* at most (0: none are made; those a state file restored
	                             * are kept as they are, and saved again) */
	size_t max_retired_per_uid; /* of those, one uid's */
	uint64_t retired_dropped;   /* figures of a region that could not be kept there */
	/* One retired aggregate per (uid, comm, cgroup) instead of per (uid, comm), for the
	 * metrics page's container label; set before registry_retire_enable(). */
	bool retired_by_cgroup;
	uint64_t clock; /* serial numbers and fold times of the aggregates */
};

/** registry_first() - the newest process of @reg (the head of its procs), or NULL; borrowed */
static inline struct process *
registry_first(const struct registry *reg)
{
	return pmc_list_first(&reg->procs, struct process, link);
}

/** registry_first_retired() - the newest retired aggregate of @reg, or NULL; borrowed */
static inline struct process *
registry_first_retired(const struct registry *reg)
{
	return pmc_list_first(&reg->retired, struct process, link);
}

/** registry_process_next() - the process after @p on its list (older), or NULL; borrowed */
static inline struct process *
registry_process_next(const struct process *p)
{
	return pmc_list_entry_or_null(p->link.next, struct process, link);
}

/**
 * registry_tag_evicted() - how many processes of @uid that said run tag @tag (non-empty) in
 * their Hello were evicted (their figures dropped over --keep-exited or
 * --keep-exited-per-user): a tag answers only the uid whose processes said it; 0 also when
 * the tag is older than that uid's last USERS_RUN_TAGS runs with evictions, or @reg has no
 * users table
 */
uint64_t registry_tag_evicted(const struct registry *reg, uid_t uid, const char *tag);

/**
 * registry_process() - the live process @pid, created on first use
 * @uid: the peer's uid (kept for queries): part of the key, so that a process that
 *       exec'd a setuid program never adds to the figures of the user who started it
 *
 * A process created reads its comm, its cgroup and its pid in its own namespace from
 * /proc (an unreadable cgroup or ns_pid is left unknown).
 * Return: the process (owned by @reg), or NULL on -ENOMEM or when @pid is gone.
 */
struct process *registry_process(struct registry *reg, pid_t pid, uid_t uid);

/**
 * registry_process_at() - process @pid of start time @start and comm @comm, created on first
 * use: registry_process() once they are known, read earlier
 * @live: @pid is still that process's (its cgroup and ns_pid are read from /proc for one
 *        created here); false: it may have exited since and the pid name another process by
 *        now, so nothing is read and they are left unknown
 * Return: the process (owned by @reg), or NULL on -ENOMEM.
 */
struct process *registry_process_at(struct registry *reg, pid_t pid, uint64_t start,
                                    const char comm[17], uid_t uid, bool live);

/**
 * registry_node_restored() - after call path node @node of @p got its figures back (a state
 * file), let its region share them again when they are all the region's: the same count, sum,
 * minimum and maximum in the wall time and in each event (a node's samples are its region's,
 * so the same ones). Of each pair of statistics the node keeps the histogram that holds more
 * counts (a copy that had no room is missing some), the other is freed, its memory given back
 * to @budget (NULL: nobody). Nothing fails.
 * Return: true when the region shares them now (@node's statistics are the copies kept);
 * false otherwise.
 */
bool registry_node_restored(struct process *p, struct region_agg *node,
                            struct stats_budget *budget);

/** registry_region_find() - region @name of @p, or NULL */
struct region_agg *registry_region_find(struct process *p, const char *name);

/**
 * registry_process_region() - find or create region @name of @p
 * Return: the region (owned by @p), or NULL on -ENOMEM.
 */
struct region_agg *registry_process_region(struct registry *reg, struct process *p,
                                           const char *name);

/** registry_path_find() - the call path node of region @name begun in node @parent (0: at the root;
 * else 1 + its index in @p->paths) of @p, or NULL */
struct region_agg *registry_path_find(struct process *p, uint32_t parent, const char *name);

/**
 * registry_process_path() - find or create the call path node of region @name begun in node @parent
 * (0: at the root; else 1 + the index of an existing node in @p->paths) of @p; counted in
 * @reg->n_paths. The caller checks the limits first.
 * Return: the node (owned by @p; its index + 1 is its id), or NULL on -ENOMEM, or when
 * @parent is no node of @p or its path is PMC_LIMIT_PATH_DEPTH long already (-EINVAL).
 */
struct region_agg *registry_process_path(struct registry *reg, struct process *p, uint32_t parent,
                                         const char *name);

/**
 * registry_process_event_id() - the process-wide id of event @name, created on first use
 * Return: id >= 0, or -ENOMEM.
 */
int registry_process_event_id(struct process *p, const char *name);

/**
 * registry_process_event_room() - whether @p may count the @n events @names (canonical spellings)
 * Return: 0, or -EMFILE when those it does not count yet would take it over
 * PROCESS_MAX_EVENTS.
 */
int registry_process_event_room(const struct process *p, char *const *names, size_t n);

/**
 * registry_region_event() - the figures of process event @id in @r, created on first use
 * Return: the slot (owned by @r), or NULL on -ENOMEM.
 */
struct event_agg *registry_region_event(struct region_agg *r, size_t id);

/** registry_process_read_start() - read @pid's start time and comm; 0 or -errno (-ESRCH). */
int registry_process_read_start(pid_t pid, uint64_t *start, char comm[17]);

/**
 * registry_process_set_cgroup() - make @cgroup (copied, cut to CGROUP_PATH_MAX - 1 bytes; NULL or
 * "": unknown) the cgroup path of @p
 * Return: 0, or -ENOMEM (then @p's cgroup is unknown).
 */
int registry_process_set_cgroup(struct process *p, const char *cgroup);

/**
 * registry_reset() - clear aggregates matching @pid (0: any) and @region ("" or NULL:
 * any); regions stay known, with zero figures; so do the call path nodes of each process
 * touched, all of them (clearing only those of @region would leave their ancestors' figures
 * inclusive of what the nodes no longer hold), and its untracked counts
 *
 * With retired aggregates (registry_retire_enable()), a reset of one process (@pid not 0)
 * first adds the figures it clears to its retired aggregate, so that /metrics keeps
 * counting them; a reset of every process (@pid 0) clears the matching regions of the
 * retired aggregates too, so that each of the page's series it touches restarts from 0.
 * Return: the number of regions of processes cleared.
 */
unsigned registry_reset(struct registry *reg, pid_t pid, const char *region);

/** A derived metric: the ratio of two events' sums. */
struct derived {
	const char *name; /* static */
	double value;
};

#define DERIVED_MAX 3

/**
 * registry_region_derived() - the derived metrics of @r whose two events it counted
 * @p: @r's process (names the event ids)
 * @out: DERIVED_MAX slots
 * Events match by base name, whatever their ":u"/":k" modifier. A metric whose
 * denominator sum is 0 is left out.
 * Return: the number of metrics written.
 */
size_t registry_region_derived(const struct process *p, const struct region_agg *r,
                               struct derived *out);

/**
 * registry_process_ended() - @p's last connection closed at @now: keep its figures,
 * dropping those of the process that ended longest ago when more than
 * @reg->max_ended have ended (they join its retired aggregate, registry_retire_enable())
 */
void registry_process_ended(struct registry *reg, struct process *p, uint64_t now);

/**
 * registry_room() - make room for one more region under @reg->max_regions
 * @keep: the process that wants the region; never evicted
 *
 * When the registry holds max_regions regions, the processes that ended first are forgotten
 * (counted in @reg->evicted) until one more fits.
 * Return: true when one more region fits; false when only live processes (or @keep) hold
 * them all: the caller refuses the region.
 */
bool registry_room(struct registry *reg, const struct process *keep);

/** registry_user_regions() - the regions of @uid's processes, live or exited */
size_t registry_user_regions(const struct registry *reg, uid_t uid);

/**
 * registry_share_room() - make room for one more region (@paths: call path node) of @uid,
 * whose guaranteed share is @share of @cap (0: no limit) over every process (share.h)
 * @keep: the process that wants it; never evicted
 *
 * Within its share @uid gets it while the registry has room, made by forgetting processes
 * that ended (counted in @reg->evicted): first those of the uids past their shares, then
 * @uid's own, then anyone's. Past its share it gets it while the other uids' unused shares
 * and one share for a newcomer stay free, its own ended processes forgotten to make room,
 * never another user's.
 * Return: true when one more fits; false when live processes hold the room.
 */
bool registry_share_room(struct registry *reg, uid_t uid, const struct process *keep, size_t share,
                         size_t cap, bool paths);

/**
 * registry_retire_enable() - keep what forgotten processes counted, for /metrics
 * @max: retired regions kept, over every uid; each uid may hold a quarter of them (at
 *       least 1)
 *
 * From now on each process has a retired aggregate for its (uid, comm) (made for those
 * already there too). When a process is forgotten (--keep-exited, its user's share,
 * --max-total-regions), the figures of its regions are added to that aggregate's. A
 * region new to the aggregate needs room under @max and the uid's share: that uid's
 * aggregate that figures joined the longest ago gives up its regions (never another
 * user's); when none can, the region's figures are not kept. Either way they are counted
 * in @reg->retired_dropped, and logged once per uid. Aggregates restored from a state
 * file before are brought within @max first (registry_retired_trim()). The histogram blocks
 * of the aggregates are charged to their uid's budget (struct user_share.hist).
 * Return: 0, or -ENOMEM (then some processes have no aggregate: their figures are dropped
 * when they are forgotten, and counted).
 */
int registry_retire_enable(struct registry *reg, size_t max);

/* What a state file says of a process (registry_process_load()). */
struct process_saved {
	pid_t pid;
	uid_t uid;
	uint64_t start;     /* UINT64_MAX: saved before a reboot, matched by no new process */
	const char *comm;   /* cut at 16 bytes */
	const char *cgroup; /* NULL or "": unknown; copied, cut at CGROUP_PATH_MAX - 1 bytes */
	pid_t ns_pid;       /* 0 or less: unknown */
	uint64_t received;
};

/**
 * registry_process_load() - a new process of @reg with no regions, restored from a state
 * file: not connected (it ended: the first to go when too many have ended), counted in
 * @reg->n_procs, with no retired aggregate yet (registry_retire_enable() attaches them)
 * @saved: borrowed; copied
 * Return: 0 with *@out set (borrowed: the registry's), or -ENOMEM (nothing added).
 */
int registry_process_load(struct registry *reg, const struct process_saved *saved,
                          struct process **out);

/**
 * registry_retired_load() - a new, empty retired aggregate of (@uid, @comm, @cgroup), for figures
 * restored from a state file: the one that figures joined last, with no member process
 * (registry_retire_enable() attaches the processes of its uid and comm); kept whether or
 * not retired aggregates are (registry_retire_enable()), and saved again
 * @comm: truncated to 16 bytes, as a process's
 * @cgroup: the cgroup of its processes when it was made per cgroup (@reg->retired_by_cgroup);
 *          NULL or "": none (copied, cut as a process's)
 * Return: 0 with *@out set, -EEXIST when (@uid, @comm, @cgroup) has one already, or -ENOMEM.
 */
int registry_retired_load(struct registry *reg, uid_t uid, const char *comm, const char *cgroup,
                          struct process **out);

/**
 * registry_retired_region() - find or create region @name of retired aggregate @a,
 * counted in @reg->n_retired (not in n_regions) and outside the bound
 * Return: the region (owned by @a), or NULL on -ENOMEM.
 */
struct region_agg *registry_retired_region(struct registry *reg, struct process *a,
                                           const char *name);

/**
 * registry_retired_trim() - bring the retired aggregates within @reg->max_retired regions
 * and each uid within its share (aggregates restored from a state file may be over them)
 *
 * Drops whole aggregates' regions, those that figures joined the longest ago first (a
 * uid's own, for its share), as retired_room() would have; counted in
 * @reg->retired_dropped and logged. Only once retired aggregates are kept
 * (registry_retire_enable() calls it).
 * Return: 0, or -ENOMEM (nothing dropped).
 */
int registry_retired_trim(struct registry *reg);

/** registry_free() - free everything @reg holds. */
void registry_free(struct registry *reg);
