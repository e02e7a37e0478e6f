/* Unit tests for daemon/model/state.c: a save and load round trip; a state file written before
 * a reboot, whose processes no new process may match; a directory or files that another
 * user could have put in the daemon's way (refused, nothing followed or overwritten); the
 * size limit, the same on both sides; the periodic save in a child process (a snapshot,
 * its result, the time the caller's loop pauses); hostile state files (no crash, no leak);
 * the retired figures of /metrics: saved and restored, with or without --metrics, within
 * their bound and their users' histogram memory; files of before them; a process's call
 * path tree and untracked counts: saved and restored, charged to its user's histogram
 * memory, hostile trees refused, files of before it; the checksum: every bit flip and
 * truncation of a small file refused, such a file moved aside, files of before it loaded.
 *
 * Also a tool for the integration tests and the fuzzer's seeds:
 *   test-state big FILE PROCESSES REGIONS   write a big state file; print (key=value) how
 *                                           long the save takes in the caller (before),
 *                                           how long the caller pauses to fork the child
 *                                           that saves (now: best of 2), and the child's
 *                                           whole save
 *   test-state seeds DIR                    write a few valid state files (fuzz seeds)
 *   test-state same-files PID1 PID2         prints "shared" when the two processes share
 *                                           one fd table (kcmp KCMP_FILES), else "apart" */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cgroup.h"
#include "common/util.h"
#include "model/model.h"
#include "model/state.h"
#include "pmc-test-registry.h"
#include "pmc-test.h"
#include "pmc.pb-c.h"

static char dir[64], path[128], tmp_path[160];

static void
fill(struct model *m)
{
	struct process *p = registry_process(&m->reg, getpid(), getuid());
	CHECK(p);
	struct region_agg *r = registry_process_region(&m->reg, p, "parse");
	CHECK(r);
	int id = registry_process_event_id(p, "page-faults");
	CHECK(id == 0);
	struct event_agg *e = registry_region_event(r, 0);
	CHECK(e);
	for (uint64_t v = 1; v <= 100; v++) {
		CHECK(stats_add(&e->st, v, NULL) == 0);
		CHECK(stats_add(&r->wall, 1000 * v, NULL) == 0);
		r->count++;
	}
	p->received = 100;
	m->samples = 100;
}

/* The bytes of @p (at most 64 KiB), or -1 bytes when it cannot be read. */
static ssize_t
slurp(const char *p, uint8_t *buf, size_t cap)
{
	int fd = open(p, O_RDONLY | O_NONBLOCK);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, cap);
	close(fd);
	return n;
}

static void
spit(const char *p, const void *buf, size_t len, mode_t mode)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, mode);
	CHECK(fd >= 0 && write(fd, buf, len) == (ssize_t)len);
	CHECK(fchmod(fd, mode) == 0);
	close(fd);
}

/* @buf (a file state_encode() wrote) as a file of before checksums: its fields packed again
 * without the frame (fields 14 and 15). Return: malloc()ed, its length in *@n. */
static uint8_t *
unframe(const uint8_t *buf, size_t len, size_t *n)
{
	Pmc__State *st = pmc__state__unpack(NULL, len, buf);
	CHECK(st && !strcmp(st->checksum_kind, "crc32"));
	char *kind = st->checksum_kind;
	st->checksum_kind = "";
	st->checksum = 0;
	uint8_t *out = malloc(len);
	CHECK(out);
	*n = pmc__state__pack(st, out);
	CHECK(*n == len - 12 && out[0] == 0x08);
	st->checksum_kind = kind;
	pmc__state__free_unpacked(st, NULL);
	return out;
}

static void
test_state_round_trip(void)
{
	struct model a = {0}, b = {0};
	fill(&a);
	CHECK(state_save(&a, path) == 0);
	struct stat sb;
	CHECK(stat(path, &sb) == 0 && sb.st_uid == geteuid() && (sb.st_mode & 0777) == 0600);
	CHECK(state_load(&b, path) == 0);
	CHECK(b.samples == 100);
	struct process *p = registry_first(&b.reg);
	CHECK(p && p->pid == getpid() && p->received == 100 && p->n_regions == 1);
	CHECK(p->start == registry_first(&a.reg)->start);
	/* This very process reconnecting finds its figures again. */
	CHECK(registry_process(&b.reg, getpid(), getuid()) == p);
	struct region_agg *r = p->regions[0];
	CHECK(!strcmp(r->name, "parse") && r->count == 100);
	CHECK(r->ev[0].st.sum == 5050 && r->ev[0].st.min == 1 && r->ev[0].st.max == 100);
	CHECK(stats_quantile(&r->ev[0].st, 0.5) ==
	      stats_quantile(&registry_first(&a.reg)->regions[0]->ev[0].st, 0.5));
	registry_free(&a.reg);
	registry_free(&b.reg);
}

static void
test_state_from_another_boot(void)
{
	struct model a = {0}, b = {0};
	fill(&a);
	CHECK(state_save(&a, path) == 0);
	/* Rewrite the file as if saved during another boot. */
	uint8_t buf[1 << 16];
	ssize_t n = slurp(path, buf, sizeof(buf));
	CHECK(n > 0);
	Pmc__State *st = pmc__state__unpack(NULL, (size_t)n, buf);
	CHECK(st && *st->boot_id);
	char *saved = st->boot_id;
	st->boot_id = "00000000-0000-0000-0000-000000000000";
	size_t len = pmc__state__pack(st, buf);
	st->boot_id = saved;
	pmc__state__free_unpacked(st, NULL);
	spit(path, buf, len, 0600);

	CHECK(state_load(&b, path) == 0);
	CHECK(registry_first(&b.reg) &&
	      registry_first(&b.reg)->regions[0]->count == 100); /* figures kept */
	/* ... but the same (pid, start time) is now another process: a new record. */
	struct process *p = registry_process(&b.reg, getpid(), getuid());
	CHECK(p && p != registry_process_next(registry_first(&b.reg)) && p->n_regions == 0);
	CHECK(b.reg.n_procs == 2);
	registry_free(&a.reg);
	registry_free(&b.reg);
}

/* Region @name of @p with @n samples of page-faults (1..n), its wall time and a scaled one. */
static void
add_region(struct registry *reg, struct process *p, const char *name, uint64_t n)
{
	struct region_agg *r = registry_process_region(reg, p, name);
	CHECK(r);
	int id = registry_process_event_id(p, "page-faults");
	CHECK(id >= 0);
	struct event_agg *e = registry_region_event(r, (size_t)id);
	CHECK(e);
	for (uint64_t v = 1; v <= n; v++) {
		CHECK(stats_add(&e->st, v, NULL) == 0);
		CHECK(stats_add(&r->wall, 1000 * v, NULL) == 0);
		r->count++;
	}
	e->scaled++;
	e->ratio_sum += 0.5;
}

/* Uids of the retired figures: not this test's, whoever runs it. */
#define UID_A 70000
#define UID_B 70001

/* Retired figures, as --metrics keeps them: the processes of uid UID_A (region "parse",
 * 100 samples) and UID_B ("parse" and "load") forgotten (--keep-exited 0); then fill()'s
 * live process. */
static void
fill_retired(struct model *m)
{
	CHECK(registry_retire_enable(&m->reg, 100) == 0);
	m->reg.max_ended = 0;
	for (uid_t uid = UID_A; uid <= UID_B; uid++) {
		struct process *p = registry_process(&m->reg, getpid(), uid);
		CHECK(p);
		add_region(&m->reg, p, "parse", 100);
		if (uid == UID_B)
			add_region(&m->reg, p, "load", 50);
		registry_process_ended(&m->reg, p, 5);
	}
	CHECK(m->reg.evicted == 2 && m->reg.n_retired == 3 && m->reg.n_procs == 0);
	m->reg.max_ended = 10;
	fill(m);
	m->rejected = 3;
	m->reg.retired_dropped = 4;
}

static struct process *
retired_of(struct registry *reg, uid_t uid)
{
	struct process *a;
	pmc_list_for_each(a, &reg->retired, link)
		if (a->uid == uid && a->n_regions)
			return a;
	return NULL;
}

/* @x and @y hold the same figures. */
static void
same_region(const struct process *p, const struct region_agg *x, const struct process *q,
            const struct region_agg *y)
{
	CHECK(!strcmp(x->name, y->name) && x->count == y->count);
	const struct stats *xw = registry_region_wall(x), *yw = registry_region_wall(y);
	CHECK(xw->count == yw->count && xw->sum == yw->sum);
	CHECK(stats_quantile(xw, 0.9) == stats_quantile(yw, 0.9));
	size_t n = 0;
	for (size_t i = 0; i < x->n_ev; i++) {
		if (!x->seen[i])
			continue;
		n++;
		size_t j = 0;
		while (j < q->n_events && strcmp(q->events[j], p->events[i]))
			j++;
		CHECK(j < y->n_ev && y->seen[j]);
		const struct event_agg *e = &x->ev[i], *f = &y->ev[j];
		const struct stats *es = registry_region_stats(x, i),
		                   *fs = registry_region_stats(y, j);
		CHECK(es->count == fs->count && es->sum == fs->sum);
		CHECK(es->min == fs->min && es->max == fs->max);
		CHECK(stats_quantile(es, 0.5) == stats_quantile(fs, 0.5));
		CHECK(e->scaled == f->scaled && e->ratio_sum == f->ratio_sum);
	}
	for (size_t j = 0; j < y->n_ev; j++)
		n -= y->seen[j];
	CHECK(n == 0);
}

/* @b holds the retired figures of @a, each aggregate's regions the same. */
static void
same_retired(struct registry *a, struct registry *b)
{
	for (uid_t uid = UID_A; uid <= UID_B; uid++) {
		struct process *x = retired_of(a, uid), *y = retired_of(b, uid);
		CHECK(x && y && y->pid == 0 && !strcmp(x->comm, y->comm));
		CHECK(x->n_regions == y->n_regions);
		for (size_t i = 0; i < x->n_regions; i++) {
			struct region_agg *r = registry_region_find(y, x->regions[i]->name);
			CHECK(r);
			same_region(x, x->regions[i], y, r);
		}
	}
}

/* The retired figures (--metrics) are saved and come back, as do the totals on /metrics;
 * loaded without --metrics they are kept and saved again; once retired figures are kept
 * (registry_retire_enable()), new processes' figures join them. */
