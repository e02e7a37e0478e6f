/* Unit tests for daemon/kernel/perf.c and the derived metrics of daemon/model/registry.c: name
 * resolution and modifiers, typo suggestions, libpfm4 names, and how events are split
 * into perf groups. Needs no PMU: nothing here opens a hardware counter. */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <string.h>

#include <unistd.h>

#include "common/util.h"
#include "kernel/perf.h"
#include "model/registry.h"
#include "pmc-test.h"

static void
test_resolve_modifiers(void)
{
	struct perf_event_attr a;
	CHECK(perf_resolve("cycles", &a) == 0);
	CHECK(a.type == PERF_TYPE_HARDWARE && a.config == PERF_COUNT_HW_CPU_CYCLES);
	CHECK(a.exclude_kernel == 1 && a.exclude_user == 0); /* hardware: user mode by default */
	CHECK(a.read_format == (PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED |
	                        PERF_FORMAT_TOTAL_TIME_RUNNING));
	CHECK(perf_resolve("cycles:k", &a) == 0 && a.exclude_kernel == 0 && a.exclude_user == 1);
	CHECK(perf_resolve("cycles:uk", &a) == 0 && a.exclude_kernel == 0 && a.exclude_user == 0);
	CHECK(perf_resolve("page-faults", &a) == 0);
	CHECK(a.type == PERF_TYPE_SOFTWARE && a.exclude_kernel == 0); /* software: both */
	CHECK(perf_resolve("page-faults:u", &a) == 0 && a.exclude_kernel == 1);
	CHECK(perf_resolve("cs", &a) == 0 && a.config == PERF_COUNT_SW_CONTEXT_SWITCHES);
	CHECK(perf_resolve("L1-dcache-load-misses", &a) == 0 && a.type == PERF_TYPE_HW_CACHE);
	CHECK(perf_resolve("cycles:x", &a) == -EINVAL);
	CHECK(perf_resolve("cycles:", &a) == -EINVAL);
	CHECK(perf_resolve("", &a) == -EINVAL);
	CHECK(perf_resolve("no-such-event", &a) == -ENOENT);
}

static void
test_suggest(void)
{
	CHECK(!strcmp(perf_suggest("page-fualts"), "page-faults"));
	CHECK(!strcmp(perf_suggest("instructons:u"), "instructions"));
	CHECK(!strcmp(perf_suggest("cycle"), "cycles"));
	CHECK(perf_suggest("completely-unrelated-name") == NULL);
}

static void
test_libpfm_names(void)
{
	struct perf_event_attr a;
	/* perf_setup() initialises libpfm4; its "perf" PMU exists everywhere. */
	CHECK(perf_resolve("perf::TASK-CLOCK", &a) == 0);
	CHECK(a.type == PERF_TYPE_SOFTWARE && a.config == PERF_COUNT_SW_TASK_CLOCK);
	CHECK(a.read_format & PERF_FORMAT_GROUP);
	CHECK(perf_resolve("perf::PAGE-FAULTS:k", &a) == 0 && a.exclude_user == 1);
	CHECK(perf_resolve("perf::NO-SUCH-THING", &a) == -ENOENT);
	CHECK(perf_probe("perf::PAGE-FAULTS") == 0);
}

static void
test_plan_groups(void)
{
	/* 2 software events and 6 hardware ones, at perf_hw_counters() per group. */
	char *names[] = {"cycles",        "page-faults", "instructions", "branches",
	                 "branch-misses", "task-clock",  "cache-misses", "cache-references"};
	size_t n = ARRAY_SIZE(names), order[ARRAY_SIZE(names)];
	uint32_t group[ARRAY_SIZE(names)];
	unsigned per = perf_hw_counters();
	CHECK(per >= 1);
	CHECK(perf_plan(names, n, order, group) == 0);
	/* Software first, together in group 0, in the order asked. */
	CHECK(!strcmp(names[order[0]], "page-faults") && group[0] == 0);
	CHECK(!strcmp(names[order[1]], "task-clock") && group[1] == 0);
	/* Then hardware, in the order asked, never more than `per` to a group. */
	const char *hw[] = {"cycles",        "instructions", "branches",
	                    "branch-misses", "cache-misses", "cache-references"};
	for (size_t k = 0; k < 6; k++) {
		CHECK(!strcmp(names[order[2 + k]], hw[k]));
		CHECK(group[2 + k] == 1 + k / per);
	}
	/* Each index appears once. */
	unsigned seen = 0;
	for (size_t k = 0; k < n; k++)
		seen |= 1u << order[k];
	CHECK(seen == (1u << n) - 1);

	char *only_hw[] = {"cycles", "instructions"};
	CHECK(perf_plan(only_hw, 2, order, group) == 0 && group[0] == 0 && group[1] == 0);
	char *bad[] = {"cycles", "nope"};
	CHECK(perf_plan(bad, 2, order, group) == -ENOENT);
}

