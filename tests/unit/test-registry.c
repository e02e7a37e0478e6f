/* Unit tests for daemon/registry.c: a process's regions by name, through its index, as it
 * grows past several resizes; and the room --max-total-regions leaves. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pmc-test.h"
#include "registry.h"

#define N 5000

static void
test_regions_by_name(void)
{
	struct registry reg = {0};
	struct process *p = registry_process(&reg, getpid(), getuid());
	CHECK(p);
	static struct region_agg *made[N];
	char name[32];

	CHECK(region_find(p, "parse") == NULL); /* no index yet */
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "region-%d", i);
		made[i] = process_region(&reg, p, name);
		CHECK(made[i]);
		CHECK(!strcmp(made[i]->name, name));
		/* Asking again, right away and after the index grew, gives the same region. */
		CHECK(process_region(&reg, p, name) == made[i]);
		CHECK(region_find(p, name) == made[i]);
	}
	CHECK(p->n_regions == N);
	CHECK(reg.n_regions == N);
	CHECK(p->index_cap >= 2 * N);
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "region-%d", i);
		CHECK(region_find(p, name) == made[i]);
		CHECK(p->regions[i] == made[i]); /* in the order they came */
	}
	/* Names that are not there, including prefixes and extensions of ones that are. */
	CHECK(region_find(p, "region-") == NULL);
	CHECK(region_find(p, "region-50000") == NULL);
	CHECK(region_find(p, "region-1x") == NULL);
	CHECK(region_find(p, "") == NULL);
	registry_free(&reg);
	CHECK(reg.n_regions == 0);
}

/* Two processes index their regions apart: the same name is two regions. */
static void
test_processes_apart(void)
{
	struct registry reg = {0};
	struct process *p = registry_process(&reg, getpid(), getuid());
	struct process *q = registry_process(&reg, getppid(), getuid());
	CHECK(p && q && p != q);
	struct region_agg *a = process_region(&reg, p, "parse");
	struct region_agg *b = process_region(&reg, q, "parse");
	CHECK(a && b && a != b);
	CHECK(region_find(p, "parse") == a);
	CHECK(region_find(q, "parse") == b);
	CHECK(region_find(q, "other") == NULL);
	CHECK(reg.n_regions == 2);
	registry_free(&reg);
}

/* --max-total-regions: ended processes make room, the oldest first, never the asking one;
 * running ones never do. */
static void
test_room(void)
{
	struct registry reg = {.max_ended = 10, .max_regions = 2};
	struct process *p = registry_process(&reg, getpid(), getuid());
	struct process *q = registry_process(&reg, getppid(), getuid());
	CHECK(p && q);
	CHECK(registry_room(&reg, p));
	CHECK(process_region(&reg, p, "a"));
	CHECK(registry_room(&reg, q));
	CHECK(process_region(&reg, q, "b"));
	/* Both running: no room, nothing evicted. */
	CHECK(!registry_room(&reg, q));
	CHECK(reg.evicted == 0 && reg.n_regions == 2);
	/* p ended: it makes room for q... */
	registry_process_ended(&reg, p, 5);
	CHECK(reg.n_procs == 2);
	CHECK(!registry_room(&reg, p)); /* ...but never for itself */
	CHECK(reg.n_procs == 2);
	CHECK(registry_room(&reg, q));
	CHECK(reg.evicted == 1 && reg.n_procs == 1 && reg.n_regions == 1);
	CHECK(reg.procs == q);
	registry_free(&reg);
}

/* Distinct events per process are bounded (one event spelled 32,768 ways grew every region's
 * event array without limit); a setuid image's figures are apart from its starter's. */
static void
test_events_and_owners(void)
{
	struct registry reg = {0};
	struct process *p = registry_process(&reg, getpid(), 65534);
	CHECK(p);
	char name[32], *one[1] = {name};
	for (int i = 0; i < PROCESS_MAX_EVENTS; i++) {
		snprintf(name, sizeof(name), "event-%d", i);
		CHECK(process_event_room(p, one, 1) == 0);
		CHECK(process_event_id(p, name) == i);
	}
	snprintf(name, sizeof(name), "event-%d", 3);
	CHECK(process_event_room(p, one, 1) == 0); /* already counted */
	snprintf(name, sizeof(name), "event-%d", PROCESS_MAX_EVENTS);
	CHECK(process_event_room(p, one, 1) == -EMFILE);
	/* The same pid and start under another uid (an exec'd setuid program) is apart. */
	struct process *q = registry_process(&reg, getpid(), 0);
	CHECK(q && q != p && q->uid == 0 && p->uid == 65534);
	CHECK(registry_process(&reg, getpid(), 65534) == p);
	registry_free(&reg);
}

int
main(void)
{
	PMC_TEST_RUN(test_regions_by_name);
	PMC_TEST_RUN(test_processes_apart);
	PMC_TEST_RUN(test_room);
	PMC_TEST_RUN(test_events_and_owners);
	return 0;
}