static void
test_state_retired_round_trip(void)
{
	struct model a = {0}, b = {0};
	fill_retired(&a);
	CHECK(state_save(&a, path) == 0);
	CHECK(state_load(&b, path) == 0);
	CHECK(b.reg.max_retired == 0); /* as the daemon: --metrics comes after the state */
	CHECK(b.reg.n_procs == 1 && b.reg.n_regions == 1 && b.reg.n_retired == 3);
	CHECK(b.reg.evicted == 2 && b.reg.retired_dropped == 4 && b.rejected == 3);
	CHECK(b.samples == 100);
	same_retired(&a.reg, &b.reg);
	/* Saved again as they came: the same bytes. */
	uint8_t *ea, *eb;
	size_t na, nb;
	CHECK(state_encode(&a, 7, &ea, &na) == 0 && state_encode(&b, 7, &eb, &nb) == 0);
	CHECK(na == nb && !memcmp(ea, eb, na));
	free(ea);
	free(eb);

	/* --metrics: every series continues from what it held. A process of uid UID_A's
	 * program joins the restored aggregate when it is forgotten. */
	CHECK(registry_retire_enable(&b.reg, 100) == 0);
	CHECK(b.reg.n_retired == 3 && b.reg.retired_dropped == 4);
	struct process *ra = retired_of(&b.reg, UID_A);
	struct process *p = registry_process(&b.reg, getpid(), UID_A);
	CHECK(p && p->retired == ra && ra->members == 1);
	add_region(&b.reg, p, "parse", 10);
	b.reg.max_ended = 0;
	/* Both go: the restored process (ended before) and this one. */
	registry_process_ended(&b.reg, p, 9);
	CHECK(b.reg.evicted == 4 && b.reg.n_procs == 0 && b.reg.n_retired == 4);
	struct process *r0 = retired_of(&b.reg, getuid());
	CHECK(r0 && r0->n_regions == 1 && r0->regions[0]->count == 100);
	CHECK(retired_of(&b.reg, UID_A) == ra && ra->members == 0);
	CHECK(ra->n_regions == 1 && ra->regions[0]->count == 110);
	CHECK(ra->regions[0]->ev[0].st.sum == 5050 + 55 && ra->regions[0]->ev[0].scaled == 2);
	CHECK(ra->folded > retired_of(&b.reg, UID_B)->folded);
	registry_free(&a.reg);
	registry_free(&b.reg);
}

/* A file of before (no retired figures, no fields 9 to 12) still loads, with or without
 * --metrics; its processes get their aggregates. */
static void
test_state_retired_old_file(void)
{
	struct model a = {0};
	fill(&a);
	uint8_t *buf;
	size_t len;
	uint8_t *framed;
	size_t framed_len;
	CHECK(state_encode(&a, 7, &framed, &framed_len) == 0);
	/* A file of before the checksum too (no fields 14 and 15). */
	buf = unframe(framed, framed_len, &len);
	free(framed);
	Pmc__State *st = pmc__state__unpack(NULL, len, buf);
	CHECK(st && st->n_retired == 0 && !st->evicted && !st->retired_dropped && !st->rejected);
	pmc__state__free_unpacked(st, NULL);
	/* Field 9 or above in the file: a tag byte of 0x48 or more at the top level. */
	for (size_t i = 0; i < len;) {
		uint8_t tag = buf[i++];
		CHECK((tag >> 3) >= 1 && (tag >> 3) <= 8);
		uint64_t v = 0;
		for (unsigned sh = 0; i < len; sh += 7) {
			v |= (uint64_t)(buf[i] & 0x7f) << sh;
			if (!(buf[i++] & 0x80))
				break;
		}
		if ((tag & 7) == 2)
			i += v;
	}
	for (int metrics = 0; metrics < 2; metrics++) {
		struct model b = {0};
		if (metrics)
			CHECK(registry_retire_enable(&b.reg, 100) == 0);
		CHECK(state_load_buffer(&b, buf, len) == 0);
		CHECK(b.reg.n_procs == 1 && !registry_first_retired(&b.reg) &&
		      b.reg.n_retired == 0);
		CHECK(registry_retire_enable(&b.reg, 100) == 0);
		CHECK(registry_first(&b.reg)->retired &&
		      registry_first(&b.reg)->retired->members == 1);
		CHECK(b.reg.n_retired == 0 && b.reg.retired_dropped == 0);
		registry_free(&b.reg);
	}
	free(buf);
	registry_free(&a.reg);
}

/* Over the bound of a smaller --metrics-max-series: each uid keeps the aggregates that
 * figures joined last, up to its share, then all of them up to the bound; the rest is
 * counted in retired_dropped. The same whether --metrics comes before the load or after. */
static void
test_state_retired_bound(void)
{
	struct model a = {0};
	fill_retired(&a);
	CHECK(state_save(&a, path) == 0);
	for (int before = 0; before < 2; before++) {
		struct model b = {0};
		/* 4 regions, 1 per uid: UID_B's aggregate of 2 goes. */
		if (before)
			CHECK(registry_retire_enable(&b.reg, 4) == 0);
		CHECK(state_load(&b, path) == 0);
		if (!before) {
			CHECK(b.reg.n_retired == 3);
			CHECK(registry_retire_enable(&b.reg, 4) == 0);
		}
		CHECK(b.reg.n_retired == 1 && b.reg.retired_dropped == 4 + 2);
		CHECK(retired_of(&b.reg, UID_A) && !retired_of(&b.reg, UID_B));
		CHECK(b.reg.n_procs == 1 && b.reg.n_regions == 1);
		registry_free(&b.reg);
	}
	registry_free(&a.reg);

	/* Crafted: uid 5's "old" then "new" (the file's order: the oldest first), then uids 6
	 * to 9 one region each. At 8 regions (2 per uid) uid 5 keeps both; at 4 (1 per uid)
	 * it keeps "new", and of the five left the oldest, uid 5's, goes. */
	Pmc__RegionState rs = PMC__REGION_STATE__INIT, *rsp = &rs;
	rs.name = "r", rs.count = 1;
	Pmc__ProcessState ps[6];
	Pmc__ProcessState *psp[6];
	static const char *const comms[6] = {"old", "new", "x", "x", "x", "x"};
	for (int i = 0; i < 6; i++) {
		pmc__process_state__init(&ps[i]);
		ps[i].uid = i < 2 ? 5 : (uint32_t)(4 + i);
		ps[i].comm = (char *)comms[i];
		ps[i].n_regions = 1, ps[i].regions = &rsp;
		psp[i] = &ps[i];
	}
	Pmc__State st = PMC__STATE__INIT;
	st.version = 1, st.n_retired = 6, st.retired = psp;
	size_t len = pmc__state__get_packed_size(&st);
	uint8_t buf[1024];
	CHECK(len <= sizeof(buf));
	pmc__state__pack(&st, buf);
	struct model b = {0};
	CHECK(state_load_buffer(&b, buf, len) == 0 && b.reg.n_retired == 6);
	CHECK(registry_retire_enable(&b.reg, 8) == 0 && b.reg.n_retired == 6);
	registry_free(&b.reg);
	CHECK(state_load_buffer(&b, buf, len) == 0);
	CHECK(registry_retire_enable(&b.reg, 4) == 0);
	CHECK(b.reg.n_retired == 4 && b.reg.retired_dropped == 2);
	struct process *x;
	pmc_list_for_each(x, &b.reg.retired, link)
		CHECK(x->uid != 5 && x->uid >= 6 && x->uid <= 9);
	/* Saved, the oldest first: the file's order. */
	uint8_t *e;
	size_t n;
	CHECK(state_encode(&b, 1, &e, &n) == 0);
	Pmc__State *o = pmc__state__unpack(NULL, n, e);
	CHECK(o && o->n_retired == 4 && o->retired_dropped == 2);
	for (size_t i = 0; i < 4; i++)
		CHECK(o->retired[i]->uid == 6 + i && o->retired[i]->pid == 0 &&
		      o->retired[i]->start == 0 && !strcmp(o->retired[i]->comm, "x"));
	pmc__state__free_unpacked(o, NULL);
	free(e);
	registry_free(&b.reg);
}

/* The retired figures' histogram blocks are charged to their uid's budget: those past it
 * lose their counts (the region counted in retired_dropped), the other figures stay. */
static void
test_state_retired_budget(void)
{
	struct model a = {0}, b = {0};
	fill_retired(&a);
	a.reg.retired_dropped = 0;
	CHECK(state_save(&a, path) == 0);
	b.reg.users = &b.users;
	b.users.hist_limit = 64 + 128; /* one histogram of one block */
	CHECK(state_load(&b, path) == 0);
	CHECK(b.reg.n_retired == 3 && b.reg.retired_dropped == 3);
	struct user_share *u = users_get(&b.users, UID_A);
	CHECK(u && u->hist.used > 0 && u->hist.used <= b.users.hist_limit && u->hist.missed);
	struct process *ra = retired_of(&b.reg, UID_A);
	CHECK(ra && ra->regions[0]->count == 100 && ra->regions[0]->ev[0].st.sum == 5050);
	registry_free(&b.reg);
	CHECK(users_get(&b.users, UID_A)->hist.used == 0);
	CHECK(users_get(&b.users, UID_B)->hist.used == 0);
	users_free(&b.users);
	registry_free(&a.reg);
}

/* A restored process's histogram blocks are charged to its uid's budget, as its samples
 * were (and given back when it is forgotten): those past the budget lose their counts, in
 * the uid's `histogram missed`; the figures and the load stay. */
static void
test_state_process_budget(void)
{
	struct model a = {0}, b = {0};
	fill(&a);
	CHECK(state_save(&a, path) == 0);
	b.reg.users = &b.users;
	b.users.hist_limit = 1 << 20;
	CHECK(state_load(&b, path) == 0 && b.reg.n_procs == 1);
	struct user_share *u = users_get(&b.users, getuid());
	CHECK(u && u->hist.used > 0 && !u->hist.missed);
	registry_free(&b.reg);
	CHECK(u->hist.used == 0);
	/* Room for one block only: the rest lost, counted; the sums and counts stay. */
	u->hist.limit = 64 + 128;
	CHECK(state_load(&b, path) == 0 && b.reg.n_procs == 1);
	CHECK(u->hist.used > 0 && u->hist.used <= u->hist.limit && u->hist.missed);
	struct region_agg *r = registry_first(&b.reg)->regions[0];
	CHECK(r->count == 100 && r->ev[0].st.sum == 5050);
	registry_free(&b.reg);
	CHECK(u->hist.used == 0);
	users_free(&b.users);
	registry_free(&a.reg);
}

/* Node (@parent, @name) of @p with @n samples (1..n): its wall time, page-faults and, at the
 * deepest, cycles, an event no region of the process counts. */
static struct region_agg *
add_node(struct registry *reg, struct process *p, uint32_t parent, const char *name, uint64_t n)
{
	struct region_agg *r = registry_process_path(reg, p, parent, name);
	CHECK(r);
	int pf = registry_process_event_id(p, "page-faults"),
	    cy = registry_process_event_id(p, "cycles");
	CHECK(pf >= 0 && cy >= 0);
	for (uint64_t v = 1; v <= n; v++) {
		CHECK(stats_add(&r->wall, 100 * v, NULL) == 0);
		struct event_agg *e = registry_region_event(r, (size_t)pf);
		CHECK(e && stats_add(&e->st, v, NULL) == 0);
		if (r->depth == 3) {
			e = registry_region_event(r, (size_t)cy);
			CHECK(e && stats_add(&e->st, 1000 + v, NULL) == 0);
			e->scaled = 2, e->ratio_sum = 1.25;
		}
		r->count++;
	}
	return r;
}

