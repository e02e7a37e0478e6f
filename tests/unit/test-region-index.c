/* region_index_*() (daemon/model/region-index.h), the one index of a process's regions and of its
 * call path nodes: every element found again as it grows, (parent, name) pairs told apart,
 * the order of the array kept, names that collide in the table, and an empty index. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/region-index.h"
#include "model/registry.h"
#include "pmc-test.h"

struct table {
	struct region_index ix;
	struct region_agg **v;
	size_t n, cap;
};

static struct region_agg *
add(struct table *t, uint32_t parent, const char *name)
{
	struct region_agg *r = calloc(1, sizeof(*r));

	CHECK(r && (r->name = strdup(name)));
	r->parent = parent;
	r->hash = region_index_hash(parent, name);
	CHECK_EQ(region_index_reserve(&t->ix, &t->v, t->n, &t->cap), 0);
	CHECK(t->n < t->cap && 2 * (t->n + 1) <= t->ix.cap);
	t->v[t->n] = r;
	region_index_put(&t->ix, t->v, t->n++);
	return r;
}

static void
table_free(struct table *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->v[i]->name);
		free(t->v[i]);
	}
	free(t->v);
	region_index_free(&t->ix);
	CHECK(!t->ix.slots && !t->ix.cap);
}

static void
test_region_index_empty(void)
{
	struct table t = {0};

	CHECK(!region_index_find(&t.ix, t.v, 0, "x"));
	region_index_free(&t.ix);
}

static void
test_region_index_grows(void)
{
	enum { N = 3000 };
	struct table t = {0};
	struct region_agg *made[N];
	char name[32];

	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "r%d", i);
		made[i] = add(&t, 0, name);
		/* Found right away and after the table grew. */
		CHECK_EQ(region_index_find(&t.ix, t.v, 0, name), made[i]);
		CHECK_EQ(region_index_find(&t.ix, t.v, 0, "r0"), made[0]);
	}
	CHECK(t.n == N && t.cap >= N && t.ix.cap >= 2 * N);
	CHECK_EQ((t.ix.cap & (t.ix.cap - 1)), 0);
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "r%d", i);
		CHECK_EQ(region_index_find(&t.ix, t.v, 0, name), made[i]);
		CHECK_EQ(t.v[i], made[i]); /* in the order they came */
	}
	CHECK(!region_index_find(&t.ix, t.v, 0, "r3000"));
	CHECK(!region_index_find(&t.ix, t.v, 1, "r0"));
	table_free(&t);
}

/* One name under several parents: the call path tree's nodes. */
static void
test_region_index_parents(void)
{
	struct table t = {0};
	struct region_agg *a0 = add(&t, 0, "a"), *a1 = add(&t, 1, "a"), *a2 = add(&t, 2, "a");
	struct region_agg *b1 = add(&t, 1, "b");

	CHECK_EQ(region_index_find(&t.ix, t.v, 0, "a"), a0);
	CHECK_EQ(region_index_find(&t.ix, t.v, 1, "a"), a1);
	CHECK_EQ(region_index_find(&t.ix, t.v, 2, "a"), a2);
	CHECK_EQ(region_index_find(&t.ix, t.v, 1, "b"), b1);
	CHECK(!region_index_find(&t.ix, t.v, 0, "b"));
	CHECK(!region_index_find(&t.ix, t.v, 3, "a"));
	/* A region's hash is its node's at the root: both indexes use one function. */
	CHECK(region_index_hash(0, "a") == a0->hash && region_index_hash(1, "a") != a0->hash);
	table_free(&t);
}

/* Elements whose hashes are equal (forced) are told apart by their names. */
static void
test_region_index_collisions(void)
{
	struct table t = {0};
	struct region_agg *r[20];
	char name[8];

	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "c%d", i);
		r[i] = calloc(1, sizeof(*r[i]));
		CHECK(r[i] && (r[i]->name = strdup(name)));
		r[i]->hash = 42;
		CHECK_EQ(region_index_reserve(&t.ix, &t.v, t.n, &t.cap), 0);
		t.v[t.n] = r[i];
		region_index_put(&t.ix, t.v, t.n++);
	}
	for (int i = 0; i < 20; i++) {
		size_t mask = t.ix.cap - 1, k = 42 & mask;
		/* Linear probing from the hash's slot reaches it. */
		while (t.ix.slots[k] != (uint32_t)i + 1)
			k = (k + 1) & mask;
		CHECK_EQ(t.v[t.ix.slots[k] - 1], r[i]);
	}
	table_free(&t);
}

int
main(void)
{
	PMC_TEST_RUN(test_region_index_empty);
	PMC_TEST_RUN(test_region_index_grows);
	PMC_TEST_RUN(test_region_index_parents);
	PMC_TEST_RUN(test_region_index_collisions);
	return 0;
}