static void
test_derived(void)
{
	struct registry reg = {0};
	struct process *p = registry_process(&reg, getpid(), getuid());
	CHECK(p);
	struct region_agg *r = registry_process_region(&reg, p, "r");
	CHECK(r);
	const char *names[] = {"instructions:u", "cycles", "cache-misses", "branches"};
	uint64_t sums[] = {300, 200, 5, 0};
	for (size_t i = 0; i < 4; i++) {
		int id = registry_process_event_id(p, names[i]);
		CHECK(id == (int)i);
		struct event_agg *e = registry_region_event(r, (size_t)id);
		CHECK(e && stats_add(&e->st, sums[i], NULL) == 0);
	}
	struct derived d[DERIVED_MAX];
	/* ipc from instructions:u and cycles; no cache-references; branches sum 0. */
	CHECK(registry_region_derived(p, r, d) == 1);
	CHECK(!strcmp(d[0].name, "ipc") && d[0].value == 1.5);
	registry_free(&reg);
}

/* A fake PMU of 2 counters: a group takes at most 2 events; a third member is refused with
 * EINVAL, as the kernel's group validation does. Fds are real (/dev/null), so that leaks
 * show. */
static int members[1024];
static int fail_leaders;

static int
fake_open(struct perf_event_attr *attr, pid_t tid, int group_fd)
{
	(void)tid;
	if (group_fd < 0) {
		if (fail_leaders)
			return -EINVAL;
		CHECK(attr->disabled); /* leaders start disabled */
	} else {
		CHECK(!attr->disabled);
		if (members[group_fd] >= 2)
			return -EINVAL;
	}
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0 && fd < 1024);
	members[fd] = 1;
	if (group_fd >= 0)
		members[group_fd]++;
	return fd;
}

static void
test_open_split(void)
{
	char *names[] = {"task-clock", "page-faults",   "cycles",      "instructions",
	                 "branches",   "branch-misses", "cache-misses"};
	uint32_t group[] = {0, 0, 1, 1, 1, 1, 1};
	int fds[7];
	size_t failed = 99;
	int before = pmc_test_count_fds();

	perf_set_open_hook(fake_open);
	CHECK(perf_open_group(0, names, group, 7, fds, &failed) == 0);
	/* The 5 hardware events: 2 + 2 + 1, the new groups numbered past the others. */
	const uint32_t want[] = {0, 0, 1, 1, 2, 2, 3};
	for (int i = 0; i < 7; i++)
		CHECK((group[i]) == (want[i]));
	CHECK((members[fds[0]]) == (2));
	CHECK((members[fds[2]]) == (2));
	CHECK((members[fds[4]]) == (2));
	CHECK((members[fds[6]]) == (1));
	CHECK(failed == 99);
	for (int i = 0; i < 7; i++)
		close(fds[i]);

	/* A refused leader is an error: nothing stays open. */
	fail_leaders = 1;
	uint32_t g2[] = {0, 0};
	CHECK(perf_open_group(0, names + 2, g2, 2, fds, &failed) == -EINVAL);
	CHECK((failed) == (0));
	fail_leaders = 0;
	perf_set_open_hook(NULL);
	CHECK((pmc_test_count_fds()) == (before));
}

int
main(void)
{
	int fds = pmc_test_count_fds();
	perf_setup();
	PMC_TEST_RUN(test_resolve_modifiers);
	PMC_TEST_RUN(test_suggest);
	PMC_TEST_RUN(test_libpfm_names);
	PMC_TEST_RUN(test_plan_groups);
	PMC_TEST_RUN(test_derived);
	PMC_TEST_RUN(test_open_split);
	perf_cleanup();
	CHECK(pmc_test_count_fds() == fds);
	printf("ok - no fd leaked\n");
	return 0;
}
