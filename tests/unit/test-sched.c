/* Unit tests for daemon/session/loop-sched.c: which connection the loop serves next. A uid with
 * many connections gets no more turns than a uid with one; control goes before bulk, and bulk still
 * gets its turns; a connection closed while queued leaves no trace; each uid's part of the loop
 * (its queues) is its own, at a stable address. */
#include <stdio.h>
#include <string.h>

#include "pmc-test.h"
#include "session/loop-sched.h"

/* A connection of uid @uid (an index into uids[]), its place in the queues. */
struct conn {
	struct sched_item it;
	int uid;
};

static struct sched_queue uids[4][SCHED_CLASSES];

static void
push(struct sched *sc, struct conn *c, enum sched_class cls)
{
	loop_sched_push(sc, &uids[c->uid][cls], cls, &c->it);
}

static struct conn *
pop(struct sched *sc)
{
	return (struct conn *)loop_sched_pop(sc); /* it is the first member */
}

static void
test_uid_fair(void)
{
	struct sched sc = {0};
	memset(uids, 0, sizeof(uids));
	static struct conn hog[100];
	struct conn victim = {.uid = 1};
	for (int i = 0; i < 100; i++) {
		hog[i].uid = 0;
		push(&sc, &hog[i], SCHED_BULK);
	}
	push(&sc, &victim, SCHED_BULK);
	CHECK(sc.n == 101);
	/* The hog's first connection, then the victim: uid by uid, not connection by one. */
	CHECK(pop(&sc) == &hog[0]);
	CHECK(pop(&sc) == &victim);
	/* Each served connection with more work goes back: the victim's turn comes every
	 * second time, whatever the hog's 100 connections. */
	push(&sc, &hog[0], SCHED_BULK);
	for (int round = 0; round < 50; round++) {
		push(&sc, &victim, SCHED_BULK);
		struct conn *a = pop(&sc), *b = pop(&sc);
		CHECK(a->uid != b->uid);
		struct conn *h = a->uid == 0 ? a : b;
		CHECK(h == &hog[round + 1]); /* the hog's connections in turn, too */
		push(&sc, h, SCHED_BULK);
		loop_sched_remove(&sc, &victim.it); /* not queued now: no-op */
		CHECK(!loop_sched_queued(&victim.it));
	}
	while (pop(&sc))
		;
	CHECK(sc.n == 0 && pmc_list_empty(&sc.ring[SCHED_BULK]) && !sc.ring[SCHED_BULK].tail);
}

static void
test_control_first(void)
{
	struct sched sc = {0};
	memset(uids, 0, sizeof(uids));
	static struct conn bulk[8];
	struct conn ctl[3] = {{.uid = 1}, {.uid = 2}, {.uid = 2}};
	for (int i = 0; i < 8; i++) {
		bulk[i].uid = i % 2 ? 3 : 0;
		push(&sc, &bulk[i], SCHED_BULK);
	}
	for (int i = 0; i < 3; i++)
		push(&sc, &ctl[i], SCHED_CONTROL);
	/* Control first, but every 4th turn is bulk's while both wait. */
	CHECK(pop(&sc) == &ctl[0]);
	CHECK(pop(&sc) == &ctl[1]);
	CHECK(pop(&sc) == &ctl[2]);
	struct conn *x = pop(&sc); /* the 4th turn: bulk's */
	CHECK(x->uid == 0 || x->uid == 3);
	/* Control that keeps coming still leaves bulk one turn in 4. */
	int bulk_turns = 0;
	for (int i = 0; i < 40; i++) {
		push(&sc, &ctl[0], SCHED_CONTROL);
		struct conn *c = pop(&sc);
		if (c != &ctl[0]) {
			bulk_turns++;
			push(&sc, c, SCHED_BULK);
			CHECK(pop(&sc) == &ctl[0]);
		}
	}
	CHECK(bulk_turns >= 40 / SCHED_BULK_EVERY - 1);
	/* Control empty: bulk only. */
	int n = 0;
	while (pop(&sc))
		n++;
	CHECK(n == 7);
}

static void
test_remove_queued(void)
{
	struct sched sc = {0};
	memset(uids, 0, sizeof(uids));
	struct conn a = {.uid = 0}, b = {.uid = 0}, c = {.uid = 1};
	push(&sc, &a, SCHED_CONTROL);
	push(&sc, &b, SCHED_CONTROL);
	push(&sc, &c, SCHED_BULK);
	/* Closed while queued: the middle of a queue, then a uid's last connection. */
	loop_sched_remove(&sc, &a.it);
	CHECK(!loop_sched_queued(&a.it) && sc.n == 2);
	loop_sched_remove(&sc, &c.it);
	CHECK(pmc_list_empty(&sc.ring[SCHED_BULK]) && !uids[1][SCHED_BULK].ringed);
	CHECK(pop(&sc) == &b);
	CHECK(pop(&sc) == NULL && sc.n == 0);
	/* Pushed again after all that: served as new. */
	push(&sc, &a, SCHED_BULK);
	CHECK(pop(&sc) == &a);
	CHECK(pop(&sc) == NULL);
}

static void
test_uid_parts(void)
{
	struct sched sc = {0};
	struct sched_uid *first = loop_sched_uid(&sc, 1000);
	CHECK(first && first->uid == 1000 && !first->wholes && !first->defining);
	/* Past the table's first growth: each uid once, the first one where it was. */
	for (uid_t u = 0; u < 40; u++) {
		struct sched_uid *su = loop_sched_uid(&sc, u);
		CHECK(su && su->uid == u);
		CHECK(loop_sched_uid(&sc, u) == su);
	}
	CHECK(sc.n_uids == 41 && loop_sched_uid(&sc, 1000) == first);
	/* Queued through its part, served as any queue. */
	struct conn a = {.uid = 0};
	loop_sched_push(&sc, &first->sq[SCHED_BULK], SCHED_BULK, &a.it);
	CHECK(loop_sched_pop(&sc) == &a.it && sc.n == 0);
	loop_sched_free(&sc);
	CHECK(sc.n_uids == 0 && !sc.uids);
}

int
main(void)
{
	PMC_TEST_RUN(test_uid_fair);
	PMC_TEST_RUN(test_control_first);
	PMC_TEST_RUN(test_remove_queued);
	PMC_TEST_RUN(test_uid_parts);
	return 0;
}