/* fill()'s process, with a call path tree: a (30 samples), a;b (20), a;b;b (10), and
 * untracked counts. */
static void
fill_paths(struct model *m)
{
	fill(m);
	struct registry *reg = &m->reg;
	struct process *p = registry_first(reg);
	add_node(reg, p, 0, "a", 30);
	add_node(reg, p, 1, "b", 20);
	add_node(reg, p, 2, "b", 10);
	CHECK(p->n_paths == 3 && reg->n_paths == 3 && p->paths[2]->depth == 3);
	p->untracked[UNTRACKED_DEPTH] = 3;
	p->untracked[UNTRACKED_LIMIT] = 4;
	p->untracked[UNTRACKED_OLDER] = UINT64_MAX;
}

/* Encodes @m, which must give the @len bytes @buf. */
static void
same_bytes(struct model *m, const uint8_t *buf, size_t len)
{
	uint8_t *e;
	size_t n;
	CHECK(state_encode(m, 7, &e, &n) == 0);
	CHECK(n == len && !memcmp(e, buf, n));
	free(e);
}

/* The call path tree of a process comes back, each node with its parent, depth and
 * figures, as do its untracked counts; saved again, the same bytes. */
static void
test_state_paths_round_trip(void)
{
	struct model a = {0}, b = {0}, c = {0};
	fill_paths(&a);
	CHECK(state_save(&a, path) == 0);
	CHECK(state_load(&b, path) == 0);
	CHECK(b.reg.n_procs == 1 && b.reg.n_regions == 1 && b.reg.n_paths == 3);
	struct process *p = registry_first(&a.reg), *q = registry_first(&b.reg);
	CHECK(q->n_paths == 3 && q->n_regions == 1);
	for (size_t i = 0; i < 3; i++) {
		const struct region_agg *x = p->paths[i], *y = q->paths[i];
		CHECK(y->parent == x->parent && y->depth == x->depth && y->depth == i + 1);
		CHECK(!strcmp(y->name, i ? "b" : "a"));
		same_region(p, x, q, y);
		CHECK(stats_quantile(&y->wall, 0.5) == stats_quantile(&x->wall, 0.5));
		CHECK(stats_quantile(&y->wall, 0.99) == stats_quantile(&x->wall, 0.99));
	}
	same_region(p, p->regions[0], q, q->regions[0]);
	/* The figures themselves, not only equal to the saved ones. */
	struct region_agg *bb = registry_path_find(q, 2, "b");
	CHECK(bb == q->paths[2] && registry_path_find(q, 1, "b") == q->paths[1]);
	CHECK(registry_path_find(q, 0, "a") == q->paths[0] && !registry_path_find(q, 0, "b"));
	CHECK(bb->count == 10 && bb->wall.count == 10 && bb->wall.sum == 100 * 55);
	CHECK(bb->wall.min == 100 && bb->wall.max == 1000);
	int cy = -1;
	for (size_t j = 0; j < q->n_events; j++)
		if (!strcmp(q->events[j], "cycles"))
			cy = (int)j;
	CHECK(cy >= 0 && (size_t)cy < bb->n_ev && bb->seen[cy]);
	CHECK(bb->ev[cy].st.sum == 10 * 1000 + 55 && bb->ev[cy].scaled == 2);
	CHECK(bb->ev[cy].ratio_sum == 1.25);
	double p50 = stats_quantile(&bb->ev[cy].st, 0.5);
	CHECK(p50 >= 1001 && p50 <= 1010);
	CHECK(q->paths[0]->count == 30 && (size_t)cy >= q->paths[0]->n_ev);
	CHECK(q->untracked[UNTRACKED_DEPTH] == 3 && q->untracked[UNTRACKED_LIMIT] == 4);
	CHECK(q->untracked[UNTRACKED_OLDER] == UINT64_MAX);

	/* Saved again as they came: the same bytes; and again after a second load. */
	uint8_t *ea;
	size_t na;
	CHECK(state_encode(&a, 7, &ea, &na) == 0);
	same_bytes(&b, ea, na);
	CHECK(state_load_buffer(&c, ea, na) == 0 && c.reg.n_paths == 3);
	same_bytes(&c, ea, na);
	Pmc__State *st = pmc__state__unpack(NULL, na, ea);
	CHECK(st && st->n_processes == 1 && st->processes[0]->n_paths == 3);
	CHECK(st->processes[0]->paths[2]->parent == 2 && st->processes[0]->untracked_limit == 4);
	pmc__state__free_unpacked(st, NULL);
	free(ea);
	registry_free(&a.reg);
	registry_free(&b.reg);
	registry_free(&c.reg);
	CHECK(b.reg.n_paths == 0 && c.reg.n_paths == 0);
}

/* Histogram memory that @p's regions and nodes hold themselves. */
static size_t
held_memory(const struct process *p)
{
	size_t n = 0;
	for (size_t k = 0; k < p->n_regions + p->n_paths; k++) {
		const struct region_agg *r =
		        k < p->n_regions ? p->regions[k] : p->paths[k - p->n_regions];
		n += stats_memory(&r->wall);
		for (size_t j = 0; j < r->n_ev; j++)
			n += stats_memory(&r->ev[j].st);
	}
	return n;
}

/* Frees @b, loaded from @buf (freed too) with users: every block given back to @u; then @a,
 * the model @buf was encoded from. */
static void
loaded_free(struct model *a, struct model *b, struct user_share *u, uint8_t *buf)
{
	registry_free(&b->reg);
	CHECK(u->hist.used == 0);
	users_free(&b->users);
	free(buf);
	registry_free(&a->reg);
}

/* A region counted only through its one node reads its figures there (struct region_agg's
 * via): saved as its own, and after a load shared again (the copy the file gave it freed, its
 * memory given back), so that a restart costs no memory; saved again, the same bytes. A region
 * with samples of its own beside its node's ("m") keeps its own. */
static void
test_state_paths_shared(void)
{
	struct model a = {0}, b = {0};
	fill_paths(&a);
	struct process *p = registry_first(&a.reg);
	pmc_test_add_path_runs_to(&a.reg, p, "s", 5, 1000, NULL);
	pmc_test_add_path_runs_to(&a.reg, p, "s", 3, 70000, NULL);
	struct region_agg *s = registry_region_find(p, "s");
	CHECK(s && s->via && s->wall.count == 0 && registry_region_wall(s)->count == 8);
	pmc_test_add_runs_to(&a.reg, p, "m", 2, 10, NULL);
	pmc_test_add_path_runs_to(&a.reg, p, "m", 4, 10, NULL);
	struct region_agg *m = registry_region_find(p, "m");
	CHECK(m && !m->via && m->wall.count == 6);
	uint8_t *buf;
	size_t len;
	CHECK(state_encode(&a, 7, &buf, &len) == 0);
	b.reg.users = &b.users;
	b.users.hist_limit = 1 << 20;
	CHECK(state_load_buffer(&b, buf, len) == 0);
	struct process *q = registry_first(&b.reg);
	struct region_agg *t = registry_region_find(q, "s"), *n = registry_region_find(q, "m");
	CHECK(t && t->via == registry_path_find(q, 0, "s") && n && !n->via);
	CHECK(n->wall.count == 6 && registry_path_find(q, 0, "m")->wall.count == 4);
	CHECK(!registry_region_find(q, "parse")->via);
	CHECK(stats_memory(&t->wall) == 0 && stats_memory(&t->ev[0].st) == 0);
	same_region(p, s, q, t);
	same_region(p, m, q, n);
	const struct stats *st = registry_region_stats(t, 0);
	CHECK(st->count == 8 && st->sum == 5 * 1000 + 3 * 70000 && st->max == 70000);
	struct user_share *u = users_get(&b.users, getuid());
	CHECK(u && u->hist.used == held_memory(q) && !u->hist.missed);
	same_bytes(&b, buf, len);
	loaded_free(&a, &b, u, buf);
}

/* A shared region (test_state_paths_shared()) whose uid has room for one copy of its figures,
 * not two: the file holds two (the region's, then the node's), and the load keeps the whole
 * one, nothing missed. With @cut_region and @cut_node, that copy's histogram in the file lacks
 * its last bucket (5 of the 6 samples), and the file is one of before checksums. Both cut: a
 * histogram that had missed a count before the save; the load keeps all the file holds and
 * misses nothing either (it had judged the copy kept against the count, and counted the
 * node's refused blocks in `histogram missed`). The region's alone: the node's copy, partly
 * loaded, held a count the copy kept lacks, counted missed. With @half, the uid has room for
 * half a copy: counts are lost, and counted missed. */
static void
shared_budget(bool cut_region, bool cut_node, bool half)
{
	struct model a = {0}, b = {0};
	struct process *p = registry_process(&a.reg, getpid(), getuid());
	CHECK(p);
	for (unsigned k = 0; k < 6; k++)
		pmc_test_add_path_runs_to(&a.reg, p, "s", 1, UINT64_C(1) << (8 * k), NULL);
	struct region_agg *s = registry_region_find(p, "s");
	CHECK(s->via && stats_memory(&s->wall) == 0);
	size_t one = held_memory(p);
	uint8_t *buf;
	size_t len;
	CHECK(state_encode(&a, 7, &buf, &len) == 0);
	bool cut = cut_region || cut_node;
	if (cut) {
		/* Changed, and written as a file of before checksums (unframe()). */
		Pmc__State *st = pmc__state__unpack(NULL, len, buf);
		CHECK(st && st->n_processes == 1);
		Pmc__ProcessState *ps = st->processes[0];
		CHECK(ps->n_regions == 1 && ps->n_paths == 1);
		CHECK(ps->regions[0]->n_events == 1 && ps->paths[0]->region->n_events == 1);
		Pmc__StatsState *w[2] = {ps->regions[0]->events[0]->stats,
		                         ps->paths[0]->region->events[0]->stats};
		CHECK(w[0]->n_hist == 6 && w[1]->n_hist == 6);
		w[0]->n_hist = cut_region ? 5 : 6;
		w[1]->n_hist = cut_node ? 5 : 6;
		char *kind = st->checksum_kind;
		st->checksum_kind = "";
		st->checksum = 0;
		len = pmc__state__pack(st, buf); /* shorter */
		st->checksum_kind = kind;
		w[0]->n_hist = w[1]->n_hist = 6;
		pmc__state__free_unpacked(st, NULL);
	}
	b.reg.users = &b.users;
	b.users.hist_limit = half ? one / 2 : one + one / 2;
	CHECK(state_load_buffer(&b, buf, len) == 0 && b.state_unchecked == cut);
	struct process *q = registry_first(&b.reg);
	struct region_agg *t = registry_region_find(q, "s");
	CHECK(t && t->via == registry_path_find(q, 0, "s"));
	const struct stats *st = registry_region_stats(t, 0);
	CHECK(st->count == 6);
	struct user_share *u = users_get(&b.users, getuid());
	CHECK(u && u->hist.used == held_memory(q));
	if (half) {
		CHECK(u->hist.missed && held_memory(q) <= one / 2);
		CHECK(stats_hist_get(st, stats_bucket(UINT64_C(1) << 40)) == 0);
	} else {
		for (unsigned k = 0; k < 6; k++)
			CHECK(stats_hist_get(st, stats_bucket(UINT64_C(1) << (8 * k))) ==
			      (cut_region && k == 5 ? 0 : 1));
		CHECK(!u->hist.missed == !(cut_region && !cut_node));
		CHECK(cut_region ? held_memory(q) < one : held_memory(q) == one);
	}
	loaded_free(&a, &b, u, buf);
}

