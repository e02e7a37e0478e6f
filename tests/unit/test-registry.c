/* Unit tests for daemon/model/registry.c: a process's regions by name, through its index, as it
 * grows past several resizes; the room --max-total-regions leaves; and the retired
 * aggregates that keep what forgotten processes counted for /metrics. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cgroup.h"
#include "model/registry.h"
#include "pmc-test-registry.h"
#include "pmc-test.h"

#define N 5000

static void
test_regions_by_name(void)
{
	struct registry reg = {0};
	struct process *p = registry_process(&reg, getpid(), getuid());
	CHECK(p);
	static struct region_agg *made[N];
	char name[32];

	CHECK(registry_region_find(p, "parse") == NULL); /* no index yet */
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "region-%d", i);
		made[i] = registry_process_region(&reg, p, name);
		CHECK(made[i]);
		CHECK(!strcmp(made[i]->name, name));
		/* Asking again, right away and after the index grew, gives the same region. */
		CHECK(registry_process_region(&reg, p, name) == made[i]);
		CHECK(registry_region_find(p, name) == made[i]);
	}
	CHECK(p->n_regions == N);
	CHECK(reg.n_regions == N);
	CHECK(p->index.cap >= 2 * N);
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "region-%d", i);
		CHECK(registry_region_find(p, name) == made[i]);
		CHECK(p->regions[i] == made[i]); /* in the order they came */
	}
	/* Names that are not there, including prefixes and extensions of ones that are. */
	CHECK(registry_region_find(p, "region-") == NULL);
	CHECK(registry_region_find(p, "region-50000") == NULL);
	CHECK(registry_region_find(p, "region-1x") == NULL);
	CHECK(registry_region_find(p, "") == NULL);
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
	struct region_agg *a = registry_process_region(&reg, p, "parse");
	struct region_agg *b = registry_process_region(&reg, q, "parse");
	CHECK(a && b && a != b);
	CHECK(registry_region_find(p, "parse") == a);
	CHECK(registry_region_find(q, "parse") == b);
	CHECK(registry_region_find(q, "other") == NULL);
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
	CHECK(registry_process_region(&reg, p, "a"));
	CHECK(registry_room(&reg, q));
	CHECK(registry_process_region(&reg, q, "b"));
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
	CHECK(registry_first(&reg) == q);
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
		CHECK(registry_process_event_room(p, one, 1) == 0);
		CHECK(registry_process_event_id(p, name) == i);
	}
	snprintf(name, sizeof(name), "event-%d", 3);
	CHECK(registry_process_event_room(p, one, 1) == 0); /* already counted */
	snprintf(name, sizeof(name), "event-%d", PROCESS_MAX_EVENTS);
	CHECK(registry_process_event_room(p, one, 1) == -EMFILE);
	/* The same pid and start under another uid (an exec'd setuid program) is apart. */
	struct process *q = registry_process(&reg, getpid(), 0);
	CHECK(q && q != p && q->uid == 0 && p->uid == 65534);
	CHECK(registry_process(&reg, getpid(), 65534) == p);
	registry_free(&reg);
}

/* Region @name of retired aggregate @a, and its page faults. */
static const struct stats *
retired_faults(struct process *a, const char *name, uint64_t *count)
{
	struct region_agg *r = registry_region_find(a, name);
	CHECK(r);
	*count = r->count;
	for (size_t i = 0; i < a->n_events && i < r->n_ev; i++)
		if (!strcmp(a->events[i], "page-faults"))
			return &r->ev[i].st;
	CHECK(!"no page-faults in the retired region");
	return NULL;
}

/* A registry whose processes are forgotten as they end (--keep-exited 0), their figures kept
 * in retired aggregates (100 regions), its users' budgets under @daemon (no limit yet).
 * Return: uid 1000's share. */
static struct user_share *
retiring_registry(struct registry *reg, struct users *users, struct stats_budget *daemon)
{
	*daemon = (struct stats_budget){.limit = SIZE_MAX};
	*users = (struct users){.parent = daemon};
	*reg = (struct registry){.max_ended = 0, .users = users};
	CHECK(registry_retire_enable(reg, 100) == 0);
	struct user_share *u = users_get(users, 1000);
	CHECK(u);
	return u;
}

