/* Unit tests for daemon/state.c: a save and load round trip, and a state file written
 * before a reboot, whose processes no new process may match. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pmc-test.h"
#include "pmc.pb-c.h"
#include "server.h"
#include "state.h"

static char path[128];

static void
fill(struct server *srv)
{
	struct process *p = registry_process(&srv->reg, getpid(), getuid());
	CHECK(p);
	struct region_agg *r = process_region(&srv->reg, p, "parse");
	CHECK(r);
	int id = process_event_id(p, "page-faults");
	CHECK(id == 0);
	struct event_agg *e = region_event(r, 0);
	CHECK(e);
	for (uint64_t v = 1; v <= 100; v++) {
		CHECK(stats_add(&e->st, v) == 0);
		CHECK(stats_add(&r->wall, 1000 * v) == 0);
		r->count++;
	}
	p->received = 100;
	srv->samples = 100;
}

static void
test_state_round_trip(void)
{
	struct server a = {0}, b = {0};
	fill(&a);
	CHECK(state_save(&a, path) == 0);
	CHECK(state_load(&b, path) == 0);
	CHECK(b.samples == 100);
	struct process *p = b.reg.procs;
	CHECK(p && p->pid == getpid() && p->received == 100 && p->n_regions == 1);
	CHECK(p->start == a.reg.procs->start);
	/* This very process reconnecting finds its figures again. */
	CHECK(registry_process(&b.reg, getpid(), getuid()) == p);
	struct region_agg *r = p->regions[0];
	CHECK(!strcmp(r->name, "parse") && r->count == 100);
	CHECK(r->ev[0].st.sum == 5050 && r->ev[0].st.min == 1 && r->ev[0].st.max == 100);
	CHECK(stats_quantile(&r->ev[0].st, 0.5) ==
	      stats_quantile(&a.reg.procs->regions[0]->ev[0].st, 0.5));
	registry_free(&a.reg);
	registry_free(&b.reg);
}

static void
test_state_from_another_boot(void)
{
	struct server a = {0}, b = {0};
	fill(&a);
	CHECK(state_save(&a, path) == 0);
	/* Rewrite the file as if saved during another boot. */
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	uint8_t buf[1 << 16];
	ssize_t n = read(fd, buf, sizeof(buf));
	close(fd);
	CHECK(n > 0);
	Pmc__State *st = pmc__state__unpack(NULL, (size_t)n, buf);
	CHECK(st && *st->boot_id);
	char *saved = st->boot_id;
	st->boot_id = "00000000-0000-0000-0000-000000000000";
	size_t len = pmc__state__pack(st, buf);
	st->boot_id = saved;
	pmc__state__free_unpacked(st, NULL);
	fd = open(path, O_WRONLY | O_TRUNC);
	CHECK(fd >= 0 && write(fd, buf, len) == (ssize_t)len);
	close(fd);

	CHECK(state_load(&b, path) == 0);
	CHECK(b.reg.procs && b.reg.procs->regions[0]->count == 100); /* figures kept */
	/* ... but the same (pid, start time) is now another process: a new record. */
	struct process *p = registry_process(&b.reg, getpid(), getuid());
	CHECK(p && p != b.reg.procs->next && p->n_regions == 0);
	CHECK(b.reg.n_procs == 2);
	registry_free(&a.reg);
	registry_free(&b.reg);
}

int
main(void)
{
	int fds = pmc_test_count_fds();
	snprintf(path, sizeof(path), "/tmp/pmc-test-state.%d", (int)getpid());
	PMC_TEST_RUN(test_state_round_trip);
	PMC_TEST_RUN(test_state_from_another_boot);
	unlink(path);
	CHECK(pmc_test_count_fds() == fds);
	printf("ok - no fd leaked\n");
	return 0;
}
