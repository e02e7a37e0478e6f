/* log_gate_pass() (daemon/kernel/log.h), the one rate limit of the daemon's lines: log_limited()'s
 * 20 lines every 10 s over all clients and the metrics page's one line a minute per condition. The
 * first occurrence passes, a burst then holds the rest back, the window that closes reports what it
 * held and how long it lasted, and a new window opens at the next occurrence, not on a fixed grid.
 */
#include "kernel/log.h"
#include "pmc-test.h"

#define S 1000000000ull

static void
test_log_gate_burst_of_one(void)
{
	struct log_gate g = {0};
	unsigned long held = 99;
	uint64_t held_ns = 99;

	/* The first passes at any time, even at clock 0. */
	CHECK(log_gate_pass(&(struct log_gate){0}, 0, 60 * S, 1, 1, &held, &held_ns));
	CHECK(held == 0 && held_ns == 0);
	CHECK(log_gate_pass(&g, 1 * S, 60 * S, 1, 1, &held, &held_ns));
	/* Held back for 60 s, counted by @n. */
	CHECK(!log_gate_pass(&g, 2 * S, 60 * S, 1, 1, &held, &held_ns));
	CHECK_EQ(held, 0);
	CHECK(!log_gate_pass(&g, 60 * S, 60 * S, 1, 5, &held, NULL));
	CHECK_EQ(held, 0);
	/* The window closes: this line passes and says the 6 held back, over 60 s. */
	CHECK(log_gate_pass(&g, 61 * S, 60 * S, 1, 3, &held, &held_ns));
	CHECK(held == 6 && held_ns == 60 * S);
	/* A quiet hour: the next passes with nothing held. */
	CHECK(log_gate_pass(&g, 3600 * S, 60 * S, 1, 1, &held, &held_ns));
	CHECK(held == 0 && held_ns == 3539 * S);
	/* The window opened at 3600 s, not on a 60 s grid: 3650 s is still in it. */
	CHECK(!log_gate_pass(&g, 3650 * S, 60 * S, 1, 1, &held, &held_ns));
	CHECK(held == 0 && held_ns == 0);
}

static void
test_log_gate_burst(void)
{
	struct log_gate g = {0};
	unsigned long held;
	uint64_t held_ns;
	uint64_t t = 100 * S;

	for (int i = 0; i < 20; i++)
		CHECK(log_gate_pass(&g, t + (uint64_t)i, 10 * S, 20, 1, &held, &held_ns));
	for (int i = 0; i < 7; i++)
		CHECK(!log_gate_pass(&g, t + 9 * S, 10 * S, 20, 1, &held, &held_ns));
	CHECK(log_gate_pass(&g, t + 12 * S, 10 * S, 20, 1, &held, &held_ns));
	CHECK(held == 7 && held_ns == 12 * S);
	/* The new window lets 19 more through, then holds again. */
	for (int i = 0; i < 19; i++)
		CHECK(log_gate_pass(&g, t + 13 * S, 10 * S, 20, 1, &held, &held_ns));
	CHECK(!log_gate_pass(&g, t + 13 * S, 10 * S, 20, 1, &held, &held_ns));
}

/* Gates are independent: the metrics page keeps one per condition. */
static void
test_log_gate_apart(void)
{
	struct log_gate a = {0}, b = {0};
	unsigned long held;

	CHECK(log_gate_pass(&a, 5 * S, 60 * S, 1, 1, &held, NULL));
	CHECK(!log_gate_pass(&a, 6 * S, 60 * S, 1, 1, &held, NULL));
	CHECK(log_gate_pass(&b, 6 * S, 60 * S, 1, 1, &held, NULL));
	CHECK_EQ(held, 0);
}

int
main(void)
{
	PMC_TEST_RUN(test_log_gate_burst_of_one);
	PMC_TEST_RUN(test_log_gate_burst);
	PMC_TEST_RUN(test_log_gate_apart);
	return 0;
}