/* A forgotten process's figures join the retired aggregate of its (uid, comm), exactly
 * (runs, sums, min, histogram), however many come and go; the histogram memory they leave
 * pays for the blocks the aggregate needs, even at the user's budget. */
static void
test_retired_fold(void)
{
	struct stats_budget daemon;
	struct users users;
	struct registry reg;
	struct user_share *u = retiring_registry(&reg, &users, &daemon);
	CHECK(reg.max_retired == 100 && reg.max_retired_per_uid == 25);

	/* Processes of one program and uid, one after the other, each forgotten as it ends
	 * (--keep-exited 0; the same pid: each is a new process once the one before is
	 * gone). */
	uint64_t runs = 0, faults = 0;
	struct process *a = NULL;
	for (unsigned k = 1; k <= 5; k++) {
		struct process *p = registry_process(&reg, getpid(), 1000);
		CHECK(p && p->retired);
		CHECK(!a || p->retired == a);
		a = p->retired;
		CHECK(a->pid == 0 && a->uid == 1000 && !strcmp(a->comm, p->comm));
		CHECK(a->members == 1);
		/* a new power of two each time */
		pmc_test_add_runs_to(&reg, p, "r", k, 1u << k, &u->hist);
		runs += k;
		faults += (uint64_t)k << k;
		if (k == 5)
			u->hist.limit = u->hist.used; /* not a byte to spare */
		registry_process_ended(&reg, p, k);
		CHECK(reg.n_procs == 0 && reg.evicted == k && a->members == 0);
	}
	CHECK(reg.n_retired == 1 && a->n_regions == 1 && reg.n_regions == 0);
	CHECK(reg.retired_dropped == 0 && u->hist.missed == 0);

	uint64_t count;
	const struct stats *st = retired_faults(a, "r", &count);
	CHECK(count == runs && st->count == runs && st->sum == faults);
	CHECK(st->min == 2 && st->max == 32);
	for (unsigned k = 1; k <= 5; k++)
		CHECK(stats_hist_get(st, stats_bucket(1u << k)) == k);
	const struct region_agg *r = registry_region_find(a, "r");
	CHECK(r->wall.count == runs && r->wall.sum == 100 * runs);
	/* The next process of the program joins the same aggregate. */
	struct process *q = registry_process(&reg, getpid(), 1000);
	CHECK(q && q->retired == a && a->members == 1);
	/* Its blocks are the user's, all given back with the registry. */
	CHECK(u->hist.used > 0 && u->hist.used == daemon.used);
	registry_free(&reg);
	CHECK(registry_first_retired(&reg) == NULL && reg.n_retired == 0);
	CHECK(u->hist.used == 0 && daemon.used == 0);
	users_free(&users);
}

/* Frees @reg, then @users: every histogram block given back, @u's and the daemon's. */
static void
free_given_back(struct registry *reg, struct users *users, struct user_share *u)
{
	registry_free(reg);
	CHECK(u->hist.used == 0 && u->hist.parent->used == 0);
	users_free(users);
}

/* test_retired_fold() counted through a call path node, which holds the region's figures
 * (struct region_agg's via), at a budget capped for the user and the daemon: what a forgotten
 * process leaves, its node's memory, pays for what its retired aggregate needs, and none of
 * its figures are lost. */
static void
test_retired_fold_shared(void)
{
	struct stats_budget daemon;
	struct users users;
	struct registry reg;
	struct user_share *u = retiring_registry(&reg, &users, &daemon);
	uint64_t runs = 0, faults = 0;
	struct process *a = NULL;
	for (unsigned k = 1; k <= 5; k++) {
		struct process *p = registry_process(&reg, getpid(), 1000);
		CHECK(p && p->retired);
		a = p->retired;
		/* a new power of 1024 each time: a block of its own */
		pmc_test_add_path_runs_to(&reg, p, "r", k, UINT64_C(1) << (10 * k), &u->hist);
		CHECK(registry_process_region(&reg, p, "r")->via != NULL);
		runs += k;
		faults += (uint64_t)k << (10 * k);
		if (k == 5) { /* not a byte to spare, for the user nor the daemon */
			u->hist.limit = u->hist.used;
			daemon.limit = daemon.used;
		}
		registry_process_ended(&reg, p, k);
		CHECK(reg.n_procs == 0 && a->members == 0);
	}
	CHECK(reg.retired_dropped == 0 && u->hist.missed == 0);
	uint64_t count;
	const struct stats *st = retired_faults(a, "r", &count);
	CHECK(count == runs && st->count == runs && st->sum == faults);
	for (unsigned k = 1; k <= 5; k++)
		CHECK(stats_hist_get(st, stats_bucket(UINT64_C(1) << (10 * k))) == k);
	/* What the aggregate holds is all the user holds. */
	const struct region_agg *r = registry_region_find(a, "r");
	size_t held = stats_memory(&r->wall);
	for (size_t j = 0; j < r->n_ev; j++)
		held += stats_memory(&r->ev[j].st);
	CHECK(u->hist.used == held && daemon.used == held);
	free_given_back(&reg, &users, u);
}

