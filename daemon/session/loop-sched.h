/* sched: which connection the daemon's one loop serves next, so that no user may hold it.
 * A connection with work (requests queued, a reply to build or send) waits in its uid's
 * queue of its class; a uid with work waits in its class's ring. Each turn takes the uid at
 * the head of a ring, the connection at the head of that uid's queue, and puts the uid back
 * at the ring's tail: a uid gets one slice a turn of the ring however many connections it
 * has. Control (Hello, registration, status) goes before bulk (sample batches, query
 * replies), but bulk gets every SCHED_BULK_EVERY-th turn while it waits, so neither starves.
 * Only the data structure: no libevent, no clock (session.c and server.c run the slices).
 * Each uid's queues live in its struct sched_uid, a table the struct sched owns (the data
 * model's struct user_share knows nothing of the loop). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/list.h"

/* A connection's class: bulk once it has sent a batch, or while it has a query reply to build
 * or send; control otherwise. */
enum sched_class {
	SCHED_CONTROL,
	SCHED_BULK,
	SCHED_CLASSES,
};

/* Bulk's turn while control waits too: one in this many. */
#define SCHED_BULK_EVERY 4

struct sched_queue;

/* One connection's place in its uid's queue (zero: not queued). */
struct sched_item {
	struct pmc_list_node link; /* in q->items */
	struct sched_queue *q;     /* NULL while not queued */
};

/* One uid's connections with work, of one class (zero: empty). */
struct sched_queue {
	struct pmc_list items;          /* struct sched_item, by link */
	struct pmc_list_node ring_link; /* in the ring of its class */
	enum sched_class cls;           /* that ring's, while ringed */
	bool ringed;
};

struct session;

/* What the loop holds for one uid (zero: nothing): its connections with work, and the one
 * piece of work of each kind its connections may have under way at a time. */
struct sched_uid {
	uid_t uid;
	struct sched_queue sq[SCHED_CLASSES]; /* its connections with work, by class */
	unsigned wholes;          /* its whole (not streamed) Query replies being built: 0 or 1 */
	struct session *defining; /* its connection whose Define goes on in later slices */
};

struct sched {
	struct pmc_list ring[SCHED_CLASSES]; /* struct sched_queue, by ring_link */
	size_t n;                            /* items queued */
	unsigned turn;                       /* turns taken while both classes waited */
	struct sched_uid **uids;             /* a few uids per host: a plain array */
	size_t n_uids, cap_uids;
};

/**
 * loop_sched_uid() - the loop's part of @uid, created (all zero) on first use
 * Return: it (owned by @sc, at a stable address until loop_sched_free()), or NULL on
 * -ENOMEM.
 */
struct sched_uid *loop_sched_uid(struct sched *sc, uid_t uid);

/** loop_sched_free() - free every uid's part; nothing may be queued any more */
void loop_sched_free(struct sched *sc);

/**
 * loop_sched_push() - queue @it at the tail of @q, the queue of its uid for class @cls
 * @it: borrowed until popped or removed; must not be queued already
 * @q: borrowed; always pushed with the same @cls
 */
void loop_sched_push(struct sched *sc, struct sched_queue *q, enum sched_class cls,
                     struct sched_item *it);

/**
 * loop_sched_pop() - take the next connection to serve: the head of the next uid's queue (see
 * the top of the file)
 * Return: the item, no longer queued (push it again if it has more work), or NULL when
 * nothing is queued.
 */
struct sched_item *loop_sched_pop(struct sched *sc);

/** loop_sched_remove() - take @it out of its queue if it is in one (a connection closed) */
void loop_sched_remove(struct sched *sc, struct sched_item *it);

/** loop_sched_queued() - whether @it waits in a queue */
static inline bool
loop_sched_queued(const struct sched_item *it)
{
	return it->q != NULL;
}
