/* sched: round-robin per uid over the connections that have work, control before bulk
 * (see sched.h). */
#include "loop-sched.h"

static void
ring_append(struct sched *sc, struct sched_queue *q)
{
	q->next = NULL;
	q->prev = sc->tail[q->cls];
	if (sc->tail[q->cls])
		sc->tail[q->cls]->next = q;
	else
		sc->head[q->cls] = q;
	sc->tail[q->cls] = q;
	q->ringed = true;
}

static void
ring_unlink(struct sched *sc, struct sched_queue *q)
{
	if (q->prev)
		q->prev->next = q->next;
	else
		sc->head[q->cls] = q->next;
	if (q->next)
		q->next->prev = q->prev;
	else
		sc->tail[q->cls] = q->prev;
	q->prev = q->next = NULL;
	q->ringed = false;
}

void
sched_push(struct sched *sc, struct sched_queue *q, enum sched_class cls, struct sched_item *it)
{
	it->next = NULL;
	it->prev = q->tail;
	if (q->tail)
		q->tail->next = it;
	else
		q->head = it;
	q->tail = it;
	it->q = q;
	sc->n++;
	if (!q->ringed) {
		q->cls = cls;
		ring_append(sc, q);
	}
}

void
sched_remove(struct sched *sc, struct sched_item *it)
{
	struct sched_queue *q = it->q;
	if (!q)
		return;
	if (it->prev)
		it->prev->next = it->next;
	else
		q->head = it->next;
	if (it->next)
		it->next->prev = it->prev;
	else
		q->tail = it->prev;
	it->prev = it->next = NULL;
	it->q = NULL;
	sc->n--;
	if (!q->head)
		ring_unlink(sc, q);
}

struct sched_item *
sched_pop(struct sched *sc)
{
	enum sched_class cls = SCHED_CONTROL;
	if (!sc->head[SCHED_CONTROL])
		cls = SCHED_BULK;
	else if (sc->head[SCHED_BULK] && ++sc->turn % SCHED_BULK_EVERY == 0)
		cls = SCHED_BULK;
	struct sched_queue *q = sc->head[cls];
	if (!q)
		return NULL;
	struct sched_item *it = q->head;
	sched_remove(sc, it);
	/* The uid goes to the back of its ring: the other uids' turns come first. */
	if (q->ringed && q->next) {
		ring_unlink(sc, q);
		ring_append(sc, q);
	}
	return it;
}