/* A region that shares its node's figures gets its own when the call path tree is cleared
 * without it (it takes the node's, nothing charged), or when it counts a sample of no node
 * (it takes the node's, the node gets a copy): at a budget with no room left, the region's
 * figures and buckets stay whole (they never go down: /metrics), what the node's copy had no
 * room for is missed in the node alone, counted. */
static void
test_unshare_budget(void)
{
	struct stats_budget daemon = {.limit = SIZE_MAX};
	struct users users = {.parent = &daemon};
	struct registry reg = {.users = &users};
	struct user_share *u = users_get(&users, 1000);
	struct process *p = registry_process(&reg, getpid(), 1000);
	CHECK(u && p);
	pmc_test_add_path_runs_to(&reg, p, "a", 3, 1000, &u->hist);
	pmc_test_add_path_runs_to(&reg, p, "b", 2, 5000, &u->hist);
	struct region_agg *a = registry_region_find(p, "a"), *b = registry_region_find(p, "b");
	CHECK(a->via && b->via && stats_memory(&a->wall) == 0);
	size_t shared = u->hist.used;
	u->hist.limit = u->hist.used;
	daemon.limit = daemon.used;
	/* "b" cleared, with the whole tree: "a" keeps its figures, its own now. */
	CHECK(registry_reset(&reg, 0, "b") == 1);
	CHECK(!a->via && !b->via);
	const struct stats *st = registry_region_stats(a, 0);
	CHECK(a->wall.count == 3 && st->count == 3 && st->sum == 3000);
	CHECK(stats_hist_get(st, stats_bucket(1000)) == 3 && u->hist.missed == 0);
	CHECK(u->hist.used == shared && daemon.used == shared);
	/* "d" through its node, then, with no room left, a sample of no node. */
	u->hist.limit = daemon.limit = SIZE_MAX;
	pmc_test_add_path_runs_to(&reg, p, "d", 2, 7, &u->hist);
	struct region_agg *d = registry_region_find(p, "d"), *dn = registry_path_find(p, 0, "d");
	CHECK(d->via == dn && u->hist.missed == 0);
	u->hist.limit = u->hist.used;
	daemon.limit = daemon.used;
	pmc_test_ingest_runs_to(&reg, p, "d", 1, 7, &u->hist, false);
	st = registry_region_stats(d, 0);
	CHECK(!d->via && st->count == 3 && st->sum == 21 &&
	      stats_hist_get(st, stats_bucket(7)) == 3);
	CHECK(dn->ev[0].st.count == 2 && dn->ev[0].st.sum == 14 && u->hist.missed > 0);
	CHECK(stats_hist_get(&dn->ev[0].st, stats_bucket(7)) == 0);
	CHECK(u->hist.used <= u->hist.limit && u->hist.used == daemon.used);
	free_given_back(&reg, &users, u);
}

/* Evicted processes are counted by run tag per uid: another uid's evictions under more tags
 * than a table holds never push a tag out, and its processes that say the same tag never
 * add to it (issue 31, item 6). */
