/* Unit daemon/model (target pmcd_model): the daemon's data model, one root object (struct
 * model, this file) that owns every part of it. Depends on kernel/ and proto/ only: nothing
 * here knows a connection or the loop (daemon/session resolves its ids into the model and
 * schedules its work; the metrics page and the queries read it).
 *
 * Files:
 *   model.[ch]         the root: what it owns, its set-up from the policy, its free
 *   registry.[ch]      processes, their regions and call path nodes, the retired figures
 *                      (what forgotten processes leave for /metrics), eviction
 *   region-index.[ch]  a process's find-or-add index of regions and call path nodes
 *   stats.[ch]         moments and the histogram of one (process, region, event); its
 *                      memory charged to a struct stats_budget passed in
 *   users.[ch]         each uid's share of the daemon's resources and its own figures
 *   share.h            the rule every shared resource applies between uids (pure)
 *   ingest.[ch]        a checked SampleBatch counted into its aggregates (the caller
 *                      resolves its samples' places)
 *   batch.[ch]         the hand decoder of SampleBatch (its long columns left in place)
 *   state.[ch]         the model in a file (--state): save (in a child, on a snapshot)
 *                      and load
 *
 * Ownership: struct model owns the registry (every process, region, node and retired
 * aggregate, with their histogram blocks), the users table (one struct user_share per uid
 * seen, at a stable address until model_free()), both budgets, the daemon's totals and what
 * the last load or save of the state file said. Callers borrow pointers into it; nothing
 * in it points outside it.
 *
 * Invariants:
 * - reg.users is &users, and each user's hist (define) budget has hist_budget
 *   (define_budget) as its parent: a histogram block is charged to its uid's budget and to
 *   the daemon's at once, and given back to both when its process is forgotten. A zeroed
 *   model (tests) has no users table: nothing is charged to a uid, nothing is bounded.
 * - The parts point at one another: a model is not copied or moved once model_init()
 *   has run (state_job_start()'s child reads its copy-on-write image in place).
 * - lost_unsent <= lost (a state file's is clamped so on load); dropped and lost saturate.
 * - Not thread-safe: the daemon's one loop (and the save child, on its own image) reads and
 *   writes it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "model/registry.h"
#include "model/stats.h"
#include "model/users.h"

struct policy;

struct model {
	struct registry reg;             /* processes, their regions, the retired figures */
	struct users users;              /* what each uid holds, and its figures */
	struct stats_budget hist_budget; /* every histogram block (--max-memory) */
	/* every connection's tables of region and call path ids (--max-define-memory) */
	struct stats_budget define_budget;
	/* The daemon's totals, kept across restarts (state.c): samples counted, batches, samples
	 * dropped, connections closed for breaking the protocol, samples lost. */
	uint64_t samples, batches, dropped, rejected, lost;
	uint64_t lost_unsent;    /* of lost: never sent by processes that ended holding them */
	uint64_t state_saved_ns; /* CLOCK_REALTIME of the last save of the state file */
	/* A file state_load() could not trust, moved aside to this path (malloc()ed; NULL when
	 * none was, or when it could not be moved), and why (static); a file of before
	 * checksums loaded unchecked. */
	char *state_moved_aside;
	const char *state_moved_reason;
	bool state_unchecked;
};

/**
 * model_init() - set up @m, empty, with the bounds of @pol: processes kept after they end
 * (--keep-exited, --keep-exited-per-user), regions (--max-total-regions), histogram
 * memory (--max-memory, --max-memory-per-user) and id tables (--max-define-memory,
 * --max-define-memory-per-user), each per-user share already resolved by the caller (0:
 * none)
 * @m: not yet set up (its contents are overwritten); not to be moved afterwards
 * @pol: borrowed for the call only
 */
void model_init(struct model *m, const struct policy *pol);

/** model_free() - free everything @m owns and leave it zeroed; a zeroed @m is fine. */
void model_free(struct model *m);
