/* share_allows(): a share is a guarantee, not a cap. */
#include "model/share.h"
#include "pmc-test.h"

static void
test_alone(void)
{
	/* 100 in all, shares of 25: alone, a uid takes up to 75, never the reserve. */
	CHECK(share_allows(0, 1, 25, 0, 100, 0));
	CHECK(share_allows(24, 1, 25, 24, 100, 0));
	CHECK(share_allows(25, 1, 25, 25, 100, 0));
	CHECK(share_allows(74, 1, 25, 74, 100, 0));
	CHECK(!share_allows(75, 1, 25, 75, 100, 0));
	CHECK(share_allows(70, 5, 25, 70, 100, 0));
	CHECK(!share_allows(70, 6, 25, 70, 100, 0));
}

static void
test_newcomer(void)
{
	/* The hog holds 75: a newcomer still gets its whole share, to the last unit. */
	CHECK(share_allows(0, 1, 25, 75, 100, 0));
	CHECK(share_allows(24, 1, 25, 99, 100, 0));
	CHECK(!share_allows(25, 1, 25, 100, 100, 0)); /* full */
	/* Beyond its share, the newcomer keeps the reserve as the hog did. */
	CHECK(!share_allows(25, 1, 25, 90, 100, 0));
	/* With a newcomer present that holds 5 (20 of its share unused), the hog may hold
	 * 100 - 25 (the reserve) - 25 (the newcomer's share) = 50. */
	CHECK(share_allows(49, 1, 25, 54, 100, 20));
	CHECK(!share_allows(50, 1, 25, 55, 100, 20));
	/* Within its share a uid is not held back by others' rests, only by the capacity. */
	CHECK(share_allows(10, 1, 25, 80, 100, 60));
}

static void
test_edges(void)
{
	CHECK(!share_allows(0, 1, 25, 100, 100, 0));  /* nothing left */
	CHECK(!share_allows(0, 101, 200, 0, 100, 0)); /* more than there is */
	CHECK(!share_allows(30, 1, 25, 40, 100, 80)); /* shares over capacity: own share only */
	CHECK(share_allows(0, 1, 200, 0, 100, 0));    /* a share over the capacity: a cap of it */
	CHECK(share_allows((size_t)-2, 1, (size_t)-1, 0, (size_t)-1, 0));
	CHECK(share_unused(10, 25) == 15 && share_unused(30, 25) == 0);
}

int
main(void)
{
	PMC_TEST_RUN(test_alone);
	PMC_TEST_RUN(test_newcomer);
	PMC_TEST_RUN(test_edges);
	return 0;
}