static void
test_run_tags_per_uid(void)
{
	struct stats_budget daemon = {.limit = SIZE_MAX};
	struct users users = {.parent = &daemon};
	struct registry reg = {.max_ended = 0, .users = &users};
	/* uid 1000's run "mine": 3 processes evicted as they end (--keep-exited 0). */
	for (int k = 0; k < 3; k++) {
		struct process *p = registry_process(&reg, getpid(), 1000);
		CHECK(p);
		snprintf(p->run_tag, sizeof(p->run_tag), "mine");
		registry_process_ended(&reg, p, 1);
	}
	CHECK_EQ_U64(registry_tag_evicted(&reg, 1000, "mine"), 3);
	/* uid 1001: 5 processes saying "mine", then USERS_RUN_TAGS + 6 tags of its own. */
	for (int k = 0; k < 5 + USERS_RUN_TAGS + 6; k++) {
		struct process *p = registry_process(&reg, getpid(), 1001);
		CHECK(p);
		if (k < 5)
			snprintf(p->run_tag, sizeof(p->run_tag), "mine");
		else
			snprintf(p->run_tag, sizeof(p->run_tag), "t%d", k);
		registry_process_ended(&reg, p, 1);
	}
	CHECK_EQ_U64(registry_tag_evicted(&reg, 1000, "mine"), 3);
	/* Its own "mine" is its own, and the oldest of its tags went first. */
	CHECK_EQ_U64(registry_tag_evicted(&reg, 1001, "mine"), 0);
	CHECK_EQ_U64(registry_tag_evicted(&reg, 1001, "t5"), 0);
	CHECK_EQ_U64(registry_tag_evicted(&reg, 1001, "t74"), 1);
	CHECK_EQ_U64(registry_tag_evicted(&reg, 1002, "mine"), 0);
	CHECK_EQ_U64(registry_tag_evicted(&reg, 1000, ""), 0);
	registry_free(&reg);
	users_free(&users);
}

/* Per cgroup (the metrics page's container label): one retired aggregate per (uid, comm,
 * cgroup), which a process of that cgroup joins; a file may hold several of one (uid, comm),
 * never one (uid, comm, cgroup) twice. */
static void
test_retired_by_cgroup(void)
{
	struct registry reg = {.max_ended = 0, .retired_by_cgroup = true};
	struct process *other, *mine, *none, *dup;
	char comm[17], cg[CGROUP_PATH_MAX];
	uint64_t start;

	CHECK(registry_process_read_start(getpid(), &start, comm) == 0);
	if (cgroup_read_path(getpid(), cg) < 0)
		cg[0] = '\0';
	CHECK(registry_retired_load(&reg, 1000, comm, "/elsewhere.slice/x.scope", &other) == 0);
	CHECK(registry_retired_load(&reg, 1000, comm, cg, &mine) == 0);
	CHECK(registry_retired_load(&reg, 1000, comm, "/elsewhere.slice/x.scope", &dup) == -EEXIST);
	CHECK(!cg[0] || registry_retired_load(&reg, 1000, comm, NULL, &none) == 0);
	CHECK(registry_retire_enable(&reg, 100) == 0);
	struct process *p = registry_process(&reg, getpid(), 1000);
	CHECK(p && p->retired == mine && mine->members == 1 && other->members == 0);
	CHECK(!strcmp(other->cgroup, "/elsewhere.slice/x.scope"));
	registry_free(&reg);

	/* Not per cgroup: the first of its (uid, comm), whatever its cgroup. */
	struct registry flat = {.max_ended = 0};
	CHECK(registry_retired_load(&flat, 1000, comm, "/elsewhere.slice/x.scope", &other) == 0);
	CHECK(registry_retire_enable(&flat, 100) == 0);
	p = registry_process(&flat, getpid(), 1000);
	CHECK(p && p->retired == other);
	registry_free(&flat);
}

/* Without registry_retire_enable() nothing is kept: no aggregate at all. */
static void
test_retired_off(void)
{
	struct registry reg = {.max_ended = 0};
	struct process *p = registry_process(&reg, getpid(), 1000);
	CHECK(p && !p->retired);
	pmc_test_add_runs(&reg, p, "r", 3, 1);
	registry_process_ended(&reg, p, 1);
	CHECK(reg.evicted == 1 && !registry_first_retired(&reg) && reg.n_retired == 0 &&
	      reg.retired_dropped == 0);
	registry_free(&reg);
}

/* A reset of one process keeps its figures in the retired aggregate (the page does not go
 * down); a reset of every process clears the aggregates' too (the page's series restart). */
