/* proto/common/list.h, the intrusive list of the daemon and pmcctl: zeroed memory is an empty list,
 * append and prepend keep the order, remove at the head, the middle and the tail mends both
 * directions, for_each_safe frees as it goes, an object reached from its node. */
#include <stdlib.h>

#include "common/list.h"
#include "pmc-test.h"

struct obj {
	int before; /* the node is not the first member: pmc_list_entry() subtracts */
	struct pmc_list_node link;
	int v;
};

/* Checks that @l holds exactly @want[0..n) forwards and backwards, and that both ends agree. */
static void
check_order(const struct pmc_list *l, const int *want, size_t n)
{
	const struct obj *o;
	size_t i = 0;

	pmc_list_for_each(o, l, link) {
		CHECK(i < n && o->v == want[i]);
		i++;
	}
	CHECK_EQ(i, n);
	pmc_list_for_each_reverse(o, l, link) {
		CHECK(i > 0 && o->v == want[i - 1]);
		i--;
	}
	CHECK_EQ(i, 0);
	CHECK(pmc_list_empty(l) == (n == 0));
	CHECK_EQ(!l->head, !l->tail);
	CHECK(!l->head || !l->head->prev);
	CHECK(!l->tail || !l->tail->next);
}

static void
test_list_zeroed_is_empty(void)
{
	static struct pmc_list l;
	struct obj *o = (struct obj *)1;

	CHECK(pmc_list_empty(&l));
	CHECK(!pmc_list_first(&l, struct obj, link) && !pmc_list_last(&l, struct obj, link));
	pmc_list_for_each(o, &l, link)
		CHECK(0);
	CHECK_EQ(o, NULL);
}

static void
test_list_order_and_remove(void)
{
	struct pmc_list l = {0};
	struct obj o[5] = {{.v = 0}, {.v = 1}, {.v = 2}, {.v = 3}, {.v = 4}};

	pmc_list_append(&l, &o[1].link);
	pmc_list_append(&l, &o[2].link);
	pmc_list_prepend(&l, &o[0].link);
	pmc_list_append(&l, &o[3].link);
	pmc_list_append(&l, &o[4].link);
	check_order(&l, (const int[]){0, 1, 2, 3, 4}, 5);
	CHECK_EQ(pmc_list_first(&l, struct obj, link), &o[0]);
	CHECK_EQ(pmc_list_last(&l, struct obj, link), &o[4]);
	CHECK(pmc_list_next(&o[1], link) == &o[2] && pmc_list_prev(&o[1], link) == &o[0]);
	CHECK_EQ(pmc_list_entry(&o[3].link, struct obj, link), &o[3]);

	pmc_list_remove(&l, &o[2].link); /* the middle */
	CHECK(!o[2].link.prev && !o[2].link.next);
	CHECK(!pmc_list_contains(&l, &o[2].link) && pmc_list_contains(&l, &o[3].link));
	check_order(&l, (const int[]){0, 1, 3, 4}, 4);
	pmc_list_remove(&l, &o[0].link); /* the head */
	check_order(&l, (const int[]){1, 3, 4}, 3);
	pmc_list_remove(&l, &o[4].link); /* the tail */
	check_order(&l, (const int[]){1, 3}, 2);
	/* Back at the tail after a use, as the metrics page's connections are. */
	pmc_list_remove(&l, &o[1].link);
	pmc_list_append(&l, &o[1].link);
	check_order(&l, (const int[]){3, 1}, 2);
	pmc_list_remove(&l, &o[3].link);
	pmc_list_remove(&l, &o[1].link);
	check_order(&l, NULL, 0);
	pmc_list_prepend(&l, &o[4].link);
	check_order(&l, (const int[]){4}, 1);
}

static void
test_list_for_each_safe_frees(void)
{
	struct pmc_list l = {0};
	struct obj *o, *tmp;

	for (int i = 0; i < 6; i++) {
		o = calloc(1, sizeof(*o));
		CHECK(o);
		o->v = i;
		pmc_list_append(&l, &o->link);
	}
	/* The odd ones freed during the walk; each object visited once. */
	int seen = 0;
	pmc_list_for_each_safe(o, tmp, &l, link) {
		CHECK_EQ(o->v, seen++);
		if (o->v % 2) {
			pmc_list_remove(&l, &o->link);
			free(o);
		}
	}
	CHECK_EQ(seen, 6);
	check_order(&l, (const int[]){0, 2, 4}, 3);
	pmc_list_for_each_safe(o, tmp, &l, link) {
		pmc_list_remove(&l, &o->link);
		free(o);
	}
	check_order(&l, NULL, 0);
}

int
main(void)
{
	PMC_TEST_RUN(test_list_zeroed_is_empty);
	PMC_TEST_RUN(test_list_order_and_remove);
	PMC_TEST_RUN(test_list_for_each_safe_frees);
	return 0;
}