static void
test_state_paths_shared_budget(void)
{
	shared_budget(false, false, false);
	shared_budget(true, true, false);
	shared_budget(true, false, false);
	shared_budget(false, false, true);
	shared_budget(true, true, true);
}

/* The nodes' histogram blocks are charged to the uid's budget with its regions' (and given
 * back when the process is forgotten); those past it lose their counts, in the uid's
 * `histogram missed`, the other figures kept. */
static void
test_state_paths_budget(void)
{
	struct model a = {0}, b = {0};
	fill_paths(&a);
	uint8_t *buf;
	size_t len;
	CHECK(state_encode(&a, 7, &buf, &len) == 0);
	/* The same file without its nodes. */
	Pmc__State *st = pmc__state__unpack(NULL, len, buf);
	CHECK(st && st->n_processes == 1);
	size_t n_paths = st->processes[0]->n_paths;
	st->processes[0]->n_paths = 0;
	uint8_t *bare = malloc(len);
	CHECK(bare);
	size_t bare_len = pmc__state__pack(st, bare);
	st->processes[0]->n_paths = n_paths;
	pmc__state__free_unpacked(st, NULL);

	b.reg.users = &b.users;
	b.users.hist_limit = 1 << 20;
	CHECK(state_load_buffer(&b, bare, bare_len) == 0 && b.reg.n_paths == 0);
	struct user_share *u = users_get(&b.users, getuid());
	CHECK(u);
	size_t regions_only = u->hist.used;
	registry_free(&b.reg);
	CHECK(u->hist.used == 0);
	CHECK(state_load_buffer(&b, buf, len) == 0 && b.reg.n_paths == 3);
	CHECK(u->hist.used > regions_only && !u->hist.missed);
	registry_free(&b.reg);
	CHECK(u->hist.used == 0);
	/* Room for one block only: the rest lost, counted; the sums and counts stay. */
	u->hist.limit = 64 + 128;
	CHECK(state_load_buffer(&b, buf, len) == 0 && b.reg.n_paths == 3);
	CHECK(u->hist.used > 0 && u->hist.used <= u->hist.limit && u->hist.missed);
	struct region_agg *bb = registry_first(&b.reg)->paths[2];
	CHECK(bb->count == 10 && bb->wall.sum == 100 * 55 && bb->ev[0].st.sum == 55);
	registry_free(&b.reg);
	CHECK(u->hist.used == 0);
	users_free(&b.users);
	free(bare);
	free(buf);
	registry_free(&a.reg);
}

/* A file of before the call path tree (no fields 7 to 10 in a process) loads as it did:
 * its processes have no nodes and no untracked counts. */
static void
test_state_paths_old_file(void)
{
	struct model a = {0};
	fill(&a);
	/* Nor the cgroup and ns_pid (fields 11, 12): those of a process are saved only when
	 * known. */
	CHECK(registry_process_set_cgroup(registry_first(&a.reg), NULL) == 0);
	registry_first(&a.reg)->ns_pid = 0;
	uint8_t *buf;
	size_t len;
	CHECK(state_encode(&a, 7, &buf, &len) == 0);
	Pmc__State *st = pmc__state__unpack(NULL, len, buf);
	CHECK(st && st->n_processes == 1);
	/* The process as packed: fields 1 to 6 only. */
	Pmc__ProcessState *ps = st->processes[0];
	uint8_t pb[4096];
	size_t plen = pmc__process_state__get_packed_size(ps);
	CHECK(plen <= sizeof(pb));
	pmc__process_state__pack(ps, pb);
	for (size_t i = 0; i < plen;) {
		uint64_t v = 0, tag = 0;
		for (unsigned sh = 0; i < plen; sh += 7) {
			tag |= (uint64_t)(pb[i] & 0x7f) << sh;
			if (!(pb[i++] & 0x80))
				break;
		}
		CHECK((tag >> 3) >= 1 && (tag >> 3) <= 6);
		if ((tag & 7) == 1) {
			i += 8;
			continue;
		}
		for (unsigned sh = 0; i < plen; sh += 7) {
			v |= (uint64_t)(pb[i] & 0x7f) << sh;
			if (!(pb[i++] & 0x80))
				break;
		}
		if ((tag & 7) == 2)
			i += v;
	}
	pmc__state__free_unpacked(st, NULL);
	struct model b = {0};
	CHECK(state_load_buffer(&b, buf, len) == 0);
	CHECK(b.reg.n_procs == 1 && b.reg.n_regions == 1 && b.reg.n_paths == 0);
	struct process *p = registry_first(&b.reg);
	CHECK(p->n_paths == 0 && !p->paths && p->regions[0]->count == 100);
	for (unsigned k = 0; k < UNTRACKED_N; k++)
		CHECK(p->untracked[k] == 0);
	CHECK(!p->cgroup && p->ns_pid == 0);
	same_bytes(&b, buf, len);
	registry_free(&b.reg);
	free(buf);
	registry_free(&a.reg);
}

/* A process keeps its cgroup and its pid in its namespace through a save and a load, as it
 * keeps its comm; a cgroup path past CGROUP_PATH_MAX in a file is cut, and saved cut. */
static void
test_state_origin(void)
{
	struct model a = {0}, b = {0}, c = {0};
	fill(&a);
	struct process *p = registry_first(&a.reg);
	/* registry_process() read them from /proc: this process's own. */
	CHECK(p->ns_pid > 0);
	static const char cg[] =
	        "/system.slice/docker-"
	        "3f4e2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f.scope";
	CHECK(registry_process_set_cgroup(p, cg) == 0);
	p->ns_pid = 7;
	uint8_t *buf;
	size_t len;
	CHECK(state_encode(&a, 7, &buf, &len) == 0);
	CHECK(state_load_buffer(&b, buf, len) == 0);
	CHECK(registry_first(&b.reg) && !strcmp(registry_first(&b.reg)->cgroup, cg) &&
	      registry_first(&b.reg)->ns_pid == 7);
	same_bytes(&b, buf, len);
	free(buf);

	static char long_cg[CGROUP_PATH_MAX + 100];
	memset(long_cg, 'x', sizeof(long_cg) - 1);
	long_cg[0] = '/';
	CHECK(registry_process_set_cgroup(p, NULL) == 0);
	p->cgroup = long_cg; /* as a file may hold it */
	CHECK(state_encode(&a, 7, &buf, &len) == 0);
	p->cgroup = NULL;
	CHECK(state_load_buffer(&c, buf, len) == 0);
	CHECK(strlen(registry_first(&c.reg)->cgroup) == CGROUP_PATH_MAX - 1);
	free(buf);
	registry_free(&c.reg);
	registry_free(&b.reg);
	registry_free(&a.reg);
}

/* A directory another user can write (or owns) is refused at start, at every save and
 * at load: such a user could plant FILE.tmp or FILE there. */
static void
test_state_refuses_unsafe_dir(void)
{
	struct model a = {0}, b = {0};
	fill(&a);
	CHECK(state_save(&a, path) == 0);
	static const mode_t bad[] = {01777, 0777, 0775, 0757, 0730};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK(chmod(dir, bad[i]) == 0);
		CHECK(state_prepare(path) == -EPERM);
		CHECK(state_save(&a, path) == -EPERM);
		CHECK(state_load(&b, path) == -EPERM && !registry_first(&b.reg));
	}
	CHECK(chmod(dir, 0755) == 0);
	CHECK(state_prepare(path) == 0);
	if (geteuid() == 0) {
		/* Owned by another user, even at mode 0755. */
		CHECK(chown(dir, 65534, 65534) == 0);
		CHECK(state_prepare(path) == -EPERM);
		CHECK(state_save(&a, path) == -EPERM);
		CHECK(chown(dir, 0, 0) == 0);
	}
	/* What systemd's StateDirectory= makes under DynamicUser=: the daemon's own, 0700. */
	CHECK(chmod(dir, 0700) == 0);
	CHECK(state_prepare(path) == 0);
	CHECK(state_save(&a, path) == 0);
	/* A relative name is checked in the working directory. */
	CHECK(state_prepare("no/such/dir/state") == -ENOENT);
	CHECK(state_prepare("/") == -EISDIR);
	registry_free(&a.reg);
}

/* Whatever sits at FILE.tmp that the daemon did not leave there is never written through
 * nor replaced; a stale temporary file of the daemon's own is removed. */
static void
test_state_tmp_not_ours(void)
{
	struct model a = {0};
	fill(&a);
	char victim[160];
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	spit(victim, "precious", 8, 0644);
	uint8_t buf[64];

	/* A symbolic link to a file of the daemon's user (root's /etc/shadow, say). */
	CHECK(symlink(victim, tmp_path) == 0);
	CHECK(state_prepare(path) == -EEXIST);
	CHECK(state_save(&a, path) == -EEXIST);
	CHECK(slurp(victim, buf, sizeof(buf)) == 8 && !memcmp(buf, "precious", 8));
	struct stat sb;
	CHECK(lstat(tmp_path, &sb) == 0 && S_ISLNK(sb.st_mode)); /* left for the operator */
	CHECK(unlink(tmp_path) == 0);
	/* A dangling one: O_CREAT would have created its target. */
	char target[192];
	snprintf(target, sizeof(target), "%s/created", dir);
	CHECK(symlink(target, tmp_path) == 0);
	CHECK(state_save(&a, path) == -EEXIST);
	CHECK(access(target, F_OK) < 0 && errno == ENOENT);
	CHECK(unlink(tmp_path) == 0);

	/* A FIFO: no hang, refused. */
	CHECK(mkfifo(tmp_path, 0600) == 0);
	CHECK(state_prepare(path) == -EEXIST);
	CHECK(state_save(&a, path) == -EEXIST);
	CHECK(unlink(tmp_path) == 0);

	if (geteuid() == 0) {
		/* A regular file of another user: never adopted as the state file. */
		spit(tmp_path, "theirs", 6, 0666);
		CHECK(chown(tmp_path, 65534, 65534) == 0);
		CHECK(state_prepare(path) == -EEXIST);
		CHECK(state_save(&a, path) == -EEXIST);
		CHECK(stat(path, &sb) == 0 && sb.st_uid == 0);
		CHECK(unlink(tmp_path) == 0);
	}

	/* A stale one of ours (a save that died): removed, then the save goes through. */
	spit(tmp_path, "stale", 5, 0600);
	CHECK(state_prepare(path) == 0);
	CHECK(access(tmp_path, F_OK) < 0 && errno == ENOENT);
	spit(tmp_path, "stale", 5, 0600);
	CHECK(state_save(&a, path) == 0);
	CHECK(access(tmp_path, F_OK) < 0 && errno == ENOENT);
	CHECK(stat(path, &sb) == 0 && sb.st_uid == geteuid() && (sb.st_mode & 0777) == 0600);
	unlink(victim);
	registry_free(&a.reg);
}