static void
test_retired_reset(void)
{
	struct registry reg = {.max_ended = 10};
	CHECK(registry_retire_enable(&reg, 100) == 0);
	struct process *p = registry_process(&reg, getpid(), 1000);
	CHECK(p && p->retired);
	struct process *a = p->retired;
	pmc_test_add_runs(&reg, p, "r", 4, 3);
	pmc_test_add_runs(&reg, p, "s", 2, 3);
	CHECK(registry_reset(&reg, p->pid, "r") == 1);
	CHECK(registry_region_find(p, "r")->count == 0 && registry_region_find(p, "s")->count == 2);
	uint64_t count;
	const struct stats *st = retired_faults(a, "r", &count);
	CHECK(count == 4 && st->sum == 12);
	CHECK(!registry_region_find(a, "s")); /* not reset: still the process's */
	/* Runs after the reset add to the process again; a second reset adds them too. */
	pmc_test_add_runs(&reg, p, "r", 1, 3);
	CHECK(registry_reset(&reg, p->pid, NULL) == 2);
	st = retired_faults(a, "r", &count);
	CHECK(count == 5 && st->sum == 15);
	st = retired_faults(a, "s", &count);
	CHECK(count == 2 && st->sum == 6);
	/* A pid the registry does not hold: nothing moves. */
	CHECK(registry_reset(&reg, 1 << 23, NULL) == 0);
	CHECK(reg.n_retired == 2);
	/* Region "r" of every process: the aggregate's too, and only that region. */
	pmc_test_add_runs(&reg, p, "r", 1, 3);
	CHECK(registry_reset(&reg, 0, "r") == 1);
	CHECK(registry_region_find(p, "r")->count == 0 && registry_region_find(a, "r")->count == 0);
	CHECK(registry_region_find(a, "r")->ev[0].st.count == 0 &&
	      registry_region_find(a, "s")->count == 2);
	/* Everything. The regions stay known, as a process's do. */
	CHECK(registry_reset(&reg, 0, NULL) == 2);
	CHECK(registry_region_find(a, "s")->count == 0 && reg.n_retired == 2);
	registry_free(&reg);
}

