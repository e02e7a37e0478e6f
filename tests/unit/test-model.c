/* Unit tests for daemon/model/model.c: the data model's root object set up from the policy:
 * its parts point at one another (a uid's budgets are charged with the daemon's), the bounds
 * are the policy's, and model_free() leaves nothing (a zeroed model too). */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "kernel/policy.h"
#include "model/model.h"
#include "pmc-test.h"

static void
test_model_from_policy(void)
{
	struct policy pol;
	policy_init(&pol);
	pol.keep_exited = 7;
	pol.keep_exited_per_user = 3;
	pol.max_total_regions = 1000;
	pol.max_memory_mib = 8;
	pol.max_memory_per_user_mib = 2;
	pol.max_define_memory_mib = 4;
	pol.max_define_memory_per_user_mib = 1;
	struct model m;
	memset(&m, 0xa5, sizeof(m)); /* whatever was there is overwritten */
	model_init(&m, &pol);
	CHECK(m.reg.max_ended == 7 && m.reg.max_ended_per_uid == 3 && m.reg.max_regions == 1000);
	CHECK(m.reg.users == &m.users && !m.reg.n_procs && !m.samples && !m.state_moved_aside);
	CHECK(m.hist_budget.limit == (size_t)8 << 20 && m.define_budget.limit == (size_t)4 << 20);
	struct user_share *u = users_get(&m.users, 1000);
	CHECK(u && u->hist.parent == &m.hist_budget && u->define.parent == &m.define_budget);
	CHECK(u->hist.limit == (size_t)2 << 20 && u->define.limit == (size_t)1 << 20);
	/* A uid's charge is the daemon's too, and so is what it gives back. */
	CHECK(stats_budget_charge(&u->hist, 4096));
	CHECK(m.hist_budget.used == 4096 && u->hist.used == 4096);
	stats_budget_credit(&u->hist, 4096);
	CHECK(m.hist_budget.used == 0);
	/* Its registry counts the uid's figures in the same users table. */
	struct process *p = registry_process(&m.reg, getpid(), 1000);
	CHECK(p && registry_process_region(&m.reg, p, "parse"));
	CHECK(m.reg.n_procs == 1 && m.reg.n_regions == 1);
	model_free(&m);
	static const struct model zero;
	CHECK(!memcmp(&m, &zero, sizeof(m)));
	policy_free(&pol);
}

static void
test_model_free_zeroed(void)
{
	struct model m = {0};
	model_free(&m);
	model_free(&m);
	CHECK(!m.reg.n_procs && !m.users.n);
}

int
main(void)
{
	PMC_TEST_RUN(test_model_from_policy);
	PMC_TEST_RUN(test_model_free_zeroed);
	return 0;
}