/* The state file itself: nothing but a regular file of the daemon's uid that no one else
 * may write is loaded; a FIFO does not make the daemon wait. */
static void
test_state_load_refuses(void)
{
	struct model a = {0}, b = {0};
	fill(&a);
	CHECK(state_save(&a, path) == 0);
	char real[160];
	snprintf(real, sizeof(real), "%s/real", dir);
	CHECK(rename(path, real) == 0);

	CHECK(symlink(real, path) == 0);
	CHECK(state_load(&b, path) == -ELOOP);
	CHECK(unlink(path) == 0);

	CHECK(mkfifo(path, 0600) == 0);
	CHECK(state_load(&b, path) == -EINVAL);
	CHECK(unlink(path) == 0);

	CHECK(mkdir(path, 0700) == 0);
	CHECK(state_load(&b, path) == -EINVAL);
	CHECK(rmdir(path) == 0);

	CHECK(rename(real, path) == 0);
	CHECK(chmod(path, 0622) == 0);
	CHECK(state_load(&b, path) == -EPERM);
	CHECK(chmod(path, 0600) == 0);
	if (geteuid() == 0) {
		CHECK(chown(path, 65534, 65534) == 0);
		CHECK(state_load(&b, path) == -EPERM);
		CHECK(chown(path, 0, 0) == 0);
	}
	CHECK(!registry_first(&b.reg));
	CHECK(state_load(&b, path) == 0 && b.reg.n_procs == 1);
	registry_free(&a.reg);
	registry_free(&b.reg);
}

/* The daemon never writes a file it would refuse to load: one of exactly the limit saves
 * and loads; one byte more is not written, and the previous file stays. */
static void
test_state_size_limit(void)
{
	struct model a = {0}, b = {0};
	fill(&a);
	uint8_t *enc;
	size_t len;
	/* saved_ns of today: the same size of varint as the saves below. */
	CHECK(state_encode(&a, util_now_ns(CLOCK_REALTIME), &enc, &len) == 0 && len > 0);
	free(enc);
	state_set_max_bytes(len);
	CHECK(state_save(&a, path) == 0);
	uint8_t before[1 << 16], after[1 << 16];
	ssize_t n = slurp(path, before, sizeof(before));
	CHECK(n == (ssize_t)len);
	CHECK(state_load(&b, path) == 0 && b.reg.n_procs == 1);
	registry_free(&b.reg);

	/* One more region: over the limit. */
	CHECK(registry_process_region(&a.reg, registry_first(&a.reg), "one-more"));
	uint64_t saved = a.state_saved_ns;
	CHECK(state_save(&a, path) == -EFBIG);
	CHECK(a.state_saved_ns == saved);
	CHECK(slurp(path, after, sizeof(after)) == n && !memcmp(before, after, (size_t)n));
	CHECK(access(tmp_path, F_OK) < 0);
	/* ... nor in the child of a periodic save. */
	struct state_job *j;
	CHECK(state_job_start(&a, path, &j) == 0);
	CHECK(state_job_wait(j, &a) == -EFBIG && a.state_saved_ns == saved);
	CHECK(slurp(path, after, sizeof(after)) == n && !memcmp(before, after, (size_t)n));

	/* A file over the limit is refused at load (written by hand: the daemon would not). */
	before[n] = 0; /* an empty field 0 would not decode; the size check comes first */
	spit(path, before, (size_t)n + 1, 0600);
	CHECK(state_load(&b, path) == -EFBIG && !registry_first(&b.reg));
	/* ... and moved aside, so that the daemon starts afresh. */
	char bad[192];
	snprintf(bad, sizeof(bad), "%s.bad", path);
	CHECK(b.state_moved_aside && !strcmp(b.state_moved_aside, bad) && access(path, F_OK) < 0);
	CHECK(unlink(bad) == 0);
	free(b.state_moved_aside);
	b.state_moved_aside = NULL;
	CHECK(state_load_buffer(&b, before, (size_t)n + 1) == -EFBIG);
	state_set_max_bytes(0);
	CHECK(state_save(&a, path) == 0);
	registry_free(&a.reg);
}

/* Waits for the child of @j, as the daemon's loop does: its pidfd becomes readable. */
static int
job_finish(struct state_job *j, struct model *m)
{
	struct pollfd pfd = {.fd = state_job_fd(j), .events = POLLIN};
	CHECK(poll(&pfd, 1, 20000) == 1);
	return state_job_wait(j, m);
}

/* The periodic save: a child writes the registry as it was at the fork, whatever the
 * caller does meanwhile; its success sets state_saved_ns, its failure leaves the previous
 * file and is reported. */
static void
test_state_job(void)
{
	struct model a = {0}, b = {0};
	fill(&a);
	unlink(path);
	int fds = pmc_test_count_fds();
	struct state_job *j;
	uint64_t t0 = util_now_ns(CLOCK_REALTIME);
	CHECK(state_job_start(&a, path, &j) == 0);
	/* Changes after the fork are not in this save. */
	struct region_agg *r = registry_first(&a.reg)->regions[0];
	CHECK(stats_add(&r->wall, 1, NULL) == 0);
	r->count++;
	CHECK(a.state_saved_ns == 0);
	CHECK(job_finish(j, &a) == 0);
	CHECK(a.state_saved_ns >= t0 && a.state_saved_ns <= util_now_ns(CLOCK_REALTIME));
	CHECK(pmc_test_count_fds() == fds);
	CHECK(state_load(&b, path) == 0);
	CHECK(registry_first(&b.reg)->regions[0]->count == 100 &&
	      b.state_saved_ns == a.state_saved_ns);
	registry_free(&b.reg);

	/* A failed save: reported, the previous file kept. */
	uint64_t saved = a.state_saved_ns;
	CHECK(chmod(dir, 0777) == 0);
	CHECK(state_job_start(&a, path, &j) == -EPERM && a.state_saved_ns == saved);
	CHECK(chmod(dir, 0700) == 0);
	CHECK(state_load(&b, path) == 0 && registry_first(&b.reg)->regions[0]->count == 100);
	registry_free(&b.reg);

	/* A child killed mid-save: reported; a temporary file it left, ours, goes at the
	 * next save. */
	spit(tmp_path, "partial", 7, 0600);
	CHECK(state_job_start(&a, path, &j) == 0);
	CHECK(pidfd_send_signal(state_job_fd(j), SIGKILL, NULL, 0) == 0);
	CHECK(job_finish(j, &a) == -EINTR && a.state_saved_ns == saved);
	CHECK(state_save(&a, path) == 0 && access(tmp_path, F_OK) < 0);
	CHECK(pmc_test_count_fds() == fds);
	registry_free(&a.reg);
}

/* A registry of @procs processes of @regions regions each, 4 events per region, samples
 * spread over many histogram buckets: the size of a busy daemon's. */
static void
fill_big(struct model *m, unsigned procs, unsigned regions)
{
	static const char *const events[] = {"cycles", "instructions", "cache-misses",
	                                     "branch-misses"};
	uint64_t rng = 42;
	for (unsigned i = 0; i < procs; i++) {
		/* One pid, another uid each: a distinct process for the registry. */
		struct process *p = registry_process(&m->reg, getpid(), 100000 + i);
		CHECK(p);
		for (unsigned k = 0; k < 4; k++)
			CHECK(registry_process_event_id(p, events[k]) == (int)k);
		for (unsigned n = 0; n < regions; n++) {
			char name[32];
			snprintf(name, sizeof(name), "region-%u", n);
			struct region_agg *r = registry_process_region(&m->reg, p, name);
			CHECK(r);
			for (unsigned s = 0; s < 16; s++) {
				uint64_t v = pmc_test_rng(&rng) >> (pmc_test_rng(&rng) % 50);
				CHECK(stats_add(&r->wall, v, NULL) == 0);
				for (unsigned k = 0; k < 4; k++) {
					struct event_agg *e = registry_region_event(r, k);
					CHECK(e && stats_add(&e->st, v >> k, NULL) == 0);
				}
				r->count++;
			}
		}
	}
}

static double
ms_since(uint64_t t0)
{
	return (double)(util_now_ns(CLOCK_MONOTONIC) - t0) / 1e6;
}

/* What the daemon's loop waits for at a save: the whole save before, the fork now. */
static void
measure(const char *file, unsigned procs, unsigned regions)
{
	struct model a = {0};
	fill_big(&a, procs, regions);
	uint64_t t0 = util_now_ns(CLOCK_MONOTONIC);
	CHECK(state_save(&a, file) == 0);
	double sync_ms = ms_since(t0);
	struct stat sb;
	CHECK(stat(file, &sb) == 0);
	double fork_ms = 1e9, total_ms = 0;
	for (int i = 0; i < 2; i++) {
		struct state_job *j;
		t0 = util_now_ns(CLOCK_MONOTONIC);
		CHECK(state_job_start(&a, file, &j) == 0);
		double ms = ms_since(t0);
		fork_ms = ms < fork_ms ? ms : fork_ms;
		CHECK(job_finish(j, &a) == 0);
		total_ms = ms_since(t0);
	}
	/* key=value, for the integration tests (lib.sh's kv). */
	printf("processes=%u\nregions=%zu\nstate_bytes=%lld\n", procs, a.reg.n_regions,
	       (long long)sb.st_size);
	/* Figures to read, not to judge: a shared machine's load moves them. */
	printf("save_in_caller_ms=%.1f\nfork_ms=%.2f\nchild_save_ms=%.1f\n", sync_ms, fork_ms,
	       total_ms);
	registry_free(&a.reg);
}

/* Checks that a loaded registry can be read the ways the daemon reads it. */
static void
read_all(struct model *m)
{
	struct process *p;
	pmc_list_for_each(p, &m->reg.procs, link)
		for (size_t i = 0; i < p->n_regions; i++) {
			struct region_agg *r = p->regions[i];
			volatile double x = stats_quantile(&r->wall, 0.99) + stats_stddev(&r->wall);
			for (size_t k = 0; k < r->n_ev; k++)
				x += stats_quantile(&r->ev[k].st, 0.5) + stats_stddev(&r->ev[k].st);
			struct derived d[DERIVED_MAX];
			(void)registry_region_derived(p, r, d);
			(void)x;
		}
}