/* A child of ours whose comm is @name, waiting to be killed. */
static pid_t
named_child(const char *name)
{
	int fds[2];
	char c;
	CHECK(pipe(fds) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_NAME, name);
		if (write(fds[1], "x", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	CHECK(read(fds[0], &c, 1) == 1);
	close(fds[0]);
	close(fds[1]);
	return pid;
}

static void
reap(pid_t pid)
{
	kill(pid, SIGKILL);
	CHECK(waitpid(pid, NULL, 0) == pid);
}

/* Forgets at once a new process @pid of @uid with @n regions "@prefix0", "@prefix1", ... */
static void
run_and_forget(struct registry *reg, pid_t pid, uid_t uid, const char *prefix, unsigned n)
{
	struct process *p = registry_process(reg, pid, uid);
	char name[32];
	CHECK(p);
	for (unsigned i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "%s%u", prefix, i);
		pmc_test_add_runs(reg, p, name, 1, 1);
	}
	static uint64_t now;
	registry_process_ended(reg, p, ++now);
}

/* The bound: a uid holds at most a quarter of max_retired regions. At its share, its own
 * aggregate that figures joined the longest ago makes room, never another user's; when none
 * can, the new region's figures are dropped; either is counted. */
static void
test_retired_bound(void)
{
	pid_t other = named_child("pmc-other-comm");
	struct registry reg = {.max_ended = 0};
	CHECK(registry_retire_enable(&reg, 8) == 0);
	CHECK(reg.max_retired_per_uid == 2);

	/* uid 1000, program A: 2 regions, its share. */
	run_and_forget(&reg, getpid(), 1000, "x", 2);
	CHECK(reg.n_retired == 2 && reg.retired_dropped == 0);
	struct process *a = registry_first_retired(&reg);
	CHECK(a && a->uid == 1000 && a->n_regions == 2);
	/* Its known regions join at no cost. */
	run_and_forget(&reg, getpid(), 1000, "x", 2);
	CHECK(reg.n_retired == 2 && reg.retired_dropped == 0);
	uint64_t count;
	retired_faults(a, "x1", &count);
	CHECK(count == 2);
	/* uid 2000, program A: its own share, uid 1000's untouched. */
	run_and_forget(&reg, getpid(), 2000, "w", 2);
	CHECK(reg.n_retired == 4 && reg.retired_dropped == 0 && a->n_regions == 2);
	/* A third region of uid 2000's only aggregate: no room, dropped and counted. */
	run_and_forget(&reg, getpid(), 2000, "w", 3);
	CHECK(reg.n_retired == 4 && reg.retired_dropped == 1 && a->n_regions == 2);
	/* uid 1000, program B: A's figures joined the longest ago; they make room. */
	run_and_forget(&reg, other, 1000, "y", 1);
	CHECK(reg.retired_dropped == 3 && reg.n_retired == 3);
	/* A's aggregate is gone (no process of A is left); B's holds its region. */
	unsigned n = 0;
	for (struct process *r = registry_first_retired(&reg); r; r = registry_process_next(r), n++)
		CHECK(r->uid == 2000 || (!strcmp(r->comm, "pmc-other-comm") && r->n_regions == 1 &&
		                         registry_region_find(r, "y0")));
	CHECK(n == 2);
	/* Every uid at its share: the daemon's bound. uids 3000 and 4000 fill it... */
	run_and_forget(&reg, getpid(), 3000, "v", 1);
	run_and_forget(&reg, getpid(), 4000, "v", 1);
	CHECK(reg.n_retired == 5 && reg.retired_dropped == 3);
	reg.max_retired = 5;
	/* ...and uid 5000 may not take anyone's place. */
	run_and_forget(&reg, getpid(), 5000, "v", 1);
	CHECK(reg.n_retired == 5 && reg.retired_dropped == 4);
	registry_free(&reg);
	reap(other);
}

/* registry_process_load(): a process of a state file, made by the registry as
 * registry_process() makes a live one: ended, counted, found again by a client of the same
 * process, and the first to go for room. */
static void
test_process_load(void)
{
	struct registry reg = {.max_ended = 1};
	struct process *saved, *old, *live;
	char comm[17];
	uint64_t start;

	CHECK(registry_process_read_start(getpid(), &start, comm) == 0);
	/* A process saved before a reboot (start UINT64_MAX) matches no live one. */
	CHECK(registry_process_load(&reg,
	                            &(struct process_saved){.pid = getpid(),
	                                                    .uid = getuid(),
	                                                    .start = UINT64_MAX,
	                                                    .comm = "0123456789abcdefXYZ",
	                                                    .cgroup = "/a.slice/b.scope",
	                                                    .ns_pid = -3,
	                                                    .received = 77},
	                            &old) == 0);
	CHECK(old->ended && !old->connections && old->received == 77 && old->ns_pid == 0);
	CHECK(!strcmp(old->comm, "0123456789abcdef") && !strcmp(old->cgroup, "/a.slice/b.scope"));
	CHECK(!old->retired && old->n_regions == 0);
	CHECK(reg.n_procs == 1 && registry_first(&reg) == old);
	CHECK(registry_process_load(&reg,
	                            &(struct process_saved){.pid = getpid(),
	                                                    .uid = getuid(),
	                                                    .start = start,
	                                                    .comm = comm,
	                                                    .ns_pid = 9},
	                            &saved) == 0);
	CHECK(saved != old && saved->ns_pid == 9 && !saved->cgroup);
	CHECK(reg.n_procs == 2 && registry_first(&reg) == saved &&
	      registry_process_next(saved) == old);
	/* This process, connecting again: its saved figures, connected now. */
	live = registry_process(&reg, getpid(), getuid());
	CHECK(live == saved && !saved->ended && reg.n_procs == 2);
	registry_free(&reg);
	CHECK(!registry_first(&reg) && reg.n_procs == 0);
}

int
main(void)
{
	PMC_TEST_RUN(test_regions_by_name);
	PMC_TEST_RUN(test_processes_apart);
	PMC_TEST_RUN(test_room);
	PMC_TEST_RUN(test_events_and_owners);
	PMC_TEST_RUN(test_retired_fold);
	PMC_TEST_RUN(test_retired_fold_shared);
	PMC_TEST_RUN(test_unshare_budget);
	PMC_TEST_RUN(test_run_tags_per_uid);
	PMC_TEST_RUN(test_retired_by_cgroup);
	PMC_TEST_RUN(test_retired_off);
	PMC_TEST_RUN(test_retired_reset);
	PMC_TEST_RUN(test_retired_bound);
	PMC_TEST_RUN(test_process_load);
	return 0;
}
