/* sched: round-robin per uid over the connections that have work, control before bulk
 * (see loop-sched.h). */
#include "session/loop-sched.h"

#include <stdlib.h>

static void
ring_append(struct sched *sc, struct sched_queue *q)
{
	pmc_list_append(&sc->ring[q->cls], &q->ring_link);
	q->ringed = true;
}

static void
ring_unlink(struct sched *sc, struct sched_queue *q)
{
	pmc_list_remove(&sc->ring[q->cls], &q->ring_link);
	q->ringed = false;
}

void
loop_sched_push(struct sched *sc, struct sched_queue *q, enum sched_class cls,
                struct sched_item *it)
{
	pmc_list_append(&q->items, &it->link);
	it->q = q;
	sc->n++;
	if (!q->ringed) {
		q->cls = cls;
		ring_append(sc, q);
	}
}

void
loop_sched_remove(struct sched *sc, struct sched_item *it)
{
	struct sched_queue *q = it->q;
	if (!q)
		return;
	pmc_list_remove(&q->items, &it->link);
	it->q = NULL;
	sc->n--;
	if (pmc_list_empty(&q->items))
		ring_unlink(sc, q);
}

struct sched_item *
loop_sched_pop(struct sched *sc)
{
	enum sched_class cls = SCHED_CONTROL;
	if (pmc_list_empty(&sc->ring[SCHED_CONTROL]))
		cls = SCHED_BULK;
	else if (!pmc_list_empty(&sc->ring[SCHED_BULK]) && ++sc->turn % SCHED_BULK_EVERY == 0)
		cls = SCHED_BULK;
	struct sched_queue *q = pmc_list_first(&sc->ring[cls], struct sched_queue, ring_link);
	if (!q)
		return NULL;
	struct sched_item *it = pmc_list_first(&q->items, struct sched_item, link);
	loop_sched_remove(sc, it);
	/* The uid goes to the back of its ring: the other uids' turns come first. */
	if (q->ringed && q->ring_link.next) {
		ring_unlink(sc, q);
		ring_append(sc, q);
	}
	return it;
}

struct sched_uid *
loop_sched_uid(struct sched *sc, uid_t uid)
{
	for (size_t i = 0; i < sc->n_uids; i++)
		if (sc->uids[i]->uid == uid)
			return sc->uids[i];
	if (sc->n_uids == sc->cap_uids) {
		size_t cap = sc->cap_uids ? 2 * sc->cap_uids : 8;
		struct sched_uid **v = realloc(sc->uids, cap * sizeof(*v));
		if (!v)
			return NULL;
		sc->uids = v;
		sc->cap_uids = cap;
	}
	struct sched_uid *su = calloc(1, sizeof(*su));
	if (!su)
		return NULL;
	su->uid = uid;
	sc->uids[sc->n_uids++] = su;
	return su;
}

void
loop_sched_free(struct sched *sc)
{
	for (size_t i = 0; i < sc->n_uids; i++)
		free(sc->uids[i]);
	free(sc->uids);
	sc->uids = NULL;
	sc->n_uids = sc->cap_uids = 0;
}