/* Loads @st (packed), which must give @want; a loaded registry is read and freed. */
static void
load_hostile(const Pmc__State *st, int want)
{
	size_t len = pmc__state__get_packed_size(st);
	uint8_t *buf = malloc(len ? len : 1);
	CHECK(buf);
	pmc__state__pack(st, buf);
	struct model b = {0};
	int r = state_load_buffer(&b, buf, len);
	if (r != want)
		fprintf(stderr, "hostile state: got %d, want %d\n", r, want);
	CHECK(r == want);
	if (r < 0)
		CHECK(!registry_first(&b.reg) && b.reg.n_procs == 0 && b.reg.n_regions == 0 &&
		      b.reg.n_paths == 0 && !registry_first_retired(&b.reg) &&
		      b.reg.n_retired == 0 && b.reg.retired_dropped == 0);
	read_all(&b);
	registry_free(&b.reg);
	free(buf);
}

/* State files nobody wrote: extreme figures, histograms that disagree with their counts,
 * out-of-range buckets, duplicates, garbage. Each loads or is refused whole. */
static void
test_state_hostile(void)
{
	Pmc__HistBucket hb[4] = {PMC__HIST_BUCKET__INIT, PMC__HIST_BUCKET__INIT,
	                         PMC__HIST_BUCKET__INIT, PMC__HIST_BUCKET__INIT};
	Pmc__HistBucket *hbp[4] = {&hb[0], &hb[1], &hb[2], &hb[3]};
	hb[0].index = 0, hb[0].count = UINT64_MAX;
	hb[1].index = STATS_BUCKETS - 1, hb[1].count = UINT64_MAX;
	hb[2].index = 0, hb[2].count = 7; /* the same bucket again */
	hb[3].index = 500, hb[3].count = UINT64_MAX;
	Pmc__StatsState ss = PMC__STATS_STATE__INIT;
	ss.count = UINT64_MAX, ss.sum = UINT64_MAX, ss.min = UINT64_MAX, ss.max = 0; /* min > max */
	ss.mean = NAN, ss.m2 = -INFINITY;
	ss.n_hist = 4, ss.hist = hbp;
	Pmc__StatsState zero = PMC__STATS_STATE__INIT; /* count 0, yet buckets */
	zero.n_hist = 4, zero.hist = hbp;
	Pmc__EventState es[3] = {PMC__EVENT_STATE__INIT, PMC__EVENT_STATE__INIT,
	                         PMC__EVENT_STATE__INIT};
	Pmc__EventState *esp[3] = {&es[0], &es[1], &es[2]};
	es[0].name = "cycles", es[0].stats = &ss, es[0].scaled = UINT64_MAX;
	es[0].ratio_sum = INFINITY;
	es[1].name = "instructions", es[1].stats = &zero;
	es[2].name = "", es[2].stats = NULL; /* no name, no figures */
	Pmc__RegionState rs[2] = {PMC__REGION_STATE__INIT, PMC__REGION_STATE__INIT};
	Pmc__RegionState *rsp[2] = {&rs[0], &rs[1]};
	rs[0].name = "r", rs[0].count = UINT64_MAX, rs[0].wall = &ss;
	rs[0].n_events = 3, rs[0].events = esp;
	rs[1] = rs[0];
	rs[1].name = "s", rs[1].wall = NULL;
	char comm[300];
	memset(comm, 'c', sizeof(comm) - 1);
	comm[sizeof(comm) - 1] = 0;
	Pmc__ProcessState ps[2] = {PMC__PROCESS_STATE__INIT, PMC__PROCESS_STATE__INIT};
	Pmc__ProcessState *psp[2] = {&ps[0], &ps[1]};
	ps[0].pid = -1, ps[0].uid = UINT32_MAX, ps[0].start = UINT64_MAX, ps[0].comm = comm;
	ps[0].received = UINT64_MAX, ps[0].n_regions = 2, ps[0].regions = rsp;
	ps[1] = ps[0]; /* the same process twice */
	Pmc__State st = PMC__STATE__INIT;
	st.version = 1, st.n_processes = 2, st.processes = psp;
	st.samples = st.batches = st.dropped = st.lost = UINT64_MAX;
	load_hostile(&st, 0);

	/* The same event twice in a region, the same region twice in a process: the
	 * up to a NUL too): the daemon lists each once, and a load would have to choose
	 * between the figures (and order the events differently when saving them again). */
	es[1].name = "cycles";
	load_hostile(&st, -EBADMSG);
	es[1].name = "instructions";
	rs[1].name = "r";
	load_hostile(&st, -EBADMSG);
	rs[1].name = "s";

	/* Out-of-range buckets: the whole file refused, nothing kept, nothing leaked. */
	hb[2].index = STATS_BUCKETS;
	load_hostile(&st, -EBADMSG);
	hb[2].index = UINT32_MAX;
	load_hostile(&st, -EBADMSG);
	hb[2].index = 0;
	/* ... in the second process only: the first, loaded already, is freed too. */
	Pmc__ProcessState bad = ps[0];
	Pmc__RegionState bad_r = rs[1];
	Pmc__RegionState *bad_rp = &bad_r;
	Pmc__HistBucket out = PMC__HIST_BUCKET__INIT, *outp = &out;
	out.index = STATS_BUCKETS;
	Pmc__StatsState bad_s = PMC__STATS_STATE__INIT;
	bad_s.n_hist = 1, bad_s.hist = &outp;
	bad_r.wall = &bad_s;
	bad.n_regions = 1, bad.regions = &bad_rp;
	psp[1] = &bad;
	load_hostile(&st, -EBADMSG);
	psp[1] = &ps[1];
	/* Another version; none. */
	st.version = 2;
	load_hostile(&st, -EBADMSG);
	st.version = 0;
	load_hostile(&st, -EBADMSG);
	st.version = 1;

	/* Many regions in one process, over the 64 events a process may count. */
	enum { N = 1000 };
	static Pmc__RegionState many[N];
	static Pmc__RegionState *manyp[N];
	static Pmc__EventState mev[N];
	static Pmc__EventState *mevp[N];
	static char names[N][16], evnames[N][16];
	for (size_t i = 0; i < N; i++) {
		pmc__region_state__init(&many[i]);
		pmc__event_state__init(&mev[i]);
		snprintf(names[i], sizeof(names[i]), "r%zu", i);
		snprintf(evnames[i], sizeof(evnames[i]), "e%zu", i % 64);
		many[i].name = names[i];
		many[i].wall = &ss;
		mev[i].name = evnames[i];
		mev[i].stats = &zero;
		mevp[i] = &mev[i];
		many[i].n_events = 1;
		many[i].events = &mevp[i];
		manyp[i] = &many[i];
	}
	ps[1].n_regions = N, ps[1].regions = manyp;
	load_hostile(&st, 0);
	/* One event more than a process may count: not a file the daemon wrote. */
	CHECK(PROCESS_MAX_EVENTS == 64);
	snprintf(evnames[N - 1], sizeof(evnames[N - 1]), "one-more");
	load_hostile(&st, -EBADMSG);
	snprintf(evnames[N - 1], sizeof(evnames[N - 1]), "e%d", (N - 1) % 64);

	/* Bytes that are not a state file: none, garbage, a length far past the end, a
	 * truncated file, a field nested past any sane depth. */
	struct model b = {0};
	CHECK(state_load_buffer(&b, (const uint8_t *)"", 0) == -EBADMSG);
	static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
	CHECK(state_load_buffer(&b, garbage, sizeof(garbage)) == -EBADMSG);
	/* processes (field 3), length 2^62: */
	static const uint8_t huge_len[] = {0x08, 0x01, 0x1a, 0x80, 0x80, 0x80, 0x80,
	                                   0x80, 0x80, 0x80, 0x80, 0x40, 0x00};
	CHECK(state_load_buffer(&b, huge_len, sizeof(huge_len)) == -EBADMSG);
	size_t len = pmc__state__get_packed_size(&st);
	uint8_t *buf = malloc(len);
	CHECK(buf);
	pmc__state__pack(&st, buf);
	for (size_t cut = 0; cut < len; cut += 1 + cut / 3) {
		int r = state_load_buffer(&b, buf, cut);
		CHECK(r == 0 || r == -EBADMSG);
		read_all(&b);
		registry_free(&b.reg);
	}
	/* Each byte flipped in turn, in the first KiB. */
	for (size_t i = 0; i < len && i < 1024; i++) {
		buf[i] ^= 0xa5;
		int r = state_load_buffer(&b, buf, len);
		CHECK(r == 0 || r == -EBADMSG);
		read_all(&b);
		registry_free(&b.reg);
		buf[i] ^= 0xa5;
	}
	free(buf);
	CHECK(!registry_first(&b.reg));
}

/* Retired figures nobody wrote: each file loads (kept as they are, or within the bound
 * with --metrics) or is refused whole, the processes loaded before them freed too. */
