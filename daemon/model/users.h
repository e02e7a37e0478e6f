/* users: what each uid holds of the daemon's shared resources (connections, registered
 * threads, counter fds) and the figures its own processes caused, so that one user can
 * be held to a share and be shown only its own activity. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "model/stats.h"

/* pmcctl runs of one uid whose evicted processes are counted (struct user_share's
 * evicted_tag): a uid's own runs push out only its own tags. */
#define USERS_RUN_TAGS 64

struct user_share {
	uid_t uid;
	unsigned connections; /* open now */
	unsigned threads;     /* registered now */
	size_t fds;           /* counter fds the daemon holds for its threads now */
	size_t fds_unread;    /* fds the daemon sent it that its processes have not read */
	unsigned lingering;   /* of connections, those closed with fds unread (still held) */
	uint64_t samples;     /* counted */
	uint64_t batches;     /* counted */
	uint64_t dropped;     /* dropped by the daemon, or reported dropped by its processes */
	uint64_t lost;        /* reported sent by its processes, never received */
	uint64_t lost_unsent; /* of lost: never sent (its processes ended holding them) */
	uint64_t claimed;     /* of dropped, what its processes reported (not the daemon's) */
	uint64_t rejected;    /* its connections closed for breaking the protocol */
	uint64_t evicted;     /* its ended processes whose figures were dropped for room */
	bool warned;          /* logged once that it reached a share */
	bool warned_memory;   /* logged once that its histograms reached their share */
	bool warned_retired;  /* logged once that its retired figures reached their share */
	bool warned_unread;   /* logged once that its unread fds reached their share */
	/* Slices its requests waited, past the first, while exited clients' queues were read */
	uint64_t drain_slices;
	uint64_t reaped_ns; /* its last search for dead threads that found none (CLOCK_MONOTONIC) */
	struct stats_budget hist; /* its processes' histogram blocks */
	/* Its connections' tables of region and call path ids (what their Defines and
	 * SampleBatches' names make them hold: 8 bytes an id) */
	struct stats_budget define;
	bool warned_define;     /* logged once that its tables reached their share */
	uint64_t define_slices; /* slices past the first its Defines and batches' names took */
	/* Of its evicted processes, those of its last USERS_RUN_TAGS pmcctl runs, by their
	 * run tag (users_tag_evicted()): so that a run can say how many of its command's
	 * processes it cannot list. Keyed by tag within the uid: another uid's tags, even the
	 * same string, are its own. Oldest overwritten first. */
	struct {
		char tag[33];
		uint64_t n;
	} evicted_tag[USERS_RUN_TAGS];
	size_t next_evicted_tag;
};

struct users {
	struct user_share **v;
	size_t n, cap;
	struct stats_budget *parent; /* the daemon's budget, parent of each user's */
	size_t hist_limit;           /* each user's share of it */
	struct stats_budget
	        *define_parent; /* the daemon's budget of id tables, parent of each user's */
	size_t define_limit;    /* each user's share of it */
};

/**
 * users_get() - the share of @uid, created (all zero) on first use
 * Return: the share (owned by @u, at a stable address), or NULL on -ENOMEM.
 */
struct user_share *users_get(struct users *u, uid_t uid);

/** users_find() - the share of @uid, or NULL when it has none yet */
const struct user_share *users_find(const struct users *u, uid_t uid);

/* The resources users_others_unused() looks at. */
enum users_resource {
	USERS_CONNECTIONS,
	USERS_FDS,
	USERS_FDS_UNREAD,
	USERS_HISTOGRAMS,
	USERS_DEFINE,
};

/**
 * users_others_unused() - what the uids other than @uid that hold some of @what have not
 * used of their @share: what share_allows() keeps for them (share.h)
 */
size_t users_others_unused(const struct users *u, uid_t uid, enum users_resource what,
                           size_t share);

/**
 * users_tag_evicted_add() - count one evicted process of @us's pmcctl run @tag (non-empty,
 * up to 32 characters): its own table, the oldest of its tags overwritten when full
 */
void users_tag_evicted_add(struct user_share *us, const char *tag);

/**
 * users_tag_evicted() - how many of @us's processes that said run tag @tag were evicted:
 * 0 for an empty tag, a tag of another uid, or one older than its last USERS_RUN_TAGS runs
 * with evictions. @us may be NULL (a uid with no share yet: 0).
 */
uint64_t users_tag_evicted(const struct user_share *us, const char *tag);

/** users_free() - free every share */
void users_free(struct users *u);