static void
test_state_retired_hostile(void)
{
	Pmc__HistBucket hb = PMC__HIST_BUCKET__INIT, *hbp = &hb;
	hb.index = STATS_BUCKETS - 1, hb.count = UINT64_MAX;
	Pmc__StatsState ss = PMC__STATS_STATE__INIT;
	ss.count = UINT64_MAX, ss.sum = UINT64_MAX, ss.min = UINT64_MAX, ss.max = 0;
	ss.mean = NAN, ss.m2 = -INFINITY, ss.n_hist = 1, ss.hist = &hbp;
	Pmc__EventState es[2] = {PMC__EVENT_STATE__INIT, PMC__EVENT_STATE__INIT};
	Pmc__EventState *esp[2] = {&es[0], &es[1]};
	es[0].name = "cycles", es[0].stats = &ss, es[0].scaled = UINT64_MAX;
	es[1].name = "instructions", es[1].ratio_sum = -INFINITY;
	Pmc__RegionState rs[2] = {PMC__REGION_STATE__INIT, PMC__REGION_STATE__INIT};
	Pmc__RegionState *rsp[2] = {&rs[0], &rs[1]};
	rs[0].name = "r", rs[0].count = UINT64_MAX, rs[0].wall = &ss;
	rs[0].n_events = 2, rs[0].events = esp;
	rs[1] = rs[0];
	rs[1].name = "s";
	Pmc__ProcessState ps[3] = {PMC__PROCESS_STATE__INIT, PMC__PROCESS_STATE__INIT,
	                           PMC__PROCESS_STATE__INIT};
	Pmc__ProcessState *psp[3] = {&ps[0], &ps[1], &ps[2]};
	ps[0].pid = 1, ps[0].uid = 7, ps[0].comm = "live";
	ps[0].n_regions = 2, ps[0].regions = rsp;
	ps[1] = ps[0];
	ps[1].pid = 0, ps[1].uid = UINT32_MAX, ps[1].comm = "a";
	ps[1].start = UINT64_MAX, ps[1].received = UINT64_MAX; /* ignored */
	ps[2] = ps[1];
	ps[2].uid = 0;
	Pmc__State st = PMC__STATE__INIT;
	st.version = 1, st.n_processes = 1, st.processes = psp;
	st.n_retired = 2, st.retired = psp + 1;
	st.evicted = st.retired_dropped = st.rejected = UINT64_MAX;
	load_hostile(&st, 0);

	/* A process among them; the same (uid, comm) twice, or once its comm is cut to
	 * 16 bytes; a region or an event twice in one; an out-of-range bucket. */
	ps[2].pid = 5;
	load_hostile(&st, -EBADMSG);
	ps[2].pid = -1;
	load_hostile(&st, -EBADMSG);
	ps[2].pid = 0;
	ps[2].uid = UINT32_MAX;
	load_hostile(&st, -EBADMSG);
	ps[1].comm = "0123456789abcdefX";
	ps[2].comm = "0123456789abcdefY";
	load_hostile(&st, -EBADMSG);
	ps[2].comm = "0123456789abcdeY";
	load_hostile(&st, 0);
	ps[2].uid = 0;
	/* Figures of their own, so that only the retired aggregate is at fault. */
	Pmc__HistBucket hb2 = hb, *hb2p = &hb2;
	Pmc__StatsState ss2 = ss;
	ss2.hist = &hb2p;
	Pmc__EventState res[2] = {es[0], es[1]};
	Pmc__EventState *resp[2] = {&res[0], &res[1]};
	res[0].stats = &ss2;
	Pmc__RegionState same[2] = {rs[0], rs[0]};
	Pmc__RegionState *samep[2] = {&same[0], &same[1]};
	same[0].wall = same[1].wall = &ss2;
	same[0].events = same[1].events = resp;
	ps[2].regions = samep;
	load_hostile(&st, -EBADMSG);
	same[1].name = "s";
	load_hostile(&st, 0);
	res[1].name = "cycles";
	load_hostile(&st, -EBADMSG);
	res[1].name = "instructions";
	hb2.index = STATS_BUCKETS;
	load_hostile(&st, -EBADMSG);
	hb2.index = UINT32_MAX;
	load_hostile(&st, -EBADMSG);
	hb2.index = 0;
	load_hostile(&st, 0);

	/* One without regions: nothing to restore, nothing made (and no duplicate). */
	ps[2].n_regions = 0;
	ps[2].uid = UINT32_MAX;
	ps[2].comm = "0123456789abcdefX";
	load_hostile(&st, 0);
	ps[2].n_regions = 2;
	ps[2].uid = 0;
	ps[2].comm = "b";

	/* Over the 64 events of a process: not a file the daemon wrote. */
	enum { N = 65 };
	static Pmc__RegionState many[N];
	static Pmc__RegionState *manyp[N];
	static Pmc__EventState mev[N];
	static Pmc__EventState *mevp[N];
	static char names[N][16], evnames[N][16];
	for (size_t i = 0; i < N; i++) {
		pmc__region_state__init(&many[i]);
		pmc__event_state__init(&mev[i]);
		snprintf(names[i], sizeof(names[i]), "r%zu", i);
		snprintf(evnames[i], sizeof(evnames[i]), "e%zu", i);
		many[i].name = names[i];
		mev[i].name = evnames[i];
		mevp[i] = &mev[i];
		many[i].n_events = 1;
		many[i].events = &mevp[i];
		manyp[i] = &many[i];
	}
	ps[2].n_regions = N - 1, ps[2].regions = manyp;
	load_hostile(&st, 0);
	ps[2].n_regions = N;
	load_hostile(&st, -EBADMSG);

	/* With --metrics already (a bound of 200, 50 per uid): uid 0's 64 regions go. */
	ps[2].n_regions = N - 1;
	st.retired_dropped = 1;
	size_t len = pmc__state__get_packed_size(&st);
	uint8_t *buf = malloc(len);
	CHECK(buf);
	len = pmc__state__pack(&st, buf);
	struct model b = {0};
	CHECK(registry_retire_enable(&b.reg, 200) == 0);
	CHECK(state_load_buffer(&b, buf, len) == 0);
	CHECK(b.reg.n_retired == 2 && b.reg.retired_dropped == 1 + 64);
	CHECK(registry_first_retired(&b.reg) && registry_first_retired(&b.reg)->uid == UINT32_MAX &&
	      !registry_process_next(registry_first_retired(&b.reg)));
	CHECK(b.reg.n_procs == 1 && b.reg.n_regions == 2);
	registry_free(&b.reg);
	/* Cut short, or a byte flipped: loaded or refused whole. */
	for (size_t cut = 0; cut < len; cut += 1 + cut / 3) {
		int r = state_load_buffer(&b, buf, cut);
		CHECK(r == 0 || r == -EBADMSG);
		if (r < 0)
			CHECK(!registry_first(&b.reg) && !registry_first_retired(&b.reg) &&
			      !b.reg.n_retired);
		registry_free(&b.reg);
		b.reg.retired_dropped = 0;
	}
	for (size_t i = 0; i < len && i < 1024; i++) {
		buf[i] ^= 0xa5;
		int r = state_load_buffer(&b, buf, len);
		CHECK(r == 0 || r == -EBADMSG);
		if (r < 0)
			CHECK(!registry_first(&b.reg) && !registry_first_retired(&b.reg) &&
			      !b.reg.n_retired);
		registry_free(&b.reg);
		b.reg.retired_dropped = 0;
		buf[i] ^= 0xa5;
	}
	free(buf);
}

/* Call path trees nobody wrote: a parent that is not an earlier node, a path deeper than
 * PMC_LIMIT_PATH_DEPTH, a node listed twice, a name no region may have, a node without figures:
 * each refuses the file whole (the process loaded before it freed too). */
static void
test_state_paths_hostile(void)
{
	enum { N = PMC_LIMIT_PATH_DEPTH + 1 };
	static Pmc__PathState node[N];
	static Pmc__PathState *nodep[N];
	static Pmc__RegionState nrs[N];
	Pmc__EventState es = PMC__EVENT_STATE__INIT, *esp = &es;
	es.name = "cycles";
	for (size_t i = 0; i < N; i++) {
		pmc__path_state__init(&node[i]);
		pmc__region_state__init(&nrs[i]);
		nrs[i].name = "r", nrs[i].count = 1;
		nrs[i].n_events = 1, nrs[i].events = &esp;
		node[i].parent = (uint32_t)i; /* a chain: r, r;r, ... */
		node[i].region = &nrs[i];
		nodep[i] = &node[i];
	}
	Pmc__RegionState rs = PMC__REGION_STATE__INIT, *rsp = &rs;
	rs.name = "r", rs.count = 1;
	Pmc__ProcessState ps[3] = {PMC__PROCESS_STATE__INIT, PMC__PROCESS_STATE__INIT,
	                           PMC__PROCESS_STATE__INIT};
	Pmc__ProcessState *psp[3] = {&ps[0], &ps[1], &ps[2]};
	ps[0].pid = 1, ps[0].comm = "first", ps[0].n_regions = 1, ps[0].regions = &rsp;
	ps[0].n_paths = 2, ps[0].paths = nodep;
	ps[1] = ps[0];
	ps[1].pid = 2, ps[1].comm = "tree";
	ps[1].n_paths = PMC_LIMIT_PATH_DEPTH; /* the deepest path kept */
	ps[1].untracked_depth = ps[1].untracked_limit = ps[1].untracked_older = UINT64_MAX;
	Pmc__State st = PMC__STATE__INIT;
	st.version = 1, st.n_processes = 2, st.processes = psp;
	load_hostile(&st, 0);

	/* One node deeper. */
	ps[1].n_paths = N;
	load_hostile(&st, -EBADMSG);
	ps[1].n_paths = 4;
	/* A parent that is the node itself, a later one, or none. */
	node[2].parent = 3;
	load_hostile(&st, -EBADMSG);
	node[2].parent = 4;
	load_hostile(&st, -EBADMSG);
	node[2].parent = UINT32_MAX;
	load_hostile(&st, -EBADMSG);
	/* The same (parent, name) twice: r;r again, or r again (a root); r;s and s are new
	 * nodes, their parent not the last node. */
	node[2].parent = 2;
	node[3].parent = 1;
	load_hostile(&st, -EBADMSG);
	nrs[3].name = "s";
	load_hostile(&st, 0);
	node[3].parent = 0;
	nrs[3].name = "r";
	load_hostile(&st, -EBADMSG);
	nrs[3].name = "s";
	load_hostile(&st, 0);
	nrs[3].name = "r";
	node[3].parent = 3;
	/* Names: empty, over 127 bytes, 127 bytes. */
	char longest[PMC_LIMIT_NAME_MAX + 2];
	memset(longest, 'x', sizeof(longest) - 1);
	longest[sizeof(longest) - 1] = 0;
	nrs[1].name = "";
	load_hostile(&st, -EBADMSG);
	nrs[1].name = longest;
	load_hostile(&st, -EBADMSG);
	longest[PMC_LIMIT_NAME_MAX] = 0;
	load_hostile(&st, 0);
	nrs[1].name = "r";
	/* No figures at all (no RegionState, so no name). */
	node[1].region = NULL;
	load_hostile(&st, -EBADMSG);
	node[1].region = &nrs[1];
	/* An event twice in one node; more than PROCESS_MAX_EVENTS over the nodes. */
	Pmc__EventState *twice[2] = {&es, &es};
	nrs[2].n_events = 2, nrs[2].events = twice;
	load_hostile(&st, -EBADMSG);
	nrs[2].n_events = 1, nrs[2].events = &esp;
	static Pmc__EventState mev[PROCESS_MAX_EVENTS];
	static Pmc__EventState *mevp[PROCESS_MAX_EVENTS];
	static char evnames[PROCESS_MAX_EVENTS][16];
	for (size_t i = 0; i < PROCESS_MAX_EVENTS; i++) {
		pmc__event_state__init(&mev[i]);
		snprintf(evnames[i], sizeof(evnames[i]), "e%zu", i);
		mev[i].name = evnames[i];
		mevp[i] = &mev[i];
	}
	/* "cycles" and 63 more: 64; then 64 more, 65. */
	nrs[3].n_events = PROCESS_MAX_EVENTS - 1, nrs[3].events = mevp;
	load_hostile(&st, 0);
	nrs[3].n_events = PROCESS_MAX_EVENTS;
	load_hostile(&st, -EBADMSG);
	nrs[3].n_events = 1, nrs[3].events = &esp;
	load_hostile(&st, 0);

	/* A retired aggregate has no call paths: those in a file are ignored, not saved. */
	ps[2] = ps[1];
	ps[2].pid = 0, ps[2].comm = "retired";
	st.n_retired = 1, st.retired = &psp[2];
	size_t len = pmc__state__get_packed_size(&st);
	uint8_t *buf = malloc(len);
	CHECK(buf);
	pmc__state__pack(&st, buf);
	struct model b = {0};
	CHECK(state_load_buffer(&b, buf, len) == 0);
	CHECK(b.reg.n_paths == 2 + 4 && registry_first_retired(&b.reg) &&
	      registry_first_retired(&b.reg)->n_paths == 0);
	CHECK(registry_first_retired(&b.reg)->untracked[UNTRACKED_DEPTH] == 0);
	uint8_t *e;
	size_t n;
	CHECK(state_encode(&b, 1, &e, &n) == 0);
	Pmc__State *o = pmc__state__unpack(NULL, n, e);
	CHECK(o && o->n_retired == 1 && o->retired[0]->n_paths == 0);
	CHECK(o->retired[0]->untracked_depth == 0);
	pmc__state__free_unpacked(o, NULL);
	free(e);
	registry_free(&b.reg);
	/* Cut short, or a byte flipped: loaded or refused whole. */
	for (size_t cut = 0; cut < len; cut += 1 + cut / 5) {
		int r = state_load_buffer(&b, buf, cut);
		CHECK(r == 0 || r == -EBADMSG);
		if (r < 0)
			CHECK(!registry_first(&b.reg) && !b.reg.n_paths &&
			      !registry_first_retired(&b.reg));
		read_all(&b);
		registry_free(&b.reg);
	}
	for (size_t i = 0; i < len && i < 1024; i++) {
		buf[i] ^= 0xa5;
		int r = state_load_buffer(&b, buf, len);
		CHECK(r == 0 || r == -EBADMSG);
		if (r < 0)
			CHECK(!registry_first(&b.reg) && !b.reg.n_paths &&
			      !registry_first_retired(&b.reg));
		read_all(&b);
		registry_free(&b.reg);
		buf[i] ^= 0xa5;
	}
	free(buf);
}

/* test-state seeds DIR: a few valid state files, for the fuzzer's corpus. */
static int
write_seeds(const char *out)
{
	struct model a = {0};
	snprintf(path, sizeof(path), "%s/small", out);
	fill(&a);
	CHECK(state_save(&a, path) == 0);
	/* Two processes, several events, a scaled one. */
	struct process *p = registry_process(&a.reg, getpid(), 1000);
	CHECK(p);
	static const char *const ev[] = {"cycles:u", "instructions", "task-clock"};
	for (unsigned k = 0; k < 3; k++)
		CHECK(registry_process_event_id(p, ev[k]) == (int)k);
	for (unsigned n = 0; n < 3; n++) {
		char name[16];
		snprintf(name, sizeof(name), "region-%u", n);
		struct region_agg *r = registry_process_region(&a.reg, p, name);
		CHECK(r);
		for (uint64_t v = 1; v < 1u << 20; v = v * 3 + n) {
			CHECK(stats_add(&r->wall, v, NULL) == 0);
			for (unsigned k = 0; k <= n; k++) {
				struct event_agg *e = registry_region_event(r, k);
				CHECK(e && stats_add(&e->st, v << k, NULL) == 0);
				e->scaled += k == 1;
				e->ratio_sum += k == 1 ? 0.5 : 0;
			}
			r->count++;
		}
	}
	a.samples = 12345, a.batches = 67, a.dropped = 8, a.lost = 9;
	snprintf(path, sizeof(path), "%s/two-processes", out);
	CHECK(state_save(&a, path) == 0);
	registry_free(&a.reg);
	struct model e = {0};
	snprintf(path, sizeof(path), "%s/empty", out);
	CHECK(state_save(&e, path) == 0);
	/* Retired figures (--metrics) of two uids, a live process. */
	struct model m = {0};
	fill_retired(&m);
	snprintf(path, sizeof(path), "%s/retired", out);
	CHECK(state_save(&m, path) == 0);
	registry_free(&m.reg);
	/* A call path tree (a, a;b, a;b;b) and untracked counts. */
	struct model t = {0};
	fill_paths(&t);
	snprintf(path, sizeof(path), "%s/paths", out);
	CHECK(state_save(&t, path) == 0);
	registry_free(&t.reg);
	return 0;
}

/* Every single bit of a small saved file flipped, and every truncation: each refused
 * (-EBADMSG), nothing loaded. Before the checksum, 12 of 25 flips loaded other figures. The
 * same file without its frame (a file of before) still loads, and a framed file decodes as
 * a daemon of before decodes it (version 1, unknown fields skipped): downgrades keep it. */
static void
test_state_checksum(void)
{
	struct model a = {0};
	fill(&a);
	uint8_t *buf;
	size_t len;
	CHECK(state_encode(&a, 7, &buf, &len) == 0);
	CHECK(len > 12 && buf[0] == 0x72 && buf[len - 5] == 0x7d);
	struct model b = {0};
	CHECK(state_load_buffer(&b, buf, len) == 0 && b.reg.n_procs == 1 && !b.state_unchecked);
	registry_free(&b.reg);
	b = (struct model){0};
	size_t flips = 0;
	for (size_t bit = 0; bit < 8 * len; bit++) {
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		int r = state_load_buffer(&b, buf, len);
		if (r != -EBADMSG || b.reg.n_procs)
			fprintf(stderr, "bit %zu of %zu bytes flipped: %d, %zu processes\n", bit,
			        len, r, b.reg.n_procs);
		CHECK(r == -EBADMSG && !registry_first(&b.reg) && b.samples == 0);
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		flips++;
	}
	for (size_t cut = 0; cut < len; cut++)
		CHECK(state_load_buffer(&b, buf, cut) == -EBADMSG && !registry_first(&b.reg));
	printf("# %zu single-bit flips and %zu truncations of a %zu-byte file: all refused\n",
	       flips, len, len);
	/* The file a daemon of before reads: version 1, the frame's fields as fields. */
	Pmc__State *st = pmc__state__unpack(NULL, len, buf);
	CHECK(st && st->version == 1 && st->n_processes == 1 && st->checksum != 0);
	pmc__state__free_unpacked(st, NULL);
	/* A file of before checksums: loaded as before, unchecked, and saved with one. */
	size_t old_len;
	uint8_t *old = unframe(buf, len, &old_len);
	size_t loaded = 0;
	for (size_t bit = 0; bit < 8 * old_len; bit++) {
		old[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		struct model o = {0};
		loaded += state_load_buffer(&o, old, old_len) == 0;
		registry_free(&o.reg);
		old[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	printf("# the same file without a checksum (a file of before): %zu of %zu single-bit "
	       "flips load\n",
	       loaded, 8 * old_len);
	CHECK(state_load_buffer(&b, old, old_len) == 0 && b.reg.n_procs == 1 && b.state_unchecked);
	CHECK(registry_first(&b.reg)->regions[0]->count == 100 && b.samples == 100);
	b.state_unchecked = false;
	same_bytes(&b, buf, len);
	registry_free(&b.reg);
	free(old);
	/* Through the file: refused, moved aside to FILE.bad (bytes as they were), the registry
	 * empty, and said in the server for Status. */
	char bad[192];
	snprintf(bad, sizeof(bad), "%s.bad", path);
	buf[len / 2] ^= 0x10;
	spit(path, buf, len, 0600);
	struct model c = {0};
	CHECK(state_load(&c, path) == -EBADMSG && !registry_first(&c.reg));
	CHECK(access(path, F_OK) < 0 && errno == ENOENT);
	CHECK(c.state_moved_aside && !strcmp(c.state_moved_aside, bad));
	CHECK(c.state_moved_reason && strstr(c.state_moved_reason, "checksum"));
	uint8_t back[4096];
	CHECK(len <= sizeof(back) && slurp(bad, back, sizeof(back)) == (ssize_t)len);
	CHECK(!memcmp(back, buf, len));
	free(c.state_moved_aside);
	/* Truncated: the same; FILE.bad replaced. */
	buf[len / 2] ^= 0x10;
	spit(path, buf, len - 1, 0600);
	struct model d = {0};
	CHECK(state_load(&d, path) == -EBADMSG && !registry_first(&d.reg));
	CHECK(d.state_moved_aside && slurp(bad, back, sizeof(back)) == (ssize_t)len - 1);
	free(d.state_moved_aside);
	CHECK(unlink(bad) == 0);
	/* Intact: loaded, nothing moved. */
	spit(path, buf, len, 0600);
	struct model e = {0};
	CHECK(state_load(&e, path) == 0 && e.reg.n_procs == 1 && !e.state_moved_aside);
	registry_free(&e.reg);
	unlink(path);
	free(buf);
	registry_free(&a.reg);
}

int
main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "big")) {
		measure(argv[2], (unsigned)atoi(argv[3]), (unsigned)atoi(argv[4]));
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "seeds"))
		return write_seeds(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "same-files")) {
		long r = syscall(SYS_kcmp, atoi(argv[2]), atoi(argv[3]), 2 /* KCMP_FILES */, 0, 0);
		if (r < 0) {
			perror("kcmp");
			return 1;
		}
		printf("%s\n", r == 0 ? "shared" : "apart");
		return 0;
	}
	int fds = pmc_test_count_fds();
	snprintf(dir, sizeof(dir), "/tmp/pmc-test-state.XXXXXX");
	CHECK(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/state", dir);
	snprintf(tmp_path, sizeof(tmp_path), "%s.tmp", path);
	PMC_TEST_RUN(test_state_round_trip);
	PMC_TEST_RUN(test_state_from_another_boot);
	PMC_TEST_RUN(test_state_refuses_unsafe_dir);
	PMC_TEST_RUN(test_state_tmp_not_ours);
	PMC_TEST_RUN(test_state_load_refuses);
	PMC_TEST_RUN(test_state_size_limit);
	PMC_TEST_RUN(test_state_job);
	PMC_TEST_RUN(test_state_hostile);
	PMC_TEST_RUN(test_state_retired_round_trip);
	PMC_TEST_RUN(test_state_retired_old_file);
	PMC_TEST_RUN(test_state_retired_bound);
	PMC_TEST_RUN(test_state_retired_budget);
	PMC_TEST_RUN(test_state_process_budget);
	PMC_TEST_RUN(test_state_retired_hostile);
	PMC_TEST_RUN(test_state_paths_round_trip);
	PMC_TEST_RUN(test_state_paths_shared);
	PMC_TEST_RUN(test_state_paths_shared_budget);
	PMC_TEST_RUN(test_state_paths_budget);
	PMC_TEST_RUN(test_state_paths_old_file);
	PMC_TEST_RUN(test_state_origin);
	PMC_TEST_RUN(test_state_paths_hostile);
	PMC_TEST_RUN(test_state_checksum);
	unlink(path);
	unlink(tmp_path);
	CHECK(rmdir(dir) == 0);
	CHECK(pmc_test_count_fds() == fds);
	printf("ok - no fd leaked\n");
	return 0;
}
